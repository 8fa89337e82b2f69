/*
 * check_tls_flood: the TLS handshake gate (common/conn.h, rl_connq_hs_*) against a flood of
 * one replayed ClientHello, with real rl-node and rl-router processes on loopback and a
 * throwaway CA made at test time. The process is stopped (SIGSTOP) while the flood's
 * connections and a client's pipelined CHECKs wait in its socket queues, so they all reach
 * its loop in one turn whatever the machine's load: then the counts are exact. Asserted:
 * the handshakes past the turn's budget are deferred (tls_handshake_deferred), those past
 * the per-address cap of handshakes in progress are closed (tls_refused_per_peer) and the
 * rest stay counted (tls_handshaking) until their sockets close; every CHECK on the
 * established connection is answered, and correctly. Not a latency test: the figure of CHECK
 * latency under a handshake flood is bench/tls.sh's (docs/BENCHMARKS.md, "Under abuse").
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"
#include "connlimits.h"
#include "harness.h"
#include "reqclient.h"
#include "rltest.h"
#include "tls.h"

#define T_TIMEOUT 5000
#define FLOOD 200        /* connections replaying the ClientHello, at once */
#define PIPELINED 20     /* CHECKs waiting on the established connection with them */
#define WAIT_STEPS 3000  /* 10 ms each: how long the counts are waited for at most */

static char dir[1024];
static char conf[4096];
static struct rl_harness_server node, router;
static int node_port, router_port, resp_port;

static void
flood_setup(void)
{
    snprintf(dir, sizeof(dir), "%s", rl_harness_tmpdir());
    ck_assert_int_eq(rl_harness_tls_ca(dir, "ca"), 0);
    ck_assert_int_eq(rl_harness_tls_cert(dir, "node", "ca"), 0);
    ck_assert_int_eq(rl_harness_tls_cert(dir, "client", "ca"), 0);
    node_port = rl_harness_free_port();
    router_port = rl_harness_free_port();
    resp_port = rl_harness_free_port();
    ck_assert_int_eq(rl_harness_tmppath(conf, sizeof(conf), "flood.conf"), 0);
    /* frame_timeout long: the flood's handshakes stay in progress while the test counts. */
    ck_assert_int_eq(rl_harness_write_file(conf,
                                           "[cluster]\n"
                                           "tls_cert_file = %s/node.pem\n"
                                           "tls_key_file = %s/node.key\n"
                                           "tls_ca_file = %s/ca.pem\n"
                                           "[router]\n"
                                           "listen = 127.0.0.1:%d\n"
                                           "resp = 127.0.0.1:%d\n"
                                           "deadline = 2s\n"
                                           "[clients]\n"
                                           "frame_timeout = 120s\n"
                                           "[node n1]\n"
                                           "listen = 127.0.0.1:%d\n"
                                           "[service shop]\n"
                                           "limit = fixed_window 100 per 1h\n",
                                           dir, dir, dir, router_port, resp_port, node_port),
                     0);
    ck_assert_int_eq(rl_harness_node_start(&node, conf, "n1", node_port, 0), 0);
}

static void
flood_teardown(void)
{
    rl_harness_cleanup();
}

/* A client context: the server checked against the CA, showing dir/CERT.pem if not NULL. */
static struct rl_tls_ctx *
client_ctx(const char *cert)
{
    return rl_test_tls_client(dir, "ca", cert);
}

/* One ClientHello, made once and replayed on every flood connection: no crypto on the
 * attacker's side. */
static size_t
client_hello(uint8_t *buf, size_t cap)
{
    struct rl_tls_ctx *ctx = client_ctx(NULL);
    struct rl_tls *s = rl_tls_new(ctx);
    size_t n;

    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(rl_tls_start(s), 0);
    n = rl_tls_take(s, buf, cap);
    ck_assert_uint_gt(n, 5);
    ck_assert_uint_eq(buf[0], RL_TLS_RECORD_HANDSHAKE);
    rl_tls_free(s);
    rl_tls_ctx_free(ctx);
    return n;
}

/* Opens n connections to port, each sending hello; their descriptors into fds. */
static void
flood(int port, int *fds, int n, const uint8_t *hello, size_t len)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        ck_assert_int_ge(fds[i], 0);
        ck_assert_int_eq(connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
        ck_assert_int_eq((int)send(fds[i], hello, len, MSG_NOSIGNAL), (int)len);
    }
}

static int64_t
stat_of(struct rl_client *c, const char *name)
{
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_stats(c, &rep, T_TIMEOUT), 0);
    for (size_t i = 0; i < rep.nstats; i++) {
        if (rep.stat_keys[i].len == strlen(name) &&
            memcmp(rep.stat_keys[i].ptr, name, rep.stat_keys[i].len) == 0) {
            return rep.stat_vals[i];
        }
    }
    ck_abort_msg("STATS has no %s", name);
    return -1;
}

/* Waits until the handshakes begun plus those refused reach want (every flood connection's
 * first record was read). */
static void
wait_flood_read(struct rl_client *c, int64_t want)
{
    int64_t got = 0;

    for (int i = 0; i < WAIT_STEPS; i++) {
        got = stat_of(c, "tls_handshakes") + stat_of(c, "tls_refused_per_peer") +
              stat_of(c, "tls_refused_max");
        if (got >= want) {
            break;
        }
        usleep(10 * 1000);
    }
    ck_assert_int_eq(got, want);
}

static void
wait_stat(struct rl_client *c, const char *name, int64_t want)
{
    int64_t got = -1;

    for (int i = 0; i < WAIT_STEPS && (got = stat_of(c, name)) != want; i++) {
        usleep(10 * 1000);
    }
    ck_assert_int_eq(got, want);
}

/* Queues n CHECKs of user on c (ids from id0) and sends them. */
static void
queue_checks(struct rl_client *c, const char *user, uint32_t id0, int n)
{
    struct rl_wire_req req;

    memset(&req, 0, sizeof(req));
    req.op = RL_WIRE_OP_CHECK;
    req.service = (struct rl_wire_str){"shop", 4};
    req.user = (struct rl_wire_str){user, strlen(user)};
    req.cost = 1;
    for (int i = 0; i < n; i++) {
        req.id = id0 + (uint32_t)i;
        ck_assert_int_eq(rl_client_queue(c, &req), 0);
    }
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
}

/* The n answers to queue_checks: in order, each a decision, remaining counting down from
 * first (fixed_window 100 per 1h). */
static void
expect_checks(struct rl_client *c, uint32_t id0, int n, uint64_t first)
{
    struct rl_wire_reply rep;

    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(rl_client_recv(c, &rep, 30000), 0);
        ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
        ck_assert_uint_eq(rep.id, id0 + (uint32_t)i);
        ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
        ck_assert_uint_eq(rep.check.remaining, first - (uint64_t)i);
    }
}

/* The node: FLOOD ClientHellos and PIPELINED CHECKs reach its loop in one turn. At most
 * RL_CONN_DEFAULT_TLS_PER_PEER handshakes from 127.0.0.1 are taken (the rest closed before
 * any crypto), at most RL_CONN_HS_TURN_STEPS of them step in that turn (the rest deferred),
 * and every CHECK is answered with the right count. Before the gate: no refusal, no
 * deferral, every ClientHello answered in the turn it came. */
START_TEST(test_node_handshake_flood)
{
    static int fds[FLOOD];
    struct rl_tls_ctx *member = client_ctx("client");
    const int64_t cap = RL_CONN_DEFAULT_TLS_PER_PEER;
    struct rl_client *c = NULL;
    uint8_t hello[4096];
    size_t hlen = client_hello(hello, sizeof(hello));
    char why[256];

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)node_port, T_TIMEOUT), 0);
    ck_assert_msg(rl_client_start_tls(c, member, T_TIMEOUT, why, sizeof(why)) == 0, "%s", why);
    queue_checks(c, "alice", 1, 1);
    expect_checks(c, 1, 1, 99);
    ck_assert_int_eq(stat_of(c, "tls_handshakes"), 1);
    ck_assert_int_eq(stat_of(c, "tls_handshakes_done"), 1);
    ck_assert_int_eq(stat_of(c, "tls_handshaking"), 0);

    ck_assert_int_eq(rl_harness_pause(node.pid), 0);
    queue_checks(c, "alice", 100, PIPELINED);
    flood(node_port, fds, FLOOD, hello, hlen);
    ck_assert_int_eq(kill(node.pid, SIGCONT), 0);

    expect_checks(c, 100, PIPELINED, 98);
    wait_flood_read(c, 1 + FLOOD);
    fprintf(stderr, "node: %lld handshakes begun, %lld refused, %lld steps deferred\n",
            (long long)stat_of(c, "tls_handshakes"), (long long)stat_of(c, "tls_refused_per_peer"),
            (long long)stat_of(c, "tls_handshake_deferred"));
    ck_assert_int_eq(stat_of(c, "tls_refused_per_peer"), FLOOD - cap);
    ck_assert_int_eq(stat_of(c, "tls_refused_max"), 0);
    ck_assert_int_eq(stat_of(c, "tls_handshaking"), cap);
    ck_assert_int_ge(stat_of(c, "tls_handshake_deferred"), cap - (int64_t)RL_CONN_HS_TURN_STEPS);
    ck_assert_int_eq(stat_of(c, "tls_handshakes_done"), 1);
    /* Still answered, and the flood's handshakes all got their step: none waits. */
    queue_checks(c, "alice", 200, 1);
    expect_checks(c, 200, 1, 98 - PIPELINED);

    /* The flood leaves: its handshakes leave the counts, and a new client is taken. */
    for (int i = 0; i < FLOOD; i++) {
        close(fds[i]);
    }
    wait_stat(c, "tls_handshaking", 0);
    {
        struct rl_client *d = NULL;

        ck_assert_int_eq(rl_client_connect(&d, "127.0.0.1", (uint16_t)node_port, T_TIMEOUT), 0);
        ck_assert_msg(rl_client_start_tls(d, member, T_TIMEOUT, why, sizeof(why)) == 0, "%s",
                      why);
        queue_checks(d, "alice", 300, 1);
        expect_checks(d, 300, 1, 97 - PIPELINED);
        rl_client_destroy(d);
    }
    rl_client_destroy(c);
    rl_tls_ctx_free(member);
}
END_TEST

/* The router: the same flood split over its binary listener and its RESP front (one gate per
 * worker loop, both fronts counted in it): connections past a worker's per-address cap are
 * closed, handshakes past a turn's budget deferred, and the CHECKs answered. */
START_TEST(test_router_handshake_flood)
{
    static int fds[FLOOD];
    struct rl_tls_ctx *ca = client_ctx(NULL);
    const int64_t cap = RL_CONN_DEFAULT_TLS_PER_PEER;
    const int64_t workers = RL_HARNESS_ROUTER_WORKERS;
    struct rl_client *c = NULL;
    uint8_t hello[4096];
    size_t hlen = client_hello(hello, sizeof(hello));
    int64_t begun, refused;
    char why[256];

    ck_assert_int_eq(rl_harness_router_start(&router, conf, router_port), 0);
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT), 0);
    ck_assert_msg(rl_client_start_tls(c, ca, T_TIMEOUT, why, sizeof(why)) == 0, "%s", why);
    queue_checks(c, "bob", 1, 1);
    expect_checks(c, 1, 1, 99);

    ck_assert_int_eq(rl_harness_pause(router.pid), 0);
    queue_checks(c, "bob", 100, PIPELINED);
    flood(router_port, fds, FLOOD / 2, hello, hlen);
    flood(resp_port, fds + FLOOD / 2, FLOOD / 2, hello, hlen);
    ck_assert_int_eq(kill(router.pid, SIGCONT), 0);

    expect_checks(c, 100, PIPELINED, 98);
    wait_flood_read(c, 1 + FLOOD);
    begun = stat_of(c, "tls_handshakes");
    refused = stat_of(c, "tls_refused_per_peer");
    fprintf(stderr, "router: %lld handshakes begun, %lld refused, %lld steps deferred\n",
            (long long)begun, (long long)refused, (long long)stat_of(c, "tls_handshake_deferred"));
    /* Each worker took at most its cap from 127.0.0.1, and the rest were refused. */
    ck_assert_int_le(stat_of(c, "tls_handshaking"), workers * cap);
    ck_assert_int_ge(refused, FLOOD - workers * cap);
    ck_assert_int_eq(begun + refused, 1 + FLOOD);
    ck_assert_int_gt(stat_of(c, "tls_handshake_deferred"), 0);
    queue_checks(c, "bob", 200, 1);
    expect_checks(c, 200, 1, 98 - PIPELINED);
    for (int i = 0; i < FLOOD; i++) {
        close(fds[i]);
    }
    wait_stat(c, "tls_handshaking", 0);
    rl_client_destroy(c);
    rl_tls_ctx_free(ca);
}
END_TEST

/*
 * Stalled handshakes from many addresses fill the loop's cap (64 from each of 16 loopback
 * addresses: 1,024, each a bare 5-byte record header and nothing more), and the node's
 * frame_timeout is long: a new client still gets in once the stallers are 250 ms old, each
 * new handshake taking the place of the oldest (tls_evicted), and its CHECK is answered.
 * Before: the new client was closed at its first record (tls_refused_max) for as long as the
 * stallers stayed.
 */
START_TEST(test_stalled_handshakes_make_room)
{
    enum { ADDRS = 16 };
    static int fds[ADDRS * RL_CONN_DEFAULT_TLS_PER_PEER];
    static const uint8_t header[5] = {RL_TLS_RECORD_HANDSHAKE, 3, 1, 0, 64};
    struct rl_tls_ctx *member = client_ctx("client");
    struct rl_client *c = NULL, *d = NULL;
    char why[256];
    int n = 0;

    ck_assert_uint_ge(rl_conn_raise_fd_limit(), 1200);
    ck_assert_uint_eq(RL_CONN_DEFAULT_TLS_HANDSHAKES, ADDRS * RL_CONN_DEFAULT_TLS_PER_PEER);
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)node_port, T_TIMEOUT), 0);
    ck_assert_msg(rl_client_start_tls(c, member, T_TIMEOUT, why, sizeof(why)) == 0, "%s", why);
    for (int a = 0; a < ADDRS; a++) {
        struct sockaddr_in from = {.sin_family = AF_INET};
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)node_port)};

        from.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 0x100u + (uint32_t)a); /* 127.0.1.a */
        to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        for (int i = 0; i < (int)RL_CONN_DEFAULT_TLS_PER_PEER; i++, n++) {
            fds[n] = socket(AF_INET, SOCK_STREAM, 0);
            ck_assert_int_ge(fds[n], 0);
            ck_assert_int_eq(bind(fds[n], (struct sockaddr *)&from, sizeof(from)), 0);
            ck_assert_int_eq(connect(fds[n], (struct sockaddr *)&to, sizeof(to)), 0);
            ck_assert_int_eq((int)send(fds[n], header, sizeof(header), MSG_NOSIGNAL), 5);
        }
    }
    wait_stat(c, "tls_handshaking", n);
    ck_assert_int_eq(stat_of(c, "tls_refused_max"), 0);
    usleep((RL_CONN_HS_EVICT_MS + 100) * 1000);
    ck_assert_int_eq(rl_client_connect(&d, "127.0.0.1", (uint16_t)node_port, T_TIMEOUT), 0);
    ck_assert_msg(rl_client_start_tls(d, member, T_TIMEOUT, why, sizeof(why)) == 0,
                  "a new client is kept out by stalled handshakes: %s", why);
    queue_checks(d, "carol", 1, 1);
    expect_checks(d, 1, 1, 99);
    ck_assert_int_ge(stat_of(c, "tls_evicted"), 1);
    ck_assert_int_eq(stat_of(c, "tls_refused_max"), 0);
    rl_client_destroy(d);
    for (int i = 0; i < n; i++) {
        close(fds[i]);
    }
    rl_client_destroy(c);
    rl_tls_ctx_free(member);
}
END_TEST

static Suite *
tls_flood_suite(void)
{
    Suite *s = suite_create("tls_flood");
    TCase *tc = tcase_create("flood");

    tcase_add_checked_fixture(tc, flood_setup, flood_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_node_handshake_flood);
    tcase_add_test(tc, test_router_handshake_flood);
    tcase_add_test(tc, test_stalled_handshakes_make_room);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(tls_flood_suite)
