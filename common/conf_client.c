/*
 * conf_client: who may use a router. The [client NAME] sections of cluster.conf (each
 * client's token_sha256 lines, its services, whether it may ask STATS and whether it may
 * refund, with [clients] adjust as the default of the last), resolved against
 * the file's [service] sections once the whole file is in, and the cluster secret
 * (secret_file, read once the file is in) with the principal it stands for. Also the
 * lookups a router makes of them: rl_conf_client_by_token and rl_conf_is_secret, in
 * constant time, and rl_conf_rule_refundable for its deny cache.
 */
#include "conf_int.h"

#include "auth.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *
conf_set_client_token(struct conf_parser *p, const char *v)
{
    struct rl_client_conf *cl = &p->c->auth_clients[p->sec.index];

    if (cl->nhashes == RL_CONF_CLIENT_HASHES) {
        return "is one token too many: a client has at most 4 (for rotation)";
    }
    if (rl_auth_parse_hash(v, cl->hashes[cl->nhashes]) != 0) {
        return "is not 64 hex digits (the SHA-256 of the token: rl-cli hash-token)";
    }
    cl->nhashes++;
    return NULL;
}

const char *
conf_set_client_services(struct conf_parser *p, const char *v)
{
    struct rl_client_conf *cl = &p->c->auth_clients[p->sec.index];

    if (v[strspn(v, " \t,")] == '\0') {
        return "names no service (list them, or * for every service)";
    }
    cl->services_line = p->line;
    return conf_set_string(p, &cl->services, v);
}

const char *
conf_set_client_stats(struct conf_parser *p, const char *v)
{
    return conf_set_yesno(&p->c->auth_clients[p->sec.index].stats, v);
}

const char *
conf_set_client_adjust(struct conf_parser *p, const char *v)
{
    struct rl_client_conf *cl = &p->c->auth_clients[p->sec.index];

    cl->adjust_set = true;
    return conf_set_yesno(&cl->adjust, v);
}

/* [clients] adjust: the default of every [client NAME]'s, and the right of a client without
 * AUTH (no [client] sections) and of the cluster secret. */
const char *
conf_set_clients_adjust(struct conf_parser *p, const char *v)
{
    return conf_set_yesno(&p->c->clients_adjust, v);
}

int
conf_section_client(struct conf_parser *p, const char *name)
{
    struct rl_conf *c = p->c;
    struct rl_client_conf *cl;

    if (!conf_valid_name(name, CONF_NODE_NAME_MAX) || strcmp(name, "cluster") == 0) {
        conf_fail(p, p->line, -EINVAL,
                  "client name \"%s\" is not 1..63 characters of A-Z a-z 0-9 _ . - (nor . or "
                  ".., nor \"cluster\", the name of the cluster secret)",
                  name);
        return -EINVAL;
    }
    for (size_t i = 0; i < c->nauth_clients; i++) {
        if (strcmp(c->auth_clients[i].name, name) == 0) {
            conf_fail(p, p->line, -EINVAL, "duplicate section [client %s] (first at line %d)", name,
                      c->auth_clients[i].line);
            return -EINVAL;
        }
    }
    cl = conf_push(p, &c->auth_clients, c->nauth_clients, &p->auth_cap, sizeof(*cl), 4);
    if (cl == NULL || (cl->name = conf_strdup(p, name)) == NULL) {
        return -ENOMEM;
    }
    cl->line = p->line;
    p->sec.index = c->nauth_clients++;
    return 0;
}

/* Resolves a client's services line into its rules[] once every [service] is known. */
static void
client_resolve(struct conf_parser *p, struct rl_client_conf *cl)
{
    const struct rl_conf *c = p->c;
    char missing[RL_CONF_LINE_MAX + 1];
    int rc;

    cl->rules = calloc(c->nrules != 0 ? c->nrules : 1, sizeof(*cl->rules));
    if (cl->rules == NULL) {
        conf_nomem(p);
        return;
    }
    rc =
        rl_ruleset_resolve(cl->services, c, cl->rules, &cl->all_services, missing, sizeof(missing));
    if (rc == -ENOMEM) {
        conf_nomem(p);
    } else if (rc != 0) {
        conf_fail(p, cl->services_line, -EINVAL,
                  "services: \"%s\" has no [service %s] section in this file", missing, missing);
    }
}

void
conf_auth_finish(struct conf_parser *p)
{
    struct rl_conf *c = p->c;
    char why[320];
    int rc;

    for (size_t i = 0; i < c->nauth_clients && p->err == 0; i++) {
        client_resolve(p, &c->auth_clients[i]);
        if (!c->auth_clients[i].adjust_set) {
            c->auth_clients[i].adjust = c->clients_adjust;
        }
    }
    c->cluster_client.name = (char *)"cluster";
    c->cluster_client.all_services = true;
    c->cluster_client.stats = true;
    c->cluster_client.adjust = c->clients_adjust;
    if (p->err == 0 && ((c->tls_cert_file[0] == '\0') != (c->tls_key_file[0] == '\0') ||
                        (c->tls_cert_file[0] == '\0') != (c->tls_ca_file[0] == '\0'))) {
        conf_fail(p, p->tls_line, -EINVAL,
                  "tls_cert_file, tls_key_file and tls_ca_file go together: set all three "
                  "(TLS on) or none");
        return;
    }
    if (p->err != 0 || c->secret_file[0] == '\0') {
        return;
    }
    c->secret = malloc(RL_AUTH_TOKEN_MAX);
    if (c->secret == NULL) {
        conf_nomem(p);
        return;
    }
    rc = rl_auth_read_secret(c->secret_file, RL_AUTH_SECRET_MIN, c->secret, RL_AUTH_TOKEN_MAX,
                             &c->secret_len, why, sizeof(why));
    if (rc != 0) {
        conf_fail(p, p->secret_line, -EINVAL, "secret_file: %s", why);
        return;
    }
    rl_auth_sha256(c->secret, c->secret_len, c->secret_hash);
}

const struct rl_client_conf *
rl_conf_client_by_token(const struct rl_conf *c, const char *token, size_t len)
{
    const struct rl_client_conf *found = NULL;
    uint8_t h[RL_AUTH_HASH_LEN];

    rl_auth_sha256(token, len, h);
    /* Every hash is compared, whatever matched first. */
    for (size_t i = 0; i < c->nauth_clients; i++) {
        for (uint32_t j = 0; j < c->auth_clients[i].nhashes; j++) {
            if (rl_auth_equal(h, c->auth_clients[i].hashes[j], RL_AUTH_HASH_LEN) && found == NULL) {
                found = &c->auth_clients[i];
            }
        }
    }
    if (c->secret != NULL && rl_auth_equal(h, c->secret_hash, RL_AUTH_HASH_LEN) && found == NULL) {
        found = &c->cluster_client;
    }
    rl_auth_wipe(h, sizeof(h));
    return found;
}

bool
rl_conf_is_secret(const struct rl_conf *c, const char *token, size_t len)
{
    uint8_t h[RL_AUTH_HASH_LEN];
    bool ok;

    if (c->secret == NULL) {
        return false;
    }
    rl_auth_sha256(token, len, h);
    ok = rl_auth_equal(h, c->secret_hash, RL_AUTH_HASH_LEN);
    rl_auth_wipe(h, sizeof(h));
    return ok;
}

bool
rl_conf_rule_refundable(const struct rl_conf *c, const struct rl_rule *r)
{
    if (c->nauth_clients == 0 || (c->secret != NULL && c->cluster_client.adjust)) {
        return c->clients_adjust;
    }
    for (size_t i = 0; i < c->nauth_clients; i++) {
        if (c->auth_clients[i].adjust && rl_conf_client_may(&c->auth_clients[i], r)) {
            return true;
        }
    }
    return false;
}
