/*
 * check_resp_in: the RESP front's input buffer and its held count (router/resp_in.h), as
 * properties over random piece sizes: every change of the buffer is told to the hold
 * function once, from the count as it stands (a stale `from` is the double count of the
 * bug it replaces: growth counted twice, the worker's budget leaking for good); the count
 * equals the buffer's capacity after every call; a refused growth changes nothing; and the
 * count returns to zero at release. Also a stream of real commands cut at random: every
 * command read back, the count zero at the end.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resp.h"
#include "resp_in.h"
#include "rltest.h"

/* The front's side: the count, a budget (growth past it refused), the calls seen. */
struct counter {
    size_t count;
    size_t budget;
    unsigned calls, refused;
    unsigned stale; /* calls whose old was not the count: each one a double count */
};

static int
count_hold(void *arg, size_t from, size_t to, bool spare)
{
    struct counter *k = arg;

    (void)spare; /* the count is the same either way */
    k->calls++;
    if (from != k->count) {
        k->stale++;
    }
    if (to > from && to > k->budget) {
        k->refused++;
        return -1;
    }
    k->count = k->count - from + to;
    return 0;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t
rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A piece size as the network gives them: mostly small, sometimes up to 70,000 bytes. */
static size_t
piece(void)
{
    switch (rnd() % 4) {
    case 0:
        return 1 + rnd() % 16;
    case 1:
        return 1 + rnd() % 1500;
    case 2:
        return 1 + rnd() % 16384;
    default:
        return 1 + rnd() % 70000;
    }
}

static void
check_settled(const struct resp_in *in, const struct counter *k)
{
    ck_assert_uint_eq(k->stale, 0);
    ck_assert_uint_eq(in->held, in->buf.cap);
    ck_assert_uint_eq(k->count, in->buf.cap);
    ck_assert(in->buf.cap <= k->budget || in->buf.cap == 0);
}

START_TEST(test_held_follows_the_buffer)
{
    static char data[70000];
    unsigned refused = 0, grown = 0;

    memset(data, 'x', sizeof(data));
    for (int round = 0; round < 3000; round++) {
        struct counter k = {0, 0, 0, 0, 0};
        struct resp_in in;
        int steps = 1 + (int)(rnd() % 60);

        /* no budget to speak of, or one that refuses now and then */
        k.budget = rnd() % 3 == 0 ? (size_t)-1 : 8192 + rnd() % (512 * 1024);
        resp_in_init(&in, count_hold, &k);
        for (int s = 0; s < steps; s++) {
            if (rnd() % 3 != 0) {
                size_t n = piece(), before = resp_in_unread(&in), cap = in.buf.cap;
                unsigned calls = k.calls;
                int rc = resp_in_add(&in, data, n);

                if (rc == 0) {
                    ck_assert_uint_eq(resp_in_unread(&in), before + n);
                    grown += in.buf.cap != cap;
                } else {
                    /* refused: nothing changed, and the front was asked, not told */
                    ck_assert_int_eq(rc, -1);
                    ck_assert_uint_eq(resp_in_unread(&in), before);
                    ck_assert_uint_eq(in.buf.cap, cap);
                    ck_assert(k.calls > calls);
                    refused++;
                }
            } else {
                size_t unread = resp_in_unread(&in);

                resp_in_consume(&in, unread == 0 ? 0 : (size_t)(rnd() % (unread + 1)));
            }
            check_settled(&in, &k);
        }
        resp_in_release(&in);
        check_settled(&in, &k);
        ck_assert_uint_eq(k.count, 0);
    }
    /* both paths were walked */
    ck_assert(refused > 100);
    ck_assert(grown > 1000);
}
END_TEST

START_TEST(test_growth_within_the_budget)
{
    static char data[70000];
    struct counter k = {0, 100000, 0, 0, 0};
    struct resp_in in;

    resp_in_init(&in, count_hold, &k);
    /* doubling would ask 131,072: refused, so exactly what is needed */
    ck_assert_int_eq(resp_in_add(&in, data, 70000), 0);
    ck_assert_uint_eq(in.buf.cap, 70000);
    ck_assert_uint_eq(k.count, 70000);
    /* past the budget even exactly: refused, nothing changed */
    ck_assert_int_eq(resp_in_add(&in, data, 40000), -1);
    ck_assert_uint_eq(k.count, 70000);
    ck_assert_uint_eq(resp_in_unread(&in), 70000);
    /* consumed in part: the rest kept, the buffer kept; in full: everything given back */
    resp_in_consume(&in, 60000);
    ck_assert_uint_eq(resp_in_unread(&in), 10000);
    ck_assert_uint_eq(k.count, 70000);
    ck_assert_int_eq(resp_in_add(&in, data, 30000), 0); /* fits after the move */
    ck_assert_uint_eq(k.count, 70000);
    resp_in_consume(&in, 40000);
    ck_assert_uint_eq(k.count, 0);
    ck_assert_uint_eq(k.stale, 0);
    resp_in_release(&in);
    ck_assert_uint_eq(k.count, 0);
}
END_TEST

/* Commands written one after the other, read back through resp_in cut at random. */
START_TEST(test_commands_cut_at_random)
{
    static struct rl_resp_cmd cmd;
    struct rl_buf stream;
    size_t ncmds = 2000, got = 0, off = 0;
    char arg[40000];

    memset(arg, 'a', sizeof(arg));
    rl_buf_init(&stream);
    for (size_t i = 0; i < ncmds; i++) {
        char num[24];
        size_t alen = i % 50 == 0 ? 30000 + i : i % 200;

        snprintf(num, sizeof(num), "%zu", i);
        ck_assert_int_eq(rl_resp_put_array(&stream, 3), 0);
        ck_assert_int_eq(rl_resp_put_bulk(&stream, "ECHO", 4), 0);
        ck_assert_int_eq(rl_resp_put_bulk(&stream, num, strlen(num)), 0);
        ck_assert_int_eq(rl_resp_put_bulk(&stream, arg, alen), 0);
    }
    for (int round = 0; round < 5; round++) {
        struct counter k = {0, (size_t)-1, 0, 0, 0};
        struct resp_in in;

        resp_in_init(&in, count_hold, &k);
        got = 0;
        off = 0;
        while (off < stream.len) {
            size_t n = piece(), used = 0, all = 0;

            n = n < stream.len - off ? n : stream.len - off;
            ck_assert_int_eq(resp_in_add(&in, stream.data + off, n), 0);
            off += n;
            for (;;) {
                const char *err = NULL;
                int rc = rl_resp_parse(resp_in_data(&in) + all, resp_in_unread(&in) - all, &cmd,
                                       &used, &err);

                if (rc != RL_RESP_CMD) {
                    ck_assert_int_eq(rc, RL_RESP_MORE);
                    break;
                }
                ck_assert_uint_eq(cmd.argc, 3);
                ck_assert_uint_eq((size_t)strtoul(cmd.argv[1].ptr, NULL, 10), got);
                got++;
                all += used;
            }
            resp_in_consume(&in, all);
            check_settled(&in, &k);
        }
        ck_assert_uint_eq(got, ncmds);
        ck_assert_uint_eq(k.count, 0); /* everything read: nothing held */
        resp_in_release(&in);
        ck_assert_uint_eq(k.count, 0);
    }
    rl_buf_deinit(&stream);
}
END_TEST

static Suite *
resp_in_suite(void)
{
    Suite *s = suite_create("resp_in");
    TCase *tc = tcase_create("held");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_held_follows_the_buffer);
    tcase_add_test(tc, test_growth_within_the_budget);
    tcase_add_test(tc, test_commands_cut_at_random);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(resp_in_suite)
