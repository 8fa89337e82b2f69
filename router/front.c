/*
 * front: the byte-stream connections of the router's protocol fronts (front.h). Every byte
 * read goes to the protocol through front_in; every byte written goes through front_out;
 * whether a connection reads is decided by front_reading alone. Admission (the client caps,
 * the pre-AUTH share, the opening list) is front_admit.c's.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <errno.h>

#include "front_int.h"
#include "log.h"
#include "tls.h"


static void front_idle_cb(uv_idle_t *h);
static void front_reading(struct rl_front_conn *c);
static void front_unmark(struct rl_front_conn *c);
static void front_hs_resumed(struct rl_conn_hs *h);
static void front_hs_evicted(struct rl_conn_hs *h);

/* Nothing to do: the idle handle only keeps the loop from blocking before the check. */
static void
front_idle_cb(uv_idle_t *h)
{
    (void)h;
}

const uint8_t *
rl_front_peer_addr(const struct rl_front_conn *c)
{
    return c->addr;
}

const char *
rl_front_peer(const struct rl_front_conn *c)
{
    return c->peer;
}


struct rl_router *
rl_front_router(const struct rl_front_conn *c)
{
    return c->r;
}

void *
rl_front_proto(const struct rl_front_conn *c)
{
    return c->proto;
}

void
rl_front_set_proto(struct rl_front_conn *c, void *proto)
{
    c->proto = proto;
}

void
rl_front_touch(struct rl_front_conn *c)
{
    c->active_ms = uv_now(c->r->loop);
}

/* The request bytes this loop's front connections may hold together: its share of
 * [clients] buffer_memory. */
static uint64_t
front_budget(const struct rl_router *r)
{
    uint32_t n = r->group->n;

    return r->opts.limits.buffer_memory / (n ? n : 1);
}

/* c's input budget this turn: its kind's (limits.turn_bytes; 0: none), split as a binary
 * client's share is (common/turnshare.h) when more clients of the loop, or more connections of
 * c's address, used theirs in the last turn, and the least once the turn's input passed twice
 * RL_CONN_TURN_ALL. */
static uint64_t
front_turn_budget(const struct rl_front *g, const struct rl_front_conn *c)
{
    uint64_t full = c->ops->limits.turn_bytes;

    return full == 0 ? 0 : rl_turnshare_share(&g->share, c->addr, g->turn_all, (size_t)full);
}

/* This turn's input cost of c: reset when a new turn began (debt carried by
 * front_check_cb). */
static uint64_t *
front_turn_used(struct rl_front_conn *c)
{
    struct rl_front *g = c->r->front;

    if (c->turn != g->turn) {
        c->turn = g->turn;
        c->turn_used = 0;
    }
    return &c->turn_used;
}

static void
front_thr_unlink(struct rl_front_conn *c)
{
    struct rl_front *g = c->r->front;

    if (!c->throttled) {
        return;
    }
    c->throttled = false;
    for (struct rl_front_conn **p = &g->throttled; *p != NULL; p = &(*p)->thr_next) {
        if (*p == c) {
            *p = c->thr_next;
            break;
        }
    }
    c->thr_next = NULL;
}

/* c spent its input budget for this turn: it stops reading until a turn in which it has some
 * left (front_check_cb), so that the other connections of the loop get theirs. */
static void
front_turn_check(struct rl_front_conn *c)
{
    struct rl_front *g = c->r->front;
    uint64_t budget = front_turn_budget(g, c);

    if (budget == 0 || c->closing || c->throttled || *front_turn_used(c) < budget) {
        return;
    }
    rl_turnshare_busy(&g->share, c->addr);
    c->throttled = true;
    c->thr_next = g->throttled;
    g->throttled = c;
    c->r->listener.stats.throttled++;
    front_reading(c);
}

void
rl_front_charge(struct rl_front_conn *c, size_t cost)
{
    *front_turn_used(c) += cost;
    c->r->front->turn_all += cost;
}

/* The loop's connections that may be closed to make room for c to hold want request bytes:
 * those holding more than want. Their sum of bytes, and the one holding the most (NULL:
 * none). */
static uint64_t
front_victims(struct rl_front *g, const struct rl_front_conn *c, uint64_t want,
              struct rl_front_conn **biggest)
{
    uint64_t sum = 0;

    *biggest = NULL;
    for (struct rl_front_conn *o = g->conns; o != NULL; o = o->next) {
        if (o != c && !o->closing && o->held > want) {
            sum += o->held;
            if (*biggest == NULL || o->held > (*biggest)->held) {
                *biggest = o;
            }
        }
    }
    return sum;
}

/* Whether c may grow from old to new request bytes without closing anything (always for a
 * shrink). */
static bool
front_fits(const struct rl_front_conn *c, size_t old, size_t new)
{
    return new <= old || (c->held - old + new <= c->ops->limits.held_max &&
                          c->r->front->held - old + new <= front_budget(c->r));
}

static int
front_held(struct rl_front_conn *c, size_t old, size_t new)
{
    c->held = c->held - old + new;
    c->r->front->held = c->r->front->held - old + new;
    return 0;
}

int
rl_front_hold_spare(struct rl_front_conn *c, size_t old, size_t new)
{
    return front_fits(c, old, new) ? front_held(c, old, new) : -1;
}

int
rl_front_hold(struct rl_front_conn *c, size_t old, size_t new)
{
    struct rl_front *g = c->r->front;
    uint64_t want = c->held - old + new;
    struct rl_front_conn *big;

    if (front_fits(c, old, new)) {
        return front_held(c, old, new);
    }
    /* Past the loop's share of buffer_memory, the connection holding the most makes room, as
     * Redis's maxmemory-clients evicts its biggest clients: connections that send big
     * unfinished requests and wait cannot keep a new client's few bytes out. c itself is
     * refused only when it would hold the most, and nothing is closed unless closing those
     * that hold more than c would makes room (the worker's share also counts unsent output,
     * which a close gives back too, but not at once). Each close gives its bytes back at
     * once. */
    if (want > c->ops->limits.held_max ||
        g->held - old + new - front_victims(g, c, want, &big) > front_budget(c->r)) {
        return -1;
    }
    while (g->held - old + new > front_budget(c->r)) {
        uint64_t now = uv_now(c->r->loop);

        if (front_victims(g, c, want, &big) == 0) {
            return -1;
        }
        c->r->listener.stats.buffer_evictions++;
        if (g->evict_warned_ms == 0 || now - g->evict_warned_ms >= 10000) {
            g->evict_warned_ms = now != 0 ? now : 1;
            rl_log_warn("%s front: a connection holding %llu bytes of unfinished requests "
                        "closed: [clients] buffer_memory is spent, and it held the most (said "
                        "at most every 10 s)",
                        big->ops->name, (unsigned long long)big->held);
        }
        rl_front_close(big);
    }
    return front_held(c, old, new);
}

static void
conn_handle_closed(uv_handle_t *h)
{
    struct rl_front_conn *c = h->data;
    struct rl_router *r = c->r;

    free(c);
    rl_router_unhold(r);
}

/* Off the loop's dirty list. */
static void
front_unmark(struct rl_front_conn *c)
{
    struct rl_front *g = c->r->front;

    if (!c->dirty) {
        return;
    }
    c->dirty = false;
    if (c->dirty_prev != NULL) {
        c->dirty_prev->dirty_next = c->dirty_next;
    } else {
        g->dirty = c->dirty_next;
    }
    if (c->dirty_next != NULL) {
        c->dirty_next->dirty_prev = c->dirty_prev;
    }
    c->dirty_prev = c->dirty_next = NULL;
}

void
rl_front_mark(struct rl_front_conn *c)
{
    struct rl_front *g = c->r->front;

    if (c->closing || c->dirty) {
        return;
    }
    if (g->dirty == NULL) {
        uv_idle_start(&g->idle, front_idle_cb);
    }
    c->dirty = true;
    c->dirty_prev = NULL;
    c->dirty_next = g->dirty;
    if (g->dirty != NULL) {
        g->dirty->dirty_prev = c;
    }
    g->dirty = c;
}

/* Once per loop turn, after the poll: every connection marked writes what it has. */
static void
front_check_cb(uv_check_t *h)
{
    struct rl_front *g = ((struct rl_router *)h->data)->front;
    struct rl_front_conn *thr = g->throttled, *c;

    /* A new turn: each throttled connection reads again once its debt (cost past its budget,
     * e.g. header bytes charged after the read) is paid off, a budget a turn. */
    g->turn++;
    g->throttled = NULL;
    rl_turnshare_next(&g->share);
    g->turn_all = 0;
    while ((c = thr) != NULL) {
        uint64_t budget = front_turn_budget(g, c);

        thr = c->thr_next;
        c->thr_next = NULL;
        c->throttled = false;
        if (c->closing) {
            continue;
        }
        c->turn_used = c->turn_used > budget ? c->turn_used - budget : 0;
        c->turn = g->turn;
        if (c->turn_used >= budget) {
            c->throttled = true;
            c->thr_next = g->throttled;
            g->throttled = c;
            continue;
        }
        front_reading(c);
    }
    while (g->dirty != NULL) {
        rl_front_flush(g->dirty); /* takes it off the list (or closes it) */
    }
    if (g->throttled != NULL) {
        /* a debt of several turns (a costly call's work: rl_front_charge) is paid a budget a
         * turn: the loop must not sleep in poll meanwhile, or a quiet loop would leave the
         * connection waiting for someone else's traffic */
        uv_idle_start(&g->idle, front_idle_cb);
    } else {
        uv_idle_stop(&g->idle);
    }
}

void
rl_front_close(struct rl_front_conn *c)
{
    struct rl_front *g = c->r->front;

    if (c->closing) {
        return;
    }
    c->closing = true;
    front_unmark(c);
    front_thr_unlink(c);
    front_opening_unlink(c);
    front_release(c);
    c->ops->on_close(c);
    c->proto = NULL;
    free(c->out);
    c->out = NULL;
    c->out_len = c->out_cap = 0;
    rl_connq_hs_end(&c->r->connq, &c->hs);
    rl_tls_free(c->tls);
    c->tls = NULL;
    rl_buf_deinit(&c->tls_out);
    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        g->conns = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    g->nconns--;
    __atomic_fetch_sub(&c->r->front_conns, 1, __ATOMIC_RELAXED);
    if (c->r->group->fronts[c->kind].max != 0) {
        /* counted by the acceptor that handed it over: one fewer open, process wide */
        __atomic_fetch_sub(&c->r->group->fronts[c->kind].conns, 1, __ATOMIC_RELAXED);
    }
    uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
}

static void on_read(uv_stream_t *h, ssize_t n, const uv_buf_t *buf);

static void
on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    struct rl_front_conn *c = h->data;
    struct rl_front *g = c->r->front;

    (void)hint;
    if (g->rbuf_busy) {
        buf->base = NULL;
        buf->len = 0;
        return;
    }
    g->rbuf_busy = true;
    buf->base = g->rbuf;
    buf->len = sizeof(g->rbuf);
    if (c->ops->limits.turn_bytes != 0) {
        /* no more than the rest of this turn's input budget (at least a byte) */
        uint64_t used = *front_turn_used(c), budget = front_turn_budget(c->r->front, c);
        uint64_t left = used < budget ? budget - used : 1;

        if (left < buf->len) {
            buf->len = (size_t)left;
        }
    }
}

static void
on_written(uv_write_t *w, int status)
{
    struct front_wreq *q = (struct front_wreq *)w;
    struct rl_front_conn *c = q->c;

    c->writing -= q->len;
    c->r->front->held -= q->len; /* the loop's buffer_memory share: output counted too */
    c->wprog_ms = uv_now(c->r->loop);
    free(q);
    if (c->closing) {
        return;
    }
    if (status < 0) {
        rl_front_close(c);
        return;
    }
    if (c->writing == 0 && c->ops->finished(c)) {
        rl_front_close(c); /* the goodbye went out and nothing is left to do */
        return;
    }
    front_reading(c);
}

/*
 * THE decision to read c or not: it reads unless it closes, its protocol or the handshake
 * gate paused it, it spent this turn's input budget, write_queue_max bytes of its output are
 * unsent, or it has output unsent while its loop's buffers (input held and output unsent)
 * pass their share of buffer_memory.
 */
static void
front_reading(struct rl_front_conn *c)
{
    struct rl_front *g = c->r->front;
    bool want = !c->closing && !c->paused && !c->throttled && !g->draining &&
                c->writing < c->ops->limits.write_queue_max &&
                !(c->writing > 0 && g->held > front_budget(c->r));

    if (want && !c->reading) {
        c->reading = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0;
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

void
rl_front_drain(struct rl_router *r)
{
    if (r->front == NULL) {
        return;
    }
    r->front->draining = true;
    for (struct rl_front_conn *c = r->front->conns; c != NULL; c = c->next) {
        front_reading(c);
    }
}

bool
rl_front_unanswered(const struct rl_router *r)
{
    if (r->front == NULL) {
        return false;
    }
    for (struct rl_front_conn *c = r->front->conns; c != NULL; c = c->next) {
        if (!c->closing && c->proto != NULL &&
            (c->out_len > 0 ||
             (c->ops->unanswered != NULL ? c->ops->unanswered(c) : c->ops->busy(c)))) {
            return true;
        }
    }
    return false;
}

void
rl_front_pause(struct rl_front_conn *c, bool pause)
{
    if (c->closing || c->paused == pause) {
        return;
    }
    c->paused = pause;
    front_reading(c);
}

int
rl_front_write(struct rl_front_conn *c, const void *data, size_t len)
{
    if (c->closing || c->out_failed) {
        return -1;
    }
    if (c->shut) {
        return 0; /* after FIN: dropped */
    }
    if (c->out_len + len > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap * 2 : 4096;
        struct front_wreq *q;

        while (cap < c->out_len + len) {
            cap *= 2;
        }
        q = realloc(c->out, sizeof(*q) + cap);
        if (q == NULL) {
            c->out_failed = true;
            return -1;
        }
        c->out = q;
        c->out_cap = cap;
    }
    memcpy(c->out->data + c->out_len, data, len);
    c->out_len += len;
    return 0;
}

/* THE way out: every byte a front sends goes to the socket here. -1: the connection must
 * close. */
static int front_write(struct rl_front_conn *c, struct front_wreq *q, size_t len);

/* TLS: the plaintext queued is encrypted once the handshake is done, and the ciphertext
 * (with whatever the handshake has to send) is written. -1: the connection must close. */
static int
front_tls_pump(struct rl_front_conn *c)
{
    struct front_wreq *q;
    size_t n;

    if (rl_buf_unread(&c->tls_out) > 0 && rl_tls_established(c->tls)) {
        long took = rl_tls_write(c->tls, c->tls_out.data + c->tls_out.pos,
                                 rl_buf_unread(&c->tls_out));

        if (took < 0) {
            return -1;
        }
        c->tls_out.pos += (size_t)took;
        if (rl_buf_unread(&c->tls_out) == 0) {
            rl_buf_reset(&c->tls_out);
        }
    }
    n = rl_tls_pending(c->tls);
    if (n == 0) {
        return 0;
    }
    q = malloc(sizeof(*q) + n);
    if (q == NULL) {
        return -1;
    }
    return front_write(c, q, rl_tls_take(c->tls, q->data, n));
}

/* THE way out, as the protocol sees it: with TLS, the plaintext goes through the TLS layer
 * first. -1: the connection must close. */
static int
front_out(struct rl_front_conn *c, struct front_wreq *q, size_t len)
{
    if (c->tls != NULL) {
        int rc = rl_buf_append(&c->tls_out, q->data, len);

        free(q);
        return rc != 0 ? -1 : front_tls_pump(c);
    }
    return front_write(c, q, len);
}

/* The socket write of q->data[0..len) (q is freed once written). */
static int
front_write(struct rl_front_conn *c, struct front_wreq *q, size_t len)
{
    uv_buf_t b = uv_buf_init((char *)q->data, (unsigned)len);

    q->c = c;
    q->len = len;
    if (uv_write(&q->req, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0) {
        free(q);
        return -1;
    }
    if (c->writing == 0) {
        c->wprog_ms = uv_now(c->r->loop); /* the write-progress deadline counts from now */
    }
    c->writing += len;
    c->r->front->held += len; /* output unsent counts in the loop's buffer_memory share */
    front_reading(c);
    return 0;
}

static void
front_shut(uv_shutdown_t *req, int status)
{
    (void)req;
    (void)status; /* the peer's EOF, an error, or the protocol closes the connection */
}

void
rl_front_flush(struct rl_front_conn *c)
{
    front_unmark(c);
    if (c->closing) {
        return;
    }
    if (c->ops->produce(c) != 0 || c->out_failed) {
        rl_front_close(c);
        return;
    }
    if (c->out_len > 0) {
        struct front_wreq *q = c->out;
        size_t len = c->out_len;

        c->out = NULL;
        c->out_len = c->out_cap = 0;
        if (front_out(c, q, len) != 0) {
            rl_front_close(c);
            return;
        }
    }
    if (c->tls != NULL && front_tls_pump(c) != 0) {
        rl_front_close(c);
        return;
    }
    if (c->shut_wanted && !c->shut) {
        c->shut = true;
        if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, front_shut) != 0) {
            rl_front_close(c);
            return;
        }
        c->paused = false; /* the rest of the input is read and dropped */
        front_reading(c);
    }
    if (c->writing == 0 && c->ops->finished(c)) {
        rl_front_close(c);
    }
}

void
rl_front_shutdown(struct rl_front_conn *c)
{
    c->shut_wanted = true;
}

/* TLS: ciphertext read, decrypted into the loop's buffer and handed to the protocol. -1: c
 * must close (a plaintext client, a failed handshake or record, a protocol error). */
static int
front_tls_in(struct rl_front_conn *c, const uint8_t *data, size_t len)
{
    struct rl_front *g = c->r->front;
    int got;

    if (c->tls_sniff) {
        c->tls_sniff = false;
        if (data[0] != RL_TLS_RECORD_HANDSHAKE) {
            const char *say = c->ops->plaintext_refusal;

            rl_log_info("%s front: a client spoke plaintext to a TLS port: closed",
                        c->ops->name);
            if (say != NULL) { /* in plaintext, before closing */
                struct front_wreq *q = malloc(sizeof(*q) + strlen(say));

                if (q != NULL) {
                    memcpy(q->data, say, strlen(say));
                    front_write(c, q, strlen(say));
                }
            }
            return -1;
        }
        if (rl_connq_hs_begin(&c->r->connq, &c->hs, c->addr, front_hs_resumed, front_hs_evicted) !=
            0) {
            return -1; /* past the handshakes in progress its address or the loop may have */
        }
    }
    if (g->tbuf == NULL && (g->tbuf = malloc(FRONT_READ_BUF)) == NULL) {
        return -1;
    }
    if (len > 0) {
        rl_connq_hs_heard(&c->r->connq, &c->hs);
    }
    if (rl_tls_feed(c->tls, data, len) != 0) {
        return -1;
    }
    for (;;) {
        got = rl_connq_hs_read(&c->r->connq, &c->hs, c->tls, g->tbuf, FRONT_READ_BUF);
        if (got == RL_CONN_HS_LATER) { /* the turn's handshake budget is spent */
            rl_front_pause(c, true);    /* until front_hs_resumed */
            return 0;
        }
        if (got < 0) {
            rl_log_info("%s front: TLS handshake or record failed, closed: %s", c->ops->name,
                        rl_tls_why(c->tls));
            if (rl_tls_pending(c->tls) > 0) { /* the alert saying why, before closing */
                struct front_wreq *q = malloc(sizeof(*q) + rl_tls_pending(c->tls));

                if (q != NULL) {
                    front_write(c, q, rl_tls_take(c->tls, q->data, rl_tls_pending(c->tls)));
                }
            }
            return -1;
        }
        if (got == 0) {
            return 0;
        }
        if (c->ops->on_bytes(c, (const uint8_t *)g->tbuf, (size_t)got) != 0 || c->closing) {
            return -1;
        }
    }
}

/* The loop's handshake gate gives c's queued handshake its turn. */
static void
front_hs_resumed(struct rl_conn_hs *h)
{
    struct rl_front_conn *c =
        (struct rl_front_conn *)((char *)h - offsetof(struct rl_front_conn, hs));

    rl_front_pause(c, false);
    if (!c->closing && front_tls_in(c, NULL, 0) != 0) {
        rl_front_close(c);
    } else if (!c->closing) {
        rl_front_flush(c);
    }
}

/* c's handshake stalled while the loop's were at their cap: closed to make room. */
static void
front_hs_evicted(struct rl_conn_hs *h)
{
    rl_front_close((struct rl_front_conn *)((char *)h - offsetof(struct rl_front_conn, hs)));
}

/* THE way in: every byte a front reads goes to its protocol here (through the TLS layer
 * when there is one). */
static void
front_in(struct rl_front_conn *c, const uint8_t *data, size_t len)
{
    c->active_ms = uv_now(c->r->loop);
    if (c->tls != NULL) {
        if (front_tls_in(c, data, len) != 0) {
            rl_front_close(c);
            return;
        }
        rl_front_flush(c);
        return;
    }
    if (c->ops->on_bytes(c, data, len) != 0) {
        rl_front_close(c); /* a protocol error: a goodbye it queued is not waited for */
        return;
    }
    rl_front_flush(c);
}

static void
on_read(uv_stream_t *h, ssize_t n, const uv_buf_t *buf)
{
    struct rl_front_conn *c = h->data;
    struct rl_front *g = c->r->front;

    if (buf->base == g->rbuf) {
        g->rbuf_busy = false;
    }
    if (c->closing) {
        return;
    }
    if (n < 0) {
        rl_front_close(c);
        return;
    }
    if (n == 0) {
        return;
    }
    *front_turn_used(c) += (uint64_t)n;
    c->r->front->turn_all += (uint64_t)n;
    /* The read's requests share one reading of the clock, as a binary client's batch does
     * (session.c): rl_router_now_ns reads it once per read, not once per request. */
    struct rl_router *r = c->r;
    uint64_t was = r->now_ns;

    r->now_ns = uv_hrtime();
    front_in(c, (const uint8_t *)buf->base, (size_t)n);
    r->now_ns = was;
    front_turn_check(c);
}

/*
 * Every tick: a connection still opening (no TLS handshake done, no call or command
 * authenticated) closes at auth_timeout after its accept; one whose unsent output made no
 * progress for frame_timeout closes (a client that never reads); idle connections close; the
 * protocols time their requests out.
 */
static void
front_tick(uv_timer_t *t)
{
    struct rl_router *r = t->data;
    struct rl_front *g = r->front;
    const struct rl_conn_limits *lim = &r->opts.limits;
    struct rl_listener_stats *st = &r->listener.stats;
    uint64_t now = uv_now(r->loop);
    uint64_t auth_ms =
        lim->auth_timeout_ms != 0 ? lim->auth_timeout_ms : RL_CONN_DEFAULT_AUTH_TIMEOUT_MS;
    struct rl_front_conn *c, *next;

    for (c = g->conns; c != NULL; c = next) {
        next = c->next;
        if (c->closing) {
            continue;
        }
        if (c->opening && now - c->opened_ms >= auth_ms) {
            st->auth_timeouts++;
            rl_front_close(c);
            continue;
        }
        if (c->writing > 0) {
            size_t q = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);

            if (q < c->wq_seen) {
                c->wprog_ms = now; /* some of it went out since the last tick */
            }
            c->wq_seen = q;
            if (lim->frame_timeout_ms != 0 && now - c->wprog_ms >= lim->frame_timeout_ms) {
                st->write_timeouts++;
                rl_front_close(c);
                continue;
            }
        } else {
            c->wq_seen = 0;
        }
        if (!c->ops->busy(c) && lim->idle_timeout_ms != 0 &&
            now - c->active_ms >= lim->idle_timeout_ms) {
            if (c->ops->on_idle != NULL) {
                c->ops->on_idle(c);
                rl_front_flush(c);
            }
            if (!c->closing && c->writing == 0) {
                rl_front_close(c);
            }
            continue;
        }
        if (lim->frame_timeout_ms != 0 && c->ops->on_tick != NULL) {
            c->ops->on_tick(c, now, lim->frame_timeout_ms);
            rl_front_flush(c);
        }
    }
}

int
rl_front_adopt(struct rl_router *r, enum rl_front_kind kind, uv_os_sock_t fd)
{
    const struct rl_front_ops *ops;
    struct rl_front_conn *c, *evict;
    int rc;

    if (r->closing || r->draining || (unsigned)kind >= RL_FRONT_KINDS ||
        r->opts.fronts == NULL || r->opts.fronts[kind].ops == NULL) {
        return UV_ECANCELED;
    }
    ops = r->opts.fronts[kind].ops;
    if (r->front == NULL) {
        r->front = calloc(1, sizeof(*r->front));
        if (r->front == NULL) {
            return UV_ENOMEM;
        }
        rl_turnshare_init(&r->front->share);
        uv_timer_init(r->loop, &r->front->timer);
        r->front->timer.data = r;
        rl_router_hold(r);
        uv_check_init(r->loop, &r->front->check);
        r->front->check.data = r;
        rl_router_hold(r);
        uv_check_start(&r->front->check, front_check_cb);
        uv_idle_init(r->loop, &r->front->idle);
        r->front->idle.data = r;
        rl_router_hold(r);
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return UV_ENOMEM;
    }
    c->r = r;
    c->ops = ops;
    c->kind = kind;
    rl_buf_init(&c->tls_out);
    front_peer_name(c, fd);
    rc = front_admit(r, c, fd, &evict);
    if (rc != 0) {
        free(c);
        return rc;
    }
    if (evict != NULL) {
        rl_front_close(evict);
    }
    if (r->opts.tls_server != NULL) {
        c->tls = rl_tls_new(r->opts.tls_server);
        if (c->tls == NULL) {
            front_release(c);
            free(c);
            return UV_ENOMEM;
        }
        c->tls_sniff = true;
    }
    rc = ops->on_open(c);
    if (rc != 0) {
        front_release(c);
        rl_tls_free(c->tls);
        free(c);
        return rc;
    }
    uv_tcp_init(r->loop, &c->tcp);
    c->tcp.data = c;
    rl_router_hold(r);
    rc = uv_tcp_open(&c->tcp, fd);
    if (rc != 0) {
        /* not the handle's: the caller closes fd */
        front_release(c);
        c->ops->on_close(c);
        free(c->out);
        c->out = NULL;
        rl_tls_free(c->tls);
        c->tls = NULL;
        rl_buf_deinit(&c->tls_out);
        c->closing = true;
        uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
        return rc;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    c->active_ms = c->opened_ms = uv_now(r->loop);
    front_opening_link(c);
    c->next = r->front->conns;
    if (c->next != NULL) {
        c->next->prev = c;
    }
    r->front->conns = c;
    r->front->nconns++;
    __atomic_fetch_add(&r->front_conns, 1, __ATOMIC_RELAXED);
    if (!r->front->ticking || ops->limits.tick_ms < r->front->tick_ms) {
        /* the loop's timer runs at the fastest front's pace */
        uint64_t ms = ops->limits.tick_ms;

        r->front->tick_ms = ms;
        r->front->ticking = true;
        uv_timer_start(&r->front->timer, front_tick, ms, ms);
    }
    front_reading(c);
    rl_front_flush(c);
    return 0;
}

void
rl_front_close_all(struct rl_router *r)
{
    for (int k = 0; r->opts.fronts != NULL && k < RL_FRONT_KINDS; k++) {
        const struct rl_front_ops *ops = r->opts.fronts[k].ops;

        if (ops != NULL && ops->close_loop != NULL) {
            ops->close_loop(r);
        }
    }
    if (r->front == NULL) {
        return;
    }
    while (r->front->conns != NULL) {
        rl_front_close(r->front->conns);
    }
    uv_close((uv_handle_t *)&r->front->timer, rl_router_handle_closed);
    uv_close((uv_handle_t *)&r->front->check, rl_router_handle_closed);
    uv_close((uv_handle_t *)&r->front->idle, rl_router_handle_closed);
}

int
rl_front_init(struct rl_router *r)
{
    for (int k = 0; r->opts.fronts != NULL && k < RL_FRONT_KINDS; k++) {
        const struct rl_front_ops *ops = r->opts.fronts[k].ops;

        if (ops != NULL && ops->new_loop != NULL && ops->new_loop(r) != 0) {
            return -ENOMEM;
        }
    }
    return 0;
}

void
rl_front_free(struct rl_router *r)
{
    for (int k = 0; r->opts.fronts != NULL && k < RL_FRONT_KINDS; k++) {
        const struct rl_front_ops *ops = r->opts.fronts[k].ops;

        if (ops != NULL && ops->free_loop != NULL) {
            ops->free_loop(r);
        }
    }
    if (r->front != NULL) {
        free(r->front->tbuf);
        rl_turnshare_deinit(&r->front->share);
    }
    free(r->front);
    r->front = NULL;
}
