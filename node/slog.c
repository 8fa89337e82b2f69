/*
 * slog: the ring buffer of (time, cost) entries behind sliding_window_log (slog.h). Times are
 * 32-bit offsets from a base time: every entry held is within one window of the newest, and a
 * window is shorter than 2^32 ms, so a rebase (rare: once per 49 days of a busy key) keeps
 * the offsets in range. An entry keeps the running total of the costs logged up to it (mod
 * 2^32), not its own cost, so the sum since a time and the entry where the costs reach an
 * amount are binary searches: a long log (a day's window holds up to 86.4M entries) costs a
 * request O(log n), never a walk over it. Not for judging requests (algo.c).
 */
#include "slog.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct rl_slog_ent {
    uint32_t dt;  /* time - base */
    uint32_t cum; /* the running total after this entry's cost (merged costs of one ms), mod
                     2^32: its cost is cum less the entry before's (cum0 for the oldest).
                     Every difference is right as the log holds less than 2^32 (at most L
                     < 2^32, or a debt below RL_ALGO_DEBT_MAX) */
};

struct rl_slog {
    uint64_t base; /* entry times are base + dt */
    uint64_t seen; /* the latest time pruned or appended at */
    uint64_t sum;  /* total cost held */
    uint32_t head; /* slot of the oldest entry */
    uint32_t len;
    uint32_t cap;  /* a power of two */
    uint32_t cum0; /* the running total before the oldest entry */
    struct rl_slog_ent ent[];
};

static uint64_t
slog_size(uint32_t cap)
{
    return sizeof(struct rl_slog) + (uint64_t)cap * sizeof(struct rl_slog_ent);
}

static struct rl_slog_ent *
slog_at(struct rl_slog *g, uint32_t i)
{
    return &g->ent[(g->head + i) & (g->cap - 1)];
}

static const struct rl_slog_ent *
slog_cat(const struct rl_slog *g, uint32_t i)
{
    return &g->ent[(g->head + i) & (g->cap - 1)];
}

/* The running total before entry i (cum0 for the oldest). */
static uint32_t
slog_before(const struct rl_slog *g, uint32_t i)
{
    return i == 0 ? g->cum0 : slog_cat(g, i - 1)->cum;
}

/* Entry i's own cost. */
static uint32_t
slog_cost(const struct rl_slog *g, uint32_t i)
{
    return slog_cat(g, i)->cum - slog_before(g, i);
}

/* Drops the oldest entry. */
static void
slog_pop_oldest(struct rl_slog *g)
{
    const struct rl_slog_ent *o = slog_at(g, 0);

    g->sum -= o->cum - g->cum0;
    g->cum0 = o->cum;
    g->head = (g->head + 1) & (g->cap - 1);
    g->len--;
}

/* Moves the entries, oldest first, into a new ring of newcap slots (>= len). */
static int
slog_resize(struct rl_slog **gp, uint32_t newcap)
{
    struct rl_slog *g = *gp;
    struct rl_slog *n = malloc(slog_size(newcap));

    if (n == NULL) {
        return -ENOMEM;
    }
    memcpy(n, g, sizeof(*g));
    for (uint32_t i = 0; i < g->len; i++) {
        n->ent[i] = *slog_at(g, i);
    }
    n->head = 0;
    n->cap = newcap;
    free(g);
    *gp = n;
    return 0;
}

/* Makes every offset relative to the oldest entry, so that t - base fits again. */
static void
slog_rebase(struct rl_slog *g)
{
    uint32_t d = slog_at(g, 0)->dt;

    for (uint32_t i = 0; i < g->len; i++) {
        slog_at(g, i)->dt -= d;
    }
    g->base += d;
}

/* Adds cost to the newest entry: merged costs stay below 2^32, as rl_slog_append keeps the
 * whole log under it. */
static void
slog_fold(struct rl_slog *g, uint32_t cost)
{
    slog_at(g, g->len - 1)->cum += cost;
    g->sum += cost;
}

uint64_t
rl_slog_bytes(const struct rl_slog *g)
{
    return g == NULL ? 0 : slog_size(g->cap);
}

uint64_t
rl_slog_prune(struct rl_slog *g, uint64_t now, uint32_t window_ms)
{
    if (g == NULL) {
        return now;
    }
    if (now < g->seen) {
        now = g->seen;
    }
    g->seen = now;
    /* The window is (now - W, now]: an entry at t is out once t + W <= now. */
    while (g->len > 0 && g->base + slog_at(g, 0)->dt + window_ms <= now) {
        slog_pop_oldest(g);
    }
    return now;
}

uint64_t
rl_slog_bound(struct rl_slog *g, uint64_t now, uint32_t window_ms)
{
    uint64_t most = now > UINT64_MAX - window_ms ? UINT64_MAX : now + window_ms;
    uint64_t shift;

    if (g == NULL || g->seen <= most) {
        return 0;
    }
    rl_slog_prune(g, g->seen, window_ms); /* every entry now lies after seen - window_ms */
    shift = g->seen - most;
    g->seen = most;
    if (g->len > 0) {
        /* Rebased on the oldest entry: after the shift each lies after now, clear of 0. */
        uint32_t d0 = slog_at(g, 0)->dt;

        for (uint32_t i = 0; i < g->len; i++) {
            slog_at(g, i)->dt -= d0;
        }
        g->base = g->base + d0 - shift;
    }
    return shift;
}

uint64_t
rl_slog_sum(const struct rl_slog *g)
{
    return g == NULL ? 0 : g->sum;
}

uint64_t
rl_slog_sum_since(const struct rl_slog *g, uint64_t t)
{
    uint32_t lo = 0, hi;

    if (g == NULL || g->len == 0) {
        return 0;
    }
    /* the first entry at or after t: times grow from the oldest */
    hi = g->len;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;

        if (g->base + slog_cat(g, mid)->dt < t) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo == g->len) {
        return 0;
    }
    return (uint32_t)(slog_cat(g, g->len - 1)->cum - slog_before(g, lo));
}

uint32_t
rl_slog_len(const struct rl_slog *g)
{
    return g == NULL ? 0 : g->len;
}

void
rl_slog_get(const struct rl_slog *g, uint32_t i, uint64_t *t, uint32_t *cost)
{
    const struct rl_slog_ent *e = slog_cat(g, i);

    *t = g->base + e->dt;
    *cost = slog_cost(g, i);
}

uint32_t
rl_slog_export(const struct rl_slog *g, uint64_t now, uint32_t max, int64_t *age, uint32_t *cost)
{
    uint32_t n = rl_slog_len(g), groups = n > max ? max : n, i = 0;

    for (uint32_t k = 0; k < groups; k++) {
        uint32_t end = (uint32_t)((uint64_t)(k + 1) * n / groups);
        uint64_t sum = 0, tm = 0;

        for (; i < end; i++) {
            uint32_t c;

            rl_slog_get(g, i, &tm, &c);
            sum += c;
        }
        age[k] = now >= tm ? (int64_t)(now - tm) : -(int64_t)(tm - now);
        cost[k] = sum > UINT32_MAX ? UINT32_MAX : (uint32_t)sum;
    }
    return groups;
}

bool
rl_slog_newest(const struct rl_slog *g, uint64_t *t)
{
    if (g == NULL || g->len == 0) {
        return false;
    }
    *t = g->base + slog_cat(g, g->len - 1)->dt;
    return true;
}

uint64_t
rl_slog_reach(const struct rl_slog *g, uint64_t need)
{
    uint32_t lo = 0, hi = g->len - 1;

    /* the first entry whose running total from the oldest reaches need (the newest when none
     * does); the totals grow with the entries, costs being >= 1 */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;

        if ((uint32_t)(slog_cat(g, mid)->cum - g->cum0) < need) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return g->base + slog_cat(g, lo)->dt;
}

int
rl_slog_append(struct rl_slog **gp, uint64_t t, uint32_t cost, uint64_t room)
{
    struct rl_slog *g = *gp;
    struct rl_slog_ent *n;

    if (g == NULL) {
        if (slog_size(RL_SLOG_MIN_CAP) > room) {
            return -ENOMEM;
        }
        g = malloc(slog_size(RL_SLOG_MIN_CAP));
        if (g == NULL) {
            return -ENOMEM;
        }
        memset(g, 0, sizeof(*g));
        g->base = t;
        g->seen = t;
        g->cap = RL_SLOG_MIN_CAP;
        *gp = g;
    }
    if (t < g->seen) {
        t = g->seen;
    }
    g->seen = t;
    if (cost > UINT32_MAX - g->sum) {
        /* the running totals hold less than 2^32 (slog.h); only a bad handoff record asks */
        cost = (uint32_t)(UINT32_MAX - g->sum);
        if (cost == 0) {
            return 0;
        }
    }
    if (g->len == 0) {
        g->head = 0;
        g->base = t;
    } else {
        n = slog_at(g, g->len - 1);
        if (g->base + n->dt == t) {
            slog_fold(g, cost); /* the same ms: merged (below 2^32, as the whole log) */
            return 0;
        }
        if (t - g->base > UINT32_MAX) {
            slog_rebase(g);
            if (t - g->base > UINT32_MAX) {
                /* Only when the caller did not prune: the oldest entry is > 2^32 ms old. */
                slog_fold(g, cost);
                return 1;
            }
        }
    }
    /* Halve a ring three quarters empty, keeping room to grow back without a resize. */
    if (g->cap > RL_SLOG_MIN_CAP && g->len + 1 <= g->cap / 4) {
        if (slog_resize(gp, g->cap / 2) == 0) {
            g = *gp;
        }
    }
    if (g->len == g->cap) {
        if (g->cap >= RL_SLOG_MAX_CAP || slog_size(g->cap * 2) - slog_size(g->cap) > room ||
            slog_resize(gp, g->cap * 2) != 0) {
            slog_fold(g, cost);
            return 1;
        }
        g = *gp;
    }
    n = slog_at(g, g->len);
    n->dt = (uint32_t)(t - g->base);
    n->cum = slog_before(g, g->len) + cost;
    g->len++;
    g->sum += cost;
    return 0;
}

uint64_t
rl_slog_take(struct rl_slog *g, uint64_t amount)
{
    uint64_t took = 0;

    while (g != NULL && g->len > 0 && took < amount) {
        uint32_t c = slog_cost(g, g->len - 1);
        uint64_t want = amount - took;

        if (c <= want) {
            took += c;
            g->sum -= c;
            g->len--;
        } else {
            slog_at(g, g->len - 1)->cum -= (uint32_t)want;
            g->sum -= want;
            took = amount;
        }
    }
    return took;
}

uint64_t
rl_slog_take_oldest(struct rl_slog *g, uint64_t amount)
{
    uint64_t took = 0;

    while (g != NULL && g->len > 0 && took < amount) {
        uint32_t c = slog_cost(g, 0);
        uint64_t want = amount - took;

        if (c <= want) {
            took += c;
            slog_pop_oldest(g);
        } else {
            g->cum0 += (uint32_t)want; /* the oldest entry's cost less want */
            g->sum -= want;
            took = amount;
        }
    }
    return took;
}

struct rl_slog *
rl_slog_dup(const struct rl_slog *g)
{
    struct rl_slog *n;

    if (g == NULL) {
        return NULL;
    }
    n = malloc(slog_size(g->cap));
    if (n != NULL) {
        memcpy(n, g, slog_size(g->cap));
    }
    return n;
}

void
rl_slog_destroy(struct rl_slog *g)
{
    free(g);
}
