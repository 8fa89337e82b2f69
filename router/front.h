/*
 * front: the byte-stream connections of the router's protocol fronts other than the binary
 * wire protocol (conn.c): the gRPC front of Envoy's rate limit service (rls_h2.c) today.
 * A front is a listener of its own (rproc.c accepts on it on the main loop and hands each
 * socket, with its front kind, to the least loaded worker) and a vtable of callbacks
 * (struct rl_front_ops) that turns the bytes read into answers; front.c does the rest:
 *
 *   - adopting an accepted socket on a worker (rl_front_adopt), the process-wide cap on a
 *     front's connections (counted in the worker group, router_int.h: the acceptor adds
 *     one, front.c takes it off when the connection closes);
 *   - reading into one bounded buffer per worker loop, and handing the bytes to the
 *     protocol through ONE function (front_in in front.c);
 *   - the output: the protocol queues bytes (rl_front_write) and front.c writes them through
 *     ONE function (front_out); reading stops while write_queue_max bytes are unsent;
 *   - the request bytes a protocol holds (rl_front_hold): per connection, and per worker
 *     loop its share of [clients] buffer_memory, which counts the output not yet written
 *     too (a connection with output unsent stops reading while the share is spent);
 *   - the per-turn input budget (limits.turn_bytes): bytes read, and the cost a protocol
 *     charges for what they decode to (rl_front_charge), per connection per loop turn; a
 *     connection through it stops reading until the next turn (counted as throttled);
 *   - opening: a new connection counts against its front's pre-AUTH share (half of
 *     max_connections; when full, the loop's oldest opening connection of that front makes
 *     room) until its protocol calls rl_front_authenticated, and is closed if it has not by
 *     auth_timeout after its accept (a TLS handshake, a preface, a first call: every front,
 *     with or without [client] sections);
 *   - one timer per worker loop (tick_ms): idle_timeout ([clients]) closes a connection with
 *     no call open; output that makes no progress for frame_timeout closes its connection
 *     (a client that never reads); the protocol's on_tick enforces frame_timeout on its
 *     requests;
 *   - closing (the protocol's on_close orphans what it has in flight, then frees its state).
 *
 * With [cluster] tls_* set, TLS (common/tls.h, the router's server context, which selects
 * ALPN "h2" when a client offers it) goes between the socket and front_in / front_out
 * without the protocols knowing: front_tls_in decrypts, front_tls_pump encrypts; a client
 * whose first byte is not a TLS handshake record is closed at once (told why first when the
 * protocol has words for it: plaintext_refusal). Not for any protocol's framing (rls_h2.c), nor for routing (forward.c).
 */
#ifndef RL_FRONT_H
#define RL_FRONT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "frontkind.h"

struct rl_conf;
struct rl_router;
struct rl_front_conn;

struct rl_front_limits {
    size_t write_queue_max; /* unsent output bytes at which reading stops */
    size_t held_max;        /* request bytes a connection may hold (rl_front_hold) */
    uint32_t tick_ms;       /* how often on_tick and the idle check run */
    uint32_t turn_bytes;    /* input cost one connection may take per loop turn; 0: no bound */
};

struct rl_front_ops {
    const char *name;
    struct rl_front_limits limits;
    /* A new connection: its protocol state (rl_front_set_proto), and what it sends first
     * queued with rl_front_write. 0, or a negative errno (the connection is not adopted). */
    int (*on_open)(struct rl_front_conn *c);
    /* Bytes read (after any transport layer). 0, or -1: a protocol error, close now. */
    int (*on_bytes)(struct rl_front_conn *c, const uint8_t *data, size_t len);
    /* Queues (rl_front_write) what the protocol has to send. 0, or -1: close now. */
    int (*produce)(struct rl_front_conn *c);
    /* True when the protocol will neither read nor write any more: the connection closes
     * once its output is written. */
    bool (*finished)(struct rl_front_conn *c);
    /* True while a call is open (the connection is not idle). */
    bool (*busy)(struct rl_front_conn *c);
    /* Optional (NULL: busy): true while it holds requests read and not yet answered, a call
     * open or commands waiting in its input for a slot: a router's drain waits for them. */
    bool (*unanswered)(struct rl_front_conn *c);
    /* idle_timeout passed: queue a goodbye (optional; NULL: close at once). */
    void (*on_idle)(struct rl_front_conn *c);
    /* Every tick_ms (now: loop time): frame_timeout of the requests not yet complete. */
    void (*on_tick)(struct rl_front_conn *c, uint64_t now, uint64_t frame_timeout_ms);
    /* The connection closes: orphan what is in flight, free the protocol state. */
    void (*on_close)(struct rl_front_conn *c);
    /* With TLS, what a plaintext client is told (in plaintext, in the protocol's own terms)
     * before it is closed; NULL: closed without a word. */
    const char *plaintext_refusal;
    /* True: the protocol authenticates a connection once (RESP's AUTH): while [client]
     * sections exist an address past its failed AUTHs is refused (front_admit in front.c);
     * false: each call authenticates (gRPC's metadata). Either way a new connection is
     * pre-AUTH until rl_front_authenticated. */
    bool auth_per_connection;
    /* Optional: what a connection refused at once (front_admit) is told: why, in the
     * protocol's words, written to buf (n bytes at most); returns the length. */
    size_t (*refusal)(char *buf, size_t n, const char *why);
    /* Optional: makes the protocol's per-loop state of r (router created). 0, or -ENOMEM. */
    int (*new_loop)(struct rl_router *r);
    /* Optional: the router closes: closes the protocol's per-loop handles (each counted among
     * r's handles: rl_router_hold / rl_router_unhold). */
    void (*close_loop)(struct rl_router *r);
    /* Optional: frees the protocol's per-loop state of r (router freed, every connection
     * closed; also after a failed new_loop). */
    void (*free_loop)(struct rl_router *r);
};

/* A row of the front table (the process's, fronts.c: rl_fronts; a router is handed it
 * in rl_router_opts.fronts): a front's protocol, and where it listens per the config (host
 * NULL: it does not). */
struct rl_front_def {
    const struct rl_front_ops *ops;
    void (*listen)(const struct rl_conf *conf, const char **host, uint16_t *port);
};

/* Serves fd, accepted on front kind's listener, on r's loop. 0, or a negative errno (then
 * the caller closes fd and takes the connection off its group's count). */
int rl_front_adopt(struct rl_router *r, enum rl_front_kind kind, uv_os_sock_t fd);

/* Makes every front's per-loop state of r (its table's new_loop). 0, or -ENOMEM (then
 * rl_front_free frees what was made). */
int rl_front_init(struct rl_router *r);

/* Closes every front connection of r (router closing), and each front's per-loop handles. */
void rl_front_close_all(struct rl_router *r);

/* Frees r's front state (once every connection is closed). */
void rl_front_free(struct rl_router *r);

/* The peer's address: 16 bytes (IPv4 mapped into IPv6; zeros when unknown), and as text
 * ("ip:port", for logs). */
const uint8_t *rl_front_peer_addr(const struct rl_front_conn *c);
const char *rl_front_peer(const struct rl_front_conn *c);

/* The connection's router, protocol state, front kind. */
struct rl_router *rl_front_router(const struct rl_front_conn *c);
void *rl_front_proto(const struct rl_front_conn *c);
void rl_front_set_proto(struct rl_front_conn *c, void *proto);

/* Queues len bytes of output (copied); they go out at the next rl_front_flush. -1: out of
 * memory (the connection closes at the flush). */
int rl_front_write(struct rl_front_conn *c, const void *data, size_t len);

/* Has the protocol produce its output and writes it; closes the connection when the
 * protocol is finished and everything is written. */
void rl_front_flush(struct rl_front_conn *c);

/* c has output queued (an answer came): it is written once this loop turn, with whatever
 * else the turn queued on c (front.c's check handle), rather than at once. */
void rl_front_mark(struct rl_front_conn *c);

/* c passed its protocol's opening (its authentication, or without [client] sections its
 * first complete valid request): it counts as pre-AUTH no more and auth_timeout no longer
 * applies. Calling it again does nothing. */
void rl_front_authenticated(struct rl_front_conn *c);

/* What the bytes just handed to on_bytes cost beyond their number (e.g. decoded header
 * bytes): charged to c's per-turn input budget (limits.turn_bytes); past it, c reads no more
 * until a later turn. */
void rl_front_charge(struct rl_front_conn *c, size_t cost);

/* Closes c now (a protocol's fatal error outside on_bytes). */
void rl_front_close(struct rl_front_conn *c);

/* Stops reading c (pause: the protocol cannot take more input for now, e.g. too many
 * requests of c wait for answers) or lets it read again. Reading also stops while
 * write_queue_max bytes are unsent; it resumes when neither holds. */
void rl_front_pause(struct rl_front_conn *c, bool pause);

/* r drains (rl_router_drain): no front connection reads any more; what they asked is still
 * answered. */
void rl_front_drain(struct rl_router *r);
/* True while a front connection of r's loop has requests read and not answered, or answers
 * not yet written: a drain waits for them (at most its end). */
bool rl_front_unanswered(const struct rl_router *r);

/* Sends FIN once the output queued so far is written (uv_shutdown): the protocol says
 * goodbye but keeps reading (and dropping) until the peer closes or it closes c itself, so
 * that its last bytes are not lost to a reset. Output queued after it is dropped. */
void rl_front_shutdown(struct rl_front_conn *c);

/* The connection did something (a call ended): the idle timeout counts from now. */
void rl_front_touch(struct rl_front_conn *c);

/* Request bytes the protocol holds for c go from old to new. 0, or -1 when new would pass
 * the connection's held_max or its worker loop's share of [clients] buffer_memory
 * (nothing changed then). */
int rl_front_hold(struct rl_front_conn *c, size_t old, size_t new);
/* The same for growth past what is needed now (a doubled buffer): past the worker's share it
 * is refused, never makes room by closing another connection (rl_front_hold does, for the
 * bytes needed: the connection holding the most, as docs/OPERATIONS.md says). */
int rl_front_hold_spare(struct rl_front_conn *c, size_t old, size_t new);

/* The fronts' vtables, by kind. */
extern const struct rl_front_ops rl_rls_h2_ops;
extern const struct rl_front_ops rl_resp_ops;

#endif
