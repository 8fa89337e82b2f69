/*
 * report: rl-bench's interval lines and summary (report.h).
 */
#include <stdio.h>
#include <stdlib.h>

#include "report.h"

const char *const lg_count_names[BENCH_NCOUNTS] = {
#define BENCH_NAME(n, v, s) s,
    RL_WIRE_CODE_MAP(BENCH_NAME)
#undef BENCH_NAME
        "errors",
    "lost",
};

void
lg_print_summary(struct bench *b)
{
    const struct opts *o = &b->o;
    struct rl_hist *h = calloc(1, sizeof(*h));
    uint64_t counts[BENCH_NCOUNTS] = {0}, decisions = 0, sent = 0, elapsed = 0;
    double secs, p50, p99, p999, pmax;
    unsigned i, k;

    if (h == NULL) {
        return;
    }
    for (i = 0; i < o->threads; i++) {
        struct worker *w = &b->workers[i];

        rl_hist_merge(h, &w->hist);
        for (k = 0; k < BENCH_NCOUNTS; k++) {
            counts[k] += w->counts[k];
        }
        sent += w->sent;
        if (w->running && w->t_end - w->t0 > elapsed) {
            elapsed = w->t_end - w->t0;
        }
    }
    for (k = 0; k < RL_WIRE_CODE_COUNT; k++) {
        decisions += counts[k];
    }
    secs = (double)elapsed / 1e9;
    p50 = (double)rl_hist_quantile(h, 0.50) / 1e3;
    p99 = (double)rl_hist_quantile(h, 0.99) / 1e3;
    p999 = (double)rl_hist_quantile(h, 0.999) / 1e3;
    pmax = (double)h->max / 1e3;
    if (o->json) {
        printf("{\"type\":\"summary\",\"target\":\"%s\",\"threads\":%u,\"connections\":%u,"
               "\"pipeline\":%u,\"keys\":%u,\"dist\":\"%s\",\"zipf_s\":%g,\"rate\":%g,"
               "\"seconds\":%.6f,\"requests\":%llu,\"decisions\":%llu,\"decisions_per_s\":%.1f",
               o->target, o->threads, o->connections, o->pipeline, o->keys,
               o->sequential ? "sequential" : (o->dist == DIST_ZIPF ? "zipf" : "uniform"),
               o->zipf_s, o->rate, secs, (unsigned long long)sent, (unsigned long long)decisions,
               secs > 0 ? (double)decisions / secs : 0.0);
        for (k = 0; k < BENCH_NCOUNTS; k++) {
            printf(",\"%s\":%llu", lg_count_names[k], (unsigned long long)counts[k]);
        }
        printf(",\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f}\n", p50, p99,
               p999, pmax);
    } else {
        printf("target        %s (%u thread%s, %u connections, pipeline %u%s)\n", o->target,
               o->threads, o->threads == 1 ? "" : "s", o->connections, o->pipeline,
               o->rate > 0 ? ", open loop" : "");
        printf("keys          %u %s\n", o->keys,
               o->sequential ? "sequential" : (o->dist == DIST_ZIPF ? "zipf" : "uniform"));
        printf("duration      %.3f s\n", secs);
        printf("requests      %llu\n", (unsigned long long)sent);
        printf("decisions     %llu\n", (unsigned long long)decisions);
        printf("decisions/s   %.0f\n", secs > 0 ? (double)decisions / secs : 0.0);
        for (k = 0; k < BENCH_NCOUNTS; k++) {
            printf("%-13s %llu\n", lg_count_names[k], (unsigned long long)counts[k]);
        }
        printf("latency_us    p50 %.1f  p99 %.1f  p999 %.1f  max %.1f\n", p50, p99, p999, pmax);
    }
    fflush(stdout);
    free(h);
}

void
lg_print_interval(const struct bench *b, double t, double secs, const uint64_t d[BENCH_NCOUNTS])
{
    uint64_t decisions = 0;
    unsigned k;

    for (k = 0; k < RL_WIRE_CODE_COUNT; k++) {
        decisions += d[k];
    }
    if (b->o.json) {
        printf("{\"type\":\"interval\",\"t\":%.3f,\"decisions_per_s\":%.1f", t,
               secs > 0 ? (double)decisions / secs : 0.0);
        for (k = 0; k < BENCH_NCOUNTS; k++) {
            printf(",\"%s\":%llu", lg_count_names[k], (unsigned long long)d[k]);
        }
        printf("}\n");
    } else {
        printf("t=%.3f decisions/s=%.0f", t, secs > 0 ? (double)decisions / secs : 0.0);
        for (k = 0; k < BENCH_NCOUNTS; k++) {
            printf(" %s=%llu", lg_count_names[k], (unsigned long long)d[k]);
        }
        printf("\n");
    }
    fflush(stdout);
}
