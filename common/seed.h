/*
 * seed: a secret 64-bit value for a hash table's seed or key, so that where a client's key
 * lands in the table is unknown outside the process (a client who could compute it could
 * choose keys that all land together: hash flooding). From the kernel's random source
 * (getrandom); should that fail (it does not block once the system booted), from the clock
 * and salt's address, which a client does not see either.
 */
#ifndef RL_SEED_H
#define RL_SEED_H

#include <stdint.h>

uint64_t rl_seed_random(const void *salt);

#endif
