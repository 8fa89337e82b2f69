/*
 * reqline: format, escape, unescape and parse of the request-log line (reqline.h). The
 * writer and the reader share this file so that the format has one definition; both run
 * per line at millions of lines a second, so neither uses stdio.
 */
#include "reqline.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#define BAD(reason) ((int)(reason) + 1)

static const char *const reason_text[] = {
#define RL_REQLINE_REASON_TEXT(n, s) s,
    RL_REQLINE_REASON_MAP(RL_REQLINE_REASON_TEXT)
#undef RL_REQLINE_REASON_TEXT
};

const char *
rl_reqline_reason_text(enum rl_reqline_reason r)
{
    if ((unsigned)r >= RL_REQLINE_REASON_COUNT) {
        return "unknown";
    }
    return reason_text[r];
}

/* ---- writing ------------------------------------------------------------------------------ */

static char *
put_u64(char *p, uint64_t v)
{
    char tmp[20];
    int n = 0;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0) {
        *p++ = tmp[--n];
    }
    return p;
}

size_t
rl_reqline_escape(char *out, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    char *p = out;

    if (n == 0) {
        *p++ = '-';
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];

        /* A field of just "-" reads back as empty: the one byte "-" is escaped. */
        if (c <= ' ' || c >= 0x7f || c == '%' || (n == 1 && c == '-')) {
            *p++ = '%';
            *p++ = hex[c >> 4];
            *p++ = hex[c & 15];
        } else {
            *p++ = (char)c;
        }
    }
    return (size_t)(p - out);
}

size_t
rl_reqline_format(char *buf, uint64_t ts_ms, uint32_t shard, const char *node, uint32_t code,
                  uint64_t key_hash, const char *service, size_t slen, const char *user,
                  size_t ulen)
{
    return rl_reqline_format_ex(buf, ts_ms, shard, node, code, key_hash, service, slen, user,
                                ulen, false);
}

size_t
rl_reqline_format_ex(char *buf, uint64_t ts_ms, uint32_t shard, const char *node, uint32_t code,
                     uint64_t key_hash, const char *service, size_t slen, const char *user,
                     size_t ulen, bool cached)
{
    return rl_reqline_format_tag(buf, ts_ms, shard, node, code, key_hash, service, slen, user,
                                 ulen, cached ? RL_REQLINE_TAG_CACHED : RL_REQLINE_TAG_NONE);
}

static const char *const reqline_tags[] = {
#define RL_REQLINE_TAG_WORD(n, s) s,
    RL_REQLINE_TAG_MAP(RL_REQLINE_TAG_WORD)
#undef RL_REQLINE_TAG_WORD
};

size_t
rl_reqline_format_tag(char *buf, uint64_t ts_ms, uint32_t shard, const char *node,
                      uint32_t code, uint64_t key_hash, const char *service, size_t slen,
                      const char *user, size_t ulen, enum rl_reqline_tag tag)
{
    char *p = buf;

    if (slen > RL_REQLINE_SERVICE_MAX) {
        slen = RL_REQLINE_SERVICE_MAX;
    }
    if (ulen > RL_REQLINE_USER_MAX) {
        ulen = RL_REQLINE_USER_MAX;
    }
    p = put_u64(p, ts_ms);
    *p++ = ' ';
    p = put_u64(p, shard);
    *p++ = ' ';
    if (node != NULL && node[0] != '\0') {
        size_t nl = strnlen(node, RL_REQLINE_NODE_MAX);

        memcpy(p, node, nl);
        p += nl;
    } else {
        *p++ = '-';
    }
    *p++ = ' ';
    p = put_u64(p, code);
    *p++ = ' ';
    for (int sh = 60; sh >= 0; sh -= 4) {
        *p++ = "0123456789abcdef"[(key_hash >> sh) & 15];
    }
    *p++ = ' ';
    p += rl_reqline_escape(p, service, slen);
    *p++ = ' ';
    p += rl_reqline_escape(p, user, ulen);
    if (tag != RL_REQLINE_TAG_NONE && (size_t)tag < sizeof(reqline_tags) / sizeof(reqline_tags[0])) {
        size_t tl = strlen(reqline_tags[tag]);

        *p++ = ' ';
        memcpy(p, reqline_tags[tag], tl);
        p += tl;
    }
    *p++ = '\n';
    return (size_t)(p - buf);
}

/* ---- reading ------------------------------------------------------------------------------ */

/* Hex digit values plus one, so that the default 0 means "not a hex digit" (see hex()). */
static const int8_t hexval[256] = {
    ['0'] = 0 + 1,  ['1'] = 1 + 1,  ['2'] = 2 + 1,  ['3'] = 3 + 1,  ['4'] = 4 + 1,  ['5'] = 5 + 1,
    ['6'] = 6 + 1,  ['7'] = 7 + 1,  ['8'] = 8 + 1,  ['9'] = 9 + 1,  ['a'] = 10 + 1, ['b'] = 11 + 1,
    ['c'] = 12 + 1, ['d'] = 13 + 1, ['e'] = 14 + 1, ['f'] = 15 + 1, ['A'] = 10 + 1, ['B'] = 11 + 1,
    ['C'] = 12 + 1, ['D'] = 13 + 1, ['E'] = 14 + 1, ['F'] = 15 + 1,
};

/* A hex digit's value, or -1. */
static inline int
hex(unsigned char c)
{
    return hexval[c] - 1;
}

/* A '%' at q (before e) followed by two hex digits, as the writer escapes a byte. */
static inline bool
escape_ok(const char *q, const char *e)
{
    return e - q >= 3 && hex((unsigned char)q[1]) >= 0 && hex((unsigned char)q[2]) >= 0;
}

/* A byte of SERVICE or USER as the writer escapes them. */
static inline bool
name_byte(unsigned char c)
{
    return c > ' ' && c < 0x7f;
}

int
rl_reqline_unescape(const char *in, size_t len, char *out)
{
    size_t i, n = 0;

    if (len == 1 && in[0] == '-') {
        return 0;
    }
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)in[i];

        if (!name_byte(c)) {
            return -EINVAL;
        }
        if (c == '%') {
            if (len - i < 3 || hex((unsigned char)in[i + 1]) < 0 ||
                hex((unsigned char)in[i + 2]) < 0) {
                return -EINVAL;
            }
            c = (unsigned char)(hex((unsigned char)in[i + 1]) << 4 | hex((unsigned char)in[i + 2]));
            i += 2;
        }
        out[n++] = (char)c;
    }
    return (int)n;
}

/* Skips a decimal field of 1..max digits followed by a space; its value in *v. */
static inline const char *
digits(const char *p, const char *e, unsigned max, uint64_t *v)
{
    const char *q = p;
    uint64_t x = 0;

    while (q < e && (unsigned)(*q - '0') < 10) {
        x = x * 10 + (uint64_t)(*q - '0');
        q++;
    }
    if (q == p || (size_t)(q - p) > max || q == e || *q != ' ') {
        return NULL;
    }
    *v = x;
    return q + 1;
}

/* Why a digit field failed: a missing field is a field-count error, else the field's own. */
static inline int
digits_reason(const char *p, const char *e, int own)
{
    const char *q = p;

    while (q < e && (unsigned)(*q - '0') < 10) {
        q++;
    }
    if (q == e || (q == p && *q == ' ')) {
        return BAD(RL_REQLINE_FIELDS);
    }
    return BAD(own);
}

int
rl_reqline_parse(const char *p, size_t n, uint32_t nshards, struct rl_reqline *out)
{
    const char *e = p + n, *q, *node, *sv, *us, *ue;
    uint64_t v, ts, code, hash = 0;
    uint32_t shard;
    enum rl_reqline_tag tag = RL_REQLINE_TAG_NONE;
    int i;

    if (n > 0 && e[-1] == '\r') {
        e--;
    }
    ue = e;
    /* TS_MS: at most 20 digits, what a uint64_t holds in decimal. */
    q = digits(p, e, 20, &ts);
    if (q == NULL) {
        return digits_reason(p, e, RL_REQLINE_TIMESTAMP);
    }
    p = q;
    q = digits(p, e, 10, &v);
    if (q == NULL) {
        return digits_reason(p, e, RL_REQLINE_SHARD);
    }
    if (v > UINT32_MAX || (nshards > 0 && v >= nshards)) {
        return BAD(RL_REQLINE_SHARD_RANGE);
    }
    shard = (uint32_t)v;
    p = q;
    /* NODE: a name, or "-". */
    node = p;
    for (q = p; q < e && *q != ' '; q++) {
        if ((unsigned char)*q < ' ' || *q == 0x7f) {
            return BAD(RL_REQLINE_NODE);
        }
    }
    if (q == p || q == e) {
        return BAD(RL_REQLINE_FIELDS);
    }
    out->nlen = (uint32_t)(q - node);
    p = q + 1;
    q = digits(p, e, 10, &code);
    if (q == NULL) {
        return digits_reason(p, e, RL_REQLINE_CODE);
    }
    p = q;
    /* KEYHASH: exactly 16 hex digits. */
    if (e - p < 17) {
        for (q = p; q < e && *q != ' '; q++) {
        }
        return q == e ? BAD(RL_REQLINE_FIELDS) : BAD(RL_REQLINE_KEYHASH);
    }
    for (i = 0; i < 16; i++) {
        int d = hex((unsigned char)p[i]);

        if (d < 0) {
            return p[i] == ' ' && i == 0 ? BAD(RL_REQLINE_FIELDS) : BAD(RL_REQLINE_KEYHASH);
        }
        hash = hash << 4 | (uint64_t)d;
    }
    if (p[16] != ' ') {
        return BAD(RL_REQLINE_KEYHASH);
    }
    p += 17;
    /* SERVICE and USER: name bytes, each '%' followed by two hex digits (on every line: a
     * reader that unescapes a key's names only the first time it sees the key still refuses a
     * later line with a bad escape). */
    sv = p;
    for (q = p; q < e && *q != ' '; q++) {
        if (!name_byte((unsigned char)*q) || (*q == '%' && !escape_ok(q, e))) {
            return BAD(RL_REQLINE_NAME);
        }
    }
    if (q == p || q == e) {
        return BAD(RL_REQLINE_FIELDS);
    }
    us = q + 1;
    for (q = us; q < e; q++) {
        if (*q == '%' && !escape_ok(q, e)) {
            return BAD(RL_REQLINE_NAME);
        }
        if (!name_byte((unsigned char)*q)) {
            if (*q == ' ' && q > us) {
                /* an eighth field: one of the tags' words, nothing after it */
                for (size_t t = 1; t < sizeof(reqline_tags) / sizeof(reqline_tags[0]); t++) {
                    size_t tl = strlen(reqline_tags[t]);

                    if ((size_t)(e - q) == tl + 1 && memcmp(q + 1, reqline_tags[t], tl) == 0) {
                        tag = (enum rl_reqline_tag)t;
                    }
                }
                if (tag != RL_REQLINE_TAG_NONE) {
                    ue = q;
                    break;
                }
            }
            return *q == ' ' ? BAD(RL_REQLINE_FIELDS) : BAD(RL_REQLINE_NAME);
        }
    }
    if (q == us) {
        return BAD(RL_REQLINE_FIELDS);
    }
    if (nshards > 0 && hash % nshards != shard) {
        return BAD(RL_REQLINE_SHARD_MISMATCH);
    }
    out->ts_ms = ts;
    out->key_hash = hash;
    out->shard = shard;
    out->code = code > UINT32_MAX ? UINT32_MAX : (uint32_t)code;
    out->node = node;
    out->service = sv;
    out->slen = (uint32_t)(us - 1 - sv);
    out->user = us;
    out->ulen = (uint32_t)(ue - us);
    out->cached = tag == RL_REQLINE_TAG_CACHED;
    out->tag = tag;
    return 0;
}
