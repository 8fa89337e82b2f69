/*
 * tenant: the map of tenant records (tenant.h). Records live in a dense array (removal moves
 * the last into the hole); an index of dense positions + 1 (0 empty) by a multiplicative hash
 * of the id, linear probing at a load of at most 1/2, backward-shift deletion.
 */
#include "tenant.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct rl_tenants {
    struct rl_tenant *v;
    size_t n, cap;
    uint32_t *ix;
    size_t mask; /* index slots - 1 */
};

static size_t
ten_home(const struct rl_tenants *ts, uint32_t id)
{
    return (size_t)(((uint64_t)id * UINT64_C(0x9e3779b97f4a7c15)) >> 32) & ts->mask;
}

int
rl_tenants_create(struct rl_tenants **out)
{
    struct rl_tenants *ts = calloc(1, sizeof(*ts));

    if (ts == NULL) {
        return -ENOMEM;
    }
    ts->mask = 15;
    ts->ix = calloc(ts->mask + 1, sizeof(*ts->ix));
    if (ts->ix == NULL) {
        free(ts);
        return -ENOMEM;
    }
    *out = ts;
    return 0;
}

void
rl_tenants_destroy(struct rl_tenants *ts)
{
    if (ts != NULL) {
        free(ts->v);
        free(ts->ix);
        free(ts);
    }
}

/* The index slot of id, or of the empty slot where it would go. */
static size_t
ten_slot(const struct rl_tenants *ts, uint32_t id)
{
    size_t i = ten_home(ts, id);

    while (ts->ix[i] != 0 && ts->v[ts->ix[i] - 1].id != id) {
        i = (i + 1) & ts->mask;
    }
    return i;
}

struct rl_tenant *
rl_tenants_find(struct rl_tenants *ts, uint32_t id)
{
    size_t i = ten_slot(ts, id);

    return ts->ix[i] == 0 ? NULL : &ts->v[ts->ix[i] - 1];
}

static int
ten_reindex(struct rl_tenants *ts, size_t slots)
{
    uint32_t *ix = calloc(slots, sizeof(*ix));

    if (ix == NULL) {
        return -ENOMEM;
    }
    free(ts->ix);
    ts->ix = ix;
    ts->mask = slots - 1;
    for (size_t d = 0; d < ts->n; d++) {
        ts->ix[ten_slot(ts, ts->v[d].id)] = (uint32_t)(d + 1);
    }
    return 0;
}

struct rl_tenant *
rl_tenants_add(struct rl_tenants *ts, uint32_t id)
{
    struct rl_tenant *x = rl_tenants_find(ts, id);

    if (x != NULL) {
        return x;
    }
    if (ts->n == ts->cap) {
        size_t cap = ts->cap == 0 ? 16 : ts->cap * 2;
        struct rl_tenant *v = realloc(ts->v, cap * sizeof(*v));

        if (v == NULL) {
            return NULL;
        }
        ts->v = v;
        ts->cap = cap;
    }
    if (2 * (ts->n + 1) > ts->mask + 1 && ten_reindex(ts, 2 * (ts->mask + 1)) != 0) {
        return NULL;
    }
    x = &ts->v[ts->n];
    memset(x, 0, sizeof(*x));
    x->id = id;
    ts->ix[ten_slot(ts, id)] = (uint32_t)(ts->n + 1);
    ts->n++;
    return x;
}

/* Removes index slot i, shifting back the entries of its run that may move. */
static void
ten_unindex(struct rl_tenants *ts, size_t i)
{
    size_t j = i;

    ts->ix[i] = 0;
    for (;;) {
        size_t k;

        j = (j + 1) & ts->mask;
        if (ts->ix[j] == 0) {
            return;
        }
        k = ten_home(ts, ts->v[ts->ix[j] - 1].id);
        /* j's entry may fill the hole at i when its home is not cyclically in (i, j] */
        if ((j > i && (k <= i || k > j)) || (j < i && k <= i && k > j)) {
            ts->ix[i] = ts->ix[j];
            ts->ix[j] = 0;
            i = j;
        }
    }
}

void
rl_tenants_settle(struct rl_tenants *ts, struct rl_tenant *x)
{
    size_t d, last;

    if (x == NULL || x->limits != 0 || x->st.keys != 0 || x->st.log_bytes != 0) {
        return;
    }
    d = (size_t)(x - ts->v);
    last = ts->n - 1;
    ten_unindex(ts, ten_slot(ts, x->id));
    if (d != last) {
        ts->ix[ten_slot(ts, ts->v[last].id)] = (uint32_t)(d + 1);
        ts->v[d] = ts->v[last];
    }
    ts->n--;
}

size_t
rl_tenants_count(const struct rl_tenants *ts)
{
    return ts->n;
}

void
rl_tenants_reset_holdings(struct rl_tenants *ts)
{
    for (size_t d = ts->n; d > 0; d--) {
        struct rl_tenant *x = &ts->v[d - 1];

        x->st.keys = 0;
        x->st.log_bytes = 0;
        rl_tenants_settle(ts, x); /* moves only the last record, already visited */
    }
}
