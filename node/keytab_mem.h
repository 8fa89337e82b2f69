/*
 * keytab_mem: where the key table's arrays live (keytab.c's helper, not for other modules).
 * Small arrays come from malloc, middling ones from their own mmap, and the large entry
 * arrays from one of two address ranges reserved once per table for the largest array the
 * memory cap allows (MAP_NORESERVE: untouched, they cost no memory). An array is filled in
 * 4 KiB pages and, once complete, promoted to transparent huge pages and collapsed a 2 MiB
 * piece at a time by a thread of the table's own (never the caller's), so the table's lookups
 * miss the TLB on 2 MiB pages, not 4 KiB ones, without any fault or call waiting for a huge
 * page. A resize fills the range the current array
 * does not use, and the old array's pages go back with MADV_DONTNEED, the range staying
 * reserved: arrays never move once placed and no range is ever remapped. Not for deciding
 * sizes or when to resize (keytab.c).
 */
#ifndef RL_KEYTAB_MEM_H
#define RL_KEYTAB_MEM_H

#include <stdbool.h>
#include <stddef.h>

/* No region: the array is malloc'd or has its own mapping (0, so zeroed structs say so).
 * The regions are 1 and 2. */
#define KT_MEM_NOREG 0

struct kt_mem {
    char *reg[2];   /* the reserved ranges 1 and 2, 2 MiB-aligned; NULL until needed */
    size_t reg_len; /* bytes of each */
    size_t max_n;   /* the largest array a region must hold */
    bool tried;     /* the reservation was attempted (it is tried once) */
    bool huge;      /* the ranges are reserved and the kernel has THP (not turned off) */
    bool sync;      /* RL_KEYTAB_COLLAPSE=sync: collapse on the caller's thread (comparisons) */
    struct kt_collapser *col; /* the collapsing thread and its one job; NULL until needed */
};

/* Sets up m for entry arrays of at most max_n bytes; reserves nothing yet. */
void kt_mem_init(struct kt_mem *m, size_t max_n);

/* Stops the collapsing thread (waiting for a collapse under way) and unmaps the reserved
 * ranges (the arrays in them are gone with them). */
void kt_mem_fini(struct kt_mem *m);

/* Arrays of this many bytes or more go to a region (entry arrays of 128K slots and up). */
#define KT_MEM_REGION_MIN (4u * 1024 * 1024)

/*
 * Zeroed memory for an array of n bytes: malloc'd when small, its own mmap when middling,
 * and, for an entry array (region_ok) of KT_MEM_REGION_MIN bytes or more, in the region other
 * than `avoid` (the region of the array it replaces, or KT_MEM_NOREG), whose pages must all
 * have been given back; its own mmap if the ranges cannot be reserved. *reg says which
 * (KT_MEM_NOREG for none). NULL when no memory can be had.
 */
void *kt_mem_alloc(struct kt_mem *m, size_t n, bool region_ok, int avoid, int *reg);

/* Marks a complete array of n bytes in a region for huge pages (MADV_HUGEPAGE on its span):
 * true when its 2 MiB pieces are then to be collapsed (kt_mem_collapse). */
bool kt_mem_promote(const struct kt_mem *m, void *p, size_t n, int reg);

/* What kt_mem_collapse did. */
enum kt_collapse_res {
    KT_COLLAPSE_QUEUED, /* the piece will be collapsed (or, with sync, was): ask for the next */
    KT_COLLAPSE_BUSY,   /* the last piece asked for is still being collapsed: ask again later */
    KT_COLLAPSE_OFF,    /* the kernel cannot (no MADV_COLLAPSE, before Linux 6.1): stop asking;
                         * khugepaged collapses a promoted array in its own time */
};

/*
 * Asks for the 2 MiB piece at p (2 MiB-aligned, in a promoted array of a region) to be
 * collapsed into a huge page (MADV_COLLAPSE: a copy of the piece into a fresh huge page,
 * 0.2-20 ms) by the table's collapsing thread, started on the first call; returns at once.
 * One piece at a time: while one is under way the answer is BUSY. Meanwhile the kernel makes
 * only accesses to that piece wait. The memory calls below that change a region's pages
 * (kt_mem_alloc, kt_mem_release, kt_mem_free, kt_mem_fini) first drop a piece not yet begun
 * that they touch and wait for one under way there, so no piece is collapsed while, or after,
 * its range is given back or refilled.
 */
enum kt_collapse_res kt_mem_collapse(struct kt_mem *m, void *p);

/* Frees a whole array of n bytes from kt_mem_alloc: free, munmap, or the region's pages back. */
void kt_mem_free(struct kt_mem *m, void *p, size_t n, int reg);

/* Bytes an array of n bytes really takes: mmap'd arrays whole pages (4 KiB; a region's pages
 * may be huge, 2 MiB, when touched). */
size_t kt_mem_bytes(size_t n);

/* The bytes from the array's start that kt_mem_release must give back for the whole array:
 * n rounded up to kt_mem_grain(reg). */
size_t kt_mem_span(const struct kt_mem *m, size_t n, int reg);

/* What giving back n bytes of region `reg` counts for against a caller's budget in bytes
 * (keytab_resize.c's drain (kt_drain)): n, or n / 512 in a region with huge pages, whose collapsed pieces go
 * back a page at a time. A piece not yet collapsed costs its 512 small pages, ~0.1-0.25 ms;
 * an insert's or a sweep's drain gives back at most one piece per grave, whatever it counts,
 * so that is the most such a call pays. */
size_t kt_mem_cost(const struct kt_mem *m, size_t n, int reg);

/* True when an array of n bytes is malloc'd, not mapped (and so is freed whole). */
bool kt_mem_malloced(size_t n);

/* The unit in which mapped memory of region `reg` is given back: 2 MiB in a region with huge
 * pages (so none is split), else 4 KiB. */
size_t kt_mem_grain(const struct kt_mem *m, int reg);

/* Gives back the pages of [p, p + n), which is grain-aligned within a mapped array (n whole
 * grains, or the array's end): munmap outside a region, MADV_DONTNEED inside one, so the range
 * stays reserved and reads back as zeros. */
void kt_mem_release(struct kt_mem *m, void *p, size_t n, int reg);

#endif
