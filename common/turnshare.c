/*
 * turnshare: a loop turn's input split between clients (addresses), then between each
 * client's connections (turnshare.h).
 */
#include "turnshare.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "seed.h"

struct rl_turnslot {
    uint8_t addr[16];
    uint32_t conns; /* 0: free */
};

#define TURNSET_MIN_CAP 16u

void
rl_turnshare_init(struct rl_turnshare *t)
{
    memset(t, 0, sizeof(*t));
    t->seed = rl_seed_random(t);
}

static void
turnset_free(struct rl_turnset *s)
{
    free(s->slots);
    free(s->used);
    memset(s, 0, sizeof(*s));
}

void
rl_turnshare_deinit(struct rl_turnshare *t)
{
    turnset_free(&t->now);
    turnset_free(&t->last);
}

static uint32_t
turnset_home(const struct rl_turnshare *t, const struct rl_turnset *s, const uint8_t *addr)
{
    return (uint32_t)XXH3_64bits_withSeed(addr, 16, t->seed) & (s->cap - 1);
}

/* The slot of addr in s, or the free slot where it would go; NULL when s has no slots. */
static struct rl_turnslot *
turnset_find(const struct rl_turnshare *t, const struct rl_turnset *s, const uint8_t *addr)
{
    uint32_t i;

    if (s->cap == 0) {
        return NULL;
    }
    for (i = turnset_home(t, s, addr);; i = (i + 1) & (s->cap - 1)) {
        struct rl_turnslot *e = &s->slots[i];

        if (e->conns == 0 || memcmp(e->addr, addr, 16) == 0) {
            return e;
        }
    }
}

/* Room for one more address (at most half the slots taken); false when out of memory. */
static bool
turnset_room(struct rl_turnshare *t, struct rl_turnset *s)
{
    struct rl_turnset n;

    if (s->cap != 0 && (s->clients + 1) * 2 <= s->cap) {
        return true;
    }
    n.cap = s->cap == 0 ? TURNSET_MIN_CAP : s->cap * 2;
    n.slots = calloc(n.cap, sizeof(*n.slots));
    n.used = malloc(n.cap / 2 * sizeof(*n.used));
    if (n.slots == NULL || n.used == NULL) {
        free(n.slots);
        free(n.used);
        return false;
    }
    n.clients = 0;
    n.conns = s->conns;
    n.lone = s->lone;
    for (uint32_t k = 0; k < s->clients; k++) {
        const struct rl_turnslot *o = &s->slots[s->used[k]];
        struct rl_turnslot *e = turnset_find(t, &n, o->addr);

        *e = *o;
        n.used[n.clients++] = (uint32_t)(e - n.slots);
    }
    free(s->slots);
    free(s->used);
    *s = n;
    return true;
}

void
rl_turnshare_busy(struct rl_turnshare *t, const uint8_t *addr)
{
    struct rl_turnset *s = &t->now;
    struct rl_turnslot *e = turnset_find(t, s, addr);

    s->conns++;
    if (e != NULL && e->conns != 0) {
        e->conns++;
        return;
    }
    if (!turnset_room(t, s)) {
        s->lone++; /* a client of its own */
        return;
    }
    e = turnset_find(t, s, addr);
    memcpy(e->addr, addr, 16);
    e->conns = 1;
    s->used[s->clients++] = (uint32_t)(e - s->slots);
}

void
rl_turnshare_next(struct rl_turnshare *t)
{
    struct rl_turnset old = t->last;

    /* the last turn's set is emptied (its taken slots only) and counts the next turn */
    for (uint32_t k = 0; k < old.clients; k++) {
        old.slots[old.used[k]].conns = 0;
    }
    old.clients = 0;
    old.conns = 0;
    old.lone = 0;
    if (old.cap > TURNSET_MIN_CAP && t->now.clients * 8 < old.cap) {
        turnset_free(&old); /* a burst of clients is over: start small again */
    }
    t->last = t->now;
    t->now = old;
}

uint32_t
rl_turnshare_clients(const struct rl_turnshare *t)
{
    return t->last.clients + t->last.lone;
}

uint32_t
rl_turnshare_conns(const struct rl_turnshare *t)
{
    return t->last.conns;
}

size_t
rl_turnshare_share(const struct rl_turnshare *t, const uint8_t *addr, uint64_t turn_all,
                   size_t full)
{
    const struct rl_turnslot *e;
    uint64_t ways;
    size_t share;

    if (turn_all >= 2u * RL_CONN_TURN_ALL) {
        return RL_CONN_TURN_MIN;
    }
    if (t->last.conns == 0) {
        return full;
    }
    e = turnset_find(t, &t->last, addr);
    ways = (uint64_t)rl_turnshare_clients(t) * (e != NULL && e->conns != 0 ? e->conns : 1);
    share = (size_t)(RL_CONN_TURN_ALL / ways);
    return share < RL_CONN_TURN_MIN ? RL_CONN_TURN_MIN : share > full ? full : share;
}
