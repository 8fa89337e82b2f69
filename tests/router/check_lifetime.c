/*
 * check_lifetime: the router's one lifetime rule (router_int.h, rl_router_hold/unhold). A
 * router worker, in this process on a loop of the test's, is closed with every kind of
 * handle open, and must free itself exactly once, leaving its loop with no handle (run under
 * ASan and LSan by the asan build, which also catch a leak or a use after free):
 *   - plaintext: binary clients (one with a CHECK in flight, one with a THROTTLED fan-out and
 *     its timer), a RESP connection with a CL.THROTTLE in flight, a gRPC connection with a
 *     ShouldRateLimit call in flight waiting for its grpc-timeout (the calls' timer), the
 *     connections to a real rl-node (paused with SIGSTOP, so nothing is answered), the
 *     deadline timer armed, the health timer of a ZooKeeper session;
 *   - TLS: the same three kinds of client connections under TLS (handshakes not finished)
 *     and the router's TLS connections to the node.
 * Not for what the answers say (check_router, check_resp_clients, check_tls).
 */
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "buf.h"
#include "clock.h"
#include "conf.h"
#include "envoycfg.h"
#include "front.h"
#include "harness.h"
#include "rls_front.h"
#include "router_int.h"
#include "rltest.h"
#include "fronts.h"
#include "tls.h"
#include "wire.h"
#include "zkm.h"

#define T_TIMEOUT_MS 10000

static char conf_path[PATH_MAX], dir[PATH_MAX];
static int node_port, router_port;
static struct rl_harness_server node;
static int freed, left_at_free;

static void
count_handle(uv_handle_t *h, void *arg)
{
    (void)h;
    (*(int *)arg)++;
}

/* The router is freed: every handle it opened on the loop must be closed by now. */
static void
on_freed(void *arg)
{
    freed++;
    left_at_free = 0;
    uv_walk(arg, count_handle, &left_at_free);
}

static void
write_conf(bool tls)
{
    char tlskeys[3 * PATH_MAX + 100] = "";

    if (tls) {
        snprintf(tlskeys, sizeof(tlskeys),
                 "tls_cert_file = %s/srv.pem\ntls_key_file = %s/srv.key\ntls_ca_file = %s/ca.pem\n",
                 dir, dir, dir);
    }
    ck_assert_int_eq(rl_harness_write_file(conf_path,
                                           "[cluster]\nname = lt\nshards = 16\n%s"
                                           "[router]\nlisten = 127.0.0.1:%d\ndeadline = 20s\n"
                                           "[node n1]\nlisten = 127.0.0.1:%d\n"
                                           "[service a]\nlimit = fixed_window 1000 per 1h\n",
                                           tlskeys, router_port, node_port),
                     0);
}

static void
setup_common(bool tls)
{
    freed = 0;
    node_port = rl_harness_free_port();
    router_port = rl_harness_free_port();
    ck_assert_int_gt(node_port, 0);
    ck_assert_int_gt(router_port, 0);
    ck_assert_int_eq(rl_harness_tmppath(dir, sizeof(dir), "certs"), 0);
    if (tls) {
        char cmd[PATH_MAX + 16];

        snprintf(cmd, sizeof(cmd), "%s", dir);
        ck_assert_int_eq(mkdir(cmd, 0700) == 0 || errno == EEXIST, 1);
        ck_assert_int_eq(rl_harness_tls_ca(dir, "ca"), 0);
        ck_assert_int_eq(rl_harness_tls_cert(dir, "srv", "ca"), 0);
    }
    ck_assert_int_eq(rl_harness_tmppath(conf_path, sizeof(conf_path), "lifetime.conf"), 0);
    write_conf(tls);
    memset(&node, 0, sizeof(node));
    ck_assert_int_eq(rl_harness_node_start(&node, conf_path, "n1", node_port, 0), 0);
}

static void
teardown(void)
{
    if (node.pid > 0) {
        kill(node.pid, SIGCONT);
    }
    rl_harness_cleanup();
}

/* Runs loop until done(arg) or the time is up (fails then). */
static void
pump(uv_loop_t *loop, bool (*done)(struct rl_router *r), struct rl_router *r, const char *what)
{
    uint64_t until = rl_clock_mono_ns() + (uint64_t)T_TIMEOUT_MS * 1000000u;

    while (!done(r)) {
        ck_assert_msg(rl_clock_mono_ns() < until,
                      "timed out waiting for %s (pending %u, fan-outs %u, calls' timer %d, "
                      "connections %llu, front's %u)",
                      what, r->npending, r->nfanouts, r->rls->wait != NULL,
                      (unsigned long long)r->listener.stats.connections, r->front_conns);
        uv_run(loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
}

static bool
is_ready(struct rl_router *r)
{
    char why[256];

    return rl_router_ready(r, why, sizeof(why));
}

/* A connected TCP socket pair through a listener of the test's: fds[0] the client's,
 * fds[1] the accepted one (a front's, adopted). */
static void
tcp_pair(int fds[2])
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int l = socket(AF_INET, SOCK_STREAM, 0);

    ck_assert_int_ge(l, 0);
    ck_assert_int_eq(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(l, 4), 0);
    ck_assert_int_eq(getsockname(l, (struct sockaddr *)&a, &alen), 0);
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fds[0], 0);
    ck_assert_int_eq(connect(fds[0], (struct sockaddr *)&a, sizeof(a)), 0);
    fds[1] = accept(l, NULL, NULL);
    ck_assert_int_ge(fds[1], 0);
    close(l);
}

static void
send_all(int fd, const void *p, size_t n)
{
    ck_assert_int_eq((int)send(fd, p, n, MSG_NOSIGNAL), (int)n);
}

static int
binary_client(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((uint16_t)router_port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

static void
send_check(int fd, uint32_t id, const char *user)
{
    struct rl_buf b;
    struct rl_wire_req q = {.op = RL_WIRE_OP_CHECK, .id = id, .cost = 1};

    q.service.ptr = "a";
    q.service.len = 1;
    q.user.ptr = user;
    q.user.len = (uint32_t)strlen(user);
    rl_buf_init(&b);
    ck_assert_int_eq(rl_wire_put_check(&b, &q), 0);
    send_all(fd, b.data, b.len);
    rl_buf_deinit(&b);
}

static void
send_throttled(int fd, uint32_t id)
{
    struct rl_buf b;
    struct rl_wire_req q = {.op = RL_WIRE_OP_THROTTLED, .id = id, .top = 3};

    rl_buf_init(&b);
    ck_assert_int_eq(rl_wire_put_throttled(&b, &q), 0);
    send_all(fd, b.data, b.len);
    rl_buf_deinit(&b);
}

/* ---- a gRPC ShouldRateLimit call, framed by nghttp2's client ----------------------------- */

static ssize_t
h2_body(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
        nghttp2_data_source *src, void *arg)
{
    /* RateLimitRequest{domain "lt", descriptors [{entries [{key "user", value "u1"}]}]} */
    static const uint8_t msg[] = {0x0a, 2,   'l', 't', 0x12, 12,   0x0a, 10,  0x0a,
                                  4,    'u', 's', 'e', 'r',  0x12, 2,    'u', '1'};
    uint8_t *out = buf;

    (void)ng, (void)id, (void)src, (void)arg;
    ck_assert_uint_ge(len, 5 + sizeof(msg));
    out[0] = 0;
    out[1] = out[2] = out[3] = 0;
    out[4] = (uint8_t)sizeof(msg);
    memcpy(out + 5, msg, sizeof(msg));
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)(5 + sizeof(msg));
}

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1, NGHTTP2_NV_FLAG_NONE         \
    }

static void
send_grpc_call(int fd)
{
    nghttp2_session_callbacks *cbs;
    nghttp2_session *ng;
    nghttp2_nv hdrs[] = {
        NV(":method", "POST"),
        NV(":scheme", "http"),
        NV(":authority", "localhost"),
        NV(":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"),
        NV("content-type", "application/grpc"),
        NV("te", "trailers"),
        NV("grpc-timeout", "5S"), /* under the deadline: the calls' own timer is armed */
    };
    nghttp2_data_provider dp = {.read_callback = h2_body};
    const uint8_t *data;
    ssize_t n;

    ck_assert_int_eq(nghttp2_session_callbacks_new(&cbs), 0);
    ck_assert_int_eq(nghttp2_session_client_new(&ng, cbs, NULL), 0);
    ck_assert_int_eq(nghttp2_submit_settings(ng, NGHTTP2_FLAG_NONE, NULL, 0), 0);
    ck_assert_int_gt(
        nghttp2_submit_request(ng, NULL, hdrs, sizeof(hdrs) / sizeof(hdrs[0]), &dp, NULL), 0);
    while ((n = nghttp2_session_mem_send(ng, &data)) > 0) {
        send_all(fd, data, (size_t)n);
    }
    ck_assert_int_eq((int)n, 0);
    nghttp2_session_del(ng);
    nghttp2_session_callbacks_del(cbs);
}

/* ---- the router in this process ---------------------------------------------------------- */

struct world {
    uv_loop_t loop;
    struct rl_conf *conf;
    struct rl_router *r;
    struct rl_envoy_config *envoy;
    struct rl_tls_ctx *tls_server, *tls_client;
};

static void
world_start(struct world *w, bool tls)
{
    static const char yaml[] = "domain: lt\ndescriptors:\n  - key: user\n    rate_limit:\n"
                               "      unit: hour\n      requests_per_unit: 100\n";
    struct rl_router_opts opts = {0};
    struct rl_envoy_config *cfg = NULL;
    struct rl_member m = {0};
    char err[512];

    memset(w, 0, sizeof(*w));
    ck_assert_int_eq(uv_loop_init(&w->loop), 0);
    ck_assert_msg(rl_conf_load(conf_path, &w->conf, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(rl_envoy_parse("lt.yaml", yaml, sizeof(yaml) - 1, NULL, &cfg, err, sizeof(err)) ==
                      0,
                  "%s", err);
    w->envoy = cfg;
    ck_assert_ptr_nonnull(w->envoy);
    if (tls) {
        ck_assert_msg(rl_tls_ctx_new(&w->tls_server, RL_TLS_SERVER, w->conf->tls_cert_file,
                                     w->conf->tls_key_file, w->conf->tls_ca_file, "h2", err,
                                     sizeof(err)) == 0,
                      "%s", err);
        ck_assert_msg(rl_tls_ctx_new(&w->tls_client, RL_TLS_CLIENT, w->conf->tls_cert_file,
                                     w->conf->tls_key_file, w->conf->tls_ca_file, NULL, err,
                                     sizeof(err)) == 0,
                      "%s", err);
    }
    opts.name = "lt";
    opts.host = "127.0.0.1";
    opts.port = (uint16_t)router_port;
    opts.max_pending = 64;
    opts.envoy = w->envoy;
    opts.tls_server = w->tls_server;
    opts.tls_client = w->tls_client;
    opts.on_freed = on_freed;
    opts.fronts = rl_fronts;
    opts.arg = &w->loop;
    ck_assert_int_eq(rl_router_create(&w->r, &w->loop, w->conf, &opts), 0);
    snprintf(m.name, sizeof(m.name), "n1");
    snprintf(m.addr, sizeof(m.addr), "127.0.0.1:%d", node_port);
    rl_router_set_members(w->r, &m, 1);
    pump(&w->loop, is_ready, w->r, "the router's connections to the node");
}

/* Closes the router with everything open: freed once, and its loop left with no handle. */
static void
world_close(struct world *w)
{
    ck_assert_int_gt(w->r->handles, 0);
    ck_assert_int_eq(freed, 0);
    rl_router_close(w->r);
    w->r = NULL;
    ck_assert_int_eq(uv_run(&w->loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(freed, 1);
    ck_assert_int_eq(left_at_free, 0);
    ck_assert_int_eq(uv_loop_close(&w->loop), 0);
    rl_envoy_config_drop(w->envoy);
    rl_tls_ctx_free(w->tls_server);
    rl_tls_ctx_free(w->tls_client);
    rl_conf_destroy(w->conf);
}

static bool
checks_in_flight(struct rl_router *r)
{
    return r->npending >= 3 && r->rls->wait != NULL; /* CHECK, CL.THROTTLE, the call's part */
}

static bool
fanout_in_flight(struct rl_router *r)
{
    return r->npending >= 4 && r->nfanouts == 1; /* and the fan-out's part (its timer: 1 s) */
}

START_TEST(test_close_with_everything_open)
{
    struct world w;
    int check_fd, fan_fd, resp[2], grpc[2];
    static const char cell[] = "*5\r\n$11\r\nCL.THROTTLE\r\n$2\r\nk1\r\n$2\r\n10\r\n$2\r\n10\r\n"
                               "$2\r\n60\r\n";

    setup_common(false);
    world_start(&w, false);
    /* From here the node answers nothing: every request stays in flight. */
    ck_assert_int_eq(rl_harness_pause(node.pid), 0);
    check_fd = binary_client();
    send_check(check_fd, 7, "u1");
    tcp_pair(resp);
    ck_assert_int_eq(rl_front_adopt(w.r, RL_FRONT_RESP, resp[1]), 0);
    send_all(resp[0], cell, sizeof(cell) - 1);
    tcp_pair(grpc);
    ck_assert_int_eq(rl_front_adopt(w.r, RL_FRONT_RLS, grpc[1]), 0);
    send_grpc_call(grpc[0]);
    pump(&w.loop, checks_in_flight, w.r, "the CHECKs in flight");
    fan_fd = binary_client();
    send_throttled(fan_fd, 8);
    pump(&w.loop, fanout_in_flight, w.r, "the THROTTLED in flight");
    ck_assert_ptr_nonnull(w.r->front);
    /* and the health timer a ZooKeeper session starts */
    rl_router_set_zookeeper(w.r, "127.0.0.1:9", RL_ZKM_CONNECTING);
    world_close(&w);
    close(check_fd);
    close(fan_fd);
    close(resp[0]);
    close(grpc[0]);
}
END_TEST

static bool
tls_open(struct rl_router *r)
{
    return r->listener.stats.connections >= 3 && r->front_conns >= 2;
}

START_TEST(test_close_tls_with_everything_open)
{
    struct world w;
    int c[3], resp[2], grpc[2];
    /* the first bytes of a ClientHello: a TLS handshake begun, never finished */
    static const uint8_t hello[] = {0x16, 0x03, 0x01, 0x00, 0xa0, 0x01, 0x00, 0x00, 0x9c};

    setup_common(true);
    world_start(&w, true);
    ck_assert_int_eq(rl_harness_pause(node.pid), 0);
    for (int i = 0; i < 3; i++) {
        c[i] = binary_client();
    }
    send_all(c[0], hello, sizeof(hello));
    tcp_pair(resp);
    ck_assert_int_eq(rl_front_adopt(w.r, RL_FRONT_RESP, resp[1]), 0);
    send_all(resp[0], hello, sizeof(hello));
    tcp_pair(grpc);
    ck_assert_int_eq(rl_front_adopt(w.r, RL_FRONT_RLS, grpc[1]), 0);
    pump(&w.loop, tls_open, w.r, "the TLS connections");
    world_close(&w);
    for (int i = 0; i < 3; i++) {
        close(c[i]);
    }
    close(resp[0]);
    close(grpc[0]);
}
END_TEST

static Suite *
lifetime_suite(void)
{
    Suite *s = suite_create("lifetime");
    TCase *tc = tcase_create("close");

    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_close_with_everything_open);
    tcase_add_test(tc, test_close_tls_with_everything_open);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return rl_test_run(lifetime_suite());
}
