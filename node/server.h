/*
 * server: the node's TCP front end: a listener of framed connections (conn.h), each frame
 * decoded (wire.h) and answered by the limiter. Replies of one loop turn leave in one write
 * per client; backpressure, half-close, the connection cap (an OVERLOADED error past
 * max_connections) and protocol errors follow conn.h's one behaviour. Not for ZooKeeper
 * (zkm.h).
 */
#ifndef RL_SERVER_H
#define RL_SERVER_H

#include "server_state.h"

/*
 * Starts listening on opts->host:opts->port and serving with limiter (not owned). Returns 0
 * or a negative errno (-EADDRINUSE, ...). The server struct must stay put until on_closed.
 */
int rl_server_start(struct rl_server *s, uv_loop_t *loop, struct rl_limiter *limiter,
                    const struct rl_server_opts *opts);

/* The membership state STATS reports as zk_state and registered (set by the node's main). */
void rl_server_set_membership(struct rl_server *s, int zk_state, int registered);

/*
 * ZooKeeper mode: from now on a CHECK is answered only for a shard whose bit is set in owned
 * (nshards bits, the caller's, kept alive until the next call), and only while registered;
 * anything else gets ERROR NOT_OWNER. table_digest is the rl_shardmap_digest_stat() of the
 * table owned was taken from, which STATS reports as `table_digest`. Never called with
 * static membership: then every CHECK is answered and `table_digest` is 0.
 */
void rl_server_set_owned(struct rl_server *s, const uint8_t *owned, uint32_t nshards,
                         int64_t table_digest);

/* The per-shard ownership epochs (nshards of them, the caller's, kept alive and updated by
 * it): a CHECK of shard s is judged under epochs[s]. NULL: epoch 0 for all. */
void rl_server_set_epochs(struct rl_server *s, const uint16_t *epochs);

/* Appends the node's rl_ metric families (docs/OPERATIONS.md, "Metrics") to p. */
void rl_server_metrics(struct rl_server *s, struct rl_prom *p);

/* Whether the node is ready for traffic (/readyz): registered and serving; if not, why. */
bool rl_server_ready(const struct rl_server *s, char *why, size_t len);

/* Stops listening and closes every connection; on_closed (may be NULL) runs when done. */
void rl_server_close(struct rl_server *s, void (*on_closed)(struct rl_server *s));

#endif
