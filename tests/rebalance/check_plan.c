/*
 * check_plan: the Check suite of tools/rebalance/plan.c, the rebalance tool's leveller. On
 * synthetic shard loads (Zipf over shards and over keys, one hot shard, uniform) it checks
 * that the balance is reached, the budget respected, the result deterministic whatever the
 * members' order, nodes absent from the membership ignored, and that a balanced or empty load
 * moves nothing; a randomised test checks the plan's invariants over many seeds. Loads are
 * computed, not sampled, so every expectation is exact. No timing assertions.
 */
#include "plan.h"
#include "assignment.h"
#include "rltest.h"

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSHARDS 4096u

static uint64_t
rand64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Members "node-1" .. "node-n". */
static struct rl_member *
nodes(size_t n)
{
    struct rl_member *m = calloc(n, sizeof(*m));
    size_t i;

    RL_CHECK(m != NULL);
    for (i = 0; i < n; i++) {
        snprintf(m[i].name, sizeof(m[i].name), "node-%zu", i + 1);
        snprintf(m[i].addr, sizeof(m[i].addr), "127.0.0.1:%zu", 7401 + i);
    }
    return m;
}

static void
shuffle(struct rl_member *m, size_t n, uint64_t *state)
{
    struct rl_member t;
    size_t i, j;

    for (i = n; i > 1; i--) {
        j = (size_t)(rand64(state) % i);
        t = m[i - 1];
        m[i - 1] = m[j];
        m[j] = t;
    }
}

/* Zipf(s) over the shards themselves, in a shuffled rank order: total about 1e9. */
static uint64_t *
zipf_shards(uint32_t nshards, double s, uint64_t seed)
{
    uint64_t *load = calloc(nshards, sizeof(*load));
    uint32_t *rank = malloc(nshards * sizeof(*rank)), i, j, t;

    RL_CHECK(load != NULL);
    RL_CHECK(rank != NULL);
    for (i = 0; i < nshards; i++) {
        rank[i] = i;
    }
    for (i = nshards; i > 1; i--) {
        j = (uint32_t)(rand64(&seed) % i);
        t = rank[i - 1];
        rank[i - 1] = rank[j];
        rank[j] = t;
    }
    for (i = 0; i < nshards; i++) {
        load[i] = (uint64_t)(1e8 / pow((double)rank[i] + 1, s));
    }
    free(rank);
    return load;
}

/* Zipf(s) over nkeys keys (named as rl-genlog names them), summed into their shards. */
static uint64_t *
zipf_keys(uint32_t nshards, uint32_t nkeys, double s, uint64_t seed)
{
    uint64_t *load = calloc(nshards, sizeof(*load));
    char user[32];
    uint32_t k;

    RL_CHECK(load != NULL);
    for (k = 0; k < nkeys; k++) {
        int n = snprintf(user, sizeof(user), "u%u-%" PRIu64, k, seed);
        uint64_t h = rl_shardmap_key_hash("svc", 3, user, (size_t)n);

        load[rl_shardmap_shard(h, nshards)] += (uint64_t)(1e9 / pow((double)k + 1, s));
    }
    return load;
}

static void
compute(struct rl_plan *p, const uint64_t *load, const struct rl_member *m, size_t n,
        const struct rl_assignment *cur, double tol, double budget)
{
    struct rl_plan_input in = {.nshards = NSHARDS,
                               .load = load,
                               .members = m,
                               .nmembers = n,
                               .current = cur,
                               .tolerance = tol,
                               .budget = budget};

    RL_CHECK_INT_EQ(rl_plan_compute(&in, p), 0);
}

/* The invariants every plan keeps, whatever its inputs. */
static void
check_invariants(const struct rl_plan *p, const uint64_t *load)
{
    uint64_t *after = calloc(p->nmembers, sizeof(*after)), moved = 0, total = 0, maxb = 0, maxa = 0;
    uint8_t *seen = calloc(p->nshards, 1);
    struct rl_shardmap *map = NULL;
    uint32_t s, i, changed = 0;

    RL_CHECK(after != NULL && seen != NULL);
    for (s = 0; s < p->nshards; s++) {
        RL_CHECK(p->owner[s] < p->nmembers);
        after[p->owner[s]] += load[s];
        total += load[s];
        if (p->owner[s] != p->before_owner[s]) {
            changed++;
            moved += load[s];
            RL_CHECK(load[s] > 0); /* a shard with no load never moves */
        }
        /* An override exactly where the owner is not the rendezvous owner. */
        RL_CHECK((p->assignment.owner[s][0] != '\0') == (p->owner[s] != p->hrw[s]));
    }
    RL_CHECK(total == p->total);
    RL_CHECK(changed == p->moved_shards);
    RL_CHECK(moved == p->moved_load);
    RL_CHECK(p->moved_load <= p->budget_load);
    for (i = 0; i < p->moved_shards; i++) {
        const struct rl_plan_move *mv = &p->moves[i];

        RL_CHECK(!seen[mv->shard]); /* never moved twice */
        seen[mv->shard] = 1;
        RL_CHECK(mv->from == p->before_owner[mv->shard] && mv->to == p->owner[mv->shard]);
        RL_CHECK(mv->load == load[mv->shard]);
    }
    for (i = 0; i < p->nmembers; i++) {
        RL_CHECK(after[i] == p->after[i]);
        maxb = p->before[i] > maxb ? p->before[i] : maxb;
        maxa = p->after[i] > maxa ? p->after[i] : maxa;
    }
    RL_CHECK(maxa <= maxb);
    /* The assignment, through its text, gives routers exactly the plan's owners. */
    RL_CHECK_INT_EQ(rl_shardmap_create(&map, p->nshards, p->members, p->nmembers, &p->assignment),
                    0);
    for (s = 0; s < p->nshards; s++) {
        RL_CHECK(map->owner[s] == p->owner[s]);
    }
    rl_shardmap_destroy(map);
    free(after);
    free(seen);
}

START_TEST(test_balance_zipf_shards)
{
    struct rl_member *m = nodes(8);
    uint64_t *load = zipf_shards(NSHARDS, 1.0, 42);
    struct rl_plan p;

    compute(&p, load, m, 8, NULL, 0.05, 1.0);
    check_invariants(&p, load);
    ck_assert_msg(rl_plan_ratio(p.before, 8) > 1.10, "before %.3f", rl_plan_ratio(p.before, 8));
    ck_assert_msg(rl_plan_ratio(p.after, 8) <= 1.10, "after %.3f", rl_plan_ratio(p.after, 8));
    ck_assert(!p.budget_hit);
    ck_assert(p.moved_shards > 0);
    rl_plan_deinit(&p);
    free(load);
    free(m);
}
END_TEST

/* Zipf(1.0) over 1M keys and 8 nodes, the benchmark's case, from several seeds. */
START_TEST(test_balance_zipf_keys)
{
    struct rl_member *m = nodes(8);
    uint64_t *load = zipf_keys(NSHARDS, 1000000, 1.0, (uint64_t)_i);
    struct rl_plan p;

    compute(&p, load, m, 8, NULL, 0.05, 1.0);
    check_invariants(&p, load);
    ck_assert_msg(rl_plan_ratio(p.after, 8) <= 1.10, "seed %d: %.3f -> %.3f", _i,
                  rl_plan_ratio(p.before, 8), rl_plan_ratio(p.after, 8));
    /* Moving the excess above the target is the least any plan can move; allow twice. */
    {
        uint64_t excess = 0;

        for (size_t i = 0; i < 8; i++) {
            excess += p.before[i] > p.target ? p.before[i] - p.target : 0;
        }
        ck_assert_msg(p.moved_load <= 2 * excess + p.total / 100,
                      "moved %" PRIu64 " for an excess of %" PRIu64, p.moved_load, excess);
    }
    rl_plan_deinit(&p);
    free(load);
    free(m);
}
END_TEST

/*
 * Over key-level Zipf loads of several skews and node counts, the plan reaches the aim, or,
 * when one shard alone is above it, that shard's own share (no plan can do better), and moves
 * little more than the load above the target before.
 */
START_TEST(test_reaches_bound)
{
    static const double skews[] = {0.8, 1.0, 1.2};
    static const size_t counts[] = {3, 8, 16};
    double s = skews[_i / 3];
    size_t n = counts[_i % 3], i;
    struct rl_member *m = nodes(n);
    uint64_t *load = zipf_keys(NSHARDS, 300000, s, 11), max = 0, excess = 0;
    double bound;
    struct rl_plan p;
    uint32_t k;

    compute(&p, load, m, n, NULL, 0.05, 1.0);
    check_invariants(&p, load);
    for (k = 0; k < NSHARDS; k++) {
        max = load[k] > max ? load[k] : max;
    }
    for (i = 0; i < n; i++) {
        excess += p.before[i] > p.target ? p.before[i] - p.target : 0;
    }
    bound = fmax(1.05, (double)max * (double)n / (double)p.total);
    ck_assert_msg(rl_plan_ratio(p.after, n) <= bound + 0.005, "s=%.1f n=%zu: %.3f, bound %.3f", s,
                  n, rl_plan_ratio(p.after, n), bound);
    ck_assert_int_eq(p.hot_shard, bound > 1.05);
    ck_assert_msg(p.moved_load <= excess + excess / 10 + p.total / 500,
                  "s=%.1f n=%zu: moved %" PRIu64 " for an excess of %" PRIu64, s, n, p.moved_load,
                  excess);
    rl_plan_deinit(&p);
    free(load);
    free(m);
}
END_TEST

START_TEST(test_budget_respected)
{
    static const double budgets[] = {0, 0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 1.0};
    struct rl_member *m = nodes(8);
    uint64_t *load = zipf_keys(NSHARDS, 1000000, 1.0, 7);
    double prev_after = 1e9;
    struct rl_plan p;
    size_t i;

    for (i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
        compute(&p, load, m, 8, NULL, 0.05, budgets[i]);
        check_invariants(&p, load);
        RL_CHECK((long double)p.moved_load <= (long double)budgets[i] * p.total,
                 "budget %.3f: moved %" PRIu64 " of %" PRIu64, budgets[i], p.moved_load, p.total);
        if (budgets[i] == 0) {
            RL_CHECK_UINT_EQ(p.moved_shards, 0);
            RL_CHECK(p.budget_hit);
        }
        if (rl_plan_ratio(p.after, 8) > 1.05) {
            RL_CHECK(p.budget_hit, "budget %.3f: stopped above the aim without a reason",
                     budgets[i]);
        }
        /* A larger budget never ends worse. */
        RL_CHECK(rl_plan_ratio(p.after, 8) <= prev_after + 1e-12);
        prev_after = rl_plan_ratio(p.after, 8);
        rl_plan_deinit(&p);
    }
    free(load);
    free(m);
}
END_TEST

START_TEST(test_deterministic)
{
    struct rl_member *m = nodes(12), *m2 = nodes(12);
    uint64_t *load = zipf_keys(NSHARDS, 200000, 1.1, 3), seed = 99;
    struct rl_assignment cur;
    struct rl_plan a, b, c;
    char *ta, *tb, *tc;
    size_t la, lb, lc;
    int round;

    ck_assert_int_eq(rl_assignment_init(&cur, NSHARDS), 0);
    ck_assert_int_eq(rl_assignment_set(&cur, 5, "node-3"), 0);
    ck_assert_int_eq(rl_assignment_set(&cur, 77, "node-9"), 0);
    compute(&a, load, m, 12, &cur, 0.05, 0.5);
    ck_assert_int_eq(rl_assignment_format(&a.assignment, &ta, &la), 0);
    for (round = 0; round < 5; round++) {
        compute(&b, load, m, 12, &cur, 0.05, 0.5);
        shuffle(m2, 12, &seed);
        compute(&c, load, m2, 12, &cur, 0.05, 0.5);
        RL_CHECK_INT_EQ(rl_assignment_format(&b.assignment, &tb, &lb), 0);
        RL_CHECK_INT_EQ(rl_assignment_format(&c.assignment, &tc, &lc), 0);
        RL_CHECK(memcmp(a.owner, b.owner, NSHARDS * sizeof(*a.owner)) == 0);
        RL_CHECK(memcmp(a.owner, c.owner, NSHARDS * sizeof(*a.owner)) == 0);
        RL_CHECK(memcmp(a.members, c.members, 12 * sizeof(*a.members)) == 0);
        RL_CHECK(memcmp(a.moves, c.moves, a.moved_shards * sizeof(*a.moves)) == 0);
        RL_CHECK_UINT_EQ(la, lc);
        RL_CHECK(memcmp(ta, tb, la) == 0 && memcmp(ta, tc, la) == 0);
        free(tb);
        free(tc);
        rl_plan_deinit(&b);
        rl_plan_deinit(&c);
    }
    free(ta);
    rl_plan_deinit(&a);
    rl_assignment_deinit(&cur);
    free(load);
    free(m);
    free(m2);
}
END_TEST

/* Overrides naming nodes absent from the membership are ignored and dropped; unnecessary
 * ones (naming the rendezvous owner) disappear; those naming live nodes stay in force. */
START_TEST(test_dead_nodes_ignored)
{
    struct rl_member *m = nodes(4);
    uint64_t *load = calloc(NSHARDS, sizeof(*load));
    struct rl_assignment cur;
    struct rl_plan p;
    uint32_t s, hrw, other;

    ck_assert_ptr_nonnull(load);
    for (s = 0; s < NSHARDS; s++) {
        load[s] = 100;
    }
    ck_assert_int_eq(rl_assignment_init(&cur, NSHARDS), 0);
    for (s = 0; s < 64; s++) {
        RL_CHECK_INT_EQ(rl_assignment_set(&cur, s, "ghost"), 0);
    }
    hrw = rl_shardmap_hrw(100, m, 4);
    ck_assert_int_eq(rl_assignment_set(&cur, 100, m[hrw].name), 0); /* unnecessary */
    other = (hrw + 1) % 4;
    ck_assert_int_eq(rl_assignment_set(&cur, 101, m[other].name), 0);
    /* Uniform load, a loose aim: nothing needs to move. */
    compute(&p, load, m, 4, &cur, 0.5, 1.0);
    check_invariants(&p, load);
    ck_assert_uint_eq(p.moved_shards, 0);
    for (s = 0; s < 64; s++) {
        RL_CHECK_UINT_EQ(p.before_owner[s], p.hrw[s]);
        RL_CHECK_STR_EQ(p.assignment.owner[s], "");
    }
    ck_assert_str_eq(p.assignment.owner[100], "");
    ck_assert_str_eq(p.members[p.owner[101]].name, m[other].name);
    ck_assert_str_eq(p.assignment.owner[101], m[other].name);
    ck_assert_uint_eq(rl_plan_overrides(&p.assignment), 1);
    rl_plan_deinit(&p);
    rl_assignment_deinit(&cur);
    free(load);
    free(m);
}
END_TEST

/* A plan applied and planned again moves nothing: reruns on the same traffic are stable. */
START_TEST(test_no_move_when_balanced)
{
    struct rl_member *m = nodes(8);
    uint64_t *load = zipf_shards(NSHARDS, 0.9, 5);
    struct rl_plan p, q;
    char *tp, *tq;
    size_t lp, lq;

    compute(&p, load, m, 8, NULL, 0.05, 1.0);
    ck_assert(p.moved_shards > 0);
    compute(&q, load, m, 8, &p.assignment, 0.05, 1.0);
    check_invariants(&q, load);
    ck_assert_uint_eq(q.moved_shards, 0);
    ck_assert_uint_eq(q.moved_load, 0);
    ck_assert(!q.budget_hit);
    ck_assert(memcmp(p.owner, q.owner, NSHARDS * sizeof(*p.owner)) == 0);
    ck_assert_int_eq(rl_assignment_format(&p.assignment, &tp, &lp), 0);
    ck_assert_int_eq(rl_assignment_format(&q.assignment, &tq, &lq), 0);
    ck_assert_uint_eq(lp, lq);
    ck_assert(memcmp(tp, tq, lp) == 0);
    free(tp);
    free(tq);
    rl_plan_deinit(&p);
    rl_plan_deinit(&q);
    free(load);
    free(m);
}
END_TEST

START_TEST(test_empty_and_single)
{
    struct rl_member *m = nodes(5);
    uint64_t *load = calloc(NSHARDS, sizeof(*load));
    struct rl_plan p;

    ck_assert_ptr_nonnull(load);
    compute(&p, load, m, 5, NULL, 0.05, 1.0);
    check_invariants(&p, load);
    ck_assert_uint_eq(p.total, 0);
    ck_assert_uint_eq(p.moved_shards, 0);
    ck_assert_uint_eq(rl_plan_overrides(&p.assignment), 0);
    ck_assert(rl_plan_ratio(p.after, 5) == 0);
    rl_plan_deinit(&p);

    load[17] = 1000;
    load[18] = 5;
    compute(&p, load, m, 1, NULL, 0.05, 1.0);
    check_invariants(&p, load);
    ck_assert_uint_eq(p.moved_shards, 0);
    ck_assert(rl_plan_ratio(p.after, 1) == 1.0);
    rl_plan_deinit(&p);
    free(load);
    free(m);
}
END_TEST

/* One shard with half the traffic: its node sheds everything else, the shard stays, the plan
 * says so, and nothing thrashes. */
START_TEST(test_hot_shard)
{
    struct rl_member *m = nodes(4);
    uint64_t *load = calloc(NSHARDS, sizeof(*load)), others = 0;
    struct rl_plan p;
    uint32_t s, hot = 1234, node;

    ck_assert_ptr_nonnull(load);
    for (s = 0; s < NSHARDS; s++) {
        load[s] = 10;
    }
    load[hot] = 10 * NSHARDS;
    compute(&p, load, m, 4, NULL, 0.05, 1.0);
    check_invariants(&p, load);
    node = p.before_owner[hot];
    for (s = 0; s < NSHARDS; s++) {
        if (s != hot && p.before_owner[s] == node) {
            others += load[s];
        }
    }
    ck_assert_uint_eq(p.owner[hot], node);
    ck_assert(p.hot_shard);
    ck_assert_uint_eq(p.hot_shards, 1);
    ck_assert_uint_eq(p.after[node], load[hot]);
    ck_assert_uint_eq(p.moved_load, others);
    ck_assert(!p.budget_hit);
    /* Without the hot shard, every other node is within the aim. */
    for (s = 0; s < 4; s++) {
        if (s != node) {
            RL_CHECK_UINT_LE(p.after[s], p.target);
        }
    }
    rl_plan_deinit(&p);
    free(load);
    free(m);
}
END_TEST

START_TEST(test_errors)
{
    struct rl_member *m = nodes(3);
    uint64_t load[NSHARDS] = {0};
    struct rl_assignment other;
    struct rl_plan_input in = {.nshards = NSHARDS,
                               .load = load,
                               .members = m,
                               .nmembers = 3,
                               .tolerance = 0.05,
                               .budget = 1};
    struct rl_plan p;

    in.nmembers = 0;
    ck_assert_int_eq(rl_plan_compute(&in, &p), -EINVAL);
    in.nmembers = 3;
    in.tolerance = -0.1;
    ck_assert_int_eq(rl_plan_compute(&in, &p), -EINVAL);
    in.tolerance = NAN;
    ck_assert_int_eq(rl_plan_compute(&in, &p), -EINVAL);
    in.tolerance = 0.05;
    in.budget = 1.5;
    ck_assert_int_eq(rl_plan_compute(&in, &p), -EINVAL);
    in.budget = 1;
    ck_assert_int_eq(rl_assignment_init(&other, 1024), 0);
    in.current = &other;
    ck_assert_int_eq(rl_plan_compute(&in, &p), -EINVAL);
    rl_assignment_deinit(&other);
    in.current = NULL;
    memcpy(m[1].name, m[0].name, sizeof(m[1].name)); /* twice the same name */
    ck_assert_int_eq(rl_plan_compute(&in, &p), -EINVAL);
    free(m);
}
END_TEST

START_TEST(test_ratio)
{
    uint64_t a[] = {10, 20, 30}, z[] = {0, 0};

    ck_assert_double_eq_tol(rl_plan_ratio(a, 3), 1.5, 1e-12);
    ck_assert(rl_plan_ratio(z, 2) == 0);
    ck_assert(rl_plan_ratio(a, 0) == 0);
}
END_TEST

/* Random loads, node counts, budgets, tolerances and current assignments: the invariants. */
START_TEST(test_random_invariants)
{
    uint64_t seed = 1000 + (uint64_t)_i, *load = calloc(NSHARDS, sizeof(*load));
    size_t n = 2 + (size_t)(rand64(&seed) % 15);
    struct rl_member *m = nodes(n + 1);
    double s = (double)(rand64(&seed) % 150) / 100.0;
    double budget = (double)(rand64(&seed) % 101) / 100.0;
    double tol = (double)(rand64(&seed) % 30) / 100.0;
    struct rl_assignment cur;
    struct rl_plan p;
    uint32_t k;

    ck_assert_ptr_nonnull(load);
    for (k = 0; k < NSHARDS; k++) {
        /* Some shards idle, the rest heavy-tailed. */
        load[k] = rand64(&seed) % 4 == 0 ? 0 : (uint64_t)(1e6 / pow(1 + rand64(&seed) % 5000, s));
    }
    ck_assert_int_eq(rl_assignment_init(&cur, NSHARDS), 0);
    for (k = 0; k < 200; k++) {
        /* Overrides to live nodes and to m[n], which is not a member. */
        RL_CHECK_INT_EQ(rl_assignment_set(&cur, (uint32_t)(rand64(&seed) % NSHARDS),
                                          m[rand64(&seed) % (n + 1)].name),
                        0);
    }
    compute(&p, load, m, n, &cur, tol, budget);
    check_invariants(&p, load);
    for (k = 0; k < NSHARDS; k++) {
        RL_CHECK(strcmp(p.assignment.owner[k], m[n].name) != 0);
    }
    if (!p.budget_hit && !p.hot_shard && rl_plan_ratio(p.after, n) > 1 + tol + 0.10) {
        ck_abort_msg("seed %d: n=%zu s=%.2f tol=%.2f: %.3f -> %.3f", _i, n, s, tol,
                     rl_plan_ratio(p.before, n), rl_plan_ratio(p.after, n));
    }
    rl_plan_deinit(&p);
    rl_assignment_deinit(&cur);
    free(load);
    free(m);
}
END_TEST

static Suite *
plan_suite(void)
{
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_balance_zipf_shards);
    tcase_add_loop_test(tc, test_balance_zipf_keys, 1, 4);
    tcase_add_loop_test(tc, test_reaches_bound, 0, 9);
    tcase_add_test(tc, test_budget_respected);
    tcase_add_test(tc, test_deterministic);
    tcase_add_test(tc, test_dead_nodes_ignored);
    tcase_add_test(tc, test_no_move_when_balanced);
    tcase_add_test(tc, test_empty_and_single);
    tcase_add_test(tc, test_hot_shard);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_ratio);
    suite_add_tcase(s, tc);

    tc = tcase_create("random");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_random_invariants, 0, 40);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(plan_suite)
