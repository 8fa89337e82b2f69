/*
 * limiter_settle_bench: what ADJUST and RELEASE cost on the node's limiter without the network
 * (docs/BENCHMARKS.md, "ADJUST and RELEASE in the limiter"). Not a test, not the CHECK path's
 * bench (limiter_bench.c). Usage: limiter_settle_bench [K [ROUNDS]] settle | limiter_settle_bench
 * memory.
 *
 * `settle`: the cost of ADJUST and RELEASE against CHECK in the same run, one at a time over
 * the same uniformly drawn users among K (default 1M): CHECK of a token_bucket key, ADJUST (a
 * refund of 1) of it, CHECK of a `concurrency 5 lease 1m` key, RELEASE of its slot, in turn
 * each round. `memory`: the bytes a concurrency key costs (key table and its log, as STATS
 * memory_bytes counts them) at N = 5 (1 slot, and 5 slots taken in 5 ms) and at the cap,
 * N = 10000 with every slot taken in a different ms.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conf.h"
#include "limiter.h"

#include "bench_util.h"

enum { NREQ = 2000000 };

static struct rl_limiter *
bench_limiter(const char *text, struct rl_conf **conf)
{
    struct rl_limiter *l = NULL;
    char err[256] = "";

    if (rl_conf_parse("bench.conf", text, conf, err, sizeof(err)) != 0 ||
        rl_limiter_create(&l, *conf, UINT64_C(4) << 30) != 0) {
        fprintf(stderr, "limiter_settle_bench: cannot start (%s)\n", err);
        exit(1);
    }
    return l;
}

static uint64_t
bench_mem(const struct rl_limiter *l, uint64_t *keys)
{
    struct rl_limiter_stats st;

    rl_limiter_stats(l, &st);
    *keys = st.keys;
    return st.memory_bytes;
}

/* MODE settle: CHECK, ADJUST, CHECK of a concurrency key, RELEASE; ns per op. */
static int
bench_settle(struct rl_wire_req *reqs, unsigned keys, unsigned rounds)
{
    struct rl_conf *conf = NULL;
    struct rl_limiter *l = bench_limiter("[node n]\nlisten = 127.0.0.1:1\n[service bench]\n"
                                         "limit = token_bucket 100 per 1m\n[service conc]\n"
                                         "limit = concurrency 5 lease 1m\n",
                                         &conf);
    struct rl_wire_check_reply rep;
    uint64_t now = 1000000, sink = 0;
    unsigned n = NREQ - keys;

    for (unsigned i = 0; i < keys && i < NREQ; i++) {
        reqs[i].service = (struct rl_wire_str){"bench", 5};
        rl_limiter_check_epoch(l, &reqs[i], now, 0, &rep);
        reqs[i].service = (struct rl_wire_str){"conc", 4};
        rl_limiter_check_epoch(l, &reqs[i], now, 0, &rep);
        rl_limiter_release(l, &reqs[i], now, 0, &rep);
    }
    for (unsigned r = 0; r < rounds; r++) {
        double t[5];

        t[0] = cpu_ns();
        for (unsigned i = keys; i < NREQ; i++) {
            reqs[i].op = RL_WIRE_OP_CHECK;
            reqs[i].service = (struct rl_wire_str){"bench", 5};
            rl_limiter_check_epoch(l, &reqs[i], now, 0, &rep);
            sink += rep.remaining;
        }
        t[1] = cpu_ns();
        for (unsigned i = keys; i < NREQ; i++) {
            reqs[i].op = RL_WIRE_OP_ADJUST;
            reqs[i].delta = -1;
            rl_limiter_adjust(l, &reqs[i], now, 0, &rep);
            sink += rep.remaining;
        }
        t[2] = cpu_ns();
        for (unsigned i = keys; i < NREQ; i++) {
            reqs[i].op = RL_WIRE_OP_CHECK;
            reqs[i].service = (struct rl_wire_str){"conc", 4};
            rl_limiter_check_epoch(l, &reqs[i], now, 0, &rep);
            sink += rep.remaining;
        }
        t[3] = cpu_ns();
        for (unsigned i = keys; i < NREQ; i++) {
            reqs[i].op = RL_WIRE_OP_RELEASE;
            rl_limiter_release(l, &reqs[i], now, 0, &rep);
            sink += rep.remaining;
        }
        t[4] = cpu_ns();
        printf("round %u: CHECK %.0f ns, ADJUST %.0f ns, CHECK (concurrency) %.0f ns, RELEASE "
               "%.0f ns\n",
               r + 1, (t[1] - t[0]) / n, (t[2] - t[1]) / n, (t[3] - t[2]) / n, (t[4] - t[3]) / n);
        now += 1;
    }
    {
        struct rl_limiter_stats st;

        rl_limiter_stats(l, &st);
        printf("keys %llu, releases_late %llu (%llu)\n", (unsigned long long)st.keys,
               (unsigned long long)st.releases_late, (unsigned long long)(sink & 1));
    }
    rl_limiter_destroy(l);
    rl_conf_destroy(conf);
    return 0;
}

/* MODE memory: memory_bytes per concurrency key holding slots. */
static int
bench_memory(void)
{
    static const struct {
        const char *what;
        const char *service;
        unsigned keys, slots;
    } runs[] = {
        {"token_bucket 5 per 1h (for comparison), 1 taken", "tb", 100000, 1},
        {"N = 5, 1 slot held", "c5", 100000, 1},
        {"N = 5, 5 slots taken 1 ms apart", "c5", 100000, 5},
        {"N = 10000, 10000 slots taken 1 ms apart", "cmax", 20, 10000},
    };

    for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
        struct rl_conf *conf = NULL;
        struct rl_limiter *l = bench_limiter("[node n]\nlisten = 127.0.0.1:1\n[service c5]\n"
                                             "limit = concurrency 5 lease 1h\n[service cmax]\n"
                                             "limit = concurrency 10000 lease 1h\n"
                                             "[service tb]\nlimit = token_bucket 5 per 1h\n",
                                             &conf);
        struct rl_wire_check_reply rep;
        struct rl_wire_req req;
        uint64_t base, k0, k1, bytes;
        char user[16];

        memset(&req, 0, sizeof(req));
        req.op = RL_WIRE_OP_CHECK;
        req.service = (struct rl_wire_str){runs[r].service, (uint32_t)strlen(runs[r].service)};
        req.cost = 1;
        base = bench_mem(l, &k0);
        for (unsigned s = 0; s < runs[r].slots; s++) {
            for (unsigned k = 0; k < runs[r].keys; k++) {
                req.user =
                    (struct rl_wire_str){user, (uint32_t)snprintf(user, sizeof(user), "u%u", k)};
                rl_limiter_check_epoch(l, &req, 1000000 + s, 0, &rep);
                if (rep.code != RL_WIRE_ALLOWED) {
                    fprintf(stderr, "limiter_settle_bench: refused\n");
                    return 1;
                }
            }
        }
        bytes = bench_mem(l, &k1);
        printf("%s: %llu keys, %.0f bytes per key (memory_bytes %llu, empty table %llu)\n",
               runs[r].what, (unsigned long long)(k1 - k0),
               (double)(bytes - base) / (double)(k1 - k0), (unsigned long long)bytes,
               (unsigned long long)base);
        rl_limiter_destroy(l);
        rl_conf_destroy(conf);
    }
    return 0;
}

int
main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[argc - 1] : "";
    unsigned keys = argc > 2 ? (unsigned)atoi(argv[1]) : 1000000;
    unsigned rounds = argc > 3 ? (unsigned)atoi(argv[2]) : 5;
    static char users[NREQ][12];
    static struct rl_wire_req reqs[NREQ];
    uint64_t seed = 1;

    if (strcmp(mode, "memory") == 0) {
        return bench_memory();
    }
    if (strcmp(mode, "settle") != 0 || keys < 1 || rounds < 1) {
        fprintf(stderr, "usage: limiter_settle_bench [K [ROUNDS]] settle | "
                        "limiter_settle_bench memory\n");
        return 2;
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
    return bench_settle(reqs, keys, rounds);
}
