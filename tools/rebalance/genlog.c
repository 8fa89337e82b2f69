/*
 * rl-genlog: writes a synthetic router request log (router/reqlog.h's exact format) with
 * Zipf(s)-distributed keys, for the rebalance tool's tests and benchmarks. The same options
 * and seed give the same bytes. Key of rank r (0 = most requested) is service "svcN" with
 * N = r mod --services and user "u" + 16 hex digits of a bijective mix of (seed, r), so the
 * seed decides which shards the hot keys fall in. Not a load generator for servers (rl-bench).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parse.h"
#include "reqline.h"
#include "shardmap.h"

#define GENLOG_OUT_BUF (1u << 20)
#define GENLOG_NODES_MAX 1024u

struct genlog {
    uint64_t keys;
    double zipf;
    uint64_t lines;
    uint64_t seed;
    uint64_t draw_seed;
    bool draw_seed_set;
    uint32_t shards;
    uint32_t services;
    uint64_t start_ms;
    uint64_t rate;
    struct rl_member *nodes;
    size_t nnodes;
};

static void
usage(FILE *f)
{
    fprintf(f, "usage: rl-genlog [options] > requests.log\n"
               "\n"
               "  --keys K        distinct keys (default 1000000)\n"
               "  --zipf S        Zipf exponent; 0 is uniform (default 1.0)\n"
               "  --lines N       lines to write (default 10000000)\n"
               "  --seed X        which keys are hot (default 1)\n"
               "  --draw-seed X   the random draws (default: --seed): another draw seed is\n"
               "                  another sample of the same traffic, same hot keys\n"
               "  --shards S      the cluster's shard count (default 4096)\n"
               "  --services N    services the keys are spread over (default 4)\n"
               "  --nodes A,B,..  live nodes, for the NODE column by rendezvous hashing\n"
               "                  (default none: \"-\")\n"
               "  --start-ms T    timestamp of the first line (default 1700000000000)\n"
               "  --rate R        lines per second of log time (default 100000)\n"
               "  --help, --version\n");
}

static uint64_t
mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* SplitMix64: small, fast and the same everywhere. */
static uint64_t
next64(uint64_t *state)
{
    return mix64(*state += 0x9e3779b97f4a7c15ull);
}

/* A number in min..max for an option: rl_parse_u64, 0 or -EINVAL. */
static int
parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    return rl_parse_u64(s, min, max, out) == NULL ? 0 : -EINVAL;
}

static int
parse_nodes(struct genlog *g, const char *list)
{
    const char *p = list;

    g->nodes = calloc(GENLOG_NODES_MAX, sizeof(*g->nodes));
    if (g->nodes == NULL) {
        return -ENOMEM;
    }
    while (*p != '\0') {
        size_t n = strcspn(p, ",");

        if (n == 0 || n >= RL_SHARDMAP_NAME_MAX || g->nnodes == GENLOG_NODES_MAX) {
            return -EINVAL;
        }
        memcpy(g->nodes[g->nnodes].name, p, n);
        snprintf(g->nodes[g->nnodes].addr, RL_SHARDMAP_NAME_MAX, "127.0.0.1:%zu", 7401 + g->nnodes);
        g->nnodes++;
        p += n;
        p += *p == ',';
    }
    return 0;
}

static int
write_all(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(STDOUT_FILENO, p, n);

        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w < 0) {
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void
key_name(const struct genlog *g, uint64_t r, char *svc, size_t *slen, char *user, size_t *ulen)
{
    *slen = (size_t)snprintf(svc, 32, "svc%u", (unsigned)(r % g->services));
    *ulen = (size_t)snprintf(user, 32, "u%016llx", (unsigned long long)mix64(g->seed ^ mix64(r)));
}

static int
generate(const struct genlog *g)
{
    double *cdf = NULL, sum = 0, u;
    uint32_t *guide = NULL;
    uint64_t *hash = NULL, rng = g->draw_seed_set ? g->draw_seed : g->seed, i, k;
    struct rl_shardmap *map = NULL;
    char *out = NULL, *p, svc[32], user[32];
    size_t slen, ulen, gi;
    int rc = -ENOMEM;

    cdf = malloc(g->keys * sizeof(*cdf));
    guide = malloc(g->keys * sizeof(*guide));
    hash = malloc(g->keys * sizeof(*hash));
    out = malloc(GENLOG_OUT_BUF);
    if (cdf == NULL || guide == NULL || hash == NULL || out == NULL) {
        goto out;
    }
    for (k = 0; k < g->keys; k++) {
        sum += g->zipf == 0 ? 1.0 : 1.0 / pow((double)(k + 1), g->zipf);
        cdf[k] = sum;
        key_name(g, k, svc, &slen, user, &ulen);
        hash[k] = rl_shardmap_key_hash(svc, slen, user, ulen);
    }
    for (k = 0; k < g->keys; k++) {
        cdf[k] /= sum;
    }
    cdf[g->keys - 1] = 1.0;
    /* guide[j]: the first key whose cdf reaches j / keys, so a draw starts next to its key. */
    for (k = 0, gi = 0; gi < g->keys; gi++) {
        while (cdf[k] < (double)gi / (double)g->keys) {
            k++;
        }
        guide[gi] = (uint32_t)k;
    }
    rc = rl_shardmap_create(&map, g->shards, g->nodes, g->nnodes, NULL);
    if (rc != 0) {
        goto out;
    }
    p = out;
    for (i = 0; i < g->lines; i++) {
        uint32_t shard, o;

        u = (double)(next64(&rng) >> 11) * 0x1.0p-53;
        gi = (size_t)(u * (double)g->keys);
        k = guide[gi < g->keys ? gi : g->keys - 1];
        while (cdf[k] <= u && k + 1 < g->keys) {
            k++;
        }
        key_name(g, k, svc, &slen, user, &ulen);
        shard = rl_shardmap_shard(hash[k], g->shards);
        o = rl_shardmap_owner(map, shard);
        p += rl_reqline_format(p, g->start_ms + i * 1000 / g->rate, shard,
                              o == RL_SHARDMAP_NONE ? NULL : map->members[o].name, 0, hash[k], svc,
                              slen, user, ulen);
        if ((size_t)(p - out) > GENLOG_OUT_BUF - RL_REQLINE_MAX) {
            rc = write_all(out, (size_t)(p - out));
            if (rc != 0) {
                goto out;
            }
            p = out;
        }
    }
    rc = write_all(out, (size_t)(p - out));
out:
    rl_shardmap_destroy(map);
    free(cdf);
    free(guide);
    free(hash);
    free(out);
    return rc;
}

int
main(int argc, char **argv)
{
    static const struct option longopts[] = {{"keys", required_argument, NULL, 'k'},
                                             {"zipf", required_argument, NULL, 'z'},
                                             {"draw-seed", required_argument, NULL, 'd'},
                                             {"lines", required_argument, NULL, 'n'},
                                             {"seed", required_argument, NULL, 's'},
                                             {"shards", required_argument, NULL, 'S'},
                                             {"services", required_argument, NULL, 'v'},
                                             {"nodes", required_argument, NULL, 'N'},
                                             {"start-ms", required_argument, NULL, 't'},
                                             {"rate", required_argument, NULL, 'r'},
                                             {"help", no_argument, NULL, 'h'},
                                             {"version", no_argument, NULL, 'V'},
                                             {NULL, 0, NULL, 0}};
    struct genlog g = {.keys = 1000000,
                       .zipf = 1.0,
                       .lines = 10000000,
                       .seed = 1,
                       .shards = 4096,
                       .services = 4,
                       .start_ms = 1700000000000ull,
                       .rate = 100000};
    uint64_t v;
    char *end;
    int opt, rc;

    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        rc = 0;
        switch (opt) {
        case 'k':
            rc = parse_u64(optarg, 1, UINT32_MAX, &g.keys);
            break;
        case 'z':
            errno = 0;
            g.zipf = strtod(optarg, &end);
            rc = errno != 0 || *end != '\0' || end == optarg || !(g.zipf >= 0 && g.zipf <= 10)
                     ? -EINVAL
                     : 0;
            break;
        case 'n':
            rc = parse_u64(optarg, 0, UINT64_MAX / 1000, &g.lines);
            break;
        case 's':
            rc = parse_u64(optarg, 0, UINT64_MAX, &g.seed);
            break;
        case 'd':
            rc = parse_u64(optarg, 0, UINT64_MAX, &g.draw_seed);
            g.draw_seed_set = true;
            break;
        case 'S':
            rc = parse_u64(optarg, 1, RL_SHARDMAP_SHARDS_MAX, &v);
            g.shards = (uint32_t)v;
            break;
        case 'v':
            rc = parse_u64(optarg, 1, 1000000, &v);
            g.services = (uint32_t)v;
            break;
        case 'N':
            free(g.nodes);
            g.nodes = NULL;
            g.nnodes = 0;
            rc = parse_nodes(&g, optarg);
            break;
        case 't':
            rc = parse_u64(optarg, 0, UINT64_MAX / 2, &g.start_ms);
            break;
        case 'r':
            rc = parse_u64(optarg, 1, 1000000000, &g.rate);
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("rl-genlog %s\n", RL_VERSION);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
        if (rc != 0) {
            fprintf(stderr, "rl-genlog: bad value for %s: %s\n", argv[optind - 1],
                    optarg != NULL ? optarg : "");
            free(g.nodes);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "rl-genlog: unexpected argument %s\n", argv[optind]);
        free(g.nodes);
        return 2;
    }
    rc = generate(&g);
    free(g.nodes);
    if (rc != 0) {
        fprintf(stderr, "rl-genlog: %s\n", strerror(-rc));
        return 1;
    }
    return 0;
}
