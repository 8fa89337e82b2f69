/*
 * check_move_view: node/move.c's rules for what a view change does to a shard, on a real
 * libuv loop with the move's own timer.
 * - A shard received by a handoff ahead of this node's view (RL_MOVE_OWNED_H): while views
 *   flow, the hold ends after a quarter of handoff_wait and the shard follows the view (here
 *   back to its sender, queued for it); while ZooKeeper is unreachable
 *   (rl_move_views_current false) the view applied may be behind the sender's, so the shard
 *   stays decided here however long that lasts, and once views flow again it waits for
 *   the first read of the members (or a hold, when no read comes).
 * - "Nothing here": said of a shard ahead of this node's view, taken when the view expects
 *   the shard from a node that said it within handoff_wait, whoever else said it too; never
 *   from another node, nor while records of the shard from an unknown sender are coming.
 *   Told by a node on its first active view: of every shard it holds nothing of when every
 *   node was joining before (and for half a handoff_wait after), of some when the nodes
 *   active before registered with it, of none when an older one was active.
 * - A shard placed here whose owner goes back to joining (restarted, or its session
 *   expired): decided here at once, from zero, not waited for; from a node leaving, it is
 *   waited for (its counters come).
 * - The wait for an expected shard: counted from the last message of a member of the view,
 *   not of anyone; at its end a shard whose records came ahead of a view that never placed it
 *   here is not decided here.
 * Not for the shipping itself (check_move, with real nodes).
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <uv.h>

#include "conf.h"
#include "limiter.h"
#include "log.h"
#include "move.h"
#include "rltest.h"
#include "shardmap.h"
#include "wire.h"

#define NSHARDS 16u
#define WAIT_MS 200u /* handoff_wait: a hold is 50 ms */
#define LONG_WAIT_MS 2000u /* the default handoff_wait, where a test needs a batch to stay out */

struct fixture {
    uv_loop_t loop;
    struct rl_conf *conf;
    struct rl_limiter *lim;
    struct rl_move *m;
    uint16_t epochs[NSHARDS];
    uint32_t s;             /* a shard the view gives to b */
    int64_t created_ms[3];  /* a's, b's and c's registration times in the views */
    const char *b_addr;     /* b's address in the views (NULL: 127.0.0.1:1, where nobody is) */
    const char *c_addr;     /* c's, the same */
};

#define CREATED_MS 1700000000000 /* the registrations' time (ZooKeeper's clock) */

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

#define ABSENT 0xffu /* a member state: not in the view */

/* Applies a view of members a, b and c (c_state ABSENT: not in it), in those states, to a's
 * move. */
static void
view_abc(struct fixture *f, uint8_t a_state, uint8_t b_state, uint8_t c_state)
{
    struct rl_member mem[3];
    struct rl_shardmap *map = NULL;
    const char *names[] = {"a", "b", "c"};
    uint8_t states[] = {a_state, b_state, c_state};
    size_t n = c_state == ABSENT ? 2 : 3;

    memset(mem, 0, sizeof(mem));
    for (size_t i = 0; i < n; i++) {
        strcpy(mem[i].name, names[i]);
        const char *addr = i == 1 ? f->b_addr : i == 2 ? f->c_addr : NULL;

        strcpy(mem[i].addr, addr != NULL ? addr : "127.0.0.1:1");
        mem[i].state = states[i];
        mem[i].created_ms = f->created_ms[i];
    }
    ck_assert_int_eq(rl_shardmap_create(&map, NSHARDS, mem, n, NULL), 0);
    rl_move_view(f->m, map);
}

/* As view_abc, a active. */
static void
view3(struct fixture *f, uint8_t b_state, uint8_t c_state)
{
    view_abc(f, RL_MEMBER_ACTIVE, b_state, c_state);
}

/* Applies a view of members a (active) and b (in state b_state) to a's move. */
static void
view(struct fixture *f, uint8_t b_state)
{
    view3(f, b_state, ABSENT);
}

/* Node a's move and a view where a and b are active; f->s is a shard of b's. */
static void
setup_views(struct fixture *f, uint32_t wait_ms)
{
    struct rl_move_opts o;
    char err[256] = "";

    memset(f, 0, sizeof(*f));
    for (size_t i = 0; i < 3; i++) {
        f->created_ms[i] = CREATED_MS; /* registered together */
    }
    ck_assert_int_eq(uv_loop_init(&f->loop), 0);
    RL_CHECK(rl_conf_parse("t.conf", "[cluster]\nshards = 16\n[service x]\nlimit = "
                                     "fixed_window 5 per 1m\n",
                           &f->conf, err, sizeof(err)) == 0,
             "conf: %s", err);
    ck_assert_int_eq(rl_limiter_create(&f->lim, f->conf, 16ull << 20), 0);
    memset(&o, 0, sizeof(o));
    o.nshards = NSHARDS;
    o.self = "a";
    o.handoff_wait_ms = wait_ms;
    o.epochs = f->epochs;
    o.limiter = f->lim;
    o.now_ms = clock_ms;
    o.now_arg = &f->loop;
    ck_assert_int_eq(rl_move_create(&f->m, &f->loop, &o), 0);
    view(f, RL_MEMBER_ACTIVE);
    f->s = NSHARDS;
    for (uint32_t s = 0; s < NSHARDS && f->s == NSHARDS; s++) {
        if (!((rl_move_owned(f->m)[s / 8] >> (s % 8)) & 1u)) {
            f->s = s;
        }
    }
    ck_assert_uint_lt(f->s, NSHARDS);
}

/* As setup_views, then b hands f->s to a (ahead of a's view). */
static void
setup(struct fixture *f, uint32_t wait_ms)
{
    char why[256] = "";

    setup_views(f, wait_ms);
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

/* Runs the loop until shard s is answered MOVING with its next owner's name (its batch has
 * ended: during the batch it is MOVING naming nobody), at most ms: that name, or "". */
static const char *
shipped_within(struct fixture *f, uint64_t ms)
{
    const char *owner = "";

    for (uint64_t i = 0; i < ms / 10; i++) {
        if (rl_move_moving(f->m, f->s, &owner) && owner != NULL && owner[0] != '\0') {
            return owner;
        }
        runfor(&f->loop, 10);
    }
    return "";
}

/* Views flowing: after the hold the shard follows the view (exported for b, so no longer
 * decided here). */
START_TEST(test_hold_follows_view)
{
    struct fixture f;

    setup(&f, WAIT_MS);
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

    setup(&f, WAIT_MS);
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

/* ZooKeeper unreachable, then back: the first read of the members since ends the hold (the
 * view is current), without waiting the hold granted when no read comes (1 s here). */
START_TEST(test_hold_ends_at_first_read)
{
    struct fixture f;

    setup(&f, 4000); /* a hold: 1 s */
    rl_move_views_current(f.m, false);
    runfor(&f.loop, 1200); /* past the shard's own hold */
    ck_assert(owned_here(&f));
    rl_move_views_current(f.m, true);
    rl_move_members_read(f.m);
    /* (a loop stalled past the hold would let it go either way: never a false failure) */
    RL_CHECK(left_within(&f, 700), "held a hold after the members were read");
    teardown(&f);
}
END_TEST

/* node (its name) says it holds nothing of f->s, ahead of a's view (a holds nothing of it). */
static void
told_nothing(struct fixture *f, const char *node)
{
    char why[256] = "";

    ck_assert_int_eq(
        rl_move_in_begin(f->m, f->s, 0, node, strlen(node), true, why, sizeof(why)), 0);
}

/*
 * "Nothing here" of b's shard f->s, said ahead of a's view by `first` and, gap_ms later, by
 * `second` (NULL: no one), with c a member (joining: placed nothing); then a's view moves
 * f->s from b (leaving) to a. Returns whether f->s is still expected (from b).
 */
static bool
expected_after(const char *first, uint64_t gap_ms, const char *second)
{
    struct fixture f;
    struct rl_move_stats st;
    bool expected;

    setup_views(&f, WAIT_MS);
    view3(&f, RL_MEMBER_ACTIVE, RL_MEMBER_JOINING);
    told_nothing(&f, first);
    if (gap_ms > 0) {
        runfor(&f.loop, gap_ms);
    }
    if (second != NULL) {
        told_nothing(&f, second);
    }
    view3(&f, RL_MEMBER_LEAVING, RL_MEMBER_JOINING);
    expected = rl_move_expected(f.m, f.s);
    ck_assert(expected != owned_here(&f));
    rl_move_stats(f.m, &st);
    ck_assert_uint_ge(st.incoming, 1); /* b's other shards, of which nothing was said */
    teardown(&f);
    return expected;
}

/* b and then c say it; the view expecting it from b decides it at once (before, the last
 * teller's name alone was kept: c's, and a waited for b). */
START_TEST(test_nothing_from_two_nodes)
{
    ck_assert(!expected_after("b", 0, "c"));
}
END_TEST

/* Only c said it: the shard is still expected from b (only the node it is expected from
 * may say it holds nothing of it). */
START_TEST(test_nothing_from_another_node_not_taken)
{
    ck_assert(expected_after("c", 0, NULL));
}
END_TEST

/* b's word has expired (handoff_wait) when c speaks: it does not come back with c's, and the
 * view expecting the shard from b waits for b. */
START_TEST(test_nothing_expired_stays_expired)
{
    ck_assert(expected_after("b", WAIT_MS + 50, "c"));
}
END_TEST

/* Records of b's shard came ahead of a's view (its sender not known yet): "nothing here"
 * from c, or from no one named, is not taken while more records may follow. */
START_TEST(test_nothing_not_taken_while_records_come)
{
    struct fixture f;
    char why[256] = "";

    setup_views(&f, WAIT_MS);
    ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 10, NULL, 0, false, why, sizeof(why)), 0);
    rl_move_in_end(f.m, f.s, 3, false); /* not the last message */
    ck_assert(rl_move_expected(f.m, f.s));
    ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 0, "c", 1, true, why, sizeof(why)), 1);
    ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 0, NULL, 0, true, why, sizeof(why)), 1);
    ck_assert(rl_move_expected(f.m, f.s));
    ck_assert(!owned_here(&f));
    teardown(&f);
}
END_TEST

/* A view where b is joining again: f->s is decided here at once, no shard expected. */
static void
b_rejoins(struct fixture *f)
{
    struct rl_move_stats st;

    view(f, RL_MEMBER_JOINING);
    rl_move_stats(f->m, &st);
    ck_assert_uint_eq(st.incoming, 0);
    ck_assert(owned_here(f));
}

/* Shards of the current view a holds nothing of (NONE: neither decided, expected nor held). */
static uint64_t
shards_not_here(struct fixture *f)
{
    uint64_t n = 0;

    for (uint32_t s = 0; s < NSHARDS; s++) {
        n += !((rl_move_owned(f->m)[s / 8] >> (s % 8)) & 1u) && !rl_move_expected(f->m, s);
    }
    return n;
}

/* How many shards a plans to say "nothing here" of on the view a, b, c (states given). */
static uint64_t
planned_on(struct fixture *f, uint8_t a_state, uint8_t b_state, uint8_t c_state)
{
    struct rl_move_stats st;
    uint64_t before;

    rl_move_stats(f->m, &st);
    before = st.nothing_planned;
    view_abc(f, a_state, b_state, c_state);
    rl_move_stats(f->m, &st);
    return st.nothing_planned - before;
}

/*
 * Every node joining (a cluster starting, or every session expired): a's first active view,
 * with c active and b still joining, tells c of each of its shards (c may have seen a alone
 * active); b, active a moment later (within half a handoff_wait), is told of each of its
 * shards that a holds nothing of too; past that, nobody is.
 */
START_TEST(test_nothing_told_of_every_shard_when_all_joined)
{
    struct fixture f;
    const uint8_t A = RL_MEMBER_ACTIVE, J = RL_MEMBER_JOINING;
    uint64_t n;

    setup_views(&f, 400); /* the telling lasts 200 ms */
    ck_assert_uint_eq(planned_on(&f, J, J, J), 0);
    n = planned_on(&f, A, J, A);
    ck_assert_uint_gt(n, 0);
    ck_assert_uint_eq(n, shards_not_here(&f)); /* every shard of c's */
    n = planned_on(&f, A, A, A);
    ck_assert_uint_gt(n, 0); /* b's, which a holds nothing of */
    ck_assert_uint_eq(planned_on(&f, A, A, A), 0); /* no node active since: not again */
    runfor(&f.loop, 250);
    ck_assert_uint_eq(planned_on(&f, A, A, J), 0);
    ck_assert_uint_eq(planned_on(&f, A, A, A), 0);
    teardown(&f);
}
END_TEST

/* Nodes that registered together, b and c active first: a's first active view tells only
 * the shards that would be a's were their owner not active, not every one. */
START_TEST(test_nothing_told_of_some_shards_after_young_nodes)
{
    struct fixture f;
    const uint8_t A = RL_MEMBER_ACTIVE, J = RL_MEMBER_JOINING;
    uint64_t n;

    setup_views(&f, WAIT_MS);
    f.created_ms[0] = CREATED_MS + WAIT_MS; /* a: registered within handoff_wait of them */
    ck_assert_uint_eq(planned_on(&f, J, A, A), 0);
    n = planned_on(&f, A, A, A);
    ck_assert_uint_gt(n, 0);
    ck_assert_uint_lt(n, shards_not_here(&f));
    teardown(&f);
}
END_TEST

/* A live node before (b, registered long before a): a's first active view tells nothing
 * (b ships its shards along whatever the views; one taken for "nothing" would be refused). */
START_TEST(test_nothing_told_after_a_live_node)
{
    struct fixture f;
    const uint8_t A = RL_MEMBER_ACTIVE, J = RL_MEMBER_JOINING;

    setup_views(&f, WAIT_MS);
    f.created_ms[1] = CREATED_MS - 10 * WAIT_MS;
    ck_assert_uint_eq(planned_on(&f, J, A, J), 0);
    ck_assert_uint_eq(planned_on(&f, A, A, A), 0);
    ck_assert_uint_gt(shards_not_here(&f), 0);
    teardown(&f);
}
END_TEST

/* b goes back to joining (restarted before its session expired): its shards are decided
 * here at once, none expected (before: expected from b, decided after handoff_wait). */
START_TEST(test_restarted_owner_not_waited)
{
    struct fixture f;

    setup_views(&f, WAIT_MS);
    b_rejoins(&f);
    teardown(&f);
}
END_TEST

/* As setup_views, then a leaves and ships its shards to b, which fails at once (nothing
 * listens): given up, GONE. Returns a shard that was a's. */
static uint32_t
setup_given_up(struct fixture *f)
{
    struct rl_move_stats st;
    uint32_t mine = NSHARDS;

    setup_views(f, WAIT_MS);
    for (uint32_t s = 0; s < NSHARDS && mine == NSHARDS; s++) {
        if ((rl_move_owned(f->m)[s / 8] >> (s % 8)) & 1u) {
            mine = s;
        }
    }
    ck_assert_uint_lt(mine, NSHARDS);
    view_abc(f, RL_MEMBER_LEAVING, RL_MEMBER_ACTIVE, ABSENT);
    for (int i = 0; i < 2000; i++) {
        rl_move_stats(f->m, &st);
        if (st.outgoing == 0) {
            break;
        }
        runfor(&f->loop, 10);
    }
    ck_assert_uint_eq(st.outgoing, 0);
    return mine;
}

/* a leaves and ships its shards to b (here the shipping fails: given up, GONE); b is then
 * seen joining again (restarted) as a comes back: a's shards are decided at once, not
 * expected back from b's previous process (node-restart-quick failed so once: 42 shards
 * waited handoff_wait twice). */
START_TEST(test_shipped_to_restarted_node_not_waited)
{
    struct fixture f;
    uint32_t mine = setup_given_up(&f);

    ck_assert(!((rl_move_owned(f.m)[mine / 8] >> (mine % 8)) & 1u));
    view_abc(&f, RL_MEMBER_ACTIVE, RL_MEMBER_JOINING, ABSENT);
    ck_assert(!rl_move_expected(f.m, mine));
    ck_assert((rl_move_owned(f.m)[mine / 8] >> (mine % 8)) & 1u);
    teardown(&f);
}
END_TEST

/* A shard gone from here (shipped, or given up) is answered MOVING with its next owner's name
 * for handoff_wait, the longest a router resends on MOVING; then it is simply not here
 * (NOT_OWNER). It was answered MOVING for as long as the node ran (55 s and more, where the
 * docs promise MOVING never outlasts handoff_wait). */
START_TEST(test_gone_hint_ends_after_handoff_wait)
{
    struct fixture f;
    uint32_t mine = setup_given_up(&f);
    const char *owner = NULL;

    ck_assert(rl_move_moving(f.m, mine, &owner));
    ck_assert_str_eq(owner, "b");
    runfor(&f.loop, WAIT_MS * 2);
    ck_assert(!rl_move_moving(f.m, mine, &owner));
    ck_assert(!((rl_move_owned(f.m)[mine / 8] >> (mine % 8)) & 1u));
    /* and back here by the view: decided, or expected from b, as for any shard */
    view_abc(&f, RL_MEMBER_ACTIVE, RL_MEMBER_ACTIVE, ABSENT);
    ck_assert(((rl_move_owned(f.m)[mine / 8] >> (mine % 8)) & 1u) || rl_move_expected(f.m, mine));
    teardown(&f);
}
END_TEST

/* b leaves (a clean stop): its shards are expected from it, not decided here until its
 * counters come; b seen joining again meanwhile (killed mid-drain and restarted): decided
 * here at once. */
START_TEST(test_leaving_owner_waited_until_it_rejoins)
{
    struct fixture f;
    struct rl_move_stats st;

    setup_views(&f, WAIT_MS);
    view(&f, RL_MEMBER_LEAVING);
    rl_move_stats(f.m, &st);
    ck_assert_uint_ge(st.incoming, 1);
    ck_assert(!owned_here(&f));
    ck_assert(rl_move_expected(f.m, f.s));
    b_rejoins(&f);
    teardown(&f);
}
END_TEST

/* Records of b's shard f->s came ahead of a's view and never their last message, and no
 * view places f->s here: when the wait ends, a does not decide it (it is b's), and at no
 * moment before (before, the wait's end started it from zero here: two nodes decided it, and
 * one HANDOFF_IN from anyone could make a node decide a shard of another's). */
START_TEST(test_unconfirmed_records_never_decided)
{
    struct fixture f;
    char why[256] = "";
    struct rl_move_stats st;

    setup_views(&f, WAIT_MS);
    ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 10, "b", 1, false, why, sizeof(why)), 0);
    rl_move_in_end(f.m, f.s, 3, false);
    ck_assert(rl_move_expected(f.m, f.s));
    for (unsigned i = 0; i < 3 * WAIT_MS / 10; i++) {
        runfor(&f.loop, 10);
        RL_CHECK(!owned_here(&f), "decided here after %u ms", 10 * (i + 1));
    }
    ck_assert(!rl_move_expected(f.m, f.s));
    rl_move_stats(f.m, &st);
    ck_assert_uint_eq(st.in_failed, 1);
    teardown(&f);
}
END_TEST

/* f->s is expected from b (leaving), which sends nothing. Messages from a name that is no
 * member of a's view (made up), or from no name, do not keep the wait open: f->s starts
 * from zero here within a few handoff_waits (before, anyone's HANDOFF_IN renewed every wait,
 * so a stream of them kept f->s waiting, its requests held, without end). A member's do (the
 * holder of a shard may be another node than the one it is expected from). */
START_TEST(test_wait_counts_members_only)
{
    struct fixture f;
    char why[256] = "";
    uint32_t other = NSHARDS;

    setup_views(&f, WAIT_MS);
    view3(&f, RL_MEMBER_ACTIVE, RL_MEMBER_ACTIVE);
    view3(&f, RL_MEMBER_LEAVING, RL_MEMBER_ACTIVE);
    ck_assert(rl_move_expected(f.m, f.s));
    for (uint32_t s = 0; s < NSHARDS && other == NSHARDS; s++) {
        if (s != f.s && !rl_move_expected(f.m, s) &&
            !((rl_move_owned(f.m)[s / 8] >> (s % 8)) & 1u) &&
            rl_move_in_begin(f.m, s, 10, "c", 1, false, why, sizeof(why)) == 0) {
            other = s; /* c's records of it come ahead of a's view */
            rl_move_in_end(f.m, s, 1, false);
        }
    }
    ck_assert_uint_lt(other, NSHARDS);
    ck_assert(rl_move_expected(f.m, other));
    /* c (a member) ships: the wait stays open meanwhile */
    for (unsigned i = 0; i < 3 * WAIT_MS / 20; i++) {
        ck_assert_int_eq(rl_move_in_begin(f.m, other, 10, "c", 1, false, why, sizeof(why)), 0);
        rl_move_in_end(f.m, other, 1, false);
        runfor(&f.loop, 20);
        RL_CHECK(rl_move_expected(f.m, f.s), "stopped waiting for b while c ships");
    }
    /* "z" (no member) and a sender with no name: the wait ends */
    for (unsigned i = 0; i < 8 * WAIT_MS / 20 && rl_move_expected(f.m, f.s); i++) {
        (void)rl_move_in_begin(f.m, other, 10, i % 2 ? "z" : NULL, i % 2, false, why, sizeof(why));
        rl_move_in_end(f.m, other, 1, false);
        runfor(&f.loop, 20);
    }
    RL_CHECK(!rl_move_expected(f.m, f.s), "still waiting for b while z sends");
    ck_assert(owned_here(&f));
    teardown(&f);
}
END_TEST

/* Records of b's shard come ahead of a's view, then the view places it here, and b's
 * messages keep coming for longer than handoff_wait (a large shard): not started from zero
 * meanwhile, and decided here with its records when the last one comes. */
START_TEST(test_long_transfer_ahead_of_view_kept)
{
    struct fixture f;
    char why[256] = "";

    setup_views(&f, WAIT_MS);
    ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 10, "b", 1, false, why, sizeof(why)), 0);
    rl_move_in_end(f.m, f.s, 1, false);
    view(&f, RL_MEMBER_LEAVING);
    for (unsigned i = 0; i < 3 * WAIT_MS / 20; i++) {
        RL_CHECK(rl_move_in_begin(f.m, f.s, 10, "b", 1, false, why, sizeof(why)) == 0,
                 "message %u refused: %s", i, why);
        rl_move_in_end(f.m, f.s, 1, false);
        runfor(&f.loop, 20);
        ck_assert(rl_move_expected(f.m, f.s));
    }
    ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 10, "b", 1, false, why, sizeof(why)), 0);
    rl_move_in_end(f.m, f.s, 1, true);
    ck_assert(owned_here(&f));
    teardown(&f);
}
END_TEST

/* "Still coming" (an empty, non-final HANDOFF_IN) from b ahead of a's view changes nothing
 * there: once the view expects f->s from b, MOVING names b and b's "nothing here" is taken.
 * (Before, it was taken for records ahead of the view: f->s was then expected from no one,
 * MOVING named no node, and b's word was refused.) */
START_TEST(test_still_coming_ahead_of_the_view)
{
    struct fixture f;
    const char *owner = NULL;
    char why[256] = "";

    setup_views(&f, WAIT_MS);
    ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 0, "b", 1, false, why, sizeof(why)), 1);
    view(&f, RL_MEMBER_LEAVING);
    ck_assert(rl_move_expected(f.m, f.s));
    ck_assert(rl_move_moving(f.m, f.s, &owner));
    ck_assert_str_eq(owner, "b");
    ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 0, "b", 1, true, why, sizeof(why)), 0);
    rl_move_in_end(f.m, f.s, 0, true);
    ck_assert(!rl_move_expected(f.m, f.s));
    ck_assert(owned_here(&f));
    teardown(&f);
}
END_TEST

/* "Still coming" keeps open the waits of the shards expected from its sender, and of none
 * other: a expects f->s from b (leaving); while b says it every quarter of handoff_wait, f->s
 * waits; c saying it of another shard does not hold f->s, and once b stops, f->s starts from
 * zero here after handoff_wait. (Before, any member's word kept every wait open.) */
START_TEST(test_still_coming_keeps_its_senders_waits_only)
{
    struct fixture f;
    char why[256] = "";
    uint32_t other;

    setup_views(&f, WAIT_MS);
    other = (f.s + 1) % NSHARDS;
    view3(&f, RL_MEMBER_LEAVING, RL_MEMBER_ACTIVE);
    ck_assert(rl_move_expected(f.m, f.s));
    for (int i = 0; i < 12; i++) { /* three handoff_waits */
        ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 0, "b", 1, false, why, sizeof(why)), 1);
        runfor(&f.loop, WAIT_MS / 4);
    }
    ck_assert(rl_move_expected(f.m, f.s));
    for (int i = 0; i < 12; i++) {
        ck_assert_int_eq(rl_move_in_begin(f.m, other, 0, "c", 1, false, why, sizeof(why)), 1);
        runfor(&f.loop, WAIT_MS / 4);
    }
    ck_assert(!rl_move_expected(f.m, f.s));
    ck_assert(owned_here(&f));
    teardown(&f);
}
END_TEST

/* "Still coming" naming a shard expected from another node: its sender holds it (a node
 * that joined while the sender left expects it from where its previous view placed it).
 * a expects f->s from b; c says f->s is still coming: MOVING names c from then on, c's word
 * keeps the wait open while b says nothing, b's "nothing here" is refused, and c's records
 * are taken. (Before, a kept waiting for b alone and started f->s from zero after
 * handoff_wait while c, answered, still decided it: the attack round of 2026-11-30, a drain
 * and a join at once.) */
START_TEST(test_still_coming_names_the_holder)
{
    struct fixture f;
    const char *owner = NULL;
    char why[256] = "";

    setup_views(&f, WAIT_MS);
    view3(&f, RL_MEMBER_LEAVING, RL_MEMBER_ACTIVE);
    ck_assert(rl_move_expected(f.m, f.s));
    ck_assert(rl_move_moving(f.m, f.s, &owner));
    ck_assert_str_eq(owner, "b");
    for (int i = 0; i < 12; i++) { /* three handoff_waits */
        ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 0, "c", 1, false, why, sizeof(why)), 1);
        runfor(&f.loop, WAIT_MS / 4);
        RL_CHECK(rl_move_expected(f.m, f.s), "stopped waiting while c holds it");
    }
    ck_assert(rl_move_moving(f.m, f.s, &owner));
    ck_assert_str_eq(owner, "c");
    ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 0, "b", 1, true, why, sizeof(why)), 1);
    ck_assert(rl_move_expected(f.m, f.s));
    ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 10, "c", 1, true, why, sizeof(why)), 0);
    rl_move_in_end(f.m, f.s, 1, true);
    ck_assert(!rl_move_expected(f.m, f.s));
    ck_assert(owned_here(&f));
    teardown(&f);
}
END_TEST

/* A shard that a view of a (a_state), b (b_state) and c active places on c, and that is
 * decided here (mine) or not: the first such. */
static uint32_t
shard_going_to_c(const struct fixture *f, bool mine, uint8_t a_state, uint8_t b_state)
{
    struct rl_member mem[3];
    struct rl_shardmap *map = NULL;
    const char *names[] = {"a", "b", "c"};
    const uint8_t states[] = {a_state, b_state, RL_MEMBER_ACTIVE};
    uint32_t s = NSHARDS;

    memset(mem, 0, sizeof(mem));
    for (size_t i = 0; i < 3; i++) {
        strcpy(mem[i].name, names[i]);
        strcpy(mem[i].addr, "127.0.0.1:1");
        mem[i].state = states[i];
        mem[i].created_ms = f->created_ms[i];
    }
    ck_assert_int_eq(rl_shardmap_create(&map, NSHARDS, mem, 3, NULL), 0);
    for (uint32_t i = 0; i < NSHARDS && s == NSHARDS; i++) {
        if ((((rl_move_owned(f->m)[i / 8] >> (i % 8)) & 1u) != 0) == mine &&
            rl_shardmap_owner(map, i) == 2) {
            s = i;
        }
    }
    rl_shardmap_destroy(map);
    ck_assert_uint_lt(s, NSHARDS);
    return s;
}

/* f->s: a shard of b's that a view with b leaving places here and one with c active too
 * places on c. */
static void
shard_for_c(struct fixture *f)
{
    f->s = shard_going_to_c(f, false, RL_MEMBER_ACTIVE, RL_MEMBER_LEAVING);
}

/* b (leaving) begins to send here f->s (shard_for_c) in several messages: the first is
 * taken, then the view with c active comes, then the second begins. Returns the shard's
 * epoch before. */
static uint16_t
moved_on_while_coming(struct fixture *f)
{
    char why[256] = "";
    uint32_t s;
    uint16_t e;

    shard_for_c(f);
    s = f->s;
    view(f, RL_MEMBER_LEAVING); /* b drains: its shards are expected here */
    ck_assert(rl_move_expected(f->m, s));
    e = f->epochs[s];
    ck_assert_int_eq(rl_move_in_begin(f->m, s, 10, "b", 1, false, why, sizeof(why)), 0);
    rl_move_in_end(f->m, s, 3, false);             /* the first of several messages */
    view3(f, RL_MEMBER_LEAVING, RL_MEMBER_ACTIVE); /* c joined: s is c's */
    ck_assert_int_eq(rl_move_in_begin(f->m, s, 10, "b", 1, false, why, sizeof(why)), 0);
    return e;
}

/* The first message's records were imported with the tenure's epoch: the shard stays
 * expected (not NONE, after which the next message began a new tenure, moving the epoch on,
 * so that those records were judged absent here and were not exported on: users allowed a
 * whole fresh allowance at c, with no shard "started from zero" anywhere). Once whole it is
 * queued for c at once (no hold: this view is past the one that expected it here). */
START_TEST(test_records_kept_when_view_moves_on)
{
    struct fixture f;
    struct rl_move_stats before, after;
    uint16_t e;

    setup_views(&f, WAIT_MS);
    e = moved_on_while_coming(&f);
    RL_CHECK(f.epochs[f.s] == e,
             "epoch moved on from %u to %u: the first message's records "
             "are judged absent",
             (unsigned)e, (unsigned)f.epochs[f.s]);
    rl_move_stats(f.m, &before);
    rl_move_in_end(f.m, f.s, 3, true);
    rl_move_stats(f.m, &after);
    ck_assert(owned_here(&f)); /* whole, */
    /* and queued for c at once: this node's view is past the one that expected it here (a
     * hold, as for records ahead of the view, would spend c's wait) */
    ck_assert_uint_eq(after.outgoing, before.outgoing + 1);
    ck_assert_uint_eq(after.incoming + 1, before.incoming);
    ck_assert(left_within(&f, 20000)); /* exported, */
    /* and shipped on to c (refused there: nobody listens); a loaded machine may see it
     * between the two */
    ck_assert_str_eq(shipped_within(&f, 20000), "c");
    ck_assert_uint_eq(f.epochs[f.s], e);
    teardown(&f);
}
END_TEST

/* Records that came ahead of this node's view, then a view that does not place the shard here
 * yet (c registering): once whole the shard is held (this view is behind the sender's, which
 * placed it here), not queued back for its sender; the view that places it here makes it
 * this node's. */
START_TEST(test_ahead_of_view_held_not_sent_back)
{
    struct fixture f;
    struct rl_move_stats before, after;
    char why[256] = "";

    setup_views(&f, WAIT_MS); /* a and b active: f->s is b's */
    ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 10, "b", 1, false, why, sizeof(why)), 0);
    rl_move_in_end(f.m, f.s, 3, false);
    view3(&f, RL_MEMBER_ACTIVE, RL_MEMBER_JOINING); /* c registers: s still b's */
    ck_assert(rl_move_expected(f.m, f.s));
    ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 10, "b", 1, false, why, sizeof(why)), 0);
    rl_move_stats(f.m, &before);
    rl_move_in_end(f.m, f.s, 3, true);
    rl_move_stats(f.m, &after);
    ck_assert(owned_here(&f));
    ck_assert_uint_eq(after.outgoing, before.outgoing); /* held, not queued for b */
    runfor(&f.loop, WAIT_MS / 8);
    view3(&f, RL_MEMBER_LEAVING, RL_MEMBER_JOINING); /* b leaving: s is this node's */
    runfor(&f.loop, WAIT_MS);
    ck_assert(owned_here(&f));
    rl_move_stats(f.m, &after);
    ck_assert_uint_eq(after.out_failed, before.out_failed);
    teardown(&f);
}
END_TEST

static void
drained_cb(void *arg)
{
    *(bool *)arg = true;
}

/* A node drained while it receives a shard it keeps for c (records taken) is not done until
 * the shard has come whole and been shipped on: before, its drain ended with its own shards
 * and the process exited holding the records (c started the shard from zero). */
START_TEST(test_drain_waits_for_kept_records)
{
    struct fixture f;
    const char *owner = NULL;
    bool drained = false;

    setup_views(&f, WAIT_MS);
    (void)moved_on_while_coming(&f);
    rl_move_drain(f.m, 60000, drained_cb, &drained);
    view_abc(&f, RL_MEMBER_LEAVING, RL_MEMBER_LEAVING, RL_MEMBER_ACTIVE); /* a leaves too */
    runfor(&f.loop, WAIT_MS / 2); /* its own shards go (refused at c: given up) */
    ck_assert(rl_move_expected(f.m, f.s));
    RL_CHECK(!drained, "drained while shard %u's records still come", (unsigned)f.s);
    rl_move_in_end(f.m, f.s, 3, true); /* the last message */
    for (int i = 0; i < 2000 && !drained; i++) {
        runfor(&f.loop, 10);
    }
    ck_assert(drained);
    ck_assert(rl_move_moving(f.m, f.s, &owner)); /* shipped on first */
    ck_assert_str_eq(owner, "c");
    teardown(&f);
}
END_TEST

/* The drain's deadline reached while such a shard's records still come: the warning counts
 * it among the shards not handed off (before, it counted only the shards queued, and said
 * 0 here while the process exited holding the shard's records). */
START_TEST(test_drain_timeout_counts_kept_records)
{
    struct fixture f;
    char path[] = "/tmp/check_move_view_log_XXXXXX", buf[8192];
    bool drained = false;
    int fd = mkstemp(path), err = dup(STDERR_FILENO);
    ssize_t got;

    ck_assert_int_ge(fd, 0);
    ck_assert_int_ge(err, 0);
    ck_assert_int_eq(rl_log_open(path), 0); /* stderr to the file, until restored below */
    unlink(path);                           /* gone however the test ends */
    setup_views(&f, WAIT_MS);
    (void)moved_on_while_coming(&f);
    view_abc(&f, RL_MEMBER_LEAVING, RL_MEMBER_LEAVING, RL_MEMBER_ACTIVE); /* a leaves too */
    runfor(&f.loop, WAIT_MS / 2); /* its own shards go (refused at c: given up) */
    rl_move_drain(f.m, WAIT_MS / 4, drained_cb, &drained);
    for (int i = 0; i < 200 && !drained; i++) {
        runfor(&f.loop, 10);
    }
    ck_assert(drained);
    ck_assert(rl_move_expected(f.m, f.s)); /* its records still come */
    got = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    ck_assert_int_ge(dup2(err, STDERR_FILENO), 0);
    close(err);
    ck_assert_int_gt(got, 0);
    buf[got] = '\0';
    RL_CHECK(strstr(buf, "drain_timeout reached with 1 shard(s) not handed off") != NULL,
             "the drain's warning: %s", buf);
    teardown(&f);
}
END_TEST

/* A shard expected here of which nothing came yet is let go by a view that places it on c
 * (c expects it from b, its old owner, which ships it there): only records taken keep it. */
START_TEST(test_nothing_taken_lets_go)
{
    struct fixture f;

    setup_views(&f, WAIT_MS);
    shard_for_c(&f);
    view(&f, RL_MEMBER_LEAVING);
    ck_assert(rl_move_expected(f.m, f.s));
    view3(&f, RL_MEMBER_LEAVING, RL_MEMBER_ACTIVE);
    ck_assert(!rl_move_expected(f.m, f.s));
    ck_assert(!owned_here(&f));
    teardown(&f);
}
END_TEST

/* A socket of the test's standing for c, which never answers: its address in *addr. */
static int
c_listen(char *addr, size_t len)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t sl = sizeof(sin);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    ck_assert_int_eq(listen(lfd, 16), 0);
    ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&sin, &sl), 0);
    snprintf(addr, len, "127.0.0.1:%u", (unsigned)ntohs(sin.sin_port));
    return lfd;
}

/* Whether a told c (lfd) that shard s is still coming: an empty HANDOFF_IN, not final, naming
 * `from` as its sender, on any of the connections a made to c (a batch of a's own shards for c
 * too), each read to its end (its sender gave up waiting for answers). Closes lfd. */
static bool
told_still_coming(int lfd, uint32_t s, char from)
{
    struct timeval tv = {.tv_sec = 5};
    char buf[65536];
    size_t total = 0;
    struct rl_wire_decoder d;
    bool named = false;
    int cfd;
    ssize_t got;

    ck_assert_int_eq(rl_wire_decoder_init(&d), 0);
    ck_assert_int_eq(setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    for (int conns = 0; !named && conns < 16 && (cfd = accept(lfd, NULL, NULL)) >= 0; conns++) {
        size_t have = 0, off = 0, len;

        ck_assert_int_eq(setsockopt(cfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
        while (have < sizeof(buf) && (got = read(cfd, buf + have, sizeof(buf) - have)) > 0) {
            have += (size_t)got;
        }
        close(cfd);
        for (; rl_wire_frame(buf + off, have - off, &len) == 1; off += RL_WIRE_HDR_LEN + len) {
            struct rl_wire_req req;
            struct rl_wire_fault fault;

            ck_assert_int_eq(rl_wire_decode_req(&d, buf + off + RL_WIRE_HDR_LEN, len, &req, &fault),
                             0);
            ck_assert_uint_eq(req.op, RL_WIRE_OP_HANDOFF_IN);
            if (req.shard == s) {
                ck_assert(req.has_final && !req.final && req.records.len == 0);
                ck_assert_uint_eq(req.from.len, 1);
                ck_assert_int_eq(req.from.ptr[0], from);
                named = true;
            }
        }
        total += have;
    }
    close(lfd);
    rl_wire_decoder_deinit(&d);
    if (!named) {
        fprintf(stderr, "c was not told that shard %u is still coming (%zu bytes from a)\n",
                (unsigned)s, total);
    }
    return named;
}

/* Meanwhile c, which expects the shard from here (its view placed it here), is told "still
 * coming" naming it, so its wait stays open while b's records come: before, c heard nothing
 * of the shard until it was shipped on, and started it from zero when b's records took
 * longer than handoff_wait. */
START_TEST(test_kept_shard_still_coming_to_its_next_owner)
{
    struct fixture f;
    char addr[64];
    int lfd = c_listen(addr, sizeof(addr));

    setup_views(&f, WAIT_MS);
    f.c_addr = addr;
    (void)moved_on_while_coming(&f);
    runfor(&f.loop, WAIT_MS / 2); /* rounds every eighth of it, each given half of it */
    ck_assert(told_still_coming(lfd, f.s, 'a'));
    ck_assert(rl_move_expected(f.m, f.s)); /* and still expected here, from b */
    teardown(&f);
}
END_TEST

/* The same for records that come when this node's view places the shard on c (the view
 * moved it on before its first records came, or skipped the one placing it here): c expects
 * it from this node or from its old owner, and hears of it from here. Before, only kept
 * shards were named, and c started such shards from zero (4 in 5 runs of the attack
 * script). */
START_TEST(test_ahead_of_view_still_coming_to_the_views_owner)
{
    struct fixture f;
    char addr[64], why[256] = "";
    int lfd = c_listen(addr, sizeof(addr));

    setup_views(&f, WAIT_MS); /* a and b active: f->s is b's */
    f.c_addr = addr;
    shard_for_c(&f);
    ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 10, "b", 1, false, why, sizeof(why)), 0);
    rl_move_in_end(f.m, f.s, 3, false);             /* ahead of this node's view */
    view3(&f, RL_MEMBER_LEAVING, RL_MEMBER_ACTIVE); /* b leaving, c active: s is c's */
    ck_assert(rl_move_expected(f.m, f.s));
    runfor(&f.loop, WAIT_MS / 2);
    ck_assert(told_still_coming(lfd, f.s, 'a'));
    teardown(&f);
}
END_TEST

/* A batch of a's shards is out to b (a leaves; b takes the records and never answers) when
 * c joins and the view places one of them, s, on c: c expects s from a, or from b (its
 * views differ), and hears of it from neither until b has it whole. a names it to c in its
 * "still coming" rounds while the batch is out, as coming from b (a holds it no more). Before,
 * nobody named it: in the attack script's drain and join at once, shards queued in a batch
 * behind large ones were started from zero at the joining node (2 runs of 12). */
START_TEST(test_batch_shard_still_coming_to_the_views_owner)
{
    struct fixture f;
    char baddr[64], caddr[64];
    int blfd = c_listen(baddr, sizeof(baddr)), clfd = c_listen(caddr, sizeof(caddr));
    struct rl_move_stats st;
    uint32_t s;

    setup_views(&f, LONG_WAIT_MS); /* the batch to b outlasts a slow machine */
    f.b_addr = baddr;
    f.c_addr = caddr;
    /* a's, b's once a leaves, c's once c is active */
    s = shard_going_to_c(&f, true, RL_MEMBER_LEAVING, RL_MEMBER_ACTIVE);
    view_abc(&f, RL_MEMBER_LEAVING, RL_MEMBER_ACTIVE, ABSENT); /* a's shards go to b */
    runfor(&f.loop, LONG_WAIT_MS / 8); /* the batch's export pass, then its send */
    rl_move_stats(f.m, &st);
    ck_assert_uint_gt(st.outgoing, 0);                                   /* out to b, unanswered */
    view_abc(&f, RL_MEMBER_LEAVING, RL_MEMBER_ACTIVE, RL_MEMBER_ACTIVE); /* c joins: s is c's */
    runfor(&f.loop, LONG_WAIT_MS / 2);
    ck_assert(told_still_coming(clfd, s, 'b')); /* coming from b, which will hold it */
    close(blfd);
    teardown(&f);
}
END_TEST

/* The receiving side of that: a expects f->s from b (leaving), which froze it in a batch for
 * c and names it as coming from c. From then on a expects it from c: b's "nothing here" is
 * not taken, b's restart (seen joining again) does not start it from zero, and c's records
 * are. (Had b named itself, a would have taken both for the shard's, and refused c's
 * records: a review's test of the first version of this change.) */
START_TEST(test_batch_shard_expected_from_the_batch_node)
{
    struct fixture f;
    struct rl_move_stats before, after;
    const char *owner = NULL;
    char why[256] = "";

    setup_views(&f, WAIT_MS);
    view3(&f, RL_MEMBER_LEAVING, RL_MEMBER_ACTIVE);
    ck_assert(rl_move_expected(f.m, f.s));
    rl_move_stats(f.m, &before);
    ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 0, "c", 1, false, why, sizeof(why)), 1);
    ck_assert(rl_move_moving(f.m, f.s, &owner));
    ck_assert_str_eq(owner, "c");
    ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 0, "b", 1, true, why, sizeof(why)), 1);
    view3(&f, RL_MEMBER_JOINING, RL_MEMBER_ACTIVE); /* b restarted */
    ck_assert(rl_move_expected(f.m, f.s));
    ck_assert(!owned_here(&f));
    ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 10, "c", 1, false, why, sizeof(why)), 0);
    rl_move_in_end(f.m, f.s, 1, true);
    ck_assert(owned_here(&f));
    rl_move_stats(f.m, &after);
    ck_assert_uint_eq(after.in_failed, before.in_failed);
    teardown(&f);
}
END_TEST

/* The first shard a decides. */
static uint32_t
a_shard(const struct fixture *f)
{
    for (uint32_t s = 0; s < NSHARDS; s++) {
        if ((rl_move_owned(f->m)[s / 8] >> (s % 8)) & 1u) {
            return s;
        }
    }
    ck_abort_msg("a decides no shard");
    return NSHARDS;
}

/* a leaves (its shards go out to b in a batch, b taking the records and never answering),
 * then comes back: a view places its shards here again while the batch is out (a rebalance
 * written again does the same). f->s: one of them. Returns b's socket. */
static int
sent_out_and_placed_back(struct fixture *f, uint32_t wait_ms, char *baddr, size_t len)
{
    int blfd = c_listen(baddr, len);
    struct rl_move_stats st;

    setup_views(f, wait_ms);
    f->b_addr = baddr;
    f->s = a_shard(f);
    view_abc(f, RL_MEMBER_LEAVING, RL_MEMBER_ACTIVE, ABSENT); /* a's shards go to b */
    runfor(&f->loop, wait_ms / 8); /* the batch's export pass, then its send */
    rl_move_stats(f->m, &st);
    ck_assert_uint_gt(st.outgoing, 0); /* out to b, unanswered */
    ck_assert(!owned_here(f));
    view_abc(f, RL_MEMBER_ACTIVE, RL_MEMBER_ACTIVE, ABSENT); /* back: f->s is a's again */
    return blfd;
}

/* Runs the loop until nothing is queued or out (the batch has ended), at most 20 s. */
static void
batch_ended(struct fixture *f)
{
    struct rl_move_stats st;

    for (int i = 0; i < 2000; i++) {
        rl_move_stats(f->m, &st);
        if (st.outgoing == 0) {
            return;
        }
        runfor(&f->loop, 10);
    }
    ck_abort_msg("the batch did not end");
}

/* b, which decides the shard since it took the batch's last message of it, ships it back: its
 * records are taken (before, refused while the rest of a's batch was out: "moving away"), and
 * the shard is decided here with them. */
START_TEST(test_placed_back_while_out_taken_from_the_batch_node)
{
    struct fixture f;
    char baddr[64], why[256] = "";
    int blfd = sent_out_and_placed_back(&f, LONG_WAIT_MS, baddr, sizeof(baddr));
    int rc = rl_move_in_begin(f.m, f.s, 10, "b", 1, false, why, sizeof(why));

    RL_CHECK(rc == 0, "b's records of shard %u refused: %s", (unsigned)f.s, why);
    ck_assert(rl_move_expected(f.m, f.s));
    rl_move_in_end(f.m, f.s, 1, true);
    ck_assert(owned_here(&f));
    close(blfd);
    teardown(&f);
}
END_TEST

/* The same with this node's view lagging b's: b's view places the shard back here, a's still
 * sends it to b. b's records are taken (before, refused: "moving away", and the shard started
 * from zero here after handoff_wait), the shard is held here once whole, and decided here
 * when a's view comes. */
START_TEST(test_shipped_back_ahead_of_the_view_taken)
{
    struct fixture f;
    char baddr[64], why[256] = "";
    int blfd = c_listen(baddr, sizeof(baddr));
    struct rl_move_stats st;
    int rc;

    setup_views(&f, LONG_WAIT_MS);
    f.b_addr = baddr;
    f.s = a_shard(&f);
    view_abc(&f, RL_MEMBER_LEAVING, RL_MEMBER_ACTIVE, ABSENT); /* a's shards go to b */
    runfor(&f.loop, LONG_WAIT_MS / 8);                         /* export pass, then send */
    rl_move_stats(f.m, &st);
    ck_assert_uint_gt(st.outgoing, 0);
    rc = rl_move_in_begin(f.m, f.s, 10, "b", 1, false, why, sizeof(why));
    RL_CHECK(rc == 0, "b's records of shard %u refused: %s", (unsigned)f.s, why);
    ck_assert(rl_move_expected(f.m, f.s));
    rl_move_in_end(f.m, f.s, 1, true);
    RL_CHECK(owned_here(&f), "shard %u received whole from b, not decided here", (unsigned)f.s);
    view_abc(&f, RL_MEMBER_ACTIVE, RL_MEMBER_ACTIVE, ABSENT); /* a's view catches up */
    runfor(&f.loop, LONG_WAIT_MS / 2); /* past the hold: the view places it here */
    ck_assert(owned_here(&f));
    ck_assert(!rl_move_expected(f.m, f.s));
    close(blfd);
    teardown(&f);
}
END_TEST

/* The batch ends with the shard placed back here: it is expected back from b (and, nothing
 * coming, decided here from zero after handoff_wait). Before, it stayed gone, and no node held
 * it until the next view: every node answered NOT_OWNER (the attack round of the nineteenth
 * session: a rebalance written again within a second). */
START_TEST(test_placed_back_while_out_not_orphaned)
{
    struct fixture f;
    char baddr[64];
    int blfd = sent_out_and_placed_back(&f, WAIT_MS, baddr, sizeof(baddr));

    batch_ended(&f); /* b never answers */
    RL_CHECK(rl_move_expected(f.m, f.s) || owned_here(&f),
             "shard %u neither decided nor expected here, where the view places it", (unsigned)f.s);
    for (int i = 0; i < 200 && !owned_here(&f); i++) {
        runfor(&f.loop, 10);
    }
    ck_assert(owned_here(&f));
    close(blfd);
    teardown(&f);
}
END_TEST

/* A drain begun with a's shards going to a node that refuses them (given up at once): still
 * not done a quarter of handoff_wait (LONG_WAIT_MS) later, done within about handoff_wait. */
static void
drain_held_then_done(struct fixture *f, const bool *drained, const char *after)
{
    runfor(&f->loop, LONG_WAIT_MS / 4);
    RL_CHECK(!*drained, "drained %u ms %s", LONG_WAIT_MS / 4, after);
    for (int i = 0; i < 400 && !*drained; i++) {
        runfor(&f->loop, 10);
    }
    ck_assert(*drained);
}

/* The same with b restarted meanwhile (seen joining again): the shard is decided here from
 * zero once the batch ends, not expected from b's new process, which never held it. */
START_TEST(test_placed_back_while_out_to_a_restarted_node)
{
    struct fixture f;
    char baddr[64];
    int blfd = sent_out_and_placed_back(&f, WAIT_MS, baddr, sizeof(baddr));

    view_abc(&f, RL_MEMBER_ACTIVE, RL_MEMBER_JOINING, ABSENT); /* b restarted */
    batch_ended(&f);                                           /* b never answers */
    RL_CHECK(owned_here(&f) && !rl_move_expected(f.m, f.s),
             "shard %u expected from b's new process, which never held it", (unsigned)f.s);
    close(blfd);
    teardown(&f);
}
END_TEST

/* A node drained just after b said shards are still coming here (b's own drain is shipping
 * to it): it does not stop within handoff_wait of b's last word, so that the rest of b's
 * batch is taken and shipped on. Before, it stopped at once, b's batch was refused, and its
 * shards started from zero at their owners (the same attack round: a second drain soon
 * after the first). */
START_TEST(test_drain_waits_for_a_members_last_word)
{
    struct fixture f;
    char why[256] = "";
    bool drained = false;

    setup_views(&f, LONG_WAIT_MS);
    ck_assert_int_eq(rl_move_in_begin(f.m, f.s, 0, "b", 1, false, why, sizeof(why)), 1);
    rl_move_drain(f.m, 60000, drained_cb, &drained);
    view_abc(&f, RL_MEMBER_LEAVING, RL_MEMBER_ACTIVE, ABSENT);
    drain_held_then_done(&f, &drained, "after b's last word");
    teardown(&f);
}
END_TEST

/* a drains with f->s expected from b (leaving), then a view lets f->s go: a leaves too, b in
 * b_state, c active. */
static void
drain_letting_go(struct fixture *f, bool *drained, uint8_t b_state)
{
    setup_views(f, LONG_WAIT_MS);
    view(f, RL_MEMBER_LEAVING); /* b drains: f->s expected here */
    ck_assert(rl_move_expected(f->m, f->s));
    rl_move_drain(f->m, 60000, drained_cb, drained);
    view_abc(f, RL_MEMBER_LEAVING, b_state, RL_MEMBER_ACTIVE);
    ck_assert(!rl_move_expected(f->m, f->s));
}

/* The same when the drain begins before b has said a word: a's view expected f->s from b
 * (leaving), and the view that lets it go (a leaves too) is where the wait starts. b's
 * batch may already hold it (b's view still places it here). Before, a stopped at once (the
 * attack round's second drain, 2 runs of 5 after the first fix). */
START_TEST(test_drain_waits_after_letting_go_of_expected_shards)
{
    struct fixture f;
    bool drained = false;

    drain_letting_go(&f, &drained, RL_MEMBER_LEAVING);
    drain_held_then_done(&f, &drained, "after letting go of shards expected from b");
    teardown(&f);
}
END_TEST

/* The same with b seen restarted in the view that lets the shard go: its new process holds
 * none of it, so the drain does not wait for it (before, it waited a handoff_wait more). */
START_TEST(test_drain_not_held_for_a_restarted_sender)
{
    struct fixture f;
    bool drained = false;

    drain_letting_go(&f, &drained, RL_MEMBER_JOINING); /* b restarted */
    for (unsigned i = 0; i < LONG_WAIT_MS * 3 / 40 && !drained; i++) {
        runfor(&f.loop, 10); /* three quarters of handoff_wait: slack for a busy machine */
    }
    RL_CHECK(drained,
             "drain still held %u ms after letting go of shards expected from b's "
             "old process",
             LONG_WAIT_MS * 3 / 4);
    teardown(&f);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("move_view");
    TCase *tc = tcase_create("view");
    SRunner *sr;
    int failed;

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_hold_follows_view);
    tcase_add_test(tc, test_hold_kept_while_views_stale);
    tcase_add_test(tc, test_hold_ends_at_first_read);
    tcase_add_test(tc, test_nothing_from_two_nodes);
    tcase_add_test(tc, test_nothing_from_another_node_not_taken);
    tcase_add_test(tc, test_nothing_expired_stays_expired);
    tcase_add_test(tc, test_nothing_not_taken_while_records_come);
    tcase_add_test(tc, test_nothing_told_of_every_shard_when_all_joined);
    tcase_add_test(tc, test_nothing_told_of_some_shards_after_young_nodes);
    tcase_add_test(tc, test_nothing_told_after_a_live_node);
    tcase_add_test(tc, test_restarted_owner_not_waited);
    tcase_add_test(tc, test_shipped_to_restarted_node_not_waited);
    tcase_add_test(tc, test_gone_hint_ends_after_handoff_wait);
    tcase_add_test(tc, test_leaving_owner_waited_until_it_rejoins);
    tcase_add_test(tc, test_unconfirmed_records_never_decided);
    tcase_add_test(tc, test_wait_counts_members_only);
    tcase_add_test(tc, test_long_transfer_ahead_of_view_kept);
    tcase_add_test(tc, test_still_coming_ahead_of_the_view);
    tcase_add_test(tc, test_still_coming_keeps_its_senders_waits_only);
    tcase_add_test(tc, test_still_coming_names_the_holder);
    tcase_add_test(tc, test_records_kept_when_view_moves_on);
    tcase_add_test(tc, test_kept_shard_still_coming_to_its_next_owner);
    tcase_add_test(tc, test_nothing_taken_lets_go);
    tcase_add_test(tc, test_drain_waits_for_kept_records);
    tcase_add_test(tc, test_drain_timeout_counts_kept_records);
    tcase_add_test(tc, test_ahead_of_view_held_not_sent_back);
    tcase_add_test(tc, test_ahead_of_view_still_coming_to_the_views_owner);
    tcase_add_test(tc, test_batch_shard_still_coming_to_the_views_owner);
    tcase_add_test(tc, test_batch_shard_expected_from_the_batch_node);
    tcase_add_test(tc, test_placed_back_while_out_taken_from_the_batch_node);
    tcase_add_test(tc, test_shipped_back_ahead_of_the_view_taken);
    tcase_add_test(tc, test_placed_back_while_out_not_orphaned);
    tcase_add_test(tc, test_placed_back_while_out_to_a_restarted_node);
    tcase_add_test(tc, test_drain_waits_for_a_members_last_word);
    tcase_add_test(tc, test_drain_waits_after_letting_go_of_expected_shards);
    tcase_add_test(tc, test_drain_not_held_for_a_restarted_sender);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
