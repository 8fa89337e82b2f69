/*
 * rproc: the router process around its workers (rproc.h): creating and closing it, and the
 * state there is one of per process, kept here under state_mu: the latest membership,
 * assignment, ZooKeeper state and envoy configuration, which workers copy when woken
 * (rproc_worker.c), rules pushes, SIGHUP, the request log's writer, /metrics and /readyz.
 * The acceptor is rproc_accept.c; the workers and their mailboxes rproc_worker.c; the front
 * table fronts.c.
 */
#include "rproc.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "reqlog.h"
#include "rproc_int.h"
#include "zkm.h"

uint32_t
rl_rproc_default_workers(const struct rl_conf *conf)
{
    unsigned n;

    if (conf->router_workers != 0) {
        return conf->router_workers;
    }
    n = uv_available_parallelism();
    return n == 0 ? 1 : n > RL_CONF_WORKERS_MAX ? RL_CONF_WORKERS_MAX : n;
}

uint32_t
rl_rproc_workers(const struct rl_rproc *p)
{
    return p->nworkers;
}

void
rl_rproc_set_envoy(struct rl_rproc *p, struct rl_envoy_config *sh)
{
    struct rl_envoy_config *old;

    rl_envoy_config_hold(sh);
    pthread_mutex_lock(&p->state_mu);
    old = p->envoy;
    p->envoy = sh;
    pthread_mutex_unlock(&p->state_mu);
    rl_envoy_config_drop(old);
    for (uint32_t i = 0; !p->closing && i < p->nworkers; i++) {
        struct rproc_worker *w = &p->workers[i];

        pthread_mutex_lock(&w->mu);
        w->envoy_new = true;
        pthread_mutex_unlock(&w->mu);
        uv_async_send(&w->wake);
    }
}

static void
rproc_stale_cb(uv_async_t *a)
{
    struct rl_rproc *p = a->data;

    if (!p->closing && p->opts.on_stale != NULL) {
        p->opts.on_stale(p->opts.arg);
    }
}

static void
rproc_handle_closed(uv_handle_t *h)
{
    struct rl_rproc *p = h->data;

    if (--p->handles == 0) {
        rl_envoy_config_drop(p->envoy);
        pthread_mutex_destroy(&p->state_mu);
        rl_conn_shared_deinit(&p->shared);
        free(p->members);
        free(p->asg);
        free(p->group.routers);
        free(p);
    }
}

/* A new process, nothing started: its fields, the workers' group, the shared caps. NULL:
 * out of memory. */
static struct rl_rproc *
rproc_new(uv_loop_t *loop, const struct rl_conf *conf, const struct rl_rproc_opts *opts)
{
    struct rl_rproc *p = calloc(1, sizeof(*p));

    if (p == NULL) {
        return NULL;
    }
    p->loop = loop;
    p->opts = *opts;
    p->conf = conf;
    p->lfd = -1;
    for (int k = 0; k < RL_FRONT_KINDS; k++) {
        p->fronts[k].p = p;
        p->fronts[k].kind = (enum rl_front_kind)k;
        p->fronts[k].fd = -1;
        p->fronts[k].count = &p->group.fronts[k];
    }
    p->envoy = opts->router.envoy;
    if (p->envoy != NULL) {
        rl_envoy_config_hold(p->envoy);
    }
    p->zk_state = RL_ROUTER_ZK_NONE;
    p->asg_version = -1;
    p->nworkers = opts->workers != 0 ? opts->workers : rl_rproc_default_workers(conf);
    pthread_mutex_init(&p->state_mu, NULL);
    p->workers = calloc(p->nworkers, sizeof(*p->workers));
    p->group.n = p->nworkers;
    p->group.routers = calloc(p->nworkers, sizeof(*p->group.routers));
    p->group.threads = true;
    p->group.accept_errors = &p->accept_errors;
    p->group.zk_expiries = &p->zk_expiries;
    p->group.shared = &p->shared;
    if (p->workers == NULL || p->group.routers == NULL || rl_conn_shared_init(&p->shared) != 0) {
        free(p->workers);
        free(p->group.routers);
        rl_envoy_config_drop(p->envoy);
        pthread_mutex_destroy(&p->state_mu);
        free(p);
        return NULL;
    }
    return p;
}

/* The request log's writer, when conf has one: every worker feeds it. */
static int
rproc_open_log(struct rl_rproc *p, const struct rl_conf *conf)
{
    int rc;

    if (conf->request_log == NULL || conf->request_log[0] == '\0') {
        return 0;
    }
    rc = rl_reqlog_create(&p->log, p->loop, conf->request_log, conf->log_sample);
    if (rc == 0) {
        rl_reqlog_set_rotation(p->log, conf->log_max_size, conf->log_keep);
    }
    return rc;
}

/* Every worker's copy of the config, loaded here so that a failure says so at start. */
static int
rproc_load_configs(struct rl_rproc *p, const struct rl_conf *conf, char *err, size_t errlen)
{
    const char *path = p->opts.config_path;

    for (uint32_t i = 0; i < p->nworkers; i++) {
        struct rproc_worker *w = &p->workers[i];
        char cerr[256];

        if (rl_conf_load(path, &w->conf, cerr, sizeof(cerr)) != 0) {
            if (err != NULL) {
                snprintf(err, errlen, "worker %u: %s", i, cerr);
            }
            return -EINVAL;
        }
        if (w->conf->rules_digest != conf->rules_digest) {
            if (err != NULL) {
                snprintf(err, errlen, "%s changed while starting: start again", path);
            }
            return -EAGAIN;
        }
    }
    return 0;
}

/* Undoes what a failed rl_rproc_create did, the first `started` workers started. */
static void
rproc_unwind(struct rl_rproc *p, uint32_t started)
{
    rproc_stop_workers(p, started);
    for (uint32_t i = 0; i < p->nworkers; i++) {
        rl_conf_destroy(p->workers[i].conf);
    }
    if (p->log != NULL) {
        rl_reqlog_close(p->log);
    }
    rproc_accept_unlisten(p);
    free(p->workers);
    free(p->group.routers);
    rl_envoy_config_drop(p->envoy);
    pthread_mutex_destroy(&p->state_mu);
    rl_conn_shared_deinit(&p->shared);
    free(p);
}

int
rl_rproc_create(struct rl_rproc **out, uv_loop_t *loop, const struct rl_conf *conf,
                const struct rl_rproc_opts *opts, char *err, size_t errlen)
{
    struct rl_rproc *p;
    uint32_t started = 0;
    int rc;

    if (err != NULL && errlen > 0) {
        err[0] = '\0';
    }
    p = rproc_new(loop, conf, opts);
    if (p == NULL) {
        return -ENOMEM;
    }
    rc = rproc_open_log(p, conf);
    if (rc == 0) {
        rc = rproc_load_configs(p, conf, err, errlen);
    }
    if (rc == 0) {
        rc = rproc_start_workers(p, &started, err, errlen);
    }
    /* Listening last: a client that connects finds every worker ready. */
    if (rc == 0) {
        rc = rproc_accept_listen(p, conf, err, errlen);
    }
    if (rc != 0) {
        rproc_unwind(p, started);
        return rc;
    }
    rproc_accept_start(p);
    uv_async_init(loop, &p->stale, rproc_stale_cb);
    p->stale.data = p;
    p->handles++;
    rl_log_info("%u workers serving", p->nworkers);
    *out = p;
    return 0;
}

void
rl_rproc_set_members(struct rl_rproc *p, const struct rl_member *members, size_t n)
{
    struct rl_member *copy = malloc((n ? n : 1) * sizeof(*copy));

    if (copy == NULL) {
        rl_log_error("membership update lost: out of memory");
        return;
    }
    if (n > 0) {
        memcpy(copy, members, n * sizeof(*copy));
    }
    pthread_mutex_lock(&p->state_mu);
    free(p->members);
    p->members = copy;
    p->nmembers = n;
    pthread_mutex_unlock(&p->state_mu);
    rproc_post_all(p, true, false, false, false);
    rproc_accept_open(p); /* the first view: each worker takes it before any socket */
}

void
rl_rproc_set_assignment(struct rl_rproc *p, const char *text, size_t len, int64_t version)
{
    char *copy = malloc(len ? len : 1);

    if (copy == NULL) {
        rl_log_error("assignment update lost: out of memory");
        return;
    }
    if (len > 0) {
        memcpy(copy, text, len);
    }
    pthread_mutex_lock(&p->state_mu);
    free(p->asg);
    p->asg = copy;
    p->asg_len = len;
    p->asg_version = version;
    pthread_mutex_unlock(&p->state_mu);
    rproc_post_all(p, false, true, false, false);
}

void
rl_rproc_slices_changed(struct rl_rproc *p)
{
    if (p->closing) {
        return;
    }
    for (uint32_t i = 0; i < p->nworkers; i++) {
        struct rproc_worker *w = &p->workers[i];

        pthread_mutex_lock(&w->mu);
        w->slices_new = true;
        pthread_mutex_unlock(&w->mu);
        uv_async_send(&w->wake);
    }
}

void
rl_rproc_set_zookeeper(struct rl_rproc *p, const char *addr, int state)
{
    pthread_mutex_lock(&p->state_mu);
    snprintf(p->zk_addr, sizeof(p->zk_addr), "%s", addr);
    p->zk_state = state;
    __atomic_fetch_add(&p->zk_expiries, state == RL_ZKM_EXPIRED, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&p->state_mu);
    rproc_post_all(p, false, false, true, false);
}

void
rl_rproc_hup(struct rl_rproc *p)
{
    if (p->log != NULL) {
        rl_reqlog_reopen(p->log);
    }
    rproc_post_all(p, false, false, false, true);
}

void
rl_rproc_rules_from_zk(struct rl_rproc *p, const char *text, size_t len, int64_t version)
{
    if (p->closing) {
        return;
    }
    for (uint32_t i = 0; i < p->nworkers; i++) {
        struct rproc_worker *w = &p->workers[i];
        char *copy = malloc(len ? len : 1);

        if (copy == NULL) {
            rl_log_error("worker %u: rules version %lld lost: out of memory", i,
                         (long long)version);
            continue;
        }
        if (len > 0) {
            memcpy(copy, text, len);
        }
        pthread_mutex_lock(&w->mu);
        free(w->zk_rules); /* the newest supersedes one not taken yet */
        w->zk_rules = copy;
        w->zk_rules_len = len;
        w->zk_rules_version = version;
        pthread_mutex_unlock(&w->mu);
        uv_async_send(&w->wake);
    }
}

void
rl_rproc_metrics(struct rl_rproc *p, struct rl_prom *prom)
{
    struct rl_router *r;

    if (p->closing) {
        return;
    }
    r = p->workers[0].router;
    pthread_mutex_lock(&r->mu);
    rl_router_metrics(r, prom);
    pthread_mutex_unlock(&r->mu);
}

bool
rl_rproc_ready(struct rl_rproc *p, char *why, size_t len)
{
    bool ok = true;

    if (p->closing) {
        snprintf(why, len, "shutting down");
        return false;
    }
    /* Ready when every worker is: each has its own connections to the nodes. */
    for (uint32_t i = 0; i < p->nworkers && ok; i++) {
        struct rl_router *r = p->workers[i].router;

        pthread_mutex_lock(&r->mu);
        ok = rl_router_ready(r, why, len);
        pthread_mutex_unlock(&r->mu);
    }
    return ok;
}

void
rl_rproc_close(struct rl_rproc *p)
{
    if (p->closing) {
        return;
    }
    p->closing = true;
    rproc_accept_close(p, rproc_handle_closed);
    uv_close((uv_handle_t *)&p->stale, rproc_handle_closed);
    rproc_stop_workers(p, p->nworkers);
    if (p->log != NULL) {
        rl_reqlog_close(p->log);
        p->log = NULL;
    }
    free(p->workers);
    p->workers = NULL;
}
