/*
 * front_admit: a new front connection's admission (front_int.h): the binary listener's client
 * caps applied to it (max_connections_per_peer with the process's per-address table, failed
 * AUTHs per address for a front that authenticates connections), the front's pre-AUTH share
 * (half of its max_connections, process wide) and the loop's list of connections still
 * opening, whose oldest makes room for a newcomer when that share is full; and leaving them
 * (rl_front_authenticated, or closing). Not for reading, writing or timing connections
 * (front.c).
 */
#include <stdio.h>
#include <string.h>

#include <sys/socket.h>
#include <netinet/in.h>

#include "front_int.h"
#include "log.h"

/* The peer's address, as conn.c words it. */
void
front_peer_name(struct rl_front_conn *c, uv_os_sock_t fd)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof(sa);
    char ip[48]; /* INET6_ADDRSTRLEN */

    memset(c->addr, 0, sizeof(c->addr));
    snprintf(c->peer, sizeof(c->peer), "?");
    if (getpeername(fd, (struct sockaddr *)&sa, &len) != 0) {
        return;
    }
    if (sa.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&sa;

        uv_ip6_name(a, ip, sizeof(ip));
        snprintf(c->peer, sizeof(c->peer), "[%s]:%u", ip, ntohs(a->sin6_port));
        memcpy(c->addr, &a->sin6_addr, 16);
    } else if (sa.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&sa;

        uv_ip4_name(a, ip, sizeof(ip));
        snprintf(c->peer, sizeof(c->peer), "%s:%u", ip, ntohs(a->sin_port));
        c->addr[10] = c->addr[11] = 0xff;
        memcpy(c->addr + 12, &a->sin_addr, 4);
    }
}

/* Opening connections, per kind, oldest first. */
void
front_opening_unlink(struct rl_front_conn *c)
{
    struct rl_front *g = c->r->front;

    if (!c->opening) {
        return;
    }
    c->opening = false;
    if (c->op_prev != NULL) {
        c->op_prev->op_next = c->op_next;
    } else {
        g->opening_old[c->kind] = c->op_next;
    }
    if (c->op_next != NULL) {
        c->op_next->op_prev = c->op_prev;
    } else {
        g->opening_new[c->kind] = c->op_prev;
    }
    c->op_prev = c->op_next = NULL;
}

void
front_opening_link(struct rl_front_conn *c)
{
    struct rl_front *g = c->r->front;

    c->opening = true;
    c->op_next = NULL;
    c->op_prev = g->opening_new[c->kind];
    if (c->op_prev != NULL) {
        c->op_prev->op_next = c;
    } else {
        g->opening_old[c->kind] = c;
    }
    g->opening_new[c->kind] = c;
}

/*
 * The connections of a front kind not yet authenticated (still opening: every front, with or
 * without [client] sections): at most half of its max_connections, process wide, counted in
 * the worker group (none for a router alone). take: one more (false: the share is full);
 * put: it authenticated or closed.
 */
static bool
front_preauth_take(struct rl_wgroup_front *f)
{
    uint32_t max = f->max / 2 > 0 ? f->max / 2 : 1;
    uint32_t n = __atomic_load_n(&f->preauth, __ATOMIC_RELAXED);

    do {
        if (n >= max) {
            return false;
        }
    } while (!__atomic_compare_exchange_n(&f->preauth, &n, n + 1, false, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    return true;
}

static void
front_preauth_put(struct rl_front_conn *c)
{
    if (c->preauth) {
        c->preauth = false;
        __atomic_fetch_sub(&c->r->group->fronts[c->kind].preauth, 1, __ATOMIC_RELAXED);
    }
}

void
front_release(struct rl_front_conn *c)
{
    if (c->peer_counted) {
        c->peer_counted = false;
        rl_listener_peer_put(&c->r->listener, c->addr);
    }
    front_preauth_put(c);
}

void
rl_front_authenticated(struct rl_front_conn *c)
{
    if (c->opening) {
        front_opening_unlink(c);
        front_preauth_put(c);
    }
}

/*
 * The client caps of the binary listener (conn.h), for a new connection c of a front (its
 * address known): [clients] max_connections_per_peer counted with the binary protocol's and
 * every front's connections from that address (the router's listener's table, shared by the
 * workers); for a front that authenticates each connection (RESP's AUTH) while [client]
 * sections exist, an address past its failed AUTHs is refused; and the connections not yet
 * authenticated (opening) hold at most half of the front's max_connections, the loop's
 * oldest opening one closed for the new one when that is full. A refused connection is
 * told why (the protocol's refusal, in plaintext, when the router has no TLS) and closed.
 * 0, or UV_ECONNREFUSED.
 */
int
front_admit(struct rl_router *r, struct rl_front_conn *c, uv_os_sock_t fd,
            struct rl_front_conn **evict)
{
    struct rl_listener_stats *st = &r->listener.stats;
    struct rl_front *g = r->front;
    const char *why = NULL;
    uint64_t *counter = NULL, now = uv_now(r->loop), wait = 0;
    char msg[200];

    *evict = NULL;
    if (c->ops->auth_per_connection && r->conf->nauth_clients > 0 &&
        (wait = rl_listener_auth_wait_ms(&r->listener, c->addr)) > 0) {
        snprintf(msg, sizeof(msg),
                 "too many failed AUTHs from this address (more than %u a second): try again "
                 "in %llu ms",
                 RL_CONN_AUTHFAIL_RATE, (unsigned long long)wait);
        why = msg;
        counter = &st->refused_auth_rate;
    } else if (!rl_listener_peer_take(&r->listener, c->addr)) {
        why = "server busy: too many connections from this address (max_connections_per_peer)";
        counter = &st->refused_peer;
    } else {
        c->peer_counted = true;
        struct rl_wgroup_front *gf = &r->group->fronts[c->kind];

        if (gf->max != 0) {
            struct rl_front_conn *old = g->opening_old[c->kind];

            if (front_preauth_take(gf)) {
                c->preauth = true;
            } else if (old != NULL) {
                /* the share is full: this loop's oldest connection still opening makes room
                 * (its slot is taken over, whatever another worker took meanwhile; the
                 * caller closes it, which gives its slot back) */
                st->preauth_closes++;
                *evict = old;
                __atomic_fetch_add(&gf->preauth, 1, __ATOMIC_RELAXED);
                c->preauth = true;
            } else {
                why = "server busy: too many connections have not authenticated yet (half "
                      "of max_connections)";
                counter = &st->refused_max;
            }
        }
    }
    if (why == NULL) {
        return 0;
    }
    front_release(c);
    (*counter)++;
    st->connections_refused++;
    if (g->refused_warned_ms == 0 || now - g->refused_warned_ms >= 10000) {
        g->refused_warned_ms = now != 0 ? now : 1;
        rl_log_warn("%s front: client %s refused: %s (said at most every 10 s)", c->ops->name,
                    c->peer, why);
    }
    if (c->ops->refusal != NULL && r->opts.tls_server == NULL) {
        char out[256];
        size_t n = c->ops->refusal(out, sizeof(out), why);

        /* a new socket's buffer is empty: a line this short goes out whole, or not at all */
        (void)!send(fd, out, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    return UV_ECONNREFUSED;
}

