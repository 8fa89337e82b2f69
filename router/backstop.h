/*
 * backstop: the floor under failing open (docs/OPERATIONS.md, "The backstop"). While a
 * shard's owner cannot be reached (no owner, connection down, deadline passed, NOT_OWNER),
 * a CHECK under a rule with `failure = open` is judged here, by a limiter local to the router's
 * loop built from the rule itself, instead of being waved through: each of the router's W
 * workers allows a (rule, user) at most max(1, N / W) per fixed window of W_ms for each of
 * the rule's tiers (all of them), the window starting at the first request
 * the backstop sees. So one router allows a user at most max(N, W) per window, whatever the
 * outage lasts. Answers keep the existing codes (a refusal is LIMITED, an allowance
 * FAIL_OPEN); the backstop counts them apart.
 *
 * A fixed table of 4-way sets allocated once: an insert takes a free way, else the least
 * used one (the largest share of a quota in a window still running), the least recently asked
 * among equals. The set of a user is drawn with a secret seed of the process, so no client
 * can choose users that land with another's. Eviction forgets a user's count: a user held at
 * its quota goes only when every other way of its set holds a user at its whole quota too,
 * which users asked a little never do (a flood of made-up users each brought to its quota
 * does: docs/OPERATIONS.md, "The backstop"). Not for the routing (forward.c) nor for a
 * node's decision; the data structure is usable without a router (the unit tests).
 */
#ifndef RL_BACKSTOP_H
#define RL_BACKSTOP_H

#include <stdbool.h>
#include <stdint.h>

#include "conf.h"
#include "ruleset.h"
#include "wire.h"

#define RL_BACKSTOP_WAYS 4u
/* tiers of a rule the backstop counts: all of them */
#define RL_BACKSTOP_TIERS RL_CONF_RULE_TIERS_MAX
#define RL_BACKSTOP_ENTRIES 16384u   /* entries per router loop */
#define RL_BACKSTOP_LOG_NODE "backstop" /* the request log's NODE for its answers */

struct rl_backstop_entry {
    uint64_t hash;                          /* the shard map's key hash of (service, user) */
    uint64_t used_ns;                       /* last request: the least recent is evicted */
    uint64_t start_ns[RL_BACKSTOP_TIERS];   /* each tier's window start */
    uint32_t count[RL_BACKSTOP_TIERS];      /* allowed in that window */
    uint32_t rule;
    bool used;
};

struct rl_backstop_stats {
    uint64_t allowed;   /* answered FAIL_OPEN by the backstop */
    uint64_t limited;   /* answered LIMITED by the backstop */
    uint64_t evictions; /* users forgotten to make room */
    uint64_t entries;   /* capacity */
};

struct rl_backstop {
    struct rl_backstop_entry *e;     /* nsets * RL_BACKSTOP_WAYS; NULL: not allocated */
    uint64_t seed;                   /* secret: where a user's set is */
    uint32_t nsets;              /* a power of two */
    uint32_t share;              /* the divisor of a rule's limit: the workers (>= 1) */
    struct rl_backstop_stats st;
};

/* Allocates room for at least `entries`; share: the router's workers. Returns 0 or -ENOMEM. */
int rl_backstop_init(struct rl_backstop *b, uint32_t entries, uint32_t share);
void rl_backstop_deinit(struct rl_backstop *b);

/*
 * The rules changed from old to now (rule ids name other rules): keeps the users of each rule
 * found again with the same tiers (its section, and tier by tier the same counters' identity:
 * algorithm, window, order; a new limit or burst keeps them, as a node keeps its counters),
 * under its new id, and forgets the others. Before, every change forgot everyone, so each rules
 * change during a loss gave every user the backstop judged its quota again. Out of memory, forgets
 * all.
 */
void rl_backstop_rules(struct rl_backstop *b, const struct rl_conf *old, const struct rl_conf *now);

/* A tier's quota on one loop: max(1, limit / share). */
uint32_t rl_backstop_quota(uint32_t limit, uint32_t share);

/*
 * Judges a CHECK of cost under rule (whose tiers are conf's) for the key hash at now_ns:
 * fills rep's code (FAIL_OPEN, or LIMITED with limit, remaining 0, and reset and retry_after
 * to the end of the first window that refuses), counting the cost when allowed. A cost of 0
 * is allowed and counts nothing. Returns true when allowed. Without a table (not allocated),
 * everything is allowed, as failing open always did.
 */
bool rl_backstop_judge(struct rl_backstop *b, const struct rl_conf *conf,
                       const struct rl_rule *rule, uint64_t hash, uint32_t cost, uint64_t now_ns,
                       struct rl_wire_check_reply *rep);

#endif
