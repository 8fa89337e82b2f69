/*
 * conf: cluster.conf (docs/CONFIG.md) parsed with libinih into one immutable struct: the
 * cluster, router, clients, node and client sections, and the [service] sections' rules,
 * whose model, index and swap are ruleset.h's. Every process loads the same file through
 * this module. A path in a file (secret_file, events_log, request_log) that is relative is
 * taken relative to the file's directory. Not for command-line options, which each main.c
 * owns (it may use parse.h's value parsers). After a successful load every string field is
 * non-NULL (possibly ""), except rl_rule.endpoint.
 */
#ifndef RL_CONF_H
#define RL_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "connlimits.h"

#include "parse.h"
#include "ruleset.h"

/*
 * The longest line of a file once comments and surrounding blanks are gone. Physical lines
 * may be longer (a long comment); a `[service S E]` header is at most 270 bytes, so only an
 * absurd value reaches it.
 */
#define RL_CONF_LINE_MAX 4096
#define RL_CONF_WORKERS_MAX 64 /* [router] workers at most */

/* One `[client NAME]` section: who may use a router, and for what (docs/CONFIG.md). */
#define RL_CONF_CLIENT_HASHES 4 /* token_sha256 lines per client, for rotation */
/* [router] rls_headers: the response_headers_to_add of a ShouldRateLimit answer. */
enum rl_conf_rls_headers {
    RL_CONF_RLS_HEADERS_OFF = 0,
    RL_CONF_RLS_HEADERS_RATELIMIT, /* X-RateLimit-Limit, -Remaining, -Reset (envoyproxy/ratelimit) */
    RL_CONF_RLS_HEADERS_DRAFT,     /* RateLimit, RateLimit-Policy (IETF httpapi draft) */
};

struct rl_client_conf {
    char *name;
    uint8_t hashes[RL_CONF_CLIENT_HASHES][32]; /* SHA-256 of each accepted token */
    uint32_t nhashes;
    bool all_services; /* services = * */
    bool stats;        /* may ask STATS */
    bool adjust;       /* may refund (ADJUST with delta < 0); [clients] adjust unless set */
    bool adjust_set;   /* `adjust` was written in its section */
    char *services;    /* as written; NULL when not set */
    bool *rules;       /* rules[i]: may CHECK under rule i (every rule when all_services) */
    int line;
    int services_line;
};

struct rl_node_conf {
    char *name;
    char *host; /* from listen */
    uint16_t port;
    char *adv_host; /* from advertise: what others dial; NULL when not set (then listen) */
    uint16_t adv_port;
    uint64_t memory;    /* bytes of counters before eviction; RL_CONF_DEFAULT_MEMORY if unset */
    uint32_t drain_timeout_ms; /* `drain_timeout`: how long SIGTERM's handoff may take;
                                  RL_CONF_DRAIN_TIMEOUT_MS if unset (0) */
    char *metrics_host; /* `metrics`: the operator's HTTP listener (metrics.h); NULL: off */
    uint16_t metrics_port;
    int line;
};

#define RL_CONF_DENY_CACHE_DEFAULT 65536u /* [router] deny_cache = on */
#define RL_CONF_DENY_CACHE_MAX (1u << 24)
#define RL_CONF_DEFAULT_MEMORY (1024ull * 1024 * 1024)
#define RL_CONF_DRAIN_TIMEOUT_MS 10000u /* [node NAME] drain_timeout's default */
#define RL_CONF_HANDOFF_WAIT_MS 2000u   /* [cluster] handoff_wait's default */
#define RL_CONF_NODE_WINDOW_DEFAULT 32768u /* [router] node_window's default */
#define RL_CONF_NODE_WINDOW_MAX (1u << 20)

/* Regions (docs/REGIONS.md): [cluster] regions = NAME:WEIGHT ..., at most this many. */
#define RL_CONF_REGIONS_MAX 16
#define RL_CONF_REGION_NAME_MAX 64
#define RL_CONF_REGION_WEIGHT_MAX 1000000u
/* Slices of a global limit are in thousandths of it (per mille). */
#define RL_CONF_SLICE_UNIT 1000u
struct rl_region_conf {
    char name[RL_CONF_REGION_NAME_MAX + 1];
    uint32_t weight; /* 1..RL_CONF_REGION_WEIGHT_MAX */
};

/*
 * The path keys (secret_file, events_log, request_log) of a file are absolute once loaded:
 * a relative one is joined to the file's directory (as written when it cannot be resolved).
 * From rl_conf_parse's string they stay as written, relative to the cwd.
 */
struct rl_conf {
    char *path;
    /* [cluster] */
    char *cluster_name;          /* default "default" */
    char *zookeeper;             /* "" = static membership */
    uint32_t session_timeout_ms; /* default 4000 */
    uint32_t shards;             /* default 4096, 1..1048576 */
    bool insecure;               /* serve non-loopback addresses with no authentication */
    bool fence_disconnect;       /* fencing = disconnect: nodes answer no CHECK while their
                                    ZooKeeper session is not connected (else: while it is
                                    known lost, "expiry") */
    bool inline_fail_closed;     /* inline_failure = closed: a router answers FAIL_CLOSED to
                                    an inline-limited CHECK whose owner cannot be reached */
    char *envoy_config;          /* envoyproxy/ratelimit YAML (file or directory) the router's
                                    gRPC front answers from (docs/ENVOY.md); "" = none */
    bool envoy_merge_domains;    /* envoy_merge_domains = yes: a domain in several files has
                                    its descriptors merged (upstream's MERGE_DOMAIN_CONFIG) */
    char *secret_file;           /* "" = no cluster secret */
    char *tls_cert_file;         /* TLS on every listener and router-to-node connection */
    char *tls_key_file;          /* (tls.h): the three together, or "" = plain TCP */
    char *tls_ca_file;
    char *secret;                /* the secret read from it at load; NULL when none */
    size_t secret_len;
    uint8_t secret_hash[32];  /* its SHA-256, to compare AUTH tokens with */
    uint32_t throttle_events; /* throttling episodes a node keeps (node/throttle.h): open
                                 and closed each; default 1024, 0 = off, max 16384 */
    char *events_log;         /* closed episodes appended as JSON lines; "" = off; %n is
                                 the node's name */
    uint64_t events_log_max_size; /* rotate the events log before it passes this; 0 = never;
                                     default 64 MiB */
    uint32_t events_log_keep;     /* rotated events logs kept; default 4 */
    uint32_t events_log_rate;     /* episode lines written a second at most; 0 = no cap;
                                     default 100 */
    /* [router] */
    char *router_host;         /* default 127.0.0.1; an IPv6 address comes without brackets */
    uint16_t router_port;      /* default 7400 */
    uint32_t deadline_ms;      /* default 50 */
    char *request_log;         /* "" = off */
    uint32_t log_sample;       /* log one request in N; default 1 */
    uint64_t log_max_size;     /* rotate the request log at this size; 0 = never; default 256 MiB */
    uint32_t log_keep;         /* rotated request logs kept; default 4 */
    uint32_t deny_cache;       /* LIMITED answers remembered (router/denycache.h); 0 = off;
                                  default RL_CONF_DENY_CACHE_DEFAULT */
    bool hot_keys;             /* count the hot (service, user) keys; default on */
    /* [router] node_window: requests a worker keeps sent to one node and not yet answered
     * by it; past that, they wait in the router, served fairly between its clients
     * (router/fairq.c); default RL_CONF_NODE_WINDOW_DEFAULT */
    uint32_t node_window;
    char *router_metrics_host; /* [router] metrics: HTTP listener (metrics.h); NULL: off */
    uint16_t router_metrics_port;
    char *rls_host;            /* [router] rls: Envoy's rate limit service (gRPC); NULL: off */
    uint16_t rls_port;
    bool rls_fail_error;       /* [router] rls_failure = error: a call with a part left without
                                  a decision is answered UNAVAILABLE; default policy */
    uint8_t rls_headers;       /* [router] rls_headers: enum rl_conf_rls_headers; default off */
    char *resp_host;           /* [router] resp: the RESP front (docs/RESP.md); NULL: off */
    uint16_t resp_port;
    char *resp_service;        /* [router] resp_service: CL.THROTTLE's service; default "cell" */
    uint32_t router_workers;   /* [router] workers: 1..RL_CONF_WORKERS_MAX; 0: one per core */
    /* [clients]: what each process's listener allows its clients (connlimits.h) */
    struct rl_conn_limits clients;
    /* [clients] adjust: whether clients may refund (ADJUST with delta < 0) through a router,
     * for a client without AUTH and for every [client NAME] that does not say; default yes */
    bool clients_adjust;
    /* [client NAME] sections, in file order; when there is one, a router's clients must AUTH */
    struct rl_client_conf *auth_clients;
    size_t nauth_clients;
    /* the principal a router's client has when it presents the cluster secret */
    struct rl_client_conf cluster_client;
    /* [node NAME] sections, in file order */
    struct rl_node_conf *nodes;
    size_t nnodes;
    /* [service ...] sections, in file order, and all their tiers */
    struct rl_rule *rules;
    size_t nrules;
    struct rl_tier *tiers;
    size_t ntiers;
    /* private: the (service, endpoint) -> rule index */
    uint32_t *index;
    size_t index_cap;
    /* A 63-bit hash of the rules as parsed (every section's service, endpoint, failure, mode
     * and tiers, in file order; not comments nor layout): equal on every process that runs
     * the same rules. STATS rules_digest. */
    uint64_t rules_digest;
    /* [cluster] region and regions (docs/REGIONS.md), last: the hot fields above keep their
     * places. region "" = none. */
    char *region;
    struct rl_region_conf regions[RL_CONF_REGIONS_MAX];
    uint32_t nregions;
    /* [cluster] handoff_wait (docs/OPERATIONS.md, "Planned moves"): how long a shard in
     * flight may be waited for (a new owner for its counters, a router for its new owner);
     * default RL_CONF_HANDOFF_WAIT_MS */
    uint32_t handoff_wait_ms;
};

/* Where the rules a process runs came from, and how reloads went: STATS rules_version,
 * rules_digest, rules_reloads and rules_reload_failures (docs/OPERATIONS.md, "Changing
 * rules live"). version 0: the --config file; N >= 1: the rules znode of ZooKeeper at data
 * version N - 1. */
struct rl_rules_status {
    int64_t version;
    int64_t digest;    /* rl_conf.rules_digest */
    uint64_t reloads;  /* rule sets applied since start (SIGHUP or ZooKeeper) */
    uint64_t failures; /* rule sets refused (did not parse, or no memory) */
};

/*
 * Loads path. Returns 0 with *out set (free with rl_conf_destroy), or a negative errno with
 * *out NULL and err holding one line "FILE:LINE: what is wrong" (or "FILE: what is wrong"
 * when the file cannot be read): -EINVAL for a bad file, -ENOMEM, or fopen's or read's
 * errno (-ENOENT, -EACCES, -EISDIR...). Relative paths in the file are the file's directory's
 * (struct rl_conf). err may be NULL when errlen is 0; a short err gets a
 * truncated, terminated line. Parsing stops at the first error. Not thread-safe against
 * another load (libinih's options are process globals), which is why processes load once at
 * start-up; the loaded conf is immutable and may be shared by threads.
 */
int rl_conf_load(const char *path, struct rl_conf **out, char *err, size_t errlen);

/* The same from a NUL-terminated string, naming it `name` in errors (tests). */
int rl_conf_parse(const char *name, const char *text, struct rl_conf **out, char *err,
                  size_t errlen);

/*
 * A rules file (docs/CONFIG.md, "Rules files"): text holding only [service ...] sections,
 * parsed and checked as rl_conf_parse does them; any other section is an error
 * "NAME:LINE: ...". Returns 0 with *out a conf holding only those rules (every other field
 * at its default), or as rl_conf_parse. rl_conf_load_rules reads a file.
 */
int rl_conf_parse_rules(const char *name, const char *text, struct rl_conf **out, char *err,
                        size_t errlen);
int rl_conf_load_rules(const char *path, struct rl_conf **out, char *err, size_t errlen);

/*
 * The slice of a global limit this cluster enforces before any reconciliation, in
 * thousandths (RL_CONF_SLICE_UNIT): its region's weight over the sum of the weights, rounded
 * down, at least 1; RL_CONF_SLICE_UNIT (the whole limit) when no regions are configured.
 */
uint32_t rl_conf_region_slice(const struct rl_conf *c);

/* How many rules have `failure = open` (not open_unlimited, not closed, not shadow): those
 * the routers' backstop judges while their owner cannot be reached; *first: the first one's
 * service (NULL when none). Both daemons say at start what that now means. */
size_t rl_conf_backstopped(const struct rl_conf *c, const char **first);

/* Frees c and everything it holds; NULL is a no-op. */
void rl_conf_destroy(struct rl_conf *c);

/* The address others dial to reach node n: its advertise, else its listen. */
const char *rl_conf_node_dial(const struct rl_node_conf *n, uint16_t *port);

/* True for a wildcard host (0.0.0.0, ::, [::]): fine to listen on, never an address to dial. */
bool rl_conf_is_wildcard(const char *host);

/* True for a name a node can have (a [node NAME] section's, its znode's): 1 to 63 letters,
 * digits, '.', '_' or '-', not "." or "..". */
bool rl_conf_node_name_ok(const char *name);

/*
 * Who presents token[0..len) to a router: the [client NAME] one of whose token_sha256 lines
 * is the token's SHA-256, &c->cluster_client for the cluster secret, else NULL. Compares with
 * every hash in constant time, so the time taken says nothing about which part matched.
 */
const struct rl_client_conf *rl_conf_client_by_token(const struct rl_conf *c, const char *token,
                                                     size_t len);

/* Whether token[0..len) is the cluster secret (constant time); false when there is none. */
bool rl_conf_is_secret(const struct rl_conf *c, const char *token, size_t len);

/* Whether client cl may CHECK under rule r. */
static inline bool
rl_conf_client_may(const struct rl_client_conf *cl, const struct rl_rule *r)
{
    return cl->all_services || (r != NULL && cl->rules[r->id]);
}

/* Whether the client cl (NULL: a connection without AUTH, where none is required) may refund
 * (ADJUST with delta < 0) through a router: its `adjust`, else [clients] adjust. */
static inline bool
rl_conf_may_refund(const struct rl_conf *c, const struct rl_client_conf *cl)
{
    return cl != NULL ? cl->adjust : c->clients_adjust;
}

/*
 * Whether some client may refund under rule r through a router (the router's deny cache
 * remembers no refusal of such a rule, docs/OPERATIONS.md, "The deny cache"): without
 * [client NAME] sections, [clients] adjust; else a client with `adjust` that may CHECK under
 * r, or the cluster secret (every service) when it has `adjust` ([clients] adjust). A scan
 * of the clients: called for a node's refusal, not for every request.
 */
bool rl_conf_rule_refundable(const struct rl_conf *c, const struct rl_rule *r);

/* The [node NAME] section, or NULL. A linear scan: for start-up, not the hot path. */
const struct rl_node_conf *rl_conf_node(const struct rl_conf *c, const char *name);

#endif
