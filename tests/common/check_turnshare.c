/*
 * check_turnshare: a loop turn's input split between addresses, then between each address's
 * connections (common/turnshare.c), without a loop: what a connection's share is after a turn
 * in which some connections used theirs, as addresses come and go, and the bounds.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "rltest.h"
#include "turnshare.h"

#define FULL (64u * 1024u)

/* IPv4 a.b.c.d mapped into IPv6, as connections keep their peer's address. */
static void
v4(uint8_t *addr, uint32_t ip)
{
    memset(addr, 0, 16);
    addr[10] = addr[11] = 0xff;
    addr[12] = (uint8_t)(ip >> 24);
    addr[13] = (uint8_t)(ip >> 16);
    addr[14] = (uint8_t)(ip >> 8);
    addr[15] = (uint8_t)ip;
}

START_TEST(test_nobody_busy_gets_full)
{
    struct rl_turnshare t;
    uint8_t a[16];

    rl_turnshare_init(&t);
    v4(a, 0x7f000001u);
    ck_assert_uint_eq(rl_turnshare_share(&t, a, 0, FULL), FULL);
    rl_turnshare_busy(&t, a); /* this turn's: the share follows the last turn's */
    ck_assert_uint_eq(rl_turnshare_share(&t, a, 0, FULL), FULL);
    rl_turnshare_next(&t);
    ck_assert_uint_eq(rl_turnshare_clients(&t), 1);
    ck_assert_uint_eq(rl_turnshare_conns(&t), 1);
    ck_assert_uint_eq(rl_turnshare_share(&t, a, 0, FULL), FULL); /* 128 KiB / 1, within full */
    rl_turnshare_next(&t);                                       /* a turn where nobody was busy */
    ck_assert_uint_eq(rl_turnshare_conns(&t), 0);
    ck_assert_uint_eq(rl_turnshare_share(&t, a, 0, FULL), FULL);
    rl_turnshare_deinit(&t);
}
END_TEST

/* 16 busy connections of one address beside one of another: 4 KiB each for the 16 (the
 * address's half over its 16), 64 KiB for the lone one (its address's half); a new address
 * gets what an address gets. */
START_TEST(test_split_by_address_then_connection)
{
    struct rl_turnshare t;
    uint8_t many[16], lone[16], other[16];

    rl_turnshare_init(&t);
    v4(many, 0x0a000001u);
    v4(lone, 0x0a000002u);
    v4(other, 0x0a000003u);
    for (int i = 0; i < 16; i++) {
        rl_turnshare_busy(&t, many);
    }
    rl_turnshare_busy(&t, lone);
    rl_turnshare_next(&t);
    ck_assert_uint_eq(rl_turnshare_clients(&t), 2);
    ck_assert_uint_eq(rl_turnshare_conns(&t), 17);
    ck_assert_uint_eq(rl_turnshare_share(&t, many, 0, FULL), RL_CONN_TURN_ALL / 32);
    ck_assert_uint_eq(rl_turnshare_share(&t, lone, 0, FULL), RL_CONN_TURN_ALL / 2);
    ck_assert_uint_eq(rl_turnshare_share(&t, other, 0, FULL), RL_CONN_TURN_ALL / 2);
    /* a smaller full share (a front's) bounds it */
    ck_assert_uint_eq(rl_turnshare_share(&t, lone, 0, 8192), 8192);
    /* the next turn only the lone one was busy: the 16 are back to a whole share */
    rl_turnshare_busy(&t, lone);
    rl_turnshare_next(&t);
    ck_assert_uint_eq(rl_turnshare_share(&t, many, 0, FULL), FULL);
    rl_turnshare_deinit(&t);
}
END_TEST

/* Many addresses (the set grows), then the least share; a turn past twice RL_CONN_TURN_ALL
 * gives everyone the least. */
START_TEST(test_many_addresses_and_the_bounds)
{
    struct rl_turnshare t;
    uint8_t a[16];

    rl_turnshare_init(&t);
    for (int round = 0; round < 3; round++) {
        for (uint32_t i = 0; i < 5000; i++) {
            v4(a, 0x0b000000u + i);
            rl_turnshare_busy(&t, a);
            if (i % 10 == 0) {
                rl_turnshare_busy(&t, a); /* two connections of every tenth */
            }
        }
        rl_turnshare_next(&t);
        ck_assert_uint_eq(rl_turnshare_clients(&t), 5000);
        ck_assert_uint_eq(rl_turnshare_conns(&t), 5500);
    }
    v4(a, 0x0b000000u + 7);
    ck_assert_uint_eq(rl_turnshare_share(&t, a, 0, FULL), RL_CONN_TURN_MIN);
    rl_turnshare_next(&t);
    rl_turnshare_next(&t); /* emptied, and the large set let go */
    ck_assert_uint_eq(rl_turnshare_clients(&t), 0);
    v4(a, 0x0c000001u);
    rl_turnshare_busy(&t, a);
    rl_turnshare_next(&t);
    ck_assert_uint_eq(rl_turnshare_clients(&t), 1);
    ck_assert_uint_eq(rl_turnshare_share(&t, a, 2u * RL_CONN_TURN_ALL - 1, FULL), FULL);
    ck_assert_uint_eq(rl_turnshare_share(&t, a, 2u * RL_CONN_TURN_ALL, FULL), RL_CONN_TURN_MIN);
    rl_turnshare_deinit(&t);
}
END_TEST

static Suite *
turnshare_suite(void)
{
    Suite *s = suite_create("turnshare");
    TCase *tc = tcase_create("turnshare");

    tcase_add_test(tc, test_nobody_busy_gets_full);
    tcase_add_test(tc, test_split_by_address_then_connection);
    tcase_add_test(tc, test_many_addresses_and_the_bounds);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(turnshare_suite)
