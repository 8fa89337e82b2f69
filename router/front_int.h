/*
 * front_int: what front.c (reading, writing, the loop's timer and turn) and front_admit.c
 * (a new connection's admission: the client caps, the pre-AUTH share, the opening list)
 * share, and nothing else includes: the per-loop state and a connection. Not for the
 * protocols (front.h is theirs).
 */
#ifndef RL_FRONT_INT_H
#define RL_FRONT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "front.h"
#include "router_int.h"

#define FRONT_READ_BUF (64u * 1024)

/* The per-loop state: the connections, one read buffer, one timer. */
struct rl_front {
    struct rl_front_conn *conns;
    uint32_t nconns;
    bool draining; /* rl_front_drain: no connection reads any more */
    uint64_t held; /* request bytes held by every connection of this loop */
    uv_timer_t timer;
    bool ticking;
    uint64_t tick_ms; /* the timer's period: the smallest of the fronts' */
    char rbuf[FRONT_READ_BUF];
    bool rbuf_busy;
    char *tbuf; /* FRONT_READ_BUF, with TLS: where a read is decrypted */
    /* Connections with answers queued (rl_front_mark): flushed once per loop turn by the
     * check handle, so the answers a turn produced for one connection go out in one write.
     * The idle handle runs while the list is not empty: the loop does not block in poll
     * before the check when a mark came from outside the poll phase (a timer). */
    uv_check_t check;
    uv_idle_t idle;
    struct rl_front_conn *dirty;
    uint64_t refused_warned_ms; /* a refusal was last logged (at most every 10 s) */
    uint64_t evict_warned_ms;   /* a buffer eviction was last logged (at most every 10 s) */
    uint64_t turn; /* loop turns (front_check_cb): the per-turn input budget's clock */
    /* connections through their budget this turn and the last, by address, and the input
     * charged to all this turn: a connection's budget shrinks as more clients, and more
     * connections of its address, use theirs (front_turn_budget, common/turnshare.h) */
    struct rl_turnshare share;
    uint64_t turn_all;
    struct rl_front_conn *throttled; /* through their input budget: reading again next turn */
    /* Connections still opening (not yet authenticated), per front kind, oldest first: the
     * oldest makes room for a newcomer when the front's pre-AUTH share is full. */
    struct rl_front_conn *opening_old[RL_FRONT_KINDS], *opening_new[RL_FRONT_KINDS];
};

struct front_wreq {
    uv_write_t req;
    struct rl_front_conn *c;
    size_t len;
    uint8_t data[];
};

struct rl_front_conn {
    uv_tcp_t tcp;
    struct rl_router *r;
    const struct rl_front_ops *ops;
    enum rl_front_kind kind;
    void *proto;
    struct rl_front_conn *prev, *next;
    struct front_wreq *out; /* output queued by rl_front_write, not yet written */
    size_t out_len, out_cap;
    bool out_failed;    /* rl_front_write ran out of memory */
    uint64_t held;      /* request bytes held by the protocol */
    uint64_t active_ms; /* loop time of the last read, or of the last rl_front_touch */
    size_t writing;     /* bytes handed to uv_write and not yet written */
    bool reading;
    bool closing;
    uint8_t addr[16]; /* the peer's, IPv4 mapped into IPv6 */
    char peer[64];    /* "ip:port" */
    struct rl_tls *tls;    /* NULL: plain TCP (the router's [cluster] tls_* unset) */
    bool tls_sniff;        /* nothing read yet: a plaintext client is closed at once */
    struct rl_buf tls_out; /* TLS: plaintext queued before the handshake was done */
    struct rl_conn_hs hs;  /* TLS: its handshake at the loop's gate (conn.h, rl_connq_hs_*) */
    bool paused;      /* rl_front_pause: the protocol takes no input for now */
    bool shut_wanted; /* rl_front_shutdown: FIN after the output queued */
    bool shut;        /* FIN requested (uv_shutdown) */
    uv_shutdown_t shutdown;
    bool dirty; /* on the loop's dirty list (rl_front_mark) */
    struct rl_front_conn *dirty_prev, *dirty_next;
    bool peer_counted; /* counted in the process's per-address table (rl_listener_peer_take) */
    bool preauth;      /* counted as not yet authenticated (front_preauth_take) */
    bool opening;      /* not yet authenticated: on the loop's opening list, closed at
                          auth_timeout after accept (front_tick) */
    struct rl_front_conn *op_prev, *op_next; /* the opening list (older, newer) */
    uint64_t opened_ms;                      /* loop time of the accept */
    uint64_t wprog_ms;  /* loop time output last made progress (or began to wait) */
    size_t wq_seen;     /* the socket's unsent bytes at the last tick */
    uint64_t turn;      /* the loop turn turn_used counts in */
    uint64_t turn_used; /* input cost taken this turn (bytes read, rl_front_charge) */
    bool throttled;     /* on the loop's throttled list: not reading until the next turn */
    struct rl_front_conn *thr_next;
};

/* front_admit.c: the client caps of a new connection c (its address known), the pre-AUTH
 * share taken (when the share is full, the loop's oldest opening connection of its front
 * gives c its slot: *evict is set to it, which the caller closes; NULL otherwise). 0, or
 * UV_ECONNREFUSED (c was told why, and counted nothing). */
int front_admit(struct rl_router *r, struct rl_front_conn *c, uv_os_sock_t fd,
                struct rl_front_conn **evict);

/* The caps front_admit counted c against, released (c closes). */
void front_release(struct rl_front_conn *c);

/* c's peer address, as conn.c words it (c->addr, c->peer). */
void front_peer_name(struct rl_front_conn *c, uv_os_sock_t fd);

/* The loop's opening connections of each front kind, oldest first: c joins (adopted) or
 * leaves (authenticated, or closing; nothing when it is not on it). */
void front_opening_link(struct rl_front_conn *c);
void front_opening_unlink(struct rl_front_conn *c);

#endif
