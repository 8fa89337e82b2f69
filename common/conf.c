/*
 * conf: the loaded cluster.conf, struct rl_conf (conf.h): its defaults before a file is
 * read (conf_create), the queries of a loaded one (a node by name, the address routers dial
 * it on, wildcard hosts) and its release. The rules in it are ruleset.h's, which also
 * answers "which rule applies to this request". The bottom of the config reader: reading a
 * file into it is conf_load.c's, above conf_sections.c, the keys' files and conf_util.c
 * (conf_int.h). Not for command-line options, nor for anything that changes after load.
 */
#include "conf.h"

#include "auth.h"
#include "conf_int.h"

#include <stdlib.h>
#include <string.h>

/* Queries of a loaded conf. */

const char *
rl_conf_node_dial(const struct rl_node_conf *n, uint16_t *port)
{
    *port = n->adv_host != NULL ? n->adv_port : n->port;
    return n->adv_host != NULL ? n->adv_host : n->host;
}

bool
rl_conf_is_wildcard(const char *host)
{
    return strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0 ||
           strcmp(host, "0:0:0:0:0:0:0:0") == 0;
}

bool
rl_conf_node_name_ok(const char *name)
{
    return name != NULL && conf_valid_name(name, CONF_NODE_NAME_MAX);
}

const struct rl_node_conf *
rl_conf_node(const struct rl_conf *c, const char *name)
{
    size_t i;

    for (i = 0; c != NULL && name != NULL && i < c->nnodes; i++) {
        if (strcmp(c->nodes[i].name, name) == 0) {
            return &c->nodes[i];
        }
    }
    return NULL;
}

/* Defaults and release. */

struct rl_conf *
conf_create(const char *name)
{
    struct rl_conf *c = calloc(1, sizeof(*c));

    if (c == NULL) {
        return NULL;
    }
    c->path = strdup(name);
    c->cluster_name = strdup("default");
    c->zookeeper = strdup("");
    c->session_timeout_ms = 4000;
    c->handoff_wait_ms = RL_CONF_HANDOFF_WAIT_MS;
    c->shards = 4096;
    c->router_host = strdup("127.0.0.1");
    c->router_port = 7400;
    c->deadline_ms = 50;
    c->request_log = strdup("");
    c->events_log = strdup("");
    c->throttle_events = 1024;
    c->events_log_max_size = 64ull << 20;
    c->events_log_keep = 4;
    c->events_log_rate = 100;
    c->secret_file = strdup("");
    c->tls_cert_file = strdup("");
    c->tls_key_file = strdup("");
    c->tls_ca_file = strdup("");
    c->envoy_config = strdup("");
    c->region = strdup("");
    c->resp_service = strdup("cell");
    c->log_sample = 1;
    c->deny_cache = RL_CONF_DENY_CACHE_DEFAULT;
    c->hot_keys = true;
    c->node_window = RL_CONF_NODE_WINDOW_DEFAULT;
    c->clients_adjust = true;
    c->log_max_size = 256ull << 20;
    c->log_keep = 4;
    c->clients = rl_conn_limits_default();
    if (c->path == NULL || c->cluster_name == NULL || c->zookeeper == NULL ||
        c->router_host == NULL || c->request_log == NULL || c->secret_file == NULL ||
        c->events_log == NULL || c->envoy_config == NULL || c->tls_cert_file == NULL ||
        c->tls_key_file == NULL || c->tls_ca_file == NULL ||
        c->region == NULL || c->resp_service == NULL) {
        rl_conf_destroy(c);
        return NULL;
    }
    return c;
}

void
rl_conf_destroy(struct rl_conf *c)
{
    size_t i;

    if (c == NULL) {
        return;
    }
    for (i = 0; i < c->nnodes; i++) {
        free(c->nodes[i].name);
        free(c->nodes[i].host);
        free(c->nodes[i].adv_host);
        free(c->nodes[i].metrics_host);
    }
    for (i = 0; i < c->nauth_clients; i++) {
        free(c->auth_clients[i].name);
        free(c->auth_clients[i].services);
        free(c->auth_clients[i].rules);
        rl_auth_wipe(c->auth_clients[i].hashes, sizeof(c->auth_clients[i].hashes));
    }
    free(c->auth_clients);
    if (c->secret != NULL) {
        rl_auth_wipe(c->secret, RL_AUTH_TOKEN_MAX);
        free(c->secret);
    }
    free(c->secret_file);
    free(c->tls_cert_file);
    free(c->tls_key_file);
    free(c->tls_ca_file);
    free(c->nodes);
    rl_ruleset_deinit(c);
    free(c->request_log);
    free(c->events_log);
    free(c->router_host);
    free(c->router_metrics_host);
    free(c->rls_host);
    free(c->resp_host);
    free(c->resp_service);
    free(c->envoy_config);
    free(c->region);
    free(c->zookeeper);
    free(c->cluster_name);
    free(c->path);
    free(c);
}

size_t
rl_conf_backstopped(const struct rl_conf *c, const char **first)
{
    size_t n = 0;

    *first = NULL;
    for (size_t i = 0; i < c->nrules; i++) {
        const struct rl_rule *rule = &c->rules[i];

        if (!rule->fail_closed && !rule->fail_unlimited && !rule->shadow) {
            *first = *first != NULL ? *first : rule->service;
            n++;
        }
    }
    return n;
}
