/*
 * check_daemon: the life of the rl-node and rl-router processes (common/daemon.c), run for
 * real: an rl-node whose ZooKeeper cannot be reached says so at warn and keeps saying so,
 * never claims to be registered, and reports registered=0 in STATS; SIGHUP reopens the
 * --log-file of a node and of a router without losing a counter; bad command lines exit 2
 * with one line.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client.h"
#include "harness.h"
#include "wire.h"

static char conf_path[PATH_MAX];
static int node_port, router_port;

/* A config; zk_port > 0 points `zookeeper` at a port where nothing listens. */
static void
write_conf(int zk_port)
{
    char zk[64] = "";

    node_port = rl_harness_free_port();
    router_port = rl_harness_free_port();
    if (zk_port > 0) {
        snprintf(zk, sizeof(zk), "[cluster]\nzookeeper = 127.0.0.1:%d\n", zk_port);
    }
    ck_assert_int_eq(rl_harness_tmppath(conf_path, sizeof(conf_path), "daemon.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf_path,
                                           "%s[router]\nlisten = 127.0.0.1:%d\n"
                                           "[node a]\nlisten = 127.0.0.1:%d\n"
                                           "[service web]\nlimit = fixed_window 3 per 1h\n",
                                           zk, router_port, node_port),
                     0);
}

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

static uint32_t
check(int port, const char *user)
{
    struct rl_client *c;
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)port, 5000), 0);
    ck_assert_int_eq(rl_client_check(c, "web", user, NULL, 1, &rep, 5000), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
    rl_client_destroy(c);
    return rep.check.code;
}

START_TEST(test_node_says_it_is_not_registered)
{
    char log[PATH_MAX], port[32];
    struct rl_client *c;
    struct rl_wire_reply rep;
    pid_t pid;

    write_conf(rl_harness_free_port());
    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "node.log"), 0);
    snprintf(port, sizeof(port), "%d", node_port);
    {
        const char *argv[] = {"rl-node", "--config", conf_path, "--name", "a", "--log-file",
                              log, NULL};

        pid = start(argv, node_port);
    }
    /* First warning after 3 s, then every 10 s. */
    sleep(14);
    ck_assert_int_ge(count_lines(log, "warn", "not registered in ZooKeeper"), 2);
    ck_assert_int_eq(count_lines(log, "info", "registered in ZooKeeper at"), 0);
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)node_port, 5000), 0);
    ck_assert_int_eq(rl_client_stats(c, &rep, 5000), 0);
    ck_assert_int_eq(rl_client_stat(&rep, "registered", -1), 0);
    ck_assert_int_eq(rl_client_stat(&rep, "zk_state", -9), 1); /* connecting */
    rl_client_destroy(c);
    ck_assert_int_eq(rl_harness_stop(pid, SIGTERM, 10000, NULL), 0);
}
END_TEST

/* SIGHUP to a process whose log file was moved aside: it lives on, logs to a new file. */
static void
hup_and_check(pid_t pid, const char *log)
{
    char moved[PATH_MAX + 8];
    struct stat st;
    int status;

    snprintf(moved, sizeof(moved), "%s.1", log);
    ck_assert_int_eq(rename(log, moved), 0);
    ck_assert_int_eq(kill(pid, SIGHUP), 0);
    usleep(300000);
    ck_assert_int_eq(rl_harness_wait(pid, 0, &status), -ETIMEDOUT); /* still running */
    ck_assert_int_eq(stat(log, &st), 0);
    ck_assert_int_eq(count_lines(log, "SIGHUP", "reopened"), 1);
    ck_assert_int_eq(count_lines(moved, "SIGHUP", NULL), 0);
}

START_TEST(test_sighup_reopens_log_and_keeps_counters)
{
    char nlog[PATH_MAX], rlog[PATH_MAX];
    pid_t node, router;

    write_conf(0);
    ck_assert_int_eq(rl_harness_tmppath(nlog, sizeof(nlog), "node.log"), 0);
    ck_assert_int_eq(rl_harness_tmppath(rlog, sizeof(rlog), "router.log"), 0);
    {
        const char *nargv[] = {"rl-node", "--config", conf_path, "--name", "a", "--log-file",
                               nlog, NULL};
        const char *rargv[] = {"rl-router", "--config", conf_path, "--log-file", rlog, NULL};

        node = start(nargv, node_port);
        router = start(rargv, router_port);
    }
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(check(node_port, "alice"), RL_WIRE_ALLOWED);
    }
    hup_and_check(node, nlog);
    hup_and_check(router, rlog);
    /* The counter survived: alice is still limited, through the node and the router. */
    ck_assert_uint_eq(check(node_port, "alice"), RL_WIRE_LIMITED);
    ck_assert_uint_eq(check(router_port, "alice"), RL_WIRE_LIMITED);
    ck_assert_int_eq(rl_harness_stop(router, SIGTERM, 10000, NULL), 0);
    ck_assert_int_eq(rl_harness_stop(node, SIGTERM, 10000, NULL), 0);
    ck_assert_int_ge(count_lines(nlog, "stopped", NULL), 1);
}
END_TEST

/* Runs argv to its end; returns its exit status and the first line of its output. */
static int
run(const char *const argv[], char *out, size_t len)
{
    char log[PATH_MAX];
    static int seq;
    int status;
    pid_t pid;

    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "run-%d.out", seq++), 0);
    ck_assert_int_eq(rl_harness_spawn(argv, log, &pid), 0);
    ck_assert_int_eq(rl_harness_wait(pid, 10000, &status), 0);
    ck_assert(WIFEXITED(status));
    ck_assert_int_ge(rl_harness_read_file(log, out, len), 0);
    return WEXITSTATUS(status);
}

START_TEST(test_bad_command_lines_exit_2)
{
    char out[4096];

    write_conf(0);
    {
        const char *argv[] = {"rl-node", "--bogus", NULL};

        ck_assert_int_eq(run(argv, out, sizeof(out)), 2);
        ck_assert_ptr_nonnull(strstr(out, "unknown option \"--bogus\""));
    }
    {
        const char *argv[] = {"rl-node", "--config", conf_path, "--name", "a", "--listen",
                              "nowhere", NULL};

        ck_assert_int_eq(run(argv, out, sizeof(out)), 2);
        ck_assert_ptr_nonnull(strstr(out, "--listen: \"nowhere\" is not HOST:PORT"));
    }
    {
        const char *argv[] = {"rl-node", "--config", conf_path, NULL};

        ck_assert_int_eq(run(argv, out, sizeof(out)), 2);
        ck_assert_ptr_nonnull(strstr(out, "--name NAME is required"));
    }
    {
        const char *argv[] = {"rl-router", "--config", conf_path, "--log-level", "loud", NULL};

        ck_assert_int_eq(run(argv, out, sizeof(out)), 2);
        ck_assert_ptr_nonnull(strstr(out, "unknown level \"loud\""));
        ck_assert_ptr_null(strchr(strchr(out, '\n') + 1, '\n')); /* one line */
    }
    {
        const char *argv[] = {"rl-node", "--config", conf_path, "--name", "zz", NULL};

        ck_assert_int_eq(run(argv, out, sizeof(out)), 2);
        ck_assert_ptr_nonnull(strstr(out, "nowhere to listen"));
    }
}
END_TEST

static Suite *
daemon_suite(void)
{
    Suite *s = suite_create("daemon");
    TCase *tc = tcase_create("daemon");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_node_says_it_is_not_registered);
    tcase_add_test(tc, test_sighup_reopens_log_and_keeps_counters);
    tcase_add_test(tc, test_bad_command_lines_exit_2);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(daemon_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    rl_harness_cleanup();
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
