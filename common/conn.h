/*
 * conn: one framed TCP connection on libuv, the only one in the tree. Every listener (the
 * node's and the router's client side) and every outgoing connection (the router's node
 * connections) is an rl_conn:
 *
 *   - reading: one growable input buffer, at most one frame plus one read chunk beyond
 *     what is being processed; each read is split into frames (4-byte big-endian length
 *     1..65536 and the payload) handed to ops->on_frame one by one;
 *   - writing: whatever the owner appends to c->out while handling a read leaves in one
 *     write at the end of that read (uv_try_write; uv_write for what the socket does not
 *     take at once); what it appends at other times (a node's reply relayed to a client, a
 *     timer's answer) is gathered and written once per loop turn from one uv_check handle
 *     per loop (struct rl_connq); the owner only calls rl_conn_mark after appending;
 *   - backpressure, one rule for every connection: c stops reading, and stops processing
 *     frames it has already read, when its queued output (c->out plus the write in flight)
 *     passes c->out_max or when it holds c->hold_max requests that will be answered later
 *     (rl_conn_hold: the router's requests waiting at a node). It resumes once both are back
 *     to half their bound: frames it had read are processed first, then reading restarts;
 *   - half-close: when the peer shuts its side, every request it sent is still answered
 *     (replies queued, requests held) and then the connection closes;
 *   - refusals and protocol errors: rl_conn_refuse and rl_conn_protocol_error queue one
 *     ERROR reply, stop reading, and close once it is written; a protocol error is logged
 *     at warn once per peer address per minute, and says so when the bytes look like HTTP or
 *     TLS;
 *   - pre-AUTH: when the owner's gate wants AUTH first (lim.auth_required), a client
 *     connection is pre-AUTH until rl_conn_authenticated: its frames may announce at most
 *     RL_WIRE_AUTH_FRAME_MAX bytes (more is a protocol error), what it keeps of a half-sent
 *     frame is sized to that, it is closed auth_timeout after accept, and pre-AUTH
 *     connections together take at most half of max_connections (the oldest is closed for a
 *     newer one) and half of buffer_memory, so silent sockets never lock out a client that
 *     authenticates; failed AUTHs are counted per address (rl_conn_auth_failed) and an
 *     address past RL_CONN_AUTHFAIL_RATE a second is refused at accept and at AUTH;
 *   - close accounting: ops->on_close runs once, synchronously, when the connection starts
 *     closing (so its owner can answer what was pending on it), ops->on_closed once the
 *     handle is closed (free or reuse it); a listener counts its connections and tells its
 *     owner once the listener and every connection are closed;
 *   - TLS (rl_connq_set_tls, tls.h): the bytes read are decrypted before framing and what
 *     is written is encrypted at the flush, so owners see the same frames either way; a
 *     connection without TLS takes none of that path.
 *
 * Everything runs on the loop thread. Not for the blocking client of tools and tests
 * (client.h), nor for rl-bench's connections (tools/loadgen: a load generator that sends
 * each paced request at once with uv_try_write to measure latency, into a fixed buffer),
 * nor for the codec (wire.h).
 */
#ifndef RL_CONN_H
#define RL_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <pthread.h>

#include <uv.h>

#include "buf.h"
#include "authfail.h"
#include "connlimits.h"
#include "turnshare.h"

#define RL_CONN_READ_CHUNK (64u * 1024u) /* room offered to each read: a largest frame */
#define RL_CONN_KEEP_BYTES 4096u         /* an emptied buffer larger than this is freed */
#define RL_CONN_TURN_BYTES                                                                         \
    (64u * 1024u)                        /* input one connection may have handled per loop         \
                                            turn before others get theirs */
#define RL_CONN_TICK_MS 250u             /* how often a listener looks for expired deadlines */
#define RL_CONN_FD_SLACK 64u             /* descriptors kept for everything but clients */
#define RL_CONN_PEER_BUCKETS 4096u
#define RL_CONN_OUT_MAX (1u << 20)       /* default bound of queued output, bytes */
#define RL_CONN_HOLD_MAX 4096u           /* default bound of held requests */
#define RL_CONN_WARN_PEERS 64u           /* peers remembered for once-per-peer warnings */
#define RL_CONN_WARN_INTERVAL_MS 60000u
#define RL_CONN_AUTHFAIL_RATE 5u         /* failed AUTHs a second an address may keep up */
#define RL_CONN_AUTHFAIL_BURST 10u       /* and in a burst, before it is refused */

struct rl_conn;
struct rl_conn_peer;
struct rl_listener;
struct rl_conn_shared;

/*
 * A TLS server connection's handshake as the loop's handshake gate sees it (rl_connq_hs_*):
 * embedded in the connection (rl_conn's, or a router front's). Zeroed: not counted.
 */
struct rl_conn_hs {
    struct rl_conn_hs *prev, *next;       /* the loop's queue of handshakes waiting a turn */
    struct rl_conn_hs *oprev, *onext;     /* the loop's handshakes in progress, the one that
                                             heard from its peer longest ago first */
    struct rl_conn_hs_peer *peer;         /* the address's count; NULL: not counted */
    void (*resume)(struct rl_conn_hs *h); /* the connection's: take its handshake step now */
    void (*evict)(struct rl_conn_hs *h);  /* the connection's: close it, to make room */
    uint64_t heard_ms;                    /* the loop's now when its peer last sent bytes */
    bool queued;
};

/* Handshakes in progress from one address, on one loop. */
struct rl_conn_hs_peer {
    struct rl_conn_hs_peer *next;
    uint8_t addr[16];
    uint32_t count;
};

#define RL_CONN_HS_BUCKETS 1024u

/* The TLS handshake gate's counters (per loop): reported with the listener's (STATS). */
struct rl_conn_hs_stats {
    uint64_t started;      /* handshakes begun (a TLS record came in) */
    uint64_t done;         /* completed */
    uint64_t deferred;     /* handshake steps left for a later turn: the turn's budget spent */
    uint64_t refused_peer; /* closed at their first record: the address had its cap */
    uint64_t refused_all;  /* closed at their first record: the loop had its cap */
    uint64_t evicted;      /* in progress RL_CONN_HS_EVICT_MS or more, closed for a new one */
    uint64_t in_progress;  /* begun, neither completed nor closed, now */
};

/*
 * One per loop: the dirty list and the uv_check handle that flushes it each loop turn. A
 * connection marked outside the I/O phase (a timer, a write's completion) also starts an
 * idle handle, so the loop does not block in poll before the flush.
 */
struct rl_connq {
    uv_loop_t *loop;
    uv_check_t check;
    uv_idle_t idle;
    struct rl_conn *dirty;
    struct rl_conn *throttled; /* used their input budget this turn: resumed by the next flush */
    uint64_t turn;             /* flushes so far: a loop turn's number */
    /* client connections (not a router's) that used their share this turn and the last, by
     * address: a connection's share is RL_CONN_TURN_ALL over the last turn's clients and its
     * client's connections (turnshare.h, conn_read.c), and once the clients' input this turn
     * (client_turn_bytes) passed twice RL_CONN_TURN_ALL, RL_CONN_TURN_MIN */
    struct rl_turnshare share;
    uint64_t client_turn_bytes;
    char *slab;                /* RL_CONN_READ_CHUNK: where a connection with no partial
                                  input reads, so an idle connection holds no input buffer */
    uint64_t client_bytes;     /* buffer bytes of every listener's connections */
    uint64_t client_budget;    /* their bound: the listener's buffer_memory */
    uint64_t preauth_bytes;    /* the part of client_bytes held by pre-AUTH connections,
                                  bounded by half of client_budget */
    struct rl_conn_shared *shared; /* NULL, or the process's totals these bounds apply to */
    struct rl_tls_ctx *tls_server; /* NULL, or TLS for every listener of this loop */
    struct rl_tls_ctx *tls_client; /* NULL, or TLS for every outgoing connection */
    char *tls_slab;                /* RL_CONN_READ_CHUNK, at the first TLS read: where TLS
                                      connections decrypt */
    /* The TLS handshake gate (rl_connq_hs_*): the handshake work the loop's thread had
     * done when this turn began (tls.h, rl_tls_handshake_work), the handshakes waiting for a
     * turn with budget, and those in progress by address. */
    uint64_t hs_turn_steps, hs_turn_ns;
    int64_t hs_tokens;     /* ns of handshake work the loop's share allows now */
    uint64_t hs_refill_ns; /* uv_hrtime of the last refill */
    uv_timer_t hs_timer;   /* wakes the loop when the share allows the queue a step again */
    struct rl_conn_hs *hs_head, *hs_tail;
    struct rl_conn_hs *hs_oldest, *hs_newest; /* handshakes in progress (onext, oprev) */
    struct rl_conn_hs_peer *hs_peers[RL_CONN_HS_BUCKETS];
    uint32_t hs_per_peer; /* handshakes in progress from one address at most */
    uint32_t hs_max;      /* and on the loop at most */
    struct rl_conn_hs_stats hs_stats;
    uint64_t hs_warned_ms;
    bool hs_freed; /* the flusher closed: the counts are gone */
    int handles;
    bool closing;
    void (*on_closed)(void *data);
    void *data;
    /* Installed by rl_connq_init (conn_flush.c) for the module's lower files, which call
     * nothing above them: flush_one writes c's output now (conn_read.c, at the end of a
     * read), hs_end takes a closing connection out of the handshake gate (conn.c). */
    void (*flush_one)(struct rl_conn *c);
    void (*hs_end)(struct rl_connq *q, struct rl_conn_hs *h);
};

struct rl_conn_ops {
    /* Optional: a batch of frames is about to be handed over (once per read or resume). */
    void (*on_batch)(struct rl_conn *c);
    /* One frame's payload (n >= 1), valid until on_batch_end returns, so an owner may hold
     * frames of a batch and answer them together at on_batch_end (conn calls it before it
     * answers a protocol error of its own, so replies keep the frames' order). The owner
     * appends replies to c->out and calls rl_conn_mark, or closes c. */
    void (*on_frame)(struct rl_conn *c, const char *p, size_t n);
    /* Optional: the batch on_batch began has been handed over (c may be closing by now). */
    void (*on_batch_end)(struct rl_conn *c);
    /* Outgoing connections: the connect finished (status 0) or failed (then on_close). */
    void (*on_connect)(struct rl_conn *c, int status);
    /* Optional: c starts closing; status is 0 (orderly), UV_EOF, or a libuv error. Runs once,
     * synchronously, before anything of c is released. */
    void (*on_close)(struct rl_conn *c, int status);
    /* Optional: the handle is closed and c's buffers emptied. A listener's connection is freed
     * right after this returns; an outgoing one may be reconnected or rl_conn_deinit'ed. */
    void (*on_closed)(struct rl_conn *c);
};

struct rl_conn {
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    struct rl_connq *q;
    const struct rl_conn_ops *ops;
    void *data;                  /* the owner's */
    struct rl_listener *listener; /* NULL for outgoing connections */
    struct rl_conn *prev, *next;  /* the listener's list */
    struct rl_conn *dirty_next;
    struct rl_conn *throttle_next;
    struct rl_conn *preauth_prev, *preauth_next; /* the listener's pre-AUTH clients, oldest
                                                    last */
    struct rl_conn_peer *peer_entry; /* the listener's count for this address; NULL if none */
    struct rl_buf in;
    struct rl_buf out;      /* replies or requests not yet handed to uv_write */
    struct rl_buf inflight; /* bytes of the write in progress */
    size_t out_max;
    uint32_t hold_max;
    uint32_t holds;
    int close_status;
    uint64_t active_ms;  /* last progress: bytes read or a write completed */
    uint64_t partial_ms; /* when the unfinished frame in `in` began; 0: none */
    uint64_t turn;       /* q->turn when turn_bytes was last reset */
    size_t turn_bytes;   /* input handled in that turn */
    uint64_t acct_bytes; /* what this connection adds to q->client_bytes */
    uint64_t accepted_ms;
    const char *refusal;       /* on probation: why it is refused unless it says HELLO */
    uint64_t *refusal_counter; /* and the listener's counter of that refusal */
    bool open;       /* the handle is initialised and uv_close not called */
    bool connected;  /* accepted, or connect succeeded: reads and writes may go */
    bool reading;
    bool writing;
    bool dirty;
    bool eof;        /* the peer shut its side */
    bool finishing;  /* close once queued output is written and nothing is held */
    bool linger;     /* finishing (rl_listener_finish): then shut the write side and read and
                        drop until the peer closes, so that input it sent meanwhile does not
                        make the close a reset that drops answers still in flight */
    bool lingering;  /* the write side is shut: reading only to see the peer's close */
    uv_shutdown_t shut; /* lingering's shutdown */
    bool throttled;  /* on q->throttled */
    bool router;     /* said HELLO as a router: counted apart from clients */
    bool hello;      /* said HELLO past a full reserve: a client's, but never idle-closed */
    bool probation;  /* taken from the router reserve: must say HELLO first */
    bool preauth;    /* must still AUTH (the listener's lim.auth_required) */
    uint8_t addr[16]; /* the peer's address (IPv4 mapped into IPv6) */
    bool admin;      /* outgoing, carrying admin replies only: one input share a turn */
    bool deferred;   /* on_frame called rl_conn_defer: the frame waits for the next turn */
    const void *principal; /* the owner's: who the peer authenticated as; NULL: nobody yet */
    struct rl_tls *tls; /* NULL: plain TCP; else what is read and written goes through it */
    bool tls_sniff;     /* a TLS listener's, nothing read yet: a plaintext client is answered
                           in plaintext that TLS is required */
    struct rl_conn_hs hs; /* a TLS listener's: its handshake at the loop's gate */
    char peer[64];   /* "ip:port" of the peer, for logs */
};

/* Listener counters: reported by STATS of the node and the router (docs/OPERATIONS.md). */
#define RL_LISTENER_STATS_MAP(X)                                                                   \
    X(connections, "connections")                 /* open now, every kind */                       \
    X(connections_total, "connections_total")     /* accepted */                                   \
    X(connections_refused, "connections_refused") /* every refusal below together */               \
    X(refused_max, "refused_max_connections")     /* past max_connections (or the fd limit) */     \
    X(refused_peer, "refused_per_peer")           /* past max_connections_per_peer */              \
    X(refused_buffers, "refused_buffer_memory")   /* buffer_memory spent: frame not taken */       \
    X(protocol_closes, "protocol_closes")         /* closed after a protocol error */              \
    X(idle_closes, "idle_closes")                 /* closed after idle_timeout */                  \
    X(frame_timeouts, "frame_timeouts")           /* closed after frame_timeout */                 \
    X(accept_errors, "accept_errors")             /* accept(2) failed (out of descriptors) */      \
    X(preauth_closes, "preauth_closes")           /* pre-AUTH, closed for a newer one */           \
    X(refused_auth_rate, "refused_auth_rate")     /* address past its failed AUTHs a second */     \
    X(auth_timeouts, "auth_timeouts")             /* closed without AUTH after auth_timeout */     \
    X(write_timeouts, "write_timeouts")           /* fronts: output stalled frame_timeout */       \
    X(throttled, "throttled")                     /* turns a connection was made to wait */        \
    X(tls_handshakes, "tls_handshakes")           /* TLS handshakes begun (every front's) */       \
    X(tls_handshakes_done, "tls_handshakes_done") /* of which completed */                         \
    X(tls_deferred, "tls_handshake_deferred")     /* steps left for a later turn (budget) */       \
    X(tls_refused_peer, "tls_refused_per_peer")   /* closed: the address's handshakes cap */       \
    X(tls_refused_all, "tls_refused_max")         /* closed: the loop's handshakes cap */          \
    X(tls_evicted, "tls_evicted")                 /* stalled, closed for a new handshake */        \
    X(buffer_evictions, "buffer_evictions")       /* fronts: held the most, closed for room */     \
    X(tls_handshaking, "tls_handshaking")         /* handshakes in progress now */                 \
    X(routers, "router_connections")              /* open now that said HELLO as a router */       \
    X(peers, "peers")                             /* distinct client addresses now */              \
    X(preauth, "preauth_connections")             /* clients open now that have not AUTHed */      \
    X(buffer_bytes, "buffer_bytes")               /* client buffer memory now */

struct rl_listener_stats {
#define RL_LISTENER_STAT_FIELD(f, name) uint64_t f;
    RL_LISTENER_STATS_MAP(RL_LISTENER_STAT_FIELD)
#undef RL_LISTENER_STAT_FIELD
};

struct rl_prom;


/* Client connections open from one address (IPv4 as IPv4-mapped IPv6). */
struct rl_conn_peer {
    struct rl_conn_peer *next;
    uint8_t addr[16];
    uint32_t count;
};

struct rl_listener_warned {
    uint64_t peer_hash;
    uint64_t at_ms;
};

struct rl_listener {
    uv_tcp_t tcp;
    struct rl_connq *q;
    const struct rl_conn_ops *ops;
    size_t conn_size; /* each connection is calloc'd this size: the owner's struct starts
                         with a struct rl_conn */
    void *data;       /* copied into each connection's data */
    struct rl_conn_limits lim;
    uint32_t max_clients; /* lim.max_connections, lowered to fit the descriptor limit */
    uint32_t clients;     /* open client connections (not refused, not routers) */
    uint32_t reserve_used; /* routers and connections on probation */
    uint32_t max_preauth;  /* pre-AUTH clients at most: half of max_clients */
    struct rl_conn *preauth_new, *preauth_old; /* pre-AUTH clients, newest and oldest */
    struct rl_conn *conns;
    struct rl_conn_peer *peers[RL_CONN_PEER_BUCKETS];
    uv_timer_t tick;
    uint64_t fd_limit;     /* the descriptor limit when the listener started */
    uint64_t accept_warned_ms;
    bool accept_paused;    /* at the descriptor ceiling: accept(2) waits for a close */
    struct rl_listener_stats stats;
    struct rl_listener_warned warned[RL_CONN_WARN_PEERS]; /* protocol errors, refusals */
    /* Failed AUTHs by network (authfail.h), made at the first failure, freed at the close;
     * NULL: none yet. Unused when shared (the shared table's). */
    struct rl_authfail *authfail;
    /* NULL, or what this listener shares with listeners on other loops (rl_conn_shared) */
    struct rl_conn_shared *shared;
    int handles; /* the listener and each connection, until their close callbacks */
    bool closing;
    void (*on_closed)(struct rl_listener *l);
    /* Installed by rl_listener_start (conn_listen.c) for conn.c's close: c starts closing
     * (it leaves the listener's list and counts); a connection of l was closed and freed
     * (l may finish closing, or accept again). */
    void (*on_conn_leave)(struct rl_conn *c);
    void (*on_conn_freed)(struct rl_listener *l);
};

/*
 * What listeners on several loops of one process share (a router's workers, each with its own
 * loop and listener): then max_connections, max_connections_per_peer, the pre-AUTH half of
 * both, buffer_memory and the failed AUTHs per address bound the process, not each listener.
 * The counters are atomics, the per-address counts and the failed AUTHs tables under mutexes. Two
 * listeners admitting at once may pass max_connections by one each for a moment. A listener makes
 * room for a new pre-AUTH connection by closing its own oldest one; one that has none admits the
 * newcomer and leaves the closing to the others (evict_debt), which close their oldest within
 * RL_CONN_TICK_MS: the process is past its caps by that much for that long at most.
 */
struct rl_conn_shared {
    uint32_t clients;       /* open client connections of every listener (atomic) */
    uint32_t preauth;       /* of which pre-AUTH (atomic) */
    uint64_t client_bytes;  /* buffer bytes of every listener's clients (atomic) */
    uint64_t preauth_bytes; /* of which pre-AUTH (atomic) */
    uint32_t evict_debt;    /* pre-AUTH connections admitted past the cap by a listener that
                               had none of its own to close: the others close that many of
                               their oldest (at their next accept or tick) (atomic) */
    pthread_mutex_t authfail_mu;  /* guards authfail */
    struct rl_authfail *authfail; /* as rl_listener's */
    pthread_mutex_t peers_mu;
    struct rl_conn_peer *peers[RL_CONN_PEER_BUCKETS];
    uint64_t npeers;
};

/* Sets s up (nothing counted) / frees what it holds (every listener sharing it is closed). */
int rl_conn_shared_init(struct rl_conn_shared *s);
void rl_conn_shared_deinit(struct rl_conn_shared *s);

/* Distinct client addresses connected now to the listeners sharing s. */
uint64_t rl_conn_shared_peers(struct rl_conn_shared *s);

/* l (started, no connection yet) counts against s from now on, with the other listeners
 * sharing it; so does the loop's flusher l->q. */
void rl_listener_share(struct rl_listener *l, struct rl_conn_shared *s);

/* Starts the flusher of loop. Returns 0 or a libuv error. */
int rl_connq_init(struct rl_connq *q, uv_loop_t *loop);

/*
 * TLS for every connection of q from now on (tls.h): server for what its listeners accept,
 * client for its outgoing connections; either may be NULL (plain). The contexts are the
 * caller's and must outlive q. A TLS listener answers a client whose first byte is not a TLS
 * handshake record with a plaintext ERROR MALFORMED "TLS is required..." and closes it.
 */
struct rl_tls_ctx;
struct rl_tls;
void rl_connq_set_tls(struct rl_connq *q, struct rl_tls_ctx *server, struct rl_tls_ctx *client);

/*
 * The TLS handshake gate of a loop (conn_tls.c), for every TLS server connection of it: the
 * binary listener's and the router's other fronts (router/front.c). A handshake costs the
 * server real CPU (an ECDHE key and a signature: ~0.6 ms with P-256, ~6 ms with RSA-4096)
 * for a ClientHello an attacker replays for free, so:
 *   - per loop turn, handshake work stops after RL_CONN_HS_TURN_STEPS steps or
 *     RL_CONN_HS_TURN_US microseconds of it, whichever comes first, and over time it takes
 *     at most RL_CONN_HS_SHARE_PCT percent of the loop's wall time (a bucket of handshake
 *     nanoseconds refilled at that share of the time passing, holding one turn's budget at
 *     most); a connection whose step would pass either waits, its ciphertext fed and its
 *     reading paused, in the loop's queue, and the flusher takes the queue's steps at the
 *     next turns, after the turn's decisions (conn_flush.c, connq_flush), or a timer wakes the
 *     loop once the share allows a step again: decisions never wait behind more than one
 *     turn's budget of handshakes, and handshakes never take more than their share;
 *   - at most hs_per_peer (RL_CONN_DEFAULT_TLS_PER_PEER) handshakes are in progress from
 *     one address and hs_max (RL_CONN_DEFAULT_TLS_HANDSHAKES) on the loop: a connection
 *     whose first TLS record would pass the address's is closed at once (nothing decrypted,
 *     no crypto spent), counted in tls_refused_per_peer; at the loop's, the handshake in
 *     progress whose peer has sent nothing for the longest, when that is
 *     RL_CONN_HS_EVICT_MS or more (a client that stalls), is closed through its evict
 *     callback to make room (tls_evicted), else the new one is closed (tls_refused_max).
 *     One waiting for the loop's budget (queued: the server's turn, not the peer's) is never
 *     the one closed. So stalled handshakes cannot hold the loop's slots against new clients.
 * rl_connq_hs_begin at the first record (0, or -EBUSY: close the connection);
 * rl_connq_hs_read in place of rl_tls_read (RL_CONN_HS_LATER: the step waits, h->resume is
 * called from the flusher when its turn comes, to read again); rl_connq_hs_end when the
 * connection closes (idempotent). A completed handshake leaves the counts by itself.
 */
#define RL_CONN_HS_LATER (-100000)
#define RL_CONN_HS_EVICT_MS 250u
int rl_connq_hs_begin(struct rl_connq *q, struct rl_conn_hs *h, const uint8_t *addr,
                      void (*resume)(struct rl_conn_hs *h), void (*evict)(struct rl_conn_hs *h));
int rl_connq_hs_read(struct rl_connq *q, struct rl_conn_hs *h, struct rl_tls *tls, void *dst,
                     size_t cap);
void rl_connq_hs_end(struct rl_connq *q, struct rl_conn_hs *h);
/* h's peer sent bytes (call before feeding them to TLS): it is not stalled. */
void rl_connq_hs_heard(struct rl_connq *q, struct rl_conn_hs *h);
/* The caps of q's gate (0: the defaults of connlimits.h). */
void rl_connq_hs_limits(struct rl_connq *q, uint32_t per_peer, uint32_t max);

/* Stops it; on_closed(data) (may be NULL) runs once its handles are closed. */
void rl_connq_close(struct rl_connq *q, void (*on_closed)(void *data), void *data);

/*
 * Listens on host:port (IPv4 or IPv6 literal) with connections of conn_size bytes served by
 * ops, within lim (NULL: the defaults): past max_connections open clients, or
 * max_per_peer from one address, a new connection gets ERROR OVERLOADED and is closed (a
 * listener with a router_reserve first gives it that long to say HELLO as a router); an
 * unfinished frame older than frame_timeout, or no progress for idle_timeout, closes it; its
 * buffers count against buffer_memory. max_connections is lowered, with a warning, when the
 * descriptor limit could not hold it. Returns 0 or a negative errno (-EINVAL for a bad
 * address, -EADDRINUSE...), after which rl_listener_close must still be called. host NULL:
 * no socket, connections come only through rl_listener_adopt.
 */
int rl_listener_start(struct rl_listener *l, struct rl_connq *q, const char *host, uint16_t port,
                      const struct rl_conn_ops *ops, size_t conn_size,
                      const struct rl_conn_limits *lim, void *data);

/* A connection accepted elsewhere (socket fd, non-blocking, connected; another thread may
 * have accepted it) joins l as if l had accepted it: the same caps and refusals. l must have
 * been started with host NULL (no socket of its own). The listener owns fd from then on,
 * closing it on failure. Returns 0, or UV_ECANCELED when l is closing (fd is the caller's). */
int rl_listener_adopt(struct rl_listener *l, uv_os_sock_t fd);

/* Raises the soft descriptor limit to the hard one; returns the soft limit now. */
uint64_t rl_conn_raise_fd_limit(void);

/* c said HELLO as a router: it leaves the client counts (and probation) for the reserve.
 * Returns false when the reserve is full: c, which holds a client's slot (a connection in
 * probation always has a reserve slot), stays a client's connection. */
bool rl_conn_set_router(struct rl_conn *c);

/* Fills s with the listener's counters (buffer_bytes: of the whole loop; peers: 0 when shared,
 * where rl_conn_shared_peers counts them). */
void rl_listener_stats(const struct rl_listener *l, struct rl_listener_stats *s);

struct rl_prom;
/* Appends the listener's rl_connection* metric families (metrics.h's writer; conn_metrics.c). */
void rl_listener_metrics(const struct rl_listener *l, struct rl_prom *p);
/* The same families from counters s (several listeners' summed). */
void rl_listener_metrics_of(const struct rl_listener_stats *s, struct rl_prom *p);

/* Stops listening and closes every connection; on_closed (may be NULL) runs once all the
 * handles are closed. */
void rl_listener_close(struct rl_listener *l, void (*on_closed)(struct rl_listener *l));

/* Every connection reads no more and closes once what it was asked is answered and written
 * (rl_conn_finish), a plain TCP one by shutting its write side and waiting for the peer to
 * close (what the peer sends meanwhile is dropped): a stop that loses no answer. The
 * listener's list empties as they close. */
void rl_listener_finish(struct rl_listener *l);

/* Outgoing connections: init once, connect (again after each close), deinit once closed. */
void rl_conn_init(struct rl_conn *c, struct rl_connq *q, const struct rl_conn_ops *ops,
                  void *data);
int rl_conn_connect(struct rl_conn *c, const struct sockaddr *sa);
void rl_conn_deinit(struct rl_conn *c);

/* Output was appended to c->out: write it this loop turn. */
void rl_conn_mark(struct rl_conn *c);

/* Closes c now; what is queued is dropped. */
void rl_conn_close(struct rl_conn *c, int status);

/* Closes c now with a reset (RST): what is queued is dropped, and so is what the kernel still
 * holds for the peer, sent or not, so none of it can reach the peer later (a link that comes
 * back, a retransmission). For a connection whose requests were given up on. */
void rl_conn_abort(struct rl_conn *c, int status);

/* Reads no more; closes once queued output is written and nothing is held. */
void rl_conn_finish(struct rl_conn *c);

/* Queues ERROR err (id 0) with msg, then finishes c. */
void rl_conn_refuse(struct rl_conn *c, uint32_t err, const char *msg);

/*
 * The peer broke the protocol (payload p[0..n) did not decode, or a bad length prefix):
 * queues ERROR err for request id with msg, finishes c, counts it on the listener and logs
 * it at warn once per peer address per RL_CONN_WARN_INTERVAL_MS.
 */
void rl_conn_protocol_error(struct rl_conn *c, uint32_t id, uint32_t err, const char *msg,
                            const char *p, size_t n);

/* c passed its owner's AUTH as principal: it is pre-AUTH no more. */
void rl_conn_authenticated(struct rl_conn *c, const void *principal);

/* Milliseconds before c's address may try a token again (past RL_CONN_AUTHFAIL_RATE failed
 * AUTHs a second, RL_CONN_AUTHFAIL_BURST at once); 0: now. Outgoing connections: 0. */
uint64_t rl_conn_auth_wait_ms(const struct rl_conn *c);

/* An AUTH of c was refused: charged to its address. */
void rl_conn_auth_failed(struct rl_conn *c);

/* The same for an address (16 bytes, IPv4 mapped into IPv6) authenticating otherwise than by
 * AUTH on one of l's connections (the router's gRPC front): the same counts, shared as l's. */
uint64_t rl_listener_auth_wait_ms(struct rl_listener *l, const uint8_t *addr);
void rl_listener_auth_failed(struct rl_listener *l, const uint8_t *addr);

/* A connection l does not hold (the router's gRPC and RESP fronts, front.c) from addr counts
 * in l's per-address table (the process's when l is shared), with l's own: take counts one
 * more unless addr already has max_connections_per_peer (false: refuse it); put, once it
 * closes. */
bool rl_listener_peer_take(struct rl_listener *l, const uint8_t *addr);
void rl_listener_peer_put(struct rl_listener *l, const uint8_t *addr);

/*
 * Called from ops->on_frame: the frame being handed over is not handled now. It stays
 * unread, with every frame after it, and c waits for the next loop turn as if past its
 * input share (the node's per-turn admin budget, node/server.c); replies keep the order of
 * the requests. The owner must have written nothing for that frame.
 */
void rl_conn_defer(struct rl_conn *c);

/* A request of c will be answered later (hold) or was answered (release). */
void rl_conn_hold(struct rl_conn *c);
void rl_conn_release(struct rl_conn *c);

/* Bytes queued on c and not yet taken by the kernel. */
static inline size_t
rl_conn_queued(const struct rl_conn *c)
{
    return rl_buf_unread(&c->out) + rl_buf_unread(&c->inflight);
}

/* True when c is a client and the clients' buffer memory (buffer_memory) is spent. */
static inline bool
rl_conn_budget_spent(const struct rl_conn *c)
{
    if (c->listener == NULL) {
        return false;
    }
    if (c->q->shared != NULL) {
        return __atomic_load_n(&c->q->shared->client_bytes, __ATOMIC_RELAXED) >
               c->q->client_budget;
    }
    return c->q->client_bytes > c->q->client_budget;
}

/* True when c takes no more work: its output or its held requests passed their bound, or
 * the clients' buffer memory is spent and c has output waiting. */
static inline bool
rl_conn_backlogged(const struct rl_conn *c)
{
    size_t queued = rl_conn_queued(c);

    return queued > c->out_max || c->holds >= c->hold_max ||
           (rl_conn_budget_spent(c) && queued > RL_CONN_KEEP_BYTES);
}

#endif
