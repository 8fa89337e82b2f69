/*
 * rl-chaos: chaos-tests a throwaway ratelimiter cluster. `rl-chaos run SCENARIO` starts a
 * ZooKeeper server, the scenario's nodes and routers on free loopback ports, with a fault
 * proxy on every node's path from the routers and to ZooKeeper; drives traffic through every
 * router; injects the scenario's faults on schedule; prints a line a second; then judges
 * the run against the invariants (verdict.c) and exits 0 only if every one held.
 * Everything it starts is stopped however it ends (the process harness of harness/harness.h:
 * its children die with it, even on SIGKILL). docs/CHAOS.md is the manual.
 */
#include "chaos.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "reqclient.h"
#include "harness.h"
#include "log.h"
#include "parse.h"
#include "proxy.h"
#include "shardmap.h"

#ifndef CH_SCENARIO_DIR
#define CH_SCENARIO_DIR "tools/chaos/scenarios"
#endif

#define TICK_MS 50
#define SAMPLE_MS 250
#define PROBE_MS 200
#define CLUSTER_NAME "chaos"

static const char usage[] =
    "usage: rl-chaos run SCENARIO [--build DIR] [--json FILE] [--verbose] [--duration D]\n"
    "                             [--rate N]\n"
    "       rl-chaos list\n"
    "       rl-chaos --help          (this, and the scenario format; --help-scenario: that alone)\n"
    "\n"
    "Starts a throwaway cluster (ZooKeeper, nodes, routers on loopback), drives traffic through\n"
    "every router, injects the scenario's faults, checks the invariants (liveness, exactness,\n"
    "bounded loss, failure policy, convergence, no unexpected deaths) and prints a verdict.\n"
    "Exit status: 0 every invariant held, 1 one failed, 2 bad usage or scenario, 3 the cluster\n"
    "could not be started, 130 interrupted (SIGINT, SIGTERM: the cluster is stopped, no\n"
    "verdict; a second signal ends rl-chaos at once, its children with it).\n"
    "  SCENARIO       a file, or the name of a shipped one (rl-chaos list)\n"
    "  --build DIR    where rl-node and rl-router are (default: beside rl-chaos)\n"
    "  --json FILE    also write the verdict and the figures as JSON\n"
    "  --verbose      print every event as it happens\n"
    "  --duration D   run this long instead (at least until the last step ends), e.g. 60s\n"
    "  --rate N       requests per second instead of the scenario's\n"
    "Environment: RL_CHAOS_SCENARIOS (directory of shipped scenarios), RL_KEEP_TMP=1 keeps the\n"
    "cluster's logs and configs (their directory is printed).\n";

struct cluster {
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
    char router_conf[PATH_MAX];
    struct ch_observer *observer;
    struct rl_client *stats_client[CH_ROUTERS_MAX];
    /* steps whose "for" ends later: their end time, or 0 */
    int64_t undo_at[CH_STEPS_MAX];
    int64_t probe_until[CH_NODES_MAX]; /* wall clock; direct probes while cut from ZooKeeper */
    char probe_user[CH_NODES_MAX][32];
    int open_impair[CH_NODES_MAX]; /* index of the open impairment of a killed node, or -1 */
    int proxy_port[CH_NODES_MAX];  /* what a node advertises: its routers-side proxy */
};

/* ---- shared helpers ------------------------------------------------------------------ */

void
ch_user_name(char *buf, size_t len, uint32_t u)
{
    snprintf(buf, len, "u%u", u);
}

void
ch_event(struct ch_run *r, const char *fmt, ...)
{
    struct ch_event *e;
    va_list ap;

    pthread_mutex_lock(&r->lock);
    if (r->nevents == CH_EVENTS_MAX) {
        pthread_mutex_unlock(&r->lock);
        return;
    }
    e = &r->events[r->nevents++];
    e->t_ms = ch_now_ms();
    va_start(ap, fmt);
    vsnprintf(e->text, sizeof(e->text), fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&r->lock);
    if (r->verbose) {
        printf("  %7.3fs  %s\n", r->t0_ms != 0 ? (double)(e->t_ms - r->t0_ms) / 1000.0 : 0.0,
               e->text);
        fflush(stdout);
    }
}

static void
sleep_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

    if (ms > 0) {
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}

/* Opens an impairment of node (-1: all) from now; returns its index. */
static int
impair(struct ch_run *r, int node, int64_t from, int64_t to, const char *what)
{
    int i;

    pthread_mutex_lock(&r->lock);
    i = r->nimpairs < CH_IMPAIRS_MAX ? r->nimpairs++ : CH_IMPAIRS_MAX - 1;
    r->impairs[i] = (struct ch_impair){node, from, to, ""};
    snprintf(r->impairs[i].what, sizeof(r->impairs[i].what), "%s", what);
    pthread_mutex_unlock(&r->lock);
    return i;
}

/* ---- the cluster ---------------------------------------------------------------------- */

static int
write_configs(struct cluster *c, const int *zk_port)
{
    const struct ch_scenario *sc = c->run->sc;
    char body[8192], path[PATH_MAX];
    int len = 0;

    for (int k = -1; k < sc->nodes; k++) {
        len = snprintf(body, sizeof(body),
                       "; written by rl-chaos for scenario %s\n[cluster]\nname = %s\n"
                       "zookeeper = 127.0.0.1:%d\nsession_timeout = %lldms\nshards = %u\n"
                       "fencing = %s\n\n[router]\nlisten = 127.0.0.1:7400\ndeadline = %lldms\n"
                       "request_log =\n\n[clients]\nidle_timeout = 0\n\n",
                       sc->name, CLUSTER_NAME, k < 0 ? c->zk.port : zk_port[k],
                       (long long)sc->session_timeout_ms, sc->shards,
                       sc->fence_disconnect ? "disconnect" : "expiry",
                       (long long)sc->deadline_ms);
        for (int i = 0; i < sc->nodes; i++) {
            int port = c->proxy_port[i];

            len += snprintf(body + len, sizeof(body) - (size_t)len,
                            "[node %s]\nlisten = 127.0.0.1:%d\nadvertise = 127.0.0.1:%d\n"
                            "memory = 64mb\n\n",
                            ch_node_name(i), c->run->node_port[i], port);
        }
        for (int i = 0; i < sc->nservices; i++) {
            len += snprintf(body + len, sizeof(body) - (size_t)len,
                            "[service %s]\nfailure = %s\nlimit = %s\n\n", sc->services[i].name,
                            sc->services[i].fail_closed ? "closed" : "open",
                            sc->services[i].limit);
        }
        if (len >= (int)sizeof(body)) {
            return -E2BIG;
        }
        if (k < 0) {
            rl_harness_tmppath(path, sizeof(path), "router.conf");
            snprintf(c->router_conf, sizeof(c->router_conf), "%s", path);
        } else {
            rl_harness_tmppath(path, sizeof(path), "node-%s.conf", ch_node_name(k));
            snprintf(c->node_conf[k], sizeof(c->node_conf[k]), "%s", path);
        }
        if (rl_harness_write_file(path, "%s", body) != 0) {
            return -EIO;
        }
    }
    return 0;
}

static int
cluster_start(struct cluster *c)
{
    struct ch_run *r = c->run;
    const struct ch_scenario *sc = r->sc;
    int zk_port[CH_NODES_MAX], rc;
    char path[128];

    if ((rc = rl_harness_zk_start(&c->zk)) != 0) {
        fprintf(stderr, "rl-chaos: ZooKeeper did not start: %s\n", strerror(-rc));
        return rc;
    }
    for (int i = 0; i < sc->nodes; i++) {
        r->node_port[i] = rl_harness_free_port();
        c->proxy_port[i] = 0;
        zk_port[i] = 0;
        if (r->node_port[i] < 0 ||
            rl_proxy_start(&c->px_routers[i], r->node_port[i], &c->proxy_port[i]) != 0 ||
            rl_proxy_start(&c->px_zk[i], c->zk.port, &zk_port[i]) != 0) {
            fprintf(stderr, "rl-chaos: cannot set up the fault proxies\n");
            return -EIO;
        }
        c->open_impair[i] = -1;
    }
    for (int i = 0; i < sc->routers; i++) {
        r->router_port[i] = rl_harness_free_port();
    }
    if ((rc = write_configs(c, zk_port)) != 0) {
        fprintf(stderr, "rl-chaos: cannot write the configs: %s\n", strerror(-rc));
        return rc;
    }
    for (int i = 0; i < sc->nodes; i++) {
        if ((rc = rl_harness_node_start(&c->node[i], c->node_conf[i], ch_node_name(i),
                                        r->node_port[i], 0)) != 0) {
            fprintf(stderr, "rl-chaos: node %s did not start (%s); its log: %s\n",
                    ch_node_name(i), strerror(-rc), c->node[i].log_path);
            return rc;
        }
    }
    snprintf(path, sizeof(path), "/ratelimiter/%s/nodes", CLUSTER_NAME);
    if ((rc = rl_harness_zk_wait_children(c->zk.connect, path, sc->nodes, 20000)) != 0) {
        fprintf(stderr, "rl-chaos: the nodes did not all register in ZooKeeper\n");
        return rc;
    }
    for (int i = 0; i < sc->routers; i++) {
        if ((rc = rl_harness_router_start(&c->router[i], c->router_conf, r->router_port[i])) != 0) {
            fprintf(stderr, "rl-chaos: router %d did not start (%s); its log: %s\n", i + 1,
                    strerror(-rc), c->router[i].log_path);
            return rc;
        }
    }
    if ((rc = ch_observer_start(&c->observer, r, c->zk.connect, CLUSTER_NAME)) != 0) {
        fprintf(stderr, "rl-chaos: cannot watch ZooKeeper: %d\n", rc);
        return rc;
    }
    return 0;
}

/* Router i's STATS into *rep through its kept connection, dialled when needed: 0, or -1
 * when it cannot be read now (the connection is dropped, to be dialled again). */
static int
router_stats(struct cluster *c, int i, struct rl_wire_reply *rep)
{
    char addr[32];

    if (c->router[i].pid == 0) {
        return -1;
    }
    if (c->stats_client[i] == NULL) {
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", c->run->router_port[i]);
        if (rl_client_connect_addr(&c->stats_client[i], addr, 100) != 0) {
            c->stats_client[i] = NULL;
            return -1;
        }
    }
    if (rl_client_stats(c->stats_client[i], rep, 300) != 0 || rep->op != RL_WIRE_OP_STATS) {
        rl_client_destroy(c->stats_client[i]);
        c->stats_client[i] = NULL;
        return -1;
    }
    return 0;
}

/* A router's table digest through STATS; 0 when it cannot be read now. */
static uint64_t
router_digest(struct cluster *c, int i)
{
    struct rl_wire_reply rep;

    return router_stats(c, i, &rep) == 0 ? (uint64_t)rl_client_stat(&rep, "table_digest", 0) : 0;
}

/* Why the routers answered by policy, from their STATS: for reading a failure. */
static void
print_router_causes(struct cluster *c)
{
    for (int i = 0; i < c->run->sc->routers; i++) {
        struct rl_wire_reply rep;

        if (router_stats(c, i, &rep) != 0) {
            continue;
        }
        printf("router %d (since its last start): checks %lld, failure-policy answers because "
               "the owner was down %lld, past the deadline %lld, refused by the node "
               "(NOT_OWNER) %lld; late replies dropped %lld, table builds %lld\n",
               i + 1, (long long)rl_client_stat(&rep, "checks", 0),
               (long long)rl_client_stat(&rep, "owner_down", 0),
               (long long)rl_client_stat(&rep, "deadline_expired", 0),
               (long long)rl_client_stat(&rep, "not_owner", 0),
               (long long)rl_client_stat(&rep, "late_replies", 0),
               (long long)rl_client_stat(&rep, "table_builds", 0));
    }
}

/* Samples every router's table; returns how many agree with ZooKeeper's. */
static int
sample_routers(struct cluster *c, int *alive)
{
    struct ch_run *r = c->run;
    int nm, agree = 0;
    uint64_t want = ch_observer_digest(r, &nm);

    *alive = 0;
    for (int i = 0; i < r->sc->routers; i++) {
        uint64_t d;

        if (c->router[i].pid == 0) {
            continue;
        }
        (*alive)++;
        d = router_digest(c, i);
        if (d == 0) {
            continue;
        }
        agree += d == want;
        pthread_mutex_lock(&r->lock);
        if (r->nsamples < CH_SAMPLES_MAX) {
            r->samples[r->nsamples++] = (struct ch_sample){ch_now_ms(), i, d};
        }
        pthread_mutex_unlock(&r->lock);
    }
    return agree;
}

/* A process that died or stopped badly: a violation of no-deaths (the first 8 are kept). */
static void
record_death(struct ch_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
record_death(struct ch_run *r, const char *fmt, ...)
{
    va_list ap;

    pthread_mutex_lock(&r->lock);
    if (r->ndeaths < 8) {
        va_start(ap, fmt);
        vsnprintf(r->deaths[r->ndeaths++], sizeof(r->deaths[0]), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&r->lock);
}

/* The routers, then the nodes, into s; returns how many. */
static int
servers(struct cluster *c, struct rl_harness_server **s)
{
    int n = 0;

    for (int i = 0; i < c->run->sc->routers; i++) {
        s[n++] = &c->router[i];
    }
    for (int i = 0; i < c->run->sc->nodes; i++) {
        s[n++] = &c->node[i];
    }
    return n;
}

/* Processes that exited without a step asking them to: each is a violation. */
static void
reap_unexpected(struct cluster *c)
{
    struct ch_run *r = c->run;
    struct rl_harness_server *s[CH_NODES_MAX + CH_ROUTERS_MAX];
    int n = servers(c, s), status;

    for (int i = 0; i < n; i++) {
        if (s[i]->pid != 0 && rl_harness_wait(s[i]->pid, 0, &status) == 0) {
            s[i]->pid = 0;
            s[i]->status = status;
            ch_event(r, "%s %s died unasked (status 0x%x); log %s", s[i]->program,
                     s[i]->name, status, s[i]->log_path);
            record_death(r, "%s %s died unasked (status 0x%x)", s[i]->program, s[i]->name,
                         status);
        }
    }
    if (c->zk.pid != 0 && !c->zk_down && rl_harness_wait(c->zk.pid, 0, &status) == 0) {
        c->zk.pid = 0;
        ch_event(r, "ZooKeeper died unasked (status 0x%x)", status);
        record_death(r, "zookeeper died unasked (status 0x%x)", status);
    }
}

/* ---- steps ---------------------------------------------------------------------------- */

/* A user of service 0 whose shard node i owns in ZooKeeper's current view, for probes. */
static void
pick_probe_user(struct cluster *c, int node)
{
    struct ch_run *r = c->run;
    const struct ch_scenario *sc = r->sc;
    const char *svc = sc->services[0].name;

    c->probe_user[node][0] = '\0';
    pthread_mutex_lock(&r->lock);
    for (int u = 0; r->nviews > 0 && u < 100000; u++) {
        char name[32];
        uint32_t shard;

        snprintf(name, sizeof(name), "chaos-probe-%d", u);
        shard = rl_shardmap_shard(rl_shardmap_key_hash(svc, strlen(svc), name, strlen(name)),
                                  sc->shards);
        if (r->views[r->nviews - 1].owner[shard] == node) {
            snprintf(c->probe_user[node], sizeof(c->probe_user[node]), "%s", name);
            break;
        }
    }
    pthread_mutex_unlock(&r->lock);
}

static void
probe(struct cluster *c, int node)
{
    struct ch_run *r = c->run;
    struct rl_client *cl = NULL;
    struct rl_wire_reply rep;
    char addr[32];
    bool answered = false, member = false;

    if (c->probe_user[node][0] == '\0' || c->node[node].pid == 0) {
        return;
    }
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", r->node_port[node]);
    if (rl_client_connect_addr(&cl, addr, 100) == 0) {
        answered = rl_client_check(cl, r->sc->services[0].name, c->probe_user[node], NULL, 1,
                                   &rep, 150) == 0 &&
                   rep.op == RL_WIRE_OP_CHECK &&
                   (rep.check.code == RL_WIRE_ALLOWED || rep.check.code == RL_WIRE_LIMITED);
        rl_client_destroy(cl);
    }
    pthread_mutex_lock(&r->lock);
    member = r->nviews > 0 && (r->views[r->nviews - 1].members >> node & 1) != 0;
    if (r->nprobes < CH_PROBES_MAX) {
        r->probes[r->nprobes++] = (struct ch_probe){ch_now_ms(), node, answered, member};
    }
    pthread_mutex_unlock(&r->lock);
}

static struct rl_proxy *
path_proxy(struct cluster *c, const struct ch_step *st)
{
    return st->path == CH_PATH_ROUTERS ? c->px_routers[st->index] : c->px_zk[st->index];
}

static const char *
node_target(const struct ch_step *st, char *buf, size_t len)
{
    snprintf(buf, len, "node %s", ch_node_name(st->index));
    return buf;
}

static void
zk_outage_impairs(struct cluster *c, int64_t now, int64_t until, const char *what)
{
    /* With fencing = disconnect a node answers nothing while ZooKeeper is away. */
    if (c->run->sc->fence_disconnect) {
        impair(c->run, -1, now, until, what);
    }
    c->zk_down_since = now;
}

/* ZooKeeper is back. After an outage of a session timeout or more it may expire every
 * session at once (a server frozen that long does, on waking): every node loses its
 * registration until it registers again, and answers nothing meanwhile. */
static void
zk_back(struct cluster *c, int64_t now)
{
    if (c->zk_down_since != 0 && now - c->zk_down_since >= c->run->sc->session_timeout_ms) {
        impair(c->run, -1, now, now, "zookeeper back after the session timeout");
    }
    c->zk_down_since = 0;
}

static void
do_step(struct cluster *c, int si)
{
    struct ch_run *r = c->run;
    const struct ch_step *st = &r->sc->steps[si];
    int64_t now = ch_now_ms(), until = st->for_ms > 0 ? now + st->for_ms : INT64_MAX;
    char who[32];
    int rc = 0;

    ch_event(r, "step: %s", st->text);
    if (st->for_ms > 0) {
        /* on the scenario's clock, not the step's start: a late start must not push its
         * end past a later step's start on the same target */
        c->undo_at[si] = c->run->t0_ms + st->at_ms + st->for_ms;
    }
    switch (st->action) {
    case CH_KILL:
    case CH_TERM:
        if (st->target == CH_NODE) {
            c->node_expected_down[st->index] = true;
            c->open_impair[st->index] =
                impair(r, st->index, now, INT64_MAX, st->action == CH_KILL ? "killed" : "stopped");
            rc = rl_harness_server_stop(&c->node[st->index],
                                        st->action == CH_KILL ? SIGKILL : SIGTERM, 10000);
        } else {
            int i = st->index, k = r->nrouter_down[i];

            c->router_expected_down[i] = true;
            if (k < 16) {
                r->router_down_from[i][k] = now;
                r->router_down_to[i][k] = INT64_MAX;
                r->nrouter_down[i]++;
            }
            rl_client_destroy(c->stats_client[i]);
            c->stats_client[i] = NULL;
            rc = rl_harness_server_stop(&c->router[i], st->action == CH_KILL ? SIGKILL : SIGTERM,
                                        10000);
        }
        break;
    case CH_RESTART:
        if (st->target == CH_NODE) {
            struct rl_harness_server *s = &c->node[st->index];

            if (s->pid != 0) {
                c->open_impair[st->index] = impair(r, st->index, now, INT64_MAX, "restarted");
                rl_harness_server_stop(s, SIGTERM, 10000);
            }
            rc = rl_harness_node_start(s, c->node_conf[st->index], ch_node_name(st->index),
                                       r->node_port[st->index], 0);
            pthread_mutex_lock(&r->lock);
            if (r->nrestarts < 64) {
                r->restart_node[r->nrestarts] = st->index;
                r->restart_ms[r->nrestarts++] = now;
            }
            pthread_mutex_unlock(&r->lock);
            if (c->open_impair[st->index] >= 0) {
                pthread_mutex_lock(&r->lock);
                r->impairs[c->open_impair[st->index]].to_ms = ch_now_ms();
                pthread_mutex_unlock(&r->lock);
                c->open_impair[st->index] = -1;
            }
            c->node_expected_down[st->index] = false;
        } else {
            int i = st->index, k = r->nrouter_down[i] - 1;

            if (c->router[i].pid != 0) {
                rl_harness_server_stop(&c->router[i], SIGTERM, 10000);
                k = r->nrouter_down[i] < 16 ? r->nrouter_down[i]++ : 15;
                r->router_down_from[i][k] = now;
            }
            rc = rl_harness_router_start(&c->router[i], c->router_conf, r->router_port[i]);
            if (k >= 0) {
                r->router_down_to[i][k] = ch_now_ms();
            }
            c->router_expected_down[i] = false;
        }
        break;
    case CH_PAUSE:
        if (st->target == CH_NODE) {
            impair(r, st->index, now, until, "paused");
            /* pid 0 (not running) would stop rl-chaos's own process group */
            rc = c->node[st->index].pid > 0 && kill(c->node[st->index].pid, SIGSTOP) == 0
                     ? 0
                     : -ESRCH;
        } else {
            zk_outage_impairs(c, now, until, "zookeeper paused");
            c->zk_paused = c->zk.pid > 0;
            rc = c->zk.pid > 0 && kill(c->zk.pid, SIGSTOP) == 0 ? 0 : -ESRCH;
        }
        break;
    case CH_STOP:
        zk_outage_impairs(c, now, until, "zookeeper stopped");
        c->zk_down = true;
        rc = rl_harness_zk_stop(&c->zk);
        break;
    case CH_START:
        rc = rl_harness_zk_start(&c->zk);
        c->zk_down = false;
        zk_back(c, ch_now_ms());
        break;
    case CH_PARTITION:
    case CH_ONEWAY:
        impair(r, st->index, now, until, node_target(st, who, sizeof(who)));
        rl_proxy_set_mode(path_proxy(c, st),
                          st->action == CH_PARTITION ? RL_PROXY_BLACKHOLE
                          : st->path == CH_PATH_ROUTERS ? RL_PROXY_DROP_DOWN
                                                        : RL_PROXY_DROP_UP);
        if (st->path == CH_PATH_ZK) {
            pick_probe_user(c, st->index);
            c->probe_until[st->index] = until == INT64_MAX ? INT64_MAX : until + 2000;
        }
        break;
    case CH_DELAY:
        impair(r, st->index, now, until, "delayed");
        rl_proxy_set_delay(path_proxy(c, st), (int)st->arg_ms);
        break;
    case CH_RESET:
        impair(r, st->index, now, now + 1000, "connections reset");
        rl_proxy_set_mode(path_proxy(c, st), RL_PROXY_RESET);
        sleep_ms(100);
        rl_proxy_set_mode(path_proxy(c, st), RL_PROXY_PASS);
        break;
    }
    if (rc != 0 && !(st->action == CH_KILL && rc == -ETIMEDOUT)) {
        ch_event(r, "step \"%s\" failed: %s", st->text, strerror(rc < 0 ? -rc : rc));
    }
}

static void
undo_step(struct cluster *c, int si)
{
    struct ch_run *r = c->run;
    const struct ch_step *st = &r->sc->steps[si];

    ch_event(r, "end of step: %s", st->text);
    switch (st->action) {
    case CH_PAUSE:
        if (st->target == CH_NODE) {
            if (c->node[st->index].pid > 0) {
                kill(c->node[st->index].pid, SIGCONT);
            }
        } else {
            if (c->zk_paused && c->zk.pid > 0) {
                kill(c->zk.pid, SIGCONT);
            }
            c->zk_paused = false;
            zk_back(c, ch_now_ms());
        }
        break;
    case CH_STOP:
        if (rl_harness_zk_start(&c->zk) != 0) {
            ch_event(r, "ZooKeeper did not start again");
        }
        c->zk_down = false;
        zk_back(c, ch_now_ms());
        break;
    case CH_PARTITION:
    case CH_ONEWAY:
        rl_proxy_set_mode(path_proxy(c, st), RL_PROXY_PASS);
        break;
    case CH_DELAY:
        rl_proxy_set_delay(path_proxy(c, st), 0);
        break;
    default:
        break;
    }
}

/* ---- the run -------------------------------------------------------------------------- */

static void
live_line(struct cluster *c, int64_t t_ms, unsigned long long *last_total)
{
    struct ch_run *r = c->run;
    unsigned long long code[8] = {0}, total = 0, late = 0, unsent = 0;
    int nm, alive, agree;

    for (int i = 0; i < r->sc->routers; i++) {
        for (int k = 0; k < 8; k++) {
            code[k] += atomic_load(&r->traffic[i].by_code[k]);
        }
        late += atomic_load(&r->traffic[i].late);
        unsent += atomic_load(&r->traffic[i].unsent);
    }
    for (int k = 0; k < 8; k++) {
        total += code[k];
    }
    ch_observer_digest(r, &nm);
    agree = sample_routers(c, &alive);
    printf("%5.1fs %6llu/s | allowed %7llu limited %7llu open %5llu closed %5llu err %4llu "
           "lost %4llu late %4llu unsent %5llu | members %d/%d | routers agree %d/%d\n",
           (double)t_ms / 1000.0, total - *last_total, code[0], code[1], code[2], code[3],
           code[6], code[7], late, unsent, nm, r->sc->nodes, agree, alive);
    fflush(stdout);
    *last_total = total;
}

/* Set by SIGINT or SIGTERM: the run stops early, everything is stopped, no verdict. */
static volatile sig_atomic_t interrupted;

static void
on_interrupt(int sig)
{
    interrupted = 1;
    signal(sig, SIG_DFL); /* a second one ends rl-chaos at once (its children die with it) */
}

/*
 * Stops what the run started: traffic, the observer, the routers and the nodes (SIGTERM,
 * and with `judge` a survivor that does not exit 0 is a violation), the proxies and
 * ZooKeeper. Safe on a cluster that was only partly started.
 */
static void
teardown(struct cluster *c, bool judge)
{
    struct ch_run *r = c->run;
    const struct ch_scenario *sc = r->sc;
    struct rl_harness_server *s[CH_NODES_MAX + CH_ROUTERS_MAX];
    int n;

    for (int i = 0; i < sc->routers; i++) {
        ch_traffic_stop(&r->traffic[i]);
    }
    ch_observer_stop(c->observer);
    c->observer = NULL;
    for (int i = 0; i < sc->routers; i++) {
        rl_client_destroy(c->stats_client[i]);
        c->stats_client[i] = NULL;
    }
    n = servers(c, s);
    for (int i = 0; i < n; i++) {
        if (s[i]->pid != 0 &&
            (rl_harness_server_stop(s[i], SIGTERM, 10000) != 0 || !WIFEXITED(s[i]->status) ||
             WEXITSTATUS(s[i]->status) != 0) &&
            judge) {
            record_death(r, "%s %s did not stop cleanly on SIGTERM (status 0x%x)", s[i]->program,
                         s[i]->name, s[i]->status);
        }
    }
    for (int i = 0; i < sc->nodes; i++) {
        rl_proxy_stop(c->px_routers[i]);
        rl_proxy_stop(c->px_zk[i]);
        c->px_routers[i] = c->px_zk[i] = NULL;
    }
    if (c->zk.pid != 0) {
        if (c->zk_paused && c->zk.pid > 0) {
            kill(c->zk.pid, SIGCONT);
        }
        rl_harness_zk_stop(&c->zk);
    }
}

/* Runs the scenario: 0 when it ran to the end (the verdict follows), 3 when the cluster
 * could not be started, 130 when interrupted. */
static int
run_scenario(struct ch_run *r)
{
    const struct ch_scenario *sc = r->sc;
    struct cluster *c = calloc(1, sizeof(*c));
    int64_t end, next_sample, next_line, next_probe, settle_end;
    unsigned long long last_total = 0;
    int alive, nm, rc = 3;

    if (c == NULL) {
        return 3;
    }
    c->run = r;
    printf("rl-chaos: scenario %s: %d nodes, %d routers, %u shards, session %lld ms, deadline "
           "%lld ms, %u req/s for %lld s\n",
           sc->name, sc->nodes, sc->routers, sc->shards, (long long)sc->session_timeout_ms,
           (long long)sc->deadline_ms, sc->rate, (long long)sc->duration_ms / 1000);
    if (sc->description[0] != '\0') {
        printf("  %s\n", sc->description);
    }
    fflush(stdout);
    if (cluster_start(c) != 0) {
        rc = interrupted ? 130 : 3;
        goto out;
    }
    /* Every router agrees with ZooKeeper before traffic starts. */
    for (int64_t until = ch_now_ms() + 15000;; sleep_ms(100)) {
        uint64_t d = ch_observer_digest(r, &nm);

        if (d != 0 && nm == sc->nodes && sample_routers(c, &alive) == sc->routers) {
            break;
        }
        if (ch_now_ms() > until || interrupted) {
            fprintf(stderr, "rl-chaos: %s\n",
                    interrupted ? "interrupted: stopping the cluster, no verdict"
                                : "the routers did not agree with ZooKeeper within 15 s");
            rc = interrupted ? 130 : 3;
            goto out;
        }
    }
    r->t0_ms = ch_now_ms();
    ch_event(r, "traffic starts");
    for (int i = 0; i < sc->routers; i++) {
        if (ch_traffic_start(&r->traffic[i], r, i) != 0) {
            fprintf(stderr, "rl-chaos: cannot start traffic\n");
            goto out;
        }
    }
    end = r->t0_ms + sc->duration_ms;
    next_sample = next_probe = r->t0_ms;
    next_line = r->t0_ms + 1000;
    for (int64_t now = ch_now_ms(); now < end && !interrupted; now = ch_now_ms()) {
        /* the ends that are due first, then the starts: a step that ends when the next on
         * the same target begins must not undo it */
        for (int i = 0; i < sc->nsteps; i++) {
            if (c->undo_at[i] > 0 && c->undo_at[i] <= now) {
                undo_step(c, i);
                c->undo_at[i] = -1;
            }
        }
        for (int i = 0; i < sc->nsteps; i++) {
            if (r->t0_ms + sc->steps[i].at_ms <= now && c->undo_at[i] == 0) {
                do_step(c, i);
                if (c->undo_at[i] == 0) {
                    c->undo_at[i] = -1; /* done, nothing to undo */
                }
            }
        }
        reap_unexpected(c);
        if (now >= next_probe) {
            for (int i = 0; i < sc->nodes; i++) {
                if (c->probe_until[i] != 0 && now <= c->probe_until[i]) {
                    probe(c, i);
                }
            }
            next_probe = now + PROBE_MS;
        }
        if (now >= next_line) {
            live_line(c, now - r->t0_ms, &last_total);
            next_line += 1000;
            next_sample = now + SAMPLE_MS;
        } else if (now >= next_sample) {
            sample_routers(c, &alive);
            next_sample = now + SAMPLE_MS;
        }
        sleep_ms(TICK_MS);
    }
    for (int i = 0; i < sc->nsteps; i++) {
        if (c->undo_at[i] > 0) {
            undo_step(c, i);
        }
    }
    ch_event(r, "traffic stops");
    for (int i = 0; i < sc->routers; i++) {
        ch_traffic_stop(&r->traffic[i]);
    }
    if (interrupted) {
        fprintf(stderr, "rl-chaos: interrupted at %.1f s: stopping the cluster, no verdict\n",
                (double)(ch_now_ms() - r->t0_ms) / 1000.0);
        rc = 130;
        goto out;
    }
    /* Settling: the routers still up must agree with ZooKeeper within the bound. */
    settle_end = ch_now_ms() + sc->converge_ms;
    while (ch_now_ms() < settle_end && !interrupted) {
        uint64_t d = ch_observer_digest(r, &nm);
        int agree = sample_routers(c, &alive);

        reap_unexpected(c);
        if (d != 0 && agree == alive) {
            break;
        }
        sleep_ms(100);
    }
    if (interrupted) {
        fprintf(stderr, "rl-chaos: interrupted while settling: stopping the cluster, no "
                        "verdict\n");
        rc = 130;
        goto out;
    }
    live_line(c, ch_now_ms() - r->t0_ms, &last_total);
    print_router_causes(c);
    rc = 0;
out:
    teardown(c, rc == 0);
    free(c);
    return rc;
}

/* ---- command line --------------------------------------------------------------------- */

static const char *
scenario_dir(void)
{
    const char *d = getenv("RL_CHAOS_SCENARIOS");

    return d != NULL && d[0] != '\0' ? d : CH_SCENARIO_DIR;
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int
list_scenarios(void)
{
    const char *dir = scenario_dir();
    DIR *d = opendir(dir);
    char *names[256];
    int n = 0;
    struct dirent *e;

    if (d == NULL) {
        fprintf(stderr, "rl-chaos: %s: %s\n", dir, strerror(errno));
        return 2;
    }
    while ((e = readdir(d)) != NULL && n < 256) {
        size_t len = strlen(e->d_name);

        if (len > 4 && strcmp(e->d_name + len - 4, ".ini") == 0) {
            names[n++] = strdup(e->d_name);
        }
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof(names[0]), cmp_str);
    for (int i = 0; i < n; i++) {
        struct ch_scenario sc;
        char path[PATH_MAX], err[256];

        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        if (ch_scenario_load(&sc, path, err, sizeof(err)) == 0) {
            printf("%-24s %s\n", sc.name, sc.description);
        } else {
            printf("%-24s (does not load: %s)\n", names[i], err);
        }
        free(names[i]);
    }
    return 0;
}

/* The build directory: --build, else the directory rl-chaos runs from. */
static void
set_bin_dir(const char *build)
{
    char self[PATH_MAX];
    ssize_t n;

    if (build != NULL) {
        setenv("RL_BIN_DIR", build, 1);
        return;
    }
    if (getenv("RL_BIN_DIR") != NULL) {
        return;
    }
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        char *slash;

        self[n] = '\0';
        slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            setenv("RL_BIN_DIR", self, 1);
        }
    }
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {{"build", required_argument, NULL, 'b'},
                                         {"json", required_argument, NULL, 'j'},
                                         {"verbose", no_argument, NULL, 'v'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"help-scenario", no_argument, NULL, 's'},
                                         {"duration", required_argument, NULL, 'd'},
                                         {"rate", required_argument, NULL, 'r'},
                                         {NULL, 0, NULL, 0}};
    const char *build = NULL, *json = NULL, *duration = NULL, *rate = NULL;
    struct ch_scenario *sc;
    struct ch_run *r;
    char path[PATH_MAX], err[512];
    bool verbose = false;
    int opt, rc;
    struct stat st;

    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'b':
            build = optarg;
            break;
        case 'j':
            json = optarg;
            break;
        case 'v':
            verbose = true;
            break;
        case 'd':
            duration = optarg;
            break;
        case 'r':
            rate = optarg;
            break;
        case 'h':
            fputs(usage, stdout);
            fputs("\n", stdout);
            fputs(ch_scenario_help, stdout);
            return 0;
        case 's':
            fputs(ch_scenario_help, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (optind < argc && strcmp(argv[optind], "list") == 0 && optind + 1 == argc) {
        return list_scenarios();
    }
    if (optind + 2 != argc || strcmp(argv[optind], "run") != 0) {
        fputs(usage, stderr);
        return 2;
    }
    snprintf(path, sizeof(path), "%s", argv[optind + 1]);
    if (stat(path, &st) != 0 && strchr(path, '/') == NULL) {
        snprintf(path, sizeof(path), "%s/%s.ini", scenario_dir(), argv[optind + 1]);
    }
    sc = calloc(1, sizeof(*sc));
    r = calloc(1, sizeof(*r));
    if (sc == NULL || r == NULL) {
        free(sc);
        free(r);
        return 3;
    }
    pthread_mutex_init(&r->lock, NULL);
    rc = 2;
    if (ch_scenario_load(sc, path, err, sizeof(err)) != 0) {
        fprintf(stderr, "rl-chaos: %s\n", err);
        goto out;
    }
    if (duration != NULL) {
        uint64_t v;
        const char *why = rl_parse_duration_ms(duration, &v);

        if (why != NULL) {
            fprintf(stderr, "rl-chaos: --duration \"%s\" %s\n", duration, why);
            goto out;
        }
        for (int i = 0; i < sc->nsteps; i++) {
            if (sc->steps[i].at_ms + sc->steps[i].for_ms > (int64_t)v) {
                fprintf(stderr, "rl-chaos: --duration %s ends before step \"%s\"\n", duration,
                        sc->steps[i].text);
                goto out;
            }
        }
        sc->duration_ms = (int64_t)v;
    }
    if (rate != NULL) {
        uint64_t v;
        const char *why = rl_parse_u64(rate, 1, 200000, &v);

        if (why != NULL) {
            fprintf(stderr, "rl-chaos: --rate \"%s\" %s (1..200000)\n", rate, why);
            goto out;
        }
        sc->rate = (uint32_t)v;
    }
    set_bin_dir(build);
    rl_log_setup(RL_LOG_ERROR, "rl-chaos");
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_interrupt);
    signal(SIGTERM, on_interrupt);
    r->sc = sc;
    r->verbose = verbose;
    rc = run_scenario(r);
    if (rc == 0) {
        rc = ch_verdict(r, json) ? 0 : 1;
    }
out:
    for (int i = 0; i < CH_ROUTERS_MAX; i++) {
        free(r->traffic[i].reqs);
    }
    for (int i = 0; i < r->nviews; i++) {
        free(r->views[i].owner);
    }
    pthread_mutex_destroy(&r->lock);
    free(r);
    free(sc);
    rl_harness_cleanup();
    return rc;
}
