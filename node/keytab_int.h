/*
 * keytab_int.h: what the files of the key table share, private to them (keytab.c, the hot
 * path: fingerprint, prefetch, find, insert, delete and eviction; keytab_resize.c, the
 * arrays and their incremental resize, and the table's figures; keytab_sweep.c, the sweep
 * and the remap): the table's layout, the small inline helpers over the tag bytes that find,
 * insert, the move and the sweep all use, and the functions one file calls in another.
 * Calls go one way: keytab_sweep.c calls keytab.c and keytab_resize.c, keytab.c calls
 * keytab_resize.c, which calls neither. Not for the owner of the table (keytab.h) nor for
 * anything outside these three files.
 */
#ifndef RL_KEYTAB_INT_H
#define RL_KEYTAB_INT_H

#include "keytab.h"

#include "keytab_mem.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* An open scan lets inserts take the table past its load of 7/8 up to all but 1/SCAN_LOAD_FREE
 * of the slots before the grow or the eviction that moves entries (rl_keytab_scan_begin). */
#define SCAN_LOAD_FREE 16
/* Slots scanned per tag group; also the length of the mirrored tail of the tag array. */
#define GROUP 16
/* Slots of a new table; also the smallest a table shrinks to. At least GROUP, so the mirror
 * of GROUP tags never wraps around the array more than once. */
#define MIN_CAP 64
/* Mapped memory is given back in pieces of this much (~25 us of munmap on the development
 * VM, where it costs 250-450 ns a page): the old entry array behind the move, and what is
 * left of the old arrays after it, so no call unmaps a whole array (~45 ms for the 390 MiB
 * entry array of 12M slots). */
#define FREE_CHUNK (256u * 1024)
/* The tag of an old slot whose entry was moved to cur or deleted: not empty (probe runs go
 * on through it) and unequal to any fingerprint's tag (which has 0x80 set). */
#define TAG_GONE 0x01u
#define TAG_LIVE 0x80u

/* A hole the sweep made: its offset from where the pass started, and `up`, the index of a
 * later hole to look at instead once this one is taken (a union-find towards the next free
 * hole); up == its own index while it is free. */
struct kt_hole {
    uint32_t off;
    uint32_t up;
};

/* One open-addressing array. */
struct kt_array {
    struct rl_keytab_entry *ents;
    uint8_t *tags; /* cap + GROUP bytes: tags[cap + i] mirrors tags[i] */
    size_t cap;
    uint64_t key, mul; /* the table's place_key and place_mul (kt_place), copied here */
    int reg;      /* the reserved range ents lies in (keytab_mem.h), or KT_MEM_NOREG */
    int tags_reg; /* KT_MEM_NOREG: the tags, 1/32 of the entries, fit the TLB as they are */
};

/* Mapped bytes no longer used, still to unmap. */
struct kt_grave {
    char *p;
    size_t len;
    int reg; /* the reserved range it lies in, or KT_MEM_NOREG */
};

struct rl_keytab {
    struct kt_array cur; /* where inserts go: the whole table outside a resize */
    struct kt_array old; /* during a resize, the array being emptied; all NULL otherwise */
    /* What is left of the old arrays of the last resize: its entries and its tags. Emptied
     * before the next resize starts. */
    struct kt_grave graves[2];
    struct kt_mem mem; /* where the arrays live */
    /* The next 2 MiB piece of cur's entry array to collapse into a huge page, in bytes from
     * its start; SIZE_MAX when none is to be (keytab_mem.c: cur is promoted once a resize
     * has ended, and a sweep hands one piece at a time to the collapsing thread). */
    size_t collapse_at;
    size_t keys;      /* entries in both arrays */
    size_t old_keys;  /* of which live in old */
    size_t moved;     /* old slots [0, moved) have been moved over */
    size_t old_freed; /* bytes at the start of old.ents already unmapped */
    size_t max_keys;  /* 7/8 of cur.cap: the load that triggers a grow or, at max_cap, an evict */
    size_t max_cap;   /* the largest cap whose arrays fit in max_bytes */
    size_t cursor;    /* where the next sweep starts in cur, < cur.cap */
    uint64_t rng;     /* xorshift64 state for the eviction sample, never 0 */
    uint64_t place_key, place_mul; /* kt_place's key and odd multiplier, random per table */
    uint64_t max_bytes;
    struct rl_keytab_ops ops;
    uint64_t evicted;
    uint64_t expired;
    uint64_t grows;
    uint64_t shrinks;
    uint64_t resize_steps;
    /* The shrink's memory (RL_KEYTAB_SHRINK_MS): the most keys held since peak_since, and in
     * the period before it; peak_since is UINT64_MAX until the first sweep. */
    size_t peak;
    size_t peak_prev;
    uint64_t peak_since;
    /* The sweep's holes in the current run (sweep_cur), ascending; grown on demand. */
    struct kt_hole *holes;
    size_t holes_cap;
    /* The open scan (rl_keytab_scan_begin), if scan_visit is not NULL: the next slot of cur
     * it visits. While it is open no resize starts, and from its first visit (once a resize
     * that ran at its begin has ended) no entry crosses scan_next nor the array's end: a
     * removal whose shift would move one (kt_scan_keeps) visits the rest first
     * (kt_scan_finish), and sweeps wait. */
    void (*scan_visit)(void *arg, struct rl_keytab_entry *e);
    void *scan_arg;
    size_t scan_next;
    /* Steps the sweeps took since start: slots visited, hole searches and hole-list upkeep.
     * For tests (rl_keytab_sweep_work), which check that a sweep does bounded work. */
    uint64_t sweep_work;
};

/*
 * Where a fingerprint goes: a keyed hash of fp_hi, from which its home slot (the high bits)
 * and its tag (the low 7) come: multiply-shift hashing, (fp_hi ^ key) * mul with the table's
 * random key and odd multiplier (drawn from the kernel's random source when the table is
 * made; 2-universal: two fingerprints share their high bits with the chance two random values
 * would, whatever the fingerprints), its high half folded into the low for the tag. A
 * fingerprint follows from public parts (the user, the rule's or the inline limit's seed: the
 * same on every node, so that counters can be handed off), so placing by it alone let a
 * client choose users that all land in one part of the table and make every lookup of every
 * client walk one long run (the attack round of 2026-11-30: 20 to 100 times slower); the key
 * keeps where a key lands unknown outside the process. Handoffs and finds still name keys by
 * fingerprint. Two instructions and a fold, where XXH3 cost 5% of the node's decisions.
 */
static inline uint64_t
kt_place(const struct kt_array *a, uint64_t fp_hi)
{
    /* mul 0: a test's table placed by fingerprint (rl_keytab_place_plain) */
    if (__builtin_expect(a->mul == 0, 0)) {
        return fp_hi;
    }
    uint64_t m = (fp_hi ^ a->key) * a->mul;
    return m ^ (m >> 32);
}

/* The home slot of a placement (kt_place) in [0, cap): fastrange, which needs no power-of-two
 * cap. Also takes any random value (the eviction's sample). */
static inline size_t
home_of(uint64_t place, size_t cap)
{
    __extension__ typedef unsigned __int128 u128;
    return (size_t)(((u128)place * cap) >> 64);
}

/* The tag of a placement: its low 7 bits, which fastrange (using the high bits) leaves
 * independent of the home slot. */
static inline uint8_t
tag_of(uint64_t place)
{
    return (uint8_t)(TAG_LIVE | (place & 0x7fu));
}

/* The home slot of a fingerprint in a. */
static inline size_t
home_in(const struct kt_array *a, uint64_t fp_hi)
{
    return home_of(kt_place(a, fp_hi), a->cap);
}

static inline void
set_tag(struct kt_array *a, size_t i, uint8_t tag)
{
    a->tags[i] = tag;
    if (i < GROUP) {
        a->tags[a->cap + i] = tag;
    }
}

static inline size_t
next_slot(const struct kt_array *a, size_t i)
{
    return i + 1 == a->cap ? 0 : i + 1;
}

/* The bits of the first n (<= GROUP) slots of a group. */
static inline uint32_t
first_bits(size_t n)
{
    return (UINT32_C(1) << n) - 1;
}

/* Bit masks over the GROUP tags starting at tags[pos]: those equal to tag, and those
 * holding a live entry (only live tags have their high bit set). */
#ifdef __SSE2__
static inline uint32_t
group_match(const uint8_t *g, uint8_t tag)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)g);
    return (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8((char)tag)));
}

static inline uint32_t
group_full(const uint8_t *g)
{
    return (uint32_t)_mm_movemask_epi8(_mm_loadu_si128((const __m128i *)(const void *)g));
}
#else
static inline uint32_t
group_match(const uint8_t *g, uint8_t tag)
{
    uint32_t m = 0;
    for (unsigned i = 0; i < GROUP; i++) {
        m |= (uint32_t)(g[i] == tag) << i;
    }
    return m;
}

static inline uint32_t
group_full(const uint8_t *g)
{
    uint32_t m = 0;
    for (unsigned i = 0; i < GROUP; i++) {
        m |= (uint32_t)(g[i] >> 7) << i;
    }
    return m;
}
#endif

static inline bool
resizing(const struct rl_keytab *t)
{
    return t->old.tags != NULL;
}

static inline bool
scanning(const struct rl_keytab *t)
{
    return t->scan_visit != NULL;
}

/* Places an entry known to be absent at the first free slot of a; returns the slot. */
static inline size_t
place(const struct kt_array *a, uint64_t fp_hi)
{
    size_t pos = home_in(a, fp_hi);
    for (;;) {
        uint32_t empty = ~group_full(a->tags + pos) & 0xffffu;
        if (empty != 0) {
            size_t i = pos + (size_t)__builtin_ctz(empty);
            return i >= a->cap ? i - a->cap : i;
        }
        pos += GROUP;
        if (pos >= a->cap) {
            pos -= a->cap;
        }
    }
}

static inline uint64_t
grave_bytes(const struct rl_keytab *t)
{
    return t->graves[0].len + t->graves[1].len;
}

/* Empties slot i of cur: its tag, and its fingerprint, so that rl_keytab_find's look at the
 * home's entries before the tags never takes a vacated slot's stale copy for a live entry
 * (fp_hi is never 0 in a live entry made by rl_keytab_fingerprint). */
static inline void
vacate(struct kt_array *a, size_t i)
{
    set_tag(a, i, 0);
    a->ents[i].fp_hi = 0;
}

/* keytab_resize.c */

/* Bytes the table takes for itself with arrays of cap slots. */
uint64_t kt_table_bytes(size_t cap);
/* Zeroed arrays of cap slots; 0 or -ENOMEM. */
int kt_array_init(struct rl_keytab *t, struct kt_array *a, size_t cap, int avoid);
void kt_array_deinit(struct rl_keytab *t, struct kt_array *a);
/* Sets the derived limits of a cur of cap slots (and scales the sweep cursor). */
void kt_set_cap(struct rl_keytab *t, size_t old_cap, size_t cap);
/* Unmaps up to `bytes` of the graves; all of them for SIZE_MAX. */
void kt_drain(struct rl_keytab *t, size_t bytes);
/* Ends a resize: the rest of the old arrays goes to the graves. */
void kt_end_resize(struct rl_keytab *t);
/* Moves the live entries of the next `budget` old slots into cur; returns the slots visited. */
size_t kt_migrate(struct rl_keytab *t, size_t budget);
/* Starts moving the table into arrays of new_cap slots; 0 or -ENOMEM (table unchanged). */
int kt_start_resize(struct rl_keytab *t, size_t new_cap);

/* keytab.c */

/* Empties slot i of cur and closes the gap by backward shift. An open scan must keep it: the
 * caller asked kt_scan_keeps, or finished the scan first. */
void kt_remove_slot(struct rl_keytab *t, size_t i);
/* Whether removing the entry of slot i of cur keeps the open scan exact without finishing
 * it: true with no scan open, before its first visit (a resize of its begin still runs), and
 * when the run from i to the next empty slot neither wraps past the array's end nor reaches
 * past the scan's next slot, so every entry the backward shift moves stays on its side of
 * it (visited, or still to visit). */
bool kt_scan_keeps(const struct rl_keytab *t, size_t i);
/* Visits the rest of an open scan at once and closes it; nothing when none is open. */
void kt_scan_finish(struct rl_keytab *t);

#endif
