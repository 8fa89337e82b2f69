/*
 * scenario: what rl-chaos runs, read from a small INI file (docs/CHAOS.md has the format):
 * the cluster's shape and timings, the services with their limits and failure policies,
 * the traffic, the timed fault steps, and the bounds the run must stay within.
 * Not for running anything (main.c) nor for judging a run (verdict.c).
 */
#ifndef RL_CHAOS_SCENARIO_H
#define RL_CHAOS_SCENARIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CH_NODES_MAX 8
#define CH_ROUTERS_MAX 4
#define CH_SERVICES_MAX 4
#define CH_STEPS_MAX 64
#define CH_NAME_MAX 32
#define CH_TEXT_MAX 128

/* What a step does. */
enum ch_action {
    CH_KILL,      /* SIGKILL (node, router) */
    CH_TERM,      /* SIGTERM: the clean stop (node, router) */
    CH_PAUSE,     /* SIGSTOP, then SIGCONT after `for` (node, zookeeper) */
    CH_RESTART,   /* start again with the same name, port and config (node, router) */
    CH_STOP,      /* zookeeper: SIGTERM, started again after `for` when given */
    CH_START,     /* zookeeper: start again */
    CH_PARTITION, /* cut both ways (node from routers / from zookeeper) for `for` */
    CH_ONEWAY,    /* requests pass, answers are lost (node from routers / zookeeper) */
    CH_DELAY,     /* added latency on the path (node from routers / zookeeper) */
    CH_RESET,     /* every connection on the path reset (node from routers / zookeeper) */
    CH_ISOLATE,   /* across hosts only: the node's host's interface down for `for` */
    CH_ADD,       /* a node not started with the cluster starts and joins (scale-out) */
    CH_DRAIN,     /* SIGTERM to a node, not waited for: it hands its shards off while the run
                     goes on (a later step may kill it, or another node, mid-move) */
    CH_ASSIGN,    /* an assignment moving arg shards written by compare-and-set, as
                     rl-rebalance writes one (target zookeeper) */
    CH_ROLLBACK,  /* the previous assignment written back, as rl-rebalance --rollback */
};

/* What a planned move (a shard's owner changed while its old owner stayed a member: a clean
 * stop, a join, an assignment) does to the shard's counters, as the verdict judges it. */
enum ch_planned {
    CH_PLANNED_KEEP,   /* handed off: the new owner continues them (exactness across it) */
    CH_PLANNED_EITHER, /* handed off, or started afresh (a move interrupted): today's bound */
};

enum ch_target { CH_NODE, CH_ROUTER, CH_ZOOKEEPER };
enum ch_path { CH_PATH_ROUTERS, CH_PATH_ZK };

struct ch_step {
    int64_t at_ms;
    int64_t for_ms; /* 0: no automatic end */
    int64_t arg_ms; /* delay: the added latency; assign: how many shards */
    enum ch_action action;
    enum ch_target target;
    int index;         /* node or router index */
    enum ch_path path; /* partition, oneway, delay, reset */
    int line;
    char text[CH_TEXT_MAX]; /* the step as written, for the event log */
};

struct ch_service {
    char name[CH_NAME_MAX];
    char limit[CH_TEXT_MAX]; /* the cluster.conf limit line */
    bool fail_closed;
    /* fixed_window rules are judged per window; other algorithms only for liveness and
     * policy (docs/CHAOS.md) */
    bool windowed;
    uint64_t limit_n;
    uint64_t window_ms;
    uint32_t weight;
};

/* The bounds a scenario asserts on top of the invariants ([expect]); -1: none. */
struct ch_expect {
    int64_t max_policy;          /* policy answers, in all */
    int64_t min_policy;          /* at least this many (a fault that must be felt) */
    int64_t max_extra;           /* allowances past L summed over windows */
    int64_t max_latency_ms;      /* slowest answer */
    int64_t max_move_ms;         /* fault start to shards moved in ZooKeeper */
    int64_t max_stale_ms;        /* how long a node cut off from ZooKeeper answers directly */
    int64_t max_view_changes;    /* membership or assignment changes seen during the run */
};

struct ch_scenario {
    char name[CH_NAME_MAX];
    char description[256];
    int nodes;
    int routers;
    uint32_t shards;
    int64_t session_timeout_ms;
    int64_t deadline_ms;
    bool fence_disconnect;
    int64_t duration_ms;
    int64_t settle_ms;      /* after the last step, traffic goes on this long */
    int64_t margin_ms;      /* liveness: answer within deadline + margin */
    int64_t converge_ms;    /* routers agree with ZooKeeper within this (session + 1 s) */
    enum ch_planned planned; /* [check] planned_moves */
    bool spare[CH_NODES_MAX]; /* started by an `add` step only, not with the cluster */
    uint32_t rate;          /* requests per second, all routers together */
    uint32_t users;         /* per service */
    bool zipf;
    int nservices;
    struct ch_service services[CH_SERVICES_MAX];
    int nsteps;
    struct ch_step steps[CH_STEPS_MAX];
    struct ch_expect expect;
    char path[256];
};

/*
 * Reads a scenario file. Returns 0, or -1 with "FILE:LINE: what is wrong" in err.
 * Defaults fill what the file leaves out (docs/CHAOS.md).
 */
int ch_scenario_load(struct ch_scenario *sc, const char *path, char *err, size_t errlen);

/* The node name of index i: "a", "b", ... */
const char *ch_node_name(int i);

/* The user name of index u ("u17"), into buf: what the traffic sends for user u. */
void ch_user_name(char *buf, size_t len, uint32_t u);

/* The scenario format, for --help. */
extern const char ch_scenario_help[];

#endif
