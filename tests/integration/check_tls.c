/*
 * check_tls: TLS on every listener and on the router's connections to nodes
 * (docs/OPERATIONS.md, "TLS"), with real rl-node and rl-router processes on loopback and a
 * throwaway CA made at test time with the openssl command (no key is ever committed):
 * mutual TLS between router and node, a node refusing a peer another CA signed, a plaintext
 * client refused with a plain ERROR saying TLS is required, a TLS client told a plain port
 * does not speak TLS, a reload on SIGHUP with a new certificate while a connection stays up,
 * and a key file others may read refused at start.
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
#include <sys/stat.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "reqclient.h"
#include "rltest.h"
#include "tls.h"

#define T_TIMEOUT 5000

static char dir[1024];
static char node_conf[4096], router_conf[4096];
static struct rl_harness_server node, router;
static int node_port, router_port;

/* dir/NAME into buf. */
static const char *
path(char *buf, size_t len, const char *name)
{
    ck_assert_int_eq(rl_harness_tmppath(buf, len, "%s", name), 0);
    return buf;
}

static void
make_ca(const char *name)
{
    ck_assert_int_eq(rl_harness_tls_ca(dir, name), 0);
}

static void
make_cert(const char *name, const char *ca)
{
    ck_assert_int_eq(rl_harness_tls_cert(dir, name, ca), 0);
}

/* A config for the node and the router, each with its own certificate file. */
static void
write_config(const char *conf, const char *cert, const char *ca)
{
    ck_assert_int_eq(rl_harness_write_file(conf,
                                           "[cluster]\n"
                                           "tls_cert_file = %s/%s.pem\n"
                                           "tls_key_file = %s/%s.key\n"
                                           "tls_ca_file = %s/%s.pem\n"
                                           "[router]\n"
                                           "listen = 127.0.0.1:%d\n"
                                           "deadline = 200ms\n"
                                           "[clients]\n"
                                           "frame_timeout = 1s\n"
                                           "[node n1]\n"
                                           "listen = 127.0.0.1:%d\n"
                                           "[service shop]\n"
                                           "limit = fixed_window 100 per 1h\n",
                                           dir, cert, dir, cert, dir, ca, router_port, node_port),
                     0);
}

static void
tls_setup(void)
{
    char buf[4096];
    FILE *f;

    snprintf(dir, sizeof(dir), "%s", rl_harness_tmpdir());
    make_ca("ca");
    make_ca("other");
    make_cert("node", "ca");
    make_cert("router", "ca");
    make_cert("client", "ca");
    make_cert("stranger", "other");
    make_cert("router2", "other");
    /* The cluster trusts both CAs (a CA rotation in progress): the reload test moves the
     * router to a certificate the second one signed. */
    path(buf, sizeof(buf), "bundle.pem");
    f = fopen(buf, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 2; i++) {
        char in[4096], pem[8192];
        int n;

        snprintf(in, sizeof(in), "%s/%s.pem", dir, i == 0 ? "ca" : "other");
        n = rl_harness_read_file(in, pem, sizeof(pem));
        ck_assert_int_gt(n, 0);
        ck_assert_int_eq((int)fwrite(pem, 1, (size_t)n, f), n);
    }
    ck_assert_int_eq(fclose(f), 0);
    node_port = rl_harness_free_port();
    router_port = rl_harness_free_port();
    path(node_conf, sizeof(node_conf), "node.conf");
    path(router_conf, sizeof(router_conf), "router.conf");
    write_config(node_conf, "node", "ca");
    write_config(router_conf, "router", "ca");
    ck_assert_int_eq(rl_harness_node_start(&node, node_conf, "n1", node_port, 0), 0);
    ck_assert_int_eq(rl_harness_router_start(&router, router_conf, router_port), 0);
}

static void
tls_teardown(void)
{
    rl_harness_cleanup();
}

/* A client context: the server checked against CA (dir/CA.pem), showing dir/CERT.pem if
 * cert is not NULL. */
static struct rl_tls_ctx *
client_ctx(const char *ca, const char *cert)
{
    return rl_test_tls_client(dir, ca, cert);
}

/* Connects to port over TLS with ctx: the handshake's result, and why it failed. */
static int
dial_tls(int port, struct rl_tls_ctx *ctx, struct rl_client **c, char *why, size_t whylen)
{
    int rc;

    ck_assert_int_eq(rl_client_connect(c, "127.0.0.1", (uint16_t)port, T_TIMEOUT), 0);
    rc = rl_client_start_tls(*c, ctx, T_TIMEOUT, why, whylen);
    return rc;
}

static uint32_t
check_code(struct rl_client *c, const char *user)
{
    struct rl_wire_reply rep;
    int rc = rl_client_check(c, "shop", user, NULL, 1, &rep, T_TIMEOUT);

    ck_assert_msg(rc == 0, "check: %d %s", rc,
                  rl_client_tls_why(c) != NULL ? rl_client_tls_why(c) : "");
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
    return rep.check.code;
}

static int64_t
mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool
log_has(const struct rl_harness_server *s, const char *what)
{
    static char buf[1 << 16];

    return rl_harness_read_file(s->log_path, buf, sizeof(buf)) > 0 && strstr(buf, what) != NULL;
}

/* Clients reach the router over TLS (the CA only), the router reaches the node over mutual
 * TLS, and the node answers: the decision counts there. */
START_TEST(test_mutual_router_node)
{
    struct rl_tls_ctx *ca = client_ctx("ca", NULL), *member = client_ctx("ca", "client");
    struct rl_client *c = NULL, *n = NULL;
    struct rl_wire_reply rep;
    char why[256];

    ck_assert_msg(dial_tls(router_port, ca, &c, why, sizeof(why)) == 0, "%s", why);
    ck_assert_uint_eq(check_code(c, "alice"), RL_WIRE_ALLOWED);
    ck_assert_uint_eq(check_code(c, "alice"), RL_WIRE_ALLOWED);
    /* The node itself, with a certificate of the cluster's CA: it counted both. */
    ck_assert_msg(dial_tls(node_port, member, &n, why, sizeof(why)) == 0, "%s", why);
    ck_assert_int_eq(rl_client_check(n, "shop", "alice", NULL, 1, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
    ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(rep.check.remaining, 97);
    rl_client_destroy(c);
    rl_client_destroy(n);
    rl_tls_ctx_free(ca);
    rl_tls_ctx_free(member);
}
END_TEST

/* A node takes no peer without a certificate its CA signed: not a client showing none or
 * another CA's, and not a router whose certificate another CA signed (its CHECKs fail). */
START_TEST(test_node_refuses_foreign_peer)
{
    struct rl_tls_ctx *none = client_ctx("ca", NULL), *stranger = client_ctx("ca", "stranger");
    struct rl_harness_server r2 = {0};
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;
    char why[256], conf[4096];
    int rc, port2 = rl_harness_free_port();

    rc = dial_tls(node_port, none, &c, why, sizeof(why));
    if (rc == 0) { /* TLS 1.3: the refusal comes as an alert at the first read */
        rc = rl_client_check(c, "shop", "bob", NULL, 1, &rep, T_TIMEOUT);
        ck_assert_int_ne(rc, 0);
        snprintf(why, sizeof(why), "%s", rl_client_tls_why(c) ? rl_client_tls_why(c) : "");
    }
    ck_assert_msg(strstr(why, "certificate required") != NULL, "%s", why);
    rl_client_destroy(c);
    rc = dial_tls(node_port, stranger, &c, why, sizeof(why));
    if (rc == 0) {
        rc = rl_client_check(c, "shop", "bob", NULL, 1, &rep, T_TIMEOUT);
        ck_assert_int_ne(rc, 0);
        snprintf(why, sizeof(why), "%s", rl_client_tls_why(c) ? rl_client_tls_why(c) : "");
    }
    ck_assert_msg(strstr(why, "unknown ca") != NULL, "%s", why);
    rl_client_destroy(c);
    /* A router with another CA's certificate (and trusting the node's CA). */
    path(conf, sizeof(conf), "router2.conf");
    ck_assert_int_eq(rl_harness_write_file(conf,
                                           "[cluster]\n"
                                           "tls_cert_file = %s/router2.pem\n"
                                           "tls_key_file = %s/router2.key\n"
                                           "tls_ca_file = %s/bundle.pem\n"
                                           "[router]\n"
                                           "deadline = 100ms\n"
                                           "[node n1]\n"
                                           "listen = 127.0.0.1:%d\n"
                                           "[service shop]\n"
                                           "limit = fixed_window 100 per 1h\n",
                                           dir, dir, dir, node_port),
                     0);
    ck_assert_int_eq(rl_harness_router_start(&r2, conf, port2), 0);
    {
        struct rl_tls_ctx *any = client_ctx("bundle", NULL);

        ck_assert_msg(dial_tls(port2, any, &c, why, sizeof(why)) == 0, "%s", why);
        ck_assert_uint_eq(check_code(c, "carol"), RL_WIRE_FAIL_OPEN);
        rl_client_destroy(c);
        rl_tls_ctx_free(any);
    }
    for (int i = 0; i < 50 && !log_has(&node, "the peer's certificate was refused"); i++) {
        usleep(100 * 1000);
    }
    ck_assert(log_has(&node, "the peer's certificate was refused"));
    rl_harness_server_stop(&r2, SIGTERM, T_TIMEOUT);
    rl_tls_ctx_free(none);
    rl_tls_ctx_free(stranger);
}
END_TEST

/* A plaintext client gets a plain ERROR saying TLS is required, from the node and from the
 * router; a TLS client to a plain port is told the server does not speak TLS. */
START_TEST(test_plaintext_refused)
{
    int ports[2] = {node_port, router_port};
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;

    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)ports[i], T_TIMEOUT), 0);
        ck_assert_int_eq(rl_client_check(c, "shop", "dave", NULL, 1, &rep, T_TIMEOUT), 0);
        ck_assert_uint_eq(rep.op, RL_WIRE_OP_ERROR);
        ck_assert_uint_eq(rep.err, RL_WIRE_ERR_MALFORMED);
        ck_assert_msg(rep.message.len > 0 &&
                          memmem(rep.message.ptr, rep.message.len, "TLS is required", 15) != NULL,
                      "%.*s", (int)rep.message.len, rep.message.ptr);
        rl_client_destroy(c);
    }
    {
        /* rl-cli prints it too */
        char out[4096], target[64];
        const char *argv[] = {"rl-cli", "--target", target, "check", "shop", "dave", NULL};

        snprintf(target, sizeof(target), "127.0.0.1:%d", router_port);
        ck_assert_int_eq(rl_harness_run(argv, out, sizeof(out), T_TIMEOUT), 1);
        ck_assert_msg(strstr(out, "TLS is required") != NULL, "%s", out);
    }
    {
        /* A plain node, and a TLS client. */
        struct rl_harness_server plain = {0};
        struct rl_tls_ctx *ca = client_ctx("ca", NULL);
        char conf[4096], why[256];
        int port = rl_harness_free_port();

        path(conf, sizeof(conf), "plain.conf");
        ck_assert_int_eq(rl_harness_write_file(conf, "[node p]\nlisten = 127.0.0.1:%d\n"
                                                     "[service shop]\n"
                                                     "limit = fixed_window 100 per 1h\n",
                                               port),
                         0);
        ck_assert_int_eq(rl_harness_node_start(&plain, conf, "p", port, 0), 0);
        ck_assert_int_ne(dial_tls(port, ca, &c, why, sizeof(why)), 0);
        ck_assert_msg(strstr(why, "does not speak TLS") != NULL, "%s", why);
        rl_client_destroy(c);
        rl_harness_server_stop(&plain, SIGTERM, T_TIMEOUT);
        rl_tls_ctx_free(ca);
    }
}
END_TEST

/* SIGHUP: the router takes a new certificate (another CA's) for new connections, while one
 * made before keeps working. */
START_TEST(test_reload)
{
    struct rl_tls_ctx *ca = client_ctx("ca", NULL), *other = client_ctx("other", NULL);
    struct rl_client *old = NULL, *c = NULL;
    struct rl_harness_server r3 = {0};
    char why[256], src[4096], dst[4096], buf[8192], conf[4096];
    int n, port3 = rl_harness_free_port();

    /* A router of its own (this test's process starts it, so it can signal it), trusting
     * both CAs. */
    path(conf, sizeof(conf), "router3.conf");
    write_config(conf, "router", "bundle");
    ck_assert_int_eq(rl_harness_router_start(&r3, conf, port3), 0);
    ck_assert_msg(dial_tls(port3, ca, &old, why, sizeof(why)) == 0, "%s", why);
    ck_assert_uint_eq(check_code(old, "erin"), RL_WIRE_ALLOWED);
    /* Replace the router's certificate and key with router2's (signed by "other"). */
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof(src), "%s/router2.%s", dir, i == 0 ? "pem" : "key");
        snprintf(dst, sizeof(dst), "%s/router.%s", dir, i == 0 ? "pem" : "key");
        n = rl_harness_read_file(src, buf, sizeof(buf));
        ck_assert_int_gt(n, 0);
        ck_assert_int_eq(rl_harness_write_file(dst, "%s", buf), 0);
        ck_assert_int_eq(chmod(dst, 0600), 0);
    }
    ck_assert_int_eq(kill(r3.pid, SIGHUP), 0);
    for (int i = 0; i < 50 && !log_has(&r3, "TLS certificate, key and CA reloaded"); i++) {
        usleep(100 * 1000);
    }
    ck_assert(log_has(&r3, "TLS certificate, key and CA reloaded"));
    /* New connections: the new certificate, which only "other" vouches for. */
    ck_assert_int_ne(dial_tls(port3, ca, &c, why, sizeof(why)), 0);
    ck_assert_msg(strstr(why, "certificate") != NULL, "%s", why);
    rl_client_destroy(c);
    ck_assert_msg(dial_tls(port3, other, &c, why, sizeof(why)) == 0, "%s", why);
    ck_assert_uint_eq(check_code(c, "erin"), RL_WIRE_ALLOWED);
    rl_client_destroy(c);
    /* The connection made before the reload goes on. */
    ck_assert_uint_eq(check_code(old, "erin"), RL_WIRE_ALLOWED);
    rl_client_destroy(old);
    /* A key that does not load is refused by the reload: the one in force stays. */
    snprintf(dst, sizeof(dst), "%s/router.key", dir);
    ck_assert_int_eq(chmod(dst, 0644), 0);
    ck_assert_int_eq(kill(r3.pid, SIGHUP), 0);
    for (int i = 0; i < 50 && !log_has(&r3, "TLS files not reloaded"); i++) {
        usleep(100 * 1000);
    }
    ck_assert(log_has(&r3, "TLS files not reloaded"));
    ck_assert_int_eq(chmod(dst, 0600), 0);
    ck_assert_msg(dial_tls(port3, other, &c, why, sizeof(why)) == 0, "%s", why);
    ck_assert_uint_eq(check_code(c, "erin"), RL_WIRE_ALLOWED);
    rl_client_destroy(c);
    rl_harness_server_stop(&r3, SIGTERM, T_TIMEOUT);
    rl_tls_ctx_free(ca);
    rl_tls_ctx_free(other);
}
END_TEST

/* Runs argv (output to log) to its end, which must be exit status 2 (a refused start);
 * its output in out. */
static void
refused_start(const char *const argv[], const char *log, char *out, size_t cap)
{
    int status;
    pid_t pid;

    ck_assert_int_eq(rl_harness_spawn(argv, log, &pid), 0);
    ck_assert_int_eq(rl_harness_wait(pid, 10000, &status), 0);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 2);
    ck_assert_int_ge(rl_harness_read_file(log, out, cap), 0);
}

/* A key file its group or others may read stops the start, with one clear line; so do the
 * tls_* keys given without the others. */
START_TEST(test_key_mode)
{
    char conf[4096], log[4096], out[4096], key[4096];
    const char *argv[] = {"rl-node", "--config", conf, "--name", "n1", "--listen",
                          "127.0.0.1:1", NULL};
    int status;
    pid_t pid;

    snprintf(key, sizeof(key), "%s/client.key", dir);
    ck_assert_int_eq(chmod(key, 0640), 0);
    path(conf, sizeof(conf), "mode.conf");
    write_config(conf, "client", "ca");
    path(log, sizeof(log), "mode.out");
    ck_assert_int_eq(rl_harness_spawn(argv, log, &pid), 0);
    ck_assert_int_eq(rl_harness_wait(pid, 10000, &status), 0);
    ck_assert_int_eq(chmod(key, 0600), 0);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 2);
    ck_assert_int_ge(rl_harness_read_file(log, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, "tls_key_file") != NULL &&
                      strstr(out, "may be read or written by its group or others (mode 0640)") !=
                          NULL,
                  "%s", out);
    ck_assert_msg(strstr(out, "PRIVATE KEY") == NULL, "the key was printed: %s", out);
    /* tls_cert_file alone */
    ck_assert_int_eq(rl_harness_write_file(conf, "[cluster]\ntls_cert_file = %s/node.pem\n"
                                                 "[node n1]\nlisten = 127.0.0.1:1\n",
                                           dir),
                     0);
    refused_start(argv, log, out, sizeof(out));
    ck_assert_msg(strstr(out, "go together") != NULL, "%s", out);
    /* an encrypted key: refused, no passphrase asked for */
    {
        char enc[2048];
        const char *pk[] = {"openssl", "pkey", "-in", key, "-aes256", "-passout", "pass:x",
                            "-out", enc, NULL};

        snprintf(enc, sizeof(enc), "%s/enc.key", dir);
        ck_assert_int_eq(rl_harness_run(pk, out, sizeof(out), 20000), 0);
        ck_assert_int_eq(chmod(enc, 0600), 0);
        ck_assert_int_eq(rl_harness_write_file(conf,
                                               "[cluster]\ntls_cert_file = %s/client.pem\n"
                                               "tls_key_file = %s\ntls_ca_file = %s/ca.pem\n"
                                               "[node n1]\nlisten = 127.0.0.1:1\n",
                                               dir, enc, dir),
                         0);
        refused_start(argv, log, out, sizeof(out));
        ck_assert_msg(strstr(out, "an encrypted one is not taken") != NULL, "%s", out);
    }
}
END_TEST

/* rl-cli and rl-bench speak TLS with --tls-ca (and to a node, --tls-cert and --tls-key). */
START_TEST(test_tools)
{
    char out[8192], target[64], ca[4096], cert[4096], key[4096];

    snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
    snprintf(cert, sizeof(cert), "%s/client.pem", dir);
    snprintf(key, sizeof(key), "%s/client.key", dir);
    snprintf(target, sizeof(target), "127.0.0.1:%d", router_port);
    {
        const char *argv[] = {"rl-cli", "--target", target, "--tls-ca", ca, "check", "shop",
                              "frank", NULL};

        ck_assert_int_eq(rl_harness_run(argv, out, sizeof(out), T_TIMEOUT), 0);
        ck_assert_msg(strstr(out, "ALLOWED") != NULL, "%s", out);
    }
    snprintf(target, sizeof(target), "127.0.0.1:%d", node_port);
    {
        const char *argv[] = {"rl-bench", "--target", target, "--tls-ca", ca, "--tls-cert",
                              cert, "--tls-key", key, "--service", "shop", "--requests",
                              "2000", "--keys", "100", "--json", NULL};

        ck_assert_int_eq(rl_harness_run(argv, out, sizeof(out), 30000), 0);
        ck_assert_msg(strstr(out, "\"decisions\":2000") != NULL, "%s", out);
        ck_assert_msg(strstr(out, "\"errors\":0") != NULL, "%s", out);
    }
}
END_TEST

/* A peer that stops in the middle of a TLS record (here its ClientHello) is closed after
 * frame_timeout, as one that stops in the middle of a frame. */
START_TEST(test_partial_record_timeout)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)node_port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int64_t t0, t;
    char b[64];
    ssize_t n;

    ck_assert_int_ge(fd, 0);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    t0 = mono_ms();
    ck_assert_int_eq(write(fd, "\x16\x03\x01\x01", 4), 4);
    n = read(fd, b, sizeof(b)); /* blocks until the server closes */
    t = mono_ms() - t0;
    ck_assert_int_le(n, 0);
    ck_assert_msg(t >= 900 && t < 4000, "closed after %lld ms", (long long)t);
    close(fd);
}
END_TEST

/* TLS 1.2 and later only: a TLS 1.1 client (willing: security level 0) is refused with a
 * protocol_version alert; a TLS 1.2 one is served. openssl s_client as the client. */
START_TEST(test_versions)
{
    char out[16384], addr[64], ca[2048];
    const char *v11[] = {"openssl", "s_client", "-connect", addr, "-tls1_1", "-cipher",
                         "DEFAULT@SECLEVEL=0", "-CAfile", ca, NULL};
    const char *v12[] = {"openssl", "s_client", "-connect", addr, "-tls1_2", "-CAfile", ca,
                         NULL};

    snprintf(addr, sizeof(addr), "127.0.0.1:%d", router_port);
    snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
    ck_assert_int_ne(rl_harness_run(v11, out, sizeof(out), T_TIMEOUT), 0);
    ck_assert_msg(strstr(out, "alert protocol version") != NULL, "%s", out);
    ck_assert_int_eq(rl_harness_run(v12, out, sizeof(out), T_TIMEOUT), 0);
    ck_assert_msg(strstr(out, "Protocol  : TLSv1.2") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "Verify return code: 0 (ok)") != NULL, "%s", out);
}
END_TEST

static Suite *
tls_suite(void)
{
    Suite *s = suite_create("tls");
    TCase *tc = tcase_create("tls");

    tcase_add_unchecked_fixture(tc, tls_setup, tls_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_mutual_router_node);
    tcase_add_test(tc, test_node_refuses_foreign_peer);
    tcase_add_test(tc, test_plaintext_refused);
    tcase_add_test(tc, test_tools);
    tcase_add_test(tc, test_partial_record_timeout);
    tcase_add_test(tc, test_versions);
    tcase_add_test(tc, test_key_mode);
    tcase_add_test(tc, test_reload);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(tls_suite)
