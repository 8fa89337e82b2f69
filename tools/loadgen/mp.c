/*
 * mp: rl-bench's hand encoding and decoding of MessagePack (see mp.h). Big-endian, as the
 * format says. Not for input that must be fully validated: rl_mp_read_check() rejects
 * what it does not recognise and lets the general decoder judge it.
 */
#include "mp.h"

#include <string.h>

#include "wire.h"

char *
rl_mp_put_uint(char *p, uint64_t v)
{
    unsigned char *u = (unsigned char *)p;

    if (v < 128) {
        *u = (unsigned char)v;
        return p + 1;
    }
    if (v < 256) {
        u[0] = 0xcc;
        u[1] = (unsigned char)v;
        return p + 2;
    }
    if (v < 65536) {
        u[0] = 0xcd;
        u[1] = (unsigned char)(v >> 8);
        u[2] = (unsigned char)v;
        return p + 3;
    }
    if (v <= UINT32_MAX) {
        u[0] = 0xce;
        u[1] = (unsigned char)(v >> 24);
        u[2] = (unsigned char)(v >> 16);
        u[3] = (unsigned char)(v >> 8);
        u[4] = (unsigned char)v;
        return p + 5;
    }
    u[0] = 0xcf;
    for (int i = 0; i < 8; i++) {
        u[1 + i] = (unsigned char)(v >> (56 - 8 * i));
    }
    return p + 9;
}

char *
rl_mp_put_str(char *p, const char *s, size_t n)
{
    unsigned char *u = (unsigned char *)p;

    if (n < 32) {
        *u = (unsigned char)(0xa0 | n);
        p += 1;
    } else {
        u[0] = 0xd9;
        u[1] = (unsigned char)n;
        p += 2;
    }
    memcpy(p, s, n);
    return p + n;
}

static inline int
mp_get_uint(const unsigned char **pp, const unsigned char *end, uint64_t *v)
{
    const unsigned char *p = *pp;
    uint64_t x = 0;
    size_t n, i;

    if (p >= end) {
        return -1;
    }
    if (*p < 0x80) {
        *v = *p;
        *pp = p + 1;
        return 0;
    }
    switch (*p) {
    case 0xcc:
        n = 1;
        break;
    case 0xcd:
        n = 2;
        break;
    case 0xce:
        n = 4;
        break;
    case 0xcf:
        n = 8;
        break;
    default:
        return -1;
    }
    p++;
    if ((size_t)(end - p) < n) {
        return -1;
    }
    for (i = 0; i < n; i++) {
        x = (x << 8) | p[i];
    }
    *v = x;
    *pp = p + n;
    return 0;
}

char *
rl_mp_put_int32(char *p, int32_t v)
{
    unsigned char *u = (unsigned char *)p;
    uint32_t x = (uint32_t)v;

    if (v >= 0) {
        return rl_mp_put_uint(p, (uint64_t)v);
    }
    if (v >= -32) {
        *u = (unsigned char)x; /* negative fixint: 0xe0..0xff */
        return p + 1;
    }
    if (v >= INT8_MIN) {
        u[0] = 0xd0;
        u[1] = (unsigned char)x;
        return p + 2;
    }
    if (v >= INT16_MIN) {
        u[0] = 0xd1;
        u[1] = (unsigned char)(x >> 8);
        u[2] = (unsigned char)x;
        return p + 3;
    }
    u[0] = 0xd2;
    u[1] = (unsigned char)(x >> 24);
    u[2] = (unsigned char)(x >> 16);
    u[3] = (unsigned char)(x >> 8);
    u[4] = (unsigned char)x;
    return p + 5;
}

int
rl_mp_read_check(const char *payload, size_t len, uint8_t op, uint64_t *id, uint64_t *code)
{
    const unsigned char *p = (const unsigned char *)payload, *end = p + len;
    uint64_t v;
    int i;

    if (len < 9 || p[0] != 0x97 || p[1] != op) {
        return -1;
    }
    p += 2;
    if (mp_get_uint(&p, end, id) != 0 || mp_get_uint(&p, end, code) != 0) {
        return -1;
    }
    for (i = 0; i < 4; i++) {
        if (mp_get_uint(&p, end, &v) != 0) {
            return -1;
        }
    }
    return p == end && *code < RL_WIRE_CODE_COUNT ? 0 : -1;
}
