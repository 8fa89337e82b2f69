/*
 * check_router: the router's own promises, with a real rl-node and rl-router (static
 * membership, one node, deadline 200 ms): a request past its deadline gets its service's
 * failure policy; the late replies of a node that was paused (SIGSTOP) and resumed are
 * dropped, neither sent to the client nor to requests that reuse their slots; a service with
 * no rule gets NO_RULE from the router itself; a client that asks without reading is paused,
 * not buffered without bound, while another client is served.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client.h"
#include "clock.h"
#include "harness.h"
#include "wire.h"

#define DEADLINE_MS 200
#define T_TIMEOUT 5000

static char conf_path[PATH_MAX];
static int node_port, router_port;
static struct rl_harness_server node, router;

static void
setup(void)
{
    node_port = rl_harness_free_port();
    router_port = rl_harness_free_port();
    ck_assert_int_eq(rl_harness_tmppath(conf_path, sizeof(conf_path), "router.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf_path,
                                           "[router]\nlisten = 127.0.0.1:%d\ndeadline = %dms\n"
                                           "[node a]\nlisten = 127.0.0.1:%d\n"
                                           "[service open]\nlimit = fixed_window 100 per 1h\n"
                                           "[service closed]\nfailure = closed\n"
                                           "limit = fixed_window 100 per 1h\n",
                                           router_port, DEADLINE_MS, node_port),
                     0);
    memset(&node, 0, sizeof(node));
    memset(&router, 0, sizeof(router));
    ck_assert_int_eq(rl_harness_node_start(&node, conf_path, "a", node_port, 0), 0);
    ck_assert_int_eq(rl_harness_router_start(&router, conf_path, router_port), 0);
}

static void
teardown(void)
{
    if (node.pid > 0) {
        kill(node.pid, SIGCONT);
    }
    rl_harness_cleanup();
}

static struct rl_client *
connect_router(void)
{
    struct rl_client *c = NULL;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT), 0);
    return c;
}

static int64_t
stat_of(struct rl_client *c, const char *key)
{
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_stats(c, &rep, T_TIMEOUT), 0);
    return rl_client_stat(&rep, key, -1);
}

static struct rl_wire_check_reply
check(struct rl_client *c, const char *svc, const char *user)
{
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_check(c, svc, user, NULL, 1, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
    return rep.check;
}

START_TEST(test_deadline_gives_policy_reply)
{
    struct rl_client *c = connect_router();
    struct rl_wire_check_reply r;
    uint64_t t0, ms;

    ck_assert_uint_eq(check(c, "open", "u").code, RL_WIRE_ALLOWED);
    ck_assert_int_eq(kill(node.pid, SIGSTOP), 0);
    t0 = rl_clock_mono_ns();
    r = check(c, "closed", "u");
    ms = (rl_clock_mono_ns() - t0) / 1000000;
    ck_assert_uint_eq(r.code, RL_WIRE_FAIL_CLOSED);
    ck_assert_uint_gt(r.retry_after_ms, 0);
    ck_assert_msg(ms >= DEADLINE_MS - 5 && ms < DEADLINE_MS + 500, "answered after %llu ms",
                  (unsigned long long)ms);
    r = check(c, "open", "u");
    ck_assert_uint_eq(r.code, RL_WIRE_FAIL_OPEN);
    ck_assert_uint_eq(r.retry_after_ms, 0);
    ck_assert_int_eq(stat_of(c, "deadline_expired"), 2);
    ck_assert_int_eq(kill(node.pid, SIGCONT), 0);
    rl_client_destroy(c);
}
END_TEST

START_TEST(test_late_replies_dropped)
{
    enum { LATE = 50, FRESH = 300 };
    struct rl_client *c = connect_router();
    struct rl_wire_req reqs[LATE];
    struct rl_wire_check_reply reps[LATE];
    struct pollfd pfd;
    char user[32];

    ck_assert_int_eq(kill(node.pid, SIGSTOP), 0);
    for (int i = 0; i < LATE; i++) {
        memset(&reqs[i], 0, sizeof(reqs[i]));
        reqs[i].op = RL_WIRE_OP_CHECK;
        reqs[i].service.ptr = "open";
        reqs[i].service.len = 4;
        reqs[i].user.ptr = "late";
        reqs[i].user.len = 4;
        reqs[i].cost = 1;
    }
    ck_assert_int_eq(rl_client_check_many(c, reqs, LATE, reps, T_TIMEOUT), 0);
    for (int i = 0; i < LATE; i++) {
        ck_assert_uint_eq(reps[i].code, RL_WIRE_FAIL_OPEN);
    }
    /* The node wakes up and answers all 50: the router must drop every one. */
    ck_assert_int_eq(kill(node.pid, SIGCONT), 0);
    for (int i = 0; i < 100 && stat_of(c, "late_replies") < LATE; i++) {
        usleep(20000);
    }
    ck_assert_int_eq(stat_of(c, "late_replies"), LATE);
    pfd.fd = rl_client_fd(c);
    pfd.events = POLLIN;
    ck_assert_msg(poll(&pfd, 1, 300) == 0, "a frame arrived that no request asked for");
    /* New requests reuse the slots: each gets its own answer (a fresh user: 99 left). */
    for (int i = 0; i < FRESH; i++) {
        struct rl_wire_check_reply r;

        snprintf(user, sizeof(user), "fresh%d", i);
        r = check(c, "open", user);
        ck_assert_msg(r.code == RL_WIRE_ALLOWED && r.remaining == 99,
                      "request %d got code %u remaining %llu", i, r.code,
                      (unsigned long long)r.remaining);
    }
    /* The node did count the requests it answered late: they were sent to it. */
    ck_assert_uint_eq(check(c, "open", "late").remaining, 100 - LATE - 1);
    ck_assert_int_eq(stat_of(c, "late_replies"), LATE);
    rl_client_destroy(c);
}
END_TEST

START_TEST(test_no_rule)
{
    struct rl_client *c = connect_router();
    struct rl_wire_check_reply r = check(c, "nosuch", "u");

    ck_assert_uint_eq(r.code, RL_WIRE_NO_RULE);
    ck_assert_uint_eq(r.limit, 0);
    ck_assert_int_eq(stat_of(c, "no_rule"), 1);
    ck_assert_int_eq(stat_of(c, "forwarded"), 0);
    rl_client_destroy(c);
}
END_TEST

static long
rss_kb(pid_t pid)
{
    char path[64], buf[4096];
    const char *p;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    ck_assert_int_gt(rl_harness_read_file(path, buf, sizeof(buf)), 0);
    p = strstr(buf, "VmRSS:");
    ck_assert_ptr_nonnull(p);
    return strtol(p + 6, NULL, 10);
}

START_TEST(test_slow_reader_paused)
{
    /* STATS: a 7-byte request answered with several hundred bytes. */
    static const char stats_req[] = {0, 0, 0, 3, (char)0x92, 3, 1};
    enum { CHUNK = 7 * 4096, MAX_SENT = 16 << 20 };
    struct rl_client *other = connect_router();
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)router_port)};
    struct rl_wire_reply rep;
    char *chunk = malloc(CHUNK), *in = malloc(1 << 16);
    size_t sent = 0, reply_len, got = 0, frames = 0, want;
    long rss0, rss1;
    int fd, small = 4096, idle = 0;
    uint64_t t0;

    for (int i = 0; i < CHUNK / 7; i++) {
        memcpy(chunk + i * 7, stats_req, 7);
    }
    ck_assert_int_eq(rl_client_stats(other, &rep, T_TIMEOUT), 0);
    reply_len = 200; /* a floor: the reply holds ~25 keys with their names */
    rss0 = rss_kb(router.pid);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    /* Ask without reading until the router stops taking requests for a second. */
    while (sent < MAX_SENT && idle < 100) {
        size_t off = sent % CHUNK; /* a partial send leaves the next frame cut: go on from it */
        ssize_t w = send(fd, chunk + off, CHUNK - off, MSG_NOSIGNAL);

        if (w > 0) {
            sent += (size_t)w;
            idle = 0;
        } else {
            ck_assert_int_eq(errno, EAGAIN);
            usleep(10000);
            idle++;
        }
    }
    ck_assert_msg(sent < MAX_SENT, "the router read %zu bytes from a client that reads nothing",
                  sent);
    rss1 = rss_kb(router.pid);
    /* What it owes that client is far beyond what it holds for it. */
    ck_assert_msg(sent / 7 * reply_len > 64u << 20, "only %zu requests sent", sent / 7);
    ck_assert_msg(rss1 - rss0 < 24 * 1024, "router RSS grew by %ld kB", rss1 - rss0);
    /* Meanwhile another client is answered at once. */
    t0 = rl_clock_mono_ns();
    ck_assert_int_eq(rl_client_ping(other, &rep, T_TIMEOUT), 0);
    ck_assert_uint_lt((rl_clock_mono_ns() - t0) / 1000000, 1000);
    ck_assert_uint_eq(check(other, "open", "v").code, RL_WIRE_ALLOWED);
    /* The slow client reads: every request is answered, none dropped. Frames are counted
     * by their length prefixes. */
    want = sent / 7;
    fcntl(fd, F_SETFL, 0);
    {
        char hdr[4];
        size_t need = 0, hdr_have = 0;

        while (frames < want) {
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            ssize_t r;

            ck_assert_msg(poll(&pfd, 1, 10000) == 1, "stalled at %zu of %zu replies", frames,
                          want);
            r = recv(fd, in, 1 << 16, 0);
            ck_assert_msg(r > 0, "recv: %zd (%s) after %zu of %zu replies", r,
                          r < 0 ? strerror(errno) : "closed", frames, want);
            got += (size_t)r;
            for (ssize_t i = 0; i < r;) {
                if (need == 0) {
                    hdr[hdr_have++] = in[i++];
                    if (hdr_have == 4) {
                        need = (size_t)(unsigned char)hdr[0] << 24 |
                               (size_t)(unsigned char)hdr[1] << 16 |
                               (size_t)(unsigned char)hdr[2] << 8 | (unsigned char)hdr[3];
                        ck_assert_uint_gt(need, 0);
                        hdr_have = 0;
                    }
                } else {
                    size_t take = (size_t)(r - i) < need ? (size_t)(r - i) : need;

                    i += (ssize_t)take;
                    need -= take;
                    frames += need == 0;
                }
            }
        }
    }
    ck_assert_uint_eq(frames, want);
    close(fd);
    rl_client_destroy(other);
    free(chunk);
    free(in);
}
END_TEST

static Suite *
router_suite(void)
{
    Suite *s = suite_create("router");
    TCase *tc = tcase_create("router");

    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_deadline_gives_policy_reply);
    tcase_add_test(tc, test_late_replies_dropped);
    tcase_add_test(tc, test_no_rule);
    tcase_add_test(tc, test_slow_reader_paused);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(router_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    rl_harness_cleanup();
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
