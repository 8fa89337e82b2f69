/*
 * hotkeys: the router's hot (service, user) keys by request count (docs/OPERATIONS.md, "Hot
 * keys"). A space-saving sketch of RL_HOT_K counters in fixed memory: a key already counted
 * adds one; a new key takes the place of the smallest counter and inherits its count as its
 * possible overcount (`err`), so a key's true count is within [count - err, count] and any
 * key counted more than total/RL_HOT_K times is in the sketch. Counts decay: every period
 * (RL_HOT_PERIOD_MS) each count and err is halved, so the sketch shows about the last two
 * periods' traffic, recent requests weighing most. The counters are a min-heap by count
 * (the replaced one is its root), indexed by a small open-addressing table: an update is
 * O(log K) with no allocation. Not for who may read it (router/shed.c) nor the wire.
 *
 * One sketch per router loop; rl_hot_merge adds one into another (several workers' sketches
 * into one answer).
 */
#ifndef RL_HOTKEYS_H
#define RL_HOTKEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define RL_HOT_K 128u             /* counters */
#define RL_HOT_INDEX 512u         /* index slots (a power of two, > 2 * RL_HOT_K) */
#define RL_HOT_PERIOD_MS 10000u   /* counts halve this often */
#define RL_HOT_USER_MAX 64u       /* user bytes kept for naming (the hashes are exact) */
#define RL_HOT_TOP_DEFAULT 10u
#define RL_HOT_METRICS_TOP 10u    /* series in rl_router_hot_key_requests */
#define RL_HOT_EXACT 65536u       /* requests a period counted one by one; past it, sampled */
#define RL_HOT_SAMPLE 16u         /* past RL_HOT_EXACT, 1 request in 16 on average is counted */

struct rl_hot_counter {
    uint64_t hash, fp; /* the key: two 64-bit hashes of (service, user) */
    uint64_t count;    /* requests counted (decayed), overcount included */
    uint64_t err;      /* at most this much of count belongs to keys it replaced */
    uint16_t slen, ulen;
    char service[RL_WIRE_SERVICE_MAX];
    char user[RL_HOT_USER_MAX];
};

struct rl_hot {
    struct rl_hot_counter c[RL_HOT_K];
    uint16_t heap[RL_HOT_K];  /* counter indexes, min-heap by count */
    uint64_t hcount[RL_HOT_K]; /* hcount[i]: the count of counter heap[i] (the heap's order
                                  read without touching the counters) */
    uint16_t pos[RL_HOT_K];   /* pos[i]: where counter i is in heap */
    uint16_t index[RL_HOT_INDEX]; /* counter + 1; 0 empty; RL_HOT_TOMB removed */
    uint32_t n;               /* counters in use */
    uint32_t tombs;
    uint64_t decayed_at;      /* ms of the last halving */
    uint64_t total;           /* requests counted (decayed like the counts) */
    uint64_t period_adds;     /* requests seen since the last halving */
    uint64_t skipped;         /* requests passed over since the last one sampled */
    uint64_t skip;            /* requests still to pass over before the next sample */
    uint64_t rng;             /* the sampling's random state */
};

#define RL_HOT_TOMB 0xffffu

void rl_hot_init(struct rl_hot *h, uint64_t now_ms);

/* Counts one request of (service, user) whose hashes are hash and fp, at now_ms. The first
 * RL_HOT_EXACT requests of a period are counted one by one (the space-saving bounds hold);
 * past that, a busy router's cost is cut by sampling: about 1 request in RL_HOT_SAMPLE,
 * at random, is counted with the weight of the requests passed over since the last one, so
 * counts are unbiased estimates (a key's share of the traffic), and total counts every
 * request but those passed over since the last sample. */
void rl_hot_add(struct rl_hot *h, uint64_t hash, uint64_t fp, const char *service, size_t slen,
                const char *user, size_t ulen, uint64_t now_ms);

/* Halves the counts for each period passed since the last halving. */
void rl_hot_decay(struct rl_hot *h, uint64_t now_ms);

/* The counters with the highest counts, highest first, into out[0..max); returns how many.
 * keep (may be NULL) filters: only counters for which keep(arg, c) is true are listed. */
size_t rl_hot_top(const struct rl_hot *h, const struct rl_hot_counter **out, size_t max,
                  bool (*keep)(void *arg, const struct rl_hot_counter *c), void *arg);

/* Adds src's counts into dst (both decayed to the same time first by their owners): a key in
 * both sums its counts and errs; a key of src that does not fit dst's RL_HOT_K replaces the
 * smallest as rl_hot_add would, with its count added on. */
void rl_hot_merge(struct rl_hot *dst, const struct rl_hot *src);

#endif
