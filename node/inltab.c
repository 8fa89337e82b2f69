/*
 * inltab: interned inline limits (inltab.h). A growing array of slots (doubling up to
 * RL_INLTAB_MAX) with a free list, and an open-addressing index of the limits by value,
 * rebuilt whenever slots are reclaimed or the array grows (load at most 1/2).
 */
#include "inltab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "seed.h"

struct inl_slot {
    struct rl_tier tier;
    uint32_t owner;
    uint32_t refs;
    bool used;
    bool client; /* a client's (RL_INLTAB_CLIENT or _IMPORTED), counted in nclient */
};

struct rl_inltab {
    struct rl_inltab_ops ops;
    struct inl_slot *slots;
    uint32_t cap;   /* slots allocated */
    uint32_t nused; /* slots in use */
    uint32_t nzero; /* of which with no key */
    uint32_t nclient; /* of which clients' (at most RL_INLTAB_CLIENTS_MAX) */
    uint32_t *freel; /* free slot numbers below cap, nfree of them */
    uint32_t nfree;
    uint32_t *index; /* slot + 1, 0 empty; mask + 1 of them */
    uint32_t mask;
    uint64_t seed; /* inl_hash's, secret (seed.h): clients choose inline limits */
};

int
rl_inltab_create(struct rl_inltab **out, const struct rl_inltab_ops *ops)
{
    *out = calloc(1, sizeof(**out));
    if (*out == NULL) {
        return -ENOMEM;
    }
    if (ops != NULL) {
        (*out)->ops = *ops;
    }
    (*out)->seed = rl_seed_random(*out);
    return 0;
}

void
rl_inltab_destroy(struct rl_inltab *t)
{
    if (t != NULL) {
        free(t->slots);
        free(t->freel);
        free(t->index);
        free(t);
    }
}

static uint64_t
inl_hash(const struct rl_inltab *t, const struct rl_tier *w, uint32_t owner)
{
    uint32_t k[6] = {(uint32_t)w->algo, w->limit, (uint32_t)w->window_ms, w->burst,
                     (uint32_t)(w->window_ms >> 32), owner};

    return XXH3_64bits_withSeed(k, sizeof(k), t->seed);
}

static bool
inl_same(const struct inl_slot *a, const struct rl_tier *b, uint32_t owner)
{
    return a->owner == owner && a->tier.algo == b->algo && a->tier.limit == b->limit &&
           a->tier.window_ms == b->window_ms && a->tier.burst == b->burst;
}

/* Rebuilds the index for the slots in use, sized for cap. */
static int
inl_reindex(struct rl_inltab *t)
{
    uint32_t size = 16;
    uint32_t *ix;

    while (size < 2 * t->cap) {
        size *= 2;
    }
    ix = calloc(size, sizeof(*ix));
    if (ix == NULL) {
        return -ENOMEM;
    }
    for (uint32_t s = 0; s < t->cap; s++) {
        if (t->slots[s].used) {
            size_t i = (size_t)inl_hash(t, &t->slots[s].tier, t->slots[s].owner) & (size - 1);

            while (ix[i] != 0) {
                i = (i + 1) & (size - 1);
            }
            ix[i] = s + 1;
        }
    }
    free(t->index);
    t->index = ix;
    t->mask = size - 1;
    return 0;
}

/* Frees every slot with no key (none is in the middle of a check: interns come first). */
static int
inl_reclaim(struct rl_inltab *t)
{
    for (uint32_t s = 0; s < t->cap; s++) {
        if (t->slots[s].used && t->slots[s].refs == 0) {
            t->slots[s].used = false;
            t->freel[t->nfree++] = s;
            t->nused--;
            t->nclient -= t->slots[s].client;
            if (t->ops.owned != NULL) {
                t->ops.owned(t->ops.arg, t->slots[s].owner, -1);
            }
        }
    }
    t->nzero = 0;
    return inl_reindex(t);
}

static int
inl_grow(struct rl_inltab *t)
{
    uint32_t cap = t->cap == 0 ? 64 : t->cap * 2;
    struct inl_slot *slots;
    uint32_t *freel;

    if (cap > RL_INLTAB_MAX) {
        cap = RL_INLTAB_MAX;
    }
    slots = realloc(t->slots, cap * sizeof(*slots));
    if (slots == NULL) {
        return -ENOMEM;
    }
    t->slots = slots;
    freel = realloc(t->freel, cap * sizeof(*freel));
    if (freel == NULL) {
        return -ENOMEM;
    }
    t->freel = freel;
    memset(&slots[t->cap], 0, (cap - t->cap) * sizeof(*slots));
    /* Lowest slots first off the free list: pushed high to low. */
    for (uint32_t s = cap; s > t->cap; s--) {
        t->freel[t->nfree++] = s - 1;
    }
    t->cap = cap;
    return inl_reindex(t);
}

int
rl_inltab_intern(struct rl_inltab *t, const struct rl_tier *want, uint32_t owner,
                 enum rl_inltab_who who, uint32_t *id)
{
    bool quota = who == RL_INLTAB_CLIENT, client = who != RL_INLTAB_SCALED;
    uint64_t h = inl_hash(t, want, owner);
    struct inl_slot *sl;
    uint32_t s;
    int rc;

    if (t->index != NULL) {
        for (size_t i = (size_t)h & t->mask; t->index[i] != 0; i = (i + 1) & t->mask) {
            if (inl_same(&t->slots[t->index[i] - 1], want, owner)) {
                *id = RL_INLTAB_BASE + t->index[i] - 1;
                return 0;
            }
        }
    }
    if (quota && t->ops.may_add != NULL && !t->ops.may_add(t->ops.arg, owner)) {
        /* Some of owner's limits may have no key left: forget those and ask again. */
        if (t->nzero == 0) {
            return -EDQUOT;
        }
        rc = inl_reclaim(t);
        if (rc != 0) {
            return rc;
        }
        if (!t->ops.may_add(t->ops.arg, owner)) {
            return -EDQUOT;
        }
    }
    if (client && t->nclient >= RL_INLTAB_CLIENTS_MAX) {
        /* the clients' part is full: only their limits without keys can make room */
        if (t->nzero > 0) {
            rc = inl_reclaim(t);
            if (rc != 0) {
                return rc;
            }
        }
        if (t->nclient >= RL_INLTAB_CLIENTS_MAX) {
            return -ENOSPC;
        }
    }
    if (t->nfree == 0) {
        if (t->cap < RL_INLTAB_MAX) {
            rc = inl_grow(t);
        } else if (t->nzero > 0) {
            rc = inl_reclaim(t);
        } else {
            return -ENOSPC;
        }
        if (rc != 0) {
            return rc;
        }
    }
    s = t->freel[--t->nfree];
    sl = &t->slots[s];
    memset(sl, 0, sizeof(*sl));
    sl->tier.algo = want->algo;
    sl->tier.limit = want->limit;
    sl->tier.window_ms = want->window_ms;
    sl->tier.burst = want->burst;
    sl->tier.id = RL_INLTAB_BASE + s;
    sl->tier.seed = 0; /* inline keys are hashed by limiter.c's own seed */
    sl->owner = owner;
    sl->used = true;
    sl->client = client;
    t->nused++;
    t->nclient += client;
    t->nzero++;
    if (t->ops.owned != NULL) {
        t->ops.owned(t->ops.arg, owner, +1);
    }
    {
        size_t i = (size_t)h & t->mask;

        while (t->index[i] != 0) {
            i = (i + 1) & t->mask;
        }
        t->index[i] = s + 1;
    }
    *id = sl->tier.id;
    return 0;
}

const struct rl_tier *
rl_inltab_tier(const struct rl_inltab *t, uint32_t id)
{
    uint32_t s = id - RL_INLTAB_BASE;

    if (!rl_inltab_is(id) || s >= t->cap || !t->slots[s].used) {
        return NULL;
    }
    return &t->slots[s].tier;
}

uint32_t
rl_inltab_owner(const struct rl_inltab *t, uint32_t id)
{
    return rl_inltab_tier(t, id) == NULL ? 0 : t->slots[id - RL_INLTAB_BASE].owner;
}

void
rl_inltab_ref(struct rl_inltab *t, uint32_t id, int delta)
{
    struct inl_slot *sl;

    if (rl_inltab_tier(t, id) == NULL) {
        return;
    }
    sl = &t->slots[id - RL_INLTAB_BASE];
    if (delta > 0) {
        t->nzero -= sl->refs == 0;
        sl->refs++;
    } else if (sl->refs > 0) {
        sl->refs--;
        t->nzero += sl->refs == 0;
    }
}

size_t
rl_inltab_count(const struct rl_inltab *t)
{
    return t->nused;
}
