/*
 * reqclient: a blocking request client of the wire protocol over one TCP connection. The socket is
 * non-blocking underneath and every wait is a poll(2) bounded by the caller's deadline, so
 * no call can hang past its timeout. While it writes it also reads, so a large pipelined
 * batch cannot deadlock against a server that is blocked writing replies we have not read.
 * Not for the router's or the node's event loops, and not thread-safe.
 */
#include "reqclient.h"

#include "auth.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "parse.h"
#include "tls.h"

/* Bytes asked of each recv(2): a few hundred CHECK replies, and more than a largest frame. */
#define CLIENT_READ_CHUNK (64u * 1024)

/*
 * Ids of the single-request calls start here and stay in the upper half of the id space,
 * so a late reply to one of them cannot be mistaken for one of check_many's (ids 1..n).
 */
#define CLIENT_ID_BASE 0x80000000u

struct rl_client {
    int fd;
    int rd_err;       /* set once the peer closed or the stream broke: reads are over */
    int wr_err;       /* set once a write failed: writes are over */
    uint32_t next_id; /* for the single-request calls */
    size_t held;      /* bytes of the frame recv returned last, dropped on the next call */
    struct rl_buf in;
    struct rl_buf out;
    struct rl_wire_decoder dec;
    struct rl_wire_reply scratch; /* check_many decodes here: the struct is large */
    struct rl_tls *tls; /* NULL: plain TCP (rl_client_start_tls) */
    struct rl_buf ct;   /* TLS: ciphertext not yet sent; what c->out held, encrypted */
    char *raw;          /* TLS: CLIENT_READ_CHUNK, where ciphertext is received */
    char tls_why[256];  /* TLS: why the handshake or a record failed */
};

/* Bytes queued and not yet taken by the socket. */
static size_t
out_pending(const struct rl_client *c)
{
    return rl_buf_unread(&c->out) + (c->tls != NULL ? rl_buf_unread(&c->ct) : 0);
}

static int64_t
deadline_after(int timeout_ms)
{
    if (timeout_ms < 0) {
        return -1;
    }
    return (int64_t)rl_clock_mono_ns() + (int64_t)timeout_ms * 1000000;
}

/* What is left of a deadline as a poll(2) timeout: -1 for none, rounded up to whole ms. */
static int
poll_timeout(int64_t deadline)
{
    int64_t left;

    if (deadline < 0) {
        return -1;
    }
    left = deadline - (int64_t)rl_clock_mono_ns();
    if (left <= 0) {
        return 0;
    }
    left = (left + 999999) / 1000000;
    return left > INT_MAX ? INT_MAX : (int)left;
}

/* Waits for events on fd; returns the revents, -ETIMEDOUT, or a negative errno. */
static int
wait_fd(int fd, short events, int64_t deadline)
{
    struct pollfd pfd;
    int rc;

    for (;;) {
        pfd.fd = fd;
        pfd.events = events;
        pfd.revents = 0;
        rc = poll(&pfd, 1, poll_timeout(deadline));
        if (rc > 0) {
            return pfd.revents;
        }
        if (rc == 0) {
            return -ETIMEDOUT;
        }
        if (errno != EINTR) {
            return -errno;
        }
    }
}

static int
connect_one(const struct addrinfo *ai, int64_t deadline, int *out)
{
    int fd, rc, soerr, one = 1;
    socklen_t len = sizeof(soerr);

    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -errno;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            rc = -errno;
            goto fail;
        }
        rc = wait_fd(fd, POLLOUT, deadline);
        if (rc < 0) {
            goto fail;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0) {
            rc = -errno;
            goto fail;
        }
        if (soerr != 0) {
            rc = -soerr;
            goto fail;
        }
    }
    /* Requests are small and latency is the point: never wait to coalesce them. */
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
        rc = -errno;
        goto fail;
    }
    *out = fd;
    return 0;

fail:
    close(fd);
    return rc;
}

static int
gai_errno(int rc)
{
    switch (rc) {
    case EAI_NONAME:
#ifdef EAI_NODATA
    case EAI_NODATA:
#endif
    case EAI_FAMILY:
        return -ENXIO;
    case EAI_AGAIN:
        return -EAGAIN;
    case EAI_MEMORY:
        return -ENOMEM;
    case EAI_SYSTEM:
        return errno ? -errno : -EIO;
    default:
        return -EINVAL;
    }
}

int
rl_client_connect(struct rl_client **out, const char *host, uint16_t port, int timeout_ms)
{
    struct addrinfo hints, *res = NULL, *ai;
    struct rl_client *c = NULL;
    char service[8];
    int64_t deadline = deadline_after(timeout_ms);
    int fd = -1, rc;

    *out = NULL;
    if (host == NULL || *host == '\0' || port == 0) {
        return -EINVAL;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    snprintf(service, sizeof(service), "%u", (unsigned)port);
    rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        return gai_errno(rc);
    }
    /* Try every address in turn ("localhost" is often ::1 then 127.0.0.1), sharing one
     * deadline; report the last failure. */
    rc = -EHOSTUNREACH;
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        rc = connect_one(ai, deadline, &fd);
        if (rc == 0 || rc == -ETIMEDOUT) {
            break;
        }
    }
    freeaddrinfo(res);
    if (rc != 0) {
        return rc;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    rc = rl_wire_decoder_init(&c->dec);
    if (rc != 0) {
        goto fail;
    }
    c->fd = fd;
    c->next_id = CLIENT_ID_BASE;
    rl_buf_init(&c->in);
    rl_buf_init(&c->out);
    rl_buf_init(&c->ct);
    *out = c;
    return 0;

fail:
    free(c);
    close(fd);
    return rc;
}

int
rl_client_connect_addr(struct rl_client **out, const char *hostport, int timeout_ms)
{
    char *host = NULL;
    uint16_t port;
    int rc;

    *out = NULL;
    /* The one HOST:PORT / [IPV6]:PORT parser of the tree (parse.h). */
    if (hostport == NULL || rl_parse_hostport(hostport, &host, &port) != NULL) {
        return -EINVAL;
    }
    rc = rl_client_connect(out, host, port, timeout_ms);
    free(host);
    return rc;
}

void
rl_client_destroy(struct rl_client *c)
{
    if (c == NULL) {
        return;
    }
    close(c->fd);
    rl_wire_decoder_deinit(&c->dec);
    rl_buf_deinit(&c->in);
    rl_buf_deinit(&c->out);
    rl_buf_deinit(&c->ct);
    rl_tls_free(c->tls);
    free(c->raw);
    free(c);
}

int
rl_client_fd(const struct rl_client *c)
{
    return c->fd;
}

static int flush_until(struct rl_client *c, int64_t deadline);
static int tls_failed(struct rl_client *c);
static int read_some(struct rl_client *c);
static int write_some(struct rl_client *c);

int
rl_client_start_tls(struct rl_client *c, struct rl_tls_ctx *ctx, int timeout_ms, char *why,
                    size_t whylen)
{
    int64_t deadline = deadline_after(timeout_ms);
    int rc;

    if (c->tls != NULL) {
        return -EALREADY;
    }
    c->raw = malloc(CLIENT_READ_CHUNK);
    c->tls = c->raw != NULL ? rl_tls_new(ctx) : NULL;
    if (c->tls == NULL) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    if (rl_tls_start(c->tls) != 0) {
        rc = tls_failed(c);
        goto fail;
    }
    while (!rl_tls_established(c->tls)) {
        rc = write_some(c);
        if (rc == 0) {
            short ev = POLLIN | (rl_buf_unread(&c->ct) > 0 ? POLLOUT : 0);

            rc = wait_fd(c->fd, ev, deadline);
            if (rc >= 0) {
                rc = read_some(c) < 0 ? -ENOMEM : 0;
            }
        }
        if (rc == 0 && c->rd_err != 0 && !rl_tls_established(c->tls)) {
            rc = c->rd_err;
            if (rc == -ECONNRESET) {
                snprintf(c->tls_why, sizeof(c->tls_why),
                         "the server closed the connection during the TLS handshake (a "
                         "certificate it refused, or a port without TLS?)");
            }
        }
        if (rc != 0) {
            goto fail;
        }
    }
    /* A TLS 1.3 client's last handshake message (and its certificate) leaves now. */
    rc = flush_until(c, deadline);
    if (rc != 0) {
        goto fail;
    }
    return 0;

fail:
    snprintf(why, whylen, "%s",
             c->tls_why[0] != '\0' ? c->tls_why
             : rc == -ETIMEDOUT     ? "TLS handshake timed out"
                                    : strerror(-rc));
    return rc;
}

const char *
rl_client_tls_why(const struct rl_client *c)
{
    return c->tls_why[0] != '\0' ? c->tls_why : NULL;
}

/* Drops the frame the last recv returned: its strings were valid until this call. */
static void
release_held(struct rl_client *c)
{
    c->in.pos += c->held;
    c->held = 0;
    if (c->in.pos == c->in.len) {
        rl_buf_reset(&c->in);
    }
}

/* TLS: what the handshake or a record failed with, kept for rl_client_tls_why. */
static int
tls_failed(struct rl_client *c)
{
    snprintf(c->tls_why, sizeof(c->tls_why), "%s", rl_tls_why(c->tls));
    return -EPROTO;
}

/* One recv of at most cap bytes into dst. Returns the bytes read, or 0 when there are none:
 * nothing yet, or the stream is over (rd_err set: -ECONNRESET when the peer is gone). */
static ssize_t
recv_some(struct rl_client *c, void *dst, size_t cap)
{
    ssize_t n;

    for (;;) {
        n = recv(c->fd, dst, cap, 0);
        if (n > 0) {
            return n;
        }
        if (n == 0) {
            c->rd_err = -ECONNRESET;
            return 0;
        }
        if (errno == EINTR) {
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return 0;
        }
        c->rd_err = (errno == EPIPE || errno == ECONNRESET) ? -ECONNRESET : -errno;
        return 0;
    }
}

/* read_some under TLS: ciphertext received, decrypted into c->in. A broken record or a
 * refused certificate (the server's alert) becomes rd_err = -EPROTO. */
static int
read_some_tls(struct rl_client *c)
{
    ssize_t n;
    int total = 0, got;

    n = recv_some(c, c->raw, CLIENT_READ_CHUNK);
    if (n == 0) {
        return 0;
    }
    if (rl_tls_feed(c->tls, c->raw, (size_t)n) != 0) {
        return -ENOMEM;
    }
    for (;;) {
        if (rl_buf_reserve(&c->in, CLIENT_READ_CHUNK) != 0) {
            return -ENOMEM;
        }
        got = rl_tls_read(c->tls, c->in.data + c->in.len, c->in.cap - c->in.len);
        if (got < 0) {
            c->rd_err = tls_failed(c);
            break;
        }
        if (got == 0) {
            break;
        }
        c->in.len += (size_t)got;
        total += got;
    }
    if (rl_tls_take_buf(c->tls, &c->ct) != 0) { /* what the TLS layer answers, if anything */
        return -ENOMEM;
    }
    return total;
}

/* Reads what the socket has. Returns bytes read (0 when none yet) or a negative errno; the
 * peer's close becomes rd_err = -ECONNRESET, reported once the buffered frames are used up. */
static int
read_some(struct rl_client *c)
{
    ssize_t n;
    int rc;

    /* Compacting only when the consumed part is at least the unread tail keeps the memmoves
     * amortised O(1) per byte even while a big flush buffers replies unread. */
    if (c->in.pos > 0 && c->in.pos >= rl_buf_unread(&c->in)) {
        rl_buf_compact(&c->in);
    }
    rc = rl_buf_reserve(&c->in, CLIENT_READ_CHUNK);
    if (rc != 0) {
        return rc;
    }
    if (c->tls != NULL) {
        return read_some_tls(c);
    }
    n = recv_some(c, c->in.data + c->in.len, c->in.cap - c->in.len);
    c->in.len += (size_t)n;
    return (int)(n > INT_MAX ? INT_MAX : n);
}

/* Sends what the socket takes of b (emptied once all is sent). Returns 0 or a negative
 * errno, also left in wr_err (-ECONNRESET when the peer is gone). */
static int
send_buf(struct rl_client *c, struct rl_buf *b)
{
    ssize_t n;

    while (rl_buf_unread(b) > 0) {
        n = send(c->fd, b->data + b->pos, rl_buf_unread(b), MSG_NOSIGNAL);
        if (n > 0) {
            b->pos += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return 0;
        }
        c->wr_err = (n == 0 || errno == EPIPE || errno == ECONNRESET) ? -ECONNRESET : -errno;
        return c->wr_err;
    }
    rl_buf_reset(b);
    return 0;
}

/* Writes what the socket takes. Returns 0 or a negative errno (-ECONNRESET when the peer
 * is gone). */
static int
write_some_tls(struct rl_client *c)
{
    if (rl_buf_unread(&c->out) > 0) {
        long took = rl_tls_write(c->tls, c->out.data + c->out.pos, rl_buf_unread(&c->out));

        if (took < 0) {
            c->wr_err = tls_failed(c);
            return c->wr_err;
        }
        c->out.pos += (size_t)took;
        if (rl_buf_unread(&c->out) == 0) {
            rl_buf_reset(&c->out);
        }
    }
    if (rl_tls_take_buf(c->tls, &c->ct) != 0) {
        return -ENOMEM;
    }
    return send_buf(c, &c->ct);
}

static int
write_some(struct rl_client *c)
{
    if (c->tls != NULL) {
        return write_some_tls(c);
    }
    return send_buf(c, &c->out);
}

/*
 * One poll round: writes if anything is queued and reads if the stream is still open.
 * Returns 0 when something may have changed, -ETIMEDOUT, or a negative errno. A read
 * error is not returned here but left in rd_err, because frames already buffered must
 * still be delivered before it.
 */
static int
pump(struct rl_client *c, int64_t deadline)
{
    short events = 0;
    int rc;

    if (c->wr_err != 0 && out_pending(c) > 0) {
        return c->wr_err;
    }
    if (out_pending(c) > 0) {
        events |= POLLOUT;
    }
    if (c->rd_err == 0) {
        events |= POLLIN;
    }
    if (events == 0) {
        return c->rd_err;
    }
    rc = wait_fd(c->fd, events, deadline);
    if (rc < 0) {
        return rc;
    }
    if ((events & POLLOUT) && (rc & (POLLOUT | POLLERR | POLLHUP))) {
        int wrc = write_some(c);

        if (wrc != 0) {
            /* Replies the server sent before it went away are still worth reading. */
            if (c->rd_err == 0) {
                read_some(c);
            }
            return wrc;
        }
    }
    if ((events & POLLIN) && (rc & (POLLIN | POLLERR | POLLHUP))) {
        rc = read_some(c);
        if (rc < 0) {
            return rc;
        }
    }
    return 0;
}

/*
 * Finds the next whole frame in the input, reading (and writing what is queued) until one
 * is there. Returns 0 with *p and *len set (the payload), -ETIMEDOUT, -EPROTO on a bad
 * length prefix (the stream is then unusable), or the error that ended the stream.
 */
static int
next_frame(struct rl_client *c, int64_t deadline, const char **p, size_t *len)
{
    int rc;

    for (;;) {
        rc = rl_wire_frame(c->in.data + c->in.pos, rl_buf_unread(&c->in), len);
        if (rc == 1) {
            *p = c->in.data + c->in.pos + RL_WIRE_HDR_LEN;
            return 0;
        }
        if (rc < 0) {
            c->rd_err = -EPROTO;
            c->in.pos = c->in.len;
            return -EPROTO;
        }
        if (c->rd_err != 0) {
            return c->rd_err;
        }
        rc = pump(c, deadline);
        if (rc != 0 && rc != -ECONNRESET) {
            return rc;
        }
        if (rc == -ECONNRESET && c->rd_err == 0) {
            c->rd_err = rc;
        }
    }
}

static int
flush_until(struct rl_client *c, int64_t deadline)
{
    int rc;

    while (out_pending(c) > 0) {
        rc = write_some(c);
        if (rc != 0) {
            return rc;
        }
        if (out_pending(c) == 0) {
            break;
        }
        rc = pump(c, deadline);
        if (rc != 0) {
            return rc;
        }
        if (c->rd_err != 0 && c->rd_err != -ECONNRESET) {
            return c->rd_err;
        }
    }
    return 0;
}

int
rl_client_queue(struct rl_client *c, const struct rl_wire_req *req)
{
    return rl_wire_put_req(&c->out, req);
}

int
rl_client_queue_raw(struct rl_client *c, const void *p, size_t n)
{
    return rl_buf_append(&c->out, p, n);
}

int
rl_client_flush(struct rl_client *c, int timeout_ms)
{
    release_held(c);
    return flush_until(c, deadline_after(timeout_ms));
}

/* Takes the next frame and decodes it into *rep; the frame stays held until the next call. */
static int
recv_until(struct rl_client *c, struct rl_wire_reply *rep, int64_t deadline)
{
    const char *p;
    size_t len;
    int rc;

    release_held(c);
    rc = next_frame(c, deadline, &p, &len);
    if (rc != 0) {
        return rc;
    }
    c->held = RL_WIRE_HDR_LEN + len;
    rc = rl_wire_decode_reply(&c->dec, p, len, rep);
    return rc == -ENOMEM ? rc : (rc != 0 ? -EPROTO : 0);
}

int
rl_client_recv(struct rl_client *c, struct rl_wire_reply *rep, int timeout_ms)
{
    return recv_until(c, rep, deadline_after(timeout_ms));
}

static uint32_t
take_id(struct rl_client *c)
{
    uint32_t id = c->next_id++;

    if (c->next_id == 0) {
        c->next_id = CLIENT_ID_BASE;
    }
    return id;
}

/*
 * Sends one queued-up request and waits for the reply carrying its id, skipping late
 * replies to earlier calls that timed out. An ERROR with id 0 (the server could not read
 * our id) is taken as the answer. Returns 0 with *rep set, or a negative errno.
 */
static int
call(struct rl_client *c, uint32_t id, uint32_t op, struct rl_wire_reply *rep, int64_t deadline)
{
    int rc;

    rc = flush_until(c, deadline);
    if (rc != 0) {
        return rc;
    }
    for (;;) {
        rc = recv_until(c, rep, deadline);
        if (rc != 0) {
            return rc;
        }
        if (rep->op == RL_WIRE_OP_ERROR && (rep->id == id || rep->id == 0)) {
            return 0;
        }
        if (rep->id == id) {
            return rep->op == op ? 0 : -EPROTO;
        }
    }
}

/* Starts a single request: the frame the last call returned is dropped, req gets op and a
 * fresh id. */
static void
req_begin(struct rl_client *c, struct rl_wire_req *req, uint32_t op)
{
    release_held(c);
    memset(req, 0, sizeof(*req));
    req->op = op;
    req->id = take_id(c);
}

/* Queues req and waits for its reply. */
static int
req_call(struct rl_client *c, const struct rl_wire_req *req, struct rl_wire_reply *rep,
         int64_t deadline)
{
    int rc = rl_client_queue(c, req);

    if (rc != 0) {
        return rc;
    }
    return call(c, req->id, req->op, rep, deadline);
}

static void
set_str(struct rl_wire_str *field, const char *s)
{
    if (s != NULL) {
        field->ptr = s;
        field->len = (uint32_t)strlen(s);
    }
}

int
rl_client_check(struct rl_client *c, const char *service, const char *user, const char *endpoint,
                uint32_t cost, struct rl_wire_reply *rep, int timeout_ms)
{
    return rl_client_check_limit(c, service, user, endpoint, cost, NULL, rep, timeout_ms);
}

int
rl_client_check_limit(struct rl_client *c, const char *service, const char *user,
                      const char *endpoint, uint32_t cost, const struct rl_wire_limit *limit,
                      struct rl_wire_reply *rep, int timeout_ms)
{
    int64_t deadline = deadline_after(timeout_ms);
    struct rl_wire_req req;

    req_begin(c, &req, RL_WIRE_OP_CHECK);
    set_str(&req.service, service);
    set_str(&req.user, user);
    set_str(&req.endpoint, endpoint);
    req.cost = cost;
    if (limit != NULL && limit->set) {
        req.limit = *limit;
    }
    return req_call(c, &req, rep, deadline);
}

static int
simple_call(struct rl_client *c, uint32_t op, uint64_t now_ms, struct rl_wire_reply *rep,
            int timeout_ms)
{
    int64_t deadline = deadline_after(timeout_ms);
    struct rl_wire_req req;

    req_begin(c, &req, op);
    req.now_ms = now_ms;
    return req_call(c, &req, rep, deadline);
}

int
rl_client_ping(struct rl_client *c, struct rl_wire_reply *rep, int timeout_ms)
{
    return simple_call(c, RL_WIRE_OP_PING, 0, rep, timeout_ms);
}

int
rl_client_auth(struct rl_client *c, const char *token, size_t len, struct rl_wire_reply *rep,
               int timeout_ms)
{
    int64_t deadline = deadline_after(timeout_ms);
    struct rl_wire_req req;
    int rc;

    req_begin(c, &req, RL_WIRE_OP_AUTH);
    req.token.ptr = token;
    req.token.len = (uint32_t)len;
    rc = req_call(c, &req, rep, deadline);
    if (rc == 0 && rep->op == RL_WIRE_OP_ERROR) {
        return rep->err == RL_WIRE_ERR_UNAUTHORIZED ? -EACCES : -EPROTO;
    }
    return rc;
}

int
rl_client_auth_token_file(const char *path, int (*auth)(void *arg, const char *token, size_t len),
                          void *arg, const char *(*describe)(int rc), char *why, size_t whylen)
{
    char token[RL_AUTH_TOKEN_MAX];
    size_t len;
    int rc;

    if (path == NULL) {
        path = getenv("RL_TOKEN_FILE");
    }
    if (path == NULL || path[0] == '\0') {
        return 0;
    }
    rc = rl_auth_read_secret(path, 1, token, sizeof(token), &len, why, whylen);
    if (rc == 0) {
        rc = auth(arg, token, len);
        if (rc == -EACCES) {
            snprintf(why, whylen, "the server refused the token in %s", path);
        } else if (rc != 0) {
            snprintf(why, whylen, "AUTH failed: %s", describe(rc));
        }
    }
    rl_auth_wipe(token, sizeof(token));
    return rc;
}

/* The timeout of rl_client_auth_file's AUTH, for its callback. */
struct auth_arg {
    struct rl_client *c;
    int timeout_ms;
};

static int
auth_with(void *arg, const char *token, size_t len)
{
    struct auth_arg *a = arg;

    return rl_client_auth(a->c, token, len, &a->c->scratch, a->timeout_ms);
}

static const char *
describe_errno(int rc)
{
    return strerror(-rc);
}

int
rl_client_auth_file(struct rl_client *c, const char *path, int timeout_ms, char *why, size_t whylen)
{
    struct auth_arg a = {c, timeout_ms};

    return rl_client_auth_token_file(path, auth_with, &a, describe_errno, why, whylen);
}

int
rl_client_stats(struct rl_client *c, struct rl_wire_reply *rep, int timeout_ms)
{
    return simple_call(c, RL_WIRE_OP_STATS, 0, rep, timeout_ms);
}

int
rl_client_throttled(struct rl_client *c, const char *service, const uint64_t *since_ms,
                    uint32_t top, struct rl_wire_reply *rep, int timeout_ms)
{
    int64_t deadline = deadline_after(timeout_ms);
    struct rl_wire_req req;

    req_begin(c, &req, RL_WIRE_OP_THROTTLED);
    set_str(&req.service, service);
    if (since_ms != NULL) {
        req.has_since = true;
        req.since_ms = *since_ms;
    }
    req.top = top;
    return req_call(c, &req, rep, deadline);
}

int
rl_client_hot(struct rl_client *c, const char *service, uint32_t top, struct rl_wire_reply *rep,
              int timeout_ms)
{
    int64_t deadline = deadline_after(timeout_ms);
    struct rl_wire_req req;

    req_begin(c, &req, RL_WIRE_OP_HOT);
    set_str(&req.service, service);
    req.top = top;
    return req_call(c, &req, rep, deadline);
}

int
rl_client_clock(struct rl_client *c, uint64_t now_ms, int timeout_ms)
{
    struct rl_wire_reply *rep = &c->scratch;
    int rc;

    rc = simple_call(c, RL_WIRE_OP_CLOCK, now_ms, rep, timeout_ms);
    if (rc != 0) {
        return rc;
    }
    if (rep->op == RL_WIRE_OP_ERROR) {
        return rep->err == RL_WIRE_ERR_UNKNOWN_OP ? -EOPNOTSUPP : -EPROTO;
    }
    return rep->now_ms == now_ms ? 0 : -EPROTO;
}

int64_t
rl_client_stat(const struct rl_wire_reply *rep, const char *key, int64_t def)
{
    size_t klen = strlen(key), i;

    if (rep->op != RL_WIRE_OP_STATS) {
        return def;
    }
    for (i = 0; i < rep->nstats; i++) {
        if (rep->stat_keys[i].len == klen && memcmp(rep->stat_keys[i].ptr, key, klen) == 0) {
            return rep->stat_vals[i];
        }
    }
    return def;
}

/*
 * Files one reply of a check_many batch. Returns 0, 1 for a reply to something else (a
 * late answer to an earlier single call, skipped), or -EPROTO for a reply no request of the
 * batch can own: a duplicate, an ERROR with id 0, or the wrong op.
 */
static int
file_reply(const struct rl_wire_reply *rep, uint8_t *seen, size_t n,
           struct rl_wire_check_reply *reps)
{
    size_t i;

    if (rep->id == 0 || rep->id > n) {
        return rep->id >= CLIENT_ID_BASE ? 1 : -EPROTO;
    }
    i = rep->id - 1;
    if (seen[i / 8] & (1u << (i % 8))) {
        return -EPROTO;
    }
    seen[i / 8] |= (uint8_t)(1u << (i % 8));
    if (rep->op == RL_WIRE_OP_CHECK) {
        reps[i] = rep->check;
        reps[i].id = rep->id;
    } else if (rep->op == RL_WIRE_OP_ERROR) {
        memset(&reps[i], 0, sizeof(reps[i]));
        reps[i].id = rep->id;
        reps[i].code = RL_CLIENT_CODE_ERROR;
        reps[i].limit = rep->err;
    } else {
        return -EPROTO;
    }
    return 0;
}

int
rl_client_check_many(struct rl_client *c, struct rl_wire_req *reqs, size_t n,
                     struct rl_wire_check_reply *reps, int timeout_ms)
{
    int64_t deadline = deadline_after(timeout_ms);
    uint8_t *seen = NULL;
    size_t got = 0, i, len;
    const char *p;
    int rc;

    release_held(c);
    if (n == 0) {
        return 0;
    }
    if (n >= CLIENT_ID_BASE) {
        return -EINVAL;
    }
    seen = calloc(n / 8 + 1, 1);
    if (seen == NULL) {
        return -ENOMEM;
    }
    /* Everything is encoded up front (about 30 bytes a request) and written as the socket
     * takes it; pump() reads between writes, so neither side's buffers can fill for good. */
    for (i = 0; i < n; i++) {
        reqs[i].op = RL_WIRE_OP_CHECK;
        reqs[i].id = (uint32_t)(i + 1);
        rc = rl_wire_put_check(&c->out, &reqs[i]);
        if (rc != 0) {
            goto out;
        }
    }
    rc = write_some(c);
    while (rc == 0 && got < n) {
        for (;;) {
            rc = rl_wire_frame(c->in.data + c->in.pos, rl_buf_unread(&c->in), &len);
            if (rc <= 0) {
                break;
            }
            p = c->in.data + c->in.pos + RL_WIRE_HDR_LEN;
            c->in.pos += RL_WIRE_HDR_LEN + len;
            rc = rl_wire_decode_reply(&c->dec, p, len, &c->scratch);
            if (rc != 0) {
                rc = rc == -ENOMEM ? rc : -EPROTO;
                goto out;
            }
            rc = file_reply(&c->scratch, seen, n, reps);
            if (rc < 0) {
                goto out;
            }
            if (rc == 0) {
                got++;
            }
        }
        if (rc < 0) {
            c->rd_err = -EPROTO;
            goto out;
        }
        if (got == n) {
            break;
        }
        if (c->rd_err != 0) {
            rc = c->rd_err;
            goto out;
        }
        rc = pump(c, deadline);
        if (rc == -ECONNRESET && c->rd_err == 0) {
            /* The write side failed: read what the server sent before it left. */
            c->rd_err = rc;
            rc = 0;
        }
    }

out:
    release_held(c);
    free(seen);
    return rc;
}
