/*
 * daemon: the shared start-up of rl-node and rl-router (daemon.h).
 */
#include "daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parse.h"
#include "tls.h"

enum { OPT_LOG_LEVEL = 0x1000, OPT_LOG_FILE, OPT_VERSION, OPT_METRICS };

static const struct option common_options[] = {
    {"config", required_argument, NULL, 'c'},
    {"listen", required_argument, NULL, 'l'},
    {"name", required_argument, NULL, 'n'},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"log-file", required_argument, NULL, OPT_LOG_FILE},
    {"metrics", required_argument, NULL, OPT_METRICS},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
};

#define COMMON_COUNT (sizeof(common_options) / sizeof(common_options[0]))
#define EXTRA_MAX 16

void
rl_daemon_fail(struct rl_daemon *d, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    size_t n;

    /* One byte is left for the newline. */
    va_start(ap, fmt);
    n = rl_log_vformat(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    /* With a log file in place of stderr: the file has it at error, the operator on the
     * original stderr. Without one (or when that could not be kept), stderr only. */
    if (d->console >= 0) {
        rl_log_error("%.*s", (int)n, line);
    }
    line[n++] = '\n';
    ssize_t w = write(d->console >= 0 ? d->console : STDERR_FILENO, line, n);
    (void)w;
}

static void
console_close(struct rl_daemon *d)
{
    if (d->console >= 0) {
        close(d->console);
        d->console = -1;
    }
}

int
rl_daemon_init(struct rl_daemon *d, const struct rl_daemon_spec *spec, int argc, char **argv,
               void *data)
{
    struct option longopts[COMMON_COUNT + EXTRA_MAX + 1];
    size_t n = 0;
    char err[512];
    int opt, rc;

    memset(d, 0, sizeof(*d));
    d->spec = spec;
    d->data = data;
    d->level = RL_LOG_INFO;
    d->console = -1;
    memcpy(longopts, common_options, sizeof(common_options));
    n = COMMON_COUNT;
    for (size_t i = 0; spec->extra != NULL && spec->extra[i].name != NULL && i < EXTRA_MAX; i++) {
        longopts[n++] = spec->extra[i];
    }
    memset(&longopts[n], 0, sizeof(longopts[n]));
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":c:l:n:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            d->config_path = optarg;
            break;
        case 'l':
            d->listen_opt = optarg;
            break;
        case 'n':
            d->name = optarg;
            break;
        case OPT_LOG_LEVEL:
            if (rl_log_level_parse(optarg, &d->level) != 0) {
                rl_daemon_fail(d, "%s: --log-level: unknown level \"%s\" (error, warn, info, debug)",
                               spec->prog, optarg);
                return 2;
            }
            break;
        case OPT_LOG_FILE:
            d->log_file = optarg;
            break;
        case OPT_METRICS:
            d->metrics_opt = optarg;
            break;
        case 'h':
            fputs(spec->usage, stdout);
            return 0;
        case OPT_VERSION:
            printf("%s %s\n", spec->prog, RL_VERSION);
            return 0;
        case ':':
            rl_daemon_fail(d, "%s: %s needs a value (see --help)", spec->prog, argv[optind - 1]);
            return 2;
        case '?':
            rl_daemon_fail(d, "%s: unknown option \"%s\" (see --help)", spec->prog,
                           argv[optind - 1]);
            return 2;
        default:
            rc = spec->on_option != NULL ? spec->on_option(d, opt, optarg) : 2;
            if (rc != 0) {
                return rc;
            }
            break;
        }
    }
    if (optind != argc) {
        rl_daemon_fail(d, "%s: unexpected argument \"%s\" (see --help)", spec->prog, argv[optind]);
        return 2;
    }
    if (d->config_path == NULL) {
        rl_daemon_fail(d, "%s: --config FILE is required (see --help)", spec->prog);
        return 2;
    }
    if (spec->name_required && d->name == NULL) {
        rl_daemon_fail(d, "%s: --name NAME is required (see --help)", spec->prog);
        return 2;
    }
    if (spec->name_required && !rl_conf_node_name_ok(d->name)) {
        rl_daemon_fail(d,
                       "%s: --name: not a node name (1 to 63 letters, digits, '.', '_' or '-'; "
                       "not \".\" or \"..\")",
                       spec->prog);
        return 2;
    }
    rl_log_setup(d->level, spec->name_required ? d->name : spec->log_tag);
    if (d->log_file != NULL) {
        /* Keep the original stderr for the start-up failures (rl_daemon_fail). */
        d->console = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
        if (rl_log_open(d->log_file) != 0) {
            rc = errno;
            console_close(d);
            rl_daemon_fail(d, "%s: --log-file: cannot open \"%s\": %s", spec->prog, d->log_file,
                           strerror(rc));
            return 2;
        }
    }
    if (rl_conf_load(d->config_path, &d->conf, err, sizeof(err)) != 0) {
        rl_daemon_fail(d, "%s", err);
        return 2;
    }
    if (d->conf->tls_cert_file[0] != '\0') {
        const struct rl_conf *c = d->conf;

        if (rl_tls_ctx_new(&d->tls_server,
                           spec->tls_mutual ? RL_TLS_SERVER_MUTUAL : RL_TLS_SERVER,
                           c->tls_cert_file, c->tls_key_file, c->tls_ca_file, spec->tls_alpn,
                           err, sizeof(err)) != 0 ||
            (spec->tls_client &&
             rl_tls_ctx_new(&d->tls_client, RL_TLS_CLIENT, c->tls_cert_file, c->tls_key_file,
                            c->tls_ca_file, NULL, err, sizeof(err)) != 0)) {
            rl_daemon_fail(d, "%s: %s: %s", spec->prog, d->config_path, err);
            return 2;
        }
    }
    rl_daemon_loop(d); /* the signals are the loop's from now on */
    return RL_DAEMON_RUN;
}

int
rl_daemon_listen(struct rl_daemon *d, const char *host, uint16_t port, const char *missing,
                 bool authenticated)
{
    const char *why;

    if (d->listen_opt != NULL) {
        why = rl_parse_hostport(d->listen_opt, &d->host, &d->port);
        if (why != NULL) {
            rl_daemon_fail(d, "%s: --listen: \"%s\" %s", d->spec->prog, d->listen_opt, why);
            return 2;
        }
    } else if (host != NULL) {
        d->host = strdup(host);
        d->port = port;
        if (d->host == NULL) {
            rl_daemon_fail(d, "%s: out of memory", d->spec->prog);
            return 2;
        }
    } else {
        rl_daemon_fail(d, "%s: %s and no --listen: nowhere to listen", d->config_path, missing);
        return 2;
    }
    rl_format_hostport(d->addr, sizeof(d->addr), d->host, d->port);
    if (!rl_parse_is_loopback(d->host) && !d->conf->insecure && !authenticated) {
        rl_daemon_fail(d,
                       "%s: %s is not a loopback address, and nothing authenticates its clients "
                       "(a router needs [client NAME] sections, a node [cluster] secret_file): "
                       "anyone who reaches it could spend any user's quota. Set [cluster] "
                       "insecure = yes to serve it anyway (docs/OPERATIONS.md, \"Security\")",
                       d->spec->prog, d->addr);
        return 2;
    }
    return 0;
}

/* SIGHUP: the TLS files read again; connections made from now on use them. */
static void
daemon_tls_reload(struct rl_daemon *d)
{
    char why[512];

    if (d->tls_server == NULL) {
        return;
    }
    if (rl_tls_ctx_reload(d->tls_server, why, sizeof(why)) != 0 ||
        (d->tls_client != NULL && rl_tls_ctx_reload(d->tls_client, why, sizeof(why)) != 0)) {
        rl_log_error("SIGHUP: TLS files not reloaded: %s; the certificate in force stays", why);
        return;
    }
    rl_log_info("SIGHUP: TLS certificate, key and CA reloaded from %s, %s, %s (new connections "
                "use them; open ones keep theirs)",
                d->conf->tls_cert_file, d->conf->tls_key_file, d->conf->tls_ca_file);
}

static void
daemon_signal(uv_signal_t *h, int signum)
{
    struct rl_daemon *d = h->data;

    if (signum == SIGHUP) {
        if (d->log_file != NULL) {
            if (rl_log_reopen() != 0) {
                rl_log_error("SIGHUP: cannot reopen the log file %s: %s; still writing to the "
                             "old one",
                             d->log_file, strerror(errno));
            } else {
                rl_log_info("SIGHUP: log file %s reopened", d->log_file);
            }
        } else if (d->spec->on_hup == NULL) {
            rl_log_info("SIGHUP: nothing to reopen (no --log-file); going on");
        }
        daemon_tls_reload(d);
        if (d->spec->on_hup != NULL) {
            d->spec->on_hup(d);
        }
        return;
    }
    if (d->stopping) {
        return;
    }
    d->stopping = true;
    rl_log_info("signal %d: shutting down", signum);
    rl_metrics_stop(d->metrics);
    d->metrics = NULL;
    uv_close((uv_handle_t *)&d->sigterm, NULL);
    uv_close((uv_handle_t *)&d->sigint, NULL);
    uv_close((uv_handle_t *)&d->sighup, NULL);
    d->signals = false;
    d->spec->on_stop(d);
}

void
rl_daemon_run(struct rl_daemon *d)
{
    rl_daemon_loop(d);
    console_close(d);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    rl_log_info("stopped");
}

int
rl_daemon_metrics(struct rl_daemon *d, const char *host, uint16_t port,
                  const struct rl_metrics_ops *ops)
{
    char *h = NULL;
    char err[256], addr[160];
    const char *why;
    int rc;

    if (d->metrics_opt != NULL) {
        if (d->metrics_opt[0] == '\0' || strcmp(d->metrics_opt, "off") == 0) {
            return 0;
        }
        why = rl_parse_hostport(d->metrics_opt, &h, &port);
        if (why != NULL) {
            rl_daemon_fail(d, "%s: --metrics: \"%s\" %s", d->spec->prog, d->metrics_opt, why);
            return 2;
        }
        host = h;
    }
    if (host == NULL) {
        return 0;
    }
    rl_format_hostport(addr, sizeof(addr), host, port);
    rc = rl_metrics_start(&d->metrics, rl_daemon_loop(d), host, port, ops, err, sizeof(err));
    free(h);
    if (rc != 0) {
        rl_daemon_fail(d, "%s: %s", d->spec->prog, err);
        return 1;
    }
    if (port == 0) {
        char *colon = strrchr(addr, ':');

        if (colon != NULL) {
            snprintf(colon + 1, sizeof(addr) - (size_t)(colon + 1 - addr), "%u",
                     rl_metrics_port(d->metrics));
        }
    }
    rl_log_info("metrics on http://%s/metrics (also /healthz, /readyz)", addr);
    return 0;
}

void
rl_daemon_destroy(struct rl_daemon *d)
{
    rl_metrics_stop(d->metrics);
    d->metrics = NULL;
    if (d->loop.data == d) {
        if (d->signals) {
            uv_close((uv_handle_t *)&d->sigterm, NULL);
            uv_close((uv_handle_t *)&d->sigint, NULL);
            uv_close((uv_handle_t *)&d->sighup, NULL);
            d->signals = false;
        }
        /* Whatever a failed start closed finishes closing. */
        uv_run(&d->loop, UV_RUN_DEFAULT);
        if (uv_loop_close(&d->loop) != 0) {
            rl_log_warn("handles left open at exit");
        }
    }
    console_close(d);
    free(d->host);
    d->host = NULL;
    rl_conf_destroy(d->conf);
    d->conf = NULL;
    rl_tls_ctx_free(d->tls_server);
    rl_tls_ctx_free(d->tls_client);
    d->tls_server = d->tls_client = NULL;
}

/*
 * The loop is set up by the first use, with the signal handlers: from then on a signal is
 * taken by the loop (and handled when it runs) rather than by its default action.
 */
uv_loop_t *
rl_daemon_loop(struct rl_daemon *d)
{
    if (d->loop.data != d) {
        signal(SIGPIPE, SIG_IGN);
        uv_loop_init(&d->loop);
        d->loop.data = d;
        uv_signal_init(&d->loop, &d->sigterm);
        uv_signal_init(&d->loop, &d->sigint);
        uv_signal_init(&d->loop, &d->sighup);
        d->sigterm.data = d->sigint.data = d->sighup.data = d;
        uv_signal_start(&d->sigterm, daemon_signal, SIGTERM);
        uv_signal_start(&d->sigint, daemon_signal, SIGINT);
        uv_signal_start(&d->sighup, daemon_signal, SIGHUP);
        d->signals = true;
    }
    return &d->loop;
}
