/*
 * fuzz_resp: the RESP request reader (common/resp.h) on any bytes, read as a connection
 * reads them: command after command until it needs more or refuses. Invariants: a command's
 * size is within the bytes given and its arguments lie inside it; "more" is never asked for
 * past the bounds (RL_RESP_CMD_MAX, RL_RESP_INLINE_MAX); every command read, written back
 * as a multibulk array, reads back to the same arguments. Then the same bytes go through a
 * connection's input buffer (router/resp_in.h) in pieces whose sizes the bytes choose, under
 * a budget they choose too, read as resp.c reads them: the held count equals the buffer's
 * capacity after every step, every change is told from the count as it stands (never
 * counted twice), a refused growth changes nothing, and the count is zero at release.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "resp.h"
#include "resp_in.h"

static struct rl_resp_cmd cmd, again;

struct held {
    size_t count, budget;
};

static int
held_hold(void *arg, size_t from, size_t to, bool spare)
{
    struct held *h = arg;

    (void)spare; /* the count is the same either way */
    MUST(from == h->count); /* a stale old: a change counted twice */
    if (to > from && to > h->budget) {
        return -1;
    }
    h->count = to;
    return 0;
}

/* data through a connection's input in pieces, each read as far as it goes. */
static void
replay_held(const uint8_t *data, size_t size)
{
    struct held h = {0, 0};
    struct resp_in in;
    uint64_t x = 0x9e3779b97f4a7c15ull ^ size;
    size_t off = 0;

    for (size_t i = 0; i < size && i < 8; i++) {
        x = x * 31 + data[i];
    }
    h.budget = (x & 3) == 0 ? (size_t)-1 : 4096 + (size_t)(x >> 8) % (300 * 1024);
    resp_in_init(&in, held_hold, &h);
    while (off < size) {
        size_t n, at = 0;
        int rc;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        n = 1 + (size_t)(x % ((x & 16) != 0 ? 64 : 20000));
        n = n < size - off ? n : size - off;
        rc = resp_in_add(&in, data + off, n);
        MUST(in.held == in.buf.cap && h.count == in.buf.cap);
        if (rc != 0) {
            break; /* the connection closes */
        }
        off += n;
        for (;;) {
            size_t used = 0;
            const char *err = NULL;
            int pr =
                rl_resp_parse(resp_in_data(&in) + at, resp_in_unread(&in) - at, &cmd, &used, &err);

            if (pr == RL_RESP_ERR) {
                at = resp_in_unread(&in); /* the rest is dropped, as after QUIT */
                break;
            }
            if (pr == RL_RESP_MORE) {
                break;
            }
            at += used;
        }
        resp_in_consume(&in, at);
        MUST(in.held == in.buf.cap && h.count == in.buf.cap);
        MUST(in.buf.cap <= h.budget || in.buf.cap == 0);
    }
    resp_in_release(&in);
    MUST(h.count == 0 && in.held == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    size_t off = 0;

    MUST(buf != NULL);
    memcpy(buf, data, size);
    for (;;) {
        size_t used = 0;
        const char *err = NULL;
        int rc = rl_resp_parse(buf + off, size - off, &cmd, &used, &err);

        if (rc == RL_RESP_MORE) {
            MUST(size - off < RL_RESP_CMD_MAX);
            if (size - off > 0 && buf[off] != '*') {
                MUST(size - off < RL_RESP_INLINE_MAX);
            }
            break;
        }
        if (rc == RL_RESP_ERR) {
            MUST(err != NULL && strncmp(err, "Protocol error: ", 16) == 0);
            break;
        }
        MUST(rc == RL_RESP_CMD && used > 0 && used <= size - off);
        MUST(cmd.argc <= RL_RESP_ARGS_MAX);
        {
            struct rl_buf b;
            size_t used2 = 0;

            rl_buf_init(&b);
            MUST(rl_resp_put_array(&b, cmd.argc) == 0);
            for (size_t i = 0; i < cmd.argc; i++) {
                MUST(cmd.argv[i].ptr >= buf + off &&
                     cmd.argv[i].ptr + cmd.argv[i].len <= buf + off + used);
                MUST(cmd.argv[i].len <= RL_RESP_BULK_MAX);
                MUST(rl_resp_put_bulk(&b, cmd.argv[i].ptr, cmd.argv[i].len) == 0);
            }
            if (cmd.argc > 0 && b.len <= RL_RESP_CMD_MAX) {
                MUST(rl_resp_parse(b.data, b.len, &again, &used2, &err) == RL_RESP_CMD);
                MUST(used2 == b.len && again.argc == cmd.argc);
                for (size_t i = 0; i < cmd.argc; i++) {
                    MUST(again.argv[i].len == cmd.argv[i].len &&
                         memcmp(again.argv[i].ptr, cmd.argv[i].ptr, cmd.argv[i].len) == 0);
                }
            }
            rl_buf_deinit(&b);
        }
        off += used;
    }
    free(buf);
    replay_held(data, size);
    return 0;
}
