/*
 * say: how rl-rebalance speaks. The report goes to standard output unless --quiet; errors go
 * to standard error with the tool's name, and rb_fail returns the runtime-error exit status
 * so a caller can `return rb_fail(...)`. Also the report's number formats (1,234,567 and
 * percentages) and its bars, in Unicode eighths of a cell or in '#'. Formatting only: what
 * is said is up to the callers (report.h, store.h, rollback.h, level.h).
 */
#ifndef RB_SAY_H
#define RB_SAY_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "run.h"

/* The report: printf to stdout, unless --quiet. */
void rb_say(const struct rb_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "rl-rebalance: " and the message on stderr, without a newline. */
void rb_verror(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/* "rl-rebalance: " and the message on stderr; returns RB_EXIT_FAIL. */
int rb_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* v as "1,234,567" in buf; returns buf. RB_COUNT(v) does so in a temporary buffer that lives
 * to the end of the enclosing block. */
const char *rb_count_str(char *buf, size_t len, uint64_t v);
#define RB_COUNT(v) rb_count_str((char[32]){0}, 32, (v))

/* part as a percentage of total (0 when total is 0). */
double rb_share(uint64_t part, uint64_t total);

/* What moving a shard costs its users, as the report says it: with ZooKeeper (and no
 * --out), the old owner hands the shard to the new one with its counters (handoff: only a
 * lost old owner restarts its shards from zero); otherwise the counters restart from zero. */
const char *rb_move_cost(const struct rb_run *r);

/* A bar of v out of max, RB_BAR_CELLS wide, through rb_say. */
#define RB_BAR_CELLS 40
void rb_print_bar(const struct rb_run *r, uint64_t v, uint64_t max);

#endif
