/*
 * backstop: the router-local limiter that judges a `failure = open` service while its owner
 * cannot be reached (backstop.h): the table, its eviction, and the fixed-window arithmetic.
 * Not for when it is asked (forward.c) nor for its counters' exposition (shed.c).
 */
#include "backstop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ruleset.h"
#include "seed.h"

#define NS_PER_MS 1000000ull

int
rl_backstop_init(struct rl_backstop *b, uint32_t entries, uint32_t share)
{
    uint32_t sets = 1;

    memset(b, 0, sizeof(*b));
    b->share = share ? share : 1;
    if (entries == 0) {
        return 0;
    }
    while ((uint64_t)sets * RL_BACKSTOP_WAYS < entries && sets < (1u << 24)) {
        sets <<= 1;
    }
    b->e = calloc((size_t)sets * RL_BACKSTOP_WAYS, sizeof(*b->e));
    if (b->e == NULL) {
        return -ENOMEM;
    }
    b->seed = rl_seed_random(b);
    b->nsets = sets;
    b->st.entries = (uint64_t)sets * RL_BACKSTOP_WAYS;
    return 0;
}

void
rl_backstop_deinit(struct rl_backstop *b)
{
    free(b->e);
    memset(b, 0, sizeof(*b));
}

/* Whether rule o of old and n of now count alike, tier by tier (rl_backstop_rules). */
static bool
backstop_same_tiers(const struct rl_conf *old, const struct rl_rule *o, const struct rl_conf *now,
                    const struct rl_rule *n)
{
    if (o->ntiers != n->ntiers) {
        return false;
    }
    for (uint32_t t = 0; t < n->ntiers; t++) {
        if (old->tiers[o->first_tier + t].key_seed != now->tiers[n->first_tier + t].key_seed) {
            return false;
        }
    }
    return true;
}

void
rl_backstop_rules(struct rl_backstop *b, const struct rl_conf *old, const struct rl_conf *now)
{
    uint32_t *map;
    size_t n = (size_t)b->nsets * RL_BACKSTOP_WAYS;

    if (b->e == NULL) {
        return;
    }
    map = old != NULL && old->nrules > 0 ? malloc(old->nrules * sizeof(*map)) : NULL;
    if (map == NULL) {
        memset(b->e, 0, n * sizeof(*b->e)); /* no rule found again: nobody is kept */
        return;
    }
    for (size_t i = 0; i < old->nrules; i++) {
        map[i] = UINT32_MAX;
    }
    for (size_t i = 0; i < now->nrules; i++) {
        const struct rl_rule *r = &now->rules[i];
        const struct rl_rule *o =
            rl_ruleset_find(old, r->service, r->service_len, r->endpoint, r->endpoint_len);

        if (o != NULL && o->id < old->nrules && backstop_same_tiers(old, o, now, r)) {
            map[o->id] = r->id;
        }
    }
    for (size_t i = 0; i < n; i++) {
        struct rl_backstop_entry *e = &b->e[i];

        if (!e->used) {
            continue;
        }
        if (e->rule < old->nrules && map[e->rule] != UINT32_MAX) {
            e->rule = map[e->rule];
        } else {
            memset(e, 0, sizeof(*e));
        }
    }
    free(map);
}

uint32_t
rl_backstop_quota(uint32_t limit, uint32_t share)
{
    uint32_t q = share > 1 ? limit / share : limit;

    return q > 0 ? q : 1;
}

/* The set of hash (the user's, of its service: not of the rule, whose id a rules change
 * renumbers, rl_backstop_rules): a full-avalanche mix of it and the secret seed. */
static size_t
backstop_set(const struct rl_backstop *b, uint64_t hash)
{
    uint64_t h = hash ^ b->seed;

    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    return (size_t)(h & (b->nsets - 1));
}

/* How much of its quota e has used in its windows still running: the largest share over its
 * tiers, of 2^31 (0 when every window has ended, or its rule is gone). */
static uint64_t
backstop_used(const struct rl_backstop *b, const struct rl_backstop_entry *e,
              const struct rl_conf *conf, uint64_t now_ns)
{
    const struct rl_rule *r = e->rule < conf->nrules ? &conf->rules[e->rule] : NULL;
    uint32_t nt = r == NULL ? 0 : r->ntiers < RL_BACKSTOP_TIERS ? r->ntiers : RL_BACKSTOP_TIERS;
    uint64_t most = 0;

    for (uint32_t t = 0; t < nt; t++) {
        const struct rl_tier *tier = &conf->tiers[r->first_tier + t];
        uint64_t q = rl_backstop_quota(tier->limit, b->share);
        uint64_t share;

        if (now_ns < e->start_ns[t] || now_ns - e->start_ns[t] >= tier->window_ms * NS_PER_MS) {
            continue; /* that window has ended: what it counted is forgotten anyway */
        }
        /* count < 2^32 and q >= 1: no overflow; past 2^31 when a kept rule's limit fell */
        share = (uint64_t)e->count[t] * (1ull << 31) / q;
        if (share > most) {
            most = share;
        }
    }
    return most;
}

static struct rl_backstop_entry *
backstop_find(struct rl_backstop *b, const struct rl_conf *conf, const struct rl_rule *rule,
              uint64_t hash, uint64_t now_ns)
{
    struct rl_backstop_entry *set = &b->e[backstop_set(b, hash) * RL_BACKSTOP_WAYS];
    struct rl_backstop_entry *victim = NULL;
    uint64_t victim_used = 0;

    for (uint32_t w = 0; w < RL_BACKSTOP_WAYS; w++) {
        if (set[w].used && set[w].hash == hash && set[w].rule == rule->id) {
            return &set[w];
        }
    }
    /* A free way, else the least used (its windows ended first of all), the least recently
     * asked among equals: a user held at its quota is evicted only when every other way of
     * its set holds a user as used (before, the least recently asked went, whatever it had
     * used, so that any made-up users landing in a user's set gave it its quota again). */
    for (uint32_t w = 0; w < RL_BACKSTOP_WAYS; w++) {
        uint64_t used;

        if (!set[w].used) {
            victim = &set[w];
            break;
        }
        used = backstop_used(b, &set[w], conf, now_ns);
        if (victim == NULL || used < victim_used ||
            (used == victim_used && set[w].used_ns < victim->used_ns)) {
            victim = &set[w];
            victim_used = used;
        }
    }
    if (victim->used) {
        b->st.evictions++;
    }
    memset(victim, 0, sizeof(*victim));
    victim->used = true;
    victim->hash = hash;
    victim->rule = rule->id;
    for (uint32_t t = 0; t < RL_BACKSTOP_TIERS; t++) {
        victim->start_ns[t] = now_ns;
    }
    return victim;
}

bool
rl_backstop_judge(struct rl_backstop *b, const struct rl_conf *conf,
                  const struct rl_rule *rule, uint64_t hash, uint32_t cost, uint64_t now_ns,
                  struct rl_wire_check_reply *rep)
{
    struct rl_backstop_entry *e;
    uint32_t nt = rule->ntiers < RL_BACKSTOP_TIERS ? rule->ntiers : RL_BACKSTOP_TIERS;

    rep->code = RL_WIRE_FAIL_OPEN;
    rep->limit = rep->remaining = rep->reset_ms = rep->retry_after_ms = 0;
    if (b->e == NULL || cost == 0) {
        if (b->e != NULL) {
            b->st.allowed++;
        }
        return true;
    }
    e = backstop_find(b, conf, rule, hash, now_ns);
    e->used_ns = now_ns;
    /* Windows that ended start again at now; then every tier must have room for cost. */
    for (uint32_t t = 0; t < nt; t++) {
        const struct rl_tier *tier = &conf->tiers[rule->first_tier + t];
        uint64_t wns = tier->window_ms * NS_PER_MS;
        uint32_t q = rl_backstop_quota(tier->limit, b->share);

        if (now_ns - e->start_ns[t] >= wns || now_ns < e->start_ns[t]) {
            e->start_ns[t] = now_ns;
            e->count[t] = 0;
        }
        uint64_t cap = rl_tier_capacity(tier);

        if (cost > cap || (uint64_t)e->count[t] + cost > q) {
            uint64_t end = e->start_ns[t] + wns;
            uint64_t left = (end - now_ns + NS_PER_MS - 1) / NS_PER_MS;

            /* As the node answers: the tier's capacity as its limit, and a cost past it never
             * allowed (docs/PROTOCOL.md, "CHECK"). */
            rep->code = RL_WIRE_LIMITED;
            rep->limit = cap;
            rep->remaining = 0;
            rep->reset_ms = left;
            rep->retry_after_ms = cost > cap ? RL_WIRE_RETRY_NEVER : left > 0 ? left : 1;
            b->st.limited++;
            return false;
        }
    }
    for (uint32_t t = 0; t < nt; t++) {
        e->count[t] += cost;
    }
    b->st.allowed++;
    return true;
}
