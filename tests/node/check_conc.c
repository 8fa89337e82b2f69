/*
 * check_conc: the concurrency algorithm (node/algo_conc.c) and RELEASE in the limiter. The
 * algorithm against a reference model, one lease end per slot held, on random sequences of
 * CHECKs, RELEASEs and clock steps: every reply field, the slots held, full_at and what a
 * RELEASE gave back; a state exported and imported at another clock (a record's worth of
 * entries exact, a longer one merged without freeing any slot early). Then the limiter: a
 * concurrency tier with rate tiers in one rule (all or none consume; RELEASE gives back the
 * slots only; ADJUST leaves them alone), leases ending, late releases counted, NO_RULE, a rule
 * with no concurrency tier, inline concurrency limits. Not for the wire (check_wire,
 * check_node_tcp) nor for handoff records (check_handoff).
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "conf.h"
#include "limiter.h"
#include "rltest.h"
#include "slog.h"
#include "wire.h"

#define T0 1700000000000ull
#define MODEL_MAX 4096

/* ---- the reference model: one lease end per slot, oldest first ------------------------ */

struct model {
    uint64_t N, lease;
    uint64_t end[MODEL_MAX]; /* lease ends of the slots held, in the order taken */
    size_t n;
};

static void
m_prune(struct model *m, uint64_t now)
{
    size_t k = 0;

    while (k < m->n && m->end[k] <= now) {
        k++;
    }
    memmove(m->end, m->end + k, (m->n - k) * sizeof(m->end[0]));
    m->n -= k;
}

/* A CHECK of cost at now: the reply the definitions give, slots taken when allowed. */
static struct rl_algo_result
m_check(struct model *m, uint64_t now, uint32_t cost)
{
    struct rl_algo_result r;

    memset(&r, 0, sizeof(r));
    m_prune(m, now);
    r.allowed = cost == 0 || m->n + cost <= m->N;
    if (r.allowed) {
        for (uint32_t i = 0; i < cost; i++) {
            ck_assert_uint_lt(m->n, MODEL_MAX);
            m->end[m->n++] = now + m->lease;
        }
    }
    r.limit = m->N;
    r.remaining = m->n <= m->N ? m->N - m->n : 0;
    r.reset_ms = m->n > 0 ? m->end[m->n - 1] - now : 0;
    if (!r.allowed) {
        /* the smallest wait after which cost more slots fit: the need-th oldest lease ends */
        r.retry_ms = cost > m->N ? RL_ALGO_NEVER : m->end[m->n + cost - m->N - 1] - now;
    }
    return r;
}

static uint64_t
m_release(struct model *m, uint64_t now, uint64_t count)
{
    uint64_t k;

    m_prune(m, now);
    k = count < m->n ? count : m->n;
    memmove(m->end, m->end + k, (m->n - k) * sizeof(m->end[0]));
    m->n -= k;
    return k;
}

static struct rl_tier
conc_tier(uint32_t N, uint64_t lease)
{
    struct rl_tier t;

    memset(&t, 0, sizeof(t));
    t.algo = RL_ALGO_CONCURRENCY;
    t.limit = N;
    t.burst = N;
    t.window_ms = lease;
    return t;
}

static uint64_t
rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void
same_result(const struct rl_algo_result *a, const struct rl_algo_result *b, const char *ctx,
            int step)
{
    RL_CHECK(a->allowed == b->allowed && a->limit == b->limit && a->remaining == b->remaining &&
                 a->reset_ms == b->reset_ms && a->retry_ms == b->retry_ms && a->queue_ms == 0,
             "%s, step %d: [%d %llu %llu %llu %llu], model [%d %llu %llu %llu %llu]", ctx, step,
             a->allowed, (unsigned long long)a->limit, (unsigned long long)a->remaining,
             (unsigned long long)a->reset_ms, (unsigned long long)a->retry_ms, b->allowed,
             (unsigned long long)b->limit, (unsigned long long)b->remaining,
             (unsigned long long)b->reset_ms, (unsigned long long)b->retry_ms);
}

/* One CHECK on the algorithm, as the limiter makes it: judge, then commit when allowed. */
static struct rl_algo_result
a_check(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now, uint32_t cost)
{
    struct rl_algo_state next;
    struct rl_algo_result r;

    rl_algo_judge(t, s, now, cost, &r, &next);
    if (r.allowed && cost > 0) {
        RL_CHECK_INT_EQ(rl_algo_commit(t, s, &next, now, cost), 0);
    }
    return r;
}

/* The state and the model agree on what is held at now, and on when all of it is free. */
static void
same_state(const struct rl_tier *t, struct rl_algo_state *s, struct model *m, uint64_t now,
           const char *ctx, int step)
{
    m_prune(m, now);
    RL_CHECK(rl_algo_conc_held(t, s, now) == m->n, "%s, step %d: held %llu, model %zu", ctx,
             step, (unsigned long long)rl_algo_conc_held(t, s, now), m->n);
    RL_CHECK(rl_algo_is_full(t, s, now) == (m->n == 0), "%s, step %d: is_full", ctx, step);
    if (m->n > 0) {
        RL_CHECK(rl_algo_full_at(t, s) == m->end[m->n - 1], "%s, step %d: full_at", ctx, step);
    }
}

/* Random CHECKs, RELEASEs and clock steps (some within one ms) against the model. */
static void
random_run(uint64_t seed, uint32_t N, uint64_t lease, int steps)
{
    struct rl_tier t = conc_tier(N, lease);
    struct rl_algo_state s = {0, 0};
    struct model *m = calloc(1, sizeof(*m));
    uint64_t now;
    char ctx[96];

    snprintf(ctx, sizeof(ctx), "seed %llu N %u lease %llu", (unsigned long long)seed, N,
             (unsigned long long)lease);
    now = T0 + rnd(&seed) % 100000;
    ck_assert_ptr_nonnull(m);
    m->N = N;
    m->lease = lease;
    for (int i = 0; i < steps; i++) {
        uint64_t op = rnd(&seed) % 10;

        if (op < 5) {
            uint32_t cost = (uint32_t)(rnd(&seed) % (N + 2)); /* 0 (a peek) .. N + 1 */
            struct rl_algo_result want = m_check(m, now, cost);
            struct rl_algo_result got = a_check(&t, &s, now, cost);

            same_result(&got, &want, ctx, i);
        } else if (op < 7) {
            uint64_t count = 1 + rnd(&seed) % (N + 1);

            RL_CHECK(rl_algo_conc_release(&t, &s, now, count) == m_release(m, now, count),
                     "%s, step %d: released", ctx, i);
        } else {
            /* ADJUST never changes a concurrency state */
            struct rl_algo_state before = s;

            ck_assert_int_eq(rl_algo_adjust(&t, &s, now, (int64_t)(rnd(&seed) % 7) - 3,
                                            UINT64_MAX),
                             0);
            RL_CHECK(s.a == before.a && s.b == before.b, "%s, step %d: adjusted", ctx, i);
        }
        same_state(&t, &s, m, now, ctx, i);
        now += rnd(&seed) % 3 == 0 ? 0 : rnd(&seed) % (lease / 3 + 2);
    }
    rl_algo_release(&t, &s);
    free(m);
}

START_TEST(test_conc_known)
{
    struct rl_tier t = conc_tier(3, 10000);
    struct rl_algo_state s = {0, 0};
    struct rl_algo_result r;

    r = a_check(&t, &s, T0, 2);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.limit, 3);
    ck_assert_uint_eq(r.remaining, 1);
    ck_assert_uint_eq(r.reset_ms, 10000);
    r = a_check(&t, &s, T0 + 4000, 1);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.remaining, 0);
    ck_assert_uint_eq(r.reset_ms, 10000);
    /* full: the earliest lease ends at T0 + 10 s */
    r = a_check(&t, &s, T0 + 5000, 1);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, 5000);
    ck_assert_uint_eq(r.reset_ms, 9000);
    /* two need both of T0's slots: the same time; three need T0 + 4 s's too */
    r = a_check(&t, &s, T0 + 5000, 3);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, 9000);
    r = a_check(&t, &s, T0 + 5000, 4);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, RL_ALGO_NEVER);
    /* RELEASE gives back the oldest first: one of T0's */
    ck_assert_uint_eq(rl_algo_conc_release(&t, &s, T0 + 5000, 1), 1);
    ck_assert_uint_eq(rl_algo_conc_held(&t, &s, T0 + 5000), 2);
    r = a_check(&t, &s, T0 + 5000, 1);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.remaining, 0);
    /* T0's last slot is freed by its lease; the others hold on */
    ck_assert_uint_eq(rl_algo_conc_held(&t, &s, T0 + 9999), 3);
    ck_assert_uint_eq(rl_algo_conc_held(&t, &s, T0 + 10000), 2);
    /* a late release: more than held gives back what there is */
    ck_assert_uint_eq(rl_algo_conc_release(&t, &s, T0 + 10000, 5), 2);
    ck_assert(rl_algo_is_full(&t, &s, T0 + 10000));
    ck_assert_uint_eq(rl_algo_conc_release(&t, &s, T0 + 10000, 1), 0);
    /* a release on a rate tier gives nothing */
    {
        struct rl_tier fw = t;

        fw.algo = RL_ALGO_FIXED_WINDOW;
        ck_assert_uint_eq(rl_algo_conc_release(&fw, &s, T0, 1), 0);
    }
    rl_algo_release(&t, &s);
}
END_TEST

START_TEST(test_conc_random)
{
    static const struct {
        uint32_t N;
        uint64_t lease;
    } shapes[] = {{1, 10}, {2, 7}, {3, 100}, {5, 1000}, {8, 3}, {17, 50}, {64, 400}};

    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        for (uint64_t seed = 1; seed <= 12; seed++) {
            random_run(seed * 7919 + i, shapes[i].N, shapes[i].lease, 600);
        }
    }
}
END_TEST

/* A clock stepped back: times are taken as the latest seen, as every algorithm does. */
START_TEST(test_conc_clock_back)
{
    struct rl_tier t = conc_tier(2, 1000);
    struct rl_algo_state s = {0, 0};
    struct rl_algo_result r;

    ck_assert(a_check(&t, &s, T0 + 500, 2).allowed);
    r = a_check(&t, &s, T0, 1);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_ms, 1500); /* until T0 + 1500, on the clock that stepped back */
    ck_assert(!rl_algo_is_full(&t, &s, T0 + 1499));
    ck_assert(rl_algo_is_full(&t, &s, T0 + 1500));
    rl_algo_release(&t, &s);
}
END_TEST

/* A clock stepped forward a day and back: the slots taken during the day ahead stay held (a
 * step back gives nothing back) for at most one lease from the step back, not for the day; a
 * RELEASE then still gives them back, the oldest first. */
START_TEST(test_conc_clock_day_back)
{
    const uint64_t DAY = UINT64_C(86400000);
    struct rl_tier t = conc_tier(3, 1000);
    struct rl_algo_state s = {0, 0};
    struct rl_algo_result r;

    ck_assert(a_check(&t, &s, T0 + DAY, 1).allowed);
    ck_assert(a_check(&t, &s, T0 + DAY + 10, 2).allowed);
    r = a_check(&t, &s, T0, 1);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.remaining, 0);
    /* the newest slots lie a lease ahead of T0, the older ones 10 ms before them */
    ck_assert_uint_eq(r.retry_ms, 1000 - 10 + 1000);
    ck_assert(!rl_algo_is_full(&t, &s, T0 + 1999));
    ck_assert(rl_algo_is_full(&t, &s, T0 + 2000));
    ck_assert_uint_eq(rl_algo_conc_release(&t, &s, T0 + 1, 1), 1);
    r = a_check(&t, &s, T0 + 2, 1);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.remaining, 0);
    rl_algo_release(&t, &s);
}
END_TEST

/* Export at now, import at another clock: the same slots held, their leases ending at the
 * same times relative to each clock. */
START_TEST(test_conc_export_import)
{
    struct rl_tier t = conc_tier(50, 20000);
    struct rl_algo_state s = {0, 0}, in = {0, 0};
    struct rl_algo_xstate *x = malloc(sizeof(*x));
    struct model *m = calloc(1, sizeof(*m));
    uint64_t off = 123457; /* the receiver's clock reads this much more */
    uint64_t now = T0;

    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(rl_algo_export(&t, &s, now, x), 1); /* nothing held: nothing sent */
    m->N = 50;
    m->lease = 20000;
    for (int i = 0; i < 30; i++) {
        a_check(&t, &s, now, (uint32_t)(i % 3));
        m_check(m, now, (uint32_t)(i % 3));
        if (i % 7 == 6) {
            rl_algo_conc_release(&t, &s, now, 2);
            m_release(m, now, 2);
        }
        now += 997;
    }
    ck_assert_int_eq(rl_algo_export(&t, &s, now, x), 0);
    ck_assert_uint_eq(x->shape, RL_ALGO_CONCURRENCY);
    ck_assert_uint_gt(x->nlog, 0);
    ck_assert_int_eq(rl_algo_import(&t, x, now + off, UINT64_MAX, &in), 0);
    for (uint64_t d = 0; d < 21000; d += 250) {
        m_prune(m, now + d);
        ck_assert_uint_eq(rl_algo_conc_held(&t, &in, now + off + d), m->n);
    }
    /* a shape of another algorithm does not fit */
    x->shape = RL_ALGO_SLIDING_WINDOW_LOG;
    {
        struct rl_algo_state z = {0, 0};

        ck_assert_int_eq(rl_algo_import(&t, x, now, UINT64_MAX, &z), -EINVAL);
    }
    rl_algo_release(&t, &s);
    rl_algo_release(&t, &in);
    free(x);
    free(m);
}
END_TEST

/* Slots held at `at` of the history test_conc_export_long writes: 1 + i % 3 slots taken at
 * t0 + 3i, for i < n, each held 100 s. */
static uint64_t
orig_held(uint64_t t0, uint32_t n, uint64_t at)
{
    uint64_t held = 0;

    for (uint32_t i = 0; i < n; i++) {
        held += t0 + 3 * (uint64_t)i + 100000 > at ? 1 + i % 3 : 0;
    }
    return held;
}

/* More entries than a record carries: merged, every slot carried, none freed earlier than on
 * the sender, all free by the sender's last lease end. */
START_TEST(test_conc_export_long)
{
    struct rl_tier t = conc_tier(RL_CONF_CONCURRENCY_MAX, 100000);
    struct rl_algo_state s = {0, 0}, in = {0, 0};
    struct rl_algo_xstate *x = malloc(sizeof(*x));
    uint64_t now = T0;
    const uint32_t n = 3001;

    ck_assert_ptr_nonnull(x);
    for (uint32_t i = 0; i < n; i++) {
        ck_assert(a_check(&t, &s, now + i * 3, 1 + i % 3).allowed);
    }
    now += n * 3;
    ck_assert_int_eq(rl_algo_export(&t, &s, now, x), 0);
    ck_assert_uint_eq(x->nlog, RL_ALGO_XLOG_MAX);
    ck_assert_int_eq(rl_algo_import(&t, x, now, UINT64_MAX, &in), 0);
    ck_assert_uint_eq(rl_algo_conc_held(&t, &in, now), orig_held(T0, n, now));
    ck_assert_uint_eq(rl_algo_full_at(&t, &in), rl_algo_full_at(&t, &s));
    for (uint64_t d = 0; d <= 100000; d += 97) {
        uint64_t h = rl_algo_conc_held(&t, &in, now + d);

        /* none freed earlier than on the sender; none held longer than a group's span (at
         * most 3 entries, 3 ms apart: 6 ms) */
        ck_assert_uint_ge(h, orig_held(T0, n, now + d));
        ck_assert_uint_le(h, orig_held(T0, n, now + d > 6 ? now + d - 6 : 0));
    }
    rl_algo_release(&t, &s);
    rl_algo_release(&t, &in);
    free(x);
}
END_TEST

/* The memory of a key: one 8-byte entry per ms in which slots were taken, in a ring that
 * doubles; N slots taken one ms apart at the cap. */
START_TEST(test_conc_memory)
{
    struct rl_tier t5 = conc_tier(5, 60000), tcap = conc_tier(RL_CONF_CONCURRENCY_MAX, 3600000);
    struct rl_algo_state s = {0, 0};

    for (uint32_t i = 0; i < 5; i++) {
        ck_assert(a_check(&t5, &s, T0 + i, 1).allowed);
    }
    printf("concurrency 5, 5 slots held apart: %llu heap bytes\n",
           (unsigned long long)rl_algo_heap_bytes(&t5, &s));
    ck_assert_uint_le(rl_algo_heap_bytes(&t5, &s), 48 + 8 * 8);
    rl_algo_release(&t5, &s);
    for (uint32_t i = 0; i < RL_CONF_CONCURRENCY_MAX; i++) {
        ck_assert(a_check(&tcap, &s, T0 + i, 1).allowed);
    }
    ck_assert(!a_check(&tcap, &s, T0 + RL_CONF_CONCURRENCY_MAX, 1).allowed);
    printf("concurrency %u, all held apart: %llu heap bytes\n", RL_CONF_CONCURRENCY_MAX,
           (unsigned long long)rl_algo_heap_bytes(&tcap, &s));
    ck_assert_uint_le(rl_algo_heap_bytes(&tcap, &s), 48 + 16384 * 8);
    rl_algo_release(&tcap, &s);
}
END_TEST

/* ---- the limiter ------------------------------------------------------------------------ */

static const char *rules_text = "[service exp]\n"
                                "limit = concurrency 3 lease 10s\n"
                                "limit = fixed_window 100 per 1m\n"
                                "[service tight]\n"
                                "limit = concurrency 5 lease 10s\n"
                                "limit = fixed_window 2 per 1m\n"
                                "[service rate]\n"
                                "limit = token_bucket 5 per 1s\n"
                                "[service sh]\n"
                                "mode = shadow\n"
                                "limit = concurrency 1 lease 10s\n";

static struct rl_limiter *
mk_limiter(struct rl_conf **c)
{
    struct rl_limiter *l = NULL;
    char err[256] = "";

    RL_CHECK(rl_conf_parse("t.conf", rules_text, c, err, sizeof(err)) == 0, "conf: %s", err);
    ck_assert_int_eq(rl_limiter_create(&l, *c, 64ull << 20), 0);
    return l;
}

static struct rl_wire_req
mk_req(uint32_t op, const char *service, const char *user, uint32_t cost)
{
    struct rl_wire_req r;

    memset(&r, 0, sizeof(r));
    r.op = op;
    r.id = 9;
    r.service.ptr = service;
    r.service.len = (uint32_t)strlen(service);
    r.user.ptr = user;
    r.user.len = (uint32_t)strlen(user);
    r.cost = cost;
    return r;
}

static struct rl_wire_check_reply
do_op(struct rl_limiter *l, uint32_t op, const char *service, const char *user, int64_t n,
      uint64_t now)
{
    struct rl_wire_req r = mk_req(op, service, user, op == RL_WIRE_OP_ADJUST ? 0 : (uint32_t)n);
    struct rl_wire_check_reply rep;

    r.delta = op == RL_WIRE_OP_ADJUST ? (int32_t)n : 0;
    if (op == RL_WIRE_OP_CHECK) {
        ck_assert_int_eq(rl_limiter_check(l, &r, now, &rep), 0);
    } else if (op == RL_WIRE_OP_ADJUST) {
        ck_assert_int_eq(rl_limiter_adjust(l, &r, now, 0, &rep), 0);
    } else {
        ck_assert_int_eq(rl_limiter_release(l, &r, now, 0, &rep), 0);
    }
    ck_assert_uint_eq(rep.id, 9);
    return rep;
}

#define CHECK_(l, s, u, n, t) do_op(l, RL_WIRE_OP_CHECK, s, u, n, t)
#define RELEASE_(l, s, u, n, t) do_op(l, RL_WIRE_OP_RELEASE, s, u, n, t)
#define ADJUST_(l, s, u, n, t) do_op(l, RL_WIRE_OP_ADJUST, s, u, n, t)

static void
want(const struct rl_wire_check_reply *r, uint32_t code, uint64_t limit, uint64_t remaining,
     uint64_t reset, uint64_t retry)
{
    RL_CHECK(r->code == code && r->limit == limit && r->remaining == remaining &&
                 r->reset_ms == reset && r->retry_after_ms == retry,
             "reply [%u %llu %llu %llu %llu], want [%u %llu %llu %llu %llu]", r->code,
             (unsigned long long)r->limit, (unsigned long long)r->remaining,
             (unsigned long long)r->reset_ms, (unsigned long long)r->retry_after_ms, code,
             (unsigned long long)limit, (unsigned long long)remaining, (unsigned long long)reset,
             (unsigned long long)retry);
}

static uint64_t
late(const struct rl_limiter *l)
{
    struct rl_limiter_stats st;

    rl_limiter_stats(l, &st);
    return st.releases_late;
}

/* T0 is 20 s into its minute: the fixed window of 1 min ends 40 s later. */
START_TEST(test_limiter_concurrency_and_rate)
{
    struct rl_conf *c;
    struct rl_limiter *l = mk_limiter(&c);
    struct rl_wire_check_reply r;

    /* the concurrency tier decides (the least left): 2, 1, 0 slots (the window has 99..97) */
    want((r = CHECK_(l, "exp", "u", 1, T0), &r), RL_WIRE_ALLOWED, 3, 2, 10000, 0);
    want((r = CHECK_(l, "exp", "u", 1, T0 + 1000), &r), RL_WIRE_ALLOWED, 3, 1, 10000, 0);
    want((r = CHECK_(l, "exp", "u", 1, T0 + 2000), &r), RL_WIRE_ALLOWED, 3, 0, 10000, 0);
    /* full: LIMITED until the earliest lease ends (T0 + 10 s) */
    want((r = CHECK_(l, "exp", "u", 1, T0 + 3000), &r), RL_WIRE_LIMITED, 3, 0, 9000, 7000);
    /* ADJUST leaves the slots alone: a refund of 1 frees none */
    want((r = ADJUST_(l, "exp", "u", -1, T0 + 3000), &r), RL_WIRE_ALLOWED, 3, 0, 9000, 7000);
    want((r = CHECK_(l, "exp", "u", 1, T0 + 3000), &r), RL_WIRE_LIMITED, 3, 0, 9000, 7000);
    want((r = ADJUST_(l, "exp", "u", 5, T0 + 3000), &r), RL_WIRE_ALLOWED, 3, 0, 9000, 7000);
    /* RELEASE gives back one slot (the oldest, T0's): allowed again */
    want((r = RELEASE_(l, "exp", "u", 1, T0 + 3000), &r), RL_WIRE_ALLOWED, 3, 1, 9000, 0);
    want((r = CHECK_(l, "exp", "u", 1, T0 + 3000), &r), RL_WIRE_ALLOWED, 3, 0, 10000, 0);
    ck_assert_uint_eq(late(l), 0);
    /* at T0 + 11 s the slot of T0 + 1 s has ended: 2 held, the newest ending at T0 + 13 s */
    want((r = CHECK_(l, "exp", "u", 0, T0 + 11000), &r), RL_WIRE_ALLOWED, 3, 1, 2000, 0);
    /* a release of 3 when 2 are held: 1 counted late */
    want((r = RELEASE_(l, "exp", "u", 3, T0 + 11000), &r), RL_WIRE_ALLOWED, 3, 3, 0, 0);
    ck_assert_uint_eq(late(l), 1);
    /* a key never seen holds nothing: all of it late */
    want((r = RELEASE_(l, "exp", "nobody", 2, T0), &r), RL_WIRE_ALLOWED, 3, 3, 0, 0);
    ck_assert_uint_eq(late(l), 3);
    /* of at most N (3) a RELEASE: a count past it is no holder that outlived its lease */
    want((r = RELEASE_(l, "exp", "nobody", 1000000, T0), &r), RL_WIRE_ALLOWED, 3, 3, 0, 0);
    ck_assert_uint_eq(late(l), 6);
    want((r = CHECK_(l, "exp", "u", 3, T0 + 11000), &r), RL_WIRE_ALLOWED, 3, 0, 10000, 0);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/* A rate tier refusing takes no slot; RELEASE gives back slots only, never what the rate
 * tier counted. */
START_TEST(test_limiter_rate_keeps)
{
    struct rl_conf *c;
    struct rl_limiter *l = mk_limiter(&c);
    struct rl_wire_check_reply r;

    want((r = CHECK_(l, "tight", "u", 1, T0), &r), RL_WIRE_ALLOWED, 2, 1, 40000, 0);
    want((r = CHECK_(l, "tight", "u", 1, T0), &r), RL_WIRE_ALLOWED, 2, 0, 40000, 0);
    /* the fixed window refuses: no slot taken */
    want((r = CHECK_(l, "tight", "u", 1, T0), &r), RL_WIRE_LIMITED, 2, 0, 40000, 40000);
    /* 2 slots held, not 3: a release of 3 has 1 late */
    want((r = RELEASE_(l, "tight", "u", 3, T0), &r), RL_WIRE_ALLOWED, 2, 0, 40000, 40000);
    ck_assert_uint_eq(late(l), 1);
    /* the window still counts its 2 */
    want((r = CHECK_(l, "tight", "u", 1, T0 + 1), &r), RL_WIRE_LIMITED, 2, 0, 39999, 39999);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_limiter_release_no_conc)
{
    struct rl_conf *c;
    struct rl_limiter *l = mk_limiter(&c);
    struct rl_wire_check_reply r, p;

    /* no rule: NO_RULE, nothing counted */
    want((r = RELEASE_(l, "none", "u", 1, T0), &r), RL_WIRE_NO_RULE, 0, 0, 0, 0);
    ck_assert_uint_eq(late(l), 0);
    /* a rule without a concurrency tier: ALLOWED, the key as a peek reads it, unchanged */
    CHECK_(l, "rate", "u", 3, T0);
    p = CHECK_(l, "rate", "u", 0, T0);
    r = RELEASE_(l, "rate", "u", 2, T0);
    want(&r, RL_WIRE_ALLOWED, p.limit, p.remaining, p.reset_ms, 0);
    r = CHECK_(l, "rate", "u", 0, T0);
    want(&r, RL_WIRE_ALLOWED, p.limit, p.remaining, p.reset_ms, 0);
    ck_assert_uint_eq(late(l), 0);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/* A shadow concurrency rule counts slots and never refuses. */
START_TEST(test_limiter_shadow)
{
    struct rl_conf *c;
    struct rl_limiter *l = mk_limiter(&c);
    struct rl_wire_check_reply r;
    struct rl_limiter_stats st;

    CHECK_(l, "sh", "u", 1, T0);
    r = CHECK_(l, "sh", "u", 1, T0);
    ck_assert_uint_eq(r.code, RL_WIRE_ALLOWED);
    rl_limiter_stats(l, &st);
    ck_assert_uint_eq(st.shadow_limited, 1);
    RELEASE_(l, "sh", "u", 1, T0);
    r = CHECK_(l, "sh", "u", 1, T0);
    ck_assert_uint_eq(r.code, RL_WIRE_ALLOWED);
    rl_limiter_stats(l, &st);
    ck_assert_uint_eq(st.shadow_limited, 1);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/* An inline concurrency limit: CHECK and RELEASE carry the same limit. */
START_TEST(test_limiter_inline)
{
    struct rl_conf *c;
    struct rl_limiter *l = mk_limiter(&c);
    struct rl_wire_req r = mk_req(RL_WIRE_OP_CHECK, "free", "u", 1);
    struct rl_wire_check_reply rep;

    r.limit.set = true;
    r.limit.algo = RL_ALGO_CONCURRENCY;
    r.limit.limit = 2;
    r.limit.window_ms = 5000;
    r.limit.burst = 2;
    r.tenant = 4;
    ck_assert_int_eq(rl_limiter_check(l, &r, T0, &rep), 0);
    want(&rep, RL_WIRE_ALLOWED, 2, 1, 5000, 0);
    ck_assert_int_eq(rl_limiter_check(l, &r, T0 + 100, &rep), 0);
    want(&rep, RL_WIRE_ALLOWED, 2, 0, 5000, 0);
    ck_assert_int_eq(rl_limiter_check(l, &r, T0 + 200, &rep), 0);
    want(&rep, RL_WIRE_LIMITED, 2, 0, 4900, 4800);
    r.op = RL_WIRE_OP_RELEASE;
    ck_assert_int_eq(rl_limiter_release(l, &r, T0 + 200, 0, &rep), 0);
    want(&rep, RL_WIRE_ALLOWED, 2, 1, 4900, 0);
    r.op = RL_WIRE_OP_CHECK;
    ck_assert_int_eq(rl_limiter_check(l, &r, T0 + 200, &rep), 0);
    want(&rep, RL_WIRE_ALLOWED, 2, 0, 5000, 0);
    /* an inline limit on a service with rules is refused, as for CHECK */
    r = mk_req(RL_WIRE_OP_RELEASE, "exp", "u", 1);
    r.limit.set = true;
    r.limit.algo = RL_ALGO_CONCURRENCY;
    r.limit.limit = 2;
    r.limit.window_ms = 5000;
    r.limit.burst = 2;
    ck_assert_int_eq(rl_limiter_release(l, &r, T0, 0, &rep), -EPERM);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/* A key's slots under another ownership epoch are an earlier tenure's: absent. */
START_TEST(test_limiter_epoch)
{
    struct rl_conf *c;
    struct rl_limiter *l = mk_limiter(&c);
    struct rl_wire_req r = mk_req(RL_WIRE_OP_CHECK, "exp", "e", 3);
    struct rl_wire_check_reply rep;

    ck_assert_int_eq(rl_limiter_check_epoch(l, &r, T0, 1, &rep), 0);
    ck_assert_uint_eq(rep.remaining, 0);
    r.op = RL_WIRE_OP_RELEASE;
    r.cost = 1;
    ck_assert_int_eq(rl_limiter_release(l, &r, T0, 2, &rep), 0);
    ck_assert_uint_eq(late(l), 1);
    ck_assert_uint_eq(rep.remaining, 3);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/* A node whose rules have no log tier gives inline concurrency keys no log memory: a key
 * keeps 4 entries, and slots taken in later ms share the newest's lease (docs/PROTOCOL.md,
 * "Inline limits"): freed early, never late. */
START_TEST(test_limiter_inline_no_log_memory)
{
    struct rl_conf *c = NULL;
    struct rl_limiter *l = NULL;
    struct rl_wire_req r = mk_req(RL_WIRE_OP_CHECK, "free", "u", 1);
    struct rl_wire_check_reply rep;
    char err[256] = "";

    RL_CHECK(rl_conf_parse("t.conf", "[service rate]\nlimit = token_bucket 5 per 1s\n", &c, err,
                           sizeof(err)) == 0,
             "conf: %s", err);
    ck_assert_int_eq(rl_limiter_create(&l, c, 64ull << 20), 0);
    r.limit.set = true;
    r.limit.algo = RL_ALGO_CONCURRENCY;
    r.limit.limit = 10;
    r.limit.window_ms = 1000;
    r.limit.burst = 10;
    for (uint64_t i = 0; i < 6; i++) {
        ck_assert_int_eq(rl_limiter_check(l, &r, T0 + i, &rep), 0);
        ck_assert_uint_eq(rep.remaining, 9 - i);
    }
    r.cost = 0;
    /* T0's slot ends at T0 + 1000; T0 + 4's and T0 + 5's share T0 + 3's entry */
    ck_assert_int_eq(rl_limiter_check(l, &r, T0 + 1000, &rep), 0);
    ck_assert_uint_eq(rep.remaining, 5);
    ck_assert_int_eq(rl_limiter_check(l, &r, T0 + 1003, &rep), 0);
    ck_assert_uint_eq(rep.remaining, 10);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

static Suite *
conc_suite(void)
{
    Suite *s = suite_create("concurrency");
    TCase *algo = tcase_create("algorithm");
    TCase *lim = tcase_create("limiter");

    tcase_set_timeout(algo, 120);
    tcase_add_test(algo, test_conc_known);
    tcase_add_test(algo, test_conc_random);
    tcase_add_test(algo, test_conc_clock_back);
    tcase_add_test(algo, test_conc_clock_day_back);
    tcase_add_test(algo, test_conc_export_import);
    tcase_add_test(algo, test_conc_export_long);
    tcase_add_test(algo, test_conc_memory);
    suite_add_tcase(s, algo);
    tcase_add_test(lim, test_limiter_concurrency_and_rate);
    tcase_add_test(lim, test_limiter_rate_keeps);
    tcase_add_test(lim, test_limiter_release_no_conc);
    tcase_add_test(lim, test_limiter_shadow);
    tcase_add_test(lim, test_limiter_inline);
    tcase_add_test(lim, test_limiter_epoch);
    tcase_add_test(lim, test_limiter_inline_no_log_memory);
    suite_add_tcase(s, lim);
    return s;
}

int
main(void)
{
    return rl_test_run(conc_suite());
}
