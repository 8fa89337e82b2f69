/*
 * server: the node's TCP front end on libuv. Accepts connections, splits frames, decodes
 * requests, asks the limiter, and writes every reply of one read batch in one write.
 * Bounds what a client can cost: input is at most one frame plus one read, queued output
 * stops reading from that client past RL_SERVER_OUT_MAX, and connections past
 * max_connections are refused with an OVERLOADED error. Not for ZooKeeper (zkm.h).
 */
#ifndef RL_SERVER_H
#define RL_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "clock.h"
#include "conf.h"
#include "limiter.h"

#define RL_SERVER_OUT_MAX (1u << 20)     /* replies queued per client before we stop reading */
#define RL_SERVER_MAX_CONNECTIONS 10000u /* default */

/* Server counters, X(name, text): reported by STATS beside the limiter's. */
#define RL_SERVER_STATS_MAP(X)                                                                     \
    X(connections, "connections")                                                                  \
    X(connections_total, "connections_total")                                                      \
    X(connections_refused, "connections_refused")                                                  \
    X(errors, "errors")                                                                            \
    X(protocol_closes, "protocol_closes")

struct rl_server_stats {
#define RL_SERVER_FIELD(n, s) uint64_t n;
    RL_SERVER_STATS_MAP(RL_SERVER_FIELD)
#undef RL_SERVER_FIELD
};

struct rl_server_opts {
    const char *name; /* answered to PING */
    const char *host;
    uint16_t port;
    bool test_clock; /* accept CLOCK (op 4) */
    uint32_t max_connections;
};

struct rl_conn;

struct rl_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_timer_t sweep_timer;
    struct rl_limiter *limiter;
    struct rl_clock clock;
    struct rl_server_opts opts;
    char name[64];
    struct rl_conn *conns; /* doubly linked list of open connections */
    struct rl_server_stats stats;
    uint64_t started_ms;
    int pending_closes; /* handles still closing */
    bool closing;
    void (*on_closed)(struct rl_server *s); /* after rl_server_close, once all is closed */
};

/*
 * Starts listening on opts->host:opts->port and serving with limiter (not owned). Returns 0
 * or a negative errno (-EADDRINUSE, ...). The server struct must stay put until on_closed.
 */
int rl_server_start(struct rl_server *s, uv_loop_t *loop, struct rl_limiter *limiter,
                    const struct rl_server_opts *opts);

/* Stops listening and closes every connection; on_closed (may be NULL) runs when done. */
void rl_server_close(struct rl_server *s, void (*on_closed)(struct rl_server *s));

#endif
