/*
 * zipf: draws ranks from a Zipf distribution over 1..n with exponent s, P(k) ~ 1/k^s, by
 * rejection-inversion (Hörmann and Derflinger, 1996): O(1) memory and expected O(1) time per
 * sample whatever n, unlike a CDF table (80 MB of doubles for 10M keys). rl-bench and
 * rl-chaos use it to make a few users hot, as real traffic does (rltools, tools/shared/).
 * Not for n above 2^32 - 1 (ranks are uint32_t), and it holds no random state of its own:
 * the caller passes an rng.h state, one per thread.
 */
#ifndef RL_ZIPF_H
#define RL_ZIPF_H

#include <stdint.h>

/* The distribution's constants, computed once by rl_zipf_init(); read-only afterwards. */
struct rl_zipf {
    double s;
    double n;
    double h_x1;
    double h_n;
    double thresh;
};

/*
 * Sets z up for ranks 1..n (n >= 1) with exponent s > 0 (s = 1 included). Nothing to free;
 * the caller validates n and s (rl-bench's option parser does).
 */
void rl_zipf_init(struct rl_zipf *z, uint32_t n, double s);

/*
 * Draws a rank and returns it zero-based, 0..n-1, 0 the most frequent. Advances *rng (an
 * rl_rng_next() state) by one or more steps. z is only read, so threads may share one.
 */
uint32_t rl_zipf_sample(const struct rl_zipf *z, uint64_t *rng);

#endif
