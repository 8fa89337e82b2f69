/*
 * conn_listen: a listener's side of connections (conn.h): accepting, the caps a listener
 * keeps (max_connections within the descriptor limit, max_connections_per_peer counted per
 * address, the router reserve and its probation, the pre-AUTH half and the failed AUTHs per
 * address), the periodic tick that enforces frame_timeout, idle_timeout and probation, and
 * the listener's counters. It calls conn_refuse.c to answer what it refuses, conn_read.c to
 * start reading what it accepts, and conn.c; conn.c's close reaches it through the hooks
 * rl_listener_start installs (on_conn_leave, on_conn_freed). Not for the connection itself
 * (conn.c), its reading (conn_read.c) nor its writing (conn_flush.c).
 */
#include "conn.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <xxhash.h>

#include "conn_int.h"
#include "tls.h"
#include "log.h"
#include "seed.h"
#include "wire.h"

/* ---- shared counts (conn.h, rl_conn_shared) ---------------------------------------------- */

int
rl_conn_shared_init(struct rl_conn_shared *s)
{
    memset(s, 0, sizeof(*s));
    s->authfail = rl_authfail_new();
    if (s->authfail == NULL) {
        return -ENOMEM;
    }
    if (pthread_mutex_init(&s->authfail_mu, NULL) != 0) {
        rl_authfail_free(s->authfail);
        return -ENOMEM;
    }
    if (pthread_mutex_init(&s->peers_mu, NULL) != 0) {
        pthread_mutex_destroy(&s->authfail_mu);
        rl_authfail_free(s->authfail);
        return -ENOMEM;
    }
    return 0;
}

void
rl_conn_shared_deinit(struct rl_conn_shared *s)
{
    for (size_t b = 0; b < RL_CONN_PEER_BUCKETS; b++) {
        while (s->peers[b] != NULL) {
            struct rl_conn_peer *p = s->peers[b];

            s->peers[b] = p->next;
            free(p);
        }
    }
    pthread_mutex_destroy(&s->peers_mu);
    pthread_mutex_destroy(&s->authfail_mu);
    rl_authfail_free(s->authfail);
    s->authfail = NULL;
}

uint64_t
rl_conn_shared_peers(struct rl_conn_shared *s)
{
    uint64_t n;

    pthread_mutex_lock(&s->peers_mu);
    n = s->npeers;
    pthread_mutex_unlock(&s->peers_mu);
    return n;
}

void
rl_listener_share(struct rl_listener *l, struct rl_conn_shared *s)
{
    l->shared = s;
    l->q->shared = s;
}

/* Client connections open now: the process's when shared. */
static uint32_t
listener_clients(const struct rl_listener *l)
{
    return l->shared != NULL ? __atomic_load_n(&l->shared->clients, __ATOMIC_RELAXED) : l->clients;
}

/* Pre-AUTH connections open now: the process's when shared. */
static uint64_t
listener_preauth(const struct rl_listener *l)
{
    return l->shared != NULL ? __atomic_load_n(&l->shared->preauth, __ATOMIC_RELAXED)
                             : l->stats.preauth;
}

static void
listener_count_client(struct rl_listener *l, int d)
{
    l->clients += (uint32_t)d;
    if (l->shared != NULL) {
        __atomic_fetch_add(&l->shared->clients, (uint32_t)d, __ATOMIC_RELAXED);
    }
}

/* The per-address counts (peer_*) are the shared table's, under its mutex, when shared. */
static void
peers_lock(struct rl_listener *l)
{
    if (l->shared != NULL) {
        pthread_mutex_lock(&l->shared->peers_mu);
    }
}

static void
peers_unlock(struct rl_listener *l)
{
    if (l->shared != NULL) {
        pthread_mutex_unlock(&l->shared->peers_mu);
    }
}

static struct rl_conn_peer **
peers_of(struct rl_listener *l)
{
    return l->shared != NULL ? l->shared->peers : l->peers;
}

static uint64_t *
peers_count(struct rl_listener *l)
{
    return l->shared != NULL ? &l->shared->npeers : &l->stats.peers;
}

/* ---- peers: client connections per address ----------------------------------------------- */

/* The buckets' seed, secret (seed.h): a client with many addresses could otherwise choose ones
 * that share a bucket and make every accept walk a long chain. One per process. */
static uint64_t peer_seed;
static pthread_once_t peer_seed_once = PTHREAD_ONCE_INIT;

static void
peer_seed_init(void)
{
    peer_seed = rl_seed_random(&peer_seed);
}

static size_t
peer_bucket(const uint8_t *addr)
{
    pthread_once(&peer_seed_once, peer_seed_init);
    return (size_t)(XXH3_64bits_withSeed(addr, 16, peer_seed) % RL_CONN_PEER_BUCKETS);
}

/* The count of addr; NULL if absent. */
static struct rl_conn_peer *
peer_find(struct rl_listener *l, const uint8_t *addr)
{
    struct rl_conn_peer *p;

    for (p = peers_of(l)[peer_bucket(addr)]; p != NULL; p = p->next) {
        if (memcmp(p->addr, addr, 16) == 0) {
            return p;
        }
    }
    return NULL;
}

/* The count of addr, created at 0 if absent; NULL when out of memory. */
static struct rl_conn_peer *
peer_get(struct rl_listener *l, const uint8_t *addr)
{
    struct rl_conn_peer **head = &peers_of(l)[peer_bucket(addr)];
    struct rl_conn_peer *p = peer_find(l, addr);

    if (p != NULL) {
        return p;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return NULL;
    }
    memcpy(p->addr, addr, 16);
    p->next = *head;
    *head = p;
    (*peers_count(l))++;
    return p;
}

/* Frees the count of p's address once no connection holds it. */
static void
peer_drop(struct rl_listener *l, struct rl_conn_peer *p)
{
    struct rl_conn_peer **pp = &peers_of(l)[peer_bucket(p->addr)];

    if (p->count > 0) {
        return;
    }
    while (*pp != p) {
        pp = &(*pp)->next;
    }
    *pp = p->next;
    free(p);
    (*peers_count(l))--;
}

/* ---- pre-AUTH clients: the newest first ------------------------------------------------- */

static void
preauth_join(struct rl_listener *l, struct rl_conn *c)
{
    c->preauth_prev = NULL;
    c->preauth_next = l->preauth_new;
    if (l->preauth_new != NULL) {
        l->preauth_new->preauth_prev = c;
    } else {
        l->preauth_old = c;
    }
    l->preauth_new = c;
    l->stats.preauth++;
    if (l->shared != NULL) {
        __atomic_fetch_add(&l->shared->preauth, 1, __ATOMIC_RELAXED);
    }
}

/* c leaves the pre-AUTH list, if it is on it. */
static void
preauth_leave(struct rl_listener *l, struct rl_conn *c)
{
    if (c->preauth_prev == NULL && l->preauth_new != c) {
        return;
    }
    if (c->preauth_prev != NULL) {
        c->preauth_prev->preauth_next = c->preauth_next;
    } else {
        l->preauth_new = c->preauth_next;
    }
    if (c->preauth_next != NULL) {
        c->preauth_next->preauth_prev = c->preauth_prev;
    } else {
        l->preauth_old = c->preauth_prev;
    }
    c->preauth_prev = c->preauth_next = NULL;
    l->stats.preauth--;
    if (l->shared != NULL) {
        __atomic_fetch_sub(&l->shared->preauth, 1, __ATOMIC_RELAXED);
    }
}

/* c stops counting as a client of its listener (closing, or turned router). */
static void
conn_unclient(struct rl_conn *c)
{
    struct rl_listener *l = c->listener;

    preauth_leave(l, c);
    if (c->peer_entry != NULL) {
        peers_lock(l);
        c->peer_entry->count--;
        peer_drop(l, c->peer_entry);
        peers_unlock(l);
        c->peer_entry = NULL;
        listener_count_client(l, -1);
    }
}

static void
listener_unref(struct rl_listener *l)
{
    l->handles--;
    if (l->closing && l->handles == 0) {
        rl_authfail_free(l->authfail);
        l->authfail = NULL;
        if (l->on_closed != NULL) {
            l->on_closed(l);
        }
    }
}

static void listener_accept(uv_stream_t *server, int status);

/* conn.c's close, through on_conn_leave: c (a listener's) starts closing: it leaves the
 * listener's list and counts. */
static void
conn_listener_leave(struct rl_conn *c)
{
    struct rl_listener *l = c->listener;

    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        l->conns = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    c->prev = c->next = NULL;
    __atomic_fetch_sub(&l->stats.connections, 1, __ATOMIC_RELAXED); /* read by other threads */
    conn_unclient(c);
    if (c->router || c->probation) {
        l->reserve_used--;
        l->stats.routers -= c->router;
        c->router = c->probation = false;
    }
}

/* conn.c, through on_conn_freed: a connection of l was closed and freed: l may finish closing,
 * or accept again. */
static void
conn_listener_closed(struct rl_listener *l)
{
    listener_unref(l);
    if (l->accept_paused && !l->closing) {
        /* A descriptor is free again: take the connection accept(2) left waiting. */
        l->accept_paused = false;
        listener_accept((uv_stream_t *)&l->tcp, 0);
    }
}


#define AUTHFAIL_EVERY_MS (1000u / RL_CONN_AUTHFAIL_RATE)
#define AUTHFAIL_SLACK_MS ((RL_CONN_AUTHFAIL_BURST - 1u) * AUTHFAIL_EVERY_MS)

/* The table of l's failed AUTHs (the shared one, locked, when shared; l's own, made when
 * `make`); NULL: none. authfail_done unlocks. */
static struct rl_authfail *
authfail_take(struct rl_listener *l, bool make)
{
    if (l->shared != NULL) {
        pthread_mutex_lock(&l->shared->authfail_mu);
        return l->shared->authfail;
    }
    if (l->authfail == NULL && make) {
        l->authfail = rl_authfail_new(); /* out of memory: failures go uncounted */
    }
    return l->authfail;
}

static void
authfail_done(struct rl_listener *l)
{
    if (l->shared != NULL) {
        pthread_mutex_unlock(&l->shared->authfail_mu);
    }
}

/* Milliseconds before addr may try again: its network's failures past the burst. */
static uint64_t
authfail_wait(struct rl_listener *l, const uint8_t *addr, uint64_t now)
{
    struct rl_authfail *t = authfail_take(l, false);
    uint64_t wait =
        t != NULL ? rl_authfail_wait(t, addr, now, AUTHFAIL_EVERY_MS, RL_CONN_AUTHFAIL_BURST) : 0;

    authfail_done(l);
    return wait;
}

/* addr failed an AUTH at now. */
static void
authfail_charge(struct rl_listener *l, const uint8_t *addr, uint64_t now)
{
    struct rl_authfail *t = authfail_take(l, true);

    if (t != NULL) {
        rl_authfail_charge(t, addr, now, AUTHFAIL_EVERY_MS);
    }
    authfail_done(l);
}

uint64_t
rl_conn_auth_wait_ms(const struct rl_conn *c)
{
    if (c->listener == NULL) {
        return 0;
    }
    return authfail_wait(c->listener, c->addr, uv_now(c->q->loop));
}

void
rl_conn_auth_failed(struct rl_conn *c)
{
    uint64_t now;

    if (c->listener == NULL) {
        return;
    }
    now = uv_now(c->q->loop);
    authfail_charge(c->listener, c->addr, now);
    if (authfail_wait(c->listener, c->addr, now) > 0 &&
        conn_should_warn(c->listener, c, CONN_WARN_AUTH_RATE)) {
        rl_log_warn("client %s: more than %u failed AUTHs a second from this address: its "
                    "connections are refused for now (refused_auth_rate; said once a minute)",
                    c->peer, RL_CONN_AUTHFAIL_RATE);
    }
}

uint64_t
rl_listener_auth_wait_ms(struct rl_listener *l, const uint8_t *addr)
{
    return authfail_wait(l, addr, uv_now(l->q->loop));
}

void
rl_listener_auth_failed(struct rl_listener *l, const uint8_t *addr)
{
    authfail_charge(l, addr, uv_now(l->q->loop));
}

void
rl_conn_authenticated(struct rl_conn *c, const void *principal)
{
    c->principal = principal;
    if (!c->preauth) {
        return;
    }
    c->q->preauth_bytes -= c->acct_bytes;
    if (c->q->shared != NULL) {
        __atomic_fetch_sub(&c->q->shared->preauth_bytes, c->acct_bytes, __ATOMIC_RELAXED);
    }
    c->preauth = false;
    preauth_leave(c->listener, c);
}

/* ---- pre-AUTH admission ------------------------------------------------------------------ */

/* The oldest pre-AUTH client makes room for a newer connection: it leaves the counts at once
 * and is answered ERROR OVERLOADED. A client that AUTHs as it connects is never the oldest
 * for long; a silent socket is. */
static void
preauth_evict(struct rl_listener *l)
{
    struct rl_conn *old = l->preauth_old;

    conn_unclient(old);
    conn_pause(old);
    conn_refuse_counted(old, &l->stats.preauth_closes, CONN_WARN_PREAUTH, RL_WIRE_ERR_OVERLOADED,
                        "closed before AUTH: too many connections are waiting for AUTH "
                        "(half of max_connections) and a newer one came");
}

/* Closes this listener's oldest pre-AUTH clients for those that other listeners sharing the
 * caps admitted past them (rl_conn_shared.evict_debt). */
static void
preauth_pay_debt(struct rl_listener *l)
{
    uint32_t debt;

    if (l->shared == NULL) {
        return;
    }
    debt = __atomic_load_n(&l->shared->evict_debt, __ATOMIC_RELAXED);
    while (debt > 0 && l->preauth_old != NULL) {
        /* Only while the process is still past a cap: connections that authenticated or
         * left since have paid the debt already. */
        bool over = listener_preauth(l) > l->max_preauth || listener_clients(l) > l->max_clients;

        if (__atomic_compare_exchange_n(&l->shared->evict_debt, &debt, over ? debt - 1 : 0,
                                        false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            if (!over) {
                break;
            }
            preauth_evict(l);
            debt--;
        }
    }
}

/* Whether the new connection c (its address known) is pre-AUTH, refusing it when its address
 * failed AUTH too often, and making room among the pre-AUTH clients (*over: admitted past the
 * shared caps, others make the room). False: refused. */
static bool
preauth_admit(struct rl_listener *l, struct rl_conn *c, uint64_t now, bool *over)
{
    const struct rl_conn_peer *peer;
    uint64_t wait;
    char msg[160];
    bool room;

    if (!l->lim.auth_required) {
        return true;
    }
    wait = authfail_wait(l, c->addr, now);
    if (wait > 0) {
        snprintf(msg, sizeof(msg),
                 "too many failed AUTHs from this address (more than %u a second): try again "
                 "in %" PRIu64 " ms",
                 RL_CONN_AUTHFAIL_RATE, wait);
        conn_refuse_counted(c, &l->stats.refused_auth_rate, CONN_WARN_AUTH_RATE,
                            RL_WIRE_ERR_UNAUTHORIZED, msg);
        return false;
    }
    c->preauth = true;
    peers_lock(l);
    peer = peer_find(l, c->addr);
    room = peer == NULL || peer->count < l->lim.max_per_peer;
    peers_unlock(l);
    preauth_pay_debt(l);
    if ((listener_preauth(l) >= l->max_preauth || listener_clients(l) >= l->max_clients) &&
        room) {
        if (l->preauth_old != NULL) {
            preauth_evict(l);
        } else if (l->shared != NULL && listener_preauth(l) > 0) {
            __atomic_fetch_add(&l->shared->evict_debt, 1, __ATOMIC_RELAXED);
            *over = true;
        }
    }
    return true;
}

/* ---- listeners -------------------------------------------------------------------------- */

/* How long a connection taken from the router reserve has to say HELLO. */
#define RL_CONN_PROBATION_MS 2000u

uint64_t
rl_conn_raise_fd_limit(void)
{
    struct rlimit r;

    if (getrlimit(RLIMIT_NOFILE, &r) != 0) {
        return 1024;
    }
    if (r.rlim_cur < r.rlim_max) {
        rlim_t want = r.rlim_max == RLIM_INFINITY ? (rlim_t)1 << 20 : r.rlim_max;
        struct rlimit n = {want, r.rlim_max};

        if (setrlimit(RLIMIT_NOFILE, &n) == 0) {
            r.rlim_cur = want;
        }
    }
    return r.rlim_cur == RLIM_INFINITY ? (uint64_t)1 << 20 : (uint64_t)r.rlim_cur;
}

static void
listener_handle_closed(uv_handle_t *h)
{
    listener_unref(h->data);
}

/* Descriptors this listener may hold open at once, refusals in progress included. */
static uint64_t
listener_fd_ceiling(const struct rl_listener *l)
{
    return l->fd_limit > RL_CONN_FD_SLACK / 2 ? l->fd_limit - RL_CONN_FD_SLACK / 2 : 1;
}

static void listener_take(struct rl_listener *l, uv_stream_t *server, uv_os_sock_t fd);

static void
listener_accept(uv_stream_t *server, int status)
{
    struct rl_listener *l = server->data;
    uint64_t now = uv_now(l->q->loop);

    if (status < 0) {
        /* libuv met EMFILE or ENFILE (descriptors taken by something else than clients) and
         * closed what was waiting: count it, and say so. */
        l->stats.accept_errors++;
        if (now - l->accept_warned_ms >= 10000 || l->accept_warned_ms == 0) {
            l->accept_warned_ms = now != 0 ? now : 1;
            rl_log_warn("accept: %s; connections waiting to be accepted were closed (%" PRIu64
                        " accept errors so far; descriptor limit %" PRIu64 ")",
                        uv_strerror(status), l->stats.accept_errors, l->fd_limit);
        }
        return;
    }
    if (l->closing) {
        return;
    }
    if (l->stats.connections >= listener_fd_ceiling(l)) {
        /* At the descriptor limit: leave the connection in the kernel's queue (libuv stops
         * watching the listener until uv_accept) rather than let accept(2) fail and libuv
         * close the queue silently; the next close takes it. */
        l->accept_paused = true;
        return;
    }
    listener_take(l, server, -1);
}

int
rl_listener_adopt(struct rl_listener *l, uv_os_sock_t fd)
{
    if (l->closing) {
        return UV_ECANCELED;
    }
    if (l->stats.connections >= listener_fd_ceiling(l)) {
        /* At the descriptor limit: nothing to answer with but the close. */
        l->stats.accept_errors++;
        close(fd);
        return 0;
    }
    listener_take(l, NULL, fd);
    return 0;
}

/* A new connection: accepted from server, or (server NULL) the socket fd accepted elsewhere. */
static void
listener_take(struct rl_listener *l, uv_stream_t *server, uv_os_sock_t fd)
{
    struct rl_conn_peer *peer = NULL;
    const char *why = NULL;
    uint64_t *counter = NULL;
    uint64_t now = uv_now(l->q->loop);
    struct rl_conn *c;
    bool over = false;

    c = calloc(1, l->conn_size);
    if (c == NULL) {
        rl_log_warn("accept: out of memory");
        if (server == NULL) {
            close(fd);
        }
        return;
    }
    conn_setup(c, l->q, l->ops, l->data);
    c->listener = l;
    uv_tcp_init(l->q->loop, &c->tcp);
    c->tcp.data = c;
    c->open = true;
    l->handles++;
    c->next = l->conns;
    if (l->conns != NULL) {
        l->conns->prev = c;
    }
    l->conns = c;
    __atomic_fetch_add(&l->stats.connections, 1, __ATOMIC_RELAXED); /* read by other threads */
    if ((server != NULL ? uv_accept(server, (uv_stream_t *)&c->tcp)
                        : uv_tcp_open(&c->tcp, fd)) != 0) {
        if (server == NULL) {
            close(fd);
        }
        rl_conn_close(c, UV_ECONNABORTED);
        return;
    }
    l->stats.connections_total++;
    c->connected = true;
    c->accepted_ms = c->active_ms = now;
    uv_tcp_nodelay(&c->tcp, 1);
    conn_peer_name(c, c->addr);
    if (l->q->tls_server != NULL) {
        c->tls = rl_tls_new(l->q->tls_server);
        if (c->tls == NULL) {
            rl_conn_close(c, UV_ENOMEM);
            return;
        }
        c->tls_sniff = true;
    }
    if (!preauth_admit(l, c, now, &over)) {
        return;
    }
    peers_lock(l);
    if (listener_clients(l) >= l->max_clients && !over) {
        why = "server busy: too many connections (max_connections)";
        counter = &l->stats.refused_max;
    } else if ((peer = peer_get(l, c->addr)) != NULL && peer->count >= l->lim.max_per_peer) {
        why = "server busy: too many connections from this address (max_connections_per_peer)";
        counter = &l->stats.refused_peer;
    } else if (c->preauth && listener_preauth(l) >= l->max_preauth && !over) {
        why = "server busy: too many connections are waiting for AUTH (half of max_connections)";
        counter = &l->stats.refused_max;
    }
    if (why == NULL && peer != NULL) {
        peer->count++;
    }
    if (why != NULL) {
        if (peer != NULL) {
            peer_drop(l, peer);
        }
        peers_unlock(l);
        if (l->reserve_used < l->lim.router_reserve) {
            /* A router's connection must not be refused for clients' numbers: it may say
             * HELLO from the reserve first; anything else gets the refusal. */
            c->probation = true;
            c->refusal = why;
            c->refusal_counter = counter;
            l->reserve_used++;
        } else {
            conn_refuse_counted(c, counter, CONN_WARN_REFUSED, RL_WIRE_ERR_OVERLOADED, why);
            return;
        }
    } else {
        peers_unlock(l);
        if (peer != NULL) {
            c->peer_entry = peer;
            listener_count_client(l, 1);
            if (c->preauth) {
                preauth_join(l, c);
            }
        }
    }
    if (conn_start_reading(c) != 0) {
        rl_conn_close(c, UV_EIO);
    }
}

bool
rl_conn_set_router(struct rl_conn *c)
{
    struct rl_listener *l = c->listener;

    if (l == NULL || c->router) {
        return true;
    }
    if (c->probation) {
        c->probation = false;
    } else {
        if (l->reserve_used >= l->lim.router_reserve) {
            c->hello = true; /* a router's connection all the same: kept while quiet */
            return l->lim.router_reserve == 0; /* no reserve: it stays a client */
        }
        conn_unclient(c);
        l->reserve_used++;
    }
    c->router = true;
    l->stats.routers++;
    return true;
}

/* Refuses what waited too long in the router reserve, closes idle connections, and times out
 * unfinished frames. */
static void
listener_tick(uv_timer_t *t)
{
    struct rl_listener *l = t->data;
    uint64_t now = uv_now(l->q->loop);
    struct rl_conn *next;
    char msg[128];

    preauth_pay_debt(l);
    for (struct rl_conn *c = l->conns; c != NULL; c = next) {
        next = c->next;
        if (!c->connected || c->finishing) {
            continue;
        }
        if (c->probation && now - c->accepted_ms >= RL_CONN_PROBATION_MS) {
            conn_refuse_probation(c);
        } else if (c->preauth && now - c->accepted_ms >= l->lim.auth_timeout_ms) {
            snprintf(msg, sizeof(msg), "no AUTH within %" PRIu64 " ms of connecting (auth_timeout)",
                     l->lim.auth_timeout_ms);
            conn_pause(c);
            conn_refuse_counted(c, &l->stats.auth_timeouts, CONN_WARN_AUTH_TIMEOUT,
                                RL_WIRE_ERR_UNAUTHORIZED, msg);
        } else if (c->partial_ms != 0 && c->reading && l->lim.frame_timeout_ms != 0 &&
                   now - c->partial_ms >= l->lim.frame_timeout_ms) {
            snprintf(msg, sizeof(msg), "frame not completed within %" PRIu64 " ms (frame_timeout)",
                     l->lim.frame_timeout_ms);
            conn_pause(c);
            conn_refuse_counted(c, &l->stats.frame_timeouts, CONN_WARN_FRAME_TIMEOUT,
                                RL_WIRE_ERR_MALFORMED, msg);
        } else if (l->lim.idle_timeout_ms != 0 && c->holds == 0 && !c->router && !c->hello &&
                   now - c->active_ms >= l->lim.idle_timeout_ms) {
            l->stats.idle_closes++;
            rl_log_debug("client %s: idle for %" PRIu64 " ms (idle_timeout), closed", c->peer,
                         now - c->active_ms);
            rl_conn_close(c, 0);
        }
    }
}

int
rl_listener_start(struct rl_listener *l, struct rl_connq *q, const char *host, uint16_t port,
                  const struct rl_conn_ops *ops, size_t conn_size,
                  const struct rl_conn_limits *lim, void *data)
{
    struct sockaddr_storage addr;
    uint64_t room;
    int rc;

    memset(l, 0, sizeof(*l));
    l->q = q;
    l->on_conn_leave = conn_listener_leave; /* for conn.c's close */
    l->on_conn_freed = conn_listener_closed;
    l->ops = ops;
    l->conn_size = conn_size < sizeof(struct rl_conn) ? sizeof(struct rl_conn) : conn_size;
    l->data = data;
    l->lim = lim != NULL ? *lim : rl_conn_limits_default();
    if (l->lim.max_connections == 0) {
        l->lim.max_connections = RL_CONN_DEFAULT_MAX_CONNECTIONS;
    }
    if (l->lim.max_per_peer == 0) {
        l->lim.max_per_peer = l->lim.max_connections;
    }
    if (l->lim.auth_timeout_ms == 0) {
        l->lim.auth_timeout_ms = RL_CONN_DEFAULT_AUTH_TIMEOUT_MS;
    }
    if (l->lim.buffer_memory != 0) {
        q->client_budget = l->lim.buffer_memory; /* one listener per loop in every program */
    }
    /* Every client, router and refusal in progress needs a descriptor: fit them under the
     * limit, so a refusal is an ERROR the client reads, never a silent close. */
    l->fd_limit = rl_conn_raise_fd_limit();
    room = l->fd_limit > RL_CONN_FD_SLACK + l->lim.router_reserve
               ? l->fd_limit - RL_CONN_FD_SLACK - l->lim.router_reserve
               : 1;
    l->max_clients = l->lim.max_connections <= room ? l->lim.max_connections : (uint32_t)room;
    if (l->max_clients < l->lim.max_connections) {
        rl_log_warn("the descriptor limit (%" PRIu64 ", ulimit -n) is below max_connections "
                    "(%" PRIu32 ") + router_reserve (%" PRIu32 ") + %u for the rest: taking at "
                    "most %" PRIu32 " clients, refusing more with ERROR OVERLOADED; raise the "
                    "hard limit (LimitNOFILE=, ulimit -Hn) or lower max_connections",
                    l->fd_limit, l->lim.max_connections, l->lim.router_reserve, RL_CONN_FD_SLACK,
                    l->max_clients);
    }
    l->max_preauth = l->max_clients / 2 != 0 ? l->max_clients / 2 : 1;
    uv_tcp_init(q->loop, &l->tcp);
    l->tcp.data = l;
    uv_timer_init(q->loop, &l->tick);
    l->tick.data = l;
    l->handles = 2;
    rc = host == NULL ? 0 : uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
    if (rc != 0) {
        rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr);
    }
    if (rc == 0 && host == NULL) {
        /* No socket of its own: connections come through rl_listener_adopt. */
    } else if (rc == 0) {
        rc = uv_tcp_bind(&l->tcp, (const struct sockaddr *)&addr, 0);
    }
    if (rc == 0 && host != NULL) {
        rc = uv_listen((uv_stream_t *)&l->tcp, 1024, listener_accept);
    }
    if (rc == 0) {
        uv_timer_start(&l->tick, listener_tick, RL_CONN_TICK_MS, RL_CONN_TICK_MS);
    }
    return rc;
}

void
rl_listener_stats(const struct rl_listener *l, struct rl_listener_stats *s)
{
    *s = l->stats;
    s->buffer_bytes = l->q->client_bytes;
    /* The loop's TLS handshake gate: every front of the loop, not this listener's alone. */
    s->tls_handshakes = l->q->hs_stats.started;
    s->tls_handshakes_done = l->q->hs_stats.done;
    s->tls_deferred = l->q->hs_stats.deferred;
    s->tls_refused_peer = l->q->hs_stats.refused_peer;
    s->tls_refused_all = l->q->hs_stats.refused_all;
    s->tls_evicted = l->q->hs_stats.evicted;
    s->tls_handshaking = l->q->hs_stats.in_progress;
    if (l->shared != NULL) {
        /* The addresses are the shared table's (rl_conn_shared.npeers): not one listener's. */
        s->peers = 0;
    }
}

void
rl_listener_close(struct rl_listener *l, void (*on_closed)(struct rl_listener *l))
{
    if (l->closing) {
        return;
    }
    l->closing = true;
    l->on_closed = on_closed;
    uv_close((uv_handle_t *)&l->tcp, listener_handle_closed);
    uv_close((uv_handle_t *)&l->tick, listener_handle_closed);
    while (l->conns != NULL) {
        rl_conn_close(l->conns, 0);
    }
}

void
rl_listener_finish(struct rl_listener *l)
{
    struct rl_conn *next;

    for (struct rl_conn *c = l->conns; c != NULL; c = next) {
        next = c->next;
        c->linger = c->tls == NULL; /* (TLS ends with its own close: not lingered) */
        rl_conn_finish(c);
    }
}

/* ---- connections held elsewhere (the router's other fronts) ------------------------------ */

bool
rl_listener_peer_take(struct rl_listener *l, const uint8_t *addr)
{
    struct rl_conn_peer *peer;
    bool ok = false;

    peers_lock(l);
    peer = peer_get(l, addr);
    if (peer != NULL && peer->count < l->lim.max_per_peer) {
        peer->count++;
        ok = true;
    } else if (peer != NULL) {
        peer_drop(l, peer);
    }
    peers_unlock(l);
    return ok;
}

void
rl_listener_peer_put(struct rl_listener *l, const uint8_t *addr)
{
    struct rl_conn_peer *peer;

    peers_lock(l);
    peer = peer_find(l, addr);
    if (peer != NULL && peer->count > 0) {
        peer->count--;
        peer_drop(l, peer);
    }
    peers_unlock(l);
}
