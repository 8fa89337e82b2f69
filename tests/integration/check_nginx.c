/*
 * check_nginx: the OpenResty client (clients/lua/ratelimiter.lua) in a real nginx (Debian's
 * nginx with libnginx-mod-http-lua), configured from examples/nginx/nginx.conf.in, in front
 * of a trivial backend (a second server block of the same nginx answering 200 "backend"),
 * asking a real rl-router and rl-node (static membership; the node under --test-clock, its
 * clock fixed, so every reply is known). The router has a [client nginx] section: every
 * connection nginx opens must AUTH with the token (given to nginx as RL_TOKEN). Each test
 * starts its own cluster and nginx, and stops nginx with SIGQUIT; the harness SIGKILLs it
 * (PR_SET_PDEATHSIG, its process group) however the test ends.
 *
 * Expected headers are computed here from docs/INTEGRATION.md, independently of the Lua
 * code, from the reply the router gives a "twin" user sent the same requests directly (same
 * history, fixed clock: the same reply), and a few are also spelled out literally.
 * Asserted:
 *   - limit: 3 requests of one user (X-User) pass to the backend (200 "backend") with
 *     exactly RateLimit-Policy: "api";q=3;w=60 and RateLimit: "api";r=2;t=13 (then r=1, r=0),
 *     no Retry-After; the 4th is 429 with RateLimit "api";r=0;t=13 and Retry-After: 13;
 *     another user is unaffected; no X-User means the client address; the /v2/api/ location
 *     (policy name api-v2, legacy on) adds X-RateLimit-Limit/-Remaining/-Reset; nginx opened
 *     one connection to the router for all of it (the keepalive pool), authenticated;
 *   - QUEUED (leaky_bucket 2 per 1s burst 5): the 2nd and 3rd requests are held at least
 *     500 and 1000 ms, then pass with the reply's headers;
 *   - the router stopped (SIGSTOP): failure=closed answers 503 with Retry-After: 1 and no
 *     RateLimit headers, failure=open passes (200 "backend", no headers), each within the
 *     configured timeout (300 ms) plus a margin and not before it; the router killed: the
 *     same at once; restarted: requests are decided again, also on the pool's dead
 *     connection the router closed;
 *   - the node killed: the router's FAIL_CLOSED gives 503 with Retry-After: 4 (the session
 *     timeout), FAIL_OPEN passes without headers;
 *   - a hostile router (a fake on a loopback socket, in threads of the test): a QUEUED delay
 *     of 2^64-1 or 2^40 ms is answered 429 at once with Retry-After: 4294968, not held; a
 *     reply frame over 65536 bytes gets the failure policy at once.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "reqclient.h"
#include "harness.h"
#include "hostile.h"
#include "httpget.h"
#include "rltest.h"
#include "wire.h"

#define T_TIMEOUT 5000
/* The Lua client's timeouts towards the router: long enough that a loaded machine's
 * scheduling delays stay far under it, so a timed-out request is told from one answered at
 * once (under TIMEOUT_MS) and from one that waited twice (2 * TIMEOUT_MS or more). */
#define TIMEOUT_MS 1000
#define MARGIN_MS 2000 /* a generous bound on what a loaded machine may add to a QUEUED wait */
#define WINDOW_MS 60000        /* [service api] fixed_window 3 per 1m */
#define T0_MS 1700000087700ULL /* 47.7 s into a minute: 12.3 s (t=13) left in the window */
#define TOKEN "nginx-test-token-0123456789"

static const char template_path[] = RL_SOURCE_DIR "/examples/nginx/nginx.conf.in";
static const char lua_dir[] = RL_SOURCE_DIR "/clients/lua";

static int node_port, router_port, ng_port, be_port;
static struct rl_harness_server node, router;
static pid_t ng_pid;
static char ng_prefix[PATH_MAX], ng_log[PATH_MAX], ng_errlog[PATH_MAX];
static struct rl_client *twin_c;

static int64_t
mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int
free_port(void)
{
    int p = rl_harness_free_port();

    ck_assert_int_gt(p, 0);
    return p;
}

/* Replaces every "@KEY@" of in by its value into out. */
static void
render(const char *in, char *out, size_t cap, const char *const kv[][2], size_t nkv)
{
    size_t n = 0;

    while (*in != '\0') {
        bool done = false;

        for (size_t i = 0; i < nkv && !done; i++) {
            size_t kl = strlen(kv[i][0]), vl = strlen(kv[i][1]);

            if (strncmp(in, kv[i][0], kl) == 0) {
                ck_assert_uint_lt(n + vl, cap);
                memcpy(out + n, kv[i][1], vl);
                n += vl;
                in += kl;
                done = true;
            }
        }
        if (!done) {
            ck_assert_uint_lt(n + 1, cap);
            out[n++] = *in++;
        }
    }
    out[n] = '\0';
    ck_assert_msg(strchr(out, '@') == NULL, "a placeholder the test does not fill: %s",
                  strchr(out, '@'));
}

static void
nginx_start(void)
{
    static char tmpl[65536], conf_text[70000];
    char conf[PATH_MAX], tmp[PATH_MAX], p_listen[16], p_backend[16], p_router[16],
        p_timeout[16];
    int len = rl_harness_read_file(template_path, tmpl, sizeof(tmpl));

    ck_assert_msg(len > 0, "cannot read %s: %s", template_path, strerror(-len));
    ck_assert_int_eq(rl_harness_tmppath(ng_prefix, sizeof(ng_prefix), "nginx"), 0);
    ck_assert_int_eq(rl_harness_tmppath(tmp, sizeof(tmp), "nginx/tmp"), 0);
    ck_assert_int_eq(mkdir(ng_prefix, 0700), 0);
    ck_assert_int_eq(mkdir(tmp, 0700), 0);
    snprintf(p_listen, sizeof(p_listen), "%d", ng_port);
    snprintf(p_backend, sizeof(p_backend), "%d", be_port);
    snprintf(p_router, sizeof(p_router), "%d", router_port);
    snprintf(p_timeout, sizeof(p_timeout), "%d", TIMEOUT_MS);
    {
        const char *const kv[][2] = {
            {"@PREFIX@", ng_prefix},       {"@LUA_DIR@", lua_dir},
            {"@LISTEN_PORT@", p_listen},   {"@BACKEND_PORT@", p_backend},
            {"@ROUTER_HOST@", "127.0.0.1"}, {"@ROUTER_PORT@", p_router},
            {"@TIMEOUT_MS@", p_timeout},
        };

        render(tmpl, conf_text, sizeof(conf_text), kv, sizeof(kv) / sizeof(kv[0]));
    }
    ck_assert_int_eq(rl_harness_tmppath(conf, sizeof(conf), "nginx/nginx.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf, "%s", conf_text), 0);
    ck_assert_int_eq(rl_harness_tmppath(ng_log, sizeof(ng_log), "nginx/stderr.log"), 0);
    ck_assert_int_eq(rl_harness_tmppath(ng_errlog, sizeof(ng_errlog), "nginx/error.log"), 0);
    ck_assert_int_eq(setenv("RL_TOKEN", TOKEN, 1), 0);
    {
        /* -e: errors before the config's error_log is open go to the prefix, not
         * /var/log/nginx; daemon off and master_process off (in the file): one process, the
         * harness's child, killed with the test. */
        const char *const argv[] = {"nginx", "-p", ng_prefix, "-c", conf, "-e", ng_errlog, NULL};
        int rc = rl_harness_spawn(argv, ng_log, &ng_pid);

        ck_assert_msg(rc == 0, "cannot start nginx: %s", strerror(-rc));
    }
    if (rl_harness_wait_port("127.0.0.1", ng_port, RL_HARNESS_START_TIMEOUT_MS) != 0 ||
        rl_harness_wait_port("127.0.0.1", be_port, 1000) != 0) {
        rl_harness_print_log(ng_log, 30);
        rl_harness_print_log(ng_errlog, 30);
        ck_abort_msg("nginx does not listen on %d and %d", ng_port, be_port);
    }
}

static void
setup(void)
{
    char conf[PATH_MAX], hex[2 * RL_AUTH_HASH_LEN + 1];
    uint8_t h[RL_AUTH_HASH_LEN];
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;

    ck_assert_msg(access("/usr/lib/nginx/modules/ngx_http_lua_module.so", R_OK) == 0,
                  "nginx with the lua module is needed (libnginx-mod-http-lua: scripts/deps.sh)");
    node_port = free_port();
    router_port = free_port();
    ng_port = free_port();
    be_port = free_port();
    rl_auth_sha256(TOKEN, strlen(TOKEN), h);
    rl_auth_format_hash(h, hex);
    ck_assert_int_eq(rl_harness_tmppath(conf, sizeof(conf), "cluster.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf,
                                           "[cluster]\nname = nginx\nshards = 16\n"
                                           "[router]\nlisten = 127.0.0.1:%d\n"
                                           "[node a]\nlisten = 127.0.0.1:%d\n"
                                           "[client nginx]\ntoken_sha256 = %s\n"
                                           "services = *\nstats = yes\n"
                                           "[service api]\nlimit = fixed_window 3 per 1m\n"
                                           "[service upload]\n"
                                           "limit = leaky_bucket 2 per 1s burst 5\n"
                                           "[service payments]\nfailure = closed\n"
                                           "limit = fixed_window 100 per 1m\n"
                                           "[service search]\nfailure = open\n"
                                           "limit = fixed_window 100 per 1m\n",
                                           router_port, node_port, hex),
                     0);
    memset(&node, 0, sizeof(node));
    memset(&router, 0, sizeof(router));
    ck_assert_int_eq(rl_harness_node_start(&node, conf, "a", node_port, RL_HARNESS_TEST_CLOCK),
                     0);
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)node_port, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_clock(c, T0_MS, T_TIMEOUT), 0);
    rl_client_destroy(c);
    ck_assert_int_eq(rl_harness_router_start(&router, conf, router_port), 0);
    ck_assert_int_eq(rl_client_connect(&twin_c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT),
                     0);
    ck_assert_int_eq(rl_client_auth(twin_c, TOKEN, strlen(TOKEN), &rep, T_TIMEOUT), 0);
    nginx_start();
}

static void
teardown(void)
{
    if (twin_c != NULL) {
        rl_client_destroy(twin_c);
        twin_c = NULL;
    }
    if (ng_pid > 0) {
        int st = 0;
        int rc = rl_harness_stop(ng_pid, SIGQUIT, 5000, &st);

        if (rc != 0) {
            fprintf(stderr, "check_nginx: nginx did not stop on SIGQUIT: %s\n", strerror(-rc));
        }
        ng_pid = 0;
    }
    rl_harness_cleanup();
}

/* ---- HTTP ---- */

/* GETs path with X-User: user (NULL: none); *ms the time it took. */
static void
get(const char *path, const char *user, struct rl_http_resp *r, int64_t *ms)
{
    char extra[512] = "";
    int64_t t0 = mono_ms();
    int rc;

    if (user != NULL) {
        snprintf(extra, sizeof(extra), "X-User: %s\r\n", user);
    }
    rc = rl_http_request_headers(ng_port, "GET", path, extra, T_TIMEOUT, r);
    if (ms != NULL) {
        *ms = mono_ms() - t0;
    }
    if (rc != 0) {
        rl_harness_print_log(ng_errlog, 30);
    }
    ck_assert_msg(rc == 0, "GET %s: %s", path, strerror(-rc));
}

/* The header's value, or NULL if absent; asserts it appears at most once. */
static const char *
header(const struct rl_http_resp *r, const char *name, char *buf, size_t len)
{
    const char *v = rl_http_header(r, name, buf, len);
    size_t nl = strlen(name), count = 0;

    for (const char *line = r->headers; line != NULL && *line != '\0';) {
        if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            count++;
        }
        line = strstr(line, "\r\n");
        line = line != NULL ? line + 2 : NULL;
    }
    ck_assert_msg(count <= 1, "%s appears %zu times:\n%s", name, count, r->headers);
    return v;
}

static void
expect_header(const struct rl_http_resp *r, const char *name, const char *want)
{
    char buf[512];
    const char *v = header(r, name, buf, sizeof(buf));

    if (want == NULL) {
        ck_assert_msg(v == NULL, "%s: %s, expected none\n%s", name, v, r->headers);
    } else {
        ck_assert_msg(v != NULL, "no %s, expected %s\n%s", name, want, r->headers);
        ck_assert_msg(strcmp(v, want) == 0, "%s: %s, expected %s", name, v, want);
    }
}

static void
expect_backend(const struct rl_http_resp *r)
{
    ck_assert_msg(r->status == 200, "status %d, expected 200 from the backend\n%s", r->status,
                  r->raw);
    ck_assert_str_eq(r->body, "backend\n");
}

/* ---- docs/INTEGRATION.md, written again in C ---- */

static uint64_t
ceil_s(uint64_t ms)
{
    return (ms + 999) / 1000;
}

/*
 * Asserts the status and headers docs/INTEGRATION.md gives for rep (name: the policy name,
 * plain ASCII here; window_s 0: unknown), and returns the status (200: passed).
 */
static int
expect_mapping(const struct rl_http_resp *r, const struct rl_wire_check_reply *rep,
               const char *name, unsigned window_s, bool legacy)
{
    char policy[256], limit[256], retry[64], l[32], rem[32], reset[32];
    bool rl_headers = rep->code == RL_WIRE_ALLOWED || rep->code == RL_WIRE_QUEUED ||
                      rep->code == RL_WIRE_LIMITED;
    int status = rep->code == RL_WIRE_LIMITED       ? 429
                 : rep->code == RL_WIRE_FAIL_CLOSED ? 503
                                                    : 200;

    if (window_s > 0) {
        snprintf(policy, sizeof(policy), "\"%s\";q=%llu;w=%u", name,
                 (unsigned long long)rep->limit, window_s);
    } else {
        snprintf(policy, sizeof(policy), "\"%s\";q=%llu", name, (unsigned long long)rep->limit);
    }
    snprintf(limit, sizeof(limit), "\"%s\";r=%llu;t=%llu", name,
             (unsigned long long)rep->remaining, (unsigned long long)ceil_s(rep->reset_ms));
    snprintf(retry, sizeof(retry), "%llu", (unsigned long long)ceil_s(rep->retry_after_ms));
    snprintf(l, sizeof(l), "%llu", (unsigned long long)rep->limit);
    snprintf(rem, sizeof(rem), "%llu", (unsigned long long)rep->remaining);
    snprintf(reset, sizeof(reset), "%llu", (unsigned long long)ceil_s(rep->reset_ms));

    ck_assert_msg(r->status == status, "code %u: status %d, expected %d\n%s", rep->code,
                  r->status, status, r->raw);
    if (status == 200) {
        expect_backend(r);
    }
    expect_header(r, "RateLimit-Policy", rl_headers ? policy : NULL);
    expect_header(r, "RateLimit", rl_headers ? limit : NULL);
    expect_header(r, "Retry-After", status != 200 ? retry : NULL);
    expect_header(r, "X-RateLimit-Limit", rl_headers && legacy ? l : NULL);
    expect_header(r, "X-RateLimit-Remaining", rl_headers && legacy ? rem : NULL);
    expect_header(r, "X-RateLimit-Reset", rl_headers && legacy ? reset : NULL);
    return status;
}

/* The reply the router gives user (the twin) for service, cost 1, asked directly. */
static struct rl_wire_check_reply
twin(const char *service, const char *user)
{
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_check(twin_c, service, user, NULL, 1, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
    return rep.check;
}

static int64_t
router_stat(const char *key)
{
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_stats(twin_c, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_STATS);
    return rl_client_stat(&rep, key, -1);
}

/* ---- the tests ---- */

START_TEST(limit_holds_exactly)
{
    struct rl_http_resp r;
    struct rl_wire_check_reply t;
    int64_t conns0 = router_stat("connections_total");
    char want[64];

    ck_assert_int_ge(conns0, 1);
    for (int k = 0; k < 4; k++) {
        get("/api/x", "alice", &r, NULL);
        t = twin("api", "alice-twin");
        ck_assert_uint_eq(t.code, k < 3 ? RL_WIRE_ALLOWED : RL_WIRE_LIMITED);
        ck_assert_int_eq(expect_mapping(&r, &t, "api", 60, false), k < 3 ? 200 : 429);
        /* The same, literally (docs/INTEGRATION.md's first example, with q=3). */
        expect_header(&r, "RateLimit-Policy", "\"api\";q=3;w=60");
        snprintf(want, sizeof(want), "\"api\";r=%d;t=13", k < 3 ? 2 - k : 0);
        expect_header(&r, "RateLimit", want);
        expect_header(&r, "Retry-After", k < 3 ? NULL : "13");
        rl_http_free(&r);
    }
    /* Another user: untouched by alice's refusals. */
    get("/api/x", "bob", &r, NULL);
    expect_backend(&r);
    expect_header(&r, "RateLimit", "\"api\";r=2;t=13");
    rl_http_free(&r);
    /* No X-User: the client address is the user. */
    get("/api/x", NULL, &r, NULL);
    expect_backend(&r);
    expect_header(&r, "RateLimit", "\"api\";r=2;t=13");
    rl_http_free(&r);
    t = twin("api", "127.0.0.1");
    ck_assert_uint_eq(t.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(t.remaining, 1); /* nginx's request was counted for 127.0.0.1 */
    /* Another policy name and the legacy fields. */
    get("/v2/api/x", "dave", &r, NULL);
    t = twin("api", "dave-twin");
    ck_assert_int_eq(expect_mapping(&r, &t, "api-v2", 60, true), 200);
    expect_header(&r, "X-RateLimit-Limit", "3");
    expect_header(&r, "X-RateLimit-Remaining", "2");
    expect_header(&r, "X-RateLimit-Reset", "13");
    rl_http_free(&r);
    /* Seven requests through nginx, one connection to the router (the keepalive pool; nginx
     * is one process), authenticated once. */
    ck_assert_int_eq(router_stat("connections_total") - conns0, 1);
    ck_assert_int_eq(router_stat("auth_failures"), 0);
}
END_TEST

START_TEST(queued_is_held)
{
    struct rl_http_resp r;
    int64_t ms;
    const int64_t waits[] = {0, 500, 1000};

    for (int k = 0; k < 3; k++) {
        struct rl_wire_check_reply t;

        get("/upload/x", "uploader", &r, &ms);
        t = twin("upload", "uploader-twin");
        ck_assert_uint_eq(t.code, k == 0 ? RL_WIRE_ALLOWED : RL_WIRE_QUEUED);
        ck_assert_uint_eq(t.retry_after_ms, (uint64_t)waits[k]);
        ck_assert_int_eq(expect_mapping(&r, &t, "upload", 0, false), 200);
        ck_assert_msg(ms >= waits[k], "request %d answered after %lld ms, before its wait %lld",
                      k, (long long)ms, (long long)waits[k]);
        ck_assert_msg(ms < waits[k] + MARGIN_MS, "request %d took %lld ms for a wait of %lld", k,
                      (long long)ms, (long long)waits[k]);
        fprintf(stderr, "check_nginx: QUEUED wait %lld ms, answered in %lld ms\n",
                (long long)waits[k], (long long)ms);
        rl_http_free(&r);
    }
}
END_TEST

/* GET /payments/ and /search/: the client's own failure policy, within [lo, hi) ms. */
static void
expect_client_policy(const char *what, int64_t lo, int64_t hi)
{
    struct rl_http_resp r;
    int64_t ms;

    get("/payments/x", "payer", &r, &ms);
    ck_assert_msg(r.status == 503, "%s: payments %d, expected 503\n%s", what, r.status, r.raw);
    expect_header(&r, "Retry-After", "1");
    expect_header(&r, "RateLimit", NULL);
    expect_header(&r, "RateLimit-Policy", NULL);
    ck_assert_msg(ms >= lo && ms < hi, "%s: payments answered in %lld ms, not in [%lld, %lld)",
                  what, (long long)ms, (long long)lo, (long long)hi);
    fprintf(stderr, "check_nginx: %s: closed -> 503 in %lld ms\n", what, (long long)ms);
    rl_http_free(&r);
    get("/search/x", "searcher", &r, &ms);
    expect_backend(&r);
    expect_header(&r, "RateLimit", NULL);
    expect_header(&r, "RateLimit-Policy", NULL);
    expect_header(&r, "Retry-After", NULL);
    ck_assert_msg(ms >= lo && ms < hi, "%s: search answered in %lld ms, not in [%lld, %lld)", what,
                  (long long)ms, (long long)lo, (long long)hi);
    fprintf(stderr, "check_nginx: %s: open -> 200 in %lld ms\n", what, (long long)ms);
    rl_http_free(&r);
}

/* Both services decided again: 200 with RateLimit headers. */
static void
expect_decided(const char *what)
{
    const char *const paths[] = {"/payments/x", "/search/x"};

    for (int i = 0; i < 2; i++) {
        struct rl_http_resp r;
        char buf[256];

        get(paths[i], "back", &r, NULL);
        ck_assert_msg(r.status == 200, "%s: %s %d\n%s", what, paths[i], r.status, r.raw);
        ck_assert_msg(header(&r, "RateLimit", buf, sizeof(buf)) != NULL, "%s: %s no RateLimit",
                      what, paths[i]);
        rl_http_free(&r);
    }
}

START_TEST(router_unreachable)
{
    char log[65536];

    /* A pooled connection first, so the stop is met on a connection nginx keeps. */
    expect_decided("before");
    ck_assert_int_eq(rl_harness_pause(router.pid), 0);
    /* Stopped: the kernel still accepts and buffers; the read times out. */
    expect_client_policy("router stopped", TIMEOUT_MS - 10, 2 * TIMEOUT_MS - 100);
    expect_client_policy("router stopped, again", TIMEOUT_MS - 10, 2 * TIMEOUT_MS - 100);
    ck_assert_int_eq(rl_harness_server_stop(&router, SIGKILL, T_TIMEOUT), 0);
    /* Killed: connections refused, answered at once. */
    expect_client_policy("router killed", 0, TIMEOUT_MS);
    ck_assert_int_eq(rl_harness_server_restart(&router), 0);
    expect_decided("router restarted");
    expect_decided("router restarted, pooled"); /* over the connection kept from the last */
    /* Killed and restarted between two requests: the request is still decided (nginx drops
     * a pooled connection its peer closed while idle; were the close to race the request,
     * the client retries once on a new connection). */
    ck_assert_int_eq(rl_harness_server_stop(&router, SIGKILL, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_harness_server_restart(&router), 0);
    expect_decided("router restarted under a pooled connection");
    ck_assert_int_gt(rl_harness_read_file(ng_errlog, log, sizeof(log)), 0);
    ck_assert_msg(strstr(log, "ratelimiter: service payments: receive: timeout") != NULL,
                  "no timeout logged:\n%s", log);
}
END_TEST

START_TEST(node_down)
{
    struct rl_http_resp r;
    struct rl_wire_check_reply t;

    ck_assert_int_eq(rl_harness_server_stop(&node, SIGKILL, T_TIMEOUT), 0);
    get("/payments/x", "payer", &r, NULL);
    t = twin("payments", "payer-twin");
    ck_assert_uint_eq(t.code, RL_WIRE_FAIL_CLOSED);
    ck_assert_int_eq(expect_mapping(&r, &t, "payments", 0, false), 503);
    expect_header(&r, "Retry-After", "4"); /* session_timeout 4s */
    rl_http_free(&r);
    get("/search/x", "searcher", &r, NULL);
    t = twin("search", "searcher-twin");
    ck_assert_uint_eq(t.code, RL_WIRE_FAIL_OPEN);
    ck_assert_int_eq(expect_mapping(&r, &t, "search", 0, false), 200);
    rl_http_free(&r);
}
END_TEST

/* ---- a hostile router ---- */

/* A fake router (tests/hostile.h) in place of rl-router; nginx and the Lua client are real. */
static struct rl_hostile hostile;

static void
hostile_setup(void)
{
    ck_assert_msg(access("/usr/lib/nginx/modules/ngx_http_lua_module.so", R_OK) == 0,
                  "nginx with the lua module is needed (libnginx-mod-http-lua: scripts/deps.sh)");
    router_port = rl_hostile_start(&hostile);
    ng_port = free_port();
    be_port = free_port();
    nginx_start();
}

static void
hostile_teardown(void)
{
    teardown();
    rl_hostile_stop(&hostile);
}

/* A QUEUED delay of 2^64-1 or 2^40 ms is not held (nor an error): check() returns it as
 * LIMITED, access() answers 429 at once with Retry-After clamped to 4294968 s. */
START_TEST(hostile_queued_delay)
{
    static const uint64_t delays[] = {UINT64_MAX, (uint64_t)1 << 40};
    struct rl_http_resp r;
    int64_t ms;

    hostile.retry = delays[_i];
    hostile.len = 0;
    for (int k = 0; k < 2; k++) {
        get("/upload/x", "uploader", &r, &ms);
        ck_assert_msg(r.status == 429, "status %d, expected 429\n%s", r.status, r.raw);
        ck_assert_msg(ms < 5000, "answered in %lld ms", (long long)ms); /* not held 2^40 ms */
        expect_header(&r, "Retry-After", "4294968");
        expect_header(&r, "RateLimit-Policy", "\"upload\";q=4");
        expect_header(&r, "RateLimit", "\"upload\";r=0;t=1");
        rl_http_free(&r);
    }
}
END_TEST

/* A reply frame over 65536 bytes breaks the protocol: the client's failure policy answers
 * (payments: closed, 503 with Retry-After: 1; search: open), at once. */
START_TEST(hostile_frame_length)
{
    struct rl_http_resp r;
    int64_t ms;

    hostile.len = 65537;
    get("/payments/x", "payer", &r, &ms);
    ck_assert_msg(r.status == 503, "status %d, expected 503\n%s", r.status, r.raw);
    expect_header(&r, "Retry-After", "1");
    expect_header(&r, "RateLimit", NULL);
    ck_assert_msg(ms < TIMEOUT_MS, "answered in %lld ms", (long long)ms);
    rl_http_free(&r);
    get("/search/x", "searcher", &r, &ms);
    expect_backend(&r);
    expect_header(&r, "RateLimit", NULL);
    ck_assert_msg(ms < TIMEOUT_MS, "answered in %lld ms", (long long)ms);
    rl_http_free(&r);
}
END_TEST

static Suite *
nginx_suite(void)
{
    Suite *s = suite_create("nginx");
    TCase *tc = tcase_create("nginx");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, limit_holds_exactly);
    tcase_add_test(tc, queued_is_held);
    tcase_add_test(tc, router_unreachable);
    tcase_add_test(tc, node_down);
    suite_add_tcase(s, tc);
    tc = tcase_create("hostile");
    tcase_add_checked_fixture(tc, hostile_setup, hostile_teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, hostile_queued_delay, 0, 2);
    tcase_add_test(tc, hostile_frame_length);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(nginx_suite)
