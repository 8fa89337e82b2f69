/*
 * keytab_bench: what growing the key table costs one insert, and how long the collapses into
 * huge pages that follow pause the thread that owns the table (docs/BENCHMARKS.md, "Huge
 * pages for the key table"). For each mode named on the command line, in that order, in one
 * process: inserts N distinct fingerprints into an empty table (memory cap 4 GiB, no
 * eviction), timing each (wall clock: on a loaded machine the scheduler's pauses show too);
 * then runs a node's loop against it: batches of 64 finds of random inserted keys, back to
 * back, with a sweep of 65536 slots every 100 ms, as many sweeps as the last grow's move
 * needs plus one per 2 MiB of the entry array plus 5; each batch (with the sweep it ran, if
 * any) is timed, and its longest is the loop's longest pause. Prints medians, 99.99th
 * percentiles and maxima, the batches over 1 ms and the table's bytes in huge pages at the
 * end (AnonHugePages of /proc/self/smaps_rollup, the process's). Not a test.
 *
 * Modes: thread (the default: pieces collapsed by the table's collapsing thread), sync
 * (RL_KEYTAB_COLLAPSE=sync: on the loop's thread, as the first version did), 4k
 * (RL_KEYTAB_HUGEPAGES=0: 4 KiB pages throughout), and pass: what one pass over the table
 * costs its thread, whole or a slice at a time, and the turns of a pass begun during a grow
 * that end the grow first (run_pass; docs/BENCHMARKS.md, "The export pass, a slice per
 * turn"). Usage: keytab_bench [N [MODE...]];
 * N = 10000000 and the modes "sync thread" by default.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keytab.h"

#define BATCH 64
#define TICK_NS 100e6

static bool
never_full(void *arg, struct rl_keytab_entry *e, uint64_t now)
{
    (void)arg, (void)e, (void)now;
    return false;
}

static uint64_t
any_score(void *arg, struct rl_keytab_entry *e, uint64_t now, uint32_t tier)
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
now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v[0..n) and prints its median, 99.99th percentile, maximum and how many exceed 1 ms. */
static void
report(const char *what, double *v, size_t n)
{
    size_t over = 0;
    qsort(v, n, sizeof(*v), cmp_double);
    for (size_t i = 0; i < n; i++) {
        over += v[i] > 1e6;
    }
    printf("  %s (%zu): median %.1f us, p99.99 %.1f us, max %.2f ms, over 1 ms: %zu\n", what, n,
           v[n / 2] / 1e3, v[(size_t)((double)(n - 1) * 0.9999)] / 1e3, v[n - 1] / 1e6, over);
}

/* The process's AnonHugePages in MiB, or -1. */
static long
huge_mib(void)
{
    char line[256];
    long kb = -1;
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) {
            break;
        }
    }
    fclose(f);
    return kb < 0 ? -1 : kb / 1024;
}

static void
key(size_t i, uint64_t *hi, uint32_t *lo)
{
    uint64_t x = (uint64_t)i * UINT64_C(0x9e3779b97f4a7c15) + 1;
    rl_keytab_fingerprint(x, ~x, hi, lo);
}

static size_t shard_hits;

static bool
keep_if_shard(void *arg, struct rl_keytab_entry *e)
{
    shard_hits += (uint32_t)e->shard == *(const uint32_t *)arg;
    return true;
}

static void
visit_shard(void *arg, struct rl_keytab_entry *e)
{
    shard_hits += (uint32_t)e->shard == *(const uint32_t *)arg;
}

/* Mode pass: n keys over 4096 shards, then PASSES passes each way: whole in one call
 * (rl_keytab_remap, keeping every key, as a planned move's export was) and a slice of
 * PASS_SLICE slots at a time (rl_keytab_scan_step, as it is now), each visit reading the
 * entry's shard. */
#define PASSES 5
#define PASS_SLICE 65536

static int
run_pass(size_t n)
{
    struct rl_keytab_ops ops = {never_full, any_score, NULL, no_release, NULL};
    struct rl_keytab *t = NULL;
    struct rl_keytab_stats st;
    double whole[PASSES], slice_med[PASSES], slice_max = 0;

    if (rl_keytab_create(&t, UINT64_C(8) << 30, &ops) != 0) {
        fprintf(stderr, "keytab_bench: cannot create a table\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t hi;
        uint32_t lo;

        key(i, &hi, &lo);
        rl_keytab_insert(t, hi, lo, 1, 0)->shard = (hi >> 7) % 4096;
    }
    rl_keytab_stats(t, &st);
    for (int r = 0; r < PASSES; r++) {
        uint32_t shard = (uint32_t)r;
        double t0 = now_ns(), *slices = malloc((st.capacity / PASS_SLICE + 2) * sizeof(double));
        size_t ns = 0;

        if (slices == NULL) {
            rl_keytab_destroy(t);
            return 1;
        }
        rl_keytab_remap(t, keep_if_shard, &shard);
        whole[r] = (now_ns() - t0) / 1e6;
        rl_keytab_scan_begin(t, visit_shard, &shard);
        for (bool done = false; !done; ns++) {
            t0 = now_ns();
            done = rl_keytab_scan_step(t, PASS_SLICE);
            slices[ns] = (now_ns() - t0) / 1e6;
            slice_max = slices[ns] > slice_max ? slices[ns] : slice_max;
        }
        qsort(slices, ns, sizeof(*slices), cmp_double);
        slice_med[r] = slices[ns / 2];
        free(slices);
    }
    qsort(whole, PASSES, sizeof(whole[0]), cmp_double);
    qsort(slice_med, PASSES, sizeof(slice_med[0]), cmp_double);
    printf("pass: %zu keys, %llu slots: a whole pass, median %.1f ms; a slice of %d slots: "
           "median %.3f ms, longest %.3f ms (%d passes each way)\n",
           n, (unsigned long long)st.capacity, whole[PASSES / 2], PASS_SLICE, slice_med[PASSES / 2],
           slice_max, PASSES);
    /* A pass begun while a grow runs: its first steps end the grow before any visit. */
    for (size_t i = n; st.resize_left == 0; i++) {
        uint64_t hi;
        uint32_t lo;

        key(i, &hi, &lo);
        rl_keytab_insert(t, hi, lo, 1, 0)->shard = (hi >> 7) % 4096;
        rl_keytab_stats(t, &st);
    }
    double grow_max = 0, *grow_ms = malloc((st.resize_left / 64 + 2) * sizeof(double));
    size_t grow_steps = 0;

    if (grow_ms == NULL) {
        rl_keytab_destroy(t);
        return 1;
    }
    uint32_t shard = 0;
    rl_keytab_scan_begin(t, visit_shard, &shard);
    for (bool done = false; !done;) {
        double t0 = now_ns();
        bool growing = st.resize_left > 0;

        done = rl_keytab_scan_step(t, PASS_SLICE);
        if (growing) {
            double ms = (now_ns() - t0) / 1e6;
            grow_max = ms > grow_max ? ms : grow_max;
            grow_ms[grow_steps++] = ms;
            rl_keytab_stats(t, &st);
        }
    }
    qsort(grow_ms, grow_steps, sizeof(double), cmp_double);
    printf("pass begun during a grow to %llu slots: %zu steps end the grow first, median %.3f "
           "ms, longest %.3f ms\n",
           (unsigned long long)st.capacity, grow_steps, grow_ms[grow_steps / 2], grow_max);
    free(grow_ms);
    rl_keytab_destroy(t);
    return 0;
}

static int
run(const char *mode, size_t n, double *lat, size_t lat_n)
{
    if (strcmp(mode, "pass") == 0) {
        return run_pass(n);
    }
    unsetenv("RL_KEYTAB_COLLAPSE");
    unsetenv("RL_KEYTAB_HUGEPAGES");
    if (strcmp(mode, "sync") == 0) {
        setenv("RL_KEYTAB_COLLAPSE", "sync", 1);
    } else if (strcmp(mode, "4k") == 0) {
        setenv("RL_KEYTAB_HUGEPAGES", "0", 1);
    } else if (strcmp(mode, "thread") != 0) {
        fprintf(stderr, "keytab_bench: mode %s: thread, sync, 4k or pass\n", mode);
        return 1;
    }
    struct rl_keytab_ops ops = {never_full, any_score, NULL, no_release, NULL};
    struct rl_keytab *t = NULL;
    if (rl_keytab_create(&t, UINT64_C(4) << 30, &ops) != 0) {
        fprintf(stderr, "keytab_bench: cannot create a table\n");
        return 1;
    }
    printf("%s: huge pages before: %ld MiB\n", mode, huge_mib());
    double t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
        uint64_t hi;
        uint32_t lo;
        key(i, &hi, &lo);
        double a = now_ns();
        rl_keytab_insert(t, hi, lo, 1, 0);
        lat[i] = now_ns() - a;
    }
    printf("  %zu inserts in %.0f ms\n", n, (now_ns() - t0) / 1e6);
    report("inserts", lat, n);

    /* The loop: the last grow's move ends first (a sweep moves its budget of old slots), then
     * each sweep hands over (or, sync, collapses) a piece. */
    struct rl_keytab_stats st;
    rl_keytab_stats(t, &st);
    size_t sweeps = (size_t)(st.resize_left / 65536 + st.capacity * 32 / (2u << 20) + 5);
    double *sw = malloc(sweeps * sizeof(*sw));
    if (sw == NULL) {
        rl_keytab_destroy(t);
        return 1;
    }
    size_t batches = 0, done = 0, found = 0;
    uint64_t rng = 88172645463325252ull;
    double next = now_ns();
    while (done < sweeps && batches < lat_n) {
        double a = now_ns();
        for (int k = 0; k < BATCH; k++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            uint64_t hi;
            uint32_t lo;
            key((size_t)(rng % n), &hi, &lo);
            found += rl_keytab_find(t, hi, lo) != NULL;
        }
        if (a >= next) {
            double s = now_ns();
            rl_keytab_sweep(t, 0, 65536);
            sw[done++] = now_ns() - s;
            next = a + TICK_NS;
        }
        lat[batches++] = now_ns() - a;
    }
    if (getenv("KEYTAB_BENCH_VERBOSE") != NULL) {
        for (size_t k = 0; k < done; k++) {
            printf("%.2f ", sw[k] / 1e6);
        }
        printf("(sweeps, ms, in order)\n");
    }
    printf("  loop: %zu batches of %d finds (%zu found), %zu sweeps 100 ms apart\n", batches,
           BATCH, found, done);
    report("batches (the loop's pauses)", lat, batches);
    report("sweeps", sw, done);
    printf("  huge pages at the end: %ld MiB\n", huge_mib());
    free(sw);
    rl_keytab_destroy(t);
    return 0;
}

int
main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000;
    static const char *defaults[] = {"sync", "thread"};
    const char **modes = argc > 2 ? (const char **)argv + 2 : defaults;
    int nmodes = argc > 2 ? argc - 2 : 2;
    /* A batch of finds takes ~10 us: room for 60 s of them. */
    size_t lat_n = n > 6000000 ? n : 6000000;
    double *lat = n > 0 ? malloc(lat_n * sizeof(*lat)) : NULL;
    if (lat == NULL) {
        fprintf(stderr, "keytab_bench: usage: keytab_bench [N [thread|sync|4k|pass...]]\n");
        return 1;
    }
    for (int k = 0; k < nmodes; k++) {
        if (run(modes[k], n, lat, lat_n) != 0) {
            free(lat);
            return 1;
        }
    }
    free(lat);
    return 0;
}
