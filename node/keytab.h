/*
 * keytab: the node's table of counters: 32-byte entries keyed by a 96-bit fingerprint of
 * (rule, tier, user), in one open-addressing array with linear probing, a byte of hash tag
 * per slot scanned 16 at a time, and backward-shift deletion (no tombstones).
 * It grows by 1.5x up to a memory cap; at the cap it evicts, picking from a few sampled
 * entries the one that will be back at full allowance soonest, so eviction can only err
 * towards allowing. Not for judging requests (limiter.h).
 *
 * Entry pointers are valid until the next insert or delete.
 */
#ifndef RL_KEYTAB_H
#define RL_KEYTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "algo.h"

/* The table (opaque). */
struct rl_keytab;

struct rl_keytab_entry {
    uint64_t fp_hi; /* fingerprint: 96 bits; never all-zero (keytab sets a bit) */
    uint32_t fp_lo;
    uint16_t tier; /* rl_tier.id: which parameters the state follows */
    uint16_t flags;
    struct rl_algo_state st;
};

/* What the table asks of its owner: the tier of an entry, to sweep and evict. */
struct rl_keytab_ops {
    /* True when the entry can be forgotten at now. */
    bool (*is_full)(void *arg, const struct rl_keytab_entry *e, uint64_t now);
    /* When the entry will be full again (eviction victim: the smallest). */
    uint64_t (*full_at)(void *arg, const struct rl_keytab_entry *e);
    /* Frees what the entry's state owns (before the entry is dropped). */
    void (*release)(void *arg, struct rl_keytab_entry *e);
    void *arg;
};

struct rl_keytab_stats {
    uint64_t keys;     /* entries held now */
    uint64_t capacity; /* slots */
    uint64_t bytes;    /* bytes of the table itself */
    uint64_t evicted;  /* entries dropped by the memory cap since start */
    uint64_t expired;  /* entries forgotten by the sweep since start */
    uint64_t resizes;
};

/*
 * Creates a table that never uses more than max_bytes for itself (min 64 KiB). Returns 0 or
 * -ENOMEM. ops is copied.
 */
int rl_keytab_create(struct rl_keytab **out, uint64_t max_bytes, const struct rl_keytab_ops *ops);

/* Releases every entry through ops->release, then frees the table. */
void rl_keytab_destroy(struct rl_keytab *t);

/* Turns a 128-bit hash into a fingerprint (hi, lo) as entries store it: fp_hi is h_hi through
 * a bijective 64-bit mixer (murmur3's finaliser), 0 mapped to 1; fp_lo is the two halves of
 * h_lo xor-folded. The home slot comes from fp_hi's high bits (fastrange), the tag from its
 * low 7 bits. Deterministic, the same in every process. */
void rl_keytab_fingerprint(uint64_t h_hi, uint64_t h_lo, uint64_t *fp_hi, uint32_t *fp_lo);

/* The entry with this fingerprint, or NULL. */
struct rl_keytab_entry *rl_keytab_find(struct rl_keytab *t, uint64_t fp_hi, uint32_t fp_lo);

/*
 * Adds an entry (the fingerprint must not be present) with a zeroed state, growing the
 * table or, at the cap, evicting another entry first. Returns the entry, or NULL only when
 * memory for the table's first allocation cannot be had.
 */
struct rl_keytab_entry *rl_keytab_insert(struct rl_keytab *t, uint64_t fp_hi, uint32_t fp_lo,
                                         uint16_t tier, uint64_t now);

/* Drops an entry: calls ops->release on it, then removes it. */
void rl_keytab_delete(struct rl_keytab *t, struct rl_keytab_entry *e);

/* Forgets entries that are full at now (ops->release, then removal), examining at most
 * `budget` slots from where the last sweep stopped. Returns the number forgotten. When the
 * load has fallen under 1/4, it then shrinks the table to a load of 1/2, giving the memory
 * back (a rehash of the remaining keys: a pause like a grow's). */
size_t rl_keytab_sweep(struct rl_keytab *t, uint64_t now, size_t budget);

void rl_keytab_stats(const struct rl_keytab *t, struct rl_keytab_stats *s);

#endif
