/*
 * conn: the framed libuv connection of conn.h. One state machine for every connection:
 *
 *   reading --(queued output > out_max, or holds >= hold_max)--> paused
 *   paused  --(both back to half their bound: leftover frames processed)--> reading
 *   any     --(peer EOF, rl_conn_finish, refusal, protocol error)--> finishing
 *   finishing --(output written, nothing held)--> closed
 *
 * Writes happen at the end of the read that produced them, and otherwise in connq_flush (a
 * uv_check, after the loop's I/O) or when the previous write completes, so the replies to
 * one read leave in one uv_write, and output produced elsewhere (the router's replies from
 * nodes) is gathered per connection for the loop turn; the flush is also where paused
 * connections resume and finished ones close.
 */
#include "conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "log.h"
#include "wire.h"

static void conn_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);
static void conn_flush(struct rl_conn *c);

/* ---- the flusher ------------------------------------------------------------------------ */

static void
connq_flush(uv_check_t *h)
{
    struct rl_connq *q = h->data;

    /* Flushing a connection may process frames it had left unread, which dirties others
     * (the router forwards them to nodes): drain until nothing is dirty. */
    while (q->dirty != NULL) {
        struct rl_conn *c = q->dirty;

        q->dirty = c->dirty_next;
        c->dirty_next = NULL;
        c->dirty = false;
        conn_flush(c);
    }
    uv_idle_stop(&q->idle);
}

static void
connq_idle(uv_idle_t *h)
{
    (void)h; /* only there to keep poll from blocking while connections are dirty */
}

static void
connq_handle_closed(uv_handle_t *h)
{
    struct rl_connq *q = h->data;

    if (--q->handles == 0 && q->on_closed != NULL) {
        q->on_closed(q->data);
    }
}

int
rl_connq_init(struct rl_connq *q, uv_loop_t *loop)
{
    int rc;

    memset(q, 0, sizeof(*q));
    q->loop = loop;
    rc = uv_check_init(loop, &q->check);
    if (rc != 0) {
        return rc;
    }
    q->check.data = q;
    uv_idle_init(loop, &q->idle);
    q->idle.data = q;
    q->handles = 2;
    rc = uv_check_start(&q->check, connq_flush);
    /* The flusher alone must not keep the loop alive. */
    uv_unref((uv_handle_t *)&q->check);
    uv_unref((uv_handle_t *)&q->idle);
    return rc;
}

void
rl_connq_close(struct rl_connq *q, void (*on_closed)(void *data), void *data)
{
    if (q->closing) {
        return;
    }
    q->closing = true;
    q->on_closed = on_closed;
    q->data = data;
    uv_close((uv_handle_t *)&q->check, connq_handle_closed);
    uv_close((uv_handle_t *)&q->idle, connq_handle_closed);
}

/* ---- one connection --------------------------------------------------------------------- */

static void
conn_setup(struct rl_conn *c, struct rl_connq *q, const struct rl_conn_ops *ops, void *data)
{
    c->q = q;
    c->ops = ops;
    c->data = data;
    rl_buf_init(&c->in);
    rl_buf_init(&c->out);
    rl_buf_init(&c->inflight);
    c->out_max = RL_CONN_OUT_MAX;
    c->hold_max = RL_CONN_HOLD_MAX;
    snprintf(c->peer, sizeof(c->peer), "?");
}

void
rl_conn_init(struct rl_conn *c, struct rl_connq *q, const struct rl_conn_ops *ops, void *data)
{
    memset(c, 0, sizeof(*c));
    conn_setup(c, q, ops, data);
}

void
rl_conn_deinit(struct rl_conn *c)
{
    rl_buf_deinit(&c->in);
    rl_buf_deinit(&c->out);
    rl_buf_deinit(&c->inflight);
}

static void
conn_peer_name(struct rl_conn *c)
{
    struct sockaddr_storage sa;
    int len = sizeof(sa);
    char ip[INET6_ADDRSTRLEN];

    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &len) != 0) {
        return;
    }
    if (sa.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&sa;

        uv_ip6_name(a, ip, sizeof(ip));
        snprintf(c->peer, sizeof(c->peer), "[%s]:%u", ip, ntohs(a->sin6_port));
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&sa;

        uv_ip4_name(a, ip, sizeof(ip));
        snprintf(c->peer, sizeof(c->peer), "%s:%u", ip, ntohs(a->sin_port));
    }
}

static void
listener_unref(struct rl_listener *l)
{
    l->handles--;
    if (l->closing && l->handles == 0 && l->on_closed != NULL) {
        l->on_closed(l);
    }
}

static void
conn_closed(uv_handle_t *h)
{
    struct rl_conn *c = h->data;
    struct rl_listener *l = c->listener;

    rl_buf_reset(&c->in);
    rl_buf_reset(&c->out);
    rl_buf_reset(&c->inflight);
    c->holds = 0;
    c->writing = false;
    c->eof = false;
    c->finishing = false;
    if (c->ops->on_closed != NULL) {
        c->ops->on_closed(c);
    }
    if (l != NULL) {
        rl_conn_deinit(c);
        free(c);
        listener_unref(l);
    }
}

void
rl_conn_close(struct rl_conn *c, int status)
{
    struct rl_listener *l = c->listener;

    if (!c->open) {
        return;
    }
    c->open = false;
    c->connected = false;
    c->reading = false;
    c->close_status = status;
    if (l != NULL) {
        if (c->prev != NULL) {
            c->prev->next = c->next;
        } else {
            l->conns = c->next;
        }
        if (c->next != NULL) {
            c->next->prev = c->prev;
        }
        c->prev = c->next = NULL;
        l->stats.connections--;
    }
    if (c->ops->on_close != NULL) {
        c->ops->on_close(c, status);
    }
    /* A write in progress is cancelled (its callback runs first); the buffers it points
     * into are emptied only in conn_closed. */
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

void
rl_conn_mark(struct rl_conn *c)
{
    if (c->dirty || !c->open) {
        return;
    }
    if (c->q->dirty == NULL && !c->q->closing) {
        uv_idle_start(&c->q->idle, connq_idle);
    }
    c->dirty = true;
    c->dirty_next = c->q->dirty;
    c->q->dirty = c;
}

static void
conn_pause(struct rl_conn *c)
{
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

void
rl_conn_finish(struct rl_conn *c)
{
    if (!c->open) {
        return;
    }
    c->finishing = true;
    conn_pause(c);
    rl_conn_mark(c);
}

void
rl_conn_refuse(struct rl_conn *c, uint32_t err, const char *msg)
{
    if (rl_wire_put_error(&c->out, 0, err, msg) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    rl_conn_finish(c);
}

void
rl_conn_hold(struct rl_conn *c)
{
    c->holds++;
}

void
rl_conn_release(struct rl_conn *c)
{
    if (c->holds > 0) {
        c->holds--;
    }
    /* The flush decides whether c resumes reading or, finishing, closes. */
    rl_conn_mark(c);
}

/* ---- protocol errors ---------------------------------------------------------------------- */

/* What the first bytes of a stream that broke the protocol look like, for the warning. */
static const char *
conn_sniff(const char *p, size_t n)
{
    static const char *const http[] = {"GET ", "POST", "PUT ", "HEAD", "DELE", "OPTI",
                                       "PATC", "CONN", "TRAC", "PRI "};

    if (n >= 2 && (unsigned char)p[0] == 0x16 && (unsigned char)p[1] == 0x03) {
        return " (the bytes look like a TLS handshake: this port speaks the ratelimiter binary "
               "protocol, in clear)";
    }
    for (size_t i = 0; n >= 4 && i < sizeof(http) / sizeof(http[0]); i++) {
        if (memcmp(p, http[i], 4) == 0) {
            return " (the bytes look like an HTTP request: this port speaks the ratelimiter "
                   "binary protocol, docs/PROTOCOL.md)";
        }
    }
    return "";
}

/* True when a protocol error from c's peer address should be logged at warn now. */
static bool
listener_should_warn(struct rl_listener *l, const struct rl_conn *c)
{
    const char *colon = strrchr(c->peer, ':');
    size_t len = colon != NULL ? (size_t)(colon - c->peer) : strlen(c->peer);
    uint64_t h = XXH3_64bits(c->peer, len);
    struct rl_listener_warned *w = &l->warned[h % RL_CONN_WARN_PEERS];
    uint64_t now = uv_now(c->q->loop);

    if (w->peer_hash == h && w->at_ms != 0 && now - w->at_ms < RL_CONN_WARN_INTERVAL_MS) {
        return false;
    }
    w->peer_hash = h;
    w->at_ms = now != 0 ? now : 1;
    return true;
}

void
rl_conn_protocol_error(struct rl_conn *c, uint32_t id, uint32_t err, const char *msg,
                       const char *p, size_t n)
{
    struct rl_listener *l = c->listener;

    if (!c->open) {
        return;
    }
    if (l == NULL) {
        rl_log_warn("%s: protocol error, closing the connection: %s", c->peer, msg);
        rl_conn_close(c, UV_EPROTO);
        return;
    }
    l->stats.protocol_closes++;
    if (listener_should_warn(l, c)) {
        rl_log_warn("client %s: protocol error, answered and closed: %s%s (further errors from "
                    "this address are logged at debug for a minute)",
                    c->peer, msg, conn_sniff(p, n));
    } else {
        rl_log_debug("client %s: protocol error, answered and closed: %s", c->peer, msg);
    }
    if (rl_wire_put_error(&c->out, id, err, msg) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    rl_conn_finish(c);
}

/* ---- reading ---------------------------------------------------------------------------- */

static void
conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct rl_conn *c = h->data;

    (void)suggested;
    if (rl_buf_reserve(&c->in, RL_CONN_READ_CHUNK) != 0) {
        buf->base = NULL;
        buf->len = 0;
        return;
    }
    buf->base = c->in.data + c->in.len;
    buf->len = c->in.cap - c->in.len;
}

/*
 * Hands the whole frames in c->in to the owner until c is backlogged, finishing or closed;
 * what is left waits for the flush that resumes c. Stopping mid-batch bounds what one read
 * can queue: 64 KiB of 7-byte STATS requests would otherwise be answered with megabytes.
 */
static void
conn_process(struct rl_conn *c)
{
    bool batch = false;
    size_t plen;
    int rc;

    while (c->connected && !c->finishing && !rl_conn_backlogged(c)) {
        const char *p = c->in.data + c->in.pos;
        size_t n = rl_buf_unread(&c->in);

        rc = rl_wire_frame(p, n, &plen);
        if (rc == 0) {
            break;
        }
        if (rc < 0) {
            rl_conn_protocol_error(c, 0, RL_WIRE_ERR_MALFORMED, "frame length must be 1..65536",
                                   p, n);
            break;
        }
        if (!batch && c->ops->on_batch != NULL) {
            c->ops->on_batch(c);
            batch = true;
        }
        /* The payload stays valid even if on_frame closes c: buffers live until conn_closed. */
        c->in.pos += RL_WIRE_HDR_LEN + plen;
        c->ops->on_frame(c, p + RL_WIRE_HDR_LEN, plen);
    }
    if (c->open) {
        rl_buf_compact(&c->in);
    }
}

static void
conn_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct rl_conn *c = stream->data;
    bool was_dirty = c->dirty;

    (void)buf;
    if (nread == UV_EOF && c->listener != NULL) {
        /* A half-closed client still gets the replies to what it sent (libuv stopped
         * reading); the flush closes once they are out. */
        c->eof = true;
        c->reading = false;
        rl_conn_mark(c);
        return;
    }
    if (nread < 0) {
        rl_conn_close(c, (int)nread);
        return;
    }
    if (nread == 0) {
        return;
    }
    c->in.len += (size_t)nread;
    conn_process(c);
    if (c->open && (c->finishing || rl_conn_backlogged(c))) {
        /* The peer asks faster than it reads: stop reading until the output drains. */
        conn_pause(c);
    }
    if (c->dirty && !was_dirty) {
        /* The replies of this read leave now, in one write, rather than after every other
         * connection's batch of the loop turn: a pipelining client gets them a batch
         * earlier (c stays on the dirty list; its flush there finds nothing new). Output
         * that was already waiting (the router's requests to a node, gathered from several
         * clients' reads) keeps waiting for the loop turn's flush, which batches it. */
        conn_flush(c);
    }
}

static int
conn_start_reading(struct rl_conn *c)
{
    int rc = uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_read);

    c->reading = rc == 0;
    return rc;
}

/* ---- writing ---------------------------------------------------------------------------- */

static void
conn_written(uv_write_t *w, int status)
{
    struct rl_conn *c = w->data;

    c->writing = false;
    rl_buf_reset(&c->inflight);
    if (!c->open) {
        return;
    }
    if (status < 0) {
        rl_conn_close(c, status);
        return;
    }
    /* Straight on, not through the dirty list: what piled up meanwhile goes now, and a
     * paused connection resumes without costing the loop another turn. */
    conn_flush(c);
}

static void
conn_flush(struct rl_conn *c)
{
    struct rl_buf tmp;
    uv_buf_t b;

    if (!c->connected) {
        return;
    }
    if (!c->reading && !c->eof && !c->finishing && rl_conn_queued(c) <= c->out_max / 2 &&
        c->holds <= c->hold_max / 2) {
        /* Resume: first the frames read before the pause, then the socket. */
        conn_process(c);
        if (!c->connected) {
            return;
        }
        if (!c->finishing && !rl_conn_backlogged(c) && conn_start_reading(c) != 0) {
            rl_conn_close(c, UV_EIO);
            return;
        }
    }
    if (c->writing) {
        return;
    }
    if (rl_buf_unread(&c->out) == 0) {
        if ((c->finishing || c->eof) && c->holds == 0) {
            rl_conn_close(c, 0);
        }
        return;
    }
    /* Swap buffers so output produced while this write is in flight goes to a fresh one. */
    tmp = c->inflight;
    c->inflight = c->out;
    c->out = tmp;
    b = uv_buf_init(c->inflight.data + c->inflight.pos, (unsigned)rl_buf_unread(&c->inflight));
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, conn_written) != 0) {
        rl_conn_close(c, UV_EIO);
        return;
    }
    c->writing = true;
}

/* ---- outgoing ---------------------------------------------------------------------------- */

static void
conn_connected(uv_connect_t *req, int status)
{
    struct rl_conn *c = req->data;

    if (!c->open) {
        return;
    }
    if (status == 0) {
        uv_tcp_nodelay(&c->tcp, 1);
        status = conn_start_reading(c);
    }
    if (status != 0) {
        if (c->ops->on_connect != NULL) {
            c->ops->on_connect(c, status);
        }
        rl_conn_close(c, status);
        return;
    }
    c->connected = true;
    conn_peer_name(c);
    if (c->ops->on_connect != NULL) {
        c->ops->on_connect(c, 0);
    }
    rl_conn_mark(c);
}

int
rl_conn_connect(struct rl_conn *c, const struct sockaddr *sa)
{
    int rc;

    if (c->open) {
        return UV_EALREADY;
    }
    uv_tcp_init(c->q->loop, &c->tcp);
    c->tcp.data = c;
    c->open = true;
    c->creq.data = c;
    rc = uv_tcp_connect(&c->creq, &c->tcp, sa, conn_connected);
    if (rc != 0) {
        rl_conn_close(c, rc);
    }
    return rc;
}

/* ---- listeners -------------------------------------------------------------------------- */

static void
listener_handle_closed(uv_handle_t *h)
{
    listener_unref(h->data);
}

static void
listener_accept(uv_stream_t *server, int status)
{
    static uint64_t last_warn;
    struct rl_listener *l = server->data;
    struct rl_conn *c;

    if (status < 0) {
        uint64_t now = uv_now(l->q->loop);

        if (now - last_warn >= 1000 || last_warn == 0) {
            last_warn = now != 0 ? now : 1;
            rl_log_warn("accept: %s", uv_strerror(status));
        }
        return;
    }
    if (l->closing) {
        return;
    }
    c = calloc(1, l->conn_size);
    if (c == NULL) {
        rl_log_warn("accept: out of memory");
        return;
    }
    conn_setup(c, l->q, l->ops, l->data);
    c->listener = l;
    uv_tcp_init(l->q->loop, &c->tcp);
    c->tcp.data = c;
    c->open = true;
    l->handles++;
    c->next = l->conns;
    if (l->conns != NULL) {
        l->conns->prev = c;
    }
    l->conns = c;
    l->stats.connections++;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        rl_conn_close(c, UV_ECONNABORTED);
        return;
    }
    l->stats.connections_total++;
    c->connected = true;
    uv_tcp_nodelay(&c->tcp, 1);
    conn_peer_name(c);
    if (l->stats.connections > l->max_connections) {
        /* Refuse politely: one ERROR the client can read, then close. */
        l->stats.connections_refused++;
        rl_conn_refuse(c, RL_WIRE_ERR_OVERLOADED, "too many connections");
        return;
    }
    if (conn_start_reading(c) != 0) {
        rl_conn_close(c, UV_EIO);
    }
}

int
rl_listener_start(struct rl_listener *l, struct rl_connq *q, const char *host, uint16_t port,
                  const struct rl_conn_ops *ops, size_t conn_size, uint32_t max_connections,
                  void *data)
{
    struct sockaddr_storage addr;
    int rc;

    memset(l, 0, sizeof(*l));
    l->q = q;
    l->ops = ops;
    l->conn_size = conn_size < sizeof(struct rl_conn) ? sizeof(struct rl_conn) : conn_size;
    l->data = data;
    l->max_connections = max_connections != 0 ? max_connections : 10000;
    uv_tcp_init(q->loop, &l->tcp);
    l->tcp.data = l;
    l->handles = 1;
    rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
    if (rc != 0) {
        rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr);
    }
    if (rc == 0) {
        rc = uv_tcp_bind(&l->tcp, (const struct sockaddr *)&addr, 0);
    }
    if (rc == 0) {
        rc = uv_listen((uv_stream_t *)&l->tcp, 1024, listener_accept);
    }
    return rc;
}

void
rl_listener_close(struct rl_listener *l, void (*on_closed)(struct rl_listener *l))
{
    if (l->closing) {
        return;
    }
    l->closing = true;
    l->on_closed = on_closed;
    uv_close((uv_handle_t *)&l->tcp, listener_handle_closed);
    while (l->conns != NULL) {
        rl_conn_close(l->conns, 0);
    }
}
