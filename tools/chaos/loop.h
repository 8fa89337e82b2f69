/*
 * loop: the run of one scenario on the clock, from a started cluster to a stopped one
 * (loop.c). The verdict on what it recorded is verdict.c's.
 */
#ifndef RL_CHAOS_LOOP_H
#define RL_CHAOS_LOOP_H

#include "chaos.h"

/* From now on, SIGINT and SIGTERM end a run early (a second one ends rl-chaos at once). */
void ch_loop_catch_interrupts(void);

/* Runs r's scenario: 0 when it ran to the end (the verdict follows), 3 when the cluster
 * could not be started, 130 when interrupted. */
int ch_loop_run(struct ch_run *r);

#endif
