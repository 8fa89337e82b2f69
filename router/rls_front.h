/*
 * rls_front: the gRPC front of Envoy's rate limit service (rls_h2.c carries the calls,
 * rls_call.c answers them; docs/ENVOY.md) as the rest of the router sees it: its state on
 * one loop, made and freed with the router (router.c) and reached through rl_router.rls
 * (its calls match in rl_router.envoy, which rl_router_set_envoy replaces); its counters as
 * STATS and /metrics sum them (rmetrics.c, rls_metrics.c). Not for a call (rls_call.h) nor
 * HTTP/2 (rls_h2.c).
 */
#ifndef RL_RLS_FRONT_H
#define RL_RLS_FRONT_H

#include <stddef.h>
#include <stdint.h>

struct rl_router;
struct rl_prom;
struct rl_envoy_config;
struct rl_rls_metrics;
struct rl_rls_wait;

/* A ShouldRateLimit call's result, counted by domain (rls_metrics.c). */
enum rl_rls_result {
    RL_RLS_OK,
    RL_RLS_OVER_LIMIT,
    RL_RLS_SHADOW, /* OK only because of shadow_mode */
    RL_RLS_UNKNOWN_DOMAIN,
    RL_RLS_ERROR, /* a gRPC status other than OK */
    RL_RLS_RESULTS
};

/* A detailed_metric descriptor's hits, by result. */
enum rl_rls_detailed_result {
    RL_RLS_WITHIN_LIMIT,
    RL_RLS_DETAILED_OVER,
    RL_RLS_SHADOW_MODE,
    RL_RLS_DETAILED_RESULTS
};

/* HTTP/2 stream events of the gRPC front. */
enum rl_rls_stream_event {
    RL_RLS_STREAM_REFUSED,
    RL_RLS_STREAM_RESET_BY_SERVER,
    RL_RLS_STREAM_RESET_BY_CLIENT,
    RL_RLS_CONN_CALM, /* a connection ended with GOAWAY ENHANCE_YOUR_CALM (rls_h2.c) */
    RL_RLS_STREAM_EVENTS
};

/* The front's totals: one writer (its loop), read by other threads with relaxed loads. */
struct rl_rls_counts {
    uint64_t calls[3];      /* rls_reply.c: answered OK, OVER_LIMIT, with a gRPC error */
    uint64_t timeouts;      /* rls_call.c: answered at their grpc-timeout */
    uint64_t auth_failures; /* rls_call.c: refused UNAUTHENTICATED */
    uint64_t streams[RL_RLS_STREAM_EVENTS]; /* rls_h2.c: streams refused, reset */
};

/* The gRPC front's state on one loop. */
struct rl_rls_front {
    struct rl_rls_counts n;
    uint64_t auth_warned_ms;        /* loop time of the last warning about refused calls */
    struct rl_rls_metrics *metrics; /* rls_metrics.c: by domain, detailed keys (set under mu) */
    struct rl_rls_wait *wait;       /* rls_wait.c: calls waiting for their grpc-timeout */
};

/* r's gRPC front state (its calls match in r->envoy: rl_router_set_envoy); NULL when out of
 * memory. */
struct rl_rls_front *rl_rls_front_new(void);

/* Router closing: closes the front's timer (its close counted among r's handles). */
void rl_rls_front_close(struct rl_router *r);

/* Frees f once r's handles are closed (f may be NULL). */
void rl_rls_front_free(struct rl_rls_front *f);

/* Adds f's totals to sum (any thread: relaxed loads of counters with one writer). */
static inline void
rl_rls_counts_sum(const struct rl_rls_front *f, struct rl_rls_counts *sum)
{
    if (f == NULL) {
        return;
    }
    for (size_t k = 0; k < 3; k++) {
        sum->calls[k] += __atomic_load_n(&f->n.calls[k], __ATOMIC_RELAXED);
    }
    sum->timeouts += __atomic_load_n(&f->n.timeouts, __ATOMIC_RELAXED);
    sum->auth_failures += __atomic_load_n(&f->n.auth_failures, __ATOMIC_RELAXED);
    for (size_t k = 0; k < RL_RLS_STREAM_EVENTS; k++) {
        sum->streams[k] += __atomic_load_n(&f->n.streams[k], __ATOMIC_RELAXED);
    }
}

/* ---- rls_metrics.c: counts by domain, full key ------------------------------------------ */

void rl_rls_metrics_call(struct rl_router *r, const char *domain, enum rl_rls_result result);
void rl_rls_metrics_detailed(struct rl_router *r, const char *key, size_t len,
                             enum rl_rls_detailed_result result, uint64_t hits);
/* The families, for the page rl_router_metrics writes (r's mu held; every worker summed). */
void rl_rls_metrics(struct rl_router *r, struct rl_prom *p);
void rl_rls_metrics_free(struct rl_rls_metrics *m);

#endif
