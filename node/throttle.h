/*
 * throttle: the node's record of throttling episodes (docs/PROTOCOL.md, "THROTTLED"). An
 * episode is one key's (service, endpoint, user) run of refusals: it opens at the first
 * LIMITED answer, counts every further one, and ends when the key is allowed again
 * ("allowed"), or, found by a periodic tick, when its last refusal's retry_after has passed
 * with no request since ("idle"). Open episodes sit in a bounded table; closed ones in a
 * bounded ring that overwrites the oldest. Both are allocated once at creation: recording
 * never allocates, and a key refused while the open table is full is counted as dropped
 * instead. Single-threaded (the node's loop). Not for deciding anything (limiter.h).
 *
 * The events log (optional) gets one JSON line per closed episode. It holds user ids, so it
 * is created 0640 and bounded twice (docs/OPERATIONS.md, "Throttle events"): at most
 * log_rate lines a second are written, the episodes past that are counted as dropped and
 * summed in one summary line a second; and the file is rotated before it would pass
 * log_max_size, keeping log_keep old files (logfile.h, as the router's request log).
 */
#ifndef RL_THROTTLE_H
#define RL_THROTTLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "wire.h"

#define RL_THROTTLE_DEFAULT 1024u /* [cluster] throttle_events when not set */
#define RL_THROTTLE_MAX 16384u    /* its upper bound: 2 * 16384 episodes of ~560 bytes */
/* An open episode past its retry_after is closed "idle" by the tick only once this much
 * more has passed with no request, so a key asked again the moment it is allowable closes
 * "allowed"; its end is still the moment it became allowable. */
#define RL_THROTTLE_IDLE_GRACE_MS 1000u
/* The events log's bounds when not set ([cluster] events_log_max_size, _keep, _rate). */
#define RL_THROTTLE_LOG_MAX_SIZE_DEFAULT (64ull << 20)
#define RL_THROTTLE_LOG_KEEP_DEFAULT 4u
#define RL_THROTTLE_LOG_RATE_DEFAULT 100u
#define RL_THROTTLE_LOG_BUF 65536u /* bytes buffered before a write(2) */
#define RL_THROTTLE_LINE_MAX 4096u /* one line, strings escaped at worst */
/* THROTTLED answered a second, and at once, by one node (rl_throttle_query_admit): an admin
 * query whose reply of up to 100 episodes costs the node and every router merging it far more
 * than a decision; past it, ERROR OVERLOADED. */
#define RL_THROTTLE_QUERY_RATE 10u
#define RL_THROTTLE_QUERY_BURST 20u

struct rl_throttle_ep {
    uint64_t hash;
    uint64_t start_ms;  /* first refusal */
    uint64_t last_ms;   /* last refusal */
    uint64_t until_ms;  /* last refusal + its retry_after: allowable from then */
    uint64_t end_ms;    /* closed: when it ended; 0 while open */
    uint64_t refused;
    uint32_t ended; /* enum rl_wire_ended */
    uint32_t next;  /* open table: the free list */
    uint16_t slen, elen, ulen;
    bool has_endpoint;
    char service[RL_WIRE_SERVICE_MAX];
    char endpoint[RL_WIRE_ENDPOINT_MAX];
    char user[RL_WIRE_USER_MAX];
};

struct rl_throttle_stats {
    uint64_t open;     /* episodes open now */
    uint64_t recorded; /* episodes opened since start */
    uint64_t dropped;  /* refusals not recorded: the open table was full */
    uint64_t closed;   /* episodes closed since start (in the ring, or overwritten) */
    /* the events log */
    uint64_t log_lines;     /* episode lines written (or buffered) */
    uint64_t log_dropped;   /* closed episodes not written: past log_rate in their second */
    uint64_t log_rotations; /* files rotated for their size */
    uint64_t log_errors;    /* failed opens or writes (their lines are lost) */
    uint64_t query_refused; /* THROTTLED answered OVERLOADED: past RL_THROTTLE_QUERY_RATE */
};

/* The events log: a descriptor, a write buffer, and what bounds it. */
struct rl_throttle_log {
    int fd;             /* -1: none, or an open that failed (retried at the next flush) */
    char *path;         /* as given (%n already replaced) */
    uint64_t size;      /* bytes in the file now */
    uint64_t max_size;  /* rotate before a line would take it past this; 0: never */
    uint32_t keep;      /* rotated files kept */
    uint32_t rate;      /* lines a second; 0: no cap */
    uint64_t win_ms;    /* start of the current second of the cap */
    uint32_t win_lines; /* lines written in it */
    /* episodes dropped since the last summary line, their refusals, their end_ms range */
    uint64_t drop_n, drop_refused, drop_from_ms, drop_to_ms;
    char *buf;  /* RL_THROTTLE_LOG_BUF bytes */
    size_t len; /* of them used */
    char *line; /* RL_THROTTLE_LINE_MAX bytes, formatted through mem */
    FILE *mem;
};

/* Public for rl_throttle_any_open; the rest is private to throttle.c. */
struct rl_throttle {
    uint32_t nopen;
    uint32_t cap;
    struct rl_throttle_ep *open; /* cap entries */
    uint32_t free_head;          /* first free entry of open; cap when none */
    uint32_t *slots;             /* hash index: entry + 1, 0 empty; nslots a power of 2 */
    uint32_t nslots;
    uint64_t seed;               /* the index's hash's, secret (seed.h) */
    struct rl_throttle_ep *ring; /* cap closed episodes */
    uint32_t ring_head;          /* where the next closed one goes */
    uint32_t ring_len;
    const struct rl_throttle_ep **scratch; /* 2 * cap, for queries */
    struct rl_throttle_stats stats;
    uint64_t query_tat;          /* the queries' GCRA: when the next one is due (node ms) */
    struct rl_throttle_log *log; /* events_log, or NULL */
    char node[RL_WIRE_NODE_MAX + 1];
};

/*
 * Creates a record of at most capacity open and capacity closed episodes (capacity
 * 1..RL_THROTTLE_MAX; 0 sets *out NULL: recording is off) for node `node`. events_log, when
 * not NULL or "", is a file each closed episode is appended to as one JSON line, with the
 * default bounds (rl_throttle_set_log_bounds). Returns 0, -EINVAL, -ENOMEM, or the negative
 * errno of opening the log.
 */
int rl_throttle_create(struct rl_throttle **out, uint32_t capacity, const char *node,
                       const char *events_log);
void rl_throttle_destroy(struct rl_throttle *t);

/* The events log's bounds: rotate before a line would take the file past max_size bytes (0:
 * never) to PATH.1 .. PATH.keep (0 keeps none); write at most rate episode lines a second (0:
 * no cap), counting the rest in log_dropped and writing, once a second while some were, one
 * summary line {"dropped":N,"refused":R,"from_ms":..,"to_ms":..,"node":..}. No-op without a
 * log. */
void rl_throttle_set_log_bounds(struct rl_throttle *t, uint64_t max_size, uint32_t keep,
                                uint32_t rate);

/* Writes what is buffered and reopens the events log by its path (after an external rename:
 * SIGHUP). Returns 0 (also without a log) or the negative errno of the open; a failed open is
 * retried at the next flush. */
int rl_throttle_reopen(struct rl_throttle *t);

/* True while an episode is open: the one test an ALLOWED answer pays when none is. */
static inline bool
rl_throttle_any_open(const struct rl_throttle *t)
{
    return t != NULL && t->nopen != 0;
}

/* A LIMITED answer for the key at now, which said retry_after_ms (elen 0: no endpoint). */
void rl_throttle_limited(struct rl_throttle *t, const char *service, size_t slen,
                         const char *endpoint, size_t elen, const char *user, size_t ulen,
                         uint64_t now, uint64_t retry_after_ms);

/* An ALLOWED (or QUEUED) answer for the key at now: closes its open episode, if any. */
void rl_throttle_allowed(struct rl_throttle *t, const char *service, size_t slen,
                         const char *endpoint, size_t elen, const char *user, size_t ulen,
                         uint64_t now);

/* Closes "idle" the open episodes allowable since RL_THROTTLE_IDLE_GRACE_MS before now,
 * writes the summary of the episodes the log dropped, if any, and flushes the events log.
 * Off the request path (the node's timer). */
void rl_throttle_tick(struct rl_throttle *t, uint64_t now);

/*
 * The at most `top` episodes, open and closed, of service (NULL: any) active within
 * since_ms of now (NULL: any; open ones always are, closed ones if they ended at or after
 * now - since_ms), by refused descending (then the earlier start first), into out (top
 * entries). Their strings point into t and stay valid until the next call that changes t.
 * Returns how many were written.
 */
size_t rl_throttle_query(struct rl_throttle *t, const char *service, size_t slen,
                         const uint64_t *since_ms, uint64_t now, uint32_t top,
                         struct rl_wire_episode *out);

/* Whether a THROTTLED may be answered at now (the node's clock, ms): at most
 * RL_THROTTLE_QUERY_BURST at once and RL_THROTTLE_QUERY_RATE a second over time (a GCRA), so
 * that however many clients and routers ask, answering costs the node's loop a bounded share
 * of its time. false: it is answered OVERLOADED (counted in stats.query_refused). t NULL:
 * always true. */
bool rl_throttle_query_admit(struct rl_throttle *t, uint64_t now);

void rl_throttle_stats(const struct rl_throttle *t, struct rl_throttle_stats *s);

struct rl_prom;

/* Appends the rl_node_throttle_* metric families; t NULL (throttle events off) writes them
 * as zeros, so the page keeps its shape. */
void rl_throttle_metrics(const struct rl_throttle *t, struct rl_prom *p);

#endif
