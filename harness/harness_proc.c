/*
 * harness_proc: the processes of integration tests (harness.h): rl_harness_spawn puts each
 * in its own process group, dying with its parent, its output in a log; waits, stops and
 * kills are bounded; whatever a test leaves running is killed however the test ends (at
 * exit and at cleanup, through the hook it gives harness.c, and on a fatal signal, whose
 * handler it installs). Stands on harness.c (the lock, temp paths, the clock); rl-node,
 * rl-router and ZooKeeper are started on it by harness_server.c and harness_zk.c. Not for
 * temp files or ports (harness.c), and not for production code: it assumes Linux (prctl,
 * waitid, close_range).
 */
#define RL_HARNESS_INTERNAL
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef RL_BIN_DIR
#define RL_BIN_DIR "."
#endif

extern char **environ;

/*
 * A registered process. pid > 0 while it is ours to kill; -1 while a spawn is under way;
 * 0 when free. Both fields are atomics because the signal handler reads them; owner is
 * written before pid, so the handler never pairs a pid with a stale owner.
 */
struct harness_proc {
    _Atomic pid_t pid;
    _Atomic pid_t owner;
};

static struct harness_proc procs[RL_HARNESS_MAX_PROCS];

/* The process that made itself die with its parent (die_with_parent), under the lock. */
static pid_t chained;

/* The signals that end a test process by default, and which we then let do so. */
static const int fatal_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGALRM};

/* Opens with O_CLOEXEC and moves the descriptor above 2, so a child's dup2() cannot clash. */
static int
open_high(const char *path, int flags, mode_t mode)
{
    int fd, hi;

    fd = open(path, flags | O_CLOEXEC, mode);
    if (fd < 0 || fd > 2) {
        return fd < 0 ? -errno : fd;
    }
    hi = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    close(fd);
    return hi < 0 ? -errno : hi;
}

/* What a cluster's first process waits for (rl_harness_set_hour_clear); 0: nothing. */
static int hour_clear_ms;

void
rl_harness_set_hour_clear(int need_ms)
{
    hour_clear_ms = need_ms;
}

void
rl_harness_first_of_cluster(void)
{
    if (hour_clear_ms > 0 && rl_harness_live_procs() == 0) {
        rl_harness_clear_of_hour(hour_clear_ms);
    }
}

int
rl_harness_live_procs(void)
{
    int n = 0;

    for (size_t i = 0; i < RL_HARNESS_MAX_PROCS; i++) {
        n += atomic_load(&procs[i].pid) > 0;
    }
    return n;
}

/* ---- Ending them however the test ends ------------------------------------------------- */

/* Async-signal-safe: only atomics, getpid() and kill(). */
static void
kill_owned(void)
{
    pid_t me = getpid();

    for (size_t i = 0; i < RL_HARNESS_MAX_PROCS; i++) {
        pid_t pid = atomic_load(&procs[i].pid);

        if (pid > 0 && atomic_load(&procs[i].owner) == me) {
            kill(-pid, SIGKILL);
        }
    }
}

/*
 * Installed only over SIG_DFL, so it runs only when the signal was going to end the process
 * anyway: it takes our processes' groups down first, then lets the default action happen.
 * The temp directory stays for the root process's exit to remove: removing a tree is not
 * async-signal-safe.
 */
static void
on_fatal_signal(int sig)
{
    struct sigaction dfl;

    kill_owned();
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, NULL);
    raise(sig);
}

static void
install_signals(void)
{
    for (size_t i = 0; i < sizeof(fatal_signals) / sizeof(fatal_signals[0]); i++) {
        struct sigaction cur, sa;

        if (sigaction(fatal_signals[i], NULL, &cur) != 0 || cur.sa_handler != SIG_DFL ||
            (cur.sa_flags & SA_SIGINFO) != 0) {
            continue;
        }
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_fatal_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(fatal_signals[i], &sa, NULL);
    }
}

/*
 * A forked test (Check's fork mode) dies with its runner, as the processes it spawns die
 * with it: else a SIGKILL of the test binary (a CTest timeout) would leave the test running
 * without Check's timer, and its ZooKeeper with it. The root process is left alone.
 */
static void
die_with_parent(void)
{
    pid_t me = getpid(), parent;

    rl_harness_lock();
    if (me == rl_harness_root_pid() || chained == me) {
        rl_harness_unlock();
        return;
    }
    chained = me;
    rl_harness_unlock();
    parent = getppid();
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 && getppid() != parent) {
        kill(me, SIGKILL);
    }
}

/* rl_harness_cleanup's part (harness.c calls it through rl_harness_on_cleanup): every
 * process of ours killed as a group and reaped. */
static void
procs_cleanup(void)
{
    pid_t me = getpid();

    kill_owned();
    for (int i = 0; i < RL_HARNESS_MAX_PROCS; i++) {
        pid_t pid = atomic_load(&procs[i].pid);

        if (pid > 0 && atomic_load(&procs[i].owner) == me) {
            atomic_store(&procs[i].pid, 0);
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
            }
        }
    }
}

/* ---- Processes ------------------------------------------------------------------------- */

static int
find_proc(pid_t pid)
{
    pid_t me = getpid();

    if (pid <= 0) {
        return -1;
    }
    for (int i = 0; i < RL_HARNESS_MAX_PROCS; i++) {
        if (atomic_load(&procs[i].pid) == pid && atomic_load(&procs[i].owner) == me) {
            return i;
        }
    }
    return -1;
}

/* Takes a free slot, or one inherited from an ancestor, which is not ours to manage. */
static int
reserve_proc(void)
{
    pid_t me = getpid();
    int slot = -1;

    rl_harness_lock();
    for (int i = 0; i < RL_HARNESS_MAX_PROCS; i++) {
        if (atomic_load(&procs[i].pid) == 0 || atomic_load(&procs[i].owner) != me) {
            atomic_store(&procs[i].pid, 0);
            atomic_store(&procs[i].owner, me);
            atomic_store(&procs[i].pid, -1);
            slot = i;
            break;
        }
    }
    rl_harness_unlock();
    return slot;
}

/* 1 if pid has exited (left a zombie, not reaped), 0 if it runs, -errno (ECHILD). */
static int
has_exited(pid_t pid)
{
    siginfo_t si;

    memset(&si, 0, sizeof(si));
    while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
        if (errno != EINTR) {
            return -errno;
        }
    }
    return si.si_pid == pid ? 1 : 0;
}

/*
 * Reaps an exited process of slot. The slot is cleared before waitpid() so that the signal
 * handler can never signal a pid the kernel has recycled; until it is reaped the zombie
 * keeps its pid (and process group id) reserved, so the straggler kill is safe too.
 */
static void
reap(int slot, pid_t pid, int *status)
{
    int st = 0;

    kill(-pid, SIGKILL);
    atomic_store(&procs[slot].pid, 0);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (status != NULL) {
        *status = st;
    }
}

/* Waits for exit up to timeout_ms (< 0: forever). 1 exited, 0 still runs, -ECHILD. */
static int
wait_exit(pid_t pid, int timeout_ms)
{
    int64_t deadline = rl_harness_now_ms() + timeout_ms;
    int step = 1, rc;

    for (;;) {
        rc = has_exited(pid);
        if (rc != 0) {
            return rc;
        }
        if (timeout_ms >= 0 && rl_harness_now_ms() >= deadline) {
            return 0;
        }
        rl_harness_sleep_ms(step);
        step = step < 16 ? step * 2 : 20;
    }
}

static int
resolve_program(const char *name, char *out, size_t len)
{
    const char *dir, *path, *end;
    struct stat st;
    int n;

    if (strchr(name, '/') != NULL) {
        n = snprintf(out, len, "%s", name);
        return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
    }
    dir = getenv("RL_BIN_DIR");
    if (dir == NULL || dir[0] == '\0') {
        dir = RL_BIN_DIR;
    }
    n = snprintf(out, len, "%s/%s", dir, name);
    if (n > 0 && (size_t)n < len && stat(out, &st) == 0 && S_ISREG(st.st_mode) &&
        access(out, X_OK) == 0) {
        return 0;
    }
    path = getenv("PATH");
    if (path == NULL) {
        path = "/usr/local/bin:/usr/bin:/bin";
    }
    for (; *path != '\0'; path = *end == ':' ? end + 1 : end) {
        end = strchrnul(path, ':');
        if (end == path) {
            n = snprintf(out, len, "./%s", name);
        } else {
            n = snprintf(out, len, "%.*s/%s", (int)(end - path), path, name);
        }
        if (n > 0 && (size_t)n < len && stat(out, &st) == 0 && S_ISREG(st.st_mode) &&
            access(out, X_OK) == 0) {
            return 0;
        }
    }
    return -ENOENT;
}

static void
child_fd(int from, int to)
{
    if (from == to) {
        fcntl(to, F_SETFD, 0);
    } else {
        dup2(from, to);
    }
}

/*
 * Runs in the forked child: async-signal-safe calls only, since the test process may have
 * threads (the ZooKeeper client's). Every signal is blocked on entry.
 */
static void
child_exec(const char *path, const char *const argv[], int infd, int logfd, int errfd, pid_t parent)
{
    struct sigaction dfl;
    sigset_t none;
    int err;

    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++) {
        sigaction(sig, &dfl, NULL);
    }
    /* If the parent died before prctl(), nobody will send the death signal: leave now. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) {
        _exit(127);
    }
    setpgid(0, 0);
    child_fd(infd, 0);
    child_fd(logfd, 1);
    child_fd(logfd, 2);
    if (errfd > 3) {
        close_range(3, (unsigned)errfd - 1, 0);
    }
    close_range((unsigned)errfd + 1, ~0u, 0);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(path, (char *const *)argv, environ);
    err = errno;
    while (write(errfd, &err, sizeof(err)) < 0 && errno == EINTR) {
    }
    _exit(127);
}

int
rl_harness_spawn(const char *const argv[], const char *log_path, pid_t *pid)
{
    char path[PATH_MAX];
    sigset_t all, old;
    pid_t parent = getpid(), child;
    int infd = -1, logfd = -1, pipefd[2] = {-1, -1}, slot = -1, err = 0, rc;
    ssize_t n;

    if (argv == NULL || argv[0] == NULL || pid == NULL) {
        return -EINVAL;
    }
    rc = resolve_program(argv[0], path, sizeof(path));
    if (rc < 0) {
        return rc;
    }
    infd = open_high("/dev/null", O_RDONLY, 0);
    logfd =
        open_high(log_path != NULL ? log_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (infd < 0 || logfd < 0) {
        rc = infd < 0 ? infd : logfd;
        goto out;
    }
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        rc = -errno;
        goto out;
    }
    if (pipefd[1] < 3) {
        int hi = fcntl(pipefd[1], F_DUPFD_CLOEXEC, 3);

        close(pipefd[1]);
        pipefd[1] = hi;
        if (hi < 0) {
            rc = -errno;
            goto out;
        }
    }
    slot = reserve_proc();
    if (slot < 0) {
        rc = -EAGAIN;
        goto out;
    }
    rl_harness_on_cleanup(procs_cleanup);
    install_signals();
    die_with_parent();

    /* Blocked across fork so that no handler of ours runs in the child before exec. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    child = fork();
    if (child == 0) {
        child_exec(path, argv, infd, logfd, pipefd[1], parent);
    }
    if (child < 0) {
        rc = -errno;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        atomic_store(&procs[slot].pid, 0);
        goto out;
    }
    /* Also here, so the group exists before anyone may want to kill it. */
    setpgid(child, child);
    atomic_store(&procs[slot].pid, child);
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    close(pipefd[1]);
    pipefd[1] = -1;
    do {
        n = read(pipefd[0], &err, sizeof(err));
    } while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof(err)) {
        reap(slot, child, NULL);
        rc = -err;
        goto out;
    }
    *pid = child;
    rc = 0;
out:
    if (pipefd[0] >= 0) {
        close(pipefd[0]);
    }
    if (pipefd[1] >= 0) {
        close(pipefd[1]);
    }
    if (logfd >= 0) {
        close(logfd);
    }
    if (infd >= 0) {
        close(infd);
    }
    return rc;
}

int
rl_harness_wait(pid_t pid, int timeout_ms, int *status)
{
    int slot = find_proc(pid), rc;

    if (slot < 0) {
        return -ECHILD;
    }
    rc = wait_exit(pid, timeout_ms < 0 ? 0 : timeout_ms);
    if (rc < 0) {
        atomic_store(&procs[slot].pid, 0);
        return rc;
    }
    if (rc == 0) {
        return -ETIMEDOUT;
    }
    reap(slot, pid, status);
    return 0;
}

int
rl_harness_stop(pid_t pid, int sig, int timeout_ms, int *status)
{
    int slot = find_proc(pid), rc = 0, exited = 0;

    if (slot < 0) {
        return -ECHILD;
    }
    if (sig != 0 && sig != SIGKILL) {
        kill(pid, sig);
        exited = wait_exit(pid, timeout_ms < 0 ? 0 : timeout_ms);
        if (exited < 0) {
            atomic_store(&procs[slot].pid, 0);
            return exited;
        }
        rc = exited ? 0 : -ETIMEDOUT;
    }
    if (!exited) {
        kill(-pid, SIGKILL);
        if (wait_exit(pid, -1) < 0) {
            atomic_store(&procs[slot].pid, 0);
            return -ECHILD;
        }
    }
    reap(slot, pid, status);
    return rc;
}

int
rl_harness_pause(pid_t pid)
{
    int64_t deadline = rl_harness_now_ms() + 10000;
    char path[64], buf[512];

    if (kill(pid, SIGSTOP) != 0) {
        return -errno;
    }
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    while (rl_harness_now_ms() < deadline) {
        FILE *f = fopen(path, "r");
        size_t n = f != NULL ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        const char *p;

        if (f != NULL) {
            fclose(f);
        }
        buf[n] = '\0';
        p = strrchr(buf, ')'); /* "pid (comm) S ...": the state follows the name */
        if (p != NULL && (p[2] == 'T' || p[2] == 't')) {
            return 0;
        }
        usleep(1000);
    }
    return -ETIMEDOUT;
}

int
rl_harness_kill9(pid_t pid)
{
    return rl_harness_stop(pid, SIGKILL, 0, NULL);
}

/*
 * Waits until probe(port) succeeds while watching pid. 0 when ready; -ECHILD if the process
 * exited first (reaped, *status set); -ETIMEDOUT (it still runs).
 */
int
rl_harness_wait_ready(pid_t pid, int (*probe)(int port), int port, int timeout_ms, int *status)
{
    int64_t deadline = rl_harness_now_ms() + timeout_ms;
    int slot;

    for (;;) {
        int rc = has_exited(pid);

        if (rc != 0) {
            slot = find_proc(pid);
            if (slot >= 0) {
                reap(slot, pid, status);
            }
            return -ECHILD;
        }
        if (probe(port) == 0) {
            return 0;
        }
        if (rl_harness_now_ms() >= deadline) {
            return -ETIMEDOUT;
        }
        rl_harness_sleep_ms(10);
    }
}

int
rl_harness_wait_ready_at(pid_t pid, int (*probe)(const char *host, int port), const char *host,
                         int port, int timeout_ms, int *status)
{
    int64_t deadline = rl_harness_now_ms() + timeout_ms;

    for (;;) {
        if (has_exited(pid) != 0) {
            int slot = find_proc(pid);

            if (slot >= 0) {
                reap(slot, pid, status);
            }
            return -ECHILD;
        }
        if (probe(host, port) == 0) {
            return 0;
        }
        if (rl_harness_now_ms() >= deadline) {
            return -ETIMEDOUT;
        }
        rl_harness_sleep_ms(10);
    }
}

const char **
rl_harness_netns_argv(const struct rl_harness_host *host, const char *const argv[],
                      const char **out, char *path)
{
    int n = 0;

    if (host == NULL || host->netns[0] == '\0') {
        for (; argv[n] != NULL; n++) {
            out[n] = argv[n];
        }
        out[n] = NULL;
        return out;
    }
    if (resolve_program(argv[0], path, PATH_MAX) < 0) {
        return NULL;
    }
    out[n++] = "ip";
    out[n++] = "netns";
    out[n++] = "exec";
    out[n++] = host->netns;
    out[n++] = path;
    for (int i = 1; argv[i] != NULL; i++) {
        out[n++] = argv[i];
    }
    out[n] = NULL;
    return out;
}

int
rl_harness_run(const char *const argv[], char *out, size_t len, int timeout_ms)
{
    static int seq;
    /* the output's file is named after the program, not its path (a slash names a dir) */
    const char *base = strrchr(argv[0], '/');
    char log[PATH_MAX];
    int status, rc;
    pid_t pid;

    if (len > 0) {
        out[0] = '\0'; /* whatever happens: callers print it */
    }
    rc = rl_harness_tmppath(log, sizeof(log), "run-%d-%s.out", seq++,
                            base != NULL ? base + 1 : argv[0]);
    if (rc == 0) {
        rc = rl_harness_spawn(argv, log, &pid);
    }
    if (rc != 0) {
        return rc;
    }
    rc = rl_harness_wait(pid, timeout_ms, &status);
    if (rc != 0) {
        rl_harness_kill9(pid);
        (void)rl_harness_read_file(log, out, len); /* what it said before it was killed */
        return rc;
    }
    rc = rl_harness_read_file(log, out, len);
    if (rc < 0) {
        return rc;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -ECHILD;
}
