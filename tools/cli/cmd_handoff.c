/*
 * cmd_handoff: `rl-cli handoff --shard N --from HOST:PORT --to HOST:PORT`, a shard's keys
 * handed from one node to another by hand (docs/OPERATIONS.md, "Handing a shard off by
 * hand"): HANDOFF_OUT to the old owner, each message of records it answers passed on as
 * HANDOFF_IN to the new one, until the old owner says that was the last. Both nodes take
 * the same credentials (--token-file: the cluster secret; --tls-*). Not for deciding when
 * a shard should move, nor for telling routers (not written yet: the automatic handoff).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Sends req on c (to the node at addr) and reads its reply into rep: CLI_EXIT_OK, or
 * CLI_EXIT_FAIL after a message (a transport error, an ERROR reply, another op). */
static int
handoff_call(const struct cli *o, struct rl_client *c, const char *addr, struct rl_wire_req *req,
             struct rl_wire_reply *rep)
{
    char op[32];
    int rc = rl_client_queue(c, req);

    if (rc == 0) {
        rc = rl_client_flush(c, o->timeout_ms);
    }
    if (rc == 0) {
        rc = rl_client_recv(c, rep, o->timeout_ms);
    }
    cli_upper(rl_wire_op_name(req->op), op, sizeof(op));
    if (rc != 0) {
        fprintf(stderr, "rl-cli: handoff: %s to %s: %s\n", op, addr, cli_errno_text(rc));
        return CLI_EXIT_FAIL;
    }
    if (rep->op == RL_WIRE_OP_ERROR) {
        fprintf(stderr, "rl-cli: handoff: %s answered %s with ERROR %s: %.*s\n", addr, op,
                rl_wire_err_name(rep->err), (int)rep->message.len,
                rep->message.ptr != NULL ? rep->message.ptr : "");
        return CLI_EXIT_FAIL;
    }
    if (rep->op != req->op || rep->id != req->id) {
        fprintf(stderr, "rl-cli: handoff: %s answered %s with op %" PRIu32 " (id %" PRIu32 ")\n",
                addr, op, rep->op, rep->id);
        return CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}

/* Connects to addr with o's credentials: CLI_EXIT_OK with *c, or an exit status after a
 * message. */
static int
handoff_connect(const struct cli *o, const char *addr, struct rl_client **c)
{
    struct cli to = *o;
    char why[256];
    int status;

    to.target = addr;
    status = cli_connect(&to, c, why, sizeof(why));
    if (status != CLI_EXIT_OK) {
        fprintf(stderr, "rl-cli: handoff: %s: %s\n", addr, why);
    }
    return status;
}

int
cli_cmd_handoff(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv)
{
    struct rl_client *from = NULL, *to = NULL;
    struct rl_wire_reply *out = malloc(sizeof(*out)), *in = malloc(sizeof(*in));
    struct rl_wire_req req;
    uint64_t offset = 0, imported = 0, skipped = 0, bytes = 0, messages = 0;
    int status;

    (void)cmd;
    if (argc > 0) {
        status = cli_usage_error("handoff: unexpected argument %s", argv[0]);
    } else if ((o->given & CLI_O(SHARD)) == 0 || o->from == NULL || o->to == NULL) {
        status =
            cli_usage_error("handoff needs --shard N, --from HOST:PORT and --to HOST:PORT%s", "");
    } else if (out == NULL || in == NULL) {
        status = cli_out_of_memory();
    } else {
        status = handoff_connect(o, o->from, &from);
    }
    if (status == CLI_EXIT_OK) {
        status = handoff_connect(o, o->to, &to);
    }
    while (status == CLI_EXIT_OK) {
        memset(&req, 0, sizeof(req));
        req.op = RL_WIRE_OP_HANDOFF_OUT;
        req.id = (uint32_t)(messages % UINT32_MAX) + 1;
        req.shard = o->shard;
        req.offset = offset;
        status = handoff_call(o, from, o->from, &req, out);
        if (status != CLI_EXIT_OK) {
            break;
        }
        /* out's records stay valid until from's next read: queued to `to` before it */
        req.op = RL_WIRE_OP_HANDOFF_IN;
        req.records = out->records;
        status = handoff_call(o, to, o->to, &req, in);
        if (status != CLI_EXIT_OK) {
            break;
        }
        imported += in->imported;
        skipped += in->skipped;
        bytes += out->records.len;
        messages++;
        if (out->next == 0) {
            break;
        }
        if (out->next <= offset) {
            fprintf(stderr, "rl-cli: handoff: %s went back to offset %" PRIu64 "\n", o->from,
                    out->next);
            status = CLI_EXIT_FAIL;
            break;
        }
        offset = out->next;
    }
    if (status == CLI_EXIT_OK) {
        printf("shard %" PRIu32 ": %" PRIu64 " keys imported, %" PRIu64 " skipped (%" PRIu64
               " bytes in %" PRIu64 " messages) from %s to %s\n",
               o->shard, imported, skipped, bytes, messages, o->from, o->to);
    } else if (messages > 0) {
        fprintf(stderr,
                "rl-cli: handoff: stopped after %" PRIu64 " messages: %" PRIu64
                " keys of shard %" PRIu32 " were imported by %s, the rest were not\n",
                messages, imported, o->shard, o->to);
    }
    rl_client_destroy(from);
    rl_client_destroy(to);
    free(out);
    free(in);
    return status;
}
