/*
 * server: the node's connections. One libuv loop thread does everything: read, split
 * frames (conn.c), decode, judge, encode. Replies of one loop turn are gathered in the
 * connection's output buffer and leave in one uv_write, so a pipelining client costs one
 * read and one write per batch instead of one per request. Not for judging (limiter.c) or
 * the codec (wire.c).
 *
 * CHECKs are judged in small batches: the frames of a read are decoded and their keys hashed
 * and prefetched (rl_limiter_prepare) up to RL_SERVER_BATCH at a time, then judged in frame
 * order, so the key-table lookups, each a cache miss or two on a large table, overlap
 * instead of following one another. Any other frame, and the end of the read's batch, first
 * judges the CHECKs held, so every reply keeps its frame's place.
 */
#include "server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "inltab.h"
#include "log.h"
#include "rules.h"
#include "move.h"
#include "shardmap.h"
#include "server_handoff.h"
#include "throttle.h"
#include "zkm.h"
#include "wire.h"
#include "wire_fast.h"

/* Slots of the key table examined per sweep tick, and the tick period. */
#define SERVER_SWEEP_BUDGET 65536u
#define SERVER_SWEEP_MS 100u
/* A key is forgotten once it has been back at full allowance this long, not at once: a key
 * used every few ms would otherwise be deleted and re-inserted over and over, churning the
 * table (docs/BENCHMARKS.md, key churn). Full at now - grace implies full at now, since
 * time without consumption only ever moves a state towards full. */
#define SERVER_SWEEP_GRACE_MS 1000u
/* How often open throttling episodes are looked at for an idle close (throttle.h). */
#define SERVER_THROTTLE_TICK_MS 1000u
/* The admin budget: reply bytes of admin ops (STATS, THROTTLED) the node answers per loop
 * turn, all connections together. The first admin request of a turn is always answered;
 * once its replies reach this, further ones wait for the next turn (rl_conn_defer), so a
 * THROTTLED top=100 (~34 KB) is one a turn and CHECKs of every connection are served in
 * between. */
#define SERVER_ADMIN_TURN_BYTES (16u * 1024u)

/*
 * Drops one handle of s (the listener with its connections, the flusher, the timer: each
 * counts in pending_closes from its init to its close callback), so that on_closed runs
 * exactly once, after the last close callback.
 */
static void
server_unref(struct rl_server *s)
{
    s->pending_closes--;
    if (s->closing && s->pending_closes == 0) {
        rl_wire_decoder_deinit(&s->dec);
        rl_throttle_destroy(s->throttle);
        s->throttle = NULL;
        rl_server_handoff_free(s->handoff);
        s->handoff = NULL;
        free(s->episodes);
        s->episodes = NULL;
        if (s->on_closed != NULL) {
            s->on_closed(s);
        }
    }
}

static void
server_handle_closed(uv_handle_t *h)
{
    server_unref(h->data);
}

static void
server_connq_closed(void *data)
{
    server_unref(data);
}

static void
server_listener_closed(struct rl_listener *l)
{
    server_unref(l->data);
}

/* Ends an answer whose encoding returned rc: the reply leaves this loop turn, or, when it
 * could not be queued, the connection is closed. */
static void
server_replied(struct rl_conn *c, int rc)
{
    if (rc != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    rl_conn_mark(c);
}

static void
reply_error(struct rl_conn *c, uint32_t id, uint32_t err, const char *msg)
{
    struct rl_server *s = c->data;

    s->errors++;
    server_replied(c, rl_wire_put_error(&c->out, id, err, msg));
}

/* Whether req is an admin op (STATS, THROTTLED, HANDOFF_*): costly to answer, not a decision. */
static inline bool
server_is_admin(const struct rl_wire_req *req)
{
    return req->op == RL_WIRE_OP_STATS || req->op == RL_WIRE_OP_THROTTLED ||
           req->op == RL_WIRE_OP_HANDOFF_OUT || req->op == RL_WIRE_OP_HANDOFF_IN;
}

/* Whether the admin budget of this loop turn is spent (SERVER_ADMIN_TURN_BYTES). */
static bool
server_admin_spent(struct rl_server *s)
{
    if (s->admin_turn != s->connq.turn) {
        s->admin_turn = s->connq.turn;
        s->admin_bytes = 0;
    }
    return s->admin_bytes >= SERVER_ADMIN_TURN_BYTES;
}

/* Ends an admin answer: its reply (c->out grew from `before` bytes) counts against the
 * turn's budget. */
static void
server_admin_replied(struct rl_conn *c, size_t before, int rc)
{
    struct rl_server *s = c->data;

    if (rc == 0 && rl_buf_unread(&c->out) > before) {
        s->admin_bytes += rl_buf_unread(&c->out) - before;
    }
    server_replied(c, rc);
}

static void
server_stats(struct rl_conn *c, const struct rl_wire_req *req)
{
    struct rl_server *s = c->data;
    struct rl_listener_stats cs;
    struct rl_limiter_stats ls;
    struct rl_limiter_service_stats vs;
    const char *keys[RL_WIRE_STATS_MAX];
    int64_t vals[RL_WIRE_STATS_MAX];
    static char names[RL_WIRE_STATS_MAX][160];
    size_t n = 0, nn = 0;
    size_t before = rl_buf_unread(&c->out);

    rl_limiter_stats(s->limiter, &ls);
    rl_listener_stats(&s->listener, &cs);
#define RL_SERVER_PUT(key, val)                                                                    \
    keys[n] = key;                                                                                 \
    vals[n++] = (int64_t)(val);
#define RL_SERVER_PUT_LIMITER(f, str) RL_SERVER_PUT(str, ls.f)
    RL_LIMITER_STATS_MAP(RL_SERVER_PUT_LIMITER)
#undef RL_SERVER_PUT_LIMITER
    RL_SERVER_PUT("keys", ls.keys)
    RL_SERVER_PUT("evicted", ls.evicted)
    RL_SERVER_PUT("expired", ls.expired)
    RL_SERVER_PUT("memory_bytes", ls.memory_bytes)
#define RL_SERVER_PUT_CONN(f, str) RL_SERVER_PUT(str, cs.f)
    RL_LISTENER_STATS_MAP(RL_SERVER_PUT_CONN)
#undef RL_SERVER_PUT_CONN
    RL_SERVER_PUT("errors", s->errors)
    RL_SERVER_PUT("not_owner", s->not_owner)
    RL_SERVER_PUT("moving", s->moving)
    {
        struct rl_move_stats ms;

        memset(&ms, 0, sizeof(ms));
        if (s->move != NULL) {
            rl_move_stats(s->move, &ms);
        }
        RL_SERVER_PUT("shards_owned",
                      s->move != NULL ? rl_move_count_owned(s->move) : s->shards_owned)
        RL_SERVER_PUT("shards_incoming", ms.incoming)
        RL_SERVER_PUT("shards_outgoing", ms.outgoing)
        RL_SERVER_PUT("handoffs_out_done", ms.out_done)
        RL_SERVER_PUT("handoffs_out_failed", ms.out_failed)
        RL_SERVER_PUT("handoffs_in_done", ms.in_done)
        RL_SERVER_PUT("handoffs_in_failed", ms.in_failed)
        RL_SERVER_PUT("handoff_keys_out", ms.keys_out)
        RL_SERVER_PUT("handoff_keys_in", ms.keys_in)
        RL_SERVER_PUT("handoff_export_turns", ms.export_turns)
    }
    RL_SERVER_PUT("auth_failures", s->gate.failures)
    RL_SERVER_PUT("zk_state", s->zk_state)
    RL_SERVER_PUT("registered", s->registered)
    RL_SERVER_PUT("table_digest", s->table_digest)
    RL_SERVER_PUT("rules_version", s->opts.rules != NULL ? s->opts.rules->version : 0)
    RL_SERVER_PUT("rules_digest", s->opts.rules != NULL    ? s->opts.rules->digest
                                  : s->opts.conf != NULL ? (int64_t)s->opts.conf->rules_digest
                                                         : 0)
    RL_SERVER_PUT("rules_reloads", s->opts.rules != NULL ? s->opts.rules->reloads : 0)
    RL_SERVER_PUT("rules_reload_failures", s->opts.rules != NULL ? s->opts.rules->failures : 0)
    RL_SERVER_PUT("uptime_ms", uv_now(s->loop) - s->started_ms)
    {
        struct rl_throttle_stats ts;

        rl_throttle_stats(s->throttle, &ts);
        RL_SERVER_PUT("throttle_open", ts.open)
        RL_SERVER_PUT("throttle_recorded", ts.recorded)
        RL_SERVER_PUT("throttle_dropped", ts.dropped)
        RL_SERVER_PUT("throttle_query_refused", ts.query_refused)
        RL_SERVER_PUT("events_log_dropped", ts.log_dropped)
        RL_SERVER_PUT("events_log_rotations", ts.log_rotations)
    }
    RL_SERVER_PUT("admin_deferred", s->admin_deferred)
    RL_SERVER_PUT("slices_version", s->slices_version)
    RL_SERVER_PUT("slices_generation", s->slices_generation)
    RL_SERVER_PUT("slices_users", s->slices_users)
    RL_SERVER_PUT("slices_failures", s->slices_failures)
    /* Memory pressure per service, "service.NAME.KEY", for the services that fit in the
     * reply's 256 pairs (5 keys each: about 40 services), in config order. */
    for (size_t i = 0; i < rl_limiter_services(s->limiter); i++) {
        const char *svc = rl_limiter_service_stats(s->limiter, i, &vs);

        if (n + 5 > RL_WIRE_STATS_MAX) {
            break;
        }
#define RL_SERVER_PUT_SVC(f, str)                                                                  \
    snprintf(names[nn], sizeof(names[nn]), "service.%s.%s", svc, str);                             \
    RL_SERVER_PUT(names[nn], vs.f)                                                                 \
    nn++;
        RL_LIMITER_SERVICE_STATS_MAP(RL_SERVER_PUT_SVC)
#undef RL_SERVER_PUT_SVC
    }
#undef RL_SERVER_PUT
    server_admin_replied(c, before, rl_wire_put_stats_reply(&c->out, req->id, keys, vals, n));
}

/* THROTTLED: this node's episodes, by refused descending (docs/PROTOCOL.md). */
static void
server_throttled(struct rl_conn *c, const struct rl_wire_req *req)
{
    struct rl_server *s = c->data;
    size_t before = rl_buf_unread(&c->out);
    size_t n;

    if (!rl_throttle_query_admit(s->throttle, s->now_ms)) {
        char msg[128];

        /* Bounded by design: THROTTLED cannot take more than its share of the loop. */
        snprintf(msg, sizeof(msg),
                 "THROTTLED: at most %u a second on this node (%u at once): try again later",
                 RL_THROTTLE_QUERY_RATE, RL_THROTTLE_QUERY_BURST);
        reply_error(c, req->id, RL_WIRE_ERR_OVERLOADED, msg);
        return;
    }
    n = rl_throttle_query(s->throttle, req->service.ptr, req->service.len,
                          req->has_since ? &req->since_ms : NULL, s->now_ms, req->top,
                          s->episodes);
    server_admin_replied(
        c, before, rl_wire_put_throttled_reply(&c->out, req->id, s->episodes, n, NULL, 0, NULL));
}

/* Right after the limiter's answer: a refusal opens or extends the key's episode; an
 * allowance closes it, and costs one test when no episode is open. */
static inline void
server_throttle_hook(struct rl_server *s, const struct rl_wire_req *req,
                     const struct rl_wire_check_reply *rep)
{
    if (rep->code == RL_WIRE_LIMITED) {
        rl_throttle_limited(s->throttle, req->service.ptr, req->service.len, req->endpoint.ptr,
                            req->endpoint.len, req->user.ptr, req->user.len, s->now_ms,
                            rep->retry_after_ms);
    } else if (rl_throttle_any_open(s->throttle) &&
               (rep->code == RL_WIRE_ALLOWED || rep->code == RL_WIRE_QUEUED)) {
        rl_throttle_allowed(s->throttle, req->service.ptr, req->service.len, req->endpoint.ptr,
                            req->endpoint.len, req->user.ptr, req->user.len, s->now_ms);
    }
}

static void server_judge(struct rl_server *s);

static void
server_batch(struct rl_conn *c)
{
    struct rl_server *s = c->data;

    s->now_ms = rl_clock_now_ms(&s->clock);
    s->batch_start_ns = uv_hrtime();
    s->batch_checks = 0;
}

static void
server_batch_end(struct rl_conn *c)
{
    struct rl_server *s = c->data;

    server_judge(s);
    if (s->batch_checks > 0) {
        rl_hist_observe(&s->latency, uv_hrtime() - s->batch_start_ns, s->batch_checks);
    }
}

/* Whether this node answers a CHECK for req's key; if not, the refusal is in c->out. The
 * shard of its key when it was computed (ZooKeeper mode), else RL_LIMITER_SHARD_UNKNOWN. */
static bool
server_owns(struct rl_conn *c, const struct rl_wire_req *req, uint16_t *epoch, uint32_t *known)
{
    struct rl_server *s = c->data;
    char msg[192];
    uint32_t shard;

    *epoch = 0;
    *known = RL_LIMITER_SHARD_UNKNOWN;
    if (s->zk_state == RL_SERVER_ZK_NONE) {
        return true; /* static membership: every node is trusted with every key */
    }
    shard = rl_shardmap_shard(
        rl_shardmap_key_hash(req->service.ptr, req->service.len, req->user.ptr, req->user.len),
        s->nshards != 0 ? s->nshards : 1);
    if (s->registered && (!s->fence_disconnect || s->zk_state == RL_ZKM_CONNECTED) &&
        rl_server_owns_shard(s, shard)) {
        *epoch = s->epochs != NULL ? s->epochs[shard] : 0;
        *known = shard;
        return true;
    }
    s->not_owner++;
    s->errors++;
    if (!s->registered) {
        snprintf(msg, sizeof(msg), "node %s is not registered in ZooKeeper: it answers nothing",
                 s->name);
    } else if (s->fence_disconnect && s->zk_state != RL_ZKM_CONNECTED) {
        snprintf(msg, sizeof(msg),
                 "node %s is not connected to ZooKeeper (fencing = disconnect): it answers "
                 "nothing",
                 s->name);
    } else if (s->owned == NULL) {
        snprintf(msg, sizeof(msg), "node %s has no membership view yet", s->name);
    } else if (s->move != NULL) {
        const char *owner = NULL;

        if (rl_move_moving(s->move, shard, &owner)) {
            s->not_owner--;
            s->moving++;
            if (owner[0] != '\0' && !rl_server_owns_shard(s, shard) &&
                rl_move_expected(s->move, shard)) {
                snprintf(msg, sizeof(msg), "shard %u is expected from %s", shard, owner);
            } else if (owner[0] != '\0') {
                snprintf(msg, sizeof(msg), "shard %u is moving to %s", shard, owner);
            } else {
                snprintf(msg, sizeof(msg), "shard %u is being handed off (node %s)", shard,
                         s->name);
            }
            if (rl_wire_put_moving(&c->out, req->id, msg, owner) != 0) {
                rl_conn_close(c, UV_ENOMEM);
                return false;
            }
            rl_conn_mark(c);
            return false;
        }
        snprintf(msg, sizeof(msg), "shard %u is not owned by node %s", shard, s->name);
    } else {
        snprintf(msg, sizeof(msg), "shard %u is not owned by node %s", shard, s->name);
    }
    if (rl_wire_put_error(&c->out, req->id, RL_WIRE_ERR_NOT_OWNER, msg) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return false;
    }
    rl_conn_mark(c);
    return false;
}

static void server_limiter_error(struct rl_conn *c, const struct rl_wire_req *req, int rc);

/* Judges one prepared CHECK and writes its reply. */
static void
server_check_prepared(struct rl_conn *c, const struct rl_wire_req *req,
                      struct rl_limiter_prep *prep)
{
    struct rl_server *s = c->data;
    struct rl_wire_check_reply rep;
    uint16_t epoch;
    int rc;

    if (!server_owns(c, req, &epoch, &prep->shard)) {
        return;
    }
    rc = rl_limiter_check_prepared(s->limiter, req, prep, s->now_ms, epoch, &rep);
    if (rc != 0) {
        server_limiter_error(c, req, rc);
        return;
    }
    s->batch_checks++;
    server_throttle_hook(s, req, &rep);
    server_replied(c, rl_wire_put_check_reply(&c->out, &rep));
}

/* The ERROR of a CHECK or ADJUST the limiter could not judge (rl_limiter_check_epoch's
 * negative returns). */
static void
server_limiter_error(struct rl_conn *c, const struct rl_wire_req *req, int rc)
{
    char msg[200];

    if (rc == -EPERM) {
        snprintf(msg, sizeof(msg), "the service has configured rules: an inline limit is refused");
    } else if (rc == -EDQUOT) {
        snprintf(msg, sizeof(msg),
                 "this client holds too many distinct inline limits on this node (%u)",
                 RL_INLTAB_TENANT_MAX);
    } else if (rc == -ENOSPC && req->limit.set) {
        snprintf(msg, sizeof(msg), "too many distinct inline limits on this node (%u)",
                 RL_INLTAB_CLIENTS_MAX);
    } else if (rc == -ENOSPC) {
        snprintf(msg, sizeof(msg),
                 "too many scaled tiers of scope = global services on this node (%u)",
                 RL_INLTAB_MAX);
    } else {
        snprintf(msg, sizeof(msg), "out of memory");
    }
    server_replied(c, rl_wire_put_error(&c->out, req->id,
                                        rc == -EPERM ? RL_WIRE_ERR_BAD_FIELD
                                                     : RL_WIRE_ERR_OVERLOADED,
                                        msg));
}

/* Judges the CHECKs held, in frame order, while their connection still takes replies (as
 * conn_frames would have stopped handing it frames). */
static void
server_judge(struct rl_server *s)
{
    struct rl_conn *c = s->pending_conn;

    for (unsigned i = 0; i < s->npending; i++) {
        if (!c->connected || c->finishing) {
            break;
        }
        server_check_prepared(c, &s->pending[i].req, &s->pending[i].prep);
    }
    s->npending = 0;
    s->pending_conn = NULL;
}

/*
 * The node's answers, one per op it serves (the op table's node column, wire.h): each writes
 * its reply into c->out and marks the connection, or closes it. A CHECK is held (prepared,
 * its key's slots prefetched) and judged with the batch's others: when RL_SERVER_BATCH are
 * held, at the next frame that is not a CHECK, or at the end of the read's batch.
 */
static void
server_check(struct rl_conn *c, const struct rl_wire_req *req)
{
    struct rl_server *s = c->data;
    struct rl_server_pending *p;

    if (s->npending > 0 && s->pending_conn != c) {
        server_judge(s); /* cannot happen: batches are per connection, and end judged */
    }
    p = &s->pending[s->npending++];
    p->req = *req;
    s->pending_conn = c;
    rl_limiter_prepare(s->limiter, req, &p->prep);
    if (s->npending == RL_SERVER_BATCH) {
        server_judge(s);
    }
}

/* ADJUST and RELEASE: judged at once (CHECKs held before it were judged first,
 * server_frame). */
static void
server_adjust(struct rl_conn *c, const struct rl_wire_req *req)
{
    struct rl_server *s = c->data;
    struct rl_limiter_prep prep;
    struct rl_wire_check_reply rep;
    uint16_t epoch;
    int rc;

    if (!server_owns(c, req, &epoch, &prep.shard)) {
        return;
    }
    {
        uint32_t shard = prep.shard;

        rl_limiter_prepare(s->limiter, req, &prep);
        prep.shard = shard;
    }
    rc = req->op == RL_WIRE_OP_RELEASE
             ? rl_limiter_release_prepared(s->limiter, req, &prep, s->now_ms, epoch, &rep)
             : rl_limiter_adjust_prepared(s->limiter, req, &prep, s->now_ms, epoch, &rep);
    if (rc != 0) {
        server_limiter_error(c, req, rc);
        return;
    }
    server_replied(c, req->op == RL_WIRE_OP_RELEASE ? rl_wire_put_release_reply(&c->out, &rep)
                                                    : rl_wire_put_adjust_reply(&c->out, &rep));
}

/* RELEASE: as ADJUST, judged at once (docs/PROTOCOL.md, "RELEASE"). */
static void
server_release(struct rl_conn *c, const struct rl_wire_req *req)
{
    server_adjust(c, req);
}

static void
server_ping(struct rl_conn *c, const struct rl_wire_req *req)
{
    struct rl_server *s = c->data;

    server_replied(c, rl_wire_put_ping_reply(&c->out, req->id, s->name));
}

static void
server_hello(struct rl_conn *c, const struct rl_wire_req *req)
{
    struct rl_server *s = c->data;

    if (req->role.len != 6 || memcmp(req->role.ptr, "router", 6) != 0) {
        reply_error(c, req->id, RL_WIRE_ERR_BAD_FIELD, "role must be \"router\"");
        return;
    }
    if (!rl_conn_set_router(c)) {
        /* It holds a client's slot already (one held in the reserve never gets here): it
         * keeps it, as a client's connection, rather than being closed for a router to
         * reconnect at once (a reserve too small for routers x workers x 3, or one that
         * clients saying HELLO took). */
        s->errors++;
        server_replied(c, rl_wire_put_error(&c->out, req->id, RL_WIRE_ERR_OVERLOADED,
                                            "the router reserve is full (router_reserve): "
                                            "served as a client's connection"));
        return;
    }
    server_replied(c, rl_wire_put_hello_reply(&c->out, req->id, s->name));
}

static void
server_auth(struct rl_conn *c, const struct rl_wire_req *req)
{
    struct rl_server *s = c->data;

    if (rl_gate_auth(&s->gate, c, req) != 0) {
        s->errors++;
    }
}

static void
server_clock(struct rl_conn *c, const struct rl_wire_req *req)
{
    struct rl_server *s = c->data;

    if (!s->opts.test_clock) {
        reply_error(c, req->id, RL_WIRE_ERR_UNKNOWN_OP,
                    "op 4 (CLOCK) needs a node started with --test-clock");
        return;
    }
    rl_clock_set(&s->clock, req->now_ms);
    s->now_ms = req->now_ms;
    server_replied(c, rl_wire_put_clock_reply(&c->out, req->id, req->now_ms));
}

/* HANDOFF_OUT, HANDOFF_IN (server_handoff.c): admin answers, as STATS. */
static void
server_handoff_out(struct rl_conn *c, const struct rl_wire_req *req)
{
    size_t before = rl_buf_unread(&c->out);

    server_admin_replied(c, before, rl_server_handoff_out(c->data, req, &c->out));
}

static void
server_handoff_in(struct rl_conn *c, const struct rl_wire_req *req)
{
    size_t before = rl_buf_unread(&c->out);

    server_admin_replied(c, before, rl_server_handoff_in(c->data, req, &c->out));
}

typedef void (*server_handler)(struct rl_conn *c, const struct rl_wire_req *req);

/* The answer to each op, by opcode, derived from the op table: server_<name> for an op whose
 * node column is NODE, none (UNKNOWN_OP) for NONE. */
#define SERVER_HANDLER_NODE(n) server_##n
#define SERVER_HANDLER_NONE(n) NULL
static const server_handler server_handlers[256] = {RL_WIRE_OP_BY(node, SERVER_HANDLER_)};

/* Answers one frame into c->out. */
static void
server_frame(struct rl_conn *c, const char *p, size_t n)
{
    struct rl_server *s = c->data;
    struct rl_wire_fault fault;
    struct rl_wire_req req;
    size_t tail;
    /* A CHECK, ADJUST or RELEASE in its common encodings (six elements, or with an inline
     * limit and a tenant) is read straight from its bytes (wire_fast.h: the same fields the
     * full decoder gives, check_wire_fast and fuzz_wire hold them to it); anything else goes
     * through the full decoder, which also words the errors. */
    int rc = rl_wire_fast_keyed_all(p, n, &req, &tail) == 0
                 ? 0
                 : rl_wire_decode_req(&s->dec, p, n, &req, &fault);

    if (s->npending > 0 && (rc != 0 || req.op != RL_WIRE_OP_CHECK)) {
        /* Any other answer goes after those of the CHECKs before it. A CHECK needs no
         * judging first: the gate admits it as it admitted those held (only an AUTH, which
         * is not a CHECK, changes what the gate says of c). */
        server_judge(s);
    }
    if (rc != 0) {
        if (fault.fatal || c->preauth) {
            /* Before AUTH, a frame that does not decode closes the connection too. */
            s->errors++;
            rl_conn_protocol_error(c, fault.id, fault.err, fault.msg, p, n);
        } else {
            reply_error(c, fault.id, fault.err, fault.msg);
        }
        return;
    }
    if (server_is_admin(&req) && server_admin_spent(s)) {
        /* The turn's admin budget is spent: this request and the frames after it on c wait
         * for the next turn, so decisions on every connection go first and c's replies keep
         * its requests' order. */
        s->admin_deferred++;
        rl_conn_defer(c);
        return;
    }
    if (!rl_gate_admit(&s->gate, c, &req)) {
        s->errors++;
        return;
    }
    if (req.op >= sizeof(server_handlers) / sizeof(server_handlers[0]) ||
        server_handlers[req.op] == NULL) {
        char msg[32];

        /* an op of the protocol that a node does not serve (HOT: a router's) */
        snprintf(msg, sizeof(msg), "unknown op %u", req.op);
        reply_error(c, req.id, RL_WIRE_ERR_UNKNOWN_OP, msg);
        return;
    }
    server_handlers[req.op](c, &req);
}

static void
server_sweep(uv_timer_t *t)
{
    struct rl_server *s = t->data;
    uint64_t now = rl_clock_now_ms(&s->clock);

    if (now > SERVER_SWEEP_GRACE_MS) {
        rl_limiter_sweep(s->limiter, now, SERVER_SWEEP_GRACE_MS, SERVER_SWEEP_BUDGET);
    }
}

static void
server_throttle_tick(uv_timer_t *t)
{
    struct rl_server *s = t->data;

    rl_throttle_tick(s->throttle, rl_clock_now_ms(&s->clock));
}

/* The events log's path: the config's, with each %n replaced by the node's name. */
static void
events_log_path(char *buf, size_t len, const char *tmpl, const char *name)
{
    size_t n = 0;

    for (; *tmpl != '\0' && n + 1 < len; tmpl++) {
        if (tmpl[0] == '%' && tmpl[1] == 'n') {
            n += (size_t)snprintf(buf + n, len - n, "%s", name);
            tmpl++;
            if (n >= len) {
                n = len - 1;
            }
        } else {
            buf[n++] = *tmpl;
        }
    }
    buf[n] = '\0';
}

static int
server_throttle_create(struct rl_server *s)
{
    const struct rl_conf *conf = s->opts.conf;
    uint32_t cap = conf != NULL ? conf->throttle_events : RL_THROTTLE_DEFAULT;
    char path[4096] = "";
    int rc;

    if (conf != NULL && conf->events_log != NULL) {
        events_log_path(path, sizeof(path), conf->events_log, s->name);
    }
    rc = rl_throttle_create(&s->throttle, cap, s->name, path);
    if (rc != 0) {
        /* the events log's failure is the caller's one line (rl-node: cannot open ...) */
        s->events_log_failed = path[0] != '\0';
        if (!s->events_log_failed) {
            rl_log_error("throttle events: cannot start (%s)", strerror(-rc));
        }
        return rc;
    }
    if (conf != NULL) {
        rl_throttle_set_log_bounds(s->throttle, conf->events_log_max_size, conf->events_log_keep,
                                   conf->events_log_rate);
    }
    if (cap > 0) {
        s->episodes = calloc(RL_WIRE_TOP_MAX, sizeof(*s->episodes));
        if (s->episodes == NULL) {
            rl_throttle_destroy(s->throttle);
            s->throttle = NULL;
            return -ENOMEM;
        }
    }
    return 0;
}

static const struct rl_conn_ops server_conn_ops = {
    .on_batch = server_batch,
    .on_frame = server_frame,
    .on_batch_end = server_batch_end,
};

int
rl_server_start(struct rl_server *s, uv_loop_t *loop, struct rl_limiter *limiter,
                const struct rl_server_opts *opts)
{
    int rc;

    memset(s, 0, sizeof(*s));
    s->loop = loop;
    s->limiter = limiter;
    s->opts = *opts;
    if (s->opts.limits.max_connections == 0) {
        s->opts.limits = rl_conn_limits_default();
    }
    snprintf(s->name, sizeof(s->name), "%s", opts->name);
    s->opts.name = s->name;
    s->zk_state = RL_SERVER_ZK_NONE;
    rl_gate_init(&s->gate, opts->conf, RL_GATE_NODE);
    rl_gate_limits(&s->gate, &s->opts.limits);
    s->registered = 1;
    s->fence_disconnect = opts->conf != NULL && opts->conf->fence_disconnect;
    rl_clock_init(&s->clock);
    s->started_ms = uv_now(loop);
    rc = server_throttle_create(s);
    if (rc != 0) {
        return rc;
    }
    rc = rl_wire_decoder_init(&s->dec);
    if (rc != 0) {
        rl_throttle_destroy(s->throttle);
        free(s->episodes);
        return rc;
    }
    s->dec.no_clock = !s->opts.test_clock; /* CLOCK of any shape: UNKNOWN_OP */
    rc = rl_connq_init(&s->connq, loop);
    if (rc != 0) {
        rl_wire_decoder_deinit(&s->dec);
        rl_throttle_destroy(s->throttle);
        free(s->episodes);
        return rc;
    }
    rl_connq_set_tls(&s->connq, opts->tls, NULL);
    s->pending_closes = 4; /* the flusher, the listener, the sweep and throttle timers */
    uv_timer_init(loop, &s->sweep_timer);
    s->sweep_timer.data = s;
    uv_timer_init(loop, &s->throttle_timer);
    s->throttle_timer.data = s;
    rc = rl_listener_start(&s->listener, &s->connq, opts->host, opts->port, &server_conn_ops,
                           sizeof(struct rl_conn), &s->opts.limits, s);
    if (rc != 0) {
        rl_server_close(s, NULL);
        return rc;
    }
    uv_timer_start(&s->sweep_timer, server_sweep, SERVER_SWEEP_MS, SERVER_SWEEP_MS);
    if (s->throttle != NULL) {
        uv_timer_start(&s->throttle_timer, server_throttle_tick, SERVER_THROTTLE_TICK_MS,
                       SERVER_THROTTLE_TICK_MS);
    }
    return 0;
}

void
rl_server_set_membership(struct rl_server *s, int zk_state, int registered)
{
    s->zk_state = zk_state;
    s->registered = registered;
}

void
rl_server_set_owned(struct rl_server *s, const uint8_t *owned, uint32_t nshards,
                    int64_t table_digest)
{
    s->owned = owned;
    s->nshards = nshards;
    s->table_digest = table_digest;
}

void
rl_server_set_epochs(struct rl_server *s, const uint16_t *epochs)
{
    s->epochs = epochs;
}

void
rl_server_close(struct rl_server *s, void (*on_closed)(struct rl_server *s))
{
    if (s->closing) {
        return;
    }
    s->closing = true;
    s->on_closed = on_closed;
    rl_listener_close(&s->listener, server_listener_closed);
    uv_close((uv_handle_t *)&s->sweep_timer, server_handle_closed);
    uv_close((uv_handle_t *)&s->throttle_timer, server_handle_closed);
    rl_connq_close(&s->connq, server_connq_closed, s);
}

bool
rl_server_ready(const struct rl_server *s, char *why, size_t len)
{
    if (s->closing) {
        snprintf(why, len, "shutting down");
        return false;
    }
    if (s->zk_state == RL_SERVER_ZK_NONE) {
        return true; /* static membership: serving is being ready */
    }
    if (!s->registered) {
        snprintf(why, len, "not registered in ZooKeeper (session %s)",
                 rl_zkm_state_name((enum rl_zkm_state)s->zk_state));
        return false;
    }
    if (s->fence_disconnect && s->zk_state != RL_ZKM_CONNECTED) {
        snprintf(why, len, "fenced: not connected to ZooKeeper (fencing = disconnect)");
        return false;
    }
    if (s->owned == NULL) {
        snprintf(why, len, "no membership view yet");
        return false;
    }
    return true;
}

void
rl_server_metrics(struct rl_server *s, struct rl_prom *p)
{
    char lab[320];

    rl_limiter_metrics(s->limiter, p);
    rl_prom_family(p, "rl_node_decision_duration_seconds", "histogram",
                   "Time a CHECK spends in the node, from the read that brought it to its "
                   "reply being queued for writing.");
    rl_prom_hist(p, "rl_node_decision_duration_seconds", NULL, &s->latency);

    rl_prom_family(p, "rl_node_errors_total", "counter",
                   "ERROR replies sent, by kind: not_owner (shard not this node's, or fenced), "
                   "moving (shard in flight between two nodes), auth (failed AUTH), other.");
    rl_prom_u64(p, "rl_node_errors_total", rl_prom_labels(lab, sizeof(lab), "kind", "not_owner", NULL),
                s->not_owner);
    rl_prom_u64(p, "rl_node_errors_total", rl_prom_labels(lab, sizeof(lab), "kind", "auth", NULL),
                s->gate.failures);
    rl_prom_u64(p, "rl_node_errors_total", rl_prom_labels(lab, sizeof(lab), "kind", "moving", NULL),
                s->moving);
    rl_prom_u64(p, "rl_node_errors_total", rl_prom_labels(lab, sizeof(lab), "kind", "other", NULL),
                s->errors - s->not_owner - s->moving - s->gate.failures);
    rl_throttle_metrics(s->throttle, p);
    rl_prom_one(p, "rl_node_admin_deferred_total", "counter",
                "Admin requests (STATS, THROTTLED) left for a later loop turn because the "
                "turn's admin budget was spent.",
                NULL, s->admin_deferred);
    rl_listener_metrics(&s->listener, p);
    rl_rules_metrics(s->opts.rules, s->opts.conf != NULL ? s->opts.conf->rules_digest : 0, p);

    rl_prom_family(p, "rl_node_registered", "gauge",
                   "1 while this node's znode is held (always 1 with static membership).");
    rl_prom_u64(p, "rl_node_registered", NULL, s->registered ? 1 : 0);
    if (s->zk_state != RL_SERVER_ZK_NONE) {
        rl_prom_zookeeper(p, s->zk_state == RL_ZKM_CONNECTED, s->zk_expiries);
        rl_prom_family(p, "rl_node_shards_owned", "gauge",
                       "Shards this node owns in its view of the membership and assignment.");
        rl_prom_u64(p, "rl_node_shards_owned", NULL,
                    s->move != NULL ? rl_move_count_owned(s->move) : s->shards_owned);
        if (s->move != NULL) {
            rl_move_metrics(s->move, p);
        }
    }
    rl_prom_family(p, "rl_node_ready", "gauge", "1 while /readyz answers 200.");
    {
        char why[160];

        rl_prom_u64(p, "rl_node_ready", NULL, rl_server_ready(s, why, sizeof(why)) ? 1 : 0);
    }
}
