/*
 * check_cluster: the cluster (docs/OPERATIONS.md) with real parts: a ZooKeeper server, three
 * rl-node processes and two rl-router processes on loopback. Checks that routers agree on
 * owners, that routers and nodes report the table digest of ZooKeeper's members, that a
 * node's death costs exactly its users their counts (failure policy until ZooKeeper drops
 * it, then zero on a survivor), that a restarted node takes exactly its shards back, that
 * losing ZooKeeper changes no decision, and that every process exits 0 on SIGTERM. Nodes
 * run with the test clock fixed, so counts are exact.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reqclient.h"
#include "clock.h"
#include "harness.h"
#include "rltest.h"
#include "ruleset.h"
#include "shardmap.h"

#define T_TIMEOUT 5000
#define NNODES 3
#define NUSERS 60
#define SHARDS 256
#define DEADLINE_MS 50
#define SESSION_MS 1000
#define NOW_MS 1700000000000ull

static struct rl_harness_zk zk;
static struct rl_harness_server nodes[NNODES];
static struct rl_harness_server routers[2];
static int node_ports[NNODES];
static int router_ports[2];
static char config[4096];
static const char *names[NNODES] = {"n1", "n2", "n3"};

static void
set_node_clock(int i)
{
    struct rl_client *c = NULL;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)node_ports[i], T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_clock(c, NOW_MS, T_TIMEOUT), 0);
    rl_client_destroy(c);
}

static int64_t
router_stat(int r, const char *key)
{
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;
    int64_t v;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_ports[r], T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_stats(c, &rep, T_TIMEOUT), 0);
    v = rl_client_stat(&rep, key, -1);
    rl_client_destroy(c);
    return v;
}

/* Waits until both routers see `want` members and the running nodes move no shard. */
static void
wait_members(int want)
{
    for (int i = 0; i < 200; i++) {
        if (router_stat(0, "members") == want && router_stat(1, "members") == want) {
            /* ... and the shards the change moved are in place (a node joining takes its
             * shards with their counters; the start moves them as each node joins). */
            rl_test_wait_settled(nodes, NNODES, routers, 2, want, 60000);
            return;
        }
        usleep(50 * 1000);
    }
    ck_abort_msg("routers never saw %d members", want);
}

static void
cluster_setup(void)
{
    char log[4096];

    rl_test_cluster_prepare(&zk, nodes, node_ports, NNODES, routers, router_ports, 2);
    ck_assert_int_eq(rl_harness_tmppath(config, sizeof(config), "cluster.conf"), 0);
    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "requests.log"), 0);
    ck_assert_int_eq(rl_harness_write_file(config,
                                           "[cluster]\n"
                                           "name = it\n"
                                           "zookeeper = %s\n"
                                           "session_timeout = %dms\n"
                                           "shards = %d\n"
                                           "[router]\n"
                                           "deadline = %dms\n"
                                           "request_log = %s\n"
                                           "[service fw]\n"
                                           "limit = fixed_window 1000 per 1h\n"
                                           "[service small]\n"
                                           "limit = fixed_window 10 per 1h\n"
                                           "[service closed]\n"
                                           "failure = closed\n"
                                           "limit = fixed_window 1000 per 1h\n",
                                           zk.connect, SESSION_MS, SHARDS, DEADLINE_MS, log),
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
    wait_members(NNODES);
}

static void
cluster_teardown(void)
{
    rl_harness_cleanup();
}

/*
 * The table every router builds when the live members are live[0..nlive): the names and
 * addresses the nodes registered in ZooKeeper, through rl_shardmap_create as router.c does.
 */
static struct rl_shardmap *
table_of(const int *live, int nlive)
{
    struct rl_member members[NNODES] = {0};
    struct rl_shardmap *m = NULL;

    for (int i = 0; i < nlive; i++) {
        snprintf(members[i].name, sizeof(members[i].name), "%s", names[live[i]]);
        snprintf(members[i].addr, sizeof(members[i].addr), "127.0.0.1:%d", node_ports[live[i]]);
    }
    RL_CHECK_INT_EQ(rl_shardmap_create(&m, SHARDS, members, (size_t)nlive, NULL), 0);
    return m;
}

/* The node (index into names) owning (svc, user) by table m. */
static int
owner_in(const struct rl_shardmap *m, const char *svc, const char *user)
{
    uint64_t h = rl_shardmap_key_hash(svc, strlen(svc), user, strlen(user));
    uint32_t o = rl_shardmap_owner(m, rl_shardmap_shard(h, SHARDS));

    RL_CHECK(o != RL_SHARDMAP_NONE, "no owner for %s/%s", svc, user);
    for (int i = 0; i < NNODES; i++) {
        if (strcmp(names[i], m->members[o].name) == 0) {
            return i;
        }
    }
    ck_abort_msg("owner %s is no node of the test", m->members[o].name);
    return -1;
}

/* The owner of a user of service svc, as every router must compute it. */
static int
owner_of(const char *svc, const char *user, const int *live, int nlive)
{
    struct rl_shardmap *m = table_of(live, nlive);
    int o = owner_in(m, svc, user);

    rl_shardmap_destroy(m);
    return o;
}

/* Both routers report, per live node, the shard count of the table computed here: the
 * test and the routers compute owners over the same members. */
static void
assert_routers_agree(const int *live, int nlive)
{
    struct rl_shardmap *m = table_of(live, nlive);
    char key[64];

    for (int i = 0; i < nlive; i++) {
        uint32_t mine = 0;

        for (uint32_t s = 0; s < SHARDS; s++) {
            mine += strcmp(m->members[rl_shardmap_owner(m, s)].name, names[live[i]]) == 0;
        }
        snprintf(key, sizeof(key), "node.%s.shards", names[live[i]]);
        for (int r = 0; r < 2; r++) {
            ck_assert_msg(router_stat(r, key) == mine, "router %d: %s = %lld, computed %u", r, key,
                          (long long)router_stat(r, key), mine);
        }
    }
    rl_shardmap_destroy(m);
}

/*
 * The STATS table_digest of the table built from what ZooKeeper says now, as a tool watching
 * the cluster computes it: the members listed under nodes/ with the addresses their znodes
 * hold, and no assignment (this cluster has none). Sets *nmembers to how many there are.
 */
static int64_t
zk_digest(int *nmembers)
{
    char kids[NNODES + 1][RL_HARNESS_ZK_NAME_MAX];
    char path[RL_HARNESS_ZK_NAME_MAX + 32], asg[8];
    struct rl_member members[NNODES] = {0};
    struct rl_shardmap *m = NULL;
    int64_t d;
    int n;

    n = rl_harness_zk_children(zk.connect, "/ratelimiter/it/nodes", kids, NNODES + 1);
    ck_assert_int_ge(n, 0);
    ck_assert_int_le(n, NNODES);
    memset(members, 0, sizeof(members));
    for (int i = 0; i < n; i++) {
        ck_assert_uint_lt(strlen(kids[i]), sizeof(members[i].name));
        snprintf(members[i].name, sizeof(members[i].name), "%.*s", RL_SHARDMAP_NAME_MAX - 1,
                 kids[i]);
        snprintf(path, sizeof(path), "/ratelimiter/it/nodes/%.*s", RL_HARNESS_ZK_NAME_MAX - 1,
                 kids[i]);
        ck_assert_int_gt(
            rl_harness_zk_get(zk.connect, path, members[i].addr, sizeof(members[i].addr)), 0);
    }
    ck_assert_int_eq(rl_harness_zk_get(zk.connect, "/ratelimiter/it/assignment", asg, sizeof(asg)),
                     -ENOENT);
    ck_assert_int_eq(rl_shardmap_create(&m, SHARDS, members, (size_t)n, NULL), 0);
    d = rl_shardmap_digest_stat(m);
    rl_shardmap_destroy(m);
    *nmembers = n;
    return d;
}

/*
 * Once the membership has settled on live[0..nlive) (polled for up to 5 s: routers and nodes
 * learn of members asynchronously), both routers and every live node report one non-zero
 * table_digest in STATS: that of the table built from ZooKeeper's members, which is also
 * the table this test computes for the live nodes.
 */
static void
assert_digests_agree(const int *live, int nlive)
{
    struct rl_shardmap *mine = table_of(live, nlive);
    int64_t want = 0, got[2 + NNODES];
    int nzk = -1, ngot = 0, t, same = 0;

    for (t = 0; t < 100 && !same; t++) {
        if (t > 0) {
            usleep(50 * 1000);
        }
        want = zk_digest(&nzk);
        ngot = 0;
        for (int r = 0; r < 2; r++) {
            got[ngot++] = router_stat(r, "table_digest");
        }
        for (int i = 0; i < nlive; i++) {
            got[ngot++] = rl_test_stat(node_ports[live[i]], "table_digest");
        }
        same = nzk == nlive && want != 0;
        for (int k = 0; k < ngot; k++) {
            same = same && got[k] == want;
        }
    }
    ck_assert_msg(same,
                  "after %d polls: ZooKeeper lists %d members (want %d), digest %lld; routers "
                  "report %lld and %lld, the first live node %lld",
                  t, nzk, nlive, (long long)want, (long long)got[0], (long long)got[1],
                  (long long)got[2]);
    ck_assert_int_eq(want, rl_shardmap_digest_stat(mine));
    rl_shardmap_destroy(mine);
}

/* A failure-policy answer to a user of the dead node, while it is still a member. */
static void
assert_policy(const struct rl_wire_check_reply *c, uint32_t want, const char *svc, const char *user)
{
    if (c->code != want) {
        ck_abort_msg("%s/%s, owned by the dead node: code %u (%s), want %s; the routers see %lld "
                     "and %lld members (if 2: its session expired before this answer)",
                     svc, user, c->code, rl_wire_code_name(c->code), rl_wire_code_name(want),
                     (long long)router_stat(0, "members"), (long long)router_stat(1, "members"));
    }
    ck_assert_uint_eq(c->limit, 0);
    ck_assert_uint_eq(c->remaining, 0);
    /* FAIL_CLOSED: retry once ZooKeeper has moved the shard (the session timeout). */
    ck_assert_uint_eq(c->retry_after_ms, want == RL_WIRE_FAIL_CLOSED ? SESSION_MS : 0);
}

static struct rl_client *
connect_router(int r)
{
    struct rl_client *c = NULL;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_ports[r], T_TIMEOUT), 0);
    return c;
}

static struct rl_wire_check_reply
check(struct rl_client *c, const char *svc, const char *user, uint32_t cost)
{
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_check(c, svc, user, NULL, cost, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
    return rep.check;
}

START_TEST(test_exact_limit_across_routers)
{
    struct rl_client *r0 = connect_router(0), *r1 = connect_router(1);
    struct rl_wire_reply rep;
    int allowed = 0;

    for (int i = 0; i < 25; i++) {
        struct rl_wire_check_reply c = check(i % 2 ? r1 : r0, "small", "carol", 1);

        allowed += c.code == RL_WIRE_ALLOWED;
        ck_assert(c.code == RL_WIRE_ALLOWED || c.code == RL_WIRE_LIMITED);
    }
    ck_assert_int_eq(allowed, 10);
    ck_assert_int_eq(rl_client_ping(r1, &rep, T_TIMEOUT), 0);
    {
        /* Its default name is HOSTNAME@HOST:PORT, the one it announces under routers/. */
        char host[64] = "", want[160];

        gethostname(host, sizeof(host) - 1);
        snprintf(want, sizeof(want), "%s@127.0.0.1:%d", host[0] ? host : "router",
                 router_ports[1]);
        ck_assert_uint_eq(rep.name.len, strlen(want));
        ck_assert_int_eq(memcmp(rep.name.ptr, want, rep.name.len), 0);
    }
    rl_client_destroy(r0);
    rl_client_destroy(r1);
}
END_TEST

static void
users_fill(char users[NUSERS][16])
{
    for (int u = 0; u < NUSERS; u++) {
        snprintf(users[u], 16, "user%d", u);
    }
}

/* Routers and nodes report the table_digest of ZooKeeper's view, for a watcher to compare. */
START_TEST(test_table_digest)
{
    static const int all[NNODES] = {0, 1, 2};

    assert_digests_agree(all, NNODES);
}
END_TEST

START_TEST(test_node_death_and_return)
{
    static const int all[NNODES] = {0, 1, 2}, survivors[2] = {0, 2};
    struct rl_client *r0 = connect_router(0), *r1 = connect_router(1);
    /* A second connection to each router lands on its other worker (the least loaded):
     * every worker of both routers sees the failover and the return. */
    struct rl_client *r0b = connect_router(0), *r1b = connect_router(1);
    struct rl_client *cl[4] = {r0, r1, r0b, r1b};
    char users[NUSERS][16];
    int owner[NUSERS], later[NUSERS], closed_owner[NUSERS], on_dead = 0, closed_dead = 0;
    uint64_t worst_ns = 0;
    int64_t digest_all;
    struct rl_wire_check_reply c;

    users_fill(users);
    /* Everyone spends 5 through alternating routers. */
    for (int u = 0; u < NUSERS; u++) {
        owner[u] = owner_of("fw", users[u], all, NNODES);
        later[u] = owner_of("fw", users[u], survivors, 2);
        on_dead += owner[u] == 1;
        for (int k = 0; k < 5; k++) {
            c = check(cl[k % 4], "fw", users[u], 1);
            ck_assert_uint_eq(c.code, RL_WIRE_ALLOWED);
        }
        ck_assert_uint_eq(c.remaining, 995);
        /* Only the dead node's users move when it leaves. */
        if (owner[u] != 1) {
            ck_assert_int_eq(later[u], owner[u]);
        }
    }
    ck_assert_int_gt(on_dead, 5);
    for (int u = 0; u < NUSERS; u++) {
        closed_owner[u] = owner_of("closed", users[u], all, NNODES);
        closed_dead += closed_owner[u] == 1;
    }
    ck_assert_int_gt(closed_dead, 0);
    /* The routers' tables are the one computed here. */
    assert_routers_agree(all, NNODES);
    assert_digests_agree(all, NNODES);
    digest_all = router_stat(0, "table_digest");

    ck_assert_int_eq(rl_harness_kill9(nodes[1].pid), 0);
    nodes[1].pid = 0;
    /*
     * Until ZooKeeper drops n2 (its session expires SESSION_MS after its last heartbeat),
     * exactly the users whose shard n2 owns (computed, not hoped for) get their service's
     * failure policy, fast: FAIL_CLOSED for the closed service, with a retry after the
     * session timeout, FAIL_OPEN for the others; everyone else is judged as usual.
     */
    for (int round = 0; round < 3; round++) {
        for (int u = 0; u < NUSERS; u++) {
            const char *svc = round == 0 ? "closed" : "fw";
            int o = round == 0 ? closed_owner[u] : owner[u];
            uint64_t t0 = rl_clock_mono_ns(), dt;

            c = check(cl[u % 4], svc, users[u], round == 0 ? 1 : 0);
            dt = rl_clock_mono_ns() - t0;
            worst_ns = dt > worst_ns ? dt : worst_ns;
            if (o == 1) {
                assert_policy(&c, round == 0 ? RL_WIRE_FAIL_CLOSED : RL_WIRE_FAIL_OPEN, svc,
                              users[u]);
            } else {
                ck_assert_uint_eq(c.code, RL_WIRE_ALLOWED);
                ck_assert_uint_eq(c.remaining, round == 0 ? 999 : 995);
            }
        }
    }
    /* All of that happened while n2 was down but still a member. */
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(router_stat(r, "node.n2.up"), 0);
        ck_assert_msg(router_stat(r, "members") == NNODES,
                      "router %d dropped n2 during the test of its failure policy", r);
    }
    /* Every answer came within the deadline plus a margin for a loaded machine. */
    ck_assert_msg(worst_ns < (DEADLINE_MS + 250) * 1000000ull, "slowest answer %llu ms",
                  (unsigned long long)(worst_ns / 1000000));

    wait_members(2);
    assert_routers_agree(survivors, 2);
    assert_digests_agree(survivors, 2);
    ck_assert_int_ne(router_stat(0, "table_digest"), digest_all);
    for (int u = 0; u < NUSERS; u++) {
        c = check(cl[u % 4], "fw", users[u], 1);
        ck_assert_uint_eq(c.code, RL_WIRE_ALLOWED);
        /* The dead node's users start from zero on a survivor; the others keep their count. */
        ck_assert_uint_eq(c.remaining, owner[u] == 1 ? 999 : 994);
    }

    /* n2 comes back: it takes exactly its shards back, with the counts the survivors kept
     * meanwhile (a planned move: docs/OPERATIONS.md, "Planned moves"). */
    ck_assert_int_eq(rl_harness_server_restart(&nodes[1]), 0);
    set_node_clock(1);
    wait_members(3);
    /* The same members as before: the same table, so the same digest. */
    assert_digests_agree(all, NNODES);
    ck_assert_int_eq(router_stat(0, "table_digest"), digest_all);
    ck_assert_int_eq(router_stat(0, "node.n2.up"), 1);
    for (int u = 0; u < NUSERS; u++) {
        c = check(cl[(u + 1) % 4], "fw", users[u], 1);
        ck_assert_uint_eq(c.code, RL_WIRE_ALLOWED);
        ck_assert_uint_eq(c.remaining, owner[u] == 1 ? 998 : 993);
    }
    for (int i = 0; i < 4; i++) {
        rl_client_destroy(cl[i]);
    }
}
END_TEST

/* An inline-limited CHECK (docs/PROTOCOL.md, "Inline limits") of user on the unconfigured
 * service "free": fixed_window 1000 per 1h. */
static struct rl_wire_check_reply
check_inline(struct rl_client *c, const char *user, uint32_t cost)
{
    struct rl_wire_limit lim = {.set = true, .algo = RL_ALGO_FIXED_WINDOW, .limit = 1000,
                                .window_ms = 3600000, .burst = 1000};
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_check_limit(c, "free", user, NULL, cost, &lim, &rep, T_TIMEOUT),
                     0);
    ck_assert_msg(rep.op == RL_WIRE_OP_CHECK, "op %u: %.*s", rep.op, (int)rep.message.len,
                  rep.message.ptr != NULL ? rep.message.ptr : "");
    return rep.check;
}

/* Inline counters fail over like any counter: the dead node's users get the inline failure
 * policy (open by default) until ZooKeeper drops it, then start from zero on a survivor;
 * everyone else keeps their count. */
START_TEST(test_inline_failover)
{
    static const int all[NNODES] = {0, 1, 2};
    struct rl_client *r0 = connect_router(0), *r1 = connect_router(1);
    char users[NUSERS][16];
    int owner[NUSERS], on_dead = 0;
    struct rl_wire_check_reply c;

    users_fill(users);
    for (int u = 0; u < NUSERS; u++) {
        owner[u] = owner_of("free", users[u], all, NNODES);
        on_dead += owner[u] == 1;
        for (int k = 0; k < 5; k++) {
            c = check_inline(k % 2 ? r1 : r0, users[u], 1);
            ck_assert_uint_eq(c.code, RL_WIRE_ALLOWED);
        }
        ck_assert_uint_eq(c.remaining, 995);
        ck_assert_uint_eq(c.limit, 1000);
    }
    ck_assert_int_gt(on_dead, 5);
    ck_assert_int_eq(rl_harness_kill9(nodes[1].pid), 0);
    nodes[1].pid = 0;
    for (int u = 0; u < NUSERS; u++) {
        c = check_inline(u % 2 ? r1 : r0, users[u], 0);
        if (owner[u] == 1) {
            assert_policy(&c, RL_WIRE_FAIL_OPEN, "free", users[u]);
        } else {
            ck_assert_uint_eq(c.code, RL_WIRE_ALLOWED);
            ck_assert_uint_eq(c.remaining, 995);
        }
    }
    wait_members(2);
    for (int u = 0; u < NUSERS; u++) {
        c = check_inline(u % 2 ? r0 : r1, users[u], 1);
        ck_assert_uint_eq(c.code, RL_WIRE_ALLOWED);
        ck_assert_uint_eq(c.remaining, owner[u] == 1 ? 999 : 994);
    }
    rl_client_destroy(r0);
    rl_client_destroy(r1);
}
END_TEST

START_TEST(test_zookeeper_outage)
{
    struct rl_client *r0 = connect_router(0), *r1 = connect_router(1);
    char users[NUSERS][16];
    char kids[NNODES + 1][RL_HARNESS_ZK_NAME_MAX];
    struct rl_wire_check_reply c;

    users_fill(users);
    for (int u = 0; u < NUSERS; u++) {
        check(r0, "fw", users[u], 3);
    }
    ck_assert_int_eq(rl_harness_zk_stop(&zk), 0);
    /* Longer than the session timeout: nothing about the decisions changes. */
    usleep(1500 * 1000);
    for (int u = 0; u < NUSERS; u++) {
        c = check(u % 2 ? r1 : r0, "fw", users[u], 1);
        ck_assert_uint_eq(c.code, RL_WIRE_ALLOWED);
        ck_assert_uint_eq(c.remaining, 996);
    }
    ck_assert_int_eq(router_stat(0, "members"), NNODES);
    ck_assert_int_eq(rl_harness_zk_start(&zk), 0);
    /* The nodes are registered again (same session, or a new one re-creating the znode). */
    ck_assert_int_eq(
        rl_harness_zk_wait_children(zk.connect, "/ratelimiter/it/nodes", NNODES, 20000), 0);
    ck_assert_int_eq(rl_harness_zk_children(zk.connect, "/ratelimiter/it/nodes", kids, NNODES + 1),
                     NNODES);
    ck_assert_str_eq(kids[0], "n1");
    ck_assert_str_eq(kids[2], "n3");
    wait_members(NNODES);
    rl_client_destroy(r0);
    rl_client_destroy(r1);
}
END_TEST

/* A router restarted while it cannot read ZooKeeper yet (frozen) does not answer by failure
 * policy for want of its view: a client that connects meanwhile waits (in the listen queue)
 * until the view is in, and is answered by the node. Before, the router accepted at once and
 * answered a `failure = closed` service FAIL_CLOSED, with every node up (router-kill in
 * rl-chaos caught it now and then). */
START_TEST(test_restarted_router_waits_for_its_view)
{
    struct rl_client *c = NULL;
    struct rl_wire_req req;
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_harness_server_stop(&routers[0], SIGTERM, 10000), 0);
    ck_assert_int_eq(rl_harness_pause(zk.pid), 0);
    ck_assert_int_eq(rl_harness_router_start(&routers[0], config, router_ports[0]), 0);
    ck_assert_int_eq(
        rl_client_connect(&c, "127.0.0.1", (uint16_t)router_ports[0], T_TIMEOUT), 0);
    memset(&req, 0, sizeof(req));
    req.op = RL_WIRE_OP_CHECK;
    req.id = 7;
    req.service.ptr = "closed";
    req.service.len = 6;
    req.user.ptr = "early";
    req.user.len = 5;
    req.cost = 1;
    ck_assert_int_eq(rl_client_queue(c, &req), 0);
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    usleep(100 * 1000);
    ck_assert_int_eq(kill(zk.pid, SIGCONT), 0);
    ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
    ck_assert_uint_eq(rep.id, 7);
    ck_assert_msg(rep.check.code == RL_WIRE_ALLOWED, "code %u (%s)", rep.check.code,
                  rl_wire_code_name(rep.check.code));
    rl_client_destroy(c);
}
END_TEST

START_TEST(test_sigterm_everything)
{
    char kids[NNODES + 1][RL_HARNESS_ZK_NAME_MAX];
    char addr[64], want[64];

    /* Each node's znode holds its address. */
    ck_assert_int_ge(rl_harness_zk_get(zk.connect, "/ratelimiter/it/nodes/n3", addr, sizeof(addr)),
                     0);
    snprintf(want, sizeof(want), "127.0.0.1:%d", node_ports[2]);
    ck_assert_str_eq(addr, want);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(rl_harness_server_stop(&routers[i], SIGTERM, 10000), 0);
        ck_assert(WIFEXITED(routers[i].status));
        ck_assert_int_eq(WEXITSTATUS(routers[i].status), 0);
    }
    for (int i = 0; i < NNODES; i++) {
        ck_assert_int_eq(rl_harness_server_stop(&nodes[i], SIGTERM, 10000), 0);
        ck_assert(WIFEXITED(nodes[i].status));
        ck_assert_int_eq(WEXITSTATUS(nodes[i].status), 0);
    }
    /* SIGTERM removed the znodes at once, not a session timeout later. */
    ck_assert_int_eq(rl_harness_zk_children(zk.connect, "/ratelimiter/it/nodes", kids, NNODES + 1),
                     0);
}
END_TEST

static Suite *
cluster_suite(void)
{
    Suite *s = suite_create("cluster");
    TCase *tc = tcase_create("cluster");

    tcase_add_checked_fixture(tc, cluster_setup, cluster_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_exact_limit_across_routers);
    tcase_add_test(tc, test_table_digest);
    tcase_add_test(tc, test_node_death_and_return);
    tcase_add_test(tc, test_inline_failover);
    tcase_add_test(tc, test_zookeeper_outage);
    tcase_add_test(tc, test_restarted_router_waits_for_its_view);
    tcase_add_test(tc, test_sigterm_everything);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(cluster_suite)
