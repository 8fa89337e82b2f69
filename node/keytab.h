/*
 * keytab: the node's table of counters: 32-byte entries keyed by a 68-bit fingerprint of
 * (rule, tier, user), each also keeping the shard of its (service, user), in one open-addressing array with linear probing, a byte of hash tag
 * per slot scanned 16 at a time, and backward-shift deletion (no tombstones).
 * It grows by 1.2x at a load of 7/8 up to a memory cap; at the cap it evicts, picking from a
 * few sampled entries the one its owner scores lowest (the limiter: a key back at full
 * allowance, else one of a service over its share that limits nobody now, soonest full),
 * sampling again while the best it found is one it should not take. Not for judging
 * requests (limiter.h).
 *
 * Resizes (grows, and shrinks by the sweep) are incremental: for a while the table keeps the
 * old array beside the new one, and each insert and each sweep moves a bounded slice of the
 * old into the new, so no call pauses for a whole rehash. Finds look in both and move
 * nothing. A shrink waits until the keys have stayed under a quarter of the slots for
 * RL_KEYTAB_SHRINK_MS, so keys that go idle together (and are forgotten by the sweep) and
 * come back together find the table as they left it: a constant key set never resizes it.
 *
 * Entry pointers are valid until the next insert or delete (a sweep deletes): both may move
 * entries. Finds never do, so the pointers of several finds are valid together.
 */
#ifndef RL_KEYTAB_H
#define RL_KEYTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "algo.h"

/* The table (opaque). */
struct rl_keytab;

/* The largest tier id an entry holds (24 bits). */
#define RL_KEYTAB_TIER_MAX 0xffffffu

/* The bits of an entry's shard: any shard of a cluster (RL_SHARDMAP_SHARDS_MAX, 2^20). */
#define RL_KEYTAB_SHARD_BITS 20u
/* The bits of fp_lo an entry keeps (and finds compare). */
#define RL_KEYTAB_FP_LO_BITS 4u

struct rl_keytab_entry {
    uint64_t fp_hi; /* fingerprint: 64 + 4 bits; fp_hi never 0 (keytab sets a bit) */
    __extension__ uint64_t fp_lo : 4;
    __extension__ uint64_t shard : 20; /* the owner's: the shard of the key's (service, user)
                                          (shardmap.h), so a shard's keys can be found and
                                          handed off; 0 at insert, not part of the key */
    __extension__ uint64_t tier : 24; /* rl_tier.id: which parameters the state follows */
    __extension__ uint64_t epoch : 16; /* the owner's: the ownership epoch of the key's shard
                                          when the state was last written (limiter.h,
                                          rl_limiter_check_epoch); 0 at insert */
    struct rl_algo_state st;
};

/* What the table asks of its owner: the tier of an entry, to sweep and evict. */
struct rl_keytab_ops {
    /* True when the entry can be forgotten at now. It may bring e->st up to now, as score
     * may (below), nothing else; it moves no entry. */
    bool (*is_full)(void *arg, struct rl_keytab_entry *e, uint64_t now);
    /* How good a victim the entry is for an insert of `tier` at now: the smallest score is
     * evicted. Its class, score >> RL_KEYTAB_CLASS_SHIFT, says what losing it costs (the
     * RL_KEYTAB_CLASS_* below); a sample whose best class is RL_KEYTAB_CLASS_RESAMPLE or
     * worse is drawn again, up to RL_KEYTAB_EVICT_ROUNDS samples, before one is taken. It may
     * bring e->st up to now (rl_algo_bound: a state a clock's step back left more than a
     * window ahead), nothing else; it moves no entry. */
    uint64_t (*score)(void *arg, struct rl_keytab_entry *e, uint64_t now, uint32_t tier);
    /* Optional: e is about to be evicted with that score (before release). */
    void (*evicted)(void *arg, const struct rl_keytab_entry *e, uint64_t score);
    /* Frees what the entry's state owns (before the entry is dropped). */
    void (*release)(void *arg, struct rl_keytab_entry *e);
    void *arg;
};

#define RL_KEYTAB_CLASS_SHIFT 60
#define RL_KEYTAB_CLASS_RESAMPLE 2u
#define RL_KEYTAB_EVICT_ROUNDS 8u

/* How long the keys must stay under a quarter of the slots before the sweep shrinks the
 * table, in the time of the `now` given to rl_keytab_sweep (ms for the node). */
#define RL_KEYTAB_SHRINK_MS 30000u

struct rl_keytab_stats {
    uint64_t keys;         /* entries held now, in both arrays during a resize */
    uint64_t capacity;     /* slots of the array inserts go to (the new one during a resize) */
    uint64_t bytes;        /* bytes of the table itself: both arrays during a resize */
    uint64_t evicted;      /* entries dropped by the memory cap since start */
    uint64_t expired;      /* entries forgotten by the sweep since start */
    uint64_t resizes;      /* resizes started since start: grows + shrinks */
    uint64_t grows;        /* of which grows */
    uint64_t shrinks;      /* of which shrinks */
    uint64_t resize_steps; /* old slots visited by incremental resizes since start */
    uint64_t resize_left;  /* old slots a resize has still to visit; 0: none running */
};

/*
 * Creates a table that uses no more than max_bytes for itself (min 64 KiB) outside resizes;
 * while one runs, both arrays exist, at most old + new (2.2x the old at a 1.2x grow), less
 * as the old is emptied. Returns 0 or -ENOMEM. ops is copied.
 */
int rl_keytab_create(struct rl_keytab **out, uint64_t max_bytes, const struct rl_keytab_ops *ops);

/* Releases every entry through ops->release, then frees the table. */
void rl_keytab_destroy(struct rl_keytab *t);

/* For tests only: place keys by their fingerprint as it is, not through the table's random
 * key (keytab_int.h, kt_place), so that a test can put a fingerprint at a slot of its choice.
 * Call on a new, empty table. */
void rl_keytab_place_plain(struct rl_keytab *t);

/* For tests: the longest run of taken slots in the array inserts go to (a find walks at most
 * that far). O(slots). */
size_t rl_keytab_longest_run(const struct rl_keytab *t);

/* Turns a 128-bit hash into a fingerprint (hi, lo) as entries store it: fp_hi is h_hi through
 * a bijective 64-bit mixer (murmur3's finaliser), 0 mapped to 1; fp_lo is h_lo xor-folded to
 * 4 bits (the entry's other 20 bits of that word hold its shard). The home slot comes from fp_hi's high bits (fastrange), the tag from its low 7
 * bits. Deterministic, the same in every process. */
void rl_keytab_fingerprint(uint64_t h_hi, uint64_t h_lo, uint64_t *fp_hi, uint32_t *fp_lo);

/* Starts loading the memory a find or insert of fp_hi will touch first (its home's tags and
 * entry), so that the finds of a batch of requests overlap their cache misses: call it for
 * each, then find. Changes nothing. */
void rl_keytab_prefetch(const struct rl_keytab *t, uint64_t fp_hi);

/* The entry with this fingerprint, or NULL. Moves no entry, so earlier pointers stay valid;
 * during a resize it may probe both arrays. */
struct rl_keytab_entry *rl_keytab_find(struct rl_keytab *t, uint64_t fp_hi, uint32_t fp_lo);

/*
 * Adds an entry (the fingerprint must not be present) with a zeroed state, growing the
 * table or, at the cap, evicting another entry first. During a resize it first moves a
 * bounded number of old slots (128) into the new array; a grow starts only once the previous
 * resize has ended, so if the new array is full before the old is empty (only possible after
 * a shrink) this insert moves the rest at once, and at the cap it evicts instead. Returns the
 * entry, or NULL only when memory for the table's first allocation cannot be had.
 */
struct rl_keytab_entry *rl_keytab_insert(struct rl_keytab *t, uint64_t fp_hi, uint32_t fp_lo,
                                         uint32_t tier, uint64_t now);

/* Drops an entry: calls ops->release on it, then removes it. */
void rl_keytab_delete(struct rl_keytab *t, struct rl_keytab_entry *e);

/* Forgets entries that are full at now (ops->release, then removal), examining `budget` slots
 * from where the last sweep stopped and, if it forgot entries of the run (of occupied slots)
 * it ends in, the rest of that run too, as it must close the holes anyway; a few steps a
 * slot. Returns the number forgotten. During a
 * resize it first moves up to `budget` old slots into the new array (so a periodic sweep
 * finishes a resize even without inserts); entries still in the old array are swept once
 * they have moved. When no resize runs (and the last one's memory is given back) and the keys
 * have stayed under 1/4 of the slots for RL_KEYTAB_SHRINK_MS (by `now`: the most keys held
 * over the last one to two such periods is what counts), it then starts a shrink to a load
 * of 1/2 of that most, which gives the memory back as later sweeps and inserts move the
 * keys. */
size_t rl_keytab_sweep(struct rl_keytab *t, uint64_t now, size_t budget);

/*
 * Visits every entry once (for a change of the owner's rules): fn may change e->tier and
 * e->st and returns true to keep the entry, or false to drop it, in which case fn has freed
 * what its state owns already (ops->release is not called: the owner's rules may have
 * changed under it) and the table removes it. A running resize is finished first (one pass
 * over the rest of the old array), so the walk sees one array; removal is the usual backward
 * shift, and the walk starts at an empty slot so that no entry is visited twice nor skipped.
 * Returns the number of entries dropped. Invalidates entry pointers.
 */
size_t rl_keytab_remap(struct rl_keytab *t, bool (*fn)(void *arg, struct rl_keytab_entry *e),
                       void *arg);

/*
 * A visit of every live entry a slice at a time, for work that must not hold the owner's
 * loop for a whole pass (the export of a planned move: a pass over 10M keys takes ~70 ms).
 * rl_keytab_scan_begin opens it; rl_keytab_scan_step first finishes a resize that ran at the
 * begin (a fraction of `budget` old slots a step, about as long as `budget` visits), then
 * visits the next `budget` slots and returns true once every slot has been visited, which
 * closes it (a budget of SIZE_MAX: the rest at once, moving nothing). Each entry present at
 * the begin is visited exactly once unless it is deleted or evicted before its visit,
 * whatever comes between the steps: from the first visit no entry crosses the scan's
 * position; a delete or an eviction whose backward shift would move one across it, a remap,
 * or an insert that finds the table past 15/16 of its slots first visits the rest at once;
 * an eviction at the cap takes only an entry the scan has visited whose removal keeps it open
 * (and no worse a class than the best it saw), else waits as a grow does (two go per insert
 * while the load is past 7/8), so no entry present at the begin is evicted unvisited; an insert
 * past the load of 7/8 below the cap waits with its grow for the scan's end; and sweeps forget
 * nothing until it ends. Entries inserted meanwhile may or may not be visited. visit may change
 * e->st but not the table. One scan at a time: a begin finishes the open one.
 */
void rl_keytab_scan_begin(struct rl_keytab *t, void (*visit)(void *arg, struct rl_keytab_entry *e),
                          void *arg);
bool rl_keytab_scan_step(struct rl_keytab *t, size_t budget);
/* Closes an open scan without visiting the rest. */
void rl_keytab_scan_stop(struct rl_keytab *t);
bool rl_keytab_scanning(const struct rl_keytab *t);

void rl_keytab_stats(const struct rl_keytab *t, struct rl_keytab_stats *s);

struct rl_prom;
/* Appends the table's own metric families (metrics.h's writer): rl_node_expirations_total,
 * rl_node_table_resizes_total{kind} and rl_node_table_slots.
 * The limiter, which owns the table, calls it from rl_limiter_metrics. */
void rl_keytab_metrics(const struct rl_keytab *t, struct rl_prom *p);

#endif
