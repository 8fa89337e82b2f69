/*
 * reqline: the request-log line, the one definition of its format, written by the router's
 * request log (router/reqlog.c) and rl-genlog, read by rl-rebalance's scanner
 * (tools/rebalance/logscan.c). A line is
 *
 *     TS_MS SHARD NODE CODE KEYHASH SERVICE USER
 *
 * fields separated by one space, ended by '\n': TS_MS (ms since the epoch), SHARD and CODE
 * decimal, NODE a name or "-" when no node was involved, KEYHASH the 16 lower-case hex
 * digits of the key hash (shardmap.h), SERVICE and USER %-escaped (every byte outside '!'..'~',
 * and '%' itself, as %XX with lower-case hex digits; a field that is the one byte "-" as
 * %2d) and cut to 128 and 256 bytes before escaping, "-" for an empty field. An eighth
 * field, the word `cached`, marks an answer the router gave from its deny cache (no node was
 * asked); the word `adjust` or `release` marks an ADJUST's or a RELEASE's answer (CODE its
 * code; not a decision, but the node's load all the same); a line without one is a CHECK's,
 * answered by a node or by failure policy. NODE is the word
 * `backstop` when the router's backstop decided (router/backstop.h). Not for the writing
 * (reqlog.h) or counting (logscan.h).
 */
#ifndef RL_REQLINE_H
#define RL_REQLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RL_REQLINE_SERVICE_MAX 128u /* bytes of SERVICE kept, before escaping */
#define RL_REQLINE_USER_MAX 256u    /* bytes of USER kept, before escaping */
#define RL_REQLINE_NODE_MAX 64u     /* bytes of NODE kept */
/* The longest line rl_reqline_format writes, newline included. */
#define RL_REQLINE_MAX 1400u
/* The longest line a reader accepts, newline excluded. */
#define RL_REQLINE_READ_MAX 4096u

/* What a line's eighth field says: X(NAME, word); NONE has none. */
#define RL_REQLINE_TAG_MAP(X)                                                                      \
    X(NONE, "")                                                                                    \
    X(CACHED, "cached")                                                                            \
    X(ADJUST, "adjust")                                                                            \
    X(RELEASE, "release")

enum rl_reqline_tag {
#define RL_REQLINE_TAG_ENUM(n, s) RL_REQLINE_TAG_##n,
    RL_REQLINE_TAG_MAP(RL_REQLINE_TAG_ENUM)
#undef RL_REQLINE_TAG_ENUM
};

/* Why a line is malformed: X(NAME, phrase), in the order a reader checks. */
#define RL_REQLINE_REASON_MAP(X)                                                                   \
    X(FIELDS, "not 7 fields separated by single spaces")                                           \
    X(TIMESTAMP, "timestamp is not a number")                                                      \
    X(SHARD, "shard is not a number")                                                              \
    X(SHARD_RANGE, "shard is out of range for the cluster's shard count")                          \
    X(SHARD_MISMATCH, "shard is not KEYHASH mod SHARDS (a log from another shard count?)")         \
    X(CODE, "code is not a number")                                                                \
    X(NODE, "node holds a control byte")                                                           \
    X(KEYHASH, "key hash is not 16 hex digits")                                                    \
    X(NAME, "service or user holds a raw byte outside '!'..'~' or a bad %-escape")                 \
    X(TOO_LONG, "line is longer than 4096 bytes")

enum rl_reqline_reason {
#define RL_REQLINE_REASON_ENUM(n, s) RL_REQLINE_##n,
    RL_REQLINE_REASON_MAP(RL_REQLINE_REASON_ENUM)
#undef RL_REQLINE_REASON_ENUM
        RL_REQLINE_REASON_COUNT
};

/* The phrase of a reason, or "unknown". */
const char *rl_reqline_reason_text(enum rl_reqline_reason r);

/*
 * Formats one line (newline included) into buf, which has room for RL_REQLINE_MAX bytes,
 * and returns its length. node NULL or "" is written "-"; service and user are raw bytes,
 * cut and escaped. By hand, not snprintf: it runs for every logged request.
 */
size_t rl_reqline_format(char *buf, uint64_t ts_ms, uint32_t shard, const char *node,
                         uint32_t code, uint64_t key_hash, const char *service, size_t slen,
                         const char *user, size_t ulen);

/* The same, with the eighth field `cached` when cached is true. */
size_t rl_reqline_format_ex(char *buf, uint64_t ts_ms, uint32_t shard, const char *node,
                            uint32_t code, uint64_t key_hash, const char *service, size_t slen,
                            const char *user, size_t ulen, bool cached);

/* The same, with tag's word as the eighth field (none for RL_REQLINE_TAG_NONE). */
size_t rl_reqline_format_tag(char *buf, uint64_t ts_ms, uint32_t shard, const char *node,
                             uint32_t code, uint64_t key_hash, const char *service, size_t slen,
                             const char *user, size_t ulen, enum rl_reqline_tag tag);

/* Escapes s[0..n) into out (room for 3n bytes, or 1 when n is 0); returns the length. */
size_t rl_reqline_escape(char *out, const char *s, size_t n);

/*
 * Undoes the escaping of one field: "-" gives "", %XX (either case) gives the byte XX. out
 * needs len bytes. Returns the length written, or -EINVAL for a '%' not followed by two
 * hex digits, or a byte outside '!'..'~'.
 */
int rl_reqline_unescape(const char *in, size_t len, char *out);

/* A parsed line. Fields point into the line; SERVICE and USER are still escaped. */
struct rl_reqline {
    uint64_t ts_ms;
    uint64_t key_hash;
    uint32_t shard;
    uint32_t code;
    const char *node;
    const char *service;
    const char *user;
    uint32_t nlen;
    uint32_t slen;
    uint32_t ulen;
    bool cached; /* the eighth field `cached` was there */
    enum rl_reqline_tag tag; /* the eighth field, NONE without one */
};

/*
 * Parses one line p[0..n) (no newline; a trailing '\r' is ignored), 7 fields or 8 whose
 * last is `cached`, `adjust` or `release`. nshards > 0 also checks
 * SHARD < nshards and SHARD == KEYHASH mod nshards. Escapes are only checked to consist of
 * name bytes; rl_reqline_unescape checks them. Returns 0, or 1 + the reason it is malformed
 * (never TOO_LONG: the reader judges lengths).
 */
int rl_reqline_parse(const char *p, size_t n, uint32_t nshards, struct rl_reqline *out);

#endif
