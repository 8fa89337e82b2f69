/*
 * conn_int: what the three files of the connection module share, and nothing else
 * includes: the calls each makes of another (and conn_tls.c's handshake gate). conn.c owns the loop's flusher, a
 * connection's life and its writing; conn_read.c its reading and framing; conn_listen.c
 * accepting, a listener's limits and counters, and the refusals it answers.
 */
#ifndef RL_CONN_INT_H
#define RL_CONN_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "conn.h"

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

/* Resumes c if it may, writes what it has queued, or closes it once finished. */
void conn_flush(struct rl_conn *c);

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

/* ---- conn_read.c ----------------------------------------------------------------------- */

/* Processes the frames waiting in c->in. */
void conn_process(struct rl_conn *c);

/* uv_read_start with the module's allocator and read callback; 0 or a libuv error. */
int conn_start_reading(struct rl_conn *c);

/* ---- conn_listen.c --------------------------------------------------------------------- */

/* c (a listener's) starts closing: it leaves the listener's list and counts. */
void conn_listener_leave(struct rl_conn *c);

/* A connection of l was closed and freed: l may finish closing, or accept again. */
void conn_listener_closed(struct rl_listener *l);

/* c, taken from the router reserve, did not say HELLO in time: it gets the refusal its
 * numbers earned. */
void conn_refuse_probation(struct rl_conn *c);

/* c needs buffer memory the clients' budget (buffer_memory) no longer has: refused. */
void conn_refuse_buffers(struct rl_conn *c);

#endif
