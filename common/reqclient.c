/*
 * reqclient: the transport of the request client (reqclient.h), a blocking client of the
 * wire protocol over one TCP connection, with TLS beneath when asked. The socket is
 * non-blocking underneath and every wait is a poll(2) bounded by the caller's deadline, so
 * no call can hang past its timeout. While it writes it also reads, so a large pipelined
 * batch cannot deadlock against a server that is blocked writing replies we have not read.
 * Frames go out as queued bytes and come back as decoded replies (rl_client_queue, _flush,
 * _recv); the typed calls on top are reqclient_calls.c's (reqclient_int.h), as hiredis
 * keeps net.c apart from hiredis.c. Not for the router's or the node's event loops, and not
 * thread-safe.
 */
#include "reqclient.h"

#include "reqclient_int.h"

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

/* Bytes queued and not yet taken by the socket. */
static size_t
out_pending(const struct rl_client *c)
{
    return rl_buf_unread(&c->out) + (c->tls != NULL ? rl_buf_unread(&c->ct) : 0);
}

int64_t
client_deadline_after(int timeout_ms)
{
    if (timeout_ms < 0) {
        return -1;
    }
    return (int64_t)rl_clock_mono_ns() + (int64_t)timeout_ms * 1000000;
}

bool
client_expired(int64_t deadline)
{
    return deadline >= 0 && (int64_t)rl_clock_mono_ns() >= deadline;
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
    int64_t deadline = client_deadline_after(timeout_ms);
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

static int tls_failed(struct rl_client *c);
static int read_some(struct rl_client *c);

int
rl_client_start_tls(struct rl_client *c, struct rl_tls_ctx *ctx, int timeout_ms, char *why,
                    size_t whylen)
{
    int64_t deadline = client_deadline_after(timeout_ms);
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
        rc = client_write_some(c);
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
    rc = client_flush_until(c, deadline);
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
void
client_release_held(struct rl_client *c)
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

int
client_write_some(struct rl_client *c)
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
int
client_pump(struct rl_client *c, int64_t deadline)
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
        int wrc = client_write_some(c);

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
        rc = client_pump(c, deadline);
        if (rc != 0 && rc != -ECONNRESET) {
            return rc;
        }
        if (rc == -ECONNRESET && c->rd_err == 0) {
            c->rd_err = rc;
        }
    }
}

int
client_flush_until(struct rl_client *c, int64_t deadline)
{
    int rc;

    while (out_pending(c) > 0) {
        rc = client_write_some(c);
        if (rc != 0) {
            return rc;
        }
        if (out_pending(c) == 0) {
            break;
        }
        rc = client_pump(c, deadline);
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
    client_release_held(c);
    return client_flush_until(c, client_deadline_after(timeout_ms));
}

/* Takes the next frame and decodes it into *rep; the frame stays held until the next call. */
int
client_recv_until(struct rl_client *c, struct rl_wire_reply *rep, int64_t deadline)
{
    const char *p;
    size_t len;
    int rc;

    client_release_held(c);
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
    return client_recv_until(c, rep, client_deadline_after(timeout_ms));
}
