/*
 * check_loss: what a node's loss costs (docs/OPERATIONS.md, "What a loss costs"), measured
 * with real processes and counted, never timed. Asserted:
 *   - abuse: ZooKeeper (session 2 s), three nodes, two routers (deadline 50 ms), 300 users of
 *     `token_bucket 20 per 1d` brought to their limit; one client asks for all of them through
 *     both routers, pipelined, round after round; node b is killed (SIGKILL) and the rounds go
 *     on until both routers have moved its shards, then 1000 rounds more. Every answer that is
 *     not LIMITED is counted per user: each user gets at most the formula's bound,
 *     B + 2 R max(N, k) (B = N = 20, R = 2 routers, k workers), and, as the issue asks, at most
 *     20 per user and 300 in all; the routers answered from their held refusals (deny_hits
 *     grew through the loss);
 *   - backstop, however long: static membership (no ZooKeeper to move anything), node b
 *     killed for good; users of b's shards never refused before are judged by the backstop:
 *     each gets FAIL_OPEN at most max(1, N / k) times over 40 requests (one connection: one
 *     worker), then LIMITED with the rule's limit; a `failure = open_unlimited` service keeps
 *     the old meaning (every request FAIL_OPEN); a `failure = closed` one FAIL_CLOSED; STATS,
 *     /metrics and the request log (NODE `backstop`) count the backstop's answers apart; the
 *     router said at start that `failure = open` changed;
 *   - backstop, flooded: a user of b's it has refused gets nothing more after 100,000 made-up
 *     users asked once through the same worker.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "httpget.h"
#include "reqclient.h"
#include "rltest.h"
#include "wire.h"

#define SHARDS 64
#define T_TIMEOUT 10000
#define NUSERS 300
#define LIMIT 20 /* N and B of token_bucket 20 per 1d */
#define NNODES 3

static struct rl_harness_zk zk;
static struct rl_harness_server nodes[NNODES], routers[2];
static const char *const names[NNODES] = {"a", "b", "c"};
static int node_ports[NNODES], router_ports[2], metrics_port;
static char conf_path[PATH_MAX], log_path[PATH_MAX];

static void
sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

    while (nanosleep(&ts, &ts) != 0) {
    }
}

static void
teardown(void)
{
    rl_harness_cleanup();
}

static struct rl_client *
connect_port(int port)
{
    struct rl_client *c = NULL;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)port, T_TIMEOUT), 0);
    return c;
}

/* ---- abuse through two routers ------------------------------------------------------------ */

static char users[NUSERS][16];

static void
setup_abuse(void)
{
    rl_test_cluster_prepare(&zk, nodes, node_ports, NNODES, routers, router_ports, 2);
    ck_assert_int_eq(rl_harness_tmppath(conf_path, sizeof(conf_path), "loss.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf_path,
                                           "[cluster]\nname = loss\nzookeeper = %s\n"
                                           "session_timeout = 2000ms\nshards = %d\n"
                                           "[router]\ndeadline = 50ms\n"
                                           /* no refunds: the deny cache holds refusals */
                                           "[clients]\nadjust = no\n"
                                           "[service day]\nlimit = token_bucket %d per 1d\n",
                                           zk.connect, SHARDS, LIMIT),
                     0);
    for (int i = 0; i < NNODES; i++) {
        ck_assert_int_eq(rl_harness_node_start(&nodes[i], conf_path, names[i], node_ports[i], 0),
                         0);
    }
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(rl_harness_router_start(&routers[i], conf_path, router_ports[i]), 0);
    }
    for (int i = 0; i < NUSERS; i++) {
        snprintf(users[i], sizeof(users[i]), "user%d", i);
    }
}

/* Waits until both routers see `want` members and no shard is in flight. */
static void
wait_members(int want)
{
    for (int i = 0; i < 400; i++) {
        if (rl_test_stat(router_ports[0], "members") == want &&
            rl_test_stat(router_ports[1], "members") == want) {
            rl_test_wait_settled(nodes, NNODES, routers, 2, want, 60000);
            return;
        }
        sleep_ms(50);
    }
    ck_abort_msg("routers never saw %d members", want);
}

/* Waits until every CHECK connection of every worker of both routers to every node had a
 * rules probe answered with the router's rules: only then are refusals remembered. */
static void
wait_confirmed(void)
{
    for (int r = 0; r < 2; r++) {
        int64_t want = NNODES * 2 * rl_test_stat(router_ports[r], "workers");

        for (int i = 0; i < 400 && rl_test_stat(router_ports[r], "deny_rules_confirms") < want;
             i++) {
            sleep_ms(50);
        }
        ck_assert_int_ge(rl_test_stat(router_ports[r], "deny_rules_confirms"), want);
    }
}

/* One round: every user once through c, pipelined; per user, the answers that were not
 * LIMITED are added to extra (NULL: not counted); returns how many were ALLOWED. */
static int
round_of(struct rl_client *c, int *extra)
{
    static struct rl_wire_req reqs[NUSERS];
    static struct rl_wire_check_reply reps[NUSERS];
    int allowed = 0;

    for (int i = 0; i < NUSERS; i++) {
        rl_test_check_req(&reqs[i], "day", users[i], 1);
    }
    ck_assert_int_eq(rl_client_check_many(c, reqs, NUSERS, reps, T_TIMEOUT), 0);
    for (int i = 0; i < NUSERS; i++) {
        allowed += reps[i].code == RL_WIRE_ALLOWED;
        if (extra != NULL && reps[i].code != RL_WIRE_LIMITED) {
            extra[i]++;
        }
    }
    return allowed;
}

START_TEST(test_kill_under_abuse)
{
    struct rl_client *c[2];
    static int extra[NUSERS];
    int total = 0, worst = 0, bound, rounds_after = 0;
    int64_t k = 0, hits0;

    wait_members(NNODES);
    wait_confirmed();
    for (int r = 0; r < 2; r++) {
        c[r] = connect_port(router_ports[r]);
        k = rl_test_stat(router_ports[r], "workers") > k ? rl_test_stat(router_ports[r], "workers")
                                                         : k;
    }
    /* Every user to its limit: 20 allowed each through router 1, then refused through both
     * (each router now holds every user's refusal, until about 72 minutes from now). */
    for (int i = 0; i < LIMIT; i++) {
        ck_assert_int_eq(round_of(c[0], NULL), NUSERS);
    }
    ck_assert_int_eq(round_of(c[0], NULL), 0);
    ck_assert_int_eq(round_of(c[1], NULL), 0);
    hits0 = rl_test_stat(router_ports[0], "deny_hits") + rl_test_stat(router_ports[1], "deny_hits");
    /* The abuse goes on through both routers while b dies and its shards move. */
    memset(extra, 0, sizeof(extra));
    round_of(c[0], extra);
    round_of(c[1], extra);
    ck_assert_int_eq(rl_harness_server_stop(&nodes[1], SIGKILL, T_TIMEOUT), 0);
    for (int i = 0; i < 1000000 && rounds_after < 1000; i++) {
        round_of(c[0], extra);
        round_of(c[1], extra);
        if (rounds_after > 0 || (rl_test_stat(router_ports[0], "members") == NNODES - 1 &&
                                 rl_test_stat(router_ports[1], "members") == NNODES - 1)) {
            rounds_after++; /* the shards have moved on both: 1000 rounds more */
        }
    }
    ck_assert_msg(rounds_after == 1000, "members %lld and %lld after the kill",
                  (long long)rl_test_stat(router_ports[0], "members"),
                  (long long)rl_test_stat(router_ports[1], "members"));
    bound = LIMIT + 2 * 2 * (LIMIT > k ? LIMIT : (int)k);
    for (int i = 0; i < NUSERS; i++) {
        total += extra[i];
        worst = extra[i] > worst ? extra[i] : worst;
        ck_assert_msg(extra[i] <= bound, "%s: %d answers not LIMITED > B + 2 R max(N, k) = %d",
                      users[i], extra[i], bound);
    }
    fprintf(stderr, "check_loss: %d answers not LIMITED after the kill (worst user %d), bound %d "
                    "per user\n",
            total, worst, bound);
    ck_assert_msg(worst <= LIMIT, "worst user: %d answers not LIMITED", worst);
    ck_assert_msg(total <= NUSERS, "%d answers not LIMITED for %d users", total, NUSERS);
    /* The routers answered them from the refusals they held. */
    ck_assert_int_gt(rl_test_stat(router_ports[0], "deny_hits") +
                         rl_test_stat(router_ports[1], "deny_hits"),
                     hits0);
    rl_client_destroy(c[0]);
    rl_client_destroy(c[1]);
}
END_TEST

/* ---- the backstop, static membership ------------------------------------------------------ */

static void
setup_static(void)
{
    memset(nodes, 0, sizeof(nodes));
    memset(routers, 0, sizeof(routers));
    for (int i = 0; i < 2; i++) {
        node_ports[i] = rl_harness_free_port();
    }
    router_ports[0] = rl_harness_free_port();
    metrics_port = rl_harness_free_port();
    ck_assert_int_eq(rl_harness_tmppath(conf_path, sizeof(conf_path), "static.conf"), 0);
    ck_assert_int_eq(rl_harness_tmppath(log_path, sizeof(log_path), "requests.log"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf_path,
                                           "[cluster]\nname = st\nshards = %d\n"
                                           "[router]\ndeadline = 50ms\nrequest_log = %s\n"
                                           "metrics = 127.0.0.1:%d\n"
                                           "[clients]\nadjust = no\n"
                                           "[node a]\nlisten = 127.0.0.1:%d\n"
                                           "[node b]\nlisten = 127.0.0.1:%d\n"
                                           "[service day]\nlimit = token_bucket %d per 1d\n"
                                           "[service free]\nfailure = open_unlimited\n"
                                           "limit = token_bucket %d per 1d\n"
                                           "[service shut]\nfailure = closed\n"
                                           "limit = token_bucket %d per 1d\n",
                                           SHARDS, log_path, metrics_port, node_ports[0],
                                           node_ports[1], LIMIT, LIMIT, LIMIT),
                     0);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(rl_harness_node_start(&nodes[i], conf_path, names[i], node_ports[i], 0),
                         0);
    }
    ck_assert_int_eq(rl_harness_router_start(&routers[0], conf_path, router_ports[0]), 0);
}

static uint32_t
check1(struct rl_client *c, const char *svc, const char *user, struct rl_wire_check_reply *out)
{
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_check(c, svc, user, NULL, 1, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
    if (out != NULL) {
        *out = rep.check;
    }
    return rep.check.code;
}

START_TEST(test_backstop_however_long)
{
    struct rl_client *c;
    struct rl_http_resp m;
    struct rl_wire_check_reply r;
    char u[32], buf[1 << 16];
    int on_b = 0, q, n;
    int64_t k = rl_test_stat(router_ports[0], "workers");

    q = LIMIT / (int)k > 0 ? LIMIT / (int)k : 1;
    /* The router said at start what `failure = open` now means. */
    n = rl_harness_read_file(routers[0].log_path, buf, sizeof(buf) - 1);
    ck_assert_int_gt(n, 0);
    buf[n] = '\0';
    ck_assert_msg(strstr(buf, "open_unlimited keeps the old meaning") != NULL, "%s", buf);
    /* and so did a node (which applies no policy, but its operator reads its log) */
    n = rl_harness_read_file(nodes[0].log_path, buf, sizeof(buf) - 1);
    ck_assert_int_gt(n, 0);
    buf[n] = '\0';
    ck_assert_msg(strstr(buf, "routers now judge them by their backstop") != NULL, "%.2000s",
                  buf);
    ck_assert_int_eq(rl_harness_server_stop(&nodes[1], SIGKILL, T_TIMEOUT), 0);
    c = connect_port(router_ports[0]);
    for (int i = 0; i < 40; i++) {
        int open = 0, limited = 0;

        snprintf(u, sizeof(u), "fresh%d", i);
        if (check1(c, "day", u, &r) == RL_WIRE_ALLOWED) {
            continue; /* a's user: the node decides */
        }
        on_b++;
        open = r.code == RL_WIRE_FAIL_OPEN;
        for (int j = 1; j < 40; j++) {
            uint32_t code = check1(c, "day", u, &r);

            ck_assert_msg(code == RL_WIRE_FAIL_OPEN || code == RL_WIRE_LIMITED, "code %u", code);
            open += code == RL_WIRE_FAIL_OPEN;
            if (code == RL_WIRE_LIMITED) {
                limited++;
                ck_assert_uint_eq(r.limit, LIMIT);
                ck_assert_uint_gt(r.retry_after_ms, 0);
            }
        }
        /* One connection, one worker: its share of the rule, then LIMITED, not waved. */
        ck_assert_int_eq(open, q);
        ck_assert_int_eq(limited, 40 - q);
    }
    ck_assert_int_gt(on_b, 0);
    /* open_unlimited: as failing open always was; closed: FAIL_CLOSED (the key's shard
     * depends on the service too: b's users of each service are found apart). */
    for (int i = 0, free_b = 0, shut_b = 0; i < 40; i++) {
        snprintf(u, sizeof(u), "fresh%d", i);
        if (check1(c, "free", u, NULL) == RL_WIRE_FAIL_OPEN) {
            free_b++;
            for (int j = 0; j < 40; j++) {
                ck_assert_uint_eq(check1(c, "free", u, NULL), RL_WIRE_FAIL_OPEN);
            }
        }
        if (check1(c, "shut", u, NULL) == RL_WIRE_FAIL_CLOSED) {
            shut_b++;
        }
        if (i == 39) {
            ck_assert_int_gt(free_b, 0);
            ck_assert_int_gt(shut_b, 0);
        }
    }
    ck_assert_int_ge(rl_test_stat(router_ports[0], "backstop_allowed"), on_b * q);
    ck_assert_int_ge(rl_test_stat(router_ports[0], "backstop_limited"), on_b * (40 - q));
    ck_assert_int_eq(rl_http_get(metrics_port, "/metrics", T_TIMEOUT, &m), 0);
    ck_assert_ptr_nonnull(strstr(m.body, "rl_router_backstop_total{result=\"limited\"} "));
    ck_assert_ptr_nonnull(strstr(m.body, "rl_router_backstop_total{result=\"allowed\"} "));
    rl_http_free(&m);
    rl_client_destroy(c);
    /* The request log names the backstop as the answer's NODE (written asynchronously). */
    for (int i = 0; i < 100; i++) {
        n = rl_harness_read_file(log_path, buf, sizeof(buf) - 1);
        buf[n > 0 ? n : 0] = '\0';
        if (strstr(buf, " backstop ") != NULL) {
            break;
        }
        sleep_ms(50);
    }
    ck_assert_msg(strstr(buf, " backstop ") != NULL, "%s", buf);
}
END_TEST

/* A user of b's exhausted by the backstop, then a flood of 100,000 made-up users asked once
 * through the same connection (one worker, whose table of 16,384 they overflow: evictions):
 * the user gets nothing back, the flood evicting the least used. Before, the least recently
 * asked went, so the flood evicted it (nearly surely) and it started its quota again: each
 * flood gave it q more (the attack round of 2026-11-30's twentieth session: 69,780
 * allowances in one loss). */
START_TEST(test_backstop_flood_gives_nothing_back)
{
    enum { BATCH = 1000, FLOOD = 100000 };
    static char flood[BATCH][24];
    static struct rl_wire_req reqs[BATCH];
    static struct rl_wire_check_reply reps[BATCH];
    struct rl_client *c;
    struct rl_wire_check_reply r;
    char v[32] = "";
    int open = 0;
    int64_t ev0;

    ck_assert_int_eq(rl_harness_server_stop(&nodes[1], SIGKILL, T_TIMEOUT), 0);
    c = connect_port(router_ports[0]);
    for (int i = 0; i < 100 && v[0] == '\0'; i++) {
        char u[32];

        snprintf(u, sizeof(u), "victim%d", i);
        if (check1(c, "day", u, &r) == RL_WIRE_FAIL_OPEN) {
            memcpy(v, u, sizeof(v)); /* b's: judged by the backstop */
        }
    }
    ck_assert_msg(v[0] != '\0', "no user of b's among 100");
    for (int j = 0; j < 40; j++) {
        check1(c, "day", v, NULL); /* its quota, then LIMITED */
    }
    ck_assert_uint_eq(check1(c, "day", v, NULL), RL_WIRE_LIMITED);
    ev0 = rl_test_stat(router_ports[0], "backstop_evictions");
    for (int base = 0; base < FLOOD; base += BATCH) {
        for (int i = 0; i < BATCH; i++) {
            snprintf(flood[i], sizeof(flood[i]), "flood%d", base + i);
            rl_test_check_req(&reqs[i], "day", flood[i], 1);
        }
        ck_assert_int_eq(rl_client_check_many(c, reqs, BATCH, reps, T_TIMEOUT), 0);
    }
    ck_assert_int_gt(rl_test_stat(router_ports[0], "backstop_evictions") - ev0, 0);
    for (int j = 0; j < 40; j++) {
        open += check1(c, "day", v, NULL) != RL_WIRE_LIMITED;
    }
    ck_assert_msg(open == 0, "%s got %d more after the flood", v, open);
    rl_client_destroy(c);
}
END_TEST

static Suite *
loss_suite(void)
{
    Suite *s = suite_create("loss");
    TCase *ab = tcase_create("abuse");
    TCase *bs = tcase_create("backstop");

    tcase_add_checked_fixture(ab, setup_abuse, teardown);
    tcase_set_timeout(ab, 240);
    tcase_add_test(ab, test_kill_under_abuse);
    suite_add_tcase(s, ab);
    tcase_add_checked_fixture(bs, setup_static, teardown);
    tcase_set_timeout(bs, 120);
    tcase_add_test(bs, test_backstop_however_long);
    tcase_add_test(bs, test_backstop_flood_gives_nothing_back);
    suite_add_tcase(s, bs);
    return s;
}

RL_TEST_MAIN(loss_suite)
