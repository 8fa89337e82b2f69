/*
 * upstream: the router's connections to one node. A few persistent framed connections
 * (conn.h) per node, requests spread over them round-robin, each connection's output
 * written once per loop turn by the shared flusher, replies decoded here and handed to the
 * owner with the connection they came on. Every request in flight is linked to its
 * connection (struct rl_uplink, embedded in the owner's record), so a lost connection hands
 * each of them back at once (so the router answers them by failure policy) and reconnects
 * with exponential backoff. Not for deciding where a request goes (router.c, shardmap.h).
 */
#ifndef RL_UPSTREAM_H
#define RL_UPSTREAM_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "conn.h"
#include "log.h"
#include "wire.h"

#define RL_UPSTREAM_CONNS 2 /* connections that carry CHECKs */
/* One more connection per node carries the admin ops (THROTTLED) and nothing else, so a
 * CHECK's request or reply never queues behind an admin frame of up to 64 KiB on the same
 * stream (docs/OPERATIONS.md, "Admin traffic"). conns[RL_UPSTREAM_ADMIN] is that one. */
#define RL_UPSTREAM_ADMIN RL_UPSTREAM_CONNS
#define RL_UPSTREAM_NCONN (RL_UPSTREAM_CONNS + 1)
#define RL_UPSTREAM_BACKOFF_MIN_MS 50u
#define RL_UPSTREAM_BACKOFF_MAX_MS 2000u
/* Request bytes queued on one connection and not yet taken by the kernel past which the
 * connection takes no more: a node that stops reading must not grow the router without bound
 * (its requests are answered by the deadline anyway). */
#define RL_UPSTREAM_OUT_MAX (1u << 20)
/* A connection on which a request sent more than its stall bound ago is still unanswered (the
 * router's deadline plus the longer of RL_UPSTREAM_STALL_MIN_MS and the deadline; a node
 * answers a connection's requests in order, so it is that far behind, or silent) is reset
 * (rl_conn_abort), and so is one whose connect has not completed in RL_UPSTREAM_CONNECT_MS
 * (or the stall bound if longer): its requests get the failure policy at once, and what the
 * kernel still held for the node is dropped, so a node whose network comes back, or that
 * catches up, never decides requests its routers gave up on long before (docs/OPERATIONS.md,
 * "A node that stops answering"). Checked every stall bound / RL_UPSTREAM_STALL_CHECKS,
 * against the count sent as of that many checks before; a connection is reset at the second
 * check in a row that finds it so (replies that waited while the router's own loop was held
 * up are read between). */
#define RL_UPSTREAM_STALL_MIN_MS 1000u
#define RL_UPSTREAM_STALL_CHECKS 4
#define RL_UPSTREAM_CONNECT_MS 3000u /* above a lost SYN's first retransmission (1 s) */
/* The rules probe (docs/OPERATIONS.md, "The deny cache"): a STATS under this id on each
 * CHECK connection, whose answer's rules_digest says which rules the node decides under; sent
 * at connect, when the router's rules change, then every RL_UPSTREAM_PROBE_MS; while a
 * connection's node holds other rules than the router, after RL_UPSTREAM_PROBE_SOON_MS,
 * doubling up to RL_UPSTREAM_PROBE_MS (from the router's change or the node's). */
#define RL_UPSTREAM_PROBE_ID UINT32_MAX
#define RL_UPSTREAM_PROBE_MS 1000u
#define RL_UPSTREAM_PROBE_SOON_MS 100u

struct rl_upstream;
struct rl_upconn;
struct rl_flow;

/* A request in flight to a node: embedded in the owner's record, managed here. */
struct rl_uplink {
    struct rl_uplink *prev, *next;
    struct rl_upconn *conn; /* the connection it was sent on; NULL when not in flight */
};

struct rl_upconn {
    struct rl_conn conn;
    struct rl_upstream *up;
    struct rl_uplink *pending; /* requests sent on this connection and not answered */
    uint32_t npending;
    /* While on_reply runs for a CHECK, ADJUST or RELEASE reply read the short way
     * (wire_fast.h's rl_wire_fast_keyed_reply): its fields
     * after the id as the node sent them, to relay under the client's id; ptr NULL
     * otherwise. */
    struct rl_wire_str relay;
    bool closing;       /* closed, its handle's close callback not yet run */
    bool hello_pending; /* HELLO sent, its answer not yet read */
    bool hello_refused; /* answered OVERLOADED: the backoff is reset at its first reply */
    bool auth_pending;  /* AUTH sent, its answer not yet read */
    bool tenant_probe;  /* rl_wire_put_tenant_probe sent, its answer not yet read */
    bool tenant_ok;     /* the node takes CHECK's tenant element (wire.h) */
    bool rules_probe;   /* a rules probe (STATS) sent, its answer not yet read */
    /* uv_hrtime() when this connection's latest rules probe answer was read, if the node then
     * held the rules the router wants (rl_upstream_want_rules); 0 otherwise (not yet known,
     * other rules, the router's rules changed since). A request sent on this connection
     * after that time is decided under the router's rules: the node reads a connection's
     * requests in order, and one that changes its rules later moves the upstream's epoch. */
    uint64_t rules_ok_ns;
    /* Requests sent on this connection since it connected, and those the node answered
     * (answered by the deadline or not: npending counts only the unanswered the deadline has
     * not), and the count sent as of each of the last RL_UPSTREAM_STALL_CHECKS checks (a
     * ring, at stall_ring): no clock is read to send or to read a reply. */
    uint64_t sent, answered;
    uint64_t sent_then[RL_UPSTREAM_STALL_CHECKS];
    uint8_t stall_ring;
    uint8_t stalled;     /* checks in a row that found it stalled (upstream_watch) */
    uint64_t connect_at_ms; /* uv_now() when the connect in progress began */
    /* The connection's first connect is in flight (opened, neither connected nor failed
     * yet): a request for it waits in `early` (sent right after HELLO once connected; failed
     * with the connection otherwise) instead of getting the failure policy at once, so a
     * router that just started answers like one that has been up (its deadline still
     * holds). Cleared by the first attempt's end, whatever it was. */
    bool first;
    struct rl_buf early;
};

/* What the upstream tells its owner. Both run on the loop thread. */
struct rl_upstream_ops {
    /* A reply arrived on connection `from` (compare with an uplink's conn). */
    void (*on_reply)(void *arg, struct rl_upstream *u, const struct rl_upconn *from,
                     const struct rl_wire_reply *rep);
    /* The connection of l is lost: l is already unlinked; answer its request otherwise now. */
    void (*on_lost)(void *arg, struct rl_upstream *u, struct rl_uplink *l);
    /* Optional: a batch of replies (one read's) on u starts (end false) or ended (end true). */
    void (*on_batch)(void *arg, struct rl_upstream *u, bool end);
    /* Optional: a connection of u was lost and its requests handed back (on_lost): what u
     * was owed fell, so it has room (u's other connections may be up). */
    void (*on_room)(void *arg, struct rl_upstream *u);
    void *arg;
    /* Optional: a rules probe's answer was read on `from`; ok: the node holds the rules the
     * router wants. */
    void (*on_rules)(void *arg, struct rl_upstream *u, const struct rl_upconn *from, bool ok);
    /* The router's deadline, for the stall bound (RL_UPSTREAM_STALL_MIN_MS); 0: none. */
    uint32_t deadline_ms;
    /* The cluster secret, sent in an AUTH first on every connection; NULL: none. */
    const char *secret;
    size_t secret_len;
};

struct rl_upstream_stats {
    uint64_t forwarded;
    uint64_t replies;
    uint64_t failures; /* requests answered by failure policy because of this node */
    uint64_t downs;    /* connections lost */
    uint64_t connects; /* connections made (the first ones and every reconnect) */
    uint64_t stalls;   /* connections reset for a stall or a connect that took too long */
};

struct rl_upstream {
    char name[64];
    char addr[64];
    struct rl_connq *q;
    struct sockaddr_storage sa;
    struct rl_upconn conns[RL_UPSTREAM_NCONN]; /* the CHECK connections, then the admin one */
    struct rl_wire_decoder dec;
    uv_timer_t retry;
    uv_timer_t probe; /* the rules probe's (started by rl_upstream_want_rules) */
    uv_timer_t watch; /* resets stalled connections (RL_UPSTREAM_STALL_MIN_MS) */
    uint32_t stall_ms;   /* the stall bound */
    uint32_t connect_ms; /* the connect bound */
    uint32_t backoff_ms;
    uint32_t rr;
    uint64_t turn; /* the connq's loop turn in which rr was last advanced */
    int handles;   /* open handles; freed when it reaches 0 after retire */
    bool retired;
    int64_t want_digest;    /* the rules the router holds (rules_digest); -1: no probe */
    int64_t node_digest;    /* the rules_digest of the node's latest probe answer; -1: none */
    uint32_t probe_soon_ms; /* the next probe's delay while the node holds other rules */
    /* Moves when what this node answered may no longer hold: its rules digest changed (a
     * lost connection does not move it: a refusal outlives its node, docs/OPERATIONS.md). */
    uint64_t epoch;
    uint64_t epoch_seen; /* the router's (shed.c): the epoch it last forgot refusals for */
    struct rl_upstream_ops ops;
    /* The owner's (router/fairq.c): the flow whose turn it is among those with requests
     * waiting for room at this node; NULL: none waits. Never read here. */
    struct rl_flow *fair;
    struct rl_upstream_stats stats;
    struct rl_log_limit hello_log; /* "router reserve is full" refusals */
    struct rl_log_limit connect_log; /* connects given up on (upstream_watch) */
    struct rl_upstream *next;      /* the router's list */
};

/* Creates an upstream for node `name` at "host:port" on q's loop and starts connecting.
 * Returns 0 or a negative errno (-EINVAL for a bad address). */
int rl_upstream_create(struct rl_upstream **out, struct rl_connq *q, const char *name,
                       const char *addr, const struct rl_upstream_ops *ops);

/*
 * Sends req and links l to the connection it went on: a CHECK on a connected CHECK
 * connection (one per loop turn, the next turn the other, so a turn's CHECKs to a node leave
 * in one write), a THROTTLED on the admin connection only. Returns 0, -EAGAIN
 * when that connection (every CHECK connection) is down or has RL_UPSTREAM_OUT_MAX bytes
 * queued (the node stopped reading), or -ENOMEM.
 */
int rl_upstream_send(struct rl_upstream *u, const struct rl_wire_req *req, struct rl_uplink *l);

/* rl_upstream_send, and on success frame and len: the request's bytes as queued (valid until
 * the next send), which are req's but for its tenant when it was left out (a node from before
 * the tenant element): what a resend must repeat. */
int rl_upstream_send_bytes(struct rl_upstream *u, const struct rl_wire_req *req,
                           struct rl_uplink *l, const char **frame, size_t *len);

/*
 * Sends a request of op (CHECK, ADJUST or RELEASE) and hdr's arity (a fixarray header: 0x96 for
 * six elements, more with an inline limit) whose fields after the id are tail[0..tail_len),
 * under id, on a CHECK connection, linking l as rl_upstream_send does; the same returns. The
 * request is sent as it is (no tenant element dropped for an older node): the fields as a
 * client sent them (wire_fast.h's rl_wire_fast_keyed), or a request sent again after a node's
 * MOVING.
 */
int rl_upstream_send_spliced(struct rl_upstream *u, uint8_t hdr, uint8_t op, uint32_t id,
                             const char *tail, size_t tail_len, struct rl_uplink *l);

/* The request of l was answered, or given up: unlinks it (no-op when it is not linked). */
void rl_upstream_done(struct rl_uplink *l);

/* A request answered by failure policy because of this node (for STATS). */
void rl_upstream_count_failure(struct rl_upstream *u);

/* Requests sent on u's CHECK connections that the node has not answered yet, those answered
 * by the deadline included: what the node still has to do for this upstream. */
static inline uint64_t
rl_upstream_owed(const struct rl_upstream *u)
{
    uint64_t n = 0;

    for (int i = 0; i < RL_UPSTREAM_CONNS; i++) {
        n += u->conns[i].sent - u->conns[i].answered;
    }
    return n;
}

/* True when a request kept as encoded now (its tenant element included) can be sent later as
 * it is (rl_upstream_send_spliced): a CHECK connection is up, and none is to a node known to
 * be from before the tenant element (rl_upstream_send_bytes leaves it out for those). */
bool rl_upstream_sends_kept(const struct rl_upstream *u);

/* True when at least one CHECK connection is up. */
bool rl_upstream_up(const struct rl_upstream *u);

/*
 * The router holds rules of this digest (>= 0): every CHECK connection's rules_ok_ns is
 * cleared, and a rules probe is sent on each now (unless one is in flight, whose answer is
 * judged against digest when it comes) and then periodically (RL_UPSTREAM_PROBE_MS).
 */
void rl_upstream_want_rules(struct rl_upstream *u, int64_t digest);

/* Retries now instead of waiting out the backoff (the node re-registered). */
void rl_upstream_kick(struct rl_upstream *u);

/* Closes every connection (on_lost runs for each request in flight) and frees the upstream
 * once its handles are closed. */
void rl_upstream_retire(struct rl_upstream *u);

#endif
