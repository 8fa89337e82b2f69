/*
 * resp: the router's RESP front (docs/RESP.md), front.c's RL_FRONT_RESP: Redis's protocol on
 * the sockets the process accepts on [router] resp, served by a worker on its own loop.
 * Here are the connection's life (front.c's callbacks), its input (resp_in.c counts what it
 * holds) and the per-loop state (resp_front.h); commands are read by common/resp.c and run
 * through resp_cmd.c's table; the replies wait in the order of the commands in
 * resp_check.c's ring, where the commands that go to the nodes are.
 *
 * Bounds per connection: one command of at most RL_RESP_CMD_MAX bytes (resp.h); at most
 * RESP_PIPELINE_MAX commands waiting for their answers (then reading stops, rl_front_pause,
 * until answers free slots); unread input of at most RESP_HELD_MAX bytes and the worker's
 * share of [clients] buffer_memory (past it, closed); reading stops while
 * RESP_WRITE_QUEUE_MAX bytes are unsent (front.c). [clients]
 * idle_timeout closes a connection with nothing in flight (front.c); frame_timeout one whose
 * command stays incomplete (resp_tick); the process's max_connections is counted by rproc.c.
 * Not for the parsing (common/resp.c) nor the routing (forward.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "front.h"
#include "log.h"
#include "resp.h"
#include "resp_int.h"
#include "router_int.h"

/* ---- reading ------------------------------------------------------------------------------- */

/* Runs the commands of buf[0..len); returns the bytes consumed (the rest waits: an
 * incomplete command, or no slot free). */
static size_t
conn_run(struct resp_conn *c, char *buf, size_t len)
{
    struct rl_resp *g = c->g;
    size_t off = 0;

    while (off < len && !c->closing && !c->quit) {
        size_t used = 0;
        const char *err = NULL;
        int rc;

        if (!resp_room(c)) {
            /* resumed when answers free slots and memory (resp_produce); with nothing in
             * flight none will: buffer_memory is spent and c holds the most */
            c->closing = c->nslots == 0;
            break;
        }
        rc = rl_resp_parse(buf + off, len - off, &g->cmd, &used, &err);
        if (rc == RL_RESP_MORE) {
            break;
        }
        if (rc == RL_RESP_ERR) {
            struct rl_buf *b = resp_reply_to(c);

            g->counts[RESP_N_PROTOCOL]++;
            if (b == NULL || rl_resp_put_error(b, "ERR %s", err) != 0) {
                c->closing = true;
                return off;
            }
            c->quit = true; /* as Redis: the error, then the connection closes */
            return len;
        }
        off += used;
        c->partial_ms = 0; /* progress */
        if (g->cmd.argc > 0 && resp_command(c, &g->cmd) != 0) {
            c->closing = true;
            return off;
        }
    }
    return off;
}

/* Runs what c->in holds. */
static void
conn_process(struct resp_conn *c)
{
    size_t unread = resp_in_unread(&c->in);

    if (unread == 0 || c->quit || c->closing) {
        return;
    }
    resp_in_consume(&c->in, conn_run(c, resp_in_data(&c->in), unread));
    if (resp_in_unread(&c->in) > 0 && c->partial_ms == 0) {
        c->partial_ms = uv_now(c->r->loop);
    }
}

/* ---- front.c's callbacks ------------------------------------------------------------------- */

/* resp_in's hold function: front.c's count of c's held bytes (a spare growth never closes
 * another connection to make room). */
static int
conn_hold(void *arg, size_t from, size_t to, bool spare)
{
    return spare ? rl_front_hold_spare(arg, from, to) : rl_front_hold(arg, from, to);
}

static int
resp_open(struct rl_front_conn *fc)
{
    static uint64_t resp_next_id;
    struct rl_router *r = rl_front_router(fc);
    struct resp_conn *c;

    if (r->resp == NULL) {
        return UV_ENOMEM; /* rl_router_create made none */
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return UV_ENOMEM;
    }
    c->fc = fc;
    c->r = r;
    c->g = r->resp;
    resp_in_init(&c->in, conn_hold, fc);
    /* unique in the process, as Redis's: every worker's connections draw from one count */
    c->id = __atomic_add_fetch(&resp_next_id, 1, __ATOMIC_RELAXED);
    c->proto = 2;
    c->authed = r->conf->nauth_clients == 0;
    c->opened_ms = uv_now(r->loop);
    c->g->nconns++;
    rl_front_set_proto(fc, c);
    return 0;
}

/* c's input passed what it may hold: said at most every 10 s per worker. */
static void
warn_held(struct resp_conn *c)
{
    uint64_t now = uv_now(c->r->loop);

    if (c->g->warned_ms == 0 || now - c->g->warned_ms >= 10000) {
        c->g->warned_ms = now;
        rl_log_warn("resp: a connection closed: it holds too much unread input (%zu bytes at "
                    "most, and [clients] buffer_memory)",
                    (size_t)RESP_HELD_MAX);
    }
}

static int
resp_bytes(struct rl_front_conn *fc, const uint8_t *data, size_t len)
{
    struct resp_conn *c = rl_front_proto(fc);
    int rc;

    if (c->quit) {
        return 0; /* what follows QUIT or a protocol error is dropped */
    }
    /* The input is held in c->in: at most RESP_HELD_MAX bytes, and the worker's share of
     * [clients] buffer_memory (resp_in counts it with rl_front_hold). */
    rc = resp_in_add(&c->in, data, len);
    if (rc != 0) {
        if (rc == -1) {
            warn_held(c);
        }
        return -1;
    }
    conn_process(c);
    if (c->closing) {
        return -1;
    }
    if (resp_in_unread(&c->in) > 0 && !resp_room(c)) {
        /* the ring is full (or its memory is not to be had) and commands wait: read no more
         * until answers free slots */
        c->paused = true;
        rl_front_pause(fc, true);
    }
    return 0;
}

static int
resp_produce(struct rl_front_conn *fc)
{
    struct resp_conn *c = rl_front_proto(fc);

    if (c->closing || resp_drain(c) != 0) {
        return -1;
    }
    if (resp_in_unread(&c->in) > 0 && c->nslots == 0 && !resp_room(c)) {
        return -1; /* nothing in flight, and no room: buffer_memory is spent, c holds the most */
    }
    if (resp_in_unread(&c->in) > 0 && resp_room(c)) {
        conn_process(c); /* commands that waited for a slot */
        if (c->closing || resp_drain(c) != 0) {
            return -1;
        }
    }
    if (c->paused && (resp_in_unread(&c->in) == 0 || resp_room(c))) {
        c->paused = false;
        rl_front_pause(fc, false);
    }
    if (c->out.len > 0) {
        if (rl_front_write(fc, c->out.data, c->out.len) != 0) {
            return -1;
        }
        if (c->out.cap > 64u * 1024) {
            rl_buf_deinit(&c->out);
        } else {
            rl_buf_reset(&c->out);
        }
    }
    if (c->quit && c->nslots == 0) {
        if (c->quit_ms == 0) {
            c->quit_ms = uv_now(c->r->loop);
        }
        rl_front_shutdown(fc);
    }
    return 0;
}

static bool
resp_finished(struct rl_front_conn *fc)
{
    (void)fc;
    return false; /* after QUIT: the peer's EOF or the linger time (resp_tick) closes */
}

static bool
resp_busy(struct rl_front_conn *fc)
{
    struct resp_conn *c = rl_front_proto(fc);

    return c->nslots > 0;
}

/* Commands in flight, or waiting in its input for a slot (a drain answers them too). */
static bool
resp_unanswered(struct rl_front_conn *fc)
{
    struct resp_conn *c = rl_front_proto(fc);

    return c->nslots > 0 || (!c->quit && resp_in_unread(&c->in) > 0);
}

static uint64_t
resp_auth_timeout(const struct rl_router *r)
{
    uint64_t ms = r->opts.limits.auth_timeout_ms;

    return ms != 0 ? ms : RL_CONN_DEFAULT_AUTH_TIMEOUT_MS;
}

/* Every tick: a connection that quit lingers RESP_LINGER_MS at most; a command incomplete
 * for frame_timeout closes its connection. */
static void
resp_tick(struct rl_front_conn *fc, uint64_t now, uint64_t frame_timeout_ms)
{
    struct resp_conn *c = rl_front_proto(fc);

    if (c->quit_ms != 0 && now - c->quit_ms >= RESP_LINGER_MS) {
        rl_front_close(fc);
        return;
    }
    if (c->partial_ms != 0 && !c->paused && now - c->partial_ms >= frame_timeout_ms) {
        rl_front_close(fc);
        return;
    }
    /* [clients] auth_timeout, where AUTH is required */
    if (!c->authed && now - c->opened_ms >= resp_auth_timeout(c->r)) {
        c->r->stats.auth_failures++;
        rl_front_close(fc);
    }
}

static void
resp_close(struct rl_front_conn *fc)
{
    struct resp_conn *c = rl_front_proto(fc);

    if (c == NULL) {
        return;
    }
    c->closing = true;
    resp_slots_free(c);
    resp_in_release(&c->in); /* every held byte given back */
    rl_buf_deinit(&c->out);
    c->g->nconns--;
    free(c);
    rl_front_set_proto(fc, NULL);
}

/* A connection refused before it is served (front.c's caps): a RESP error line. */
static size_t
resp_refusal(char *buf, size_t n, const char *why)
{
    int len = snprintf(buf, n, "-ERR %s\r\n", why);

    return len < 0 ? 0 : (size_t)len < n ? (size_t)len : n - 1;
}

static int
resp_new_loop(struct rl_router *r)
{
    r->resp = rl_resp_new();
    return r->resp != NULL ? 0 : -ENOMEM;
}

static void
resp_free_loop(struct rl_router *r)
{
    rl_resp_free(r->resp);
    r->resp = NULL;
}

const struct rl_front_ops rl_resp_ops = {
    .name = "resp",
    .limits = {.write_queue_max = RESP_WRITE_QUEUE_MAX,
               .held_max = RESP_HELD_MAX,
               .tick_ms = RESP_TICK_MS,
               .turn_bytes = RL_CONN_TURN_BYTES},
    .on_open = resp_open,
    .on_bytes = resp_bytes,
    .produce = resp_produce,
    .finished = resp_finished,
    .busy = resp_busy,
    .unanswered = resp_unanswered,
    .on_idle = NULL,
    .on_tick = resp_tick,
    .on_close = resp_close,
    .plaintext_refusal = "-ERR TLS is required: this port takes TLS connections only "
                         "(connect with TLS, e.g. redis-cli --tls --cacert FILE)\r\n",
    .auth_per_connection = true,
    .refusal = resp_refusal,
    .new_loop = resp_new_loop,
    .free_loop = resp_free_loop,
};

struct rl_resp *
rl_resp_new(void)
{
    return calloc(1, sizeof(struct rl_resp));
}

void
rl_resp_free(struct rl_resp *g)
{
    if (g != NULL) {
        rl_buf_deinit(&g->tmp);
        free(g);
    }
}
