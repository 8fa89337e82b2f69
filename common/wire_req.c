/*
 * wire_req: request decoding, the server side of the codec. A payload is unpacked (wire.c's
 * scan first), its op and id read, and the rest judged in the order docs/PROTOCOL.md
 * ("Errors") gives, so the first failure decides the ERROR a client gets: MALFORMED,
 * UNKNOWN_OP, then BAD_FIELD naming the element count or the first bad field. What a request
 * means is for the node and the router.
 */
#include "wire.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ruleset.h"
#include "wire_int.h"

/* A token: str or bin, 1..RL_WIRE_TOKEN_MAX bytes (msgpack keeps both as one union). */
static bool
wire_token(const msgpack_object *o, struct rl_wire_str *s)
{
    if (o->type == MSGPACK_OBJECT_BIN && o->via.bin.size >= 1 &&
        o->via.bin.size <= RL_WIRE_TOKEN_MAX) {
        s->ptr = o->via.bin.ptr;
        s->len = o->via.bin.size;
        return true;
    }
    return wire_str(o, 1, RL_WIRE_TOKEN_MAX, s);
}

static int
wire_fault(struct rl_wire_fault *f, uint32_t id, uint32_t err, bool fatal, const char *msg)
{
    f->id = id;
    f->err = err;
    f->fatal = fatal;
    snprintf(f->msg, sizeof(f->msg), "%s", msg);
    return -1;
}

/*
 * The request shapes of the op table's req column. Each decodes the fields after the op and
 * the id of a request whose element count is already within the op's arity, and judges them
 * in the order docs/PROTOCOL.md gives.
 */
typedef int (*wire_req_fn)(const msgpack_object *a, struct rl_wire_req *req,
                           struct rl_wire_fault *f);

/* [op, id]: nothing more. */
static int
wire_req_bare(const msgpack_object *a, struct rl_wire_req *req, struct rl_wire_fault *f)
{
    (void)a;
    (void)req;
    (void)f;
    return 0;
}

/* An op that is never a request (ERROR): its arity is 0..0, so it always lands here. */
static int
wire_req_none(const msgpack_object *a, struct rl_wire_req *req, struct rl_wire_fault *f)
{
    char msg[64];

    (void)a;
    snprintf(msg, sizeof(msg), "op %" PRIu32 " (%s) is never a request", req->op,
             rl_wire_op_info(req->op)->upper);
    return wire_fault(f, req->id, RL_WIRE_ERR_UNKNOWN_OP, false, msg);
}

/* The algorithms by their cluster.conf names, and whether each takes a burst. */
static const struct {
    const char *name;
    bool burst;
} wire_algos[] = {
#define WIRE_ALGO_ROW(n, s, b) {s, b},
    RL_ALGO_MAP(WIRE_ALGO_ROW)
#undef WIRE_ALGO_ROW
};

/* CHECK's 7th element: [algorithm, limit, window_ms, burst|nil] (docs/PROTOCOL.md). */
static int
wire_req_limit(const msgpack_object *o, struct rl_wire_req *req, struct rl_wire_fault *f)
{
    struct rl_wire_limit *lim = &req->limit;
    const msgpack_object *e;
    struct rl_wire_str name;
    uint64_t v;
    size_t i;

    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 4) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "limit must be nil or [algorithm, limit, window_ms, burst|nil]");
    }
    e = o->via.array.ptr;
    if (!wire_str(&e[0], 1, 64, &name)) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "limit's algorithm must be a string");
    }
    for (i = 0; i < sizeof(wire_algos) / sizeof(wire_algos[0]); i++) {
        if (strlen(wire_algos[i].name) == name.len &&
            memcmp(wire_algos[i].name, name.ptr, name.len) == 0) {
            break;
        }
    }
    if (i == sizeof(wire_algos) / sizeof(wire_algos[0])) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "limit's algorithm is unknown (use fixed_window, "
                          "sliding_window_log or _counter, token_bucket, gcra, leaky_bucket, "
                          "concurrency)");
    }
    lim->algo = (uint8_t)i;
    if (!wire_uint(&e[1], RL_CONF_LIMIT_MAX, &v) || v == 0) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "limit's limit must be an unsigned integer of 1..4294967295");
    }
    if (v > rl_algo_limit_max((enum rl_algo)i)) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "limit's limit must be an unsigned integer of 1..10000 for "
                          "concurrency");
    }
    lim->limit = (uint32_t)v;
    if (!wire_uint(&e[2], rl_algo_window_max((enum rl_algo)i), &v) || v == 0) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          rl_algo_window_max((enum rl_algo)i) == RL_CONF_WINDOW_MAX
                              ? "limit's window_ms must be an unsigned integer of "
                                "1..31622400000"
                              : "limit's window_ms must be an unsigned integer of "
                                "1..4294967295 for this algorithm");
    }
    lim->window_ms = v;
    lim->burst = lim->limit;
    if (e[3].type != MSGPACK_OBJECT_NIL) {
        if (!wire_algos[i].burst) {
            return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                              "limit's burst must be nil: only token_bucket, gcra and "
                              "leaky_bucket take a burst");
        }
        if (!wire_uint(&e[3], RL_CONF_LIMIT_MAX, &v) || v == 0) {
            return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                              "limit's burst must be nil or an unsigned integer of "
                              "1..4294967295");
        }
        lim->burst = (uint32_t)v;
        lim->has_burst = true;
    }
    lim->set = true;
    return 0;
}

/* CHECK's, ADJUST's and RELEASE's service, user and endpoint (elements 2..4). */
static int
wire_req_key(const msgpack_object *a, struct rl_wire_req *req, struct rl_wire_fault *f)
{
    if (!wire_str(&a->via.array.ptr[2], 1, RL_WIRE_SERVICE_MAX, &req->service)) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "service must be a string of 1..128 bytes");
    }
    if (!wire_str(&a->via.array.ptr[3], 1, RL_WIRE_USER_MAX, &req->user)) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "user must be a string of 1..256 bytes");
    }
    if (a->via.array.ptr[4].type != MSGPACK_OBJECT_NIL &&
        !wire_str(&a->via.array.ptr[4], 0, RL_WIRE_ENDPOINT_MAX, &req->endpoint)) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "endpoint must be nil or a string of 0..128 bytes");
    }
    return 0;
}

/* CHECK's, ADJUST's and RELEASE's optional limit and tenant (elements 6 and 7). */
static int
wire_req_tail(const msgpack_object *a, struct rl_wire_req *req, struct rl_wire_fault *f)
{
    if (a->via.array.size > 6 && a->via.array.ptr[6].type != MSGPACK_OBJECT_NIL) {
        int rc = wire_req_limit(&a->via.array.ptr[6], req, f);

        if (rc != 0) {
            return rc;
        }
    }
    if (a->via.array.size > 7 && a->via.array.ptr[7].type != MSGPACK_OBJECT_NIL) {
        uint64_t tenant;

        if (!wire_uint(&a->via.array.ptr[7], UINT32_MAX, &tenant)) {
            return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                              "tenant must be nil or an unsigned integer of 0..4294967295");
        }
        req->tenant = (uint32_t)tenant;
    }
    return 0;
}

static int
wire_req_check(const msgpack_object *a, struct rl_wire_req *req, struct rl_wire_fault *f)
{
    uint64_t cost;
    int rc = wire_req_key(a, req, f);

    if (rc != 0) {
        return rc;
    }
    if (!wire_uint(&a->via.array.ptr[5], RL_WIRE_COST_MAX, &cost)) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "cost must be an unsigned integer of 0..1000000");
    }
    req->cost = (uint32_t)cost;
    return wire_req_tail(a, req, f);
}

/* ADJUST: CHECK's shape, element 5 a signed delta of -1000000..1000000. */
static int
wire_req_adjust(const msgpack_object *a, struct rl_wire_req *req, struct rl_wire_fault *f)
{
    const msgpack_object *d = &a->via.array.ptr[5];
    int rc = wire_req_key(a, req, f);

    if (rc != 0) {
        return rc;
    }
    if (d->type == MSGPACK_OBJECT_POSITIVE_INTEGER && d->via.u64 <= RL_WIRE_DELTA_MAX) {
        req->delta = (int32_t)d->via.u64;
    } else if (d->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && d->via.i64 >= -RL_WIRE_DELTA_MAX) {
        req->delta = (int32_t)d->via.i64;
    } else {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "delta must be an integer of -1000000..1000000");
    }
    return wire_req_tail(a, req, f);
}

/* RELEASE: CHECK's shape, element 5 the count of slots given back, 1..1000000 (in cost). */
static int
wire_req_release(const msgpack_object *a, struct rl_wire_req *req, struct rl_wire_fault *f)
{
    uint64_t count;
    int rc = wire_req_key(a, req, f);

    if (rc != 0) {
        return rc;
    }
    if (!wire_uint(&a->via.array.ptr[5], RL_WIRE_COUNT_MAX, &count) || count == 0) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "count must be an unsigned integer of 1..1000000");
    }
    req->cost = (uint32_t)count;
    return wire_req_tail(a, req, f);
}

static int
wire_req_clock(const msgpack_object *a, struct rl_wire_req *req, struct rl_wire_fault *f)
{
    if (!wire_uint(&a->via.array.ptr[2], RL_WIRE_CLOCK_MAX, &req->now_ms)) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "now_ms must be an unsigned integer of 0..4611686018427387904");
    }
    return 0;
}

static int
wire_req_hello(const msgpack_object *a, struct rl_wire_req *req, struct rl_wire_fault *f)
{
    if (!wire_str(&a->via.array.ptr[2], 1, RL_WIRE_ROLE_MAX, &req->role)) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "role must be a string of 1..32 bytes");
    }
    return 0;
}

static int
wire_req_auth(const msgpack_object *a, struct rl_wire_req *req, struct rl_wire_fault *f)
{
    if (!wire_token(&a->via.array.ptr[2], &req->token)) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "token must be a string or binary of 1..256 bytes");
    }
    return 0;
}

/* [7, id, service|nil, since_ms|nil, top|nil]: the trailing ones may be left out. */
static int
wire_req_throttled(const msgpack_object *a, struct rl_wire_req *req, struct rl_wire_fault *f)
{
    uint32_t size = a->via.array.size;
    uint64_t v;

    req->top = RL_WIRE_TOP_DEFAULT;
    if (size > 2 && a->via.array.ptr[2].type != MSGPACK_OBJECT_NIL &&
        !wire_str(&a->via.array.ptr[2], 1, RL_WIRE_SERVICE_MAX, &req->service)) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "service must be nil or a string of 1..128 bytes");
    }
    if (size > 3 && a->via.array.ptr[3].type != MSGPACK_OBJECT_NIL) {
        if (!wire_uint(&a->via.array.ptr[3], UINT64_MAX, &req->since_ms)) {
            return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                              "since_ms must be nil or an unsigned integer");
        }
        req->has_since = true;
    }
    if (size > 4 && a->via.array.ptr[4].type != MSGPACK_OBJECT_NIL) {
        if (!wire_uint(&a->via.array.ptr[4], RL_WIRE_TOP_MAX, &v) || v == 0) {
            return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                              "top must be nil or an unsigned integer of 1..100");
        }
        req->top = (uint32_t)v;
    }
    return 0;
}

/* HANDOFF_OUT [11, id, shard, offset]. */
static int
wire_req_handoff_out(const msgpack_object *a, struct rl_wire_req *req, struct rl_wire_fault *f)
{
    uint64_t v;

    if (!wire_uint(&a->via.array.ptr[2], RL_WIRE_SHARDS_MAX - 1, &v)) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "shard must be an unsigned integer of 0..1048575");
    }
    req->shard = (uint32_t)v;
    if (!wire_uint(&a->via.array.ptr[3], UINT64_MAX, &req->offset)) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "offset must be an unsigned integer");
    }
    return 0;
}

/* HANDOFF_IN [12, id, shard, records(, final(, from))]: the records' contents are the
 * node's to judge; final, when given, a boolean; from a string of 0..63 bytes. */
static int
wire_req_handoff_in(const msgpack_object *a, struct rl_wire_req *req, struct rl_wire_fault *f)
{
    const msgpack_object *r = &a->via.array.ptr[3];
    uint64_t v;

    if (!wire_uint(&a->via.array.ptr[2], RL_WIRE_SHARDS_MAX - 1, &v)) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "shard must be an unsigned integer of 0..1048575");
    }
    req->shard = (uint32_t)v;
    if (r->type != MSGPACK_OBJECT_BIN || r->via.bin.size > RL_WIRE_RECORDS_MAX) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "records must be a binary of 0..65500 bytes");
    }
    req->records.ptr = r->via.bin.ptr;
    req->records.len = r->via.bin.size;
    req->final = false;
    req->has_final = a->via.array.size >= 5;
    req->from.ptr = NULL;
    req->from.len = 0;
    if (a->via.array.size == 6) {
        const msgpack_object *fr = &a->via.array.ptr[5];

        if (fr->type != MSGPACK_OBJECT_STR || fr->via.str.size > 63) {
            return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                              "from must be a string of 0..63 bytes");
        }
        req->from.ptr = fr->via.str.size > 0 ? fr->via.str.ptr : "";
        req->from.len = fr->via.str.size;
    }
    if (a->via.array.size >= 5) {
        const msgpack_object *fin = &a->via.array.ptr[4];

        if (fin->type != MSGPACK_OBJECT_BOOLEAN) {
            return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                              "final must be a boolean");
        }
        req->final = fin->via.boolean;
    }
    return 0;
}

/* [8, id, service|nil, top|nil]: the trailing ones may be left out. */
static int
wire_req_hot(const msgpack_object *a, struct rl_wire_req *req, struct rl_wire_fault *f)
{
    uint32_t size = a->via.array.size;
    uint64_t v;

    if (size > 2 && a->via.array.ptr[2].type != MSGPACK_OBJECT_NIL &&
        !wire_str(&a->via.array.ptr[2], 1, RL_WIRE_SERVICE_MAX, &req->service)) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "service must be nil or a string of 1..128 bytes");
    }
    if (size > 3 && a->via.array.ptr[3].type != MSGPACK_OBJECT_NIL) {
        if (!wire_uint(&a->via.array.ptr[3], RL_WIRE_TOP_MAX, &v) || v == 0) {
            return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                              "top must be nil or an unsigned integer of 1..100");
        }
        req->top = (uint32_t)v;
    }
    return 0;
}

/* Each op's request shape, by opcode (the op table's req column). */
static const wire_req_fn wire_req_fns[256] = {RL_WIRE_OP_BY(req, wire_req_)};

/* The rule 5 message: "CHECK takes 6..8 elements", "PING takes 2 elements". */
static void
wire_arity_msg(const struct rl_wire_op_info *info, char *msg, size_t len)
{
    if (info->req_min == info->req_max) {
        snprintf(msg, len, "%s takes %u elements", info->upper, info->req_min);
    } else {
        snprintf(msg, len, "%s takes %u..%u elements", info->upper, info->req_min, info->req_max);
    }
}

/* The keyed ops' elements, as their field errors name them (cost, delta and count apart). */
static const char *const wire_keyed_names[] = {"op", "id", "service", "user", "endpoint", "cost",
                                               "limit", "tenant"};

/*
 * A request that is one value but nests a container deeper than msgpack-c decodes (32): its
 * head read by hand, then answered as the full decoder would a field of the wrong type:
 * BAD_FIELD naming the element (the connection kept), after the id, op and arity rules.
 */
static int
wire_req_deep(const struct rl_wire_decoder *d, const char *data, size_t n, long deep,
              struct rl_wire_req *req, struct rl_wire_fault *f)
{
    const unsigned char *q = (const unsigned char *)data;
    const struct rl_wire_op_info *info;
    uint64_t size, op, id;
    size_t i = 1;
    char msg[96];

    if (*q >= 0x90 && *q <= 0x9f) {
        size = *q & 0x0fu;
    } else if (*q == 0xdc || *q == 0xdd) {
        size_t w = *q == 0xdc ? 2 : 4;

        size = 0;
        for (; i <= w && i < n; i++) {
            size = size << 8 | q[i];
        }
    } else {
        return wire_fault(f, 0, RL_WIRE_ERR_MALFORMED, false, "request is not an array");
    }
    if (size < 2) {
        return wire_fault(f, 0, RL_WIRE_ERR_MALFORMED, false, "request needs an op and an id");
    }
    /* the op nested (deep 0), or not an integer: the id after it is not read */
    if (deep == 0 || !wire_uint_at(q, n, &i, true, &op) || deep == 1 ||
        !wire_uint_at(q, n, &i, true, &id) || id > UINT32_MAX) {
        return wire_fault(f, 0, RL_WIRE_ERR_MALFORMED, false,
                          "id must be an unsigned 32-bit integer");
    }
    req->id = (uint32_t)id;
    req->op = op <= UINT32_MAX ? (uint32_t)op : 0;
    info = rl_wire_op_info(req->op);
    if (op == 0 || info == NULL || (req->op == RL_WIRE_OP_CLOCK && d->no_clock)) {
        snprintf(msg, sizeof(msg), "unknown op %" PRIu64, op);
        return wire_fault(f, req->id, RL_WIRE_ERR_UNKNOWN_OP, false, msg);
    }
    if (info->req_min == 0) {
        return wire_req_none(NULL, req, f); /* ERROR: as the decoder words it */
    }
    if (size < info->req_min || size > info->req_max) {
        wire_arity_msg(info, msg, sizeof(msg));
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false, msg);
    }
    if (info->router == RL_WIRE_ROUTE_FORWARD && deep < 8) {
        const char *name = wire_keyed_names[deep];

        if (deep == 5) {
            name = req->op == RL_WIRE_OP_ADJUST ? "delta"
                   : req->op == RL_WIRE_OP_RELEASE ? "count"
                                                    : "cost";
        }
        snprintf(msg, sizeof(msg), "%s nests deeper than 32 containers", name);
    } else {
        snprintf(msg, sizeof(msg), "element %ld nests deeper than 32 containers", deep);
    }
    return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false, msg);
}

int
rl_wire_decode_req(struct rl_wire_decoder *d, const char *p, size_t n, struct rl_wire_req *req,
                   struct rl_wire_fault *fault)
{
    msgpack_object obj;
    const msgpack_object *a;
    const struct rl_wire_op_info *info;
    const char *why;
    bool nomem;
    long deep;
    uint64_t v;
    uint32_t size;
    char msg[64];

    memset(req, 0, sizeof(*req));
    why = rl_wire_unpack(d, p, n, &obj, &nomem, &deep);
    if (why != NULL && deep >= 0) {
        return wire_req_deep(d, p, n, deep, req, fault);
    }
    if (why != NULL) {
        /*
         * Out of memory says nothing about the client's bytes: shed the request and keep
         * the connection, which stays in step because the frame was whole.
         */
        if (nomem) {
            return wire_fault(fault, 0, RL_WIRE_ERR_OVERLOADED, false, why);
        }
        return wire_fault(fault, 0, RL_WIRE_ERR_MALFORMED, true, why);
    }
    if (obj.type != MSGPACK_OBJECT_ARRAY) {
        return wire_fault(fault, 0, RL_WIRE_ERR_MALFORMED, false, "request is not an array");
    }
    a = &obj;
    size = a->via.array.size;
    if (size < 2) {
        return wire_fault(fault, 0, RL_WIRE_ERR_MALFORMED, false, "request needs an op and an id");
    }
    if (!wire_uint(&a->via.array.ptr[1], UINT32_MAX, &v)) {
        return wire_fault(fault, 0, RL_WIRE_ERR_MALFORMED, false,
                          "id must be an unsigned 32-bit integer");
    }
    req->id = (uint32_t)v;
    if (!wire_uint(&a->via.array.ptr[0], UINT64_MAX, &v) || v == 0) {
        return wire_fault(fault, req->id, RL_WIRE_ERR_UNKNOWN_OP, false,
                          "op must be a positive integer");
    }
    /* An op past 32 bits is as unknown as 9; req->op keeps 0 for it. */
    req->op = v <= UINT32_MAX ? (uint32_t)v : 0;
    info = rl_wire_op_info(req->op);
    if (info == NULL || (req->op == RL_WIRE_OP_CLOCK && d->no_clock)) {
        snprintf(msg, sizeof(msg), "unknown op %" PRIu64, v);
        return wire_fault(fault, req->id, RL_WIRE_ERR_UNKNOWN_OP, false, msg);
    }
    if (info->req_min != 0 && (size < info->req_min || size > info->req_max)) {
        wire_arity_msg(info, msg, sizeof(msg));
        return wire_fault(fault, req->id, RL_WIRE_ERR_BAD_FIELD, false, msg);
    }
    return wire_req_fns[req->op](a, req, fault);
}
