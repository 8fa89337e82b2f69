/*
 * clock: real and test clocks. The real clock is CLOCK_REALTIME because windows are aligned
 * to the epoch; the algorithms tolerate it stepping backwards (they treat time before a
 * stored timestamp as that timestamp).
 */
#include "clock.h"

#include <time.h>

void
rl_clock_init(struct rl_clock *c)
{
    c->fixed = false;
    c->fixed_ms = 0;
}

uint64_t
rl_clock_real_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t
rl_clock_mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t
rl_clock_now_ms(const struct rl_clock *c)
{
    return c->fixed ? c->fixed_ms : rl_clock_real_ms();
}

void
rl_clock_set(struct rl_clock *c, uint64_t now_ms)
{
    c->fixed = true;
    c->fixed_ms = now_ms;
}
