/*
 * wire_fast: the short way through the codec for the one message a router relays by the
 * million, CHECK, and its reply. Each reader takes the common encodings of that one message
 * (fixarray header, op 1, any unsigned format of up to 32 bits for the id, and the field
 * formats the encoders of wire_put.c and every v1 client emit) straight from the bytes, with
 * no scan and no msgpack-c object tree, and says where the fields after the id begin, so a
 * relay can send them on untouched under another id (rl_wire_put_spliced). A payload it does
 * not take (any other op, another encoding of the same values, anything out of bounds,
 * anything malformed) is left to the full decoders of wire.h, which judge it and word the
 * error: whenever a reader here returns 0, rl_wire_decode_req / rl_wire_decode_reply return
 * success with the same fields (tests/common/check_wire.c holds them to that). ADJUST and
 * RELEASE, a CHECK's shape under op 9 and 10 (element 5 a signed delta, an unsigned count) with
 * replies of a CHECK reply's shape, are read by the _keyed readers alike, for the router's
 * relay of them. Not for any other op.
 */
#ifndef RL_WIRE_FAST_H
#define RL_WIRE_FAST_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "wire.h"

/* The fixarray headers of a CHECK request (6 elements) and its reply (7). */
#define RL_WIRE_CHECK_HDR 0x96u
#define RL_WIRE_CHECK_REPLY_HDR 0x97u

/*
 * Reads the CHECK request payload p[0..n). Returns 0 with *req filled as rl_wire_decode_req
 * fills it and *tail the offset of the service (the first field after the id), or -1: not
 * taken here, decode it with rl_wire_decode_req.
 */
int rl_wire_fast_check(const char *p, size_t n, struct rl_wire_req *req, size_t *tail);

/* rl_wire_fast_check for a CHECK, an ADJUST (op 9: element 5 a signed delta, in any int format
 * but uint 64) or a RELEASE (op 10: element 5 its count, in cost), in their six-element form
 * (the header RL_WIRE_CHECK_HDR): req->op says which. */
int rl_wire_fast_keyed(const char *p, size_t n, struct rl_wire_req *req, size_t *tail);

/* rl_wire_fast_keyed, and the seven- and eight-element forms too (an inline limit, nil or
 * [algorithm, limit, window_ms, burst|nil], and a tenant, nil or an unsigned integer: what
 * routers send for RESP and gRPC): for the node, which judges the request. Not for a relay:
 * the tail of such a request is not a six-element CHECK's (rl_wire_put_spliced). */
int rl_wire_fast_keyed_all(const char *p, size_t n, struct rl_wire_req *req, size_t *tail);

/*
 * Reads the CHECK reply payload p[0..n). Returns 0 with rep's op, id and check set as
 * rl_wire_decode_reply sets them (its other scalar fields cleared as it clears them) and
 * *tail the offset of the code (the first field after the id), or -1: not taken here.
 */
int rl_wire_fast_check_reply(const char *p, size_t n, struct rl_wire_reply *rep, size_t *tail);

/* rl_wire_fast_check_reply for the reply of a CHECK, an ADJUST or a RELEASE (op 1, 9 or 10,
 * the same shape): rep->op says which. */
int rl_wire_fast_keyed_reply(const char *p, size_t n, struct rl_wire_reply *rep, size_t *tail);

/*
 * Appends the frame [hdr-array, op, id, ...tail]: a one-byte array header, a positive
 * fixint op, id in the shortest format, then tail[0..tail_len) as it is (the fields after the
 * id of a message read above). Returns 0, -ENOMEM, or -EMSGSIZE past RL_WIRE_FRAME_MAX; on
 * failure out is left as it was.
 */
int rl_wire_put_spliced(struct rl_buf *out, uint8_t hdr, uint8_t op, uint32_t id, const char *tail,
                        size_t tail_len);

/*
 * Appends the CHECK frame of req: the bytes rl_wire_put_check (wire_put.c) writes, written
 * by hand in one pass (no packer, no callback per element), for the CHECKs a router encodes
 * by the million (the fronts' inline limits). Returns what rl_wire_put_check returns; on
 * failure out is left as it was.
 */
int rl_wire_fast_put_check(struct rl_buf *out, const struct rl_wire_req *req);

#endif
