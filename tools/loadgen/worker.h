/*
 * worker: one rl-bench worker thread and its libuv loop over its share of the connections
 * (conn.h). It connects them all, then keeps up to --pipeline requests in flight on each:
 * closed loop, refilling as replies come back; or open loop with --rate, where a timerfd
 * wakes the loop when the schedule owes a request and latency counts from the scheduled
 * time (no coordinated omission). It stops at --duration or --requests, or when the control
 * loop (control.h) says so, drains for up to 2 s, and finishes; its tallies are published
 * for the interval reports. The workers are made and freed here too.
 */
#ifndef LG_WORKER_H
#define LG_WORKER_H

#include "loadgen.h"

/* Makes b->workers, sharing out the connections and the request budget; -ENOMEM or -errno. */
int lg_workers_init(struct bench *b);
void lg_workers_deinit(struct bench *b);

/* A worker thread's body (uv_thread_create). */
void lg_worker_main(void *arg);

/* Ends the worker's run: every connection closed, its tallies published, its handles closed
 * (the loop then ends). The worker calls it itself once all connections are gone, a
 * connection could not connect, the drain is over or connecting timed out. */
void lg_worker_finish(struct worker *w);

#endif
