/*
 * harness: runs the real processes of integration tests (ZooKeeper, rl-node, rl-router and
 * anything else) on loopback, and stops them however the test ends. The contract, and what
 * "however" covers, is in harness.h. This file owns temp directories, ports and processes;
 * harness_server.c wraps rl-node and rl-router (and makes the tests' TLS certificates) and
 * harness_zk.c builds ZooKeeper's server and client on them.
 * Not for production code: it assumes Linux (prctl, waitid, /proc) and a test that may
 * simply abort on the first surprise.
 */
#define RL_HARNESS_INTERNAL
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "file.h"

#ifndef RL_BIN_DIR
#define RL_BIN_DIR "."
#endif

extern char **environ;

/* Ports are drawn from [PORT_LO, the ephemeral range's start); see rl_harness_free_port(). */
#define PORT_LO 20000
#define PORT_MIN_SPAN 1000

/*
 * A registered process. pid > 0 while it is ours to kill; -1 while a spawn is under way;
 * 0 when free. Both fields are atomics because the signal handler reads them; owner is
 * written before pid, so the handler never pairs a pid with a stale owner.
 */
struct harness_proc {
    _Atomic pid_t pid;
    _Atomic pid_t owner;
};

static struct {
    pthread_mutex_t lock;
    pid_t root_pid;  /* the test binary's first process, which ran harness_init() */
    pid_t tmp_owner; /* who created tmpdir; 0 for none */
    pid_t chained;   /* the process that made itself die with its parent */
    char tmpdir[PATH_MAX];
    uint8_t ports_used[65536 / 8];
    uint64_t rng;
    pid_t rng_owner;
} H = {.lock = PTHREAD_MUTEX_INITIALIZER};

/*
 * The root temp directory, in memory shared by every process forked from the root process,
 * so that whichever test process creates it, the root process (Check's runner, which always
 * exits normally) removes it at exit, with what tests that Check killed or that _exit()ed
 * on a failed assertion left inside.
 */
struct harness_shared {
    pthread_mutex_t mu; /* process-shared */
    char root[PATH_MAX];
};

static struct harness_shared *shared;

static struct harness_proc procs[RL_HARNESS_MAX_PROCS];

/* The signals that end a test process by default, and which we then let do so. */
static const int fatal_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGALRM};

static void
lock(void)
{
    pthread_mutex_lock(&H.lock);
}

static void
unlock(void)
{
    pthread_mutex_unlock(&H.lock);
}

int64_t
rl_harness_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
rl_harness_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static bool
keep_tmp(void)
{
    const char *v = getenv("RL_KEEP_TMP");

    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

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

/* Check may SIGKILL a test inside this lock: the next taker then inherits it, consistent. */
static void
shared_lock(void)
{
    if (pthread_mutex_lock(&shared->mu) == EOWNERDEAD) {
        pthread_mutex_consistent(&shared->mu);
    }
}

/* ---- Cleanup hooks --------------------------------------------------------------------- */

static void
atfork_prepare(void)
{
    lock();
}

static void
atfork_release(void)
{
    unlock();
}

static void
at_exit(void)
{
    rl_harness_cleanup();
}

/* Runs before main(), in the process that will fork the tests; children inherit it all. */
__attribute__((constructor)) static void
harness_init(void)
{
    pthread_mutexattr_t attr;
    void *p;

    H.root_pid = getpid();
    p = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
        shared = p;
        pthread_mutexattr_init(&attr);
        pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
        pthread_mutex_init(&shared->mu, &attr);
        pthread_mutexattr_destroy(&attr);
    }
    atexit(at_exit);
    pthread_atfork(atfork_prepare, atfork_release, atfork_release);
}

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

    lock();
    if (me == H.root_pid || H.chained == me) {
        unlock();
        return;
    }
    H.chained = me;
    unlock();
    parent = getppid();
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 && getppid() != parent) {
        kill(me, SIGKILL);
    }
}

/* ---- Files ----------------------------------------------------------------------------- */

static int
rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* Makes a directory from a formatted mkdtemp() template into out[PATH_MAX]. */
static int __attribute__((format(printf, 2, 3))) make_dir(char *out, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(out, PATH_MAX, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= PATH_MAX) {
        out[0] = '\0';
        return -ENAMETOOLONG;
    }
    return mkdtemp(out) == NULL ? -errno : 0;
}

static const char *
tmp_base(void)
{
    const char *base = getenv("TMPDIR");

    return base != NULL && base[0] != '\0' ? base : "/tmp";
}

/* The root directory, created on first use; the caller holds shared->mu. */
static int
shared_root(void)
{
    int rc;

    if (shared->root[0] != '\0' && access(shared->root, W_OK) == 0) {
        return 0;
    }
    rc = make_dir(shared->root, "%s/rl-test-XXXXXX", tmp_base());
    if (rc < 0) {
        shared->root[0] = '\0';
        return rc;
    }
    if (keep_tmp()) {
        fprintf(stderr, "harness: temp dir %s (kept: RL_KEEP_TMP is set)\n", shared->root);
    }
    return 0;
}

const char *
rl_harness_tmpdir(void)
{
    pid_t me = getpid();
    int rc = 0;

    lock();
    if (H.tmp_owner == me) {
        goto out;
    }
    if (shared == NULL) {
        /* No shared page: a directory per process, each removed by its own cleanup. */
        rc = make_dir(H.tmpdir, "%s/rl-test-XXXXXX", tmp_base());
    } else {
        shared_lock();
        rc = shared_root();
        if (rc == 0 && me == H.root_pid) {
            memcpy(H.tmpdir, shared->root, sizeof(H.tmpdir));
        } else if (rc == 0) {
            rc = make_dir(H.tmpdir, "%s/p%d-XXXXXX", shared->root, (int)me);
        }
        pthread_mutex_unlock(&shared->mu);
    }
    if (rc >= 0) {
        H.tmp_owner = me;
    }
out:
    unlock();
    if (rc < 0) {
        errno = -rc;
        return NULL;
    }
    return H.tmpdir;
}

static int
vpath(char *buf, size_t len, const char *fmt, va_list ap)
{
    const char *dir = rl_harness_tmpdir();
    int n, m;

    if (dir == NULL) {
        return -errno;
    }
    n = snprintf(buf, len, "%s/", dir);
    if (n < 0 || (size_t)n >= len) {
        return -ENAMETOOLONG;
    }
    m = vsnprintf(buf + n, len - (size_t)n, fmt, ap);
    if (m < 0 || (size_t)m >= len - (size_t)n) {
        return -ENAMETOOLONG;
    }
    return 0;
}

int
rl_harness_tmppath(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = vpath(buf, len, fmt, ap);
    va_end(ap);
    return rc;
}

int
rl_harness_write_file(const char *path, const char *fmt, ...)
{
    char *text;
    va_list ap;
    int n, rc;

    va_start(ap, fmt);
    n = vasprintf(&text, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return -ENOMEM;
    }
    rc = rl_file_write_atomic(path, text, (size_t)n);
    free(text);
    return rc;
}

int
rl_harness_run(const char *const argv[], char *out, size_t len, int timeout_ms)
{
    static int seq;
    char log[PATH_MAX];
    int status, rc;
    pid_t pid;

    rc = rl_harness_tmppath(log, sizeof(log), "run-%d-%s.out", seq++, argv[0]);
    if (rc == 0) {
        rc = rl_harness_spawn(argv, log, &pid);
    }
    if (rc != 0) {
        return rc;
    }
    rc = rl_harness_wait(pid, timeout_ms, &status);
    if (rc != 0) {
        rl_harness_kill9(pid);
        return rc;
    }
    rc = rl_harness_read_file(log, out, len);
    if (rc < 0) {
        return rc;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -ECHILD;
}

int
rl_harness_read_file(const char *path, char *buf, size_t len)
{
    size_t got = 0;
    int fd;

    if (len == 0 || len > INT_MAX) {
        return -EINVAL;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -errno;
    }
    while (got < len - 1) {
        ssize_t r = read(fd, buf + got, len - 1 - got);

        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r < 0) {
            int err = errno;

            close(fd);
            return -err;
        }
        if (r == 0) {
            break;
        }
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    return (int)got;
}

void
rl_harness_print_log(const char *path, int max_lines)
{
    /* The tail of a log is what explains a failure; 16 KiB holds a screenful of lines. */
    static char buf[16384];
    const char *start;
    ssize_t n;
    off_t size;
    int fd, lines = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "harness: cannot read %s: %s\n", path, strerror(errno));
        return;
    }
    size = lseek(fd, 0, SEEK_END);
    lseek(fd, size > (off_t)sizeof(buf) - 1 ? size - (off_t)sizeof(buf) + 1 : 0, SEEK_SET);
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n < 0) {
        n = 0;
    }
    buf[n] = '\0';
    start = buf + n;
    while (start > buf) {
        if (start[-1] == '\n' && start != buf + n && ++lines >= max_lines) {
            break;
        }
        start--;
    }
    fprintf(stderr, "---- %s (last %d lines) ----\n%s%s---- end of %s ----\n", path, max_lines,
            start, (n > 0 && buf[n - 1] != '\n') ? "\n" : "", path);
}

/* ---- Ports ----------------------------------------------------------------------------- */

static int
ephemeral_low(void)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    int lo = 32768, hi;

    if (f != NULL) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2) {
            lo = 32768;
        }
        fclose(f);
    }
    return lo;
}

/* Binds 127.0.0.1:port (0: any) without SO_REUSEADDR; returns the port bound or -errno. */
int
rl_harness_probe_bind(int port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    socklen_t slen = sizeof(sin);
    int fd, rc;

    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -errno;
    }
    rc = bind(fd, (struct sockaddr *)&sin, sizeof(sin));
    if (rc == 0) {
        rc = getsockname(fd, (struct sockaddr *)&sin, &slen);
    }
    rc = rc == 0 ? ntohs(sin.sin_port) : -errno;
    close(fd);
    return rc;
}

static uint64_t
next_random(void)
{
    pid_t me = getpid();

    /* Reseeded per process, so that parallel test binaries do not walk the same ports. */
    if (H.rng_owner != me) {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        H.rng = ((uint64_t)me << 32) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec;
        H.rng_owner = me;
    }
    /* splitmix64 */
    H.rng += 0x9e3779b97f4a7c15ULL;
    uint64_t z = H.rng;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int
rl_harness_free_port(void)
{
    int lo = PORT_LO, hi = ephemeral_low(), port = -EADDRNOTAVAIL;

    lock();
    for (int attempt = 0; attempt < 4000; attempt++) {
        int p;

        if (hi - lo >= PORT_MIN_SPAN) {
            p = lo + (int)(next_random() % (uint64_t)(hi - lo));
        } else {
            /* No room below the ephemeral range: fall back to the kernel's choice. */
            p = rl_harness_probe_bind(0);
            if (p < 0) {
                port = p;
                break;
            }
        }
        if (p <= 0 || p > 65535 || (H.ports_used[p / 8] & (1u << (p % 8))) != 0) {
            continue;
        }
        if (rl_harness_probe_bind(p) == p) {
            H.ports_used[p / 8] |= (uint8_t)(1u << (p % 8));
            port = p;
            break;
        }
    }
    unlock();
    return port;
}

/* A non-blocking connect bounded by timeout_ms; returns the connected fd or -errno. */
static int
connect_timeout(const struct sockaddr *sa, socklen_t salen, int timeout_ms)
{
    struct pollfd pfd;
    socklen_t elen = sizeof(int);
    int fd, err = 0, rc;

    fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -errno;
    }
    if (connect(fd, sa, salen) == 0) {
        return fd;
    }
    if (errno != EINPROGRESS) {
        err = errno;
        goto fail;
    }
    pfd.fd = fd;
    pfd.events = POLLOUT;
    do {
        rc = poll(&pfd, 1, timeout_ms);
    } while (rc < 0 && errno == EINTR);
    if (rc <= 0) {
        err = rc == 0 ? ETIMEDOUT : errno;
        goto fail;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0) {
        err = errno;
    }
    if (err != 0) {
        goto fail;
    }
    return fd;
fail:
    close(fd);
    return -err;
}

int
rl_harness_connect_loopback(int port, int timeout_ms)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};

    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return connect_timeout((struct sockaddr *)&sin, sizeof(sin), timeout_ms);
}

int
rl_harness_connect_host(const char *host, int port, int timeout_ms)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct sockaddr_in6 sin6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};

    if (host == NULL || host[0] == '\0') {
        return rl_harness_connect_loopback(port, timeout_ms);
    }
    if (inet_pton(AF_INET, host, &sin.sin_addr) == 1) {
        return connect_timeout((struct sockaddr *)&sin, sizeof(sin), timeout_ms);
    }
    if (inet_pton(AF_INET6, host, &sin6.sin6_addr) == 1) {
        return connect_timeout((struct sockaddr *)&sin6, sizeof(sin6), timeout_ms);
    }
    return -EINVAL;
}

int
rl_harness_wait_port(const char *host, int port, int timeout_ms)
{
    struct addrinfo hints, *res = NULL;
    char service[16];
    int64_t deadline = rl_harness_now_ms() + timeout_ms;
    int rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    snprintf(service, sizeof(service), "%d", port);
    rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        return rc == EAI_SYSTEM ? -errno : -EINVAL;
    }
    rc = -ETIMEDOUT;
    for (;;) {
        for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
            int fd = connect_timeout(ai->ai_addr, ai->ai_addrlen, 200);

            if (fd >= 0) {
                close(fd);
                rc = 0;
                goto out;
            }
        }
        if (rl_harness_now_ms() >= deadline) {
            break;
        }
        rl_harness_sleep_ms(10);
    }
out:
    freeaddrinfo(res);
    return rc;
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

    lock();
    for (int i = 0; i < RL_HARNESS_MAX_PROCS; i++) {
        if (atomic_load(&procs[i].pid) == 0 || atomic_load(&procs[i].owner) != me) {
            atomic_store(&procs[i].pid, 0);
            atomic_store(&procs[i].owner, me);
            atomic_store(&procs[i].pid, -1);
            slot = i;
            break;
        }
    }
    unlock();
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
rl_harness_kill9(pid_t pid)
{
    return rl_harness_stop(pid, SIGKILL, 0, NULL);
}

void
rl_harness_cleanup(void)
{
    pid_t me = getpid();
    char dir[PATH_MAX];
    bool remove_dir = false;

    kill_owned();
    for (int i = 0; i < RL_HARNESS_MAX_PROCS; i++) {
        pid_t pid = atomic_load(&procs[i].pid);

        if (pid > 0 && atomic_load(&procs[i].owner) == me) {
            atomic_store(&procs[i].pid, 0);
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
            }
        }
    }

    lock();
    if (H.tmp_owner == me) {
        memcpy(dir, H.tmpdir, sizeof(dir));
        remove_dir = true;
        H.tmp_owner = 0;
        H.tmpdir[0] = '\0';
    }
    if (shared != NULL && me == H.root_pid) {
        /* The root goes even if this process never used it: its tests did. */
        shared_lock();
        if (shared->root[0] != '\0') {
            memcpy(dir, shared->root, sizeof(dir));
            remove_dir = true;
            shared->root[0] = '\0';
        }
        pthread_mutex_unlock(&shared->mu);
    }
    unlock();
    if (remove_dir) {
        if (keep_tmp()) {
            if (shared == NULL || me == H.root_pid) {
                fprintf(stderr, "harness: kept %s\n", dir);
            }
        } else {
            nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
        }
    }
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
