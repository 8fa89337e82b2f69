/*
 * file: the small files a tool reads whole (rl-rebalance's members and assignment files) and
 * the files it replaces atomically (rl-rebalance's --out). Not for logs,
 * which are appended to and scanned as streams (reqlog.h, logscan.h), nor for secrets,
 * whose mode is checked as they are read (auth.h).
 */
#ifndef RL_FILE_H
#define RL_FILE_H

#include <errno.h>
#include <stddef.h>
#include <sys/types.h>

/* What rl_file_open returns for a path that is no regular file (a FIFO, a socket; a character
 * device too unless allowed; a directory is -EISDIR): opening or reading one could block the
 * process. */
#define RL_FILE_NOT_REGULAR (-ENODEV)

/*
 * Opens path (flags as open(2)'s: O_RDONLY, or O_WRONLY | O_CREAT | O_APPEND with mode) without
 * ever blocking on it: O_NONBLOCK for the open, then it must be a regular file, or with
 * allow_chr (logs) a character device (/dev/null, a terminal) or, opened for writing, a pipe
 * that has a reader (/dev/stderr piped to a collector: with no reader the open fails at once,
 * ENXIO); O_NONBLOCK is then cleared, so reads and writes behave as usual. O_CLOEXEC and O_NOCTTY
 * are always added. Returns the descriptor, or a negative errno (-EISDIR for a directory,
 * RL_FILE_NOT_REGULAR for any other kind of file: a FIFO, whose open waits for a peer, would hang
 * the process that opened it, SIGTERM included).
 */
int rl_file_open(const char *path, int flags, mode_t mode, int allow_chr);

/* strerror(-rc), or for RL_FILE_NOT_REGULAR what it means. */
const char *rl_file_strerror(int rc);

/* Reads a whole file of less than about `max` bytes into a NUL-terminated malloc'd buffer
 * (*text, free it; *len bytes before the NUL). Returns 0, -EFBIG past max, or another
 * negative errno (open's, read's, -ENOMEM), with *text NULL. */
int rl_file_read_small(const char *path, size_t max, char **text, size_t *len);

/* Replaces path with text: a temporary beside it, fsync, then rename(2). 0 or -errno; the
 * temporary is gone either way. */
int rl_file_write_atomic(const char *path, const char *text, size_t len);

#endif
