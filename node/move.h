/*
 * move: a node's side of automatic handoff (docs/OPERATIONS.md, "Planned moves";
 * docs/PROTOCOL.md, "Automatic handoff"), ZooKeeper mode only. Keeps the state of every
 * shard on this node (owned, incoming, outgoing, exporting, gone), moves it on every view
 * change, and ships outgoing shards one at a time to their next owner: the export is taken
 * on the loop (from that instant the shard is decided nowhere), the HANDOFF_IN messages are
 * sent from the thread pool (uv_queue_work, a blocking reqclient with the cluster secret and
 * TLS as configured), and the shard is then gone. It owns the bitmap of shards this node
 * decides, which the server reads (rl_server_set_owned), and answers what a request for a
 * shard not decided here should get (NOT_OWNER, or MOVING with an owner). Not for decoding
 * or applying HANDOFF_IN (server_handoff.c), reading ZooKeeper (zkm.h) nor building tables
 * (view.h). Static membership never creates one: today's behaviour stays.
 */
#ifndef RL_MOVE_H
#define RL_MOVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "buf.h"
#include "metrics.h"

struct rl_limiter;
struct rl_shardmap;
struct rl_tls_ctx;

/* A shard's state on this node. */
enum rl_move_st {
    RL_MOVE_NONE = 0,  /* not this node's: NOT_OWNER */
    RL_MOVE_OWNED,     /* decided here */
    RL_MOVE_OWNED_H,   /* decided here, received by a handoff before this node's view said so */
    RL_MOVE_INCOMING,  /* expected from its old owner: MOVING (owner: the old owner) until it
                          arrives or the wait ends */
    RL_MOVE_OUTGOING,  /* queued for its next owner: still decided here until its export */
    RL_MOVE_EXPORTING, /* exported, being sent: MOVING "" */
    RL_MOVE_GONE,      /* sent (or given up): MOVING with the next owner's name, for
                          handoff_wait (then NONE: NOT_OWNER, the shard simply not here) */
};

/* Counters (metrics and STATS). */
struct rl_move_stats {
    uint64_t out_started, out_done, out_failed; /* shards shipped by this node */
    uint64_t in_started, in_done, in_failed;    /* shards expected here; failed: started fresh */
    uint64_t keys_out, bytes_out, keys_in, bytes_in;
    uint64_t export_turns;       /* turns of the loop the export passes took (a slice each) */
    uint64_t incoming, outgoing; /* shards in flight now: incoming; outgoing (queued or sending) */
    uint64_t nothing_planned;    /* shards this node planned to tell a node it holds nothing of */
    struct rl_hist freeze;       /* a shipped shard's export to its last acknowledgement */
    struct rl_hist answer;       /* a message of a move from here (a batch's, "still coming"): from
                                    when it began to be sent to its acknowledgement */
};

struct rl_move_opts {
    uint32_t nshards;
    const char *self;         /* this node's member name */
    uint32_t handoff_wait_ms; /* [cluster] handoff_wait */
    const char *secret;       /* the cluster secret (AUTH to the next owner), or NULL */
    size_t secret_len;
    struct rl_tls_ctx *tls; /* an RL_TLS_CLIENT context when nodes listen with TLS, or NULL */
    uint16_t *epochs;       /* per shard, the node's ownership epochs (bumped here) */
    struct rl_limiter *limiter;
    /* the limiter's clock (the server's), read at each export */
    uint64_t (*now_ms)(void *arg);
    void *now_arg;
};

struct rl_move;

/* Creates the state, every shard NONE. 0, -ENOMEM or -EINVAL. */
int rl_move_create(struct rl_move **out, uv_loop_t *loop, const struct rl_move_opts *opts);
/* Closes its timer and frees it after (a send in flight is finished by the thread pool
 * first; run the loop afterwards). NULL is a no-op. */
void rl_move_destroy(struct rl_move *m);

/* The bitmap of shards decided here (bit s), for the server; valid until destroy. */
const uint8_t *rl_move_owned(const struct rl_move *m);
/* Shards decided here. */
uint32_t rl_move_count_owned(const struct rl_move *m);

/*
 * A new table (this node's view; map is taken over: freed at the next call or destroy).
 * Every shard moves as docs/OPERATIONS.md, "Planned moves", says. Returns the number of
 * shards whose state changed.
 */
uint32_t rl_move_view(struct rl_move *m, struct rl_shardmap *map);

/* Every shard's epoch was bumped by the caller (its registration was lost): states restart
 * (none decided until the next view). */
void rl_move_lost(struct rl_move *m);

/* Whether views can come (the ZooKeeper session is connected): while they cannot, the view
 * last applied may be behind the senders', and a shard received ahead of it stays held here
 * rather than follow it (it would go back to a node that left it: a drain cut short by a
 * ZooKeeper outage). */
void rl_move_views_current(struct rl_move *m, bool current);

/* The members were read (before the view built from them is applied): once views are
 * current again, the first such read ends the holds rl_move_views_current kept (without
 * one, a hold of handoff_wait / 4 does: a read may find nothing changed and deliver
 * nothing). */
void rl_move_members_read(struct rl_move *m);

/*
 * What a request for shard s gets, when the bitmap says it is not decided here: false for
 * NOT_OWNER; true for MOVING, *owner then "" (ask again) or the member to ask: the next
 * owner of a shard gone, the old owner of one expected (it decides it until its export).
 */
bool rl_move_moving(const struct rl_move *m, uint32_t s, const char **owner);

/* Whether shard s is expected here (INCOMING). */
bool rl_move_expected(const struct rl_move *m, uint32_t s);

/*
 * HANDOFF_IN of an automatic move for shard s: 0 when its records may be imported (s was
 * expected here, or not known yet to be moving: this node's view lags); -EBUSY when s is
 * decided here or moving away (never merged into counters in use), or expected from another
 * node than from (the sender's name, NULL: not given), with why. nothing: a message with no
 * records at all ("nothing here"), taken only for a shard expected from its sender; 1 when
 * nothing is to be done (a "nothing here" about a shard not expected from there: the
 * restarted node's or the new member's, moot here), answered as imported without effect.
 * Counts bytes.
 */
int rl_move_in_begin(struct rl_move *m, uint32_t s, size_t bytes, const char *from, size_t flen,
                     bool nothing, char *why, size_t len);
/* After rl_move_in_begin: keys imported; final: the shard is complete and decided here now. */
void rl_move_in_end(struct rl_move *m, uint32_t s, uint64_t keys, bool final);

/*
 * The clean stop: calls done(arg) once no shard remains to ship (the caller has written
 * `leaving` and the view with it has been applied: rl_move_view then queued every owned
 * shard), or at deadline_ms, when the shards not shipped are said at warn. Returns at once.
 */
void rl_move_drain(struct rl_move *m, uint32_t deadline_ms, void (*done)(void *arg), void *arg);

void rl_move_stats(const struct rl_move *m, struct rl_move_stats *st);

/* Appends the rl_node_handoff_* families (docs/OPERATIONS.md, "Metrics"). */
void rl_move_metrics(const struct rl_move *m, struct rl_prom *p);

#endif
