/*
 * conn_read: the reading side of a connection (conn.h): reads land in the loop's slab and
 * are split into frames handed to ops->on_frame, within the connection's share of the loop
 * turn and until it is backlogged; what a read leaves unprocessed (an unfinished frame,
 * frames left for the next turn) is kept in c->in within the clients' buffer memory, and
 * processed again when the connection resumes (conn_process, from conn_flush.c's flush); so
 * is a frame its owner deferred (rl_conn_defer) and what follows it. A connection on
 * probation (taken from the router reserve) must open with HELLO or AUTH. A TLS connection's
 * bytes are decrypted here, through the loop's handshake gate (conn_tls.c). It calls
 * conn_tls.c, conn_refuse.c and conn.c; the replies of a read are written at its end through
 * the flusher's hook (q->flush_one). Not for writing (conn_flush.c) nor accepting
 * (conn_listen.c).
 */
#include "conn.h"

#include <stddef.h>
#include <stdlib.h>

#include "conn_int.h"
#include "log.h"
#include "tls.h"
#include "wire.h"

/* ---- reading ---------------------------------------------------------------------------- */

/* True when growing c's buffers by n bytes would pass the clients' buffer memory, or, for a
 * pre-AUTH connection, the half of it they may take. */
static bool
conn_over_budget(const struct rl_conn *c, size_t n)
{
    uint64_t all, pre;

    if (c->listener == NULL) {
        return false;
    }
    if (c->q->shared != NULL) { /* the process's totals (conn.h, rl_conn_shared) */
        all = __atomic_load_n(&c->q->shared->client_bytes, __ATOMIC_RELAXED);
        pre = __atomic_load_n(&c->q->shared->preauth_bytes, __ATOMIC_RELAXED);
    } else {
        all = c->q->client_bytes;
        pre = c->q->preauth_bytes;
    }
    return all + n > c->q->client_budget || (c->preauth && pre + n > c->q->client_budget / 2);
}

/*
 * Every read lands in the loop's slab (one largest read), so a connection holds no input
 * buffer of its own between requests: only what a read leaves unprocessed (an unfinished
 * frame, or frames left for the next turn) is copied into c->in, within the clients' buffer
 * memory (conn_read).
 */
static void
conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct rl_conn *c = h->data;

    (void)suggested;
    if (c->q->slab != NULL) {
        buf->base = c->q->slab;
        buf->len = RL_CONN_READ_CHUNK;
        return;
    }
    /* The flusher is closing: read into the connection's own buffer. */
    rl_buf_compact(&c->in);
    if (rl_buf_reserve(&c->in, RL_CONN_READ_CHUNK) != 0) {
        buf->base = NULL; /* libuv answers UV_ENOBUFS */
        buf->len = 0;
        return;
    }
    buf->base = c->in.data + c->in.len;
    buf->len = c->in.cap - c->in.len;
}

/*
 * Hands the whole frames of p[0..n) to the owner until c is backlogged, finishing, closed or
 * through its input share of the loop turn; returns the bytes taken. Stopping mid-batch
 * bounds what one read can queue (64 KiB of 7-byte STATS requests would otherwise be
 * answered with megabytes) and what one client streaming large frames costs the others.
 */
/* Ends the batch on_batch began, if any: the owner answers the frames it holds (conn.h). */
static void
conn_batch_end(struct rl_conn *c, bool *batch)
{
    if (*batch && c->ops->on_batch_end != NULL) {
        c->ops->on_batch_end(c);
    }
    *batch = false;
}

/* c's input share of a loop turn. Outgoing connections (the router's to nodes) carry replies
 * the process asked for; a router's connection to a node carries many clients: both get more.
 * Admin replies (THROTTLED) get one share, so they cannot lengthen a turn that carries
 * decisions. A client's share shrinks as more clients, and more connections of its address,
 * used theirs (turnshare.h). */
static size_t
conn_turn_share(const struct rl_conn *c)
{
    if (c->admin) {
        return RL_CONN_TURN_BYTES;
    }
    if (c->listener == NULL || c->router) {
        return 16u * RL_CONN_TURN_BYTES;
    }
    return rl_turnshare_share(&c->q->share, c->addr, c->q->client_turn_bytes, RL_CONN_TURN_BYTES);
}

static size_t
conn_frames(struct rl_conn *c, const char *p, size_t n)
{
    bool batch = false;
    size_t used = 0;
    size_t plen;
    size_t share;
    bool client = c->listener != NULL && !c->router && !c->admin;
    int rc;

    if (c->turn != c->q->turn) {
        c->turn = c->q->turn;
        c->turn_bytes = 0;
    }
    share = conn_turn_share(c);
    while (c->connected && !c->finishing && !rl_conn_backlogged(c)) {
        if (c->turn_bytes >= share) {
            if (client && !c->throttled) { /* once a turn (TLS feeds records after) */
                rl_turnshare_busy(&c->q->share, c->addr);
            }
            conn_throttle(c);
            break;
        }
        plen = 0;
        rc = rl_wire_frame(p + used, n - used, &plen);
        if (rc >= 0 && c->preauth && plen > RL_WIRE_AUTH_FRAME_MAX) {
            /* Only an AUTH may come first: a header announcing more closes at once, so a
             * half-sent frame before AUTH costs no more than an AUTH. */
            conn_batch_end(c, &batch);
            rl_conn_protocol_error(c, 0, RL_WIRE_ERR_MALFORMED,
                                   "a frame before AUTH may be at most 266 bytes (an AUTH)",
                                   p + used, n - used);
            break;
        }
        if (rc == 0) {
            break;
        }
        if (rc < 0) {
            conn_batch_end(c, &batch);
            rl_conn_protocol_error(c, 0, RL_WIRE_ERR_MALFORMED, "frame length must be 1..65536",
                                   p + used, n - used);
            break;
        }
        if (!batch && c->ops->on_batch != NULL) {
            c->ops->on_batch(c);
            batch = true;
        }
        /* The payload stays valid even if on_frame closes c: buffers live until conn_closed,
         * and the slab until the loop's flusher closes. */
        used += RL_WIRE_HDR_LEN + plen;
        c->turn_bytes += RL_WIRE_HDR_LEN + plen;
        c->q->client_turn_bytes += client ? RL_WIRE_HDR_LEN + plen : 0;
        if (c->probation && !(plen >= 2 && (unsigned char)p[used - plen] == 0x93 &&
                              ((unsigned char)p[used - plen + 1] == RL_WIRE_OP_HELLO ||
                               (unsigned char)p[used - plen + 1] == RL_WIRE_OP_AUTH))) {
            /* Taken from the router reserve, it had to open with HELLO ([5, id, role]), or
             * with the AUTH ([6, id, token]) a node with a cluster secret needs first. */
            conn_batch_end(c, &batch);
            conn_refuse_probation(c);
            break;
        }
        c->ops->on_frame(c, p + used - plen, plen);
        if (c->deferred) {
            /* The owner left this frame for the next turn: it and what follows wait. */
            c->deferred = false;
            used -= RL_WIRE_HDR_LEN + plen;
            c->turn_bytes -= RL_WIRE_HDR_LEN + plen;
            c->q->client_turn_bytes -= client ? RL_WIRE_HDR_LEN + plen : 0;
            if (c->connected && !c->finishing) {
                conn_throttle(c);
            }
            break;
        }
    }
    conn_batch_end(c, &batch);
    if (used > 0) {
        c->partial_ms = 0; /* a frame completed: what is left is a new one */
    }
    return used;
}

/* After c->in was consumed up to its pos: compact it, free it when empty, and keep the time
 * the unfinished frame in it began. */
static void
conn_input_done(struct rl_conn *c)
{
    if (!c->open) {
        return;
    }
    rl_buf_compact(&c->in);
    if (rl_buf_unread(&c->in) == 0) {
        conn_buf_trim(&c->in);
        c->partial_ms = 0;
    } else if (c->partial_ms == 0) {
        c->partial_ms = uv_now(c->q->loop);
    }
    conn_account(c);
}

void
rl_conn_defer(struct rl_conn *c)
{
    c->deferred = true;
}

void
conn_process(struct rl_conn *c)
{
    c->in.pos += conn_frames(c, c->in.data + c->in.pos, rl_buf_unread(&c->in));
    conn_input_done(c);
}

/* Appends p[0..n) to c->in, or refuses c when that would pass the clients' buffer memory. */
static bool
conn_keep_input(struct rl_conn *c, const char *p, size_t n)
{
    /* A pre-AUTH connection keeps at most one AUTH's frame: room for that, not 4 KiB. */
    size_t room = c->preauth && n <= RL_WIRE_HDR_LEN + RL_WIRE_AUTH_FRAME_MAX
                      ? RL_WIRE_HDR_LEN + RL_WIRE_AUTH_FRAME_MAX
                      : n;

    if (conn_over_budget(c, n) || (c->preauth && rl_buf_reserve_exact(&c->in, room) != 0) ||
        rl_buf_append(&c->in, p, n) != 0) {
        if (c->listener == NULL) {
            rl_conn_close(c, UV_ENOMEM);
            return false;
        }
        conn_refuse_buffers(c);
        return false;
    }
    return true;
}

/*
 * Plaintext p[0..n) read by c: transient (in a slab, valid for this call only) or already
 * appended to c->in's free space. Frames are handled where they landed when nothing waits
 * before them; what is left is kept. Returns false when c was refused or closed.
 */
static bool
conn_input(struct rl_conn *c, char *p, size_t n, bool transient)
{
    if (transient && rl_buf_unread(&c->in) == 0) {
        /* Nothing waiting: the frames are handled where they landed. */
        size_t used = conn_frames(c, p, n);
        size_t left = n - used;

        if (c->open && !c->finishing && left > 0 && !conn_keep_input(c, p + used, left)) {
            return false;
        }
        conn_input_done(c);
        return true;
    }
    if (transient && !conn_keep_input(c, p, n)) {
        return false;
    }
    if (!transient) {
        c->in.len += n;
    }
    conn_process(c);
    return true;
}

/*
 * Ciphertext p[0..n) read by a TLS connection: decrypted record by record into the loop's
 * TLS slab (or c->in while the flusher closes) and handled as plaintext; what the handshake
 * has to answer is written at once. A TLS listener's connection whose first byte is not a
 * handshake record is a plaintext client: it is answered in plaintext that TLS is required.
 * Returns false when c was refused or closed.
 */
static bool conn_tls_drain(struct rl_conn *c);

/* The loop's handshake gate (conn_tls.c) gives c's queued handshake its turn. */
static void
conn_hs_resumed(struct rl_conn_hs *h)
{
    struct rl_conn *c = (struct rl_conn *)((char *)h - offsetof(struct rl_conn, hs));

    if (c->open && c->tls != NULL && conn_tls_drain(c) && c->open) {
        rl_conn_mark(c); /* the flush resumes its reading */
    }
}

/* Its handshake stalled while the loop's were at their cap: closed to make room. */
static void
conn_hs_evicted(struct rl_conn_hs *h)
{
    struct rl_conn *c = (struct rl_conn *)((char *)h - offsetof(struct rl_conn, hs));

    rl_conn_close(c, UV_ETIMEDOUT);
}

static bool
conn_tls_input(struct rl_conn *c, char *p, size_t n)
{
    if (c->tls_sniff) {
        c->tls_sniff = false;
        if ((unsigned char)p[0] != RL_TLS_RECORD_HANDSHAKE) {
            rl_tls_free(c->tls);
            c->tls = NULL;
            rl_conn_protocol_error(c, 0, RL_WIRE_ERR_MALFORMED,
                                   "TLS is required: this port takes TLS connections only "
                                   "(connect with TLS, e.g. rl-cli --tls-ca FILE)",
                                   p, n);
            return false;
        }
        if (c->listener != NULL &&
            rl_connq_hs_begin(c->q, &c->hs, c->addr, conn_hs_resumed, conn_hs_evicted) != 0) {
            /* Past the handshakes in progress its address or the loop may have: closed
             * before any crypto is spent on it. */
            rl_conn_close(c, UV_ECONNREFUSED);
            return false;
        }
    }
    rl_connq_hs_heard(c->q, &c->hs);
    if (rl_tls_feed(c->tls, p, n) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return false;
    }
    return conn_tls_drain(c);
}

/* Decrypts and handles what c's TLS holds, within the loop's handshake budget. */
static bool
conn_tls_drain(struct rl_conn *c)
{
    for (;;) {
        char *dst;
        size_t cap;
        int got;

        if (c->q->tls_slab == NULL && !c->q->closing) {
            c->q->tls_slab = malloc(RL_CONN_READ_CHUNK); /* NULL: c->in below */
        }
        if (c->q->tls_slab != NULL) {
            dst = c->q->tls_slab;
            cap = RL_CONN_READ_CHUNK;
        } else {
            /* The flusher is closing: decrypt into c->in (over the ciphertext conn_alloc
             * put there, which was fed already). */
            if (rl_buf_reserve(&c->in, RL_CONN_READ_CHUNK) != 0) {
                rl_conn_close(c, UV_ENOMEM);
                return false;
            }
            dst = c->in.data + c->in.len;
            cap = c->in.cap - c->in.len;
        }
        got = rl_connq_hs_read(c->q, &c->hs, c->tls, dst, cap);
        if (got == RL_CONN_HS_LATER) {
            /* The turn's handshake budget is spent: c waits in the gate's queue, reading
             * nothing more until its step is taken. */
            conn_pause(c);
            break;
        }
        if (got < 0) {
            if (c->listener != NULL) {
                rl_log_info("client %s: TLS handshake or record failed, closed: %s", c->peer,
                            rl_tls_why(c->tls));
            } else {
                rl_log_warn("%s: TLS: %s", c->peer, rl_tls_why(c->tls));
            }
            if (rl_tls_pending(c->tls) > 0) {
                /* The alert that tells the peer why leaves first, then c closes. */
                rl_buf_reset(&c->out);
                rl_conn_finish(c);
                return false;
            }
            rl_conn_close(c, UV_EPROTO);
            return false;
        }
        if (got == 0) {
            break;
        }
        if (!conn_input(c, dst, (size_t)got, dst == c->q->tls_slab)) {
            return false;
        }
        if (!c->open) {
            return false;
        }
        if (c->finishing) {
            break;
        }
    }
    /* A record (or the handshake) left unfinished is an unfinished frame: frame_timeout
     * closes a peer that stops sending in the middle of one. */
    if (rl_tls_partial(c->tls)) {
        if (c->partial_ms == 0) {
            c->partial_ms = uv_now(c->q->loop);
        }
    } else if (rl_buf_unread(&c->in) == 0) {
        c->partial_ms = 0;
    }
    /* The handshake's answers, or a client's requests queued before it was done. */
    if (c->open && (rl_tls_pending(c->tls) > 0 ||
                    (rl_buf_unread(&c->out) > 0 && rl_tls_established(c->tls)))) {
        rl_conn_mark(c);
    }
    return true;
}

static void
conn_lingered(uv_shutdown_t *req, int status)
{
    struct rl_conn *c = req->data;

    if (status < 0 && status != UV_ECANCELED && c->open) {
        rl_conn_close(c, 0); /* the peer is gone: nothing to wait for */
    }
}

void
conn_linger(struct rl_conn *c)
{
    c->lingering = true;
    c->shut.data = c;
    if (uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, conn_lingered) != 0) {
        rl_conn_close(c, 0);
        return;
    }
    if (!c->reading && conn_start_reading(c) != 0) {
        rl_conn_close(c, 0);
    }
}

static void
conn_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct rl_conn *c = stream->data;
    bool was_dirty = c->dirty;

    if (c->lingering) {
        /* the answers are out and the write side shut: input is dropped, the peer's close
         * (or an error) ends it */
        if (nread < 0) {
            rl_conn_close(c, 0);
        }
        return;
    }
    if (nread == UV_EOF && c->listener != NULL) {
        /* A half-closed client still gets the replies to what it sent (libuv stopped
         * reading); the flush closes once they are out. */
        c->eof = true;
        c->reading = false;
        rl_conn_mark(c);
        return;
    }
    if (nread == UV_ENOBUFS && c->listener != NULL) {
        conn_refuse_buffers(c);
        return;
    }
    if (nread < 0) {
        rl_conn_close(c, (int)nread);
        return;
    }
    if (nread == 0) {
        return;
    }
    c->active_ms = uv_now(c->q->loop);
    if (c->tls != NULL) {
        if (!conn_tls_input(c, buf->base, (size_t)nread)) {
            return;
        }
    } else if (!conn_input(c, buf->base, (size_t)nread, buf->base == c->q->slab)) {
        return;
    }
    if (c->open && (c->finishing || rl_conn_backlogged(c))) {
        /* The peer asks faster than it reads: stop reading until the output drains. */
        conn_pause(c);
    }
    if (c->dirty && !was_dirty) {
        /* The replies of this read leave now, in one write, rather than after every other
         * connection's batch of the loop turn: a pipelining client gets them a batch
         * earlier (c stays on the dirty list; its flush there finds nothing new). Output
         * that was already waiting (the router's requests to a node, gathered from several
         * clients' reads) keeps waiting for the loop turn's flush, which batches it.
         * (conn_flush.c's flush, through the hook rl_connq_init installed.) */
        c->q->flush_one(c);
    }
}

int
conn_start_reading(struct rl_conn *c)
{
    int rc = uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_read);

    c->reading = rc == 0;
    return rc;
}
