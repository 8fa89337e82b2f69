/*
 * verdict_moves: reads the membership timeline of a run (ZooKeeper's views as the observer
 * saw them, and the scenario's steps) into each shard's owner changes, and says of each
 * whether the old owner handed the shard's counters off (planned), could not (lost), or
 * may have (either: a node back from an expired session). Not for judging what the clients
 * saw against them (verdict.c).
 */
#include "verdict_int.h"

#include <stdbool.h>

/* The view in force at t (the last one not after it), or -1. */
int
ch_view_at(const struct ch_run *r, int64_t t)
{
    int k = -1;

    for (int i = 0; i < r->nviews && r->views[i].t_ms <= t; i++) {
        k = i;
    }
    return k;
}

/*
 * Whether node's latest stop before t (its steps on the scenario's clock, since its latest
 * start) was a clean one (`term`, `drain`): it handed its shards off before it left, so a
 * change at t from it is planned even when the observer never saw it `leaving` (a quick
 * drain: the state and the member znode gone between two reads). A `kill` after the clean
 * stop cuts the move: planned only with planned_moves = either.
 */
static bool
stopped_cleanly(const struct ch_run *r, int node, int64_t t)
{
    const struct ch_scenario *sc = r->sc;
    int64_t clean = -1, killed = -1;

    for (int i = 0; i < sc->nsteps; i++) {
        const struct ch_step *st = &sc->steps[i];
        int64_t at = r->t0_ms + st->at_ms;

        if (st->target != CH_NODE || st->index != node || at > t) {
            continue;
        }
        if (st->action == CH_RESTART || st->action == CH_ADD) {
            clean = killed = -1; /* a new process: what happened before is its predecessor's */
        } else if (st->action == CH_TERM || st->action == CH_DRAIN) {
            clean = at;
        } else if (st->action == CH_KILL && clean >= 0) {
            killed = at;
        }
    }
    return clean >= 0 && (killed < 0 || sc->planned == CH_PLANNED_EITHER);
}

/*
 * Whether node was started by the run by t (an `add` step, or a `restart`): a node that
 * starts joins (`joining` first, placed only once it read its view) and takes its shards from
 * their live owners with their counters, even when the observer did not see it joining. A
 * node back from an expired session with no step (a partition healed) is not: it takes its
 * shards back as after any loss.
 */
static bool
joined_cleanly(const struct ch_run *r, int node, int64_t t)
{
    const struct ch_scenario *sc = r->sc;

    for (int i = 0; i < sc->nsteps; i++) {
        const struct ch_step *st = &sc->steps[i];

        if (st->target == CH_NODE && st->index == node && r->t0_ms + st->at_ms <= t &&
            (st->action == CH_ADD || st->action == CH_RESTART)) {
            return true;
        }
    }
    return false;
}

/*
 * Whether node, owner from view k on, is back from an expired session of its own: it was a
 * member earlier in the run under another registration and no step restarted it (a pause or
 * a partition from ZooKeeper ended). Such a node joins again (docs/OPERATIONS.md, "A node
 * restarted before its previous process's session expired") and its shards come back to it
 * from their owners meanwhile with their counts, unless that handoff fails (then from zero):
 * either may be seen.
 */
static bool
rejoined(const struct ch_run *r, int node, int k)
{
    for (int i = 0; i < k; i++) {
        if ((r->views[i].members >> node & 1) != 0 &&
            r->views[i].since[node] != r->views[k].since[node]) {
            return !joined_cleanly(r, node, r->views[k].t_ms);
        }
    }
    return false;
}

/* Whether node was cut off by a fault of the run's (a partition, an isolation, a pause) at
 * some time in [from, to]. */
static bool
cut_off(const struct ch_run *r, int node, int64_t from, int64_t to)
{
    for (int i = 0; i < r->nimpairs; i++) {
        const struct ch_impair *m = &r->impairs[i];

        if (m->cut && m->node == node && m->from_ms <= to && m->to_ms >= from) {
            return true;
        }
    }
    return false;
}

/* Times at which shard's owner changed to a node, or its owner was restarted: either way
 * the owner from then on starts from zero (CH_MOVE_LOST); except a planned move
 * (CH_MOVE_PLANNED; CH_MOVE_MAYBE when the new owner rejoined, above): the old
 * owner was still a member of the view that gave the shard to another (a clean stop's
 * `leaving`, a node joining, an assignment), or left after a clean stop (stopped_cleanly),
 * so it handed the shard's counters off, to a new owner that was a member already (joining
 * or active) or came in by the run's plan (joined_cleanly): not one back from a loss. */
int
ch_changes_of(const struct ch_run *r, uint32_t shard, int64_t *at, uint8_t *planned, int max)
{
    int n = 0;

    for (int i = 0; i < r->nrestarts && n < max; i++) {
        int k = ch_view_at(r, r->restart_ms[i]);

        if (k >= 0 && r->views[k].owner[shard] == r->restart_node[i]) {
            planned[n] = CH_MOVE_LOST;
            at[n++] = r->restart_ms[i];
        }
    }
    for (int k = 1; k < r->nviews && n < max; k++) {
        uint8_t was = r->views[k - 1].owner[shard], now = r->views[k].owner[shard];

        /* the cluster forming before traffic started is no change; an owner that registered
         * again (a new znode under the same name) is a new tenure, as a new owner is */
        if (now != CH_NONE && r->views[k].t_ms >= r->t0_ms &&
            (now != was || r->views[k].since[now] != r->views[k - 1].since[now])) {
            /* the old owner handed it off (still a member, or left after a clean stop);
             * the new one was there before (joining, or active) or came by the plan */
            bool handed = now != was && was != CH_NONE &&
                          (((r->views[k].members >> was & 1) != 0 &&
                            r->views[k].since[was] == r->views[k - 1].since[was]) ||
                           ((r->views[k].members >> was & 1) == 0 &&
                            stopped_cleanly(r, was, r->views[k].t_ms)));

            planned[n] = !handed ? CH_MOVE_LOST
                         : (((r->views[k - 1].members >> now & 1) != 0 &&
                             r->views[k].since[now] == r->views[k - 1].since[now]) ||
                            joined_cleanly(r, now, r->views[k].t_ms))
                             ? CH_MOVE_PLANNED
                         : rejoined(r, now, k) ? CH_MOVE_MAYBE
                                               : CH_MOVE_LOST;
            /* an old owner cut off (from ZooKeeper, from the new owner) when the table changed
             * may not hand the shard off within handoff_wait: the new owner then starts it
             * from zero. (A handoff takes milliseconds: a cut that came later is no excuse.) */
            if (planned[n] == CH_MOVE_PLANNED &&
                cut_off(r, was, r->views[k].t_ms, r->views[k].t_ms + CUT_MARGIN_MS)) {
                planned[n] = CH_MOVE_MAYBE;
            }
            at[n++] = r->views[k].t_ms;
        }
    }
    return n;
}

