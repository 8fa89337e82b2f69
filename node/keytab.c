/*
 * keytab: the node's table of counters (keytab.h). An array of 32-byte entries and one of a
 * tag byte per slot (0 = empty, else 0x80 | 7 bits of the fingerprint) that find scans 16 at
 * a time, so a probe touches the entry array only on a likely match. Linear probing from a
 * home slot chosen by fastrange, deletion by backward shift, so there are no tombstones and a
 * find stops at the first empty slot. Not for judging requests or knowing what a state means:
 * the owner's ops answer that. This file holds the hot path (fingerprint, prefetch, find,
 * insert, delete, eviction) and the table's life (create, destroy); keytab_resize.c the
 * arrays and their incremental resize and the table's figures (stats, metrics);
 * keytab_sweep.c the sweep (and its shrink decision) and the remap; keytab_int.h what they
 * share. What follows is the design of the whole table.
 *
 * Memory: 33 bytes per slot plus 16 mirrored tag bytes. The load stays in [0.73, 7/8] while
 * growing (grow by 1.2x at 7/8; up to 15/16 while a scan postpones a grow, below), so the table
 * costs 38 to 45 bytes per key; once the sweep forgets keys the load may fall to 1/4, and stay
 * there for RL_KEYTAB_SHRINK_MS, before the sweep shrinks the table to a load of 1/2. The small
 * grow step costs more moves (the grows move 1 / 0.2 = 5 entries per key inserted, against 2
 * at 1.5x), all incremental.
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
 * Scans (rl_keytab_scan_begin: a planned move's export, a slice per turn of the node's loop)
 * walk cur from slot 0 to its end; from a scan's first visit to its end no entry crosses its
 * next slot (scan_next) nor the array's end, so every key present at the begin is visited
 * exactly once unless it is removed before its visit. A delete whose backward shift would
 * carry an entry across either (kt_scan_keeps, asked where the removal is decided: drop and
 * kt_remove_slot do not) calls kt_scan_finish first, as a remap does; the sweep waits; an eviction
 * during a scan takes only an entry the scan has visited whose removal keeps it (evict_one),
 * else waits, so none present at the begin is evicted unvisited, and at the cap the load
 * comes back below 15/16 as the scan goes on, through back-to-back scans; and an insert past
 * the load of 7/8 below the cap postpones its grow, which moves every entry, up to 15/16 of
 * the slots (the load then stays over 7/8 until the grow after the scan). A resize running at the
 * begin is finished by the scan's first steps (a budget / SCAN_MOVE_COST of old slots each) before
 * the first visit; a removal meanwhile keeps the scan, which has visited nothing.
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
 * leaves room for 0.175 cap inserts before cur is full and needs cap / INSERT_STEP of them
 * (one a scan postponed to 15/16 still leaves 0.094 cap), so a grow always ends in time, and a
 * resize never starts while another runs. A shrink (to a load of 1/2, with more than 4 old slots
 * per key) may not: if cur reaches its maximum load while old still holds entries, that insert
 * moves the rest at once, which is quick (old holds under 1/4 of its slots and empty groups are
 * skipped 16 at a time), then grows as usual. A grow to max_cap is the exception: there the insert
 * evicts, from either array, as it would once the move ended, so a last grow to a max_cap just
 * above cap does not make one insert wait for the whole move.
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
#include "keytab_int.h"
#include "seed.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PAGE 4096u
/* Occupied slots the eviction compares. */
#define EVICT_SAMPLE 8
#define MIN_BYTES (64u * 1024)
/* Old slots an insert moves during a resize: about 110 entries at a load of 7/8, a few
 * microseconds, most of it the first touch of a page of the new entry array. A grow by 1.2x
 * leaves room for 0.175 cap inserts, so it needs more than 5.7 slots an insert to end
 * before cur fills. */
#define INSERT_STEP 128u
/* The bits of fp_lo an entry keeps. */
#define FP_LO_MASK ((1u << RL_KEYTAB_FP_LO_BITS) - 1u)
/* A grow multiplies the slots by (GROW_DEN + 1) / GROW_DEN: 1.2x. */
#define GROW_DEN 5u
/* What moving an old slot costs against visiting one (keytab_bench's pass mode: a step of
 * 65,536 old slots of a grow took 1.7 ms at 3M keys, a slice of visits 0.4 ms): a scan's
 * step moves budget / SCAN_MOVE_COST old slots while a resize of its begin runs. */
#define SCAN_MOVE_COST 4u

/* The memory budget of 33 bytes a slot rests on it. */
_Static_assert(sizeof(struct rl_keytab_entry) == 32, "keytab entries are 32 bytes");

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

/* True when e points into the old entry array. */
static inline bool
in_old(const struct rl_keytab *t, const struct rl_keytab_entry *e)
{
    return resizing(t) &&
           (uintptr_t)e - (uintptr_t)t->old.ents < t->old.cap * sizeof(struct rl_keytab_entry);
}

/* The live entry of a with this fingerprint, probing from pos, its home. A probe ends at the
 * first empty slot (tag 0): in old, gone slots are not empty, so runs stay whole. */
static inline struct rl_keytab_entry *
find_in(const struct kt_array *a, uint64_t place, uint64_t fp_hi, uint32_t fp_lo)
{
    size_t pos = home_of(place, a->cap);
    uint8_t tag = tag_of(place);
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

/* kt_place's key and multiplier: secret (seed.h). */
static void
kt_random_key(struct rl_keytab *t)
{
    t->place_key = rl_seed_random(t);
    t->place_mul = rl_seed_random(&t->place_mul) | 1u; /* odd (never 0: place_plain's) */
}

size_t
rl_keytab_longest_run(const struct rl_keytab *t)
{
    size_t best = 0, run = 0;

    for (size_t i = 0; i < 2 * t->cur.cap; i++) { /* twice round: a run may wrap */
        run = t->cur.tags[i % t->cur.cap] != 0 ? run + 1 : 0;
        best = run > best ? run : best;
    }
    return best < t->cur.cap ? best : t->cur.cap;
}

void
rl_keytab_place_plain(struct rl_keytab *t)
{
    t->place_key = t->place_mul = 0;
    t->cur.key = t->cur.mul = 0;
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
    kt_random_key(t);
    t->peak_since = UINT64_MAX;
    t->collapse_at = SIZE_MAX;

    /* The largest cap that fits. Page rounding costs at most a page per array, so start
     * below it and step up (at most ~250 steps): kt_table_bytes grows with cap. */
    uint64_t room = max_bytes - sizeof(struct rl_keytab) - GROUP - 2 * PAGE;
    uint64_t est = room / (sizeof(struct rl_keytab_entry) + 1);
    if (est > SIZE_MAX / 64) {
        est = SIZE_MAX / 64;
    }
    size_t cap = (size_t)est;
    while (cap < SIZE_MAX / 64 && kt_table_bytes(cap + 1) <= max_bytes) {
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
    kt_set_cap(t, 0, MIN_CAP);
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
        kt_end_resize(t);
    }
    kt_drain(t, SIZE_MAX);
    kt_array_deinit(t, &t->cur);
    kt_mem_fini(&t->mem);
    free(t->holes);
    free(t);
}

void
rl_keytab_prefetch(const struct rl_keytab *t, uint64_t fp_hi)
{
    size_t pos = home_in(&t->cur, fp_hi);
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
    uint64_t place = kt_place(&t->cur, fp_hi);
    size_t pos = home_of(place, t->cur.cap);
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
    struct rl_keytab_entry *e = find_in(&t->cur, place, fp_hi, fp_lo);
    if (e == NULL && t->old_keys > 0) {
        e = find_in(&t->old, place, fp_hi, fp_lo); /* the same key: the same place */
    }
    return e;
}

/* Empties slot i of cur and closes the gap: each following entry of the run moves back into
 * the hole if that does not put it before its home. Entries only ever move towards their
 * home, never past the hole, which is what the sweep relies on. The caller has made sure an
 * open scan keeps it (kt_scan_keeps, or kt_scan_finish first). */
void
kt_remove_slot(struct rl_keytab *t, size_t i)
{
    struct kt_array *a = &t->cur;
    size_t j;

    j = next_slot(a, i);
    while (a->tags[j] != 0) {
        size_t h = home_in(a, a->ents[j].fp_hi);
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
 * backward shift there, so nothing else in old moves. An open scan must keep the removal: the
 * caller asked kt_scan_keeps, or finished the scan first. */
static void
drop(struct rl_keytab *t, struct rl_keytab_entry *e)
{
    t->ops.release(t->ops.arg, e);
    if (in_old(t, e)) {
        set_tag(&t->old, (size_t)(e - t->old.ents), TAG_GONE);
        t->old_keys--;
        t->keys--;
    } else {
        kt_remove_slot(t, (size_t)(e - t->cur.ents));
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

/* An eviction's best candidate so far: the entry scored lowest (the first on a tie). */
struct kt_pick {
    struct rl_keytab_entry *e;
    uint64_t score;
};

/* Offers the first `want` live entries of a from slot pos on (wrapping from the end of the
 * array to slot lo) to the eviction: *any keeps the one scored lowest, *keep the one scored
 * lowest among those an open scan has visited and whose removal keeps it (kt_scan_keeps,
 * asked only of an entry that would be kept; with keep_scan false, every entry). a must hold
 * at least want live entries in [lo, cap). */
static void
sample(struct rl_keytab *t, const struct kt_array *a, size_t lo, size_t pos, size_t want,
       bool keep_scan, uint64_t now, uint32_t tier, struct kt_pick *keep, struct kt_pick *any)
{
    size_t seen = 0;
    while (seen < want) {
        size_t n = a->cap - pos < GROUP ? a->cap - pos : GROUP;
        uint32_t full = group_full(a->tags + pos) & first_bits(n);
        while (full != 0 && seen < want) {
            size_t i = pos + (size_t)__builtin_ctz(full);
            struct rl_keytab_entry *e = &a->ents[i];
            uint64_t sc = t->ops.score(t->ops.arg, e, now, tier);
            if (any->e == NULL || sc < any->score) {
                any->e = e;
                any->score = sc;
            }
            if ((keep->e == NULL || sc < keep->score) &&
                (!keep_scan ||
                 (a == &t->cur && !resizing(t) && i < t->scan_next && kt_scan_keeps(t, i)))) {
                keep->e = e;
                keep->score = sc;
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
 * During a scan the victim must be one it has visited (a planned move's export has its
 * record: none of the batch is lost) whose removal keeps it open, and no worse a class than
 * the best seen: with none, and may_wait, nothing is dropped and false is returned (the
 * insert lets the load climb, as a grow waits); without may_wait the best seen goes, the
 * rest of the scan read first. Returns true when a key was dropped. Needs keys > 0. */
static bool
evict_one(struct rl_keytab *t, uint64_t now, uint32_t tier, bool may_wait)
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
    struct kt_pick keep = {NULL, UINT64_MAX}, any = {NULL, UINT64_MAX}, *pick;
    bool keep_scan = scanning(t);
    for (unsigned round = 0; round < RL_KEYTAB_EVICT_ROUNDS; round++) {
        sample(t, &t->cur, 0, home_of(xorshift(t), t->cur.cap), want - want_old, keep_scan, now,
               tier, &keep, &any);
        if (want_old > 0) {
            /* Live old entries are all at or after `moved`: start among them. */
            size_t pos = t->moved + home_of(xorshift(t), t->old.cap - t->moved);
            sample(t, &t->old, t->moved, pos, want_old, keep_scan, now, tier, &keep, &any);
        }
        if (keep.e != NULL && (keep.score >> RL_KEYTAB_CLASS_SHIFT) < RL_KEYTAB_CLASS_RESAMPLE) {
            break;
        }
    }
    pick = &keep;
    if (keep.e == NULL ||
        (keep.score >> RL_KEYTAB_CLASS_SHIFT) > (any.score >> RL_KEYTAB_CLASS_SHIFT)) {
        if (may_wait) {
            return false;
        }
        pick = &any;
        if (scanning(t)) {
            kt_scan_finish(t); /* before the owner hears of the eviction, as it visits it */
        }
    }
    if (t->ops.evicted != NULL) {
        t->ops.evicted(t->ops.arg, pick->e, pick->score);
    }
    drop(t, pick->e);
    t->evicted++;
    return true;
}

struct rl_keytab_entry *
rl_keytab_insert(struct rl_keytab *t, uint64_t fp_hi, uint32_t fp_lo, uint32_t tier, uint64_t now)
{
    if (resizing(t)) {
        kt_migrate(t, INSERT_STEP);
    } else if (grave_bytes(t) > 0) {
        kt_drain(t, FREE_CHUNK);
    }
    /* During a scan a grow, which moves every entry, waits for its end while the keys stay
     * under all but 1/SCAN_LOAD_FREE of the slots: the slots are there, probes only get
     * longer for a while (at 15/16 about 8 groups for a key that is absent). Past it, the
     * scan ends at once. At the cap an eviction takes a key the scan has visited whose
     * removal keeps it (evict_one), else waits likewise; two keys go per insert while the
     * load is past 7/8, so it comes back as the scan goes on, however many follow. */
    bool may_wait = scanning(t) && t->keys < t->cur.cap - t->cur.cap / SCAN_LOAD_FREE;
    if (t->keys >= t->max_keys && !(may_wait && t->cur.cap < t->max_cap)) {
        if (t->cur.cap < t->max_cap) {
            kt_scan_finish(t);
            may_wait = false;
        }
        if (resizing(t) && t->cur.cap < t->max_cap) {
            /* Only after a shrink can inserts outrun the move; a new resize waits for it. */
            kt_migrate(t, SIZE_MAX);
        }
        if (resizing(t)) {
            /* Growing to max_cap: evict now, as the end of the move would. */
            evict_one(t, now, tier, may_wait);
        } else {
            size_t new_cap = t->cur.cap + t->cur.cap / GROW_DEN;
            if (new_cap > t->max_cap) {
                new_cap = t->max_cap;
            }
            /* At the cap, or with no memory for a bigger array, make room instead: never
             * fail once the table exists. */
            if (new_cap <= t->cur.cap || kt_start_resize(t, new_cap) != 0) {
                if (evict_one(t, now, tier, may_wait) && t->keys > t->max_keys) {
                    evict_one(t, now, tier, may_wait); /* what a scan let in goes too */
                }
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
    set_tag(&t->cur, i, tag_of(kt_place(&t->cur, fp_hi)));
    t->keys++;
    if (t->keys > t->peak) {
        t->peak = t->keys;
    }
    return e;
}

void
rl_keytab_delete(struct rl_keytab *t, struct rl_keytab_entry *e)
{
    if (!in_old(t, e) && !kt_scan_keeps(t, (size_t)(e - t->cur.ents))) {
        kt_scan_finish(t); /* before the release: the scan reads the state it frees */
    }
    drop(t, e);
}

void
rl_keytab_scan_begin(struct rl_keytab *t, void (*visit)(void *arg, struct rl_keytab_entry *e),
                     void *arg)
{
    kt_scan_finish(t);
    t->scan_visit = visit;
    t->scan_arg = arg;
    t->scan_next = 0;
}

/* Visits the live entries of a's slots [from, to). */
static void
scan_visit_live(struct rl_keytab *t, const struct kt_array *a, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        if ((a->tags[i] & TAG_LIVE) != 0) {
            t->scan_visit(t->scan_arg, &a->ents[i]);
        }
    }
}

bool
rl_keytab_scan_step(struct rl_keytab *t, size_t budget)
{
    size_t end;

    if (!scanning(t)) {
        return true;
    }
    if (budget == SIZE_MAX) {
        kt_scan_finish(t);
        return true;
    }
    if (resizing(t)) {
        /* A resize that ran at the begin ends first, before any visit: then one array, which
         * nothing moves across the scan until the end, is walked. (No new one starts while
         * the scan is open.) Moving an old slot's entry costs about SCAN_MOVE_COST visits. */
        kt_migrate(t, budget / SCAN_MOVE_COST > 0 ? budget / SCAN_MOVE_COST : 1);
        return false;
    }
    end = budget < t->cur.cap - t->scan_next ? t->scan_next + budget : t->cur.cap;
    scan_visit_live(t, &t->cur, t->scan_next, end);
    t->scan_next = end;
    if (end < t->cur.cap) {
        return false;
    }
    t->scan_visit = NULL;
    t->scan_arg = NULL;
    return true;
}

void
rl_keytab_scan_stop(struct rl_keytab *t)
{
    t->scan_visit = NULL;
    t->scan_arg = NULL;
}

bool
rl_keytab_scanning(const struct rl_keytab *t)
{
    return scanning(t);
}

bool
kt_scan_keeps(const struct rl_keytab *t, size_t i)
{
    const struct kt_array *a = &t->cur;
    size_t end, pos;

    if (!scanning(t) || resizing(t)) {
        return true;
    }
    /* The run's empty slot must come before end: then the shift moves entries within
     * [i, end), all visited (i < scan_next: the empty slot may be scan_next itself) or all
     * not (i >= scan_next: and no wrap past the array's end). */
    end = i >= t->scan_next ? a->cap : t->scan_next + 1;
    for (pos = i + 1; pos < end;) {
        size_t n = end - pos < GROUP ? end - pos : GROUP;
        if ((~group_full(a->tags + pos) & first_bits(n)) != 0) {
            return true;
        }
        pos += n;
    }
    return false;
}

void
kt_scan_finish(struct rl_keytab *t)
{
    if (!scanning(t)) {
        return;
    }
    if (resizing(t)) {
        /* Before the first visit (the resize of the begin still runs): every live entry of
         * both arrays, moving none, so that the caller's entry pointers stay valid. */
        scan_visit_live(t, &t->old, t->moved, t->old.cap);
        scan_visit_live(t, &t->cur, 0, t->cur.cap);
    } else {
        scan_visit_live(t, &t->cur, t->scan_next, t->cur.cap);
    }
    t->scan_visit = NULL;
    t->scan_arg = NULL;
}
