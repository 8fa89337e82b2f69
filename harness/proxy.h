/*
 * proxy: a fault proxy on loopback, for integration tests and rl-chaos: a TCP forwarder put
 * between two processes (a router and a node, a node and ZooKeeper) that can partition
 * them (silently, one way, or with resets) and add latency while both keep running.
 *
 * One thread, poll(2), at most RL_PROXY_PAIRS connection pairs. Every socket it owns is
 * non-blocking and the dial to the target too, so a peer that stops reading (or a target
 * that is SIGSTOPped) stalls only its own pairs. Not for production traffic.
 *
 * Forwarding: a chunk read on one side joins the queue toward the other side with a due
 * time (read time + the delay then in force) and is written, in order, once due. A side is
 * not read while the queue its bytes go into holds more than 1 MiB, and read again once it
 * is below 512 KiB, so a pair holds at most about 2 MiB whatever its peers do.
 *
 * Closing: when a side closes (read returns 0), neither side is read any more, what is
 * queued both ways is written (when due, outside BLACKHOLE), then both sockets are closed
 * (a plain close, FIN). A read or write error, or a reset by a peer, closes both at once.
 * A target that refuses the dial (or fails it) gets the accepted side closed.
 */
#ifndef RL_HARNESS_PROXY_H
#define RL_HARNESS_PROXY_H

#include <stdint.h>

#define RL_PROXY_PAIRS 256 /* connection pairs at once; an accept past it is closed */

/*
 * What the proxy does to traffic. A mode applies to every pair, open or new, from when the
 * proxy's thread sees it (within ~20 ms of rl_proxy_set_mode(), usually at once). Bytes
 * already read and queued when a mode changes keep their due time and are written under
 * the new mode's rules (dropping applies to reads, not to what is queued).
 */
enum rl_proxy_mode {
    /* Forward both ways (after the delay, if any). The initial mode. */
    RL_PROXY_PASS,
    /*
     * A silent partition: accepted connections are kept open but nothing is read or
     * forwarded either way (queued bytes wait too; a close or reset by a peer is noticed
     * only after), and no socket is closed. New connections are accepted (within
     * RL_PROXY_PAIRS) but the target is not dialed until the mode changes back. When the
     * mode leaves BLACKHOLE everything held resumes, like a healed network: the held
     * connections dial the target, queued bytes are written, and TCP connections that
     * were not closed carry on.
     */
    RL_PROXY_BLACKHOLE,
    /*
     * Every open pair (held and still-dialing ones too) is closed with RST on both sides
     * (SO_LINGER 0) when the mode is set, and every connection accepted while in this
     * mode is reset at once. Setting RESET and then another mode at once still resets
     * every pair open at the time: the reset is not lost if the thread never sees RESET
     * as the current mode.
     */
    RL_PROXY_RESET,
    /*
     * One-way partition: bytes from the accepted side (client) toward the target are read
     * and discarded (counted in dropped_up); target->client is still forwarded.
     */
    RL_PROXY_DROP_UP,
    /*
     * One-way partition the other way: target->client bytes are read and discarded
     * (counted in dropped_down); client->target is forwarded.
     */
    RL_PROXY_DROP_DOWN,
};

/* A snapshot of a proxy's counters, all since rl_proxy_start(). */
struct rl_proxy_stats {
    uint64_t accepted;     /* connections accepted, including those closed or reset at once */
    uint64_t resets;       /* connections reset by RESET: a pair counts once */
    uint64_t bytes_up;     /* bytes written to the target (forwarded client->target) */
    uint64_t bytes_down;   /* bytes written to the client (forwarded target->client) */
    uint64_t dropped_up;   /* client bytes read and discarded in DROP_UP */
    uint64_t dropped_down; /* target bytes read and discarded in DROP_DOWN */
    int open;              /* pairs now (held, dialing, open or closing) */
};

struct rl_proxy;

/*
 * Listens on 127.0.0.1:*port (chosen when 0; *port receives it) and forwards each
 * connection to 127.0.0.1:target, in mode PASS without delay. 0 or -errno.
 */
int rl_proxy_start(struct rl_proxy **out, int target, int *port);

/* Sets the mode (above). Thread-safe; takes effect within ~20 ms. */
void rl_proxy_set_mode(struct rl_proxy *p, enum rl_proxy_mode mode);

/*
 * Added latency, each direction: a chunk read at t is written at t + delay_ms (or later,
 * if the peer does not read), order kept; 0 = none, negative counts as 0. A new delay
 * applies to bytes read from then on. Applies in PASS and the DROP modes (in BLACKHOLE
 * nothing moves anyway). Thread-safe.
 */
void rl_proxy_set_delay(struct rl_proxy *p, int delay_ms);

/* A consistent snapshot of the counters, at most one turn of the thread old. Thread-safe. */
void rl_proxy_stats(struct rl_proxy *p, struct rl_proxy_stats *out);

/* Stops (joins) the thread and closes every socket; NULL is a no-op. */
void rl_proxy_stop(struct rl_proxy *p);

#endif
