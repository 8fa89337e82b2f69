/*
 * shed: where the router sheds hot keys, between forward.c and the two structures of
 * denycache.h (LIMITED answers remembered) and hotkeys.h (the hot (service, user) keys).
 * forward.c calls rl_shed_check before routing a CHECK, rl_shed_sent once it is sent and
 * rl_shed_reply with the node's reply (rl_shed_fail_lookup when a forwarded one is to be
 * answered by policy: a refusal outlives its node); table.c calls rl_shed_table before a new
 * shard table takes over and rl_shed_rules when the rules changed. Also the backstop's
 * allocation, its start-up notice and its counters (backstop.h). Also the HOT op (answered by the
 * router itself, filtered to the client's services like THROTTLED), the deny_* STATS pairs
 * and the metric families. Everything is per struct rl_router (one loop); the metrics and
 * HOT are sums and merges that several loops' routers can add up.
 *
 * What may be cached (docs/OPERATIONS.md, "The deny cache"): a node's LIMITED under a rule
 * in enforce mode none of whose tiers is a sliding_window_log (a log the node's memory cap
 * degrades into a counter may allow earlier than the log said), and under which no client may
 * refund (rl_conf_rule_refundable: `adjust`). Not for the decision itself
 * (the node's) nor the routing (forward.c).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "metrics.h"
#include "reqlog.h"
#include "router_int.h"

int
rl_shed_init(struct rl_router *r)
{
    if (rl_deny_init(&r->deny, r->conf->deny_cache, r->conf->shards) != 0) {
        return -ENOMEM;
    }
    if (rl_backstop_init(&r->bstop, RL_BACKSTOP_ENTRIES, r->group != NULL ? r->group->n : 1) !=
        0) {
        rl_deny_deinit(&r->deny);
        return -ENOMEM;
    }
    if (r->conf->hot_keys) {
        r->hot = malloc(sizeof(*r->hot));
        if (r->hot == NULL) {
            rl_deny_deinit(&r->deny);
            rl_backstop_deinit(&r->bstop);
            return -ENOMEM;
        }
        rl_hot_init(r->hot, uv_now(r->loop));
        r->hot_pub = malloc(sizeof(*r->hot_pub));
        if (r->hot_pub == NULL) {
            free(r->hot);
            r->hot = NULL;
            rl_deny_deinit(&r->deny);
            rl_backstop_deinit(&r->bstop);
            return -ENOMEM;
        }
        *r->hot_pub = *r->hot;
    }
    return 0;
}

void
rl_shed_deinit(struct rl_router *r)
{
    rl_deny_deinit(&r->deny);
    rl_backstop_deinit(&r->bstop);
    free(r->hot);
    r->hot = NULL;
    free(r->hot_pub);
    r->hot_pub = NULL;
}

/* hot_timer: copies r's sketch for other threads when keys were counted since the last copy
 * (on r's thread, under r's mu). */
void
rl_shed_publish_fire(uv_timer_t *t)
{
    struct rl_router *r = t->data;

    if (r->hot == NULL || !r->hot_dirty) {
        return;
    }
    pthread_mutex_lock(&r->mu);
    *r->hot_pub = *r->hot;
    pthread_mutex_unlock(&r->mu);
    r->hot_dirty = false;
}

/*
 * The hot keys of r's whole process, as of now_ms, into out: r's own sketch live when own
 * (the caller is on r's thread), else as r last published it (the caller holds r's mu, as
 * /metrics does), merged with every other worker's published copy (each read under its mu).
 * Returns false when out could not be built (memory; out is then r's alone or empty).
 */
static bool
shed_hot_merged(struct rl_router *r, bool own, struct rl_hot *out, uint64_t now_ms)
{
    struct rl_hot *tmp = NULL;

    *out = own ? *r->hot : *r->hot_pub;
    rl_hot_decay(out, now_ms);
    if (r->group->n == 1) {
        return true; /* r alone */
    }
    tmp = malloc(sizeof(*tmp));
    if (tmp == NULL) {
        return false;
    }
    for (uint32_t i = 0; i < r->group->n; i++) {
        struct rl_router *w = r->group->routers[i];

        if (w == NULL || w == r || w->hot_pub == NULL) {
            continue;
        }
        pthread_mutex_lock(&w->mu);
        *tmp = *w->hot_pub;
        pthread_mutex_unlock(&w->mu);
        rl_hot_decay(tmp, now_ms);
        rl_hot_merge(out, tmp);
    }
    free(tmp);
    return true;
}

/* Whether a LIMITED under rule may be remembered: enforced, no tier whose refusal the node
 * could take back early (a sliding log degraded under the memory cap, a concurrency tier
 * whose slots a RELEASE frees), and no client that may refund under it through any router (a
 * refund gives back what the refusal counted on). */
static bool
shed_cacheable(const struct rl_conf *conf, const struct rl_rule *rule)
{
    if (rule->shadow || rl_conf_rule_refundable(conf, rule)) {
        return false;
    }
    for (uint32_t i = 0; i < rule->ntiers; i++) {
        if (conf->tiers[rule->first_tier + i].algo == RL_ALGO_SLIDING_WINDOW_LOG ||
            conf->tiers[rule->first_tier + i].algo == RL_ALGO_CONCURRENCY) { /* RELEASE */
            return false;
        }
    }
    return true;
}

static void
shed_log(struct rl_router *r, uint32_t shard, const char *node, uint64_t hash,
         const struct rl_wire_req *req)
{
    uint64_t loop_ms = uv_now(r->loop);

    /* As forward.c's log_answer: the wall clock re-anchored once a second. */
    if (r->log_anchor_real == 0 || loop_ms - r->log_anchor_loop >= 1000) {
        r->log_anchor_real = rl_clock_real_ms();
        r->log_anchor_loop = loop_ms;
    }
    rl_reqlog_add_ex(r->log, r->log_anchor_real + (loop_ms - r->log_anchor_loop), shard, node,
                     RL_WIRE_LIMITED, hash, req->service.ptr, req->service.len, req->user.ptr,
                     req->user.len < ROUTER_USER_LOGGED ? req->user.len : ROUTER_USER_LOGGED,
                     true);
}

/* The deny cache's refusal of req (a CHECK under rule, of shard, the user's hashes hash and
 * fp), if one still stands: true with rep filled (LIMITED, req's id). */
static bool
shed_lookup(struct rl_router *r, const struct rl_wire_req *req, const struct rl_rule *rule,
            uint32_t shard, uint64_t hash, uint64_t fp, struct rl_wire_check_reply *rep)
{
    struct rl_deny_key k;

    /* A refusal outlives its node (docs/OPERATIONS.md, "What a loss costs"): it is
     * answered whether the owner is reachable, lost, or another one now. */
    if (req->cost == 0 || !rl_deny_on(&r->deny)) {
        return false;
    }
    k.hash = hash;
    k.fp = fp;
    k.rule = rule->id;
    k.cost = req->cost;
    k.shard = shard;
    memset(rep, 0, sizeof(*rep));
    if (!rl_deny_lookup(&r->deny, &k, 0, 0, rep)) {
        return false;
    }
    rep->id = req->id;
    return true;
}

bool
rl_shed_check(struct rl_conn *conn, const struct rl_wire_req *req, const struct rl_rule *rule,
              uint32_t shard, uint64_t hash, const struct rl_upstream *u, uint64_t *fp)
{
    struct rl_router *r = conn->data;
    struct rl_wire_check_reply rep;

    if (!rl_deny_on(&r->deny) && r->hot == NULL) {
        return false;
    }
    *fp = rl_deny_fp(req->user.ptr, req->user.len);
    if (r->hot != NULL) {
        rl_hot_add(r->hot, hash, *fp, req->service.ptr, req->service.len, req->user.ptr,
                   req->user.len, uv_now(r->loop));
        r->hot_dirty = true;
    }
    if (!shed_lookup(r, req, rule, shard, hash, *fp, &rep)) {
        return false;
    }
    r->stats.checks++;
    rl_counts_answer(r, rule, RL_WIRE_LIMITED, r->batch_ns);
    if (r->log != NULL && rl_reqlog_sample(r->log)) {
        shed_log(r, shard, u != NULL ? u->name : "-", hash, req);
    }
    if (rl_wire_put_check_reply(&conn->out, &rep) != 0) {
        rl_conn_close(conn, UV_ENOMEM);
        return true;
    }
    rl_conn_mark(conn);
    return true;
}

bool
rl_shed_inline(struct rl_router *r, const struct rl_wire_req *req, const struct rl_rule *rule,
               uint32_t shard, uint64_t hash, const struct rl_upstream *u, uint64_t *fp,
               struct rl_wire_check_reply *rep)
{
    bool cached = rule != NULL && rl_deny_on(&r->deny); /* an inline limit: never cached */

    *fp = 0;
    if (!cached && r->hot == NULL) {
        return false;
    }
    *fp = rl_deny_fp(req->user.ptr, req->user.len);
    if (r->hot != NULL) {
        rl_hot_add(r->hot, hash, *fp, req->service.ptr, req->service.len, req->user.ptr,
                   req->user.len, uv_now(r->loop));
        r->hot_dirty = true;
    }
    if (!cached) {
        *fp = 0; /* nothing of it is to be cached */
        return false;
    }
    if (!shed_lookup(r, req, rule, shard, hash, *fp, rep)) {
        return false;
    }
    if (r->log != NULL && rl_reqlog_sample(r->log)) {
        shed_log(r, shard, u != NULL ? u->name : "-", hash, req);
    }
    return true;
}

bool
rl_shed_fail_lookup(struct rl_router *r, const struct rl_pending *p,
                    struct rl_wire_check_reply *rep)
{
    struct rl_deny_key k;

    if (!rl_deny_on(&r->deny) || p->rule == NULL || p->cost == 0 || p->deny_fp == 0 ||
        !rl_router_rule_current(r, p->rule)) {
        return false; /* (a rule since replaced: its id names another rule now) */
    }
    k.hash = p->key_hash;
    k.fp = p->deny_fp;
    k.rule = p->rule->id;
    k.cost = p->cost;
    k.shard = p->shard;
    if (!rl_deny_lookup(&r->deny, &k, 0, 0, rep)) {
        return false;
    }
    rep->id = p->client_id;
    return true;
}

void
rl_shed_sent(struct rl_pending *p, const struct rl_wire_req *req, uint64_t fp)
{
    p->deny_fp = fp;
    p->cost = req->cost;
}

void
rl_shed_reply(struct rl_router *r, const struct rl_pending *p, const struct rl_upstream *u,
              const struct rl_upconn *from, const struct rl_wire_reply *rep)
{
    struct rl_deny_key k;

    if (!rl_deny_on(&r->deny)) {
        return;
    }
    /* (A NOT_OWNER forgets nothing: a refusal stands through the shard's move.) */
    if (rep->op != RL_WIRE_OP_CHECK || rep->check.code != RL_WIRE_LIMITED ||
        p->rule == NULL ||                     /* an inline limit: never cached */
        !rl_router_rule_current(r, p->rule) || /* before shed_cacheable reads its tiers */
        !shed_cacheable(r->conf, p->rule)) {
        return;
    }
    /* Decided under the router's rules only if sent on a connection after its node was
     * known to hold them (upstream.h, rules_ok_ns): the node reads a connection's requests
     * in order, after the probe that said so. */
    if (from->rules_ok_ns == 0 || p->start_ns <= from->rules_ok_ns) {
        r->deny.st.unconfirmed++;
        return;
    }
    k.hash = p->key_hash;
    k.fp = p->deny_fp;
    k.rule = p->rule->id;
    k.cost = p->cost;
    k.shard = p->shard;
    (void)u;
    rl_deny_insert(&r->deny, &k, p->start_ns, uv_hrtime(), 0, &rep->check);
}

void
rl_shed_on_rules(void *arg, struct rl_upstream *u, const struct rl_upconn *from, bool ok)
{
    struct rl_router *r = arg;

    (void)from;
    if (u->epoch != u->epoch_seen) {
        /* The node changed its rules (upstream.c): what it refused before may not hold under
         * the new ones. Entries keep no node, so every one sent until now goes. */
        u->epoch_seen = u->epoch;
        rl_deny_forget_all(&r->deny, uv_hrtime());
    }
    if (ok) {
        r->deny.st.confirms++;
    } else {
        r->deny.st.mismatches++;
    }
}

void
rl_shed_upstream(struct rl_router *r, struct rl_upstream *u)
{
    if (rl_deny_on(&r->deny)) {
        rl_upstream_want_rules(u, (int64_t)r->conf->rules_digest);
    }
}

/* The upstream owning shard s in (map, owners), or NULL. */
static const struct rl_upstream *
shed_owner(const struct rl_shardmap *map, struct rl_upstream *const *owners, uint32_t s)
{
    uint32_t o;

    if (map == NULL || owners == NULL || s >= map->nshards) {
        return NULL;
    }
    o = map->owner[s];
    return o == RL_SHARDMAP_NONE || o >= map->nmembers ? NULL : owners[o];
}

void
rl_shed_table(struct rl_router *r, const struct rl_shardmap *map,
              struct rl_upstream *const *owners)
{
    /* A refusal stands through the shard's move (docs/OPERATIONS.md, "What a loss
     * costs"): a shard whose owner changes forgets nothing. Counted for STATS only. */
    if (!rl_deny_on(&r->deny) || r->map == NULL) {
        return;
    }
    for (uint32_t s = 0; s < map->nshards; s++) {
        if (shed_owner(r->map, r->owners, s) != shed_owner(map, owners, s)) {
            r->deny_moves++;
        }
    }
}

void
rl_shed_rules(struct rl_router *r, const struct rl_conf *old)
{
    if (old != NULL) {
        rl_backstop_rules(&r->bstop, old, r->conf); /* rule ids now name other rules */
    }
    if (!rl_deny_on(&r->deny)) {
        return;
    }
    /* Forgets what was answered under the old rules, and caches nothing more from a node
     * until it is known to hold the new ones. */
    rl_deny_forget_all(&r->deny, uv_hrtime());
    for (struct rl_upstream *u = r->upstreams; u != NULL; u = u->next) {
        rl_upstream_want_rules(u, (int64_t)r->conf->rules_digest);
    }
}

/* ---- HOT ---------------------------------------------------------------------------------- */

struct shed_filter {
    const struct rl_conf *conf;
    const struct rl_client_conf *cl; /* NULL or all services: no restriction */
    const struct rl_wire_str *service; /* ptr NULL: any */
};

/* Whether the client may see keys of the counter's service: it may CHECK under one of its
 * rules (as THROTTLED's episodes), and the request named that service or none. */
static bool
shed_keep(void *arg, const struct rl_hot_counter *c)
{
    const struct shed_filter *f = arg;

    if (f->service->ptr != NULL &&
        (f->service->len != c->slen || memcmp(f->service->ptr, c->service, c->slen) != 0)) {
        return false;
    }
    if (f->cl == NULL || f->cl->all_services) {
        return true;
    }
    for (size_t i = 0; i < f->conf->nrules; i++) {
        const struct rl_rule *rule = &f->conf->rules[i];

        if (rule->service_len == c->slen && memcmp(rule->service, c->service, c->slen) == 0 &&
            rl_conf_client_may(f->cl, rule)) {
            return true;
        }
    }
    return false;
}

void
rl_shed_hot_reply(struct rl_conn *c, const struct rl_wire_req *req)
{
    struct rl_router *r = c->data;
    const struct rl_hot_counter *top[RL_WIRE_TOP_MAX];
    struct rl_wire_hot_key keys[RL_WIRE_TOP_MAX];
    struct shed_filter f = {r->conf, c->principal, &req->service};
    struct rl_hot *all = NULL;
    size_t n = 0;

    if (r->hot != NULL) {
        rl_hot_decay(r->hot, uv_now(r->loop));
        all = malloc(sizeof(*all));
        if (all == NULL) {
            rl_reply_error(c, req->id, RL_WIRE_ERR_OVERLOADED, "no memory for the hot keys");
            return;
        }
        shed_hot_merged(r, true, all, uv_now(r->loop));
        n = rl_hot_top(all, top, req->top != 0 ? req->top : RL_HOT_TOP_DEFAULT, shed_keep, &f);
    }
    for (size_t i = 0; i < n; i++) {
        keys[i].service.ptr = top[i]->service;
        keys[i].service.len = top[i]->slen;
        keys[i].user.ptr = top[i]->user;
        keys[i].user.len = top[i]->ulen;
        keys[i].count = top[i]->count;
        keys[i].err = top[i]->err;
    }
    if (rl_wire_put_hot_reply(&c->out, req->id, RL_HOT_PERIOD_MS, keys, n) != 0) {
        free(all);
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    free(all);
    rl_conn_mark(c);
}

/* ---- STATS and metrics -------------------------------------------------------------------- */

/* The deny cache's counters summed over r's process (r's alone without one), as rmetrics.c
 * sums the workers' other counters: each is a 64-bit word only its worker writes, read here
 * without its help (a sum may miss an increment in progress, never tear one), under the
 * worker's mu only so that the worker's router is not freed meanwhile. The metrics thread
 * reads through worker 0's router, so r's own counters are read that way too. */
static void
shed_deny_sum(const struct rl_router *r, struct rl_deny_stats *sum)
{
    *sum = r->deny.st;
    for (uint32_t i = 0; i < r->group->n; i++) {
        struct rl_router *w = r->group->routers[i];

        if (w == NULL || w == r) {
            continue;
        }
        pthread_mutex_lock(&w->mu);
        sum->hits += w->deny.st.hits;
        sum->inserts += w->deny.st.inserts;
        sum->evictions += w->deny.st.evictions;
        sum->invalidations += w->deny.st.invalidations;
        sum->entries += w->deny.st.entries;
        sum->unconfirmed += w->deny.st.unconfirmed;
        sum->confirms += w->deny.st.confirms;
        sum->mismatches += w->deny.st.mismatches;
        pthread_mutex_unlock(&w->mu);
    }
}

/* The backstop's counters summed over r's process, as shed_deny_sum. */
static void
shed_backstop_sum(const struct rl_router *r, struct rl_backstop_stats *sum)
{
    *sum = r->bstop.st;
    for (uint32_t i = 0; i < r->group->n; i++) {
        struct rl_router *w = r->group->routers[i];

        if (w == NULL || w == r) {
            continue;
        }
        pthread_mutex_lock(&w->mu);
        sum->allowed += w->bstop.st.allowed;
        sum->limited += w->bstop.st.limited;
        sum->evictions += w->bstop.st.evictions;
        sum->entries += w->bstop.st.entries;
        pthread_mutex_unlock(&w->mu);
    }
}

size_t
rl_shed_stats(const struct rl_router *r, const char **keys, int64_t *vals, size_t n)
{
    struct rl_deny_stats sum;
    const struct rl_deny_stats *st = &sum;
    struct rl_backstop_stats bs;

    shed_deny_sum(r, &sum);
    shed_backstop_sum(r, &bs);
    keys[n] = "backstop_allowed";
    vals[n++] = (int64_t)bs.allowed;
    keys[n] = "backstop_limited";
    vals[n++] = (int64_t)bs.limited;
    keys[n] = "backstop_evictions";
    vals[n++] = (int64_t)bs.evictions;

    keys[n] = "deny_hits";
    vals[n++] = (int64_t)st->hits;
    keys[n] = "deny_inserts";
    vals[n++] = (int64_t)st->inserts;
    keys[n] = "deny_evictions";
    vals[n++] = (int64_t)st->evictions;
    keys[n] = "deny_invalidations";
    vals[n++] = (int64_t)st->invalidations;
    keys[n] = "deny_entries";
    vals[n++] = (int64_t)st->entries;
    keys[n] = "deny_unconfirmed";
    vals[n++] = (int64_t)st->unconfirmed;
    keys[n] = "deny_rules_confirms";
    vals[n++] = (int64_t)st->confirms;
    keys[n] = "deny_rules_mismatches";
    vals[n++] = (int64_t)st->mismatches;
    return n;
}

void
rl_shed_metrics(struct rl_router *r, struct rl_prom *p)
{
    struct rl_deny_stats sum;
    const struct rl_deny_stats *st = &sum;
    static const struct {
        const char *name, *help;
        size_t off;
    } fams[] = {
        {"rl_router_deny_cache_hits_total",
         "CHECKs answered LIMITED from the deny cache without asking the node.",
         offsetof(struct rl_deny_stats, hits)},
        {"rl_router_deny_cache_inserts_total", "Node LIMITED answers remembered.",
         offsetof(struct rl_deny_stats, inserts)},
        {"rl_router_deny_cache_evictions_total",
         "Remembered answers still in force dropped to make room.",
         offsetof(struct rl_deny_stats, evictions)},
        {"rl_router_deny_cache_invalidations_total",
         "Events that made the cache forget: a rules change (the router's or a node's).",
         offsetof(struct rl_deny_stats, invalidations)},
        {"rl_router_deny_cache_unconfirmed_total",
         "Node LIMITED answers not remembered: the node was not known to hold this router's "
         "rules when the request was sent.",
         offsetof(struct rl_deny_stats, unconfirmed)},
        {"rl_router_deny_cache_rules_confirms_total",
         "Rules probes a node answered holding this router's rules.",
         offsetof(struct rl_deny_stats, confirms)},
        {"rl_router_deny_cache_rules_mismatches_total",
         "Rules probes a node answered holding other rules (or refused).",
         offsetof(struct rl_deny_stats, mismatches)},
    };
    char lab[512];
    struct rl_backstop_stats bs;

    shed_backstop_sum(r, &bs);
    rl_prom_family(p, "rl_router_backstop_total", "counter",
                   "CHECKs of failure = open services the backstop judged while their owner "
                   "could not be reached, by result (allowed: FAIL_OPEN; limited: LIMITED).");
    rl_prom_u64(p, "rl_router_backstop_total", "result=\"allowed\"", bs.allowed);
    rl_prom_u64(p, "rl_router_backstop_total", "result=\"limited\"", bs.limited);
    rl_prom_family(p, "rl_router_backstop_evictions_total", "counter",
                   "Users the backstop forgot to make room (each may then be allowed afresh).");
    rl_prom_u64(p, "rl_router_backstop_evictions_total", NULL, bs.evictions);

    shed_deny_sum(r, &sum);
    for (size_t i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
        rl_prom_family(p, fams[i].name, "counter", fams[i].help);
        rl_prom_u64(p, fams[i].name, NULL, *(const uint64_t *)((const char *)st + fams[i].off));
    }
    rl_prom_family(p, "rl_router_deny_cache_entries", "gauge",
                   "Entries the deny cache holds at most ([router] deny_cache; 0: off).");
    rl_prom_u64(p, "rl_router_deny_cache_entries", NULL, st->entries);

    rl_prom_family(p, "rl_router_hot_key_requests", "gauge",
                   "The router's hottest (service, user) keys: requests counted, halved every "
                   "10 s (so about the last 20 s), at most 10 series; user cut to 64 bytes.");
    /* In a process, /metrics runs on the main thread with r's mu held (rproc.c): every
     * worker's sketch, r's included, is read as it was last published. */
    struct rl_hot *all = r->hot != NULL ? malloc(sizeof(*all)) : NULL;

    if (r->hot != NULL && all == NULL) {
        p->err = -ENOMEM;
    }
    if (all != NULL) {
        const struct rl_hot_counter *top[RL_HOT_METRICS_TOP];
        size_t n;

        shed_hot_merged(r, !r->group->threads, all, uv_hrtime() / 1000000u);
        n = rl_hot_top(all, top, RL_HOT_METRICS_TOP, NULL, NULL);
        for (size_t i = 0; i < n; i++) {
            bool dup = false;

            /* Two users alike in their first 64 bytes would repeat a series: the first
             * (the larger count) stands for both. */
            for (size_t j = 0; j < i && !dup; j++) {
                dup = top[j]->slen == top[i]->slen && top[j]->ulen == top[i]->ulen &&
                      memcmp(top[j]->service, top[i]->service, top[i]->slen) == 0 &&
                      memcmp(top[j]->user, top[i]->user, top[i]->ulen) == 0;
            }
            if (dup) {
                continue;
            }
            char svc[RL_WIRE_SERVICE_MAX + 1], user[RL_HOT_USER_MAX + 1];

            memcpy(svc, top[i]->service, top[i]->slen);
            svc[top[i]->slen] = '\0';
            memcpy(user, top[i]->user, top[i]->ulen);
            user[top[i]->ulen] = '\0';
            rl_prom_u64(p, "rl_router_hot_key_requests",
                        rl_prom_labels(lab, sizeof(lab), "service", svc, "user", user, NULL),
                        top[i]->count);
        }
    }
    free(all);
}
