/*
 * regions_bound: measures how one global limit holds across regional clusters on this
 * machine (docs/REGIONS.md, "The bound, measured"). Starts R regions, each with its own
 * ZooKeeper, node and router, and rl-regions --interval T between them, reaching every
 * region through fault proxies that add the cross-region latency; then one user sends
 * `rate` CHECKs a window, evenly spaced, through the regions' routers by a pattern:
 *
 *   single     all in region 0 (how far below the global limit is a one-region user held?)
 *   spread     round robin over every region, request by request
 *   alternate  region w mod R in window w
 *   hop        region (w / hop) mod R: stays `hop` windows, long enough for the slices to
 *              follow it, then moves (each move is a slice change the user can exploit)
 *
 * and prints, for the windows counted, the allowed requests per window over the global
 * limit: mean, max, min, the first window's and the last five's mean, with the bound of
 * docs/REGIONS.md. Not a test: it asserts nothing (tests/integration/check_regions.c does).
 *
 * usage: regions_bound [--regions R] [--algo ALGO] [--limit N] [--window MS] [--interval MS]
 *                      [--windows H] [--rate N] [--delay MS] [--floor F] [--hop H]
 *                      [--pattern single|spread|alternate|hop]
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "proxy.h"
#include "reqclient.h"

#define RMAX 3

struct region {
    char name[16];
    struct rl_harness_zk zk;
    struct rl_harness_server node, router;
    int node_port, router_port;
    struct rl_proxy *zk_px, *router_px;
    int zk_px_port, router_px_port;
    char config[4096], remote[4096];
    struct rl_client *c;
};

static struct region reg[RMAX];
static int R = 2;

static int64_t
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
sleep_until(int64_t t)
{
    int64_t d = t - now_ms();

    if (d > 0) {
        usleep((useconds_t)d * 1000);
    }
}

static int
die(const char *what)
{
    fprintf(stderr, "regions_bound: %s\n", what);
    rl_harness_cleanup();
    exit(1);
}

static void
write_config(const char *path, int i, const char *zk, int router_port, const char *limit)
{
    char regions[128] = "";

    for (int k = 0; k < R; k++) {
        strcat(regions, k ? " r" : "r");
        regions[strlen(regions) + 1] = '\0';
        regions[strlen(regions)] = (char)('0' + k);
        strcat(regions, ":1");
    }
    if (rl_harness_write_file(path,
                              "[cluster]\nname = rb\nzookeeper = %s\nregion = %s\nregions = %s\n"
                              "session_timeout = 2s\nshards = 16\n[router]\n"
                              "listen = 127.0.0.1:%d\ndeadline = 500ms\n"
                              "[service g]\nscope = global\nlimit = %s\n",
                              zk, reg[i].name, regions, router_port, limit) != 0) {
        die("cannot write a config");
    }
}

int
main(int argc, char **argv)
{
    const char *algo = "fixed_window", *pattern = "alternate";
    int limit = 100, window = 1000, interval = 2000, windows = 20, rate = 400, delay = 50;
    int floor = 50, hop = 0;
    char lim[128], ivl[32], flr[32];
    const char *rargv[20];
    int64_t *got, start;
    pid_t rpid;
    int status, n;

    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];

        if (strcmp(a, "--regions") == 0) {
            R = atoi(v);
        } else if (strcmp(a, "--algo") == 0) {
            algo = v;
        } else if (strcmp(a, "--limit") == 0) {
            limit = atoi(v);
        } else if (strcmp(a, "--window") == 0) {
            window = atoi(v);
        } else if (strcmp(a, "--interval") == 0) {
            interval = atoi(v);
        } else if (strcmp(a, "--windows") == 0) {
            windows = atoi(v);
        } else if (strcmp(a, "--rate") == 0) {
            rate = atoi(v);
        } else if (strcmp(a, "--delay") == 0) {
            delay = atoi(v);
        } else if (strcmp(a, "--floor") == 0) {
            floor = atoi(v);
        } else if (strcmp(a, "--hop") == 0) {
            hop = atoi(v);
        } else if (strcmp(a, "--pattern") == 0) {
            pattern = v;
        } else {
            return die("unknown option (see the header of bench/regions_bound.c)");
        }
    }
    if (R < 2 || R > RMAX || limit < 1 || window < 1 || windows < 1 || rate < 1) {
        return die("bad arguments");
    }
    if (hop <= 0) {
        hop = 2 * interval / window + 1;
    }
    snprintf(lim, sizeof(lim), "%s %d per %dms", algo, limit, window);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < R; i++) {
        struct region *g = &reg[i];
        char zk[64];

        snprintf(g->name, sizeof(g->name), "r%d", i);
        if (rl_harness_zk_start(&g->zk) != 0) {
            return die("ZooKeeper did not start");
        }
        g->node_port = rl_harness_free_port();
        g->router_port = rl_harness_free_port();
        if (rl_proxy_start(&g->zk_px, g->zk.port, &g->zk_px_port) != 0 ||
            rl_proxy_start(&g->router_px, g->router_port, &g->router_px_port) != 0) {
            return die("proxy");
        }
        /* region 0 is the reconciler's own: only the others are across the latency */
        rl_proxy_set_delay(g->zk_px, i == 0 ? 0 : delay);
        rl_proxy_set_delay(g->router_px, i == 0 ? 0 : delay);
        rl_harness_tmppath(g->config, sizeof(g->config), "%s.conf", g->name);
        rl_harness_tmppath(g->remote, sizeof(g->remote), "%s-remote.conf", g->name);
        write_config(g->config, i, g->zk.connect, g->router_port, lim);
        snprintf(zk, sizeof(zk), "127.0.0.1:%d", g->zk_px_port);
        write_config(g->remote, i, zk, g->router_px_port, lim);
        if (rl_harness_node_start(&g->node, g->config, g->name, g->node_port, 0) != 0 ||
            rl_harness_router_start(&g->router, g->config, g->router_port) != 0) {
            return die("node or router did not start");
        }
        for (int k = 0; k < 200; k++) {
            if (rl_client_connect(&g->c, "127.0.0.1", (uint16_t)g->router_port, 5000) == 0) {
                struct rl_wire_reply rep;

                if (rl_client_check(g->c, "g", "warm", NULL, 0, &rep, 5000) == 0 &&
                    rep.check.code == RL_WIRE_ALLOWED) {
                    break;
                }
                rl_client_destroy(g->c);
                g->c = NULL;
            }
            usleep(50 * 1000);
        }
        if (g->c == NULL) {
            return die("router does not answer");
        }
    }
    snprintf(ivl, sizeof(ivl), "%dms", interval);
    snprintf(flr, sizeof(flr), "%d", floor);
    n = 0;
    rargv[n++] = "rl-regions";
    for (int i = 0; i < R; i++) {
        rargv[n++] = "--config";
        rargv[n++] = reg[i].remote;
    }
    rargv[n++] = "--interval";
    rargv[n++] = ivl;
    rargv[n++] = "--floor";
    rargv[n++] = flr;
    rargv[n++] = "--min-count";
    rargv[n++] = "5";
    rargv[n++] = "--quiet";
    rargv[n] = NULL;
    {
        char log[4096];

        rl_harness_tmppath(log, sizeof(log), "rl-regions.log");
        if (rl_harness_spawn(rargv, log, &rpid) != 0) {
            return die("rl-regions did not start");
        }
    }
    got = calloc((size_t)windows, sizeof(*got));
    start = (now_ms() / window + 1) * window;
    sleep_until(start);
    for (int w = 0; w < windows; w++) {
        int64_t ws = start + (int64_t)w * window;

        for (int j = 0; j < rate; j++) {
            struct rl_wire_reply rep;
            int r = strcmp(pattern, "single") == 0   ? 0
                    : strcmp(pattern, "spread") == 0 ? j % R
                    : strcmp(pattern, "hop") == 0    ? (w / hop) % R
                                                     : w % R;

            sleep_until(ws + (int64_t)j * window / rate);
            if (now_ms() >= ws + window) {
                break; /* late: the window is over */
            }
            if (rl_client_check(reg[r].c, "g", "user", NULL, 1, &rep, 5000) == 0 &&
                (rep.check.code == RL_WIRE_ALLOWED || rep.check.code == RL_WIRE_QUEUED)) {
                got[w]++;
            }
        }
        sleep_until(ws + window);
    }
    rl_harness_stop(rpid, SIGTERM, 10000, &status);
    {
        double sum = 0, max = 0, min = 1e9, last = 0, changes = windows * (double)window / interval;
        double bound = windows * limit + (changes + 1) * limit * (1 - R * floor / 1000.0);

        for (int w = 0; w < windows; w++) {
            sum += got[w];
            max = got[w] > max ? got[w] : max;
            min = got[w] < min ? got[w] : min;
            if (w >= windows - 5) {
                last += got[w];
            }
        }
        printf("regions=%d algo=%s limit=%d window_ms=%d interval_ms=%d delay_ms=%d floor=%d "
               "pattern=%s rate=%d windows=%d hop=%d: allowed/limit per window mean %.3f max %.3f "
               "min %.3f first %.3f last5 %.3f; total %.0f, bound %.0f (%.3f a window)\n",
               R, algo, limit, window, interval, delay, floor, pattern, rate, windows, hop,
               sum / windows / limit, max / limit, min / limit, (double)got[0] / limit,
               last / (windows < 5 ? windows : 5) / limit, sum, bound, bound / windows / limit);
    }
    free(got);
    for (int i = 0; i < R; i++) {
        rl_client_destroy(reg[i].c);
        rl_proxy_stop(reg[i].zk_px);
        rl_proxy_stop(reg[i].router_px);
    }
    rl_harness_cleanup();
    return 0;
}
