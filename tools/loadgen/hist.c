/*
 * hist: the merging and quantile side of rl-bench's latency histogram; recording is inline in
 * hist.h. The bucket layout is described there. Not thread-safe: merge only histograms whose
 * threads have finished (rl-bench merges after joining its workers).
 */
#include "hist.h"

#include <math.h>

/* The largest value that lands in bucket i. */
static uint64_t
hist_upper(unsigned i)
{
    unsigned shift;
    uint64_t top;

    if (i < RL_HIST_SUB) {
        return i;
    }
    shift = (i - RL_HIST_SUB) / RL_HIST_HALF + 1;
    top = (i - RL_HIST_SUB) % RL_HIST_HALF + RL_HIST_HALF;
    return ((top + 1) << shift) - 1;
}

void
rl_hist_merge(struct rl_hist *into, const struct rl_hist *from)
{
    unsigned i;

    for (i = 0; i < RL_HIST_BUCKETS; i++) {
        into->counts[i] += from->counts[i];
    }
    into->total += from->total;
    if (from->max > into->max) {
        into->max = from->max;
    }
}

uint64_t
rl_hist_quantile(const struct rl_hist *h, double q)
{
    uint64_t rank, seen = 0, v;
    unsigned i;

    if (h->total == 0) {
        return 0;
    }
    rank = (uint64_t)ceil(q * (double)h->total);
    if (rank < 1) {
        rank = 1;
    }
    for (i = 0; i < RL_HIST_BUCKETS; i++) {
        seen += h->counts[i];
        if (seen >= rank) {
            v = hist_upper(i);
            return v < h->max ? v : h->max;
        }
    }
    return h->max;
}
