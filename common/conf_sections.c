/*
 * conf_sections: the section headers of cluster.conf. conf_section_open parses a header
 * line into its kind (conf_kinds) and arguments, refuses unknown, malformed and duplicate
 * sections, and creates the [node NAME] entry (the [service] and [client] ones are
 * conf_service.c's and conf_client.c's); conf_section_close checks what a section must
 * hold once its keys are in (a node's listen, a client's tokens and services, a service's
 * limit). Every name of a header is printable UTF-8 (conf_util.c's conf_name_text, called
 * here for all of them). Called by conf_load.c; calls conf_service.c, conf_client.c and
 * conf_util.c. Not for keys (conf_keys.c).
 */
#include "conf_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "utf8.h"

const struct conf_kind_def conf_kinds[] = {
    [CONF_CLUSTER] = {"cluster", 0, 0, "[cluster]", {NULL, NULL}},
    [CONF_ROUTER] = {"router", 0, 0, "[router]", {NULL, NULL}},
    [CONF_CLIENTS] = {"clients", 0, 0, "[clients]", {NULL, NULL}},
    [CONF_NODE] = {"node", 1, 1, "[node NAME]", {"node", NULL}},
    [CONF_SERVICE] = {"service",
                      1,
                      2,
                      "[service SERVICE] or [service SERVICE ENDPOINT]",
                      {"service", "endpoint"}},
    [CONF_CLIENT] = {"client", 1, 1, "[client NAME]", {"client", NULL}},
};

void
conf_section_close(struct conf_parser *p)
{
    const struct rl_conf *c = p->c;

    if (!p->in_section) {
        return;
    }
    p->in_section = false;
    if (p->sec.kind == CONF_NODE && c->nodes[p->sec.index].host == NULL) {
        conf_fail(p, p->sec.line, -EINVAL, "[node %s] has no listen", c->nodes[p->sec.index].name);
    } else if (p->sec.kind == CONF_NODE && rl_conf_is_wildcard(c->nodes[p->sec.index].host) &&
               c->nodes[p->sec.index].adv_host == NULL) {
        conf_fail(p, p->sec.line, -EINVAL,
                  "[node %s] listens on the wildcard address %s: add advertise = HOST:PORT, "
                  "the address routers dial",
                  c->nodes[p->sec.index].name, c->nodes[p->sec.index].host);
    } else if (p->sec.kind == CONF_CLIENT && c->auth_clients[p->sec.index].nhashes == 0) {
        conf_fail(p, p->sec.line, -EINVAL, "[client %s] has no token_sha256",
                  c->auth_clients[p->sec.index].name);
    } else if (p->sec.kind == CONF_CLIENT && c->auth_clients[p->sec.index].services == NULL) {
        conf_fail(p, p->sec.line, -EINVAL,
                  "[client %s] has no services (list them, or * for every service)",
                  c->auth_clients[p->sec.index].name);
    } else if (p->sec.kind == CONF_SERVICE && c->rules[p->sec.index].ntiers == 0) {
        const struct rl_rule *r = &c->rules[p->sec.index];

        conf_fail(p, p->sec.line, -EINVAL, "[service %s%s%s] has no limit", r->service,
                  r->endpoint != NULL ? " " : "", r->endpoint != NULL ? r->endpoint : "");
    }
}

static int
section_node(struct conf_parser *p, const char *name)
{
    struct rl_conf *c = p->c;
    const struct rl_node_conf *old = rl_conf_node(c, name);
    struct rl_node_conf *n;

    if (!conf_valid_name(name, CONF_NODE_NAME_MAX)) {
        conf_fail(p, p->line, -EINVAL,
                  "node name \"%s\" is not 1..63 characters of A-Z a-z 0-9 _ . - (nor . or ..)",
                  name);
        return -EINVAL;
    }
    if (old != NULL) {
        conf_fail(p, p->line, -EINVAL, "duplicate section [node %s] (first at line %d)", name,
                  old->line);
        return -EINVAL;
    }
    n = conf_push(p, &c->nodes, c->nnodes, &p->nodes_cap, sizeof(*n), 4);
    if (n == NULL || (n->name = conf_strdup(p, name)) == NULL) {
        return -ENOMEM;
    }
    n->memory = RL_CONF_DEFAULT_MEMORY;
    n->line = p->line;
    p->sec.index = c->nnodes++;
    return 0;
}

void
conf_section_open(struct conf_parser *p, char *s, char *e)
{
    char *arg[4];
    char *save = NULL;
    int nargs = 0;
    int kind;
    int *seen_line;
    int rc = 0;

    if (e[-1] != ']' || e - s < 2) {
        conf_fail(p, p->line, -EINVAL, "malformed section header");
        return;
    }
    e[-1] = '\0';
    for (char *w = strtok_r(s + 1, " \t\v\f", &save); w != NULL && nargs < 4;
         w = strtok_r(NULL, " \t\v\f", &save)) {
        arg[nargs++] = w;
    }
    if (nargs == 0) {
        conf_fail(p, p->line, -EINVAL, "malformed section header");
        return;
    }
    for (kind = 0; kind <= CONF_CLIENT && strcmp(arg[0], conf_kinds[kind].name) != 0; kind++) {
    }
    if (kind > CONF_CLIENT) {
        conf_fail(p, p->line, -EINVAL,
                  "unknown section [%s] (use cluster, router, clients, node, service or client)",
                  arg[0]);
        return;
    }
    if (nargs - 1 < conf_kinds[kind].min_args || nargs - 1 > conf_kinds[kind].max_args) {
        conf_fail(p, p->line, -EINVAL, "malformed section header: expected %s",
                  conf_kinds[kind].usage);
        return;
    }
    if (p->rules_only && kind != CONF_SERVICE) {
        conf_fail(p, p->line, -EINVAL,
                  "[%s] in a rules file, which holds only [service ...] sections", arg[0]);
        return;
    }
    for (int i = 1; i < nargs; i++) {
        const char *why = conf_name_text(p, arg[i]);

        if (why != NULL) {
            conf_fail(p, p->line, -EINVAL, "%s name \"%s\" %s", conf_kinds[kind].args[i - 1],
                      arg[i], why);
            return;
        }
    }
    memset(&p->sec, 0, sizeof(p->sec));
    p->sec.kind = (enum conf_kind)kind;
    p->sec.line = p->line;
    switch (p->sec.kind) {
    case CONF_CLUSTER:
    case CONF_ROUTER:
    case CONF_CLIENTS:
        seen_line = p->sec.kind == CONF_CLUSTER  ? &p->cluster_line
                    : p->sec.kind == CONF_ROUTER ? &p->router_line
                                                 : &p->clients_line;
        if (*seen_line != 0) {
            conf_fail(p, p->line, -EINVAL, "duplicate section [%s] (first at line %d)", arg[0],
                      *seen_line);
            return;
        }
        *seen_line = p->line;
        break;
    case CONF_NODE:
        rc = section_node(p, arg[1]);
        break;
    case CONF_SERVICE:
        rc = conf_section_service(p, arg[1], nargs == 3 ? arg[2] : NULL);
        break;
    case CONF_CLIENT:
        rc = conf_section_client(p, arg[1]);
        break;
    }
    p->in_section = rc == 0;
}
