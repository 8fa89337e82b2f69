/*
 * server: the node's connections. One libuv loop thread does everything: read, split
 * frames, decode, judge, encode. Replies of one read batch are gathered in the connection's
 * output buffer and leave in one uv_write, so a pipelining client costs one read and one
 * write per batch instead of one per request. Not for judging (limiter.c) or the codec
 * (wire.c).
 */
#include "server.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "log.h"
#include "wire.h"

/* Room offered to each read; a frame is at most 64 KiB + 4, so one read may complete it. */
#define SERVER_READ_CHUNK (64u * 1024u)
/* Slots of the key table examined per sweep tick, and the tick period. */
#define SERVER_SWEEP_BUDGET 65536u
#define SERVER_SWEEP_MS 100u
/* A key is forgotten once it has been back at full allowance this long, not at once: a key
 * used every few ms would otherwise be deleted and re-inserted over and over, churning the
 * table (docs/BENCHMARKS.md, key churn). Full at now - grace implies full at now, since
 * time without consumption only ever moves a state towards full. */
#define SERVER_SWEEP_GRACE_MS 1000u

struct rl_conn {
    uv_tcp_t tcp;
    uv_write_t wreq;
    struct rl_server *srv;
    struct rl_conn *prev, *next;
    struct rl_buf in;
    struct rl_buf out;      /* replies not yet handed to uv_write */
    struct rl_buf inflight; /* bytes of the write in progress */
    struct rl_wire_decoder dec;
    bool writing;
    bool reading;
    bool close_after_write; /* a framing error was answered: close once it is sent */
    bool eof;               /* the client shut its side: close once the replies are sent */
    bool closing;
};

static void conn_close(struct rl_conn *c);
static void conn_flush(struct rl_conn *c);

/*
 * Drops one handle of s (the listener, the timer, or a connection: each counts in
 * pending_closes from its init to its close callback), so that on_closed runs exactly once,
 * after the last close callback: s->conns empties at uv_close time, before the callbacks.
 */
static void
server_unref(struct rl_server *s)
{
    s->pending_closes--;
    if (s->closing && s->pending_closes == 0 && s->on_closed != NULL) {
        s->on_closed(s);
    }
}

static void
server_handle_closed(uv_handle_t *h)
{
    server_unref(h->data);
}

static void
conn_free(uv_handle_t *h)
{
    struct rl_conn *c = h->data;
    struct rl_server *s = c->srv;

    rl_buf_deinit(&c->in);
    rl_buf_deinit(&c->out);
    rl_buf_deinit(&c->inflight);
    rl_wire_decoder_deinit(&c->dec);
    free(c);
    server_unref(s);
}

static void
conn_close(struct rl_conn *c)
{
    struct rl_server *s = c->srv;

    if (c->closing) {
        return;
    }
    c->closing = true;
    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        s->conns = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    s->stats.connections--;
    uv_close((uv_handle_t *)&c->tcp, conn_free);
}

static void
conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct rl_conn *c = h->data;

    (void)suggested;
    if (rl_buf_reserve(&c->in, SERVER_READ_CHUNK) != 0) {
        buf->base = NULL;
        buf->len = 0;
        return;
    }
    buf->base = c->in.data + c->in.len;
    buf->len = c->in.cap - c->in.len;
}

static void
reply_error(struct rl_conn *c, uint32_t id, uint32_t err, const char *msg)
{
    c->srv->stats.errors++;
    if (rl_wire_put_error(&c->out, id, err, msg) != 0) {
        conn_close(c);
    }
}

static void
reply_stats(struct rl_conn *c, uint32_t id)
{
    struct rl_server *s = c->srv;
    struct rl_limiter_stats ls;
    const char *keys[32];
    int64_t vals[32];
    size_t n = 0;

    rl_limiter_stats(s->limiter, &ls);
#define RL_SERVER_PUT(f, str)                                                                      \
    keys[n] = str;                                                                                 \
    vals[n++] = (int64_t)ls.f;
    RL_LIMITER_STATS_MAP(RL_SERVER_PUT)
    RL_SERVER_PUT(keys, "keys")
    RL_SERVER_PUT(evicted, "evicted")
    RL_SERVER_PUT(expired, "expired")
    RL_SERVER_PUT(memory_bytes, "memory_bytes")
#undef RL_SERVER_PUT
#define RL_SERVER_PUT(f, str)                                                                      \
    keys[n] = str;                                                                                 \
    vals[n++] = (int64_t)s->stats.f;
    RL_SERVER_STATS_MAP(RL_SERVER_PUT)
#undef RL_SERVER_PUT
    keys[n] = "uptime_ms";
    vals[n++] = (int64_t)(uv_now(s->loop) - s->started_ms);
    if (rl_wire_put_stats_reply(&c->out, id, keys, vals, n) != 0) {
        conn_close(c);
    }
}

/* Answers one decoded request into c->out. */
static void
conn_handle(struct rl_conn *c, const struct rl_wire_req *req, uint64_t *now)
{
    struct rl_server *s = c->srv;
    struct rl_wire_check_reply rep;
    int rc = 0;

    switch (req->op) {
    case RL_WIRE_OP_CHECK:
        rl_limiter_check(s->limiter, req, *now, &rep);
        rc = rl_wire_put_check_reply(&c->out, &rep);
        break;
    case RL_WIRE_OP_PING:
        rc = rl_wire_put_ping_reply(&c->out, req->id, s->name);
        break;
    case RL_WIRE_OP_STATS:
        reply_stats(c, req->id);
        break;
    case RL_WIRE_OP_CLOCK:
        if (!s->opts.test_clock) {
            reply_error(c, req->id, RL_WIRE_ERR_UNKNOWN_OP,
                        "op 4 (CLOCK) needs a node started with --test-clock");
            break;
        }
        rl_clock_set(&s->clock, req->now_ms);
        *now = req->now_ms;
        rc = rl_wire_put_clock_reply(&c->out, req->id, req->now_ms);
        break;
    default:
        reply_error(c, req->id, RL_WIRE_ERR_UNKNOWN_OP, "unknown op");
        break;
    }
    if (rc != 0) {
        conn_close(c);
    }
}

/* Replies queued on c, written or not, past which c is answered no more until they drain. */
static bool
conn_backlogged(const struct rl_conn *c)
{
    return rl_buf_unread(&c->out) + rl_buf_unread(&c->inflight) > RL_SERVER_OUT_MAX;
}

/*
 * Decodes and answers the whole frames in c->in until c is backlogged; conn_flush answers
 * the rest once the replies drain. Stopping mid-batch bounds what one read can queue: 64 KiB
 * of 7-byte STATS requests would otherwise be answered with megabytes at once.
 */
static void
conn_process(struct rl_conn *c)
{
    struct rl_server *s = c->srv;
    struct rl_wire_req req;
    struct rl_wire_fault fault;
    uint64_t now = rl_clock_now_ms(&s->clock);
    size_t plen;
    int rc;

    while (!c->closing && !c->close_after_write && !conn_backlogged(c)) {
        const char *p = c->in.data + c->in.pos;
        size_t n = rl_buf_unread(&c->in);

        rc = rl_wire_frame(p, n, &plen);
        if (rc == 0) {
            break;
        }
        if (rc < 0) {
            reply_error(c, 0, RL_WIRE_ERR_MALFORMED, "frame length must be 1..65536");
            c->close_after_write = true;
            break;
        }
        if (rl_wire_decode_req(&c->dec, p + RL_WIRE_HDR_LEN, plen, &req, &fault) == 0) {
            conn_handle(c, &req, &now);
        } else {
            reply_error(c, fault.id, fault.err, fault.msg);
            if (fault.fatal) {
                c->close_after_write = true;
            }
        }
        c->in.pos += RL_WIRE_HDR_LEN + plen;
    }
    rl_buf_compact(&c->in);
}

static void
conn_written(uv_write_t *w, int status)
{
    struct rl_conn *c = w->data;

    c->writing = false;
    rl_buf_reset(&c->inflight);
    if (c->closing) {
        return;
    }
    if (status < 0) {
        conn_close(c);
        return;
    }
    conn_flush(c);
}

static void conn_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

/* Hands queued replies to the kernel, and applies output backpressure to reading. */
static void
conn_flush(struct rl_conn *c)
{
    uv_buf_t b;
    struct rl_buf tmp;

    if (c->closing || c->writing) {
        return;
    }
    if (rl_buf_unread(&c->out) == 0 && !c->reading && !c->close_after_write) {
        /* Frames left in c->in when it backed up are answered before reading any more. */
        conn_process(c);
        if (c->closing) {
            return;
        }
    }
    if (rl_buf_unread(&c->out) == 0) {
        if (c->close_after_write || c->eof) {
            conn_close(c);
            return;
        }
        if (!c->reading) {
            c->reading = uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_read) == 0;
        }
        return;
    }
    /* Swap buffers so replies produced while this write is in flight go to a fresh one. */
    tmp = c->inflight;
    c->inflight = c->out;
    c->out = tmp;
    b = uv_buf_init(c->inflight.data + c->inflight.pos, (unsigned)rl_buf_unread(&c->inflight));
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, conn_written) != 0) {
        conn_close(c);
        return;
    }
    c->writing = true;
}

static void
conn_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct rl_conn *c = stream->data;

    (void)buf;
    if (nread == UV_EOF) {
        /* A half-closed client still gets the replies being written (libuv stopped reading);
         * conn_flush closes once they are out. */
        c->eof = true;
        c->reading = false;
        conn_flush(c);
        return;
    }
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (nread == 0) {
        return;
    }
    c->in.len += (size_t)nread;
    conn_process(c);
    if (c->closing) {
        return;
    }
    if (c->close_after_write || conn_backlogged(c)) {
        /* The client reads slower than it asks: stop reading until the replies drain. */
        uv_read_stop(stream);
        c->reading = false;
    }
    conn_flush(c);
}

static void
server_accept(uv_stream_t *listener, int status)
{
    struct rl_server *s = listener->data;
    struct rl_conn *c;

    if (status < 0 || s->closing) {
        return;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL || rl_wire_decoder_init(&c->dec) != 0) {
        free(c);
        return;
    }
    c->srv = s;
    rl_buf_init(&c->in);
    rl_buf_init(&c->out);
    rl_buf_init(&c->inflight);
    uv_tcp_init(s->loop, &c->tcp);
    c->tcp.data = c;
    s->pending_closes++;
    c->next = s->conns;
    if (s->conns != NULL) {
        s->conns->prev = c;
    }
    s->conns = c;
    s->stats.connections++;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    s->stats.connections_total++;
    uv_tcp_nodelay(&c->tcp, 1);
    if (s->stats.connections > s->opts.max_connections) {
        /* Refuse politely: one ERROR the client can read, then close. */
        s->stats.connections_refused++;
        reply_error(c, 0, RL_WIRE_ERR_OVERLOADED, "too many connections");
        c->close_after_write = true;
        conn_flush(c);
        return;
    }
    c->reading = uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_read) == 0;
    if (!c->reading) {
        conn_close(c);
    }
}

static void
server_sweep(uv_timer_t *t)
{
    struct rl_server *s = t->data;
    uint64_t now = rl_clock_now_ms(&s->clock);

    if (now > SERVER_SWEEP_GRACE_MS) {
        rl_limiter_sweep(s->limiter, now - SERVER_SWEEP_GRACE_MS, SERVER_SWEEP_BUDGET);
    }
}

int
rl_server_start(struct rl_server *s, uv_loop_t *loop, struct rl_limiter *limiter,
                const struct rl_server_opts *opts)
{
    struct sockaddr_storage addr;
    int rc;

    memset(s, 0, sizeof(*s));
    s->loop = loop;
    s->limiter = limiter;
    s->opts = *opts;
    if (s->opts.max_connections == 0) {
        s->opts.max_connections = RL_SERVER_MAX_CONNECTIONS;
    }
    snprintf(s->name, sizeof(s->name), "%s", opts->name);
    s->opts.name = s->name;
    rl_clock_init(&s->clock);
    s->started_ms = uv_now(loop);

    rc = uv_ip4_addr(opts->host, opts->port, (struct sockaddr_in *)&addr);
    if (rc != 0) {
        rc = uv_ip6_addr(opts->host, opts->port, (struct sockaddr_in6 *)&addr);
    }
    if (rc != 0) {
        return rc;
    }
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    s->pending_closes++;
    rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0);
    if (rc == 0) {
        rc = uv_listen((uv_stream_t *)&s->listener, 1024, server_accept);
    }
    uv_timer_init(loop, &s->sweep_timer);
    s->sweep_timer.data = s;
    s->pending_closes++;
    if (rc != 0) {
        s->closing = true;
        uv_close((uv_handle_t *)&s->listener, server_handle_closed);
        uv_close((uv_handle_t *)&s->sweep_timer, server_handle_closed);
        return rc;
    }
    uv_timer_start(&s->sweep_timer, server_sweep, SERVER_SWEEP_MS, SERVER_SWEEP_MS);
    return 0;
}

void
rl_server_close(struct rl_server *s, void (*on_closed)(struct rl_server *s))
{
    if (s->closing) {
        return;
    }
    s->closing = true;
    s->on_closed = on_closed;
    uv_close((uv_handle_t *)&s->listener, server_handle_closed);
    uv_close((uv_handle_t *)&s->sweep_timer, server_handle_closed);
    while (s->conns != NULL) {
        conn_close(s->conns);
    }
}
