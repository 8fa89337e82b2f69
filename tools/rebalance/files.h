/*
 * files: the small files rl-rebalance reads whole (members, assignments) and the --out file
 * it replaces atomically. Not for the request logs it scans (logscan.h).
 */
#ifndef RL_REBALANCE_FILES_H
#define RL_REBALANCE_FILES_H

#include <stddef.h>

/* Reads a whole file of less than about `max` bytes into a NUL-terminated malloc'd buffer.
 * Returns 0, -EFBIG past max, or another negative errno. */
int rl_read_small_file(const char *path, size_t max, char **text, size_t *len);

/* Replaces path with text: a temporary beside it, fsync, then rename(2). 0 or -errno. */
int rl_write_file_atomic(const char *path, const char *text, size_t len);

#endif
