/*
 * router_int: what the router's files share and nothing outside router/ may use. The router
 * is one struct (struct rl_router) per loop, worked on by one file per concern, in layers
 * (docs/ARCHITECTURE.md, "router/"): calls go down, and what must go up is a callback or a
 * table installed from above.
 *   core services: pending.c (requests in flight, the deadline: its expiry a callback given
 *     at init), fairq.c (the requests waiting for room at their node, and whose turn it is),
 *     counts.c (the decision counters), reply.c (the router's own ERROR), health.c
 *     (readiness), front.c (front.h: the fronts' connections);
 *   CHECK core: table.c (membership, assignment, rules replaced live), shed.c (the deny
 *     cache and hot keys, HOT), fanout.c (THROTTLED), forward.c (a CHECK);
 *   reports: rmetrics.c (STATS and the Prometheus families; the fronts' STATS and INFO
 *     call it);
 *   fronts: session.c (binary clients, the per-op handlers), resp.c/resp_cmd.c (RESP),
 *     rls_h2.c/rls_call.c (gRPC);
 *   assembly: router.c (creating and closing it: installs the callbacks, frees it once its
 *     last handle closed);
 *   process: rproc*.c (rproc.h), which hands each worker its group (struct rl_wgroup).
 * Also here: the one lifetime rule (rl_router_hold/unhold). The public API is router.h's.
 * Everything of one rl_router runs on its loop's thread (a worker's); other workers and the
 * process's main thread read its counters and, under its mu, its tables.
 */
#ifndef RL_ROUTER_INT_H
#define RL_ROUTER_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "conn.h"
#include "backstop.h"
#include "denycache.h"
#include "frontkind.h"
#include "gate.h"
#include "hotkeys.h"
#include "log.h"
#include "router.h"
#include "upstream.h"
#include "view.h"
#include "wire.h"

#define ROUTER_USER_LOGGED 64u        /* user bytes kept per request for the request log */
#define RL_ROUTER_NODE_LOG_MS 10000u /* forward.c: a node-refusal warning's interval */
#define ROUTER_GEN_SHIFT 24           /* upstream id = gen << 24 | slab index */
#define ROUTER_PENDING_MAX (1u << 24) /* so the index fits under the generation */

struct rl_reqlog;

struct rl_cconn;
struct rl_fanout;
struct rl_front;
struct rl_resp;
struct rl_rls_front;
struct rl_prom;

struct rl_pending;

/* How a CHECK of a front's is answered (rl_pending.answer): rep, a node's or the failure
 * policy's, or err != 0 with an ERROR the node gave; once, before p is put back. */
typedef void rl_sink_answer_fn(struct rl_router *r, struct rl_pending *p,
                               const struct rl_wire_check_reply *rep, uint32_t err);

/* A record's deadline passed (its node did not answer in time): answer it and put it back
 * (the node may still answer it: late_reply). Given to rl_pending_init by router.c. */
typedef void rl_pending_expire_fn(struct rl_router *r, struct rl_pending *p);

/* A record held for a shard's move (rl_pending_hold) is due: resend it (rl_pending_resent)
 * or answer it and put it back. Given to rl_pending_init by router.c. */
typedef void rl_pending_resend_fn(struct rl_router *r, struct rl_pending *p);

/* Where a CHECK's record waits (rl_pending.where): on the deadline FIFO (sent), on one of
 * the held queues for a shard's move (RL_PENDING_HELD + level: resent after 1 << level ms),
 * or on neither (being handled). */
#define RL_PENDING_FIFO 0u
#define RL_PENDING_HELD 1u
#define RL_PENDING_LEVELS 5u /* backoff 1, 2, 4, 8, 16 ms */
#define RL_PENDING_LIMBO (RL_PENDING_HELD + RL_PENDING_LEVELS)
/* The bytes of every CHECK sent are kept in a ring this large per router, so that one a
 * node answers MOVING can be sent again (copied out of the ring then); a request whose bytes
 * were overwritten before its MOVING came is answered by policy (stats.move_lost). */
#define RL_PENDING_RING (4u << 20)
#define RL_PENDING_KEPT_NONE UINT32_MAX
/* forward.c: a CHECK is sent at once to the member a MOVING named this many times at most;
 * past that, the names are hints no more (two nodes naming each other while a shard's last
 * message is in flight) and it waits a backoff before each send. */
#define RL_FORWARD_REDIRECTS 2u

struct rl_pending {
    struct rl_cconn *client; /* NULL once the client left */
    struct rl_upstream *up;
    struct rl_uplink link;            /* in flight on one of up's connections */
    struct rl_pending *cprev, *cnext; /* client's list */
    struct rl_pending *fprev, *fnext; /* deadline FIFO, or the free list (fnext) */
    /* THROTTLED: the fan-out this is one node's part of (then cprev/cnext link the fan-out's
     * parts, and the record is in neither the client's list nor the FIFO); NULL: a CHECK */
    struct rl_fanout *fan;
    /* A CHECK of a front's (rl_forward_inline; client NULL then): what it answers (the part
     * of a gRPC call, rls_call.c, or of a RESP command, resp.c), told through answer; NULL
     * once orphaned (its answer is then dropped) */
    void *sink;
    rl_sink_answer_fn *answer;
    const struct rl_rule *rule;
    uint64_t deadline;
    uint64_t start_ns; /* uv_hrtime() of the read that brought the request */
    uint64_t key_hash;
    uint32_t client_id;
    uint32_t shard;
    uint8_t gen;
    uint8_t op; /* the client's op, answered under it: CHECK, ADJUST or RELEASE (forward.c) */
    bool used;
    bool logged;
    uint8_t ulen;
    char user[ROUTER_USER_LOGGED];
    /* an inline-limited CHECK (rule NULL): its service as logged, cut like the user */
    uint8_t slen;
    char service[ROUTER_USER_LOGGED];
    uint64_t deny_fp; /* shed.c: the deny cache's second hash of the user */
    uint32_t cost;
    /* The request as sent (rl_pending_keep): its fixarray header and its bytes after the id,
     * at kept_pos in the router's ring, or in moved (malloc'd, once a MOVING came) */
    uint64_t kept_pos;
    uint32_t kept_len; /* RL_PENDING_KEPT_NONE: not kept */
    uint8_t kept_hdr;
    uint8_t where;  /* RL_PENDING_FIFO, RL_PENDING_HELD + level, RL_PENDING_LIMBO */
    uint8_t moves;  /* MOVING answers (or planned losses) so far: the next backoff level */
    uint8_t redirects; /* sent at once to the member a MOVING named (RL_FORWARD_REDIRECTS) */
    bool moving;    /* answered MOVING at least once: counted in r->nmoving */
    char *moved;
    uint64_t hold_until; /* loop ms: first send + handoff_wait, past which policy answers */
    uint64_t resend_at;  /* loop ms, while held */
    /* fairq.c: waiting for room at up (on the deadline FIFO, kept, on no connection): its
     * flow and its place there; flow NULL otherwise */
    struct rl_flow *flow;
    struct rl_pending *qprev, *qnext;
};

/* A client connection: conn.h's, plus the requests it has in flight (one hold each). */
struct rl_cconn {
    struct rl_conn conn; /* first: the listener allocates rl_cconn-sized connections */
    struct rl_pending *pending;
    struct rl_fanout *fanouts; /* THROTTLED fan-outs in flight */
    uint32_t nfanouts;
};

/* An episode copied out of a node's THROTTLED reply. */
struct rl_fan_ep {
    uint64_t start_ms, end_ms, refused;
    uint32_t ended;
    uint16_t slen, elen, ulen, nlen;
    bool has_endpoint;
    char service[RL_WIRE_SERVICE_MAX];
    char endpoint[RL_WIRE_ENDPOINT_MAX];
    char user[RL_WIRE_USER_MAX];
    char node[RL_WIRE_NODE_MAX];
};

/* One THROTTLED request of a client, sent to every node: the best `top` episodes so far and
 * the nodes that did not answer. */
struct rl_fanout {
    struct rl_router *r;
    struct rl_cconn *client; /* NULL once the client left */
    struct rl_fanout *cprev, *cnext;
    struct rl_pending *parts; /* one per node still to answer, linked by cprev/cnext */
    uint32_t outstanding;
    uint32_t client_id;
    uint32_t top;
    uv_timer_t timer;
    size_t nmissing;
    char missing[RL_WIRE_MISSING_MAX][RL_WIRE_NODE_MAX + 1];
    size_t neps;
    struct rl_fan_ep eps[RL_WIRE_TOP_MAX];
    bool overloaded; /* a node answered OVERLOADED (its THROTTLED budget): so is the client */
};

/* A front kind's connections, process wide (rl_wgroup.fronts). */
struct rl_wgroup_front {
    uint32_t max;     /* at once; 0: not counted (a router alone: no acceptor counts them) */
    uint32_t conns;   /* atomic: open or handed to a worker (the acceptor adds, front.c takes) */
    uint32_t preauth; /* atomic: of those, not yet authenticated (front.c) */
};

/*
 * The workers of one process as each of them sees it: what a worker reads of the process,
 * handed to its router at create (rl_router_opts.group) by the process (rproc.c), which
 * fills it; a router alone makes its own group of one (itself). Workers read it, and
 * front.c counts the fronts' connections in it; none calls up into the process.
 */
struct rl_wgroup {
    uint32_t n;                /* workers */
    struct rl_router **routers; /* routers[i]: worker i's (another's read under its mu) */
    bool threads;              /* a process's threads: /metrics reads what workers publish */
    const uint64_t *accept_errors;  /* the acceptor's accept(2) failures (relaxed loads) */
    const uint64_t *zk_expiries;    /* ZooKeeper sessions lost for good (relaxed loads) */
    struct rl_conn_shared *shared; /* the listeners' process-wide caps; NULL: none */
    struct rl_wgroup_front fronts[RL_FRONT_KINDS];
};

struct rl_router {
    uv_loop_t *loop;
    struct rl_connq connq;
    struct rl_listener listener;
    uv_timer_t deadline_timer;
    const struct rl_conf *conf;
    struct rl_router_opts opts;
    char name[64];
    /* The one lifetime count: every libuv handle open on the router's behalf (its timers,
     * listener and queue, the fronts' connections and timers, fan-out and health timers),
     * counted only through rl_router_hold/rl_router_unhold below. */
    int handles;
    bool closing;
    bool draining;          /* rl_router_drain: nothing new is read, what was is answered */
    uv_timer_t drain_timer; /* the drain's check, every RL_ROUTER_DRAIN_TICK_MS */
    uint64_t drain_end;     /* loop time the drain gives up */
    void (*drain_done)(void *arg);
    void *drain_arg;
    void (*on_unheld)(struct rl_router *r); /* router.c's: frees r (closing, handles 0) */

    /* membership, assignment and the table built from them */
    struct rl_view view;
    struct rl_shardmap *map;
    struct rl_upstream **owners; /* owners[i]: the upstream of map->members[i] */
    struct rl_upstream *upstreams;
    struct rl_upstream_ops up_ops; /* every upstream's callbacks, installed by router.c */
    int64_t table_digest; /* STATS: rl_shardmap_digest_stat(map), kept at each rebuild */

    /* pending requests */
    struct rl_pending *slab;
    uint32_t slab_cap;
    struct rl_pending *free_list, *free_tail;
    struct rl_pending *fifo_head, *fifo_tail;
    uint32_t npending;
    rl_pending_expire_fn *pending_expire; /* pending.c's deadline answers through it */
    rl_pending_resend_fn *pending_resend; /* and a held record's resend through it */
    struct rl_pending *held_head[RL_PENDING_LEVELS], *held_tail[RL_PENDING_LEVELS];
    uv_timer_t held_timer; /* the earliest held record's resend */
    uint32_t nmoving;      /* records answered MOVING at least once, still in flight */
    char *ring;            /* RL_PENDING_RING bytes: the requests sent, kept */
    uint64_t ring_pos;     /* bytes ever written to it (the next one's offset, mod size) */
    /* fairq.c: the flows with requests waiting for room at their node, by (source, node) */
    struct rl_flow **fq_buckets;
    uint32_t fq_nbuckets; /* a power of two; 0 before the first flow */
    uint32_t fq_nflows;
    struct rl_flow *fq_free;
    uint64_t fq_waiting;    /* requests waiting now */
    struct rl_buf fq_frame; /* forward.c: a waiting request encoded, to be kept */

    struct rl_wire_decoder dec; /* client requests, one frame at a time */
    struct rl_reqlog *log;
    uint64_t log_anchor_real; /* wall clock (ms) at loop time log_anchor_loop */
    uint64_t log_anchor_loop;
    /* forward.c: the warnings a client can cause (a node refusing a front's CHECK, by ERROR
     * code; a node's odd answer), each at most one line per RL_ROUTER_NODE_LOG_MS. */
    struct rl_log_limit node_refusal_log[8];
    struct rl_log_limit node_odd_log;
    struct rl_router_stats stats;
    struct rl_gate gate;   /* AUTH of clients; its refusals are stats.auth_failures */
    uint64_t refreshed_ms; /* loop time on_stale was last called */

    /* metrics */
    uint64_t (*rule_codes)[RL_WIRE_CODE_COUNT]; /* per rule id, answers by code; the last
                                                   row (conf->nrules): no rule matched */
    size_t rule_rows;       /* conf->nrules + 1, unless memory for new rules' rows was lacking */
    struct rl_hist latency; /* end to end: from the read that brought a CHECK to its reply */
    uint64_t batch_ns;      /* uv_hrtime() at the client batch being read */
    uint32_t unowned;       /* shards with no owner in the table (all, before one is built) */
    /* uv_hrtime() at the batch of frames (a client's or a node's) being handled, so a batch
     * reads the clock once; 0 outside one (rl_router_now_ns reads the clock then) */
    uint64_t now_ns;
    /* forward.c: the key hash's shard without a division, for shard_d shards (shard_m is
     * its 128-bit multiplier, rl_forward_shard) */
    uint32_t shard_d;
    __extension__ unsigned __int128 shard_m;
    /* rules replaced while requests pointed to them (rl_router_rules_changed), oldest
     * first, each freed once no request from before its swap is in flight */
    struct router_retired *retired;
    uv_timer_t retire_timer;
    uint32_t nfanouts; /* THROTTLED fan-outs in flight */
    struct rl_front *front; /* front.c: the fronts' connections on this loop; NULL: none */
    uint32_t front_conns;   /* front.c: their number (atomic: rproc.c weighs workers) */
    struct rl_rls_front *rls; /* rls_front.h: the gRPC front's state on this loop */
    /* The envoyproxy/ratelimit configuration in force (one hold; rl_router_set_envoy): the
     * gRPC front's new calls match in it, and a binary client's inline refund of one of its
     * domains is refused (forward.c). NULL: none. */
    struct rl_envoy_config *envoy;
    struct rl_resp *resp; /* resp_front.h: the RESP front's state on this loop */

    /* shed.c: LIMITED answers remembered, and the hot keys (per router loop) */
    struct rl_deny deny;
    uint64_t deny_moves;      /* shed.c: shards whose owner changed (refusals kept) */
    struct rl_backstop bstop; /* backstop.h: failure = open while the owner is unreachable */
    struct rl_hot *hot; /* NULL: [router] hot_keys = off */
    /* A copy of hot for other threads (HOT and /metrics merge every worker's), taken under
     * mu by hot_timer */
    struct rl_hot *hot_pub;
    uv_timer_t hot_timer; /* publishes hot into hot_pub every RL_SHED_PUBLISH_MS when dirty */
    bool hot_dirty;       /* keys counted since the last copy */

    /* ZooKeeper, when the membership comes from there (rl_router_set_zookeeper) */
    char zk_addr[256];        /* "" with static membership */
    int zk_state;             /* RL_ROUTER_ZK_NONE, or an enum rl_zkm_state as last told */
    uint64_t zk_expiries;     /* sessions lost for good */
    uv_timer_t health_timer;  /* looks at the session and the membership every second */
    uint64_t unhealthy_since; /* loop time since which it cannot route from ZooKeeper; 0: can */
    uint64_t health_warned;   /* loop time of the last warning about it */

    /* The workers of its process (rl_router_opts.group), or alone: a group of one, itself.
     * Other threads read this router's table, upstreams, rule rows and rules under mu (its
     * own thread takes mu only to change them); its counters are read without it (each has
     * one writer). */
    struct rl_wgroup *group;
    uint32_t worker;     /* its index in group */
    struct rl_wgroup alone;
    struct rl_router *alone_routers[1];
    bool log_shared;     /* log is the process's: not closed with the router */
    pthread_mutex_t mu;
};

struct router_retired {
    struct router_retired *next;
    struct rl_conf *conf;
    uint64_t until; /* deadline of the last request that may point into it */
};

/* Connections open on front kind, process wide, as the acceptor counts them; a router alone
 * (no acceptor counts): own. */
static inline uint32_t
rl_wgroup_front_conns(const struct rl_wgroup *g, enum rl_front_kind kind, uint32_t own)
{
    return g->fronts[kind].max != 0 ? __atomic_load_n(&g->fronts[kind].conns, __ATOMIC_RELAXED)
                                    : own;
}

/* ---- router.c --------------------------------------------------------------------------- */

/* Now, in uv_hrtime() nanoseconds: the time of the batch being handled, if any. */
static inline uint64_t
rl_router_now_ns(const struct rl_router *r)
{
    return r->now_ns != 0 ? r->now_ns : uv_hrtime();
}

/*
 * The one lifetime rule: whoever opens a libuv handle on r's loop on r's behalf calls
 * rl_router_hold as it opens it, and rl_router_unhold in its close callback (after which r
 * may be freed: touch it no more). r is freed (on_unheld, installed by router.c) once it is
 * closing and its last handle closed. rl_router_handle_closed is the close callback of a
 * handle whose data is r.
 */
static inline void
rl_router_hold(struct rl_router *r)
{
    r->handles++;
}

static inline void
rl_router_unhold(struct rl_router *r)
{
    if (--r->handles == 0 && r->closing) {
        r->on_unheld(r);
    }
}

static inline void
rl_router_handle_closed(uv_handle_t *h)
{
    rl_router_unhold((struct rl_router *)h->data);
}

/* ---- pending.c: requests in flight to nodes --------------------------------------------- */

/* Allocates the slab of cap records, all free, and the ring of kept requests; expire
 * answers a record at its deadline, resend a held one when it is due. Returns 0 or
 * -ENOMEM. */
int rl_pending_init(struct rl_router *r, uint32_t cap, rl_pending_expire_fn *expire,
                    rl_pending_resend_fn *resend);

/* Frees the slab (every record must be free or abandoned). */
void rl_pending_deinit(struct rl_router *r);

/* A free record with a new generation, or NULL when all are in flight. */
struct rl_pending *rl_pending_get(struct rl_router *r);

/* The id sent to the node for p: its generation and its index. */
static inline uint32_t
rl_pending_id(const struct rl_router *r, const struct rl_pending *p)
{
    return ((uint32_t)p->gen << ROUTER_GEN_SHIFT) | (uint32_t)(p - r->slab);
}

/* The record a node's reply id names, or NULL when it was answered (and maybe reused). */
static inline struct rl_pending *
rl_pending_by_id(struct rl_router *r, uint32_t id)
{
    uint32_t idx = id & (ROUTER_PENDING_MAX - 1);
    struct rl_pending *p;

    if (idx >= r->slab_cap) {
        return NULL;
    }
    p = &r->slab[idx];
    if (!p->used || p->gen != (uint8_t)(id >> ROUTER_GEN_SHIFT)) {
        return NULL;
    }
    return p;
}

/* Links a CHECK's p, sent, to its client c (one hold of c) and to the deadline FIFO. */
void rl_pending_track(struct rl_router *r, struct rl_pending *p, struct rl_cconn *c);

/* Links p, sent, to the deadline FIFO only (a CHECK of the router's own: p->sink). */
void rl_pending_track_fifo(struct rl_router *r, struct rl_pending *p);

/*
 * Unlinks p from every list and returns it to the free list. A record whose node may still
 * answer it (late_reply: the deadline answered it first) goes to the tail, so that its slot
 * is the last to be reused: the 8-bit generation alone would let a late reply land on a
 * request that reused the slot 256 allocations later, which the head of a LIFO list reaches
 * fast.
 */
void rl_pending_put(struct rl_router *r, struct rl_pending *p, bool late_reply);

/* Returns p, already unlinked from every list, to the free list; late_reply as above. */
void rl_pending_free(struct rl_router *r, struct rl_pending *p, bool late_reply);

/* Returns a record that rl_pending_get gave and that was never linked anywhere (its request
 * could not be sent) to the head of the free list. */
void rl_pending_unget(struct rl_router *r, struct rl_pending *p);

/* Closing: frees every CHECK still in flight or held (no client is left to answer). */
void rl_pending_drain(struct rl_router *r);

/* p, a CHECK just sent: keeps its bytes after the id (tail, len) and its fixarray header hdr
 * in the ring, so it can be sent again if its node answers MOVING. */
void rl_pending_keep(struct rl_router *r, struct rl_pending *p, uint8_t hdr, const char *tail,
                     size_t len);

/* The bytes rl_pending_keep kept for p, copied out of the ring on the first call (stable
 * until p is put back); NULL when they were not kept or were overwritten since. */
const char *rl_pending_kept(struct rl_router *r, struct rl_pending *p, uint8_t *hdr,
                            size_t *len);

/* The same without a copy: where they are now (valid until the next rl_pending_keep). */
const char *rl_pending_kept_now(const struct rl_router *r, const struct rl_pending *p, uint8_t *hdr,
                                size_t *len);

/* p, a CHECK off its node connection (rl_upstream_done), waits delay_ms (rounded to a
 * power of two from 1 to 16) on a held queue instead of the deadline FIFO, then is handed to
 * the resend function. */
void rl_pending_hold(struct rl_router *r, struct rl_pending *p, uint32_t delay_ms);

/* p, held or on the FIFO, was just sent again: back on the FIFO's tail, its deadline now +
 * deadline. */
void rl_pending_resent(struct rl_router *r, struct rl_pending *p);

/* Marks p as answered MOVING (once: counted in r->nmoving until it is put back), its hold
 * ending at first send + handoff_wait. */
void rl_pending_moving(struct rl_router *r, struct rl_pending *p);

/* ---- fairq.c: requests waiting for room at their node ------------------------------------ */

/* Requests a flow sends in its turn before the next flow's. */
#define RL_FAIRQ_QUANTUM 8u

/* p (kept, on the deadline FIFO, on no connection) waits for room at u behind its client's
 * other requests for u (client: rl_wire_tenant, its token or address); a client with none
 * waiting yet joins the end of the round. 0, or -ENOMEM. */
int rl_fairq_add(struct rl_router *r, struct rl_upstream *u, uint32_t client, struct rl_pending *p);

/* The next request for u, in turn, taken off its flow; NULL: none waits. */
struct rl_pending *rl_fairq_next(struct rl_router *r, struct rl_upstream *u);

/* Takes p off its flow, if it waits on one (rl_pending_put calls it). */
void rl_fairq_remove(struct rl_router *r, struct rl_pending *p);

/* Frees the flows (none may wait: after rl_pending_drain). */
void rl_fairq_deinit(struct rl_router *r);

/* ---- counts.c: the decision counters ------------------------------------------------------ */

/* Whether rule is one of the rules in force (not one of rules since replaced, which a request
 * forwarded before a rules change still names: its id and tiers index the old rules). */
static inline bool
rl_router_rule_current(const struct rl_router *r, const struct rl_rule *rule)
{
    return rule != NULL && (uintptr_t)rule >= (uintptr_t)r->conf->rules &&
           (uintptr_t)rule < (uintptr_t)(r->conf->rules + r->conf->nrules);
}

/* Counts one CHECK answer: by rule and code, its latency from start_ns, stats by code. */
void rl_counts_answer(struct rl_router *r, const struct rl_rule *rule, uint32_t code,
                      uint64_t start_ns);

/* ---- reply.c: the router's own replies on a binary client's connection -------------------- */

/* Queues ERROR err for request id on c, counted in stats.errors. */
void rl_reply_error(struct rl_conn *c, uint32_t id, uint32_t err, const char *msg);

/* ---- session.c: client connections ------------------------------------------------------ */

/* The listener's callbacks for client connections (sized struct rl_cconn). */
extern const struct rl_conn_ops rl_session_ops;


/* ---- forward.c: CHECK ------------------------------------------------------------------- */

/* A client's CHECK: answered here (no rule, a refused client, failure policy) or forwarded;
 * relay: when session.c read it the short way (wire_fast.h), its fields after the id as the
 * client sent them, relayed to the node under the pending record's id (ptr NULL: re-encode
 * req). */
void rl_forward_check(struct rl_conn *conn, const struct rl_wire_req *req,
                      const struct rl_wire_str *relay);

/* A client's ADJUST (and RELEASE): as a CHECK, under its own op, after the refund check
 * (docs/PROTOCOL.md, "ADJUST"); never from the deny cache nor the backstop. */
void rl_forward_adjust(struct rl_conn *conn, const struct rl_wire_req *req,
                       const struct rl_wire_str *relay);
void rl_forward_release(struct rl_conn *conn, const struct rl_wire_req *req,
                        const struct rl_wire_str *relay);

/* Answers p by failure policy and frees it; late_reply as for rl_pending_put. */
void rl_forward_fail(struct rl_router *r, struct rl_pending *p, bool late_reply);

/* pending.c's resend: p, held for a shard's move, is sent to its shard's owner in the
 * table now, held again for the next backoff, or answered by policy past its handoff_wait. */
void rl_forward_resend(struct rl_router *r, struct rl_pending *p);

/* The upstreams' callbacks (upstream.h), arg the router: a node's reply, a lost request. */
void rl_forward_on_reply(void *arg, struct rl_upstream *u, const struct rl_upconn *from,
                         const struct rl_wire_reply *rep);
void rl_forward_on_lost(void *arg, struct rl_upstream *u, struct rl_uplink *l);
/* A node's batch of replies starts and ends: the clock is read once for it, and at its end
 * the requests waiting for room at u (fairq.c) are sent, in turn, as far as it has room. */
void rl_forward_on_batch(void *arg, struct rl_upstream *u, bool end);
/* A connection of u was lost: the requests waiting for u are sent on its other connections
 * as far as it has room; with none up they keep waiting (the table or their deadline). */
void rl_forward_on_room(void *arg, struct rl_upstream *u);

/* u leaves the table: the requests waiting for it are held and sent to their shards' owners
 * in the table then (rl_forward_resend). */
void rl_forward_unqueue(struct rl_router *r, struct rl_upstream *u);

/*
 * A CHECK of the router's own (the gRPC front, rls_call.c; the RESP front, resp.c):
 * inline-limited (req->limit set), or judged by the configured rule of its (service,
 * endpoint), whose failure policy then applies;
 * forwarded to the owner of (service, user) under a pending record whose answer goes to
 * sink through answer (p->answer(r, p, rep, err), before p is put back) instead of a
 * client. Returns 0 when sent (*sent: the record, to
 * orphan by setting its sink to NULL): sink is answered later,
 * once (node's reply, failure policy, deadline). Otherwise the answer is *now (failure
 * policy: owner unknown or unreachable, or too many requests in flight) and sink is not
 * called. When its node has no room it waits for its client's turn (fairq.c): req->tenant's.
 */
int rl_forward_inline(struct rl_router *r, const struct rl_wire_req *req, void *sink,
                      rl_sink_answer_fn *answer, struct rl_pending **sent,
                      struct rl_wire_check_reply *now);

/* ---- fanout.c: THROTTLED ---------------------------------------------------------------- */

/* A client's THROTTLED: asks every node, answers when all did or the admin timeout. */
void rl_fanout_throttled(struct rl_conn *conn, const struct rl_wire_req *req,
                         const struct rl_wire_str *relay);

/* One node's part p of a fan-out is done: answered (rep, a THROTTLED reply) or not (rep NULL,
 * or an ERROR: the node is listed as missing). Frees p; late_reply as for rl_pending_put. */
void rl_fanout_part_done(struct rl_router *r, struct rl_pending *p, const struct rl_wire_reply *rep,
                         bool late_reply);

/* ---- table.c: membership, assignment, rules --------------------------------------------- */

/* The retire timer fired: frees the replaced rules no request can point to any more. */
void rl_table_retire_fire(uv_timer_t *t);

/* Closing: retires every upstream (their requests in flight are answered by policy). */
void rl_table_close(struct rl_router *r);

/* Frees the table, the view and the retired rules. */
void rl_table_deinit(struct rl_router *r);

/* ---- shed.c: the deny cache and the hot keys ------------------------------------------- */

/* Allocates them as conf says. Returns 0 or -ENOMEM. */
int rl_shed_init(struct rl_router *r);
void rl_shed_deinit(struct rl_router *r);

/* A CHECK under rule, of shard, owned by u (NULL: none): counts it among the hot keys, and
 * answers it LIMITED from the deny cache if a node's refusal still holds (true: answered).
 * *fp: the user's second hash (rl_deny_fp), for rl_shed_sent; left as it is when neither the
 * cache nor the hot keys are on (set it to 0 before). */
bool rl_shed_check(struct rl_conn *conn, const struct rl_wire_req *req, const struct rl_rule *rule,
                   uint32_t shard, uint64_t hash, const struct rl_upstream *u, uint64_t *fp);

/* The same for a front's CHECK (RESP, gRPC: rl_forward_inline; rule NULL: an inline limit,
 * counted among the hot keys but never cached): true with rep filled (LIMITED) when the deny
 * cache holds a node's refusal of it that still stands; the caller answers and counts it.
 * *fp: the user's second hash for the pending (0 when nothing of it is to be cached). Before,
 * a front's CHECKs never consulted the cache, so a user the routers held refused through
 * the binary protocol was judged again through RESP (by the backstop during a loss). */
bool rl_shed_inline(struct rl_router *r, const struct rl_wire_req *req, const struct rl_rule *rule,
                    uint32_t shard, uint64_t hash, const struct rl_upstream *u, uint64_t *fp,
                    struct rl_wire_check_reply *rep);

/* p, a CHECK forwarded, is to be answered by failure policy (its owner lost, its deadline
 * passed): true with rep filled (LIMITED, p's client id) when the deny cache holds a
 * refusal of it that still stands (a refusal outlives its node). */
bool rl_shed_fail_lookup(struct rl_router *r, const struct rl_pending *p,
                         struct rl_wire_check_reply *rep);

/* p, a CHECK of req, was just sent: what the cache needs of it when the reply comes (fp as
 * rl_shed_check gave it). */
void rl_shed_sent(struct rl_pending *p, const struct rl_wire_req *req, uint64_t fp);

/* The node u answered p (a CHECK) with rep on connection from: a LIMITED is remembered when
 * p was sent after from's node was known to hold the router's rules (a NOT_OWNER forgets
 * nothing: a refusal outlives the shard's move). */
void rl_shed_reply(struct rl_router *r, const struct rl_pending *p, const struct rl_upstream *u,
                   const struct rl_upconn *from, const struct rl_wire_reply *rep);

/* The upstreams' on_rules (upstream.h), arg the router: counts a rules probe's answer, and
 * forgets every refusal when the node's rules moved (its epoch). */
void rl_shed_on_rules(void *arg, struct rl_upstream *u, const struct rl_upconn *from, bool ok);

/* u was just created (table.c): it starts probing its node's rules when the cache is on. */
void rl_shed_upstream(struct rl_router *r, struct rl_upstream *u);

/* The table is about to become map with owners: forgets nothing (refusals outlive the
 * shard's move), counts the shards whose owner changes (deny_moves). */
void rl_shed_table(struct rl_router *r, const struct rl_shardmap *map,
                   struct rl_upstream *const *owners);

/* The rules changed from old (NULL: the slices of global services changed, not the rules):
 * forgets the deny cache, and has every node's rules probed again; the backstop keeps the
 * counts of the rules found again unchanged (rl_backstop_rules). */
void rl_shed_rules(struct rl_router *r, const struct rl_conf *old);

/* HOT: the top keys this client may see. */
void rl_shed_hot_reply(struct rl_conn *c, const struct rl_wire_req *req);

/* STATS pairs (deny_*), appended at keys/vals[n]; returns the new n. */
size_t rl_shed_stats(const struct rl_router *r, const char **keys, int64_t *vals, size_t n);

/* The rl_router_deny_cache_* and rl_router_hot_key_* families. */
void rl_shed_metrics(struct rl_router *r, struct rl_prom *p);

/* ---- health.c --------------------------------------------------------------------------- */

/* Closing: stops the health timer if it runs. */
void rl_health_close(struct rl_router *r);

/* ---- shed.c: the timer that copies the hot-key sketch for other threads ------------------ */

#define RL_SHED_PUBLISH_MS 1000u /* a worker's sketch is copied for the others this often */

void rl_shed_publish_fire(uv_timer_t *t);

/* ---- rmetrics.c ------------------------------------------------------------------------- */

/* The counters of r's whole process (every worker's, summed) and its requests in flight. */
void rl_rmetrics_totals(const struct rl_router *r, struct rl_router_stats *stats,
                        uint64_t *pending);

/* Queues the STATS reply for request id on c. */
void rl_rmetrics_stats_reply(struct rl_conn *c, uint32_t id);


#endif
