/*
 * buf: a growable byte buffer with a read cursor, used for socket input and output.
 * Not a ring: consumed bytes are compacted away by rl_buf_compact, which callers run once
 * per read batch, so the cost is one memmove of the unread tail per batch.
 */
#ifndef RL_BUF_H
#define RL_BUF_H

#include <stddef.h>

struct rl_buf {
    char *data;
    size_t pos; /* first unread byte */
    size_t len; /* bytes written */
    size_t cap;
};

void rl_buf_init(struct rl_buf *b);
void rl_buf_deinit(struct rl_buf *b);

/* Makes room for at least n more bytes after len; returns 0 or -ENOMEM. */
int rl_buf_reserve(struct rl_buf *b, size_t n);

/* Like rl_buf_reserve, but grows to exactly n bytes past len (a small buffer stays small). */
int rl_buf_reserve_exact(struct rl_buf *b, size_t n);

/* Appends n bytes; returns 0 or -ENOMEM. */
int rl_buf_append(struct rl_buf *b, const void *p, size_t n);

/* Drops the consumed bytes before pos, moving the unread tail to the front. */
void rl_buf_compact(struct rl_buf *b);

/* Empties the buffer and keeps its memory. */
void rl_buf_reset(struct rl_buf *b);

/* Unread bytes. */
static inline size_t
rl_buf_unread(const struct rl_buf *b)
{
    return b->len - b->pos;
}

#endif
