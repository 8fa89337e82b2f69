/*
 * rls_arena: the memory of a ShouldRateLimit call (struct rl_rls_call, rls_call.h), for
 * rls_call.c (its request, descriptors and parts) and rls_reply.c (its answer).
 */
#ifndef RL_RLS_ARENA_H
#define RL_RLS_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "rls_call.h"

/*
 * The call's arena, protobuf-c's allocator for its request (rls_arena_take, rls_arena_give: a
 * bump allocation within call->arena, malloc beyond it; freeing from the arena is nothing,
 * it goes with the call), and room for what is freed apart (rls_arena_take_apart: the call's
 * descriptors and parts, and its answer: rl_rls_call_out). Inline, in a header of its own:
 * rls_call.c and rls_reply.c both take from it.
 */
static inline void *
rls_arena_take(void *arg, size_t size)
{
    struct rl_rls_call *call = arg;
    size_t at = (call->arena_used + 15) & ~(size_t)15;

    if (size <= sizeof(call->arena) && at <= sizeof(call->arena) - size) {
        call->arena_used = at + size;
        return call->arena + at;
    }
    call->arena_spilled = true;
    call->spilled_bytes += size;
    return malloc(size);
}

static inline void
rls_arena_give(void *arg, void *p)
{
    struct rl_rls_call *call = arg;

    if ((uint8_t *)p < call->arena || (uint8_t *)p >= call->arena + sizeof(call->arena)) {
        free(p);
    }
}

/* From the arena, for what is freed apart (rls_arena_give): a malloc here leaves req's
 * walk (arena_spilled) out of it. */
static inline void *
rls_arena_take_apart(struct rl_rls_call *call, size_t n)
{
    bool spilled = call->arena_spilled;
    void *p = rls_arena_take(call, n);

    call->arena_spilled = spilled;
    return p;
}

/* Room for the answer (n bytes) in call->out: the arena's free end when it fits, else
 * malloc. NULL: out of memory. */
static inline uint8_t *
rl_rls_call_out(struct rl_rls_call *call, size_t n)
{
    call->out = rls_arena_take_apart(call, n);
    return call->out;
}

#endif
