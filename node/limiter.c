/*
 * limiter: a node's answer to CHECK (limiter.h). Finds the rule, judges every tier of it
 * against the key table without changing anything, and only when every tier allows does it
 * consume in each, so a refusal anywhere leaves every counter as it was. Builds the reply
 * fields of docs/PROTOCOL.md from the tier that decided. Not for sockets or framing (server.c), nor
 * for the arithmetic of the algorithms (algo.c).
 *
 * Memory: the cap is split between the key table and the sliding logs, which live outside
 * it. When the rules have a sliding_window_log tier, half the cap is kept for logs; a log that
 * would go past its share stops growing and folds further costs into its newest entry (still
 * counted, but leaving the window early), and a new log that cannot be had at all is not
 * kept: both err toward allowing, never toward a wrong refusal.
 */
#include "limiter.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "algo.h"
#include "keytab.h"

/* What one tier of the request in hand needs between its judgment and its commit. */
struct lim_tier {
    uint64_t fp_hi;
    uint32_t fp_lo;
    struct rl_keytab_entry *e;  /* valid until the first insert of the commit phase */
    struct rl_algo_state blank; /* the state of a key not in the table: zero, full */
    struct rl_algo_state next;
    struct rl_algo_result r;
};

struct rl_limiter {
    const struct rl_conf *conf;
    struct rl_keytab *tab;
    uint64_t log_cap;   /* bytes the sliding logs may hold */
    uint64_t log_bytes; /* bytes they hold now */
    struct rl_limiter_stats st;
    uint32_t maxtiers;
    struct lim_tier *scratch; /* maxtiers of them, so a check never allocates */
};

/* Seeds the key hash with the rule (the service, or its endpoint section) and the tier, so
 * each user gets one counter per section and per tier. */
static uint64_t
lim_seed(const struct rl_rule *rule, const struct rl_tier *t)
{
    return UINT64_C(0x726c2d6b65792d31) ^ ((uint64_t)rule->id << 32) ^ t->id;
}

static const struct rl_tier *
lim_entry_tier(const struct rl_limiter *l, const struct rl_keytab_entry *e)
{
    return e->tier < l->conf->ntiers ? &l->conf->tiers[e->tier] : NULL;
}

static bool
lim_is_full(void *arg, const struct rl_keytab_entry *e, uint64_t now)
{
    const struct rl_tier *t = lim_entry_tier(arg, e);

    return t == NULL || rl_algo_is_full(t, &e->st, now);
}

static uint64_t
lim_full_at(void *arg, const struct rl_keytab_entry *e)
{
    const struct rl_tier *t = lim_entry_tier(arg, e);

    return t == NULL ? 0 : rl_algo_full_at(t, &e->st);
}

static void
lim_release_state(struct rl_limiter *l, const struct rl_tier *t, struct rl_algo_state *s)
{
    l->log_bytes -= rl_algo_heap_bytes(t, s);
    rl_algo_release(t, s);
}

static void
lim_release(void *arg, struct rl_keytab_entry *e)
{
    struct rl_limiter *l = arg;
    const struct rl_tier *t = lim_entry_tier(l, e);

    if (t != NULL) {
        lim_release_state(l, t, &e->st);
    }
}

int
rl_limiter_create(struct rl_limiter **out, const struct rl_conf *conf, uint64_t memory_bytes)
{
    struct rl_limiter *l = calloc(1, sizeof(*l));
    struct rl_keytab_ops ops = {lim_is_full, lim_full_at, lim_release, l};
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
        logs |= conf->tiers[i].algo == RL_ALGO_SLIDING_WINDOW_LOG;
    }
    l->log_cap = logs ? memory_bytes / 2 : 0;
    l->maxtiers = 1;
    for (size_t i = 0; i < conf->nrules; i++) {
        if (conf->rules[i].ntiers > l->maxtiers) {
            l->maxtiers = conf->rules[i].ntiers;
        }
    }
    l->scratch = calloc(l->maxtiers, sizeof(*l->scratch));
    if (l->scratch == NULL) {
        goto fail;
    }
    rc = rl_keytab_create(&l->tab, memory_bytes - l->log_cap, &ops);
    if (rc != 0) {
        goto fail_scratch;
    }
    *out = l;
    return 0;

fail_scratch:
    free(l->scratch);
fail:
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
    free(l->scratch);
    free(l);
}

/* Consumes in one tier's state, keeping the count of log bytes. */
static void
lim_commit(struct rl_limiter *l, const struct rl_tier *t, struct rl_algo_state *s,
           const struct rl_algo_state *next, uint64_t now, uint32_t cost)
{
    uint64_t before;
    uint64_t room;

    if (t->algo != RL_ALGO_SLIDING_WINDOW_LOG) {
        rl_algo_commit(t, s, next, now, cost);
        return;
    }
    before = rl_algo_heap_bytes(t, s);
    room = l->log_cap > l->log_bytes ? l->log_cap - l->log_bytes : 0;
    if (rl_algo_commit_capped(t, s, next, now, cost, room) != 0) {
        l->st.log_folded++;
    }
    /* Unsigned arithmetic wraps back correctly when the log shrank. */
    l->log_bytes += rl_algo_heap_bytes(t, s) - before;
}

/* Every tier allowed: consume in each, adding keys that were not in the table. */
static void
lim_consume(struct rl_limiter *l, const struct rl_rule *rule, uint64_t now, uint32_t cost)
{
    const struct rl_tier *tiers = &l->conf->tiers[rule->first_tier];
    bool moved = false; /* an insert may move every entry: find again after one */

    for (uint32_t i = 0; i < rule->ntiers; i++) {
        const struct rl_tier *t = &tiers[i];
        struct lim_tier *x = &l->scratch[i];
        struct rl_keytab_entry *e = moved ? rl_keytab_find(l->tab, x->fp_hi, x->fp_lo) : x->e;
        struct rl_algo_state s;

        if (e != NULL) {
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
        e = rl_keytab_insert(l->tab, x->fp_hi, x->fp_lo, t->id, now);
        moved = true;
        if (e == NULL) {
            lim_release_state(l, t, &s);
            continue;
        }
        e->st = s;
    }
}

void
rl_limiter_check(struct rl_limiter *l, const struct rl_wire_req *req, uint64_t now,
                 struct rl_wire_check_reply *rep)
{
    const struct rl_rule *rule;
    const struct rl_tier *tiers;
    const struct rl_algo_result *dec = NULL;
    uint64_t remaining = UINT64_MAX;
    uint64_t queue = 0;
    bool refused = false;

    memset(rep, 0, sizeof(*rep));
    rep->id = req->id;
    l->st.checks++;
    if (req->cost == 0) {
        l->st.peeks++;
    }
    rule = rl_conf_rule(l->conf, req->service.ptr, req->service.len, req->endpoint.ptr,
                        req->endpoint.ptr == NULL ? 0 : req->endpoint.len);
    if (rule == NULL || rule->ntiers == 0) {
        rep->code = RL_WIRE_NO_RULE;
        l->st.no_rule++;
        return;
    }
    tiers = &l->conf->tiers[rule->first_tier];

    /* Judge every tier first; nothing is inserted, so entry pointers stay valid. */
    for (uint32_t i = 0; i < rule->ntiers; i++) {
        const struct rl_tier *t = &tiers[i];
        struct lim_tier *x = &l->scratch[i];
        XXH128_hash_t h = XXH3_128bits_withSeed(req->user.ptr, req->user.len, lim_seed(rule, t));
        struct rl_algo_state *s;

        rl_keytab_fingerprint(h.high64, h.low64, &x->fp_hi, &x->fp_lo);
        x->e = rl_keytab_find(l->tab, x->fp_hi, x->fp_lo);
        if (x->e != NULL) {
            s = &x->e->st;
        } else {
            memset(&x->blank, 0, sizeof(x->blank));
            s = &x->blank;
        }
        rl_algo_judge(t, s, now, req->cost, &x->r, &x->next);
        refused |= !x->r.allowed;
    }

    if (!refused) {
        /* The deciding tier has the least left after the request; the first on a tie. */
        for (uint32_t i = 0; i < rule->ntiers; i++) {
            const struct rl_algo_result *r = &l->scratch[i].r;

            if (dec == NULL || r->remaining < dec->remaining) {
                dec = r;
            }
            if (r->queue_ms > queue) {
                queue = r->queue_ms;
            }
        }
        remaining = dec->remaining;
        if (req->cost > 0) {
            lim_consume(l, rule, now, req->cost);
        }
    } else {
        /* The request waits for its slowest refusing tier, as time alone only ever frees
         * allowance; tiers that allowed report what they hold, as nothing was consumed. */
        for (uint32_t i = 0; i < rule->ntiers; i++) {
            const struct rl_algo_result *r = &l->scratch[i].r;
            uint64_t left = r->allowed ? r->remaining + req->cost : r->remaining;

            if (left < remaining) {
                remaining = left;
            }
            if (!r->allowed && (dec == NULL || r->retry_ms > dec->retry_ms)) {
                dec = r;
            }
        }
    }
    rep->limit = dec->limit;
    rep->remaining = remaining;
    rep->reset_ms = dec->reset_ms;

    if (rule->shadow && (refused || queue > 0)) {
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
