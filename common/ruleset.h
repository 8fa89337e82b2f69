/*
 * ruleset: the rule model of cluster.conf's [service] sections (docs/CONFIG.md): the
 * algorithms and their names, tiers, rules with their failure policy and mode, and what a
 * conf keeps of them: the O(1) (service, endpoint) -> rule lookup of the hot path, the
 * digest STATS reports, and the swap of new rules into a live conf. conf_service.c parses
 * the text and builds the rules through the rl_ruleset_* calls; the rules themselves are fields of
 * struct rl_conf (conf.h). Not for parsing, nor for when rules change (rules.h).
 */
#ifndef RL_RULESET_H
#define RL_RULESET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rl_conf;

/* Algorithms: X(NAME, text, has_burst). concurrency is no rate: N slots held at once, each
 * for at most its lease (`limit = concurrency N lease DURATION`; window_ms is the lease). */
#define RL_ALGO_MAP(X)                                                                             \
    X(FIXED_WINDOW, "fixed_window", false)                                                         \
    X(SLIDING_WINDOW_LOG, "sliding_window_log", false)                                             \
    X(SLIDING_WINDOW_COUNTER, "sliding_window_counter", false)                                     \
    X(TOKEN_BUCKET, "token_bucket", true)                                                          \
    X(GCRA, "gcra", true)                                                                          \
    X(LEAKY_BUCKET, "leaky_bucket", true)                                                          \
    X(CONCURRENCY, "concurrency", false)

enum rl_algo {
#define RL_ALGO_ENUM(n, s, b) RL_ALGO_##n,
    RL_ALGO_MAP(RL_ALGO_ENUM)
#undef RL_ALGO_ENUM
        RL_ALGO_COUNT
};

/* The algorithm's name as written in cluster.conf, or "unknown" for a value out of range. */
const char *rl_algo_name(enum rl_algo a);

/* Whether the algorithm takes a burst (`burst B`); false out of range. Inline: the node's
 * buckets ask it on every decision. */
static inline bool
rl_algo_has_burst(enum rl_algo a)
{
#define RL_ALGO_BURST_BIT(n, s, b) | ((b) ? 1u << RL_ALGO_##n : 0u)
    return (unsigned)a < RL_ALGO_COUNT && ((0u RL_ALGO_MAP(RL_ALGO_BURST_BIT)) >> a & 1u) != 0;
#undef RL_ALGO_BURST_BIT
}

/* The algorithm called name: 0 with *out set, or -EINVAL. */
int rl_algo_parse(const char *name, enum rl_algo *out);

/* Bounds the parser enforces, so the algorithms' integer arithmetic cannot overflow. */
#define RL_CONF_LIMIT_MAX 4294967295u  /* N and B, in cost units */
#define RL_CONF_WINDOW_MAX 31622400000ull /* W in ms: 366 days, for fixed_window and
                                             sliding_window_counter */
#define RL_CONF_WINDOW32_MAX 4294967295u  /* W in ms for sliding_window_log, token_bucket, gcra
                                             and leaky_bucket: about 49.7 days (their state
                                             holds W in 32 bits, or B*W in 64) */
/* concurrency's N: a key holds one 8-byte entry per ms in which it took slots, so at most N
 * entries (80 KB, a 128 KiB ring, at the cap), and a handoff record carries them in one
 * record (docs/ALGORITHMS.md, "concurrency"). */
#define RL_CONF_CONCURRENCY_MAX 10000u
#define RL_CONF_RULE_TIERS_MAX 16      /* `limit` lines in one [service] section */
#define RL_CONF_TIERS_MAX 1048575u     /* in the whole file (2^20 - 1): a tier id fits the node's
                                          key-table entry (24 bits) */

/* The longest window algorithm a counts with (docs/CONFIG.md, "[service S]"). */
static inline uint64_t
rl_algo_window_max(enum rl_algo a)
{
    return a == RL_ALGO_FIXED_WINDOW || a == RL_ALGO_SLIDING_WINDOW_COUNTER ? RL_CONF_WINDOW_MAX
                                                                          : RL_CONF_WINDOW32_MAX;
}

/* The largest N of algorithm a. */
static inline uint32_t
rl_algo_limit_max(enum rl_algo a)
{
    return a == RL_ALGO_CONCURRENCY ? RL_CONF_CONCURRENCY_MAX : RL_CONF_LIMIT_MAX;
}

/* One `limit = ALGO N per DURATION [burst B]` or `limit = concurrency N lease DURATION`
 * line. */
struct rl_tier {
    enum rl_algo algo;
    uint32_t limit;     /* N */
    uint64_t window_ms; /* W, 1..rl_algo_window_max(algo) */
    uint32_t burst;     /* B; N when not given; meaningful for the bucket algorithms */
    uint32_t id;        /* index in rl_conf.tiers: unique across the whole file */
    /* The tier's identity for counters (added): a 64-bit hash of its section (service,
     * endpoint), its position in the section, algo, limit, window and burst. Unchanged by
     * edits elsewhere in the file, so a reload keeps the counters of a tier whose seed it
     * finds again (node/limiter.h, rl_limiter_set_rules); any change to the tier or its
     * place in its section gives another seed. The rules digest is made of seeds. */
    uint64_t seed;
    /* The identity of its counters (added): a 64-bit hash of its section, algo, window and
     * its ordinal among the section's earlier tiers of the same algo and window; not of limit
     * or burst. A node hashes keys with it, so a reload that changes only a tier's limit or
     * burst finds every key again and carries what was consumed over to the new limit
     * (node/limiter.h, rl_limiter_set_rules); another algorithm or window is another
     * identity, whose keys restart from full allowance. Unique within a file. */
    uint64_t key_seed;
};

/* A tier's capacity: the most its allowance ever holds, what a node reports as its limit,
 * and the most one request may cost there (more is refused with retry_after never): B for
 * the buckets (0 when they never refill, N = 0), else N. */
static inline uint64_t
rl_tier_capacity(const struct rl_tier *t)
{
    if (rl_algo_has_burst(t->algo)) {
        return t->limit == 0 ? 0 : t->burst;
    }
    return t->limit;
}

/* One `[service S]` or `[service S E]` section. */
struct rl_rule {
    char *service;
    char *endpoint;      /* NULL for the service-wide section */
    size_t service_len;  /* strlen(service), 1..128 */
    size_t endpoint_len; /* strlen(endpoint), 1..128; 0 when endpoint is NULL */
    bool fail_closed;    /* failure = closed */
    bool fail_unlimited; /* failure = open_unlimited: no router backstop (docs/OPERATIONS.md) */
    bool shadow;         /* mode = shadow */
    bool global;         /* scope = global: a slice of the limit per region (REGIONS.md) */
    uint32_t id;         /* index in rl_conf.rules */
    uint32_t first_tier; /* its tiers are tiers[first_tier .. first_tier + ntiers) */
    uint32_t ntiers;
    int line; /* where the section starts, for messages */
};

/*
 * The rule for a request: the `[service S E]` section if it exists, else `[service S]`, else
 * NULL (NO_RULE). An endpoint of length 0 (nil or "") selects `[service S]` only. Neither
 * string needs a terminating NUL. O(1), no allocation: safe on the hot path, and from
 * several threads at once since the conf is immutable after load.
 */
const struct rl_rule *rl_conf_rule(const struct rl_conf *c, const char *service, size_t slen,
                                   const char *endpoint, size_t elen);

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

/*
 * For conf_service.c, building the rules of c (c->rules, c->tiers) a section at a time:
 * rl_ruleset_tier_seed computes rl_tier.seed of the tier at position pos in r;
 * rl_ruleset_find is the exact [service S] (endpoint NULL, elen 0) or [service S E] section,
 * or NULL; rl_ruleset_index_add indexes c->rules[c->nrules - 1] (0 or -ENOMEM);
 * rl_ruleset_digest is rl_conf.rules_digest of the rules as they are.
 */
uint64_t rl_ruleset_tier_seed(const struct rl_rule *r, uint32_t pos, const struct rl_tier *t);
/* rl_tier.key_seed of tier t appended to r, whose r->ntiers tiers so far are prev[]. */
uint64_t rl_ruleset_tier_key_seed(const struct rl_rule *r, const struct rl_tier *prev,
                                  const struct rl_tier *t);
const struct rl_rule *rl_ruleset_find(const struct rl_conf *c, const char *service, size_t slen,
                                      const char *endpoint, size_t elen);
int rl_ruleset_index_add(struct rl_conf *c);
uint64_t rl_ruleset_digest(const struct rl_conf *c);

/*
 * Resolves a [client NAME] services line against the rules of c into rules (c->nrules of
 * them, zeroed by the caller) and *all (set by `*`). Returns 0, -ENOMEM, or -ENOENT when a
 * name has no [service] section (the first such name in missing; the others are resolved
 * all the same).
 */
int rl_ruleset_resolve(const char *services, const struct rl_conf *c, bool *rules, bool *all,
                       char *missing, size_t mlen);

/* Frees the rules, tiers and index of c and leaves it with none (rl_conf_destroy's part). */
void rl_ruleset_deinit(struct rl_conf *c);

#endif
