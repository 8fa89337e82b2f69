/*
 * check_node_tcp: rl-node as a black box over TCP. Starts the real binary on a free
 * loopback port (test clock on, so decisions are exact) and checks what docs/PROTOCOL.md and
 * docs/OPERATIONS.md promise a client: the answers, pipelining, many clients at once, bad clients
 * that never disturb good ones, and a clean exit on SIGTERM. Not for the algorithms' edge
 * cases (check_algo, check_limiter) or the cluster (check_cluster).
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reqclient.h"
#include "harness.h"
#include "rltest.h"

#define T_TIMEOUT 5000

static struct rl_harness_server node;
static char config[4096];
static int port;

static void
node_setup(void)
{
    port = rl_harness_free_port();
    ck_assert_int_gt(port, 0);
    ck_assert_int_eq(rl_harness_tmppath(config, sizeof(config), "node.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(config,
                                           "[cluster]\n"
                                           "name = tcp\n"
                                           "[node n1]\n"
                                           "listen = 127.0.0.1:%d\n"
                                           "[service tb]\n"
                                           "limit = token_bucket 10 per 1s\n"
                                           "[service fw]\n"
                                           "limit = fixed_window 1000 per 1m\n"
                                           "[service fw /x]\n"
                                           "limit = fixed_window 2 per 1m\n"
                                           "[service conc]\n"
                                           "limit = concurrency 2 lease 5s\n"
                                           "limit = fixed_window 1000 per 1m\n",
                                           port),
                     0);
    ck_assert_int_eq(rl_harness_node_start(&node, config, "n1", port, RL_HARNESS_TEST_CLOCK), 0);
}

static void
node_teardown(void)
{
    rl_harness_server_stop(&node, SIGKILL, 2000);
    rl_harness_cleanup();
}

static struct rl_client *
connect_node(void)
{
    struct rl_client *c = NULL;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)port, T_TIMEOUT), 0);
    return c;
}

static void
check_one(struct rl_client *c, const char *svc, const char *user, const char *ep, uint32_t cost,
          struct rl_wire_reply *rep)
{
    ck_assert_int_eq(rl_client_check(c, svc, user, ep, cost, rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep->op, RL_WIRE_OP_CHECK);
}

START_TEST(test_ping_stats_check)
{
    struct rl_client *c = connect_node();
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_ping(c, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.name.len, 2);
    ck_assert_int_eq(memcmp(rep.name.ptr, "n1", 2), 0);
    ck_assert_int_eq(rl_client_clock(c, 1000000, T_TIMEOUT), 0);

    /* token_bucket 10 per 1s: a burst of 10, then LIMITED with the refill time of one. */
    for (int i = 0; i < 10; i++) {
        check_one(c, "tb", "alice", NULL, 1, &rep);
        ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
        ck_assert_uint_eq(rep.check.limit, 10);
        ck_assert_uint_eq(rep.check.remaining, (uint64_t)(9 - i));
    }
    check_one(c, "tb", "alice", NULL, 1, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_LIMITED);
    ck_assert_uint_eq(rep.check.retry_after_ms, 100);
    ck_assert_uint_eq(rep.check.reset_ms, 1000);
    /* Another user is untouched; an unknown service has no rule. */
    check_one(c, "tb", "bob", NULL, 1, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    check_one(c, "nope", "bob", NULL, 1, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_NO_RULE);
    /* 100 ms later one token is back. */
    ck_assert_int_eq(rl_client_clock(c, 1000100, T_TIMEOUT), 0);
    check_one(c, "tb", "alice", NULL, 1, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.check.remaining, 0);

    ck_assert_int_eq(rl_client_stats(c, &rep, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_stat(&rep, "checks", -1), 14);
    ck_assert_int_eq(rl_client_stat(&rep, "keys", -1), 2);
    ck_assert_int_eq(rl_client_stat(&rep, "limited", -1), 1);
    ck_assert_int_eq(rl_client_stat(&rep, "no_rule", -1), 1);
    rl_client_destroy(c);
}
END_TEST

/* One ADJUST over the connection; its reply in *rep (CHECK's shape under op 9, or ERROR). */
static void
adjust_one(struct rl_client *c, const char *svc, const char *user, int32_t delta,
           struct rl_wire_reply *rep)
{
    struct rl_wire_req req = {.op = RL_WIRE_OP_ADJUST, .id = 9};
    struct rl_buf b;

    req.service.ptr = svc;
    req.service.len = (uint32_t)strlen(svc);
    req.user.ptr = user;
    req.user.len = (uint32_t)strlen(user);
    req.delta = delta;
    rl_buf_init(&b);
    ck_assert_int_eq(rl_wire_put_adjust(&b, &req), 0);
    ck_assert_int_eq(rl_client_queue_raw(c, b.data, b.len), 0);
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_recv(c, rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep->id, 9);
    rl_buf_deinit(&b);
}

/* ADJUST (op 9) against a real node: a charge past the limit is refused until the debt is
 * paid back; 2 of 3 used refunded gives 2 back; a refund never goes above full; NO_RULE; a
 * delta out of bounds is BAD_FIELD and the connection stays. */
START_TEST(test_adjust)
{
    /* [9, 5, "fw", "u", nil, 1000001] */
    static const char bad[] = "\0\0\0\x0e\x96\x09\x05\xa2"
                              "fw\xa1u\xc0\xce\0\x0f\x42\x41";
    struct rl_client *c = connect_node();
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_clock(c, 1000000, T_TIMEOUT), 0);
    /* token_bucket 10 per 1s: 4 used, then the real cost was 16: a charge of 12 */
    check_one(c, "tb", "carol", NULL, 4, &rep);
    ck_assert_uint_eq(rep.check.remaining, 6);
    adjust_one(c, "tb", "carol", 12, &rep);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_ADJUST);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.check.limit, 10);
    ck_assert_uint_eq(rep.check.remaining, 0);
    /* 16 of 10: 7 tokens must come back (100 ms each) before one fits */
    ck_assert_uint_eq(rep.check.retry_after_ms, 700);
    check_one(c, "tb", "carol", NULL, 1, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_LIMITED);
    ck_assert_uint_eq(rep.check.retry_after_ms, 700);
    ck_assert_int_eq(rl_client_clock(c, 1000700, T_TIMEOUT), 0);
    check_one(c, "tb", "carol", NULL, 1, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.check.remaining, 0);

    /* fixed_window 1000 per 1m: 3 used, 2 refunded: 2 back */
    check_one(c, "fw", "dave", NULL, 3, &rep);
    ck_assert_uint_eq(rep.check.remaining, 997);
    adjust_one(c, "fw", "dave", -2, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.check.remaining, 999);
    check_one(c, "fw", "dave", NULL, 0, &rep);
    ck_assert_uint_eq(rep.check.remaining, 999);
    /* never above full */
    adjust_one(c, "fw", "dave", -1000000, &rep);
    ck_assert_uint_eq(rep.check.remaining, 1000);
    ck_assert_uint_eq(rep.check.reset_ms, 0);
    check_one(c, "fw", "dave", NULL, 1000, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    check_one(c, "fw", "dave", NULL, 1, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_LIMITED);

    adjust_one(c, "nope", "dave", 5, &rep);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_ADJUST);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_NO_RULE);

    /* delta 1000001: BAD_FIELD, echoed id, connection kept */
    ck_assert_int_eq(rl_client_queue_raw(c, bad, sizeof(bad) - 1), 0);
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_ERROR);
    ck_assert_uint_eq(rep.id, 5);
    ck_assert_uint_eq(rep.err, RL_WIRE_ERR_BAD_FIELD);
    ck_assert_int_eq(rl_client_ping(c, &rep, T_TIMEOUT), 0);

    /* ADJUST is not a decision: checks counts the 7 CHECKs only */
    ck_assert_int_eq(rl_client_stats(c, &rep, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_stat(&rep, "checks", -1), 7);
    rl_client_destroy(c);
}
END_TEST

/* One RELEASE over the connection; its reply in *rep (CHECK's shape under op 10, or ERROR). */
static void
release_one(struct rl_client *c, const char *svc, const char *user, uint32_t count,
            struct rl_wire_reply *rep)
{
    struct rl_wire_req req = {.op = RL_WIRE_OP_RELEASE, .id = 10};
    struct rl_buf b;

    req.service.ptr = svc;
    req.service.len = (uint32_t)strlen(svc);
    req.user.ptr = user;
    req.user.len = (uint32_t)strlen(user);
    req.cost = count;
    rl_buf_init(&b);
    ck_assert_int_eq(rl_wire_put_release(&b, &req), 0);
    ck_assert_int_eq(rl_client_queue_raw(c, b.data, b.len), 0);
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_recv(c, rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep->id, 10);
    rl_buf_deinit(&b);
}

/* RELEASE (op 10) against a real node: concurrency 2 lease 5s with a rate tier; the slots
 * taken by CHECK, given back by RELEASE (not by ADJUST), freed by their lease; a late release
 * counted; NO_RULE; a rule without a concurrency tier; a count out of bounds is BAD_FIELD and
 * the connection stays. */
START_TEST(test_release)
{
    /* [10, 6, "conc", "u", nil, 0] */
    static const char bad[] = "\0\0\0\x0c\x96\x0a\x06\xa4"
                              "conc\xa1u\xc0\x00";
    struct rl_client *c = connect_node();
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_clock(c, 2000000, T_TIMEOUT), 0);
    check_one(c, "conc", "erin", NULL, 1, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.check.limit, 2);
    ck_assert_uint_eq(rep.check.remaining, 1);
    check_one(c, "conc", "erin", NULL, 1, &rep);
    ck_assert_uint_eq(rep.check.remaining, 0);
    check_one(c, "conc", "erin", NULL, 1, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_LIMITED);
    ck_assert_uint_eq(rep.check.retry_after_ms, 5000);
    /* ADJUST leaves the slots alone */
    adjust_one(c, "conc", "erin", -1, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.check.remaining, 0);
    check_one(c, "conc", "erin", NULL, 1, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_LIMITED);
    /* RELEASE gives one back */
    release_one(c, "conc", "erin", 1, &rep);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_RELEASE);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.check.limit, 2);
    ck_assert_uint_eq(rep.check.remaining, 1);
    ck_assert_uint_eq(rep.check.retry_after_ms, 0);
    check_one(c, "conc", "erin", NULL, 1, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.check.remaining, 0);
    /* the leases end 5 s later: both slots free without a RELEASE */
    ck_assert_int_eq(rl_client_clock(c, 2004999, T_TIMEOUT), 0);
    check_one(c, "conc", "erin", NULL, 1, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_LIMITED);
    ck_assert_uint_eq(rep.check.retry_after_ms, 1);
    ck_assert_int_eq(rl_client_clock(c, 2005000, T_TIMEOUT), 0);
    check_one(c, "conc", "erin", NULL, 2, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.check.remaining, 0);
    /* 3 given back when 2 are held: none late (no holder takes more than N = 2); then 1
     * when none is held: 1 late */
    release_one(c, "conc", "erin", 3, &rep);
    ck_assert_uint_eq(rep.check.remaining, 2);
    release_one(c, "conc", "erin", 1, &rep);
    ck_assert_uint_eq(rep.check.remaining, 2);
    /* no rule; a rule without a concurrency tier changes nothing */
    release_one(c, "nope", "erin", 1, &rep);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_RELEASE);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_NO_RULE);
    check_one(c, "tb", "erin", NULL, 4, &rep);
    release_one(c, "tb", "erin", 4, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.check.remaining, 6);

    /* count 0: BAD_FIELD, echoed id, connection kept */
    ck_assert_int_eq(rl_client_queue_raw(c, bad, sizeof(bad) - 1), 0);
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_ERROR);
    ck_assert_uint_eq(rep.id, 6);
    ck_assert_uint_eq(rep.err, RL_WIRE_ERR_BAD_FIELD);
    ck_assert_int_eq(rl_client_ping(c, &rep, T_TIMEOUT), 0);

    /* RELEASE is not a decision: checks counts the 8 CHECKs only */
    ck_assert_int_eq(rl_client_stats(c, &rep, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_stat(&rep, "checks", -1), 8);
    ck_assert_int_eq(rl_client_stat(&rep, "releases_late", -1), 1);
    rl_client_destroy(c);
}
END_TEST

START_TEST(test_endpoint_rules)
{
    struct rl_client *c = connect_node();
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_clock(c, 5000000, T_TIMEOUT), 0);
    check_one(c, "fw", "u", "/x", 2, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.check.limit, 2);
    check_one(c, "fw", "u", "/x", 1, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_LIMITED);
    /* Other endpoints fall back to [service fw], with their own count. */
    check_one(c, "fw", "u", "/y", 1, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.check.limit, 1000);
    check_one(c, "fw", "u", "", 0, &rep);
    ck_assert_uint_eq(rep.check.remaining, 999);
    rl_client_destroy(c);
}
END_TEST

START_TEST(test_pipelined)
{
    enum { N = 20000 };
    struct rl_client *c = connect_node();
    struct rl_wire_req *reqs = calloc(N, sizeof(*reqs));
    struct rl_wire_check_reply *reps = calloc(N, sizeof(*reps));
    char (*users)[16] = calloc(N, 16);
    int allowed = 0;

    ck_assert_int_eq(rl_client_clock(c, 7000000, T_TIMEOUT), 0);
    /* 20 users, 1000 requests each, interleaved: fixed_window 1000 allows all of them. */
    for (int i = 0; i < N; i++) {
        snprintf(users[i], 16, "p%d", i % 20);
        reqs[i].op = RL_WIRE_OP_CHECK;
        reqs[i].service.ptr = "fw";
        reqs[i].service.len = 2;
        reqs[i].user.ptr = users[i];
        reqs[i].user.len = (uint32_t)strlen(users[i]);
        reqs[i].cost = 1;
    }
    ck_assert_int_eq(rl_client_check_many(c, reqs, N, reps, 20000), 0);
    for (int i = 0; i < N; i++) {
        RL_CHECK_UINT_EQ(reps[i].id, reqs[i].id);
        allowed += reps[i].code == RL_WIRE_ALLOWED;
        /* The k-th request of a user sees 1000 - k remaining: replies matched the requests. */
        RL_CHECK_UINT_EQ(reps[i].remaining, (uint64_t)(1000 - (i / 20 + 1)));
    }
    ck_assert_int_eq(allowed, N);
    free(reqs);
    free(reps);
    free(users);
    rl_client_destroy(c);
}
END_TEST

/* STATS past the node's admin budget of a turn wait for a later turn, and hold the CHECKs
 * sent after them on the same connection: every reply still comes back in request order. */
START_TEST(test_admin_budget_keeps_order)
{
    enum { N = 60 };
    struct rl_client *c = connect_node();
    struct rl_wire_req req;
    struct rl_wire_reply rep;

    for (uint32_t i = 1; i <= N; i++) {
        memset(&req, 0, sizeof(req));
        req.id = i;
        if (i % 2 == 1) {
            req.op = RL_WIRE_OP_STATS;
        } else {
            req.op = RL_WIRE_OP_CHECK;
            req.service.ptr = "fw";
            req.service.len = 2;
            req.user.ptr = "order";
            req.user.len = 5;
            req.cost = 1;
        }
        ck_assert_int_eq(rl_client_queue(c, &req), 0);
    }
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    for (uint32_t i = 1; i <= N; i++) {
        ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
        RL_CHECK_UINT_EQ(rep.id, i);
        RL_CHECK_UINT_EQ(rep.op, i % 2 == 1 ? RL_WIRE_OP_STATS : RL_WIRE_OP_CHECK);
    }
    /* 30 STATS of a few KiB each in one read: past 16 KiB, some waited. */
    ck_assert_int_gt(rl_test_stat(port, "admin_deferred"), 0);
    rl_client_destroy(c);
}
END_TEST

/* CHECKs are judged in batches (prepared, then judged): replies still come back in request
 * order around every other kind of frame (PING, a field error, a CHECK without a rule), each
 * CHECK sees the ones before it, and the CHECKs before a frame the node closes the
 * connection for are answered before that error. */
START_TEST(test_batches_keep_order)
{
    enum { N = 70 };
    struct rl_client *c = connect_node();
    struct rl_wire_req req;
    struct rl_wire_reply rep;
    static const char bad_len[] = {0, 1, 0, 1, 'x'};
    uint64_t left = 1000;

    for (uint32_t i = 1; i <= N; i++) {
        memset(&req, 0, sizeof(req));
        req.id = i;
        req.op = RL_WIRE_OP_CHECK;
        req.service.ptr = "fw";
        req.service.len = 2;
        req.user.ptr = "batch";
        req.user.len = 5;
        req.cost = 1;
        if (i % 23 == 0) {
            req.op = RL_WIRE_OP_PING;
        } else if (i % 17 == 0) {
            req.user.len = 0; /* BAD_FIELD */
        } else if (i % 11 == 0) {
            req.service.ptr = "nope"; /* NO_RULE */
            req.service.len = 4;
        }
        ck_assert_int_eq(rl_client_queue(c, &req), 0);
    }
    ck_assert_int_eq(rl_client_queue_raw(c, bad_len, sizeof(bad_len)), 0);
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    for (uint32_t i = 1; i <= N; i++) {
        ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
        RL_CHECK_UINT_EQ(rep.id, i);
        if (i % 23 == 0) {
            RL_CHECK_UINT_EQ(rep.op, RL_WIRE_OP_PING);
        } else if (i % 17 == 0) {
            RL_CHECK_UINT_EQ(rep.op, RL_WIRE_OP_ERROR);
            RL_CHECK_UINT_EQ(rep.err, RL_WIRE_ERR_BAD_FIELD);
        } else if (i % 11 == 0) {
            RL_CHECK_UINT_EQ(rep.op, RL_WIRE_OP_CHECK);
            RL_CHECK_UINT_EQ(rep.check.code, RL_WIRE_NO_RULE);
        } else {
            RL_CHECK_UINT_EQ(rep.op, RL_WIRE_OP_CHECK);
            RL_CHECK_UINT_EQ(rep.check.code, RL_WIRE_ALLOWED);
            RL_CHECK_UINT_EQ(rep.check.remaining, --left);
        }
    }
    ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
    RL_CHECK_UINT_EQ(rep.op, RL_WIRE_OP_ERROR);
    RL_CHECK_UINT_EQ(rep.err, RL_WIRE_ERR_MALFORMED);
    ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), -ECONNRESET);
    rl_client_destroy(c);
}
END_TEST

struct worker {
    int id;
    int allowed;
    int rc;
};

static void *
worker_run(void *arg)
{
    struct worker *w = arg;
    struct rl_client *c = NULL;
    struct rl_wire_req reqs[300];
    struct rl_wire_check_reply reps[300];

    w->rc = rl_client_connect(&c, "127.0.0.1", (uint16_t)port, T_TIMEOUT);
    if (w->rc != 0) {
        return NULL;
    }
    /* Every worker hammers the same user: the node must count all of them together. */
    for (int round = 0; round < 5 && w->rc == 0; round++) {
        for (int i = 0; i < 300; i++) {
            memset(&reqs[i], 0, sizeof(reqs[i]));
            reqs[i].op = RL_WIRE_OP_CHECK;
            reqs[i].service.ptr = "fw";
            reqs[i].service.len = 2;
            reqs[i].user.ptr = "shared";
            reqs[i].user.len = 6;
            reqs[i].cost = 1;
        }
        w->rc = rl_client_check_many(c, reqs, 300, reps, 20000);
        for (int i = 0; i < 300 && w->rc == 0; i++) {
            w->allowed += reps[i].code == RL_WIRE_ALLOWED;
        }
    }
    rl_client_destroy(c);
    return NULL;
}

START_TEST(test_concurrent_clients)
{
    enum { W = 8 };
    pthread_t th[W];
    struct worker w[W];
    struct rl_client *c = connect_node();
    int total = 0;

    ck_assert_int_eq(rl_client_clock(c, 9000000, T_TIMEOUT), 0);
    for (int i = 0; i < W; i++) {
        w[i] = (struct worker){.id = i};
        ck_assert_int_eq(pthread_create(&th[i], NULL, worker_run, &w[i]), 0);
    }
    for (int i = 0; i < W; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(w[i].rc, 0);
        total += w[i].allowed;
    }
    /* 12,000 requests for one user with fixed_window 1000: exactly 1000 allowed. */
    ck_assert_int_eq(total, 1000);
    rl_client_destroy(c);
}
END_TEST

START_TEST(test_bad_clients_do_not_disturb)
{
    struct rl_client *good = connect_node();
    struct rl_client *half = connect_node();
    struct rl_client *junk = connect_node();
    struct rl_client *field = connect_node();
    struct rl_wire_reply rep;
    static const char half_frame[] = {0, 0, 0, 18, (char)0x96, 1};
    static const char bad_len[] = {0, 1, 0, 1, 'x'};
    static const char not_msgpack[] = {0, 0, 0, 1, (char)0xc1};
    struct rl_wire_req bad = {.op = RL_WIRE_OP_CHECK, .id = 77};

    /* A client holds half a frame forever: others are served meanwhile. */
    ck_assert_int_eq(rl_client_queue_raw(half, half_frame, sizeof(half_frame)), 0);
    ck_assert_int_eq(rl_client_flush(half, T_TIMEOUT), 0);
    check_one(good, "fw", "g", NULL, 1, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);

    /* A frame length over 65536: MALFORMED, then the node closes that connection. */
    ck_assert_int_eq(rl_client_queue_raw(junk, bad_len, sizeof(bad_len)), 0);
    ck_assert_int_eq(rl_client_flush(junk, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_recv(junk, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_ERROR);
    ck_assert_uint_eq(rep.err, RL_WIRE_ERR_MALFORMED);
    ck_assert_int_eq(rl_client_recv(junk, &rep, T_TIMEOUT), -ECONNRESET);
    rl_client_destroy(junk);

    /* Bytes that are not msgpack: same. */
    junk = connect_node();
    ck_assert_int_eq(rl_client_queue_raw(junk, not_msgpack, sizeof(not_msgpack)), 0);
    ck_assert_int_eq(rl_client_flush(junk, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_recv(junk, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.err, RL_WIRE_ERR_MALFORMED);
    ck_assert_int_eq(rl_client_recv(junk, &rep, T_TIMEOUT), -ECONNRESET);

    /* A field error is answered and the connection stays usable. */
    bad.service.ptr = "fw";
    bad.service.len = 2;
    bad.user.ptr = "";
    bad.user.len = 0;
    ck_assert_int_eq(rl_client_queue(field, &bad), 0);
    ck_assert_int_eq(rl_client_flush(field, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_recv(field, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_ERROR);
    ck_assert_uint_eq(rep.id, 77);
    ck_assert_uint_eq(rep.err, RL_WIRE_ERR_BAD_FIELD);
    check_one(field, "fw", "f", NULL, 1, &rep);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);

    /* One value nested past msgpack-c's 32 levels (an endpoint 40 arrays deep) is a field
     * error too, not a framing error: answered, id echoed, the connection kept. */
    {
        char deep[4 + 48];

        memcpy(deep, "\0\0\0\x30\x96\x01\x4e\xa2" "fw" "\xa1" "u", 11);
        memset(deep + 11, 0x91, 39);
        deep[50] = (char)0x90;
        deep[51] = 0x01;
        ck_assert_int_eq(rl_client_queue_raw(field, deep, sizeof(deep)), 0);
        ck_assert_int_eq(rl_client_flush(field, T_TIMEOUT), 0);
        ck_assert_int_eq(rl_client_recv(field, &rep, T_TIMEOUT), 0);
        ck_assert_uint_eq(rep.op, RL_WIRE_OP_ERROR);
        ck_assert_uint_eq(rep.id, 78);
        ck_assert_uint_eq(rep.err, RL_WIRE_ERR_BAD_FIELD);
        check_one(field, "fw", "f", NULL, 1, &rep);
        ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    }

    /* Still serving everyone, the half-frame holder included once it finishes. */
    check_one(good, "fw", "g", NULL, 1, &rep);
    ck_assert_uint_eq(rep.check.remaining, 998);
    rl_client_destroy(good);
    rl_client_destroy(half);
    rl_client_destroy(junk);
    rl_client_destroy(field);
}
END_TEST

START_TEST(test_many_connections)
{
    enum { N = 300 };
    struct rl_client *cs[N];
    struct rl_wire_reply rep;

    for (int i = 0; i < N; i++) {
        cs[i] = connect_node();
    }
    for (int i = 0; i < N; i += 37) {
        check_one(cs[i], "fw", "many", NULL, 1, &rep);
        ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    }
    for (int i = 0; i < N; i++) {
        rl_client_destroy(cs[i]);
    }
    cs[0] = connect_node();
    ck_assert_int_eq(rl_client_stats(cs[0], &rep, T_TIMEOUT), 0);
    ck_assert_int_ge(rl_client_stat(&rep, "connections_total", 0), N + 1);
    rl_client_destroy(cs[0]);
}
END_TEST

START_TEST(test_sigterm_exits_zero)
{
    struct rl_client *c = connect_node();
    struct rl_wire_reply rep;

    check_one(c, "fw", "z", NULL, 1, &rep);
    ck_assert_int_eq(rl_harness_server_stop(&node, SIGTERM, 5000), 0);
    ck_assert(WIFEXITED(node.status));
    ck_assert_int_eq(WEXITSTATUS(node.status), 0);
    /* The node closed our connection on its way out. */
    ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), -ECONNRESET);
    rl_client_destroy(c);
}
END_TEST

START_TEST(test_clock_needs_switch)
{
    struct rl_harness_server plain = {0};
    struct rl_client *c = NULL;
    struct rl_wire_req req = {.op = RL_WIRE_OP_CLOCK, .id = 5, .now_ms = 1};
    struct rl_wire_reply rep;
    struct rl_buf b;
    int p2 = rl_harness_free_port();

    ck_assert_int_eq(rl_harness_node_start(&plain, config, "n2", p2, 0), 0);
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)p2, T_TIMEOUT), 0);
    rl_buf_init(&b);
    ck_assert_int_eq(rl_wire_put_clock(&b, req.id, req.now_ms), 0);
    ck_assert_int_eq(rl_client_queue_raw(c, b.data, b.len), 0);
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_ERROR);
    ck_assert_uint_eq(rep.id, 5);
    ck_assert_uint_eq(rep.err, RL_WIRE_ERR_UNKNOWN_OP);
    {
        /* CLOCK of any other shape is as unknown ([4, 6], [4, 7, "x"], [4, 8, -5]): not a
         * BAD_FIELD about elements of an op this node does not have */
        static const char shapes[] = "\0\0\0\x03\x92\x04\x06"
                                     "\0\0\0\x05\x93\x04\x07\xa1x"
                                     "\0\0\0\x04\x93\x04\x08\xfb";

        ck_assert_int_eq(rl_client_queue_raw(c, shapes, sizeof(shapes) - 1), 0);
        ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
        for (uint32_t id = 6; id <= 8; id++) {
            ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
            ck_assert_uint_eq(rep.op, RL_WIRE_OP_ERROR);
            ck_assert_uint_eq(rep.id, id);
            ck_assert_uint_eq(rep.err, RL_WIRE_ERR_UNKNOWN_OP);
        }
    }
    {
        /* HOT, [8, 9], a router's op: UNKNOWN_OP with its number, as docs/PROTOCOL.md says */
        static const char hot[] = "\0\0\0\x03\x92\x08\x09";

        rl_test_expect_unknown_op(c, hot, sizeof(hot) - 1, 9, "unknown op 8");
    }
    rl_buf_deinit(&b);
    rl_client_destroy(c);
    ck_assert_int_eq(rl_harness_server_stop(&plain, SIGINT, 5000), 0);
    ck_assert_int_eq(WEXITSTATUS(plain.status), 0);
}
END_TEST

/* Runs a program to completion and returns its exit status; its output goes to log. */
static int
run_status(const char *const argv[], const char *log)
{
    pid_t pid;
    int status = -1;

    ck_assert_int_eq(rl_harness_spawn(argv, log, &pid), 0);
    ck_assert_int_eq(rl_harness_wait(pid, 5000, &status), 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

START_TEST(test_command_line)
{
    char bad[4096], log[4096], out[4096];
    const char *help[] = {"rl-node", "--help", NULL};
    const char *version[] = {"rl-node", "--version", NULL};
    const char *badconf[] = {"rl-node", "--config", bad, "--name", "n1", NULL};
    const char *noname[] = {"rl-node", "--config", config, NULL};

    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "cmdline.log"), 0);
    ck_assert_int_eq(run_status(help, log), 0);
    ck_assert_int_eq(run_status(version, log), 0);
    ck_assert_int_ge(rl_harness_read_file(log, out, sizeof(out)), 0);
    ck_assert_ptr_nonnull(strstr(out, "rl-node "));
    ck_assert_int_ne(run_status(noname, log), 0);

    ck_assert_int_eq(rl_harness_tmppath(bad, sizeof(bad), "bad.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(bad, "[cluster]\nname = x\n\n[service s]\n"
                                                "limit = token_bucket ten per 1s\n"),
                     0);
    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "badconf.log"), 0);
    ck_assert_int_ne(run_status(badconf, log), 0);
    ck_assert_int_ge(rl_harness_read_file(log, out, sizeof(out)), 0);
    /* One clear line: FILE:LINE: what is wrong. */
    ck_assert_msg(strstr(out, "bad.conf:5:") != NULL, "got: %s", out);
}
END_TEST

static Suite *
node_tcp_suite(void)
{
    Suite *s = suite_create("node_tcp");
    TCase *tc = tcase_create("node");

    tcase_add_checked_fixture(tc, node_setup, node_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_ping_stats_check);
    tcase_add_test(tc, test_endpoint_rules);
    tcase_add_test(tc, test_adjust);
    tcase_add_test(tc, test_release);
    tcase_add_test(tc, test_pipelined);
    tcase_add_test(tc, test_batches_keep_order);
    tcase_add_test(tc, test_admin_budget_keeps_order);
    tcase_add_test(tc, test_concurrent_clients);
    tcase_add_test(tc, test_bad_clients_do_not_disturb);
    tcase_add_test(tc, test_many_connections);
    tcase_add_test(tc, test_sigterm_exits_zero);
    tcase_add_test(tc, test_clock_needs_switch);
    tcase_add_test(tc, test_command_line);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(node_tcp_suite)
