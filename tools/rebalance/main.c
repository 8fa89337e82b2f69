/*
 * rl-rebalance: the operator's tool that levels per-node load from the routers' request logs.
 * It reads the logs (logs.h, logscan.h), the live members and the assignment in force
 * (store.h: ZooKeeper, or files), computes a plan (plan.h), prints a report for a person and
 * one summary line for a script (report.h), and writes the new assignment (level.h): to
 * ZooKeeper by compare-and-set, keeping the replaced one in assignment.prev, or to a file
 * with --out, keeping FILE.prev. --rollback puts the previous assignment back (rollback.h).
 * docs/REBALANCE.md is the runbook. This file only reads the command line and the
 * configuration (args.h), picks where to write, and runs the modules in order; none of them
 * calls back into it.
 *
 * Exit status: 0 done (also when nothing needed to move, and after SIGINT or SIGTERM, which
 * write nothing), 1 a runtime error (ZooKeeper unreachable, a file unreadable), 2 a usage or
 * configuration error, 3 the assignment changed while this ran (nothing written).
 */
#include <langinfo.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "level.h"
#include "rollback.h"
#include "run.h"
#include "say.h"
#include "store.h"

static volatile sig_atomic_t stop_flag;

static void
on_stop(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static void
run_deinit(struct rb_run *r)
{
    if (r->have_plan) {
        rl_plan_deinit(&r->plan);
    }
    rl_logscan_destroy(r->scan);
    rb_zk_close(r);
    free(r->members);
    free(r->cur_text);
    rl_assignment_deinit(&r->current);
    rl_conf_destroy(r->conf);
}

int
main(int argc, char **argv)
{
    struct sigaction sa;
    struct rb_run r;
    const char *cs;
    char err[512];
    bool done;
    int rc;

    memset(&r, 0, sizeof(r));
    r.stop = &stop_flag;
    rc = rb_parse_opts(&r.o, argc, argv, &done);
    if (rc != RB_EXIT_OK || done) {
        return rc;
    }
    rl_log_setup(r.o.level, "rl-rebalance");
    setlocale(LC_CTYPE, "");
    cs = nl_langinfo(CODESET);
    r.utf8 = !r.o.ascii && cs != NULL && strcmp(cs, "UTF-8") == 0;

    rc = rl_conf_load(r.o.config, &r.conf, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "%s\n", err); /* FILE:LINE: what is wrong, as every program says it */
        return RB_EXIT_USAGE;
    }
    if (r.o.out != NULL) {
        r.target = RB_TARGET_FILE;
    } else if (r.conf->zookeeper[0] != '\0') {
        r.target = RB_TARGET_ZK;
    } else if (r.o.rollback || !r.o.dry_run) {
        rl_conf_destroy(r.conf);
        return rb_usage_error("%s has no zookeeper: give --out FILE%s", r.o.config,
                              r.o.rollback ? "" : " or --dry-run");
    }
    if (r.o.dry_run && !r.o.rollback) {
        r.target = RB_TARGET_NONE;
    }

    /* Interrupted, the tool writes nothing, closes its session and exits 0 (CONFIG.md). */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    rc = rb_load_members(&r);
    if (rc == 0) {
        rc = rb_load_assignment(&r);
    }
    if (rc == 0 && r.o.expect_set && r.target == RB_TARGET_ZK) {
        /* The compare-and-set expects the version the operator reviewed, not the one read
         * now: ZooKeeper itself refuses the write if they differ (exit 3). */
        r.version = r.o.expect_version;
    }
    if (rc == 0) {
        rb_say(&r, "rl-rebalance %s: cluster %s, %u shards, %zu live nodes (%s)\n", RL_VERSION,
               r.conf->cluster_name, r.conf->shards, r.nmembers, r.members_from);
        if (!r.o.rollback) {
            rb_say(&r, "assignment in force: %s, %u overrides\n", r.assignment_from,
                   rl_plan_overrides(&r.current));
        }
        rb_say(&r, "\n");
        rc = r.o.rollback ? rb_rollback(&r) : rb_rebalance(&r);
    }
    fflush(stdout);
    run_deinit(&r);
    return rc;
}
