/*
 * check_algo: the algorithms of node/algo.c. Known answers worked by hand for each of them,
 * then brute force: on random request sequences with small L, W and B under a simulated clock,
 * every reply field is checked against its definition (the largest cost still allowed, the
 * smallest wait until full, the smallest wait until the same request is allowed), and gcra
 * against token_bucket. Needs no key table, config parser or codec: tiers are built by hand.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "rltest.h"
#include "slog.h"

#define NEVER RL_ALGO_NEVER

/* Names from the map itself: rl_algo_name lives in ruleset.c, which this suite must not need. */
static const char *const algo_names[] = {
#define ALGO_NAME(n, s, b) s,
    RL_ALGO_MAP(ALGO_NAME)
#undef ALGO_NAME
};

static const enum rl_algo all_algos[] = {
    RL_ALGO_FIXED_WINDOW,
    RL_ALGO_SLIDING_WINDOW_LOG,
    RL_ALGO_SLIDING_WINDOW_COUNTER,
    RL_ALGO_TOKEN_BUCKET,
    RL_ALGO_GCRA,
    RL_ALGO_LEAKY_BUCKET,
};

static struct rl_tier
mk_tier(enum rl_algo a, uint32_t limit, uint64_t window_ms, uint32_t burst)
{
    struct rl_tier t;

    memset(&t, 0, sizeof(t));
    t.algo = a;
    t.limit = limit;
    t.window_ms = window_ms;
    t.burst = burst;
    return t;
}

static bool
is_bucket(enum rl_algo a)
{
    return a == RL_ALGO_TOKEN_BUCKET || a == RL_ALGO_GCRA || a == RL_ALGO_LEAKY_BUCKET;
}

/* splitmix64: reproducible sequences from a seed printed on failure. */
static uint64_t
rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t
rnd_in(uint64_t *s, uint64_t lo, uint64_t hi)
{
    return lo + rnd(s) % (hi - lo + 1);
}

/* A copy that owns its own log, so probing other times leaves the original alone. */
static struct rl_algo_state
dup_state(const struct rl_tier *t, const struct rl_algo_state *s)
{
    struct rl_algo_state c = *s;

    if (t->algo == RL_ALGO_SLIDING_WINDOW_LOG && s->a != 0 && !rl_algo_degraded(t, s)) {
        c.a = (uintptr_t)rl_slog_dup((const struct rl_slog *)(uintptr_t)s->a);
        RL_CHECK(c.a != 0);
    }
    return c;
}

/* Judges on a copy: a pure question about the state at now. */
static struct rl_algo_result
probe(const struct rl_tier *t, const struct rl_algo_state *s, uint64_t now, uint32_t cost)
{
    struct rl_algo_state c = dup_state(t, s);
    struct rl_algo_state next;
    struct rl_algo_result r;

    rl_algo_judge(t, &c, now, cost, &r, &next);
    rl_algo_release(t, &c);
    return r;
}

/* A request for real: judges and, when allowed, consumes. */
static struct rl_algo_result
req(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now, uint32_t cost)
{
    struct rl_algo_state next;
    struct rl_algo_result r;

    rl_algo_judge(t, s, now, cost, &r, &next);
    if (r.allowed && cost > 0) {
        RL_CHECK_INT_EQ(rl_algo_commit(t, s, &next, now, cost), 0);
    }
    return r;
}

static uint64_t
capacity(const struct rl_tier *t)
{
    if (is_bucket(t->algo)) {
        return t->limit == 0 ? 0 : t->burst;
    }
    return t->limit;
}

static bool
bf_full(const struct rl_tier *t, const struct rl_algo_state *s, uint64_t now)
{
    return probe(t, s, now, 0).remaining == capacity(t);
}

/* The smallest d >= 0 such that the state is at full allowance at now + d. */
static uint64_t
bf_reset(const struct rl_tier *t, const struct rl_algo_state *s, uint64_t now)
{
    for (uint64_t d = 0; d < 100000; d++) {
        if (bf_full(t, s, now + d)) {
            return d;
        }
    }
    ck_abort_msg("never full");
    return 0;
}

/*
 * Checks every field of the judgment of (now, cost) on s by brute force, and the is_full and
 * full_at of the state after it. ctx names the case on failure. The brute force starts from
 * the state as of now (a peek at now: what time alone does to it, such as a log's pruning or
 * the bound of a clock's step back past a window), since the judgment has done that to it.
 */
static void
verify(const struct rl_tier *t, const struct rl_algo_state *s0, uint64_t now, uint32_t cost,
       const char *ctx)
{
    struct rl_algo_state seen = dup_state(t, s0), *s = &seen;
    struct rl_algo_result r = probe(t, s0, now, cost);
    struct rl_algo_state after;
    uint64_t rem = 0;
    uint64_t reset;

    req(t, s, now, 0);
    after = dup_state(t, s);
    if (r.allowed) {
        req(t, &after, now, cost);
    }
    RL_CHECK(cost > 0 || r.allowed, "%s: peek refused", ctx);
    RL_CHECK(r.limit == capacity(t), "%s: limit %llu", ctx, (unsigned long long)r.limit);

    /* remaining: the largest x allowed right after, every smaller one allowed too. */
    while (rem <= capacity(t) + 1 && probe(t, &after, now, (uint32_t)(rem + 1)).allowed) {
        rem++;
    }
    RL_CHECK(r.remaining == rem, "%s: remaining %llu, brute force %llu", ctx,
             (unsigned long long)r.remaining, (unsigned long long)rem);

    /* reset_ms, and is_full / full_at against the same brute force. */
    reset = bf_reset(t, &after, now);
    RL_CHECK(r.reset_ms == reset, "%s: reset %llu, brute force %llu", ctx,
             (unsigned long long)r.reset_ms, (unsigned long long)reset);
    for (uint64_t d = 0; d <= reset + 2; d++) {
        bool full = d >= reset;

        RL_CHECK(rl_algo_is_full(t, &after, now + d) == full, "%s: is_full at +%llu", ctx,
                 (unsigned long long)d);
        RL_CHECK((now + d >= rl_algo_full_at(t, &after)) == full, "%s: full_at %llu", ctx,
                 (unsigned long long)rl_algo_full_at(t, &after));
    }

    /* retry_ms: the smallest d with the same request allowed at now + d. */
    if (r.allowed) {
        RL_CHECK(r.retry_ms == 0, "%s: allowed with retry", ctx);
    } else if (cost > capacity(t)) {
        RL_CHECK(r.retry_ms == NEVER, "%s: retry %llu, want never", ctx,
                 (unsigned long long)r.retry_ms);
        for (uint64_t d = 1; d < 3 * (uint64_t)t->window_ms + 200; d += 7) {
            RL_CHECK(!probe(t, s, now + d, cost).allowed, "%s: allowed at +%llu", ctx,
                     (unsigned long long)d);
        }
    } else {
        uint64_t d = 1;

        while (!probe(t, s, now + d, cost).allowed) {
            d++;
            RL_CHECK(d < 100000, "%s: never allowed", ctx);
        }
        RL_CHECK(r.retry_ms == d, "%s: retry %llu, brute force %llu", ctx,
                 (unsigned long long)r.retry_ms, (unsigned long long)d);
    }

    /* queue_ms: a leaky request departs when the bucket before it would have drained. */
    if (t->algo == RL_ALGO_LEAKY_BUCKET && r.allowed && cost > 0) {
        uint64_t q = bf_reset(t, s, now);

        RL_CHECK(r.queue_ms == q, "%s: queue %llu, brute force %llu", ctx,
                 (unsigned long long)r.queue_ms, (unsigned long long)q);
    } else {
        RL_CHECK(r.queue_ms == 0, "%s: queue %llu", ctx, (unsigned long long)r.queue_ms);
    }
    rl_algo_release(t, &after);
    rl_algo_release(t, &seen);
}

/* ---- known answers --------------------------------------------------------------------- */

START_TEST(test_fixed_window_boundary)
{
    struct rl_tier t = mk_tier(RL_ALGO_FIXED_WINDOW, 5, 1000, 5);
    struct rl_algo_state s = {0, 0};
    struct rl_algo_result r;

    /* L at the very end of window 9, L more at the start of window 10: 2L in 2 ms. */
    for (int i = 0; i < 5; i++) {
        r = req(&t, &s, 9999, 1);
        RL_CHECK(r.allowed);
        RL_CHECK_UINT_EQ(r.remaining, 4 - i);
        RL_CHECK_UINT_EQ(r.reset_ms, 1);
    }
    r = req(&t, &s, 9999, 1);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, 1);
    ck_assert_uint_eq(r.limit, 5);
    ck_assert_uint_eq(r.remaining, 0);
    for (int i = 0; i < 5; i++) {
        RL_CHECK(req(&t, &s, 10000, 1).allowed);
    }
    r = req(&t, &s, 10000, 1);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, 1000);
    r = req(&t, &s, 10500, 6);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, NEVER);
    r = req(&t, &s, 10500, 0);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.remaining, 0);
    ck_assert_uint_eq(r.reset_ms, 500);
}
END_TEST

START_TEST(test_sliding_log_refused_not_logged)
{
    struct rl_tier t = mk_tier(RL_ALGO_SLIDING_WINDOW_LOG, 2, 1000, 2);
    struct rl_algo_state s = {0, 0};
    struct rl_algo_result r;

    ck_assert(req(&t, &s, 0, 1).allowed);
    r = req(&t, &s, 500, 1);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.remaining, 0);
    ck_assert_uint_eq(r.reset_ms, 1000);
    r = req(&t, &s, 600, 1);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, 400);
    r = req(&t, &s, 999, 1);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, 1);
    /* The entry at 0 leaves at 1000; had 600 and 999 been logged, this would be refused. */
    r = req(&t, &s, 1000, 1);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.reset_ms, 1000);
    r = req(&t, &s, 1499, 1);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, 1);
    ck_assert(req(&t, &s, 1500, 1).allowed);
    /* Cost 2 needs both entries (1000 and 1500) gone: at 2500. */
    r = req(&t, &s, 1600, 2);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, 900);
    ck_assert(!rl_algo_is_full(&t, &s, 2499));
    ck_assert(rl_algo_is_full(&t, &s, 2500));
    ck_assert_uint_eq(rl_algo_full_at(&t, &s), 2500);
    rl_algo_release(&t, &s);
    ck_assert(s.a == 0 && s.b == 0);
}
END_TEST

START_TEST(test_sliding_counter_weighted)
{
    struct rl_tier t = mk_tier(RL_ALGO_SLIDING_WINDOW_COUNTER, 10, 1000, 10);
    struct rl_algo_state s = {0, 0};
    struct rl_algo_result r;

    ck_assert(req(&t, &s, 100, 8).allowed);
    /* At 1250: p = 8, e = 250, p(W-e) = 6000, so cur + cost <= 4. */
    r = req(&t, &s, 1250, 5);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.remaining, 4);
    /* 8(W-e') <= (10-0-5)*1000 from e' = 375: 125 ms. */
    ck_assert_uint_eq(r.retry_ms, 125);
    ck_assert_uint_eq(r.reset_ms, 750); /* p weighs until window 1 ends */
    r = req(&t, &s, 1250, 4);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.remaining, 0);
    ck_assert_uint_eq(r.reset_ms, 1750); /* cur = 4 weighs through window 2 */
    r = req(&t, &s, 1250, 1);
    ck_assert(!r.allowed);
    /* 8(W-e') <= (10-4-1)*1000: e' = 375 again. */
    ck_assert_uint_eq(r.retry_ms, 125);
    r = req(&t, &s, 1375, 1);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.remaining, 0);
    /* Window 2: p = 5, 5(W-e) + 1000c <= 10000: c = 5 from e = 0, c = 10 needs e = 1000. */
    r = probe(&t, &s, 2000, 5);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.remaining, 0);
    r = probe(&t, &s, 2000, 10);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, 1000);
    ck_assert_uint_eq(rl_algo_full_at(&t, &s), 3000);
}
END_TEST

START_TEST(test_token_bucket_refill)
{
    struct rl_tier t = mk_tier(RL_ALGO_TOKEN_BUCKET, 10, 1000, 5);
    struct rl_algo_state s = {0, 0};
    struct rl_algo_result r;

    r = req(&t, &s, 0, 5);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.limit, 5);
    ck_assert_uint_eq(r.remaining, 0);
    ck_assert_uint_eq(r.reset_ms, 500);
    r = req(&t, &s, 0, 1);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, 100);
    r = req(&t, &s, 99, 1);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, 1);
    ck_assert(req(&t, &s, 100, 1).allowed);
    /* At 350: 2.5 tokens. */
    r = req(&t, &s, 350, 3);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.remaining, 2);
    ck_assert_uint_eq(r.retry_ms, 50);
    ck_assert_uint_eq(r.reset_ms, 250);
    r = req(&t, &s, 350, 6);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, NEVER);
    ck_assert(rl_algo_is_full(&t, &s, 600));
    ck_assert(!rl_algo_is_full(&t, &s, 599));
}
END_TEST

START_TEST(test_leaky_bucket_queue)
{
    struct rl_tier t = mk_tier(RL_ALGO_LEAKY_BUCKET, 10, 1000, 5);
    struct rl_algo_state s = {0, 0};
    struct rl_algo_result r;

    for (uint64_t i = 0; i < 5; i++) {
        r = req(&t, &s, 0, 1);
        RL_CHECK(r.allowed);
        RL_CHECK_UINT_EQ(r.queue_ms, 100 * i);
        RL_CHECK_UINT_EQ(r.retry_ms, 0);
        RL_CHECK_UINT_EQ(r.remaining, 4 - i);
    }
    r = req(&t, &s, 0, 1);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, 100);
    ck_assert_uint_eq(r.limit, 5);
    /* At 100 one slot has been reached: the next departs at 500. */
    r = req(&t, &s, 100, 1);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.queue_ms, 400);
    r = req(&t, &s, 100, 0);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.queue_ms, 0);
    /* Idle past the backlog: departs at once. */
    r = req(&t, &s, 5000, 1);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.queue_ms, 0);
    /* A fractional slot: L = 3 per 1000 ms, slots 333.3 ms apart, waits rounded up. */
    t = mk_tier(RL_ALGO_LEAKY_BUCKET, 3, 1000, 3);
    memset(&s, 0, sizeof(s));
    ck_assert_uint_eq(req(&t, &s, 0, 1).queue_ms, 0);
    ck_assert_uint_eq(req(&t, &s, 0, 1).queue_ms, 334);
    ck_assert_uint_eq(req(&t, &s, 0, 1).queue_ms, 667);
    r = req(&t, &s, 0, 1);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, 334);
}
END_TEST

START_TEST(test_gcra_known)
{
    struct rl_tier t = mk_tier(RL_ALGO_GCRA, 3, 1000, 2);
    struct rl_algo_state s = {0, 0};
    struct rl_algo_result r;

    ck_assert(req(&t, &s, 0, 2).allowed);
    r = req(&t, &s, 0, 1);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, 334); /* TAT = 666.7, limit at 333.3 ahead */
    ck_assert_uint_eq(r.reset_ms, 667);
    ck_assert_uint_eq(req(&t, &s, 334, 1).queue_ms, 0);
    ck_assert_uint_eq(rl_algo_full_at(&t, &s), 1000);
}
END_TEST

/*
 * A state committed at T is judged at T - back as at T, its waits longer by back, for a step
 * back of up to a window (W = 100). Past it the state is first moved back to lie a window
 * ahead (rl_algo_bound), so the waits grow by less than the step and by at most two windows
 * (one for the buckets), and nothing consumed is given back.
 */
START_TEST(test_clock_step_back)
{
    for (size_t i = 0; i < sizeof(all_algos) / sizeof(all_algos[0]); i++) {
        struct rl_tier t = mk_tier(all_algos[i], 4, 100, 4);
        struct rl_algo_state s = {0, 0};
        uint64_t T = 10000, most = is_bucket(t.algo) ? 100 : 200;

        RL_CHECK(req(&t, &s, T, 3).allowed);
        for (uint64_t back = 1; back < 250; back += 13) {
            for (uint32_t cost = 0; cost <= 5; cost++) {
                struct rl_algo_result a = probe(&t, &s, T, cost);
                struct rl_algo_result b = probe(&t, &s, T - back, cost);

                RL_CHECK(a.allowed == b.allowed, "%s", algo_names[t.algo]);
                RL_CHECK_UINT_EQ(a.remaining, b.remaining);
                if (back > 100) {
                    RL_CHECK(b.reset_ms >= a.reset_ms && b.reset_ms < a.reset_ms + back &&
                                 b.reset_ms <= a.reset_ms + most,
                             "%s: back %llu: reset %llu, %llu at T", algo_names[t.algo],
                             (unsigned long long)back, (unsigned long long)b.reset_ms,
                             (unsigned long long)a.reset_ms);
                    if (a.retry_ms != 0 && a.retry_ms != NEVER) {
                        RL_CHECK(b.retry_ms >= a.retry_ms && b.retry_ms < a.retry_ms + back &&
                                     b.retry_ms <= a.retry_ms + most,
                                 "%s: back %llu: retry %llu, %llu at T", algo_names[t.algo],
                                 (unsigned long long)back, (unsigned long long)b.retry_ms,
                                 (unsigned long long)a.retry_ms);
                    } else {
                        RL_CHECK_UINT_EQ(a.retry_ms, b.retry_ms);
                    }
                } else {
                    RL_CHECK_UINT_EQ(a.reset_ms + back, b.reset_ms);
                    if (a.retry_ms != 0 && a.retry_ms != NEVER) {
                        RL_CHECK_UINT_EQ(a.retry_ms + back, b.retry_ms);
                    } else {
                        RL_CHECK_UINT_EQ(a.retry_ms, b.retry_ms);
                    }
                }
                RL_CHECK(!rl_algo_is_full(&t, &s, T - back), "%s: full at T - %llu",
                         algo_names[t.algo], (unsigned long long)back);
                verify(&t, &s, T - back, cost, algo_names[t.algo]);
            }
        }
        /* A log pruned at a later time stays pruned when the clock comes back. */
        if (t.algo == RL_ALGO_SLIDING_WINDOW_LOG) {
            RL_CHECK(req(&t, &s, T + 100, 0).allowed);
            RL_CHECK_UINT_EQ(probe(&t, &s, T, 0).remaining, 4);
        }
        rl_algo_release(&t, &s);
    }
}
END_TEST

/*
 * A clock stepped forward a day and back (NTP correcting a wrong clock, a VM resumed): a key
 * used during the day ahead is refused afterwards for at most two windows more than it was
 * when used, not for the day, and keeps what it consumed (remaining as then). Each algorithm,
 * a key that spent all of its allowance and one that spent part of it.
 */
START_TEST(test_clock_day_back)
{
    const uint64_t T = UINT64_C(1764000000000), DAY = UINT64_C(86400000);

    for (size_t i = 0; i < sizeof(all_algos) / sizeof(all_algos[0]); i++) {
        for (uint32_t spent = 1; spent <= 3; spent += 2) {
            struct rl_tier t = mk_tier(all_algos[i], 3, 1000, 3);
            struct rl_algo_state s = {0, 0};
            struct rl_algo_result at_day, back, later;
            char ctx[96];

            snprintf(ctx, sizeof(ctx), "%s, %u of 3 spent", algo_names[t.algo], spent);
            RL_CHECK(req(&t, &s, T + DAY, spent).allowed, "%s", ctx);
            at_day = probe(&t, &s, T + DAY, 0);
            at_day.retry_ms = probe(&t, &s, T + DAY, 1).retry_ms; /* refused when all spent */
            back = req(&t, &s, T + 5, 0);
            RL_CHECK_UINT_EQ(back.remaining, at_day.remaining);
            RL_CHECK(back.reset_ms <= at_day.reset_ms + 2000, "%s: reset %llu", ctx,
                     (unsigned long long)back.reset_ms);
            later = probe(&t, &s, T + 5 + 2000 + at_day.reset_ms, 3);
            RL_CHECK(later.allowed, "%s: refused two windows past its reset", ctx);
            RL_CHECK(rl_algo_is_full(&t, &s, T + 5 + 2000 + at_day.reset_ms), "%s", ctx);
            if (spent == 3) {
                struct rl_algo_result r = probe(&t, &s, T + 5, 1);

                RL_CHECK(!r.allowed, "%s: a step back gave back what was spent", ctx);
                RL_CHECK(r.retry_ms <= at_day.retry_ms + 2000, "%s: retry %llu, %llu then", ctx,
                         (unsigned long long)r.retry_ms, (unsigned long long)at_day.retry_ms);
            }
            verify(&t, &s, T + 6, 1, ctx);
            rl_algo_release(&t, &s);
        }
    }
}
END_TEST

START_TEST(test_peek_never_consumes)
{
    for (size_t i = 0; i < sizeof(all_algos) / sizeof(all_algos[0]); i++) {
        struct rl_tier t = mk_tier(all_algos[i], 3, 100, 3);
        struct rl_algo_state s = {0, 0};
        struct rl_algo_result r;

        r = req(&t, &s, 50, 0);
        RL_CHECK(r.allowed);
        RL_CHECK_UINT_EQ(r.remaining, 3);
        RL_CHECK_UINT_EQ(r.reset_ms, 0);
        RL_CHECK(s.a == 0 && s.b == 0);
        RL_CHECK(req(&t, &s, 50, 3).allowed);
        r = req(&t, &s, 50, 0);
        RL_CHECK(r.allowed);
        RL_CHECK_UINT_EQ(r.remaining, 0);
        RL_CHECK_UINT_EQ(r.queue_ms, 0);
        RL_CHECK(!req(&t, &s, 50, 1).allowed);
        rl_algo_release(&t, &s);
    }
}
END_TEST

START_TEST(test_zero_capacity)
{
    for (size_t i = 0; i < sizeof(all_algos) / sizeof(all_algos[0]); i++) {
        struct rl_tier t = mk_tier(all_algos[i], 0, 100, 0);
        struct rl_algo_state s = {0, 0};
        struct rl_algo_result r = req(&t, &s, 50, 1);

        RL_CHECK(!r.allowed);
        RL_CHECK_UINT_EQ(r.retry_ms, NEVER);
        RL_CHECK(req(&t, &s, 50, 0).allowed);
        RL_CHECK(s.a == 0 && s.b == 0);
        if (is_bucket(t.algo)) {
            /* No refill: a burst alone would be a one-off, so it is not granted. */
            t.burst = 5;
            RL_CHECK(!req(&t, &s, 50, 1).allowed);
            RL_CHECK_UINT_EQ(req(&t, &s, 50, 0).limit, 0);
        }
    }
}
END_TEST

/* ---- brute force ----------------------------------------------------------------------- */

/* Random sequences for one algorithm: steps forward, sometimes none, sometimes back. */
static void
brute_force(enum rl_algo algo, uint64_t seeds)
{
    for (uint64_t seed = 1; seed <= seeds; seed++) {
        uint64_t rs = seed * 7919 + algo;
        uint32_t L = rnd_in(&rs, 0, 9) == 0 ? 1 : (uint32_t)rnd_in(&rs, 0, 6);
        uint32_t W = (uint32_t)rnd_in(&rs, 1, 12);
        uint32_t B = is_bucket(algo) ? (uint32_t)rnd_in(&rs, 0, 7) : L;
        struct rl_tier t = mk_tier(algo, L, W, B);
        struct rl_algo_state s = {0, 0};
        uint64_t now = rnd_in(&rs, 0, 50);
        char ctx[128];

        for (int step = 0; step < 60; step++) {
            uint64_t kind = rnd_in(&rs, 0, 19);
            uint32_t cost;

            if (kind < 6) {
                /* same ms */
            } else if (kind < 16) {
                now += rnd_in(&rs, 1, W);
            } else if (kind < 19) {
                now += rnd_in(&rs, W, 3 * (uint64_t)W);
            } else if (now > 0) {
                now -= rnd_in(&rs, 1, now < W ? now : W);
            }
            cost = rnd_in(&rs, 0, 9) == 0 ? 0 : (uint32_t)rnd_in(&rs, 1, capacity(&t) + 2);
            snprintf(ctx, sizeof(ctx), "%s L=%u W=%u B=%u seed=%llu step=%d now=%llu cost=%u",
                     algo_names[algo], L, W, B, (unsigned long long)seed, step,
                     (unsigned long long)now, cost);
            verify(&t, &s, now, cost, ctx);
            req(&t, &s, now, cost);
        }
        rl_algo_release(&t, &s);
    }
}

START_TEST(test_brute_force)
{
    brute_force(all_algos[_i], 400);
}
END_TEST

static void
assert_same(const struct rl_algo_result *a, const struct rl_algo_result *b, const char *ctx)
{
    RL_CHECK(a->allowed == b->allowed, "%s: allowed", ctx);
    RL_CHECK(a->limit == b->limit, "%s: limit", ctx);
    RL_CHECK(a->remaining == b->remaining, "%s: remaining %llu %llu", ctx,
             (unsigned long long)a->remaining, (unsigned long long)b->remaining);
    RL_CHECK(a->reset_ms == b->reset_ms, "%s: reset %llu %llu", ctx,
             (unsigned long long)a->reset_ms, (unsigned long long)b->reset_ms);
    RL_CHECK(a->retry_ms == b->retry_ms, "%s: retry %llu %llu", ctx,
             (unsigned long long)a->retry_ms, (unsigned long long)b->retry_ms);
}

/* token_bucket, gcra and leaky_bucket side by side on one sequence. */
static void
buckets_agree(uint64_t seed, uint32_t L, uint32_t W, uint32_t B, uint64_t now, uint64_t maxstep,
              bool back, int steps, uint64_t *rs)
{
    struct rl_tier tb = mk_tier(RL_ALGO_TOKEN_BUCKET, L, W, B);
    struct rl_tier gc = mk_tier(RL_ALGO_GCRA, L, W, B);
    struct rl_tier lb = mk_tier(RL_ALGO_LEAKY_BUCKET, L, W, B);
    struct rl_algo_state s1 = {0, 0}, s2 = {0, 0}, s3 = {0, 0};
    char ctx[128];

    for (int step = 0; step < steps; step++) {
        uint64_t kind = rnd_in(rs, 0, 19);
        uint32_t cost;

        if (kind < 5) {
            /* same ms */
        } else if (kind < 18) {
            now += rnd_in(rs, 1, maxstep);
        } else if (back && now > maxstep) {
            now -= rnd_in(rs, 1, maxstep);
        }
        kind = rnd_in(rs, 0, 9);
        if (kind == 0) {
            cost = 0;
        } else if (kind == 1) {
            cost = B + 1 + (uint32_t)rnd_in(rs, 0, 3);
        } else {
            cost = (uint32_t)rnd_in(rs, 1, B < 1000000 ? B + 1 : 1000000);
        }
        if (cost > 1000000) {
            cost = 1000000;
        }
        snprintf(ctx, sizeof(ctx), "L=%u W=%u B=%u seed=%llu step=%d", L, W, B,
                 (unsigned long long)seed, step);
        struct rl_algo_result a = req(&tb, &s1, now, cost);
        struct rl_algo_result b = req(&gc, &s2, now, cost);
        struct rl_algo_result c = req(&lb, &s3, now, cost);
        assert_same(&a, &b, ctx);
        assert_same(&a, &c, ctx);
        RL_CHECK(rl_algo_is_full(&tb, &s1, now) == rl_algo_is_full(&gc, &s2, now), "%s: is_full",
                 ctx);
        RL_CHECK(rl_algo_full_at(&tb, &s1) == rl_algo_full_at(&gc, &s2), "%s: full_at %llu %llu",
                 ctx, (unsigned long long)rl_algo_full_at(&tb, &s1),
                 (unsigned long long)rl_algo_full_at(&gc, &s2));
    }
}

START_TEST(test_gcra_equals_token_bucket)
{
    for (uint64_t seed = 1; seed <= 3000; seed++) {
        uint64_t rs = seed;
        uint32_t L = (uint32_t)rnd_in(&rs, 1, 40);
        uint32_t W = (uint32_t)rnd_in(&rs, 1, 3000);
        uint32_t B = (uint32_t)rnd_in(&rs, 0, 50);

        buckets_agree(seed, L, W, B, rnd_in(&rs, 0, 1ull << 41), 2 * (uint64_t)W / L + 1, true, 200,
                      &rs);
    }
}
END_TEST

/* Parameters near 2^32 and a real clock exercise the 128-bit paths. The clock only goes
 * forward: gcra keeps an offset past 2^31 ms rounded (algo.c), exact for a forward clock. */
START_TEST(test_gcra_equals_token_bucket_large)
{
    for (uint64_t seed = 1; seed <= 500; seed++) {
        uint64_t rs = seed ^ 0xabcdefull;
        uint32_t L = (uint32_t)(rnd_in(&rs, 0, 3) == 0 ? 1 : rnd_in(&rs, 1, UINT32_MAX));
        uint32_t W = (uint32_t)rnd_in(&rs, 1, UINT32_MAX);
        uint32_t B = (uint32_t)rnd_in(&rs, 0, UINT32_MAX);
        uint64_t step = (uint64_t)W / L + 1;

        buckets_agree(seed, L, W, B, 1700000000000ull + rnd_in(&rs, 0, 1ull << 36),
                      step > (1ull << 40) ? (1ull << 40) : step, false, 100, &rs);
    }
}
END_TEST

/* The largest burst in time: TAT goes past 2^64 ms, gcra still agrees with token_bucket. */
START_TEST(test_gcra_extreme)
{
    uint64_t rs = 99;

    buckets_agree(0, 1, UINT32_MAX, UINT32_MAX, 1700000000000ull, 1000, false, 12000, &rs);
    buckets_agree(1, 1, UINT32_MAX, UINT32_MAX, 1700000000000ull, UINT32_MAX, false, 50, &rs);
    buckets_agree(2, 2, UINT32_MAX, UINT32_MAX, 1ull << 61, 1ull << 40, false, 50, &rs);
}
END_TEST

/* A 64-bit value of a random magnitude, some at the edges. */
static uint64_t
rnd_mag(uint64_t *rs)
{
    uint64_t r = rnd(rs);

    switch (r % 8) {
    case 0:
        return 0;
    case 1:
        return UINT64_MAX - (r >> 60);
    case 2:
        return (r >> 3) % 4;
    default:
        return rnd(rs) >> (r >> 3) % 64;
    }
}

/* The bucket algorithms answer is_full without full_at's division: the same answer as
 * now >= full_at over states, limits and nows of every magnitude, the nows around full_at
 * and at both ends of the clock. */
START_TEST(test_is_full_matches_full_at)
{
    static const enum rl_algo algos[] = {RL_ALGO_TOKEN_BUCKET, RL_ALGO_GCRA, RL_ALGO_LEAKY_BUCKET,
                                         RL_ALGO_FIXED_WINDOW, RL_ALGO_SLIDING_WINDOW_COUNTER};
    uint64_t rs = 35;
    uint64_t full_seen = 0, not_seen = 0;

    for (int i = 0; i < 400000; i++) {
        enum rl_algo a = algos[rnd(&rs) % (sizeof(algos) / sizeof(algos[0]))];
        uint32_t limit = (uint32_t)(rnd(&rs) % 4 == 0 ? rnd(&rs) % 3 : rnd_mag(&rs));
        struct rl_tier t = mk_tier(a, limit, 1 + rnd(&rs) % 100000, (uint32_t)rnd(&rs));
        struct rl_algo_state s = {rnd_mag(&rs), rnd_mag(&rs)};
        uint64_t at = rl_algo_full_at(&t, &s);
        uint64_t nows[] = {
            0, 1, at, at - 1, at + 1, UINT64_MAX, UINT64_MAX - 1, rnd_mag(&rs), s.a, s.a + 1};

        for (size_t k = 0; k < sizeof(nows) / sizeof(nows[0]); k++) {
            bool want = nows[k] >= at, got = rl_algo_is_full(&t, &s, nows[k]);

            RL_CHECK(got == want,
                     "%s limit %u state (%llu, %llu) now %llu: is_full %d, full_at %llu",
                     algo_names[a], limit, (unsigned long long)s.a, (unsigned long long)s.b,
                     (unsigned long long)nows[k], got, (unsigned long long)at);
            *(want ? &full_seen : &not_seen) += 1;
        }
    }
    ck_assert_uint_gt(full_seen, 100000);
    ck_assert_uint_gt(not_seen, 100000);
}
END_TEST

/* Large parameters through the window algorithms: no overflow in the products. */
START_TEST(test_large_windows)
{
    uint64_t now = 1700000000123ull;
    struct rl_tier t = mk_tier(RL_ALGO_SLIDING_WINDOW_COUNTER, UINT32_MAX, UINT32_MAX, 0);
    struct rl_algo_state s = {0, 0};
    struct rl_algo_result r;

    r = req(&t, &s, now, 1000000);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.remaining, UINT32_MAX - 1000000ull);
    t = mk_tier(RL_ALGO_SLIDING_WINDOW_COUNTER, 1, UINT32_MAX, 0);
    memset(&s, 0, sizeof(s));
    ck_assert(req(&t, &s, now, 1).allowed);
    r = req(&t, &s, now, 1);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, NEVER - 1); /* a finite wait past 49.7 days */
    t = mk_tier(RL_ALGO_FIXED_WINDOW, UINT32_MAX, UINT32_MAX, 0);
    memset(&s, 0, sizeof(s));
    for (int i = 0; i < 100; i++) {
        RL_CHECK(req(&t, &s, now, 1000000).allowed);
    }
    ck_assert_uint_eq(req(&t, &s, now, 0).remaining, UINT32_MAX - 100000000ull);
    /* Windows past 32 bits (up to 366 days) for the two window algorithms, with the largest
     * limit: exact counts, the reset at the window's end, the retry the longest finite one. */
    for (int a = 0; a < 2; a++) {
        const uint64_t W = 366ull * 86400000;
        const uint64_t base = now / W * W + 5;
        t = mk_tier(a == 0 ? RL_ALGO_FIXED_WINDOW : RL_ALGO_SLIDING_WINDOW_COUNTER, UINT32_MAX, W,
                    0);
        memset(&s, 0, sizeof(s));
        r = req(&t, &s, base, 1000000);
        ck_assert(r.allowed);
        ck_assert_uint_eq(r.remaining, UINT32_MAX - 1000000ull);
        ck_assert_uint_eq(r.reset_ms, a == 0 ? W - 5 : 2 * W - 5);
        t.limit = 1000000;
        r = req(&t, &s, base + 1, 1);
        ck_assert(!r.allowed);
        ck_assert_uint_eq(r.retry_ms, NEVER - 1);
        /* two windows later nothing weighs */
        r = req(&t, &s, base + 2 * W, 1000000);
        ck_assert(r.allowed);
        ck_assert_uint_eq(r.remaining, 0);
    }
}
END_TEST

/* ---- the sliding log's storage --------------------------------------------------------- */

START_TEST(test_slog_growth_and_cap)
{
    struct rl_tier t = mk_tier(RL_ALGO_SLIDING_WINDOW_LOG, 100000, 1000, 0);
    struct rl_algo_state s = {0, 0};
    struct rl_algo_state next;
    struct rl_algo_result r;
    uint64_t peak;

    /* Equal ms merge: 500 requests in one ms are one entry. */
    for (int i = 0; i < 500; i++) {
        RL_CHECK(req(&t, &s, 7, 1).allowed);
    }
    peak = rl_algo_heap_bytes(&t, &s);
    ck_assert_uint_le(peak, 40 + 4 * 8);
    /* One entry per ms: at most W entries. */
    for (uint64_t now = 8; now < 3000; now++) {
        RL_CHECK(req(&t, &s, now, 1).allowed);
        RL_CHECK_UINT_LE(rl_algo_heap_bytes(&t, &s), 40 + 2048 * 8);
    }
    RL_CHECK_UINT_EQ(req(&t, &s, 2999, 0).remaining, 100000 - 1000);
    peak = rl_algo_heap_bytes(&t, &s);
    /* Sparse again: the ring shrinks. */
    for (uint64_t now = 3000; now < 30000; now += 500) {
        RL_CHECK(req(&t, &s, now, 1).allowed);
    }
    ck_assert_uint_lt(rl_algo_heap_bytes(&t, &s), peak / 8);
    ck_assert_uint_eq(req(&t, &s, 29999, 0).remaining, 100000 - 2);

    /* No room to grow: the log becomes a sliding_window_counter of the same counts, the
     * request included, and gives its memory back. */
    rl_algo_release(&t, &s);
    t = mk_tier(RL_ALGO_SLIDING_WINDOW_LOG, 10, 100, 0);
    for (uint64_t now = 0; now < 4; now++) {
        RL_CHECK(req(&t, &s, now, 1).allowed);
    }
    rl_algo_judge(&t, &s, 4, 2, &r, &next);
    ck_assert(r.allowed);
    ck_assert(!rl_algo_degraded(&t, &s));
    ck_assert_int_eq(rl_algo_commit_capped(&t, &s, &next, 4, 2, 0), 1);
    ck_assert(rl_algo_degraded(&t, &s));
    ck_assert_uint_eq(rl_algo_heap_bytes(&t, &s), 0);
    ck_assert_uint_eq(probe(&t, &s, 4, 0).remaining, 4);
    ck_assert(!probe(&t, &s, 99, 5).allowed);
    /* At 103 window 0's 6 weigh 97%: 5.82 of 10 used, 4 whole requests left (the exact log
     * would have 8: the degraded key errs toward refusing here, toward allowing when the
     * previous window's requests came late). */
    ck_assert_uint_eq(probe(&t, &s, 103, 0).remaining, 4);
    /* Consumed and judged as a counter from now on; full (forgettable) at 300. */
    rl_algo_judge(&t, &s, 150, 1, &r, &next);
    ck_assert(r.allowed);
    ck_assert_int_eq(rl_algo_commit(&t, &s, &next, 150, 1), 1);
    ck_assert(rl_algo_degraded(&t, &s));
    ck_assert_uint_eq(probe(&t, &s, 150, 0).remaining, 10 - 3 - 1);
    ck_assert(!rl_algo_is_full(&t, &s, 250));
    ck_assert(rl_algo_is_full(&t, &s, 300));
    rl_algo_release(&t, &s);
    ck_assert(s.a == 0 && s.b == 0);
    /* No log yet and no room for one: a degraded key from the start, the cost counted. */
    rl_algo_judge(&t, &s, 4, 2, &r, &next);
    ck_assert_int_eq(rl_algo_commit_capped(&t, &s, &next, 4, 2, 10), 1);
    ck_assert(rl_algo_degraded(&t, &s));
    ck_assert_uint_eq(probe(&t, &s, 4, 0).remaining, 8);
    rl_algo_release(&t, &s);
}
END_TEST

/*
 * The log against a plain array of (time, cost) under random appends (merged in one ms),
 * prunes, refunds off the newest, releases off the oldest and clock steps back: its sum, its
 * sum since a time, the entry where the costs reach an amount (binary searches over running
 * totals kept mod 2^32) and every entry read back. Costs up to 10^9 wrap the running totals
 * many times over, while the log holds less than 2^32.
 */
#define SLOG_MODEL_MAX 4096
START_TEST(test_slog_model)
{
    static uint64_t mt[SLOG_MODEL_MAX], mc[SLOG_MODEL_MAX];
    uint64_t seed = 0x5106 + (uint64_t)_i;
    const uint32_t W = 1000;
    struct rl_slog *g = NULL;
    uint64_t now = 1000000, seen = now, big = _i % 2 ? 1000000000ull : 3;
    size_t n = 0;

    for (int step = 0; step < 20000; step++) {
        uint64_t op = rnd(&seed) % 16, sum = 0;

        now += rnd(&seed) % 4 == 0 ? rnd_in(&seed, 0, 40) : 0;
        if (op < 9) { /* append, unless the log would hold 2^32 or more */
            uint32_t cost = (uint32_t)rnd_in(&seed, 1, big);
            uint64_t held = rl_slog_sum(g), t;

            if (held + cost > UINT32_MAX || n == SLOG_MODEL_MAX) {
                continue;
            }
            t = rl_slog_prune(g, now, W);
            while (n > 0 && mt[0] + W <= t) {
                memmove(mt, mt + 1, --n * sizeof(mt[0]));
                memmove(mc, mc + 1, n * sizeof(mc[0]));
            }
            seen = t;
            RL_CHECK_INT_EQ(rl_slog_append(&g, t, cost, UINT64_MAX), 0);
            if (n > 0 && mt[n - 1] == t) {
                mc[n - 1] += cost;
            } else {
                mt[n] = t, mc[n++] = cost;
            }
        } else if (op < 11) { /* refund off the newest */
            uint64_t want = rnd_in(&seed, 0, 2 * big), held = rl_slog_sum(g);

            RL_CHECK_UINT_EQ(rl_slog_take(g, want), want < held ? want : held);
            while (want > 0 && n > 0) {
                uint64_t c = mc[n - 1] < want ? mc[n - 1] : want;

                mc[n - 1] -= c, want -= c;
                n -= mc[n - 1] == 0;
            }
        } else if (op < 13) { /* release off the oldest */
            uint64_t want = rnd_in(&seed, 0, 2 * big), held = rl_slog_sum(g);

            RL_CHECK_UINT_EQ(rl_slog_take_oldest(g, want), want < held ? want : held);
            while (want > 0 && n > 0) {
                uint64_t c = mc[0] < want ? mc[0] : want;

                mc[0] -= c, want -= c;
                if (mc[0] == 0) {
                    memmove(mt, mt + 1, --n * sizeof(mt[0]));
                    memmove(mc, mc + 1, n * sizeof(mc[0]));
                }
            }
        } else if (op == 13 && n > 0 && rnd(&seed) % 8 == 0) { /* the clock back 3 windows */
            uint64_t back = now - 3 * W, want = seen > back + W ? seen - back - W : 0;
            uint64_t shift = rl_slog_bound(g, back, W);

            RL_CHECK_UINT_EQ(shift, want);
            for (size_t i = 0; i < n; i++) {
                mt[i] -= shift;
            }
            seen -= shift;
            now = back;
        }
        for (size_t i = 0; i < n; i++) {
            sum += mc[i];
        }
        RL_CHECK_UINT_EQ(rl_slog_sum(g), sum);
        RL_CHECK_UINT_EQ(rl_slog_len(g), n);
        if (n == 0) {
            continue;
        }
        for (int k = 0; k < 4; k++) { /* sum since a time, and where an amount is reached */
            uint64_t t = rnd_in(&seed, mt[0] - 2, mt[n - 1] + 2), since = 0;
            uint64_t need = rnd_in(&seed, 1, sum), acc = 0;
            size_t i;

            for (i = 0; i < n; i++) {
                since += mt[i] >= t ? mc[i] : 0;
            }
            RL_CHECK_UINT_EQ(rl_slog_sum_since(g, t), since);
            for (i = 0; i < n - 1; i++) {
                if ((acc += mc[i]) >= need) {
                    break;
                }
            }
            RL_CHECK_UINT_EQ(rl_slog_reach(g, need), mt[i]);
        }
        if (step % 64 == 0) {
            for (uint32_t i = 0; i < n; i++) {
                uint64_t t;
                uint32_t c;

                rl_slog_get(g, i, &t, &c);
                RL_CHECK(t == mt[i] && c == mc[i], "entry %u: (%llu, %u), model (%llu, %llu)", i,
                         (unsigned long long)t, c, (unsigned long long)mt[i],
                         (unsigned long long)mc[i]);
            }
        }
    }
    rl_slog_destroy(g);
}
END_TEST

/* A log holds at most 2^32 - 1, whatever it is asked to append (a bad handoff record's three
 * entries of 2^31): its running totals, 32-bit, would wrap and misstate the sum since a time
 * and the entry where an amount is reached. */
START_TEST(test_slog_total_capped)
{
    struct rl_slog *g = NULL;
    uint64_t t;
    uint32_t c;

    for (uint64_t i = 0; i < 3; i++) {
        ck_assert_int_eq(rl_slog_append(&g, 1000 + i, 1u << 31, UINT64_MAX), 0);
    }
    ck_assert_uint_eq(rl_slog_sum(g), UINT32_MAX);
    ck_assert_uint_eq(rl_slog_len(g), 2); /* the third had nothing left to log */
    rl_slog_get(g, 1, &t, &c);
    ck_assert_uint_eq(c, (1u << 31) - 1);
    ck_assert_uint_eq(rl_slog_sum_since(g, 1000), UINT32_MAX);
    ck_assert_uint_eq(rl_slog_sum_since(g, 1001), (1u << 31) - 1);
    ck_assert_uint_eq(rl_slog_reach(g, 1u << 31), 1000);
    ck_assert_uint_eq(rl_slog_reach(g, (1ull << 31) + 1), 1001);
    rl_slog_destroy(g);
}
END_TEST

START_TEST(test_slog_rebase)
{
    /* A window of 2^32-1 ms: offsets must be rebased as time goes past 2^32 ms. */
    struct rl_tier t = mk_tier(RL_ALGO_SLIDING_WINDOW_LOG, 1000, UINT32_MAX, 0);
    struct rl_algo_state s = {0, 0};
    uint64_t now = 1000;
    struct rl_algo_result r;

    for (int i = 0; i < 10; i++) {
        RL_CHECK(req(&t, &s, now, 1).allowed);
        now += 1000000000ull;
    }
    /* Entries at 1000 + i*1e9; now = 1000 + 10e9: those with t > now - W are in. */
    r = req(&t, &s, now, 0);
    uint64_t in = 0;
    for (int i = 0; i < 10; i++) {
        if (1000 + i * 1000000000ull > now - UINT32_MAX) {
            in++;
        }
    }
    ck_assert_uint_eq(r.remaining, 1000 - in);
    ck_assert_uint_eq(r.reset_ms, 1000 + 9 * 1000000000ull + UINT32_MAX - now);
    rl_algo_release(&t, &s);
}
END_TEST

/* ---- ADJUST (docs/ALGORITHMS.md, "ADJUST") ------------------------------------------ */

/* An ADJUST for real, with no memory cap. */
static void
adj(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now, int64_t delta)
{
    rl_algo_adjust(t, s, now, delta, UINT64_MAX);
}

/* Two states answer every question alike at now and later: every cost's decision and every
 * reply field, probed over the next three windows. */
static void
same_states(const struct rl_tier *t, const struct rl_algo_state *a, const struct rl_algo_state *b,
            uint64_t now, const char *ctx)
{
    uint64_t span = 3 * (uint64_t)t->window_ms + 3;

    for (uint64_t d = 0; d <= span; d++) {
        for (uint32_t c = 0; c <= capacity(t) + 1; c++) {
            struct rl_algo_result x = probe(t, a, now + d, c);
            struct rl_algo_result y = probe(t, b, now + d, c);

            RL_CHECK(x.allowed == y.allowed && x.remaining == y.remaining &&
                         x.reset_ms == y.reset_ms && x.retry_ms == y.retry_ms &&
                         x.queue_ms == y.queue_ms,
                     "%s: differ at +%llu cost %u (remaining %llu/%llu reset %llu/%llu retry "
                     "%llu/%llu)",
                     ctx, (unsigned long long)d, c, (unsigned long long)x.remaining,
                     (unsigned long long)y.remaining, (unsigned long long)x.reset_ms,
                     (unsigned long long)y.reset_ms, (unsigned long long)x.retry_ms,
                     (unsigned long long)y.retry_ms);
        }
        RL_CHECK(rl_algo_is_full(t, a, now + d) == rl_algo_is_full(t, b, now + d),
                 "%s: is_full at +%llu", ctx, (unsigned long long)d);
    }
}

/*
 * The reference model of ADJUST, by equivalence with CHECKs whose effects the brute force
 * above verifies: on random sequences of CHECKs, charges and refunds,
 *  - a charge of d that a CHECK of cost d would be allowed leaves the very state that CHECK
 *    leaves;
 *  - right after a CHECK of cost c allowed at now, a refund of r <= c at the same ms leaves
 *    the state a CHECK of cost c - r would have left (the refund gives back exactly r);
 *  - a refund leaves remaining = min(what a refund of everything leaves, remaining + r), and
 *    a refund of everything leaves the full allowance (L or B) except under
 *    sliding_window_counter, whose previous window's weight is never refunded;
 *  - every state reached, in debt too, answers every reply field by its definition (verify).
 */
static void
adjust_brute_force(enum rl_algo algo, uint64_t seeds)
{
    for (uint64_t seed = 1; seed <= seeds; seed++) {
        uint64_t rs = seed * 104729 + algo;
        uint32_t L = (uint32_t)rnd_in(&rs, 1, 6);
        uint32_t W = (uint32_t)rnd_in(&rs, 1, 10);
        uint32_t B = is_bucket(algo) ? (uint32_t)rnd_in(&rs, 1, 7) : L;
        struct rl_tier t = mk_tier(algo, L, W, B);
        struct rl_algo_state s = {0, 0};
        uint64_t now = rnd_in(&rs, 0, 50);
        char ctx[160];

        for (int step = 0; step < 40; step++) {
            uint64_t kind = rnd_in(&rs, 0, 9);
            struct rl_algo_result before = probe(&t, &s, now, 0);

            if (rnd_in(&rs, 0, 3) == 0) {
                now += rnd_in(&rs, 1, 2 * (uint64_t)W);
                before = probe(&t, &s, now, 0);
            }
            snprintf(ctx, sizeof(ctx), "%s L=%u W=%u B=%u seed=%llu step=%d now=%llu kind=%llu",
                     algo_names[algo], L, W, B, (unsigned long long)seed, step,
                     (unsigned long long)now, (unsigned long long)kind);
            if (kind < 3) {
                /* a charge, past the limit at times */
                int64_t d = (int64_t)rnd_in(&rs, 1, capacity(&t) + 3);
                struct rl_algo_state viacheck = dup_state(&t, &s);
                bool fits = probe(&t, &s, now, (uint32_t)d).allowed;

                req(&t, &viacheck, now, (uint32_t)d);
                adj(&t, &s, now, d);
                if (fits) {
                    same_states(&t, &s, &viacheck, now, ctx);
                } else {
                    RL_CHECK(probe(&t, &s, now, 0).remaining == 0, "%s: debt with remaining", ctx);
                }
                rl_algo_release(&t, &viacheck);
            } else if (kind < 6) {
                /* a CHECK of c then a refund of r <= c at the same ms */
                uint32_t c = (uint32_t)rnd_in(&rs, 1, capacity(&t));
                uint32_t r = (uint32_t)rnd_in(&rs, 1, c);
                struct rl_algo_state less = dup_state(&t, &s);

                if (probe(&t, &s, now, c).allowed) {
                    req(&t, &s, now, c);
                    req(&t, &less, now, c - r);
                    adj(&t, &s, now, -(int64_t)r);
                    same_states(&t, &s, &less, now, ctx);
                }
                rl_algo_release(&t, &less);
            } else if (kind < 8) {
                /* a refund of r, then of everything */
                int64_t r = (int64_t)rnd_in(&rs, 1, capacity(&t) + 2);
                struct rl_algo_state all = dup_state(&t, &s);
                uint64_t rem, inf;

                adj(&t, &s, now, -r);
                adj(&t, &all, now, -1000000);
                rem = probe(&t, &s, now, 0).remaining;
                inf = probe(&t, &all, now, 0).remaining;
                if (before.remaining > 0 || algo != RL_ALGO_SLIDING_WINDOW_COUNTER) {
                    /* (a key in debt under a weighted counter has no exact "before") */
                    uint64_t want = before.remaining + (uint64_t)r;

                    if (probe(&t, &s, now, 0).remaining != 0 || want <= inf) {
                        RL_CHECK(rem == (want < inf ? want : inf) || before.remaining == 0,
                                 "%s: refund %lld: remaining %llu, before %llu, all %llu", ctx,
                                 (long long)r, (unsigned long long)rem,
                                 (unsigned long long)before.remaining, (unsigned long long)inf);
                    }
                }
                if (algo != RL_ALGO_SLIDING_WINDOW_COUNTER) {
                    RL_CHECK(inf == capacity(&t), "%s: a refund of all leaves %llu", ctx,
                             (unsigned long long)inf);
                }
                rl_algo_release(&t, &all);
            } else {
                uint32_t cost = (uint32_t)rnd_in(&rs, 0, capacity(&t) + 1);

                req(&t, &s, now, cost);
            }
            verify(&t, &s, now, 1, ctx);
            verify(&t, &s, now, 0, ctx);
        }
        rl_algo_release(&t, &s);
    }
}

START_TEST(test_adjust_brute_force)
{
    adjust_brute_force(all_algos[_i], 150);
}
END_TEST

/* Known answers: 3 of 5 used, 2 refunded, 2 back; a refund never above full; a charge past
 * the limit refused until time pays it back; never into a past window. */
START_TEST(test_adjust_known)
{
    for (size_t i = 0; i < sizeof(all_algos) / sizeof(all_algos[0]); i++) {
        enum rl_algo a = all_algos[i];
        struct rl_tier t = mk_tier(a, 5, 1000, 5);
        struct rl_algo_state s = {0, 0};
        struct rl_algo_result r;

        RL_CHECK(req(&t, &s, 10000, 3).allowed, "%s", algo_names[a]);
        adj(&t, &s, 10000, -2);
        r = probe(&t, &s, 10000, 0);
        RL_CHECK_UINT_EQ(r.remaining, 4);
        adj(&t, &s, 10000, -100);
        RL_CHECK_UINT_EQ(probe(&t, &s, 10000, 0).remaining, 5);
        RL_CHECK(rl_algo_is_full(&t, &s, 10000), "%s: not full", algo_names[a]);
        /* a charge of 12 against 5: in debt by 7 */
        adj(&t, &s, 10000, 12);
        r = probe(&t, &s, 10000, 1);
        RL_CHECK(!r.allowed && r.remaining == 0, "%s: debt allowed", algo_names[a]);
        switch (a) {
        case RL_ALGO_FIXED_WINDOW:
            RL_CHECK_UINT_EQ(r.retry_ms, 1000); /* the window ends */
            break;
        case RL_ALGO_SLIDING_WINDOW_LOG:
            RL_CHECK_UINT_EQ(r.retry_ms, 1000); /* the charge leaves the window */
            break;
        case RL_ALGO_SLIDING_WINDOW_COUNTER:
            /* window 11 weighs 12 at (1000 - e)/1000: 12(1000 - e) <= 4000, e >= 667 */
            RL_CHECK_UINT_EQ(r.retry_ms, 1000 + 667);
            break;
        default:
            /* deficit 12 tokens, one token back each 200 ms: 8 must drain for 1 to fit */
            RL_CHECK_UINT_EQ(r.retry_ms, 1600);
            break;
        }
        rl_algo_release(&t, &s);
        /* never into a past window: 4 used in window 10, refunded in window 11 */
        memset(&s, 0, sizeof(s));
        req(&t, &s, 10500, 4);
        adj(&t, &s, 11200, -4);
        r = probe(&t, &s, 11200, 0);
        if (a == RL_ALGO_SLIDING_WINDOW_COUNTER) {
            RL_CHECK_UINT_EQ(r.remaining, 1); /* 5 - 4 * 800/1000 = 1.8: 1, as before */
        } else if (a == RL_ALGO_SLIDING_WINDOW_LOG) {
            RL_CHECK_UINT_EQ(r.remaining, 5); /* 4 at 10500 is still in the sliding window */
        } else {
            RL_CHECK_UINT_EQ(r.remaining, 5);
        }
        rl_algo_release(&t, &s);
    }
}
END_TEST

/* The cap of outstanding consumption: charges stop at the tier's capacity plus one largest
 * charge (rl_algo_debt_cap), however many come: 5,000 charges of 10^6 leave exactly the debt
 * of one, so a refund of 10^6 brings the key back to empty (cost 1 refused) and one more unit
 * to one left; a bucket's wait for cost 1 at the cap is what one charge costs (10^6 + 1 units
 * at 1000 per 60 s), not 2^32 units' 8 years. */
START_TEST(test_adjust_debt_cap)
{
    for (size_t i = 0; i < sizeof(all_algos) / sizeof(all_algos[0]); i++) {
        enum rl_algo a = all_algos[i];
        struct rl_tier t = mk_tier(a, 1000, 60000, 1000);
        struct rl_algo_state s = {0, 0};
        struct rl_algo_result r;
        bool bucket = a == RL_ALGO_TOKEN_BUCKET || a == RL_ALGO_GCRA || a == RL_ALGO_LEAKY_BUCKET;

        RL_CHECK_UINT_EQ(rl_algo_debt_cap(&t), 1000 + RL_ALGO_DEBT_OVER);
        for (int k = 0; k < 5000; k++) {
            adj(&t, &s, 5000, 1000000);
        }
        r = probe(&t, &s, 5000, 1);
        RL_CHECK(!r.allowed && r.remaining == 0, "%s", algo_names[a]);
        if (bucket) {
            /* (10^6 + 1) units at 1000 per 60000 ms: 60,000,060 ms */
            RL_CHECK(r.retry_ms == 60000060, "%s: %llu", algo_names[a], (unsigned long long)r.retry_ms);
        }
        adj(&t, &s, 5000, -1000000);
        r = probe(&t, &s, 5000, 1);
        RL_CHECK(!r.allowed && r.remaining == 0, "%s", algo_names[a]);
        adj(&t, &s, 5000, -1);
        r = probe(&t, &s, 5000, 1);
        RL_CHECK(r.allowed && r.remaining == 0, "%s", algo_names[a]);
        rl_algo_release(&t, &s);
    }
    /* the cap never passes what a window's 32-bit count holds */
    {
        struct rl_tier t = mk_tier(RL_ALGO_FIXED_WINDOW, 4294967295u, 60000, 4294967295u);

        RL_CHECK_UINT_EQ(rl_algo_debt_cap(&t), RL_ALGO_DEBT_MAX);
    }
}
END_TEST

static Suite *
algo_suite(void)
{
    Suite *s = suite_create("algo");
    TCase *tc = tcase_create("known");
    TCase *bf = tcase_create("brute_force");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fixed_window_boundary);
    tcase_add_test(tc, test_sliding_log_refused_not_logged);
    tcase_add_test(tc, test_sliding_counter_weighted);
    tcase_add_test(tc, test_token_bucket_refill);
    tcase_add_test(tc, test_leaky_bucket_queue);
    tcase_add_test(tc, test_gcra_known);
    tcase_add_test(tc, test_clock_step_back);
    tcase_add_test(tc, test_clock_day_back);
    tcase_add_test(tc, test_peek_never_consumes);
    tcase_add_test(tc, test_zero_capacity);
    tcase_add_test(tc, test_large_windows);
    tcase_add_test(tc, test_slog_growth_and_cap);
    tcase_add_test(tc, test_slog_rebase);
    tcase_add_loop_test(tc, test_slog_model, 0, 4);
    tcase_add_test(tc, test_slog_total_capped);
    tcase_add_test(tc, test_adjust_known);
    tcase_add_test(tc, test_adjust_debt_cap);
    suite_add_tcase(s, tc);

    tcase_set_timeout(bf, 300);
    tcase_add_loop_test(bf, test_brute_force, 0, sizeof(all_algos) / sizeof(all_algos[0]));
    tcase_add_loop_test(bf, test_adjust_brute_force, 0, sizeof(all_algos) / sizeof(all_algos[0]));
    tcase_add_test(bf, test_gcra_equals_token_bucket);
    tcase_add_test(bf, test_gcra_equals_token_bucket_large);
    tcase_add_test(bf, test_gcra_extreme);
    tcase_add_test(bf, test_is_full_matches_full_at);
    suite_add_tcase(s, bf);
    return s;
}

RL_TEST_MAIN(algo_suite)
