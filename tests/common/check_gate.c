/*
 * check_gate: common/gate.c, on a connection that is never opened (so closing and marking
 * it are no-ops and its output buffer shows what the gate queued). Asserted, for the node's
 * gate (the cluster secret) and the router's (the [client] tokens, and the secret):
 *   - with a secret (node) or client sections (router), a request before AUTH is refused
 *     with ERROR UNAUTHORIZED and the process's own message, and counted; AUTH itself is
 *     admitted;
 *   - AUTH with an accepted token answers the principal's name and sets c->principal, after
 *     which anything is admitted; a wrong token is refused (-EACCES) with its message and
 *     leaves no principal; a node refuses a client's token, a router takes the secret as
 *     "cluster";
 *   - with nothing to check against (no conf, or neither secret nor clients) everything is
 *     admitted and AUTH answers "anonymous" without a principal; a router with a secret and
 *     no clients admits requests without AUTH but still refuses a wrong token;
 *   - refusals are counted one by one but said once per RL_GATE_WARN_MS.
 */
#include "gate.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <uv.h>

#include "auth.h"
#include "conf.h"
#include "conn.h"
#include "harness.h"
#include "rltest.h"
#include "wire.h"

#define SECRET "0123456789abcdef0123"
#define TOKEN "web-token-0123456789"

static uv_loop_t loop;
static struct rl_connq q;
static struct rl_conn conn;
static struct rl_wire_decoder dec;

static void
setup(void)
{
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    memset(&q, 0, sizeof(q));
    q.loop = &loop;
    memset(&conn, 0, sizeof(conn));
    conn.q = &q;
    snprintf(conn.peer, sizeof(conn.peer), "127.0.0.1:1");
    rl_buf_init(&conn.out);
    ck_assert_int_eq(rl_wire_decoder_init(&dec), 0);
}

static void
teardown(void)
{
    rl_buf_deinit(&conn.out);
    rl_wire_decoder_deinit(&dec);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    rl_harness_cleanup();
}

/* A conf with the cluster secret (when secret) and a [client web] whose token is TOKEN (when
 * client). */
static struct rl_conf *
make_conf(bool secret, bool client)
{
    char path[PATH_MAX], text[PATH_MAX + 512], hex[2 * RL_AUTH_HASH_LEN + 1], err[256];
    uint8_t h[RL_AUTH_HASH_LEN];
    struct rl_conf *c = NULL;
    int n;

    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "secret"), 0);
    ck_assert_int_eq(rl_harness_write_file(path, SECRET "\n"), 0);
    ck_assert_int_eq(chmod(path, 0600), 0);
    rl_auth_sha256(TOKEN, strlen(TOKEN), h);
    rl_auth_format_hash(h, hex);
    n = snprintf(text, sizeof(text), "[cluster]\n");
    if (secret) {
        n += snprintf(text + n, sizeof(text) - (size_t)n, "secret_file = %s\n", path);
    }
    if (client) {
        n += snprintf(text + n, sizeof(text) - (size_t)n,
                      "[client web]\ntoken_sha256 = %s\nservices = s\n", hex);
    }
    snprintf(text + n, sizeof(text) - (size_t)n, "[service s]\nlimit = gcra 1 per 1s\n");
    ck_assert_msg(rl_conf_parse("gate.conf", text, &c, err, sizeof(err)) == 0, "%s", err);
    return c;
}

static struct rl_wire_req
req_of(uint32_t op, uint32_t id, const char *token)
{
    struct rl_wire_req r;

    memset(&r, 0, sizeof(r));
    r.op = op;
    r.id = id;
    if (token != NULL) {
        r.token.ptr = token;
        r.token.len = (uint32_t)strlen(token);
    }
    return r;
}

/* The first reply the gate queued on conn since the last call (none: op 0). */
static struct rl_wire_reply
queued(void)
{
    struct rl_wire_reply rep;
    const unsigned char *h = (const unsigned char *)conn.out.data;

    memset(&rep, 0, sizeof(rep));
    if (conn.out.len > 0) {
        size_t n = (size_t)h[0] << 24 | (size_t)h[1] << 16 | (size_t)h[2] << 8 | h[3];

        ck_assert_uint_le(RL_WIRE_HDR_LEN + n, conn.out.len);
        ck_assert_int_eq(rl_wire_decode_reply(&dec, conn.out.data + RL_WIRE_HDR_LEN, n, &rep), 0);
    }
    rl_buf_reset(&conn.out);
    return rep;
}

static void
assert_refused(const struct rl_wire_reply *rep, uint32_t id, const char *msg)
{
    ck_assert_uint_eq(rep->op, RL_WIRE_OP_ERROR);
    ck_assert_uint_eq(rep->id, id);
    ck_assert_uint_eq(rep->err, RL_WIRE_ERR_UNAUTHORIZED);
    ck_assert_uint_eq(rep->message.len, strlen(msg));
    ck_assert_int_eq(memcmp(rep->message.ptr, msg, strlen(msg)), 0);
}

static void
assert_welcome(const struct rl_wire_reply *rep, uint32_t id, const char *name)
{
    ck_assert_uint_eq(rep->op, RL_WIRE_OP_AUTH);
    ck_assert_uint_eq(rep->id, id);
    ck_assert_uint_eq(rep->name.len, strlen(name));
    ck_assert_int_eq(memcmp(rep->name.ptr, name, strlen(name)), 0);
}

START_TEST(test_node_gate)
{
    struct rl_conf *c = make_conf(true, true);
    struct rl_gate g;
    struct rl_wire_req r;
    struct rl_wire_reply rep;

    rl_gate_init(&g, c, RL_GATE_NODE);
    r = req_of(RL_WIRE_OP_PING, 7, NULL);
    ck_assert(!rl_gate_admit(&g, &conn, &r));
    rep = queued();
    assert_refused(&rep, 7, "this node needs AUTH with the cluster secret before anything else");
    ck_assert_uint_eq(g.failures, 1);

    r = req_of(RL_WIRE_OP_AUTH, 8, TOKEN);
    ck_assert(rl_gate_admit(&g, &conn, &r));
    rep = queued();
    ck_assert_uint_eq(rep.op, 0);
    /* A client's token is not the cluster secret. */
    ck_assert_int_eq(rl_gate_auth(&g, &conn, &r), -EACCES);
    rep = queued();
    assert_refused(&rep, 8, "AUTH refused: not the cluster secret");
    ck_assert_ptr_null(conn.principal);
    ck_assert_uint_eq(g.failures, 2);

    r = req_of(RL_WIRE_OP_AUTH, 9, SECRET);
    ck_assert_int_eq(rl_gate_auth(&g, &conn, &r), 0);
    rep = queued();
    assert_welcome(&rep, 9, "cluster");
    ck_assert_ptr_eq(conn.principal, &c->cluster_client);
    r = req_of(RL_WIRE_OP_STATS, 10, NULL);
    ck_assert(rl_gate_admit(&g, &conn, &r));
    ck_assert_uint_eq(g.failures, 2);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_router_gate)
{
    struct rl_conf *c = make_conf(true, true);
    const struct rl_client_conf *web;
    struct rl_gate g;
    struct rl_wire_req r;
    struct rl_wire_reply rep;

    rl_gate_init(&g, c, RL_GATE_ROUTER);
    r = req_of(RL_WIRE_OP_CHECK, 1, NULL);
    ck_assert(!rl_gate_admit(&g, &conn, &r));
    rep = queued();
    assert_refused(&rep, 1, "this router needs AUTH with a client token first");

    r = req_of(RL_WIRE_OP_AUTH, 2, "not-a-token-of-anyone");
    ck_assert_int_eq(rl_gate_auth(&g, &conn, &r), -EACCES);
    rep = queued();
    assert_refused(&rep, 2, "AUTH refused: unknown token");
    ck_assert_ptr_null(conn.principal);

    r = req_of(RL_WIRE_OP_AUTH, 3, TOKEN);
    ck_assert_int_eq(rl_gate_auth(&g, &conn, &r), 0);
    rep = queued();
    assert_welcome(&rep, 3, "web");
    web = conn.principal;
    ck_assert_ptr_nonnull(web);
    ck_assert_str_eq(web->name, "web");
    r = req_of(RL_WIRE_OP_CHECK, 4, NULL);
    ck_assert(rl_gate_admit(&g, &conn, &r));

    /* The secret is a token too, for the principal "cluster". */
    conn.principal = NULL;
    r = req_of(RL_WIRE_OP_AUTH, 5, SECRET);
    ck_assert_int_eq(rl_gate_auth(&g, &conn, &r), 0);
    rep = queued();
    assert_welcome(&rep, 5, "cluster");
    ck_assert_ptr_eq(conn.principal, &c->cluster_client);
    ck_assert_uint_eq(g.failures, 2);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_open)
{
    struct rl_conf *none = make_conf(false, false), *secret = make_conf(true, false);
    struct rl_gate g;
    struct rl_wire_req r;
    struct rl_wire_reply rep;
    const struct {
        const struct rl_conf *conf;
        enum rl_gate_kind kind;
    } open[] = {{NULL, RL_GATE_NODE}, {none, RL_GATE_NODE}, {none, RL_GATE_ROUTER}};

    for (size_t i = 0; i < sizeof(open) / sizeof(open[0]); i++) {
        rl_gate_init(&g, open[i].conf, open[i].kind);
        r = req_of(RL_WIRE_OP_CHECK, 1, NULL);
        ck_assert(rl_gate_admit(&g, &conn, &r));
        r = req_of(RL_WIRE_OP_AUTH, 2, "anything");
        ck_assert_int_eq(rl_gate_auth(&g, &conn, &r), 0);
        rep = queued();
        assert_welcome(&rep, 2, "anonymous");
        ck_assert_ptr_null(conn.principal);
        ck_assert_uint_eq(g.failures, 0);
    }
    /* A router with the secret but no clients: nothing required, a wrong token refused. */
    rl_gate_init(&g, secret, RL_GATE_ROUTER);
    r = req_of(RL_WIRE_OP_PING, 3, NULL);
    ck_assert(rl_gate_admit(&g, &conn, &r));
    r = req_of(RL_WIRE_OP_AUTH, 4, "wrong");
    ck_assert_int_eq(rl_gate_auth(&g, &conn, &r), -EACCES);
    rep = queued();
    assert_refused(&rep, 4, "AUTH refused: unknown token");
    rl_conf_destroy(none);
    rl_conf_destroy(secret);
}
END_TEST

START_TEST(test_warned_once_per_period)
{
    struct rl_conf *c = make_conf(true, false);
    struct rl_gate g;
    struct rl_wire_req r = req_of(RL_WIRE_OP_PING, 1, NULL);
    uint64_t first;

    uv_update_time(&loop);
    rl_gate_init(&g, c, RL_GATE_NODE);
    ck_assert(!rl_gate_admit(&g, &conn, &r));
    first = g.warned_ms;
    ck_assert_uint_eq(first, uv_now(&loop));
    for (int i = 0; i < 5; i++) {
        ck_assert(!rl_gate_admit(&g, &conn, &r));
    }
    queued();
    ck_assert_uint_eq(g.failures, 6);
    ck_assert_uint_eq(g.warned_ms, first);
    rl_conf_destroy(c);
}
END_TEST

static Suite *
gate_suite(void)
{
    Suite *s = suite_create("gate");
    TCase *tc = tcase_create("gate");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_node_gate);
    tcase_add_test(tc, test_router_gate);
    tcase_add_test(tc, test_open);
    tcase_add_test(tc, test_warned_once_per_period);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(gate_suite)
