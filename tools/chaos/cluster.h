/*
 * cluster: the throwaway cluster one rl-chaos run starts and the faults it injects into it.
 * cluster.c owns its set-up and its stop (ZooKeeper, a fault proxy on every node's path from
 * the routers and to ZooKeeper, the nodes, the routers, the observer), reading the routers'
 * STATS and reaping processes that died unasked; faults.c carries out the scenario's steps
 * and the direct probes of a node cut off from ZooKeeper; loop.c drives both on the clock.
 * Processes come from the harness library (harness/), so they die with rl-chaos however it
 * ends.
 */
#ifndef RL_CHAOS_CLUSTER_H
#define RL_CHAOS_CLUSTER_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "chaos.h"
#include "harness.h"

struct rl_client;
struct rl_proxy;
struct ch_observer;

/* The cluster's name in ZooKeeper and in its configs. */
#define CH_CLUSTER_NAME "chaos"

struct ch_cluster {
    struct ch_run *run;
    struct rl_harness_zk zk;
    struct rl_harness_server node[CH_NODES_MAX];
    struct rl_harness_server router[CH_ROUTERS_MAX];
    bool node_expected_down[CH_NODES_MAX];
    bool router_expected_down[CH_ROUTERS_MAX];
    bool zk_down, zk_paused;
    int64_t zk_down_since; /* wall clock of the outage's start, 0 while it serves */
    struct rl_proxy *px_routers[CH_NODES_MAX]; /* routers -> node */
    struct rl_proxy *px_zk[CH_NODES_MAX];      /* node -> ZooKeeper */
    char node_conf[CH_NODES_MAX][PATH_MAX];
    char router_conf[CH_ROUTERS_MAX][PATH_MAX]; /* one each: across hosts, its certificate */
    /* with --report: each router's request log (every request), read after the run */
    char router_reqlog[CH_ROUTERS_MAX][PATH_MAX];
    struct ch_observer *observer;
    struct rl_client *stats_client[CH_ROUTERS_MAX];
    /* steps whose "for" ends later: their end time, or 0 */
    int64_t undo_at[CH_STEPS_MAX];
    /* a step with a "for": its impairment's index + 1 (0: none), whose end its undo sets to
     * when the fault was really gone (commands that undo it may take a while, `ip` on a
     * starved machine seconds) */
    int step_impair[CH_STEPS_MAX];
    int64_t probe_until[CH_NODES_MAX]; /* wall clock; direct probes while cut from ZooKeeper */
    char probe_user[CH_NODES_MAX][32];
    int open_impair[CH_NODES_MAX]; /* index of the open impairment of a killed node, or -1 */
    int proxy_port[CH_NODES_MAX];  /* what a node advertises: its routers-side proxy */
    bool isolated[CH_NODES_MAX];   /* across hosts: the node's interface is down */
    bool draining[CH_NODES_MAX];   /* a `drain` step's SIGTERM sent, its exit not yet reaped */
};

/* cluster.c: starts ZooKeeper, the proxies, the nodes, the routers and the observer (c->run
 * set, the rest zeroed); 0, or an error already printed. */
int ch_cluster_start(struct ch_cluster *c);

/*
 * Stops what the run started: traffic, the observer, the routers and the nodes (SIGTERM,
 * and with `judge` a survivor that does not exit 0 is a violation), the proxies and
 * ZooKeeper. Safe on a cluster that was only partly started.
 */
void ch_cluster_stop(struct ch_cluster *c, bool judge);

/* Samples every router's table into the run; returns how many agree with ZooKeeper's, and
 * in *alive how many routers run. */
int ch_cluster_sample(struct ch_cluster *c, int *alive);

/* Shards in flight on the running nodes (their STATS shards_incoming + shards_outgoing),
 * or -1 when a node cannot be asked now. */
int64_t ch_cluster_in_flight(struct ch_cluster *c);

/* Why the routers answered by policy, from their STATS: for reading a failure. */
void ch_cluster_print_causes(struct ch_cluster *c);

/* The routers' backstop counters (STATS backstop_allowed, backstop_limited, since each
 * one's last start) summed into the run's backstop_stats. */
void ch_cluster_backstop_stats(struct ch_cluster *c);

/* Processes that exited without a step asking them to: each is a violation. */
void ch_cluster_reap(struct ch_cluster *c);

/* cluster.c: starts node i or router i as configured (again, for a restart): on loopback,
 * or on its host. 0, or the harness's error. */
int ch_cluster_start_node(struct ch_cluster *c, int i);
int ch_cluster_start_router(struct ch_cluster *c, int i);

/* faults.c: carries out step si of the scenario now (setting c->undo_at[si] when it ends by
 * itself later), and its end. */
void ch_fault_do(struct ch_cluster *c, int si);
void ch_fault_undo(struct ch_cluster *c, int si);

/* Probes node directly, when a step cut it from ZooKeeper: did it still decide? */
void ch_fault_probe(struct ch_cluster *c, int node);

#endif
