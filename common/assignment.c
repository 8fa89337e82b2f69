/*
 * assignment: the rebalance tool's per-shard overrides and their text format
 * (docs/SHARDING.md, "The assignment"). Parsing is strict and formatting canonical, so the
 * same overrides always give the same bytes on every process. Not for placing shards
 * (shardmap.c applies an assignment) nor for where the text is kept (ZooKeeper, a file).
 */
#include "assignment.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
