/*
 * logscan: the rebalance tool's reader of router request logs (router/reqlog.h). It streams
 * one source after another, never holding a file whole, validates every line and counts, per
 * shard, the requests and the distinct keys, and per key its requests and the service and
 * user it was first seen with, so that a hot key can be named. A line it cannot trust is
 * counted as malformed, with its reason, and skipped: a bad line is never fatal.
 *
 * A line is reqline.h's `TS_MS SHARD NODE CODE KEYHASH SERVICE USER`, parsed by
 * rl_reqline_parse, the same module the router writes it with. A line is kept
 * only if SHARD < the cluster's shard count and SHARD == KEYHASH mod shards. The key hash is
 * what counts: the names are for naming hot keys, and a router may log them cut short, so
 * the first time a key hash is seen its names are checked against it and the key is marked
 * verified or not, but a mismatch does not make the line malformed (a bad %-escape does). A
 * trailing '\r' is ignored; a last line without its newline counts as a line.
 *
 * Not for deciding owners (plan.h) nor for the report's layout (main.c).
 */
#ifndef RL_LOGSCAN_H
#define RL_LOGSCAN_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reqline.h"

#define RL_LOGSCAN_LINE_MAX RL_REQLINE_READ_MAX /* longer lines are malformed (TOO_LONG) */
#define RL_LOGSCAN_BLOCK (1u << 20) /* bytes per read(2) */
#define RL_LOGSCAN_EXAMPLES 5       /* malformed lines remembered, the first ones */

/* Why a line was skipped: reqline.h's reasons, under the scanner's names. */
#define RL_LOGSCAN_REASON_MAP(X) RL_REQLINE_REASON_MAP(X)

enum rl_logscan_reason {
#define RL_LOGSCAN_REASON_ENUM(n, s) RL_LOGSCAN_##n,
    RL_LOGSCAN_REASON_MAP(RL_LOGSCAN_REASON_ENUM)
#undef RL_LOGSCAN_REASON_ENUM
        RL_LOGSCAN_REASON_COUNT
};

/* The phrase of a reason, or "unknown". */
const char *rl_logscan_reason_text(enum rl_logscan_reason r);

/* A malformed line: where it is and why. */
struct rl_logscan_bad {
    uint32_t source; /* index of the source, in the order they were read (0-based) */
    uint64_t line;   /* line number in that source, 1-based */
    enum rl_logscan_reason reason;
};

/* What was read, over all sources so far. Valid until rl_logscan_destroy. */
struct rl_logscan_result {
    uint32_t nshards;
    const uint64_t *load; /* load[s]: requests of shard s */
    const uint64_t *keys; /* keys[s]: distinct key hashes of shard s */
    uint64_t bytes;       /* bytes read */
    uint64_t lines;       /* lines read, malformed included */
    uint64_t requests;    /* lines kept */
    uint64_t malformed;   /* lines skipped */
    uint64_t cached;      /* lines of answers from a router's deny cache: read, not counted
                             as load (no node was asked) */
    uint64_t no_rule;     /* lines of NO_RULE answers (code 4): read, not counted as load
                             (the router answers them itself, wherever the shard is) */
    uint64_t distinct;    /* distinct key hashes kept */
    uint64_t unverified;  /* of those, how many were first logged with names that do not hash
                             to them (names cut short by the router, or another key's) */
    uint64_t reasons[RL_LOGSCAN_REASON_COUNT];      /* malformed lines by reason */
    struct rl_logscan_bad bad[RL_LOGSCAN_EXAMPLES]; /* the first malformed lines */
    size_t nbad;
    uint32_t sources; /* sources begun */
};

/* A key and what the log says of it. Names point into the scanner's memory. */
struct rl_logscan_key {
    uint64_t hash;
    uint64_t count;
    uint32_t shard;
    const char *service; /* as logged: %-escaped, "-" for empty; not NUL-terminated */
    size_t slen;
    const char *user; /* likewise */
    size_t ulen;
    bool verified; /* the names, unescaped, hash to the key hash */
};

struct rl_logscan;

/*
 * Allocates a scanner for a cluster of nshards (1..RL_SHARDMAP_SHARDS_MAX). Returns 0 with
 * *out set (free with rl_logscan_destroy), -EINVAL or -ENOMEM.
 */
int rl_logscan_create(struct rl_logscan **out, uint32_t nshards);
void rl_logscan_destroy(struct rl_logscan *s);

/*
 * Shows a progress line on stderr (rewritten in place with '\r') while rl_logscan_file reads
 * and once a source has taken more than a second; for a terminal only: the caller checks
 * isatty(2). Off by default.
 */
void rl_logscan_set_progress(struct rl_logscan *s, bool on);

/*
 * A flag (set by a signal handler) that rl_logscan_file checks after every block and on
 * EINTR: once it is non-zero the read stops with -EINTR. NULL (the default) for none.
 */
void rl_logscan_set_stop(struct rl_logscan *s, const volatile sig_atomic_t *stop);

/*
 * Streaming, for any source: begin a source (name is kept by pointer, for the progress line),
 * feed its bytes in pieces of any size (a line may span pieces), end it (a last line without
 * a newline is read then). Returns 0 or -ENOMEM (the scanner is then unusable).
 */
int rl_logscan_begin(struct rl_logscan *s, const char *name);
int rl_logscan_feed(struct rl_logscan *s, const char *data, size_t len);
int rl_logscan_end(struct rl_logscan *s);

/*
 * Reads a whole file ("-" for standard input) with begin, feed and end, in blocks of
 * RL_LOGSCAN_BLOCK bytes. Returns 0, -ENOMEM, -EINTR when the stop flag was set, or open's
 * or read's negative errno (what was read before an error stays counted).
 */
int rl_logscan_file(struct rl_logscan *s, const char *path);

/* The counts so far. */
const struct rl_logscan_result *rl_logscan_result(const struct rl_logscan *s);

/*
 * The keys with more than min requests, most requested first (ties by key hash), in a
 * malloc'd array (*out, free it; NULL when none). Returns 0 or -ENOMEM.
 */
int rl_logscan_keys_above(const struct rl_logscan *s, uint64_t min, struct rl_logscan_key **out,
                          size_t *n);

#endif
