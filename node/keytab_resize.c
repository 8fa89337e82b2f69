/*
 * keytab_resize: the key table's arrays and their incremental resize (keytab.c's opening
 * comment gives the design): allocating and freeing an array, starting a resize, moving a
 * bounded slice of the old array into the new one, ending it, and giving the old arrays'
 * memory back a piece at a time (the graves); and the table's figures (rl_keytab_stats,
 * rl_keytab_metrics). Not for deciding when to resize (insert grows, in keytab.c; the sweep
 * shrinks, in keytab_sweep.c) nor for finding or judging keys. Calls nothing of keytab.c or
 * keytab_sweep.c.
 */
#include "keytab_int.h"

#include "metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

uint64_t
kt_table_bytes(size_t cap)
{
    return sizeof(struct rl_keytab) + arrays_bytes(cap);
}

/* Zeroed arrays of cap slots (keytab_mem.c: large entry arrays in the reserved range other
 * than avoid's, in huge pages where the kernel allows). Returns 0 or -ENOMEM. */
int
kt_array_init(struct rl_keytab *t, struct kt_array *a, size_t cap, int avoid)
{
    a->ents = kt_mem_alloc(&t->mem, cap * sizeof(*a->ents), true, avoid, &a->reg);
    a->tags = kt_mem_alloc(&t->mem, cap + GROUP, false, KT_MEM_NOREG, &a->tags_reg);
    a->cap = cap;
    a->key = t->place_key;
    a->mul = t->place_mul;
    if (a->ents == NULL || a->tags == NULL) {
        kt_mem_free(&t->mem, a->ents, cap * sizeof(*a->ents), a->reg);
        kt_mem_free(&t->mem, a->tags, cap + GROUP, a->tags_reg);
        return -ENOMEM;
    }
    return 0;
}

void
kt_array_deinit(struct rl_keytab *t, struct kt_array *a)
{
    kt_mem_free(&t->mem, a->ents, a->cap * sizeof(*a->ents), a->reg);
    kt_mem_free(&t->mem, a->tags, a->cap + GROUP, a->tags_reg);
    memset(a, 0, sizeof(*a));
}

/* Sets the derived limits of a cur of cap slots. The sweep cursor keeps its relative place:
 * fastrange keeps homes in hash order, so what it passed in the old array lies before the
 * scaled cursor in the new one. */
void
kt_set_cap(struct rl_keytab *t, size_t old_cap, size_t cap)
{
    __extension__ typedef unsigned __int128 u128;
    t->max_keys = cap - (cap + 7) / 8;
    t->cursor = old_cap == 0 ? 0 : (size_t)((u128)t->cursor * cap / old_cap);
}

/* Unmaps up to `bytes` of the graves, from their ends; all of them for SIZE_MAX. */
void
kt_drain(struct rl_keytab *t, size_t bytes)
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
 * kt_start_resize emptied them. */
void
kt_end_resize(struct rl_keytab *t)
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
size_t
kt_migrate(struct rl_keytab *t, size_t budget)
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
        kt_end_resize(t);
    } else {
        free_behind(t);
    }
    return visited;
}

/* Starts moving the table into arrays of new_cap slots (new_cap > keys); no resize may be
 * running. Returns 0 or -ENOMEM, in which case the table is unchanged. */
int
kt_start_resize(struct rl_keytab *t, size_t new_cap)
{
    struct kt_array a;
    /* Usually drained long ago (a sweep starts a shrink only once they are). A grow can come
     * right after a resize ended, mostly after an insert outran a shrink: then they hold the
     * rest of the shrink's old arrays, whose unmapping costs about what walking them did. */
    kt_drain(t, SIZE_MAX);
    int err = kt_array_init(t, &a, new_cap, t->cur.reg);
    if (err != 0) {
        return err;
    }
    t->old = t->cur;
    t->cur = a;
    t->collapse_at = SIZE_MAX; /* the new array fills in 4 KiB pages; kt_end_resize promotes it */
    t->old_keys = t->keys;
    t->moved = 0;
    t->old_freed = 0;
    kt_set_cap(t, t->old.cap, new_cap);
    if (new_cap > t->old.cap) {
        t->grows++;
    } else {
        t->shrinks++;
    }
    if (t->old_keys == 0) {
        kt_end_resize(t);
    }
    return 0;
}

void
rl_keytab_stats(const struct rl_keytab *t, struct rl_keytab_stats *s)
{
    s->keys = t->keys;
    s->capacity = t->cur.cap;
    s->bytes = kt_table_bytes(t->cur.cap);
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
