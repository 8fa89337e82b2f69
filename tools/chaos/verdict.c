/*
 * verdict: judges a finished run from what the clients saw (every request and its answer),
 * the membership timeline read from ZooKeeper, the faults as injected and the routers'
 * tables as sampled; prints the invariants, the figures and the verdict, and writes them as
 * JSON. docs/CHAOS.md states each invariant and why its margins are what they are.
 */
#include "chaos.h"
#include "verdict_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "shardmap.h"
#include "wire.h"

/* A router applies a membership change within this long of ZooKeeper (a watch, a rebuild). */
#define LAG_MS 1000
/* A window of a user who had an answer that was no decision (policy, lost, error) in it or
 * this long before it is judged by the upper bound only: the node may have counted those. */
#define LOOKBACK_MS 10000
/* Requests sent this long before ZooKeeper's change was seen by the observer may already
 * have reached the new owner (other watchers may hear of it first). */
#define FRESH_SLACK_MS 250
/* Requests of one user through different routers may reach the node in another order than
 * they were sent in, by this much. */
#define REORDER_MS 100

#define EXAMPLES 5

enum inv { INV_LIVENESS, INV_EXACT, INV_LOSS, INV_FRESH, INV_POLICY, INV_CONVERGE, INV_DEATHS,
           INV_EXPECT, INV_COUNT };

static const char *const inv_names[INV_COUNT] = {
    "liveness", "exactness", "bounded-loss", "fresh-start", "policy", "convergence",
    "no-deaths", "expect"};

struct inv_result {
    uint64_t checked;
    uint64_t violations;
    char examples[EXAMPLES][512];
    int nexamples;
};

struct judge {
    struct ch_run *r;
    const struct ch_scenario *sc;
    struct inv_result inv[INV_COUNT];
    /* every request, flattened */
    struct ch_req **reqs;
    size_t nreqs;
    /* figures */
    uint64_t sent, answered, by_code[8], unsent, lost_excused;
    uint64_t policy, extra_allowed, allowed_by_policy;
    int64_t worst_latency_us;
    uint64_t late;
    uint64_t held; /* answered past deadline + margin, within handoff_wait more, by a move */
    int64_t move_ms[CH_IMPAIRS_MAX];
    int nmoves;
    int64_t converge_max_ms;
    int64_t stale_ms;
    int64_t view_changes;
};

static void
violate(struct judge *j, enum inv which, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void
violate(struct judge *j, enum inv which, const char *fmt, ...)
{
    struct inv_result *v = &j->inv[which];
    va_list ap;

    v->violations++;
    if (v->nexamples < EXAMPLES) {
        va_start(ap, fmt);
        vsnprintf(v->examples[v->nexamples++], sizeof(v->examples[0]), fmt, ap);
        va_end(ap);
    }
}

/* Seconds since traffic started, for messages. */
static double
rel(const struct judge *j, int64_t t_ms)
{
    return (double)(t_ms - j->r->t0_ms) / 1000.0;
}

/* The events within [from, to], appended to buf as "; at T: text". */
static void
events_around(const struct judge *j, int64_t from, int64_t to, char *buf, size_t len)
{
    const struct ch_run *r = j->r;
    size_t used = strlen(buf);
    int shown = 0;

    for (int i = 0; i < r->nevents && shown < 4; i++) {
        if (r->events[i].t_ms >= from && r->events[i].t_ms <= to && used + 8 < len) {
            int n = snprintf(buf + used, len - used, "%s%.3fs %s", shown == 0 ? " | events: " : "; ",
                             rel(j, r->events[i].t_ms), r->events[i].text);

            used += n > 0 ? (size_t)n : 0;
            used = used < len ? used : len - 1;
            shown++;
        }
    }
}

/* Whether the observer had no session of its own at t (or up to LAG_MS before): what the
 * routers saw then, it may not have. */
static bool
blind_at(const struct ch_run *r, int64_t t)
{
    for (int i = 0; i < r->nblind; i++) {
        if (t >= r->blind_from[i] &&
            (r->blind_to[i] == INT64_MAX || t <= r->blind_to[i] + LAG_MS)) {
            return true;
        }
    }
    return false;
}

/* Whether a fault on node (one that cut it off, if cut) overlapped the life of a request
 * sent at t (until its deadline and margin), the fault counted until the cluster has had
 * time to converge after it. */
static bool
impaired_by(const struct judge *j, int node, int64_t t, bool cut)
{
    const struct ch_run *r = j->r;
    int64_t t_end = t + j->sc->deadline_ms + j->sc->margin_ms;

    for (int i = 0; i < r->nimpairs; i++) {
        const struct ch_impair *m = &r->impairs[i];
        int64_t to = m->to_ms == INT64_MAX ? INT64_MAX : m->to_ms + j->sc->converge_ms;

        if ((m->node == node || (m->node < 0 && !cut)) && (m->cut || !cut) && t_end >= m->from_ms &&
            t <= to) {
            return true;
        }
    }
    return false;
}

static bool
impaired(const struct judge *j, int node, int64_t t)
{
    return impaired_by(j, node, t, false);
}

static bool
router_down_near(const struct ch_run *r, int router, int64_t from, int64_t to)
{
    for (int k = 0; k < r->nrouter_down[router] && k < 16; k++) {
        if (r->router_down_from[router][k] <= to + 1000 &&
            (r->router_down_to[router][k] == INT64_MAX ||
             r->router_down_to[router][k] + 1000 >= from)) {
            return true;
        }
    }
    return false;
}

/* ---- liveness -------------------------------------------------------------------------- */

/* Whether the request's shard changed owner while it was out (from handoff_wait before it was
 * sent, to when it was answered): the new owner answers MOVING until the old owner's counters
 * arrive, and the router sends it again until then, for at most handoff_wait past its first
 * send (docs/OPERATIONS.md, "Planned moves"). While the observer had no session (blind_at) it
 * saw no view the routers may have: any node may have held the shard for a moment. */
static bool
held_by_move(const struct judge *j, const struct ch_req *q, int64_t lat_us)
{
    int64_t at[CH_VIEWS_MAX];
    uint8_t planned[CH_VIEWS_MAX];
    int n = ch_changes_of(j->r, q->shard, at, planned, CH_VIEWS_MAX);

    for (int64_t t = q->t_send_ms - HANDOFF_WAIT_MS; t <= q->t_send_ms + lat_us / 1000; t += 100) {
        if (blind_at(j->r, t)) {
            return true;
        }
    }
    for (int i = 0; i < n; i++) {
        if (planned[i] != CH_MOVE_LOST && at[i] - LAG_MS <= q->t_send_ms + lat_us / 1000 &&
            at[i] + HANDOFF_WAIT_MS + LAG_MS >= q->t_send_ms) {
            return true;
        }
    }
    return false;
}

static void
judge_liveness(struct judge *j)
{
    const int64_t bound_us = (j->sc->deadline_ms + j->sc->margin_ms) * 1000;
    const int64_t moved_bound_us = bound_us + HANDOFF_WAIT_MS * 1000;

    for (size_t i = 0; i < j->nreqs; i++) {
        const struct ch_req *q = j->reqs[i];
        int64_t lat = q->t_done_us - q->t_send_us;

        j->inv[INV_LIVENESS].checked++;
        j->sent++;
        if (q->code == CH_CODE_PENDING || q->code == CH_CODE_LOST) {
            int64_t done_ms = q->t_send_ms + (q->code == CH_CODE_LOST ? lat / 1000 : 0);

            if (router_down_near(j->r, q->router, q->t_send_ms, done_ms)) {
                j->lost_excused++;
                continue;
            }
            violate(j, INV_LIVENESS, "request of u%u at %.3fs through router %d %s", q->user,
                    rel(j, q->t_send_ms), q->router + 1,
                    q->code == CH_CODE_LOST ? "lost: the router closed the connection"
                                            : "never answered");
            continue;
        }
        j->answered++;
        j->by_code[q->code < 6 ? q->code : 6]++;
        if (lat > j->worst_latency_us) {
            j->worst_latency_us = lat;
        }
        if (q->code == CH_CODE_ERROR) {
            violate(j, INV_LIVENESS, "request of u%u at %.3fs answered ERROR %s, not a decision",
                    q->user, rel(j, q->t_send_ms), rl_wire_err_name(q->err));
        } else if (lat > bound_us && lat <= moved_bound_us && held_by_move(j, q, lat)) {
            j->held++;
        } else if (lat > bound_us) {
            char buf[512];

            j->late++;
            snprintf(buf, sizeof(buf), "request of u%u at %.3fs through router %d answered %s after "
                     "%.1f ms (deadline %lld + margin %lld)",
                     q->user, rel(j, q->t_send_ms), q->router + 1, rl_wire_code_name(q->code),
                     (double)lat / 1000.0, (long long)j->sc->deadline_ms,
                     (long long)j->sc->margin_ms);
            events_around(j, q->t_send_ms - 2000, q->t_send_ms + 500, buf, sizeof(buf));
            violate(j, INV_LIVENESS, "%s", buf);
        }
    }
}

/* ---- windows: exactness, bounded loss, fresh start ------------------------------------- */

static int64_t
window_of(const struct ch_req *q, uint64_t w)
{
    if ((q->code == RL_WIRE_ALLOWED || q->code == RL_WIRE_LIMITED) && q->reset_ms > 0) {
        int64_t mid = q->t_send_ms + (q->t_done_us - q->t_send_us) / 2000 + q->reset_ms;

        return (mid + (int64_t)w / 2) / (int64_t)w - 1;
    }
    return q->t_send_ms / (int64_t)w;
}

struct wref {
    uint64_t key; /* service << 56 | user << 24 ... sorted by (service, user) then window, t */
    int64_t window;
    const struct ch_req *q;
};

static int
cmp_wref(const void *a, const void *b)
{
    const struct wref *x = a, *y = b;

    if (x->key != y->key) {
        return x->key < y->key ? -1 : 1;
    }
    if (x->q->t_send_us != y->q->t_send_us) {
        return x->q->t_send_us < y->q->t_send_us ? -1 : 1;
    }
    return 0;
}

static int
cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* The index of the first of the sorted t[0..n) that is >= v (n when none is). */
static size_t
lower_bound(const int64_t *t, size_t n, int64_t v)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t m = lo + (hi - lo) / 2;

        if (t[m] < v) {
            lo = m + 1;
        } else {
            hi = m;
        }
    }
    return lo;
}

/* How many of the sorted t[0..n) lie in [lo, hi). */
static size_t
count_in(const int64_t *t, size_t n, int64_t lo, int64_t hi)
{
    size_t a = lower_bound(t, n, lo), b = lower_bound(t, n, hi);

    return b > a ? b - a : 0;
}

static bool
is_decision(const struct ch_req *q)
{
    return q->code == RL_WIRE_ALLOWED || q->code == RL_WIRE_LIMITED;
}

/*
 * Requests of one user (all[from..to), one shard) that the new owner of a change at t_c may
 * still count although they were sent before the change: answered by policy or lost, sent
 * in the LOOKBACK_MS before it while the timeline had that same node as the owner, and no
 * restart of it since. A node that survived a partition receives them late: the routers'
 * kernels retransmit the bytes when the network heals, long after the routers answered
 * them by policy (found across network namespaces; the loopback proxies drop such bytes).
 */
static int64_t
late_in_flight(const struct ch_run *r, const struct wref *all, size_t from, size_t to,
               uint32_t shard, int64_t t_c)
{
    int k = ch_view_at(r, t_c), owner;
    int64_t n = 0;

    if (k < 0 || (owner = r->views[k].owner[shard]) == CH_NONE) {
        return 0;
    }
    for (size_t i = from; i < to; i++) {
        const struct ch_req *q = all[i].q;
        int v;
        bool restarted = false;

        if (is_decision(q) || q->code == CH_CODE_ERROR || q->t_send_ms >= t_c ||
            q->t_send_ms < t_c - LOOKBACK_MS) {
            continue;
        }
        v = ch_view_at(r, q->t_send_ms);
        if (v < 0 || r->views[v].owner[shard] != owner) {
            continue;
        }
        for (int x = 0; x < r->nrestarts; x++) {
            restarted |= r->restart_node[x] == owner && r->restart_ms[x] > q->t_send_ms &&
                         r->restart_ms[x] <= t_c;
        }
        n += !restarted;
    }
    return n;
}

static void
judge_user(struct judge *j, const struct wref *all, size_t from, size_t to)
{
    const struct ch_service *svc = &j->sc->services[all[from].q->service];
    const int64_t w = (int64_t)svc->window_ms, L = (int64_t)svc->limit_n;
    const uint32_t shard = all[from].q->shard;
    int64_t changes[CH_VIEWS_MAX];
    uint8_t planned[CH_VIEWS_MAX];
    int nchanges = ch_changes_of(j->r, shard, changes, planned, CH_VIEWS_MAX);
    /* the send times of the user's answers that were no decision, policy apart, sorted:
     * each window counts those near it by two binary searches, not a pass over them all */
    int64_t *nd_policy = malloc((to - from) * sizeof(*nd_policy));
    int64_t *nd_other = malloc((to - from) * sizeof(*nd_other));
    size_t npolicy = 0, nother = 0;

    if (nd_policy == NULL || nd_other == NULL) {
        free(nd_policy);
        free(nd_other);
        return;
    }
    for (size_t i = from; i < to; i++) {
        const struct ch_req *q = all[i].q;

        if (q->code == RL_WIRE_FAIL_OPEN || q->code == RL_WIRE_FAIL_CLOSED) {
            nd_policy[npolicy++] = q->t_send_ms;
        } else if (!is_decision(q)) {
            nd_other[nother++] = q->t_send_ms;
        }
    }
    qsort(nd_policy, npolicy, sizeof(*nd_policy), cmp_i64);
    qsort(nd_other, nother, sizeof(*nd_other), cmp_i64);

    for (size_t a = from; a < to;) {
        int64_t k = all[a].window, ws = k * w, we = ws + w, allowed = 0, limited = 0, policy = 0,
                other = 0, c = 0;
        size_t b = a;
        char buf[512];

        while (b < to && all[b].window == k) {
            const struct ch_req *q = all[b].q;

            allowed += q->code == RL_WIRE_ALLOWED;
            limited += q->code == RL_WIRE_LIMITED;
            b++;
        }
        /* answers that were no decision, in the window or shortly before it */
        policy = (int64_t)count_in(nd_policy, npolicy, ws - LOOKBACK_MS, we);
        other = (int64_t)count_in(nd_other, nother, ws - LOOKBACK_MS, we);
        for (int i = 0; i < nchanges; i++) {
            /* a planned move hands the counters off: no change at all (keep), or maybe one
             * (either: a move interrupted may have started the shard afresh, as late as
             * handoff_wait after the table changed, while its old owner, cut off, still
             * decided what the new one sent back to it) */
            int64_t reach = planned[i] ? HANDOFF_WAIT_MS : 0;

            c += changes[i] - FRESH_SLACK_MS < we && changes[i] + reach + LAG_MS >= ws &&
                 (planned[i] != CH_MOVE_PLANNED || j->sc->planned == CH_PLANNED_EITHER);
        }
        /* While the observer had no session it saw nothing the routers may have: any node
         * may have held the shard for a moment, each from zero. */
        for (int i = 0; i < j->r->nblind; i++) {
            int64_t blind_end =
                j->r->blind_to[i] == INT64_MAX ? INT64_MAX : j->r->blind_to[i] + LAG_MS;

            if (j->r->blind_from[i] < we && blind_end >= ws && j->r->blind_from[i] >= j->r->t0_ms) {
                c += j->sc->nodes;
            }
        }
        if (allowed > L) {
            j->extra_allowed += (uint64_t)(allowed - L);
        }
        snprintf(buf, sizeof(buf), "%s u%u window [%.3fs, %.3fs): allowed %lld, limited %lld, "
                 "policy %lld, lost/error %lld, limit %lld, owner changes %lld",
                 svc->name, all[a].q->user, rel(j, ws), rel(j, we), (long long)allowed,
                 (long long)limited, (long long)policy, (long long)other, (long long)L,
                 (long long)c);
        if (c == 0) {
            j->inv[INV_EXACT].checked++;
            if (allowed > L) {
                events_around(j, ws - 2000, we, buf, sizeof(buf));
                violate(j, INV_EXACT, "allowed past the limit: %s", buf);
            } else if (limited > 0 && allowed < L && policy == 0 && other == 0) {
                events_around(j, ws - 2000, we, buf, sizeof(buf));
                violate(j, INV_EXACT, "refused below the limit: %s", buf);
            }
        } else {
            j->inv[INV_LOSS].checked++;
            if (allowed > L * (1 + c)) {
                events_around(j, ws - 2000, we, buf, sizeof(buf));
                violate(j, INV_LOSS, "allowed past L x (1 + changes): %s", buf);
            }
        }
        /* A new owner starts from full allowance: after a change, the first allowance it
         * grants counts no more requests than were sent since the change. */
        for (int i = 0; i < nchanges; i++) {
            int64_t t_c = changes[i];
            int64_t sent_since = 0;

            /* a change seen late by a blind observer has no known time; a planned move's
             * new owner continues the counts (or, interrupted, may start afresh) */
            if (t_c + LAG_MS < ws || t_c + LAG_MS >= we || blind_at(j->r, t_c) || planned[i]) {
                continue;
            }
            sent_since = late_in_flight(j->r, all, from, to, shard, t_c);
            for (size_t x = a; x < b; x++) {
                const struct ch_req *q = all[x].q;

                if (q->t_send_ms >= t_c + LAG_MS && q->code == RL_WIRE_ALLOWED) {
                    int64_t counted = L - (int64_t)q->remaining;

                    /* what may have reached the new owner before this one: sent since the
                     * change, up to a little after it (another router may have been quicker) */
                    for (size_t y = a; y < b; y++) {
                        sent_since += all[y].q->t_send_ms >= t_c - FRESH_SLACK_MS &&
                                      all[y].q->t_send_ms <= q->t_send_ms + REORDER_MS;
                    }

                    j->inv[INV_FRESH].checked++;
                    if (counted > sent_since) {
                        char msg[512];

                        snprintf(msg, sizeof(msg),
                                 "%s u%u (shard %u): after its owner changed at %.3fs the new "
                                 "owner had counted %lld by %.3fs, but only %lld requests were "
                                 "sent since the change (window [%.3fs, %.3fs))",
                                 svc->name, q->user, shard, rel(j, t_c), (long long)counted,
                                 rel(j, q->t_send_ms), (long long)sent_since, rel(j, ws),
                                 rel(j, we));
                        events_around(j, t_c - 3000, q->t_send_ms, msg, sizeof(msg));
                        violate(j, INV_FRESH, "inherited count: %s", msg);
                    }
                    break;
                }
            }
        }
        a = b;
    }
    free(nd_policy);
    free(nd_other);
}

static void
judge_windows(struct judge *j)
{
    struct wref *all = malloc((j->nreqs + 1) * sizeof(*all));
    size_t n = 0;

    if (all == NULL) {
        return;
    }
    for (size_t i = 0; i < j->nreqs; i++) {
        const struct ch_req *q = j->reqs[i];
        const struct ch_service *svc = &j->sc->services[q->service];

        if (!svc->windowed || q->code == CH_CODE_PENDING) {
            continue;
        }
        all[n].window = window_of(q, svc->window_ms);
        /* (service, user, window) order; windows are small offsets from the run's start */
        all[n].key = (uint64_t)q->service << 56 | (uint64_t)q->user << 24 |
                     ((uint64_t)(all[n].window - j->r->t0_ms / (int64_t)svc->window_ms + 1024) &
                      0xffffff);
        all[n].q = q;
        n++;
    }
    qsort(all, n, sizeof(*all), cmp_wref);
    for (size_t a = 0; a < n;) {
        size_t b = a;

        while (b < n && all[b].q->service == all[a].q->service && all[b].q->user == all[a].q->user) {
            b++;
        }
        judge_user(j, all, a, b);
        a = b;
    }
    free(all);
}

/* ---- policy ---------------------------------------------------------------------------- */

static void
judge_policy(struct judge *j)
{
    const struct ch_run *r = j->r;

    for (size_t i = 0; i < j->nreqs; i++) {
        const struct ch_req *q = j->reqs[i];
        const struct ch_service *svc = &j->sc->services[q->service];
        int64_t from = q->t_send_ms - j->sc->deadline_ms - j->sc->margin_ms - LAG_MS;
        int k0, k1;
        bool justified = false;
        char buf[512];

        if (q->code != RL_WIRE_FAIL_OPEN && q->code != RL_WIRE_FAIL_CLOSED) {
            continue;
        }
        j->policy++;
        j->allowed_by_policy += q->code == RL_WIRE_FAIL_OPEN;
        j->inv[INV_POLICY].checked++;
        if ((q->code == RL_WIRE_FAIL_CLOSED) != svc->fail_closed) {
            violate(j, INV_POLICY, "%s u%u at %.3fs answered %s, but the service fails %s",
                    svc->name, q->user, rel(j, q->t_send_ms), rl_wire_code_name(q->code),
                    svc->fail_closed ? "closed" : "open");
            continue;
        }
        k0 = ch_view_at(r, from);
        k1 = ch_view_at(r, q->t_send_ms + j->sc->deadline_ms);
        for (int k = k0 < 0 ? 0 : k0; k <= k1 && !justified; k++) {
            uint8_t o = r->views[k].owner[q->shard];

            justified = o == CH_NONE || impaired(j, o, q->t_send_ms);
        }
        /* a shard that left a node cut off (a partition, a pause) waits for records that
         * cannot come: the new owner sends its CHECKs back to the old one, which answers
         * nothing, for as long as handoff_wait (verdict_moves.c, CH_MOVE_MAYBE) */
        for (int k = ch_view_at(r, from - HANDOFF_WAIT_MS); k < k0 && !justified; k++) {
            uint8_t o = k < 0 ? CH_NONE : r->views[k].owner[q->shard];

            justified = o != CH_NONE && impaired_by(j, o, q->t_send_ms, true);
        }
        if (k1 < 0 || justified) {
            continue;
        }
        snprintf(buf, sizeof(buf), "%s u%u (shard %u, owner %s) at %.3fs answered %s while "
                 "its owner was not impaired",
                 svc->name, q->user, q->shard, ch_node_name(r->views[k1].owner[q->shard]),
                 rel(j, q->t_send_ms), rl_wire_code_name(q->code));
        events_around(j, q->t_send_ms - 3000, q->t_send_ms + 500, buf, sizeof(buf));
        violate(j, INV_POLICY, "%s", buf);
    }
}

/* ---- convergence ----------------------------------------------------------------------- */

/* When the router was last (re)started at or before t: its up time; 0 if never down. */
static int64_t
router_up_since(const struct ch_run *r, int router, int64_t t)
{
    int64_t up = 0;

    for (int k = 0; k < r->nrouter_down[router] && k < 16; k++) {
        if (r->router_down_from[router][k] <= t) {
            up = r->router_down_to[router][k];
        }
    }
    return up;
}

/* Whether sample m, taken while view k stood, shows a later view that the observer saw
 * within LAG_MS of the sample: the router heard of the change first, it is not behind. */
static bool
ahead_of_observer(const struct ch_run *r, int k, const struct ch_sample *m)
{
    for (int n = k + 1; n < r->nviews && r->views[n].t_ms <= m->t_ms + LAG_MS; n++) {
        if ((int64_t)r->views[n].digest == (int64_t)m->digest) {
            return true;
        }
    }
    return false;
}

/* Whether digest is the table of one of the views before view k. */
static bool
earlier_view_digest(const struct ch_run *r, int k, uint64_t digest)
{
    for (int i = 0; i < k; i++) {
        if (r->views[i].digest == digest) {
            return true;
        }
    }
    return false;
}

static void
judge_convergence(struct judge *j)
{
    const struct ch_run *r = j->r;

    for (int k = 0; k < r->nviews; k++) {
        const struct ch_view *v = &r->views[k];
        int64_t until = k + 1 < r->nviews ? r->views[k + 1].t_ms : INT64_MAX;
        int64_t want = (int64_t)v->digest;
        int64_t agreed_at[CH_ROUTERS_MAX] = {0};
        /* Per router: since when its samples have differed from the view, after it had
         * agreed with it (0: it agrees now, or never did in this view). A router may see a
         * change the observer missed (a member that left and came back between two of the
         * observer's reads): it shows a table no view had for a while, then agrees again.
         * Convergence is that no router stays on such a table longer than converge_ms; a
         * router back on an earlier view's table is behind, judged from the view's start. */
        int64_t differs_since[CH_ROUTERS_MAX] = {0};

        for (int s = 0; s < r->nsamples; s++) {
            const struct ch_sample *m = &r->samples[s];
            int64_t start = v->t_ms, up = router_up_since(r, m->router, m->t_ms);

            if (m->t_ms < v->t_ms || m->t_ms >= until) {
                continue;
            }
            if ((int64_t)m->digest == want && agreed_at[m->router] == 0) {
                agreed_at[m->router] = m->t_ms;
            }
            if ((int64_t)m->digest == want) {
                differs_since[m->router] = 0;
            } else if (differs_since[m->router] == 0 && agreed_at[m->router] != 0 &&
                       !earlier_view_digest(r, k, m->digest)) {
                differs_since[m->router] = m->t_ms;
            }
            start = up > start ? up : start;
            if (up == INT64_MAX || m->t_ms < start + j->sc->converge_ms) {
                continue;
            }
            j->inv[INV_CONVERGE].checked++;
            if (differs_since[m->router] > start) {
                start = differs_since[m->router]; /* it had agreed: judged from the change */
            }
            if ((int64_t)m->digest != want && m->t_ms >= start + j->sc->converge_ms &&
                !ahead_of_observer(r, k, m) && !blind_at(r, m->t_ms)) {
                char buf[512];

                snprintf(buf, sizeof(buf),
                         "router %d at %.3fs still routes by another table than ZooKeeper's "
                         "since %.3fs (members %d, assignment %lld): %.1f s > bound %.1f s",
                         m->router + 1, rel(j, m->t_ms), rel(j, v->t_ms), v->nmembers,
                         (long long)v->asg_version, (double)(m->t_ms - start) / 1000.0,
                         (double)j->sc->converge_ms / 1000.0);
                events_around(j, v->t_ms - 1000, m->t_ms, buf, sizeof(buf));
                violate(j, INV_CONVERGE, "%s", buf);
            }
        }
        for (int i = 0; i < j->sc->routers; i++) {
            if (agreed_at[i] != 0 && k > 0 && agreed_at[i] - v->t_ms > j->converge_max_ms &&
                router_up_since(r, i, agreed_at[i]) <= v->t_ms) {
                j->converge_max_ms = agreed_at[i] - v->t_ms;
            }
        }
    }
}

/* ---- figures: shard moves, stale answers ----------------------------------------------- */

static void
judge_figures(struct judge *j)
{
    const struct ch_run *r = j->r;
    int64_t dropped_at[CH_NODES_MAX];

    for (int i = 0; i < r->nimpairs; i++) {
        const struct ch_impair *m = &r->impairs[i];

        if (m->node < 0 || strcmp(m->what, "delayed") == 0) {
            continue;
        }
        for (int k = 0; k < r->nviews; k++) {
            if (r->views[k].t_ms >= m->from_ms && (r->views[k].members >> m->node & 1) == 0) {
                if (j->nmoves < CH_IMPAIRS_MAX) {
                    j->move_ms[j->nmoves++] = r->views[k].t_ms - m->from_ms;
                }
                break;
            }
        }
    }
    for (int k = 0; k < r->nviews; k++) {
        j->view_changes += r->views[k].t_ms > r->t0_ms;
    }
    for (int i = 0; i < CH_NODES_MAX; i++) {
        dropped_at[i] = 0;
    }
    for (int p = 0; p < r->nprobes; p++) {
        const struct ch_probe *b = &r->probes[p];
        int k = ch_view_at(r, b->t_ms);

        if (k < 0 || (r->views[k].members >> b->node & 1) != 0) {
            dropped_at[b->node] = 0;
            continue;
        }
        if (dropped_at[b->node] == 0) {
            dropped_at[b->node] = r->views[k].t_ms;
        }
        /* A node that registered again may answer a few ms before the observer hears of
         * it: an answer just before the view that brings it back is not a stale one. */
        if (k + 1 < r->nviews && r->views[k + 1].t_ms <= b->t_ms + FRESH_SLACK_MS &&
            (r->views[k + 1].members >> b->node & 1) != 0) {
            continue;
        }
        if (b->answered && b->t_ms - dropped_at[b->node] > j->stale_ms) {
            j->stale_ms = b->t_ms - dropped_at[b->node];
        }
    }
}

static void
judge_expect(struct judge *j)
{
    const struct ch_expect *e = &j->sc->expect;
    int64_t move_max = 0;

    for (int i = 0; i < j->nmoves; i++) {
        move_max = j->move_ms[i] > move_max ? j->move_ms[i] : move_max;
    }
#define EXPECT_MAX(bound, value, what)                                                             \
    if ((bound) >= 0) {                                                                            \
        j->inv[INV_EXPECT].checked++;                                                              \
        if ((int64_t)(value) > (bound)) {                                                          \
            violate(j, INV_EXPECT, "%s: %lld > %lld", what, (long long)(value), (long long)(bound)); \
        }                                                                                          \
    }
    EXPECT_MAX(e->max_policy, j->policy, "max_policy_answers");
    EXPECT_MAX(e->max_extra, j->extra_allowed, "max_extra_allowed");
    EXPECT_MAX(e->max_latency_ms, j->worst_latency_us / 1000, "max_latency (ms)");
    EXPECT_MAX(e->max_move_ms, move_max, "max_shard_move (ms)");
    EXPECT_MAX(e->max_stale_ms, j->stale_ms, "max_stale_answers (ms)");
    EXPECT_MAX(e->max_view_changes, j->view_changes, "max_view_changes");
#undef EXPECT_MAX
    if (e->min_policy >= 0) {
        j->inv[INV_EXPECT].checked++;
        if ((int64_t)j->policy < e->min_policy) {
            violate(j, INV_EXPECT, "min_policy_answers: %llu < %lld",
                    (unsigned long long)j->policy, (long long)e->min_policy);
        }
    }
}

/* ---- report ---------------------------------------------------------------------------- */

/* The verdict and the figures as one JSON object, through the project's one JSON writer. */
static void
write_json(const struct judge *j, const char *path, bool pass)
{
    FILE *f = fopen(path, "w");
    struct rl_json js;
    int rc;

    if (f == NULL) {
        fprintf(stderr, "rl-chaos: %s: cannot write\n", path);
        return;
    }
    rl_json_init(&js, f);
    rl_json_begin_object(&js);
    rl_json_kv_str(&js, "scenario", j->sc->name);
    rl_json_kv_bool(&js, "pass", pass);
    rl_json_key(&js, "invariants");
    rl_json_begin_array(&js);
    for (int i = 0; i < INV_COUNT; i++) {
        const struct inv_result *v = &j->inv[i];

        rl_json_begin_object(&js);
        rl_json_kv_str(&js, "name", inv_names[i]);
        rl_json_kv_bool(&js, "held", v->violations == 0);
        rl_json_kv_u64(&js, "checked", v->checked);
        rl_json_kv_u64(&js, "violations", v->violations);
        rl_json_key(&js, "examples");
        rl_json_begin_array(&js);
        for (int k = 0; k < v->nexamples; k++) {
            rl_json_str(&js, v->examples[k]);
        }
        rl_json_end_array(&js);
        rl_json_end_object(&js);
    }
    rl_json_end_array(&js);
    rl_json_key(&js, "figures");
    rl_json_begin_object(&js);
    rl_json_kv_u64(&js, "sent", j->sent);
    rl_json_kv_u64(&js, "answered", j->answered);
    rl_json_kv_u64(&js, "allowed", j->by_code[0]);
    rl_json_kv_u64(&js, "limited", j->by_code[1]);
    rl_json_kv_u64(&js, "fail_open", j->by_code[2]);
    rl_json_kv_u64(&js, "fail_closed", j->by_code[3]);
    /* of the limited and fail_open answers, the routers' backstop decided these (STATS) */
    rl_json_kv_u64(&js, "backstop_allowed", j->r->backstop_stats[0]);
    rl_json_kv_u64(&js, "backstop_limited", j->r->backstop_stats[1]);
    rl_json_kv_u64(&js, "errors", j->by_code[6]);
    rl_json_kv_u64(&js, "unsent", j->unsent);
    rl_json_kv_u64(&js, "lost_with_killed_router", j->lost_excused);
    rl_json_kv_u64(&js, "late", j->late);
    rl_json_kv_u64(&js, "held_by_move", j->held);
    rl_json_kv_u64(&js, "extra_allowed", j->extra_allowed);
    rl_json_key(&js, "worst_latency_ms");
    rl_json_f64(&js, (double)j->worst_latency_us / 1000.0, 3);
    rl_json_kv_i64(&js, "converge_max_ms", j->converge_max_ms);
    rl_json_kv_i64(&js, "stale_answers_ms", j->stale_ms);
    rl_json_kv_i64(&js, "view_changes", j->view_changes);
    rl_json_key(&js, "shard_move_ms");
    rl_json_begin_array(&js);
    for (int i = 0; i < j->nmoves; i++) {
        rl_json_i64(&js, j->move_ms[i]);
    }
    rl_json_end_array(&js);
    rl_json_end_object(&js);
    rl_json_end_object(&js);
    fputc('\n', f);
    rc = rl_json_finish(&js);
    if (fclose(f) != 0 || rc != 0) {
        fprintf(stderr, "rl-chaos: %s: cannot write\n", path);
    }
}

bool
ch_verdict(struct ch_run *r, const char *json_path)
{
    struct judge *j = calloc(1, sizeof(*j));
    size_t total = 0;
    bool pass = true;

    if (j == NULL) {
        return false;
    }
    j->r = r;
    j->sc = r->sc;
    for (int i = 0; i < r->sc->routers; i++) {
        total += atomic_load(&r->traffic[i].n);
        j->unsent += atomic_load(&r->traffic[i].unsent);
    }
    j->reqs = malloc((total + 1) * sizeof(*j->reqs));
    if (j->reqs == NULL) {
        free(j);
        return false;
    }
    for (int i = 0; i < r->sc->routers; i++) {
        size_t n = atomic_load(&r->traffic[i].n);

        for (size_t k = 0; k < n; k++) {
            j->reqs[j->nreqs++] = &r->traffic[i].reqs[k];
        }
    }
    judge_liveness(j);
    judge_windows(j);
    judge_policy(j);
    judge_convergence(j);
    judge_figures(j);
    j->inv[INV_DEATHS].checked = 1;
    for (int i = 0; i < r->ndeaths; i++) {
        violate(j, INV_DEATHS, "%s", r->deaths[i]);
    }
    judge_expect(j);

    printf("\n%-14s %-5s %10s %10s\n", "invariant", "held", "checked", "violations");
    for (int i = 0; i < INV_COUNT; i++) {
        const struct inv_result *v = &j->inv[i];

        printf("%-14s %-5s %10llu %10llu\n", inv_names[i], v->violations == 0 ? "yes" : "NO",
               (unsigned long long)v->checked, (unsigned long long)v->violations);
        pass = pass && v->violations == 0;
    }
    for (int i = 0; i < INV_COUNT; i++) {
        for (int k = 0; k < j->inv[i].nexamples; k++) {
            printf("  %s violated: %s\n", inv_names[i], j->inv[i].examples[k]);
        }
        if (j->inv[i].violations > (uint64_t)j->inv[i].nexamples) {
            printf("  %s: %llu more\n", inv_names[i],
                   (unsigned long long)(j->inv[i].violations - (uint64_t)j->inv[i].nexamples));
        }
    }
    printf("\nfigures: sent %llu, answered %llu (allowed %llu, limited %llu, fail_open %llu, "
           "fail_closed %llu, errors %llu), unsent %llu, lost with a killed router %llu\n",
           (unsigned long long)j->sent, (unsigned long long)j->answered,
           (unsigned long long)j->by_code[0], (unsigned long long)j->by_code[1],
           (unsigned long long)j->by_code[2], (unsigned long long)j->by_code[3],
           (unsigned long long)j->by_code[6], (unsigned long long)j->unsent,
           (unsigned long long)j->lost_excused);
    printf("         of these the routers' backstop allowed %llu (FAIL_OPEN) and refused %llu "
           "(LIMITED)\n",
           (unsigned long long)r->backstop_stats[0], (unsigned long long)r->backstop_stats[1]);
    printf("         worst latency %.1f ms, late %llu, held by a move %llu, extra allowances %llu, "
           "routers agreed "
           "within %lld ms, view changes %lld, stale direct answers for %lld ms, shards moved "
           "after",
           (double)j->worst_latency_us / 1000.0, (unsigned long long)j->late,
           (unsigned long long)j->held, (unsigned long long)j->extra_allowed,
           (long long)j->converge_max_ms, (long long)j->view_changes, (long long)j->stale_ms);
    for (int i = 0; i < j->nmoves; i++) {
        printf(" %lld ms", (long long)j->move_ms[i]);
    }
    printf("%s\n", j->nmoves == 0 ? " (none)" : "");
    printf("\nVERDICT %s: %s\n", r->sc->name, pass ? "PASS" : "FAIL");
    if (json_path != NULL) {
        write_json(j, json_path, pass);
    }
    free(j->reqs);
    free(j);
    return pass;
}
