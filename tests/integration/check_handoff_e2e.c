/*
 * check_handoff_e2e: a shard handed by hand from one rl-node process to another (static
 * membership, both under --test-clock, the receiver's clock three days ahead): users of
 * every algorithm (and an inline limit) brought near or past their limit on node a, `rl-cli handoff
 * --shard S
 * --from a --to b`, then the same CHECKs sent straight to node b continue from a's counters
 * exactly (3 used of 10: 6 left after one more, ALLOWED or, for the leaky bucket, QUEUED; a
 * refused user stays refused), while a user
 * of another shard starts afresh on b. Also: HANDOFF_OUT and HANDOFF_IN are refused to a
 * connection without the cluster secret (a [client] token: UNAUTHORIZED at AUTH), and bad
 * requests (a shard out of range, an offset no export is at, records that are not records or
 * are cut short) get their BAD_FIELD and leave the connection up and nothing imported.
 * And a node's clock stepped a day forward and back (NTP correcting a wrong clock): users of
 * every algorithm who spent their allowance during the day ahead are refused afterwards for
 * at most two of their windows, not for the day, and get nothing back.
 * Not for the records' encoding (check_handoff) nor an automatic handoff (check_move).
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "reqclient.h"
#include "rltest.h"
#include "ruleset.h"
#include "shardmap.h"
#include "wire.h"

#define SHARDS 16
#define SECRET "cluster-secret-0123456789abcdef"
#define CLIENT_TOKEN "web-token-0123456789abcdef"
/* web-token-0123456789abcdef's SHA-256 */
#define T_TIMEOUT 10000
#define T_A 1700000000000ull        /* node a's clock: 800 s into its hour */
#define T_B (T_A + 3 * 86400000ull) /* node b's: three days later (a multiple of every window) */

/* every algorithm's rule, and "free": no rule, an inline limit (gcra 10 per 1h burst 10) */
static const char *const services[] = {"fw", "swl", "swc", "tb", "gcra", "lb", "free"};
#define NSVC 7

static char conf_path[PATH_MAX], secret_path[PATH_MAX], token_path[PATH_MAX];
static int port_a, port_b;
static struct rl_harness_server node_a, node_b;

static struct rl_client *
dial(int port, const char *token)
{
    return rl_test_dial(port, token, T_TIMEOUT);
}

static uint32_t
shard_of(const char *service, const char *user)
{
    return rl_shardmap_shard(rl_shardmap_key_hash(service, strlen(service), user, strlen(user)),
                             SHARDS);
}

/* A user of service whose key is in shard `in` (or, want false, not in it), from prefix. */
static void
user_in(const char *service, const char *prefix, uint32_t in, bool want, char *user, size_t len)
{
    for (int i = 0; i < 100000; i++) {
        snprintf(user, len, "%s-%d", prefix, i);
        if ((shard_of(service, user) == in) == want) {
            return;
        }
    }
    ck_abort_msg("no user of %s in shard %u", service, in);
}

static struct rl_wire_check_reply
check(struct rl_client *c, const char *service, const char *user)
{
    struct rl_wire_limit inl = {.set = true,
                                .has_burst = true,
                                .algo = RL_ALGO_GCRA,
                                .limit = 10,
                                .window_ms = 3600000,
                                .burst = 10};
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_check_limit(c, service, user, NULL, 1,
                                           strcmp(service, "free") == 0 ? &inl : NULL, &rep,
                                           T_TIMEOUT),
                     0);
    ck_assert_msg(rep.op == RL_WIRE_OP_CHECK, "%s %s: op %u err %u: %.*s", service, user, rep.op,
                  rep.err, (int)rep.message.len, rep.message.ptr ? rep.message.ptr : "");
    return rep.check;
}

/* Sends req on c and reads its reply. */
static void
call(struct rl_client *c, struct rl_wire_req *req, struct rl_wire_reply *rep)
{
    ck_assert_int_eq(rl_client_queue(c, req), 0);
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_recv(c, rep, T_TIMEOUT), 0);
}

static void
expect_error(struct rl_client *c, struct rl_wire_req *req, uint32_t err, const char *says)
{
    struct rl_wire_reply rep;

    call(c, req, &rep);
    ck_assert_msg(rep.op == RL_WIRE_OP_ERROR && rep.err == err, "op %u err %u", rep.op, rep.err);
    ck_assert_msg(memmem(rep.message.ptr, rep.message.len, says, strlen(says)) != NULL,
                  "\"%.*s\" lacks \"%s\"", (int)rep.message.len, rep.message.ptr, says);
    /* the connection is still up */
    ck_assert_int_eq(rl_client_ping(c, &rep, T_TIMEOUT), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_PING);
}

static int
cli(char *out, size_t len, const char *const argv[])
{
    int rc = rl_harness_run(argv, out, len, 30000);

    ck_assert_msg(rc >= 0, "%s did not run to its end: %d", argv[0], rc);
    return rc;
}

static void
setup(void)
{
    port_a = rl_harness_free_port();
    port_b = rl_harness_free_port();
    ck_assert_int_eq(rl_harness_tmppath(secret_path, sizeof(secret_path), "secret"), 0);
    ck_assert_int_eq(rl_harness_write_file(secret_path, "%s\n", SECRET), 0);
    ck_assert_int_eq(chmod(secret_path, 0600), 0);
    ck_assert_int_eq(rl_harness_tmppath(token_path, sizeof(token_path), "token"), 0);
    ck_assert_int_eq(rl_harness_write_file(token_path, "%s\n", CLIENT_TOKEN), 0);
    ck_assert_int_eq(chmod(token_path, 0600), 0);
    ck_assert_int_eq(rl_harness_tmppath(conf_path, sizeof(conf_path), "handoff.conf"), 0);
    ck_assert_int_eq(
        rl_harness_write_file(conf_path,
                              "[cluster]\nshards = %d\nsecret_file = %s\n"
                              "[client web]\n"
                              "services = *\ntoken_sha256 = %s\n"
                              "[node a]\nlisten = 127.0.0.1:%d\n"
                              "[node b]\nlisten = 127.0.0.1:%d\n"
                              "[service fw]\nlimit = fixed_window 10 per 1h\n"
                              "[service swl]\nlimit = sliding_window_log 10 per 1h\n"
                              "[service swc]\nlimit = sliding_window_counter 10 per 1h\n"
                              "[service tb]\nlimit = token_bucket 10 per 1h burst 10\n"
                              "[service gcra]\nlimit = gcra 10 per 1h burst 10\n"
                              "[service lb]\nlimit = leaky_bucket 10 per 1h burst 10\n",
                              SHARDS, secret_path,
                              "3ef66b28d2f6c97e489e4c4d6efbdfc1e94b34d84eecbfcf817e5afde1ba3859",
                              port_a, port_b),
        0);
    /* rl-cli and rl_test_stat AUTH with the cluster secret */
    ck_assert_int_eq(setenv("RL_TOKEN_FILE", secret_path, 1), 0);
    ck_assert_int_eq(rl_harness_node_start(&node_a, conf_path, "a", port_a, RL_HARNESS_TEST_CLOCK),
                     0);
    ck_assert_int_eq(rl_harness_node_start(&node_b, conf_path, "b", port_b, RL_HARNESS_TEST_CLOCK),
                     0);
}

static void
teardown(void)
{
    ck_assert_int_eq(rl_harness_server_stop(&node_a, SIGTERM, 10000), 0);
    ck_assert_int_eq(rl_harness_server_stop(&node_b, SIGTERM, 10000), 0);
    unsetenv("RL_TOKEN_FILE");
    rl_harness_cleanup();
}

START_TEST(test_handoff_every_algorithm)
{
    struct rl_client *a = dial(port_a, SECRET), *b = dial(port_b, SECRET);
    char used[NSVC][32], refused[NSVC][32], other[NSVC][32];
    char from[64], to[64], shard[16], out[4096];
    const uint32_t S = shard_of("fw", "probe");
    struct rl_wire_check_reply r;

    ck_assert_int_eq(rl_client_clock(a, T_A, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_clock(b, T_B, T_TIMEOUT), 0);
    for (int s = 0; s < NSVC; s++) {
        user_in(services[s], "used", S, true, used[s], sizeof(used[s]));
        user_in(services[s], "refused", S, true, refused[s], sizeof(refused[s]));
        user_in(services[s], "other", S, false, other[s], sizeof(other[s]));
        for (int i = 0; i < 3; i++) {
            r = check(a, services[s], used[s]);
            ck_assert_uint_ne(r.code, RL_WIRE_LIMITED);
            (void)check(a, services[s], other[s]);
        }
        ck_assert_uint_eq(r.remaining, 7);
        for (int i = 0; i < 10; i++) {
            ck_assert_uint_ne(check(a, services[s], refused[s]).code, RL_WIRE_LIMITED);
        }
        ck_assert_uint_eq(check(a, services[s], refused[s]).code, RL_WIRE_LIMITED);
    }
    snprintf(from, sizeof(from), "127.0.0.1:%d", port_a);
    snprintf(to, sizeof(to), "127.0.0.1:%d", port_b);
    snprintf(shard, sizeof(shard), "%u", S);
    {
        /* a [client] token is not a node's: refused at AUTH, nothing moves */
        const char *as_client[] = {"rl-cli", "--token-file", token_path, "handoff", "--shard",
                                   shard,    "--from",       from,       "--to",    to,
                                   NULL};
        const char *go[] = {"rl-cli", "handoff", "--shard", shard, "--from",
                            from,     "--to",    to,        NULL};
        const char *no_to[] = {"rl-cli", "handoff", "--shard", shard, "--from", from, NULL};
        char want[128];

        ck_assert_int_ne(cli(out, sizeof(out), as_client), 0);
        ck_assert_msg(strstr(out, "the server refused the token") != NULL, "%s", out);
        ck_assert_int_eq(cli(out, sizeof(out), no_to), 2);
        ck_assert_int_eq(cli(out, sizeof(out), go), 0);
        /* 2 users of each of the 7 services, one key each */
        snprintf(want, sizeof(want), "shard %u: 14 keys imported, 0 skipped", S);
        ck_assert_msg(strstr(out, want) != NULL, "\"%s\" lacks \"%s\"", out, want);
    }
    for (int s = 0; s < NSVC; s++) {
        /* b continues a's counters: 3 used of 10, one more leaves 6 */
        r = check(b, services[s], used[s]);
        ck_assert_msg(r.code != RL_WIRE_LIMITED && r.remaining == 6,
                      "%s %s on b: code %u, %llu left", services[s], used[s], r.code,
                      (unsigned long long)r.remaining);
        r = check(b, services[s], refused[s]);
        ck_assert_msg(r.code == RL_WIRE_LIMITED, "%s %s on b: code %u", services[s], refused[s],
                      r.code);
        /* another shard's user was not handed: afresh on b */
        r = check(b, services[s], other[s]);
        ck_assert_msg(r.code != RL_WIRE_LIMITED && r.remaining == 9, "%s %s on b: %llu left",
                      services[s], other[s], (unsigned long long)r.remaining);
    }
    rl_client_destroy(a);
    rl_client_destroy(b);
}
END_TEST

START_TEST(test_bad_requests)
{
    struct rl_client *b = dial(port_b, SECRET), *c = NULL;
    struct rl_wire_reply rep;
    struct rl_wire_req req;
    /* a record announcing 3 bytes that are no array; then a length prefix cut short */
    static const char junk[] = {0, 0, 0, 3, 'a', 'b', 'c'};
    static const char cut[] = {0, 0, 0, 9, (char)0x92, 2};

    memset(&req, 0, sizeof(req));
    req.op = RL_WIRE_OP_HANDOFF_OUT;
    req.id = 5;
    req.shard = SHARDS;
    expect_error(b, &req, RL_WIRE_ERR_BAD_FIELD, "shard 16 is out of range");
    req.shard = 1;
    req.offset = 40;
    expect_error(b, &req, RL_WIRE_ERR_BAD_FIELD, "no export of shard 1 continues at offset 40");
    req.op = RL_WIRE_OP_HANDOFF_IN;
    req.records.ptr = junk;
    req.records.len = sizeof(junk);
    expect_error(b, &req, RL_WIRE_ERR_BAD_FIELD, "byte 0 starts no handoff record");
    req.records.ptr = cut;
    req.records.len = sizeof(cut);
    expect_error(b, &req, RL_WIRE_ERR_BAD_FIELD, "cut short");
    /* an empty message imports nothing */
    req.records.len = 0;
    call(b, &req, &rep);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_HANDOFF_IN);
    ck_assert_uint_eq(rep.imported, 0);
    /* a router does not serve them; a client token cannot AUTH to a node */
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)port_b, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_auth(c, CLIENT_TOKEN, strlen(CLIENT_TOKEN), &rep, T_TIMEOUT),
                     -EACCES);
    rl_client_destroy(c);
    /* without AUTH: refused */
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)port_b, T_TIMEOUT), 0);
    req.op = RL_WIRE_OP_HANDOFF_OUT;
    req.shard = 1;
    req.offset = 0;
    call(c, &req, &rep);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_ERROR);
    ck_assert_uint_eq(rep.err, RL_WIRE_ERR_UNAUTHORIZED);
    rl_client_destroy(c);
    rl_client_destroy(b);
}
END_TEST

START_TEST(test_clock_day_back)
{
    struct rl_client *a = dial(port_a, SECRET);
    const uint64_t DAY = 86400000ull, HOUR = 3600000ull;
    struct rl_wire_check_reply r;

    ck_assert_int_eq(rl_client_clock(a, T_A + DAY, T_TIMEOUT), 0);
    for (int s = 0; s < NSVC; s++) {
        for (int i = 0; i < 10; i++) {
            ck_assert_uint_ne(check(a, services[s], "ahead").code, RL_WIRE_LIMITED);
        }
        r = check(a, services[s], "ahead");
        ck_assert_uint_eq(r.code, RL_WIRE_LIMITED);
    }
    ck_assert_int_eq(rl_client_clock(a, T_A, T_TIMEOUT), 0);
    for (int s = 0; s < NSVC; s++) {
        /* still refused (nothing given back), for at most two windows of 1 h, not a day (back
         * at full allowance within three: sliding_window_counter's next window still weighs
         * the last) */
        r = check(a, services[s], "ahead");
        ck_assert_msg(r.code == RL_WIRE_LIMITED && r.remaining == 0, "%s: code %u, %llu left",
                      services[s], r.code, (unsigned long long)r.remaining);
        ck_assert_msg(r.retry_after_ms <= 2 * HOUR && r.reset_ms <= 3 * HOUR,
                      "%s: retry %llu ms, reset %llu ms after a step back of a day", services[s],
                      (unsigned long long)r.retry_after_ms, (unsigned long long)r.reset_ms);
    }
    /* and allowed again two windows later */
    ck_assert_int_eq(rl_client_clock(a, T_A + 2 * HOUR, T_TIMEOUT), 0);
    for (int s = 0; s < NSVC; s++) {
        r = check(a, services[s], "ahead");
        ck_assert_msg(r.code != RL_WIRE_LIMITED, "%s: still refused", services[s]);
    }
    rl_client_destroy(a);
}
END_TEST

static Suite *
handoff_e2e_suite(void)
{
    Suite *s = suite_create("handoff_e2e");
    TCase *tc = tcase_create("handoff_e2e");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_handoff_every_algorithm);
    tcase_add_test(tc, test_bad_requests);
    tcase_add_test(tc, test_clock_day_back);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(handoff_e2e_suite)
