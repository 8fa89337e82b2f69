/*
 * check_move_hold: node/move.c's rule for a shard received by a handoff ahead of this node's
 * view (RL_MOVE_OWNED_H), on a real libuv loop with the move's own timer: while views flow,
 * the hold ends after a quarter of handoff_wait and the shard follows the view (here back to
 * its sender, queued for it); while ZooKeeper is unreachable (rl_move_views_current false)
 * the view applied may be behind the sender's, so the shard stays decided here however long
 * that lasts, and once views flow again it waits a hold for the first of them. Not for the
 * shipping itself (check_move, with real nodes).
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "conf.h"
#include "limiter.h"
#include "move.h"
#include "rltest.h"
#include "shardmap.h"

#define NSHARDS 16u
#define WAIT_MS 200u /* handoff_wait: a hold is 50 ms */

struct fixture {
    uv_loop_t loop;
    struct rl_conf *conf;
    struct rl_limiter *lim;
    struct rl_move *m;
    uint16_t epochs[NSHARDS];
    uint32_t s; /* a shard the view gives to b */
};

static uint64_t
clock_ms(void *arg)
{
    return uv_now(arg);
}

static void
tick_nop(uv_timer_t *t)
{
    (void)t;
}

/* Runs the loop for at least ms of its time (the move's timers included). */
static void
runfor(uv_loop_t *loop, uint64_t ms)
{
    uv_timer_t t;
    uint64_t end;

    uv_timer_init(loop, &t);
    uv_timer_start(&t, tick_nop, 5, 5);
    uv_update_time(loop);
    end = uv_now(loop) + ms;
    while (uv_now(loop) < end) {
        uv_run(loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
}

static bool
owned_here(const struct fixture *f)
{
    return (rl_move_owned(f->m)[f->s / 8] >> (f->s % 8)) & 1u;
}

/* a and b are members; shard f->s is b's in a's view; b hands it to a (ahead of a's view). */
static void
setup(struct fixture *f)
{
    struct rl_member mem[2];
    struct rl_shardmap *map = NULL;
    struct rl_move_opts o;
    char err[256] = "", why[256] = "";

    memset(f, 0, sizeof(*f));
    ck_assert_int_eq(uv_loop_init(&f->loop), 0);
    RL_CHECK(rl_conf_parse("t.conf", "[cluster]\nshards = 16\n[service x]\nlimit = "
                                     "fixed_window 5 per 1m\n",
                           &f->conf, err, sizeof(err)) == 0,
             "conf: %s", err);
    ck_assert_int_eq(rl_limiter_create(&f->lim, f->conf, 16ull << 20), 0);
    memset(&o, 0, sizeof(o));
    o.nshards = NSHARDS;
    o.self = "a";
    o.handoff_wait_ms = WAIT_MS;
    o.epochs = f->epochs;
    o.limiter = f->lim;
    o.now_ms = clock_ms;
    o.now_arg = &f->loop;
    ck_assert_int_eq(rl_move_create(&f->m, &f->loop, &o), 0);
    memset(mem, 0, sizeof(mem));
    strcpy(mem[0].name, "a");
    strcpy(mem[0].addr, "127.0.0.1:1");
    strcpy(mem[1].name, "b");
    strcpy(mem[1].addr, "127.0.0.1:1");
    ck_assert_int_eq(rl_shardmap_create(&map, NSHARDS, mem, 2, NULL), 0);
    f->s = NSHARDS;
    for (uint32_t s = 0; s < NSHARDS && f->s == NSHARDS; s++) {
        if (strcmp(map->members[rl_shardmap_owner(map, s)].name, "b") == 0) {
            f->s = s;
        }
    }
    ck_assert_uint_lt(f->s, NSHARDS);
    rl_move_view(f->m, map);
    ck_assert(!owned_here(f));
    /* b's records arrive: a's view lags b's, so a takes the shard and holds it */
    ck_assert_int_eq(rl_move_in_begin(f->m, f->s, 10, "b", 1, false, why, sizeof(why)), 0);
    rl_move_in_end(f->m, f->s, 0, true);
    ck_assert(owned_here(f));
}

static void
teardown(struct fixture *f)
{
    rl_move_destroy(f->m);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&f->loop), 0);
    rl_limiter_destroy(f->lim);
    rl_conf_destroy(f->conf);
}

/* Runs the loop until shard s is no longer decided here, at most ms. */
static bool
left_within(struct fixture *f, uint64_t ms)
{
    for (uint64_t i = 0; i < ms / 10 && owned_here(f); i++) {
        runfor(&f->loop, 10);
    }
    return !owned_here(f);
}

/* Views flowing: after the hold the shard follows the view (exported for b, so no longer
 * decided here). */
START_TEST(test_hold_follows_view)
{
    struct fixture f;

    setup(&f);
    ck_assert(left_within(&f, 20000));
    teardown(&f);
}
END_TEST

/* ZooKeeper unreachable: the shard stays decided here, well past any hold; views flowing
 * again, it waits a hold for the first view before it follows the one it has. */
START_TEST(test_hold_kept_while_views_stale)
{
    struct fixture f;
    struct rl_move_stats st;

    setup(&f);
    rl_move_views_current(f.m, false);
    runfor(&f.loop, 2 * WAIT_MS); /* eight holds */
    rl_move_stats(f.m, &st);
    ck_assert_uint_eq(st.outgoing, 0);
    ck_assert(owned_here(&f));
    rl_move_views_current(f.m, true);
    /* no view came after all: after the hold granted for it, it follows the one it has */
    ck_assert(left_within(&f, 20000));
    teardown(&f);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("move_hold");
    TCase *tc = tcase_create("hold");
    SRunner *sr;
    int failed;

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_hold_follows_view);
    tcase_add_test(tc, test_hold_kept_while_views_stale);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
