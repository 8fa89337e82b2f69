/*
 * rltest: the failure path of the RL_CHECK macros, the common main() of the suites and the
 * small helpers more than one suite calls (rltest.h). Linked into every test binary through
 * the rlharness library. Not for what a single suite needs: that stays in the suite.
 */
#include "rltest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "reqclient.h"
#include "harness.h"
#include "tls.h"

void
rl_test_fail(const char *file, int line, const char *expr, const char *fmt, ...)
{
    char detail[2048];
    va_list ap;

    detail[0] = '\0';
    if (strcmp(fmt, ": ") != 0) {
        va_start(ap, fmt);
        vsnprintf(detail, sizeof(detail), fmt, ap);
        va_end(ap);
    }
    /* Check records this file and line, then ends the test (exit, or longjmp with CK_FORK=no). */
    _ck_assert_failed(file, line, expr, "Assertion '%s' failed%s", expr, detail);
}

int
rl_test_run(Suite *suite)
{
    SRunner *sr = srunner_create(suite);
    int failed;

    /* A test's cluster starts clear of an hour's end, where windows of an hour restart. */
    rl_harness_set_hour_clear(RL_HARNESS_HOUR_CLEAR_MS);

    /*
     * No srunner_set_fork_status: Check's default reads CK_FORK (fork unless "no"), and
     * CK_ENV reads CK_VERBOSITY (normal unless set). The other CK_ variables are read by
     * srunner_run_all and tcase timeouts themselves.
     */
    srunner_run_all(sr, CK_ENV);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    /* Whatever the harness started in this (the runner) process, and its temp directory. */
    rl_harness_cleanup();
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

void
rl_test_expect_unknown_op(struct rl_client *c, const char *frame, size_t n, uint32_t id,
                          const char *msg)
{
    struct rl_wire_reply rep;

    RL_CHECK(rl_client_queue_raw(c, frame, n) == 0);
    RL_CHECK(rl_client_flush(c, 5000) == 0);
    RL_CHECK(rl_client_recv(c, &rep, 5000) == 0);
    RL_CHECK_UINT_EQ(rep.op, RL_WIRE_OP_ERROR);
    RL_CHECK_UINT_EQ(rep.id, id);
    RL_CHECK_UINT_EQ(rep.err, RL_WIRE_ERR_UNKNOWN_OP);
    RL_CHECK(rep.message.len == strlen(msg) && memcmp(rep.message.ptr, msg, strlen(msg)) == 0,
             "message \"%.*s\", expected \"%s\"", (int)rep.message.len, rep.message.ptr, msg);
}

int64_t
rl_test_stat(int port, const char *key)
{
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;
    char why[320];
    int64_t v;
    int rc = rl_client_connect(&c, "127.0.0.1", (uint16_t)port, 5000);

    RL_CHECK(rc == 0, "connect to 127.0.0.1:%d: %s", port, strerror(-rc));
    /* A suite whose servers want AUTH points $RL_TOKEN_FILE at a token with STATS. */
    rc = rl_client_auth_file(c, NULL, 5000, why, sizeof(why));
    RL_CHECK(rc == 0, "AUTH to 127.0.0.1:%d: %s", port, why);
    rc = rl_client_stats(c, &rep, 5000);
    RL_CHECK(rc == 0, "STATS from 127.0.0.1:%d: %s", port, strerror(-rc));
    v = rl_client_stat(&rep, key, -1);
    rl_client_destroy(c);
    return v;
}

/* STATS key of 127.0.0.1:port, or -1 when the server does not answer (within 1 s). */
static int64_t
try_stat(int port, const char *key)
{
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;
    char why[320];
    int64_t v = -1;

    if (rl_client_connect(&c, "127.0.0.1", (uint16_t)port, 1000) != 0) {
        return -1;
    }
    if (rl_client_auth_file(c, NULL, 1000, why, sizeof(why)) == 0 &&
        rl_client_stats(c, &rep, 1000) == 0) {
        v = rl_client_stat(&rep, key, -1);
    }
    rl_client_destroy(c);
    return v;
}

/* One look at the cluster: true when it is at rest (see rltest.h); says why not in why. */
static bool
cluster_at_rest(const struct rl_harness_server *nodes, int nnodes,
                const struct rl_harness_server *routers, int nrouters, int members, char *why,
                size_t whylen)
{
    int64_t digest = 0;

    for (int i = 0; i < nrouters; i++) {
        int64_t m, d;

        if (routers[i].pid == 0) {
            continue;
        }
        m = try_stat(routers[i].port, "members");
        d = try_stat(routers[i].port, "table_digest");
        if (m != members || d <= 0 || (digest != 0 && d != digest)) {
            snprintf(why, whylen, "router on port %d: members %lld (want %d), table %llx",
                     routers[i].port, (long long)m, members, (unsigned long long)d);
            return false;
        }
        digest = d;
    }
    for (int i = 0; i < nnodes; i++) {
        int64_t in, out, d;

        if (nodes[i].pid == 0) {
            continue;
        }
        in = try_stat(nodes[i].port, "shards_incoming");
        out = try_stat(nodes[i].port, "shards_outgoing");
        d = try_stat(nodes[i].port, "table_digest");
        if (in != 0 || out != 0 || d <= 0 || (digest != 0 && d != digest)) {
            snprintf(why, whylen,
                     "node %s: shards incoming %lld, outgoing %lld, table %llx (routers' %llx)",
                     nodes[i].name, (long long)in, (long long)out, (unsigned long long)d,
                     (unsigned long long)digest);
            return false;
        }
        digest = d;
    }
    return true;
}

void
rl_test_wait_settled(const struct rl_harness_server *nodes, int nnodes,
                     const struct rl_harness_server *routers, int nrouters, int members,
                     int timeout_ms)
{
    char why[512] = "";

    for (int waited = 0; waited <= timeout_ms; waited += 50) {
        if (cluster_at_rest(nodes, nnodes, routers, nrouters, members, why, sizeof(why))) {
            return;
        }
        usleep(50 * 1000);
    }
    RL_CHECK(false, "the cluster did not settle within %d ms: %s", timeout_ms, why);
}

void
rl_test_cluster_prepare(struct rl_harness_zk *zk, struct rl_harness_server *nodes,
                        int *node_ports, int nnodes, struct rl_harness_server *routers,
                        int *router_ports, int nrouters)
{
    memset(zk, 0, sizeof(*zk));
    memset(nodes, 0, sizeof(*nodes) * (size_t)nnodes);
    memset(routers, 0, sizeof(*routers) * (size_t)nrouters);
    ck_assert_int_eq(rl_harness_zk_start(zk), 0);
    for (int i = 0; i < nnodes; i++) {
        node_ports[i] = rl_harness_free_port();
    }
    for (int i = 0; i < nrouters; i++) {
        router_ports[i] = rl_harness_free_port();
    }
}

struct rl_tls_ctx *
rl_test_tls_client(const char *dir, const char *ca, const char *cert)
{
    char capem[4096], pem[4096], key[4096], why[512];
    struct rl_tls_ctx *t = NULL;

    snprintf(capem, sizeof(capem), "%s/%s.pem", dir, ca);
    if (cert != NULL) {
        snprintf(pem, sizeof(pem), "%s/%s.pem", dir, cert);
        snprintf(key, sizeof(key), "%s/%s.key", dir, cert);
    }
    ck_assert_msg(rl_tls_ctx_new(&t, RL_TLS_CLIENT, cert != NULL ? pem : NULL,
                                 cert != NULL ? key : NULL, capem, NULL, why, sizeof(why)) == 0,
                  "%s", why);
    return t;
}

struct rl_client *
rl_test_dial(int port, const char *token, int timeout_ms)
{
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)port, timeout_ms), 0);
    ck_assert_int_eq(rl_client_auth(c, token, strlen(token), &rep, timeout_ms), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_AUTH);
    return c;
}

int
rl_test_tcp_connect(int port)
{
    struct sockaddr_in a = {0};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    ck_assert_int_ge(fd, 0);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    RL_CHECK(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect: %s", strerror(errno));
    return fd;
}

void
rl_test_check_req(struct rl_wire_req *req, const char *service, const char *user, uint32_t cost)
{
    memset(req, 0, sizeof(*req));
    req->op = RL_WIRE_OP_CHECK;
    req->service.ptr = service;
    req->service.len = strlen(service);
    req->user.ptr = user;
    req->user.len = strlen(user);
    req->cost = cost;
}
