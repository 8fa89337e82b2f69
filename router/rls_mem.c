/*
 * rls_mem: the gRPC front's per-connection allocator (rls_mem.h).
 */
#include "rls_mem.h"

#include <stdlib.h>
#include <string.h>

void *
rl_rls_mem_malloc(size_t size, void *arg)
{
    struct rl_rls_mem *m = arg;
    size_t cls = size > 0 ? (size - 1) / RLS_MEM_STEP : 0;
    size_t cap = cls < RLS_MEM_CLASSES ? (cls + 1) * RLS_MEM_STEP : size;
    size_t *blk;

    if (cls < RLS_MEM_CLASSES && m->free[cls] != NULL) {
        char *p = m->free[cls];

        memcpy(&m->free[cls], p, sizeof(void *));
        m->nfree[cls]--;
        return p;
    }
    if (cap > SIZE_MAX - RLS_MEM_HDR) {
        return NULL;
    }
    blk = malloc(RLS_MEM_HDR + cap);
    if (blk == NULL) {
        return NULL;
    }
    blk[0] = cls < RLS_MEM_CLASSES ? cls : RLS_MEM_CLASSES;
    blk[1] = cap;
    return (char *)blk + RLS_MEM_HDR;
}

void
rl_rls_mem_free(void *p, void *arg)
{
    struct rl_rls_mem *m = arg;
    size_t *blk;

    if (p == NULL) {
        return;
    }
    blk = (size_t *)((char *)p - RLS_MEM_HDR);
    if (blk[0] < RLS_MEM_CLASSES && m->nfree[blk[0]] < RLS_MEM_KEEP) {
        memcpy(p, &m->free[blk[0]], sizeof(void *));
        m->free[blk[0]] = p;
        m->nfree[blk[0]]++;
        return;
    }
    free(blk);
}

void *
rl_rls_mem_calloc(size_t n, size_t size, void *arg)
{
    void *p;

    if (size != 0 && n > SIZE_MAX / size) {
        return NULL;
    }
    p = rl_rls_mem_malloc(n * size, arg);
    if (p != NULL) {
        memset(p, 0, n * size);
    }
    return p;
}

void *
rl_rls_mem_realloc(void *p, size_t size, void *arg)
{
    size_t cap;
    void *q;

    if (p == NULL) {
        return rl_rls_mem_malloc(size, arg);
    }
    cap = ((size_t *)((char *)p - RLS_MEM_HDR))[1];
    if (size <= cap) {
        return p;
    }
    q = rl_rls_mem_malloc(size, arg);
    if (q != NULL) {
        memcpy(q, p, cap);
        rl_rls_mem_free(p, arg);
    }
    return q;
}

void
rl_rls_mem_drop(struct rl_rls_mem *m)
{
    for (uint32_t i = 0; i < RLS_MEM_CLASSES; i++) {
        while (m->free[i] != NULL) {
            char *p = m->free[i];

            memcpy(&m->free[i], p, sizeof(void *));
            free(p - RLS_MEM_HDR);
        }
        m->nfree[i] = 0;
    }
}
