/*
 * turnshare: a loop turn's input split between clients, then between each client's
 * connections. A client is a peer address. Each connection that used its whole share in a
 * turn is counted under its address (rl_turnshare_busy); when the turn ends the count becomes
 * the last turn's (rl_turnshare_next), and a connection's share in the next turn is
 * RL_CONN_TURN_ALL over (clients busy last turn x its client's connections busy last turn),
 * kept within RL_CONN_TURN_MIN and the connection's full share. So 50 connections from one
 * address that send all they can take one client's part of a turn, not 50, and a client on
 * one connection beside them is read about half the turn rather than a 51st.
 *
 * Used by common/conn_read.c (binary clients) and router/front.c (the RESP and gRPC fronts),
 * each with a tally of its own per loop: no locks. Memory: two sets of at most one slot per
 * connection counted in a turn, so bounded by the connections. Not for limits on
 * connections per address (conn_listen.c) or on requests (the node window, router/fairq.c).
 */
#ifndef RL_TURNSHARE_H
#define RL_TURNSHARE_H

#include <stddef.h>
#include <stdint.h>

/* A loop's client connections that used their share in the last turn split this much of the
 * next between them (each still RL_CONN_TURN_MIN at least, its full share at most: 64 KiB,
 * RL_CONN_TURN_BYTES, for a binary client), and past twice this much of clients' input in a
 * turn each gets RL_CONN_TURN_MIN: the more connections send all they can, the less each is
 * read a turn, so a turn stays short and a connection that sends now and then is read, and
 * answered, within one. */
#define RL_CONN_TURN_ALL (128u * 1024u)
#define RL_CONN_TURN_MIN (1024u)

/* One turn's busy connections by address (open addressing, slots in `used` order). */
struct rl_turnset {
    struct rl_turnslot *slots; /* cap slots; NULL until the first count */
    uint32_t *used;            /* the indices of the slots taken, `clients` of them */
    uint32_t cap;              /* a power of two, or 0 */
    uint32_t clients;          /* distinct addresses counted */
    uint32_t conns;            /* connections counted (every address) */
    uint32_t lone;             /* of which counted as clients of their own (out of memory) */
};

struct rl_turnshare {
    struct rl_turnset now, last;
    uint64_t seed;
};

/* Sets t up (nothing counted: every connection gets its full share) / frees what it holds. */
void rl_turnshare_init(struct rl_turnshare *t);
void rl_turnshare_deinit(struct rl_turnshare *t);

/* A connection of addr (16 bytes, IPv4 mapped into IPv6) used its whole share this turn:
 * call once a turn per connection. Out of memory, it counts as a client of its own. */
void rl_turnshare_busy(struct rl_turnshare *t, const uint8_t *addr);

/* The turn ended: what was counted in it becomes the last turn's. */
void rl_turnshare_next(struct rl_turnshare *t);

/* Clients and connections that used their share in the last turn. */
uint32_t rl_turnshare_clients(const struct rl_turnshare *t);
uint32_t rl_turnshare_conns(const struct rl_turnshare *t);

/* The input share this turn of a connection of addr whose full share is full, when the turn
 * has handled turn_all bytes of clients' input so far: RL_CONN_TURN_ALL over (busy clients x
 * busy connections of addr) of the last turn, within [RL_CONN_TURN_MIN, full]; full when
 * nobody was busy; RL_CONN_TURN_MIN once turn_all reached twice RL_CONN_TURN_ALL. */
size_t rl_turnshare_share(const struct rl_turnshare *t, const uint8_t *addr, uint64_t turn_all,
                          size_t full);

#endif
