/*
 * reqlog: the router's request log, the rebalance tool's input. One text line per logged
 * request, formatted by reqline.h (docs/OPERATIONS.md gives the format):
 *
 *     TS_MS SHARD NODE CODE KEYHASH SERVICE USER [cached|adjust|release]
 *
 * Lines are formatted into an in-memory buffer (by any thread: a router's workers share one
 * log) and written by libuv's thread pool from the loop given to create, so the hot path
 * never waits on the disk. The buffer is flushed at least once
 * a second, when it fills, and on close. If the disk falls behind by more than one buffer,
 * lines are dropped and counted rather than queued without bound. SIGHUP-style rotation is
 * rl_reqlog_reopen. Not for diagnostics (log.h).
 */
#ifndef RL_REQLOG_H
#define RL_REQLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "reqline.h"

#define RL_REQLOG_BUF (1u << 20) /* bytes per buffer; three buffers per log */

struct rl_reqlog_stats {
    uint64_t lines;   /* lines written or queued */
    uint64_t dropped; /* lines dropped because the disk fell behind */
    uint64_t skipped; /* requests not logged because of sampling */
    uint64_t errors;  /* failed writes or opens */
    uint64_t rotations; /* files rotated for their size */
};

struct rl_reqlog;

/*
 * Opens path for appending (created 0640: logfile.h). sample = log one request in `sample`
 * (>= 1). Returns 0 or a negative errno.
 */
int rl_reqlog_create(struct rl_reqlog **out, uv_loop_t *loop, const char *path, uint32_t sample);

/* Logs one request (the caller asked rl_reqlog_sample first). service/user are raw bytes;
 * they are %-escaped. */
void rl_reqlog_add(struct rl_reqlog *l, uint64_t ts_ms, uint32_t shard, const char *node,
                   uint32_t code, uint64_t key_hash, const char *service, size_t slen,
                   const char *user, size_t ulen);

/* The same for an answer from the deny cache: the line ends in ` cached` (reqline.h). */
void rl_reqlog_add_ex(struct rl_reqlog *l, uint64_t ts_ms, uint32_t shard, const char *node,
                      uint32_t code, uint64_t key_hash, const char *service, size_t slen,
                      const char *user, size_t ulen, bool cached);

/* The same with tag's word as the line's eighth field (reqline.h): `cached`, or `adjust` and
 * `release` for those ops' answers. */
void rl_reqlog_add_tag(struct rl_reqlog *l, uint64_t ts_ms, uint32_t shard, const char *node,
                       uint32_t code, uint64_t key_hash, const char *service, size_t slen,
                       const char *user, size_t ulen, enum rl_reqline_tag tag);

/* Sampling: true for one call in `sample`; callers log only then. */
int rl_reqlog_sample(struct rl_reqlog *l);

/* Reopens the file (after an external rename), once pending writes are done. */
void rl_reqlog_reopen(struct rl_reqlog *l);

void rl_reqlog_stats(const struct rl_reqlog *l, struct rl_reqlog_stats *s);

struct rl_prom;
/* Appends the rl_router_request_log_* metric families (metrics.h's writer); l NULL (no
 * request log): zeros. */
void rl_reqlog_metrics(const struct rl_reqlog *l, struct rl_prom *p);

/* Once the file reaches max_size bytes (0: never), after the write that reached it, it is
 * renamed PATH.1 (PATH.1 to PATH.2 ..., keeping `keep`; 0 keeps none) and a new PATH is
 * started. */
void rl_reqlog_set_rotation(struct rl_reqlog *l, uint64_t max_size, uint32_t keep);

/* Flushes what is buffered, closes the file and frees everything; the loop must run for it
 * to finish (handles close asynchronously). */
void rl_reqlog_close(struct rl_reqlog *l);

#endif
