/*
 * bench_util: the two helpers the in-process benches share (limiter_bench.c,
 * limiter_settle_bench.c, rls_meta_bench.c): the calling thread's CPU time and a seeded
 * splitmix64 draw. Not for tests (they keep the clock under control) nor for product code.
 */
#ifndef RL_BENCH_UTIL_H
#define RL_BENCH_UTIL_H

#include <stdint.h>
#include <time.h>

/* The calling thread's CPU time, in ns. */
static inline double
cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The next splitmix64 value of the state *s. */
static inline uint64_t
splitmix(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

#endif
