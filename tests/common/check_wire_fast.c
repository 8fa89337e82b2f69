/*
 * check_wire_fast: the short readers of CHECK, ADJUST and RELEASE and their replies and the
 * spliced encoder (common/wire_fast.c) against the full codec. They must take what the encoders
 * emit, give exactly the fields the full decoders give (strings at the same addresses), splice back
 * the bytes the encoders would have written under the new id, and leave to the full decoders
 * everything they do not take: a seeded differential fuzz holds every payload it accepts to
 * the full decoder's verdict and fields.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "rltest.h"
#include "ruleset.h"
#include "wire.h"
#include "wire_fast.h"

#define RAW(...)                                                                                   \
    (const char *)(const unsigned char[]){__VA_ARGS__}, sizeof((const unsigned char[]){__VA_ARGS__})

static const uint32_t ids[] = {0, 1, 127, 128, 255, 256, 65535, 65536, 16777216, 4294967295u};

/* The same string of the payload (an empty one: both nil or both not; msgpack-c's pointer
 * for an empty str is not the byte after its header, and nothing reads it). */
static bool
str_eq(struct rl_wire_str a, struct rl_wire_str b)
{
    if (a.len == 0 && b.len == 0) {
        return (a.ptr == NULL) == (b.ptr == NULL);
    }
    return a.ptr == b.ptr && a.len == b.len;
}

/* The full decoder takes p too, with the same fields. */
static void
same_as_full_req(const char *what, const char *p, size_t n, const struct rl_wire_req *fast)
{
    struct rl_wire_decoder d;
    struct rl_wire_req full;
    struct rl_wire_fault f;

    RL_CHECK_INT_EQ(rl_wire_decoder_init(&d), 0);
    RL_CHECK(rl_wire_decode_req(&d, p, n, &full, &f) == 0, "%s: full decoder refuses: %s", what,
             f.msg);
    RL_CHECK(full.op == fast->op && full.id == fast->id && full.cost == fast->cost &&
                 full.delta == fast->delta,
             "%s: op %u/%u cost %u/%u delta %d/%d", what, full.op, fast->op, full.cost, fast->cost,
             full.delta, fast->delta);
    RL_CHECK(str_eq(full.service, fast->service) && str_eq(full.user, fast->user), "%s", what);
    RL_CHECK(str_eq(full.endpoint, fast->endpoint), "%s: endpoint %p/%u vs %p/%u", what,
             (const void *)full.endpoint.ptr, full.endpoint.len, (const void *)fast->endpoint.ptr,
             fast->endpoint.len);
    RL_CHECK(memcmp(&full.limit, &fast->limit, sizeof(full.limit)) == 0 &&
                 full.tenant == fast->tenant,
             "%s: limit set %d/%d algo %u/%u limit %u/%u window %llu/%llu burst %u/%u tenant "
             "%u/%u",
             what, full.limit.set, fast->limit.set, full.limit.algo, fast->limit.algo,
             full.limit.limit, fast->limit.limit, (unsigned long long)full.limit.window_ms,
             (unsigned long long)fast->limit.window_ms, full.limit.burst, fast->limit.burst,
             full.tenant, fast->tenant);
    RL_CHECK(full.now_ms == 0 && fast->now_ms == 0 && fast->role.ptr == NULL &&
                 fast->token.ptr == NULL && !fast->has_since && fast->top == 0,
             "%s", what);
    rl_wire_decoder_deinit(&d);
}

static void
same_as_full_reply(const char *what, const char *p, size_t n, const struct rl_wire_reply *fast)
{
    struct rl_wire_decoder d;
    static struct rl_wire_reply full;

    RL_CHECK_INT_EQ(rl_wire_decoder_init(&d), 0);
    RL_CHECK(rl_wire_decode_reply(&d, p, n, &full) == 0, "%s: full decoder refuses", what);
    RL_CHECK(full.op == fast->op && full.id == fast->id, "%s", what);
    RL_CHECK(memcmp(&full.check, &fast->check, sizeof(full.check)) == 0, "%s", what);
    RL_CHECK(fast->name.ptr == NULL && fast->message.ptr == NULL && fast->err == 0 &&
                 fast->now_ms == 0 && fast->nstats == 0 && fast->nepisodes == 0 &&
                 fast->nmissing == 0,
             "%s", what);
    rl_wire_decoder_deinit(&d);
}

/* Every CHECK the encoder writes, over the widths of each field, is read the short way, and
 * spliced under any id it is byte for byte the encoder's frame with that id. */
START_TEST(test_takes_encoded_checks)
{
    static char big[300];
    static const uint32_t slens[] = {1, 31, 32, 128};
    static const uint32_t ulens[] = {1, 31, 32, 255, 256};
    static const int64_t elens[] = {-1, 0, 31, 32, 128};
    static const uint32_t costs[] = {0, 127, 128, 255, 256, 65535, 65536, 1000000};
    struct rl_buf a, b;
    int cases = 0;

    memset(big, 'x', sizeof(big));
    rl_buf_init(&a);
    rl_buf_init(&b);
    for (size_t si = 0; si < sizeof(slens) / sizeof(slens[0]); si++) {
        for (size_t ui = 0; ui < sizeof(ulens) / sizeof(ulens[0]); ui++) {
            for (size_t ei = 0; ei < sizeof(elens) / sizeof(elens[0]); ei++) {
                for (size_t ci = 0; ci < sizeof(costs) / sizeof(costs[0]); ci++) {
                    struct rl_wire_req in = {0}, out;
                    uint32_t id = ids[(si + ui + ei + ci) % (sizeof(ids) / sizeof(ids[0]))];
                    uint32_t id2 = ids[(si * 3 + ui + ci) % (sizeof(ids) / sizeof(ids[0]))];
                    size_t n, tail = 0;
                    char what[96];

                    in.op = RL_WIRE_OP_CHECK;
                    in.id = id;
                    in.service.ptr = big;
                    in.service.len = slens[si];
                    in.user.ptr = big + 1;
                    in.user.len = ulens[ui];
                    in.endpoint.ptr = elens[ei] < 0 ? NULL : big + 2;
                    in.endpoint.len = elens[ei] < 0 ? 0 : (uint32_t)elens[ei];
                    in.cost = costs[ci];
                    snprintf(what, sizeof(what), "id %u service %u user %u endpoint %lld cost %u",
                             id, slens[si], ulens[ui], (long long)elens[ei], costs[ci]);
                    rl_buf_reset(&a);
                    RL_CHECK_INT_EQ(rl_wire_put_check(&a, &in), 0);
                    n = a.len - RL_WIRE_HDR_LEN;
                    RL_CHECK(rl_wire_fast_check(a.data + RL_WIRE_HDR_LEN, n, &out, &tail) == 0,
                             "%s: not taken", what);
                    RL_CHECK(out.id == id && out.cost == in.cost && out.user.len == ulens[ui] &&
                                 out.service.len == slens[si] &&
                                 (out.endpoint.ptr == NULL) == (elens[ei] < 0),
                             "%s", what);
                    same_as_full_req(what, a.data + RL_WIRE_HDR_LEN, n, &out);
                    /* The tail starts at the service. */
                    RL_CHECK(a.data + RL_WIRE_HDR_LEN + tail < out.service.ptr &&
                                 out.service.ptr - (a.data + RL_WIRE_HDR_LEN + tail) <= 2,
                             "%s: tail at %zu", what, tail);
                    /* Spliced under id2: the encoder's bytes for id2. */
                    rl_buf_reset(&b);
                    RL_CHECK_INT_EQ(rl_wire_put_spliced(&b, RL_WIRE_CHECK_HDR, RL_WIRE_OP_CHECK,
                                                        id2, a.data + RL_WIRE_HDR_LEN + tail,
                                                        n - tail),
                                    0);
                    in.id = id2;
                    rl_buf_reset(&a);
                    RL_CHECK_INT_EQ(rl_wire_put_check(&a, &in), 0);
                    RL_CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0,
                             "%s: spliced under %u differs from the encoder's", what, id2);
                    cases++;
                }
            }
        }
    }
    ck_assert_int_eq(cases, 4 * 5 * 5 * 8);
    rl_buf_deinit(&a);
    rl_buf_deinit(&b);
}
END_TEST

/* A CHECK-shaped reply under op (CHECK, ADJUST, RELEASE), as the node writes it. */
static int
put_keyed_reply(struct rl_buf *out, uint8_t op, const struct rl_wire_check_reply *rep)
{
    return op == RL_WIRE_OP_ADJUST    ? rl_wire_put_adjust_reply(out, rep)
           : op == RL_WIRE_OP_RELEASE ? rl_wire_put_release_reply(out, rep)
                                      : rl_wire_put_check_reply(out, rep);
}

/* The same for replies, of CHECK, ADJUST and RELEASE (the keyed reader; the CHECK reader takes
 * a CHECK's only): every code, numbers of every width. */
START_TEST(test_takes_encoded_replies)
{
    static const uint8_t ops[] = {RL_WIRE_OP_CHECK, RL_WIRE_OP_ADJUST, RL_WIRE_OP_RELEASE};
    static const uint64_t vals[] = {0,     1,     127,        128,         255,        256,
                                    65535, 65536, 4294967295, 4294967296u, UINT64_MAX, 60000};
    static struct rl_wire_reply out;
    struct rl_buf a, b;
    const size_t nv = sizeof(vals) / sizeof(vals[0]);

    rl_buf_init(&a);
    rl_buf_init(&b);
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
        for (uint32_t code = 0; code < RL_WIRE_CODE_COUNT; code++) {
            for (size_t i = 0; i < nv; i++) {
                const uint8_t op = ops[o];
                struct rl_wire_check_reply in = {
                    ids[i % 10],       code, vals[i], vals[(i + 3) % nv], vals[(i + 5) % nv],
                    vals[(i + 7) % nv]};
                uint32_t id2 = ids[(i + code) % 10];
                size_t n, tail = 0;
                char what[64];

                snprintf(what, sizeof(what), "op %u code %u case %zu", op, code, i);
                rl_buf_reset(&a);
                RL_CHECK_INT_EQ(put_keyed_reply(&a, op, &in), 0);
                n = a.len - RL_WIRE_HDR_LEN;
                RL_CHECK((rl_wire_fast_check_reply(a.data + RL_WIRE_HDR_LEN, n, &out, &tail) ==
                          0) == (op == RL_WIRE_OP_CHECK),
                         "%s: the CHECK reader", what);
                memset(&out, 0x5a, sizeof(out.check) + 64);
                RL_CHECK(rl_wire_fast_keyed_reply(a.data + RL_WIRE_HDR_LEN, n, &out, &tail) == 0,
                         "%s: not taken", what);
                RL_CHECK(out.op == op && memcmp(&out.check, &in, sizeof(in)) == 0, "%s", what);
                same_as_full_reply(what, a.data + RL_WIRE_HDR_LEN, n, &out);
                RL_CHECK((unsigned char)a.data[RL_WIRE_HDR_LEN + tail] == code, "%s: tail at %zu",
                         what, tail);
                rl_buf_reset(&b);
                RL_CHECK_INT_EQ(rl_wire_put_spliced(&b, RL_WIRE_CHECK_REPLY_HDR, op, id2,
                                                    a.data + RL_WIRE_HDR_LEN + tail, n - tail),
                                0);
                in.id = id2;
                rl_buf_reset(&a);
                RL_CHECK_INT_EQ(put_keyed_reply(&a, op, &in), 0);
                RL_CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0,
                         "%s: spliced differs", what);
            }
        }
    }
    rl_buf_deinit(&a);
    rl_buf_deinit(&b);
}
END_TEST

/* Whether v fits msgpack format fmt (0: a fixint; 0xcc..0xcf uint 8..64, 0xd0..0xd3 int 8..64). */
static bool
int_fits(unsigned char fmt, int64_t v)
{
    switch (fmt) {
    case 0:
        return v >= -32 && v <= 127;
    case 0xcc:
        return v >= 0 && v <= 0xff;
    case 0xcd:
        return v >= 0 && v <= 0xffff;
    case 0xce:
        return v >= 0 && v <= 0xffffffffll;
    case 0xcf:
        return v >= 0;
    case 0xd0:
        return v >= INT8_MIN && v <= INT8_MAX;
    case 0xd1:
        return v >= INT16_MIN && v <= INT16_MAX;
    case 0xd2:
        return v >= INT32_MIN && v <= INT32_MAX;
    default:
        return true;
    }
}

/* v in format fmt (int_fits) at p; returns the bytes written. */
static size_t
put_int_as(unsigned char *p, unsigned char fmt, int64_t v)
{
    size_t w = fmt == 0 ? 0 : (size_t)1 << ((fmt - 0xcc) & 3);

    if (fmt == 0) {
        p[0] = (unsigned char)(uint64_t)v;
        return 1;
    }
    p[0] = fmt;
    for (size_t k = 0; k < w; k++) {
        p[1 + k] = (unsigned char)((uint64_t)v >> (8 * (w - 1 - k)));
    }
    return 1 + w;
}

/* [op, id, "svc", "u", endpoint "/e" or nil, element 5 as v in format fmt] at p. */
static size_t
put_keyed_as(unsigned char *p, uint8_t op, uint32_t id, bool endpoint, unsigned char fmt, int64_t v)
{
    size_t n = 0;

    p[n++] = RL_WIRE_CHECK_HDR;
    p[n++] = op;
    n += put_int_as(p + n, id <= 0x7f ? 0 : id <= 0xff ? 0xcc : id <= 0xffff ? 0xcd : 0xce, id);
    memcpy(p + n, "\xa3svc\xa1u", 6);
    n += 6;
    if (endpoint) {
        memcpy(p + n, "\xa2/e", 3);
        n += 3;
    } else {
        p[n++] = 0xc0;
    }
    return n + put_int_as(p + n, fmt, v);
}

/* CHECK, ADJUST and RELEASE with element 5 in every msgpack integer format it fits, values at
 * and past every bound (negative deltas in every width): the keyed reader takes exactly what
 * the full decoder takes in a format it reads (every one but uint 64; a signed one for a
 * delta only), with the same fields, and refuses all the full decoder refuses, whose error
 * (BAD_FIELD, naming the field) the router then answers; spliced under another id, what it
 * took is the same request under that id, byte for byte. The encoders' ADJUSTs and RELEASEs
 * are taken and spliced alike. The CHECK reader takes no ADJUST or RELEASE. */
START_TEST(test_takes_settles)
{
    static const uint8_t ops[] = {RL_WIRE_OP_CHECK, RL_WIRE_OP_ADJUST, RL_WIRE_OP_RELEASE};
    static const unsigned char fmts[] = {0, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3};
    static const int64_t vals[] = {
        INT64_MIN, -4294967296ll, INT32_MIN, -1000001,     -1000000, -999999, -65537, -32769,
        -32768,    -129,          -128,      -33,          -32,      -1,      0,      1,
        31,        127,           128,       255,          256,      32767,   65535,  65536,
        999999,    1000000,       1000001,   4294967295ll, INT64_MAX};
    struct rl_wire_decoder d;
    struct rl_buf a, b;
    unsigned char p[64], q[64];
    int taken = 0, refused = 0, negative = 0;

    RL_CHECK_INT_EQ(rl_wire_decoder_init(&d), 0);
    rl_buf_init(&a);
    rl_buf_init(&b);
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
        for (size_t fi = 0; fi < sizeof(fmts) / sizeof(fmts[0]); fi++) {
            for (size_t vi = 0; vi < sizeof(vals) / sizeof(vals[0]); vi++) {
                const uint8_t op = ops[o];
                const unsigned char fmt = fmts[fi];
                const int64_t v = vals[vi];
                const uint32_t id = ids[(o + fi + vi) % 10], id2 = ids[(fi * 3 + vi) % 10];
                const bool ep = (vi & 1) != 0;
                struct rl_wire_req fast, full;
                struct rl_wire_fault f;
                size_t n, n2, tail = 0;
                bool signed_fmt = fmt >= 0xd0 || (fmt == 0 && v < 0);
                char what[96];
                int frc, rc;

                if (!int_fits(fmt, v)) {
                    continue;
                }
                snprintf(what, sizeof(what), "op %u format 0x%02x value %lld", op, fmt,
                         (long long)v);
                n = put_keyed_as(p, op, id, ep, fmt, v);
                frc = rl_wire_decode_req(&d, (const char *)p, n, &full, &f);
                rc = rl_wire_fast_keyed((const char *)p, n, &fast, &tail);
                RL_CHECK((rl_wire_fast_check((const char *)p, n, &fast, &tail) == 0) ==
                             (rc == 0 && op == RL_WIRE_OP_CHECK),
                         "%s: the CHECK reader", what);
                rc = rl_wire_fast_keyed((const char *)p, n, &fast, &tail);
                if (frc != 0) {
                    /* out of bounds: the full decoder's BAD_FIELD, never the short way */
                    RL_CHECK(rc == -1, "%s: taken, the full decoder refuses", what);
                    RL_CHECK(f.err == RL_WIRE_ERR_BAD_FIELD &&
                                 strstr(f.msg, op == RL_WIRE_OP_ADJUST    ? "delta"
                                               : op == RL_WIRE_OP_RELEASE ? "count"
                                                                          : "cost") != NULL,
                             "%s: %s", what, f.msg);
                    refused++;
                    continue;
                }
                RL_CHECK((rc == 0) == (fmt != 0xcf && (op == RL_WIRE_OP_ADJUST || !signed_fmt)),
                         "%s: rc %d", what, rc);
                if (rc != 0) {
                    continue;
                }
                RL_CHECK(fast.op == op && tail < n, "%s", what);
                RL_CHECK(op == RL_WIRE_OP_ADJUST ? fast.delta == v && fast.cost == 0
                                                 : fast.cost == (uint64_t)v && fast.delta == 0,
                         "%s: delta %d cost %u", what, fast.delta, fast.cost);
                same_as_full_req(what, (const char *)p, n, &fast);
                rl_buf_reset(&b);
                RL_CHECK_INT_EQ(rl_wire_put_spliced(&b, RL_WIRE_CHECK_HDR, op, id2,
                                                    (const char *)p + tail, n - tail),
                                0);
                n2 = put_keyed_as(q, op, id2, ep, fmt, v);
                RL_CHECK(b.len == RL_WIRE_HDR_LEN + n2 &&
                             memcmp(b.data + RL_WIRE_HDR_LEN, q, n2) == 0,
                         "%s: spliced under %u differs", what, id2);
                taken++;
                negative += v < 0;
                if (op == RL_WIRE_OP_CHECK) {
                    continue;
                }
                /* The encoder's frame of the same request: taken, spliced to its frame. */
                fast.id = id;
                rl_buf_reset(&a);
                RL_CHECK_INT_EQ(op == RL_WIRE_OP_ADJUST ? rl_wire_put_adjust(&a, &fast)
                                                        : rl_wire_put_release(&a, &fast),
                                0);
                RL_CHECK(rl_wire_fast_keyed(a.data + RL_WIRE_HDR_LEN, a.len - RL_WIRE_HDR_LEN,
                                            &full, &tail) == 0 &&
                             full.op == op && full.delta == fast.delta && full.cost == fast.cost,
                         "%s: the encoder's frame not taken", what);
                rl_buf_reset(&b);
                RL_CHECK_INT_EQ(rl_wire_put_spliced(&b, RL_WIRE_CHECK_HDR, op, id2,
                                                    a.data + RL_WIRE_HDR_LEN + tail,
                                                    a.len - RL_WIRE_HDR_LEN - tail),
                                0);
                fast.id = id2;
                rl_buf_reset(&a);
                RL_CHECK_INT_EQ(op == RL_WIRE_OP_ADJUST ? rl_wire_put_adjust(&a, &fast)
                                                        : rl_wire_put_release(&a, &fast),
                                0);
                RL_CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0,
                         "%s: the encoder's frame spliced differs", what);
            }
        }
    }
    /* every case judged (negative deltas: 2 fixints, 4 int 8, 6 int 16, 10 int 32, 10 int 64) */
    RL_CHECK(taken == 157 && negative == 32 && refused == 118, "taken %d (%d negative), refused %d",
             taken, negative, refused);
    rl_buf_deinit(&a);
    rl_buf_deinit(&b);
    rl_wire_decoder_deinit(&d);
}
END_TEST

/* What the short readers leave to the full decoders: values out of bounds, other types,
 * other ops, other encodings of good values, cut or trailing bytes. */
START_TEST(test_leaves_the_rest)
{
    static struct rl_wire_reply rep;
    struct rl_wire_req req;
    size_t tail;
    const struct {
        const char *p;
        size_t n;
    } reqs[] = {
        /* the PROTOCOL.md example, then broken one way each */
        {RAW(0x96, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01)}, /* taken: index 0 */
        {RAW(0x95, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0)},
        {RAW(0x97, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01, 0x01)},
        {RAW(0x96, 0x02, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01)},
        {RAW(0x96, 0xcc, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01)},
        {RAW(0x96, 0x01, 0xff, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01)},
        {RAW(0x96, 0x01, 0xcf, 0, 0, 0, 0, 0, 0, 0, 7, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01)},
        {RAW(0x96, 0x01, 0x07, 0xa0, 0xa1, 'u', 0xc0, 0x01)},
        {RAW(0x96, 0x01, 0x07, 0xc4, 0x01, 's', 0xa1, 'u', 0xc0, 0x01)},
        {RAW(0x96, 0x01, 0x07, 0xa1, 's', 0xa0, 0xc0, 0x01)},
        {RAW(0x96, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc2, 0x01)},
        {RAW(0x96, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0xd2, 0, 0, 0, 1)},
        {RAW(0x96, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0xcf, 0, 0, 0, 0, 0, 0x0f, 0x42, 0x3f)},
        {RAW(0x96, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0xce, 0, 0x0f, 0x42, 0x41)},
        {RAW(0x96, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0xff)},
        {RAW(0x96, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0xca, 0x3f, 0x80, 0, 0)},
        {RAW(0x96, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0, 0x01, 0xc0)},
        {RAW(0x96, 0x01, 0x07, 0xa1, 's', 0xa1, 'u', 0xc0)},
        {RAW(0x96, 0x01, 0x07, 0xa2, 's')},
        {RAW(0x96, 0x01, 0x07, 0xd9)},
        {RAW(0x96, 0x01, 0x07, 0xda, 0x00)},
        {RAW(0x96, 0x01, 0xcd, 0x01)},
        {RAW(0x96, 0x01)},
        {RAW(0x96)},
    };
    const struct {
        const char *p;
        size_t n;
    } reps[] = {
        {RAW(0x97, 0x01, 0x07, 0x00, 0x64, 0x63, 0xcd, 0xea, 0x60, 0x00)}, /* taken: index 0 */
        {RAW(0x97, 0x01, 0x07, 0x06, 0x64, 0x63, 0xcd, 0xea, 0x60, 0x00)},
        {RAW(0x97, 0x01, 0x07, 0xcc, 0x00, 0x64, 0x63, 0xcd, 0xea, 0x60, 0x00)},
        {RAW(0x97, 0x01, 0x07, 0x00, 0xd0, 0x64, 0x63, 0xcd, 0xea, 0x60, 0x00)},
        {RAW(0x97, 0x01, 0x07, 0x00, 0x64, 0x63, 0xcd, 0xea, 0x60, 0xff)},
        {RAW(0x97, 0x01, 0x07, 0x00, 0x64, 0x63, 0xcd, 0xea, 0x60)},
        {RAW(0x97, 0x01, 0x07, 0x00, 0x64, 0x63, 0xcd, 0xea, 0x60, 0x00, 0x00)},
        {RAW(0x97, 0x01, 0x07, 0x00, 0x64, 0x63, 0xcd, 0xea)},
        {RAW(0x96, 0x01, 0x07, 0x00, 0x64, 0x63, 0xcd, 0xea, 0x60)},
        {RAW(0x98, 0x01, 0x07, 0x00, 0x64, 0x63, 0xcd, 0xea, 0x60, 0x00, 0x00)},
        {RAW(0x97, 0x02, 0x07, 0x00, 0x64, 0x63, 0xcd, 0xea, 0x60, 0x00)},
        {RAW(0x94, 0xcc, 0xff, 0x07, 0x06, 0xa0)},
        {RAW(0x97, 0x01, 0xcf, 0, 0, 0, 0, 0, 0, 0, 7, 0x00, 0x64, 0x63, 0xcd, 0xea, 0x60, 0x00)},
        {RAW(0x97)},
    };

    for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
        int rc = rl_wire_fast_check(reqs[i].p, reqs[i].n, &req, &tail);

        RL_CHECK(rc == (i == 0 ? 0 : -1), "request %zu: rc %d", i, rc);
    }
    /* The other encodings are still good CHECKs: the full decoder takes them. */
    for (size_t i = 11; i <= 12; i++) {
        struct rl_wire_decoder d;
        struct rl_wire_fault f;

        RL_CHECK_INT_EQ(rl_wire_decoder_init(&d), 0);
        RL_CHECK(rl_wire_decode_req(&d, reqs[i].p, reqs[i].n, &req, &f) == 0 &&
                     req.cost == (i == 11 ? 1u : 999999u),
                 "request %zu", i);
        rl_wire_decoder_deinit(&d);
    }
    for (size_t i = 0; i < sizeof(reps) / sizeof(reps[0]); i++) {
        int rc = rl_wire_fast_check_reply(reps[i].p, reps[i].n, &rep, &tail);

        RL_CHECK(rc == (i == 0 ? 0 : -1), "reply %zu: rc %d", i, rc);
    }
}
END_TEST

/* A frame can never pass the limit: the splice refuses it and leaves out as it was. */
START_TEST(test_splice_limits)
{
    struct rl_buf b;
    char *tail = calloc(1, RL_WIRE_FRAME_MAX);

    rl_buf_init(&b);
    ck_assert_int_eq(rl_buf_append(&b, "xy", 2), 0);
    ck_assert_int_eq(rl_wire_put_spliced(&b, 0x96, 1, 7, tail, RL_WIRE_FRAME_MAX - 3), 0);
    ck_assert_uint_eq(b.len, 2 + RL_WIRE_HDR_LEN + RL_WIRE_FRAME_MAX);
    b.len = 2;
    ck_assert_int_eq(rl_wire_put_spliced(&b, 0x96, 1, 128, tail, RL_WIRE_FRAME_MAX - 3), -EMSGSIZE);
    ck_assert_uint_eq(b.len, 2);
    ck_assert_int_eq(memcmp(b.data, "xy", 2), 0);
    rl_buf_deinit(&b);
    free(tail);
}
END_TEST

/* The CHECK encoder of the fronts writes, over the widths of every field, with and without
 * an endpoint, an inline limit, a burst and a tenant, byte for byte what rl_wire_put_check
 * writes, and fails where it fails. */
START_TEST(test_fast_put_check)
{
    static char big[70000];
    static const uint64_t nums[] = {0, 1, 127, 128, 255, 256, 65535, 65536, 4294967295u};
    static const size_t lens[] = {0, 1, 31, 32, 255, 256, 65535, 65536};
    struct rl_buf a, b;
    struct rl_wire_req req;
    int cases = 0;

    memset(big, 'x', sizeof(big));
    rl_buf_init(&a);
    rl_buf_init(&b);
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
            for (int shape = 0; shape < 8; shape++) {
                memset(&req, 0, sizeof(req));
                req.op = RL_WIRE_OP_CHECK;
                req.id = (uint32_t)nums[i];
                req.service.ptr = big;
                req.service.len = (uint32_t)lens[l];
                req.user.ptr = big;
                req.user.len = (uint32_t)lens[(l + 3) % 8];
                if (shape & 1) {
                    req.endpoint.ptr = big;
                    req.endpoint.len = (uint32_t)lens[(l + 5) % 8];
                }
                req.cost = (uint32_t)nums[(i + 2) % 9];
                if (shape & 2) {
                    req.limit.set = true;
                    req.limit.algo = (uint8_t)((i + l) % (RL_ALGO_COUNT + 1)); /* one "?" */
                    req.limit.limit = (uint32_t)nums[(i + 4) % 9];
                    req.limit.window_ms = nums[(i + l) % 9] * (shape & 4 ? 1000000ull : 1);
                    req.limit.has_burst = (shape & 4) != 0;
                    req.limit.burst = (uint32_t)nums[(i + 6) % 9];
                    req.tenant = (uint32_t)nums[(i + 7) % 9] * ((shape & 1) != 0);
                }
                rl_buf_reset(&a);
                rl_buf_reset(&b);
                int ra = rl_wire_put_check(&a, &req);
                int rb = rl_wire_fast_put_check(&b, &req);

                RL_CHECK(ra == rb, "id %u lens %zu shape %d: %d vs %d", req.id, lens[l], shape, ra,
                         rb);
                RL_CHECK(a.len == b.len && (a.len == 0 || memcmp(a.data, b.data, a.len) == 0),
                         "id %u lens %zu shape %d: %zu vs %zu bytes", req.id, lens[l], shape, a.len,
                         b.len);
                cases += ra == 0;
            }
        }
    }
    RL_CHECK(cases > 100, "only %d frames encoded", cases);
    rl_buf_deinit(&a);
    rl_buf_deinit(&b);
}
END_TEST

static uint64_t
rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}


/* muts random mutations of buf[0..n) (a byte changed at random or to one of hot, one
 * inserted, the end cut); returns the new length (buf has room for 64 more bytes). */
static size_t
mutate(char *buf, size_t n, int muts, uint64_t *s, const unsigned char *hot, size_t nhot)
{
    while (muts-- > 0 && n > 0) {
        uint64_t r = rnd(s);
        size_t k = (r >> 8) % n;

        switch (r % 4) {
        case 0:
            buf[k] = (char)(rnd(s) >> 13);
            break;
        case 1:
            buf[k] = (char)hot[(r >> 20) % nhot];
            break;
        case 2:
            memmove(buf + k + 1, buf + k, n - k);
            buf[k] = (char)hot[(r >> 20) % nhot];
            n++;
            break;
        default:
            n = (r & 0x100) ? k : n - 1;
            break;
        }
    }
    return n;
}

/* Mutated CHECKs, ADJUSTs, RELEASEs and replies, and CHECKs with an inline limit and a tenant:
 * whatever the short readers take, the full decoders take with the same fields, and the
 * splice of what the relay's reader takes decodes to the same fields under the new id. */
START_TEST(test_differential_fuzz)
{
    static const unsigned char hot[] = {0x00, 0x01, 0x05, 0x06, 0x7f, 0x80, 0x94, 0x96, 0x97,
                                        0x98, 0xa0, 0xa1, 0xa4, 0xbf, 0xc0, 0xc2, 0xc4, 0xcc,
                                        0xcd, 0xce, 0xcf, 0xd0, 0xd2, 0xd9, 0xda, 0xdb, 0xff,
                                        0x09, 0x0a, 0xd1, 0xd3, 0xe0, 0xf0, 'g', 'c', 'r'};
    static struct rl_wire_reply rep, rep2;
    struct rl_wire_decoder d;
    struct rl_buf seeds[12], sp;
    struct rl_wire_req in = {0}, req, req2;
    struct rl_wire_check_reply crep = {300, RL_WIRE_LIMITED, 10, 0, 70000, 250};
    struct rl_wire_fault f;
    char buf[512];
    uint64_t s = 0x2545f4914f6cdd1dull;
    int taken_req = 0, taken_rep = 0, taken_op[3] = {0, 0, 0}, taken_inline = 0;

    RL_CHECK_INT_EQ(rl_wire_decoder_init(&d), 0);
    for (int k = 0; k < 12; k++) {
        rl_buf_init(&seeds[k]);
    }
    rl_buf_init(&sp);
    in.op = RL_WIRE_OP_CHECK;
    in.id = 70000;
    in.service.ptr = "checkout";
    in.service.len = 8;
    in.user.ptr = "user-1";
    in.user.len = 6;
    in.endpoint.ptr = "/pay";
    in.endpoint.len = 4;
    in.cost = 300;
    ck_assert_int_eq(rl_wire_put_check(&seeds[0], &in), 0);
    in.endpoint.ptr = NULL;
    in.endpoint.len = 0;
    in.id = 5;
    in.cost = 1;
    ck_assert_int_eq(rl_wire_put_check(&seeds[1], &in), 0);
    ck_assert_int_eq(rl_wire_put_check_reply(&seeds[2], &crep), 0);
    crep.id = 1;
    crep.code = RL_WIRE_ALLOWED;
    crep.limit = UINT64_MAX;
    crep.retry_after_ms = 0;
    ck_assert_int_eq(rl_wire_put_check_reply(&seeds[3], &crep), 0);
    in.op = RL_WIRE_OP_ADJUST;
    in.cost = 0;
    in.delta = -300;
    in.endpoint.ptr = "/pay";
    in.endpoint.len = 4;
    ck_assert_int_eq(rl_wire_put_adjust(&seeds[4], &in), 0);
    in.op = RL_WIRE_OP_RELEASE;
    in.delta = 0;
    in.cost = 2;
    in.endpoint.ptr = NULL;
    in.endpoint.len = 0;
    ck_assert_int_eq(rl_wire_put_release(&seeds[5], &in), 0);
    ck_assert_int_eq(rl_wire_put_adjust_reply(&seeds[6], &crep), 0);
    ck_assert_int_eq(rl_wire_put_release_reply(&seeds[7], &crep), 0);
    /* with an inline limit (each encoder, each burst form) and a tenant */
    in.op = RL_WIRE_OP_CHECK;
    in.cost = 1;
    in.limit.set = true;
    in.limit.algo = RL_ALGO_GCRA;
    in.limit.limit = 1000;
    in.limit.window_ms = 1000;
    in.limit.burst = 5000;
    in.limit.has_burst = true;
    ck_assert_int_eq(rl_wire_fast_put_check(&seeds[8], &in), 0);
    in.tenant = 77;
    ck_assert_int_eq(rl_wire_fast_put_check(&seeds[9], &in), 0);
    in.limit.algo = RL_ALGO_FIXED_WINDOW;
    in.limit.has_burst = false;
    in.limit.burst = in.limit.limit;
    in.limit.window_ms = 31622400000ull;
    ck_assert_int_eq(rl_wire_put_check(&seeds[10], &in), 0);
    in.limit.algo = RL_ALGO_CONCURRENCY;
    in.limit.limit = 10;
    in.limit.burst = 10;
    in.limit.window_ms = 30000;
    in.tenant = 4294967295u;
    ck_assert_int_eq(rl_wire_put_check(&seeds[11], &in), 0);

    for (int iter = 0; iter < 600000; iter++) {
        const struct rl_buf *seed = &seeds[iter % 12];
        int muts = (int)(rnd(&s) % 4);
        size_t n = seed->len - RL_WIRE_HDR_LEN, tail = 0;
        uint32_t id2 = (uint32_t)rnd(&s) >> (rnd(&s) % 32);

        memcpy(buf, seed->data + RL_WIRE_HDR_LEN, n);
        n = mutate(buf, n, muts, &s, hot, sizeof(hot));
        if (rl_wire_fast_check(buf, n, &req, &tail) == 0) {
            RL_CHECK(req.op == RL_WIRE_OP_CHECK);
        }
        if (rl_wire_fast_keyed(buf, n, &req, &tail) == 0) {
            taken_req++;
            taken_op[req.op == RL_WIRE_OP_CHECK ? 0 : req.op == RL_WIRE_OP_ADJUST ? 1 : 2]++;
            RL_CHECK(tail >= 3 && tail < n);
            same_as_full_req("fuzzed request", buf, n, &req);
            rl_buf_reset(&sp);
            RL_CHECK_INT_EQ(rl_wire_put_spliced(&sp, RL_WIRE_CHECK_HDR, (uint8_t)req.op, id2,
                                                buf + tail, n - tail),
                            0);
            RL_CHECK_INT_EQ(rl_wire_decode_req(&d, sp.data + RL_WIRE_HDR_LEN,
                                               sp.len - RL_WIRE_HDR_LEN, &req2, &f),
                            0);
            RL_CHECK(req2.id == id2 && req2.op == req.op && req2.cost == req.cost &&
                     req2.delta == req.delta && req2.user.len == req.user.len &&
                     memcmp(req2.user.ptr, req.user.ptr, req.user.len) == 0 &&
                     req2.service.len == req.service.len &&
                     memcmp(req2.service.ptr, req.service.ptr, req.service.len) == 0 &&
                     (req2.endpoint.ptr == NULL) == (req.endpoint.ptr == NULL) &&
                     req2.endpoint.len == req.endpoint.len);
        }
        if (rl_wire_fast_keyed_all(buf, n, &req, &tail) == 0) {
            taken_inline += req.limit.set;
            same_as_full_req("fuzzed request, the node's reader", buf, n, &req);
        }
        if (rl_wire_fast_check_reply(buf, n, &rep, &tail) == 0) {
            RL_CHECK(rep.op == RL_WIRE_OP_CHECK);
        }
        if (rl_wire_fast_keyed_reply(buf, n, &rep, &tail) == 0) {
            taken_rep++;
            RL_CHECK(tail >= 3 && tail < n);
            same_as_full_reply("fuzzed reply", buf, n, &rep);
            rl_buf_reset(&sp);
            RL_CHECK_INT_EQ(rl_wire_put_spliced(&sp, RL_WIRE_CHECK_REPLY_HDR, (uint8_t)rep.op, id2,
                                                buf + tail, n - tail),
                            0);
            RL_CHECK_INT_EQ(rl_wire_decode_reply(&d, sp.data + RL_WIRE_HDR_LEN,
                                                 sp.len - RL_WIRE_HDR_LEN, &rep2),
                            0);
            rep.check.id = id2;
            RL_CHECK(rep2.id == id2 && rep2.op == rep.op &&
                     memcmp(&rep2.check, &rep.check, sizeof(rep.check)) == 0);
        }
    }
    /* The loop means something: unmutated and harmlessly mutated seeds were taken. */
    ck_assert_int_gt(taken_req, 40000);
    ck_assert_int_gt(taken_rep, 40000);
    for (int k = 0; k < 3; k++) {
        ck_assert_int_gt(taken_op[k], 10000);
    }
    ck_assert_int_gt(taken_inline, 30000);
    for (int k = 0; k < 12; k++) {
        rl_buf_deinit(&seeds[k]);
    }
    rl_buf_deinit(&sp);
    rl_wire_decoder_deinit(&d);
}
END_TEST

/* CHECKs with an inline limit (every algorithm, each bound and each integer width) and a
 * tenant, as the routers' encoders write them: the node's reader takes them with the full
 * decoder's fields, the relay's reader never does; one past a bound is left to the full
 * decoder, which refuses it. */
START_TEST(test_takes_inline_limits)
{
    static const uint64_t limits[] = {1, 127, 128, 255, 65535, 65536, 10000, 10001, 4294967295u};
    static const uint64_t windows[] = {1, 1000, 65536, 4294967295u, 4294967296ull,
                                       31622400000ull, 31622400001ull};
    static const uint32_t tenants[] = {0, 1, 200, 70000, 4294967295u};
    struct rl_buf a;
    struct rl_wire_decoder d;
    int taken = 0, refused = 0;

    RL_CHECK_INT_EQ(rl_wire_decoder_init(&d), 0);
    rl_buf_init(&a);
    for (unsigned algo = 0; algo < RL_ALGO_COUNT; algo++) {
        for (size_t li = 0; li < sizeof(limits) / sizeof(limits[0]); li++) {
            for (size_t wi = 0; wi < sizeof(windows) / sizeof(windows[0]); wi++) {
                for (int b = 0; b < 3; b++) {
                    struct rl_wire_req in = {0}, out;
                    struct rl_wire_fault f;
                    size_t n, tail;
                    char what[128];
                    int rc, frc;

                    in.op = RL_WIRE_OP_CHECK;
                    in.id = ids[(li + wi + algo) % 10];
                    in.service.ptr = "shop";
                    in.service.len = 4;
                    in.user.ptr = "u-1";
                    in.user.len = 3;
                    in.cost = (uint32_t)(wi % 3);
                    in.limit.set = true;
                    in.limit.algo = (uint8_t)algo;
                    in.limit.limit = (uint32_t)limits[li];
                    in.limit.window_ms = windows[wi];
                    in.limit.burst = in.limit.limit;
                    if (b > 0) {
                        in.limit.has_burst = true;
                        in.limit.burst = b == 1 ? 1 : 4294967295u;
                    }
                    in.tenant = tenants[(li + wi + (size_t)b) % 5];
                    snprintf(what, sizeof(what), "algo %u limit %llu window %llu burst %d tenant %u",
                             algo, (unsigned long long)limits[li],
                             (unsigned long long)windows[wi], b, in.tenant);
                    rl_buf_reset(&a);
                    RL_CHECK_INT_EQ(((li + wi) & 1) ? rl_wire_put_check(&a, &in)
                                                    : rl_wire_fast_put_check(&a, &in),
                                    0);
                    n = a.len - RL_WIRE_HDR_LEN;
                    RL_CHECK(rl_wire_fast_keyed(a.data + RL_WIRE_HDR_LEN, n, &out, &tail) != 0,
                             "%s: the relay's reader took it", what);
                    rc = rl_wire_fast_keyed_all(a.data + RL_WIRE_HDR_LEN, n, &out, &tail);
                    frc = rl_wire_decode_req(&d, a.data + RL_WIRE_HDR_LEN, n, &out, &f);
                    if (frc != 0) {
                        RL_CHECK(rc != 0, "%s: taken, the full decoder refuses: %s", what,
                                 f.msg);
                        refused++;
                        continue;
                    }
                    RL_CHECK(rc == 0, "%s: not taken", what);
                    RL_CHECK_INT_EQ(
                        rl_wire_fast_keyed_all(a.data + RL_WIRE_HDR_LEN, n, &out, &tail), 0);
                    RL_CHECK(out.limit.set && out.limit.algo == algo &&
                                 out.limit.limit == limits[li] &&
                                 out.limit.window_ms == windows[wi] && out.tenant == in.tenant,
                             "%s", what);
                    same_as_full_req(what, a.data + RL_WIRE_HDR_LEN, n, &out);
                    taken++;
                }
            }
        }
    }
    /* each bound was met both ways */
    ck_assert_int_gt(taken, 300);
    ck_assert_int_gt(refused, 100);
    rl_buf_deinit(&a);
    rl_wire_decoder_deinit(&d);
}
END_TEST

static Suite *
wire_fast_suite(void)
{
    Suite *s = suite_create("wire_fast");
    TCase *tc = tcase_create("wire_fast");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_takes_encoded_checks);
    tcase_add_test(tc, test_takes_encoded_replies);
    tcase_add_test(tc, test_takes_settles);
    tcase_add_test(tc, test_leaves_the_rest);
    tcase_add_test(tc, test_splice_limits);
    tcase_add_test(tc, test_differential_fuzz);
    tcase_add_test(tc, test_fast_put_check);
    tcase_add_test(tc, test_takes_inline_limits);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(wire_fast_suite)
