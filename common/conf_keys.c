/*
 * conf_keys: every key of cluster.conf in one table (conf_keys: section kind, name, setter,
 * whether it may repeat), and the setters of the process-wide sections: [cluster], [router],
 * [clients] and [node NAME], with the value setters they share (bounded integers and
 * durations, paths relative to the file, sizes, HOST:PORT listeners; strings and two-word
 * choices are conf_util.c's, for every section). The [service] setters are conf_service.c's,
 * the [client] ones conf_client.c's. Each setter returns NULL or the phrase that follows
 * `KEY: "VALUE"` in the error line.
 */
#include "conf_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CONF_NAME_MAX 64 /* [cluster] name, a znode path component */
#define CONF_SHARDS_MAX 1048576u
#define CONF_SESSION_MIN 1000u /* ms; ZooKeeper itself clamps to 2..20 ticks */
#define CONF_SESSION_MAX 600000u
#define CONF_DEADLINE_MAX 600000u
#define CONF_MEMORY_MIN (1024ull * 1024)

/* An integer or duration that must lie in [min, max]; range is how the phrase shows them. */
static const char *
set_u64_bounded(struct conf_parser *p, uint64_t *field, const char *v, bool duration, uint64_t min,
                uint64_t max, const char *range)
{
    const char *why;
    uint64_t n;

    why = duration ? rl_parse_duration_ms(v, &n) : rl_parse_u64(v, 0, UINT64_MAX, &n);
    if (why == NULL && (n < min || n > max)) {
        snprintf(p->why, sizeof(p->why), "is out of range (%s)", range);
        why = p->why;
    }
    if (why == NULL) {
        *field = n;
    }
    return why;
}

/* The same into a 32-bit field (max below 2^32). */
static const char *
set_bounded(struct conf_parser *p, uint32_t *field, const char *v, bool duration, uint64_t min,
            uint64_t max, const char *range)
{
    uint64_t n = 0;
    const char *why = set_u64_bounded(p, &n, v, duration, min, max, range);

    if (why == NULL) {
        *field = (uint32_t)n;
    }
    return why;
}

/*
 * A path key (secret_file, events_log, request_log): in a file, a relative path is taken
 * relative to the file's directory, so a config means the same files whatever the cwd of
 * the process that loads it. "" stays "" (off).
 */
static const char *
set_path(struct conf_parser *p, char **field, const char *v)
{
    char *full;

    if (p->dir == NULL || v[0] == '\0' || v[0] == '/') {
        return conf_set_string(p, field, v);
    }
    if (asprintf(&full, "%s/%s", p->dir, v) < 0) {
        return conf_nomem(p);
    }
    free(*field);
    *field = full;
    return NULL;
}

static const char *
set_cluster_name(struct conf_parser *p, const char *v)
{
    const char *why = conf_name_text(p, v);

    if (why != NULL) {
        return why;
    }
    if (!conf_valid_name(v, CONF_NAME_MAX)) {
        return "is not 1..64 characters of A-Z a-z 0-9 _ . - (nor . or ..)";
    }
    return conf_set_string(p, &p->c->cluster_name, v);
}

/* A ZooKeeper connect string: HOST:PORT[,HOST:PORT...][/CHROOT], or "" for none. */
static const char *
set_zookeeper(struct conf_parser *p, const char *v)
{
    static const char *const phrase = "is not HOST:PORT[,HOST:PORT...][/CHROOT]";
    char item[RL_CONF_LINE_MAX + 1];
    const char *q = v;
    const char *end = v + strlen(v);
    const char *slash = strchr(v, '/');
    const char *why;
    char *host;
    uint16_t port;
    size_t i;

    if (*v != '\0') {
        if (slash != NULL) {
            if (slash[1] == '\0') {
                return phrase;
            }
            for (i = 1; slash[i] != '\0'; i++) {
                if ((unsigned char)slash[i] <= ' ' || slash[i] == 0x7f) {
                    return phrase;
                }
            }
            end = slash;
        }
        for (;;) {
            const char *comma = memchr(q, ',', (size_t)(end - q));
            const char *stop = comma != NULL ? comma : end;

            memcpy(item, q, (size_t)(stop - q));
            item[stop - q] = '\0';
            why = rl_parse_hostport(item, &host, &port);
            if (why != NULL) {
                return strncmp(why, "has a port", 10) == 0 ? why : phrase;
            }
            free(host);
            if (comma == NULL) {
                break;
            }
            q = comma + 1;
        }
    }
    return conf_set_string(p, &p->c->zookeeper, v);
}

static const char *
set_session_timeout(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->session_timeout_ms, v, true, CONF_SESSION_MIN, CONF_SESSION_MAX,
                       "1s..10m");
}

static const char *
set_handoff_wait(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->handoff_wait_ms, v, true, 1, 600000, "1ms..10m");
}

static const char *
set_shards(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->shards, v, false, 1, CONF_SHARDS_MAX, "1..1048576");
}

static const char *
set_insecure(struct conf_parser *p, const char *v)
{
    return conf_set_yesno(&p->c->insecure, v);
}

static const char *
set_inline_failure(struct conf_parser *p, const char *v)
{
    return conf_set_either(&p->c->inline_fail_closed, v, "open", "closed",
                           "is not open or closed");
}

static const char *
set_rls_failure(struct conf_parser *p, const char *v)
{
    return conf_set_either(&p->c->rls_fail_error, v, "policy", "error",
                           "is not policy or error");
}

static const char *
set_rls_headers(struct conf_parser *p, const char *v)
{
    if (strcmp(v, "off") == 0) {
        p->c->rls_headers = RL_CONF_RLS_HEADERS_OFF;
    } else if (strcmp(v, "ratelimit") == 0) {
        p->c->rls_headers = RL_CONF_RLS_HEADERS_RATELIMIT;
    } else if (strcmp(v, "draft") == 0) {
        p->c->rls_headers = RL_CONF_RLS_HEADERS_DRAFT;
    } else {
        return "is not off, ratelimit or draft";
    }
    return NULL;
}

static const char *
set_fencing(struct conf_parser *p, const char *v)
{
    return conf_set_either(&p->c->fence_disconnect, v, "expiry", "disconnect",
                      "is not expiry or disconnect");
}

/* Only the path here: the file is read once the whole config is in (conf_auth_finish). */
/* Only the paths here: the files are read by the process that serves TLS (tls.h), which also
 * reloads them on SIGHUP; conf_auth_finish checks that the three go together. */
static const char *
set_tls_path(struct conf_parser *p, char **field, const char *v)
{
    if (p->tls_line == 0) {
        p->tls_line = p->line;
    }
    return set_path(p, field, v);
}

static const char *
set_tls_cert_file(struct conf_parser *p, const char *v)
{
    return set_tls_path(p, &p->c->tls_cert_file, v);
}

static const char *
set_tls_key_file(struct conf_parser *p, const char *v)
{
    return set_tls_path(p, &p->c->tls_key_file, v);
}

static const char *
set_tls_ca_file(struct conf_parser *p, const char *v)
{
    return set_tls_path(p, &p->c->tls_ca_file, v);
}

static const char *
set_secret_file(struct conf_parser *p, const char *v)
{
    p->secret_line = p->line;
    return set_path(p, &p->c->secret_file, v);
}

static const char *
set_router_listen(struct conf_parser *p, const char *v)
{
    char *host;
    uint16_t port;
    const char *why = rl_parse_hostport(v, &host, &port);

    if (why != NULL) {
        return why;
    }
    free(p->c->router_host);
    p->c->router_host = host;
    p->c->router_port = port;
    return NULL;
}

/*
 * `metrics = HOST:PORT`: an operator's HTTP listener (metrics.h). Empty: off. A bare PORT
 * binds 127.0.0.1, so the listener is loopback unless an address is written out.
 */
static const char *
set_metrics(char **host, uint16_t *port, const char *v)
{
    char *h;
    uint16_t pt;
    const char *why;
    size_t i;

    free(*host);
    *host = NULL;
    *port = 0;
    if (*v == '\0') {
        return NULL;
    }
    for (i = 0; v[i] >= '0' && v[i] <= '9'; i++) {
    }
    if (v[i] == '\0') {
        char buf[32];

        snprintf(buf, sizeof(buf), "127.0.0.1:%s", v);
        why = rl_parse_hostport(buf, &h, &pt);
    } else {
        why = rl_parse_hostport(v, &h, &pt);
    }
    if (why != NULL) {
        return why;
    }
    *host = h;
    *port = pt;
    return NULL;
}

/* [router] workers: threads serving clients, each with its own loop; 0 (unset): one per core. */
static const char *
set_router_workers(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->router_workers, v, false, 1, RL_CONF_WORKERS_MAX, "1..64");
}

static const char *
set_router_metrics(struct conf_parser *p, const char *v)
{
    return set_metrics(&p->c->router_metrics_host, &p->c->router_metrics_port, v);
}

/* [router] rls = HOST:PORT: Envoy's rate limit service over gRPC; a bare PORT is loopback. */
static const char *
set_router_rls(struct conf_parser *p, const char *v)
{
    return set_metrics(&p->c->rls_host, &p->c->rls_port, v);
}

/* [router] resp = HOST:PORT: the RESP front (Redis's protocol); a bare PORT is loopback. */
static const char *
set_router_resp(struct conf_parser *p, const char *v)
{
    return set_metrics(&p->c->resp_host, &p->c->resp_port, v);
}

/* [router] resp_service = NAME: the service CL.THROTTLE's keys count under (a service name,
 * 1..128 bytes of [A-Za-z0-9_.-]). */
static const char *
set_router_resp_service(struct conf_parser *p, const char *v)
{
    char *s;

    if (!conf_valid_name(v, 128)) { /* RL_WIRE_SERVICE_MAX */
        return "must be 1..128 characters of A-Z a-z 0-9 _ . -";
    }
    s = strdup(v);
    if (s == NULL) {
        return "out of memory";
    }
    free(p->c->resp_service);
    p->c->resp_service = s;
    return NULL;
}

/* [cluster] envoy_config: only the path here; the router loads the YAML at start. */
static const char *
set_envoy_config(struct conf_parser *p, const char *v)
{
    return set_path(p, &p->c->envoy_config, v);
}

/* [cluster] envoy_merge_domains = yes|no: upstream's MERGE_DOMAIN_CONFIG (docs/ENVOY.md). */
static const char *
set_envoy_merge_domains(struct conf_parser *p, const char *v)
{
    return conf_set_yesno(&p->c->envoy_merge_domains, v);
}

static const char *
set_node_metrics(struct conf_parser *p, const char *v)
{
    struct rl_node_conf *n = &p->c->nodes[p->sec.index];

    return set_metrics(&n->metrics_host, &n->metrics_port, v);
}

static const char *
set_deadline(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->deadline_ms, v, true, 1, CONF_DEADLINE_MAX, "1ms..10m");
}

/* [cluster] throttle_events: node/throttle.h's RL_THROTTLE_MAX, repeated to keep common/
 * free of node headers. */
#define CONF_THROTTLE_EVENTS_MAX 16384u

static const char *
set_throttle_events(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->throttle_events, v, false, 0, CONF_THROTTLE_EVENTS_MAX,
                       "0..16384");
}

static const char *
set_events_log(struct conf_parser *p, const char *v)
{
    return set_path(p, &p->c->events_log, v);
}

/* The events log's bounds (node/throttle.h's defaults are repeated in conf_create). */
static const char *
set_events_log_max_size(struct conf_parser *p, const char *v)
{
    if (strcmp(v, "0") == 0) {
        p->c->events_log_max_size = 0;
        return NULL;
    }
    return rl_parse_size(v, &p->c->events_log_max_size);
}

static const char *
set_events_log_keep(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->events_log_keep, v, false, 0, 1000, "0..1000");
}

static const char *
set_events_log_rate(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->events_log_rate, v, false, 0, 1000000, "0..1000000");
}

static const char *
set_request_log(struct conf_parser *p, const char *v)
{
    return set_path(p, &p->c->request_log, v);
}

static const char *
set_request_log_sample(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->log_sample, v, false, 1, UINT32_MAX, "1..4294967295");
}

/* on (the default size), off (0), or a number of entries. */
static const char *
set_deny_cache(struct conf_parser *p, const char *v)
{
    if (strcmp(v, "on") == 0) {
        p->c->deny_cache = RL_CONF_DENY_CACHE_DEFAULT;
        return NULL;
    }
    if (strcmp(v, "off") == 0) {
        p->c->deny_cache = 0;
        return NULL;
    }
    if (*v < '0' || *v > '9') {
        return "is not on, off or a number of entries (0..16777216)";
    }
    return set_bounded(p, &p->c->deny_cache, v, false, 0, RL_CONF_DENY_CACHE_MAX,
                       "on, off or 0..16777216");
}

/* [router] node_window: an integer (router/fairq.c). */
static const char *
set_node_window(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->node_window, v, false, 16, RL_CONF_NODE_WINDOW_MAX, "16..1048576");
}

static const char *
set_hot_keys(struct conf_parser *p, const char *v)
{
    return conf_set_either(&p->c->hot_keys, v, "off", "on", "is not on or off");
}

/* A size of memory: at least 1 MiB. */
static const char *
set_memory(uint64_t *field, const char *v)
{
    uint64_t bytes;
    const char *why = rl_parse_size(v, &bytes);

    if (why != NULL) {
        return why;
    }
    if (bytes < CONF_MEMORY_MIN) {
        return "is below the minimum of 1mb";
    }
    *field = bytes;
    return NULL;
}

static const char *
set_max_connections(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->clients.max_connections, v, false, 1, 1000000, "1..1000000");
}

static const char *
set_max_per_peer(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->clients.max_per_peer, v, false, 1, 1000000, "1..1000000");
}

static const char *
set_router_reserve(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->clients.router_reserve, v, false, 0, 10000, "0..10000");
}

static const char *
set_idle_timeout(struct conf_parser *p, const char *v)
{
    uint64_t ms;

    /* never: 0, or a duration of 0 (0s, 0ms) */
    if (strcmp(v, "0") == 0 || (rl_parse_duration_ms(v, &ms) == NULL && ms == 0)) {
        p->c->clients.idle_timeout_ms = 0;
        return NULL;
    }
    return set_u64_bounded(p, &p->c->clients.idle_timeout_ms, v, true, 1000, 7ull * 86400000,
                           "0 (never), or 1s..7d");
}

static const char *
set_frame_timeout(struct conf_parser *p, const char *v)
{
    return set_u64_bounded(p, &p->c->clients.frame_timeout_ms, v, true, 100, 3600000, "100ms..1h");
}

static const char *
set_auth_timeout(struct conf_parser *p, const char *v)
{
    return set_u64_bounded(p, &p->c->clients.auth_timeout_ms, v, true, 100, 300000, "100ms..5m");
}

static const char *
set_buffer_memory(struct conf_parser *p, const char *v)
{
    return set_memory(&p->c->clients.buffer_memory, v);
}

static const char *
set_request_log_max_size(struct conf_parser *p, const char *v)
{
    if (strcmp(v, "0") == 0) {
        p->c->log_max_size = 0;
        return NULL;
    }
    return rl_parse_size(v, &p->c->log_max_size);
}

static const char *
set_request_log_keep(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->log_keep, v, false, 0, 1000, "0..1000");
}

/* Two nodes on one address: the second could never listen, and ZooKeeper would publish one
 * address under two names. The phrase, or NULL when no other node of the file listens there. */
static const char *
listen_taken(struct conf_parser *p, const struct rl_node_conf *n, const char *host, uint16_t port)
{
    for (size_t i = 0; i < p->c->nnodes; i++) {
        const struct rl_node_conf *o = &p->c->nodes[i];

        if (o != n && o->host != NULL && o->port == port && strcasecmp(o->host, host) == 0) {
            snprintf(p->why, sizeof(p->why), "is also the listen address of [node %s] (line %d)",
                     o->name, o->line);
            return p->why;
        }
    }
    return NULL;
}

/* [node] listen, or advertise: the address others dial, so never a wildcard. */
static const char *
set_node_address(struct conf_parser *p, const char *v, bool advertise)
{
    struct rl_node_conf *n = &p->c->nodes[p->sec.index];
    char *host;
    uint16_t port;
    const char *why = rl_parse_hostport(v, &host, &port);

    if (why != NULL) {
        return why;
    }
    if (advertise) {
        why = rl_conf_is_wildcard(host)
                  ? "is a wildcard address: advertise is the address other hosts dial"
                  : NULL;
    } else {
        why = listen_taken(p, n, host, port);
    }
    if (why != NULL) {
        free(host);
        return why;
    }
    free(advertise ? n->adv_host : n->host);
    *(advertise ? &n->adv_host : &n->host) = host;
    *(advertise ? &n->adv_port : &n->port) = port;
    return NULL;
}

static const char *
set_node_listen(struct conf_parser *p, const char *v)
{
    return set_node_address(p, v, false);
}

static const char *
set_node_advertise(struct conf_parser *p, const char *v)
{
    return set_node_address(p, v, true);
}

static const char *
set_node_memory(struct conf_parser *p, const char *v)
{
    return set_memory(&p->c->nodes[p->sec.index].memory, v);
}

static const char *
set_node_drain_timeout(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->nodes[p->sec.index].drain_timeout_ms, v, true, 1, 3600000,
                       "1ms..1h");
}

/* [cluster] region = NAME: this cluster's region, one of [cluster] regions. */
static const char *
set_region(struct conf_parser *p, const char *v)
{
    if (!conf_valid_name(v, RL_CONF_REGION_NAME_MAX)) {
        return "is not 1..64 characters of A-Z a-z 0-9 _ . - (nor . or ..)";
    }
    p->region_line = p->line;
    return conf_set_string(p, &p->c->region, v);
}

/* [cluster] regions = NAME:WEIGHT ...: every region of the deployment and its weight. */
static const char *
set_regions(struct conf_parser *p, const char *v)
{
    char copy[RL_CONF_LINE_MAX + 1];
    char *save = NULL;
    struct rl_conf *c = p->c;
    uint32_t n = 0;

    snprintf(copy, sizeof(copy), "%s", v);
    for (char *w = strtok_r(copy, " \t,", &save); w != NULL; w = strtok_r(NULL, " \t,", &save)) {
        char *colon = strrchr(w, ':');
        uint64_t weight = 0;

        if (n == RL_CONF_REGIONS_MAX) {
            return "has more than 16 regions";
        }
        if (colon == NULL) {
            return "is not a list of NAME:WEIGHT";
        }
        *colon = '\0';
        if (!conf_valid_name(w, RL_CONF_REGION_NAME_MAX)) {
            return "has a region name that is not 1..64 characters of A-Z a-z 0-9 _ . -";
        }
        if (rl_parse_u64(colon + 1, 1, RL_CONF_REGION_WEIGHT_MAX, &weight) != NULL) {
            return "has a weight outside 1..1000000";
        }
        for (uint32_t i = 0; i < n; i++) {
            if (strcmp(c->regions[i].name, w) == 0) {
                return "names a region twice";
            }
        }
        snprintf(c->regions[n].name, sizeof(c->regions[n].name), "%s", w);
        c->regions[n].weight = (uint32_t)weight;
        n++;
    }
    if (n == 0) {
        return "is not a list of NAME:WEIGHT";
    }
    c->nregions = n;
    p->region_line = p->line;
    return NULL;
}

/* Every key, by section. */
const struct conf_key conf_keys[] = {
    {CONF_CLUSTER, "name", set_cluster_name, false},
    {CONF_CLUSTER, "zookeeper", set_zookeeper, false},
    {CONF_CLUSTER, "session_timeout", set_session_timeout, false},
    {CONF_CLUSTER, "shards", set_shards, false},
    {CONF_CLUSTER, "handoff_wait", set_handoff_wait, false},
    {CONF_CLUSTER, "insecure", set_insecure, false},
    {CONF_CLUSTER, "secret_file", set_secret_file, false},
    {CONF_CLUSTER, "tls_cert_file", set_tls_cert_file, false},
    {CONF_CLUSTER, "tls_key_file", set_tls_key_file, false},
    {CONF_CLUSTER, "tls_ca_file", set_tls_ca_file, false},
    {CONF_CLUSTER, "fencing", set_fencing, false},
    {CONF_CLUSTER, "inline_failure", set_inline_failure, false},
    {CONF_CLUSTER, "envoy_config", set_envoy_config, false},
    {CONF_CLUSTER, "envoy_merge_domains", set_envoy_merge_domains, false},
    {CONF_CLUSTER, "throttle_events", set_throttle_events, false},
    {CONF_CLUSTER, "events_log", set_events_log, false},
    {CONF_CLUSTER, "events_log_max_size", set_events_log_max_size, false},
    {CONF_CLUSTER, "events_log_keep", set_events_log_keep, false},
    {CONF_CLUSTER, "events_log_rate", set_events_log_rate, false},
    {CONF_CLUSTER, "region", set_region, false},
    {CONF_CLUSTER, "regions", set_regions, false},
    {CONF_ROUTER, "listen", set_router_listen, false},
    {CONF_ROUTER, "deadline", set_deadline, false},
    {CONF_ROUTER, "request_log", set_request_log, false},
    {CONF_ROUTER, "request_log_sample", set_request_log_sample, false},
    {CONF_ROUTER, "request_log_max_size", set_request_log_max_size, false},
    {CONF_ROUTER, "request_log_keep", set_request_log_keep, false},
    {CONF_ROUTER, "metrics", set_router_metrics, false},
    {CONF_ROUTER, "deny_cache", set_deny_cache, false},
    {CONF_ROUTER, "hot_keys", set_hot_keys, false},
    {CONF_ROUTER, "node_window", set_node_window, false},
    {CONF_ROUTER, "workers", set_router_workers, false},
    {CONF_ROUTER, "rls", set_router_rls, false},
    {CONF_ROUTER, "rls_failure", set_rls_failure, false},
    {CONF_ROUTER, "rls_headers", set_rls_headers, false},
    {CONF_ROUTER, "resp", set_router_resp, false},
    {CONF_ROUTER, "resp_service", set_router_resp_service, false},
    {CONF_CLIENTS, "max_connections", set_max_connections, false},
    {CONF_CLIENTS, "max_connections_per_peer", set_max_per_peer, false},
    {CONF_CLIENTS, "router_reserve", set_router_reserve, false},
    {CONF_CLIENTS, "idle_timeout", set_idle_timeout, false},
    {CONF_CLIENTS, "frame_timeout", set_frame_timeout, false},
    {CONF_CLIENTS, "auth_timeout", set_auth_timeout, false},
    {CONF_CLIENTS, "buffer_memory", set_buffer_memory, false},
    {CONF_CLIENTS, "adjust", conf_set_clients_adjust, false},
    {CONF_NODE, "listen", set_node_listen, false},
    {CONF_NODE, "advertise", set_node_advertise, false},
    {CONF_NODE, "memory", set_node_memory, false},
    {CONF_NODE, "metrics", set_node_metrics, false},
    {CONF_NODE, "drain_timeout", set_node_drain_timeout, false},
    {CONF_SERVICE, "failure", conf_set_failure, false},
    {CONF_SERVICE, "mode", conf_set_mode, false},
    {CONF_SERVICE, "limit", conf_set_limit, true},
    {CONF_SERVICE, "scope", conf_set_scope, false},
    {CONF_CLIENT, "token_sha256", conf_set_client_token, true},
    {CONF_CLIENT, "services", conf_set_client_services, false},
    {CONF_CLIENT, "stats", conf_set_client_stats, false},
    {CONF_CLIENT, "adjust", conf_set_client_adjust, false},
};

#define CONF_NKEYS (sizeof(conf_keys) / sizeof(conf_keys[0]))
_Static_assert(CONF_NKEYS <= CONF_KEYS_MAX, "conf_section.seen has a slot per key");
const size_t conf_nkeys = CONF_NKEYS;

void
conf_regions_finish(struct conf_parser *p)
{
    const struct rl_conf *c = p->c;
    bool found = false;

    if (c->nregions == 0 && c->region[0] == '\0') {
        return;
    }
    for (uint32_t i = 0; i < c->nregions; i++) {
        found |= strcmp(c->regions[i].name, c->region) == 0;
    }
    if (c->region[0] == '\0') {
        conf_fail(p, p->region_line, -EINVAL, "[cluster] regions is set but not [cluster] region");
    } else if (!found) {
        conf_fail(p, p->region_line, -EINVAL, "[cluster] region \"%s\" is not one of [cluster] regions",
                  c->region);
    }
}

uint32_t
rl_conf_region_slice(const struct rl_conf *c)
{
    uint64_t sum = 0, mine = 0;

    for (uint32_t i = 0; i < c->nregions; i++) {
        sum += c->regions[i].weight;
        if (strcmp(c->regions[i].name, c->region) == 0) {
            mine = c->regions[i].weight;
        }
    }
    if (sum == 0) {
        return RL_CONF_SLICE_UNIT;
    }
    mine = mine * RL_CONF_SLICE_UNIT / sum;
    return mine == 0 ? 1 : (uint32_t)mine;
}
