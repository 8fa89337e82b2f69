/*
 * check_daemon: the life of the rl-node and rl-router processes (common/daemon.c), run for
 * real: an rl-node whose ZooKeeper cannot be reached says so at warn and keeps saying so,
 * never claims to be registered, and reports registered=0 in STATS; SIGHUP reopens the
 * --log-file of a node and of a router (and the router's request log) without losing a
 * counter; bad command lines and configs exit 2 with one line, on the terminal even with a
 * --log-file; a port that cannot be listened on exits 1.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reqclient.h"
#include "harness.h"
#include "rltest.h"
#include "wire.h"

static char conf_path[PATH_MAX];
static int node_port, router_port;

/* A config; zk_port > 0 points `zookeeper` at a port where nothing listens; reqlog (or
 * NULL) is the router's request log. */
static void
write_conf(int zk_port, const char *reqlog)
{
    char zk[64] = "", rl[PATH_MAX + 32] = "";

    node_port = rl_harness_free_port();
    router_port = rl_harness_free_port();
    if (zk_port > 0) {
        snprintf(zk, sizeof(zk), "[cluster]\nzookeeper = 127.0.0.1:%d\n", zk_port);
    }
    if (reqlog != NULL) {
        snprintf(rl, sizeof(rl), "request_log = %s\n", reqlog);
    }
    ck_assert_int_eq(rl_harness_tmppath(conf_path, sizeof(conf_path), "daemon.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf_path,
                                           "%s[router]\nlisten = 127.0.0.1:%d\n%s"
                                           "[node a]\nlisten = 127.0.0.1:%d\n"
                                           "[service web]\nlimit = fixed_window 3 per 1h\n",
                                           zk, router_port, rl, node_port),
                     0);
}

/* Lines of path holding a (and b, unless NULL); -1 when it cannot be read. */
static int
count_lines(const char *path, const char *a, const char *b)
{
    static char buf[1 << 20];
    int n = 0;

    if (rl_harness_read_file(path, buf, sizeof(buf)) < 0) {
        return -1;
    }
    for (char *line = strtok(buf, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        n += strstr(line, a) != NULL && (b == NULL || strstr(line, b) != NULL);
    }
    return n;
}

/* The times of day (ms, from the "HH:MM:SS.mmm" prefix) of the lines of path holding a, at
 * most max; returns how many. */
static int
line_times(const char *path, const char *a, long *ms, int max)
{
    static char buf[1 << 20];
    int n = 0, h, m, sec, milli;

    ck_assert_int_ge(rl_harness_read_file(path, buf, sizeof(buf)), 0);
    for (char *line = strtok(buf, "\n"); line != NULL && n < max; line = strtok(NULL, "\n")) {
        if (strstr(line, a) != NULL) {
            ck_assert_int_eq(sscanf(line, "%d:%d:%d.%d", &h, &m, &sec, &milli), 4);
            ms[n++] = ((h * 60L + m) * 60 + sec) * 1000 + milli;
        }
    }
    return n;
}

/* Polls path until it has at least want lines holding a (and b); returns the count. */
static int
wait_lines(const char *path, const char *a, const char *b, int want, int timeout_ms)
{
    int n = count_lines(path, a, b);

    for (int waited = 0; n < want && waited < timeout_ms; waited += 100) {
        usleep(100000);
        n = count_lines(path, a, b);
    }
    return n;
}

/* Starts argv, waits for port (0: none) and returns the pid. */
static pid_t
start(const char *const argv[], int port)
{
    char log[PATH_MAX];
    pid_t pid;

    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "%s-%d.out", argv[0], port), 0);
    ck_assert_int_eq(rl_harness_spawn(argv, log, &pid), 0);
    if (port > 0) {
        ck_assert_int_eq(rl_harness_wait_port("127.0.0.1", port, 15000), 0);
    }
    return pid;
}

static struct rl_wire_check_reply
check(int port, const char *user)
{
    struct rl_client *c;
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)port, 5000), 0);
    ck_assert_int_eq(rl_client_check(c, "web", user, NULL, 1, &rep, 5000), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
    rl_client_destroy(c);
    return rep.check;
}

/*
 * An rl-node whose ZooKeeper does not answer: at the default log level it says at warn,
 * again and again but not every second, that it is not registered; no line says it is;
 * STATS says registered=0 and the session is connecting.
 */
START_TEST(test_node_says_it_is_not_registered)
{
    char log[PATH_MAX];
    struct rl_client *c;
    struct rl_wire_reply rep;
    long at[8];
    pid_t pid;
    int n;

    write_conf(rl_harness_free_port(), NULL);
    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "node.log"), 0);
    {
        const char *argv[] = {"rl-node", "--config", conf_path, "--name", "a", "--log-file",
                              log, NULL};

        pid = start(argv, node_port);
    }
    /* First warning after 3 s, then every 10 s: two within 16 s, 5 to 11 s apart. */
    n = wait_lines(log, "warn: not registered in ZooKeeper at 127.0.0.1:", "routers", 2, 16000);
    ck_assert_msg(n >= 2, "%d \"not registered\" warnings in 16 s", n);
    n = line_times(log, "not registered in ZooKeeper", at, 8);
    for (int i = 1; i < n; i++) {
        long gap = (at[i] - at[i - 1] + 86400000L) % 86400000L;

        ck_assert_msg(gap >= 5000 && gap <= 11000, "warnings %ld ms apart", gap);
    }
    ck_assert_int_eq(count_lines(log, "serving on", "not registered yet"), 1);
    ck_assert_int_eq(count_lines(log, "info: registered in ZooKeeper", NULL), 0);
    ck_assert_int_eq(count_lines(log, "zk: registered", NULL), 0);
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)node_port, 5000), 0);
    ck_assert_int_eq(rl_client_stats(c, &rep, 5000), 0);
    ck_assert_int_eq(rl_client_stat(&rep, "registered", -1), 0);
    ck_assert_int_eq(rl_client_stat(&rep, "zk_state", -9), 1); /* RL_ZKM_CONNECTING */
    rl_client_destroy(c);
    ck_assert_int_eq(rl_harness_stop(pid, SIGTERM, 10000, NULL), 0);
}
END_TEST

/* Moves path aside to path.1 (the logrotate way); the moved name is left in moved. */
static void
move_aside(const char *path, char *moved, size_t len)
{
    snprintf(moved, len, "%s.1", path);
    ck_assert_int_eq(rename(path, moved), 0);
}

/* SIGHUP to a process whose log file was moved aside: it lives on and logs to a new file. */
static void
hup_and_check(pid_t pid, const char *log)
{
    char moved[PATH_MAX + 8];
    int status = 0, n;

    move_aside(log, moved, sizeof(moved));
    ck_assert_int_eq(kill(pid, SIGHUP), 0);
    n = wait_lines(log, "SIGHUP", "reopened", 1, 5000);
    ck_assert_msg(rl_harness_wait(pid, 0, &status) == -ETIMEDOUT, "died on SIGHUP: status 0x%x",
                  status);
    ck_assert_msg(n == 1, "%d \"reopened\" lines in the new log file", n);
    ck_assert_int_eq(count_lines(moved, "SIGHUP", NULL), 0);
    ck_assert_int_ge(count_lines(moved, "serving on", NULL), 1);
}

/* A config with a request log, then rl-node and rl-router with --log-file, their three
 * files named PREFIXnode.log, PREFIXrouter.log and PREFIXrequests.log in the tmpdir. */
static void
start_logged(const char *prefix, char *nlog, char *rlog, char *reqlog, pid_t *node,
             pid_t *router)
{
    ck_assert_int_eq(rl_harness_tmppath(nlog, PATH_MAX, "%snode.log", prefix), 0);
    ck_assert_int_eq(rl_harness_tmppath(rlog, PATH_MAX, "%srouter.log", prefix), 0);
    ck_assert_int_eq(rl_harness_tmppath(reqlog, PATH_MAX, "%srequests.log", prefix), 0);
    write_conf(0, reqlog);
    {
        const char *nargv[] = {"rl-node", "--config", conf_path, "--name", "a", "--log-file",
                               nlog, NULL};
        const char *rargv[] = {"rl-router", "--config", conf_path, "--log-file", rlog, NULL};

        *node = start(nargv, node_port);
        *router = start(rargv, router_port);
    }
}

/*
 * SIGHUP with the log files moved aside: rl-node and rl-router both live on, write to new
 * log files (and the router to a new request log), and alice's counter is what it was.
 */
START_TEST(test_sighup_reopens_logs_and_keeps_counters)
{
    char nlog[PATH_MAX], rlog[PATH_MAX], reqlog[PATH_MAX], moved[PATH_MAX + 8];
    struct rl_wire_check_reply r;
    pid_t node, router;

    start_logged("", nlog, rlog, reqlog, &node, &router);
    for (int i = 0; i < 3; i++) {
        r = check(router_port, "alice");
        ck_assert_uint_eq(r.code, RL_WIRE_ALLOWED);
        ck_assert_uint_eq(r.remaining, 2u - (unsigned)i);
    }
    ck_assert_int_eq(wait_lines(reqlog, "alice", NULL, 3, 5000), 3);
    hup_and_check(node, nlog);
    move_aside(reqlog, moved, sizeof(moved));
    hup_and_check(router, rlog);
    ck_assert_int_eq(wait_lines(rlog, "SIGHUP: reopening the request log", NULL, 1, 5000), 1);
    /* The counter survived: alice is still limited, through the node and the router. */
    ck_assert_uint_eq(check(node_port, "alice").code, RL_WIRE_LIMITED);
    ck_assert_uint_eq(check(router_port, "alice").code, RL_WIRE_LIMITED);
    ck_assert_int_eq(wait_lines(reqlog, "alice", NULL, 1, 5000), 1);
    ck_assert_int_eq(count_lines(moved, "alice", NULL), 3);
    ck_assert_int_eq(rl_harness_stop(router, SIGTERM, 10000, NULL), 0);
    ck_assert_int_eq(rl_harness_stop(node, SIGTERM, 10000, NULL), 0);
    ck_assert_int_ge(count_lines(nlog, "stopped", NULL), 1);
    ck_assert_int_ge(count_lines(rlog, "stopped", NULL), 1);
}
END_TEST

/* Runs argv to its end: asserts its exit status and that it printed exactly one line,
 * holding want. */
static void
run_one_line(const char *const argv[], int status_want, const char *want)
{
    char log[PATH_MAX], out[4096];
    static int seq;
    int status;
    pid_t pid;

    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "run-%d.out", seq++), 0);
    ck_assert_int_eq(rl_harness_spawn(argv, log, &pid), 0);
    ck_assert_int_eq(rl_harness_wait(pid, 10000, &status), 0);
    ck_assert(WIFEXITED(status));
    ck_assert_int_ge(rl_harness_read_file(log, out, sizeof(out)), 0);
    ck_assert_msg(WEXITSTATUS(status) == status_want, "%s: exit %d, want %d: %s", argv[0],
                  WEXITSTATUS(status), status_want, out);
    ck_assert_msg(strstr(out, want) != NULL, "%s: \"%s\" not in: %s", argv[0], want, out);
    ck_assert_msg(strchr(out, '\n') != NULL && strchr(out, '\n')[1] == '\0',
                  "%s: not one line: %s", argv[0], out);
}

/* Binds and listens on 127.0.0.1:port; returns the fd. */
static int
hold_port(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(fd, 1), 0);
    return fd;
}

/* Bad command lines and configs: exit 2 with one line; a busy port: exit 1 with one line.
 * With --log-file the line still reaches the terminal, and the log file has it too. */
START_TEST(test_bad_command_lines_exit_2)
{
    char bad[PATH_MAX], log[PATH_MAX], listen[32];
    int fd;

    write_conf(0, NULL);
    {
        const char *argv[] = {"rl-node", "--bogus", NULL};

        run_one_line(argv, 2, "rl-node: unknown option \"--bogus\"");
    }
    {
        const char *argv[] = {"rl-router", "--config", conf_path, "--bogus=1", NULL};

        run_one_line(argv, 2, "rl-router: unknown option \"--bogus=1\"");
    }
    {
        const char *argv[] = {"rl-router", "--config", conf_path, "--workers", "0", NULL};

        run_one_line(argv, 2, "rl-router: --workers: \"0\" is not a number in 1..64");
    }
    {
        const char *argv[] = {"rl-node", "--config", conf_path, "--name", "a", "--listen",
                              "nowhere", NULL};

        run_one_line(argv, 2, "--listen: \"nowhere\" is not HOST:PORT");
    }
    {
        const char *argv[] = {"rl-router", "--config", conf_path, "--listen", "127.0.0.1:0",
                              NULL};

        run_one_line(argv, 2, "rl-router: --listen: \"127.0.0.1:0\"");
    }
    {
        const char *argv[] = {"rl-node", "--config", conf_path, NULL};

        run_one_line(argv, 2, "--name NAME is required");
    }
    {
        const char *argv[] = {"rl-router", "--config", conf_path, "--log-file", NULL};

        run_one_line(argv, 2, "--log-file needs a value");
    }
    {
        const char *argv[] = {"rl-router", "--config", conf_path, "--log-level", "loud", NULL};

        run_one_line(argv, 2, "unknown level \"loud\"");
    }
    {
        const char *argv[] = {"rl-node", "--config", conf_path, "--name", "zz", NULL};

        run_one_line(argv, 2, "nowhere to listen");
    }
    /* A wildcard listen is fine to bind, never an address to publish in ZooKeeper. */
    ck_assert_int_eq(rl_harness_tmppath(bad, sizeof(bad), "zk.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(bad, "[cluster]\nzookeeper = 127.0.0.1:1\n"
                                                "insecure = yes\n"
                                                "[node a]\nlisten = 127.0.0.1:7401\n"),
                     0);
    {
        const char *argv[] = {"rl-node", "--config", bad, "--name", "a", "--listen",
                              "0.0.0.0:7401", NULL};

        run_one_line(argv, 2, "0.0.0.0:7401 is a wildcard address, which routers cannot dial: "
                              "set advertise = HOST:PORT in [node a]");
    }
    /* With nothing to authenticate clients, only loopback is served unless insecure = yes. */
    ck_assert_int_eq(rl_harness_write_file(bad, "[node a]\nlisten = 127.0.0.1:7401\n"), 0);
    {
        const char *argv[] = {"rl-node", "--config", bad, "--name", "a", "--listen",
                              "0.0.0.0:7401", NULL};

        run_one_line(argv, 2, "rl-node: 0.0.0.0:7401 is not a loopback address, and nothing "
                              "authenticates its clients");
    }
    {
        const char *argv[] = {"rl-router", "--config", bad, "--listen", "[::]:7400", NULL};

        run_one_line(argv, 2, "rl-router: [::]:7400 is not a loopback address");
    }
    ck_assert_int_eq(rl_harness_write_file(bad, "[node a]\nlisten = 0.0.0.0:7401\n"), 0);
    {
        const char *argv[] = {"rl-node", "--config", bad, "--name", "a", NULL};

        run_one_line(argv, 2, "[node a] listens on the wildcard address 0.0.0.0: add advertise");
    }
    ck_assert_int_eq(rl_harness_tmppath(bad, sizeof(bad), "bad.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(bad, "[cluster]\nshards = 0\n"), 0);
    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "bad.log"), 0);
    {
        const char *argv[] = {"rl-node", "--config", bad, "--name", "a", "--log-file", log, NULL};

        run_one_line(argv, 2, "bad.conf:2: shards: \"0\" is out of range");
        ck_assert_int_eq(count_lines(log, "error: ", "bad.conf:2: shards"), 1);
    }
    fd = hold_port(node_port);
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", node_port);
    {
        const char *argv[] = {"rl-node", "--config", conf_path, "--name", "a", "--listen",
                              listen, "--log-file", log, NULL};

        run_one_line(argv, 1, "rl-node: cannot listen on");
    }
    /* an events log that cannot be opened says so, not that the address cannot be listened on */
    ck_assert_int_eq(rl_harness_write_file(bad, "[cluster]\nevents_log = /nonexistent/dir/ev.log\n"
                                                "[node a]\nlisten = 127.0.0.1:%d\n",
                                           node_port),
                     0);
    {
        const char *argv[] = {"rl-node", "--config", bad, "--name", "a", NULL};

        run_one_line(argv, 1, "rl-node: cannot open the events log /nonexistent/dir/ev.log "
                              "([cluster] events_log): No such file or directory");
    }
    {
        const char *argv[] = {"rl-router", "--config", conf_path, "--listen", listen, NULL};

        run_one_line(argv, 1, "rl-router: cannot serve on");
    }
    close(fd);
}
END_TEST

/* [cluster] envoy_config is loaded at start: a bad file stops the router with FILE:LINE;
 * [router] rls without it is refused. */
START_TEST(test_envoy_config_errors_stop_the_router)
{
    char conf[PATH_MAX], yaml[PATH_MAX], want[PATH_MAX + 64];
    int port = rl_harness_free_port();

    ck_assert_int_eq(rl_harness_tmppath(yaml, sizeof(yaml), "edge.yaml"), 0);
    ck_assert_int_eq(rl_harness_write_file(yaml, "domain: edge\n"
                                                 "descriptors:\n"
                                                 "  - key: path\n"
                                                 "    rate_limit:\n"
                                                 "      unit: fortnight\n"
                                                 "      requests_per_unit: 5\n"),
                     0);
    ck_assert_int_eq(rl_harness_tmppath(conf, sizeof(conf), "envoy.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf, "[cluster]\nenvoy_config = %s\n"
                                                 "[router]\nlisten = 127.0.0.1:%d\n",
                                           yaml, port),
                     0);
    snprintf(want, sizeof(want), "rl-router: [cluster] envoy_config: %s:5: invalid rate limit unit",
             yaml);
    {
        const char *argv[] = {"rl-router", "--config", conf, NULL};

        run_one_line(argv, 2, want);
    }
    ck_assert_int_eq(rl_harness_write_file(conf, "[router]\nlisten = 127.0.0.1:%d\nrls = %d\n",
                                           port, rl_harness_free_port()),
                     0);
    {
        const char *argv[] = {"rl-router", "--config", conf, NULL};

        run_one_line(argv, 2, "rl-router: [router] rls needs [cluster] envoy_config");
    }
    ck_assert_int_eq(rl_harness_write_file(yaml, "domain: edge\n"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf, "[cluster]\nenvoy_config = %s\n"
                                                 "[router]\nlisten = 127.0.0.1:%d\n"
                                                 "rls = 0.0.0.0:%d\n",
                                           yaml, port, rl_harness_free_port()),
                     0);
    {
        const char *argv[] = {"rl-router", "--config", conf, NULL};

        run_one_line(argv, 2, "rl-router: [router] rls 0.0.0.0 is not a loopback address");
    }
}
END_TEST

/*
 * A FIFO where a process opens a file (a log agent's mistake, or anyone who may write in a
 * log directory) never blocks it: as the config file, an rl-node and an rl-router exit 2 at
 * once saying the file is no regular file; and at SIGHUP, with the log file, the request log
 * and the config file (the rules' reload) each replaced by a FIFO, both go on answering and
 * stop on SIGTERM (before, the open waited for a writer forever, SIGTERM included).
 */
START_TEST(test_fifos_never_block)
{
    char fifo[PATH_MAX], nlog[PATH_MAX], rlog[PATH_MAX], reqlog[PATH_MAX], real[PATH_MAX + 8];
    pid_t node, router;

    ck_assert_int_eq(rl_harness_tmppath(fifo, sizeof(fifo), "fifo.conf"), 0);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    {
        const char *argv[] = {"rl-node", "--config", fifo, "--name", "a", NULL};

        run_one_line(argv, 2, "fifo.conf: not a regular file");
    }
    {
        const char *argv[] = {"rl-router", "--config", fifo, NULL};

        run_one_line(argv, 2, "fifo.conf: not a regular file");
    }
    start_logged("f", nlog, rlog, reqlog, &node, &router);
    ck_assert_uint_eq(check(router_port, "bob").code, RL_WIRE_ALLOWED);
    /* every file a SIGHUP opens again is now a FIFO: logs, request log, the config */
    snprintf(real, sizeof(real), "%s.real", conf_path);
    ck_assert_int_eq(rename(conf_path, real), 0);
    ck_assert_int_eq(mkfifo(conf_path, 0600), 0);
    ck_assert_int_eq(unlink(nlog), 0);
    ck_assert_int_eq(mkfifo(nlog, 0600), 0);
    ck_assert_int_eq(unlink(rlog), 0);
    ck_assert_int_eq(mkfifo(rlog, 0600), 0);
    ck_assert_int_eq(unlink(reqlog), 0);
    ck_assert_int_eq(mkfifo(reqlog, 0600), 0);
    ck_assert_int_eq(kill(node, SIGHUP), 0);
    ck_assert_int_eq(kill(router, SIGHUP), 0);
    usleep(500 * 1000);
    ck_assert_uint_eq(check(node_port, "bob").code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(check(router_port, "bob").code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(check(router_port, "bob").code, RL_WIRE_LIMITED); /* 3 per 1h, kept */
    ck_assert_int_eq(rl_harness_stop(router, SIGTERM, 10000, NULL), 0);
    ck_assert_int_eq(rl_harness_stop(node, SIGTERM, 10000, NULL), 0);
}
END_TEST

static Suite *
daemon_suite(void)
{
    Suite *s = suite_create("daemon");
    TCase *tc = tcase_create("daemon");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_node_says_it_is_not_registered);
    tcase_add_test(tc, test_sighup_reopens_logs_and_keeps_counters);
    tcase_add_test(tc, test_bad_command_lines_exit_2);
    tcase_add_test(tc, test_envoy_config_errors_stop_the_router);
    tcase_add_test(tc, test_fifos_never_block);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(daemon_suite)
