/*
 * control: rl-bench's control loop, on the main thread. Starts one worker thread per
 * --threads (worker.h), prints the --report-every lines from the tallies the workers
 * publish (report.h), turns the first SIGINT or SIGTERM into "stop sending and drain" and a
 * second into "stop now", and returns once every worker is done and joined.
 */
#ifndef LG_CONTROL_H
#define LG_CONTROL_H

#include <stdbool.h>

#include "loadgen.h"

/* Runs b's workers to the end. *failed: a thread did not start, or a worker failed or lost a
 * connection; *ran: some worker got all its connections up and sent. */
void lg_control_run(struct bench *b, bool *failed, bool *ran);

#endif
