/*
 * router: clients in, nodes out. Every forwarded CHECK becomes a pending record in a fixed
 * slab; the id sent to the node is the record's index and an 8-bit generation, so a late
 * reply to a record that was already answered (deadline) or reused is recognised and
 * dropped. Pending records sit on three lists: their client's (to orphan them when the
 * client leaves), their node connection's (to answer them by failure policy the moment the
 * connection dies), and one FIFO ordered by deadline (every request gets the same deadline,
 * so creation order is deadline order and one timer on the head suffices).
 * Connections to clients and to nodes are framed connections of conn.h: their output is
 * gathered and written once per loop turn by the shared flusher, and a client whose requests
 * in flight reach RL_CONN_HOLD_MAX, or whose replies pile up, is paused (conn.h's one rule).
 */
#include "router.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "clock.h"
#include "conn.h"
#include "log.h"
#include "reqlog.h"
#include "rules.h"
#include "upstream.h"
#include "view.h"
#include "wire.h"

#define ROUTER_USER_LOGGED 64u        /* user bytes kept per request for the request log */
#define ROUTER_GEN_SHIFT 24           /* upstream id = gen << 24 | slab index */
#define ROUTER_PENDING_MAX (1u << 24) /* so the index fits under the generation */
#define ROUTER_AUTH_WARN_MS 10000u    /* failed AUTHs are said at most this often */
/* THROTTLED fan-outs (docs/PROTOCOL.md, "THROTTLED"): how long the nodes are waited for, and
 * how many may be in flight per client and in the whole router (OVERLOADED past either).
 * Each holds up to RL_WIRE_TOP_MAX episodes copied out of the nodes' replies (~60 KiB). */
#define ROUTER_ADMIN_TIMEOUT_MS 1000u
#define ROUTER_FANOUT_PER_CLIENT 4u
#define ROUTER_FANOUT_MAX 64u

struct rl_cconn;
struct rl_fanout;

struct rl_pending {
    struct rl_cconn *client; /* NULL once the client left */
    struct rl_upstream *up;
    struct rl_uplink link;            /* in flight on one of up's connections */
    struct rl_pending *cprev, *cnext; /* client's list */
    struct rl_pending *fprev, *fnext; /* deadline FIFO, or the free list (fnext) */
    /* THROTTLED: the fan-out this is one node's part of (then cprev/cnext link the fan-out's
     * parts, and the record is in neither the client's list nor the FIFO); NULL: a CHECK */
    struct rl_fanout *fan;
    const struct rl_rule *rule;
    uint64_t deadline;
    uint64_t start_ns; /* uv_hrtime() of the read that brought the request */
    uint64_t key_hash;
    uint32_t client_id;
    uint32_t shard;
    uint8_t gen;
    bool used;
    bool logged;
    uint8_t ulen;
    char user[ROUTER_USER_LOGGED];
};

/* A client connection: conn.h's, plus the requests it has in flight (one hold each). */
struct rl_cconn {
    struct rl_conn conn; /* first: the listener allocates rl_cconn-sized connections */
    struct rl_pending *pending;
    struct rl_fanout *fanouts; /* THROTTLED fan-outs in flight */
    uint32_t nfanouts;
};

/* An episode copied out of a node's THROTTLED reply. */
struct rl_fan_ep {
    uint64_t start_ms, end_ms, refused;
    uint32_t ended;
    uint16_t slen, elen, ulen, nlen;
    bool has_endpoint;
    char service[RL_WIRE_SERVICE_MAX];
    char endpoint[RL_WIRE_ENDPOINT_MAX];
    char user[RL_WIRE_USER_MAX];
    char node[RL_WIRE_NODE_MAX];
};

/* One THROTTLED request of a client, sent to every node: the best `top` episodes so far and
 * the nodes that did not answer. */
struct rl_fanout {
    struct rl_router *r;
    struct rl_cconn *client; /* NULL once the client left */
    struct rl_fanout *cprev, *cnext;
    struct rl_pending *parts; /* one per node still to answer, linked by cprev/cnext */
    uint32_t outstanding;
    uint32_t client_id;
    uint32_t top;
    uv_timer_t timer;
    size_t nmissing;
    char missing[RL_WIRE_MISSING_MAX][RL_WIRE_NODE_MAX + 1];
    size_t neps;
    struct rl_fan_ep eps[RL_WIRE_TOP_MAX];
};

struct rl_router {
    uv_loop_t *loop;
    struct rl_connq connq;
    struct rl_listener listener;
    uv_timer_t deadline_timer;
    const struct rl_conf *conf;
    struct rl_router_opts opts;
    char name[64];
    int handles; /* open handles of the router itself */
    bool closing;

    /* membership, assignment and the table built from them */
    struct rl_view view;
    struct rl_shardmap *map;
    struct rl_upstream **owners; /* owners[i]: the upstream of map->members[i] */
    struct rl_upstream *upstreams;
    int64_t table_digest; /* STATS: rl_shardmap_digest_stat(map), kept at each rebuild */

    /* pending requests */
    struct rl_pending *slab;
    uint32_t slab_cap;
    struct rl_pending *free_list, *free_tail;
    struct rl_pending *fifo_head, *fifo_tail;
    uint32_t npending;

    struct rl_wire_decoder dec; /* client requests, one frame at a time */
    struct rl_reqlog *log;
    uint64_t log_anchor_real; /* wall clock (ms) at loop time log_anchor_loop */
    uint64_t log_anchor_loop;
    struct rl_router_stats stats;
    uint64_t auth_warned_ms;
    uint64_t refreshed_ms; /* loop time on_stale was last called */

    /* metrics */
    uint64_t (*rule_codes)[RL_WIRE_CODE_COUNT]; /* per rule id, answers by code; the last
                                                   row (conf->nrules): no rule matched */
    size_t rule_rows; /* conf->nrules + 1, unless memory for new rules' rows was lacking */
    struct rl_hist latency; /* end to end: from the read that brought a CHECK to its reply */
    uint64_t batch_ns;      /* uv_hrtime() at the client batch being read */
    uint32_t unowned;       /* shards with no owner in the table (all, before one is built) */
    /* rules replaced while requests pointed to them (rl_router_rules_changed), oldest
     * first, each freed once no request from before its swap is in flight */
    struct router_retired *retired;
    uv_timer_t retire_timer;
    uint32_t nfanouts;     /* THROTTLED fan-outs in flight */
};

struct router_retired {
    struct router_retired *next;
    struct rl_conf *conf;
    uint64_t until; /* deadline of the last request that may point into it */
};

static void router_maybe_free(struct rl_router *r);
static void router_throttled(struct rl_conn *conn, const struct rl_wire_req *req);

/* ---- pending records ---------------------------------------------------------------- */

static struct rl_pending *
pending_get(struct rl_router *r)
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

static uint32_t
pending_id(const struct rl_router *r, const struct rl_pending *p)
{
    return ((uint32_t)p->gen << ROUTER_GEN_SHIFT) | (uint32_t)(p - r->slab);
}

static struct rl_pending *
pending_by_id(struct rl_router *r, uint32_t id)
{
    uint32_t idx = id & (ROUTER_PENDING_MAX - 1);
    struct rl_pending *p;

    if (idx >= r->slab_cap) {
        return NULL;
    }
    p = &r->slab[idx];
    if (!p->used || p->gen != (uint8_t)(id >> ROUTER_GEN_SHIFT)) {
        return NULL;
    }
    return p;
}

/*
 * Unlinks p from every list and returns it to the free list. A record whose node may still
 * answer it (late: the deadline answered it first) goes to the tail, so that its slot is the
 * last to be reused: the 8-bit generation alone would let a late reply land on a request
 * that reused the slot 256 allocations later, which the head of a LIFO list reaches fast.
 */
static void pending_free(struct rl_router *r, struct rl_pending *p, bool late_reply);

static void
pending_put(struct rl_router *r, struct rl_pending *p, bool late_reply)
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
    pending_free(r, p, late_reply);
}

/* Returns p, unlinked from every list, to the free list; late_reply as for pending_put. */
static void
pending_free(struct rl_router *r, struct rl_pending *p, bool late_reply)
{
    p->used = false;
    p->fan = NULL;
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

/* Returns a record that pending_get gave and that was never linked anywhere (its request
 * could not be sent) to the head of the free list. */
static void
pending_unget(struct rl_router *r, struct rl_pending *p)
{
    p->used = false;
    p->fnext = r->free_list;
    r->free_list = p;
    if (r->free_tail == NULL) {
        r->free_tail = p;
    }
    r->npending--;
}

/* ---- answers -------------------------------------------------------------------------- */

static void
log_answer(struct rl_router *r, uint32_t shard, const char *node, uint32_t code, uint64_t hash,
           const char *service, size_t slen, const char *user, size_t ulen)
{
    uint64_t loop_ms = uv_now(r->loop);

    /* Wall-clock time from the loop's cached clock, re-anchored once a second: a
     * clock_gettime per logged line was a measurable share of the log's cost. */
    if (r->log_anchor_real == 0 || loop_ms - r->log_anchor_loop >= 1000) {
        r->log_anchor_real = rl_clock_real_ms();
        r->log_anchor_loop = loop_ms;
    }
    rl_reqlog_add(r->log, r->log_anchor_real + (loop_ms - r->log_anchor_loop), shard, node, code,
                  hash, service, slen, user, ulen);
}

static void
count_code(struct rl_router *r, const struct rl_rule *rule, uint32_t code, uint64_t start_ns)
{
    size_t row = rule != NULL ? rule->id : r->conf->nrules;

    /* A request forwarded under rules since replaced (answered within a deadline of the
     * swap) is not counted by service: its rule's id indexes the old rules. */
    if (rule != NULL &&
        ((uintptr_t)rule < (uintptr_t)r->conf->rules ||
         (uintptr_t)rule >= (uintptr_t)(r->conf->rules + r->conf->nrules))) {
        row = SIZE_MAX;
    }
    if (code < RL_WIRE_CODE_COUNT && row < r->rule_rows) {
        r->rule_codes[row][code]++;
    }
    rl_hist_observe(&r->latency, uv_hrtime() - start_ns, 1);
    if (code == RL_WIRE_ALLOWED) {
        r->stats.allowed++;
    } else if (code == RL_WIRE_LIMITED) {
        r->stats.limited++;
    } else if (code == RL_WIRE_QUEUED) {
        r->stats.queued++;
    } else if (code == RL_WIRE_FAIL_OPEN) {
        r->stats.fail_open++;
    } else if (code == RL_WIRE_FAIL_CLOSED) {
        r->stats.fail_closed++;
    } else if (code == RL_WIRE_NO_RULE) {
        r->stats.no_rule++;
    }
}

/*
 * The failure-policy answer: no decision was made, so limit, remaining and reset are 0.
 * FAIL_CLOSED suggests retrying after the session timeout, the longest the shard can stay
 * unowned before ZooKeeper moves it.
 */
static void
fill_failure(const struct rl_router *r, const struct rl_rule *rule, uint32_t id,
             struct rl_wire_check_reply *rep)
{
    memset(rep, 0, sizeof(*rep));
    rep->id = id;
    /* A shadow rule never refuses, not even by failure policy. */
    bool closed = rule->fail_closed && !rule->shadow;

    rep->code = closed ? RL_WIRE_FAIL_CLOSED : RL_WIRE_FAIL_OPEN;
    rep->retry_after_ms = closed ? r->conf->session_timeout_ms : 0;
}

/* Answers p by failure policy and frees it; late_reply as for pending_put. */
static void
pending_fail(struct rl_router *r, struct rl_pending *p, bool late_reply)
{
    struct rl_wire_check_reply rep;

    fill_failure(r, p->rule, p->client_id, &rep);
    count_code(r, p->rule, rep.code, p->start_ns);
    r->stats.checks++;
    if (p->up != NULL) {
        rl_upstream_count_failure(p->up);
    }
    if (p->logged) {
        log_answer(r, p->shard, p->up != NULL ? p->up->name : "-", rep.code, p->key_hash,
                   p->rule->service, p->rule->service_len, p->user, p->ulen);
    }
    if (p->client != NULL) {
        struct rl_conn *c = &p->client->conn;

        if (rl_wire_put_check_reply(&c->out, &rep) == 0) {
            rl_conn_mark(c);
        } else {
            rl_conn_close(c, UV_ENOMEM);
        }
    }
    pending_put(r, p, late_reply);
}

static void
deadline_fire(uv_timer_t *t)
{
    struct rl_router *r = t->data;
    uint64_t now = uv_now(r->loop);

    while (r->fifo_head != NULL && r->fifo_head->deadline <= now) {
        r->stats.deadline_expired++;
        pending_fail(r, r->fifo_head, true);
    }
    if (r->fifo_head != NULL) {
        uv_timer_start(&r->deadline_timer, deadline_fire, r->fifo_head->deadline - now, 0);
    }
    router_maybe_free(r);
}

/* ---- client connections ----------------------------------------------------------------- */

/* The client is closing: its requests still in flight are answered by the node later, to
 * no one: orphan them. */
static void
cconn_on_close(struct rl_conn *conn, int status)
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
cconn_error(struct rl_conn *c, uint32_t id, uint32_t err, const char *msg)
{
    struct rl_router *r = c->data;

    r->stats.errors++;
    if (rl_wire_put_error(&c->out, id, err, msg) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    rl_conn_mark(c);
}

/* ---- requests --------------------------------------------------------------------------- */

static void
router_stats_reply(struct rl_conn *c, uint32_t id)
{
    struct rl_router *r = c->data;
    enum { STATS_MAX = 64 + 4 * 64 };
    const char *keys[STATS_MAX];
    int64_t vals[STATS_MAX];
    char names[4 * 64][96];
    size_t n = 0, nn = 0;
    struct rl_reqlog_stats ls = {0};
    struct rl_listener_stats cs;

#define RL_ROUTER_PUT(f, s)                                                                        \
    keys[n] = s;                                                                                   \
    vals[n++] = (int64_t)r->stats.f;
    RL_ROUTER_STATS_MAP(RL_ROUTER_PUT)
#undef RL_ROUTER_PUT
    rl_listener_stats(&r->listener, &cs);
#define RL_ROUTER_PUT_CONN(f, s)                                                                   \
    keys[n] = s;                                                                                   \
    vals[n++] = (int64_t)cs.f;
    RL_LISTENER_STATS_MAP(RL_ROUTER_PUT_CONN)
#undef RL_ROUTER_PUT_CONN
    keys[n] = "pending";
    vals[n++] = r->npending;
    keys[n] = "members";
    vals[n++] = (int64_t)r->view.nmembers;
    keys[n] = "assignment_version";
    vals[n++] = r->view.asg_version;
    keys[n] = "table_digest";
    vals[n++] = r->table_digest;
    keys[n] = "rules_version";
    vals[n++] = r->opts.rules != NULL ? r->opts.rules->version : 0;
    keys[n] = "rules_digest";
    vals[n++] = r->opts.rules != NULL ? r->opts.rules->digest : (int64_t)r->conf->rules_digest;
    keys[n] = "rules_reloads";
    vals[n++] = r->opts.rules != NULL ? (int64_t)r->opts.rules->reloads : 0;
    keys[n] = "rules_reload_failures";
    vals[n++] = r->opts.rules != NULL ? (int64_t)r->opts.rules->failures : 0;
    if (r->log != NULL) {
        rl_reqlog_stats(r->log, &ls);
    }
    keys[n] = "log_lines";
    vals[n++] = (int64_t)ls.lines;
    keys[n] = "log_dropped";
    vals[n++] = (int64_t)ls.dropped;
    keys[n] = "log_rotations";
    vals[n++] = (int64_t)ls.rotations;
    /*
     * Per node: "node.NAME.forwarded", ".failures", ".up", ".shards" for the first 64 that
     * fit under the codec's RL_WIRE_STATS_MAX pairs (past it the reply would not encode). A
     * member whose address did not parse has no upstream: it reports zeros.
     */
    for (size_t i = 0;
         r->map != NULL && i < r->map->nmembers && i < 64 && n + 4 <= RL_WIRE_STATS_MAX; i++) {
        const struct rl_upstream *u = r->owners[i];
        const char *name = r->map->members[i].name;
        uint32_t shards = 0;

        for (uint32_t s = 0; s < r->map->nshards; s++) {
            shards += r->map->owner[s] == i;
        }
        snprintf(names[nn], sizeof(names[nn]), "node.%s.forwarded", name);
        keys[n] = names[nn++];
        vals[n++] = u != NULL ? (int64_t)u->stats.forwarded : 0;
        snprintf(names[nn], sizeof(names[nn]), "node.%s.failures", name);
        keys[n] = names[nn++];
        vals[n++] = u != NULL ? (int64_t)u->stats.failures : 0;
        snprintf(names[nn], sizeof(names[nn]), "node.%s.up", name);
        keys[n] = names[nn++];
        vals[n++] = u != NULL && rl_upstream_up(u);
        snprintf(names[nn], sizeof(names[nn]), "node.%s.shards", name);
        keys[n] = names[nn++];
        vals[n++] = shards;
    }
    if (rl_wire_put_stats_reply(&c->out, id, keys, vals, n) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    rl_conn_mark(c);
}

/* Answers a CHECK the router decides itself (NO_RULE, or failure policy). */
static void
answer_local(struct rl_conn *c, const struct rl_wire_req *req, const struct rl_rule *rule,
             const struct rl_wire_check_reply *rep, uint32_t shard, const char *node,
             uint64_t hash)
{
    struct rl_router *r = c->data;

    r->stats.checks++;
    count_code(r, rule, rep->code, r->batch_ns);
    if (r->log != NULL && rl_reqlog_sample(r->log)) {
        /* Cut as for forwarded requests (docs/OPERATIONS.md: the first 64 bytes of the user). */
        log_answer(r, shard, node, rep->code, hash, req->service.ptr, req->service.len,
                   req->user.ptr,
                   req->user.len < ROUTER_USER_LOGGED ? req->user.len : ROUTER_USER_LOGGED);
    }
    if (rl_wire_put_check_reply(&c->out, rep) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    rl_conn_mark(c);
}

/*
 * A client that has not authenticated sent something else first, or a wrong token: ERROR
 * UNAUTHORIZED, then the connection closes once that is written.
 */
static void
cconn_unauthorized(struct rl_conn *c, uint32_t id, const char *msg)
{
    struct rl_router *r = c->data;
    uint64_t now = uv_now(r->loop);

    r->stats.auth_failures++;
    r->stats.errors++;
    if (r->auth_warned_ms == 0 || now - r->auth_warned_ms >= ROUTER_AUTH_WARN_MS) {
        rl_log_warn("%s: %s (%llu refused so far; said at most every %u s)", c->peer, msg,
                    (unsigned long long)r->stats.auth_failures, ROUTER_AUTH_WARN_MS / 1000);
        r->auth_warned_ms = now;
    }
    if (rl_wire_put_error(&c->out, id, RL_WIRE_ERR_UNAUTHORIZED, msg) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    rl_conn_finish(c);
}

/* AUTH: who the token says the client is. A wrong token closes the connection. */
static void
cconn_auth(struct rl_conn *c, const struct rl_wire_req *req)
{
    struct rl_router *r = c->data;
    const struct rl_client_conf *cl;

    if (r->conf->nauth_clients == 0 && r->conf->secret == NULL) {
        /* Nothing to check against: the router is open, and says so. */
        if (rl_wire_put_auth_reply(&c->out, req->id, "anonymous") != 0) {
            rl_conn_close(c, UV_ENOMEM);
            return;
        }
        rl_conn_mark(c);
        return;
    }
    cl = rl_conf_client_by_token(r->conf, req->token.ptr, req->token.len);
    c->principal = cl;
    if (cl == NULL) {
        cconn_unauthorized(c, req->id, "AUTH refused: unknown token");
        return;
    }
    if (rl_wire_put_auth_reply(&c->out, req->id, cl->name) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    rl_conn_mark(c);
}

static void
router_check(struct rl_conn *conn, const struct rl_wire_req *req)
{
    struct rl_cconn *c = (struct rl_cconn *)conn;
    struct rl_router *r = conn->data;
    const struct rl_rule *rule;
    struct rl_wire_check_reply rep;
    struct rl_wire_req fwd;
    struct rl_upstream *u = NULL;
    struct rl_pending *p;
    uint64_t hash;
    uint32_t shard, owner = RL_SHARDMAP_NONE;

    hash = rl_shardmap_key_hash(req->service.ptr, req->service.len, req->user.ptr, req->user.len);
    shard = rl_shardmap_shard(hash, r->conf->shards);
    rule = rl_conf_rule(r->conf, req->service.ptr, req->service.len, req->endpoint.ptr,
                        req->endpoint.len);
    if (conn->principal != NULL &&
        !rl_conf_client_may((const struct rl_client_conf *)conn->principal, rule)) {
        r->stats.unauthorized++;
        cconn_error(conn, req->id, RL_WIRE_ERR_UNAUTHORIZED,
                    "this client's token does not allow that service");
        return;
    }
    if (rule == NULL) {
        /* Every process reads the same rules: no node would find one either. */
        memset(&rep, 0, sizeof(rep));
        rep.id = req->id;
        rep.code = RL_WIRE_NO_RULE;
        answer_local(conn, req, NULL, &rep, shard, "-", hash);
        return;
    }
    if (r->map != NULL) {
        owner = rl_shardmap_owner(r->map, shard);
    }
    if (owner != RL_SHARDMAP_NONE) {
        u = r->owners[owner];
    }
    p = u != NULL ? pending_get(r) : NULL;
    if (u != NULL && p == NULL) {
        r->stats.overloaded++;
        cconn_error(conn, req->id, RL_WIRE_ERR_OVERLOADED,
                    "router has too many requests in flight");
        return;
    }
    fwd = *req;
    if (p != NULL) {
        fwd.id = pending_id(r, p);
    }
    if (p == NULL || rl_upstream_send(u, &fwd, &p->link) != 0) {
        if (p != NULL) {
            pending_unget(r, p);
        }
        r->stats.owner_down++;
        if (u != NULL) {
            rl_upstream_count_failure(u);
        }
        fill_failure(r, rule, req->id, &rep);
        answer_local(conn, req, rule, &rep, shard, u != NULL ? u->name : "-", hash);
        return;
    }
    p->client = c;
    p->client_id = req->id;
    p->rule = rule;
    p->shard = shard;
    p->key_hash = hash;
    p->up = u;
    p->deadline = uv_now(r->loop) + r->conf->deadline_ms;
    p->start_ns = r->batch_ns;
    p->logged = r->log != NULL && rl_reqlog_sample(r->log);
    if (p->logged) {
        p->ulen = (uint8_t)(req->user.len < ROUTER_USER_LOGGED ? req->user.len
                                                               : ROUTER_USER_LOGGED);
        memcpy(p->user, req->user.ptr, p->ulen);
    }
    p->cprev = NULL;
    p->cnext = c->pending;
    if (c->pending != NULL) {
        c->pending->cprev = p;
    }
    c->pending = p;
    rl_conn_hold(conn);
    p->fnext = NULL;
    p->fprev = r->fifo_tail;
    if (r->fifo_tail != NULL) {
        r->fifo_tail->fnext = p;
    } else {
        r->fifo_head = p;
        uv_timer_start(&r->deadline_timer, deadline_fire, r->conf->deadline_ms, 0);
    }
    r->fifo_tail = p;
    r->stats.forwarded++;
}

/* One frame of a client. */
static void
cconn_frame(struct rl_conn *c, const char *p, size_t n)
{
    struct rl_router *r = c->data;
    struct rl_wire_fault fault;
    struct rl_wire_req req;

    if (rl_wire_decode_req(&r->dec, p, n, &req, &fault) != 0) {
        if (fault.fatal) {
            r->stats.errors++;
            rl_conn_protocol_error(c, fault.id, fault.err, fault.msg, p, n);
        } else {
            cconn_error(c, fault.id, fault.err, fault.msg);
        }
        return;
    }
    if (c->principal == NULL && r->conf->nauth_clients > 0 && req.op != RL_WIRE_OP_AUTH) {
        cconn_unauthorized(c, req.id, "this router needs AUTH with a client token first");
        return;
    }
    switch (req.op) {
    case RL_WIRE_OP_AUTH:
        cconn_auth(c, &req);
        break;
    case RL_WIRE_OP_CHECK:
        router_check(c, &req);
        break;
    case RL_WIRE_OP_PING:
        if (rl_wire_put_ping_reply(&c->out, req.id, r->name) != 0) {
            rl_conn_close(c, UV_ENOMEM);
            return;
        }
        rl_conn_mark(c);
        break;
    case RL_WIRE_OP_STATS:
        if (c->principal != NULL && !((const struct rl_client_conf *)c->principal)->stats) {
            r->stats.unauthorized++;
            cconn_error(c, req.id, RL_WIRE_ERR_UNAUTHORIZED,
                        "this client's token does not allow STATS (stats = yes)");
            break;
        }
        router_stats_reply(c, req.id);
        break;
    case RL_WIRE_OP_THROTTLED:
        /* The same permission as STATS: both show what clients do. */
        if (c->principal != NULL && !((const struct rl_client_conf *)c->principal)->stats) {
            r->stats.unauthorized++;
            cconn_error(c, req.id, RL_WIRE_ERR_UNAUTHORIZED,
                        "this client's token does not allow THROTTLED (stats = yes)");
            break;
        }
        router_throttled(c, &req);
        break;
    default:
        /* CLOCK is a node's test hook; a router has no clock to set. */
        cconn_error(c, req.id, RL_WIRE_ERR_UNKNOWN_OP, "unknown op");
        break;
    }
}

static void
cconn_batch(struct rl_conn *c)
{
    struct rl_router *r = c->data;

    r->batch_ns = uv_hrtime();
}

static const struct rl_conn_ops cconn_ops = {
    .on_batch = cconn_batch,
    .on_frame = cconn_frame,
    .on_close = cconn_on_close,
};

/* ---- THROTTLED fan-outs ------------------------------------------------------------------ */

static void
fan_timer_closed(uv_handle_t *h)
{
    struct rl_fanout *f = h->data;
    struct rl_router *r = f->r;

    free(f);
    r->handles--;
    router_maybe_free(r);
}

static void
fan_missing(struct rl_fanout *f, const char *name)
{
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
        if (rl_wire_put_throttled_reply(&c->conn.out, f->client_id, eps, f->neps, missing,
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

/* One node's part of f is done: answered (rep, a THROTTLED reply) or not (rep NULL, or an
 * ERROR: the node is listed as missing). */
static void
fan_part_done(struct rl_router *r, struct rl_pending *p, const struct rl_wire_reply *rep,
              bool late_reply)
{
    struct rl_fanout *f = p->fan;

    if (rep != NULL && rep->op == RL_WIRE_OP_THROTTLED) {
        for (size_t i = 0; i < rep->nepisodes; i++) {
            fan_merge(f, &rep->episodes[i]);
        }
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
    pending_free(r, p, late_reply);
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

        fan_part_done(f->r, f->parts, NULL, true);
        if (last) {
            break;
        }
    }
}

/* THROTTLED from a client: ask every node, answer when all did or the admin timeout. */
static void
router_throttled(struct rl_conn *conn, const struct rl_wire_req *req)
{
    struct rl_cconn *c = (struct rl_cconn *)conn;
    struct rl_router *r = conn->data;
    struct rl_fanout *f;
    struct rl_wire_req fwd;

    if (c->nfanouts >= ROUTER_FANOUT_PER_CLIENT || r->nfanouts >= ROUTER_FANOUT_MAX) {
        r->stats.overloaded++;
        cconn_error(conn, req->id, RL_WIRE_ERR_OVERLOADED,
                    "too many THROTTLED requests in flight");
        return;
    }
    f = calloc(1, sizeof(*f));
    if (f == NULL) {
        r->stats.overloaded++;
        cconn_error(conn, req->id, RL_WIRE_ERR_OVERLOADED, "router out of memory");
        return;
    }
    f->r = r;
    f->client = c;
    f->client_id = req->id;
    f->top = req->top != 0 ? req->top : RL_WIRE_TOP_DEFAULT;
    uv_timer_init(r->loop, &f->timer);
    f->timer.data = f;
    r->handles++;
    r->nfanouts++;
    c->nfanouts++;
    f->cnext = c->fanouts;
    if (c->fanouts != NULL) {
        c->fanouts->cprev = f;
    }
    c->fanouts = f;
    rl_conn_hold(conn);
    fwd = *req;
    for (struct rl_upstream *u = r->upstreams; u != NULL; u = u->next) {
        struct rl_pending *p = pending_get(r);

        if (p == NULL) {
            fan_missing(f, u->name);
            continue;
        }
        fwd.id = pending_id(r, p);
        if (rl_upstream_send(u, &fwd, &p->link) != 0) {
            pending_unget(r, p);
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
    if (f->outstanding == 0) {
        fan_finish(f);
        return;
    }
    uv_timer_start(&f->timer, fan_timeout, ROUTER_ADMIN_TIMEOUT_MS, 0);
}

/* ---- node connections --------------------------------------------------------------------- */

static void
up_on_reply(void *arg, struct rl_upstream *u, const struct rl_upconn *from,
            const struct rl_wire_reply *rep)
{
    struct rl_router *r = arg;
    struct rl_wire_check_reply check;
    struct rl_pending *pd;
    struct rl_conn *c;
    int rc = 0;

    pd = pending_by_id(r, rep->id);
    if (pd == NULL || pd->link.conn != from) {
        /* Already answered by the deadline (the node was late), or never ours. */
        r->stats.late_replies++;
        return;
    }
    if (pd->fan != NULL) {
        fan_part_done(r, pd, rep, false);
        return;
    }
    c = pd->client != NULL ? &pd->client->conn : NULL;
    if (rep->op == RL_WIRE_OP_CHECK) {
        r->stats.checks++;
        count_code(r, pd->rule, rep->check.code, pd->start_ns);
        if (pd->logged) {
            log_answer(r, pd->shard, u->name, rep->check.code, pd->key_hash, pd->rule->service,
                       pd->rule->service_len, pd->user, pd->ulen);
        }
        if (c != NULL) {
            check = rep->check;
            check.id = pd->client_id;
            rc = rl_wire_put_check_reply(&c->out, &check);
        }
    } else if (rep->op == RL_WIRE_OP_ERROR && rep->err == RL_WIRE_ERR_NOT_OWNER) {
        /* The node sees another owner (or is fenced): the views differ for now. Answer by
         * policy, as for an owner that cannot be reached, and read the cluster again. */
        r->stats.not_owner++;
        rl_log_debug("node %s: %.*s", u->name, (int)rep->message.len,
                     rep->message.ptr != NULL ? rep->message.ptr : "");
        pending_fail(r, pd, false);
        if (r->opts.on_stale != NULL &&
            (r->refreshed_ms == 0 || uv_now(r->loop) - r->refreshed_ms >= RL_ROUTER_REFRESH_MS)) {
            r->refreshed_ms = uv_now(r->loop);
            r->stats.view_refreshes++;
            r->opts.on_stale(r->opts.arg);
        }
        return;
    } else if (rep->op == RL_WIRE_OP_ERROR) {
        char msg[256];

        r->stats.errors++;
        snprintf(msg, sizeof(msg), "%.*s", (int)rep->message.len,
                 rep->message.ptr != NULL ? rep->message.ptr : "");
        if (c != NULL) {
            rc = rl_wire_put_error(&c->out, pd->client_id, rep->err, msg);
        }
    } else {
        rl_log_warn("node %s answered a CHECK with op %u", u->name, rep->op);
        pending_fail(r, pd, false);
        return;
    }
    pending_put(r, pd, false);
    if (c != NULL) {
        if (rc != 0) {
            rl_conn_close(c, UV_ENOMEM);
        } else {
            rl_conn_mark(c);
        }
    }
}

/* The connection l was sent on is closed: it cannot be answered late. */
static void
up_on_lost(void *arg, struct rl_upstream *u, struct rl_uplink *l)
{
    struct rl_router *r = arg;
    struct rl_pending *p = (struct rl_pending *)((char *)l - offsetof(struct rl_pending, link));

    (void)u;
    if (p->fan != NULL) {
        fan_part_done(r, p, NULL, false);
        return;
    }
    r->stats.owner_down++;
    pending_fail(r, p, false);
}

/* ---- the table ------------------------------------------------------------------------------ */

static struct rl_upstream *
upstream_find(struct rl_router *r, const char *name)
{
    for (struct rl_upstream *u = r->upstreams; u != NULL; u = u->next) {
        if (strcmp(u->name, name) == 0) {
            return u;
        }
    }
    return NULL;
}

static void
upstream_unlink(struct rl_router *r, struct rl_upstream *u)
{
    struct rl_upstream **pp = &r->upstreams;

    while (*pp != u) {
        pp = &(*pp)->next;
    }
    *pp = u->next;
}

static void
router_rebuild(struct rl_router *r)
{
    static const struct rl_upstream_ops ops_template = {up_on_reply, up_on_lost, NULL, NULL, 0};
    struct rl_shardmap *map;
    struct rl_upstream **owners;
    struct rl_upstream_ops ops = ops_template;
    char err[128];

    ops.arg = r;
    ops.secret = r->conf->secret;
    ops.secret_len = r->conf->secret_len;
    if (rl_view_build(&map, r->conf->shards, &r->view, err, sizeof(err)) != 0) {
        rl_log_error("cannot build the shard table: out of memory; keeping the old one");
        return;
    }
    if (err[0] != '\0') {
        rl_log_warn("assignment version %lld ignored: %s", (long long)r->view.asg_version, err);
    }
    owners = calloc(map->nmembers ? map->nmembers : 1, sizeof(*owners));
    if (owners == NULL) {
        rl_shardmap_destroy(map);
        return;
    }
    /* Keep the connections of members that stay at the same address. */
    for (size_t i = 0; i < map->nmembers; i++) {
        struct rl_upstream *u = upstream_find(r, map->members[i].name);

        if (u != NULL && strcmp(u->addr, map->members[i].addr) != 0) {
            upstream_unlink(r, u);
            rl_upstream_retire(u);
            u = NULL;
        }
        if (u == NULL) {
            if (rl_upstream_create(&u, &r->connq, map->members[i].name, map->members[i].addr,
                                   &ops) != 0) {
                rl_log_warn("node %s: bad address \"%s\"", map->members[i].name,
                            map->members[i].addr);
                /* Keep a placeholder-free table: route its shards by failure policy. */
                continue;
            }
            u->next = r->upstreams;
            r->upstreams = u;
        } else if (!rl_upstream_up(u)) {
            rl_upstream_kick(u);
        }
        owners[i] = u;
    }
    for (size_t i = 0; i < map->nmembers; i++) {
        if (owners[i] == NULL) {
            for (uint32_t s = 0; s < map->nshards; s++) {
                if (map->owner[s] == i) {
                    map->owner[s] = RL_SHARDMAP_NONE;
                }
            }
        }
    }
    /* Retire the nodes that left; their requests in flight are answered by policy. */
    for (struct rl_upstream *u = r->upstreams, *next; u != NULL; u = next) {
        bool live = false;

        next = u->next;
        for (size_t i = 0; i < map->nmembers; i++) {
            live = live || owners[i] == u;
        }
        if (!live) {
            rl_log_info("node %s left the membership", u->name);
            upstream_unlink(r, u);
            rl_upstream_retire(u);
        }
    }
    rl_shardmap_destroy(r->map);
    free(r->owners);
    r->map = map;
    r->owners = owners;
    /* Of the table as routed: a member without an upstream owns nothing in it (above). */
    r->table_digest = rl_shardmap_digest_stat(map);
    r->stats.table_builds++;
    r->unowned = 0;
    for (uint32_t sh = 0; sh < map->nshards; sh++) {
        r->unowned += map->owner[sh] == RL_SHARDMAP_NONE;
    }
    {
        uint32_t max;
        double mean;

        rl_shardmap_balance(map, &max, &mean);
        rl_log_info("shard table rebuilt: %zu members, assignment version %lld, max/mean %.2f",
                    map->nmembers, (long long)r->view.asg_version, mean > 0 ? max / mean : 0.0);
    }
}

void
rl_router_set_members(struct rl_router *r, const struct rl_member *members, size_t n)
{
    if (r->closing) {
        return;
    }
    if (rl_view_set_members(&r->view, members, n) != 0) {
        rl_log_error("membership update lost: out of memory");
        return;
    }
    router_rebuild(r);
}

void
rl_router_set_assignment(struct rl_router *r, const char *text, size_t len, int64_t version)
{
    if (r->closing) {
        return;
    }
    if (rl_view_set_assignment(&r->view, text, len, version) != 0) {
        rl_log_error("assignment update lost: out of memory");
        return;
    }
    router_rebuild(r);
}

const char *
rl_router_owner(const struct rl_router *r, uint32_t shard)
{
    uint32_t o;

    if (r->map == NULL || shard >= r->map->nshards) {
        return "";
    }
    o = rl_shardmap_owner(r->map, shard);
    return o == RL_SHARDMAP_NONE ? "" : r->map->members[o].name;
}

/* Frees the retired rules no request in flight can point to: every request created before a
 * swap has a deadline at or before the swap's `until`, and leaves the FIFO by then. */
static void
retire_fire(uv_timer_t *t)
{
    struct rl_router *r = t->data;
    uint64_t now = uv_now(r->loop);

    while (r->retired != NULL && r->retired->until < now &&
           (r->fifo_head == NULL || r->fifo_head->deadline > r->retired->until)) {
        struct router_retired *x = r->retired;

        r->retired = x->next;
        rl_conf_destroy(x->conf);
        free(x);
    }
    if (r->retired != NULL) {
        uint64_t wait = r->retired->until >= now ? r->retired->until - now + 1 : 1;

        uv_timer_start(&r->retire_timer, retire_fire, wait, 0);
    }
}

/*
 * The metrics' answers per rule follow the new rules: a rule of the same service and
 * endpoint keeps its counts, a new one starts at zero, a removed one's go (its series ends).
 * Out of memory, the old counts are kept only where they fit.
 */
static void
router_recount_rules(struct rl_router *r, const struct rl_conf *old)
{
    const struct rl_conf *c = r->conf;
    uint64_t (*codes)[RL_WIRE_CODE_COUNT] = calloc(c->nrules + 1, sizeof(*codes));

    if (codes == NULL) {
        /* Keep the old rows: counts land where the rule ids still fit, metrics show what
         * the rows hold. */
        rl_log_error("out of memory: the per-service answer counts may be wrong until a "
                     "restart");
        return;
    }
    for (size_t i = 0; i < c->nrules; i++) {
        const struct rl_rule *n = &c->rules[i];

        for (size_t j = 0; j < old->nrules && j + 1 < r->rule_rows; j++) {
            const struct rl_rule *o = &old->rules[j];

            if (strcmp(n->service, o->service) == 0 &&
                (n->endpoint == NULL) == (o->endpoint == NULL) &&
                (n->endpoint == NULL || strcmp(n->endpoint, o->endpoint) == 0)) {
                memcpy(codes[i], r->rule_codes[j], sizeof(codes[i]));
                break;
            }
        }
    }
    memcpy(codes[c->nrules], r->rule_codes[r->rule_rows - 1], sizeof(codes[c->nrules]));
    free(r->rule_codes);
    r->rule_codes = codes;
    r->rule_rows = c->nrules + 1;
}

void
rl_router_rules_changed(struct rl_router *r, struct rl_conf *old)
{
    struct router_retired *x, **pp;

    if (old == NULL) {
        return;
    }
    router_recount_rules(r, old);
    if (r->npending == 0 || r->closing) {
        rl_conf_destroy(old);
        return;
    }
    x = calloc(1, sizeof(*x));
    if (x == NULL) {
        /* Never free rules a request may still read: keep them for good. */
        rl_log_error("out of memory: the replaced rules are kept until exit");
        return;
    }
    x->conf = old;
    x->until = uv_now(r->loop) + r->conf->deadline_ms;
    for (pp = &r->retired; *pp != NULL; pp = &(*pp)->next) {
    }
    *pp = x;
    if (!uv_is_active((uv_handle_t *)&r->retire_timer)) {
        uv_timer_start(&r->retire_timer, retire_fire, r->conf->deadline_ms + 1, 0);
    }
}

const struct rl_rules_status *
rl_router_rules_status(const struct rl_router *r)
{
    return r->opts.rules;
}

void
rl_router_reopen_log(struct rl_router *r)
{
    if (r->log != NULL) {
        rl_reqlog_reopen(r->log);
    }
}

/* ---- life cycle ---------------------------------------------------------------------------- */

static void
router_handle_closed(uv_handle_t *h)
{
    struct rl_router *r = h->data;

    r->handles--;
    router_maybe_free(r);
}

static void
router_connq_closed(void *data)
{
    struct rl_router *r = data;

    r->handles--;
    router_maybe_free(r);
}

static void
router_listener_closed(struct rl_listener *l)
{
    struct rl_router *r = l->data;

    r->handles--;
    router_maybe_free(r);
}

static void
router_maybe_free(struct rl_router *r)
{
    if (!r->closing || r->handles > 0) {
        return;
    }
    rl_shardmap_destroy(r->map);
    free(r->owners);
    rl_view_deinit(&r->view);
    while (r->retired != NULL) {
        struct router_retired *x = r->retired;

        r->retired = x->next;
        rl_conf_destroy(x->conf);
        free(x);
    }
    free(r->slab);
    free(r->rule_codes);
    rl_wire_decoder_deinit(&r->dec);
    free(r);
}

int
rl_router_create(struct rl_router **out, uv_loop_t *loop, const struct rl_conf *conf,
                 const struct rl_router_opts *opts)
{
    struct rl_router *r;
    int rc;

    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return -ENOMEM;
    }
    r->loop = loop;
    r->conf = conf;
    r->opts = *opts;
    if (r->opts.limits.max_connections == 0) {
        r->opts.limits = rl_conn_limits_default();
    }
    r->opts.limits.router_reserve = 0; /* a router's clients are applications */
    if (r->opts.max_pending == 0 || r->opts.max_pending > ROUTER_PENDING_MAX) {
        r->opts.max_pending = 262144;
    }
    snprintf(r->name, sizeof(r->name), "%s", opts->name);
    r->view.asg_version = -1;
    r->slab_cap = r->opts.max_pending;
    r->slab = calloc(r->slab_cap, sizeof(*r->slab));
    r->rule_codes = calloc(conf->nrules + 1, sizeof(*r->rule_codes));
    r->rule_rows = conf->nrules + 1;
    r->unowned = conf->shards;
    if (r->slab == NULL || r->rule_codes == NULL || rl_wire_decoder_init(&r->dec) != 0) {
        free(r->slab);
        free(r->rule_codes);
        free(r);
        return -ENOMEM;
    }
    for (uint32_t i = r->slab_cap; i-- > 0;) {
        r->slab[i].fnext = r->free_list;
        r->free_list = &r->slab[i];
    }
    r->free_tail = &r->slab[r->slab_cap - 1];
    if (conf->request_log != NULL && conf->request_log[0] != '\0') {
        rc = rl_reqlog_create(&r->log, loop, conf->request_log, conf->log_sample);
        if (rc == 0) {
            rl_reqlog_set_rotation(r->log, conf->log_max_size, conf->log_keep);
        }
        if (rc != 0) {
            rl_wire_decoder_deinit(&r->dec);
            free(r->slab);
            free(r->rule_codes);
            free(r);
            return rc;
        }
    }
    rc = rl_connq_init(&r->connq, loop);
    if (rc != 0) {
        if (r->log != NULL) {
            rl_reqlog_close(r->log);
        }
        rl_wire_decoder_deinit(&r->dec);
        free(r->slab);
        free(r->rule_codes);
        free(r);
        return rc;
    }
    uv_timer_init(loop, &r->deadline_timer);
    r->deadline_timer.data = r;
    uv_timer_init(loop, &r->retire_timer);
    r->retire_timer.data = r;
    /* the flusher, the deadline and retire timers, the listener with its clients */
    r->handles = 4;
    rc = rl_listener_start(&r->listener, &r->connq, opts->host, opts->port, &cconn_ops,
                           sizeof(struct rl_cconn), &r->opts.limits, r);
    if (rc != 0) {
        rl_router_close(r);
        return rc;
    }
    *out = r;
    return 0;
}

void
rl_router_close(struct rl_router *r)
{
    if (r->closing) {
        return;
    }
    r->closing = true;
    uv_close((uv_handle_t *)&r->deadline_timer, router_handle_closed);
    uv_close((uv_handle_t *)&r->retire_timer, router_handle_closed);
    rl_listener_close(&r->listener, router_listener_closed);
    while (r->upstreams != NULL) {
        struct rl_upstream *u = r->upstreams;

        r->upstreams = u->next;
        rl_upstream_retire(u);
    }
    /* Whatever is still pending has no client left to answer (all closed above). */
    while (r->fifo_head != NULL) {
        pending_put(r, r->fifo_head, false);
    }
    if (r->log != NULL) {
        rl_reqlog_close(r->log);
        r->log = NULL;
    }
    rl_connq_close(&r->connq, router_connq_closed, r);
}

/* ---- metrics ----------------------------------------------------------------------------- */

/* qsort has no argument: the rules being sorted, set just before (loop thread only). */
static const struct rl_conf *router_sort_rules;

static int
router_rule_cmp(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int c = strcmp(router_sort_rules->rules[x].service, router_sort_rules->rules[y].service);

    return c != 0 ? c : (x > y) - (x < y);
}

bool
rl_router_ready(const struct rl_router *r, char *why, size_t len)
{
    if (r->closing) {
        snprintf(why, len, "shutting down");
        return false;
    }
    if (r->map == NULL || r->map->nmembers == 0) {
        snprintf(why, len, "no members: no shard has an owner");
        return false;
    }
    if (r->unowned > 0) {
        snprintf(why, len, "%u of %u shards have no owner", r->unowned,
                 r->conf->shards);
        return false;
    }
    return true;
}

void
rl_router_metrics(struct rl_router *r, struct rl_prom *p)
{
    const struct rl_conf *c = r->conf;
    struct rl_listener_stats cs;
    struct rl_reqlog_stats ls = {0};
    char lab[512], digest[32];

    rl_prom_family(p, "rl_router_decisions_total", "counter",
                   "CHECK requests answered, by service (from the config; \"\" when no rule "
                   "matched) and reply code (fail_open and fail_closed: by failure policy).");
    /* One series per service: its endpoint sections add to it. The rules sorted by service
     * (n log n: a rules file may have thousands of sections, and this runs on the loop). */
    {
        size_t n = c->nrules < r->rule_rows - 1 ? c->nrules : r->rule_rows - 1;
        size_t *order = malloc((n ? n : 1) * sizeof(*order));

        if (order == NULL) {
            p->err = -ENOMEM;
            n = 0;
        }
        for (size_t i = 0; i < n; i++) {
            order[i] = i;
        }
        router_sort_rules = c;
        qsort(order, n, sizeof(*order), router_rule_cmp);
        for (size_t i = 0; i < n;) {
            const char *svc = c->rules[order[i]].service;
            uint64_t v[RL_WIRE_CODE_COUNT] = {0};
            size_t k = i;

            for (; k < n && strcmp(c->rules[order[k]].service, svc) == 0; k++) {
                for (uint32_t code = 0; code < RL_WIRE_CODE_COUNT; code++) {
                    v[code] += r->rule_codes[order[k]][code];
                }
            }
            for (uint32_t code = 0; code < RL_WIRE_CODE_COUNT; code++) {
                if (code != RL_WIRE_NO_RULE) {
                    rl_prom_u64(p, "rl_router_decisions_total",
                                rl_prom_labels(lab, sizeof(lab), "service", svc, "code",
                                               rl_wire_code_name(code), NULL),
                                v[code]);
                }
            }
            i = k;
        }
        free(order);
    }
    rl_prom_u64(p, "rl_router_decisions_total",
                rl_prom_labels(lab, sizeof(lab), "service", "", "code", "no_rule", NULL),
                r->rule_codes[r->rule_rows - 1][RL_WIRE_NO_RULE]);
    rl_prom_family(p, "rl_router_request_duration_seconds", "histogram",
                   "End-to-end time of a CHECK in the router: from the read that brought it to "
                   "its answer (the node's, or the failure policy's).");
    rl_prom_hist(p, "rl_router_request_duration_seconds", NULL, &r->latency);
    rl_prom_family(p, "rl_router_policy_answers_total", "counter",
                   "CHECKs answered by failure policy, by cause: owner_down (no owner, or its "
                   "connection is down or lost), deadline (the node did not answer in time), "
                   "not_owner (the node saw another owner).");
    rl_prom_u64(p, "rl_router_policy_answers_total",
                rl_prom_labels(lab, sizeof(lab), "cause", "owner_down", NULL), r->stats.owner_down);
    rl_prom_u64(p, "rl_router_policy_answers_total",
                rl_prom_labels(lab, sizeof(lab), "cause", "deadline", NULL),
                r->stats.deadline_expired);
    rl_prom_u64(p, "rl_router_policy_answers_total",
                rl_prom_labels(lab, sizeof(lab), "cause", "not_owner", NULL), r->stats.not_owner);
    rl_prom_family(p, "rl_router_requests_in_flight", "gauge",
                   "CHECKs forwarded to nodes and not answered yet.");
    rl_prom_u64(p, "rl_router_requests_in_flight", NULL, r->npending);
    rl_prom_family(p, "rl_router_late_replies_total", "counter",
                   "Node replies that came after the deadline had answered.");
    rl_prom_u64(p, "rl_router_late_replies_total", NULL, r->stats.late_replies);
    rl_prom_family(p, "rl_router_errors_total", "counter",
                   "ERROR replies and refusals, by kind: unauthorized (token does not allow "
                   "it), auth (connection closed for a missing or wrong AUTH), overloaded (too "
                   "many in flight), other.");
    rl_prom_u64(p, "rl_router_errors_total",
                rl_prom_labels(lab, sizeof(lab), "kind", "unauthorized", NULL),
                r->stats.unauthorized);
    rl_prom_u64(p, "rl_router_errors_total", rl_prom_labels(lab, sizeof(lab), "kind", "auth", NULL),
                r->stats.auth_failures);
    rl_prom_u64(p, "rl_router_errors_total",
                rl_prom_labels(lab, sizeof(lab), "kind", "overloaded", NULL), r->stats.overloaded);
    rl_prom_u64(p, "rl_router_errors_total", rl_prom_labels(lab, sizeof(lab), "kind", "other", NULL),
                r->stats.errors);

    rl_prom_family(p, "rl_router_forwarded_total", "counter", "CHECKs forwarded, by node.");
    for (const struct rl_upstream *u = r->upstreams; u != NULL; u = u->next) {
        rl_prom_u64(p, "rl_router_forwarded_total",
                    rl_prom_labels(lab, sizeof(lab), "node", u->name, NULL), u->stats.forwarded);
    }
    rl_prom_family(p, "rl_router_node_failures_total", "counter",
                   "CHECKs answered by failure policy because of this node.");
    for (const struct rl_upstream *u = r->upstreams; u != NULL; u = u->next) {
        rl_prom_u64(p, "rl_router_node_failures_total",
                    rl_prom_labels(lab, sizeof(lab), "node", u->name, NULL), u->stats.failures);
    }
    rl_prom_family(p, "rl_router_node_up", "gauge",
                   "1 while at least one connection to the node is up.");
    for (const struct rl_upstream *u = r->upstreams; u != NULL; u = u->next) {
        rl_prom_u64(p, "rl_router_node_up", rl_prom_labels(lab, sizeof(lab), "node", u->name, NULL),
                    rl_upstream_up(u) ? 1 : 0);
    }
    rl_prom_family(p, "rl_router_upstream_connects_total", "counter",
                   "Connections made to the node: the first ones and every reconnect.");
    for (const struct rl_upstream *u = r->upstreams; u != NULL; u = u->next) {
        rl_prom_u64(p, "rl_router_upstream_connects_total",
                    rl_prom_labels(lab, sizeof(lab), "node", u->name, NULL), u->stats.connects);
    }
    rl_prom_family(p, "rl_router_upstream_disconnects_total", "counter",
                   "Connections to the node lost (each is followed by reconnect attempts).");
    for (const struct rl_upstream *u = r->upstreams; u != NULL; u = u->next) {
        rl_prom_u64(p, "rl_router_upstream_disconnects_total",
                    rl_prom_labels(lab, sizeof(lab), "node", u->name, NULL), u->stats.downs);
    }
    rl_prom_family(p, "rl_router_node_shards", "gauge", "Shards the node owns in this router's table.");
    for (size_t i = 0; r->map != NULL && i < r->map->nmembers; i++) {
        uint32_t n = 0;

        for (uint32_t sh = 0; sh < r->map->nshards; sh++) {
            n += r->map->owner[sh] == i;
        }
        rl_prom_u64(p, "rl_router_node_shards",
                    rl_prom_labels(lab, sizeof(lab), "node", r->map->members[i].name, NULL), n);
    }
    rl_prom_family(p, "rl_router_members", "gauge", "Nodes in the membership.");
    rl_prom_u64(p, "rl_router_members", NULL, r->view.nmembers);
    rl_prom_family(p, "rl_router_shards_unowned", "gauge",
                   "Shards with no reachable owner in the table (answered by failure policy).");
    rl_prom_u64(p, "rl_router_shards_unowned", NULL, r->unowned);
    rl_prom_family(p, "rl_router_assignment_version", "gauge",
                   "Version of the assignment znode in use; -1 when there is none.");
    rl_prom_f64(p, "rl_router_assignment_version", NULL, (double)r->view.asg_version);
    rl_prom_family(p, "rl_router_table_builds_total", "counter", "Shard tables built.");
    rl_prom_u64(p, "rl_router_table_builds_total", NULL, r->stats.table_builds);
    rl_prom_family(p, "rl_router_table_info", "gauge",
                   "The digest of the shard table in use (as STATS table_digest, in hex); "
                   "routers that route alike show the same.");
    snprintf(digest, sizeof(digest), "%016llx", (unsigned long long)r->table_digest);
    rl_prom_u64(p, "rl_router_table_info", rl_prom_labels(lab, sizeof(lab), "digest", digest, NULL),
                1);
    rl_prom_family(p, "rl_router_ready", "gauge", "1 while /readyz answers 200.");
    {
        char why[160];

        rl_prom_u64(p, "rl_router_ready", NULL, rl_router_ready(r, why, sizeof(why)) ? 1 : 0);
    }

    if (r->log != NULL) {
        rl_reqlog_stats(r->log, &ls);
    }
    rl_prom_family(p, "rl_router_request_log_lines_total", "counter",
                   "Lines written to the request log.");
    rl_prom_u64(p, "rl_router_request_log_lines_total", NULL, ls.lines);
    rl_prom_family(p, "rl_router_request_log_dropped_total", "counter",
                   "Request-log lines dropped because the writer fell behind.");
    rl_prom_u64(p, "rl_router_request_log_dropped_total", NULL, ls.dropped);
    rl_prom_family(p, "rl_router_request_log_rotations_total", "counter",
                   "Request-log rotations.");
    rl_prom_u64(p, "rl_router_request_log_rotations_total", NULL, ls.rotations);

    rl_listener_stats(&r->listener, &cs);
    rl_listener_metrics(&cs, p);
    rl_rules_metrics(r->opts.rules, r->conf->rules_digest, p);
}
