/*
 * buf: growable byte buffers. Growth doubles, so appending n bytes costs O(n) amortised.
 */
#include "buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void
rl_buf_init(struct rl_buf *b)
{
    b->data = NULL;
    b->pos = 0;
    b->len = 0;
    b->cap = 0;
}

void
rl_buf_deinit(struct rl_buf *b)
{
    free(b->data);
    rl_buf_init(b);
}

/* Gives b exactly cap bytes of room (cap >= b->len). */
static int
buf_resize(struct rl_buf *b, size_t cap)
{
    char *p = realloc(b->data, cap);

    if (p == NULL) {
        return -ENOMEM;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

int
rl_buf_reserve(struct rl_buf *b, size_t n)
{
    size_t cap;

    if (b->cap - b->len >= n) {
        return 0;
    }
    cap = b->cap ? b->cap : 4096;
    while (cap - b->len < n) {
        if (cap > ((size_t)-1) / 2) {
            return -ENOMEM;
        }
        cap *= 2;
    }
    return buf_resize(b, cap);
}

int
rl_buf_reserve_exact(struct rl_buf *b, size_t n)
{
    return b->cap - b->len >= n ? 0 : buf_resize(b, b->len + n);
}

int
rl_buf_append(struct rl_buf *b, const void *p, size_t n)
{
    int rc = rl_buf_reserve(b, n);

    if (rc != 0) {
        return rc;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

void
rl_buf_compact(struct rl_buf *b)
{
    if (b->pos == 0) {
        return;
    }
    if (b->pos < b->len) {
        memmove(b->data, b->data + b->pos, b->len - b->pos);
    }
    b->len -= b->pos;
    b->pos = 0;
}

void
rl_buf_reset(struct rl_buf *b)
{
    b->pos = 0;
    b->len = 0;
}
