/*
 * limiter: judges CHECK requests on a node: finds the rule, judges every tier of it
 * atomically (all allow, then all consume; one refuses, none consumes), applies shadow mode,
 * and builds the reply fields of docs/PROTOCOL.md. Owns the key table and the node's counters.
 * Not for sockets or framing (server.h).
 */
#ifndef RL_LIMITER_H
#define RL_LIMITER_H

#include <stdbool.h>
#include <stdint.h>

#include "conf.h"
#include "wire.h"

/* Node counters, X(name, text): reported by STATS under these names. checks counts every
 * CHECK answered and is allowed + limited + queued + no_rule (shadow-mode replies are
 * allowed; shadow_limited counts those that enforce would have refused); peeks counts cost-0
 * checks; log_degraded counts sliding logs degraded to counters at the memory cap,
 * evicted_in_force the evictions of keys whose limit was in force, evicted_under_share those
 * of keys of a service (or inline tenant) under its share (docs/ALGORITHMS.md, "Under memory
 * pressure"); inline_over_quota the inline CHECKs refused because their tenant held
 * RL_INLTAB_TENANT_MAX inline limits already (docs/PROTOCOL.md, "Inline limits");
 * releases_late the slots RELEASEs asked back that their key no longer held (their lease had
 * ended, or they were given back twice: docs/ALGORITHMS.md, "concurrency"). */
#define RL_LIMITER_STATS_MAP(X)                                                                    \
    X(checks, "checks")                                                                            \
    X(allowed, "allowed")                                                                          \
    X(limited, "limited")                                                                          \
    X(queued, "queued")                                                                            \
    X(no_rule, "no_rule")                                                                          \
    X(shadow_limited, "shadow_limited")                                                            \
    X(peeks, "peeks")                                                                              \
    X(log_degraded, "log_degraded")                                                                \
    X(evicted_in_force, "evicted_in_force")                                                        \
    X(evicted_under_share, "evicted_under_share")                                              \
    X(inline_over_quota, "inline_over_quota")                                                      \
    X(releases_late, "releases_late")

struct rl_limiter_stats {
#define RL_LIMITER_FIELD(n, s) uint64_t n;
    RL_LIMITER_STATS_MAP(RL_LIMITER_FIELD)
#undef RL_LIMITER_FIELD
    /* from the key table */
    uint64_t keys;
    uint64_t evicted;
    uint64_t expired;
    uint64_t memory_bytes; /* table plus sliding logs */
};

/* One service's share of the memory: STATS reports them as service.NAME.KEY. */
#define RL_LIMITER_SERVICE_STATS_MAP(X)                                                            \
    X(keys, "keys")                                                                                \
    X(evicted, "evicted")                                                                          \
    X(evicted_in_force, "evicted_in_force")                                                        \
    X(log_bytes, "log_bytes")                                                                      \
    X(log_degraded, "log_degraded")

struct rl_limiter_service_stats {
#define RL_LIMITER_FIELD(n, s) uint64_t n;
    RL_LIMITER_SERVICE_STATS_MAP(RL_LIMITER_FIELD)
#undef RL_LIMITER_FIELD
    /* CHECKs answered under the service's rules, by reply code (metrics; not in STATS) */
    uint64_t decisions[RL_WIRE_CODE_COUNT];
};

struct rl_limiter;

/* Creates a limiter for the rules of conf (which must outlive it), whose counters use at most
 * memory_bytes. Returns 0 or -ENOMEM. */
int rl_limiter_create(struct rl_limiter **out, const struct rl_conf *conf, uint64_t memory_bytes);
void rl_limiter_destroy(struct rl_limiter *l);

/*
 * Judges one decoded CHECK request at now and fills *rep (rep->id = req->id). Returns 0, or
 * for a CHECK with an inline limit (docs/PROTOCOL.md, "Inline limits"), judged by that limit
 * alone under counters of its own: -EPERM when its service has configured rules (refused),
 * -EDQUOT when its tenant (req->tenant) holds RL_INLTAB_TENANT_MAX inline limits already and
 * this one would be new, -ENOSPC when the node holds RL_INLTAB_CLIENTS_MAX distinct inline
 * limits with keys (a global service's scaled tiers, with RL_INLTAB_RESERVE more places of
 * their own: RL_INLTAB_MAX), -ENOMEM; then
 * nothing was counted and *rep is not a reply (answer with an ERROR).
 */
int rl_limiter_check(struct rl_limiter *l, const struct rl_wire_req *req, uint64_t now,
                      struct rl_wire_check_reply *rep);

/*
 * The same, for a key whose shard this node has owned since ownership epoch `epoch`: state
 * written under another epoch belongs to an earlier tenure of the shard (the node lost it,
 * another node counted meanwhile, and it came back) and is judged as if absent, so a shard
 * that returns starts from full allowance like any shard that moves, never from a count
 * that is out of date. The node bumps a shard's epoch each time it gains the shard
 * (node/main.c). Epochs are 16 bits: a key would need to outlive 65,536 returns of its
 * shard for a stale state to be taken as current. rl_limiter_check is epoch 0.
 */
int rl_limiter_check_epoch(struct rl_limiter *l, const struct rl_wire_req *req, uint64_t now,
                            uint16_t epoch, struct rl_wire_check_reply *rep);

/*
 * A CHECK's preparation (rl_limiter_prepare): its rule and the fingerprint of its key in each
 * tier, whose key-table slots have been prefetched. A batch of CHECKs is prepared first and
 * judged after (rl_limiter_check_prepared), so the cache misses of their lookups overlap
 * instead of following one another. Valid until the rules change (rl_limiter_set_rules):
 * within one loop callback.
 */
struct rl_limiter_prep {
    const struct rl_rule *rule; /* NULL: no rule (or a rule without tiers), or an inline
                                   limit (its key's fingerprint in fp_*[0]) */
    uint64_t fp_hi[RL_CONF_RULE_TIERS_MAX];
    uint32_t fp_lo[RL_CONF_RULE_TIERS_MAX];
    /* the shard of req's (service, user), recorded in the keys the CHECK inserts: set by a
     * caller that computed it anyway (the node, owner checks in ZooKeeper mode), else
     * RL_LIMITER_SHARD_UNKNOWN and hashed at the CHECK's first insert only */
    uint32_t shard;
};

#define RL_LIMITER_SHARD_UNKNOWN UINT32_MAX

/* Finds req's rule, hashes its key for each tier and prefetches the slots. Changes nothing. */
void rl_limiter_prepare(struct rl_limiter *l, const struct rl_wire_req *req,
                        struct rl_limiter_prep *prep);

/* rl_limiter_check_epoch for a request prepared by rl_limiter_prepare since the last change of
 * the rules (the same answer, the same effects). */
int rl_limiter_check_prepared(struct rl_limiter *l, const struct rl_wire_req *req,
                              const struct rl_limiter_prep *prep, uint64_t now, uint16_t epoch,
                              struct rl_wire_check_reply *rep);

/*
 * ADJUST (docs/PROTOCOL.md, "ADJUST"): req->delta charged (> 0: past the limit too) or
 * refunded (< 0) in every rate tier of req's rule (shadow rules alike; concurrency tiers are
 * left alone), or of its inline limit
 * as a CHECK finds it (rl_algo_adjust, docs/ALGORITHMS.md). *rep is ALLOWED with what is
 * left after it (remaining and reset_ms as a cost-0 CHECK's) and retry_after_ms the wait of
 * a CHECK of cost 1 (0 when it would be allowed, or under a shadow rule), or NO_RULE.
 * Returns as rl_limiter_check_epoch; counts no decision. prep as rl_limiter_prepare gave it.
 */
int rl_limiter_adjust(struct rl_limiter *l, const struct rl_wire_req *req, uint64_t now,
                      uint16_t epoch, struct rl_wire_check_reply *rep);
int rl_limiter_adjust_prepared(struct rl_limiter *l, const struct rl_wire_req *req,
                               const struct rl_limiter_prep *prep, uint64_t now, uint16_t epoch,
                               struct rl_wire_check_reply *rep);

/*
 * RELEASE (docs/PROTOCOL.md, "RELEASE"): gives back req->cost slots (its count) in every
 * concurrency tier of req's rule, or of its inline limit, the oldest held first (rate tiers
 * are left as they are). *rep as rl_limiter_adjust's: ALLOWED with what is left after it
 * (a rule without a concurrency tier: nothing changed), or NO_RULE. Returns as
 * rl_limiter_check_epoch; counts no decision. Slots asked back that a key no longer held
 * are counted in releases_late.
 */
int rl_limiter_release(struct rl_limiter *l, const struct rl_wire_req *req, uint64_t now,
                       uint16_t epoch, struct rl_wire_check_reply *rep);
int rl_limiter_release_prepared(struct rl_limiter *l, const struct rl_wire_req *req,
                                const struct rl_limiter_prep *prep, uint64_t now, uint16_t epoch,
                                struct rl_wire_check_reply *rep);

/* What rl_limiter_set_rules did. */
struct rl_limiter_reload {
    uint64_t tiers_kept;    /* old tiers found unchanged in the new rules */
    uint64_t tiers_carried; /* old tiers found with another limit or burst (same section,
                               algorithm, window and ordinal): their keys carry over */
    uint64_t keys_kept;     /* keys that keep their counters (carried over included) */
    uint64_t keys_dropped;  /* keys of tiers whose algorithm or window changed, or that went:
                               forgotten (full allowance) */
    bool log_memory_missing; /* the new rules have a sliding_window_log tier but the limiter
                                was created without one: it has no log memory (its logs are
                                degraded to counters) until the node restarts */
};

/*
 * The rules of conf changed (rl_conf_swap_rules on the conf the limiter was created with,
 * which must still be that conf): from now on the limiter judges by them. Every key whose
 * tier's identity (rl_tier.key_seed: section, algorithm, window and ordinal among the
 * section's tiers of that algorithm and window) is still in the rules keeps its counter,
 * whatever moved around it; if the tier's limit or burst changed, what the key consumed
 * stays consumed under the new ones (rl_algo_rescale: 3 used of 3 leaves 997 of 1000).
 * Every other key (its tier went, or changed algorithm or window) is forgotten, so it
 * starts again from full allowance. The per-service accounting (STATS service.*) is rebuilt
 * for the new services; a service that stays keeps its cumulative counters. One pass over
 * the key table (finishing a resize first): the node pauses for it (docs/OPERATIONS.md,
 * "Changing rules live"). Returns 0 with *out (may be NULL) filled, or -ENOMEM with
 * nothing changed (then put the old rules back).
 */
int rl_limiter_set_rules(struct rl_limiter *l, const struct rl_conf *conf,
                         struct rl_limiter_reload *out);

struct rl_handoff_key;

/*
 * Handoff (node/handoff.h; docs/PROTOCOL.md, "Handoff records"): calls fn for
 * every live key (not full at now) that want accepts, by its fingerprint, its shard (recorded
 * in its entry when it was inserted: rl_limiter_shard) and the ownership epoch its state was
 * written under, with its full state relative to now; a non-zero return of fn stops the
 * walk and is returned. Sliding logs are pruned at now (a pure effect of time); nothing else
 * changes. A walk of the whole table (not of the CHECK path).
 */
int rl_limiter_export(struct rl_limiter *l, uint64_t now,
                      bool (*want)(void *arg, uint64_t fp_hi, uint32_t fp_lo, uint32_t shard,
                                   uint16_t epoch),
                      int (*fn)(void *arg, const struct rl_handoff_key *k), void *arg);
/*
 * rl_limiter_export a slice at a time, so that a big table does not hold the loop
 * (rl_keytab_scan_begin): begin, then step, each step offering the keys of the next `budget`
 * slots, until a step returns other than 0: 1 once every key present at the begin was offered
 * (to fn, in the state of now, the begin's), or a negative errno (fn's, or -ENOMEM at the
 * begin). Until then nothing moves in the table and no key is forgotten; whatever would move
 * one (a delete, an eviction, a grow, a rules change, another export) offers the rest first.
 * want and fn must stay valid until the end; the keys want accepts must not change meanwhile
 * (the caller freezes them: a shard being handed off is decided nowhere). One at a time:
 * rl_limiter_export_cancel drops an open one (its remaining keys are not offered, nor read).
 */
int rl_limiter_export_begin(struct rl_limiter *l, uint64_t now,
                            bool (*want)(void *arg, uint64_t fp_hi, uint32_t fp_lo, uint32_t shard,
                                         uint16_t epoch),
                            int (*fn)(void *arg, const struct rl_handoff_key *k), void *arg);
int rl_limiter_export_step(struct rl_limiter *l, size_t budget);
void rl_limiter_export_cancel(struct rl_limiter *l);

/* rl_limiter_export of the keys of one shard whose state was written under ownership epoch
 * `epoch` (the shard's current one: a key of an earlier tenure is judged as absent here, so
 * it is not sent either). */
int rl_limiter_export_shard(struct rl_limiter *l, uint64_t now, uint32_t shard, uint16_t epoch,
                            int (*fn)(void *arg, const struct rl_handoff_key *k), void *arg);
/* The shard of req's (service, user) under the rules' [cluster] shards (shardmap.h), as a
 * router computes it and as the limiter records it in the keys it inserts. */
uint32_t rl_limiter_shard(const struct rl_limiter *l, const struct rl_wire_req *req);
/* The rules' [cluster] shards (at least 1). */
uint32_t rl_limiter_shards(const struct rl_limiter *l);

/* What rl_limiter_import did with its keys. */
struct rl_limiter_import_stats {
    uint64_t imported;  /* put in the table (replacing a state held here, if any) */
    uint64_t carried;   /* of which under a tier whose limit or burst differ here: rescaled */
    uint64_t no_tier;   /* no tier here with that key seed, or another algorithm or window */
    uint64_t invalid;   /* a state that does not fit its tier */
    uint64_t no_memory; /* the table could not take it */
};

/*
 * Puts n keys exported by another node (its clock may differ: each state is relative to
 * the sender's now) into this limiter at now (this node's clock), under ownership epoch
 * `epoch`: each as if it had been judged here all along, under this node's tier of the same
 * key seed (a different limit or burst is carried over as a live rules change would) or its
 * inline limit, interned for its owner. Each is recorded under `shard` (the sender's
 * records are those of one shard). A key this node already holds is replaced. Adds to
 * *st (may be NULL). Returns 0, or -ENOMEM when the rules' index cannot be built (nothing
 * imported).
 */
int rl_limiter_import(struct rl_limiter *l, uint64_t now, uint16_t epoch, uint32_t shard,
                      const struct rl_handoff_key *keys, size_t n,
                      struct rl_limiter_import_stats *st);
/* rl_limiter_import of the keys next gives, one at a time (each valid until the next call),
 * until it gives NULL: the rules' index is built once for them all. */
int rl_limiter_import_each(struct rl_limiter *l, uint64_t now, uint16_t epoch, uint32_t shard,
                           const struct rl_handoff_key *(*next)(void *arg), void *arg,
                           struct rl_limiter_import_stats *st);

struct rl_slices;

/*
 * Regions (docs/REGIONS.md): from now on, a CHECK under a rule with scope = global is judged
 * by its tiers with limit and burst scaled by the slice of (service, user) in s (slices.h),
 * else region_slice, in thousandths. s is not copied: keep it alive until the next call
 * (NULL: none). A key whose slice changes keeps what it consumed (rl_algo_rescale).
 */
void rl_limiter_set_slices(struct rl_limiter *l, const struct rl_slices *s, uint32_t region_slice);

/* Forgets keys that have been back at full allowance for grace ms at now (full at
 * now - grace), examining at most budget slots. A state it visits more than a window ahead
 * of now (a clock stepped back) is first moved back as a judgment at now would move it
 * (rl_algo_bound), at now and not now - grace, which would give back what was consumed. */
void rl_limiter_sweep(struct rl_limiter *l, uint64_t now, uint64_t grace, size_t budget);

void rl_limiter_stats(const struct rl_limiter *l, struct rl_limiter_stats *s);

struct rl_prom;

/* Appends the limiter's metric families (docs/OPERATIONS.md, "Metrics"): decisions and keys
 * by service, shadow refusals, counter memory and its cap, evictions, expirations. */
void rl_limiter_metrics(const struct rl_limiter *l, struct rl_prom *p);

/* The memory_bytes it was created with. */
uint64_t rl_limiter_memory_cap(const struct rl_limiter *l);

/* The number of services, and service i's name and counters. */
size_t rl_limiter_services(const struct rl_limiter *l);
const char *rl_limiter_service_stats(const struct rl_limiter *l, size_t i,
                                     struct rl_limiter_service_stats *s);

#endif
