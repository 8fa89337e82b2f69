/*
 * limiter_int: what the files of the limiter (limiter.c, limiter_handoff.c) share and nobody
 * else uses: the limiter's struct and the accounting of keys and log bytes that every change
 * to the key table must go through. Not a public API: include limiter.h.
 */
#ifndef RL_LIMITER_INT_H
#define RL_LIMITER_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "algo.h"
#include "inltab.h"
#include "keytab.h"
#include "limiter.h"
#include "tenant.h"

struct lim_names;

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

struct rl_limiter {
    const struct rl_conf *conf;
    struct rl_keytab *tab;
    uint64_t log_cap;    /* bytes the sliding logs may hold */
    uint64_t memory_cap; /* memory_bytes as created */
    uint64_t log_bytes;  /* bytes they hold now */
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
};

#define LIM_GONE UINT32_MAX

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

#endif
