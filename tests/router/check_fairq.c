/*
 * check_fairq: the turns of the requests waiting for room at a node (router/fairq.c), on a
 * zeroed router and upstreams with no loop: flows take turns of RL_FAIRQ_QUANTUM requests in
 * the order they came (a flow: a client, rl_wire_tenant's id, and a node), a new flow joins at the
 * end of the round (a flow that keeps coming back new cannot starve one that waits), each flow
 * keeps its own order, a request taken off (its deadline) leaves its flow, and one node's flows are
 * not another's.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "router_int.h"
#include "rltest.h"

#define NREC 4096

static struct rl_router *r;
static struct rl_upstream *u, *u2;
static struct rl_pending *recs;

static void
setup(void)
{
    r = calloc(1, sizeof(*r));
    u = calloc(1, sizeof(*u));
    u2 = calloc(1, sizeof(*u2));
    recs = calloc(NREC, sizeof(*recs));
    ck_assert_ptr_nonnull(r);
    ck_assert_ptr_nonnull(u);
    ck_assert_ptr_nonnull(u2);
    ck_assert_ptr_nonnull(recs);
}

static void
teardown(void)
{
    rl_fairq_deinit(r);
    free(recs);
    free(u2);
    free(u);
    free(r);
}

/* Queues record i of source s for up. */
static void
add(struct rl_upstream *up, int s, int i)
{
    recs[i].client_id = (uint32_t)(s * 10000 + i);
    ck_assert_int_eq(rl_fairq_add(r, up, (uint32_t)s + 1, &recs[i]), 0);
}

/* The source of the next request for up, or -1. */
static int
next_src(struct rl_upstream *up, int *rec)
{
    struct rl_pending *p = rl_fairq_next(r, up);

    if (p == NULL) {
        return -1;
    }
    ck_assert_ptr_null(p->flow);
    *rec = (int)(p - recs);
    return (int)(p->client_id / 10000);
}

START_TEST(test_turns_in_arrival_order)
{
    int rec, n = 0, last[3] = {-1, -1, -1};
    int order[64];

    /* three sources, 20 each, queued source by source */
    for (int s = 0; s < 3; s++) {
        for (int k = 0; k < 20; k++) {
            add(u, s, n++);
        }
    }
    ck_assert_uint_eq(r->fq_waiting, 60);
    for (int k = 0; k < 60; k++) {
        order[k] = next_src(u, &rec);
        ck_assert_int_gt(rec, last[order[k]]); /* each source's own order kept */
        last[order[k]] = rec;
    }
    ck_assert_int_eq(next_src(u, &rec), -1);
    ck_assert_ptr_null(u->fair);
    ck_assert_uint_eq(r->fq_waiting, 0);
    ck_assert_uint_eq(r->fq_nflows, 0);
    /* 8 of 0, 8 of 1, 8 of 2, 8 of 0 ... then the remainders, 4 each */
    for (int k = 0; k < 48; k++) {
        ck_assert_int_eq(order[k], (k / (int)RL_FAIRQ_QUANTUM) % 3);
    }
    for (int k = 48; k < 60; k++) {
        ck_assert_int_eq(order[k], (k - 48) / 4);
    }
}
END_TEST

/* A light source that comes after a backlog waits one round, not the backlog; and sources
 * that keep coming back new (one request each time, taken at once) never get ahead of one
 * that waited before them. */
START_TEST(test_new_flow_waits_one_round)
{
    int rec, n = 0, seen = 0;

    for (int s = 0; s < 4; s++) {
        for (int k = 0; k < 100; k++) {
            add(u, s, n++);
        }
    }
    add(u, 10, n++); /* the light one */
    for (int k = 0; k < 400 && seen == 0; k++) {
        if (next_src(u, &rec) == 10) {
            seen = k + 1;
        }
    }
    ck_assert_int_eq(seen, 4 * (int)RL_FAIRQ_QUANTUM + 1);

    /* a backlogged source 0 and one-request sources arriving (two at a time) as fast as
     * turns are taken: 0 keeps getting its turns, a share of them as the waiting sources
     * add up (48 of 200 here), where serving each new source first left it none */
    teardown();
    setup();
    n = 0;
    for (int k = 0; k < 200; k++) {
        add(u, 0, n++);
    }
    seen = 0;
    for (int round = 0; round < 100; round++) {
        add(u, 1 + (2 * round) % 50, n++);
        add(u, 2 + (2 * round) % 50, n++);
        for (int t = 0; t < 2; t++) {
            if (next_src(u, &rec) == 0) {
                seen++;
            }
        }
    }
    ck_assert_int_ge(seen, 40);
}
END_TEST

/* A request taken off (its deadline answered it) leaves its flow; the last one leaves no flow
 * behind, and the round goes on with the others. */
START_TEST(test_remove)
{
    int rec;

    add(u, 0, 0);
    add(u, 0, 1);
    add(u, 1, 2);
    rl_fairq_remove(r, &recs[0]);
    ck_assert_ptr_null(recs[0].flow);
    rl_fairq_remove(r, &recs[0]); /* not waiting: nothing */
    ck_assert_uint_eq(r->fq_waiting, 2);
    rl_fairq_remove(r, &recs[2]); /* source 1's only one: its flow goes */
    ck_assert_uint_eq(r->fq_nflows, 1);
    ck_assert_int_eq(next_src(u, &rec), 0);
    ck_assert_int_eq(rec, 1);
    ck_assert_int_eq(next_src(u, &rec), -1);
    ck_assert_uint_eq(r->fq_nflows, 0);
}
END_TEST

/* Each node has its own flows, the same source's included; many flows grow the hash. */
START_TEST(test_nodes_apart)
{
    int rec, n = 0;

    for (int s = 0; s < 60; s++) {
        add(u, s, n++);
        add(u2, s, n++);
    }
    ck_assert_uint_eq(r->fq_nflows, 120);
    ck_assert_uint_ge(r->fq_nbuckets, 120);
    for (int s = 0; s < 60; s++) {
        ck_assert_int_eq(next_src(u2, &rec), s);
        ck_assert_int_eq(rec % 2, 1);
    }
    ck_assert_int_eq(next_src(u2, &rec), -1);
    ck_assert_ptr_nonnull(u->fair);
    for (int s = 0; s < 60; s++) {
        ck_assert_int_eq(next_src(u, &rec), s);
    }
    ck_assert_uint_eq(r->fq_nflows, 0);
}
END_TEST

static Suite *
fairq_suite(void)
{
    Suite *s = suite_create("fairq");
    TCase *tc = tcase_create("fairq");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_turns_in_arrival_order);
    tcase_add_test(tc, test_new_flow_waits_one_round);
    tcase_add_test(tc, test_remove);
    tcase_add_test(tc, test_nodes_apart);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(fairq_suite)
