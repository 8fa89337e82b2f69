/*
 * rproc: a router process of `[router] workers` threads (docs/OPERATIONS.md, "Workers"). The
 * main thread keeps what there is one of per process: the ZooKeeper session (the caller's,
 * main.c), the listening socket and its acceptor, the latest membership and assignment, the
 * request log's writer and the metrics listener (the caller's). Each worker is a thread with
 * its own libuv loop and its own rl_router (router.h): its client connections, its pending
 * requests, its connections to every node, its shard table and its copy of the rules.
 *
 *   - connections: the acceptor accepts on the main loop and hands each socket to the worker
 *     with the fewest open connections (ties: round robin), which adopts it (rl_router_adopt);
 *   - membership, assignment and the ZooKeeper state: rl_rproc_set_* keep the latest of each
 *     and wake every worker (uv_async), which rebuilds its table from them (the same view in
 *     every worker: the latest one set, whichever updates it coalesced);
 *   - rules: every worker parses the new rules itself (rules.h, on libuv's thread pool) and
 *     swaps them into its own conf with the retire logic of router.h; SIGHUP and rules pushes
 *     reach every worker;
 *   - the request log: one writer on the main loop, fed by every worker (reqlog.h);
 *   - STATS (answered by any worker) and /metrics: every worker's counters summed;
 *   - the worker group (router_int.h's struct rl_wgroup): what each worker reads of the
 *     process (the other workers, the acceptor's counts, the fronts' connection counts),
 *     handed to its router at create, so that no worker calls up into this file.
 *
 * Not for what a worker does with a request (router.h).
 */
#ifndef RL_RPROC_H
#define RL_RPROC_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "conf.h"
#include "metrics.h"
#include "front.h"
#include "router.h"

struct rl_rproc;
struct rl_member;

/* Requests in flight to nodes per process (router.h's max_pending default), divided among
 * the workers. */
#define RL_RPROC_MAX_PENDING 262144u

struct rl_rproc_opts {
    struct rl_router_opts router; /* every worker's (adopt and log are set by rproc) */
    const char *config_path;      /* each worker loads its own copy of the config */
    uint32_t workers;             /* 0: uv_available_parallelism() (at most 64) */
    /* Optional: a node said a worker's view is stale; called on the main loop. */
    void (*on_stale)(void *arg);
    void *arg;
};

/* Workers to run for conf's [router] workers: its value, else one per core (1..64). */
uint32_t rl_rproc_default_workers(const struct rl_conf *conf);

/*
 * Listens on opts->router.host:port, opens conf's request log on loop (the main loop) and
 * starts the workers (each loads opts->config_path). Returns 0 or a negative errno (the
 * listening socket's, a worker's start-up failure), after which nothing is left running.
 * err (may be NULL) gets a line saying what failed.
 */
int rl_rproc_create(struct rl_rproc **out, uv_loop_t *loop, const struct rl_conf *conf,
                    const struct rl_rproc_opts *opts, char *err, size_t errlen);

uint32_t rl_rproc_workers(const struct rl_rproc *p);


/* The membership (copied), the assignment (copied), the ZooKeeper state: as router.h's
 * rl_router_set_members, _set_assignment and _set_zookeeper, for every worker. */
void rl_rproc_set_members(struct rl_rproc *p, const struct rl_member *members, size_t n);
void rl_rproc_set_assignment(struct rl_rproc *p, const char *text, size_t len, int64_t version);
void rl_rproc_set_zookeeper(struct rl_rproc *p, const char *addr, int state);
/* The regions' slices changed (docs/REGIONS.md): every worker forgets its deny cache. */
void rl_rproc_slices_changed(struct rl_rproc *p);


/* SIGHUP reloaded [cluster] envoy_config: every worker's new gRPC calls use sh (held). */
void rl_rproc_set_envoy(struct rl_rproc *p, struct rl_envoy_config *sh);


/* SIGHUP: reopens the request log and has every worker reload the rules of the config file. */
void rl_rproc_hup(struct rl_rproc *p);

/* The rules znode changed (text copied): every worker puts them in force (rules.h). */
void rl_rproc_rules_from_zk(struct rl_rproc *p, const char *text, size_t len, int64_t version);

/* /metrics and /readyz, on the main loop: the process's sums (rl_router_metrics). */
void rl_rproc_metrics(struct rl_rproc *p, struct rl_prom *prom);
bool rl_rproc_ready(struct rl_rproc *p, char *why, size_t len);

/* Stops accepting, closes every worker and waits for their threads, then closes the request
 * log (run the main loop to finish) and frees p. */
void rl_rproc_close(struct rl_rproc *p);

#endif
