/*
 * check_rules_live: changing rules on a running cluster (docs/OPERATIONS.md, "Changing rules
 * live") with real processes. With ZooKeeper, two nodes and two routers: `rl-cli rules push`
 * of a file that changes service b's limit only, while CHECKs keep flowing: every user of a
 * continues from its count, every user of b carries its count over to b's new limit (and,
 * for each of the six algorithms, 3 spent of `3 per 1h` leave 997 of `1000 per 1h`, by a
 * push and by SIGHUP), an invalid
 * file is refused whole (rl-cli exits 2 naming FILE:LINE, the version stays), and every
 * process's STATS rules_version and rules_digest converge. With static membership: SIGHUP
 * after editing the config does the same, and a config that does not load is refused.
 * Nodes run with the test clock fixed, so counts are exact.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "httpget.h"
#include "reqclient.h"
#include "harness.h"
#include "rltest.h"

#define T_TIMEOUT 5000
#define NNODES 2
#define NUSERS 20
#define USES 5
#define NOW_MS 1700000000000ull

static struct rl_harness_zk zk;
static struct rl_harness_server nodes[NNODES];
static struct rl_harness_server routers[2];
static int node_ports[NNODES];
static int router_ports[2];
static char config[4096];
static const char *names[NNODES] = {"n1", "n2"};
static char metrics_keys[2][64]; /* "metrics = ..." lines of [router] and [node n1], or "" */

static void
set_node_clock(int i)
{
    struct rl_client *c = NULL;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)node_ports[i], T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_clock(c, NOW_MS, T_TIMEOUT), 0);
    rl_client_destroy(c);
}

/* One CHECK through router r: its code, and its remaining in *rem. */
static uint32_t
check_via(int r, const char *svc, const char *user, uint64_t *rem)
{
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_ports[r], T_TIMEOUT),
                     0);
    ck_assert_int_eq(rl_client_check(c, svc, user, NULL, 1, &rep, T_TIMEOUT), 0);
    rl_client_destroy(c);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
    if (rem != NULL) {
        *rem = rep.check.remaining;
    }
    return rep.check.code;
}

/* Runs rl-cli with args; returns its exit status, its stdout and stderr in out. */
static int
cli(char *out, size_t len, const char *const argv[])
{
    int rc = rl_harness_run(argv, out, len, 20000);

    ck_assert_msg(rc >= 0, "%s did not run to its end: %d", argv[0], rc);
    return rc;
}

/* Every process's STATS key, nodes then routers; -2 for a process not running. */
static void
all_stats(const char *key, int64_t *v, int nn, int nr)
{
    for (int i = 0; i < nn; i++) {
        v[i] = rl_test_stat(node_ports[i], key);
    }
    for (int r = 0; r < nr; r++) {
        v[nn + r] = rl_test_stat(router_ports[r], key);
    }
}

/* Waits until every process reports key == want; fails after timeout_ms. */
static void
wait_all(const char *key, int64_t want, int nn, int nr, int timeout_ms)
{
    int64_t v[NNODES + 2];

    for (int waited = 0;; waited += 50) {
        bool ok = true;

        all_stats(key, v, nn, nr);
        for (int i = 0; i < nn + nr; i++) {
            ok = ok && v[i] == want;
        }
        if (ok) {
            return;
        }
        if (waited >= timeout_ms) {
            ck_abort_msg("%s: want %lld, have %lld %lld %lld %lld", key, (long long)want,
                         (long long)v[0], (long long)v[1], (long long)v[2],
                         (long long)(nn + nr > 3 ? v[3] : 0));
        }
        usleep(50 * 1000);
    }
}

/* Both routers route every shard (their CHECKs get answers, not failure policy). */
static void
wait_routable(void)
{
    rl_test_wait_settled(nodes, NNODES, routers, 2, NNODES, 60000);
    for (int i = 0; i < 200; i++) {
        bool ok = true;

        for (int r = 0; r < 2; r++) {
            ok = ok && rl_test_stat(router_ports[r], "members") == NNODES;
        }
        for (int u = 0; ok && u < 10; u++) {
            char user[32];

            snprintf(user, sizeof(user), "probe%d", u);
            for (int r = 0; ok && r < 2; r++) {
                ok = check_via(r, "probe", user, NULL) == RL_WIRE_ALLOWED;
            }
        }
        if (ok) {
            return;
        }
        usleep(50 * 1000);
    }
    ck_abort_msg("the routers never routed to both nodes");
}

/* Uses every user of a and b USES times, alternating routers. */
static void
use_all(void)
{
    char user[32];
    uint64_t rem;

    for (int u = 0; u < NUSERS; u++) {
        for (int k = 0; k < USES; k++) {
            snprintf(user, sizeof(user), "a%d", u);
            ck_assert_uint_eq(check_via(k % 2, "a", user, &rem), RL_WIRE_ALLOWED);
            ck_assert_uint_eq(rem, 100u - (uint64_t)k - 1);
            snprintf(user, sizeof(user), "b%d", u);
            ck_assert_uint_eq(check_via(k % 2, "b", user, &rem), RL_WIRE_ALLOWED);
            ck_assert_uint_eq(rem, 50u - (uint64_t)k - 1);
        }
    }
}

/* After b became 80 per hour: a continues from USES, b too under its new limit. */
static void
assert_after_switch(void)
{
    char user[32];
    uint64_t rem;

    for (int u = 0; u < NUSERS; u++) {
        snprintf(user, sizeof(user), "a%d", u);
        ck_assert_uint_eq(check_via(u % 2, "a", user, &rem), RL_WIRE_ALLOWED);
        ck_assert_msg(rem == 100u - USES - 1, "a%d: remaining %llu, not %u: its count was lost",
                      u, (unsigned long long)rem, 100u - USES - 1);
        snprintf(user, sizeof(user), "b%d", u);
        ck_assert_uint_eq(check_via(u % 2, "b", user, &rem), RL_WIRE_ALLOWED);
        ck_assert_msg(rem == 80u - USES - 1,
                      "b%d: remaining %llu, not %u: its count was not carried over", u,
                      (unsigned long long)rem, 80u - USES - 1);
    }
}

/* ---- traffic during the change ------------------------------------------------------------ */

static atomic_int traffic_stop;
static atomic_int traffic_bad;
static atomic_int traffic_done;

/* CHECKs of service a (users t0..t49, far below the limit) through router 1 until stopped:
 * every one must be decided (ALLOWED), none answered by failure policy or ERROR. */
static void *
traffic(void *arg)
{
    struct rl_client *c = NULL;
    char user[32];

    (void)arg;
    if (rl_client_connect(&c, "127.0.0.1", (uint16_t)router_ports[1], T_TIMEOUT) != 0) {
        atomic_fetch_add(&traffic_bad, 1);
        return NULL;
    }
    for (int i = 0; !atomic_load(&traffic_stop) && i < 100000; i++) {
        struct rl_wire_reply rep;

        snprintf(user, sizeof(user), "t%d", i % 50);
        if (rl_client_check(c, "a", user, NULL, 0, &rep, T_TIMEOUT) != 0 ||
            rep.op != RL_WIRE_OP_CHECK || rep.check.code != RL_WIRE_ALLOWED) {
            atomic_fetch_add(&traffic_bad, 1);
        }
        atomic_fetch_add(&traffic_done, 1);
        usleep(2000);
    }
    rl_client_destroy(c);
    return NULL;
}

/* ---- ZooKeeper: rl-cli rules push --------------------------------------------------------- */

static void
zk_setup(void)
{
    rl_test_cluster_prepare(&zk, nodes, node_ports, NNODES, routers, router_ports, 2);
    ck_assert_int_eq(rl_harness_tmppath(config, sizeof(config), "cluster.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(config,
                                           "[cluster]\n"
                                           "name = rules\n"
                                           "zookeeper = %s\n"
                                           "session_timeout = 2s\n"
                                           "shards = 64\n"
                                           "[router]\n"
                                           "deadline = 2s\n"
                                           "[service a]\n"
                                           "limit = fixed_window 100 per 1h\n"
                                           "[service b]\n"
                                           "limit = fixed_window 50 per 1h\n"
                                           "[service probe]\n"
                                           "limit = fixed_window 1000000 per 1h\n",
                                           zk.connect),
                     0);
    for (int i = 0; i < NNODES; i++) {
        ck_assert_int_eq(rl_harness_node_start(&nodes[i], config, names[i], node_ports[i],
                                               RL_HARNESS_TEST_CLOCK),
                         0);
        set_node_clock(i);
    }
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(rl_harness_router_start(&routers[i], config, router_ports[i]), 0);
    }
    wait_routable();
}

static void
teardown(void)
{
    rl_harness_cleanup();
}

START_TEST(test_push)
{
    char bad[PATH_MAX], good[PATH_MAX], out[8192];
    int64_t d[NNODES + 2];
    pthread_t th;

    ck_assert_int_eq(rl_harness_tmppath(bad, sizeof(bad), "bad.rules"), 0);
    ck_assert_int_eq(rl_harness_tmppath(good, sizeof(good), "good.rules"), 0);
    wait_all("rules_version", 0, NNODES, 2, T_TIMEOUT);
    use_all();

    atomic_store(&traffic_stop, 0);
    atomic_store(&traffic_bad, 0);
    atomic_store(&traffic_done, 0);
    ck_assert_int_eq(pthread_create(&th, NULL, traffic, NULL), 0);

    /* Refused whole: nothing is written, every process keeps version 0. */
    ck_assert_int_eq(rl_harness_write_file(bad,
                                           "[service a]\n"
                                           "limit = fixed_window 100 per 1h\n"
                                           "[service b]\n"
                                           "limit = fixed_window 80 per\n"),
                     0);
    {
        const char *argv[] = {"rl-cli", "rules", "push", bad, "--config", config, NULL};
        char want[PATH_MAX + 64];

        ck_assert_int_eq(cli(out, sizeof(out), argv), 2);
        snprintf(want, sizeof(want), "%s:4: limit:", bad);
        ck_assert_msg(strstr(out, want) != NULL, "no %s in: %s", want, out);
    }
    ck_assert_int_eq(rl_harness_zk_get(zk.connect, "/ratelimiter/rules/rules", out, sizeof(out)),
                     -ENOENT);
    ck_assert_int_eq(rl_harness_write_file(bad, "[service b]\nlimit = gcra 1 per 1s\n"
                                                "[router]\ndeadline = 1s\n"),
                     0);
    {
        const char *argv[] = {"rl-cli", "rules", "push", bad, "--config", config, NULL};
        char want[PATH_MAX + 64];

        ck_assert_int_eq(cli(out, sizeof(out), argv), 2);
        snprintf(want, sizeof(want), "%s:3: [router] in a rules file", bad);
        ck_assert_msg(strstr(out, want) != NULL, "no %s in: %s", want, out);
    }

    /* b changes, a does not (it moves below b, which keeps its counts all the same). */
    ck_assert_int_eq(rl_harness_write_file(good,
                                           "; rules pushed by the test\n"
                                           "[service probe]\n"
                                           "limit = fixed_window 1000000 per 1h\n"
                                           "[service b]\n"
                                           "limit = fixed_window 80 per 1h\n"
                                           "[service a]\n"
                                           "limit = fixed_window 100 per 1h\n"),
                     0);
    {
        const char *argv[] = {"rl-cli", "rules", "push", good, "--config", config, NULL};

        ck_assert_int_eq(cli(out, sizeof(out), argv), 0);
        ck_assert_msg(strstr(out, "rules_version 1") != NULL, "%s", out);
    }
    wait_all("rules_version", 1, NNODES, 2, 5000);
    all_stats("rules_digest", d, NNODES, 2);
    for (int i = 1; i < NNODES + 2; i++) {
        ck_assert_int_eq(d[i], d[0]);
    }
    wait_all("rules_reloads", 1, NNODES, 2, T_TIMEOUT);
    wait_all("rules_reload_failures", 0, NNODES, 2, T_TIMEOUT);
    usleep(100 * 1000);
    atomic_store(&traffic_stop, 1);
    pthread_join(th, NULL);
    ck_assert_int_gt(atomic_load(&traffic_done), 10);
    ck_assert_int_eq(atomic_load(&traffic_bad), 0);

    assert_after_switch();

    {
        const char *argv[] = {"rl-cli", "rules", "show", "--config", config, NULL};
        char want[64];

        ck_assert_int_eq(cli(out, sizeof(out), argv), 0);
        snprintf(want, sizeof(want), "rules_digest %lld", (long long)d[0]);
        ck_assert_msg(strstr(out, "znode version 0, rules_version 1") != NULL, "%s", out);
        ck_assert_msg(strstr(out, want) != NULL, "%s", out);
        ck_assert_msg(strstr(out, "limit = fixed_window 80 per 1h") != NULL, "%s", out);
    }

    /* envoyproxy/ratelimit's YAML given to `rules`: checked and pushed as `envoy` does it,
     * to its own znode; the rules znode is left as it is. */
    {
        char yaml[PATH_MAX];
        const char *bad_argv[] = {"rl-cli", "rules", "check", yaml, NULL};
        const char *argv[] = {"rl-cli", "rules", "push", yaml, "--config", config, NULL};
        char want[PATH_MAX + 64];

        ck_assert_int_eq(rl_harness_tmppath(yaml, sizeof(yaml), "edge.yaml"), 0);
        ck_assert_int_eq(rl_harness_write_file(yaml, "domain: edge\ndescriptors:\n"
                                                     "  - key: k\n    rate_limit:\n"
                                                     "      unit: fortnight\n"
                                                     "      requests_per_unit: 5\n"),
                         0);
        ck_assert_int_eq(cli(out, sizeof(out), bad_argv), 2);
        snprintf(want, sizeof(want), "%s:5:", yaml);
        ck_assert_msg(strstr(out, want) != NULL, "no %s in: %s", want, out);
        ck_assert_int_eq(rl_harness_write_file(yaml, "domain: edge\ndescriptors:\n"
                                                     "  - key: k\n    rate_limit:\n"
                                                     "      unit: minute\n"
                                                     "      requests_per_unit: 5\n"),
                         0);
        ck_assert_int_eq(cli(out, sizeof(out), argv), 0);
        ck_assert_int_gt(
            rl_harness_zk_get(zk.connect, "/ratelimiter/rules/envoy", out, sizeof(out)), 0);
        ck_assert_msg(strstr(out, "domain: edge") != NULL, "%s", out);
        ck_assert_int_gt(
            rl_harness_zk_get(zk.connect, "/ratelimiter/rules/rules", out, sizeof(out)), 0);
        ck_assert_msg(strstr(out, "limit = fixed_window 80 per 1h") != NULL, "%s", out);
    }

    /* A SIGHUP now only says the rules come from ZooKeeper. */
    ck_assert_int_eq(kill(nodes[0].pid, SIGHUP), 0);
    ck_assert_int_eq(kill(routers[0].pid, SIGHUP), 0);
    usleep(300 * 1000);
    wait_all("rules_version", 1, NNODES, 2, T_TIMEOUT);
    wait_all("rules_reloads", 1, NNODES, 2, T_TIMEOUT);

    /* Something that is not rules written to the znode behind rl-cli's back: refused by
     * every process, which keeps version 1. */
    ck_assert_int_eq(rl_harness_zk_put(zk.connect, "/ratelimiter/rules/rules", "[node x]\n", 9),
                     0);
    wait_all("rules_reload_failures", 1, NNODES, 2, 5000);
    wait_all("rules_version", 1, NNODES, 2, T_TIMEOUT);
    {
        char user[32];
        uint64_t rem;

        snprintf(user, sizeof(user), "b%d", 0);
        ck_assert_uint_eq(check_via(0, "b", user, &rem), RL_WIRE_ALLOWED);
        ck_assert_uint_eq(rem, 80u - USES - 2);
    }
}
END_TEST

/* ---- static membership: SIGHUP ------------------------------------------------------------ */

static void
write_static(int b_limit, const char *extra)
{
    ck_assert_int_eq(rl_harness_write_file(config,
                                           "[cluster]\n"
                                           "shards = 64\n"
                                           "[router]\n"
                                           "deadline = 2s\n"
                                           "workers = 1\n" /* see PARSE_ANSWERS_MIN */
                                           "%s"
                                           "[node n1]\n"
                                           "listen = 127.0.0.1:%d\n"
                                           "%s"
                                           "[service a]\n"
                                           "limit = fixed_window 100 per 1h\n"
                                           "[service b]\n"
                                           "limit = fixed_window %d per 1h\n"
                                           "[service probe]\n"
                                           "limit = fixed_window 1000000 per 1h\n"
                                           "%s",
                                           metrics_keys[0], node_ports[0], metrics_keys[1],
                                           b_limit, extra),
                     0);
}

static void
static_setup(void)
{
    metrics_keys[0][0] = metrics_keys[1][0] = '\0';
    memset(nodes, 0, sizeof(nodes));
    memset(routers, 0, sizeof(routers));
    node_ports[0] = rl_harness_free_port();
    router_ports[0] = rl_harness_free_port();
    router_ports[1] = router_ports[0];
    ck_assert_int_eq(rl_harness_tmppath(config, sizeof(config), "static.conf"), 0);
    write_static(50, "");
    ck_assert_int_eq(rl_harness_node_start(&nodes[0], config, "n1", node_ports[0],
                                           RL_HARNESS_TEST_CLOCK),
                     0);
    set_node_clock(0);
    ck_assert_int_eq(rl_harness_router_start(&routers[0], config, router_ports[0]), 0);
    for (int i = 0; check_via(0, "probe", "p", NULL) != RL_WIRE_ALLOWED; i++) {
        ck_assert_int_lt(i, 200);
        usleep(50 * 1000);
    }
}

/* SIGHUP to the node and the router with the config as written: refused (their
 * rules_reload_failures reach `failures`), the rules of digest `digest` stay in force. */
static void
sighup_refused(int failures, int64_t digest)
{
    int64_t d[2];

    ck_assert_int_eq(kill(nodes[0].pid, SIGHUP), 0);
    ck_assert_int_eq(kill(routers[0].pid, SIGHUP), 0);
    wait_all("rules_reload_failures", failures, 1, 1, 5000);
    all_stats("rules_digest", d, 1, 1);
    ck_assert_int_eq(d[0], digest);
    ck_assert_int_eq(d[1], digest);
}

START_TEST(test_sighup)
{
    int64_t d0[2], d1[2];

    wait_all("rules_version", 0, 1, 1, T_TIMEOUT);
    all_stats("rules_digest", d0, 1, 1);
    ck_assert_int_eq(d0[0], d0[1]);
    use_all();

    /* A config that does not load: refused whole, nothing changes. */
    write_static(80, "[service c]\nlimit = fixed_window 10 per\n");
    sighup_refused(1, d0[0]);

    /* A file cut to nothing: no [service] section, which would make every CHECK NO_RULE
     * (allowed): refused too, the rules in force stay (before, taken: every limit lifted). */
    ck_assert_int_eq(rl_harness_write_file(config, "%s", ""), 0);
    sighup_refused(2, d0[0]);
    ck_assert_uint_eq(check_via(0, "b", "empty-file", NULL),
                      RL_WIRE_ALLOWED); /* ruled, not NO_RULE */

    /* b's limit changes: a keeps its counts, b carries them over to its new limit. */
    write_static(80, "");
    ck_assert_int_eq(kill(nodes[0].pid, SIGHUP), 0);
    ck_assert_int_eq(kill(routers[0].pid, SIGHUP), 0);
    wait_all("rules_reloads", 1, 1, 1, 5000);
    wait_all("rules_version", 0, 1, 1, T_TIMEOUT);
    all_stats("rules_digest", d1, 1, 1);
    ck_assert_int_ne(d1[0], d0[0]);
    ck_assert_int_eq(d1[1], d1[0]);
    assert_after_switch();

    /* The same rules again (a log rotation): nothing to switch. */
    ck_assert_int_eq(kill(nodes[0].pid, SIGHUP), 0);
    usleep(300 * 1000);
    ck_assert_int_eq(rl_test_stat(node_ports[0], "rules_reloads"), 1);
    ck_assert_int_eq(rl_harness_server_stop(&nodes[0], SIGTERM, 10000), 0);
    ck_assert(WIFEXITED(nodes[0].status) && WEXITSTATUS(nodes[0].status) == 0);
}
END_TEST

/* ---- a new limit keeps what was consumed, for every algorithm ----------------------------- */

static const char *const carry_algos[] = {"fixed_window",  "sliding_window_log",
                                          "sliding_window_counter", "token_bucket",
                                          "gcra",          "leaky_bucket"};

/* The [service] sections c0..c5, one per algorithm, `ALGO n per 1h` each, into buf. */
static void
carry_rules(char *buf, size_t len, unsigned n)
{
    size_t at = 0;

    buf[0] = '\0';
    for (int i = 0; i < 6; i++) {
        at += (size_t)snprintf(buf + at, len - at, "[service c%d]\nlimit = %s %u per 1h\n", i,
                               carry_algos[i], n);
    }
}

/* One CHECK of cost through router r; its code and remaining. */
static uint32_t
check_cost_via(int r, const char *svc, const char *user, uint32_t cost, uint64_t *rem)
{
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_ports[r], T_TIMEOUT),
                     0);
    ck_assert_int_eq(rl_client_check(c, svc, user, NULL, cost, &rep, T_TIMEOUT), 0);
    rl_client_destroy(c);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
    *rem = rep.check.remaining;
    return rep.check.code;
}

/* Every user of c0..c5 spends all 3, alternating routers, and is refused the 4th. */
static void
carry_spend(void)
{
    char svc[8], user[16];
    uint64_t rem;

    for (int i = 0; i < 6; i++) {
        snprintf(svc, sizeof(svc), "c%d", i);
        for (int u = 0; u < NUSERS; u++) {
            snprintf(user, sizeof(user), "v%d", u);
            for (int k = 0; k < 3; k++) {
                uint32_t code = check_cost_via(k % 2, svc, user, 1, &rem);

                ck_assert_uint_ne(code, RL_WIRE_LIMITED);
            }
            ck_assert_msg(check_cost_via(u % 2, svc, user, 1, &rem) == RL_WIRE_LIMITED,
                          "%s (%s), %s: a 4th of 3 was not refused", svc, carry_algos[i], user);
        }
    }
}

/* Once `1000 per 1h` is in force: 997 left for every user of every algorithm. */
static void
carry_assert_997(void)
{
    char svc[8], user[16];
    uint64_t rem;

    for (int i = 0; i < 6; i++) {
        snprintf(svc, sizeof(svc), "c%d", i);
        for (int u = 0; u < NUSERS; u++) {
            snprintf(user, sizeof(user), "v%d", u);
            ck_assert_uint_eq(check_cost_via(u % 2, svc, user, 0, &rem), RL_WIRE_ALLOWED);
            ck_assert_msg(rem == 997, "%s (%s), %s: remaining %llu, not 997", svc,
                          carry_algos[i], user, (unsigned long long)rem);
        }
    }
}

/* With ZooKeeper: `3 per 1h` pushed, spent, `1000 per 1h` pushed: 997 left on both nodes.
 * (The nodes started without a sliding_window_log tier, so c1's logs are degraded to
 * counters here; the static case below keeps real logs.) */
START_TEST(test_push_carries_over)
{
    char path[PATH_MAX], text[1024], out[8192];
    const char *argv[] = {"rl-cli", "rules", "push", path, "--config", config, NULL};

    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "carry.rules"), 0);
    carry_rules(text, sizeof(text), 3);
    ck_assert_int_eq(rl_harness_write_file(path, "%s", text), 0);
    ck_assert_int_eq(cli(out, sizeof(out), argv), 0);
    wait_all("rules_version", 1, NNODES, 2, 5000);
    carry_spend();
    carry_rules(text, sizeof(text), 1000);
    ck_assert_int_eq(rl_harness_write_file(path, "%s", text), 0);
    ck_assert_int_eq(cli(out, sizeof(out), argv), 0);
    wait_all("rules_version", 2, NNODES, 2, 5000);
    carry_assert_997();
    /* lowered to 2: nobody's use is lifted (3 spent of 2: refused) */
    carry_rules(text, sizeof(text), 2);
    ck_assert_int_eq(rl_harness_write_file(path, "%s", text), 0);
    ck_assert_int_eq(cli(out, sizeof(out), argv), 0);
    wait_all("rules_version", 3, NNODES, 2, 5000);
    for (int i = 0; i < 6; i++) {
        char svc[8];
        uint64_t rem;

        snprintf(svc, sizeof(svc), "c%d", i);
        ck_assert_uint_eq(check_cost_via(i % 2, svc, "v0", 1, &rem), RL_WIRE_LIMITED);
        ck_assert_uint_eq(rem, 0);
    }
}
END_TEST

/* Static membership: the node starts with `3 per 1h` (so with log memory), the users spend
 * it, the config gets `1000 per 1h` and a SIGHUP: 997 left. */
static void
carry_static_setup(void)
{
    char extra[1024];

    static_setup();
    carry_rules(extra, sizeof(extra), 3);
    ck_assert_int_eq(rl_harness_server_stop(&nodes[0], SIGTERM, 10000), 0);
    write_static(50, extra);
    ck_assert_int_eq(rl_harness_node_start(&nodes[0], config, "n1", node_ports[0],
                                           RL_HARNESS_TEST_CLOCK),
                     0);
    set_node_clock(0);
    ck_assert_int_eq(kill(routers[0].pid, SIGHUP), 0);
    wait_all("rules_reloads", 1, 0, 1, 5000);
    for (int i = 0; check_via(0, "probe", "p", NULL) != RL_WIRE_ALLOWED; i++) {
        ck_assert_int_lt(i, 200);
        usleep(50 * 1000);
    }
}

START_TEST(test_sighup_carries_over)
{
    char extra[1024];

    carry_spend();
    carry_rules(extra, sizeof(extra), 1000);
    write_static(50, extra);
    ck_assert_int_eq(kill(nodes[0].pid, SIGHUP), 0);
    ck_assert_int_eq(kill(routers[0].pid, SIGHUP), 0);
    wait_all("rules_reloads", 1, 1, 0, 5000);
    wait_all("rules_reloads", 2, 0, 1, 5000);
    ck_assert_int_eq(rl_test_stat(node_ports[0], "log_degraded"), 0);
    carry_assert_997();
}
END_TEST

/* ---- a large rules file: the loop keeps answering ----------------------------------------- */

/*
 * How long a loop stalls while a large file is put in force is a figure of the machine
 * (bench/loop_stalls.sh, docs/BENCHMARKS.md "Large rule sets"): these tests print it and
 * assert the mechanism instead. The parse runs on libuv's thread pool, so the loop keeps
 * answering while it runs: a probe sending STATS back to back after the SIGHUP gets
 * answers that still show the rules_reloads of before (the swap, on the loop, is what bumps
 * it). A parse on the loop allows hardly any such answer (the one the loop wrote in the
 * turn that read the signal; the router's acceptor, which reads it, hands the parse on, a few
 * more): with rules.c made to parse inline, 0-2 (node) and 0-16 (router, one worker) in
 * every run. A parse off the loop allows as many as round trips fit in it: 500 to 19,000 at
 * load averages of 5 to 16, since the parse and the round trips slow down together. The
 * router runs one worker, so the probe's STATS are answered by the loop that swaps.
 */
#define BIG_SERVICES 20000
#define HUGE_SERVICES 60000
#define PARSE_ANSWERS_MIN 100 /* STATS answered during the parse (on the loop: 16 at most) */

struct big_probe {
    atomic_bool stop;
    int port;
    uint64_t worst_ms;
    uint64_t pings;
    atomic_bool armed;      /* the probe is to SIGHUP hup_pid, then ask STATS */
    pid_t hup_pid;
    int64_t reloads_before; /* rules_reloads before it */
    uint64_t during;        /* answers after the SIGHUP, before the swap */
    bool hupped;
    atomic_bool swapped;
};

static uint64_t
mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/*
 * PINGs one process on one connection; the slowest answer in worst_ms (printed, not
 * asserted). Once armed, SIGHUPs hup_pid and sends STATS back to back until its
 * rules_reloads passes reloads_before, counting the answers that came before that in during.
 */
static void *
big_probe_main(void *arg)
{
    struct big_probe *b = arg;
    struct rl_client *c = NULL;
    struct rl_wire_reply *rep = malloc(sizeof(*rep));

    if (rep == NULL || rl_client_connect(&c, "127.0.0.1", (uint16_t)b->port, T_TIMEOUT) != 0) {
        b->worst_ms = UINT64_MAX;
        free(rep);
        return NULL;
    }
    while (!atomic_load(&b->stop)) {
        uint64_t t0 = mono_ms(), d;
        bool busy = atomic_load(&b->armed) && !atomic_load(&b->swapped);

        if (busy) {
            if (!b->hupped && kill(b->hup_pid, SIGHUP) != 0) {
                b->worst_ms = UINT64_MAX;
                break;
            }
            b->hupped = true;
            if (rl_client_stats(c, rep, T_TIMEOUT) != 0) {
                b->worst_ms = UINT64_MAX;
                break;
            }
            if (rl_client_stat(rep, "rules_reloads", -1) > b->reloads_before) {
                atomic_store(&b->swapped, true);
            } else {
                b->during++;
            }
            continue;
        }
        if (rl_client_ping(c, rep, T_TIMEOUT) != 0) {
            b->worst_ms = UINT64_MAX;
            break;
        }
        d = mono_ms() - t0;
        b->worst_ms = d > b->worst_ms ? d : b->worst_ms;
        b->pings++;
        usleep(2000);
    }
    rl_client_destroy(c);
    free(rep);
    return NULL;
}

/* The config with n more services s00000 .., limits base .. base + 6 */
static void
write_many(unsigned n, unsigned base)
{
    size_t cap = (size_t)n * 64 + 1, len = 0;
    char *extra = malloc(cap);

    ck_assert_ptr_nonnull(extra);
    extra[0] = '\0';
    for (unsigned i = 0; i < n; i++) {
        len += (size_t)snprintf(extra + len, cap - len,
                                "[service s%05u]\nlimit = token_bucket %u per 1s\n", i,
                                base + i % 7);
    }
    write_static(50, extra);
    free(extra);
}

/* SIGHUPs node and router to put n services in force (their reload number `reloads`) while
 * probes ask both (big_probe_main): each kept answering while its parse ran, at least
 * PARSE_ANSWERS_MIN times. Prints the slowest PING of each (bench/loop_stalls.sh reads it). */
static void
sighup_many(unsigned n, unsigned base, int reloads)
{
    struct big_probe probes[2];
    pthread_t th[2];
    char last[16];

    write_many(n, base);
    for (int i = 0; i < 2; i++) {
        memset(&probes[i], 0, sizeof(probes[i]));
        probes[i].port = i == 0 ? node_ports[0] : router_ports[0];
        probes[i].reloads_before = reloads - 1;
        probes[i].hup_pid = i == 0 ? nodes[0].pid : routers[0].pid;
        ck_assert_int_eq(rl_test_stat(probes[i].port, "rules_reloads"), reloads - 1);
        ck_assert_int_eq(pthread_create(&th[i], NULL, big_probe_main, &probes[i]), 0);
    }
    usleep(200 * 1000);
    for (int i = 0; i < 2; i++) {
        atomic_store(&probes[i].armed, true); /* each probe sends its process the SIGHUP */
    }
    wait_all("rules_reloads", reloads, 1, 1, 30000);
    /* each probe's own connection sees the swap too (a router's workers swap in turn) */
    for (int i = 0, waited = 0; i < 2; i++) {
        while (!atomic_load(&probes[i].swapped) && probes[i].worst_ms != UINT64_MAX &&
               waited < 30000) {
            usleep(10 * 1000);
            waited += 10;
        }
    }
    usleep(200 * 1000);
    for (int i = 0; i < 2; i++) {
        atomic_store(&probes[i].stop, true);
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    }
    /* and the new rules are in force: a service of the new file answers */
    snprintf(last, sizeof(last), "s%05u", n - 1);
    ck_assert_uint_eq(check_via(0, last, "u", NULL), RL_WIRE_ALLOWED);
    for (int i = 0; i < 2; i++) {
        fprintf(stderr,
                "%u services by SIGHUP: %s's slowest PING %llu ms (%llu PINGs), %llu STATS "
                "answered during the parse\n",
                n, i == 0 ? "rl-node" : "rl-router", (unsigned long long)probes[i].worst_ms,
                (unsigned long long)probes[i].pings, (unsigned long long)probes[i].during);
    }
    for (int i = 0; i < 2; i++) {
        const char *who = i == 0 ? "rl-node" : "rl-router";

        ck_assert_msg(probes[i].worst_ms != UINT64_MAX, "%s: a probe's request failed", who);
        ck_assert(probes[i].hupped);
        ck_assert_msg(atomic_load(&probes[i].swapped), "%s: the probe never saw the new rules",
                      who);
        ck_assert_msg(probes[i].during >= PARSE_ANSWERS_MIN,
                      "%s: %llu answers while %u services were parsed: the loop was blocked",
                      who, (unsigned long long)probes[i].during, n);
        ck_assert_uint_gt(probes[i].pings, 10);
    }
}

START_TEST(test_sighup_big)
{
    sighup_many(BIG_SERVICES, 10, 1);
}
END_TEST

/*
 * 60,000 services: the router's loop only swaps (O(services) pointer work) while the parse
 * runs on the thread pool; the node's loop switches the limiter too (O(services)). Twice,
 * with different limits (a second reload of the same size).
 */
START_TEST(test_sighup_huge)
{
    sighup_many(HUGE_SERVICES, 10, 1);
    sighup_many(HUGE_SERVICES, 20, 2);
}
END_TEST

/* CHECKs forwarded under rules that a SIGHUP then replaces, answered by failure policy once
 * their deadline passes (the node stopped): judged by the backstop under the rules in force
 * (FAIL_OPEN: each user's first two requests), looked up again as a node would (an
 * endpoint's section gone: the service's), not with the old rule's tiers indexing the new
 * rules' (before: a read past the new tiers under ASan, answers LIMITED with limit 0 in a
 * Release build; the attack round of 2026-11-30's twentieth session) nor NO_RULE (allowed,
 * without limit: a first fix). */
START_TEST(test_sighup_while_forwarded)
{
    enum { N = 10 };
    struct rl_wire_req req;
    struct rl_wire_reply rep;
    struct rl_client *c = NULL;
    char user[N][16];

    /* day's tier: tiers[6] (after a, b, probe and x's three); day login's: tiers[7] */
    write_static(50, "[service x]\nlimit = fixed_window 1000 per 1s\n"
                     "limit = fixed_window 2000 per 2s\nlimit = fixed_window 3000 per 3s\n"
                     "[service day]\nlimit = fixed_window 20 per 1d\n"
                     "[service day login]\nlimit = fixed_window 20 per 1d\n");
    ck_assert_int_eq(kill(nodes[0].pid, SIGHUP), 0);
    ck_assert_int_eq(kill(routers[0].pid, SIGHUP), 0);
    wait_all("rules_reloads", 1, 1, 1, T_TIMEOUT);
    ck_assert_int_eq(kill(nodes[0].pid, SIGSTOP), 0);
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_ports[0], T_TIMEOUT), 0);
    for (int i = 0; i < N; i++) { /* 5 users, twice each: without an endpoint, then login */
        snprintf(user[i], sizeof(user[i]), "u%d", i / 2);
        rl_test_check_req(&req, "day", user[i], 1);
        if (i % 2 == 1) {
            req.endpoint.ptr = "login";
            req.endpoint.len = 5;
        }
        req.id = (uint32_t)i + 1;
        ck_assert_int_eq(rl_client_queue(c, &req), 0);
    }
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    usleep(300 * 1000); /* forwarded, unanswered: the node is stopped */
    /* now tiers[6] is tight's, 1 per 1d: what the old day rule's tiers index; day login's
     * section is gone: its requests are day's (as a node looks them up), not NO_RULE */
    write_static(50, "[service day]\nlimit = fixed_window 20 per 1d\n"
                     "[service p1]\nlimit = fixed_window 1000 per 1h\n"
                     "[service p2]\nlimit = fixed_window 1000 per 1h\n"
                     "[service tight]\nlimit = fixed_window 1 per 1d\n");
    ck_assert_int_eq(kill(routers[0].pid, SIGHUP), 0);
    for (int i = 0; rl_test_stat(router_ports[0], "rules_reloads") < 2; i++) {
        ck_assert_int_lt(i, 200);
        usleep(50 * 1000);
    }
    for (int i = 0; i < N; i++) { /* past the deadline (2 s) */
        ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
        ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
        ck_assert_msg(rep.check.code == RL_WIRE_FAIL_OPEN, "answer %u: code %u, limit %llu", rep.id,
                      rep.check.code, (unsigned long long)rep.check.limit);
    }
    rl_client_destroy(c);
    ck_assert_int_eq(kill(nodes[0].pid, SIGCONT), 0);
}
END_TEST

/* SIGTERM while a large file is parsed off the loop: a clean exit (no crash, no leak under
 * ASan), the parse dropped. */
START_TEST(test_sighup_then_stop)
{
    write_many(HUGE_SERVICES, 10);
    ck_assert_int_eq(kill(nodes[0].pid, SIGHUP), 0);
    ck_assert_int_eq(kill(routers[0].pid, SIGHUP), 0);
    usleep(2 * 1000);
    ck_assert_int_eq(rl_harness_server_stop(&nodes[0], SIGTERM, 10000), 0);
    ck_assert_int_eq(rl_harness_server_stop(&routers[0], SIGTERM, 10000), 0);
    ck_assert(WIFEXITED(nodes[0].status) && WEXITSTATUS(nodes[0].status) == 0);
    ck_assert(WIFEXITED(routers[0].status) && WEXITSTATUS(routers[0].status) == 0);
}
END_TEST

/* ---- a scrape storm at 20,000 services: the loop keeps answering --------------------------- */

#define STORM_SCRAPERS 4 /* on one process at a time */
#define STORM_MS 3000    /* how long they pull /metrics at least */
#define STORM_PAGES_MIN 8 /* and until this many pages were served (a slow machine runs longer) */
#define STORM_WAIT_MS 120000 /* a generous bound on that wait */
#define STORM_GET_TIMEOUT 30000 /* a generous bound on one page (6 MB, ASan, a loaded machine) */
/*
 * The loop's share of a page's cost (rl_metrics_render_loop_seconds over
 * rl_metrics_render_seconds, the median of the pages served): the loop copies the figures
 * and the listener's thread formats the text, so the loop's part is a few percent of the
 * whole (0.3 of 15 ms at 20,000 services); a loop that formatted the page itself would carry
 * all of it (a share near 1). A ratio of two parts of the same work on the same machine:
 * load slows both. What the loop's part costs in ms is bench/loop_stalls.sh's figure.
 */
#define STORM_LOOP_SHARE_MAX 0.5
#define STORM_PAGES_MAX 4096

static int metrics_ports[2]; /* router, node */

static atomic_uint storm_pages; /* pages served, all scrapers */

struct storm_scraper {
    atomic_bool *stop;
    int port;
    const char *want; /* a series the page must hold */
    unsigned pages, bad;
    unsigned busy; /* 503: the loop did not answer within the listener's wait (a stall) */
    double loop_ms[STORM_PAGES_MAX]; /* rl_metrics_render_loop_seconds of each page, ms */
    double share[STORM_PAGES_MAX];   /* that over rl_metrics_render_seconds */
};

static int
storm_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static void *
storm_scraper_main(void *arg)
{
    struct storm_scraper *sc = arg;

    while (!atomic_load(sc->stop)) {
        struct rl_http_resp r;
        const char *at;

        memset(&r, 0, sizeof(r));
        if (rl_http_get(sc->port, "/metrics", STORM_GET_TIMEOUT, &r) == 0 && r.status == 503) {
            sc->busy++; /* a loaded machine stalled the loop past the wait: not a page */
        } else if (r.status != 200 || strstr(r.body, sc->want) == NULL ||
                   (at = strstr(r.body, "\nrl_metrics_render_loop_seconds ")) == NULL) {
            sc->bad++;
        } else {
            double ms = strtod(at + strlen("\nrl_metrics_render_loop_seconds "), NULL) * 1e3;
            const char *tot = strstr(r.body, "\nrl_metrics_render_seconds ");
            double all = tot != NULL ? strtod(tot + strlen("\nrl_metrics_render_seconds "), NULL)
                                     : 0.0;

            if (all <= 0.0) {
                sc->bad++;
            } else if (sc->pages < STORM_PAGES_MAX) {
                sc->share[sc->pages] = ms / (all * 1e3);
                sc->loop_ms[sc->pages++] = ms;
                atomic_fetch_add(&storm_pages, 1);
            }
        }
        rl_http_free(&r);
    }
    return NULL;
}

static void
storm_setup(void)
{
    memset(nodes, 0, sizeof(nodes));
    memset(routers, 0, sizeof(routers));
    node_ports[0] = rl_harness_free_port();
    router_ports[0] = rl_harness_free_port();
    router_ports[1] = router_ports[0];
    for (int i = 0; i < 2; i++) {
        metrics_ports[i] = rl_harness_free_port();
        snprintf(metrics_keys[i], sizeof(metrics_keys[i]), "metrics = 127.0.0.1:%d\n",
                 metrics_ports[i]);
    }
    ck_assert_int_eq(rl_harness_tmppath(config, sizeof(config), "storm.conf"), 0);
    write_many(BIG_SERVICES, 10);
    ck_assert_int_eq(rl_harness_node_start(&nodes[0], config, "n1", node_ports[0],
                                           RL_HARNESS_TEST_CLOCK),
                     0);
    set_node_clock(0);
    ck_assert_int_eq(rl_harness_router_start(&routers[0], config, router_ports[0]), 0);
    for (int i = 0; check_via(0, "probe", "p", NULL) != RL_WIRE_ALLOWED; i++) {
        ck_assert_int_lt(i, 200);
        usleep(50 * 1000);
    }
}

/*
 * STORM_SCRAPERS threads pull process i's /metrics (0: the router, 1: the node) back to back
 * for STORM_MS and until STORM_PAGES_MIN pages were served, while a client PINGs it: every
 * page is whole (it holds the last service's series; a 503, the loop not answering within
 * the listener's wait on a stalled machine, is counted apart), the PINGs keep being
 * answered, and the loop's share of a page's cost (median) stays under
 * STORM_LOOP_SHARE_MAX. Prints the loop's time per page and the slowest PING
 * (bench/loop_stalls.sh reads them).
 */
static void
storm_once(int i)
{
    static struct storm_scraper sc[STORM_SCRAPERS];
    static double all[STORM_SCRAPERS * STORM_PAGES_MAX], shares[STORM_SCRAPERS * STORM_PAGES_MAX];
    const char *who = i == 0 ? "rl-router" : "rl-node";
    char want[96];
    pthread_t th[STORM_SCRAPERS], pth;
    struct big_probe probe;
    atomic_bool stop = false;
    unsigned pages = 0, bad = 0, busy = 0;
    double loop_ms, share;

    if (i == 0) {
        snprintf(want, sizeof(want),
                 "\nrl_router_decisions_total{service=\"s%05u\",code=\"allowed\"} ",
                 BIG_SERVICES - 1);
    } else {
        snprintf(want, sizeof(want), "\nrl_node_keys{service=\"s%05u\"} ", BIG_SERVICES - 1);
    }
    memset(&probe, 0, sizeof(probe));
    probe.port = i == 0 ? router_ports[0] : node_ports[0];
    ck_assert_int_eq(pthread_create(&pth, NULL, big_probe_main, &probe), 0);
    usleep(200 * 1000);
    atomic_store(&storm_pages, 0);
    for (int k = 0; k < STORM_SCRAPERS; k++) {
        sc[k] = (struct storm_scraper){.stop = &stop, .port = metrics_ports[i], .want = want};
        ck_assert_int_eq(pthread_create(&th[k], NULL, storm_scraper_main, &sc[k]), 0);
    }
    usleep(STORM_MS * 1000);
    for (int waited = STORM_MS; atomic_load(&storm_pages) < STORM_PAGES_MIN; waited += 50) {
        ck_assert_msg(waited < STORM_WAIT_MS, "%s served %u pages in %d ms", who,
                      atomic_load(&storm_pages), waited);
        usleep(50 * 1000);
    }
    atomic_store(&stop, true);
    for (int k = 0; k < STORM_SCRAPERS; k++) {
        ck_assert_int_eq(pthread_join(th[k], NULL), 0);
        memcpy(all + pages, sc[k].loop_ms, sc[k].pages * sizeof(all[0]));
        memcpy(shares + pages, sc[k].share, sc[k].pages * sizeof(shares[0]));
        pages += sc[k].pages;
        bad += sc[k].bad;
        busy += sc[k].busy;
    }
    atomic_store(&probe.stop, true);
    ck_assert_int_eq(pthread_join(pth, NULL), 0);
    ck_assert_uint_ge(pages, STORM_PAGES_MIN);
    qsort(all, pages, sizeof(all[0]), storm_cmp);
    qsort(shares, pages, sizeof(shares[0]), storm_cmp);
    loop_ms = all[pages / 2];
    share = shares[pages / 2];
    fprintf(stderr,
            "scrape storm, %u services: %s served %u pages (%u bad, %u 503), the loop's time "
            "per page %.2f ms (median; %.2f at most), %.3f of the page's cost (median); its "
            "slowest PING %llu ms (%llu PINGs)\n",
            BIG_SERVICES, who, pages, bad, busy, loop_ms, all[pages - 1], share,
            (unsigned long long)probe.worst_ms, (unsigned long long)probe.pings);
    ck_assert_uint_eq(bad, 0);
    ck_assert_msg(share < STORM_LOOP_SHARE_MAX,
                  "%s: the loop carried %.2f of a page's cost (%.2f ms): the page was formatted "
                  "on the loop",
                  who, share, loop_ms);
    ck_assert_msg(probe.worst_ms != UINT64_MAX, "%s: a PING failed during the scrape storm", who);
    ck_assert_uint_gt(probe.pings, 10);
}

/*
 * A scrape storm on the router, then on the node (storm_once). The loop's share of a page
 * is what a render on the loop exceeds; how long a PING waited meanwhile is the machine's
 * figure (bench/loop_stalls.sh).
 */
START_TEST(test_scrape_storm)
{
    ck_assert_uint_eq(check_via(0, "s19999", "u", NULL), RL_WIRE_ALLOWED);
    for (int i = 0; i < 2; i++) {
        storm_once(i);
    }
}
END_TEST

static Suite *
rules_live_suite(void)
{
    Suite *s = suite_create("rules_live");
    TCase *tc = tcase_create("zookeeper");
    TCase *st = tcase_create("static");
    TCase *sc;

    tcase_add_checked_fixture(tc, zk_setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_push);
    suite_add_tcase(s, tc);
    tcase_add_checked_fixture(st, static_setup, teardown);
    tcase_set_timeout(st, 60);
    tcase_add_test(st, test_sighup);
    tcase_add_test(st, test_sighup_big);
    tcase_add_test(st, test_sighup_huge);
    tcase_add_test(st, test_sighup_then_stop);
    tcase_add_test(st, test_sighup_while_forwarded);
    suite_add_tcase(s, st);
    {
        TCase *cz = tcase_create("carry_zookeeper");
        TCase *cs = tcase_create("carry_static");

        tcase_add_checked_fixture(cz, zk_setup, teardown);
        tcase_set_timeout(cz, 120);
        tcase_add_test(cz, test_push_carries_over);
        suite_add_tcase(s, cz);
        tcase_add_checked_fixture(cs, carry_static_setup, teardown);
        tcase_set_timeout(cs, 60);
        tcase_add_test(cs, test_sighup_carries_over);
        suite_add_tcase(s, cs);
    }
    sc = tcase_create("scrape");
    tcase_add_checked_fixture(sc, storm_setup, teardown);
    tcase_set_timeout(sc, 300);
    tcase_add_test(sc, test_scrape_storm);
    suite_add_tcase(s, sc);
    return s;
}

RL_TEST_MAIN(rules_live_suite)
