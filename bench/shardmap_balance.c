/*
 * shardmap_balance: measures how evenly shards spread over nodes, and how many move when a
 * node leaves or joins, for the shard map's rendezvous hashing (common/shardmap.c) against a
 * consistent-hash ring with virtual nodes, so docs/SHARDING.md can justify the choice. A
 * standalone program, not a test: it prints tables and checks nothing but minimal movement.
 *
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Icommon \
 *       bench/shardmap_balance.c common/shardmap.c -lxxhash -o shardmap_balance
 *   ./shardmap_balance [SHARDS] [NAME_SETS]
 */
#include "shardmap.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define NMAX 65 /* 64 nodes, and one more joining */

/* One placement scheme: fills owner[s] with an index into members (sorted by name). */
struct scheme {
    const char *name;
    unsigned vnodes; /* 0 for HRW */
};

static const struct scheme schemes[] = {
    {"hrw", 0},
    {"ring100", 100},
    {"ring200", 200},
};
#define NSCHEMES (sizeof(schemes) / sizeof(schemes[0]))

static uint64_t
rand64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

struct point {
    uint64_t pos;
    uint32_t member;
};

static int
point_cmp(const void *x, const void *y)
{
    const struct point *a = x, *b = y;

    if (a->pos != b->pos) {
        return a->pos < b->pos ? -1 : 1;
    }
    return a->member < b->member ? -1 : a->member > b->member;
}

/*
 * A ketama-style ring: vnode i of member m sits at XXH3_64("NAME#i"); shard s sits at
 * XXH3_64 of its 4 little-endian bytes and belongs to the first vnode at or after it.
 */
static void
ring_place(uint32_t *owner, uint32_t nshards, const struct rl_member *m, size_t n, unsigned vnodes)
{
    struct point *pts = malloc(n * vnodes * sizeof(*pts));
    size_t np = n * vnodes, i, lo, hi, mid;
    char buf[RL_SHARDMAP_NAME_MAX + 16];
    unsigned char le[4];
    uint64_t pos;
    uint32_t s;
    unsigned v;
    int len;

    if (pts == NULL) {
        abort();
    }
    for (i = 0; i < n; i++) {
        for (v = 0; v < vnodes; v++) {
            len = snprintf(buf, sizeof(buf), "%s#%u", m[i].name, v);
            pts[i * vnodes + v].pos = XXH3_64bits(buf, (size_t)len);
            pts[i * vnodes + v].member = (uint32_t)i;
        }
    }
    qsort(pts, np, sizeof(*pts), point_cmp);
    for (s = 0; s < nshards; s++) {
        le[0] = (unsigned char)s;
        le[1] = (unsigned char)(s >> 8);
        le[2] = (unsigned char)(s >> 16);
        le[3] = (unsigned char)(s >> 24);
        pos = XXH3_64bits(le, 4);
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
    free(pts);
}

static int
member_cmp(const void *x, const void *y)
{
    return strcmp(((const struct rl_member *)x)->name, ((const struct rl_member *)y)->name);
}

/* owner[s] as an index into m, which the caller sorted by name. */
static void
place(const struct scheme *sc, uint32_t *owner, uint32_t nshards, const struct rl_member *m,
      size_t n)
{
    struct rl_shardmap *sm;
    uint32_t s;

    if (sc->vnodes > 0) {
        ring_place(owner, nshards, m, n, sc->vnodes);
        return;
    }
    if (rl_shardmap_create(&sm, nshards, m, n, NULL) != 0) {
        abort();
    }
    for (s = 0; s < nshards; s++) {
        owner[s] = sm->owner[s]; /* m is sorted, so indices agree */
    }
    rl_shardmap_destroy(sm);
}

static double
max_over_mean(const uint32_t *owner, uint32_t nshards, size_t n)
{
    uint32_t count[NMAX] = {0}, max = 0, s;
    size_t i;

    for (s = 0; s < nshards; s++) {
        count[owner[s]]++;
    }
    for (i = 0; i < n; i++) {
        max = count[i] > max ? count[i] : max;
    }
    return (double)max * (double)n / (double)nshards;
}

/* The same figure for shards thrown uniformly at random: what an ideal hash would give. */
static double
uniform_max_over_mean(uint32_t nshards, size_t n, uint64_t *st)
{
    uint32_t *owner = malloc(nshards * sizeof(*owner)), s;
    double r;

    if (owner == NULL) {
        abort();
    }
    for (s = 0; s < nshards; s++) {
        owner[s] = (uint32_t)(rand64(st) % n);
    }
    r = max_over_mean(owner, nshards, n);
    free(owner);
    return r;
}

struct moves {
    double leave;       /* shards moved when one node leaves, averaged over which one */
    double join;        /* shards moved when one node joins */
    uint32_t leave_max; /* the most moved by any one leaver */
    uint32_t stray;     /* moves not to or from the changed node: must be 0 */
};

/*
 * Leaves: every member in turn; joins: m[n] joins m[0..n). Indices are compared by name, as
 * the member arrays of the two tables differ.
 */
static struct moves
movement(const struct scheme *sc, uint32_t nshards, const struct rl_member *all, size_t n)
{
    struct rl_member m[NMAX], rest[NMAX];
    uint32_t *a = malloc(nshards * sizeof(*a)), *b = malloc(nshards * sizeof(*b));
    struct moves mv = {0};
    size_t gone, i, j;
    uint32_t s, moved;
    const char *was, *now;

    if (a == NULL || b == NULL) {
        abort();
    }
    memcpy(m, all, n * sizeof(*m));
    qsort(m, n, sizeof(*m), member_cmp);
    place(sc, a, nshards, m, n);
    for (gone = 0; gone < n; gone++) {
        for (i = 0, j = 0; i < n; i++) {
            if (i != gone) {
                rest[j++] = m[i];
            }
        }
        place(sc, b, nshards, rest, n - 1);
        moved = 0;
        for (s = 0; s < nshards; s++) {
            was = m[a[s]].name;
            now = rest[b[s]].name;
            if (strcmp(was, now) != 0) {
                moved++;
                mv.stray += a[s] != gone;
            }
        }
        mv.leave += moved;
        mv.leave_max = moved > mv.leave_max ? moved : mv.leave_max;
    }
    mv.leave /= (double)n;

    memcpy(m, all, (n + 1) * sizeof(*m));
    qsort(m, n + 1, sizeof(*m), member_cmp);
    memcpy(rest, all, n * sizeof(*rest));
    qsort(rest, n, sizeof(*rest), member_cmp);
    place(sc, a, nshards, rest, n);
    place(sc, b, nshards, m, n + 1);
    for (s = 0; s < nshards; s++) {
        was = rest[a[s]].name;
        now = m[b[s]].name;
        if (strcmp(was, now) != 0) {
            mv.join++;
            mv.stray += strcmp(now, all[n].name) != 0;
        }
    }
    free(a);
    free(b);
    return mv;
}

static void
node_names(struct rl_member *m, size_t n)
{
    size_t i;

    memset(m, 0, n * sizeof(*m));
    for (i = 0; i < n; i++) {
        snprintf(m[i].name, sizeof(m[i].name), "node-%zu", i + 1);
    }
}

/* Host-like names, "rl-" and 12 random hex digits, distinct within a set. */
static void
random_names(struct rl_member *m, size_t n, uint64_t *st)
{
    size_t i;

    memset(m, 0, n * sizeof(*m));
    for (i = 0; i < n; i++) {
        snprintf(m[i].name, sizeof(m[i].name), "rl-%012llx",
                 (unsigned long long)(rand64(st) & 0xffffffffffffull));
    }
}

static bool
report_n(size_t n)
{
    return n <= 8 || n == 10 || n == 12 || n == 16 || n == 20 || n == 24 || n == 32 || n == 40 ||
           n == 48 || n == 56 || n == 64;
}

int
main(int argc, char **argv)
{
    uint32_t nshards = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 4096;
    unsigned sets = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 20;
    struct rl_member named[NMAX], m[NMAX];
    uint32_t *owner = malloc(nshards * sizeof(*owner));
    double worst[NSCHEMES] = {0}, rnd[NSCHEMES], rnd_worst[NSCHEMES], uni;
    uint64_t st;
    size_t n, k;
    unsigned set;
    uint32_t stray = 0;

    if (owner == NULL || nshards == 0 || nshards > RL_SHARDMAP_SHARDS_MAX || sets == 0) {
        fprintf(stderr, "usage: shardmap_balance [SHARDS] [NAME_SETS]\n");
        return 2;
    }
    printf("S=%u shards; names node-1..node-N, and %u sets of random names \"rl-<12 hex>\"\n",
           nshards, sets);
    printf("max/mean shards per node (node-i names | random names: mean of sets, worst set "
           "| uniform random placement, mean)\n");
    printf("%3s | %7s %7s %7s | %11s %11s %11s | %7s\n", "N", "hrw", "ring100", "ring200", "hrw",
           "ring100", "ring200", "uniform");
    node_names(named, NMAX);
    for (n = 2; n <= 64; n++) {
        memcpy(m, named, n * sizeof(*m));
        qsort(m, n, sizeof(*m), member_cmp);
        printf("%3zu |", n);
        for (k = 0; k < NSCHEMES; k++) {
            double r;

            place(&schemes[k], owner, nshards, m, n);
            r = max_over_mean(owner, nshards, n);
            worst[k] = r > worst[k] ? r : worst[k];
            printf(" %7.3f", r);
        }
        st = 1;
        for (k = 0; k < NSCHEMES; k++) {
            rnd[k] = 0;
            rnd_worst[k] = 0;
        }
        uni = 0;
        for (set = 0; set < sets; set++) {
            random_names(m, n, &st);
            qsort(m, n, sizeof(*m), member_cmp);
            for (k = 0; k < NSCHEMES; k++) {
                double r;

                place(&schemes[k], owner, nshards, m, n);
                r = max_over_mean(owner, nshards, n);
                rnd[k] += r / sets;
                rnd_worst[k] = r > rnd_worst[k] ? r : rnd_worst[k];
            }
            uni += uniform_max_over_mean(nshards, n, &st) / sets;
        }
        printf(" |");
        for (k = 0; k < NSCHEMES; k++) {
            printf(" %5.3f/%5.3f", rnd[k], rnd_worst[k]);
        }
        printf(" | %7.3f\n", uni);
    }
    printf("worst over N=2..64, node-i names:");
    for (k = 0; k < NSCHEMES; k++) {
        printf(" %s %.3f", schemes[k].name, worst[k]);
    }
    printf("\n\nmovement, node-i names: shards moved when one node leaves (mean over which "
           "one, and the most; ideal S/N), and when node-(N+1) joins (ideal S/(N+1))\n");
    printf("%3s | %6s | %15s %15s %15s | %7s | %7s %7s %7s\n", "N", "S/N", "hrw leave",
           "ring100 leave", "ring200 leave", "S/(N+1)", "hrw+1", "r100+1", "r200+1");
    for (n = 2; n <= 64; n++) {
        struct moves all[NSCHEMES];

        for (k = 0; k < NSCHEMES; k++) {
            all[k] = movement(&schemes[k], nshards, named, n);
            stray += all[k].stray;
        }
        if (!report_n(n)) {
            continue;
        }
        printf("%3zu | %6.1f |", n, (double)nshards / (double)n);
        for (k = 0; k < NSCHEMES; k++) {
            printf(" %7.1f (%5u)", all[k].leave, all[k].leave_max);
        }
        printf(" | %7.1f |", (double)nshards / (double)(n + 1));
        for (k = 0; k < NSCHEMES; k++) {
            printf(" %7.0f", all[k].join);
        }
        printf("\n");
    }
    printf("moves between unchanged nodes, all schemes, N=2..64: %u (must be 0)\n", stray);
    free(owner);
    return stray == 0 ? 0 : 1;
}
