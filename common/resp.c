/*
 * resp: the RESP request reader and the reply writers (resp.h). The reader follows
 * redis-server's own (networking.c: processMultibulkBuffer, processInlineBuffer and
 * sdssplitargs for inline commands), with its error messages, but bounded by resp.h's limits
 * instead of Redis's configurable ones, and stricter on CRLF after a bulk string. Not for
 * the commands (router/resp.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "resp.h"

/* The line at p[0..len) ending in CR LF: its length before CR in *n. 1: found; 0: more
 * bytes needed; -1: no CR within max bytes, or CR not followed by LF. */
static int
line_end(const char *p, size_t len, size_t max, size_t *n)
{
    size_t lim = len < max ? len : max;
    const char *cr = memchr(p, '\r', lim);

    if (cr == NULL) {
        return len >= max ? -1 : 0;
    }
    if ((size_t)(cr - p) + 1 >= len) {
        return 0;
    }
    if (cr[1] != '\n') {
        return -1;
    }
    *n = (size_t)(cr - p);
    return 1;
}

/* A decimal integer, as Redis's string2ll reads it: optional '-', digits, nothing else. */
static int
parse_ll(const char *p, size_t n, int64_t *v)
{
    bool neg = false;
    uint64_t x = 0;

    if (n == 0) {
        return -1;
    }
    if (p[0] == '-') {
        neg = true;
        p++;
        n--;
        if (n == 0) {
            return -1;
        }
    }
    if (p[0] == '0' && (n > 1 || neg)) {
        return -1; /* a leading zero, and "-0", as string2ll */
    }
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned char)p[i] - '0';

        if (d > 9 || __builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, d, &x)) {
            return -1;
        }
    }
    if (neg) {
        if (x > (uint64_t)INT64_MAX + 1) {
            return -1;
        }
        *v = x == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)x;
    } else {
        if (x > (uint64_t)INT64_MAX) {
            return -1;
        }
        *v = (int64_t)x;
    }
    return 0;
}

/* len_line's answers besides 1 (a line read) and 0 (more bytes needed). */
#define LEN_LINE_LONG (-1) /* no CR LF within RL_RESP_HEADER_MAX */
#define LEN_LINE_NAN (-2)  /* not a number as string2ll reads one */

/*
 * The "*N" or "$N" line at p[0..len) (p[0] its type): N in *v and the line's length with CR
 * LF in *used (1), 0 when more bytes are needed, or LEN_LINE_*. Its common case, 1 to 18
 * digits with no leading zero then CR LF, in one pass; any other line through line_end and
 * parse_ll, which take the same lines with the same N.
 */
static int
len_line(const char *p, size_t len, int64_t *v, size_t *used)
{
    size_t i = 1, n;
    int64_t x = 0;
    int rc;

    while (i < len && i <= 18 && (unsigned char)(p[i] - '0') <= 9) {
        x = x * 10 + (p[i] - '0');
        i++;
    }
    if (i > 1 && i + 1 < len && p[i] == '\r' && p[i + 1] == '\n' && (i == 2 || p[1] != '0')) {
        *v = x;
        *used = i + 2;
        return 1;
    }
    rc = line_end(p, len, RL_RESP_HEADER_MAX, &n);
    if (rc <= 0) {
        return rc < 0 ? LEN_LINE_LONG : 0;
    }
    *used = n + 2;
    return parse_ll(p + 1, n - 1, v) == 0 ? 1 : LEN_LINE_NAN;
}

static int
parse_multibulk(char *buf, size_t len, struct rl_resp_cmd *cmd, size_t *used, const char **err)
{
    size_t n, off;
    int64_t count;
    int rc = len_line(buf, len, &count, &off);

    if (rc == LEN_LINE_LONG) {
        *err = "Protocol error: too big mbulk count string";
        return RL_RESP_ERR;
    }
    if (rc == 0) {
        return RL_RESP_MORE;
    }
    if (rc == LEN_LINE_NAN || count > (int64_t)RL_RESP_ARGS_MAX) {
        *err = "Protocol error: invalid multibulk length";
        return RL_RESP_ERR;
    }
    cmd->argc = 0;
    cmd->bytes = 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t blen;

        if (off >= len) {
            return RL_RESP_MORE;
        }
        if (buf[off] != '$') {
            static char msg[64];

            snprintf(msg, sizeof(msg), "Protocol error: expected '$', got '%c'",
                     (buf[off] >= 0x20 && buf[off] < 0x7f) ? buf[off] : '?');
            *err = msg;
            return RL_RESP_ERR;
        }
        rc = len_line(buf + off, len - off, &blen, &n);
        if (rc == LEN_LINE_LONG) {
            *err = "Protocol error: too big bulk count string";
            return RL_RESP_ERR;
        }
        if (rc == 0) {
            return RL_RESP_MORE;
        }
        if (rc == LEN_LINE_NAN || blen < 0 || blen > (int64_t)RL_RESP_BULK_MAX ||
            off + n + (size_t)blen + 2 > RL_RESP_CMD_MAX) {
            *err = "Protocol error: invalid bulk length";
            return RL_RESP_ERR;
        }
        off += n;
        if (len - off < (size_t)blen + 2) {
            return RL_RESP_MORE;
        }
        if (buf[off + blen] != '\r' || buf[off + blen + 1] != '\n') {
            *err = "Protocol error: bulk string not terminated by CRLF";
            return RL_RESP_ERR;
        }
        cmd->argv[cmd->argc].ptr = buf + off;
        cmd->argv[cmd->argc].len = (size_t)blen;
        cmd->argc++;
        cmd->bytes += (size_t)blen;
        off += (size_t)blen + 2;
    }
    *used = off;
    return RL_RESP_CMD;
}

static bool
is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int
hex_val(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* sdssplitargs on p[0..n) (a NUL ends the line, as in Redis's C string), in place. */
static int
split_inline(char *p, size_t n, struct rl_resp_cmd *cmd)
{
    size_t i = 0;
    char *nul = memchr(p, '\0', n);

    if (nul != NULL) {
        n = (size_t)(nul - p);
    }
    cmd->argc = 0;
    cmd->bytes = 0;
    for (;;) {
        bool inq = false, insq = false, done = false;
        char *start;
        size_t w = 0;

        while (i < n && is_space(p[i])) {
            i++;
        }
        if (i >= n) {
            return 0;
        }
        if (cmd->argc == RL_RESP_ARGS_MAX) {
            return -2;
        }
        start = p + i;
        while (!done) {
            char c = i < n ? p[i] : '\0';

            if (inq) {
                if (c == '\\' && i + 3 < n && p[i + 1] == 'x' && hex_val(p[i + 2]) >= 0 &&
                    hex_val(p[i + 3]) >= 0) {
                    start[w++] = (char)(hex_val(p[i + 2]) * 16 + hex_val(p[i + 3]));
                    i += 3;
                } else if (c == '\\' && i + 1 < n) {
                    char e = p[++i];

                    start[w++] = e == 'n'   ? '\n'
                                 : e == 'r' ? '\r'
                                 : e == 't' ? '\t'
                                 : e == 'b' ? '\b'
                                 : e == 'a' ? '\a'
                                            : e;
                } else if (c == '"') {
                    if (i + 1 < n && !is_space(p[i + 1])) {
                        return -1;
                    }
                    done = true;
                } else if (c == '\0') {
                    return -1;
                } else {
                    start[w++] = c;
                }
            } else if (insq) {
                if (c == '\\' && i + 1 < n && p[i + 1] == '\'') {
                    i++;
                    start[w++] = '\'';
                } else if (c == '\'') {
                    if (i + 1 < n && !is_space(p[i + 1])) {
                        return -1;
                    }
                    done = true;
                } else if (c == '\0') {
                    return -1;
                } else {
                    start[w++] = c;
                }
            } else {
                switch (c) {
                case ' ':
                case '\n':
                case '\r':
                case '\t':
                case '\0':
                    done = true;
                    break;
                case '"':
                    inq = true;
                    break;
                case '\'':
                    insq = true;
                    break;
                default:
                    start[w++] = c;
                    break;
                }
            }
            if (i < n) {
                i++;
            }
        }
        cmd->argv[cmd->argc].ptr = start;
        cmd->argv[cmd->argc].len = w;
        cmd->argc++;
        cmd->bytes += w;
    }
}

static int
parse_inline(char *buf, size_t len, struct rl_resp_cmd *cmd, size_t *used, const char **err)
{
    size_t lim = len < RL_RESP_INLINE_MAX ? len : RL_RESP_INLINE_MAX;
    char *nl = memchr(buf, '\n', lim);
    size_t n;
    int rc;

    if (nl == NULL) {
        if (len >= RL_RESP_INLINE_MAX) {
            *err = "Protocol error: too big inline request";
            return RL_RESP_ERR;
        }
        return RL_RESP_MORE;
    }
    n = (size_t)(nl - buf);
    *used = n + 1;
    if (n > 0 && buf[n - 1] == '\r') {
        n--;
    }
    rc = split_inline(buf, n, cmd);
    if (rc == -1) {
        *err = "Protocol error: unbalanced quotes in request";
        return RL_RESP_ERR;
    }
    if (rc == -2) {
        *err = "Protocol error: invalid multibulk length";
        return RL_RESP_ERR;
    }
    return RL_RESP_CMD;
}

int
rl_resp_parse(char *buf, size_t len, struct rl_resp_cmd *cmd, size_t *used, const char **err)
{
    if (len == 0) {
        return RL_RESP_MORE;
    }
    if (buf[0] == '*') {
        return parse_multibulk(buf, len, cmd, used, err);
    }
    return parse_inline(buf, len, cmd, used, err);
}

bool
rl_resp_is(const struct rl_resp_arg *a, const char *w)
{
    size_t i;

    for (i = 0; i < a->len; i++) {
        unsigned char c = (unsigned char)a->ptr[i], d = (unsigned char)w[i];

        if (d == 0) {
            return false; /* a is longer */
        }
        if (c != d) { /* the same letter in another case, or not equal */
            c |= 0x20;
            if (c != (d | 0x20) || c < 'a' || c > 'z') {
                return false;
            }
        }
    }
    return w[i] == 0;
}

int
rl_resp_int64(const struct rl_resp_arg *a, int64_t *v)
{
    return parse_ll(a->ptr, a->len, v);
}

static int
put_line(struct rl_buf *b, char type, const char *s, size_t n)
{
    char *d;

    if (rl_buf_reserve(b, n + 3) != 0) {
        return -ENOMEM;
    }
    d = b->data + b->len;
    d[0] = type;
    for (size_t i = 0; i < n; i++) {
        d[1 + i] = (s[i] == '\r' || s[i] == '\n') ? ' ' : s[i];
    }
    d[n + 1] = '\r';
    d[n + 2] = '\n';
    b->len += n + 3;
    return 0;
}

/* The most a head takes: its type, '-', 19 digits, CR LF. */
#define HEAD_MAX 24u

/* type, v in decimal, CRLF at d, which has HEAD_MAX bytes of room; returns its length. By
 * hand, two digits at a time: this is every integer of every reply. */
static size_t
head_write(char *d, char type, int64_t v)
{
    static const char pairs[] = "00010203040506070809101112131415161718192021222324252627282930"
                                "31323334353637383940414243444546474849505152535455565758596061"
                                "62636465666768697071727374757677787980818283848586878889909192"
                                "93949596979899";
    uint64_t x = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    /* the digits: from the bits, log10(2) ~ 1233 / 4096, then one compare */
    /* clang-format off */
    static const uint64_t pow10[20] = {
        1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000,
        10000000000ull, 100000000000ull, 1000000000000ull, 10000000000000ull,
        100000000000000ull, 1000000000000000ull, 10000000000000000ull, 100000000000000000ull,
        1000000000000000000ull, 10000000000000000000ull};
    /* clang-format on */
    size_t n = (size_t)(64 - __builtin_clzll(x | 1)) * 1233 >> 12, len;
    char *p;

    n += n < 20 && x >= pow10[n];
    n += n == 0;
    d[0] = type;
    p = d + 1;
    if (v < 0) {
        *p++ = '-';
    }
    len = (size_t)(p - d) + n;
    p += n;
    while (x >= 100) {
        unsigned i = (unsigned)(x % 100) * 2;

        x /= 100;
        *--p = pairs[i + 1];
        *--p = pairs[i];
    }
    if (x >= 10) {
        *--p = pairs[x * 2 + 1];
        *--p = pairs[x * 2];
    } else {
        *--p = (char)('0' + x);
    }
    d[len] = '\r';
    d[len + 1] = '\n';
    return len + 2;
}

static int
put_head(struct rl_buf *b, char type, int64_t v)
{
    if (rl_buf_reserve(b, HEAD_MAX) != 0) {
        return -ENOMEM;
    }
    b->len += head_write(b->data + b->len, type, v);
    return 0;
}

int
rl_resp_put_int_array(struct rl_buf *b, const int64_t *v, size_t n)
{
    char *d;

    if (n > RL_RESP_INT_ARRAY_MAX || rl_buf_reserve(b, (n + 1) * HEAD_MAX) != 0) {
        return -ENOMEM;
    }
    d = b->data + b->len;
    d += head_write(d, '*', (int64_t)n);
    for (size_t i = 0; i < n; i++) {
        d += head_write(d, ':', v[i]);
    }
    b->len = (size_t)(d - b->data);
    return 0;
}

int
rl_resp_put_simple(struct rl_buf *b, const char *s)
{
    return put_line(b, '+', s, strlen(s));
}

int
rl_resp_put_error(struct rl_buf *b, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0) {
        n = 0;
    }
    if ((size_t)n >= sizeof(msg)) {
        n = sizeof(msg) - 1;
    }
    return put_line(b, '-', msg, (size_t)n);
}

int
rl_resp_put_int(struct rl_buf *b, int64_t v)
{
    return put_head(b, ':', v);
}

int
rl_resp_put_bulk(struct rl_buf *b, const void *p, size_t n)
{
    if (put_head(b, '$', (int64_t)n) != 0 || rl_buf_append(b, p, n) != 0 ||
        rl_buf_append(b, "\r\n", 2) != 0) {
        return -ENOMEM;
    }
    return 0;
}

int
rl_resp_put_str(struct rl_buf *b, const char *s)
{
    return rl_resp_put_bulk(b, s, strlen(s));
}

int
rl_resp_put_null(struct rl_buf *b, int proto)
{
    return proto >= 3 ? rl_buf_append(b, "_\r\n", 3) : rl_buf_append(b, "$-1\r\n", 5);
}

int
rl_resp_put_array(struct rl_buf *b, size_t n)
{
    return put_head(b, '*', (int64_t)n);
}

int
rl_resp_put_map(struct rl_buf *b, size_t n, int proto)
{
    return proto >= 3 ? put_head(b, '%', (int64_t)n) : put_head(b, '*', (int64_t)(2 * n));
}

int
rl_resp_put_set(struct rl_buf *b, size_t n, int proto)
{
    return put_head(b, proto >= 3 ? '~' : '*', (int64_t)n);
}
