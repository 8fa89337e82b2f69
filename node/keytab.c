/*
 * keytab: the node's table of counters (keytab.h). Two arrays of the same length: 32-byte
 * entries, and one tag byte per slot (0 = empty, else 0x80 | 7 bits of the fingerprint) that
 * find scans 16 at a time, so a probe touches the entry array only on a likely match.
 * Linear probing from a home slot chosen by fastrange, deletion by backward shift, so there
 * are no tombstones and a find stops at the first empty slot. Not for judging requests or
 * knowing what a state means: the owner's ops answer that.
 *
 * Memory: 33 bytes per slot plus 16 mirrored tag bytes. The load stays in [7/12, 7/8] while
 * growing (grow by 1.5x at 7/8), so the table costs 38 to 57 bytes per key; once the sweep
 * forgets keys the load may fall to 1/4 before the sweep shrinks the table to a load of 1/2.
 * Arrays of 64 KiB or more are mmap'd (and given back with munmap), so the process RSS follows
 * the table down when it shrinks; glibc's malloc would keep freed blocks in its heap after
 * raising its dynamic mmap threshold.
 *
 * Resizing is stop-the-world: a rehash visits the old array in slot order, which, because
 * fastrange keeps homes in hash order, writes the new array almost sequentially. Measured:
 * ~12 ns per key of rehashing plus the kernel's first touch of the new pages, which
 * dominates (~50 ms per million keys on the development VM). While it runs both arrays
 * exist (2.5x the old size at a 1.5x growth): max_bytes bounds the table between resizes,
 * the transient peak of a resize is old + new.
 */
#include "keytab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Slots scanned per tag group; also the length of the mirrored tail of the tag array. */
#define GROUP 16
/* Slots of a new table; also the smallest a table shrinks to. At least GROUP, so the mirror
 * of GROUP tags never wraps around the array more than once. */
#define MIN_CAP 64
/* Arrays at least this large are mmap'd rather than malloc'd. */
#define MMAP_MIN (64u * 1024)
#define PAGE 4096u
/* Occupied slots the eviction compares. */
#define EVICT_SAMPLE 8
#define MIN_BYTES (64u * 1024)

/* The memory budget of 33 bytes a slot rests on it. */
_Static_assert(sizeof(struct rl_keytab_entry) == 32, "keytab entries are 32 bytes");

struct rl_keytab {
    struct rl_keytab_entry *ents;
    uint8_t *tags; /* cap + GROUP bytes: tags[cap + i] mirrors tags[i] */
    size_t cap;    /* slots, MIN_CAP <= cap <= max_cap */
    size_t keys;
    size_t max_keys; /* 7/8 of cap: the load that triggers a grow or, at max_cap, an evict */
    size_t max_cap;  /* the largest cap whose arrays fit in max_bytes */
    size_t cursor;   /* where the next sweep starts, < cap */
    uint64_t rng;    /* xorshift64 state for the eviction sample, never 0 */
    uint64_t max_bytes;
    struct rl_keytab_ops ops;
    uint64_t evicted;
    uint64_t expired;
    uint64_t resizes;
};

/* Bytes an array of n bytes really takes: mmap'd arrays take whole pages. */
static size_t
array_bytes(size_t n)
{
    if (n >= MMAP_MIN) {
        return (n + PAGE - 1) / PAGE * PAGE;
    }
    return n;
}

static uint64_t
table_bytes(size_t cap)
{
    return sizeof(struct rl_keytab) + array_bytes(cap * sizeof(struct rl_keytab_entry)) +
           array_bytes(cap + GROUP);
}

/* Zeroed memory for an array. Large arrays come from mmap, so their pages are free until
 * touched and go back to the kernel when unmapped. No MADV_HUGEPAGE: with the kernel's
 * default defrag=madvise, it makes the faults of a rehash wait on compaction, and measured
 * pauses were 2-3x longer, for finds ~20% faster at 10M keys. */
static void *
array_alloc(size_t n)
{
    if (n < MMAP_MIN) {
        return calloc(1, n);
    }
    void *p =
        mmap(NULL, array_bytes(n), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        return NULL;
    }
    return p;
}

static void
array_free(void *p, size_t n)
{
    if (p == NULL) {
        return;
    }
    if (n < MMAP_MIN) {
        free(p);
    } else {
        munmap(p, array_bytes(n));
    }
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
    return (uint8_t)(0x80u | (fp_hi & 0x7fu));
}

static inline void
set_tag(struct rl_keytab *t, size_t i, uint8_t tag)
{
    t->tags[i] = tag;
    if (i < GROUP) {
        t->tags[t->cap + i] = tag;
    }
}

static inline size_t
next_slot(const struct rl_keytab *t, size_t i)
{
    return i + 1 == t->cap ? 0 : i + 1;
}

/* Bit masks over the GROUP tags starting at tags[pos]: those equal to tag, and those
 * occupied (every non-zero tag has its high bit set). */
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
     * name: 95.99 bits remain. */
    uint64_t h = h_hi;
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h *= UINT64_C(0xc4ceb9fe1a85ec53);
    h ^= h >> 33;
    h += (h == 0);
    *fp_hi = h;
    *fp_lo = (uint32_t)(h_lo ^ (h_lo >> 32));
}

/* Sets cap and the derived limits; the arrays must have that length. */
static void
set_cap(struct rl_keytab *t, size_t cap)
{
    t->cap = cap;
    t->max_keys = cap - (cap + 7) / 8;
    t->cursor = 0;
}

/* Places an entry known to be absent at its first free slot; returns the slot. */
static size_t
place(struct rl_keytab *t, uint64_t fp_hi)
{
    size_t pos = home_of(fp_hi, t->cap);
    for (;;) {
        uint32_t empty = ~group_full(t->tags + pos) & 0xffffu;
        if (empty != 0) {
            size_t i = pos + (size_t)__builtin_ctz(empty);
            return i >= t->cap ? i - t->cap : i;
        }
        pos += GROUP;
        if (pos >= t->cap) {
            pos -= t->cap;
        }
    }
}

/* Rehashes into arrays of new_cap slots (new_cap > keys). Returns 0 or -ENOMEM, in which
 * case the table is unchanged. */
static int
resize(struct rl_keytab *t, size_t new_cap)
{
    struct rl_keytab_entry *ents = array_alloc(new_cap * sizeof(*ents));
    uint8_t *tags = array_alloc(new_cap + GROUP);
    if (ents == NULL || tags == NULL) {
        array_free(ents, new_cap * sizeof(*ents));
        array_free(tags, new_cap + GROUP);
        return -ENOMEM;
    }
    struct rl_keytab old = *t;
    t->ents = ents;
    t->tags = tags;
    set_cap(t, new_cap);
    /* Slot order: homes come out nearly sorted, so the writes to the new arrays are close to
     * sequential. Scalar probing: the new table is sparse. */
    for (size_t i = 0; i < old.cap; i++) {
        if (old.tags[i] == 0) {
            continue;
        }
        const struct rl_keytab_entry *e = &old.ents[i];
        size_t j = home_of(e->fp_hi, new_cap);
        while (tags[j] != 0) {
            j = j + 1 == new_cap ? 0 : j + 1;
        }
        tags[j] = old.tags[i];
        ents[j] = *e;
    }
    memcpy(tags + new_cap, tags, GROUP);
    array_free(old.ents, old.cap * sizeof(*old.ents));
    array_free(old.tags, old.cap + GROUP);
    t->resizes++;
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

    t->ents = array_alloc(MIN_CAP * sizeof(*t->ents));
    t->tags = array_alloc(MIN_CAP + GROUP);
    if (t->ents == NULL || t->tags == NULL) {
        goto fail_arrays;
    }
    set_cap(t, MIN_CAP);
    *out = t;
    return 0;

fail_arrays:
    array_free(t->ents, MIN_CAP * sizeof(*t->ents));
    array_free(t->tags, MIN_CAP + GROUP);
fail:
    free(t);
    return err;
}

void
rl_keytab_destroy(struct rl_keytab *t)
{
    if (t == NULL) {
        return;
    }
    for (size_t i = 0; i < t->cap; i++) {
        if (t->tags[i] != 0) {
            t->ops.release(t->ops.arg, &t->ents[i]);
        }
    }
    array_free(t->ents, t->cap * sizeof(*t->ents));
    array_free(t->tags, t->cap + GROUP);
    free(t);
}

struct rl_keytab_entry *
rl_keytab_find(struct rl_keytab *t, uint64_t fp_hi, uint32_t fp_lo)
{
    size_t pos = home_of(fp_hi, t->cap);
    /* The entry most likely sits at its home: start that cache miss alongside the tags'. */
    __builtin_prefetch(&t->ents[pos]);
    uint8_t tag = tag_of(fp_hi);
    for (;;) {
        const uint8_t *g = t->tags + pos;
        uint32_t match = group_match(g, tag);
        uint32_t empty = ~group_full(g) & 0xffffu;
        if (empty != 0) {
            /* The key, if present, lies before the first empty slot from its home. */
            match &= (empty & (0u - empty)) - 1;
        }
        while (match != 0) {
            size_t i = pos + (size_t)__builtin_ctz(match);
            if (i >= t->cap) {
                i -= t->cap;
            }
            struct rl_keytab_entry *e = &t->ents[i];
            if (e->fp_hi == fp_hi && e->fp_lo == fp_lo) {
                return e;
            }
            match &= match - 1;
        }
        if (empty != 0) {
            return NULL;
        }
        pos += GROUP;
        if (pos >= t->cap) {
            pos -= t->cap;
        }
    }
}

/* Empties slot i and closes the gap: each following entry of the run moves back into the
 * hole if that does not put it before its home. Entries only ever move towards their home,
 * never past the hole, which is what the sweep relies on. */
static void
remove_slot(struct rl_keytab *t, size_t i)
{
    size_t j = next_slot(t, i);
    while (t->tags[j] != 0) {
        size_t h = home_of(t->ents[j].fp_hi, t->cap);
        /* Distances from home and from the hole, cyclically: j may move to i iff i lies in
         * [h, j]. */
        size_t dh = j >= h ? j - h : j + t->cap - h;
        size_t di = j >= i ? j - i : j + t->cap - i;
        if (dh >= di) {
            t->ents[i] = t->ents[j];
            set_tag(t, i, t->tags[j]);
            i = j;
        }
        j = next_slot(t, j);
    }
    set_tag(t, i, 0);
    t->keys--;
}

static void
drop_slot(struct rl_keytab *t, size_t i)
{
    t->ops.release(t->ops.arg, &t->ents[i]);
    remove_slot(t, i);
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

/* Drops the entry that will be full soonest among EVICT_SAMPLE occupied slots from a random
 * position (fewer if the table holds fewer). Needs keys > 0. */
static void
evict_one(struct rl_keytab *t)
{
    size_t pos = home_of(xorshift(t), t->cap);
    size_t victim = SIZE_MAX;
    uint64_t best = UINT64_MAX;
    size_t seen = 0;
    size_t want = t->keys < EVICT_SAMPLE ? t->keys : EVICT_SAMPLE;
    while (seen < want) {
        uint32_t full = group_full(t->tags + pos);
        while (full != 0 && seen < want) {
            size_t i = pos + (size_t)__builtin_ctz(full);
            if (i >= t->cap) {
                i -= t->cap;
            }
            uint64_t at = t->ops.full_at(t->ops.arg, &t->ents[i]);
            if (victim == SIZE_MAX || at < best) {
                best = at;
                victim = i;
            }
            seen++;
            full &= full - 1;
        }
        pos += GROUP;
        if (pos >= t->cap) {
            pos -= t->cap;
        }
    }
    drop_slot(t, victim);
    t->evicted++;
}

struct rl_keytab_entry *
rl_keytab_insert(struct rl_keytab *t, uint64_t fp_hi, uint32_t fp_lo, uint16_t tier, uint64_t now)
{
    (void)now;
    if (t->keys >= t->max_keys) {
        size_t new_cap = t->cap + t->cap / 2;
        if (new_cap > t->max_cap) {
            new_cap = t->max_cap;
        }
        /* At the cap, or with no memory for a bigger array, make room instead: never fail
         * once the table exists. */
        if (new_cap <= t->cap || resize(t, new_cap) != 0) {
            evict_one(t);
        }
    }
    size_t i = place(t, fp_hi);
    struct rl_keytab_entry *e = &t->ents[i];
    e->fp_hi = fp_hi;
    e->fp_lo = fp_lo;
    e->tier = tier;
    e->flags = 0;
    memset(&e->st, 0, sizeof(e->st));
    set_tag(t, i, tag_of(fp_hi));
    t->keys++;
    return e;
}

void
rl_keytab_delete(struct rl_keytab *t, struct rl_keytab_entry *e)
{
    drop_slot(t, (size_t)(e - t->ents));
}

size_t
rl_keytab_sweep(struct rl_keytab *t, uint64_t now, size_t budget)
{
    size_t n = 0;
    size_t i = t->cursor;
    for (size_t k = 0; k < budget && t->keys > 0; k++) {
        if (t->tags[i] != 0 && t->ops.is_full(t->ops.arg, &t->ents[i], now)) {
            /* The backward shift may pull a not-yet-examined entry into slot i (from across
             * the end of the array too): look at i again. */
            drop_slot(t, i);
            n++;
            continue;
        }
        i = next_slot(t, i);
    }
    t->cursor = i;
    t->expired += n;

    /* Give memory back once the load falls under 1/4: rehash to a load of 1/2, which leaves
     * room to grow by 3/4 before the next grow, so a table does not flap between sizes. */
    if (t->keys < t->cap / 4 && t->cap > MIN_CAP) {
        size_t new_cap = t->keys * 2;
        if (new_cap < MIN_CAP) {
            new_cap = MIN_CAP;
        }
        if (new_cap < t->cap) {
            /* Without memory for the new arrays the table stays as it is, which is fine. */
            (void)resize(t, new_cap);
        }
    }
    return n;
}

void
rl_keytab_stats(const struct rl_keytab *t, struct rl_keytab_stats *s)
{
    s->keys = t->keys;
    s->capacity = t->cap;
    s->bytes = table_bytes(t->cap);
    s->evicted = t->evicted;
    s->expired = t->expired;
    s->resizes = t->resizes;
}
