/*
 * fuzz_resp: the RESP request reader (common/resp.h) on any bytes, read as a connection
 * reads them: command after command until it needs more or refuses. Invariants: a command's
 * size is within the bytes given and its arguments lie inside it; "more" is never asked for
 * past the bounds (RL_RESP_CMD_MAX, RL_RESP_INLINE_MAX); every command read, written back
 * as a multibulk array, reads back to the same arguments.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "resp.h"

static struct rl_resp_cmd cmd, again;

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
    return 0;
}
