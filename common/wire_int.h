/*
 * wire_int: what the files of the codec (wire.c, wire_req.c, wire_reply.c, wire_put.c) share
 * and nobody else uses: the scan-then-unpack step and the field readers every decoder is built
 * from. Not a public API: include wire.h.
 */
#ifndef RL_WIRE_INT_H
#define RL_WIRE_INT_H

#include "wire.h"

/*
 * Scans, then unpacks into the decoder's zone. Returns NULL with *obj set, or the reason
 * the bytes are not one acceptable value (*nomem set when only memory was short). A value
 * nested deeper than 32 containers is one value msgpack-c cannot decode: "nested deeper than
 * 32", with *deep (when not NULL) the index of the outermost container's element it is in;
 * else *deep is -1.
 */
const char *rl_wire_unpack(struct rl_wire_decoder *d, const char *p, size_t n, msgpack_object *obj,
                           bool *nomem, long *deep);

/* Read by hand (wire_fast.c, and wire_req.c's deep requests): an unsigned integer in a
 * positive fixint or a uint 8, 16, 32 (or 64 when wide) format, at p[*i], advancing *i.
 * False for every other format and for a value cut by the end. */
static inline bool
wire_uint_at(const unsigned char *p, size_t n, size_t *i, bool wide, uint64_t *v)
{
    size_t at = *i;
    size_t w;
    uint64_t x = 0;
    unsigned char b;

    if (at >= n) {
        return false;
    }
    b = p[at];
    if (b <= 0x7f) {
        *v = b;
        *i = at + 1;
        return true;
    }
    switch (b) {
    case 0xcc:
        w = 1;
        break;
    case 0xcd:
        w = 2;
        break;
    case 0xce:
        w = 4;
        break;
    case 0xcf:
        if (!wide) {
            return false;
        }
        w = 8;
        break;
    default:
        return false;
    }
    if (n - at - 1 < w) {
        return false;
    }
    for (size_t k = 1; k <= w; k++) {
        x = (x << 8) | p[at + k];
    }
    *v = x;
    *i = at + 1 + w;
    return true;
}

/* An unsigned integer of at most max. */
static inline bool
wire_uint(const msgpack_object *o, uint64_t max, uint64_t *v)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max) {
        return false;
    }
    *v = o->via.u64;
    return true;
}

static inline bool
wire_str(const msgpack_object *o, uint32_t min, uint32_t max, struct rl_wire_str *s)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size < min || o->via.str.size > max) {
        return false;
    }
    s->ptr = o->via.str.ptr;
    s->len = o->via.str.size;
    return true;
}

#endif
