/*
 * reply: what the router queues on a binary client's connection by itself, below the
 * handlers that decide it (forward.c, fanout.c, shed.c, session.c): an ERROR (counted in
 * stats.errors). Not for the decisions (those files), nor for the other fronts' replies
 * (resp.c, rls_call.c).
 */
#include "router_int.h"

void
rl_reply_error(struct rl_conn *c, uint32_t id, uint32_t err, const char *msg)
{
    struct rl_router *r = c->data;

    r->stats.errors++;
    if (rl_wire_put_error(&c->out, id, err, msg) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    rl_conn_mark(c);
}
