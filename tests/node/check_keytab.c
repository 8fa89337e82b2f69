/*
 * check_keytab: the node's table of counters (node/keytab.c) against a reference model: a
 * flag per key id, with random operation sequences from fixed seeds. Fake ops keep in the
 * state what the real ones would compute from a tier (a.a: when the entry is full again,
 * a.b: the key id + 1), and count every release, so a test sees which entry was dropped and
 * that each one was released exactly once. No timing assertions.
 */
#include <check.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keytab.h"
#include "rltest.h"

/* The most old slots an insert moves during a resize, as keytab.h documents. */
#define INSERT_STEP 128

/* What the fake ops saw. */
struct fake {
    uint8_t *released; /* per key id: how many times released */
    size_t nids;
    uint64_t releases;
    int64_t last_released; /* key id, or -1 */
    uint64_t sampled[64];  /* full_at answers since the last reset */
    int64_t sampled_id[64];
    size_t nsampled;
    uint64_t is_full_calls;
    int64_t *log; /* key ids released since a test that reads it last emptied it */
    size_t nlog;
    uint64_t log_lost; /* releases past nids in the log (tests that ignore it) */
    /* A scan's watch, when set: the keys present at its begin and its visits per key id;
     * lost counts the releases of such keys before their visit. */
    const uint8_t *present;
    const uint8_t *visits;
    uint64_t lost;
};

static bool
fake_is_full(void *arg, struct rl_keytab_entry *e, uint64_t now)
{
    struct fake *f = arg;
    f->is_full_calls++;
    return e->st.a <= now;
}

static uint64_t
fake_full_at(void *arg, struct rl_keytab_entry *e, uint64_t now, uint32_t tier)
{
    struct fake *f = arg;
    (void)now;
    (void)tier;
    if (f->nsampled < 64) {
        f->sampled[f->nsampled] = e->st.a;
        f->sampled_id[f->nsampled] = (int64_t)e->st.b - 1;
    }
    f->nsampled++;
    return e->st.a;
}

static void
fake_release(void *arg, struct rl_keytab_entry *e)
{
    struct fake *f = arg;
    RL_CHECK_UINT(e->st.b, !=, 0);
    uint64_t id = e->st.b - 1;
    RL_CHECK_UINT(id, <, f->nids);
    RL_CHECK_UINT(f->released[id], ==, 0);
    f->released[id]++;
    f->releases++;
    if (f->present != NULL && f->present[id] && f->visits[id] == 0) {
        f->lost++;
    }
    f->last_released = (int64_t)id;
    if (f->nlog < f->nids) {
        f->log[f->nlog++] = (int64_t)id;
    } else {
        f->log_lost++;
    }
    memset(&e->st, 0, sizeof(e->st));
}

static struct rl_keytab *fake_table_keyed(struct fake *f, size_t nids, uint64_t max_bytes);

/* A table of the fake owner, placed by fingerprint (rl_keytab_place_plain). */
static struct rl_keytab *
fake_table(struct fake *f, size_t nids, uint64_t max_bytes)
{
    struct rl_keytab *t = fake_table_keyed(f, nids, max_bytes);

    rl_keytab_place_plain(t); /* most tests below put fingerprints at slots they choose */
    return t;
}

/* The same, placed as a node's is: through its random key (keytab_int.h, kt_place). */
static struct rl_keytab *
fake_table_keyed(struct fake *f, size_t nids, uint64_t max_bytes)
{
    memset(f, 0, sizeof(*f));
    f->released = calloc(nids, 1);
    RL_CHECK(f->released != NULL);
    f->log = malloc(nids * sizeof(*f->log));
    RL_CHECK(f->log != NULL);
    f->nids = nids;
    f->last_released = -1;
    struct rl_keytab_ops ops = {fake_is_full, fake_full_at, NULL, fake_release, f};
    struct rl_keytab *t = NULL;
    RL_CHECK_INT(rl_keytab_create(&t, max_bytes, &ops), ==, 0);
    RL_CHECK(t != NULL);
    return t;
}

static uint64_t
splitmix(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* A key id's fingerprint, through rl_keytab_fingerprint as the limiter makes them. */
static void
key_fp(uint64_t id, uint64_t *hi, uint32_t *lo)
{
    uint64_t s = id * 2 + 1;
    uint64_t h_hi = splitmix(&s);
    uint64_t h_lo = splitmix(&s);
    rl_keytab_fingerprint(h_hi, h_lo, hi, lo);
}

/* A fingerprint from a handful of homes, so runs are long, collide and wrap around the end
 * of the array: the top bits pick one of 8 regions, two of them the last 1/64 of the array
 * and the first. Low bits from the id keep fingerprints distinct. */
static void
clustered_fp(uint64_t id, uint64_t *hi, uint32_t *lo)
{
    static const uint64_t regions[8] = {
        UINT64_MAX,
        UINT64_MAX - (UINT64_MAX >> 6),
        0,
        UINT64_C(1) << 58,
        UINT64_C(1) << 62,
        UINT64_C(3) << 62,
        UINT64_C(5) << 61,
        UINT64_C(7) << 60,
    };
    uint64_t s = id;
    uint64_t r = splitmix(&s);
    uint64_t base = regions[r & 7];
    /* Within a region, a spread of 1/64 of the hash space, so regions overlap. */
    uint64_t off = (r >> 3) >> 3;
    *hi = base >= (UINT64_MAX >> 1) ? base - off : base + off;
    *hi = (*hi & ~UINT64_C(0xffffff)) | (id & 0xffffff);
    *hi += (*hi == 0);
    *lo = (uint32_t)(id >> 24) & 0xf; /* the 4 bits an entry keeps */
}

static struct rl_keytab_entry *
insert_id(struct rl_keytab *t, uint64_t id, uint64_t hi, uint32_t lo, uint64_t full_at)
{
    struct rl_keytab_entry *e = rl_keytab_insert(t, hi, lo, (uint16_t)(id & 0xffff), 0);
    RL_CHECK(e != NULL);
    RL_CHECK_UINT(e->fp_hi, ==, hi);
    RL_CHECK_UINT(e->fp_lo, ==, lo & 0xf); /* the 4 bits an entry keeps */
    RL_CHECK_UINT(e->tier, ==, id & 0xffff);
    RL_CHECK_UINT(e->st.a, ==, 0);
    RL_CHECK_UINT(e->st.b, ==, 0);
    e->st.a = full_at;
    e->st.b = id + 1;
    return e;
}

static uint64_t
keys_of(const struct rl_keytab *t)
{
    struct rl_keytab_stats s;
    rl_keytab_stats(t, &s);
    return s.keys;
}

/* Finds id and checks the entry is that id's, or that it is absent. */
static void
check_id(struct rl_keytab *t, uint64_t id, uint64_t hi, uint32_t lo, bool present)
{
    struct rl_keytab_entry *e = rl_keytab_find(t, hi, lo);
    if (present) {
        RL_CHECK(e != NULL);
        RL_CHECK_UINT(e->st.b, ==, id + 1);
        RL_CHECK_UINT(e->fp_hi, ==, hi);
        RL_CHECK_UINT(e->fp_lo, ==, lo & 0xf); /* the 4 bits an entry keeps */
    } else {
        RL_CHECK(e == NULL);
    }
}

/* Destroys the table and checks that every id ever inserted was released exactly once. */
static void
finish(struct rl_keytab *t, struct fake *f, const uint8_t *inserted)
{
    rl_keytab_destroy(t);
    for (size_t id = 0; id < f->nids; id++) {
        RL_CHECK_UINT(f->released[id], ==, inserted[id]);
    }
    free(f->released);
    free(f->log);
}

START_TEST(test_fingerprint)
{
    uint64_t hi;
    uint32_t lo;
    rl_keytab_fingerprint(0, 0, &hi, &lo);
    RL_CHECK_UINT(hi, !=, 0);
    /* Deterministic: every process must agree on where a key lives. */
    uint64_t hi2;
    uint32_t lo2;
    rl_keytab_fingerprint(0x0123456789abcdefu, 0xfedcba9876543210u, &hi, &lo);
    rl_keytab_fingerprint(0x0123456789abcdefu, 0xfedcba9876543210u, &hi2, &lo2);
    RL_CHECK_UINT(hi, ==, hi2);
    RL_CHECK_UINT(lo, ==, lo2);
    /* Both halves of the hash count. */
    rl_keytab_fingerprint(0x0123456789abcdefu, 0xfedcba9876543211u, &hi2, &lo2);
    RL_CHECK(hi != hi2 || lo != lo2);
    rl_keytab_fingerprint(0x0123456789abcdeeu, 0xfedcba9876543210u, &hi2, &lo2);
    RL_CHECK(hi != hi2 || lo != lo2);
    /* Tags take the low 7 bits of fp_hi: a hash whose low bits are constant must still give
     * spread ones. */
    unsigned seen = 0;
    for (uint64_t i = 0; i < 1024; i++) {
        rl_keytab_fingerprint(i << 20, 0, &hi, &lo);
        seen |= 1u << (hi & 31);
    }
    RL_CHECK_UINT(seen, ==, 0xffffffffu);
}
END_TEST

START_TEST(test_empty)
{
    struct fake f;
    struct rl_keytab *t = fake_table(&f, 1, 0);
    struct rl_keytab_stats s;
    rl_keytab_stats(t, &s);
    RL_CHECK_UINT(s.keys, ==, 0);
    RL_CHECK_UINT(s.capacity, >=, 16);
    /* Below the minimum, the cap is 64 KiB. */
    RL_CHECK_UINT(s.bytes, <=, 64 * 1024);
    for (uint64_t id = 0; id < 1000; id++) {
        uint64_t hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        RL_CHECK(rl_keytab_find(t, hi, lo) == NULL);
    }
    RL_CHECK_UINT(rl_keytab_sweep(t, 100, 1000), ==, 0);
    uint8_t none = 0;
    finish(t, &f, &none);
    RL_CHECK_UINT(f.releases, ==, 0);
}
END_TEST

/* Keys with their home at the last slot wrap to the front; deleting them in every order
 * must close the gaps with backward shifts across the end. */
START_TEST(test_wrap_delete)
{
    enum { N = 24 };
    for (unsigned order = 0; order < 3; order++) {
        struct fake f;
        struct rl_keytab *t = fake_table(&f, N, 1 << 20);
        uint64_t hi[N];
        uint32_t lo[N];
        uint8_t present[N] = {0};
        uint8_t inserted[N] = {0};
        for (uint64_t id = 0; id < N; id++) {
            /* 0..11: the last slot; 12..17: slot 0; 18..23: slot 1 (at 64 slots). */
            if (id < 12) {
                hi[id] = UINT64_MAX - id;
            } else if (id < 18) {
                hi[id] = id;
            } else {
                hi[id] = (UINT64_MAX / 64) + 8 + id;
            }
            lo[id] = (uint32_t)id;
            insert_id(t, id, hi[id], lo[id], 0);
            present[id] = inserted[id] = 1;
        }
        struct rl_keytab_stats s;
        rl_keytab_stats(t, &s);
        RL_CHECK_UINT(s.capacity, ==, 64);
        RL_CHECK_UINT(s.keys, ==, N);
        uint64_t seed = 7 + order;
        for (unsigned k = 0; k < N; k++) {
            uint64_t id;
            if (order == 0) {
                id = k;
            } else if (order == 1) {
                id = N - 1 - k;
            } else {
                do {
                    id = splitmix(&seed) % N;
                } while (!present[id]);
            }
            struct rl_keytab_entry *e = rl_keytab_find(t, hi[id], lo[id]);
            RL_CHECK(e != NULL);
            rl_keytab_delete(t, e);
            present[id] = 0;
            RL_CHECK_INT(f.last_released, ==, (int64_t)id);
            RL_CHECK_UINT(keys_of(t), ==, N - 1 - k);
            for (uint64_t j = 0; j < N; j++) {
                check_id(t, j, hi[j], lo[j], present[j]);
            }
        }
        finish(t, &f, inserted);
    }
}
END_TEST

/* Random inserts, finds and deletes on clustered fingerprints against the model. */
static void
random_clustered(bool keyed)
{
    enum { N = 4000, OPS = 400000 };
    struct fake f;
    struct rl_keytab *t =
        keyed ? fake_table_keyed(&f, N, UINT64_C(1) << 30) : fake_table(&f, N, UINT64_C(1) << 30);
    uint8_t *present = calloc(N, 1);
    uint8_t *inserted = calloc(N, 1);
    uint64_t *hi = malloc(N * sizeof(*hi));
    uint32_t *lo = malloc(N * sizeof(*lo));
    for (uint64_t id = 0; id < N; id++) {
        clustered_fp(id, &hi[id], &lo[id]);
    }
    uint64_t seed = 42, nkeys = 0;
    for (unsigned op = 0; op < OPS; op++) {
        /* A universe that grows then shrinks moves the load across grows. */
        uint64_t span = op < OPS / 2 ? 200 + (uint64_t)op * (N - 200) / (OPS / 2) : N;
        uint64_t id = splitmix(&seed) % span;
        uint64_t r = splitmix(&seed) % 100;
        check_id(t, id, hi[id], lo[id], present[id]);
        if (present[id] && r < (op < OPS * 3 / 4 ? 40u : 90u)) {
            rl_keytab_delete(t, rl_keytab_find(t, hi[id], lo[id]));
            present[id] = 0;
            nkeys--;
            RL_CHECK_INT(f.last_released, ==, (int64_t)id);
        } else if (!present[id] && r < 70) {
            if (inserted[id]) {
                /* Released once already: a new life for the same key. */
                f.released[id] = 0;
                inserted[id] = 0;
            }
            insert_id(t, id, hi[id], lo[id], 0);
            present[id] = inserted[id] = 1;
            nkeys++;
        }
        RL_CHECK_UINT(keys_of(t), ==, nkeys);
        if (op % 50000 == 0) {
            for (uint64_t j = 0; j < N; j++) {
                check_id(t, j, hi[j], lo[j], present[j]);
            }
        }
    }
    for (uint64_t j = 0; j < N; j++) {
        check_id(t, j, hi[j], lo[j], present[j]);
    }
    /* Ids deleted before the end were released already; those left, by destroy. */
    for (uint64_t j = 0; j < N; j++) {
        if (inserted[j] && !present[j]) {
            RL_CHECK_UINT(f.released[j], ==, 1);
            f.released[j] = 0;
            inserted[j] = 0;
        }
    }
    finish(t, &f, inserted);
    free(present);
    free(inserted);
    free(hi);
    free(lo);
}

START_TEST(test_random_clustered)
{
    random_clustered(false);
}
END_TEST

/* The same through a node's keyed placement: its grows, deletes' shifts and finds. */
START_TEST(test_random_clustered_keyed)
{
    random_clustered(true);
}
END_TEST

/*
 * Fingerprints a client computed to share one home where keys are placed by fingerprint
 * (here 1..N, whose home is slot 0 of any table under 2^44 slots: the attack round of
 * 2026-11-30 made such users from a rule's public seed) make one run of them all in such a
 * table, which every find that starts in it walks; a node's table, placed through its random
 * key, spreads them as any keys: its longest run stays short, and every key is found.
 */
START_TEST(test_keyed_placement_spreads_crafted_keys)
{
    enum { N = 60000 };
    struct fake fp, fk;
    struct rl_keytab *plain = fake_table(&fp, N, UINT64_C(1) << 30);
    struct rl_keytab *keyed = fake_table_keyed(&fk, N, UINT64_C(1) << 30);
    uint8_t *inserted = calloc(N, 1);
    size_t run_plain, run_keyed;

    RL_CHECK(inserted != NULL);
    for (uint64_t id = 0; id < N; id++) {
        insert_id(plain, id, id + 1, 0, 0);
        insert_id(keyed, id, id + 1, 0, 0);
        inserted[id] = 1;
    }
    run_plain = rl_keytab_longest_run(plain);
    run_keyed = rl_keytab_longest_run(keyed);
    fprintf(stderr, "longest run of %d crafted keys: %zu placed by fingerprint, %zu keyed\n", N,
            run_plain, run_keyed);
    RL_CHECK_UINT(run_plain, >=, N); /* the attack, where placement is public */
    RL_CHECK_UINT(run_keyed, <, 2000);
    for (uint64_t id = 0; id < N; id++) {
        check_id(keyed, id, id + 1, 0, true);
    }
    finish(plain, &fp, inserted);
    finish(keyed, &fk, inserted);
    free(inserted);
}
END_TEST

/* One million keys: growth keeps every entry, then random deletes and re-inserts. */
START_TEST(test_million)
{
    enum { N = 1000000 };
    struct fake f;
    struct rl_keytab *t = fake_table(&f, N, UINT64_C(1) << 32);
    uint8_t *present = calloc(N, 1);
    uint32_t *perm = malloc(N * sizeof(*perm));
    for (uint32_t i = 0; i < N; i++) {
        perm[i] = i;
    }
    uint64_t seed = 1;
    for (uint32_t i = N - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(splitmix(&seed) % (i + 1));
        uint32_t x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    struct rl_keytab_stats s, b;
    rl_keytab_stats(t, &s);
    uint64_t last_cap = 0, resizes = 0, mid = 0, mid_checks = 0, old_cap = 0;
    bool checked = false;
    for (uint32_t i = 0; i < N; i++) {
        uint64_t id = perm[i], hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        b = s;
        insert_id(t, id, hi, lo, 0);
        present[id] = 1;
        rl_keytab_stats(t, &s);
        RL_CHECK_UINT(s.keys, ==, i + 1);
        /* The load never passes 7/8, and each grow is by 1.2x. */
        RL_CHECK_UINT(s.keys * 8, <=, s.capacity * 7);
        /* No insert moves more than a step of a resize. */
        RL_CHECK_UINT(s.resize_steps - b.resize_steps, <=, INSERT_STEP);
        mid += s.resize_left > 0;
        if (s.capacity != last_cap) {
            if (last_cap != 0) {
                RL_CHECK_UINT(s.capacity, ==, last_cap + last_cap / 5);
                RL_CHECK_UINT(s.resizes, ==, resizes + 1);
                /* The last move ended before this grow was due. */
                RL_CHECK_UINT(b.resize_left, ==, 0);
                RL_CHECK_UINT(s.resize_left, ==, last_cap);
            }
            old_cap = last_cap;
            last_cap = s.capacity;
            resizes = s.resizes;
            checked = false;
        }
        if (!checked && s.resize_left > 0 && s.resize_left < old_cap / 2) {
            /* Half way through a move: every key so far, in either array. */
            for (uint32_t k = 0; k <= i; k++) {
                uint64_t khi;
                uint32_t klo;
                key_fp(perm[k], &khi, &klo);
                check_id(t, perm[k], khi, klo, true);
            }
            checked = true;
            mid_checks++;
        }
    }
    RL_CHECK_UINT(s.resizes, >, 10);
    RL_CHECK_UINT(s.evicted, ==, 0);
    RL_CHECK_UINT(mid_checks, >, 10);
    /* Inserts drive each move to its end within old_cap / 128 of them, at most. */
    RL_CHECK_UINT(mid, >, 0);
    RL_CHECK_UINT(mid, <=, s.resize_steps / INSERT_STEP + s.resizes);
    for (uint64_t id = 0; id < N; id++) {
        uint64_t hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        check_id(t, id, hi, lo, true);
    }
    /* Fingerprints of ids never inserted are not found. */
    for (uint64_t id = N; id < N + 100000; id++) {
        uint64_t hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        RL_CHECK(rl_keytab_find(t, hi, lo) == NULL);
    }
    uint64_t nkeys = N;
    for (unsigned op = 0; op < 2 * N; op++) {
        uint64_t id = splitmix(&seed) % N, hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        struct rl_keytab_entry *e = rl_keytab_find(t, hi, lo);
        RL_CHECK(present[id] == (e != NULL));
        if (e != NULL) {
            RL_CHECK_UINT(e->st.b, ==, id + 1);
            rl_keytab_delete(t, e);
            RL_CHECK_UINT(f.released[id], ==, 1);
            f.released[id] = 0;
            present[id] = 0;
            nkeys--;
        } else {
            insert_id(t, id, hi, lo, 0);
            present[id] = 1;
            nkeys++;
        }
    }
    RL_CHECK_UINT(keys_of(t), ==, nkeys);
    for (uint64_t id = 0; id < N; id++) {
        uint64_t hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        check_id(t, id, hi, lo, present[id]);
    }
    finish(t, &f, present);
    free(present);
    free(perm);
}
END_TEST

/* At the cap, the table stays within it, every insert evicts exactly one entry and
 * succeeds, and the victim is the sampled entry with the smallest full_at. */
START_TEST(test_cap_evicts)
{
    enum { N = 200000 };
    const uint64_t cap_bytes = 1 << 20;
    struct fake f;
    struct rl_keytab *t = fake_table(&f, N, cap_bytes);
    uint8_t *present = calloc(N, 1);
    uint64_t seed = 99;
    struct rl_keytab_stats s, before;
    uint64_t id = 0;
    /* Fill until the first eviction. While a resize runs, and for the few inserts that then
     * unmap what is left of the old arrays, both count: at most the cap twice. */
    for (uint64_t since_resize = 0;; id++) {
        uint64_t hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        rl_keytab_stats(t, &before);
        insert_id(t, id, hi, lo, 1000 + splitmix(&seed) % 1000000);
        present[id] = 1;
        rl_keytab_stats(t, &s);
        since_resize = s.resize_left > 0 ? 0 : since_resize + 1;
        RL_CHECK_UINT(s.bytes, <=, since_resize > 8 ? cap_bytes : 2 * cap_bytes);
        if (s.evicted > 0) {
            break;
        }
        RL_CHECK_UINT(s.keys, ==, id + 1);
    }
    RL_CHECK_INT(f.last_released, >=, 0);
    present[f.last_released] = 0;
    uint64_t full_keys = s.keys;
    uint64_t full_cap = s.capacity;
    RL_CHECK_UINT(full_keys, ==, before.keys);
    /* The cap holds 1 MiB / 33 B: over 30,000 slots, loaded to 7/8. */
    RL_CHECK_UINT(full_keys, >, 25000);
    RL_CHECK_UINT(full_keys * 8, <=, full_cap * 7);

    for (id = id + 1; id < N; id++) {
        uint64_t hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        f.nsampled = 0;
        uint64_t releases = f.releases;
        insert_id(t, id, hi, lo, 1000 + splitmix(&seed) % 1000000);
        present[id] = 1;
        rl_keytab_stats(t, &s);
        RL_CHECK_UINT(s.bytes, <=, cap_bytes);
        RL_CHECK_UINT(s.capacity, ==, full_cap);
        RL_CHECK_UINT(s.keys, ==, full_keys);
        RL_CHECK_UINT(s.evicted, ==, id + 1 - full_keys);
        RL_CHECK_UINT(f.releases, ==, releases + 1);
        /* The sample: 8 distinct entries present in the table before the insert. */
        RL_CHECK_UINT(f.nsampled, ==, 8);
        uint64_t best = UINT64_MAX;
        for (size_t k = 0; k < f.nsampled; k++) {
            RL_CHECK_INT(f.sampled_id[k], >=, 0);
            RL_CHECK_INT(f.sampled_id[k], <, (int64_t)id);
            RL_CHECK(present[f.sampled_id[k]]);
            for (size_t m = 0; m < k; m++) {
                RL_CHECK_INT(f.sampled_id[k], !=, f.sampled_id[m]);
            }
            if (f.sampled[k] < best) {
                best = f.sampled[k];
            }
        }
        int64_t victim = f.last_released;
        bool in_sample = false;
        for (size_t k = 0; k < f.nsampled; k++) {
            in_sample |= f.sampled_id[k] == victim;
        }
        RL_CHECK(in_sample);
        uint64_t vhi;
        uint32_t vlo;
        key_fp((uint64_t)victim, &vhi, &vlo);
        RL_CHECK(rl_keytab_find(t, vhi, vlo) == NULL);
        present[victim] = 0;
        /* The victim's full_at: the sample's smallest. */
        for (size_t k = 0; k < f.nsampled; k++) {
            if (f.sampled_id[k] == victim) {
                RL_CHECK_UINT(f.sampled[k], ==, best);
            }
        }
        check_id(t, id, hi, lo, true);
    }
    /* Exactly the model's keys are left. */
    uint64_t left = 0;
    for (uint64_t j = 0; j < N; j++) {
        uint64_t hi;
        uint32_t lo;
        key_fp(j, &hi, &lo);
        check_id(t, j, hi, lo, present[j]);
        left += present[j];
    }
    RL_CHECK_UINT(left, ==, full_keys);
    uint8_t *inserted = malloc(N);
    memset(inserted, 1, N);
    /* Evicted ids were released already, the rest will be by destroy. */
    for (uint64_t j = 0; j < N; j++) {
        if (!present[j]) {
            RL_CHECK_UINT(f.released[j], ==, 1);
        }
        f.released[j] = 0;
        inserted[j] = present[j];
    }
    finish(t, &f, inserted);
    free(inserted);
    free(present);
}
END_TEST

/* Eviction takes what will be full soonest: fill to the cap with half the keys about to be
 * full and half far from it, then insert far ones. Near keys stay above 39% of the table, so
 * a sample of 8 holds none under 2% of the time. */
START_TEST(test_cap_prefers_soonest)
{
    enum { N = 100000, MORE = 3000 };
    struct fake f;
    struct rl_keytab *t = fake_table(&f, N, 1 << 20);
    uint8_t *inserted = calloc(N, 1);
    uint8_t *near_of = calloc(N, 1);
    uint64_t far = 0, evictions = 0, more = 0;
    for (uint64_t id = 0; id < N && more < MORE; id++) {
        uint64_t hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        uint64_t before = f.releases;
        bool near = evictions == 0 && (id & 1);
        insert_id(t, id, hi, lo, near ? 5 : UINT64_C(1) << 40);
        inserted[id] = 1;
        near_of[id] = near;
        if (f.releases != before) {
            evictions++;
            more++;
            far += !near_of[f.last_released];
        }
    }
    RL_CHECK_UINT(evictions, ==, MORE);
    RL_CHECK_UINT(far * 20, <, evictions);
    for (uint64_t j = 0; j < N; j++) {
        if (f.released[j]) {
            f.released[j] = 0;
            inserted[j] = 0;
        }
    }
    finish(t, &f, inserted);
    free(inserted);
    free(near_of);
}
END_TEST

/* Repeated budgeted sweeps remove exactly the full entries. */
static void
sweep_case(bool clustered, size_t budget, uint64_t n)
{
    struct fake f;
    struct rl_keytab *t = fake_table(&f, n, UINT64_C(1) << 30);
    uint8_t *present = calloc(n, 1);
    uint8_t *inserted = calloc(n, 1);
    uint64_t *full_at = malloc(n * sizeof(*full_at));
    uint64_t seed = budget * 31 + n;
    const uint64_t now = 500;
    uint64_t want_full = 0;
    for (uint64_t id = 0; id < n; id++) {
        uint64_t hi;
        uint32_t lo;
        if (clustered) {
            clustered_fp(id, &hi, &lo);
        } else {
            key_fp(id, &hi, &lo);
        }
        full_at[id] = splitmix(&seed) % 1000;
        want_full += full_at[id] <= now;
        insert_id(t, id, hi, lo, full_at[id]);
        present[id] = inserted[id] = 1;
    }
    struct rl_keytab_stats s;
    rl_keytab_stats(t, &s);
    /* A sweep is told how many slots to look at; enough passes to cover the table a few
     * times over, re-examinations and shrinks included. */
    uint64_t gone = 0;
    size_t passes = (size_t)(4 * s.capacity / budget + 8);
    for (size_t p = 0; p < passes; p++) {
        uint64_t calls = f.is_full_calls;
        size_t k = rl_keytab_sweep(t, now, budget);
        /* Past the budget a sweep examines only the rest of the run it ended in. */
        RL_CHECK_UINT(f.is_full_calls - calls, <=, budget + s.capacity);
        gone += k;
        RL_CHECK_UINT(keys_of(t), ==, n - gone);
    }
    RL_CHECK_UINT(gone, ==, want_full);
    rl_keytab_stats(t, &s);
    RL_CHECK_UINT(s.expired, ==, want_full);
    RL_CHECK_UINT(f.releases, ==, want_full);
    for (uint64_t id = 0; id < n; id++) {
        uint64_t hi;
        uint32_t lo;
        if (clustered) {
            clustered_fp(id, &hi, &lo);
        } else {
            key_fp(id, &hi, &lo);
        }
        bool left = full_at[id] > now;
        check_id(t, id, hi, lo, left);
        RL_CHECK_UINT(f.released[id], ==, !left);
        if (!left) {
            f.released[id] = 0;
            inserted[id] = 0;
        }
    }
    /* Later sweeps at the same time find nothing more. */
    RL_CHECK_UINT(rl_keytab_sweep(t, now, 1 << 20), ==, 0);
    finish(t, &f, inserted);
    free(present);
    free(inserted);
    free(full_at);
}

START_TEST(test_sweep)
{
    static const size_t budgets[] = {1, 3, 16, 100, 4096};
    for (size_t b = 0; b < sizeof(budgets) / sizeof(budgets[0]); b++) {
        sweep_case(false, budgets[b], 20000);
        sweep_case(true, budgets[b], 3000);
    }
    sweep_case(false, 100000, 1000000);
}
END_TEST

/* A sweep that empties the table gives the memory back, once the keys have stayed few for
 * RL_KEYTAB_SHRINK_MS; the table then grows again. */
START_TEST(test_sweep_shrinks)
{
    enum { N = 100000 };
    const uint64_t later = UINT64_C(1) << 40;
    struct fake f;
    struct rl_keytab *t = fake_table(&f, 2 * N, UINT64_C(1) << 30);
    uint8_t *inserted = calloc(2 * N, 1);
    for (uint64_t id = 0; id < N; id++) {
        uint64_t hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        insert_id(t, id, hi, lo, id < N - 10 ? 1 : later);
        inserted[id] = 1;
    }
    struct rl_keytab_stats big, s;
    rl_keytab_stats(t, &big);
    /* 100 sweeps over 5 periods: none shrinks before the keys were few for a period. */
    for (uint64_t p = 0; p < 100; p++) {
        uint64_t now = 10 + p * RL_KEYTAB_SHRINK_MS / 20;
        rl_keytab_sweep(t, now, 10000);
        rl_keytab_stats(t, &s);
        if (now < 10 + RL_KEYTAB_SHRINK_MS) {
            RL_CHECK_UINT(s.shrinks, ==, 0);
        }
    }
    rl_keytab_stats(t, &s);
    RL_CHECK_UINT(s.keys, ==, 10);
    RL_CHECK_UINT(s.expired, ==, N - 10);
    RL_CHECK_UINT(s.capacity, <, 1000);
    RL_CHECK_UINT(s.bytes, <, big.bytes / 100);
    RL_CHECK_UINT(s.resizes, >, big.resizes);
    RL_CHECK_UINT(s.shrinks, >, 0);
    RL_CHECK_UINT(s.grows, ==, big.grows);
    for (uint64_t id = 0; id < 2 * N; id++) {
        uint64_t hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        check_id(t, id, hi, lo, id >= N - 10 && id < N);
        if (f.released[id]) {
            f.released[id] = 0;
            inserted[id] = 0;
        }
    }
    for (uint64_t id = N; id < 2 * N; id++) {
        uint64_t hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        insert_id(t, id, hi, lo, later);
        inserted[id] = 1;
    }
    RL_CHECK_UINT(keys_of(t), ==, N + 10);
    finish(t, &f, inserted);
    free(inserted);
}
END_TEST

/* Tests of incremental resizing. They read the table's progress from its stats: a resize
 * moves the old array's slots in slot order, so old slots [0, capacity_before -
 * resize_left) have been moved, and a key's home is its fingerprint through fastrange. */

static struct rl_keytab_stats
stats_of(const struct rl_keytab *t)
{
    struct rl_keytab_stats s;
    rl_keytab_stats(t, &s);
    return s;
}

/* A key's home slot in an array of cap slots (keytab.h: fastrange of fp_hi). */
static uint64_t
home_in(uint64_t hi, uint64_t cap)
{
    __extension__ typedef unsigned __int128 u128;
    return (uint64_t)(((u128)hi * cap) >> 64);
}

/* The smallest fp_hi whose home is `slot` of `cap` slots, plus 1 + k * 128: every k gives the
 * same tag (the low 7 bits), so finds must tell such keys apart by the entry. */
static uint64_t
hi_at(uint64_t slot, uint64_t cap, uint64_t k)
{
    __extension__ typedef unsigned __int128 u128;
    uint64_t base = (uint64_t)((((u128)slot << 64) + cap - 1) / cap);
    return base + 1 + k * 128;
}

static uint64_t
page_round(uint64_t n)
{
    return (n + 4095) / 4096 * 4096;
}

/* A max_bytes under which the largest array has cap slots, or up to one page of entries more
 * (127 slots). keytab.c: 33 bytes a slot plus 16 tag bytes, arrays of 64 KiB or more take
 * whole pages, plus the table's struct, which a new table (64 malloc'd slots) shows. */
static uint64_t
bytes_for_cap(uint64_t cap)
{
    struct fake f;
    struct rl_keytab *t = fake_table(&f, 1, 0);
    struct rl_keytab_stats s = stats_of(t);
    RL_CHECK_UINT(s.capacity, ==, 64);
    uint64_t overhead = s.bytes - (64 * 32 + 64 + 16);
    RL_CHECK_UINT(overhead, <, 4096);
    uint8_t none = 0;
    finish(t, &f, &none);
    return overhead + page_round(cap * 32) + page_round(cap + 16);
}

/* Takes the ids the table released since the log was last emptied out of the model: each
 * must have been present; returns how many. */
static size_t
drain_log(struct fake *f, uint8_t *present, uint64_t *nkeys)
{
    size_t n = f->nlog;
    RL_CHECK_UINT(f->log_lost, ==, 0);
    for (size_t k = 0; k < n; k++) {
        int64_t id = f->log[k];
        RL_CHECK(present[id]);
        RL_CHECK_UINT(f->released[id], ==, 1);
        f->released[id] = 0;
        present[id] = 0;
        (*nkeys)--;
    }
    f->nlog = 0;
    return n;
}

/* Every state of a key during one grow, slot by slot: keys in old slots not yet moved, moved,
 * deleted while in old, deleted after the move, and a run that wraps around the end of the
 * old array, whose moved front the finds of its unmoved start must walk past. */
START_TEST(test_resize_states)
{
    enum { N = 57, OLD = 64, NEW = 76 };
    struct fake f;
    struct rl_keytab *t = fake_table(&f, N + 2, 1 << 20);
    uint64_t hi[N + 2];
    uint32_t lo[N + 2];
    uint8_t present[N + 2] = {0};
    uint8_t deleted_in_old[N + 2] = {0};
    uint64_t nkeys = 0;
    /* Ids 0..11: home 63, all with one tag, so they fill slots 63 and 0..10. Ids 12..55:
     * homes 12..55, one a slot. That is 56 keys, the most 64 slots hold (7/8); id 56 makes
     * the table grow. Ids 57 and 58 are never inserted: home 63 (a miss that walks the whole
     * wrapped run) and home 11 (an empty slot). */
    for (uint64_t id = 0; id < N + 2; id++) {
        uint64_t slot = id < 12 ? 63 : id < 56 ? id : id == 56 ? 60 : id == 57 ? 63 : 11;
        hi[id] = hi_at(slot, OLD, id);
        lo[id] = (uint32_t)(id * 7919);
    }
    for (uint64_t id = 0; id < 56; id++) {
        insert_id(t, id, hi[id], lo[id], 1000);
        present[id] = 1;
        nkeys++;
    }
    struct rl_keytab_stats s = stats_of(t);
    RL_CHECK_UINT(s.capacity, ==, OLD);
    RL_CHECK_UINT(s.resize_left, ==, 0);
    insert_id(t, 56, hi[56], lo[56], 1000);
    present[56] = 1;
    nkeys++;
    s = stats_of(t);
    RL_CHECK_UINT(s.capacity, ==, NEW);
    RL_CHECK_UINT(s.resize_left, ==, OLD);
    RL_CHECK_UINT(s.keys, ==, nkeys);
    /* Both arrays count while the move runs. */
    RL_CHECK_UINT(s.bytes, >, (uint64_t)(OLD + NEW) * 33);

    /* A sweep of budget 1 moves one old slot (and, at 0, finds nothing full). */
    for (uint64_t moved = 1; moved <= OLD; moved++) {
        uint64_t calls = f.is_full_calls;
        uint64_t steps = s.resize_steps;
        RL_CHECK_UINT(rl_keytab_sweep(t, 0, 1), ==, 0);
        RL_CHECK_UINT(f.is_full_calls - calls, <=, 1);
        s = stats_of(t);
        RL_CHECK_UINT(s.resize_steps, ==, steps + 1);
        RL_CHECK_UINT(s.resize_left, ==, OLD - moved);
        RL_CHECK_UINT(s.capacity, ==, NEW);
        RL_CHECK_UINT(s.resizes, ==, 1);
        if (moved == 3) {
            /* Slots 0..2 (ids 1..3) have moved: id 2 is deleted from the new array; id 6
             * (slot 5) in the middle of the wrapped run and id 20 (slot 20) from the old. */
            static const uint64_t del[] = {2, 6, 20};
            for (size_t k = 0; k < 3; k++) {
                struct rl_keytab_entry *e = rl_keytab_find(t, hi[del[k]], lo[del[k]]);
                RL_CHECK(e != NULL);
                rl_keytab_delete(t, e);
                RL_CHECK_INT(f.last_released, ==, (int64_t)del[k]);
                present[del[k]] = 0;
                deleted_in_old[del[k]] = del[k] != 2;
                nkeys--;
            }
        }
        if (moved == 30) {
            /* Id 9 (slot 8) has moved, id 40 (slot 40) has not. */
            static const uint64_t del[] = {9, 40};
            for (size_t k = 0; k < 2; k++) {
                rl_keytab_delete(t, rl_keytab_find(t, hi[del[k]], lo[del[k]]));
                RL_CHECK_INT(f.last_released, ==, (int64_t)del[k]);
                present[del[k]] = 0;
                deleted_in_old[del[k]] = del[k] == 40;
                nkeys--;
            }
        }
        RL_CHECK_UINT(keys_of(t), ==, nkeys);
        for (uint64_t id = 0; id < N + 2; id++) {
            check_id(t, id, hi[id], lo[id], present[id]);
        }
    }
    RL_CHECK(deleted_in_old[6] && deleted_in_old[20] && deleted_in_old[40]);
    s = stats_of(t);
    RL_CHECK_UINT(s.resize_left, ==, 0);
    RL_CHECK_UINT(s.bytes, <, (uint64_t)(OLD + NEW) * 33);

    /* Deleted keys come back, in the new array. */
    static const uint64_t back[] = {2, 6, 20, 9, 40};
    uint8_t inserted[N + 2] = {0};
    for (size_t k = 0; k < 5; k++) {
        f.released[back[k]] = 0;
        insert_id(t, back[k], hi[back[k]], lo[back[k]], 1000);
        present[back[k]] = 1;
        nkeys++;
    }
    RL_CHECK_UINT(keys_of(t), ==, nkeys);
    for (uint64_t id = 0; id < N + 2; id++) {
        check_id(t, id, hi[id], lo[id], present[id]);
        inserted[id] = present[id];
    }
    finish(t, &f, inserted);
}
END_TEST

/* A grow to a max_cap just above the old capacity leaves room for a few dozen inserts: the
 * inserts after that evict, from both arrays, while the move goes on at its usual pace. */
START_TEST(test_evict_mid_resize)
{
    enum { N = 40000 };
    const uint64_t max_bytes = bytes_for_cap(17648);
    struct fake f;
    struct rl_keytab *t = fake_table(&f, N, max_bytes);
    uint8_t *present = calloc(N, 1);
    uint64_t *full_at = calloc(N, sizeof(*full_at));
    uint64_t *hi = malloc(N * sizeof(*hi));
    uint32_t *lo = malloc(N * sizeof(*lo));
    for (uint64_t id = 0; id < N; id++) {
        key_fp(id, &hi[id], &lo[id]);
    }
    uint64_t seed = 5, id = 0, nkeys = 0;
    struct rl_keytab_stats s = stats_of(t), b;
    /* Grow until the capped grow. */
    for (;; id++) {
        b = s;
        full_at[id] = 1000 + splitmix(&seed) % 1000000;
        insert_id(t, id, hi[id], lo[id], full_at[id]);
        present[id] = 1;
        nkeys++;
        s = stats_of(t);
        RL_CHECK_UINT(s.evicted, ==, 0);
        RL_CHECK_UINT(s.keys, ==, nkeys);
        if (s.resizes != b.resizes && s.capacity != b.capacity + b.capacity / 5) {
            break;
        }
    }
    const uint64_t cap = s.capacity, old_cap = b.capacity;
    RL_CHECK_UINT(cap, >, old_cap);
    RL_CHECK_UINT(cap - old_cap, <, 200);
    RL_CHECK_UINT(s.resize_left, ==, old_cap);

    uint64_t mid_evictions = 0, since_end = 0;
    for (id = id + 1; id < N && since_end < 1000; id++) {
        b = s;
        f.nsampled = 0;
        f.nlog = 0;
        full_at[id] = 1000 + splitmix(&seed) % 1000000;
        insert_id(t, id, hi[id], lo[id], full_at[id]);
        present[id] = 1;
        nkeys++;
        s = stats_of(t);
        RL_CHECK_UINT(s.capacity, ==, cap);
        RL_CHECK_UINT(s.resizes, ==, b.resizes);
        RL_CHECK_UINT(s.resize_steps - b.resize_steps, <=, INSERT_STEP);
        RL_CHECK_UINT(s.bytes, <=, 2 * max_bytes);
        since_end = s.resize_left == 0 ? since_end + 1 : 0;
        if (since_end > 8) {
            /* What was left of the old arrays has been unmapped by now. */
            RL_CHECK_UINT(s.bytes, <=, max_bytes);
        }
        if (s.evicted != b.evicted) {
            RL_CHECK_UINT(s.evicted, ==, b.evicted + 1);
            RL_CHECK_UINT(f.nlog, ==, 1);
            int64_t victim = f.log[0];
            RL_CHECK_INT(victim, !=, (int64_t)id);
            /* The sample: 8 distinct keys present before the insert; the victim, the one
             * full soonest. */
            RL_CHECK_UINT(f.nsampled, ==, 8);
            bool in_sample = false;
            for (size_t k = 0; k < 8; k++) {
                RL_CHECK(present[f.sampled_id[k]]);
                RL_CHECK_INT(f.sampled_id[k], !=, (int64_t)id);
                RL_CHECK_UINT(f.sampled[k], >=, full_at[victim]);
                for (size_t m = 0; m < k; m++) {
                    RL_CHECK_INT(f.sampled_id[k], !=, f.sampled_id[m]);
                }
                in_sample |= f.sampled_id[k] == victim;
            }
            RL_CHECK(in_sample);
            drain_log(&f, present, &nkeys);
            mid_evictions += b.resize_left > 0 && s.resize_left > 0;
        } else {
            RL_CHECK_UINT(f.nlog, ==, 0);
        }
        RL_CHECK_UINT(s.keys, ==, nkeys);
        if (s.resize_left > 0 && id % 16 == 0) {
            for (uint64_t j = 0; j <= id; j++) {
                check_id(t, j, hi[j], lo[j], present[j]);
            }
        }
    }
    RL_CHECK_UINT(since_end, ==, 1000);
    /* The move takes old_cap / 128 inserts, all but the first few dozen of them evict. */
    RL_CHECK_UINT(mid_evictions, >, old_cap / INSERT_STEP / 2);
    for (uint64_t j = 0; j < N; j++) {
        check_id(t, j, hi[j], lo[j], present[j]);
    }
    finish(t, &f, present);
    free(present);
    free(full_at);
    free(hi);
    free(lo);
}
END_TEST

/* A constant key set never resizes the table (rl_keytab_stats' grows and shrinks): its keys
 * go idle together, are all forgotten by the sweep and come back together, over and over,
 * each time within RL_KEYTAB_SHRINK_MS; then a tenth of them at a time expires and comes
 * back (churn). Only keys that stay away for the period let the table shrink. On a table
 * that shrank at the first sweep that saw a load under 1/4, each return cost a shrink and
 * one or more grows. */
START_TEST(test_constant_keys_no_resize)
{
    enum { N = 200000 };
    struct fake f;
    struct rl_keytab *t = fake_table(&f, N, UINT64_C(1) << 30);
    uint8_t *present = calloc(N, 1);
    uint64_t *hi = malloc(N * sizeof(*hi));
    uint32_t *lo = malloc(N * sizeof(*lo));
    uint64_t now = 1000, nkeys = 0, seed = 11;
    for (uint64_t id = 0; id < N; id++) {
        key_fp(id, &hi[id], &lo[id]);
        insert_id(t, id, hi[id], lo[id], now + 1);
        present[id] = 1;
        nkeys++;
    }
    /* The last grow's move ends (the keys are not full at now). */
    while (stats_of(t).resize_left > 0) {
        RL_CHECK_UINT(rl_keytab_sweep(t, now, 1 << 16), ==, 0);
    }
    const struct rl_keytab_stats s0 = stats_of(t);
    RL_CHECK_UINT(s0.keys, ==, N);
    RL_CHECK_UINT(s0.grows, >, 0);
    RL_CHECK_UINT(s0.shrinks, ==, 0);

    /* Idle and back, 12 times, a quarter of a period apart: 3 periods. */
    for (int round = 0; round < 12; round++) {
        now += RL_KEYTAB_SHRINK_MS / 4;
        for (int p = 0; p < 4 && nkeys > 0; p++) {
            rl_keytab_sweep(t, now, 1 << 20);
            drain_log(&f, present, &nkeys);
        }
        RL_CHECK_UINT(nkeys, ==, 0);
        RL_CHECK_UINT(keys_of(t), ==, 0);
        for (uint64_t id = 0; id < N; id++) {
            insert_id(t, id, hi[id], lo[id], now + 1);
            present[id] = 1;
            nkeys++;
        }
        struct rl_keytab_stats s = stats_of(t);
        RL_CHECK_UINT(s.grows, ==, s0.grows);
        RL_CHECK_UINT(s.shrinks, ==, 0);
        RL_CHECK_UINT(s.capacity, ==, s0.capacity);
        RL_CHECK_UINT(s.bytes, ==, s0.bytes);
    }
    /* Churn: each step a random tenth of the keys is full and forgotten, then used again. */
    for (int step = 0; step < 40; step++) {
        now += 2000;
        for (uint64_t id = 0; id < N; id++) {
            struct rl_keytab_entry *e = rl_keytab_find(t, hi[id], lo[id]);
            RL_CHECK(e != NULL);
            e->st.a = splitmix(&seed) % 10 == 0 ? now : now + 1000000;
        }
        for (int p = 0; p < 8; p++) {
            rl_keytab_sweep(t, now, 1 << 16);
        }
        RL_CHECK_UINT(drain_log(&f, present, &nkeys), >, N / 20);
        for (uint64_t id = 0; id < N; id++) {
            if (!present[id]) {
                insert_id(t, id, hi[id], lo[id], now + 1000000);
                present[id] = 1;
                nkeys++;
            }
        }
        RL_CHECK_UINT(keys_of(t), ==, N);
    }
    struct rl_keytab_stats s = stats_of(t);
    RL_CHECK_UINT(s.resizes, ==, s0.resizes);
    RL_CHECK_UINT(s.capacity, ==, s0.capacity);
    for (uint64_t id = 0; id < N; id++) {
        check_id(t, id, hi[id], lo[id], true);
    }

    /* Gone for good: sweeps over two periods give the memory back, in one shrink. */
    for (int p = 0; p < 20; p++) {
        now += RL_KEYTAB_SHRINK_MS / 8;
        for (uint64_t id = 0; p == 0 && id < N; id++) {
            rl_keytab_find(t, hi[id], lo[id])->st.a = now;
        }
        rl_keytab_sweep(t, now, 1 << 20);
        drain_log(&f, present, &nkeys);
    }
    s = stats_of(t);
    RL_CHECK_UINT(s.keys, ==, 0);
    RL_CHECK_UINT(s.shrinks, ==, 1);
    RL_CHECK_UINT(s.grows, ==, s0.grows);
    RL_CHECK_UINT(s.capacity, <, s0.capacity / 100);
    finish(t, &f, present);
    free(present);
    free(hi);
    free(lo);
}
END_TEST

/* A shrink leaves a small array; inserts that fill it before the move has reached the last
 * old keys make one insert move the rest at once, after which the table grows as usual. */
START_TEST(test_shrink_outrun)
{
    enum { N = 20000, SURV = 10, MORE = 200, ALL = N + SURV + MORE };
    struct fake f;
    struct rl_keytab *t = fake_table(&f, ALL, UINT64_C(1) << 30);
    uint8_t *present = calloc(ALL, 1);
    uint64_t *hi = malloc(ALL * sizeof(*hi));
    uint32_t *lo = malloc(ALL * sizeof(*lo));
    uint64_t nkeys = 0;
    for (uint64_t id = 0; id < ALL; id++) {
        key_fp(id, &hi[id], &lo[id]);
        if (id >= N && id < N + SURV) {
            /* Survivors at the end of the array (97.5% to 99.75% of it), not wrapped. */
            hi[id] = UINT64_MAX - (UINT64_MAX / 400) * (id - N + 1);
        }
    }
    const uint64_t later = UINT64_C(1) << 40;
    for (uint64_t id = 0; id < N + SURV; id++) {
        insert_id(t, id, hi[id], lo[id], id < N ? 1 : later);
        present[id] = 1;
        nkeys++;
    }
    struct rl_keytab_stats s = stats_of(t), b;
    RL_CHECK_UINT(s.resize_left, ==, 0);
    const uint64_t big = s.capacity;
    RL_CHECK_UINT(rl_keytab_sweep(t, 10, 1 << 20), ==, N);
    RL_CHECK_UINT(drain_log(&f, present, &nkeys), ==, N);
    /* The keys stay few: a period later the table still waits, two periods later it shrinks. */
    RL_CHECK_UINT(rl_keytab_sweep(t, 10 + RL_KEYTAB_SHRINK_MS, 1 << 20), ==, 0);
    RL_CHECK_UINT(stats_of(t).resizes, ==, s.resizes);
    RL_CHECK_UINT(rl_keytab_sweep(t, 10 + 2 * RL_KEYTAB_SHRINK_MS, 1 << 20), ==, 0);
    b = s;
    s = stats_of(t);
    RL_CHECK_UINT(s.keys, ==, SURV);
    RL_CHECK_UINT(s.resizes, ==, b.resizes + 1);
    RL_CHECK_UINT(s.capacity, ==, 64);
    RL_CHECK_UINT(s.resize_left, ==, big);

    uint64_t outrun = 0;
    for (uint64_t id = N + SURV; id < ALL; id++) {
        b = s;
        insert_id(t, id, hi[id], lo[id], later);
        present[id] = 1;
        nkeys++;
        s = stats_of(t);
        RL_CHECK_UINT(s.keys, ==, nkeys);
        RL_CHECK_UINT(f.nlog, ==, 0);
        if (b.keys < 56) {
            /* The 64-slot array holds 56: until then, steps as usual. */
            RL_CHECK_UINT(s.resize_steps - b.resize_steps, <=, INSERT_STEP);
            RL_CHECK_UINT(s.capacity, ==, 64);
            RL_CHECK_UINT(s.resize_left, >, 0);
        } else if (b.keys == 56) {
            RL_CHECK_UINT(s.resize_steps - b.resize_steps, >, INSERT_STEP);
            RL_CHECK_UINT(s.resize_steps - b.resize_steps, <=, b.resize_left);
            RL_CHECK_UINT(s.resizes, ==, b.resizes + 1);
            RL_CHECK_UINT(s.capacity, ==, 76);
            RL_CHECK_UINT(s.resize_left, ==, 64);
            outrun++;
        }
        for (uint64_t j = N; j < ALL; j++) {
            check_id(t, j, hi[j], lo[j], present[j]);
        }
    }
    RL_CHECK_UINT(outrun, ==, 1);
    for (uint64_t j = 0; j < ALL; j++) {
        check_id(t, j, hi[j], lo[j], present[j]);
    }
    RL_CHECK_UINT(f.log_lost, ==, 0);
    finish(t, &f, present);
    free(present);
    free(hi);
    free(lo);
}
END_TEST

/* Random finds, inserts, deletes and sweeps against the model while grows and shrinks are
 * under way: keys in every state of a move, evictions from both arrays under a cap just
 * above a grow step, expiry, clustered runs that wrap around the end. */
START_TEST(test_random_resizing)
{
    enum { N = 36000, OPS = 1600000 };
    const uint64_t max_bytes = bytes_for_cap(17648);
    struct fake f;
    struct rl_keytab *t = fake_table(&f, N, max_bytes);
    uint8_t *present = calloc(N, 1);
    uint64_t *full_at = calloc(N, sizeof(*full_at));
    uint64_t *epoch = calloc(N, sizeof(*epoch));         /* resizes when last inserted */
    uint64_t *del_epoch = calloc(N, sizeof(*del_epoch)); /* resizes + 1 if deleted in old */
    uint64_t *hi = malloc(N * sizeof(*hi));
    uint32_t *lo = malloc(N * sizeof(*lo));
    for (uint64_t id = 0; id < N; id++) {
        if (id % 8 == 0) {
            clustered_fp(id, &hi[id], &lo[id]);
        } else {
            key_fp(id, &hi[id], &lo[id]);
        }
    }
    /* Per phase: insert and delete odds (%), and how long a key lives. Two rounds of: fill
     * past the cap, churn at the cap, empty (shrinks), fill again. */
    static const struct {
        unsigned ins, del;
        uint64_t ttl;
    } phases[4] = {{70, 10, 1000000000}, {70, 20, 400000}, {15, 85, 2000}, {70, 20, 50000}};
    static const size_t budgets[] = {1, 16, 256, 3000};
    uint64_t seed = 2024, nkeys = 0, old_cap = 0;
    uint64_t grows = 0, shrinks = 0, outruns = 0, ops_mid = 0, evictions_mid = 0;
    uint64_t sweeps_mid = 0, deletes_old = 0, deletes_new = 0, finds_unmoved = 0;
    uint64_t finds_moved = 0, finds_deleted_old = 0;
    struct rl_keytab_stats s = stats_of(t), b;
    for (uint64_t op = 0; op < OPS; op++) {
        const uint64_t now = op;
        unsigned ph = (unsigned)(op * 8 / OPS) % 4;
        uint64_t into = op % (OPS / 8);
        uint64_t span = ph == 0   ? 200 + into * (N - 200) / (OPS / 8)
                        : ph == 3 ? N / 8 + into * (N - N / 8) / (OPS / 8)
                                  : N;
        uint64_t id = splitmix(&seed) % span;
        unsigned r = (unsigned)(splitmix(&seed) % 100);
        b = s;
        bool mid = b.resize_left > 0;
        ops_mid += mid;

        /* Where the key should be, for the counts: a key placed before this resize began
         * whose home is well past the moved slots has not moved; well before them, has. Runs
         * of plain keys are short, so 64 slots of margin make this near certain; clustered
         * keys are left out. */
        int where = 0; /* 1: not moved yet, 2: moved */
        if (mid && id % 8 != 0 && present[id] && epoch[id] < b.resizes) {
            uint64_t moved = old_cap - b.resize_left;
            uint64_t h = home_in(hi[id], old_cap);
            where = h >= moved + 64 && h + 64 < old_cap ? 1 : h + 64 < moved ? 2 : 0;
        }
        check_id(t, id, hi[id], lo[id], present[id]);
        finds_unmoved += where == 1;
        finds_moved += where == 2;
        finds_deleted_old += mid && !present[id] && del_epoch[id] == b.resizes + 1;

        bool swept = false;
        if (present[id] && r < phases[ph].del) {
            rl_keytab_delete(t, rl_keytab_find(t, hi[id], lo[id]));
            RL_CHECK_UINT(f.nlog, ==, 1);
            RL_CHECK_INT(f.log[0], ==, (int64_t)id);
            drain_log(&f, present, &nkeys);
            deletes_old += where == 1;
            deletes_new += mid && where != 1;
            del_epoch[id] = where == 1 ? b.resizes + 1 : 0;
            if (where == 1) {
                /* Gone from the old array, which still holds its slot (a delete moves
                 * nothing there). */
                check_id(t, id, hi[id], lo[id], false);
                finds_deleted_old++;
            }
        } else if (!present[id] && r < phases[ph].ins) {
            full_at[id] = now + 1 + splitmix(&seed) % phases[ph].ttl;
            insert_id(t, id, hi[id], lo[id], full_at[id]);
            present[id] = 1;
            nkeys++;
            epoch[id] = stats_of(t).resizes;
            /* An eviction, if any: another key, present until now. */
            RL_CHECK_UINT(f.nlog, <=, 1);
            if (f.nlog == 1) {
                RL_CHECK_INT(f.log[0], !=, (int64_t)id);
                evictions_mid += mid && stats_of(t).resize_left > 0;
                drain_log(&f, present, &nkeys);
            }
        } else if (op % 13 == 0) {
            size_t budget = budgets[splitmix(&seed) % 4];
            uint64_t calls = f.is_full_calls;
            size_t n = rl_keytab_sweep(t, now, budget);
            /* Past the budget a sweep examines only the rest of the run it ended in. */
            RL_CHECK_UINT(f.is_full_calls - calls, <=, budget + stats_of(t).capacity);
            RL_CHECK_UINT(f.nlog, ==, n);
            for (size_t k = 0; k < f.nlog; k++) {
                RL_CHECK_UINT(full_at[f.log[k]], <=, now);
            }
            drain_log(&f, present, &nkeys);
            sweeps_mid += mid && n > 0;
            swept = true;
        }

        s = stats_of(t);
        RL_CHECK_UINT(s.keys, ==, nkeys);
        RL_CHECK_UINT(s.bytes, <=, 2 * max_bytes);
        uint64_t steps = s.resize_steps - b.resize_steps;
        if (!swept && steps > INSERT_STEP) {
            /* Only an insert that fills the array of a shrink before its move ends: it
             * moves the rest, then grows. */
            RL_CHECK_UINT(s.resizes, ==, b.resizes + 1);
            RL_CHECK_UINT(s.capacity, >, b.capacity);
            RL_CHECK_UINT(steps, <=, b.resize_left);
            outruns++;
        }
        if (s.resizes != b.resizes) {
            RL_CHECK_UINT(s.resizes, ==, b.resizes + 1);
            grows += s.capacity > b.capacity;
            shrinks += s.capacity < b.capacity;
            old_cap = b.capacity;
        }
        if (op % 4000 == 0 || (s.resize_left > 0 && op % 300 == 0)) {
            for (uint64_t j = 0; j < N; j++) {
                check_id(t, j, hi[j], lo[j], present[j]);
            }
        }
    }
    for (uint64_t j = 0; j < N; j++) {
        check_id(t, j, hi[j], lo[j], present[j]);
    }
    RL_CHECK_UINT(grows, >, 10);
    RL_CHECK_UINT(shrinks, >, 0);
    RL_CHECK_UINT(ops_mid, >, 1000);
    RL_CHECK_UINT(evictions_mid, >, 0);
    RL_CHECK_UINT(sweeps_mid, >, 0);
    RL_CHECK_UINT(deletes_old, >, 0);
    RL_CHECK_UINT(deletes_new, >, 0);
    RL_CHECK_UINT(finds_unmoved, >, 0);
    RL_CHECK_UINT(finds_moved, >, 0);
    RL_CHECK_UINT(finds_deleted_old, >, 0);
    (void)outruns;
    finish(t, &f, present);
    free(present);
    free(full_at);
    free(epoch);
    free(del_epoch);
    free(hi);
    free(lo);
}
END_TEST

/* How much work the sweeps of a table did (keytab.c: slots visited, hole searches, hole-list
 * upkeep); not in keytab.h, for tests only. */
uint64_t rl_keytab_sweep_work(const struct rl_keytab *t);

/* Regression: a sweep that forgets most of one very long run must not search its holes
 * linearly. All keys have their homes in 1/8 of the array, so they form one run of tens of
 * thousands of slots; 3 in 4 are full. The sweep used to scan the list of holes from the
 * oldest for every entry left after them (and memmove it), ~10^9 steps for this table, which
 * stalled the node for seconds; now each pass costs a few steps per slot it visits, and a
 * pass visits its budget plus at most the rest of the run. Counts work, not time. */
START_TEST(test_sweep_long_run_work)
{
    enum { N = 60000 };
    struct fake f;
    struct rl_keytab *t = fake_table(&f, N, UINT64_C(1) << 30);
    uint64_t seed = 7;
    const uint64_t now = 100;
    uint64_t want_full = 0;
    for (uint64_t id = 0; id < N; id++) {
        uint64_t hi = (UINT64_C(1) << 62) + (splitmix(&seed) >> 3);
        hi = (hi & ~UINT64_C(0xffff)) | (id & 0xffff);
        uint32_t lo = (uint32_t)(id >> 16);
        bool full = id % 4 != 0;
        want_full += full;
        insert_id(t, id, hi, lo, full ? now : now + 1);
    }
    struct rl_keytab_stats s;
    rl_keytab_stats(t, &s);
    /* Let a grow end first, so the passes below only sweep. */
    while (s.resize_left > 0) {
        rl_keytab_sweep(t, 0, 1 << 20);
        rl_keytab_stats(t, &s);
    }
    const size_t budgets[] = {4096, 1 << 20};
    uint64_t gone = 0;
    for (size_t b = 0; b < 2; b++) {
        for (size_t pass = 0; pass < 4 * s.capacity / budgets[b] + 2; pass++) {
            rl_keytab_stats(t, &s);
            uint64_t w = rl_keytab_sweep_work(t);
            gone += rl_keytab_sweep(t, now, budgets[b]);
            uint64_t visited_max = 2 * s.capacity + budgets[b];
            RL_CHECK_UINT(rl_keytab_sweep_work(t) - w, <=, 48 * visited_max);
        }
    }
    RL_CHECK_UINT(gone, ==, want_full);
    RL_CHECK_UINT(keys_of(t), ==, N - want_full);
    seed = 7;
    for (uint64_t id = 0; id < N; id++) {
        uint64_t hi = (UINT64_C(1) << 62) + (splitmix(&seed) >> 3);
        hi = (hi & ~UINT64_C(0xffff)) | (id & 0xffff);
        check_id(t, id, hi, (uint32_t)(id >> 16), id % 4 == 0);
    }
    rl_keytab_destroy(t);
    free(f.released);
    free(f.log);
}
END_TEST

/* Inserts key id *next (full at 100, so a sweep at 200 would forget it) with the fingerprint
 * fp gives, marks it inserted and moves *next on. */
static void
insert_next(struct rl_keytab *t, uint64_t *next, uint8_t *inserted, size_t nids,
            void (*fp)(uint64_t id, uint64_t *hi, uint32_t *lo))
{
    uint64_t hi;
    uint32_t lo;

    ck_assert_uint_lt(*next, nids);
    fp(*next, &hi, &lo);
    insert_id(t, *next, hi, lo, 100);
    inserted[(*next)++] = 1;
}

/* The visits of a scan: per key id, how many times visited (ids of keys inserted during it
 * too). */
struct scan_seen {
    uint8_t *visits;
    size_t nids;
    size_t total;
};

static void
scan_visit(void *arg, struct rl_keytab_entry *e)
{
    struct scan_seen *x = arg;
    uint64_t id = e->st.b - 1;

    RL_CHECK_UINT(e->st.b, !=, 0);
    RL_CHECK_UINT(id, <, x->nids);
    x->visits[id]++;
    x->total++;
}

static bool
keep_all(void *arg, struct rl_keytab_entry *e)
{
    (void)arg;
    (void)e;
    return true;
}

/*
 * A scan a slice at a time visits every key present at its begin exactly once, unless it is
 * deleted before its visit, whatever happens between its steps: inserts (which may start a
 * grow), sweeps (which forget nothing while it is open), deletes (which keep it open when
 * their backward shift stays on one side of its cursor, else visit the rest first), an
 * eviction at the cap (of a victim whose removal keeps it open) or a remap (which visits the
 * rest first). Keys in long runs that wrap around the array's end, where a backward shift
 * would carry an unvisited entry behind the cursor, or a visited one ahead of it.
 */
START_TEST(test_scan_slices)
{
    enum { N0 = 20000, NIDS = 80000 };

    for (int variant = 0; variant < 7; variant++) {
        struct fake f;
        /* variant 3: a cap that the inserts reach, so one evicts */
        uint64_t cap = variant == 3 ? 800u << 10 : UINT64_C(1) << 30;
        struct rl_keytab *t = fake_table(&f, NIDS, cap);
        struct scan_seen x = {calloc(NIDS, 1), NIDS, 0};
        uint8_t *inserted = calloc(NIDS, 1);
        uint64_t next = N0, rng = 99 + (uint64_t)variant;
        size_t steps = 0, at_begin, kept = 0, ended = 0;
        bool done = false;
        struct rl_keytab_stats st0, st;

        RL_CHECK(x.visits != NULL && inserted != NULL);
        for (uint64_t id = 0; id < N0; id++) {
            uint64_t hi;
            uint32_t lo;

            clustered_fp(id, &hi, &lo);
            insert_id(t, id, hi, lo, 100); /* full at 100: a sweep at 200 would forget it */
            inserted[id] = 1;
        }
        if (variant >= 5) {
            /* variants 5 and 6: the scan begins while a grow moves the table */
            for (rl_keytab_stats(t, &st0); st0.resize_left == 0; rl_keytab_stats(t, &st0)) {
                insert_next(t, &next, inserted, NIDS, clustered_fp);
            }
        }
        at_begin = keys_of(t);
        rl_keytab_stats(t, &st0);
        rl_keytab_scan_begin(t, scan_visit, &x);
        ck_assert(rl_keytab_scanning(t));
        if (variant == 3) {
            f.present = inserted; /* ids < N0: all present at the begin, and only them */
            f.visits = x.visits;
        }
        while (!done) {
            done = rl_keytab_scan_step(t, 97);
            steps++;
            if (done) {
                break;
            }
            /* Between two steps, what a loop's turn may bring. */
            for (int k = 0; k < (variant == 0 ? steps % 10 == 0 : 20) && next < NIDS; k++) {
                insert_next(t, &next, inserted, NIDS, clustered_fp);
            }
            if (rl_keytab_scanning(t)) { /* (an insert's grow may have ended it) */
                ck_assert_uint_eq(rl_keytab_sweep(t, 200, 4096), 0);
            }
            if (variant == 3 && rl_keytab_scanning(t)) {
                /* at the cap the inserts evict keys the scan has visited, or wait: the load
                 * never passes 15/16 with the scan open (clustered keys' long runs leave few
                 * such victims: it may reach it, and the next insert reads the rest) */
                rl_keytab_stats(t, &st);
                ck_assert_uint_le(st.keys, st.capacity - st.capacity / 16);
            }
            if (variant == 5 && steps == 1) {
                /* the grow ends first, a step's budget of old slots at a time: no visit yet */
                rl_keytab_stats(t, &st);
                ck_assert_uint_gt(st.resize_left, 0);
                ck_assert_uint_eq(x.total, 0);
            }
            if (variant == 6 && steps == 1) {
                /* a delete while the grow of the begin still runs (the key most likely in the
                 * old array): nothing is visited yet, so the scan stays open and the key goes
                 * unvisited */
                uint64_t id = splitmix(&rng) % N0, hi;
                uint32_t lo;
                struct rl_keytab_entry *e;

                clustered_fp(id, &hi, &lo);
                e = rl_keytab_find(t, hi, lo);
                ck_assert_ptr_nonnull(e);
                rl_keytab_delete(t, e);
                ck_assert(rl_keytab_scanning(t));
                ck_assert_uint_eq(f.released[id], 1);
                ck_assert_uint_eq(x.total, 0);
            }
            for (int k = 0; variant == 1 && steps >= 40 && k < 5 && rl_keytab_scanning(t); k++) {
                /* deletes of keys before, at and past the cursor: one whose shift stays on
                 * a side of it keeps the scan open (the key visited or not, as it was); one
                 * whose shift would cross it, or wrap past the array's end, visits the rest
                 * first (moving nothing), then the key goes */
                uint64_t id = splitmix(&rng) % N0, hi;
                uint32_t lo;
                uint8_t before = x.visits[id];
                struct rl_keytab_entry *e;

                if (f.released[id] != 0) {
                    continue;
                }
                clustered_fp(id, &hi, &lo);
                e = rl_keytab_find(t, hi, lo);
                ck_assert_ptr_nonnull(e);
                rl_keytab_delete(t, e);
                ck_assert_uint_eq(f.released[id], 1);
                if (rl_keytab_scanning(t)) {
                    ck_assert_uint_eq(x.visits[id], before);
                    kept++;
                } else {
                    ck_assert_uint_eq(x.visits[id], 1);
                    ended++;
                }
            }
            if (variant == 2) {
                /* inserts until a grow starts: it visits the rest first */
                while (rl_keytab_scanning(t) && next < NIDS) {
                    insert_next(t, &next, inserted, NIDS, clustered_fp);
                }
            }
            if (variant == 4 && steps == 40) {
                ck_assert_uint_eq(rl_keytab_remap(t, keep_all, NULL), 0);
                ck_assert(!rl_keytab_scanning(t));
            }
        }
        for (uint64_t id = 0; id < N0; id++) {
            /* a key deleted or evicted during the scan: at most once, else exactly once */
            if (f.released[id] != 0) {
                RL_CHECK_UINT(x.visits[id], <=, 1);
            } else {
                RL_CHECK_UINT(x.visits[id], ==, 1);
            }
        }
        for (uint64_t id = N0; id < NIDS; id++) {
            RL_CHECK_UINT(x.visits[id], <=, 1);
        }
        if (variant != 1 && variant != 3 && variant != 6) {
            ck_assert_uint_ge(x.total, at_begin);
        }
        if (variant == 1) {
            /* both ways came: deletes that kept the scan open, then one that ended it */
            ck_assert_uint_gt(kept, 0);
            ck_assert_uint_eq(ended, 1);
        }
        if (variant == 0) {
            /* a slice at a time: as many steps as slices of 97 (no grow came) */
            rl_keytab_stats(t, &st);
            ck_assert_uint_eq(st.capacity, st0.capacity);
            ck_assert_uint_eq(steps, (st0.capacity + 96) / 97);
            ck_assert_uint_eq(keys_of(t), next); /* nothing forgotten meanwhile */
        }
        if (variant == 3) {
            size_t before = keys_of(t);

            /* no key present at the begin was evicted before the scan visited it */
            ck_assert_uint_gt(f.releases, 0);
            ck_assert_uint_eq(f.lost, 0);
            f.present = NULL;
            /* after it, each insert takes a key out, two while the load is past 7/8 */
            for (int k = 0; k < 100 && next < NIDS; k++) {
                insert_next(t, &next, inserted, NIDS, clustered_fp);
            }
            ck_assert_uint_le(keys_of(t), before);
        }
        ck_assert_uint_gt(steps, 1);
        /* Once it is closed, the sweep forgets again. */
        ck_assert_uint_gt(rl_keytab_sweep(t, 200, SIZE_MAX), 0);
        free(x.visits);
        for (uint64_t id = 0; id < NIDS; id++) {
            if (inserted[id] && f.released[id] == 0) {
                uint64_t hi;
                uint32_t lo;

                clustered_fp(id, &hi, &lo);
                check_id(t, id, hi, lo, true);
            }
        }
        finish(t, &f, inserted);
        free(inserted);
    }
}
END_TEST

/*
 * The edges of a delete during a scan, in a table of 64 slots whose homes are chosen
 * (fastrange: the top 6 bits of fp_hi): a run that reaches exactly one slot past the cursor
 * (its shift would carry the unvisited entry at the cursor behind it), and a run that wraps
 * past the array's end (its shift would carry a visited entry at slot 0 to the end, ahead
 * of the cursor). Each must visit the rest first; a run that ends at the cursor, or one wholly
 * past it that does not wrap, keeps the scan open. Every other key is visited exactly once.
 */
START_TEST(test_scan_keeps_edges)
{
    /* slot -> home, for the keys of each case; the cursor (scan_next) after a step of
     * `cursor` slots, the slot whose key is deleted, and whether the scan stays open */
    static const struct {
        int homes[6];
        int n;
        size_t cursor;
        int del;
        bool keeps;
    } cases[] = {
        {{10, 10, 10}, 3, 12, 10, false},     /* 10..12, slot 13 empty: one past the cursor */
        {{10, 10, 10}, 3, 13, 10, true},      /* the empty slot is the cursor: all visited */
        {{10, 10, 10}, 3, 9, 10, true},       /* wholly past the cursor */
        {{62, 62, 62, 62}, 4, 30, 62, false}, /* 62, 63, 0, 1: wraps past the end */
        {{60, 60, 60}, 3, 30, 60, true},      /* 60..62, slot 63 empty: no wrap */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct fake f;
        struct rl_keytab *t = fake_table(&f, 64, UINT64_C(1) << 30);
        struct scan_seen x = {calloc(64, 1), 64, 0};
        uint8_t inserted[64] = {0};
        struct rl_keytab_stats st;
        int del_id = -1;

        RL_CHECK(x.visits != NULL);
        rl_keytab_stats(t, &st);
        ck_assert_uint_eq(st.capacity, 64);
        for (int k = 0; k < cases[c].n; k++) {
            uint64_t hi = (uint64_t)cases[c].homes[k] << 58 | (uint64_t)(k + 1) << 8 | 0x5a;

            insert_id(t, (uint64_t)k, hi, 0, 100);
            inserted[k] = 1;
        }
        /* a key far from the runs, so the scan has something after them too */
        insert_id(t, 40, (uint64_t)40 << 58 | 0x77, 0, 100);
        inserted[40] = 1;
        rl_keytab_scan_begin(t, scan_visit, &x);
        ck_assert(!rl_keytab_scan_step(t, cases[c].cursor));
        for (int k = 0; k < cases[c].n; k++) {
            uint64_t hi = (uint64_t)cases[c].homes[k] << 58 | (uint64_t)(k + 1) << 8 | 0x5a;
            struct rl_keytab_entry *e = rl_keytab_find(t, hi, 0);

            ck_assert_ptr_nonnull(e);
            if (cases[c].homes[k] + k - (cases[c].homes[k] + k >= 64 ? 64 : 0) == cases[c].del) {
                del_id = k;
                rl_keytab_delete(t, e);
                break;
            }
        }
        ck_assert_int_ge(del_id, 0);
        ck_assert_msg(rl_keytab_scanning(t) == cases[c].keeps, "case %zu", c);
        while (!rl_keytab_scan_step(t, 7)) {
        }
        for (int id = 0; id < 64; id++) {
            if (id == del_id) {
                RL_CHECK_UINT(x.visits[id], <=, 1);
            } else {
                RL_CHECK_UINT(x.visits[id], ==, inserted[id]);
            }
        }
        free(x.visits);
        finish(t, &f, inserted);
    }
}
END_TEST

/*
 * Passes back to back at the memory cap while new keys keep coming (a node at its cap
 * draining): each insert evicts a key the pass has visited whose removal keeps it open, or
 * waits (early in a pass there are few), so no key present at a pass's begin is evicted
 * before its visit (a move's batch loses nothing), every one is visited exactly once, the
 * load never reaches 15/16 and no pass ends at once. Keys as the limiter makes them (runs
 * as long as a load of 7/8 gives: a victim whose run reaches past the cursor is rare, and
 * another is sampled; clustered keys, whose runs are all long, may end a pass at once).
 */
START_TEST(test_scan_at_cap)
{
    enum { NIDS = 120000, PASSES = 4 };
    struct fake f;
    struct rl_keytab *t = fake_table(&f, NIDS, 800u << 10);
    uint8_t *inserted = calloc(NIDS, 1), *present = calloc(NIDS, 1);
    uint64_t next = 0;
    size_t most = 0;
    struct rl_keytab_stats st;

    RL_CHECK(inserted != NULL && present != NULL);
    /* fill up to the cap: the first eviction says it is reached */
    while (f.releases == 0) {
        insert_next(t, &next, inserted, NIDS, key_fp);
    }
    rl_keytab_stats(t, &st);
    const size_t cap = st.capacity, max_keys = cap - (cap + 7) / 8;
    for (int pass = 0; pass < PASSES; pass++) {
        struct scan_seen x = {calloc(NIDS, 1), NIDS, 0};
        uint64_t releases0 = f.releases;
        size_t steps = 0;

        RL_CHECK(x.visits != NULL);
        memset(present, 0, NIDS);
        for (uint64_t id = 0; id < next; id++) {
            present[id] = inserted[id] && f.released[id] == 0;
        }
        f.present = present;
        f.visits = x.visits;
        f.lost = 0;
        rl_keytab_scan_begin(t, scan_visit, &x);
        for (bool done = false; !done;) {
            done = rl_keytab_scan_step(t, 97);
            steps++;
            for (int k = 0; !done && k < 20; k++) {
                insert_next(t, &next, inserted, NIDS, key_fp);
                ck_assert(rl_keytab_scanning(t)); /* never finished at once */
                rl_keytab_stats(t, &st);
                ck_assert_uint_eq(st.capacity, cap);
                ck_assert_uint_lt(st.keys, cap - cap / 16);
                most = st.keys > most ? st.keys : most;
            }
        }
        ck_assert_uint_eq(steps, (cap + 96) / 97);
        ck_assert_uint_gt(f.releases, releases0);
        ck_assert_uint_eq(f.lost, 0);
        for (uint64_t id = 0; id < next; id++) {
            if (present[id]) {
                RL_CHECK_UINT(x.visits[id], ==, 1);
            } else {
                RL_CHECK_UINT(x.visits[id], <=, 1);
            }
        }
        f.present = NULL;
        free(x.visits);
    }
    /* the load climbed past 7/8 early in the passes, and came back */
    ck_assert_uint_gt(most, max_keys);
    rl_keytab_stats(t, &st);
    ck_assert_uint_le(st.keys, max_keys + 2);
    finish(t, &f, inserted);
    free(inserted);
    free(present);
}
END_TEST

/* A fingerprint whose home is slot h of an array of cap slots (fastrange). */
static uint64_t
fp_at_home(size_t h, size_t cap)
{
    __extension__ typedef unsigned __int128 u128;

    return (uint64_t)((((u128)h << 64) + cap - 1) / cap) + 0x35;
}

/*
 * An eviction during a scan takes only a key the scan has visited whose removal keeps it
 * open, and no worse a class than the best it saw; with none, the insert waits (the load
 * climbs) up to 15/16, where the rest of the scan is read at once and the best key seen goes.
 * A table at its cap, one run of keys over slots 4.., the scan's next slot in its middle: the
 * keys before it, visited, would shift a visited key across it (and are back at full
 * allowance, class 0); those after it are not visited yet (in force, class 2). So the inserts
 * evict nothing until the load reaches 15/16; then a key of class 0 goes, after every key
 * was visited exactly once.
 */
START_TEST(test_scan_eviction_waits)
{
    enum { NIDS = 4096 };
    struct fake f;
    struct rl_keytab *t = fake_table(&f, NIDS, 16u << 10);
    struct scan_seen x = {calloc(NIDS, 1), NIDS, 0};
    uint8_t *inserted = calloc(NIDS, 1);
    struct rl_keytab_stats st;
    size_t cap, max_keys, cursor, wall, keys;
    uint64_t next = NIDS / 2;

    RL_CHECK(x.visits != NULL && inserted != NULL);
    /* the table's cap: where the first eviction comes */
    for (uint64_t id = 0; f.releases == 0; id++) {
        uint64_t hi;
        uint32_t lo;

        ck_assert_uint_lt(id, NIDS);
        key_fp(id, &hi, &lo);
        insert_id(t, id, hi, lo, 100);
    }
    rl_keytab_stats(t, &st);
    cap = st.capacity;
    max_keys = cap - (cap + 7) / 8;
    wall = cap - cap / 16;
    cursor = 4 + max_keys / 2;
    rl_keytab_destroy(t);
    free(f.released);
    free(f.log);
    t = fake_table(&f, NIDS, 16u << 10);
    for (uint64_t j = 0; j < max_keys; j++) {
        insert_id(t, j, fp_at_home(4 + j, cap), 0,
                  4 + j < cursor ? 100 : (UINT64_C(2) << RL_KEYTAB_CLASS_SHIFT) + 100);
        inserted[j] = 1;
    }
    for (rl_keytab_stats(t, &st); st.resize_left > 0; rl_keytab_stats(t, &st)) {
        rl_keytab_sweep(t, 0, 4096); /* a grow that still runs ends; nothing is full at 0 */
    }
    ck_assert_uint_eq(st.capacity, cap);
    ck_assert_uint_eq(f.releases, 0);
    rl_keytab_scan_begin(t, scan_visit, &x);
    ck_assert(!rl_keytab_scan_step(t, cursor));
    /* new keys in the free slots at the array's end and start, in force too */
    for (keys = max_keys; f.releases == 0; keys++) {
        ck_assert(rl_keytab_scanning(t));
        ck_assert_uint_le(keys, wall);
        ck_assert_uint_lt(next, NIDS);
        insert_id(t, next, fp_at_home(cap - 1, cap) + next, 0,
                  (UINT64_C(2) << RL_KEYTAB_CLASS_SHIFT) + 100);
        inserted[next++] = 1;
    }
    /* the insert at the wall read the rest and evicted two keys (the load is past 7/8), both
     * back at full allowance */
    ck_assert_uint_eq(keys, wall + 1);
    ck_assert_uint_eq(f.releases, 2);
    ck_assert_uint_eq(f.nlog, 2);
    ck_assert_int_lt(f.log[0], (int64_t)(cursor - 4));
    ck_assert_int_lt(f.log[1], (int64_t)(cursor - 4));
    ck_assert(!rl_keytab_scanning(t));
    for (uint64_t id = 0; id < max_keys; id++) {
        RL_CHECK_UINT(x.visits[id], ==, 1);
    }
    free(x.visits);
    finish(t, &f, inserted);
    free(inserted);
}
END_TEST

/* One case per test, so CK_RUN_CASE=name runs one. */
static void
add_case(Suite *s, const char *name, const TTest *test)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test);
    suite_add_tcase(s, tc);
}

static Suite *
keytab_suite(void)
{
    Suite *s = suite_create("keytab");
    add_case(s, "fingerprint", test_fingerprint);
    add_case(s, "empty", test_empty);
    add_case(s, "wrap_delete", test_wrap_delete);
    add_case(s, "random_clustered", test_random_clustered);
    add_case(s, "random_clustered_keyed", test_random_clustered_keyed);
    add_case(s, "keyed_placement_spreads_crafted_keys", test_keyed_placement_spreads_crafted_keys);
    add_case(s, "million", test_million);
    add_case(s, "cap_evicts", test_cap_evicts);
    add_case(s, "cap_prefers_soonest", test_cap_prefers_soonest);
    add_case(s, "sweep", test_sweep);
    add_case(s, "sweep_shrinks", test_sweep_shrinks);
    add_case(s, "constant_keys_no_resize", test_constant_keys_no_resize);
    add_case(s, "resize_states", test_resize_states);
    add_case(s, "evict_mid_resize", test_evict_mid_resize);
    add_case(s, "shrink_outrun", test_shrink_outrun);
    add_case(s, "random_resizing", test_random_resizing);
    add_case(s, "sweep_long_run_work", test_sweep_long_run_work);
    add_case(s, "scan_slices", test_scan_slices);
    add_case(s, "scan_keeps_edges", test_scan_keeps_edges);
    add_case(s, "scan_at_cap", test_scan_at_cap);
    add_case(s, "scan_eviction_waits", test_scan_eviction_waits);
    return s;
}

RL_TEST_MAIN(keytab_suite)
