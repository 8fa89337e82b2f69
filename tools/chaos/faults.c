/*
 * faults: carries out the scenario's steps on the running cluster (cluster.h): kills, clean
 * stops, restarts and pauses of nodes, routers and ZooKeeper, and partitions, one-way
 * losses, delays and resets on a node's fault proxies; each opens the impairment that makes
 * the affected shards' failure-policy answers legitimate, and a step with a `for` is undone
 * when it ends. Across hosts (--hosts) a partition is a blackhole route each way between the
 * namespaces and `isolate` takes the node's interface down. While a node is cut from
 * ZooKeeper it is probed directly: did it still decide? Planned moves too: a node added
 * (scale-out), an assignment written by compare-and-set as rl-rebalance writes one, and the
 * previous one written back as its --rollback does. Not the schedule (loop.c) nor the
 * set-up (cluster.c).
 */
#include "cluster.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include <uv.h>

#include "assignment.h"
#include "proxy.h"
#include "reqclient.h"
#include "shardmap.h"
#include "zkadmin.h"

/* A user of service 0 whose shard node i owns in ZooKeeper's current view, for probes. */
static void
pick_probe_user(struct ch_cluster *c, int node)
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

void
ch_fault_probe(struct ch_cluster *c, int node)
{
    struct ch_run *r = c->run;
    struct rl_client *cl = NULL;
    struct rl_wire_reply rep;
    bool answered = false, member = false;

    if (c->probe_user[node][0] == '\0' || c->node[node].pid == 0) {
        return;
    }
    if (ch_run_connect(r, false, node, &cl, 100) == 0) {
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

/* ---- the assignment, as rl-rebalance writes it ------------------------------------------- */

/* The next node after k (wrapping) that is a member in view v, or CH_NONE. */
static uint8_t
next_member(const struct ch_view *v, int nodes, int k)
{
    for (int d = 1; d < nodes; d++) {
        int x = (k + d) % nodes;

        if ((v->members >> x & 1) != 0) {
            return (uint8_t)x;
        }
    }
    return CH_NONE;
}

/*
 * The overrides of `assign N shards`: the first N shards (from shard 0) that have an owner
 * in ZooKeeper's latest view, each given to the next member after its owner. Into a (sized
 * for the cluster, no overrides yet); returns how many were set.
 */
static int64_t
assign_plan(struct ch_cluster *c, int64_t want, struct rl_assignment *a)
{
    struct ch_run *r = c->run;
    const struct ch_scenario *sc = r->sc;
    int64_t n = 0;

    pthread_mutex_lock(&r->lock);
    if (r->nviews > 0) {
        const struct ch_view *v = &r->views[r->nviews - 1];

        for (uint32_t s = 0; s < sc->shards && n < want; s++) {
            uint8_t to = v->owner[s] == CH_NONE ? CH_NONE : next_member(v, sc->nodes, v->owner[s]);

            if (to != CH_NONE && rl_assignment_set(a, s, ch_node_name(to)) == 0) {
                n++;
            }
        }
    }
    pthread_mutex_unlock(&r->lock);
    return n;
}

/* A ZooKeeper session of the tool's own on its own loop, for one write, as rl-rebalance
 * makes one: *loop initialised, *z the session. 0, or an error. */
static int
admin_open(struct ch_cluster *c, uv_loop_t *loop, struct rl_zkm **z)
{
    static const struct rl_zkm_cbs no_cbs; /* no watch: writes only */
    int rc = uv_loop_init(loop);

    if (rc != 0) {
        return rc;
    }
    rc = rl_zkm_create(z, loop, c->zk.connect, (uint32_t)c->run->sc->session_timeout_ms,
                       CH_CLUSTER_NAME, &no_cbs, NULL);
    if (rc != 0) {
        uv_loop_close(loop);
    }
    return rc;
}

static void
admin_close(uv_loop_t *loop, struct rl_zkm *z)
{
    rl_zkm_destroy(z);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
}

/* `assign N shards` or `rollback`: reads the assignment and its version, writes the new one
 * (or assignment.prev's text) by compare-and-set over that version. */
static int
assign_write(struct ch_cluster *c, const struct ch_step *st)
{
    struct ch_run *r = c->run;
    uv_loop_t loop;
    struct rl_zkm *z = NULL;
    struct rl_assignment a;
    char *cur = NULL, *text = NULL;
    size_t cur_len = 0, len = 0;
    int64_t version = -1, pv = -1, moved = 0, nv = -1;
    int rc = admin_open(c, &loop, &z);

    if (rc != 0) {
        return rc;
    }
    rc = rl_zkm_get_assignment(z, &cur, &cur_len, &version, 5000);
    if (rc == 0 && st->action == CH_ROLLBACK) {
        rc = rl_zkm_get_assignment_prev(z, &text, &len, &pv, 5000);
        if (rc == 0 && text == NULL) {
            /* no previous one: the state before any, no override (a header only) */
            char hdr[64];

            len = (size_t)snprintf(hdr, sizeof(hdr), "rl-assignment 1 %u\n", r->sc->shards);
            text = strdup(hdr);
            rc = text == NULL ? -ENOMEM : 0;
        }
    } else if (rc == 0) {
        rc = rl_assignment_init(&a, r->sc->shards);
        if (rc == 0) {
            moved = assign_plan(c, st->arg_ms, &a);
            rc = rl_assignment_format(&a, &text, &len);
            rl_assignment_deinit(&a);
        }
    }
    if (rc == 0) {
        rc = rl_zkm_set_assignment(z, text, len, version, &nv, 5000);
    }
    if (rc == 0) {
        ch_event(r, st->action == CH_ROLLBACK
                        ? "assignment version %lld written back from assignment.prev"
                        : "assignment version %lld written: %lld shards moved",
                 (long long)nv, (long long)moved);
    }
    free(cur);
    free(text);
    admin_close(&loop, z);
    return rc;
}

static struct rl_proxy *
path_proxy(struct ch_cluster *c, const struct ch_step *st)
{
    return st->path == CH_PATH_ROUTERS ? c->px_routers[st->index] : c->px_zk[st->index];
}

/* Runs `ip -n NETNS ARGS...` (across hosts): 0, or -EIO with the event logged. */
static int
ip_in(struct ch_cluster *c, const char *netns, const char *a1, const char *a2, const char *a3,
      const char *a4, const char *a5, const char *a6)
{
    const char *argv[] = {"ip", "-n", netns, a1, a2, a3, a4, a5, a6, NULL};
    char out[512];
    int rc = rl_harness_run(argv, out, sizeof(out), 5000);

    if (rc != 0) {
        ch_event(c->run, "ip -n %s %s %s %s %s failed (%d): %s", netns, a1, a2, a3, a4, rc, out);
        return -EIO;
    }
    return 0;
}

/* One blackhole route each way between two hosts (add or del): a partition on the
 * namespaces' own routing, without a proxy or a firewall. */
static int
blackhole(struct ch_cluster *c, const char *op, const struct ch_host *x, const struct ch_host *y)
{
    char to_y[80], to_x[80];
    int rc;

    snprintf(to_y, sizeof(to_y), "%s/%d", y->addr, strchr(y->addr, ':') != NULL ? 128 : 32);
    snprintf(to_x, sizeof(to_x), "%s/%d", x->addr, strchr(x->addr, ':') != NULL ? 128 : 32);
    rc = ip_in(c, x->netns, "route", op, "blackhole", to_y, NULL, NULL);
    return ip_in(c, y->netns, "route", op, "blackhole", to_x, NULL, NULL) != 0 ? -EIO : rc;
}

/* A partition across hosts: the node's host from ZooKeeper's or from every router's. */
static int
host_partition(struct ch_cluster *c, const struct ch_step *st, const char *op)
{
    const struct ch_hosts *h = c->run->hosts;
    int rc = 0;

    if (st->path == CH_PATH_ZK) {
        return blackhole(c, op, &h->node[st->index], &h->zk);
    }
    for (int i = 0; i < c->run->sc->routers; i++) {
        rc = blackhole(c, op, &h->node[st->index], &h->router[i]) != 0 ? -EIO : rc;
    }
    return rc;
}

static const char *
node_target(const struct ch_step *st, char *buf, size_t len)
{
    snprintf(buf, len, "node %s", ch_node_name(st->index));
    return buf;
}

/* Step si's impairment (the step's undo ends it, ch_fault_undo); cut: the fault cuts node off
 * from what a handoff needs (verdict_moves.c). */
static void
impair_step(struct ch_cluster *c, int si, int node, int64_t now, int64_t until, const char *what,
            bool cut)
{
    int i = ch_run_impair(c->run, node, now, until, what);

    c->run->impairs[i].cut = cut;
    c->step_impair[si] = i + 1;
}

static void
zk_outage_impairs(struct ch_cluster *c, int si, int64_t now, int64_t until, const char *what)
{
    c->zk_down_since = now;
    /* With fencing = disconnect a node answers nothing while ZooKeeper is away. */
    if (c->run->sc->fence_disconnect) {
        impair_step(c, si, -1, now, until, what, false);
    }
}

/* ZooKeeper is back. After an outage of a session timeout or more it may expire every
 * session at once (a server frozen that long does, on waking): every node loses its
 * registration until it registers again, and answers nothing meanwhile. */
static void
zk_back(struct ch_cluster *c, int64_t now)
{
    if (c->zk_down_since != 0 && now - c->zk_down_since >= c->run->sc->session_timeout_ms) {
        ch_run_impair(c->run, -1, now, now, "zookeeper back after the session timeout");
    }
    c->zk_down_since = 0;
}

void
ch_fault_do(struct ch_cluster *c, int si)
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
            /* a node killed cuts the moves of the nodes draining meanwhile (their shards
             * bound for it, or theirs if it is one of them): those shards may get their
             * policy until the move is given up (handoff_wait) and the membership settles */
            for (int j = 0; st->action == CH_KILL && j < r->sc->nodes; j++) {
                if (c->draining[j] && j != st->index) {
                    ch_run_impair(r, j, now, now + 2 * r->sc->session_timeout_ms + 2000,
                                  "its move cut by a kill");
                }
            }
            if (st->action == CH_KILL && c->draining[st->index]) {
                /* killed while it hands its shards off: every node it was handing them to
                 * (any other) waits for them, then starts them from zero */
                ch_run_impair(r, -1, now, now + 2 * r->sc->session_timeout_ms + 2000,
                              "a drain cut by a kill");
            }
            c->draining[st->index] = false;
            c->node_expected_down[st->index] = true;
            c->open_impair[st->index] = ch_run_impair(r, st->index, now, INT64_MAX,
                                                      st->action == CH_KILL ? "killed" : "stopped");
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
                c->open_impair[st->index] =
                    ch_run_impair(r, st->index, now, INT64_MAX, "restarted");
                rl_harness_server_stop(s, SIGTERM, 10000);
            }
            c->draining[st->index] = false;
            rc = ch_cluster_start_node(c, st->index);
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
            rc = ch_cluster_start_router(c, i);
            if (k >= 0) {
                r->router_down_to[i][k] = ch_now_ms();
            }
            c->router_expected_down[i] = false;
        }
        break;
    case CH_PAUSE:
        if (st->target == CH_NODE) {
            impair_step(c, si, st->index, now, until, "paused", true);
            /* pid 0 (not running) would stop rl-chaos's own process group */
            rc = c->node[st->index].pid > 0 && kill(c->node[st->index].pid, SIGSTOP) == 0
                     ? 0
                     : -ESRCH;
        } else {
            zk_outage_impairs(c, si, now, until, "zookeeper paused");
            c->zk_paused = c->zk.pid > 0;
            rc = c->zk.pid > 0 && kill(c->zk.pid, SIGSTOP) == 0 ? 0 : -ESRCH;
        }
        break;
    case CH_STOP:
        zk_outage_impairs(c, si, now, until, "zookeeper stopped");
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
        /* cut off from what a handoff needs (ZooKeeper, the other nodes): across hosts a
         * partition from the routers leaves the node its ZooKeeper and its peers; through the
         * loopback proxies node-to-node traffic takes the routers' path */
        impair_step(c, si, st->index, now, until, node_target(st, who, sizeof(who)),
                    st->path != CH_PATH_ROUTERS || r->hosts == NULL);
        if (r->hosts != NULL) {
            rc = host_partition(c, st, "add"); /* partition only: main.c refuses oneway */
        } else {
            rl_proxy_set_mode(path_proxy(c, st),
                              st->action == CH_PARTITION ? RL_PROXY_BLACKHOLE
                              : st->path == CH_PATH_ROUTERS ? RL_PROXY_DROP_DOWN
                                                            : RL_PROXY_DROP_UP);
        }
        if (st->path == CH_PATH_ZK) {
            pick_probe_user(c, st->index);
            c->probe_until[st->index] = until == INT64_MAX ? INT64_MAX : until + 2000;
        }
        break;
    case CH_ISOLATE:
        /* cut from everyone: routers, ZooKeeper and the clients' probes alike */
        impair_step(c, si, st->index, now, until, "isolated", true);
        c->isolated[st->index] = true;
        rc = ip_in(c, r->hosts->node[st->index].netns, "link", "set", "dev", r->hosts->dev,
                   "down", NULL);
        break;
    case CH_DELAY:
        impair_step(c, si, st->index, now, until, "delayed", false);
        rl_proxy_set_delay(path_proxy(c, st), (int)st->arg_ms);
        break;
    case CH_DRAIN:
        /* a clean stop the run does not wait for: no impairment (a planned move); its exit
         * is reaped as expected (cluster.c) */
        c->node_expected_down[st->index] = true;
        c->draining[st->index] = c->node[st->index].pid > 0;
        rc = c->node[st->index].pid > 0 && kill(c->node[st->index].pid, SIGTERM) == 0 ? 0
                                                                                      : -ESRCH;
        break;
    case CH_ADD:
        /* a planned move: no impairment, no answer by policy is justified by it */
        rc = ch_cluster_start_node(c, st->index);
        break;
    case CH_ASSIGN:
    case CH_ROLLBACK:
        rc = assign_write(c, st);
        break;
    case CH_RESET:
        ch_run_impair(r, st->index, now, now + 1000, "connections reset");
        rl_proxy_set_mode(path_proxy(c, st), RL_PROXY_RESET);
        ch_sleep_us(100 * 1000);
        rl_proxy_set_mode(path_proxy(c, st), RL_PROXY_PASS);
        break;
    }
    if (rc != 0 && !(st->action == CH_KILL && rc == -ETIMEDOUT)) {
        ch_event(r, "step \"%s\" failed: %s", st->text, strerror(rc < 0 ? -rc : rc));
    }
}

void
ch_fault_undo(struct ch_cluster *c, int si)
{
    struct ch_run *r = c->run;
    const struct ch_step *st = &r->sc->steps[si];
    int rc = 0;

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
        rc = rl_harness_zk_start(&c->zk);
        if (rc != 0) {
            ch_event(r, "ZooKeeper did not start again");
        }
        c->zk_down = false;
        zk_back(c, ch_now_ms());
        break;
    case CH_PARTITION:
    case CH_ONEWAY:
        if (r->hosts != NULL) {
            rc = host_partition(c, st, "del");
        } else {
            rl_proxy_set_mode(path_proxy(c, st), RL_PROXY_PASS);
        }
        break;
    case CH_ISOLATE:
        rc = ip_in(c, r->hosts->node[st->index].netns, "link", "set", "dev", r->hosts->dev, "up",
                   NULL);
        c->isolated[st->index] = false;
        break;
    case CH_DELAY:
        rl_proxy_set_delay(path_proxy(c, st), 0);
        break;
    default:
        break;
    }
    if (c->step_impair[si] > 0) {
        struct ch_impair *m = &r->impairs[c->step_impair[si] - 1];
        int64_t gone = ch_now_ms();

        /* not undone (a command failed or timed out): the fault may still be there */
        if (rc != 0) {
            ch_event(r, "step \"%s\" may not be undone: its impairment stays open", st->text);
            gone = INT64_MAX;
        }
        pthread_mutex_lock(&r->lock);
        m->to_ms = gone > m->to_ms ? gone : m->to_ms;
        pthread_mutex_unlock(&r->lock);
    }
}
