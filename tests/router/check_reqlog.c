/*
 * check_reqlog: the router's request log: the line format the rebalance tool reads
 * (reqline.h: every byte value escaped and parsed back, the cuts, each malformed-line
 * reason), escaping, sampling, flushing at close, reopening after rotation, and a log
 * written by the real writer read back whole by the rebalance scanner; the rotation it
 * shares with the node's events log (logfile.h). Every loop is
 * closed and uv_loop_close() must return 0, so a leaked handle fails the test.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <uv.h>

#include "harness.h"
#include "logfile.h"
#include "logscan.h"
#include "reqline.h"
#include "reqlog.h"
#include "rltest.h"
#include "shardmap.h"

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

static struct rl_reqlog *size_log;
static int size_ticks;
static struct rl_reqlog_stats size_stats;

static void
size_tick(uv_timer_t *t)
{
    /* 2,000 lines of about 60 bytes a tick, one write a tick: a file of 100 KB fills in
     * one write, so each tick past the first rotates. */
    for (int i = 0; i < 2000; i++) {
        rl_reqlog_add(size_log, 1, 1, "node", 0, 42, "service", 7, "some-user-name", 14);
    }
    if (++size_ticks == 6) {
        rl_reqlog_stats(size_log, &size_stats);
        uv_close((uv_handle_t *)t, NULL);
        rl_reqlog_close(size_log);
    }
}

/* request_log_max_size: the file is renamed PATH.1 (PATH.1 to PATH.2) once it reaches the
 * size, and only `keep` of them stay. */
START_TEST(test_rotation_by_size)
{
    uv_loop_t loop;
    uv_timer_t t;
    char path[4096], p1[4200], p2[4200], p3[4200];
    struct stat st;

    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "size.log"), 0);
    snprintf(p1, sizeof(p1), "%s.1", path);
    snprintf(p2, sizeof(p2), "%s.2", path);
    snprintf(p3, sizeof(p3), "%s.3", path);
    uv_loop_init(&loop);
    ck_assert_int_eq(rl_reqlog_create(&size_log, &loop, path, 1), 0);
    rl_reqlog_set_rotation(size_log, 100000, 2);
    uv_timer_init(&loop, &t);
    uv_timer_start(&t, size_tick, 1, 1100);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    ck_assert_uint_ge(size_stats.rotations, 3);
    ck_assert_int_eq(stat(p1, &st), 0);
    ck_assert_int_eq(stat(p2, &st), 0);
    ck_assert_int_ne(stat(p3, &st), 0);
    /* A rotated file passed the size by at most the write that reached it. */
    ck_assert_int_eq(stat(p1, &st), 0);
    ck_assert_int_ge(st.st_size, 100000);
    ck_assert_int_le(st.st_size, 100000 + 2000 * 64);
    ck_assert_uint_eq(count_lines(p1), 2000);
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
    /* Both files were created without read access for others (they hold user ids). */
    struct stat st;
    ck_assert_int_eq(stat(rot_path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0007, 0);
    ck_assert_int_eq(stat(rot_old, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0007, 0);
}
END_TEST

/* logfile.h, shared with the node's events log: files created 0640 and close-on-exec,
 * opened with the size they have; a shift moves PATH to PATH.1 ... keeping `keep`, the
 * oldest overwritten; keep 0 removes PATH. */
START_TEST(test_logfile_shift)
{
    char path[4096], name[4200];
    static char buf[64];
    struct stat st;
    uint64_t size = 99;
    mode_t um = umask(022);
    int fd;

    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "shift.log"), 0);
    for (int gen = 0; gen < 4; gen++) {
        fd = rl_logfile_open(path, &size);
        ck_assert_int_ge(fd, 0);
        ck_assert_uint_eq(size, 0);
        ck_assert_int_eq(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
        snprintf(buf, sizeof(buf), "gen%d\n", gen);
        ck_assert_int_eq(rl_logfile_write(fd, buf, strlen(buf)), 0);
        close(fd);
        fd = rl_logfile_open(path, &size);
        ck_assert_uint_eq(size, 5);
        close(fd);
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_uint_eq(st.st_mode & 0777, 0640);
        ck_assert_int_eq(rl_logfile_shift(path, 2), 0);
        ck_assert_int_ne(stat(path, &st), 0);
    }
    /* gen3 in PATH.1, gen2 in PATH.2, gen0 and gen1 gone */
    rl_logfile_name(path, 1, name, sizeof(name));
    ck_assert_int_gt(rl_harness_read_file(name, buf, sizeof(buf)), 0);
    ck_assert_str_eq(buf, "gen3\n");
    rl_logfile_name(path, 2, name, sizeof(name));
    ck_assert_int_gt(rl_harness_read_file(name, buf, sizeof(buf)), 0);
    ck_assert_str_eq(buf, "gen2\n");
    rl_logfile_name(path, 3, name, sizeof(name));
    ck_assert_int_ne(stat(name, &st), 0);
    /* keep 0 */
    fd = rl_logfile_open(path, NULL);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(rl_logfile_shift(path, 0), 0);
    ck_assert_int_ne(stat(path, &st), 0);
    ck_assert_int_eq(rl_logfile_shift(path, 0), 0);
    /* nothing to move: the error of PATH's own rename */
    ck_assert_int_eq(rl_logfile_shift(path, 2), -ENOENT);
    ck_assert_int_lt(rl_logfile_open("/nonexistent-dir/x.log", NULL), 0);
    umask(um);
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

START_TEST(test_every_byte_round_trips)
{
    char svc[RL_REQLINE_SERVICE_MAX], user[RL_REQLINE_USER_MAX], line[RL_REQLINE_MAX];
    char un[RL_REQLINE_USER_MAX];
    struct rl_reqline l;
    size_t n;

    for (size_t i = 0; i < sizeof(user); i++) {
        user[i] = (char)i;
    }
    for (size_t i = 0; i < sizeof(svc); i++) {
        svc[i] = (char)(255 - i);
    }
    n = rl_reqline_format(line, 1763795412345ull, 77, "node-b", 5, 0x0123456789abcdefull, svc,
                          sizeof(svc), user, sizeof(user));
    ck_assert_uint_le(n, RL_REQLINE_MAX);
    ck_assert_int_eq(line[n - 1], '\n');
    ck_assert_ptr_null(memchr(line, '\n', n - 1));
    ck_assert_int_eq(rl_reqline_parse(line, n - 1, 0, &l), 0);
    ck_assert_uint_eq(l.ts_ms, 1763795412345ull);
    ck_assert_uint_eq(l.shard, 77);
    ck_assert_uint_eq(l.code, 5);
    ck_assert_uint_eq(l.key_hash, 0x0123456789abcdefull);
    ck_assert_uint_eq(l.nlen, 6);
    ck_assert(memcmp(l.node, "node-b", 6) == 0);
    ck_assert_int_eq(rl_reqline_unescape(l.user, l.ulen, un), (int)sizeof(user));
    ck_assert(memcmp(un, user, sizeof(user)) == 0);
    ck_assert_int_eq(rl_reqline_unescape(l.service, l.slen, un), (int)sizeof(svc));
    ck_assert(memcmp(un, svc, sizeof(svc)) == 0);
}
END_TEST

START_TEST(test_cuts_and_empty_fields)
{
    char big[400], line[RL_REQLINE_MAX], un[400];
    struct rl_reqline l;
    size_t n;

    memset(big, 'a', sizeof(big));
    n = rl_reqline_format(line, 1, 2, NULL, 0, 2, big, sizeof(big), big, sizeof(big));
    ck_assert_int_eq(rl_reqline_parse(line, n - 1, 0, &l), 0);
    ck_assert_uint_eq(l.slen, RL_REQLINE_SERVICE_MAX);
    ck_assert_uint_eq(l.ulen, RL_REQLINE_USER_MAX);
    ck_assert_uint_eq(l.nlen, 1);
    ck_assert_int_eq(l.node[0], '-');
    n = rl_reqline_format(line, 1, 2, "", 0, 2, "s", 1, "", 0);
    line[n] = '\0';
    ck_assert_str_eq(line, "1 2 - 0 0000000000000002 s -\n");
    ck_assert_int_eq(rl_reqline_parse(line, n - 1, 0, &l), 0);
    ck_assert_int_eq(rl_reqline_unescape(l.user, l.ulen, un), 0);
    /* A user that is the one byte "-" is not the empty user (found by fuzz_reqline). */
    n = rl_reqline_format(line, 1, 2, "", 0, 2, "s", 1, "-", 1);
    line[n] = '\0';
    ck_assert_str_eq(line, "1 2 - 0 0000000000000002 s %2d\n");
    ck_assert_int_eq(rl_reqline_parse(line, n - 1, 0, &l), 0);
    ck_assert_int_eq(rl_reqline_unescape(l.user, l.ulen, un), 1);
    ck_assert_int_eq(un[0], '-');
}
END_TEST

/* The eighth field `cached`: written, parsed back, and read but not counted as load. */
START_TEST(test_cached_field)
{
    char line[RL_REQLINE_MAX], text[256];
    struct rl_reqline l;
    struct rl_logscan *sc = NULL;
    const struct rl_logscan_result *res;
    uint64_t h = rl_shardmap_key_hash("s", 1, "u", 1);
    uint32_t shard = (uint32_t)(h % 16);
    size_t n;

    n = rl_reqline_format_ex(line, 5, shard, "a", 1, h, "s", 1, "u", 1, true);
    line[n] = '\0';
    ck_assert_ptr_nonnull(strstr(line, " s u cached\n"));
    ck_assert_int_eq(rl_reqline_parse(line, n - 1, 16, &l), 0);
    ck_assert(l.cached);
    ck_assert_uint_eq(l.ulen, 1);
    ck_assert_int_eq(l.user[0], 'u');
    n = rl_reqline_format_ex(line, 5, shard, "a", 1, h, "s", 1, "u", 1, false);
    ck_assert_int_eq(rl_reqline_parse(line, n - 1, 16, &l), 0);
    ck_assert(!l.cached);
    /* Another eighth word, or a ninth field, is malformed. */
    ck_assert_int_eq(rl_reqline_parse("5 1 a 1 0000000000000001 s u cache", 34, 0, &l),
                     1 + RL_REQLINE_FIELDS);
    ck_assert_int_eq(rl_reqline_parse("5 1 a 1 0000000000000001 s u cached x", 37, 0, &l),
                     1 + RL_REQLINE_FIELDS);
    /* The scanner: two node-answered lines are load, three cached ones are not. */
    ck_assert_int_eq(rl_logscan_create(&sc, 16), 0);
    ck_assert_int_eq(rl_logscan_begin(sc, "t"), 0);
    for (int i = 0; i < 5; i++) {
        n = rl_reqline_format_ex(text, 5, shard, "a", 1, h, "s", 1, "u", 1, i >= 2);
        ck_assert_int_eq(rl_logscan_feed(sc, text, n), 0);
    }
    ck_assert_int_eq(rl_logscan_end(sc), 0);
    res = rl_logscan_result(sc);
    ck_assert_uint_eq(res->lines, 5);
    ck_assert_uint_eq(res->requests, 2);
    ck_assert_uint_eq(res->cached, 3);
    ck_assert_uint_eq(res->malformed, 0);
    ck_assert_uint_eq(res->load[shard], 2);
    rl_logscan_destroy(sc);
}
END_TEST

/* The eighth fields `adjust` and `release`: written, parsed back, and counted as load by
 * the scanner (the node did the work); a near miss is malformed. */
START_TEST(test_adjust_release_fields)
{
    char line[RL_REQLINE_MAX];
    struct rl_reqline l;
    struct rl_logscan *sc = NULL;
    const struct rl_logscan_result *res;
    uint64_t h = rl_shardmap_key_hash("s", 1, "u", 1);
    uint32_t shard = (uint32_t)(h % 16);
    static const enum rl_reqline_tag tags[] = {RL_REQLINE_TAG_NONE, RL_REQLINE_TAG_ADJUST,
                                               RL_REQLINE_TAG_RELEASE, RL_REQLINE_TAG_CACHED};
    size_t n;

    n = rl_reqline_format_tag(line, 5, shard, "a", 0, h, "s", 1, "u", 1, RL_REQLINE_TAG_ADJUST);
    line[n] = '\0';
    ck_assert_ptr_nonnull(strstr(line, " s u adjust\n"));
    ck_assert_int_eq(rl_reqline_parse(line, n - 1, 16, &l), 0);
    ck_assert_int_eq(l.tag, RL_REQLINE_TAG_ADJUST);
    ck_assert(!l.cached);
    ck_assert_uint_eq(l.ulen, 1);
    n = rl_reqline_format_tag(line, 5, shard, "a", 2, h, "s", 1, "u", 1, RL_REQLINE_TAG_RELEASE);
    line[n] = '\0';
    ck_assert_ptr_nonnull(strstr(line, " 2 "));
    ck_assert_ptr_nonnull(strstr(line, " s u release\n"));
    ck_assert_int_eq(rl_reqline_parse(line, n - 1, 16, &l), 0);
    ck_assert_int_eq(l.tag, RL_REQLINE_TAG_RELEASE);
    ck_assert_uint_eq(l.code, 2);
    n = rl_reqline_format_tag(line, 5, shard, "a", 0, h, "s", 1, "u", 1, RL_REQLINE_TAG_CACHED);
    ck_assert_int_eq(rl_reqline_parse(line, n - 1, 16, &l), 0);
    ck_assert(l.cached);
    ck_assert_int_eq(l.tag, RL_REQLINE_TAG_CACHED);
    ck_assert_int_eq(rl_reqline_parse("5 1 a 1 0000000000000001 s u adjusted", 37, 0, &l),
                     1 + RL_REQLINE_FIELDS);
    ck_assert_int_eq(rl_reqline_parse("5 1 a 1 0000000000000001 s u releas", 35, 0, &l),
                     1 + RL_REQLINE_FIELDS);
    ck_assert_int_eq(rl_reqline_parse("5 1 a 1 0000000000000001 s u adjust cached", 42, 0, &l),
                     1 + RL_REQLINE_FIELDS);
    /* The scanner: a CHECK, an ADJUST and a RELEASE line are load; a cached one is not. */
    ck_assert_int_eq(rl_logscan_create(&sc, 16), 0);
    ck_assert_int_eq(rl_logscan_begin(sc, "t"), 0);
    for (int i = 0; i < 4; i++) {
        n = rl_reqline_format_tag(line, 5, shard, "a", 0, h, "s", 1, "u", 1, tags[i]);
        ck_assert_int_eq(rl_logscan_feed(sc, line, n), 0);
    }
    ck_assert_int_eq(rl_logscan_end(sc), 0);
    res = rl_logscan_result(sc);
    ck_assert_uint_eq(res->lines, 4);
    ck_assert_uint_eq(res->requests, 3);
    ck_assert_uint_eq(res->cached, 1);
    ck_assert_uint_eq(res->malformed, 0);
    ck_assert_uint_eq(res->load[shard], 3);
    rl_logscan_destroy(sc);
}
END_TEST

START_TEST(test_malformed_reasons)
{
    static const struct {
        const char *line;
        uint32_t nshards;
        enum rl_reqline_reason why;
    } cases[] = {
        {"1 2 n 0 0000000000000002 s", 0, RL_REQLINE_FIELDS},
        {"1 2 n 0 0000000000000002 s u x", 0, RL_REQLINE_FIELDS},
        {"1  2 n 0 0000000000000002 s u", 0, RL_REQLINE_FIELDS},
        {"x 2 n 0 0000000000000002 s u", 0, RL_REQLINE_TIMESTAMP},
        {"1 2x n 0 0000000000000002 s u", 0, RL_REQLINE_SHARD},
        {"1 9 n 0 0000000000000009 s u", 8, RL_REQLINE_SHARD_RANGE},
        {"1 3 n 0 0000000000000002 s u", 8, RL_REQLINE_SHARD_MISMATCH},
        {"1 2 n 0x 0000000000000002 s u", 0, RL_REQLINE_CODE},
        {"1 2 n\x01 0 0000000000000002 s u", 0, RL_REQLINE_NODE},
        {"1 2 n 0 00000000000000g2 s u", 0, RL_REQLINE_KEYHASH},
        {"1 2 n 0 000000000000002 s u", 0, RL_REQLINE_KEYHASH},
        {"1 2 n 0 0000000000000002 s\x80 u", 0, RL_REQLINE_NAME},
        {"1 2 n 0 0000000000000002 s u\x7f", 0, RL_REQLINE_NAME},
    };
    struct rl_reqline l;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = rl_reqline_parse(cases[i].line, strlen(cases[i].line), cases[i].nshards, &l);

        ck_assert_msg(rc == (int)cases[i].why + 1, "\"%s\": %d, want %s", cases[i].line, rc,
                      rl_reqline_reason_text(cases[i].why));
    }
    ck_assert_int_eq(rl_reqline_parse("1 2 n 0 0000000000000002 s u\r", 29, 8, &l), 0);
    ck_assert_str_eq(rl_reqline_reason_text(RL_REQLINE_REASON_COUNT), "unknown");
}
END_TEST

/* The router's writer (file, buffers, escaping) read back by the rebalance scanner. */
START_TEST(test_writer_read_by_scanner)
{
    enum { N = 20000, K = 500, SHARDS = 4096 };
    char path[PATH_MAX], user[32];
    uv_loop_t loop;
    struct rl_reqlog *w = NULL;
    struct rl_logscan *s = NULL;
    const struct rl_logscan_result *r;
    struct rl_logscan_key *keys = NULL;
    size_t nkeys;

    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "scan.log"), 0);
    uv_loop_init(&loop);
    ck_assert_int_eq(rl_reqlog_create(&w, &loop, path, 1), 0);
    for (int i = 0; i < N; i++) {
        int k = i % K;
        int len = snprintf(user, sizeof(user), "user %d\n%%", k); /* space, newline, % */
        uint64_t h = rl_shardmap_key_hash("svc", 3, user, (size_t)len);

        ck_assert(rl_reqlog_sample(w));
        rl_reqlog_add(w, 1763795412345ull + (uint64_t)i, rl_shardmap_shard(h, SHARDS),
                      k % 2 ? "a" : NULL, 0, h, "svc", 3, user, (size_t)len);
    }
    rl_reqlog_close(w);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    ck_assert_uint_eq(count_lines(path), N);
    ck_assert_int_eq(rl_logscan_create(&s, SHARDS), 0);
    ck_assert_int_eq(rl_logscan_file(s, path), 0);
    r = rl_logscan_result(s);
    ck_assert_uint_eq(r->lines, N);
    ck_assert_uint_eq(r->requests, N);
    ck_assert_uint_eq(r->malformed, 0);
    ck_assert_uint_eq(r->distinct, K);
    ck_assert_uint_eq(r->unverified, 0);
    ck_assert_int_eq(rl_logscan_keys_above(s, 0, &keys, &nkeys), 0);
    ck_assert_uint_eq(nkeys, K);
    for (size_t i = 0; i < nkeys; i++) {
        ck_assert(keys[i].verified);
        ck_assert_uint_eq(keys[i].count, N / K);
    }
    free(keys);
    rl_logscan_destroy(s);
}
END_TEST

static Suite *
reqlog_suite(void)
{
    Suite *s = suite_create("reqlog");
    TCase *tc = tcase_create("reqlog");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_format_and_escape);
    tcase_add_test(tc, test_rotation_by_size);
    tcase_add_test(tc, test_sampling);
    tcase_add_test(tc, test_many_lines_and_bounded);
    tcase_add_test(tc, test_reopen_after_rotation);
    tcase_add_test(tc, test_unwritable_path);
    tcase_add_test(tc, test_logfile_shift);
    tcase_add_test(tc, test_every_byte_round_trips);
    tcase_add_test(tc, test_cuts_and_empty_fields);
    tcase_add_test(tc, test_malformed_reasons);
    tcase_add_test(tc, test_cached_field);
    tcase_add_test(tc, test_adjust_release_fields);
    tcase_add_test(tc, test_writer_read_by_scanner);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(reqlog_suite)
