/*
 * session: the router's client connections. Each is a framed connection of conn.h (its
 * output gathered and written once per loop turn by the shared flusher; a client whose
 * requests in flight reach RL_CONN_HOLD_MAX, or whose replies pile up, is paused: conn.h's one
 * rule) that owns the requests it has in flight (one hold each) and its THROTTLED fan-outs.
 * A frame is decoded (a CHECK, ADJUST or RELEASE in a common encoding read straight from its
 * bytes, wire_fast.h), admitted by the gate (gate.h: AUTH first when [client] tokens are
 * configured) and handed to its op's handler in session_handlers, derived from the op table's
 * router column (wire.h), which says which ops a router serves and how. Not for what a CHECK
 * or THROTTLED does (forward.c, fanout.c).
 */
#include <stdint.h>
#include <stdio.h>

#include "conf.h"
#include "router_int.h"
#include "wire_fast.h"

/* The client is closing: its requests still in flight are answered by the node later, to
 * no one: orphan them. */
static void
session_on_close(struct rl_conn *conn, int status)
{
    struct rl_cconn *c = (struct rl_cconn *)conn;

    (void)status;
    for (struct rl_pending *p = c->pending; p != NULL; p = p->cnext) {
        p->client = NULL;
    }
    c->pending = NULL;
    for (struct rl_fanout *f = c->fanouts; f != NULL; f = f->cnext) {
        f->client = NULL;
    }
    c->fanouts = NULL;
    c->nfanouts = 0;
}

static void
session_auth(struct rl_conn *c, const struct rl_wire_req *req,
             const struct rl_wire_str *relay)
{
    (void)relay;
    struct rl_router *r = c->data;

    if (rl_gate_auth(&r->gate, c, req) != 0) {
        r->stats.auth_failures++;
        r->stats.errors++;
    }
}

static void
session_ping(struct rl_conn *c, const struct rl_wire_req *req,
             const struct rl_wire_str *relay)
{
    (void)relay;
    struct rl_router *r = c->data;

    if (rl_wire_put_ping_reply(&c->out, req->id, r->name) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    rl_conn_mark(c);
}

static void
session_stats(struct rl_conn *c, const struct rl_wire_req *req,
              const struct rl_wire_str *relay)
{
    (void)relay;
    rl_rmetrics_stats_reply(c, req->id);
}

static void
session_hot(struct rl_conn *c, const struct rl_wire_req *req,
            const struct rl_wire_str *relay)
{
    (void)relay;
    rl_shed_hot_reply(c, req);
}

/* An op's handler: req decoded; relay, for a CHECK, ADJUST or RELEASE read the short way
 * (wire_fast.h), its fields after the id as the client sent them (ptr NULL: none, re-encode
 * req). */
typedef void (*session_handler)(struct rl_conn *c, const struct rl_wire_req *req,
                                const struct rl_wire_str *relay);

/*
 * The handler of each op, by opcode, derived from the op table's router column (wire.h):
 * FORWARD is rl_forward_<name> (forward.c), FANOUT rl_fanout_<name> (fanout.c), SELF
 * session_<name> (here), and an op a router does not serve (NONE: CLOCK is a node's test
 * hook, HELLO a router's to a node) has none, which is UNKNOWN_OP.
 */
#define SESSION_HANDLER_FORWARD(n) rl_forward_##n
#define SESSION_HANDLER_FANOUT(n) rl_fanout_##n
#define SESSION_HANDLER_SELF(n) session_##n
#define SESSION_HANDLER_NONE(n) NULL
static const session_handler session_handlers[256] = {RL_WIRE_OP_BY(router, SESSION_HANDLER_)};

/*
 * Who may use an op the router serves: the refusal of a client whose token lacks
 * `stats = yes` (NULL: any client that passed the gate; a CHECK's permission depends on its
 * service, so forward.c judges it).
 */
static const char *const session_denied[256] = {
    [RL_WIRE_OP_STATS] = "this client's token does not allow STATS (stats = yes)",
    /* The same permission as STATS: both show what clients do. */
    [RL_WIRE_OP_THROTTLED] = "this client's token does not allow THROTTLED (stats = yes)",
    [RL_WIRE_OP_HOT] = "this client's token does not allow HOT (stats = yes)",
};

/* One frame of a client. */
static void
session_frame(struct rl_conn *c, const char *p, size_t n)
{
    struct rl_router *r = c->data;
    struct rl_wire_fault fault;
    struct rl_wire_req req;
    struct rl_wire_str relay = {NULL, 0};
    const struct rl_client_conf *who;
    size_t tail = 0;

    /* A CHECK, ADJUST or RELEASE in a common encoding is read straight from its bytes, and
     * what follows its id is relayed to the node as the client sent it (handed to
     * forward.c); anything else goes through the full decoder, which also words the error. */
    if (rl_wire_fast_keyed(p, n, &req, &tail) != 0 &&
        rl_wire_decode_req(&r->dec, p, n, &req, &fault) != 0) {
        if (fault.fatal || c->preauth) {
            /* Before AUTH, a frame that does not decode closes the connection too. */
            r->stats.errors++;
            rl_conn_protocol_error(c, fault.id, fault.err, fault.msg, p, n);
        } else {
            rl_reply_error(c, fault.id, fault.err, fault.msg);
        }
        return;
    }
    if (!rl_gate_admit(&r->gate, c, &req)) {
        r->stats.auth_failures++;
        r->stats.errors++;
        return;
    }
    if (req.op >= sizeof(session_handlers) / sizeof(session_handlers[0]) ||
        session_handlers[req.op] == NULL) {
        char msg[32];

        /* an op of the protocol that a router does not serve (HELLO, THROTTLED, HANDOFF_*:
         * a node's) */
        snprintf(msg, sizeof(msg), "unknown op %u", req.op);
        rl_reply_error(c, req.id, RL_WIRE_ERR_UNKNOWN_OP, msg);
        return;
    }
    who = c->principal;
    if (session_denied[req.op] != NULL && who != NULL && !who->stats) {
        r->stats.unauthorized++;
        rl_reply_error(c, req.id, RL_WIRE_ERR_UNAUTHORIZED, session_denied[req.op]);
        return;
    }
    if (tail != 0) {
        relay.ptr = p + tail;
        relay.len = (uint32_t)(n - tail);
    }
    session_handlers[req.op](c, &req, &relay);
}

static void
session_batch(struct rl_conn *c)
{
    struct rl_router *r = c->data;

    r->batch_ns = uv_hrtime();
    r->now_ns = r->batch_ns;
}

static void
session_batch_end(struct rl_conn *c)
{
    struct rl_router *r = c->data;

    r->now_ns = 0;
}

const struct rl_conn_ops rl_session_ops = {
    .on_batch = session_batch,
    .on_batch_end = session_batch_end,
    .on_frame = session_frame,
    .on_close = session_on_close,
};
