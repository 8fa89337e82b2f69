/*
 * rproc_accept: the router process's acceptor, on the main loop. A uv_poll on each
 * listening socket (the binary protocol's, and each front's of the front table, fronts.c):
 * accept(2) here, one socket at a time handed to the least loaded worker's mailbox
 * (rproc_worker.c); a front's connections are counted in the worker group, up to its
 * max_connections (an extra one is closed at once). Out of descriptors, accepting pauses a
 * while. Not for what a worker does with a socket (router.h, front.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "rproc_int.h"

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

/* ---- listening: the sockets, their polls ------------------------------------------------- */

int
rproc_accept_listen(struct rl_rproc *p, const struct rl_conf *conf, char *err, size_t errlen)
{
    int rc = rproc_listen(&p->lfd, p->opts.router.host, p->opts.router.port);

    if (rc != 0) {
        return rc;
    }
    for (int k = 0; k < RL_FRONT_KINDS; k++) {
        struct rproc_front *f = &p->fronts[k];
        const char *host;
        uint16_t port;

        rl_fronts[k].listen(conf, &host, &port);
        f->count->max = conf->clients.max_connections;
        if (host == NULL) {
            continue;
        }
        rc = rproc_listen(&f->fd, host, port);
        if (rc != 0) {
            if (err != NULL) {
                snprintf(err, errlen, "[router] %s %s:%u: %s", rl_fronts[k].ops->name, host,
                         (unsigned)port, uv_strerror(rc));
            }
            return rc;
        }
    }
    return 0;
}

void
rproc_accept_unlisten(struct rl_rproc *p)
{
    if (p->lfd >= 0) {
        close(p->lfd);
        p->lfd = -1;
    }
    for (int k = 0; k < RL_FRONT_KINDS; k++) {
        if (p->fronts[k].fd >= 0) {
            close(p->fronts[k].fd);
            p->fronts[k].fd = -1;
        }
    }
}

void
rproc_accept_open(struct rl_rproc *p)
{
    if (!p->gated || p->closing) {
        return;
    }
    p->gated = false;
    uv_timer_stop(&p->gate);
    for (int k = 0; k < RL_FRONT_KINDS; k++) {
        struct rproc_front *f = &p->fronts[k];

        if (f->fd >= 0) {
            f->polling = uv_poll_start(&f->poll, UV_READABLE, rproc_front_poll_cb) == 0;
        }
    }
    p->polling = uv_poll_start(&p->poll, UV_READABLE, rproc_poll_cb) == 0;
}

/* How long the first view is waited for: RPROC_GATE_MS, or the session timeout if shorter. */
static uint64_t
rproc_gate_ms(const struct rl_rproc *p)
{
    uint64_t ms = p->conf->session_timeout_ms;

    return ms != 0 && ms < RPROC_GATE_MS ? ms : RPROC_GATE_MS;
}

static void
rproc_gate_cb(uv_timer_t *t)
{
    struct rl_rproc *p = t->data;

    if (p->gated) {
        rl_log_warn("no membership read within %" PRIu64 " ms: serving without it (requests get "
                    "their failure policy until it comes)",
                    rproc_gate_ms(p));
    }
    rproc_accept_open(p);
}

void
rproc_accept_start(struct rl_rproc *p)
{
    for (int k = 0; k < RL_FRONT_KINDS; k++) {
        struct rproc_front *f = &p->fronts[k];

        if (f->fd < 0) {
            continue;
        }
        uv_poll_init_socket(p->loop, &f->poll, f->fd);
        f->poll.data = f;
        f->polling = false;
        p->handles++;
    }
    uv_poll_init_socket(p->loop, &p->poll, p->lfd);
    p->poll.data = p;
    uv_timer_init(p->loop, &p->retry);
    p->retry.data = p;
    uv_timer_init(p->loop, &p->gate);
    p->gate.data = p;
    p->handles += 3;
    p->polling = false;
    p->gated = true;
    uv_timer_start(&p->gate, rproc_gate_cb, rproc_gate_ms(p), 0);
}

void
rproc_accept_close(struct rl_rproc *p, uv_close_cb closed_cb)
{
    if (p->polling) {
        uv_poll_stop(&p->poll);
    }
    uv_close((uv_handle_t *)&p->poll, closed_cb);
    uv_close((uv_handle_t *)&p->retry, closed_cb);
    uv_close((uv_handle_t *)&p->gate, closed_cb);
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
        f->poll.data = p; /* closed_cb's */
        uv_close((uv_handle_t *)&f->poll, closed_cb);
        close(f->fd);
        f->fd = -1;
    }
}
