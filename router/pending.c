/*
 * pending: the router's requests in flight to nodes. Every forwarded CHECK (and each node's
 * part of a THROTTLED fan-out) is a record in a fixed slab; the id sent to the node is the
 * record's index and an 8-bit generation, so a late reply to a record that was already
 * answered (deadline) or reused is recognised and dropped. A CHECK's record sits on three
 * lists: its client's (to orphan it when the client leaves), its node connection's (to answer
 * it by failure policy the moment the connection dies: upstream.h), and one FIFO ordered by
 * deadline (every request gets the same deadline, so creation order is deadline order and
 * one timer on the head suffices). A record whose deadline passes is handed to the expiry
 * function given at init (router.c gives forward.c's failure policy). A CHECK a node answered
 * ERROR MOVING (its shard is being handed to another node) may be held: off the FIFO, on one
 * of RL_PENDING_LEVELS held queues (one per backoff, 1 to 16 ms, each in resend order), one
 * timer on the earliest, and handed to the resend function given at init when due; the bytes
 * of every CHECK sent are kept in a ring for that, and of every CHECK that waits for room at
 * its node (fairq.c), to be sent in its turn. Not for what the answers say (forward.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "router_int.h"

static void pending_held_fire(uv_timer_t *t);

int
rl_pending_init(struct rl_router *r, uint32_t cap, rl_pending_expire_fn *expire,
                rl_pending_resend_fn *resend)
{
    r->pending_expire = expire;
    r->pending_resend = resend;
    r->slab_cap = cap;
    r->slab = calloc(cap, sizeof(*r->slab));
    /* (pages touched only as requests are written to it) */
    r->ring = malloc(RL_PENDING_RING);
    if (r->slab == NULL || r->ring == NULL) {
        free(r->slab);
        free(r->ring);
        r->slab = NULL;
        r->ring = NULL;
        return -ENOMEM;
    }

    for (uint32_t i = cap; i-- > 0;) {
        r->slab[i].fnext = r->free_list;
        r->free_list = &r->slab[i];
    }
    r->free_tail = &r->slab[cap - 1];
    rl_buf_init(&r->fq_frame);
    return 0;
}

void
rl_pending_deinit(struct rl_router *r)
{
    free(r->slab);
    r->slab = NULL;
    free(r->ring);
    r->ring = NULL;
    rl_fairq_deinit(r);
    rl_buf_deinit(&r->fq_frame);
}

struct rl_pending *
rl_pending_get(struct rl_router *r)
{
    struct rl_pending *p = r->free_list;

    if (p == NULL) {
        return NULL;
    }
    r->free_list = p->fnext;
    if (r->free_list == NULL) {
        r->free_tail = NULL;
    }
    p->used = true;
    p->kept_len = RL_PENDING_KEPT_NONE;
    p->gen++;
    r->npending++;
    return p;
}

/* Takes p off the list it waits on (the FIFO or a held queue); p is in limbo after. */
static void
pending_unlist(struct rl_router *r, struct rl_pending *p)
{
    struct rl_pending **head = &r->fifo_head, **tail = &r->fifo_tail;

    if (p->where == RL_PENDING_LIMBO) {
        return;
    }
    if (p->where != RL_PENDING_FIFO) {
        head = &r->held_head[p->where - RL_PENDING_HELD];
        tail = &r->held_tail[p->where - RL_PENDING_HELD];
    }
    if (p->fprev != NULL) {
        p->fprev->fnext = p->fnext;
    } else {
        *head = p->fnext;
    }
    if (p->fnext != NULL) {
        p->fnext->fprev = p->fprev;
    } else {
        *tail = p->fprev;
    }
    p->fprev = p->fnext = NULL;
    p->where = RL_PENDING_LIMBO;
}

void
rl_pending_put(struct rl_router *r, struct rl_pending *p, bool late_reply)
{
    if (p->client != NULL) {
        struct rl_cconn *c = p->client;

        if (p->cprev != NULL) {
            p->cprev->cnext = p->cnext;
        } else {
            c->pending = p->cnext;
        }
        if (p->cnext != NULL) {
            p->cnext->cprev = p->cprev;
        }
        rl_conn_release(&c->conn);
    }
    rl_upstream_done(&p->link);
    rl_fairq_remove(r, p);
    pending_unlist(r, p);
    rl_pending_free(r, p, late_reply);
}

void
rl_pending_free(struct rl_router *r, struct rl_pending *p, bool late_reply)
{
    p->used = false;
    if (p->moving) {
        r->nmoving--;
    }
    free(p->moved);
    p->moved = NULL;
    p->moving = false;
    p->moves = 0;
    p->redirects = 0;
    p->where = RL_PENDING_FIFO;
    p->kept_len = RL_PENDING_KEPT_NONE;
    p->fan = NULL;
    p->sink = NULL;
    p->answer = NULL;
    p->client = NULL;
    p->up = NULL;
    p->cprev = p->cnext = p->fprev = p->fnext = NULL;
    if (r->free_list == NULL) {
        r->free_list = r->free_tail = p;
    } else if (late_reply) {
        r->free_tail->fnext = p;
        r->free_tail = p;
    } else {
        p->fnext = r->free_list;
        r->free_list = p;
    }
    r->npending--;
}

void
rl_pending_unget(struct rl_router *r, struct rl_pending *p)
{
    p->used = false;
    p->fnext = r->free_list;
    r->free_list = p;
    if (r->free_tail == NULL) {
        r->free_tail = p;
    }
    r->npending--;
}

void
rl_pending_drain(struct rl_router *r)
{
    while (r->fifo_head != NULL) {
        rl_pending_put(r, r->fifo_head, false);
    }
    for (uint32_t i = 0; i < RL_PENDING_LEVELS; i++) {
        while (r->held_head[i] != NULL) {
            rl_pending_put(r, r->held_head[i], false);
        }
    }
}

static void
pending_deadline(uv_timer_t *t)
{
    struct rl_router *r = t->data;
    uint64_t now = uv_now(r->loop);

    while (r->fifo_head != NULL && r->fifo_head->deadline <= now) {
        r->stats.deadline_expired++;
        r->pending_expire(r, r->fifo_head); /* puts it back: the next is the head */
    }
    if (r->fifo_head != NULL) {
        uv_timer_start(&r->deadline_timer, pending_deadline, r->fifo_head->deadline - now, 0);
    }
}

void
rl_pending_track(struct rl_router *r, struct rl_pending *p, struct rl_cconn *c)
{
    p->cprev = NULL;
    p->cnext = c->pending;
    if (c->pending != NULL) {
        c->pending->cprev = p;
    }
    c->pending = p;
    rl_conn_hold(&c->conn);
    rl_pending_track_fifo(r, p);
}

void
rl_pending_track_fifo(struct rl_router *r, struct rl_pending *p)
{
    p->where = RL_PENDING_FIFO;
    p->fnext = NULL;
    p->fprev = r->fifo_tail;
    if (r->fifo_tail != NULL) {
        r->fifo_tail->fnext = p;
    } else {
        r->fifo_head = p;
        uv_timer_start(&r->deadline_timer, pending_deadline, r->conf->deadline_ms, 0);
    }
    r->fifo_tail = p;
}

/* ---- held for a shard's move ------------------------------------------------------------ */

void
rl_pending_keep(struct rl_router *r, struct rl_pending *p, uint8_t hdr, const char *tail,
                size_t len)
{
    uint64_t off;

    p->kept_len = RL_PENDING_KEPT_NONE;
    if (r->ring == NULL || len > RL_PENDING_RING / 8) {
        return;
    }
    off = r->ring_pos % RL_PENDING_RING;
    if (off + len > RL_PENDING_RING) {
        r->ring_pos += RL_PENDING_RING - off; /* no request wraps: skip to the start */
        off = 0;
    }
    memcpy(r->ring + off, tail, len);
    p->kept_pos = r->ring_pos;
    p->kept_len = (uint32_t)len;
    p->kept_hdr = hdr;
    r->ring_pos += len;
}

const char *
rl_pending_kept(struct rl_router *r, struct rl_pending *p, uint8_t *hdr, size_t *len)
{
    const char *now = rl_pending_kept_now(r, p, hdr, len);

    if (now == NULL) {
        p->kept_len = RL_PENDING_KEPT_NONE; /* written over: for good */
        return NULL;
    }
    if (p->moved == NULL) {
        p->moved = malloc(p->kept_len > 0 ? p->kept_len : 1);
        if (p->moved == NULL) {
            return NULL;
        }
        memcpy(p->moved, now, p->kept_len);
    }
    return p->moved;
}

const char *
rl_pending_kept_now(const struct rl_router *r, const struct rl_pending *p, uint8_t *hdr,
                    size_t *len)
{
    if (p->kept_len == RL_PENDING_KEPT_NONE ||
        (p->moved == NULL && r->ring_pos - p->kept_pos > RL_PENDING_RING)) {
        return NULL;
    }
    *hdr = p->kept_hdr;
    *len = p->kept_len;
    return p->moved != NULL ? p->moved : r->ring + p->kept_pos % RL_PENDING_RING;
}

void
rl_pending_moving(struct rl_router *r, struct rl_pending *p)
{
    if (p->moving) {
        return;
    }
    p->moving = true;
    r->nmoving++;
    /* On the FIFO still, as first sent: its deadline is that send + deadline. */
    p->hold_until = p->deadline - r->conf->deadline_ms + r->conf->handoff_wait_ms;
}

static void
pending_held_arm(struct rl_router *r)
{
    uint64_t now = uv_now(r->loop), next = UINT64_MAX;

    for (uint32_t i = 0; i < RL_PENDING_LEVELS; i++) {
        if (r->held_head[i] != NULL && r->held_head[i]->resend_at < next) {
            next = r->held_head[i]->resend_at;
        }
    }
    if (next == UINT64_MAX) {
        uv_timer_stop(&r->held_timer);
        return;
    }
    uv_timer_start(&r->held_timer, pending_held_fire, next > now ? next - now : 0, 0);
}

static void
pending_held_fire(uv_timer_t *t)
{
    struct rl_router *r = t->data;
    uint64_t now = uv_now(r->loop);

    for (uint32_t i = 0; i < RL_PENDING_LEVELS; i++) {
        while (r->held_head[i] != NULL && r->held_head[i]->resend_at <= now) {
            struct rl_pending *p = r->held_head[i];

            pending_unlist(r, p);
            r->pending_resend(r, p); /* resent, held again, or put back */
        }
    }
    pending_held_arm(r);
}

void
rl_pending_hold(struct rl_router *r, struct rl_pending *p, uint32_t delay_ms)
{
    uint32_t level = 0;

    while (level + 1 < RL_PENDING_LEVELS && (1u << level) < delay_ms) {
        level++;
    }
    pending_unlist(r, p);
    p->where = (uint8_t)(RL_PENDING_HELD + level);
    p->resend_at = uv_now(r->loop) + (1u << level);
    p->fnext = NULL;
    p->fprev = r->held_tail[level];
    if (r->held_tail[level] != NULL) {
        r->held_tail[level]->fnext = p;
    } else {
        r->held_head[level] = p;
    }
    r->held_tail[level] = p;
    if (!uv_is_active((uv_handle_t *)&r->held_timer) ||
        uv_timer_get_due_in(&r->held_timer) > (1u << level)) {
        pending_held_arm(r);
    }
}

void
rl_pending_resent(struct rl_router *r, struct rl_pending *p)
{
    pending_unlist(r, p);
    p->deadline = uv_now(r->loop) + r->conf->deadline_ms;
    rl_pending_track_fifo(r, p);
}
