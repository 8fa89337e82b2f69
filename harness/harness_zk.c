/*
 * harness_zk: the ZooKeeper half of the test harness (declared in harness.h): a throwaway
 * standalone server, Debian's jars run with java under rl_harness_spawn(), and short-lived
 * sessions of the C client to read and write znodes for assertions. It leans on harness.c
 * for temp paths and ports and on harness_proc.c for processes, so the server dies with the
 * test like any other.
 * Not a ZooKeeper client for the programs under test (common/zkm.c is), and not a cluster:
 * one server, no quorum.
 */
#define RL_HARNESS_INTERNAL
#include "harness.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zookeeper/zookeeper.h>

/*
 * Debian's zookeeper.jar names its dependencies in its manifest's Class-Path, but only
 * slf4j's API: the slf4j-simple binding makes the server log to stderr (our log file)
 * at a level we choose instead of printing that it has no logger. The other jars are
 * listed so the line still works where the manifest differs; those the standalone server
 * cannot start without are zookeeper-jute, slf4j-api, metrics-core and snappy-java.
 */
#define ZK_JAVA_DIR "/usr/share/java/"
#define ZK_CLASSPATH                                                                               \
    ZK_JAVA_DIR "zookeeper.jar:" ZK_JAVA_DIR "zookeeper-jute.jar:" ZK_JAVA_DIR                     \
                "slf4j-api.jar:" ZK_JAVA_DIR "slf4j-simple.jar:" ZK_JAVA_DIR                       \
                "metrics-core.jar:" ZK_JAVA_DIR "snappy-java.jar:" ZK_JAVA_DIR                     \
                "commons-io.jar:" ZK_JAVA_DIR "commons-cli.jar:" ZK_JAVA_DIR                       \
                "netty-buffer.jar:" ZK_JAVA_DIR "netty-common.jar:" ZK_JAVA_DIR                    \
                "netty-handler.jar:" ZK_JAVA_DIR "netty-resolver.jar:" ZK_JAVA_DIR                 \
                "netty-transport.jar:" ZK_JAVA_DIR "netty-transport-native-epoll.jar:" ZK_JAVA_DIR \
                "netty-transport-native-unix-common.jar"
#define ZK_MAIN "org.apache.zookeeper.server.ZooKeeperServerMain"
#define ZK_START_TIMEOUT_MS 30000
#define ZK_SESSION_WAIT_MS 5000

/* ---- ZooKeeper server ------------------------------------------------------------------ */

/* 0 once ZooKeeper serves: "srvr" answers with its version, not "not currently serving". */
static int
probe_zk_at(const char *host, int port)
{
    static const char want[] = "Zookeeper version:";
    char reply[128];
    size_t got = 0;
    int fd, rc = -EAGAIN;

    fd = rl_harness_connect_host(host, port, 200);
    if (fd < 0) {
        return fd;
    }
    if (send(fd, "srvr", 4, MSG_NOSIGNAL) != 4) {
        goto out;
    }
    while (got < sizeof(want) - 1) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ssize_t n;

        if (poll(&pfd, 1, 500) <= 0) {
            goto out;
        }
        n = read(fd, reply + got, sizeof(reply) - got);
        if (n <= 0) {
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
                continue;
            }
            break;
        }
        got += (size_t)n;
    }
    if (got >= sizeof(want) - 1 && memcmp(reply, want, sizeof(want) - 1) == 0) {
        rc = 0;
    }
out:
    close(fd);
    return rc;
}

static int
zk_prepare(struct rl_harness_zk *zk)
{
    char data[PATH_MAX + 8], cfg[PATH_MAX + 16];
    const char *addr = zk->host.addr[0] != '\0' ? zk->host.addr : "127.0.0.1";
    int port, rc;

    port = rl_harness_free_port();
    if (port < 0) {
        return port;
    }
    rc = rl_harness_tmppath(zk->dir, sizeof(zk->dir), "zk-%d", port);
    if (rc < 0) {
        return rc;
    }
    snprintf(data, sizeof(data), "%s/data", zk->dir);
    snprintf(cfg, sizeof(cfg), "%s/zoo.cfg", zk->dir);
    if ((mkdir(zk->dir, 0755) != 0 && errno != EEXIST) ||
        (mkdir(data, 0755) != 0 && errno != EEXIST)) {
        return -errno;
    }
    /*
     * tickTime 200 ms lets sessions be as short as 400 ms (2 ticks) so expiry tests are
     * quick; forceSync=no skips fsync, harmless since the page cache outlives the JVM.
     */
    rc = rl_harness_write_file(cfg,
                               "tickTime=200\n"
                               "minSessionTimeout=400\n"
                               "maxSessionTimeout=30000\n"
                               "dataDir=%s\n"
                               "clientPort=%d\n"
                               "clientPortAddress=%s\n"
                               "maxClientCnxns=0\n"
                               "admin.enableServer=false\n"
                               "4lw.commands.whitelist=*\n"
                               "forceSync=no\n",
                               data, port, addr);
    if (rc < 0) {
        return rc;
    }
    if ((size_t)snprintf(zk->log_path, sizeof(zk->log_path), "%s/zk.log", zk->dir) >=
        sizeof(zk->log_path)) {
        return -ENAMETOOLONG;
    }
    zk->port = port;
    if ((size_t)snprintf(zk->connect, sizeof(zk->connect),
                         strchr(addr, ':') != NULL ? "[%s]:%d" : "%s:%d", addr,
                         port) >= sizeof(zk->connect)) {
        return -ENAMETOOLONG;
    }
    return 0;
}

static int
zk_launch(struct rl_harness_zk *zk)
{
    char cfg[PATH_MAX + 16], tmpdir_opt[PATH_MAX + 32], level_opt[96];
    const char *java = getenv("RL_JAVA"), *cp = getenv("RL_ZK_CLASSPATH");
    const char *level = getenv("RL_ZK_LOG_LEVEL");
    int64_t t0 = rl_harness_now_ms();
    int status = 0, rc;

    if (java == NULL || java[0] == '\0') {
        java = "java";
    }
    if (cp == NULL || cp[0] == '\0') {
        cp = ZK_CLASSPATH;
    }
    if (level == NULL || level[0] == '\0') {
        level = "warn";
    }
    snprintf(cfg, sizeof(cfg), "%s/zoo.cfg", zk->dir);
    snprintf(tmpdir_opt, sizeof(tmpdir_opt), "-Djava.io.tmpdir=%s", zk->dir);
    snprintf(level_opt, sizeof(level_opt), "-Dorg.slf4j.simpleLogger.defaultLogLevel=%s", level);
    /*
     * A small heap and the serial collector suit a 2-core test machine; C1 only starts
     * faster; no perf data means no /tmp/hsperfdata_USER/PID left behind by a SIGKILL.
     */
    const char *const argv[] = {java,
                                "-Xmx256m",
                                "-XX:+UseSerialGC",
                                "-XX:TieredStopAtLevel=1",
                                "-XX:-UsePerfData",
                                "-Djava.awt.headless=true",
                                tmpdir_opt,
                                "-Dzookeeper.admin.enableServer=false",
                                "-Dzookeeper.jmx.log4j.disable=true",
                                level_opt,
                                "-Dorg.slf4j.simpleLogger.showDateTime=true",
                                "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
                                "-cp",
                                cp,
                                ZK_MAIN,
                                cfg,
                                NULL};

    const char *full[sizeof(argv) / sizeof(argv[0]) + 5];
    char path[PATH_MAX];

    if (rl_harness_netns_argv(&zk->host, argv, full, path) == NULL) {
        return -ENOENT;
    }
    rc = rl_harness_spawn(full, zk->log_path, &zk->pid);
    if (rc < 0) {
        zk->pid = 0;
        return rc;
    }
    rc = rl_harness_wait_ready_at(zk->pid, probe_zk_at, zk->host.addr, zk->port,
                                  ZK_START_TIMEOUT_MS, &status);
    if (rc == 0) {
        zk->start_ms = rl_harness_now_ms() - t0;
        return 0;
    }
    if (rc == -ETIMEDOUT) {
        rl_harness_kill9(zk->pid);
    }
    zk->pid = 0;
    return rc;
}

int
rl_harness_zk_start(struct rl_harness_zk *zk)
{
    bool fresh = zk->port == 0;
    int rc = 0;

    if (zk->pid > 0) {
        return -EALREADY;
    }
    rl_harness_first_of_cluster();
    /* A fresh port can be taken by someone else before the JVM binds it: try another. */
    for (int attempt = 0; attempt < (fresh ? 3 : 1); attempt++) {
        if (fresh) {
            rc = zk_prepare(zk);
            if (rc < 0) {
                return rc;
            }
        }
        rc = zk_launch(zk);
        if (rc != -ECHILD || !fresh || rl_harness_probe_bind(zk->port) == zk->port) {
            break;
        }
    }
    if (rc < 0) {
        fprintf(stderr, "harness: ZooKeeper on port %d did not start: %s\n", zk->port,
                strerror(-rc));
        rl_harness_print_log(zk->log_path, 40);
    }
    return rc;
}

int
rl_harness_zk_prepare(struct rl_harness_zk *zk)
{
    if (zk->pid > 0) {
        return -EALREADY;
    }
    return zk->port != 0 ? 0 : zk_prepare(zk);
}

int
rl_harness_zk_stop(struct rl_harness_zk *zk)
{
    int rc;

    if (zk->pid <= 0) {
        return 0;
    }
    rc = rl_harness_stop(zk->pid, SIGTERM, RL_HARNESS_STOP_TIMEOUT_MS, NULL);
    zk->pid = 0;
    return rc == -ETIMEDOUT || rc == -ECHILD ? 0 : rc;
}

int
rl_harness_zk_restart(struct rl_harness_zk *zk)
{
    int rc;

    if (zk->port == 0) {
        return -EINVAL;
    }
    rc = rl_harness_zk_stop(zk);
    if (rc < 0) {
        return rc;
    }
    return rl_harness_zk_start(zk);
}

/* ---- ZooKeeper client ------------------------------------------------------------------ */

struct zk_client {
    zhandle_t *zh;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state;
};

static void
zk_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    struct zk_client *c = ctx;

    (void)zh;
    (void)path;
    if (type == ZOO_SESSION_EVENT) {
        pthread_mutex_lock(&c->mu);
        c->state = state;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
}

/* The harness's sessions come and go by design; their log lines are noise. */
static void
zk_quiet(const char *message)
{
    (void)message;
}

static int
zk_errno(int zrc)
{
    switch (zrc) {
    case ZOK:
        return 0;
    case ZNONODE:
        return -ENOENT;
    case ZNODEEXISTS:
        return -EEXIST;
    case ZNOTEMPTY:
        return -ENOTEMPTY;
    case ZBADARGUMENTS:
        return -EINVAL;
    case ZNOAUTH:
        return -EACCES;
    case ZOPERATIONTIMEOUT:
        return -ETIMEDOUT;
    case ZCONNECTIONLOSS:
    case ZINVALIDSTATE:
        return -ENOTCONN;
    case ZSESSIONEXPIRED:
        return -ECONNRESET;
    default:
        return -EIO;
    }
}

static void
zk_close(struct zk_client *c)
{
    if (c->zh != NULL) {
        zookeeper_close(c->zh);
        c->zh = NULL;
    }
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
}

/* Opens a session and waits for it; c is zk_close()d on every path but success. */
static int
zk_open(struct zk_client *c, const char *connect)
{
    pthread_condattr_t attr;
    struct timespec until;
    int rc = 0;

    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &attr);
    pthread_condattr_destroy(&attr);

    errno = 0;
    c->zh = zookeeper_init2(connect, zk_watcher, 10000, NULL, c, 0, zk_quiet);
    if (c->zh == NULL) {
        rc = errno != 0 ? -errno : -EINVAL;
        zk_close(c);
        return rc;
    }
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ZK_SESSION_WAIT_MS / 1000;
    pthread_mutex_lock(&c->mu);
    while (c->state != ZOO_CONNECTED_STATE && rc == 0) {
        if (pthread_cond_timedwait(&c->cv, &c->mu, &until) == ETIMEDOUT) {
            rc = -ETIMEDOUT;
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (rc < 0) {
        zk_close(c);
    }
    return rc;
}

static int
cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int
rl_harness_zk_children(const char *connect, const char *path, char names[][RL_HARNESS_ZK_NAME_MAX],
                       int max)
{
    struct String_vector sv = {0, NULL};
    struct zk_client c;
    int rc;

    rc = zk_open(&c, connect);
    if (rc < 0) {
        return rc;
    }
    rc = zk_errno(zoo_get_children(c.zh, path, 0, &sv));
    if (rc == 0) {
        qsort(sv.data, (size_t)sv.count, sizeof(sv.data[0]), cmp_names);
        for (int i = 0; i < sv.count && i < max; i++) {
            snprintf(names[i], RL_HARNESS_ZK_NAME_MAX, "%s", sv.data[i]);
        }
        rc = sv.count;
        deallocate_String_vector(&sv);
    }
    zk_close(&c);
    return rc;
}

int
rl_harness_zk_get(const char *connect, const char *path, char *buf, size_t len)
{
    struct zk_client c;
    struct Stat st;
    int blen, rc;

    if (len == 0 || len > INT_MAX) {
        return -EINVAL;
    }
    rc = zk_open(&c, connect);
    if (rc < 0) {
        return rc;
    }
    blen = (int)len - 1;
    rc = zk_errno(zoo_get(c.zh, path, 0, buf, &blen, &st));
    if (rc == 0) {
        buf[blen < 0 ? 0 : blen] = '\0';
        rc = st.dataLength < 0 ? 0 : st.dataLength;
    }
    zk_close(&c);
    return rc;
}

int
rl_harness_zk_put(const char *connect, const char *path, const void *data, size_t len)
{
    char prefix[1024];
    struct zk_client c;
    size_t plen = strlen(path);
    int zrc, rc;

    if (len > INT_MAX || plen >= sizeof(prefix) || path[0] != '/') {
        return -EINVAL;
    }
    rc = zk_open(&c, connect);
    if (rc < 0) {
        return rc;
    }
    zrc = zoo_set(c.zh, path, (const char *)data, (int)len, -1);
    if (zrc == ZNONODE) {
        for (size_t i = 1; i < plen; i++) {
            if (path[i] != '/') {
                continue;
            }
            memcpy(prefix, path, i);
            prefix[i] = '\0';
            zrc = zoo_create(c.zh, prefix, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
            if (zrc != ZOK && zrc != ZNODEEXISTS) {
                goto out;
            }
        }
        zrc =
            zoo_create(c.zh, path, (const char *)data, (int)len, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
        if (zrc == ZNODEEXISTS) {
            zrc = zoo_set(c.zh, path, (const char *)data, (int)len, -1);
        }
    }
out:
    zk_close(&c);
    return zk_errno(zrc);
}

int
rl_harness_zk_delete(const char *connect, const char *path)
{
    struct zk_client c;
    int zrc, rc;

    rc = zk_open(&c, connect);
    if (rc < 0) {
        return rc;
    }
    zrc = zoo_delete(c.zh, path, -1);
    zk_close(&c);
    return zk_errno(zrc);
}

int
rl_harness_zk_wait_children(const char *connect, const char *path, int want, int timeout_ms)
{
    int64_t deadline = rl_harness_now_ms() + timeout_ms;
    struct zk_client c;
    int rc;

    rc = zk_open(&c, connect);
    if (rc < 0) {
        return rc;
    }
    for (;;) {
        struct String_vector sv = {0, NULL};
        int zrc = zoo_get_children(c.zh, path, 0, &sv), count = -1;

        if (zrc == ZOK) {
            count = sv.count;
            deallocate_String_vector(&sv);
        } else if (zrc == ZNONODE) {
            count = 0;
        }
        if (count == want) {
            rc = 0;
            break;
        }
        if (rl_harness_now_ms() >= deadline) {
            rc = -ETIMEDOUT;
            break;
        }
        rl_harness_sleep_ms(20);
    }
    zk_close(&c);
    return rc;
}
