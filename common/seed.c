/*
 * seed: secret seeds for hash tables (seed.h).
 */
#include "seed.h"

#include <sys/random.h>
#include <time.h>

#include <xxhash.h>

uint64_t
rl_seed_random(const void *salt)
{
    uint64_t k[2];
    struct timespec ts;

    if (getrandom(k, sizeof(k[0]), GRND_NONBLOCK) == (ssize_t)sizeof(k[0])) {
        return k[0];
    }
    clock_gettime(CLOCK_MONOTONIC, &ts);
    k[0] = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30;
    k[1] = (uint64_t)(uintptr_t)salt;
    return XXH3_64bits(k, sizeof(k));
}
