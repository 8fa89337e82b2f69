/*
 * router: clients in, nodes out. Every forwarded CHECK becomes a pending record in a fixed
 * slab; the id sent to the node is the record's index and an 8-bit generation, so a late
 * reply to a record that was already answered (deadline) or reused is recognised and
 * dropped. Pending records sit on three lists: their client's (to orphan them when the
 * client leaves), their node connection's (to answer them by failure policy the moment the
 * connection dies), and one FIFO ordered by deadline (every request gets the same deadline,
 * so creation order is deadline order and one timer on the head suffices).
 * Output to nodes and to clients is gathered per connection and written once per loop turn
 * from a uv_check handle.
 */
#include "router.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "clock.h"
#include "log.h"
#include "reqlog.h"
#include "upstream.h"
#include "wire.h"

#define ROUTER_READ_CHUNK (64u * 1024u)
#define ROUTER_OUT_MAX (1u << 20)     /* client replies queued before we stop reading it */
#define ROUTER_CLIENT_PENDING 4096u   /* client requests in flight before we stop reading it */
#define ROUTER_USER_LOGGED 64u        /* user bytes kept per request for the request log */
#define ROUTER_GEN_SHIFT 24           /* upstream id = gen << 24 | slab index */
#define ROUTER_PENDING_MAX (1u << 24) /* so the index fits under the generation */

struct rl_cconn;

struct rl_pending {
    struct rl_cconn *client; /* NULL once the client left */
    struct rl_upconn *uc;
    struct rl_upstream *up;
    struct rl_pending *cprev, *cnext; /* client's list */
    struct rl_pending *uprev, *unext; /* upstream connection's list */
    struct rl_pending *fprev, *fnext; /* deadline FIFO, or the free list (fnext) */
    const struct rl_rule *rule;
    uint64_t deadline;
    uint64_t key_hash;
    uint32_t client_id;
    uint32_t shard;
    uint8_t gen;
    bool used;
    bool logged;
    uint8_t ulen;
    char user[ROUTER_USER_LOGGED];
};

struct rl_cconn {
    uv_tcp_t tcp;
    uv_write_t wreq;
    struct rl_router *r;
    struct rl_cconn *prev, *next;
    struct rl_cconn *dirty_next;
    struct rl_buf in;
    struct rl_buf out;
    struct rl_buf inflight;
    struct rl_wire_decoder dec;
    struct rl_pending *pending;
    uint32_t npending;
    bool reading;
    bool writing;
    bool dirty;
    bool close_after_write;
    bool eof; /* the client shut its side: answer what it sent, then close */
    bool closing;
};

struct rl_router {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_timer_t deadline_timer;
    uv_check_t flush_check;
    const struct rl_conf *conf;
    struct rl_router_opts opts;
    char name[64];
    int handles; /* open handles of the router itself */
    bool closing;

    /* membership, assignment and the table built from them */
    struct rl_member *members;
    size_t nmembers;
    char *assignment_text;
    size_t assignment_len;
    int64_t assignment_version;
    struct rl_shardmap *map;
    struct rl_upstream **owners; /* owners[i]: the upstream of map->members[i] */
    struct rl_upstream *upstreams;

    /* pending requests */
    struct rl_pending *slab;
    uint32_t slab_cap;
    struct rl_pending *free_list, *free_tail;
    struct rl_pending *fifo_head, *fifo_tail;
    uint32_t npending;

    struct rl_cconn *clients;
    struct rl_cconn *dirty_clients;
    struct rl_upconn *dirty_upconns;
    struct rl_wire_decoder updec;
    struct rl_reqlog *log;
    uint64_t log_anchor_real; /* wall clock (ms) at loop time log_anchor_loop */
    uint64_t log_anchor_loop;
    struct rl_router_stats stats;
};

static void cconn_close(struct rl_cconn *c);
static void cconn_mark(struct rl_cconn *c);
static void router_maybe_free(struct rl_router *r);

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
        c->npending--;
    }
    if (p->uc != NULL) {
        if (p->uprev != NULL) {
            p->uprev->unext = p->unext;
        } else {
            p->uc->pending = p->unext;
        }
        if (p->unext != NULL) {
            p->unext->uprev = p->uprev;
        }
        p->uc->npending--;
    }
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
    p->used = false;
    p->client = NULL;
    p->uc = NULL;
    p->up = NULL;
    p->cprev = p->cnext = p->uprev = p->unext = p->fprev = p->fnext = NULL;
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
count_code(struct rl_router *r, uint32_t code)
{
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
    count_code(r, rep.code);
    r->stats.checks++;
    if (p->up != NULL) {
        p->up->stats.failures++;
    }
    if (p->logged) {
        log_answer(r, p->shard, p->up != NULL ? p->up->name : "-", rep.code, p->key_hash,
                   p->rule->service, p->rule->service_len, p->user, p->ulen);
    }
    if (p->client != NULL) {
        struct rl_cconn *c = p->client;

        if (rl_wire_put_check_reply(&c->out, &rep) == 0) {
            cconn_mark(c);
        } else {
            cconn_close(c);
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

static void
cconn_free(uv_handle_t *h)
{
    struct rl_cconn *c = h->data;
    struct rl_router *r = c->r;

    rl_buf_deinit(&c->in);
    rl_buf_deinit(&c->out);
    rl_buf_deinit(&c->inflight);
    rl_wire_decoder_deinit(&c->dec);
    free(c);
    r->handles--;
    router_maybe_free(r);
}

static void
cconn_close(struct rl_cconn *c)
{
    struct rl_router *r = c->r;

    if (c->closing) {
        return;
    }
    c->closing = true;
    /* Its requests still in flight are answered by the node later: orphan them. */
    for (struct rl_pending *p = c->pending; p != NULL; p = p->cnext) {
        p->client = NULL;
    }
    c->pending = NULL;
    c->npending = 0;
    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        r->clients = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    r->stats.connections--;
    uv_close((uv_handle_t *)&c->tcp, cconn_free);
}

static void
cconn_mark(struct rl_cconn *c)
{
    if (!c->dirty && !c->closing) {
        c->dirty = true;
        c->dirty_next = c->r->dirty_clients;
        c->r->dirty_clients = c;
    }
}

static void
cconn_error(struct rl_cconn *c, uint32_t id, uint32_t err, const char *msg)
{
    c->r->stats.errors++;
    if (rl_wire_put_error(&c->out, id, err, msg) != 0) {
        cconn_close(c);
        return;
    }
    cconn_mark(c);
}

static void cconn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void
cconn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct rl_cconn *c = h->data;

    (void)suggested;
    if (rl_buf_reserve(&c->in, ROUTER_READ_CHUNK) != 0) {
        buf->base = NULL;
        buf->len = 0;
        return;
    }
    buf->base = c->in.data + c->in.len;
    buf->len = c->in.cap - c->in.len;
}

static bool
cconn_backlogged(const struct rl_cconn *c)
{
    return rl_buf_unread(&c->out) + rl_buf_unread(&c->inflight) > ROUTER_OUT_MAX ||
           c->npending >= ROUTER_CLIENT_PENDING;
}

static void cconn_flush(struct rl_cconn *c);
static void cconn_process(struct rl_cconn *c);

static void
cconn_written(uv_write_t *w, int status)
{
    struct rl_cconn *c = w->data;

    c->writing = false;
    rl_buf_reset(&c->inflight);
    if (c->closing) {
        return;
    }
    if (status < 0) {
        cconn_close(c);
        return;
    }
    cconn_flush(c);
}

static void
cconn_flush(struct rl_cconn *c)
{
    struct rl_buf tmp;
    uv_buf_t b;

    if (c->closing) {
        return;
    }
    if (!c->reading && !c->close_after_write && !cconn_backlogged(c)) {
        /* Frames left in c->in when it backed up are answered before reading any more. */
        cconn_process(c);
        if (c->closing) {
            return;
        }
        if (!c->reading && !c->eof && !c->close_after_write && !cconn_backlogged(c)) {
            c->reading = uv_read_start((uv_stream_t *)&c->tcp, cconn_alloc, cconn_read) == 0;
        }
    }
    if (c->writing) {
        return;
    }
    if (rl_buf_unread(&c->out) == 0) {
        /* Requests still at a node are answered first: the deadline bounds the wait. */
        if ((c->close_after_write || c->eof) && c->npending == 0) {
            cconn_close(c);
        }
        return;
    }
    tmp = c->inflight;
    c->inflight = c->out;
    c->out = tmp;
    b = uv_buf_init(c->inflight.data + c->inflight.pos, (unsigned)rl_buf_unread(&c->inflight));
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, cconn_written) != 0) {
        cconn_close(c);
        return;
    }
    c->writing = true;
}

/* ---- requests --------------------------------------------------------------------------- */

static void
router_stats_reply(struct rl_cconn *c, uint32_t id)
{
    struct rl_router *r = c->r;
    enum { STATS_MAX = 40 + 4 * 64 };
    const char *keys[STATS_MAX];
    int64_t vals[STATS_MAX];
    char names[4 * 64][96];
    size_t n = 0, nn = 0;
    struct rl_reqlog_stats ls = {0};

#define RL_ROUTER_PUT(f, s)                                                                        \
    keys[n] = s;                                                                                   \
    vals[n++] = (int64_t)r->stats.f;
    RL_ROUTER_STATS_MAP(RL_ROUTER_PUT)
#undef RL_ROUTER_PUT
    keys[n] = "pending";
    vals[n++] = r->npending;
    keys[n] = "members";
    vals[n++] = (int64_t)r->nmembers;
    keys[n] = "assignment_version";
    vals[n++] = r->assignment_version;
    if (r->log != NULL) {
        rl_reqlog_stats(r->log, &ls);
    }
    keys[n] = "log_lines";
    vals[n++] = (int64_t)ls.lines;
    keys[n] = "log_dropped";
    vals[n++] = (int64_t)ls.dropped;
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
        cconn_close(c);
        return;
    }
    cconn_mark(c);
}

/* Answers a CHECK the router decides itself (NO_RULE, or failure policy). */
static void
answer_local(struct rl_cconn *c, const struct rl_wire_req *req, const struct rl_wire_check_reply *rep,
             uint32_t shard, const char *node, uint64_t hash)
{
    struct rl_router *r = c->r;

    r->stats.checks++;
    count_code(r, rep->code);
    if (r->log != NULL && rl_reqlog_sample(r->log)) {
        /* Cut as for forwarded requests (OPERATIONS.md: the first 64 bytes of the user). */
        log_answer(r, shard, node, rep->code, hash, req->service.ptr, req->service.len,
                   req->user.ptr,
                   req->user.len < ROUTER_USER_LOGGED ? req->user.len : ROUTER_USER_LOGGED);
    }
    if (rl_wire_put_check_reply(&c->out, rep) != 0) {
        cconn_close(c);
        return;
    }
    cconn_mark(c);
}

static void
router_check(struct rl_cconn *c, const struct rl_wire_req *req)
{
    struct rl_router *r = c->r;
    const struct rl_rule *rule;
    struct rl_wire_check_reply rep;
    struct rl_wire_req fwd;
    struct rl_upstream *u = NULL;
    struct rl_upconn *uc = NULL;
    struct rl_pending *p;
    uint64_t hash;
    uint32_t shard, owner = RL_SHARDMAP_NONE;

    hash = rl_shardmap_key_hash(req->service.ptr, req->service.len, req->user.ptr, req->user.len);
    shard = rl_shardmap_shard(hash, r->conf->shards);
    rule = rl_conf_rule(r->conf, req->service.ptr, req->service.len, req->endpoint.ptr,
                        req->endpoint.len);
    if (rule == NULL) {
        /* Every process reads the same rules: no node would find one either. */
        memset(&rep, 0, sizeof(rep));
        rep.id = req->id;
        rep.code = RL_WIRE_NO_RULE;
        answer_local(c, req, &rep, shard, "-", hash);
        return;
    }
    if (r->map != NULL) {
        owner = rl_shardmap_owner(r->map, shard);
    }
    if (owner != RL_SHARDMAP_NONE) {
        u = r->owners[owner];
        uc = rl_upstream_pick(u);
    }
    if (uc == NULL) {
        r->stats.owner_down++;
        if (u != NULL) {
            u->stats.failures++;
        }
        fill_failure(r, rule, req->id, &rep);
        answer_local(c, req, &rep, shard, u != NULL ? u->name : "-", hash);
        return;
    }
    p = pending_get(r);
    if (p == NULL) {
        r->stats.overloaded++;
        cconn_error(c, req->id, RL_WIRE_ERR_OVERLOADED, "router has too many requests in flight");
        return;
    }
    p->client = c;
    p->client_id = req->id;
    p->rule = rule;
    p->shard = shard;
    p->key_hash = hash;
    p->up = u;
    p->uc = uc;
    p->deadline = uv_now(r->loop) + r->conf->deadline_ms;
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
    c->npending++;
    p->uprev = NULL;
    p->unext = uc->pending;
    if (uc->pending != NULL) {
        uc->pending->uprev = p;
    }
    uc->pending = p;
    uc->npending++;
    p->fnext = NULL;
    p->fprev = r->fifo_tail;
    if (r->fifo_tail != NULL) {
        r->fifo_tail->fnext = p;
    } else {
        r->fifo_head = p;
        uv_timer_start(&r->deadline_timer, deadline_fire, r->conf->deadline_ms, 0);
    }
    r->fifo_tail = p;

    fwd = *req;
    fwd.id = pending_id(r, p);
    if (rl_wire_put_check(&uc->out, &fwd) != 0) {
        pending_fail(r, p, false);
        return;
    }
    u->stats.forwarded++;
    r->stats.forwarded++;
    rl_upstream_mark(uc);
}

static void
cconn_handle(struct rl_cconn *c, const struct rl_wire_req *req)
{
    switch (req->op) {
    case RL_WIRE_OP_CHECK:
        router_check(c, req);
        break;
    case RL_WIRE_OP_PING:
        if (rl_wire_put_ping_reply(&c->out, req->id, c->r->name) != 0) {
            cconn_close(c);
            return;
        }
        cconn_mark(c);
        break;
    case RL_WIRE_OP_STATS:
        router_stats_reply(c, req->id);
        break;
    default:
        /* CLOCK is a node's test hook; a router has no clock to set. */
        cconn_error(c, req->id, RL_WIRE_ERR_UNKNOWN_OP, "unknown op");
        break;
    }
}

/*
 * Answers the whole frames in c->in while c is not backlogged, and stops reading c when it
 * is (or must close). Stopping mid-batch bounds what one read can queue: 64 KiB of 7-byte
 * STATS requests would otherwise be answered with tens of megabytes at once.
 */
static void
cconn_process(struct rl_cconn *c)
{
    struct rl_wire_req req;
    struct rl_wire_fault fault;
    size_t plen;
    int rc;

    while (!c->closing && !c->close_after_write && !cconn_backlogged(c)) {
        const char *p = c->in.data + c->in.pos;

        rc = rl_wire_frame(p, rl_buf_unread(&c->in), &plen);
        if (rc == 0) {
            break;
        }
        if (rc < 0) {
            cconn_error(c, 0, RL_WIRE_ERR_MALFORMED, "frame length must be 1..65536");
            c->close_after_write = true;
            break;
        }
        if (rl_wire_decode_req(&c->dec, p + RL_WIRE_HDR_LEN, plen, &req, &fault) == 0) {
            cconn_handle(c, &req);
        } else {
            cconn_error(c, fault.id, fault.err, fault.msg);
            c->close_after_write = fault.fatal;
        }
        c->in.pos += RL_WIRE_HDR_LEN + plen;
    }
    if (c->closing) {
        return;
    }
    rl_buf_compact(&c->in);
    if (c->reading && (c->close_after_write || cconn_backlogged(c))) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

static void
cconn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct rl_cconn *c = s->data;

    (void)buf;
    if (nread == UV_EOF) {
        /* A half-closed client still gets the replies to what it sent (libuv stopped
         * reading); cconn_flush closes once they are out. */
        c->eof = true;
        c->reading = false;
        cconn_mark(c);
        return;
    }
    if (nread < 0) {
        cconn_close(c);
        return;
    }
    c->in.len += (size_t)nread;
    cconn_process(c);
}

static void
router_accept(uv_stream_t *listener, int status)
{
    struct rl_router *r = listener->data;
    struct rl_cconn *c;

    if (status < 0 || r->closing) {
        return;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL || rl_wire_decoder_init(&c->dec) != 0) {
        free(c);
        return;
    }
    c->r = r;
    rl_buf_init(&c->in);
    rl_buf_init(&c->out);
    rl_buf_init(&c->inflight);
    uv_tcp_init(r->loop, &c->tcp);
    c->tcp.data = c;
    r->handles++;
    c->next = r->clients;
    if (r->clients != NULL) {
        r->clients->prev = c;
    }
    r->clients = c;
    r->stats.connections++;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        cconn_close(c);
        return;
    }
    r->stats.connections_total++;
    uv_tcp_nodelay(&c->tcp, 1);
    if (r->stats.connections > r->opts.max_connections) {
        cconn_error(c, 0, RL_WIRE_ERR_OVERLOADED, "too many connections");
        c->close_after_write = true;
        return;
    }
    c->reading = uv_read_start((uv_stream_t *)&c->tcp, cconn_alloc, cconn_read) == 0;
    if (!c->reading) {
        cconn_close(c);
    }
}

/* ---- node connections --------------------------------------------------------------------- */

static void
up_on_frame(void *arg, struct rl_upconn *uc, const char *p, size_t n)
{
    struct rl_router *r = arg;
    struct rl_wire_reply rep;
    struct rl_pending *pd;
    struct rl_cconn *c;
    int rc = 0;

    if (rl_wire_decode_reply(&r->updec, p, n, &rep) != 0) {
        rl_log_warn("node %s sent an undecodable reply", uc->up->name);
        return;
    }
    pd = pending_by_id(r, rep.id);
    if (pd == NULL || pd->uc != uc) {
        /* Already answered by the deadline: the node was late. */
        return;
    }
    c = pd->client;
    if (rep.op == RL_WIRE_OP_CHECK) {
        r->stats.checks++;
        count_code(r, rep.check.code);
        if (pd->logged) {
            log_answer(r, pd->shard, uc->up->name, rep.check.code, pd->key_hash,
                       pd->rule->service, pd->rule->service_len, pd->user, pd->ulen);
        }
        if (c != NULL) {
            rep.check.id = pd->client_id;
            rc = rl_wire_put_check_reply(&c->out, &rep.check);
        }
    } else if (rep.op == RL_WIRE_OP_ERROR) {
        char msg[256];

        r->stats.errors++;
        snprintf(msg, sizeof(msg), "%.*s", (int)rep.message.len,
                 rep.message.ptr != NULL ? rep.message.ptr : "");
        if (c != NULL) {
            rc = rl_wire_put_error(&c->out, pd->client_id, rep.err, msg);
        }
    } else {
        rl_log_warn("node %s answered a CHECK with op %u", uc->up->name, rep.op);
        pending_fail(r, pd, false);
        return;
    }
    pending_put(r, pd, false);
    if (c != NULL) {
        if (rc != 0) {
            cconn_close(c);
        } else {
            cconn_mark(c);
        }
    }
    router_maybe_free(r);
}

static void
up_on_lost(void *arg, struct rl_upconn *uc)
{
    struct rl_router *r = arg;

    r->stats.owner_down += uc->npending;
    /* The connection is closed: none of these can be answered late. */
    while (uc->pending != NULL) {
        pending_fail(r, uc->pending, false);
    }
}

static void
up_on_dirty(void *arg, struct rl_upconn *uc)
{
    struct rl_router *r = arg;

    uc->dirty_next = r->dirty_upconns;
    r->dirty_upconns = uc;
}

/* Once per loop turn, after I/O: write what the turn produced, one write per connection. */
static void
router_flush(uv_check_t *h)
{
    struct rl_router *r = h->data;

    /*
     * Only this loop clears `dirty`, as it unlinks: a flush from a write callback that
     * cleared it would let the next mark push a connection that is still on the list, and
     * the list would become a cycle. Flushing a client may answer frames it had left unread
     * (cconn_process), which dirties node connections again: loop until both lists are
     * empty, or they would wait for the next loop turn, which may be a deadline away.
     */
    while (r->dirty_upconns != NULL || r->dirty_clients != NULL) {
        while (r->dirty_upconns != NULL) {
            struct rl_upconn *uc = r->dirty_upconns;

            r->dirty_upconns = uc->dirty_next;
            uc->dirty = false;
            rl_upstream_flush(uc);
        }
        while (r->dirty_clients != NULL) {
            struct rl_cconn *c = r->dirty_clients;

            r->dirty_clients = c->dirty_next;
            c->dirty = false;
            cconn_flush(c);
        }
    }
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
    static const struct rl_upstream_ops ops_template = {up_on_frame, up_on_lost, up_on_dirty,
                                                        NULL};
    struct rl_assignment a, *ap = NULL;
    struct rl_shardmap *map;
    struct rl_upstream **owners;
    struct rl_upstream_ops ops = ops_template;
    char err[128];

    ops.arg = r;
    if (r->assignment_len > 0) {
        if (rl_assignment_init(&a, r->conf->shards) == 0) {
            if (rl_assignment_parse(&a, r->assignment_text, r->assignment_len, err,
                                    sizeof(err)) == 0) {
                ap = &a;
            } else {
                rl_log_warn("assignment version %lld ignored: %s",
                            (long long)r->assignment_version, err);
                rl_assignment_deinit(&a);
            }
        }
    }
    if (rl_shardmap_create(&map, r->conf->shards, r->members, r->nmembers, ap) != 0) {
        rl_log_error("cannot build the shard table: out of memory; keeping the old one");
        if (ap != NULL) {
            rl_assignment_deinit(ap);
        }
        return;
    }
    if (ap != NULL) {
        rl_assignment_deinit(ap);
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
            if (rl_upstream_create(&u, r->loop, map->members[i].name, map->members[i].addr,
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
    r->stats.table_builds++;
    {
        uint32_t max;
        double mean;

        rl_shardmap_balance(map, &max, &mean);
        rl_log_info("shard table rebuilt: %zu members, assignment version %lld, max/mean %.2f",
                    map->nmembers, (long long)r->assignment_version, mean > 0 ? max / mean : 0.0);
    }
}

void
rl_router_set_members(struct rl_router *r, const struct rl_member *members, size_t n)
{
    struct rl_member *copy = NULL;

    if (r->closing) {
        return;
    }
    if (n > 0) {
        copy = malloc(n * sizeof(*copy));
        if (copy == NULL) {
            rl_log_error("membership update lost: out of memory");
            return;
        }
        memcpy(copy, members, n * sizeof(*copy));
    }
    free(r->members);
    r->members = copy;
    r->nmembers = n;
    router_rebuild(r);
}

void
rl_router_set_assignment(struct rl_router *r, const char *text, size_t len, int64_t version)
{
    char *copy = NULL;

    if (r->closing) {
        return;
    }
    if (len > 0) {
        copy = malloc(len);
        if (copy == NULL) {
            rl_log_error("assignment update lost: out of memory");
            return;
        }
        memcpy(copy, text, len);
    }
    free(r->assignment_text);
    r->assignment_text = copy;
    r->assignment_len = len;
    r->assignment_version = version;
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
router_maybe_free(struct rl_router *r)
{
    if (!r->closing || r->handles > 0) {
        return;
    }
    rl_shardmap_destroy(r->map);
    free(r->owners);
    free(r->members);
    free(r->assignment_text);
    free(r->slab);
    rl_wire_decoder_deinit(&r->updec);
    free(r);
}

int
rl_router_create(struct rl_router **out, uv_loop_t *loop, const struct rl_conf *conf,
                 const struct rl_router_opts *opts)
{
    struct sockaddr_storage addr;
    struct rl_router *r;
    int rc;

    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return -ENOMEM;
    }
    r->loop = loop;
    r->conf = conf;
    r->opts = *opts;
    if (r->opts.max_connections == 0) {
        r->opts.max_connections = 10000;
    }
    if (r->opts.max_pending == 0 || r->opts.max_pending > ROUTER_PENDING_MAX) {
        r->opts.max_pending = 262144;
    }
    snprintf(r->name, sizeof(r->name), "%s", opts->name);
    r->assignment_version = -1;
    r->slab_cap = r->opts.max_pending;
    r->slab = calloc(r->slab_cap, sizeof(*r->slab));
    if (r->slab == NULL || rl_wire_decoder_init(&r->updec) != 0) {
        free(r->slab);
        free(r);
        return -ENOMEM;
    }
    for (uint32_t i = r->slab_cap; i-- > 0;) {
        r->slab[i].fnext = r->free_list;
        r->free_list = &r->slab[i];
    }
    r->free_tail = &r->slab[r->slab_cap - 1];
    rc = uv_ip4_addr(opts->host, opts->port, (struct sockaddr_in *)&addr);
    if (rc != 0) {
        rc = uv_ip6_addr(opts->host, opts->port, (struct sockaddr_in6 *)&addr);
    }
    if (rc != 0) {
        goto fail;
    }
    if (conf->request_log != NULL && conf->request_log[0] != '\0') {
        rc = rl_reqlog_create(&r->log, loop, conf->request_log, conf->log_sample);
        if (rc != 0) {
            goto fail;
        }
    }
    uv_tcp_init(loop, &r->listener);
    uv_timer_init(loop, &r->deadline_timer);
    uv_check_init(loop, &r->flush_check);
    r->listener.data = r;
    r->deadline_timer.data = r;
    r->flush_check.data = r;
    r->handles = 3;
    rc = uv_tcp_bind(&r->listener, (const struct sockaddr *)&addr, 0);
    if (rc == 0) {
        rc = uv_listen((uv_stream_t *)&r->listener, 1024, router_accept);
    }
    if (rc != 0) {
        rl_router_close(r);
        return rc;
    }
    uv_check_start(&r->flush_check, router_flush);
    *out = r;
    return 0;
fail:
    rl_wire_decoder_deinit(&r->updec);
    free(r->slab);
    free(r);
    return rc;
}

void
rl_router_close(struct rl_router *r)
{
    if (r->closing) {
        return;
    }
    r->closing = true;
    uv_close((uv_handle_t *)&r->listener, router_handle_closed);
    uv_close((uv_handle_t *)&r->deadline_timer, router_handle_closed);
    uv_close((uv_handle_t *)&r->flush_check, router_handle_closed);
    while (r->clients != NULL) {
        cconn_close(r->clients);
    }
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
}
