/*
 * workload: what rl-bench asks for. Users are "u0".."u<K-1>" drawn uniformly, by Zipf
 * (zipf.h) or in order (--sequential, each worker taking every threads-th), from a per-worker
 * generator (rng.h) seeded from --seed or the clock, so a fixed seed repeats the users, not
 * the timing. The op (--op), service, endpoint and cost (or delta, or count) are the same in
 * every request: they are
 * encoded once here, and the connections (conn.h) copy those bytes around each user.
 * Drawing a key is inline: it happens for every request.
 */
#ifndef LG_WORKLOAD_H
#define LG_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "loadgen.h"
#include "rng.h"
#include "zipf.h"

static inline uint32_t
lg_next_key(struct worker *w)
{
    const struct opts *o = &w->b->o;
    uint64_t k;

    if (o->sequential) {
        k = w->seq_next;
        w->seq_next += o->threads;
        if (w->seq_next >= o->keys) {
            w->seq_next = w->index % o->keys;
        }
        return (uint32_t)k;
    }
    if (o->dist == DIST_ZIPF) {
        return rl_zipf_sample(&w->zipf, &w->rng);
    }
    /* Lemire's multiply-shift: uniform enough for 32-bit ranges, and no division. */
    return (uint32_t)(((rl_rng_next(&w->rng) >> 32) * o->keys) >> 32);
}

/* Decimal digits of v into buf (at least 10 bytes), returning their count. */
static inline size_t
lg_utoa32(char *buf, uint32_t v)
{
    char tmp[10];
    size_t n = 0, i;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (i = 0; i < n; i++) {
        buf[i] = tmp[n - 1 - i];
    }
    return n;
}

/* Encodes b's service (the prefix), endpoint and cost, delta or count (the suffix) once for
 * every request. */
void lg_encode_constants(struct bench *b);

/* The run's seed: --seed, else from the clock and the pid. */
uint64_t lg_seed(const struct opts *o);

/* Sets up worker w's keys (its generator from seed, its sequence, its Zipf table). */
void lg_keys_init(struct worker *w, uint64_t seed);

#endif
