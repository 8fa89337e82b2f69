/*
 * check_keytab_mem: the key table's collapses into huge pages, done by a thread of the table's
 * own (node/keytab_mem.c), against resizes and destruction: the thread exists only while a
 * table in huge pages has collapsed, a destroy ends it (also with a collapse asked for and not
 * yet done), RL_KEYTAB_HUGEPAGES=0 starts none, and keys stay found through grows and shrinks
 * that start while pieces of the array they replace are being collapsed. Run under ASan (and
 * TSan) these also check that no collapse outlives its table. Where the kernel has no
 * transparent huge pages, only the keys are checked. No timing assertions. Not for the
 * table's decisions (check_keytab).
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keytab.h"
#include "rltest.h"

static bool
never_full(void *arg, struct rl_keytab_entry *e, uint64_t now)
{
    (void)arg, (void)e, (void)now;
    return false;
}

static uint64_t
any_score(void *arg, struct rl_keytab_entry *e, uint64_t now, uint32_t tier)
{
    (void)arg, (void)e, (void)now, (void)tier;
    return 0;
}

static void
count_release(void *arg, struct rl_keytab_entry *e)
{
    (*(uint64_t *)arg)++;
    (void)e;
}

/* The threads of this process (/proc/self/status). */
static long
threads(void)
{
    char line[256];
    long n = -1;
    FILE *f = fopen("/proc/self/status", "r");
    RL_CHECK(f != NULL);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "Threads: %ld", &n) == 1) {
            break;
        }
    }
    fclose(f);
    RL_CHECK_INT(n, >, 0);
    return n;
}

/* The threads of this process once a joined thread has left it: pthread_join returns when
 * the thread has cleared its tid, a moment before the kernel drops its task from the
 * process's count, so a count read at once may still include it. Waits (5 s at most) for
 * the count to come down to want; returns the last count read. */
static long
threads_settled(long want)
{
    long n = threads();
    for (int i = 0; i < 5000 && n > want; i++) {
        usleep(1000);
        n = threads();
    }
    return n;
}

/* True when the kernel gives transparent huge pages (as keytab_mem.c decides). */
static bool
thp(void)
{
    char buf[128] = {0};
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
key(uint64_t i, uint64_t *hi, uint32_t *lo)
{
    uint64_t x = i * UINT64_C(0x9e3779b97f4a7c15) + 1;
    rl_keytab_fingerprint(x, ~x, hi, lo);
}

static void
insert_range(struct rl_keytab *t, uint64_t from, uint64_t to)
{
    for (uint64_t i = from; i < to; i++) {
        uint64_t hi;
        uint32_t lo;
        key(i, &hi, &lo);
        struct rl_keytab_entry *e = rl_keytab_insert(t, hi, lo, 1, 0);
        RL_CHECK(e != NULL);
    }
}

static void
check_range(struct rl_keytab *t, uint64_t from, uint64_t to, bool present)
{
    for (uint64_t i = from; i < to; i++) {
        uint64_t hi;
        uint32_t lo;
        key(i, &hi, &lo);
        RL_CHECK((rl_keytab_find(t, hi, lo) != NULL) == present, "key %llu", (unsigned long long)i);
    }
}

static bool
resizing(struct rl_keytab *t)
{
    struct rl_keytab_stats st;
    rl_keytab_stats(t, &st);
    return st.resize_left > 0;
}

/* A table of 300,000 keys (an entry array of 11 MiB, in a reserved range) whose last grow has
 * ended, with one sweep after it: a collapse asked for. */
static struct rl_keytab *
grown_table(uint64_t *released)
{
    struct rl_keytab_ops ops = {never_full, any_score, NULL, count_release, released};
    struct rl_keytab *t = NULL;
    RL_CHECK_INT(rl_keytab_create(&t, UINT64_C(256) << 20, &ops), ==, 0);
    insert_range(t, 0, 300000);
    while (resizing(t)) {
        rl_keytab_sweep(t, 0, 65536);
    }
    rl_keytab_sweep(t, 0, 65536);
    return t;
}

START_TEST(test_destroy_ends_thread)
{
    unsetenv("RL_KEYTAB_HUGEPAGES");
    unsetenv("RL_KEYTAB_COLLAPSE");
    for (int round = 0; round < 8; round++) {
        long before = threads();
        uint64_t released = 0;
        struct rl_keytab *t = grown_table(&released);
        /* The collapsing thread runs once a piece was asked for. (TSan starts a thread of its
         * own with the first one a program starts: hence `during`, not before + 1.) */
        long during = threads();
        RL_CHECK_INT(during, >=, before + (thp() ? 1 : 0));
        /* Destroyed at once, a collapse asked for and maybe under way; on odd rounds after
         * more sweeps, more pieces. */
        for (int k = 0; k < round % 2 * 3; k++) {
            rl_keytab_sweep(t, 0, 65536);
        }
        rl_keytab_destroy(t);
        RL_CHECK_UINT(released, ==, 300000);
        RL_CHECK_INT(threads_settled(thp() ? during - 1 : before), ==,
                     thp() ? during - 1 : before);
    }
}
END_TEST

START_TEST(test_no_thread_without_hugepages)
{
    long base = threads();
    setenv("RL_KEYTAB_HUGEPAGES", "0", 1);
    unsetenv("RL_KEYTAB_COLLAPSE");
    uint64_t released = 0;
    struct rl_keytab *t = grown_table(&released);
    for (int k = 0; k < 10; k++) {
        rl_keytab_sweep(t, 0, 65536);
    }
    RL_CHECK_INT(threads(), ==, base);
    check_range(t, 0, 300000, true);
    rl_keytab_destroy(t);
    unsetenv("RL_KEYTAB_HUGEPAGES");
}
END_TEST

/* Grows that start while pieces of the array they replace are asked for or being collapsed
 * (a sweep between each chunk of inserts), then a shrink after the keys are deleted: every
 * key stays found, every deleted one gone. */
START_TEST(test_resizes_during_collapses)
{
    uint64_t released = 0;
    struct rl_keytab *t = grown_table(&released);
    uint64_t n = 300000;
    while (n < 1200000) {
        insert_range(t, n, n + 5000);
        n += 5000;
        rl_keytab_sweep(t, 0, 65536);
    }
    check_range(t, 0, n, true);
    struct rl_keytab_stats st;
    rl_keytab_stats(t, &st);
    RL_CHECK_UINT(st.keys, ==, n);
    /* Delete most keys; the sweeps that follow collapse, then shrink (after
     * RL_KEYTAB_SHRINK_MS), the shrink's new array going to the other range. */
    for (uint64_t i = 100000; i < n; i++) {
        uint64_t hi;
        uint32_t lo;
        key(i, &hi, &lo);
        struct rl_keytab_entry *e = rl_keytab_find(t, hi, lo);
        RL_CHECK(e != NULL);
        rl_keytab_delete(t, e);
    }
    uint64_t now = 0;
    for (int k = 0; k < 400; k++) {
        rl_keytab_sweep(t, now, 65536);
        now += RL_KEYTAB_SHRINK_MS / 50;
    }
    rl_keytab_stats(t, &st);
    RL_CHECK_UINT(st.shrinks, >, 0);
    RL_CHECK_UINT(st.keys, ==, 100000);
    check_range(t, 0, 100000, true);
    check_range(t, 100000, n, false);
    rl_keytab_destroy(t);
    RL_CHECK_UINT(released, ==, n); /* the deleted ones, then the rest */
}
END_TEST

static void
add_case(Suite *s, const char *name, const TTest *test)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test);
    suite_add_tcase(s, tc);
}

static Suite *
keytab_mem_suite(void)
{
    Suite *s = suite_create("keytab_mem");
    add_case(s, "destroy_ends_thread", test_destroy_ends_thread);
    add_case(s, "no_thread_without_hugepages", test_no_thread_without_hugepages);
    add_case(s, "resizes_during_collapses", test_resizes_during_collapses);
    return s;
}

RL_TEST_MAIN(keytab_mem_suite)
