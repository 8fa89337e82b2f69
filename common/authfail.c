/*
 * authfail: failed AUTHs per client network (authfail.h).
 */
#include "authfail.h"

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "seed.h"

struct rl_authfail *
rl_authfail_new(void)
{
    struct rl_authfail *t = calloc(1, sizeof(*t));

    if (t != NULL) {
        t->seed = rl_seed_random(t);
    }
    return t;
}

void
rl_authfail_free(struct rl_authfail *t)
{
    free(t);
}

/* addr's network: an IPv4 address (mapped: ::ffff:a.b.c.d) whole, an IPv6 one's /64. */
static void
net_of(const uint8_t *addr, uint8_t *net)
{
    static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

    memcpy(net, addr, 16);
    if (memcmp(addr, v4, sizeof(v4)) != 0) {
        memset(net + 8, 0, 8);
    }
}

static const struct rl_authfail_entry *
bucket_of(const struct rl_authfail *t, const uint8_t *net)
{
    return t->e[XXH3_64bits_withSeed(net, 16, t->seed) % RL_AUTHFAIL_BUCKETS];
}

uint64_t
rl_authfail_wait(const struct rl_authfail *t, const uint8_t *addr, uint64_t now, uint64_t every_ms,
                 uint32_t burst)
{
    uint8_t net[16];
    const struct rl_authfail_entry *b;
    uint64_t slack = (burst > 0 ? burst - 1u : 0u) * every_ms;

    net_of(addr, net);
    b = bucket_of(t, net);
    for (uint32_t w = 0; w < RL_AUTHFAIL_WAYS; w++) {
        if (b[w].full != 0 && memcmp(b[w].net, net, 16) == 0) {
            return b[w].full > now + slack ? b[w].full - now - slack : 0;
        }
    }
    return 0;
}

void
rl_authfail_charge(struct rl_authfail *t, const uint8_t *addr, uint64_t now, uint64_t every_ms)
{
    uint8_t net[16];
    struct rl_authfail_entry *b, *e = NULL;

    net_of(addr, net);
    b = (struct rl_authfail_entry *)bucket_of(t, net);
    for (uint32_t w = 0; w < RL_AUTHFAIL_WAYS && e == NULL; w++) {
        if (b[w].full != 0 && memcmp(b[w].net, net, 16) == 0) {
            e = &b[w];
        }
    }
    if (e == NULL) {
        /* a free way, or one forgiven by now, else the one closest to being forgiven; ties
         * (a flood whose networks each failed as often) taken in turn from a moving start */
        uint32_t from = t->hand++ % RL_AUTHFAIL_WAYS;

        e = &b[from];
        for (uint32_t k = 1; k < RL_AUTHFAIL_WAYS && e->full > now; k++) {
            struct rl_authfail_entry *o = &b[(from + k) % RL_AUTHFAIL_WAYS];

            if (o->full < e->full) {
                e = o;
            }
        }
        memcpy(e->net, net, 16);
        e->full = 0;
    }
    e->full = (e->full > now ? e->full : now) + every_ms;
}
