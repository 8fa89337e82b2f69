/*
 * cluster: sets up and stops the throwaway cluster of one rl-chaos run (cluster.h): the
 * configs, ZooKeeper, a fault proxy on each node's two paths, the nodes, the routers and the
 * observer; reads the routers' STATS (table digests, why they answered by policy); and reaps
 * processes that died unasked, each a violation recorded in the run. Not the faults
 * (faults.c) nor the clock (loop.c).
 */
#include "cluster.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "proxy.h"
#include "reqclient.h"

static int
write_configs(struct ch_cluster *c, const int *zk_port)
{
    const struct ch_scenario *sc = c->run->sc;
    const struct ch_hosts *h = c->run->hosts;
    char body[12288], path[PATH_MAX], zk[128];
    int len = 0;

    /* k < 0: router -k - 1's config; k >= 0: node k's */
    for (int k = -sc->routers; k < sc->nodes; k++) {
        const struct ch_host *me =
            h == NULL ? NULL : k < 0 ? &h->router[-k - 1] : &h->node[k];

        /* on loopback each node reaches ZooKeeper through its own proxy; across hosts
         * every process dials ZooKeeper's host */
        if (h != NULL) {
            snprintf(zk, sizeof(zk), "%s", c->zk.connect);
        } else {
            snprintf(zk, sizeof(zk), "127.0.0.1:%d", k < 0 ? c->zk.port : zk_port[k]);
        }
        len = snprintf(body, sizeof(body),
                       "; written by rl-chaos for scenario %s\n[cluster]\nname = %s\n"
                       "zookeeper = %s\nsession_timeout = %lldms\nshards = %u\n"
                       "fencing = %s\n",
                       sc->name, CH_CLUSTER_NAME, zk, (long long)sc->session_timeout_ms,
                       sc->shards, sc->fence_disconnect ? "disconnect" : "expiry");
        if (h != NULL) {
            /* the cluster secret, and whatever else the hosts file adds to [cluster] */
            len += snprintf(body + len, sizeof(body) - (size_t)len, "secret_file = %s\n%s",
                            h->secret_file, h->cluster_extra);
        }
        if (h != NULL && h->tls_ca_file[0] != '\0') {
            /* TLS on every link, each process with its host's certificate */
            len += snprintf(body + len, sizeof(body) - (size_t)len,
                            "tls_cert_file = %s\ntls_key_file = %s\ntls_ca_file = %s\n",
                            me->tls_cert, me->tls_key, h->tls_ca_file);
        }
        if (k < 0 && c->run->report != NULL) {
            /* the page tells the backstop's answers apart by the routers' request logs */
            rl_harness_tmppath(c->router_reqlog[-k - 1], sizeof(c->router_reqlog[0]),
                               "router-%d-requests.log", -k);
        }
        len += snprintf(body + len, sizeof(body) - (size_t)len,
                        "\n[router]\nlisten = 127.0.0.1:7400\ndeadline = %lldms\n"
                        "request_log = %s\n%s\n[clients]\nidle_timeout = 0\n"
                        /* rl-chaos never refunds: the deny cache holds refusals */
                        "adjust = no\n\n",
                        (long long)sc->deadline_ms, k < 0 ? c->router_reqlog[-k - 1] : "",
                        k < 0 && c->router_reqlog[-k - 1][0] != '\0'
                            ? "request_log_sample = 1\nrequest_log_max_size = 0\n"
                            : "");
        if (h != NULL) {
            len += snprintf(body + len, sizeof(body) - (size_t)len,
                            "[client chaos]\ntoken_sha256 = %s\nservices = *\nstats = yes\n\n",
                            h->token_sha256);
        }
        for (int i = 0; i < sc->nodes; i++) {
            char listen[96], adv[96];

            if (h != NULL) {
                /* the wildcard, as a node with several interfaces would: then only
                 * advertise says where routers reach it */
                snprintf(listen, sizeof(listen), "0.0.0.0:%d", c->run->node_port[i]);
                snprintf(adv, sizeof(adv), "%s:%d", h->node[i].addr, c->run->node_port[i]);
            } else {
                snprintf(listen, sizeof(listen), "127.0.0.1:%d", c->run->node_port[i]);
                snprintf(adv, sizeof(adv), "127.0.0.1:%d", c->proxy_port[i]);
            }
            len += snprintf(body + len, sizeof(body) - (size_t)len,
                            "[node %s]\nlisten = %s\nadvertise = %s\nmemory = 64mb\n\n",
                            ch_node_name(i), listen, adv);
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
            rl_harness_tmppath(path, sizeof(path), "router-%d.conf", -k);
            snprintf(c->router_conf[-k - 1], sizeof(c->router_conf[0]), "%s", path);
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

/* The harness's idea of where a process of the run is: zeroed on loopback. */
static struct rl_harness_host
host_of(const struct ch_host *h)
{
    struct rl_harness_host out;

    memset(&out, 0, sizeof(out));
    if (h != NULL) {
        snprintf(out.netns, sizeof(out.netns), "%s", h->netns);
        snprintf(out.addr, sizeof(out.addr), "%s", h->addr);
    }
    return out;
}

int
ch_cluster_start_node(struct ch_cluster *c, int i)
{
    const struct ch_hosts *h = c->run->hosts;
    struct rl_harness_host at = host_of(h != NULL ? &h->node[i] : NULL);

    at.any = h != NULL; /* listens on 0.0.0.0, advertises its host's address */
    return rl_harness_node_start_at(&c->node[i], &at, c->node_conf[i], ch_node_name(i),
                                    c->run->node_port[i], 0);
}

int
ch_cluster_start_router(struct ch_cluster *c, int i)
{
    const struct ch_hosts *h = c->run->hosts;
    struct rl_harness_host at = host_of(h != NULL ? &h->router[i] : NULL);
    const char *env = getenv("RL_TEST_ROUTER_WORKERS");

    return rl_harness_router_start_at(&c->router[i], &at, c->router_conf[i], c->run->router_port[i],
                                      env != NULL && atoi(env) > 0 ? atoi(env)
                                                                   : RL_HARNESS_ROUTER_WORKERS);
}

int
ch_cluster_start(struct ch_cluster *c)
{
    struct ch_run *r = c->run;
    const struct ch_scenario *sc = r->sc;
    int zk_port[CH_NODES_MAX], rc, started = 0;
    char path[128];

    if (r->hosts != NULL) {
        c->zk.host = host_of(&r->hosts->zk);
    }
    if ((rc = rl_harness_zk_start(&c->zk)) != 0) {
        fprintf(stderr, "rl-chaos: ZooKeeper did not start: %s\n", strerror(-rc));
        return rc;
    }
    for (int i = 0; i < sc->nodes; i++) {
        r->node_port[i] = rl_harness_free_port();
        c->proxy_port[i] = 0;
        zk_port[i] = 0;
        c->open_impair[i] = -1;
        if (r->hosts != NULL) {
            continue; /* no proxies: faults are the hosts' own (routes, links) */
        }
        if (r->node_port[i] < 0 ||
            rl_proxy_start(&c->px_routers[i], r->node_port[i], &c->proxy_port[i]) != 0 ||
            rl_proxy_start(&c->px_zk[i], c->zk.port, &zk_port[i]) != 0) {
            fprintf(stderr, "rl-chaos: cannot set up the fault proxies\n");
            return -EIO;
        }
    }
    for (int i = 0; i < sc->routers; i++) {
        r->router_port[i] = rl_harness_free_port();
    }
    if ((rc = write_configs(c, zk_port)) != 0) {
        fprintf(stderr, "rl-chaos: cannot write the configs: %s\n", strerror(-rc));
        return rc;
    }
    for (int i = 0; i < sc->nodes; i++) {
        if (sc->spare[i]) {
            continue; /* started by its `add` step */
        }
        if ((rc = ch_cluster_start_node(c, i)) != 0) {
            fprintf(stderr, "rl-chaos: node %s did not start (%s); its log: %s\n",
                    ch_node_name(i), strerror(-rc), c->node[i].log_path);
            return rc;
        }
    }
    snprintf(path, sizeof(path), "/ratelimiter/%s/nodes", CH_CLUSTER_NAME);
    for (int i = 0; i < sc->nodes; i++) {
        started += !sc->spare[i];
    }
    if ((rc = rl_harness_zk_wait_children(c->zk.connect, path, started, 20000)) != 0) {
        fprintf(stderr, "rl-chaos: the nodes did not all register in ZooKeeper\n");
        return rc;
    }
    for (int i = 0; i < sc->routers; i++) {
        if ((rc = ch_cluster_start_router(c, i)) != 0) {
            fprintf(stderr, "rl-chaos: router %d did not start (%s); its log: %s\n", i + 1,
                    strerror(-rc), c->router[i].log_path);
            return rc;
        }
    }
    if ((rc = ch_observer_start(&c->observer, r, c->zk.connect, CH_CLUSTER_NAME)) != 0) {
        fprintf(stderr, "rl-chaos: cannot watch ZooKeeper: %d\n", rc);
        return rc;
    }
    return 0;
}

/* Router i's STATS into *rep through its kept connection, dialled when needed: 0, or -1
 * when it cannot be read now (the connection is dropped, to be dialled again). */
static int
router_stats(struct ch_cluster *c, int i, struct rl_wire_reply *rep)
{
    if (c->router[i].pid == 0) {
        return -1;
    }
    if (c->stats_client[i] == NULL) {
        if (ch_run_connect(c->run, true, i, &c->stats_client[i], 300) != 0) {
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

int64_t
ch_cluster_in_flight(struct ch_cluster *c)
{
    int64_t n = 0;

    for (int i = 0; i < c->run->sc->nodes; i++) {
        struct rl_client *cl = NULL;
        struct rl_wire_reply rep;

        if (c->node[i].pid == 0) {
            continue;
        }
        if (ch_run_connect(c->run, false, i, &cl, 300) != 0) {
            return -1;
        }
        if (rl_client_stats(cl, &rep, 300) != 0 || rep.op != RL_WIRE_OP_STATS) {
            rl_client_destroy(cl);
            return -1;
        }
        /* (a node from before automatic handoff says neither: 0) */
        n += rl_client_stat(&rep, "shards_incoming", 0) +
             rl_client_stat(&rep, "shards_outgoing", 0);
        rl_client_destroy(cl);
    }
    return n;
}

/* A router's table digest through STATS; 0 when it cannot be read now. */
static uint64_t
router_digest(struct ch_cluster *c, int i)
{
    struct rl_wire_reply rep;

    return router_stats(c, i, &rep) == 0 ? (uint64_t)rl_client_stat(&rep, "table_digest", 0) : 0;
}

void
ch_cluster_print_causes(struct ch_cluster *c)
{
    for (int i = 0; i < c->run->sc->routers; i++) {
        struct rl_wire_reply rep;

        if (router_stats(c, i, &rep) != 0) {
            continue;
        }
        printf("router %d (since its last start): checks %lld, failure-policy answers because "
               "the owner was down %lld, past the deadline %lld, refused by the node "
               "(NOT_OWNER) %lld; late replies dropped %lld, table builds %lld; planned moves: "
               "MOVING %lld, NOT_OWNER held %lld, redirected %lld, held %lld, past handoff_wait "
               "%lld\n",
               i + 1, (long long)rl_client_stat(&rep, "checks", 0),
               (long long)rl_client_stat(&rep, "owner_down", 0),
               (long long)rl_client_stat(&rep, "deadline_expired", 0),
               (long long)rl_client_stat(&rep, "not_owner", 0),
               (long long)rl_client_stat(&rep, "late_replies", 0),
               (long long)rl_client_stat(&rep, "table_builds", 0),
               (long long)rl_client_stat(&rep, "moved", 0),
               (long long)rl_client_stat(&rep, "not_owner_held", 0),
               (long long)rl_client_stat(&rep, "move_redirected", 0),
               (long long)rl_client_stat(&rep, "held_for_move", 0),
               (long long)rl_client_stat(&rep, "move_expired", 0));
    }
}

void
ch_cluster_backstop_stats(struct ch_cluster *c)
{
    struct ch_run *r = c->run;

    r->backstop_stats[0] = r->backstop_stats[1] = 0;
    for (int i = 0; i < r->sc->routers; i++) {
        struct rl_wire_reply rep;

        if (router_stats(c, i, &rep) != 0) {
            continue;
        }
        r->backstop_stats[0] += (uint64_t)rl_client_stat(&rep, "backstop_allowed", 0);
        r->backstop_stats[1] += (uint64_t)rl_client_stat(&rep, "backstop_limited", 0);
    }
}

int
ch_cluster_sample(struct ch_cluster *c, int *alive)
{
    struct ch_run *r = c->run;
    int nm, agree = 0;
    uint64_t want = ch_run_digest(r, &nm);

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
        ch_run_sample(r, ch_now_ms(), i, d);
    }
    return agree;
}

/* The routers, then the nodes, into s; returns how many. */
static int
servers(struct ch_cluster *c, struct rl_harness_server **s)
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

void
ch_cluster_reap(struct ch_cluster *c)
{
    struct ch_run *r = c->run;
    struct rl_harness_server *s[CH_NODES_MAX + CH_ROUTERS_MAX];
    int n = servers(c, s), status;

    for (int i = 0; i < n; i++) {
        if (s[i]->pid != 0 && rl_harness_wait(s[i]->pid, 0, &status) == 0) {
            int node = i - r->sc->routers;

            s[i]->pid = 0;
            s[i]->status = status;
            if (node >= 0 && c->node_expected_down[node] &&
                (!WIFEXITED(status) || WEXITSTATUS(status) == 0)) {
                /* a `drain` step's clean stop ended (exit 0), or a kill ended it */
                c->draining[node] = false;
                ch_event(r, "node %s exited (status 0x%x) after its drain", s[i]->name, status);
                continue;
            }
            ch_event(r, "%s %s died unasked (status 0x%x); log %s", s[i]->program,
                     s[i]->name, status, s[i]->log_path);
            ch_run_death(r, "%s %s died unasked (status 0x%x)", s[i]->program, s[i]->name,
                         status);
        }
    }
    if (c->zk.pid != 0 && !c->zk_down && rl_harness_wait(c->zk.pid, 0, &status) == 0) {
        c->zk.pid = 0;
        ch_event(r, "ZooKeeper died unasked (status 0x%x)", status);
        ch_run_death(r, "zookeeper died unasked (status 0x%x)", status);
    }
}

void
ch_cluster_stop(struct ch_cluster *c, bool judge)
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
            ch_run_death(r, "%s %s did not stop cleanly on SIGTERM (status 0x%x)", s[i]->program,
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
