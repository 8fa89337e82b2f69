/*
 * options: rl-bench's command line (docs/BENCHMARKS.md): the options and their defaults,
 * their ranges, --help and --version, and the AUTH token read from --token-file or
 * $RL_TOKEN_FILE. Only reads them into struct opts (loadgen.h); nothing here connects.
 */
#ifndef LG_OPTIONS_H
#define LG_OPTIONS_H

#include "loadgen.h"

/* Returns 0, 1 for --help/--version (done), or 2 after printing a usage error. */
int lg_parse_opts(int argc, char **argv, struct opts *o);

#endif
