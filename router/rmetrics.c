/*
 * rmetrics: what the router reports about itself: the STATS reply and the router's Prometheus
 * families, from the counters counts.c and the other files keep
 * (docs/OPERATIONS.md, "Metrics"; the names there are a contract with dashboards). Not for
 * the HTTP listener (metrics.h) or readiness (health.c).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front.h"
#include "metrics.h"
#include "reqlog.h"
#include "resp_front.h"
#include "rls_front.h"
#include "router_int.h"
#include "rules.h"
#include "zkm.h"

/*
 * What STATS and /metrics report of a router that is one worker of a process (rproc.h): the
 * process's totals, every worker's counters summed (its own as they are; another's under its
 * mu, which keeps its table, upstreams and rule rows in place; the counters themselves are
 * read as their owner left them, each a single aligned word). Gauges of one view (members,
 * shards, the table) are r's own: every worker holds the same view.
 */
struct rmetrics_sum {
    struct rl_router_stats stats;
    struct rl_listener_stats cs;
    struct rl_hist latency;
    uint64_t npending;
    struct rl_rls_counts rls;
    uint64_t resp_counts[5];
};

static void
rmetrics_sum(const struct rl_router *r, struct rmetrics_sum *s)
{
    s->stats = r->stats;
    rl_listener_stats(&r->listener, &s->cs);
    s->latency = r->latency;
    s->npending = r->npending;
    memset(&s->rls, 0, sizeof(s->rls));
    rl_rls_counts_sum(r->rls, &s->rls);
    memset(s->resp_counts, 0, sizeof(s->resp_counts));
    rl_resp_counts(r->resp, s->resp_counts);
    for (uint32_t i = 0; i < r->group->n; i++) {
        struct rl_router *w = r->group->routers[i];
        struct rl_listener_stats cs;

        if (w == r || w == NULL) {
            continue;
        }
        pthread_mutex_lock(&w->mu);
#define RL_ROUTER_ADD(f, n) s->stats.f += w->stats.f;
        RL_ROUTER_STATS_MAP(RL_ROUTER_ADD)
#undef RL_ROUTER_ADD
        rl_listener_stats(&w->listener, &cs);
#define RL_ROUTER_ADD_CONN(f, n) s->cs.f += cs.f;
        RL_LISTENER_STATS_MAP(RL_ROUTER_ADD_CONN)
#undef RL_ROUTER_ADD_CONN
        for (size_t b = 0; b < RL_HIST_BUCKETS + 1; b++) {
            s->latency.counts[b] += w->latency.counts[b];
        }
        s->latency.count += w->latency.count;
        s->latency.sum_ns += w->latency.sum_ns;
        s->npending += w->npending;
        rl_rls_counts_sum(w->rls, &s->rls);
        rl_resp_counts(w->resp, s->resp_counts);
        pthread_mutex_unlock(&w->mu);
    }
    /* Every worker builds the same tables: one worker's count is the process's. */
    s->stats.table_builds = r->stats.table_builds;
    s->cs.accept_errors += __atomic_load_n(r->group->accept_errors, __ATOMIC_RELAXED);
    if (r->group->shared != NULL) {
        s->cs.peers = rl_conn_shared_peers(r->group->shared);
    }
}

void
rl_rmetrics_totals(const struct rl_router *r, struct rl_router_stats *stats, uint64_t *pending)
{
    struct rmetrics_sum sum;

    rmetrics_sum(r, &sum);
    *stats = sum.stats;
    *pending = sum.npending;
}

/* Node name's counters in every worker of r's process (r's alone without one); *up: whether
 * some worker has a connection up to it. */
static void
rmetrics_node_sum(const struct rl_router *r, const char *name, struct rl_upstream_stats *out,
                  bool *up)
{
    memset(out, 0, sizeof(*out));
    *up = false;
    for (uint32_t i = 0; i < r->group->n; i++) {
        struct rl_router *w = r->group->routers[i];

        if (w == NULL) {
            continue;
        }
        if (w != r) {
            pthread_mutex_lock(&w->mu);
        }
        for (const struct rl_upstream *u = w->upstreams; u != NULL; u = u->next) {
            if (strcmp(u->name, name) == 0) {
                out->forwarded += u->stats.forwarded;
                out->replies += u->stats.replies;
                out->failures += u->stats.failures;
                out->downs += u->stats.downs;
                out->connects += u->stats.connects;
                out->stalls += u->stats.stalls;
                *up = *up || rl_upstream_up(u);
                break;
            }
        }
        if (w != r) {
            pthread_mutex_unlock(&w->mu);
        }
    }
}

/* The answers by rule and code of every worker (rows as r's rules; a worker whose rules are
 * not r's yet, during a change, is left out until it has them). NULL: out of memory. */
static uint64_t (*rmetrics_codes_sum(const struct rl_router *r))[RL_WIRE_CODE_COUNT]
{
    uint64_t(*codes)[RL_WIRE_CODE_COUNT] = malloc(r->rule_rows * sizeof(*codes));

    if (codes == NULL) {
        return NULL;
    }
    memcpy(codes, r->rule_codes, r->rule_rows * sizeof(*codes));
    for (uint32_t i = 0; i < r->group->n; i++) {
        struct rl_router *w = r->group->routers[i];

        if (w == r || w == NULL) {
            continue;
        }
        pthread_mutex_lock(&w->mu);
        if (w->rule_rows == r->rule_rows && w->conf->rules_digest == r->conf->rules_digest) {
            for (size_t row = 0; row < r->rule_rows; row++) {
                for (uint32_t c = 0; c < RL_WIRE_CODE_COUNT; c++) {
                    codes[row][c] += w->rule_codes[row][c];
                }
            }
        }
        pthread_mutex_unlock(&w->mu);
    }
    return codes;
}

void
rl_rmetrics_stats_reply(struct rl_conn *c, uint32_t id)
{
    struct rl_router *r = c->data;
    enum { STATS_MAX = 64 + 4 * 64 };
    const char *keys[STATS_MAX];
    int64_t vals[STATS_MAX];
    char names[4 * 64][96];
    size_t n = 0, nn = 0;
    struct rl_reqlog_stats ls = {0};
    struct rmetrics_sum sum;
    const struct rl_listener_stats *cs = &sum.cs;

    rmetrics_sum(r, &sum);
#define RL_ROUTER_PUT(f, s)                                                                        \
    keys[n] = s;                                                                                   \
    vals[n++] = (int64_t)sum.stats.f;
    RL_ROUTER_STATS_MAP(RL_ROUTER_PUT)
#undef RL_ROUTER_PUT
#define RL_ROUTER_PUT_CONN(f, s)                                                                   \
    keys[n] = s;                                                                                   \
    vals[n++] = (int64_t)cs->f;
    RL_LISTENER_STATS_MAP(RL_ROUTER_PUT_CONN)
#undef RL_ROUTER_PUT_CONN
    keys[n] = "pending";
    vals[n++] = (int64_t)sum.npending;
    keys[n] = "workers";
    vals[n++] = r->group->n;
    keys[n] = "members";
    vals[n++] = (int64_t)r->view.nmembers;
    keys[n] = "zk_state";
    vals[n++] = r->zk_state;
    keys[n] = "assignment_version";
    vals[n++] = r->view.asg_version;
    keys[n] = "table_digest";
    vals[n++] = r->table_digest;
    keys[n] = "rules_version";
    vals[n++] = r->opts.rules != NULL ? r->opts.rules->version : 0;
    keys[n] = "rules_digest";
    vals[n++] = r->opts.rules != NULL ? r->opts.rules->digest : (int64_t)r->conf->rules_digest;
    keys[n] = "rules_reloads";
    vals[n++] = r->opts.rules != NULL ? (int64_t)r->opts.rules->reloads : 0;
    keys[n] = "rules_reload_failures";
    vals[n++] = r->opts.rules != NULL ? (int64_t)r->opts.rules->failures : 0;
    if (r->log != NULL) {
        rl_reqlog_stats(r->log, &ls);
    }
    keys[n] = "log_lines";
    vals[n++] = (int64_t)ls.lines;
    keys[n] = "log_dropped";
    vals[n++] = (int64_t)ls.dropped;
    keys[n] = "log_rotations";
    vals[n++] = (int64_t)ls.rotations;
    if (r->conf->rls_host != NULL) {
        /* the gRPC front (docs/OPERATIONS.md, "Metrics") */
        keys[n] = "rls_calls_ok";
        vals[n++] = (int64_t)sum.rls.calls[0];
        keys[n] = "rls_calls_over_limit";
        vals[n++] = (int64_t)sum.rls.calls[1];
        keys[n] = "rls_calls_error";
        vals[n++] = (int64_t)sum.rls.calls[2];
        keys[n] = "rls_timeouts";
        vals[n++] = (int64_t)sum.rls.timeouts;
        keys[n] = "rls_auth_failures";
        vals[n++] = (int64_t)sum.rls.auth_failures;
        keys[n] = "rls_streams_refused";
        vals[n++] = (int64_t)sum.rls.streams[RL_RLS_STREAM_REFUSED];
        keys[n] = "rls_streams_reset_by_server";
        vals[n++] = (int64_t)sum.rls.streams[RL_RLS_STREAM_RESET_BY_SERVER];
        keys[n] = "rls_streams_reset_by_client";
        vals[n++] = (int64_t)sum.rls.streams[RL_RLS_STREAM_RESET_BY_CLIENT];
        keys[n] = "rls_connections";
        vals[n++] = rl_wgroup_front_conns(r->group, RL_FRONT_RLS, 0);
    }
    n = rl_shed_stats(r, keys, vals, n);
    /*
     * Per node: "node.NAME.forwarded", ".failures", ".up", ".shards" for the first 64 that
     * fit under the codec's RL_WIRE_STATS_MAX pairs (past it the reply would not encode). A
     * member whose address did not parse has no upstream: it reports zeros.
     */
    for (size_t i = 0;
         r->map != NULL && i < r->map->nmembers && i < 64 && n + 4 <= RL_WIRE_STATS_MAX; i++) {
        const struct rl_upstream *u = r->owners[i];
        const char *name = r->map->members[i].name;
        uint32_t shards = 0;
        struct rl_upstream_stats us;
        bool up = false;

        if (u != NULL) {
            rmetrics_node_sum(r, u->name, &us, &up);
        }
        for (uint32_t s = 0; s < r->map->nshards; s++) {
            shards += r->map->owner[s] == i;
        }
        snprintf(names[nn], sizeof(names[nn]), "node.%s.forwarded", name);
        keys[n] = names[nn++];
        vals[n++] = u != NULL ? (int64_t)us.forwarded : 0;
        snprintf(names[nn], sizeof(names[nn]), "node.%s.failures", name);
        keys[n] = names[nn++];
        vals[n++] = u != NULL ? (int64_t)us.failures : 0;
        snprintf(names[nn], sizeof(names[nn]), "node.%s.up", name);
        keys[n] = names[nn++];
        vals[n++] = up;
        snprintf(names[nn], sizeof(names[nn]), "node.%s.shards", name);
        keys[n] = names[nn++];
        vals[n++] = shards;
    }
    if (rl_wire_put_stats_reply(&c->out, id, keys, vals, n) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    rl_conn_mark(c);
}

/* The families with one series per node connected to: the rl_upstream_stats field
 * (offsetof), or SIZE_MAX for rl_upstream_up. */
static const struct {
    const char *name, *type, *help;
    size_t stat;
} rmetrics_node[] = {
    {"rl_router_forwarded_total", "counter", "CHECKs forwarded, by node.",
     offsetof(struct rl_upstream_stats, forwarded)},
    {"rl_router_node_failures_total", "counter",
     "CHECKs answered by failure policy because of this node.",
     offsetof(struct rl_upstream_stats, failures)},
    {"rl_router_node_up", "gauge", "1 while at least one connection to the node is up.", SIZE_MAX},
    {"rl_router_upstream_connects_total", "counter",
     "Connections made to the node: the first ones and every reconnect.",
     offsetof(struct rl_upstream_stats, connects)},
    {"rl_router_upstream_disconnects_total", "counter",
     "Connections to the node lost (each is followed by reconnect attempts).",
     offsetof(struct rl_upstream_stats, downs)},
    {"rl_router_upstream_stalls_total", "counter",
     "Connections to the node reset because a request sent more than the stall bound ago was "
     "still unanswered, or given up because a connect did not complete in its bound.",
     offsetof(struct rl_upstream_stats, stalls)},
};

/* rl_router_decisions_total as copied on the loop (rmetrics_decisions) for the HTTP thread
 * to format (rl_prom_defer): one block, the rules' counts by code, then their services'
 * names. */
struct rmetrics_rule {
    uint64_t codes[RL_WIRE_CODE_COUNT];
    const char *service; /* in the block's names */
    size_t ix;           /* the rule's place in the rules */
};

struct rmetrics_snap {
    uint64_t no_rule;
    uint64_t inl[RL_WIRE_CODE_COUNT]; /* CHECKs with an inline limit (no rule), by code */
    size_t n;
    struct rmetrics_rule rule[];
};

static int
rmetrics_rule_cmp(const void *a, const void *b)
{
    const struct rmetrics_rule *x = a, *y = b;
    int c = strcmp(x->service, y->service);

    return c != 0 ? c : (x->ix > y->ix) - (x->ix < y->ix);
}

/* On the HTTP thread: one series per service (its endpoint sections add to it), the rules
 * sorted by service (n log n: a rules file may have thousands of sections). */
static void
rmetrics_decisions_fmt(const void *arg, struct rl_prom *p)
{
    struct rmetrics_snap *sn = (struct rmetrics_snap *)arg; /* its own block: sorted here */
    size_t n = sn->n;
    char lab[512];

    rl_prom_family(p, "rl_router_decisions_total", "counter",
                   "CHECK requests answered, by service (from the config; \"\" when no rule "
                   "matched) and reply code (fail_open and fail_closed: by failure policy).");
    qsort(sn->rule, n, sizeof(sn->rule[0]), rmetrics_rule_cmp);
    for (size_t i = 0; i < n;) {
        const char *svc = sn->rule[i].service;
        uint64_t v[RL_WIRE_CODE_COUNT] = {0};
        size_t k = i;

        for (; k < n && strcmp(sn->rule[k].service, svc) == 0; k++) {
            for (uint32_t code = 0; code < RL_WIRE_CODE_COUNT; code++) {
                v[code] += sn->rule[k].codes[code];
            }
        }
        for (uint32_t code = 0; code < RL_WIRE_CODE_COUNT; code++) {
            if (code != RL_WIRE_NO_RULE) {
                rl_prom_u64(p, "rl_router_decisions_total",
                            rl_prom_labels(lab, sizeof(lab), "service", svc, "code",
                                           rl_wire_code_name(code), NULL),
                            v[code]);
            }
        }
        i = k;
    }
    rl_prom_u64(p, "rl_router_decisions_total",
                rl_prom_labels(lab, sizeof(lab), "service", "", "code", "no_rule", NULL),
                sn->no_rule);
    rl_prom_family(p, "rl_router_inline_decisions_total", "counter",
                   "CHECKs carrying an inline limit answered, all services together, by reply "
                   "code (node decisions and failure-policy answers).");
    for (uint32_t code = 0; code < RL_WIRE_CODE_COUNT; code++) {
        if (code != RL_WIRE_NO_RULE) {
            rl_prom_u64(p, "rl_router_inline_decisions_total",
                        rl_prom_labels(lab, sizeof(lab), "code", rl_wire_code_name(code), NULL),
                        sn->inl[code]);
        }
    }
}

/* On the loop: the counts and the services' names copied (memcpy-sized work), formatted
 * later by rmetrics_decisions_fmt. */
static void
rmetrics_decisions(const struct rl_router *r, struct rl_prom *p,
                   const uint64_t (*codes)[RL_WIRE_CODE_COUNT])
{
    const struct rl_conf *c = r->conf;
    size_t n = c->nrules < r->rule_rows - 1 ? c->nrules : r->rule_rows - 1, names = 0;
    size_t *len = malloc((n ? n : 1) * sizeof(*len));
    struct rmetrics_snap *sn = NULL;
    char *at;

    for (size_t i = 0; len != NULL && i < n; i++) {
        len[i] = strlen(c->rules[i].service) + 1;
        names += len[i];
    }
    if (len != NULL) {
        sn = malloc(sizeof(*sn) + n * sizeof(sn->rule[0]) + names);
    }
    if (sn != NULL) {
        sn->no_rule = codes[r->rule_rows - 1][RL_WIRE_NO_RULE];
        /* The no-rule row holds inline-limited CHECKs' other codes (rl_counts_answer). */
        memcpy(sn->inl, codes[r->rule_rows - 1], sizeof(sn->inl));
        sn->n = n;
        at = (char *)&sn->rule[n];
        for (size_t i = 0; i < n; i++) {
            memcpy(sn->rule[i].codes, codes[i], sizeof(sn->rule[i].codes));
            memcpy(at, c->rules[i].service, len[i]);
            sn->rule[i].service = at;
            sn->rule[i].ix = i;
            at += len[i];
        }
    }
    free(len);
    rl_prom_defer(p, rmetrics_decisions_fmt, sn);
}

/* rl_router_<front>_connections: one gauge per row of the front table (front.h) whose front
 * listens, its connections open in the whole process; the row's ops' name is its [router]
 * key. */
static void
rmetrics_front_conns(const struct rl_router *r, struct rl_prom *p)
{
    for (int k = 0; r->opts.fronts != NULL && k < RL_FRONT_KINDS; k++) {
        const struct rl_front_def *f = &r->opts.fronts[k];
        const char *host = NULL;
        uint16_t port = 0;
        char name[96], help[128];

        if (f->ops == NULL || f->listen == NULL) {
            continue;
        }
        f->listen(r->conf, &host, &port);
        if (host == NULL) {
            continue;
        }
        snprintf(name, sizeof(name), "rl_router_%s_connections", f->ops->name);
        snprintf(help, sizeof(help), "Connections open on [router] %s.", f->ops->name);
        rl_prom_family(p, name, "gauge", help);
        rl_prom_u64(p, name, NULL, rl_wgroup_front_conns(r->group, (enum rl_front_kind)k, 0));
    }
}

void
rl_router_metrics(struct rl_router *r, struct rl_prom *p)
{
    char lab[512], digest[32];
    struct rmetrics_sum sum;
    uint64_t(*codes)[RL_WIRE_CODE_COUNT] = rmetrics_codes_sum(r);

    rmetrics_sum(r, &sum);
    if (codes == NULL) {
        p->err = -ENOMEM;
        return;
    }

    if (r->zk_state != RL_ROUTER_ZK_NONE) {
        /* A worker may see only the latest of states that came in a burst: the process
         * counts the expiries as ZooKeeper reported them. */
        rl_prom_zookeeper(p, r->zk_state == RL_ZKM_CONNECTED,
                          __atomic_load_n(r->group->zk_expiries, __ATOMIC_RELAXED));
    }

    rmetrics_decisions(r, p, codes);
    free(codes);
    rl_prom_family(p, "rl_router_request_duration_seconds", "histogram",
                   "End-to-end time of a CHECK in the router: from the read that brought it to "
                   "its answer (the node's, or the failure policy's).");
    rl_prom_hist(p, "rl_router_request_duration_seconds", NULL, &sum.latency);
    rl_prom_family(p, "rl_router_policy_answers_total", "counter",
                   "CHECKs answered by failure policy, by cause: owner_down (no owner, or its "
                   "connection is down or lost), deadline (the node did not answer in time), "
                   "not_owner (the node saw another owner), moving (a shard's planned move "
                   "outlasted handoff_wait).");
    rl_prom_u64(p, "rl_router_policy_answers_total",
                rl_prom_labels(lab, sizeof(lab), "cause", "owner_down", NULL), sum.stats.owner_down);
    rl_prom_u64(p, "rl_router_policy_answers_total",
                rl_prom_labels(lab, sizeof(lab), "cause", "deadline", NULL),
                sum.stats.deadline_expired);
    rl_prom_u64(p, "rl_router_policy_answers_total",
                rl_prom_labels(lab, sizeof(lab), "cause", "not_owner", NULL), sum.stats.not_owner);
    rl_prom_u64(p, "rl_router_policy_answers_total",
                rl_prom_labels(lab, sizeof(lab), "cause", "moving", NULL),
                sum.stats.move_expired + sum.stats.move_lost);
    rl_prom_family(p, "rl_router_moves_total", "counter",
                   "CHECKs caught by a shard's planned move, by what the router did: moved "
                   "(ERROR MOVING answers read), redirected (sent at once to the owner a MOVING "
                   "named), held (a backoff waited), resent (sent again after it), lost_conn "
                   "(lost with the connection of a node that left: held as a MOVING).");
    {
        static const char *const what[5] = {"moved", "redirected", "held", "resent", "lost_conn"};
        const uint64_t v[5] = {sum.stats.moved, sum.stats.move_redirected,
                               sum.stats.held_for_move, sum.stats.move_resent,
                               sum.stats.move_lost_conn};

        for (size_t k = 0; k < 5; k++) {
            rl_prom_u64(p, "rl_router_moves_total",
                        rl_prom_labels(lab, sizeof(lab), "what", what[k], NULL), v[k]);
        }
    }
    if (r->conf->rls_host != NULL) {
        static const char *const results[3] = {"ok", "over_limit", "error"};

        rl_prom_family(p, "rl_router_rls_calls_total", "counter",
                       "ShouldRateLimit calls answered by the gRPC front, by result: ok, "
                       "over_limit (overall_code), error (a gRPC status other than OK).");
        for (size_t k = 0; k < 3; k++) {
            rl_prom_u64(p, "rl_router_rls_calls_total",
                        rl_prom_labels(lab, sizeof(lab), "result", results[k], NULL),
                        sum.rls.calls[k]);
        }
        rl_prom_family(p, "rl_router_rls_timeouts_total", "counter",
                       "ShouldRateLimit calls answered at their grpc-timeout, before every "
                       "limit had a node's answer.");
        rl_prom_u64(p, "rl_router_rls_timeouts_total", NULL, sum.rls.timeouts);
        rl_prom_family(p, "rl_router_rls_auth_failures_total", "counter",
                       "ShouldRateLimit calls refused UNAUTHENTICATED (no or a wrong bearer "
                       "token, or an address past its failed authentications a second).");
        rl_prom_u64(p, "rl_router_rls_auth_failures_total", NULL, sum.rls.auth_failures);
        rl_rls_metrics(r, p);
    }
    if (r->conf->resp_host != NULL) {
        static const char *const kinds[5] = RL_RESP_COUNT_NAMES;

        rl_prom_family(p, "rl_router_resp_total", "counter",
                       "The RESP front's commands, CL.THROTTLE commands, RL.CHECK keys, error "
                       "replies and protocol errors, by kind.");
        for (size_t k = 0; k < 5; k++) {
            rl_prom_u64(p, "rl_router_resp_total",
                        rl_prom_labels(lab, sizeof(lab), "kind", kinds[k], NULL),
                        sum.resp_counts[k]);
        }
    }
    rmetrics_front_conns(r, p);
    rl_prom_family(p, "rl_router_requests_in_flight", "gauge",
                   "CHECKs forwarded to nodes and not answered yet.");
    rl_prom_u64(p, "rl_router_requests_in_flight", NULL, sum.npending);
    rl_prom_family(p, "rl_router_settles_total", "counter",
                   "ADJUSTs and RELEASEs answered (by a node, the failure policy or the router: "
                   "no rule), by op; not decisions, so not in rl_router_decisions_total.");
    rl_prom_u64(p, "rl_router_settles_total", rl_prom_labels(lab, sizeof(lab), "op", "adjust", NULL),
                sum.stats.adjusts);
    rl_prom_u64(p, "rl_router_settles_total",
                rl_prom_labels(lab, sizeof(lab), "op", "release", NULL), sum.stats.releases);
    rl_prom_family(p, "rl_router_late_replies_total", "counter",
                   "Node replies that came after the deadline had answered.");
    rl_prom_u64(p, "rl_router_late_replies_total", NULL, sum.stats.late_replies);
    rl_prom_family(p, "rl_router_node_waits_total", "counter",
                   "Requests that waited in the router for room at their node ([router] "
                   "node_window), sent in their connection's turn.");
    rl_prom_u64(p, "rl_router_node_waits_total", NULL, sum.stats.node_waits);
    rl_prom_family(p, "rl_router_node_wait_lost_total", "counter",
                   "Requests answered by policy while waiting for room at their node: their "
                   "kept bytes were written over.");
    rl_prom_u64(p, "rl_router_node_wait_lost_total", NULL, sum.stats.node_wait_lost);
    rl_prom_family(p, "rl_router_errors_total", "counter",
                   "ERROR replies and refusals, by kind: unauthorized (token does not allow "
                   "it), auth (connection closed for a missing or wrong AUTH), overloaded (too "
                   "many in flight), other.");
    rl_prom_u64(p, "rl_router_errors_total",
                rl_prom_labels(lab, sizeof(lab), "kind", "unauthorized", NULL),
                sum.stats.unauthorized);
    rl_prom_u64(p, "rl_router_errors_total", rl_prom_labels(lab, sizeof(lab), "kind", "auth", NULL),
                sum.stats.auth_failures);
    rl_prom_u64(p, "rl_router_errors_total",
                rl_prom_labels(lab, sizeof(lab), "kind", "overloaded", NULL), sum.stats.overloaded);
    rl_prom_u64(p, "rl_router_errors_total",
                rl_prom_labels(lab, sizeof(lab), "kind", "other", NULL), sum.stats.errors);

    for (size_t k = 0; k < sizeof(rmetrics_node) / sizeof(rmetrics_node[0]); k++) {
        rl_prom_family(p, rmetrics_node[k].name, rmetrics_node[k].type, rmetrics_node[k].help);
        for (const struct rl_upstream *u = r->upstreams; u != NULL; u = u->next) {
            struct rl_upstream_stats us;
            bool up;
            uint64_t v;

            rmetrics_node_sum(r, u->name, &us, &up);
            v = rmetrics_node[k].stat == SIZE_MAX
                    ? up
                    : *(const uint64_t *)((const char *)&us + rmetrics_node[k].stat);

            rl_prom_u64(p, rmetrics_node[k].name,
                        rl_prom_labels(lab, sizeof(lab), "node", u->name, NULL), v);
        }
    }
    rl_prom_family(p, "rl_router_node_shards", "gauge",
                   "Shards the node owns in this router's table.");
    for (size_t i = 0; r->map != NULL && i < r->map->nmembers; i++) {
        uint32_t n = 0;

        for (uint32_t sh = 0; sh < r->map->nshards; sh++) {
            n += r->map->owner[sh] == i;
        }
        rl_prom_u64(p, "rl_router_node_shards",
                    rl_prom_labels(lab, sizeof(lab), "node", r->map->members[i].name, NULL), n);
    }
    rl_prom_family(p, "rl_router_members", "gauge", "Nodes in the membership.");
    rl_prom_u64(p, "rl_router_members", NULL, r->view.nmembers);
    rl_prom_family(p, "rl_router_shards_unowned", "gauge",
                   "Shards with no reachable owner in the table (answered by failure policy).");
    rl_prom_u64(p, "rl_router_shards_unowned", NULL, r->unowned);
    rl_prom_family(p, "rl_router_assignment_version", "gauge",
                   "Version of the assignment znode in use; -1 when there is none.");
    rl_prom_f64(p, "rl_router_assignment_version", NULL, (double)r->view.asg_version);
    rl_prom_family(p, "rl_router_table_builds_total", "counter", "Shard tables built.");
    rl_prom_u64(p, "rl_router_table_builds_total", NULL, sum.stats.table_builds);
    rl_prom_family(p, "rl_router_table_info", "gauge",
                   "The digest of the shard table in use (as STATS table_digest, in hex); "
                   "routers that route alike show the same.");
    snprintf(digest, sizeof(digest), "%016llx", (unsigned long long)r->table_digest);
    rl_prom_u64(p, "rl_router_table_info", rl_prom_labels(lab, sizeof(lab), "digest", digest, NULL),
                1);
    rl_prom_family(p, "rl_router_ready", "gauge", "1 while /readyz answers 200.");
    {
        char why[160];

        rl_prom_u64(p, "rl_router_ready", NULL, rl_router_ready(r, why, sizeof(why)) ? 1 : 0);
    }

    rl_shed_metrics(r, p);
    rl_reqlog_metrics(r->log, p);
    rl_listener_metrics_of(&sum.cs, p);
    rl_prom_family(p, "rl_router_workers", "gauge", "Worker threads serving clients.");
    rl_prom_u64(p, "rl_router_workers", NULL, r->group->n);
    rl_prom_family(p, "rl_router_worker_connections", "gauge",
                   "Client connections open now, by worker thread.");
    for (uint32_t i = 0; i < (r->group->n); i++) {
        const struct rl_router *w = r->group->routers[i];
        char idx[16];
        struct rl_listener_stats cs;

        snprintf(idx, sizeof(idx), "%u", i);
        if (w != r) {
            pthread_mutex_lock((pthread_mutex_t *)&w->mu);
        }
        rl_listener_stats(&w->listener, &cs);
        if (w != r) {
            pthread_mutex_unlock((pthread_mutex_t *)&w->mu);
        }
        rl_prom_u64(p, "rl_router_worker_connections",
                    rl_prom_labels(lab, sizeof(lab), "worker", idx, NULL), cs.connections);
    }
    rl_rules_metrics(r->opts.rules, r->conf->rules_digest, p);
}
