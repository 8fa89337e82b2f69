/*
 * wire: framing, the scan and the op table of the v1 codec on msgpack-c. Decoding is two
 * passes: a hand-written scan of the msgpack headers proves the payload is exactly one value
 * whose every length and count fits the bytes present and whose nesting is bounded, and only
 * then msgpack-c builds the object tree in the decoder's zone. The scan is what keeps a
 * hostile 10-byte frame claiming four billion elements from reaching msgpack-c, which would
 * allocate for the claim. This file also holds the names of the protocol's enums and the op
 * table's rows (wire.h); what each message holds is decoded in wire_req.c (requests) and
 * wire_reply.c (replies), and encoded in wire_put.c.
 */
#include "wire.h"
#include "wire_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
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

/* Each op's position in the op table, so a row is found by its code in one index. */
enum wire_op_row {
#define WIRE_OP_ROW_ENUM(A, N, ...) WIRE_OP_ROW_##N,
    RL_WIRE_OP_TABLE(WIRE_OP_ROW_ENUM, _)
#undef WIRE_OP_ROW_ENUM
        WIRE_OP_ROWS
};

#define WIRE_OP_NODE_NODE true
#define WIRE_OP_NODE_NONE false

static const struct rl_wire_op_info wire_ops[WIRE_OP_ROWS] = {
#define WIRE_OP_ROW(A, N, n, v, req_min, req_max, req, reply_len, reply, node, router)             \
    {v, #n, #N, req_min, req_max, reply_len, WIRE_OP_NODE_##node, RL_WIRE_ROUTE_##router},
    RL_WIRE_OP_TABLE(WIRE_OP_ROW, _)
#undef WIRE_OP_ROW
};

/* Opcodes fit a byte (ERROR is 255); 0 here is no op, else the row + 1. */
static const uint8_t wire_op_index[256] = {
#define WIRE_OP_INDEX(A, N, n, v, ...) [v] = WIRE_OP_ROW_##N + 1,
    RL_WIRE_OP_TABLE(WIRE_OP_INDEX, _)
#undef WIRE_OP_INDEX
};

const struct rl_wire_op_info *
rl_wire_op_info(uint32_t op)
{
    if (op >= sizeof(wire_op_index) || wire_op_index[op] == 0) {
        return NULL;
    }
    return &wire_ops[wire_op_index[op] - 1];
}

const struct rl_wire_op_info *
rl_wire_ops(size_t *n)
{
    *n = WIRE_OP_ROWS;
    return wire_ops;
}

const char *
rl_wire_op_name(uint32_t op)
{
    const struct rl_wire_op_info *info = rl_wire_op_info(op);

    return info != NULL ? info->name : "?";
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
    *payload_len = len;
    if (n - RL_WIRE_HDR_LEN < len) {
        return 0;
    }
    *payload_len = len;
    return 1;
}

int
rl_wire_decoder_init(struct rl_wire_decoder *d)
{
    d->no_clock = false;
    return msgpack_zone_init(&d->zone, WIRE_ZONE_CHUNK) ? 0 : -ENOMEM;
}

void
rl_wire_decoder_deinit(struct rl_wire_decoder *d)
{
    msgpack_zone_destroy(&d->zone);
}

/* wire_scan's answer when a deep value's stack could not be had. */
static const char wire_nomem[] = "out of memory";

/*
 * Returns NULL when p[0..n) is exactly one msgpack value within the bounds above, else a
 * phrase saying why not. Iterative, so its stack use does not depend on the input. A value
 * nested deeper than WIRE_DEPTH_MAX is still one value (its levels' counts kept on the heap
 * past that, bounded by the frame): *deep is then the index of the element of the outermost
 * container it is in (0 for the container itself), else -1; msgpack-c will not decode it.
 */
static const char *
wire_scan(const char *data, size_t n, long *deep)
{
    const unsigned char *p = (const unsigned char *)data;
    const unsigned char *end = p + n;
    uint32_t small[WIRE_DEPTH_MAX]; /* children still due in each open container (a count
                                       never passes the frame's bytes: see pending) */
    uint32_t *left = small;
    size_t cap = WIRE_DEPTH_MAX;
    uint32_t root = 0; /* the outermost container's children */
    size_t top = 0;
    const char *why = NULL;
    /*
     * Values due anywhere and not yet started. Each needs at least one byte, so a count
     * that would push this past the bytes left is a lie, caught at its header.
     */
    uint64_t pending = 1;

    *deep = -1;
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
            why = "truncated value";
            goto out;
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
                why = "reserved byte 0xc1";
                goto out;
            }
        }
        hdr += lenw;
        if (hdr > avail) {
            why = "truncated value";
            goto out;
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
            why = "length exceeds the frame";
            goto out;
        }
        p += body;
        avail -= (size_t)body;
        pending--;

        if (container) {
            /* msgpack-c refuses a container, even an empty one, with 32 already open. */
            if (top >= WIRE_DEPTH_MAX && *deep < 0) {
                *deep = (long)(root - left[0]);
            }
            if (count > 0) {
                pending += count;
                if (pending > avail) {
                    why = "count exceeds the frame";
                    goto out;
                }
                if (top == cap) {
                    /* deeper than msgpack-c goes: each level takes a byte, so n suffice */
                    size_t ncap = cap * 4 < n ? cap * 4 : n;
                    uint32_t *nl = malloc(ncap * sizeof(*nl));

                    if (nl == NULL) {
                        why = wire_nomem;
                        goto out;
                    }
                    memcpy(nl, left, top * sizeof(*nl));
                    if (left != small) {
                        free(left);
                    }
                    left = nl;
                    cap = ncap;
                }
                if (top == 0) {
                    root = (uint32_t)count;
                }
                left[top++] = (uint32_t)count;
                continue;
            }
        }
        /* A value is complete: so is every container whose last child it was. */
        while (top > 0 && --left[top - 1] == 0) {
            top--;
        }
    }
    if (p != end) {
        why = "trailing bytes after the value";
    }
out:
    if (left != small) {
        free(left);
    }
    return why;
}

/*
 * Scans, then unpacks into the decoder's zone. Returns NULL with *obj set, or the reason
 * the bytes are not one acceptable value (*nomem set when only memory was short; *deep, when
 * not NULL, the element of a value nested deeper than msgpack-c decodes, else -1).
 */
const char *
rl_wire_unpack(struct rl_wire_decoder *d, const char *p, size_t n, msgpack_object *obj, bool *nomem,
               long *deep)
{
    const char *why;
    size_t off = 0;
    msgpack_unpack_return rc;
    long too_deep;

    *nomem = false;
    if (deep != NULL) {
        *deep = -1;
    }
    /*
     * Cleared here rather than after use, so the zone is left as the last frame made it;
     * the tests read that to prove a rejected frame never reached msgpack-c.
     */
    msgpack_zone_clear(&d->zone);
    why = wire_scan(p, n, &too_deep);
    if (why == wire_nomem) {
        *nomem = true;
        return why;
    }
    if (why != NULL) {
        return why;
    }
    if (too_deep >= 0) {
        if (deep != NULL) {
            *deep = too_deep;
        }
        return "nested deeper than 32";
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
