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
    if (n > 1 && p[0] == '0') {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned char)p[i] - '0';

        if (d > 9 || x > (UINT64_MAX - d) / 10) {
            return -1;
        }
        x = x * 10 + d;
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

static int
parse_multibulk(char *buf, size_t len, struct rl_resp_cmd *cmd, size_t *used, const char **err)
{
    size_t n, off;
    int64_t count;
    int rc = line_end(buf, len, RL_RESP_HEADER_MAX, &n);

    if (rc < 0) {
        *err = "Protocol error: too big mbulk count string";
        return RL_RESP_ERR;
    }
    if (rc == 0) {
        return RL_RESP_MORE;
    }
    if (parse_ll(buf + 1, n - 1, &count) != 0 || count > (int64_t)RL_RESP_ARGS_MAX) {
        *err = "Protocol error: invalid multibulk length";
        return RL_RESP_ERR;
    }
    off = n + 2;
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
        rc = line_end(buf + off, len - off, RL_RESP_HEADER_MAX, &n);
        if (rc < 0) {
            *err = "Protocol error: too big bulk count string";
            return RL_RESP_ERR;
        }
        if (rc == 0) {
            return RL_RESP_MORE;
        }
        if (parse_ll(buf + off + 1, n - 1, &blen) != 0 || blen < 0 ||
            blen > (int64_t)RL_RESP_BULK_MAX || off + n + 2 + (size_t)blen + 2 > RL_RESP_CMD_MAX) {
            *err = "Protocol error: invalid bulk length";
            return RL_RESP_ERR;
        }
        off += n + 2;
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
    size_t n = strlen(w);

    if (a->len != n) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char c = a->ptr[i], d = w[i];

        c = (c >= 'a' && c <= 'z') ? (char)(c - 'a' + 'A') : c;
        d = (d >= 'a' && d <= 'z') ? (char)(d - 'a' + 'A') : d;
        if (c != d) {
            return false;
        }
    }
    return true;
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

/* type, v in decimal, CRLF (by hand: this is every integer of every reply). */
static int
put_head(struct rl_buf *b, char type, int64_t v)
{
    char tmp[24], *e = tmp + sizeof(tmp), *p = e;
    uint64_t x = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    char *d;
    size_t n;

    do {
        *--p = (char)('0' + x % 10);
        x /= 10;
    } while (x != 0);
    if (v < 0) {
        *--p = '-';
    }
    n = (size_t)(e - p);
    if (rl_buf_reserve(b, n + 3) != 0) {
        return -ENOMEM;
    }
    d = b->data + b->len;
    d[0] = type;
    memcpy(d + 1, p, n);
    d[n + 1] = '\r';
    d[n + 2] = '\n';
    b->len += n + 3;
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
