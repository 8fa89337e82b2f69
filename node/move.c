/*
 * move: the shard state machine of automatic handoff and the node-to-node push (move.h).
 * Every view change moves each shard's state (docs/OPERATIONS.md, "Planned moves"); the
 * outgoing ones are shipped in batches of shards bound for one node: a batch is exported in
 * one pass over the key table on the loop (its shards decided nowhere from that instant),
 * its HANDOFF_IN messages are sent on one connection from the thread pool, and each shard is
 * then gone. Waits are bounded on both sides by [cluster] handoff_wait, counted from the last
 * progress of a move: a receiver that hears nothing for that long starts its expected shards
 * from zero, and a sender gives up on its queued shards well before (half of it), so the two
 * never decide one shard at once. Not for decoding or importing records (server_handoff.c).
 */
#include "move.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "handoff.h"
#include "limiter.h"
#include "log.h"
#include "reqclient.h"
#include "shardmap.h"
#include "wire.h"

#define MOVE_TICK_MS 50
#define MOVE_BATCH_MAX 64  /* shards of one export pass and one connection */
#define MOVE_PEER_NONE UINT16_MAX
#define MOVE_PEERS_MAX 4096

struct move_batch {
    uv_work_t work;
    bool active;
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
};

struct rl_move {
    uv_loop_t *loop;
    uv_timer_t tick, drain_timer;
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
    uint32_t *q;        /* ring of OUTGOING shards, n + 1 slots */
    uint32_t qhead, qtail;
    char (*peers)[RL_SHARDMAP_NAME_MAX];
    size_t npeers, peers_cap;
    struct rl_shardmap *map; /* the view last applied */
    uint32_t self_ix;        /* in map, or RL_SHARDMAP_NONE */
    bool leaving_seen;       /* the map says this node is leaving (or not a member) */
    uint64_t in_progress, out_progress; /* loop ms of the last HANDOFF_IN here, last ack */
    uint32_t nowned;
    struct rl_move_stats stats;
    struct move_batch b;
    bool draining, drained;
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

static bool
st_decides(uint8_t st)
{
    return st == RL_MOVE_OWNED || st == RL_MOVE_OWNED_H || st == RL_MOVE_OUTGOING;
}

/* Every state change goes through here: the bitmap and the gauges follow. */
static void
move_set(struct rl_move *m, uint32_t s, uint8_t to)
{
    uint8_t from = m->st[s];

    if (from == to) {
        return;
    }
    m->stats.incoming -= from == RL_MOVE_INCOMING;
    m->stats.incoming += to == RL_MOVE_INCOMING;
    m->stats.outgoing -= from == RL_MOVE_OUTGOING || from == RL_MOVE_EXPORTING;
    m->stats.outgoing += to == RL_MOVE_OUTGOING || to == RL_MOVE_EXPORTING;
    m->nowned -= st_decides(from);
    m->nowned += st_decides(to);
    m->st[s] = to;
    bit_set(m->owned, s, st_decides(to));
}

static uint16_t
move_peer_id(struct rl_move *m, const char *name)
{
    for (size_t i = 0; i < m->npeers; i++) {
        if (strcmp(m->peers[i], name) == 0) {
            return (uint16_t)i;
        }
    }
    if (m->npeers == m->peers_cap) {
        size_t cap = m->peers_cap == 0 ? 16 : m->peers_cap * 2;
        void *p;

        if (cap > MOVE_PEERS_MAX || (p = realloc(m->peers, cap * sizeof(*m->peers))) == NULL) {
            return MOVE_PEER_NONE;
        }
        m->peers = p;
        m->peers_cap = cap;
    }
    snprintf(m->peers[m->npeers], sizeof(m->peers[0]), "%s", name);
    return (uint16_t)m->npeers++;
}

static const char *
move_peer_name(const struct rl_move *m, uint16_t id)
{
    return id == MOVE_PEER_NONE || id >= m->npeers ? "" : m->peers[id];
}

/* Whether the member named by peer id is in the current view (any state). */
static bool
move_peer_member(const struct rl_move *m, uint16_t id)
{
    return id != MOVE_PEER_NONE && m->map != NULL &&
           rl_shardmap_find(m->map, move_peer_name(m, id)) != RL_SHARDMAP_NONE;
}

static void
move_enqueue(struct rl_move *m, uint32_t s)
{
    if (bit_get(m->queued, s)) {
        return;
    }
    bit_set(m->queued, s, true);
    m->q[m->qtail] = s;
    m->qtail = (m->qtail + 1) % (m->n + 1);
}

/* Expected here from peer: nothing decided until it arrives or the wait ends. A new tenure:
 * what this node held of s before is not current. */
static void
move_incoming(struct rl_move *m, uint32_t s, uint16_t peer, uint64_t now)
{
    m->o.epochs[s]++;
    m->peer[s] = peer;
    m->deadline[s] = now + m->o.handoff_wait_ms;
    m->stats.in_started++;
    move_set(m, s, RL_MOVE_INCOMING);
}

static void
move_fresh(struct rl_move *m, uint32_t s)
{
    m->o.epochs[s]++;
    move_set(m, s, RL_MOVE_OWNED);
}

static void
move_outgoing(struct rl_move *m, uint32_t s, uint32_t to, uint64_t now)
{
    m->peer[s] = move_peer_id(m, m->map->members[to].name);
    m->deadline[s] = now + m->o.handoff_wait_ms / 2;
    move_set(m, s, RL_MOVE_OUTGOING);
    move_enqueue(m, s);
}

static void move_pump(struct rl_move *m);
static void move_check_drain(struct rl_move *m);

/* Shards whose wait ended: the expected ones start fresh, the queued ones are given up,
 * the ones received ahead of the view follow it. */
static void
move_tick_cb(uv_timer_t *t)
{
    struct rl_move *m = t->data;
    uint64_t now = uv_now(m->loop);
    uint64_t fresh = 0, given_up = 0;

    if (m->stats.incoming == 0 && m->stats.outgoing == 0 && !m->draining) {
        bool any_h = false;

        for (uint32_t s = 0; s < m->n && !any_h; s++) {
            any_h = m->st[s] == RL_MOVE_OWNED_H;
        }
        if (!any_h) {
            uv_timer_stop(t);
            return;
        }
    }
    for (uint32_t s = 0; s < m->n; s++) {
        uint8_t st = m->st[s];

        if (st == RL_MOVE_INCOMING) {
            bool gone = m->peer[s] != MOVE_PEER_NONE && !move_peer_member(m, m->peer[s]);

            if (gone || (now >= m->deadline[s] && now >= m->in_progress + m->o.handoff_wait_ms)) {
                move_fresh(m, s);
                m->stats.in_failed++;
                fresh++;
            }
        } else if (st == RL_MOVE_OUTGOING) {
            if (now >= m->deadline[s] && now >= m->out_progress + m->o.handoff_wait_ms / 2) {
                move_set(m, s, RL_MOVE_GONE);
                m->stats.out_failed++;
                given_up++;
            }
        } else if (st == RL_MOVE_OWNED_H && now >= m->deadline[s]) {
            uint32_t o = m->map != NULL ? rl_shardmap_owner(m->map, s) : RL_SHARDMAP_NONE;

            if (o == m->self_ix || o == RL_SHARDMAP_NONE) {
                move_set(m, s, RL_MOVE_OWNED);
            } else {
                move_set(m, s, RL_MOVE_OWNED);
                move_outgoing(m, s, o, now);
            }
        }
    }
    if (fresh > 0) {
        rl_log_warn("handoff: %" PRIu64 " expected shard(s) did not arrive within handoff_wait "
                    "(%" PRIu32 " ms) or their old owner left: they start from zero here",
                    fresh, m->o.handoff_wait_ms);
    }
    if (given_up > 0) {
        rl_log_warn("handoff: %" PRIu64 " queued shard(s) not shipped within handoff_wait: "
                    "given up (their next owner starts them from zero)",
                    given_up);
    }
    move_pump(m);
    move_check_drain(m);
}

static void
move_tick(struct rl_move *m)
{
    if (!m->closing && !uv_is_active((uv_handle_t *)&m->tick)) {
        uv_timer_start(&m->tick, move_tick_cb, MOVE_TICK_MS, MOVE_TICK_MS);
    }
}

uint32_t
rl_move_view(struct rl_move *m, struct rl_shardmap *map)
{
    struct rl_shardmap *prev = m->map;
    uint64_t now = uv_now(m->loop);
    uint32_t self = rl_shardmap_find(map, m->self);
    uint32_t changed = 0;

    m->map = map;
    m->self_ix = self;
    m->leaving_seen = self == RL_SHARDMAP_NONE || map->members[self].state == RL_MEMBER_LEAVING;
    for (uint32_t s = 0; s < m->n; s++) {
        uint32_t o = rl_shardmap_owner(map, s);
        bool mine = self != RL_SHARDMAP_NONE && o == self;
        uint8_t before = m->st[s];

        switch (before) {
        case RL_MOVE_NONE:
            if (mine) {
                uint32_t po = prev != NULL ? rl_shardmap_owner(prev, s) : RL_SHARDMAP_NONE;
                const char *pn = po != RL_SHARDMAP_NONE ? prev->members[po].name : NULL;

                if (pn != NULL && strcmp(pn, m->self) != 0 &&
                    rl_shardmap_find(map, pn) != RL_SHARDMAP_NONE) {
                    move_incoming(m, s, move_peer_id(m, pn), now);
                } else {
                    move_fresh(m, s);
                }
            }
            break;
        case RL_MOVE_OWNED_H:
            if (mine) {
                move_set(m, s, RL_MOVE_OWNED);
                break;
            }
            if (now < m->deadline[s]) {
                break; /* this view may lag the sender's: wait for the next */
            }
            move_set(m, s, RL_MOVE_OWNED);
            /* fall through */
        case RL_MOVE_OWNED:
            if (!mine) {
                if (o != RL_SHARDMAP_NONE) {
                    move_outgoing(m, s, o, now);
                } else {
                    move_set(m, s, RL_MOVE_NONE);
                }
            }
            break;
        case RL_MOVE_INCOMING:
            if (!mine) {
                move_set(m, s, RL_MOVE_NONE); /* moved on elsewhere before it came */
            }
            break;
        case RL_MOVE_OUTGOING:
            if (mine) {
                move_set(m, s, RL_MOVE_OWNED); /* back before it left: still ours */
            } else if (o == RL_SHARDMAP_NONE) {
                move_set(m, s, RL_MOVE_NONE);
            } else {
                m->peer[s] = move_peer_id(m, map->members[o].name);
            }
            break;
        case RL_MOVE_EXPORTING:
            break; /* its batch decides */
        case RL_MOVE_GONE:
            if (mine) {
                if (move_peer_member(m, m->peer[s])) {
                    move_incoming(m, s, m->peer[s], now); /* it comes back from there */
                } else {
                    move_fresh(m, s);
                }
            } else if (o == RL_SHARDMAP_NONE) {
                move_set(m, s, RL_MOVE_NONE);
            } else {
                m->peer[s] = move_peer_id(m, map->members[o].name);
            }
            break;
        default:
            break;
        }
        changed += m->st[s] != before;
    }
    rl_shardmap_destroy(prev);
    if (m->stats.incoming > 0 || m->stats.outgoing > 0) {
        rl_log_info("handoff: view applied: %" PRIu64 " shard(s) expected here, %" PRIu64
                    " to ship",
                    m->stats.incoming, m->stats.outgoing);
        move_tick(m);
    }
    move_pump(m);
    move_check_drain(m);
    return changed;
}

void
rl_move_lost(struct rl_move *m)
{
    for (uint32_t s = 0; s < m->n; s++) {
        if (m->st[s] != RL_MOVE_EXPORTING) {
            move_set(m, s, RL_MOVE_NONE);
        }
    }
}

bool
rl_move_moving(const struct rl_move *m, uint32_t s, const char **owner)
{
    if (s >= m->n) {
        return false;
    }
    switch (m->st[s]) {
    case RL_MOVE_INCOMING:
        /* its old owner decides it until its export (it may be queued behind other shards
         * there): ask it, while it is a member; "" once nobody is known to */
        *owner = move_peer_member(m, m->peer[s]) ? move_peer_name(m, m->peer[s]) : "";
        return true;
    case RL_MOVE_EXPORTING:
        *owner = "";
        return true;
    case RL_MOVE_GONE:
        *owner = move_peer_name(m, m->peer[s]);
        return true;
    default:
        return false;
    }
}

bool
rl_move_expected(const struct rl_move *m, uint32_t s)
{
    return s < m->n && m->st[s] == RL_MOVE_INCOMING;
}

int
rl_move_in_begin(struct rl_move *m, uint32_t s, size_t bytes, char *why, size_t len)
{
    uint64_t now = uv_now(m->loop);

    if (s >= m->n) {
        snprintf(why, len, "shard %" PRIu32 " is out of range", s);
        return -EINVAL;
    }
    switch (m->st[s]) {
    case RL_MOVE_INCOMING:
        break;
    case RL_MOVE_NONE:
    case RL_MOVE_GONE:
        /* this node's view lags the sender's: take it, and keep it when the view comes */
        move_incoming(m, s, MOVE_PEER_NONE, now);
        move_tick(m);
        break;
    default:
        snprintf(why, len,
                 "shard %" PRIu32 " is %s here: an automatic handoff is refused (never merged "
                 "into counters in use)",
                 s, st_decides(m->st[s]) ? "decided" : "moving away");
        return -EBUSY;
    }
    m->in_progress = now;
    m->stats.bytes_in += bytes;
    return 0;
}

void
rl_move_in_end(struct rl_move *m, uint32_t s, uint64_t keys, bool final)
{
    uint64_t now = uv_now(m->loop);

    m->stats.keys_in += keys;
    m->in_progress = now;
    if (!final || s >= m->n || m->st[s] != RL_MOVE_INCOMING) {
        return;
    }
    m->stats.in_done++;
    if (m->stats.incoming == 1) {
        rl_log_info("handoff: the last expected shard arrived (%" PRIu64 " received whole, %" PRIu64
                    " started from zero, since start)",
                    m->stats.in_done, m->stats.in_failed);
    }
    if (m->map != NULL && m->self_ix != RL_SHARDMAP_NONE &&
        rl_shardmap_owner(m->map, s) == m->self_ix) {
        move_set(m, s, RL_MOVE_OWNED);
    } else {
        m->deadline[s] = now + m->o.handoff_wait_ms;
        move_set(m, s, RL_MOVE_OWNED_H);
        move_tick(m);
    }
    rl_log_debug("handoff: shard %" PRIu32 " received whole: decided here", s);
}

/* The batch: export on the loop, send in the pool, finish on the loop. */

static bool
move_want(void *arg, uint64_t fp_hi, uint32_t fp_lo, uint32_t shard, uint16_t epoch)
{
    struct rl_move *m = arg;
    struct move_batch *b = &m->b;

    (void)fp_hi;
    (void)fp_lo;
    if (shard >= m->n || m->st[shard] != RL_MOVE_EXPORTING || epoch != m->o.epochs[shard]) {
        return false;
    }
    for (uint32_t i = 0; i < b->n; i++) {
        if (b->shard[i] == shard) {
            b->cur = i;
            return true;
        }
    }
    return false;
}

static int
move_put_key(void *arg, const struct rl_handoff_key *k)
{
    struct rl_move *m = arg;
    struct move_batch *b = &m->b;

    b->keys[b->cur]++;
    return rl_handoff_put_key(&b->snap[b->cur], k);
}

/* Splits a shard's records into HANDOFF_IN messages of whole records, the last final. */
static int
move_frames(struct move_batch *b, uint32_t i)
{
    const struct rl_buf *snap = &b->snap[i];
    size_t start = 0, end;
    int rc = 0;

    do {
        end = start;
        while (end + 4 <= snap->len) {
            const unsigned char *p = (const unsigned char *)snap->data + end;
            size_t len = 4 + ((size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3]);

            if (end + len - start > RL_WIRE_RECORDS_MAX) {
                break;
            }
            end += len;
        }
        if (end == start && start < snap->len) {
            return -EFBIG; /* a record larger than a message: cannot happen */
        }
        b->nmsgs++;
        rc = rl_wire_put_handoff_in_final(&b->frames, b->nmsgs, b->shard[i], snap->data + start,
                                          end - start, end >= snap->len);
        start = end;
    } while (rc == 0 && start < snap->len);
    b->last_id[i] = b->nmsgs;
    b->bytes[i] = snap->len;
    return rc;
}

static int
move_left(uint64_t end_ns)
{
    uint64_t now = rl_clock_mono_ns();

    return now >= end_ns ? 1 : (int)((end_ns - now) / 1000000) + 1;
}

/* The thread pool: connect, TLS, AUTH, every message, then the replies. */
static void
move_work(uv_work_t *w)
{
    struct move_batch *b = w->data;
    struct rl_client *c = NULL;
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    uint64_t end = rl_clock_mono_ns() + (uint64_t)b->timeout_ms * 1000000;
    uint32_t acked = 0;
    int rc;

    b->why[0] = '\0';
    if (rep == NULL) {
        b->rc = -ENOMEM;
        return;
    }
    rc = rl_client_connect_addr(&c, b->addr, move_left(end));
    if (rc == 0 && b->tls != NULL) {
        rc = rl_client_start_tls(c, b->tls, move_left(end), b->why, sizeof(b->why));
    }
    if (rc == 0 && b->secret != NULL) {
        rc = rl_client_auth(c, b->secret, b->secret_len, rep, move_left(end));
        if (rc == -EACCES) {
            snprintf(b->why, sizeof(b->why), "refused the cluster secret (AUTH)");
        }
    }
    if (rc == 0) {
        rc = rl_client_queue_raw(c, b->frames.data, b->frames.len);
    }
    if (rc == 0) {
        rc = rl_client_flush(c, move_left(end));
    }
    while (rc == 0 && acked < b->nmsgs) {
        rc = rl_client_recv(c, rep, move_left(end));
        if (rc != 0) {
            break;
        }
        acked++;
        for (uint32_t i = 0; i < b->n; i++) {
            uint32_t first = i == 0 ? 1 : b->last_id[i - 1] + 1;

            if (rep->id < first || rep->id > b->last_id[i]) {
                continue;
            }
            if (rep->op == RL_WIRE_OP_ERROR) {
                if (b->why[0] == '\0') {
                    snprintf(b->why, sizeof(b->why), "shard %" PRIu32 " refused: %.*s",
                             b->shard[i], (int)rep->message.len,
                             rep->message.ptr != NULL ? rep->message.ptr : "");
                }
                b->last_id[i] = 0; /* failed: its later acks match nothing */
            } else if (rep->op == RL_WIRE_OP_HANDOFF_IN && rep->id == b->last_id[i]) {
                b->ok[i] = true;
                b->ack_ns[i] = rl_clock_mono_ns();
            }
            break;
        }
    }
    if (rc != 0 && b->why[0] == '\0') {
        snprintf(b->why, sizeof(b->why), "%s after %" PRIu32 " of %" PRIu32 " messages",
                 strerror(-rc), acked, b->nmsgs);
    }
    b->rc = rc;
    rl_client_destroy(c);
    free(rep);
}

static void move_free(struct rl_move *m);

static void
move_after_work(uv_work_t *w, int status)
{
    struct move_batch *b = w->data;
    struct rl_move *m = (struct rl_move *)(void *)((char *)b - offsetof(struct rl_move, b));
    uint64_t now = uv_now(m->loop);
    uint32_t failed = 0;

    (void)status;
    for (uint32_t i = 0; i < b->n; i++) {
        uint32_t s = b->shard[i];

        if (b->ok[i]) {
            m->stats.out_done++;
            m->stats.keys_out += b->keys[i];
            m->stats.bytes_out += b->bytes[i];
            rl_hist_observe(&m->stats.freeze, b->ack_ns[i] - b->t0_ns, 1);
            rl_log_debug("handoff: shard %" PRIu32 " sent to %s: %" PRIu64 " keys, %" PRIu64
                         " bytes, frozen %.1f ms",
                         s, move_peer_name(m, b->peer), b->keys[i], b->bytes[i],
                         (double)(b->ack_ns[i] - b->t0_ns) / 1e6);
        } else {
            m->stats.out_failed++;
            failed++;
        }
        if (m->st[s] == RL_MOVE_EXPORTING) {
            move_set(m, s, RL_MOVE_GONE);
        }
        rl_buf_deinit(&b->snap[i]);
    }
    if (failed > 0) {
        rl_log_warn("handoff: %" PRIu32 " of %" PRIu32 " shard(s) not handed to %s (%s): it "
                    "starts them from zero",
                    failed, b->n, move_peer_name(m, b->peer), b->why);
    }
    if (failed < b->n) {
        m->out_progress = now;
    }
    rl_buf_deinit(&b->frames);
    b->active = false;
    if (m->closing) {
        if (m->nopen == 0) {
            move_free(m);
        }
        return;
    }
    move_pump(m);
    move_check_drain(m);
}

/* The next batch: up to MOVE_BATCH_MAX queued shards bound for the first one's node. */
static void
move_pump(struct rl_move *m)
{
    struct move_batch *b = &m->b;
    uint64_t now = uv_now(m->loop);
    uint32_t scanned = 0, qn;
    uint32_t mi;
    uint64_t lnow;
    int rc = 0;

    if (b->active || m->closing || m->qhead == m->qtail) {
        return;
    }
    memset(b->keys, 0, sizeof(b->keys));
    memset(b->ok, 0, sizeof(b->ok));
    b->n = 0;
    b->peer = MOVE_PEER_NONE;
    qn = (m->qtail + m->n + 1 - m->qhead) % (m->n + 1);
    /* one pass over the queue: shards of other nodes go back to its end */
    while (scanned < qn && b->n < MOVE_BATCH_MAX) {
        uint32_t s = m->q[m->qhead];

        m->qhead = (m->qhead + 1) % (m->n + 1);
        bit_set(m->queued, s, false);
        scanned++;
        if (m->st[s] != RL_MOVE_OUTGOING) {
            continue;
        }
        if (b->peer == MOVE_PEER_NONE) {
            b->peer = m->peer[s];
        } else if (m->peer[s] != b->peer) {
            move_enqueue(m, s);
            continue;
        }
        b->shard[b->n++] = s;
    }
    if (b->n == 0) {
        return;
    }
    mi = m->map != NULL ? rl_shardmap_find(m->map, move_peer_name(m, b->peer)) : RL_SHARDMAP_NONE;
    if (mi == RL_SHARDMAP_NONE) {
        for (uint32_t i = 0; i < b->n; i++) {
            move_set(m, b->shard[i], RL_MOVE_GONE);
            m->stats.out_failed++;
        }
        rl_log_warn("handoff: %" PRIu32 " shard(s) bound for %s, which left: given up", b->n,
                    move_peer_name(m, b->peer));
        move_pump(m);
        return;
    }
    snprintf(b->addr, sizeof(b->addr), "%s", m->map->members[mi].addr);
    /* The export instant: from here these shards are decided nowhere until they land. */
    lnow = m->o.now_ms(m->o.now_arg);
    b->t0_ns = rl_clock_mono_ns();
    rl_buf_init(&b->frames);
    for (uint32_t i = 0; i < b->n; i++) {
        rl_buf_init(&b->snap[i]);
        move_set(m, b->shard[i], RL_MOVE_EXPORTING);
        m->stats.out_started++;
        if (rc == 0) {
            rc = rl_handoff_put_header(&b->snap[i], lnow, b->shard[i]);
        }
    }
    if (rc == 0) {
        rc = rl_limiter_export(m->o.limiter, lnow, move_want, move_put_key, m);
    }
    b->nmsgs = 0;
    for (uint32_t i = 0; rc == 0 && i < b->n; i++) {
        rc = rl_handoff_put_end(&b->snap[i], b->keys[i]);
        if (rc == 0) {
            rc = move_frames(b, i);
        }
    }
    if (rc != 0) {
        snprintf(b->why, sizeof(b->why), "export: %s", strerror(-rc));
        b->active = true;
        b->work.data = b;
        move_after_work(&b->work, 0);
        return;
    }
    b->timeout_ms = (int)(m->o.handoff_wait_ms / 2 > 0 ? m->o.handoff_wait_ms / 2 : 1);
    b->secret = m->o.secret;
    b->secret_len = m->o.secret_len;
    b->tls = m->o.tls;
    b->rc = 0;
    b->active = true;
    b->work.data = b;
    (void)now;
    if (uv_queue_work(m->loop, &b->work, move_work, move_after_work) != 0) {
        b->rc = -EAGAIN;
        snprintf(b->why, sizeof(b->why), "cannot queue the send");
        move_after_work(&b->work, 0);
    }
}

/* Drain. */

/* done() runs from a timer of its own, never inside a call of the caller's (a view being
 * applied from ZooKeeper's callback, which done() may destroy). */
static void
move_drain_fire(uv_timer_t *t)
{
    struct rl_move *m = t->data;

    m->drain_done(m->drain_arg);
}

static void
move_check_drain(struct rl_move *m)
{
    if (!m->draining || m->drained || !m->leaving_seen || m->stats.outgoing > 0 || m->b.active) {
        return;
    }
    m->drained = true;
    uv_timer_stop(&m->drain_timer);
    uv_timer_start(&m->drain_timer, move_drain_fire, 0, 0);
    rl_log_info("handoff: clean stop: every shard handed off (%" PRIu64 " shipped, %" PRIu64
                " failed, %" PRIu64 " keys, %" PRIu64 " bytes)",
                m->stats.out_done, m->stats.out_failed, m->stats.keys_out, m->stats.bytes_out);
}

static void
move_drain_timeout(uv_timer_t *t)
{
    struct rl_move *m = t->data;
    uint64_t left = m->stats.outgoing;

    if (m->drained) {
        return;
    }
    m->drained = true;
    if (!m->leaving_seen) {
        left = m->nowned;
    }
    rl_log_warn("handoff: drain_timeout reached with %" PRIu64 " shard(s) not handed off: they "
                "restart from zero at their next owners",
                left);
    m->drain_done(m->drain_arg);
}

void
rl_move_drain(struct rl_move *m, uint32_t deadline_ms, void (*done)(void *arg), void *arg)
{
    if (m->draining) {
        return;
    }
    m->draining = true;
    m->drain_done = done;
    m->drain_arg = arg;
    uv_timer_start(&m->drain_timer, move_drain_timeout, deadline_ms, 0);
    move_tick(m);
    move_check_drain(m);
}

/* Life. */

int
rl_move_create(struct rl_move **out, uv_loop_t *loop, const struct rl_move_opts *opts)
{
    struct rl_move *m;
    size_t bm;

    *out = NULL;
    if (opts->nshards == 0 || opts->self == NULL || opts->epochs == NULL ||
        opts->limiter == NULL || opts->now_ms == NULL) {
        return -EINVAL;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return -ENOMEM;
    }
    m->loop = loop;
    m->o = *opts;
    m->n = opts->nshards;
    snprintf(m->self, sizeof(m->self), "%s", opts->self);
    m->o.self = m->self;
    bm = (m->n + 7) / 8;
    m->st = calloc(m->n, 1);
    m->peer = calloc(m->n, sizeof(*m->peer));
    m->deadline = calloc(m->n, sizeof(*m->deadline));
    m->owned = calloc(bm, 1);
    m->queued = calloc(bm, 1);
    m->q = calloc((size_t)m->n + 1, sizeof(*m->q));
    if (m->st == NULL || m->peer == NULL || m->deadline == NULL || m->owned == NULL ||
        m->queued == NULL || m->q == NULL) {
        move_free(m);
        return -ENOMEM;
    }
    m->self_ix = RL_SHARDMAP_NONE;
    uv_timer_init(loop, &m->tick);
    uv_timer_init(loop, &m->drain_timer);
    m->tick.data = m->drain_timer.data = m;
    m->nopen = 2;
    *out = m;
    return 0;
}

static void
move_free(struct rl_move *m)
{
    rl_shardmap_destroy(m->map);
    free(m->st);
    free(m->peer);
    free(m->deadline);
    free(m->owned);
    free(m->queued);
    free(m->q);
    free(m->peers);
    free(m);
}

static void
move_closed(uv_handle_t *h)
{
    struct rl_move *m = h->data;

    if (--m->nopen == 0 && !m->b.active) {
        move_free(m);
    }
}

void
rl_move_destroy(struct rl_move *m)
{
    if (m == NULL || m->closing) {
        return;
    }
    m->closing = true;
    uv_close((uv_handle_t *)&m->tick, move_closed);
    uv_close((uv_handle_t *)&m->drain_timer, move_closed);
}

const uint8_t *
rl_move_owned(const struct rl_move *m)
{
    return m->owned;
}

uint32_t
rl_move_count_owned(const struct rl_move *m)
{
    return m->nowned;
}

void
rl_move_stats(const struct rl_move *m, struct rl_move_stats *st)
{
    *st = m->stats;
}

void
rl_move_metrics(const struct rl_move *m, struct rl_prom *p)
{
    char lab[64];
    const struct rl_move_stats *s = &m->stats;

    rl_prom_family(p, "rl_node_handoffs_total", "counter",
                   "Shards moved with their counters (docs/OPERATIONS.md, \"Planned moves\"), by "
                   "direction (out: shipped by this node, in: expected here) and result "
                   "(started, done, failed: restarted from zero at the new owner).");
#define MOVE_PROM(dir, res, v)                                                                     \
    rl_prom_u64(p, "rl_node_handoffs_total",                                                       \
                rl_prom_labels(lab, sizeof(lab), "direction", dir, "result", res, NULL), v)
    MOVE_PROM("out", "started", s->out_started);
    MOVE_PROM("out", "done", s->out_done);
    MOVE_PROM("out", "failed", s->out_failed);
    MOVE_PROM("in", "started", s->in_started);
    MOVE_PROM("in", "done", s->in_done);
    MOVE_PROM("in", "failed", s->in_failed);
#undef MOVE_PROM
    rl_prom_family(p, "rl_node_handoff_keys_total", "counter",
                   "Keys handed off, by direction.");
    rl_prom_u64(p, "rl_node_handoff_keys_total",
                rl_prom_labels(lab, sizeof(lab), "direction", "out", NULL), s->keys_out);
    rl_prom_u64(p, "rl_node_handoff_keys_total",
                rl_prom_labels(lab, sizeof(lab), "direction", "in", NULL), s->keys_in);
    rl_prom_family(p, "rl_node_handoff_bytes_total", "counter",
                   "Bytes of handoff records moved, by direction.");
    rl_prom_u64(p, "rl_node_handoff_bytes_total",
                rl_prom_labels(lab, sizeof(lab), "direction", "out", NULL), s->bytes_out);
    rl_prom_u64(p, "rl_node_handoff_bytes_total",
                rl_prom_labels(lab, sizeof(lab), "direction", "in", NULL), s->bytes_in);
    rl_prom_family(p, "rl_node_handoff_freeze_seconds", "histogram",
                   "How long a shard shipped by this node was decided nowhere: from its export "
                   "to the new owner's acknowledgement of its last message.");
    rl_prom_hist(p, "rl_node_handoff_freeze_seconds", NULL, &s->freeze);
    rl_prom_family(p, "rl_node_shards_in_flight", "gauge",
                   "Shards moving now, by direction: in (expected here), out (queued or being "
                   "sent).");
    rl_prom_u64(p, "rl_node_shards_in_flight",
                rl_prom_labels(lab, sizeof(lab), "direction", "in", NULL), s->incoming);
    rl_prom_u64(p, "rl_node_shards_in_flight",
                rl_prom_labels(lab, sizeof(lab), "direction", "out", NULL), s->outgoing);
}
