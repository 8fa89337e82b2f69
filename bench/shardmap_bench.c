/*
 * shardmap_bench: times the router's per-request path through the shard map (key hash,
 * shard, owner) and the build of a whole table, median of several runs, and times the
 * alternatives docs/SHARDING.md weighs: the streaming XXH3 API, a call into libxxhash, an
 * XXH3-per-(member, shard) rendezvous weight, and a ring with virtual nodes. A standalone
 * program, not a test.
 *
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Icommon \
 *       bench/shardmap_bench.c common/shardmap.c -lxxhash -o shardmap_bench
 *   ./shardmap_bench [RUNS]
 */
#include "shardmap.h"
#include "assignment.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * XXH3 inlined here, as common/shardmap.c has it; lib_xxh3_64bits is the same function in
 * the shared libxxhash, for the variant that calls it.
 */
uint64_t lib_xxh3_64bits(const void *data, size_t len) __asm__("XXH3_64bits");
#define XXH_INLINE_ALL
#include <xxhash.h>

#define NKEYS (1u << 16)   /* distinct keys, cycled: 64 Ki keys stay in L2 as a router's would */
#define LOOKUPS (1u << 22) /* per run */
#define NSHARDS 4096u
#define NNODES 64u
#define RUNS_MAX 101

struct key {
    const char *service;
    size_t slen;
    char user[48];
    size_t ulen;
};

static struct key keys[NKEYS];
static volatile uint64_t sink; /* keeps the timed loops from being optimised away */

static uint64_t
rand64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double
now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int
double_cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;

    return a < b ? -1 : a > b;
}

static double
median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), double_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Users as services see them: numeric ids, IPv4 addresses and 32-hex API keys. */
static void
make_keys(void)
{
    static const char *services[] = {"checkout", "search", "api",    "login",
                                     "payments", "feed",   "upload", "notifications"};
    uint64_t st = 1, r;
    uint32_t i;
    int len = 0;

    for (i = 0; i < NKEYS; i++) {
        r = rand64(&st);
        keys[i].service = services[r % 8];
        keys[i].slen = strlen(keys[i].service);
        switch ((r >> 8) % 3) {
        case 0:
            len = snprintf(keys[i].user, sizeof(keys[i].user), "u%llu",
                           (unsigned long long)(r >> 20) % 100000000);
            break;
        case 1:
            len = snprintf(keys[i].user, sizeof(keys[i].user), "10.%u.%u.%u",
                           (unsigned)(r >> 16) & 255, (unsigned)(r >> 24) & 255,
                           (unsigned)(r >> 32) & 255);
            break;
        default:
            len = snprintf(keys[i].user, sizeof(keys[i].user), "%016llx%016llx",
                           (unsigned long long)r, (unsigned long long)rand64(&st));
            break;
        }
        keys[i].ulen = (size_t)len;
    }
}

/*
 * Local variants of the key hash, all in this file so that they compare fairly with each
 * other (a call across files costs about 1 ns more here), none inlined into the loop.
 */
static __attribute__((noinline)) uint64_t
hash_streaming(const char *service, size_t slen, const char *user, size_t ulen)
{
    XXH3_state_t st;
    static const unsigned char zero = 0;

    XXH3_INITSTATE(&st);
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, service, slen);
    XXH3_64bits_update(&st, &zero, 1);
    XXH3_64bits_update(&st, user, ulen);
    return XXH3_64bits_digest(&st);
}

static __attribute__((noinline)) uint64_t
hash_inlined(const char *service, size_t slen, const char *user, size_t ulen)
{
    unsigned char buf[385];

    memcpy(buf, service, slen);
    buf[slen] = 0;
    memcpy(buf + slen + 1, user, ulen);
    return XXH3_64bits(buf, slen + 1 + ulen);
}

static __attribute__((noinline)) uint64_t
hash_library(const char *service, size_t slen, const char *user, size_t ulen)
{
    unsigned char buf[385];

    memcpy(buf, service, slen);
    buf[slen] = 0;
    memcpy(buf + slen + 1, user, ulen);
    return lib_xxh3_64bits(buf, slen + 1 + ulen);
}

enum path { PATH_LOOKUP, PATH_HASH, PATH_INLINED, PATH_LIBRARY, PATH_STREAMING };

static const char *const path_names[] = {
    "lookup: key hash + shard + owner (rl_shardmap_*)",
    "key hash (rl_shardmap_key_hash, XXH3 inlined)",
    "  local: stack buffer + XXH3 inlined",
    "  local: stack buffer + libxxhash call (rejected)",
    "  local: streaming XXH3 API (rejected)",
};
#define NPATHS (sizeof(path_names) / sizeof(path_names[0]))

/* One run: ns per key. */
static double
time_path(enum path p, const struct rl_shardmap *sm)
{
    uint64_t acc = 0;
    uint32_t i, k;
    double t0, t1;
    const struct key *key;

    t0 = now_ns();
    for (i = 0; i < LOOKUPS; i++) {
        key = &keys[i & (NKEYS - 1)];
        switch (p) {
        case PATH_LOOKUP:
            k = rl_shardmap_shard(
                rl_shardmap_key_hash(key->service, key->slen, key->user, key->ulen), sm->nshards);
            acc += rl_shardmap_owner(sm, k);
            break;
        case PATH_HASH:
            acc += rl_shardmap_key_hash(key->service, key->slen, key->user, key->ulen);
            break;
        case PATH_STREAMING:
            acc += hash_streaming(key->service, key->slen, key->user, key->ulen);
            break;
        case PATH_INLINED:
            acc += hash_inlined(key->service, key->slen, key->user, key->ulen);
            break;
        case PATH_LIBRARY:
            acc += hash_library(key->service, key->slen, key->user, key->ulen);
            break;
        }
    }
    t1 = now_ns();
    sink += acc;
    return (t1 - t0) / LOOKUPS;
}

/* The alternative weight: one XXH3 per (member, shard), seeded with the shard. */
static void
build_xxh3_weights(uint32_t *owner, const struct rl_member *m, size_t n)
{
    uint64_t w, bw;
    uint32_t s;
    size_t i;

    for (s = 0; s < NSHARDS; s++) {
        owner[s] = 0;
        bw = XXH3_64bits_withSeed(m[0].name, strlen(m[0].name), s);
        for (i = 1; i < n; i++) {
            w = XXH3_64bits_withSeed(m[i].name, strlen(m[i].name), s);
            if (w > bw) {
                bw = w;
                owner[s] = (uint32_t)i;
            }
        }
    }
}

struct point {
    uint64_t pos;
    uint32_t member;
};

static int
point_cmp(const void *x, const void *y)
{
    const struct point *a = x, *b = y;

    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

/* A ring of 200 vnodes per member, as bench/shardmap_balance.c builds it. */
static void
build_ring(uint32_t *owner, const struct rl_member *m, size_t n)
{
    static struct point pts[NNODES * 200];
    size_t np = n * 200, i, lo, hi, mid;
    char buf[RL_SHARDMAP_NAME_MAX + 16];
    uint64_t pos;
    uint32_t s;
    unsigned v;
    int len;

    for (i = 0; i < n; i++) {
        for (v = 0; v < 200; v++) {
            len = snprintf(buf, sizeof(buf), "%s#%u", m[i].name, v);
            pts[i * 200 + v].pos = XXH3_64bits(buf, (size_t)len);
            pts[i * 200 + v].member = (uint32_t)i;
        }
    }
    qsort(pts, np, sizeof(*pts), point_cmp);
    for (s = 0; s < NSHARDS; s++) {
        pos = XXH3_64bits(&s, 4);
        lo = 0;
        hi = np;
        while (lo < hi) {
            mid = lo + (hi - lo) / 2;
            if (pts[mid].pos < pos) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        owner[s] = pts[lo == np ? 0 : lo].member;
    }
}

int
main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 11, r;
    struct rl_member m[NNODES];
    struct rl_assignment a;
    struct rl_shardmap *sm;
    static uint32_t owner[NSHARDS];
    static double tp[NPATHS][RUNS_MAX];
    double t[RUNS_MAX], t0;
    unsigned p;
    uint32_t s;
    size_t i;

    if (runs < 1 || runs > RUNS_MAX) {
        fprintf(stderr, "usage: shardmap_bench [RUNS (1..%d)]\n", RUNS_MAX);
        return 2;
    }
    memset(m, 0, sizeof(m));
    for (i = 0; i < NNODES; i++) {
        snprintf(m[i].name, sizeof(m[i].name), "node-%zu", i + 1);
        snprintf(m[i].addr, sizeof(m[i].addr), "10.0.0.%zu:7401", i + 1);
    }
    make_keys();
    if (rl_shardmap_create(&sm, NSHARDS, m, NNODES, NULL) != 0 ||
        rl_assignment_init(&a, NSHARDS) != 0) {
        return 1;
    }
    printf("%u keys cycled, %u lookups a run, S=%u, N=%u, median of %d runs\n", NKEYS, LOOKUPS,
           NSHARDS, NNODES, runs);
    /* Round-robin over the variants, so that noise from other processes hits all alike. */
    for (p = 0; p < NPATHS; p++) {
        time_path((enum path)p, sm); /* warm-up */
    }
    for (r = 0; r < runs; r++) {
        for (p = 0; p < NPATHS; p++) {
            tp[p][r] = time_path((enum path)p, sm);
        }
    }
    for (p = 0; p < NPATHS; p++) {
        printf("  %-52s %6.2f ns/key\n", path_names[p], median(tp[p], runs));
    }

    /* Table builds: the work a router does on each membership or assignment change. */
    for (s = 0; s < NSHARDS; s += 10) {
        rl_assignment_set(&a, s, m[s % NNODES].name); /* 410 overrides */
    }
    for (p = 0; p < 4; p++) {
        for (r = 0; r < runs; r++) {
            struct rl_shardmap *b = NULL;

            t0 = now_ns();
            switch (p) {
            case 0:
                rl_shardmap_create(&b, NSHARDS, m, NNODES, NULL);
                break;
            case 1:
                rl_shardmap_create(&b, NSHARDS, m, NNODES, &a);
                break;
            case 2:
                build_xxh3_weights(owner, m, NNODES);
                break;
            default:
                build_ring(owner, m, NNODES);
                break;
            }
            t[r] = (now_ns() - t0) / 1e3;
            sink += b != NULL ? b->owner[1] : owner[1];
            rl_shardmap_destroy(b);
        }
        printf("  %-52s %8.1f us\n",
               p == 0   ? "build table, HRW (rl_shardmap_create)"
               : p == 1 ? "build table, HRW + 410 overrides"
               : p == 2 ? "build table, HRW with XXH3 per weight (rejected)"
                        : "build table, ring of 200 vnodes (rejected)",
               median(t, runs));
    }
    rl_assignment_deinit(&a);
    rl_shardmap_destroy(sm);
    return 0;
}
