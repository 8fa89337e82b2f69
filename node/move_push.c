/*
 * move_push: the node-to-node push of automatic handoff (move.h, move_int.h). Queued shards
 * leave in batches bound for one node: exported in one pass over the key table on the loop,
 * a slice of MOVE_SCAN_SLOTS per turn (decided nowhere from the pass's start), their
 * HANDOFF_IN messages (the last of each shard `final`, every one naming this node in `from`)
 * sent on one connection from the thread pool, with the cluster secret and TLS as
 * configured, and the shards released once acknowledged. Also the "nothing here" batches of a node's first active view. Not for the
 * shard states themselves (move.c).
 */
#include "move_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "handoff.h"
#include "limiter.h"
#include "log.h"
#include "reqclient.h"
#include "wire.h"

/* The batch: export on the loop, send in the pool, finish on the loop. */

static bool
move_want(void *arg, uint64_t fp_hi, uint32_t fp_lo, uint32_t shard, uint16_t epoch)
{
    struct rl_move *m = arg;
    struct move_batch *b = &m->b;

    (void)fp_hi;
    (void)fp_lo;
    /* A batch's shards stay EXPORTING until it ends (a view change leaves them to it; records
     * of one from the batch's node, taken back, end it early, never during the pass). Their
     * epochs are the export instant's: the pass takes several turns, and a lost session
     * meanwhile moves every epoch on (main.c), which must not cut a shard's records short. */
    if (shard >= m->n || m->st[shard] != RL_MOVE_EXPORTING) {
        return false;
    }
    for (uint32_t i = 0; i < b->n; i++) {
        if (b->shard[i] == shard) {
            b->cur = i;
            return epoch == b->epoch[i];
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

/* The length of the record or frame at p: its 4-byte length prefix and what follows. */
static size_t
move_frame_len(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;

    return 4 + ((size_t)u[0] << 24 | (size_t)u[1] << 16 | (size_t)u[2] << 8 | u[3]);
}

/* Splits a shard's records into HANDOFF_IN messages of whole records, the last final. */
static int
move_frames(struct move_batch *b, uint32_t i, const char *from)
{
    const struct rl_buf *snap = &b->snap[i];
    size_t start = 0, end;
    int rc = 0;

    do {
        end = start;
        while (end + 4 <= snap->len) {
            size_t len = move_frame_len(snap->data + end);

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
                                          end - start, end >= snap->len, from);
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

/* Connects to addr with TLS and the cluster secret as configured, within timeout_ms; why
 * (len bytes) says what failed when it is more than an errno. */
static int
move_dial(struct rl_client **c, const char *addr, struct rl_tls_ctx *tls, const char *secret,
          size_t secret_len, struct rl_wire_reply *rep, int timeout_ms, char *why, size_t len)
{
    uint64_t end = rl_clock_mono_ns() + (uint64_t)timeout_ms * 1000000;
    int rc = rl_client_connect_addr(c, addr, move_left(end));

    if (rc == 0 && tls != NULL) {
        rc = rl_client_start_tls(*c, tls, move_left(end), why, len);
    }
    if (rc == 0 && secret != NULL) {
        rc = rl_client_auth(*c, secret, secret_len, rep, move_left(end));
        if (rc == -EACCES) {
            snprintf(why, len, "refused the cluster secret (AUTH)");
        }
    }
    return rc;
}

/* The thread pool: connect, TLS, AUTH, then the messages, at most MOVE_WINDOW ahead of
 * their acknowledgements, each step within timeout_ms: a receiver that keeps acknowledging
 * keeps the send going however large the batch, one that stops ends it. Each message's
 * acknowledgement gives the moment its writing began (acked_ns): the receiver heard from here
 * then or later, whatever the acknowledgement's own delay. */
static void
move_work(uv_work_t *w)
{
    struct move_batch *b = w->data;
    struct rl_client *c = NULL;
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    uint32_t acked = 0, queued = 0, flushed = 0;
    uint64_t sent_ns[MOVE_WINDOW]; /* message i's: sent_ns[i % MOVE_WINDOW] */
    size_t off = 0;
    int rc;

    b->why[0] = '\0';
    if (rep == NULL) {
        b->rc = -ENOMEM;
        return;
    }
    rc = move_dial(&c, b->addr, b->tls, b->secret, b->secret_len, rep, b->timeout_ms, b->why,
                   sizeof(b->why));
    while (rc == 0 && acked < b->nmsgs) {
        while (rc == 0 && queued < b->nmsgs && queued - acked < MOVE_WINDOW) {
            size_t len = move_frame_len(b->frames.data + off);

            rc = rl_client_queue_raw(c, b->frames.data + off, len);
            off += len;
            queued++;
        }
        if (rc == 0) {
            uint64_t t = rl_clock_mono_ns();

            for (; flushed < queued; flushed++) {
                sent_ns[flushed % MOVE_WINDOW] = t;
            }
            rc = rl_client_flush(c, b->timeout_ms);
        }
        if (rc == 0) {
            rc = rl_client_recv(c, rep, b->timeout_ms);
        }
        if (rc != 0) {
            break;
        }
        if (rep->op == RL_WIRE_OP_HANDOFF_IN && !b->nothing) {
            /* records taken: they kept every wait there open (a refusal or a "nothing
             * here" keeps none) */
            __atomic_store_n(&b->acked_ns, sent_ns[acked % MOVE_WINDOW], __ATOMIC_RELAXED);
        }
        rl_hist_observe(&b->answer, rl_clock_mono_ns() - sent_ns[acked % MOVE_WINDOW], 1);
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

/* The loop's ms of a monotonic time (ns) of the past (0 before the loop's start). */
static uint64_t
move_loop_ms(const struct rl_move *m, uint64_t mono_ns)
{
    uint64_t now = uv_now(m->loop), mono = rl_clock_mono_ns();
    uint64_t ago = mono > mono_ns ? (mono - mono_ns) / 1000000 : 0;

    return ago <= now ? now - ago : 0;
}

/* pr's `told` from a monotonic time (ns), if later. */
static void
move_told_at(struct rl_move *m, struct move_peer *pr, uint64_t mono_ns)
{
    uint64_t at = move_loop_ms(m, mono_ns);

    if (at > pr->told) {
        pr->told = at;
    }
}

/* The batch's node's `told`: when the last of the batch's messages of records it took began
 * to be written (it heard of the batch then or later, and every wait there was kept open). */
static void
move_batch_told(struct rl_move *m)
{
    uint64_t acked = __atomic_load_n(&m->b.acked_ns, __ATOMIC_RELAXED);
    struct move_peer *pr = move_peer(m, m->b.peer);

    if (pr != NULL && acked != 0) {
        move_told_at(m, pr, acked);
    }
}

static void
move_after_work(uv_work_t *w, int status)
{
    struct move_batch *b = w->data;
    struct rl_move *m = (struct rl_move *)(void *)((char *)b - offsetof(struct rl_move, b));
    uint32_t failed = 0;
    uint64_t failed_keys = 0;

    (void)status;
    move_batch_told(m); /* its last acknowledgements keep the shards queued for its node */
    rl_hist_add(&m->stats.answer, &b->answer);
    if (b->nothing) {
        uint32_t told = 0;

        for (uint32_t i = 0; i < b->n; i++) {
            told += b->ok[i];
        }
        rl_log_debug("handoff: told %s it holds none of %" PRIu32 " shard(s) from here (%" PRIu32
                     " expected them)",
                     move_peer_name(m, b->peer), b->n, told);
        b->n = 0;
    }
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
            failed_keys += b->keys[i];
        }
        if (m->st[s] == RL_MOVE_EXPORTING) {
            move_set(m, s, RL_MOVE_GONE);
            if (move_placed_here(m, s)) {
                /* a view placed it back here while it was out (a rebalance written again):
                 * as for a view that does so once it is gone. Before, it stayed gone, and no
                 * node held it until the next view. */
                move_gone_here(m, s, uv_now(m->loop));
            }
        }
        rl_buf_deinit(&b->snap[i]);
    }
    if (failed > 0) {
        /* with their keys: a shard of none loses nothing (a cluster's first moves) */
        rl_log_warn("handoff: %" PRIu32 " of %" PRIu32 " shard(s) (%" PRIu64 " keys) not handed "
                    "to %s (%s): it starts them from zero",
                    failed, b->n, failed_keys, move_peer_name(m, b->peer), b->why);
    }
    rl_buf_deinit(&b->frames);
    b->active = false;
    if (m->closing) {
        if (m->nopen == 0 && move_idle(m)) {
            move_free(m);
        }
        return;
    }
    move_pump(m);
    move_check_drain(m);
}

static void move_send(struct rl_move *m);
static void move_exported(struct rl_move *m, int rc);
static void move_scan_turn(uv_idle_t *h);
static void move_scan(struct rl_move *m, size_t budget);

/* A batch of "nothing here" messages: up to MOVE_BATCH_MAX shards of one node's. */
static void
move_pump_nothing(struct rl_move *m)
{
    struct move_batch *b = &m->b;
    uint32_t mi;
    int rc = 0;

    while (m->nothing_at < m->nnothing && b->n < MOVE_BATCH_MAX) {
        const struct move_nothing *x = &m->nothing[m->nothing_at];

        if (b->n > 0 && x->peer != b->peer) {
            break;
        }
        m->nothing_at++;
        if (m->st[x->shard] != RL_MOVE_NONE) {
            continue; /* it became this node's business since */
        }
        b->peer = x->peer;
        b->shard[b->n++] = x->shard;
    }
    if (b->n == 0) {
        return;
    }
    mi = m->map != NULL ? rl_shardmap_find(m->map, move_peer_name(m, b->peer)) : RL_SHARDMAP_NONE;
    if (mi == RL_SHARDMAP_NONE) {
        b->n = 0;
        move_pump(m);
        return;
    }
    snprintf(b->addr, sizeof(b->addr), "%s", m->map->members[mi].addr);
    b->nothing = true;
    b->nmsgs = 0;
    rl_buf_init(&b->frames);
    for (uint32_t i = 0; rc == 0 && i < b->n; i++) {
        rl_buf_init(&b->snap[i]);
        b->nmsgs++;
        b->last_id[i] = b->nmsgs;
        rc = rl_wire_put_handoff_in_final(&b->frames, b->nmsgs, b->shard[i], NULL, 0, true,
                                          m->self);
    }
    if (rc != 0) {
        b->active = true;
        b->work.data = b;
        move_after_work(&b->work, 0);
        return;
    }
    b->t0_ns = rl_clock_mono_ns();
    move_send(m);
}

/* The next batch: up to MOVE_BATCH_SHARDS queued shards bound for the first one's node. */
void
move_pump(struct rl_move *m)
{
    struct move_batch *b = &m->b;
    uint32_t scanned = 0, qn;
    uint32_t mi;
    uint64_t lnow;
    int rc = 0;

    if (b->active || m->closing) {
        return;
    }
    memset(b->keys, 0, sizeof(b->keys));
    memset(b->ok, 0, sizeof(b->ok));
    __atomic_store_n(&b->acked_ns, 0, __ATOMIC_RELAXED); /* none of this batch's yet */
    memset(&b->answer, 0, sizeof(b->answer));
    b->n = 0;
    b->peer = MOVE_PEER_NONE;
    b->nothing = false;
    if (m->qhead == m->qtail) {
        move_pump_nothing(m);
        return;
    }
    qn = (m->qtail + m->n + 1 - m->qhead) % (m->n + 1);
    /* one pass over the queue: shards of other nodes go back to its end */
    while (scanned < qn && b->n < MOVE_BATCH_SHARDS) {
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
    b->lnow = lnow;
    b->t0_ns = rl_clock_mono_ns();
    rl_buf_init(&b->frames);
    for (uint32_t i = 0; i < b->n; i++) {
        rl_buf_init(&b->snap[i]);
        move_set(m, b->shard[i], RL_MOVE_EXPORTING);
        b->epoch[i] = m->o.epochs[b->shard[i]];
        m->stats.out_started++;
        if (rc == 0) {
            rc = rl_handoff_put_header(&b->snap[i], lnow, b->shard[i]);
        }
    }
    b->active = true;
    if (rc == 0) {
        rc = rl_limiter_export_begin(m->o.limiter, lnow, move_want, move_put_key, m);
    }
    if (rc != 0) {
        move_exported(m, rc);
        return;
    }
    /* The pass, a slice per turn of the loop: what the other shards' requests wait for is a
     * slice's time, not the whole table's. */
    if (uv_idle_start(&m->scan, move_scan_turn) != 0) {
        move_scan(m, SIZE_MAX);
    }
}

/* The end of a batch's export pass (rc: 0, or what stopped it): its messages, then the send. */
static void
move_exported(struct rl_move *m, int rc)
{
    struct move_batch *b = &m->b;

    b->nmsgs = 0;
    for (uint32_t i = 0; rc == 0 && i < b->n; i++) {
        rc = rl_handoff_put_end(&b->snap[i], b->keys[i]);
        if (rc == 0) {
            rc = move_frames(b, i, m->self);
        }
    }
    if (rc != 0) {
        snprintf(b->why, sizeof(b->why), "export: %s", strerror(-rc));
        b->work.data = b;
        move_after_work(&b->work, 0);
        return;
    }
    move_send(m);
}

/* The export pass's next `budget` slots (SIZE_MAX: the rest); once it has ended, its
 * messages and the send. */
static void
move_scan(struct rl_move *m, size_t budget)
{
    int rc = rl_limiter_export_step(m->o.limiter, budget);

    if (rc == 0) {
        return;
    }
    uv_idle_stop(&m->scan);
    move_exported(m, rc < 0 ? rc : 0);
}

/* A turn's slice of the export pass. */
static void
move_scan_turn(uv_idle_t *h)
{
    struct rl_move *m = h->data;

    m->stats.export_turns++;
    move_scan(m, MOVE_SCAN_SLOTS);
}

void
move_scan_finish(struct rl_move *m)
{
    if (uv_is_active((uv_handle_t *)&m->scan)) {
        move_scan(m, SIZE_MAX);
    }
}

/* The batch's messages, sent from the thread pool. */
static void
move_send(struct rl_move *m)
{
    struct move_batch *b = &m->b;

    /* The batch's own shards are frozen here: waiting longer for a slow receiver costs no
     * decision, and it waits a whole handoff_wait from the last message too. A batch of
     * "nothing here" carries no counters: half of it. */
    b->timeout_ms = (int)(b->nothing ? move_half_ms(m) : m->o.handoff_wait_ms);
    b->secret = m->o.secret;
    b->secret_len = m->o.secret_len;
    b->tls = m->o.tls;
    b->rc = 0;
    b->active = true;
    b->work.data = b;
    if (uv_queue_work(m->loop, &b->work, move_work, move_after_work) != 0) {
        b->rc = -EAGAIN;
        snprintf(b->why, sizeof(b->why), "cannot queue the send");
        move_after_work(&b->work, 0);
    }
}

/* ---- "still coming": the nodes waiting for shards queued behind a batch ---------------- */

/* The thread pool: an empty, non-final HANDOFF_IN naming this node for each shard of the
 * round, on one connection, dialled, sent and all answered within the timeout. */
static void
move_keep_work(uv_work_t *w)
{
    struct move_keep *k = w->data;
    struct rl_move *m = k->m;
    uint64_t end = rl_clock_mono_ns() + (uint64_t)k->timeout_ms * 1000000;
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;
    struct rl_buf out;
    char why[128];
    int rc;

    if (__atomic_load_n(&m->keep_stop, __ATOMIC_RELAXED)) {
        return;
    }
    rc = move_dial(&c, k->addr, m->o.tls, m->o.secret, m->o.secret_len, &rep, k->timeout_ms, why,
                   sizeof(why));
    rl_buf_init(&out);
    for (uint32_t i = 0; rc == 0 && i < k->n; i++) {
        rc = rl_wire_put_handoff_in_final(&out, i + 1, k->shard[i], NULL, 0, false,
                                          k->via_batch[i] ? k->via : m->self);
    }
    if (rc == 0) {
        rc = rl_client_queue_raw(c, out.data, out.len);
    }
    k->sent = rl_clock_mono_ns();
    if (rc == 0) {
        rc = rl_client_flush(c, move_left(end));
    }
    for (uint32_t i = 0; rc == 0 && i < k->n; i++) {
        rc = rl_client_recv(c, &rep, move_left(end));
        if (rc == 0 && rep.op != RL_WIRE_OP_HANDOFF_IN) {
            rc = -EPROTO;
        }
    }
    k->ok = rc == 0 && k->n > 0;
    k->answered = rl_clock_mono_ns();
    rl_buf_deinit(&out);
    rl_client_destroy(c);
}

static void
move_keep_after(uv_work_t *w, int status)
{
    struct move_keep *k = w->data;
    struct rl_move *m = k->m;
    struct move_peer *pr = move_peer(m, k->peer);

    (void)status;
    if (pr != NULL) {
        pr->keeping = false;
    }
    if (k->ok) {
        /* each shard named is kept move_keep_ms from the moment the round was sent: its node
         * expects it from here since (a round keeps no other shard: the node may expect
         * those from another) */
        uint64_t at = move_loop_ms(m, k->sent), until = at != 0 ? at + move_keep_ms(m) : 0;

        for (uint32_t i = 0; i < k->n; i++) {
            uint32_t s = k->shard[i];

            if (m->st[s] == RL_MOVE_OUTGOING && m->peer[s] == k->peer && m->deadline[s] < until) {
                m->deadline[s] = until;
            }
        }
        rl_hist_observe(&m->stats.answer, k->answered - k->sent, k->n);
    }
    rl_log_debug("handoff: %s %s that %" PRIu32 " of its shards are still coming",
                 k->ok ? "told" : "could not tell", move_peer_name(m, k->peer), k->n);
    free(k);
    m->keeps--;
    if (m->closing && m->nopen == 0 && move_idle(m)) {
        move_free(m);
    }
}

/* Begins a round of "still coming" to node p, unless one is out to it or it was told less
 * than move_keep_every_ms ago: pr->keep, to be filled with the shards to name. Returns whether
 * one was begun. */
static bool
move_keep_begin(struct rl_move *m, uint16_t p, uint64_t now)
{
    struct move_peer *pr = move_peer(m, p);
    uint32_t mi;
    struct move_keep *k;

    if (pr == NULL || pr->keep != NULL || pr->keeping || now < pr->kept + move_keep_every_ms(m)) {
        return false;
    }
    mi = rl_shardmap_find(m->map, pr->name);
    if (mi == RL_SHARDMAP_NONE || (k = calloc(1, sizeof(*k))) == NULL) {
        return false;
    }
    k->m = m;
    snprintf(k->addr, sizeof(k->addr), "%s", m->map->members[mi].addr);
    k->peer = p;
    k->timeout_ms = (int)move_half_ms(m);
    k->work.data = k;
    pr->keep = k;
    pr->keep_seen = 0;
    pr->keep_at = 0;
    return true;
}

/* Sends node p's round, if it names a shard; the next round starts its naming where this one
 * stopped (a node expecting more than MOVE_KEEP_SHARDS from here). */
static void
move_keep_send(struct rl_move *m, uint16_t p, uint64_t now)
{
    struct move_peer *pr = move_peer(m, p);
    struct move_keep *k = pr->keep;

    pr->keep = NULL;
    pr->keep_skip =
        pr->keep_seen > MOVE_KEEP_SHARDS ? (pr->keep_skip + MOVE_KEEP_SHARDS) % pr->keep_seen : 0;
    if (k->n == 0 || uv_queue_work(m->loop, &k->work, move_keep_work, move_keep_after) != 0) {
        free(k);
        return;
    }
    pr->keeping = true;
    pr->kept = now;
    m->keeps++;
}

/* The node a round may name shard s to, or MOVE_PEER_NONE: a queued shard's next owner (not
 * the batch's own node while its records flow: they keep its waits open); a shard of the
 * batch that this node's view now places on a third node, that node; a shard whose
 * records have begun to arrive here while this node's view places it on another node (kept
 * expected until whole, move.c), that node, which may expect it from here and hears nothing
 * of it until it is shipped on (this node's view may be ahead of the sender's: it moved the
 * shard on before its first records came; if it is behind, the node named is one the
 * sender's view moved it from, which only hears of it). */
static uint16_t
move_keep_to(struct rl_move *m, uint32_t s)
{
    const struct move_batch *b = &m->b;

    if (m->st[s] == RL_MOVE_OUTGOING) {
        /* the batch's own node too while nothing of it keeps waits there: its export pass, or
         * a batch of "nothing here" */
        return !b->active || m->peer[s] != b->peer || b->nothing ||
                       uv_is_active((uv_handle_t *)&m->scan)
                   ? m->peer[s]
                   : MOVE_PEER_NONE;
    }
    if (m->st[s] == RL_MOVE_EXPORTING && b->active && !b->nothing && m->map != NULL) {
        /* in the batch, frozen for its node, while this node's view places it on a third
         * one, which expects it from here or from the batch's node and hears of it from
         * neither until the batch's node has its first records (a batch of large shards
         * ahead of it: longer than handoff_wait). Named as coming from the batch's node
         * (struct move_keep's via): this node holds it no more, and the third node is to
         * expect it from there (not to take this node's "nothing here", its restart or its
         * leaving for the shard's) */
        uint32_t o = rl_shardmap_owner(m->map, s);
        uint16_t p = o != RL_SHARDMAP_NONE && o != m->self_ix
                         ? move_peer_id(m, m->map->members[o].name)
                         : MOVE_PEER_NONE;

        return p != b->peer ? p : MOVE_PEER_NONE;
    }
    if (m->st[s] == RL_MOVE_INCOMING && bit_get(m->taken, s) && m->map != NULL) {
        uint32_t o = rl_shardmap_owner(m->map, s);

        if (o != RL_SHARDMAP_NONE && o != m->self_ix) {
            return move_peer_id(m, m->map->members[o].name);
        }
    }
    return MOVE_PEER_NONE;
}

/* One shard of a pass of move_keep_up: the first pass begins the rounds due (due, ndue) and
 * counts each node's shards to name; the second names them from where the last round
 * stopped, up to MOVE_KEEP_SHARDS. */
static void
move_keep_visit(struct rl_move *m, uint32_t s, bool naming, uint16_t *due, uint32_t *ndue,
                uint64_t now)
{
    uint16_t to = move_keep_to(m, s);
    struct move_peer *pr;

    if (to == MOVE_PEER_NONE || (pr = move_peer(m, to)) == NULL) {
        return;
    }
    if (!naming) {
        if (pr->keep == NULL && *ndue < MOVE_KEEP_MAX + 1 && move_keep_begin(m, to, now)) {
            due[(*ndue)++] = to;
        }
        pr->keep_seen += pr->keep != NULL;
        return;
    }
    if (pr->keep != NULL &&
        (pr->keep_at++ + pr->keep_seen - pr->keep_skip % pr->keep_seen) % pr->keep_seen <
            MOVE_KEEP_SHARDS &&
        pr->keep->n < MOVE_KEEP_SHARDS) {
        struct move_keep *k = pr->keep;

        /* a shard of the batch comes from the batch's node (move_keep_to) */
        k->via_batch[k->n] = m->st[s] == RL_MOVE_EXPORTING;
        if (k->via_batch[k->n]) {
            snprintf(k->via, sizeof(k->via), "%s", move_peer_name(m, m->b.peer));
        }
        k->shard[k->n++] = s;
    }
}

void
move_keep_up(struct rl_move *m, uint64_t now)
{
    struct move_batch *b = &m->b;
    uint16_t due[MOVE_KEEP_MAX + 1];
    uint32_t ndue = 0;
    /* shards expected here: those whose records have begun to arrive while the view places
     * them elsewhere are named to that node (move_keep_to), batch or no batch */
    bool incoming = m->stats.incoming > 0;

    if ((!b->active && !incoming) || m->closing || m->map == NULL) {
        return;
    }
    if (b->active) {
        move_batch_told(m);
    }
    /* while its export pass runs, the batch's own node hears nothing of it either */
    if (b->active && uv_is_active((uv_handle_t *)&m->scan) && move_keep_begin(m, b->peer, now)) {
        struct move_keep *k = move_peer(m, b->peer)->keep;

        for (uint32_t i = 0; i < b->n && k->n < MOVE_KEEP_SHARDS; i++) {
            k->shard[k->n++] = b->shard[i];
        }
        due[ndue++] = b->peer;
    }
    /* the nodes due a round, and how many shards each is to be named; then the naming */
    for (int naming = 0; naming < 2 && (naming == 0 || ndue > 0); naming++) {
        for (uint32_t i = m->qhead; i != m->qtail; i = (i + 1) % (m->n + 1)) {
            move_keep_visit(m, m->q[i], naming, due, &ndue, now);
        }
        for (uint32_t i = 0; b->active && !b->nothing && i < b->n; i++) {
            if (m->st[b->shard[i]] == RL_MOVE_EXPORTING) { /* (not one taken back: below) */
                move_keep_visit(m, b->shard[i], naming, due, &ndue, now);
            }
        }
        for (uint32_t s = 0; incoming && s < m->n; s++) {
            if (m->st[s] == RL_MOVE_INCOMING) {
                move_keep_visit(m, s, naming, due, &ndue, now);
            }
        }
    }
    for (uint32_t i = 0; i < ndue; i++) {
        move_keep_send(m, due[i], now);
    }
}
