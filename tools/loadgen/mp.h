/*
 * mp: the few MessagePack values rl-bench writes and reads by hand, so that encoding a
 * request and decoding a CHECK reply cost no packer, no zone and no copy. It writes the
 * same bytes msgpack-c would (the shortest form of each value), and reads only the reply
 * shape the server sends for an answered CHECK.
 * Not a MessagePack library: anything else is left to the general decoder in common/wire.h,
 * and nothing here checks room in the output; the caller reserves it.
 */
#ifndef RL_MP_H
#define RL_MP_H

#include <stddef.h>
#include <stdint.h>

/*
 * Writes v at p as a positive fixint or uint 8/16/32/64, whichever is shortest; p has room
 * for 9 bytes (5 when v <= UINT32_MAX). Returns the byte after it.
 */
char *rl_mp_put_uint(char *p, uint64_t v);

/* Writes v at p as the shortest MessagePack integer (a negative one as fixint or int
 * 8/16/32); p has room for 5 bytes. Returns the byte after it. */
char *rl_mp_put_int32(char *p, int32_t v);

/*
 * Writes the n bytes of s at p as a fixstr or str 8; n is at most 255 (the caller checks)
 * and p has room for n + 2 bytes. Returns the byte after it.
 */
char *rl_mp_put_str(char *p, const char *s, size_t n);

/*
 * Reads a CHECK reply payload [1, id, code, limit, remaining, reset_ms, retry_after_ms] in
 * place (or ADJUST's or RELEASE's, the same shape under their op: op says which): every field an
 * unsigned integer, code a known reply code (below RL_WIRE_CODE_COUNT), nothing after it. Returns 0
 * with *id and *code set, or -1 for anything else (an ERROR reply, or a shape it does not know),
 * which the caller hands to rl_wire_decode_reply() to judge.
 */
int rl_mp_read_check(const char *payload, size_t len, uint8_t op, uint64_t *id, uint64_t *code);

#endif
