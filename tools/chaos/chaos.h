/*
 * chaos: what the parts of rl-chaos share while a scenario runs: every request the traffic
 * threads sent and what came back, the ownership timeline the observer read from ZooKeeper,
 * the routers' tables as sampled, the faults as they were injected, and the event log.
 * run.c keeps that record (every append under its lock), traffic.c drives requests through
 * the routers, observer.c watches ZooKeeper, verdict.c judges the run; they call nothing
 * of rl-chaos but run.c, scenario.c and report.c (the --report page's buckets, report.h).
 * The cluster and its faults are cluster.h's (docs/CHAOS.md).
 */
#ifndef RL_CHAOS_H
#define RL_CHAOS_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "clock.h"
#include "report.h"
#include "scenario.h"

/* Request outcomes beyond the wire's CHECK codes (rl_wire_code). */
#define CH_CODE_ERROR 200   /* an ERROR reply */
#define CH_CODE_LOST 201    /* the connection to the router broke before the answer */
#define CH_CODE_PENDING 255 /* no answer (yet) */
#define CH_NONE 255         /* no owner */

/* One request, as the client saw it. */
struct ch_req {
    int64_t t_send_ms;  /* wall clock (CLOCK_REALTIME, as the nodes' windows) */
    int64_t t_done_us;  /* monotonic, when answered or lost; 0 while pending */
    int64_t t_send_us;  /* monotonic */
    uint32_t user;
    uint32_t remaining;
    uint32_t reset_ms;
    uint32_t shard;
    uint8_t service;
    uint8_t router;
    uint8_t code;
    uint8_t err;
};

/* One traffic thread: one router, its share of the rate. */
struct ch_traffic {
    struct ch_run *run;
    int router;
    pthread_t thread;
    struct ch_req *reqs; /* id = index + 1 */
    size_t cap;
    atomic_size_t n;            /* requests created */
    atomic_ullong by_code[8];   /* answered, per wire code (0..5), [6] errors, [7] lost */
    atomic_ullong late;         /* answered after deadline + margin */
    atomic_ullong unsent;       /* due while the router could not be reached */
    atomic_bool stop;
    bool started;
};

/* What ZooKeeper said at a moment: the members and the table they make. */
struct ch_view {
    int64_t t_ms; /* wall clock */
    uint64_t digest;
    int nmembers;
    uint8_t members; /* bit i: node i is a member */
    int64_t asg_version;
    int64_t since[CH_NODES_MAX]; /* per node: which registration (its znode's czxid), 0 absent */
    uint8_t *owner; /* per shard: node index, or CH_NONE */
};

/* A fault on a node that makes its shards' failure-policy answers legitimate. */
struct ch_impair {
    int node; /* -1: every node */
    int64_t from_ms, to_ms; /* wall clock; to INT64_MAX while open */
    bool cut; /* a partition, an isolation, a pause: a move off the node may not be handed off */
    char what[64];
};

struct ch_event {
    int64_t t_ms;
    char text[160];
};

/* A router's table as sampled through STATS (table_digest). */
struct ch_sample {
    int64_t t_ms;
    int router;
    uint64_t digest;
};

/* A direct probe of a node cut off from ZooKeeper: did it still answer? */
struct ch_probe {
    int64_t t_ms;
    int node;
    bool answered; /* ALLOWED or LIMITED: it decided */
    bool member;   /* ZooKeeper had it as a member then */
};

/*
 * A run across hosts (rl-chaos run --hosts FILE; docs/CHAOS.md, "Across hosts"): the network
 * namespace and address of ZooKeeper, of each node and of each router (rl-chaos itself runs
 * in the clients' namespace), the interface each host has, and what secures the cluster.
 * Without it (hosts NULL in the run) everything is on loopback behind fault proxies.
 */
struct ch_host {
    char netns[64];
    char addr[64];
    char tls_cert[512]; /* its [cluster] tls_cert_file and tls_key_file ("tls" lines) */
    char tls_key[512];
};

struct rl_tls_ctx;

struct ch_hosts {
    struct ch_host zk;
    struct ch_host node[CH_NODES_MAX];
    struct ch_host router[CH_ROUTERS_MAX];
    char dev[32];           /* every host's interface to the others (isolate takes it down) */
    char secret_file[512];  /* [cluster] secret_file of every config; nodes' AUTH */
    char token_file[512];   /* the clients' token (traffic, STATS), [client chaos] */
    char token_sha256[72];  /* its SHA-256, 64 hex digits */
    char cluster_extra[2048]; /* "KEY = VALUE\n" lines added to [cluster] (`cluster` lines) */
    /* TLS on every link when tls_ca_file is set: each node's and router's certificate is its
     * host's (tls_cert, tls_key), client is rl-chaos's own (shown to nodes, which require
     * one), tls its client context, built by ch_hosts_tls (NULL without TLS) */
    char tls_ca_file[512];
    struct ch_host client;
    struct rl_tls_ctx *tls;
};

#define CH_VIEWS_MAX 1024
#define CH_EVENTS_MAX 4096
#define CH_SAMPLES_MAX 65536
#define CH_IMPAIRS_MAX 256
#define CH_PROBES_MAX 8192

struct ch_run {
    const struct ch_scenario *sc;
    const struct ch_hosts *hosts; /* NULL: loopback, fault proxies */
    _Atomic int64_t t0_ms; /* wall clock when traffic started (the observer reads it) */
    int router_port[CH_ROUTERS_MAX];
    int node_port[CH_NODES_MAX]; /* the node's own listener (direct) */
    bool verbose;

    /* guards the views, events, samples, impairs, probes, restarts and blind periods, which
     * several threads write; the router downs and deaths are the main thread's alone */
    pthread_mutex_t lock;
    struct ch_view views[CH_VIEWS_MAX];
    int nviews;
    struct ch_event events[CH_EVENTS_MAX];
    int nevents;
    struct ch_sample samples[CH_SAMPLES_MAX];
    int nsamples;
    struct ch_impair impairs[CH_IMPAIRS_MAX];
    int nimpairs;
    struct ch_probe probes[CH_PROBES_MAX];
    int nprobes;
    /* router kills: requests lost on a router around these times are excused */
    int64_t router_down_from[CH_ROUTERS_MAX][16];
    int64_t router_down_to[CH_ROUTERS_MAX][16];
    int nrouter_down[CH_ROUTERS_MAX];
    /* node (re)starts: a restarted node has no counters, whatever ZooKeeper saw (a quick
     * restart may re-create the znode before a watcher notices it went) */
    int restart_node[64];
    int64_t restart_ms[64];
    int nrestarts;
    /* when the observer itself had no ZooKeeper session: it saw no change then, though the
     * routers may have (every session expires at once when a frozen ZooKeeper wakes) */
    int64_t blind_from[64];
    int64_t blind_to[64]; /* INT64_MAX while blind */
    int nblind;
    /* processes that died unasked (name and status), for the verdict */
    char deaths[8][128];
    int ndeaths;

    struct ch_traffic traffic[CH_ROUTERS_MAX];

    /* the routers' STATS backstop_allowed and backstop_limited at the end of the run (each
     * since its last start), for the verdict's figures */
    uint64_t backstop_stats[2];

    /* --report: what the run's page draws (report.h); NULL without, freed with the run */
    struct ch_report *report;
};

/* Wall clock in ms (the nodes' windows follow it) and monotonic clock in us. */
static inline int64_t
ch_now_ms(void)
{
    return (int64_t)rl_clock_real_ms();
}

static inline int64_t
ch_mono_us(void)
{
    return (int64_t)(rl_clock_mono_ns() / 1000);
}

/* Sleeps us microseconds, resuming after signals. */
static inline void
ch_sleep_us(int64_t us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};

    if (us > 0) {
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}

/* run.c: a run's record. ch_run_new returns a zeroed run of sc (NULL without memory);
 * ch_run_free frees it, its requests and views (not sc). */
struct ch_run *ch_run_new(const struct ch_scenario *sc, bool verbose);
void ch_run_free(struct ch_run *r);

/* Appends to the event log (and prints it with --verbose). */
void ch_event(struct ch_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Opens an impairment of node (-1: all) from `from` to `to`; returns its index. */
int ch_run_impair(struct ch_run *r, int node, int64_t from, int64_t to, const char *what);

/* A process that died or stopped badly: a violation of no-deaths (the first 8 are kept). */
void ch_run_death(struct ch_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A router's table digest as sampled at t_ms. */
void ch_run_sample(struct ch_run *r, int64_t t_ms, int router, uint64_t digest);

/* The last view ZooKeeper gave (read under the lock): digest, members; 0 when none yet. */
uint64_t ch_run_digest(struct ch_run *r, int *nmembers);

/*
 * Connects to router i (as_router) or straight to node i: on loopback, or at its host's
 * address, authenticated there (the token with a router, the cluster secret with a node).
 * 0 with *out set, or a negative errno.
 */
struct rl_client;
int ch_run_connect(const struct ch_run *r, bool as_router, int i, struct rl_client **out,
                   int timeout_ms);

/* hosts.c: reads --hosts FILE for sc into h: 0, or -1 with "FILE:LINE: why" in err. */
int ch_hosts_load(struct ch_hosts *h, const char *path, const struct ch_scenario *sc, char *err,
                  size_t errlen);
/* With tls_ca_file set, builds h->tls (rl-chaos's client context): 0, or -1 with err set. */
int ch_hosts_tls(struct ch_hosts *h, char *err, size_t errlen);
void ch_hosts_free(struct ch_hosts *h);

/* traffic.c: starts and stops the thread of one router. */
int ch_traffic_start(struct ch_traffic *t, struct ch_run *r, int router);
void ch_traffic_stop(struct ch_traffic *t);

/* observer.c: watches the cluster's znodes; views are appended to r->views. */
struct ch_observer;
int ch_observer_start(struct ch_observer **out, struct ch_run *r, const char *zk_connect,
                      const char *cluster);
void ch_observer_stop(struct ch_observer *o);

/* verdict.c: judges the run; prints the report; writes JSON when json_path is set.
 * Returns true when every invariant and every [expect] bound held. */
bool ch_verdict(struct ch_run *r, const char *json_path);

#endif
