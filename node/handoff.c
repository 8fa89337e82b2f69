/*
 * handoff: encodes and decodes the handoff record stream (handoff.h, docs/PROTOCOL.md,
 * "Handoff records"). Each record is a 4-byte big-endian length and one
 * MessagePack array. The decoder reads the fixed layout with a cursor, so it allocates
 * nothing and a count in a header can never make it reserve memory. Not for choosing keys
 * nor for applying them (limiter.h).
 */
#include "handoff.h"

#include <errno.h>
#include <msgpack.h>
#include <string.h>

#include "ruleset.h"

static int
ho_write(void *data, const char *p, size_t n)
{
    return rl_buf_append(data, p, n) == 0 ? 0 : -1;
}

/* Reserves the 4-byte length of a record; ho_close fills it. */
static bool
ho_open(struct rl_buf *out, msgpack_packer *pk, size_t *start)
{
    static const char zero[4] = {0, 0, 0, 0};

    *start = out->len;
    msgpack_packer_init(pk, out, ho_write);
    return rl_buf_append(out, zero, 4) == 0;
}

static int
ho_close(struct rl_buf *out, size_t start, bool ok)
{
    size_t body = out->len - start - 4;
    unsigned char *h = (unsigned char *)out->data + start;

    if (!ok || body > RL_HANDOFF_RECORD_MAX) {
        out->len = start;
        return ok ? -EINVAL : -ENOMEM;
    }
    h[0] = (unsigned char)(body >> 24);
    h[1] = (unsigned char)(body >> 16);
    h[2] = (unsigned char)(body >> 8);
    h[3] = (unsigned char)body;
    return 0;
}

int
rl_handoff_put_header(struct rl_buf *out, uint64_t sender_now_ms, uint32_t shard)
{
    msgpack_packer pk;
    size_t start;
    bool ok = ho_open(out, &pk, &start);

    ok = ok && msgpack_pack_array(&pk, 5) == 0 && msgpack_pack_uint8(&pk, RL_HANDOFF_HEADER) == 0 &&
         msgpack_pack_str(&pk, sizeof(RL_HANDOFF_MAGIC) - 1) == 0 &&
         msgpack_pack_str_body(&pk, RL_HANDOFF_MAGIC, sizeof(RL_HANDOFF_MAGIC) - 1) == 0 &&
         msgpack_pack_uint32(&pk, RL_HANDOFF_VERSION) == 0 &&
         msgpack_pack_uint64(&pk, sender_now_ms) == 0 && msgpack_pack_uint32(&pk, shard) == 0;
    return ho_close(out, start, ok);
}

int
rl_handoff_put_key(struct rl_buf *out, const struct rl_handoff_key *k)
{
    msgpack_packer pk;
    size_t start;
    uint32_t n = k->st.nlog > RL_ALGO_XLOG_MAX ? RL_ALGO_XLOG_MAX : k->st.nlog;
    bool ok = ho_open(out, &pk, &start);

    ok = ok && msgpack_pack_array(&pk, 13) == 0 && msgpack_pack_uint8(&pk, RL_HANDOFF_KEY) == 0 &&
         msgpack_pack_uint64(&pk, k->fp_hi) == 0 && msgpack_pack_uint32(&pk, k->fp_lo) == 0 &&
         msgpack_pack_uint8(&pk, k->kind) == 0 && msgpack_pack_uint64(&pk, k->ref) == 0 &&
         msgpack_pack_uint8(&pk, k->algo) == 0 && msgpack_pack_uint32(&pk, k->limit) == 0 &&
         msgpack_pack_uint64(&pk, k->window_ms) == 0 && msgpack_pack_uint32(&pk, k->burst) == 0 &&
         msgpack_pack_uint8(&pk, k->st.shape) == 0 && msgpack_pack_int64(&pk, k->st.t_ms) == 0 &&
         msgpack_pack_uint64(&pk, k->st.v) == 0 && msgpack_pack_array(&pk, 2 * n) == 0;
    for (uint32_t i = 0; ok && i < n; i++) {
        ok = msgpack_pack_int64(&pk, k->st.age[i]) == 0 &&
             msgpack_pack_uint32(&pk, k->st.cost[i]) == 0;
    }
    return ho_close(out, start, ok);
}

int
rl_handoff_put_end(struct rl_buf *out, uint64_t nkeys)
{
    msgpack_packer pk;
    size_t start;
    bool ok = ho_open(out, &pk, &start);

    ok = ok && msgpack_pack_array(&pk, 2) == 0 && msgpack_pack_uint8(&pk, RL_HANDOFF_END) == 0 &&
         msgpack_pack_uint64(&pk, nkeys) == 0;
    return ho_close(out, start, ok);
}

/* ---- decoding: a cursor over one record's body -------------------------------------------- */

struct ho_cur {
    const unsigned char *p;
    const unsigned char *end;
};

static bool
ho_be(struct ho_cur *c, unsigned w, uint64_t *v)
{
    if ((size_t)(c->end - c->p) < w) {
        return false;
    }
    *v = 0;
    for (unsigned i = 0; i < w; i++) {
        *v = *v << 8 | c->p[i];
    }
    c->p += w;
    return true;
}

static bool
ho_uint(struct ho_cur *c, uint64_t max, uint64_t *v)
{
    unsigned char b;

    if (c->p >= c->end) {
        return false;
    }
    b = *c->p++;
    if (b <= 0x7f) {
        *v = b;
    } else if (b >= 0xcc && b <= 0xcf) {
        if (!ho_be(c, 1u << (b - 0xcc), v)) {
            return false;
        }
    } else {
        return false;
    }
    return *v <= max;
}

/* A signed integer of magnitude below 2^62 (a time difference). */
static bool
ho_int(struct ho_cur *c, int64_t *v)
{
    const int64_t lim = INT64_C(1) << 62;
    unsigned char b;
    uint64_t u;

    if (c->p >= c->end) {
        return false;
    }
    b = *c->p;
    if (b <= 0x7f || (b >= 0xcc && b <= 0xcf)) {
        if (!ho_uint(c, (uint64_t)lim, &u)) {
            return false;
        }
        *v = (int64_t)u;
        return true;
    }
    c->p++;
    if (b >= 0xe0) {
        *v = (int8_t)b;
        return true;
    }
    if (b < 0xd0 || b > 0xd3 || !ho_be(c, 1u << (b - 0xd0), &u)) {
        return false;
    }
    switch (b) {
    case 0xd0:
        *v = (int8_t)u;
        break;
    case 0xd1:
        *v = (int16_t)u;
        break;
    case 0xd2:
        *v = (int32_t)u;
        break;
    default:
        *v = (int64_t)u;
        break;
    }
    return *v > -lim && *v < lim;
}

static bool
ho_array(struct ho_cur *c, uint64_t max, uint64_t *n)
{
    unsigned char b;

    if (c->p >= c->end) {
        return false;
    }
    b = *c->p++;
    if (b >= 0x90 && b <= 0x9f) {
        *n = b & 0x0f;
    } else if (b == 0xdc || b == 0xdd) {
        if (!ho_be(c, b == 0xdc ? 2 : 4, n)) {
            return false;
        }
    } else {
        return false;
    }
    return *n <= max;
}

static bool
ho_magic(struct ho_cur *c)
{
    size_t n = sizeof(RL_HANDOFF_MAGIC) - 1;

    if ((size_t)(c->end - c->p) < n + 1 || *c->p != (unsigned char)(0xa0 | n)) {
        return false;
    }
    c->p++;
    if (memcmp(c->p, RL_HANDOFF_MAGIC, n) != 0) {
        return false;
    }
    c->p += n;
    return true;
}

static bool
ho_key(struct ho_cur *c, struct rl_handoff_key *k)
{
    uint64_t u[10], n;

    /* fp_hi, fp_lo, kind, ref, algo, limit, window, burst, shape */
    if (!ho_uint(c, UINT64_MAX, &u[0]) || !ho_uint(c, 0xffffffu, &u[1]) ||
        !ho_uint(c, RL_HANDOFF_INLINE, &u[2]) || !ho_uint(c, UINT64_MAX, &u[3]) ||
        !ho_uint(c, RL_ALGO_COUNT - 1, &u[4]) || !ho_uint(c, RL_CONF_LIMIT_MAX, &u[5]) ||
        !ho_uint(c, RL_CONF_WINDOW_MAX, &u[6]) || !ho_uint(c, RL_CONF_LIMIT_MAX, &u[7]) ||
        !ho_uint(c, RL_ALGO_COUNT - 1, &u[8]) || u[6] == 0 || u[6] > rl_algo_window_max(u[4]) ||
        u[5] > rl_algo_limit_max(u[4])) {
        return false;
    }
    memset(k, 0, offsetof(struct rl_handoff_key, st));
    k->fp_hi = u[0];
    k->fp_lo = (uint32_t)u[1];
    k->kind = (uint8_t)u[2];
    k->ref = u[3];
    k->algo = (uint8_t)u[4];
    k->limit = (uint32_t)u[5];
    k->window_ms = u[6];
    k->burst = (uint32_t)u[7];
    k->st.shape = (uint8_t)u[8];
    if (!ho_int(c, &k->st.t_ms) || !ho_uint(c, UINT64_MAX, &k->st.v) ||
        !ho_array(c, 2 * RL_ALGO_XLOG_MAX, &n) || n % 2 != 0) {
        return false;
    }
    k->st.nlog = (uint32_t)(n / 2);
    for (uint32_t i = 0; i < k->st.nlog; i++) {
        if (!ho_int(c, &k->st.age[i]) || !ho_uint(c, UINT32_MAX, &u[9])) {
            return false;
        }
        k->st.cost[i] = (uint32_t)u[9];
    }
    return true;
}

long
rl_handoff_next(const char *p, size_t n, struct rl_handoff_rec *rec, struct rl_handoff_key *key)
{
    const unsigned char *b = (const unsigned char *)p;
    struct ho_cur c;
    uint64_t len, count, type, v = 0;
    bool ok;

    if (n < 4) {
        return 0;
    }
    len = (uint64_t)b[0] << 24 | (uint64_t)b[1] << 16 | (uint64_t)b[2] << 8 | b[3];
    if (len == 0 || len > RL_HANDOFF_RECORD_MAX) {
        return -EINVAL;
    }
    if (n - 4 < len) {
        return 0;
    }
    c.p = b + 4;
    c.end = c.p + len;
    memset(rec, 0, sizeof(*rec));
    if (!ho_array(&c, 16, &count) || count < 2 || !ho_uint(&c, RL_HANDOFF_END, &type)) {
        return -EINVAL;
    }
    rec->type = (uint8_t)type;
    switch (type) {
    case RL_HANDOFF_HEADER:
        ok = count == 5 && ho_magic(&c) && ho_uint(&c, UINT32_MAX, &v) && v == RL_HANDOFF_VERSION &&
             ho_uint(&c, UINT64_MAX, &rec->sender_now_ms);
        rec->version = (uint32_t)v;
        ok = ok && ho_uint(&c, UINT32_MAX, &v);
        rec->shard = (uint32_t)v;
        break;
    case RL_HANDOFF_KEY:
        ok = count == 13 && key != NULL && ho_key(&c, key);
        break;
    default:
        ok = count == 2 && ho_uint(&c, UINT64_MAX, &rec->nkeys);
        break;
    }
    if (!ok || c.p != c.end) {
        return -EINVAL;
    }
    return (long)(4 + len);
}
