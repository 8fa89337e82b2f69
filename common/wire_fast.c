/*
 * wire_fast: CHECK requests and replies read straight from their bytes, and the spliced
 * encoder that relays them under another id (wire_fast.h). Every read is bounded by the
 * payload's length; any byte the readers do not expect sends the payload to the full
 * decoders, which stay the judges of what is malformed.
 */
#include "wire_fast.h"
#include "wire_int.h"

#include <errno.h>
#include <string.h>

#include "ruleset.h"

/* A str of min..max bytes in a fixstr, str 8 or str 16 format at p[*i], advancing *i. */
static inline bool
fast_str(const unsigned char *p, size_t n, size_t *i, uint32_t min, uint32_t max,
         struct rl_wire_str *s)
{
    size_t at = *i;
    size_t hdr, len;
    unsigned char b;

    if (at >= n) {
        return false;
    }
    b = p[at];
    if (b >= 0xa0 && b <= 0xbf) {
        hdr = 1;
        len = b & 0x1f;
    } else if (b == 0xd9 && n - at >= 2) {
        hdr = 2;
        len = p[at + 1];
    } else if (b == 0xda && n - at >= 3) {
        hdr = 3;
        len = ((size_t)p[at + 1] << 8) | p[at + 2];
    } else {
        return false;
    }
    if (len < min || len > max || n - at - hdr < len) {
        return false;
    }
    s->ptr = (const char *)p + at + hdr;
    s->len = (uint32_t)len;
    *i = at + hdr + len;
    return true;
}

/* A signed integer of -2^63..2^32-1 in any format but uint 64 (fixints, uint 8..32, int 8..64)
 * at p[*i], advancing *i. False for every other format and for a value cut by the end. */
static inline bool
fast_int(const unsigned char *p, size_t n, size_t *i, int64_t *v)
{
    size_t at = *i;
    size_t w;
    uint64_t x;
    unsigned char b;

    if (at >= n) {
        return false;
    }
    b = p[at];
    if (b >= 0xe0) {
        *v = (int64_t)(int8_t)b; /* negative fixint */
        *i = at + 1;
        return true;
    }
    if (b < 0xd0 || b > 0xd3) {
        if (!wire_uint_at(p, n, i, false, &x)) {
            return false;
        }
        *v = (int64_t)x;
        return true;
    }
    w = (size_t)1 << (b - 0xd0); /* int 8, 16, 32, 64 */
    if (n - at - 1 < w) {
        return false;
    }
    x = (p[at + 1] & 0x80) ? UINT64_MAX : 0; /* sign-extended */
    for (size_t k = 1; k <= w; k++) {
        x = (x << 8) | p[at + k];
    }
    *v = (int64_t)x;
    *i = at + 1 + w;
    return true;
}

/* Elements 6 and 7 of a keyed request of elems elements (7 or 8; 6: none) at p[*i],
 * advancing *i: the inline limit, nil or [algorithm, limit, window_ms, burst|nil], and the
 * tenant, nil or an unsigned integer, with wire_req.c's bounds (any value it refuses, or a
 * format not read here, is false: the full decoder judges). */
static inline bool
fast_tail(const unsigned char *p, size_t n, size_t *i, unsigned elems, struct rl_wire_req *req)
{
    static const struct {
        const char *name;
        uint32_t len;
        bool burst;
    } algos[] = {
#define FAST_ALGO_ROW(e, s, b) {s, sizeof(s) - 1, b},
        RL_ALGO_MAP(FAST_ALGO_ROW)
#undef FAST_ALGO_ROW
    };
    struct rl_wire_limit *lim = &req->limit;
    struct rl_wire_str name;
    uint64_t v;
    size_t a;

    if (elems >= 7 && *i < n && p[*i] == 0xc0) {
        (*i)++;
    } else if (elems >= 7) {
        if (*i >= n || p[*i] != 0x94) {
            return false;
        }
        (*i)++;
        if (!fast_str(p, n, i, 1, 64, &name)) {
            return false;
        }
        for (a = 0; a < sizeof(algos) / sizeof(algos[0]); a++) {
            if (algos[a].len == name.len && memcmp(algos[a].name, name.ptr, name.len) == 0) {
                break;
            }
        }
        if (a == sizeof(algos) / sizeof(algos[0]) || !wire_uint_at(p, n, i, true, &v) || v == 0 ||
            v > rl_algo_limit_max((enum rl_algo)a)) {
            return false;
        }
        lim->algo = (uint8_t)a;
        lim->limit = (uint32_t)v;
        if (!wire_uint_at(p, n, i, true, &v) || v == 0 || v > rl_algo_window_max((enum rl_algo)a)) {
            return false;
        }
        lim->window_ms = v;
        lim->burst = lim->limit;
        if (*i < n && p[*i] == 0xc0) {
            (*i)++;
        } else if (!algos[a].burst || !wire_uint_at(p, n, i, true, &v) || v == 0 ||
                   v > RL_CONF_LIMIT_MAX) {
            return false;
        } else {
            lim->burst = (uint32_t)v;
            lim->has_burst = true;
        }
        lim->set = true;
    }
    if (elems >= 8 && *i < n && p[*i] == 0xc0) {
        (*i)++;
    } else if (elems >= 8) {
        if (!wire_uint_at(p, n, i, true, &v) || v > UINT32_MAX) {
            return false;
        }
        req->tenant = (uint32_t)v;
    }
    return true;
}

/* A CHECK, or with settle an ADJUST or a RELEASE too, in six elements, or with all up to
 * eight (an inline limit and a tenant): rl_wire_fast_check, rl_wire_fast_keyed,
 * rl_wire_fast_keyed_all. */
static inline int
fast_keyed(const char *data, size_t n, struct rl_wire_req *req, size_t *tail, bool settle,
           bool all)
{
    const unsigned char *p = (const unsigned char *)data;
    size_t i = 2, at;
    uint64_t v;
    int64_t d;
    unsigned elems;

    if (n < 2 ||
        (p[0] != RL_WIRE_CHECK_HDR && (!all || (p[0] != 0x97 && p[0] != 0x98))) ||
        (p[1] != RL_WIRE_OP_CHECK &&
         (!settle || (p[1] != RL_WIRE_OP_ADJUST && p[1] != RL_WIRE_OP_RELEASE)))) {
        return -1;
    }
    elems = p[0] & 0x0fu;
    memset(req, 0, sizeof(*req));
    req->op = p[1];
    if (!wire_uint_at(p, n, &i, false, &v)) {
        return -1;
    }
    req->id = (uint32_t)v;
    at = i;
    if (!fast_str(p, n, &i, 1, RL_WIRE_SERVICE_MAX, &req->service) ||
        !fast_str(p, n, &i, 1, RL_WIRE_USER_MAX, &req->user)) {
        return -1;
    }
    if (i < n && p[i] == 0xc0) {
        i++;
    } else if (!fast_str(p, n, &i, 0, RL_WIRE_ENDPOINT_MAX, &req->endpoint)) {
        return -1;
    }
    if (req->op == RL_WIRE_OP_ADJUST) {
        if (!fast_int(p, n, &i, &d) || d < -RL_WIRE_DELTA_MAX || d > RL_WIRE_DELTA_MAX) {
            return -1;
        }
        req->delta = (int32_t)d;
    } else if (req->op == RL_WIRE_OP_RELEASE) {
        if (!wire_uint_at(p, n, &i, false, &v) || v == 0 || v > RL_WIRE_COUNT_MAX) {
            return -1;
        }
        req->cost = (uint32_t)v;
    } else {
        if (!wire_uint_at(p, n, &i, false, &v) || v > RL_WIRE_COST_MAX) {
            return -1;
        }
        req->cost = (uint32_t)v;
    }
    if (!fast_tail(p, n, &i, elems, req) || i != n) {
        return -1;
    }
    *tail = at;
    return 0;
}

int
rl_wire_fast_check(const char *data, size_t n, struct rl_wire_req *req, size_t *tail)
{
    return fast_keyed(data, n, req, tail, false, false);
}

int
rl_wire_fast_keyed(const char *data, size_t n, struct rl_wire_req *req, size_t *tail)
{
    return fast_keyed(data, n, req, tail, true, false);
}

int
rl_wire_fast_keyed_all(const char *data, size_t n, struct rl_wire_req *req, size_t *tail)
{
    return fast_keyed(data, n, req, tail, true, true);
}

/* A CHECK reply, or with settle an ADJUST's or a RELEASE's too (the same shape). */
static inline int
fast_keyed_reply(const char *data, size_t n, struct rl_wire_reply *rep, size_t *tail, bool settle)
{
    const unsigned char *p = (const unsigned char *)data;
    size_t i = 2, at;
    uint64_t id, code;

    if (n < 2 || p[0] != RL_WIRE_CHECK_REPLY_HDR ||
        (p[1] != RL_WIRE_OP_CHECK &&
         (!settle || (p[1] != RL_WIRE_OP_ADJUST && p[1] != RL_WIRE_OP_RELEASE)))) {
        return -1;
    }
    if (!wire_uint_at(p, n, &i, false, &id)) {
        return -1;
    }
    at = i;
    /* The codes v1 defines are 0..5 (RL_WIRE_CODE_MAP): each is one positive fixint. */
    if (i >= n || p[i] >= RL_WIRE_CODE_COUNT) {
        return -1;
    }
    code = p[i++];
    if (!wire_uint_at(p, n, &i, true, &rep->check.limit) ||
        !wire_uint_at(p, n, &i, true, &rep->check.remaining) ||
        !wire_uint_at(p, n, &i, true, &rep->check.reset_ms) ||
        !wire_uint_at(p, n, &i, true, &rep->check.retry_after_ms) || i != n) {
        return -1;
    }
    rep->op = p[1];
    rep->id = (uint32_t)id;
    rep->check.id = (uint32_t)id;
    rep->check.code = (uint32_t)code;
    rep->name.ptr = NULL;
    rep->name.len = 0;
    rep->now_ms = 0;
    rep->err = 0;
    rep->message.ptr = NULL;
    rep->message.len = 0;
    rep->owner.ptr = NULL;
    rep->owner.len = 0;
    rep->nstats = 0;
    rep->nepisodes = 0;
    rep->nmissing = 0;
    *tail = at;
    return 0;
}

int
rl_wire_fast_check_reply(const char *data, size_t n, struct rl_wire_reply *rep, size_t *tail)
{
    return fast_keyed_reply(data, n, rep, tail, false);
}

int
rl_wire_fast_keyed_reply(const char *data, size_t n, struct rl_wire_reply *rep, size_t *tail)
{
    return fast_keyed_reply(data, n, rep, tail, true);
}

int
rl_wire_put_spliced(struct rl_buf *out, uint8_t hdr, uint8_t op, uint32_t id, const char *tail,
                    size_t tail_len)
{
    unsigned char *h;
    size_t idw = id <= 0x7f ? 1 : id <= 0xff ? 2 : id <= 0xffff ? 3 : 5;
    size_t payload = 2 + idw + tail_len;

    if (payload > RL_WIRE_FRAME_MAX) {
        return -EMSGSIZE;
    }
    if (out->cap - out->len < RL_WIRE_HDR_LEN + payload &&
        rl_buf_reserve(out, RL_WIRE_HDR_LEN + payload) != 0) {
        return -ENOMEM;
    }
    /* Written in place, byte by byte: a header staged on the stack and copied costs a
     * store-forwarding stall per frame. */
    h = (unsigned char *)out->data + out->len;
    h[0] = (unsigned char)(payload >> 24);
    h[1] = (unsigned char)(payload >> 16);
    h[2] = (unsigned char)(payload >> 8);
    h[3] = (unsigned char)payload;
    h[4] = hdr;
    h[5] = op;
    h += 6;
    switch (idw) {
    case 1:
        h[0] = (unsigned char)id;
        break;
    case 2:
        h[0] = 0xcc;
        h[1] = (unsigned char)id;
        break;
    case 3:
        h[0] = 0xcd;
        h[1] = (unsigned char)(id >> 8);
        h[2] = (unsigned char)id;
        break;
    default:
        h[0] = 0xce;
        h[1] = (unsigned char)(id >> 24);
        h[2] = (unsigned char)(id >> 16);
        h[3] = (unsigned char)(id >> 8);
        h[4] = (unsigned char)id;
        break;
    }
    memcpy(h + idw, tail, tail_len);
    out->len += RL_WIRE_HDR_LEN + payload;
    return 0;
}

/* ---- the CHECK encoder ---------------------------------------------------------------------- */

/* An unsigned integer in msgpack's shortest format (msgpack-c's msgpack_pack_uint64), at p;
 * returns the bytes written (at most 9). */
static inline size_t
put_uint(unsigned char *p, uint64_t v)
{
    if (v <= 0x7f) {
        p[0] = (unsigned char)v;
        return 1;
    }
    if (v <= 0xff) {
        p[0] = 0xcc;
        p[1] = (unsigned char)v;
        return 2;
    }
    if (v <= 0xffff) {
        p[0] = 0xcd;
        p[1] = (unsigned char)(v >> 8);
        p[2] = (unsigned char)v;
        return 3;
    }
    if (v <= 0xffffffffu) {
        p[0] = 0xce;
        for (int k = 0; k < 4; k++) {
            p[1 + k] = (unsigned char)(v >> (24 - 8 * k));
        }
        return 5;
    }
    p[0] = 0xcf;
    for (int k = 0; k < 8; k++) {
        p[1 + k] = (unsigned char)(v >> (56 - 8 * k));
    }
    return 9;
}

/* A string in msgpack's shortest format (msgpack-c's: fixstr, str 8, 16, 32), at p; returns
 * the bytes written (at most 5 + n). */
static inline size_t
put_str(unsigned char *p, const char *s, size_t n)
{
    size_t h;

    if (n < 32) {
        p[0] = (unsigned char)(0xa0 | n);
        h = 1;
    } else if (n <= 0xff) {
        p[0] = 0xd9;
        p[1] = (unsigned char)n;
        h = 2;
    } else if (n <= 0xffff) {
        p[0] = 0xda;
        p[1] = (unsigned char)(n >> 8);
        p[2] = (unsigned char)n;
        h = 3;
    } else {
        p[0] = 0xdb;
        for (int k = 0; k < 4; k++) {
            p[1 + k] = (unsigned char)(n >> (24 - 8 * k));
        }
        h = 5;
    }
    if (n > 0) {
        memcpy(p + h, s, n);
    }
    return h + n;
}

int
rl_wire_fast_put_check(struct rl_buf *out, const struct rl_wire_req *req)
{
    static const char *const names[] = {
#define FAST_ALGO_NAME(n, s, b) s,
        RL_ALGO_MAP(FAST_ALGO_NAME)
#undef FAST_ALGO_NAME
    };
    const char *algo = "?"; /* out of range: as wire_put.c, which the decoder refuses */
    size_t alen = 1;
    size_t strs = (size_t)req->service.len + req->user.len + req->endpoint.len;
    size_t most, n;
    unsigned char *h, *p;

    if (strs > RL_WIRE_FRAME_MAX) {
        return -EMSGSIZE;
    }
    if (req->limit.set && req->limit.algo < sizeof(names) / sizeof(names[0])) {
        algo = names[req->limit.algo];
        alen = strlen(algo);
    }
    /* the largest the frame can be: headers of every element at their widest */
    most = RL_WIRE_HDR_LEN + 1 + 2 + 5 + 3 * 5 + strs + 5 + (5 + alen) + 5 + 9 + 5 + 5 + 2;
    if (out->cap - out->len < most && rl_buf_reserve(out, most) != 0) {
        return -ENOMEM;
    }
    h = (unsigned char *)out->data + out->len;
    p = h + RL_WIRE_HDR_LEN;
    /* The tenant goes only with a limit, so a CHECK without one is as every node reads it. */
    *p++ = (unsigned char)(0x90 | (!req->limit.set ? 6 : req->tenant != 0 ? 8 : 7));
    p += put_uint(p, RL_WIRE_OP_CHECK);
    p += put_uint(p, req->id);
    p += put_str(p, req->service.ptr, req->service.len);
    p += put_str(p, req->user.ptr, req->user.len);
    if (req->endpoint.ptr == NULL) {
        *p++ = 0xc0;
    } else {
        p += put_str(p, req->endpoint.ptr, req->endpoint.len);
    }
    p += put_uint(p, req->cost);
    if (req->limit.set) {
        *p++ = 0x94;
        p += put_str(p, algo, alen);
        p += put_uint(p, req->limit.limit);
        p += put_uint(p, req->limit.window_ms);
        if (req->limit.has_burst) {
            p += put_uint(p, req->limit.burst);
        } else {
            *p++ = 0xc0;
        }
        if (req->tenant != 0) {
            p += put_uint(p, req->tenant);
        }
    }
    n = (size_t)(p - h) - RL_WIRE_HDR_LEN;
    if (n > RL_WIRE_FRAME_MAX) {
        return -EMSGSIZE;
    }
    h[0] = (unsigned char)(n >> 24);
    h[1] = (unsigned char)(n >> 16);
    h[2] = (unsigned char)(n >> 8);
    h[3] = (unsigned char)n;
    out->len += RL_WIRE_HDR_LEN + n;
    return 0;
}
