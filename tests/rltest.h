/*
 * rltest: what every Check suite of the tree shares: assertions cheap enough for hot loops,
 * and the one main() of a suite.
 *
 * Why not ck_assert* everywhere: every ck_assert*, passing or not, calls _mark_point(),
 * which sends the file and line to Check's runner (a write to the runner's message file in
 * fork mode), so a loop of a million passing checks costs a million writes: minutes under
 * ASan. The RL_CHECK* macros evaluate their operands once, compare inline, and call into
 * Check only when the comparison fails, with the same message ck_assert_* would give (the
 * expression, and each operand's text and value). Use them in loops and helpers that run
 * many times; ck_assert* stays fine for straight-line code. The one thing they give up is
 * the mark point: a test that crashes after passing RL_CHECKs is reported at the last
 * ck_assert or mark_point() before them, not at the last RL_CHECK.
 *
 * RL_CHECK(cond) or RL_CHECK(cond, "fmt", ...): fails with "Assertion 'cond' failed" and
 * the formatted message (fmt must be a string literal).
 * RL_CHECK_INT_EQ(a, b) ... _NE, _LT, _LE, _GT, _GE: as ck_assert_int_*, intmax_t;
 * RL_CHECK_INT(a, OP, b) for any comparison operator OP.
 * RL_CHECK_UINT_EQ(a, b) ..., RL_CHECK_UINT(a, OP, b): as ck_assert_uint_*, uintmax_t.
 * RL_CHECK_STR_EQ(a, b): as ck_assert_str_eq (neither may be NULL).
 *
 * rl_test_run(suite) / RL_TEST_MAIN(suite_fn): runs a suite as every test binary here does:
 * Check's environment is honoured, CK_FORK=no (one process: for gdb and for LSan),
 * CK_VERBOSITY (silent, minimal, normal (default), verbose), CK_RUN_SUITE, CK_RUN_CASE,
 * CK_INCLUDE_TAGS, CK_EXCLUDE_TAGS, CK_DEFAULT_TIMEOUT, CK_TIMEOUT_MULTIPLIER,
 * CK_LOG_FILE_NAME, CK_XML_LOG_FILE_NAME, CK_TAP_LOG_FILE_NAME; prints Check's summary;
 * stops whatever the harness started in this process and removes its temp directory; and
 * returns EXIT_SUCCESS only if no test failed.
 *
 * rl_test_stat(port, key): one STATS value; rl_test_cluster_prepare(...): the opening of a
 * ZooKeeper cluster's setup that suites share (its ZooKeeper and its ports);
 * rl_test_tls_client(dir, ca, cert): a TLS client context from a suite's certificates;
 * rl_test_dial(port, token, timeout_ms): an authenticated connection;
 * rl_test_tcp_connect(port): a plain blocking TCP connection to 127.0.0.1.
 */
#ifndef RL_RLTEST_H
#define RL_RLTEST_H

#include <check.h>
#include <stdint.h>
#include <string.h>

/*
 * Fails the running test with "Assertion 'expr' failed", followed by fmt formatted when fmt
 * is more than ": " (the macros pass ": " "their format", so that an RL_CHECK without a
 * message still has a format string that is not empty).
 */
void rl_test_fail(const char *file, int line, const char *expr, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

/* Runs the suite (see above) and frees it; returns the process's exit status. */
int rl_test_run(Suite *suite);

struct rl_client;
/* Sends frame[0..n) (a whole frame, length prefix included) on c and checks the reply:
 * ERROR UNKNOWN_OP to request id with exactly the message msg. */
void rl_test_expect_unknown_op(struct rl_client *c, const char *frame, size_t n, uint32_t id,
                               const char *msg);

/* STATS value `key` of the server on 127.0.0.1:port (-1 when absent), from a connection of
 * its own; fails the test when the server does not answer within 5 s. */
int64_t rl_test_stat(int port, const char *key);

struct rl_wire_req;
/* *req becomes a CHECK of service for user at cost, everything else zero (the strings are
 * referenced, not copied). */
void rl_test_check_req(struct rl_wire_req *req, const char *service, const char *user,
                       uint32_t cost);

struct rl_harness_zk;
struct rl_harness_server;
struct rl_tls_ctx;
struct rl_client;

/* A blocking TCP socket connected to 127.0.0.1:port (close-on-exec); fails the test when
 * the connection is refused. */
int rl_test_tcp_connect(int port);

/* A binary-protocol connection to 127.0.0.1:port, authenticated with token (AUTH answered
 * with AUTH); fails the test when either step fails within timeout_ms. */
struct rl_client *rl_test_dial(int port, const char *token, int timeout_ms);

/* A TLS client context trusting dir/<ca>.pem and, when cert is not NULL, presenting
 * dir/<cert>.pem with its key dir/<cert>.key; fails the test (with the reason) when the
 * context cannot be made. */
struct rl_tls_ctx *rl_test_tls_client(const char *dir, const char *ca, const char *cert);

/* The first step of a suite's cluster: clears the ZooKeeper, node and router handles
 * (nnodes and nrouters of them), starts the ZooKeeper (failing the test if it does not
 * start) and picks a free port for each node and router. */
void rl_test_cluster_prepare(struct rl_harness_zk *zk, struct rl_harness_server *nodes,
                             int *node_ports, int nnodes, struct rl_harness_server *routers,
                             int *router_ports, int nrouters);

/*
 * Waits (timeout_ms at most) until the cluster is at rest: every running router (pid not 0)
 * sees `members` members, the running routers and nodes use one shard table (STATS
 * table_digest) and no node has a shard in flight (shards_incoming, shards_outgoing). Nodes
 * started one after another hand shards to each other as each joins; a test that counts
 * what the nodes decide, or that wants no answer held for a move, waits for the end of that.
 * Fails the test, saying what was still moving, when the time runs out.
 */
void rl_test_wait_settled(const struct rl_harness_server *nodes, int nnodes,
                          const struct rl_harness_server *routers, int nrouters, int members,
                          int timeout_ms);

/* The main() of a test binary whose suite is built by suite_fn(). */
#define RL_TEST_MAIN(suite_fn)                                                                     \
    int main(void)                                                                                 \
    {                                                                                              \
        return rl_test_run(suite_fn());                                                            \
    }

#define RL_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        if (__builtin_expect(!(cond), 0)) {                                                        \
            rl_test_fail(__FILE__, __LINE__, #cond, ": " __VA_ARGS__);                             \
        }                                                                                          \
    } while (0)

#define RL_CHECK_INT(X, OP, Y)                                                                     \
    do {                                                                                           \
        intmax_t rl_check_x_ = (X);                                                                \
        intmax_t rl_check_y_ = (Y);                                                                \
        if (__builtin_expect(!(rl_check_x_ OP rl_check_y_), 0)) {                                  \
            rl_test_fail(__FILE__, __LINE__, #X " " #OP " " #Y, ": %s == %jd, %s == %jd", #X,      \
                         rl_check_x_, #Y, rl_check_y_);                                            \
        }                                                                                          \
    } while (0)

#define RL_CHECK_UINT(X, OP, Y)                                                                    \
    do {                                                                                           \
        uintmax_t rl_check_x_ = (X);                                                               \
        uintmax_t rl_check_y_ = (Y);                                                               \
        if (__builtin_expect(!(rl_check_x_ OP rl_check_y_), 0)) {                                  \
            rl_test_fail(__FILE__, __LINE__, #X " " #OP " " #Y, ": %s == %ju, %s == %ju", #X,      \
                         rl_check_x_, #Y, rl_check_y_);                                            \
        }                                                                                          \
    } while (0)

#define RL_CHECK_INT_EQ(X, Y) RL_CHECK_INT(X, ==, Y)
#define RL_CHECK_INT_NE(X, Y) RL_CHECK_INT(X, !=, Y)
#define RL_CHECK_INT_LT(X, Y) RL_CHECK_INT(X, <, Y)
#define RL_CHECK_INT_LE(X, Y) RL_CHECK_INT(X, <=, Y)
#define RL_CHECK_INT_GT(X, Y) RL_CHECK_INT(X, >, Y)
#define RL_CHECK_INT_GE(X, Y) RL_CHECK_INT(X, >=, Y)
#define RL_CHECK_UINT_EQ(X, Y) RL_CHECK_UINT(X, ==, Y)
#define RL_CHECK_UINT_NE(X, Y) RL_CHECK_UINT(X, !=, Y)
#define RL_CHECK_UINT_LT(X, Y) RL_CHECK_UINT(X, <, Y)
#define RL_CHECK_UINT_LE(X, Y) RL_CHECK_UINT(X, <=, Y)
#define RL_CHECK_UINT_GT(X, Y) RL_CHECK_UINT(X, >, Y)
#define RL_CHECK_UINT_GE(X, Y) RL_CHECK_UINT(X, >=, Y)

#define RL_CHECK_STR_EQ(X, Y)                                                                      \
    do {                                                                                           \
        const char *rl_check_s_ = (X);                                                             \
        const char *rl_check_t_ = (Y);                                                             \
        if (__builtin_expect(strcmp(rl_check_s_, rl_check_t_) != 0, 0)) {                          \
            rl_test_fail(__FILE__, __LINE__, #X " == " #Y, ": %s == \"%s\", %s == \"%s\"", #X,     \
                         rl_check_s_, #Y, rl_check_t_);                                            \
        }                                                                                          \
    } while (0)

#endif
