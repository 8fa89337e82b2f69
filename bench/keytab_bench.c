/*
 * keytab_bench: what growing the key table costs one insert, and what its sweeps cost
 * afterwards while they collapse it into huge pages (docs/BENCHMARKS.md, "Huge pages for the
 * key table"). Inserts N distinct fingerprints into an empty table (memory cap 4 GiB, no
 * eviction), timing each (wall clock: on a loaded machine the scheduler's pauses show too),
 * then runs one sweep per 2 MiB of the final entry array, timing each. Prints the medians,
 * the 99.99th percentile and the slowest. Run it with RL_KEYTAB_HUGEPAGES=0 for the table in
 * 4 KiB pages throughout. Usage: keytab_bench [N]. Not a test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "keytab.h"

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

/* Sorts v[0..n) and prints its median, 99.99th percentile and maximum. */
static void
report(const char *what, double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    printf("%s (%zu): median %.1f us, p99.99 %.1f us, max %.2f ms\n", what, n, v[n / 2] / 1e3,
           v[(size_t)((double)(n - 1) * 0.9999)] / 1e3, v[n - 1] / 1e6);
}

int
main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000;
    struct rl_keytab_ops ops = {never_full, any_score, NULL, no_release, NULL};
    struct rl_keytab *t = NULL;
    double *lat = n > 0 ? malloc(n * sizeof(*lat)) : NULL;

    if (lat == NULL || rl_keytab_create(&t, UINT64_C(4) << 30, &ops) != 0) {
        fprintf(stderr, "keytab_bench: cannot start\n");
        return 1;
    }
    double t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
        uint64_t x = (uint64_t)i * UINT64_C(0x9e3779b97f4a7c15) + 1, hi;
        uint32_t lo;
        rl_keytab_fingerprint(x, ~x, &hi, &lo);
        double a = now_ns();
        rl_keytab_insert(t, hi, lo, 1, 0);
        lat[i] = now_ns() - a;
    }
    printf("%s: %zu inserts in %.0f ms\n",
           getenv("RL_KEYTAB_HUGEPAGES") != NULL ? "RL_KEYTAB_HUGEPAGES set" : "default",
           n, (now_ns() - t0) / 1e6);
    report("inserts", lat, n);

    /* The last grow's move ends first (a sweep moves its budget of old slots), then each
     * sweep collapses a piece: as many sweeps as the move needs plus one per 2 MiB. */
    struct rl_keytab_stats st;
    rl_keytab_stats(t, &st);
    size_t sweeps = (size_t)(st.resize_left / 65536 + st.capacity * 32 / (2u << 20) + 2);
    for (size_t k = 0; k < sweeps && k < n; k++) {
        double a = now_ns();
        rl_keytab_sweep(t, 0, 65536);
        lat[k] = now_ns() - a;
    }
    report("sweeps of 65536 slots after the inserts", lat, sweeps < n ? sweeps : n);
    rl_keytab_destroy(t);
    free(lat);
    return 0;
}
