/*
 * check_throttle: node/throttle.c alone, on made-up times: an episode opens at a refusal,
 * counts the refusals, closes "allowed" at the next allowance or "idle" once its retry_after
 * (plus the grace) has passed; the open table and the ring hold at most their capacity (the
 * rest is dropped, or overwritten oldest first); queries filter by service and since_ms and
 * return the most refused first, at most top. The events log: one JSON line per closed
 * episode, created 0640, at most events_log_rate lines a second (the rest counted as dropped
 * and summed in one summary line), rotated before it would pass events_log_max_size with
 * events_log_keep old files, and reopened by its path (SIGHUP).
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "rltest.h"
#include "throttle.h"

static void
limited(struct rl_throttle *t, const char *svc, const char *ep, const char *user, uint64_t now,
        uint64_t retry)
{
    rl_throttle_limited(t, svc, strlen(svc), ep, ep != NULL ? strlen(ep) : 0, user, strlen(user),
                        now, retry);
}

static void
allowed(struct rl_throttle *t, const char *svc, const char *ep, const char *user, uint64_t now)
{
    rl_throttle_allowed(t, svc, strlen(svc), ep, ep != NULL ? strlen(ep) : 0, user, strlen(user),
                        now);
}

static bool
str_is(const struct rl_wire_str *s, const char *want)
{
    if (want == NULL) {
        return s->ptr == NULL;
    }
    return s->ptr != NULL && s->len == strlen(want) && memcmp(s->ptr, want, s->len) == 0;
}

START_TEST(test_create_bounds)
{
    struct rl_throttle *t = (struct rl_throttle *)1;

    ck_assert_int_eq(rl_throttle_create(&t, 0, "n", NULL), 0);
    ck_assert_ptr_null(t);
    ck_assert(!rl_throttle_any_open(t));
    /* Off: every call is a no-op. */
    limited(t, "s", NULL, "u", 1, 1);
    rl_throttle_tick(t, 5);
    ck_assert_int_eq(rl_throttle_create(&t, RL_THROTTLE_MAX + 1, "n", NULL), -EINVAL);
    ck_assert_int_eq(rl_throttle_create(&t, RL_THROTTLE_MAX, "n", NULL), 0);
    ck_assert_ptr_nonnull(t);
    rl_throttle_destroy(t);
}
END_TEST

START_TEST(test_open_count_allowed_close)
{
    struct rl_throttle *t;
    struct rl_wire_episode out[RL_WIRE_TOP_MAX];
    struct rl_throttle_stats st;
    size_t n;

    ck_assert_int_eq(rl_throttle_create(&t, 8, "node-a", NULL), 0);
    ck_assert(!rl_throttle_any_open(t));
    allowed(t, "web", NULL, "bob", 10); /* nothing open: nothing happens */
    limited(t, "web", NULL, "bob", 1000, 500);
    limited(t, "web", NULL, "bob", 1100, 400);
    limited(t, "web", "", "bob", 1200, 300); /* "" is the service as a whole, like nil */
    ck_assert(rl_throttle_any_open(t));
    n = rl_throttle_query(t, NULL, 0, NULL, 1300, 20, out);
    ck_assert_uint_eq(n, 1);
    ck_assert(str_is(&out[0].service, "web"));
    ck_assert(str_is(&out[0].endpoint, NULL));
    ck_assert(str_is(&out[0].user, "bob"));
    ck_assert(str_is(&out[0].node, "node-a"));
    ck_assert_uint_eq(out[0].start_ms, 1000);
    ck_assert_uint_eq(out[0].end_ms, 0);
    ck_assert_uint_eq(out[0].refused, 3);
    ck_assert_uint_eq(out[0].ended, RL_WIRE_ENDED_OPEN);
    /* Another user's or endpoint's allowance closes nothing. */
    allowed(t, "web", NULL, "alice", 1400);
    allowed(t, "web", "/x", "bob", 1400);
    ck_assert_uint_eq(t->nopen, 1);
    allowed(t, "web", NULL, "bob", 1500);
    ck_assert(!rl_throttle_any_open(t));
    n = rl_throttle_query(t, NULL, 0, NULL, 1600, 20, out);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(out[0].start_ms, 1000);
    ck_assert_uint_eq(out[0].end_ms, 1500);
    ck_assert_uint_eq(out[0].refused, 3);
    ck_assert_uint_eq(out[0].ended, RL_WIRE_ENDED_ALLOWED);
    /* A new refusal opens a new episode. */
    limited(t, "web", NULL, "bob", 2000, 100);
    n = rl_throttle_query(t, NULL, 0, NULL, 2000, 20, out);
    ck_assert_uint_eq(n, 2);
    rl_throttle_stats(t, &st);
    ck_assert_uint_eq(st.open, 1);
    ck_assert_uint_eq(st.recorded, 2);
    ck_assert_uint_eq(st.closed, 1);
    ck_assert_uint_eq(st.dropped, 0);
    rl_throttle_destroy(t);
}
END_TEST

START_TEST(test_endpoints_are_distinct)
{
    struct rl_throttle *t;
    struct rl_wire_episode out[RL_WIRE_TOP_MAX];

    ck_assert_int_eq(rl_throttle_create(&t, 8, "n", NULL), 0);
    limited(t, "web", "/a", "bob", 10, 100);
    limited(t, "web", "/b", "bob", 10, 100);
    limited(t, "web", "/b", "bob", 11, 100);
    limited(t, "api", NULL, "bob", 12, 100);
    ck_assert_uint_eq(t->nopen, 3);
    ck_assert_uint_eq(rl_throttle_query(t, NULL, 0, NULL, 20, 20, out), 3);
    ck_assert(str_is(&out[0].endpoint, "/b"));
    ck_assert_uint_eq(out[0].refused, 2);
    allowed(t, "web", "/b", "bob", 30);
    ck_assert_uint_eq(t->nopen, 2);
    rl_throttle_destroy(t);
}
END_TEST

START_TEST(test_open_table_bound)
{
    struct rl_throttle *t;
    struct rl_throttle_stats st;
    char user[32];

    ck_assert_int_eq(rl_throttle_create(&t, 3, "n", NULL), 0);
    for (int i = 0; i < 10; i++) {
        snprintf(user, sizeof(user), "u%d", i);
        limited(t, "s", NULL, user, 100 + (uint64_t)i, 1000);
    }
    /* A recorded key still counts; an unrecorded one is dropped again. */
    limited(t, "s", NULL, "u0", 200, 1000);
    limited(t, "s", NULL, "u9", 200, 1000);
    rl_throttle_stats(t, &st);
    ck_assert_uint_eq(st.open, 3);
    ck_assert_uint_eq(st.recorded, 3);
    ck_assert_uint_eq(st.dropped, 8);
    /* Closing one frees room for the next key. */
    allowed(t, "s", NULL, "u1", 300);
    limited(t, "s", NULL, "u9", 301, 1000);
    rl_throttle_stats(t, &st);
    ck_assert_uint_eq(st.open, 3);
    ck_assert_uint_eq(st.recorded, 4);
    rl_throttle_destroy(t);
}
END_TEST

START_TEST(test_ring_wraps)
{
    struct rl_throttle *t;
    struct rl_wire_episode out[RL_WIRE_TOP_MAX];
    struct rl_throttle_stats st;
    char user[32];
    size_t n;

    ck_assert_int_eq(rl_throttle_create(&t, 4, "n", NULL), 0);
    for (int i = 0; i < 10; i++) {
        snprintf(user, sizeof(user), "u%d", i);
        /* u_i is refused i + 1 times, then allowed */
        for (int k = 0; k <= i; k++) {
            limited(t, "s", NULL, user, 1000 * (uint64_t)i + (uint64_t)k, 10);
        }
        allowed(t, "s", NULL, user, 1000 * (uint64_t)i + 500);
    }
    rl_throttle_stats(t, &st);
    ck_assert_uint_eq(st.closed, 10);
    ck_assert_uint_eq(st.open, 0);
    n = rl_throttle_query(t, NULL, 0, NULL, 20000, 100, out);
    ck_assert_uint_eq(n, 4);
    /* The last four, most refused first: u9 (10), u8, u7, u6. */
    for (size_t i = 0; i < n; i++) {
        snprintf(user, sizeof(user), "u%zu", 9 - i);
        ck_assert(str_is(&out[i].user, user));
        ck_assert_uint_eq(out[i].refused, 10 - i);
        ck_assert_uint_eq(out[i].ended, RL_WIRE_ENDED_ALLOWED);
        ck_assert_uint_eq(out[i].end_ms, 1000 * (9 - i) + 500);
    }
    rl_throttle_destroy(t);
}
END_TEST

START_TEST(test_idle_close)
{
    struct rl_throttle *t;
    struct rl_wire_episode out[RL_WIRE_TOP_MAX];
    char user[32];

    ck_assert_int_eq(rl_throttle_create(&t, 64, "n", NULL), 0);
    limited(t, "s", NULL, "a", 1000, 500);  /* allowable at 1500 */
    limited(t, "s", NULL, "b", 1000, 5000); /* at 6000 */
    /* never allowable (a cost over the limit): waiting does not help, no wait is added, so it
     * goes idle a grace after its last refusal, ended then */
    limited(t, "s", NULL, "c", 1000, RL_WIRE_RETRY_NEVER);
    limited(t, "s", NULL, "c", 1100, RL_WIRE_RETRY_NEVER);
    limited(t, "s", NULL, "e", 1100, RL_WIRE_RETRY_NEVER); /* one refusal only */
    /* a never after a real wait keeps the wait */
    limited(t, "s", NULL, "b", 1100, RL_WIRE_RETRY_NEVER);
    limited(t, "s", NULL, "a", 1200, 300); /* refused again: allowable at 1500 still */
    rl_throttle_tick(t, 1100 + RL_THROTTLE_IDLE_GRACE_MS - 1);
    ck_assert_uint_eq(t->nopen, 4);
    rl_throttle_tick(t, 1100 + RL_THROTTLE_IDLE_GRACE_MS);
    ck_assert_uint_eq(t->nopen, 2);
    rl_throttle_tick(t, 1500 + RL_THROTTLE_IDLE_GRACE_MS - 1);
    ck_assert_uint_eq(t->nopen, 2);
    rl_throttle_tick(t, 1500 + RL_THROTTLE_IDLE_GRACE_MS);
    ck_assert_uint_eq(t->nopen, 1);
    ck_assert_uint_eq(rl_throttle_query(t, NULL, 0, NULL, 3000, 20, out), 4);
    for (int i = 0; i < 4; i++) {
        if (str_is(&out[i].user, "a")) {
            ck_assert_uint_eq(out[i].ended, RL_WIRE_ENDED_IDLE);
            ck_assert_uint_eq(out[i].end_ms, 1500);
            ck_assert_uint_eq(out[i].refused, 2);
        } else if (str_is(&out[i].user, "c")) {
            ck_assert_uint_eq(out[i].ended, RL_WIRE_ENDED_IDLE);
            ck_assert_uint_eq(out[i].end_ms, 1100);
            ck_assert_uint_eq(out[i].refused, 2);
        } else if (str_is(&out[i].user, "e")) {
            ck_assert_uint_eq(out[i].ended, RL_WIRE_ENDED_IDLE);
            ck_assert_uint_eq(out[i].end_ms, 1100);
            ck_assert_uint_eq(out[i].refused, 1);
        } else {
            ck_assert_uint_eq(out[i].ended, RL_WIRE_ENDED_OPEN); /* b: until 6000 */
        }
    }
    rl_throttle_tick(t, 100000);
    ck_assert_uint_eq(t->nopen, 0);
    /* Many at once, colliding in the index: every one closes in one tick. */
    limited(t, "s", NULL, "d", 200000, 100000);
    for (int i = 0; i < 60; i++) {
        snprintf(user, sizeof(user), "x%d", i);
        limited(t, "s", NULL, user, 200000, i % 2 == 0 ? 10 : RL_WIRE_RETRY_NEVER);
    }
    ck_assert_uint_eq(t->nopen, 61);
    rl_throttle_tick(t, 200000 + 10 + RL_THROTTLE_IDLE_GRACE_MS);
    ck_assert_uint_eq(t->nopen, 1);
    /* And every open one is still found after the deletions shifted the index. */
    allowed(t, "s", NULL, "d", 300000);
    ck_assert_uint_eq(t->nopen, 0);
    rl_throttle_destroy(t);
}
END_TEST

START_TEST(test_filters_and_top)
{
    struct rl_throttle *t;
    struct rl_wire_episode out[RL_WIRE_TOP_MAX];
    uint64_t since;
    char user[32];
    size_t n;

    ck_assert_int_eq(rl_throttle_create(&t, 64, "n", NULL), 0);
    /* web: w0..w9 refused 1..10 times, closed at 1000 + i; api: one open, refused 50 times */
    for (int i = 0; i < 10; i++) {
        snprintf(user, sizeof(user), "w%d", i);
        for (int k = 0; k <= i; k++) {
            limited(t, "web", NULL, user, 100, 10);
        }
        allowed(t, "web", NULL, user, 1000 + (uint64_t)i);
    }
    for (int k = 0; k < 50; k++) {
        limited(t, "api", NULL, "big", 10, 10);
    }
    n = rl_throttle_query(t, NULL, 0, NULL, 5000, 3, out);
    ck_assert_uint_eq(n, 3);
    ck_assert(str_is(&out[0].user, "big"));
    ck_assert(str_is(&out[1].user, "w9"));
    ck_assert(str_is(&out[2].user, "w8"));
    n = rl_throttle_query(t, "web", 3, NULL, 5000, 100, out);
    ck_assert_uint_eq(n, 10);
    for (size_t i = 1; i < n; i++) {
        ck_assert_uint_ge(out[i - 1].refused, out[i].refused);
        ck_assert(str_is(&out[i].service, "web"));
    }
    ck_assert_uint_eq(rl_throttle_query(t, "nope", 4, NULL, 5000, 100, out), 0);
    /* since 4003 at 5000: closed at or after 997 ... all; since 3995: ended >= 1005: w5..w9 */
    since = 3995;
    n = rl_throttle_query(t, "web", 3, &since, 5000, 100, out);
    ck_assert_uint_eq(n, 5);
    /* An open episode is active whatever since says. */
    since = 0;
    n = rl_throttle_query(t, NULL, 0, &since, 5000, 100, out);
    ck_assert_uint_eq(n, 1);
    ck_assert(str_is(&out[0].user, "big"));
    rl_throttle_destroy(t);
}
END_TEST

START_TEST(test_events_log)
{
    struct rl_throttle *t;
    char path[PATH_MAX], buf[4096];

    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "events.log"), 0);
    ck_assert_int_eq(rl_throttle_create(&t, 4, "n1", path), 0);
    limited(t, "web", "/x", "a\"b", 1000, 10);
    allowed(t, "web", "/x", "a\"b", 1005);
    limited(t, "web", NULL, "c", 2000, 10);
    rl_throttle_tick(t, 2010 + RL_THROTTLE_IDLE_GRACE_MS);
    ck_assert_int_gt(rl_harness_read_file(path, buf, sizeof(buf)), 0);
    ck_assert_str_eq(buf, "{\"service\":\"web\",\"endpoint\":\"/x\",\"user\":\"a\\\"b\","
                          "\"start_ms\":1000,\"end_ms\":1005,\"refused\":1,\"ended\":\"allowed\","
                          "\"node\":\"n1\"}\n"
                          "{\"service\":\"web\",\"endpoint\":null,\"user\":\"c\","
                          "\"start_ms\":2000,\"end_ms\":2010,\"refused\":1,\"ended\":\"idle\","
                          "\"node\":\"n1\"}\n");
    rl_throttle_destroy(t);
    ck_assert_int_lt(rl_throttle_create(&t, 4, "n1", "/nonexistent-dir/x.log"), 0);
}
END_TEST

static size_t
count_char(const char *s, char c)
{
    size_t n = 0;

    for (; *s != '\0'; s++) {
        n += *s == c;
    }
    return n;
}

static off_t
file_size(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 ? st.st_size : -1;
}

/* It holds user ids: created 0640 whatever the default bounds, as the request log. */
START_TEST(test_events_log_mode)
{
    struct rl_throttle *t;
    char path[PATH_MAX];
    struct stat st;
    mode_t old = umask(022);

    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "mode.log"), 0);
    ck_assert_int_eq(rl_throttle_create(&t, 4, "n1", path), 0);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0640);
    rl_throttle_destroy(t);
    umask(old);
}
END_TEST

/* A client cycling users closes an episode per user per window: at most `rate` lines are
 * written in a second; the rest are counted and summed in one summary line at the tick. */
START_TEST(test_events_log_rate)
{
    struct rl_throttle *t;
    struct rl_throttle_stats st;
    char path[PATH_MAX], user[32];
    static char buf[1 << 20];

    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "rate.log"), 0);
    ck_assert_int_eq(rl_throttle_create(&t, 1024, "n1", path), 0);
    rl_throttle_set_log_bounds(t, 0, 4, 10);
    /* Second 1: 1000 users, each refused twice then allowed: 1000 episodes closed. */
    for (int i = 0; i < 1000; i++) {
        snprintf(user, sizeof(user), "u%d", i);
        limited(t, "web", NULL, user, 1000, 100);
        limited(t, "web", NULL, user, 1001, 100);
    }
    for (int i = 0; i < 1000; i++) {
        snprintf(user, sizeof(user), "u%d", i);
        allowed(t, "web", NULL, user, 1100 + (uint64_t)i / 2);
    }
    rl_throttle_tick(t, 1700);
    rl_throttle_stats(t, &st);
    ck_assert_uint_eq(st.log_lines, 10);
    ck_assert_uint_eq(st.log_dropped, 990);
    ck_assert_int_gt(rl_harness_read_file(path, buf, sizeof(buf)), 0);
    ck_assert_uint_eq(count_char(buf, '\n'), 11);
    ck_assert_ptr_nonnull(strstr(buf, "\"user\":\"u9\""));
    ck_assert_ptr_null(strstr(buf, "\"user\":\"u10\""));
    ck_assert_ptr_nonnull(strstr(buf, "{\"dropped\":990,\"refused\":1980,\"from_ms\":1105,"
                                      "\"to_ms\":1599,\"node\":\"n1\"}\n"));
    /* The next second writes again, and a quiet tick writes no summary. */
    limited(t, "web", NULL, "late", 2200, 100);
    allowed(t, "web", NULL, "late", 2300);
    rl_throttle_tick(t, 2400);
    rl_throttle_tick(t, 3400);
    rl_throttle_stats(t, &st);
    ck_assert_uint_eq(st.log_lines, 11);
    ck_assert_int_gt(rl_harness_read_file(path, buf, sizeof(buf)), 0);
    ck_assert_uint_eq(count_char(buf, '\n'), 12);
    ck_assert_ptr_nonnull(strstr(buf, "\"user\":\"late\""));
    rl_throttle_destroy(t);
}
END_TEST

/* Writes n episodes of distinct users, one a second (under any cap), ticking each time. */
static void
close_many(struct rl_throttle *t, int n)
{
    char user[32];

    for (int i = 0; i < n; i++) {
        uint64_t now = 10000 + (uint64_t)i * 1000;

        snprintf(user, sizeof(user), "user-%04d", i);
        limited(t, "web", "/pay", user, now, 10);
        allowed(t, "web", "/pay", user, now + 20);
        if (i % 7 == 0) {
            rl_throttle_tick(t, now + 30);
        }
    }
    rl_throttle_tick(t, 10000 + (uint64_t)n * 1000);
}

/* Every file holds whole lines, none passes max_size, and `keep` old ones stay. */
START_TEST(test_events_log_rotation)
{
    struct rl_throttle *t;
    struct rl_throttle_stats st;
    char path[PATH_MAX], name[PATH_MAX + 16];
    static char buf[8192];

    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "rot.log"), 0);
    ck_assert_int_eq(rl_throttle_create(&t, 16, "n1", path), 0);
    rl_throttle_set_log_bounds(t, 1000, 2, 0);
    close_many(t, 100);
    rl_throttle_stats(t, &st);
    ck_assert_uint_eq(st.log_lines, 100);
    ck_assert_uint_ge(st.log_rotations, 10);
    ck_assert_uint_eq(st.log_errors, 0);
    for (uint32_t i = 0; i <= 2; i++) {
        ssize_t n;

        snprintf(name, sizeof(name), i == 0 ? "%s" : "%s.%u", path, i);
        n = rl_harness_read_file(name, buf, sizeof(buf));
        ck_assert_int_gt(n, 0);
        ck_assert_int_le(file_size(name), 1000);
        ck_assert_int_eq(buf[0], '{');
        ck_assert_int_eq(buf[n - 1], '\n');
        /* a line is about 140 bytes: a rotated file is more than half full */
        ck_assert_int_gt(n, i == 0 ? 0 : 500);
    }
    snprintf(name, sizeof(name), "%s.3", path);
    ck_assert_int_eq(file_size(name), -1);
    /* The newest episode is in PATH, the one before the rotation in PATH.1. */
    ck_assert_int_gt(rl_harness_read_file(path, buf, sizeof(buf)), 0);
    ck_assert_ptr_nonnull(strstr(buf, "user-0099"));
    rl_throttle_destroy(t);

    /* keep 0: no old file at all. */
    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "rot0.log"), 0);
    ck_assert_int_eq(rl_throttle_create(&t, 16, "n1", path), 0);
    rl_throttle_set_log_bounds(t, 1000, 0, 0);
    close_many(t, 50);
    rl_throttle_destroy(t);
    ck_assert_int_le(file_size(path), 1000);
    ck_assert_int_gt(file_size(path), 0);
    snprintf(name, sizeof(name), "%s.1", path);
    ck_assert_int_eq(file_size(name), -1);

    /* max_size 0: never rotated. */
    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "rotnever.log"), 0);
    ck_assert_int_eq(rl_throttle_create(&t, 16, "n1", path), 0);
    rl_throttle_set_log_bounds(t, 0, 2, 0);
    close_many(t, 50);
    rl_throttle_stats(t, &st);
    ck_assert_uint_eq(st.log_rotations, 0);
    rl_throttle_destroy(t);
    ck_assert_int_gt(file_size(path), 5000);
}
END_TEST

/* SIGHUP's reopen: after an external rename, the lines go to a new PATH, created 0640. */
START_TEST(test_events_log_reopen)
{
    struct rl_throttle *t;
    char path[PATH_MAX], old[PATH_MAX + 8];
    static char buf[8192];
    struct stat st;
    mode_t um = umask(022);

    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "hup.log"), 0);
    snprintf(old, sizeof(old), "%s.old", path);
    ck_assert_int_eq(rl_throttle_create(&t, 4, "n1", path), 0);
    ck_assert_int_eq(rl_throttle_reopen(NULL), 0);
    limited(t, "web", NULL, "before", 1000, 10);
    allowed(t, "web", NULL, "before", 1010);
    /* buffered: the reopen writes it to the file it was meant for */
    ck_assert_int_eq(rename(path, old), 0);
    ck_assert_int_eq(rl_throttle_reopen(t), 0);
    limited(t, "web", NULL, "after", 2000, 10);
    allowed(t, "web", NULL, "after", 2010);
    rl_throttle_tick(t, 2020);
    ck_assert_int_gt(rl_harness_read_file(old, buf, sizeof(buf)), 0);
    ck_assert_ptr_nonnull(strstr(buf, "before"));
    ck_assert_ptr_null(strstr(buf, "after"));
    ck_assert_int_gt(rl_harness_read_file(path, buf, sizeof(buf)), 0);
    ck_assert_ptr_nonnull(strstr(buf, "after"));
    ck_assert_ptr_null(strstr(buf, "before"));
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0640);
    rl_throttle_destroy(t);
    umask(um);
}
END_TEST

static Suite *
throttle_suite(void)
{
    Suite *s = suite_create("throttle");
    TCase *tc = tcase_create("throttle");

    tcase_add_test(tc, test_create_bounds);
    tcase_add_test(tc, test_open_count_allowed_close);
    tcase_add_test(tc, test_endpoints_are_distinct);
    tcase_add_test(tc, test_open_table_bound);
    tcase_add_test(tc, test_ring_wraps);
    tcase_add_test(tc, test_idle_close);
    tcase_add_test(tc, test_filters_and_top);
    tcase_add_test(tc, test_events_log);
    tcase_add_test(tc, test_events_log_mode);
    tcase_add_test(tc, test_events_log_rate);
    tcase_add_test(tc, test_events_log_rotation);
    tcase_add_test(tc, test_events_log_reopen);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(throttle_suite)
