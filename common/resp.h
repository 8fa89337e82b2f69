/*
 * resp: Redis's serialization protocol as the router's RESP front speaks it (docs/RESP.md):
 * the reader of requests (RESP2 multibulk arrays and inline commands, as redis-server
 * reads them, with this project's bounds) and the writers of RESP2 and RESP3 replies into a
 * struct rl_buf. Not for the commands themselves (router/resp.c) nor the connection.
 *
 * The reader is bounded: at most RL_RESP_ARGS_MAX arguments, bulk strings of at most
 * RL_RESP_BULK_MAX bytes, inline commands and header lines of at most RL_RESP_INLINE_MAX
 * bytes. Anything else is a protocol error with Redis's wording ("Protocol error: ..."),
 * after which the caller answers the error and closes the connection as Redis does.
 */
#ifndef RL_RESP_H
#define RL_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define RL_RESP_ARGS_MAX 1024u          /* arguments of one command */
#define RL_RESP_BULK_MAX (64u * 1024)   /* bytes of one argument */
#define RL_RESP_INLINE_MAX (64u * 1024) /* bytes of one inline command */
#define RL_RESP_HEADER_MAX 32u          /* bytes of a "*N" or "$N" line, CRLF included */

/* The largest multibulk command, headers included: a bulk length that would take a command
 * past it is an invalid bulk length. What a connection needs to buffer for one command. */
#define RL_RESP_CMD_MAX (256u * 1024)

struct rl_resp_arg {
    const char *ptr;
    size_t len;
};

/* A command read: argv point into the caller's buffer (inline commands are unquoted in
 * place). argc 0: an empty line or array, to be skipped. */
struct rl_resp_cmd {
    size_t argc;
    size_t bytes; /* argument bytes, summed */
    struct rl_resp_arg argv[RL_RESP_ARGS_MAX];
};

enum {
    RL_RESP_MORE = 0, /* the command is not complete yet: read more */
    RL_RESP_CMD = 1,  /* *cmd holds a command of *used bytes */
    RL_RESP_ERR = -1, /* a protocol error: *err says which (Redis's words) */
};

/*
 * Reads the command at the start of buf[0..len). The bytes of an inline command are
 * rewritten in place (quotes and escapes resolved), so buf must stay the caller's until the
 * command is answered. Returns RL_RESP_MORE, RL_RESP_CMD (with *used) or RL_RESP_ERR (with
 * *err, a static string). RL_RESP_MORE is never returned past RL_RESP_CMD_MAX bytes (nor
 * RL_RESP_INLINE_MAX for an inline command): the bounds above refuse it first.
 */
int rl_resp_parse(char *buf, size_t len, struct rl_resp_cmd *cmd, size_t *used, const char **err);

/* Whether argument a equals the ASCII word w, ignoring case (command names). */
bool rl_resp_is(const struct rl_resp_arg *a, const char *w);

/* Reads a as a signed 64-bit decimal integer ("-12"; no spaces, no '+'). 0, or -1. */
int rl_resp_int64(const struct rl_resp_arg *a, int64_t *v);

/* Writers. Each appends one value to b; returns 0 or -ENOMEM. */
int rl_resp_put_simple(struct rl_buf *b, const char *s); /* +s (CR and LF written as spaces) */
int rl_resp_put_error(struct rl_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));                       /* -..., at most 512 bytes */
int rl_resp_put_int(struct rl_buf *b, int64_t v);                /* :v */
int rl_resp_put_bulk(struct rl_buf *b, const void *p, size_t n); /* $n */
int rl_resp_put_str(struct rl_buf *b, const char *s);            /* a C string as a bulk string */
int rl_resp_put_null(struct rl_buf *b, int proto);               /* $-1 (RESP2), _ (RESP3) */
int rl_resp_put_array(struct rl_buf *b, size_t n);               /* *n */
/* An array of n integers (*n, then :v[i] each; n <= RL_RESP_INT_ARRAY_MAX, else -ENOMEM),
 * in one reservation: CL.THROTTLE's answer. */
#define RL_RESP_INT_ARRAY_MAX 64u
int rl_resp_put_int_array(struct rl_buf *b, const int64_t *v, size_t n);
int rl_resp_put_map(struct rl_buf *b, size_t n, int proto); /* %n (RESP3), *2n (RESP2) */
int rl_resp_put_set(struct rl_buf *b, size_t n, int proto); /* ~n (RESP3), *n (RESP2) */

#endif
