/*
 * rl-router: the ratelimiter router. Reads cluster.conf, learns the members and the shard
 * assignment from ZooKeeper (or the static [node] list when `zookeeper` is empty), and
 * proxies the wire protocol to the owning nodes. SIGTERM/SIGINT: close and exit 0.
 * SIGHUP: reopen the request log (after it was moved aside for rotation).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "conf.h"
#include "log.h"
#include "router.h"
#include "zkm.h"

struct router_main {
    uv_loop_t loop;
    uv_signal_t sigterm, sigint, sighup;
    struct rl_router *router;
    struct rl_zkm *zkm;
    struct rl_conf *conf;
};

static void
usage(FILE *f)
{
    fprintf(f, "usage: rl-router --config FILE [--listen HOST:PORT] [--name NAME]\n"
               "                 [--log-level error|warn|info|debug]\n"
               "\n"
               "Routes CHECK requests to the node owning each (service, user) shard.\n"
               "  --config FILE      cluster.conf to read\n"
               "  --listen HOST:PORT address to serve on (default: [router] listen)\n"
               "  --name NAME        name answered to PING (default router@HOST:PORT)\n"
               "  --log-level LEVEL  stderr verbosity (default info)\n"
               "  --help, --version\n"
               "Signals: TERM/INT stop, HUP reopens the request log.\n");
}

static void
on_members(void *arg, const struct rl_member *members, size_t n)
{
    struct router_main *m = arg;

    rl_log_info("membership: %zu nodes", n);
    rl_router_set_members(m->router, members, n);
}

static void
on_assignment(void *arg, const char *text, size_t len, int64_t version)
{
    struct router_main *m = arg;

    rl_log_info("assignment: version %lld (%zu bytes)", (long long)version, len);
    rl_router_set_assignment(m->router, text, len, version);
}

static void
on_state(void *arg, enum rl_zkm_state state)
{
    (void)arg;
    rl_log_info("ZooKeeper session: %s", rl_zkm_state_name(state));
}

static void
on_signal(uv_signal_t *h, int signum)
{
    struct router_main *m = h->data;

    if (signum == SIGHUP) {
        rl_log_info("SIGHUP: reopening the request log");
        rl_router_reopen_log(m->router);
        return;
    }
    rl_log_info("signal %d: shutting down", signum);
    uv_close((uv_handle_t *)&m->sigterm, NULL);
    uv_close((uv_handle_t *)&m->sigint, NULL);
    uv_close((uv_handle_t *)&m->sighup, NULL);
    if (m->zkm != NULL) {
        rl_zkm_destroy(m->zkm);
        m->zkm = NULL;
    }
    rl_router_close(m->router);
}

/* Static membership: the [node] sections of the config. */
static int
static_members(struct router_main *m)
{
    struct rl_member *members = calloc(m->conf->nnodes ? m->conf->nnodes : 1, sizeof(*members));

    if (members == NULL) {
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->conf->nnodes; i++) {
        const struct rl_node_conf *nc = &m->conf->nodes[i];

        snprintf(members[i].name, sizeof(members[i].name), "%s", nc->name);
        /* An IPv6 host goes back in brackets, or "::1:7001" would not parse as HOST:PORT. */
        snprintf(members[i].addr, sizeof(members[i].addr),
                 strchr(nc->host, ':') != NULL ? "[%s]:%u" : "%s:%u", nc->host, nc->port);
    }
    rl_router_set_members(m->router, members, m->conf->nnodes);
    free(members);
    return 0;
}

int
main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'}, {"listen", required_argument, NULL, 'l'},
        {"name", required_argument, NULL, 'n'},   {"log-level", required_argument, NULL, 'L'},
        {"help", no_argument, NULL, 'h'},         {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0}};
    static const struct rl_zkm_cbs cbs = {on_members, on_assignment, on_state};
    const char *config = NULL, *listen = NULL, *name = NULL;
    enum rl_log_level level = RL_LOG_INFO;
    struct rl_router_opts opts = {0};
    struct router_main m;
    char err[512], defname[96];
    char *host = NULL;
    uint16_t port;
    const char *phrase;
    int opt, rc;

    memset(&m, 0, sizeof(m));
    while ((opt = getopt_long(argc, argv, "c:l:n:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            config = optarg;
            break;
        case 'l':
            listen = optarg;
            break;
        case 'n':
            name = optarg;
            break;
        case 'L':
            if (rl_log_level_parse(optarg, &level) != 0) {
                fprintf(stderr, "rl-router: --log-level: unknown level \"%s\"\n", optarg);
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("rl-router %s\n", RL_VERSION);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (config == NULL || optind != argc) {
        usage(stderr);
        return 2;
    }
    rl_log_setup(level, "router");
    if (rl_conf_load(config, &m.conf, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    if (listen != NULL) {
        phrase = rl_parse_hostport(listen, &host, &port);
        if (phrase != NULL) {
            fprintf(stderr, "rl-router: --listen: %s\n", phrase);
            rl_conf_destroy(m.conf);
            return 2;
        }
    } else {
        host = strdup(m.conf->router_host);
        port = m.conf->router_port;
    }
    snprintf(defname, sizeof(defname), "router@%s:%u", host, port);
    opts.name = name != NULL ? name : defname;
    opts.host = host;
    opts.port = port;
    signal(SIGPIPE, SIG_IGN);
    uv_loop_init(&m.loop);
    rc = rl_router_create(&m.router, &m.loop, m.conf, &opts);
    if (rc != 0) {
        fprintf(stderr, "rl-router: cannot serve on %s:%u: %s\n", host, port, uv_strerror(rc));
        uv_run(&m.loop, UV_RUN_DEFAULT);
        rc = 1;
        goto out;
    }
    if (m.conf->zookeeper[0] == '\0') {
        rc = static_members(&m);
    } else {
        rc = rl_zkm_create(&m.zkm, &m.loop, m.conf->zookeeper, m.conf->session_timeout_ms,
                           m.conf->cluster_name, &cbs, &m);
        if (rc == 0) {
            rc = rl_zkm_watch(m.zkm);
        }
    }
    if (rc != 0) {
        fprintf(stderr, "rl-router: cannot learn the membership: %s\n", strerror(-rc));
        rl_zkm_destroy(m.zkm);
        rl_router_close(m.router);
        uv_run(&m.loop, UV_RUN_DEFAULT);
        rc = 1;
        goto out;
    }
    uv_signal_init(&m.loop, &m.sigterm);
    uv_signal_init(&m.loop, &m.sigint);
    uv_signal_init(&m.loop, &m.sighup);
    m.sigterm.data = m.sigint.data = m.sighup.data = &m;
    uv_signal_start(&m.sigterm, on_signal, SIGTERM);
    uv_signal_start(&m.sigint, on_signal, SIGINT);
    uv_signal_start(&m.sighup, on_signal, SIGHUP);
    rl_log_info("%s serving on %s:%u, %s membership, deadline %u ms", opts.name, host, port,
                m.conf->zookeeper[0] ? "ZooKeeper" : "static", m.conf->deadline_ms);
    uv_run(&m.loop, UV_RUN_DEFAULT);
    rl_log_info("stopped");
    rc = 0;
out:
    if (uv_loop_close(&m.loop) != 0) {
        rl_log_warn("handles left open at exit");
    }
    free(host);
    rl_conf_destroy(m.conf);
    return rc;
}
