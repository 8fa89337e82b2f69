/*
 * rproc_worker: the router process's workers (rproc.h). Each is a thread with its own libuv
 * loop and rl_router, handed the process's worker group (router_int.h) at create. Its
 * mailbox (under its mutex) holds what it has not picked up yet: sockets to adopt (the
 * acceptor's, rproc_hand), and flags saying which of the process's latest state to copy
 * (rproc.c keeps it); one uv_async per worker wakes it, and it copies the latest state then,
 * so that updates that came meanwhile coalesce. Not for accepting (rproc_accept.c) nor for
 * the state kept (rproc.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "front.h"
#include "log.h"
#include "rls_front.h"
#include "rproc_int.h"

void
rproc_front_gone(struct rl_rproc *p, enum rl_front_kind kind)
{
    __atomic_fetch_sub(&p->group.fronts[kind].conns, 1, __ATOMIC_RELAXED);
}

/* ---- the worker thread ------------------------------------------------------------------ */

static int
worker_apply_rules(void *arg, struct rl_conf **old)
{
    struct rproc_worker *w = arg;

    rl_router_rules_changed(w->router, *old);
    *old = NULL;
    return 0;
}

/* Copies the process's latest membership, assignment or ZooKeeper state into w's router. */
static void
worker_take_view(struct rproc_worker *w, bool members, bool asg, bool zk)
{
    struct rl_rproc *p = w->p;
    struct rl_member *mem = NULL;
    size_t n = 0, alen = 0;
    char *atext = NULL;
    int64_t aver = -1;
    int zstate = RL_ROUTER_ZK_NONE;
    char zaddr[256];

    pthread_mutex_lock(&p->state_mu);
    if (members) {
        n = p->nmembers;
        mem = malloc((n ? n : 1) * sizeof(*mem));
        if (mem != NULL && n > 0) {
            memcpy(mem, p->members, n * sizeof(*mem));
        }
    }
    if (asg) {
        alen = p->asg_len;
        aver = p->asg_version;
        atext = malloc(alen ? alen : 1);
        if (atext != NULL && alen > 0) {
            memcpy(atext, p->asg, alen);
        }
    }
    if (zk) {
        zstate = p->zk_state;
        memcpy(zaddr, p->zk_addr, sizeof(zaddr));
    }
    pthread_mutex_unlock(&p->state_mu);
    if (zk && zstate != RL_ROUTER_ZK_NONE) {
        rl_router_set_zookeeper(w->router, zaddr, zstate);
    }
    if (members) {
        if (mem != NULL) {
            rl_router_set_members(w->router, mem, n);
        } else {
            rl_log_error("worker %u: membership update lost: out of memory", w->index);
        }
    }
    if (asg) {
        if (atext != NULL) {
            rl_router_set_assignment(w->router, atext, alen, aver);
        } else {
            rl_log_error("worker %u: assignment update lost: out of memory", w->index);
        }
    }
    free(mem);
    free(atext);
}

static void
worker_closed(uv_handle_t *h)
{
    (void)h;
}

/* The router answered what it had been asked (or its drain ran out): once every worker's
 * has (the others read each router of the group until they close: metrics, the deny cache),
 * it closes, and the worker's loop ends with it. Waiting blocks this loop, which has nothing
 * left to do; the last drain ends by its own deadline. */
static void
worker_drained(void *arg)
{
    struct rproc_worker *w = arg;

    if (w->p->drain_sync) {
        uv_barrier_wait(&w->p->drained);
    }
    rl_rules_close(&w->rules);
    rl_router_close(w->router);
    uv_close((uv_handle_t *)&w->wake, worker_closed);
}

static void
worker_wake(uv_async_t *a)
{
    struct rproc_worker *w = a->data;
    uv_os_sock_t *fds;
    struct rproc_ffd *rfds;
    size_t nfds, nrfds;
    bool members, asg, zk, hup, stop, envoy, slices;
    char *rules;
    size_t rules_len;
    int64_t rules_version;

    pthread_mutex_lock(&w->mu);
    fds = w->fds;
    nfds = w->nfds;
    w->fds = NULL;
    w->nfds = w->fds_cap = 0;
    rfds = w->ffds;
    nrfds = w->nffds;
    w->ffds = NULL;
    w->nffds = w->ffds_cap = 0;
    members = w->members_new;
    asg = w->asg_new;
    zk = w->zk_new;
    hup = w->hup;
    stop = w->stop;
    envoy = w->envoy_new;
    w->envoy_new = false;
    slices = w->slices_new;
    w->slices_new = false;
    rules = w->zk_rules;
    rules_len = w->zk_rules_len;
    rules_version = w->zk_rules_version;
    w->zk_rules = NULL;
    w->members_new = w->asg_new = w->zk_new = w->hup = false;
    pthread_mutex_unlock(&w->mu);

    if (stop) {
        for (size_t i = 0; i < nfds; i++) {
            close(fds[i]);
        }
        free(fds);
        for (size_t i = 0; i < nrfds; i++) {
            close(rfds[i].fd);
            rproc_front_gone(w->p, rfds[i].kind);
        }
        free(rfds);
        free(rules);
        if (!w->draining) {
            /* a clean stop: what the clients asked is answered first (rl_router_drain) */
            w->draining = true;
            rl_router_drain(w->router, worker_drained, w);
        }
        return;
    }
    if (zk || members || asg) {
        worker_take_view(w, members, asg, zk);
    }
    if (rules != NULL) {
        rl_rules_from_zk(&w->rules, rules, rules_len, rules_version);
        free(rules);
    }
    if (hup) {
        rl_rules_reload_file(&w->rules);
    }
    if (slices) {
        /* a refusal remembered under the old slices may be an allowance under the new */
        rl_shed_rules(w->router, NULL);
    }
    if (envoy) {
        struct rl_envoy_config *sh;

        pthread_mutex_lock(&w->p->state_mu);
        sh = w->p->envoy;
        rl_envoy_config_hold(sh);
        pthread_mutex_unlock(&w->p->state_mu);
        rl_router_set_envoy(w->router, sh);
        rl_envoy_config_drop(sh);
    }
    /* After the view: a client's first CHECK finds the connections to the nodes started. */
    for (size_t i = 0; i < nfds; i++) {
        if (rl_router_adopt(w->router, fds[i]) != 0) {
            close(fds[i]);
        }
    }
    free(fds);
    for (size_t i = 0; i < nrfds; i++) {
        if (rl_front_adopt(w->router, rfds[i].kind, rfds[i].fd) != 0) {
            close(rfds[i].fd);
            rproc_front_gone(w->p, rfds[i].kind);
        }
    }
    free(rfds);
}

/* A worker's router found its view stale (NOT_OWNER): the main loop reads ZooKeeper again. */
static void
worker_on_stale(void *arg)
{
    struct rproc_worker *w = arg;

    uv_async_send(&w->p->stale);
}

static void
worker_main(void *arg)
{
    struct rproc_worker *w = arg;
    struct rl_rproc *p = w->p;
    struct rl_router_opts ro = p->opts.router;
    int rc;

    rc = uv_loop_init(&w->loop);
    if (rc != 0) {
        snprintf(w->start_err, sizeof(w->start_err), "worker %u: loop: %s", w->index,
                 uv_strerror(rc));
        w->start_rc = rc;
        uv_sem_post(&w->started);
        return;
    }
    rl_rules_init(&w->rules, &w->loop, w->conf, p->opts.config_path, worker_apply_rules, w);
    ro.rules = &w->rules.st;
    ro.adopt = true;
    /* The process's requests in flight, shared out: the memory of one router's slab. */
    if (ro.max_pending == 0) {
        ro.max_pending = RL_RPROC_MAX_PENDING;
    }
    ro.max_pending = (ro.max_pending + p->nworkers - 1) / p->nworkers;
    ro.log = p->log;
    ro.on_stale = worker_on_stale;
    ro.arg = w;
    ro.group = &p->group;
    ro.fronts = rl_fronts;
    ro.worker = w->index;
    rc = rl_router_create(&w->router, &w->loop, w->conf, &ro);
    if (rc != 0) {
        snprintf(w->start_err, sizeof(w->start_err), "worker %u: %s", w->index, uv_strerror(rc));
        w->start_rc = rc;
        rl_rules_close(&w->rules);
        uv_run(&w->loop, UV_RUN_DEFAULT);
        uv_loop_close(&w->loop);
        uv_sem_post(&w->started);
        return;
    }
    p->group.routers[w->index] = w->router;
    rl_listener_share(&w->router->listener, &p->shared);
    w->rules.lock = &w->router->mu;
    uv_async_init(&w->loop, &w->wake, worker_wake);
    w->wake.data = w;
    uv_sem_post(&w->started);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&w->loop) != 0) {
        uv_run(&w->loop, UV_RUN_DEFAULT);
        uv_loop_close(&w->loop);
    }
}

/* ---- the main thread's side of the mailboxes ---------------------------------------------- */

static void
worker_post(struct rproc_worker *w, bool members, bool asg, bool zk, bool hup)
{
    pthread_mutex_lock(&w->mu);
    w->members_new = w->members_new || members;
    w->asg_new = w->asg_new || asg;
    w->zk_new = w->zk_new || zk;
    w->hup = w->hup || hup;
    pthread_mutex_unlock(&w->mu);
    uv_async_send(&w->wake);
}

void
rproc_post_all(struct rl_rproc *p, bool members, bool asg, bool zk, bool hup)
{
    if (p->closing) {
        return;
    }
    for (uint32_t i = 0; i < p->nworkers; i++) {
        worker_post(&p->workers[i], members, asg, zk, hup);
    }
}

int
rproc_hand(struct rproc_worker *w, uv_os_sock_t fd, const struct rproc_front *front)
{
    uv_os_sock_t **fds = &w->fds;
    size_t *nfds = &w->nfds, *fds_cap = &w->fds_cap;

    pthread_mutex_lock(&w->mu);
    if (front != NULL) {
        if (w->nffds == w->ffds_cap) {
            size_t cap = w->ffds_cap ? w->ffds_cap * 2 : 16;
            struct rproc_ffd *n = realloc(w->ffds, cap * sizeof(*n));

            if (n == NULL) {
                pthread_mutex_unlock(&w->mu);
                return -ENOMEM;
            }
            w->ffds = n;
            w->ffds_cap = cap;
        }
        w->ffds[w->nffds].fd = fd;
        w->ffds[w->nffds++].kind = front->kind;
        pthread_mutex_unlock(&w->mu);
        uv_async_send(&w->wake);
        return 0;
    }
    if (*nfds == *fds_cap) {
        size_t cap = *fds_cap ? *fds_cap * 2 : 16;
        uv_os_sock_t *n = realloc(*fds, cap * sizeof(*n));

        if (n == NULL) {
            pthread_mutex_unlock(&w->mu);
            return -ENOMEM;
        }
        *fds = n;
        *fds_cap = cap;
    }
    (*fds)[(*nfds)++] = fd;
    pthread_mutex_unlock(&w->mu);
    uv_async_send(&w->wake);
    return 0;
}

void
rproc_stop_workers(struct rl_rproc *p, uint32_t started)
{
    /* (without memory for the barrier, each closes as it drains, as before the drain) */
    p->drain_sync = started > 0 && uv_barrier_init(&p->drained, started) == 0;
    for (uint32_t i = 0; i < started; i++) {
        struct rproc_worker *w = &p->workers[i];

        pthread_mutex_lock(&w->mu);
        w->stop = true;
        pthread_mutex_unlock(&w->mu);
        uv_async_send(&w->wake);
    }
    for (uint32_t i = 0; i < started; i++) {
        struct rproc_worker *w = &p->workers[i];

        uv_thread_join(&w->thread);
        for (size_t k = 0; k < w->nfds; k++) {
            close(w->fds[k]);
        }
        free(w->fds);
        for (size_t k = 0; k < w->nffds; k++) {
            close(w->ffds[k].fd);
        }
        free(w->ffds);
        free(w->zk_rules);
        pthread_mutex_destroy(&w->mu);
        uv_sem_destroy(&w->started);
        rl_conf_destroy(w->conf);
        w->conf = NULL;
        w->router = NULL; /* freed by its loop as it closed */
        p->group.routers[i] = NULL;
    }
    if (p->drain_sync) {
        uv_barrier_destroy(&p->drained);
        p->drain_sync = false;
    }
}

int
rproc_start_workers(struct rl_rproc *p, uint32_t *started, char *err, size_t errlen)
{
    int rc;

    for (; *started < p->nworkers; (*started)++) {
        struct rproc_worker *w = &p->workers[*started];

        w->p = p;
        w->index = *started;
        pthread_mutex_init(&w->mu, NULL);
        uv_sem_init(&w->started, 0);
        rc = uv_thread_create(&w->thread, worker_main, w);
        if (rc != 0) {
            pthread_mutex_destroy(&w->mu);
            uv_sem_destroy(&w->started);
            return rc;
        }
        uv_sem_wait(&w->started);
        if (w->start_rc != 0) {
            if (err != NULL) {
                snprintf(err, errlen, "%s", w->start_err);
            }
            uv_thread_join(&w->thread);
            pthread_mutex_destroy(&w->mu);
            uv_sem_destroy(&w->started);
            return w->start_rc;
        }
    }
    return 0;
}
