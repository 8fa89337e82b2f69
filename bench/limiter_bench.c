/*
 * limiter_bench: the node's CHECK path without the network (docs/BENCHMARKS.md, "Node:
 * batched lookups"): one token_bucket rule over K users (default 1M, created first), then
 * uniformly drawn users judged one at a time (rl_limiter_check_epoch) or in batches of B
 * (rl_limiter_prepare for each, then rl_limiter_check_prepared for each), or in a window of
 * B (each CHECK judged B preparations after its own, as node/server.c does with the CHECKs
 * of one read). Prints the thread's CPU ns per CHECK of each way,
 * alternated over several rounds. Usage: limiter_bench [K [B [ROUNDS]]]. Not a test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conf.h"
#include "limiter.h"

static double
cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t
splitmix(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

enum { NREQ = 2000000, BMAX = 256 };

int
main(int argc, char **argv)
{
    unsigned keys = argc > 1 ? (unsigned)atoi(argv[1]) : 1000000;
    unsigned batch = argc > 2 ? (unsigned)atoi(argv[2]) : 16;
    unsigned rounds = argc > 3 ? (unsigned)atoi(argv[3]) : 3;
    const char *text = "[node n]\nlisten = 127.0.0.1:1\n[service bench]\n"
                       "limit = token_bucket 100 per 1m\n";
    struct rl_conf *conf = NULL;
    struct rl_limiter *l = NULL;
    char err[256];
    static char users[NREQ][12];
    static struct rl_wire_req reqs[NREQ];
    static struct rl_limiter_prep prep[BMAX];
    struct rl_wire_check_reply rep;
    uint64_t seed = 1, now = 1000000, sink = 0;

    if (batch < 1 || batch > BMAX || keys < 1 ||
        rl_conf_parse("bench.conf", text, &conf, err, sizeof(err)) != 0 ||
        rl_limiter_create(&l, conf, UINT64_C(4) << 30) != 0) {
        fprintf(stderr, "limiter_bench: cannot start (%s)\n", err);
        return 1;
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
    for (unsigned i = 0; i < keys && i < NREQ; i++) {
        rl_limiter_check_epoch(l, &reqs[i], now, 0, &rep);
    }
    for (unsigned r = 0; r < rounds; r++) {
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
        printf("round %u: one at a time %.0f ns/check, batches of %u %.0f ns/check, a window of "
               "%u %.0f ns/check\n",
               r + 1, (t1 - t0) / n, batch, (t2 - t1) / n, batch, (t3 - t2) / n);
        now += 1;
    }
    struct rl_limiter_stats st;
    rl_limiter_stats(l, &st);
    printf("keys %llu (%llu)\n", (unsigned long long)st.keys, (unsigned long long)(sink & 1));
    rl_limiter_destroy(l);
    rl_conf_destroy(conf);
    return 0;
}
