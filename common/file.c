/*
 * file: whole reads of small files and atomic replacements (file.h).
 */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int
rl_file_open(const char *path, int flags, mode_t mode, int allow_chr)
{
    int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, mode);
    struct stat st;
    int fl;

    if (fd < 0) {
        /* a FIFO opened for writing with no reader: ENXIO, which is no regular file either */
        return errno == ENXIO ? RL_FILE_NOT_REGULAR : -errno;
    }
    if (fstat(fd, &st) != 0) {
        int rc = -errno;

        close(fd);
        return rc;
    }
    /* A log may be a device or a pipe with a reader (stderr piped to a collector, as
     * /dev/stderr in a container): its open did not wait, and writes are what stderr's are. */
    if (!(S_ISREG(st.st_mode) ||
          (allow_chr &&
           (S_ISCHR(st.st_mode) || (S_ISFIFO(st.st_mode) && (flags & O_ACCMODE) == O_WRONLY))))) {
        close(fd);
        return S_ISDIR(st.st_mode) ? -EISDIR : RL_FILE_NOT_REGULAR;
    }
    fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int rc = -errno;

        close(fd);
        return rc;
    }
    return fd;
}

const char *
rl_file_strerror(int rc)
{
    return rc == RL_FILE_NOT_REGULAR
               ? "not a regular file (a FIFO or a socket could block the process)"
               : strerror(-rc);
}

int
rl_file_read_small(const char *path, size_t max, char **text, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    int fd = rl_file_open(path, O_RDONLY, 0, 0), rc = 0;

    *text = NULL;
    *len = 0;
    if (fd < 0 || buf == NULL) {
        rc = fd < 0 ? fd : -ENOMEM;
        goto out;
    }
    for (;;) {
        ssize_t got;

        if (cap - n < 2) {
            char *b;

            if (cap >= max) {
                rc = -EFBIG;
                goto out;
            }
            b = realloc(buf, cap * 2);
            if (b == NULL) {
                rc = -ENOMEM;
                goto out;
            }
            buf = b;
            cap *= 2;
        }
        got = read(fd, buf + n, cap - n - 1);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got < 0) {
            rc = -errno;
            goto out;
        }
        if (got == 0) {
            break;
        }
        n += (size_t)got;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    buf = NULL;
out:
    if (fd >= 0) {
        close(fd);
    }
    free(buf);
    return rc;
}

int
rl_file_write_atomic(const char *path, const char *text, size_t len)
{
    char tmp[4096];
    size_t off = 0;
    int fd, rc = 0;

    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= sizeof(tmp)) {
        return -ENAMETOOLONG;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        return -errno;
    }
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);

        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w < 0) {
            rc = -errno;
            break;
        }
        off += (size_t)w;
    }
    if (rc == 0 && fsync(fd) != 0) {
        rc = -errno;
    }
    if (close(fd) != 0 && rc == 0) {
        rc = -errno;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = -errno;
    }
    if (rc != 0) {
        unlink(tmp);
    }
    return rc;
}
