/*
 * conn_tls: the TLS handshake gate of a loop (conn.h, rl_connq_hs_*): how much handshake
 * work a loop turn may do, the queue of handshakes waiting for a turn with budget, and the
 * handshakes in progress by address and on the loop, with their caps. The TLS listener's
 * connections (conn_read.c) and the router's other fronts (router/front.c) go through it;
 * the flusher (conn_flush.c, connq_flush) opens each turn's budget and takes the queue's
 * steps after the turn's decisions, and a connection's close (conn.c) leaves the counts
 * through q->hs_end. It calls only conn.c. Not for TLS itself (tls.c), nor for outgoing
 * connections (the process's own handshakes: a router's to its nodes).
 */
#include "conn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "conn_int.h"
#include "log.h"
#include "tls.h"

#define HS_WARN_INTERVAL_MS 10000u

static uint32_t
hs_per_peer(const struct rl_connq *q)
{
    return q->hs_per_peer != 0 ? q->hs_per_peer : RL_CONN_DEFAULT_TLS_PER_PEER;
}

static uint32_t
hs_max(const struct rl_connq *q)
{
    return q->hs_max != 0 ? q->hs_max : RL_CONN_DEFAULT_TLS_HANDSHAKES;
}

void
rl_connq_hs_limits(struct rl_connq *q, uint32_t per_peer, uint32_t max)
{
    q->hs_per_peer = per_peer;
    q->hs_max = max;
}

static struct rl_conn_hs_peer **
hs_bucket(struct rl_connq *q, const uint8_t *addr)
{
    uint64_t x = 1469598103934665603ull; /* FNV-1a */

    for (size_t i = 0; i < 16; i++) {
        x = (x ^ addr[i]) * 1099511628211ull;
    }
    return &q->hs_peers[x % RL_CONN_HS_BUCKETS];
}

/* Leaves the queue, if on it. */
static void
hs_unqueue(struct rl_connq *q, struct rl_conn_hs *h)
{
    if (!h->queued) {
        return;
    }
    if (h->prev != NULL) {
        h->prev->next = h->next;
    } else {
        q->hs_head = h->next;
    }
    if (h->next != NULL) {
        h->next->prev = h->prev;
    } else {
        q->hs_tail = h->prev;
    }
    h->prev = h->next = NULL;
    h->queued = false;
}

/* Leaves the list of handshakes in progress, if on it. */
static void
hs_unlist(struct rl_connq *q, struct rl_conn_hs *h)
{
    if (h->oprev != NULL) {
        h->oprev->onext = h->onext;
    } else if (q->hs_oldest == h) {
        q->hs_oldest = h->onext;
    }
    if (h->onext != NULL) {
        h->onext->oprev = h->oprev;
    } else if (q->hs_newest == h) {
        q->hs_newest = h->oprev;
    }
    h->oprev = h->onext = NULL;
}

/* h heard from its peer at now: the newest of the list. */
static void
hs_newest(struct rl_connq *q, struct rl_conn_hs *h, uint64_t now)
{
    hs_unlist(q, h);
    h->heard_ms = now;
    h->oprev = q->hs_newest;
    if (q->hs_newest != NULL) {
        q->hs_newest->onext = h;
    } else {
        q->hs_oldest = h;
    }
    q->hs_newest = h;
}

void
rl_connq_hs_heard(struct rl_connq *q, struct rl_conn_hs *h)
{
    if (h->peer != NULL && !q->hs_freed) {
        hs_newest(q, h, uv_now(q->loop));
    }
}

/* Leaves the counts (and the queue). */
static void
hs_uncount(struct rl_connq *q, struct rl_conn_hs *h)
{
    struct rl_conn_hs_peer *p = h->peer, **pp;

    if (q->hs_freed) {
        /* The flusher closed before this connection (its counts are gone). */
        h->peer = NULL;
        h->queued = false;
        h->oprev = h->onext = NULL;
        return;
    }
    hs_unqueue(q, h);
    if (p == NULL) {
        return;
    }
    h->peer = NULL;
    hs_unlist(q, h);
    q->hs_stats.in_progress--;
    if (--p->count > 0) {
        return;
    }
    for (pp = hs_bucket(q, p->addr); *pp != NULL; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            free(p);
            return;
        }
    }
}

/* Says at most every HS_WARN_INTERVAL_MS that handshakes are refused. */
static void
hs_warn(struct rl_connq *q, const char *why)
{
    uint64_t now = uv_now(q->loop);

    if (q->hs_warned_ms == 0 || now - q->hs_warned_ms >= HS_WARN_INTERVAL_MS) {
        q->hs_warned_ms = now != 0 ? now : 1;
        rl_log_warn("TLS: a client's handshake refused: %s (said at most every 10 s)", why);
    }
}

/* The address's count in bucket b, or NULL. */
static struct rl_conn_hs_peer *
hs_peer(struct rl_conn_hs_peer *const *b, const uint8_t *addr)
{
    struct rl_conn_hs_peer *p = *b;

    while (p != NULL && memcmp(p->addr, addr, 16) != 0) {
        p = p->next;
    }
    return p;
}

int
rl_connq_hs_begin(struct rl_connq *q, struct rl_conn_hs *h, const uint8_t *addr,
                  void (*resume)(struct rl_conn_hs *h), void (*evict)(struct rl_conn_hs *h))
{
    struct rl_conn_hs_peer **b, *p;
    uint64_t now = uv_now(q->loop);

    if (h->peer != NULL) {
        return 0;
    }
    if (q->hs_freed) {
        return -ECANCELED; /* the loop's gate is gone: its connections are closing */
    }
    b = hs_bucket(q, addr);
    p = hs_peer(b, addr);
    if (p != NULL && p->count >= hs_per_peer(q)) {
        q->hs_stats.refused_peer++;
        hs_warn(q, "too many handshakes in progress from its address");
        return -EBUSY;
    }
    if (q->hs_stats.in_progress >= hs_max(q)) {
        struct rl_conn_hs *old = q->hs_oldest;

        while (old != NULL && old->queued) {
            old = old->onext; /* waiting for the loop's budget: the server's delay */
        }
        if (old == NULL || old->evict == NULL || now - old->heard_ms < RL_CONN_HS_EVICT_MS) {
            q->hs_stats.refused_all++;
            hs_warn(q, "too many handshakes in progress on this loop");
            return -EBUSY;
        }
        /* The oldest has stalled: it makes room (its close leaves the counts; once more
         * here in case it was closing already). Its address's record may go with it. */
        q->hs_stats.evicted++;
        old->evict(old);
        hs_uncount(q, old);
        p = hs_peer(b, addr);
    }
    if (p == NULL) {
        p = calloc(1, sizeof(*p));
        if (p == NULL) {
            return -ENOMEM;
        }
        memcpy(p->addr, addr, 16);
        p->next = *b;
        *b = p;
    }
    p->count++;
    h->peer = p;
    h->resume = resume;
    h->evict = evict;
    h->oprev = h->onext = NULL; /* uncounted: on no list */
    hs_newest(q, h, now);
    q->hs_stats.started++;
    q->hs_stats.in_progress++;
    return 0;
}

#define HS_TURN_NS ((int64_t)RL_CONN_HS_TURN_US * 1000)

/* True when the turn's handshake budget, and the loop's share, still have room for a step. */
static bool
hs_budget_left(const struct rl_connq *q)
{
    uint64_t steps, ns;

    rl_tls_handshake_work(&steps, &ns);
    return q->hs_tokens - (int64_t)(ns - q->hs_turn_ns) > 0 &&
           steps - q->hs_turn_steps < RL_CONN_HS_TURN_STEPS &&
           ns - q->hs_turn_ns < (uint64_t)HS_TURN_NS;
}

int
rl_connq_hs_read(struct rl_connq *q, struct rl_conn_hs *h, struct rl_tls *tls, void *dst,
                 size_t cap)
{
    int got;

    if (h->peer == NULL) {
        return rl_tls_read(tls, dst, cap);
    }
    if (h->queued) {
        return RL_CONN_HS_LATER; /* its turn comes from the queue, in order */
    }
    if (!rl_tls_established(tls) && !hs_budget_left(q)) {
        h->next = NULL;
        h->prev = q->hs_tail;
        if (q->hs_tail != NULL) {
            q->hs_tail->next = h;
        } else {
            q->hs_head = h;
        }
        q->hs_tail = h;
        h->queued = true;
        q->hs_stats.deferred++;
        conn_idle_start(q); /* the next turn must not block in poll */
        return RL_CONN_HS_LATER;
    }
    got = rl_tls_read(tls, dst, cap);
    if (got >= 0 && rl_tls_established(tls)) {
        q->hs_stats.done++;
        hs_uncount(q, h);
    }
    return got;
}

void
rl_connq_hs_end(struct rl_connq *q, struct rl_conn_hs *h)
{
    hs_uncount(q, h);
}

/* ---- the flusher's part (conn_int.h) ---------------------------------------------------- */

void
conn_hs_turn(struct rl_connq *q)
{
    uint64_t steps, ns, now = uv_hrtime();

    rl_tls_handshake_work(&steps, &ns);
    if (q->hs_refill_ns == 0) {
        q->hs_tokens = HS_TURN_NS; /* the first turn: a full budget */
    } else {
        /* What the last turn spent, then the share of the time since. */
        q->hs_tokens -= (int64_t)(ns - q->hs_turn_ns);
        q->hs_tokens += (int64_t)((now - q->hs_refill_ns) * RL_CONN_HS_SHARE_PCT / 100u);
        if (q->hs_tokens > HS_TURN_NS) {
            q->hs_tokens = HS_TURN_NS;
        }
    }
    q->hs_refill_ns = now;
    q->hs_turn_steps = steps;
    q->hs_turn_ns = ns;
}

static void
hs_timer_cb(uv_timer_t *t)
{
    conn_idle_start(t->data); /* the next flush takes the queue's steps */
}

bool
conn_hs_resume(struct rl_connq *q)
{
    uint64_t steps, ns;
    int64_t left;

    while (q->hs_head != NULL && hs_budget_left(q)) {
        struct rl_conn_hs *h = q->hs_head;

        hs_unqueue(q, h);
        h->resume(h);
    }
    if (q->hs_head == NULL) {
        return false;
    }
    rl_tls_handshake_work(&steps, &ns);
    left = q->hs_tokens - (int64_t)(ns - q->hs_turn_ns);
    if (left > 0) {
        return true; /* the turn's budget is spent, not the share: on at the next turn */
    }
    /* The share is spent: the loop sleeps (no spinning) until it allows a step again. */
    if (!q->closing) {
        uint64_t wait_ns = (uint64_t)(-left) * 100u / RL_CONN_HS_SHARE_PCT;

        uv_timer_start(&q->hs_timer, hs_timer_cb, wait_ns / 1000000u + 1, 0);
    }
    return false;
}

void
conn_hs_init(struct rl_connq *q)
{
    uv_timer_init(q->loop, &q->hs_timer);
    q->hs_timer.data = q;
    q->hs_tokens = HS_TURN_NS;
    uv_unref((uv_handle_t *)&q->hs_timer);
}

void
conn_hs_free(struct rl_connq *q)
{
    for (size_t i = 0; i < RL_CONN_HS_BUCKETS; i++) {
        while (q->hs_peers[i] != NULL) {
            struct rl_conn_hs_peer *p = q->hs_peers[i];

            q->hs_peers[i] = p->next;
            free(p);
        }
    }
    q->hs_head = q->hs_tail = NULL;
    q->hs_oldest = q->hs_newest = NULL;
    q->hs_freed = true;
}
