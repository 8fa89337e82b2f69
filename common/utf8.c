/*
 * utf8: see utf8.h. One decoder, by the lead byte's length and the smallest code point that
 * length may hold; the check and the escaper walk a string with it.
 */
#include "utf8.h"

#include <stdio.h>
#include <string.h>

size_t
rl_utf8_char(const char *s, size_t n, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    uint32_t c, min;
    size_t len;

    if (n == 0) {
        return 0;
    }
    if (u[0] < 0x80) {
        *cp = u[0];
        return 1;
    }
    if (u[0] >= 0xc2 && u[0] <= 0xdf) {
        len = 2, c = u[0] & 0x1fu, min = 0x80;
    } else if (u[0] >= 0xe0 && u[0] <= 0xef) {
        len = 3, c = u[0] & 0x0fu, min = 0x800;
    } else if (u[0] >= 0xf0 && u[0] <= 0xf4) {
        len = 4, c = u[0] & 0x07u, min = 0x10000;
    } else {
        return 0; /* a continuation byte, or 0xc0, 0xc1, 0xf5..0xff: never a lead */
    }
    if (n < len) {
        return 0;
    }
    for (size_t i = 1; i < len; i++) {
        if ((u[i] & 0xc0) != 0x80) {
            return 0;
        }
        c = c << 6 | (u[i] & 0x3fu);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) {
        return 0;
    }
    *cp = c;
    return len;
}

bool
rl_utf8_is_control(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f);
}

/* The length of the printable character at s[0..n), or 0. */
static size_t
printable_len(const char *s, size_t n)
{
    uint32_t cp = 0;
    size_t len = rl_utf8_char(s, n, &cp);

    return len != 0 && !rl_utf8_is_control(cp) ? len : 0;
}

const char *
rl_utf8_check(const char *s, size_t n, size_t *at)
{
    for (size_t i = 0; i < n;) {
        size_t len = printable_len(s + i, n - i);

        if (len == 0) {
            uint32_t cp;

            *at = i;
            return rl_utf8_char(s + i, n - i, &cp) == 0 ? "is not valid UTF-8"
                                                        : "has a control character";
        }
        i += len;
    }
    return NULL;
}

size_t
rl_utf8_escape(char *dst, size_t cap, const char *s, size_t n, unsigned flags)
{
    bool prom = (flags & RL_UTF8_PROM) != 0;
    size_t w = 0;

    if (cap == 0) {
        return 0;
    }
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t adv = printable_len(s + i, n - i);
        const char *out = s + i;
        size_t olen = adv;
        char esc[8];

        if (prom && (c == '\\' || c == '"' || c == '\n')) {
            esc[0] = '\\';
            esc[1] = c == '\n' ? 'n' : (char)c;
            out = esc, olen = 2, adv = 1;
        } else if (adv == 0) {
            olen = (size_t)snprintf(esc, sizeof(esc), "%s\\x%02x", prom ? "\\" : "", c);
            out = esc, adv = 1;
        }
        if (olen >= cap - w) {
            break;
        }
        memcpy(dst + w, out, olen);
        w += olen;
        i += adv;
    }
    dst[w] = '\0';
    return w;
}
