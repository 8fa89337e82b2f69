/*
 * harness_server: the rl-node and rl-router wrappers of the harness (start, stop, restart,
 * in a network namespace or not) and the throwaway TLS CA and certificates of the tests
 * (harness.h), on the processes of harness_proc.c and the files of harness.c.
 */
#define RL_HARNESS_INTERNAL
#include "harness.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int
probe_listen_at(const char *host, int port)
{
    int fd = rl_harness_connect_host(host, port, 200);

    if (fd < 0) {
        return fd;
    }
    close(fd);
    return 0;
}

/* ---- rl-node and rl-router ------------------------------------------------------------- */

static int
server_launch(struct rl_harness_server *s)
{
    const char *argv[12], *full[18];
    char listen_arg[96], workers_arg[16], path[PATH_MAX];
    int n = 0, rc;

    argv[n++] = s->program;
    argv[n++] = "--config";
    argv[n++] = s->config;
    if (s->name[0] != '\0') {
        argv[n++] = "--name";
        argv[n++] = s->name;
    }
    if (s->port > 0) {
        if (s->host.addr[0] == '\0') {
            snprintf(listen_arg, sizeof(listen_arg), "127.0.0.1:%d", s->port);
        } else if (s->host.any) {
            snprintf(listen_arg, sizeof(listen_arg),
                     strchr(s->host.addr, ':') != NULL ? "[::]:%d" : "0.0.0.0:%d", s->port);
        } else {
            snprintf(listen_arg, sizeof(listen_arg),
                     strchr(s->host.addr, ':') != NULL ? "[%s]:%d" : "%s:%d", s->host.addr,
                     s->port);
        }
        argv[n++] = "--listen";
        argv[n++] = listen_arg;
    }
    if ((s->flags & RL_HARNESS_TEST_CLOCK) != 0) {
        argv[n++] = "--test-clock";
    }
    if (s->workers > 0) {
        snprintf(workers_arg, sizeof(workers_arg), "%d", s->workers);
        argv[n++] = "--workers";
        argv[n++] = workers_arg;
    }
    argv[n] = NULL;

    if (rl_harness_netns_argv(&s->host, argv, full, path) == NULL) {
        return -ENOENT;
    }
    rc = rl_harness_spawn(full, s->log_path, &s->pid);
    if (rc < 0) {
        s->pid = 0;
        return rc;
    }
    if (s->port <= 0) {
        return 0;
    }
    rc = rl_harness_wait_ready_at(s->pid, probe_listen_at, s->host.addr, s->port,
                                  RL_HARNESS_START_TIMEOUT_MS, &s->status);
    if (rc == 0) {
        return 0;
    }
    if (rc == -ETIMEDOUT) {
        rl_harness_stop(s->pid, SIGKILL, 0, &s->status);
    }
    s->pid = 0;
    fprintf(stderr, "harness: %s %s on port %d did not start: %s\n", s->program, s->name, s->port,
            rc == -ECHILD ? "it exited" : strerror(-rc));
    rl_harness_print_log(s->log_path, 40);
    return rc;
}

static int
server_init(struct rl_harness_server *s, const char *program, const char *config, const char *name,
            int port, unsigned flags)
{
    int rc;

    rl_harness_first_of_cluster();
    memset(s, 0, sizeof(*s));
    snprintf(s->program, sizeof(s->program), "%s", program);
    if ((size_t)snprintf(s->config, sizeof(s->config), "%s", config) >= sizeof(s->config) ||
        (size_t)snprintf(s->name, sizeof(s->name), "%s", name) >= sizeof(s->name)) {
        return -ENAMETOOLONG;
    }
    s->port = port;
    s->flags = flags;
    if (name[0] != '\0') {
        rc = rl_harness_tmppath(s->log_path, sizeof(s->log_path), "node-%s.log", name);
    } else {
        rc = rl_harness_tmppath(s->log_path, sizeof(s->log_path), "router-%d.log", port);
    }
    return rc;
}

int
rl_harness_node_start(struct rl_harness_server *s, const char *config, const char *name, int port,
                      unsigned flags)
{
    int rc;

    if (name == NULL || name[0] == '\0') {
        return -EINVAL;
    }
    rc = server_init(s, "rl-node", config, name, port, flags);
    return rc < 0 ? rc : server_launch(s);
}

int
rl_harness_router_start(struct rl_harness_server *s, const char *config, int port)
{
    const char *env = getenv("RL_TEST_ROUTER_WORKERS");
    int n = env != NULL && atoi(env) > 0 ? atoi(env) : RL_HARNESS_ROUTER_WORKERS;

    return rl_harness_router_start_workers(s, config, port, n);
}

int
rl_harness_router_start_workers(struct rl_harness_server *s, const char *config, int port,
                                int workers)
{
    int rc = server_init(s, "rl-router", config, "", port, 0);

    if (rc < 0) {
        return rc;
    }
    s->workers = workers;
    return server_launch(s);
}

int
rl_harness_node_start_at(struct rl_harness_server *s, const struct rl_harness_host *host,
                         const char *config, const char *name, int port, unsigned flags)
{
    int rc;

    if (name == NULL || name[0] == '\0') {
        return -EINVAL;
    }
    rc = server_init(s, "rl-node", config, name, port, flags);
    if (rc < 0) {
        return rc;
    }
    s->host = *host;
    return server_launch(s);
}

int
rl_harness_router_start_at(struct rl_harness_server *s, const struct rl_harness_host *host,
                           const char *config, int port, int workers)
{
    int rc = server_init(s, "rl-router", config, "", port, 0);

    if (rc < 0) {
        return rc;
    }
    s->host = *host;
    s->workers = workers;
    return server_launch(s);
}

int
rl_harness_server_stop(struct rl_harness_server *s, int sig, int timeout_ms)
{
    int rc;

    if (s->pid <= 0) {
        return 0;
    }
    rc = rl_harness_stop(s->pid, sig, timeout_ms, &s->status);
    s->pid = 0;
    /* Reaped already, through its raw pid (rl_harness_kill9()): it is not running. */
    return rc == -ECHILD ? 0 : rc;
}

int
rl_harness_server_restart(struct rl_harness_server *s)
{
    int rc = rl_harness_server_stop(s, SIGTERM, RL_HARNESS_STOP_TIMEOUT_MS);

    if (rc < 0 && rc != -ETIMEDOUT) {
        return rc;
    }
    return server_launch(s);
}

/* ---- TLS ------------------------------------------------------------------------------- */

static int
tls_openssl(const char *const argv[])
{
    char out[8192];
    int rc = rl_harness_run(argv, out, sizeof(out), 20000);

    if (rc != 0) {
        fprintf(stderr, "harness: openssl %s: %d: %s\n", argv[1], rc, out);
    }
    return rc;
}

int
rl_harness_tls_ca(const char *dir, const char *name)
{
    char key[PATH_MAX], pem[PATH_MAX], subj[128];
    const char *argv[] = {"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                          "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", pem,
                          "-days", "2", "-subj", subj, NULL};

    snprintf(key, sizeof(key), "%s/%s.key", dir, name);
    snprintf(pem, sizeof(pem), "%s/%s.pem", dir, name);
    snprintf(subj, sizeof(subj), "/CN=%s", name);
    return tls_openssl(argv);
}

int
rl_harness_tls_cert(const char *dir, const char *name, const char *ca)
{
    char key[PATH_MAX], pem[PATH_MAX], csr[PATH_MAX], cakey[PATH_MAX], capem[PATH_MAX];
    char ext[PATH_MAX], subj[128];
    const char *req[] = {"openssl", "req", "-newkey", "ec", "-pkeyopt",
                         "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", csr,
                         "-subj", subj, NULL};
    const char *sign[] = {"openssl", "x509", "-req", "-in", csr, "-CA", capem, "-CAkey", cakey,
                          "-CAcreateserial", "-out", pem, "-days", "2", "-extfile", ext, NULL};
    int rc;

    snprintf(key, sizeof(key), "%s/%s.key", dir, name);
    snprintf(pem, sizeof(pem), "%s/%s.pem", dir, name);
    snprintf(csr, sizeof(csr), "%s/%s.csr", dir, name);
    snprintf(cakey, sizeof(cakey), "%s/%s.key", dir, ca);
    snprintf(capem, sizeof(capem), "%s/%s.pem", dir, ca);
    snprintf(ext, sizeof(ext), "%s/%s.ext", dir, name);
    snprintf(subj, sizeof(subj), "/CN=%s", name);
    rc = rl_harness_write_file(ext, "subjectAltName=IP:127.0.0.1\n");
    if (rc == 0) {
        rc = tls_openssl(req);
    }
    if (rc == 0) {
        rc = tls_openssl(sign);
    }
    if (rc == 0 && chmod(key, 0600) != 0) {
        rc = -errno;
    }
    return rc;
}
