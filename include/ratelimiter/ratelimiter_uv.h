/*
 * ratelimiter_uv.h: the librlclient client for a libuv loop the application runs.
 *
 * One TCP connection to a router, owned by the loop's thread: CHECKs are written as they
 * come (pipelined: any number in flight, bounded by max_pending), replies matched to their
 * request by id, each request's callback called exactly once: with the reply, or with a
 * clear status when its timeout passed, the connection was lost, or the client was closed.
 * A lost connection is reopened with exponential backoff (50 ms doubling to 2 s by
 * default, reset on success) for as long as the client lives.
 *
 * At most once. A request waiting for a connection (the client is reconnecting) is sent
 * when one is up, unless its timeout passed first. A request already written when the
 * connection was lost fails with -ECONNRESET and is never resent: it may or may not have
 * been counted. A request whose timeout passed while in flight fails with -ETIMEDOUT and a
 * late reply to it is ignored (it may have been counted).
 *
 * Thread-safety: none. Every function, and every callback, runs on the loop's thread.
 * Callbacks may submit new requests and may call rlc_uv_close.
 */
#ifndef RATELIMITER_RATELIMITER_UV_H
#define RATELIMITER_RATELIMITER_UV_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include <ratelimiter/ratelimiter.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RLC_UV_DEFAULT_MAX_PENDING 10000u
#define RLC_UV_MAX_PENDING_LIMIT 1000000u
#define RLC_UV_DEFAULT_BACKOFF_MIN_MS 50u
#define RLC_UV_DEFAULT_BACKOFF_MAX_MS 2000u

typedef struct rlc_uv rlc_uv;

/* Zero it, then set what you need. */
struct rlc_uv_options {
    const char *host;       /* numeric IPv4/IPv6 address, or a name resolved once, blocking,
                               by rlc_uv_create (its first address) */
    uint16_t port;
    const void *token;      /* optional AUTH token (1..256 bytes), copied; sent first on
                               every connection */
    size_t token_len;
    uint32_t max_pending;   /* requests waiting or in flight at once; 0: the default
                               (10000); at most RLC_UV_MAX_PENDING_LIMIT */
    uint32_t backoff_min_ms; /* 0: 50 */
    uint32_t backoff_max_ms; /* 0: 2000 */
    /* TLS (docs/CLIENTS.md, "TLS"): set tls_ca_file (PEM CA certificates the server's
     * certificate must chain to) to speak TLS; tls_cert_file and tls_key_file (PEM, the key
     * mode 0600 or stricter) when the server wants a client certificate (a node with TLS).
     * Read once by rlc_uv_create (-EINVAL when they do not load). */
    const char *tls_ca_file;
    const char *tls_cert_file;
    const char *tls_key_file;
};

/*
 * Called once per accepted request, on the loop thread. status:
 *   0            rep holds the reply (code not RLC_CODE_ERROR);
 *   -EREMOTEIO   the server answered ERROR: rep->code RLC_CODE_ERROR, rep->error why;
 *   -ETIMEDOUT   the request's timeout passed (waiting for a connection, or in flight);
 *   -ECONNRESET  the connection was lost after the request was written;
 *   -EPROTO      the server answered it with another op's reply: the connection is closed
 *                (the other requests in flight on it get -ECONNRESET) and opened again;
 *   -EACCES      the server refused the client's token;
 *   -ECANCELED   rlc_uv_close was called first.
 * rep is NULL unless status is 0 or -EREMOTEIO, and valid during the call only.
 */
typedef void (*rlc_uv_cb)(void *arg, int status, const struct rlc_reply *rep);

/*
 * Creates a client on loop and starts connecting. Returns 0 with *out set, -EINVAL (no host,
 * port 0, bad token length or max_pending), -ENXIO (host does not resolve), -ENOMEM, or a
 * libuv error as a negative errno. The client keeps handles on loop (timers, the socket)
 * until rlc_uv_close's callback: like any open handle they keep uv_run(UV_RUN_DEFAULT)
 * running until the client is closed.
 */
RLC_API int rlc_uv_create(rlc_uv **out, uv_loop_t *loop, const struct rlc_uv_options *opts);

/*
 * Submits one CHECK (arguments as rlc_check; strings copied at once) whose callback cb(arg,
 * ...) runs later, never from inside this call. timeout_ms bounds the time until the
 * callback (negative: none; 0: the next loop turn's timer). Returns 0 when accepted (then
 * cb runs exactly once), or without calling cb: -EINVAL (bad argument, cb NULL), -ENOBUFS
 * (max_pending requests already pending: the bounded queue is full), -ESHUTDOWN (the client
 * is closing), -ENOMEM.
 */
RLC_API int rlc_uv_check(rlc_uv *u, const char *service, const char *user, const char *endpoint,
                         uint32_t cost, int timeout_ms, rlc_uv_cb cb, void *arg);

/*
 * ADJUST and RELEASE (rlc_adjust, rlc_release: ratelimiter.h), submitted as rlc_uv_check
 * (same returns, same callback; -EINVAL also for |delta| or count out of bounds). A request
 * that was written is never resent: after -ETIMEDOUT or -ECONNRESET it may or may not have
 * been applied.
 */
RLC_API int rlc_uv_adjust(rlc_uv *u, const char *service, const char *user,
                          const char *endpoint, int32_t delta, int timeout_ms, rlc_uv_cb cb,
                          void *arg);
RLC_API int rlc_uv_release(rlc_uv *u, const char *service, const char *user,
                           const char *endpoint, uint32_t count, int timeout_ms, rlc_uv_cb cb,
                           void *arg);

/*
 * Closes the client: every pending request's callback runs with -ECANCELED (before this
 * returns), the connection closes, and once the client's handles are closed on_closed(arg)
 * (may be NULL) runs from the loop and the client is freed. u must not be used after this
 * call. Calling it again is a no-op.
 */
RLC_API void rlc_uv_close(rlc_uv *u, void (*on_closed)(void *arg), void *arg);

/* Counters and gauges of a client. */
struct rlc_uv_stats {
    uint64_t connects;    /* connections made */
    uint64_t disconnects; /* connections lost after they were made */
    uint64_t sent;        /* requests written */
    uint64_t replies;     /* callbacks with status 0 or -EREMOTEIO */
    uint64_t timeouts;    /* callbacks with -ETIMEDOUT */
    uint64_t lost;        /* callbacks with -ECONNRESET or -EACCES */
    uint32_t waiting;     /* now: accepted, not yet written (no connection) */
    uint32_t in_flight;   /* now: written, not yet answered */
    uint32_t max_in_flight; /* the most in flight at once so far */
    int connected;        /* 1 while a connection is up */
};

RLC_API void rlc_uv_get_stats(const rlc_uv *u, struct rlc_uv_stats *st);

#ifdef __cplusplus
}
#endif

#endif
