/*
 * daemon: the start-up and life of a long-running ratelimiter process (rl-node, rl-router),
 * in one place: the options both take (--config, --listen, --name, --log-level, --log-file,
 * --help, --version) plus the program's own, the log, the config, the listen address, the
 * signals and the loop. A program's main only adds what is its own.
 *
 * Signals: SIGTERM and SIGINT call the program's on_stop (close everything; the loop then
 * ends); SIGHUP reopens the --log-file (for logrotate), reloads the TLS certificate, key
 * and CA files ([cluster] tls_*, tls.h) and calls on_hup; SIGPIPE is
 * ignored (a peer that hangs up mid-write is an error return, not a death). The handlers
 * are in place from the loop's creation (rl_daemon_loop), so a signal that comes during
 * start-up waits for the loop instead of killing the process.
 * Exit statuses: 2 with one line on stderr for a bad command line or config, 1 when the
 * program cannot start (cannot listen...), 0 after --help or --version. With --log-file,
 * stderr is the log file (log.h) but those start-up lines still go to the original stderr
 * (rl_daemon_fail), and into the log file too.
 * Not for the tools (rl-cli, rl-bench, rl-rebalance), which run once.
 */
#ifndef RL_DAEMON_H
#define RL_DAEMON_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "conf.h"
#include "log.h"
#include "metrics.h"

#define RL_DAEMON_RUN (-1) /* rl_daemon_init: go on */

struct rl_daemon;

struct rl_daemon_spec {
    const char *prog;           /* "rl-node" */
    const char *usage;          /* the whole --help text */
    bool name_required;         /* --name must be given (and tags the log lines) */
    const char *log_tag;        /* tag when --name does not tag the log */
    const struct option *extra; /* the program's own long options, {0}-terminated, or NULL */
    /* One of the program's own options; returns 0, or 2 after printing one line. */
    int (*on_option)(struct rl_daemon *d, int opt, const char *arg);
    void (*on_stop)(struct rl_daemon *d); /* SIGTERM, SIGINT */
    void (*on_hup)(struct rl_daemon *d);  /* SIGHUP, after the log file is reopened */
    /* With [cluster] tls_* set: the listener's TLS wants a client certificate the cluster's
     * CA signed (a node's), else one is optional (a router's); tls_client: the process also
     * connects out (a router to its nodes) with the same certificate. */
    bool tls_mutual;
    bool tls_client;
    const char *tls_alpn; /* the ALPN protocol the listeners' TLS selects ("h2"), or NULL */
};

struct rl_daemon {
    const struct rl_daemon_spec *spec;
    void *data; /* the program's */
    const char *config_path;
    const char *listen_opt; /* --listen as given, or NULL */
    const char *name;       /* --name, or NULL */
    const char *log_file;   /* --log-file, or NULL */
    const char *metrics_opt; /* --metrics HOST:PORT as given ("" or "off": none), or NULL */
    struct rl_metrics *metrics; /* the operator's HTTP listener, or NULL */
    enum rl_log_level level;
    struct rl_conf *conf;
    char *host; /* where to listen, from --listen or the config */
    uint16_t port;
    char addr[128]; /* host:port, an IPv6 host bracketed */
    uv_loop_t loop;
    uv_signal_t sigterm, sigint, sighup;
    /* [cluster] tls_*: NULL when off; built at init, reloaded from the files on SIGHUP
     * (new connections take the new certificate, open ones keep theirs) */
    struct rl_tls_ctx *tls_server;
    struct rl_tls_ctx *tls_client;
    bool signals;
    bool stopping;
    int console; /* the original stderr while starting with a --log-file, else -1 */
};

/*
 * Parses the command line, sets up the log and loads the config. Returns RL_DAEMON_RUN to
 * go on, or the status to exit with (0 after --help/--version, 2 after one line on stderr).
 */
int rl_daemon_init(struct rl_daemon *d, const struct rl_daemon_spec *spec, int argc, char **argv,
                   void *data);

/*
 * Settles the listen address: --listen if given, else host:port from the config (host NULL:
 * none, which is an error naming what is missing). A non-loopback address is refused unless
 * authenticated (this process's clients must AUTH) or [cluster] insecure = yes. Returns 0, or
 * 2 after one line.
 */
int rl_daemon_listen(struct rl_daemon *d, const char *host, uint16_t port, const char *missing,
                     bool authenticated);

/*
 * Starts the operator's HTTP listener (metrics.h) at --metrics if given, else at host:port
 * from the config (host NULL: off). Returns 0 (also when off), or 1 after one line when it
 * cannot listen, 2 for a bad --metrics. SIGTERM/SIGINT stop it before on_stop runs.
 */
int rl_daemon_metrics(struct rl_daemon *d, const char *host, uint16_t port,
                      const struct rl_metrics_ops *ops);

/*
 * The process's loop, set up at the first call with the signal handlers (SIGPIPE is
 * ignored from then on).
 */
uv_loop_t *rl_daemon_loop(struct rl_daemon *d);

/*
 * A start-up failure: one line (printf-style, no newline) on the original stderr, and at
 * error in the log file when there is one. The caller then exits 1 or 2.
 */
void rl_daemon_fail(struct rl_daemon *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Runs the loop until everything is closed (start-up is over: rl_daemon_fail is not used). */
void rl_daemon_run(struct rl_daemon *d);

/* Closes the loop (warning when handles are left) and frees the config and the address. */
void rl_daemon_destroy(struct rl_daemon *d);

#endif
