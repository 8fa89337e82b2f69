/*
 * check_status: `rl-cli status` against a real cluster (ZooKeeper, nodes a and b running and
 * c configured but not started, two routers). Asserted, from its --json output and its exit
 * status:
 *   - both routers are listed (they announce themselves in ZooKeeper), with their addresses;
 *   - every member answered; the keys they report add up to the users sent; the shards
 *     they own add up to the cluster's; the decisions/s of a node under load is non-zero;
 *   - c is missing ("missing": ["c"], exit 1), and the text screen says so;
 *   - once c starts and registers, nothing is missing (exit 0) and c owns shards;
 *   - a node killed with -9 shows as unreachable at once (exit 1), before ZooKeeper
 *     expires it;
 *   - without --config the router's view alone is shown (exit 0 while every node it routes
 *     to is up);
 *   - the router asked has one name: the one it is listed under (text and JSON);
 *   - with ZooKeeper unreachable, status says so as the reason, naming its address, within
 *     a few seconds, calls no node up and does not ask for the --config it was given.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reqclient.h"
#include "clock.h"
#include "harness.h"
#include "rltest.h"

#define SHARDS 64
#define USERS 30

enum { A, B, C, NNODES };

static struct rl_harness_zk zk;
static struct rl_harness_server nodes[NNODES], routers[2];
static int node_ports[NNODES], router_ports[2];
static char config[4096];
static const char *const names[NNODES] = {"a", "b", "c"};

/* Runs rl-cli with args; returns its exit status, its stdout and stderr in out. */
static int
cli(char *out, size_t len, const char *const argv[])
{
    int rc = rl_harness_run(argv, out, len, 20000);

    ck_assert_msg(rc >= 0, "%s did not run to its end: %d", argv[0], rc);
    return rc;
}

/* The integer after "field": in the JSON object of node NAME, or def. */
static long long
node_int(const char *json, const char *name, const char *field, long long def)
{
    char key[64];
    const char *p, *end, *f;

    snprintf(key, sizeof(key), "{\"name\":\"%s\"", name);
    p = strstr(json, key);
    if (p == NULL) {
        return def;
    }
    end = strstr(p + 1, "{\"name\":");
    snprintf(key, sizeof(key), "\"%s\":", field);
    f = strstr(p, key);
    if (f == NULL || (end != NULL && f > end)) {
        return def;
    }
    f += strlen(key);
    if (strncmp(f, "true", 4) == 0) {
        return 1;
    }
    if (strncmp(f, "false", 5) == 0) {
        return 0;
    }
    return strtoll(f, NULL, 10);
}

/* The name of the router asked, in status --json's "router" object. */
static void
router_name(const char *json, char *name, size_t len)
{
    const char *p = strstr(json, "\"router\":{");
    const char *end;

    ck_assert_ptr_nonnull(p);
    p = strstr(p, "\"name\":\"");
    ck_assert_ptr_nonnull(p);
    p += strlen("\"name\":\"");
    end = strchr(p, '"');
    ck_assert_ptr_nonnull(end);
    snprintf(name, len, "%.*s", (int)(end - p), p);
    ck_assert_msg(name[0] != '\0', "the router asked has no name: %s", json);
}

static int
router_members(int port)
{
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;
    int64_t v = -1;

    if (rl_client_connect(&c, "127.0.0.1", (uint16_t)port, 1000) == 0 &&
        rl_client_stats(c, &rep, 1000) == 0) {
        v = rl_client_stat(&rep, "members", -1);
    }
    rl_client_destroy(c);
    return (int)v;
}

static void
wait_members(int want)
{
    uint64_t until = rl_clock_mono_ns() + 20000000000ull;

    while (rl_clock_mono_ns() < until) {
        if (router_members(router_ports[0]) == want && router_members(router_ports[1]) == want) {
            rl_test_wait_settled(nodes, NNODES, routers, 2, want, 60000);
            return;
        }
        usleep(50000);
    }
    ck_abort_msg("routers did not see %d members", want);
}

/* One CHECK for each of USERS users through router 0, each allowed. */
static void
send_users(void)
{
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_ports[0], 2000), 0);
    for (int u = 0; u < USERS; u++) {
        char user[16];

        snprintf(user, sizeof(user), "user%d", u);
        ck_assert_int_eq(rl_client_check(c, "web", user, NULL, 1, &rep, 2000), 0);
        ck_assert_uint_eq(rep.check.code, 0);
    }
    rl_client_destroy(c);
}

/* Load on the nodes while status measures their rate. */
static atomic_bool load_on;

static void *
load(void *arg)
{
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;
    unsigned n = 0;

    (void)arg;
    if (rl_client_connect(&c, "127.0.0.1", (uint16_t)router_ports[1], 2000) != 0) {
        return NULL;
    }
    while (atomic_load(&load_on)) {
        if (rl_client_check(c, "load", "u", NULL, 0, &rep, 2000) != 0) {
            break;
        }
        n++;
    }
    rl_client_destroy(c);
    return NULL;
}

static void
setup(void)
{
    rl_test_cluster_prepare(&zk, nodes, node_ports, NNODES, routers, router_ports, 2);
    ck_assert_int_eq(rl_harness_tmppath(config, sizeof(config), "cluster.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(config,
                                           "[cluster]\nname = status\nzookeeper = %s\n"
                                           "session_timeout = 4s\nshards = %d\n"
                                           "[router]\ndeadline = 1s\n"
                                           "[node a]\nlisten = 127.0.0.1:%d\n"
                                           "[node b]\nlisten = 127.0.0.1:%d\n"
                                           "[node c]\nlisten = 127.0.0.1:%d\n"
                                           "[service web]\nlimit = fixed_window 10 per 1h\n"
                                           "[service load]\nlimit = fixed_window 1 per 1h\n",
                                           zk.connect, SHARDS, node_ports[A], node_ports[B],
                                           node_ports[C]),
                     0);
    for (int i = A; i <= B; i++) {
        ck_assert_int_eq(rl_harness_node_start(&nodes[i], config, names[i], node_ports[i], 0), 0);
    }
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(rl_harness_router_start(&routers[i], config, router_ports[i]), 0);
    }
    wait_members(2);
}

static void
teardown(void)
{
    rl_harness_cleanup();
}

START_TEST(test_status)
{
    static char out[65536];
    char target[64], addr[64], expect[400], rname[200];
    const char *json[] = {"rl-cli", "--target", target, "status", "--config", config,
                          "--json", "--interval-ms", "500", NULL};
    const char *text[] = {"rl-cli", "--target", target, "status", "--config", config, NULL};
    const char *bare[] = {"rl-cli", "--target", target, "status", NULL};
    pthread_t th;
    long long keys, shards;

    snprintf(target, sizeof(target), "127.0.0.1:%d", router_ports[0]);
    send_users();

    /* c is configured, not running: missing, exit 1. Load runs meanwhile. */
    atomic_store(&load_on, true);
    ck_assert_int_eq(pthread_create(&th, NULL, load, NULL), 0);
    ck_assert_int_eq(cli(out, sizeof(out), json), 1);
    atomic_store(&load_on, false);
    pthread_join(th, NULL);
    ck_assert_msg(strstr(out, "\"missing\":[\"c\"]") != NULL, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "\"ok\":false"));
    for (int i = 0; i < 2; i++) {
        snprintf(expect, sizeof(expect), "\"address\":\"127.0.0.1:%d\"}", router_ports[i]);
        ck_assert_msg(strstr(out, expect) != NULL, "router %d not listed: %s", i, out);
    }
    /* One name per router: the router asked is named as it is listed. */
    router_name(out, rname, sizeof(rname));
    snprintf(expect, sizeof(expect), "{\"name\":\"%s\",\"address\":\"%s\"}", rname, target);
    ck_assert_msg(strstr(out, expect) != NULL, "router named \"%s\" is listed otherwise: %s",
                  rname, out);
    keys = node_int(out, "a", "keys", -1) + node_int(out, "b", "keys", -1);
    /* USERS web keys, and one load key (cost 0 peeks insert nothing) */
    ck_assert_msg(keys == USERS, "keys %lld, want %d: %s", keys, USERS, out);
    shards = node_int(out, "a", "shards", -1) + node_int(out, "b", "shards", -1);
    ck_assert_int_eq(shards, SHARDS);
    ck_assert_int_eq(node_int(out, "a", "router_shards", -1), node_int(out, "a", "shards", -2));
    ck_assert_int_eq(node_int(out, "a", "answered", 0), 1);
    ck_assert_int_eq(node_int(out, "b", "answered", 0), 1);
    ck_assert_int_eq(node_int(out, "c", "answered", 1), 0);
    /* The load's key lives on one node: its rate is measured there. */
    ck_assert_msg(node_int(out, "a", "decisions_per_s", 0) + node_int(out, "b", "decisions_per_s", 0) > 0,
                  "no rate measured: %s", out);
    snprintf(addr, sizeof(addr), "\"address\":\"127.0.0.1:%d\"", node_ports[A]);
    ck_assert_ptr_nonnull(strstr(out, addr));
    /* members are active (neither joining nor leaving), nothing in flight */
    ck_assert_msg(strstr(out, "\"state\":\"active\"") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "\"shards_incoming\":0,\"shards_outgoing\":0") != NULL, "%s", out);

    ck_assert_int_eq(cli(out, sizeof(out), text), 1);
    ck_assert_msg(strstr(out, "missing: not registered in ZooKeeper") != NULL, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "NODE"));
    ck_assert_ptr_nonnull(strstr(out, "MOVING"));
    ck_assert_msg(strstr(out, "0/0  ok") != NULL, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "2 of 3 nodes up"));
    snprintf(expect, sizeof(expect), "router %s (%s):", target, rname);
    ck_assert_msg(strstr(out, expect) != NULL, "\"%s\" lacks \"%s\"", out, expect);
    snprintf(expect, sizeof(expect), "%s (%s, the one asked)", rname, target);
    ck_assert_msg(strstr(out, expect) != NULL, "\"%s\" lacks \"%s\"", out, expect);
    ck_assert_msg(strstr(out, "give --config") == NULL, "--config was given: %s", out);

    /* The router's view alone: both nodes it routes to are up. */
    ck_assert_int_eq(cli(out, sizeof(out), bare), 0);
    ck_assert_ptr_nonnull(strstr(out, "give --config"));

    /* c starts: nothing missing. */
    ck_assert_int_eq(rl_harness_node_start(&nodes[C], config, names[C], node_ports[C], 0), 0);
    wait_members(3);
    ck_assert_int_eq(cli(out, sizeof(out), json), 0);
    ck_assert_msg(strstr(out, "\"missing\":[]") != NULL, "%s", out);
    ck_assert_int_gt(node_int(out, "c", "shards", 0), 0);
    ck_assert_int_eq(node_int(out, "a", "shards", 0) + node_int(out, "b", "shards", 0) +
                         node_int(out, "c", "shards", 0),
                     SHARDS);

    /* Router 1 is killed and restarted at once under the same name: its old session's
     * routers/ znode blocks the new one until that session expires; then it is announced
     * again (retried, not given up). */
    ck_assert_int_eq(rl_harness_server_stop(&routers[1], SIGKILL, 5000), 0);
    ck_assert_int_eq(rl_harness_router_start(&routers[1], config, router_ports[1]), 0);
    {
        uint64_t until = rl_clock_mono_ns() + 15000000000ull;
        bool listed = false;

        snprintf(expect, sizeof(expect), "\"address\":\"127.0.0.1:%d\"}", router_ports[1]);
        wait_members(3);
        /* Past the old session's expiry (session_timeout 4 s), its znode is gone: what is
         * listed from then on is the new process's. */
        usleep(5500000);
        while (!listed && rl_clock_mono_ns() < until) {
            (void)cli(out, sizeof(out), json);
            listed = strstr(out, expect) != NULL;
            if (!listed) {
                usleep(500000);
            }
        }
        ck_assert_msg(listed, "the restarted router was not announced again: %s", out);
    }

    /* b dies: unreachable at once, while ZooKeeper still lists it. */
    ck_assert_int_eq(rl_harness_server_stop(&nodes[B], SIGKILL, 5000), 0);
    ck_assert_int_eq(cli(out, sizeof(out), json), 1);
    ck_assert_msg(strstr(out, "\"missing\":[\"b\"]") != NULL, "%s", out);
    ck_assert_int_eq(node_int(out, "b", "member", 0), 1);
    ck_assert_int_eq(node_int(out, "b", "answered", 1), 0);
}
END_TEST

/* ZooKeeper down (nothing listens at its address): status says so, naming the address, as
 * the reason, within a few seconds; it calls no node up, and does not ask for the --config
 * it was given. */
START_TEST(test_zookeeper_unreachable)
{
    static char out[65536];
    struct rl_harness_server router;
    char conf[4096], target[64], zkaddr[64], expect[256];
    const char *text[] = {"rl-cli", "--target", target, "status", "--config", conf, NULL};
    const char *json[] = {"rl-cli", "--target", target, "status", "--config", conf, "--json",
                          NULL};
    int zk_port = rl_harness_free_port(), port = rl_harness_free_port();
    uint64_t t0, took_ms;

    memset(&router, 0, sizeof(router));
    snprintf(zkaddr, sizeof(zkaddr), "127.0.0.1:%d", zk_port);
    snprintf(target, sizeof(target), "127.0.0.1:%d", port);
    ck_assert_int_eq(rl_harness_tmppath(conf, sizeof(conf), "down.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf,
                                           "[cluster]\nname = down\nzookeeper = %s\n"
                                           "session_timeout = 4s\nshards = 16\n"
                                           "[node a]\nlisten = 127.0.0.1:%d\n"
                                           "[node b]\nlisten = 127.0.0.1:%d\n"
                                           "[node c]\nlisten = 127.0.0.1:%d\n"
                                           "[service web]\nlimit = fixed_window 10 per 1h\n",
                                           zkaddr, rl_harness_free_port(), rl_harness_free_port(),
                                           rl_harness_free_port()),
                     0);
    ck_assert_int_eq(rl_harness_router_start(&router, conf, port), 0);

    t0 = rl_clock_mono_ns();
    ck_assert_int_eq(cli(out, sizeof(out), text), 1);
    took_ms = (rl_clock_mono_ns() - t0) / 1000000;
    /* It gives up rather than hang (the bound is a generous wait, not a figure: a loaded
     * machine stretches the 4 s session timeout it waits on). */
    ck_assert_msg(took_ms < 30000, "status took %llu ms: %s", (unsigned long long)took_ms, out);
    snprintf(expect, sizeof(expect), "ZooKeeper at %s is unreachable", zkaddr);
    ck_assert_msg(strstr(out, expect) != NULL, "\"%s\" lacks \"%s\"", out, expect);
    ck_assert_msg(strstr(out, "nodes up") == NULL, "counts nodes it cannot know: %s", out);
    ck_assert_msg(strstr(out, "up (router's view)") == NULL, "%s", out);
    ck_assert_msg(strstr(out, "give --config") == NULL, "--config was given: %s", out);
    ck_assert_msg(strstr(out, "unknown: ZooKeeper unreachable") != NULL, "%s", out);
    /* The router's own session (STATS zk_state) says the same. */
    ck_assert_msg(strstr(out, "its ZooKeeper session: connecting") != NULL, "%s", out);

    ck_assert_int_eq(cli(out, sizeof(out), json), 1);
    snprintf(expect, sizeof(expect), "\"zookeeper\":{\"address\":\"%s\",\"reachable\":false",
             zkaddr);
    ck_assert_msg(strstr(out, expect) != NULL, "\"%s\" lacks \"%s\"", out, expect);
    ck_assert_msg(strstr(out, "\"zk_state\":1") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "\"missing\":[\"a\",\"b\",\"c\"]") != NULL, "%s", out);
    rl_harness_cleanup();
}
END_TEST

static Suite *
status_suite(void)
{
    Suite *s = suite_create("status");
    TCase *tc = tcase_create("status");
    TCase *down = tcase_create("zookeeper_down");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_status);
    suite_add_tcase(s, tc);
    tcase_set_timeout(down, 60);
    tcase_add_test(down, test_zookeeper_unreachable);
    suite_add_tcase(s, down);
    return s;
}

RL_TEST_MAIN(status_suite)
