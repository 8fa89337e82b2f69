/*
 * check_zkm: common/zkm.c, zkmembers.c and zkadmin.c against a real ZooKeeper server, one fresh
 * server per test. Covers registration, member and assignment watches, the assignment's
 * compare-and-set, the envoy config znode, session expiry (a node process frozen past its timeout), a server restart
 * that sessions survive, a stale znode left by a dead process, a server that starts late, and a
 * destroy from a callback. The server is the test harness's (harness.h: Debian's jars under
 * java, a fresh one per test on a free loopback port in the test's temp directory, killed with
 * the test however it ends); node processes other than the test's are forked children.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>
#include <zookeeper/zookeeper.h>

#include "harness.h"
#include "log.h"
#include "rltest.h"
#include "zkadmin.h"
#include "zkm.h"

/* Asked of the server by every rl_zkm here; within the harness server's 400 ms..30 s. */
#define SESSION_MS 2000
/* The dead process's, in the stale znode test: long, to see the new one wait. */
#define OLD_SESSION_MS 4000

/* This test's server (the harness's: a fresh one per test, in the test's temp directory). */
static struct rl_harness_zk zk;

static uint64_t
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Starts the server; again after zk_kill(), on the same port with its data, sessions
 * included. */
static void
zk_start(void)
{
    ck_assert_int_eq(rl_harness_zk_start(&zk), 0);
}

/* The server dies (SIGKILL: no clean shutdown). */
static void
zk_kill(void)
{
    if (zk.pid > 0) {
        ck_assert_int_eq(rl_harness_kill9(zk.pid), 0);
        zk.pid = 0;
    }
}

static void
setup(void)
{
    rl_log_setup(RL_LOG_INFO, "check_zkm");
    zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);
    memset(&zk, 0, sizeof(zk));
}

static void
teardown(void)
{
    rl_harness_cleanup();
}

/* What the callbacks saw. */
struct obs {
    struct rl_member m[8];
    size_t n;
    int nmembers_calls;
    char asg[256];
    size_t asg_len;
    int64_t asg_version;
    int nasg_calls;
    enum rl_zkm_state states[64];
    int nstates;
};

static void
on_members(void *arg, const struct rl_member *m, size_t n)
{
    struct obs *o = arg;

    ck_assert_uint_le(n, 8);
    for (size_t i = 1; i < n; i++) {
        ck_assert_int_lt(strcmp(m[i - 1].name, m[i].name), 0);
    }
    memcpy(o->m, m, n * sizeof(*m));
    o->n = n;
    o->nmembers_calls++;
}

static void
on_assignment(void *arg, const char *text, size_t len, int64_t version)
{
    struct obs *o = arg;

    ck_assert_uint_lt(len, sizeof(o->asg));
    memcpy(o->asg, text, len);
    o->asg[len] = '\0';
    o->asg_len = len;
    o->asg_version = version;
    o->nasg_calls++;
}

static void
on_state(void *arg, enum rl_zkm_state state)
{
    struct obs *o = arg;

    if (o->nstates < 64) {
        o->states[o->nstates++] = state;
    }
}

static const struct rl_zkm_cbs cbs = {on_members, on_assignment, on_state, NULL, NULL, NULL, NULL};

static int
saw_state(const struct obs *o, enum rl_zkm_state s)
{
    for (int i = 0; i < o->nstates; i++) {
        if (o->states[i] == s) {
            return 1;
        }
    }
    return 0;
}

static void
tick_cb(uv_timer_t *t)
{
    (void)t;
}

/* Runs the loop until pred(arg) holds or timeout_ms passes; returns pred's last value. */
static int
run_until(uv_loop_t *loop, int (*pred)(void *), void *arg, int timeout_ms)
{
    uv_timer_t tick;
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    int ok;

    uv_timer_init(loop, &tick);
    uv_timer_start(&tick, tick_cb, 5, 5);
    while (!(ok = pred != NULL && pred(arg)) && now_ms() < end) {
        uv_run(loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)&tick, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return ok;
}

static void
run_for(uv_loop_t *loop, int ms)
{
    run_until(loop, NULL, NULL, ms);
}

static void
close_loop(uv_loop_t *loop)
{
    uv_run(loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(loop), 0);
}

static int
registered(void *z)
{
    return rl_zkm_registered(z);
}

static int
state_written(void *z)
{
    return rl_zkm_state_written(z);
}

/* A plain client, to look at the znodes behind zkm's back. */
static void
raw_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh;
    (void)type;
    (void)state;
    (void)path;
    (void)ctx;
}

static zhandle_t *
raw_connect(void)
{
    zhandle_t *zh = zookeeper_init(zk.connect, raw_watcher, SESSION_MS, NULL, NULL, 0);

    ck_assert_ptr_nonnull(zh);
    for (int i = 0; i < 200 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++) {
        usleep(50 * 1000);
    }
    ck_assert_int_eq(zoo_state(zh), ZOO_CONNECTED_STATE);
    return zh;
}

/* The data and owner of a znode; returns the ZooKeeper code. */
static int
raw_get(const char *path, char *buf, size_t size, int64_t *owner)
{
    zhandle_t *zh = raw_connect();
    struct Stat st;
    int len = (int)size - 1;
    int rc = zoo_get(zh, path, 0, buf, &len, &st);

    if (rc == ZOK) {
        buf[len < 0 ? 0 : len] = '\0';
        *owner = st.ephemeralOwner;
    }
    zookeeper_close(zh);
    return rc;
}

START_TEST(test_register)
{
    uv_loop_t loop;
    struct rl_zkm *z, *bad;
    struct obs o = {0};
    struct rl_member *m;
    size_t n;
    char buf[64];
    int64_t owner = 0;
    uint64_t t0;

    zk_start();
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ck_assert_int_eq(rl_zkm_create(&bad, &loop, zk.connect, SESSION_MS, "a/b", &cbs, &o), -EINVAL);
    ck_assert_int_eq(rl_zkm_create(&bad, &loop, zk.connect, SESSION_MS, "", &cbs, &o), -EINVAL);
    ck_assert_int_eq(rl_zkm_create(&z, &loop, zk.connect, SESSION_MS, "reg", &cbs, &o), 0);
    ck_assert_int_eq(rl_zkm_register(z, "..", "127.0.0.1:7401"), -EINVAL);
    ck_assert_int_eq(rl_zkm_register(z, "a", ""), -EINVAL);
    t0 = now_ms();
    ck_assert_int_eq(rl_zkm_register(z, "a", "127.0.0.1:7401"), 0);
    ck_assert_int_eq(rl_zkm_register(z, "a", "127.0.0.1:7401"), -EALREADY);
    ck_assert(run_until(&loop, registered, z, 10000));
    fprintf(stderr, "check_zkm: registered %llu ms after register\n",
            (unsigned long long)(now_ms() - t0));
    ck_assert(saw_state(&o, RL_ZKM_CONNECTED));

    ck_assert_int_eq(raw_get("/ratelimiter/reg/nodes/a", buf, sizeof(buf), &owner), ZOK);
    ck_assert_str_eq(buf, "127.0.0.1:7401");
    ck_assert(owner != 0); /* ephemeral */

    ck_assert_int_eq(rl_zkm_read_members(z, &m, &n, 5000), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(m[0].name, "a");
    ck_assert_str_eq(m[0].addr, "127.0.0.1:7401");
    free(m);

    /* Gone as soon as destroy returns, not a session timeout later. */
    rl_zkm_destroy(z);
    ck_assert_int_eq(raw_get("/ratelimiter/reg/nodes/a", buf, sizeof(buf), &owner), ZNONODE);
    close_loop(&loop);
}
END_TEST

static int
members_are(struct obs *o, const char *a, const char *b)
{
    size_t want = (a != NULL) + (b != NULL);

    return o->nmembers_calls > 0 && o->n == want && (a == NULL || strcmp(o->m[0].name, a) == 0) &&
           (b == NULL || strcmp(o->m[1].name, b) == 0);
}

static int
asg_seen(void *arg)
{
    return ((struct obs *)arg)->nasg_calls > 0;
}

static int
members_none(void *arg)
{
    return members_are(arg, NULL, NULL);
}

static int
members_ab(void *arg)
{
    return members_are(arg, "a", "b");
}

static int
members_b(void *arg)
{
    return members_are(arg, "b", NULL);
}

static int
members_a(void *arg)
{
    return members_are(arg, "a", NULL);
}

START_TEST(test_members)
{
    uv_loop_t loop;
    struct rl_zkm *w, *a, *b;
    struct obs ow = {0}, oa = {0}, ob = {0};
    uint64_t t0;

    zk_start();
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ck_assert_int_eq(rl_zkm_create(&w, &loop, zk.connect, SESSION_MS, "mem", &cbs, &ow), 0);
    ck_assert_int_eq(rl_zkm_watch(w), 0);
    ck_assert_int_eq(rl_zkm_watch(w), -EALREADY);
    /* The first read delivers the empty list (the nodes/ directory is created if need be). */
    ck_assert(run_until(&loop, members_none, &ow, 10000));
    /* ...and the absent assignment. */
    ck_assert(run_until(&loop, asg_seen, &ow, 5000));
    ck_assert_int_eq(ow.nasg_calls, 1);
    ck_assert_int_eq(ow.asg_version, -1);
    ck_assert_uint_eq(ow.asg_len, 0);

    /* A member znode whose name no node can have (written by hand: the subtree is open
     * without the cluster secret) is not listed: it would break STATS' lines. */
    {
        zhandle_t *zh = raw_connect();

        ck_assert_int_eq(zoo_create(zh, "/ratelimiter/mem/nodes/odd name", "127.0.0.1:7409", 14,
                                    &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, NULL, 0),
                         ZOK);
        ck_assert_int_eq(rl_zkm_create(&b, &loop, zk.connect, SESSION_MS, "mem", &cbs, &ob), 0);
        ck_assert_int_eq(rl_zkm_register(b, "b", "127.0.0.1:7402"), 0);
        ck_assert_int_eq(rl_zkm_create(&a, &loop, zk.connect, SESSION_MS, "mem", &cbs, &oa), 0);
        ck_assert_int_eq(rl_zkm_register(a, "a", "127.0.0.1:7401"), 0);
        ck_assert(run_until(&loop, members_ab, &ow, 10000));
        zookeeper_close(zh); /* the odd one goes with this session */
        rl_zkm_destroy(a);
        rl_zkm_destroy(b);
        ck_assert(run_until(&loop, members_none, &ow, 10000));
    }
    ck_assert_int_eq(rl_zkm_create(&b, &loop, zk.connect, SESSION_MS, "mem", &cbs, &ob), 0);
    ck_assert_int_eq(rl_zkm_register(b, "b", "127.0.0.1:7402"), 0);
    ck_assert_int_eq(rl_zkm_create(&a, &loop, zk.connect, SESSION_MS, "mem", &cbs, &oa), 0);
    ck_assert_int_eq(rl_zkm_register(a, "a", "127.0.0.1:7401"), 0);
    ck_assert(run_until(&loop, members_ab, &ow, 10000));
    ck_assert_str_eq(ow.m[0].addr, "127.0.0.1:7401");
    ck_assert_str_eq(ow.m[1].addr, "127.0.0.1:7402");

    /* destroy closes the session (zookeeper_close waits for the server's answer): its
     * ephemeral znode is gone when it returns, not left to a session expiry; the watcher
     * hears of it next. */
    t0 = now_ms();
    rl_zkm_destroy(a);
    {
        char gone[64];
        int64_t no_owner = 0;

        ck_assert_int_eq(raw_get("/ratelimiter/mem/nodes/a", gone, sizeof(gone), &no_owner),
                         ZNONODE);
    }
    ck_assert(run_until(&loop, members_b, &ow, 5000));
    fprintf(stderr, "check_zkm: member removed %llu ms after destroy\n",
            (unsigned long long)(now_ms() - t0));

    rl_zkm_destroy(b);
    rl_zkm_destroy(w);
    close_loop(&loop);
}
END_TEST

/* Whether every on_members call that listed "a" listed it joining, up to now. */
struct states_obs {
    struct obs o;
    int a_seen_active_early; /* a listed active before it was let be */
    int a_may_be_active;
};

static void
on_members_states(void *arg, const struct rl_member *m, size_t n)
{
    struct states_obs *so = arg;

    on_members(&so->o, m, n);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(m[i].name, "a") == 0 && m[i].state == RL_MEMBER_ACTIVE &&
            !so->a_may_be_active) {
            so->a_seen_active_early = 1;
        }
    }
}

static const struct rl_zkm_cbs states_cbs = {on_members_states, on_assignment, on_state,
                                             NULL, NULL, NULL, NULL};

static int
a_state_is(struct states_obs *so, int state)
{
    return so->o.n == 1 && strcmp(so->o.m[0].name, "a") == 0 && so->o.m[0].state == state;
}

static int
a_joining(void *arg)
{
    return a_state_is(arg, RL_MEMBER_JOINING);
}

static int
a_active(void *arg)
{
    return a_state_is(arg, RL_MEMBER_ACTIVE);
}

static int
a_leaving(void *arg)
{
    return a_state_is(arg, RL_MEMBER_LEAVING);
}

static int
none_left(void *arg)
{
    return ((struct states_obs *)arg)->o.nmembers_calls > 0 && ((struct states_obs *)arg)->o.n == 0;
}

/* states/<name>: a node set joining before it registers is never listed active before it
 * says so; leaving and active (deleted) are seen by watchers and by the tools' read; the
 * state goes with the member at destroy. */
START_TEST(test_states)
{
    uv_loop_t loop;
    struct rl_zkm *w, *a, *t;
    struct states_obs so;
    struct obs oa = {0};
    struct rl_member *m;
    size_t n;
    char buf[64];
    int64_t owner = 0;

    memset(&so, 0, sizeof(so));
    zk_start();
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ck_assert_int_eq(rl_zkm_create(&w, &loop, zk.connect, SESSION_MS, "st", &states_cbs, &so),
                     0);
    ck_assert_int_eq(rl_zkm_watch(w), 0);
    ck_assert_int_eq(rl_zkm_create(&a, &loop, zk.connect, SESSION_MS, "st", &cbs, &oa), 0);
    ck_assert_int_eq(rl_zkm_set_state(a, 7), -EINVAL);
    ck_assert_int_eq(rl_zkm_set_state(a, RL_MEMBER_JOINING), 0);
    ck_assert_int_eq(rl_zkm_register(a, "a", "127.0.0.1:7401"), 0);
    ck_assert(run_until(&loop, a_joining, &so, 10000));
    ck_assert(run_until(&loop, registered, a, 5000));
    ck_assert_int_eq(raw_get("/ratelimiter/st/states/a", buf, sizeof(buf), &owner), ZOK);
    ck_assert_str_eq(buf, "joining");
    ck_assert_int_ne(owner, 0); /* ephemeral */
    ck_assert_int_eq(rl_zkm_create(&t, &loop, zk.connect, SESSION_MS, "st", NULL, NULL), 0);
    ck_assert_int_eq(rl_zkm_read_members(t, &m, &n, 5000), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(m[0].state, RL_MEMBER_JOINING);
    free(m);

    so.a_may_be_active = 1;
    ck_assert_int_eq(rl_zkm_set_state(a, RL_MEMBER_ACTIVE), 0);
    ck_assert(run_until(&loop, a_active, &so, 10000));
    ck_assert_int_eq(raw_get("/ratelimiter/st/states/a", buf, sizeof(buf), &owner), ZNONODE);
    ck_assert_int_eq(rl_zkm_set_state(a, RL_MEMBER_LEAVING), 0);
    ck_assert(run_until(&loop, a_leaving, &so, 10000));
    /* The watcher may see states/a before a's own create completes: wait for a's reply. */
    ck_assert(run_until(&loop, state_written, a, 5000));
    ck_assert_int_eq(rl_zkm_read_members(t, &m, &n, 5000), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(m[0].state, RL_MEMBER_LEAVING);
    free(m);
    ck_assert(!so.a_seen_active_early);

    rl_zkm_destroy(a);
    ck_assert_int_eq(raw_get("/ratelimiter/st/states/a", buf, sizeof(buf), &owner), ZNONODE);
    ck_assert(run_until(&loop, none_left, &so, 5000));
    /* nodes/ now exists with no child: no member, and no undefined behaviour on the way */
    ck_assert_int_eq(rl_zkm_read_members(t, &m, &n, 5000), 0);
    ck_assert_uint_eq(n, 0);
    free(m);
    rl_zkm_destroy(t);
    rl_zkm_destroy(w);
    close_loop(&loop);
}
END_TEST

struct want_asg {
    struct obs *o;
    const char *text;
    int64_t version;
};

static int
asg_is(void *arg)
{
    struct want_asg *w = arg;

    return w->o->nasg_calls > 0 && w->o->asg_version == w->version &&
           strcmp(w->o->asg, w->text) == 0;
}

static void
expect_text(struct rl_zkm *t, int prev, const char *want, int64_t want_version)
{
    char *text;
    size_t len;
    int64_t version;

    if (prev) {
        ck_assert_int_eq(rl_zkm_get_assignment_prev(t, &text, &len, &version, 5000), 0);
    } else {
        ck_assert_int_eq(rl_zkm_get_assignment(t, &text, &len, &version, 5000), 0);
    }
    if (want == NULL) {
        ck_assert_ptr_null(text);
        ck_assert_uint_eq(len, 0);
    } else {
        ck_assert_ptr_nonnull(text);
        ck_assert_str_eq(text, want);
        ck_assert_uint_eq(len, strlen(want));
    }
    if (want_version != -2) {
        ck_assert_int_eq(version, want_version);
    }
    free(text);
}

START_TEST(test_assignment)
{
    static const char v1[] = "rl-assignment 1 16\n3 a\n";
    static const char v2[] = "rl-assignment 1 16\n3 b\n7 a\n";
    static const char v3[] = "rl-assignment 1 16\n";
    uv_loop_t loop;
    struct rl_zkm *w, *t;
    struct obs ow = {0}, ot = {0};
    struct want_asg want = {&ow, "", -1};
    int64_t nv = -7;
    int calls;

    zk_start();
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ck_assert_int_eq(rl_zkm_create(&w, &loop, zk.connect, SESSION_MS, "asg", &cbs, &ow), 0);
    ck_assert_int_eq(rl_zkm_watch(w), 0);
    ck_assert_int_eq(rl_zkm_create(&t, &loop, zk.connect, SESSION_MS, "asg", NULL, &ot), 0);

    /* The tool's calls block and need no running loop. */
    expect_text(t, 0, NULL, -1);
    ck_assert(run_until(&loop, asg_is, &want, 10000));

    ck_assert_int_eq(rl_zkm_set_assignment(t, v1, strlen(v1), -1, &nv, 5000), 0);
    ck_assert_int_eq(nv, 0);
    ck_assert_int_eq(rl_zkm_set_assignment(t, v2, strlen(v2), -1, &nv, 5000), -EAGAIN);
    expect_text(t, 0, v1, 0);
    expect_text(t, 1, NULL, -1);
    want = (struct want_asg){&ow, v1, 0};
    ck_assert(run_until(&loop, asg_is, &want, 5000));

    ck_assert_int_eq(rl_zkm_set_assignment(t, v2, strlen(v2), 0, &nv, 5000), 0);
    ck_assert_int_eq(nv, 1);
    expect_text(t, 0, v2, 1);
    expect_text(t, 1, v1, 0);
    want = (struct want_asg){&ow, v2, 1};
    ck_assert(run_until(&loop, asg_is, &want, 5000));

    /* A stale version writes nothing: neither the assignment nor prev. */
    calls = ow.nasg_calls;
    ck_assert_int_eq(rl_zkm_set_assignment(t, v3, strlen(v3), 0, &nv, 5000), -EAGAIN);
    ck_assert_int_eq(rl_zkm_set_assignment(t, v3, strlen(v3), 5, &nv, 5000), -EAGAIN);
    expect_text(t, 0, v2, 1);
    expect_text(t, 1, v1, 0);
    run_for(&loop, 300);
    ck_assert_int_eq(ow.nasg_calls, calls);

    ck_assert_int_eq(rl_zkm_set_assignment(t, v3, strlen(v3), 1, &nv, 5000), 0);
    ck_assert_int_eq(nv, 2);
    expect_text(t, 0, v3, 2);
    expect_text(t, 1, v2, 1);
    want = (struct want_asg){&ow, v3, 2};
    ck_assert(run_until(&loop, asg_is, &want, 5000));

    ck_assert_int_eq(rl_zkm_set_assignment(t, "x", RL_ZKM_DATA_MAX + 1, 2, &nv, 5000), -EMSGSIZE);

    rl_zkm_destroy(t);
    rl_zkm_destroy(w);
    close_loop(&loop);
}
END_TEST

/* The envoy config znode: watched like the assignment (on_envoy), written only by
 * compare-and-set, deleted by version; the rules' and assignment's callbacks never see it. */
START_TEST(test_envoy_znode)
{
    static const char v1[] = "# ratelimiter envoy config bundle 1\n";
    static const char v2[] = "# ratelimiter envoy config bundle 1\nfile 2 a\nab\n";
    static const struct rl_zkm_cbs ecbs = {NULL, NULL, on_state, NULL, NULL, on_assignment, NULL};
    uv_loop_t loop;
    struct rl_zkm *w, *t;
    struct obs ow = {0}, ot = {0};
    struct want_asg want = {&ow, "", -1};
    char *text = NULL;
    size_t len = 0;
    int64_t nv = -7, version = -7;
    int calls;

    zk_start();
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ck_assert_int_eq(rl_zkm_create(&w, &loop, zk.connect, SESSION_MS, "env", &ecbs, &ow), 0);
    ck_assert_int_eq(rl_zkm_watch_envoy(w), 0);
    ck_assert_int_eq(rl_zkm_watch_envoy(w), -EALREADY);
    ck_assert_int_eq(rl_zkm_create(&t, &loop, zk.connect, SESSION_MS, "env", NULL, &ot), 0);
    ck_assert(run_until(&loop, asg_is, &want, 10000));
    ck_assert_int_eq(rl_zkm_get_envoy(t, &text, &len, &version, 5000), 0);
    ck_assert_ptr_null(text);
    ck_assert_int_eq(version, -1);

    ck_assert_int_eq(rl_zkm_set_envoy(t, v1, strlen(v1), -1, &nv, 5000), 0);
    ck_assert_int_eq(nv, 0);
    want = (struct want_asg){&ow, v1, 0};
    ck_assert(run_until(&loop, asg_is, &want, 5000));
    /* it exists now: "must not exist" and a stale version write nothing */
    calls = ow.nasg_calls;
    ck_assert_int_eq(rl_zkm_set_envoy(t, v2, strlen(v2), -1, &nv, 5000), -EAGAIN);
    ck_assert_int_eq(rl_zkm_set_envoy(t, v2, strlen(v2), 3, &nv, 5000), -EAGAIN);
    run_for(&loop, 300);
    ck_assert_int_eq(ow.nasg_calls, calls);
    ck_assert_int_eq(rl_zkm_set_envoy(t, v2, strlen(v2), 0, &nv, 5000), 0);
    ck_assert_int_eq(nv, 1);
    want = (struct want_asg){&ow, v2, 1};
    ck_assert(run_until(&loop, asg_is, &want, 5000));
    ck_assert_int_eq(rl_zkm_get_envoy(t, &text, &len, &version, 5000), 0);
    ck_assert_uint_eq(len, strlen(v2));
    ck_assert(memcmp(text, v2, len) == 0);
    ck_assert_int_eq(version, 1);
    free(text);
    ck_assert_int_eq(rl_zkm_set_envoy(t, "x", RL_ZKM_DATA_MAX + 1, 1, &nv, 5000), -EMSGSIZE);

    /* delete by version: a stale one deletes nothing */
    ck_assert_int_eq(rl_zkm_delete_envoy(t, 0, 5000), -EAGAIN);
    ck_assert_int_eq(rl_zkm_delete_envoy(t, 1, 5000), 0);
    want = (struct want_asg){&ow, "", -1};
    ck_assert(run_until(&loop, asg_is, &want, 5000));
    ck_assert_int_eq(rl_zkm_delete_envoy(t, 1, 5000), -EAGAIN);

    rl_zkm_destroy(t);
    rl_zkm_destroy(w);
    close_loop(&loop);
}
END_TEST

struct expiry {
    struct rl_zkm *z;
    struct obs *o;
};

static int
expired_and_back(void *arg)
{
    struct expiry *e = arg;

    return saw_state(e->o, RL_ZKM_EXPIRED) && rl_zkm_registered(e->z);
}

static int
saw_connecting(void *arg)
{
    return saw_state(arg, RL_ZKM_CONNECTING);
}

static int
saw_connected_again(void *arg)
{
    struct obs *o = arg;

    return saw_state(o, RL_ZKM_CONNECTING) && o->states[o->nstates - 1] == RL_ZKM_CONNECTED;
}

/*
 * Another process running node "a" (a child, so that it can be frozen or killed whole): it
 * registers and writes 'r' to fd; if it then sees its session expire and registers again, it
 * writes 'R'. It runs until it is killed.
 */
static void
node_process(int fd, const char *cluster, const char *addr, uint32_t session_ms)
{
    uv_loop_t loop;
    struct rl_zkm *z;
    struct obs o = {0};
    struct expiry e = {NULL, &o};

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (uv_loop_init(&loop) != 0 ||
        rl_zkm_create(&z, &loop, zk.connect, session_ms, cluster, &cbs, &o) != 0 ||
        rl_zkm_register(z, "a", addr) != 0 || !run_until(&loop, registered, z, 15000) ||
        write(fd, "r", 1) != 1) {
        _exit(1);
    }
    e.z = z;
    if (run_until(&loop, expired_and_back, &e, 60000) && write(fd, "R", 1) != 1) {
        _exit(1);
    }
    for (;;) {
        run_for(&loop, 1000);
    }
}

static pid_t
node_fork(int *fd, const char *cluster, const char *addr, uint32_t session_ms)
{
    int fds[2];
    pid_t pid;

    ck_assert_int_eq(pipe(fds), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        node_process(fds[1], cluster, addr, session_ms);
    }
    close(fds[1]);
    *fd = fds[0];
    return pid;
}

/* Whether the node process wrote c to fd (the loop runs meanwhile). */
struct said {
    int fd;
    char c;
};

static int
node_said(void *arg)
{
    struct said *s = arg;
    struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
    char c;

    return poll(&pfd, 1, 0) == 1 && read(s->fd, &c, 1) == 1 && c == s->c;
}

static void
node_kill(pid_t pid, int fd)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(fd);
}

START_TEST(test_expiry)
{
    uv_loop_t loop;
    struct rl_zkm *w;
    struct obs ow = {0};
    struct said said;
    char buf[64];
    int64_t owner1 = 0, owner2 = 0, since1;
    uint64_t t_stop, t_gone, t_cont;
    int fd;
    pid_t pid;

    zk_start();
    pid = node_fork(&fd, "exp", "127.0.0.1:7401", SESSION_MS);
    said = (struct said){fd, 'r'};
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ck_assert(run_until(&loop, node_said, &said, 15000));
    ck_assert_int_eq(rl_zkm_create(&w, &loop, zk.connect, SESSION_MS, "exp", &cbs, &ow), 0);
    ck_assert_int_eq(rl_zkm_watch(w), 0);
    ck_assert(run_until(&loop, members_a, &ow, 10000));
    ck_assert_int_eq(raw_get("/ratelimiter/exp/nodes/a", buf, sizeof(buf), &owner1), ZOK);
    since1 = ow.m[0].since;
    ck_assert(since1 != 0); /* the znode's czxid: which registration this is */

    /*
     * The node freezes (a stopped VM, a long pause) past its session timeout: the server
     * expires the session and its znode, and the watcher sees the member go. When the node
     * thaws, its client learns the session expired; zkm makes a new one and registers again.
     */
    kill(pid, SIGSTOP);
    t_stop = now_ms();
    ck_assert(run_until(&loop, members_none, &ow, 2 * SESSION_MS + 2000));
    t_gone = now_ms();
    kill(pid, SIGCONT);
    t_cont = now_ms();
    said = (struct said){fd, 'R'};
    ck_assert(run_until(&loop, node_said, &said, 15000));
    fprintf(stderr,
            "check_zkm: expiry: member gone %llu ms after the node froze (session %d ms); "
            "re-registered %llu ms after it thawed\n",
            (unsigned long long)(t_gone - t_stop), SESSION_MS,
            (unsigned long long)(now_ms() - t_cont));
    /* The session's clock started at its last ping, up to a third of the timeout earlier. */
    ck_assert_uint_ge(t_gone - t_stop, SESSION_MS / 2);
    ck_assert(run_until(&loop, members_a, &ow, 5000));
    ck_assert_int_eq(raw_get("/ratelimiter/exp/nodes/a", buf, sizeof(buf), &owner2), ZOK);
    ck_assert_str_eq(buf, "127.0.0.1:7401");
    ck_assert(owner2 != 0 && owner2 != owner1);
    /* Same name, same address, but a new registration: the watcher is told, with a new since. */
    ck_assert(ow.m[0].since != 0 && ow.m[0].since != since1);
    ck_assert(!saw_state(&ow, RL_ZKM_EXPIRED));

    node_kill(pid, fd);
    rl_zkm_destroy(w);
    close_loop(&loop);
}
END_TEST

/*
 * The server dies and comes back with its data after longer than the session timeout: it
 * restores the sessions with a fresh timeout, so the clients reconnect into the same ones.
 * Meanwhile everyone keeps what they had; afterwards the znode is the same one.
 */
START_TEST(test_server_restart)
{
    uv_loop_t loop;
    struct rl_zkm *w, *a;
    struct obs ow = {0}, oa = {0};
    char buf[64];
    int64_t owner1 = 0, owner2 = 0;
    uint64_t t_kill, t_up;
    int calls;

    zk_start();
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ck_assert_int_eq(rl_zkm_create(&w, &loop, zk.connect, SESSION_MS, "rst", &cbs, &ow), 0);
    ck_assert_int_eq(rl_zkm_watch(w), 0);
    ck_assert_int_eq(rl_zkm_create(&a, &loop, zk.connect, SESSION_MS, "rst", &cbs, &oa), 0);
    ck_assert_int_eq(rl_zkm_register(a, "a", "127.0.0.1:7401"), 0);
    ck_assert(run_until(&loop, registered, a, 10000));
    ck_assert(run_until(&loop, members_a, &ow, 10000));
    ck_assert_int_eq(raw_get("/ratelimiter/rst/nodes/a", buf, sizeof(buf), &owner1), ZOK);

    zk_kill();
    t_kill = now_ms();
    ck_assert(run_until(&loop, saw_connecting, &oa, 5000));
    fprintf(stderr, "check_zkm: restart: connection loss seen %llu ms after the server died\n",
            (unsigned long long)(now_ms() - t_kill));
    calls = ow.nmembers_calls;
    run_for(&loop, SESSION_MS + 500);
    ck_assert(members_a(&ow));
    ck_assert_int_eq(ow.nmembers_calls, calls);

    zk_start();
    t_up = now_ms();
    ck_assert(run_until(&loop, saw_connected_again, &oa, 15000));
    fprintf(stderr, "check_zkm: restart: reconnected %llu ms after the server listened\n",
            (unsigned long long)(now_ms() - t_up));
    ck_assert(!saw_state(&oa, RL_ZKM_EXPIRED));
    ck_assert(rl_zkm_registered(a));
    ck_assert_int_eq(raw_get("/ratelimiter/rst/nodes/a", buf, sizeof(buf), &owner2), ZOK);
    ck_assert(owner2 == owner1);
    run_for(&loop, 300);
    ck_assert(members_a(&ow));

    rl_zkm_destroy(a);
    ck_assert(run_until(&loop, members_none, &ow, 5000));
    rl_zkm_destroy(w);
    close_loop(&loop);
}
END_TEST

START_TEST(test_stale_znode)
{
    uv_loop_t loop;
    struct rl_zkm *a;
    struct obs oa = {0};
    struct said said;
    char buf[64];
    int64_t owner = 0;
    uint64_t t_kill, t_reg;
    int fd;
    pid_t pid;

    zk_start();
    pid = node_fork(&fd, "stale", "127.0.0.1:9999", OLD_SESSION_MS);
    said = (struct said){fd, 'r'};
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ck_assert(run_until(&loop, node_said, &said, 15000));
    /* Dies without closing its session: its znode stays until the session expires. */
    node_kill(pid, fd);
    t_kill = now_ms();

    ck_assert_int_eq(rl_zkm_create(&a, &loop, zk.connect, SESSION_MS, "stale", &cbs, &oa), 0);
    ck_assert_int_eq(rl_zkm_register(a, "a", "127.0.0.1:7401"), 0);
    /* Connected, so it has tried, and waits. */
    run_for(&loop, OLD_SESSION_MS / 4);
    ck_assert(saw_state(&oa, RL_ZKM_CONNECTED));
    ck_assert(!rl_zkm_registered(a));
    ck_assert_int_eq(raw_get("/ratelimiter/stale/nodes/a", buf, sizeof(buf), &owner), ZOK);
    ck_assert_str_eq(buf, "127.0.0.1:9999");

    ck_assert(run_until(&loop, registered, a, 2 * OLD_SESSION_MS + 5000));
    t_reg = now_ms();
    fprintf(stderr, "check_zkm: stale znode: registered %llu ms after the old process died\n",
            (unsigned long long)(t_reg - t_kill));
    /* Not before the old session could have expired: its clock started at its last ping, up
     * to a third of its timeout before the kill. */
    ck_assert_uint_ge(t_reg - t_kill, OLD_SESSION_MS / 2);
    ck_assert_int_eq(raw_get("/ratelimiter/stale/nodes/a", buf, sizeof(buf), &owner), ZOK);
    ck_assert_str_eq(buf, "127.0.0.1:7401");

    rl_zkm_destroy(a);
    close_loop(&loop);
}
END_TEST

static void
destroy_on_connect(void *arg, enum rl_zkm_state state)
{
    struct rl_zkm **z = arg;

    if (state == RL_ZKM_CONNECTED) {
        rl_zkm_destroy(*z);
        *z = NULL;
    }
}

/* A callback may destroy its rl_zkm; nothing runs after, and the loop closes clean. */
START_TEST(test_destroy_in_callback)
{
    static const struct rl_zkm_cbs dcbs = {NULL, NULL, destroy_on_connect, NULL, NULL, NULL, NULL};
    uv_loop_t loop;
    struct rl_zkm *z;

    zk_start();
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ck_assert_int_eq(rl_zkm_create(&z, &loop, zk.connect, SESSION_MS, "cb", &dcbs, &z), 0);
    ck_assert_int_eq(rl_zkm_register(z, "a", "127.0.0.1:7401"), 0);
    ck_assert_int_eq(rl_zkm_watch(z), 0);
    /* The loop ends by itself once the rl_zkm is gone. */
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_ptr_null(z);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

struct late {
    struct rl_zkm *a;
    struct obs *ow;
};

static int
late_ready(void *arg)
{
    struct late *l = arg;

    return rl_zkm_registered(l->a) && members_a(l->ow);
}

START_TEST(test_server_late)
{
    uv_loop_t loop;
    struct rl_zkm *w, *a;
    struct obs ow = {0}, oa = {0};
    struct late l;
    uint64_t t_up;

    /* No server yet (only its address): create, register and watch all succeed and wait. */
    ck_assert_int_eq(rl_harness_zk_prepare(&zk), 0);
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ck_assert_int_eq(rl_zkm_create(&w, &loop, zk.connect, SESSION_MS, "late", &cbs, &ow), 0);
    ck_assert_int_eq(rl_zkm_watch(w), 0);
    ck_assert_int_eq(rl_zkm_create(&a, &loop, zk.connect, SESSION_MS, "late", &cbs, &oa), 0);
    ck_assert_int_eq(rl_zkm_register(a, "a", "127.0.0.1:7401"), 0);
    run_for(&loop, 1500);
    ck_assert(!rl_zkm_registered(a));
    ck_assert_int_eq(ow.nmembers_calls, 0);
    ck_assert_int_eq(oa.nstates, 0);

    zk_start();
    t_up = now_ms();
    l = (struct late){a, &ow};
    ck_assert(run_until(&loop, late_ready, &l, 20000));
    fprintf(stderr, "check_zkm: late server: registered and seen %llu ms after it listened\n",
            (unsigned long long)(now_ms() - t_up));

    rl_zkm_destroy(a);
    rl_zkm_destroy(w);
    close_loop(&loop);
}
END_TEST

static Suite *
zkm_suite(void)
{
    Suite *s = suite_create("zkm");
    TCase *tc = tcase_create("zookeeper");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_register);
    tcase_add_test(tc, test_members);
    tcase_add_test(tc, test_states);
    tcase_add_test(tc, test_assignment);
    tcase_add_test(tc, test_envoy_znode);
    tcase_add_test(tc, test_expiry);
    tcase_add_test(tc, test_server_restart);
    tcase_add_test(tc, test_stale_znode);
    tcase_add_test(tc, test_server_late);
    tcase_add_test(tc, test_destroy_in_callback);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(zkm_suite)
