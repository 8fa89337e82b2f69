/*
 * check_workers: a router of several workers (rl-router --workers N) behaves as one process.
 * Clients are spread over the workers; STATS from any of them and /metrics count every
 * worker's requests once; a rules reload reaches every worker; THROTTLED works from every
 * worker; the failed-AUTH rate of an address is the process's, not each worker's; one node
 * and one router on loopback ports. (The failover of an owner seen by every worker is
 * check_cluster's test_node_death_and_return, whose clients use both workers of each router.)
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "clock.h"
#include "harness.h"
#include "httpget.h"
#include "reqclient.h"
#include "rltest.h"
#include "wire.h"

#define T_TIMEOUT 5000
#define WORKERS 2
#define NCLIENTS 4 /* two a worker */
#define TOKEN "workers-test-token-0123456789abcdef"

static char conf_path[PATH_MAX];
static int node_port, router_port, metrics_port;
static struct rl_harness_server node, router;

static int64_t
now_ms(void)
{
    return (int64_t)(rl_clock_mono_ns() / 1000000);
}

/* The config: one node, services "a" (and "b" when with_b), [client] tokens when auth. */
static void
write_conf(bool with_b, bool auth)
{
    char client[256] = "";

    if (auth) {
        uint8_t h[RL_AUTH_HASH_LEN];
        char hex[2 * RL_AUTH_HASH_LEN + 1];

        rl_auth_sha256(TOKEN, strlen(TOKEN), h);
        rl_auth_format_hash(h, hex);
        snprintf(client, sizeof(client), "[client web]\ntoken_sha256 = %s\nservices = *\n"
                                         "stats = yes\n",
                 hex);
    }
    ck_assert_int_eq(rl_harness_write_file(conf_path,
                                           "[cluster]\nname = wk\nshards = 64\n"
                                           "[router]\nlisten = 127.0.0.1:%d\nmetrics = %d\n"
                                           "[node n1]\nlisten = 127.0.0.1:%d\n"
                                           "%s"
                                           "[service a]\nlimit = fixed_window 1000 per 1h\n"
                                           "[service tiny]\nlimit = fixed_window 1 per 1h\n"
                                           "%s",
                                           router_port, metrics_port, node_port, client,
                                           with_b ? "[service b]\nlimit = fixed_window 1000 "
                                                    "per 1h\n"
                                                  : ""),
                     0);
}

static void
start(bool auth)
{
    node_port = rl_harness_free_port();
    router_port = rl_harness_free_port();
    metrics_port = rl_harness_free_port();
    ck_assert_int_gt(node_port, 0);
    ck_assert_int_gt(router_port, 0);
    ck_assert_int_gt(metrics_port, 0);
    ck_assert_int_eq(rl_harness_tmppath(conf_path, sizeof(conf_path), "workers.conf"), 0);
    write_conf(false, auth);
    memset(&node, 0, sizeof(node));
    memset(&router, 0, sizeof(router));
    ck_assert_int_eq(rl_harness_node_start(&node, conf_path, "n1", node_port, 0), 0);
    ck_assert_int_eq(rl_harness_router_start_workers(&router, conf_path, router_port, WORKERS),
                     0);
}

static void
teardown(void)
{
    rl_harness_cleanup();
}

/* A client that PINGed (so a worker has adopted its connection). */
static struct rl_client *
client(void)
{
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_ping(c, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_PING);
    return c;
}

static int64_t
stat_of(struct rl_client *c, const char *key)
{
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_stats(c, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_STATS);
    return rl_client_stat(&rep, key, -1);
}

/* The value of the series `series` (name and labels as printed) in /metrics; -1 if absent. */
static double
metric(const char *series)
{
    struct rl_http_resp resp;
    const char *p;
    double v = -1;
    size_t n = strlen(series);

    ck_assert_int_eq(rl_http_get(metrics_port, "/metrics", T_TIMEOUT, &resp), 0);
    ck_assert_int_eq(resp.status, 200);
    for (p = resp.body; (p = strstr(p, series)) != NULL; p += n) {
        if ((p == resp.body || p[-1] == '\n') && p[n] == ' ') {
            v = strtod(p + n + 1, NULL);
            break;
        }
    }
    rl_http_free(&resp);
    return v;
}

static uint32_t
check_code(struct rl_client *c, const char *svc, const char *user)
{
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_check(c, svc, user, NULL, 1, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
    return rep.check.code;
}

/* Connections go to the worker with the fewest: NCLIENTS clients, NCLIENTS / WORKERS each. */
START_TEST(test_connections_spread)
{
    struct rl_client *c[NCLIENTS];
    char series[64];

    start(false);
    for (int i = 0; i < NCLIENTS; i++) {
        c[i] = client();
    }
    RL_CHECK(metric("rl_router_workers") == WORKERS, "rl_router_workers %g",
             metric("rl_router_workers"));
    for (int w = 0; w < WORKERS; w++) {
        snprintf(series, sizeof(series), "rl_router_worker_connections{worker=\"%d\"}", w);
        RL_CHECK(metric(series) == NCLIENTS / WORKERS, "%s is %g, not %d", series,
                 metric(series), NCLIENTS / WORKERS);
    }
    ck_assert_int_eq(stat_of(c[0], "workers"), WORKERS);
    ck_assert_int_eq(stat_of(c[0], "connections"), NCLIENTS);
    for (int i = 0; i < NCLIENTS; i++) {
        rl_client_destroy(c[i]);
    }
}
END_TEST

/* Every client's CHECKs are counted once, whichever worker served them, in STATS from every
 * client (each worker answers its own clients' STATS) and in /metrics. */
START_TEST(test_stats_summed)
{
    enum { PER_CLIENT = 5 };
    struct rl_client *c[NCLIENTS];
    char user[32];

    start(false);
    for (int i = 0; i < NCLIENTS; i++) {
        c[i] = client();
    }
    for (int i = 0; i < NCLIENTS; i++) {
        for (int k = 0; k < PER_CLIENT; k++) {
            snprintf(user, sizeof(user), "u%d-%d", i, k);
            ck_assert_uint_eq(check_code(c[i], "a", user), RL_WIRE_ALLOWED);
        }
    }
    for (int i = 0; i < NCLIENTS; i++) {
        RL_CHECK_INT_EQ(stat_of(c[i], "checks"), NCLIENTS * PER_CLIENT);
        RL_CHECK_INT_EQ(stat_of(c[i], "forwarded"), NCLIENTS * PER_CLIENT);
        RL_CHECK_INT_EQ(stat_of(c[i], "allowed"), NCLIENTS * PER_CLIENT);
        RL_CHECK_INT_EQ(stat_of(c[i], "node.n1.forwarded"), NCLIENTS * PER_CLIENT);
        RL_CHECK_INT_EQ(stat_of(c[i], "node.n1.up"), 1);
    }
    RL_CHECK(metric("rl_router_decisions_total{service=\"a\",code=\"allowed\"}") ==
                 NCLIENTS * PER_CLIENT,
             "decisions %g", metric("rl_router_decisions_total{service=\"a\",code=\"allowed\"}"));
    RL_CHECK(metric("rl_router_request_duration_seconds_count") == NCLIENTS * PER_CLIENT,
             "histogram count %g", metric("rl_router_request_duration_seconds_count"));
    RL_CHECK(metric("rl_router_forwarded_total{node=\"n1\"}") == NCLIENTS * PER_CLIENT,
             "forwarded %g", metric("rl_router_forwarded_total{node=\"n1\"}"));
    for (int i = 0; i < NCLIENTS; i++) {
        rl_client_destroy(c[i]);
    }
}
END_TEST

/* A new service put in force by SIGHUP is known to every worker: each client (two a worker)
 * gets a decision for it, not NO_RULE. */
START_TEST(test_rules_reach_every_worker)
{
    struct rl_client *c[NCLIENTS];
    int64_t end;

    start(false);
    for (int i = 0; i < NCLIENTS; i++) {
        c[i] = client();
        ck_assert_uint_eq(check_code(c[i], "b", "x"), RL_WIRE_NO_RULE);
    }
    write_conf(true, false);
    ck_assert_int_eq(kill(router.pid, SIGHUP), 0);
    ck_assert_int_eq(kill(node.pid, SIGHUP), 0);
    for (int i = 0; i < NCLIENTS; i++) {
        end = now_ms() + T_TIMEOUT;
        while (check_code(c[i], "b", "x") == RL_WIRE_NO_RULE) {
            RL_CHECK(now_ms() < end, "client %d (worker %d): service b still unknown", i,
                     i % WORKERS);
            usleep(20 * 1000);
        }
        ck_assert_uint_eq(check_code(c[i], "b", "y"), RL_WIRE_ALLOWED);
    }
    /* Each worker reloaded once: the counters are the process's, not summed. */
    ck_assert_int_eq(stat_of(c[0], "rules_reloads"), 1);
    for (int i = 0; i < NCLIENTS; i++) {
        rl_client_destroy(c[i]);
    }
}
END_TEST

/* THROTTLED from a client of either worker reaches the node through that worker's own
 * connections and lists the episode opened through the other worker. */
START_TEST(test_throttled_from_every_worker)
{
    struct rl_client *c[NCLIENTS];
    struct rl_wire_reply *rep = malloc(sizeof(*rep));

    ck_assert_ptr_nonnull(rep);
    start(false);
    for (int i = 0; i < NCLIENTS; i++) {
        c[i] = client();
    }
    /* "tiny" allows one an hour: the second CHECK opens an episode (through worker 0). */
    ck_assert_uint_eq(check_code(c[0], "tiny", "mallory"), RL_WIRE_ALLOWED);
    ck_assert_uint_eq(check_code(c[0], "tiny", "mallory"), RL_WIRE_LIMITED);
    for (int i = 0; i < NCLIENTS; i++) {
        ck_assert_int_eq(rl_client_throttled(c[i], NULL, NULL, 0, rep, T_TIMEOUT), 0);
        RL_CHECK(rep->op == RL_WIRE_OP_THROTTLED, "client %d: op %u", i, rep->op);
        ck_assert_uint_eq(rep->nmissing, 0);
        RL_CHECK(rep->nepisodes == 1, "client %d: %zu episodes", i, (size_t)rep->nepisodes);
        ck_assert(rep->episodes[0].user.len == 7 &&
                  memcmp(rep->episodes[0].user.ptr, "mallory", 7) == 0);
    }
    for (int i = 0; i < NCLIENTS; i++) {
        rl_client_destroy(c[i]);
    }
    free(rep);
}
END_TEST

/*
 * Wrong tokens from one address on connections spread over both workers: the address is
 * refused after RL_CONN_AUTHFAIL_BURST failures of the process (each worker alone would have
 * seen half as many and let it go on).
 */
START_TEST(test_auth_failures_shared)
{
    enum { TRIES = 14 };
    struct rl_wire_reply rep;
    int refused_at = -1;

    start(true);
    for (int i = 0; i < TRIES && refused_at < 0; i++) {
        struct rl_client *c = NULL;
        int rc;

        ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT),
                         0);
        rc = rl_client_auth(c, "wrong-token-wrong-token-wrong-token", 35, &rep, T_TIMEOUT);
        if (rc == 0 || (rep.op == RL_WIRE_OP_ERROR && rep.message.ptr != NULL &&
                        memmem(rep.message.ptr, rep.message.len, "too many failed AUTHs",
                               21) != NULL)) {
            RL_CHECK(rc != 0, "a wrong token was taken");
            refused_at = i;
        }
        rl_client_destroy(c);
    }
    /* The burst is 10: the 11th try (index 10) is refused, give or take one in flight. */
    RL_CHECK(refused_at >= 9 && refused_at <= 11, "refused at try %d, not about 10",
             refused_at);
    {
        struct rl_client *c = NULL;

        ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT),
                         0);
        ck_assert_int_ne(rl_client_auth(c, TOKEN, strlen(TOKEN), &rep, T_TIMEOUT), 0);
        rl_client_destroy(c);
    }
}
END_TEST

static Suite *
workers_suite(void)
{
    Suite *s = suite_create("workers");
    TCase *tc = tcase_create("workers");

    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_connections_spread);
    tcase_add_test(tc, test_stats_summed);
    tcase_add_test(tc, test_rules_reach_every_worker);
    tcase_add_test(tc, test_throttled_from_every_worker);
    tcase_add_test(tc, test_auth_failures_shared);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(workers_suite)
