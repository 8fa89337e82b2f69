/*
 * check_abuse_inline: inline limits shared fairly between clients (docs/PROTOCOL.md, "Inline
 * limits, by tenant"), tried as an attacker would, with real processes on loopback: a router
 * with two [client] tokens, its binary and RESP fronts, and one node. An attacker floods
 * distinct inline limits, or distinct inline keys in force, through the binary front; the
 * victim's CL.THROTTLE limit (RESP front) still holds. Before the node accounted inline
 * limits by tenant, the first flood took all 65,536 limits and the victim's CL.THROTTLE
 * failed open (every request allowed), and the second evicted the victim's in-force counter.
 * Also the bound of CL.THROTTLE's quantity and RL.CHECK's COST: a CHECK's cost bound,
 * 1,000,000, checked by the router (it let 4294967295 through and the node answered
 * bad_field). Not for configured services (check_abuse's key floods).
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "clock.h"
#include "harness.h"
#include "reqclient.h"
#include "rltest.h"
#include "wire.h"

#define T_TIMEOUT 20000
#define ATTACK_TOKEN "inline-attacker-token-0123456789"
#define VICTIM_TOKEN "inline-victim-token-0123456789"
#define TENANT_QUOTA 4096 /* a tenant's inline limits on a node (docs/PROTOCOL.md) */

static struct rl_harness_server node, router;
static char config[4096];
static int node_port, router_port, resp_port;

/* Writes the config (two clients, services = *, stats = yes) and starts a node with
 * `memory` and a router with a RESP listener. The router's deadline is long (5 s): the
 * victim's answers must be the node's, never CL.THROTTLE's failure policy (open: allowed)
 * for a node slowed past the default 50 ms by a loaded machine after the attacker's flood
 * (failed CI once so: the victim's third CL.THROTTLE answered allowed). */
static void
start(const char *memory)
{
    static const char *const names[] = {"attacker", "victim"};
    static const char *const tokens[] = {ATTACK_TOKEN, VICTIM_TOKEN};
    char sections[512], hex[2 * RL_AUTH_HASH_LEN + 1];
    uint8_t h[RL_AUTH_HASH_LEN];
    size_t off = 0;

    for (size_t i = 0; i < 2; i++) {
        rl_auth_sha256(tokens[i], strlen(tokens[i]), h);
        rl_auth_format_hash(h, hex);
        off += (size_t)snprintf(sections + off, sizeof(sections) - off,
                                "[client %s]\ntoken_sha256 = %s\nservices = *\nstats = yes\n",
                                names[i], hex);
    }
    node_port = rl_harness_free_port();
    router_port = rl_harness_free_port();
    resp_port = rl_harness_free_port();
    ck_assert_int_gt(node_port, 0);
    ck_assert_int_gt(router_port, 0);
    ck_assert_int_gt(resp_port, 0);
    ck_assert_int_eq(rl_harness_tmppath(config, sizeof(config), "inline.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(config,
                                           "[cluster]\nname = inline\n"
                                           "[router]\nlisten = 127.0.0.1:%d\n"
                                           "resp = 127.0.0.1:%d\n"
                                           "deadline = 5s\n"
                                           "%s"
                                           "[node n1]\nlisten = 127.0.0.1:%d\nmemory = %s\n"
                                           "[service api]\nlimit = fixed_window 5 per 1h\n",
                                           router_port, resp_port, sections, node_port, memory),
                     0);
    ck_assert_int_eq(rl_harness_node_start(&node, config, "n1", node_port, 0), 0);
    ck_assert_int_eq(rl_harness_router_start(&router, config, router_port), 0);
}

static void
teardown(void)
{
    rl_harness_server_stop(&router, SIGKILL, 2000);
    rl_harness_server_stop(&node, SIGKILL, 2000);
    rl_harness_cleanup();
}

static int64_t
now_ms(void)
{
    return (int64_t)(rl_clock_mono_ns() / 1000000);
}

/* ---- a minimal RESP client ---- */

static int
resp_connect(void)
{
    return rl_test_tcp_connect(resp_port);
}

/* Sends the command argv[0..argc) and reads `lines` reply lines into buf (NUL-terminated). */
static void
resp_cmd(int fd, int argc, const char *const *argv, int lines, char *buf, size_t cap)
{
    char out[1024];
    size_t n = 0, have = 0;
    int seen = 0;
    int64_t end = now_ms() + T_TIMEOUT;

    n += (size_t)snprintf(out + n, sizeof(out) - n, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++) {
        n += (size_t)snprintf(out + n, sizeof(out) - n, "$%zu\r\n%s\r\n", strlen(argv[i]),
                              argv[i]);
    }
    ck_assert_int_eq(send(fd, out, n, MSG_NOSIGNAL), (ssize_t)n);
    while (seen < lines) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t r;

        ck_assert_int_gt(poll(&p, 1, (int)(end - now_ms())), 0);
        r = recv(fd, buf + have, 1, 0); /* a byte at a time: never past the reply */
        ck_assert_int_eq(r, 1);
        seen += buf[have] == '\n';
        have++;
        ck_assert_uint_lt(have, cap);
        if (have == 1 && buf[0] == '-') {
            lines = 1; /* an error is one line */
        }
    }
    buf[have] = '\0';
}

/* CL.THROTTLE key 0 1 3600 (gcra 1 per hour): its first reply element, 0 allowed or 1
 * limited. */
static int
throttle(int fd, const char *key)
{
    const char *argv[] = {"CL.THROTTLE", key, "0", "1", "3600"};
    char buf[256];
    int limited = -1;

    resp_cmd(fd, 5, argv, 6, buf, sizeof(buf));
    RL_CHECK(sscanf(buf, "*5\r\n:%d", &limited) == 1, "CL.THROTTLE answered %s", buf);
    return limited;
}

/* The victim's RESP connection, authenticated. */
static int
victim_connect(void)
{
    const char *argv[] = {"AUTH", VICTIM_TOKEN};
    char buf[256];
    int fd = resp_connect();

    resp_cmd(fd, 2, argv, 1, buf, sizeof(buf));
    RL_CHECK(strcmp(buf, "+OK\r\n") == 0, "AUTH answered %s", buf);
    return fd;
}

/* The attacker's binary connection to the router, authenticated. */
static struct rl_client *
attacker_connect(void)
{
    return rl_test_dial(router_port, ATTACK_TOKEN, T_TIMEOUT);
}

/*
 * n inline CHECKs of the attacker's, pipelined in batches: user users[i] (or "a" when
 * distinct_users is false) under limit `limit + i` (or `limit` when distinct_limits is
 * false) of algo per window_ms. Returns how many were allowed; *errors counts ERRORs.
 */
static int
flood(struct rl_client *c, int n, bool distinct_users, bool distinct_limits, uint8_t algo,
      uint32_t limit, uint64_t window_ms, int *errors)
{
    enum { BATCH = 5000 };
    struct rl_wire_req *reqs = calloc(BATCH, sizeof(*reqs));
    struct rl_wire_check_reply *reps = calloc(BATCH, sizeof(*reps));
    char(*users)[16] = calloc(BATCH, sizeof(*users));
    int allowed = 0;

    ck_assert_ptr_nonnull(reqs);
    ck_assert_ptr_nonnull(reps);
    ck_assert_ptr_nonnull(users);
    *errors = 0;
    for (int at = 0; at < n; at += BATCH) {
        int k = n - at < BATCH ? n - at : BATCH;

        for (int i = 0; i < k; i++) {
            struct rl_wire_req *q = &reqs[i];
            int len = snprintf(users[i], sizeof(users[i]), "a%d", distinct_users ? at + i : 0);

            memset(q, 0, sizeof(*q));
            q->op = RL_WIRE_OP_CHECK;
            q->service.ptr = "inl";
            q->service.len = 3;
            q->user.ptr = users[i];
            q->user.len = (uint32_t)len;
            q->cost = 1;
            q->limit.set = true;
            q->limit.algo = algo;
            q->limit.limit = distinct_limits ? limit + (uint32_t)(at + i) : limit;
            q->limit.window_ms = window_ms;
            q->limit.burst = q->limit.limit;
            /* a tenant of its own choosing: the router must replace it */
            q->tenant = rl_wire_tenant("victim", NULL);
        }
        ck_assert_int_eq(rl_client_check_many(c, reqs, (size_t)k, reps, T_TIMEOUT), 0);
        for (int i = 0; i < k; i++) {
            allowed += reps[i].code == RL_WIRE_ALLOWED;
            *errors += reps[i].code == RL_CLIENT_CODE_ERROR;
        }
    }
    free(reqs);
    free(reps);
    free(users);
    return allowed;
}

/* A node STATS figure. */
static int64_t
node_stat(const char *key)
{
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;
    int64_t v;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)node_port, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_stats(c, &rep, T_TIMEOUT), 0);
    v = rl_client_stat(&rep, key, -1);
    rl_client_destroy(c);
    return v;
}

/*
 * The attacker sends 70,000 distinct inline limits (each keeping a counter for an hour),
 * more than the node's 65,536: it gets at most its quota of 4,096, OVERLOADED past it; the
 * victim then brings a new limit of its own, which holds (allowed once, then limited).
 * Before: the attacker took every limit, the victim's CHECK was answered OVERLOADED and
 * failed open: CL.THROTTLE allowed both.
 */
START_TEST(test_inline_limits_quota)
{
    struct rl_client *a;
    int errors = 0, allowed, fd;

    start("64mb");
    a = attacker_connect();
    allowed = flood(a, 70000, false, true, 0 /* fixed_window */, 10, 3600000, &errors);
    fd = victim_connect();
    ck_assert_int_eq(throttle(fd, "victim-key"), 0);
    RL_CHECK(throttle(fd, "victim-key") == 1,
             "the victim's inline limit failed open after the attacker's flood of limits");
    /* At most its quota (a CHECK past the router's deadline is answered by inline_failure,
     * so the exact split depends on the machine's load, never the bound). */
    ck_assert_int_le(allowed, TENANT_QUOTA);
    ck_assert_int_gt(errors, 0);
    ck_assert_int_gt(node_stat("inline_over_quota"), 0);
    ck_assert_int_le(node_stat("inline_over_quota"), 70000 - TENANT_QUOTA);
    /* The attacker's known limits still answer. */
    ck_assert_int_eq(flood(a, 1, false, true, 0, 10, 3600000, &errors), 1);
    ck_assert_int_eq(errors, 0);
    close(fd);
    rl_client_destroy(a);
}
END_TEST

/*
 * On a 1 MiB node, the victim's CL.THROTTLE counter is in force (1 per hour, used); the
 * attacker then sends 100,000 distinct keys under one inline limit, each used up at once
 * (gcra 1 per 24 hours: in force, and back at full allowance later than the victim's). The
 * victim's counter is not evicted: still limited. Before: every inline key shared one
 * account, the victim's key was the soonest full of the in-force keys sampled, and went.
 */
START_TEST(test_inline_keys_share)
{
    struct rl_client *a;
    int errors = 0, fd;

    start("1mb");
    fd = victim_connect();
    ck_assert_int_eq(throttle(fd, "victim-key"), 0);
    ck_assert_int_eq(throttle(fd, "victim-key"), 1);
    a = attacker_connect();
    flood(a, 100000, true, false, 4 /* gcra */, 1, 86400000, &errors);
    ck_assert_int_eq(errors, 0);
    ck_assert_int_gt(node_stat("evicted"), 10000);
    ck_assert_int_eq(node_stat("evicted_under_share"), 0);
    RL_CHECK(throttle(fd, "victim-key") == 1,
             "the attacker's keys evicted the victim's in-force inline counter");
    close(fd);
    rl_client_destroy(a);
}
END_TEST

/*
 * CL.THROTTLE's quantity and RL.CHECK's COST go up to a CHECK's cost bound, 1,000,000
 * (docs/RESP.md): the bound itself is judged (a quantity above the burst is limited, with
 * retry -1, as redis-cell says), one past it is refused by the router with the documented
 * error. Before, 4294967295 passed the router and came back as the node's bad_field.
 */
START_TEST(test_quantity_bound)
{
    const char *at[] = {"CL.THROTTLE", "q-key", "0", "1", "60", "1000000"};
    const char *past[] = {"CL.THROTTLE", "q-key", "0", "1", "60", "1000001"};
    const char *top[] = {"CL.THROTTLE", "q-key", "0", "1", "60", "4294967295"};
    const char *cost_at[] = {"RL.CHECK", "api", "u", "COST", "1000000"};
    const char *cost_past[] = {"RL.CHECK", "api", "u", "COST", "4294967295"};
    char buf[512];
    int f[5] = {0}, fd;

    start("64mb");
    fd = victim_connect();
    resp_cmd(fd, 6, at, 6, buf, sizeof(buf));
    RL_CHECK(sscanf(buf, "*5\r\n:%d\r\n:%d\r\n:%d\r\n:%d\r\n:%d", &f[0], &f[1], &f[2], &f[3],
                    &f[4]) == 5 &&
                 f[0] == 1 && f[3] == -1,
             "CL.THROTTLE quantity 1000000 answered %s", buf);
    resp_cmd(fd, 6, past, 1, buf, sizeof(buf));
    ck_assert_str_eq(buf, "-ERR CL.THROTTLE: quantity must be 0..1000000\r\n");
    resp_cmd(fd, 6, top, 1, buf, sizeof(buf));
    ck_assert_str_eq(buf, "-ERR CL.THROTTLE: quantity must be 0..1000000\r\n");
    resp_cmd(fd, 5, cost_past, 1, buf, sizeof(buf));
    RL_CHECK(strstr(buf, "must be an integer of 0..1000000") != NULL, "answered %s", buf);
    resp_cmd(fd, 5, cost_at, 1, buf, sizeof(buf)); /* its first line: the array's */
    RL_CHECK(buf[0] == '*', "RL.CHECK COST 1000000 answered %s", buf);
    close(fd);
}
END_TEST

static Suite *
abuse_inline_suite(void)
{
    Suite *s = suite_create("abuse_inline");
    TCase *tc = tcase_create("inline");

    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_inline_limits_quota);
    tcase_add_test(tc, test_inline_keys_share);
    tcase_add_test(tc, test_quantity_bound);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(abuse_inline_suite)
