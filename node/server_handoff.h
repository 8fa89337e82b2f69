/*
 * server_handoff: the node's side of HANDOFF_OUT and HANDOFF_IN (docs/PROTOCOL.md,
 * "HANDOFF_OUT, HANDOFF_IN"): a shard's live keys read out as handoff records, a few at a
 * time from a snapshot taken at offset 0, and records of a shard put into this node's
 * limiter. Each answer (or its ERROR) is appended to an output buffer; server.c dispatches
 * and counts them as admin traffic. An automatic move's HANDOFF_IN (with `final`) is taken
 * only when move.h says the shard is expected here. Not for who may send them (the node's
 * gate, gate.h), the records' encoding (handoff.h), nor for deciding when a shard moves
 * (move.h; by hand: rl-cli handoff).
 */
#ifndef RL_SERVER_HANDOFF_H
#define RL_SERVER_HANDOFF_H

#include <stdint.h>

#include "buf.h"

struct rl_server;
struct rl_wire_req;

/* The most bytes of records one export holds (its snapshot); a shard with more is refused
 * with OVERLOADED. */
#define RL_SERVER_HANDOFF_MAX (128u << 20)

/* The handoff state of a server: at most one export in progress (the snapshot), and room to
 * decode one key. Created at the first handoff op. */
struct rl_server_handoff;

/* Answers HANDOFF_OUT / HANDOFF_IN req into out (the reply, or an ERROR counted in
 * s->errors). Returns 0, or -ENOMEM when not even the reply could be written. */
int rl_server_handoff_out(struct rl_server *s, const struct rl_wire_req *req, struct rl_buf *out);
int rl_server_handoff_in(struct rl_server *s, const struct rl_wire_req *req, struct rl_buf *out);

/* Frees s's handoff state (NULL: none). */
void rl_server_handoff_free(struct rl_server_handoff *h);

#endif
