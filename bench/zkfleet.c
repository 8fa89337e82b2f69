/*
 * zkfleet: a fleet of router-like ZooKeeper watchers in one process, for measuring what
 * hundreds of routers cost ZooKeeper and how fast their tables converge (bench/zk_fleet.sh,
 * docs/SCALING.md). Each of N sessions does what rl-router's ZooKeeper side does, through
 * the same code (common/zkm.c, zkmembers.c, view.c): announces itself under routers/,
 * watches nodes/, the assignment and the rules, and rebuilds its shard table and digest on
 * every change. No traffic, no workers, no listener: only the ZooKeeper load and the
 * convergence.
 *
 *   zkfleet --zk HOST:PORT --cluster NAME --sessions N [--shards S] [--session-timeout MS]
 *           [--members K]
 *
 * --members K adds K members that serve nothing (sessions that only register a node znode
 * fake-NNNN), to measure what a change costs with many nodes.
 *
 * Prints, line-buffered, on stdout:
 *   up N MS                 every session connected, MS after the start
 *   agree DIGEST M FIRST LAST NFIRST NLAST BUILD_US
 *                           every session now has the same table (M members); FIRST and
 *                           LAST: the wall-clock ms at which the first and the last session
 *                           built it; NFIRST and NLAST: when the change (the members read
 *                           back) reached the first and the last (NLAST - NFIRST: the watch
 *                           fan-out); BUILD_US: the mean table build so far, in us
 * and exits 0 on SIGTERM or SIGINT, closing every session. Not a product program.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <uv.h>

#include "log.h"
#include "shardmap.h"
#include "view.h"
#include "zkm.h"

struct watcher {
    struct rl_zkm *zkm;
    struct rl_view view;
    uint64_t digest;
    int64_t t_ms;     /* when it built this digest */
    int64_t t_notify; /* when ZooKeeper's change reached it (the members read back) */
    int dirty;        /* a change not built yet */
    int nmembers;
    int connected;
};

static struct {
    uv_loop_t loop;
    uv_timer_t tick;
    uv_signal_t sig[2];
    struct watcher *w;
    int n;
    uint32_t shards;
    uint64_t agreed;
    int64_t t0;
    int up_said;
    struct rl_zkm **fake; /* --members: sessions that only register a member */
    int nfake;
    int64_t build_ns, builds;
} F;

static int64_t
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t
mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Builds the table of a changed view. Builds run on the tick, not in the callbacks, so
 * that the time a change reaches each session is not held up by the other sessions'
 * builds on this one thread (each router builds on its own CPU). */
static void
rebuild(struct watcher *w)
{
    struct rl_shardmap *m = NULL;
    char err[128];
    int64_t t = mono_ns();

    w->dirty = 0;
    if (rl_view_build(&m, F.shards, &w->view, err, sizeof(err)) != 0) {
        return;
    }
    w->digest = rl_shardmap_digest(m);
    w->t_ms = now_ms();
    w->nmembers = (int)w->view.nmembers;
    rl_shardmap_destroy(m);
    F.build_ns += mono_ns() - t;
    F.builds++;
}

static void
on_members(void *arg, const struct rl_member *members, size_t n)
{
    struct watcher *w = arg;

    if (rl_view_set_members(&w->view, members, n) == 0) {
        w->t_notify = now_ms();
        w->dirty = 1;
    }
}

static void
on_assignment(void *arg, const char *text, size_t len, int64_t version)
{
    struct watcher *w = arg;

    if (rl_view_set_assignment(&w->view, text, len, version) == 0) {
        w->t_notify = now_ms();
        w->dirty = 1;
    }
}

static void
on_state(void *arg, enum rl_zkm_state state)
{
    struct watcher *w = arg;

    w->connected = state == RL_ZKM_CONNECTED;
}

static void
on_rules(void *arg, const char *text, size_t len, int64_t version)
{
    (void)arg, (void)text, (void)len, (void)version; /* watched as a router does; unused */
}

static void
on_tick(uv_timer_t *t)
{
    int64_t first = INT64_MAX, last = 0, nfirst = INT64_MAX, nlast = 0;
    int up = 0;

    (void)t;
    for (int i = 0; i < F.n; i++) {
        up += F.w[i].connected;
        if (F.w[i].dirty) {
            rebuild(&F.w[i]);
        }
    }
    if (!F.up_said && up == F.n) {
        printf("up %d %lld\n", F.n, (long long)(now_ms() - F.t0));
        F.up_said = 1;
    }
    for (int i = 0; i < F.n; i++) {
        if (F.w[i].digest == 0 || F.w[i].digest != F.w[0].digest) {
            return;
        }
        first = F.w[i].t_ms < first ? F.w[i].t_ms : first;
        last = F.w[i].t_ms > last ? F.w[i].t_ms : last;
        nfirst = F.w[i].t_notify < nfirst ? F.w[i].t_notify : nfirst;
        nlast = F.w[i].t_notify > nlast ? F.w[i].t_notify : nlast;
    }
    if (F.w[0].digest != F.agreed) {
        F.agreed = F.w[0].digest;
        printf("agree %016llx %d %lld %lld %lld %lld %lld\n", (unsigned long long)F.agreed,
               F.w[0].nmembers, (long long)first, (long long)last, (long long)nfirst,
               (long long)nlast, (long long)(F.builds > 0 ? F.build_ns / F.builds / 1000 : 0));
    }
}

static void
on_signal(uv_signal_t *s, int signum)
{
    (void)s, (void)signum;
    uv_timer_stop(&F.tick);
    uv_close((uv_handle_t *)&F.tick, NULL);
    for (int i = 0; i < 2; i++) {
        uv_close((uv_handle_t *)&F.sig[i], NULL);
    }
    for (int i = 0; i < F.n; i++) {
        rl_zkm_destroy(F.w[i].zkm);
        F.w[i].zkm = NULL;
    }
    for (int i = 0; i < F.nfake; i++) {
        rl_zkm_destroy(F.fake[i]);
    }
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {{"zk", required_argument, NULL, 'z'},
                                         {"cluster", required_argument, NULL, 'c'},
                                         {"sessions", required_argument, NULL, 'n'},
                                         {"shards", required_argument, NULL, 's'},
                                         {"session-timeout", required_argument, NULL, 't'},
                                         {"members", required_argument, NULL, 'm'},
                                         {NULL, 0, NULL, 0}};
    static const struct rl_zkm_cbs cbs = {on_members, on_assignment, on_state, NULL, on_rules, NULL, NULL};
    const char *zk = NULL, *cluster = NULL;
    uint32_t timeout = 4000;
    struct rlimit rl;
    int opt;

    F.shards = 4096;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'z':
            zk = optarg;
            break;
        case 'c':
            cluster = optarg;
            break;
        case 'n':
            F.n = atoi(optarg);
            break;
        case 's':
            F.shards = (uint32_t)atoi(optarg);
            break;
        case 't':
            timeout = (uint32_t)atoi(optarg);
            break;
        case 'm':
            F.nfake = atoi(optarg);
            break;
        default:
            return 2;
        }
    }
    if (zk == NULL || cluster == NULL || F.n < 1 || F.n > 100000 || F.nfake < 0 ||
        F.nfake > 10000) {
        fprintf(stderr, "usage: zkfleet --zk HOST:PORT --cluster NAME --sessions N "
                        "[--shards S] [--session-timeout MS] [--members K]\n");
        return 2;
    }
    /* a socket per session, and the client library's pipes */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    rl_log_setup(RL_LOG_ERROR, "zkfleet");
    F.w = calloc((size_t)F.n, sizeof(*F.w));
    F.fake = calloc((size_t)F.nfake + 1, sizeof(*F.fake));
    if (F.w == NULL || F.fake == NULL || uv_loop_init(&F.loop) != 0) {
        return 1;
    }
    /* members that serve nothing: only their znodes, so the watchers read K more members */
    for (int i = 0; i < F.nfake; i++) {
        static const struct rl_zkm_cbs none = {NULL, NULL, NULL, NULL, NULL, NULL, NULL};
        char name[32];

        snprintf(name, sizeof(name), "fake-%04d", i);
        if (rl_zkm_create(&F.fake[i], &F.loop, zk, timeout, cluster, &none, NULL) != 0 ||
            rl_zkm_register(F.fake[i], name, "127.0.0.1:9") != 0) {
            fprintf(stderr, "zkfleet: member %d could not be made\n", i);
            return 1;
        }
    }
    F.t0 = now_ms();
    for (int i = 0; i < F.n; i++) {
        char name[32];

        F.w[i].view.asg_version = -1;
        if (rl_zkm_create(&F.w[i].zkm, &F.loop, zk, timeout, cluster, &cbs, &F.w[i]) != 0 ||
            rl_zkm_watch(F.w[i].zkm) != 0 || rl_zkm_watch_rules(F.w[i].zkm) != 0) {
            fprintf(stderr, "zkfleet: session %d could not be made\n", i);
            return 1;
        }
        snprintf(name, sizeof(name), "fleet-%d", i);
        rl_zkm_announce_router(F.w[i].zkm, name, "127.0.0.1:1");
    }
    uv_timer_init(&F.loop, &F.tick);
    uv_timer_start(&F.tick, on_tick, 5, 5);
    uv_signal_init(&F.loop, &F.sig[0]);
    uv_signal_init(&F.loop, &F.sig[1]);
    uv_signal_start(&F.sig[0], on_signal, SIGTERM);
    uv_signal_start(&F.sig[1], on_signal, SIGINT);
    uv_run(&F.loop, UV_RUN_DEFAULT);
    for (int i = 0; i < F.n; i++) {
        rl_view_deinit(&F.w[i].view);
    }
    free(F.w);
    free(F.fake);
    return uv_loop_close(&F.loop) == 0 ? 0 : 1;
}
