/*
 * headers: the HTTP answer (status, RateLimit-* and Retry-After headers) of a CHECK reply,
 * for librlclient's rlc_http_* API; not an HTTP client nor server. The mapping of
 * docs/INTEGRATION.md, exactly: every client (this library, the Python client, the OpenResty
 * module) must produce the same strings, and tests/clib/check_http.c pins them.
 */
#include <ratelimiter/ratelimiter.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ceil(ms / 1000) without overflow, at most RLC_HTTP_MAX_SECONDS: what a server says is
 * never put in a header beyond the protocol's "never" (4294967295 ms). */
static uint64_t
ceil_s(uint64_t ms)
{
    uint64_t s = ms / 1000 + (ms % 1000 != 0);

    return s < RLC_HTTP_MAX_SECONDS ? s : RLC_HTTP_MAX_SECONDS;
}

static void
add(struct rlc_http_answer *a, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
add(struct rlc_http_answer *a, const char *name, const char *fmt, ...)
{
    struct rlc_http_header *h = &a->headers[a->nheaders++];
    va_list ap;

    snprintf(h->name, sizeof(h->name), "%s", name);
    va_start(ap, fmt);
    vsnprintf(h->value, sizeof(h->value), fmt, ap);
    va_end(ap);
}

/* The structured-field string of name: quoted, '"' and '\' escaped, non-printable ASCII
 * replaced by '_'. out holds at least 2 * RLC_HTTP_POLICY_MAX + 3 bytes. */
static void
sf_string(const char *name, size_t len, char *out)
{
    size_t o = 0;

    out[o++] = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)name[i];

        if (ch == '"' || ch == '\\') {
            out[o++] = '\\';
            out[o++] = (char)ch;
        } else if (ch < 0x20 || ch > 0x7e) {
            out[o++] = '_';
        } else {
            out[o++] = (char)ch;
        }
    }
    out[o++] = '"';
    out[o] = '\0';
}

static void
retry_after(struct rlc_http_answer *a, uint64_t retry_after_ms)
{
    uint64_t s = ceil_s(retry_after_ms);

    if (retry_after_ms > 0 && s < 1) {
        s = 1;
    }
    add(a, "Retry-After", "%" PRIu64, s);
}

int
rlc_http_answer(const struct rlc_reply *rep, const char *policy, uint32_t window_s, unsigned flags,
                struct rlc_http_answer *out)
{
    return rlc_http_answer_wait(rep, policy, window_s, flags, RLC_HTTP_MAX_WAIT_MS, out);
}

int
rlc_http_answer_wait(const struct rlc_reply *rep, const char *policy, uint32_t window_s,
                     unsigned flags, uint64_t max_wait_ms, struct rlc_http_answer *out)
{
    char name[2 * RLC_HTTP_POLICY_MAX + 3];
    size_t len;
    uint64_t t;
    uint32_t code;

    if (out == NULL) {
        return -EINVAL;
    }
    memset(out, 0, sizeof(*out));
    if (rep == NULL || policy == NULL) {
        return -EINVAL;
    }
    len = strlen(policy);
    if (len == 0 || len > RLC_HTTP_POLICY_MAX) {
        return -EINVAL;
    }
    code = rep->code;
    if (code == RLC_QUEUED && rep->retry_after_ms > max_wait_ms) {
        code = RLC_LIMITED; /* not held that long: refused, with when it would go */
    }
    switch (code) {
    case RLC_FAIL_OPEN:
    case RLC_NO_RULE:
        return 0; /* no decision made, or nothing limits it: no headers */
    case RLC_FAIL_CLOSED:
        out->status = 503;
        retry_after(out, rep->retry_after_ms);
        return 0;
    case RLC_ALLOWED:
    case RLC_QUEUED:
    case RLC_LIMITED:
        break;
    default:
        return -EINVAL;
    }
    sf_string(policy, len, name);
    t = ceil_s(rep->reset_ms);
    if (window_s > 0) {
        add(out, "RateLimit-Policy", "%s;q=%" PRIu64 ";w=%" PRIu32, name, rep->limit, window_s);
    } else {
        add(out, "RateLimit-Policy", "%s;q=%" PRIu64, name, rep->limit);
    }
    add(out, "RateLimit", "%s;r=%" PRIu64 ";t=%" PRIu64, name, rep->remaining, t);
    if (code == RLC_LIMITED) {
        out->status = 429;
        retry_after(out, rep->retry_after_ms);
    } else if (code == RLC_QUEUED) {
        out->wait_ms = rep->retry_after_ms;
    }
    if (flags & RLC_HTTP_LEGACY) {
        add(out, "X-RateLimit-Limit", "%" PRIu64, rep->limit);
        add(out, "X-RateLimit-Remaining", "%" PRIu64, rep->remaining);
        add(out, "X-RateLimit-Reset", "%" PRIu64, t);
    }
    return 0;
}

void
rlc_http_unreachable(int fail_closed, struct rlc_http_answer *out)
{
    if (out == NULL) {
        return;
    }
    memset(out, 0, sizeof(*out));
    if (fail_closed) {
        out->status = 503;
        add(out, "Retry-After", "1");
    }
}

int
rlc_http_format(const struct rlc_http_answer *a, char *buf, size_t len)
{
    size_t o = 0;

    if (a == NULL || buf == NULL) {
        return -EINVAL;
    }
    for (size_t i = 0; i < a->nheaders && i < RLC_HTTP_MAX_HEADERS; i++) {
        int n = snprintf(buf + o, len > o ? len - o : 0, "%s: %s\r\n", a->headers[i].name,
                         a->headers[i].value);

        if (n < 0 || o + (size_t)n >= len) {
            if (len > 0) {
                buf[0] = '\0';
            }
            return -ENOSPC;
        }
        o += (size_t)n;
    }
    if (len == 0) {
        return -ENOSPC;
    }
    buf[o] = '\0';
    return (int)o;
}

const char *
rlc_http_reason(int status)
{
    switch (status) {
    case 0:
    case 200:
        return "OK";
    case 429:
        return "Too Many Requests";
    case 503:
        return "Service Unavailable";
    default:
        return "";
    }
}
