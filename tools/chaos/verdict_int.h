/*
 * verdict_int: what verdict.c shares with verdict_moves.c, the reading of the membership
 * timeline into owner changes (lost, planned or either). Not for judging windows or
 * requests (verdict.c).
 */
#ifndef RL_CHAOS_VERDICT_INT_H
#define RL_CHAOS_VERDICT_INT_H

#include <stdint.h>

#include "chaos.h"

/* What an owner change is, for the windows around it (changes_of). */
enum {
    CH_MOVE_LOST = 0,    /* the new owner starts from zero */
    CH_MOVE_PLANNED = 1, /* handed off: the new owner continues the count */
    CH_MOVE_MAYBE = 2,   /* either: a node back from an expired session (rejoined), or an
                            old owner cut off by a fault while it should hand off */
};
/* A planned move cut by a failure may start its shard afresh at the new owner as late as
 * [cluster] handoff_wait (its default, which rl-chaos's clusters keep) after the table
 * changed (docs/OPERATIONS.md, "Planned moves"). */
#define HANDOFF_WAIT_MS 2000
/* A planned move's old owner cut off by then after the change did not hand it off
 * (verdict_moves.c): the scenario's steps land within this of their time. */
#define CUT_MARGIN_MS 500
/* The view in force at t (the last one not after it), or -1. */
int ch_view_at(const struct ch_run *r, int64_t t);

/* Times at which shard's owner changed (at[], at most max) and what each change is
 * (planned[]: a CH_MOVE_*); returns how many. */
int ch_changes_of(const struct ch_run *r, uint32_t shard, int64_t *at, uint8_t *planned, int max);

#endif
