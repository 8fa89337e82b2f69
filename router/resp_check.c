/*
 * resp_check: the RESP front's commands that go to the nodes (docs/RESP.md) and the ring
 * that keeps every connection's replies in the order of its commands. CL.THROTTLE
 * (redis-cell's) is an inline-limited gcra CHECK under [router] resp_service; RL.CHECK and
 * RL.MCHECK are CHECKs judged by the configured rules, RL.ADJUST and RL.RELEASE an ADJUST
 * and a RELEASE under them, answered as RL.CHECK is; all are sent with rl_forward_inline
 * (forward.c) to the owner of (service, user), the pending record pointing back to its part
 * (rl_pending.sink, answered through resp_answer). Pipelining: each command that waits for a
 * node holds one slot of the ring until its answer is in; a reply written at once goes
 * behind the slots that wait (resp_reply_to). Their arity is checked by the command table
 * (resp_cmd.c) before they run. Not for the connection (resp.c) nor the routing (forward.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front.h"
#include "resp.h"
#include "resp_int.h"
#include "router_int.h"
#include "ruleset.h"
#include "shardmap.h"

/* ---- output, in the order of the commands -------------------------------------------------- */

#define CHUNK_BYTES (RESP_CHUNK * sizeof(struct resp_slot))
#define PARTS_RESERVE (RESP_MCHECK_MAX * sizeof(struct rl_resp_part))

/* Frees s's part array, if it has one. */
static void
slot_parts_free(struct resp_conn *c, struct resp_slot *s)
{
    if (s->parts != NULL) {
        c->parts_bytes -= s->nparts * sizeof(*s->parts);
        free(s->parts);
        s->parts = NULL;
    }
}

/* The ring empty: every chunk but the one the head is in freed, and the bytes held back to
 * what is allocated. */
static void
ring_shrink(struct resp_conn *c)
{
    for (uint32_t k = 0; k < RESP_CHUNKS; k++) {
        if (c->chunk[k] != NULL && k != c->head / RESP_CHUNK) {
            free(c->chunk[k]);
            c->chunk[k] = NULL;
            c->chunk_bytes -= CHUNK_BYTES;
        }
    }
    (void)rl_front_hold(c->fc, c->slots_held, c->chunk_bytes + c->parts_bytes);
    c->slots_held = c->chunk_bytes + c->parts_bytes;
}

bool
resp_room(struct resp_conn *c)
{
    uint32_t k = ((c->head + c->nslots) % RESP_PIPELINE_MAX) / RESP_CHUNK;
    size_t want =
        c->chunk_bytes + (c->chunk[k] == NULL ? CHUNK_BYTES : 0) + c->parts_bytes + PARTS_RESERVE;

    if (c->nslots >= RESP_PIPELINE_MAX) {
        return false;
    }
    if (want > c->slots_held) {
        int rc = c->nslots == 0 ? rl_front_hold(c->fc, c->slots_held, want)
                                : rl_front_hold_spare(c->fc, c->slots_held, want);

        if (rc != 0) {
            return false;
        }
        c->slots_held = want;
    }
    if (c->chunk[k] == NULL) {
        c->chunk[k] = calloc(RESP_CHUNK, sizeof(struct resp_slot));
        if (c->chunk[k] == NULL) {
            return false;
        }
        c->chunk_bytes += CHUNK_BYTES;
    }
    return true;
}

/* Moves the replies of the slots done at the head of the ring to c->out. -1: out of memory. */
int
resp_drain(struct resp_conn *c)
{
    while (c->nslots > 0) {
        struct resp_slot *s = resp_slot_at(c, 0);

        if (!s->done) {
            break;
        }
        if (s->out.len > 0 && rl_buf_append(&c->out, s->out.data, s->out.len) != 0) {
            return -1;
        }
        rl_buf_deinit(&s->out);
        slot_parts_free(c, s);
        c->head = (c->head + 1) % RESP_PIPELINE_MAX;
        c->nslots--;
    }
    if (c->nslots == 0 && c->chunk_bytes > CHUNK_BYTES) {
        ring_shrink(c); /* a deep pipeline ended: one chunk is kept */
    }
    return 0;
}

/* c has replies to write: they go out at the end of this loop turn (rl_front_mark), with
 * every other reply the turn gave c, in one write. */
static void
conn_mark(struct resp_conn *c)
{
    if (c->closing) {
        return;
    }
    rl_front_mark(c->fc);
}

/* ---- the replies --------------------------------------------------------------------------- */

/* Where a reply written now goes: c->out when nothing waits before it, else a new slot
 * (done). NULL: out of memory or no slot (the caller closes). */
struct rl_buf *
resp_reply_to(struct resp_conn *c)
{
    struct resp_slot *s;

    if (c->nslots == 0) {
        return &c->out;
    }
    if (c->nslots >= RESP_PIPELINE_MAX) {
        return NULL;
    }
    s = resp_slot_at(c, c->nslots); /* resp_room made it */
    memset(s, 0, sizeof(*s));
    s->c = c;
    s->kind = RESP_SYNC;
    s->done = true;
    rl_buf_init(&s->out);
    c->nslots++;
    return &s->out;
}

/* A slot for a command answered later, or NULL (out of memory). */
static struct resp_slot *
slot_new(struct resp_conn *c, enum resp_kind kind, uint32_t nparts)
{
    struct resp_slot *s;

    if (c->nslots >= RESP_PIPELINE_MAX) {
        return NULL;
    }
    s = resp_slot_at(c, c->nslots); /* resp_room made it, and room for its parts */
    memset(s, 0, sizeof(*s));
    s->c = c;
    s->kind = (uint8_t)kind;
    s->proto = (uint8_t)c->proto;
    rl_buf_init(&s->out);
    s->nparts = nparts;
    if (nparts > 1) {
        s->parts = calloc(nparts, sizeof(*s->parts));
        if (s->parts == NULL) {
            return NULL;
        }
        c->parts_bytes += nparts * sizeof(*s->parts);
    }
    c->nslots++;
    return s;
}

static struct rl_resp_part *
slot_part(struct resp_slot *s, uint32_t i)
{
    return s->nparts > 1 ? &s->parts[i] : &s->one;
}

/* redis-cell's rounding of a duration to seconds: whole seconds, plus one when the
 * millisecond part is not zero. */
static int64_t
cell_seconds(uint64_t ms)
{
    return (int64_t)(ms / 1000 + (ms % 1000 != 0));
}

static int
put_throttle(struct rl_buf *b, const struct resp_slot *s)
{
    const struct rl_resp_part *pt = &s->one;
    const struct rl_wire_check_reply *rep = &pt->rep;
    int64_t limited, remaining = 0, retry = -1, reset = 0;

    if (pt->err != 0) {
        return rl_resp_put_error(b, "ERR the owning node refused the request: %s",
                                 rl_wire_err_name(pt->err));
    }
    switch (rep->code) {
    case RL_WIRE_ALLOWED:
    case RL_WIRE_QUEUED:
        limited = 0;
        remaining = (int64_t)rep->remaining;
        reset = cell_seconds(rep->reset_ms);
        break;
    case RL_WIRE_LIMITED:
        limited = 1;
        remaining = (int64_t)rep->remaining;
        reset = cell_seconds(rep->reset_ms);
        /* redis-cell: a quantity above the limit can never pass, and says -1 */
        retry = s->quantity > s->burst ? -1 : cell_seconds(rep->retry_after_ms);
        break;
    case RL_WIRE_FAIL_CLOSED:
        limited = 1;
        retry = cell_seconds(rep->retry_after_ms);
        break;
    default: /* FAIL_OPEN, and NO_RULE, which an inline limit never gets */
        limited = 0;
        break;
    }
    int64_t v[5] = {limited, (int64_t)s->burst, remaining, retry, reset};

    return rl_resp_put_int_array(b, v, 5);
}

/* One CHECK's answer as RL.CHECK gives it: a map (RESP3) or a flat array (RESP2). */
static int
put_check(struct rl_buf *b, const struct rl_resp_part *pt, int proto)
{
    const struct rl_wire_check_reply *rep = &pt->rep;

    if (pt->err != 0) {
        return rl_resp_put_error(b, "ERR the owning node refused the request: %s",
                                 rl_wire_err_name(pt->err));
    }
    if (rl_resp_put_map(b, 6, proto) != 0 || put_kv(b, "code", rep->code) != 0 ||
        rl_resp_put_str(b, "status") != 0 || rl_resp_put_str(b, rl_wire_code_name(rep->code)) ||
        put_kv(b, "limit", (int64_t)rep->limit) != 0 ||
        put_kv(b, "remaining", (int64_t)rep->remaining) != 0 ||
        put_kv(b, "reset_ms", (int64_t)rep->reset_ms) != 0 ||
        put_kv(b, "retry_after_ms", (int64_t)rep->retry_after_ms) != 0) {
        return -ENOMEM;
    }
    return 0;
}

/* Every part of s is answered: its reply, straight into c->out when s is the first slot
 * waiting (the usual case: no copy, no buffer of its own), else into s->out. The first slot
 * rendered leaves the ring at once, with the slots done behind it, so the next answer in
 * order is the first slot in turn: a pipeline answered in order allocates nothing. */
static void
slot_render(struct resp_slot *s)
{
    struct resp_conn *c = s->c;
    bool first = s == resp_slot_at(c, 0);
    struct rl_buf *b = first ? &c->out : &s->out;
    int rc = 0;

    if (s->kind == RESP_THROTTLE) {
        rc = put_throttle(b, s);
    } else if (s->kind == RESP_CHECK) {
        rc = put_check(b, &s->one, s->proto);
    } else {
        rc = rl_resp_put_array(b, s->nparts);
        for (uint32_t i = 0; rc == 0 && i < s->nparts; i++) {
            rc = put_check(b, slot_part(s, i), s->proto);
        }
    }
    s->done = true;
    if (rc == 0 && first) {
        rc = resp_drain(c);
    }
    if (rc != 0) {
        c->closing = true; /* out of memory: front.c closes it at the next flush */
    }
}

/* p's CHECK (p->sink, a part) was answered (its rl_sink_answer_fn). */
static void
resp_answer(struct rl_router *r, struct rl_pending *p, const struct rl_wire_check_reply *rep,
            uint32_t err)
{
    struct rl_resp_part *pt = p->sink;
    struct resp_slot *s = pt->slot;
    struct resp_conn *c = s->c;

    (void)r;
    p->sink = NULL;
    pt->p = NULL;
    if (rep != NULL) {
        pt->rep = *rep;
    } else {
        pt->err = err;
    }
    if (--s->outstanding == 0) {
        slot_render(s);
    }
    rl_front_touch(c->fc);
    if (c->closing) {
        rl_front_close(c->fc);
        return;
    }
    conn_mark(c);
}

/* ---- sending CHECKs ------------------------------------------------------------------------ */

/* Sends part i of s (req: its CHECK). */
static void
part_send(struct resp_slot *s, uint32_t i, struct rl_wire_req *req)
{
    struct rl_router *r = s->c->r;
    struct rl_resp_part *pt = slot_part(s, i);
    struct rl_pending *p = NULL;

    pt->slot = s;
    if (req->op == 0) {
        req->op = RL_WIRE_OP_CHECK; /* else RL.ADJUST's or RL.RELEASE's op */
    }
    req->id = i;
    if (!s->c->tenant_set || s->c->tenant_of != s->c->principal) {
        s->c->tenant = rl_wire_tenant(s->c->principal ? s->c->principal->name : NULL,
                                      rl_front_peer_addr(s->c->fc));
        s->c->tenant_of = s->c->principal;
        s->c->tenant_set = true;
    }
    req->tenant = s->c->tenant;
    s->outstanding++;
    if (rl_forward_inline(r, req, pt, resp_answer, &p, &pt->rep) == 0) {
        pt->p = p;
    } else {
        s->outstanding--; /* answered now, by failure policy */
    }
}

/* The user a Redis key counts as: itself when it has 1..RL_WIRE_USER_MAX bytes; otherwise
 * (empty, or longer) its head and a hash of the whole, "#" and 32 hex digits. */
static size_t
key_user(const char *k, size_t n, char *out)
{
    uint64_t h1, h2;
    size_t head;

    if (n >= 1 && n <= RL_WIRE_USER_MAX) {
        memcpy(out, k, n);
        return n;
    }
    h1 = rl_shardmap_key_hash("resp", 4, k, n);
    h2 = rl_shardmap_key_hash("resp2", 5, k, n);
    head = n < RL_WIRE_USER_MAX - 33 ? n : RL_WIRE_USER_MAX - 33;
    memcpy(out, k, head);
    snprintf(out + head, 34, "#%016" PRIx64 "%016" PRIx64, h1, h2);
    return head + 33;
}

/* ---- the commands -------------------------------------------------------------------------- */

/* redis-cell's integers: Rust's i64 parse (an optional sign, digits, nothing else). */
static int
cell_int(const struct rl_resp_arg *a, int64_t *v)
{
    size_t i = 0;
    bool neg = false;
    uint64_t x = 0;

    if (a->len > 0 && (a->ptr[0] == '+' || a->ptr[0] == '-')) {
        neg = a->ptr[0] == '-';
        i = 1;
    }
    if (i == a->len) {
        return -1;
    }
    for (; i < a->len; i++) {
        unsigned d = (unsigned char)a->ptr[i] - '0';

        if (d > 9 || __builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, d, &x)) {
            return -1;
        }
    }
    if (x > (uint64_t)INT64_MAX + (neg ? 1 : 0)) {
        return -1;
    }
    *v = neg ? (int64_t)(0 - x) : (int64_t)x;
    return 0;
}

int
resp_throttle(struct resp_conn *c, ARGS)
{
    struct rl_router *r = c->r;
    const struct rl_conf *conf = r->conf;
    int64_t v[4] = {0, 0, 0, 1};
    static const char *const what[] = {"max_burst", "count per period", "period", "quantity"};
    struct resp_slot *s;
    struct rl_wire_req req;
    char user[RL_WIRE_USER_MAX + 1];

    for (size_t i = 2; i < cmd->argc; i++) {
        if (cell_int(&cmd->argv[i], &v[i - 2]) != 0) {
            return rl_resp_put_error(b, "Cell error: Store error: Couldn't parse as integer: %.*s",
                                     (int)(cmd->argv[i].len > 128 ? 128 : cmd->argv[i].len),
                                     cmd->argv[i].ptr);
        }
    }
    if (v[1] == 0 || v[2] == 0) {
        return rl_resp_put_error(b, "Cell error: Store error: Zero rates are not supported");
    }
    /* What a CHECK's inline limit can say (docs/RESP.md, "Differences"). */
    if (v[0] < 0 || v[0] >= (int64_t)UINT32_MAX - 1) {
        return rl_resp_put_error(b, "ERR CL.THROTTLE: %s must be 0..%u", what[0], UINT32_MAX - 2);
    }
    if (v[1] < 0 || v[1] > (int64_t)UINT32_MAX) {
        return rl_resp_put_error(b, "ERR CL.THROTTLE: %s must be 1..%u", what[1], UINT32_MAX);
    }
    if (v[2] < 0 || v[2] > (int64_t)(UINT32_MAX / 1000)) {
        return rl_resp_put_error(b, "ERR CL.THROTTLE: %s must be 1..%u seconds", what[2],
                                 UINT32_MAX / 1000);
    }
    if (v[3] < 0 || v[3] > (int64_t)RL_WIRE_COST_MAX) { /* a CHECK's cost bound */
        return rl_resp_put_error(b, "ERR CL.THROTTLE: %s must be 0..%u", what[3],
                                 RL_WIRE_COST_MAX);
    }
    if (c->principal != NULL && !rl_conf_client_may(c->principal, NULL)) {
        r->stats.unauthorized++;
        return rl_resp_put_error(b, "NOPERM this client's token does not allow inline limits "
                                    "(CL.THROTTLE)");
    }
    size_t slen = strlen(conf->resp_service);

    if (rl_conf_rule(conf, conf->resp_service, slen, NULL, 0) != NULL) {
        return rl_resp_put_error(b,
                                 "ERR CL.THROTTLE: the service %s has configured rules, "
                                 "which CL.THROTTLE may not bypass ([router] resp_service)",
                                 conf->resp_service);
    }
    (void)b;
    s = slot_new(c, RESP_THROTTLE, 1);
    if (s == NULL) {
        return -ENOMEM;
    }
    s->burst = (uint64_t)v[0] + 1;
    s->quantity = (uint64_t)v[3];
    memset(&req, 0, sizeof(req));
    req.service.ptr = conf->resp_service;
    req.service.len = slen;
    req.user.ptr = user;
    req.user.len = key_user(cmd->argv[1].ptr, cmd->argv[1].len, user);
    req.cost = (uint32_t)v[3];
    req.limit.set = true;
    req.limit.algo = RL_ALGO_GCRA;
    req.limit.limit = (uint32_t)v[1];
    req.limit.window_ms = (uint32_t)(v[2] * 1000);
    req.limit.has_burst = true;
    req.limit.burst = (uint32_t)s->burst;
    c->g->counts[RESP_N_THROTTLES]++;
    s->outstanding = 1; /* held while sending */
    part_send(s, 0, &req);
    if (--s->outstanding == 0) {
        slot_render(s);
    }
    return 0;
}

/* Reads (service, user, endpoint, cost) at argv[i..]; endpoint "" is none. An error reply
 * (written to b) returns 1. */
static int
check_req(struct resp_conn *c, const struct rl_resp_arg *a, uint64_t cost, struct rl_wire_req *req,
          const struct rl_rule **rule, struct rl_buf *b)
{
    const struct rl_conf *conf = c->r->conf;

    if (a[0].len == 0 || a[0].len > RL_WIRE_SERVICE_MAX || a[1].len == 0 ||
        a[1].len > RL_WIRE_USER_MAX || a[2].len > RL_WIRE_SERVICE_MAX) {
        rl_resp_put_error(b, "ERR service must have 1..%u bytes, user 1..%u, endpoint 0..%u",
                          RL_WIRE_SERVICE_MAX, RL_WIRE_USER_MAX, RL_WIRE_SERVICE_MAX);
        return 1;
    }
    if (cost > RL_WIRE_COST_MAX) {
        rl_resp_put_error(b, "ERR COST must be 0..%u", RL_WIRE_COST_MAX);
        return 1;
    }
    memset(req, 0, sizeof(*req));
    req->service.ptr = a[0].ptr;
    req->service.len = a[0].len;
    req->user.ptr = a[1].ptr;
    req->user.len = a[1].len;
    if (a[2].len > 0) {
        req->endpoint.ptr = a[2].ptr;
        req->endpoint.len = a[2].len;
    }
    req->cost = (uint32_t)cost;
    *rule = rl_conf_rule(conf, req->service.ptr, req->service.len, req->endpoint.ptr,
                         req->endpoint.len);
    if (c->principal != NULL && !rl_conf_client_may(c->principal, *rule)) {
        c->r->stats.unauthorized++;
        rl_resp_put_error(b, "NOPERM this client's token does not allow that service");
        return 1;
    }
    return 0;
}

static int
cost_arg(const struct rl_resp_arg *a, uint64_t *cost, struct rl_buf *b)
{
    int64_t v;

    if (rl_resp_int64(a, &v) != 0 || v < 0 || v > (int64_t)RL_WIRE_COST_MAX) {
        rl_resp_put_error(b, "ERR COST must be an integer of 0..%u", RL_WIRE_COST_MAX);
        return 1;
    }
    *cost = (uint64_t)v;
    return 0;
}

/* RL.CHECK service user [endpoint] [COST n] (3..6 arguments): its one key into q, cost.
 * An error reply (written to b) returns 1. */
static int
check_args(ARGS, struct rl_resp_arg q[3], uint64_t *cost)
{
    size_t argc = cmd->argc;

    q[0] = cmd->argv[1];
    q[1] = cmd->argv[2];
    q[2].ptr = "";
    q[2].len = 0;
    *cost = 1;
    if (argc >= 5 && rl_resp_is(&cmd->argv[argc - 2], "COST")) {
        if (cost_arg(&cmd->argv[argc - 1], cost, b) != 0) {
            return 1;
        }
        argc -= 2;
    }
    if (argc == 4) {
        q[2] = cmd->argv[3];
    } else if (argc != 3) {
        rl_resp_put_error(b, "ERR syntax error: RL.CHECK service user [endpoint] [COST n]");
        return 1;
    }
    return 0;
}

/* RL.MCHECK (service user endpoint cost)... (groups of four arguments): its keys into q,
 * cost; their number into *n. An error reply (written to b) returns 1. */
static int
mcheck_args(ARGS, struct rl_resp_arg (*q)[3], uint64_t *cost, uint32_t *n)
{
    if ((cmd->argc - 1) / 4 > RESP_MCHECK_MAX) {
        rl_resp_put_error(b, "ERR RL.MCHECK takes at most %u keys", RESP_MCHECK_MAX);
        return 1;
    }
    for (size_t i = 1; i < cmd->argc; i += 4, (*n)++) {
        q[*n][0] = cmd->argv[i];
        q[*n][1] = cmd->argv[i + 1];
        q[*n][2] = cmd->argv[i + 2];
        if (cost_arg(&cmd->argv[i + 3], &cost[*n], b) != 0) {
            return 1;
        }
    }
    return 0;
}

/* RL.CHECK (multi false) and RL.MCHECK: their keys checked, then sent in one slot. */
static int
check_run(struct resp_conn *c, ARGS, bool multi)
{
    struct rl_resp_arg q[RESP_MCHECK_MAX][3];
    uint64_t cost[RESP_MCHECK_MAX];
    const struct rl_rule *rules[RESP_MCHECK_MAX];
    struct rl_wire_req reqs[RESP_MCHECK_MAX];
    uint32_t n = 0;
    struct resp_slot *s;

    if (!multi) {
        if (check_args(cmd, b, q[0], &cost[0]) != 0) {
            return 0;
        }
        n = 1;
    } else if (mcheck_args(cmd, b, q, cost, &n) != 0) {
        return 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (check_req(c, q[i], cost[i], &reqs[i], &rules[i], b) != 0) {
            return 0;
        }
    }
    s = slot_new(c, multi ? RESP_MCHECK : RESP_CHECK, n);
    if (s == NULL) {
        return -ENOMEM;
    }
    c->g->counts[RESP_N_CHECKS] += n;
    s->outstanding = 1;
    for (uint32_t i = 0; i < n; i++) {
        if (rules[i] == NULL) {
            /* Every process reads the same rules: no node would find one either. */
            struct rl_resp_part *pt = slot_part(s, i);

            pt->slot = s;
            memset(&pt->rep, 0, sizeof(pt->rep));
            pt->rep.code = RL_WIRE_NO_RULE;
            c->r->stats.checks++;
            rl_counts_answer(c->r, NULL, RL_WIRE_NO_RULE, rl_router_now_ns(c->r));
            continue;
        }
        part_send(s, i, &reqs[i]);
    }
    if (--s->outstanding == 0) {
        slot_render(s);
    }
    return 0;
}

int
resp_check(struct resp_conn *c, ARGS)
{
    return check_run(c, cmd, b, false);
}

int
resp_mcheck(struct resp_conn *c, ARGS)
{
    return check_run(c, cmd, b, true);
}

/*
 * RL.ADJUST service user delta [endpoint] (adjust: 4..5 arguments) and RL.RELEASE service
 * user [count] [endpoint] (3..5): one ADJUST or RELEASE under the configured rules, answered
 * as RL.CHECK (docs/RESP.md). A refund (delta < 0) needs `adjust = yes` (docs/CONFIG.md);
 * RELEASE's count is 1 unless given, and an endpoint comes after a count.
 */
static int
settle_run(struct resp_conn *c, ARGS, bool adjust)
{
    struct rl_router *r = c->r;
    struct rl_resp_arg q[3];
    const struct rl_rule *rule;
    struct rl_wire_req req;
    struct resp_slot *s;
    int64_t v = 1;

    q[0] = cmd->argv[1];
    q[1] = cmd->argv[2];
    q[2].ptr = "";
    q[2].len = 0;
    if (adjust) {
        if (rl_resp_int64(&cmd->argv[3], &v) != 0 || v < -RL_WIRE_DELTA_MAX ||
            v > RL_WIRE_DELTA_MAX) {
            return rl_resp_put_error(b, "ERR DELTA must be an integer of -%d..%d",
                                     RL_WIRE_DELTA_MAX, RL_WIRE_DELTA_MAX);
        }
    } else if (cmd->argc >= 4 && (rl_resp_int64(&cmd->argv[3], &v) != 0 || v < 1 ||
                                  v > (int64_t)RL_WIRE_COUNT_MAX)) {
        return rl_resp_put_error(b, "ERR COUNT must be an integer of 1..%u", RL_WIRE_COUNT_MAX);
    }
    if (cmd->argc == 5) {
        q[2] = cmd->argv[4];
    }
    if (check_req(c, q, 0, &req, &rule, b) != 0) {
        return 0;
    }
    if (adjust && v < 0 && !rl_conf_may_refund(r->conf, c->principal)) {
        r->stats.unauthorized++;
        return rl_resp_put_error(b, "NOPERM this client's token does not allow refunds "
                                    "(adjust = yes)");
    }
    s = slot_new(c, RESP_CHECK, 1);
    if (s == NULL) {
        return -ENOMEM;
    }
    s->outstanding = 1;
    if (rule == NULL) {
        /* Every process reads the same rules: no node would find one either. */
        s->one.slot = s;
        memset(&s->one.rep, 0, sizeof(s->one.rep));
        s->one.rep.code = RL_WIRE_NO_RULE;
        if (adjust) {
            r->stats.adjusts++;
        } else {
            r->stats.releases++;
        }
    } else {
        req.op = adjust ? RL_WIRE_OP_ADJUST : RL_WIRE_OP_RELEASE;
        if (adjust) {
            req.delta = (int32_t)v;
        } else {
            req.cost = (uint32_t)v; /* RELEASE's count */
        }
        part_send(s, 0, &req);
    }
    if (--s->outstanding == 0) {
        slot_render(s);
    }
    return 0;
}

int
resp_adjust(struct resp_conn *c, ARGS)
{
    return settle_run(c, cmd, b, true);
}

int
resp_release(struct resp_conn *c, ARGS)
{
    return settle_run(c, cmd, b, false);
}

void
resp_slots_free(struct resp_conn *c)
{
    for (uint32_t k = 0; k < c->nslots; k++) {
        struct resp_slot *s = resp_slot_at(c, k);

        for (uint32_t i = 0; i < s->nparts; i++) {
            struct rl_resp_part *pt = slot_part(s, i);

            if (pt->p != NULL) {
                pt->p->sink = NULL; /* an orphan: its answer is dropped */
                pt->p = NULL;
            }
        }
        rl_buf_deinit(&s->out);
        slot_parts_free(c, s);
    }
    for (uint32_t k = 0; k < RESP_CHUNKS; k++) {
        free(c->chunk[k]);
        c->chunk[k] = NULL;
    }
    (void)rl_front_hold(c->fc, c->slots_held, 0);
    c->slots_held = c->chunk_bytes = 0;
    c->nslots = 0;
}
