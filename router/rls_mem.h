/*
 * rls_mem: the gRPC front's per-connection allocator (rls_h2.c hands it to nghttp2 and
 * takes its streams from it). Not for the calls' memory (rls_arena.h).
 */
#ifndef RL_RLS_MEM_H
#define RL_RLS_MEM_H

#include <stddef.h>
#include <stdint.h>

/*
 * A connection's allocator for its nghttp2 session and its streams: blocks of up to
 * RLS_MEM_CLASSES * RLS_MEM_STEP bytes are kept when freed, up to RLS_MEM_KEEP of each size
 * class, and handed out again. A stream's life (its objects, its header blocks, its frames)
 * costs a dozen allocations, and 64 streams opened and closed together are more than
 * malloc's per-thread cache keeps: what a connection freed it takes back first.
 */
#define RLS_MEM_STEP 64u
#define RLS_MEM_CLASSES 32u /* kept: blocks of up to 2 KiB */
#define RLS_MEM_KEEP 128u
#define RLS_MEM_HDR 16u /* before each block: its class and its capacity */

struct rl_rls_mem {
    void *free[RLS_MEM_CLASSES]; /* blocks kept, linked through their first bytes */
    uint32_t nfree[RLS_MEM_CLASSES];
};

/* nghttp2_mem's four functions, arg the connection's struct rl_rls_mem (zeroed at first). */
void *rl_rls_mem_malloc(size_t size, void *arg);
void rl_rls_mem_free(void *p, void *arg);
void *rl_rls_mem_calloc(size_t n, size_t size, void *arg);
void *rl_rls_mem_realloc(void *p, size_t size, void *arg);
/* Frees the blocks m keeps (the connection is gone). */
void rl_rls_mem_drop(struct rl_rls_mem *m);

#endif
