/*
 * file: the small files a tool reads whole (rl-rebalance's members and assignment files) and
 * the files it replaces atomically (rl-rebalance's --out). Not for logs,
 * which are appended to and scanned as streams (reqlog.h, logscan.h), nor for secrets,
 * whose mode is checked as they are read (auth.h).
 */
#ifndef RL_FILE_H
#define RL_FILE_H

#include <stddef.h>

/* Reads a whole file of less than about `max` bytes into a NUL-terminated malloc'd buffer
 * (*text, free it; *len bytes before the NUL). Returns 0, -EFBIG past max, or another
 * negative errno (open's, read's, -ENOMEM), with *text NULL. */
int rl_file_read_small(const char *path, size_t max, char **text, size_t *len);

/* Replaces path with text: a temporary beside it, fsync, then rename(2). 0 or -errno; the
 * temporary is gone either way. */
int rl_file_write_atomic(const char *path, const char *text, size_t len);

#endif
