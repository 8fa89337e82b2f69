/*
 * limiter_bench: the node's CHECK path without the network (docs/BENCHMARKS.md, "Node:
 * batched lookups"): one token_bucket rule over K users (default 1M, created first), then
 * uniformly drawn users judged one at a time (rl_limiter_check_epoch) or in batches of B
 * (rl_limiter_prepare for each, then rl_limiter_check_prepared for each), or in a window of
 * B (each CHECK judged B preparations after its own, as node/server.c does with the CHECKs
 * of one read). Prints the thread's CPU ns per CHECK of each way,
 * alternated over several rounds, for two limiters side by side in the same process: one
 * whose key table has huge pages where the kernel allows (keytab_mem.c) and one without
 * (created with RL_KEYTAB_HUGEPAGES=0), each swept after its fill as a node's timer would
 * (which collapses the first into huge pages), the rounds interleaved so that the machine's load
 * falls on both alike; then the median of each, and the huge pages the process holds.
 * Usage: limiter_bench [K [B [ROUNDS]]]. Not a test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conf.h"
#include "limiter.h"

#include "bench_util.h"

enum { NREQ = 2000000, BMAX = 256, RMAX = 64, WAYS = 3 };

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double
median(double *v, unsigned n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The kB of a field of /proc/self/smaps_rollup (AnonHugePages, Rss), or -1. */
static long
rollup_kb(const char *field)
{
    char line[256];
    long v = -1;
    size_t len = strlen(field);
    FILE *f = fopen("/proc/self/smaps_rollup", "r");

    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, field, len) == 0 && line[len] == ':') {
            v = atol(line + len + 1);
            break;
        }
    }
    fclose(f);
    return v;
}

static char users[NREQ][12];
static struct rl_wire_req reqs[NREQ];
static struct rl_limiter_prep prep[BMAX];
static uint64_t sink;

/* One round of the three ways over l: fills ns[0..2] with CPU ns per CHECK. */
static void
round_of(struct rl_limiter *l, unsigned keys, unsigned batch, uint64_t now, double *ns)
{
    struct rl_wire_check_reply rep;
    double t0 = cpu_ns();
    for (unsigned i = keys; i < NREQ; i++) {
        rl_limiter_check_epoch(l, &reqs[i], now, 0, &rep);
        sink += rep.remaining;
    }
    double t1 = cpu_ns();
    for (unsigned i = keys; i < NREQ; i += batch) {
        unsigned n = NREQ - i < batch ? NREQ - i : batch;
        for (unsigned k = 0; k < n; k++) {
            rl_limiter_prepare(l, &reqs[i + k], &prep[k]);
        }
        for (unsigned k = 0; k < n; k++) {
            rl_limiter_check_prepared(l, &reqs[i + k], &prep[k], now, 0, &rep);
            sink += rep.remaining;
        }
    }
    double t2 = cpu_ns();
    /* A window: each CHECK judged `batch` preparations after its own. */
    for (unsigned i = keys; i < NREQ + batch; i++) {
        if (i >= keys + batch) {
            unsigned j = i - batch;
            rl_limiter_check_prepared(l, &reqs[j], &prep[j % batch], now, 0, &rep);
            sink += rep.remaining;
        }
        if (i < NREQ) {
            rl_limiter_prepare(l, &reqs[i], &prep[i % batch]);
        }
    }
    double t3 = cpu_ns();
    unsigned n = NREQ - keys;
    ns[0] = (t1 - t0) / n;
    ns[1] = (t2 - t1) / n;
    ns[2] = (t3 - t2) / n;
}

int
main(int argc, char **argv)
{
    unsigned keys = argc > 1 ? (unsigned)atoi(argv[1]) : 1000000;
    unsigned batch = argc > 2 ? (unsigned)atoi(argv[2]) : 16;
    unsigned rounds = argc > 3 ? (unsigned)atoi(argv[3]) : 3;
    const char *text = "[node n]\nlisten = 127.0.0.1:1\n[service bench]\n"
                       "limit = token_bucket 100 per 1m\n";
    static const char *const side_name[2] = {"huge pages", "4 KiB pages"};
    struct rl_conf *conf = NULL;
    struct rl_limiter *l[2] = {NULL, NULL};
    char err[256] = "";
    uint64_t seed = 1, now = 1000000;
    static double ns[2][WAYS][RMAX];

    if (batch < 1 || batch > BMAX || keys < 1 || keys >= NREQ || rounds < 1 || rounds > RMAX ||
        rl_conf_parse("bench.conf", text, &conf, err, sizeof(err)) != 0) {
        fprintf(stderr, "limiter_bench: cannot start (%s)\n", err);
        return 1;
    }
    for (int s = 0; s < 2; s++) {
        /* The key table reads RL_KEYTAB_HUGEPAGES when it first reserves its ranges, during
         * the fill below. */
        if (s == 1) {
            setenv("RL_KEYTAB_HUGEPAGES", "0", 1);
        }
        if (rl_limiter_create(&l[s], conf, UINT64_C(4) << 30) != 0) {
            fprintf(stderr, "limiter_bench: cannot create a limiter\n");
            return 1;
        }
    }
    for (unsigned i = 0; i < NREQ; i++) {
        unsigned u = i < keys ? i : (unsigned)(splitmix(&seed) % keys);
        int n = snprintf(users[i], sizeof(users[i]), "u%u", u);

        reqs[i].op = RL_WIRE_OP_CHECK;
        reqs[i].id = i;
        reqs[i].service = (struct rl_wire_str){"bench", 5};
        reqs[i].user = (struct rl_wire_str){users[i], (uint32_t)n};
        reqs[i].cost = 1;
    }
    /* Every user once (the table holds them all), then uniform draws. */
    long huge0 = rollup_kb("AnonHugePages");
    for (int s = 0; s < 2; s++) {
        struct rl_wire_check_reply rep;
        if (s == 1) {
            setenv("RL_KEYTAB_HUGEPAGES", "0", 1);
        } else {
            unsetenv("RL_KEYTAB_HUGEPAGES");
        }
        for (unsigned i = 0; i < keys; i++) {
            rl_limiter_check_epoch(l[s], &reqs[i], now, 0, &rep);
        }
        /* The node's sweeps collapse the table into huge pages a 2 MiB piece each, once its
         * last grow has ended: as many as it takes (256 MiB). */
        for (unsigned k = 0; k < 128; k++) {
            rl_limiter_sweep(l[s], now, 0, 1);
        }
        long h = rollup_kb("AnonHugePages");
        printf("%s: its fill took %ld kB of huge pages\n", side_name[s],
               h >= 0 && huge0 >= 0 ? h - huge0 : -1);
        huge0 = h;
    }
    for (unsigned r = 0; r < rounds; r++) {
        for (int s = 0; s < 2; s++) {
            double v[WAYS];
            round_of(l[s], keys, batch, now, v);
            for (int w = 0; w < WAYS; w++) {
                ns[s][w][r] = v[w];
            }
            printf("round %u, %s: one at a time %.0f ns/check, batches of %u %.0f ns/check, a "
                   "window of %u %.0f ns/check\n",
                   r + 1, side_name[s], v[0], batch, v[1], batch, v[2]);
        }
        now += 1;
    }
    for (int s = 0; s < 2; s++) {
        double m[WAYS];
        for (int w = 0; w < WAYS; w++) {
            m[w] = median(ns[s][w], rounds);
        }
        printf("RESULT limiter_bench %s, %u keys: median one at a time %.0f ns/check, batches of "
               "%u %.0f, a window of %u %.0f (%u rounds)\n",
               side_name[s], keys, m[0], batch, m[1], batch, m[2], rounds);
    }
    for (int s = 0; s < 2; s++) {
        struct rl_limiter_stats st;
        rl_limiter_stats(l[s], &st);
        printf("%s: keys %llu (%llu)\n", side_name[s], (unsigned long long)st.keys,
               (unsigned long long)(sink & 1));
        rl_limiter_destroy(l[s]);
    }
    rl_conf_destroy(conf);
    return 0;
}
