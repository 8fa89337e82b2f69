/*
 * check_denycache: the router's deny cache and hot keys end to end, with real rl-node (real
 * clock) and rl-router processes, and a throwaway ZooKeeper for the ownership cases.
 * Asserted:
 *   - a hot user over its limit is answered LIMITED by the router: the owning node's STATS
 *     checks do not grow while the router answers; the answer's fields are the node's
 *     (limit, remaining 0) with reset and retry_after counted down; the request log marks
 *     those lines `cached`; another cost is another request (reaches the node);
 *   - the cache expires at retry_after: the next request after it reaches the node and is
 *     allowed;
 *   - `deny_cache = off` forwards every request; a sliding_window_log service is never
 *     cached;
 *   - a rules change (SIGHUP) forgets: the next request reaches the node under the new rules
 *     and is allowed;
 *   - a refusal is remembered only when the node decided under the router's rules: a router
 *     that takes new rules before the nodes remembers none of their refusals until a probe
 *     on each connection saw the nodes hold the same rules, so it allows the moment they do;
 *     nodes that take new rules first make the router forget what they answered before;
 *     and through ZooKeeper, with the owner paused while the router takes the push;
 *   - a refusal outlives its node: through a rebalance moving the key's shard, and the kill
 *     of every node, the router answers LIMITED for the refused user, asking no node; a
 *     user never refused is then judged by the backstop (failure = open), not waved through;
 *   - HOT: rl-cli hot names the hot user first; a token without `stats = yes` is refused; a
 *     token restricted to one service sees that service's keys only; /metrics lists the hot
 *     key and the cache's counters.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "harness.h"
#include "httpget.h"
#include "reqclient.h"
#include "rltest.h"
#include "shardmap.h"
#include "wire.h"

#define SHARDS 64
#define T_TIMEOUT 5000

/* CLOCK_MONOTONIC in ms, as the router's clock runs. */
static int64_t
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
sleep_ms(int64_t ms)
{
    if (ms > 0) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

        while (nanosleep(&ts, &ts) != 0) {
        }
    }
}

static struct rl_harness_zk zk;
static struct rl_harness_server nodes[2], router;
static const char *const names[2] = {"a", "b"};
static int node_ports[2], router_port, metrics_port;
static char conf_path[PATH_MAX], log_path[PATH_MAX];
static char router_extra[256], more_sections[1024];
static bool with_zk;

/* mid: a 5 s wait, far longer than the 200 CHECKs the router answers from its cache within
 * it take even on a loaded machine (test_hot_user_answered_by_router) */
static const char rules_v1[] = "[service short]\nlimit = token_bucket 1 per 1s burst 2\n"
                               "[service mid]\nlimit = token_bucket 1 per 5s burst 2\n"
                               "[service long]\nlimit = token_bucket 1 per 30s burst 2\n"
                               "[service slog]\nlimit = sliding_window_log 2 per 30s\n";
static const char rules_v2[] = "[service short]\nlimit = token_bucket 1 per 1s burst 2\n"
                               "[service mid]\nlimit = token_bucket 1 per 5s burst 2\n"
                               "[service long]\nlimit = token_bucket 1 per 30s burst 50\n"
                               "[service slog]\nlimit = sliding_window_log 2 per 30s\n";

static void
write_conf(const char *rules)
{
    char zkpart[256] = "";

    if (with_zk) {
        snprintf(zkpart, sizeof(zkpart), "zookeeper = %s\nsession_timeout = 1000ms\n",
                 zk.connect);
    }
    ck_assert_int_eq(
        rl_harness_write_file(conf_path,
                              "[cluster]\nname = dc\nshards = %d\n%s"
                              "[router]\nlisten = 127.0.0.1:%d\ndeadline = 1s\n"
                              "request_log = %s\nmetrics = 127.0.0.1:%d\n%s"
                              /* no refunds: refusals may be held (check_adjust_router) */
                              "[clients]\nadjust = no\n"
                              "[node a]\nlisten = 127.0.0.1:%d\n"
                              "[node b]\nlisten = 127.0.0.1:%d\n%s%s",
                              SHARDS, zkpart, router_port, log_path, metrics_port, router_extra,
                              node_ports[0], node_ports[1], rules, more_sections),
        0);
}

static void
start(void)
{
    memset(nodes, 0, sizeof(nodes));
    memset(&router, 0, sizeof(router));
    if (with_zk) {
        memset(&zk, 0, sizeof(zk));
        ck_assert_int_eq(rl_harness_zk_start(&zk), 0);
    }
    for (int i = 0; i < 2; i++) {
        node_ports[i] = rl_harness_free_port();
    }
    router_port = rl_harness_free_port();
    metrics_port = rl_harness_free_port();
    ck_assert_int_eq(rl_harness_tmppath(conf_path, sizeof(conf_path), "dc.conf"), 0);
    ck_assert_int_eq(rl_harness_tmppath(log_path, sizeof(log_path), "requests.log"), 0);
    write_conf(rules_v1);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(rl_harness_node_start(&nodes[i], conf_path, names[i], node_ports[i], 0),
                         0);
    }
    ck_assert_int_eq(rl_harness_router_start(&router, conf_path, router_port), 0);
    if (with_zk) {
        for (int i = 0; i < 200 && rl_test_stat(router_port, "members") != 2; i++) {
            sleep_ms(50);
        }
        ck_assert_int_eq(rl_test_stat(router_port, "members"), 2);
        rl_test_wait_settled(nodes, 2, &router, 1, 2, 60000);
    }
}

/* Waits until every CHECK connection of every worker to both nodes has had a rules probe
 * answered with the router's rules: only then are the nodes' refusals remembered. */
static void
wait_confirmed(void)
{
    int64_t want = 2 * 2 * rl_test_stat(router_port, "workers");

    for (int i = 0; i < 200 && rl_test_stat(router_port, "deny_rules_confirms") < want; i++) {
        sleep_ms(50);
    }
    ck_assert_int_ge(rl_test_stat(router_port, "deny_rules_confirms"), want);
}

static void
setup_static(void)
{
    with_zk = false;
    router_extra[0] = '\0';
    more_sections[0] = '\0';
    start();
    wait_confirmed();
}

static void
setup_off(void)
{
    with_zk = false;
    snprintf(router_extra, sizeof(router_extra), "deny_cache = off\n");
    more_sections[0] = '\0';
    start();
}

static void
setup_zk(void)
{
    with_zk = true;
    router_extra[0] = '\0';
    more_sections[0] = '\0';
    start();
    wait_confirmed();
}

static void
teardown(void)
{
    rl_harness_cleanup();
}

static struct rl_client *
connect_router(void)
{
    struct rl_client *c = NULL;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT), 0);
    return c;
}

static struct rl_wire_check_reply
check(struct rl_client *c, const char *svc, const char *user, uint32_t cost)
{
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_check(c, svc, user, NULL, cost, &rep, T_TIMEOUT), 0);
    ck_assert_msg(rep.op == RL_WIRE_OP_CHECK, "%s/%s: op %u (%.*s)", svc, user, rep.op,
                  (int)rep.message.len, rep.message.ptr ? rep.message.ptr : "");
    return rep.check;
}

static int64_t
node_checks(int i)
{
    return rl_test_stat(node_ports[i], "checks");
}

/* Drives (svc, user) past its burst of 2 through c: two ALLOWED, then a LIMITED from the
 * node, returned in *lim. Returns the owning node (the one whose checks grew by 3). */
static int
drive_limited(struct rl_client *c, const char *svc, const char *user,
              struct rl_wire_check_reply *lim, int64_t *sent_ms)
{
    int64_t before[2] = {node_checks(0), node_checks(1)};
    int owner;

    ck_assert_uint_eq(check(c, svc, user, 1).code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(check(c, svc, user, 1).code, RL_WIRE_ALLOWED);
    *sent_ms = now_ms();
    *lim = check(c, svc, user, 1);
    ck_assert_uint_eq(lim->code, RL_WIRE_LIMITED);
    owner = node_checks(0) - before[0] == 3 ? 0 : 1;
    ck_assert_int_eq(node_checks(owner) - before[owner], 3);
    return owner;
}

static int
count_cached_lines(void)
{
    static char buf[1 << 20];
    int n = rl_harness_read_file(log_path, buf, sizeof(buf) - 1);
    int k = 0;

    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    for (char *p = strstr(buf, " cached\n"); p != NULL; p = strstr(p + 1, " cached\n")) {
        k++;
    }
    return k;
}

START_TEST(test_hot_user_answered_by_router)
{
    struct rl_client *c = connect_router();
    struct rl_wire_check_reply lim, r;
    int64_t sent, n0, other0;
    int owner, k;

    owner = drive_limited(c, "mid", "whale", &lim, &sent);
    ck_assert_uint_eq(lim.limit, 2);
    ck_assert_uint_eq(lim.remaining, 0);
    ck_assert_uint_gt(lim.retry_after_ms, 2500);
    ck_assert_uint_le(lim.retry_after_ms, 5000);
    n0 = node_checks(owner);
    other0 = node_checks(1 - owner);
    for (int i = 0; i < 200; i++) {
        r = check(c, "mid", "whale", 1);
        ck_assert_uint_eq(r.code, RL_WIRE_LIMITED);
        ck_assert_uint_eq(r.limit, lim.limit);
        ck_assert_uint_eq(r.remaining, 0);
        ck_assert_uint_ge(r.retry_after_ms, 1);
        ck_assert_uint_le(r.retry_after_ms, lim.retry_after_ms);
        ck_assert_uint_le(r.reset_ms, lim.reset_ms);
    }
    /* Counted down: what is left of the node's wait, give or take a ms of rounding. */
    ck_assert_int_ge((int64_t)r.retry_after_ms,
                     (int64_t)lim.retry_after_ms - (now_ms() - sent) - 2);
    /* The node was not asked. (The 200 CHECKs ran within the wait: a precondition, not a
     * measure; the 5 s wait is generous for them on any machine.) */
    ck_assert_int_lt(now_ms() - sent, (int64_t)lim.retry_after_ms - 50);
    ck_assert_int_eq(node_checks(owner), n0);
    ck_assert_int_eq(node_checks(1 - owner), other0);
    ck_assert_int_ge(rl_test_stat(router_port, "deny_hits"), 200);
    ck_assert_int_ge(rl_test_stat(router_port, "deny_inserts"), 1);
    ck_assert_int_eq(rl_test_stat(router_port, "limited"), 201);
    /* Another cost is another request: the node answers it. */
    ck_assert_uint_eq(check(c, "mid", "whale", 2).code, RL_WIRE_LIMITED);
    ck_assert_int_eq(node_checks(owner), n0 + 1);
    /* Past retry_after the next request reaches the node, which allows it. */
    sleep_ms((sent + (int64_t)lim.retry_after_ms + 30 - now_ms()));
    r = check(c, "mid", "whale", 1);
    ck_assert_uint_eq(r.code, RL_WIRE_ALLOWED);
    ck_assert_int_eq(node_checks(owner), n0 + 2);
    /* The request log holds every cached answer, marked. */
    for (k = 0; k < 40 && count_cached_lines() < 200; k++) {
        sleep_ms(100);
    }
    ck_assert_int_eq(count_cached_lines(), rl_test_stat(router_port, "deny_hits"));
    rl_client_destroy(c);
}
END_TEST

START_TEST(test_sliding_log_not_cached)
{
    struct rl_client *c = connect_router();
    struct rl_wire_check_reply lim;
    int64_t sent, n0;
    int owner = drive_limited(c, "slog", "whale", &lim, &sent);

    n0 = node_checks(owner);
    for (int i = 0; i < 20; i++) {
        ck_assert_uint_eq(check(c, "slog", "whale", 1).code, RL_WIRE_LIMITED);
    }
    ck_assert_int_eq(node_checks(owner), n0 + 20);
    ck_assert_int_eq(rl_test_stat(router_port, "deny_hits"), 0);
    rl_client_destroy(c);
}
END_TEST

START_TEST(test_off_forwards_everything)
{
    struct rl_client *c = connect_router();
    struct rl_wire_check_reply lim;
    int64_t sent, n0;
    int owner = drive_limited(c, "long", "whale", &lim, &sent);

    n0 = node_checks(owner);
    for (int i = 0; i < 50; i++) {
        ck_assert_uint_eq(check(c, "long", "whale", 1).code, RL_WIRE_LIMITED);
    }
    ck_assert_int_eq(node_checks(owner), n0 + 50);
    ck_assert_int_eq(rl_test_stat(router_port, "deny_hits"), 0);
    ck_assert_int_eq(rl_test_stat(router_port, "deny_entries"), 0);
    rl_client_destroy(c);
}
END_TEST

START_TEST(test_rules_change_forgets)
{
    struct rl_client *c = connect_router();
    struct rl_wire_check_reply lim;
    int64_t sent, n0;
    int owner = drive_limited(c, "long", "whale", &lim, &sent);

    ck_assert_uint_eq(check(c, "long", "whale", 1).code, RL_WIRE_LIMITED);
    n0 = node_checks(owner);
    ck_assert_int_eq(rl_test_stat(router_port, "deny_hits"), 1);
    /* burst 2 -> 50: a new tier, whose counters start at full allowance on the nodes. */
    write_conf(rules_v2);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(kill(nodes[i].pid, SIGHUP), 0);
    }
    ck_assert_int_eq(kill(router.pid, SIGHUP), 0);
    for (int i = 0; i < 100; i++) {
        if (rl_test_stat(router_port, "rules_reloads") >= 1 &&
            rl_test_stat(node_ports[0], "rules_reloads") >= 1 &&
            rl_test_stat(node_ports[1], "rules_reloads") >= 1) {
            break;
        }
        sleep_ms(50);
    }
    ck_assert_int_ge(rl_test_stat(router_port, "rules_reloads"), 1);
    ck_assert_int_ge(rl_test_stat(router_port, "deny_invalidations"), 1);
    ck_assert_uint_eq(check(c, "long", "whale", 1).code, RL_WIRE_ALLOWED);
    ck_assert_int_eq(node_checks(owner), n0 + 1);
    ck_assert_int_eq(rl_test_stat(router_port, "deny_hits"), 1);
    rl_client_destroy(c);
}
END_TEST

/* Waits until the process on port has reloaded its rules at least n times. */
static void
wait_reloads(int port, int64_t n)
{
    for (int i = 0; i < 200 && rl_test_stat(port, "rules_reloads") < n; i++) {
        sleep_ms(50);
    }
    ck_assert_int_ge(rl_test_stat(port, "rules_reloads"), n);
}

/*
 * The router takes new rules before the nodes (issue 31: it forgot its cache, then cached
 * again the nodes' refusals under the old rules, and refused for half an hour what the nodes
 * allowed). Deterministic: the router's rules and the nodes' come from the file, each
 * process reloading on its own SIGHUP. While the nodes hold other rules every refusal is
 * theirs (none is remembered); the moment they take the router's rules, the router allows
 * what they allow; once its probes confirmed the nodes' rules, it remembers again.
 */
START_TEST(test_router_first_caches_nothing_old)
{
    struct rl_client *c = connect_router();
    struct rl_wire_check_reply lim, r;
    int64_t sent, n0, hits0, unconf0, conf0, want;
    int owner = drive_limited(c, "long", "whale", &lim, &sent);

    ck_assert_uint_eq(check(c, "long", "whale", 1).code, RL_WIRE_LIMITED);
    ck_assert_int_eq(rl_test_stat(router_port, "deny_hits"), 1);
    /* burst 2 -> 50 on the router only. */
    write_conf(rules_v2);
    ck_assert_int_eq(kill(router.pid, SIGHUP), 0);
    wait_reloads(router_port, 1);
    n0 = node_checks(owner);
    hits0 = rl_test_stat(router_port, "deny_hits");
    unconf0 = rl_test_stat(router_port, "deny_unconfirmed");
    for (int i = 0; i < 20; i++) {
        /* the nodes still judge by burst 2: the refusal is theirs, asked every time */
        ck_assert_uint_eq(check(c, "long", "whale", 1).code, RL_WIRE_LIMITED);
    }
    ck_assert_int_eq(node_checks(owner), n0 + 20);
    ck_assert_int_eq(rl_test_stat(router_port, "deny_hits"), hits0);
    ck_assert_int_eq(rl_test_stat(router_port, "deny_unconfirmed"), unconf0 + 20);
    /* Now the nodes: the owner allows (a new tier starts full), and so does the router. */
    conf0 = rl_test_stat(router_port, "deny_rules_confirms");
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(kill(nodes[i].pid, SIGHUP), 0);
    }
    for (int i = 0; i < 2; i++) {
        wait_reloads(node_ports[i], 1);
    }
    r = check(c, "long", "whale", 1);
    ck_assert_uint_eq(r.code, RL_WIRE_ALLOWED);
    ck_assert_int_eq(node_checks(owner), n0 + 21);
    /* Once every connection's node is known to hold the router's rules, refusals are
     * remembered again. */
    want = conf0 + 2 * 2 * rl_test_stat(router_port, "workers");
    for (int i = 0; i < 200 && rl_test_stat(router_port, "deny_rules_confirms") < want; i++) {
        sleep_ms(50);
    }
    ck_assert_int_ge(rl_test_stat(router_port, "deny_rules_confirms"), want);
    for (int i = 0; i < 50; i++) {
        ck_assert_uint_eq(check(c, "long", "orca", 1).code, RL_WIRE_ALLOWED);
    }
    ck_assert_uint_eq(check(c, "long", "orca", 1).code, RL_WIRE_LIMITED);
    hits0 = rl_test_stat(router_port, "deny_hits");
    ck_assert_uint_eq(check(c, "long", "orca", 1).code, RL_WIRE_LIMITED);
    ck_assert_int_eq(rl_test_stat(router_port, "deny_hits"), hits0 + 1);
    rl_client_destroy(c);
}
END_TEST

/*
 * The nodes take new rules before the router: the router's probes see the node's rules
 * digest move and forget what that node answered under the old ones, so a refusal it
 * remembered is not answered for longer than the probe's period (here: long before the
 * refusal's own 30 s would run out).
 */
START_TEST(test_node_first_forgets)
{
    struct rl_client *c = connect_router();
    struct rl_wire_check_reply lim, r;
    int64_t sent, mism0;
    int owner = drive_limited(c, "long", "whale", &lim, &sent);

    ck_assert_uint_eq(check(c, "long", "whale", 1).code, RL_WIRE_LIMITED);
    ck_assert_int_eq(rl_test_stat(router_port, "deny_hits"), 1);
    write_conf(rules_v2);
    mism0 = rl_test_stat(router_port, "deny_rules_mismatches");
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(kill(nodes[i].pid, SIGHUP), 0);
    }
    for (int i = 0; i < 2; i++) {
        wait_reloads(node_ports[i], 1);
    }
    r.code = RL_WIRE_LIMITED;
    for (int i = 0; i < 200 && r.code == RL_WIRE_LIMITED; i++) {
        r = check(c, "long", "whale", 1);
        if (r.code == RL_WIRE_LIMITED) {
            sleep_ms(50);
        }
    }
    ck_assert_uint_eq(r.code, RL_WIRE_ALLOWED);
    ck_assert_int_gt(rl_test_stat(router_port, "deny_rules_mismatches"), mism0);
    ck_assert_int_lt(now_ms() - sent, (int64_t)lim.retry_after_ms - 1000);
    (void)owner;
    rl_client_destroy(c);
}
END_TEST

static pid_t cont_pid;

/* Resumes cont_pid a moment later, while the test thread waits for an answer from it. */
static void *
cont_later(void *arg)
{
    (void)arg;
    sleep_ms(150);
    kill(cont_pid, SIGCONT);
    return NULL;
}

/*
 * The same through ZooKeeper, as the issue measured it: the owner is paused while the rules
 * znode changes, so the router takes the new rules first and the owner, resumed with a CHECK
 * waiting on its connection, reads that CHECK before the change reaches it (the change takes
 * a round trip to ZooKeeper and a parse). Whatever it answered, once it holds the new rules
 * the router must allow what it allows.
 */
START_TEST(test_zk_push_node_later)
{
    struct rl_client *c = connect_router();
    struct rl_wire_check_reply lim, r;
    int64_t sent;
    pthread_t th;
    int owner = drive_limited(c, "long", "whale", &lim, &sent);

    ck_assert_uint_eq(check(c, "long", "whale", 1).code, RL_WIRE_LIMITED);
    ck_assert_int_eq(rl_harness_pause(nodes[owner].pid), 0);
    ck_assert_int_eq(rl_harness_zk_put(zk.connect, "/ratelimiter/dc/rules", rules_v2,
                                       strlen(rules_v2)),
                     0);
    for (int i = 0; i < 300 && rl_test_stat(router_port, "rules_version") < 1; i++) {
        sleep_ms(10);
    }
    cont_pid = nodes[owner].pid;
    ck_assert_int_eq(pthread_create(&th, NULL, cont_later, NULL), 0);
    ck_assert_int_ge(rl_test_stat(router_port, "rules_version"), 1);
    /* Sent under the router's new rules, decided by a node still under the old ones. */
    r = check(c, "long", "whale", 1);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    for (int i = 0; i < 200 && rl_test_stat(node_ports[owner], "rules_version") < 1; i++) {
        sleep_ms(20);
    }
    ck_assert_int_ge(rl_test_stat(node_ports[owner], "rules_version"), 1);
    for (int i = 0; i < 5; i++) {
        r = check(c, "long", "whale", 1);
        ck_assert_msg(r.code == RL_WIRE_ALLOWED, "answer %d: code %u, retry_after %llu", i,
                      r.code, (unsigned long long)r.retry_after_ms);
    }
    rl_client_destroy(c);
}
END_TEST

START_TEST(test_refusal_outlives_owner)
{
    struct rl_client *c = connect_router();
    struct rl_wire_check_reply lim, r;
    char asg[128];
    uint32_t shard = rl_shardmap_shard(rl_shardmap_key_hash("long", 4, "whale", 5), SHARDS);
    int64_t sent, n0, n1, hits0;
    int owner = drive_limited(c, "long", "whale", &lim, &sent), other = 1 - owner;

    ck_assert_uint_eq(check(c, "long", "whale", 1).code, RL_WIRE_LIMITED);
    n0 = node_checks(owner);
    n1 = node_checks(other);
    ck_assert_int_eq(rl_test_stat(router_port, "deny_hits"), 1);
    /* A rebalance moves the key's shard to the other node: the refusal (30 s) stands, so
     * the router goes on answering LIMITED without asking either node. */
    snprintf(asg, sizeof(asg), "rl-assignment 1 %d\n%u %s\n", SHARDS, shard, names[other]);
    ck_assert_int_eq(rl_harness_zk_put(zk.connect, "/ratelimiter/dc/assignment", asg,
                                       strlen(asg)),
                     0);
    for (int i = 0; i < 100 && rl_test_stat(router_port, "assignment_version") < 0; i++) {
        sleep_ms(50);
    }
    ck_assert_int_ge(rl_test_stat(router_port, "assignment_version"), 0);
    hits0 = rl_test_stat(router_port, "deny_hits");
    for (int i = 0; i < 20; i++) {
        ck_assert_uint_eq(check(c, "long", "whale", 1).code, RL_WIRE_LIMITED);
    }
    ck_assert_int_eq(rl_test_stat(router_port, "deny_hits"), hits0 + 20);
    ck_assert_int_eq(node_checks(owner), n0);
    ck_assert_int_eq(node_checks(other), n1);
    /* Killing the node that refused, then the new owner: until its session expires and after,
     * every answer for the refused user is still LIMITED (counted, not timed). */
    ck_assert_int_eq(rl_harness_server_stop(&nodes[owner], SIGKILL, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_harness_server_stop(&nodes[other], SIGKILL, T_TIMEOUT), 0);
    for (int i = 0; i < 200 && rl_test_stat(router_port, "members") != 0; i++) {
        r = check(c, "long", "whale", 1);
        ck_assert_msg(r.code == RL_WIRE_LIMITED, "answer %d after the kill: code %u", i, r.code);
        ck_assert_uint_gt(r.retry_after_ms, 0);
        sleep_ms(20);
    }
    ck_assert_int_eq(rl_test_stat(router_port, "members"), 0);
    for (int i = 0; i < 20; i++) {
        ck_assert_uint_eq(check(c, "long", "whale", 1).code, RL_WIRE_LIMITED);
    }
    /* A user never refused is judged by the backstop (failure = open): 1 per 30 s for the
     * one worker its connection is on, then LIMITED, not waved through. */
    r = check(c, "long", "minnow", 1);
    ck_assert_uint_eq(r.code, RL_WIRE_FAIL_OPEN);
    for (int i = 0; i < 20; i++) {
        r = check(c, "long", "minnow", 1);
        ck_assert_uint_eq(r.code, RL_WIRE_LIMITED);
        ck_assert_uint_eq(r.limit, 2); /* B, as a node answers for a bucket */
    }
    ck_assert_int_ge(rl_test_stat(router_port, "backstop_allowed"), 1);
    ck_assert_int_ge(rl_test_stat(router_port, "backstop_limited"), 20);
    rl_client_destroy(c);
}
END_TEST

/* ---- HOT ---------------------------------------------------------------------------------- */

#define OPS_TOKEN "ops-token-0123456789abcdef"
#define SHOP_TOKEN "shop-token-0123456789abcdef"
#define APP_TOKEN "app-token-0123456789abcdef"

static void
setup_tokens(void)
{
    char ops[65], shop[65], app[65];
    uint8_t h[RL_AUTH_HASH_LEN];

    rl_auth_sha256(OPS_TOKEN, strlen(OPS_TOKEN), h);
    rl_auth_format_hash(h, ops);
    rl_auth_sha256(SHOP_TOKEN, strlen(SHOP_TOKEN), h);
    rl_auth_format_hash(h, shop);
    rl_auth_sha256(APP_TOKEN, strlen(APP_TOKEN), h);
    rl_auth_format_hash(h, app);
    with_zk = false;
    router_extra[0] = '\0';
    snprintf(more_sections, sizeof(more_sections),
             "[client ops]\ntoken_sha256 = %s\nservices = *\nstats = yes\n"
             "[client shop]\ntoken_sha256 = %s\nservices = long\nstats = yes\n"
             "[client app]\ntoken_sha256 = %s\nservices = *\n",
             ops, shop, app);
    start();
}

static struct rl_client *
connect_as(const char *token)
{
    struct rl_client *c = connect_router();
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_auth(c, token, strlen(token), &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_AUTH);
    return c;
}

static void
token_file(char *path, size_t len, const char *name, const char *token)
{
    ck_assert_int_eq(rl_harness_tmppath(path, len, "%s.token", name), 0);
    ck_assert_int_eq(rl_harness_write_file(path, "%s", token), 0);
    ck_assert_int_eq(chmod(path, 0600), 0);
}

START_TEST(test_hot_keys)
{
    struct rl_client *c = connect_as(OPS_TOKEN), *shop;
    struct rl_wire_req req;
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    struct rl_http_resp m;
    char target[64], ops_file[PATH_MAX], app_file[PATH_MAX], out[8192];
    char first[256];
    int rc;

    for (int i = 0; i < 300; i++) {
        check(c, "short", "whale", 1);
    }
    for (int i = 0; i < 40; i++) {
        check(c, "long", "minnow", 1);
        char u[16];

        snprintf(u, sizeof(u), "u%d", i);
        check(c, "short", u, 1);
    }
    snprintf(target, sizeof(target), "127.0.0.1:%d", router_port);
    token_file(ops_file, sizeof(ops_file), "ops", OPS_TOKEN);
    token_file(app_file, sizeof(app_file), "app", APP_TOKEN);
    {
        const char *argv[] = {"rl-cli", "--router", target, "--token-file", ops_file, "hot",
                              "--top", "3", NULL};

        /* rl-cli's connection may sit on another worker than c's: the keys c sent show
         * once their worker copied its sketch for the others (once a second). */
        for (int tries = 0;; tries++) {
            rc = rl_harness_run(argv, out, sizeof(out), 10000);
            ck_assert_msg(rc == 0, "rl-cli hot: %d: %s", rc, out);
            ck_assert_int_eq(sscanf(strchr(out, '\n') + 1, "%255[^\n]", first), 1);
            if (strstr(first, " whale ") != NULL || tries == 30) {
                break;
            }
            usleep(100 * 1000);
        }
        /* The header, then the hot user first, then minnow (40) above every u%d (1). */
        ck_assert_msg(strncmp(first, "short", 5) == 0 && strstr(first, " whale ") != NULL &&
                          strstr(first, " 300 ") != NULL,
                      "first line: %s", first);
        ck_assert_msg(strstr(out, "minnow") != NULL, "%s", out);
        ck_assert_msg(strstr(out, " u1 ") == NULL, "top 3 only: %s", out);
    }
    {
        const char *argv[] = {"rl-cli", "--router", target, "--token-file", app_file, "hot", NULL};

        rc = rl_harness_run(argv, out, sizeof(out), 10000);
        ck_assert_msg(rc == 1, "rl-cli hot without stats = yes: %d: %s", rc, out);
        ck_assert_msg(strstr(out, "does not allow HOT") != NULL, "%s", out);
    }
    /* A token restricted to `long` sees long's keys only. */
    shop = connect_as(SHOP_TOKEN);
    memset(&req, 0, sizeof(req));
    req.op = RL_WIRE_OP_HOT;
    req.id = 9;
    req.top = 10;
    ck_assert_int_eq(rl_client_queue(shop, &req), 0);
    ck_assert_int_eq(rl_client_flush(shop, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_recv(shop, rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep->op, RL_WIRE_OP_HOT);
    ck_assert_uint_eq(rep->period_ms, 10000);
    ck_assert_uint_eq(rep->nhot, 1);
    ck_assert_uint_eq(rep->hot[0].user.len, 6);
    ck_assert_int_eq(memcmp(rep->hot[0].user.ptr, "minnow", 6), 0);
    ck_assert_uint_eq(rep->hot[0].count, 40);
    /* /metrics: the hot key as a series, and the cache's families. */
    ck_assert_int_eq(rl_http_get(metrics_port, "/metrics", T_TIMEOUT, &m), 0);
    ck_assert_msg(strstr(m.body, "rl_router_hot_key_requests{service=\"short\",user=\"whale\"} 300") !=
                      NULL,
                  "%s", m.body);
    ck_assert_ptr_nonnull(strstr(m.body, "rl_router_deny_cache_hits_total "));
    {
        /* One table of 65,536 entries per worker, summed. */
        const char *w = strstr(m.body, "\nrl_router_workers ");
        const char *e = strstr(m.body, "\nrl_router_deny_cache_entries ");

        ck_assert_ptr_nonnull(w);
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(strtoull(e + 30, NULL, 10), 65536ull * strtoull(w + 19, NULL, 10));
    }
    rl_http_free(&m);
    rl_client_destroy(shop);
    rl_client_destroy(c);
    free(rep);
}
END_TEST

static Suite *
denycache_suite(void)
{
    Suite *s = suite_create("denycache");
    TCase *st = tcase_create("static");
    TCase *off = tcase_create("off");
    TCase *zkc = tcase_create("zookeeper");
    TCase *hot = tcase_create("hot");

    tcase_add_checked_fixture(st, setup_static, teardown);
    tcase_set_timeout(st, 60);
    tcase_add_test(st, test_hot_user_answered_by_router);
    tcase_add_test(st, test_sliding_log_not_cached);
    tcase_add_test(st, test_rules_change_forgets);
    tcase_add_test(st, test_router_first_caches_nothing_old);
    tcase_add_test(st, test_node_first_forgets);
    suite_add_tcase(s, st);
    tcase_add_checked_fixture(off, setup_off, teardown);
    tcase_set_timeout(off, 60);
    tcase_add_test(off, test_off_forwards_everything);
    suite_add_tcase(s, off);
    tcase_add_checked_fixture(zkc, setup_zk, teardown);
    tcase_set_timeout(zkc, 120);
    tcase_add_test(zkc, test_refusal_outlives_owner);
    tcase_add_test(zkc, test_zk_push_node_later);
    suite_add_tcase(s, zkc);
    tcase_add_checked_fixture(hot, setup_tokens, teardown);
    tcase_set_timeout(hot, 60);
    tcase_add_test(hot, test_hot_keys);
    suite_add_tcase(s, hot);
    return s;
}

RL_TEST_MAIN(denycache_suite)
