/*
 * check_clib: librlclient's clients against a real rl-node and rl-router (the harness starts
 * them), through the public headers and the shared library only:
 *   - pipelining: 1000 CHECKs in one rlc_check_many, exact remaining (in order against a
 *     node, as a permutation through the router's two node connections), then LIMITED;
 *   - a SIGSTOPped node: rlc_check returns -ETIMEDOUT in about its timeout, the connection
 *     is dropped and the next call reconnects once the node runs again;
 *   - the router restarts: the next call reconnects by itself; while it is down, the call
 *     fails with -ECONNREFUSED and nothing is retried;
 *   - AUTH: a router with [client] sections takes the token (also after a reconnect) and
 *     refuses a wrong one with -EACCES;
 *   - the libuv client: 3000 CHECKs in flight on one connection, every callback exactly
 *     once with the right counts; the bounded queue (-ENOBUFS past max_pending); timeouts
 *     against a stopped router; -ECONNRESET for requests in flight when it dies, then a
 *     reconnect; rlc_uv_close cancelling what is pending;
 *   - a hostile server (a fake on a loopback socket in a thread): a QUEUED delay of 2^64-1
 *     or 2^40 ms comes back at once and rlc_http_answer refuses to hold it (429,
 *     Retry-After: 4294968, wait_ms 0); a reply frame over 65536 bytes is -EPROTO at once;
 *     replies to ids never asked, sent without end, do not hold rlc_check or rlc_check_many
 *     past their timeout; a reply sent again late is never taken for the next batch's.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <ratelimiter/ratelimiter.h>
#include <ratelimiter/ratelimiter_uv.h>

#include "harness.h"
#include "hostile.h"
#include "rltest.h"

#define TOKEN "client-token-0123456789"
/* sha256 of TOKEN, set by clib_suite */
static char token_sha[65];

static char conf_path[PATH_MAX];
static int node_port, router_port;
static struct rl_harness_server node, router;

/* A call's timeout in the timeout tests: long enough that a loaded machine's scheduling
 * delays stay far under it, so "not before it, and under twice it" holds on any machine. */
#define CALL_TIMEOUT_MS 1000

static int64_t
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
write_conf(int with_client)
{
    ck_assert_int_eq(rl_harness_write_file(
                         conf_path,
                         "[cluster]\nshards = 64\n"
                         "[router]\nlisten = 127.0.0.1:%d\ndeadline = 200ms\n"
                         "[node a]\nlisten = 127.0.0.1:%d\n"
                         "[service pipe]\nlimit = fixed_window 1000 per 1h\n"
                         "[service one]\nlimit = fixed_window 1 per 1h\n"
                         "[service conc]\nlimit = concurrency 2 lease 1h\n"
                         "%s%s%s",
                         router_port, node_port,
                         with_client ? "[client app]\ntoken_sha256 = " : "",
                         with_client ? token_sha : "", with_client ? "\nservices = *\n" : ""),
                     0);
}

static void
start_cluster(int with_client)
{
    node_port = rl_harness_free_port();
    router_port = rl_harness_free_port();
    ck_assert_int_eq(rl_harness_tmppath(conf_path, sizeof(conf_path), "clib.conf"), 0);
    write_conf(with_client);
    memset(&node, 0, sizeof(node));
    memset(&router, 0, sizeof(router));
    ck_assert_int_eq(rl_harness_node_start(&node, conf_path, "a", node_port, 0), 0);
    ck_assert_int_eq(rl_harness_router_start(&router, conf_path, router_port), 0);
}

static void
setup(void)
{
    start_cluster(0);
}

static void
teardown(void)
{
    rl_harness_cleanup();
}

/* ---- blocking client ---------------------------------------------------------------------- */

static struct rlc_check_req reqs[3000];
static struct rlc_reply reps[3000];

START_TEST(test_pipeline_node_exact)
{
    rlc_client *c;
    struct rlc_reply r;

    ck_assert_int_eq(rlc_connect(&c, "127.0.0.1", (uint16_t)node_port, 2000), 0);
    for (int i = 0; i < 1000; i++) {
        reqs[i] = (struct rlc_check_req){.service = "pipe", .user = "n", .cost = 1};
    }
    ck_assert_int_eq(rlc_check_many(c, reqs, 1000, reps, 5000), 0);
    /* One connection to the node that decides: in order, exactly. */
    for (int i = 0; i < 1000; i++) {
        ck_assert_uint_eq(reps[i].code, RLC_ALLOWED);
        ck_assert_uint_eq(reps[i].limit, 1000);
        ck_assert_uint_eq(reps[i].remaining, (uint64_t)(999 - i));
    }
    ck_assert_int_eq(rlc_check(c, "pipe", "n", NULL, 1, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_LIMITED);
    ck_assert_uint_gt(r.retry_after_ms, 0);
    /* A bad argument sends nothing and keeps the connection. */
    ck_assert_int_eq(rlc_check(c, "", "n", NULL, 1, &r, 2000), -EINVAL);
    ck_assert_int_eq(rlc_check(c, "pipe", "n", NULL, 1000001, &r, 2000), -EINVAL);
    ck_assert_int_eq(rlc_connected(c), 1);
    ck_assert_uint_eq(rlc_connects(c), 1);
    rlc_close(c);
}
END_TEST

START_TEST(test_pipeline_router)
{
    static uint8_t seen[1000];
    char addr[64], name[64];
    rlc_client *c;

    snprintf(addr, sizeof(addr), "127.0.0.1:%d", router_port);
    ck_assert_int_eq(rlc_connect_addr(&c, addr, 2000), 0);
    ck_assert_int_eq(rlc_ping(c, name, sizeof(name), 2000), 0);
    ck_assert_int_gt(strlen(name), 0);
    for (int i = 0; i < 1001; i++) {
        reqs[i] = (struct rlc_check_req){.service = "pipe", .user = "r", .cost = 1};
    }
    reqs[1001] = (struct rlc_check_req){.service = "nope", .user = "r", .cost = 1};
    ck_assert_int_eq(rlc_check_many(c, reqs, 1002, reps, 10000), 0);
    /* The router spreads requests over two node connections: every count once. */
    int limited = 0;
    for (int i = 0; i < 1001; i++) {
        if (reps[i].code == RLC_LIMITED) {
            limited++;
            continue;
        }
        ck_assert_uint_eq(reps[i].code, RLC_ALLOWED);
        ck_assert_uint_lt(reps[i].remaining, 1000);
        ck_assert_uint_eq(seen[reps[i].remaining], 0);
        seen[reps[i].remaining] = 1;
    }
    ck_assert_int_eq(limited, 1);
    ck_assert_uint_eq(reps[1001].code, RLC_NO_RULE);
    rlc_close(c);
}
END_TEST

/* An inline limit through the router (docs/PROTOCOL.md, "Inline limits"), and the parser of
 * the config's limit syntax. */
START_TEST(test_inline_limit)
{
    rlc_client *c;
    struct rlc_reply r;
    struct rlc_limit lim, other;

    ck_assert_int_eq(rlc_limit_parse("gcra 3 per 1h burst 3", &lim), 0);
    ck_assert_str_eq(lim.algorithm, "gcra");
    ck_assert_uint_eq(lim.limit, 3);
    ck_assert_uint_eq(lim.window_ms, 3600000);
    ck_assert_uint_eq(lim.burst, 3);
    ck_assert_int_eq(rlc_limit_parse("fixed_window 2 per 90s", &other), 0);
    ck_assert_uint_eq(other.window_ms, 90000);
    ck_assert_uint_eq(other.burst, 0);
    ck_assert_int_eq(rlc_limit_parse("fixed_window 2 per 90s burst 1", &other), -EINVAL);
    ck_assert_int_eq(rlc_limit_parse("gcra 0 per 1s", &other), -EINVAL);
    ck_assert_int_eq(rlc_limit_parse("gcra 1 per 1x", &other), -EINVAL);
    ck_assert_int_eq(rlc_limit_parse("nope 1 per 1s", &other), -EINVAL);
    ck_assert_int_eq(rlc_limit_parse("gcra 1 every 1s", &other), -EINVAL);
    ck_assert_int_eq(rlc_limit_parse("fixed_window 2 per 90s", &other), 0);

    ck_assert_int_eq(rlc_connect(&c, "127.0.0.1", (uint16_t)router_port, 2000), 0);
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(rlc_check_limit(c, "free", "u", NULL, 1, &lim, &r, 2000), 0);
        ck_assert_uint_eq(r.code, RLC_ALLOWED);
        ck_assert_uint_eq(r.remaining, 2 - (uint64_t)k);
    }
    ck_assert_int_eq(rlc_check_limit(c, "free", "u", NULL, 1, &lim, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_LIMITED);
    /* another limit: its own count */
    ck_assert_int_eq(rlc_check_limit(c, "free", "u", NULL, 1, &other, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_ALLOWED);
    ck_assert_uint_eq(r.remaining, 1);
    /* without one: NO_RULE, as before */
    ck_assert_int_eq(rlc_check_limit(c, "free", "u", NULL, 1, NULL, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_NO_RULE);
    /* a configured service refuses it; the connection stays */
    ck_assert_int_eq(rlc_check_limit(c, "one", "u", NULL, 1, &lim, &r, 2000), -EREMOTEIO);
    ck_assert_uint_eq(r.code, RLC_CODE_ERROR);
    ck_assert_uint_eq(r.error, RLC_ERR_BAD_FIELD);
    other.burst = 4; /* fixed_window takes none */
    ck_assert_int_eq(rlc_check_limit(c, "free", "u", NULL, 1, &other, &r, 2000), -EINVAL);
    ck_assert_int_eq(rlc_check(c, "one", "u", NULL, 1, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_ALLOWED);
    rlc_close(c);
}
END_TEST

/* ADJUST through the router: a charge past the limit, a refund, an inline-limited key. */
START_TEST(test_adjust)
{
    rlc_client *c;
    struct rlc_reply r;
    struct rlc_limit lim;

    ck_assert_int_eq(rlc_connect(&c, "127.0.0.1", (uint16_t)router_port, 2000), 0);
    ck_assert_int_eq(rlc_check(c, "one", "adj", NULL, 1, &r, 2000), 0);
    ck_assert_uint_eq(r.remaining, 0);
    ck_assert_int_eq(rlc_adjust(c, "one", "adj", NULL, -1, NULL, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_ALLOWED);
    ck_assert_uint_eq(r.remaining, 1); /* refunded */
    ck_assert_int_eq(rlc_adjust(c, "one", "adj", NULL, 3, NULL, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_ALLOWED); /* charged past the limit */
    ck_assert_uint_eq(r.remaining, 0);
    ck_assert_int_eq(rlc_adjust(c, "one", "adj", NULL, -1, NULL, &r, 2000), 0);
    ck_assert_uint_eq(r.remaining, 0); /* still 2 in debt */
    ck_assert_int_eq(rlc_check(c, "one", "adj", NULL, 0, &r, 2000), 0);
    ck_assert_uint_eq(r.remaining, 0);
    ck_assert_int_eq(rlc_adjust(c, "nosuch", "adj", NULL, 5, NULL, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_NO_RULE);
    ck_assert_int_eq(rlc_adjust(c, "one", "adj", NULL, 1000001, NULL, &r, 2000), -EINVAL);
    ck_assert_int_eq(rlc_adjust(c, "one", "adj", NULL, -1000001, NULL, &r, 2000), -EINVAL);
    ck_assert_int_eq(rlc_adjust(c, "", "adj", NULL, 1, NULL, &r, 2000), -EINVAL);
    /* an inline-limited key is settled with its limit */
    ck_assert_int_eq(rlc_limit_parse("fixed_window 10 per 1h", &lim), 0);
    ck_assert_int_eq(rlc_check_limit(c, "free", "adj", NULL, 2, &lim, &r, 2000), 0);
    ck_assert_uint_eq(r.remaining, 8);
    ck_assert_int_eq(rlc_adjust(c, "free", "adj", NULL, 5, &lim, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_ALLOWED);
    ck_assert_uint_eq(r.remaining, 3);
    ck_assert_int_eq(rlc_adjust(c, "one", "adj", NULL, 1, &lim, &r, 2000), -EREMOTEIO);
    ck_assert_uint_eq(r.error, RLC_ERR_BAD_FIELD); /* a configured service takes none */
    rlc_close(c);
}
END_TEST

/* RELEASE through the router gives back a concurrency slot. */
START_TEST(test_release)
{
    rlc_client *c;
    struct rlc_reply r;

    ck_assert_int_eq(rlc_connect(&c, "127.0.0.1", (uint16_t)router_port, 2000), 0);
    ck_assert_int_eq(rlc_check(c, "conc", "rel", NULL, 1, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_ALLOWED);
    ck_assert_int_eq(rlc_check(c, "conc", "rel", NULL, 1, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_ALLOWED);
    ck_assert_uint_eq(r.remaining, 0);
    ck_assert_int_eq(rlc_check(c, "conc", "rel", NULL, 1, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_LIMITED);
    ck_assert_int_eq(rlc_release(c, "conc", "rel", NULL, 1, NULL, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_ALLOWED);
    ck_assert_uint_eq(r.remaining, 1);
    ck_assert_int_eq(rlc_check(c, "conc", "rel", NULL, 1, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_ALLOWED);
    ck_assert_int_eq(rlc_release(c, "conc", "rel", NULL, 2, NULL, &r, 2000), 0);
    ck_assert_uint_eq(r.remaining, 2);
    ck_assert_int_eq(rlc_release(c, "conc", "rel", NULL, 0, NULL, &r, 2000), -EINVAL);
    ck_assert_int_eq(rlc_release(c, "conc", "rel", NULL, 1000001, NULL, &r, 2000), -EINVAL);
    rlc_close(c);
}
END_TEST

START_TEST(test_timeout_stopped_node)
{
    struct rlc_reply r;
    rlc_client *c;
    int64_t t0, took;

    ck_assert_int_eq(rlc_connect(&c, "127.0.0.1", (uint16_t)node_port, 2000), 0);
    ck_assert_int_eq(rlc_check(c, "one", "t", NULL, 0, &r, 2000), 0);
    ck_assert_int_eq(rl_harness_pause(node.pid), 0);
    /* Not before its timeout (load only delays it) and within one timeout's slack: a
     * reconnect that waited a timeout of its own would take two. */
    t0 = now_ms();
    ck_assert_int_eq(rlc_check(c, "one", "t", NULL, 1, &r, CALL_TIMEOUT_MS), -ETIMEDOUT);
    took = now_ms() - t0;
    ck_assert_int_ge(took, CALL_TIMEOUT_MS - 10);
    ck_assert_int_lt(took, 2 * CALL_TIMEOUT_MS - 100);
    ck_assert_int_eq(rlc_connected(c), 0);
    /* The pipelined call times out the same way (the reconnect is within its timeout). */
    for (int i = 0; i < 10; i++) {
        reqs[i] = (struct rlc_check_req){.service = "pipe", .user = "t", .cost = 1};
    }
    t0 = now_ms();
    ck_assert_int_eq(rlc_check_many(c, reqs, 10, reps, CALL_TIMEOUT_MS), -ETIMEDOUT);
    took = now_ms() - t0;
    ck_assert_int_ge(took, CALL_TIMEOUT_MS - 10);
    ck_assert_int_lt(took, 2 * CALL_TIMEOUT_MS - 100);
    ck_assert_int_eq(kill(node.pid, SIGCONT), 0);
    /* The next call reconnects; the CHECK that timed out was not resent, so it is either
     * counted once (the stopped node read it later) or not at all: a peek tells. */
    ck_assert_int_eq(rlc_check(c, "one", "t2", NULL, 1, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_ALLOWED);
    ck_assert_uint_ge(rlc_connects(c), 2);
    rlc_close(c);
}
END_TEST

START_TEST(test_reconnect_router_restart)
{
    struct rlc_reply r;
    rlc_client *c;

    ck_assert_int_eq(rlc_connect(&c, "127.0.0.1", (uint16_t)router_port, 2000), 0);
    ck_assert_int_eq(rlc_check(c, "pipe", "rr", NULL, 1, &r, 2000), 0);
    ck_assert_uint_eq(r.remaining, 999);
    ck_assert_int_eq(rl_harness_server_restart(&router), 0);
    /* The router closed the idle connection: the next call reconnects before sending. */
    ck_assert_int_eq(rlc_check(c, "pipe", "rr", NULL, 1, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_ALLOWED);
    ck_assert_uint_eq(r.remaining, 998); /* counted once: nothing was sent twice */
    ck_assert_uint_eq(rlc_connects(c), 2);
    /* Down: an error, nothing retried behind the caller's back. */
    ck_assert_int_eq(rl_harness_server_stop(&router, SIGTERM, 10000), 0);
    ck_assert_int_eq(rlc_check(c, "pipe", "rr", NULL, 1, &r, 1000), -ECONNREFUSED);
    ck_assert_int_eq(rlc_ping(c, NULL, 0, 1000), -ECONNREFUSED);
    ck_assert_int_eq(rl_harness_server_restart(&router), 0);
    ck_assert_int_eq(rlc_check(c, "pipe", "rr", NULL, 1, &r, 2000), 0);
    ck_assert_uint_eq(r.remaining, 997);
    rlc_close(c);
}
END_TEST

START_TEST(test_auth)
{
    char tok[PATH_MAX], why[256];
    struct rlc_reply r;
    rlc_client *c;

    /* The cluster of setup() has no [client]: restart the router with one. */
    write_conf(1);
    ck_assert_int_eq(rl_harness_server_restart(&router), 0);
    ck_assert_int_eq(rlc_connect(&c, "127.0.0.1", (uint16_t)router_port, 2000), 0);
    ck_assert_int_eq(rlc_check(c, "one", "a", NULL, 1, &r, 2000), -EREMOTEIO);
    ck_assert_uint_eq(r.code, RLC_CODE_ERROR);
    ck_assert_uint_eq(r.error, RLC_ERR_UNAUTHORIZED);
    ck_assert_int_eq(rlc_auth(c, "wrong-token-wrong-token", 23, 2000), -EACCES);
    ck_assert_int_eq(rl_harness_tmppath(tok, sizeof(tok), "token"), 0);
    ck_assert_int_eq(rl_harness_write_file(tok, TOKEN "\n"), 0);
    ck_assert_int_eq(chmod(tok, 0644), 0);
    ck_assert_int_eq(rlc_auth_file(c, tok, 2000, why, sizeof(why)), -EACCES);
    ck_assert_ptr_nonnull(strstr(why, "chmod 600"));
    ck_assert_int_eq(chmod(tok, 0600), 0);
    ck_assert_int_eq(rlc_auth_file(c, tok, 2000, why, sizeof(why)), 0);
    ck_assert_int_eq(rlc_check(c, "one", "a", NULL, 1, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_ALLOWED);
    /* The token is sent again on the reconnect after a router restart. */
    ck_assert_int_eq(rl_harness_server_restart(&router), 0);
    ck_assert_int_eq(rlc_check(c, "one", "a", NULL, 1, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_LIMITED);
    /* The first connection (closed by the router after UNAUTHORIZED), the wrong token's, the
     * right one's, and the one after the restart. */
    ck_assert_uint_eq(rlc_connects(c), 4);
    rlc_close(c);
}
END_TEST

/* ---- libuv client ------------------------------------------------------------------------- */

struct tally {
    int calls[3000];
    int status[3000];
    struct rlc_reply rep[3000];
    int done;
    int closed;
};

static struct tally T;

static void
on_reply(void *arg, int status, const struct rlc_reply *rep)
{
    int i = (int)(intptr_t)arg;

    T.calls[i]++;
    T.status[i] = status;
    if (rep != NULL) {
        T.rep[i] = *rep;
    } else {
        memset(&T.rep[i], 0, sizeof(T.rep[i]));
    }
    T.done++;
}

static void
on_closed(void *arg)
{
    *(int *)arg = 1;
}

static void
wake(uv_timer_t *t)
{
    (void)t;
}

/* Runs the loop until *counter reaches want or timeout_ms passes. */
static void
run_until(uv_loop_t *loop, int *counter, int want, int timeout_ms)
{
    uv_timer_t tick;
    int64_t end = now_ms() + timeout_ms;

    uv_timer_init(loop, &tick);
    uv_timer_start(&tick, wake, 10, 10);
    while (*counter < want && now_ms() < end) {
        uv_run(loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&tick, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
}

static rlc_uv *
uv_client(uv_loop_t *loop, uint32_t max_pending)
{
    struct rlc_uv_options o;
    rlc_uv *u;

    memset(&o, 0, sizeof(o));
    o.host = "127.0.0.1";
    o.port = (uint16_t)router_port;
    o.max_pending = max_pending;
    o.backoff_min_ms = 20;
    o.backoff_max_ms = 200;
    ck_assert_int_eq(rlc_uv_create(&u, loop, &o), 0);
    memset(&T, 0, sizeof(T));
    return u;
}

static void
uv_finish(uv_loop_t *loop, rlc_uv *u)
{
    int closed = 0;

    rlc_uv_close(u, on_closed, &closed);
    run_until(loop, &closed, 1, 5000);
    ck_assert_int_eq(closed, 1);
    ck_assert_int_eq(uv_loop_close(loop), 0);
}

START_TEST(test_uv_many_in_flight)
{
    static uint8_t seen[1000];
    struct rlc_uv_stats st;
    uv_loop_t loop;
    rlc_uv *u;
    int limited = 0;

    uv_loop_init(&loop);
    u = uv_client(&loop, 0);
    /* Submitted before the connection is up: they wait, then go in one batch. */
    for (int i = 0; i < 3000; i++) {
        ck_assert_int_eq(rlc_uv_check(u, "pipe", "uv", NULL, 1, 10000, on_reply,
                                      (void *)(intptr_t)i), 0);
    }
    ck_assert_int_eq(T.done, 0); /* never called from inside rlc_uv_check */
    run_until(&loop, &T.done, 3000, 15000);
    ck_assert_int_eq(T.done, 3000);
    for (int i = 0; i < 3000; i++) {
        ck_assert_int_eq(T.calls[i], 1);
        ck_assert_int_eq(T.status[i], 0);
        if (T.rep[i].code == RLC_LIMITED) {
            limited++;
            continue;
        }
        ck_assert_uint_eq(T.rep[i].code, RLC_ALLOWED);
        ck_assert_uint_eq(seen[T.rep[i].remaining], 0);
        seen[T.rep[i].remaining] = 1;
    }
    ck_assert_int_eq(limited, 2000);
    rlc_uv_get_stats(u, &st);
    ck_assert_uint_eq(st.connects, 1);
    ck_assert_uint_eq(st.sent, 3000);
    ck_assert_uint_eq(st.replies, 3000);
    ck_assert_uint_gt(st.max_in_flight, 100);
    ck_assert_uint_eq(st.in_flight, 0);
    ck_assert_int_eq(st.connected, 1);
    /* And submitted on a live connection, from a callback's point of view: one more. */
    T.done = 0;
    ck_assert_int_eq(rlc_uv_check(u, "one", "uv2", NULL, 1, 5000, on_reply, (void *)0), 0);
    run_until(&loop, &T.done, 1, 5000);
    ck_assert_int_eq(T.status[0], 0);
    ck_assert_uint_eq(T.rep[0].code, RLC_ALLOWED);
    ck_assert_int_eq(rlc_uv_check(u, "", "x", NULL, 1, 5000, on_reply, NULL), -EINVAL);
    ck_assert_int_eq(rlc_uv_check(u, "one", "x", NULL, 1, 5000, NULL, NULL), -EINVAL);
    uv_finish(&loop, u);
}
END_TEST

/* ADJUST and RELEASE on the libuv client, in order on one connection: the replies carry
 * their own op (a CHECK's shape), each counted where a CHECK would see it. */
START_TEST(test_uv_adjust_release)
{
    uv_loop_t loop;
    rlc_uv *u;

    uv_loop_init(&loop);
    u = uv_client(&loop, 0);
    ck_assert_int_eq(rlc_uv_check(u, "conc", "uvrel", NULL, 2, 5000, on_reply, (void *)0), 0);
    ck_assert_int_eq(rlc_uv_release(u, "conc", "uvrel", NULL, 1, 5000, on_reply, (void *)1), 0);
    ck_assert_int_eq(rlc_uv_check(u, "pipe", "uvadj", NULL, 10, 5000, on_reply, (void *)2), 0);
    ck_assert_int_eq(rlc_uv_adjust(u, "pipe", "uvadj", NULL, 90, 5000, on_reply, (void *)3), 0);
    ck_assert_int_eq(rlc_uv_adjust(u, "pipe", "uvadj", NULL, -50, 5000, on_reply, (void *)4),
                     0);
    run_until(&loop, &T.done, 5, 10000);
    ck_assert_int_eq(T.done, 5);
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(T.status[i], 0);
        ck_assert_uint_eq(T.rep[i].code, RLC_ALLOWED);
    }
    ck_assert_uint_eq(T.rep[0].remaining, 0);   /* 2 of 2 slots held */
    ck_assert_uint_eq(T.rep[1].remaining, 1);   /* one given back */
    ck_assert_uint_eq(T.rep[2].remaining, 990);
    ck_assert_uint_eq(T.rep[3].remaining, 900); /* charged 90 more */
    ck_assert_uint_eq(T.rep[4].remaining, 950); /* 50 refunded */
    ck_assert_int_eq(rlc_uv_adjust(u, "pipe", "x", NULL, 1000001, 5000, on_reply, NULL), -EINVAL);
    ck_assert_int_eq(rlc_uv_release(u, "conc", "x", NULL, 0, 5000, on_reply, NULL), -EINVAL);
    uv_finish(&loop, u);
}
END_TEST

START_TEST(test_uv_queue_bound)
{
    uv_loop_t loop;
    rlc_uv *u;

    uv_loop_init(&loop);
    u = uv_client(&loop, 100);
    for (int i = 0; i < 100; i++) {
        ck_assert_int_eq(rlc_uv_check(u, "pipe", "qb", NULL, 1, 5000, on_reply,
                                      (void *)(intptr_t)i), 0);
    }
    ck_assert_int_eq(rlc_uv_check(u, "pipe", "qb", NULL, 1, 5000, on_reply, (void *)100),
                     -ENOBUFS);
    run_until(&loop, &T.done, 100, 5000);
    ck_assert_int_eq(T.done, 100);
    for (int i = 0; i < 100; i++) {
        ck_assert_int_eq(T.calls[i], 1);
        ck_assert_int_eq(T.status[i], 0);
    }
    ck_assert_int_eq(T.calls[100], 0);
    /* Room again once answered. */
    ck_assert_int_eq(rlc_uv_check(u, "pipe", "qb", NULL, 1, 5000, on_reply, (void *)100), 0);
    run_until(&loop, &T.done, 101, 5000);
    ck_assert_int_eq(T.calls[100], 1);
    ck_assert_uint_eq(T.rep[100].remaining, 899);
    uv_finish(&loop, u);
}
END_TEST

START_TEST(test_uv_timeout_lost_reconnect)
{
    struct rlc_uv_stats st;
    uv_loop_t loop;
    rlc_uv *u;
    int64_t t0, took;

    uv_loop_init(&loop);
    u = uv_client(&loop, 0);
    ck_assert_int_eq(rlc_uv_check(u, "pipe", "tl", NULL, 1, 5000, on_reply, (void *)0), 0);
    run_until(&loop, &T.done, 1, 5000);
    ck_assert_int_eq(T.status[0], 0);
    /* A stopped router: every request times out, once, not before its timeout and all
     * together (in turn, 50 would take 50 timeouts), within one timeout's slack. */
    ck_assert_int_eq(rl_harness_pause(router.pid), 0);
    memset(&T, 0, sizeof(T));
    t0 = now_ms();
    for (int i = 0; i < 50; i++) {
        ck_assert_int_eq(rlc_uv_check(u, "pipe", "tl", NULL, 1, CALL_TIMEOUT_MS, on_reply,
                                      (void *)(intptr_t)i), 0);
    }
    run_until(&loop, &T.done, 50, 5 * CALL_TIMEOUT_MS);
    took = now_ms() - t0;
    ck_assert_int_eq(T.done, 50);
    ck_assert_int_ge(took, CALL_TIMEOUT_MS - 10);
    ck_assert_int_lt(took, 2 * CALL_TIMEOUT_MS - 100);
    for (int i = 0; i < 50; i++) {
        ck_assert_int_eq(T.calls[i], 1);
        ck_assert_int_eq(T.status[i], -ETIMEDOUT);
    }
    /* In flight when the router dies: -ECONNRESET, once each. */
    memset(&T, 0, sizeof(T));
    for (int i = 0; i < 20; i++) {
        ck_assert_int_eq(rlc_uv_check(u, "pipe", "tl", NULL, 1, 10000, on_reply,
                                      (void *)(intptr_t)i), 0);
    }
    run_until(&loop, &T.done, 1, 100); /* written, not answered */
    ck_assert_int_eq(T.done, 0);
    ck_assert_int_eq(rl_harness_kill9(router.pid), 0);
    run_until(&loop, &T.done, 20, 5000);
    ck_assert_int_eq(T.done, 20);
    for (int i = 0; i < 20; i++) {
        ck_assert_int_eq(T.calls[i], 1);
        ck_assert_int_eq(T.status[i], -ECONNRESET);
    }
    /* Submitted while it is down: waits, and goes once the backoff finds it back. */
    memset(&T, 0, sizeof(T));
    ck_assert_int_eq(rlc_uv_check(u, "one", "tl2", NULL, 1, 10000, on_reply, (void *)0), 0);
    run_until(&loop, &T.done, 1, 300);
    ck_assert_int_eq(T.done, 0);
    router.pid = 0;
    ck_assert_int_eq(rl_harness_server_restart(&router), 0);
    run_until(&loop, &T.done, 1, 5000);
    ck_assert_int_eq(T.calls[0], 1);
    ck_assert_int_eq(T.status[0], 0);
    ck_assert_uint_eq(T.rep[0].code, RLC_ALLOWED);
    rlc_uv_get_stats(u, &st);
    ck_assert_uint_eq(st.connects, 2);
    ck_assert_uint_eq(st.disconnects, 1);
    ck_assert_uint_eq(st.timeouts, 50);
    ck_assert_uint_eq(st.lost, 20);
    uv_finish(&loop, u);
}
END_TEST

static rlc_uv *cancel_u;

static void
on_cancel(void *arg, int status, const struct rlc_reply *rep)
{
    on_reply(arg, status, rep);
    /* Submitting from a callback of a closing client is refused, not lost. */
    ck_assert_int_eq(rlc_uv_check(cancel_u, "one", "c", NULL, 1, 100, on_reply, (void *)2999),
                     -ESHUTDOWN);
}

START_TEST(test_uv_close_cancels)
{
    uv_loop_t loop;
    int closed = 0;

    uv_loop_init(&loop);
    cancel_u = uv_client(&loop, 0);
    for (int i = 0; i < 10; i++) {
        ck_assert_int_eq(rlc_uv_check(cancel_u, "pipe", "cc", NULL, 1, 5000, on_cancel,
                                      (void *)(intptr_t)i), 0);
    }
    rlc_uv_close(cancel_u, on_closed, &closed);
    ck_assert_int_eq(T.done, 10);
    for (int i = 0; i < 10; i++) {
        ck_assert_int_eq(T.calls[i], 1);
        ck_assert_int_eq(T.status[i], -ECANCELED);
    }
    run_until(&loop, &closed, 1, 5000);
    ck_assert_int_eq(closed, 1);
    ck_assert_int_eq(T.calls[2999], 0);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* ---- a hostile server ---------------------------------------------------------------------- */

/* A fake router (tests/hostile.h); the client under test is the real library. */
static struct rl_hostile hostile;

/* A QUEUED delay of 2^64-1 or 2^40 ms: rlc_check returns the server's numbers at once (the
 * library never sleeps), and rlc_http_answer refuses to pass such a wait on: 429 with
 * Retry-After clamped to 4294968 s, wait_ms 0. */
START_TEST(test_hostile_queued_delay)
{
    static const uint64_t delays[] = {UINT64_MAX, (uint64_t)1 << 40};
    rlc_client *c;
    struct rlc_reply r;
    struct rlc_http_answer a;
    char buf[512];
    int port;
    int64_t t0;

    hostile.retry = delays[_i];
    hostile.len = 0;
    hostile.mode = RL_HOSTILE_ANSWER;
    port = rl_hostile_start(&hostile);
    ck_assert_int_eq(rlc_connect(&c, "127.0.0.1", (uint16_t)port, 1000), 0);
    /* at once: far under the call's timeout (the delay is 2^40 ms or more) */
    t0 = now_ms();
    ck_assert_int_eq(rlc_check(c, "svc", "u", NULL, 1, &r, 5000), 0);
    ck_assert_int_lt(now_ms() - t0, 4000);
    ck_assert_uint_eq(r.code, RLC_QUEUED);
    ck_assert_uint_eq(r.retry_after_ms, delays[_i]);
    ck_assert_int_eq(rlc_http_answer(&r, "svc", 0, 0, &a), 0);
    ck_assert_int_eq(a.status, 429);
    ck_assert_uint_eq(a.wait_ms, 0);
    ck_assert_int_gt(rlc_http_format(&a, buf, sizeof(buf)), 0);
    ck_assert_str_eq(buf, "RateLimit-Policy: \"svc\";q=4\r\n"
                          "RateLimit: \"svc\";r=0;t=1\r\n"
                          "Retry-After: 4294968\r\n");
    rlc_close(c);
    rl_hostile_stop(&hostile);
}
END_TEST

/* A reply frame longer than the protocol's 65536 bytes: -EPROTO at once, the connection
 * dropped, nothing of the payload awaited. */
START_TEST(test_hostile_frame_length)
{
    rlc_client *c;
    struct rlc_reply r;
    int port;
    int64_t t0;

    hostile.len = 65537;
    hostile.mode = RL_HOSTILE_ANSWER;
    port = rl_hostile_start(&hostile);
    ck_assert_int_eq(rlc_connect(&c, "127.0.0.1", (uint16_t)port, 1000), 0);
    t0 = now_ms();
    ck_assert_int_eq(rlc_check(c, "svc", "u", NULL, 1, &r, 5000), -EPROTO);
    ck_assert_int_lt(now_ms() - t0, 4000);
    ck_assert_int_eq(rlc_connected(c), 0);
    rlc_close(c);
    rl_hostile_stop(&hostile);
}
END_TEST

/* A server that answers nothing but replies to ids nobody asked for, without end:
 * the calls skip them and still return -ETIMEDOUT at their timeout (they used to wait for
 * as long as the replies kept coming). */
START_TEST(test_hostile_stray_replies)
{
    struct rlc_check_req q[2] = {{.service = "svc", .user = "u", .cost = 1},
                                 {.service = "svc", .user = "v", .cost = 1}};
    struct rlc_reply r, rs[2];
    rlc_client *c;
    int port;
    int64_t t0;

    hostile.len = 0;
    hostile.mode = RL_HOSTILE_STRAY;
    port = rl_hostile_start(&hostile);
    ck_assert_int_eq(rlc_connect(&c, "127.0.0.1", (uint16_t)port, 1000), 0);
    t0 = now_ms();
    ck_assert_int_eq(rlc_check(c, "svc", "u", NULL, 1, &r, 300), -ETIMEDOUT);
    ck_assert_int_lt(now_ms() - t0, 3000);
    t0 = now_ms();
    ck_assert_int_eq(rlc_check_many(c, q, 2, rs, 300), -ETIMEDOUT);
    ck_assert_int_lt(now_ms() - t0, 3000);
    rlc_close(c);
    rl_hostile_stop(&hostile);
}
END_TEST

/* Each answer sent again 50 ms later as ALLOWED: the repeat, still unread when the next
 * rlc_check_many starts, is skipped as a reply to the last batch, not taken for the new
 * batch's (which reused the same ids and turned the server's QUEUED into ALLOWED). */
START_TEST(test_hostile_repeated_reply)
{
    struct rlc_check_req q = {.service = "svc", .user = "u", .cost = 1};
    struct rlc_reply r;
    rlc_client *c;
    int port;

    hostile.len = 0;
    hostile.retry = 7;
    hostile.mode = RL_HOSTILE_REPEAT;
    port = rl_hostile_start(&hostile);
    ck_assert_int_eq(rlc_connect(&c, "127.0.0.1", (uint16_t)port, 1000), 0);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(rlc_check_many(c, &q, 1, &r, 2000), 0);
        ck_assert_uint_eq(r.code, RLC_QUEUED);
        ck_assert_uint_eq(r.retry_after_ms, 7);
        usleep(150 * 1000); /* the repeat is in the socket now */
    }
    ck_assert_int_eq(rlc_check(c, "svc", "u", NULL, 1, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_QUEUED);
    ck_assert_int_eq(rlc_check_many(c, &q, 1, &r, 2000), 0);
    ck_assert_uint_eq(r.code, RLC_QUEUED);
    ck_assert_int_eq(rlc_connected(c), 1);
    rlc_close(c);
    rl_hostile_stop(&hostile);
}
END_TEST

/* The loop client: a reply of another op to a request's id is -EPROTO for that request, and
 * the connection is dropped (it was kept, and the server's next replies trusted). */
START_TEST(test_hostile_uv_wrong_op)
{
    struct rlc_uv_stats st;
    uv_loop_t loop;
    rlc_uv *u;

    hostile.len = 0;
    hostile.mode = RL_HOSTILE_WRONG_OP;
    router_port = rl_hostile_start(&hostile);
    uv_loop_init(&loop);
    u = uv_client(&loop, 0);
    ck_assert_int_eq(rlc_uv_check(u, "svc", "u", NULL, 1, 2000, on_reply, (void *)0), 0);
    run_until(&loop, &T.done, 1, 5000);
    ck_assert_int_eq(T.calls[0], 1);
    ck_assert_int_eq(T.status[0], -EPROTO);
    for (int i = 0; i < 100; i++) {
        rlc_uv_get_stats(u, &st);
        if (st.disconnects > 0) {
            break;
        }
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(10 * 1000);
    }
    ck_assert_uint_eq(st.disconnects, 1);
    uv_finish(&loop, u);
    rl_hostile_stop(&hostile);
}
END_TEST

/* TLS (docs/CLIENTS.md, "TLS"): the blocking and the loop clients through a TLS router, and a
 * TLS node that wants a certificate the client does not show. */
START_TEST(test_tls)
{
    const char *dir = rl_harness_tmpdir();
    struct rl_harness_server tnode = {0}, trouter = {0};
    char conf[PATH_MAX], ca[PATH_MAX], addr[64], why[256];
    struct rlc_tls_options t = {0};
    struct rlc_uv_options o;
    struct rlc_reply r;
    int nport = rl_harness_free_port(), rport = rl_harness_free_port(), rc;
    rlc_client *c = NULL;
    uv_loop_t loop;
    rlc_uv *u;

    ck_assert_int_eq(rl_harness_tls_ca(dir, "ca"), 0);
    ck_assert_int_eq(rl_harness_tls_cert(dir, "member", "ca"), 0);
    ck_assert_int_eq(rl_harness_tmppath(conf, sizeof(conf), "tls.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf,
                                           "[cluster]\ntls_cert_file = %s/member.pem\n"
                                           "tls_key_file = %s/member.key\n"
                                           "tls_ca_file = %s/ca.pem\n"
                                           "[router]\nlisten = 127.0.0.1:%d\n"
                                           "[node a]\nlisten = 127.0.0.1:%d\n"
                                           "[service one]\nlimit = fixed_window 1 per 1h\n",
                                           dir, dir, dir, rport, nport),
                     0);
    ck_assert_int_eq(rl_harness_node_start(&tnode, conf, "a", nport, 0), 0);
    ck_assert_int_eq(rl_harness_router_start(&trouter, conf, rport), 0);
    snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
    t.ca_file = ca;
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", rport);
    ck_assert_msg(rlc_connect_tls(&c, addr, &t, 5000, why, sizeof(why)) == 0, "%s", why);
    /* The router's own TLS connection to the node may still be handshaking (a loaded
     * machine): until a CHECK of another user is the node's, it is the failure policy's. */
    for (int i = 0; i < 200; i++) {
        ck_assert_int_eq(rlc_check(c, "one", "warm-up", NULL, 0, &r, 5000), 0);
        if (r.code != RLC_FAIL_OPEN) {
            break;
        }
        usleep(50 * 1000);
    }
    ck_assert_uint_eq(r.code, RLC_ALLOWED);
    ck_assert_int_eq(rlc_check(c, "one", "tls", NULL, 1, &r, 5000), 0);
    ck_assert_uint_eq(r.code, RLC_ALLOWED);
    ck_assert_int_eq(rlc_check(c, "one", "tls", NULL, 1, &r, 5000), 0);
    ck_assert_uint_eq(r.code, RLC_LIMITED);
    rlc_close(c);
    /* The node wants a client certificate: refused, and told why. */
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", nport);
    rc = rlc_connect_tls(&c, addr, &t, 5000, why, sizeof(why));
    if (rc == 0) { /* TLS 1.3: the refusal comes with the first read */
        ck_assert_int_ne(rlc_check(c, "one", "x", NULL, 1, &r, 5000), 0);
        ck_assert_ptr_nonnull(rlc_tls_error(c));
        snprintf(why, sizeof(why), "%s", rlc_tls_error(c));
        rlc_close(c);
    }
    ck_assert_msg(strstr(why, "certificate required") != NULL, "%s", why);
    /* No CA file: refused before connecting. */
    t.ca_file = NULL;
    ck_assert_int_eq(rlc_connect_tls(&c, addr, &t, 5000, why, sizeof(why)), -EINVAL);
    /* The loop client. */
    uv_loop_init(&loop);
    memset(&o, 0, sizeof(o));
    o.host = "127.0.0.1";
    o.port = (uint16_t)rport;
    o.tls_ca_file = ca;
    ck_assert_int_eq(rlc_uv_create(&u, &loop, &o), 0);
    memset(&T, 0, sizeof(T));
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(rlc_uv_check(u, "one", "uvtls", NULL, 1, 5000, on_reply,
                                      (void *)(intptr_t)i), 0);
    }
    run_until(&loop, &T.done, 3, 10000);
    ck_assert_int_eq(T.done, 3);
    ck_assert_int_eq(T.status[0] | T.status[1] | T.status[2], 0);
    ck_assert_uint_eq(T.rep[0].code + T.rep[1].code + T.rep[2].code,
                      RLC_ALLOWED + 2 * RLC_LIMITED);
    uv_finish(&loop, u);
    rl_harness_server_stop(&trouter, SIGTERM, 5000);
    rl_harness_server_stop(&tnode, SIGTERM, 5000);
}
END_TEST

static Suite *
clib_suite(void)
{
    Suite *s = suite_create("clib");
    TCase *tc = tcase_create("clib");

    /* sha256 of TOKEN, for the [client] section of test_auth. */
    snprintf(token_sha, sizeof(token_sha), "%s",
             "6806d29d035842dd1f2e2ffc3d02ca29f8c61070916e899765f53ed9c9de0b9a");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_pipeline_node_exact);
    tcase_add_test(tc, test_pipeline_router);
    tcase_add_test(tc, test_inline_limit);
    tcase_add_test(tc, test_adjust);
    tcase_add_test(tc, test_release);
    tcase_add_test(tc, test_timeout_stopped_node);
    tcase_add_test(tc, test_reconnect_router_restart);
    tcase_add_test(tc, test_auth);
    tcase_add_test(tc, test_uv_many_in_flight);
    tcase_add_test(tc, test_uv_adjust_release);
    tcase_add_test(tc, test_uv_queue_bound);
    tcase_add_test(tc, test_uv_timeout_lost_reconnect);
    tcase_add_test(tc, test_uv_close_cancels);
    tcase_add_test(tc, test_tls);
    suite_add_tcase(s, tc);
    tc = tcase_create("hostile");
    tcase_set_timeout(tc, 10);
    tcase_add_loop_test(tc, test_hostile_queued_delay, 0, 2);
    tcase_add_test(tc, test_hostile_frame_length);
    tcase_add_test(tc, test_hostile_stray_replies);
    tcase_add_test(tc, test_hostile_repeated_reply);
    tcase_add_test(tc, test_hostile_uv_wrong_op);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(clib_suite)
