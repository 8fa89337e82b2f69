/*
 * check_harness: the integration-test harness tested on itself. Spawned processes die at
 * cleanup, at exit, on SIGTERM and when the test process is SIGKILLed (PR_SET_PDEATHSIG);
 * ports are distinct; ZooKeeper starts, serves the C client, keeps persistent znodes across
 * a restart and leaves no JVM behind. The rl-node/rl-router wrappers are tested against
 * this very binary run as a fake server, so the suite does not depend on those programs.
 * The fault proxy (proxy.h) is tested in front of an echo server, one test per mode.
 * Not a test of the project's programs: the integration suites do that.
 */
#include "harness.h"
#include "proxy.h"
#include "rltest.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <zookeeper/zookeeper.h>

static int64_t
mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * True once pid no longer runs. It may not be our child (an orphan re-parented to init),
 * so a zombie counts as gone: only its parent can reap it.
 */
static bool
proc_gone(pid_t pid)
{
    char path[64], stat[512];
    const char *paren;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "re");
    if (f == NULL) {
        return true;
    }
    n = fread(stat, 1, sizeof(stat) - 1, f);
    fclose(f);
    stat[n] = '\0';
    paren = strrchr(stat, ')');
    return paren == NULL || paren[1] == '\0' || paren[2] == 'Z' || paren[2] == 'X';
}

static bool
wait_gone(pid_t pid, int timeout_ms)
{
    int64_t deadline = mono_ms() + timeout_ms;

    while (!proc_gone(pid)) {
        if (mono_ms() >= deadline) {
            return false;
        }
        usleep(5000);
    }
    return true;
}

static void
write_all(int fd, const void *buf, size_t len)
{
    ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
}

static void
read_all(int fd, void *buf, size_t len)
{
    ck_assert_int_eq(read(fd, buf, len), (ssize_t)len);
}

/* Waits until a spawned process's log holds a whole line; returns it as a number. */
static long
wait_line(const char *path)
{
    char buf[64];
    int64_t deadline = mono_ms() + 5000;

    while (mono_ms() < deadline) {
        if (rl_harness_read_file(path, buf, sizeof(buf)) > 0 && strchr(buf, '\n') != NULL) {
            return strtol(buf, NULL, 10);
        }
        usleep(5000);
    }
    ck_abort_msg("nothing written to %s", path);
    return -1;
}

static void
teardown(void)
{
    rl_harness_cleanup();
}

/* ---- Processes ------------------------------------------------------------------------- */

START_TEST(test_spawn_cleanup)
{
    const char *const argv[] = {"sleep", "100", NULL};
    pid_t pid;

    ck_assert_int_eq(rl_harness_spawn(argv, NULL, &pid), 0);
    ck_assert_int_gt(pid, 0);
    ck_assert_int_eq(kill(pid, 0), 0);
    /* Its own process group, so that killing the group cannot reach the test. */
    ck_assert_int_eq(getpgid(pid), pid);
    rl_harness_cleanup();
    ck_assert_int_eq(kill(pid, 0), -1);
    ck_assert_int_eq(errno, ESRCH);
    ck_assert_int_eq(rl_harness_stop(pid, SIGTERM, 100, NULL), -ECHILD);
}
END_TEST

START_TEST(test_spawn_errors)
{
    const char *const missing[] = {"rl-no-such-program", NULL};
    const char *notexec[] = {NULL, NULL};
    char path[256];
    pid_t pid = 0;

    ck_assert_int_eq(rl_harness_spawn(missing, NULL, &pid), -ENOENT);
    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "not-executable"), 0);
    ck_assert_int_eq(rl_harness_write_file(path, "#!/bin/sh\n"), 0);
    notexec[0] = path;
    ck_assert_int_eq(rl_harness_spawn(notexec, NULL, &pid), -EACCES);
    ck_assert_int_eq(pid, 0);
}
END_TEST

/* A tool run to its end: its status and output; one that outlives its timeout is killed and
 * what it said is still there, NUL-terminated (before, rl-chaos printed the buffer's
 * garbage in the event of an `ip` command that timed out). */
START_TEST(test_run_output)
{
    const char *const ok[] = {"/bin/sh", "-c", "echo said; exit 3", NULL};
    const char *const slow[] = {"/bin/sh", "-c", "echo before; exec sleep 30", NULL};
    const char *const missing[] = {"rl-no-such-program", NULL};
    char out[256];

    memset(out, 'x', sizeof(out));
    ck_assert_int_eq(rl_harness_run(ok, out, sizeof(out), 10000), 3);
    ck_assert_str_eq(out, "said\n");
    memset(out, 'x', sizeof(out));
    ck_assert_int_eq(rl_harness_run(slow, out, sizeof(out), 500), -ETIMEDOUT);
    ck_assert_str_eq(out, "before\n");
    memset(out, 'x', sizeof(out));
    ck_assert_int_eq(rl_harness_run(missing, out, sizeof(out), 500), -ENOENT);
    ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(test_wait_stop_status)
{
    const char *const exit3[] = {"sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3", NULL};
    const char *const stubborn[] = {"sh", "-c", "trap '' TERM; echo 1; exec sleep 100", NULL};
    const char *const sleeper[] = {"sleep", "100", NULL};
    char log[256], buf[256];
    int64_t t0;
    pid_t pid;
    int st;

    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "exit3.log"), 0);
    ck_assert_int_eq(rl_harness_spawn(exit3, log, &pid), 0);
    ck_assert_int_eq(rl_harness_wait(pid, 5000, &st), 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 3);
    ck_assert_int_gt(rl_harness_read_file(log, buf, sizeof(buf)), 0);
    ck_assert_str_eq(buf, "to-stdout\nto-stderr\n");

    /* A process that ignores SIGTERM is killed when the timeout runs out. */
    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "stubborn.log"), 0);
    ck_assert_int_eq(rl_harness_spawn(stubborn, log, &pid), 0);
    ck_assert_int_eq(wait_line(log), 1);
    ck_assert_int_eq(rl_harness_wait(pid, 0, &st), -ETIMEDOUT);
    t0 = mono_ms();
    ck_assert_int_eq(rl_harness_stop(pid, SIGTERM, 300, &st), -ETIMEDOUT);
    ck_assert_int_ge(mono_ms() - t0, 300);
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

    ck_assert_int_eq(rl_harness_spawn(sleeper, NULL, &pid), 0);
    ck_assert_int_eq(rl_harness_stop(pid, SIGTERM, 5000, &st), 0);
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);

    ck_assert_int_eq(rl_harness_spawn(sleeper, NULL, &pid), 0);
    ck_assert_int_eq(rl_harness_kill9(pid), 0);
    ck_assert_int_eq(kill(pid, 0), -1);
    ck_assert_int_eq(rl_harness_kill9(pid), -ECHILD);
}
END_TEST

/*
 * A shell that backgrounds a sleep: the sleep is a grandchild, out of PDEATHSIG's reach,
 * in the shell's process group. Returns the shell's pid and the sleep's in *grandchild.
 */
static pid_t
spawn_family(const char *log, pid_t *grandchild)
{
    const char *const argv[] = {"sh", "-c", "sleep 100 & echo $!; wait", NULL};
    pid_t pid;

    ck_assert_int_eq(rl_harness_spawn(argv, log, &pid), 0);
    *grandchild = (pid_t)wait_line(log);
    ck_assert_int_gt(*grandchild, 0);
    return pid;
}

/* A child that exits normally takes its processes, grandchildren too, down at exit. */
START_TEST(test_cleanup_at_exit)
{
    pid_t child, pids[2];
    int fds[2], st;
    char log[256];

    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "family.log"), 0);
    ck_assert_int_eq(pipe(fds), 0);
    child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        pids[0] = spawn_family(log, &pids[1]);
        write_all(fds[1], pids, sizeof(pids));
        exit(0);
    }
    read_all(fds[0], pids, sizeof(pids));
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert(wait_gone(pids[0], 1000));
    ck_assert(wait_gone(pids[1], 1000));
}
END_TEST

/* SIGTERM to a test process kills its processes' groups before the default action. */
START_TEST(test_cleanup_on_sigterm)
{
    pid_t child, pids[2];
    int fds[2], st;
    char log[256];

    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "family.log"), 0);
    ck_assert_int_eq(pipe(fds), 0);
    child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        /* Check's own SIGTERM handler is inherited here; a test process normally has none. */
        signal(SIGTERM, SIG_DFL);
        setpgid(0, 0);
        pids[0] = spawn_family(log, &pids[1]);
        write_all(fds[1], pids, sizeof(pids));
        for (;;) {
            pause();
        }
    }
    read_all(fds[0], pids, sizeof(pids));
    ck_assert_int_eq(kill(child, SIGTERM), 0);
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
    ck_assert(wait_gone(pids[0], 1000));
    ck_assert(wait_gone(pids[1], 1000));
}
END_TEST

/* SIGKILL of a test process (Check's timeout): PR_SET_PDEATHSIG takes its children down. */
START_TEST(test_pdeathsig)
{
    const char *const argv[] = {"sleep", "100", NULL};
    pid_t child, pid;
    int fds[2];
    int64_t t0;

    ck_assert_int_eq(pipe(fds), 0);
    child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        ck_assert_int_eq(rl_harness_spawn(argv, NULL, &pid), 0);
        write_all(fds[1], &pid, sizeof(pid));
        for (;;) {
            pause();
        }
    }
    read_all(fds[0], &pid, sizeof(pid));
    ck_assert(!proc_gone(pid));
    t0 = mono_ms();
    ck_assert_int_eq(kill(child, SIGKILL), 0);
    ck_assert_int_eq(waitpid(child, NULL, 0), child);
    ck_assert_msg(wait_gone(pid, 1000), "sleep %d outlived its parent", (int)pid);
    fprintf(stderr, "check_harness: PDEATHSIG killed the orphan in %lld ms\n",
            (long long)(mono_ms() - t0));
}
END_TEST

/* Each process has its own directory in the root; only its creator removes it. */
START_TEST(test_tmpdir_per_process)
{
    char dir[256], child_dir[256], root[256];
    struct stat st;
    pid_t child;
    int fds[2], status;

    ck_assert_ptr_nonnull(rl_harness_tmpdir());
    snprintf(dir, sizeof(dir), "%s", rl_harness_tmpdir());
    snprintf(root, sizeof(root), "%s", dir);
    *strrchr(root, '/') = '\0';
    ck_assert_ptr_nonnull(strstr(root, "/rl-test-"));
    ck_assert_int_eq(pipe(fds), 0);
    child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        const char *mine = rl_harness_tmpdir();

        ck_assert_ptr_nonnull(mine);
        snprintf(child_dir, sizeof(child_dir), "%s", mine);
        write_all(fds[1], child_dir, sizeof(child_dir));
        exit(0);
    }
    read_all(fds[0], child_dir, sizeof(child_dir));
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert_str_ne(child_dir, dir);
    ck_assert_int_eq(strncmp(child_dir, root, strlen(root)), 0);
    ck_assert_int_eq(stat(dir, &st), 0);
    if (getenv("RL_KEEP_TMP") == NULL) {
        ck_assert_int_eq(stat(child_dir, &st), -1);
        rl_harness_cleanup();
        ck_assert_int_eq(stat(dir, &st), -1);
        ck_assert_int_eq(stat(root, &st), 0);
    }
}
END_TEST

/*
 * The inner suite, run by test_runner_sweeps in a fresh copy of this binary: one test fails
 * an assertion (Check _exit()s, no teardown) and one hangs until Check's timeout SIGKILLs
 * it. Each first records its temp directory and a process it spawned in RL_HARNESS_INNER.
 */
static void
inner_record(void)
{
    const char *const argv[] = {"sleep", "100", NULL};
    const char *out = getenv("RL_HARNESS_INNER");
    char line[512];
    pid_t pid;

    ck_assert_int_eq(rl_harness_spawn(argv, NULL, &pid), 0);
    snprintf(line, sizeof(line), "%d %d %s\n", (int)getpid(), (int)pid, rl_harness_tmpdir());
    FILE *f = fopen(out, "a");
    ck_assert_ptr_nonnull(f);
    fputs(line, f);
    fclose(f);
}

START_TEST(inner_fails)
{
    inner_record();
    ck_abort_msg("failing on purpose");
}
END_TEST

START_TEST(inner_hangs)
{
    inner_record();
    for (;;) {
        pause();
    }
}
END_TEST

static int
run_inner(void)
{
    Suite *s = suite_create("harness-inner");
    TCase *tc = tcase_create("inner");
    SRunner *sr;
    int failed;

    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 1);
    if (getenv("RL_HARNESS_INNER_WAIT") != NULL) {
        /* Waits to have its runner SIGKILLed, longer than the timeout would allow. */
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, inner_hangs);
    } else {
        tcase_add_test(tc, inner_fails);
        tcase_add_test(tc, inner_hangs);
    }
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_SILENT);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed;
}

/*
 * Runs this binary as an inner Check runner (see run_inner()) with its temp root inside
 * ours, and returns its pid; out receives one "TEST-PID SPAWNED-PID TMPDIR" line per test.
 */
static pid_t
spawn_inner(char *out, size_t outlen, bool wait_to_be_killed)
{
    char self[256], log[256];
    const char *const argv[] = {self, NULL};
    pid_t pid;
    ssize_t n;

    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    ck_assert_int_gt(n, 0);
    self[n] = '\0';
    ck_assert_int_eq(rl_harness_tmppath(out, outlen, "inner.txt"), 0);
    ck_assert_int_eq(rl_harness_tmppath(log, sizeof(log), "inner.log"), 0);
    ck_assert_int_eq(setenv("RL_HARNESS_INNER", out, 1), 0);
    if (wait_to_be_killed) {
        ck_assert_int_eq(setenv("RL_HARNESS_INNER_WAIT", "1", 1), 0);
    }
    ck_assert_int_eq(setenv("TMPDIR", rl_harness_tmpdir(), 1), 0);
    /* The inner runner runs its own suite, whatever this one was asked to run. */
    unsetenv("CK_RUN_SUITE");
    unsetenv("CK_RUN_CASE");
    ck_assert_int_eq(rl_harness_spawn(argv, log, &pid), 0);
    return pid;
}

/* Checks the processes of each line of out are gone, and the directories if swept. */
static int
check_inner_records(const char *out, bool swept)
{
    char buf[2048];
    struct stat st;
    int records = 0;

    ck_assert_int_gt(rl_harness_read_file(out, buf, sizeof(buf)), 0);
    for (char *line = strtok(buf, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        int test_pid, spawned, off = 0;

        ck_assert_int_eq(sscanf(line, "%d %d %n", &test_pid, &spawned, &off), 2);
        ck_assert_msg(wait_gone(test_pid, 2000), "test process %d survived", test_pid);
        ck_assert_msg(wait_gone(spawned, 2000), "spawned process %d survived", spawned);
        if (swept && getenv("RL_KEEP_TMP") == NULL) {
            char *dir = line + off;

            ck_assert_msg(stat(dir, &st) == -1, "%s survived", dir);
            *strrchr(dir, '/') = '\0';
            ck_assert_msg(stat(dir, &st) == -1, "%s survived", dir);
        }
        records++;
    }
    return records;
}

/* Tests that fail or time out leave nothing once their runner exits. */
START_TEST(test_runner_sweeps)
{
    char out[256];
    pid_t pid;
    int st;

    pid = spawn_inner(out, sizeof(out), false);
    ck_assert_int_eq(rl_harness_wait(pid, 15000, &st), 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    ck_assert_int_eq(check_inner_records(out, true), 2);
}
END_TEST

/* SIGKILL of the test binary: the test process dies with it, and its processes with that. */
START_TEST(test_runner_killed)
{
    char out[256], buf[16];
    pid_t pid;

    pid = spawn_inner(out, sizeof(out), true);
    while (rl_harness_read_file(out, buf, sizeof(buf)) <= 0) {
        ck_assert_int_eq(rl_harness_wait(pid, 10, NULL), -ETIMEDOUT);
    }
    ck_assert_int_eq(rl_harness_kill9(pid), 0);
    ck_assert_int_eq(check_inner_records(out, false), 1);
}
END_TEST

/* ---- Files and ports ------------------------------------------------------------------- */

START_TEST(test_files)
{
    char path[256], buf[64];

    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "conf-%d.ini", 7), 0);
    ck_assert_int_eq(rl_harness_write_file(path, "[cluster]\nname = %s\n", "demo"), 0);
    ck_assert_int_eq(rl_harness_read_file(path, buf, sizeof(buf)), 22);
    ck_assert_str_eq(buf, "[cluster]\nname = demo\n");
    ck_assert_int_eq(rl_harness_read_file(path, buf, 5), 4);
    ck_assert_str_eq(buf, "[clu");
    ck_assert_int_eq(rl_harness_tmppath(buf, 8, "%s", "far-too-long"), -ENAMETOOLONG);
    ck_assert_int_eq(rl_harness_read_file("/nonexistent/x", buf, sizeof(buf)), -ENOENT);
}
END_TEST

START_TEST(test_free_ports)
{
    static bool seen[65536];
    struct sockaddr_in sin = {.sin_family = AF_INET};
    int fd;

    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < 500; i++) {
        int port = rl_harness_free_port();

        RL_CHECK_INT_GT(port, 1023);
        RL_CHECK_INT_LT(port, 65536);
        RL_CHECK(!seen[port], "port %d handed out twice", port);
        seen[port] = true;
    }
    /* A port handed out is bindable, and one in use is never handed out. */
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sin.sin_port = htons((uint16_t)rl_harness_free_port());
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    close(fd);
}
END_TEST

START_TEST(test_wait_port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    int port = rl_harness_free_port(), fd;
    int64_t t0;

    t0 = mono_ms();
    ck_assert_int_eq(rl_harness_wait_port("127.0.0.1", port, 300), -ETIMEDOUT);
    ck_assert_int_ge(mono_ms() - t0, 300);

    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = htons((uint16_t)port);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    ck_assert_int_eq(listen(fd, 8), 0);
    ck_assert_int_eq(rl_harness_wait_port("127.0.0.1", port, 1000), 0);
    ck_assert_int_eq(rl_harness_wait_port("localhost", port, 1000), 0);
    close(fd);
}
END_TEST

/* ---- ZooKeeper ------------------------------------------------------------------------- */

static void
zk_quiet(const char *message)
{
    (void)message;
}

static zhandle_t *
zk_connect(const char *connect)
{
    int64_t deadline = mono_ms() + 5000;
    zhandle_t *zh = zookeeper_init2(connect, NULL, 4000, NULL, NULL, 0, zk_quiet);

    ck_assert_ptr_nonnull(zh);
    while (zoo_state(zh) != ZOO_CONNECTED_STATE) {
        ck_assert_msg(mono_ms() < deadline, "no ZooKeeper session with %s", connect);
        usleep(10000);
    }
    return zh;
}

START_TEST(test_zk_lifecycle)
{
    struct rl_harness_zk zk;
    char names[4][RL_HARNESS_ZK_NAME_MAX], buf[64], connect[32];
    zhandle_t *zh;
    int64_t t0;
    pid_t jvm;
    int port;

    memset(&zk, 0, sizeof(zk));
    ck_assert_int_eq(rl_harness_zk_start(&zk), 0);
    fprintf(stderr, "check_harness: ZooKeeper served after %lld ms\n", (long long)zk.start_ms);
    ck_assert_int_gt(zk.pid, 0);
    ck_assert_int_eq(rl_harness_zk_start(&zk), -EALREADY);
    snprintf(connect, sizeof(connect), "127.0.0.1:%d", zk.port);
    ck_assert_str_eq(zk.connect, connect);

    zh = zk_connect(zk.connect);
    ck_assert_int_eq(zoo_create(zh, "/harness", "hello", 5, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), ZOK);
    ck_assert_int_eq(zoo_create(zh, "/harness/b", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), ZOK);
    ck_assert_int_eq(zoo_create(zh, "/harness/a", "x", 1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), ZOK);
    ck_assert_int_eq(
        zoo_create(zh, "/harness/e", "x", 1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, NULL, 0), ZOK);

    ck_assert_int_eq(rl_harness_zk_get(zk.connect, "/harness", buf, sizeof(buf)), 5);
    ck_assert_str_eq(buf, "hello");
    ck_assert_int_eq(rl_harness_zk_get(zk.connect, "/harness", buf, 3), 5);
    ck_assert_str_eq(buf, "he");
    ck_assert_int_eq(rl_harness_zk_get(zk.connect, "/harness/b", buf, sizeof(buf)), 0);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(rl_harness_zk_get(zk.connect, "/nope", buf, sizeof(buf)), -ENOENT);
    ck_assert_int_eq(rl_harness_zk_children(zk.connect, "/harness", names, 4), 3);
    ck_assert_str_eq(names[0], "a");
    ck_assert_str_eq(names[1], "b");
    ck_assert_str_eq(names[2], "e");
    ck_assert_int_eq(rl_harness_zk_children(zk.connect, "/harness", names, 1), 3);
    ck_assert_int_eq(rl_harness_zk_children(zk.connect, "/nope", names, 4), -ENOENT);

    /* The ephemeral goes with its session. */
    zookeeper_close(zh);
    ck_assert_int_eq(rl_harness_zk_wait_children(zk.connect, "/harness", 2, 5000), 0);
    ck_assert_int_eq(rl_harness_zk_wait_children(zk.connect, "/harness", 7, 100), -ETIMEDOUT);

    ck_assert_int_eq(rl_harness_zk_put(zk.connect, "/deep/er/node", "v1", 2), 0);
    ck_assert_int_eq(rl_harness_zk_put(zk.connect, "/deep/er/node", "v2!", 3), 0);
    ck_assert_int_eq(rl_harness_zk_get(zk.connect, "/deep/er/node", buf, sizeof(buf)), 3);
    ck_assert_str_eq(buf, "v2!");

    /* Stop: the JVM is gone. Restart: same port, same data. */
    jvm = zk.pid;
    port = zk.port;
    t0 = mono_ms();
    ck_assert_int_eq(rl_harness_zk_stop(&zk), 0);
    fprintf(stderr, "check_harness: ZooKeeper stopped (SIGTERM) in %lld ms\n",
            (long long)(mono_ms() - t0));
    ck_assert_int_eq(zk.pid, 0);
    ck_assert_int_eq(kill(jvm, 0), -1);
    ck_assert_int_eq(rl_harness_zk_stop(&zk), 0);
    ck_assert_int_eq(rl_harness_wait_port("127.0.0.1", port, 100), -ETIMEDOUT);

    ck_assert_int_eq(rl_harness_zk_restart(&zk), 0);
    fprintf(stderr, "check_harness: ZooKeeper restarted in %lld ms\n", (long long)zk.start_ms);
    ck_assert_int_eq(zk.port, port);
    ck_assert_str_eq(zk.connect, connect);
    ck_assert_int_ne(zk.pid, jvm);
    ck_assert_int_eq(rl_harness_zk_get(zk.connect, "/harness", buf, sizeof(buf)), 5);
    ck_assert_str_eq(buf, "hello");
    ck_assert_int_eq(rl_harness_zk_get(zk.connect, "/deep/er/node", buf, sizeof(buf)), 3);
    ck_assert_int_eq(rl_harness_zk_children(zk.connect, "/harness", names, 4), 2);

    jvm = zk.pid;
    ck_assert_int_eq(rl_harness_zk_restart(&zk), 0);
    ck_assert_int_eq(kill(jvm, 0), -1);
    ck_assert_int_eq(rl_harness_zk_stop(&zk), 0);
}
END_TEST

/* The JVM, like any spawned process, dies when its test process is SIGKILLed. */
START_TEST(test_zk_pdeathsig)
{
    struct rl_harness_zk zk;
    pid_t child, jvm;
    int fds[2];

    /* Created here first, so the child's directory nests in it and is removed with it. */
    ck_assert_ptr_nonnull(rl_harness_tmpdir());
    ck_assert_int_eq(pipe(fds), 0);
    child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        memset(&zk, 0, sizeof(zk));
        ck_assert_int_eq(rl_harness_zk_start(&zk), 0);
        write_all(fds[1], &zk.pid, sizeof(zk.pid));
        for (;;) {
            pause();
        }
    }
    read_all(fds[0], &jvm, sizeof(jvm));
    ck_assert(!proc_gone(jvm));
    ck_assert_int_eq(kill(child, SIGKILL), 0);
    ck_assert_int_eq(waitpid(child, NULL, 0), child);
    ck_assert_msg(wait_gone(jvm, 3000), "JVM %d outlived its parent", (int)jvm);
}
END_TEST

/* rl_harness_cleanup() stops ZooKeeper and every process, and removes the directory. */
START_TEST(test_cleanup_everything)
{
    const char *const argv[] = {"sleep", "100", NULL};
    struct rl_harness_zk zk;
    char dir[256];
    struct stat st;
    pid_t sleeper, jvm;

    memset(&zk, 0, sizeof(zk));
    ck_assert_int_eq(rl_harness_zk_start(&zk), 0);
    ck_assert_int_eq(rl_harness_spawn(argv, NULL, &sleeper), 0);
    jvm = zk.pid;
    snprintf(dir, sizeof(dir), "%s", rl_harness_tmpdir());
    ck_assert_int_eq(stat(zk.dir, &st), 0);

    rl_harness_cleanup();
    ck_assert_int_eq(kill(jvm, 0), -1);
    ck_assert_int_eq(kill(sleeper, 0), -1);
    if (getenv("RL_KEEP_TMP") == NULL) {
        ck_assert_int_eq(stat(dir, &st), -1);
    }
}
END_TEST

/* ---- rl-node and rl-router wrappers, against a fake ------------------------------------ */

/*
 * This binary run as "rl-node" or "rl-router": prints its command line, exits with
 * RL_FAKE_EXIT if set (a bad config), else listens on --listen until SIGTERM or SIGINT.
 */
static int
fake_server(int argc, char **argv)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    const char *listen_arg = NULL, *fail = getenv("RL_FAKE_EXIT");
    sigset_t set;
    int sig, fd;

    for (int i = 0; i < argc; i++) {
        printf("%s%s", i == 0 ? "" : " ", argv[i]);
        if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) {
            listen_arg = argv[i + 1];
        }
    }
    printf("\n");
    fflush(stdout);
    if (fail != NULL) {
        fprintf(stderr, "cluster.conf:1: fake failure\n");
        return atoi(fail);
    }
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    if (listen_arg != NULL) {
        const char *colon = strrchr(listen_arg, ':');
        int one = 1;

        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sin.sin_port = htons((uint16_t)atoi(colon != NULL ? colon + 1 : "0"));
        fd = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 || listen(fd, 64) != 0) {
            perror("fake: listen");
            return 1;
        }
    }
    sigwait(&set, &sig);
    printf("fake: stopping on signal %d\n", sig);
    return 0;
}

/* Points RL_BIN_DIR at a directory where rl-node and rl-router are this binary. */
static void
fake_bin_dir(void)
{
    char dir[256], self[256], link[300];
    ssize_t n;

    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    ck_assert_int_gt(n, 0);
    self[n] = '\0';
    ck_assert_int_eq(rl_harness_tmppath(dir, sizeof(dir), "bin"), 0);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(link, sizeof(link), "%s/rl-node", dir);
    ck_assert_int_eq(symlink(self, link), 0);
    snprintf(link, sizeof(link), "%s/rl-router", dir);
    ck_assert_int_eq(symlink(self, link), 0);
    ck_assert_int_eq(setenv("RL_BIN_DIR", dir, 1), 0);
}

START_TEST(test_server_wrappers)
{
    struct rl_harness_server node, router;
    char conf[256], want[512], buf[1024];
    int port = rl_harness_free_port(), rport = rl_harness_free_port();
    pid_t first;

    fake_bin_dir();
    ck_assert_int_eq(rl_harness_tmppath(conf, sizeof(conf), "cluster.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf, "[cluster]\nname = demo\n"), 0);

    ck_assert_int_eq(rl_harness_node_start(&node, conf, "a", port, RL_HARNESS_TEST_CLOCK), 0);
    ck_assert_int_gt(node.pid, 0);
    ck_assert_int_eq(rl_harness_wait_port("127.0.0.1", port, 100), 0);
    snprintf(want, sizeof(want),
             "rl-node --config %s --name a --listen 127.0.0.1:%d --test-clock\n", conf, port);
    ck_assert_int_gt(rl_harness_read_file(node.log_path, buf, sizeof(buf)), 0);
    ck_assert_str_eq(buf, want);

    first = node.pid;
    ck_assert_int_eq(rl_harness_server_restart(&node), 0);
    ck_assert_int_ne(node.pid, first);
    ck_assert(WIFEXITED(node.status) && WEXITSTATUS(node.status) == 0);
    ck_assert_int_eq(rl_harness_wait_port("127.0.0.1", port, 100), 0);

    ck_assert_int_eq(rl_harness_router_start(&router, conf, rport), 0);
    snprintf(want, sizeof(want), "rl-router --config %s --listen 127.0.0.1:%d --workers %d\n",
             conf, rport, RL_HARNESS_ROUTER_WORKERS);
    ck_assert_int_gt(rl_harness_read_file(router.log_path, buf, sizeof(buf)), 0);
    ck_assert_str_eq(buf, want);

    ck_assert_int_eq(rl_harness_server_stop(&node, SIGTERM, 5000), 0);
    ck_assert(WIFEXITED(node.status) && WEXITSTATUS(node.status) == 0);
    ck_assert_int_eq(node.pid, 0);
    ck_assert_int_eq(rl_harness_server_stop(&node, SIGTERM, 5000), 0);
    ck_assert_int_eq(rl_harness_server_stop(&router, SIGKILL, 0), 0);
    ck_assert(WIFSIGNALED(router.status) && WTERMSIG(router.status) == SIGKILL);

    /* A program that exits at once (a bad config) is reported at once, with its status. */
    ck_assert_int_eq(setenv("RL_FAKE_EXIT", "2", 1), 0);
    ck_assert_int_eq(rl_harness_node_start(&node, conf, "b", rl_harness_free_port(), 0), -ECHILD);
    ck_assert(WIFEXITED(node.status) && WEXITSTATUS(node.status) == 2);
    ck_assert_int_eq(node.pid, 0);
}
END_TEST

/* ---- Fault proxy ----------------------------------------------------------------------- */

#define ECHO_CONNS 512

/* An echo server on 127.0.0.1 (a thread): writes back whatever it reads, and counts it. */
struct echo {
    int lfd, port;
    atomic_int stop;
    atomic_long received; /* bytes read, every connection */
    atomic_int accepted;
    atomic_int open;   /* connections now */
    atomic_int resets; /* connections that ended with ECONNRESET */
    pthread_t thread;
};

static void *
echo_main(void *arg)
{
    struct echo *e = arg;
    struct pollfd pfd[1 + ECHO_CONNS];
    char buf[65536];
    int n = 1;

    pfd[0].fd = e->lfd;
    pfd[0].events = POLLIN;
    while (!atomic_load(&e->stop)) {
        if (poll(pfd, (nfds_t)n, 20) <= 0) {
            continue;
        }
        /* Backwards, so that the last entry moved into a closed one's place was seen. */
        for (int j = n - 1; j >= 1; j--) {
            ssize_t got = 0, sent = 0;

            if (pfd[j].revents == 0) {
                continue;
            }
            got = read(pfd[j].fd, buf, sizeof(buf));
            if (got < 0 && errno == ECONNRESET) {
                atomic_fetch_add(&e->resets, 1);
            }
            if (got > 0) {
                atomic_fetch_add(&e->received, got);
            }
            while (got > 0 && sent < got) {
                ssize_t w = send(pfd[j].fd, buf + sent, (size_t)(got - sent), MSG_NOSIGNAL);

                if (w <= 0) {
                    break;
                }
                sent += w;
            }
            if (got <= 0 || sent < got) {
                close(pfd[j].fd);
                pfd[j] = pfd[--n];
                atomic_fetch_sub(&e->open, 1);
            }
        }
        if (pfd[0].revents & POLLIN) {
            int c = accept4(e->lfd, NULL, NULL, SOCK_CLOEXEC);

            if (c >= 0 && n < 1 + ECHO_CONNS) {
                pfd[n].fd = c;
                pfd[n].events = POLLIN;
                pfd[n++].revents = 0;
                atomic_fetch_add(&e->accepted, 1);
                atomic_fetch_add(&e->open, 1);
            } else if (c >= 0) {
                close(c);
            }
        }
    }
    for (int j = 0; j < n; j++) {
        close(pfd[j].fd);
    }
    return NULL;
}

static void
echo_start(struct echo *e)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t len = sizeof(sin);

    memset(e, 0, sizeof(*e));
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    e->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(e->lfd, 0);
    ck_assert_int_eq(bind(e->lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    ck_assert_int_eq(listen(e->lfd, SOMAXCONN), 0);
    ck_assert_int_eq(getsockname(e->lfd, (struct sockaddr *)&sin, &len), 0);
    e->port = ntohs(sin.sin_port);
    ck_assert_int_eq(pthread_create(&e->thread, NULL, echo_main, e), 0);
}

static void
echo_stop(struct echo *e)
{
    atomic_store(&e->stop, 1);
    pthread_join(e->thread, NULL);
}

/* A blocking connection to 127.0.0.1:port. */
static int
dial(int port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = htons((uint16_t)port);
    RL_CHECK_INT_GE(fd, 0);
    RL_CHECK_INT_EQ(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    return fd;
}

/* dial() for a proxy in RESET: its reset may reach the client while connect(2) still runs
 * (then connect fails with ECONNRESET or EPIPE: reset as much as a closed connection is);
 * -1 then, else the connected fd. */
static int
dial_reset(int port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = htons((uint16_t)port);
    RL_CHECK_INT_GE(fd, 0);
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        int err = errno;

        close(fd);
        ck_assert_msg(err == ECONNRESET || err == EPIPE, "connect: %s", strerror(err));
        return -1;
    }
    return fd;
}

static void
send_str(int fd, const char *s)
{
    ck_assert_int_eq(send(fd, s, strlen(s), MSG_NOSIGNAL), (ssize_t)strlen(s));
}

/* One read within ms: the bytes read, 0 at EOF, -errno, or -ETIMEDOUT if nothing came. */
static ssize_t
recv_within(int fd, char *buf, size_t len, int ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    ssize_t n;

    if (poll(&pfd, 1, ms) == 0) {
        return -ETIMEDOUT;
    }
    n = recv(fd, buf, len, MSG_DONTWAIT);
    return n < 0 ? -errno : n;
}

/* Sends s and reads it back, whole, within 5 s. */
static void
expect_echo(int fd, const char *s)
{
    char buf[256] = {0};
    size_t want = strlen(s), got = 0;
    int64_t deadline = mono_ms() + 5000;

    send_str(fd, s);
    while (got < want) {
        int left = (int)(deadline - mono_ms());
        ssize_t n = recv_within(fd, buf + got, want - got, left > 0 ? left : 0);

        ck_assert_msg(n > 0, "echo of \"%s\": %zd after %zu bytes", s, n, got);
        got += (size_t)n;
    }
    ck_assert_str_eq(buf, s);
}

/* Nothing arrives within ms. */
static void
expect_silence(int fd, int ms)
{
    char buf[64];

    ck_assert_int_eq(recv_within(fd, buf, sizeof(buf), ms), -ETIMEDOUT);
}

/* The connection is closed by the far end within 5 s: reset, or (!must_reset) EOF. */
static void
expect_closed(int fd, bool must_reset)
{
    char buf[64];
    ssize_t n = recv_within(fd, buf, sizeof(buf), 5000);

    ck_assert_msg(n == -ECONNRESET || (n == 0 && !must_reset), "read %zd, not a %s", n,
                  must_reset ? "reset" : "close");
}

static struct rl_proxy_stats
stats_of(struct rl_proxy *p)
{
    struct rl_proxy_stats st;

    rl_proxy_stats(p, &st);
    return st;
}

/* Waits up to 5 s for a condition on the proxy's stats (st) or anything else. */
#define WAIT_FOR(cond)                                                                             \
    do {                                                                                           \
        int64_t wait_deadline_ = mono_ms() + 5000;                                                 \
        while (!(cond) && mono_ms() < wait_deadline_) {                                            \
            usleep(5000);                                                                          \
        }                                                                                          \
        ck_assert(cond);                                                                           \
    } while (0)

static struct rl_proxy *
proxy_before(const struct echo *e, int *port)
{
    struct rl_proxy *p = NULL;

    *port = 0;
    ck_assert_int_eq(rl_proxy_start(&p, e->port, port), 0);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_gt(*port, 0);
    return p;
}

START_TEST(test_proxy_pass)
{
    struct echo e;
    struct rl_proxy *p, *q;
    int port, qport = 0, fd;

    echo_start(&e);
    p = proxy_before(&e, &port);
    fd = dial(port);
    expect_echo(fd, "hello");
    expect_echo(fd, "again");
    WAIT_FOR(stats_of(p).bytes_down == 10);
    ck_assert_uint_eq(stats_of(p).bytes_up, 10);
    ck_assert_uint_eq(stats_of(p).accepted, 1);
    ck_assert_int_eq(stats_of(p).open, 1);
    ck_assert_int_eq(e.accepted, 1);
    /* A close on one side closes the pair: the target sees it too. */
    close(fd);
    WAIT_FOR(stats_of(p).open == 0);
    WAIT_FOR(e.open == 0);

    /* A target that refuses the dial: the client sees a close. */
    ck_assert_int_eq(rl_proxy_start(&q, rl_harness_free_port(), &qport), 0);
    fd = dial(qport);
    expect_closed(fd, false);
    close(fd);
    WAIT_FOR(stats_of(q).accepted == 1 && stats_of(q).open == 0);
    rl_proxy_stop(q);
    rl_proxy_stop(p);
    rl_proxy_stop(NULL);
    echo_stop(&e);
}
END_TEST

/*
 * 4 MiB both ways through one pair, the client reading only when it cannot write: the
 * proxy's queues fill, it stops reading and resumes, and every byte arrives in order.
 */
START_TEST(test_proxy_bulk)
{
    enum { TOTAL = 4 << 20 };
    struct echo e;
    struct rl_proxy *p;
    unsigned char *out = malloc(TOTAL), *in = malloc(TOTAL);
    size_t sent = 0, got = 0;
    int64_t deadline = mono_ms() + 20000;
    int port, fd;

    ck_assert(out != NULL && in != NULL);
    for (size_t i = 0; i < TOTAL; i++) {
        out[i] = (unsigned char)(i * 2654435761u >> 13);
    }
    echo_start(&e);
    p = proxy_before(&e, &port);
    rl_proxy_set_delay(p, 5);
    fd = dial(port);
    ck_assert_int_eq(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
    while (got < TOTAL) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN | (sent < TOTAL ? POLLOUT : 0)};
        ssize_t n = -1;

        ck_assert_msg(mono_ms() < deadline, "stuck at %zu sent, %zu received", sent, got);
        ck_assert_int_ge(poll(&pfd, 1, 1000), 0);
        if (sent < TOTAL && (pfd.revents & POLLOUT)) {
            n = send(fd, out + sent, TOTAL - sent, MSG_NOSIGNAL);
            if (n > 0) {
                sent += (size_t)n;
                continue;
            }
            ck_assert_int_eq(errno, EAGAIN);
        }
        if (pfd.revents & POLLIN) {
            n = recv(fd, in + got, TOTAL - got, 0);
            ck_assert_int_gt(n, 0);
            got += (size_t)n;
        }
    }
    ck_assert(memcmp(in, out, TOTAL) == 0);
    WAIT_FOR(stats_of(p).bytes_down == TOTAL);
    ck_assert_uint_eq(stats_of(p).bytes_up, TOTAL);
    close(fd);
    rl_proxy_stop(p);
    echo_stop(&e);
    free(in);
    free(out);
}
END_TEST

/* Sends from a non-blocking fd until 500 ms pass without progress or limit bytes went. */
static size_t
send_until_stalled(int fd, size_t limit)
{
    static const char zeros[65536];
    size_t total = 0;

    while (total < limit) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        ssize_t n;

        if (poll(&pfd, 1, 500) == 0) {
            break;
        }
        n = send(fd, zeros, sizeof(zeros), MSG_NOSIGNAL);
        if (n < 0) {
            RL_CHECK(errno == EAGAIN, "send: errno %d", errno);
            continue;
        }
        total += (size_t)n;
    }
    return total;
}

/*
 * A target that reads nothing: the proxy's queue stops at 1 MiB and the client is stalled,
 * after what the kernel's socket buffers hold (tens of MiB at most), not at 256 MiB. In
 * DROP_UP the client is read again whatever the queue holds.
 */
START_TEST(test_proxy_backpressure)
{
    enum { LIMIT = 256 << 20, MORE = 16 << 20 };
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t len = sizeof(sin);
    struct rl_proxy *p = NULL;
    int sink, small = 65536, port = 0, fd;
    size_t sent;

    /* Listens and never accepts: connections complete in the backlog and are never read. */
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sink = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_eq(setsockopt(sink, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
    ck_assert_int_eq(bind(sink, (struct sockaddr *)&sin, sizeof(sin)), 0);
    ck_assert_int_eq(listen(sink, 8), 0);
    ck_assert_int_eq(getsockname(sink, (struct sockaddr *)&sin, &len), 0);
    ck_assert_int_eq(rl_proxy_start(&p, ntohs(sin.sin_port), &port), 0);
    fd = dial(port);
    ck_assert_int_eq(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
    sent = send_until_stalled(fd, LIMIT);
    fprintf(stderr,
            "check_harness: a client of a target that reads nothing stalled after %zu KiB\n",
            sent >> 10);
    ck_assert_uint_lt(sent, LIMIT);
    ck_assert_uint_gt(sent, 1 << 20);
    ck_assert_uint_lt(stats_of(p).bytes_up, LIMIT);

    rl_proxy_set_mode(p, RL_PROXY_DROP_UP);
    ck_assert_uint_eq(send_until_stalled(fd, MORE), MORE);
    WAIT_FOR(stats_of(p).dropped_up >= MORE);
    close(fd);
    rl_proxy_stop(p);
    close(sink);
}
END_TEST

START_TEST(test_proxy_delay)
{
    struct echo e;
    struct rl_proxy *p;
    char buf[8] = {0};
    int port, fd;
    size_t got = 0;
    int64_t t0, took;

    echo_start(&e);
    p = proxy_before(&e, &port);
    fd = dial(port);
    expect_echo(fd, "warm");
    rl_proxy_set_delay(p, 200);
    t0 = mono_ms();
    expect_echo(fd, "ping");
    took = mono_ms() - t0;
    fprintf(stderr, "check_harness: round trip through a 200 ms proxy: %lld ms\n", (long long)took);
    ck_assert_int_ge(took, 400);
    ck_assert_int_lt(took, 5000);

    /* Order is kept: three writes 20 ms apart come back as written. */
    for (int i = 0; i < 3; i++) {
        send_str(fd, (const char[]){(char)('a' + i), '\0'});
        usleep(20 * 1000);
    }
    while (got < 3) {
        ssize_t n = recv_within(fd, buf + got, 3 - got, 5000);

        ck_assert_int_gt(n, 0);
        got += (size_t)n;
    }
    ck_assert_str_eq(buf, "abc");

    rl_proxy_set_delay(p, 0);
    expect_echo(fd, "fast");
    close(fd);
    rl_proxy_stop(p);
    echo_stop(&e);
}
END_TEST

START_TEST(test_proxy_blackhole)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    struct echo e;
    struct rl_proxy *p;
    int port, fd, gone, late;

    echo_start(&e);
    p = proxy_before(&e, &port);
    fd = dial(port);
    expect_echo(fd, "a");
    gone = dial(port);
    expect_echo(gone, "g");
    rl_proxy_set_mode(p, RL_PROXY_BLACKHOLE);
    send_str(fd, "b");
    /* A client that resets its connection: the target must not hear of it yet. */
    ck_assert_int_eq(setsockopt(gone, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
    close(gone);
    expect_silence(fd, 300);
    ck_assert_int_eq(e.received, 2);
    ck_assert_int_eq(e.open, 2);

    /* A new connection is accepted, but the target is not dialed. */
    late = dial(port);
    send_str(late, "c");
    WAIT_FOR(stats_of(p).accepted == 3);
    ck_assert_int_eq(stats_of(p).open, 3);
    expect_silence(late, 100);
    ck_assert_int_eq(e.accepted, 2);
    ck_assert_int_eq(e.received, 2);
    ck_assert_int_eq(e.open, 2);

    /* Healed: what was held goes through, on the same connections; the reset one closes. */
    rl_proxy_set_mode(p, RL_PROXY_PASS);
    {
        char buf[4] = {0};

        ck_assert_int_eq(recv_within(fd, buf, sizeof(buf) - 1, 5000), 1);
        ck_assert_str_eq(buf, "b");
        ck_assert_int_eq(recv_within(late, buf, sizeof(buf) - 1, 5000), 1);
        ck_assert_str_eq(buf, "c");
    }
    ck_assert_int_eq(e.accepted, 3);
    WAIT_FOR(stats_of(p).open == 2);
    WAIT_FOR(e.open == 2);
    expect_echo(fd, "d");
    expect_echo(late, "e");
    close(fd);
    close(late);
    rl_proxy_stop(p);
    echo_stop(&e);
}
END_TEST

START_TEST(test_proxy_reset)
{
    struct echo e;
    struct rl_proxy *p;
    int port, fd, late;
    int64_t t0;

    echo_start(&e);
    p = proxy_before(&e, &port);
    fd = dial(port);
    expect_echo(fd, "a");
    t0 = mono_ms();
    rl_proxy_set_mode(p, RL_PROXY_RESET);
    expect_closed(fd, true);
    fprintf(stderr, "check_harness: RESET seen by the client in %lld ms\n",
            (long long)(mono_ms() - t0));
    /* A connection accepted in RESET is reset at once. */
    late = dial_reset(port);
    if (late >= 0) {
        expect_closed(late, true);
    }
    WAIT_FOR(stats_of(p).resets == 2);
    ck_assert_int_eq(stats_of(p).open, 0);
    /* The target's side was reset too (the late one never reached it). */
    WAIT_FOR(e.open == 0);
    ck_assert_int_eq(e.resets, 1);
    ck_assert_int_eq(e.accepted, 1);
    close(fd);
    if (late >= 0) {
        close(late);
    }

    /* A pulse (RESET, then PASS at once) still resets the pairs open then. */
    rl_proxy_set_mode(p, RL_PROXY_PASS);
    fd = dial(port);
    expect_echo(fd, "b");
    rl_proxy_set_mode(p, RL_PROXY_RESET);
    rl_proxy_set_mode(p, RL_PROXY_PASS);
    expect_closed(fd, true);
    close(fd);
    fd = dial(port);
    expect_echo(fd, "c");
    close(fd);
    rl_proxy_stop(p);
    echo_stop(&e);
}
END_TEST

START_TEST(test_proxy_drop_up)
{
    struct echo e;
    struct rl_proxy *p;
    int port, fd;

    echo_start(&e);
    p = proxy_before(&e, &port);
    fd = dial(port);
    expect_echo(fd, "a");
    rl_proxy_set_mode(p, RL_PROXY_DROP_UP);
    send_str(fd, "hello");
    WAIT_FOR(stats_of(p).dropped_up == 5);
    expect_silence(fd, 300);
    ck_assert_int_eq(e.received, 1);
    ck_assert_uint_eq(stats_of(p).bytes_up, 1);
    /* Back to PASS: the dropped bytes are gone, not late. */
    rl_proxy_set_mode(p, RL_PROXY_PASS);
    expect_echo(fd, "x");
    expect_silence(fd, 200);
    ck_assert_int_eq(e.received, 2);
    close(fd);
    rl_proxy_stop(p);
    echo_stop(&e);
}
END_TEST

START_TEST(test_proxy_drop_down)
{
    struct echo e;
    struct rl_proxy *p;
    int port, fd;

    echo_start(&e);
    p = proxy_before(&e, &port);
    fd = dial(port);
    expect_echo(fd, "a");
    rl_proxy_set_mode(p, RL_PROXY_DROP_DOWN);
    send_str(fd, "hello");
    WAIT_FOR(e.received == 6);
    WAIT_FOR(stats_of(p).dropped_down == 5);
    expect_silence(fd, 300);
    ck_assert_uint_eq(stats_of(p).bytes_up, 6);
    ck_assert_uint_eq(stats_of(p).bytes_down, 1);
    rl_proxy_set_mode(p, RL_PROXY_PASS);
    expect_echo(fd, "y");
    expect_silence(fd, 200);
    close(fd);
    rl_proxy_stop(p);
    echo_stop(&e);
}
END_TEST

/* 300 connections at once: RL_PROXY_PAIRS are served, the rest closed. */
START_TEST(test_proxy_pairs_cap)
{
    enum { N = 300 };
    struct echo e;
    struct rl_proxy *p;
    struct rlimit rl;
    struct pollfd pfd[N];
    int port, served = 0, closed = 0, fd;
    int64_t deadline;

    /* 300 clients, 512 proxy sockets, 256 echo sockets: past a soft limit of 1024. */
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < 2048) {
        rl.rlim_cur = rl.rlim_max < 2048 ? rl.rlim_max : 2048;
        ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    ck_assert_uint_ge(rl.rlim_cur, 1200);
    echo_start(&e);
    p = proxy_before(&e, &port);
    for (int i = 0; i < N; i++) {
        pfd[i].fd = dial(port);
        pfd[i].events = POLLIN;
    }
    WAIT_FOR(stats_of(p).accepted == N);
    ck_assert_int_eq(stats_of(p).open, RL_PROXY_PAIRS);
    for (int i = 0; i < N; i++) {
        (void)send(pfd[i].fd, "z", 1, MSG_NOSIGNAL); /* fails on the closed ones, or not */
    }
    deadline = mono_ms() + 5000;
    while (served + closed < N && mono_ms() < deadline) {
        ck_assert_int_ge(poll(pfd, N, 100), 0);
        for (int i = 0; i < N; i++) {
            char c;
            ssize_t n;

            if (pfd[i].fd < 0 || pfd[i].revents == 0) {
                continue;
            }
            n = recv(pfd[i].fd, &c, 1, MSG_DONTWAIT);
            if (n == 1) {
                RL_CHECK(c == 'z');
                served++;
            } else {
                RL_CHECK(n == 0 || errno == ECONNRESET, "read %zd, errno %d", n, errno);
                closed++;
            }
            close(pfd[i].fd);
            pfd[i].fd = -1;
        }
    }
    ck_assert_int_eq(served, RL_PROXY_PAIRS);
    ck_assert_int_eq(closed, N - RL_PROXY_PAIRS);
    ck_assert_int_eq(e.accepted, RL_PROXY_PAIRS);
    WAIT_FOR(stats_of(p).open == 0);
    fd = dial(port);
    expect_echo(fd, "after");
    close(fd);
    rl_proxy_stop(p);
    echo_stop(&e);
}
END_TEST

static Suite *
harness_suite(void)
{
    Suite *s = suite_create("harness");
    TCase *proc = tcase_create("process");
    TCase *files = tcase_create("files");
    TCase *zk = tcase_create("zookeeper");
    TCase *proxy = tcase_create("proxy");

    tcase_add_checked_fixture(proc, NULL, teardown);
    tcase_set_timeout(proc, 20);
    tcase_add_test(proc, test_spawn_cleanup);
    tcase_add_test(proc, test_spawn_errors);
    tcase_add_test(proc, test_run_output);
    tcase_add_test(proc, test_wait_stop_status);
    tcase_add_test(proc, test_cleanup_at_exit);
    tcase_add_test(proc, test_cleanup_on_sigterm);
    tcase_add_test(proc, test_pdeathsig);
    tcase_add_test(proc, test_tmpdir_per_process);
    tcase_add_test(proc, test_runner_sweeps);
    tcase_add_test(proc, test_runner_killed);
    tcase_add_test(proc, test_server_wrappers);
    suite_add_tcase(s, proc);

    tcase_add_checked_fixture(files, NULL, teardown);
    tcase_set_timeout(files, 10);
    tcase_add_test(files, test_files);
    tcase_add_test(files, test_free_ports);
    tcase_add_test(files, test_wait_port);
    suite_add_tcase(s, files);

    /* A JVM start is about a second here, several under load or sanitizers. */
    tcase_add_checked_fixture(zk, NULL, teardown);
    tcase_set_timeout(zk, 90);
    tcase_add_test(zk, test_zk_lifecycle);
    tcase_add_test(zk, test_zk_pdeathsig);
    tcase_add_test(zk, test_cleanup_everything);
    suite_add_tcase(s, zk);

    tcase_add_checked_fixture(proxy, NULL, teardown);
    tcase_set_timeout(proxy, 30);
    tcase_add_test(proxy, test_proxy_pass);
    tcase_add_test(proxy, test_proxy_bulk);
    tcase_add_test(proxy, test_proxy_backpressure);
    tcase_add_test(proxy, test_proxy_delay);
    tcase_add_test(proxy, test_proxy_blackhole);
    tcase_add_test(proxy, test_proxy_reset);
    tcase_add_test(proxy, test_proxy_drop_up);
    tcase_add_test(proxy, test_proxy_drop_down);
    tcase_add_test(proxy, test_proxy_pairs_cap);
    suite_add_tcase(s, proxy);
    return s;
}

int
main(int argc, char **argv)
{
    const char *base = strrchr(argv[0], '/');

    base = base != NULL ? base + 1 : argv[0];
    if (strcmp(base, "rl-node") == 0 || strcmp(base, "rl-router") == 0) {
        return fake_server(argc, argv);
    }
    if (getenv("RL_HARNESS_INNER") != NULL) {
        return run_inner();
    }
    return rl_test_run(harness_suite());
}
