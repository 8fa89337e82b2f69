/*
 * pending: the router's requests in flight to nodes. Every forwarded CHECK (and each node's
 * part of a THROTTLED fan-out) is a record in a fixed slab; the id sent to the node is the
 * record's index and an 8-bit generation, so a late reply to a record that was already
 * answered (deadline) or reused is recognised and dropped. A CHECK's record sits on three
 * lists: its client's (to orphan it when the client leaves), its node connection's (to answer
 * it by failure policy the moment the connection dies: upstream.h), and one FIFO ordered by
 * deadline (every request gets the same deadline, so creation order is deadline order and
 * one timer on the head suffices). A record whose deadline passes is handed to the expiry
 * function given at init (router.c gives forward.c's failure policy). Not for what the
 * answers say (forward.c).
 */
#include <errno.h>
#include <stdlib.h>

#include "router_int.h"

int
rl_pending_init(struct rl_router *r, uint32_t cap, rl_pending_expire_fn *expire)
{
    r->pending_expire = expire;
    r->slab_cap = cap;
    r->slab = calloc(cap, sizeof(*r->slab));
    if (r->slab == NULL) {
        return -ENOMEM;
    }
    for (uint32_t i = cap; i-- > 0;) {
        r->slab[i].fnext = r->free_list;
        r->free_list = &r->slab[i];
    }
    r->free_tail = &r->slab[cap - 1];
    return 0;
}

void
rl_pending_deinit(struct rl_router *r)
{
    free(r->slab);
    r->slab = NULL;
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
    p->gen++;
    r->npending++;
    return p;
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
    if (p->fprev != NULL) {
        p->fprev->fnext = p->fnext;
    } else {
        r->fifo_head = p->fnext;
    }
    if (p->fnext != NULL) {
        p->fnext->fprev = p->fprev;
    } else {
        r->fifo_tail = p->fprev;
    }
    rl_pending_free(r, p, late_reply);
}

void
rl_pending_free(struct rl_router *r, struct rl_pending *p, bool late_reply)
{
    p->used = false;
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
