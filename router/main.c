/*
 * rl-router: the ratelimiter router. Reads cluster.conf, learns the members and the shard
 * assignment from ZooKeeper (or the static [node] list when `zookeeper` is empty), and
 * proxies the wire protocol to the owning nodes. Start-up, signals and exit statuses are
 * daemon.h's: SIGTERM/SIGINT close and exit 0; SIGHUP reopens the --log-file and the
 * request log (after they were moved aside for rotation) and reloads the [service] rules
 * (rules.h), which may also come from the rules znode in ZooKeeper, and the envoy config
 * (envoylive.h: also reread when its files change, and pushed through ZooKeeper).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "daemon.h"
#include "log.h"
#include "envoycfg.h"
#include "envoylive.h"
#include "fronts.h"
#include "parse.h"
#include "router.h"
#include "rproc.h"
#include "rules.h"
#include "zkm.h"

struct router_main {
    struct rl_daemon d;
    struct rl_rproc *proc; /* the workers, each with its own rules (rproc.h) */
    struct rl_zkm *zkm;
    const char *name;
    uint32_t workers; /* --workers; 0: the config's */
    struct rl_envoy_config *envoy; /* the envoy config the router started with; NULL: none */
    struct rl_envoy_live *live;    /* where later ones come from; NULL: no envoy_config, no ZK */
};

enum { OPT_WORKERS = 0x2000 };

static const struct option router_options[] = {{"workers", required_argument, NULL, OPT_WORKERS},
                                               {NULL, 0, NULL, 0}};

static int
router_option(struct rl_daemon *d, int opt, const char *arg)
{
    struct router_main *m = d->data;
    uint64_t n;

    if (opt != OPT_WORKERS) {
        return 2;
    }
    if (rl_parse_u64(arg, 1, RL_CONF_WORKERS_MAX, &n) != NULL) {
        rl_daemon_fail(d, "rl-router: --workers: \"%s\" is not a number in 1..%u", arg,
                       RL_CONF_WORKERS_MAX);
        return 2;
    }
    m->workers = (uint32_t)n;
    return 0;
}

static const char usage[] =
    "usage: rl-router --config FILE [--listen HOST:PORT] [--name NAME]\n"
    "                 [--log-level error|warn|info|debug] [--log-file FILE]\n"
    "                 [--metrics HOST:PORT] [--workers N]\n"
    "\n"
    "Routes CHECK requests to the node owning each (service, user) shard.\n"
    "  --config FILE      cluster.conf to read\n"
    "  --listen HOST:PORT address to serve on (default: [router] listen)\n"
    "  --name NAME        name answered to PING (default HOSTNAME@HOST:PORT)\n"
    "  --log-level LEVEL  verbosity (default info)\n"
    "  --log-file FILE    log there instead of stderr; SIGHUP reopens it\n"
    "  --metrics HOST:PORT  serve /metrics, /healthz, /readyz there (default: [router]\n"
    "                     metrics; \"off\": none)\n"
    "  --workers N        threads serving clients, 1..64 (default: [router] workers, else\n"
    "                     one per core)\n"
    "  --help, --version\n"
    "Signals: TERM/INT stop, HUP reopens the log file and the request log and reloads the\n"
    "[service] rules of --config (unless they come from ZooKeeper: rl-cli rules push).\n";

static void
on_members(void *arg, const struct rl_member *members, size_t n)
{
    struct router_main *m = arg;

    rl_log_info("membership: %zu nodes", n);
    rl_rproc_set_members(m->proc, members, n);
}

static void
on_assignment(void *arg, const char *text, size_t len, int64_t version)
{
    struct router_main *m = arg;

    rl_log_info("assignment: version %lld (%zu bytes)", (long long)version, len);
    rl_rproc_set_assignment(m->proc, text, len, version);
}

static void
on_state(void *arg, enum rl_zkm_state state)
{
    struct router_main *m = arg;

    rl_rproc_set_zookeeper(m->proc, m->d.conf->zookeeper, (int)state);
    if (state == RL_ZKM_CONNECTED) {
        rl_log_info("ZooKeeper session: %s", rl_zkm_state_name(state));
    } else {
        rl_log_warn("ZooKeeper session: %s", rl_zkm_state_name(state));
    }
}

/* The rules znode changed. */
static void
on_rules(void *arg, const char *text, size_t len, int64_t version)
{
    struct router_main *m = arg;

    rl_rproc_rules_from_zk(m->proc, text, len, version);
}

/* The envoy config znode changed. */
static void
on_envoy(void *arg, const char *text, size_t len, int64_t version)
{
    struct router_main *m = arg;

    if (m->live != NULL) {
        rl_envoy_live_znode(m->live, text, len, version);
    }
}

/* A new envoy config to put in force: every worker takes it. */
static void
envoy_apply(void *arg, struct rl_envoy_config *sh)
{
    struct router_main *m = arg;

    if (m->proc != NULL) {
        rl_rproc_set_envoy(m->proc, sh);
    }
}

/* The slices znode changed (docs/REGIONS.md): the nodes judge by them; the router only
 * forgets the refusals it remembered. */
static void
on_slices(void *arg, const char *text, size_t len, int64_t version)
{
    struct router_main *m = arg;

    (void)text;
    (void)len;
    (void)version;
    rl_rproc_slices_changed(m->proc);
}

/* A node said this router's view is stale: read ZooKeeper again (the router calls this at
 * most every RL_ROUTER_REFRESH_MS however many nodes say so). */
static void
on_stale(void *arg)
{
    struct router_main *m = arg;

    if (m->zkm != NULL) {
        rl_zkm_refresh(m->zkm);
    }
}

static void
router_stop(struct rl_daemon *d)
{
    struct router_main *m = d->data;

    if (m->zkm != NULL) {
        rl_zkm_destroy(m->zkm);
        m->zkm = NULL;
    }
    rl_envoy_live_close(m->live);
    m->live = NULL;
    rl_rproc_close(m->proc); /* each worker drops its parse in flight, closes and exits */
    m->proc = NULL;
}

static void
router_hup(struct rl_daemon *d)
{
    struct router_main *m = d->data;

    if (m->proc == NULL) {
        return;
    }
    if (m->d.conf->request_log != NULL && m->d.conf->request_log[0] != '\0') {
        rl_log_info("SIGHUP: reopening the request log %s", m->d.conf->request_log);
    }
    rl_rproc_hup(m->proc); /* the request log, and every worker's rules */
    if (m->live != NULL) {
        rl_envoy_live_hup(m->live); /* [cluster] envoy_config again, unless a pushed one rules */
    }
}

/* Static membership: the [node] sections of the config. */
static int
static_members(struct router_main *m)
{
    const struct rl_conf *conf = m->d.conf;
    struct rl_member *members = calloc(conf->nnodes ? conf->nnodes : 1, sizeof(*members));

    if (members == NULL) {
        return -ENOMEM;
    }
    for (size_t i = 0; i < conf->nnodes; i++) {
        const struct rl_node_conf *nc = &conf->nodes[i];
        uint16_t port;
        const char *host = rl_conf_node_dial(nc, &port);

        snprintf(members[i].name, sizeof(members[i].name), "%s", nc->name);
        rl_format_hostport(members[i].addr, sizeof(members[i].addr), host, port);
    }
    rl_rproc_set_members(m->proc, members, conf->nnodes);
    free(members);
    return 0;
}

/* /metrics, on the loop thread (metrics.h). */
static void
router_metrics(void *arg, struct rl_prom *p)
{
    struct router_main *m = arg;

    rl_prom_build_info(p, "rl-router", m->name);
    rl_rproc_metrics(m->proc, p);
    if (m->live != NULL) {
        rl_envoy_live_metrics(m->live, p);
    }
}

static bool
router_ready(void *arg, char *why, size_t len)
{
    struct router_main *m = arg;

    return rl_rproc_ready(m->proc, why, len);
}

static const struct rl_daemon_spec router_spec = {
    .prog = "rl-router",
    .usage = usage,
    .log_tag = "router",
    .extra = router_options,
    .on_option = router_option,
    .on_stop = router_stop,
    .on_hup = router_hup,
    .tls_client = true,
    .tls_alpn = "h2", /* the gRPC front (front.c); the binary protocol offers none */
};

/* Once, once serving: what `failure = open` now means for its services. */
static void
router_failure_notice(const struct rl_conf *conf)
{
    const char *first;
    size_t n = rl_conf_backstopped(conf, &first);

    if (n > 0) {
        rl_log_warn("%zu rule(s) with failure = open (the first: service %s) are now held to the "
                    "router's backstop while their owner cannot be reached (each worker of each "
                    "router allows a user at most limit / workers per window; a backstop refusal "
                    "is LIMITED); failure = open_unlimited keeps the old meaning "
                    "(docs/OPERATIONS.md, \"The backstop\")",
                    n, first);
    }
}

/* Once, once serving: the rules whose refusals the deny cache may not hold because a client
 * may refund under them (docs/OPERATIONS.md, "The deny cache"). */
static void
router_refund_notice(const struct rl_conf *conf)
{
    size_t n = 0;

    for (size_t i = 0; conf->deny_cache != 0 && i < conf->nrules; i++) {
        n += rl_conf_rule_refundable(conf, &conf->rules[i]);
    }
    if (n > 0) {
        rl_log_info("%zu of %zu rule(s) may be refunded through a router (adjust = yes): the deny "
                    "cache holds none of their refusals; a cluster that never refunds sets "
                    "[clients] adjust = no (docs/OPERATIONS.md, \"The deny cache\")",
                    n, conf->nrules);
    }
}

int
main(int argc, char **argv)
{
    static const struct rl_zkm_cbs cbs = {on_members, on_assignment, on_state, NULL,
                                          on_rules,   on_envoy,      on_slices};
    static struct router_main m;
    struct rl_rproc_opts popts = {0};
    struct rl_router_opts opts = {0};
    char defname[256], err[512];
    int rc;

    rc = rl_daemon_init(&m.d, &router_spec, argc, argv, &m);
    if (rc != RL_DAEMON_RUN) {
        rl_daemon_destroy(&m.d);
        rl_envoy_config_drop(m.envoy);
        return rc;
    }
    if (rl_daemon_listen(&m.d, m.d.conf->router_host, m.d.conf->router_port,
                         "no [router] listen", m.d.conf->nauth_clients > 0) != 0) {
        rl_daemon_destroy(&m.d);
        rl_envoy_config_drop(m.envoy);
        return 2;
    }
    /* Every front of the front table (fronts.c) authenticates its clients only with the
     * [client] tokens (gRPC's bearer token, RESP's AUTH): without any, a front listens on
     * loopback only unless insecure = yes. Its ops' name is its [router] key. */
    for (int k = 0; k < RL_FRONT_KINDS; k++) {
        const char *host = NULL;
        uint16_t port = 0;

        rl_fronts[k].listen(m.d.conf, &host, &port);
        if (host != NULL && !rl_parse_is_loopback(host) && m.d.conf->nauth_clients == 0 &&
            !m.d.conf->insecure) {
            rl_daemon_fail(&m.d,
                           "rl-router: [router] %s %s is not a loopback address, and there is "
                           "no [client] section whose token its clients would need: anyone "
                           "who reaches it could spend any quota. Add one, or set [cluster] "
                           "insecure = yes to serve it anyway",
                           rl_fronts[k].ops->name, host);
            rl_daemon_destroy(&m.d);
            rl_envoy_config_drop(m.envoy);
            return 2;
        }
    }
    if (m.d.conf->resp_host != NULL &&
        rl_conf_rule(m.d.conf, m.d.conf->resp_service, strlen(m.d.conf->resp_service), NULL,
                     0) != NULL) {
        rl_log_warn("[router] resp_service %s has configured rules: CL.THROTTLE is refused "
                    "until it names a service without any",
                    m.d.conf->resp_service);
    }
    /* The envoy config: [cluster] envoy_config loaded whole before anything serves, or the
     * router stops with the first problem as FILE:LINE (docs/ENVOY.md); with ZooKeeper, a
     * pushed one may follow (envoylive.h). A router without the gRPC front keeps it too: a
     * binary client's inline refund of one of its domains is refused (forward.c). */
    if (m.d.conf->rls_host != NULL && m.d.conf->envoy_config[0] == '\0' &&
        m.d.conf->zookeeper[0] == '\0') {
        rl_daemon_fail(&m.d, "rl-router: [router] rls needs [cluster] envoy_config (or "
                             "zookeeper, to serve what rl-cli envoy push writes)");
        rl_daemon_destroy(&m.d);
        return 2;
    }
    if (m.d.conf->envoy_config[0] != '\0' || m.d.conf->zookeeper[0] != '\0') {
        struct rl_envoy_live_opts lo = {.path = m.d.conf->envoy_config,
                                        .merge_domains = m.d.conf->envoy_merge_domains,
                                        .apply = envoy_apply,
                                        .arg = &m};

        if (rl_envoy_live_start(&m.live, rl_daemon_loop(&m.d), &lo, &m.envoy, err,
                                sizeof(err)) != 0) {
            rl_daemon_fail(&m.d, "rl-router: [cluster] envoy_config: %s", err);
            rl_daemon_destroy(&m.d);
            return 2;
        }
        if (m.d.conf->rls_host != NULL || m.d.conf->envoy_config[0] != '\0') {
            rl_log_info("envoy_config %s: %zu domains, %zu descriptors",
                        m.d.conf->envoy_config[0] != '\0' ? m.d.conf->envoy_config
                                                          : "(none until one is pushed)",
                        m.envoy->ndomains, m.envoy->ndescriptors);
        }
    }
    /* One name everywhere: PING, STATS and its routers/ znode (rl-cli status). */
    if (m.d.name == NULL) {
        char host[64] = "";

        gethostname(host, sizeof(host) - 1);
        snprintf(defname, sizeof(defname), "%s@%s", host[0] ? host : "router", m.d.addr);
    }
    opts.name = m.d.name != NULL ? m.d.name : defname;
    m.name = opts.name;
    opts.host = m.d.host;
    opts.port = m.d.port;
    opts.limits = m.d.conf->clients;
    opts.envoy = m.envoy;
    opts.tls_server = m.d.tls_server;
    opts.tls_client = m.d.tls_client;
    popts.router = opts;
    popts.config_path = m.d.config_path;
    popts.workers = m.workers != 0 ? m.workers : rl_rproc_default_workers(m.d.conf);
    popts.on_stale = on_stale;
    popts.arg = &m;
    rc = rl_rproc_create(&m.proc, rl_daemon_loop(&m.d), m.d.conf, &popts, err, sizeof(err));
    if (rc != 0) {
        if (err[0] != '\0') {
            rl_daemon_fail(&m.d, "rl-router: cannot start: %s", err);
        } else {
            rl_daemon_fail(&m.d, "rl-router: cannot serve on %s: %s", m.d.addr, uv_strerror(rc));
        }
        rl_envoy_live_close(m.live);
        rl_daemon_destroy(&m.d);
        rl_envoy_config_drop(m.envoy);
        return 1;
    }
    if (m.d.conf->zookeeper[0] == '\0') {
        rc = static_members(&m);
    } else {
        rl_rproc_set_zookeeper(m.proc, m.d.conf->zookeeper, RL_ZKM_CONNECTING);
        rc = rl_zkm_create(&m.zkm, &m.d.loop, m.d.conf->zookeeper, m.d.conf->session_timeout_ms,
                           m.d.conf->cluster_name, &cbs, &m);
        if (rc == 0) {
            rl_zkm_secure(m.zkm, m.d.conf->secret, m.d.conf->secret_len);
            rc = rl_zkm_watch(m.zkm);
        }
        if (rc == 0) {
            rc = rl_zkm_watch_rules(m.zkm);
            if (rc == 0) {
                rc = rl_zkm_watch_slices(m.zkm);
            }
        }
        if (rc == 0 && m.live != NULL) {
            rc = rl_zkm_watch_envoy(m.zkm);
        }
        if (rc == 0) {
            /* routers/<name>: who runs, for rl-cli status. */
            const char *aname = opts.name;

            if (rl_zkm_announce_router(m.zkm, aname, m.d.addr) != 0) {
                /* Only rl-cli status reads it: serve anyway. */
                rl_log_warn("not announced in ZooKeeper as %s (%s): rl-cli status will not "
                            "list this router",
                            aname, m.d.addr);
            }
        }
    }
    if (rc != 0) {
        rl_daemon_fail(&m.d, "rl-router: cannot learn the membership: %s", strerror(-rc));
        rl_zkm_destroy(m.zkm);
        rl_envoy_live_close(m.live);
        rl_rproc_close(m.proc);
        rl_daemon_destroy(&m.d);
        rl_envoy_config_drop(m.envoy);
        return 1;
    }
    {
        const struct rl_metrics_ops mops = {router_metrics, router_ready, &m};

        rc = rl_daemon_metrics(&m.d, m.d.conf->router_metrics_host,
                               m.d.conf->router_metrics_port, &mops);
        if (rc != 0) {
            router_stop(&m.d);
            rl_daemon_destroy(&m.d);
            rl_envoy_config_drop(m.envoy);
            return rc;
        }
    }
    {
        /* Every listener, and whether it takes TLS (all of them do, or none). */
        const struct rl_conf *cf = m.d.conf;
        const char *sec = m.d.tls_server != NULL ? "TLS" : "plain TCP";
        char rls[300] = ", no gRPC", resp[300] = ", no RESP";

        if (cf->rls_host != NULL) {
            snprintf(rls, sizeof(rls), ", %s:%u (gRPC, %s)", cf->rls_host, cf->rls_port, sec);
        }
        if (cf->resp_host != NULL) {
            snprintf(resp, sizeof(resp), ", %s:%u (RESP, %s)", cf->resp_host, cf->resp_port, sec);
        }
        rl_log_info("%s serving on %s (binary, %s)%s%s; %s membership, deadline %u ms, %u workers",
                    opts.name, m.d.addr, sec, rls, resp, cf->zookeeper[0] ? "ZooKeeper" : "static",
                    cf->deadline_ms, rl_rproc_workers(m.proc));
        router_failure_notice(cf);
        router_refund_notice(cf);
    }
    rl_daemon_run(&m.d);
    rl_daemon_destroy(&m.d);
    rl_envoy_config_drop(m.envoy);
    return 0;
}
