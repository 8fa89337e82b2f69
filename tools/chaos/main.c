/*
 * rl-chaos: chaos-tests a throwaway ratelimiter cluster. `rl-chaos run SCENARIO` starts a
 * ZooKeeper server, the scenario's nodes and routers on free loopback ports, with a fault
 * proxy on every node's path from the routers and to ZooKeeper; drives traffic through every
 * router; injects the scenario's faults on schedule; prints a line a second; then judges
 * the run against the invariants (verdict.c) and exits 0 only if every one held.
 * Everything it starts is stopped however it ends (the process harness of harness/harness.h:
 * its children die with it, even on SIGKILL). docs/CHAOS.md is the manual.
 * This file is the command line only: options, the shipped scenarios' list, the build
 * directory; loop.c runs a scenario, verdict.c judges it.
 */
#include "chaos.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "log.h"
#include "loop.h"
#include "parse.h"

#ifndef CH_SCENARIO_DIR
#define CH_SCENARIO_DIR "tools/chaos/scenarios"
#endif

static const char usage[] =
    "usage: rl-chaos run SCENARIO [--build DIR] [--json FILE] [--verbose] [--duration D]\n"
    "                             [--rate N] [--hosts FILE] [--report DIR]\n"
    "       rl-chaos list\n"
    "       rl-chaos --help          (this, and the scenario format; --help-scenario: that alone)\n"
    "       rl-chaos --version\n"
    "\n"
    "Starts a throwaway cluster (ZooKeeper, nodes, routers on loopback), drives traffic through\n"
    "every router, injects the scenario's faults, checks the invariants (liveness, exactness,\n"
    "bounded loss, failure policy, convergence, no unexpected deaths) and prints a verdict.\n"
    "Exit status: 0 every invariant held, 1 one failed, 2 bad usage or scenario, 3 the cluster\n"
    "could not be started, 130 interrupted (SIGINT, SIGTERM: the cluster is stopped, no\n"
    "verdict; a second signal ends rl-chaos at once, its children with it).\n"
    "  SCENARIO       a file, or the name of a shipped one (rl-chaos list)\n"
    "  --build DIR    where rl-node and rl-router are (default: beside rl-chaos)\n"
    "  --json FILE    also write the verdict and the figures as JSON\n"
    "  --verbose      print every event as it happens\n"
    "  --duration D   run this long instead (at least until the last step ends), e.g. 60s\n"
    "  --rate N       requests per second instead of the scenario's\n"
    "  --hosts FILE   run across network namespaces (as root; scripts/netns.sh writes FILE):\n"
    "                 ZooKeeper, each node and router in its own, rl-chaos in the clients'\n"
    "  --report DIR   also write DIR/index.html: the run's timeline (answers per 100 ms by\n"
    "                 outcome, latency p50/p99, each fault's interval shaded) and the verdict\n"
    "                 beside it; one file, viewed offline (the verdict's JSON goes to\n"
    "                 DIR/verdict.json unless --json names a file)\n"
    "Environment: RL_CHAOS_SCENARIOS (directory of shipped scenarios), RL_KEEP_TMP=1 keeps the\n"
    "cluster's logs and configs (their directory is printed).\n";

static const char *
scenario_dir(void)
{
    const char *d = getenv("RL_CHAOS_SCENARIOS");

    return d != NULL && d[0] != '\0' ? d : CH_SCENARIO_DIR;
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int
list_scenarios(void)
{
    const char *dir = scenario_dir();
    DIR *d = opendir(dir);
    char *names[256];
    int n = 0;
    struct dirent *e;

    if (d == NULL) {
        fprintf(stderr, "rl-chaos: %s: %s\n", dir, strerror(errno));
        return 2;
    }
    while ((e = readdir(d)) != NULL && n < 256) {
        size_t len = strlen(e->d_name);

        if (len > 4 && strcmp(e->d_name + len - 4, ".ini") == 0) {
            names[n++] = strdup(e->d_name);
        }
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof(names[0]), cmp_str);
    for (int i = 0; i < n; i++) {
        struct ch_scenario sc;
        char path[PATH_MAX], err[256];

        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        if (ch_scenario_load(&sc, path, err, sizeof(err)) == 0) {
            printf("%-24s %s\n", sc.name, sc.description);
        } else {
            printf("%-24s (does not load: %s)\n", names[i], err);
        }
        free(names[i]);
    }
    return 0;
}

/* The build directory: --build, else the directory rl-chaos runs from. */
static void
set_bin_dir(const char *build)
{
    char self[PATH_MAX];
    ssize_t n;

    if (build != NULL) {
        setenv("RL_BIN_DIR", build, 1);
        return;
    }
    if (getenv("RL_BIN_DIR") != NULL) {
        return;
    }
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        char *slash;

        self[n] = '\0';
        slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            setenv("RL_BIN_DIR", self, 1);
        }
    }
}

/* Creates dir and its parents (mkdir -p): 0, or -1 with errno set. */
static int
make_dir(const char *dir)
{
    char p[PATH_MAX];
    size_t len = strlen(dir);

    if (len == 0 || len >= sizeof(p)) {
        errno = len == 0 ? ENOENT : ENAMETOOLONG;
        return -1;
    }
    memcpy(p, dir, len + 1);
    for (char *s = p + 1; *s != '\0'; s++) {
        if (*s == '/') {
            *s = '\0';
            if (mkdir(p, 0777) != 0 && errno != EEXIST) {
                return -1;
            }
            *s = '/';
        }
    }
    return mkdir(p, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

/* Loads --hosts FILE (NULL: a loopback run) and checks that every step can be done where
 * the run goes: 0, or -1 with the reason printed. */
static int
check_hosts(const struct ch_scenario *sc, const char *path, struct ch_hosts **out)
{
    char err[600];

    for (int i = 0; i < sc->nsteps; i++) {
        enum ch_action a = sc->steps[i].action;

        if (path == NULL && a == CH_ISOLATE) {
            fprintf(stderr, "rl-chaos: step \"%s\" needs --hosts\n", sc->steps[i].text);
            return -1;
        }
        if (path != NULL && (a == CH_ONEWAY || a == CH_DELAY || a == CH_RESET)) {
            fprintf(stderr, "rl-chaos: step \"%s\" needs the loopback fault proxies: not with "
                            "--hosts\n", sc->steps[i].text);
            return -1;
        }
    }
    if (path == NULL) {
        return 0;
    }
    *out = calloc(1, sizeof(**out));
    if (*out == NULL || ch_hosts_load(*out, path, sc, err, sizeof(err)) != 0 ||
        ch_hosts_tls(*out, err, sizeof(err)) != 0) {
        fprintf(stderr, "rl-chaos: %s\n", *out == NULL ? "out of memory" : err);
        return -1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {{"build", required_argument, NULL, 'b'},
                                         {"json", required_argument, NULL, 'j'},
                                         {"verbose", no_argument, NULL, 'v'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"version", no_argument, NULL, 'V'},
                                         {"help-scenario", no_argument, NULL, 's'},
                                         {"duration", required_argument, NULL, 'd'},
                                         {"rate", required_argument, NULL, 'r'},
                                         {"hosts", required_argument, NULL, 'H'},
                                         {"report", required_argument, NULL, 'R'},
                                         {NULL, 0, NULL, 0}};
    const char *build = NULL, *json = NULL, *duration = NULL, *rate = NULL, *hosts = NULL,
               *report = NULL;
    struct ch_hosts *hp = NULL;
    struct ch_scenario *sc;
    struct ch_run *r;
    char path[PATH_MAX], err[512], verdict_path[PATH_MAX];
    bool verbose = false;
    int opt, rc;
    struct stat st;

    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'b':
            build = optarg;
            break;
        case 'j':
            json = optarg;
            break;
        case 'v':
            verbose = true;
            break;
        case 'd':
            duration = optarg;
            break;
        case 'r':
            rate = optarg;
            break;
        case 'H':
            hosts = optarg;
            break;
        case 'R':
            report = optarg;
            break;
        case 'h':
            fputs(usage, stdout);
            fputs("\n", stdout);
            fputs(ch_scenario_help, stdout);
            return 0;
        case 's':
            fputs(ch_scenario_help, stdout);
            return 0;
        case 'V':
            printf("rl-chaos %s\n", RL_VERSION);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (optind < argc && strcmp(argv[optind], "list") == 0 && optind + 1 == argc) {
        return list_scenarios();
    }
    if (optind + 2 != argc || strcmp(argv[optind], "run") != 0) {
        fputs(usage, stderr);
        return 2;
    }
    snprintf(path, sizeof(path), "%s", argv[optind + 1]);
    if (stat(path, &st) != 0 && strchr(path, '/') == NULL) {
        snprintf(path, sizeof(path), "%s/%s.ini", scenario_dir(), argv[optind + 1]);
    }
    sc = calloc(1, sizeof(*sc));
    r = ch_run_new(sc, verbose);
    if (sc == NULL || r == NULL) {
        free(sc);
        ch_run_free(r);
        return 3;
    }
    rc = 2;
    if (ch_scenario_load(sc, path, err, sizeof(err)) != 0) {
        fprintf(stderr, "rl-chaos: %s\n", err);
        goto out;
    }
    if (duration != NULL) {
        uint64_t v;
        const char *why = rl_parse_duration_ms(duration, &v);

        if (why != NULL) {
            fprintf(stderr, "rl-chaos: --duration \"%s\" %s\n", duration, why);
            goto out;
        }
        for (int i = 0; i < sc->nsteps; i++) {
            if (sc->steps[i].at_ms + sc->steps[i].for_ms > (int64_t)v) {
                fprintf(stderr, "rl-chaos: --duration %s ends before step \"%s\"\n", duration,
                        sc->steps[i].text);
                goto out;
            }
        }
        sc->duration_ms = (int64_t)v;
    }
    if (rate != NULL) {
        uint64_t v;
        const char *why = rl_parse_u64(rate, 1, 200000, &v);

        if (why != NULL) {
            fprintf(stderr, "rl-chaos: --rate \"%s\" %s (1..200000)\n", rate, why);
            goto out;
        }
        sc->rate = (uint32_t)v;
    }
    if (check_hosts(sc, hosts, &hp) != 0) {
        goto out;
    }
    r->hosts = hp;
    if (report != NULL) {
        struct stat dst;

        if (make_dir(report) != 0 || stat(report, &dst) != 0) {
            fprintf(stderr, "rl-chaos: --report %s: %s\n", report, strerror(errno));
            goto out;
        }
        if (!S_ISDIR(dst.st_mode)) {
            fprintf(stderr, "rl-chaos: --report %s: not a directory\n", report);
            goto out;
        }
        r->report = ch_report_new(sc);
        if (r->report == NULL) {
            rc = 3;
            goto out;
        }
        if (json == NULL) {
            snprintf(verdict_path, sizeof(verdict_path), "%s/verdict.json", report);
            json = verdict_path;
        }
    }
    set_bin_dir(build);
    rl_log_setup(RL_LOG_ERROR, "rl-chaos");
    signal(SIGPIPE, SIG_IGN);
    ch_loop_catch_interrupts();
    rc = ch_loop_run(r);
    if (rc == 0) {
        rc = ch_verdict(r, json) ? 0 : 1;
        if (report != NULL) {
            ch_report_write(r->report, r, report, json); /* says itself what went wrong */
        }
    }
out:
    ch_run_free(r);
    free(sc);
    ch_hosts_free(hp);
    rl_harness_cleanup();
    return rc;
}
