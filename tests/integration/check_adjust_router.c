/*
 * check_adjust_router: ADJUST (op 9) through routers, with real processes: a throwaway
 * ZooKeeper, two rl-node and two rl-router processes sharing one cluster.conf. Asserted:
 *   - a reservation settles through a router: a CHECK of the estimate, an ADJUST refunding
 *     the difference, answered under op 9 with the key after it; a charge past the limit
 *     through the other router leaves the key in debt (refused); NO_RULE for a service with
 *     no rule; routers count ADJUSTs in STATS `adjusts`, not in `checks`; the request log's
 *     ADJUST lines end in `adjust` and parse (reqline.h, the rebalance tool's reader);
 *   - who may refund: a token without `adjust = yes` gets ERROR UNAUTHORIZED for a refund
 *     (counted `unauthorized`, the connection stays) and may still charge;
 *   - the deny cache stays true across two routers: a rule no client may refund is cached
 *     (deny_hits grows, the node is not asked), a rule a client may refund is not: refused
 *     through router A, refunded through router B, allowed through A at once;
 *   - concurrency slots through two routers with the deny cache on: taken through both,
 *     refused through A (not cached, though no client may refund it), one given back by a
 *     RELEASE (op 10) through B, taken again through A at once; STATS `releases`, log
 *     lines ending in `release`;
 *   - element 5 in every integer format a client may choose (a negative delta as a fixint,
 *     int 8, 16, 32, 64; a count as a uint 16; a uint 64, which the router decodes in full),
 *     relayed to the node with its value (remaining moves by it), the refund rule judged on
 *     it, values out of bounds refused BAD_FIELD by the router (the node is not asked);
 *   - with every node killed, ADJUST and RELEASE are answered by their rule's failure policy
 *     under their own op (FAIL_OPEN, FAIL_CLOSED with the session timeout to wait), never by
 *     the backstop (its counters do not move), counted `owner_down`.
 * Not for the node's arithmetic of ADJUST (check_node_tcp, check_limiter).
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "auth.h"
#include "buf.h"
#include "harness.h"
#include "reqclient.h"
#include "reqline.h"
#include "rltest.h"
#include "wire.h"

#define SHARDS 16
#define T_TIMEOUT 5000
#define SETTLE_TOKEN "settle-token-0123456789abcdef"
#define APP_TOKEN "app-token-0123456789abcdef"

static struct rl_harness_zk zk;
static struct rl_harness_server nodes[2], routers[2];
static const char *const names[2] = {"a", "b"};
static int node_ports[2], router_ports[2];
static char conf_path[PATH_MAX], log_path[PATH_MAX], token_path[PATH_MAX];

static void
sleep_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

    while (nanosleep(&ts, &ts) != 0) {
    }
}

/*
 * `settle` may refund (adjust = yes) under tok and fw only; `app` (every service) may not
 * ([clients] adjust = no). So keep's refusals may be held by a router, tok's and fw's not.
 */
static void
setup(void)
{
    char settle[65], app[65];
    uint8_t h[RL_AUTH_HASH_LEN];

    rl_auth_sha256(SETTLE_TOKEN, strlen(SETTLE_TOKEN), h);
    rl_auth_format_hash(h, settle);
    rl_auth_sha256(APP_TOKEN, strlen(APP_TOKEN), h);
    rl_auth_format_hash(h, app);
    rl_test_cluster_prepare(&zk, nodes, node_ports, 2, routers, router_ports, 2);
    ck_assert_int_eq(rl_harness_tmppath(conf_path, sizeof(conf_path), "adj.conf"), 0);
    ck_assert_int_eq(rl_harness_tmppath(log_path, sizeof(log_path), "requests.log"), 0);
    ck_assert_int_eq(
        rl_harness_write_file(conf_path,
                              "[cluster]\nname = adj\nzookeeper = %s\n"
                              "session_timeout = 2000ms\nshards = %d\n"
                              "[router]\ndeadline = 1s\nrequest_log = %s\n"
                              "[clients]\nadjust = no\n"
                              "[client settle]\ntoken_sha256 = %s\nservices = tok fw\n"
                              "adjust = yes\nstats = yes\n"
                              "[client app]\ntoken_sha256 = %s\nservices = *\nstats = yes\n"
                              "[service tok]\nlimit = fixed_window 10 per 1h\n"
                              "[service fw]\nlimit = fixed_window 2 per 1h\n"
                              "[service keep]\nlimit = fixed_window 2 per 1h\n"
                              "[service cc]\nlimit = concurrency 2 lease 10m\n"
                              "[service tb]\nlimit = token_bucket 10 per 10s\n"
                              "[service shut]\nfailure = closed\n"
                              "limit = fixed_window 5 per 1h\n",
                              zk.connect, SHARDS, log_path, settle, app),
        0);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(rl_harness_node_start(&nodes[i], conf_path, names[i], node_ports[i], 0),
                         0);
    }
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(rl_harness_router_start(&routers[i], conf_path, router_ports[i]), 0);
    }
    /* rl_test_wait_settled reads STATS with the token of $RL_TOKEN_FILE: app's. */
    ck_assert_int_eq(rl_harness_tmppath(token_path, sizeof(token_path), "app.token"), 0);
    ck_assert_int_eq(rl_harness_write_file(token_path, "%s\n", APP_TOKEN), 0);
    ck_assert_int_eq(chmod(token_path, 0600), 0);
    ck_assert_int_eq(setenv("RL_TOKEN_FILE", token_path, 1), 0);
}

static void
teardown(void)
{
    unsetenv("RL_TOKEN_FILE");
    rl_harness_cleanup();
}

/* STATS value key of router i, over an authenticated connection. */
static int64_t
rstat(int i, const char *key)
{
    struct rl_client *c = rl_test_dial(router_ports[i], APP_TOKEN, T_TIMEOUT);
    struct rl_wire_reply rep;
    int64_t v;

    ck_assert_int_eq(rl_client_stats(c, &rep, T_TIMEOUT), 0);
    v = rl_client_stat(&rep, key, -1);
    rl_client_destroy(c);
    return v;
}

/* Waits until both routers see both nodes and every CHECK connection of theirs had a rules
 * probe answered with their rules (only then does the deny cache hold refusals). */
static void
wait_ready(void)
{
    for (int r = 0; r < 2; r++) {
        int i;

        for (i = 0; i < 400 && rstat(r, "members") != 2; i++) {
            sleep_ms(50);
        }
        ck_assert_int_eq(rstat(r, "members"), 2);
        rl_test_wait_settled(nodes, 2, routers, 2, 2, 60000);
        int64_t want = 2 * 2 * rstat(r, "workers");

        for (i = 0; i < 400 && rstat(r, "deny_rules_confirms") < want; i++) {
            sleep_ms(50);
        }
        ck_assert_int_ge(rstat(r, "deny_rules_confirms"), want);
    }
}

/* One request of op (CHECK: n is the cost; ADJUST: the delta) through c; its reply. */
static struct rl_wire_reply
send_one(struct rl_client *c, uint32_t op, const char *svc, const char *user, int32_t n)
{
    struct rl_wire_req req = {.op = op, .id = 77};
    struct rl_wire_reply rep;
    struct rl_buf b;

    req.service.ptr = svc;
    req.service.len = (uint32_t)strlen(svc);
    req.user.ptr = user;
    req.user.len = (uint32_t)strlen(user);
    if (op == RL_WIRE_OP_ADJUST) {
        req.delta = n;
    } else {
        req.cost = (uint32_t)n;
    }
    rl_buf_init(&b);
    ck_assert_int_eq(rl_wire_put_req(&b, &req), 0);
    ck_assert_int_eq(rl_client_queue_raw(c, b.data, b.len), 0);
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.id, 77);
    rl_buf_deinit(&b);
    return rep;
}

/* A CHECK-shaped answer under op, with code. */
static struct rl_wire_check_reply
expect(struct rl_client *c, uint32_t op, const char *svc, const char *user, int32_t n,
       uint32_t code)
{
    struct rl_wire_reply rep = send_one(c, op, svc, user, n);

    ck_assert_msg(rep.op == op, "%s %s/%s %d: op %u (%.*s)", rl_wire_op_name(op), svc, user, n,
                  rep.op, (int)rep.message.len, rep.message.ptr ? rep.message.ptr : "");
    ck_assert_msg(rep.check.code == code, "%s %s/%s %d: code %u, not %u", rl_wire_op_name(op), svc,
                  user, n, rep.check.code, code);
    return rep.check;
}

/* Lines of the request log (both routers write it) with tag, each parsed; waits up to 5 s
 * for at least want of them (the log is flushed at least once a second). */
static int
tagged_lines(enum rl_reqline_tag tag, int want)
{
    static char buf[1 << 20];
    int k = 0;

    for (int i = 0; i < 100; i++) {
        int n = rl_harness_read_file(log_path, buf, sizeof(buf) - 1);

        k = 0;
        for (char *p = buf, *e; n > 0 && p < buf + n; p = e + 1) {
            struct rl_reqline l;

            e = memchr(p, '\n', (size_t)(buf + n - p));
            if (e == NULL) {
                break;
            }
            ck_assert_int_eq(rl_reqline_parse(p, (size_t)(e - p), SHARDS, &l), 0);
            k += l.tag == tag;
        }
        if (k >= want) {
            break;
        }
        sleep_ms(50);
    }
    return k;
}

START_TEST(test_settle_through_router)
{
    struct rl_client *a, *b;
    struct rl_wire_check_reply rep;
    int64_t checks0[2], adjusts0[2];

    wait_ready();
    for (int i = 0; i < 2; i++) {
        checks0[i] = rstat(i, "checks");
        adjusts0[i] = rstat(i, "adjusts");
    }
    a = rl_test_dial(router_ports[0], SETTLE_TOKEN, T_TIMEOUT);
    b = rl_test_dial(router_ports[1], SETTLE_TOKEN, T_TIMEOUT);
    /* reserve 8 of 10, settle at 3: 5 back */
    rep = expect(a, RL_WIRE_OP_CHECK, "tok", "carol", 8, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.remaining, 2);
    rep = expect(a, RL_WIRE_OP_ADJUST, "tok", "carol", -5, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.limit, 10);
    ck_assert_uint_eq(rep.remaining, 7);
    /* the other router sees the same key: 7 left, then a charge past the limit */
    rep = expect(b, RL_WIRE_OP_CHECK, "tok", "carol", 7, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.remaining, 0);
    rep = expect(b, RL_WIRE_OP_ADJUST, "tok", "carol", 4, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.remaining, 0);
    /* in debt: a refund of 3 still leaves it at the limit, so a CHECK of 1 is refused */
    expect(a, RL_WIRE_OP_ADJUST, "tok", "carol", -3, RL_WIRE_ALLOWED);
    expect(a, RL_WIRE_OP_CHECK, "tok", "carol", 1, RL_WIRE_LIMITED);
    expect(a, RL_WIRE_OP_ADJUST, "tok", "carol", -2, RL_WIRE_ALLOWED);
    expect(b, RL_WIRE_OP_CHECK, "tok", "carol", 1, RL_WIRE_ALLOWED);
    rl_client_destroy(a);
    /* no rule: answered by the router under op 9 (app's token: every service) */
    a = rl_test_dial(router_ports[0], APP_TOKEN, T_TIMEOUT);
    expect(a, RL_WIRE_OP_ADJUST, "nope", "carol", 2, RL_WIRE_NO_RULE);
    rl_client_destroy(a);
    rl_client_destroy(b);
    /* counted apart from the decisions: router A 2 CHECKs and 4 ADJUSTs, B 2 and 1 */
    ck_assert_int_eq(rstat(0, "checks") - checks0[0], 2);
    ck_assert_int_eq(rstat(0, "adjusts") - adjusts0[0], 4);
    ck_assert_int_eq(rstat(1, "checks") - checks0[1], 2);
    ck_assert_int_eq(rstat(1, "adjusts") - adjusts0[1], 1);
    ck_assert_int_eq(tagged_lines(RL_REQLINE_TAG_ADJUST, 5), 5);
}
END_TEST

START_TEST(test_refund_needs_adjust)
{
    struct rl_client *c;
    struct rl_wire_reply rep;
    int64_t unauth0;

    wait_ready();
    unauth0 = rstat(0, "unauthorized");
    c = rl_test_dial(router_ports[0], APP_TOKEN, T_TIMEOUT);
    expect(c, RL_WIRE_OP_CHECK, "tok", "dave", 5, RL_WIRE_ALLOWED);
    rep = send_one(c, RL_WIRE_OP_ADJUST, "tok", "dave", -5);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_ERROR);
    ck_assert_uint_eq(rep.err, RL_WIRE_ERR_UNAUTHORIZED);
    ck_assert_ptr_nonnull(strstr(rep.message.ptr, "adjust = yes"));
    /* the connection stays; a charge and a zero delta are no refund */
    ck_assert_uint_eq(expect(c, RL_WIRE_OP_ADJUST, "tok", "dave", 2, RL_WIRE_ALLOWED).remaining, 3);
    expect(c, RL_WIRE_OP_ADJUST, "tok", "dave", 0, RL_WIRE_ALLOWED);
    rl_client_destroy(c);
    ck_assert_int_eq(rstat(0, "unauthorized") - unauth0, 1);
    /* settle may refund tok, and only the services it may CHECK */
    c = rl_test_dial(router_ports[0], SETTLE_TOKEN, T_TIMEOUT);
    ck_assert_uint_eq(expect(c, RL_WIRE_OP_ADJUST, "tok", "dave", -5, RL_WIRE_ALLOWED).remaining,
                      8);
    rep = send_one(c, RL_WIRE_OP_ADJUST, "keep", "dave", -1);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_ERROR);
    ck_assert_uint_eq(rep.err, RL_WIRE_ERR_UNAUTHORIZED);
    rl_client_destroy(c);
}
END_TEST

/*
 * A client that may CHECK a service may charge its users (a charge needs no more right), but
 * however many charges it sends, a user's debt stops at one largest charge past an empty
 * allowance: 300 pipelined charges of 10^6 against `token_bucket 10 per 10s` leave the victim
 * refused for (10^6 + 1) units at 1 a second, not 3 * 10^8 s (9.5 years).
 */
START_TEST(test_charges_stop_at_one_charge_of_debt)
{
    struct rl_client *c;
    struct rl_wire_req req = {.op = RL_WIRE_OP_ADJUST, .delta = 1000000};
    struct rl_wire_reply rep;
    struct rl_wire_check_reply chk;

    wait_ready();
    c = rl_test_dial(router_ports[0], APP_TOKEN, T_TIMEOUT);
    req.service.ptr = "tb";
    req.service.len = 2;
    req.user.ptr = "victim";
    req.user.len = 6;
    for (uint32_t i = 0; i < 300; i++) {
        req.id = 1000 + i;
        ck_assert_int_eq(rl_client_queue(c, &req), 0);
    }
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    for (int i = 0; i < 300; i++) {
        ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
        ck_assert_uint_eq(rep.op, RL_WIRE_OP_ADJUST);
        ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    }
    chk = expect(c, RL_WIRE_OP_CHECK, "tb", "victim", 1, RL_WIRE_LIMITED);
    ck_assert_uint_eq(chk.remaining, 0);
    /* (10^6 + 1) units at 1 per 1000 ms, less what refilled since the first charge */
    ck_assert_msg(chk.retry_after_ms <= 1000001000ull && chk.retry_after_ms > 999000000ull,
                  "retry_after_ms %llu", (unsigned long long)chk.retry_after_ms);
    ck_assert_msg(chk.reset_ms <= 1000010000ull, "reset_ms %llu",
                  (unsigned long long)chk.reset_ms);
    rl_client_destroy(c);
}
END_TEST

/* Drives (svc, user) to LIMITED through c (2 of 2, then refused); returns the refusals
 * router r has remembered since (deny_inserts). */
static int64_t
refuse(int r, struct rl_client *c, const char *svc, const char *user)
{
    int64_t ins0 = rstat(r, "deny_inserts");

    expect(c, RL_WIRE_OP_CHECK, svc, user, 1, RL_WIRE_ALLOWED);
    expect(c, RL_WIRE_OP_CHECK, svc, user, 1, RL_WIRE_ALLOWED);
    expect(c, RL_WIRE_OP_CHECK, svc, user, 1, RL_WIRE_LIMITED);
    return rstat(r, "deny_inserts") - ins0;
}

/* One CHECK of (svc, user) through c refused; returns the refusals router r has remembered
 * since (deny_inserts). */
static int64_t
refuse_once(int r, struct rl_client *c, const char *svc, const char *user)
{
    int64_t ins0 = rstat(r, "deny_inserts");

    expect(c, RL_WIRE_OP_CHECK, svc, user, 1, RL_WIRE_LIMITED);
    return rstat(r, "deny_inserts") - ins0;
}

START_TEST(test_deny_cache_two_routers)
{
    struct rl_client *a, *b;
    int64_t hits0;

    wait_ready();
    a = rl_test_dial(router_ports[0], APP_TOKEN, T_TIMEOUT);
    b = rl_test_dial(router_ports[1], SETTLE_TOKEN, T_TIMEOUT);
    /* keep: no client may refund it: router A holds the refusal and answers it itself */
    ck_assert_int_eq(refuse(0, a, "keep", "erin"), 1);
    hits0 = rstat(0, "deny_hits");
    expect(a, RL_WIRE_OP_CHECK, "keep", "erin", 1, RL_WIRE_LIMITED);
    ck_assert_int_eq(rstat(0, "deny_hits") - hits0, 1);
    /* fw: settle may refund it: no router holds its refusal, so a refund through B is seen
     * through A at once */
    ck_assert_int_eq(refuse(0, a, "fw", "erin"), 0);
    expect(b, RL_WIRE_OP_ADJUST, "fw", "erin", -1, RL_WIRE_ALLOWED);
    hits0 = rstat(0, "deny_hits");
    ck_assert_uint_eq(expect(a, RL_WIRE_OP_CHECK, "fw", "erin", 1, RL_WIRE_ALLOWED).remaining, 0);
    expect(a, RL_WIRE_OP_CHECK, "fw", "erin", 1, RL_WIRE_LIMITED);
    ck_assert_int_eq(rstat(0, "deny_hits") - hits0, 0);
    rl_client_destroy(a);
    rl_client_destroy(b);
}
END_TEST

START_TEST(test_release_two_routers)
{
    struct rl_client *a, *b;
    struct rl_wire_check_reply rep;
    int64_t hits0, rel0[2];

    wait_ready();
    rel0[0] = rstat(0, "releases");
    rel0[1] = rstat(1, "releases");
    a = rl_test_dial(router_ports[0], APP_TOKEN, T_TIMEOUT);
    b = rl_test_dial(router_ports[1], APP_TOKEN, T_TIMEOUT);
    ck_assert_uint_eq(expect(a, RL_WIRE_OP_CHECK, "cc", "fred", 1, RL_WIRE_ALLOWED).remaining, 1);
    ck_assert_uint_eq(expect(b, RL_WIRE_OP_CHECK, "cc", "fred", 1, RL_WIRE_ALLOWED).remaining, 0);
    /* a concurrency refusal is never held, whoever may refund */
    ck_assert_int_eq(refuse_once(0, a, "cc", "fred"), 0);
    rep = expect(b, RL_WIRE_OP_RELEASE, "cc", "fred", 1, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.limit, 2);
    ck_assert_uint_eq(rep.remaining, 1);
    hits0 = rstat(0, "deny_hits");
    ck_assert_uint_eq(expect(a, RL_WIRE_OP_CHECK, "cc", "fred", 1, RL_WIRE_ALLOWED).remaining, 0);
    ck_assert_int_eq(rstat(0, "deny_hits") - hits0, 0);
    /* both given back through A; no rule: NO_RULE under op 10 */
    ck_assert_uint_eq(expect(a, RL_WIRE_OP_RELEASE, "cc", "fred", 2, RL_WIRE_ALLOWED).remaining, 2);
    expect(a, RL_WIRE_OP_RELEASE, "nope", "fred", 1, RL_WIRE_NO_RULE);
    rl_client_destroy(a);
    rl_client_destroy(b);
    ck_assert_int_eq(rstat(0, "releases") - rel0[0], 2);
    ck_assert_int_eq(rstat(1, "releases") - rel0[1], 1);
    ck_assert_int_eq(tagged_lines(RL_REQLINE_TAG_RELEASE, 3), 3);
}
END_TEST

/* [op, 5, svc, user, nil, element 5 as the bytes v[0..vn)] through c, as a raw frame; the
 * reply, under id 5. */
static struct rl_wire_reply
send_raw(struct rl_client *c, uint8_t op, const char *svc, const char *user, const char *v,
         size_t vn)
{
    unsigned char f[128];
    size_t n = 4, sl = strlen(svc), ul = strlen(user);
    struct rl_wire_reply rep;

    f[n++] = 0x96;
    f[n++] = op;
    f[n++] = 5;
    f[n++] = (unsigned char)(0xa0 | sl);
    memcpy(f + n, svc, sl);
    n += sl;
    f[n++] = (unsigned char)(0xa0 | ul);
    memcpy(f + n, user, ul);
    n += ul;
    f[n++] = 0xc0;
    memcpy(f + n, v, vn);
    n += vn;
    f[0] = f[1] = 0;
    f[2] = (unsigned char)((n - 4) >> 8);
    f[3] = (unsigned char)(n - 4);
    ck_assert_int_eq(rl_client_queue_raw(c, (const char *)f, n), 0);
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.id, 5);
    return rep;
}

#define RAWV(s) s, sizeof(s) - 1

START_TEST(test_settle_encodings)
{
    static const struct {
        const char *v;
        size_t vn;
        uint64_t remaining; /* after it, from 0 of 10 */
    } deltas[] = {
        {RAWV("\xff"), 1},                                 /* -1, negative fixint */
        {RAWV("\xd0\xfe"), 3},                             /* -2, int 8 */
        {RAWV("\xd1\xff\xfd"), 6},                         /* -3, int 16 */
        {RAWV("\xd2\xff\xff\xff\xff"), 7},                 /* -1, int 32 */
        {RAWV("\xd3\xff\xff\xff\xff\xff\xff\xff\xfe"), 9}, /* -2, int 64 */
        {RAWV("\xd0\x02"), 7},                             /* +2, int 8 */
        {RAWV("\xcf\x00\x00\x00\x00\x00\x00\x00\x01"), 6}, /* +1, uint 64 */
        {RAWV("\xcd\x00\x03"), 3},                         /* +3, uint 16 */
    };
    struct rl_client *c;
    struct rl_wire_reply rep;
    int64_t adj0, fwd0, unauth0;

    wait_ready();
    adj0 = rstat(0, "adjusts");
    fwd0 = rstat(0, "forwarded");
    unauth0 = rstat(0, "unauthorized");
    c = rl_test_dial(router_ports[0], SETTLE_TOKEN, T_TIMEOUT);
    ck_assert_uint_eq(expect(c, RL_WIRE_OP_CHECK, "tok", "gina", 10, RL_WIRE_ALLOWED).remaining, 0);
    for (size_t i = 0; i < sizeof(deltas) / sizeof(deltas[0]); i++) {
        rep = send_raw(c, RL_WIRE_OP_ADJUST, "tok", "gina", deltas[i].v, deltas[i].vn);
        ck_assert_msg(rep.op == RL_WIRE_OP_ADJUST && rep.check.code == RL_WIRE_ALLOWED &&
                          rep.check.remaining == deltas[i].remaining,
                      "delta %zu: op %u code %u remaining %llu, not %llu", i, rep.op,
                      rep.check.code, (unsigned long long)rep.check.remaining,
                      (unsigned long long)deltas[i].remaining);
    }
    /* out of bounds: the router's BAD_FIELD, the connection stays */
    rep =
        send_raw(c, RL_WIRE_OP_ADJUST, "tok", "gina", RAWV("\xd2\xff\xf0\xbd\xbf")); /* -1000001 */
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_ERROR);
    ck_assert_uint_eq(rep.err, RL_WIRE_ERR_BAD_FIELD);
    ck_assert_ptr_nonnull(strstr(rep.message.ptr, "delta"));
    rl_client_destroy(c);
    /* a refund in an int 64 is a refund: app's token may not */
    c = rl_test_dial(router_ports[0], APP_TOKEN, T_TIMEOUT);
    rep =
        send_raw(c, RL_WIRE_OP_ADJUST, "tok", "gina", RAWV("\xd3\xff\xff\xff\xff\xff\xff\xff\xff"));
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_ERROR);
    ck_assert_uint_eq(rep.err, RL_WIRE_ERR_UNAUTHORIZED);
    rep = send_raw(c, RL_WIRE_OP_RELEASE, "cc", "gina", RAWV("\x00"));
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_ERROR);
    ck_assert_uint_eq(rep.err, RL_WIRE_ERR_BAD_FIELD);
    ck_assert_ptr_nonnull(strstr(rep.message.ptr, "count"));
    /* a slot taken, given back by a count in a uint 16 */
    ck_assert_uint_eq(expect(c, RL_WIRE_OP_CHECK, "cc", "gina", 1, RL_WIRE_ALLOWED).remaining, 1);
    rep = send_raw(c, RL_WIRE_OP_RELEASE, "cc", "gina", RAWV("\xcd\x00\x01"));
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_RELEASE);
    ck_assert_uint_eq(rep.check.remaining, 2);
    rl_client_destroy(c);
    ck_assert_int_eq(rstat(0, "adjusts") - adj0, 8);
    ck_assert_int_eq(rstat(0, "unauthorized") - unauth0, 1);
    /* the 2 CHECKs, 8 ADJUSTs and the RELEASE went to a node; the refusals did not */
    ck_assert_int_eq(rstat(0, "forwarded") - fwd0, 11);
}
END_TEST

START_TEST(test_policy_when_owner_down)
{
    struct rl_client *a;
    struct rl_wire_check_reply rep;
    int64_t bs0, down0;

    wait_ready();
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(rl_harness_server_stop(&nodes[i], SIGKILL, T_TIMEOUT), 0);
    }
    a = rl_test_dial(router_ports[0], APP_TOKEN, T_TIMEOUT);
    bs0 = rstat(0, "backstop_allowed") + rstat(0, "backstop_limited");
    down0 = rstat(0, "owner_down") + rstat(0, "deadline_expired");
    rep = expect(a, RL_WIRE_OP_ADJUST, "tok", "gina", 3, RL_WIRE_FAIL_OPEN);
    ck_assert_uint_eq(rep.limit, 0);
    ck_assert_uint_eq(rep.remaining, 0);
    rep = expect(a, RL_WIRE_OP_ADJUST, "shut", "gina", 1, RL_WIRE_FAIL_CLOSED);
    ck_assert_uint_eq(rep.retry_after_ms, 2000); /* the session timeout */
    expect(a, RL_WIRE_OP_RELEASE, "cc", "gina", 1, RL_WIRE_FAIL_OPEN);
    ck_assert_int_eq(rstat(0, "backstop_allowed") + rstat(0, "backstop_limited"), bs0);
    ck_assert_int_eq(rstat(0, "owner_down") + rstat(0, "deadline_expired") - down0, 3);
    /* a CHECK of the same failure = open rule is the backstop's */
    expect(a, RL_WIRE_OP_CHECK, "tok", "gina", 1, RL_WIRE_FAIL_OPEN);
    ck_assert_int_eq(rstat(0, "backstop_allowed") - bs0, 1);
    rl_client_destroy(a);
}
END_TEST

static Suite *
adjust_router_suite(void)
{
    Suite *s = suite_create("adjust_router");
    TCase *tc = tcase_create("adjust");

    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_settle_through_router);
    tcase_add_test(tc, test_refund_needs_adjust);
    tcase_add_test(tc, test_charges_stop_at_one_charge_of_debt);
    tcase_add_test(tc, test_deny_cache_two_routers);
    tcase_add_test(tc, test_release_two_routers);
    tcase_add_test(tc, test_settle_encodings);
    tcase_add_test(tc, test_policy_when_owner_down);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(adjust_router_suite)
