/*
 * conn_int: what the files of the connection module offer one another, and nothing else
 * includes. The files form layers, each calling only those below it (bottom first): conn.c
 * (a connection's life); conn_tls.c (the loop's TLS handshake gate) and conn_refuse.c
 * (refusals and protocol errors); conn_read.c (reading and framing); conn_listen.c
 * (accepting, a listener's caps) and conn_flush.c (the loop's flusher, writing, outgoing
 * connects). What a lower file must tell a higher one goes through hooks the higher one
 * installs (struct rl_connq's flush_one and hs_end, struct rl_listener's on_conn_leave and
 * on_conn_freed, conn.h). Declarations only, of pointers: it includes no header of the
 * module. Not for the module's users (conn.h).
 */
#ifndef RL_CONN_INT_H
#define RL_CONN_INT_H

#include <stdbool.h>
#include <stdint.h>

struct rl_buf;
struct rl_conn;
struct rl_conn_ops;
struct rl_connq;
struct rl_listener;

/* ---- conn.c ---------------------------------------------------------------------------- */

/* Gives c its loop, ops, owner data, empty buffers and default bounds. */
void conn_setup(struct rl_conn *c, struct rl_connq *q, const struct rl_conn_ops *ops,
                void *data);

/* Brings q->client_bytes up to date with the buffers of c (a listener's connection). */
void conn_account(struct rl_conn *c);

/* Empties b, and gives its memory back when it grew past what an idle connection keeps. */
void conn_buf_trim(struct rl_buf *b);

/* Fills c->peer ("ip:port") and, when addr is not NULL, the address as 16 bytes (IPv4
 * mapped into IPv6). */
void conn_peer_name(struct rl_conn *c, uint8_t *addr);

/* Stops reading from c (the frames it has read wait in c->in). */
void conn_pause(struct rl_conn *c);

/* c handled its share of input for this loop turn: it waits for the next flush. */
void conn_throttle(struct rl_conn *c);

/* Keeps the loop from blocking in poll before the next flush. */
void conn_idle_start(struct rl_connq *q);

/* ---- conn_tls.c ------------------------------------------------------------------------ */

/* Sets up the gate's timer on q->loop (a handle of q's). */
void conn_hs_init(struct rl_connq *q);

/* A turn begins: its handshake budget opens. */
void conn_hs_turn(struct rl_connq *q);

/* The queued handshakes take their steps while the turn's budget and the share last; true
 * when some still wait for the next turn (the loop must not block), false when none wait or
 * the share is spent (then a timer wakes the loop when it allows a step). */
bool conn_hs_resume(struct rl_connq *q);

/* Frees the gate's counts (q closed). */
void conn_hs_free(struct rl_connq *q);

/* ---- conn_refuse.c --------------------------------------------------------------------- */

/* What a warning is about: each is logged at warn once per address a minute (the value
 * seeds the address's hash). */
enum conn_warn {
    CONN_WARN_PROTOCOL = 1,
    CONN_WARN_BUFFERS,
    CONN_WARN_REFUSED,
    CONN_WARN_FRAME_TIMEOUT,
    CONN_WARN_AUTH_TIMEOUT,
    CONN_WARN_AUTH_RATE,
    CONN_WARN_PREAUTH,
};

/* True when an event of `kind` from c's peer address should be logged at warn now: once per
 * address and kind per RL_CONN_WARN_INTERVAL_MS (as far as l's 64 slots remember). */
bool conn_should_warn(struct rl_listener *l, const struct rl_conn *c, enum conn_warn kind);

/* Answers c (a listener's) ERROR err and closes it, counting it in *counter (and, unless it
 * is a timeout or a pre-AUTH connection closed for a newer one, in connections_refused) and
 * logging it at warn once per address and kind a minute. */
void conn_refuse_counted(struct rl_conn *c, uint64_t *counter, enum conn_warn kind,
                         uint32_t err, const char *msg);

/* c, taken from the router reserve, did not say HELLO in time: it gets the refusal its
 * numbers earned. */
void conn_refuse_probation(struct rl_conn *c);

/* c needs buffer memory the clients' budget (buffer_memory) no longer has: refused. */
void conn_refuse_buffers(struct rl_conn *c);

/* ---- conn_read.c ----------------------------------------------------------------------- */

/* Processes the frames waiting in c->in. */
void conn_process(struct rl_conn *c);

/* uv_read_start with the module's allocator and read callback; 0 or a libuv error. */
int conn_start_reading(struct rl_conn *c);

/* c (finishing, plain TCP, everything written) shuts its write side and reads only to drop
 * input until the peer closes (conn_read), then closes. */
void conn_linger(struct rl_conn *c);

#endif
