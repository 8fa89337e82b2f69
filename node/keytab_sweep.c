/*
 * keytab_sweep: forgetting the key table's idle entries (rl_keytab_sweep: a bounded pass
 * over cur that closes the holes it makes in one go, then the shrink decision once the keys
 * have stayed under a quarter of the slots for RL_KEYTAB_SHRINK_MS) and visiting every entry
 * for a change of rules (rl_keytab_remap). Not for the hot path (find, insert: keytab.c) nor
 * for the resize itself (keytab_resize.c), which it only steps and starts.
 */
#include "keytab_int.h"

#include <stdlib.h>

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
        size_t home = home_in(a, a->ents[p].fp_hi);
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
    if (scanning(t)) {
        return 0; /* the sweep moves entries: it waits for the scan's end */
    }
    if (resizing(t)) {
        kt_migrate(t, budget);
    }
    /* As many bytes as moving `budget` slots would have written. */
    const size_t esize = sizeof(struct rl_keytab_entry);
    kt_drain(t, budget < SIZE_MAX / esize ? budget * esize : SIZE_MAX);

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
            (void)kt_start_resize(t, new_cap);
        }
    }
    return n;
}

size_t
rl_keytab_remap(struct rl_keytab *t, bool (*fn)(void *arg, struct rl_keytab_entry *e), void *arg)
{
    struct kt_array *a;
    size_t start, i, left, dropped = 0;

    kt_scan_finish(t);
    if (resizing(t)) {
        kt_migrate(t, SIZE_MAX);
    }
    a = &t->cur;
    /* An empty slot: the load is at most 15/16, so there is one. No run crosses it, so a
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
        kt_remove_slot(t, i);
        dropped++;
    }
    return dropped;
}
