/*
 * keytab: the node's table of counters (keytab.h). An array of 32-byte entries and one of a
 * tag byte per slot (0 = empty, else 0x80 | 7 bits of the fingerprint) that find scans 16 at
 * a time, so a probe touches the entry array only on a likely match. Linear probing from a
 * home slot chosen by fastrange, deletion by backward shift, so there are no tombstones and a
 * find stops at the first empty slot. Not for judging requests or knowing what a state means:
 * the owner's ops answer that.
 *
 * Memory: 33 bytes per slot plus 16 mirrored tag bytes. The load stays in [0.73, 7/8] while
 * growing (grow by 1.2x at 7/8), so the table costs 38 to 45 bytes per key; once the sweep
 * forgets keys the load may fall to 1/4, and stay there for RL_KEYTAB_SHRINK_MS, before the
 * sweep shrinks the table to a load of 1/2. The small grow step costs more moves (the grows move
 * 1 / 0.2 = 5 entries per key inserted, against 2 at 1.5x), all incremental.
 *
 * Why the shrink waits: a shrink at the first sweep that saw the load under 1/4 made a table
 * whose keys went idle for a few seconds (a pause in traffic: the sweep forgets every key
 * back at full allowance) halve itself, and then grow back (two or more resizes, each moving
 * every key, with the munmap and first-touch page faults that go with them) as soon as the
 * same keys came back: resizes under a constant key set. The sweep now tracks the most keys
 * held over the current and the previous period of RL_KEYTAB_SHRINK_MS and shrinks only when
 * that most is under 1/4 of the slots, to a load of 1/2 of it.
 * Arrays of 64 KiB or more are mmap'd (and given back with munmap), so the process RSS follows
 * the table down when it shrinks; glibc's malloc would keep freed blocks in its heap after
 * raising its dynamic mmap threshold. Entry arrays of 4 MiB or more live instead in one of
 * two address ranges reserved once per table for the largest array the cap allows, in
 * transparent huge pages where the kernel gives them, a resize filling the range the
 * current array does not use and the old pages going back by MADV_DONTNEED
 * (keytab_mem.c says why). A find first compares the home's three entries, the lines
 * rl_keytab_prefetch loaded, and reads the tags only when the key is not there: so that no
 * stale copy is taken for a live entry, every slot of cur that is emptied gets fp_hi 0
 * (vacate), which no live entry has.
 *
 * Resizing is incremental, as in Redis's dict. A resize allocates new arrays (cur) and keeps
 * the old ones (old) until every live entry has moved over; inserts go to cur only, a find
 * looks in cur and then in old. Each insert moves the live entries of the next INSERT_STEP
 * old slots, in slot order (fastrange keeps homes in hash order, so the writes to cur are
 * nearly sequential), and each sweep the next `budget` slots. Finds move nothing, so the
 * pointers several finds return stay valid together (the limiter judges every tier of a
 * rule before it inserts). A moved or deleted old slot is not emptied, which would cut the
 * probe runs through it (and there is no backward shift in old): it keeps the tag TAG_GONE,
 * which no fingerprint's tag equals and which is not empty, so a find in old walks past it
 * and reports a moved key absent there (cur has it, or it was deleted since). The live
 * entries of old are therefore all in slots [moved, old.cap).
 *
 * Bounds: an insert moves at most INSERT_STEP old slots. A grow at a load of 7/8 by 1.2x
 * leaves room for 0.175 cap inserts before cur is full and needs cap / INSERT_STEP of them,
 * so a grow always ends in time, and a resize never starts while another runs. A shrink (to
 * a load of 1/2, with more than 4 old slots per key) may not: if cur reaches its maximum
 * load while old still holds entries, that insert moves the rest at once, which is quick
 * (old holds under 1/4 of its slots and empty groups are skipped 16 at a time), then grows
 * as usual. A grow to max_cap is the exception: there the insert evicts, from either array,
 * as it would once the move ended, so a last grow to a max_cap just above cap does not make
 * one insert wait for the whole move.
 *
 * While a resize runs both arrays exist: max_bytes bounds the table between resizes, the
 * transient peak is old + new (2.2x the old size at a 1.2x grow). The old entry array is
 * given back to the kernel FREE_CHUNK bytes at a time behind the move, so the peak falls as
 * the move goes; the old tag array stays to the end, as probe runs pass through it, and then
 * goes, with the last of the entry array, to a grave that the following inserts and sweeps
 * unmap FREE_CHUNK at a time, so no call unmaps a whole array either. In a reserved range
 * with huge pages the pieces are whole 2 MiB pages, each costing about what a 4 KiB page
 * does (kt_mem_cost).
 *
 * Measured inserting 10M keys on the development VM (2 vCPUs): the longest insert went from
 * 215-235 ms (a stop-the-world rehash, mostly the kernel's first touch of the new pages, at
 * 1.4-5 us a page) to the VM's own scheduling noise (0.2-4 ms wall clock, as a bare loop sees;
 * at most ~0.1 ms of the thread's CPU time). An insert during a move averages ~4 us, one
 * outside ~0.2 us; a node sweep tick (65536 slots) during a move takes ~2-3 ms instead of
 * 0.5 ms. Steady-state bytes per key are unchanged, and the RSS hardly rises during a move,
 * as the old entry array goes while the new one is touched.
 */
#include "keytab.h"

#include "keytab_mem.h"
#include "metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Slots scanned per tag group; also the length of the mirrored tail of the tag array. */
#define GROUP 16
/* Slots of a new table; also the smallest a table shrinks to. At least GROUP, so the mirror
 * of GROUP tags never wraps around the array more than once. */
#define MIN_CAP 64
#define PAGE 4096u
/* Occupied slots the eviction compares. */
#define EVICT_SAMPLE 8
#define MIN_BYTES (64u * 1024)
/* Old slots an insert moves during a resize: about 110 entries at a load of 7/8, a few
 * microseconds, most of it the first touch of a page of the new entry array. A grow by 1.2x
 * leaves room for 0.175 cap inserts, so it needs more than 5.7 slots an insert to end
 * before cur fills. */
#define INSERT_STEP 128u
/* Mapped memory is given back in pieces of this much (~25 us of munmap on the development
 * VM, where it costs 250-450 ns a page): the old entry array behind the move, and what is
 * left of the old arrays after it, so no call unmaps a whole array (~45 ms for the 390 MiB
 * entry array of 12M slots). */
#define FREE_CHUNK (256u * 1024)
/* The tag of an old slot whose entry was moved to cur or deleted: not empty (probe runs go
 * on through it) and unequal to any fingerprint's tag (which has 0x80 set). */
#define TAG_GONE 0x01u
#define TAG_LIVE 0x80u
/* The bits of fp_lo an entry keeps. */
#define FP_LO_MASK ((1u << RL_KEYTAB_FP_LO_BITS) - 1u)
/* A grow multiplies the slots by (GROW_DEN + 1) / GROW_DEN: 1.2x. */
#define GROW_DEN 5u

/* The memory budget of 33 bytes a slot rests on it. */
_Static_assert(sizeof(struct rl_keytab_entry) == 32, "keytab entries are 32 bytes");

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
    /* Steps the sweeps took since start: slots visited, hole searches and hole-list upkeep.
     * For tests (rl_keytab_sweep_work), which check that a sweep does bounded work. */
    uint64_t sweep_work;
};

/* Bytes an array of n bytes really takes: mmap'd arrays take whole pages. */
static size_t
array_bytes(size_t n)
{
    return kt_mem_bytes(n);
}

static uint64_t
arrays_bytes(size_t cap)
{
    return array_bytes(cap * sizeof(struct rl_keytab_entry)) + array_bytes(cap + GROUP);
}

static uint64_t
table_bytes(size_t cap)
{
    return sizeof(struct rl_keytab) + arrays_bytes(cap);
}

/* Zeroed arrays of cap slots (keytab_mem.c: large entry arrays in the reserved range other
 * than avoid's, in huge pages where the kernel allows). Returns 0 or -ENOMEM. */
static int
kt_array_init(struct rl_keytab *t, struct kt_array *a, size_t cap, int avoid)
{
    a->ents = kt_mem_alloc(&t->mem, cap * sizeof(*a->ents), true, avoid, &a->reg);
    a->tags = kt_mem_alloc(&t->mem, cap + GROUP, false, KT_MEM_NOREG, &a->tags_reg);
    a->cap = cap;
    if (a->ents == NULL || a->tags == NULL) {
        kt_mem_free(&t->mem, a->ents, cap * sizeof(*a->ents), a->reg);
        kt_mem_free(&t->mem, a->tags, cap + GROUP, a->tags_reg);
        return -ENOMEM;
    }
    return 0;
}

static void
kt_array_deinit(struct rl_keytab *t, struct kt_array *a)
{
    kt_mem_free(&t->mem, a->ents, a->cap * sizeof(*a->ents), a->reg);
    kt_mem_free(&t->mem, a->tags, a->cap + GROUP, a->tags_reg);
    memset(a, 0, sizeof(*a));
}

/* The home slot of a fingerprint in [0, cap): fastrange, which needs no power-of-two cap. */
static inline size_t
home_of(uint64_t fp_hi, size_t cap)
{
    __extension__ typedef unsigned __int128 u128;
    return (size_t)(((u128)fp_hi * cap) >> 64);
}

/* The tag of a fingerprint: its low 7 bits, which fastrange (using the high bits) leaves
 * independent of the home slot. */
static inline uint8_t
tag_of(uint64_t fp_hi)
{
    return (uint8_t)(TAG_LIVE | (fp_hi & 0x7fu));
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

void
rl_keytab_fingerprint(uint64_t h_hi, uint64_t h_lo, uint64_t *fp_hi, uint32_t *fp_lo)
{
    /* fp_hi picks the home slot (its high bits) and the tag (its low 7 bits), so it goes
     * through murmur3's finaliser, a bijection, in case the caller's hash has weak bits
     * (say, the same hash as the shard, whose low bits are constrained on one node). Zero
     * becomes 1 so that fp_hi is never 0, at no cost in distinct fingerprints worth the
     * name: 67.99 bits remain with fp_lo's 4. */
    uint64_t h = h_hi;
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h *= UINT64_C(0xc4ceb9fe1a85ec53);
    h ^= h >> 33;
    h += (h == 0);
    *fp_hi = h;
    h_lo ^= h_lo >> 32;
    h_lo ^= h_lo >> 16;
    h_lo ^= h_lo >> 8;
    *fp_lo = (uint32_t)((h_lo ^ (h_lo >> 4)) & FP_LO_MASK);
}

static inline bool
resizing(const struct rl_keytab *t)
{
    return t->old.tags != NULL;
}

/* True when e points into the old entry array. */
static inline bool
in_old(const struct rl_keytab *t, const struct rl_keytab_entry *e)
{
    return resizing(t) &&
           (uintptr_t)e - (uintptr_t)t->old.ents < t->old.cap * sizeof(struct rl_keytab_entry);
}

/* Places an entry known to be absent at the first free slot of a; returns the slot. */
static size_t
place(const struct kt_array *a, uint64_t fp_hi)
{
    size_t pos = home_of(fp_hi, a->cap);
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

/* The live entry of a with this fingerprint, probing from pos, its home. A probe ends at the
 * first empty slot (tag 0): in old, gone slots are not empty, so runs stay whole. */
static inline struct rl_keytab_entry *
find_in(const struct kt_array *a, size_t pos, uint64_t fp_hi, uint32_t fp_lo)
{
    uint8_t tag = tag_of(fp_hi);
    for (;;) {
        const uint8_t *g = a->tags + pos;
        uint32_t match = group_match(g, tag);
        uint32_t empty = group_match(g, 0);
        if (empty != 0) {
            /* The key, if present, lies before the first empty slot from its home. */
            match &= (empty & (0u - empty)) - 1;
        }
        while (match != 0) {
            size_t i = pos + (size_t)__builtin_ctz(match);
            if (i >= a->cap) {
                i -= a->cap;
            }
            struct rl_keytab_entry *e = &a->ents[i];
            if (e->fp_hi == fp_hi && e->fp_lo == fp_lo) {
                return e;
            }
            match &= match - 1;
        }
        if (empty != 0) {
            return NULL;
        }
        pos += GROUP;
        if (pos >= a->cap) {
            pos -= a->cap;
        }
    }
}

/* Sets the derived limits of a cur of cap slots. The sweep cursor keeps its relative place:
 * fastrange keeps homes in hash order, so what it passed in the old array lies before the
 * scaled cursor in the new one. */
static void
set_cap(struct rl_keytab *t, size_t old_cap, size_t cap)
{
    __extension__ typedef unsigned __int128 u128;
    t->max_keys = cap - (cap + 7) / 8;
    t->cursor = old_cap == 0 ? 0 : (size_t)((u128)t->cursor * cap / old_cap);
}

/* Unmaps up to `bytes` of the graves, from their ends; all of them for SIZE_MAX. */
static void
drain(struct rl_keytab *t, size_t bytes)
{
    for (size_t k = 0; k < 2 && bytes > 0; k++) {
        struct kt_grave *g = &t->graves[k];
        /* Whole grains, so no huge page of a reserved range is split. */
        size_t grain = kt_mem_grain(&t->mem, g->reg);
        size_t want = bytes < SIZE_MAX - grain ? (bytes + grain - 1) / grain * grain : SIZE_MAX;
        size_t n = g->len < want ? g->len : want;
        if (n == 0) {
            continue;
        }
        g->len -= n;
        kt_mem_release(&t->mem, g->p + g->len, n, g->reg);
        size_t cost = kt_mem_cost(&t->mem, n, g->reg);
        bytes = cost < bytes ? bytes - cost : 0;
    }
}

static uint64_t
grave_bytes(const struct rl_keytab *t)
{
    return t->graves[0].len + t->graves[1].len;
}

/* Frees an array of n bytes whose first `freed` bytes were given back already: at once if
 * malloc'd, else into a grave, which inserts and sweeps give back piece by piece. */
static void
bury(const struct rl_keytab *t, struct kt_grave *g, void *p, size_t n, size_t freed, int reg)
{
    if (kt_mem_malloced(n)) {
        free(p);
        return;
    }
    g->p = (char *)p + freed;
    g->len = kt_mem_span(&t->mem, n, reg) - freed;
    g->reg = reg;
}

/* Ends a resize: what is left of the old arrays goes to the graves, which are empty, as
 * start_resize emptied them. */
static void
end_resize(struct rl_keytab *t)
{
    struct kt_array *o = &t->old;
    bury(t, &t->graves[0], o->ents, o->cap * sizeof(*o->ents), t->old_freed, o->reg);
    bury(t, &t->graves[1], o->tags, o->cap + GROUP, 0, o->tags_reg);
    memset(o, 0, sizeof(*o));
    /* cur is complete: into huge pages, a piece per sweep from now on. */
    t->collapse_at = kt_mem_promote(&t->mem, t->cur.ents, t->cur.cap * sizeof(*t->cur.ents),
                                    t->cur.reg)
                         ? 0
                         : SIZE_MAX;
    t->old_keys = 0;
    t->moved = 0;
    t->old_freed = 0;
}

/* Gives back the pages of the old entry array the move has left behind, once they make a
 * FREE_CHUNK: no find reads them (their tags are gone), and unmapping in pieces spreads the
 * kernel's work over the move instead of one munmap of the whole array at its end. */
static void
free_behind(struct rl_keytab *t)
{
    size_t n = t->old.cap * sizeof(struct rl_keytab_entry);
    if (kt_mem_malloced(n)) {
        return;
    }
    size_t grain = kt_mem_grain(&t->mem, t->old.reg);
    size_t dead = t->moved * sizeof(struct rl_keytab_entry) / grain * grain;
    if (dead - t->old_freed >= FREE_CHUNK) {
        kt_mem_release(&t->mem, (char *)t->old.ents + t->old_freed, dead - t->old_freed,
                       t->old.reg);
        t->old_freed = dead;
    }
}

/* Moves the live entries of the next `budget` old slots (at most) into cur, and ends the
 * resize once old holds no live entry. Groups of 16 slots with nothing live are skipped in
 * one step but count as 16 slots. Returns the slots visited. */
static size_t
migrate(struct rl_keytab *t, size_t budget)
{
    struct kt_array *o = &t->old;
    size_t i = t->moved;
    size_t end = o->cap - i > budget ? i + budget : o->cap;
    while (i < end && t->old_keys > 0) {
        size_t n = end - i < GROUP ? end - i : GROUP;
        uint32_t live = group_full(o->tags + i) & first_bits(n);
        while (live != 0) {
            size_t k = i + (size_t)__builtin_ctz(live);
            size_t j = place(&t->cur, o->ents[k].fp_hi);
            t->cur.ents[j] = o->ents[k];
            set_tag(&t->cur, j, o->tags[k]);
            set_tag(o, k, TAG_GONE);
            t->old_keys--;
            live &= live - 1;
        }
        i += n;
    }
    size_t visited = i - t->moved;
    t->moved = i;
    t->resize_steps += visited;
    if (t->old_keys == 0) {
        end_resize(t);
    } else {
        free_behind(t);
    }
    return visited;
}

/* Starts moving the table into arrays of new_cap slots (new_cap > keys); no resize may be
 * running. Returns 0 or -ENOMEM, in which case the table is unchanged. */
static int
start_resize(struct rl_keytab *t, size_t new_cap)
{
    struct kt_array a;
    /* Usually drained long ago (a sweep starts a shrink only once they are). A grow can come
     * right after a resize ended, mostly after an insert outran a shrink: then they hold the
     * rest of the shrink's old arrays, whose unmapping costs about what walking them did. */
    drain(t, SIZE_MAX);
    int err = kt_array_init(t, &a, new_cap, t->cur.reg);
    if (err != 0) {
        return err;
    }
    t->old = t->cur;
    t->cur = a;
    t->collapse_at = SIZE_MAX; /* the new array fills in 4 KiB pages; end_resize promotes it */
    t->old_keys = t->keys;
    t->moved = 0;
    t->old_freed = 0;
    set_cap(t, t->old.cap, new_cap);
    if (new_cap > t->old.cap) {
        t->grows++;
    } else {
        t->shrinks++;
    }
    if (t->old_keys == 0) {
        end_resize(t);
    }
    return 0;
}

int
rl_keytab_create(struct rl_keytab **out, uint64_t max_bytes, const struct rl_keytab_ops *ops)
{
    int err = -ENOMEM;
    struct rl_keytab *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        goto fail;
    }
    if (max_bytes < MIN_BYTES) {
        max_bytes = MIN_BYTES;
    }
    t->max_bytes = max_bytes;
    t->ops = *ops;
    t->rng = UINT64_C(0x9e3779b97f4a7c15);
    t->peak_since = UINT64_MAX;
    t->collapse_at = SIZE_MAX;

    /* The largest cap that fits. Page rounding costs at most a page per array, so start
     * below it and step up (at most ~250 steps): table_bytes grows with cap. */
    uint64_t room = max_bytes - sizeof(struct rl_keytab) - GROUP - 2 * PAGE;
    uint64_t est = room / (sizeof(struct rl_keytab_entry) + 1);
    if (est > SIZE_MAX / 64) {
        est = SIZE_MAX / 64;
    }
    size_t cap = (size_t)est;
    while (cap < SIZE_MAX / 64 && table_bytes(cap + 1) <= max_bytes) {
        cap++;
    }
    if (cap < MIN_CAP) {
        goto fail;
    }
    t->max_cap = cap;

    kt_mem_init(&t->mem, t->max_cap * sizeof(struct rl_keytab_entry));
    err = kt_array_init(t, &t->cur, MIN_CAP, KT_MEM_NOREG);
    if (err != 0) {
        goto fail;
    }
    set_cap(t, 0, MIN_CAP);
    *out = t;
    return 0;

fail:
    free(t);
    return err;
}

static void
release_all(struct rl_keytab *t, struct kt_array *a, size_t from)
{
    for (size_t i = from; i < a->cap; i++) {
        if (a->tags[i] & TAG_LIVE) {
            t->ops.release(t->ops.arg, &a->ents[i]);
        }
    }
}

void
rl_keytab_destroy(struct rl_keytab *t)
{
    if (t == NULL) {
        return;
    }
    release_all(t, &t->cur, 0);
    if (resizing(t)) {
        release_all(t, &t->old, t->moved);
        end_resize(t);
    }
    drain(t, SIZE_MAX);
    kt_array_deinit(t, &t->cur);
    kt_mem_fini(&t->mem);
    free(t->holes);
    free(t);
}

void
rl_keytab_prefetch(const struct rl_keytab *t, uint64_t fp_hi)
{
    size_t pos = home_of(fp_hi, t->cur.cap);
    __builtin_prefetch(&t->cur.tags[pos]);
    __builtin_prefetch(&t->cur.ents[pos]);
    /* At a load near 7/8 a key sits a few slots past its home: the next line too. */
    if (pos + 2 < t->cur.cap) {
        __builtin_prefetch(&t->cur.ents[pos + 2]);
    }
}

struct rl_keytab_entry *
rl_keytab_find(struct rl_keytab *t, uint64_t fp_hi, uint32_t fp_lo)
{
    fp_lo &= FP_LO_MASK; /* as entries keep it */
    size_t pos = home_of(fp_hi, t->cur.cap);
    /* Most keys sit within two slots of their home, in the entry lines rl_keytab_prefetch
     * loaded: look there first, without the tags (their line and their page). A vacated
     * slot of cur has fp_hi 0 (vacate), and a key is in cur or old, never both, so a match
     * here is the key's live entry. The tags' line is asked for first, so that a key not
     * found there (or a find without rl_keytab_prefetch) waits for one miss, not two. */
    __builtin_prefetch(&t->cur.tags[pos]);
    if (fp_hi != 0 && pos + 2 < t->cur.cap) {
        struct rl_keytab_entry *h = &t->cur.ents[pos];
        for (size_t k = 0; k < 3; k++) {
            if (h[k].fp_hi == fp_hi && h[k].fp_lo == fp_lo) {
                return &h[k];
            }
        }
    }
    struct rl_keytab_entry *e = find_in(&t->cur, pos, fp_hi, fp_lo);
    if (e == NULL && t->old_keys > 0) {
        e = find_in(&t->old, home_of(fp_hi, t->old.cap), fp_hi, fp_lo);
    }
    return e;
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

/* Empties slot i of cur and closes the gap: each following entry of the run moves back into
 * the hole if that does not put it before its home. Entries only ever move towards their
 * home, never past the hole, which is what the sweep relies on. */
static void
remove_slot(struct rl_keytab *t, size_t i)
{
    struct kt_array *a = &t->cur;
    size_t j = next_slot(a, i);
    while (a->tags[j] != 0) {
        size_t h = home_of(a->ents[j].fp_hi, a->cap);
        /* Distances from home and from the hole, cyclically: j may move to i iff i lies in
         * [h, j]. */
        size_t dh = j >= h ? j - h : j + a->cap - h;
        size_t di = j >= i ? j - i : j + a->cap - i;
        if (dh >= di) {
            a->ents[i] = a->ents[j];
            set_tag(a, i, a->tags[j]);
            i = j;
        }
        j = next_slot(a, j);
    }
    vacate(a, i);
    t->keys--;
}

/* Releases and removes a live entry of either array. In old it is only marked gone: no
 * backward shift there, so nothing else in old moves. */
static void
drop(struct rl_keytab *t, struct rl_keytab_entry *e)
{
    t->ops.release(t->ops.arg, e);
    if (in_old(t, e)) {
        set_tag(&t->old, (size_t)(e - t->old.ents), TAG_GONE);
        t->old_keys--;
        t->keys--;
    } else {
        remove_slot(t, (size_t)(e - t->cur.ents));
    }
}

static uint64_t
xorshift(struct rl_keytab *t)
{
    uint64_t x = t->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t->rng = x;
    return x;
}

/* Offers the first `want` live entries of a from slot pos on (wrapping from the end of the
 * array to slot lo) to the eviction, keeping in *victim the one scored lowest, the first on
 * a tie. a must hold at least want live entries in [lo, cap). */
static void
sample(struct rl_keytab *t, const struct kt_array *a, size_t lo, size_t pos, size_t want,
       uint64_t now, uint32_t tier, struct rl_keytab_entry **victim, uint64_t *best)
{
    size_t seen = 0;
    while (seen < want) {
        size_t n = a->cap - pos < GROUP ? a->cap - pos : GROUP;
        uint32_t full = group_full(a->tags + pos) & first_bits(n);
        while (full != 0 && seen < want) {
            struct rl_keytab_entry *e = &a->ents[pos + (size_t)__builtin_ctz(full)];
            uint64_t sc = t->ops.score(t->ops.arg, e, now, tier);
            if (*victim == NULL || sc < *best) {
                *best = sc;
                *victim = e;
            }
            seen++;
            full &= full - 1;
        }
        pos += n;
        if (pos == a->cap) {
            pos = lo;
        }
    }
}

/* Drops the entry scored lowest among EVICT_SAMPLE live entries from a random position (fewer
 * if the table holds fewer), drawing up to RL_KEYTAB_EVICT_ROUNDS such samples while the best
 * is of class RL_KEYTAB_CLASS_RESAMPLE or worse. During a resize each sample comes from both
 * arrays in proportion to the keys each holds, so every key is about as likely a candidate.
 * Needs keys > 0. */
static void
evict_one(struct rl_keytab *t, uint64_t now, uint32_t tier)
{
    size_t want = t->keys < EVICT_SAMPLE ? t->keys : EVICT_SAMPLE;
    size_t cur_keys = t->keys - t->old_keys;
    size_t want_old = 0;
    if (t->old_keys > 0) {
        want_old = (want * t->old_keys + t->keys / 2) / t->keys;
        if (want - want_old > cur_keys) {
            want_old = want - cur_keys;
        }
        if (want_old > t->old_keys) {
            want_old = t->old_keys;
        }
    }
    struct rl_keytab_entry *victim = NULL;
    uint64_t best = UINT64_MAX;
    for (unsigned round = 0; round < RL_KEYTAB_EVICT_ROUNDS; round++) {
        sample(t, &t->cur, 0, home_of(xorshift(t), t->cur.cap), want - want_old, now, tier,
               &victim, &best);
        if (want_old > 0) {
            /* Live old entries are all at or after `moved`: start among them. */
            size_t pos = t->moved + home_of(xorshift(t), t->old.cap - t->moved);
            sample(t, &t->old, t->moved, pos, want_old, now, tier, &victim, &best);
        }
        if ((best >> RL_KEYTAB_CLASS_SHIFT) < RL_KEYTAB_CLASS_RESAMPLE) {
            break;
        }
    }
    if (t->ops.evicted != NULL) {
        t->ops.evicted(t->ops.arg, victim, best);
    }
    drop(t, victim);
    t->evicted++;
}

struct rl_keytab_entry *
rl_keytab_insert(struct rl_keytab *t, uint64_t fp_hi, uint32_t fp_lo, uint32_t tier, uint64_t now)
{
    if (resizing(t)) {
        migrate(t, INSERT_STEP);
    } else if (grave_bytes(t) > 0) {
        drain(t, FREE_CHUNK);
    }
    if (t->keys >= t->max_keys) {
        if (resizing(t) && t->cur.cap < t->max_cap) {
            /* Only after a shrink can inserts outrun the move; a new resize waits for it. */
            migrate(t, SIZE_MAX);
        }
        if (resizing(t)) {
            /* Growing to max_cap: evict now, as the end of the move would. */
            evict_one(t, now, tier);
        } else {
            size_t new_cap = t->cur.cap + t->cur.cap / GROW_DEN;
            if (new_cap > t->max_cap) {
                new_cap = t->max_cap;
            }
            /* At the cap, or with no memory for a bigger array, make room instead: never
             * fail once the table exists. */
            if (new_cap <= t->cur.cap || start_resize(t, new_cap) != 0) {
                evict_one(t, now, tier);
            }
        }
    }
    size_t i = place(&t->cur, fp_hi);
    struct rl_keytab_entry *e = &t->cur.ents[i];
    e->fp_hi = fp_hi;
    e->fp_lo = fp_lo & FP_LO_MASK;
    e->shard = 0;
    e->tier = tier & RL_KEYTAB_TIER_MAX;
    e->epoch = 0;
    memset(&e->st, 0, sizeof(e->st));
    set_tag(&t->cur, i, tag_of(fp_hi));
    t->keys++;
    if (t->keys > t->peak) {
        t->peak = t->keys;
    }
    return e;
}

void
rl_keytab_delete(struct rl_keytab *t, struct rl_keytab_entry *e)
{
    drop(t, e);
}

/* The hole list of a sweep pass (sweep_cur): holes[0, n) in ascending offset, `nfree` of
 * them free (not yet filled by a later entry), none free before `head`. */
struct kt_holes {
    size_t n, nfree, head;
};

/* The first free hole at index i or after (n if none), halving the paths it walks. Taken
 * holes point further on (a taken hole k points to k + 1 at first), and the last hole of the
 * list is always free, so this ends. */
static size_t
hole_find(struct rl_keytab *t, const struct kt_holes *hl, size_t i)
{
    struct kt_hole *h = t->holes;
    while (i < hl->n && h[i].up != i) {
        size_t u = h[i].up;
        h[i].up = h[u].up;
        i = h[i].up;
        t->sweep_work++;
    }
    return i;
}

/* The index of the first hole (taken or free) at offset home_off or after, from head on; n if
 * none. Galloping back from the newest: the entry's home is near it, so this costs the log of
 * the holes between its home and it, not of the whole list. */
static size_t
hole_search(struct rl_keytab *t, const struct kt_holes *hl, size_t home_off)
{
    const struct kt_hole *h = t->holes;
    size_t lo = hl->head, hi = hl->n;
    if (hi == lo || h[hi - 1].off < home_off) {
        return hl->n;
    }
    /* h[hi].off >= home_off; the answer is in [lo, hi]. */
    hi--;
    for (size_t step = 1; hi > lo; step *= 2) {
        size_t probe = hi - lo > step ? hi - step : lo;
        t->sweep_work++;
        if (h[probe].off >= home_off) {
            hi = probe;
        } else {
            lo = probe + 1;
            break;
        }
    }
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        t->sweep_work++;
        if (h[mid].off < home_off) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* Makes room for one more hole: drops the taken ones when they are at least half the list
 * (or when no memory can be had), else doubles the list. False only when the list is full of
 * free holes and cannot grow. Amortised O(1) a hole. */
static bool
hole_room(struct rl_keytab *t, struct kt_holes *hl)
{
    if (hl->n < t->holes_cap) {
        return true;
    }
    bool compact = hl->n > 0 && 2 * (hl->n - hl->nfree) >= hl->n;
    if (!compact) {
        size_t ncap = t->holes_cap ? 2 * t->holes_cap : 256;
        struct kt_hole *h = realloc(t->holes, ncap * sizeof(*h));
        if (h != NULL) {
            t->holes = h;
            t->holes_cap = ncap;
            return true;
        }
    }
    if (hl->nfree == hl->n) {
        return false;
    }
    size_t m = 0;
    for (size_t k = 0; k < hl->n; k++) {
        if (t->holes[k].up == k) {
            t->holes[m].off = t->holes[k].off;
            t->holes[m].up = (uint32_t)m;
            m++;
        }
    }
    t->sweep_work += hl->n;
    hl->n = m;
    hl->head = 0;
    return true;
}

static void
hole_add(struct rl_keytab *t, struct kt_holes *hl, size_t off)
{
    t->holes[hl->n].off = (uint32_t)off;
    t->holes[hl->n].up = (uint32_t)hl->n;
    hl->n++;
    hl->nfree++;
}

/*
 * Forgets the full entries among `budget` slots of cur from the cursor on, in one pass.
 * Deleting them one by one with a backward shift each would walk the rest of their run for
 * every deletion: quadratic in the run's length, which at a load of 7/8 and with most keys
 * expiring together stalled the node for over a second. Instead the pass keeps the holes it
 * made in the current run and moves each later entry of the run into the first free hole at
 * or after its home, which keeps every entry reachable from its home; past the budget it goes
 * on (examining, forgetting and shifting) until the run ends (an empty slot) or no hole is
 * left, and the next pass starts there.
 *
 * Finding that hole must not cost more than a few steps either: runs can be tens of
 * thousands of slots long, as the load is far from even across the table (the slots just
 * swept are nearly empty, those the sweep comes to next hold every key used in a whole lap),
 * and a pass that forgets most of such a run keeps tens of thousands of holes, most of them
 * before the homes of the entries that follow. A linear search over them (with a memmove to
 * drop a taken one from the middle) made one sweep take 10^9 steps, 0.3-3 s. So the holes
 * stay in the list in ascending order once taken: a galloping search back from the newest
 * finds the first at or after the home, and a union-find (each taken hole points at a later one, paths halved)
 * skips the taken ones; taken holes are dropped in bulk when they make up half a full list.
 * A pass thus costs O((budget + tail) log) where the tail is the rest of the run it ends in.
 *
 * Offsets are counted from the start of the pass, so a run across the end of the array or
 * back across the start of the pass needs no special case. Only examined entries move (the
 * tail past the budget examines too), so the next pass skips none by starting where this one
 * stopped.
 */
static size_t
sweep_cur(struct rl_keytab *t, uint64_t now, size_t budget)
{
    struct kt_array *a = &t->cur;
    size_t cap = a->cap;
    size_t start = t->cursor;
    size_t n = 0, examined = 0, stop = 0;
    struct kt_holes hl = {0, 0, 0};
    size_t p = start;

    /* Past the budget the pass goes on only while it has free holes, to the end of the run,
     * and keeps examining there: the entries it moves back must have been examined, or the
     * next pass would have to start back where they went (it used to, which on long runs
     * held the cursor nearly in place and let the slots ahead of it fill up further).
     * Past one lap only shifting goes on: a run that wraps past the start of the pass may
     * continue into slots looked at first, whose entries must still reach their home. */
    for (size_t off = 0; off < 2 * cap; off++, p = next_slot(a, p)) {
        bool tail = examined >= budget || off >= cap;
        bool checking = off < cap;

        t->sweep_work++;
        if (a->tags[p] == 0) {
            /* The run ended: no later entry can use these holes. */
            hl.n = hl.nfree = hl.head = 0;
            if (tail) {
                break;
            }
            examined++;
            stop = off + 1;
            continue;
        }
        if (tail && hl.nfree == 0) {
            break;
        }
        if (checking) {
            examined++;
            stop = off + 1;
        }
        if (checking && t->ops.is_full(t->ops.arg, &a->ents[p], now)) {
            if (!hole_room(t, &hl)) {
                /* Keep it for a later pass rather than break the run. */
                continue;
            }
            t->ops.release(t->ops.arg, &a->ents[p]);
            vacate(a, p);
            t->keys--;
            n++;
            hole_add(t, &hl, off);
            continue;
        }
        if (hl.nfree == 0) {
            continue;
        }
        /* The entry may move into the first free hole at or after its home. */
        size_t home = home_of(a->ents[p].fp_hi, cap);
        size_t back = p >= home ? p - home : p + cap - home;
        size_t k = hl.head;
        if (back < off) {
            k = hole_search(t, &hl, off - back);
        }
        k = hole_find(t, &hl, k);
        if (k == hl.n) {
            continue;
        }
        size_t hole = t->holes[k].off;
        /* Offsets run up to 2 cap (past one lap only shifting goes on): wrap as often. */
        size_t to = (start + hole) % cap;
        a->ents[to] = a->ents[p];
        set_tag(a, to, a->tags[p]);
        vacate(a, p);
        /* Taken: later searches go on to the next hole. The slot left behind is the newest
         * hole; the list has room for it, as dropping the taken ones frees at least k. */
        t->holes[k].up = (uint32_t)(k + 1);
        hl.nfree--;
        if (k == hl.head) {
            hl.head = k + 1;
        }
        (void)hole_room(t, &hl);
        hole_add(t, &hl, off);
    }
    t->cursor = (start + stop) % cap;
    return n;
}

/* Declared here only: the tests' window on how much work the sweeps did (keytab.h is the
 * owner's interface and has no use for it). */
uint64_t rl_keytab_sweep_work(const struct rl_keytab *t);

uint64_t
rl_keytab_sweep_work(const struct rl_keytab *t)
{
    return t->sweep_work;
}

size_t
rl_keytab_sweep(struct rl_keytab *t, uint64_t now, size_t budget)
{
    if (resizing(t)) {
        migrate(t, budget);
    }
    /* As many bytes as moving `budget` slots would have written. */
    const size_t esize = sizeof(struct rl_keytab_entry);
    drain(t, budget < SIZE_MAX / esize ? budget * esize : SIZE_MAX);

    /* The next piece of cur into a huge page, off this thread (keytab_mem.c), once no resize
     * runs and the last piece is done. */
    if (!resizing(t) && t->collapse_at != SIZE_MAX) {
        size_t span = kt_mem_span(&t->mem, t->cur.cap * sizeof(struct rl_keytab_entry), t->cur.reg);
        enum kt_collapse_res r = t->collapse_at < span
                                     ? kt_mem_collapse(&t->mem, (char *)t->cur.ents + t->collapse_at)
                                     : KT_COLLAPSE_OFF;
        if (r == KT_COLLAPSE_QUEUED) {
            t->collapse_at += kt_mem_grain(&t->mem, t->cur.reg);
        } else if (r == KT_COLLAPSE_OFF) {
            t->collapse_at = SIZE_MAX;
        }
    }

    /* Only cur is swept: what is still in old is swept once it has moved. */
    struct kt_array *a = &t->cur;
    size_t n = t->keys > t->old_keys ? sweep_cur(t, now, budget) : 0;
    t->expired += n;

    /* The most keys held over the current and the previous period of RL_KEYTAB_SHRINK_MS
     * (a clock that steps back starts a new period). */
    if (t->peak_since == UINT64_MAX || now < t->peak_since) {
        t->peak_since = now;
        t->peak_prev = t->peak;
    } else if (now - t->peak_since >= RL_KEYTAB_SHRINK_MS) {
        t->peak_prev = now - t->peak_since >= 2 * (uint64_t)RL_KEYTAB_SHRINK_MS ? t->keys : t->peak;
        t->peak = t->keys;
        t->peak_since = now;
    }
    size_t most = t->peak > t->peak_prev ? t->peak : t->peak_prev;

    /* Give memory back once that most is under 1/4 of the slots: move to a load of 1/2 of
     * it, which leaves room to grow by 3/4 before the next grow, so a table does not flap
     * between sizes. Not before the last resize's graves are empty, which later sweeps see
     * to, so that starting this one does not have to unmap them at once. */
    if (!resizing(t) && grave_bytes(t) == 0 && most < a->cap / 4 && a->cap > MIN_CAP) {
        size_t new_cap = most * 2;
        if (new_cap < MIN_CAP) {
            new_cap = MIN_CAP;
        }
        if (new_cap < a->cap) {
            /* Without memory for the new arrays the table stays as it is, which is fine. */
            (void)start_resize(t, new_cap);
        }
    }
    return n;
}

size_t
rl_keytab_remap(struct rl_keytab *t, bool (*fn)(void *arg, struct rl_keytab_entry *e), void *arg)
{
    struct kt_array *a;
    size_t start, i, left, dropped = 0;

    if (resizing(t)) {
        migrate(t, SIZE_MAX);
    }
    a = &t->cur;
    /* An empty slot: the load is at most 7/8, so there is one. No run crosses it, so a
     * backward shift never moves an entry from before it (visited) to after it, nor back. */
    for (start = 0; start < a->cap && a->tags[start] != 0; start++) {
    }
    if (start == a->cap) {
        return 0; /* cannot happen: no table is full */
    }
    i = next_slot(a, start);
    for (left = a->cap - 1; left > 0;) {
        if (a->tags[i] == 0 || fn(arg, &a->ents[i])) {
            i = next_slot(a, i);
            left--;
            continue;
        }
        /* Dropped: the shift may bring a later, unvisited entry into slot i; look at it
         * again. The slots visited so far are unchanged: shifts move entries only back to
         * the hole, and each visit of slot i either advances or removes an entry. */
        remove_slot(t, i);
        dropped++;
    }
    return dropped;
}

void
rl_keytab_stats(const struct rl_keytab *t, struct rl_keytab_stats *s)
{
    s->keys = t->keys;
    s->capacity = t->cur.cap;
    s->bytes = table_bytes(t->cur.cap);
    if (resizing(t)) {
        s->bytes += arrays_bytes(t->old.cap) - t->old_freed;
    }
    s->bytes += grave_bytes(t);
    s->evicted = t->evicted;
    s->expired = t->expired;
    s->resizes = t->grows + t->shrinks;
    s->grows = t->grows;
    s->shrinks = t->shrinks;
    s->resize_steps = t->resize_steps;
    s->resize_left = resizing(t) ? t->old.cap - t->moved : 0;
}

void
rl_keytab_metrics(const struct rl_keytab *t, struct rl_prom *p)
{
    rl_prom_family(p, "rl_node_expirations_total", "counter",
                   "Keys forgotten by the sweep once back at full allowance.");
    rl_prom_u64(p, "rl_node_expirations_total", NULL, t->expired);
    rl_prom_family(p, "rl_node_table_resizes_total", "counter",
                   "Resizes of the key table started, by kind: grow (at a load of 7/8) or shrink "
                   "(keys under a quarter of the slots for 30 s).");
    rl_prom_u64(p, "rl_node_table_resizes_total", "kind=\"grow\"", t->grows);
    rl_prom_u64(p, "rl_node_table_resizes_total", "kind=\"shrink\"", t->shrinks);
    rl_prom_family(p, "rl_node_table_slots", "gauge",
                   "Slots of the key table (of the array being filled, during a resize).");
    rl_prom_u64(p, "rl_node_table_slots", NULL, t->cur.cap);
}
