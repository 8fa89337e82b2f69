/*
 * conn: one rl-bench connection. Encodes CHECKs by hand straight into its output buffer,
 * each taking a free in-flight slot (its id is the slot and the slot's generation, so a
 * reply finds its send time in O(1) and a stray id is recognised), writes them with one
 * write per loop turn, and decodes replies in place (mp.h, with common/wire.h for anything
 * else), recording each latency in its worker's histogram and tallying its code. A broken
 * connection counts what it had in flight as lost and, when it was the worker's last,
 * finishes the worker (worker.h). Also the blocking probe that resolves the target first.
 */
#ifndef LG_CONN_H
#define LG_CONN_H

#include <stdint.h>

#include "loadgen.h"

/* Connects once with the blocking client: resolves the target, proves it answers (and takes
 * the token, if any), and keeps the address that worked in b->addr. Prints its errors. */
int lg_resolve_target(struct bench *b);

/* Sets up c (its buffers and --pipeline slots) for worker w; -ENOMEM. */
int lg_conn_init(struct worker *w, struct conn *c, unsigned index);
void lg_conn_deinit(struct conn *c);

/* uv_tcp_connect's callback: AUTH first when there is a token, then reading; the worker
 * starts when its last connection is up. */
void lg_on_connect(uv_connect_t *req, int status);

/* Encodes one CHECK for a fresh key into c's output; its latency will count from t. */
int lg_conn_send_one(struct conn *c, uint64_t t);

/* Writes what c has encoded, unless a write is in flight (then after it). */
void lg_conn_flush(struct conn *c);

/* Closes c (once), counting its in-flight requests as lost; why and a nonzero status other
 * than UV_ECANCELED are reported unless the worker is finishing. */
void lg_conn_kill(struct conn *c, const char *why, int status);

#endif
