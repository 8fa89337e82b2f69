/*
 * limiter: a node's answer to CHECK (limiter.h). Finds the rule, judges every tier of it
 * against the key table without changing anything, and only when every tier allows does it
 * consume in each, so a refusal anywhere leaves every counter as it was. Builds the reply
 * fields of docs/PROTOCOL.md from the tier that decided. Not for sockets or framing (server.c), nor
 * for the arithmetic of the algorithms (algo.c).
 *
 * Memory (docs/ALGORITHMS.md, "Under memory pressure"): the cap is split between the key
 * table and the sliding logs, which live outside it. When the rules have a sliding_window_log
 * tier, half the cap is kept for logs, shared equally by the services that hold logs; a log
 * that would grow past its service's share, or a new one that cannot be had, is degraded to
 * a sliding_window_counter of the same counts (algo.h): approximate, never unlimited. At the
 * table's cap the eviction takes, from a sample, a key back at full allowance if there is
 * one, else a key of a service holding at least its equal share of the keys that limits
 * nobody now, soonest full; a key in force, or a key of a service under its share, only when
 * several samples found nothing else.
 */
#include "limiter.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "algo.h"
#include "inltab.h"
#include "keytab.h"
#include "metrics.h"
#include "shardmap.h"
#include "slices.h"
#include "tenant.h"

#include "limiter_int.h"

/* Every tier id of a rules file fits an entry's tier field. */
_Static_assert(RL_CONF_TIERS_MAX <= RL_KEYTAB_TIER_MAX, "tier ids fit the key table");

/* Seeds the key hash with the tier's key seed (ruleset.h: its section, algorithm, window and
 * ordinal among the section's tiers of both, not its limit nor burst), so each user gets one
 * counter per section and per tier, and the counter keeps its identity across reloads that
 * leave the tier's algorithm and window as they were (a new limit carries it over). */
static uint64_t
lim_seed(const struct rl_tier *t)
{
    return t->key_seed;
}

const struct rl_tier *
lim_entry_tier(const struct rl_limiter *l, const struct rl_keytab_entry *e)
{
    if (rl_inltab_is(e->tier)) {
        return rl_inltab_tier(l->inl, e->tier);
    }
    return e->tier < l->conf->ntiers ? &l->conf->tiers[e->tier] : NULL;
}

/* The account t's keys count in: its service's, or for an inline limit its tenant's (the
 * owner of the limit: docs/PROTOCOL.md, "Inline limits"), added when it holds nothing yet and
 * create is set. NULL only for an inline limit's tenant that holds nothing (create unset) or
 * cannot be recorded (out of memory: then its keys count in the inline pseudo-service). */
static struct rl_limiter_service_stats *
lim_acct(const struct rl_limiter *l, const struct rl_tier *t, bool create)
{
    if (rl_inltab_is(t->id)) {
        uint32_t owner = rl_inltab_owner(l->inl, t->id);
        struct rl_tenant *x = create ? rl_tenants_add(l->tenants, owner)
                                     : rl_tenants_find(l->tenants, owner);

        if (x == NULL) {
            return create ? (struct rl_limiter_service_stats *)&l->inl_svc.st : NULL;
        }
        return &x->st;
    }
    return (struct rl_limiter_service_stats *)&l->svcs[l->svc_of_tier[t->id]].st;
}

/* Drops t's tenant record when it holds nothing any more. */
static void
lim_settle(struct rl_limiter *l, const struct rl_tier *t)
{
    if (rl_inltab_is(t->id)) {
        rl_tenants_settle(l->tenants, rl_tenants_find(l->tenants, rl_inltab_owner(l->inl, t->id)));
    }
}

/* A key of t's account was added (+1) or dropped (-1), the counts of the walk of
 * rl_limiter_set_rules included (which leaves an inline limit's count of keys alone). */
static void
lim_count_key_acct(struct rl_limiter *l, const struct rl_tier *t, int delta)
{
    struct rl_limiter_service_stats *v = lim_acct(l, t, true);

    if (rl_inltab_is(t->id)) {
        l->inl_svc.st.keys += delta > 0 ? 1 : (uint64_t)-1;
    }
    if (delta > 0) {
        l->nactive += v->keys == 0;
        v->keys++;
        l->nkeys++;
    } else {
        v->keys--;
        l->nkeys--;
        l->nactive -= v->keys == 0;
        lim_settle(l, t);
    }
}

/* A key of t's account was added (+1) or dropped (-1); an inline limit counts its keys. */
void
lim_count_key(struct rl_limiter *l, const struct rl_tier *t, int delta)
{
    if (rl_inltab_is(t->id)) {
        rl_inltab_ref(l->inl, t->id, delta);
    }
    lim_count_key_acct(l, t, delta);
}

/* The log bytes of t's account changed by delta (wrapping arithmetic for a decrease). */
void
lim_count_log(struct rl_limiter *l, const struct rl_tier *t, uint64_t delta)
{
    struct rl_limiter_service_stats *v;
    bool had;

    if (delta == 0) {
        return;
    }
    v = lim_acct(l, t, true);
    had = v->log_bytes != 0;
    v->log_bytes += delta;
    l->log_bytes += delta;
    l->nlogging += (v->log_bytes != 0) - had;
    lim_settle(l, t);
}

/* inltab's accounting: owner took (+1) or lost (-1) an inline limit. */
static void
lim_owned(void *arg, uint32_t owner, int delta)
{
    struct rl_limiter *l = arg;
    struct rl_tenant *x = delta > 0 ? rl_tenants_add(l->tenants, owner)
                                    : rl_tenants_find(l->tenants, owner);

    if (x == NULL) {
        return; /* out of memory: the quota counts fewer limits than it could */
    }
    if (delta > 0) {
        x->limits++;
    } else if (x->limits > 0) {
        x->limits--;
        rl_tenants_settle(l->tenants, x);
    }
}

/* inltab's quota: a tenant holds at most RL_INLTAB_TENANT_MAX inline limits. */
static bool
lim_may_add(void *arg, uint32_t owner)
{
    struct rl_limiter *l = arg;
    const struct rl_tenant *x = rl_tenants_find(l->tenants, owner);

    return x == NULL || x->limits < RL_INLTAB_TENANT_MAX;
}

static bool
lim_is_full(void *arg, const struct rl_keytab_entry *e, uint64_t now)
{
    const struct rl_tier *t = lim_entry_tier(arg, e);

    return t == NULL || rl_algo_is_full(t, &e->st, now);
}

/*
 * The eviction's score of e for an insert of tier `for_tier` (keytab.h): class 0, a key back
 * at full allowance (losing it changes nothing); 1, a key of a service holding at least an
 * equal share of the keys (counting the inserting service) that would allow a request of
 * cost 1 now; 2, such a key that would not (its limit is in force); 3 and 4, the same for a
 * service under its share. Within a class, the key full soonest goes first.
 */
static uint64_t
lim_score(void *arg, const struct rl_keytab_entry *e, uint64_t now, uint32_t for_tier)
{
    struct rl_limiter *l = arg;
    const struct rl_tier *t = lim_entry_tier(l, e);
    const uint64_t mask = (UINT64_C(1) << RL_KEYTAB_CLASS_SHIFT) - 1;
    struct rl_algo_state st, next;
    struct rl_algo_result r;
    uint64_t at, n, cls, held;
    const struct rl_limiter_service_stats *v, *ins = NULL;
    const struct rl_tier *ft;

    if (t == NULL || rl_algo_is_full(t, &e->st, now)) {
        return 0;
    }
    v = lim_acct(l, t, false);
    held = v != NULL ? v->keys : 0;
    n = l->nactive;
    ft = rl_inltab_is(for_tier) ? rl_inltab_tier(l->inl, for_tier)
         : for_tier < l->conf->ntiers ? &l->conf->tiers[for_tier]
                                      : NULL;
    if (ft != NULL) {
        ins = lim_acct(l, ft, false);
    }
    if (ft != NULL && (ins == NULL || ins->keys == 0)) {
        n++; /* the inserting account is about to hold a key */
    }
    st = e->st; /* a log's judge prunes it: a pure effect of time */
    rl_algo_judge(t, &st, now, 1, &r, &next);
    cls = held * n >= l->nkeys ? 1 : 3;
    cls += !r.allowed;
    at = rl_algo_full_at(t, &e->st);
    return cls << RL_KEYTAB_CLASS_SHIFT | (at < mask ? at : mask);
}

static void
lim_evicted(void *arg, const struct rl_keytab_entry *e, uint64_t score)
{
    struct rl_limiter *l = arg;
    const struct rl_tier *t = lim_entry_tier(l, e);
    uint64_t cls = score >> RL_KEYTAB_CLASS_SHIFT;
    struct rl_limiter_service_stats *v;

    if (t == NULL) {
        return;
    }
    v = rl_inltab_is(t->id) ? &l->inl_svc.st : lim_acct(l, t, false);
    v->evicted++;
    if (cls == 2 || cls == 4) {
        v->evicted_in_force++;
        l->st.evicted_in_force++;
    }
    if (cls >= 3) {
        l->st.evicted_under_share++;
    }
}

void
lim_release_state(struct rl_limiter *l, const struct rl_tier *t, struct rl_algo_state *s)
{
    lim_count_log(l, t, -rl_algo_heap_bytes(t, s));
    rl_algo_release(t, s);
}

static void
lim_release(void *arg, struct rl_keytab_entry *e)
{
    struct rl_limiter *l = arg;
    const struct rl_tier *t = lim_entry_tier(l, e);

    if (t != NULL) {
        lim_release_state(l, t, &e->st);
        lim_count_key(l, t, -1);
    }
}

/*
 * Service name -> index in a lim_svc array: open addressing, linear probing, load <= 1/2,
 * so grouping and carrying counters over are O(services), not O(services^2) (20,000
 * services cost the loop ~0.9 s that way).
 */
struct lim_names {
    uint32_t *slot; /* index + 1, 0 empty */
    size_t mask;
};

static int
lim_names_init(struct lim_names *h, size_t n)
{
    size_t cap = 16;

    while (cap < 2 * n + 2) {
        cap *= 2;
    }
    h->slot = calloc(cap, sizeof(*h->slot));
    h->mask = cap - 1;
    return h->slot == NULL ? -ENOMEM : 0;
}

/* The index of name in v (n of them, all indexed in h), or UINT32_MAX with *at the free
 * slot where it goes. */
static uint32_t
lim_names_find(const struct lim_names *h, const struct lim_svc *v, const char *name, size_t *at)
{
    size_t i = (size_t)XXH3_64bits(name, strlen(name)) & h->mask;

    for (; h->slot[i] != 0; i = (i + 1) & h->mask) {
        if (strcmp(v[h->slot[i] - 1].name, name) == 0) {
            return h->slot[i] - 1;
        }
    }
    *at = i;
    return UINT32_MAX;
}

/* Groups the rules of c by service: *svcs (*nsvcs of them, in order of first appearance),
 * and each tier's service; *names indexes *svcs by name (free its slot array). */
static int
lim_group_ix(const struct rl_conf *c, struct lim_svc **svcs, uint32_t *nsvcs,
             uint32_t **svc_of_tier, struct lim_names *names)
{
    struct lim_svc *v = calloc(c->nrules + 1, sizeof(*v));
    uint32_t *of = calloc(c->ntiers + 1, sizeof(*of));
    uint32_t n = 0;

    if (v == NULL || of == NULL || lim_names_init(names, c->nrules) != 0) {
        free(v);
        free(of);
        return -ENOMEM;
    }
    for (size_t i = 0; i < c->nrules; i++) {
        const struct rl_rule *r = &c->rules[i];
        size_t at = 0;
        uint32_t k = lim_names_find(names, v, r->service, &at);

        if (k == UINT32_MAX) {
            k = n++;
            v[k].name = r->service;
            names->slot[at] = k + 1;
        }
        for (uint32_t t = 0; t < r->ntiers; t++) {
            of[r->first_tier + t] = k;
        }
    }
    *svcs = v;
    *nsvcs = n;
    *svc_of_tier = of;
    return 0;
}

static int
lim_services(struct rl_limiter *l)
{
    struct lim_names *names = calloc(1, sizeof(*names));

    if (names == NULL) {
        return -ENOMEM;
    }
    if (lim_group_ix(l->conf, &l->svcs, &l->nsvcs, &l->svc_of_tier, names) != 0) {
        free(names);
        return -ENOMEM;
    }
    l->names = names;
    return 0;
}

/* Whether service (not NUL-terminated) has a [service S] or [service S E] section. */
static bool
lim_configured(const struct rl_limiter *l, const char *service, size_t len)
{
    const struct lim_names *h = l->names;
    size_t i = (size_t)XXH3_64bits(service, len) & h->mask;

    for (; h->slot[i] != 0; i = (i + 1) & h->mask) {
        const char *name = l->svcs[h->slot[i] - 1].name;

        if (strncmp(name, service, len) == 0 && name[len] == '\0') {
            return true;
        }
    }
    return false;
}

static uint32_t
lim_maxtiers(const struct rl_conf *c)
{
    uint32_t m = 1;

    for (size_t i = 0; i < c->nrules; i++) {
        if (c->rules[i].ntiers > m) {
            m = c->rules[i].ntiers;
        }
    }
    return m;
}

/* A copy of c's tiers (at least one element, so never NULL on success). */
static struct rl_tier *
lim_copy_tiers(const struct rl_conf *c)
{
    struct rl_tier *t = calloc(c->ntiers + 1, sizeof(*t));

    if (t != NULL && c->ntiers > 0) {
        memcpy(t, c->tiers, c->ntiers * sizeof(*t));
    }
    return t;
}

int
rl_limiter_create(struct rl_limiter **out, const struct rl_conf *conf, uint64_t memory_bytes)
{
    struct rl_limiter *l = calloc(1, sizeof(*l));
    struct rl_keytab_ops ops = {lim_is_full, lim_score, lim_evicted, lim_release, l};
    struct rl_inltab_ops iops = {lim_owned, lim_may_add, l};
    bool logs = false;
    int rc = -ENOMEM;

    if (l == NULL) {
        return -ENOMEM;
    }
    l->conf = conf;
    if (memory_bytes == 0) {
        memory_bytes = RL_CONF_DEFAULT_MEMORY;
    }
    for (size_t i = 0; i < conf->ntiers; i++) {
        logs |= conf->tiers[i].algo == RL_ALGO_SLIDING_WINDOW_LOG ||
                conf->tiers[i].algo == RL_ALGO_CONCURRENCY;
    }
    l->log_cap = logs ? memory_bytes / 2 : 0;
    l->memory_cap = memory_bytes;
    l->maxtiers = lim_maxtiers(conf);
    l->scratch = calloc(l->maxtiers, sizeof(*l->scratch));
    l->gtiers = calloc(l->maxtiers, sizeof(*l->gtiers));
    l->gtiers_cap = l->maxtiers;
    l->region_slice = rl_conf_region_slice(conf);
    l->tiers = lim_copy_tiers(conf);
    l->ntiers = conf->ntiers;
    if (l->scratch == NULL || l->gtiers == NULL || l->tiers == NULL ||
        rl_inltab_create(&l->inl, &iops) != 0 || rl_tenants_create(&l->tenants) != 0 ||
        lim_services(l) != 0) {
        goto fail_scratch;
    }
    rc = rl_keytab_create(&l->tab, memory_bytes - l->log_cap, &ops);
    if (rc != 0) {
        goto fail_scratch;
    }
    *out = l;
    return 0;

fail_scratch:
    if (l->names != NULL) {
        free(l->names->slot);
        free(l->names);
    }
    rl_inltab_destroy(l->inl);
    rl_tenants_destroy(l->tenants);
    free(l->scratch);
    free(l->gtiers);
    free(l->tiers);
    free(l->svcs);
    free(l->svc_of_tier);
    free(l);
    return rc;
}

void
rl_limiter_destroy(struct rl_limiter *l)
{
    if (l == NULL) {
        return;
    }
    rl_keytab_destroy(l->tab);
    rl_inltab_destroy(l->inl);
    rl_tenants_destroy(l->tenants);
    free(l->names->slot);
    free(l->names);
    free(l->scratch);
    free(l->gtiers);
    free(l->tiers);
    free(l->svcs);
    free(l->svc_of_tier);
    free(l);
}

/* The heap bytes a sliding log of t's account may still take: an equal share of the log
 * memory for each account holding logs (this one included). */
static uint64_t
lim_log_room(const struct rl_limiter *l, const struct rl_tier *t)
{
    const struct rl_limiter_service_stats *v = lim_acct(l, t, false);
    uint64_t held = v != NULL ? v->log_bytes : 0;
    uint64_t room = l->log_cap > l->log_bytes ? l->log_cap - l->log_bytes : 0;
    uint64_t share = l->log_cap / (l->nlogging + (held == 0));

    if (held >= share) {
        return 0;
    }
    return share - held < room ? share - held : room;
}

/* Consumes in one tier's state (next: what rl_algo_judge allowed; NULL: an ADJUST of delta),
 * keeping the count of log bytes. */
static void
lim_commit_or_adjust(struct rl_limiter *l, const struct rl_tier *t, struct rl_algo_state *s,
                     const struct rl_algo_state *next, uint64_t now, uint32_t cost, int64_t delta)
{
    uint64_t before, room;
    bool was;

    if (t->algo != RL_ALGO_SLIDING_WINDOW_LOG && t->algo != RL_ALGO_CONCURRENCY) {
        if (next != NULL) {
            rl_algo_commit(t, s, next, now, cost);
        } else {
            rl_algo_adjust(t, s, now, delta, UINT64_MAX);
        }
        return;
    }
    was = rl_algo_degraded(t, s);
    before = rl_algo_heap_bytes(t, s);
    room = lim_log_room(l, t);
    if (next != NULL) {
        rl_algo_commit_capped(t, s, next, now, cost, room);
    } else {
        rl_algo_adjust(t, s, now, delta, room);
    }
    if (!was && rl_algo_degraded(t, s)) {
        (rl_inltab_is(t->id) ? &l->inl_svc.st : lim_acct(l, t, true))->log_degraded++;
        l->st.log_degraded++;
    }
    /* Unsigned arithmetic wraps back correctly when the log shrank. */
    lim_count_log(l, t, rl_algo_heap_bytes(t, s) - before);
}

static inline void
lim_commit(struct rl_limiter *l, const struct rl_tier *t, struct rl_algo_state *s,
           const struct rl_algo_state *next, uint64_t now, uint32_t cost)
{
    lim_commit_or_adjust(l, t, s, next, now, cost, 0);
}

/*
 * e, kept under another tier than t (a global limit's slice changed, or the service changed
 * scope: docs/REGIONS.md), moves to t: its state carried over (rl_algo_rescale) when the
 * algorithm is the same, else started afresh; the key and log counts follow it.
 */
static void
lim_retier(struct rl_limiter *l, struct rl_keytab_entry *e, const struct rl_tier *t)
{
    const struct rl_tier *from = lim_entry_tier(l, e);

    if (from != NULL) {
        uint64_t hb = rl_algo_heap_bytes(from, &e->st);

        if (from->algo != t->algo) {
            lim_release_state(l, from, &e->st);
            memset(&e->st, 0, sizeof(e->st));
            hb = 0;
        } else {
            rl_algo_rescale(from, t, &e->st);
            lim_count_log(l, from, -hb);
        }
        lim_count_key(l, from, -1);
        e->tier = t->id;
        lim_count_key(l, t, +1);
        lim_count_log(l, t, hb);
    } else {
        memset(&e->st, 0, sizeof(e->st));
        e->tier = t->id;
        lim_count_key(l, t, +1);
    }
}

uint32_t
rl_limiter_shards(const struct rl_limiter *l)
{
    return l->conf->shards != 0 ? l->conf->shards : 1;
}

uint32_t
rl_limiter_shard(const struct rl_limiter *l, const struct rl_wire_req *req)
{
    return rl_shardmap_shard(
        rl_shardmap_key_hash(req->service.ptr, req->service.len, req->user.ptr, req->user.len),
        rl_limiter_shards(l));
}

/* A new key's state s of tier t, kept in the table with its epoch and shard (*shard worked
 * out once per request, on the first key kept); s is given back when the table has no room. */
static void
lim_store_new(struct rl_limiter *l, const struct rl_tier *t, struct rl_algo_state *s,
              uint64_t fp_hi, uint32_t fp_lo, uint64_t now, uint16_t epoch,
              const struct rl_wire_req *req, uint32_t *shard)
{
    struct rl_keytab_entry *e = rl_keytab_insert(l->tab, fp_hi, fp_lo, t->id, now);

    if (e == NULL) {
        lim_release_state(l, t, s);
        return;
    }
    if (*shard == RL_LIMITER_SHARD_UNKNOWN) {
        *shard = rl_limiter_shard(l, req);
    }
    e->st = *s;
    e->epoch = epoch;
    e->shard = *shard;
    lim_count_key(l, t, +1);
}

/* Every tier allowed: consume in each, adding keys that were not in the table, each with
 * the shard of req's key (the caller's, else hashed at the first insert only: a CHECK of
 * keys held hashes nothing more). */
static void
lim_consume(struct rl_limiter *l, const struct rl_wire_req *req, uint32_t shard,
            const struct rl_tier *tiers, uint32_t ntiers, uint64_t now, uint16_t epoch)
{
    bool moved = false; /* an insert may move every entry: find again after one */
    uint32_t cost = req->cost;

    for (uint32_t i = 0; i < ntiers; i++) {
        const struct rl_tier *t = &tiers[i];
        struct lim_tier *x = &l->scratch[i];
        struct rl_keytab_entry *e = moved ? rl_keytab_find(l->tab, x->fp_hi, x->fp_lo) : x->e;
        struct rl_algo_state s;

        if (e != NULL) {
            if (e->tier != t->id) {
                lim_retier(l, e, t);
            }
            if (e->epoch != epoch) {
                /* a state of an earlier tenure: judged as absent, so start it afresh */
                lim_release_state(l, t, &e->st);
                memset(&e->st, 0, sizeof(e->st));
                e->epoch = epoch;
            }
            lim_commit(l, t, &e->st, &x->next, now, cost);
            continue;
        }
        /* A key evicted by an earlier tier's insert lands here too: for a log its history is
         * lost, which errs toward allowing like any eviction. */
        memset(&s, 0, sizeof(s));
        lim_commit(l, t, &s, &x->next, now, cost);
        if (rl_algo_is_full(t, &s, now)) {
            lim_release_state(l, t, &s);
            continue;
        }
        moved = true;
        lim_store_new(l, t, &s, x->fp_hi, x->fp_lo, now, epoch, req, &shard);
    }
}

int
rl_limiter_check(struct rl_limiter *l, const struct rl_wire_req *req, uint64_t now,
                 struct rl_wire_check_reply *rep)
{
    return rl_limiter_check_epoch(l, req, now, 0, rep);
}

/* The inline limit of req as a tier (id not set). */
static void
lim_inline_tier(const struct rl_wire_req *req, struct rl_tier *t)
{
    memset(t, 0, sizeof(*t));
    t->algo = (enum rl_algo)req->limit.algo;
    t->limit = req->limit.limit;
    t->window_ms = req->limit.window_ms;
    t->burst = req->limit.has_burst ? req->limit.burst : req->limit.limit;
}

/* The key hash's seed of an inline limit: the service, the endpoint (nil and "" alike) and
 * the limit's parts, under a tag no configured tier's seed is made with, so an inline
 * counter is never a configured rule's nor another inline limit's. */
static uint64_t
lim_inline_seed(const struct rl_wire_req *req, const struct rl_tier *t)
{
    unsigned char buf[16 + 5 * 4 + 2 + RL_WIRE_SERVICE_MAX + RL_WIRE_ENDPOINT_MAX];
    /* A window past 32 bits adds its high half: a shorter one keeps the seed it had. */
    uint32_t parts[5] = {(uint32_t)t->algo, t->limit, (uint32_t)t->window_ms, t->burst,
                         (uint32_t)(t->window_ms >> 32)};
    size_t nparts = t->window_ms >> 32 != 0 ? 5 : 4;
    uint32_t elen = req->endpoint.ptr == NULL ? 0 : req->endpoint.len;
    size_t n = 0;

    memcpy(buf, "rl inline limit", 16);
    n = 16;
    memcpy(buf + n, parts, nparts * sizeof(parts[0]));
    n += nparts * sizeof(parts[0]);
    buf[n++] = (unsigned char)req->service.len;
    memcpy(buf + n, req->service.ptr, req->service.len);
    n += req->service.len;
    buf[n++] = (unsigned char)elen;
    if (elen > 0) {
        memcpy(buf + n, req->endpoint.ptr, elen);
        n += elen;
    }
    return XXH3_64bits(buf, n);
}

void
rl_limiter_prepare(struct rl_limiter *l, const struct rl_wire_req *req,
                   struct rl_limiter_prep *prep)
{
    const struct rl_rule *rule;
    const struct rl_tier *tiers;

    prep->shard = RL_LIMITER_SHARD_UNKNOWN;
    if (req->limit.set) {
        struct rl_tier t;
        XXH128_hash_t h;

        lim_inline_tier(req, &t);
        h = XXH3_128bits_withSeed(req->user.ptr, req->user.len, lim_inline_seed(req, &t));
        prep->rule = NULL;
        rl_keytab_fingerprint(h.high64, h.low64, &prep->fp_hi[0], &prep->fp_lo[0]);
        rl_keytab_prefetch(l->tab, prep->fp_hi[0]);
        return;
    }
    rule = rl_conf_rule(l->conf, req->service.ptr, req->service.len, req->endpoint.ptr,
                        req->endpoint.ptr == NULL ? 0 : req->endpoint.len);
    if (rule == NULL || rule->ntiers == 0) {
        prep->rule = NULL;
        return;
    }
    prep->rule = rule;
    tiers = &l->conf->tiers[rule->first_tier];
    for (uint32_t i = 0; i < rule->ntiers; i++) {
        XXH128_hash_t h = XXH3_128bits_withSeed(req->user.ptr, req->user.len, lim_seed(&tiers[i]));

        rl_keytab_fingerprint(h.high64, h.low64, &prep->fp_hi[i], &prep->fp_lo[i]);
        rl_keytab_prefetch(l->tab, prep->fp_hi[i]);
    }
}

/* The tenant a global service's scaled tiers are accounted to: one per service, so a
 * global service keeps a share of the keys of its own, as a regional one does. */
static uint32_t
lim_global_owner(const struct rl_wire_req *req)
{
    uint64_t h = XXH3_64bits_withSeed(req->service.ptr, req->service.len, 0x676c6f62u /* glob */);

    return (uint32_t)(h ^ h >> 32);
}

/*
 * The tiers of a global rule as this region enforces them for req's user: limit and burst
 * scaled by the slice (rounded down, at least 1), each interned in inl so its keys follow
 * it (docs/REGIONS.md). Fills l->gtiers. Returns 0, -ENOSPC or -ENOMEM.
 */
static int
lim_global_tiers(struct rl_limiter *l, const struct rl_wire_req *req, const struct rl_tier *tiers,
                 uint32_t ntiers)
{
    uint32_t f = rl_slices_get(l->slices, req->service.ptr, req->service.len, req->user.ptr,
                               req->user.len, l->region_slice);

    for (uint32_t i = 0; i < ntiers; i++) {
        struct rl_tier want = tiers[i];
        uint64_t lim = (uint64_t)want.limit * f / RL_CONF_SLICE_UNIT;
        uint64_t burst = (uint64_t)want.burst * f / RL_CONF_SLICE_UNIT;
        uint32_t id;
        int rc;

        want.limit = lim > 0 ? (uint32_t)lim : 1;
        want.burst = burst > 0 ? (uint32_t)burst : 1;
        want.seed = 0;
        /* a global service's slices are its own account, under no client's quota */
        rc = rl_inltab_intern(l->inl, &want, lim_global_owner(req), false, &id);
        if (rc != 0) {
            return rc;
        }
        l->gtiers[i] = *rl_inltab_tier(l->inl, id);
    }
    return 0;
}

void
rl_limiter_set_slices(struct rl_limiter *l, const struct rl_slices *s, uint32_t region_slice)
{
    l->slices = s;
    l->region_slice = region_slice;
}

int
rl_limiter_check_epoch(struct rl_limiter *l, const struct rl_wire_req *req, uint64_t now,
                       uint16_t epoch, struct rl_wire_check_reply *rep)
{
    struct rl_limiter_prep prep;

    rl_limiter_prepare(l, req, &prep);
    return rl_limiter_check_prepared(l, req, &prep, now, epoch, rep);
}

/* What a request is judged by: its tiers, whether they are in shadow mode, and the service
 * whose decisions it counts in. */
struct lim_judge {
    const struct rl_tier *tiers;
    uint32_t ntiers;
    bool shadow;
    struct lim_svc *svc;
};

/*
 * rl_limiter_check_prepared, step 1: the tiers of a request, its inline limit's (refused
 * with -EPERM on a configured service) or else its rule's (not NULL), scaled to the region's
 * slice when the rule is global. 0 with *j set, or a negative errno.
 */
static inline int
lim_select(struct rl_limiter *l, const struct rl_wire_req *req, const struct rl_rule *rule,
           struct lim_judge *j)
{
    int rc;

    j->shadow = false;
    if (req->limit.set) {
        struct rl_tier want;
        uint32_t id;

        /* Configured rules are authoritative: no client lifts its limit by sending one. */
        if (lim_configured(l, req->service.ptr, req->service.len)) {
            return -EPERM;
        }
        lim_inline_tier(req, &want);
        rc = rl_inltab_intern(l->inl, &want, req->tenant, true, &id);
        if (rc != 0) {
            l->st.inline_over_quota += rc == -EDQUOT;
            return rc;
        }
        j->tiers = rl_inltab_tier(l->inl, id);
        j->ntiers = 1;
        j->svc = &l->inl_svc;
        return 0;
    }
    j->tiers = &l->conf->tiers[rule->first_tier];
    j->ntiers = rule->ntiers;
    j->shadow = rule->shadow;
    j->svc = &l->svcs[l->svc_of_tier[rule->first_tier]];
    if (rule->global) {
        rc = lim_global_tiers(l, req, j->tiers, j->ntiers);
        if (rc != 0) {
            return rc;
        }
        j->tiers = l->gtiers;
    }
    return 0;
}

/* The state tier t judges x's key by: its entry of this epoch (carried as it will be when it
 * was kept under another slice, lim_retier), else a blank one in x. */
static inline struct rl_algo_state *
lim_state_of(struct rl_limiter *l, struct lim_tier *x, const struct rl_tier *t, uint16_t epoch)
{
    const struct rl_tier *from;

    if (x->e == NULL || x->e->epoch != epoch) {
        memset(&x->blank, 0, sizeof(x->blank));
        return &x->blank;
    }
    if (x->e->tier == t->id) {
        return &x->e->st;
    }
    from = lim_entry_tier(l, x->e);
    if (from == NULL || from->algo != t->algo) {
        memset(&x->blank, 0, sizeof(x->blank));
        return &x->blank;
    }
    if (t->algo == RL_ALGO_GCRA || t->algo == RL_ALGO_LEAKY_BUCKET) {
        x->blank = x->e->st;
        rl_algo_rescale(from, t, &x->blank);
        return &x->blank;
    }
    return &x->e->st;
}

/* Step 2: judges every tier into l->scratch; nothing is inserted, so entry pointers stay
 * valid. Returns whether a tier refused. */
static inline bool
lim_judge_all(struct rl_limiter *l, const struct lim_judge *j, const struct rl_limiter_prep *prep,
              uint64_t now, uint32_t cost, uint16_t epoch)
{
    bool refused = false;

    for (uint32_t i = 0; i < j->ntiers; i++) {
        const struct rl_tier *t = &j->tiers[i];
        struct lim_tier *x = &l->scratch[i];

        x->fp_hi = prep->fp_hi[i];
        x->fp_lo = prep->fp_lo[i];
        x->e = rl_keytab_find(l->tab, x->fp_hi, x->fp_lo);
        rl_algo_judge(t, lim_state_of(l, x, t, epoch), now, cost, &x->r, &x->next);
        refused |= !x->r.allowed;
    }
    return refused;
}

/* Step 3, allowed: the deciding tier has the least left after the request, the first on a
 * tie; *queue is the longest any tier queues it for. */
static inline const struct rl_algo_result *
lim_decide_allowed(const struct rl_limiter *l, uint32_t ntiers, uint64_t *queue)
{
    const struct rl_algo_result *dec = NULL;

    for (uint32_t i = 0; i < ntiers; i++) {
        const struct rl_algo_result *r = &l->scratch[i].r;

        if (dec == NULL || r->remaining < dec->remaining) {
            dec = r;
        }
        if (r->queue_ms > *queue) {
            *queue = r->queue_ms;
        }
    }
    return dec;
}

/* Step 3, refused: the request waits for its slowest refusing tier, as time alone only ever
 * frees allowance; tiers that allowed report what they hold, as nothing was consumed. */
static inline const struct rl_algo_result *
lim_decide_refused(const struct rl_limiter *l, uint32_t ntiers, uint32_t cost, uint64_t *remaining)
{
    const struct rl_algo_result *dec = NULL;

    for (uint32_t i = 0; i < ntiers; i++) {
        const struct rl_algo_result *r = &l->scratch[i].r;
        uint64_t left = r->allowed ? r->remaining + cost : r->remaining;

        if (left < *remaining) {
            *remaining = left;
        }
        if (!r->allowed && (dec == NULL || r->retry_ms > dec->retry_ms)) {
            dec = r;
        }
    }
    return dec;
}

/* Step 4: the reply's code, and the counters of the decision. */
static inline void
lim_reply_code(struct rl_limiter *l, const struct lim_judge *j, bool refused, uint64_t queue,
               const struct rl_algo_result *dec, struct rl_wire_check_reply *rep)
{
    if (j->shadow && (refused || queue > 0)) {
        /* Shadow mode never touches traffic: the would-be decision only shows in stats. */
        l->st.shadow_limited += refused;
        l->st.allowed++;
        rep->code = RL_WIRE_ALLOWED;
    } else if (refused) {
        l->st.limited++;
        rep->code = RL_WIRE_LIMITED;
        rep->retry_after_ms = dec->retry_ms;
    } else if (queue > 0) {
        l->st.queued++;
        rep->code = RL_WIRE_QUEUED;
        rep->retry_after_ms = queue;
    } else {
        l->st.allowed++;
        rep->code = RL_WIRE_ALLOWED;
    }
    j->svc->st.decisions[rep->code]++;
}

int
rl_limiter_check_prepared(struct rl_limiter *l, const struct rl_wire_req *req,
                          const struct rl_limiter_prep *prep, uint64_t now, uint16_t epoch,
                          struct rl_wire_check_reply *rep)
{
    const struct rl_algo_result *dec;
    uint64_t remaining = UINT64_MAX;
    uint64_t queue = 0;
    struct lim_judge j;
    bool refused;
    int rc;

    memset(rep, 0, sizeof(*rep));
    rep->id = req->id;
    if (!req->limit.set && prep->rule == NULL) {
        l->st.checks++;
        l->st.peeks += req->cost == 0;
        rep->code = RL_WIRE_NO_RULE;
        l->st.no_rule++;
        return 0;
    }
    rc = lim_select(l, req, prep->rule, &j);
    if (rc != 0) {
        return rc;
    }
    l->st.checks++;
    l->st.peeks += req->cost == 0;
    refused = lim_judge_all(l, &j, prep, now, req->cost, epoch);
    if (!refused) {
        dec = lim_decide_allowed(l, j.ntiers, &queue);
        remaining = dec->remaining;
        if (req->cost > 0) {
            lim_consume(l, req, prep->shard, j.tiers, j.ntiers, now, epoch);
        }
    } else {
        dec = lim_decide_refused(l, j.ntiers, req->cost, &remaining);
    }
    rep->limit = dec->limit;
    rep->remaining = remaining;
    rep->reset_ms = dec->reset_ms;
    lim_reply_code(l, &j, refused, queue, dec, rep);
    return 0;
}

/* ADJUST, step 1: delta applied to every tier's state of req's key; a charge inserts the
 * keys not in the table, a refund leaves them out (a key not held has nothing to give). */
static void
lim_adjust_all(struct rl_limiter *l, const struct rl_wire_req *req, uint32_t shard,
               const struct lim_judge *j, const struct rl_limiter_prep *prep, uint64_t now,
               uint16_t epoch)
{
    for (uint32_t i = 0; i < j->ntiers; i++) {
        const struct rl_tier *t = &j->tiers[i];
        struct rl_keytab_entry *e = rl_keytab_find(l->tab, prep->fp_hi[i], prep->fp_lo[i]);
        struct rl_algo_state s;

        if (t->algo == RL_ALGO_CONCURRENCY) {
            continue; /* slots are taken by CHECK and given back by RELEASE only */
        }
        if (e != NULL) {
            if (e->tier != t->id) {
                lim_retier(l, e, t);
            }
            if (e->epoch != epoch) {
                lim_release_state(l, t, &e->st);
                memset(&e->st, 0, sizeof(e->st));
                e->epoch = epoch;
            }
            lim_commit_or_adjust(l, t, &e->st, NULL, now, 0, req->delta);
            continue;
        }
        if (req->delta <= 0) {
            continue;
        }
        memset(&s, 0, sizeof(s));
        lim_commit_or_adjust(l, t, &s, NULL, now, 0, req->delta);
        if (rl_algo_is_full(t, &s, now)) {
            lim_release_state(l, t, &s);
            continue;
        }
        lim_store_new(l, t, &s, prep->fp_hi[i], prep->fp_lo[i], now, epoch, req, &shard);
    }
}

/* RELEASE, step 1: req->cost slots given back in every concurrency tier of req's key (a key
 * not held has none to give); the other tiers are left as they are. */
static void
lim_release_all(struct rl_limiter *l, const struct rl_wire_req *req, const struct lim_judge *j,
                const struct rl_limiter_prep *prep, uint64_t now, uint16_t epoch)
{
    for (uint32_t i = 0; i < j->ntiers; i++) {
        const struct rl_tier *t = &j->tiers[i];
        struct rl_keytab_entry *e;
        uint64_t given = 0;

        if (t->algo != RL_ALGO_CONCURRENCY) {
            continue;
        }
        e = rl_keytab_find(l->tab, prep->fp_hi[i], prep->fp_lo[i]);
        if (e != NULL) {
            if (e->tier != t->id) {
                lim_retier(l, e, t);
            }
            if (e->epoch != epoch) {
                lim_release_state(l, t, &e->st);
                memset(&e->st, 0, sizeof(e->st));
                e->epoch = epoch;
            }
            {
                uint64_t before = rl_algo_heap_bytes(t, &e->st);

                given = rl_algo_conc_release(t, &e->st, now, req->cost);
                lim_count_log(l, t, rl_algo_heap_bytes(t, &e->st) - before);
            }
        }
        l->st.releases_late += req->cost - given;
    }
}

/* ADJUST (release false) or RELEASE: applied, then the reply of what is left. */
static int
lim_settle_key(struct rl_limiter *l, const struct rl_wire_req *req,
               const struct rl_limiter_prep *prep, uint64_t now, uint16_t epoch, bool release,
               struct rl_wire_check_reply *rep)
{
    const struct rl_algo_result *dec;
    uint64_t remaining = UINT64_MAX;
    uint64_t queue = 0;
    struct lim_judge j;
    int rc;

    memset(rep, 0, sizeof(*rep));
    rep->id = req->id;
    if (!req->limit.set && prep->rule == NULL) {
        rep->code = RL_WIRE_NO_RULE;
        return 0;
    }
    rc = lim_select(l, req, prep->rule, &j);
    if (rc != 0) {
        return rc;
    }
    if (release) {
        lim_release_all(l, req, &j, prep, now, epoch);
    } else {
        lim_adjust_all(l, req, prep->shard, &j, prep, now, epoch);
    }
    /* The reply: what is left after it (a peek's answer), and the wait of a request of
     * cost 1 (0: it would be allowed now; a shadow rule refuses nothing). */
    lim_judge_all(l, &j, prep, now, 0, epoch);
    dec = lim_decide_allowed(l, j.ntiers, &queue);
    rep->code = RL_WIRE_ALLOWED;
    rep->limit = dec->limit;
    rep->remaining = dec->remaining;
    rep->reset_ms = dec->reset_ms;
    if (!j.shadow && lim_judge_all(l, &j, prep, now, 1, epoch)) {
        dec = lim_decide_refused(l, j.ntiers, 1, &remaining);
        rep->retry_after_ms = dec->retry_ms;
    }
    return 0;
}

int
rl_limiter_adjust_prepared(struct rl_limiter *l, const struct rl_wire_req *req,
                           const struct rl_limiter_prep *prep, uint64_t now, uint16_t epoch,
                           struct rl_wire_check_reply *rep)
{
    return lim_settle_key(l, req, prep, now, epoch, false, rep);
}

int
rl_limiter_release_prepared(struct rl_limiter *l, const struct rl_wire_req *req,
                            const struct rl_limiter_prep *prep, uint64_t now, uint16_t epoch,
                            struct rl_wire_check_reply *rep)
{
    return lim_settle_key(l, req, prep, now, epoch, true, rep);
}

int
rl_limiter_release(struct rl_limiter *l, const struct rl_wire_req *req, uint64_t now,
                   uint16_t epoch, struct rl_wire_check_reply *rep)
{
    struct rl_limiter_prep prep;

    rl_limiter_prepare(l, req, &prep);
    return rl_limiter_release_prepared(l, req, &prep, now, epoch, rep);
}

int
rl_limiter_adjust(struct rl_limiter *l, const struct rl_wire_req *req, uint64_t now, uint16_t epoch,
                  struct rl_wire_check_reply *rep)
{
    struct rl_limiter_prep prep;

    rl_limiter_prepare(l, req, &prep);
    return rl_limiter_adjust_prepared(l, req, &prep, now, epoch, rep);
}

void
rl_limiter_sweep(struct rl_limiter *l, uint64_t now, size_t budget)
{
    rl_keytab_sweep(l->tab, now, budget);
}

void
rl_limiter_stats(const struct rl_limiter *l, struct rl_limiter_stats *s)
{
    struct rl_keytab_stats ks;

    rl_keytab_stats(l->tab, &ks);
    *s = l->st;
    s->keys = ks.keys;
    s->evicted = ks.evicted;
    s->expired = ks.expired;
    s->memory_bytes = ks.bytes + l->log_bytes;
}

uint64_t
rl_limiter_memory_cap(const struct rl_limiter *l)
{
    return l->memory_cap;
}

size_t
rl_limiter_services(const struct rl_limiter *l)
{
    return l->nsvcs;
}

const char *
rl_limiter_service_stats(const struct rl_limiter *l, size_t i,
                         struct rl_limiter_service_stats *s)
{
    *s = l->svcs[i].st;
    return l->svcs[i].name;
}

/* What rl_limiter_metrics copies on the loop for its families, formatted later
 * (rl_prom_defer): one block, the services' figures then their names. */
struct lim_msvc {
    uint64_t decisions[RL_WIRE_CODE_COUNT];
    uint64_t keys;
    size_t name; /* offset of its name in the block's names */
};

struct lim_msnap {
    struct rl_limiter_stats ls;
    uint64_t inl_decisions[RL_WIRE_CODE_COUNT];
    uint64_t inl_keys;
    uint64_t inl_limits;
    uint64_t memory_cap;
    size_t nsvc;
    const char *names; /* in the block, past svc[nsvc] */
    struct lim_msvc svc[];
};

static void
lim_metrics_fmt(const void *arg, struct rl_prom *p)
{
    const struct lim_msnap *m = arg;
    const struct rl_limiter_stats *ls = &m->ls;
    char lab[320];

    rl_prom_family(p, "rl_node_decisions_total", "counter",
                   "CHECK requests answered, by service (from the config; \"\" when no rule "
                   "matched) and reply code.");
    for (size_t i = 0; i < m->nsvc; i++) {
        const char *svc = m->names + m->svc[i].name;

        for (uint32_t code = 0; code < RL_WIRE_CODE_COUNT; code++) {
            if (code == RL_WIRE_FAIL_OPEN || code == RL_WIRE_FAIL_CLOSED ||
                code == RL_WIRE_NO_RULE) {
                continue; /* a node never answers these under a rule */
            }
            rl_prom_u64(p, "rl_node_decisions_total",
                        rl_prom_labels(lab, sizeof(lab), "service", svc, "code",
                                       rl_wire_code_name(code), NULL),
                        m->svc[i].decisions[code]);
        }
    }
    rl_prom_u64(p, "rl_node_decisions_total",
                rl_prom_labels(lab, sizeof(lab), "service", "", "code", "no_rule", NULL),
                ls->no_rule);
    rl_prom_family(p, "rl_node_inline_decisions_total", "counter",
                   "CHECK requests answered under an inline limit (all services together), by "
                   "reply code.");
    for (uint32_t code = 0; code < RL_WIRE_CODE_COUNT; code++) {
        if (code == RL_WIRE_FAIL_OPEN || code == RL_WIRE_FAIL_CLOSED || code == RL_WIRE_NO_RULE) {
            continue;
        }
        rl_prom_u64(p, "rl_node_inline_decisions_total",
                    rl_prom_labels(lab, sizeof(lab), "code", rl_wire_code_name(code), NULL),
                    m->inl_decisions[code]);
    }
    rl_prom_family(p, "rl_node_inline_keys", "gauge", "Counters (keys) held for inline limits.");
    rl_prom_u64(p, "rl_node_inline_keys", NULL, m->inl_keys);
    rl_prom_family(p, "rl_node_inline_limits", "gauge",
                   "Distinct inline limits held (at most 65536).");
    rl_prom_u64(p, "rl_node_inline_limits", NULL, m->inl_limits);
    rl_prom_family(p, "rl_node_shadow_limited_total", "counter",
                   "CHECKs of shadow-mode services answered allowed that enforce would refuse.");
    rl_prom_u64(p, "rl_node_shadow_limited_total", NULL, ls->shadow_limited);
    rl_prom_family(p, "rl_node_releases_late_total", "counter",
                   "Slots RELEASEs asked back that their key no longer held.");
    rl_prom_u64(p, "rl_node_releases_late_total", NULL, ls->releases_late);
    rl_prom_family(p, "rl_node_keys", "gauge", "Counters (keys) held, by service.");
    for (size_t i = 0; i < m->nsvc; i++) {
        rl_prom_u64(p, "rl_node_keys",
                    rl_prom_labels(lab, sizeof(lab), "service", m->names + m->svc[i].name, NULL),
                    m->svc[i].keys);
    }
    rl_prom_family(p, "rl_node_memory_bytes", "gauge",
                   "Bytes used by counters: the key table and the sliding logs.");
    rl_prom_u64(p, "rl_node_memory_bytes", NULL, ls->memory_bytes);
    rl_prom_family(p, "rl_node_memory_limit_bytes", "gauge",
                   "The node's memory cap for counters ([node NAME] memory).");
    rl_prom_u64(p, "rl_node_memory_limit_bytes", NULL, m->memory_cap);
    rl_prom_family(p, "rl_node_evictions_total", "counter",
                   "Keys dropped at the memory cap to make room, by whether their limit was in "
                   "force.");
    rl_prom_u64(p, "rl_node_evictions_total",
                rl_prom_labels(lab, sizeof(lab), "in_force", "true", NULL), ls->evicted_in_force);
    rl_prom_u64(p, "rl_node_evictions_total",
                rl_prom_labels(lab, sizeof(lab), "in_force", "false", NULL),
                ls->evicted -
                    (ls->evicted_in_force < ls->evicted ? ls->evicted_in_force : ls->evicted));
}

void
rl_limiter_metrics(const struct rl_limiter *l, struct rl_prom *p)
{
    size_t nsvc = l->nsvcs, names = 0, *len = malloc((nsvc ? nsvc : 1) * sizeof(*len));
    struct lim_msnap *m = NULL;
    char *at;

    /* On the loop: the figures and the names copied (memcpy-sized work); the text of
     * thousands of series is formatted off the loop (lim_metrics_fmt). */
    for (size_t i = 0; len != NULL && i < nsvc; i++) {
        len[i] = strlen(l->svcs[i].name) + 1;
        names += len[i];
    }
    if (len != NULL) {
        m = malloc(sizeof(*m) + nsvc * sizeof(m->svc[0]) + names);
    }
    if (m != NULL) {
        rl_limiter_stats(l, &m->ls);
        memcpy(m->inl_decisions, l->inl_svc.st.decisions, sizeof(m->inl_decisions));
        m->inl_keys = l->inl_svc.st.keys;
        m->inl_limits = rl_inltab_count(l->inl);
        m->memory_cap = l->memory_cap;
        m->nsvc = nsvc;
        at = (char *)&m->svc[nsvc];
        m->names = at;
        for (size_t i = 0; i < nsvc; i++) {
            const struct rl_limiter_service_stats *st = &l->svcs[i].st;

            memcpy(m->svc[i].decisions, st->decisions, sizeof(st->decisions));
            m->svc[i].keys = st->keys;
            m->svc[i].name = (size_t)(at - m->names);
            memcpy(at, l->svcs[i].name, len[i]);
            at += len[i];
        }
    }
    free(len);
    rl_prom_defer(p, lim_metrics_fmt, m);
    rl_keytab_metrics(l->tab, p);
}

int
lim_seed_cmp(const void *a, const void *b)
{
    uint64_t x = ((const struct lim_seed_ix *)a)->seed, y = ((const struct lim_seed_ix *)b)->seed;

    return x < y ? -1 : x > y;
}

/* One entry of the walk: to its tier's new index, or dropped (its state freed here, under
 * the old tier it follows). Counts what is kept in its new service. */
static bool
lim_remap_entry(void *arg, struct rl_keytab_entry *e)
{
    struct rl_limiter *l = arg;
    uint32_t to = e->tier < l->ntiers ? l->remap[e->tier] : LIM_GONE;
    const struct rl_tier *t;

    if (rl_inltab_is(e->tier)) {
        /* An inline limit's key is not the rules': it keeps its tier id and its counter
         * (its limit's count of keys is unchanged too). */
        t = rl_inltab_tier(l->inl, e->tier);
        if (t == NULL) {
            return false; /* cannot happen: a limit with keys is never reclaimed */
        }
        lim_count_key_acct(l, t, +1);
        lim_count_log(l, t, rl_algo_heap_bytes(t, &e->st));
        return true;
    }

    if (to == LIM_GONE) {
        if (e->tier < l->ntiers) {
            rl_algo_release(&l->tiers[e->tier], &e->st);
        }
        return false;
    }
    t = &l->conf->tiers[to];
    /* The same algorithm and window (the same key seed): what was consumed stays consumed
     * under the new limit and burst. */
    rl_algo_rescale(&l->tiers[e->tier], t, &e->st);
    e->tier = to;
    lim_count_key(l, t, +1);
    lim_count_log(l, t, rl_algo_heap_bytes(t, &e->st));
    return true;
}

int
rl_limiter_set_rules(struct rl_limiter *l, const struct rl_conf *conf,
                     struct rl_limiter_reload *out)
{
    struct lim_seed_ix *ix = calloc(conf->ntiers + 1, sizeof(*ix));
    uint32_t *remap = calloc(l->ntiers + 1, sizeof(*remap));
    struct rl_tier *tiers = lim_copy_tiers(conf);
    uint32_t maxtiers = lim_maxtiers(conf);
    struct lim_tier *scratch = NULL;
    struct rl_tier *gtiers = NULL;
    struct lim_svc *svcs = NULL;
    uint32_t nsvcs = 0, *svc_of_tier = NULL;
    struct lim_names names = {NULL, 0};
    struct rl_limiter_reload res;
    struct rl_keytab_stats ks;
    bool logs = false;

    memset(&res, 0, sizeof(res));
    if (maxtiers > l->maxtiers) {
        scratch = calloc(maxtiers, sizeof(*scratch));
        gtiers = calloc(maxtiers, sizeof(*gtiers));
    }
    if (ix == NULL || remap == NULL || tiers == NULL ||
        (maxtiers > l->maxtiers && (scratch == NULL || gtiers == NULL)) ||
        lim_group_ix(conf, &svcs, &nsvcs, &svc_of_tier, &names) != 0) {
        free(ix);
        free(remap);
        free(tiers);
        free(scratch);
        free(gtiers);
        return -ENOMEM;
    }
    /* Nothing can fail from here on. Old tier -> new tier with the same key seed (section,
     * algorithm, window, ordinal), whatever its limit and burst. */
    for (size_t i = 0; i < conf->ntiers; i++) {
        ix[i].seed = conf->tiers[i].key_seed;
        ix[i].ix = (uint32_t)i;
        logs |= conf->tiers[i].algo == RL_ALGO_SLIDING_WINDOW_LOG ||
                conf->tiers[i].algo == RL_ALGO_CONCURRENCY;
    }
    qsort(ix, conf->ntiers, sizeof(*ix), lim_seed_cmp);
    for (size_t i = 0; i < l->ntiers; i++) {
        struct lim_seed_ix key = {l->tiers[i].key_seed, 0};
        const struct lim_seed_ix *hit =
            conf->ntiers == 0 ? NULL : bsearch(&key, ix, conf->ntiers, sizeof(*ix), lim_seed_cmp);

        remap[i] = hit != NULL ? hit->ix : LIM_GONE;
        if (hit != NULL && conf->tiers[hit->ix].seed == l->tiers[i].seed) {
            res.tiers_kept++;
        } else if (hit != NULL) {
            res.tiers_carried++;
        }
    }
    free(ix);
    /* The services' cumulative counters follow their names; what they hold is counted
     * again by the walk. */
    for (uint32_t o = 0; o < l->nsvcs; o++) {
        size_t at;
        uint32_t k = lim_names_find(&names, svcs, l->svcs[o].name, &at);

        if (k != UINT32_MAX) {
            svcs[k].st = l->svcs[o].st;
            svcs[k].st.keys = 0;
            svcs[k].st.log_bytes = 0;
        }
    }
    free(l->names->slot);
    *l->names = names;
    l->conf = conf;
    free(l->svcs);
    free(l->svc_of_tier);
    l->svcs = svcs;
    l->nsvcs = nsvcs;
    l->svc_of_tier = svc_of_tier;
    l->nactive = 0;
    l->nlogging = 0;
    l->nkeys = 0;
    l->log_bytes = 0;
    l->inl_svc.st.keys = 0;
    l->inl_svc.st.log_bytes = 0;
    rl_tenants_reset_holdings(l->tenants);
    if (scratch != NULL) {
        free(l->scratch);
        l->scratch = scratch;
        free(l->gtiers);
        l->gtiers = gtiers;
        l->gtiers_cap = maxtiers;
        l->maxtiers = maxtiers;
    }
    l->remap = remap;
    res.keys_dropped = rl_keytab_remap(l->tab, lim_remap_entry, l);
    l->remap = NULL;
    free(remap);
    free(l->tiers);
    l->tiers = tiers;
    l->ntiers = conf->ntiers;
    rl_keytab_stats(l->tab, &ks);
    res.keys_kept = ks.keys;
    res.log_memory_missing = logs && l->log_cap == 0;
    if (out != NULL) {
        *out = res;
    }
    return 0;
}
