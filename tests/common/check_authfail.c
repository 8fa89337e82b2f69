/*
 * check_authfail: failed AUTHs per client network (common/authfail.c): a network past its
 * burst waits, and only its own failures make it wait (the attack round of 2026-11-30: failures
 * from thousands of addresses filled the 1024 hashed slots every address shared, and clients
 * that never failed were refused); an IPv6 /64 is one network; failures are forgiven at the
 * rate; a full bucket forgets the entry closest to being forgiven.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "authfail.h"
#include "rltest.h"

#define EVERY 200u /* ms a failure costs: 5 a second */
#define BURST 10u

static void
v4(uint8_t *a, uint32_t ip)
{
    memset(a, 0, 16);
    a[10] = a[11] = 0xff;
    a[12] = (uint8_t)(ip >> 24);
    a[13] = (uint8_t)(ip >> 16);
    a[14] = (uint8_t)(ip >> 8);
    a[15] = (uint8_t)ip;
}

static void
v6(uint8_t *a, uint64_t net, uint64_t host)
{
    for (int i = 0; i < 8; i++) {
        a[i] = (uint8_t)(net >> (56 - 8 * i));
        a[8 + i] = (uint8_t)(host >> (56 - 8 * i));
    }
}

START_TEST(test_burst_then_wait_then_forgiven)
{
    struct rl_authfail *t = rl_authfail_new();
    uint8_t a[16], b[16];
    uint64_t now = 1000;

    ck_assert_ptr_nonnull(t);
    v4(a, 0x0a000001u);
    v4(b, 0x0a000002u);
    for (unsigned i = 0; i < BURST; i++) {
        ck_assert_uint_eq(rl_authfail_wait(t, a, now, EVERY, BURST), 0);
        rl_authfail_charge(t, a, now, EVERY);
    }
    ck_assert_uint_eq(rl_authfail_wait(t, a, now, EVERY, BURST), EVERY);
    ck_assert_uint_eq(rl_authfail_wait(t, b, now, EVERY, BURST), 0); /* its neighbour */
    ck_assert_uint_eq(rl_authfail_wait(t, a, now + EVERY, EVERY, BURST), 0);
    rl_authfail_charge(t, a, now + EVERY, EVERY);
    ck_assert_uint_gt(rl_authfail_wait(t, a, now + EVERY, EVERY, BURST), 0);
    rl_authfail_free(t);
}
END_TEST

/* An IPv6 host's /64 is one network; another /64 is another. */
START_TEST(test_ipv6_by_64)
{
    struct rl_authfail *t = rl_authfail_new();
    uint8_t a[16], same[16], other[16];

    v6(a, 0x20010db800000001ull, 1);
    v6(same, 0x20010db800000001ull, 0xdeadbeefull);
    v6(other, 0x20010db800000002ull, 1);
    for (unsigned i = 0; i < 2 * BURST; i++) {
        rl_authfail_charge(t, a, 5000, EVERY);
    }
    ck_assert_uint_gt(rl_authfail_wait(t, a, 5000, EVERY, BURST), 0);
    ck_assert_uint_gt(rl_authfail_wait(t, same, 5000, EVERY, BURST), 0);
    ck_assert_uint_eq(rl_authfail_wait(t, other, 5000, EVERY, BURST), 0);
    rl_authfail_free(t);
}
END_TEST

/* 200,000 networks each past their burst (more than the table holds): a network that never
 * failed is never made to wait, and most of the flood is still refused. */
START_TEST(test_a_flood_of_networks_locks_nobody_else_out)
{
    struct rl_authfail *t = rl_authfail_new();
    uint8_t a[16], victim[16];
    uint64_t now = 10000;
    unsigned waiting = 0;

    for (uint32_t n = 0; n < 200000; n++) {
        v4(a, 0x7f030000u + n);
        for (unsigned i = 0; i < BURST + 5; i++) {
            rl_authfail_charge(t, a, now, EVERY);
        }
    }
    for (uint32_t n = 0; n < 100000; n++) {
        v4(victim, 0x0b000000u + n); /* addresses that never failed */
        ck_assert_uint_eq(rl_authfail_wait(t, victim, now, EVERY, BURST), 0);
    }
    for (uint32_t n = 200000 - RL_AUTHFAIL_BUCKETS * 4; n < 200000; n++) {
        v4(a, 0x7f030000u + n);
        waiting += rl_authfail_wait(t, a, now, EVERY, BURST) > 0;
    }
    /* most of the newest are remembered (a full bucket forgets one of its ways, those tied
     * in turn) */
    ck_assert_uint_ge(waiting, RL_AUTHFAIL_BUCKETS * 4 * 6 / 10);
    rl_authfail_free(t);
}
END_TEST

/* A full bucket takes a free way or a forgiven one first, then the one closest to being
 * forgiven: a network that failed a lot is kept over one that failed once. */
START_TEST(test_full_bucket_forgets_the_nearest_forgiven)
{
    struct rl_authfail *t = rl_authfail_new();
    uint8_t heavy[16], a[16];
    uint64_t now = 10000;
    unsigned found = 0;

    v4(heavy, 0x0c000001u);
    for (unsigned i = 0; i < 100; i++) {
        rl_authfail_charge(t, heavy, now, EVERY); /* 20 s of failures */
    }
    for (uint32_t n = 0; n < RL_AUTHFAIL_BUCKETS * RL_AUTHFAIL_WAYS * 4; n++) {
        v4(a, 0x0d000000u + n);
        rl_authfail_charge(t, a, now, EVERY); /* once each: 200 ms */
    }
    ck_assert_uint_gt(rl_authfail_wait(t, heavy, now, EVERY, BURST), 0);
    for (uint32_t n = 0; n < RL_AUTHFAIL_BUCKETS * RL_AUTHFAIL_WAYS * 4; n++) {
        v4(a, 0x0d000000u + n);
        found += rl_authfail_wait(t, a, now, 0, 1) > 0 || rl_authfail_wait(t, a, now, EVERY, 1) > 0;
    }
    ck_assert_uint_le(found, RL_AUTHFAIL_BUCKETS * RL_AUTHFAIL_WAYS);
    rl_authfail_free(t);
}
END_TEST

static Suite *
authfail_suite(void)
{
    Suite *s = suite_create("authfail");
    TCase *tc = tcase_create("authfail");

    tcase_add_test(tc, test_burst_then_wait_then_forgiven);
    tcase_add_test(tc, test_ipv6_by_64);
    tcase_add_test(tc, test_a_flood_of_networks_locks_nobody_else_out);
    tcase_add_test(tc, test_full_bucket_forgets_the_nearest_forgiven);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(authfail_suite)
