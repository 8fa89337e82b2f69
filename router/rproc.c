/*
 * rproc: the router process around its workers (rproc.h). The main thread owns the
 * listening socket (a uv_poll on it: accept(2) here, one socket at a time handed to the least
 * loaded worker), the latest membership, assignment and ZooKeeper state, and the request
 * log's writer. Each worker's mailbox (under its mutex) holds what it has not picked up yet:
 * sockets to adopt, and flags saying which of the process's latest state to copy; one
 * uv_async per worker wakes it. The state itself is kept once, in struct rl_rproc, under
 * state_mu: a worker copies it when woken, so updates that came meanwhile coalesce into the
 * latest.
 */
#include "rproc.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "front.h"
#include "log.h"
#include "reqlog.h"
#include "router_int.h"
#include "rules.h"
#include "shardmap.h"
#include "zkm.h"

#define RPROC_ACCEPT_BATCH 64u    /* sockets accepted per poll callback */
#define RPROC_ACCEPT_RETRY_MS 100u /* out of descriptors: accept again after this long */

/* A socket accepted on a front's listener, in a worker's mailbox. */
struct rproc_ffd {
    uv_os_sock_t fd;
    enum rl_front_kind kind;
};

/* A front's listener (front.h): [router] rls for the gRPC front. */
struct rproc_front {
    struct rl_rproc *p;
    enum rl_front_kind kind;
    uv_os_sock_t fd; /* -1: not listening */
    uv_poll_t poll;
    bool polling;
    struct rl_wgroup_front *count; /* in the workers' group: max, conns, preauth */
};

struct rproc_worker {
    struct rl_rproc *p;
    uint32_t index;
    uv_thread_t thread;
    uv_loop_t loop;
    uv_async_t wake;
    uv_sem_t started;
    int start_rc;
    char start_err[256];

    /* the mailbox, under mu */
    pthread_mutex_t mu;
    uv_os_sock_t *fds;
    size_t nfds, fds_cap;
    struct rproc_ffd *ffds; /* accepted on a front's listener (front.c) */
    size_t nffds, ffds_cap;
    bool members_new, asg_new, zk_new, hup, stop;
    bool envoy_new; /* rl_rproc_set_envoy: take p->envoy */
    bool slices_new; /* rl_rproc_slices_changed: forget the deny cache */
    char *zk_rules;   /* the newest rules znode text not yet taken; NULL: none */
    size_t zk_rules_len;
    int64_t zk_rules_version;
    uint32_t queued;  /* sockets handed over and not adopted yet (main thread's count) */

    /* the worker thread's */
    struct rl_conf *conf;
    struct rl_rules rules;
    struct rl_router *router;
};

struct rl_rproc {
    uv_loop_t *loop;
    struct rl_rproc_opts opts;
    const struct rl_conf *conf; /* the main thread's */
    uint32_t nworkers;
    struct rproc_worker *workers;
    struct rl_wgroup group; /* what every worker reads of the process (router_int.h) */
    uint32_t next; /* round robin among equally loaded workers */

    uv_os_sock_t lfd;
    uv_poll_t poll;
    uv_timer_t retry;
    uv_async_t stale;
    bool polling;
    bool closing;
    int handles;
    uint64_t accept_errors;

    /* the fronts' listeners, those configured */
    struct rproc_front fronts[RL_FRONT_KINDS];
    struct rl_envoy_shared *envoy; /* the latest envoy_config, under state_mu (one hold) */

    struct rl_reqlog *log;
    struct rl_conn_shared shared; /* the workers' listeners' caps, process-wide (conn.h) */

    /* the latest view, under state_mu */
    pthread_mutex_t state_mu;
    struct rl_member *members;
    size_t nmembers;
    char *asg;
    size_t asg_len;
    int64_t asg_version;
    char zk_addr[256];
    int zk_state; /* RL_ROUTER_ZK_NONE: not set */
    uint64_t zk_expiries;
};

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

/* A socket accepted on front kind's listener is gone before a worker served it. */
static void
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
        rl_rules_close(&w->rules);
        rl_router_close(w->router);
        uv_close((uv_handle_t *)&w->wake, worker_closed);
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
        rl_shed_rules(w->router);
    }
    if (envoy) {
        struct rl_envoy_shared *sh;

        pthread_mutex_lock(&w->p->state_mu);
        sh = w->p->envoy;
        rl_envoy_shared_hold(sh);
        pthread_mutex_unlock(&w->p->state_mu);
        rl_rls_set_config(w->router, sh);
        rl_envoy_shared_drop(sh);
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
    ro.worker = w->index;
    rc = rl_router_create(&w->router, &w->loop, w->conf, &ro);
    if (rc != 0) {
        snprintf(w->start_err, sizeof(w->start_err), "worker %u: %s", w->index,
                 uv_strerror(rc));
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

static void
rproc_post_all(struct rl_rproc *p, bool members, bool asg, bool zk, bool hup)
{
    if (p->closing) {
        return;
    }
    for (uint32_t i = 0; i < p->nworkers; i++) {
        worker_post(&p->workers[i], members, asg, zk, hup);
    }
}

/* ---- the acceptor (main loop) ----------------------------------------------------------- */

/* The worker with the fewest connections, open or on their way (ties: round robin). */
static struct rproc_worker *
rproc_pick(struct rl_rproc *p)
{
    struct rproc_worker *best = NULL;
    uint64_t best_load = UINT64_MAX;

    for (uint32_t k = 0; k < p->nworkers; k++) {
        struct rproc_worker *w = &p->workers[(p->next + k) % p->nworkers];
        uint64_t load;

        /* The listener counts its connections atomically for this read. */
        load = __atomic_load_n(&w->router->listener.stats.connections, __ATOMIC_RELAXED);
        load += __atomic_load_n(&w->router->front_conns, __ATOMIC_RELAXED);
        pthread_mutex_lock(&w->mu);
        load += w->nfds + w->nffds;
        pthread_mutex_unlock(&w->mu);
        if (load < best_load) {
            best = w;
            best_load = load;
        }
    }
    p->next = (uint32_t)((best - p->workers) + 1) % p->nworkers;
    return best;
}

/* Hands fd to w: a client of the binary protocol (front NULL), else one of *front's. */
static int
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

static void rproc_poll_cb(uv_poll_t *h, int status, int events);

static void
rproc_retry(uv_timer_t *t)
{
    struct rl_rproc *p = t->data;

    if (!p->closing && !p->polling) {
        p->polling = uv_poll_start(&p->poll, UV_READABLE, rproc_poll_cb) == 0;
    }
}

static void
rproc_poll_cb(uv_poll_t *h, int status, int events)
{
    struct rl_rproc *p = h->data;

    (void)events;
    if (status < 0 || p->closing) {
        return;
    }
    for (unsigned i = 0; i < RPROC_ACCEPT_BATCH; i++) {
        int fd = accept4(p->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* Out of descriptors: leave the rest in the kernel's queue for a while. */
                __atomic_fetch_add(&p->accept_errors, 1, __ATOMIC_RELAXED);
                uv_poll_stop(&p->poll);
                p->polling = false;
                uv_timer_start(&p->retry, rproc_retry, RPROC_ACCEPT_RETRY_MS, 0);
                rl_log_warn("accept: %s; accepting again in %u ms", strerror(errno),
                            RPROC_ACCEPT_RETRY_MS);
            }
            return; /* EAGAIN: none left; ECONNABORTED and the like: the next poll */
        }
        if (rproc_hand(rproc_pick(p), fd, NULL) != 0) {
            close(fd);
        }
    }
}

void
rl_rproc_set_envoy(struct rl_rproc *p, struct rl_envoy_shared *sh)
{
    struct rl_envoy_shared *old;

    rl_envoy_shared_hold(sh);
    pthread_mutex_lock(&p->state_mu);
    old = p->envoy;
    p->envoy = sh;
    pthread_mutex_unlock(&p->state_mu);
    rl_envoy_shared_drop(old);
    for (uint32_t i = 0; !p->closing && i < p->nworkers; i++) {
        struct rproc_worker *w = &p->workers[i];

        pthread_mutex_lock(&w->mu);
        w->envoy_new = true;
        pthread_mutex_unlock(&w->mu);
        uv_async_send(&w->wake);
    }
}

/* Where front kind listens (host NULL: it does not), and how many connections it may
 * have open at once. A new front: its listener's keys here, its vtable in front.c. */
static void
rproc_front_addr(const struct rl_conf *conf, enum rl_front_kind kind, const char **host,
                 uint16_t *port, uint32_t *max)
{
    *host = NULL;
    *port = 0;
    *max = conf->clients.max_connections;
    switch (kind) {
    case RL_FRONT_RLS:
        *host = conf->rls_host;
        *port = conf->rls_port;
        break;
    case RL_FRONT_RESP:
        *host = conf->resp_host;
        *port = conf->resp_port;
        break;
    case RL_FRONT_KINDS:
        break;
    }
}

/* A front's listener: its connections, handed out as the clients' are, up to max of them
 * at once (an extra one is closed at once). */
static void
rproc_front_poll_cb(uv_poll_t *h, int status, int events)
{
    struct rproc_front *f = h->data;
    struct rl_rproc *p = f->p;

    (void)events;
    if (status < 0 || p->closing) {
        return;
    }
    for (unsigned i = 0; i < RPROC_ACCEPT_BATCH; i++) {
        int fd = accept4(f->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                __atomic_fetch_add(&p->accept_errors, 1, __ATOMIC_RELAXED);
            }
            return;
        }
        if (__atomic_load_n(&f->count->conns, __ATOMIC_RELAXED) >= f->count->max) {
            close(fd);
            continue;
        }
        __atomic_fetch_add(&f->count->conns, 1, __ATOMIC_RELAXED);
        if (rproc_hand(rproc_pick(p), fd, f) != 0) {
            close(fd);
            rproc_front_gone(p, f->kind);
        }
    }
}

static int
rproc_listen(uv_os_sock_t *out, const char *host, uint16_t port)
{
    struct sockaddr_storage addr;
    socklen_t alen;
    int one = 1, rc, fd;

    memset(&addr, 0, sizeof(addr));
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&addr) == 0) {
        alen = sizeof(struct sockaddr_in);
    } else if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr) == 0) {
        alen = sizeof(struct sockaddr_in6);
    } else {
        return -EINVAL;
    }
    fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -errno;
    }
    /* As libuv's uv_tcp_bind: SO_REUSEADDR (a restart binds at once). */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&addr, alen) != 0 || listen(fd, 1024) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    *out = fd;
    return 0;
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
        rl_envoy_shared_drop(p->envoy);
        pthread_mutex_destroy(&p->state_mu);
        rl_conn_shared_deinit(&p->shared);
        free(p->members);
        free(p->asg);
        free(p->group.routers);
        free(p);
    }
}

/* Stops every started worker and waits for its thread. */
static void
rproc_stop_workers(struct rl_rproc *p, uint32_t started)
{
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
}

int
rl_rproc_create(struct rl_rproc **out, uv_loop_t *loop, const struct rl_conf *conf,
                const struct rl_rproc_opts *opts, char *err, size_t errlen)
{
    struct rl_rproc *p = calloc(1, sizeof(*p));
    uint32_t started = 0;
    int rc;

    if (err != NULL && errlen > 0) {
        err[0] = '\0';
    }
    if (p == NULL) {
        return -ENOMEM;
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
        rl_envoy_shared_hold(p->envoy);
    }
    p->zk_state = RL_ROUTER_ZK_NONE;
    p->asg_version = -1;
    p->nworkers = opts->workers != 0 ? opts->workers : rl_rproc_default_workers(conf);
    pthread_mutex_init(&p->state_mu, NULL);
    if (rl_conn_shared_init(&p->shared) != 0) {
        rl_envoy_shared_drop(p->envoy);
        pthread_mutex_destroy(&p->state_mu);
        free(p);
        return -ENOMEM;
    }
    p->workers = calloc(p->nworkers, sizeof(*p->workers));
    p->group.n = p->nworkers;
    p->group.routers = calloc(p->nworkers, sizeof(*p->group.routers));
    p->group.threads = true;
    p->group.accept_errors = &p->accept_errors;
    p->group.zk_expiries = &p->zk_expiries;
    p->group.shared = &p->shared;
    if (p->workers == NULL || p->group.routers == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    if (conf->request_log != NULL && conf->request_log[0] != '\0') {
        rc = rl_reqlog_create(&p->log, loop, conf->request_log, conf->log_sample);
        if (rc != 0) {
            goto fail;
        }
        rl_reqlog_set_rotation(p->log, conf->log_max_size, conf->log_keep);
    }
    /* Every worker's copy of the config, loaded here so that a failure says so at start. */
    for (uint32_t i = 0; i < p->nworkers; i++) {
        struct rproc_worker *w = &p->workers[i];
        char cerr[256];

        if (rl_conf_load(opts->config_path, &w->conf, cerr, sizeof(cerr)) != 0) {
            if (err != NULL) {
                snprintf(err, errlen, "worker %u: %s", i, cerr);
            }
            rc = -EINVAL;
            goto fail;
        }
        if (w->conf->rules_digest != conf->rules_digest) {
            if (err != NULL) {
                snprintf(err, errlen, "%s changed while starting: start again",
                         opts->config_path);
            }
            rc = -EAGAIN;
            goto fail;
        }
    }
    for (; started < p->nworkers; started++) {
        struct rproc_worker *w = &p->workers[started];

        w->p = p;
        w->index = started;
        pthread_mutex_init(&w->mu, NULL);
        uv_sem_init(&w->started, 0);
        rc = uv_thread_create(&w->thread, worker_main, w);
        if (rc != 0) {
            pthread_mutex_destroy(&w->mu);
            uv_sem_destroy(&w->started);
            goto fail;
        }
        uv_sem_wait(&w->started);
        if (w->start_rc != 0) {
            rc = w->start_rc;
            if (err != NULL) {
                snprintf(err, errlen, "%s", w->start_err);
            }
            uv_thread_join(&w->thread);
            pthread_mutex_destroy(&w->mu);
            uv_sem_destroy(&w->started);
            goto fail;
        }
    }
    /* Listening last: a client that connects finds every worker ready. */
    rc = rproc_listen(&p->lfd, opts->router.host, opts->router.port);
    if (rc != 0) {
        goto fail;
    }
    for (int k = 0; k < RL_FRONT_KINDS; k++) {
        struct rproc_front *f = &p->fronts[k];
        const char *host;
        uint16_t port;

        rproc_front_addr(conf, f->kind, &host, &port, &f->count->max);
        if (host == NULL) {
            continue;
        }
        rc = rproc_listen(&f->fd, host, port);
        if (rc != 0) {
            if (err != NULL) {
                snprintf(err, errlen, "[router] %s %s:%u: %s", rl_front_name(f->kind), host,
                         (unsigned)port, uv_strerror(rc));
            }
            goto fail;
        }
    }
    for (int k = 0; k < RL_FRONT_KINDS; k++) {
        struct rproc_front *f = &p->fronts[k];

        if (f->fd < 0) {
            continue;
        }
        uv_poll_init_socket(loop, &f->poll, f->fd);
        f->poll.data = f;
        f->polling = uv_poll_start(&f->poll, UV_READABLE, rproc_front_poll_cb) == 0;
        p->handles++;
    }
    uv_poll_init_socket(loop, &p->poll, p->lfd);
    p->poll.data = p;
    uv_timer_init(loop, &p->retry);
    p->retry.data = p;
    uv_async_init(loop, &p->stale, rproc_stale_cb);
    p->stale.data = p;
    p->handles += 3;
    p->polling = uv_poll_start(&p->poll, UV_READABLE, rproc_poll_cb) == 0;
    rl_log_info("%u workers serving", p->nworkers);
    *out = p;
    return 0;

fail:
    rproc_stop_workers(p, started);
    for (uint32_t i = 0; p->workers != NULL && i < p->nworkers; i++) {
        rl_conf_destroy(p->workers[i].conf);
    }
    if (p->log != NULL) {
        rl_reqlog_close(p->log);
    }
    if (p->lfd >= 0) {
        close(p->lfd);
    }
    for (int k = 0; k < RL_FRONT_KINDS; k++) {
        if (p->fronts[k].fd >= 0) {
            close(p->fronts[k].fd);
        }
    }
    free(p->workers);
    free(p->group.routers);
    rl_envoy_shared_drop(p->envoy);
    pthread_mutex_destroy(&p->state_mu);
    rl_conn_shared_deinit(&p->shared);
    free(p);
    return rc;
}

/* ---- the view, rules, signals ------------------------------------------------------------ */

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
    if (p->polling) {
        uv_poll_stop(&p->poll);
    }
    uv_close((uv_handle_t *)&p->poll, rproc_handle_closed);
    uv_close((uv_handle_t *)&p->retry, rproc_handle_closed);
    uv_close((uv_handle_t *)&p->stale, rproc_handle_closed);
    close(p->lfd);
    p->lfd = -1;
    for (int k = 0; k < RL_FRONT_KINDS; k++) {
        struct rproc_front *f = &p->fronts[k];

        if (f->fd < 0) {
            continue;
        }
        if (f->polling) {
            uv_poll_stop(&f->poll);
        }
        f->poll.data = p; /* rproc_handle_closed's */
        uv_close((uv_handle_t *)&f->poll, rproc_handle_closed);
        close(f->fd);
        f->fd = -1;
    }
    rproc_stop_workers(p, p->nworkers);
    if (p->log != NULL) {
        rl_reqlog_close(p->log);
        p->log = NULL;
    }
    free(p->workers);
    p->workers = NULL;
}
