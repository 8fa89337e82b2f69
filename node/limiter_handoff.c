/*
 * limiter_handoff: a limiter's live keys out to handoff records and back in (limiter.h,
 * rl_limiter_export and rl_limiter_import; the records: handoff.h). Each key keeps the
 * accounting of limiter.c (services' and tenants' keys, log bytes) as any insert or drop.
 * Not for judging CHECKs (limiter.c) nor for encoding the records (handoff.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "handoff.h"
#include "limiter_int.h"

struct lim_export {
    struct rl_limiter *l;
    uint64_t now;
    bool (*want)(void *arg, uint64_t fp_hi, uint32_t fp_lo, uint32_t shard, uint16_t epoch);
    int (*fn)(void *arg, const struct rl_handoff_key *k);
    void *arg;
    struct rl_handoff_key k;
    int rc;
};

static void
lim_export_entry(void *arg, struct rl_keytab_entry *e)
{
    struct lim_export *x = arg;
    struct rl_limiter *l = x->l;
    const struct rl_tier *t;
    uint64_t before;
    int full;

    if (x->rc != 0 ||
        !x->want(x->arg, e->fp_hi, (uint32_t)e->fp_lo, (uint32_t)e->shard, (uint16_t)e->epoch)) {
        return;
    }
    t = lim_entry_tier(l, e);
    if (t == NULL) {
        return;
    }
    x->k.fp_hi = e->fp_hi;
    x->k.fp_lo = (uint32_t)e->fp_lo;
    if (rl_inltab_is(e->tier)) {
        x->k.kind = RL_HANDOFF_INLINE;
        x->k.ref = rl_inltab_owner(l->inl, e->tier);
    } else {
        x->k.kind = RL_HANDOFF_RULE;
        x->k.ref = t->key_seed;
    }
    x->k.algo = (uint8_t)t->algo;
    x->k.limit = t->limit;
    x->k.window_ms = t->window_ms;
    x->k.burst = t->burst;
    before = rl_algo_heap_bytes(t, &e->st);
    full = rl_algo_export(t, &e->st, x->now, &x->k.st);
    /* a log pruned by the export: unsigned arithmetic wraps back */
    lim_count_log(l, t, rl_algo_heap_bytes(t, &e->st) - before);
    if (full == 0) {
        x->rc = x->fn(x->arg, &x->k);
    }
}

int
rl_limiter_export_begin(struct rl_limiter *l, uint64_t now,
                        bool (*want)(void *arg, uint64_t fp_hi, uint32_t fp_lo, uint32_t shard,
                                     uint16_t epoch),
                        int (*fn)(void *arg, const struct rl_handoff_key *k), void *arg)
{
    struct lim_export *x;

    rl_limiter_export_cancel(l);
    x = calloc(1, sizeof(*x));
    if (x == NULL) {
        return -ENOMEM;
    }
    x->l = l;
    x->now = now;
    x->want = want;
    x->fn = fn;
    x->arg = arg;
    l->xp = x;
    rl_keytab_scan_begin(l->tab, lim_export_entry, x);
    return 0;
}

int
rl_limiter_export_step(struct rl_limiter *l, size_t budget)
{
    struct lim_export *x = l->xp;
    int rc;

    if (x == NULL) {
        return 1;
    }
    /* Done when the scan is closed: by this step, or by whatever moved an entry since. */
    if (rl_keytab_scanning(l->tab) && !rl_keytab_scan_step(l->tab, budget)) {
        return 0;
    }
    rc = x->rc;
    l->xp = NULL;
    free(x);
    return rc != 0 ? rc : 1;
}

void
rl_limiter_export_cancel(struct rl_limiter *l)
{
    if (l->xp == NULL) {
        return;
    }
    rl_keytab_scan_stop(l->tab);
    free(l->xp);
    l->xp = NULL;
}

int
rl_limiter_export(struct rl_limiter *l, uint64_t now,
                  bool (*want)(void *arg, uint64_t fp_hi, uint32_t fp_lo, uint32_t shard,
                               uint16_t epoch),
                  int (*fn)(void *arg, const struct rl_handoff_key *k), void *arg)
{
    struct lim_export x = {.l = l, .now = now, .want = want, .fn = fn, .arg = arg};

    /* A whole pass of its own: the begin offers an export open a slice at a time the rest of
     * its keys first (it ends at its next step). */
    rl_keytab_scan_begin(l->tab, lim_export_entry, &x);
    (void)rl_keytab_scan_step(l->tab, SIZE_MAX);
    return x.rc;
}

struct lim_shard_export {
    uint32_t shard;
    uint16_t epoch;
    int (*fn)(void *arg, const struct rl_handoff_key *k);
    void *arg;
};

static bool
lim_want_shard(void *arg, uint64_t fp_hi, uint32_t fp_lo, uint32_t shard, uint16_t epoch)
{
    const struct lim_shard_export *x = arg;

    (void)fp_hi;
    (void)fp_lo;
    return shard == x->shard && epoch == x->epoch;
}

static int
lim_shard_fn(void *arg, const struct rl_handoff_key *k)
{
    const struct lim_shard_export *x = arg;

    return x->fn(x->arg, k);
}

int
rl_limiter_export_shard(struct rl_limiter *l, uint64_t now, uint32_t shard, uint16_t epoch,
                        int (*fn)(void *arg, const struct rl_handoff_key *k), void *arg)
{
    struct lim_shard_export x = {shard, epoch, fn, arg};

    return rl_limiter_export(l, now, lim_want_shard, lim_shard_fn, &x);
}

static int
lim_u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return x < y ? -1 : x > y;
}

/* Whether owner is a global service's (lim_global_owner) under the rules in force: the
 * owners of those services, sorted once per rules. Without the memory for them, none is
 * (the record then counts as a client's: in the clients' part, never in the reserve). */
static bool
lim_is_global_owner(struct rl_limiter *l, uint32_t owner)
{
    const struct rl_conf *c = l->conf;

    if (l->gowners_conf != c) {
        uint32_t *g = realloc(l->gowners, (c->nrules + 1) * sizeof(*g));
        size_t n = 0;

        if (g == NULL) {
            return false;
        }
        for (size_t i = 0; i < c->nrules; i++) {
            if (c->rules[i].global) {
                g[n++] = lim_global_owner(c->rules[i].service, c->rules[i].service_len);
            }
        }
        qsort(g, n, sizeof(*g), lim_u32_cmp);
        l->gowners = g;
        l->ngowners = n;
        l->gowners_conf = c;
    }
    return l->ngowners > 0 &&
           bsearch(&owner, l->gowners, l->ngowners, sizeof(owner), lim_u32_cmp) != NULL;
}

/* This node's tier for k: configured (by key seed, the same algorithm and window) or its
 * inline limit interned for its owner; NULL when none. */
static const struct rl_tier *
lim_import_tier(struct rl_limiter *l, const struct lim_seed_ix *ix, const struct rl_handoff_key *k,
                struct rl_limiter_import_stats *st)
{
    const struct rl_tier *to;

    if (k->kind == RL_HANDOFF_INLINE) {
        struct rl_tier want;
        uint32_t id;

        memset(&want, 0, sizeof(want));
        want.algo = (enum rl_algo)k->algo;
        want.limit = k->limit;
        want.window_ms = k->window_ms;
        want.burst = k->burst;
        /* the key was admitted by its owner's quota on the sender; a client's still counts in
         * the clients' part of the table, never in the scaled tiers' reserve */
        if (rl_inltab_intern(l->inl, &want, (uint32_t)k->ref,
                             lim_is_global_owner(l, (uint32_t)k->ref) ? RL_INLTAB_SCALED
                                                                      : RL_INLTAB_IMPORTED,
                             &id) != 0) {
            st->no_memory++;
            return NULL;
        }
        return rl_inltab_tier(l->inl, id);
    }
    {
        struct lim_seed_ix key = {k->ref, 0};
        const struct lim_seed_ix *hit =
            l->conf->ntiers == 0 ? NULL
                                 : bsearch(&key, ix, l->conf->ntiers, sizeof(*ix), lim_seed_cmp);

        to = hit != NULL ? &l->conf->tiers[hit->ix] : NULL;
    }
    if (to == NULL || to->algo != (enum rl_algo)k->algo || to->window_ms != k->window_ms) {
        st->no_tier++;
        return NULL;
    }
    return to;
}

static void
lim_import_one(struct rl_limiter *l, const struct lim_seed_ix *ix, uint64_t now, uint16_t epoch,
               uint32_t shard, const struct rl_handoff_key *k, struct rl_limiter_import_stats *st)
{
    const struct rl_tier *to = lim_import_tier(l, ix, k, st);
    struct rl_tier from;
    struct rl_algo_state s = {0, 0};
    struct rl_keytab_entry *e;
    uint64_t room = l->log_cap > l->log_bytes ? l->log_cap - l->log_bytes : 0;

    if (to == NULL) {
        return;
    }
    memset(&from, 0, sizeof(from));
    from.algo = (enum rl_algo)k->algo;
    from.limit = k->limit;
    from.window_ms = k->window_ms;
    from.burst = k->burst;
    from.id = to->id;
    if (rl_algo_import(&from, &k->st, now, room, &s) != 0) {
        st->invalid++;
        return;
    }
    if (from.limit != to->limit || from.burst != to->burst) {
        rl_algo_rescale(&from, to, &s);
        st->carried++;
    }
    st->imported++;
    e = rl_keytab_find(l->tab, k->fp_hi, k->fp_lo);
    if (e != NULL) {
        const struct rl_tier *old = lim_entry_tier(l, e);

        if (old != NULL) {
            lim_release_state(l, old, &e->st);
            lim_count_key(l, old, -1);
        }
        memset(&e->st, 0, sizeof(e->st));
        e->tier = to->id;
        lim_count_key(l, to, +1);
    } else if (!rl_algo_is_full(to, &s, now)) {
        e = rl_keytab_insert(l->tab, k->fp_hi, k->fp_lo, to->id, now);
        if (e == NULL) {
            rl_algo_release(to, &s);
            st->imported--;
            st->no_memory++;
            return;
        }
        lim_count_key(l, to, +1);
    } else {
        rl_algo_release(to, &s);
        return;
    }
    e->st = s;
    e->epoch = epoch;
    e->shard = shard;
    lim_count_log(l, to, rl_algo_heap_bytes(to, &s));
}

int
rl_limiter_import_each(struct rl_limiter *l, uint64_t now, uint16_t epoch, uint32_t shard,
                       const struct rl_handoff_key *(*next)(void *arg), void *arg,
                       struct rl_limiter_import_stats *st)
{
    struct rl_limiter_import_stats local;
    struct lim_seed_ix *ix = calloc(l->conf->ntiers + 1, sizeof(*ix));
    const struct rl_handoff_key *k;

    if (ix == NULL) {
        return -ENOMEM;
    }
    if (st == NULL) {
        memset(&local, 0, sizeof(local));
        st = &local;
    }
    for (size_t i = 0; i < l->conf->ntiers; i++) {
        ix[i].seed = l->conf->tiers[i].key_seed;
        ix[i].ix = (uint32_t)i;
    }
    qsort(ix, l->conf->ntiers, sizeof(*ix), lim_seed_cmp);
    while ((k = next(arg)) != NULL) {
        lim_import_one(l, ix, now, epoch, shard, k, st);
    }
    free(ix);
    return 0;
}

struct lim_array {
    const struct rl_handoff_key *keys;
    size_t n, i;
};

static const struct rl_handoff_key *
lim_array_next(void *arg)
{
    struct lim_array *a = arg;

    return a->i < a->n ? &a->keys[a->i++] : NULL;
}

int
rl_limiter_import(struct rl_limiter *l, uint64_t now, uint16_t epoch, uint32_t shard,
                  const struct rl_handoff_key *keys, size_t n, struct rl_limiter_import_stats *st)
{
    struct lim_array a = {keys, n, 0};

    return rl_limiter_import_each(l, now, epoch, shard, lim_array_next, &a, st);
}
