/*
 * rng: SplitMix64, the pseudo-random generator rl-bench and rl-chaos draw keys from (uniform
 * keys, and Zipf ranks through zipf.c); part of rltools, the tools' shared library. Header
 * only, since it runs once or more per request. The state is a plain uint64_t the caller
 * owns, one per thread; any value is a valid seed.
 * Not for anything that must be unpredictable.
 */
#ifndef RL_RNG_H
#define RL_RNG_H

#include <stdint.h>

/* The next 64 random bits; advances *state. */
static inline uint64_t
rl_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A double uniform in [0, 1), from the top 53 bits of rl_rng_next(). */
static inline double
rl_rng_double(uint64_t *state)
{
    return (double)(rl_rng_next(state) >> 11) * 0x1p-53;
}

#endif
