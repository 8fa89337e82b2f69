/*
 * rls_meta_bench: what a ShouldRateLimit answer's dynamic_metadata costs the router, without
 * the network (docs/BENCHMARKS.md, "gRPC rate limit service"): rls_meta_bound + rls_meta_write
 * (router/rls_meta.c, the Struct written by hand) per call, against protobuf-c sizing and
 * packing the same Struct from its message tree (what the router did before, its building
 * of the tree not counted). For one descriptor and for four. Thread CPU time, best of 5
 * rounds. Not a test: it checks only that protobuf-c packs the same bytes.
 *   build/rls_meta_bench [ITERATIONS]   (default 1000000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "google/protobuf/struct.pb-c.h"
#include "rls_int.h"

#include "bench_util.h"

typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry rls_entry;

/* A call of n descriptors (tenant=acme, plan=free), descriptor 0 decided by its limit. */
static void
measure(size_t n, long iters)
{
    static char key0[] = "tenant", val0[] = "acme", key1[] = "plan", val1[] = "free";
    static char domain[] = "edge", name[] = "", full[] = "edge.tenant.plan";
    rls_request req = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    rls_descriptor d[4], *dp[4];
    rls_entry e[2] = {ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT,
                      ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT};
    rls_entry *ep[2] = {&e[0], &e[1]};
    struct rl_envoy_limit lim = {
        .requests_per_unit = 100, .unit = RL_ENVOY_UNIT_MINUTE, .name = name};
    struct rl_envoy_desc matched = {.full_key = full};
    struct rls_desc descs[4];
    struct rl_rls_part part = {.desc = 0, .lim = &lim, .remaining = 99};
    struct rl_rls_call call;
    struct rls_decided dec = {.desc = 0, .part = &part, .over = false, .remaining = 99};
    static uint8_t buf[1 << 16];
    double best_hand = 1e300, best_pbc = 1e300;
    size_t len = 0, hdr;
    Google__Protobuf__Struct *tree;
    volatile size_t sink = 0;

#define BYTES(s) ((ProtobufCBinaryData){sizeof(s) - 1, (uint8_t *)(s)})
    e[0].key = BYTES(key0), e[0].value = BYTES(val0);
    e[1].key = BYTES(key1), e[1].value = BYTES(val1);
    memset(descs, 0, sizeof(descs));
    for (size_t i = 0; i < n; i++) {
        Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor init =
            ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT;

        d[i] = init;
        d[i].n_entries = 2;
        d[i].entries = ep;
        dp[i] = &d[i];
        descs[i].limits = &lim;
        descs[i].nlimits = 1;
        descs[i].matched = &matched;
    }
    req.domain = BYTES(domain);
    req.n_descriptors = n;
    req.descriptors = dp;
    memset(&call, 0, sizeof(call));
    call.req = &req;
    call.descs = descs;
    call.parts = &part;
    call.nparts = 1;

    for (int round = 0; round < 5; round++) {
        double t0 = cpu_ns(), t1;

        for (long k = 0; k < iters; k++) {
            size_t b = rls_meta_bound(&call, &dec);

            len = rls_meta_write(buf + b, &call, &dec);
            sink += len;
        }
        t1 = cpu_ns();
        if ((t1 - t0) / (double)iters < best_hand) {
            best_hand = (t1 - t0) / (double)iters;
        }
    }
    /* the same Struct as protobuf-c's message tree: unpacked from the field's bytes */
    {
        size_t b = rls_meta_bound(&call, &dec);
        uint8_t *m = buf + b - len, *out = malloc(len);

        hdr = 1 + (m[1] < 0x80 ? 1 : 2); /* the field's tag and length */
        tree = google__protobuf__struct__unpack(NULL, len - hdr, m + hdr);
        if (tree == NULL || out == NULL ||
            google__protobuf__struct__get_packed_size(tree) != len - hdr ||
            google__protobuf__struct__pack(tree, out) != len - hdr ||
            memcmp(out, m + hdr, len - hdr) != 0) {
            fprintf(stderr, "rls_meta_bench: protobuf-c does not pack the same bytes\n");
            exit(1);
        }
        for (int round = 0; round < 5; round++) {
            double t0 = cpu_ns(), t1;

            for (long k = 0; k < iters; k++) {
                size_t sz = google__protobuf__struct__get_packed_size(tree);

                sink += google__protobuf__struct__pack(tree, out) + sz;
            }
            t1 = cpu_ns();
            if ((t1 - t0) / (double)iters < best_pbc) {
                best_pbc = (t1 - t0) / (double)iters;
            }
        }
        google__protobuf__struct__free_unpacked(tree, NULL);
        free(out);
    }
    printf("%zu descriptor(s): %zu bytes; by hand %.0f ns per call; protobuf-c size+pack %.0f "
           "ns (tree not counted); %.1fx\n",
           n, len, best_hand, best_pbc, best_pbc / best_hand);
    (void)sink;
}

int
main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 1000000;

    if (iters <= 0) {
        fprintf(stderr, "usage: rls_meta_bench [ITERATIONS]\n");
        return 2;
    }
    measure(1, iters);
    measure(4, iters);
    return 0;
}
