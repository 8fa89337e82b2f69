/*
 * conf: cluster.conf (docs/CONFIG.md) parsed with libinih into one immutable
 * struct, and the rule model: services, endpoints, tiers, failure policy and mode. Every
 * process loads the same file through this module. Not for command-line options, which each
 * main.c owns (it may use the value parsers at the bottom). After a successful load every
 * string field is non-NULL (possibly ""), except rl_rule.endpoint.
 */
#ifndef RL_CONF_H
#define RL_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "connlimits.h"

#include "parse.h"

/* Algorithms: X(NAME, text, has_burst). */
#define RL_ALGO_MAP(X)                                                                             \
    X(FIXED_WINDOW, "fixed_window", false)                                                         \
    X(SLIDING_WINDOW_LOG, "sliding_window_log", false)                                             \
    X(SLIDING_WINDOW_COUNTER, "sliding_window_counter", false)                                     \
    X(TOKEN_BUCKET, "token_bucket", true)                                                          \
    X(GCRA, "gcra", true)                                                                          \
    X(LEAKY_BUCKET, "leaky_bucket", true)

enum rl_algo {
#define RL_CONF_ENUM(n, s, b) RL_ALGO_##n,
    RL_ALGO_MAP(RL_CONF_ENUM)
#undef RL_CONF_ENUM
        RL_ALGO_COUNT
};

/* The algorithm's name as written in cluster.conf, or "unknown" for a value out of range. */
const char *rl_algo_name(enum rl_algo a);

/* Bounds the parser enforces, so the algorithms' integer arithmetic cannot overflow. */
#define RL_CONF_LIMIT_MAX 4294967295u  /* N and B, in cost units */
#define RL_CONF_WINDOW_MAX 4294967295u /* W in ms: about 49.7 days */
#define RL_CONF_RULE_TIERS_MAX 16      /* `limit` lines in one [service] section */
#define RL_CONF_TIERS_MAX 65535u       /* in the whole file, so a tier id fits uint16_t */

/* One `limit = ALGO N per DURATION [burst B]` line. */
struct rl_tier {
    enum rl_algo algo;
    uint32_t limit;     /* N */
    uint32_t window_ms; /* W, >= 1 */
    uint32_t burst;     /* B; N when not given; meaningful for the bucket algorithms */
    uint16_t id;        /* index in rl_conf.tiers: unique across the whole file */
    /* The tier's identity for counters (added): a 64-bit hash of its section (service,
     * endpoint), its position in the section, algo, limit, window and burst. Unchanged by
     * edits elsewhere in the file, so a reload keeps the counters of a tier whose seed it
     * finds again (node/limiter.h, rl_limiter_set_rules); any change to the tier or its
     * place in its section gives another seed, and its keys restart from full allowance. */
    uint64_t seed;
};

/* One `[service S]` or `[service S E]` section. */
struct rl_rule {
    char *service;
    char *endpoint;      /* NULL for the service-wide section */
    size_t service_len;  /* strlen(service), 1..128 */
    size_t endpoint_len; /* strlen(endpoint), 1..128; 0 when endpoint is NULL */
    bool fail_closed;    /* failure = closed */
    bool shadow;         /* mode = shadow */
    uint32_t id;         /* index in rl_conf.rules */
    uint32_t first_tier; /* its tiers are tiers[first_tier .. first_tier + ntiers) */
    uint32_t ntiers;
    int line; /* where the section starts, for messages */
};

/* One `[client NAME]` section: who may use a router, and for what (docs/CONFIG.md). */
#define RL_CONF_CLIENT_HASHES 4 /* token_sha256 lines per client, for rotation */
struct rl_client_conf {
    char *name;
    uint8_t hashes[RL_CONF_CLIENT_HASHES][32]; /* SHA-256 of each accepted token */
    uint32_t nhashes;
    bool all_services; /* services = * */
    bool stats;        /* may ask STATS */
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
    uint64_t memory; /* bytes of counters before eviction; RL_CONF_DEFAULT_MEMORY if unset */
    char *metrics_host; /* `metrics`: the operator's HTTP listener (metrics.h); NULL: off */
    uint16_t metrics_port;
    int line;
};

#define RL_CONF_DEFAULT_MEMORY (1024ull * 1024 * 1024)

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
    char *secret_file;           /* "" = no cluster secret */
    char *secret;                /* the secret read from it at load; NULL when none */
    size_t secret_len;
    uint8_t secret_hash[32];     /* its SHA-256, to compare AUTH tokens with */
    uint32_t throttle_events;    /* throttling episodes a node keeps (node/throttle.h): open
                                    and closed each; default 1024, 0 = off, max 16384 */
    char *events_log;            /* closed episodes appended as JSON lines; "" = off; %n is
                                    the node's name */
    /* [router] */
    char *router_host;    /* default 127.0.0.1; an IPv6 address comes without brackets */
    uint16_t router_port; /* default 7400 */
    uint32_t deadline_ms; /* default 50 */
    char *request_log;    /* "" = off */
    uint32_t log_sample;  /* log one request in N; default 1 */
    uint64_t log_max_size; /* rotate the request log at this size; 0 = never; default 256 MiB */
    uint32_t log_keep;     /* rotated request logs kept; default 4 */
    char *router_metrics_host; /* [router] metrics: HTTP listener (metrics.h); NULL: off */
    uint16_t router_metrics_port;
    /* [clients]: what each process's listener allows its clients (connlimits.h) */
    struct rl_conn_limits clients;
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
};

/* Where the rules a process runs came from, and how reloads went: STATS rules_version,
 * rules_digest, rules_reloads and rules_reload_failures (docs/OPERATIONS.md, "Changing
 * rules live"). version 0: the --config file; N >= 1: the rules znode of ZooKeeper at data
 * version N - 1. */
struct rl_rules_status {
    int64_t version;
    int64_t digest;      /* rl_conf.rules_digest */
    uint64_t reloads;    /* rule sets applied since start (SIGHUP or ZooKeeper) */
    uint64_t failures;   /* rule sets refused (did not parse, or no memory) */
};

/*
 * Loads path. Returns 0 with *out set (free with rl_conf_destroy), or a negative errno with
 * *out NULL and err holding one line "FILE:LINE: what is wrong" (or "FILE: what is wrong"
 * when the file cannot be read): -EINVAL for a bad file, -ENOMEM, or fopen's or read's
 * errno (-ENOENT, -EACCES, -EISDIR...). err may be NULL when errlen is 0; a short err gets a
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
 * Puts the rules of fresh (a conf from rl_conf_load, rl_conf_parse or rl_conf_parse_rules)
 * in force in live: exchanges rules, nrules, tiers, ntiers, the index and rules_digest of
 * the two, and resolves every [client NAME] of live again against the new rules (its
 * rules[] array is replaced). Nothing else of either changes, so pointers to live and to its
 * clients stay valid; fresh then holds the old rules: destroy it once nothing points to them
 * (a router's requests in flight, a limiter's tiers). A client naming a service that has no
 * rule any more keeps its other services; the first such name is described in warn (""
 * when none; warn may be NULL with warnlen 0). Returns 0, or -ENOMEM with both unchanged.
 * Not thread-safe: call it from the thread that reads live.
 */
int rl_conf_swap_rules(struct rl_conf *live, struct rl_conf *fresh, char *warn, size_t warnlen);

/* Frees c and everything it holds; NULL is a no-op. */
void rl_conf_destroy(struct rl_conf *c);

/*
 * The rule for a request: the `[service S E]` section if it exists, else `[service S]`, else
 * NULL (NO_RULE). An endpoint of length 0 (nil or "") selects `[service S]` only. Neither
 * string needs a terminating NUL. O(1), no allocation: safe on the hot path, and from
 * several threads at once since the conf is immutable after load.
 */
const struct rl_rule *rl_conf_rule(const struct rl_conf *c, const char *service, size_t slen,
                                   const char *endpoint, size_t elen);

/* The address others dial to reach node n: its advertise, else its listen. */
const char *rl_conf_node_dial(const struct rl_node_conf *n, uint16_t *port);

/* True for a wildcard host (0.0.0.0, ::, [::]): fine to listen on, never an address to dial. */
bool rl_conf_is_wildcard(const char *host);

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

/* The [node NAME] section, or NULL. A linear scan: for start-up, not the hot path. */
const struct rl_node_conf *rl_conf_node(const struct rl_conf *c, const char *name);


#endif
