/*
 * rls_metrics: what the gRPC front counts beyond its totals (rls_front.h: rl_rls_counts):
 * calls by domain and result, upstream's detailed_metric hits by full key, streams refused
 * and reset; and their Prometheus families. Each worker counts in its own tables (bounded:
 * RLS_DOMAINS_MAX domains, RLS_DETAILED_MAX full keys; what comes past them is counted as
 * dropped), new entries inserted under the worker's mu so /metrics can copy every worker's
 * tables; the page's families are formatted on the HTTP thread (rl_prom_defer).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "metrics.h"
#include "rls_front.h"
#include "router_int.h"

#define RLS_DOMAINS_MAX 256u     /* domain series (configured domains, and "") */
#define RLS_DETAILED_MAX 1000u   /* detailed_metric full keys, per worker and per page */
#define RLS_DETAILED_KEY_MAX 256 /* bytes of a full key; a longer one: its head and a hash */

static const char *const rls_results[RL_RLS_RESULTS] = {
    [RL_RLS_OK] = "ok",         [RL_RLS_OVER_LIMIT] = "over_limit",
    [RL_RLS_SHADOW] = "shadow", [RL_RLS_UNKNOWN_DOMAIN] = "unknown_domain",
    [RL_RLS_ERROR] = "error",
};

static const char *const rls_detailed_results[RL_RLS_DETAILED_RESULTS] = {
    [RL_RLS_WITHIN_LIMIT] = "within_limit",
    [RL_RLS_DETAILED_OVER] = "over_limit",
    [RL_RLS_SHADOW_MODE] = "shadow_mode",
};

struct rls_mentry {
    char *name;
    uint64_t v[RL_RLS_RESULTS];
};

/* name -> counters, open addressing, never shrinks; at most max names. */
struct rls_mtable {
    struct rls_mentry *e;
    uint32_t cap, n, max;
    uint64_t dropped; /* counts that found the table full */
};

struct rl_rls_metrics {
    struct rls_mtable domains, detailed;
};

static uint64_t *
mtable_get(struct rl_router *r, struct rls_mtable *t, const char *name, size_t len)
{
    uint64_t h = XXH3_64bits(name, len);
    uint32_t i;

    for (i = (uint32_t)(h % t->cap); t->e[i].name != NULL; i = (i + 1) % t->cap) {
        if (strnlen(t->e[i].name, len + 1) == len && memcmp(t->e[i].name, name, len) == 0) {
            return t->e[i].v;
        }
    }
    if (t->n >= t->max) {
        return NULL;
    }
    {
        char *copy = malloc(len + 1);

        if (copy == NULL) {
            return NULL;
        }
        memcpy(copy, name, len);
        copy[len] = '\0';
        /* /metrics copies the table under mu, from another thread */
        pthread_mutex_lock(&r->mu);
        t->e[i].name = copy;
        t->n++;
        pthread_mutex_unlock(&r->mu);
    }
    return t->e[i].v;
}

static struct rl_rls_metrics *
metrics_of(struct rl_router *r)
{
    if (r->rls->metrics == NULL) {
        struct rl_rls_metrics *m = calloc(1, sizeof(*m));

        if (m == NULL) {
            return NULL;
        }
        m->domains.max = RLS_DOMAINS_MAX;
        m->detailed.max = RLS_DETAILED_MAX;
        m->domains.cap = 2 * RLS_DOMAINS_MAX;
        m->detailed.cap = 2 * RLS_DETAILED_MAX;
        m->domains.e = calloc(m->domains.cap, sizeof(*m->domains.e));
        m->detailed.e = calloc(m->detailed.cap, sizeof(*m->detailed.e));
        if (m->domains.e == NULL || m->detailed.e == NULL) {
            free(m->domains.e);
            free(m->detailed.e);
            free(m);
            return NULL;
        }
        pthread_mutex_lock(&r->mu);
        r->rls->metrics = m;
        pthread_mutex_unlock(&r->mu);
    }
    return r->rls->metrics;
}

void
rl_rls_metrics_call(struct rl_router *r, const char *domain, enum rl_rls_result result)
{
    struct rl_rls_metrics *m = metrics_of(r);
    uint64_t *v;

    if (m == NULL) {
        return;
    }
    v = mtable_get(r, &m->domains, domain, strlen(domain));
    if (v == NULL) {
        __atomic_fetch_add(&m->domains.dropped, 1, __ATOMIC_RELAXED);
        return;
    }
    __atomic_fetch_add(&v[result], 1, __ATOMIC_RELAXED);
}

void
rl_rls_metrics_detailed(struct rl_router *r, const char *key, size_t len,
                        enum rl_rls_detailed_result result, uint64_t hits)
{
    struct rl_rls_metrics *m = metrics_of(r);
    char cut[RLS_DETAILED_KEY_MAX + 1];
    uint64_t *v;

    if (m == NULL) {
        return;
    }
    if (len > RLS_DETAILED_KEY_MAX) {
        /* its head, and a hash of the whole: distinct keys stay distinct */
        memcpy(cut, key, RLS_DETAILED_KEY_MAX - 17);
        snprintf(cut + RLS_DETAILED_KEY_MAX - 17, 18, "#%016" PRIx64, XXH3_64bits(key, len));
        key = cut;
        len = RLS_DETAILED_KEY_MAX;
    }
    v = mtable_get(r, &m->detailed, key, len);
    if (v == NULL) {
        __atomic_fetch_add(&m->detailed.dropped, hits, __ATOMIC_RELAXED);
        return;
    }
    __atomic_fetch_add(&v[result], hits, __ATOMIC_RELAXED);
}

void
rl_rls_metrics_free(struct rl_rls_metrics *m)
{
    if (m == NULL) {
        return;
    }
    for (uint32_t i = 0; i < m->domains.cap; i++) {
        free(m->domains.e[i].name);
    }
    for (uint32_t i = 0; i < m->detailed.cap; i++) {
        free(m->detailed.e[i].name);
    }
    free(m->domains.e);
    free(m->detailed.e);
    free(m);
}

/* ---- /metrics ------------------------------------------------------------------------------ */

struct rls_snap_entry {
    const char *name; /* into the snapshot's block */
    uint64_t v[RL_RLS_RESULTS];
};

/* Every worker's tables copied: domains [0, nd), full keys [nd, nd + nk), then the names. */
struct rls_snap {
    size_t nd, nk;
    uint64_t domains_dropped, detailed_dropped;
    uint64_t streams[RL_RLS_STREAM_EVENTS];
    struct rls_snap_entry e[];
};

static int
snap_cmp(const void *a, const void *b)
{
    return strcmp(((const struct rls_snap_entry *)a)->name,
                  ((const struct rls_snap_entry *)b)->name);
}

/* Sorts e[0, n) by name and sums equal names into one: the count left. */
static size_t
snap_merge(struct rls_snap_entry *e, size_t n)
{
    size_t out = 0;

    qsort(e, n, sizeof(*e), snap_cmp);
    for (size_t i = 0; i < n; i++) {
        if (out > 0 && strcmp(e[out - 1].name, e[i].name) == 0) {
            for (size_t k = 0; k < RL_RLS_RESULTS; k++) {
                e[out - 1].v[k] += e[i].v[k];
            }
        } else {
            e[out++] = e[i];
        }
    }
    return out;
}

/* On the HTTP thread. */
static void
rls_metrics_fmt(const void *arg, struct rl_prom *p)
{
    struct rls_snap *sn = (struct rls_snap *)arg;
    static const char *const events[RL_RLS_STREAM_EVENTS] = {
        [RL_RLS_STREAM_REFUSED] = "refused",
        [RL_RLS_STREAM_RESET_BY_SERVER] = "reset_by_server",
        [RL_RLS_STREAM_RESET_BY_CLIENT] = "reset_by_client",
        [RL_RLS_CONN_CALM] = "goaway_calm",
    };
    size_t nd = snap_merge(sn->e, sn->nd);
    struct rls_snap_entry *k = sn->e + sn->nd;
    size_t nk = snap_merge(k, sn->nk);
    char lab[768];

    rl_prom_family(p, "rl_router_rls_domain_calls_total", "counter",
                   "ShouldRateLimit calls answered, by domain (of envoy_config; \"\": a domain "
                   "it does not have, or a call refused before its domain was read) and result: "
                   "ok, over_limit, shadow (OK, but only because of shadow_mode), "
                   "unknown_domain, error (a gRPC status other than OK).");
    for (size_t i = 0; i < nd; i++) {
        for (size_t r = 0; r < RL_RLS_RESULTS; r++) {
            rl_prom_u64(p, "rl_router_rls_domain_calls_total",
                        rl_prom_labels(lab, sizeof(lab), "domain", sn->e[i].name, "result",
                                       rls_results[r], NULL),
                        sn->e[i].v[r]);
        }
    }
    rl_prom_family(p, "rl_router_rls_domain_calls_dropped_total", "counter",
                   "ShouldRateLimit calls not counted by domain: more than 256 domains seen "
                   "by a worker.");
    rl_prom_u64(p, "rl_router_rls_domain_calls_dropped_total", NULL, sn->domains_dropped);
    rl_prom_family(p, "rl_router_rls_detailed_hits_total", "counter",
                   "Hits of descriptors with detailed_metric: true, by full key (domain.key_value"
                   "...) and result: within_limit, over_limit, shadow_mode. At most 1000 keys.");
    for (size_t i = 0; i < nk; i++) {
        if (i >= RLS_DETAILED_MAX) {
            for (size_t r = 0; r < RL_RLS_DETAILED_RESULTS; r++) {
                sn->detailed_dropped += k[i].v[r];
            }
            continue;
        }
        for (size_t r = 0; r < RL_RLS_DETAILED_RESULTS; r++) {
            rl_prom_u64(p, "rl_router_rls_detailed_hits_total",
                        rl_prom_labels(lab, sizeof(lab), "key", k[i].name, "result",
                                       rls_detailed_results[r], NULL),
                        k[i].v[r]);
        }
    }
    rl_prom_family(p, "rl_router_rls_detailed_dropped_total", "counter",
                   "Hits of detailed_metric descriptors whose full key found no room among "
                   "the 1000 counted.");
    rl_prom_u64(p, "rl_router_rls_detailed_dropped_total", NULL, sn->detailed_dropped);
    rl_prom_family(p, "rl_router_rls_streams_total", "counter",
                   "HTTP/2 streams of the gRPC front by event: refused (past 100 at once on a "
                   "connection: REFUSED_STREAM), reset_by_server (any other RST_STREAM sent), "
                   "reset_by_client (RST_STREAM received); goaway_calm counts connections "
                   "ended with GOAWAY ENHANCE_YOUR_CALM (header limits broken again and again, "
                   "or a flood of control frames).");
    for (size_t e = 0; e < RL_RLS_STREAM_EVENTS; e++) {
        rl_prom_u64(p, "rl_router_rls_streams_total",
                    rl_prom_labels(lab, sizeof(lab), "event", events[e], NULL), sn->streams[e]);
    }
}

/* The workers' routers: r alone, or every worker of its process. */
static uint32_t
workers_of(const struct rl_router *r)
{
    return r->group->n;
}

static struct rl_router *
worker(struct rl_router *r, uint32_t i)
{
    return r->group->routers[i];
}

/* Counts what a copy of every worker's tables takes (names included). */
static void
snap_size(const struct rl_rls_metrics *m, size_t *n, size_t *names)
{
    const struct rls_mtable *t[2] = {&m->domains, &m->detailed};

    for (size_t j = 0; j < 2; j++) {
        for (uint32_t i = 0; i < t[j]->cap; i++) {
            if (t[j]->e[i].name != NULL) {
                (*n)++;
                *names += strlen(t[j]->e[i].name) + 1;
            }
        }
    }
}

/* Copies table t into sn->e from *at, names to *np. */
static void
snap_copy(const struct rls_mtable *t, struct rls_snap_entry *e, size_t *at, char **np)
{
    for (uint32_t i = 0; i < t->cap; i++) {
        size_t len;

        if (t->e[i].name == NULL) {
            continue;
        }
        len = strlen(t->e[i].name) + 1;
        memcpy(*np, t->e[i].name, len);
        e[*at].name = *np;
        for (size_t k = 0; k < RL_RLS_RESULTS; k++) {
            e[*at].v[k] = __atomic_load_n(&t->e[i].v[k], __ATOMIC_RELAXED);
        }
        *np += len;
        (*at)++;
    }
}

void
rl_rls_metrics(struct rl_router *r, struct rl_prom *p)
{
    uint32_t nw = workers_of(r);
    size_t n = 0, names = 0, nd = 0, nk = 0;
    struct rls_snap *sn;
    char *np;

    /* r's mu is held by the caller; every other worker's is taken for its part */
    for (uint32_t i = 0; i < nw; i++) {
        struct rl_router *w = worker(r, i);

        if (w == NULL) {
            continue;
        }
        if (w != r) {
            pthread_mutex_lock(&w->mu);
        }
        if (w->rls->metrics != NULL) {
            snap_size(w->rls->metrics, &n, &names);
        }
        if (w != r) {
            pthread_mutex_unlock(&w->mu);
        }
    }
    /* Room for entries added between the two passes: a worker adds at most its cap. */
    n += 64;
    names += 64 * (RLS_DETAILED_KEY_MAX + 1);
    sn = calloc(1, sizeof(*sn) + n * sizeof(sn->e[0]) + names);
    if (sn == NULL) {
        rl_prom_defer(p, rls_metrics_fmt, NULL);
        return;
    }
    /* domains first, then the full keys: two passes over the workers */
    np = (char *)&sn->e[n];
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < nw; i++) {
            struct rl_router *w = worker(r, i);
            const struct rl_rls_metrics *m;
            size_t before = pass == 0 ? nd : nd + nk, at = before, need = 0, nn = 0;

            if (w == NULL) {
                continue;
            }
            if (w != r) {
                pthread_mutex_lock(&w->mu);
            }
            m = w->rls->metrics;
            if (m != NULL) {
                const struct rls_mtable *t = pass == 0 ? &m->domains : &m->detailed;

                for (uint32_t k = 0; k < t->cap; k++) {
                    if (t->e[k].name != NULL) {
                        need++;
                        nn += strlen(t->e[k].name) + 1;
                    }
                }
                /* what does not fit (added since the count) waits for the next scrape */
                if (at + need <= n && (size_t)(np - (char *)&sn->e[n]) + nn <= names) {
                    snap_copy(t, sn->e, &at, &np);
                }
                if (pass == 0) {
                    sn->domains_dropped += __atomic_load_n(&t->dropped, __ATOMIC_RELAXED);
                } else {
                    sn->detailed_dropped += __atomic_load_n(&t->dropped, __ATOMIC_RELAXED);
                }
            }
            if (pass == 0) {
                for (size_t e = 0; e < RL_RLS_STREAM_EVENTS; e++) {
                    sn->streams[e] += __atomic_load_n(&w->rls->n.streams[e], __ATOMIC_RELAXED);
                }
            }
            if (w != r) {
                pthread_mutex_unlock(&w->mu);
            }
            if (pass == 0) {
                nd += at - before;
            } else {
                nk += at - before;
            }
        }
    }
    sn->nd = nd;
    sn->nk = nk;
    rl_prom_defer(p, rls_metrics_fmt, sn);
}
