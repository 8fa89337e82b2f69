/*
 * resp_front: the RESP front (resp.c, docs/RESP.md) as the rest of the router sees it: its
 * per-loop state, made and freed with the router (router.c), reached through rl_router.resp,
 * and its counters as the metrics page sums them (rmetrics.c). The connections come through
 * front.c (rl_resp_ops, front.h). Not for anything of a connection (resp_int.h).
 */
#ifndef RL_RESP_FRONT_H
#define RL_RESP_FRONT_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "resp.h"

/* The RESP front's counters, as /metrics labels them. */
#define RL_RESP_COUNTS 5
#define RL_RESP_COUNT_NAMES                                                                        \
    {                                                                                              \
        "commands", "cl_throttle", "rl_check_keys", "error_replies", "protocol_errors"             \
    }

/* The RESP front's state on one loop (rl_router.resp). */
struct rl_resp {
    uint32_t nconns;
    struct rl_resp_cmd cmd;
    struct rl_buf tmp;  /* a reply being written */
    uint64_t warned_ms; /* loop time of the last warning about a connection's input */
    /* RL_RESP_COUNT_NAMES: one writer (this loop), read by other threads (rl_resp_counts) */
    uint64_t counts[RL_RESP_COUNTS];
};

/* A loop's RESP state, NULL when out of memory; freed once its connections are closed
 * (g may be NULL). */
struct rl_resp *rl_resp_new(void);
void rl_resp_free(struct rl_resp *g);

/* Adds g's counters to sum (read from any thread; g's loop may be counting). */
static inline void
rl_resp_counts(const struct rl_resp *g, uint64_t sum[RL_RESP_COUNTS])
{
    for (size_t k = 0; g != NULL && k < RL_RESP_COUNTS; k++) {
        sum[k] += __atomic_load_n(&g->counts[k], __ATOMIC_RELAXED);
    }
}

#endif
