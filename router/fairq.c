/*
 * fairq: the requests that wait in the router for room at their node, and whose turn it is.
 * A worker keeps at most [router] node_window requests sent to one node and unanswered by it
 * (forward.c); past that, a request waits here, on the queue of its client for that node: a
 * flow. A client is what a node accounts inline limits to (rl_wire_tenant): its [client]
 * token when it authenticated with one, else its address, whatever connections and fronts
 * (binary, RESP, gRPC) it uses. A node's
 * flows take turns (round robin, RL_FAIRQ_QUANTUM requests a turn; a new flow joins at the end
 * of the round): a client that sends now and then waits one round, not behind the backlog of
 * one that sends all it can, so a node's time is shared between the router's clients, not
 * first come, first served (docs/OPERATIONS.md, "A node's time is shared
 * between clients"). A flow lives while it has requests waiting (found by a hash of
 * (client, node)), so its memory is bounded by the records in flight. Not for sending them
 * or what a request's bytes are (forward.c), nor for its deadline (pending.c).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "router_int.h"

struct rl_flow {
    struct rl_flow *next, *prev; /* the node's ring of flows with requests waiting */
    struct rl_flow *hnext;       /* the router's hash chain; the free list */
    uint32_t client;             /* rl_wire_tenant: its [client] token, else its address */
    struct rl_upstream *up;
    struct rl_pending *head, *tail; /* waiting, oldest first (rl_pending.qnext) */
    uint32_t n;
    uint32_t credit; /* requests it may still send in its turn */
};

#define FAIRQ_BUCKETS_MIN 64u

static uint32_t
fairq_bucket(const struct rl_router *r, uint32_t client, const struct rl_upstream *u)
{
    uint64_t h = ((uint64_t)client * UINT64_C(0x9e3779b97f4a7c15)) ^
                 ((uint64_t)(uintptr_t)u * UINT64_C(0xc2b2ae3d27d4eb4f));

    return (uint32_t)(h >> 32) & (r->fq_nbuckets - 1);
}

/* Doubles the buckets (keeping them when memory is short: chains only grow longer). */
static void
fairq_grow(struct rl_router *r)
{
    uint32_t n = r->fq_nbuckets != 0 ? r->fq_nbuckets * 2 : FAIRQ_BUCKETS_MIN;
    struct rl_flow **b = calloc(n, sizeof(*b));
    struct rl_flow **old = r->fq_buckets;
    uint32_t oldn = r->fq_nbuckets;

    if (b == NULL) {
        return;
    }
    r->fq_buckets = b;
    r->fq_nbuckets = n;
    for (uint32_t i = 0; i < oldn; i++) {
        for (struct rl_flow *f = old[i], *next; f != NULL; f = next) {
            uint32_t k = fairq_bucket(r, f->client, f->up);

            next = f->hnext;
            f->hnext = b[k];
            b[k] = f;
        }
    }
    free(old);
}

static struct rl_flow *
fairq_flow(struct rl_router *r, struct rl_upstream *u, uint32_t client)
{
    struct rl_flow *f;
    uint32_t k;

    if (r->fq_nflows >= r->fq_nbuckets) {
        fairq_grow(r);
        if (r->fq_nbuckets == 0) {
            return NULL;
        }
    }
    k = fairq_bucket(r, client, u);
    for (f = r->fq_buckets[k]; f != NULL; f = f->hnext) {
        if (f->client == client && f->up == u) {
            return f;
        }
    }
    f = r->fq_free;
    if (f != NULL) {
        r->fq_free = f->hnext;
    } else if ((f = malloc(sizeof(*f))) == NULL) {
        return NULL;
    }
    f->client = client;
    f->up = u;
    f->head = f->tail = NULL;
    f->n = 0;
    f->credit = RL_FAIRQ_QUANTUM;
    f->hnext = r->fq_buckets[k];
    r->fq_buckets[k] = f;
    r->fq_nflows++;
    /* a flow that had nothing waiting takes the last turn of the round: served after the
     * flows already waiting have had one turn each, in the order flows came */
    if (u->fair == NULL) {
        f->next = f->prev = f;
        u->fair = f;
    } else {
        f->next = u->fair;
        f->prev = u->fair->prev;
        f->prev->next = f;
        u->fair->prev = f;
    }
    return f;
}

/* f has nothing waiting: off its node's ring and the hash, onto the free list. */
static void
fairq_drop(struct rl_router *r, struct rl_flow *f)
{
    struct rl_upstream *u = f->up;
    struct rl_flow **pp = &r->fq_buckets[fairq_bucket(r, f->client, u)];

    if (f->next == f) {
        u->fair = NULL;
    } else {
        f->prev->next = f->next;
        f->next->prev = f->prev;
        if (u->fair == f) {
            u->fair = f->next;
            u->fair->credit = RL_FAIRQ_QUANTUM;
        }
    }
    while (*pp != f) {
        pp = &(*pp)->hnext;
    }
    *pp = f->hnext;
    f->hnext = r->fq_free;
    r->fq_free = f;
    r->fq_nflows--;
}

int
rl_fairq_add(struct rl_router *r, struct rl_upstream *u, uint32_t client, struct rl_pending *p)
{
    struct rl_flow *f = fairq_flow(r, u, client);

    if (f == NULL) {
        return -ENOMEM;
    }
    p->flow = f;
    p->qnext = NULL;
    p->qprev = f->tail;
    if (f->tail != NULL) {
        f->tail->qnext = p;
    } else {
        f->head = p;
    }
    f->tail = p;
    f->n++;
    r->fq_waiting++;
    return 0;
}

void
rl_fairq_remove(struct rl_router *r, struct rl_pending *p)
{
    struct rl_flow *f = p->flow;

    if (f == NULL) {
        return;
    }
    if (p->qprev != NULL) {
        p->qprev->qnext = p->qnext;
    } else {
        f->head = p->qnext;
    }
    if (p->qnext != NULL) {
        p->qnext->qprev = p->qprev;
    } else {
        f->tail = p->qprev;
    }
    p->qprev = p->qnext = NULL;
    p->flow = NULL;
    r->fq_waiting--;
    if (--f->n == 0) {
        fairq_drop(r, f);
    }
}

struct rl_pending *
rl_fairq_next(struct rl_router *r, struct rl_upstream *u)
{
    struct rl_flow *f = u->fair;
    struct rl_pending *p;

    if (f == NULL) {
        return NULL;
    }
    p = f->head;
    f->credit--;
    if (f->n > 1 && f->credit == 0) {
        u->fair = f->next; /* its turn is over */
        u->fair->credit = RL_FAIRQ_QUANTUM;
    }
    rl_fairq_remove(r, p);
    return p;
}

void
rl_fairq_deinit(struct rl_router *r)
{
    for (uint32_t i = 0; i < r->fq_nbuckets; i++) {
        for (struct rl_flow *f = r->fq_buckets[i], *next; f != NULL; f = next) {
            next = f->hnext;
            free(f);
        }
    }
    for (struct rl_flow *f = r->fq_free, *next; f != NULL; f = next) {
        next = f->hnext;
        free(f);
    }
    free(r->fq_buckets);
    r->fq_buckets = NULL;
    r->fq_free = NULL;
    r->fq_nbuckets = r->fq_nflows = 0;
}
