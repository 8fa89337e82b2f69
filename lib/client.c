/*
 * librlclient's blocking client (include/ratelimiter/ratelimiter.h): the public face of
 * common/reqclient.c. It adds what the internal client leaves to its callers: the reply
 * structs of the public API, argument checks, the remembered address and token, dropping
 * the connection after any transport error or timeout, and reconnecting before the next
 * call writes anything (never resending a request).
 */
#include <ratelimiter/ratelimiter.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "auth.h"
#include "reqclient.h"
#include "ruleset.h"
#include "clock.h"
#include "parse.h"
#include "tls.h"
#include "wire.h"

struct rlc_client {
    struct rl_client *c; /* NULL: no connection; the next call opens one */
    char *host;
    uint16_t port;
    char token[RL_WIRE_TOKEN_MAX];
    size_t token_len; /* 0: no token */
    uint64_t connects;
    struct rl_tls_ctx *tls;   /* NULL: plain TCP */
    char tls_why[256];        /* why the last TLS handshake failed */
    struct rl_wire_reply rep; /* large: kept here, not on the stack */
};

static int64_t
deadline_after(int timeout_ms)
{
    return timeout_ms < 0 ? -1 : (int64_t)(rl_clock_mono_ns() / 1000000) + timeout_ms;
}

/* What is left of a deadline as a timeout (at least 0; -1 for none). */
static int
left_ms(int64_t deadline)
{
    int64_t left;

    if (deadline < 0) {
        return -1;
    }
    left = deadline - (int64_t)(rl_clock_mono_ns() / 1000000);
    return left <= 0 ? 0 : (left > 0x7fffffff ? 0x7fffffff : (int)left);
}

static void
drop(rlc_client *c)
{
    rl_client_destroy(c->c);
    c->c = NULL;
}

/* Whether the idle connection is still usable: the server has not closed or reset it. */
static int
alive(rlc_client *c)
{
    struct pollfd pfd = {.fd = rl_client_fd(c->c), .events = POLLIN | POLLRDHUP};
    char b;
    ssize_t n;

    if (poll(&pfd, 1, 0) <= 0) {
        return 1;
    }
    if (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
        return 0;
    }
    n = recv(pfd.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        return 0;
    }
    return 1; /* stray bytes (a late reply) are skipped by id */
}

static int
send_auth(rlc_client *c, int64_t deadline)
{
    int rc = rl_client_auth(c->c, c->token, c->token_len, &c->rep, left_ms(deadline));

    if (rc != 0) {
        drop(c);
    }
    return rc;
}

/* Makes sure a connection is up before a call writes anything. */
static int
ensure(rlc_client *c, int64_t deadline)
{
    int rc;

    if (c->c != NULL && !alive(c)) {
        drop(c);
    }
    if (c->c != NULL) {
        return 0;
    }
    rc = rl_client_connect(&c->c, c->host, c->port, left_ms(deadline));
    if (rc != 0) {
        c->c = NULL;
        return rc;
    }
    if (c->tls != NULL) {
        rc = rl_client_start_tls(c->c, c->tls, left_ms(deadline), c->tls_why,
                                 sizeof(c->tls_why));
        if (rc != 0) {
            drop(c);
            return rc;
        }
    }
    c->connects++;
    if (c->token_len > 0) {
        rc = send_auth(c, deadline);
        if (rc == -EACCES) {
            rl_auth_wipe(c->token, sizeof(c->token));
            c->token_len = 0;
        }
    }
    return rc;
}

/* After a call: a transport error or a timeout leaves the stream unfit. */
static int
settle(rlc_client *c, int rc)
{
    if (rc != 0 && rc != -EREMOTEIO && rc != -EINVAL && c->c != NULL) {
        if (rl_client_tls_why(c->c) != NULL) { /* the server's alert, kept for rlc_tls_error */
            snprintf(c->tls_why, sizeof(c->tls_why), "%s", rl_client_tls_why(c->c));
        }
        drop(c);
    }
    return rc;
}

/*
 * After an ERROR reply to one of our requests. An ERROR without our id (0) means the server
 * could not read the request, and an UNAUTHORIZED means it refused the connection: either
 * way it closes the connection after the reply, so the next call opens a fresh one (sending
 * the token first) instead of writing into a socket whose FIN may still be on its way.
 */
static int
remote_error(rlc_client *c)
{
    if (c->rep.id == 0) {
        return settle(c, -EPROTO);
    }
    if (c->rep.err == RL_WIRE_ERR_UNAUTHORIZED) {
        drop(c);
    }
    return -EREMOTEIO;
}

const char *
rlc_version(void)
{
    return RL_VERSION;
}

/* Opens a client of host (which it takes: freed on failure) and port, with TLS when tls is
 * not NULL (which it takes too). */
static int
client_open_tls(rlc_client **out, char *host, uint16_t port, struct rl_tls_ctx *tls,
                int timeout_ms, char *why, size_t whylen)
{
    rlc_client *c = calloc(1, sizeof(*c));
    int rc;

    if (c == NULL) {
        free(host);
        rl_tls_ctx_free(tls);
        return -ENOMEM;
    }
    c->host = host;
    c->port = port;
    c->tls = tls;
    rc = ensure(c, deadline_after(timeout_ms));
    if (rc != 0) {
        if (why != NULL && whylen > 0) {
            snprintf(why, whylen, "%s", c->tls_why[0] != '\0' ? c->tls_why : strerror(-rc));
        }
        rlc_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

static int
client_open(rlc_client **out, char *host, uint16_t port, int timeout_ms)
{
    return client_open_tls(out, host, port, NULL, timeout_ms, NULL, 0);
}

int
rlc_connect_tls(rlc_client **out, const char *hostport, const struct rlc_tls_options *tls,
                int timeout_ms, char *why, size_t whylen)
{
    struct rl_tls_ctx *ctx = NULL;
    char *host = NULL, buf[512];
    uint16_t port;
    int rc;

    if (out == NULL) {
        return -EINVAL;
    }
    *out = NULL;
    if (hostport == NULL || rl_parse_hostport(hostport, &host, &port) != NULL) {
        if (why != NULL && whylen > 0) {
            snprintf(why, whylen, "expected HOST:PORT");
        }
        return -EINVAL;
    }
    if (tls == NULL || tls->ca_file == NULL) {
        free(host);
        if (why != NULL && whylen > 0) {
            snprintf(why, whylen, "TLS needs ca_file");
        }
        return -EINVAL;
    }
    rc = rl_tls_ctx_new(&ctx, RL_TLS_CLIENT, tls->cert_file, tls->key_file, tls->ca_file, NULL,
                        buf, sizeof(buf));
    if (rc != 0) {
        free(host);
        if (why != NULL && whylen > 0) {
            snprintf(why, whylen, "%s", buf);
        }
        return rc;
    }
    return client_open_tls(out, host, port, ctx, timeout_ms, why, whylen);
}

const char *
rlc_tls_error(const rlc_client *c)
{
    return c != NULL && c->tls_why[0] != '\0' ? c->tls_why : NULL;
}

int
rlc_connect(rlc_client **out, const char *host, uint16_t port, int timeout_ms)
{
    char *copy;

    if (out == NULL) {
        return -EINVAL;
    }
    *out = NULL;
    if (host == NULL || host[0] == '\0' || port == 0) {
        return -EINVAL;
    }
    copy = strdup(host);
    return copy != NULL ? client_open(out, copy, port, timeout_ms) : -ENOMEM;
}

int
rlc_connect_addr(rlc_client **out, const char *hostport, int timeout_ms)
{
    char *host = NULL;
    uint16_t port;

    if (out == NULL) {
        return -EINVAL;
    }
    *out = NULL;
    /* The one HOST:PORT / [IPV6]:PORT parser of the tree (parse.h), as rl_client's. */
    if (hostport == NULL || rl_parse_hostport(hostport, &host, &port) != NULL) {
        return -EINVAL;
    }
    return client_open(out, host, port, timeout_ms);
}

void
rlc_close(rlc_client *c)
{
    if (c == NULL) {
        return;
    }
    drop(c);
    rl_auth_wipe(c->token, sizeof(c->token));
    rl_tls_ctx_free(c->tls);
    free(c->host);
    free(c);
}

int
rlc_auth(rlc_client *c, const void *token, size_t len, int timeout_ms)
{
    int64_t deadline = deadline_after(timeout_ms);
    int rc;

    if (c == NULL || token == NULL || len == 0 || len > RL_WIRE_TOKEN_MAX) {
        return -EINVAL;
    }
    /* The token goes first on a fresh connection; on the open one it goes now. */
    memcpy(c->token, token, len);
    c->token_len = len;
    if (c->c != NULL && alive(c)) {
        rc = send_auth(c, deadline);
    } else {
        drop(c);
        rc = ensure(c, deadline); /* sends the token */
    }
    if (rc == -EACCES) {
        rl_auth_wipe(c->token, sizeof(c->token));
        c->token_len = 0;
    }
    return rc;
}

/* The timeout of rlc_auth_file's AUTH, for its callback. */
struct auth_arg {
    rlc_client *c;
    int timeout_ms;
};

static int
auth_with(void *arg, const char *token, size_t len)
{
    struct auth_arg *a = arg;

    return rlc_auth(a->c, token, len, a->timeout_ms);
}

int
rlc_auth_file(rlc_client *c, const char *path, int timeout_ms, char *why, size_t whylen)
{
    struct auth_arg a = {c, timeout_ms};
    char dummy[8];

    if (why == NULL || whylen == 0) {
        why = dummy;
        whylen = sizeof(dummy);
    }
    why[0] = '\0';
    if (c == NULL) {
        return -EINVAL;
    }
    return rl_client_auth_token_file(path, auth_with, &a, rlc_strerror, why, whylen);
}

static int
valid_check(const char *service, const char *user, const char *endpoint, uint32_t cost)
{
    size_t s, u, e;

    if (service == NULL || user == NULL) {
        return 0;
    }
    s = strlen(service);
    u = strlen(user);
    e = endpoint != NULL ? strlen(endpoint) : 0;
    return s >= 1 && s <= RL_WIRE_SERVICE_MAX && u >= 1 && u <= RL_WIRE_USER_MAX &&
           e <= RL_WIRE_ENDPOINT_MAX && cost <= RL_WIRE_COST_MAX;
}

static void
from_wire(const struct rl_wire_check_reply *w, struct rlc_reply *rep)
{
    rep->code = w->code;
    rep->error = 0;
    rep->limit = w->limit;
    rep->remaining = w->remaining;
    rep->reset_ms = w->reset_ms;
    rep->retry_after_ms = w->retry_after_ms;
}

static void
error_reply(uint32_t err, struct rlc_reply *rep)
{
    memset(rep, 0, sizeof(*rep));
    rep->code = RLC_CODE_ERROR;
    rep->error = err;
}

int
rlc_check(rlc_client *c, const char *service, const char *user, const char *endpoint, uint32_t cost,
          struct rlc_reply *rep, int timeout_ms)
{
    int64_t deadline = deadline_after(timeout_ms);
    int rc;

    if (c == NULL || rep == NULL || !valid_check(service, user, endpoint, cost)) {
        return -EINVAL;
    }
    rc = ensure(c, deadline);
    if (rc != 0) {
        return rc;
    }
    rc = rl_client_check(c->c, service, user, endpoint, cost, &c->rep, left_ms(deadline));
    if (rc == 0 && c->rep.op == RL_WIRE_OP_ERROR) {
        error_reply(c->rep.err, rep);
        return remote_error(c);
    }
    if (rc == 0) {
        from_wire(&c->rep.check, rep);
    }
    return settle(c, rc);
}

/* The wire form of an rlc_limit, or false when it is out of bounds. */
static int
wire_limit(const struct rlc_limit *in, struct rl_wire_limit *out)
{
    static const char *const algos[] = {
#define LIB_ALGO_NAME(n, s, b) s,
        RL_ALGO_MAP(LIB_ALGO_NAME)
#undef LIB_ALGO_NAME
    };
    static const bool burst[] = {
#define LIB_ALGO_BURST(n, s, b) b,
        RL_ALGO_MAP(LIB_ALGO_BURST)
#undef LIB_ALGO_BURST
    };

    memset(out, 0, sizeof(*out));
    if (in->algorithm == NULL || in->limit == 0 || in->window_ms == 0) {
        return 0;
    }
    for (uint8_t i = 0; i < sizeof(algos) / sizeof(algos[0]); i++) {
        if (strcmp(in->algorithm, algos[i]) == 0) {
            if (in->burst != 0 && !burst[i]) {
                return 0;
            }
            out->set = true;
            out->algo = i;
            out->limit = in->limit;
            out->window_ms = in->window_ms;
            out->has_burst = in->burst != 0;
            out->burst = in->burst != 0 ? in->burst : in->limit;
            return 1;
        }
    }
    return 0;
}

int
rlc_check_limit(rlc_client *c, const char *service, const char *user, const char *endpoint,
                uint32_t cost, const struct rlc_limit *limit, struct rlc_reply *rep,
                int timeout_ms)
{
    int64_t deadline = deadline_after(timeout_ms);
    struct rl_wire_limit wl;
    int rc;

    if (limit == NULL) {
        return rlc_check(c, service, user, endpoint, cost, rep, timeout_ms);
    }
    if (c == NULL || rep == NULL || !valid_check(service, user, endpoint, cost) ||
        !wire_limit(limit, &wl)) {
        return -EINVAL;
    }
    rc = ensure(c, deadline);
    if (rc != 0) {
        return rc;
    }
    rc = rl_client_check_limit(c->c, service, user, endpoint, cost, &wl, &c->rep,
                               left_ms(deadline));
    if (rc == 0 && c->rep.op == RL_WIRE_OP_ERROR) {
        error_reply(c->rep.err, rep);
        return remote_error(c);
    }
    if (rc == 0) {
        from_wire(&c->rep.check, rep);
    }
    return settle(c, rc);
}

/* ADJUST or RELEASE of amount (bounds checked by the callers). */
static int
settle_op(rlc_client *c, uint32_t op, const char *service, const char *user,
          const char *endpoint, int64_t amount, const struct rlc_limit *limit,
          struct rlc_reply *rep, int timeout_ms)
{
    int64_t deadline = deadline_after(timeout_ms);
    struct rl_wire_limit wl;
    int rc;

    memset(&wl, 0, sizeof(wl));
    if (c == NULL || rep == NULL || !valid_check(service, user, endpoint, 0) ||
        (limit != NULL && !wire_limit(limit, &wl))) {
        return -EINVAL;
    }
    rc = ensure(c, deadline);
    if (rc != 0) {
        return rc;
    }
    rc = rl_client_settle(c->c, op, service, user, endpoint, amount, &wl, &c->rep,
                          left_ms(deadline));
    if (rc == 0 && c->rep.op == RL_WIRE_OP_ERROR) {
        error_reply(c->rep.err, rep);
        return remote_error(c);
    }
    if (rc == 0) {
        from_wire(&c->rep.check, rep);
    }
    return settle(c, rc);
}

int
rlc_adjust(rlc_client *c, const char *service, const char *user, const char *endpoint,
           int32_t delta, const struct rlc_limit *limit, struct rlc_reply *rep, int timeout_ms)
{
    if (delta < -RL_WIRE_DELTA_MAX || delta > RL_WIRE_DELTA_MAX) {
        return -EINVAL;
    }
    return settle_op(c, RL_WIRE_OP_ADJUST, service, user, endpoint, delta, limit, rep,
                     timeout_ms);
}

int
rlc_release(rlc_client *c, const char *service, const char *user, const char *endpoint,
            uint32_t count, const struct rlc_limit *limit, struct rlc_reply *rep, int timeout_ms)
{
    if (count < 1 || count > RL_WIRE_COUNT_MAX) {
        return -EINVAL;
    }
    return settle_op(c, RL_WIRE_OP_RELEASE, service, user, endpoint, count, limit, rep,
                     timeout_ms);
}

int
rlc_limit_parse(const char *text, struct rlc_limit *out)
{
    static const char *const algos[] = {
#define LIB_ALGO_NAME(n, s, b) s,
        RL_ALGO_MAP(LIB_ALGO_NAME)
#undef LIB_ALGO_NAME
    };
    char copy[256], *tok[7], *save = NULL;
    int ntok = 0;
    uint64_t n, w, b = 0;
    struct rl_wire_limit wl;

    if (text == NULL || out == NULL || strlen(text) >= sizeof(copy)) {
        return -EINVAL;
    }
    snprintf(copy, sizeof(copy), "%s", text);
    for (char *t = strtok_r(copy, " \t", &save); t != NULL; t = strtok_r(NULL, " \t", &save)) {
        if (ntok == 7) {
            return -EINVAL;
        }
        tok[ntok++] = t;
    }
    if ((ntok != 4 && ntok != 6) || strcmp(tok[2], "per") != 0 ||
        (ntok == 6 && strcmp(tok[4], "burst") != 0)) {
        return -EINVAL;
    }
    if (rl_parse_u64(tok[1], 1, UINT32_MAX, &n) != NULL ||
        rl_parse_duration_ms(tok[3], &w) != NULL || w < 1 || w > UINT32_MAX ||
        (ntok == 6 && rl_parse_u64(tok[5], 1, UINT32_MAX, &b) != NULL)) {
        return -EINVAL;
    }
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < sizeof(algos) / sizeof(algos[0]); i++) {
        if (strcmp(tok[0], algos[i]) == 0) {
            out->algorithm = algos[i];
        }
    }
    out->limit = (uint32_t)n;
    out->window_ms = (uint32_t)w;
    out->burst = (uint32_t)b;
    return out->algorithm != NULL && wire_limit(out, &wl) ? 0 : -EINVAL;
}

int
rlc_check_many(rlc_client *c, const struct rlc_check_req *reqs, size_t n, struct rlc_reply *reps,
               int timeout_ms)
{
    int64_t deadline = deadline_after(timeout_ms);
    struct rl_wire_req *w;
    struct rl_wire_check_reply *wr;
    int rc;

    if (c == NULL || (n > 0 && (reqs == NULL || reps == NULL)) || n >= 0x40000000u) {
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        if (!valid_check(reqs[i].service, reqs[i].user, reqs[i].endpoint, reqs[i].cost)) {
            return -EINVAL;
        }
    }
    if (n == 0) {
        return 0;
    }
    w = calloc(n, sizeof(*w));
    wr = calloc(n, sizeof(*wr));
    if (w == NULL || wr == NULL) {
        free(w);
        free(wr);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        w[i].op = RL_WIRE_OP_CHECK;
        w[i].service.ptr = reqs[i].service;
        w[i].service.len = (uint32_t)strlen(reqs[i].service);
        w[i].user.ptr = reqs[i].user;
        w[i].user.len = (uint32_t)strlen(reqs[i].user);
        if (reqs[i].endpoint != NULL) {
            w[i].endpoint.ptr = reqs[i].endpoint;
            w[i].endpoint.len = (uint32_t)strlen(reqs[i].endpoint);
        }
        w[i].cost = reqs[i].cost;
    }
    rc = ensure(c, deadline);
    if (rc == 0) {
        rc = settle(c, rl_client_check_many(c->c, w, n, wr, left_ms(deadline)));
    }
    if (rc == 0) {
        for (size_t i = 0; i < n; i++) {
            if (wr[i].code == RL_CLIENT_CODE_ERROR) {
                error_reply((uint32_t)wr[i].limit, &reps[i]);
                if (wr[i].limit == RL_WIRE_ERR_UNAUTHORIZED && c->c != NULL) {
                    drop(c); /* refused: the server closes the connection */
                }
            } else {
                from_wire(&wr[i], &reps[i]);
            }
        }
    }
    free(w);
    free(wr);
    return rc;
}

int
rlc_ping(rlc_client *c, char *name, size_t namelen, int timeout_ms)
{
    int64_t deadline = deadline_after(timeout_ms);
    int rc;

    if (c == NULL) {
        return -EINVAL;
    }
    rc = ensure(c, deadline);
    if (rc != 0) {
        return rc;
    }
    rc = rl_client_ping(c->c, &c->rep, left_ms(deadline));
    if (rc == 0 && c->rep.op == RL_WIRE_OP_ERROR) {
        return remote_error(c);
    }
    if (rc == 0 && name != NULL && namelen > 0) {
        size_t len = c->rep.name.ptr != NULL ? c->rep.name.len : 0;

        if (len > namelen - 1) {
            len = namelen - 1;
        }
        memcpy(name, c->rep.name.ptr != NULL ? c->rep.name.ptr : "", len);
        name[len] = '\0';
    }
    return settle(c, rc);
}

int
rlc_connected(const rlc_client *c)
{
    return c != NULL && c->c != NULL;
}

uint64_t
rlc_connects(const rlc_client *c)
{
    return c != NULL ? c->connects : 0;
}

/* ---- names ---------------------------------------------------------------------------- */

const char *
rlc_code_name(uint32_t code)
{
    static const char *const names[] = {"ALLOWED",     "LIMITED", "FAIL_OPEN",
                                        "FAIL_CLOSED", "NO_RULE", "QUEUED"};

    if (code < sizeof(names) / sizeof(names[0])) {
        return names[code];
    }
    return code == RLC_CODE_ERROR ? "ERROR" : "?";
}

const char *
rlc_error_name(uint32_t err)
{
    static const char *const names[] = {"NONE",       "MALFORMED",    "UNKNOWN_OP", "BAD_FIELD",
                                        "OVERLOADED", "UNAUTHORIZED", "NOT_OWNER",  "MOVING"};

    return err < sizeof(names) / sizeof(names[0]) ? names[err] : "?";
}

const char *
rlc_strerror(int rc)
{
    switch (-rc) {
    case 0:
        return "success";
    case EINVAL:
        return "invalid argument";
    case ENOMEM:
        return "out of memory";
    case ETIMEDOUT:
        return "timed out";
    case ECONNREFUSED:
        return "connection refused";
    case ECONNRESET:
        return "connection lost (the request may have been counted)";
    case EPIPE:
        return "connection lost";
    case EPROTO:
        return "protocol error (the stream was dropped)";
    case EREMOTEIO:
        return "the server answered ERROR";
    case EACCES:
        return "access denied (token refused, or file mode too open)";
    case ENOENT:
        return "no such file";
    case ENXIO:
        return "host name does not resolve";
    case EHOSTUNREACH:
        return "host unreachable";
    case ENETUNREACH:
        return "network unreachable";
    case EAGAIN:
        return "temporary failure, try again";
    case ENOBUFS:
        return "too many requests pending (queue full)";
    case ESHUTDOWN:
        return "the client is closing";
    case ECANCELED:
        return "cancelled (the client was closed)";
    case ENOSPC:
        return "buffer too small";
    default:
        return "unknown error";
    }
}
