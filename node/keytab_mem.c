/*
 * keytab_mem: where the key table's arrays live (keytab_mem.h). malloc below 64 KiB, an mmap
 * of its own up to KT_MEM_REGION_MIN, and above that (entry arrays only) one of the table's
 * two reserved ranges. Not for sizing the table or moving entries (keytab.c).
 *
 * Why reserved ranges: the table's finds touch one random entry per request in an array of
 * tens of MiB (37 MiB at 1M keys), which in 4 KiB pages misses the TLB on nearly every
 * request, and the page walk, not the cache line, is then what a decision waits for (the
 * profile put a fifth of the node's time in rl_keytab_prefetch). 2 MiB pages make the whole
 * array a few dozen TLB entries. They were tried before on arrays mmap'd afresh at each
 * resize, in huge pages from their first touch: with the kernel's default defrag=madvise a
 * fault could wait for compaction, and resize pauses were 2-3x longer. Faulting a fresh huge
 * page costs more than a 4 KiB one in any case (2 MiB zeroed at once; on a VM, measured,
 * 0.4 ms when the host has backed that memory before and 7-20 ms when it has not, where an
 * insert that moves 128 slots touched one).
 *
 * So an array is never faulted in huge pages: it lives in one of two ranges reserved once
 * per table for the largest array the memory cap allows, marked MADV_NOHUGEPAGE, so a resize
 * fills it in 4 KiB pages as before, with the same pauses. Once the resize has ended and the
 * array is complete, keytab.c promotes it (kt_mem_promote: MADV_HUGEPAGE on its span) and
 * then each sweep hands the next 2 MiB piece to the table's collapsing thread
 * (kt_mem_collapse: MADV_COLLAPSE, a copy of 2 MiB into a fresh huge page, ~0.2-0.5 ms on
 * warm memory, 12-20 ms measured on a VM whose host had not backed the memory yet:
 * bench/keytab_bench.c), so the table reaches huge pages within seconds of its last grow (19
 * pieces at 1M keys, a sweep every 100 ms on a node). Done on the sweep's own thread, that
 * copy paused the node's loop for its whole length at every sweep tick; on the collapsing
 * thread only an access to the piece being copied waits for it (the kernel takes the piece's
 * mapping away while it copies). Where MADV_COLLAPSE is missing (kernels before 6.1)
 * khugepaged collapses the promoted span in its own time.
 *
 * The collapsing thread (one per table, started by the first collapse, joined by
 * kt_mem_fini) has one job slot: `want`, a piece asked for and not begun, and `busy`, the
 * piece being collapsed. A sweep asks only when both are empty, so there is at most one piece
 * in flight. Whatever changes a region's pages first calls settle() on the bytes it touches:
 * a wanted piece there is dropped, and a busy one waited for (kt_mem_release before its
 * MADV_DONTNEED, kt_mem_alloc before it re-marks a region for 4 KiB pages, kt_mem_fini before
 * the munmap). So no piece is collapsed after, or while, its range is given back (a collapse
 * of released memory would fault 2 MiB of zeros back in) or refilled. Releases elsewhere
 * (the graves of the other region) do not wait. RL_KEYTAB_COLLAPSE=sync collapses on the
 * caller's thread instead, as the first version did (bench/keytab_bench.c compares them).
 *
 * The next resize fills the other range, and the old array's pages go back by MADV_DONTNEED
 * in whole 2 MiB pieces, the range staying reserved: no range is ever remapped and no array
 * moves once placed. Where THP is off (enabled = never) none of this happens, no thread is
 * started and the ranges are plain memory; RL_KEYTAB_HUGEPAGES=0 in the environment turns it
 * off too, for comparisons (bench/node_bench.sh, bench/limiter_bench.c).
 */
#include "keytab_mem.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Arrays at least this large are mmap'd rather than malloc'd. */
#define MMAP_MIN (64u * 1024)
#define PAGE ((size_t)4096)
#define HUGE ((size_t)2 * 1024 * 1024)

static size_t
round_up(size_t n, size_t unit)
{
    return (n + unit - 1) / unit * unit;
}

/* MADV_COLLAPSE's value where the headers predate it (Linux 6.1). */
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

/* The table's collapsing thread and its job (see the top of this file). */
struct kt_collapser {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* the thread waits here for a job; settle() for a busy piece */
    pthread_t thread;
    char *want;  /* a piece asked for, not begun; NULL for none */
    char *busy;  /* the piece being collapsed; NULL for none */
    bool stop;   /* kt_mem_fini: end the thread */
    bool off;    /* the kernel cannot collapse: answer KT_COLLAPSE_OFF from now on */
    bool worked; /* a collapse has succeeded once */
};

/* Collapses the piece at p. False when the kernel has no MADV_COLLAPSE. */
static bool
collapse_now(char *p, bool *worked)
{
    if (madvise(p, HUGE, MADV_COLLAPSE) == 0) {
        *worked = true;
        return true;
    }
    /* EINVAL before any success: the kernel has no MADV_COLLAPSE; stop asking (khugepaged
     * will do it). Other failures (no huge page free now, EAGAIN/ENOMEM; EINVAL after one
     * worked, which a mapping changed meanwhile gives) leave that piece in 4 KiB pages. */
    return errno != EINVAL || *worked;
}

static void *
collapser_main(void *arg)
{
    struct kt_collapser *c = arg;

    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->stop && c->want == NULL) {
            pthread_cond_wait(&c->cv, &c->mu);
        }
        if (c->stop) {
            break;
        }
        c->busy = c->want;
        c->want = NULL;
        char *p = c->busy;
        bool worked = c->worked;
        pthread_mutex_unlock(&c->mu);
        bool ok = collapse_now(p, &worked);
        pthread_mutex_lock(&c->mu);
        c->worked = worked;
        c->off = c->off || !ok;
        c->busy = NULL;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* The collapser, started if need be; NULL if no thread can be had. */
static struct kt_collapser *
collapser(struct kt_mem *m)
{
    if (m->col != NULL) {
        return m->col;
    }
    struct kt_collapser *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return NULL;
    }
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        return NULL;
    }
    if (pthread_cond_init(&c->cv, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        free(c);
        return NULL;
    }
    /* No signal is for it: they stay with the node's loop. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&c->thread, NULL, collapser_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        free(c);
        return NULL;
    }
    m->col = c;
    return c;
}

/* Drops a wanted piece that meets [p, p + n) and waits while the busy one does. Called
 * before the pages of [p, p + n) change. */
static void
settle(struct kt_mem *m, const void *p, size_t n)
{
    struct kt_collapser *c = m->col;
    if (c == NULL) {
        return;
    }
    const char *lo = p, *hi = (const char *)p + n;
    pthread_mutex_lock(&c->mu);
    if (c->want != NULL && c->want < hi && c->want + HUGE > lo) {
        c->want = NULL;
    }
    while (c->busy != NULL && c->busy < hi && c->busy + HUGE > lo) {
        pthread_cond_wait(&c->cv, &c->mu);
    }
    pthread_mutex_unlock(&c->mu);
}

/* Drops a wanted piece, wherever it is. */
static void
drop_wanted(struct kt_mem *m)
{
    struct kt_collapser *c = m->col;
    if (c != NULL) {
        pthread_mutex_lock(&c->mu);
        c->want = NULL;
        pthread_mutex_unlock(&c->mu);
    }
}

/* Ends the collapsing thread: drops a wanted piece, waits for a busy one. */
static void
collapser_stop(struct kt_mem *m)
{
    struct kt_collapser *c = m->col;
    if (c == NULL) {
        return;
    }
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    c->want = NULL;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
    m->col = NULL;
}

enum kt_collapse_res
kt_mem_collapse(struct kt_mem *m, void *p)
{
    if (m->sync) {
        bool worked = false; /* as the first version: EINVAL stops */
        return collapse_now(p, &worked) ? KT_COLLAPSE_QUEUED : KT_COLLAPSE_OFF;
    }
    struct kt_collapser *c = collapser(m);
    if (c == NULL) {
        return KT_COLLAPSE_OFF; /* khugepaged, then */
    }
    enum kt_collapse_res r = KT_COLLAPSE_QUEUED;
    pthread_mutex_lock(&c->mu);
    if (c->off) {
        r = KT_COLLAPSE_OFF;
    } else if (c->want != NULL || c->busy != NULL) {
        r = KT_COLLAPSE_BUSY;
    } else {
        c->want = p;
        pthread_cond_signal(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return r;
}

void
kt_mem_init(struct kt_mem *m, size_t max_n)
{
    memset(m, 0, sizeof(*m));
    m->max_n = max_n;
}

void
kt_mem_fini(struct kt_mem *m)
{
    collapser_stop(m);
    for (int k = 0; k < 2; k++) {
        if (m->reg[k] != NULL) {
            munmap(m->reg[k], m->reg_len);
            m->reg[k] = NULL;
        }
    }
}

/* Reserves a HUGE-aligned range of len bytes (a multiple of HUGE); NULL if it cannot. */
static char *
reserve(size_t len)
{
    /* MAP_NORESERVE: no commit charge for what is never touched (ignored under
     * vm.overcommit_memory = 2, where a range larger than the commit limit then fails and
     * the table falls back to an mmap per array). */
    char *p = mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        return NULL;
    }
    char *base = (char *)round_up((size_t)(uintptr_t)p, HUGE);
    if (base > p) {
        munmap(p, (size_t)(base - p));
    }
    size_t tail = (size_t)(p + len + HUGE - (base + len));
    if (tail > 0) {
        munmap(base + len, tail);
    }
    return base;
}

/* False when the kernel will not give huge pages (THP "never", or no THP at all). */
static bool
thp_enabled(void)
{
    char buf[128];
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f == NULL) {
        return false;
    }
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, "[never]") == NULL;
}

static void
reserve_regions(struct kt_mem *m)
{
    m->tried = true;
    if (m->max_n < KT_MEM_REGION_MIN || m->max_n > SIZE_MAX / 4) {
        return;
    }
    size_t len = round_up(m->max_n, HUGE);
    char *a = reserve(len);
    char *b = a != NULL ? reserve(len) : NULL;
    if (b == NULL) {
        if (a != NULL) {
            munmap(a, len);
        }
        return;
    }
    m->reg[0] = a;
    m->reg[1] = b;
    m->reg_len = len;
    const char *env = getenv("RL_KEYTAB_HUGEPAGES");
    if (env == NULL || strcmp(env, "0") != 0) {
        /* Fails (EINVAL) on a kernel without THP: the ranges are then plain memory. With
         * enabled = always, faults would take huge pages unless told not to. */
        m->huge = thp_enabled() && madvise(a, len, MADV_NOHUGEPAGE) == 0 &&
                  madvise(b, len, MADV_NOHUGEPAGE) == 0;
    }
    env = getenv("RL_KEYTAB_COLLAPSE");
    m->sync = env != NULL && strcmp(env, "sync") == 0;
}

void *
kt_mem_alloc(struct kt_mem *m, size_t n, bool region_ok, int avoid, int *reg)
{
    *reg = KT_MEM_NOREG;
    if (n < MMAP_MIN) {
        return calloc(1, n);
    }
    if (region_ok && n >= KT_MEM_REGION_MIN) {
        if (!m->tried) {
            reserve_regions(m);
        }
        if (m->reg[0] != NULL && n <= m->reg_len) {
            *reg = avoid == 1 ? 2 : 1;
            char *p = m->reg[*reg - 1];
            /* A piece still wanted is of the array this one replaces: dropped (one under
             * way there goes on, until that array's pages go back). */
            drop_wanted(m);
            settle(m, p, m->reg_len);
            if (m->huge) {
                /* Its last array was promoted: faults in 4 KiB pages again. */
                madvise(p, m->reg_len, MADV_NOHUGEPAGE);
            }
            return p;
        }
    }
    void *p = mmap(NULL, round_up(n, PAGE), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

size_t
kt_mem_grain(const struct kt_mem *m, int reg)
{
    return reg != KT_MEM_NOREG && m->huge ? HUGE : PAGE;
}

size_t
kt_mem_span(const struct kt_mem *m, size_t n, int reg)
{
    return round_up(n, kt_mem_grain(m, reg));
}

size_t
kt_mem_cost(const struct kt_mem *m, size_t n, int reg)
{
    return reg != KT_MEM_NOREG && m->huge ? n / (HUGE / PAGE) : n;
}

size_t
kt_mem_bytes(size_t n)
{
    return n >= MMAP_MIN ? round_up(n, PAGE) : n;
}

bool
kt_mem_malloced(size_t n)
{
    return n < MMAP_MIN;
}

void
kt_mem_release(struct kt_mem *m, void *p, size_t n, int reg)
{
    if (n == 0) {
        return;
    }
    if (reg == KT_MEM_NOREG) {
        munmap(p, n);
    } else {
        settle(m, p, n);
        /* Private anonymous memory reads back as zeros after this: ready for the region's
         * next array. */
        madvise(p, n, MADV_DONTNEED);
    }
}

bool
kt_mem_promote(const struct kt_mem *m, void *p, size_t n, int reg)
{
    if (reg == KT_MEM_NOREG || !m->huge) {
        return false;
    }
    return madvise(p, kt_mem_span(m, n, reg), MADV_HUGEPAGE) == 0;
}

void
kt_mem_free(struct kt_mem *m, void *p, size_t n, int reg)
{
    if (p == NULL) {
        return;
    }
    if (kt_mem_malloced(n)) {
        free(p);
    } else {
        kt_mem_release(m, p, kt_mem_span(m, n, reg), reg);
    }
}
