/*
 * wire_put: the encoders. Each packs one whole frame, length prefix included, straight into
 * the caller's rl_buf in msgpack's shortest formats, so a message's bytes are fixed by its
 * values; a frame that fails or would pass RL_WIRE_FRAME_MAX leaves the buffer as it was.
 */
#include "wire.h"

#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "ruleset.h"
#include "wire_int.h"

/* Room reserved for an encoded message's fixed part, so packing never reallocates. */
#define WIRE_HINT 64u

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

/* An algorithm's cluster.conf name (ruleset.h's map; "?" out of range, which the decoder
 * refuses: tests send it). */
static const char *
wire_algo_name(uint8_t a)
{
    static const char *const names[] = {
#define WIRE_ALGO_NAME(n, s, b) s,
        RL_ALGO_MAP(WIRE_ALGO_NAME)
#undef WIRE_ALGO_NAME
    };

    return a < sizeof(names) / sizeof(names[0]) ? names[a] : "?";
}

/* CHECK, ADJUST and RELEASE: the same shape, element 5 the cost, the signed delta or the
 * count (req->cost). */
static int
wire_put_keyed(struct rl_buf *out, uint8_t op, const struct rl_wire_req *req)
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
    /* The tenant goes only with a limit, so a CHECK without one is as every node reads it. */
    ok = msgpack_pack_array(&pk, !req->limit.set ? 6 : req->tenant != 0 ? 8 : 7) == 0 &&
         msgpack_pack_uint8(&pk, op) == 0 && msgpack_pack_uint32(&pk, req->id) == 0 &&
         wire_pack_str(&pk, req->service.ptr, req->service.len) &&
         wire_pack_str(&pk, req->user.ptr, req->user.len) &&
         (req->endpoint.ptr == NULL ? msgpack_pack_nil(&pk) == 0
                                    : wire_pack_str(&pk, req->endpoint.ptr, req->endpoint.len)) &&
         (op != RL_WIRE_OP_ADJUST ? msgpack_pack_uint32(&pk, req->cost) == 0
                                  : msgpack_pack_int32(&pk, req->delta) == 0);
    if (ok && req->limit.set) {
        const char *name = wire_algo_name(req->limit.algo);

        ok = msgpack_pack_array(&pk, 4) == 0 && wire_pack_str(&pk, name, strlen(name)) &&
             msgpack_pack_uint32(&pk, req->limit.limit) == 0 &&
             msgpack_pack_uint64(&pk, req->limit.window_ms) == 0 &&
             (req->limit.has_burst ? msgpack_pack_uint32(&pk, req->limit.burst) == 0
                                   : msgpack_pack_nil(&pk) == 0);
        if (ok && req->tenant != 0) {
            ok = msgpack_pack_uint32(&pk, req->tenant) == 0;
        }
    }
    return wire_end(out, start, ok);
}

int
rl_wire_put_check(struct rl_buf *out, const struct rl_wire_req *req)
{
    return wire_put_keyed(out, RL_WIRE_OP_CHECK, req);
}

int
rl_wire_put_adjust(struct rl_buf *out, const struct rl_wire_req *req)
{
    return wire_put_keyed(out, RL_WIRE_OP_ADJUST, req);
}

int
rl_wire_put_release(struct rl_buf *out, const struct rl_wire_req *req)
{
    return wire_put_keyed(out, RL_WIRE_OP_RELEASE, req);
}

int
rl_wire_put_tenant_probe(struct rl_buf *out)
{
    msgpack_packer pk;
    size_t start;
    bool ok;

    if (wire_begin(out, 16, &pk, &start) != 0) {
        return -ENOMEM;
    }
    /* [1, 0, "", "p", nil, 0, nil, 0]: the arity is judged before the (empty) service */
    ok = msgpack_pack_array(&pk, 8) == 0 && msgpack_pack_uint8(&pk, RL_WIRE_OP_CHECK) == 0 &&
         msgpack_pack_uint8(&pk, 0) == 0 && wire_pack_str(&pk, "", 0) &&
         wire_pack_str(&pk, "p", 1) && msgpack_pack_nil(&pk) == 0 &&
         msgpack_pack_uint8(&pk, 0) == 0 && msgpack_pack_nil(&pk) == 0 &&
         msgpack_pack_uint8(&pk, 0) == 0;
    return wire_end(out, start, ok);
}

bool
rl_wire_tenant_taken(const struct rl_wire_reply *rep)
{
    static const char old[] = "CHECK takes 6..7 elements";

    return !(rep->op == RL_WIRE_OP_ERROR && rep->message.ptr != NULL &&
             rep->message.len == sizeof(old) - 1 &&
             memcmp(rep->message.ptr, old, sizeof(old) - 1) == 0);
}

uint32_t
rl_wire_tenant(const char *name, const uint8_t *addr)
{
    static const uint8_t none[16];
    uint64_t h;

    if (name != NULL) {
        h = XXH3_64bits_withSeed(name, strlen(name), 0x746e6e74u /* "tnnt" */);
    } else {
        h = XXH3_64bits_withSeed(addr != NULL ? addr : none, 16, 0x61646472u /* "addr" */);
    }
    h ^= h >> 32;
    return (uint32_t)h != 0 ? (uint32_t)h : 1;
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

static int
wire_put_check_shaped(struct rl_buf *out, uint8_t op, const struct rl_wire_check_reply *rep)
{
    msgpack_packer pk;
    size_t start;
    bool ok;

    if (wire_begin(out, WIRE_HINT, &pk, &start) != 0) {
        return -ENOMEM;
    }
    ok = msgpack_pack_array(&pk, 7) == 0 && msgpack_pack_uint8(&pk, op) == 0 &&
         msgpack_pack_uint32(&pk, rep->id) == 0 && msgpack_pack_uint32(&pk, rep->code) == 0 &&
         msgpack_pack_uint64(&pk, rep->limit) == 0 &&
         msgpack_pack_uint64(&pk, rep->remaining) == 0 &&
         msgpack_pack_uint64(&pk, rep->reset_ms) == 0 &&
         msgpack_pack_uint64(&pk, rep->retry_after_ms) == 0;
    return wire_end(out, start, ok);
}

int
rl_wire_put_check_reply(struct rl_buf *out, const struct rl_wire_check_reply *rep)
{
    return wire_put_check_shaped(out, RL_WIRE_OP_CHECK, rep);
}

int
rl_wire_put_adjust_reply(struct rl_buf *out, const struct rl_wire_check_reply *rep)
{
    return wire_put_check_shaped(out, RL_WIRE_OP_ADJUST, rep);
}

int
rl_wire_put_release_reply(struct rl_buf *out, const struct rl_wire_check_reply *rep)
{
    return wire_put_check_shaped(out, RL_WIRE_OP_RELEASE, rep);
}

/* [op, id, s]: PING, HELLO and AUTH replies, HELLO and AUTH requests. */
static int
wire_put_str(struct rl_buf *out, uint32_t op, uint32_t id, const char *name, size_t len)
{
    msgpack_packer pk;
    size_t start;
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

static int
wire_put_named(struct rl_buf *out, uint32_t op, uint32_t id, const char *name)
{
    return wire_put_str(out, op, id, name, strlen(name));
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
    if (len > RL_WIRE_TOKEN_MAX) {
        return -EMSGSIZE;
    }
    return wire_put_str(out, RL_WIRE_OP_AUTH, id, token, len);
}

int
rl_wire_put_auth_reply(struct rl_buf *out, uint32_t id, const char *principal)
{
    return wire_put_named(out, RL_WIRE_OP_AUTH, id, principal);
}

int
rl_wire_put_moving(struct rl_buf *out, uint32_t id, const char *msg, const char *owner)
{
    msgpack_packer pk;
    size_t start;
    size_t len = strlen(msg);
    size_t olen = strlen(owner);
    bool ok;

    if (len + olen > RL_WIRE_FRAME_MAX - 32) {
        return -EMSGSIZE;
    }
    if (wire_begin(out, WIRE_HINT + len + olen, &pk, &start) != 0) {
        return -ENOMEM;
    }
    ok = msgpack_pack_array(&pk, 5) == 0 && msgpack_pack_uint8(&pk, RL_WIRE_OP_ERROR) == 0 &&
         msgpack_pack_uint32(&pk, id) == 0 && msgpack_pack_uint32(&pk, RL_WIRE_ERR_MOVING) == 0 &&
         wire_pack_str(&pk, msg, len) && wire_pack_str(&pk, owner, olen);
    return wire_end(out, start, ok);
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

int
rl_wire_put_hot(struct rl_buf *out, const struct rl_wire_req *req)
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
    ok = msgpack_pack_array(&pk, 4) == 0 && msgpack_pack_uint8(&pk, RL_WIRE_OP_HOT) == 0 &&
         msgpack_pack_uint32(&pk, req->id) == 0 &&
         (req->service.ptr == NULL ? msgpack_pack_nil(&pk) == 0
                                   : wire_pack_str(&pk, req->service.ptr, req->service.len)) &&
         (req->top == 0 ? msgpack_pack_nil(&pk) == 0 : msgpack_pack_uint32(&pk, req->top) == 0);
    return wire_end(out, start, ok);
}

int
rl_wire_put_hot_reply(struct rl_buf *out, uint32_t id, uint64_t period_ms,
                      const struct rl_wire_hot_key *keys, size_t n)
{
    msgpack_packer pk;
    size_t start, i, total = 1 + 1 + 5 + WIRE_UINT_SIZE + 3;
    bool ok;

    if (n > RL_WIRE_TOP_MAX) {
        return -EMSGSIZE;
    }
    for (i = 0; i < n; i++) {
        if (keys[i].service.len == 0 || keys[i].service.len > RL_WIRE_SERVICE_MAX ||
            keys[i].user.len == 0 || keys[i].user.len > RL_WIRE_USER_MAX) {
            return -EMSGSIZE;
        }
        total += 1 + wire_str_size(keys[i].service.len) + wire_str_size(keys[i].user.len) +
                 2 * WIRE_UINT_SIZE;
    }
    if (total > RL_WIRE_FRAME_MAX) {
        return -EMSGSIZE;
    }
    if (wire_begin(out, total, &pk, &start) != 0) {
        return -ENOMEM;
    }
    ok = msgpack_pack_array(&pk, 4) == 0 && msgpack_pack_uint8(&pk, RL_WIRE_OP_HOT) == 0 &&
         msgpack_pack_uint32(&pk, id) == 0 && msgpack_pack_uint64(&pk, period_ms) == 0 &&
         msgpack_pack_array(&pk, n) == 0;
    for (i = 0; ok && i < n; i++) {
        ok = msgpack_pack_array(&pk, 4) == 0 &&
             wire_pack_str(&pk, keys[i].service.ptr, keys[i].service.len) &&
             wire_pack_str(&pk, keys[i].user.ptr, keys[i].user.len) &&
             msgpack_pack_uint64(&pk, keys[i].count) == 0 &&
             msgpack_pack_uint64(&pk, keys[i].err) == 0;
    }
    return wire_end(out, start, ok);
}

/* [op, id, uint, records(, final(, from))]: HANDOFF_IN and HANDOFF_OUT's reply. final: 0
 * none, 1 false, 2 true (HANDOFF_IN's 5th element); from: its 6th, or NULL. */
static int
wire_put_records(struct rl_buf *out, uint32_t op, uint32_t id, uint64_t v, const void *records,
                 size_t len, bool records_last, int final, const char *from)
{
    msgpack_packer pk;
    size_t start;
    bool ok;

    /* no records may come as NULL: the packer's memcpy must never see it */
    const void *body = records != NULL ? records : (const void *)"";

    if (len > RL_WIRE_RECORDS_MAX || (from != NULL && strlen(from) > 63)) {
        return -EMSGSIZE;
    }
    if (wire_begin(out, WIRE_HINT + len + 64, &pk, &start) != 0) {
        return -ENOMEM;
    }
    ok = msgpack_pack_array(&pk, final == 0 ? 4 : from != NULL ? 6 : 5) == 0 &&
         msgpack_pack_uint8(&pk, (uint8_t)op) == 0 && msgpack_pack_uint32(&pk, id) == 0;
    if (records_last) {
        ok = ok && msgpack_pack_uint64(&pk, v) == 0 && msgpack_pack_bin(&pk, len) == 0 &&
             msgpack_pack_bin_body(&pk, body, len) == 0;
        if (final != 0) {
            ok = ok && (final == 2 ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk)) == 0;
            if (from != NULL) {
                ok = ok && wire_pack_str(&pk, from, strlen(from));
            }
        }
    } else {
        ok = ok && msgpack_pack_bin(&pk, len) == 0 &&
             msgpack_pack_bin_body(&pk, body, len) == 0 && msgpack_pack_uint64(&pk, v) == 0;
    }
    return wire_end(out, start, ok);
}

/* [op, id, a, b]: two unsigned integers (HANDOFF_OUT, HANDOFF_IN's reply). */
static int
wire_put_two(struct rl_buf *out, uint32_t op, uint32_t id, uint64_t a, uint64_t b)
{
    msgpack_packer pk;
    size_t start;
    bool ok;

    if (wire_begin(out, WIRE_HINT, &pk, &start) != 0) {
        return -ENOMEM;
    }
    ok = msgpack_pack_array(&pk, 4) == 0 && msgpack_pack_uint8(&pk, (uint8_t)op) == 0 &&
         msgpack_pack_uint32(&pk, id) == 0 && msgpack_pack_uint64(&pk, a) == 0 &&
         msgpack_pack_uint64(&pk, b) == 0;
    return wire_end(out, start, ok);
}

int
rl_wire_put_handoff_out(struct rl_buf *out, uint32_t id, uint32_t shard, uint64_t offset)
{
    return wire_put_two(out, RL_WIRE_OP_HANDOFF_OUT, id, shard, offset);
}

int
rl_wire_put_handoff_out_reply(struct rl_buf *out, uint32_t id, const void *records, size_t len,
                              uint64_t next)
{
    return wire_put_records(out, RL_WIRE_OP_HANDOFF_OUT, id, next, records, len, false, 0, NULL);
}

int
rl_wire_put_handoff_in(struct rl_buf *out, uint32_t id, uint32_t shard, const void *records,
                       size_t len)
{
    return wire_put_records(out, RL_WIRE_OP_HANDOFF_IN, id, shard, records, len, true, 0, NULL);
}

int
rl_wire_put_handoff_in_final(struct rl_buf *out, uint32_t id, uint32_t shard, const void *records,
                             size_t len, bool final, const char *from)
{
    return wire_put_records(out, RL_WIRE_OP_HANDOFF_IN, id, shard, records, len, true,
                            final ? 2 : 1, from);
}

int
rl_wire_put_handoff_in_reply(struct rl_buf *out, uint32_t id, uint64_t imported, uint64_t skipped)
{
    return wire_put_two(out, RL_WIRE_OP_HANDOFF_IN, id, imported, skipped);
}

/*
 * The request shapes of the op table's req column, as encoders of a whole rl_wire_req: each
 * is the op's own rl_wire_put_* (the shape none: the op is never a request).
 */
typedef int (*wire_put_req_fn)(struct rl_buf *out, const struct rl_wire_req *req);

static int
wire_put_req_check(struct rl_buf *out, const struct rl_wire_req *req)
{
    return rl_wire_put_check(out, req);
}

static int
wire_put_req_adjust(struct rl_buf *out, const struct rl_wire_req *req)
{
    return rl_wire_put_adjust(out, req);
}

static int
wire_put_req_release(struct rl_buf *out, const struct rl_wire_req *req)
{
    return rl_wire_put_release(out, req);
}

static int
wire_put_req_bare(struct rl_buf *out, const struct rl_wire_req *req)
{
    return wire_put_bare(out, req->op, req->id);
}

static int
wire_put_req_clock(struct rl_buf *out, const struct rl_wire_req *req)
{
    return rl_wire_put_clock(out, req->id, req->now_ms);
}

static int
wire_put_req_hello(struct rl_buf *out, const struct rl_wire_req *req)
{
    return wire_put_str(out, RL_WIRE_OP_HELLO, req->id, req->role.ptr, req->role.len);
}

static int
wire_put_req_auth(struct rl_buf *out, const struct rl_wire_req *req)
{
    return rl_wire_put_auth(out, req->id, req->token.ptr, req->token.len);
}

static int
wire_put_req_throttled(struct rl_buf *out, const struct rl_wire_req *req)
{
    return rl_wire_put_throttled(out, req);
}

static int
wire_put_req_hot(struct rl_buf *out, const struct rl_wire_req *req)
{
    return rl_wire_put_hot(out, req);
}

static int
wire_put_req_handoff_out(struct rl_buf *out, const struct rl_wire_req *req)
{
    return rl_wire_put_handoff_out(out, req->id, req->shard, req->offset);
}

static int
wire_put_req_handoff_in(struct rl_buf *out, const struct rl_wire_req *req)
{
    if (req->final) {
        char from[64];

        if (req->from.ptr != NULL) {
            snprintf(from, sizeof(from), "%.*s", (int)(req->from.len < 63 ? req->from.len : 63),
                     req->from.ptr);
        }
        return rl_wire_put_handoff_in_final(out, req->id, req->shard, req->records.ptr,
                                            req->records.len, true,
                                            req->from.ptr != NULL ? from : NULL);
    }
    return rl_wire_put_handoff_in(out, req->id, req->shard, req->records.ptr, req->records.len);
}

static int
wire_put_req_none(struct rl_buf *out, const struct rl_wire_req *req)
{
    (void)out;
    (void)req;
    return -EINVAL;
}

static const wire_put_req_fn wire_put_req_fns[256] = {RL_WIRE_OP_BY(req, wire_put_req_)};

int
rl_wire_put_req(struct rl_buf *out, const struct rl_wire_req *req)
{
    if (rl_wire_op_info(req->op) == NULL) {
        return -EINVAL;
    }
    return wire_put_req_fns[req->op](out, req);
}
