/*
 * check_stray: what a stray client costs a real rl-node and rl-router (static membership):
 * an HTTP request or a TLS ClientHello sent to the binary port gets one ERROR MALFORMED
 * and a close, is counted in STATS (protocol_closes), and is logged at warn exactly once
 * per client address per minute, naming what the bytes looked like; a neighbour's
 * connection is not disturbed.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "reqclient.h"
#include "harness.h"
#include "rltest.h"
#include "wire.h"

static char conf_path[PATH_MAX];
static int node_port, router_port;

static void
write_conf(void)
{
    node_port = rl_harness_free_port();
    router_port = rl_harness_free_port();
    ck_assert_int_gt(node_port, 0);
    ck_assert_int_gt(router_port, 0);
    ck_assert_int_eq(rl_harness_tmppath(conf_path, sizeof(conf_path), "stray.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf_path,
                                           "[router]\nlisten = 127.0.0.1:%d\n"
                                           "[node a]\nlisten = 127.0.0.1:%d\n"
                                           "[service web]\nlimit = fixed_window 5 per 1h\n",
                                           router_port, node_port),
                     0);
}

/* Sends bytes on a fresh connection; expects one ERROR MALFORMED, then EOF. */
static void
send_stray(int port, const char *bytes, size_t n)
{
    struct rl_client *c;
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)port, 5000), 0);
    ck_assert_int_eq(rl_client_queue_raw(c, bytes, n), 0);
    ck_assert_int_eq(rl_client_flush(c, 5000), 0);
    ck_assert_int_eq(rl_client_recv(c, &rep, 5000), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_ERROR);
    ck_assert_uint_eq(rep.err, RL_WIRE_ERR_MALFORMED);
    ck_assert_int_eq(rl_client_recv(c, &rep, 5000), -ECONNRESET);
    rl_client_destroy(c);
}

/* Lines of the log holding both needles. */
static int
count_lines(const char *path, const char *a, const char *b)
{
    static char buf[1 << 20];
    int n = 0;

    ck_assert_int_ge(rl_harness_read_file(path, buf, sizeof(buf)), 0);
    for (char *line = strtok(buf, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        n += strstr(line, a) != NULL && strstr(line, b) != NULL;
    }
    return n;
}

static void
check_port(struct rl_harness_server *s, int port, const char *user)
{
    static const char http[] = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
    static const char tls[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
    struct rl_client *neighbour;
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_connect(&neighbour, "127.0.0.1", (uint16_t)port, 5000), 0);
    ck_assert_int_eq(rl_client_check(neighbour, "web", user, NULL, 1, &rep, 5000), 0);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    send_stray(port, http, sizeof(http) - 1);
    send_stray(port, http, sizeof(http) - 1);
    send_stray(port, tls, sizeof(tls) - 1);
    /* The neighbour's connection still answers, and its counter went on. */
    ck_assert_int_eq(rl_client_check(neighbour, "web", user, NULL, 1, &rep, 5000), 0);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.check.remaining, 3);
    ck_assert_int_eq(rl_client_stats(neighbour, &rep, 5000), 0);
    ck_assert_int_eq(rl_client_stat(&rep, "protocol_closes", -1), 3);
    rl_client_destroy(neighbour);
    /* One warn line for the address, whatever came after it within the minute. */
    usleep(200000);
    ck_assert_int_eq(count_lines(s->log_path, "warn", "protocol error"), 1);
    ck_assert_int_eq(count_lines(s->log_path, "warn", "look like an HTTP request"), 1);
    ck_assert_int_eq(count_lines(s->log_path, "warn", "127.0.0.1"), 1);
}

START_TEST(test_stray_bytes_on_node_and_router)
{
    struct rl_harness_server node = {0}, router = {0};

    write_conf();
    ck_assert_int_eq(rl_harness_node_start(&node, conf_path, "a", node_port, 0), 0);
    ck_assert_int_eq(rl_harness_router_start(&router, conf_path, router_port), 0);
    check_port(&node, node_port, "alice");
    check_port(&router, router_port, "bob");
    ck_assert_int_eq(rl_harness_server_stop(&router, SIGTERM, 10000), 0);
    ck_assert_int_eq(rl_harness_server_stop(&node, SIGTERM, 10000), 0);
    rl_harness_cleanup();
}
END_TEST

static Suite *
stray_suite(void)
{
    Suite *s = suite_create("stray");
    TCase *tc = tcase_create("stray");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_stray_bytes_on_node_and_router);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(stray_suite)
