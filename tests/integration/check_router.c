/*
 * check_router: the router's own promises, with real rl-node and rl-router processes (static
 * membership: nodes a and b, deadline 300 ms). The test computes which node owns a user the
 * way the router does (rl_shardmap_create over the [node] names and addresses) and checks
 * the router agrees (its STATS per-node shard counts and forwards). Asserted:
 *   - a request whose owner is paused (SIGSTOP) gets its service's failure policy at the
 *     deadline, FAIL_CLOSED or FAIL_OPEN, while the other node's users are served;
 *   - the late replies of a node paused and resumed are dropped: not sent to the client
 *     (no extra frame arrives; the next request gets its own reply and id), and not to the
 *     requests in flight on the same node when they arrive, which would have reused their
 *     slots had the router not kept them apart (each reply's limit and remaining are its
 *     own request's);
 *   - a service with no rule gets NO_RULE from the router itself, even with every node
 *     paused;
 *   - a CHECK relayed from its bytes (a common encoding) and one decoded and re-encoded (any
 *     other) reach the same counter on their owner, and each reply carries the client's id,
 *     of any width, in the encoder's bytes;
 *   - a client that sends without reading is paused, not buffered: its sends block, the
 *     router's RSS stays within tens of MB while it owes that client hundreds of MB of
 *     replies, another client is answered at once; then the slow client reads and gets
 *     every reply exactly once, the router's own in order;
 *   - SIGTERM answers what was forwarded: 20 CHECKs waiting at a paused node when the router
 *     is told to stop get their answers once the node resumes (a clean stop lost them with
 *     the connection), then the connection closes and the router exits 0;
 *   - a router whose ZooKeeper does not answer (a port nothing listens on) warns at most a few
 *     seconds after it started, naming the address, and again ~10 s later; meanwhile its
 *     /readyz answers 503 naming ZooKeeper and its address, STATS zk_state is "connecting",
 *     rl_zookeeper_connected is 0 and a CHECK gets its service's failure policy.
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

#include "buf.h"
#include "reqclient.h"
#include "clock.h"
#include "harness.h"
#include "httpget.h"
#include "rltest.h"
#include "shardmap.h"
#include "wire.h"
#include "zkm.h"

/* The router's deadline: long enough that a loaded machine's scheduling delays stay far
 * under it (test_late_replies_dropped must forward requests and resume a node within it), so
 * an answer by the deadline is told from one at once (under it) and from a wait for the
 * paused node (which never ends). */
#define DEADLINE_MS 1500
#define SESSION_MS 3000 /* the config's session_timeout: FAIL_CLOSED's retry_after */
#define SHARDS 64
#define T_TIMEOUT 5000

enum { NODE_A, NODE_B, NNODES };

static const char *const node_names[NNODES] = {"a", "b"};
static char conf_path[PATH_MAX];
static int node_ports[NNODES], router_port;
static struct rl_harness_server nodes[NNODES], router;
static struct rl_shardmap *map; /* the router's table, as computed here */

static int64_t
now_ms(void)
{
    return (int64_t)(rl_clock_mono_ns() / 1000000);
}

/* The [router] keys a tcase adds (fair_setup); "" for the rest. */
static const char *router_extra = "";
static int router_workers; /* 0: the harness's default */

static void
setup(void)
{
    struct rl_member members[NNODES] = {0};

    for (int i = 0; i < NNODES; i++) {
        node_ports[i] = rl_harness_free_port();
        ck_assert_int_gt(node_ports[i], 0);
    }
    router_port = rl_harness_free_port();
    ck_assert_int_gt(router_port, 0);
    ck_assert_int_eq(rl_harness_tmppath(conf_path, sizeof(conf_path), "router.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf_path,
                                           "[cluster]\nname = rt\nshards = %d\n"
                                           "session_timeout = %dms\n"
                                           "[router]\nlisten = 127.0.0.1:%d\ndeadline = %dms\n%s"
                                           "[node a]\nlisten = 127.0.0.1:%d\n"
                                           "[node b]\nlisten = 127.0.0.1:%d\n"
                                           "[service open]\nlimit = fixed_window 100 per 1h\n"
                                           "[service closed]\nfailure = closed\n"
                                           "limit = fixed_window 100 per 1h\n"
                                           "[service big]\nlimit = fixed_window 1000 per 1h\n"
                                           "[service wide]\nlimit = fixed_window 1000000 per 1h\n"
                                           "[service ep /x]\nlimit = fixed_window 5 per 1h\n",
                                           SHARDS, SESSION_MS, router_port, DEADLINE_MS,
                                           router_extra, node_ports[NODE_A], node_ports[NODE_B]),
                     0);
    /* The members the router builds from that config: the [node] names and addresses. */
    for (int i = 0; i < NNODES; i++) {
        snprintf(members[i].name, sizeof(members[i].name), "%s", node_names[i]);
        snprintf(members[i].addr, sizeof(members[i].addr), "127.0.0.1:%d", node_ports[i]);
    }
    ck_assert_int_eq(rl_shardmap_create(&map, SHARDS, members, NNODES, NULL), 0);
    memset(nodes, 0, sizeof(nodes));
    memset(&router, 0, sizeof(router));
    for (int i = 0; i < NNODES; i++) {
        ck_assert_int_eq(
            rl_harness_node_start(&nodes[i], conf_path, node_names[i], node_ports[i], 0), 0);
    }
    ck_assert_int_eq(router_workers > 0 ? rl_harness_router_start_workers(
                                              &router, conf_path, router_port, router_workers)
                                        : rl_harness_router_start(&router, conf_path, router_port),
                     0);
}

/* One worker (every connection on it), and a node window of FAIR_WINDOW. */
#define FAIR_WINDOW 64
static void
fair_setup(void)
{
    router_extra = "node_window = 64\n";
    router_workers = 1;
    setup();
}

static void
teardown(void)
{
    router_extra = "";
    router_workers = 0;
    rl_harness_cleanup();
    rl_shardmap_destroy(map);
    map = NULL;
}

/* The node (NODE_A, NODE_B) owning (svc, user), by the table computed in setup(). */
static int
owner_of(const char *svc, const char *user)
{
    uint64_t h = rl_shardmap_key_hash(svc, strlen(svc), user, strlen(user));
    uint32_t o = rl_shardmap_owner(map, rl_shardmap_shard(h, SHARDS));

    RL_CHECK(o != RL_SHARDMAP_NONE, "no owner for %s/%s", svc, user);
    for (int i = 0; i < NNODES; i++) {
        if (strcmp(map->members[o].name, node_names[i]) == 0) {
            return i;
        }
    }
    ck_abort_msg("owner %s is not a node of the config", map->members[o].name);
    return -1;
}

/* Writes into buf the k-th name "prefixN" (k from 0) whose (svc, name) node owns. */
static void
user_on(int node, const char *svc, const char *prefix, int k, char *buf, size_t len)
{
    for (int n = 0; n < 100000; n++) {
        snprintf(buf, len, "%s%d", prefix, n);
        if (owner_of(svc, buf) == node && k-- == 0) {
            return;
        }
    }
    ck_abort_msg("no user on node %s", node_names[node]);
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
    int64_t v;

    ck_assert_int_eq(rl_client_stats(c, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_STATS);
    v = rl_client_stat(&rep, key, -1);
    ck_assert_msg(v >= 0, "router STATS has no %s", key);
    return v;
}

static int64_t
node_stat(struct rl_client *c, int node, const char *what)
{
    char key[64];

    snprintf(key, sizeof(key), "node.%s.%s", node_names[node], what);
    return stat_of(c, key);
}

static struct rl_wire_check_reply
check(struct rl_client *c, const char *svc, const char *user, uint32_t cost)
{
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_check(c, svc, user, NULL, cost, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
    return rep.check;
}

static void
set_check(struct rl_wire_req *r, uint32_t id, const char *svc, const char *user, uint32_t cost)
{
    memset(r, 0, sizeof(*r));
    r->op = RL_WIRE_OP_CHECK;
    r->id = id;
    r->service.ptr = svc;
    r->service.len = (uint32_t)strlen(svc);
    r->user.ptr = user;
    r->user.len = (uint32_t)strlen(user);
    r->cost = cost;
}

static void
pause_node(int node)
{
    ck_assert_int_eq(rl_harness_pause(nodes[node].pid), 0);
}

static void
resume_node(int node)
{
    ck_assert_int_eq(kill(nodes[node].pid, SIGCONT), 0);
}

/* The router's table is the one computed here: same shard counts, and a user computed to
 * be a's is forwarded to a. */
START_TEST(test_router_agrees_on_owners)
{
    struct rl_client *c = connect_router();
    int64_t before[NNODES];
    char user[32];

    for (int i = 0; i < NNODES; i++) {
        uint32_t mine = 0;

        for (uint32_t s = 0; s < SHARDS; s++) {
            mine += strcmp(map->members[rl_shardmap_owner(map, s)].name, node_names[i]) == 0;
        }
        ck_assert_int_gt(mine, 0);
        ck_assert_int_eq(node_stat(c, i, "shards"), mine);
        ck_assert_int_eq(node_stat(c, i, "up"), 1);
    }
    for (int i = 0; i < NNODES; i++) {
        before[i] = node_stat(c, i, "forwarded");
    }
    for (int k = 0; k < 10; k++) {
        user_on(NODE_A, "open", "own", k, user, sizeof(user));
        ck_assert_uint_eq(check(c, "open", user, 1).code, RL_WIRE_ALLOWED);
    }
    ck_assert_int_eq(node_stat(c, NODE_A, "forwarded"), before[NODE_A] + 10);
    ck_assert_int_eq(node_stat(c, NODE_B, "forwarded"), before[NODE_B]);
    rl_client_destroy(c);
}
END_TEST

/* A clean stop loses no answer: CHECKs forwarded to a paused node when SIGTERM comes are
 * answered once it resumes (by the node, or by the policy at the deadline on a machine so
 * slow that the node resumed past it), then the router closes the connection and exits 0.
 * Before, it closed at once: no answer at all. */
START_TEST(test_sigterm_answers_what_was_forwarded)
{
    struct rl_client *c = connect_router(), *s = connect_router();
    struct rl_wire_req req;
    struct rl_wire_reply rep;
    char users[20][32];
    bool seen[21] = {false};
    int64_t before;

    user_on(NODE_A, "big", "drain", 0, users[0], sizeof(users[0]));
    ck_assert_uint_eq(check(c, "big", users[0], 1).code, RL_WIRE_ALLOWED); /* connections up */
    before = node_stat(s, NODE_A, "forwarded");
    rl_client_destroy(s);
    pause_node(NODE_A);
    for (uint32_t i = 0; i < 20; i++) {
        user_on(NODE_A, "big", "drain", (int)i, users[i], sizeof(users[i]));
        set_check(&req, i + 1, "big", users[i], 1);
        ck_assert_int_eq(rl_client_queue(c, &req), 0);
    }
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    /* all 20 are at the paused node (forwarded) before the router is told to stop */
    s = connect_router();
    for (int i = 0; i < 500 && node_stat(s, NODE_A, "forwarded") < before + 20; i++) {
        usleep(10 * 1000);
    }
    ck_assert_int_eq(node_stat(s, NODE_A, "forwarded"), before + 20);
    rl_client_destroy(s);
    ck_assert_int_eq(kill(router.pid, SIGTERM), 0);
    usleep(100 * 1000);
    resume_node(NODE_A);
    for (int i = 0; i < 20; i++) {
        ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
        ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
        ck_assert_msg(rep.id >= 1 && rep.id <= 20 && !seen[rep.id], "reply id %u", rep.id);
        seen[rep.id] = true;
        ck_assert_msg(rep.check.code == RL_WIRE_ALLOWED || rep.check.code == RL_WIRE_FAIL_OPEN,
                      "code %u", rep.check.code);
    }
    ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), -ECONNRESET);
    rl_client_destroy(c);
    /* it exits by itself (no second signal: one that came as the process ends would be
     * taken by the default action) */
    ck_assert_int_eq(rl_harness_wait(router.pid, 10000, &router.status), 0);
    router.pid = 0;
    ck_assert(WIFEXITED(router.status));
    ck_assert_int_eq(WEXITSTATUS(router.status), 0);
}
END_TEST

/* Sends one CHECK and waits for its reply: the reply, and how long it took in *ms. */
static struct rl_wire_check_reply
timed_check(struct rl_client *c, const char *svc, const char *user, int64_t *ms)
{
    int64_t t0 = now_ms();
    struct rl_wire_check_reply r = check(c, svc, user, 1);

    *ms = now_ms() - t0;
    return r;
}

START_TEST(test_deadline_gives_policy_reply)
{
    struct rl_client *c = connect_router();
    struct rl_wire_check_reply r;
    char ua[32], uc[32], ub[32];
    int64_t ms;

    user_on(NODE_A, "open", "u", 0, ua, sizeof(ua));
    user_on(NODE_A, "closed", "u", 0, uc, sizeof(uc));
    user_on(NODE_B, "open", "u", 0, ub, sizeof(ub));
    /* Connections to both nodes are up: what follows is the deadline, not a connect. */
    ck_assert_uint_eq(check(c, "open", ua, 1).code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(check(c, "closed", uc, 1).code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(check(c, "open", ub, 1).code, RL_WIRE_ALLOWED);

    pause_node(NODE_A);
    r = timed_check(c, "closed", uc, &ms);
    ck_assert_msg(r.code == RL_WIRE_FAIL_CLOSED, "closed service, owner paused: code %u (%s)",
                  r.code, rl_wire_code_name(r.code));
    ck_assert_uint_eq(r.retry_after_ms, SESSION_MS);
    ck_assert_uint_eq(r.limit, 0);
    ck_assert_uint_eq(r.remaining, 0);
    ck_assert_msg(ms >= DEADLINE_MS - 5 && ms < 2 * DEADLINE_MS,
                  "FAIL_CLOSED after %lld ms, deadline %d", (long long)ms, DEADLINE_MS);

    r = timed_check(c, "open", ua, &ms);
    ck_assert_msg(r.code == RL_WIRE_FAIL_OPEN, "open service, owner paused: code %u (%s)", r.code,
                  rl_wire_code_name(r.code));
    ck_assert_uint_eq(r.retry_after_ms, 0);
    ck_assert_uint_eq(r.limit, 0);
    ck_assert_msg(ms >= DEADLINE_MS - 5 && ms < 2 * DEADLINE_MS,
                  "FAIL_OPEN after %lld ms, deadline %d", (long long)ms, DEADLINE_MS);

    /* The other node's users are judged as usual (by the node: ALLOWED, not the policy). */
    r = check(c, "open", ub, 1);
    ck_assert_uint_eq(r.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(r.remaining, 98);

    ck_assert_int_eq(stat_of(c, "deadline_expired"), 2);
    ck_assert_int_eq(stat_of(c, "fail_closed"), 1);
    ck_assert_int_eq(stat_of(c, "fail_open"), 1);
    resume_node(NODE_A);
    rl_client_destroy(c);
}
END_TEST

/*
 * LATE requests of user "late" (service open: limit 100) wait on paused node a and get
 * FAIL_OPEN at the deadline. Then FRESH requests of other users of a (service big: limit
 * 1000) are forwarded to a while it is still paused, and a resumes: it answers the LATE ones
 * first, while the FRESH ones are in flight on the same connections. Each late reply must be
 * dropped; had one been taken for the request now in its slot, that request would show
 * limit 100 or the wrong remaining.
 *
 * Between the two, one request to node b (paused too) takes a slot without taking a turn of
 * a's round robin over its two connections. A router that reused the LATE slots at once
 * (last freed, first reused) would thus send each FRESH request on the very connection its
 * slot's LATE request went out on: the case where only the generation in the id tells the
 * late reply from the awaited one. Without that request, each would go out on the other
 * connection, and the connection check alone would hide a missing generation.
 */
START_TEST(test_late_replies_dropped)
{
    enum { LATE = 50, FRESH = 50, FRESH_ID = 1001, AFTER = 200 };
    struct rl_client *c = connect_router(), *watch = connect_router(), *spacer = connect_router();
    struct rl_wire_req reqs[AFTER];
    struct rl_wire_check_reply reps[AFTER];
    struct rl_wire_reply rep;
    static char users[AFTER][32];
    char late[32], ub[32];
    int seen[FRESH] = {0};
    int64_t forwarded, t0;
    struct pollfd pfd;

    user_on(NODE_A, "open", "late", 0, late, sizeof(late));
    for (int i = 0; i < FRESH; i++) {
        user_on(NODE_A, "big", "fresh", i, users[i], sizeof(users[i]));
    }
    user_on(NODE_B, "open", "spacer", 0, ub, sizeof(ub));
    /* Connections to both nodes up. */
    ck_assert_uint_eq(check(c, "open", late, 0).code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(check(spacer, "open", ub, 0).code, RL_WIRE_ALLOWED);

    pause_node(NODE_A);
    for (int i = 0; i < LATE; i++) {
        set_check(&reqs[i], 0, "open", late, 1);
    }
    ck_assert_int_eq(rl_client_check_many(c, reqs, LATE, reps, T_TIMEOUT), 0);
    for (int i = 0; i < LATE; i++) {
        RL_CHECK_UINT_EQ(reps[i].code, RL_WIRE_FAIL_OPEN);
    }

    /* The spacer, to paused node b; then FRESH requests in flight to paused node a. */
    pause_node(NODE_B);
    forwarded = stat_of(watch, "forwarded");
    set_check(&reqs[0], 77, "open", ub, 1);
    ck_assert_int_eq(rl_client_queue(spacer, &reqs[0]), 0);
    ck_assert_int_eq(rl_client_flush(spacer, T_TIMEOUT), 0);
    t0 = now_ms();
    while (stat_of(watch, "forwarded") < forwarded + 1) {
        ck_assert_msg(now_ms() - t0 < DEADLINE_MS / 2, "the router did not forward in time");
        usleep(2000);
    }
    for (int i = 0; i < FRESH; i++) {
        set_check(&reqs[i], FRESH_ID + (uint32_t)i, "big", users[i], 1);
        ck_assert_int_eq(rl_client_queue(c, &reqs[i]), 0);
    }
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    t0 = now_ms();
    while (stat_of(watch, "forwarded") < forwarded + 1 + FRESH) {
        ck_assert_msg(now_ms() - t0 < DEADLINE_MS / 2, "the router did not forward in time");
        usleep(2000);
    }
    resume_node(NODE_A);
    for (int n = 0; n < FRESH; n++) {
        uint32_t k;

        ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
        k = rep.id - FRESH_ID;
        ck_assert_msg(rep.id >= FRESH_ID && k < FRESH && !seen[k],
                      "reply id %u (op %u, code %u, limit %llu): no request in flight has it",
                      rep.id, rep.op, rep.check.code, (unsigned long long)rep.check.limit);
        seen[k] = 1;
        ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
        ck_assert_msg(rep.check.code == RL_WIRE_ALLOWED && rep.check.limit == 1000 &&
                          rep.check.remaining == 999,
                      "request %u (%s) got code %u limit %llu remaining %llu: another's reply",
                      rep.id, users[k], rep.check.code, (unsigned long long)rep.check.limit,
                      (unsigned long long)rep.check.remaining);
    }

    /* The spacer gets its policy reply; then b wakes up and answers it late too. */
    ck_assert_int_eq(rl_client_recv(spacer, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.id, 77);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_FAIL_OPEN);
    resume_node(NODE_B);

    /* The nodes answered every late request; the router dropped them all. */
    t0 = now_ms();
    while (stat_of(watch, "late_replies") < LATE + 1 && now_ms() - t0 < T_TIMEOUT) {
        usleep(10000);
    }
    ck_assert_int_eq(stat_of(watch, "late_replies"), LATE + 1);
    pfd.fd = rl_client_fd(c);
    pfd.events = POLLIN;
    ck_assert_msg(poll(&pfd, 1, 300) == 0, "a frame arrived that no request asked for");

    /* The next request on that connection: the first frame back is its reply. */
    set_check(&reqs[0], 4242, "big", users[0], 1);
    ck_assert_int_eq(rl_client_queue(c, &reqs[0]), 0);
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.id, 4242);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.check.remaining, 998);

    /* Many more, pipelined (ids 1..AFTER), each with a count only its own reply carries. */
    for (int i = 0; i < AFTER; i++) {
        snprintf(users[i], sizeof(users[i]), "after%d", i);
        set_check(&reqs[i], 0, "big", users[i], 1 + (uint32_t)(i % 7));
    }
    ck_assert_int_eq(rl_client_check_many(c, reqs, AFTER, reps, T_TIMEOUT), 0);
    for (int i = 0; i < AFTER; i++) {
        RL_CHECK_UINT_EQ(reps[i].id, reqs[i].id);
        RL_CHECK_UINT_EQ(reps[i].code, RL_WIRE_ALLOWED);
        RL_CHECK_UINT_EQ(reps[i].remaining, 1000 - 1 - (uint32_t)(i % 7));
    }
    /* The node did count the late requests: they reached it. */
    ck_assert_uint_eq(check(c, "open", late, 0).remaining, 100 - LATE);
    ck_assert_int_eq(stat_of(watch, "late_replies"), LATE + 1);
    rl_client_destroy(c);
    rl_client_destroy(watch);
    rl_client_destroy(spacer);
}
END_TEST

START_TEST(test_no_rule)
{
    struct rl_client *c = connect_router();
    struct rl_wire_check_reply r;
    struct rl_wire_reply rep;
    int64_t ms;

    /* Every node paused: the router answers by itself, at once. */
    pause_node(NODE_A);
    pause_node(NODE_B);
    r = timed_check(c, "nosuch", "u", &ms);
    ck_assert_msg(r.code == RL_WIRE_NO_RULE, "code %u (%s)", r.code, rl_wire_code_name(r.code));
    ck_assert_uint_eq(r.limit, 0);
    ck_assert_uint_eq(r.remaining, 0);
    ck_assert_uint_eq(r.retry_after_ms, 0);
    /* by itself: NO_RULE, never the deadline's failure policy; and before the deadline */
    ck_assert_msg(ms < DEADLINE_MS, "NO_RULE after %lld ms", (long long)ms);
    /* A service with rules for one endpoint only: the others have none. */
    ck_assert_int_eq(rl_client_check(c, "ep", "u", "/y", 1, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_NO_RULE);
    ck_assert_int_eq(rl_client_check(c, "ep", "u", NULL, 1, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_NO_RULE);
    ck_assert_int_eq(stat_of(c, "no_rule"), 3);
    ck_assert_int_eq(stat_of(c, "forwarded"), 0);
    resume_node(NODE_A);
    resume_node(NODE_B);
    /* ...and the endpoint that has a rule is judged by its owner. */
    ck_assert_int_eq(rl_client_check(c, "ep", "u", "/x", 1, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.check.limit, 5);
    ck_assert_int_eq(stat_of(c, "forwarded"), 1);
    {
        /* HELLO, [5, 9, "r"], a node's op: UNKNOWN_OP with its number (docs/PROTOCOL.md) */
        static const char hello[] = "\0\0\0\x05\x93\x05\x09\xa1r";

        rl_test_expect_unknown_op(c, hello, sizeof(hello) - 1, 9, "unknown op 5");
    }
    rl_client_destroy(c);
}
END_TEST

/* ---- CHECKs relayed from their bytes ------------------------------------------------------ */

/* Sends payload p[0..n) as one frame on fd and reads one reply frame into rep (its payload
 * bytes into raw, *rawn long). */
static void
raw_exchange(int fd, const unsigned char *p, size_t n, struct rl_wire_reply *rep, char *raw,
             size_t *rawn)
{
    static struct rl_wire_decoder dec;
    static bool dec_ready;
    unsigned char hdr[RL_WIRE_HDR_LEN] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16),
                                          (unsigned char)(n >> 8), (unsigned char)n};
    char in[512];
    size_t got = 0, plen = 0;
    int64_t until = now_ms() + T_TIMEOUT;

    if (!dec_ready) {
        ck_assert_int_eq(rl_wire_decoder_init(&dec), 0);
        dec_ready = true;
    }
    ck_assert_int_eq(send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL), (ssize_t)sizeof(hdr));
    ck_assert_int_eq(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
    while (rl_wire_frame(in, got, &plen) != 1) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ssize_t r;

        RL_CHECK(now_ms() < until, "no reply within %d ms", T_TIMEOUT);
        RL_CHECK(got < sizeof(in), "reply too long");
        if (poll(&pfd, 1, 100) <= 0) {
            continue;
        }
        r = recv(fd, in + got, sizeof(in) - got, 0);
        RL_CHECK(r > 0, "recv: %zd", r);
        got += (size_t)r;
    }
    RL_CHECK(got == RL_WIRE_HDR_LEN + plen, "more than one frame came back");
    memcpy(raw, in + RL_WIRE_HDR_LEN, plen);
    *rawn = plen;
    ck_assert_int_eq(rl_wire_decode_reply(&dec, raw, plen, rep), 0);
}

/*
 * A CHECK is relayed from its bytes when it is in a common encoding and decoded and
 * re-encoded otherwise: either way its owner judges the same key (one counter goes down by
 * one each time), and the client gets its own id back, of every width, in the bytes the
 * encoder writes (shortest formats).
 */
START_TEST(test_relay_encodings)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)router_port)};
    struct rl_client *c = connect_router();
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    struct rl_wire_check_reply want;
    struct rl_buf re;
    char user[16], raw[512];
    unsigned char f[64];
    size_t n, rawn, ul;
    int fd;
    /* id, then how the frame differs from [1, id, "big", user, nil, 1] */
    static const struct {
        uint32_t id;
        int how;
    } cases[] = {
        {0, 0},           /* the encoder's bytes: relayed */
        {128, 1},         /* cost as a signed 32-bit integer: decoded, re-encoded */
        {65536, 2},       /* the service in a str 8 header: relayed */
        {4294967295u, 3}, /* the op as a uint 8: decoded, re-encoded */
        {255, 4},         /* the endpoint "" (the service as a whole): relayed */
        {5, 5},           /* the id 5 as a uint 32: relayed, answered under a 1-byte id */
    };

    user_on(NODE_A, "big", "relay", 0, user, sizeof(user));
    ul = strlen(user);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    rl_buf_init(&re);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint32_t id = cases[i].id;
        int how = cases[i].how;

        n = 0;
        f[n++] = 0x96;
        if (how == 3) {
            f[n++] = 0xcc;
        }
        f[n++] = 0x01;
        if (how == 5 || id > 0xffff) {
            f[n++] = 0xce;
            f[n++] = (unsigned char)(id >> 24);
            f[n++] = (unsigned char)(id >> 16);
            f[n++] = (unsigned char)(id >> 8);
            f[n++] = (unsigned char)id;
        } else if (id > 0x7f) {
            f[n++] = 0xcc;
            f[n++] = (unsigned char)id;
        } else {
            f[n++] = (unsigned char)id;
        }
        if (how == 2) {
            f[n++] = 0xd9;
            f[n++] = 3;
        } else {
            f[n++] = 0xa3;
        }
        memcpy(f + n, "big", 3);
        n += 3;
        f[n++] = (unsigned char)(0xa0 | ul);
        memcpy(f + n, user, ul);
        n += ul;
        f[n++] = how == 4 ? 0xa0 : 0xc0;
        if (how == 1) {
            f[n++] = 0xd2;
            f[n++] = 0;
            f[n++] = 0;
            f[n++] = 0;
        }
        f[n++] = 0x01;
        raw_exchange(fd, f, n, rep, raw, &rawn);
        ck_assert_msg(rep->op == RL_WIRE_OP_CHECK && rep->id == id, "case %zu: op %u id %u", i,
                      rep->op, rep->id);
        ck_assert_msg(rep->check.code == RL_WIRE_ALLOWED && rep->check.limit == 1000 &&
                          rep->check.remaining == 999 - i,
                      "case %zu: code %u limit %llu remaining %llu", i, rep->check.code,
                      (unsigned long long)rep->check.limit,
                      (unsigned long long)rep->check.remaining);
        want = rep->check;
        rl_buf_reset(&re);
        ck_assert_int_eq(rl_wire_put_check_reply(&re, &want), 0);
        ck_assert_msg(re.len == RL_WIRE_HDR_LEN + rawn &&
                          memcmp(re.data + RL_WIRE_HDR_LEN, raw, rawn) == 0,
                      "case %zu: the reply's bytes are not the encoder's", i);
    }
    ck_assert_int_eq(node_stat(c, NODE_A, "forwarded"),
                     (int64_t)(sizeof(cases) / sizeof(cases[0])));
    close(fd);
    rl_buf_deinit(&re);
    free(rep);
    rl_client_destroy(c);
}
END_TEST

/* ---- a client that does not read --------------------------------------------------------- */

/* The router's resident memory, kB. */
static long
rss_kb(pid_t pid)
{
    char path[64], buf[4096];
    const char *p;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    RL_CHECK(rl_harness_read_file(path, buf, sizeof(buf)) > 0, "cannot read %s", path);
    p = strstr(buf, "VmRSS:");
    RL_CHECK(p != NULL);
    return strtol(p + 6, NULL, 10);
}

/*
 * The slow client's request stream: units of SLOW_UNIT_FRAMES requests, mostly STATS (7
 * bytes of payload answered with hundreds), a PING, and a CHECK (service big, cost 0: a
 * peek the node answers ALLOWED with remaining 1000), with ids SLOW_ID0, SLOW_ID0 + 1, ...
 * so that every id encodes in 5 bytes and every unit has the same size and frame
 * boundaries.
 */
#define SLOW_ID0 (1u << 20)
#define SLOW_UNIT_FRAMES 8
#define SLOW_CHECK_AT 3 /* the CHECK's place in a unit */
#define SLOW_UNITS_PER_CHUNK 2048

static const uint32_t slow_ops[SLOW_UNIT_FRAMES] = {
    RL_WIRE_OP_STATS, RL_WIRE_OP_PING,  RL_WIRE_OP_STATS, RL_WIRE_OP_CHECK,
    RL_WIRE_OP_STATS, RL_WIRE_OP_STATS, RL_WIRE_OP_STATS, RL_WIRE_OP_STATS};

struct slow_stream {
    int fd;
    struct rl_buf chunk;                /* the unit being sent and the ones after it */
    uint64_t next_unit;                 /* first unit not yet in chunk */
    uint64_t sent;                      /* bytes sent */
    size_t frame_end[SLOW_UNIT_FRAMES]; /* end offsets of the frames within a unit */
    size_t unit_len;
    const char *user;
};

static void
slow_put_unit(struct rl_buf *b, uint64_t unit, const char *user)
{
    uint32_t id = SLOW_ID0 + (uint32_t)(unit * SLOW_UNIT_FRAMES);
    struct rl_wire_req req;

    for (uint32_t i = 0; i < SLOW_UNIT_FRAMES; i++) {
        if (slow_ops[i] == RL_WIRE_OP_STATS) {
            RL_CHECK_INT_EQ(rl_wire_put_stats(b, id + i), 0);
        } else if (slow_ops[i] == RL_WIRE_OP_PING) {
            RL_CHECK_INT_EQ(rl_wire_put_ping(b, id + i), 0);
        } else {
            set_check(&req, id + i, "big", user, 0);
            RL_CHECK_INT_EQ(rl_wire_put_check(b, &req), 0);
        }
    }
}

static void
slow_init(struct slow_stream *s, int fd, const char *user)
{
    struct rl_buf b;
    size_t prev = 0;

    memset(s, 0, sizeof(*s));
    s->fd = fd;
    s->user = user;
    rl_buf_init(&s->chunk);
    rl_buf_init(&b);
    /* The frame boundaries of one unit (any unit: every id takes 5 bytes). */
    slow_put_unit(&b, 0, user);
    s->unit_len = b.len;
    for (int i = 0; i < SLOW_UNIT_FRAMES; i++) {
        size_t len = 0;

        ck_assert_int_eq(rl_wire_frame(b.data + prev, b.len - prev, &len), 1);
        prev += RL_WIRE_HDR_LEN + len;
        s->frame_end[i] = prev;
    }
    ck_assert_uint_eq(prev, s->unit_len);
    rl_buf_deinit(&b);
}

/* Whole frames among the bytes sent so far. */
static uint64_t
slow_frames_sent(const struct slow_stream *s)
{
    uint64_t frames = s->sent / s->unit_len * SLOW_UNIT_FRAMES;
    size_t rest = (size_t)(s->sent % s->unit_len);

    for (int i = 0; i < SLOW_UNIT_FRAMES && s->frame_end[i] <= rest; i++) {
        frames++;
    }
    return frames;
}

/* Bytes to send to finish the frame cut by the last send (0 when none is cut). */
static size_t
slow_cut(const struct slow_stream *s)
{
    size_t rest = (size_t)(s->sent % s->unit_len);

    for (int i = 0; i < SLOW_UNIT_FRAMES; i++) {
        if (rest <= s->frame_end[i]) {
            return rest == 0 ? 0 : s->frame_end[i] - rest;
        }
    }
    return 0;
}

/* One non-blocking send of at most max bytes of the stream; returns what send(2) did. */
static ssize_t
slow_send(struct slow_stream *s, size_t max)
{
    ssize_t w;

    if (rl_buf_unread(&s->chunk) == 0) {
        rl_buf_reset(&s->chunk);
        for (int i = 0; i < SLOW_UNITS_PER_CHUNK; i++) {
            slow_put_unit(&s->chunk, s->next_unit++, s->user);
        }
    }
    w = send(s->fd, s->chunk.data + s->chunk.pos,
             rl_buf_unread(&s->chunk) < max ? rl_buf_unread(&s->chunk) : max,
             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
        s->chunk.pos += (size_t)w;
        s->sent += (uint64_t)w;
    }
    return w;
}

START_TEST(test_slow_reader_paused)
{
    /* The router may keep this much more memory for the slow client (it owes far more). */
    enum { RSS_GROWTH_MAX_KB = 24 * 1024, IDLE_MS = 1000 };
    const uint64_t send_max = 256ull << 20; /* the client gives up asking after this */
    struct rl_client *other = connect_router();
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)router_port)};
    struct slow_stream s;
    struct rl_wire_decoder dec;
    struct rl_wire_reply rep;
    struct rl_buf in;
    char user[32];
    uint64_t frames, want_local, want_checks, got_local = 0, got_checks = 0, got_allowed = 0, owed;
    uint32_t last_local = 0;
    uint8_t *check_seen;
    uint64_t stats_len = 0;
    long rss0, rss;
    int fd, small = 4096;
    int64_t idle_since, t0;

    user_on(NODE_A, "big", "slow", 0, user, sizeof(user));
    /* The size of the router's STATS reply, re-encoded from one (the counters grow, so the
     * replies to come are at least this big). */
    {
        static char names[RL_WIRE_STATS_MAX][128];
        const char *keys[RL_WIRE_STATS_MAX];
        struct rl_buf b;

        ck_assert_int_eq(rl_client_stats(other, &rep, T_TIMEOUT), 0);
        for (size_t i = 0; i < rep.nstats; i++) {
            snprintf(names[i], sizeof(names[i]), "%.*s", (int)rep.stat_keys[i].len,
                     rep.stat_keys[i].ptr);
            keys[i] = names[i];
        }
        rl_buf_init(&b);
        ck_assert_int_eq(rl_wire_put_stats_reply(&b, SLOW_ID0, keys, rep.stat_vals, rep.nstats), 0);
        stats_len = b.len;
        rl_buf_deinit(&b);
    }
    ck_assert_uint_eq(check(other, "big", user, 0).code, RL_WIRE_ALLOWED);
    rss0 = rss_kb(router.pid);

    fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    slow_init(&s, fd, user);

    /* Ask without reading until the router has taken nothing for IDLE_MS. */
    idle_since = now_ms();
    for (uint64_t checked = 0;;) {
        ssize_t w = slow_send(&s, SIZE_MAX);

        if (w > 0) {
            idle_since = now_ms();
        } else {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};

            RL_CHECK(w < 0 && errno == EAGAIN, "send: %zd (%s)", w, strerror(errno));
            if (now_ms() - idle_since >= IDLE_MS) {
                break;
            }
            poll(&pfd, 1, 50);
        }
        if (s.sent - checked >= (1u << 20)) {
            checked = s.sent;
            rss = rss_kb(router.pid);
            RL_CHECK(rss - rss0 < RSS_GROWTH_MAX_KB,
                     "router RSS grew by %ld kB after %llu bytes from a client that reads "
                     "nothing",
                     rss - rss0, (unsigned long long)s.sent);
        }
        RL_CHECK(s.sent < send_max, "the router read %llu bytes from a client that reads nothing",
                 (unsigned long long)s.sent);
    }
    frames = slow_frames_sent(&s);
    owed = frames / SLOW_UNIT_FRAMES * (SLOW_UNIT_FRAMES - 2) * stats_len;
    rss = rss_kb(router.pid);
    fprintf(stderr,
            "check_router: slow client blocked after %llu bytes (%llu requests, over %llu MB "
            "of replies owed); router RSS %ld kB -> %ld kB\n",
            (unsigned long long)s.sent, (unsigned long long)frames,
            (unsigned long long)(owed >> 20), rss0, rss);
    ck_assert_msg(rss - rss0 < RSS_GROWTH_MAX_KB, "router RSS grew by %ld kB", rss - rss0);
    /* The test means something: the router owes far more than it may hold. */
    ck_assert_msg(owed > 3 * (uint64_t)RSS_GROWTH_MAX_KB * 1024, "only %llu MB of replies owed",
                  (unsigned long long)(owed >> 20));

    /* Meanwhile another client is answered at once. */
    t0 = now_ms();
    ck_assert_int_eq(rl_client_ping(other, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(check(other, "big", user, 0).code, RL_WIRE_ALLOWED);
    ck_assert_msg(now_ms() - t0 < 5000, "another client waited %lld ms",
                  (long long)(now_ms() - t0)); /* a generous bound: blocked, it would never be */

    /* The slow client finishes the frame it had cut, and reads: every request is answered
     * exactly once; the router's own answers (STATS, PING) come in request order. */
    {
        size_t cut = slow_cut(&s);

        frames += cut > 0;
        want_checks = frames / SLOW_UNIT_FRAMES + (frames % SLOW_UNIT_FRAMES > SLOW_CHECK_AT);
        want_local = frames - want_checks;
        check_seen = calloc(frames / SLOW_UNIT_FRAMES + 1, 1);
        ck_assert_ptr_nonnull(check_seen);
        ck_assert_int_eq(rl_wire_decoder_init(&dec), 0);
        rl_buf_init(&in);
        t0 = now_ms();
        while (got_local + got_checks < frames) {
            struct pollfd pfd = {.fd = fd, .events = POLLIN | (cut > 0 ? POLLOUT : 0)};
            size_t len;
            ssize_t r;

            RL_CHECK(poll(&pfd, 1, 10000) == 1, "stalled after %llu of %llu replies",
                     (unsigned long long)(got_local + got_checks), (unsigned long long)frames);
            if (cut > 0 && (pfd.revents & POLLOUT)) {
                r = slow_send(&s, cut);
                RL_CHECK(r > 0 || errno == EAGAIN, "send: %s", strerror(errno));
                cut -= r > 0 ? (size_t)r : 0;
            }
            if (!(pfd.revents & POLLIN)) {
                continue;
            }
            rl_buf_compact(&in);
            RL_CHECK_INT_EQ(rl_buf_reserve(&in, 1 << 16), 0);
            r = recv(fd, in.data + in.len, in.cap - in.len, 0);
            RL_CHECK(r > 0, "recv: %zd (%s) after %llu of %llu replies", r,
                     r < 0 ? strerror(errno) : "closed",
                     (unsigned long long)(got_local + got_checks), (unsigned long long)frames);
            in.len += (size_t)r;
            while (rl_wire_frame(in.data + in.pos, rl_buf_unread(&in), &len) == 1) {
                const char *p = in.data + in.pos + RL_WIRE_HDR_LEN;
                uint32_t k;

                in.pos += RL_WIRE_HDR_LEN + len;
                RL_CHECK_INT_EQ(rl_wire_decode_reply(&dec, p, len, &rep), 0);
                k = rep.id - SLOW_ID0;
                RL_CHECK(rep.id >= SLOW_ID0 && k < frames, "reply id %u: never asked", rep.id);
                RL_CHECK_UINT_EQ(rep.op, slow_ops[k % SLOW_UNIT_FRAMES]);
                if (rep.op == RL_WIRE_OP_CHECK) {
                    RL_CHECK(!check_seen[k / SLOW_UNIT_FRAMES], "CHECK %u answered twice", rep.id);
                    check_seen[k / SLOW_UNIT_FRAMES] = 1;
                    /* The node's answer; or, on a machine too loaded for the node to answer
                     * within the 300 ms deadline, the service's policy (FAIL_OPEN): still
                     * exactly one reply. Most must be the node's (asserted below). */
                    RL_CHECK(rep.check.code == RL_WIRE_ALLOWED ||
                                 rep.check.code == RL_WIRE_FAIL_OPEN,
                             "CHECK %u answered %u", rep.id, rep.check.code);
                    if (rep.check.code == RL_WIRE_ALLOWED) {
                        RL_CHECK_UINT_EQ(rep.check.remaining, 1000);
                        got_allowed++;
                    }
                    got_checks++;
                } else {
                    RL_CHECK(rep.id > last_local, "reply %u after reply %u", rep.id, last_local);
                    last_local = rep.id;
                    got_local++;
                }
            }
        }
        fprintf(stderr, "check_router: slow client read %llu replies in %lld ms\n",
                (unsigned long long)frames, (long long)(now_ms() - t0));
    }
    ck_assert_uint_eq(got_checks, want_checks);
    ck_assert_msg(got_allowed * 10 >= got_checks * 9, "only %llu of %llu CHECKs were the node's",
                  (unsigned long long)got_allowed, (unsigned long long)got_checks);
    ck_assert_uint_eq(got_local, want_local);
    ck_assert_uint_eq(rl_buf_unread(&in), 0);
    /* Nothing more: no reply to a request never sent. */
    {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};

        ck_assert_int_eq(poll(&pfd, 1, 200), 0);
    }
    rl_wire_decoder_deinit(&dec);
    rl_buf_deinit(&in);
    rl_buf_deinit(&s.chunk);
    free(check_seen);
    close(fd);
    rl_client_destroy(other);
}
END_TEST

/* How many times needle is in the file at path. */
static int
log_count(const char *path, const char *needle)
{
    static char buf[1 << 20];
    int n = 0;

    if (rl_harness_read_file(path, buf, sizeof(buf)) < 0) {
        return 0;
    }
    for (const char *p = strstr(buf, needle); p != NULL; p = strstr(p + 1, needle)) {
        n++;
    }
    return n;
}

/* Waits until needle is in the file at path `times` times; returns the ms since t0 then, or -1
 * once limit_ms since t0 passed without it. */
static int64_t
log_wait(const char *path, const char *needle, int times, int64_t t0, int64_t limit_ms)
{
    while (now_ms() - t0 < limit_ms) {
        if (log_count(path, needle) >= times) {
            return now_ms() - t0;
        }
        usleep(50 * 1000);
    }
    return -1;
}

START_TEST(test_zookeeper_unreachable)
{
    static char log[1 << 16];
    int zk_port = rl_harness_free_port(), port = rl_harness_free_port();
    int mport = rl_harness_free_port();
    char conf[PATH_MAX], zk[64], needle[128];
    struct rl_harness_server rt;
    struct rl_http_resp resp;
    struct rl_wire_reply rep;
    struct rl_client *c = NULL;
    int64_t t0, first, second;

    ck_assert_int_gt(zk_port, 0);
    snprintf(zk, sizeof(zk), "127.0.0.1:%d", zk_port);
    ck_assert_int_eq(rl_harness_tmppath(conf, sizeof(conf), "lonely.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf,
                                           "[cluster]\nname = lonely\nzookeeper = %s\n"
                                           "session_timeout = %dms\nshards = %d\n"
                                           "[router]\nmetrics = 127.0.0.1:%d\n"
                                           "[service closed]\nfailure = closed\n"
                                           "limit = fixed_window 100 per 1h\n",
                                           zk, SESSION_MS, SHARDS, mport),
                     0);
    memset(&rt, 0, sizeof(rt));
    t0 = now_ms();
    ck_assert_int_eq(rl_harness_router_start(&rt, conf, port), 0);

    /* The warning: a few seconds after the start (3 s), well before the 10 s of a repeat
     * (a generous bound for a loaded machine). */
    snprintf(needle, sizeof(needle), "ZooKeeper at %s not reachable", zk);
    first = log_wait(rt.log_path, needle, 1, t0, 15000);
    rl_harness_read_file(rt.log_path, log, sizeof(log));
    ck_assert_msg(first >= 0, "no warning naming %s within 15 s; the log:\n%s", zk, log);
    ck_assert_msg(first <= 9000, "the first warning came %lld ms after the start",
                  (long long)first);
    ck_assert_msg(strstr(log, "no members, so every CHECK is answered by its service's failure "
                              "policy") != NULL,
                  "the warning does not say what it means: %s", log);

    /* /readyz names ZooKeeper and its address. */
    ck_assert_int_eq(rl_http_get(mport, "/readyz", T_TIMEOUT, &resp), 0);
    ck_assert_int_eq(resp.status, 503);
    ck_assert_msg(strstr(resp.body, needle) != NULL && strstr(resp.body, "no members") != NULL,
                  "/readyz: %s", resp.body);
    rl_http_free(&resp);
    ck_assert_int_eq(rl_http_get(mport, "/metrics", T_TIMEOUT, &resp), 0);
    ck_assert_msg(strstr(resp.body, "\nrl_zookeeper_connected 0\n") != NULL,
                  "rl_zookeeper_connected is not 0");
    rl_http_free(&resp);

    /* STATS says the session is connecting; a CHECK gets the failure policy. */
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)port, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_stats(c, &rep, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_stat(&rep, "zk_state", -99), RL_ZKM_CONNECTING);
    ck_assert_int_eq(rl_client_check(c, "closed", "u", NULL, 1, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_FAIL_CLOSED);
    rl_client_destroy(c);

    /* And again every 10 s while it lasts. */
    second = log_wait(rt.log_path, needle, 2, t0, first + 14000);
    ck_assert_msg(second >= 0, "no second warning within 14 s of the first");
    ck_assert_msg(second - first >= 8000, "warned again after %lld ms",
                  (long long)(second - first));
}
END_TEST

static void
zk_teardown(void)
{
    rl_harness_cleanup();
}

/*
 * A node's router reserve smaller than the router's workers x 3 connections (here 2 for 4
 * workers: 12): the connections past it are served as clients' (their HELLO answered
 * OVERLOADED, the connection kept), so every worker reaches the node and answers from it,
 * never by failure policy, and none reconnects in a loop (before: each was closed at once,
 * reconnected, closed again, and its worker answered FAIL_OPEN with the node up), nor is it
 * closed for idle_timeout as a client's would be.
 */
START_TEST(test_hello_past_the_reserve_is_served)
{
    char conf[PATH_MAX], user[32];
    int np = rl_harness_free_port(), rp = rl_harness_free_port();
    struct rl_harness_server node = {0}, rt = {0};
    struct rl_client *cs[8] = {0}, *nc = NULL;
    struct rl_wire_reply rep;
    int64_t total0, total1;

    ck_assert_int_eq(rl_harness_tmppath(conf, sizeof(conf), "reserve.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf,
                                           "[cluster]\nshards = 16\n"
                                           "[clients]\nrouter_reserve = 2\nidle_timeout = 1s\n"
                                           "[router]\ndeadline = 2s\n"
                                           "[node a]\nlisten = 127.0.0.1:%d\n"
                                           "[service fw]\nlimit = fixed_window 1000 per 1h\n",
                                           np),
                     0);
    ck_assert_int_eq(rl_harness_node_start(&node, conf, "a", np, 0), 0);
    ck_assert_int_eq(rl_harness_router_start_workers(&rt, conf, rp, 4), 0);
    /* eight client connections: the acceptor spreads them over the four workers */
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(rl_client_connect(&cs[i], "127.0.0.1", (uint16_t)rp, T_TIMEOUT), 0);
    }
    for (int round = 0; round < 5; round++) {
        for (int i = 0; i < 8; i++) {
            snprintf(user, sizeof(user), "u%d-%d", round, i);
            ck_assert_int_eq(rl_client_check(cs[i], "fw", user, NULL, 1, &rep, T_TIMEOUT), 0);
            ck_assert_msg(rep.op == RL_WIRE_OP_CHECK && rep.check.code == RL_WIRE_ALLOWED,
                          "connection %d: op %u code %u", i, rep.op, rep.check.code);
        }
    }
    ck_assert_int_eq(rl_client_connect(&nc, "127.0.0.1", (uint16_t)np, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_stats(nc, &rep, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_stat(&rep, "router_connections", -1), 2);
    total0 = rl_client_stat(&rep, "connections_total", -1);
    ck_assert_int_le(total0, 20); /* the router's 12 (and a probe's), and this one */
    /* past idle_timeout (1 s): a router's connection served as a client's is not idle-closed
     * (the test's own STATS connection is used every second, so it is not either) */
    for (int i = 0; i < 5; i++) {
        usleep(500 * 1000);
        ck_assert_int_eq(rl_client_stats(nc, &rep, T_TIMEOUT), 0);
    }
    total1 = rl_client_stat(&rep, "connections_total", -1);
    ck_assert_msg(total1 == total0, "the router reconnected %lld times in 2.5 s",
                  (long long)(total1 - total0));
    ck_assert_int_eq(rl_client_stat(&rep, "idle_closes", -1), 0);
    for (int i = 0; i < 8; i++) {
        rl_client_destroy(cs[i]);
    }
    rl_client_destroy(nc);
}
END_TEST

/* A connection to the router from 127.0.0.2: another client than 127.0.0.1's. */
static int
connect_from_other_address(void)
{
    struct sockaddr_in from = {.sin_family = AF_INET}, to = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    ck_assert_int_ge(fd, 0);
    from.sin_addr.s_addr = htonl(0x7f000002);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons((uint16_t)router_port);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&from, sizeof(from)), 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
    return fd;
}

/* Reads one reply frame on fd (within T_TIMEOUT) into rep. */
static void
read_reply(int fd, struct rl_wire_decoder *dec, struct rl_wire_reply *rep)
{
    static char buf[4096];
    size_t got = 0, want = RL_WIRE_HDR_LEN;

    while (got < want) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ssize_t n;

        ck_assert_int_eq(poll(&pfd, 1, T_TIMEOUT), 1);
        n = recv(fd, buf + got, want - got, 0);
        ck_assert_int_gt(n, 0);
        got += (size_t)n;
        if (got == RL_WIRE_HDR_LEN && want == RL_WIRE_HDR_LEN) {
            want += (size_t)(unsigned char)buf[2] << 8 | (unsigned char)buf[3];
            ck_assert_uint_lt(want, sizeof(buf));
        }
    }
    ck_assert_int_eq(rl_wire_decode_reply(dec, buf + RL_WIRE_HDR_LEN, want - RL_WIRE_HDR_LEN, rep),
                     0);
}

/*
 * A node's time is shared between the router's clients (router/fairq.c): with node a paused,
 * four connections of one client (127.0.0.1) pipeline FAIR_FLOOD CHECKs each of one key; the
 * router sends FAIR_WINDOW of them to a (node_window) and keeps the rest, as one client's;
 * then another client (127.0.0.2) sends one CHECK of the same key. Once a resumes, its
 * counter says where that CHECK was decided: after the window and the rest of the flood
 * client's turn (RL_FAIRQ_QUANTUM, 8) at most, ahead of the flood's backlog (first come,
 * first served, it came after all 4 x FAIR_FLOOD; a turn per connection, after three more
 * turns). The order is the node's count, not a clock.
 */
#define FAIR_CONNS 4
#define FAIR_FLOOD 500
START_TEST(test_clients_served_in_turn)
{
    struct rl_client *flood[FAIR_CONNS], *watch = connect_router();
    struct rl_wire_decoder dec;
    struct rl_wire_req req;
    struct rl_wire_reply rep;
    struct rl_buf out;
    char key[32];
    int64_t sent_a, t0, answered = 0;
    uint64_t before_light;
    int light;

    user_on(NODE_A, "wide", "shared", 0, key, sizeof(key));
    /* connections up, the key's count at 1 */
    ck_assert_uint_eq(check(watch, "wide", key, 1).remaining, 999999);
    ck_assert_int_eq(rl_wire_decoder_init(&dec), 0);
    rl_buf_init(&out);
    light = connect_from_other_address();
    for (int i = 0; i < FAIR_CONNS; i++) {
        flood[i] = connect_router();
    }
    pause_node(NODE_A);
    sent_a = node_stat(watch, NODE_A, "forwarded");
    for (int i = 0; i < FAIR_CONNS; i++) {
        for (int k = 0; k < FAIR_FLOOD; k++) {
            set_check(&req, (uint32_t)k + 1, "wide", key, 1);
            ck_assert_int_eq(rl_client_queue(flood[i], &req), 0);
        }
        ck_assert_int_eq(rl_client_flush(flood[i], T_TIMEOUT), 0);
    }
    t0 = now_ms();
    while (stat_of(watch, "node_waits") < FAIR_CONNS * FAIR_FLOOD - FAIR_WINDOW) {
        ck_assert_msg(now_ms() - t0 < DEADLINE_MS / 2, "the router did not take the flood in time");
        usleep(2000);
    }
    /* the window: no more went to the paused node */
    ck_assert_int_eq(node_stat(watch, NODE_A, "forwarded"), sent_a + FAIR_WINDOW);
    set_check(&req, 7, "wide", key, 1);
    ck_assert_int_eq(rl_wire_put_check(&out, &req), 0);
    ck_assert_int_eq(send(light, out.data, out.len, MSG_NOSIGNAL), (ssize_t)out.len);
    while (stat_of(watch, "node_waits") < FAIR_CONNS * FAIR_FLOOD - FAIR_WINDOW + 1) {
        ck_assert_msg(now_ms() - t0 < DEADLINE_MS / 2, "the router did not take the CHECK in time");
        usleep(2000);
    }
    resume_node(NODE_A);
    read_reply(light, &dec, &rep);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
    ck_assert_uint_eq(rep.id, 7);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    before_light = 999999 - rep.check.remaining - 1;
    ck_assert_msg(before_light <= FAIR_WINDOW + 8,
                  "%llu of the flood's CHECKs were decided before the light client's",
                  (unsigned long long)before_light);
    /* and every flood CHECK is answered, once */
    for (int i = 0; i < FAIR_CONNS; i++) {
        for (int k = 0; k < FAIR_FLOOD; k++) {
            ck_assert_int_eq(rl_client_recv(flood[i], &rep, T_TIMEOUT), 0);
            ck_assert_uint_eq(rep.id, (uint32_t)k + 1);
            answered++;
        }
        rl_client_destroy(flood[i]);
    }
    ck_assert_int_eq(answered, FAIR_CONNS * FAIR_FLOOD);
    close(light);
    rl_buf_deinit(&out);
    rl_wire_decoder_deinit(&dec);
    rl_client_destroy(watch);
}
END_TEST

static Suite *
router_suite(void)
{
    Suite *s = suite_create("router");
    TCase *tc = tcase_create("router");

    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_router_agrees_on_owners);
    tcase_add_test(tc, test_deadline_gives_policy_reply);
    tcase_add_test(tc, test_late_replies_dropped);
    tcase_add_test(tc, test_no_rule);
    tcase_add_test(tc, test_relay_encodings);
    tcase_add_test(tc, test_slow_reader_paused);
    tcase_add_test(tc, test_sigterm_answers_what_was_forwarded);
    suite_add_tcase(s, tc);
    tc = tcase_create("fair");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, fair_setup, teardown);
    tcase_add_test(tc, test_clients_served_in_turn);
    suite_add_tcase(s, tc);
    tc = tcase_create("zookeeper");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, NULL, zk_teardown);
    tcase_add_test(tc, test_zookeeper_unreachable);
    tcase_add_test(tc, test_hello_past_the_reserve_is_served);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(router_suite)
