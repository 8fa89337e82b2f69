/*
 * fanout: THROTTLED through the router (docs/PROTOCOL.md, "THROTTLED"). A client's request is
 * sent to every node, each part a pending record (pending.c) linked to the fan-out rather
 * than to the client, on each node's admin connection (upstream.h), never on one that carries
 * CHECKs; the nodes' episodes are merged into the best `top`, and the reply goes out when
 * every node answered or the admin timeout passed, naming the nodes that did not answer.
 * A client whose token names its services sees theirs only: the nodes are asked once per
 * such service, so it still gets up to `top` of its own. A node past its THROTTLED budget
 * answers OVERLOADED, and so does the fan-out: the nodes' budgets bound the merging a router
 * does. Not for CHECK (forward.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "router_int.h"

/* How long the nodes are waited for, and how many fan-outs may be in flight per client and
 * in the whole router (OVERLOADED past either). Each holds up to RL_WIRE_TOP_MAX episodes
 * copied out of the nodes' replies (~60 KiB). */
#define FANOUT_TIMEOUT_MS 1000u
#define FANOUT_PER_CLIENT 4u
#define FANOUT_MAX 64u
/* After a node answered OVERLOADED (its THROTTLED budget, node/throttle.h: 10 a second), this
 * worker answers THROTTLED OVERLOADED itself for this long without asking the nodes. */
#define FANOUT_BACKOFF_MS 100u

/* Per worker (each runs one loop on its own thread): the loop time until which fan-outs are
 * refused at once. */
static _Thread_local uint64_t fan_backoff_until;

static void
fan_timer_closed(uv_handle_t *h)
{
    struct rl_fanout *f = h->data;
    struct rl_router *r = f->r;

    free(f);
    rl_router_unhold(r);
}

static void
fan_missing(struct rl_fanout *f, const char *name)
{
    /* A node asked once per service of a restricted client is listed once. */
    for (size_t i = 0; i < f->nmissing; i++) {
        if (strcmp(f->missing[i], name) == 0) {
            return;
        }
    }
    if (f->nmissing < RL_WIRE_MISSING_MAX) {
        snprintf(f->missing[f->nmissing++], sizeof(f->missing[0]), "%s", name);
    }
}

/* Orders episodes by refused descending, then the earlier start, then the node's name. */
static int
fan_ep_cmp(const void *a, const void *b)
{
    const struct rl_fan_ep *x = a, *y = b;

    if (x->refused != y->refused) {
        return x->refused > y->refused ? -1 : 1;
    }
    if (x->start_ms != y->start_ms) {
        return x->start_ms < y->start_ms ? -1 : 1;
    }
    return strncmp(x->node, y->node, RL_WIRE_NODE_MAX);
}

/* Keeps the node's episode if it is among the best f->top so far. */
static void
fan_merge(struct rl_fanout *f, const struct rl_wire_episode *ep)
{
    struct rl_fan_ep tmp, *slot;

    memset(&tmp, 0, sizeof(tmp));
    tmp.start_ms = ep->start_ms;
    tmp.end_ms = ep->end_ms;
    tmp.refused = ep->refused;
    tmp.ended = ep->ended;
    tmp.slen = (uint16_t)ep->service.len;
    tmp.elen = ep->endpoint.ptr != NULL ? (uint16_t)ep->endpoint.len : 0;
    tmp.has_endpoint = ep->endpoint.ptr != NULL;
    tmp.ulen = (uint16_t)ep->user.len;
    tmp.nlen = (uint16_t)ep->node.len;
    memcpy(tmp.node, ep->node.ptr, ep->node.len);
    if (f->neps < f->top) {
        slot = &f->eps[f->neps++];
    } else {
        /* Full: replace the worst, if this one is better. */
        slot = &f->eps[0];
        for (size_t i = 1; i < f->neps; i++) {
            if (fan_ep_cmp(&f->eps[i], slot) > 0) {
                slot = &f->eps[i];
            }
        }
        if (fan_ep_cmp(&tmp, slot) >= 0) {
            return;
        }
    }
    *slot = tmp;
    memcpy(slot->service, ep->service.ptr, ep->service.len);
    if (tmp.has_endpoint) {
        memcpy(slot->endpoint, ep->endpoint.ptr, ep->endpoint.len);
    }
    memcpy(slot->user, ep->user.ptr, ep->user.len);
}

/* Every node answered or was given up: reply to the client (if still there) and free f. */
static void
fan_finish(struct rl_fanout *f)
{
    struct rl_router *r = f->r;
    struct rl_cconn *c = f->client;

    uv_timer_stop(&f->timer);
    if (c != NULL) {
        struct rl_wire_episode eps[RL_WIRE_TOP_MAX];
        struct rl_wire_str missing[RL_WIRE_MISSING_MAX];

        qsort(f->eps, f->neps, sizeof(f->eps[0]), fan_ep_cmp);
        for (size_t i = 0; i < f->neps; i++) {
            const struct rl_fan_ep *e = &f->eps[i];

            eps[i].service.ptr = e->service;
            eps[i].service.len = e->slen;
            eps[i].endpoint.ptr = e->has_endpoint ? e->endpoint : NULL;
            eps[i].endpoint.len = e->elen;
            eps[i].user.ptr = e->user;
            eps[i].user.len = e->ulen;
            eps[i].node.ptr = e->node;
            eps[i].node.len = e->nlen;
            eps[i].start_ms = e->start_ms;
            eps[i].end_ms = e->end_ms;
            eps[i].refused = e->refused;
            eps[i].ended = e->ended;
        }
        for (size_t i = 0; i < f->nmissing; i++) {
            missing[i].ptr = f->missing[i];
            missing[i].len = (uint32_t)strlen(f->missing[i]);
        }
        if (f->overloaded) {
            /* Merging what the other nodes sent would be work for a partial answer: the
             * client asks again later (the nodes' budget bounds what merging costs here). */
            r->stats.overloaded++;
            if (rl_wire_put_error(&c->conn.out, f->client_id, RL_WIRE_ERR_OVERLOADED,
                                  "THROTTLED: a node's budget is spent (at most 10 a second "
                                  "per node): try again later") != 0) {
                rl_conn_close(&c->conn, UV_ENOMEM);
            } else {
                rl_conn_mark(&c->conn);
            }
        } else if (rl_wire_put_throttled_reply(&c->conn.out, f->client_id, eps, f->neps, missing,
                                               f->nmissing, NULL) != 0) {
            rl_conn_close(&c->conn, UV_ENOMEM);
        } else {
            rl_conn_mark(&c->conn);
        }
        if (f->cprev != NULL) {
            f->cprev->cnext = f->cnext;
        } else {
            c->fanouts = f->cnext;
        }
        if (f->cnext != NULL) {
            f->cnext->cprev = f->cprev;
        }
        c->nfanouts--;
        rl_conn_release(&c->conn);
    }
    r->nfanouts--;
    uv_close((uv_handle_t *)&f->timer, fan_timer_closed);
}

void
rl_fanout_part_done(struct rl_router *r, struct rl_pending *p, const struct rl_wire_reply *rep,
                    bool late_reply)
{
    struct rl_fanout *f = p->fan;

    if (rep != NULL && rep->op == RL_WIRE_OP_THROTTLED) {
        for (size_t i = 0; i < rep->nepisodes; i++) {
            fan_merge(f, &rep->episodes[i]);
        }
    } else if (rep != NULL && rep->op == RL_WIRE_OP_ERROR && rep->err == RL_WIRE_ERR_OVERLOADED) {
        f->overloaded = true; /* the node's THROTTLED budget (node/throttle.h) is spent */
        fan_backoff_until = uv_now(r->loop) + FANOUT_BACKOFF_MS;
    } else {
        fan_missing(f, p->up != NULL ? p->up->name : "?");
    }
    if (p->cprev != NULL) {
        p->cprev->cnext = p->cnext;
    } else {
        f->parts = p->cnext;
    }
    if (p->cnext != NULL) {
        p->cnext->cprev = p->cprev;
    }
    rl_upstream_done(&p->link);
    rl_pending_free(r, p, late_reply);
    if (--f->outstanding == 0) {
        fan_finish(f);
    }
}

static void
fan_timeout(uv_timer_t *t)
{
    struct rl_fanout *f = t->data;

    /* The last part finishes f: stop before touching it again. */
    while (f->parts != NULL) {
        bool last = f->outstanding == 1;

        rl_fanout_part_done(f->r, f->parts, NULL, true);
        if (last) {
            break;
        }
    }
}

/* Whether rule i is the first rule of its service that the restricted client cl may CHECK
 * under, and (name not NULL) whether that service is name[0..len). */
static bool
fan_service_rule(const struct rl_conf *conf, const struct rl_client_conf *cl, size_t i,
                 const char *name, size_t len)
{
    const struct rl_rule *rule = &conf->rules[i];

    if (!rl_conf_client_may(cl, rule) ||
        (name != NULL && (rule->service_len != len || memcmp(rule->service, name, len) != 0))) {
        return false;
    }
    for (size_t j = 0; j < i; j++) {
        const struct rl_rule *o = &conf->rules[j];

        if (o->service_len == rule->service_len &&
            memcmp(o->service, rule->service, rule->service_len) == 0 &&
            rl_conf_client_may(cl, o)) {
            return false;
        }
    }
    return true;
}

/* Whether cl may read the episodes of service[0..len): it may CHECK under one of its rules. */
static bool
fan_may_see(const struct rl_conf *conf, const struct rl_client_conf *cl, const char *service,
            size_t len)
{
    for (size_t i = 0; i < conf->nrules; i++) {
        if (fan_service_rule(conf, cl, i, service, len)) {
            return true;
        }
    }
    return false;
}

/* Sends fwd to every node as one part of f each; a node it cannot go to is missing. */
static void
fan_send(struct rl_router *r, struct rl_fanout *f, struct rl_wire_req *fwd)
{
    for (struct rl_upstream *u = r->upstreams; u != NULL; u = u->next) {
        struct rl_pending *p = rl_pending_get(r);

        if (p == NULL) {
            fan_missing(f, u->name);
            continue;
        }
        fwd->id = rl_pending_id(r, p);
        if (rl_upstream_send(u, fwd, &p->link) != 0) {
            rl_pending_unget(r, p);
            fan_missing(f, u->name);
            continue;
        }
        p->fan = f;
        p->up = u;
        p->cprev = NULL;
        p->cnext = f->parts;
        if (f->parts != NULL) {
            f->parts->cprev = p;
        }
        f->parts = p;
        f->outstanding++;
    }
}

void
rl_fanout_throttled(struct rl_conn *conn, const struct rl_wire_req *req,
                    const struct rl_wire_str *relay)
{
    struct rl_cconn *c = (struct rl_cconn *)conn;
    struct rl_router *r = conn->data;
    struct rl_fanout *f;
    struct rl_wire_req fwd;
    const struct rl_client_conf *cl = conn->principal;

    (void)relay; /* a CHECK's only */
    if (cl != NULL && cl->all_services) {
        cl = NULL; /* sees every service */
    }
    if (cl != NULL && req->service.ptr != NULL &&
        !fan_may_see(r->conf, cl, req->service.ptr, req->service.len)) {
        r->stats.unauthorized++;
        rl_reply_error(conn, req->id, RL_WIRE_ERR_UNAUTHORIZED,
                       "this client's token does not allow that service");
        return;
    }
    if (uv_now(r->loop) < fan_backoff_until) {
        r->stats.overloaded++;
        rl_reply_error(conn, req->id, RL_WIRE_ERR_OVERLOADED,
                       "THROTTLED: a node's budget is spent (at most 10 a second per node): "
                       "try again later");
        return;
    }
    if (c->nfanouts >= FANOUT_PER_CLIENT || r->nfanouts >= FANOUT_MAX) {
        r->stats.overloaded++;
        rl_reply_error(conn, req->id, RL_WIRE_ERR_OVERLOADED,
                       "too many THROTTLED requests in flight");
        return;
    }
    f = calloc(1, sizeof(*f));
    if (f == NULL) {
        r->stats.overloaded++;
        rl_reply_error(conn, req->id, RL_WIRE_ERR_OVERLOADED, "router out of memory");
        return;
    }
    f->r = r;
    f->client = c;
    f->client_id = req->id;
    f->top = req->top != 0 ? req->top : RL_WIRE_TOP_DEFAULT;
    uv_timer_init(r->loop, &f->timer);
    f->timer.data = f;
    rl_router_hold(r);
    r->nfanouts++;
    c->nfanouts++;
    f->cnext = c->fanouts;
    if (c->fanouts != NULL) {
        c->fanouts->cprev = f;
    }
    c->fanouts = f;
    rl_conn_hold(conn);
    fwd = *req;
    if (cl == NULL || req->service.ptr != NULL) {
        fan_send(r, f, &fwd);
    } else {
        /* Restricted, no service named: each of its services from every node. */
        for (size_t i = 0; i < r->conf->nrules; i++) {
            if (fan_service_rule(r->conf, cl, i, NULL, 0)) {
                fwd.service.ptr = r->conf->rules[i].service;
                fwd.service.len = (uint32_t)r->conf->rules[i].service_len;
                fan_send(r, f, &fwd);
            }
        }
    }
    if (f->outstanding == 0) {
        fan_finish(f);
        return;
    }
    uv_timer_start(&f->timer, fan_timeout, FANOUT_TIMEOUT_MS, 0);
}
