/*
 * rl-regions: reconciles the slices of global limits across regional clusters
 * (docs/REGIONS.md). The command line, and the run loop: once, or every --interval until
 * SIGINT/SIGTERM. Everything else is plan.c and store.c.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "parse.h"
#include "regions.h"

static const char usage[] =
    "usage: rl-regions --config REGION.conf --config REGION.conf ... [--dry-run | --rollback]\n"
    "                  [--interval DURATION] [--floor N] [--min-count N] [--top N]\n"
    "                  [--timeout DURATION] [--settle DURATION] [--hold DURATION] [--quiet]\n"
    "       rl-regions --help | --version\n"
    "\n"
    "Reads every region's use of its global services (the hot keys of its router) and its\n"
    "slices (its ZooKeeper), computes the next slices from demand and writes them into each\n"
    "region's ZooKeeper by compare-and-set, in two phases (docs/REGIONS.md).\n"
    "  --config FILE      one region's cluster.conf ([cluster] region, regions, zookeeper,\n"
    "                     [router] listen, its rules); one per region of [cluster] regions\n"
    "  --dry-run          report the plan, write nothing\n"
    "  --rollback         put back every region's slices from before the last run\n"
    "  --interval D       run every D until SIGINT/SIGTERM (default: once)\n"
    "  --floor N          thousandths of a user's global limit every region keeps (default 50)\n"
    "  --min-count N      a hot key is reconciled from N requests lately (default 10)\n"
    "  --top N            hot keys asked of each router per service, 1..100 (default 100)\n"
    "  --timeout D        per region, to reach ZooKeeper and the router (default 5s)\n"
    "  --settle D         wait D between the two phases (default 200ms)\n"
    "  --hold D           wait D between reading and writing (tests and demonstrations)\n"
    "  --quiet            no report, errors only\n"
    "Exit: 0 written (or dry run), 1 error, nothing written, 2 a region unreachable (it keeps\n"
    "its last slices, the others only went down), 3 refused by compare-and-set.\n";

static volatile sig_atomic_t rg_stop;

static void
rg_on_signal(int sig)
{
    (void)sig;
    rg_stop = 1;
}

static int
rg_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "rl-regions: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", usage);
    return RG_EXIT_FAIL;
}

static int
rg_args(int argc, char **argv, struct rg_opts *o)
{
    o->floor = 50;
    o->min_count = 10;
    o->top = 100;
    o->timeout_ms = 5000;
    o->settle_ms = 200;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t n = 0;

        if (strcmp(a, "--help") == 0) {
            fputs(usage, stdout);
            exit(0);
        } else if (strcmp(a, "--version") == 0) {
            printf("rl-regions %s\n", RL_VERSION);
            exit(0);
        } else if (strcmp(a, "--dry-run") == 0) {
            o->dry_run = true;
        } else if (strcmp(a, "--rollback") == 0) {
            o->rollback = true;
        } else if (strcmp(a, "--quiet") == 0) {
            o->quiet = true;
        } else if (v == NULL) {
            return rg_usage("%s needs a value (or is unknown)", a);
        } else if (strcmp(a, "--config") == 0) {
            if (o->nconfigs == RL_CONF_REGIONS_MAX) {
                return rg_usage("more than 16 %s", a);
            }
            o->configs[o->nconfigs++] = v;
            i++;
        } else if (strcmp(a, "--floor") == 0 && rl_parse_u64(v, 0, 500, &n) == NULL) {
            o->floor = (uint32_t)n;
            i++;
        } else if (strcmp(a, "--min-count") == 0 && rl_parse_u64(v, 1, UINT32_MAX, &n) == NULL) {
            o->min_count = n;
            i++;
        } else if (strcmp(a, "--top") == 0 && rl_parse_u64(v, 1, 100, &n) == NULL) {
            o->top = (uint32_t)n;
            i++;
        } else if (strcmp(a, "--timeout") == 0 && rl_parse_duration_ms(v, &n) == NULL && n > 0 &&
                   n <= 600000) {
            o->timeout_ms = (int)n;
            i++;
        } else if (strcmp(a, "--interval") == 0 && rl_parse_duration_ms(v, &n) == NULL && n > 0) {
            o->interval_ms = n;
            i++;
        } else if (strcmp(a, "--settle") == 0 && rl_parse_duration_ms(v, &n) == NULL) {
            o->settle_ms = n;
            i++;
        } else if (strcmp(a, "--hold") == 0 && rl_parse_duration_ms(v, &n) == NULL) {
            o->hold_ms = n;
            i++;
        } else {
            return rg_usage("bad option or value: %s", a);
        }
    }
    if (o->nconfigs < 2) {
        return rg_usage("%s", "needs a --config for each region, two at least");
    }
    if (o->dry_run && o->rollback) {
        return rg_usage("%s", "--dry-run and --rollback together");
    }
    return RG_EXIT_OK;
}

/* --rollback: every region's target is its slices.prev. */
static int
rg_rollback_texts(struct rg_run *run)
{
    char err[256];

    for (size_t i = 0; i < run->n; i++) {
        struct rg_region *g = &run->r[i];
        struct rl_slices *p = NULL;
        uint64_t gen;

        if (!g->reachable) {
            continue;
        }
        if (g->prev_len > 0 &&
            rl_slices_parse(g->prev_text, g->prev_len, &p, err, sizeof(err)) != 0) {
            fprintf(stderr, "rl-regions: region %s: slices.prev does not parse: %s\n", g->name,
                    err);
            return RG_EXIT_FAIL;
        }
        gen = rl_slices_generation(p);
        rl_slices_destroy(p);
        if (gen > run->generation) {
            run->generation = gen;
        }
        g->new_text = malloc(g->prev_len + 1);
        if (g->new_text == NULL) {
            return RG_EXIT_FAIL;
        }
        memcpy(g->new_text, g->prev_text != NULL ? g->prev_text : "", g->prev_len);
        g->new_text[g->prev_len] = '\0';
        g->new_len = g->prev_len;
        rg_say(run, "region %s: back to slices.prev (generation %llu, %zu bytes)\n", g->name,
               (unsigned long long)gen, g->prev_len);
    }
    return RG_EXIT_OK;
}

static int
rg_once(struct rg_run *run)
{
    int status;

    rg_read(run);
    if (run->o.rollback) {
        status = rg_rollback_texts(run);
    } else {
        rg_select(run);
        rg_measure(run);
        rg_plan(run);
        status = rg_texts(run);
        rg_report(run);
    }
    if (status == RG_EXIT_OK && !run->o.dry_run) {
        status = rg_write(run);
    } else if (status == RG_EXIT_OK) {
        for (size_t i = 0; i < run->n; i++) {
            status = run->r[i].reachable ? status : RG_EXIT_PARTIAL;
        }
    }
    rg_say(run, "rl-regions: generation %llu: %s\n", (unsigned long long)run->generation,
           status == RG_EXIT_OK        ? (run->o.dry_run ? "planned (dry run)" : "written")
           : status == RG_EXIT_PARTIAL ? "partial: unreachable regions keep their last slices"
           : status == RG_EXIT_CHANGED ? "refused by compare-and-set"
                                       : "failed");
    fflush(stdout);
    rg_close(run);
    return status;
}

int
main(int argc, char **argv)
{
    static struct rg_run run;
    int status;

    rl_log_setup(RL_LOG_WARN, "rl-regions");
    status = rg_args(argc, argv, &run.o);
    if (status == RG_EXIT_OK) {
        status = rg_load(&run);
    }
    if (status != RG_EXIT_OK) {
        rg_free(&run);
        return status;
    }
    signal(SIGINT, rg_on_signal);
    signal(SIGTERM, rg_on_signal);
    signal(SIGPIPE, SIG_IGN);
    do {
        status = rg_once(&run);
        for (uint64_t waited = 0; run.o.interval_ms > 0 && !rg_stop && waited < run.o.interval_ms;
             waited += 50) {
            struct timespec ts = {0, 50 * 1000000L};

            nanosleep(&ts, NULL);
        }
    } while (run.o.interval_ms > 0 && !rg_stop);
    rg_free(&run);
    return status;
}
