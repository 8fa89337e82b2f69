/*
 * report: what rl-bench prints: a line per --report-every interval (the decisions per
 * second and each tally's count in the interval), and at the end the summary (the run's
 * shape, its length, requests sent, decisions and their rate, each tally, and the p50, p99,
 * p99.9 and max latency from the merged histograms). As text, or with --json as one JSON
 * object per line ("type": "interval" or "summary"); docs/BENCHMARKS.md and bench/lib.sh
 * read these. Printing only: the counting is the workers' and the control loop's.
 */
#ifndef LG_REPORT_H
#define LG_REPORT_H

#include <stdint.h>

#include "loadgen.h"

/* An interval's line: t seconds into the run, d the tallies over its secs seconds. */
void lg_print_interval(const struct bench *b, double t, double secs,
                       const uint64_t d[BENCH_NCOUNTS]);

/* The summary, from the finished workers. */
void lg_print_summary(struct bench *b);

#endif
