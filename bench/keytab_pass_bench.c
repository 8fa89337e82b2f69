/*
 * keytab_pass_bench: what one pass over the key table costs the thread that owns it, as the
 * export of a planned move makes one per batch of shards (docs/BENCHMARKS.md, "The export
 * pass, a slice per turn"). For each N on the command line: inserts N random keys (shards
 * 0..4095) into a table of 8 GiB cap, then five times a whole pass in one call
 * (rl_keytab_remap, keeping every key, as the export was) and a pass a slice of 65,536 slots
 * at a time (rl_keytab_scan_step, as it is now), each visit reading the entry's shard. Prints
 * the median whole pass and the median and longest slice. Not a test.
 *   keytab_pass_bench [N...]        (default: 1000000 3000000 10000000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "keytab.h"

#define RUNS 5
#define SLICE 65536

static bool
never_full(void *arg, const struct rl_keytab_entry *e, uint64_t now)
{
    (void)arg, (void)e, (void)now;
    return false;
}

static uint64_t
any_score(void *arg, const struct rl_keytab_entry *e, uint64_t now, uint32_t tier)
{
    (void)arg, (void)e, (void)now, (void)tier;
    return 0;
}

static void
no_release(void *arg, struct rl_keytab_entry *e)
{
    (void)arg, (void)e;
}

static double
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static size_t hits;

static bool
keep_if_shard(void *arg, struct rl_keytab_entry *e)
{
    hits += (uint32_t)e->shard == *(const uint32_t *)arg;
    return true;
}

static void
visit_shard(void *arg, struct rl_keytab_entry *e)
{
    hits += (uint32_t)e->shard == *(const uint32_t *)arg;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static void
one(size_t n)
{
    struct rl_keytab_ops ops = {never_full, any_score, NULL, no_release, NULL};
    struct rl_keytab *t = NULL;
    struct rl_keytab_stats st;
    double whole[RUNS], slice_med[RUNS], slice_max = 0;
    uint64_t x = 88172645463325252ull;

    if (rl_keytab_create(&t, UINT64_C(8) << 30, &ops) != 0) {
        fprintf(stderr, "no memory for the table\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t hi;
        uint32_t lo;
        struct rl_keytab_entry *e;

        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        rl_keytab_fingerprint(x, ~x, &hi, &lo);
        e = rl_keytab_insert(t, hi, lo, 1, 0);
        e->shard = x % 4096;
    }
    rl_keytab_stats(t, &st);
    for (int r = 0; r < RUNS; r++) {
        uint32_t shard = (uint32_t)r;
        double t0 = now_ms(), *slices;
        size_t ns = 0;

        rl_keytab_remap(t, keep_if_shard, &shard);
        whole[r] = now_ms() - t0;
        slices = malloc((st.capacity / SLICE + 2) * sizeof(*slices));
        rl_keytab_scan_begin(t, visit_shard, &shard);
        for (bool done = false; !done;) {
            t0 = now_ms();
            done = rl_keytab_scan_step(t, SLICE);
            slices[ns] = now_ms() - t0;
            slice_max = slices[ns] > slice_max ? slices[ns] : slice_max;
            ns++;
        }
        qsort(slices, ns, sizeof(*slices), cmp_double);
        slice_med[r] = slices[ns / 2];
        free(slices);
    }
    qsort(whole, RUNS, sizeof(whole[0]), cmp_double);
    qsort(slice_med, RUNS, sizeof(slice_med[0]), cmp_double);
    printf("%zu keys, %llu slots: whole pass median %.1f ms; a slice of %d slots: median %.3f "
           "ms, longest %.3f ms (%d passes each; %zu shard hits)\n",
           n, (unsigned long long)st.capacity, whole[RUNS / 2], SLICE, slice_med[RUNS / 2],
           slice_max, RUNS, hits);
    rl_keytab_destroy(t);
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        one(1000000);
        one(3000000);
        one(10000000);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        one((size_t)strtoull(argv[i], NULL, 10));
    }
    return 0;
}
