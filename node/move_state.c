/*
 * move_state: the bookkeeping under automatic handoff's state machine (move_int.h): every
 * shard's state change with the gauges and bitmaps that follow it, the peer names a shard's
 * move refers to, the queue of shards to ship, the end of a drain and the release of the
 * whole. Called by move.c (the views and the receiver's side) and move_push.c (the batches),
 * and calls neither: the layer both stand on. Not for deciding a state (move.c) or for
 * shipping (move_push.c).
 */
#include "move_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "shardmap.h"

/* Every state change goes through here: the bitmap and the gauges follow. */
void
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
    move_told_clear(m, s);
    bit_set(m->taken, s, false);
    bit_set(m->kept, s, false);
    bit_set(m->owned, s, st_decides(to));
    if (to == RL_MOVE_GONE) {
        /* the redirect a router with a view from before the move needs; a router resends on
         * MOVING for handoff_wait at most, so the hint is kept that long (move_tick_cb) */
        m->deadline[s] = uv_now(m->loop) + m->o.handoff_wait_ms;
    }
}

void
move_incoming(struct rl_move *m, uint32_t s, uint16_t peer, uint64_t now)
{
    m->o.epochs[s]++;
    m->peer[s] = peer;
    m->deadline[s] = now + m->o.handoff_wait_ms;
    m->stats.in_started++;
    move_set(m, s, RL_MOVE_INCOMING);
}

void
move_fresh(struct rl_move *m, uint32_t s)
{
    m->o.epochs[s]++;
    move_set(m, s, RL_MOVE_OWNED);
}

void
move_gone_here(struct rl_move *m, uint32_t s, uint64_t now)
{
    uint32_t i =
        m->map != NULL ? rl_shardmap_find(m->map, move_peer_name(m, m->peer[s])) : RL_SHARDMAP_NONE;

    /* a node joining holds nothing: it was active when the shard was shipped to it (only
     * owners are shipped to), so it has restarted since */
    if (i != RL_SHARDMAP_NONE && m->map->members[i].state != RL_MEMBER_JOINING) {
        move_incoming(m, s, m->peer[s], now); /* it comes back from there */
    } else {
        move_fresh(m, s);
    }
}

void
move_told_clear(struct rl_move *m, uint32_t s)
{
    if (!bit_get(m->told, s)) {
        return;
    }
    bit_set(m->told, s, false);
    for (size_t i = 0; i < m->told_cap; i++) {
        if (m->told_by[i] != NULL) {
            bit_set(m->told_by[i], s, false);
        }
    }
}

bool
move_told(const struct rl_move *m, uint32_t s, uint16_t peer, uint64_t now)
{
    return bit_get(m->told, s) && peer < m->told_cap && m->told_by[peer] != NULL &&
           bit_get(m->told_by[peer], s) && now < m->deadline[s];
}

bool
move_told_set(struct rl_move *m, uint32_t s, uint16_t peer, uint64_t now)
{
    if (peer == MOVE_PEER_NONE) {
        return false;
    }
    if (peer >= m->told_cap) {
        size_t cap = (size_t)peer + 1 > 2 * m->told_cap ? (size_t)peer + 1 : 2 * m->told_cap;
        uint8_t **p = realloc(m->told_by, cap * sizeof(*p));

        if (p == NULL) {
            return false;
        }
        memset(p + m->told_cap, 0, (cap - m->told_cap) * sizeof(*p));
        m->told_by = p;
        m->told_cap = cap;
    }
    if (m->told_by[peer] == NULL && (m->told_by[peer] = calloc((m->n + 7) / 8, 1)) == NULL) {
        return false;
    }
    if (bit_get(m->told, s) && now >= m->deadline[s]) {
        move_told_clear(m, s); /* what the others said has expired: it does not come back */
    }
    m->deadline[s] = now + m->o.handoff_wait_ms; /* (one deadline: the latest word's) */
    bit_set(m->told, s, true);
    bit_set(m->told_by[peer], s, true);
    return true;
}

uint16_t
move_peer_id(struct rl_move *m, const char *name)
{
    for (size_t i = 0; i < m->npeers; i++) {
        if (strcmp(m->peers[i].name, name) == 0) {
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
    memset(&m->peers[m->npeers], 0, sizeof(m->peers[0]));
    snprintf(m->peers[m->npeers].name, sizeof(m->peers[0].name), "%s", name);
    return (uint16_t)m->npeers++;
}

const char *
move_peer_name(const struct rl_move *m, uint16_t id)
{
    return id == MOVE_PEER_NONE || id >= m->npeers ? "" : m->peers[id].name;
}

/* Whether the member named by peer id is in the current view (any state). */
bool
move_peer_member(const struct rl_move *m, uint16_t id)
{
    return id != MOVE_PEER_NONE && m->map != NULL &&
           rl_shardmap_find(m->map, move_peer_name(m, id)) != RL_SHARDMAP_NONE;
}

void
move_enqueue(struct rl_move *m, uint32_t s)
{
    if (bit_get(m->queued, s)) {
        return;
    }
    bit_set(m->queued, s, true);
    m->q[m->qtail] = s;
    m->qtail = (m->qtail + 1) % (m->n + 1);
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

uint32_t
move_records_held(const struct rl_move *m)
{
    uint32_t held = 0;

    for (uint32_t s = 0; s < m->n; s++) {
        held +=
            m->st[s] == RL_MOVE_OWNED_H || (m->st[s] == RL_MOVE_INCOMING && bit_get(m->taken, s));
    }
    return held;
}

void
move_check_drain(struct rl_move *m)
{
    if (!m->draining || m->drained || !m->leaving_seen || m->stats.outgoing > 0 || m->b.active) {
        return;
    }
    /* nor while it holds or receives a shard of which it has records (its wait bounds it) */
    if (move_records_held(m) > 0) {
        return;
    }
    /* nor within handoff_wait of the last records or "still coming" from a member, or of a
     * view letting go of shards expected from one before their records came: a batch bound
     * here goes on after this node's view let its shards go (it leaves; the sender may not
     * have said a word yet), and its records, taken as records ahead of the view, are
     * shipped on to the shards' owners. Before, a node drained while another one's drain was
     * shipping to it stopped at once; the rest of that batch was refused, and those shards
     * started from zero. */
    {
        uint64_t last = m->in_progress > m->let_go ? m->in_progress : m->let_go;

        for (uint16_t i = 0; i < m->npeers; i++) {
            if (m->peers[i].heard > last && move_peer_member(m, i)) {
                last = m->peers[i].heard;
            }
        }
        if (last != 0 && uv_now(m->loop) < last + m->o.handoff_wait_ms) {
            return;
        }
    }
    m->drained = true;
    uv_timer_stop(&m->drain_timer);
    uv_timer_start(&m->drain_timer, move_drain_fire, 0, 0);
    rl_log_info("handoff: clean stop: every shard handed off (%" PRIu64 " shipped, %" PRIu64
                " failed, %" PRIu64 " keys, %" PRIu64 " bytes)",
                m->stats.out_done, m->stats.out_failed, m->stats.keys_out, m->stats.bytes_out);
}

void
move_free(struct rl_move *m)
{
    rl_shardmap_destroy(m->map);
    free(m->st);
    free(m->peer);
    free(m->deadline);
    free(m->owned);
    free(m->queued);
    free(m->told);
    free(m->taken);
    free(m->kept);
    for (size_t i = 0; i < m->told_cap; i++) {
        free(m->told_by[i]);
    }
    free(m->told_by);
    free(m->q);
    free(m->peers);
    free(m->nothing);
    free(m);
}
