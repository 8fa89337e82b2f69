/*
 * report: what rl-rebalance tells a person about a plan, section by section: the logs read
 * (totals, sampling, malformed lines and why), the nodes before and after with their bars,
 * the plan (the ratio, the largest moves, why it stopped, the overrides), hot keys and hot
 * shards with what an operator can do about them; then the one summary line for scripts,
 * "summary: key=value ...", the last line of the output (docs/REBALANCE.md). It reads the
 * run (run.h) and prints through say.h; it decides and writes nothing.
 */
#ifndef RB_REPORT_H
#define RB_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "run.h"

/* The totals of the log scan (logs.h). */
void rb_report_logs(const struct rb_run *r);

/* Needs the plan: the nodes' load before and after. */
void rb_report_nodes(const struct rb_run *r);

/* The plan; dead_overrides counts the overrides in force naming nodes that are not live. */
void rb_report_plan(const struct rb_run *r, uint32_t dead_overrides);

/* Hot keys and hot shards; returns the count of hot keys. */
size_t rb_report_hot(const struct rb_run *r);

/* The summary line of a rebalance; written is what the Result section said ("none",
 * "dry-run", "file", "zk", "unchanged", "conflict", "error"), newv the version written. */
void rb_report_summary(const struct rb_run *r, size_t hot, const char *written, int64_t newv);

/* Ends a summary line: " version=V" when written is "zk", then the newline. */
void rb_summary_end(const char *written, int64_t newv);

/* The `written=` word for a write that failed with exit status rc. */
const char *rb_written_failed(int rc);

#endif
