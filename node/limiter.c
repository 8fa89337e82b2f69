/*
 * limiter: a node's answer to CHECK (limiter.h). Finds the rule, judges every tier of it
 * against the key table without changing anything, and only when every tier allows does it
 * consume in each, so a refusal anywhere leaves every counter as it was. Builds the reply
 * fields of docs/PROTOCOL.md from the tier that decided. Not for sockets or framing (server.c), nor
 * for the arithmetic of the algorithms (algo.c). Its other files, which share its struct
 * through limiter_int.h: the accounts of keys and log bytes and the key table's eviction
 * (limiter_acct.c), the services of the rules and their reload (limiter_rules.c), ADJUST and
 * RELEASE (limiter_settle.c), handoff records (limiter_handoff.c).
 *
 * Memory (docs/ALGORITHMS.md, "Under memory pressure"): the cap is split between the key
 * table and the sliding logs, which live outside it. When the rules have a sliding_window_log
 * tier, half the cap is kept for logs, shared equally by the services that hold logs; a log
 * that would grow past its service's share, or a new one that cannot be had, is degraded to
 * a sliding_window_counter of the same counts (algo.h): approximate, never unlimited. At the
 * table's cap the eviction (limiter_acct.c) takes, from a sample, a key back at full allowance if
 * there is one, else a key of a service holding at least its equal share of the keys that limits
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
    rl_limiter_export_cancel(l);
    rl_keytab_destroy(l->tab);
    rl_inltab_destroy(l->inl);
    rl_tenants_destroy(l->tenants);
    free(l->names->slot);
    free(l->names);
    free(l->scratch);
    free(l->gtiers);
    free(l->gowners);
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
void
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
void
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

void
lim_entry_current(struct rl_limiter *l, struct rl_keytab_entry *e, const struct rl_tier *t,
                  uint16_t epoch)
{
    if (e->tier != t->id) {
        lim_retier(l, e, t);
    }
    if (e->epoch != epoch) {
        lim_release_state(l, t, &e->st);
        memset(&e->st, 0, sizeof(e->st));
        e->epoch = epoch;
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
void
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
            lim_entry_current(l, e, t, epoch);
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
        rc = rl_inltab_intern(l->inl, &want, lim_global_owner(req->service.ptr, req->service.len),
                              RL_INLTAB_SCALED, &id);
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
        rc = rl_inltab_intern(l->inl, &want, req->tenant, RL_INLTAB_CLIENT, &id);
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

/* lim_select out of line, for ADJUST and RELEASE (limiter_settle.c): a CHECK keeps it inlined. */
int
lim_select_tiers(struct rl_limiter *l, const struct rl_wire_req *req, const struct rl_rule *rule,
                 struct lim_judge *j)
{
    return lim_select(l, req, rule, j);
}

/* The state tier t judges x's key by: its entry of this epoch (carried as it will be when it
 * was kept under another slice, lim_retier), else a blank one in x. */
static inline struct rl_algo_state *
lim_state_of(struct rl_limiter *l, struct lim_tier *x, const struct rl_tier *t, uint16_t epoch,
             uint64_t now)
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
        /* judged on a rescaled copy, whose bound (a clock stepped back) a refusal would not
         * keep: the key's own state is bounded first */
        rl_algo_bound(from, &x->e->st, now);
        x->blank = x->e->st;
        rl_algo_rescale(from, t, &x->blank);
        return &x->blank;
    }
    return &x->e->st;
}

/* Step 2: judges every tier into l->scratch; nothing is inserted, so entry pointers stay
 * valid. Returns whether a tier refused. */
inline bool
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
        rl_algo_judge(t, lim_state_of(l, x, t, epoch, now), now, cost, &x->r, &x->next);
        refused |= !x->r.allowed;
    }
    return refused;
}

/* Step 3, allowed: the deciding tier has the least left after the request, the first on a
 * tie; *queue is the longest any tier queues it for. */
inline const struct rl_algo_result *
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
inline const struct rl_algo_result *
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

void
rl_limiter_sweep(struct rl_limiter *l, uint64_t now, uint64_t grace, size_t budget)
{
    l->sweep_now = now;
    rl_keytab_sweep(l->tab, now > grace ? now - grace : 0, budget);
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
