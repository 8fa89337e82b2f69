/*
 * rls_wait: the gRPC front's calls waiting for their grpc-timeout on one loop: a min-heap of
 * nodes (struct rl_rls_wait_node, one in each call) on their deadline and one timer due at
 * the earliest. What happens to a call whose time came is the caller's (the expire function
 * given at creation, rls_call.c); this file knows no router, no call and no answer. Not for the
 * router's own deadline of each CHECK (pending.c).
 */
#ifndef RL_RLS_WAIT_H
#define RL_RLS_WAIT_H

#include <stdint.h>

#include <uv.h>

struct rl_rls_wait;

/* A place in the heap, inside what waits. */
struct rl_rls_wait_node {
    uint64_t deadline_ms; /* loop time it is due at, while in the heap */
    uint32_t heap_at;     /* its index in the heap + 1; 0: not in it */
};

/* A heap on loop: expire(node) for each node whose deadline came (out of the heap first);
 * closed(arg) once its timer is closed (rl_rls_wait_close). NULL: out of memory. */
struct rl_rls_wait *rl_rls_wait_new(uv_loop_t *loop, void (*expire)(struct rl_rls_wait_node *n),
                                    void (*closed)(void *arg), void *arg);

/* Puts n in the heap, due at loop time deadline_ms. 0, or -1 (out of memory, or closed). */
int rl_rls_wait_add(struct rl_rls_wait *w, struct rl_rls_wait_node *n, uint64_t deadline_ms);

/* Takes n out of the heap, if it is in (w may be NULL). */
void rl_rls_wait_remove(struct rl_rls_wait *w, struct rl_rls_wait_node *n);

/* Closes the timer (no call expires any more); closed(arg) follows. */
void rl_rls_wait_close(struct rl_rls_wait *w);

/* Frees the heap (after closed). w may be NULL. */
void rl_rls_wait_free(struct rl_rls_wait *w);

#endif
