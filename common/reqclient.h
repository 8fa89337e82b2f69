/*
 * reqclient: the request client, a small blocking client of the wire protocol for tests,
 * tools, benchmarks and librlclient's blocking API (lib/client.c, which adds reconnection
 * and the public types on top). Its type is struct rl_client, its functions rl_client_*:
 * connect with a timeout, queue many requests, flush them in one write, and read replies
 * as they come, matching them by id. Not used on the router's hot path (which has its own
 * libuv connections) and not thread-safe: one client per thread.
 */
#ifndef RL_REQCLIENT_H
#define RL_REQCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

struct rl_client;

/*
 * In rl_client_check_many's reps[i].code: the server answered that request with ERROR, whose
 * err code (enum rl_wire_err) is then in reps[i].limit. Outside the range of CHECK codes.
 */
#define RL_CLIENT_CODE_ERROR 255u

/*
 * Timeouts are in milliseconds and bound the whole call, however many replies to other ids
 * arrive meanwhile; a negative timeout waits forever. After a timeout the connection may
 * still carry a late reply: every call skips replies whose id is not its own (each
 * check_many batch takes the ids after the last batch's), so a late or repeated reply is
 * never taken for another request's.
 */

/* Connects to host:port within timeout_ms (host: a name getaddrinfo resolves, or a numeric
 * IPv4/IPv6 address; every address is tried in turn). Returns 0 with *out set (free with
 * rl_client_destroy), or a negative errno: -ETIMEDOUT, -ECONNREFUSED, -ENXIO when the name
 * does not resolve, -EINVAL for an empty host or port 0. */
int rl_client_connect(struct rl_client **out, const char *host, uint16_t port, int timeout_ms);

/* Connects to "host:port" or "[v6addr]:port"; -EINVAL when it is neither. */
int rl_client_connect_addr(struct rl_client **out, const char *hostport, int timeout_ms);

void rl_client_destroy(struct rl_client *c);

/*
 * TLS on a client just connected (nothing queued yet): the handshake with ctx, an
 * RL_TLS_CLIENT context (tls.h), within timeout_ms; every call after it is encrypted. Returns
 * 0, or a negative errno with why filled: the server's certificate refused, the server
 * speaking plaintext, the server refusing ours... A server that refuses this client's
 * certificate may only say so at the first read (TLS 1.3): a call then fails -EPROTO and
 * rl_client_tls_why says why.
 */
struct rl_tls_ctx;
int rl_client_start_tls(struct rl_client *c, struct rl_tls_ctx *ctx, int timeout_ms, char *why,
                        size_t whylen);

/* Why the TLS layer failed (a handshake, a record, the server's alert), or NULL. */
const char *rl_client_tls_why(const struct rl_client *c);

/* Queues a request (its id is the caller's) or raw bytes; nothing is sent until flush. */
int rl_client_queue(struct rl_client *c, const struct rl_wire_req *req);
int rl_client_queue_raw(struct rl_client *c, const void *p, size_t n);

/* Writes everything queued within timeout_ms, reading (and buffering) replies meanwhile.
 * Returns 0 or a negative errno; -ECONNRESET when the server is gone. */
int rl_client_flush(struct rl_client *c, int timeout_ms);

/*
 * Reads the next reply within timeout_ms. Returns 0 with *rep filled (its strings valid until
 * the next call), -ETIMEDOUT, -ECONNRESET when the server closed, or -EPROTO on a bad frame.
 */
int rl_client_recv(struct rl_client *c, struct rl_wire_reply *rep, int timeout_ms);

/* One CHECK, waited for. endpoint may be NULL. Returns 0 with *rep set (rep->op may be
 * RL_WIRE_OP_ERROR), or a negative errno. */
int rl_client_check(struct rl_client *c, const char *service, const char *user,
                    const char *endpoint, uint32_t cost, struct rl_wire_reply *rep, int timeout_ms);

/* The same with an inline limit (limit NULL or limit->set false: none). */
int rl_client_check_limit(struct rl_client *c, const char *service, const char *user,
                          const char *endpoint, uint32_t cost, const struct rl_wire_limit *limit,
                          struct rl_wire_reply *rep, int timeout_ms);

/* ADJUST (op RL_WIRE_OP_ADJUST, amount its delta) or RELEASE (RL_WIRE_OP_RELEASE, amount its
 * count), with an inline limit or none, waited for as rl_client_check; the caller checks the
 * bounds. */
int rl_client_settle(struct rl_client *c, uint32_t op, const char *service, const char *user,
                     const char *endpoint, int64_t amount, const struct rl_wire_limit *limit,
                     struct rl_wire_reply *rep, int timeout_ms);

/*
 * Pipelined CHECKs: sends reqs[0..n) in one write with ids 1..n (overwriting theirs) and
 * waits for all n replies, storing the reply to reqs[i] in reps[i] whatever the order they
 * arrive in. A request answered with ERROR gets code RL_CLIENT_CODE_ERROR. Large n is
 * fine: writing and reading are interleaved. Returns 0, -ETIMEDOUT if any reply is missing
 * after timeout_ms, -ECONNRESET, or -EPROTO for a bad frame or a reply no request owns.
 */
int rl_client_check_many(struct rl_client *c, struct rl_wire_req *reqs, size_t n,
                         struct rl_wire_check_reply *reps, int timeout_ms);

/* PING, STATS and CLOCK, waited for. For STATS, *rep holds the map. PING and STATS return 0
 * with rep->op RL_WIRE_OP_ERROR when the server answered ERROR. CLOCK returns 0 when the
 * server echoed now_ms, -EOPNOTSUPP when it answered UNKNOWN_OP (no --test-clock), else
 * -EPROTO or the transport's error. */
int rl_client_ping(struct rl_client *c, struct rl_wire_reply *rep, int timeout_ms);

/*
 * AUTH with token[0..len): the first request on a connection to a server that wants one.
 * Returns 0 with rep->name the principal the server took the token for, -EACCES when it
 * refused (ERROR UNAUTHORIZED: it then closes the connection), or a negative errno.
 */
int rl_client_auth(struct rl_client *c, const char *token, size_t len, struct rl_wire_reply *rep,
                   int timeout_ms);

/*
 * The same with the token read from a file that only its owner may read (auth.h's rule),
 * or from the file named by $RL_TOKEN_FILE when path is NULL; a no-op returning 0 when both
 * are absent. On a file error, -EACCES/-EINVAL/-ENOENT... with why filled.
 */
int rl_client_auth_file(struct rl_client *c, const char *path, int timeout_ms, char *why,
                        size_t whylen);

/*
 * What rl_client_auth_file does, for any client of the protocol (librlclient's keeps its own
 * connection state): reads the token of path, or of $RL_TOKEN_FILE when path is NULL
 * (returning 0 at once when both are absent), and hands it to auth(arg, token, len), which
 * returns 0 or a negative errno (-EACCES: refused). describe(rc) words any other errno of
 * the AUTH in why. The token is wiped before return.
 */
int rl_client_auth_token_file(const char *path,
                              int (*auth)(void *arg, const char *token, size_t len), void *arg,
                              const char *(*describe)(int rc), char *why, size_t whylen);
int rl_client_stats(struct rl_client *c, struct rl_wire_reply *rep, int timeout_ms);
/* HOT (a router's hot keys, docs/PROTOCOL.md): service NULL for all, top 0 for the default. */
int rl_client_hot(struct rl_client *c, const char *service, uint32_t top, struct rl_wire_reply *rep,
                  int timeout_ms);
int rl_client_clock(struct rl_client *c, uint64_t now_ms, int timeout_ms);

/*
 * THROTTLED (docs/PROTOCOL.md): the throttling episodes of a node, or of every node behind a
 * router. service (NULL: any) and since_ms (NULL: no bound) filter; top 0 asks for the
 * server's default. Returns 0 with *rep holding the episodes (rep->op RL_WIRE_OP_ERROR when
 * the server answered ERROR), or a negative errno.
 */
int rl_client_throttled(struct rl_client *c, const char *service, const uint64_t *since_ms,
                        uint32_t top, struct rl_wire_reply *rep, int timeout_ms);

/* A STATS value by key, or def when absent (or when rep is not a STATS reply). */
int64_t rl_client_stat(const struct rl_wire_reply *rep, const char *key, int64_t def);

/* The socket, for tests that poll it or half-close it. */
int rl_client_fd(const struct rl_client *c);

#endif
