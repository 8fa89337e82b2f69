/*
 * rl-node: the ratelimiter node. Reads cluster.conf, builds the limiter for its rules,
 * serves the wire protocol on its listen address and, when ZooKeeper is configured,
 * registers itself there. Exits 0 on SIGTERM/SIGINT after closing its connections and its
 * znode; exits 2 with one line on a bad command line or config.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "conf.h"
#include "limiter.h"
#include "log.h"
#include "server.h"
#include "zkm.h"

struct node {
    uv_loop_t loop;
    uv_signal_t sigterm;
    uv_signal_t sigint;
    struct rl_server server;
    struct rl_limiter *limiter;
    struct rl_zkm *zkm;
    struct rl_conf *conf;
    char addr[128];
    int exit_code;
};

static void
usage(FILE *f)
{
    fprintf(f, "usage: rl-node --config FILE --name NAME [--listen HOST:PORT] [--test-clock]\n"
               "               [--log-level error|warn|info|debug]\n"
               "\n"
               "Serves the counters of the shards it owns over the ratelimiter wire protocol.\n"
               "  --config FILE      cluster.conf to read (rules, [node NAME] defaults, ZooKeeper)\n"
               "  --name NAME        this node's name: its znode and its [node NAME] section\n"
               "  --listen HOST:PORT address to serve on (default: listen of [node NAME])\n"
               "  --test-clock       accept CLOCK requests that set the node's clock (tests only)\n"
               "  --log-level LEVEL  stderr verbosity (default info)\n"
               "  --help, --version\n");
}

static void
on_server_closed(struct rl_server *s)
{
    (void)s;
}

static void
on_signal(uv_signal_t *h, int signum)
{
    struct node *n = h->data;

    rl_log_info("signal %d: shutting down", signum);
    uv_signal_stop(&n->sigterm);
    uv_signal_stop(&n->sigint);
    uv_close((uv_handle_t *)&n->sigterm, NULL);
    uv_close((uv_handle_t *)&n->sigint, NULL);
    if (n->zkm != NULL) {
        rl_zkm_destroy(n->zkm);
        n->zkm = NULL;
    }
    rl_server_close(&n->server, on_server_closed);
}

int
main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'}, {"name", required_argument, NULL, 'n'},
        {"listen", required_argument, NULL, 'l'}, {"test-clock", no_argument, NULL, 't'},
        {"log-level", required_argument, NULL, 'L'}, {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},      {NULL, 0, NULL, 0}};
    const char *config = NULL, *name = NULL, *listen = NULL;
    struct rl_server_opts opts = {0};
    enum rl_log_level level = RL_LOG_INFO;
    const struct rl_node_conf *nc;
    char err[512];
    char *host = NULL;
    uint16_t port = 0;
    uint64_t memory;
    struct node n;
    const char *phrase;
    int opt, rc;

    memset(&n, 0, sizeof(n));
    while ((opt = getopt_long(argc, argv, "c:n:l:th", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            config = optarg;
            break;
        case 'n':
            name = optarg;
            break;
        case 'l':
            listen = optarg;
            break;
        case 't':
            opts.test_clock = true;
            break;
        case 'L':
            if (rl_log_level_parse(optarg, &level) != 0) {
                fprintf(stderr, "rl-node: --log-level: unknown level \"%s\"\n", optarg);
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("rl-node %s\n", RL_VERSION);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (config == NULL || name == NULL || optind != argc) {
        usage(stderr);
        return 2;
    }
    rl_log_setup(level, name);
    if (rl_conf_load(config, &n.conf, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    nc = rl_conf_node(n.conf, name);
    memory = (nc != NULL && nc->memory != 0) ? nc->memory : RL_CONF_DEFAULT_MEMORY;
    if (listen != NULL) {
        phrase = rl_parse_hostport(listen, &host, &port);
        if (phrase != NULL) {
            fprintf(stderr, "rl-node: --listen: %s\n", phrase);
            rc = 2;
            goto out_conf;
        }
    } else if (nc != NULL) {
        host = strdup(nc->host);
        port = nc->port;
    } else {
        fprintf(stderr, "%s: no [node %s] section and no --listen: nowhere to listen\n", config,
                name);
        rc = 2;
        goto out_conf;
    }
    signal(SIGPIPE, SIG_IGN);
    uv_loop_init(&n.loop);
    rc = rl_limiter_create(&n.limiter, n.conf, memory);
    if (rc != 0) {
        fprintf(stderr, "rl-node: cannot create the limiter: %s\n", strerror(-rc));
        rc = 1;
        goto out_loop;
    }
    opts.name = name;
    opts.host = host;
    opts.port = port;
    rc = rl_server_start(&n.server, &n.loop, n.limiter, &opts);
    if (rc != 0) {
        fprintf(stderr, "rl-node: cannot listen on %s:%u: %s\n", host, port, uv_strerror(rc));
        uv_run(&n.loop, UV_RUN_DEFAULT);
        rc = 1;
        goto out_limiter;
    }
    /* An IPv6 host is bracketed so the address parses back as HOST:PORT. */
    snprintf(n.addr, sizeof(n.addr), strchr(host, ':') != NULL ? "[%s]:%u" : "%s:%u", host,
             port);
    if (n.conf->zookeeper[0] != '\0') {
        rc = rl_zkm_create(&n.zkm, &n.loop, n.conf->zookeeper, n.conf->session_timeout_ms,
                           n.conf->cluster_name, NULL, NULL);
        if (rc == 0) {
            rc = rl_zkm_register(n.zkm, name, n.addr);
        }
        if (rc != 0) {
            fprintf(stderr, "rl-node: cannot use ZooKeeper at %s: %s\n", n.conf->zookeeper,
                    strerror(-rc));
            rc = 1;
            if (n.zkm != NULL) {
                rl_zkm_destroy(n.zkm);
            }
            rl_server_close(&n.server, on_server_closed);
            uv_run(&n.loop, UV_RUN_DEFAULT);
            goto out_limiter;
        }
    }
    uv_signal_init(&n.loop, &n.sigterm);
    uv_signal_init(&n.loop, &n.sigint);
    n.sigterm.data = &n;
    n.sigint.data = &n;
    uv_signal_start(&n.sigterm, on_signal, SIGTERM);
    uv_signal_start(&n.sigint, on_signal, SIGINT);
    rl_log_info("serving on %s (memory cap %llu bytes%s%s)", n.addr, (unsigned long long)memory,
                opts.test_clock ? ", test clock" : "",
                n.conf->zookeeper[0] != '\0' ? ", registered in ZooKeeper" : ", static membership");
    uv_run(&n.loop, UV_RUN_DEFAULT);
    rl_log_info("stopped");
    rc = 0;
out_limiter:
    rl_limiter_destroy(n.limiter);
out_loop:
    if (uv_loop_close(&n.loop) != 0) {
        rl_log_warn("handles left open at exit");
    }
out_conf:
    free(host);
    rl_conf_destroy(n.conf);
    return rc;
}
