/*
 * move_int: what move.c (the shard states, the drain, the metrics) and move_push.c (the
 * batches: export on the loop, send from the thread pool) share, and nothing else includes:
 * struct rl_move and the calls each file makes of the other. Not for the node's main or the
 * server (move.h).
 */
#ifndef RL_MOVE_INT_H
#define RL_MOVE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "buf.h"
#include "move.h"
#include "shardmap.h"

#define MOVE_TICK_MS 50
#define MOVE_BATCH_SHARDS 64 /* shards of one export pass and one connection */
/* Key-table slots the export pass visits per turn of the loop (rl_limiter_export_step):
 * ~0.4 ms at 10M keys, so a pass holds no other shard's requests for the ~70 ms it takes. */
#define MOVE_SCAN_SLOTS 65536
#define MOVE_BATCH_MAX 256   /* shards of one connection telling a node there is nothing */
#define MOVE_PEER_NONE UINT16_MAX
#define MOVE_PEERS_MAX 4096
/* A batch's messages sent ahead of their acknowledgements (each at most
 * RL_WIRE_RECORDS_MAX of records): the send waits for acknowledgements, not for the whole
 * batch, so its deadline is handoff_wait since the last one. */
#define MOVE_WINDOW 16
/* The nodes told in one tick, while a batch is out, that shards queued for them are still
 * coming (move_keep_up; the others, on the next ticks) */
#define MOVE_KEEP_MAX 128
/* The shards one "still coming" round names to one node (one message each, on one
 * connection); a node expecting more from here is named the rest on the next rounds */
#define MOVE_KEEP_SHARDS 1024

struct move_batch {
    uv_work_t work;
    bool active;
    bool nothing; /* no records: "I hold nothing of these" (empty final messages) */
    uint16_t peer;
    char addr[RL_SHARDMAP_NAME_MAX];
    uint32_t n;
    uint32_t shard[MOVE_BATCH_MAX];
    uint64_t keys[MOVE_BATCH_MAX], bytes[MOVE_BATCH_MAX];
    uint32_t last_id[MOVE_BATCH_MAX]; /* the id of each shard's final message */
    bool ok[MOVE_BATCH_MAX];
    uint64_t ack_ns[MOVE_BATCH_MAX];
    struct rl_buf snap[MOVE_BATCH_MAX]; /* each shard's records (header, keys, end) */
    struct rl_buf frames;               /* every message, in shard order */
    uint32_t nmsgs;
    uint64_t t0_ns; /* the export instant */
    int timeout_ms;
    const char *secret;
    size_t secret_len;
    struct rl_tls_ctx *tls;
    int rc;
    char why[256];
    /* the export pass: which shard the entry being read belongs to */
    uint32_t cur;
    int export_rc;
    /* the export pass runs a slice per turn of the loop (move_scan_turn, while the move's
     * idle handle is active); each shard's ownership epoch and the limiter's time, as at the
     * export instant */
    uint16_t epoch[MOVE_BATCH_MAX];
    uint64_t lnow;
    /* monotonic ns at which the last message acknowledged began to be written (0: none yet):
     * its node heard of the batch at that moment or later. Written by the pool thread, read
     * by the loop's tick (atomics) */
    uint64_t acked_ns;
    struct rl_hist answer; /* its messages' answers (rl_move_stats.answer), the pool thread's */
};

/* "Still coming", while a batch is out: to a node that has shards queued for it here (or the
 * batch's own node during its export pass), one empty, non-final HANDOFF_IN naming each of
 * them (up to MOVE_KEEP_SHARDS a round), which keeps its waits for shards from here open (it
 * waits handoff_wait from the last word of a member) and tells it that this node holds them
 * (its views may expect one from another node). Also, batch or none, to a node the view places
 * a shard on whose records come here; and to a node the view now places a shard of the batch
 * on, naming as its sender (`from`) the batch's node, which will hold it: the shard comes from
 * there, not from here (`via`). One work request of the thread pool per node and round, so a
 * slow node delays no other. */
struct move_keep {
    uv_work_t work;
    struct rl_move *m;
    char addr[RL_SHARDMAP_NAME_MAX];
    uint32_t n;
    uint32_t shard[MOVE_KEEP_SHARDS];
    bool via_batch[MOVE_KEEP_SHARDS]; /* shard[i] is the batch's: named from `via` */
    char via[RL_SHARDMAP_NAME_MAX];   /* the batch's node (copied: the pool thread reads it) */
    uint16_t peer;
    bool ok;       /* acknowledged */
    uint64_t sent; /* monotonic ns just before it was sent (not later than the node heard it) */
    uint64_t answered; /* monotonic ns of its acknowledgement */
    int timeout_ms;
};

struct rl_move {
    uv_loop_t *loop;
    uv_timer_t tick, drain_timer;
    uv_idle_t scan; /* while a batch's export pass runs: a slice per turn */
    int nopen;
    bool closing;
    struct rl_move_opts o;
    char self[RL_SHARDMAP_NAME_MAX];
    uint32_t n;
    uint8_t *st;        /* enum rl_move_st */
    uint16_t *peer;     /* index into peers, MOVE_PEER_NONE */
    uint64_t *deadline; /* loop ms: INCOMING's end, OWNED_H's, OUTGOING's give-up */
    uint8_t *owned;     /* bit s: decided here */
    uint8_t *queued;    /* bit s: in the queue */
    uint8_t *taken;     /* bit s (INCOMING shards): records of s were imported in this tenure
                           (their epoch is this one's: a new tenure would judge them absent) */
    uint8_t *kept;      /* bit s (INCOMING shards): kept expected, records taken, after a view
                           moved s on from here to another node: shipped on to it once whole
                           (named to it in "still coming" meanwhile, as any INCOMING shard
                           with records taken that the view places elsewhere) */
    uint8_t *told;      /* bit s (NONE shards): some peer said it holds nothing of s, until
                           deadline[s]; a view then expecting s from it needs not wait */
    uint8_t **told_by;  /* [peer id]: bit s, that peer said so (NULL until one does); two
                           nodes may each say it of one shard (move_told) */
    size_t told_cap;    /* entries of told_by */
    uint32_t *q;        /* ring of OUTGOING shards, n + 1 slots */
    uint32_t qhead, qtail;
    struct move_peer {
        char name[RL_SHARDMAP_NAME_MAX];
        uint64_t heard; /* loop ms of its last "still coming" here: keeps open the waits of
                           the shards expected from it, and of none other */
        uint64_t told;  /* loop ms at which the last batch message of records from here that
                           it took began to be sent: it heard from here then or later, and
                           kept every wait open. Keeps the shards queued for it move_keep_ms;
                           "still coming" keeps those it names (their deadline) */
        uint64_t kept;  /* loop ms "still coming" was last sent to it */
        bool keeping;   /* one is out to it */
        /* the round move_keep_up is filling (NULL: none); of the shards to name, how many
         * are counted and named so far, and how many the last round skipped at the start */
        struct move_keep *keep;
        uint32_t keep_seen, keep_at, keep_skip;
    } * peers;
    size_t npeers, peers_cap;
    struct rl_shardmap *map;            /* the view last applied */
    uint32_t self_ix;                   /* in map, or RL_SHARDMAP_NONE */
    bool leaving_seen;                  /* the map says this node is leaving (or not a member) */
    bool views_stale;    /* ZooKeeper unreachable: the view last applied may be behind */
    uint64_t views_back; /* loop ms views last became current again (0: never lost) */
    bool view_since_back; /* members were read since (rl_move_members_read) */
    uint64_t in_progress; /* loop ms of the last HANDOFF_IN with records here from a member of
                             the view (move_member_progress) */
    uint64_t let_go;      /* loop ms a view last let go of a shard expected from a member
                             before any of its records came (move_check_drain) */
    bool in_counts;                     /* the HANDOFF_IN being taken is from a member */
    uint32_t nowned;
    struct rl_move_stats stats;
    struct move_batch b;
    uint32_t keeps; /* "still coming" work requests out (struct move_keep) */
    int keep_stop;  /* the move closes: those not begun send nothing (atomics) */
    bool draining, drained;
    /* On this node's first view as active (and, after one whose previous view had every
     * node joining, on the views of the next half handoff_wait that show more nodes
     * active): shards a node may expect from it though it never held them (it joined with
     * that node, and their views took other steps), to be told "nothing here" (peer: whom);
     * sorted by peer; at most 2 n (a plan adds each shard once; more are dropped, and wait
     * handoff_wait). Also, once, on this process's first view that shows its name joining
     * (restarted before its previous process's session expired): the shards the others
     * expect from that previous process, which this one never held */
    bool self_active;
    bool restart_told;
    uint64_t tell_all_until; /* loop ms: until then, a view with more nodes active than the
                                last plan saw tells every owner of what this node holds
                                nothing of (move_nothing_plan's `all`) */
    uint32_t told_active;    /* active members in the view of the last such plan */
    struct move_nothing {
        uint16_t peer;
        uint32_t shard;
    } * nothing;
    uint32_t nnothing, nothing_at;
    void (*drain_done)(void *arg);
    void *drain_arg;
};

static inline void
bit_set(uint8_t *bm, uint32_t s, bool on)
{
    if (on) {
        bm[s >> 3] |= (uint8_t)(1u << (s & 7));
    } else {
        bm[s >> 3] &= (uint8_t) ~(1u << (s & 7));
    }
}

static inline bool
bit_get(const uint8_t *bm, uint32_t s)
{
    return (bm[s >> 3] >> (s & 7) & 1) != 0;
}

/* How long a queued shard is kept after a moment at or before its node last heard of it from
 * here (`told`, struct move_peer; or the sending of a "still coming" naming it): three
 * quarters of handoff_wait. That node waits a whole handoff_wait from what it heard last
 * before it starts the shard from zero, so the shard is always given up here first; the last
 * quarter covers this loop's lag behind the clock (a tick comes late, a turn decides with the
 * time it began with). */
static inline uint64_t
move_keep_ms(const struct rl_move *m)
{
    uint32_t w = m->o.handoff_wait_ms;

    return w - w / 4 > 0 ? w - w / 4 : 1;
}

/* Half of handoff_wait (at least 1 ms): a queued shard's first wait, a round's or a "nothing
 * here" step's time to be answered. */
static inline uint64_t
move_half_ms(const struct rl_move *m)
{
    return m->o.handoff_wait_ms / 2 > 0 ? m->o.handoff_wait_ms / 2 : 1;
}

/* How often a node expecting shards queued here is told they are still coming (struct
 * move_keep): every eighth of handoff_wait, one round out at a time, each answered within
 * half of it. A round answered keeps its shards move_keep_ms from its sending; the next starts
 * once it is answered, so answers slower than about three eighths of handoff_wait, one round
 * after another, let the shards go (a pause of up to about five eighths, once, does not). */
static inline uint64_t
move_keep_every_ms(const struct rl_move *m)
{
    return m->o.handoff_wait_ms / 8 > 0 ? m->o.handoff_wait_ms / 8 : 1;
}

/* Whether this node's view places shard s here. */
static inline bool
move_placed_here(const struct rl_move *m, uint32_t s)
{
    return m->map != NULL && m->self_ix != RL_SHARDMAP_NONE &&
           rl_shardmap_owner(m->map, s) == m->self_ix;
}

/* Forgets who said they hold nothing of s. */
void move_told_clear(struct rl_move *m, uint32_t s);
/* Whether peer said, before deadline[s] passed, that it holds nothing of NONE shard s. */
bool move_told(const struct rl_move *m, uint32_t s, uint16_t peer, uint64_t now);
/* Records that peer said so (false when it cannot be recorded: then it is not taken). */
bool move_told_set(struct rl_move *m, uint32_t s, uint16_t peer, uint64_t now);

static inline bool
st_decides(uint8_t st)
{
    return st == RL_MOVE_OWNED || st == RL_MOVE_OWNED_H || st == RL_MOVE_OUTGOING;
}

/* move_state.c: the bookkeeping both files below use */
void move_set(struct rl_move *m, uint32_t s, uint8_t to);
/* Expected here from peer: nothing decided until it arrives or the wait ends. A new tenure:
 * what this node held of s before is not current. */
void move_incoming(struct rl_move *m, uint32_t s, uint16_t peer, uint64_t now);
/* Decided here from zero (a new tenure). */
void move_fresh(struct rl_move *m, uint32_t s);
/* A shard gone from here (shipped, or given up) that the view places here again: expected
 * back from that node if it is a member and not joining (restarted since), else from zero. */
void move_gone_here(struct rl_move *m, uint32_t s, uint64_t now);
/* The id of peer `name` (added when new), MOVE_PEER_NONE when no more fit. */
uint16_t move_peer_id(struct rl_move *m, const char *name);
const char *move_peer_name(const struct rl_move *m, uint16_t id);
/* Whether the member named by peer id is in the current view (any state). */
bool move_peer_member(const struct rl_move *m, uint16_t id);
void move_enqueue(struct rl_move *m, uint32_t s);
/* Shards this node holds or receives records of without a view placing them here: arrived
 * whole ahead of the view (RL_MOVE_OWNED_H, held, then shipped on), or expected with records
 * taken (kept until whole, then shipped on). A drain waits for them. */
uint32_t move_records_held(const struct rl_move *m);
void move_check_drain(struct rl_move *m);
void move_free(struct rl_move *m);

/* move_push.c: the next batch, if none is out and something waits */
void move_pump(struct rl_move *m);
/* move_push.c: the rest of a batch's export pass at once, if one runs (the move closes) */
void move_scan_finish(struct rl_move *m);
/* move_push.c, from the tick: while a batch is out, every eighth of handoff_wait
 * (move_keep_every_ms) the nodes its queued shards are bound for (and, during its export pass, its
 * own; and those the view now places a shard of the batch on) are told they are still coming,
 * as the nodes the view places a shard on whose records come here are (struct move_keep);
 * each peer's `told` moves on with what it acknowledges. */
void move_keep_up(struct rl_move *m, uint64_t now);
/* Peer id's record, or NULL (MOVE_PEER_NONE, or none such). */
static inline struct move_peer *
move_peer(const struct rl_move *m, uint16_t id)
{
    return id < m->npeers ? &m->peers[id] : NULL;
}

/* Whether nothing of the move's runs in the thread pool (it may be freed once closed). */
static inline bool
move_idle(const struct rl_move *m)
{
    return !m->b.active && m->keeps == 0;
}

#endif
