/*
 * args: rl-rebalance's command line. The options and their defaults, their checks (a usage
 * error exits 2 with a hint at --help), --help's text and --version. What the options mean
 * is docs/REBALANCE.md's; this only reads them into struct rb_opts (run.h).
 */
#ifndef RB_ARGS_H
#define RB_ARGS_H

#include <stdbool.h>
#include <stdio.h>

#include "run.h"

/*
 * Reads argv into o. Returns RB_EXIT_OK, with *done set after --help or --version (printed
 * here), or RB_EXIT_USAGE after printing the error.
 */
int rb_parse_opts(struct rb_opts *o, int argc, char **argv, bool *done);

/* --help's text. */
void rb_usage(FILE *f);

/* "rl-rebalance: " and the message, then the hint at --help, on stderr; returns
 * RB_EXIT_USAGE. */
int rb_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
