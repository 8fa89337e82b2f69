/*
 * check_backstop: the router's floor under failing open (backstop.h) as a data structure,
 * the clock under the test's control: a user gets at most max(1, N / W) per window per loop
 * for every tier, a cost counts as its units, the window starts afresh once it has passed
 * (however long the outage), refusals carry LIMITED with the tier's capacity as the node reports
 * it and the time to the window's end (never, for a cost past that capacity), each (rule, user)
 * counts apart, a flood of distinct users keeps the table's size (evictions counted) and
 * evicts the least used users, never one at its quota while less used ones share its set; a
 * rules change keeps the users of unchanged rules; and the config's failure values (open,
 * open_unlimited, closed). Not for the router's use of it (check_loss).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backstop.h"
#include "conf.h"
#include "rltest.h"
#include "wire.h"

#define MS 1000000ull

static const char rules[] = "[service a]\nlimit = token_bucket 20 per 1d\n"
                            "[service bb]\nlimit = token_bucket 10 per 10s burst 5\n"
                            "[service b]\nlimit = fixed_window 10 per 1s\n"
                            "limit = fixed_window 15 per 1m\n"
                            "[service u]\nfailure = open_unlimited\n"
                            "limit = fixed_window 1 per 1s\n"
                            "[service c]\nfailure = closed\nlimit = fixed_window 1 per 1s\n"
                            "[service many]\n"
                            "limit = fixed_window 1000 per 1h\nlimit = fixed_window 1000 per 2h\n"
                            "limit = fixed_window 1000 per 3h\nlimit = fixed_window 1000 per 4h\n"
                            "limit = fixed_window 1000 per 5h\nlimit = fixed_window 1000 per 6h\n"
                            "limit = fixed_window 1000 per 7h\nlimit = fixed_window 1000 per 8h\n"
                            "limit = fixed_window 1000 per 9h\nlimit = fixed_window 1000 per 10h\n"
                            "limit = fixed_window 1000 per 11h\nlimit = fixed_window 1000 per 12h\n"
                            "limit = fixed_window 1000 per 13h\nlimit = fixed_window 1000 per 14h\n"
                            "limit = fixed_window 1000 per 15h\nlimit = fixed_window 2 per 1h\n";

static struct rl_conf *
conf(void)
{
    struct rl_conf *c = NULL;
    char err[256];

    ck_assert_msg(rl_conf_parse("t.conf", rules, &c, err, sizeof(err)) == 0, "%s", err);
    return c;
}

static const struct rl_rule *
rule(const struct rl_conf *c, const char *s)
{
    const struct rl_rule *r = rl_conf_rule(c, s, strlen(s), NULL, 0);

    ck_assert_ptr_nonnull(r);
    return r;
}

/* Allowances of one user over n requests of cost 1 at now. */
static int
allowed(struct rl_backstop *b, const struct rl_conf *c, const struct rl_rule *r, uint64_t h,
        int n, uint64_t now)
{
    struct rl_wire_check_reply rep;
    int a = 0;

    for (int i = 0; i < n; i++) {
        a += rl_backstop_judge(b, c, r, h, 1, now, &rep);
        ck_assert_uint_eq(rep.code, a > i ? RL_WIRE_FAIL_OPEN : RL_WIRE_LIMITED);
        if (a <= i) {
            ck_assert_uint_eq(rep.remaining, 0);
            ck_assert_uint_gt(rep.retry_after_ms, 0);
        }
    }
    return a;
}

START_TEST(test_conf_values)
{
    struct rl_conf *c = conf(), *bad = NULL;
    char err[256];

    ck_assert(!rule(c, "a")->fail_closed && !rule(c, "a")->fail_unlimited);
    ck_assert(!rule(c, "u")->fail_closed && rule(c, "u")->fail_unlimited);
    ck_assert(rule(c, "c")->fail_closed && !rule(c, "c")->fail_unlimited);
    ck_assert_int_ne(rl_conf_parse("t.conf", "[service x]\nfailure = unlimited\n"
                                             "limit = fixed_window 1 per 1s\n",
                                   &bad, err, sizeof(err)),
                     0);
    ck_assert_msg(strstr(err, "open_unlimited") != NULL, "%s", err);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_quota_per_window)
{
    struct rl_conf *c = conf();
    struct rl_backstop b;
    const struct rl_rule *a = rule(c, "a");
    uint64_t t = 1000 * MS;
    struct rl_wire_check_reply rep;

    ck_assert_uint_eq(rl_backstop_quota(20, 1), 20);
    ck_assert_uint_eq(rl_backstop_quota(20, 3), 6);
    ck_assert_uint_eq(rl_backstop_quota(1, 4), 1);
    ck_assert_int_eq(rl_backstop_init(&b, 64, 2), 0);
    /* 20 per day over 2 loops: 10 each, then LIMITED until the day is over. */
    ck_assert_int_eq(allowed(&b, c, a, 42, 50, t), 10);
    ck_assert(!rl_backstop_judge(&b, c, a, 42, 1, t + 3600000 * MS, &rep));
    ck_assert_uint_eq(rep.code, RL_WIRE_LIMITED);
    ck_assert_uint_eq(rep.limit, 20);
    ck_assert_uint_eq(rep.retry_after_ms, 86400000 - 3600000);
    /* Another user, another rule: their own counts. */
    ck_assert_int_eq(allowed(&b, c, a, 43, 50, t), 10);
    /* Cost: 4 units of the 10 at once, then 6 left. */
    ck_assert(rl_backstop_judge(&b, c, a, 44, 4, t, &rep));
    ck_assert(!rl_backstop_judge(&b, c, a, 44, 7, t, &rep));
    ck_assert(rl_backstop_judge(&b, c, a, 44, 6, t, &rep));
    ck_assert(rl_backstop_judge(&b, c, a, 44, 0, t, &rep)); /* cost 0: counts nothing */
    /* However long the outage: one window's quota per window, never more. */
    for (int day = 1; day <= 5; day++) {
        ck_assert_int_eq(allowed(&b, c, a, 42, 30, t + (uint64_t)day * 86400000 * MS), 10);
    }
    ck_assert_uint_eq(b.st.allowed, 10 + 10 + 1 + 1 + 1 + 50); /* answers, not units */
    rl_backstop_deinit(&b);
    rl_conf_destroy(c);
}
END_TEST

/* A refusal says what the node would: the tier's capacity as its limit (B for a bucket, N
 * for a window) and, for a cost past that capacity, a retry_after of 4294967295 (never). */
START_TEST(test_refusal_as_the_node_says)
{
    struct rl_conf *c = conf();
    struct rl_backstop b;
    struct rl_wire_check_reply rep;
    uint64_t t = 1000 * MS;

    ck_assert_int_eq(rl_backstop_init(&b, 64, 1), 0);
    /* token_bucket 10 per 10s burst 5: its quota of 10 a window, then LIMITED with limit 5 */
    ck_assert(rl_backstop_judge(&b, c, rule(c, "bb"), 1, 5, t, &rep));
    ck_assert(rl_backstop_judge(&b, c, rule(c, "bb"), 1, 5, t, &rep));
    ck_assert(!rl_backstop_judge(&b, c, rule(c, "bb"), 1, 1, t, &rep));
    ck_assert_uint_eq(rep.code, RL_WIRE_LIMITED);
    ck_assert_uint_eq(rep.limit, 5);
    ck_assert_uint_eq(rep.retry_after_ms, 10000);
    /* a cost of 6 against B = 5: never, whatever the window, though the quota has room */
    ck_assert(!rl_backstop_judge(&b, c, rule(c, "bb"), 2, 6, t, &rep));
    ck_assert_uint_eq(rep.limit, 5);
    ck_assert_uint_eq(rep.retry_after_ms, RL_WIRE_RETRY_NEVER);
    /* fixed_window 10 per 1s: a cost of 11 never, a cost of 10 once the window has room */
    ck_assert(!rl_backstop_judge(&b, c, rule(c, "b"), 3, 11, t, &rep));
    ck_assert_uint_eq(rep.limit, 10);
    ck_assert_uint_eq(rep.retry_after_ms, RL_WIRE_RETRY_NEVER);
    ck_assert(rl_backstop_judge(&b, c, rule(c, "b"), 3, 10, t, &rep));
    ck_assert(!rl_backstop_judge(&b, c, rule(c, "b"), 3, 10, t + 200 * MS, &rep));
    ck_assert_uint_eq(rep.limit, 10);
    ck_assert_uint_eq(rep.retry_after_ms, 800);
    rl_backstop_deinit(&b);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_every_tier)
{
    struct rl_conf *c = conf();
    struct rl_backstop b;
    const struct rl_rule *r = rule(c, "b");
    uint64_t t = 5000 * MS;
    int total = 0;

    ck_assert_int_eq(rl_backstop_init(&b, 64, 1), 0);
    /* 10 per second, 15 per minute: 10, then 5, then nothing for the rest of the minute. */
    for (int s = 0; s < 59; s++) {
        total += allowed(&b, c, r, 7, 20, t + (uint64_t)s * 1000 * MS);
    }
    ck_assert_int_eq(total, 15);
    ck_assert_int_eq(allowed(&b, c, r, 7, 20, t + 60000 * MS), 10);
    rl_backstop_deinit(&b);
    rl_conf_destroy(c);
}
END_TEST

/* A rule of 16 tiers whose last is the strict one: held to it (before, only the first 4
 * tiers were counted, and this rule let 1000 an hour through instead of 2). */
START_TEST(test_sixteenth_tier)
{
    struct rl_conf *c = conf();
    struct rl_backstop b;
    const struct rl_rule *r = rule(c, "many");
    struct rl_wire_check_reply rep;

    ck_assert_uint_eq(r->ntiers, 16);
    ck_assert_int_eq(rl_backstop_init(&b, 64, 1), 0);
    ck_assert_int_eq(allowed(&b, c, r, 9, 50, 7000 * MS), 2);
    ck_assert(!rl_backstop_judge(&b, c, r, 9, 1, 7000 * MS, &rep));
    ck_assert_uint_eq(rep.limit, 2);
    rl_backstop_deinit(&b);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_bounded_flood)
{
    struct rl_conf *c = conf();
    struct rl_backstop b;
    const struct rl_rule *a = rule(c, "a");
    uint64_t t = 1000 * MS;
    size_t cap;

    ck_assert_int_eq(rl_backstop_init(&b, 256, 1), 0);
    cap = b.st.entries;
    ck_assert_uint_eq(cap, 256);
    ck_assert_int_eq(allowed(&b, c, a, 1, 25, t), 20);
    /* 100,000 distinct users: the table keeps its size, evicting the least used. */
    for (uint64_t u = 2; u < 100002; u++) {
        ck_assert_int_eq(allowed(&b, c, a, u * 0x9e3779b97f4a7c15ull, 1, t + u), 1);
    }
    ck_assert_uint_eq(b.st.entries, cap);
    ck_assert_uint_ge(b.st.evictions, 100000 - cap);
    /* User 1, at its quota, was never evicted by users asked once (before, it was allowed its
     * quota again, and each flood of made-up users gave it the same). */
    ck_assert_int_eq(allowed(&b, c, a, 1, 25, t + 200000), 0);
    rl_backstop_deinit(&b);
    rl_conf_destroy(c);
}
END_TEST

/* Whether the table holds a user of hash h. */
static bool
held(const struct rl_backstop *b, uint64_t h)
{
    for (size_t i = 0; i < (size_t)b->nsets * RL_BACKSTOP_WAYS; i++) {
        if (b->e[i].used && b->e[i].hash == h) {
            return true;
        }
    }
    return false;
}

/* One set of 4: a newcomer evicts the least used user (a window ended counts as nothing
 * used), the least recently asked among equals; a user at its quota goes only when its whole
 * set is as used. Before, the least recently asked went: user 1 here got its quota again. */
START_TEST(test_least_used_evicted)
{
    struct rl_conf *c = conf();
    struct rl_backstop b, b2;
    const struct rl_rule *a = rule(c, "a"), *sec = rule(c, "c");
    uint64_t t = 1000 * MS;

    ck_assert_int_eq(rl_backstop_init(&b, 4, 1), 0);
    ck_assert_uint_eq(b.nsets, 1);
    ck_assert_int_eq(allowed(&b, c, a, 1, 25, t), 20); /* at its quota, asked first */
    for (uint64_t u = 2; u <= 4; u++) {
        ck_assert_int_eq(allowed(&b, c, a, u, 1, t + u), 1);
    }
    /* 1,000 more users asked once each: each evicts one asked once, never user 1 */
    for (uint64_t u = 5; u < 1005; u++) {
        ck_assert_int_eq(allowed(&b, c, a, u, 1, t + u), 1);
    }
    ck_assert_uint_eq(b.st.evictions, 1000);
    ck_assert_int_eq(allowed(&b, c, a, 1, 25, t + 2000), 0);
    /* a user whose window ended goes before one that used less in a window still running */
    ck_assert_int_eq(allowed(&b, c, sec, 7000, 1, t + 3000), 1); /* fixed_window 1 per 1s */
    ck_assert_int_eq(allowed(&b, c, a, 7001, 1, t + 2 * 1000 * MS), 1);
    ck_assert(held(&b, 1) && held(&b, 1003) && held(&b, 1004) && held(&b, 7001));
    ck_assert(!held(&b, 7000) && !held(&b, 1002));
    /* a set of users at their quota: the least recently asked goes, and starts again */
    for (uint64_t u = 8000; u < 8003; u++) {
        ck_assert_int_eq(allowed(&b, c, a, u, 25, t + 3 * 1000 * MS + u), 20);
    }
    ck_assert_int_eq(allowed(&b, c, a, 8003, 25, t + 4 * 1000 * MS), 20); /* evicts user 1 */
    ck_assert_int_eq(allowed(&b, c, a, 1, 25, t + 4 * 1000 * MS), 20);
    /* two tables place users with different secret seeds */
    ck_assert_int_eq(rl_backstop_init(&b2, 4, 1), 0);
    ck_assert_uint_ne(b.seed, b2.seed);
    rl_backstop_deinit(&b2);
    rl_backstop_deinit(&b);
    rl_conf_destroy(c);
}
END_TEST

/* A rules change keeps the users of a rule found again with the same tiers (under its new id:
 * a service added before it renumbers it), a new limit included, and forgets those of a rule
 * whose tiers changed or that went. Before, every change forgot everyone. */
START_TEST(test_rules_change_keeps_unchanged_rules)
{
    static const char next[] = "[service first]\nlimit = fixed_window 1 per 1s\n"
                               "[service a]\nlimit = token_bucket 30 per 1d\n"
                               "[service bb]\nlimit = token_bucket 10 per 20s burst 5\n";
    struct rl_conf *c = conf(), *c2 = NULL;
    struct rl_backstop b;
    uint64_t t = 1000 * MS;
    char err[256];

    ck_assert_int_eq(rl_backstop_init(&b, 256, 1), 0);
    ck_assert_int_eq(allowed(&b, c, rule(c, "a"), 1, 25, t), 20);
    ck_assert_int_eq(allowed(&b, c, rule(c, "bb"), 1, 25, t), 10);
    ck_assert_int_eq(allowed(&b, c, rule(c, "b"), 1, 25, t), 10);
    ck_assert_msg(rl_conf_parse("t2.conf", next, &c2, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_ne(rule(c2, "a")->id, rule(c, "a")->id);
    rl_backstop_rules(&b, c, c2);
    /* a: same algorithm and window, limit 30: its 20 kept, 10 more */
    ck_assert_int_eq(allowed(&b, c2, rule(c2, "a"), 1, 25, t + MS), 10);
    /* bb: another window, another counter: afresh */
    ck_assert_int_eq(allowed(&b, c2, rule(c2, "bb"), 1, 25, t + MS), 10);
    /* back to the first rules: b went in between, so its user starts afresh */
    rl_backstop_rules(&b, c2, c);
    ck_assert_int_eq(allowed(&b, c, rule(c, "b"), 1, 25, t + MS), 10);
    ck_assert_int_eq(allowed(&b, c, rule(c, "a"), 1, 25, t + MS), 0); /* 20 of 20 */
    rl_backstop_deinit(&b);
    rl_conf_destroy(c2);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_no_table_allows)
{
    struct rl_conf *c = conf();
    struct rl_backstop b;
    struct rl_wire_check_reply rep;

    ck_assert_int_eq(rl_backstop_init(&b, 0, 1), 0);
    for (int i = 0; i < 100; i++) {
        ck_assert(rl_backstop_judge(&b, c, rule(c, "a"), 9, 1, 1, &rep));
        ck_assert_uint_eq(rep.code, RL_WIRE_FAIL_OPEN);
    }
    rl_backstop_deinit(&b);
    rl_conf_destroy(c);
}
END_TEST

static Suite *
backstop_suite(void)
{
    Suite *s = suite_create("backstop");
    TCase *tc = tcase_create("backstop");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_conf_values);
    tcase_add_test(tc, test_quota_per_window);
    tcase_add_test(tc, test_refusal_as_the_node_says);
    tcase_add_test(tc, test_every_tier);
    tcase_add_test(tc, test_sixteenth_tier);
    tcase_add_test(tc, test_bounded_flood);
    tcase_add_test(tc, test_least_used_evicted);
    tcase_add_test(tc, test_rules_change_keeps_unchanged_rules);
    tcase_add_test(tc, test_no_table_allows);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(backstop_suite)
