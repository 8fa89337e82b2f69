/*
 * wire: the v1 codec and framing on msgpack-c. Decoding is two passes: a hand-written scan
 * of the msgpack headers proves the payload is exactly one value whose every length and
 * count fits the bytes present and whose nesting is bounded, and only then msgpack-c builds
 * the object tree in the decoder's zone. The scan is what keeps a hostile 10-byte frame
 * claiming four billion elements from reaching msgpack-c, which would allocate for the claim.
 * Encoding packs straight into the caller's rl_buf. What a request means is not decided here.
 */
#include "wire.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/*
 * At most 32 nested containers: msgpack-c's C unpacker has a fixed stack of
 * MSGPACK_EMBED_STACK_SIZE (32) levels, and no v1 message nests deeper than 2.
 */
#define WIRE_DEPTH_MAX 32

/*
 * The zone's first chunk outlives msgpack_zone_clear, so every frame that fits it decodes
 * without malloc. 16 KiB holds the largest legitimate message, a STATS reply of
 * RL_WIRE_STATS_MAX pairs (256 * 48 bytes of msgpack_object_kv plus its array).
 */
#define WIRE_ZONE_CHUNK (16u * 1024u)

/* Room reserved for an encoded message's fixed part, so packing never reallocates. */
#define WIRE_HINT 64u

const char *
rl_wire_op_name(uint32_t op)
{
    switch (op) {
#define RL_WIRE_NAME(n, v, s)                                                                      \
    case v:                                                                                        \
        return s;
        RL_WIRE_OP_MAP(RL_WIRE_NAME)
#undef RL_WIRE_NAME
    default:
        return "?";
    }
}

const char *
rl_wire_code_name(uint32_t code)
{
    switch (code) {
#define RL_WIRE_NAME(n, v, s)                                                                      \
    case v:                                                                                        \
        return s;
        RL_WIRE_CODE_MAP(RL_WIRE_NAME)
#undef RL_WIRE_NAME
    default:
        return "?";
    }
}

const char *
rl_wire_err_name(uint32_t err)
{
    switch (err) {
#define RL_WIRE_NAME(n, v, s)                                                                      \
    case v:                                                                                        \
        return s;
        RL_WIRE_ERR_MAP(RL_WIRE_NAME)
#undef RL_WIRE_NAME
    default:
        return "?";
    }
}

const char *
rl_wire_ended_name(uint32_t ended)
{
    switch (ended) {
#define RL_WIRE_NAME(n, v, s)                                                                      \
    case v:                                                                                        \
        return s;
        RL_WIRE_ENDED_MAP(RL_WIRE_NAME)
#undef RL_WIRE_NAME
    default:
        return "?";
    }
}

static uint32_t
wire_load_be(const unsigned char *p, size_t n)
{
    uint32_t v = 0;
    size_t i;

    for (i = 0; i < n; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

int
rl_wire_frame(const char *p, size_t n, size_t *payload_len)
{
    uint32_t len;

    if (n < RL_WIRE_HDR_LEN) {
        return 0;
    }
    len = wire_load_be((const unsigned char *)p, RL_WIRE_HDR_LEN);
    if (len == 0 || len > RL_WIRE_FRAME_MAX) {
        return -EPROTO;
    }
    if (n - RL_WIRE_HDR_LEN < len) {
        return 0;
    }
    *payload_len = len;
    return 1;
}

int
rl_wire_decoder_init(struct rl_wire_decoder *d)
{
    return msgpack_zone_init(&d->zone, WIRE_ZONE_CHUNK) ? 0 : -ENOMEM;
}

void
rl_wire_decoder_deinit(struct rl_wire_decoder *d)
{
    msgpack_zone_destroy(&d->zone);
}

/*
 * Returns NULL when p[0..n) is exactly one msgpack value within the bounds above, else a
 * phrase saying why not. Iterative, so its stack use does not depend on the input.
 */
static const char *
wire_scan(const char *data, size_t n)
{
    const unsigned char *p = (const unsigned char *)data;
    const unsigned char *end = p + n;
    uint64_t left[WIRE_DEPTH_MAX]; /* children still due in each open container */
    size_t top = 0;
    /*
     * Values due anywhere and not yet started. Each needs at least one byte, so a count
     * that would push this past the bytes left is a lie, caught at its header.
     */
    uint64_t pending = 1;

    if (n == 0) {
        return "empty payload";
    }
    while (pending > 0) {
        size_t avail = (size_t)(end - p);
        size_t hdr = 1;     /* header bytes, the type byte included */
        size_t lenw = 0;    /* width of a big-endian length or count after the type byte */
        uint64_t body = 0;  /* str, bin or ext bytes after the header */
        uint64_t count = 0; /* children of a container */
        bool container = false;
        bool map = false;
        unsigned char b;

        if (avail == 0) {
            return "truncated value";
        }
        b = *p;
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
            /* fixints, nil and booleans are the type byte alone. */
        } else if (b <= 0x8f) {
            container = map = true;
            count = b & 0x0f;
        } else if (b <= 0x9f) {
            container = true;
            count = b & 0x0f;
        } else if (b <= 0xbf) {
            body = b & 0x1f;
        } else {
            switch (b) {
            case 0xc4: /* bin 8, 16, 32 and str 8, 16, 32 */
            case 0xd9:
                lenw = 1;
                break;
            case 0xc5:
            case 0xda:
                lenw = 2;
                break;
            case 0xc6:
            case 0xdb:
                lenw = 4;
                break;
            case 0xc7: /* ext 8, 16, 32: the length, then a type byte */
                lenw = 1;
                hdr = 2;
                break;
            case 0xc8:
                lenw = 2;
                hdr = 2;
                break;
            case 0xc9:
                lenw = 4;
                hdr = 2;
                break;
            case 0xca: /* float 32, 64 */
                hdr = 5;
                break;
            case 0xcb:
                hdr = 9;
                break;
            case 0xcc: /* uint and int 8, 16, 32, 64 */
            case 0xd0:
                hdr = 2;
                break;
            case 0xcd:
            case 0xd1:
                hdr = 3;
                break;
            case 0xce:
            case 0xd2:
                hdr = 5;
                break;
            case 0xcf:
            case 0xd3:
                hdr = 9;
                break;
            case 0xd4: /* fixext 1, 2, 4, 8, 16: a type byte, then the data */
                hdr = 2;
                body = 1;
                break;
            case 0xd5:
                hdr = 2;
                body = 2;
                break;
            case 0xd6:
                hdr = 2;
                body = 4;
                break;
            case 0xd7:
                hdr = 2;
                body = 8;
                break;
            case 0xd8:
                hdr = 2;
                body = 16;
                break;
            case 0xdc: /* array 16, 32 */
                container = true;
                lenw = 2;
                break;
            case 0xdd:
                container = true;
                lenw = 4;
                break;
            case 0xde: /* map 16, 32 */
                container = map = true;
                lenw = 2;
                break;
            case 0xdf:
                container = map = true;
                lenw = 4;
                break;
            default:
                return "reserved byte 0xc1";
            }
        }
        hdr += lenw;
        if (hdr > avail) {
            return "truncated value";
        }
        if (lenw > 0) {
            uint32_t v = wire_load_be(p + 1, lenw);

            if (container) {
                count = v;
            } else {
                body = v;
            }
        }
        if (map) {
            count *= 2;
        }
        p += hdr;
        avail -= hdr;
        if (body > avail) {
            return "length exceeds the frame";
        }
        p += body;
        avail -= (size_t)body;
        pending--;

        if (container) {
            /* msgpack-c refuses a container, even an empty one, with 32 already open. */
            if (top == WIRE_DEPTH_MAX) {
                return "nested deeper than 32";
            }
            if (count > 0) {
                pending += count;
                if (pending > avail) {
                    return "count exceeds the frame";
                }
                left[top++] = count;
                continue;
            }
        }
        /* A value is complete: so is every container whose last child it was. */
        while (top > 0 && --left[top - 1] == 0) {
            top--;
        }
    }
    if (p != end) {
        return "trailing bytes after the value";
    }
    return NULL;
}

/*
 * Scans, then unpacks into the decoder's zone. Returns NULL with *obj set, or the reason
 * the bytes are not one acceptable value (*nomem set when only memory was short).
 */
static const char *
wire_unpack(struct rl_wire_decoder *d, const char *p, size_t n, msgpack_object *obj, bool *nomem)
{
    const char *why;
    size_t off = 0;
    msgpack_unpack_return rc;

    *nomem = false;
    /*
     * Cleared here rather than after use, so the zone is left as the last frame made it;
     * the tests read that to prove a rejected frame never reached msgpack-c.
     */
    msgpack_zone_clear(&d->zone);
    why = wire_scan(p, n);
    if (why != NULL) {
        return why;
    }
    rc = msgpack_unpack(p, n, &off, &d->zone, obj);
    if (rc == MSGPACK_UNPACK_SUCCESS) {
        return NULL;
    }
    if (rc == MSGPACK_UNPACK_NOMEM_ERROR) {
        *nomem = true;
        return "out of memory";
    }
    /* The scan accepts exactly what msgpack-c accepts; this is a disagreement, not input. */
    return "undecodable";
}

static bool
wire_uint(const msgpack_object *o, uint64_t max, uint64_t *v)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max) {
        return false;
    }
    *v = o->via.u64;
    return true;
}

static bool
wire_str(const msgpack_object *o, uint32_t min, uint32_t max, struct rl_wire_str *s)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size < min || o->via.str.size > max) {
        return false;
    }
    s->ptr = o->via.str.ptr;
    s->len = o->via.str.size;
    return true;
}

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

static int
wire_check_req(const msgpack_object *a, struct rl_wire_req *req, struct rl_wire_fault *f)
{
    uint64_t cost;

    if (a->via.array.size != 6) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false, "CHECK takes 6 elements");
    }
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
    if (!wire_uint(&a->via.array.ptr[5], RL_WIRE_COST_MAX, &cost)) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "cost must be an unsigned integer of 0..1000000");
    }
    req->cost = (uint32_t)cost;
    return 0;
}

/* [7, id, service|nil, since_ms|nil, top|nil]: the trailing ones may be left out. */
static int
wire_throttled_req(const msgpack_object *a, struct rl_wire_req *req, struct rl_wire_fault *f)
{
    uint32_t size = a->via.array.size;
    uint64_t v;

    req->top = RL_WIRE_TOP_DEFAULT;
    if (size > 5) {
        return wire_fault(f, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                          "THROTTLED takes 2..5 elements");
    }
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

int
rl_wire_decode_req(struct rl_wire_decoder *d, const char *p, size_t n, struct rl_wire_req *req,
                   struct rl_wire_fault *fault)
{
    msgpack_object obj;
    const msgpack_object *a;
    const char *why;
    bool nomem;
    uint64_t v;
    char msg[64];

    memset(req, 0, sizeof(*req));
    why = wire_unpack(d, p, n, &obj, &nomem);
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
    if (a->via.array.size < 2) {
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
    switch (req->op) {
    case RL_WIRE_OP_CHECK:
        return wire_check_req(a, req, fault);
    case RL_WIRE_OP_PING:
    case RL_WIRE_OP_STATS:
        if (a->via.array.size != 2) {
            snprintf(msg, sizeof(msg), "%s takes 2 elements",
                     req->op == RL_WIRE_OP_PING ? "PING" : "STATS");
            return wire_fault(fault, req->id, RL_WIRE_ERR_BAD_FIELD, false, msg);
        }
        return 0;
    case RL_WIRE_OP_CLOCK:
        if (a->via.array.size != 3) {
            return wire_fault(fault, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                              "CLOCK takes 3 elements");
        }
        if (!wire_uint(&a->via.array.ptr[2], UINT64_MAX, &req->now_ms)) {
            return wire_fault(fault, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                              "now_ms must be an unsigned integer");
        }
        return 0;
    case RL_WIRE_OP_HELLO:
        if (a->via.array.size != 3) {
            return wire_fault(fault, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                              "HELLO takes 3 elements");
        }
        if (!wire_str(&a->via.array.ptr[2], 1, RL_WIRE_ROLE_MAX, &req->role)) {
            return wire_fault(fault, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                              "role must be a string of 1..32 bytes");
        }
        return 0;
    case RL_WIRE_OP_AUTH:
        if (a->via.array.size != 3) {
            return wire_fault(fault, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                              "AUTH takes 3 elements");
        }
        if (!wire_token(&a->via.array.ptr[2], &req->token)) {
            return wire_fault(fault, req->id, RL_WIRE_ERR_BAD_FIELD, false,
                              "token must be a string or binary of 1..256 bytes");
        }
        return 0;
    case RL_WIRE_OP_THROTTLED:
        return wire_throttled_req(a, req, fault);
    case RL_WIRE_OP_ERROR:
        return wire_fault(fault, req->id, RL_WIRE_ERR_UNKNOWN_OP, false,
                          "op 255 (ERROR) is never a request");
    default:
        snprintf(msg, sizeof(msg), "unknown op %" PRIu64, v);
        return wire_fault(fault, req->id, RL_WIRE_ERR_UNKNOWN_OP, false, msg);
    }
}

/* A v1 client accepts only the reply codes and error codes v1 defines. */
static bool
wire_code_known(uint32_t code)
{
    switch (code) {
#define RL_WIRE_KNOWN(n, v, s) case v:
        RL_WIRE_CODE_MAP(RL_WIRE_KNOWN)
#undef RL_WIRE_KNOWN
        return true;
    default:
        return false;
    }
}

static bool
wire_err_known(uint32_t err)
{
    switch (err) {
#define RL_WIRE_KNOWN(n, v, s) case v:
        RL_WIRE_ERR_MAP(RL_WIRE_KNOWN)
#undef RL_WIRE_KNOWN
        return true;
    default:
        return false;
    }
}

static int
wire_stats_reply(const msgpack_object *m, struct rl_wire_reply *rep)
{
    uint32_t i;

    if (m->type != MSGPACK_OBJECT_MAP || m->via.map.size > RL_WIRE_STATS_MAX) {
        return -EPROTO;
    }
    for (i = 0; i < m->via.map.size; i++) {
        const msgpack_object_kv *kv = &m->via.map.ptr[i];

        if (kv->key.type != MSGPACK_OBJECT_STR) {
            return -EPROTO;
        }
        if (kv->val.type == MSGPACK_OBJECT_POSITIVE_INTEGER && kv->val.via.u64 <= INT64_MAX) {
            rep->stat_vals[i] = (int64_t)kv->val.via.u64;
        } else if (kv->val.type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
            rep->stat_vals[i] = kv->val.via.i64;
        } else {
            return -EPROTO;
        }
        rep->stat_keys[i].ptr = kv->key.via.str.ptr;
        rep->stat_keys[i].len = kv->key.via.str.size;
    }
    rep->nstats = m->via.map.size;
    return 0;
}

static bool
wire_key_is(const msgpack_object *k, const char *name)
{
    size_t n = strlen(name);

    return k->via.str.size == n && memcmp(k->via.str.ptr, name, n) == 0;
}

/* One episode: a map of exactly the 8 keys, each once, in any order. */
static int
wire_episode(const msgpack_object *m, struct rl_wire_episode *ep)
{
    static const char *const keys[8] = {"service", "endpoint", "user",  "start_ms",
                                        "end_ms",  "refused",  "ended", "node"};
    unsigned seen = 0;
    struct rl_wire_str ended = {NULL, 0};

    if (m->type != MSGPACK_OBJECT_MAP || m->via.map.size != 8) {
        return -EPROTO;
    }
    memset(ep, 0, sizeof(*ep));
    for (uint32_t i = 0; i < 8; i++) {
        const msgpack_object *k = &m->via.map.ptr[i].key;
        const msgpack_object *v = &m->via.map.ptr[i].val;
        unsigned which = 8;
        bool ok;

        if (k->type != MSGPACK_OBJECT_STR) {
            return -EPROTO;
        }
        for (unsigned j = 0; j < 8 && which == 8; j++) {
            if (wire_key_is(k, keys[j])) {
                which = j;
            }
        }
        if (which == 8 || (seen & (1u << which)) != 0) {
            return -EPROTO;
        }
        seen |= 1u << which;
        switch (which) {
        case 0:
            ok = wire_str(v, 1, RL_WIRE_SERVICE_MAX, &ep->service);
            break;
        case 1:
            ok = v->type == MSGPACK_OBJECT_NIL ||
                 wire_str(v, 1, RL_WIRE_ENDPOINT_MAX, &ep->endpoint);
            break;
        case 2:
            ok = wire_str(v, 1, RL_WIRE_USER_MAX, &ep->user);
            break;
        case 3:
            ok = wire_uint(v, UINT64_MAX, &ep->start_ms);
            break;
        case 4:
            ok = wire_uint(v, UINT64_MAX, &ep->end_ms);
            break;
        case 5:
            ok = wire_uint(v, UINT64_MAX, &ep->refused);
            break;
        case 6:
            ok = wire_str(v, 1, 16, &ended);
            ep->ended = UINT32_MAX;
#define RL_WIRE_ENDED_IS(n, val, str)                                                              \
    if (ok && ended.len == sizeof(str) - 1 && memcmp(ended.ptr, str, ended.len) == 0) {            \
        ep->ended = val;                                                                           \
    }
            RL_WIRE_ENDED_MAP(RL_WIRE_ENDED_IS)
#undef RL_WIRE_ENDED_IS
            ok = ok && ep->ended != UINT32_MAX;
            break;
        default:
            ok = wire_str(v, 0, RL_WIRE_NODE_MAX, &ep->node);
            break;
        }
        if (!ok) {
            return -EPROTO;
        }
    }
    return 0;
}

static int
wire_throttled_reply(const msgpack_object *e, struct rl_wire_reply *rep)
{
    if (e[2].type != MSGPACK_OBJECT_ARRAY || e[2].via.array.size > RL_WIRE_TOP_MAX ||
        e[3].type != MSGPACK_OBJECT_ARRAY || e[3].via.array.size > RL_WIRE_MISSING_MAX) {
        return -EPROTO;
    }
    for (uint32_t i = 0; i < e[2].via.array.size; i++) {
        if (wire_episode(&e[2].via.array.ptr[i], &rep->episodes[i]) != 0) {
            return -EPROTO;
        }
    }
    for (uint32_t i = 0; i < e[3].via.array.size; i++) {
        if (!wire_str(&e[3].via.array.ptr[i], 0, RL_WIRE_NODE_MAX, &rep->missing[i])) {
            return -EPROTO;
        }
    }
    rep->nepisodes = e[2].via.array.size;
    rep->nmissing = e[3].via.array.size;
    return 0;
}

int
rl_wire_decode_reply(struct rl_wire_decoder *d, const char *p, size_t n, struct rl_wire_reply *rep)
{
    msgpack_object obj;
    const msgpack_object *e;
    uint32_t size;
    bool nomem;
    uint64_t v;

    /* The stat arrays are left as they are: only the first nstats pairs are meaningful. */
    rep->op = 0;
    rep->id = 0;
    memset(&rep->check, 0, sizeof(rep->check));
    rep->name.ptr = NULL;
    rep->name.len = 0;
    rep->now_ms = 0;
    rep->err = 0;
    rep->message.ptr = NULL;
    rep->message.len = 0;
    rep->nstats = 0;
    rep->nepisodes = 0;
    rep->nmissing = 0;
    if (wire_unpack(d, p, n, &obj, &nomem) != NULL) {
        return nomem ? -ENOMEM : -EPROTO;
    }
    if (obj.type != MSGPACK_OBJECT_ARRAY || obj.via.array.size < 2) {
        return -EPROTO;
    }
    e = obj.via.array.ptr;
    size = obj.via.array.size;
    if (!wire_uint(&e[0], UINT32_MAX, &v)) {
        return -EPROTO;
    }
    rep->op = (uint32_t)v;
    if (!wire_uint(&e[1], UINT32_MAX, &v)) {
        return -EPROTO;
    }
    rep->id = (uint32_t)v;
    switch (rep->op) {
    case RL_WIRE_OP_CHECK:
        if (size != 7 || !wire_uint(&e[2], UINT32_MAX, &v) || !wire_code_known((uint32_t)v) ||
            !wire_uint(&e[3], UINT64_MAX, &rep->check.limit) ||
            !wire_uint(&e[4], UINT64_MAX, &rep->check.remaining) ||
            !wire_uint(&e[5], UINT64_MAX, &rep->check.reset_ms) ||
            !wire_uint(&e[6], UINT64_MAX, &rep->check.retry_after_ms)) {
            return -EPROTO;
        }
        rep->check.id = rep->id;
        rep->check.code = (uint32_t)v;
        return 0;
    case RL_WIRE_OP_PING:
    case RL_WIRE_OP_HELLO:
    case RL_WIRE_OP_AUTH:
        if (size != 3 || !wire_str(&e[2], 0, UINT32_MAX, &rep->name)) {
            return -EPROTO;
        }
        return 0;
    case RL_WIRE_OP_STATS:
        if (size != 3) {
            return -EPROTO;
        }
        return wire_stats_reply(&e[2], rep);
    case RL_WIRE_OP_CLOCK:
        if (size != 3 || !wire_uint(&e[2], UINT64_MAX, &rep->now_ms)) {
            return -EPROTO;
        }
        return 0;
    case RL_WIRE_OP_THROTTLED:
        if (size != 4) {
            return -EPROTO;
        }
        return wire_throttled_reply(e, rep);
    case RL_WIRE_OP_ERROR:
        if (size != 4 || !wire_uint(&e[2], UINT32_MAX, &v) || !wire_err_known((uint32_t)v) ||
            !wire_str(&e[3], 0, UINT32_MAX, &rep->message)) {
            return -EPROTO;
        }
        rep->err = (uint32_t)v;
        return 0;
    default:
        return -EPROTO;
    }
}

/*
 * The packer's sink. wire_begin reserved room for the usual message, so the common path is
 * one bounds check and a small memcpy.
 */
static int
wire_write(void *data, const char *p, size_t n)
{
    struct rl_buf *b = data;

    if (b->cap - b->len < n && rl_buf_reserve(b, n) != 0) {
        return -1;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

/* Starts a frame: reserves room and a length prefix that wire_end fills in. */
static int
wire_begin(struct rl_buf *out, size_t hint, msgpack_packer *pk, size_t *start)
{
    if (rl_buf_reserve(out, RL_WIRE_HDR_LEN + hint) != 0) {
        return -ENOMEM;
    }
    *start = out->len;
    out->len += RL_WIRE_HDR_LEN;
    msgpack_packer_init(pk, out, wire_write);
    return 0;
}

/* Ends a frame: on failure (packing failed, or it is too long) out is as it was. */
static int
wire_end(struct rl_buf *out, size_t start, bool packed)
{
    size_t n = out->len - start - RL_WIRE_HDR_LEN;
    unsigned char *h = (unsigned char *)out->data + start;

    if (!packed) {
        out->len = start;
        return -ENOMEM;
    }
    if (n > RL_WIRE_FRAME_MAX) {
        out->len = start;
        return -EMSGSIZE;
    }
    h[0] = (unsigned char)(n >> 24);
    h[1] = (unsigned char)(n >> 16);
    h[2] = (unsigned char)(n >> 8);
    h[3] = (unsigned char)n;
    return 0;
}

/* Packs a string; callers have refused any longer than a frame, so its length fits. */
static bool
wire_pack_str(msgpack_packer *pk, const char *s, size_t n)
{
    return msgpack_pack_str(pk, n) == 0 && msgpack_pack_str_body(pk, s, n) == 0;
}

int
rl_wire_put_check(struct rl_buf *out, const struct rl_wire_req *req)
{
    msgpack_packer pk;
    size_t start;
    size_t hint = WIRE_HINT + (size_t)req->service.len + req->user.len + req->endpoint.len;
    bool ok;

    if ((size_t)req->service.len + req->user.len + req->endpoint.len > RL_WIRE_FRAME_MAX) {
        return -EMSGSIZE;
    }
    if (wire_begin(out, hint, &pk, &start) != 0) {
        return -ENOMEM;
    }
    ok = msgpack_pack_array(&pk, 6) == 0 && msgpack_pack_uint8(&pk, RL_WIRE_OP_CHECK) == 0 &&
         msgpack_pack_uint32(&pk, req->id) == 0 &&
         wire_pack_str(&pk, req->service.ptr, req->service.len) &&
         wire_pack_str(&pk, req->user.ptr, req->user.len) &&
         (req->endpoint.ptr == NULL ? msgpack_pack_nil(&pk) == 0
                                    : wire_pack_str(&pk, req->endpoint.ptr, req->endpoint.len)) &&
         msgpack_pack_uint32(&pk, req->cost) == 0;
    return wire_end(out, start, ok);
}

/* PING and STATS requests are the same shape. */
static int
wire_put_bare(struct rl_buf *out, uint32_t op, uint32_t id)
{
    msgpack_packer pk;
    size_t start;
    bool ok;

    if (wire_begin(out, WIRE_HINT, &pk, &start) != 0) {
        return -ENOMEM;
    }
    ok = msgpack_pack_array(&pk, 2) == 0 && msgpack_pack_uint32(&pk, op) == 0 &&
         msgpack_pack_uint32(&pk, id) == 0;
    return wire_end(out, start, ok);
}

int
rl_wire_put_ping(struct rl_buf *out, uint32_t id)
{
    return wire_put_bare(out, RL_WIRE_OP_PING, id);
}

int
rl_wire_put_stats(struct rl_buf *out, uint32_t id)
{
    return wire_put_bare(out, RL_WIRE_OP_STATS, id);
}

/* A CLOCK request and its reply are the same message. */
int
rl_wire_put_clock(struct rl_buf *out, uint32_t id, uint64_t now_ms)
{
    msgpack_packer pk;
    size_t start;
    bool ok;

    if (wire_begin(out, WIRE_HINT, &pk, &start) != 0) {
        return -ENOMEM;
    }
    ok = msgpack_pack_array(&pk, 3) == 0 && msgpack_pack_uint8(&pk, RL_WIRE_OP_CLOCK) == 0 &&
         msgpack_pack_uint32(&pk, id) == 0 && msgpack_pack_uint64(&pk, now_ms) == 0;
    return wire_end(out, start, ok);
}

int
rl_wire_put_clock_reply(struct rl_buf *out, uint32_t id, uint64_t now_ms)
{
    return rl_wire_put_clock(out, id, now_ms);
}

int
rl_wire_put_check_reply(struct rl_buf *out, const struct rl_wire_check_reply *rep)
{
    msgpack_packer pk;
    size_t start;
    bool ok;

    if (wire_begin(out, WIRE_HINT, &pk, &start) != 0) {
        return -ENOMEM;
    }
    ok = msgpack_pack_array(&pk, 7) == 0 && msgpack_pack_uint8(&pk, RL_WIRE_OP_CHECK) == 0 &&
         msgpack_pack_uint32(&pk, rep->id) == 0 && msgpack_pack_uint32(&pk, rep->code) == 0 &&
         msgpack_pack_uint64(&pk, rep->limit) == 0 &&
         msgpack_pack_uint64(&pk, rep->remaining) == 0 &&
         msgpack_pack_uint64(&pk, rep->reset_ms) == 0 &&
         msgpack_pack_uint64(&pk, rep->retry_after_ms) == 0;
    return wire_end(out, start, ok);
}

/* [op, id, s]: PING and HELLO replies, HELLO requests. */
static int
wire_put_named(struct rl_buf *out, uint32_t op, uint32_t id, const char *name)
{
    msgpack_packer pk;
    size_t start;
    size_t len = strlen(name);
    bool ok;

    if (len > RL_WIRE_FRAME_MAX) {
        return -EMSGSIZE;
    }
    if (wire_begin(out, WIRE_HINT + len, &pk, &start) != 0) {
        return -ENOMEM;
    }
    ok = msgpack_pack_array(&pk, 3) == 0 && msgpack_pack_uint8(&pk, (uint8_t)op) == 0 &&
         msgpack_pack_uint32(&pk, id) == 0 && wire_pack_str(&pk, name, len);
    return wire_end(out, start, ok);
}

int
rl_wire_put_ping_reply(struct rl_buf *out, uint32_t id, const char *name)
{
    return wire_put_named(out, RL_WIRE_OP_PING, id, name);
}

int
rl_wire_put_hello(struct rl_buf *out, uint32_t id, const char *role)
{
    return wire_put_named(out, RL_WIRE_OP_HELLO, id, role);
}

int
rl_wire_put_hello_reply(struct rl_buf *out, uint32_t id, const char *name)
{
    return wire_put_named(out, RL_WIRE_OP_HELLO, id, name);
}

int
rl_wire_put_auth(struct rl_buf *out, uint32_t id, const char *token, size_t len)
{
    msgpack_packer pk;
    size_t start;
    bool ok;

    if (len > RL_WIRE_TOKEN_MAX) {
        return -EMSGSIZE;
    }
    if (wire_begin(out, WIRE_HINT + len, &pk, &start) != 0) {
        return -ENOMEM;
    }
    ok = msgpack_pack_array(&pk, 3) == 0 && msgpack_pack_uint8(&pk, RL_WIRE_OP_AUTH) == 0 &&
         msgpack_pack_uint32(&pk, id) == 0 && wire_pack_str(&pk, token, len);
    return wire_end(out, start, ok);
}

int
rl_wire_put_auth_reply(struct rl_buf *out, uint32_t id, const char *principal)
{
    return wire_put_named(out, RL_WIRE_OP_AUTH, id, principal);
}

int
rl_wire_put_error(struct rl_buf *out, uint32_t id, uint32_t err, const char *msg)
{
    msgpack_packer pk;
    size_t start;
    size_t len = strlen(msg);
    bool ok;

    if (len > RL_WIRE_FRAME_MAX) {
        return -EMSGSIZE;
    }
    if (wire_begin(out, WIRE_HINT + len, &pk, &start) != 0) {
        return -ENOMEM;
    }
    ok = msgpack_pack_array(&pk, 4) == 0 && msgpack_pack_uint8(&pk, RL_WIRE_OP_ERROR) == 0 &&
         msgpack_pack_uint32(&pk, id) == 0 && msgpack_pack_uint32(&pk, err) == 0 &&
         wire_pack_str(&pk, msg, len);
    return wire_end(out, start, ok);
}

int
rl_wire_put_stats_reply(struct rl_buf *out, uint32_t id, const char *const *keys,
                        const int64_t *vals, size_t n)
{
    msgpack_packer pk;
    size_t start;
    size_t i;
    bool ok;

    /* More pairs than our own client keeps would make it drop the whole reply. */
    if (n > RL_WIRE_STATS_MAX) {
        return -EMSGSIZE;
    }
    for (i = 0; i < n; i++) {
        if (strlen(keys[i]) > RL_WIRE_FRAME_MAX) {
            return -EMSGSIZE;
        }
    }
    if (wire_begin(out, WIRE_HINT + n * 32, &pk, &start) != 0) {
        return -ENOMEM;
    }
    ok = msgpack_pack_array(&pk, 3) == 0 && msgpack_pack_uint8(&pk, RL_WIRE_OP_STATS) == 0 &&
         msgpack_pack_uint32(&pk, id) == 0 && msgpack_pack_map(&pk, n) == 0;
    for (i = 0; ok && i < n; i++) {
        ok = wire_pack_str(&pk, keys[i], strlen(keys[i])) && msgpack_pack_int64(&pk, vals[i]) == 0;
    }
    return wire_end(out, start, ok);
}

int
rl_wire_put_throttled(struct rl_buf *out, const struct rl_wire_req *req)
{
    msgpack_packer pk;
    size_t start;
    bool ok;

    if (req->service.ptr != NULL && req->service.len > RL_WIRE_SERVICE_MAX) {
        return -EMSGSIZE;
    }
    if (wire_begin(out, WIRE_HINT + (size_t)req->service.len, &pk, &start) != 0) {
        return -ENOMEM;
    }
    ok = msgpack_pack_array(&pk, 5) == 0 && msgpack_pack_uint8(&pk, RL_WIRE_OP_THROTTLED) == 0 &&
         msgpack_pack_uint32(&pk, req->id) == 0 &&
         (req->service.ptr == NULL ? msgpack_pack_nil(&pk) == 0
                                   : wire_pack_str(&pk, req->service.ptr, req->service.len)) &&
         (!req->has_since ? msgpack_pack_nil(&pk) == 0
                          : msgpack_pack_uint64(&pk, req->since_ms) == 0) &&
         (req->top == 0 ? msgpack_pack_nil(&pk) == 0 : msgpack_pack_uint32(&pk, req->top) == 0);
    return wire_end(out, start, ok);
}

/* Upper bounds of what msgpack takes for a str of n bytes and for any unsigned integer. */
static size_t
wire_str_size(size_t n)
{
    return n + (n < 32 ? 1 : n < 256 ? 2 : n < 65536 ? 3 : 5);
}

#define WIRE_UINT_SIZE 9u

/* The 8 keys of an episode map: "service" ... "node", each a fixstr. */
#define WIRE_EPISODE_KEYS (8u + 9u + 5u + 9u + 7u + 8u + 6u + 5u)

static size_t
wire_episode_size(const struct rl_wire_episode *ep)
{
    return 1 + WIRE_EPISODE_KEYS + wire_str_size(ep->service.len) +
           (ep->endpoint.ptr == NULL ? 1 : wire_str_size(ep->endpoint.len)) +
           wire_str_size(ep->user.len) + wire_str_size(ep->node.len) + 3 * WIRE_UINT_SIZE +
           wire_str_size(7);
}

static bool
wire_pack_episode(msgpack_packer *pk, const struct rl_wire_episode *ep)
{
    const char *ended = rl_wire_ended_name(ep->ended);

    return msgpack_pack_map(pk, 8) == 0 && wire_pack_str(pk, "service", 7) &&
           wire_pack_str(pk, ep->service.ptr, ep->service.len) &&
           wire_pack_str(pk, "endpoint", 8) &&
           (ep->endpoint.ptr == NULL ? msgpack_pack_nil(pk) == 0
                                     : wire_pack_str(pk, ep->endpoint.ptr, ep->endpoint.len)) &&
           wire_pack_str(pk, "user", 4) && wire_pack_str(pk, ep->user.ptr, ep->user.len) &&
           wire_pack_str(pk, "start_ms", 8) && msgpack_pack_uint64(pk, ep->start_ms) == 0 &&
           wire_pack_str(pk, "end_ms", 6) && msgpack_pack_uint64(pk, ep->end_ms) == 0 &&
           wire_pack_str(pk, "refused", 7) && msgpack_pack_uint64(pk, ep->refused) == 0 &&
           wire_pack_str(pk, "ended", 5) && wire_pack_str(pk, ended, strlen(ended)) &&
           wire_pack_str(pk, "node", 4) && wire_pack_str(pk, ep->node.ptr, ep->node.len);
}

int
rl_wire_put_throttled_reply(struct rl_buf *out, uint32_t id, const struct rl_wire_episode *eps,
                            size_t n, const struct rl_wire_str *missing, size_t nmissing,
                            size_t *nput)
{
    msgpack_packer pk;
    size_t start, i, fit = 0;
    /* [7, id, array16, array16]: the outer header, op, a uint32 id, two array headers */
    size_t total = 1 + 1 + 5 + 3 + 3;
    bool ok;
    int rc;

    if (nput != NULL) {
        *nput = 0;
    }
    if (nmissing > RL_WIRE_MISSING_MAX) {
        nmissing = RL_WIRE_MISSING_MAX;
    }
    if (n > RL_WIRE_TOP_MAX) {
        n = RL_WIRE_TOP_MAX;
    }
    for (i = 0; i < nmissing; i++) {
        if (missing[i].len > RL_WIRE_NODE_MAX) {
            return -EMSGSIZE;
        }
        total += wire_str_size(missing[i].len);
    }
    for (i = 0; i < n; i++) {
        const struct rl_wire_episode *ep = &eps[i];

        if (ep->service.len == 0 || ep->service.len > RL_WIRE_SERVICE_MAX ||
            ep->user.len == 0 || ep->user.len > RL_WIRE_USER_MAX ||
            ep->node.len > RL_WIRE_NODE_MAX ||
            (ep->endpoint.ptr != NULL &&
             (ep->endpoint.len == 0 || ep->endpoint.len > RL_WIRE_ENDPOINT_MAX)) ||
            ep->ended > RL_WIRE_ENDED_IDLE) {
            return -EMSGSIZE;
        }
    }
    for (fit = 0; fit < n && total + wire_episode_size(&eps[fit]) <= RL_WIRE_FRAME_MAX; fit++) {
        total += wire_episode_size(&eps[fit]);
    }
    if (wire_begin(out, total, &pk, &start) != 0) {
        return -ENOMEM;
    }
    ok = msgpack_pack_array(&pk, 4) == 0 && msgpack_pack_uint8(&pk, RL_WIRE_OP_THROTTLED) == 0 &&
         msgpack_pack_uint32(&pk, id) == 0 && msgpack_pack_array(&pk, fit) == 0;
    for (i = 0; ok && i < fit; i++) {
        ok = wire_pack_episode(&pk, &eps[i]);
    }
    ok = ok && msgpack_pack_array(&pk, nmissing) == 0;
    for (i = 0; ok && i < nmissing; i++) {
        ok = wire_pack_str(&pk, missing[i].ptr, missing[i].len);
    }
    rc = wire_end(out, start, ok);
    if (rc != 0) {
        return rc;
    }
    if (nput != NULL) {
        *nput = fit;
    }
    return 0;
}
