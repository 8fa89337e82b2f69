/*
 * slog_bench: what a sliding log's length costs a request (docs/BENCHMARKS.md, "A long
 * sliding log"). For logs of N entries (one per ms, a key used every ms for N ms), the CPU
 * time of an ADJUST charge of 1 on a `sliding_window_log 4000000000 per 49d` key, and of a
 * refused CHECK of cost 10^6 on a `sliding_window_log N per 49d` key the N entries fill (its
 * retry-after is where the log's running costs reach 10^6). Before the log kept running
 * totals, both walked the log (the whole window's entries, and up to 10^6 of them). Usage:
 * slog_bench [N...] (default 1000 100000 1000000). Not a test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"

#include "bench_util.h"

#define T0 UINT64_C(1700000000000)
#define WINDOW UINT64_C(4233600000) /* 49 days */

static struct rl_tier
tier(uint32_t limit)
{
    struct rl_tier t;

    memset(&t, 0, sizeof(t));
    t.algo = RL_ALGO_SLIDING_WINDOW_LOG;
    t.limit = limit;
    t.window_ms = WINDOW;
    return t;
}

/* A log of n entries, one per ms from T0. */
static void
fill(const struct rl_tier *t, struct rl_algo_state *s, uint64_t n)
{
    struct rl_algo_state next;
    struct rl_algo_result r;

    for (uint64_t i = 0; i < n; i++) {
        rl_algo_judge(t, s, T0 + i, 1, &r, &next);
        if (!r.allowed || rl_algo_commit(t, s, &next, T0 + i, 1) != 0) {
            fprintf(stderr, "slog_bench: entry %llu not logged\n", (unsigned long long)i);
            exit(1);
        }
    }
}

int
main(int argc, char **argv)
{
    static const uint64_t dflt[] = {1000, 100000, 1000000};
    int n = argc > 1 ? argc - 1 : 3;

    printf("%10s %16s %22s\n", "entries", "ADJUST +1 (ns)", "refused CHECK (ns)");
    for (int a = 0; a < n; a++) {
        uint64_t len = argc > 1 ? strtoull(argv[a + 1], NULL, 10) : dflt[a];
        uint64_t now = T0 + len - 1, ops = 2000;
        struct rl_tier big = tier(4000000000u), full = tier((uint32_t)len);
        struct rl_algo_state s = {0, 0}, f = {0, 0}, next;
        struct rl_algo_result r;
        double t0, adj, chk;

        fill(&big, &s, len);
        fill(&full, &f, len);
        t0 = cpu_ns();
        for (uint64_t i = 0; i < ops; i++) {
            rl_algo_adjust(&big, &s, now, 1, UINT64_MAX); /* merged into the newest entry */
        }
        adj = (cpu_ns() - t0) / (double)ops;
        t0 = cpu_ns();
        for (uint64_t i = 0; i < ops; i++) {
            rl_algo_judge(&full, &f, now, 1000000, &r, &next);
            if (r.allowed) {
                fprintf(stderr, "slog_bench: the full key allowed a request\n");
                return 1;
            }
        }
        chk = (cpu_ns() - t0) / (double)ops;
        printf("%10llu %16.0f %22.0f\n", (unsigned long long)len, adj, chk);
        rl_algo_release(&big, &s);
        rl_algo_release(&full, &f);
    }
    return 0;
}
