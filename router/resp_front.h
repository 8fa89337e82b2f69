/*
 * resp_front: the RESP front (resp.c, docs/RESP.md) as the rest of the router sees it: its
 * per-loop state, made and freed with the router (router.c), reached through rl_router.resp,
 * and its counters as the metrics page sums them (rmetrics.c). The connections come through
 * front.c (rl_resp_ops, front.h). Not for anything of a connection (resp_int.h).
 */
#ifndef RL_RESP_FRONT_H
#define RL_RESP_FRONT_H

#include <stdint.h>

struct rl_resp;

/* The RESP front's counters, as /metrics labels them. */
#define RL_RESP_COUNTS 5
#define RL_RESP_COUNT_NAMES                                                                        \
    {"commands", "cl_throttle", "rl_check_keys", "error_replies", "protocol_errors"}

/* A loop's RESP state, NULL when out of memory; freed once its connections are closed
 * (g may be NULL). */
struct rl_resp *rl_resp_new(void);
void rl_resp_free(struct rl_resp *g);

/* Adds g's counters to sum (read from any thread; g's loop may be counting). */
void rl_resp_counts(const struct rl_resp *g, uint64_t sum[RL_RESP_COUNTS]);

#endif
