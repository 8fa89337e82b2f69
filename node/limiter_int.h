/*
 * limiter_int: what the files of the limiter share and nobody else uses: the limiter's struct,
 * the accounting of keys and log bytes that every change to the key table must go through
 * (limiter_acct.c), the services of the rules (limiter_rules.c), and the steps of a CHECK
 * that ADJUST and RELEASE (limiter_settle.c) take too (limiter.c). Calls go down, never
 * back: limiter_settle.c and limiter_handoff.c call limiter.c, limiter_rules.c and
 * limiter_acct.c; limiter.c calls limiter_rules.c and limiter_acct.c; limiter_rules.c calls
 * limiter_acct.c, which calls none of them. Not a public API: include limiter.h.
 */
#ifndef RL_LIMITER_INT_H
#define RL_LIMITER_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <xxhash.h>

#include "algo.h"
#include "inltab.h"
#include "keytab.h"
#include "limiter.h"
#include "tenant.h"

/*
 * Service name -> index in a lim_svc array: open addressing, linear probing, load <= 1/2,
 * so grouping and carrying counters over are O(services), not O(services^2) (20,000
 * services cost the loop ~0.9 s that way).
 */
struct lim_names {
    uint32_t *slot; /* index + 1, 0 empty */
    size_t mask;
};

/* What one tier of the request in hand needs between its judgment and its commit. */
struct lim_tier {
    uint64_t fp_hi;
    uint32_t fp_lo;
    struct rl_keytab_entry *e;  /* valid until the first insert of the commit phase */
    struct rl_algo_state blank; /* the state of a key not in the table: zero, full */
    struct rl_algo_state next;
    struct rl_algo_result r;
};

/* One service (the rules of [service S] and [service S E] together). */
struct lim_svc {
    const char *name;
    struct rl_limiter_service_stats st;
};

struct lim_export;

struct rl_limiter {
    const struct rl_conf *conf;
    struct rl_keytab *tab;
    struct lim_export *xp; /* the export open a slice at a time (rl_limiter_export_begin) */
    uint64_t log_cap;    /* bytes the sliding logs may hold */
    uint64_t memory_cap; /* memory_bytes as created */
    uint64_t log_bytes;  /* bytes they hold now */
    uint64_t sweep_now;  /* the clock of the sweep running (rl_limiter_sweep), before its grace */
    struct lim_svc *svcs;
    uint32_t nsvcs;
    uint32_t *svc_of_tier; /* conf->ntiers of them */
    uint32_t nactive;      /* services holding keys */
    uint32_t nlogging;     /* services holding log bytes */
    uint64_t nkeys;        /* keys held, all services */
    struct rl_limiter_stats st;
    uint32_t maxtiers;
    struct lim_tier *scratch; /* maxtiers of them, so a check never allocates */
    /* a copy of the tiers the table's entries follow (conf->tiers, until the next
     * rl_limiter_set_rules, which needs the old ones once conf holds the new) */
    struct rl_tier *tiers;
    size_t ntiers;
    /* rl_limiter_set_rules, during its walk: old tier index -> new, or LIM_GONE */
    uint32_t *remap;
    /* the services of the rules by name (whether a service has configured rules) */
    struct lim_names *names;
    /* inline limits (docs/PROTOCOL.md, "Inline limits"): their tiers; their decisions and
     * keys in all (metrics) counted as one pseudo-service; and by tenant, the limits each
     * holds (its quota) and its share of the keys and logs, as a service's */
    struct rl_inltab *inl;
    struct lim_svc inl_svc;
    struct rl_tenants *tenants;
    /* regions (docs/REGIONS.md): the slices in force (not owned; NULL: none) and the
     * region's default slice, in thousandths; the scaled tiers of the CHECK in hand, each
     * interned in inl (maxtiers of them) */
    const struct rl_slices *slices;
    uint32_t region_slice;
    struct rl_tier *gtiers;
    uint32_t gtiers_cap;
    /* the owners of the global services' scaled tiers (lim_global_owner), sorted, as of
     * gowners_conf: what tells an imported inline record of one from a client's
     * (limiter_handoff.c) */
    uint32_t *gowners;
    size_t ngowners;
    const struct rl_conf *gowners_conf;
};

#define LIM_GONE UINT32_MAX

/* The owner of the scaled tiers of global service (len bytes): one per service, so a global
 * service keeps a share of the keys of its own, as a regional one does. */
static inline uint32_t
lim_global_owner(const char *service, size_t len)
{
    uint64_t h = XXH3_64bits_withSeed(service, len, 0x676c6f62u /* glob */);

    return (uint32_t)(h ^ h >> 32);
}

/* What a request is judged by: its tiers, whether they are in shadow mode, and the service
 * whose decisions it counts in. */
struct lim_judge {
    const struct rl_tier *tiers;
    uint32_t ntiers;
    bool shadow;
    struct lim_svc *svc;
};

/* Key seed -> index in conf->tiers, sorted by seed (bsearch with lim_seed_cmp). */
struct lim_seed_ix {
    uint64_t seed;
    uint32_t ix;
};

int lim_seed_cmp(const void *a, const void *b);

/* The tier e's state follows: configured or inline; NULL when it is neither any more. */
const struct rl_tier *lim_entry_tier(const struct rl_limiter *l, const struct rl_keytab_entry *e);

/* A key of t's account was added (+1) or dropped (-1); an inline limit counts its keys. */
void lim_count_key(struct rl_limiter *l, const struct rl_tier *t, int delta);

/* The log bytes of t's account changed by delta (wrapping arithmetic for a decrease). */
void lim_count_log(struct rl_limiter *l, const struct rl_tier *t, uint64_t delta);

/* Frees what s owns under t, counting its log bytes out. */
void lim_release_state(struct rl_limiter *l, const struct rl_tier *t, struct rl_algo_state *s);

/* limiter_acct.c, the rest of the books: the account t's keys count in (NULL only for an
 * inline limit's tenant that holds nothing, create unset); a key counted in t's account
 * without touching its inline limit's count (rl_limiter_set_rules' walk). */
struct rl_limiter_service_stats *lim_acct(const struct rl_limiter *l, const struct rl_tier *t,
                                          bool create);
void lim_count_key_acct(struct rl_limiter *l, const struct rl_tier *t, int delta);

/* limiter_acct.c: the key table's callbacks (struct rl_keytab_ops) and inltab's (struct
 * rl_inltab_ops), arg the limiter, installed by rl_limiter_create. */
bool lim_is_full(void *arg, struct rl_keytab_entry *e, uint64_t now);
uint64_t lim_score(void *arg, struct rl_keytab_entry *e, uint64_t now, uint32_t for_tier);
void lim_evicted(void *arg, const struct rl_keytab_entry *e, uint64_t score);
void lim_release(void *arg, struct rl_keytab_entry *e);
void lim_owned(void *arg, uint32_t owner, int delta);
bool lim_may_add(void *arg, uint32_t owner);

/* limiter_rules.c: l->svcs, l->svc_of_tier and l->names from l->conf (0 or -ENOMEM); whether
 * service (not NUL-terminated) has a [service S] or [service S E] section; the most tiers a
 * rule of c has (at least 1); a copy of c's tiers (never NULL on success). */
int lim_services(struct rl_limiter *l);
bool lim_configured(const struct rl_limiter *l, const char *service, size_t len);
uint32_t lim_maxtiers(const struct rl_conf *c);
struct rl_tier *lim_copy_tiers(const struct rl_conf *c);

/* limiter.c, the steps of a CHECK that ADJUST and RELEASE take too (limiter_settle.c): the
 * tiers req is judged by (0, -EPERM, -ENOSPC, -ENOMEM, -EDQUOT); every tier judged into
 * l->scratch, whether one refused; the deciding tier when all allowed (*queue: the longest
 * wait) or when one refused (*remaining: the least left). */
int lim_select_tiers(struct rl_limiter *l, const struct rl_wire_req *req,
                     const struct rl_rule *rule, struct lim_judge *j);
bool lim_judge_all(struct rl_limiter *l, const struct lim_judge *j,
                   const struct rl_limiter_prep *prep, uint64_t now, uint32_t cost, uint16_t epoch);
const struct rl_algo_result *lim_decide_allowed(const struct rl_limiter *l, uint32_t ntiers,
                                                uint64_t *queue);
const struct rl_algo_result *lim_decide_refused(const struct rl_limiter *l, uint32_t ntiers,
                                                uint32_t cost, uint64_t *remaining);

/* limiter.c: consumes in one tier's state (next: what rl_algo_judge allowed; NULL: an ADJUST
 * of delta) keeping the count of log bytes; e moved to tier t (its state carried over or
 * started afresh); a new key's state s kept in the table (given back when there is no room;
 * *shard worked out on the first key kept). */
void lim_commit_or_adjust(struct rl_limiter *l, const struct rl_tier *t, struct rl_algo_state *s,
                          const struct rl_algo_state *next, uint64_t now, uint32_t cost,
                          int64_t delta);
void lim_retier(struct rl_limiter *l, struct rl_keytab_entry *e, const struct rl_tier *t);
void lim_store_new(struct rl_limiter *l, const struct rl_tier *t, struct rl_algo_state *s,
                   uint64_t fp_hi, uint32_t fp_lo, uint64_t now, uint16_t epoch,
                   const struct rl_wire_req *req, uint32_t *shard);

/* Found entry e made current for tier t in this tenure (epoch) of its shard, before a CHECK,
 * ADJUST or RELEASE writes it: moved to t when it followed another tier, and a state of an
 * earlier tenure judged as absent, so started afresh (docs/OPERATIONS.md, "A node dies"). */
void lim_entry_current(struct rl_limiter *l, struct rl_keytab_entry *e, const struct rl_tier *t,
                       uint16_t epoch);

#endif
