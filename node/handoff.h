/*
 * handoff: the record stream a node sends to carry live keys, with their full state, to
 * another node (docs/PROTOCOL.md, "Handoff records"): the key record as a C
 * struct, its MessagePack encoding, and a bounded, allocation-free decoder. Times are sent
 * relative to the sender's clock, so a host with another clock continues them.
 * Not for choosing which keys move, nor for putting them into a limiter (limiter.h,
 * rl_limiter_export and rl_limiter_import), nor for the transfer itself (HANDOFF_OUT and
 * HANDOFF_IN: server_handoff.h; the automatic moves: move.h).
 */
#ifndef RL_HANDOFF_H
#define RL_HANDOFF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "algo.h"
#include "buf.h"

#define RL_HANDOFF_VERSION 1u
#define RL_HANDOFF_MAGIC "rl-handoff"
/* A record's body (after its 4-byte length) is at most this: a key with a full log
 * (RL_ALGO_XLOG_MAX entries of at most 9 + 5 bytes) fits. */
#define RL_HANDOFF_RECORD_MAX 65536u

enum rl_handoff_type {
    RL_HANDOFF_HEADER = 0,
    RL_HANDOFF_KEY = 1,
    RL_HANDOFF_END = 2,
};

/* Whose tier a key follows. */
enum rl_handoff_kind {
    RL_HANDOFF_RULE = 0,   /* a configured tier, found by its key seed (ruleset.h) */
    RL_HANDOFF_INLINE = 1, /* an inline limit (or a region's slice of a global rule), of owner */
};

/* One live key under one tier. */
struct rl_handoff_key {
    uint64_t fp_hi; /* its key-table fingerprint (keytab.h): the same on every node */
    uint32_t fp_lo;
    uint8_t kind; /* enum rl_handoff_kind */
    uint64_t ref; /* RULE: rl_tier.key_seed; INLINE: the owner (tenant) */
    /* the tier the state was written under */
    uint8_t algo;
    uint32_t limit;
    uint64_t window_ms;
    uint32_t burst;
    struct rl_algo_xstate st;
};

/* A decoded record. */
struct rl_handoff_rec {
    uint8_t type; /* enum rl_handoff_type */
    /* HEADER */
    uint32_t version;
    uint64_t sender_now_ms;
    uint32_t shard;
    /* END */
    uint64_t nkeys;
};

/* Appends one framed record to out: 0 or -ENOMEM. */
int rl_handoff_put_header(struct rl_buf *out, uint64_t sender_now_ms, uint32_t shard);
int rl_handoff_put_key(struct rl_buf *out, const struct rl_handoff_key *k);
int rl_handoff_put_end(struct rl_buf *out, uint64_t nkeys);

/*
 * Decodes the record at p[0..n): returns the bytes it took (> 0) with *rec filled (and *key
 * for a KEY record), 0 when p holds only part of it, or -EINVAL when the bytes are not a
 * record of this version (a body over RL_HANDOFF_RECORD_MAX, a field of the wrong type or
 * out of range, bytes left over in the body). Never allocates; bad input never crashes.
 */
long rl_handoff_next(const char *p, size_t n, struct rl_handoff_rec *rec,
                     struct rl_handoff_key *key);

#endif
