/*
 * check_regions: one global limit across two regional clusters on this machine, each with
 * its own ZooKeeper, node and router, and rl-regions between them (docs/REGIONS.md). A
 * region's ZooKeeper and router are reached by rl-regions through fault proxies (the
 * cross-region links), which add latency or cut a region off. A user in one region gets
 * its slice before reconciliation and most of the global limit after; a user alternating
 * between the regions stays within the stated bound over many windows; a region cut off
 * during reconciliation keeps serving with its last slices while the other's only go down;
 * a stale rl-regions loses the compare-and-set; --dry-run writes nothing; --rollback puts
 * the previous slices back; another client's refused requests for a user in one region do
 * not cut her share in the other (the plan follows allowed work); with the cluster's tls_*
 * set, rl-regions reaches the routers over TLS.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "proxy.h"
#include "reqclient.h"
#include "rltest.h"
#include "tls.h"

#define T_TIMEOUT 5000
#define NREG 2

struct region {
    const char *name;
    struct rl_harness_zk zk;
    struct rl_harness_server node, router;
    int node_port, router_port;
    struct rl_proxy *zk_px, *router_px; /* the cross-region links rl-regions uses */
    int zk_px_port, router_px_port;
    char config[4096]; /* the region's own */
    char remote[4096]; /* the same, reached through the proxies: rl-regions' */
    struct rl_client *c;
};

/* A CHECK through region i's router: the reply code, with *limit the limit it reports. */
static uint32_t check(int i, const char *service, const char *user, uint32_t cost,
                      uint64_t *limit);

static struct region reg[NREG] = {{.name = "east"}, {.name = "west"}};
static char tls_lines[13000]; /* [cluster] lines of the TLS case; "" otherwise */
static char pki[4096];       /* its CA and certificate */
static struct rl_tls_ctx *tls_ctx; /* the test's own client context in the TLS case */

static const char rules[] = "[service api]\n"
                            "scope = global\n"
                            "limit = fixed_window 100 per 1h\n"
                            "[service burst]\n"
                            "scope = global\n"
                            "limit = fixed_window 20 per 1s\n"
                            "[service gcra]\n"
                            "scope = global\n"
                            "limit = gcra 100 per 1h burst 100\n"
                            "[service local]\n"
                            "limit = fixed_window 10 per 1h\n";

static void
write_config(const char *path, const struct region *g, const char *zk, int router_port)
{
    ck_assert_int_eq(rl_harness_write_file(path,
                                           "[cluster]\n"
                                           "name = rg\n"
                                           "zookeeper = %s\n"
                                           "region = %s\n"
                                           "regions = east:1 west:1\n"
                                           "session_timeout = 2s\n"
                                           "shards = 16\n"
                                           "%s"
                                           "[router]\n"
                                           "listen = 127.0.0.1:%d\n"
                                           "deadline = 500ms\n"
                                           "%s",
                                           zk, g->name, tls_lines, router_port, rules),
                     0);
}

static void
setup(void)
{
    for (int i = 0; i < NREG; i++) {
        struct region *g = &reg[i];
        const char *name = g->name;
        char zk[64];

        memset(g, 0, sizeof(*g));
        g->name = name;
        ck_assert_int_eq(rl_harness_zk_start(&g->zk), 0);
        g->node_port = rl_harness_free_port();
        g->router_port = rl_harness_free_port();
        ck_assert_int_eq(rl_proxy_start(&g->zk_px, g->zk.port, &g->zk_px_port), 0);
        ck_assert_int_eq(rl_proxy_start(&g->router_px, g->router_port, &g->router_px_port), 0);
        ck_assert_int_eq(rl_harness_tmppath(g->config, sizeof(g->config), "%s.conf", name), 0);
        ck_assert_int_eq(rl_harness_tmppath(g->remote, sizeof(g->remote), "%s-remote.conf", name),
                         0);
        write_config(g->config, g, g->zk.connect, g->router_port);
        snprintf(zk, sizeof(zk), "127.0.0.1:%d", g->zk_px_port);
        write_config(g->remote, g, zk, g->router_px_port);
        ck_assert_int_eq(rl_harness_node_start(&g->node, g->config, name, g->node_port, 0), 0);
        ck_assert_int_eq(rl_harness_router_start(&g->router, g->config, g->router_port), 0);
        if (tls_lines[0] == '\0') {
            for (int k = 0; k < 200 && rl_test_stat(g->router_port, "members") != 1; k++) {
                usleep(50 * 1000);
            }
            ck_assert_int_eq(rl_test_stat(g->router_port, "members"), 1);
        }
        ck_assert_int_eq(rl_client_connect(&g->c, "127.0.0.1", (uint16_t)g->router_port, T_TIMEOUT),
                         0);
        if (tls_lines[0] != '\0') {
            char why[512];
            uint64_t lim = 0;

            RL_CHECK(rl_client_start_tls(g->c, tls_ctx, T_TIMEOUT, why, sizeof(why)) == 0, "%s",
                     why);
            /* the router has its member once a peek is judged by the node */
            for (int k = 0; k < 200 && (check(i, "api", "nobody", 0, &lim) != RL_WIRE_ALLOWED ||
                                        lim != 50);
                 k++) {
                usleep(50 * 1000);
            }
            ck_assert_uint_eq(lim, 50);
        }
    }
}

/* The same regions with the cluster's TLS on every listener: one CA, one certificate that
 * the nodes, the routers and rl-regions all present. */
static void
setup_tls(void)
{
    char cert[4200], key[4200], ca[4200], why[512];

    ck_assert_int_eq(rl_harness_tmppath(pki, sizeof(pki), "pki"), 0);
    ck_assert_int_eq(mkdir(pki, 0700), 0);
    ck_assert_int_eq(rl_harness_tls_ca(pki, "ca"), 0);
    ck_assert_int_eq(rl_harness_tls_cert(pki, "member", "ca"), 0);
    snprintf(cert, sizeof(cert), "%s/member.pem", pki);
    snprintf(key, sizeof(key), "%s/member.key", pki);
    snprintf(ca, sizeof(ca), "%s/ca.pem", pki);
    snprintf(tls_lines, sizeof(tls_lines),
             "tls_cert_file = %s\ntls_key_file = %s\ntls_ca_file = %s\n", cert, key, ca);
    RL_CHECK(rl_tls_ctx_new(&tls_ctx, RL_TLS_CLIENT, cert, key, ca, NULL, why, sizeof(why)) == 0,
             "%s", why);
    setup();
}

static void
teardown(void)
{
    for (int i = 0; i < NREG; i++) {
        rl_client_destroy(reg[i].c);
        reg[i].c = NULL;
        rl_proxy_stop(reg[i].zk_px);
        rl_proxy_stop(reg[i].router_px);
        reg[i].zk_px = reg[i].router_px = NULL;
    }
    rl_harness_cleanup();
    tls_lines[0] = '\0';
    rl_tls_ctx_free(tls_ctx);
    tls_ctx = NULL;
}

/* rl-regions with extra arguments (NULL-terminated) over both regions' remote configs. */
static int
regions(const char *logname, const char *a1, const char *a2, const char *a3, const char *a4)
{
    char log[4096];
    const char *argv[16] = {"rl-regions",  "--config",  reg[0].remote, "--config",
                            reg[1].remote, "--timeout", "3s"};
    int n = 7, status = -1;
    pid_t pid;

    for (const char *const *a = (const char *const[]){a1, a2, a3, a4, NULL}; *a != NULL; a++) {
        argv[n++] = *a;
    }
    argv[n] = NULL;
    /* a router's workers publish their hot keys to each other at most a second apart */
    usleep(1100 * 1000);
    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "%s", logname), 0);
    ck_assert_int_eq(rl_harness_spawn(argv, log, &pid), 0);
    ck_assert_int_eq(rl_harness_wait(pid, 60000, &status), 0);
    rl_harness_print_log(log, 40);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* CHECK through region i's router: the reply code, with *limit the limit it reports. */
static uint32_t
check(int i, const char *service, const char *user, uint32_t cost, uint64_t *limit)
{
    struct rl_wire_reply rep;

    RL_CHECK_INT_EQ(rl_client_check(reg[i].c, service, user, NULL, cost, &rep, T_TIMEOUT), 0);
    RL_CHECK_UINT_EQ(rep.op, RL_WIRE_OP_CHECK);
    if (limit != NULL) {
        *limit = rep.check.limit;
    }
    return rep.check.code;
}

static int
allowed(int i, const char *service, const char *user, int n)
{
    int k = 0;

    for (int j = 0; j < n; j++) {
        k += check(i, service, user, 1, NULL) == RL_WIRE_ALLOWED;
    }
    return k;
}

/* Waits until region i reports limit `want` for (service, user) (a cost-0 CHECK counts
 * nothing); returns the last limit seen. */
static uint64_t
wait_limit(int i, const char *service, const char *user, uint64_t want)
{
    uint64_t lim = 0;

    for (int k = 0; k < 200; k++) {
        check(i, service, user, 0, &lim);
        if (lim == want) {
            break;
        }
        usleep(25 * 1000);
    }
    return lim;
}

static int
slices_text(int i, char *buf, size_t len)
{
    return rl_harness_zk_get(reg[i].zk.connect, "/ratelimiter/rg/slices", buf, len);
}

/* Before any reconciliation each region enforces limit x 1/2; after, a user active in one
 * region gets 950/1000 of the limit there (what it consumed still counts) and the floor,
 * 50/1000, in the other. A service with scope = region is untouched. */
START_TEST(test_slice_then_reconcile)
{
    char buf[8192];
    uint64_t lim = 0;

    ck_assert_uint_eq(check(0, "api", "alice", 0, &lim), RL_WIRE_ALLOWED);
    ck_assert_uint_eq(lim, 50);
    ck_assert_int_eq(allowed(0, "api", "alice", 60), 50);
    ck_assert_int_eq(allowed(0, "local", "alice", 12), 10);

    /* --dry-run: a report, nothing written */
    ck_assert_int_eq(regions("dry.log", "--dry-run", NULL, NULL, NULL), 0);
    ck_assert_int_eq(slices_text(0, buf, sizeof(buf)), -ENOENT);
    ck_assert_int_eq(slices_text(1, buf, sizeof(buf)), -ENOENT);
    check(0, "api", "alice", 0, &lim);
    ck_assert_uint_eq(lim, 50);

    /* the cross-region links are slow: 60 ms each way */
    rl_proxy_set_delay(reg[1].zk_px, 60);
    rl_proxy_set_delay(reg[1].router_px, 60);
    ck_assert_int_eq(regions("apply.log", NULL, NULL, NULL, NULL), 0);
    ck_assert_int_gt(slices_text(0, buf, sizeof(buf)), 0);
    ck_assert_ptr_nonnull(strstr(buf, "user api alice 950\n"));
    ck_assert_int_gt(slices_text(1, buf, sizeof(buf)), 0);
    ck_assert_ptr_nonnull(strstr(buf, "user api alice 50\n"));
    ck_assert_uint_eq(wait_limit(0, "api", "alice", 95), 95);
    ck_assert_uint_eq(wait_limit(1, "api", "alice", 5), 5);
    /* 50 consumed under the old slice still count: 45 more, not 95 */
    ck_assert_int_eq(allowed(0, "api", "alice", 60), 45);
    ck_assert_int_eq(allowed(1, "api", "alice", 10), 5);
    /* another user keeps the service's slice; a region-scoped service is not sliced */
    check(0, "api", "bob", 0, &lim);
    ck_assert_uint_eq(lim, 50);
    check(0, "local", "bob", 0, &lim);
    ck_assert_uint_eq(lim, 10);

    /* the node says what it applied: phase two, data version 1; its log line names the
     * same slices_version as STATS, and the znode's data version beside it */
    ck_assert_int_eq(rl_test_stat(reg[0].node_port, "slices_version"), 2);
    ck_assert_int_eq(rl_test_stat(reg[0].node_port, "slices_generation"), 1);
    ck_assert_int_eq(rl_test_stat(reg[0].node_port, "slices_users"), 1);
    {
        static char log[1 << 18];
        const char *want = "slices_version 2 applied (slices znode data version 1): generation 1";
        bool seen = false;

        for (int k = 0; k < 200 && !seen; k++) {
            seen = rl_harness_read_file(reg[0].node.log_path, log, sizeof(log)) >= 0 &&
                   strstr(log, want) != NULL;
            if (!seen) {
                usleep(25 * 1000);
            }
        }
        ck_assert_msg(seen, "node log lacks \"%s\": %s", want, log);
    }
    /* a text that does not parse is refused: the last slices stay */
    ck_assert_int_eq(
        rl_harness_zk_put(reg[0].zk.connect, "/ratelimiter/rg/slices", "user api\n", 9), 0);
    for (int k = 0; k < 200 && rl_test_stat(reg[0].node_port, "slices_failures") < 1; k++) {
        usleep(25 * 1000);
    }
    ck_assert_int_eq(rl_test_stat(reg[0].node_port, "slices_failures"), 1);
    ck_assert_int_eq(rl_test_stat(reg[0].node_port, "slices_version"), 2);
    check(0, "api", "alice", 0, &lim);
    ck_assert_uint_eq(lim, 95);
}
END_TEST

/* A gcra key's consumption carries over a slice change: its state is re-expressed at the
 * new rate (rl_algo_rescale), so the user neither starts afresh nor is locked out. */
START_TEST(test_gcra_carries_over)
{
    char buf[8192];
    uint64_t lim = 0;

    ck_assert_int_eq(allowed(0, "gcra", "carol", 60), 50);
    ck_assert_int_eq(regions("apply.log", NULL, NULL, NULL, NULL), 0);
    ck_assert_int_gt(slices_text(0, buf, sizeof(buf)), 0);
    ck_assert_ptr_nonnull(strstr(buf, "user gcra carol 950\n"));
    ck_assert_uint_eq(wait_limit(0, "gcra", "carol", 95), 95);
    /* 95 - 50 left (give or take one unit refilled at 95/h meanwhile) */
    lim = (uint64_t)allowed(0, "gcra", "carol", 60);
    ck_assert_uint_ge(lim, 45);
    ck_assert_uint_le(lim, 46);
}
END_TEST

/* Seconds since the epoch, as the nodes' fixed windows count them. */
static int64_t
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * A user alternating between the regions within every window (the first half of each 1 s
 * window in east, the second in west, 30 requests each) for 12 windows, rl-regions running
 * every 3 s meanwhile. Without slices the user would get 40 a window; docs/REGIONS.md's
 * bound for a fixed window of limit L, W = 1 s, T = 3 s, R = 2 regions and floor f = 50:
 * over H windows at most H L + (H W / T + 1) L (1 - R f / 1000).
 */
START_TEST(test_alternating_bound)
{
    char log[4096], interval[16];
    const char *argv[] = {"rl-regions", "--config", reg[0].remote, "--config", reg[1].remote,
                          "--interval", interval,   "--quiet",     NULL};
    const int H = 12, L = 20;
    int64_t total = 0, t0;
    double bound;
    pid_t pid;
    int status;

    snprintf(interval, sizeof(interval), "3s");
    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "interval.log"), 0);
    ck_assert_int_eq(rl_harness_spawn(argv, log, &pid), 0);
    /* start at a window's edge */
    t0 = now_ms();
    usleep((useconds_t)(1000 - t0 % 1000) * 1000 + 20000);
    for (int w = 0; w < H; w++) {
        int64_t start = now_ms() / 1000 * 1000;

        total += allowed(0, "burst", "dave", 30);
        while (now_ms() < start + 500) {
            usleep(5000);
        }
        total += allowed(1, "burst", "dave", 30);
        while (now_ms() < start + 1000) {
            usleep(5000);
        }
    }
    ck_assert_int_eq(rl_harness_stop(pid, SIGTERM, 10000, &status), 0);
    rl_harness_print_log(log, 20);
    bound = H * L + (H * 1.0 / 3 + 1) * L * (1 - 2 * 50 / 1000.0);
    printf("alternating user: %lld allowed in %d windows of limit %d (bound %.0f, unsliced %d)\n",
           (long long)total, H, L, bound, 2 * L * H);
    ck_assert_int_le(total, (int64_t)bound);
    ck_assert_int_ge(total, (int64_t)H * L / 2);
}
END_TEST

/* West cut off from rl-regions during reconciliation: it keeps serving with its last
 * slices; east's only go down (to the smaller of old and new), so the two never sum past
 * the limit; once west is back, a run completes. */
START_TEST(test_unreachable_region)
{
    char buf[8192];
    uint64_t lim = 0;

    ck_assert_int_eq(allowed(0, "api", "erin", 20), 20);
    ck_assert_int_eq(regions("first.log", NULL, NULL, NULL, NULL), 0);
    ck_assert_uint_eq(wait_limit(0, "api", "erin", 95), 95);
    ck_assert_uint_eq(wait_limit(1, "api", "erin", 5), 5);

    /* erin moves to west; west is cut off from the reconciler */
    ck_assert_int_eq(allowed(1, "api", "erin", 5), 5);
    for (int k = 0; k < 30; k++) {
        check(1, "api", "erin", 1, NULL);
    }
    rl_proxy_set_mode(reg[1].zk_px, RL_PROXY_BLACKHOLE);
    rl_proxy_set_mode(reg[1].router_px, RL_PROXY_BLACKHOLE);
    ck_assert_int_eq(regions("cut.log", "--min-count", "1", NULL, NULL), 2);
    /* west: its last slices, still serving */
    check(1, "api", "erin", 0, &lim);
    ck_assert_uint_eq(lim, 5);
    ck_assert_int_gt(slices_text(1, buf, sizeof(buf)), 0);
    ck_assert_ptr_nonnull(strstr(buf, "user api erin 50\n"));
    ck_assert_uint_eq(check(1, "api", "fred", 1, NULL), RL_WIRE_ALLOWED);
    /* east: never more than before (the plan without west's demand would have kept 950) */
    ck_assert_int_gt(slices_text(0, buf, sizeof(buf)), 0);
    ck_assert_ptr_nonnull(strstr(buf, "user api erin "));
    check(0, "api", "erin", 0, &lim);
    ck_assert_uint_le(lim, 95);

    rl_proxy_set_mode(reg[1].zk_px, RL_PROXY_PASS);
    rl_proxy_set_mode(reg[1].router_px, RL_PROXY_PASS);
    ck_assert_int_eq(regions("healed.log", "--min-count", "1", NULL, NULL), 0);
}
END_TEST

/* A reconciler that read, then waited while another wrote, is refused by compare-and-set
 * and writes nothing; --rollback then puts back the slices from before the last run. */
START_TEST(test_stale_cas_and_rollback)
{
    char log[4096], before[8192], after[8192], now[8192];
    const char *slow[] = {"rl-regions",  "--config", reg[0].remote, "--config",
                          reg[1].remote, "--hold",   "3s",          NULL};
    pid_t pid;
    int status = -1;
    uint64_t lim = 0;

    ck_assert_int_eq(allowed(0, "api", "gina", 20), 20);
    ck_assert_int_eq(regions("first.log", NULL, NULL, NULL, NULL), 0);
    ck_assert_int_gt(slices_text(0, before, sizeof(before)), 0);
    ck_assert_uint_eq(wait_limit(0, "api", "gina", 95), 95);

    /* gina moves west: two reconcilers read the same slices; the slow one writes last */
    for (int k = 0; k < 60; k++) {
        check(1, "api", "gina", 1, NULL);
    }
    usleep(1100 * 1000);
    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "slow.log"), 0);
    ck_assert_int_eq(rl_harness_spawn(slow, log, &pid), 0);
    usleep(1500 * 1000);
    ck_assert_int_eq(regions("fast.log", "--min-count", "1", NULL, NULL), 0);
    ck_assert_int_gt(slices_text(0, after, sizeof(after)), 0);
    ck_assert_str_ne(before, after);
    ck_assert_int_eq(rl_harness_wait(pid, 30000, &status), 0);
    rl_harness_print_log(log, 20);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 3);
    ck_assert_int_gt(slices_text(0, now, sizeof(now)), 0);
    ck_assert_str_eq(now, after);

    /* --rollback: east back to what it was before the fast run */
    ck_assert_int_eq(regions("rollback.log", "--rollback", NULL, NULL, NULL), 0);
    ck_assert_int_gt(slices_text(0, now, sizeof(now)), 0);
    ck_assert_str_eq(now, before);
    ck_assert_uint_eq(wait_limit(0, "api", "gina", 95), 95);
    check(0, "api", "gina", 0, &lim);
    ck_assert_uint_eq(lim, 95);
}
END_TEST

/* Waits until a fixed window of 1 h has at least a minute left, so that what a test
 * consumes is still counted when rl-regions measures it. */
static void
away_from_the_hour(void)
{
    int64_t in_hour = now_ms() / 1000 % 3600;

    if (in_hour > 3540) {
        sleep((unsigned)(3600 - in_hour + 1));
    }
}

/*
 * Another client hammers alice in east: 50 allowed (her whole east slice), 500 refused;
 * alice herself uses 20 of her 50 in west. The plan follows what the nodes allowed, east
 * 50 of 50 and west 20 of 50: west gets 50 + 900 x 200/700 = 307 thousandths (above her
 * use), east the rest, 693. Before, the refused requests counted as demand: east's 550
 * against west's 20 cut her west share to 50 + 900 x 20/570 = 81 (8 per hour: under the
 * 20 she uses).
 */
START_TEST(test_refused_not_demand)
{
    struct rl_client *other = NULL;
    char buf[8192];
    uint64_t lim = 0;

    away_from_the_hour();
    ck_assert_int_eq(rl_client_connect(&other, "127.0.0.1", (uint16_t)reg[0].router_port,
                                       T_TIMEOUT),
                     0);
    for (int k = 0, ok = 0; k < 550; k++) {
        struct rl_wire_reply rep;

        ck_assert_int_eq(rl_client_check(other, "api", "alice", NULL, 1, &rep, T_TIMEOUT), 0);
        ok += rep.check.code == RL_WIRE_ALLOWED;
        if (k == 549) {
            ck_assert_int_eq(ok, 50);
        }
    }
    rl_client_destroy(other);
    ck_assert_int_eq(allowed(1, "api", "alice", 20), 20);
    ck_assert_int_eq(regions("refused.log", NULL, NULL, NULL, NULL), 0);
    ck_assert_int_gt(slices_text(1, buf, sizeof(buf)), 0);
    RL_CHECK(strstr(buf, "user api alice 307\n") != NULL,
             "west's slice for alice is not 307 (refused requests in east counted?):\n%s", buf);
    ck_assert_int_gt(slices_text(0, buf, sizeof(buf)), 0);
    ck_assert_ptr_nonnull(strstr(buf, "user api alice 693\n"));
    ck_assert_uint_eq(wait_limit(1, "api", "alice", 30), 30);
    check(1, "api", "alice", 0, &lim);
    ck_assert_uint_eq(lim, 30);
}
END_TEST

/* With the cluster's tls_* set (every listener TLS), rl-regions reaches both routers over
 * TLS with the config's certificate and plans as without. Before, it spoke plaintext: both
 * regions UNREACHABLE ("router: Protocol error"), exit 2. */
START_TEST(test_tls)
{
    char buf[8192];

    away_from_the_hour();
    ck_assert_int_eq(allowed(0, "api", "alice", 60), 50);
    ck_assert_int_eq(regions("tls.log", NULL, NULL, NULL, NULL), 0);
    ck_assert_int_gt(slices_text(0, buf, sizeof(buf)), 0);
    ck_assert_ptr_nonnull(strstr(buf, "user api alice 950\n"));
    ck_assert_uint_eq(wait_limit(0, "api", "alice", 95), 95);
}
END_TEST

static Suite *
regions_suite(void)
{
    Suite *s = suite_create("regions");
    TCase *tc = tcase_create("regions");
    TCase *tt = tcase_create("tls");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_slice_then_reconcile);
    tcase_add_test(tc, test_gcra_carries_over);
    tcase_add_test(tc, test_alternating_bound);
    tcase_add_test(tc, test_unreachable_region);
    tcase_add_test(tc, test_stale_cas_and_rollback);
    tcase_add_test(tc, test_refused_not_demand);
    suite_add_tcase(s, tc);
    tcase_add_checked_fixture(tt, setup_tls, teardown);
    tcase_set_timeout(tt, 300);
    tcase_add_test(tt, test_tls);
    suite_add_tcase(s, tt);
    return s;
}

RL_TEST_MAIN(regions_suite)
