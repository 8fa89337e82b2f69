/*
 * harness: what every part of the test harness stands on (harness.h): the temp directory
 * each test process writes in (removed however the test ends), files in it, loopback ports
 * no other test draws, connects bounded by a timeout, the clock, and the cleanup that runs
 * at exit (the processes' part first, through the hook harness_proc.c installs, then the
 * temp directory). The processes themselves are harness_proc.c's, rl-node and rl-router
 * harness_server.c's (with the tests' TLS certificates), ZooKeeper's server and client
 * harness_zk.c's, all above this file. Not for production code: it assumes Linux (/proc,
 * mkdtemp, process-shared robust mutexes) and a test that may simply abort on the first
 * surprise.
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "file.h"

/* Ports are drawn from [PORT_LO, the ephemeral range's start); see rl_harness_free_port(). */
#define PORT_LO 20000
#define PORT_MIN_SPAN 1000

static struct {
    pthread_mutex_t lock;
    pid_t root_pid;  /* the test binary's first process, which ran harness_init() */
    pid_t tmp_owner; /* who created tmpdir; 0 for none */
    char tmpdir[PATH_MAX];
    uint8_t ports_used[65536 / 8];
    uint64_t rng;
    pid_t rng_owner;
    void (*procs_cleanup)(void); /* harness_proc.c's part of rl_harness_cleanup, once set */
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

void
rl_harness_lock(void)
{
    pthread_mutex_lock(&H.lock);
}

void
rl_harness_unlock(void)
{
    pthread_mutex_unlock(&H.lock);
}

pid_t
rl_harness_root_pid(void)
{
    return H.root_pid;
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

void
rl_harness_clear_of_hour(int need_ms)
{
    struct timespec ts;
    int64_t left;

    clock_gettime(CLOCK_REALTIME, &ts);
    left = 3600000 - ((int64_t)ts.tv_sec % 3600 * 1000 + ts.tv_nsec / 1000000);
    if (left < need_ms) {
        fprintf(stderr,
                "harness: %.1f s to the hour's end, where windows of an hour restart: "
                "starting after it\n",
                (double)left / 1000);
        rl_harness_sleep_ms((int)left + 100);
    }
}

static bool
keep_tmp(void)
{
    const char *v = getenv("RL_KEEP_TMP");

    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
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
    rl_harness_lock();
}

static void
atfork_release(void)
{
    rl_harness_unlock();
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

void
rl_harness_on_cleanup(void (*procs_cleanup)(void))
{
    H.procs_cleanup = procs_cleanup;
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

    rl_harness_lock();
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
    rl_harness_unlock();
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
            buf[got] = '\0'; /* what was read, terminated all the same */
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

    rl_harness_lock();
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
    rl_harness_unlock();
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

/* ---- Cleanup --------------------------------------------------------------------------- */

void
rl_harness_cleanup(void)
{
    pid_t me = getpid();
    char dir[PATH_MAX];
    bool remove_dir = false;

    if (H.procs_cleanup != NULL) {
        H.procs_cleanup(); /* the processes first: they write in the directory */
    }
    rl_harness_lock();
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
    rl_harness_unlock();
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
