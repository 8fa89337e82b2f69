/*
 * upstream: the router's connections to one node. A few persistent TCP connections per
 * node, requests spread over them round-robin, each connection's output gathered and written
 * once per loop turn, replies split into frames and handed back to the router. A lost
 * connection is reported at once (so the router answers its requests by failure policy)
 * and reconnected with exponential backoff. Not for deciding where a request goes
 * (router.c, shardmap.h).
 */
#ifndef RL_UPSTREAM_H
#define RL_UPSTREAM_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "buf.h"
#include "wire.h"

#define RL_UPSTREAM_CONNS 2
#define RL_UPSTREAM_BACKOFF_MIN_MS 50u
#define RL_UPSTREAM_BACKOFF_MAX_MS 2000u
/* Request bytes queued on one connection and not yet taken by the kernel past which the
 * connection takes no more: a node that stops reading must not grow the router without bound
 * (its requests are answered by the deadline anyway). */
#define RL_UPSTREAM_OUT_MAX (1u << 20)

struct rl_upstream;
struct rl_pending;

struct rl_upconn {
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    struct rl_upstream *up;
    struct rl_buf in;
    struct rl_buf out;      /* requests not yet handed to uv_write */
    struct rl_buf inflight; /* bytes of the write in progress */
    struct rl_wire_decoder dec;
    struct rl_pending *pending; /* the router's requests waiting on this connection */
    uint32_t npending;
    bool open;      /* the handle is initialised and not closed */
    bool closing;   /* uv_close called, its callback not yet run */
    bool connected; /* usable for requests */
    bool writing;
    bool dirty; /* on the owner's dirty list, which alone clears it as it unlinks c */
    struct rl_upconn *dirty_next;
};

/* What the upstream tells its owner. Both run on the loop thread. */
struct rl_upstream_ops {
    /* One reply frame's payload arrived on c. */
    void (*on_frame)(void *arg, struct rl_upconn *c, const char *p, size_t n);
    /* c is lost: every request pending on it must be answered otherwise now. */
    void (*on_lost)(void *arg, struct rl_upconn *c);
    /* c has output: put it on the list flushed at the end of this loop turn. */
    void (*on_dirty)(void *arg, struct rl_upconn *c);
    void *arg;
};

struct rl_upstream_stats {
    uint64_t forwarded;
    uint64_t replies;
    uint64_t failures; /* requests answered by failure policy because of this node */
    uint64_t downs;    /* connections lost */
};

struct rl_upstream {
    char name[64];
    char addr[64];
    uv_loop_t *loop;
    struct sockaddr_storage sa;
    struct rl_upconn conns[RL_UPSTREAM_CONNS];
    uv_timer_t retry;
    uint32_t backoff_ms;
    uint32_t rr;
    int handles; /* open handles; freed when it reaches 0 after retire */
    bool retired;
    struct rl_upstream_ops ops;
    struct rl_upstream_stats stats;
    struct rl_upstream *next; /* the router's list */
};

/* Creates an upstream for node `name` at "host:port" and starts connecting. Returns 0 or a
 * negative errno (-EINVAL for a bad address). */
int rl_upstream_create(struct rl_upstream **out, uv_loop_t *loop, const char *name,
                       const char *addr, const struct rl_upstream_ops *ops);

/* A connected connection to send on (round-robin), or NULL when the node is down or every
 * connection has RL_UPSTREAM_OUT_MAX bytes queued (the node stopped reading). */
struct rl_upconn *rl_upstream_pick(struct rl_upstream *u);

/* True when at least one connection is up. */
bool rl_upstream_up(const struct rl_upstream *u);

/* Marks c as having output: calls ops.on_dirty unless c->dirty, which is set until the owner
 * takes c off its list (and clears it) to call rl_upstream_flush. */
void rl_upstream_mark(struct rl_upconn *c);

/* Writes c's queued output. */
void rl_upstream_flush(struct rl_upconn *c);

/* Retries now instead of waiting out the backoff (the node re-registered). */
void rl_upstream_kick(struct rl_upstream *u);

/* Closes every connection (on_lost runs for those with pending requests) and frees the
 * upstream once its handles are closed. */
void rl_upstream_retire(struct rl_upstream *u);

#endif
