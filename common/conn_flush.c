/*
 * conn_flush: the top of the connection module (conn.h): the loop's flusher (struct
 * rl_connq: the dirty and throttled lists, the uv_check that flushes them each loop turn,
 * and the turn's handshake steps), a connection's writing side, and outgoing connections.
 * rl_connq_init installs the hooks through which the files below reach up without calling
 * up: conn_read.c flushes a connection at the end of a read through q->flush_one, and
 * conn.c's close leaves the handshake gate through q->hs_end.
 *
 * Writes happen at the end of the read that produced them, and otherwise in connq_flush (a
 * uv_check, after the loop's I/O) or when the previous write completes, so the replies to
 * one read leave in one write, and output produced elsewhere (the router's replies from
 * nodes) is gathered per connection for the loop turn; the flush is also where paused
 * connections resume (their leftover frames processed by conn_read.c) and finished ones
 * close. Not for a connection's life (conn.c), its reading (conn_read.c) or accepting
 * (conn_listen.c).
 */
#include "conn.h"

#include <stdlib.h>
#include <string.h>

#include "conn_int.h"
#include "log.h"
#include "tls.h"

static void conn_flush(struct rl_conn *c);

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
    rl_turnshare_next(&q->share);
    q->client_turn_bytes = 0;
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
connq_handle_closed(uv_handle_t *h)
{
    struct rl_connq *q = h->data;

    if (--q->handles == 0) {
        free(q->slab);
        q->slab = NULL;
        free(q->tls_slab);
        q->tls_slab = NULL;
        rl_turnshare_deinit(&q->share);
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
    q->flush_one = conn_flush;   /* for conn_read.c */
    q->hs_end = rl_connq_hs_end; /* for conn.c (conn_tls.c's) */
    q->client_budget = RL_CONN_DEFAULT_BUFFER_MEMORY;
    rl_turnshare_init(&q->share);
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

/* Resumes c if it may, writes what it has queued, or closes it once finished. */
static void
conn_flush(struct rl_conn *c)
{
    struct rl_buf tmp;

    if (!c->connected || c->lingering) {
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
            if (c->linger && !c->eof) {
                conn_linger(c);
            } else {
                rl_conn_close(c, 0);
            }
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
