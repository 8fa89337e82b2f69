/*
 * httpget: the harness's blocking HTTP/1.0 client (httpget.h): a non-blocking socket driven
 * by poll(2) against one deadline, so that neither connect, send nor read can outlast the
 * timeout.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "httpget.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"

static int64_t
http_now_ms(void)
{
    return (int64_t)(rl_clock_mono_ns() / 1000000);
}

/* Waits for events on fd until deadline; 0 when ready, -ETIMEDOUT, or -errno. */
static int
http_wait(int fd, short events, int64_t deadline)
{
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = events};
        int64_t left = deadline - http_now_ms();
        int rc;

        if (left <= 0) {
            return -ETIMEDOUT;
        }
        rc = poll(&pfd, 1, left > INT32_MAX ? INT32_MAX : (int)left);
        if (rc > 0) {
            return 0;
        }
        if (rc < 0 && errno != EINTR) {
            return -errno;
        }
    }
}

static int
http_connect(int port, int64_t deadline)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd, rc, soerr = 0;
    socklen_t sl = sizeof(soerr);

    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -errno;
    }
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0) {
        return fd;
    }
    if (errno != EINPROGRESS) {
        rc = -errno;
        close(fd);
        return rc;
    }
    rc = http_wait(fd, POLLOUT, deadline);
    if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0) {
        rc = -errno;
    } else if (rc == 0 && soerr != 0) {
        rc = -soerr;
    }
    if (rc != 0) {
        close(fd);
        return rc;
    }
    return fd;
}

/* Splits resp->raw into status, headers and body. */
static int
http_parse(struct rl_http_resp *resp)
{
    char *eol, *end;
    int major, minor, status, n = 0;

    if (sscanf(resp->raw, "HTTP/%d.%d %3d%n", &major, &minor, &status, &n) != 3 || n != 12 ||
        status < 100 || status > 999) {
        return -EPROTO;
    }
    eol = strstr(resp->raw, "\r\n");
    end = strstr(resp->raw, "\r\n\r\n");
    if (eol == NULL || end == NULL) {
        return -EPROTO;
    }
    resp->status = status;
    /* The headers: from after the status line to the end of the last header line. */
    resp->headers = strndup(eol + 2, (size_t)(end + 2 - (eol + 2)));
    if (resp->headers == NULL) {
        return -ENOMEM;
    }
    resp->body = end + 4;
    resp->body_len = resp->raw_len - (size_t)(resp->body - resp->raw);
    return 0;
}

int
rl_http_request(int port, const char *method, const char *path, int timeout_ms,
                struct rl_http_resp *resp)
{
    return rl_http_request_headers(port, method, path, NULL, timeout_ms, resp);
}

int
rl_http_request_headers(int port, const char *method, const char *path, const char *extra,
                        int timeout_ms, struct rl_http_resp *resp)
{
    int64_t deadline = http_now_ms() + timeout_ms;
    char req[4096];
    size_t len, off = 0, cap = 0;
    int fd, n, rc = 0;
    char *raw = NULL;

    memset(resp, 0, sizeof(*resp));
    n = snprintf(
        req, sizeof(req),
        "%s %s HTTP/1.0\r\nHost: 127.0.0.1:%d\r\nUser-Agent: rl-test\r\n"
        "Accept: */*\r\nConnection: close\r\n%s%s\r\n",
        method, path, port,
        strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0 ? "" : "Content-Length: 0\r\n",
        extra != NULL ? extra : "");
    if (n < 0 || (size_t)n >= sizeof(req)) {
        return -ENAMETOOLONG;
    }
    len = (size_t)n;
    fd = http_connect(port, deadline);
    if (fd < 0) {
        return fd;
    }
    while (off < len) {
        ssize_t w = send(fd, req + off, len - off, MSG_NOSIGNAL);

        if (w > 0) {
            off += (size_t)w;
        } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            rc = http_wait(fd, POLLOUT, deadline);
            if (rc != 0) {
                goto out;
            }
        } else {
            rc = w < 0 ? -errno : -ECONNRESET;
            goto out;
        }
    }
    off = 0;
    for (;;) {
        ssize_t r;

        if (cap - off < 4096 + 1) {
            char *more;

            if (cap >= RL_HTTP_MAX_RESPONSE) {
                rc = -EMSGSIZE;
                goto out;
            }
            cap = cap == 0 ? 16384 : cap * 2;
            more = realloc(raw, cap);
            if (more == NULL) {
                rc = -ENOMEM;
                goto out;
            }
            raw = more;
        }
        r = recv(fd, raw + off, cap - off - 1, 0);
        if (r > 0) {
            off += (size_t)r;
        } else if (r == 0) {
            break;
        } else if (errno == EAGAIN || errno == EINTR) {
            rc = http_wait(fd, POLLIN, deadline);
            if (rc != 0) {
                goto out;
            }
        } else {
            rc = -errno;
            goto out;
        }
    }
    raw[off] = '\0';
    resp->raw = raw;
    resp->raw_len = off;
    raw = NULL;
    rc = http_parse(resp);
out:
    close(fd);
    free(raw);
    if (rc != 0) {
        rl_http_free(resp);
    }
    return rc;
}

int
rl_http_get(int port, const char *path, int timeout_ms, struct rl_http_resp *resp)
{
    return rl_http_request(port, "GET", path, timeout_ms, resp);
}

const char *
rl_http_header(const struct rl_http_resp *resp, const char *name, char *buf, size_t len)
{
    size_t nl = strlen(name);

    if (resp->headers == NULL || len == 0) {
        return NULL;
    }
    for (const char *line = resp->headers; *line != '\0';) {
        const char *eol = strstr(line, "\r\n");
        const char *stop = eol != NULL ? eol : line + strlen(line);

        if ((size_t)(stop - line) > nl && strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            const char *v = line + nl + 1;
            size_t n;

            while (v < stop && (*v == ' ' || *v == '\t')) {
                v++;
            }
            while (stop > v && (stop[-1] == ' ' || stop[-1] == '\t')) {
                stop--;
            }
            n = (size_t)(stop - v);
            if (n >= len) {
                n = len - 1;
            }
            memcpy(buf, v, n);
            buf[n] = '\0';
            return buf;
        }
        if (eol == NULL) {
            break;
        }
        line = eol + 2;
    }
    return NULL;
}

void
rl_http_free(struct rl_http_resp *resp)
{
    free(resp->raw);
    free(resp->headers);
    memset(resp, 0, sizeof(*resp));
}

int
rl_http_urlencode(char *dst, size_t cap, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;

    if (cap == 0) {
        return -ENOSPC;
    }
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;

        if ((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
            c == '-' || c == '_' || c == '.' || c == '~') {
            if (n + 1 >= cap) {
                dst[n] = '\0';
                return -ENOSPC;
            }
            dst[n++] = (char)c;
        } else {
            if (n + 3 >= cap) {
                dst[n] = '\0';
                return -ENOSPC;
            }
            dst[n++] = '%';
            dst[n++] = hex[c >> 4];
            dst[n++] = hex[c & 15];
        }
    }
    dst[n] = '\0';
    return (int)n;
}
