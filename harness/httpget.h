/*
 * httpget: the harness library's tiny blocking HTTP/1.0 client: connects to 127.0.0.1:port
 * within a timeout, sends one request ("METHOD path HTTP/1.0", Host and Connection: close),
 * reads the answer to EOF and splits it into status code, headers and body. Enough to talk
 * to the metrics listener (common/metrics.h) and Prometheus's HTTP API; not a general
 * client (no chunked encoding, no redirects, no TLS, no keep-alive). Check-free, like the
 * rest of the harness library.
 *
 * Every function returns 0 or a negative errno unless its comment says otherwise.
 */
#ifndef RL_HARNESS_HTTPGET_H
#define RL_HARNESS_HTTPGET_H

#include <stddef.h>

/* The largest answer read; a longer one fails with -EMSGSIZE. */
#define RL_HTTP_MAX_RESPONSE (16u << 20)

struct rl_http_resp {
    int status; /* e.g. 200 */
    char *raw;  /* the whole answer as read, NUL-terminated */
    size_t raw_len;
    char *headers; /* the header lines after the status line, NUL-terminated, "\r\n" kept */
    char *body;    /* what follows the blank line, NUL-terminated (into raw) */
    size_t body_len;
};

/*
 * Sends "METHOD path HTTP/1.0" to 127.0.0.1:port (an empty body; Content-Length: 0 for a
 * method other than GET and HEAD) and reads the answer until the server closes, all within
 * timeout_ms. On success *resp is filled (free it with rl_http_free); on failure it is left
 * empty: -ETIMEDOUT, -ECONNREFUSED, -ECONNRESET, -EPROTO (no "HTTP/1.x NNN" status line or
 * no end of headers), -EMSGSIZE, -ENOMEM.
 */
int rl_http_request(int port, const char *method, const char *path, int timeout_ms,
                    struct rl_http_resp *resp);

/*
 * rl_http_request() with extra request header lines: extra is NULL or whole lines, each
 * ending in "\r\n" ("X-User: alice\r\n"), sent after the fixed ones. The whole request must
 * fit 4 KiB (-ENAMETOOLONG otherwise).
 */
int rl_http_request_headers(int port, const char *method, const char *path, const char *extra,
                            int timeout_ms, struct rl_http_resp *resp);

/* rl_http_request(port, "GET", path, timeout_ms, resp). */
int rl_http_get(int port, const char *path, int timeout_ms, struct rl_http_resp *resp);

/*
 * The value of the first header called name (case-insensitive), leading and trailing blanks
 * trimmed, copied into buf (len bytes, truncated, always terminated). Returns buf, or NULL
 * when there is no such header.
 */
const char *rl_http_header(const struct rl_http_resp *resp, const char *name, char *buf,
                           size_t len);

/* Frees what rl_http_request allocated and zeroes *resp; a zeroed resp is fine. */
void rl_http_free(struct rl_http_resp *resp);

/*
 * Percent-encodes s for a query-string value (everything but unreserved characters, RFC
 * 3986) into dst (cap bytes, always terminated). Returns the length written, or -ENOSPC if
 * it did not fit (dst then holds a truncated prefix that never ends inside a %XX triple).
 */
int rl_http_urlencode(char *dst, size_t cap, const char *s);

#endif
