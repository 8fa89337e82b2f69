/*
 * algo_handoff: a rate algorithm's state relative to the clock, for the handoff
 * (rl_algo_export, rl_algo_import; docs/ALGORITHMS.md): times as offsets from now, a sliding
 * log's entries by age, so that another node with another clock takes the key up where this
 * one left it; an import checks its record and bounds what a bad one could do. Not for
 * judging (algo.c) nor for the record's encoding (handoff.c); the concurrency algorithm's
 * states are algo_conc.c's.
 */
#include "algo_int.h"

#include <errno.h>

#include "slog.h"

static int64_t
rel_ms(uint64_t a, uint64_t b)
{
    /* a - b for times below 2^62 */
    return a >= b ? (int64_t)(a - b) : -(int64_t)(b - a);
}

/* now + d, at least 0 */
static uint64_t
at_ms(uint64_t now, int64_t d)
{
    if (d >= 0) {
        return now + (uint64_t)d;
    }
    return (uint64_t)-d > now ? 0 : now - (uint64_t)-d;
}

int
rl_algo_export(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now,
               struct rl_algo_xstate *x)
{
    uint64_t W = t->window_ms;

    x->shape = (uint8_t)t->algo;
    x->t_ms = 0;
    x->v = 0;
    x->nlog = 0;
    if (rl_algo_is_full(t, s, now)) {
        return 1;
    }
    switch (t->algo) {
    case RL_ALGO_FIXED_WINDOW:
    case RL_ALGO_SLIDING_WINDOW_COUNTER:
        x->t_ms = rel_ms((s->a + 1) * W, now);
        x->v = s->b;
        return 0;
    case RL_ALGO_SLIDING_WINDOW_LOG: {
        struct rl_slog *g;
        uint32_t n;

        if (swl_degraded(s)) {
            struct rl_algo_state c = swl_counter(s);

            x->shape = RL_ALGO_SLIDING_WINDOW_COUNTER;
            x->t_ms = rel_ms((c.a + 1) * W, now);
            x->v = c.b;
            return 0;
        }
        g = swl_log(s);
        (void)rl_slog_prune(g, now, (uint32_t)W);
        n = rl_slog_len(g);
        if (n == 0) {
            return 1;
        }
        /* A log longer than a record carries goes merged (rl_slog_export): every cost, none
         * ending earlier than here, so the receiver never allows more than this node would.
         * (Before, it went as its sliding_window_counter counts, whose estimate allowed up
         * to twice the limit in a window after the move.) */
        x->nlog = rl_slog_export(g, now, RL_ALGO_XLOG_MAX, x->age, x->cost);
        return 0;
    }
    case RL_ALGO_CONCURRENCY:
        return rl_algo_conc_export(t, s, now, x);
    case RL_ALGO_TOKEN_BUCKET:
        x->t_ms = rel_ms(now, s->a);
        x->v = s->b;
        return 0;
    case RL_ALGO_GCRA:
    case RL_ALGO_LEAKY_BUCKET: {
        uint64_t L = t->limit, last = 0, ne;
        u128 xx = gcra_x(s), nl;

        if (L == 0 || xx == 0) {
            return 1;
        }
        if (xx / L > gcra_off_decode((uint32_t)(s->b >> 32))) {
            last = (uint64_t)(xx / L - gcra_off_decode((uint32_t)(s->b >> 32)));
        }
        ne = max64(now, last);
        nl = (u128)ne * L;
        if (xx <= nl) {
            return 1;
        }
        x->t_ms = rel_ms(now, last);
        x->v = sat64(xx - nl);
        return 0;
    }
    default:
        return 1;
    }
}

/* The window of this clock whose end is nearest to now + t_ms: k, or false when none ends
 * after 0. */
static bool
import_window(uint64_t W, uint64_t now, int64_t t_ms, uint64_t *k)
{
    uint64_t end = at_ms(now, t_ms);
    uint64_t n = (end + W / 2) / W; /* the nearest window boundary, as a count of windows */

    if (n == 0) {
        return false;
    }
    *k = n - 1;
    return true;
}

static int
import_log(const struct rl_tier *t, const struct rl_algo_xstate *x, uint64_t now, uint64_t room,
           struct rl_algo_state *s)
{
    uint64_t W = t->window_ms;
    struct rl_slog *g = NULL;
    uint64_t newest = 0, k = now / W, cur = 0, prev = 0;
    bool exact = true;

    for (uint32_t i = 0; i < x->nlog; i++) {
        /* an entry more than a window ahead of the clock: a bad record (import_bound) */
        uint64_t tm = at_ms(now, x->age[i] < -(int64_t)W ? (int64_t)W : -x->age[i]);

        if (x->cost[i] == 0 || (i > 0 && x->age[i] > x->age[i - 1])) {
            rl_slog_destroy(g);
            return -EINVAL; /* oldest first, costs of allowed requests */
        }
        if (tm >= k * W) {
            cur += x->cost[i];
        } else if (tm + W >= k * W) {
            prev += x->cost[i];
        }
        if (exact) {
            uint64_t seen = rl_slog_prune(g, tm, (uint32_t)W);
            uint64_t before = rl_slog_bytes(g);
            int rc = rl_slog_append(&g, seen, x->cost[i], room);

            room -= rl_slog_bytes(g) - before > room ? room : rl_slog_bytes(g) - before;
            exact = rc == 0;
            newest = seen;
        }
    }
    if (!exact) {
        /* no room for the log here: the key is degraded, as at the memory cap */
        struct rl_algo_state c = {k, (prev > UINT32_MAX ? UINT32_MAX : prev) << 32 |
                                         (cur > UINT32_MAX ? UINT32_MAX : cur)};

        rl_slog_destroy(g);
        swl_tag(s, &c);
        return 0;
    }
    s->a = (uintptr_t)g;
    s->b = g != NULL ? newest + W : 0;
    return 0;
}

/* A time ahead of the clock by more than a window is no clock's step back but a bad record:
 * it would freeze the key that long. Such times are taken as one window ahead. */
static void
import_bound(const struct rl_tier *t, const struct rl_algo_xstate *in, struct rl_algo_xstate *x)
{
    int64_t W = (int64_t)t->window_ms;

    x->shape = in->shape;
    x->v = in->v;
    x->nlog = 0;
    x->t_ms = in->t_ms;
    if (in->shape == RL_ALGO_FIXED_WINDOW || in->shape == RL_ALGO_SLIDING_WINDOW_COUNTER) {
        x->t_ms = in->t_ms > W ? W : in->t_ms;
    } else if (in->t_ms < -W) {
        x->t_ms = -W;
    }
}

int
rl_algo_import(const struct rl_tier *t, const struct rl_algo_xstate *in, uint64_t now,
               uint64_t room, struct rl_algo_state *s)
{
    uint64_t W = t->window_ms, k;
    struct rl_algo_xstate xb;
    const struct rl_algo_xstate *x = &xb;

    s->a = 0;
    s->b = 0;
    if (in->shape == RL_ALGO_SLIDING_WINDOW_LOG || in->shape == RL_ALGO_CONCURRENCY) {
        x = in; /* its entries are bounded in import_log, rl_algo_conc_import */
    } else {
        import_bound(t, in, &xb);
    }
    if (x->shape != t->algo &&
        !(t->algo == RL_ALGO_SLIDING_WINDOW_LOG && x->shape == RL_ALGO_SLIDING_WINDOW_COUNTER)) {
        return -EINVAL;
    }
    if (x->nlog > RL_ALGO_XLOG_MAX || (x->nlog > 0 && x->shape != RL_ALGO_SLIDING_WINDOW_LOG &&
                                       x->shape != RL_ALGO_CONCURRENCY)) {
        return -EINVAL;
    }
    switch ((enum rl_algo)x->shape) {
    case RL_ALGO_FIXED_WINDOW:
        if (x->v > UINT32_MAX) {
            return -EINVAL;
        }
        if (x->v != 0 && import_window(W, now, x->t_ms, &k)) {
            s->a = k;
            s->b = x->v;
        }
        return 0;
    case RL_ALGO_SLIDING_WINDOW_COUNTER:
        if (x->v != 0 && import_window(W, now, x->t_ms, &k)) {
            struct rl_algo_state c = {k, x->v};

            if (t->algo == RL_ALGO_SLIDING_WINDOW_LOG) {
                swl_tag(s, &c);
            } else {
                *s = c;
            }
        }
        return 0;
    case RL_ALGO_SLIDING_WINDOW_LOG:
        return import_log(t, x, now, room, s);
    case RL_ALGO_CONCURRENCY:
        return rl_algo_conc_import(t, x, now, room, s) == 0 ? 0 : -EINVAL;
    case RL_ALGO_TOKEN_BUCKET:
        if (x->v != 0) {
            s->a = at_ms(now, -x->t_ms);
            s->b = x->v;
        }
        return 0;
    case RL_ALGO_GCRA:
    case RL_ALGO_LEAKY_BUCKET: {
        uint64_t L = t->limit, last = at_ms(now, -x->t_ms), ne = max64(now, last), off;
        u128 xa;

        if (L == 0) {
            return -EINVAL;
        }
        if (x->v == 0) {
            return 0;
        }
        xa = (u128)ne * L + x->v;
        off = sat64(xa / L - last);
        s->a = (uint64_t)xa;
        s->b = (uint64_t)(xa >> 64) | (uint64_t)gcra_off_encode(off) << 32;
        return 0;
    }
    default:
        return -EINVAL;
    }
}
