/*
 * conn: the framed libuv connection of conn.h: the loop's flusher, one connection's life
 * (setup, close, pause and per-turn throttling, finish, holds) and its writing side, and
 * outgoing connections. Reading and framing are conn_read.c's; accepting, the limits of a
 * listener (max_connections, per address, the router reserve, timeouts) and the refusals
 * they make are conn_listen.c's; conn_int.h is what the three share. One state machine for
 * every connection:
 *
 *   reading --(queued output > out_max, or holds >= hold_max)--> paused
 *   paused  --(both back to half their bound: leftover frames processed)--> reading
 *   any     --(peer EOF, rl_conn_finish, refusal, protocol error)--> finishing
 *   finishing --(output written, nothing held)--> closed
 *
 * Writes happen at the end of the read that produced them, and otherwise in connq_flush (a
 * uv_check, after the loop's I/O) or when the previous write completes, so the replies to
 * one read leave in one write, and output produced elsewhere (the router's replies from
 * nodes) is gathered per connection for the loop turn; the flush is also where paused
 * connections resume and finished ones close.
 */
#include "conn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn_int.h"
#include "log.h"
#include "tls.h"
#include "wire.h"

/* ---- the flusher ------------------------------------------------------------------------ */

/* Flushes every dirty connection, until none is left (a flush may dirty others). */
static void
connq_drain(struct rl_connq *q)
{
    while (q->dirty != NULL) {
        struct rl_conn *c = q->dirty;

        q->dirty = c->dirty_next;
        c->dirty_next = NULL;
        c->dirty = false;
        conn_flush(c);
    }
}

static void
connq_flush(uv_check_t *h)
{
    struct rl_connq *q = h->data;
    bool hs_waiting = false;

    /* A new turn: connections that spent their input budget in the last one go on, and
     * the turn's handshake budget opens (conn_tls.c). */
    q->turn++;
    conn_hs_turn(q);
    while (q->throttled != NULL) {
        struct rl_conn *c = q->throttled;

        q->throttled = c->throttle_next;
        c->throttle_next = NULL;
        c->throttled = false;
        rl_conn_mark(c);
    }
    /* Flushing a connection may process frames it had left unread, which dirties others
     * (the router forwards them to nodes): drain until nothing is dirty. */
    connq_drain(q);
    /* Then, the turn's decisions made, the TLS handshakes that waited for budget take
     * theirs (what they answer leaves now). */
    if (q->hs_head != NULL) {
        hs_waiting = conn_hs_resume(q);
        connq_drain(q);
    }
    if (q->throttled == NULL && !hs_waiting) {
        uv_idle_stop(&q->idle);
    }
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

    if (--q->handles == 0) {
        free(q->slab);
        q->slab = NULL;
        free(q->tls_slab);
        q->tls_slab = NULL;
        conn_hs_free(q);
        if (q->on_closed != NULL) {
            q->on_closed(q->data);
        }
    }
}

int
rl_connq_init(struct rl_connq *q, uv_loop_t *loop)
{
    int rc;

    memset(q, 0, sizeof(*q));
    q->loop = loop;
    q->client_budget = RL_CONN_DEFAULT_BUFFER_MEMORY;
    q->slab = malloc(RL_CONN_READ_CHUNK);
    if (q->slab == NULL) {
        return UV_ENOMEM;
    }
    rc = uv_check_init(loop, &q->check);
    if (rc != 0) {
        free(q->slab);
        q->slab = NULL;
        return rc;
    }
    q->check.data = q;
    uv_idle_init(loop, &q->idle);
    q->idle.data = q;
    q->handles = 3;
    conn_hs_init(q); /* uv_timer_init cannot fail */
    rc = uv_check_start(&q->check, connq_flush);
    /* The flusher alone must not keep the loop alive. */
    uv_unref((uv_handle_t *)&q->check);
    uv_unref((uv_handle_t *)&q->idle);
    return rc;
}

void
rl_connq_set_tls(struct rl_connq *q, struct rl_tls_ctx *server, struct rl_tls_ctx *client)
{
    q->tls_server = server;
    q->tls_client = client;
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
    uv_close((uv_handle_t *)&q->hs_timer, connq_handle_closed);
}

/* ---- one connection --------------------------------------------------------------------- */

void
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

void
conn_account(struct rl_conn *c)
{
    uint64_t bytes;

    if (c->listener == NULL) {
        return;
    }
    bytes = (uint64_t)c->in.cap + c->out.cap + c->inflight.cap;
    if (bytes == c->acct_bytes) {
        return;
    }
    if (c->preauth) {
        c->q->preauth_bytes = c->q->preauth_bytes - c->acct_bytes + bytes;
    }
    c->q->client_bytes = c->q->client_bytes - c->acct_bytes + bytes;
    if (c->q->shared != NULL) {
        /* unsigned wrap-around adds a decrease too */
        uint64_t delta = bytes - c->acct_bytes;

        if (c->preauth) {
            __atomic_fetch_add(&c->q->shared->preauth_bytes, delta, __ATOMIC_RELAXED);
        }
        __atomic_fetch_add(&c->q->shared->client_bytes, delta, __ATOMIC_RELAXED);
    }
    c->acct_bytes = bytes;
}

void
conn_buf_trim(struct rl_buf *b)
{
    if (rl_buf_unread(b) != 0) {
        return;
    }
    if (b->cap > RL_CONN_KEEP_BYTES) {
        rl_buf_deinit(b);
    } else {
        rl_buf_reset(b);
    }
}

void
conn_peer_name(struct rl_conn *c, uint8_t *addr)
{
    struct sockaddr_storage sa;
    int len = sizeof(sa);
    char ip[INET6_ADDRSTRLEN];

    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &len) != 0) {
        if (addr != NULL) {
            memset(addr, 0, 16);
        }
        return;
    }
    if (sa.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&sa;

        uv_ip6_name(a, ip, sizeof(ip));
        snprintf(c->peer, sizeof(c->peer), "[%s]:%u", ip, ntohs(a->sin6_port));
        if (addr != NULL) {
            memcpy(addr, &a->sin6_addr, 16);
        }
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&sa;

        uv_ip4_name(a, ip, sizeof(ip));
        snprintf(c->peer, sizeof(c->peer), "%s:%u", ip, ntohs(a->sin_port));
        if (addr != NULL) {
            memset(addr, 0, 10);
            addr[10] = addr[11] = 0xff;
            memcpy(addr + 12, &a->sin_addr, 4);
        }
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
    if (c->tls != NULL) {
        rl_tls_free(c->tls);
        c->tls = NULL;
    }
    c->tls_sniff = false;
    if (c->ops->on_closed != NULL) {
        c->ops->on_closed(c);
    }
    if (l != NULL) {
        rl_conn_deinit(c);
        conn_account(c);
        free(c);
        conn_listener_closed(l);
    }
}

static void
conn_unthrottle(struct rl_conn *c)
{
    struct rl_conn **pp = &c->q->throttled;

    if (!c->throttled) {
        return;
    }
    while (*pp != c) {
        pp = &(*pp)->throttle_next;
    }
    *pp = c->throttle_next;
    c->throttle_next = NULL;
    c->throttled = false;
}

void
rl_conn_close(struct rl_conn *c, int status)
{
    if (!c->open) {
        return;
    }
    c->open = false;
    c->connected = false;
    c->reading = false;
    c->close_status = status;
    /* The throttled list outlives this loop turn, the handle does not. */
    conn_unthrottle(c);
    rl_connq_hs_end(c->q, &c->hs);
    if (c->listener != NULL) {
        conn_listener_leave(c);
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

void
conn_idle_start(struct rl_connq *q)
{
    if (!q->closing) {
        uv_idle_start(&q->idle, connq_idle);
    }
}

void
conn_pause(struct rl_conn *c)
{
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

void
conn_throttle(struct rl_conn *c)
{
    conn_pause(c);
    if (c->throttled) {
        return;
    }
    if (c->listener != NULL) {
        c->listener->stats.throttled++;
    }
    c->throttled = true;
    c->throttle_next = c->q->throttled;
    c->q->throttled = c;
    if (!c->q->closing) {
        uv_idle_start(&c->q->idle, connq_idle); /* the next turn must not block in poll */
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

/* ---- writing ---------------------------------------------------------------------------- */

/* The write of c->inflight ended with status (0: all of it is out). */
static void
conn_write_done(struct rl_conn *c, int status)
{
    c->writing = false;
    rl_buf_reset(&c->inflight);
    if (!c->open) {
        return;
    }
    if (status < 0) {
        rl_conn_close(c, status);
        return;
    }
    c->active_ms = uv_now(c->q->loop);
    /* A connection between a router and a node (outgoing, or one that said HELLO as a
     * router: a few per node, busy every turn) keeps a buffer of up to a read chunk for the
     * next turn's output rather than growing a new one each turn; a client's is freed past
     * RL_CONN_KEEP_BYTES, so an idle client costs a few KiB. */
    if ((c->listener != NULL && !c->router) || c->inflight.cap > RL_CONN_READ_CHUNK) {
        conn_buf_trim(&c->inflight);
    }
    /* Straight on, not through the dirty list: what piled up meanwhile goes now, and a
     * paused connection resumes without costing the loop another turn. */
    conn_flush(c);
    conn_account(c);
}

static void
conn_written(uv_write_t *w, int status)
{
    conn_write_done(w->data, status);
}

/*
 * Writes c->inflight: first at once, as far as the socket takes it (uv_try_write), then what
 * is left by uv_write. A write the socket takes whole (the common case: a turn's replies fit
 * its buffer) costs one write(2) and nothing else, where uv_write also costs a pass of the
 * loop's pending queue and an epoll_ctl to re-arm the socket's poll afterwards (libuv
 * 1.44 re-arms every stream it wrote to); an error is left to uv_write, which reports it as
 * before.
 */
static void
conn_send(struct rl_conn *c)
{
    uv_buf_t b = uv_buf_init(c->inflight.data + c->inflight.pos,
                             (unsigned)rl_buf_unread(&c->inflight));
    int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);

    if (n > 0 && (size_t)n == b.len) {
        conn_write_done(c, 0);
        return;
    }
    if (n > 0) {
        c->inflight.pos += (size_t)n;
        b = uv_buf_init(c->inflight.data + c->inflight.pos, (unsigned)rl_buf_unread(&c->inflight));
    }
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, conn_written) != 0) {
        rl_conn_close(c, UV_EIO);
        return;
    }
    c->writing = true;
    conn_account(c);
}

/*
 * The writing side of a TLS connection (no write in flight): what c->out holds is encrypted
 * once the handshake is done, and the ciphertext (with whatever the handshake has to send)
 * leaves in one write. A connection finishing before its handshake is done (a refusal at
 * accept) closes at once: its peer could not read a plaintext reply.
 */
static void
conn_tls_flush(struct rl_conn *c)
{
    if (rl_buf_unread(&c->out) > 0 && rl_tls_established(c->tls)) {
        long n = rl_tls_write(c->tls, c->out.data + c->out.pos, rl_buf_unread(&c->out));

        if (n < 0) {
            rl_log_debug("%s: TLS: %s", c->peer, rl_tls_why(c->tls));
            rl_conn_close(c, UV_EPROTO);
            return;
        }
        c->out.pos += (size_t)n;
        if (rl_buf_unread(&c->out) == 0) {
            rl_buf_reset(&c->out);
        }
    }
    if (rl_tls_pending(c->tls) == 0) {
        if ((c->finishing || c->eof) && c->holds == 0 &&
            (rl_buf_unread(&c->out) == 0 || !rl_tls_established(c->tls))) {
            rl_conn_close(c, 0);
        }
        return;
    }
    rl_buf_reset(&c->inflight);
    if (rl_tls_take_buf(c->tls, &c->inflight) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    conn_send(c);
}

/* True when a paused c may take work again: its output and held requests are back to half
 * their bound, and it is not waiting for the next turn. */
static bool
conn_may_resume(const struct rl_conn *c)
{
    size_t queued = rl_conn_queued(c);

    return !c->reading && !c->eof && !c->finishing && !c->throttled && !c->hs.queued &&
           queued <= c->out_max / 2 && c->holds <= c->hold_max / 2 &&
           !(rl_conn_budget_spent(c) && queued > RL_CONN_KEEP_BYTES / 2);
}

void
conn_flush(struct rl_conn *c)
{
    struct rl_buf tmp;

    if (!c->connected) {
        return;
    }
    if (conn_may_resume(c)) {
        /* Resume: first the frames read before the pause, then the socket. */
        conn_process(c);
        if (!c->connected) {
            return;
        }
        if (!c->finishing && !c->throttled && !rl_conn_backlogged(c) &&
            conn_start_reading(c) != 0) {
            rl_conn_close(c, UV_EIO);
            return;
        }
    }
    if (c->writing) {
        return;
    }
    if (c->tls != NULL) {
        conn_tls_flush(c);
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
    conn_send(c);
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
    conn_peer_name(c, NULL);
    if (c->tls != NULL && rl_tls_start(c->tls) != 0) {
        rl_log_warn("%s: TLS: %s", c->peer, rl_tls_why(c->tls));
        if (c->ops->on_connect != NULL) {
            c->ops->on_connect(c, UV_EPROTO);
        }
        rl_conn_close(c, UV_EPROTO);
        return;
    }
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
    if (c->q->tls_client != NULL) {
        c->tls = rl_tls_new(c->q->tls_client);
        if (c->tls == NULL) {
            return UV_ENOMEM;
        }
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
