/*
 * hist: rl-bench's latency histogram, HDR style. Values below 2^RL_HIST_SUB_BITS are exact;
 * above, each power of two is cut into 2^(RL_HIST_SUB_BITS-1) equal buckets, so a value is
 * known within 1/128 (0.8%) of itself, from 1 to 2^64, in 59 KB and without storing samples.
 * Recording is a few instructions (it is inline: the bench records every reply), and one
 * histogram belongs to one thread; threads keep their own and merge them at the end.
 * Not a general statistics module: it keeps no samples, no mean and no time series.
 */
#ifndef RL_HIST_H
#define RL_HIST_H

#include <stdint.h>

#define RL_HIST_SUB_BITS 8
#define RL_HIST_SUB (1u << RL_HIST_SUB_BITS)
#define RL_HIST_HALF (RL_HIST_SUB / 2)
#define RL_HIST_BUCKETS (RL_HIST_SUB + (64 - RL_HIST_SUB_BITS) * RL_HIST_HALF)

/* A histogram. All zeroes (calloc, or = {0}) is an empty one; there is nothing to free. */
struct rl_hist {
    uint64_t counts[RL_HIST_BUCKETS];
    uint64_t total; /* values recorded */
    uint64_t max;   /* the largest value recorded, exact; 0 when empty */
};

/* The bucket of v, 0..RL_HIST_BUCKETS-1. */
static inline unsigned
rl_hist_index(uint64_t v)
{
    unsigned msb, shift;

    if (v < RL_HIST_SUB) {
        return (unsigned)v;
    }
    msb = 63u - (unsigned)__builtin_clzll(v);
    shift = msb - RL_HIST_SUB_BITS + 1;
    return RL_HIST_SUB + (shift - 1) * RL_HIST_HALF + (unsigned)((v >> shift) - RL_HIST_HALF);
}

/* Counts one value (any uint64_t, in whatever unit the caller chose: rl-bench uses ns). */
static inline void
rl_hist_record(struct rl_hist *h, uint64_t v)
{
    h->counts[rl_hist_index(v)]++;
    h->total++;
    if (v > h->max) {
        h->max = v;
    }
}

/* Adds the counts of from to into (total and max included); from is unchanged. */
void rl_hist_merge(struct rl_hist *into, const struct rl_hist *from);

/*
 * The value at quantile q (0..1): the upper bound of the bucket holding the ceil(q * total)th
 * smallest value (at least the 1st), capped at max, so it overstates by at most 0.8% and
 * never exceeds the largest value recorded. Returns 0 for an empty histogram.
 */
uint64_t rl_hist_quantile(const struct rl_hist *h, double q);

#endif
