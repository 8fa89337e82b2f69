/*
 * server_state: what a node's server is made of (struct rl_server and its options), apart
 * from what it does (server.h), so that the file that handles a handoff for it
 * (server_handoff.c, which server.c calls) reads the server without calling back up into
 * server.c. Not for anything but server.h and server_handoff.c.
 */
#ifndef RL_SERVER_STATE_H
#define RL_SERVER_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "clock.h"
#include "conf.h"
#include "conn.h"
#include "gate.h"
#include "limiter.h"
#include "metrics.h"
#include "throttle.h"
#include "wire.h"

/* Membership state for STATS (rl_server_set_membership). */
#define RL_SERVER_ZK_NONE (-1) /* static membership: no ZooKeeper configured */

struct rl_server_opts {
    const char *name; /* answered to PING */
    const char *host;
    uint16_t port;
    bool test_clock; /* accept CLOCK (op 4) */
    struct rl_conn_limits limits; /* cluster.conf [clients]; zero: the defaults */
    const struct rl_conf *conf;   /* its cluster secret, if any, must open every connection
                                     (AUTH); NULL: nobody authenticates */
    /* where the rules in force came from (rules.h), kept up to date by the caller: STATS
     * rules_version, rules_digest, rules_reloads, rules_reload_failures; NULL: version 0 and
     * the digest of conf (0 without conf). Also read by metrics. */
    const struct rl_rules_status *rules;
    /* NULL, or TLS on the listener (tls.h; the caller's, outliving the server) */
    struct rl_tls_ctx *tls;
};

/* CHECKs of one read prepared (their key-table slots prefetched) before the first of them is
 * judged (server.c). */
#define RL_SERVER_BATCH 16

/* A CHECK decoded and prepared, waiting for its judgment. */
struct rl_server_pending {
    struct rl_wire_req req; /* its strings point into the frame, valid until on_batch_end */
    struct rl_limiter_prep prep;
};

struct rl_server {
    uv_loop_t *loop;
    struct rl_connq connq;
    struct rl_listener listener;
    struct rl_wire_decoder dec; /* one for all clients: frames are decoded one at a time */
    uv_timer_t sweep_timer;
    uv_timer_t throttle_timer; /* idle closes of throttling episodes */
    struct rl_limiter *limiter;
    struct rl_throttle *throttle;        /* NULL: [cluster] throttle_events = 0 */
    struct rl_wire_episode *episodes;    /* RL_WIRE_TOP_MAX, for THROTTLED replies */
    bool events_log_failed;              /* rl_server_start failed opening [cluster] events_log */
    struct rl_clock clock;
    struct rl_server_opts opts;
    char name[64];
    uint64_t now_ms; /* the limiter's clock, read once per batch of frames */
    uint64_t errors; /* ERROR replies sent */
    int zk_state;    /* RL_SERVER_ZK_NONE or an enum rl_zkm_state */
    int registered;  /* 1 while this node's znode is held (always 1 with static membership) */
    const uint8_t *owned; /* ZooKeeper mode: bit s set when this node owns shard s in its
                             view of the membership and assignment; NULL: no view yet */
    uint32_t nshards;
    /* STATS table_digest: rl_shardmap_digest_stat() of the table owned came from; 0: no
     * view yet (always, with static membership) */
    int64_t table_digest;
    /* ZooKeeper mode: per shard, the ownership epoch CHECKs are judged under
     * (rl_limiter_check_epoch); NULL: epoch 0 for all */
    const uint16_t *epochs;
    bool fence_disconnect; /* [cluster] fencing = disconnect */
    uint64_t not_owner;     /* CHECKs refused: shard not ours, or fenced */
    struct rl_gate gate;    /* AUTH: its failures are the connections closed for a wrong
                               or missing AUTH */
    uint64_t started_ms;
    /* metrics: the time each CHECK spent in the node, from the read that brought it to its
     * reply's place in the output (per read batch: every CHECK of a batch is observed with
     * the batch's duration, so the hot path reads no clock) */
    struct rl_hist latency;
    uint64_t batch_start_ns; /* uv_hrtime() at on_batch */
    uint64_t batch_checks;   /* CHECKs answered in this batch so far */
    /* CHECKs of the batch being read, decoded and prepared, not judged yet: all of one
     * connection's (pending_conn), judged in frame order before any other reply of it */
    struct rl_server_pending pending[RL_SERVER_BATCH];
    unsigned npending;
    struct rl_conn *pending_conn;
    /* The admin budget (STATS, THROTTLED): reply bytes spent in loop turn admin_turn
     * (connq.turn), and admin requests left for a later turn because it was spent */
    uint64_t admin_turn;
    size_t admin_bytes;
    uint64_t admin_deferred;
    /* the regions' slices in force (docs/REGIONS.md), set by node/main.c: STATS
     * slices_version (data version + 1, 0: none), slices_generation, slices_users,
     * slices_failures (texts refused) */
    int64_t slices_version;
    uint64_t slices_generation, slices_users, slices_failures;
    uint64_t zk_expiries;    /* ZooKeeper sessions lost for good (set by the node's main) */
    /* HANDOFF_OUT's export in progress and HANDOFF_IN's room (server_handoff.h); NULL until
     * the first of them */
    struct rl_server_handoff *handoff;
    /* ZooKeeper mode: the shard states of automatic handoff (move.h), set by the node's
     * main; NULL with static membership. A CHECK or ADJUST of a shard in flight is answered
     * ERROR MOVING (counted in moving), a HANDOFF_IN with `final` goes through it. */
    struct rl_move *move;
    uint64_t moving;
    uint32_t shards_owned;   /* in the current view (set by the node's main) */
    int pending_closes; /* handles still closing */
    bool closing;
    void (*on_closed)(struct rl_server *s); /* after rl_server_close, once all is closed */
};

/* ZooKeeper mode: whether shard is one this node decides in its view (owned's bit). */
static inline bool
rl_server_owns_shard(const struct rl_server *s, uint32_t shard)
{
    return s->owned != NULL && (s->owned[shard >> 3] >> (shard & 7) & 1) != 0;
}

#endif
