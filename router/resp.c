/*
 * resp: the router's RESP front (docs/RESP.md): Redis's protocol on the sockets the process
 * accepts on [router] resp (rproc.c hands them out as it does the clients'), served by a
 * worker on its own loop. Commands are read by common/resp.c; CL.THROTTLE (redis-cell's
 * command) becomes an inline-limited gcra CHECK under [router] resp_service, RL.CHECK and
 * RL.MCHECK plain CHECKs judged by the configured rules, all sent with rl_forward_inline
 * (forward.c) to the owner of (service, user). The pending record points back to its part of
 * the command (rl_pending.rsink); replies go out in the order of the commands (pipelining),
 * each command holding one slot of a ring until its answer is in.
 *
 * Bounds per connection: one command of at most RL_RESP_CMD_MAX bytes (resp.h), at most
 * RESP_PIPELINE_MAX commands waiting for their answers (reading pauses then), output:
 * reading pauses while RESP_WRITE_QUEUE_MAX bytes are unsent. [clients] idle_timeout closes
 * a connection with nothing in flight; frame_timeout one whose command stays incomplete; the
 * process's max_connections is counted by rproc.c. Not for the parsing (common/resp.c) nor
 * the routing (forward.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "front.h"
#include "log.h"
#include "resp.h"
#include "router_int.h"
#include "rproc.h"
#include "ruleset.h"
#include "shardmap.h"

#define RESP_PIPELINE_MAX 1024u             /* commands waiting for an answer, per connection */
#define RESP_WRITE_QUEUE_MAX (1024u * 1024) /* unsent output at which reading stops (front.c) */
#define RESP_HELD_MAX (RL_RESP_CMD_MAX + 1024u * 1024) /* unread input held per connection */
#define RESP_MCHECK_MAX 64u /* keys of one RL.MCHECK */
#define RESP_NAME_MAX 128u  /* CLIENT SETNAME */
#define RESP_AUTH_TRIES 3u  /* wrong AUTHs before the connection closes */
#define RESP_TICK_MS 1000u
#define RESP_LINGER_MS 2000u /* after QUIT or a protocol error: input dropped this long */
#define RESP_COMPAT_VERSION "7.0.0" /* what HELLO and INFO say as redis_version */

enum resp_kind { RESP_SYNC, RESP_THROTTLE, RESP_CHECK, RESP_MCHECK };

struct resp_conn;
struct resp_slot;

/* One CHECK of a command: in flight, or answered. */
struct rl_resp_part {
    struct resp_slot *slot;
    struct rl_pending *p; /* in flight; NULL once answered */
    struct rl_wire_check_reply rep;
    uint32_t err; /* the node refused it (an ERROR code); 0: rep holds the answer */
};

/* A command whose reply is not written yet: waiting for its CHECKs, or behind one that is. */
struct resp_slot {
    struct resp_conn *c;
    uint8_t kind;
    bool done;
    struct rl_buf out; /* the reply, once done */
    uint32_t outstanding;
    uint32_t nparts;
    struct rl_resp_part one; /* nparts == 1 */
    struct rl_resp_part *parts;
    uint64_t burst;    /* CL.THROTTLE: max_burst + 1 */
    uint64_t quantity; /* CL.THROTTLE */
};

/* A RESP connection's protocol state (front.c holds the socket). */
struct resp_conn {
    struct rl_front_conn *fc;
    struct rl_router *r;
    struct resp_conn *dirty_next; /* answered during a batch of node replies: flush at its end */
    bool dirty;
    struct rl_buf in;  /* unread input: an incomplete command, or commands waiting for a slot */
    size_t held;       /* what rl_front_hold knows of in */
    struct rl_buf out; /* replies ready to write */
    struct resp_slot *slots; /* ring of RESP_PIPELINE_MAX, allocated at the first need */
    uint32_t head, nslots;
    uint64_t partial_ms; /* loop time since which an incomplete command waits; 0: none */
    uint64_t quit_ms;    /* loop time of the QUIT or protocol error; 0: none */
    uint64_t id;
    int proto; /* 2, or 3 after HELLO 3 */
    bool authed;
    uint32_t auth_fails;
    const struct rl_client_conf *principal;
    char name[RESP_NAME_MAX];
    size_t name_len;
    bool quit, closing;
};

/* The per-loop state. */
struct rl_resp {
    uint64_t next_id;
    uint32_t nconns;
    struct resp_conn *dirty;
    struct rl_resp_cmd cmd;
    struct rl_buf tmp; /* a reply being written */
    uint64_t warned_ms; /* loop time of the last warning about a connection's input */
};

/* rl_router.resp_counts */
enum { RESP_N_COMMANDS, RESP_N_THROTTLES, RESP_N_CHECKS, RESP_N_ERRORS, RESP_N_PROTOCOL };

static void conn_process(struct resp_conn *c);

/* ---- output, in the order of the commands -------------------------------------------------- */

/* Moves the replies of the slots done at the head of the ring to c->out. -1: out of memory. */
static int
conn_drain(struct resp_conn *c)
{
    while (c->nslots > 0) {
        struct resp_slot *s = &c->slots[c->head];

        if (!s->done) {
            break;
        }
        if (s->out.len > 0 && rl_buf_append(&c->out, s->out.data, s->out.len) != 0) {
            return -1;
        }
        rl_buf_deinit(&s->out);
        free(s->parts);
        s->parts = NULL;
        c->head = (c->head + 1) % RESP_PIPELINE_MAX;
        c->nslots--;
    }
    return 0;
}

/* c has replies to write: now, or at the end of the batch of node replies being read
 * (rl_resp_batch_end), so that a batch's answers go out in one write per connection. */
static void
conn_mark(struct resp_conn *c)
{
    struct rl_resp *g = c->r->resp;

    if (c->closing) {
        return;
    }
    if (c->r->now_ns == 0) {
        rl_front_flush(c->fc);
        return;
    }
    if (!c->dirty) {
        c->dirty = true;
        c->dirty_next = g->dirty;
        g->dirty = c;
    }
}

void
rl_resp_batch_end(struct rl_router *r)
{
    struct rl_resp *g = r->resp;

    while (g != NULL && g->dirty != NULL) {
        struct resp_conn *c = g->dirty;

        g->dirty = c->dirty_next;
        c->dirty = false;
        rl_front_flush(c->fc);
    }
}

/* ---- the replies --------------------------------------------------------------------------- */

/* Where a reply written now goes: c->out when nothing waits before it, else a new slot
 * (done). NULL: out of memory or no slot (the caller closes). */
static struct rl_buf *
reply_to(struct resp_conn *c)
{
    struct resp_slot *s;

    if (c->nslots == 0) {
        return &c->out;
    }
    if (c->nslots >= RESP_PIPELINE_MAX) {
        return NULL;
    }
    s = &c->slots[(c->head + c->nslots) % RESP_PIPELINE_MAX];
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

    if (c->slots == NULL) {
        c->slots = calloc(RESP_PIPELINE_MAX, sizeof(*c->slots));
        if (c->slots == NULL) {
            return NULL;
        }
    }
    s = &c->slots[(c->head + c->nslots) % RESP_PIPELINE_MAX];
    memset(s, 0, sizeof(*s));
    s->c = c;
    s->kind = (uint8_t)kind;
    rl_buf_init(&s->out);
    s->nparts = nparts;
    if (nparts > 1) {
        s->parts = calloc(nparts, sizeof(*s->parts));
        if (s->parts == NULL) {
            return NULL;
        }
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
    if (rl_resp_put_array(b, 5) != 0 || rl_resp_put_int(b, limited) != 0 ||
        rl_resp_put_int(b, (int64_t)s->burst) != 0 || rl_resp_put_int(b, remaining) != 0 ||
        rl_resp_put_int(b, retry) != 0 || rl_resp_put_int(b, reset) != 0) {
        return -ENOMEM;
    }
    return 0;
}

static int
put_kv(struct rl_buf *b, const char *k, int64_t v)
{
    return rl_resp_put_str(b, k) != 0 || rl_resp_put_int(b, v) != 0 ? -ENOMEM : 0;
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
 * waiting (the usual case: no copy, no buffer of its own), else into s->out. */
static void
slot_render(struct resp_slot *s)
{
    struct resp_conn *c = s->c;
    struct rl_buf *b = s == &c->slots[c->head] ? &c->out : &s->out;
    int rc = 0;

    if (s->kind == RESP_THROTTLE) {
        rc = put_throttle(b, s);
    } else if (s->kind == RESP_CHECK) {
        rc = put_check(b, &s->one, c->proto);
    } else {
        rc = rl_resp_put_array(b, s->nparts);
        for (uint32_t i = 0; rc == 0 && i < s->nparts; i++) {
            rc = put_check(b, slot_part(s, i), c->proto);
        }
    }
    s->done = true;
    if (rc != 0) {
        c->closing = true; /* out of memory: front.c closes it at the next flush */
    }
}

void
rl_resp_answer(struct rl_router *r, struct rl_pending *p, const struct rl_wire_check_reply *rep,
               uint32_t err)
{
    struct rl_resp_part *pt = p->rsink;
    struct resp_slot *s = pt->slot;
    struct resp_conn *c = s->c;

    (void)r;
    p->rsink = NULL;
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
    req->op = RL_WIRE_OP_CHECK;
    req->id = i;
    s->outstanding++;
    if (rl_forward_inline(r, req, NULL, &p, &pt->rep) == 0) {
        p->rsink = pt;
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

#define ARGS const struct rl_resp_cmd *cmd, struct rl_buf *b

static int
err_arity(struct rl_buf *b, const struct rl_resp_arg *name)
{
    char lower[64];
    size_t n = name->len < sizeof(lower) - 1 ? name->len : sizeof(lower) - 1;

    for (size_t i = 0; i < n; i++) {
        char ch = name->ptr[i];

        lower[i] = (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch;
    }
    lower[n] = '\0';
    return rl_resp_put_error(b, "ERR wrong number of arguments for '%s' command", lower);
}

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

        if (d > 9 || x > (UINT64_MAX - d) / 10) {
            return -1;
        }
        x = x * 10 + d;
    }
    if (x > (uint64_t)INT64_MAX + (neg ? 1 : 0)) {
        return -1;
    }
    *v = neg ? (int64_t)(0 - x) : (int64_t)x;
    return 0;
}

static int
cmd_throttle(struct resp_conn *c, ARGS)
{
    struct rl_router *r = c->r;
    const struct rl_conf *conf = r->conf;
    int64_t v[4] = {0, 0, 0, 1};
    static const char *const what[] = {"max_burst", "count per period", "period", "quantity"};
    struct resp_slot *s;
    struct rl_wire_req req;
    char user[RL_WIRE_USER_MAX + 1];

    if (cmd->argc != 5 && cmd->argc != 6) {
        return rl_resp_put_error(b, "Cell error: Store error: Usage: cl.throttle <key> "
                                    "<max_burst> <count per period> <period> [<quantity>]");
    }
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
    if (v[3] < 0 || v[3] > (int64_t)UINT32_MAX) {
        return rl_resp_put_error(b, "ERR CL.THROTTLE: %s must be 0..%u", what[3], UINT32_MAX);
    }
    if (c->principal != NULL && !rl_conf_client_may(c->principal, NULL)) {
        r->stats.unauthorized++;
        return rl_resp_put_error(b, "NOPERM this client's token does not allow inline limits "
                                    "(CL.THROTTLE)");
    }
    if (rl_conf_rule(conf, conf->resp_service, strlen(conf->resp_service), NULL, 0) != NULL) {
        return rl_resp_put_error(b, "ERR CL.THROTTLE: the service %s has configured rules, "
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
    req.service.len = strlen(conf->resp_service);
    req.user.ptr = user;
    req.user.len = key_user(cmd->argv[1].ptr, cmd->argv[1].len, user);
    req.cost = (uint32_t)v[3];
    req.limit.set = true;
    req.limit.algo = RL_ALGO_GCRA;
    req.limit.limit = (uint32_t)v[1];
    req.limit.window_ms = (uint32_t)(v[2] * 1000);
    req.limit.has_burst = true;
    req.limit.burst = (uint32_t)s->burst;
    r->resp_counts[RESP_N_THROTTLES]++;
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
check_req(struct resp_conn *c, const struct rl_resp_arg *a, uint64_t cost,
          struct rl_wire_req *req, const struct rl_rule **rule, struct rl_buf *b)
{
    const struct rl_conf *conf = c->r->conf;

    if (a[0].len == 0 || a[0].len > RL_WIRE_SERVICE_MAX || a[1].len == 0 ||
        a[1].len > RL_WIRE_USER_MAX || a[2].len > RL_WIRE_SERVICE_MAX) {
        rl_resp_put_error(b, "ERR service must have 1..%u bytes, user 1..%u, endpoint 0..%u",
                          RL_WIRE_SERVICE_MAX, RL_WIRE_USER_MAX, RL_WIRE_SERVICE_MAX);
        return 1;
    }
    if (cost > UINT32_MAX) {
        rl_resp_put_error(b, "ERR COST must be 0..%u", UINT32_MAX);
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

    if (rl_resp_int64(a, &v) != 0 || v < 0 || v > (int64_t)UINT32_MAX) {
        rl_resp_put_error(b, "ERR COST must be an integer of 0..%u", UINT32_MAX);
        return 1;
    }
    *cost = (uint64_t)v;
    return 0;
}

/* RL.CHECK service user [endpoint] [COST n]; RL.MCHECK (service user endpoint cost)... */
static int
cmd_check(struct resp_conn *c, ARGS, bool multi)
{
    struct rl_resp_arg q[RESP_MCHECK_MAX][3];
    uint64_t cost[RESP_MCHECK_MAX];
    const struct rl_rule *rules[RESP_MCHECK_MAX];
    struct rl_wire_req reqs[RESP_MCHECK_MAX];
    uint32_t n = 0;
    struct resp_slot *s;

    if (!multi) {
        size_t argc = cmd->argc;

        if (argc < 3 || argc > 6) {
            return err_arity(b, &cmd->argv[0]);
        }
        q[0][0] = cmd->argv[1];
        q[0][1] = cmd->argv[2];
        q[0][2].ptr = "";
        q[0][2].len = 0;
        cost[0] = 1;
        if (argc >= 5 && rl_resp_is(&cmd->argv[argc - 2], "COST")) {
            if (cost_arg(&cmd->argv[argc - 1], &cost[0], b) != 0) {
                return 0;
            }
            argc -= 2;
        }
        if (argc == 4) {
            q[0][2] = cmd->argv[3];
        } else if (argc != 3) {
            return rl_resp_put_error(b, "ERR syntax error: RL.CHECK service user [endpoint] "
                                        "[COST n]");
        }
        n = 1;
    } else {
        if (cmd->argc < 5 || (cmd->argc - 1) % 4 != 0) {
            return err_arity(b, &cmd->argv[0]);
        }
        if ((cmd->argc - 1) / 4 > RESP_MCHECK_MAX) {
            return rl_resp_put_error(b, "ERR RL.MCHECK takes at most %u keys", RESP_MCHECK_MAX);
        }
        for (size_t i = 1; i < cmd->argc; i += 4, n++) {
            q[n][0] = cmd->argv[i];
            q[n][1] = cmd->argv[i + 1];
            q[n][2] = cmd->argv[i + 2];
            if (cost_arg(&cmd->argv[i + 3], &cost[n], b) != 0) {
                return 0;
            }
        }
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
    c->r->resp_counts[RESP_N_CHECKS] += n;
    s->outstanding = 1;
    for (uint32_t i = 0; i < n; i++) {
        if (rules[i] == NULL) {
            /* Every process reads the same rules: no node would find one either. */
            struct rl_resp_part *pt = slot_part(s, i);

            pt->slot = s;
            memset(&pt->rep, 0, sizeof(pt->rep));
            pt->rep.code = RL_WIRE_NO_RULE;
            c->r->stats.checks++;
            rl_rmetrics_count(c->r, NULL, RL_WIRE_NO_RULE, rl_router_now_ns(c->r));
            continue;
        }
        part_send(s, i, &reqs[i]);
    }
    if (--s->outstanding == 0) {
        slot_render(s);
    }
    return 0;
}

static int
put_hello(struct resp_conn *c, struct rl_buf *b)
{
    int p = c->proto;

    if (rl_resp_put_map(b, 7, p) != 0 || rl_resp_put_str(b, "server") != 0 ||
        rl_resp_put_str(b, "ratelimiter") != 0 || rl_resp_put_str(b, "version") != 0 ||
        rl_resp_put_str(b, RESP_COMPAT_VERSION) != 0 || put_kv(b, "proto", p) != 0 ||
        put_kv(b, "id", (int64_t)c->id) != 0 || rl_resp_put_str(b, "mode") != 0 ||
        rl_resp_put_str(b, "standalone") != 0 || rl_resp_put_str(b, "role") != 0 ||
        rl_resp_put_str(b, "master") != 0 || rl_resp_put_str(b, "modules") != 0 ||
        rl_resp_put_array(b, 0) != 0) {
        return -ENOMEM;
    }
    return 0;
}

/* AUTH's token: the client it names, or a refusal written to b (1). */
static int
auth_token(struct resp_conn *c, const struct rl_resp_arg *tok, struct rl_buf *b)
{
    const struct rl_conf *conf = c->r->conf;
    const struct rl_client_conf *cl;

    if (conf->nauth_clients == 0) {
        rl_resp_put_error(b, "ERR AUTH <password> called without any password configured for "
                             "the default user. Are you sure your configuration is correct?");
        return 1;
    }
    cl = tok->len > 0 && tok->len <= 256 ? rl_conf_client_by_token(conf, tok->ptr, tok->len)
                                         : NULL;
    if (cl == NULL) {
        c->r->stats.auth_failures++;
        if (++c->auth_fails >= RESP_AUTH_TRIES) {
            c->quit = true;
        }
        rl_resp_put_error(b, "WRONGPASS invalid username-password pair or user is disabled.");
        return 1;
    }
    c->authed = true;
    c->principal = cl;
    return 0;
}

static int
cmd_hello(struct resp_conn *c, ARGS)
{
    int64_t proto = c->proto;
    size_t i = 1;

    if (cmd->argc >= 2) {
        if (rl_resp_int64(&cmd->argv[1], &proto) != 0) {
            return rl_resp_put_error(b, "ERR Protocol version is not an integer or out of range");
        }
        if (proto != 2 && proto != 3) {
            return rl_resp_put_error(b, "NOPROTO unsupported protocol version");
        }
        i = 2;
    }
    for (; i < cmd->argc; i++) {
        if (rl_resp_is(&cmd->argv[i], "AUTH") && i + 2 < cmd->argc) {
            if (auth_token(c, &cmd->argv[i + 2], b) != 0) {
                return 0;
            }
            i += 2;
        } else if (rl_resp_is(&cmd->argv[i], "SETNAME") && i + 1 < cmd->argc) {
            const struct rl_resp_arg *nm = &cmd->argv[++i];

            if (nm->len > RESP_NAME_MAX) {
                return rl_resp_put_error(b, "ERR client name too long (%u bytes at most)",
                                         RESP_NAME_MAX);
            }
            memcpy(c->name, nm->ptr, nm->len);
            c->name_len = nm->len;
        } else {
            return rl_resp_put_error(b, "ERR Syntax error in HELLO option '%.*s'",
                                     (int)(cmd->argv[i].len > 64 ? 64 : cmd->argv[i].len),
                                     cmd->argv[i].ptr);
        }
    }
    if (!c->authed) {
        return rl_resp_put_error(b, "NOAUTH HELLO must be called with the client already "
                                    "authenticated, otherwise the HELLO <proto> AUTH <user> "
                                    "<pass> option can be used to authenticate the client and "
                                    "select the RESP protocol version at the same time");
    }
    c->proto = (int)proto;
    return put_hello(c, b);
}

static int
cmd_client(struct resp_conn *c, ARGS)
{
    if (cmd->argc < 2) {
        return err_arity(b, &cmd->argv[0]);
    }
    if (rl_resp_is(&cmd->argv[1], "SETNAME") && cmd->argc == 3) {
        const struct rl_resp_arg *nm = &cmd->argv[2];

        for (size_t i = 0; i < nm->len; i++) {
            if (nm->ptr[i] < '!' || nm->ptr[i] > '~') {
                return rl_resp_put_error(b, "ERR Client names cannot contain spaces, newlines "
                                            "or special characters.");
            }
        }
        if (nm->len > RESP_NAME_MAX) {
            return rl_resp_put_error(b, "ERR client name too long (%u bytes at most)",
                                     RESP_NAME_MAX);
        }
        memcpy(c->name, nm->ptr, nm->len);
        c->name_len = nm->len;
        return rl_resp_put_simple(b, "OK");
    }
    if (rl_resp_is(&cmd->argv[1], "GETNAME") && cmd->argc == 2) {
        return c->name_len > 0 ? rl_resp_put_bulk(b, c->name, c->name_len)
                               : rl_resp_put_null(b, c->proto);
    }
    if (rl_resp_is(&cmd->argv[1], "ID") && cmd->argc == 2) {
        return rl_resp_put_int(b, (int64_t)c->id);
    }
    if (rl_resp_is(&cmd->argv[1], "SETINFO") && cmd->argc == 4) {
        return rl_resp_put_simple(b, "OK"); /* libraries announce themselves: noted, unused */
    }
    return rl_resp_put_error(b, "ERR unknown subcommand '%.*s'. Try CLIENT HELP.",
                             (int)(cmd->argv[1].len > 64 ? 64 : cmd->argv[1].len),
                             cmd->argv[1].ptr);
}

/* The commands served, as COMMAND lists them: name, arity (negative: at least), flags, first
 * key, last key, step. */
static const struct resp_cmd_info {
    const char *name;
    int arity;
    const char *flags;
    int first, last, step;
} resp_cmds[] = {
    {"cl.throttle", -5, "write", 1, 1, 1},
    {"rl.check", -3, "write", 0, 0, 0},
    {"rl.mcheck", -5, "write", 0, 0, 0},
    {"auth", -2, "noscript", 0, 0, 0},
    {"hello", -1, "noscript", 0, 0, 0},
    {"ping", -1, "fast", 0, 0, 0},
    {"echo", 2, "fast", 0, 0, 0},
    {"client", -2, "noscript", 0, 0, 0},
    {"select", 2, "fast", 0, 0, 0},
    {"quit", -1, "fast", 0, 0, 0},
    {"command", -1, "loading", 0, 0, 0},
    {"info", -1, "loading", 0, 0, 0},
};

#define RESP_NCMDS (sizeof(resp_cmds) / sizeof(resp_cmds[0]))

static int
put_cmd_info(struct rl_buf *b, const struct resp_cmd_info *ci, int proto)
{
    if (rl_resp_put_array(b, 10) != 0 || rl_resp_put_str(b, ci->name) != 0 ||
        rl_resp_put_int(b, ci->arity) != 0 || rl_resp_put_set(b, 1, proto) != 0 ||
        rl_resp_put_simple(b, ci->flags) != 0 || rl_resp_put_int(b, ci->first) != 0 ||
        rl_resp_put_int(b, ci->last) != 0 || rl_resp_put_int(b, ci->step) != 0 ||
        rl_resp_put_set(b, 0, proto) != 0 || rl_resp_put_set(b, 0, proto) != 0 ||
        rl_resp_put_array(b, 0) != 0 || rl_resp_put_array(b, 0) != 0) {
        return -ENOMEM;
    }
    return 0;
}

static int
cmd_command(struct resp_conn *c, ARGS)
{
    if (cmd->argc == 1) {
        int rc = rl_resp_put_array(b, RESP_NCMDS);

        for (size_t i = 0; rc == 0 && i < RESP_NCMDS; i++) {
            rc = put_cmd_info(b, &resp_cmds[i], c->proto);
        }
        return rc;
    }
    if (rl_resp_is(&cmd->argv[1], "COUNT")) {
        return rl_resp_put_int(b, (int64_t)RESP_NCMDS);
    }
    if (rl_resp_is(&cmd->argv[1], "DOCS")) {
        /* No documentation is served: clients fall back to their own help. */
        return rl_resp_put_map(b, 0, c->proto);
    }
    if (rl_resp_is(&cmd->argv[1], "LIST")) {
        int rc = rl_resp_put_array(b, RESP_NCMDS);

        for (size_t i = 0; rc == 0 && i < RESP_NCMDS; i++) {
            rc = rl_resp_put_str(b, resp_cmds[i].name);
        }
        return rc;
    }
    if (rl_resp_is(&cmd->argv[1], "INFO")) {
        int rc = rl_resp_put_array(b, cmd->argc - 2);

        for (size_t k = 2; rc == 0 && k < cmd->argc; k++) {
            const struct resp_cmd_info *ci = NULL;

            for (size_t i = 0; i < RESP_NCMDS; i++) {
                if (rl_resp_is(&cmd->argv[k], resp_cmds[i].name)) {
                    ci = &resp_cmds[i];
                }
            }
            rc = ci != NULL ? put_cmd_info(b, ci, c->proto) : rl_resp_put_null(b, c->proto);
        }
        return rc;
    }
    return rl_resp_put_error(b, "ERR unknown subcommand '%.*s'. Try COMMAND HELP.",
                             (int)(cmd->argv[1].len > 64 ? 64 : cmd->argv[1].len),
                             cmd->argv[1].ptr);
}

static int
cmd_info(struct resp_conn *c, struct rl_buf *b)
{
    struct rl_router *r = c->r;
    struct rl_resp *g = r->resp;
    struct rl_router_stats st;
    uint64_t pending = 0;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    int rc;

    if (f == NULL) {
        return -ENOMEM;
    }
    rl_rmetrics_totals(r, &st, &pending);
    fprintf(f,
            "# Server\r\nredis_version:%s\r\nredis_mode:standalone\r\nratelimiter_version:%s\r\n"
            "process_id:%ld\r\ntcp_port:%u\r\nloading:0\r\n\r\n",
            RESP_COMPAT_VERSION, RL_VERSION, (long)getpid(), (unsigned)r->conf->resp_port);
    fprintf(f, "# Clients\r\nconnected_clients:%u\r\n\r\n",
            r->proc != NULL ? rl_rproc_front_connections(r->proc, RL_FRONT_RESP) : g->nconns);
    fprintf(f,
            "# Stats (this worker)\r\ntotal_commands_processed:%" PRIu64
            "\r\ncl_throttle_commands:%" PRIu64 "\r\nrl_check_keys:%" PRIu64
            "\r\nerror_replies:%" PRIu64 "\r\nprotocol_errors:%" PRIu64 "\r\n\r\n",
            r->resp_counts[RESP_N_COMMANDS], r->resp_counts[RESP_N_THROTTLES],
            r->resp_counts[RESP_N_CHECKS], r->resp_counts[RESP_N_ERRORS],
            r->resp_counts[RESP_N_PROTOCOL]);
    fprintf(f, "# Router\r\nworkers:%u\r\npending:%" PRIu64 "\r\n",
            r->proc != NULL ? rl_rproc_workers(r->proc) : 1, pending);
#define RESP_INFO_FIELD(f_, s_) fprintf(f, "%s:%" PRIu64 "\r\n", s_, st.f_);
    RL_ROUTER_STATS_MAP(RESP_INFO_FIELD)
#undef RESP_INFO_FIELD
    if (fclose(f) != 0) {
        free(text);
        return -ENOMEM;
    }
    if (c->proto >= 3) {
        /* a RESP3 verbatim string, as Redis answers INFO */
        char head[40];
        int hn = snprintf(head, sizeof(head), "=%zu\r\ntxt:", len + 4);

        rc = rl_buf_append(b, head, (size_t)hn) != 0 || rl_buf_append(b, text, len) != 0 ||
                     rl_buf_append(b, "\r\n", 2) != 0
                 ? -ENOMEM
                 : 0;
    } else {
        rc = rl_resp_put_bulk(b, text, len);
    }
    free(text);
    return rc;
}

/* The unknown-command error, worded as Redis words it. */
static int
err_unknown(const struct rl_resp_cmd *cmd, struct rl_buf *b)
{
    char args[512];
    size_t n = 0;

    args[0] = '\0';
    for (size_t i = 1; i < cmd->argc && n < sizeof(args) - 140; i++) {
        int w = snprintf(args + n, sizeof(args) - n, "'%.*s' ",
                         (int)(cmd->argv[i].len > 128 ? 128 : cmd->argv[i].len), cmd->argv[i].ptr);

        if (w < 0) {
            break;
        }
        n += (size_t)w;
    }
    return rl_resp_put_error(b, "ERR unknown command '%.*s', with args beginning with: %s",
                             (int)(cmd->argv[0].len > 128 ? 128 : cmd->argv[0].len),
                             cmd->argv[0].ptr, args);
}

/* Runs one command. A reply written now goes to b (the loop's scratch buffer), then to
 * c->out, or to a slot of its own when replies wait before it; CL.THROTTLE and RL.CHECK
 * take a slot for the reply to come instead. -ENOMEM: close. */
static int
conn_command(struct resp_conn *c, const struct rl_resp_cmd *cmd)
{
    struct rl_resp *g = c->r->resp;
    const struct rl_resp_arg *name = &cmd->argv[0];
    struct rl_buf *b = &g->tmp, *dst;
    int rc;

    c->r->resp_counts[RESP_N_COMMANDS]++;
    rl_buf_reset(b);
    if (rl_resp_is(name, "AUTH")) {
        if (cmd->argc != 2 && cmd->argc != 3) {
            rc = err_arity(b, name);
        } else if (auth_token(c, &cmd->argv[cmd->argc - 1], b) == 0) {
            rc = rl_resp_put_simple(b, "OK");
        } else {
            rc = 0;
        }
    } else if (rl_resp_is(name, "HELLO")) {
        rc = cmd_hello(c, cmd, b);
    } else if (rl_resp_is(name, "QUIT")) {
        c->quit = true;
        rc = rl_resp_put_simple(b, "OK");
    } else if (!c->authed) {
        rc = rl_resp_put_error(b, "NOAUTH Authentication required.");
    } else if (rl_resp_is(name, "CL.THROTTLE")) {
        rc = cmd_throttle(c, cmd, b);
    } else if (rl_resp_is(name, "RL.CHECK")) {
        rc = cmd_check(c, cmd, b, false);
    } else if (rl_resp_is(name, "RL.MCHECK")) {
        rc = cmd_check(c, cmd, b, true);
    } else if (rl_resp_is(name, "PING")) {
        rc = cmd->argc == 1   ? rl_resp_put_simple(b, "PONG")
             : cmd->argc == 2 ? rl_resp_put_bulk(b, cmd->argv[1].ptr, cmd->argv[1].len)
                              : err_arity(b, name);
    } else if (rl_resp_is(name, "ECHO")) {
        rc = cmd->argc == 2 ? rl_resp_put_bulk(b, cmd->argv[1].ptr, cmd->argv[1].len)
                            : err_arity(b, name);
    } else if (rl_resp_is(name, "SELECT")) {
        int64_t db;

        rc = cmd->argc != 2 ? err_arity(b, name)
             : rl_resp_int64(&cmd->argv[1], &db) != 0
                 ? rl_resp_put_error(b, "ERR value is not an integer or out of range")
             : db != 0 ? rl_resp_put_error(b, "ERR DB index is out of range")
                       : rl_resp_put_simple(b, "OK");
    } else if (rl_resp_is(name, "CLIENT")) {
        rc = cmd_client(c, cmd, b);
    } else if (rl_resp_is(name, "COMMAND")) {
        rc = cmd_command(c, cmd, b);
    } else if (rl_resp_is(name, "INFO")) {
        rc = cmd_info(c, b);
    } else {
        rc = err_unknown(cmd, b);
    }
    if (rc != 0 || c->closing || b->len == 0) {
        return rc;
    }
    if (b->data[0] == '-') {
        c->r->resp_counts[RESP_N_ERRORS]++;
    }
    dst = reply_to(c);
    return dst == NULL || rl_buf_append(dst, b->data, b->len) != 0 ? -ENOMEM : 0;
}

/* ---- reading ------------------------------------------------------------------------------- */

/* Runs the commands of buf[0..len); returns the bytes consumed (the rest waits: an
 * incomplete command, or no slot free). */
static size_t
conn_run(struct resp_conn *c, char *buf, size_t len)
{
    struct rl_resp *g = c->r->resp;
    size_t off = 0;

    while (off < len && !c->closing && !c->quit) {
        size_t used = 0;
        const char *err = NULL;
        int rc;

        if (c->nslots >= RESP_PIPELINE_MAX) {
            break; /* resumed when answers free slots (resp_produce) */
        }
        rc = rl_resp_parse(buf + off, len - off, &g->cmd, &used, &err);
        if (rc == RL_RESP_MORE) {
            break;
        }
        if (rc == RL_RESP_ERR) {
            struct rl_buf *b = reply_to(c);

            c->r->resp_counts[RESP_N_PROTOCOL]++;
            if (b == NULL || rl_resp_put_error(b, "ERR %s", err) != 0) {
                c->closing = true;
                return off;
            }
            c->quit = true; /* as Redis: the error, then the connection closes */
            return len;
        }
        off += used;
        c->partial_ms = 0; /* progress */
        if (g->cmd.argc > 0 && conn_command(c, &g->cmd) != 0) {
            c->closing = true;
            return off;
        }
    }
    return off;
}

/* Runs what c->in holds. */
static void
conn_process(struct resp_conn *c)
{
    size_t unread = rl_buf_unread(&c->in), used;

    if (unread == 0 || c->quit || c->closing) {
        return;
    }
    used = conn_run(c, c->in.data + c->in.pos, unread);
    c->in.pos += used;
    if (rl_buf_unread(&c->in) == 0) {
        rl_buf_deinit(&c->in);
    } else {
        rl_buf_compact(&c->in);
        if (c->partial_ms == 0) {
            c->partial_ms = uv_now(c->r->loop);
        }
    }
    if (c->in.cap != c->held) {
        /* shrinking always succeeds; growing was checked before the bytes were taken */
        (void)rl_front_hold(c->fc, c->held, c->in.cap);
        c->held = c->in.cap;
    }
}

/* ---- front.c's callbacks ------------------------------------------------------------------- */

static int
resp_open(struct rl_front_conn *fc)
{
    struct rl_router *r = rl_front_router(fc);
    struct resp_conn *c;

    if (r->resp == NULL) {
        r->resp = calloc(1, sizeof(*r->resp));
        if (r->resp == NULL) {
            return UV_ENOMEM;
        }
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return UV_ENOMEM;
    }
    c->fc = fc;
    c->r = r;
    c->id = ++r->resp->next_id;
    c->proto = 2;
    c->authed = r->conf->nauth_clients == 0;
    r->resp->nconns++;
    rl_front_set_proto(fc, c);
    return 0;
}

static int
resp_bytes(struct rl_front_conn *fc, const uint8_t *data, size_t len)
{
    struct resp_conn *c = rl_front_proto(fc);
    size_t want;

    if (c->quit) {
        return 0; /* what follows QUIT or a protocol error is dropped */
    }
    /* The input is held in c->in (inline commands are unquoted in place): at most
     * RESP_HELD_MAX bytes, and the worker's share of [clients] buffer_memory. */
    want = rl_buf_unread(&c->in) + len;
    if (want > c->in.cap && rl_front_hold(fc, c->held, want) != 0) {
        uint64_t now = uv_now(c->r->loop);

        if (c->r->resp->warned_ms == 0 || now - c->r->resp->warned_ms >= 10000) {
            c->r->resp->warned_ms = now; /* said at most every 10 s per worker */
            rl_log_warn("resp: a connection closed: it holds too much unread input (%zu "
                        "bytes at most, and [clients] buffer_memory)",
                        (size_t)RESP_HELD_MAX);
        }
        return -1;
    }
    if (rl_buf_append(&c->in, data, len) != 0) {
        return -1;
    }
    if (c->in.cap != c->held) {
        if (rl_front_hold(fc, c->held, c->in.cap) != 0) {
            /* the buffer grew past what was asked: keep the count exact, let it pass */
            (void)rl_front_hold(fc, c->held, want);
            c->held = want;
        } else {
            c->held = c->in.cap;
        }
    }
    conn_process(c);
    return c->closing ? -1 : 0;
}

static int
resp_produce(struct rl_front_conn *fc)
{
    struct resp_conn *c = rl_front_proto(fc);

    if (c->closing || conn_drain(c) != 0) {
        return -1;
    }
    if (rl_buf_unread(&c->in) > 0 && c->nslots < RESP_PIPELINE_MAX) {
        conn_process(c); /* commands that waited for a slot */
        if (c->closing || conn_drain(c) != 0) {
            return -1;
        }
    }
    if (c->out.len > 0) {
        if (rl_front_write(fc, c->out.data, c->out.len) != 0) {
            return -1;
        }
        if (c->out.cap > 64u * 1024) {
            rl_buf_deinit(&c->out);
        } else {
            rl_buf_reset(&c->out);
        }
    }
    if (c->quit && c->nslots == 0) {
        if (c->quit_ms == 0) {
            c->quit_ms = uv_now(c->r->loop);
        }
        rl_front_shutdown(fc);
    }
    return 0;
}

static bool
resp_finished(struct rl_front_conn *fc)
{
    (void)fc;
    return false; /* after QUIT: the peer's EOF or the linger time (resp_tick) closes */
}

static bool
resp_busy(struct rl_front_conn *fc)
{
    struct resp_conn *c = rl_front_proto(fc);

    return c->nslots > 0;
}

/* Every tick: a connection that quit lingers RESP_LINGER_MS at most; a command incomplete
 * for frame_timeout closes its connection. */
static void
resp_tick(struct rl_front_conn *fc, uint64_t now, uint64_t frame_timeout_ms)
{
    struct resp_conn *c = rl_front_proto(fc);

    if (c->quit_ms != 0 && now - c->quit_ms >= RESP_LINGER_MS) {
        rl_front_close(fc);
        return;
    }
    if (c->partial_ms != 0 && c->nslots < RESP_PIPELINE_MAX &&
        now - c->partial_ms >= frame_timeout_ms) {
        rl_front_close(fc);
    }
}

static void
resp_close(struct rl_front_conn *fc)
{
    struct resp_conn *c = rl_front_proto(fc);
    struct rl_resp *g;

    if (c == NULL) {
        return;
    }
    g = c->r->resp;
    c->closing = true;
    for (uint32_t k = 0; c->slots != NULL && k < c->nslots; k++) {
        struct resp_slot *s = &c->slots[(c->head + k) % RESP_PIPELINE_MAX];

        for (uint32_t i = 0; i < s->nparts; i++) {
            struct rl_resp_part *pt = slot_part(s, i);

            if (pt->p != NULL) {
                pt->p->rsink = NULL; /* an orphan: its answer is dropped */
                pt->p = NULL;
            }
        }
        rl_buf_deinit(&s->out);
        free(s->parts);
    }
    free(c->slots);
    (void)rl_front_hold(fc, c->held, 0);
    rl_buf_deinit(&c->in);
    rl_buf_deinit(&c->out);
    if (c->dirty) {
        struct resp_conn **pp = &g->dirty;

        while (*pp != c) {
            pp = &(*pp)->dirty_next;
        }
        *pp = c->dirty_next;
    }
    g->nconns--;
    free(c);
    rl_front_set_proto(fc, NULL);
}

const struct rl_front_ops rl_resp_ops = {
    .name = "resp",
    .limits = {.write_queue_max = RESP_WRITE_QUEUE_MAX,
               .held_max = RESP_HELD_MAX,
               .tick_ms = RESP_TICK_MS},
    .on_open = resp_open,
    .on_bytes = resp_bytes,
    .produce = resp_produce,
    .finished = resp_finished,
    .busy = resp_busy,
    .on_idle = NULL,
    .on_tick = resp_tick,
    .on_close = resp_close,
};

void
rl_resp_free(struct rl_router *r)
{
    if (r->resp != NULL) {
        rl_buf_deinit(&r->resp->tmp);
    }
    free(r->resp);
    r->resp = NULL;
}
