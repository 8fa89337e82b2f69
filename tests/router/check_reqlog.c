/*
 * check_reqlog: the router's request log: the line format the rebalance tool reads,
 * escaping, sampling, flushing at close, and reopening after rotation. Every loop is
 * closed and uv_loop_close() must return 0, so a leaked handle fails the test.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "harness.h"
#include "reqlog.h"

static char *
slurp(const char *path)
{
    static char buf[1 << 20];
    int n = rl_harness_read_file(path, buf, sizeof(buf));

    ck_assert_int_ge(n, 0);
    buf[n] = '\0';
    return buf;
}

static size_t
count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    size_t n = 0;
    int c;

    ck_assert_ptr_nonnull(f);
    while ((c = getc(f)) != EOF) {
        n += c == '\n';
    }
    fclose(f);
    return n;
}

START_TEST(test_format_and_escape)
{
    uv_loop_t loop;
    struct rl_reqlog *l;
    struct rl_reqlog_stats st;
    char path[4096];

    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "r.log"), 0);
    uv_loop_init(&loop);
    ck_assert_int_eq(rl_reqlog_create(&l, &loop, path, 1), 0);
    ck_assert(rl_reqlog_sample(l));
    rl_reqlog_add(l, 1763795412345ull, 1873, "b", 0, 0x28eab3f4db03304dull, "checkout", 8, "u42",
                  3);
    rl_reqlog_add(l, 5, 7, NULL, 2, 1, "a b", 3, "x%\n\xff", 4);
    rl_reqlog_add(l, 6, 8, "", 4, 2, "s", 1, "", 0);
    rl_reqlog_stats(l, &st);
    ck_assert_uint_eq(st.lines, 3);
    rl_reqlog_close(l);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    ck_assert_str_eq(slurp(path), "1763795412345 1873 b 0 28eab3f4db03304d checkout u42\n"
                                  "5 7 - 2 0000000000000001 a%20b x%25%0a%ff\n"
                                  "6 8 - 4 0000000000000002 s -\n");
}
END_TEST

START_TEST(test_sampling)
{
    uv_loop_t loop;
    struct rl_reqlog *l;
    struct rl_reqlog_stats st;
    char path[4096];
    int picked = 0;

    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "s.log"), 0);
    uv_loop_init(&loop);
    ck_assert_int_eq(rl_reqlog_create(&l, &loop, path, 10), 0);
    for (int i = 0; i < 1000; i++) {
        if (rl_reqlog_sample(l)) {
            picked++;
            rl_reqlog_add(l, (uint64_t)i, 1, "n", 0, 3, "s", 1, "u", 1);
        }
    }
    ck_assert_int_eq(picked, 100);
    rl_reqlog_stats(l, &st);
    ck_assert_uint_eq(st.skipped, 900);
    rl_reqlog_close(l);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    ck_assert_uint_eq(count_lines(path), 100);
}
END_TEST

static struct rl_reqlog *big_log;
static int big_ticks;
static struct rl_reqlog_stats big_stats;

static void
big_tick(uv_timer_t *t)
{
    /* More than two buffers' worth per tick: the log must drop, never grow. */
    for (int i = 0; i < 20000; i++) {
        rl_reqlog_add(big_log, 1, 1, "node", 0, 42, "service", 7, "some-user-name", 14);
    }
    if (++big_ticks == 5) {
        rl_reqlog_stats(big_log, &big_stats);
        uv_close((uv_handle_t *)t, NULL);
        rl_reqlog_close(big_log);
    }
}

START_TEST(test_many_lines_and_bounded)
{
    uv_loop_t loop;
    uv_timer_t t;
    char path[4096];

    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "big.log"), 0);
    uv_loop_init(&loop);
    ck_assert_int_eq(rl_reqlog_create(&big_log, &loop, path, 1), 0);
    uv_timer_init(&loop, &t);
    uv_timer_start(&t, big_tick, 1, 1);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    {
        size_t lines = count_lines(path);

        /* Every line counted as logged reached the file; the rest were counted as dropped. */
        ck_assert_uint_eq(lines, big_stats.lines);
        ck_assert_uint_eq(big_stats.lines + big_stats.dropped, 100000);
    }
}
END_TEST

static struct rl_reqlog *rot_log;
static char rot_path[4096], rot_old[4096];

static void
rot_step(uv_timer_t *t)
{
    static int step;

    switch (step++) {
    case 0:
        rl_reqlog_add(rot_log, 1, 1, "n", 0, 1, "s", 1, "before", 6);
        break;
    case 1:
        ck_assert_int_eq(rename(rot_path, rot_old), 0);
        rl_reqlog_reopen(rot_log);
        rl_reqlog_add(rot_log, 2, 1, "n", 0, 1, "s", 1, "after", 5);
        break;
    default:
        uv_close((uv_handle_t *)t, NULL);
        rl_reqlog_close(rot_log);
        break;
    }
}

START_TEST(test_reopen_after_rotation)
{
    uv_loop_t loop;
    uv_timer_t t;
    char *s;

    ck_assert_int_eq(rl_harness_tmppath(rot_path, sizeof(rot_path), "rot.log"), 0);
    ck_assert_int_eq(rl_harness_tmppath(rot_old, sizeof(rot_old), "rot.log.1"), 0);
    uv_loop_init(&loop);
    ck_assert_int_eq(rl_reqlog_create(&rot_log, &loop, rot_path, 1), 0);
    uv_timer_init(&loop, &t);
    uv_timer_start(&t, rot_step, 10, 1100);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    s = slurp(rot_old);
    ck_assert_ptr_nonnull(strstr(s, "before"));
    ck_assert_ptr_null(strstr(s, "after"));
    s = slurp(rot_path);
    ck_assert_ptr_nonnull(strstr(s, "after"));
    ck_assert_ptr_null(strstr(s, "before"));
}
END_TEST

START_TEST(test_unwritable_path)
{
    uv_loop_t loop;
    struct rl_reqlog *l = NULL;

    uv_loop_init(&loop);
    ck_assert_int_lt(rl_reqlog_create(&l, &loop, "/nonexistent-dir/x/requests.log", 1), 0);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

static Suite *
reqlog_suite(void)
{
    Suite *s = suite_create("reqlog");
    TCase *tc = tcase_create("reqlog");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_format_and_escape);
    tcase_add_test(tc, test_sampling);
    tcase_add_test(tc, test_many_lines_and_bounded);
    tcase_add_test(tc, test_reopen_after_rotation);
    tcase_add_test(tc, test_unwritable_path);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(reqlog_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
