/*
 * resp_in: a RESP connection's unread input, and the count of it that the front keeps
 * (rl_front_hold). The count follows the buffer's capacity: each change of the buffer is
 * told once, as it happens, and release gives all of it back, so a connection's bytes and
 * its worker's share of [clients] buffer_memory return to what they were when it closes.
 * Knows no router: the hold function is given (resp.c passes front.c's rl_front_hold on the
 * connection; tests pass a counter). Not for parsing (common/resp.c) nor for running the
 * commands read (resp.c).
 */
#ifndef RL_RESP_IN_H
#define RL_RESP_IN_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"

/* The count of held bytes goes from `from` to `to`: 0, or -1 when growing is refused (nothing
 * counted then). Shrinking never fails. spare: the growth is more than is needed now (a
 * doubled buffer), which the owner may refuse more readily. */
typedef int resp_hold_fn(void *arg, size_t from, size_t to, bool spare);

struct resp_in {
    struct rl_buf buf; /* unread input from buf.pos; inline commands are unquoted in place */
    size_t held;       /* what hold was last told: buf.cap, always */
    resp_hold_fn *hold;
    void *arg;
};

void resp_in_init(struct resp_in *in, resp_hold_fn *hold, void *arg);

/* Appends len bytes, growing the buffer when they do not fit (doubling when hold allows
 * it, else to the exact size). 0; -1: hold refused the growth (nothing changed); -2: out
 * of memory (nothing changed). */
int resp_in_add(struct resp_in *in, const void *data, size_t len);

/* used bytes at buf.pos were consumed: the rest moves to the front, and an empty buffer is
 * freed (its bytes given back). */
void resp_in_consume(struct resp_in *in, size_t used);

/* Frees the buffer and gives every held byte back. */
void resp_in_release(struct resp_in *in);

static inline size_t
resp_in_unread(const struct resp_in *in)
{
    return rl_buf_unread(&in->buf);
}

static inline char *
resp_in_data(const struct resp_in *in)
{
    return in->buf.data + in->buf.pos;
}

#endif
