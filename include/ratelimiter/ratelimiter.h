/*
 * ratelimiter.h: the C client library of ratelimiter (librlclient).
 *
 *   - a blocking client of a router (or a node): connect, AUTH, CHECK, pipelined CHECKs,
 *     PING, with a timeout on every call and a reconnect on the next call after a lost
 *     connection;
 *   - the one mapping from a CHECK reply to an HTTP answer (docs/INTEGRATION.md): the status
 *     to answer and the RateLimit-Policy / RateLimit / Retry-After (and legacy
 *     X-RateLimit-*) header lines;
 *   - names of reply codes and error strings.
 *
 * The client of a libuv loop is in <ratelimiter/ratelimiter_uv.h>.
 *
 * This header is self-contained: standard C headers only, opaque handles and plain structs.
 * Build with `pkg-config --cflags --libs ratelimiter`.
 *
 * Conventions. Every function returning int returns 0 on success or a negative errno
 * value (-ETIMEDOUT, -ECONNREFUSED...); rlc_strerror() names them. Timeouts are in
 * milliseconds and bound the whole call, a reconnect included; a negative timeout waits
 * forever. Strings are NUL-terminated and only read during the call (the library keeps no
 * pointer to them) unless a comment says otherwise.
 *
 * Thread-safety. A client handle (rlc_client) is not thread-safe: use it from one thread at
 * a time (one handle per thread, or a lock around each call). Different handles are
 * independent. Every function that takes no handle (names, the HTTP helpers) is pure and
 * thread-safe. The library installs no signal handler and raises no SIGPIPE.
 */
#ifndef RATELIMITER_RATELIMITER_H
#define RATELIMITER_RATELIMITER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define RLC_API __attribute__((visibility("default")))
#else
#define RLC_API
#endif

#define RLC_VERSION_MAJOR 0
#define RLC_VERSION_MINOR 1
#define RLC_VERSION_PATCH 0

/* The version of the library actually linked, "MAJOR.MINOR.PATCH". */
RLC_API const char *rlc_version(void);

/* ---- Replies ------------------------------------------------------------------------- */

/* A CHECK reply's code (docs/PROTOCOL.md), and RLC_CODE_ERROR for a request the server
 * answered with ERROR instead (its error code is then in rlc_reply.error). */
enum rlc_code {
    RLC_ALLOWED = 0,
    RLC_LIMITED = 1,
    RLC_FAIL_OPEN = 2,
    RLC_FAIL_CLOSED = 3,
    RLC_NO_RULE = 4,
    RLC_QUEUED = 5,
    RLC_CODE_ERROR = 255
};

/* ERROR codes a server answers a request with (rlc_reply.error). */
enum rlc_error {
    RLC_ERR_NONE = 0,
    RLC_ERR_MALFORMED = 1,
    RLC_ERR_UNKNOWN_OP = 2,
    RLC_ERR_BAD_FIELD = 3,
    RLC_ERR_OVERLOADED = 4,
    RLC_ERR_UNAUTHORIZED = 5,
    RLC_ERR_NOT_OWNER = 6,
    RLC_ERR_MOVING = 7 /* a node asked directly while it hands the key's shard off */
};

/* The answer to one CHECK (docs/INTEGRATION.md, "What a reply carries"). */
struct rlc_reply {
    uint32_t code;           /* enum rlc_code */
    uint32_t error;          /* code RLC_CODE_ERROR: enum rlc_error; else 0 */
    uint64_t limit;          /* quota of the tier that decided */
    uint64_t remaining;      /* left in it after this request */
    uint64_t reset_ms;       /* until that tier is back at its full quota */
    uint64_t retry_after_ms; /* LIMITED: when the same request would pass; QUEUED: how long
                                to wait before going ahead; FAIL_CLOSED: when to try again */
};

/* One request of rlc_check_many. endpoint may be NULL (the whole service). */
struct rlc_check_req {
    const char *service; /* 1..128 bytes */
    const char *user;    /* 1..256 bytes */
    const char *endpoint; /* NULL or 0..128 bytes ("" is the same as NULL) */
    uint32_t cost;       /* 0..1000000; 0 asks without spending (a peek) */
};

/* "ALLOWED", "LIMITED", "FAIL_OPEN", "FAIL_CLOSED", "NO_RULE", "QUEUED", "ERROR"; "?" for
 * any other value. Static strings. */
RLC_API const char *rlc_code_name(uint32_t code);

/* "MALFORMED", "UNKNOWN_OP", "BAD_FIELD", "OVERLOADED", "UNAUTHORIZED", "NOT_OWNER"; "NONE"
 * for 0; "?" for any other value. Static strings. */
RLC_API const char *rlc_error_name(uint32_t err);

/* A static English phrase for a negative errno this library returns (rc may also be 0:
 * "success"); for others, "unknown error". Unlike strerror(3), thread-safe. */
RLC_API const char *rlc_strerror(int rc);

/* ---- The blocking client ------------------------------------------------------------- */

/*
 * One TCP connection to a router (or a node), driven by the calling thread: each call
 * writes its request(s) and waits for the answer(s) with poll(2), never longer than its
 * timeout.
 *
 * Reconnect. The client remembers the address (and the token of rlc_auth). A call that
 * finds the connection gone (the previous call failed with a transport error or a timeout,
 * or the server closed it while the client was idle: a router restart, idle_timeout) opens
 * a new one, sends the token again if there is one, and only then sends its request, all
 * within its timeout.
 *
 * At most once. A request is never sent twice. Once a call has written a CHECK, a lost
 * connection, a broken stream or its timeout ends the call with -ECONNRESET, -EPROTO or
 * -ETIMEDOUT: the CHECK may or may not have been counted by the cluster, and the library
 * does not resend it (the caller decides, typically by its failure policy: see
 * rlc_http_unreachable). The reconnect of the next call happens before that call writes
 * anything, so it cannot repeat a request either. After such an error the connection is
 * dropped, so a late reply can never be taken for the answer to a later request.
 */
typedef struct rlc_client rlc_client;

/*
 * Connects to host:port within timeout_ms. host is a name getaddrinfo(3) resolves (each
 * address is tried in turn) or a numeric IPv4/IPv6 address. Returns 0 with *out set (free
 * it with rlc_close), or -EINVAL (empty host, port 0, NULL out), -ENXIO (the name does not
 * resolve), -ETIMEDOUT, -ECONNREFUSED, -ENOMEM or another connect(2) errno; *out is then
 * NULL.
 */
RLC_API int rlc_connect(rlc_client **out, const char *host, uint16_t port, int timeout_ms);

/* The same with "host:port" or "[v6addr]:port"; -EINVAL when it is neither. */
RLC_API int rlc_connect_addr(rlc_client **out, const char *hostport, int timeout_ms);

/* TLS (docs/CLIENTS.md, "TLS"): the files a TLS client reads, PEM. */
struct rlc_tls_options {
    const char *ca_file;   /* required: the CA certificates the server's certificate must
                              chain to (only the chain is checked, not a name) */
    const char *cert_file; /* optional: this client's certificate, for a server that wants
                              one (a node with TLS); with key_file */
    const char *key_file;  /* its key: a file neither group nor others may read or write */
};

/*
 * rlc_connect_addr over TLS: every connection the client opens (reconnects too) makes the
 * handshake first. Returns as rlc_connect_addr, -EINVAL too for files that do not load, or
 * -EPROTO when the handshake failed; why (may be NULL) then says what went wrong: the
 * server's certificate refused, a server speaking plaintext, a key file too open...
 */
RLC_API int rlc_connect_tls(rlc_client **out, const char *hostport,
                            const struct rlc_tls_options *tls, int timeout_ms, char *why,
                            size_t whylen);

/* Why the last TLS handshake of c failed, or NULL. A server that refuses the client's
 * certificate may say so only at the first read (TLS 1.3): a call fails -EPROTO. */
RLC_API const char *rlc_tls_error(const rlc_client *c);

/* Closes the connection and frees c (NULL is a no-op). The token is wiped from memory. */
RLC_API void rlc_close(rlc_client *c);

/*
 * AUTH (docs/PROTOCOL.md): authenticates the connection with token[0..len) (1..256 bytes)
 * and remembers a copy of the token, sent again first on every reconnect. Call it right
 * after rlc_connect when the router has [client] sections. Returns 0, -EACCES when the
 * server refused the token (it then closes the connection; the token is forgotten),
 * -EINVAL for a bad length, or a transport error as rlc_check.
 */
RLC_API int rlc_auth(rlc_client *c, const void *token, size_t len, int timeout_ms);

/*
 * rlc_auth with the token read from a file: a regular file neither group nor others may
 * read or write (mode 0600 or stricter), holding the token with at most one trailing
 * newline. path NULL means $RL_TOKEN_FILE; when that is unset too, nothing is done and 0
 * returned. On failure why (may be NULL) receives a phrase naming the problem, never the
 * token: -ENOENT/-EACCES (also for a file with too open a mode)/-EINVAL (empty or longer
 * than 256 bytes), or rlc_auth's errors.
 */
RLC_API int rlc_auth_file(rlc_client *c, const char *path, int timeout_ms, char *why,
                          size_t whylen);

/*
 * One CHECK of cost units for (service, user, endpoint), waited for. Returns:
 *   0           *rep holds the reply (any enum rlc_code but RLC_CODE_ERROR);
 *   -EREMOTEIO  the server answered ERROR: rep->code is RLC_CODE_ERROR and rep->error
 *               says why (BAD_FIELD, UNAUTHORIZED, OVERLOADED...); the connection stays;
 *   -EINVAL     an argument is out of the protocol's bounds (nothing was sent);
 *   -ETIMEDOUT, -ECONNRESET, -EPROTO: see "At most once" above; -ECONNREFUSED (or another
 *               connect errno) when the reconnect before sending failed.
 */
RLC_API int rlc_check(rlc_client *c, const char *service, const char *user,
                      const char *endpoint, uint32_t cost, struct rlc_reply *rep,
                      int timeout_ms);

/*
 * An inline limit a CHECK carries instead of relying on a configured rule (docs/PROTOCOL.md,
 * "Inline limits"): the parts of a cluster.conf `limit` line.
 */
struct rlc_limit {
    const char *algorithm; /* "fixed_window", "sliding_window_log", "sliding_window_counter",
                              "token_bucket", "gcra" or "leaky_bucket" */
    uint32_t limit;        /* N: 1..4294967295 */
    uint32_t window_ms;    /* W: 1..4294967295 */
    uint32_t burst;        /* B for token_bucket, gcra, leaky_bucket; 0: none (N) */
};

/*
 * rlc_check with an inline limit (limit NULL: none, as rlc_check). -EINVAL also for a limit
 * out of bounds (unknown algorithm, 0, a burst the algorithm does not take); a service with
 * configured rules answers ERROR BAD_FIELD (-EREMOTEIO), a node holding too many distinct
 * inline limits OVERLOADED.
 */
RLC_API int rlc_check_limit(rlc_client *c, const char *service, const char *user,
                            const char *endpoint, uint32_t cost, const struct rlc_limit *limit,
                            struct rlc_reply *rep, int timeout_ms);

/*
 * ADJUST (docs/PROTOCOL.md, "ADJUST"): settles a cost known after the work, on the key a
 * CHECK of an estimate counted: delta > 0 charges (applied past the limit too: the key is
 * then in debt), delta < 0 refunds (at most what the key consumed in its current window);
 * |delta| <= 1000000. limit: the inline limit the key was CHECKed with, or NULL. *rep: code
 * RLC_CODE_ALLOWED when applied, RLC_CODE_NO_RULE when no rule matches, or the failure
 * policy's code when the owner is unreachable (not applied); the key's numbers after it.
 * Returns as rlc_check (a router whose client may not refund answers ERROR UNAUTHORIZED:
 * -EREMOTEIO). Not idempotent: after -ETIMEDOUT or -ECONNRESET it may or may not have been
 * applied; do not resend it blindly (a charge resent is charged twice).
 */
RLC_API int rlc_adjust(rlc_client *c, const char *service, const char *user,
                       const char *endpoint, int32_t delta, const struct rlc_limit *limit,
                       struct rlc_reply *rep, int timeout_ms);

/*
 * RELEASE (docs/PROTOCOL.md, "RELEASE"): gives back count (1..1000000) slots of the rule's
 * `concurrency` tiers taken by a CHECK of that cost; limit as rlc_adjust. *rep: a CHECK's
 * reply (remaining: N minus the slots still held). Returns as rlc_adjust, and is not
 * idempotent either (a release resent may free another holder's slot).
 */
RLC_API int rlc_release(rlc_client *c, const char *service, const char *user,
                        const char *endpoint, uint32_t count, const struct rlc_limit *limit,
                        struct rlc_reply *rep, int timeout_ms);

/*
 * Parses `ALGORITHM N per DURATION [burst B]` (docs/CONFIG.md, `limit`; DURATION digits and
 * ms, s, m, h or d) into *out, whose algorithm then points into a static string. Returns 0 or
 * -EINVAL.
 */
RLC_API int rlc_limit_parse(const char *text, struct rlc_limit *out);

/*
 * Pipelined CHECKs: sends reqs[0..n) together (written as fast as the socket takes them,
 * replies read meanwhile, so any n works) and waits until every reply is in; reps[i]
 * receives the reply to reqs[i] whatever order the replies arrive in (they are matched by
 * request id). A request the server answered with ERROR gets code RLC_CODE_ERROR and its
 * error in reps[i].error; the others are not affected. Returns 0 once all n are answered,
 * -EINVAL (a request out of bounds: nothing sent), or -ETIMEDOUT / -ECONNRESET / -EPROTO
 * when not every reply came: reps is then undefined and none of the requests is resent
 * (some may have been counted). n 0 returns 0 at once.
 */
RLC_API int rlc_check_many(rlc_client *c, const struct rlc_check_req *reqs, size_t n,
                           struct rlc_reply *reps, int timeout_ms);

/*
 * PING: checks the server answers; name (may be NULL) receives its name (truncated to
 * namelen - 1 bytes, NUL-terminated). Returns 0, -EREMOTEIO when it answered ERROR, or a
 * transport error. Safe to repeat: PING counts nothing.
 */
RLC_API int rlc_ping(rlc_client *c, char *name, size_t namelen, int timeout_ms);

/* 1 while the client holds an open connection (as far as it knows without asking the
 * socket), 0 after a transport error until the next call reconnects. */
RLC_API int rlc_connected(const rlc_client *c);

/* Connections the client opened so far: 1 after rlc_connect, +1 per reconnect. */
RLC_API uint64_t rlc_connects(const rlc_client *c);

/* ---- HTTP: from a reply to an answer (docs/INTEGRATION.md) -------------------------- */

#define RLC_HTTP_MAX_HEADERS 6   /* RateLimit-Policy, RateLimit, Retry-After, 3 legacy */
#define RLC_HTTP_POLICY_MAX 128  /* bytes of a policy name */
#define RLC_HTTP_NAME_SIZE 24    /* room for a header name and its NUL */
#define RLC_HTTP_VALUE_SIZE 320  /* room for a header value and its NUL */
/* What rlc_http_answer takes from a server (docs/CLIENTS.md, "What a client accepts from a
 * server"): the longest QUEUED wait it passes on as wait_ms by default, and the most
 * seconds any header carries (4294967295 ms, the protocol's "never", rounded up). */
#define RLC_HTTP_MAX_WAIT_MS 10000u
#define RLC_HTTP_MAX_SECONDS 4294968u

/* rlc_http_answer flags. */
#define RLC_HTTP_LEGACY 0x1u     /* also X-RateLimit-Limit, -Remaining, -Reset */

struct rlc_http_header {
    char name[RLC_HTTP_NAME_SIZE];   /* "RateLimit-Policy", "Retry-After"... */
    char value[RLC_HTTP_VALUE_SIZE]; /* "\"api\";q=100;w=60" */
};

/* What to answer the HTTP client. */
struct rlc_http_answer {
    int status;       /* 0: pass the request on; 429 or 503: answer that yourself */
    uint64_t wait_ms; /* QUEUED: hold the request this long, then pass it on; else 0 */
    size_t nheaders;  /* headers[0..nheaders) go on the answer (passed on, 429 or 503) */
    struct rlc_http_header headers[RLC_HTTP_MAX_HEADERS];
};

/*
 * The mapping of docs/INTEGRATION.md. policy is the policy name (by default the service
 * name), 1..RLC_HTTP_POLICY_MAX bytes, written as a structured-field string ('"' and '\'
 * escaped with '\', bytes outside 0x20..0x7E replaced by '_'). window_s is the window of
 * the service's rule in seconds, or 0 when unknown (then no ";w="). flags: RLC_HTTP_LEGACY.
 *
 *   ALLOWED      status 0, RateLimit-Policy, RateLimit
 *   QUEUED       status 0, wait_ms = retry_after_ms, RateLimit-Policy, RateLimit; but
 *                when retry_after_ms > RLC_HTTP_MAX_WAIT_MS, as LIMITED (429, wait_ms 0)
 *   LIMITED      429, RateLimit-Policy, RateLimit, Retry-After
 *   FAIL_CLOSED  503, Retry-After
 *   FAIL_OPEN, NO_RULE: status 0, no headers
 *
 * with RateLimit-Policy: "NAME";q=LIMIT[;w=WINDOW], RateLimit: "NAME";r=REMAINING;t=T,
 * T = ceil(reset_ms / 1000), Retry-After: ceil(retry_after_ms / 1000) and at least 1 when
 * retry_after_ms > 0; T and Retry-After at most RLC_HTTP_MAX_SECONDS; with
 * RLC_HTTP_LEGACY, after them: X-RateLimit-Limit: LIMIT, X-RateLimit-Remaining: REMAINING,
 * X-RateLimit-Reset: T (where RateLimit is sent). So wait_ms is never above
 * RLC_HTTP_MAX_WAIT_MS, whatever the server said.
 * Returns 0 with *out filled, or -EINVAL (NULL arguments, a policy name empty or too long,
 * or code RLC_CODE_ERROR or unknown: no decision to map; use rlc_http_unreachable).
 */
RLC_API int rlc_http_answer(const struct rlc_reply *rep, const char *policy, uint32_t window_s,
                            unsigned flags, struct rlc_http_answer *out);

/*
 * rlc_http_answer with the caller's bound on QUEUED waits instead of RLC_HTTP_MAX_WAIT_MS:
 * a QUEUED reply with retry_after_ms <= max_wait_ms is passed on after wait_ms =
 * retry_after_ms; a longer one is answered as LIMITED (429, Retry-After, wait_ms 0).
 * max_wait_ms 0 holds nothing: every QUEUED wait is refused.
 */
RLC_API int rlc_http_answer_wait(const struct rlc_reply *rep, const char *policy,
                                 uint32_t window_s, unsigned flags, uint64_t max_wait_ms,
                                 struct rlc_http_answer *out);

/*
 * The client-side failure policy, when the router cannot be reached or the call failed
 * (any negative return of rlc_check): fail_closed 0 ("open") passes the request on with no
 * headers; 1 ("closed") answers 503 with Retry-After: 1. Never fails.
 */
RLC_API void rlc_http_unreachable(int fail_closed, struct rlc_http_answer *out);

/*
 * Writes the headers of a as "Name: value\r\n" lines into buf (NUL-terminated, nothing
 * else: no status line). Returns the length written (0 when there are no headers), or
 * -ENOSPC when len is too small (buf then holds an empty string when len > 0).
 */
RLC_API int rlc_http_format(const struct rlc_http_answer *a, char *buf, size_t len);

/* "Too Many Requests" for 429, "Service Unavailable" for 503, "OK" for 0 and 200, else
 * "". Static strings. */
RLC_API const char *rlc_http_reason(int status);

#ifdef __cplusplus
}
#endif

#endif
