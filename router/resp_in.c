/*
 * resp_in: a RESP connection's unread input and its held count (resp_in.h). The one rule:
 * in->held == in->buf.cap after every call, each change told to hold exactly once.
 */
#include "resp_in.h"

#include <string.h>

#define RESP_IN_FIRST 4096u /* the first buffer, as rl_buf_reserve starts */

void
resp_in_init(struct resp_in *in, resp_hold_fn *hold, void *arg)
{
    rl_buf_init(&in->buf);
    in->held = 0;
    in->hold = hold;
    in->arg = arg;
}

/* The buffer's capacity is now in->buf.cap: tells hold (shrinking). */
static void
in_settle(struct resp_in *in)
{
    if (in->buf.cap != in->held) {
        (void)in->hold(in->arg, in->held, in->buf.cap, false);
        in->held = in->buf.cap;
    }
}

/* Grows the buffer to hold need bytes from its start: the doubled size when hold allows it,
 * else exactly need. 0, -1 (refused), -2 (out of memory); nothing changed on failure. */
static int
in_grow(struct resp_in *in, size_t need)
{
    size_t cap = in->buf.cap != 0 ? in->buf.cap : RESP_IN_FIRST;

    while (cap < need) {
        if (cap > ((size_t)-1) / 2) {
            return -2;
        }
        cap *= 2;
    }
    if (in->hold(in->arg, in->held, cap, cap > need) != 0) {
        cap = need;
        if (in->hold(in->arg, in->held, cap, false) != 0) {
            return -1;
        }
    }
    if (rl_buf_reserve_exact(&in->buf, cap - in->buf.len) != 0) {
        (void)in->hold(in->arg, cap, in->held, false); /* back as it was */
        return -2;
    }
    in->held = in->buf.cap;
    return 0;
}

int
resp_in_add(struct resp_in *in, const void *data, size_t len)
{
    size_t need;

    rl_buf_compact(&in->buf);
    need = in->buf.len + len;
    if (need > in->buf.cap) {
        int rc = in_grow(in, need);

        if (rc != 0) {
            return rc;
        }
    }
    if (len > 0) {
        memcpy(in->buf.data + in->buf.len, data, len);
        in->buf.len += len;
    }
    return 0;
}

void
resp_in_consume(struct resp_in *in, size_t used)
{
    in->buf.pos += used;
    if (rl_buf_unread(&in->buf) == 0) {
        rl_buf_deinit(&in->buf);
    } else {
        rl_buf_compact(&in->buf);
    }
    in_settle(in);
}

void
resp_in_release(struct resp_in *in)
{
    rl_buf_deinit(&in->buf);
    in_settle(in);
}
