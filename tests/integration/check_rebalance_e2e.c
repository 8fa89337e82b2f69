/*
 * check_rebalance_e2e: the rebalance loop with real parts. ZooKeeper, four nodes and a
 * router with a request log; skewed (Zipf) traffic through the router; rl-rebalance reads
 * the log and writes the assignment; the router applies it live; the same traffic again
 * must spread over the nodes with max/mean <= 1.10 (read from the nodes' own STATS), where
 * before it was measurably worse. --dry-run must change nothing, and a second writer must
 * lose the compare-and-set cleanly.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reqclient.h"
#include "harness.h"
#include "rltest.h"

#define T_TIMEOUT 5000
#define NNODES 4

static struct rl_harness_zk zk;
static struct rl_harness_server nodes[NNODES];
static struct rl_harness_server router;
static int node_ports[NNODES];
static int router_port;
static char config[4096], reqlog[4096], secret[4096];
static const char *names[NNODES] = {"n1", "n2", "n3", "n4"};

static int
run(const char *const argv[], const char *logname)
{
    char log[4096];
    pid_t pid;
    int status = -1;

    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "%s", logname), 0);
    ck_assert_int_eq(rl_harness_spawn(argv, log, &pid), 0);
    ck_assert_int_eq(rl_harness_wait(pid, 120000, &status), 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        rl_harness_print_log(log, 40);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static size_t
log_lines(void)
{
    FILE *f = fopen(reqlog, "r");
    size_t n = 0;
    int c;

    if (f == NULL) {
        return 0;
    }
    while ((c = getc(f)) != EOF) {
        n += c == '\n';
    }
    fclose(f);
    return n;
}

/* Sends the same skewed traffic through the router; returns max/mean of the nodes' shares. */
static double
traffic(void)
{
    char target[64];
    int64_t before[NNODES], sum = 0, max = 0;
    const char *argv[] = {"rl-bench", "--target", target, "--service", "bench", "--keys", "20000",
                          "--dist", "zipf", "--zipf-s", "1.0", "--requests", "200000",
                          "--seed", "42", NULL};

    snprintf(target, sizeof(target), "127.0.0.1:%d", router_port);
    for (int i = 0; i < NNODES; i++) {
        before[i] = rl_test_stat(node_ports[i], "checks");
    }
    ck_assert_int_eq(run(argv, "bench.log"), 0);
    for (int i = 0; i < NNODES; i++) {
        int64_t d = rl_test_stat(node_ports[i], "checks") - before[i];

        sum += d;
        max = d > max ? d : max;
    }
    ck_assert_int_eq(sum, 200000);
    return (double)max / ((double)sum / NNODES);
}

static void
setup(void)
{
    memset(&zk, 0, sizeof(zk));
    memset(nodes, 0, sizeof(nodes));
    memset(&router, 0, sizeof(router));
    ck_assert_int_eq(rl_harness_zk_start(&zk), 0);
    for (int i = 0; i < NNODES; i++) {
        node_ports[i] = rl_harness_free_port();
    }
    router_port = rl_harness_free_port();
    ck_assert_int_eq(rl_harness_tmppath(config, sizeof(config), "cluster.conf"), 0);
    ck_assert_int_eq(rl_harness_tmppath(reqlog, sizeof(reqlog), "requests.log"), 0);
    /* The whole job runs locked down (docs/OPERATIONS.md, "Security"): the nodes take only
     * the router's AUTH, ZooKeeper only the cluster's writes, and rl-rebalance, rl-bench and
     * rl_test_stat present the secret ($RL_TOKEN_FILE). */
    ck_assert_int_eq(rl_harness_tmppath(secret, sizeof(secret), "secret"), 0);
    ck_assert_int_eq(rl_harness_write_file(secret, "rebalance-e2e-secret-0123456789\n"), 0);
    ck_assert_int_eq(chmod(secret, 0600), 0);
    ck_assert_int_eq(setenv("RL_TOKEN_FILE", secret, 1), 0);
    ck_assert_int_eq(rl_harness_write_file(config,
                                           "[cluster]\n"
                                           "name = rb\n"
                                           "secret_file = %s\n"
                                           "zookeeper = %s\n"
                                           "session_timeout = 2s\n"
                                           "shards = 64\n"
                                           "[router]\n"
                                           "deadline = 500ms\n"
                                           "request_log = %s\n"
                                           "[service bench]\n"
                                           "limit = token_bucket 1000000 per 1s\n",
                                           secret, zk.connect, reqlog),
                     0);
    for (int i = 0; i < NNODES; i++) {
        ck_assert_int_eq(rl_harness_node_start(&nodes[i], config, names[i], node_ports[i], 0), 0);
    }
    ck_assert_int_eq(rl_harness_router_start(&router, config, router_port), 0);
    for (int i = 0; i < 200 && rl_test_stat(router_port, "members") != NNODES; i++) {
        usleep(50 * 1000);
    }
    ck_assert_int_eq(rl_test_stat(router_port, "members"), NNODES);
    /* The nodes joined one after another: the shards they handed each other are in place
     * before the traffic whose every decision traffic() counts. */
    rl_test_wait_settled(nodes, NNODES, &router, 1, NNODES, 60000);
}

static void
teardown(void)
{
    unsetenv("RL_TOKEN_FILE");
    rl_harness_cleanup();
}

START_TEST(test_rebalance_levels_load)
{
    char buf[65536], out[4096];
    const char *dry[] = {"rl-rebalance", "--config", config, "--dry-run", reqlog, NULL};
    const char *apply[] = {"rl-rebalance", "--config", config, reqlog, NULL};
    const char *to_file[] = {"rl-rebalance", "--config", config, "--out", out, reqlog, NULL};
    double before, after;

    before = traffic();
    /* The router writes its log at least once a second. */
    for (int i = 0; i < 100 && log_lines() < 200000; i++) {
        usleep(100 * 1000);
    }
    ck_assert_uint_eq(log_lines(), 200000);

    ck_assert_int_eq(run(dry, "dry.log"), 0);
    ck_assert_int_eq(rl_harness_zk_get(zk.connect, "/ratelimiter/rb/assignment", buf, sizeof(buf)),
                     -ENOENT);
    ck_assert_int_eq(rl_test_stat(router_port, "assignment_version"), -1);

    ck_assert_int_eq(rl_harness_tmppath(out, sizeof(out), "assignment.txt"), 0);
    ck_assert_int_eq(run(to_file, "tofile.log"), 0);
    ck_assert_int_gt(rl_harness_read_file(out, buf, sizeof(buf)), 0);
    ck_assert_int_eq(strncmp(buf, "rl-assignment 1 64", 18), 0);
    ck_assert_int_eq(rl_harness_zk_get(zk.connect, "/ratelimiter/rb/assignment", buf, sizeof(buf)),
                     -ENOENT);

    ck_assert_int_eq(run(apply, "apply.log"), 0);
    ck_assert_int_gt(rl_harness_zk_get(zk.connect, "/ratelimiter/rb/assignment", buf, sizeof(buf)),
                     0);
    ck_assert_int_eq(strncmp(buf, "rl-assignment 1 64", 18), 0);
    for (int i = 0; i < 100 && rl_test_stat(router_port, "assignment_version") < 0; i++) {
        usleep(50 * 1000);
    }
    ck_assert_int_ge(rl_test_stat(router_port, "assignment_version"), 0);
    /* What rl-rebalance wrote is the cluster's: a stranger cannot rewrite it. */
    ck_assert_int_eq(rl_harness_zk_put(zk.connect, "/ratelimiter/rb/assignment", "x", 1), -EACCES);

    /* A second writer that planned against the assignment before the first write (none)
     * must lose the compare-and-set: exit 3, and the assignment is left as it was. */
    {
        const char *stale[] = {"rl-rebalance", "--config", config, "--expect-version", "none",
                               reqlog, NULL};
        static char again[65536];
        int64_t version = rl_test_stat(router_port, "assignment_version");
        int len = rl_harness_zk_get(zk.connect, "/ratelimiter/rb/assignment", buf, sizeof(buf));

        ck_assert_int_eq(run(stale, "stale.log"), 3);
        ck_assert_int_eq(rl_harness_zk_get(zk.connect, "/ratelimiter/rb/assignment", again,
                                           sizeof(again)),
                         len);
        ck_assert(memcmp(buf, again, (size_t)len) == 0);
        ck_assert_int_eq(rl_harness_zk_get(zk.connect, "/ratelimiter/rb/assignment.prev", again,
                                           sizeof(again)),
                         -ENOENT);
        usleep(300 * 1000);
        ck_assert_int_eq(rl_test_stat(router_port, "assignment_version"), version);
    }

    /* The assignment moved shards with their counters: in place before counting again. */
    rl_test_wait_settled(nodes, NNODES, &router, 1, NNODES, 60000);
    after = traffic();
    fprintf(stderr, "rebalance e2e: node max/mean before %.3f, after %.3f\n", before, after);
    ck_assert_msg(after <= 1.10, "after rebalancing max/mean is %.3f", after);
    ck_assert_msg(before >= after + 0.05, "before %.3f was not measurably worse than %.3f",
                  before, after);
}
END_TEST

static Suite *
rebalance_e2e_suite(void)
{
    Suite *s = suite_create("rebalance_e2e");
    TCase *tc = tcase_create("e2e");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_rebalance_levels_load);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(rebalance_e2e_suite)
