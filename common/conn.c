/*
 * conn: one connection's life (conn.h), the bottom of the connection module: its setup,
 * buffers and their accounting against the clients' budget, its peer's name, marking it for
 * the loop turn's flush, pausing and per-turn throttling, holds, finishing, refusing and
 * closing. It calls no other file of the module: what a close must tell the files above goes
 * through the hooks they installed (the listener's, rl_listener_start in conn_listen.c; the
 * handshake gate's, rl_connq_init in conn_flush.c). One state machine for every connection:
 *
 *   reading --(queued output > out_max, or holds >= hold_max)--> paused
 *   paused  --(both back to half their bound: leftover frames processed)--> reading
 *   any     --(peer EOF, rl_conn_finish, refusal, protocol error)--> finishing
 *   finishing --(output written, nothing held)--> closed
 *
 * The module's files, from the bottom up, each calling only those below it: conn.c;
 * conn_tls.c (the loop's TLS handshake gate) and conn_refuse.c (refusals, protocol errors and
 * their once-a-minute warnings); conn_read.c (reading and framing); conn_listen.c (accepting
 * and a listener's caps) and conn_flush.c (the loop's flusher, writing, outgoing connects).
 * Not for reading, writing or accepting (those files), nor for the codec (wire.h).
 */
#include "conn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn_int.h"
#include "tls.h"
#include "wire.h"

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
        l->on_conn_freed(l); /* conn_listen.c: l may finish closing, or accept again */
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

static void
conn_close(struct rl_conn *c, int status, bool reset)
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
    c->q->hs_end(c->q, &c->hs); /* the handshake gate's (conn_tls.c), from rl_connq_init */
    if (c->listener != NULL) {
        c->listener->on_conn_leave(c); /* conn_listen.c: it leaves the list and counts */
    }
    if (c->ops->on_close != NULL) {
        c->ops->on_close(c, status);
    }
    /* A write in progress is cancelled (its callback runs first); the buffers it points
     * into are emptied only in conn_closed. A reset (SO_LINGER 0) also drops what the
     * kernel holds unsent or unacknowledged; it cannot be had on a socket not yet opened or
     * being shut down, which closes the usual way. */
    if (!reset || uv_tcp_close_reset(&c->tcp, conn_closed) != 0) {
        uv_close((uv_handle_t *)&c->tcp, conn_closed);
    }
}

void
rl_conn_close(struct rl_conn *c, int status)
{
    conn_close(c, status, false);
}

void
rl_conn_abort(struct rl_conn *c, int status)
{
    conn_close(c, status, true);
}

static void
connq_idle(uv_idle_t *h)
{
    (void)h; /* only there to keep poll from blocking while connections are dirty */
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
