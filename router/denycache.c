/*
 * denycache: the table of LIMITED answers (denycache.h): a set-associative table allocated
 * once, lazy invalidation by time stamps, and the arithmetic of how long an answer holds.
 * Not for where the router consults it (shed.c) nor the rules probe (upstream.c).
 */
#include "denycache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#define XXH_INLINE_ALL /* rl_deny_fp runs once per CHECK: no call into the library */
#include <xxhash.h>

#include "seed.h"

#define NS_PER_MS 1000000ull

int
rl_deny_init(struct rl_deny *d, uint32_t entries, uint32_t nshards)
{
    uint32_t sets = 1;

    memset(d, 0, sizeof(*d));
    if (entries == 0) {
        return 0;
    }
    while ((uint64_t)sets * RL_DENY_WAYS < entries && sets < (1u << 26)) {
        sets <<= 1;
    }
    d->e = calloc((size_t)sets * RL_DENY_WAYS, sizeof(*d->e));
    d->tag = calloc((size_t)sets * RL_DENY_WAYS, sizeof(*d->tag));
    d->shard_inval = calloc(nshards ? nshards : 1, sizeof(*d->shard_inval));
    if (d->e == NULL || d->tag == NULL || d->shard_inval == NULL) {
        free(d->e);
        free(d->tag);
        free(d->shard_inval);
        memset(d, 0, sizeof(*d));
        return -ENOMEM;
    }
    d->nsets = sets;
    d->seed = rl_seed_random(d);
    d->nshards = nshards;
    d->st.entries = (uint64_t)sets * RL_DENY_WAYS;
    return 0;
}

void
rl_deny_deinit(struct rl_deny *d)
{
    free(d->e);
    free(d->tag);
    free(d->shard_inval);
    memset(d, 0, sizeof(*d));
}

uint64_t
rl_deny_fp(const char *user, size_t ulen)
{
    /* A seed unlike the shard map's, so the pair (hash, fp) is 128 bits of the user. */
    return XXH3_64bits_withSeed(user, ulen, 0x9e3779b97f4a7c15ull);
}

uint64_t
rl_deny_until(uint64_t sent_ns, uint64_t retry_ms)
{
    uint64_t margin;

    if (retry_ms >= RL_WIRE_RETRY_NEVER) {
        return RL_DENY_NEVER;
    }
    /* One ms for the node's whole-ms clock, and 1/1000 of the wait (rounded up) for the
     * difference between the two machines' clock rates. */
    margin = 1 + (retry_ms + 999) / 1000;
    if (retry_ms <= margin) {
        return 0;
    }
    return sent_ns + (retry_ms - margin) * NS_PER_MS;
}

/* The index of k's set's first entry: XXH3 of the whole key with the secret seed as its seed
 * (before, of the key alone: anyone could compute users whose refusals share a victim's set,
 * and evict its held refusal with four of them; then, a first fix mixed the key's fields
 * XORed together with the seed, and a client choosing its cost could make two keys' XOR,
 * hence their set, equal under any seed: the attack rounds of 2026-11-30's twentieth
 * session). */
static size_t
deny_set(const struct rl_deny *d, const struct rl_deny_key *k)
{
    uint64_t w[3] = {k->hash, k->fp, (uint64_t)k->rule << 32 | k->cost};

    return (size_t)(XXH3_64bits_withSeed(w, sizeof(w), d->seed) & (d->nsets - 1)) * RL_DENY_WAYS;
}

/* k's tag (struct rl_deny): 32 bits of its fp, never 0. */
static uint32_t
deny_tag(const struct rl_deny_key *k)
{
    return (uint32_t)(k->fp >> 32) | 1u;
}

static bool
deny_same(const struct rl_deny_entry *e, const struct rl_deny_key *k)
{
    return e->used && e->hash == k->hash && e->fp == k->fp && e->rule == k->rule &&
           e->cost == k->cost && e->shard == k->shard;
}

/* Whether e still holds at now for a node whose epoch is node_epoch. */
static bool
deny_valid(const struct rl_deny *d, const struct rl_deny_entry *e, uint64_t now_ns,
           uint64_t node_epoch)
{
    if (!e->used || now_ns >= e->until_ns || e->sent_ns <= d->all_inval ||
        e->node_epoch != node_epoch) {
        return false;
    }
    return e->shard >= d->nshards || e->sent_ns > d->shard_inval[e->shard];
}

/* Whole ms from now to at, rounded up; 0 when at is past. */
static uint64_t
deny_ms_until(uint64_t at, uint64_t now_ns)
{
    return at > now_ns ? (at - now_ns + NS_PER_MS - 1) / NS_PER_MS : 0;
}

bool
rl_deny_lookup(struct rl_deny *d, const struct rl_deny_key *k, uint64_t now_ns,
               uint64_t node_epoch, struct rl_wire_check_reply *rep)
{
    size_t at;
    uint32_t tag;

    if (d->e == NULL) {
        return false;
    }
    at = deny_set(d, k);
    tag = deny_tag(k);
    for (uint32_t w = 0; w < RL_DENY_WAYS; w++) {
        struct rl_deny_entry *e = &d->e[at + w];

        if (d->tag[at + w] != tag || !deny_same(e, k)) {
            continue;
        }
        if (now_ns == 0) {
            now_ns = uv_hrtime(); /* read only for a candidate: a miss costs no clock */
        }
        if (!deny_valid(d, e, now_ns, node_epoch)) {
            e->used = false;
            d->tag[at + w] = 0;
            return false;
        }
        rep->code = RL_WIRE_LIMITED;
        rep->limit = e->limit;
        rep->remaining = e->remaining;
        rep->reset_ms = deny_ms_until(e->reset_ns, now_ns);
        if (e->until_ns == RL_DENY_NEVER) {
            rep->retry_after_ms = RL_WIRE_RETRY_NEVER;
        } else {
            rep->retry_after_ms = deny_ms_until(e->allow_ns, now_ns);
            if (rep->retry_after_ms == 0) {
                rep->retry_after_ms = 1; /* unreachable: until_ns is before allow_ns */
            }
        }
        d->st.hits++;
        return true;
    }
    return false;
}

/* Whether valid entry e is evicted before valid entry v: one that never expires first, then
 * the one expiring first. */
static bool
deny_evict_before(const struct rl_deny_entry *e, const struct rl_deny_entry *v)
{
    if (e->until_ns == RL_DENY_NEVER) {
        return v->until_ns != RL_DENY_NEVER;
    }
    return v->until_ns != RL_DENY_NEVER && e->until_ns < v->until_ns;
}

bool
rl_deny_insert(struct rl_deny *d, const struct rl_deny_key *k, uint64_t sent_ns, uint64_t now_ns,
               uint64_t node_epoch, const struct rl_wire_check_reply *rep)
{
    struct rl_deny_entry *set, *victim = NULL;
    uint64_t until;
    size_t at;

    if (d->e == NULL || rep->code != RL_WIRE_LIMITED || k->cost == 0) {
        return false;
    }
    /* Sent before the last invalidation: the answer may be of the old rules or owner. */
    if (sent_ns <= d->all_inval || (k->shard < d->nshards && sent_ns <= d->shard_inval[k->shard])) {
        return false;
    }
    until = rl_deny_until(sent_ns, rep->retry_after_ms);
    if (until <= now_ns) {
        return false;
    }
    at = deny_set(d, k);
    set = &d->e[at];
    for (uint32_t w = 0; w < RL_DENY_WAYS && victim == NULL; w++) {
        if (deny_same(&set[w], k)) {
            victim = &set[w];
        }
    }
    for (uint32_t w = 0; w < RL_DENY_WAYS && victim == NULL; w++) {
        if (!set[w].used) {
            victim = &set[w];
        }
    }
    if (victim == NULL) {
        /* Every way is taken: an expired or invalidated one, else one that never expires (a
         * cost past the capacity: one request makes such an entry, so a flood of them must
         * not push out the refusals of users at their limit), else the one expiring first. */
        for (uint32_t w = 0; w < RL_DENY_WAYS; w++) {
            struct rl_deny_entry *e = &set[w];

            if (!deny_valid(d, e, now_ns, e->node_epoch)) {
                victim = e;
                break;
            }
            if (victim == NULL || deny_evict_before(e, victim)) {
                victim = e;
            }
        }
        if (deny_valid(d, victim, now_ns, victim->node_epoch)) {
            d->st.evictions++;
        }
    }
    victim->used = true;
    d->tag[at + (size_t)(victim - set)] = deny_tag(k);
    victim->hash = k->hash;
    victim->fp = k->fp;
    victim->rule = k->rule;
    victim->cost = k->cost;
    victim->shard = k->shard;
    victim->sent_ns = sent_ns;
    victim->until_ns = until;
    victim->allow_ns = until == RL_DENY_NEVER ? RL_DENY_NEVER
                                              : sent_ns + rep->retry_after_ms * NS_PER_MS;
    victim->reset_ns = sent_ns + (rep->reset_ms < (UINT64_MAX - sent_ns) / NS_PER_MS
                                      ? rep->reset_ms * NS_PER_MS
                                      : UINT64_MAX - sent_ns);
    victim->limit = rep->limit;
    victim->remaining = rep->remaining;
    victim->node_epoch = node_epoch;
    d->st.inserts++;
    return true;
}

void
rl_deny_forget_all(struct rl_deny *d, uint64_t now_ns)
{
    if (d->e == NULL) {
        return;
    }
    d->all_inval = now_ns;
    d->st.invalidations++;
}

void
rl_deny_forget_shard(struct rl_deny *d, uint32_t shard, uint64_t now_ns)
{
    if (d->e == NULL || shard >= d->nshards) {
        return;
    }
    d->shard_inval[shard] = now_ns;
    d->st.invalidations++;
}
