/*
 * logfile: what the logs that hold user ids share (the router's request log, reqlog.h; the
 * node's events log, throttle.h): how such a file is opened (appending, close-on-exec,
 * created 0640 so others may not read it) and how it is rotated for its size (PATH to
 * PATH.1, PATH.1 to PATH.2, ..., keeping `keep`). Each log decides when to rotate and
 * buffers its own lines; this module only does the file-system part, synchronously. Not for
 * diagnostics (log.h) nor for files replaced whole (file.h).
 */
#ifndef RL_LOGFILE_H
#define RL_LOGFILE_H

#include <stddef.h>
#include <stdint.h>

#define RL_LOGFILE_MODE 0640 /* less whatever the umask removes */
#define RL_LOGFILE_KEEP_MAX 1000u

/* Opens path for appending (O_WRONLY|O_CREAT|O_APPEND|O_CLOEXEC, created RL_LOGFILE_MODE);
 * *size (may be NULL) gets the bytes already in it. Returns the descriptor or a negative
 * errno. */
int rl_logfile_open(const char *path, uint64_t *size);

/* PATH.i into buf, or PATH for i = 0. */
void rl_logfile_name(const char *path, uint32_t i, char *buf, size_t len);

/* Rotates path aside: PATH.(keep-1) to PATH.keep, ..., PATH to PATH.1 (the oldest is
 * overwritten); keep 0 unlinks PATH. The caller closes its descriptor before or after and
 * opens a new PATH. Returns 0 or the negative errno of moving PATH itself (a missing older
 * file is not an error). */
int rl_logfile_shift(const char *path, uint32_t keep);

/* Writes all of buf to fd (retrying short writes and EINTR). 0 or a negative errno. */
int rl_logfile_write(int fd, const void *buf, size_t len);

#endif
