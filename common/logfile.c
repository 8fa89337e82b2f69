/*
 * logfile: open, rotate and write the logs that hold user ids. See logfile.h.
 */
#include "logfile.h"

#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

int
rl_logfile_open(const char *path, uint64_t *size)
{
    struct stat st;
    /* a regular file or a device such as /dev/null, never a FIFO: it could block the loop */
    int fd = rl_file_open(path, O_WRONLY | O_CREAT | O_APPEND, RL_LOGFILE_MODE, 1);

    if (fd < 0) {
        return fd;
    }
    if (size != NULL) {
        *size = fstat(fd, &st) == 0 && st.st_size > 0 ? (uint64_t)st.st_size : 0;
    }
    return fd;
}

void
rl_logfile_name(const char *path, uint32_t i, char *buf, size_t len)
{
    if (i == 0) {
        snprintf(buf, len, "%s", path);
    } else {
        snprintf(buf, len, "%s.%u", path, i);
    }
}

int
rl_logfile_shift(const char *path, uint32_t keep)
{
    char from[4096], to[4096];
    int rc = 0;

    if (keep == 0) {
        return unlink(path) == 0 || errno == ENOENT ? 0 : -errno;
    }
    for (uint32_t i = keep; i > 0; i--) {
        rl_logfile_name(path, i - 1, from, sizeof(from));
        rl_logfile_name(path, i, to, sizeof(to));
        if (rename(from, to) != 0 && i == 1) {
            rc = -errno;
        }
    }
    return rc;
}

int
rl_logfile_write(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = write(fd, p, len);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}
