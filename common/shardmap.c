/*
 * shardmap: the key hash, rendezvous placement of shards on members, and the assignment
 * text format the rebalance tool writes. Everything here must agree bit for bit between
 * processes, so the mapping is pinned by known-answer tests (tests/common/check_shardmap.c)
 * and spelt out in docs/SHARDING.md. Not for membership (who is live) or for I/O.
 */
#include "shardmap.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * XXH3 inlined: the streaming path's XXH3_state_t on the stack then relies on no shared
 * library's layout, and the router's short keys hash no slower (0.3 ns of 15 faster than a
 * call into libxxhash, bench/shardmap_bench.c). Digests are the same: XXH3 is specified.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

/* The protocol's longest key: a 128-byte service, the 0x00, a 256-byte user. */
#define KEY_STACK (128 + 1 + 256)

/* Golden-ratio increment: spreads consecutive shard numbers over all 64 bits. */
#define SHARD_SPREAD 0x9e3779b97f4a7c15ull

static uint64_t
key_hash_stream(const char *service, size_t slen, const char *user, size_t ulen)
{
    XXH3_state_t st;
    static const unsigned char zero = 0;

    XXH3_INITSTATE(&st);
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, service, slen);
    XXH3_64bits_update(&st, &zero, 1);
    XXH3_64bits_update(&st, user, ulen);
    return XXH3_64bits_digest(&st);
}

uint64_t
rl_shardmap_key_hash(const char *service, size_t slen, const char *user, size_t ulen)
{
    unsigned char buf[KEY_STACK];

    /* Written so that slen + ulen cannot overflow. */
    if (ulen >= KEY_STACK || slen >= KEY_STACK - ulen) {
        return key_hash_stream(service, slen, user, ulen);
    }
    if (slen > 0) {
        memcpy(buf, service, slen);
    }
    buf[slen] = 0;
    if (ulen > 0) {
        memcpy(buf + slen + 1, user, ulen);
    }
    return XXH3_64bits(buf, slen + 1 + ulen);
}

/* SplitMix64's finalizer (Stafford's Mix13): a bijection with full avalanche. */
static inline uint64_t
mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The rendezvous weight of a member (by its name's hash) for a shard. */
static inline uint64_t
weight(uint64_t name_hash, uint32_t shard)
{
    return mix64(name_hash ^ ((uint64_t)shard * SHARD_SPREAD));
}

static uint64_t
name_hash(const char *name)
{
    return XXH3_64bits(name, strnlen(name, RL_SHARDMAP_NAME_MAX));
}

/* A byte that may appear in a node name in the text format. */
static bool
name_byte(unsigned char c)
{
    return c > 0x20 && c != 0x7f && c != '#';
}

/* A node name the text format can carry: 1..63 name bytes, NUL-terminated. */
static bool
name_ok(const char *name)
{
    size_t i;

    for (i = 0; i < RL_SHARDMAP_NAME_MAX && name[i] != '\0'; i++) {
        if (!name_byte((unsigned char)name[i])) {
            return false;
        }
    }
    return i > 0 && i < RL_SHARDMAP_NAME_MAX;
}

int
rl_assignment_init(struct rl_assignment *a, uint32_t nshards)
{
    a->nshards = 0;
    a->owner = NULL;
    if (nshards == 0 || nshards > RL_SHARDMAP_SHARDS_MAX) {
        return -EINVAL;
    }
    a->owner = calloc(nshards, sizeof(*a->owner));
    if (a->owner == NULL) {
        return -ENOMEM;
    }
    a->nshards = nshards;
    return 0;
}

void
rl_assignment_deinit(struct rl_assignment *a)
{
    free(a->owner);
    a->owner = NULL;
    a->nshards = 0;
}

int
rl_assignment_set(struct rl_assignment *a, uint32_t shard, const char *node)
{
    if (shard >= a->nshards) {
        return -EINVAL;
    }
    if (node == NULL || node[0] == '\0') {
        a->owner[shard][0] = '\0';
        return 0;
    }
    if (!name_ok(node)) {
        return -EINVAL;
    }
    strcpy(a->owner[shard], node);
    return 0;
}

/*
 * The text format's lexer: one line at a time, with its comment cut off, split into tokens
 * of name bytes separated by blanks. '\r' counts as a blank so that CRLF files parse.
 */
struct lexer {
    const char *p, *end; /* the rest of the text */
    const char *lp, *le; /* the current line, without its comment */
    unsigned line;
};

struct token {
    const char *p;
    size_t len;
};

static bool
blank(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

static bool
next_line(struct lexer *lx)
{
    const char *nl, *hash;

    if (lx->p >= lx->end) {
        return false;
    }
    nl = memchr(lx->p, '\n', (size_t)(lx->end - lx->p));
    lx->lp = lx->p;
    lx->le = nl != NULL ? nl : lx->end;
    lx->p = nl != NULL ? nl + 1 : lx->end;
    hash = memchr(lx->lp, '#', (size_t)(lx->le - lx->lp));
    if (hash != NULL) {
        lx->le = hash;
    }
    lx->line++;
    return true;
}

/*
 * The next token of the line: 1 with *t set, 0 at the end of the line, or -1 at a byte that
 * is neither a blank nor a name byte (a control byte or NUL), with *t on that byte.
 */
static int
next_token(struct lexer *lx, struct token *t)
{
    while (lx->lp < lx->le && blank((unsigned char)*lx->lp)) {
        lx->lp++;
    }
    if (lx->lp == lx->le) {
        return 0;
    }
    t->p = lx->lp;
    while (lx->lp < lx->le && name_byte((unsigned char)*lx->lp)) {
        lx->lp++;
    }
    t->len = (size_t)(lx->lp - t->p);
    if (t->len == 0) {
        return -1;
    }
    return 1;
}

/* Decimal digits only, at most 10 of them: sets *v (which may exceed UINT32_MAX). */
static bool
token_number(const struct token *t, uint64_t *v)
{
    size_t i;

    if (t->len == 0 || t->len > 10) {
        return false;
    }
    *v = 0;
    for (i = 0; i < t->len; i++) {
        if (t->p[i] < '0' || t->p[i] > '9') {
            return false;
        }
        *v = *v * 10 + (uint64_t)(t->p[i] - '0');
    }
    return true;
}

static bool
token_is(const struct token *t, const char *s)
{
    return t->len == strlen(s) && memcmp(t->p, s, t->len) == 0;
}

/* Quotes at most this many bytes of a token in a message. */
#define QUOTE_MAX 32

/* Writes "line N: " and the message into err, when there is one. Returns -EINVAL. */
__attribute__((format(printf, 4, 5))) static int
parse_error(char *err, size_t errlen, unsigned line, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (err == NULL || errlen == 0) {
        return -EINVAL;
    }
    n = snprintf(err, errlen, "line %u: ", line);
    if (n >= 0 && (size_t)n < errlen) {
        va_start(ap, fmt);
        vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

#define QUOTED(t) (int)((t)->len < QUOTE_MAX ? (t)->len : QUOTE_MAX), (t)->p

static int
parse_header(struct lexer *lx, uint32_t nshards, char *err, size_t errlen)
{
    struct token t;
    uint64_t v;
    int rc;

    if (!next_line(lx) || next_token(lx, &t) != 1 || !token_is(&t, "rl-assignment")) {
        return parse_error(err, errlen, 1, "expected \"rl-assignment 1 SHARDS\"");
    }
    if (next_token(lx, &t) != 1) {
        return parse_error(err, errlen, 1, "expected \"rl-assignment 1 SHARDS\"");
    }
    if (!token_is(&t, "1")) {
        return parse_error(err, errlen, 1, "unsupported version \"%.*s\"", QUOTED(&t));
    }
    if (next_token(lx, &t) != 1 || !token_number(&t, &v)) {
        return parse_error(err, errlen, 1, "shard count is missing or not a number");
    }
    if (v != nshards) {
        return parse_error(err, errlen, 1, "assignment is for %llu shards, not %u",
                           (unsigned long long)v, nshards);
    }
    rc = next_token(lx, &t);
    if (rc != 0) {
        return parse_error(err, errlen, 1, "unexpected bytes after the shard count");
    }
    return 0;
}

/* One "SHARD NODE" line into tmp; lines[s] is where shard s was set, 0 for nowhere. */
static int
parse_override(struct lexer *lx, struct rl_assignment *tmp, unsigned *lines, char *err,
               size_t errlen)
{
    struct token t, node;
    uint64_t v;
    uint32_t s;
    int rc;

    rc = next_token(lx, &t);
    if (rc == 0) {
        return 0;
    }
    if (rc < 0) {
        return parse_error(err, errlen, lx->line, "control byte 0x%02x", (unsigned char)*t.p);
    }
    if (!token_number(&t, &v)) {
        return parse_error(err, errlen, lx->line, "shard \"%.*s\" is not a number", QUOTED(&t));
    }
    if (v >= tmp->nshards) {
        return parse_error(err, errlen, lx->line, "shard %llu is out of range (0..%u)",
                           (unsigned long long)v, tmp->nshards - 1);
    }
    s = (uint32_t)v;
    if (lines[s] != 0) {
        return parse_error(err, errlen, lx->line, "shard %u is already assigned on line %u", s,
                           lines[s]);
    }
    rc = next_token(lx, &node);
    if (rc == 0) {
        return parse_error(err, errlen, lx->line, "shard %u has no node name", s);
    }
    if (rc < 0) {
        return parse_error(err, errlen, lx->line, "control byte 0x%02x", (unsigned char)*node.p);
    }
    if (node.len >= RL_SHARDMAP_NAME_MAX) {
        return parse_error(err, errlen, lx->line, "node name is longer than %d bytes",
                           RL_SHARDMAP_NAME_MAX - 1);
    }
    rc = next_token(lx, &t);
    if (rc != 0) {
        return parse_error(err, errlen, lx->line, "unexpected bytes after the node name");
    }
    memcpy(tmp->owner[s], node.p, node.len);
    tmp->owner[s][node.len] = '\0';
    lines[s] = lx->line;
    return 0;
}

int
rl_assignment_parse(struct rl_assignment *a, const char *text, size_t len, char *err, size_t errlen)
{
    struct rl_assignment tmp;
    struct lexer lx;
    unsigned *lines = NULL;
    int rc;

    if (err != NULL && errlen > 0) {
        err[0] = '\0';
    }
    if (text == NULL) {
        text = "";
        len = 0;
    }
    lx = (struct lexer){.p = text, .end = text + len};
    rc = rl_assignment_init(&tmp, a->nshards);
    if (rc != 0) {
        return rc;
    }
    lines = calloc(a->nshards, sizeof(*lines));
    if (lines == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    rc = parse_header(&lx, a->nshards, err, errlen);
    while (rc == 0 && next_line(&lx)) {
        rc = parse_override(&lx, &tmp, lines, err, errlen);
    }
    if (rc == 0) {
        /* Swap, so that a failed parse leaves a as it was. */
        char(*old)[RL_SHARDMAP_NAME_MAX] = a->owner;

        a->owner = tmp.owner;
        tmp.owner = old;
    }
out:
    free(lines);
    rl_assignment_deinit(&tmp);
    return rc;
}

int
rl_assignment_format(const struct rl_assignment *a, char **out, size_t *outlen)
{
    /* A line is at most 7 digits (shards <= 1048576), a space, 63 bytes and '\n'. */
    const size_t line_max = 7 + 1 + (RL_SHARDMAP_NAME_MAX - 1) + 1;
    size_t cap, len, n = 0;
    uint32_t s;
    char *buf;

    for (s = 0; s < a->nshards; s++) {
        if (a->owner[s][0] == '\0') {
            continue;
        }
        if (!name_ok(a->owner[s])) {
            return -EINVAL;
        }
        n++;
    }
    cap = 32 + n * line_max + 1;
    buf = malloc(cap);
    if (buf == NULL) {
        return -ENOMEM;
    }
    len = (size_t)snprintf(buf, cap, "rl-assignment 1 %u\n", a->nshards);
    for (s = 0; s < a->nshards; s++) {
        if (a->owner[s][0] != '\0') {
            len += (size_t)snprintf(buf + len, cap - len, "%u %s\n", s, a->owner[s]);
        }
    }
    *out = buf;
    *outlen = len;
    return 0;
}

static int
member_cmp(const void *x, const void *y)
{
    const struct rl_member *a = x, *b = y;

    return strcmp(a->name, b->name);
}

static bool
member_ok(const struct rl_member *m)
{
    return m->name[0] != '\0' && memchr(m->name, '\0', RL_SHARDMAP_NAME_MAX) != NULL;
}

int
rl_shardmap_create(struct rl_shardmap **out, uint32_t nshards, const struct rl_member *members,
                   size_t nmembers, const struct rl_assignment *assignment)
{
    struct rl_shardmap *m;
    uint64_t *hash = NULL;
    uint32_t s, best, o;
    uint64_t w, bw;
    size_t i;
    int rc = -EINVAL;

    *out = NULL;
    if (nshards == 0 || nshards > RL_SHARDMAP_SHARDS_MAX || nmembers >= RL_SHARDMAP_NONE ||
        (assignment != NULL && assignment->nshards != nshards)) {
        return -EINVAL;
    }
    for (i = 0; i < nmembers; i++) {
        if (!member_ok(&members[i])) {
            return -EINVAL;
        }
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return -ENOMEM;
    }
    m->nshards = nshards;
    m->nmembers = nmembers;
    m->owner = malloc(nshards * sizeof(*m->owner));
    m->members = malloc((nmembers > 0 ? nmembers : 1) * sizeof(*m->members));
    hash = malloc((nmembers > 0 ? nmembers : 1) * sizeof(*hash));
    if (m->owner == NULL || m->members == NULL || hash == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    if (nmembers > 0) {
        memcpy(m->members, members, nmembers * sizeof(*members));
        qsort(m->members, nmembers, sizeof(*m->members), member_cmp);
    }
    for (i = 0; i < nmembers; i++) {
        /* Two members of one name would make the table depend on their order. */
        if (i > 0 && strcmp(m->members[i - 1].name, m->members[i].name) == 0) {
            rc = -EINVAL;
            goto fail;
        }
        hash[i] = name_hash(m->members[i].name);
    }
    for (s = 0; s < nshards; s++) {
        if (nmembers == 0) {
            m->owner[s] = RL_SHARDMAP_NONE;
            continue;
        }
        /* Members are sorted, so on equal weights the smaller name keeps the shard. */
        best = 0;
        bw = weight(hash[0], s);
        for (i = 1; i < nmembers; i++) {
            w = weight(hash[i], s);
            if (w > bw) {
                bw = w;
                best = (uint32_t)i;
            }
        }
        m->owner[s] = best;
        if (assignment != NULL && assignment->owner[s][0] != '\0') {
            o = rl_shardmap_find(m, assignment->owner[s]);
            if (o != RL_SHARDMAP_NONE) {
                m->owner[s] = o;
            }
        }
    }
    free(hash);
    *out = m;
    return 0;
fail:
    free(hash);
    rl_shardmap_destroy(m);
    return rc;
}

void
rl_shardmap_destroy(struct rl_shardmap *m)
{
    if (m == NULL) {
        return;
    }
    free(m->members);
    free(m->owner);
    free(m);
}

uint64_t
rl_shardmap_digest(const struct rl_shardmap *m)
{
    XXH3_state_t st;
    unsigned char buf[4096];
    size_t len = 4, nl;
    uint32_t s, o;

    XXH3_INITSTATE(&st);
    XXH3_64bits_reset(&st);
    buf[0] = (unsigned char)m->nshards; /* little-endian, whatever the host's order */
    buf[1] = (unsigned char)(m->nshards >> 8);
    buf[2] = (unsigned char)(m->nshards >> 16);
    buf[3] = (unsigned char)(m->nshards >> 24);
    /* Batched through buf: one update per few hundred shards, not one per name. */
    for (s = 0; s < m->nshards; s++) {
        if (len > sizeof(buf) - RL_SHARDMAP_NAME_MAX) {
            XXH3_64bits_update(&st, buf, len);
            len = 0;
        }
        o = m->owner[s];
        if (o != RL_SHARDMAP_NONE) {
            /* A member's name is NUL-terminated within RL_SHARDMAP_NAME_MAX (create). */
            nl = strnlen(m->members[o].name, RL_SHARDMAP_NAME_MAX - 1);
            memcpy(buf + len, m->members[o].name, nl);
            len += nl;
        }
        buf[len++] = 0;
    }
    XXH3_64bits_update(&st, buf, len);
    return XXH3_64bits_digest(&st);
}

uint32_t
rl_shardmap_find(const struct rl_shardmap *m, const char *name)
{
    size_t lo = 0, hi = m->nmembers, mid;
    int c;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        c = strcmp(name, m->members[mid].name);
        if (c == 0) {
            return (uint32_t)mid;
        }
        if (c < 0) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return RL_SHARDMAP_NONE;
}

uint32_t
rl_shardmap_hrw(uint32_t shard, const struct rl_member *members, size_t n)
{
    uint32_t best = RL_SHARDMAP_NONE;
    uint64_t w, bw = 0;
    size_t i;

    for (i = 0; i < n; i++) {
        w = weight(name_hash(members[i].name), shard);
        if (best == RL_SHARDMAP_NONE || w > bw ||
            (w == bw && strncmp(members[i].name, members[best].name, RL_SHARDMAP_NAME_MAX) < 0)) {
            bw = w;
            best = (uint32_t)i;
        }
    }
    return best;
}

void
rl_shardmap_balance(const struct rl_shardmap *m, uint32_t *max, double *mean)
{
    uint32_t *count, s, owned = 0;
    size_t i;

    *max = 0;
    *mean = 0;
    if (m->nmembers == 0) {
        return;
    }
    count = calloc(m->nmembers, sizeof(*count));
    if (count == NULL) {
        /* Counting without a buffer: O(S * n), but balance is a report, not a hot path. */
        for (i = 0; i < m->nmembers; i++) {
            uint32_t c = 0;

            for (s = 0; s < m->nshards; s++) {
                c += m->owner[s] == i;
            }
            *max = c > *max ? c : *max;
            owned += c;
        }
    } else {
        for (s = 0; s < m->nshards; s++) {
            if (m->owner[s] != RL_SHARDMAP_NONE) {
                count[m->owner[s]]++;
                owned++;
            }
        }
        for (i = 0; i < m->nmembers; i++) {
            *max = count[i] > *max ? count[i] : *max;
        }
        free(count);
    }
    *mean = (double)owned / (double)m->nmembers;
}

int
rl_view_set_members(struct rl_view *v, const struct rl_member *members, size_t n)
{
    struct rl_member *copy = NULL;

    if (n > 0) {
        copy = malloc(n * sizeof(*copy));
        if (copy == NULL) {
            return -ENOMEM;
        }
        memcpy(copy, members, n * sizeof(*copy));
    }
    free(v->members);
    v->members = copy;
    v->nmembers = n;
    return 0;
}

int
rl_view_set_assignment(struct rl_view *v, const char *text, size_t len, int64_t version)
{
    char *copy = NULL;

    if (len > 0) {
        copy = malloc(len);
        if (copy == NULL) {
            return -ENOMEM;
        }
        memcpy(copy, text, len);
    }
    free(v->asg_text);
    v->asg_text = copy;
    v->asg_len = len;
    v->asg_version = version;
    return 0;
}

void
rl_view_deinit(struct rl_view *v)
{
    free(v->members);
    free(v->asg_text);
    memset(v, 0, sizeof(*v));
}

int
rl_shardmap_build(struct rl_shardmap **out, uint32_t nshards, const struct rl_view *v, char *err,
                  size_t errlen)
{
    struct rl_assignment a;
    bool have = false;
    int rc;

    if (errlen > 0) {
        err[0] = '\0';
    }
    if (v->asg_len > 0) {
        rc = rl_assignment_init(&a, nshards);
        if (rc != 0) {
            return rc;
        }
        if (rl_assignment_parse(&a, v->asg_text, v->asg_len, err, errlen) == 0) {
            have = true;
        } else {
            rl_assignment_deinit(&a);
        }
    }
    rc = rl_shardmap_create(out, nshards, v->members, v->nmembers, have ? &a : NULL);
    if (have) {
        rl_assignment_deinit(&a);
    }
    return rc;
}
