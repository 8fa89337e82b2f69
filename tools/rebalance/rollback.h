/*
 * rollback: rl-rebalance --rollback. Puts the previous assignment back (FILE.prev with
 * --out FILE, else ZooKeeper's assignment.prev), where it is also written: the one it
 * replaces becomes the previous one, so rolling back twice undoes the rollback. Reports how
 * many shards change owner with the live members, then the summary line
 * "summary: rollback=1 ..."; --dry-run only reports. Reads and writes through store.h.
 */
#ifndef RB_ROLLBACK_H
#define RB_ROLLBACK_H

#include "run.h"

/* Needs r's members and the assignment in force (store.h); returns the exit status. */
int rb_rollback(struct rb_run *r);

#endif
