/*
 * check_chaos_cli: rl-chaos as a CI job or an operator runs it, on small scenarios of 2 nodes
 * and 1 router: a node killed and restarted passes (exit 0, "pass": true in the JSON, a live
 * line a second, a PASS verdict); the same run with a bound it cannot keep fails (exit 1,
 * the expect invariant failing); a broken scenario is refused naming its line (exit 2);
 * `list` names the shipped scenarios; and however rl-chaos ends (SIGKILL, SIGINT) nothing
 * it started outlives it.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "rltest.h"

#define RUN_TIMEOUT_MS 60000

static char out[1 << 17];

/* A scenario of 2 nodes and 1 router at 300 requests/s, with extra appended (steps...). */
static void
write_scenario(char *path, size_t len, const char *name, const char *duration, const char *extra)
{
    ck_assert_int_eq(rl_harness_tmppath(path, len, "%s.ini", name), 0);
    ck_assert_int_eq(rl_harness_write_file(path,
                                           "; written by check_chaos_cli\n"
                                           "[scenario]\nname = %s\nduration = %s\n\n"
                                           "[cluster]\nnodes = 2\nrouters = 1\nshards = 64\n"
                                           "session_timeout = 1s\ndeadline = 200ms\n\n"
                                           "[traffic]\nrate = 300\nusers = 50\n\n"
                                           "[service api]\nlimit = fixed_window 10 per 1s\n"
                                           "failure = open\n\n%s",
                                           name, duration, extra),
                     0);
}

/* The 1-based line of path that contains needle, or 0. */
static int
line_of(const char *path, const char *needle)
{
    char buf[8192], *p;
    int line = 1;

    ck_assert_int_gt(rl_harness_read_file(path, buf, sizeof(buf)), 0);
    p = strstr(buf, needle);
    ck_assert_ptr_nonnull(p);
    for (char *s = buf; s < p; s++) {
        line += *s == '\n';
    }
    return line;
}

/* Runs rl-chaos with argv; returns its exit status, what it printed (both streams) in out. */
static int
chaos(const char *const argv[], int timeout_ms)
{
    static int seq;
    char log[PATH_MAX];
    int status = 0, rc;
    pid_t pid;

    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "chaos-%d.out", seq++), 0);
    ck_assert_int_eq(rl_harness_spawn(argv, log, &pid), 0);
    rc = rl_harness_wait(pid, timeout_ms, &status);
    if (rc != 0) {
        rl_harness_print_log(log, 60);
    }
    ck_assert_msg(rc == 0, "rl-chaos did not end within %d ms", timeout_ms);
    ck_assert_int_ge(rl_harness_read_file(log, out, sizeof(out)), 0);
    if (!WIFEXITED(status)) {
        rl_harness_print_log(log, 60);
    }
    ck_assert_msg(WIFEXITED(status), "rl-chaos ended by signal %d",
                  WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return WEXITSTATUS(status);
}

/* How many lines of s contain needle. */
static int
count_lines(const char *s, const char *needle)
{
    int n = 0;

    while (s != NULL && *s != '\0') {
        const char *nl = strchr(s, '\n');
        size_t len = nl != NULL ? (size_t)(nl - s) : strlen(s);
        const char *hit = strstr(s, needle);

        n += hit != NULL && (size_t)(hit - s) < len;
        s = nl != NULL ? nl + 1 : NULL;
    }
    return n;
}

static const char kill_steps[] = "[steps]\nat 2s kill node b\nat 5s restart node b\n";

START_TEST(test_kill_passes)
{
    char path[PATH_MAX], json_path[PATH_MAX], json[1 << 16];
    int rc;

    write_scenario(path, sizeof(path), "cli-kill", "7s", kill_steps);
    ck_assert_int_eq(rl_harness_tmppath(json_path, sizeof(json_path), "kill.json"), 0);
    {
        const char *argv[] = {"rl-chaos", "run", path, "--json", json_path, NULL};

        rc = chaos(argv, RUN_TIMEOUT_MS);
    }
    ck_assert_msg(rc == 0, "rl-chaos exited %d:\n%s", rc, out);
    ck_assert_int_gt(rl_harness_read_file(json_path, json, sizeof(json)), 0);
    ck_assert_msg(strstr(json, "\"pass\":true") != NULL, "%s", json);
    ck_assert_ptr_nonnull(strstr(json, "\"scenario\":\"cli-kill\""));
    ck_assert_ptr_nonnull(strstr(json, "{\"name\":\"no-deaths\",\"held\":true"));
    /* the run was judged: requests went out and the kill was felt (policy answers) */
    ck_assert_ptr_null(strstr(json, "\"sent\":0,"));
    ck_assert_ptr_null(strstr(json, "\"fail_open\":0,"));
    ck_assert_msg(count_lines(out, "/s |") >= 5, "fewer than 5 live lines:\n%s", out);
    ck_assert_msg(strstr(out, "VERDICT cli-kill: PASS") != NULL, "%s", out);
}
END_TEST

START_TEST(test_expect_fails)
{
    char path[PATH_MAX], json_path[PATH_MAX], json[1 << 16], steps[256];
    int rc;

    snprintf(steps, sizeof(steps), "%s\n[expect]\nmax_policy_answers = 0\n", kill_steps);
    write_scenario(path, sizeof(path), "cli-kill-expect", "7s", steps);
    ck_assert_int_eq(rl_harness_tmppath(json_path, sizeof(json_path), "expect.json"), 0);
    {
        const char *argv[] = {"rl-chaos", "run", path, "--json", json_path, NULL};

        rc = chaos(argv, RUN_TIMEOUT_MS);
    }
    ck_assert_msg(rc == 1, "rl-chaos exited %d:\n%s", rc, out);
    ck_assert_int_gt(rl_harness_read_file(json_path, json, sizeof(json)), 0);
    ck_assert_msg(strstr(json, "\"pass\":false") != NULL, "%s", json);
    ck_assert_msg(strstr(json, "{\"name\":\"expect\",\"held\":false") != NULL, "%s", json);
    ck_assert_msg(strstr(out, "VERDICT cli-kill-expect: FAIL") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "expect violated: max_policy_answers: ") != NULL, "%s", out);
}
END_TEST

START_TEST(test_broken_scenario)
{
    char path[PATH_MAX], where[PATH_MAX + 64];
    int rc;

    write_scenario(path, sizeof(path), "broken", "7s", "[steps]\nat 1s kill node b\n"
                                                       "at 2s explode node b\n");
    snprintf(where, sizeof(where), "%s:%d: unknown action \"explode\"", path,
             line_of(path, "explode"));
    {
        const char *argv[] = {"rl-chaos", "run", path, NULL};

        rc = chaos(argv, 10000);
    }
    ck_assert_msg(rc == 2, "rl-chaos exited %d:\n%s", rc, out);
    ck_assert_msg(strstr(out, where) != NULL, "\"%s\" lacks \"%s\"", out, where);
    ck_assert_ptr_null(strstr(out, "VERDICT"));
}
END_TEST

/* What a run across hosts needs is checked before anything starts (exit 2, no verdict):
 * isolate only with --hosts, the proxies' steps never with it, and a hosts file naming
 * every process (the netns run itself is scripts/netns.sh's, as root). */
START_TEST(test_hosts_refusals)
{
    char isolate[PATH_MAX], oneway[PATH_MAX], plain[PATH_MAX], hosts[PATH_MAX];
    char want[PATH_MAX + 64];
    int rc;

    write_scenario(isolate, sizeof(isolate), "isolate", "7s",
                   "[steps]\nat 1s isolate node b for 2s\n");
    write_scenario(oneway, sizeof(oneway), "oneway", "7s",
                   "[steps]\nat 1s oneway node a from routers for 2s\n");
    write_scenario(plain, sizeof(plain), "plain", "7s", kill_steps);
    ck_assert_int_eq(rl_harness_tmppath(hosts, sizeof(hosts), "hosts"), 0);
    /* node b has no line: the file is refused at its end, naming b */
    ck_assert_int_eq(rl_harness_write_file(hosts, "zookeeper ns-zk 10.213.7.10\n"
                                                  "node a ns-a 10.213.7.11\n"
                                                  "router 1 ns-r1 10.213.7.21\n"
                                                  "device eth0\nsecret_file /x\ntoken_file /y\n"
                                                  "token_sha256 %064d\n", 0),
                     0);
    {
        const char *argv[] = {"rl-chaos", "run", isolate, NULL};

        rc = chaos(argv, 10000);
        ck_assert_msg(rc == 2 && strstr(out, "needs --hosts") != NULL, "%d: %s", rc, out);
    }
    {
        const char *argv[] = {"rl-chaos", "run", oneway, "--hosts", hosts, NULL};

        rc = chaos(argv, 10000);
        ck_assert_msg(rc == 2 && strstr(out, "not with --hosts") != NULL, "%d: %s", rc, out);
    }
    {
        const char *argv[] = {"rl-chaos", "run", plain, "--hosts", hosts, NULL};

        snprintf(want, sizeof(want), "%s:7: no line for node: b", hosts);
        rc = chaos(argv, 10000);
        ck_assert_msg(rc == 2 && strstr(out, want) != NULL, "%d: %s", rc, out);
        ck_assert_ptr_null(strstr(out, "VERDICT"));
    }
    /* a bad line is named with its number */
    ck_assert_int_eq(
        rl_harness_write_file(hosts, "zookeeper ns-zk 10.213.7.10\nnode z ns 1.2.3.4\n"), 0);
    {
        const char *argv[] = {"rl-chaos", "run", plain, "--hosts", hosts, NULL};

        snprintf(want, sizeof(want), "%s:2: not a hosts line", hosts);
        rc = chaos(argv, 10000);
        ck_assert_msg(rc == 2 && strstr(out, want) != NULL, "%d: %s", rc, out);
    }
    /* TLS: with tls_ca_file every node, router and rl-chaos itself needs a certificate (the
     * one missing is named), files that do not load are refused before anything starts, and
     * a tls line for no such process is refused */
    {
        static const char base[] = "zookeeper ns-zk 10.213.7.10\nnode a ns-a 10.213.7.11\n"
                                   "node b ns-b 10.213.7.12\nrouter 1 ns-r1 10.213.7.21\n"
                                   "device eth0\nsecret_file /x\ntoken_file /y\n"
                                   "token_sha256 %064d\ntls_ca_file /n/ca.pem\n"
                                   "tls node a /n/a.pem /n/a.key\n"
                                   "tls router 1 /n/r.pem /n/r.key\n%s";
        const char *argv[] = {"rl-chaos", "run", plain, "--hosts", hosts, NULL};

        ck_assert_int_eq(rl_harness_write_file(hosts, base, 0, ""), 0);
        snprintf(want, sizeof(want), "%s:11: with tls_ca_file, no tls line for node: b", hosts);
        rc = chaos(argv, 10000);
        ck_assert_msg(rc == 2 && strstr(out, want) != NULL, "%d: %s", rc, out);

        ck_assert_int_eq(rl_harness_write_file(hosts, base, 0, "tls node b /n/b.pem /n/b.key\n"),
                         0);
        snprintf(want, sizeof(want), "%s:12: with tls_ca_file, rl-chaos needs its own", hosts);
        rc = chaos(argv, 10000);
        ck_assert_msg(rc == 2 && strstr(out, want) != NULL, "%d: %s", rc, out);

        ck_assert_int_eq(rl_harness_write_file(hosts, base, 0,
                                               "tls node b /n/b.pem /n/b.key\n"
                                               "tls client /n/cl.pem /n/cl.key\n"),
                         0);
        rc = chaos(argv, 10000);
        ck_assert_msg(rc == 2 && strstr(out, "rl-chaos: TLS: ") != NULL &&
                          strstr(out, "/n/") != NULL && strstr(out, "VERDICT") == NULL,
                      "%d: %s", rc, out);

        ck_assert_int_eq(rl_harness_write_file(hosts, "zookeeper ns-zk 10.213.7.10\n"
                                                      "tls node z /n/z.pem /n/z.key\n"),
                         0);
        snprintf(want, sizeof(want), "%s:2: not a hosts line", hosts);
        rc = chaos(argv, 10000);
        ck_assert_msg(rc == 2 && strstr(out, want) != NULL, "%d: %s", rc, out);
    }
}
END_TEST

START_TEST(test_usage)
{
    char path[PATH_MAX];

    unsetenv("RL_CHAOS_SCENARIOS");
    {
        const char *argv[] = {"rl-chaos", "list", NULL};

        ck_assert_int_eq(chaos(argv, 10000), 0);
        ck_assert_msg(strncmp(out, "node-kill ", 10) == 0 || strstr(out, "\nnode-kill ") != NULL,
                      "%s", out);
        ck_assert_msg(strstr(out, "\npartition-node-zk ") != NULL, "%s", out);
        ck_assert_msg(strstr(out, "does not load") == NULL, "%s", out);
    }
    {
        const char *argv[] = {"rl-chaos", "--help", NULL};

        ck_assert_int_eq(chaos(argv, 10000), 0);
        ck_assert_ptr_nonnull(strstr(out, "usage: rl-chaos run SCENARIO"));
        ck_assert_ptr_nonnull(strstr(out, "Scenario format"));
    }
    {
        const char *argv[] = {"rl-chaos", NULL};

        ck_assert_int_eq(chaos(argv, 10000), 2);
        ck_assert_ptr_nonnull(strstr(out, "usage:"));
    }
    {
        const char *argv[] = {"rl-chaos", "run", "no-such-scenario", NULL};

        ck_assert_int_eq(chaos(argv, 10000), 2);
        ck_assert_ptr_nonnull(strstr(out, "no-such-scenario"));
    }
    /* --duration may not cut a step short */
    write_scenario(path, sizeof(path), "short", "7s", kill_steps);
    {
        const char *argv[] = {"rl-chaos", "run", path, "--duration", "3s", NULL};

        ck_assert_int_eq(chaos(argv, 10000), 2);
        ck_assert_msg(strstr(out, "ends before step \"at 5s restart node b\"") != NULL, "%s", out);
    }
}
END_TEST

/* ---- cleanup however it ends ----------------------------------------------------------- */

/* How many processes other than this one have needle in their command line; one in example. */
static int
procs_with(const char *needle, char *example, size_t len)
{
    static char cmd[1 << 16];
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;

    ck_assert_ptr_nonnull(d);
    if (example != NULL && len > 0) {
        example[0] = '\0';
    }
    while ((e = readdir(d)) != NULL) {
        char path[300];
        ssize_t got;
        size_t used = 0;
        int fd;

        if (e->d_name[0] < '0' || e->d_name[0] > '9' || atoi(e->d_name) == (int)getpid()) {
            continue;
        }
        snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            continue; /* gone meanwhile */
        }
        while (used < sizeof(cmd) - 1 && (got = read(fd, cmd + used, sizeof(cmd) - 1 - used)) > 0) {
            used += (size_t)got;
        }
        close(fd);
        for (size_t i = 0; i < used; i++) {
            cmd[i] = cmd[i] == '\0' ? ' ' : cmd[i];
        }
        cmd[used] = '\0';
        if (strstr(cmd, needle) != NULL) {
            if (n == 0 && example != NULL) {
                snprintf(example, len, "pid %.20s: %.300s", e->d_name, cmd);
            }
            n++;
        }
    }
    closedir(d);
    return n;
}

static void
sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/*
 * Starts rl-chaos on a 20 s scenario with TMPDIR a directory of its own, waits until the
 * cluster is up (a live line, and its processes running), sends sig to rl-chaos alone, and
 * checks that it ends and that within a few seconds no process has that directory in its
 * command line: ZooKeeper's JVM, the nodes and the router die with it.
 */
static void
end_with(int sig)
{
    char path[PATH_MAX], dir[PATH_MAX], log[PATH_MAX], example[512], *old = NULL;
    int status = 0, n = 0;
    pid_t pid;

    write_scenario(path, sizeof(path), "long", "20s", "");
    ck_assert_int_eq(rl_harness_tmppath(dir, sizeof(dir), "tmp-sig%d", sig), 0);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "long-sig%d.out", sig), 0);
    if (getenv("TMPDIR") != NULL) {
        old = strdup(getenv("TMPDIR"));
        ck_assert_ptr_nonnull(old);
    }
    ck_assert_int_eq(setenv("TMPDIR", dir, 1), 0);
    {
        const char *argv[] = {"rl-chaos", "run", path, NULL};

        ck_assert_int_eq(rl_harness_spawn(argv, log, &pid), 0);
    }
    if (old != NULL) {
        setenv("TMPDIR", old, 1);
        free(old);
    } else {
        unsetenv("TMPDIR");
    }
    /* the cluster is up once a live line is printed */
    for (int waited = 0;; waited += 100) {
        ck_assert_int_ge(rl_harness_read_file(log, out, sizeof(out)), 0);
        if (strstr(out, "/s |") != NULL) {
            break;
        }
        if (rl_harness_wait(pid, 0, &status) == 0 || waited > 40000) {
            rl_harness_print_log(log, 40);
            ck_abort_msg("rl-chaos printed no live line (status 0x%x)", status);
        }
        sleep_ms(100);
    }
    /* ZooKeeper's JVM, 2 nodes and a router, all with the directory in their arguments */
    n = procs_with(dir, example, sizeof(example));
    ck_assert_msg(n >= 4, "only %d processes with %s in their command line", n, dir);

    /* Looked at before rl-chaos is reaped: reaping SIGKILLs its process group, which must
     * not be what ends them (each is in a group of its own anyway). */
    ck_assert_int_eq(kill(pid, sig), 0);
    for (int waited = 0; (n = procs_with(dir, example, sizeof(example))) > 0 && waited < 5000;
         waited += 100) {
        sleep_ms(100);
    }
    ck_assert_msg(n == 0, "%d processes outlived rl-chaos (signal %d), e.g. %s", n, sig, example);
    ck_assert_msg(rl_harness_wait(pid, 10000, &status) == 0, "rl-chaos still runs after signal %d",
                  sig);
    if (sig == SIGKILL) {
        ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == sig,
                      "rl-chaos ended with status 0x%x", status);
        return;
    }
    /* SIGINT stops the run: the cluster is stopped, exit 130, nothing left in TMPDIR */
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 130,
                  "rl-chaos ended with status 0x%x, want exit 130", status);
    ck_assert_int_ge(rl_harness_read_file(log, out, sizeof(out)), 0);
    ck_assert_msg(strstr(out, "interrupted") != NULL, "no \"interrupted\" in:\n%s", out);
    {
        DIR *d = opendir(dir);
        struct dirent *e;
        int left = 0;

        ck_assert_ptr_nonnull(d);
        while ((e = readdir(d)) != NULL) {
            left += strncmp(e->d_name, "rl-test-", 8) == 0;
        }
        closedir(d);
        ck_assert_msg(left == 0, "rl-chaos left its temp directory in %s", dir);
    }
}

START_TEST(test_sigkill_leaves_nothing)
{
    end_with(SIGKILL);
}
END_TEST

START_TEST(test_sigint_leaves_nothing)
{
    end_with(SIGINT);
}
END_TEST

static Suite *
chaos_cli_suite(void)
{
    Suite *s = suite_create("chaos_cli");
    TCase *tc = tcase_create("chaos_cli");

    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_broken_scenario);
    tcase_add_test(tc, test_usage);
    tcase_add_test(tc, test_hosts_refusals);
    tcase_add_test(tc, test_kill_passes);
    tcase_add_test(tc, test_expect_fails);
    tcase_add_test(tc, test_sigkill_leaves_nothing);
    tcase_add_test(tc, test_sigint_leaves_nothing);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(chaos_cli_suite)
