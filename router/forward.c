/*
 * forward: a client's CHECK through the router. The key is hashed to its shard and the shard
 * to its owner in the table (table.c); the request goes to the owner over its pooled
 * connections (upstream.h) under a pending record's id (pending.c), and the node's reply is
 * relayed under the client's id. Both are relayed from their bytes when session.c and
 * upstream.c read them the short way (wire_fast.h: the relay session.c hands in, the
 * upconn's relay): only the
 * id is rewritten. What the router answers itself is decided here too: NO_RULE
 * (every process reads the same rules), a client whose token does not allow the service, and
 * the service's failure policy when the owner is down, the connection is lost, the deadline
 * passes or the node says it is not the owner (with `failure = open`, the router's backstop,
 * backstop.h). A CHECK carrying its own limit (docs/PROTOCOL.md,
 * "Inline limits") has no rule: it is forwarded like any other (re-encoded, as the short reader
 * leaves it to the full decoder), never answered from the deny cache, and its failure policy is
 * [cluster] inline_failure. ADJUST and RELEASE (docs/PROTOCOL.md) take the same path under
 * their own op (the pending record's op): hashed, authorized (a refund needs `adjust = yes`),
 * forwarded (relayed from their bytes as a CHECK is), answered under their op; never from
 * the deny cache nor by the backstop (a
 * failure answers the policy's code and nothing is applied); counted apart from decisions.
 * A node's ERROR MOVING (its shard is being handed to another node:
 * docs/OPERATIONS.md, "A router during a planned move") is no failure: the request is sent
 * again, at once to the member named or after a backoff to the table's owner (pending.c
 * keeps its bytes and holds it), until [cluster] handoff_wait past its first send; only then
 * does the policy answer. Not for THROTTLED (fanout.c).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "envoycfg.h"
#include "log.h"
#include "reqlog.h"
#include "router_int.h"
#include "rules.h"
#include "wire_fast.h"

/*
 * rl_shardmap_shard(hash, shards), hash % shards, without the 64-bit division (some 40
 * cycles, a tenth of the router's own work per CHECK): Lemire, Kaser and Kurz, "Faster
 * remainder by direct computation" (2019), exact for every 64-bit hash and 32-bit divisor
 * with the 128-bit multiplier floor((2^128 - 1) / shards) + 1, computed once per shard count.
 */
static uint32_t
forward_shard(struct rl_router *r, uint64_t hash)
{
    __extension__ typedef unsigned __int128 u128;
    uint32_t d = r->conf->shards;
    u128 low, t;

    if (d != r->shard_d) {
        r->shard_d = d;
        r->shard_m = ~(u128)0 / d + 1; /* 0 for d = 1: every hash is shard 0 */
    }
    low = r->shard_m * hash;
    t = ((u128)(uint64_t)low * d) >> 64;
    t += (u128)(uint64_t)(low >> 64) * d;
    return (uint32_t)(t >> 64);
}

static void
log_answer(struct rl_router *r, uint8_t op, uint32_t shard, const char *node, uint32_t code,
           uint64_t hash, const char *service, size_t slen, const char *user, size_t ulen)
{
    uint64_t loop_ms = uv_now(r->loop);

    /* Wall-clock time from the loop's cached clock, re-anchored once a second: a
     * clock_gettime per logged line was a measurable share of the log's cost. */
    if (r->log_anchor_real == 0 || loop_ms - r->log_anchor_loop >= 1000) {
        r->log_anchor_real = rl_clock_real_ms();
        r->log_anchor_loop = loop_ms;
    }
    rl_reqlog_add_tag(r->log, r->log_anchor_real + (loop_ms - r->log_anchor_loop), shard, node,
                      code, hash, service, slen, user, ulen,
                      op == RL_WIRE_OP_ADJUST    ? RL_REQLINE_TAG_ADJUST
                      : op == RL_WIRE_OP_RELEASE ? RL_REQLINE_TAG_RELEASE
                                                 : RL_REQLINE_TAG_NONE);
}

/* A CHECK-shaped reply under op (CHECK, ADJUST or RELEASE). */
static int
put_reply(struct rl_buf *out, uint8_t op, const struct rl_wire_check_reply *rep)
{
    switch (op) {
    case RL_WIRE_OP_ADJUST:
        return rl_wire_put_adjust_reply(out, rep);
    case RL_WIRE_OP_RELEASE:
        return rl_wire_put_release_reply(out, rep);
    default:
        return rl_wire_put_check_reply(out, rep);
    }
}

/* Counts one answer: a CHECK's as a decision (counts.c), an ADJUST's or a RELEASE's apart. */
static void
count_answer(struct rl_router *r, uint8_t op, const struct rl_rule *rule, uint32_t code,
             uint64_t start_ns)
{
    if (op == RL_WIRE_OP_ADJUST) {
        r->stats.adjusts++;
    } else if (op == RL_WIRE_OP_RELEASE) {
        r->stats.releases++;
    } else {
        r->stats.checks++;
        rl_counts_answer(r, rule, code, start_ns);
    }
}

/*
 * The failure-policy answer: no decision was made, so limit, remaining and reset are 0.
 * FAIL_CLOSED suggests retrying after the session timeout, the longest the shard can stay
 * unowned before ZooKeeper moves it. A rule with `failure = open` (not open_unlimited, not
 * shadow) is judged by the router's backstop (backstop.h) for the key hash and cost: FAIL_OPEN
 * within its quota, LIMITED beyond. Returns true when the backstop decided.
 */
static bool
fill_failure(struct rl_router *r, uint8_t op, const struct rl_rule *rule, uint32_t id,
             uint64_t hash, uint32_t cost, struct rl_wire_check_reply *rep)
{
    memset(rep, 0, sizeof(*rep));
    rep->id = id;
    /* A shadow rule never refuses, not even by failure policy; no rule: an inline limit. */
    bool closed = rule != NULL ? rule->fail_closed && !rule->shadow : r->conf->inline_fail_closed;

    /* (An ADJUST or RELEASE is no decision: its policy's code, nothing applied anywhere.) */
    if (op == RL_WIRE_OP_CHECK && rule != NULL && !closed && !rule->shadow &&
        !rule->fail_unlimited) {
        rl_backstop_judge(&r->bstop, r->conf, rule, hash, cost, rl_router_now_ns(r), rep);
        rep->id = id;
        return true;
    }
    rep->code = closed ? RL_WIRE_FAIL_CLOSED : RL_WIRE_FAIL_OPEN;
    rep->retry_after_ms = closed ? r->conf->session_timeout_ms : 0;
    return false;
}

/* The request log's NODE for an answer of failure policy: "backstop" when the backstop
 * decided (docs/OPERATIONS.md, "The backstop"), else the unreachable node or "-". */
static const char *
fail_node(const struct rl_upstream *u, bool backstop)
{
    return backstop ? RL_BACKSTOP_LOG_NODE : u != NULL ? u->name : "-";
}

/* The rule in force for a request forwarded under rule, which may be one of rules since
 * replaced (kept until the requests sent under them are answered): looked up again as a
 * request of its section's service and endpoint is (an endpoint's section gone: the
 * service's), or NULL when the service has none now. (A request that matched its
 * service's section is judged under it, though the new rules may have added one for its
 * endpoint: the pending request does not keep its endpoint.) */
static const struct rl_rule *
forward_rule_now(const struct rl_router *r, const struct rl_rule *rule)
{
    if (rule == NULL || rl_router_rule_current(r, rule)) {
        return rule;
    }
    return rl_conf_rule(r->conf, rule->service, rule->service_len, rule->endpoint,
                        rule->endpoint_len);
}

void
rl_forward_fail(struct rl_router *r, struct rl_pending *p, bool late_reply)
{
    struct rl_wire_check_reply rep;
    const struct rl_rule *now = forward_rule_now(r, p->rule);

    bool bs = false;

    /* A refusal the deny cache holds outlives the node it came from; else the policy, under
     * the rules in force (before, a request sent before a rules change was judged with its
     * old rule's tiers indexing the new rules': a read past them, and answers of limit 0). */
    memset(&rep, 0, sizeof(rep));
    if (p->rule != NULL && now == NULL) {
        rep.id = p->client_id; /* its service has no rule now: as every node answers */
        rep.code = RL_WIRE_NO_RULE;
    } else if (p->op != RL_WIRE_OP_CHECK || !rl_shed_fail_lookup(r, p, &rep)) {
        bs = fill_failure(r, p->op, now, p->client_id, p->key_hash, p->cost, &rep);
    }

    count_answer(r, p->op, now, rep.code, p->start_ns); /* under the rule it was judged by */
    if (p->up != NULL) {
        rl_upstream_count_failure(p->up);
    }
    if (p->logged) {
        log_answer(r, p->op, p->shard, fail_node(p->up, bs), rep.code, p->key_hash,
                   p->rule != NULL ? p->rule->service : p->service,
                   p->rule != NULL ? p->rule->service_len : p->slen, p->user, p->ulen);
    }
    if (p->client != NULL) {
        struct rl_conn *c = &p->client->conn;

        if (put_reply(&c->out, p->op, &rep) == 0) {
            rl_conn_mark(c);
        } else {
            rl_conn_close(c, UV_ENOMEM);
        }
    } else if (p->sink != NULL) {
        p->answer(r, p, &rep, 0);
    }
    rl_pending_put(r, p, late_reply);
}

/* Answers a CHECK the router decides itself (NO_RULE, or failure policy). */
static void
answer_local(struct rl_conn *c, const struct rl_wire_req *req, const struct rl_rule *rule,
             const struct rl_wire_check_reply *rep, uint32_t shard, const char *node, uint64_t hash)
{
    struct rl_router *r = c->data;

    count_answer(r, req->op, rule, rep->code, r->batch_ns);
    if (r->log != NULL && rl_reqlog_sample(r->log)) {
        /* Cut as for forwarded requests (docs/OPERATIONS.md: the first 64 bytes of the user). */
        log_answer(r, req->op, shard, node, rep->code, hash, req->service.ptr, req->service.len,
                   req->user.ptr,
                   req->user.len < ROUTER_USER_LOGGED ? req->user.len : ROUTER_USER_LOGGED);
    }
    if (put_reply(&c->out, req->op, rep) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    rl_conn_mark(c);
}

/* Keeps the bytes after the id (rl_pending_keep) of a request frame[0..len) as the encoders
 * write it: the length prefix, fixarray header, op, the id (1, 2, 3, 5 or 9 bytes), the rest. */
static void
forward_keep_frame(struct rl_router *r, struct rl_pending *p, const char *frame, size_t len)
{
    const unsigned char *q = (const unsigned char *)frame + RL_WIRE_HDR_LEN;
    size_t idlen;

    if (len <= RL_WIRE_HDR_LEN + 3) {
        return;
    }
    idlen = q[2] == 0xcc ? 2 : q[2] == 0xcd ? 3 : q[2] == 0xce ? 5 : q[2] == 0xcf ? 9 : 1;
    if (RL_WIRE_HDR_LEN + 2 + idlen <= len) {
        rl_pending_keep(r, p, q[0], (const char *)q + 2 + idlen, len - RL_WIRE_HDR_LEN - 2 - idlen);
    }
}

/* Whether a request for u waits in the router (fairq.c): the node has [router] node_window
 * of this worker's requests unanswered, or others wait already (they go first, in turn); and
 * what is kept can be sent later (a connection is up, to a node that takes the tenant
 * element): else it goes now, as before windows (answered by policy at once when no
 * connection is up). */
static inline bool
forward_must_wait(const struct rl_router *r, const struct rl_upstream *u)
{
    return (u->fair != NULL || rl_upstream_owed(u) >= r->conf->node_window) &&
           rl_upstream_sends_kept(u);
}

/* Sends the requests waiting for u, in turn, while it has room; one whose bytes are gone
 * (overwritten in the ring meanwhile) or that cannot be sent is answered by policy, unless
 * !answer: a front is sending (rl_forward_inline), which must not be answered from within;
 * then it stays on the deadline FIFO alone, answered by policy at its deadline. */
static void
forward_pump(struct rl_router *r, struct rl_upstream *u, bool answer)
{
    struct rl_pending *p;

    while (u->fair != NULL && rl_upstream_owed(u) < r->conf->node_window &&
           (p = rl_fairq_next(r, u)) != NULL) {
        uint8_t hdr;
        size_t len;
        const char *tail = rl_pending_kept_now(r, p, &hdr, &len);
        int rc = tail == NULL ? -ENOENT
                              : rl_upstream_send_spliced(u, hdr, p->op, rl_pending_id(r, p), tail,
                                                         len, &p->link);

        if (rc == 0) {
            continue;
        }
        if (!answer) {
            break;
        }
        if (rc == -ENOENT) {
            r->stats.node_wait_lost++;
        } else {
            r->stats.owner_down++;
        }
        rl_forward_fail(r, p, false);
    }
}

/*
 * p, for u, which has no room (forward_must_wait), waits for its turn instead of being sent:
 * its bytes after the id kept (relay's, else fwd encoded as a send would), then on its client's
 * flow (client: rl_wire_tenant, the [client] token's, else the address's). 0, or -1 when it cannot
 * wait (too long to keep, no memory): then it goes now.
 */
static int
forward_wait(struct rl_router *r, struct rl_pending *p, struct rl_upstream *u, uint32_t client,
             const struct rl_wire_req *fwd, const struct rl_wire_str *relay)
{
    if (relay != NULL && relay->ptr != NULL) {
        rl_pending_keep(r, p, RL_WIRE_CHECK_HDR, relay->ptr, relay->len);
    } else {
        int rc;

        rl_buf_reset(&r->fq_frame);
        rc = fwd->op == RL_WIRE_OP_ADJUST || fwd->op == RL_WIRE_OP_RELEASE
                 ? rl_wire_put_req(&r->fq_frame, fwd)
                 : rl_wire_fast_put_check(&r->fq_frame, fwd);
        if (rc != 0) {
            return -1;
        }
        forward_keep_frame(r, p, r->fq_frame.data, r->fq_frame.len);
    }
    if (p->kept_len == RL_PENDING_KEPT_NONE || rl_fairq_add(r, u, client, p) != 0) {
        p->kept_len = RL_PENDING_KEPT_NONE;
        return -1;
    }
    r->stats.node_waits++;
    return 0;
}

/* The client a binary connection's requests are of (rl_wire_tenant): what its inline CHECKs
 * are accounted to, and whose turn they wait for at a busy node. */
static uint32_t
forward_client(const struct rl_conn *conn)
{
    return rl_wire_tenant(conn->principal ? ((const struct rl_client_conf *)conn->principal)->name
                                          : NULL,
                          conn->addr);
}

/* A CHECK, ADJUST or RELEASE of a binary client: answered here or forwarded (its op kept). */
static void
forward_keyed(struct rl_conn *conn, const struct rl_wire_req *req, const struct rl_wire_str *relay)
{
    struct rl_cconn *c = (struct rl_cconn *)conn;
    struct rl_router *r = conn->data;
    const struct rl_rule *rule;
    struct rl_wire_check_reply rep;
    struct rl_wire_req fwd;
    const char *frame = NULL;
    size_t frame_len = 0;
    struct rl_upstream *u = NULL;
    struct rl_pending *p;
    uint64_t hash;
    uint32_t shard, owner = RL_SHARDMAP_NONE;
    uint64_t fp = 0; /* the deny cache's hash of the user (shed.c) */
    int sent = -EAGAIN;
    bool waits = false;

    hash = rl_shardmap_key_hash(req->service.ptr, req->service.len, req->user.ptr, req->user.len);
    shard = forward_shard(r, hash);
    rule = rl_conf_rule(r->conf, req->service.ptr, req->service.len, req->endpoint.ptr,
                        req->endpoint.len);
    if (req->limit.set) {
        /* Only a token for every service may bring its own limits (a services list names
         * configured services only, which refuse them). */
        if (conn->principal != NULL &&
            !rl_conf_client_may((const struct rl_client_conf *)conn->principal, NULL)) {
            r->stats.unauthorized++;
            rl_reply_error(conn, req->id, RL_WIRE_ERR_UNAUTHORIZED,
                           "this client's token does not allow inline limits");
            return;
        }
        /* Configured rules are authoritative (the node, which knows every section of the
         * service, refuses the rest alike). */
        if (rule != NULL || rl_conf_rule(r->conf, req->service.ptr, req->service.len, NULL, 0)) {
            /* (the service's bytes are not quoted: a message must be text) */
            rl_reply_error(conn, req->id, RL_WIRE_ERR_BAD_FIELD,
                           "the service has configured rules: an inline limit is refused");
            return;
        }
    } else if (conn->principal != NULL &&
               !rl_conf_client_may((const struct rl_client_conf *)conn->principal, rule)) {
        r->stats.unauthorized++;
        rl_reply_error(conn, req->id, RL_WIRE_ERR_UNAUTHORIZED,
                       "this client's token does not allow that service");
        return;
    }
    if (rule == NULL && !req->limit.set) {
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
    if (req->op == RL_WIRE_OP_CHECK && rule != NULL &&
        rl_shed_check(conn, req, rule, shard, hash, u, &fp)) {
        return; /* answered LIMITED from the deny cache (shed.c) */
    }
    p = u != NULL ? rl_pending_get(r) : NULL;
    if (u != NULL && p == NULL) {
        r->stats.overloaded++;
        rl_reply_error(conn, req->id, RL_WIRE_ERR_OVERLOADED,
                       "router has too many requests in flight");
        return;
    }
    if (p != NULL) {
        if (relay->ptr == NULL) {
            fwd = *req;
            fwd.id = rl_pending_id(r, p);
            /* an inline CHECK is accounted to this client, whatever it sent (PROTOCOL.md) */
            fwd.tenant = forward_client(conn);
        }
        if (forward_must_wait(r, u) &&
            forward_wait(r, p, u, relay->ptr == NULL ? fwd.tenant : forward_client(conn), &fwd,
                         relay) == 0) {
            waits = true;
            sent = 0;
        } else if (relay->ptr != NULL) {
            /* Read the short way (session.c): what follows the id goes as the client sent it. */
            sent = rl_upstream_send_spliced(u, RL_WIRE_CHECK_HDR, (uint8_t)req->op,
                                            rl_pending_id(r, p), relay->ptr, relay->len, &p->link);
        } else {
            sent = rl_upstream_send_bytes(u, &fwd, &p->link, &frame, &frame_len);
        }
    }
    if (sent != 0) {
        if (p != NULL) {
            rl_pending_unget(r, p);
        }
        r->stats.owner_down++;
        if (u != NULL) {
            rl_upstream_count_failure(u);
        }
        bool bs = fill_failure(r, req->op, rule, req->id, hash, req->cost, &rep);

        answer_local(conn, req, rule, &rep, shard, fail_node(u, bs), hash);
        return;
    }
    if (waits) {
        /* kept already (forward_wait) */
    } else if (relay->ptr != NULL) {
        rl_pending_keep(r, p, RL_WIRE_CHECK_HDR, relay->ptr, relay->len);
    } else {
        forward_keep_frame(r, p, frame, frame_len); /* as queued for the node */
    }
    p->client = c;
    p->client_id = req->id;
    p->op = (uint8_t)req->op;
    p->rule = rule;
    p->shard = shard;
    p->key_hash = hash;
    p->up = u;
    p->deadline = uv_now(r->loop) + r->conf->deadline_ms;
    p->start_ns = r->batch_ns;
    p->logged = r->log != NULL && rl_reqlog_sample(r->log);
    if (p->logged) {
        p->ulen =
            (uint8_t)(req->user.len < ROUTER_USER_LOGGED ? req->user.len : ROUTER_USER_LOGGED);
        memcpy(p->user, req->user.ptr, p->ulen);
        if (rule == NULL) {
            p->slen = (uint8_t)(req->service.len < ROUTER_USER_LOGGED ? req->service.len
                                                                      : ROUTER_USER_LOGGED);
            memcpy(p->service, req->service.ptr, p->slen);
        }
    }
    rl_shed_sent(p, req, fp);
    if (req->op != RL_WIRE_OP_CHECK) {
        p->cost = 0; /* never looked up in the deny cache (rl_shed_fail_lookup) */
    }
    rl_pending_track(r, p, c);
    r->stats.forwarded++;
    if (waits) {
        forward_pump(r, u, true); /* its turn may be now */
    }
}

/* Asks for the cluster to be read again (a node saw another view), at most every
 * RL_ROUTER_REFRESH_MS. */
static void
forward_refresh(struct rl_router *r)
{
    if (r->opts.on_stale != NULL &&
        (r->refreshed_ms == 0 || uv_now(r->loop) - r->refreshed_ms >= RL_ROUTER_REFRESH_MS)) {
        r->refreshed_ms = uv_now(r->loop);
        r->stats.view_refreshes++;
        r->opts.on_stale(r->opts.arg);
    }
}

/* The upstream of the member named name[0..len), or NULL: not a member (any state). */
static struct rl_upstream *
forward_member(struct rl_router *r, const char *name, size_t len)
{
    if (r->map == NULL || name == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < r->map->nmembers; i++) {
        if (strlen(r->map->members[i].name) == len &&
            memcmp(r->map->members[i].name, name, len) == 0) {
            return r->owners[i];
        }
    }
    return NULL;
}

/* p, a CHECK kept (rl_pending_kept) and on no node connection, is sent again to u under its
 * id. Returns 0 (back on the deadline FIFO), -ENOENT (its bytes are gone) or the send's
 * error. */
static int
forward_send_again(struct rl_router *r, struct rl_pending *p, struct rl_upstream *u)
{
    uint8_t hdr;
    size_t len;
    const char *tail = rl_pending_kept(r, p, &hdr, &len);
    int rc;

    if (tail == NULL) {
        return -ENOENT;
    }
    rc = rl_upstream_send_spliced(u, hdr, p->op, rl_pending_id(r, p), tail, len, &p->link);
    if (rc != 0) {
        return rc;
    }
    p->up = u;
    rl_pending_resent(r, p);
    return 0;
}

/* p's move took too long (handoff_wait past its first send) or its bytes are gone: the
 * failure policy answers it, as for an owner that cannot be reached. */
static void
forward_move_fail(struct rl_router *r, struct rl_pending *p, bool lost)
{
    if (lost) {
        r->stats.move_lost++;
    } else {
        r->stats.move_expired++;
    }
    rl_forward_fail(r, p, false);
}

/* p, on no node connection, waits for the next backoff (1, 2, 4 .. 16 ms) before it is sent
 * to its shard's owner in the router's table then (rl_forward_resend). */
static void
forward_hold(struct rl_router *r, struct rl_pending *p)
{
    uint32_t level = p->moves < RL_PENDING_LEVELS ? p->moves : RL_PENDING_LEVELS - 1;

    if (p->moves < UINT8_MAX) {
        p->moves++;
    }
    r->stats.held_for_move++;
    rl_pending_hold(r, p, 1u << level);
}

/*
 * The node u answered p ERROR MOVING (rep; NULL: a NOT_OWNER taken as MOVING ""): the shard
 * is being handed to another node and nothing was applied. p is sent at once to the member
 * the node named (RL_FORWARD_REDIRECTS times at most: the new owner names the old one until
 * the shard's records are in, the old one names the new one once it exported them), else
 * held for a backoff and sent to the owner of the router's table then
 * (the cluster read again meanwhile), until handoff_wait past its first send; only then does
 * the failure policy answer. Never the backstop, never a node failure.
 */
static void
forward_moving(struct rl_router *r, struct rl_pending *p, struct rl_upstream *u,
               const struct rl_wire_reply *rep)
{
    struct rl_upstream *to = NULL;
    uint8_t hdr;
    size_t len;
    int rc;

    if (rep != NULL) {
        r->stats.moved++;
    }
    rl_pending_moving(r, p);
    rl_upstream_done(&p->link);
    if (rl_pending_kept(r, p, &hdr, &len) == NULL) {
        forward_move_fail(r, p, true);
        return;
    }
    if (uv_now(r->loop) >= p->hold_until) {
        forward_move_fail(r, p, false);
        forward_refresh(r);
        return;
    }
    if (rep != NULL && rep->owner.len > 0) {
        to = forward_member(r, rep->owner.ptr, rep->owner.len);
    }
    if (to != NULL && to != u && p->redirects < RL_FORWARD_REDIRECTS) {
        rc = forward_send_again(r, p, to);
        if (rc == 0) {
            p->redirects++;
            r->stats.move_redirected++;
            return;
        }
    }
    forward_refresh(r);
    forward_hold(r, p);
}

void
rl_forward_resend(struct rl_router *r, struct rl_pending *p)
{
    uint32_t owner = r->map != NULL ? rl_shardmap_owner(r->map, p->shard) : RL_SHARDMAP_NONE;
    struct rl_upstream *u = owner != RL_SHARDMAP_NONE ? r->owners[owner] : NULL;
    int rc = -EAGAIN;

    if (uv_now(r->loop) >= p->hold_until) {
        forward_move_fail(r, p, false);
        return;
    }
    if (u != NULL) {
        rc = forward_send_again(r, p, u);
    }
    if (rc == 0) {
        r->stats.move_resent++;
    } else if (rc == -ENOENT) {
        forward_move_fail(r, p, true);
    } else {
        forward_hold(r, p); /* no owner, or it cannot be reached yet: the next backoff */
    }
}

void
rl_forward_check(struct rl_conn *conn, const struct rl_wire_req *req,
                 const struct rl_wire_str *relay)
{
    forward_keyed(conn, req, relay);
}

/* Why an inline refund of service (len bytes) is refused whoever sends it, or NULL: the service
 * is one the cluster's fronts count under, whose clients never refund (a domain of the envoy
 * configuration in force, or CL.THROTTLE's `[router] resp_service`, whether or not this
 * router serves RESP: another one may), so that a refund there could only lift an Envoy or
 * CL.THROTTLE limit (docs/PROTOCOL.md, "ADJUST"). */
static const char *
forward_front_counter(const struct rl_router *r, const struct rl_wire_str *service)
{
    const char *resp = r->conf->resp_service;

    if (r->envoy != NULL && rl_envoy_domain(r->envoy, service->ptr, service->len) != NULL) {
        return "the service is a domain of the gRPC front: its inline counters take no refunds";
    }
    if (resp != NULL && strlen(resp) == service->len &&
        memcmp(resp, service->ptr, service->len) == 0) {
        return "the service is CL.THROTTLE's (resp_service): its inline counters take no "
               "refunds";
    }
    return NULL;
}

/* Whether the client on conn may send req, an ADJUST or a RELEASE, as far as refunds go: a
 * refund (delta < 0) needs a token with `adjust = yes` (docs/CONFIG.md), and never applies
 * to a front's inline counters (forward_front_counter); a charge, a zero delta and a RELEASE
 * need nothing more than a CHECK does. Refused: answered here. */
static bool
forward_may_adjust(struct rl_conn *conn, const struct rl_wire_req *req)
{
    struct rl_router *r = conn->data;
    const char *why;

    if (req->op != RL_WIRE_OP_ADJUST || req->delta >= 0) {
        return true;
    }
    if (!rl_conf_may_refund(r->conf, (const struct rl_client_conf *)conn->principal)) {
        why = "this client's token does not allow refunds (adjust = yes)";
    } else {
        why = req->limit.set ? forward_front_counter(r, &req->service) : NULL;
    }
    if (why == NULL) {
        return true;
    }
    r->stats.unauthorized++;
    rl_reply_error(conn, req->id, RL_WIRE_ERR_UNAUTHORIZED, why);
    return false;
}

void
rl_forward_adjust(struct rl_conn *conn, const struct rl_wire_req *req,
                  const struct rl_wire_str *relay)
{
    if (forward_may_adjust(conn, req)) {
        forward_keyed(conn, req, relay);
    }
}

void
rl_forward_release(struct rl_conn *conn, const struct rl_wire_req *req,
                   const struct rl_wire_str *relay)
{
    forward_keyed(conn, req, relay); /* no more than a CHECK: see forward_may_adjust */
}

void
rl_forward_on_reply(void *arg, struct rl_upstream *u, const struct rl_upconn *from,
                    const struct rl_wire_reply *rep)
{
    struct rl_router *r = arg;
    struct rl_wire_check_reply check;
    struct rl_pending *pd;
    struct rl_conn *c;
    int rc = 0;

    pd = rl_pending_by_id(r, rep->id);
    if (pd == NULL || pd->link.conn != from) {
        /* Already answered by the deadline (the node was late), or never ours. */
        r->stats.late_replies++;
        return;
    }
    if (pd->fan != NULL) {
        rl_fanout_part_done(r, pd, rep, false);
        return;
    }
    c = pd->client != NULL ? &pd->client->conn : NULL;
    rl_shed_reply(r, pd, u, from, rep);
    if (rep->op == pd->op) {
        count_answer(r, pd->op, pd->rule, rep->check.code, pd->start_ns);
        if (pd->logged) {
            log_answer(r, pd->op, pd->shard, u->name, rep->check.code, pd->key_hash,
                       pd->rule != NULL ? pd->rule->service : pd->service,
                       pd->rule != NULL ? pd->rule->service_len : pd->slen, pd->user, pd->ulen);
        }
        if (c != NULL && from->relay.ptr != NULL) {
            /* Read the short way (upstream.c): the node's fields go back as they came, under
             * the op they came with (pd->op, checked above). */
            rc = rl_wire_put_spliced(&c->out, RL_WIRE_CHECK_REPLY_HDR, pd->op, pd->client_id,
                                     from->relay.ptr, from->relay.len);
        } else if (c != NULL) {
            check = rep->check;
            check.id = pd->client_id;
            rc = put_reply(&c->out, pd->op, &check);
        } else if (pd->sink != NULL) {
            pd->answer(r, pd, &rep->check, 0);
        }
    } else if (rep->op == RL_WIRE_OP_ERROR && rep->err == RL_WIRE_ERR_MOVING) {
        forward_moving(r, pd, u, rep);
        return;
    } else if (rep->op == RL_WIRE_OP_ERROR && rep->err == RL_WIRE_ERR_NOT_OWNER) {
        /* The node sees another owner (or is fenced): the views differ for now. Answer by
         * policy, as for an owner that cannot be reached, and read the cluster again; but
         * with ZooKeeper, a node that says the shard is another's (not fenced, not
         * unregistered: "shard N is not owned by ...") may be a view behind or ahead of the
         * router's in a planned move: held as for a MOVING "" (forward_moving). */
        rl_log_debug("node %s: %.*s", u->name, (int)rep->message.len,
                     rep->message.ptr != NULL ? rep->message.ptr : "");
        if (r->zk_state != RL_ROUTER_ZK_NONE && rep->message.len > 6 &&
            memcmp(rep->message.ptr, "shard ", 6) == 0) {
            r->stats.not_owner_held++;
            forward_moving(r, pd, u, NULL);
            return;
        }
        r->stats.not_owner++;
        rl_forward_fail(r, pd, false);
        forward_refresh(r);
        return;
    } else if (rep->op == RL_WIRE_OP_ERROR) {
        char msg[256];

        r->stats.errors++;
        snprintf(msg, sizeof(msg), "%.*s", (int)rep->message.len,
                 rep->message.ptr != NULL ? rep->message.ptr : "");
        if (c != NULL) {
            rc = rl_wire_put_error(&c->out, pd->client_id, rep->err, msg);
        } else if (pd->sink != NULL) {
            /* An attacker can have every request refused (an inline limit over the tenant's
             * quota): one line per reason per RL_ROUTER_NODE_LOG_MS, with a count. */
            rl_log_limited(&r->node_refusal_log[rep->err < 8 ? rep->err : 0], uv_now(r->loop),
                           RL_ROUTER_NODE_LOG_MS, RL_LOG_WARN,
                           "node %s refused a front's CHECK: %s", u->name, msg);
            pd->answer(r, pd, NULL, rep->err);
        }
    } else {
        rl_log_limited(&r->node_odd_log, uv_now(r->loop), RL_ROUTER_NODE_LOG_MS, RL_LOG_WARN,
                       "node %s answered a %s with op %u", u->name, rl_wire_op_name(pd->op),
                       rep->op);
        rl_forward_fail(r, pd, false);
        return;
    }
    rl_pending_put(r, pd, false);
    if (c != NULL) {
        if (rc != 0) {
            rl_conn_close(c, UV_ENOMEM);
        } else {
            rl_conn_mark(c);
        }
    }
}

int
rl_forward_inline(struct rl_router *r, const struct rl_wire_req *req, void *sink,
                  rl_sink_answer_fn *answer, struct rl_pending **sent,
                  struct rl_wire_check_reply *now)
{
    bool waits = false;
    struct rl_upstream *u = NULL;
    struct rl_pending *p = NULL;
    struct rl_wire_req fwd;
    const char *frame = NULL;
    size_t frame_len = 0;
    uint64_t hash, fp = 0;
    uint32_t shard, owner = RL_SHARDMAP_NONE;
    uint64_t start = rl_router_now_ns(r);
    const struct rl_rule *rule = req->limit.set
                                     ? NULL
                                     : rl_conf_rule(r->conf, req->service.ptr, req->service.len,
                                                    req->endpoint.ptr, req->endpoint.len);

    hash = rl_shardmap_key_hash(req->service.ptr, req->service.len, req->user.ptr, req->user.len);
    shard = forward_shard(r, hash);
    if (r->map != NULL) {
        owner = rl_shardmap_owner(r->map, shard);
    }
    if (owner != RL_SHARDMAP_NONE) {
        u = r->owners[owner];
    }
    /* the hot keys count every front's CHECKs; the deny cache answers those under a rule */
    if ((req->op == 0 || req->op == RL_WIRE_OP_CHECK) &&
        rl_shed_inline(r, req, rule, shard, hash, u, &fp, now)) {
        count_answer(r, RL_WIRE_OP_CHECK, rule, RL_WIRE_LIMITED, start);
        return -1; /* answered now: a node's refusal that still stands */
    }
    if (u != NULL) {
        p = rl_pending_get(r);
        if (p == NULL) {
            r->stats.overloaded++;
        }
    }
    if (p != NULL) {
        fwd = *req;
        fwd.id = rl_pending_id(r, p);
        if (forward_must_wait(r, u) && forward_wait(r, p, u, req->tenant, &fwd, NULL) == 0) {
            waits = true;
        } else if (rl_upstream_send_bytes(u, &fwd, &p->link, &frame, &frame_len) != 0) {
            rl_pending_unget(r, p);
            p = NULL;
        }
    }
    if (p == NULL) {
        r->stats.owner_down++;
        if (u != NULL) {
            rl_upstream_count_failure(u);
        }
        fill_failure(r, (uint8_t)req->op, rule, req->id, hash, req->cost, now);
        count_answer(r, (uint8_t)req->op, rule, now->code, start);
        return -1;
    }
    if (!waits) {
        forward_keep_frame(r, p, frame, frame_len); /* the bytes queued for the node */
    }
    p->client = NULL;
    p->sink = sink;
    p->answer = answer;
    p->client_id = req->id;
    p->op = req->op != 0 ? (uint8_t)req->op : RL_WIRE_OP_CHECK;
    p->rule = rule;
    p->shard = shard;
    p->key_hash = hash;
    p->up = u;
    p->deadline = uv_now(r->loop) + r->conf->deadline_ms;
    p->start_ns = start;
    p->deny_fp = fp; /* 0 under an inline limit: never cached */
    p->cost = req->op == RL_WIRE_OP_CHECK ? req->cost : 0;
    p->logged = r->log != NULL && rl_reqlog_sample(r->log);
    if (p->logged) {
        p->ulen =
            (uint8_t)(req->user.len < ROUTER_USER_LOGGED ? req->user.len : ROUTER_USER_LOGGED);
        memcpy(p->user, req->user.ptr, p->ulen);
        p->slen = (uint8_t)(req->service.len < ROUTER_USER_LOGGED ? req->service.len
                                                                  : ROUTER_USER_LOGGED);
        memcpy(p->service, req->service.ptr, p->slen);
    }
    rl_pending_track_fifo(r, p);
    r->stats.forwarded++;
    *sent = p;
    if (waits) {
        forward_pump(r, u, false);
    }
    return 0;
}

void
rl_forward_on_batch(void *arg, struct rl_upstream *u, bool end)
{
    struct rl_router *r = arg;

    if (end && u->fair != NULL) {
        forward_pump(r, u, true); /* its replies made room */
    }
    r->now_ns = end ? 0 : uv_hrtime();
}

void
rl_forward_on_room(void *arg, struct rl_upstream *u)
{
    struct rl_router *r = arg;

    /* A lost connection's requests left room: what waits goes on u's other connections now,
     * rather than at the next reply (none may come: everything u owed was on the lost one).
     * With none of them up, it waits as before: for the table (a planned stop's node leaves
     * it, and rl_forward_unqueue holds what waited for the new owner) or for its deadline;
     * pumped now, it would be answered by policy, a lifted limit under failure = open. */
    if (u->fair != NULL && !r->closing && rl_upstream_sends_kept(u)) {
        forward_pump(r, u, true);
    }
}

void
rl_forward_unqueue(struct rl_router *r, struct rl_upstream *u)
{
    struct rl_pending *p;

    while ((p = rl_fairq_next(r, u)) != NULL) {
        p->up = NULL; /* u is freed once its connections close */
        rl_pending_moving(r, p);
        forward_hold(r, p);
    }
}

/* u's connection was lost while u is no member any more (its upstream retired by the
 * table) or is leaving: a planned stop, whose shards were handed off before it closed. */
static bool
forward_planned_loss(struct rl_router *r, const struct rl_upstream *u)
{
    if (u->retired) {
        return true;
    }
    for (size_t i = 0; r->map != NULL && i < r->map->nmembers; i++) {
        if (r->owners[i] == u) {
            return r->map->members[i].state == RL_MEMBER_LEAVING;
        }
    }
    return false;
}

/* The connection l was sent on is closed: it cannot be answered late. */
void
rl_forward_on_lost(void *arg, struct rl_upstream *u, struct rl_uplink *l)
{
    struct rl_router *r = arg;
    struct rl_pending *p = (struct rl_pending *)((char *)l - offsetof(struct rl_pending, link));

    if (p->fan != NULL) {
        rl_fanout_part_done(r, p, NULL, false);
        return;
    }
    if (!r->closing && r->zk_state != RL_ROUTER_ZK_NONE && forward_planned_loss(r, u)) {
        /* The node left (a clean stop hands its shards off first): as a MOVING "". A retired
         * upstream is freed once its connections close: p no longer points to it. */
        if (u->retired) {
            p->up = NULL;
        }
        r->stats.move_lost_conn++;
        forward_moving(r, p, u, NULL);
        return;
    }
    r->stats.owner_down++;
    rl_forward_fail(r, p, false);
}
