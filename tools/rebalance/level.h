/*
 * level: a rebalance run of rl-rebalance, start to end. Gathers the logs (logs.h), computes
 * the plan (plan.h) from their load, the live members and the assignment in force, reports
 * it (report.h), and writes the new assignment (store.h): nowhere with --dry-run or when no
 * valid request was read, to --out FILE, else to ZooKeeper by compare-and-set (an unchanged
 * assignment is not rewritten, but its version is still checked). Ends with the summary
 * line. Interrupted by SIGINT or SIGTERM while reading, it writes nothing and exits 0.
 */
#ifndef RB_LEVEL_H
#define RB_LEVEL_H

#include "run.h"

/* Needs r's members and the assignment in force (store.h); returns the exit status. */
int rb_rebalance(struct rb_run *r);

#endif
