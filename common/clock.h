/*
 * clock: the node's notion of "now" in milliseconds since the Unix epoch, which the window
 * algorithms align to, and the test clock that replaces it under --test-clock.
 * Not a monotonic timer: deadlines and timeouts use libuv's loop time instead.
 */
#ifndef RL_CLOCK_H
#define RL_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

struct rl_clock {
    bool fixed;        /* true once a test has set the time */
    uint64_t fixed_ms; /* what the clock reads while fixed */
};

/* Starts reading the real clock (CLOCK_REALTIME). */
void rl_clock_init(struct rl_clock *c);

/* Now, in ms since the epoch: the fixed time if set, else the real clock. */
uint64_t rl_clock_now_ms(const struct rl_clock *c);

/* Fixes the clock at now_ms until the next call (the CLOCK request of docs/PROTOCOL.md). */
void rl_clock_set(struct rl_clock *c, uint64_t now_ms);

/* The real clock in ms since the epoch, and a monotonic clock in ns for measurements. */
uint64_t rl_clock_real_ms(void);
uint64_t rl_clock_mono_ns(void);

#endif
