/*
 * hotkeys: the space-saving sketch of hotkeys.h: counters in a min-heap, an open-addressing
 * index by key, halving decay. Not for the wire or the permissions (router/shed.c).
 */
#include "hotkeys.h"

#include <string.h>

void
rl_hot_init(struct rl_hot *h, uint64_t now_ms)
{
    memset(h, 0, sizeof(*h));
    h->decayed_at = now_ms;
    h->rng = 0x9e3779b97f4a7c15ull ^ (now_ms * 0xbf58476d1ce4e5b9ull) ^ (uint64_t)(uintptr_t)h;
    if (h->rng == 0) {
        h->rng = 1;
    }
}

static uint32_t
hot_slot0(uint64_t hash, uint64_t fp)
{
    uint64_t x = hash ^ fp * 0x9e3779b97f4a7c15ull;

    return (uint32_t)(x >> 40) & (RL_HOT_INDEX - 1);
}

/* The counter of (hash, fp), or -1 with *free_slot the first slot an insert may use. */
static int
hot_find(const struct rl_hot *h, uint64_t hash, uint64_t fp, uint32_t *free_slot)
{
    uint32_t s = hot_slot0(hash, fp);
    uint32_t first_free = UINT32_MAX;

    for (uint32_t i = 0; i < RL_HOT_INDEX; i++, s = (s + 1) & (RL_HOT_INDEX - 1)) {
        uint16_t v = h->index[s];

        if (v == 0) {
            if (free_slot != NULL) {
                *free_slot = first_free != UINT32_MAX ? first_free : s;
            }
            return -1;
        }
        if (v == RL_HOT_TOMB) {
            if (first_free == UINT32_MAX) {
                first_free = s;
            }
            continue;
        }
        if (h->c[v - 1].hash == hash && h->c[v - 1].fp == fp) {
            return v - 1;
        }
    }
    if (free_slot != NULL) {
        *free_slot = first_free;
    }
    return -1;
}

static void
hot_index_remove(struct rl_hot *h, uint32_t ci)
{
    uint32_t s = hot_slot0(h->c[ci].hash, h->c[ci].fp);

    for (uint32_t i = 0; i < RL_HOT_INDEX; i++, s = (s + 1) & (RL_HOT_INDEX - 1)) {
        if (h->index[s] == ci + 1) {
            h->index[s] = RL_HOT_TOMB;
            h->tombs++;
            return;
        }
        if (h->index[s] == 0) {
            return;
        }
    }
}

/* Rebuilds the index without tombstones. */
static void
hot_reindex(struct rl_hot *h)
{
    memset(h->index, 0, sizeof(h->index));
    h->tombs = 0;
    for (uint32_t i = 0; i < h->n; i++) {
        uint32_t s = hot_slot0(h->c[i].hash, h->c[i].fp);

        while (h->index[s] != 0) {
            s = (s + 1) & (RL_HOT_INDEX - 1);
        }
        h->index[s] = (uint16_t)(i + 1);
    }
}

/* Counter at heap position i grew (to count, its hcount not yet set): move it down to its
 * place, the smaller child up at each step, and set it there once. */
static void
hot_down(struct rl_hot *h, uint32_t i, uint64_t count)
{
    uint16_t ci = h->heap[i];

    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m;

        if (l >= h->n) {
            break;
        }
        m = r < h->n && h->hcount[r] < h->hcount[l] ? r : l;
        if (h->hcount[m] >= count) {
            break;
        }
        h->heap[i] = h->heap[m];
        h->hcount[i] = h->hcount[m];
        h->pos[h->heap[i]] = (uint16_t)i;
        i = m;
    }
    h->heap[i] = ci;
    h->hcount[i] = count;
    h->pos[ci] = (uint16_t)i;
}

static void
hot_name(struct rl_hot_counter *c, const char *service, size_t slen, const char *user, size_t ulen)
{
    c->slen = (uint16_t)(slen < sizeof(c->service) ? slen : sizeof(c->service));
    c->ulen = (uint16_t)(ulen < sizeof(c->user) ? ulen : sizeof(c->user));
    memcpy(c->service, service, c->slen);
    memcpy(c->user, user, c->ulen);
}

/* Adds n (with overcount e) to the key, taking the smallest counter when it has none. */
static void
hot_add_n(struct rl_hot *h, uint64_t hash, uint64_t fp, const char *service, size_t slen,
          const char *user, size_t ulen, uint64_t n, uint64_t e)
{
    uint32_t slot = UINT32_MAX;
    int ci = hot_find(h, hash, fp, &slot);
    struct rl_hot_counter *c;

    h->total += n;
    if (ci >= 0) {
        h->c[ci].count += n;
        h->c[ci].err += e;
        hot_down(h, h->pos[ci], h->c[ci].count);
        return;
    }
    if (h->n < RL_HOT_K) {
        ci = (int)h->n;
        c = &h->c[ci];
        memset(c, 0, sizeof(*c));
        h->heap[h->n] = (uint16_t)ci;
        h->hcount[h->n] = 0;
        h->pos[ci] = (uint16_t)h->n;
        h->n++;
    } else {
        ci = h->heap[0];
        c = &h->c[ci];
        hot_index_remove(h, (uint32_t)ci);
        c->err = c->count; /* all of the old count may belong to others */
    }
    c->hash = hash;
    c->fp = fp;
    c->count += n;
    c->err += e;
    hot_name(c, service, slen, user, ulen);
    /* The slot found above is still free: removing the old key only made another tomb. */
    if (slot == UINT32_MAX) {
        hot_reindex(h);
    } else {
        if (h->index[slot] == RL_HOT_TOMB) {
            h->tombs--;
        }
        h->index[slot] = (uint16_t)(ci + 1);
        if (h->tombs > RL_HOT_INDEX / 4) {
            hot_reindex(h);
        }
    }
    hot_down(h, h->pos[ci], c->count);
}

void
rl_hot_decay(struct rl_hot *h, uint64_t now_ms)
{
    uint64_t periods;

    if (now_ms < h->decayed_at + RL_HOT_PERIOD_MS) {
        return;
    }
    periods = (now_ms - h->decayed_at) / RL_HOT_PERIOD_MS;
    h->decayed_at += periods * RL_HOT_PERIOD_MS;
    if (periods > 63) {
        periods = 63;
    }
    /* Halving keeps the heap's order: floor(x / 2^p) is monotone. */
    for (uint32_t i = 0; i < h->n; i++) {
        h->c[i].count >>= periods;
        h->c[i].err >>= periods;
        h->hcount[i] >>= periods; /* by position: the same counters, halved alike */
    }
    h->total >>= periods;
    h->period_adds = 0;
}

void
rl_hot_add(struct rl_hot *h, uint64_t hash, uint64_t fp, const char *service, size_t slen,
           const char *user, size_t ulen, uint64_t now_ms)
{
    uint64_t n;

    rl_hot_decay(h, now_ms);
    if (h->period_adds < RL_HOT_EXACT) {
        h->period_adds++;
        hot_add_n(h, hash, fp, service, slen, user, ulen, 1, 0);
        return;
    }
    if (h->skip > 0) {
        h->skip--;
        h->skipped++;
        return;
    }
    /* This one stands for itself and the requests passed over since the last sample; the
     * next sample comes after 0 .. 2 * RL_HOT_SAMPLE - 2 more (RL_HOT_SAMPLE on average). */
    n = h->skipped + 1;
    h->skipped = 0;
    h->rng ^= h->rng << 13;
    h->rng ^= h->rng >> 7;
    h->rng ^= h->rng << 17;
    h->skip = h->rng % (2 * RL_HOT_SAMPLE - 1);
    hot_add_n(h, hash, fp, service, slen, user, ulen, n, 0);
}

size_t
rl_hot_top(const struct rl_hot *h, const struct rl_hot_counter **out, size_t max,
           bool (*keep)(void *arg, const struct rl_hot_counter *c), void *arg)
{
    size_t n = 0;

    /* Insertion into out, highest first: max is small (at most RL_HOT_K). */
    for (uint32_t i = 0; i < h->n; i++) {
        const struct rl_hot_counter *c = &h->c[i];
        size_t j;

        if (c->count == 0 || (keep != NULL && !keep(arg, c))) {
            continue;
        }
        if (n == max && (max == 0 || out[n - 1]->count >= c->count)) {
            continue;
        }
        j = n < max ? n++ : n - 1;
        while (j > 0 && out[j - 1]->count < c->count) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = c;
    }
    return n;
}

void
rl_hot_merge(struct rl_hot *dst, const struct rl_hot *src)
{
    uint64_t total = dst->total + src->total;

    for (uint32_t i = 0; i < src->n; i++) {
        const struct rl_hot_counter *c = &src->c[i];

        hot_add_n(dst, c->hash, c->fp, c->service, c->slen, c->user, c->ulen, c->count, c->err);
    }
    dst->total = total;
}
