/*
 * upstream: connections from the router to one node. A connection that fails is closed at
 * once and its requests handed back to the router (on_lost), which answers them by failure
 * policy: no request waits on a dead node. Reconnects back off from 50 ms to 2 s, doubling,
 * and reset when a connection succeeds or the node re-registers (rl_upstream_kick).
 */
#include "upstream.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "parse.h"
#include "wire_fast.h"

static void upstream_retry(uv_timer_t *t);
static void upstream_probe_fire(uv_timer_t *t);
static void upstream_watch(uv_timer_t *t);

/* Drops one open handle; the upstream is freed with its last handle once retired. */
static void
upstream_unref(struct rl_upstream *u)
{
    u->handles--;
    if (u->retired && u->handles == 0) {
        for (int i = 0; i < RL_UPSTREAM_NCONN; i++) {
            rl_conn_deinit(&u->conns[i].conn);
            rl_buf_deinit(&u->conns[i].early);
        }
        rl_wire_decoder_deinit(&u->dec);
        free(u);
    }
}

static void
upstream_handle_closed(uv_handle_t *h)
{
    upstream_unref(h->data);
}

static void
schedule_retry(struct rl_upstream *u)
{
    if (u->retired || uv_is_active((uv_handle_t *)&u->retry)) {
        return;
    }
    uv_timer_start(&u->retry, upstream_retry, u->backoff_ms, 0);
}

static void
uplink_unlink(struct rl_uplink *l)
{
    struct rl_upconn *uc = l->conn;

    if (l->prev != NULL) {
        l->prev->next = l->next;
    } else {
        uc->pending = l->next;
    }
    if (l->next != NULL) {
        l->next->prev = l->prev;
    }
    uc->npending--;
    l->prev = l->next = NULL;
    l->conn = NULL;
}

/* ---- the rules probe (upstream.h) ----------------------------------------------------------- */

/* Sends a rules probe on the CHECK connection uc unless one is in flight there. */
static void
upconn_probe(struct rl_upconn *uc)
{
    if (!uc->conn.connected || uc->rules_probe || uc->up->want_digest < 0) {
        return;
    }
    if (rl_wire_put_stats(&uc->conn.out, RL_UPSTREAM_PROBE_ID) == 0) {
        uc->rules_probe = true;
        rl_conn_mark(&uc->conn);
    }
}

/* Starts the probe timer for its next round: soon while a connected CHECK connection's node
 * is not known to hold the router's rules, else at the ordinary period. */
static void
upstream_probe_arm(struct rl_upstream *u)
{
    uint64_t ms = RL_UPSTREAM_PROBE_MS;

    if (u->retired || u->want_digest < 0) {
        return;
    }
    for (int i = 0; i < RL_UPSTREAM_CONNS; i++) {
        if (u->conns[i].conn.connected && u->conns[i].rules_ok_ns == 0) {
            /* soon, backing off to the ordinary period if the node keeps other rules */
            ms = u->probe_soon_ms;
            if (u->probe_soon_ms < RL_UPSTREAM_PROBE_MS) {
                u->probe_soon_ms *= 2;
            }
        }
    }
    if (ms > RL_UPSTREAM_PROBE_MS) {
        ms = RL_UPSTREAM_PROBE_MS;
    }
    uv_timer_start(&u->probe, upstream_probe_fire, ms, 0);
}

static void
upstream_probe_fire(uv_timer_t *t)
{
    struct rl_upstream *u = t->data;

    for (int i = 0; i < RL_UPSTREAM_CONNS; i++) {
        upconn_probe(&u->conns[i]);
    }
    upstream_probe_arm(u);
}

/* The answer rep to uc's rules probe: a STATS whose rules_digest says the node's rules, or an
 * ERROR (a node that refuses STATS is never known to hold the router's rules). */
static void
upconn_probe_answer(struct rl_upconn *uc, const struct rl_wire_reply *rep)
{
    struct rl_upstream *u = uc->up;
    int64_t d = -1;
    bool ok;

    uc->rules_probe = false;
    for (size_t i = 0; rep->op == RL_WIRE_OP_STATS && i < rep->nstats; i++) {
        if (rep->stat_keys[i].len == 12 && memcmp(rep->stat_keys[i].ptr, "rules_digest", 12) == 0) {
            d = rep->stat_vals[i];
        }
    }
    if (d >= 0 && u->node_digest >= 0 && d != u->node_digest) {
        /* The node changed its rules: what it answered before may not hold under the new
         * ones, and no connection of it is known to hold the router's rules any more. */
        u->epoch++;
        u->probe_soon_ms = RL_UPSTREAM_PROBE_SOON_MS;
        for (int i = 0; i < RL_UPSTREAM_CONNS; i++) {
            u->conns[i].rules_ok_ns = 0;
        }
    }
    if (d >= 0) {
        u->node_digest = d;
    }
    ok = d >= 0 && d == u->want_digest;
    if (!ok) {
        uc->rules_ok_ns = 0;
        upstream_probe_arm(u); /* ask again soon */
    } else if (uc->rules_ok_ns == 0) {
        /* Since when the node is known to hold the router's rules on uc: the first answer
         * that said so, later ones only confirming it. */
        uc->rules_ok_ns = uv_hrtime();
    }
    if (u->ops.on_rules != NULL) {
        u->ops.on_rules(u->ops.arg, u, uc, ok);
    }
}

/* ---- connection callbacks ------------------------------------------------------------------ */

/* A reply of the node's to a request of uc's (not to its HELLO, AUTH or probes). */
static inline void
upconn_answered(struct rl_upconn *uc)
{
    uc->answered += uc->answered < uc->sent;
}

static void
upconn_frame(struct rl_conn *c, const char *p, size_t n)
{
    struct rl_upconn *uc = (struct rl_upconn *)c;
    struct rl_upstream *u = uc->up;
    struct rl_wire_reply rep;
    size_t tail;

    if (rl_wire_fast_keyed_reply(p, n, &rep, &tail) == 0) {
        /* A CHECK's answer (an ADJUST's, a RELEASE's), the bulk of the traffic: relayed as it
         * came (forward.c). */
        u->stats.replies++;
        upconn_answered(uc);
        uc->relay.ptr = p + tail;
        uc->relay.len = (uint32_t)(n - tail);
        u->ops.on_reply(u->ops.arg, u, uc, &rep);
        uc->relay.ptr = NULL;
        return;
    }
    if (rl_wire_decode_reply(&u->dec, p, n, &rep) != 0) {
        rl_log_warn("node %s sent an undecodable reply", u->name);
        upconn_answered(uc); /* an answer all the same */
        return;
    }
    if (uc->auth_pending && rep.id == 0 &&
        (rep.op == RL_WIRE_OP_AUTH || rep.op == RL_WIRE_OP_ERROR)) {
        /* The answer to this connection's AUTH: refused, the node closes the connection. */
        uc->auth_pending = false;
        if (rep.op == RL_WIRE_OP_ERROR) {
            rl_log_error("node %s (%s) refused this router's AUTH (%.*s): is [cluster] "
                         "secret_file the same file on both?",
                         u->name, u->addr, (int)rep.message.len,
                         rep.message.ptr != NULL ? rep.message.ptr : "");
        }
        return;
    }
    if (uc->hello_pending && rep.id == 0 &&
        (rep.op == RL_WIRE_OP_HELLO || rep.op == RL_WIRE_OP_ERROR)) {
        /* The answer to this connection's HELLO: a node that refuses it (or predates it)
         * still serves the connection as a client's. */
        uc->hello_pending = false;
        if (rep.op == RL_WIRE_OP_ERROR && rep.err == RL_WIRE_ERR_OVERLOADED) {
            /* The node's router reserve is full: it serves this connection as a client's
             * (a node from before 2026-11-29 closes it: then the backoff below is not reset,
             * so no reconnect storm). Said at most once per 10 s per node and worker. */
            rl_log_limited(&u->hello_log, uv_now(u->q->loop), 10000, RL_LOG_WARN,
                           "node %s (%s): HELLO not taken (%.*s); give every node [clients] "
                           "router_reserve >= routers x workers x 3",
                           u->name, u->addr, (int)rep.message.len,
                           rep.message.ptr != NULL ? rep.message.ptr : "");
            uc->hello_refused = true;
            return;
        }
        if (rep.op == RL_WIRE_OP_ERROR) {
            rl_log_info("node %s (%s): HELLO not taken (%.*s): counted as a client there", u->name,
                        u->addr, (int)rep.message.len,
                        rep.message.ptr != NULL ? rep.message.ptr : "");
        }
        u->backoff_ms = RL_UPSTREAM_BACKOFF_MIN_MS; /* the node took the connection */
        return;
    }
    if (uc->rules_probe && rep.id == RL_UPSTREAM_PROBE_ID &&
        (rep.op == RL_WIRE_OP_STATS || rep.op == RL_WIRE_OP_ERROR)) {
        upconn_probe_answer(uc, &rep);
        return;
    }
    if (uc->tenant_probe && rep.id == 0 && rep.op == RL_WIRE_OP_ERROR) {
        uc->tenant_probe = false; /* the answer to the tenant probe (wire.h) */
        uc->tenant_ok = rl_wire_tenant_taken(&rep);
        if (uc->hello_refused) {
            /* answered after its refused HELLO: the node kept it, as a client's */
            uc->hello_refused = false;
            u->backoff_ms = RL_UPSTREAM_BACKOFF_MIN_MS;
        }
        return;
    }
    u->stats.replies++;
    upconn_answered(uc);
    u->ops.on_reply(u->ops.arg, u, uc, &rep);
}

static void
upconn_batch(struct rl_conn *c)
{
    struct rl_upstream *u = ((struct rl_upconn *)c)->up;

    if (u->ops.on_batch != NULL) {
        u->ops.on_batch(u->ops.arg, u, false);
    }
}

static void
upconn_batch_end(struct rl_conn *c)
{
    struct rl_upstream *u = ((struct rl_upconn *)c)->up;

    if (u->ops.on_batch != NULL) {
        u->ops.on_batch(u->ops.arg, u, true);
    }
}

static void
upconn_connected(struct rl_conn *c, int status)
{
    struct rl_upconn *uc = (struct rl_upconn *)c;
    struct rl_upstream *u = uc->up;

    int up = 0;
    bool first = uc->first;

    uc->first = false;
    if (status != 0) {
        rl_log_debug("node %s (%s): connect: %s", u->name, u->addr, uv_strerror(status));
        return; /* closed next: the requests waiting in early get the failure policy */
    }
    /* First on the wire: the cluster secret when there is one, then HELLO, so the node
     * counts this connection apart from its clients. Requests may follow at once: the node
     * reads them in order. */
    if (u->ops.secret != NULL &&
        rl_wire_put_auth(&c->out, 0, u->ops.secret, u->ops.secret_len) == 0) {
        uc->auth_pending = true;
    }
    uc->hello_refused = false;
    if (rl_wire_put_hello(&c->out, 0, "router") == 0) {
        uc->hello_pending = true;
        rl_conn_mark(c);
    }
    uc->tenant_ok = false;
    uc->tenant_probe = rl_wire_put_tenant_probe(&c->out) == 0;
    uc->rules_ok_ns = 0;
    uc->rules_probe = false;
    if (uc != &u->conns[RL_UPSTREAM_ADMIN]) {
        upconn_probe(uc); /* after the handshake: the node reads them in order */
    }
    if (first && uc->early.len > uc->early.pos) {
        /* the requests that waited for this first connect, after the handshake */
        if (rl_buf_append(&c->out, uc->early.data + uc->early.pos, uc->early.len - uc->early.pos) !=
            0) {
            /* out of memory: they are never sent, and their deadline answers them */
            rl_log_warn("node %s (%s): out of memory for the requests that waited for the "
                        "first connect",
                        u->name, u->addr);
            uc->answered = uc->sent; /* (only they were owed: nothing went before them) */
        }
        rl_conn_mark(c);
    }
    rl_buf_reset(&uc->early);

    for (int i = 0; i < RL_UPSTREAM_NCONN; i++) {
        up += u->conns[i].conn.connected;
    }
    if (up == 1) {
        rl_log_info("node %s (%s): connected", u->name, u->addr);
    }
    u->stats.connects++;
    if (!uc->hello_pending) {
        u->backoff_ms = RL_UPSTREAM_BACKOFF_MIN_MS; /* else: once the node takes the HELLO */
    }
}

/* c is lost: hand its requests back to the router, and try again later. */
static void
upconn_close(struct rl_conn *c, int status)
{
    struct rl_upconn *uc = (struct rl_upconn *)c;
    struct rl_upstream *u = uc->up;

    uc->closing = true;
    uc->sent = uc->answered = 0;
    memset(uc->sent_then, 0, sizeof(uc->sent_then));
    uc->stalled = 0;
    uc->rules_ok_ns = 0;
    uc->rules_probe = false;
    uc->first = false;
    rl_buf_reset(&uc->early);
    if (c->peer[0] != '?' && !u->retired) {
        u->stats.downs++;
        rl_log_warn("node %s (%s): connection lost: %s", u->name, u->addr,
                    status != 0 ? uv_strerror(status) : "closed");
    }
    while (uc->pending != NULL) {
        struct rl_uplink *l = uc->pending;

        uplink_unlink(l);
        u->ops.on_lost(u->ops.arg, u, l);
    }
    if (u->ops.on_room != NULL && !u->retired) {
        u->ops.on_room(u->ops.arg, u);
    }
    schedule_retry(u);
}

static void
upconn_closed(struct rl_conn *c)
{
    struct rl_upconn *uc = (struct rl_upconn *)c;

    uc->closing = false;
    snprintf(c->peer, sizeof(c->peer), "?");
    upstream_unref(uc->up);
}

static const struct rl_conn_ops upconn_ops = {
    .on_batch = upconn_batch,
    .on_frame = upconn_frame,
    .on_batch_end = upconn_batch_end,
    .on_connect = upconn_connected,
    .on_close = upconn_close,
    .on_closed = upconn_closed,
};

static void
upconn_connect(struct rl_upconn *uc)
{
    struct rl_upstream *u = uc->up;

    if (uc->conn.open || uc->closing || u->retired) {
        return;
    }
    u->handles++;
    /* A connection that stops reading would starve the replies that free its requests: the
     * bound on what we queue for a node is rl_upstream_send's, not the reader's pause. */
    uc->conn.out_max = SIZE_MAX;
    uc->conn.hold_max = UINT32_MAX;
    uc->conn.admin = uc == &u->conns[RL_UPSTREAM_ADMIN];
    /* only the upstream's very first attempt holds requests: after a loss, the node is
     * down until proven up again (the failure policy answers at once) */
    uc->first = u->stats.connects == 0 && u->stats.downs == 0 && !uc->conn.admin;
    uc->connect_at_ms = uv_now(u->q->loop);
    rl_conn_connect(&uc->conn, (const struct sockaddr *)&u->sa);
}

static void
upstream_retry(uv_timer_t *t)
{
    struct rl_upstream *u = t->data;
    bool closing = false;

    for (int i = 0; i < RL_UPSTREAM_NCONN; i++) {
        upconn_connect(&u->conns[i]);
        closing = closing || u->conns[i].closing;
    }
    u->backoff_ms *= 2;
    if (u->backoff_ms > RL_UPSTREAM_BACKOFF_MAX_MS) {
        u->backoff_ms = RL_UPSTREAM_BACKOFF_MAX_MS;
    }
    /* A connection still closing (lost this loop turn, kicked at once) cannot be reopened
     * yet; without another try it would stay down until some other connection fails. */
    if (closing) {
        schedule_retry(u);
    }
}

/* Resets each connection of u that stalled: connected with a request sent more than stall_ms
 * ago unanswered, or connecting for connect_ms; at the second check in a row that finds it so
 * (RL_UPSTREAM_STALL_MIN_MS). */
static void
upstream_watch(uv_timer_t *t)
{
    struct rl_upstream *u = t->data;
    uint64_t now = uv_now(u->q->loop);

    for (int i = 0; i < RL_UPSTREAM_NCONN; i++) {
        struct rl_upconn *uc = &u->conns[i];
        uint64_t then = uc->sent_then[uc->stall_ring]; /* sent as of stall_ms ago */
        bool behind = uc->conn.connected && uc->answered < then;

        uc->sent_then[uc->stall_ring] = uc->sent;
        uc->stall_ring = (uint8_t)((uc->stall_ring + 1) % RL_UPSTREAM_STALL_CHECKS);
        if (!uc->conn.open || uc->closing ||
            (uc->conn.connected ? !behind : now - uc->connect_at_ms < u->connect_ms)) {
            uc->stalled = 0;
            continue;
        }
        if (++uc->stalled < 2) {
            continue; /* the loop polls before the next check: what waited is read then */
        }
        uc->stalled = 0;
        u->stats.stalls++;
        if (behind) {
            rl_log_warn("node %s (%s): %llu request(s) sent over %u ms ago unanswered: "
                        "connection reset (what had not reached the node is dropped; what its "
                        "socket had received it may still decide)",
                        u->name, u->addr, (unsigned long long)(then - uc->answered), u->stall_ms);
        } else {
            /* a host gone says so every attempt: once per 10 s per node and worker */
            rl_log_limited(&u->connect_log, now, 10000, RL_LOG_WARN,
                           "node %s (%s): connect not completed in %u ms: given up, trying "
                           "again after a backoff",
                           u->name, u->addr, (unsigned)(now - uc->connect_at_ms));
        }
        rl_conn_abort(&uc->conn, UV_ETIMEDOUT);
    }
}

/* ---- the upstream --------------------------------------------------------------------------- */

int
rl_upstream_create(struct rl_upstream **out, struct rl_connq *q, const char *name, const char *addr,
                   const struct rl_upstream_ops *ops)
{
    struct rl_upstream *u;
    char *host = NULL;
    uint16_t port;
    int rc;

    if (rl_parse_hostport(addr, &host, &port) != NULL) {
        return -EINVAL;
    }
    u = calloc(1, sizeof(*u));
    if (u == NULL) {
        free(host);
        return -ENOMEM;
    }
    rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&u->sa);
    if (rc != 0) {
        rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&u->sa);
    }
    free(host);
    if (rc != 0 || rl_wire_decoder_init(&u->dec) != 0) {
        free(u);
        return rc != 0 ? -EINVAL : -ENOMEM;
    }
    snprintf(u->name, sizeof(u->name), "%s", name);
    snprintf(u->addr, sizeof(u->addr), "%s", addr);
    u->q = q;
    u->ops = *ops;
    u->backoff_ms = RL_UPSTREAM_BACKOFF_MIN_MS;
    u->want_digest = -1;
    u->node_digest = -1;
    u->probe_soon_ms = RL_UPSTREAM_PROBE_SOON_MS;
    uv_timer_init(q->loop, &u->retry);
    u->retry.data = u;
    uv_timer_init(q->loop, &u->probe);
    u->probe.data = u;
    uv_timer_init(q->loop, &u->watch);
    u->watch.data = u;
    u->stall_ms =
        ops->deadline_ms +
        (ops->deadline_ms > RL_UPSTREAM_STALL_MIN_MS ? ops->deadline_ms : RL_UPSTREAM_STALL_MIN_MS);
    u->connect_ms = u->stall_ms > RL_UPSTREAM_CONNECT_MS ? u->stall_ms : RL_UPSTREAM_CONNECT_MS;
    uv_timer_start(&u->watch, upstream_watch, u->stall_ms / RL_UPSTREAM_STALL_CHECKS,
                   u->stall_ms / RL_UPSTREAM_STALL_CHECKS);
    u->handles = 3; /* the three timers */
    for (int i = 0; i < RL_UPSTREAM_NCONN; i++) {
        rl_conn_init(&u->conns[i].conn, q, &upconn_ops, u);
        rl_buf_init(&u->conns[i].early);
        u->conns[i].up = u;
    }
    for (int i = 0; i < RL_UPSTREAM_NCONN; i++) {
        upconn_connect(&u->conns[i]);
    }
    *out = u;
    return 0;
}

bool
rl_upstream_sends_kept(const struct rl_upstream *u)
{
    bool up = false;

    for (int i = 0; i < RL_UPSTREAM_CONNS; i++) {
        const struct rl_upconn *uc = &u->conns[i];

        if (uc->conn.connected) {
            if (!uc->tenant_ok && !uc->tenant_probe) {
                return false;
            }
            up = true;
        }
    }
    return up;
}

bool
rl_upstream_up(const struct rl_upstream *u)
{
    for (int i = 0; i < RL_UPSTREAM_CONNS; i++) {
        if (u->conns[i].conn.connected) {
            return true;
        }
    }
    return false;
}

/* Where a request goes: the admin connection for THROTTLED, else a CHECK connection, the same
 * one for the whole loop turn while it takes more (a turn's requests leave in one write),
 * the next turn the other; NULL when none is up or each has RL_UPSTREAM_OUT_MAX queued. */
static struct rl_upconn *
upstream_pick(struct rl_upstream *u, bool admin)
{
    if (u->retired) {
        return NULL;
    }
    if (admin) {
        struct rl_upconn *uc = &u->conns[RL_UPSTREAM_ADMIN];

        return uc->conn.connected && rl_conn_queued(&uc->conn) < RL_UPSTREAM_OUT_MAX ? uc : NULL;
    }
    if (u->turn != u->q->turn) {
        u->turn = u->q->turn;
        u->rr++;
    }
    for (uint32_t i = 0; i < RL_UPSTREAM_CONNS; i++) {
        struct rl_upconn *c = &u->conns[(u->rr + i) % RL_UPSTREAM_CONNS];

        if (c->conn.connected && rl_conn_queued(&c->conn) < RL_UPSTREAM_OUT_MAX) {
            return c;
        }
    }
    for (uint32_t i = 0; i < RL_UPSTREAM_CONNS; i++) {
        struct rl_upconn *c = &u->conns[(u->rr + i) % RL_UPSTREAM_CONNS];

        if (c->first && c->conn.open && !c->conn.connected && !c->closing &&
            c->early.len - c->early.pos < RL_UPSTREAM_OUT_MAX) {
            return c; /* its first connect is in flight: the request waits for it */
        }
    }
    return NULL;
}

/* Where a request for uc is written: its output, or what waits for its first connect. */
static struct rl_buf *
upconn_out(struct rl_upconn *uc)
{
    return uc->conn.connected ? &uc->conn.out : &uc->early;
}

/* The request just appended to uc's output is in flight: link l to uc. */
static void
upstream_sent(struct rl_upstream *u, struct rl_upconn *uc, struct rl_uplink *l)
{
    uc->sent++;
    l->conn = uc;
    l->prev = NULL;
    l->next = uc->pending;
    if (uc->pending != NULL) {
        uc->pending->prev = l;
    }
    uc->pending = l;
    uc->npending++;
    u->stats.forwarded++;
    if (uc->conn.connected) {
        rl_conn_mark(&uc->conn);
    }
}

int
rl_upstream_send(struct rl_upstream *u, const struct rl_wire_req *req, struct rl_uplink *l)
{
    const char *frame;
    size_t len;

    return rl_upstream_send_bytes(u, req, l, &frame, &len);
}

int
rl_upstream_send_bytes(struct rl_upstream *u, const struct rl_wire_req *req,
                       struct rl_uplink *l, const char **frame, size_t *len)
{
    bool admin = req->op == RL_WIRE_OP_THROTTLED;
    struct rl_upconn *uc = upstream_pick(u, admin);
    struct rl_wire_req bare;
    size_t at;

    *frame = NULL;
    *len = 0;
    if (uc == NULL) {
        return -EAGAIN;
    }
    at = upconn_out(uc)->len;
    if (req->tenant != 0 && !uc->tenant_ok && !uc->tenant_probe) {
        /* a node from before the tenant element. While the probe's answer is awaited the
         * element goes: sent without it, an attacker's flood right after a connect would be
         * accounted to tenant 0, a second quota (docs/PROTOCOL.md, "Upgrades") */
        bare = *req;
        bare.tenant = 0;
        req = &bare;
    }
    if ((admin ? rl_wire_put_throttled(upconn_out(uc), req)
         : req->op == RL_WIRE_OP_ADJUST || req->op == RL_WIRE_OP_RELEASE
             ? rl_wire_put_req(upconn_out(uc), req)
             : rl_wire_fast_put_check(upconn_out(uc), req)) != 0) {
        return -ENOMEM;
    }
    *frame = upconn_out(uc)->data + at;
    *len = upconn_out(uc)->len - at;
    upstream_sent(u, uc, l);
    return 0;
}

int
rl_upstream_send_spliced(struct rl_upstream *u, uint8_t hdr, uint8_t op, uint32_t id,
                         const char *tail, size_t tail_len, struct rl_uplink *l)
{
    struct rl_upconn *uc = upstream_pick(u, false);

    if (uc == NULL) {
        return -EAGAIN;
    }
    if (rl_wire_put_spliced(upconn_out(uc), hdr, op, id, tail, tail_len) != 0) {
        return -ENOMEM;
    }
    upstream_sent(u, uc, l);
    return 0;
}

void
rl_upstream_done(struct rl_uplink *l)
{
    if (l->conn != NULL) {
        uplink_unlink(l);
    }
}

void
rl_upstream_count_failure(struct rl_upstream *u)
{
    u->stats.failures++;
}

void
rl_upstream_kick(struct rl_upstream *u)
{
    if (u->retired) {
        return;
    }
    u->backoff_ms = RL_UPSTREAM_BACKOFF_MIN_MS;
    uv_timer_stop(&u->retry);
    upstream_retry(&u->retry);
}

void
rl_upstream_retire(struct rl_upstream *u)
{
    if (u->retired) {
        return;
    }
    u->retired = true;
    uv_timer_stop(&u->retry);
    uv_timer_stop(&u->probe);
    for (int i = 0; i < RL_UPSTREAM_NCONN; i++) {
        struct rl_upconn *uc = &u->conns[i];

        /* requests still owed (sent, or queued to be): the node must not decide them after
         * it (reset) */
        if (uc->answered < uc->sent) {
            rl_conn_abort(&uc->conn, UV_ECANCELED);
        } else {
            rl_conn_close(&uc->conn, UV_ECANCELED);
        }
    }
    uv_close((uv_handle_t *)&u->retry, upstream_handle_closed);
    uv_close((uv_handle_t *)&u->probe, upstream_handle_closed);
    uv_close((uv_handle_t *)&u->watch, upstream_handle_closed);
}

void
rl_upstream_want_rules(struct rl_upstream *u, int64_t digest)
{
    if (u->retired || digest < 0) {
        return;
    }
    u->want_digest = digest;
    u->probe_soon_ms = RL_UPSTREAM_PROBE_SOON_MS;
    for (int i = 0; i < RL_UPSTREAM_CONNS; i++) {
        u->conns[i].rules_ok_ns = 0;
        upconn_probe(&u->conns[i]);
    }
    upstream_probe_arm(u);
}
