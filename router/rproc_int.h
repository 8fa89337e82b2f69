/*
 * rproc_int: what the router process's files share (rproc.c, rproc_worker.c,
 * rproc_accept.c) and nothing else may use: the process, its workers and their mailboxes,
 * the fronts' listeners. The public API is rproc.h's.
 */
#ifndef RL_RPROC_INT_H
#define RL_RPROC_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "fronts.h"
#include "rproc.h"
#include "router_int.h"
#include "rules.h"

#define RPROC_ACCEPT_BATCH 64u     /* sockets accepted per poll callback */
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
    bool draining; /* the loop thread's: stop seen, the router drains (rl_router_drain) */
    bool envoy_new;  /* rl_rproc_set_envoy: take p->envoy */
    bool slices_new; /* rl_rproc_slices_changed: forget the deny cache */
    char *zk_rules;  /* the newest rules znode text not yet taken; NULL: none */
    size_t zk_rules_len;
    int64_t zk_rules_version;
    uint32_t queued; /* sockets handed over and not adopted yet (main thread's count) */

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
    uint32_t next;          /* round robin among equally loaded workers */

    uv_os_sock_t lfd;
    uv_poll_t poll;
    uv_timer_t retry;
    uv_timer_t gate; /* the longest the first view is waited for before accepting */
    uv_barrier_t drained; /* a stop: every worker has drained before any router is freed */
    bool drain_sync;      /* drained is initialised (rproc_stop_workers) */
    uv_async_t stale;
    bool gated;      /* no membership yet: connections wait in the kernel's queue */
    bool polling;
    bool closing;
    int handles;
    uint64_t accept_errors;

    /* the fronts' listeners, those configured */
    struct rproc_front fronts[RL_FRONT_KINDS];
    struct rl_envoy_config *envoy; /* the latest envoy_config, under state_mu (one hold) */

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

/* ---- rproc_worker.c: the worker threads and their mailboxes ------------------------------ */

/* Starts the workers one after another, each loading nothing (its config is loaded) and
 * creating its router; *started: how many run. 0, or the failure (err says which). */
int rproc_start_workers(struct rl_rproc *p, uint32_t *started, char *err, size_t errlen);

/* Stops every started worker and waits for its thread. */
void rproc_stop_workers(struct rl_rproc *p, uint32_t started);

/* Flags the process's latest state for every worker to copy, and wakes them. */
void rproc_post_all(struct rl_rproc *p, bool members, bool asg, bool zk, bool hup);

/* Hands fd to w's mailbox: a client of the binary protocol (front NULL), else one of
 * *front's. 0 or -ENOMEM. */
int rproc_hand(struct rproc_worker *w, uv_os_sock_t fd, const struct rproc_front *front);

/* A socket accepted on front kind's listener is gone before a worker served it. */
void rproc_front_gone(struct rl_rproc *p, enum rl_front_kind kind);

/* ---- rproc_accept.c: the acceptor (main loop) ------------------------------------------- */

/* Opens the listening sockets: the binary protocol's, then each front's of the front table
 * that conf configures. 0, or a negative errno (err says which). */
int rproc_accept_listen(struct rl_rproc *p, const struct rl_conf *conf, char *err, size_t errlen);

/* Readies accepting on them (the process's handles, closed by rproc_accept_close with
 * closed_cb): it starts with the first membership (rproc_accept_open), or after
 * RPROC_GATE_MS at most (the session timeout if shorter) when none comes, so that a router
 * (re)started under traffic answers nothing by failure policy only because it has not read
 * its view yet; meanwhile connections wait in the listen queue, accepted by the kernel. */
void rproc_accept_start(struct rl_rproc *p);

/* The first membership is in (every worker has it before a socket): accepting starts. */
void rproc_accept_open(struct rl_rproc *p);

#define RPROC_GATE_MS 2000u
void rproc_accept_close(struct rl_rproc *p, uv_close_cb closed_cb);

/* Closes the listening sockets not yet polled (a failed start). */
void rproc_accept_unlisten(struct rl_rproc *p);

#endif
