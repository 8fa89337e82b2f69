/*
 * move: the shard state machine of automatic handoff (move.h). Every view change moves each
 * shard's state (docs/OPERATIONS.md, "Planned moves"); the outgoing ones are queued for
 * move_push.c, which ships them in batches. Also the drain of a clean stop, the receiver's
 * side of HANDOFF_IN and the metrics. Waits are bounded on both sides by [cluster] handoff_wait,
 * counted from the last progress of a move: a receiver that hears nothing for that long starts its
 * expected shards from zero, and a sender gives up on its queued shards well before (half of it),
 * so the two never decide one shard at once. Not for decoding or importing records
 * (server_handoff.c), nor for the bookkeeping under the states (move_state.c).
 */
#include "move_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "shardmap.h"

/* How long a shard received ahead of this node's view waits for the view (RL_MOVE_OWNED_H). */
static uint64_t
move_hold_ms(const struct rl_move *m)
{
    return m->o.handoff_wait_ms / 4 > 0 ? m->o.handoff_wait_ms / 4 : 1;
}

/* Whether `from` (len bytes, not NUL-terminated; NULL: no name) is the name `name`. */
static bool
move_name_is(const char *name, const char *from, size_t len)
{
    return from != NULL && strlen(name) == len && memcmp(name, from, len) == 0;
}

/* Whether name[0..len) (len < RL_SHARDMAP_NAME_MAX) is a member of this node's view. */
static bool
move_member_named(const struct rl_move *m, const char *name, size_t len)
{
    char n[RL_SHARDMAP_NAME_MAX];

    memcpy(n, name, len);
    n[len] = '\0';
    return rl_shardmap_find(m->map, n) != RL_SHARDMAP_NONE;
}

/* An expected shard's wait ended without it: true when it starts from zero here, as this
 * node's view places it here (or there is no view yet); else it is not this node's (its
 * records came ahead of a view that never followed: a node decides only what its view
 * places here or what arrived whole). */
static bool
move_wait_ended(struct rl_move *m, uint32_t s)
{
    if (m->map != NULL &&
        (m->self_ix == RL_SHARDMAP_NONE || rl_shardmap_owner(m->map, s) != m->self_ix)) {
        m->o.epochs[s]++;
        move_set(m, s, RL_MOVE_NONE);
        return false;
    }
    move_fresh(m, s);
    return true;
}

static void
move_outgoing(struct rl_move *m, uint32_t s, uint32_t to, uint64_t now)
{
    m->peer[s] = move_peer_id(m, m->map->members[to].name);
    m->deadline[s] = now + move_half_ms(m);
    move_set(m, s, RL_MOVE_OUTGOING);
    move_enqueue(m, s);
}

/* Shards whose wait ended: the expected ones start fresh, the queued ones are given up,
 * the ones received ahead of the view follow it. */
static void
move_tick_cb(uv_timer_t *t)
{
    struct rl_move *m = t->data;
    uint64_t now = uv_now(m->loop);
    uint64_t fresh = 0, given_up = 0, dropped = 0;

    if (m->stats.incoming == 0 && m->stats.outgoing == 0 && !m->draining) {
        bool any_h = false;

        for (uint32_t s = 0; s < m->n && !any_h; s++) {
            any_h = m->st[s] == RL_MOVE_OWNED_H || m->st[s] == RL_MOVE_GONE;
        }
        if (!any_h) {
            uv_timer_stop(t);
            return;
        }
    }
    move_keep_up(m, now);
    for (uint32_t s = 0; s < m->n; s++) {
        uint8_t st = m->st[s];

        if (st == RL_MOVE_INCOMING) {
            bool gone = m->peer[s] != MOVE_PEER_NONE && !move_peer_member(m, m->peer[s]);
            const struct move_peer *pr = move_peer(m, m->peer[s]);
            uint64_t heard = pr != NULL ? pr->heard : 0;

            if (gone || (now >= m->deadline[s] && now >= m->in_progress + m->o.handoff_wait_ms &&
                         now >= heard + m->o.handoff_wait_ms)) {
                m->stats.in_failed++;
                if (move_wait_ended(m, s)) {
                    fresh++;
                } else {
                    dropped++;
                }
            }
        } else if (st == RL_MOVE_OUTGOING) {
            /* kept while its node hears of it from here: up to three quarters of
             * handoff_wait after the last batch message of records it took began to be sent
             * (told), or the last "still coming" naming it it answered (deadline), so always
             * given up before that node, which waits a whole handoff_wait from the last it
             * heard, starts it from zero */
            const struct move_peer *pr = move_peer(m, m->peer[s]);
            uint64_t told = pr != NULL ? pr->told : 0;

            if (now >= m->deadline[s] && now >= told + move_keep_ms(m)) {
                move_set(m, s, RL_MOVE_GONE);
                m->stats.out_failed++;
                given_up++;
            }
        } else if (st == RL_MOVE_GONE && now >= m->deadline[s] && !m->draining) {
            /* MOVING never outlasts handoff_wait: from now on NOT_OWNER, as for any shard
             * that is not here (a leaving node keeps its hints until it exits) */
            move_set(m, s, RL_MOVE_NONE);
        } else if (st == RL_MOVE_OWNED_H && now >= m->deadline[s] && !m->views_stale &&
                   (m->view_since_back || now >= m->views_back + move_hold_ms(m))) {
            /* (while no view can come, the one applied may lag the sender's, which placed s
             * here: s stays held until views flow again, until the first view read since,
             * or a hold more if none comes) */
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
    if (dropped > 0) {
        rl_log_warn("handoff: %" PRIu64 " shard(s) whose records came ahead of this node's "
                    "view, which never placed them here, did not arrive whole: not decided "
                    "here",
                    dropped);
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
        /* at most an eighth of handoff_wait apart, so that a short one still gives a queued
         * shard up here (move_keep_ms) before its next owner starts it */
        uint64_t every =
            m->o.handoff_wait_ms / 8 < MOVE_TICK_MS ? m->o.handoff_wait_ms / 8 : MOVE_TICK_MS;

        every = every > 0 ? every : 1;
        uv_timer_start(&m->tick, move_tick_cb, every, every);
    }
}

static int
move_nothing_cmp(const void *a, const void *b)
{
    const struct move_nothing *x = a, *y = b;

    if (x->peer != y->peer) {
        return x->peer < y->peer ? -1 : 1;
    }
    return x->shard < y->shard ? -1 : x->shard > y->shard;
}

/*
 * True when member `name`, not joining in the previous view `prev`, is joining in map: a
 * node goes back to joining only as a new process, or after its session expired (when it
 * dropped what it held: node/main.c), so whatever this node expected from it is gone, not
 * coming. (Views follow ZooKeeper's order, so the step is the node's own; only active
 * members are placed shards, so any shard expected from it was expected before the step.)
 * Without this, a node restarted before its previous session expired left the shards
 * expected from it waiting for its "nothing here", lost now and then on a loaded machine:
 * up to two handoff_waits of policy answers.
 */
static bool
move_restarted(const struct rl_shardmap *prev, const struct rl_shardmap *map, const char *name)
{
    uint32_t i = rl_shardmap_find(map, name);
    uint32_t j = prev != NULL ? rl_shardmap_find(prev, name) : RL_SHARDMAP_NONE;

    return i != RL_SHARDMAP_NONE && map->members[i].state == RL_MEMBER_JOINING &&
           j != RL_SHARDMAP_NONE && prev->members[j].state != RL_MEMBER_JOINING;
}

static uint32_t
move_nactive(const struct rl_shardmap *v)
{
    uint32_t n = 0;

    for (size_t i = 0; i < v->nmembers; i++) {
        n += v->members[i].state == RL_MEMBER_ACTIVE;
    }
    return n;
}

/* True when view v (NULL: none yet) places no shard and no node in it is leaving: nobody
 * in it held counters to ship (every member joining: a cluster starting, or every node back
 * from an expired session; a node leaving may still ship what it held). */
static bool
move_none_held(const struct rl_shardmap *v)
{
    if (v == NULL) {
        return false;
    }
    for (size_t i = 0; i < v->nmembers; i++) {
        if (v->members[i].state != RL_MEMBER_JOINING) {
            return false;
        }
    }
    return true;
}

/*
 * True when every node that view v (this node's previous one) shows active registered
 * within handoff_wait of this node, and none leaving: they joined with it (a cluster
 * starting, nodes added together to an empty one), so what any of them holds it counted
 * since then, and no node with older counters can be shipping a shard here. A cluster with
 * an older node (nodes added to a live cluster) is not: that node ships its shards along
 * whatever the views, and a node taking "nothing" from here could refuse them after.
 * Registration times are ZooKeeper's (the member znodes' ctime); not known: not young.
 */
static bool
move_young(const struct rl_move *m, const struct rl_shardmap *v, const struct rl_member *self)
{
    if (v == NULL || self->created_ms <= 0) {
        return false;
    }
    for (size_t i = 0; i < v->nmembers; i++) {
        const struct rl_member *x = &v->members[i];
        int64_t d = x->created_ms - self->created_ms;

        if (x->state == RL_MEMBER_LEAVING ||
            (x->state == RL_MEMBER_ACTIVE &&
             (x->created_ms <= 0 || d > (int64_t)m->o.handoff_wait_ms ||
              -d > (int64_t)m->o.handoff_wait_ms))) {
            return false;
        }
    }
    return true;
}

/*
 * Shards a node may expect from this one though this process holds nothing of them, to be
 * told "nothing here" (move_pump_nothing), added to what is still untold, sorted by peer.
 * Which, among the shards of an owner o (active, not this node) that this node holds nothing
 * of: `restart` false, this node's first view as an active member (they joined together,
 * and o's views took other steps than this node's), when every node active before joined
 * with this one (move_young): those that would be this node's were o not active, or
 * (`all`) all of them when this node's previous view placed no shard and
 * showed no node leaving (move_none_held: then o may have seen this node active while o and
 * any of the others were not, and expect any shard from here, while no node can be shipping
 * one here; telling only the first kind left nodes back together from expired sessions to
 * handoff_wait now and then: `rl-chaos run zk-pause`); and so again, for half a handoff_wait,
 * on each view after such a first one (a node that becomes active a moment later expects
 * from here what its previous view placed here). None of them otherwise: a live node may
 * be shipping a shard here that the view already places on o, and o would take "nothing"
 * for it and refuse it after (when nodes join a live cluster, the shards flow from the nodes
 * that hold them, whatever order the views take). `restart` true, this process's first view showing
 * its own name joining (it was restarted before its previous process's session expired, and
 * o expects from that process the shards it held): those that would be this node's were it
 * active. Rendezvous only (an assignment is not consulted). The receiver takes it only from
 * the node it expects the shard from (move_told: several may say it of one shard).
 */
static void
move_nothing_plan(struct rl_move *m, const struct rl_shardmap *map, uint32_t self, bool restart,
                  bool all)
{
    struct rl_member *c = malloc(map->nmembers * sizeof(*c));
    uint32_t left = m->nnothing - m->nothing_at;

    if (c == NULL || (m->nothing == NULL &&
                      (m->nothing = malloc(2 * (size_t)m->n * sizeof(*m->nothing))) == NULL)) {
        free(c);
        return;
    }
    /* what is still untold stays (a plan adds each shard once; past 2 n, no more) */
    memmove(m->nothing, m->nothing + m->nothing_at, left * sizeof(*m->nothing));
    m->nnothing = left;
    m->nothing_at = 0;
    memcpy(c, map->members, map->nmembers * sizeof(*c));
    for (uint32_t s = 0; s < m->n && m->nnothing < 2 * m->n; s++) {
        uint32_t o = rl_shardmap_owner(map, s), alt, who = restart ? self : o;
        uint8_t keep;

        if (o == RL_SHARDMAP_NONE || o == self || m->st[s] != RL_MOVE_NONE) {
            continue;
        }
        keep = c[who].state;
        c[who].state = restart ? RL_MEMBER_ACTIVE : RL_MEMBER_JOINING;
        alt = rl_shardmap_hrw(s, c, map->nmembers);
        c[who].state = keep;
        if (all || alt == self) {
            m->nothing[m->nnothing].peer = move_peer_id(m, map->members[o].name);
            m->nothing[m->nnothing++].shard = s;
            m->stats.nothing_planned++;
        }
    }
    free(c);
    qsort(m->nothing, m->nnothing, sizeof(*m->nothing), move_nothing_cmp);
}

uint32_t
rl_move_view(struct rl_move *m, struct rl_shardmap *map)
{
    struct rl_shardmap *prev = m->map;
    uint64_t now = uv_now(m->loop);
    uint32_t self = rl_shardmap_find(map, m->self);
    uint32_t pself = prev != NULL ? rl_shardmap_find(prev, m->self) : RL_SHARDMAP_NONE;
    uint32_t changed = 0;

    uint32_t restarted = 0;

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
                    uint16_t p = move_peer_id(m, pn);

                    if (move_restarted(prev, map, pn)) {
                        restarted++; /* its counters went with its previous process */
                        move_fresh(m, s);
                    } else if (move_told(m, s, p, now)) {
                        /* it said already that it holds nothing of s */
                        m->stats.in_started++;
                        m->stats.in_done++;
                        move_fresh(m, s);
                    } else {
                        move_incoming(m, s, p, now);
                    }
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
            if (!mine && bit_get(m->taken, s)) {
                /* Its records come in, and carry this tenure's epoch: a new one (records after
                 * NONE: move_incoming) would judge them absent, so the shard would arrive
                 * partly. Kept expected until whole; else its wait ends as any. If the view
                 * before placed it here, this one moves it on (kept: it is named to its next
                 * owner meanwhile and shipped to it once whole, rl_move_in_end); if not, its
                 * records came ahead of this node's view, which may be behind the sender's or
                 * may have moved the shard on before they came (held once whole, and named to
                 * the view's owner meanwhile: move_keep_to). */
                if (!bit_get(m->kept, s) && pself != RL_SHARDMAP_NONE &&
                    rl_shardmap_owner(prev, s) == pself) {
                    rl_log_debug("handoff: shard %" PRIu32 " placed elsewhere while its "
                                 "records come: kept expected until whole",
                                 s);
                    bit_set(m->kept, s, true);
                }
                break;
            }
            if (!mine) {
                /* moved on elsewhere before it came; its sender may have frozen it in a
                 * batch for here already (its view lags), which a drain waits for; not a
                 * sender seen restarted in this view (its new process holds none of it) */
                if (m->peer[s] != MOVE_PEER_NONE && move_peer_member(m, m->peer[s]) &&
                    !move_restarted(prev, map, move_peer_name(m, m->peer[s]))) {
                    m->let_go = now;
                }
                move_set(m, s, RL_MOVE_NONE);
            } else if (m->peer[s] != MOVE_PEER_NONE &&
                       move_restarted(prev, map, move_peer_name(m, m->peer[s]))) {
                restarted++; /* expected from a process that is gone */
                move_fresh(m, s);
            }
            break;
        case RL_MOVE_OUTGOING:
            if (mine) {
                move_set(m, s, RL_MOVE_OWNED); /* back before it left: still ours */
            } else if (o == RL_SHARDMAP_NONE) {
                move_set(m, s, RL_MOVE_NONE);
            } else {
                uint16_t to = move_peer_id(m, map->members[o].name);

                if (to != m->peer[s]) {
                    /* bound for another node, which expects it from its own view on: a new
                     * wait, as for a shard queued now (move_outgoing) */
                    m->peer[s] = to;
                    m->deadline[s] = now + move_half_ms(m);
                }
            }
            break;
        case RL_MOVE_EXPORTING:
            break; /* its batch decides */
        case RL_MOVE_GONE:
            if (mine) {
                if (move_restarted(prev, map, move_peer_name(m, m->peer[s]))) {
                    restarted++; /* shipped to a process that is gone */
                    move_fresh(m, s);
                } else {
                    move_gone_here(m, s, now);
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
    {
        bool active = self != RL_SHARDMAP_NONE && map->members[self].state == RL_MEMBER_ACTIVE;

        if (active && !m->self_active) {
            bool all = move_none_held(prev);

            m->tell_all_until = all ? now + m->o.handoff_wait_ms / 2 : 0;
            m->told_active = move_nactive(map);
            if (all || move_young(m, prev, &map->members[self])) {
                move_nothing_plan(m, map, self, false, all);
            }
        } else if (active && now < m->tell_all_until && move_nactive(map) > m->told_active) {
            m->told_active = move_nactive(map); /* nodes active since: tell them too */
            move_nothing_plan(m, map, self, false, true);
        } else if (!active && !m->self_active && !m->restart_told && self != RL_SHARDMAP_NONE &&
                   map->members[self].state == RL_MEMBER_JOINING) {
            m->restart_told = true;
            move_nothing_plan(m, map, self, true, false);
        }
        m->self_active = active;
    }
    rl_shardmap_destroy(prev);
    if (restarted > 0) {
        rl_log_info("handoff: %" PRIu32 " shard(s) placed here were held by a node now joining "
                    "again (restarted, or its session expired): they start from zero here",
                    restarted);
    }
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
rl_move_members_read(struct rl_move *m)
{
    m->view_since_back = !m->views_stale;
}

void
rl_move_views_current(struct rl_move *m, bool current)
{
    if (current && m->views_stale) {
        m->views_back = uv_now(m->loop); /* the first view comes a moment from now */
        m->view_since_back = false;
    }
    m->views_stale = !current;
}

void
rl_move_lost(struct rl_move *m)
{
    for (uint32_t s = 0; s < m->n; s++) {
        move_told_clear(m, s); /* what was said was said to the lost tenure */
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
rl_move_in_begin(struct rl_move *m, uint32_t s, size_t bytes, const char *from, size_t flen,
                 bool nothing, char *why, size_t len)
{
    uint64_t now = uv_now(m->loop);
    const char *peer;

    m->in_counts = false;
    if (s >= m->n) {
        snprintf(why, len, "shard %" PRIu32 " is out of range", s);
        return -EINVAL;
    }
    if (bytes == 0 && !nothing) {
        /* "Still coming" (docs/PROTOCOL.md): the sender holds shard s, queued behind a batch
         * for this node. It keeps open the waits of the shards expected from it; and s, if
         * expected here from another node (the views of a node that joined while the sender
         * left may name the owner its shards were bound for before), is expected from the
         * sender from now on, which decides it until it exports it, as records from it would
         * (below). Nothing else changes (before its view, it is no record ahead of it). */
        if (from != NULL && flen > 0 && flen < RL_SHARDMAP_NAME_MAX && m->map != NULL &&
            move_member_named(m, from, flen)) {
            char name[RL_SHARDMAP_NAME_MAX];
            uint16_t id;
            struct move_peer *pr;

            memcpy(name, from, flen);
            name[flen] = '\0';
            id = move_peer_id(m, name);
            pr = move_peer(m, id);
            if (pr != NULL) {
                pr->heard = now;
                if (m->st[s] == RL_MOVE_INCOMING && m->peer[s] != id) {
                    rl_log_debug("handoff: shard %" PRIu32 " expected from %s is held by %s", s,
                                 move_peer_name(m, m->peer[s]), name);
                    m->peer[s] = id;
                }
            }
        }
        return 1;
    }
    switch (m->st[s]) {
    case RL_MOVE_INCOMING:
        peer = move_peer_name(m, m->peer[s]);
        if (nothing && (peer[0] == '\0' || !move_name_is(peer, from, flen))) {
            /* Only the node it is expected from may say it holds nothing of it: not anyone
             * while the sender is unknown (records came ahead of the view: more may follow). */
            snprintf(why, len, "shard %" PRIu32 " is expected from %s, not from %.*s", s,
                     peer[0] != '\0' ? peer : "the node whose records came",
                     (int)(from == NULL ? 0 : flen < 64 ? flen : 64), from == NULL ? "" : from);
            return 1;
        }
        if (from != NULL && peer[0] != '\0' && !move_name_is(peer, from, flen)) {
            char name[64];

            if (flen == 0 || flen >= sizeof(name)) {
                snprintf(why, len, "shard %" PRIu32 " is expected from %s, not from %.*s", s,
                         peer, (int)(flen < 64 ? flen : 64), from);
                return -EBUSY;
            }
            /* Records from another node than the one expected: the sender decided the shard
             * until it froze it for this export (a node exports only what it decides), so it
             * is the shard's holder; the expected one, whose views placed it differently
             * (nodes that joined together: its first view as an active member already placed
             * the shard here), never held it. Taken from the sender from now on. */
            memcpy(name, from, flen);
            name[flen] = '\0';
            rl_log_debug("handoff: shard %" PRIu32 " expected from %s comes from %s", s, peer,
                         name);
            m->peer[s] = move_peer_id(m, name);
        }
        break;
    case RL_MOVE_NONE:
    case RL_MOVE_GONE:
        if (nothing && m->st[s] == RL_MOVE_NONE && from != NULL && flen > 0 && flen < 64) {
            /* ahead of this node's view: kept for the view that will expect s from there,
             * if the sender is a member of this one (else not kept: the wait is then
             * handoff_wait, and no name a client makes up takes memory) */
            char name[64];

            memcpy(name, from, flen);
            name[flen] = '\0';
            if (m->map != NULL && rl_shardmap_find(m->map, name) != RL_SHARDMAP_NONE) {
                move_told_set(m, s, move_peer_id(m, name), now);
            }
            return 0;
        }
        if (nothing) {
            return 1; /* not expected here: nothing to do */
        }
        /* this node's view lags the sender's: take it, and keep it when the view comes */
        move_incoming(m, s, MOVE_PEER_NONE, now);
        move_tick(m);
        break;
    case RL_MOVE_EXPORTING:
        if (!nothing && bytes > 0 && m->b.active && !uv_is_active((uv_handle_t *)&m->scan) &&
            move_name_is(move_peer_name(m, m->b.peer), from, flen)) {
            /* Records of s from the node its batch is bound for: that node decides s, so it
             * took the batch's last message of s, and it ships it back (a rebalance written
             * again). Expected from it: before, refused while the rest of the batch was out,
             * then neither node held it until the next view (every node answered
             * NOT_OWNER). Whether or not this node's view places s back here yet: one that
             * lags the sender's comes within milliseconds, and until then s is held as any
             * shard received ahead of the view (rl_move_in_end); before, it was refused
             * and started from zero here after handoff_wait. Not during the batch's export
             * pass, which takes only EXPORTING shards' records. */
            move_incoming(m, s, m->b.peer, now);
            break;
        }
        /* fall through */
    default:
        if (nothing) {
            return 1; /* "nothing here" about a shard this node has its own word on */
        }
        snprintf(why, len,
                 "shard %" PRIu32 " is %s here: an automatic handoff is refused (never merged "
                 "into counters in use)",
                 s, st_decides(m->st[s]) ? "decided" : "moving away");
        return -EBUSY;
    }
    /* Progress of a move, which keeps every wait open: a member of this node's view sent
     * it (the holder of a shard may not be the node it is expected from); a name that is
     * no member's, or none, moves no wait (a stream of them from anyone kept every wait,
     * and the routers' requests for those shards, open without end). */
    m->in_counts = from != NULL && flen > 0 && flen < RL_SHARDMAP_NAME_MAX && m->map != NULL &&
                   move_member_named(m, from, flen);
    if (bytes > 0 && m->st[s] == RL_MOVE_INCOMING) {
        bit_set(m->taken, s, true); /* its records are imported with this tenure's epoch */
    }
    if (m->in_counts) {
        m->in_progress = now;
    }
    m->stats.bytes_in += bytes;
    return 0;
}

void
rl_move_in_end(struct rl_move *m, uint32_t s, uint64_t keys, bool final)
{
    uint64_t now = uv_now(m->loop);
    uint32_t o;

    m->stats.keys_in += keys;
    if (m->in_counts) {
        m->in_progress = now; /* the import took this long */
    }
    if (!final || s >= m->n || m->st[s] != RL_MOVE_INCOMING) {
        return;
    }
    m->stats.in_done++;
    if (m->stats.incoming == 1) {
        rl_log_debug("handoff: the last expected shard arrived (%" PRIu64
                     " received whole, %" PRIu64 " started from zero, since start)",
                     m->stats.in_done, m->stats.in_failed);
    }
    o = m->map != NULL ? rl_shardmap_owner(m->map, s) : RL_SHARDMAP_NONE;
    if (o != RL_SHARDMAP_NONE && o == m->self_ix) {
        move_set(m, s, RL_MOVE_OWNED);
    } else if (bit_get(m->kept, s) && o != RL_SHARDMAP_NONE && !m->views_stale) {
        /* kept while a view, newer than the one that expected it here, placed it on o:
         * shipped on at once (o has waited for it since that view; it is told "still
         * coming" meanwhile, move_keep_up) */
        move_set(m, s, RL_MOVE_OWNED);
        move_outgoing(m, s, o, now);
        move_tick(m); /* which sends it (move_pump) */
    } else {
        /* This node's view does not place s here: either it lags the sender's (and the
         * view that does comes within milliseconds), or it is ahead of it (nodes that joined
         * together: the view already places s on a third node, which expects it from here
         * and waits at most handoff_wait). Hold it a quarter of handoff_wait, then follow
         * the view: well within the third node's wait. */
        m->deadline[s] = now + move_hold_ms(m);
        move_set(m, s, RL_MOVE_OWNED_H);
        move_tick(m);
    }
    rl_log_debug("handoff: shard %" PRIu32 " received whole: decided here", s);
}

/* Drain. */


static void
move_drain_timeout(uv_timer_t *t)
{
    struct rl_move *m = t->data;
    /* queued or in a batch, and those held or received here for another node */
    uint64_t left = m->stats.outgoing + move_records_held(m);

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
    if (opts->nshards == 0 || opts->self == NULL || opts->epochs == NULL || opts->limiter == NULL ||
        opts->now_ms == NULL) {
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
    m->told = calloc(bm, 1);
    m->taken = calloc(bm, 1);
    m->kept = calloc(bm, 1);
    m->q = calloc((size_t)m->n + 1, sizeof(*m->q));
    if (m->st == NULL || m->peer == NULL || m->deadline == NULL || m->owned == NULL ||
        m->queued == NULL || m->told == NULL || m->taken == NULL || m->kept == NULL ||
        m->q == NULL) {
        move_free(m);
        return -ENOMEM;
    }
    m->self_ix = RL_SHARDMAP_NONE;
    uv_timer_init(loop, &m->tick);
    uv_timer_init(loop, &m->drain_timer);
    uv_idle_init(loop, &m->scan);
    m->tick.data = m->drain_timer.data = m->scan.data = m;
    m->nopen = 3;
    *out = m;
    return 0;
}


static void
move_closed(uv_handle_t *h)
{
    struct rl_move *m = h->data;

    if (--m->nopen == 0 && move_idle(m)) {
        move_free(m);
    }
}

void
rl_move_destroy(struct rl_move *m)
{
    if (m == NULL || m->closing) {
        return;
    }
    /* A batch's export pass ends now: its shards are decided nowhere already, so they are
     * sent as a batch out at this moment would be; closing first, so that no batch follows
     * it (move_pump) once it has ended, even on an error. */
    m->closing = true;
    __atomic_store_n(&m->keep_stop, 1, __ATOMIC_RELAXED); /* "still coming" not begun: none */
    move_scan_finish(m);
    uv_close((uv_handle_t *)&m->tick, move_closed);
    uv_close((uv_handle_t *)&m->drain_timer, move_closed);
    uv_close((uv_handle_t *)&m->scan, move_closed);
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
    rl_prom_family(p, "rl_node_handoff_keys_total", "counter", "Keys handed off, by direction.");
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
    rl_prom_family(p, "rl_node_handoff_answer_seconds", "histogram",
                   "How long the nodes this node shipped shards to took to acknowledge each "
                   "message of a move (a batch's, \"still coming\"), from when it began to be "
                   "sent. A queued shard is given up three quarters of handoff_wait after the "
                   "last message that kept it (records to its node, or a \"still coming\" "
                   "naming it) began to be sent: answers near half of handoff_wait call for a "
                   "longer one.");
    rl_prom_hist(p, "rl_node_handoff_answer_seconds", NULL, &s->answer);
    rl_prom_family(p, "rl_node_shards_in_flight", "gauge",
                   "Shards moving now, by direction: in (expected here), out (queued or being "
                   "sent).");
    rl_prom_u64(p, "rl_node_shards_in_flight",
                rl_prom_labels(lab, sizeof(lab), "direction", "in", NULL), s->incoming);
    rl_prom_u64(p, "rl_node_shards_in_flight",
                rl_prom_labels(lab, sizeof(lab), "direction", "out", NULL), s->outgoing);
}
