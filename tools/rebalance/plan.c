/*
 * plan: the greedy leveller of plan.h. Each node's loaded shards sit in one array sorted by
 * (load, shard), so every choice is a binary search plus a skip over the shards already moved
 * away (at most the number of moves so far), and the estimate of rule (a) against (b) looks at
 * no more than FILL_SCAN_MAX entries: a plan over a million shards costs a sort and
 * O(moves * (nodes + moves + FILL_SCAN_MAX)) after it. All the arithmetic on loads is integer; only
 * the target and the budget are derived once from the two fractions.
 */
#include "plan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Bounds on the fractions, so that the integer target cannot overflow. */
#define TOLERANCE_MAX 1000.0

struct entry {
    uint64_t load;
    uint32_t shard;
};

struct state {
    const uint64_t *load;
    struct entry *ent; /* loaded shards by (owner, load, shard) */
    size_t *start;     /* start[n] .. start[n + 1]: node n's entries */
    uint8_t *moved;    /* per shard */
};

static int
entry_cmp(const void *x, const void *y)
{
    const struct entry *a = x, *b = y;

    if (a->load != b->load) {
        return a->load < b->load ? -1 : 1;
    }
    return a->shard < b->shard ? -1 : a->shard > b->shard;
}

/* The first of node n's entries with load >= x (its end when none). */
static size_t
lower_bound(const struct state *st, size_t n, uint64_t x)
{
    size_t lo = st->start[n], hi = st->start[n + 1], mid;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        if (st->ent[mid].load < x) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* The first unmoved entry of node n at or after i, or SIZE_MAX. */
static size_t
next_unmoved(const struct state *st, size_t n, size_t i)
{
    for (; i < st->start[n + 1]; i++) {
        if (!st->moved[st->ent[i].shard]) {
            return i;
        }
    }
    return SIZE_MAX;
}

/* The smallest unmoved shard of node n with load in [lo, hi], or SIZE_MAX. */
static size_t
smallest_in(const struct state *st, size_t n, uint64_t lo, uint64_t hi)
{
    size_t i = next_unmoved(st, n, lower_bound(st, n, lo));

    return i != SIZE_MAX && st->ent[i].load <= hi ? i : SIZE_MAX;
}

/* The largest unmoved shard of node n with load <= hi (the lowest shard among equals). */
static size_t
largest_upto(const struct state *st, size_t n, uint64_t hi)
{
    size_t i = hi == UINT64_MAX ? st->start[n + 1] : lower_bound(st, n, hi + 1);

    while (i > st->start[n]) {
        i--;
        if (!st->moved[st->ent[i].shard]) {
            /* Among shards of equal load, the lowest numbered one. */
            return next_unmoved(st, n, lower_bound(st, n, st->ent[i].load));
        }
    }
    return SIZE_MAX;
}

/* Entries a fill estimate looks at, at most: bounds a step's cost on huge shard counts. */
#define FILL_SCAN_MAX 4096

/*
 * What reaching `need` costs with node n's shards of at most `need`, the largest first, then
 * the smallest shard that covers the rest: an estimate (receivers are ignored) of the load the
 * plan moves if it does not take one shard of `need` or more. UINT64_MAX when it cannot.
 */
static uint64_t
fill_cost(const struct state *st, size_t n, uint64_t need)
{
    uint64_t rem = need, cost = 0;
    size_t i = lower_bound(st, n, need + 1), scanned = 0, j;

    while (i > st->start[n] && rem > 0 && scanned < FILL_SCAN_MAX) {
        i--;
        scanned++;
        if (!st->moved[st->ent[i].shard] && st->ent[i].load <= rem) {
            rem -= st->ent[i].load;
            cost += st->ent[i].load;
        }
    }
    if (rem == 0) {
        return cost;
    }
    j = smallest_in(st, n, rem, UINT64_MAX);
    return j == SIZE_MAX ? UINT64_MAX : cost + st->ent[j].load;
}

/*
 * The entry to move from hot (load lh) to cold (load lc), at most `left` of load, following
 * plan.h's rules; SIZE_MAX when no move helps.
 */
static size_t
choose(const struct state *st, size_t hot, size_t cold, uint64_t lh, uint64_t lc, uint64_t target,
       uint64_t left)
{
    uint64_t need = lh - target, room = target > lc ? target - lc : 0;
    uint64_t hi = room < left ? room : left, half, c1, c2;
    size_t a, b, i, j;

    /* (a) the smallest shard that alone brings hot down to the target and fits on cold, and
     * (b) the largest shard that fits on cold under the target. */
    a = smallest_in(st, hot, need, hi);
    b = hi > 0 ? largest_upto(st, hot, hi < need ? hi : need - 1) : SIZE_MAX;
    if (a != SIZE_MAX && b != SIZE_MAX) {
        /* Moved load is the cost: (a) overshoots by its size less the need, so take (b)'s
         * road of smaller shards when it reaches the target for less. */
        return fill_cost(st, hot, need) < st->ent[a].load ? b : a;
    }
    if (a != SIZE_MAX) {
        return a;
    }
    if (b != SIZE_MAX) {
        return b;
    }
    /* (c) the shard nearest half the gap, if it lowers the pair's maximum below lh: a shard
     * of x lowers it iff lc + x < lh. */
    if (lh - lc < 2) {
        return SIZE_MAX;
    }
    half = (lh - lc) / 2;
    hi = lh - lc - 1 < left ? lh - lc - 1 : left;
    i = largest_upto(st, hot, half < hi ? half : hi);
    j = half + 1 <= hi ? smallest_in(st, hot, half + 1, hi) : SIZE_MAX;
    if (i == SIZE_MAX) {
        return j;
    }
    if (j == SIZE_MAX) {
        return i;
    }
    c1 = lh - st->ent[i].load > lc + st->ent[i].load ? lh - st->ent[i].load : lc + st->ent[i].load;
    c2 = lh - st->ent[j].load > lc + st->ent[j].load ? lh - st->ent[j].load : lc + st->ent[j].load;
    /* On a tie the smaller shard: it moves less. */
    return c2 < c1 ? j : i;
}

/* The most and least loaded nodes not frozen (the first by name on ties); SIZE_MAX when all
 * are frozen. frozen may be NULL. */
static void
extremes(const uint64_t *l, size_t n, const uint8_t *frozen, size_t *hot, size_t *cold)
{
    size_t i;

    *hot = SIZE_MAX;
    *cold = SIZE_MAX;
    for (i = 0; i < n; i++) {
        if (frozen != NULL && frozen[i]) {
            continue;
        }
        if (*hot == SIZE_MAX || l[i] > l[*hot]) {
            *hot = i;
        }
        if (*cold == SIZE_MAX || l[i] < l[*cold]) {
            *cold = i;
        }
    }
}

static void
state_deinit(struct state *st)
{
    free(st->ent);
    free(st->start);
    free(st->moved);
}

static int
state_init(struct state *st, const struct rl_plan *p, const uint64_t *load)
{
    size_t nloaded = 0, n, *fill;
    uint32_t s;

    memset(st, 0, sizeof(*st));
    st->load = load;
    for (s = 0; s < p->nshards; s++) {
        nloaded += load[s] > 0;
    }
    st->ent = malloc((nloaded ? nloaded : 1) * sizeof(*st->ent));
    st->start = calloc(p->nmembers + 1, sizeof(*st->start));
    st->moved = calloc(p->nshards, sizeof(*st->moved));
    fill = calloc(p->nmembers + 1, sizeof(*fill));
    if (st->ent == NULL || st->start == NULL || st->moved == NULL || fill == NULL) {
        free(fill);
        state_deinit(st);
        return -ENOMEM;
    }
    for (s = 0; s < p->nshards; s++) {
        if (load[s] > 0) {
            st->start[p->owner[s] + 1]++;
        }
    }
    for (n = 0; n < p->nmembers; n++) {
        st->start[n + 1] += st->start[n];
        fill[n] = st->start[n];
    }
    for (s = 0; s < p->nshards; s++) {
        if (load[s] > 0) {
            st->ent[fill[p->owner[s]]++] = (struct entry){load[s], s};
        }
    }
    for (n = 0; n < p->nmembers; n++) {
        qsort(st->ent + st->start[n], st->start[n + 1] - st->start[n], sizeof(*st->ent), entry_cmp);
    }
    free(fill);
    return 0;
}

/*
 * The greedy loop. A hot node that no move can help is frozen, and levelling goes on among
 * the others: one node stuck with a hot shard (or out of budget) must not keep the rest of
 * the cluster unbalanced.
 */
static int
level(struct rl_plan *p, const uint64_t *load)
{
    struct state st;
    uint8_t *frozen;
    size_t hot, cold, i;
    uint64_t lh, lc;
    int rc;

    rc = state_init(&st, p, load);
    if (rc != 0) {
        return rc;
    }
    p->moves = malloc((st.start[p->nmembers] ? st.start[p->nmembers] : 1) * sizeof(*p->moves));
    frozen = calloc(p->nmembers, sizeof(*frozen));
    if (p->moves == NULL || frozen == NULL) {
        free(frozen);
        state_deinit(&st);
        return -ENOMEM;
    }
    for (;;) {
        extremes(p->after, p->nmembers, frozen, &hot, &cold);
        if (hot == SIZE_MAX || hot == cold || p->after[hot] <= p->target) {
            break;
        }
        lh = p->after[hot];
        lc = p->after[cold];
        i = choose(&st, hot, cold, lh, lc, p->target, p->budget_load - p->moved_load);
        if (i == SIZE_MAX) {
            /* Would a larger budget have moved something? */
            if (choose(&st, hot, cold, lh, lc, p->target, UINT64_MAX) != SIZE_MAX) {
                p->budget_hit = true;
            }
            frozen[hot] = 1;
            continue;
        }
        st.moved[st.ent[i].shard] = 1;
        p->moves[p->moved_shards++] = (struct rl_plan_move){.shard = st.ent[i].shard,
                                                            .from = (uint32_t)hot,
                                                            .to = (uint32_t)cold,
                                                            .load = st.ent[i].load};
        p->owner[st.ent[i].shard] = (uint32_t)cold;
        p->after[hot] -= st.ent[i].load;
        p->after[cold] += st.ent[i].load;
        p->moved_load += st.ent[i].load;
    }
    /* Above the target and its biggest shard alone exceeds it: a hot shard. */
    free(frozen);
    extremes(p->after, p->nmembers, NULL, &hot, &cold);
    if (p->after[hot] > p->target) {
        for (i = st.start[hot + 1]; i > st.start[hot]; i--) {
            if (!st.moved[st.ent[i - 1].shard]) {
                p->hot_shard = st.ent[i - 1].load > p->target;
                break;
            }
        }
    }
    state_deinit(&st);
    return 0;
}

void
rl_plan_deinit(struct rl_plan *p)
{
    free(p->members);
    free(p->before_owner);
    free(p->owner);
    free(p->hrw);
    free(p->before);
    free(p->after);
    free(p->shards_before);
    free(p->shards_after);
    free(p->moves);
    rl_assignment_deinit(&p->assignment);
    memset(p, 0, sizeof(*p));
}

int
rl_plan_compute(const struct rl_plan_input *in, struct rl_plan *p)
{
    struct rl_shardmap *cur = NULL, *hrw = NULL;
    size_t nm = in->nmembers;
    uint32_t s;
    long double share;
    int rc;

    memset(p, 0, sizeof(*p));
    if (nm == 0 || in->load == NULL || !(in->tolerance >= 0 && in->tolerance <= TOLERANCE_MAX) ||
        !(in->budget >= 0 && in->budget <= 1) ||
        (in->current != NULL && in->current->nshards != in->nshards)) {
        return -EINVAL;
    }
    rc = rl_shardmap_create(&cur, in->nshards, in->members, nm, in->current);
    if (rc == 0) {
        rc = rl_shardmap_create(&hrw, in->nshards, in->members, nm, NULL);
    }
    if (rc != 0) {
        goto fail;
    }
    rc = -ENOMEM;
    p->nshards = in->nshards;
    p->nmembers = nm;
    p->members = malloc(nm * sizeof(*p->members));
    p->before_owner = malloc(in->nshards * sizeof(*p->before_owner));
    p->owner = malloc(in->nshards * sizeof(*p->owner));
    p->hrw = malloc(in->nshards * sizeof(*p->hrw));
    p->before = calloc(nm, sizeof(*p->before));
    p->after = calloc(nm, sizeof(*p->after));
    p->shards_before = calloc(nm, sizeof(*p->shards_before));
    p->shards_after = calloc(nm, sizeof(*p->shards_after));
    if (p->members == NULL || p->before_owner == NULL || p->owner == NULL || p->hrw == NULL ||
        p->before == NULL || p->after == NULL || p->shards_before == NULL ||
        p->shards_after == NULL || rl_assignment_init(&p->assignment, in->nshards) != 0) {
        goto fail;
    }
    /* Both tables sorted the same members the same way, so their indexes agree. */
    memcpy(p->members, cur->members, nm * sizeof(*p->members));
    memcpy(p->before_owner, cur->owner, in->nshards * sizeof(*p->owner));
    memcpy(p->owner, cur->owner, in->nshards * sizeof(*p->owner));
    memcpy(p->hrw, hrw->owner, in->nshards * sizeof(*p->hrw));
    for (s = 0; s < in->nshards; s++) {
        p->before[p->owner[s]] += in->load[s];
        p->shards_before[p->owner[s]]++;
        p->total += in->load[s];
    }
    memcpy(p->after, p->before, nm * sizeof(*p->after));
    share = (long double)p->total * (1.0L + (long double)in->tolerance) / (long double)nm;
    p->target = share >= (long double)UINT64_MAX ? UINT64_MAX : (uint64_t)share;
    p->budget_load =
        in->budget >= 1 ? p->total : (uint64_t)((long double)p->total * (long double)in->budget);
    rc = level(p, in->load);
    if (rc != 0) {
        goto fail;
    }
    for (s = 0; s < in->nshards; s++) {
        p->shards_after[p->owner[s]]++;
        p->hot_shards += in->load[s] > p->target;
        if (p->owner[s] != p->hrw[s]) {
            rc = rl_assignment_set(&p->assignment, s, p->members[p->owner[s]].name);
            if (rc != 0) {
                goto fail;
            }
        }
    }
    rl_shardmap_destroy(cur);
    rl_shardmap_destroy(hrw);
    return 0;
fail:
    rl_shardmap_destroy(cur);
    rl_shardmap_destroy(hrw);
    rl_plan_deinit(p);
    return rc;
}

double
rl_plan_ratio(const uint64_t *load, size_t n)
{
    uint64_t max = 0;
    long double sum = 0;
    size_t i;

    for (i = 0; i < n; i++) {
        sum += (long double)load[i];
        max = load[i] > max ? load[i] : max;
    }
    if (n == 0 || sum == 0) {
        return 0;
    }
    return (double)((long double)max * (long double)n / sum);
}

uint32_t
rl_plan_overrides(const struct rl_assignment *a)
{
    uint32_t s, n = 0;

    for (s = 0; s < a->nshards; s++) {
        n += a->owner[s][0] != '\0';
    }
    return n;
}
