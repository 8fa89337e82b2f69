/*
 * secret: the parts of auth.h that need no cryptography (reading a secret or token file,
 * wiping memory), apart from auth.c so librlclient, which sends a token but never hashes
 * one, does not link OpenSSL.
 */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void
rl_auth_wipe(void *p, size_t n)
{
    explicit_bzero(p, n);
}

int
rl_auth_read_secret(const char *path, size_t min_len, char *out, size_t cap, size_t *len,
                    char *why, size_t whylen)
{
    char buf[RL_AUTH_TOKEN_MAX + 3];
    struct stat st;
    size_t n = 0;
    int fd, rc = 0;

    *len = 0;
    /* O_NONBLOCK: a FIFO or device named by mistake must not hang the start. */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        rc = -errno;
        snprintf(why, whylen, "cannot open %s: %s", path, strerror(errno));
        return rc;
    }
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        snprintf(why, whylen, "cannot stat %s: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        snprintf(why, whylen, "%s is not a regular file", path);
    } else if ((st.st_mode & 077) != 0) {
        rc = -EACCES;
        snprintf(why, whylen,
                 "%s may be read or written by its group or others (mode %04o): chmod 600 it",
                 path, (unsigned)(st.st_mode & 07777));
    }
    while (rc == 0 && n < sizeof(buf)) {
        ssize_t got = read(fd, buf + n, sizeof(buf) - n);

        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got < 0) {
            rc = -errno;
            snprintf(why, whylen, "cannot read %s: %s", path, strerror(errno));
        } else if (got == 0) {
            break;
        }
        n += got > 0 ? (size_t)got : 0;
    }
    close(fd);
    if (rc == 0) {
        if (n > 0 && buf[n - 1] == '\n') {
            n--;
            if (n > 0 && buf[n - 1] == '\r') {
                n--;
            }
        }
        if (n > RL_AUTH_TOKEN_MAX || n > cap) {
            rc = -EINVAL;
            snprintf(why, whylen, "%s holds more than %u bytes", path, RL_AUTH_TOKEN_MAX);
        } else if (n == 0 || n < min_len) {
            rc = -EINVAL;
            snprintf(why, whylen, "%s holds %zu bytes; at least %zu are needed", path, n,
                     min_len > 0 ? min_len : 1);
        } else {
            memcpy(out, buf, n);
            *len = n;
        }
    }
    rl_auth_wipe(buf, sizeof(buf));
    return rc;
}
