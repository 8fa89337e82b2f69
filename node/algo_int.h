/*
 * algo_int.h: what the files of the rate algorithms share, private to them: the 128-bit
 * type, and the small inline helpers over a state that judging (algo.c) and the handoff's
 * export and import (algo_handoff.c) both read: a sliding log's pointer or its degraded
 * counter, and gcra's 96-bit TAT and its 32-bit offset. Static inline, so the judge path
 * inlines them as before. Not for the owner of the states (algo.h is the limiter's
 * interface) nor for any other module.
 */
#ifndef RL_ALGO_INT_H
#define RL_ALGO_INT_H

#include "algo.h"

#include <stdbool.h>
#include <stdint.h>

__extension__ typedef unsigned __int128 u128;

static inline uint64_t
sat64(u128 x)
{
    return x > UINT64_MAX ? UINT64_MAX : (uint64_t)x;
}

static inline uint64_t
max64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static inline struct rl_slog *
swl_log(const struct rl_algo_state *s)
{
    return (struct rl_slog *)(uintptr_t)s->a;
}

/* A degraded log: the sliding_window_counter state it became, tagged in bit 0 of a. */
static inline bool
swl_degraded(const struct rl_algo_state *s)
{
    return (s->a & 1) != 0;
}

static inline struct rl_algo_state
swl_counter(const struct rl_algo_state *s)
{
    struct rl_algo_state c = {s->a >> 1, s->b};

    return c;
}

static inline void
swl_tag(struct rl_algo_state *s, const struct rl_algo_state *c)
{
    s->a = c->a << 1 | 1;
    s->b = c->b;
}

static inline u128
gcra_x(const struct rl_algo_state *s)
{
    return (u128)(s->b & 0xffffffffu) << 64 | s->a;
}

/*
 * The offset from the last update to TAT in 32 bits: exact below 2^31 ms (24.8 days), above
 * that a 25-bit mantissa and an exponent, rounded up, so the decoded last update is never
 * later than the real one (a later one would refuse as if the clock had stepped back).
 */
static inline uint32_t
gcra_off_encode(uint64_t off)
{
    uint32_t e = 0;
    uint64_t m;

    if (off < (1ull << 31)) {
        return (uint32_t)off;
    }
    while ((off >> e) >= (1ull << 25)) {
        e++;
    }
    m = (off >> e) + ((off & ((1ull << e) - 1)) != 0);
    if (m == (1ull << 25)) {
        m >>= 1;
        e++;
    }
    return (uint32_t)(1u << 31 | e << 25 | m);
}

static inline uint64_t
gcra_off_decode(uint32_t code)
{
    if (code < (1u << 31)) {
        return code;
    }
    return (uint64_t)(code & ((1u << 25) - 1)) << ((code >> 25) & 63);
}

#endif
