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
#include <stdlib.h>
#include <string.h>

#include "keytab.h"

/* Check's own assertions write to the parent process on every call, even when they pass,
 * which turns millions of them into minutes of system time: these only call into Check
 * when they fail. */
#define EXPECT(c)                                                                                  \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            ck_abort_msg("Assertion '%s' failed", #c);                                             \
        }                                                                                          \
    } while (0)
#define EXPECT_U(a, op, b)                                                                         \
    do {                                                                                           \
        uint64_t a_ = (a), b_ = (b);                                                               \
        if (!(a_ op b_)) {                                                                         \
            ck_abort_msg("Assertion '%s %s %s' failed: %" PRIu64 " vs %" PRIu64, #a, #op, #b, a_,  \
                         b_);                                                                      \
        }                                                                                          \
    } while (0)
#define EXPECT_I(a, op, b)                                                                         \
    do {                                                                                           \
        int64_t a_ = (a), b_ = (b);                                                                \
        if (!(a_ op b_)) {                                                                         \
            ck_abort_msg("Assertion '%s %s %s' failed: %" PRId64 " vs %" PRId64, #a, #op, #b, a_,  \
                         b_);                                                                      \
        }                                                                                          \
    } while (0)

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
};

static bool
fake_is_full(void *arg, const struct rl_keytab_entry *e, uint64_t now)
{
    struct fake *f = arg;
    f->is_full_calls++;
    return e->st.a <= now;
}

static uint64_t
fake_full_at(void *arg, const struct rl_keytab_entry *e)
{
    struct fake *f = arg;
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
    EXPECT_U(e->st.b, !=, 0);
    uint64_t id = e->st.b - 1;
    EXPECT_U(id, <, f->nids);
    EXPECT_U(f->released[id], ==, 0);
    f->released[id]++;
    f->releases++;
    f->last_released = (int64_t)id;
    memset(&e->st, 0, sizeof(e->st));
}

static struct rl_keytab *
fake_table(struct fake *f, size_t nids, uint64_t max_bytes)
{
    memset(f, 0, sizeof(*f));
    f->released = calloc(nids, 1);
    EXPECT(f->released != NULL);
    f->nids = nids;
    f->last_released = -1;
    struct rl_keytab_ops ops = {fake_is_full, fake_full_at, fake_release, f};
    struct rl_keytab *t = NULL;
    EXPECT_I(rl_keytab_create(&t, max_bytes, &ops), ==, 0);
    EXPECT(t != NULL);
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
    *hi = (*hi & ~UINT64_C(0xffff)) | (id & 0xffff);
    *hi += (*hi == 0);
    *lo = (uint32_t)(id >> 16);
}

static struct rl_keytab_entry *
insert_id(struct rl_keytab *t, uint64_t id, uint64_t hi, uint32_t lo, uint64_t full_at)
{
    struct rl_keytab_entry *e = rl_keytab_insert(t, hi, lo, (uint16_t)(id & 0xffff), 0);
    EXPECT(e != NULL);
    EXPECT_U(e->fp_hi, ==, hi);
    EXPECT_U(e->fp_lo, ==, lo);
    EXPECT_U(e->tier, ==, id & 0xffff);
    EXPECT_U(e->st.a, ==, 0);
    EXPECT_U(e->st.b, ==, 0);
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
        EXPECT(e != NULL);
        EXPECT_U(e->st.b, ==, id + 1);
        EXPECT_U(e->fp_hi, ==, hi);
        EXPECT_U(e->fp_lo, ==, lo);
    } else {
        EXPECT(e == NULL);
    }
}

/* Destroys the table and checks that every id ever inserted was released exactly once. */
static void
finish(struct rl_keytab *t, struct fake *f, const uint8_t *inserted)
{
    rl_keytab_destroy(t);
    for (size_t id = 0; id < f->nids; id++) {
        EXPECT_U(f->released[id], ==, inserted[id]);
    }
    free(f->released);
}

START_TEST(test_fingerprint)
{
    uint64_t hi;
    uint32_t lo;
    rl_keytab_fingerprint(0, 0, &hi, &lo);
    EXPECT_U(hi, !=, 0);
    /* Deterministic: every process must agree on where a key lives. */
    uint64_t hi2;
    uint32_t lo2;
    rl_keytab_fingerprint(0x0123456789abcdefu, 0xfedcba9876543210u, &hi, &lo);
    rl_keytab_fingerprint(0x0123456789abcdefu, 0xfedcba9876543210u, &hi2, &lo2);
    EXPECT_U(hi, ==, hi2);
    EXPECT_U(lo, ==, lo2);
    /* Both halves of the hash count. */
    rl_keytab_fingerprint(0x0123456789abcdefu, 0xfedcba9876543211u, &hi2, &lo2);
    EXPECT(hi != hi2 || lo != lo2);
    rl_keytab_fingerprint(0x0123456789abcdeeu, 0xfedcba9876543210u, &hi2, &lo2);
    EXPECT(hi != hi2 || lo != lo2);
    /* Tags take the low 7 bits of fp_hi: a hash whose low bits are constant must still give
     * spread ones. */
    unsigned seen = 0;
    for (uint64_t i = 0; i < 1024; i++) {
        rl_keytab_fingerprint(i << 20, 0, &hi, &lo);
        seen |= 1u << (hi & 31);
    }
    EXPECT_U(seen, ==, 0xffffffffu);
}
END_TEST

START_TEST(test_empty)
{
    struct fake f;
    struct rl_keytab *t = fake_table(&f, 1, 0);
    struct rl_keytab_stats s;
    rl_keytab_stats(t, &s);
    EXPECT_U(s.keys, ==, 0);
    EXPECT_U(s.capacity, >=, 16);
    /* Below the minimum, the cap is 64 KiB. */
    EXPECT_U(s.bytes, <=, 64 * 1024);
    for (uint64_t id = 0; id < 1000; id++) {
        uint64_t hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        EXPECT(rl_keytab_find(t, hi, lo) == NULL);
    }
    EXPECT_U(rl_keytab_sweep(t, 100, 1000), ==, 0);
    uint8_t none = 0;
    finish(t, &f, &none);
    EXPECT_U(f.releases, ==, 0);
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
        EXPECT_U(s.capacity, ==, 64);
        EXPECT_U(s.keys, ==, N);
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
            EXPECT(e != NULL);
            rl_keytab_delete(t, e);
            present[id] = 0;
            EXPECT_I(f.last_released, ==, (int64_t)id);
            EXPECT_U(keys_of(t), ==, N - 1 - k);
            for (uint64_t j = 0; j < N; j++) {
                check_id(t, j, hi[j], lo[j], present[j]);
            }
        }
        finish(t, &f, inserted);
    }
}
END_TEST

/* Random inserts, finds and deletes on clustered fingerprints against the model. */
START_TEST(test_random_clustered)
{
    enum { N = 4000, OPS = 400000 };
    struct fake f;
    struct rl_keytab *t = fake_table(&f, N, UINT64_C(1) << 30);
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
            EXPECT_I(f.last_released, ==, (int64_t)id);
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
        EXPECT_U(keys_of(t), ==, nkeys);
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
            EXPECT_U(f.released[j], ==, 1);
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
    struct rl_keytab_stats s;
    uint64_t last_cap = 0, resizes = 0;
    for (uint32_t i = 0; i < N; i++) {
        uint64_t id = perm[i], hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        insert_id(t, id, hi, lo, 0);
        present[id] = 1;
        rl_keytab_stats(t, &s);
        EXPECT_U(s.keys, ==, i + 1);
        /* The load never passes 7/8, and each grow is by 1.5x. */
        EXPECT_U(s.keys * 8, <=, s.capacity * 7);
        if (s.capacity != last_cap) {
            if (last_cap != 0) {
                EXPECT_U(s.capacity, ==, last_cap + last_cap / 2);
                EXPECT_U(s.resizes, ==, resizes + 1);
            }
            last_cap = s.capacity;
            resizes = s.resizes;
        }
    }
    EXPECT_U(s.resizes, >, 10);
    EXPECT_U(s.evicted, ==, 0);
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
        EXPECT(rl_keytab_find(t, hi, lo) == NULL);
    }
    uint64_t nkeys = N;
    for (unsigned op = 0; op < 2 * N; op++) {
        uint64_t id = splitmix(&seed) % N, hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        struct rl_keytab_entry *e = rl_keytab_find(t, hi, lo);
        EXPECT(present[id] == (e != NULL));
        if (e != NULL) {
            EXPECT_U(e->st.b, ==, id + 1);
            rl_keytab_delete(t, e);
            EXPECT_U(f.released[id], ==, 1);
            f.released[id] = 0;
            present[id] = 0;
            nkeys--;
        } else {
            insert_id(t, id, hi, lo, 0);
            present[id] = 1;
            nkeys++;
        }
    }
    EXPECT_U(keys_of(t), ==, nkeys);
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
    /* Fill until the first eviction. */
    for (;; id++) {
        uint64_t hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        rl_keytab_stats(t, &before);
        insert_id(t, id, hi, lo, 1000 + splitmix(&seed) % 1000000);
        present[id] = 1;
        rl_keytab_stats(t, &s);
        EXPECT_U(s.bytes, <=, cap_bytes);
        if (s.evicted > 0) {
            break;
        }
        EXPECT_U(s.keys, ==, id + 1);
    }
    EXPECT_I(f.last_released, >=, 0);
    present[f.last_released] = 0;
    uint64_t full_keys = s.keys;
    uint64_t full_cap = s.capacity;
    EXPECT_U(full_keys, ==, before.keys);
    /* The cap holds 1 MiB / 33 B: over 30,000 slots, loaded to 7/8. */
    EXPECT_U(full_keys, >, 25000);
    EXPECT_U(full_keys * 8, <=, full_cap * 7);

    for (id = id + 1; id < N; id++) {
        uint64_t hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        f.nsampled = 0;
        uint64_t releases = f.releases;
        insert_id(t, id, hi, lo, 1000 + splitmix(&seed) % 1000000);
        present[id] = 1;
        rl_keytab_stats(t, &s);
        EXPECT_U(s.bytes, <=, cap_bytes);
        EXPECT_U(s.capacity, ==, full_cap);
        EXPECT_U(s.keys, ==, full_keys);
        EXPECT_U(s.evicted, ==, id + 1 - full_keys);
        EXPECT_U(f.releases, ==, releases + 1);
        /* The sample: 8 distinct entries present in the table before the insert. */
        EXPECT_U(f.nsampled, ==, 8);
        uint64_t best = UINT64_MAX;
        for (size_t k = 0; k < f.nsampled; k++) {
            EXPECT_I(f.sampled_id[k], >=, 0);
            EXPECT_I(f.sampled_id[k], <, (int64_t)id);
            EXPECT(present[f.sampled_id[k]]);
            for (size_t m = 0; m < k; m++) {
                EXPECT_I(f.sampled_id[k], !=, f.sampled_id[m]);
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
        EXPECT(in_sample);
        uint64_t vhi;
        uint32_t vlo;
        key_fp((uint64_t)victim, &vhi, &vlo);
        EXPECT(rl_keytab_find(t, vhi, vlo) == NULL);
        present[victim] = 0;
        /* The victim's full_at: the sample's smallest. */
        for (size_t k = 0; k < f.nsampled; k++) {
            if (f.sampled_id[k] == victim) {
                EXPECT_U(f.sampled[k], ==, best);
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
    EXPECT_U(left, ==, full_keys);
    uint8_t *inserted = malloc(N);
    memset(inserted, 1, N);
    /* Evicted ids were released already, the rest will be by destroy. */
    for (uint64_t j = 0; j < N; j++) {
        if (!present[j]) {
            EXPECT_U(f.released[j], ==, 1);
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
    EXPECT_U(evictions, ==, MORE);
    EXPECT_U(far * 20, <, evictions);
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
        EXPECT_U(f.is_full_calls - calls, <=, budget);
        gone += k;
        EXPECT_U(keys_of(t), ==, n - gone);
    }
    EXPECT_U(gone, ==, want_full);
    rl_keytab_stats(t, &s);
    EXPECT_U(s.expired, ==, want_full);
    EXPECT_U(f.releases, ==, want_full);
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
        EXPECT_U(f.released[id], ==, !left);
        if (!left) {
            f.released[id] = 0;
            inserted[id] = 0;
        }
    }
    /* Later sweeps at the same time find nothing more. */
    EXPECT_U(rl_keytab_sweep(t, now, 1 << 20), ==, 0);
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

/* A sweep that empties the table gives the memory back; the table then grows again. */
START_TEST(test_sweep_shrinks)
{
    enum { N = 100000 };
    struct fake f;
    struct rl_keytab *t = fake_table(&f, 2 * N, UINT64_C(1) << 30);
    uint8_t *inserted = calloc(2 * N, 1);
    for (uint64_t id = 0; id < N; id++) {
        uint64_t hi;
        uint32_t lo;
        key_fp(id, &hi, &lo);
        insert_id(t, id, hi, lo, id < N - 10 ? 1 : 1000);
        inserted[id] = 1;
    }
    struct rl_keytab_stats big, s;
    rl_keytab_stats(t, &big);
    for (int p = 0; p < 100; p++) {
        rl_keytab_sweep(t, 10, 10000);
    }
    rl_keytab_stats(t, &s);
    EXPECT_U(s.keys, ==, 10);
    EXPECT_U(s.expired, ==, N - 10);
    EXPECT_U(s.capacity, <, 1000);
    EXPECT_U(s.bytes, <, big.bytes / 100);
    EXPECT_U(s.resizes, >, big.resizes);
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
        insert_id(t, id, hi, lo, 1000);
        inserted[id] = 1;
    }
    EXPECT_U(keys_of(t), ==, N + 10);
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
    add_case(s, "million", test_million);
    add_case(s, "cap_evicts", test_cap_evicts);
    add_case(s, "cap_prefers_soonest", test_cap_prefers_soonest);
    add_case(s, "sweep", test_sweep);
    add_case(s, "sweep_shrinks", test_sweep_shrinks);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(keytab_suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
