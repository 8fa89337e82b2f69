/*
 * algo_conc: the concurrency algorithm of docs/ALGORITHMS.md ("concurrency"): at most N slots
 * held at once by one key, each for at most its lease. A CHECK of cost c takes c slots when
 * the slots held plus c are at most N; a RELEASE gives slots back, the oldest held first; a
 * slot not given back is freed by the node when its lease ends. algo.c dispatches the
 * concurrency tiers here, and its rl_algo_* interface is this algorithm's too. Not for rates
 * (algo.c) nor for finding keys or combining tiers (limiter.c).
 *
 * State: a = struct rl_slog * of the slots held, one entry per ms in which slots were taken
 * (the time taken, and how many: the lease of an entry at t ends at t + lease), so the
 * sliding-window-log storage serves as a list of lease ends, pruned as a window of the lease;
 * b = the newest entry's lease end (full at), 0 when none is held. Never degraded: at the
 * memory cap a new entry is folded into the newest (its lease then ends up to the gap between
 * the two early: it errs toward allowing), as rl_slog_append folds.
 */
#include "algo.h"

#include <string.h>

#include "slog.h"

static struct rl_slog *
conc_log(const struct rl_algo_state *s)
{
    return (struct rl_slog *)(uintptr_t)s->a;
}

/* The lease as the log's window: at most RL_CONF_WINDOW32_MAX (the parser's bound). */
static uint32_t
conc_lease(const struct rl_tier *t)
{
    return (uint32_t)t->window_ms;
}

/* b after a change: the newest entry's lease end, or 0 when nothing is held. */
static void
conc_mark(const struct rl_tier *t, struct rl_algo_state *s)
{
    struct rl_slog *g = conc_log(s);
    uint64_t newest;

    s->b = rl_slog_sum(g) > 0 && rl_slog_newest(g, &newest) ? newest + t->window_ms : 0;
}

void
rl_algo_conc_bound(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now)
{
    if (rl_slog_bound(conc_log(s), now, conc_lease(t)) > 0) {
        conc_mark(t, s);
    }
}

uint64_t
rl_algo_conc_held(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now)
{
    struct rl_slog *g = conc_log(s);

    rl_algo_conc_bound(t, s, now);
    rl_slog_prune(g, now, conc_lease(t));
    if (rl_slog_sum(g) == 0) {
        s->b = 0;
    }
    return rl_slog_sum(g);
}

void
rl_algo_conc_judge(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now, uint32_t cost,
                   struct rl_algo_result *r)
{
    struct rl_slog *g = conc_log(s);
    uint64_t N = t->limit;
    uint64_t W = t->window_ms;
    uint64_t now_eff = rl_slog_prune(g, now, conc_lease(t)); /* rl_algo_judge bounded it */
    uint64_t held = rl_slog_sum(g);
    uint64_t after, newest = 0;
    bool any;

    if (held == 0) {
        s->b = 0; /* every lease ended: the key is full and may be forgotten */
    }
    r->allowed = cost == 0 || held + cost <= N;
    after = r->allowed ? held + cost : held;
    r->limit = N;
    r->remaining = after <= N ? N - after : 0; /* held > N: N lowered by a reload */
    if (r->allowed && cost > 0) {
        newest = now_eff;
        any = true;
    } else {
        any = rl_slog_newest(g, &newest) && held > 0;
    }
    /* until every lease held ends (the newest is within the lease of now_eff >= now) */
    r->reset_ms = any ? newest + W - now : 0;
    if (!r->allowed) {
        if (cost > N) {
            r->retry_ms = RL_ALGO_NEVER;
        } else {
            /* The oldest leases must end until `need` slots are free: nothing else is
             * certain to free any (a RELEASE may come sooner, or not at all). */
            uint64_t need = held + cost - N;
            uint64_t w = rl_slog_reach(g, need) + W - now;

            r->retry_ms = w >= RL_ALGO_NEVER ? RL_ALGO_NEVER - 1 : w;
        }
    }
}

int
rl_algo_conc_commit(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now, uint32_t cost,
                    uint64_t room)
{
    struct rl_slog *g = conc_log(s);
    uint64_t now_eff = rl_slog_prune(g, now, conc_lease(t));
    int rc = rl_slog_append(&g, now_eff, cost, room);

    if (rc < 0) {
        /* A key needs one entry at least: its first is had past the cap (a few bytes, and a
         * concurrency key holds at most N entries). Only malloc failing loses the slots. */
        rc = rl_slog_append(&g, now_eff, cost, UINT64_MAX);
    }
    s->a = (uintptr_t)g;
    conc_mark(t, s);
    return rc == 0 ? 0 : 1;
}

uint64_t
rl_algo_conc_release(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now,
                     uint64_t count)
{
    struct rl_slog *g = conc_log(s);
    uint64_t took;

    if (t->algo != RL_ALGO_CONCURRENCY) {
        return 0;
    }
    rl_algo_conc_bound(t, s, now);
    rl_slog_prune(g, now, conc_lease(t));
    took = rl_slog_take_oldest(g, count);
    conc_mark(t, s);
    return took;
}

uint64_t
rl_algo_conc_full_at(const struct rl_algo_state *s)
{
    return s->b;
}

void
rl_algo_conc_free(struct rl_algo_state *s)
{
    rl_slog_destroy(conc_log(s));
    s->a = 0;
    s->b = 0;
}

uint64_t
rl_algo_conc_heap_bytes(const struct rl_algo_state *s)
{
    return rl_slog_bytes(conc_log(s));
}

int
rl_algo_conc_export(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now,
                    struct rl_algo_xstate *x)
{
    struct rl_slog *g = conc_log(s);
    uint32_t n;

    rl_slog_prune(g, now, conc_lease(t));
    n = rl_slog_len(g);
    if (n == 0 || rl_slog_sum(g) == 0) {
        return 1;
    }
    /* More entries than a record carries are merged in groups, each at its newest entry's
     * time: no slot's lease ends earlier than it would have, and every slot is carried. */
    x->nlog = rl_slog_export(g, now, RL_ALGO_XLOG_MAX, x->age, x->cost);
    return 0;
}

int
rl_algo_conc_import(const struct rl_tier *t, const struct rl_algo_xstate *x, uint64_t now,
                    uint64_t room, struct rl_algo_state *s)
{
    int64_t W = (int64_t)t->window_ms;
    struct rl_slog *g = NULL;

    for (uint32_t i = 0; i < x->nlog; i++) {
        /* a slot taken more than a lease ahead of the clock: a bad record; taken as a lease
         * ahead, so no record holds a slot longer than twice its lease */
        int64_t d = x->age[i] < -W ? W : -x->age[i];
        uint64_t tm = d >= 0 ? now + (uint64_t)d
                             : ((uint64_t)-d > now ? 0 : now - (uint64_t)-d);
        uint64_t seen, before;
        int rc;

        if (x->cost[i] == 0 || (i > 0 && x->age[i] > x->age[i - 1])) {
            rl_slog_destroy(g);
            return -1; /* oldest first, slots actually held */
        }
        seen = rl_slog_prune(g, tm, conc_lease(t));
        before = rl_slog_bytes(g);
        rc = rl_slog_append(&g, seen, x->cost[i], room);
        if (rc < 0) {
            rc = rl_slog_append(&g, seen, x->cost[i], UINT64_MAX);
        }
        if (rc < 0) {
            rl_slog_destroy(g);
            return -1;
        }
        room -= rl_slog_bytes(g) - before > room ? room : rl_slog_bytes(g) - before;
    }
    /* leases that ended before now: freed here as they would have been there */
    rl_slog_prune(g, now, conc_lease(t));
    if (rl_slog_sum(g) == 0) {
        rl_slog_destroy(g);
        g = NULL;
    }
    s->a = (uintptr_t)g;
    conc_mark(t, s);
    return 0;
}
