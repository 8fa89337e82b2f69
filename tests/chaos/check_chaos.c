/*
 * check_chaos: the two parts of rl-chaos that judge, without a cluster. The scenario reader:
 * every shipped scenario loads, the defaults are the documented ones, a step line is read
 * into the right fields, and a bad file is refused naming its line. The verdict: made-up
 * runs (requests, ownership views, faults, router samples) where exactly one invariant is
 * broken make exactly that invariant fail, and a run that keeps them all passes.
 */
#include <check.h>
#include <dirent.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chaos.h"
#include "harness.h"
#include "rltest.h"
#include "scenario.h"
#include "wire.h"

/* ---- scenario reader ------------------------------------------------------------------ */

static const char *const shipped_dir = RL_SOURCE_DIR "/tools/chaos/scenarios";

/* Writes body to a fresh file of the test's temp directory; its path into path. */
static void
write_scenario(char *path, size_t len, const char *name, const char *body)
{
    ck_assert_int_eq(rl_harness_tmppath(path, len, "%s", name), 0);
    ck_assert_int_eq(rl_harness_write_file(path, "%s", body), 0);
}

/* A file that must be refused with "PATH:LINE: ..." naming line, and saying what. */
static void
refused(const char *name, const char *body, int line, const char *what)
{
    struct ch_scenario *sc = calloc(1, sizeof(*sc));
    char path[PATH_MAX], err[512], prefix[PATH_MAX + 32];

    ck_assert_ptr_nonnull(sc);
    write_scenario(path, sizeof(path), name, body);
    memset(err, 0, sizeof(err));
    ck_assert_msg(ch_scenario_load(sc, path, err, sizeof(err)) == -1, "%s loaded", name);
    snprintf(prefix, sizeof(prefix), "%s:%d: ", path, line);
    ck_assert_msg(strncmp(err, prefix, strlen(prefix)) == 0, "%s: \"%s\" does not start with \"%s\"",
                  name, err, prefix);
    ck_assert_msg(strstr(err + strlen(prefix), what) != NULL, "%s: \"%s\" does not say \"%s\"",
                  name, err, what);
    free(sc);
}

START_TEST(test_shipped_scenarios_load)
{
    struct ch_scenario *sc = calloc(1, sizeof(*sc));
    DIR *d = opendir(shipped_dir);
    struct dirent *e;
    int n = 0;
    bool node_kill = false, partition_zk = false;

    ck_assert_ptr_nonnull(sc);
    ck_assert_msg(d != NULL, "%s cannot be read", shipped_dir);
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        char path[PATH_MAX], err[512] = "";

        if (len <= 4 || strcmp(e->d_name + len - 4, ".ini") != 0) {
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s", shipped_dir, e->d_name);
        ck_assert_msg(ch_scenario_load(sc, path, err, sizeof(err)) == 0, "%s: %s", path, err);
        ck_assert_msg(sc->nsteps >= 1, "%s has no steps", path);
        ck_assert_msg(sc->nservices >= 1 && sc->name[0] != '\0', "%s", path);
        for (int i = 0; i < sc->nsteps; i++) {
            ck_assert_msg(sc->steps[i].at_ms + sc->steps[i].for_ms <= sc->duration_ms, "%s: %s",
                          path, sc->steps[i].text);
        }
        node_kill = node_kill || strcmp(sc->name, "node-kill") == 0;
        partition_zk = partition_zk || strcmp(sc->name, "partition-node-zk") == 0;
        n++;
    }
    closedir(d);
    ck_assert_int_ge(n, 10);
    ck_assert(node_kill);
    ck_assert(partition_zk);
    free(sc);
}
END_TEST

START_TEST(test_defaults)
{
    struct ch_scenario *sc = calloc(1, sizeof(*sc));
    char path[PATH_MAX], err[512] = "";
    const struct ch_service *s;

    ck_assert_ptr_nonnull(sc);
    /* Only comments and empty sections: everything comes from the defaults. */
    write_scenario(path, sizeof(path), "defaults.ini",
                   "; nothing set\n[scenario]\n# still nothing\n[cluster]\n[traffic]\n[check]\n"
                   "[expect]\n[steps]\n");
    ck_assert_msg(ch_scenario_load(sc, path, err, sizeof(err)) == 0, "%s", err);
    ck_assert_str_eq(sc->name, "defaults"); /* the file's name without .ini */
    ck_assert_str_eq(sc->path, path);
    ck_assert_str_eq(sc->description, "");
    ck_assert_int_eq(sc->nodes, 3);
    ck_assert_int_eq(sc->routers, 2);
    ck_assert_uint_eq(sc->shards, 256);
    ck_assert_int_eq(sc->session_timeout_ms, 2000);
    ck_assert_int_eq(sc->deadline_ms, 50);
    ck_assert(!sc->fence_disconnect);
    ck_assert_int_eq(sc->duration_ms, 20000);
    ck_assert_int_eq(sc->margin_ms, 250);
    ck_assert_int_eq(sc->converge_ms, 3000); /* session + 1 s */
    ck_assert_uint_eq(sc->rate, 2000);
    ck_assert_uint_eq(sc->users, 100);
    ck_assert(!sc->zipf);
    ck_assert_int_eq(sc->nsteps, 0);
    ck_assert_int_eq(sc->nservices, 1);
    s = &sc->services[0];
    ck_assert_str_eq(s->name, "api");
    ck_assert_str_eq(s->limit, "fixed_window 10 per 1s");
    ck_assert(s->windowed);
    ck_assert(!s->fail_closed);
    ck_assert_uint_eq(s->limit_n, 10);
    ck_assert_uint_eq(s->window_ms, 1000);
    ck_assert_uint_eq(s->weight, 1);
    ck_assert_int_eq(sc->expect.max_policy, -1);
    ck_assert_int_eq(sc->expect.min_policy, -1);
    ck_assert_int_eq(sc->expect.max_extra, -1);
    ck_assert_int_eq(sc->expect.max_latency_ms, -1);
    ck_assert_int_eq(sc->expect.max_move_ms, -1);
    ck_assert_int_eq(sc->expect.max_stale_ms, -1);
    ck_assert_int_eq(sc->expect.max_view_changes, -1);

    /* converge follows the session timeout unless set; a service's settings are its own. */
    write_scenario(path, sizeof(path), "set.ini",
                   "[scenario]\nname = set   ; a comment\nduration = 1m\n"
                   "[cluster]\nsession_timeout = 5s\nfencing = disconnect\nnodes = 5\n"
                   "[traffic]\ndistribution = zipf\n"
                   "[service pay]\nlimit = token_bucket 5 per 1s\nfailure = closed\nweight = 3\n"
                   "[expect]\nmax_policy_answers = 0\nmax_latency = 2s\n");
    ck_assert_msg(ch_scenario_load(sc, path, err, sizeof(err)) == 0, "%s", err);
    ck_assert_str_eq(sc->name, "set");
    ck_assert_int_eq(sc->duration_ms, 60000);
    ck_assert_int_eq(sc->converge_ms, 6000);
    ck_assert(sc->fence_disconnect);
    ck_assert(sc->zipf);
    ck_assert_int_eq(sc->nodes, 5);
    ck_assert_int_eq(sc->nservices, 1);
    ck_assert_str_eq(sc->services[0].name, "pay");
    ck_assert(!sc->services[0].windowed);
    ck_assert(sc->services[0].fail_closed);
    ck_assert_uint_eq(sc->services[0].weight, 3);
    ck_assert_int_eq(sc->expect.max_policy, 0);
    ck_assert_int_eq(sc->expect.max_latency_ms, 2000);
    ck_assert_int_eq(sc->expect.min_policy, -1);
    free(sc);
}
END_TEST

START_TEST(test_step_parsed)
{
    struct ch_scenario *sc = calloc(1, sizeof(*sc));
    char path[PATH_MAX], err[512] = "";
    const struct ch_step *st;

    ck_assert_ptr_nonnull(sc);
    write_scenario(path, sizeof(path), "steps.ini",
                   "[cluster]\nnodes = 3\nrouters = 2\n[steps]\n"
                   "at 5s partition node b from zookeeper for 6s\n"
                   "at 2s delay node a from routers 30ms for 4s\n"
                   "\n"
                   "at 1500ms kill router 2   ; the second router\n"
                   "at 3s stop zookeeper for 2s\n");
    ck_assert_msg(ch_scenario_load(sc, path, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(sc->nsteps, 4);
    st = &sc->steps[0];
    ck_assert_int_eq(st->at_ms, 5000);
    ck_assert_int_eq(st->for_ms, 6000);
    ck_assert_int_eq(st->arg_ms, 0);
    ck_assert_int_eq(st->action, CH_PARTITION);
    ck_assert_int_eq(st->target, CH_NODE);
    ck_assert_int_eq(st->index, 1);
    ck_assert_int_eq(st->path, CH_PATH_ZK);
    ck_assert_int_eq(st->line, 5);
    ck_assert_str_eq(st->text, "at 5s partition node b from zookeeper for 6s");
    st = &sc->steps[1];
    ck_assert_int_eq(st->at_ms, 2000);
    ck_assert_int_eq(st->for_ms, 4000);
    ck_assert_int_eq(st->arg_ms, 30);
    ck_assert_int_eq(st->action, CH_DELAY);
    ck_assert_int_eq(st->target, CH_NODE);
    ck_assert_int_eq(st->index, 0);
    ck_assert_int_eq(st->path, CH_PATH_ROUTERS);
    ck_assert_int_eq(st->line, 6);
    st = &sc->steps[2];
    ck_assert_int_eq(st->at_ms, 1500);
    ck_assert_int_eq(st->action, CH_KILL);
    ck_assert_int_eq(st->target, CH_ROUTER);
    ck_assert_int_eq(st->index, 1);
    ck_assert_int_eq(st->for_ms, 0);
    ck_assert_int_eq(st->line, 8);
    st = &sc->steps[3];
    ck_assert_int_eq(st->action, CH_STOP);
    ck_assert_int_eq(st->target, CH_ZOOKEEPER);
    ck_assert_int_eq(st->for_ms, 2000);
    free(sc);
}
END_TEST

START_TEST(test_planned_steps_parsed)
{
    struct ch_scenario *sc = calloc(1, sizeof(*sc));
    char path[PATH_MAX], err[512] = "";

    ck_assert_ptr_nonnull(sc);
    write_scenario(path, sizeof(path), "planned.ini",
                   "[cluster]\nnodes = 4\nshards = 64\n[check]\nplanned_moves = either\n"
                   "[steps]\nat 1s add node d\nat 2s assign 16 shards\nat 3s rollback\n"
                   "at 4s drain node a\nat 4020ms kill node a\n");
    ck_assert_msg(ch_scenario_load(sc, path, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(sc->planned, CH_PLANNED_EITHER);
    ck_assert_int_eq(sc->nsteps, 5);
    ck_assert_int_eq(sc->steps[0].action, CH_ADD);
    ck_assert_int_eq(sc->steps[0].index, 3);
    ck_assert(sc->spare[3]);
    ck_assert(!sc->spare[0] && !sc->spare[1] && !sc->spare[2]);
    ck_assert_int_eq(sc->steps[1].action, CH_ASSIGN);
    ck_assert_int_eq(sc->steps[1].target, CH_ZOOKEEPER);
    ck_assert_int_eq(sc->steps[1].arg_ms, 16);
    ck_assert_int_eq(sc->steps[2].action, CH_ROLLBACK);
    ck_assert_int_eq(sc->steps[3].action, CH_DRAIN);
    ck_assert_int_eq(sc->steps[3].index, 0);
    ck_assert_int_eq(sc->steps[4].action, CH_KILL);
    /* the default: planned moves keep their counters */
    write_scenario(path, sizeof(path), "planned-default.ini", "[cluster]\nnodes = 3\n");
    ck_assert_msg(ch_scenario_load(sc, path, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(sc->planned, CH_PLANNED_KEEP);
    free(sc);
    refused("assignN.ini", "[cluster]\nshards = 64\n[steps]\nat 1s assign 65 shards\n", 4,
            "assign");
    refused("assignword.ini", "[steps]\nat 1s assign 4\n", 2, "assign N shards");
    refused("rollbackx.ini", "[steps]\nat 1s rollback node a\n", 2, "rollback takes nothing");
    refused("addtwice.ini", "[cluster]\nnodes = 4\n[steps]\nat 1s add node d\nat 2s add node d\n",
            5, "added twice");
    refused("addafter.ini", "[cluster]\nnodes = 4\n[steps]\nat 1s kill node d\nat 2s add node d\n",
            5, "after a step");
    refused("drainfor.ini", "[steps]\nat 1s drain node a for 2s\n", 2, "drain");
    refused("planned.ini", "[check]\nplanned_moves = maybe\n", 2, "planned_moves");
}
END_TEST

START_TEST(test_bad_files)
{
    struct ch_scenario *sc = calloc(1, sizeof(*sc));
    char err[512] = "";

    ck_assert_ptr_nonnull(sc);
    refused("section.ini", "[scenario]\nname = x\n[bogus]\nfoo = 1\n", 3, "unknown section");
    refused("key.ini", "[cluster]\nnodes = 3\ncolour = red\n", 3, "unknown key \"colour\"");
    refused("servicekey.ini", "[service web]\nlimit = fixed_window 1 per 1s\nburst = 2\n", 3,
            "unknown key \"burst\"");
    refused("duration.ini", "; a comment\n[scenario]\nduration = soon\n", 3, "duration \"soon\"");
    refused("steptime.ini", "[steps]\nat 1s kill node a\nat later kill node b\n", 3, "at \"later\"");
    refused("action.ini", "[scenario]\nduration = 10s\n[steps]\nat 1s explode node b\n", 4,
            "unknown action \"explode\"");
    refused("nodename.ini", "[cluster]\nnodes = 3\n\n[steps]\nat 1s kill node z\n", 5, "no node \"z\"");
    /* a name that exists, but not in a cluster of 3 */
    refused("noded.ini", "[cluster]\nnodes = 3\n[steps]\nat 1s kill node d\n", 4, "no node \"d\"");
    refused("router.ini", "[cluster]\nrouters = 2\n[steps]\nat 1s restart router 1\n"
            "at 2s kill router 3\n", 5, "router \"3\"");
    refused("router0.ini", "[cluster]\nrouters = 2\n[steps]\nat 2s kill router 0\n", 4,
            "router \"0\"");
    refused("pause.ini", "[steps]\nat 1s pause node a\n", 2, "pause");
    refused("delay.ini", "[steps]\nat 1s reset node a from routers\nat 2s delay node a from routers\n",
            3, "delay needs a latency");
    refused("delayfor.ini", "[steps]\nat 1s delay node a from routers for 2s\n", 2, "latency");
    refused("from.ini", "[steps]\nat 1s partition node a for 2s\n", 2, "from");
    refused("killfor.ini", "[steps]\nat 1s kill node a for 2s\n", 2, "no \"for\"");
    refused("late.ini", "[scenario]\nduration = 10s\n[steps]\nat 1s kill node b\n"
            "at 8s pause node a for 3s\nat 9s restart node b\n", 5, "ends after");
    /* the default duration (20 s) counts too, and a step may end exactly at the end */
    refused("late20.ini", "[steps]\nat 19s partition node a from routers for 2s\n", 2, "ends after");
    refused("nolimit.ini", "[scenario]\nname = x\n\n[service web]\nfailure = open\n"
            "[service pay]\nlimit = fixed_window 1 per 1s\n", 4, "[service web] has no limit");
    refused("fencing.ini", "[cluster]\nnodes = 2\nfencing = maybe\n", 3, "fencing");
    refused("nodes.ini", "[cluster]\nnodes = 9\n", 2, "nodes \"9\"");
    refused("failure.ini", "[service web]\nlimit = fixed_window 1 per 1s\nfailure = sometimes\n", 3,
            "failure");
    refused("cluster.ini", "[steps]\nat 1s kill node a\n[cluster]\nnodes = 2\n", 4,
            "before [steps]");
    refused("noeq.ini", "[scenario]\nname x\n", 2, "KEY = VALUE");
    refused("outside.ini", "name = x\n", 1, "outside a known section");

    {
        char path[PATH_MAX];

        write_scenario(path, sizeof(path), "edge.ini",
                       "[scenario]\nduration = 10s\n[steps]\nat 7s pause node a for 3s\n");
        ck_assert_msg(ch_scenario_load(sc, path, err, sizeof(err)) == 0, "%s", err);
        ck_assert_int_eq(sc->nsteps, 1);
    }
    ck_assert_int_eq(ch_scenario_load(sc, "/nonexistent/chaos.ini", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/chaos.ini: "));
    free(sc);
}
END_TEST

/* ---- verdict -------------------------------------------------------------------------- */

/*
 * The made-up runs: 3 nodes, 1 router, 16 shards, one fail-open service of 5 per second
 * (fixed_window), deadline 50 + margin 250 ms, converge 3 s. Traffic starts at T0, a whole
 * second, so window k of the run is [T0 + k s, T0 + (k + 1) s). The user under test, u7,
 * has shard 3, which node a (0) owns in the first view.
 */
#define T0 INT64_C(1700000000000)
#define MONO0 INT64_C(5000000000)
#define NSHARDS 16
#define USER 7
#define SHARD 3
#define MAXREQ 256
#define LAT_US 2000

static struct ch_run *
run_new(void)
{
    struct ch_scenario *sc = calloc(1, sizeof(*sc));
    struct ch_run *r = ch_run_new(sc, false);
    struct ch_service *s;

    ck_assert_ptr_nonnull(sc);
    ck_assert_ptr_nonnull(r);
    s = &sc->services[0];
    snprintf(sc->name, sizeof(sc->name), "made-up");
    sc->nodes = 3;
    sc->routers = 1;
    sc->shards = NSHARDS;
    sc->session_timeout_ms = 2000;
    sc->deadline_ms = 50;
    sc->margin_ms = 250;
    sc->converge_ms = 3000;
    sc->duration_ms = 20000;
    sc->rate = 100;
    sc->users = 10;
    sc->nservices = 1;
    snprintf(s->name, sizeof(s->name), "api");
    snprintf(s->limit, sizeof(s->limit), "fixed_window 5 per 1s");
    s->windowed = true;
    s->limit_n = 5;
    s->window_ms = 1000;
    s->weight = 1;
    sc->expect = (struct ch_expect){-1, -1, -1, -1, -1, -1, -1};
    r->t0_ms = T0;
    r->traffic[0].run = r;
    r->traffic[0].router = 0;
    r->traffic[0].reqs = calloc(MAXREQ, sizeof(struct ch_req));
    ck_assert_ptr_nonnull(r->traffic[0].reqs);
    r->traffic[0].cap = MAXREQ;
    atomic_store(&r->traffic[0].n, 0);
    return r;
}

static void
run_free(struct ch_run *r)
{
    const struct ch_scenario *sc = r->sc;

    ch_run_free(r);
    free((void *)sc);
}

static struct ch_scenario *
scenario_of(struct ch_run *r)
{
    return (struct ch_scenario *)r->sc;
}

/*
 * Appends a view at T0 + at_ms: the previous one's table (the first: shard s owned by node
 * s % 3), with shard moved to node to when shard >= 0, its old owner gone from the members
 * (a loss: the old owner crashed or expired); view_planned keeps it a member (a planned
 * move: it hands the shard's counters off).
 */
static void
view_move(struct ch_run *r, int64_t at_ms, int shard, int to, bool planned)
{
    struct ch_view *v = &r->views[r->nviews];
    int was = shard >= 0 && r->nviews > 0 ? r->views[r->nviews - 1].owner[shard] : -1;

    ck_assert_int_lt(r->nviews, CH_VIEWS_MAX);
    v->owner = malloc(NSHARDS);
    ck_assert_ptr_nonnull(v->owner);
    for (int s = 0; s < NSHARDS; s++) {
        v->owner[s] = r->nviews > 0 ? r->views[r->nviews - 1].owner[s] : (uint8_t)(s % 3);
    }
    for (int i = 0; i < CH_NODES_MAX; i++) {
        v->since[i] = r->nviews > 0 ? r->views[r->nviews - 1].since[i] : (i < 3 ? 100 + i : 0);
    }
    if (shard >= 0) {
        v->owner[shard] = (uint8_t)to;
    }
    v->t_ms = T0 + at_ms;
    v->members = 0x7;
    v->nmembers = 3;
    if (was >= 0 && was != to && !planned) {
        v->members &= (uint8_t)~(1u << was);
        v->nmembers--;
    }
    v->asg_version = r->nviews + 1;
    v->digest = UINT64_C(0xd1650000) + (uint64_t)r->nviews;
    r->nviews++;
}

static void
view_add(struct ch_run *r, int64_t at_ms, int shard, int to)
{
    view_move(r, at_ms, shard, to, false);
}

static void
view_planned(struct ch_run *r, int64_t at_ms, int shard, int to)
{
    view_move(r, at_ms, shard, to, true);
}

/* Appends a view at T0 + at_ms where node registered again (a new znode, the same table). */
static void
view_reregistered(struct ch_run *r, int64_t at_ms, int node)
{
    view_add(r, at_ms, -1, 0);
    r->views[r->nviews - 1].since[node] = 1000 + r->nviews;
}

/*
 * A request of user (shard) sent at T0 + at_ms through router 0, answered code after lat_us
 * (PENDING: never). Decisions carry remaining, and reset_ms as the node computes it: from
 * when it got the request (half the round trip) to the end of its window.
 */
static struct ch_req *
req_full(struct ch_run *r, int64_t at_ms, uint32_t user, uint32_t shard, uint8_t code,
         uint32_t remaining, int64_t lat_us)
{
    size_t n = atomic_load(&r->traffic[0].n);
    struct ch_req *q = &r->traffic[0].reqs[n];

    ck_assert_uint_lt(n, MAXREQ);
    memset(q, 0, sizeof(*q));
    q->t_send_ms = T0 + at_ms;
    q->t_send_us = MONO0 + at_ms * 1000;
    q->t_done_us = code == CH_CODE_PENDING ? 0 : q->t_send_us + lat_us;
    q->user = user;
    q->shard = shard;
    q->service = 0;
    q->router = 0;
    q->code = code;
    if (code == RL_WIRE_ALLOWED || code == RL_WIRE_LIMITED) {
        int64_t at_node = q->t_send_ms + lat_us / 2000, end = (at_node / 1000 + 1) * 1000;

        q->remaining = remaining;
        q->reset_ms = (uint32_t)(end - at_node);
    }
    atomic_store(&r->traffic[0].n, n + 1);
    return q;
}

static struct ch_req *
req(struct ch_run *r, int64_t at_ms, uint8_t code, uint32_t remaining)
{
    return req_full(r, at_ms, USER, SHARD, code, remaining, LAT_US);
}

/* n ALLOWED from at_ms, 20 ms apart, remaining counting down from first_remaining (to 0). */
static int64_t
allowed(struct ch_run *r, int64_t at_ms, int n, int first_remaining)
{
    for (int i = 0; i < n; i++, at_ms += 20) {
        req(r, at_ms, RL_WIRE_ALLOWED, (uint32_t)(first_remaining - i > 0 ? first_remaining - i : 0));
    }
    return at_ms;
}

static void
impair_add(struct ch_run *r, int node, int64_t from_ms, int64_t to_ms, const char *what)
{
    struct ch_impair *m = &r->impairs[r->nimpairs++];

    m->node = node;
    m->from_ms = T0 + from_ms;
    m->to_ms = to_ms == INT64_MAX ? INT64_MAX : T0 + to_ms;
    snprintf(m->what, sizeof(m->what), "%s", what);
}

static void
sample_add(struct ch_run *r, int64_t at_ms, int router, uint64_t digest)
{
    r->samples[r->nsamples++] = (struct ch_sample){T0 + at_ms, router, digest};
}

/* An invariant as the JSON has it. */
struct inv {
    bool held;
    unsigned long long checked, violations;
};

static const char *const inv_names[] = {"liveness", "exactness",   "bounded-loss", "fresh-start",
                                        "policy",   "convergence", "no-deaths",    "expect"};
#define NINV (sizeof(inv_names) / sizeof(inv_names[0]))

static struct inv
inv_of(const char *json, const char *name)
{
    char key[96];
    const char *p;
    struct inv v = {false, 0, 0};

    snprintf(key, sizeof(key), "{\"name\":\"%s\",\"held\":", name);
    p = strstr(json, key);
    ck_assert_msg(p != NULL, "no invariant \"%s\" in %s", name, json);
    p += strlen(key);
    ck_assert_msg(strncmp(p, "true", 4) == 0 || strncmp(p, "false", 5) == 0, "%s", p);
    v.held = strncmp(p, "true", 4) == 0;
    p = strstr(p, "\"checked\":");
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(sscanf(p, "\"checked\":%llu,\"violations\":%llu", &v.checked,
                            &v.violations),
                     2);
    ck_assert_msg(v.held == (v.violations == 0), "%s: held and violations disagree", name);
    return v;
}

static char json[1 << 16];

/*
 * Judges the run; returns the verdict, checks that the JSON says the same, and that exactly
 * the invariant failing (NULL: none) failed, with violations of it.
 */
static bool
judge(struct ch_run *r, const char *failing, unsigned long long violations)
{
    static int seq;
    char path[PATH_MAX];
    bool pass;

    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "verdict-%d.json", seq++), 0);
    pass = ch_verdict(r, path);
    fflush(stdout);
    ck_assert_int_gt(rl_harness_read_file(path, json, sizeof(json)), 0);
    ck_assert_ptr_nonnull(strstr(json, "\"scenario\":\"made-up\""));
    ck_assert_ptr_nonnull(strstr(json, pass ? "\"pass\":true" : "\"pass\":false"));
    for (size_t i = 0; i < NINV; i++) {
        struct inv v = inv_of(json, inv_names[i]);
        bool fails = failing != NULL && strcmp(failing, inv_names[i]) == 0;

        ck_assert_msg(v.held == !fails, "invariant %s %s, expected it to %s", inv_names[i],
                      v.held ? "held" : "failed", fails ? "fail" : "hold");
        if (fails) {
            ck_assert_msg(v.violations == violations, "%s: %llu violations, expected %llu",
                          inv_names[i], v.violations, violations);
        }
    }
    ck_assert(pass == (failing == NULL));
    return pass;
}

START_TEST(test_control_passes)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    /* window 1: the limit exactly, then refused */
    allowed(r, 1100, 5, 4);
    req(r, 1300, RL_WIRE_LIMITED, 0);
    /* window 2: another user's requests, and u7 again from a full allowance */
    req_full(r, 2050, 8, 4, RL_WIRE_ALLOWED, 4, LAT_US);
    allowed(r, 2100, 2, 4);
    /* a request answered within deadline + margin, to the millisecond */
    req_full(r, 3000, USER, SHARD, RL_WIRE_ALLOWED, 4, 300 * 1000);
    ck_assert(judge(r, NULL, 0));
    ck_assert_uint_eq(inv_of(json, "liveness").checked, 10);
    ck_assert_uint_eq(inv_of(json, "exactness").checked, 4); /* u7: 3 windows, u8: 1 */
    ck_assert_uint_eq(inv_of(json, "bounded-loss").checked, 0);
    ck_assert_uint_eq(inv_of(json, "no-deaths").checked, 1);
    ck_assert_ptr_nonnull(strstr(json, "\"sent\":10,\"answered\":10,\"allowed\":9,"
                                       "\"limited\":1"));
    run_free(r);
}
END_TEST

START_TEST(test_exactness_over_limit)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    allowed(r, 1100, 6, 4); /* remaining 4, 3, 2, 1, 0, 0 */
    judge(r, "exactness", 1);
    ck_assert_ptr_nonnull(strstr(json, "allowed past the limit"));
    ck_assert_ptr_nonnull(strstr(json, "\"extra_allowed\":1"));
    run_free(r);
}
END_TEST

START_TEST(test_exactness_refused_below_limit)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    allowed(r, 1100, 3, 4);
    req(r, 1200, RL_WIRE_LIMITED, 0);
    /* another window, at the limit and refused: fine */
    allowed(r, 2100, 5, 4);
    req(r, 2300, RL_WIRE_LIMITED, 0);
    judge(r, "exactness", 1);
    ck_assert_ptr_nonnull(strstr(json, "refused below the limit"));
    run_free(r);
}
END_TEST

/* A failure-policy answer in the window: the node may have counted it; not judged below. */
/* A request sent at the end of a window that reached the node in the next one counts there:
 * the window is the node's, read from reset_ms, not the client's send time. */
START_TEST(test_window_of_node)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    allowed(r, 1100, 5, 4);
    req_full(r, 1995, USER, SHARD, RL_WIRE_ALLOWED, 4, 20 * 1000); /* at the node at 2.005 s */
    ck_assert_uint_eq(r->traffic[0].reqs[5].reset_ms, 995);
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "exactness").checked, 2);
    run_free(r);
}
END_TEST

START_TEST(test_exactness_policy_excludes)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    impair_add(r, 0, 1000, 1200, "paused");
    allowed(r, 1100, 3, 4);
    req(r, 1150, RL_WIRE_FAIL_OPEN, 0);
    req(r, 1200, RL_WIRE_LIMITED, 0);
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "exactness").checked, 1);
    ck_assert_uint_eq(inv_of(json, "policy").checked, 1);
    run_free(r);
}
END_TEST

/* ... also when it came up to LOOKBACK (10 s) before the window. */
START_TEST(test_exactness_policy_lookback)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    impair_add(r, 0, 1000, 1200, "paused");
    req(r, 1150, RL_WIRE_FAIL_OPEN, 0);
    allowed(r, 9100, 3, 4);
    req(r, 9200, RL_WIRE_LIMITED, 0);
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "exactness").checked, 2);
    run_free(r);
}
END_TEST

START_TEST(test_exactness_lost_excludes)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    r->router_down_from[0][0] = T0 + 1000;
    r->router_down_to[0][0] = T0 + 1100;
    r->nrouter_down[0] = 1;
    req_full(r, 1050, USER, SHARD, CH_CODE_LOST, 0, 5000);
    allowed(r, 1300, 3, 3);
    req(r, 1400, RL_WIRE_LIMITED, 0);
    judge(r, NULL, 0);
    ck_assert_ptr_nonnull(strstr(json, "\"lost_with_killed_router\":1"));
    run_free(r);
}
END_TEST

START_TEST(test_bounded_loss_holds)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    view_add(r, 1500, SHARD, 1); /* mid-window: shard 3 from a to b */
    allowed(r, 1100, 5, 4);      /* a */
    allowed(r, 1600, 5, 4);      /* b, from zero */
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "bounded-loss").checked, 1);
    ck_assert_uint_eq(inv_of(json, "exactness").checked, 0);
    ck_assert_ptr_nonnull(strstr(json, "\"extra_allowed\":5"));
    run_free(r);
}
END_TEST

START_TEST(test_bounded_loss_violated)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    view_add(r, 1500, SHARD, 1);
    allowed(r, 1100, 5, 4);
    allowed(r, 1600, 6, 4); /* 11 > 5 x (1 + 1) */
    judge(r, "bounded-loss", 1);
    ck_assert_ptr_nonnull(strstr(json, "allowed past L x (1 + changes)"));
    run_free(r);
}
END_TEST

/* A restart of the owner resets its counters as a move does, even with no view change. */
START_TEST(test_bounded_loss_restart)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    r->restart_node[0] = 0;
    r->restart_ms[0] = T0 + 1500;
    r->nrestarts = 1;
    allowed(r, 1100, 5, 4);
    allowed(r, 1600, 5, 4);
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "bounded-loss").checked, 1);
    /* a restart of another node changes nothing for shard 3 */
    r->restart_node[0] = 1;
    judge(r, "exactness", 1);
    run_free(r);
}
END_TEST

/* The owner registered again (a quick restart ZooKeeper saw as a new znode): a new tenure. */
START_TEST(test_bounded_loss_reregistered)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    view_reregistered(r, 1500, 0);
    allowed(r, 1100, 5, 4);
    allowed(r, 1600, 5, 4);
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "bounded-loss").checked, 1);
    /* another node registering again changes nothing for shard 3 */
    r->views[1].since[0] = r->views[0].since[0];
    r->views[1].since[1] = 2000;
    judge(r, "exactness", 1);
    run_free(r);
}
END_TEST

/* While the observer had no session of its own it saw no change; the routers may have seen
 * any node hold the shard for a moment: such a window is judged with one change per node. */
START_TEST(test_bounded_loss_blind)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    allowed(r, 1100, 5, 4);
    allowed(r, 1600, 5, 4);
    allowed(r, 1700, 5, 4);
    judge(r, "exactness", 1);
    r->blind_from[0] = T0 + 1200;
    r->blind_to[0] = T0 + 1500;
    r->nblind = 1;
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "bounded-loss").checked, 1);
    run_free(r);
}
END_TEST

/*
 * After shard 3 moved at 1.5 s, the first ALLOWED sent a second (LAG) after the move, at 2.6 s,
 * may count what was sent in its window since (2.1 s, 2.2 s and itself): 3, remaining 2.
 */
static struct ch_run *
fresh_run(uint32_t remaining)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    view_add(r, 1500, SHARD, 2);
    allowed(r, 1100, 2, 4);
    allowed(r, 1600, 2, 4);
    req(r, 2100, RL_WIRE_ALLOWED, 4);
    req(r, 2200, RL_WIRE_ALLOWED, 3);
    req(r, 2600, RL_WIRE_ALLOWED, remaining);
    req(r, 2800, RL_WIRE_ALLOWED, remaining > 0 ? remaining - 1 : 0); /* after REORDER (100 ms) */
    return r;
}

START_TEST(test_fresh_start_holds)
{
    struct ch_run *r = fresh_run(2);

    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "fresh-start").checked, 1);
    run_free(r);
}
END_TEST

START_TEST(test_fresh_start_violated)
{
    struct ch_run *r = fresh_run(1); /* counted 4 > 3 sent since the move */

    judge(r, "fresh-start", 1);
    ck_assert_ptr_nonnull(strstr(json, "inherited count"));
    run_free(r);
}
END_TEST

START_TEST(test_fresh_start_inherited_all)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    view_add(r, 1500, SHARD, 1);
    req(r, 2600, RL_WIRE_ALLOWED, 0); /* the first there, yet 5 counted */
    judge(r, "fresh-start", 1);
    run_free(r);
}
END_TEST

/*
 * Node a (owner of shard 3) is cut off at 0 s: two requests to it are answered by policy;
 * its shard goes to c at 0.5 s and comes back to a, which survived, at 1.5 s. The first
 * ALLOWED after that counts 3 (remaining 2) with one request sent since the change: the
 * two answered by policy reached a late (TCP retransmits them when the network heals), so
 * they count as sent to it. Not when a was restarted in between (its process, and the
 * bytes, are gone), nor when they were sent while another node owned the shard.
 */
static struct ch_run *
late_run(void)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    view_add(r, 500, SHARD, 2);
    view_add(r, 1500, SHARD, 0);
    impair_add(r, 0, 0, 1500, "isolated");
    req(r, 100, RL_WIRE_FAIL_OPEN, 0);
    req(r, 200, RL_WIRE_FAIL_OPEN, 0);
    req(r, 2600, RL_WIRE_ALLOWED, 2);
    return r;
}

START_TEST(test_fresh_start_late_in_flight)
{
    struct ch_run *r = late_run();

    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "fresh-start").checked, 1);
    /* a restarted between the requests and the change: they cannot count */
    r->restart_node[0] = 0;
    r->restart_ms[0] = T0 + 1000;
    r->nrestarts = 1;
    judge(r, "fresh-start", 1);
    run_free(r);
    /* sent while c owned the shard: not to a */
    r = late_run();
    r->views[1].t_ms = T0 + 50;
    impair_add(r, 2, 0, 1500, "isolated");
    judge(r, "fresh-start", 1);
    run_free(r);
}
END_TEST

/*
 * A planned move (the old owner still a member of the view that moved the shard: a clean
 * stop's `leaving`, a join, an assignment) hands the counters off: the window is judged as
 * if nothing changed (exactness: 5 + 1 past L is a violation, 3 + 2 is not), and the new
 * owner's first allowance may count what the old one counted (no fresh start). With
 * planned_moves = either (a move interrupted) the window is judged with the change
 * (bounded loss), still without a fresh start.
 */
START_TEST(test_planned_move)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    view_planned(r, 1500, SHARD, 1);
    allowed(r, 1100, 3, 4);
    allowed(r, 1600, 2, 1); /* the new owner continues: 4th and 5th, remaining 1 then 0 */
    req(r, 1800, RL_WIRE_LIMITED, 0);
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "exactness").checked, 1);
    ck_assert_uint_eq(inv_of(json, "bounded-loss").checked, 0);
    ck_assert_ptr_nonnull(strstr(json, "\"extra_allowed\":0"));
    run_free(r);

    /* the next window, the first allowance after the move counting 4 of 5: continued */
    r = run_new();
    view_add(r, -5000, -1, 0);
    view_planned(r, 1500, SHARD, 1);
    req(r, 2100, RL_WIRE_ALLOWED, 4);
    req(r, 2200, RL_WIRE_ALLOWED, 3);
    req(r, 2600, RL_WIRE_ALLOWED, 1); /* counted 4 with 3 sent since: inherited, as planned */
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "fresh-start").checked, 0);
    run_free(r);

    /* a move that restarted the shard from zero: the verdict catches it */
    r = run_new();
    view_add(r, -5000, -1, 0);
    view_planned(r, 1500, SHARD, 1);
    allowed(r, 1100, 5, 4);
    allowed(r, 1600, 1, 4);
    judge(r, "exactness", 1);
    ck_assert_ptr_nonnull(strstr(json, "allowed past the limit"));
    /* either: judged with the change, L x 2 */
    scenario_of(r)->planned = CH_PLANNED_EITHER;
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "bounded-loss").checked, 1);
    ck_assert_uint_eq(inv_of(json, "fresh-start").checked, 0);
    run_free(r);
}
END_TEST

/* The old owner left the membership (the observer never saw it `leaving`: a quick drain)
 * after a `term` step on it: planned all the same (exactness); killed after the term, a loss
 * (bounded loss) unless planned_moves = either. */
START_TEST(test_planned_move_clean_stop)
{
    struct ch_run *r = run_new();
    struct ch_scenario *sc = scenario_of(r);

    view_add(r, -5000, -1, 0);
    view_add(r, 1500, SHARD, 1); /* node 0 (a) gone from the members */
    allowed(r, 1100, 5, 4);
    allowed(r, 1600, 5, 4);
    judge(r, NULL, 0); /* no step: a loss, bounded */
    ck_assert_uint_eq(inv_of(json, "bounded-loss").checked, 1);
    sc->steps[0] = (struct ch_step){.at_ms = 1400, .action = CH_TERM, .target = CH_NODE};
    sc->nsteps = 1;
    judge(r, "exactness", 1); /* a clean stop hands off: 10 allowed is 5 too many */
    sc->steps[1] = (struct ch_step){.at_ms = 1450, .action = CH_KILL, .target = CH_NODE};
    sc->nsteps = 2;
    judge(r, NULL, 0); /* killed mid-move: a loss */
    ck_assert_uint_eq(inv_of(json, "bounded-loss").checked, 1);
    /* a term of another node says nothing of a's */
    sc->steps[0].index = 2;
    sc->nsteps = 1;
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "bounded-loss").checked, 1);
    run_free(r);
}
END_TEST

/* The old owner registered again (a new znode) in the view that moved the shard: it
 * restarted, so the move is a loss, not planned. */
START_TEST(test_planned_move_reregistered)
{
    struct ch_run *r = run_new();
    struct ch_scenario *sc = scenario_of(r);

    view_add(r, -5000, -1, 0);
    view_planned(r, 1500, SHARD, 1);
    r->views[1].since[0] = 5000;
    allowed(r, 1100, 5, 4);
    allowed(r, 1600, 5, 4);
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "bounded-loss").checked, 1);
    run_free(r);

    /* the new owner back from an expired session (a new registration, not joining first,
     * no step): a loss too */
    r = run_new();
    sc = scenario_of(r);
    view_add(r, -5000, -1, 0);
    view_planned(r, 1500, SHARD, 1);
    r->views[1].since[1] = 5000;
    allowed(r, 1100, 5, 4);
    allowed(r, 1600, 5, 4);
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "bounded-loss").checked, 1);
    /* ...unless the run started it (an add, a restart): it joins, and takes the shards
     * from their live owners with their counters */
    sc->steps[0] = (struct ch_step){.at_ms = 1000, .action = CH_ADD, .target = CH_NODE,
                                    .index = 1};
    sc->nsteps = 1;
    judge(r, "exactness", 1);
    sc->steps[0].action = CH_RESTART;
    judge(r, "exactness", 1);
    sc->steps[0].index = 2; /* another node's restart says nothing of b */
    judge(r, NULL, 0);
    sc->steps[0].index = 1;
    sc->steps[0].at_ms = 1600; /* after the change */
    judge(r, NULL, 0);
    run_free(r);
}
END_TEST

/*
 * A planned move off a node a fault cut off (a partition, an isolation, a pause: found across
 * network namespaces beside a CPU hog, a node back from an isolation taking its shards while
 * their owner was cut from ZooKeeper) may not be handed off: the new owner starts the shard
 * from zero after handoff_wait, and meanwhile its CHECKs go back to the old owner, which
 * answers nothing (the policy answers). Both are judged as such; a fault that does not cut
 * the node off (a clean stop's) keeps the move planned, and so do other nodes' faults.
 */
START_TEST(test_planned_move_cut_off)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    view_planned(r, 1500, SHARD, 1);
    allowed(r, 1100, 5, 4);
    allowed(r, 1600, 5, 4); /* afresh at the new owner */
    impair_add(r, 0, 1000, 4000, "node a");
    judge(r, "exactness", 1); /* not cut off: 10 allowed is 5 too many */
    r->impairs[0].cut = true;
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "bounded-loss").checked, 1);
    r->impairs[0].node = 2; /* another node cut off says nothing of a's move */
    judge(r, "exactness", 1);
    r->impairs[0].node = 0;
    r->impairs[0].from_ms = T0 + 1900; /* cut off as the move began (steps land late) */
    judge(r, NULL, 0);
    r->impairs[0].from_ms = T0 + 2100; /* cut off after: a handoff takes milliseconds */
    judge(r, "exactness", 1);
    run_free(r);

    /* the policy: within handoff_wait of the move off the node cut off, not later */
    r = run_new();
    view_add(r, -5000, -1, 0);
    view_planned(r, 1500, SHARD, 1);
    impair_add(r, 0, 1000, 2000, "node a");
    req(r, 3000, RL_WIRE_FAIL_OPEN, 0); /* sent back to the old owner, cut off */
    judge(r, "policy", 1);              /* a fault that did not cut it off: no excuse */
    ck_assert_ptr_nonnull(strstr(json, "while its owner was not impaired"));
    r->impairs[0].cut = true;
    judge(r, NULL, 0);
    req(r, 5200, RL_WIRE_FAIL_OPEN, 0); /* past handoff_wait and the lag of the move */
    judge(r, "policy", 1);
    run_free(r);
}
END_TEST

START_TEST(test_policy_unimpaired)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    req(r, 1100, RL_WIRE_FAIL_OPEN, 0);
    judge(r, "policy", 1);
    ck_assert_ptr_nonnull(strstr(json, "while its owner was not impaired"));
    /* a fault on another node than the owner is no excuse */
    impair_add(r, 1, 1000, 1200, "killed");
    judge(r, "policy", 1);
    /* nor one that ended (with converge_ms) long before */
    impair_add(r, 0, -9000, -5000, "killed");
    judge(r, "policy", 1);
    run_free(r);
}
END_TEST

START_TEST(test_policy_impaired)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    impair_add(r, 0, 1000, 1200, "killed");
    req(r, 1100, RL_WIRE_FAIL_OPEN, 0);
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "policy").checked, 1);
    ck_assert_ptr_nonnull(strstr(json, "\"fail_open\":1"));
    run_free(r);
}
END_TEST

START_TEST(test_policy_every_node_impaired)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    impair_add(r, -1, 1000, INT64_MAX, "zookeeper stopped");
    req(r, 1100, RL_WIRE_FAIL_OPEN, 0);
    judge(r, NULL, 0);
    run_free(r);
}
END_TEST

START_TEST(test_policy_wrong_kind)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    impair_add(r, 0, 1000, 1200, "killed");
    req(r, 1100, RL_WIRE_FAIL_CLOSED, 0); /* the service fails open */
    judge(r, "policy", 1);
    ck_assert_ptr_nonnull(strstr(json, "but the service fails open"));
    /* and for a service that fails closed, FAIL_OPEN is as wrong */
    scenario_of(r)->services[0].fail_closed = true;
    r->traffic[0].reqs[0].code = RL_WIRE_FAIL_OPEN;
    judge(r, "policy", 1);
    r->traffic[0].reqs[0].code = RL_WIRE_FAIL_CLOSED;
    judge(r, NULL, 0);
    run_free(r);
}
END_TEST

START_TEST(test_liveness_late)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    req_full(r, 1100, USER, SHARD, RL_WIRE_ALLOWED, 4, 400 * 1000);
    judge(r, "liveness", 1);
    ck_assert_ptr_nonnull(strstr(json, "after 400.0 ms (deadline 50 + margin 250)"));
    ck_assert_ptr_nonnull(strstr(json, "\"late\":1"));
    run_free(r);
}
END_TEST

START_TEST(test_liveness_just_late)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    req_full(r, 1100, USER, SHARD, RL_WIRE_ALLOWED, 4, 300 * 1000 + 1);
    judge(r, "liveness", 1);
    run_free(r);
}
END_TEST

/* A request whose shard moved while it was out (the new owner answering MOVING until the
 * counters come) may be answered up to handoff_wait later than deadline + margin: a planned
 * move, or one that may be (a node back from an expired session), not a loss; and no later. */
START_TEST(test_liveness_held_by_move)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    view_planned(r, 1500, SHARD, 1);
    req_full(r, 1400, USER, SHARD, RL_WIRE_ALLOWED, 4, 480 * 1000);
    judge(r, NULL, 0);
    ck_assert_ptr_nonnull(strstr(json, "\"late\":0"));
    ck_assert_ptr_nonnull(strstr(json, "\"held_by_move\":1"));
    run_free(r);

    /* past handoff_wait more: late all the same */
    r = run_new();
    view_add(r, -5000, -1, 0);
    view_planned(r, 1500, SHARD, 1);
    req_full(r, 1400, USER, SHARD, RL_WIRE_ALLOWED, 4, 2300 * 1000 + 1);
    judge(r, "liveness", 1);
    run_free(r);

    /* another shard's move, or a move long before it was sent, is no excuse */
    r = run_new();
    view_add(r, -5000, -1, 0);
    view_planned(r, 1500, SHARD, 1);
    req_full(r, 1400, USER, SHARD + 1, RL_WIRE_ALLOWED, 4, 480 * 1000);
    req_full(r, 5000, USER, SHARD, RL_WIRE_ALLOWED, 4, 480 * 1000);
    judge(r, "liveness", 2);
    run_free(r);

    /* a loss (the new owner starts from zero at once, nothing to wait for) is none either */
    r = run_new();
    view_add(r, -5000, -1, 0);
    view_add(r, 1500, SHARD, 1); /* a gone, no clean stop */
    req_full(r, 1400, USER, SHARD, RL_WIRE_ALLOWED, 4, 480 * 1000);
    judge(r, "liveness", 1);
    /* ...unless the observer had no session then (ZooKeeper paused: every node registered
     * again, one alone for a moment, whose handoffs it never saw) */
    r->blind_from[0] = T0 + 1000;
    r->blind_to[0] = T0 + 1300;
    r->nblind = 1;
    judge(r, NULL, 0);
    ck_assert_ptr_nonnull(strstr(json, "\"held_by_move\":1"));
    run_free(r);
}
END_TEST

START_TEST(test_liveness_lost_excused)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    r->router_down_from[0][0] = T0 + 1000;
    r->router_down_to[0][0] = T0 + 1500;
    r->nrouter_down[0] = 1;
    req_full(r, 1200, USER, SHARD, CH_CODE_LOST, 0, 5000);
    /* up to a second around the router's down time */
    req_full(r, 2400, USER, SHARD, CH_CODE_LOST, 0, 5000);
    judge(r, NULL, 0);
    ck_assert_ptr_nonnull(strstr(json, "\"lost_with_killed_router\":2"));
    run_free(r);
}
END_TEST

START_TEST(test_liveness_lost)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    req_full(r, 1200, USER, SHARD, CH_CODE_LOST, 0, 5000);
    judge(r, "liveness", 1);
    ck_assert_ptr_nonnull(strstr(json, "lost: the router closed the connection"));
    /* a router down long before (more than a second) is no excuse */
    r->router_down_from[0][0] = T0 - 5000;
    r->router_down_to[0][0] = T0 - 1000;
    r->nrouter_down[0] = 1;
    judge(r, "liveness", 1);
    run_free(r);
}
END_TEST

START_TEST(test_liveness_pending)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    req(r, 1100, RL_WIRE_ALLOWED, 4);
    req(r, 1200, CH_CODE_PENDING, 0);
    judge(r, "liveness", 1);
    ck_assert_ptr_nonnull(strstr(json, "never answered"));
    run_free(r);
}
END_TEST

START_TEST(test_liveness_error)
{
    struct ch_run *r = run_new();
    struct ch_req *q;

    view_add(r, -5000, -1, 0);
    q = req(r, 1100, CH_CODE_ERROR, 0);
    q->err = 4; /* overloaded */
    judge(r, "liveness", 1);
    ck_assert_ptr_nonnull(strstr(json, "answered ERROR"));
    run_free(r);
}
END_TEST

START_TEST(test_convergence_violated)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    /* the view at -5 s; converge 3 s: from -2 s on the router must agree */
    sample_add(r, -4000, 0, 0xbad);
    sample_add(r, -1500, 0, 0xbad);
    judge(r, "convergence", 1);
    ck_assert_ptr_nonnull(strstr(json, "still routes by another table"));
    run_free(r);
}
END_TEST

START_TEST(test_convergence_holds)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    sample_add(r, -4000, 0, 0xbad);         /* within converge_ms: not judged */
    sample_add(r, -2000 - 1, 0, 0xbad);     /* still within */
    sample_add(r, -1500, 0, r->views[0].digest);
    sample_add(r, 3000, 0, r->views[0].digest);
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "convergence").checked, 2);
    run_free(r);
}
END_TEST

/* A later view: judged from when it came, by its own digest. */
START_TEST(test_convergence_second_view)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    view_add(r, 1500, 5, 1);
    sample_add(r, 2000, 0, r->views[0].digest); /* the old table, within converge_ms */
    sample_add(r, 4600, 0, r->views[1].digest);
    judge(r, NULL, 0);
    sample_add(r, 4700, 0, r->views[0].digest); /* the old table, too late */
    judge(r, "convergence", 1);
    run_free(r);
}
END_TEST

/* A router that heard of a change before the observer did is not behind: a sample showing
 * the next view up to 1 s before the observer saw it is no violation; earlier, it is. */
START_TEST(test_convergence_router_ahead)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    view_add(r, 5000, 5, 1);
    sample_add(r, 4950, 0, r->views[1].digest);
    judge(r, NULL, 0);
    sample_add(r, 3000, 0, r->views[1].digest);
    judge(r, "convergence", 1);
    run_free(r);
}
END_TEST

/*
 * Stale answers: node 0 leaves ZooKeeper's view at 1 s and comes back at 4 s; a direct probe
 * it answered at 3 s is 2 s stale, one it answered 50 ms before the view that brings it back
 * is not stale (it registered again before the observer heard of it).
 */
START_TEST(test_stale_answers)
{
    struct ch_run *r = run_new();
    struct ch_scenario *sc = scenario_of(r);

    view_add(r, -5000, -1, 0);
    view_add(r, 1000, -1, 0);
    r->views[1].members = 0x6;
    view_add(r, 4000, -1, 0);
    r->probes[r->nprobes++] = (struct ch_probe){T0 + 2000, 0, true, false};
    r->probes[r->nprobes++] = (struct ch_probe){T0 + 3000, 0, true, false};
    r->probes[r->nprobes++] = (struct ch_probe){T0 + 3950, 0, true, false};
    r->probes[r->nprobes++] = (struct ch_probe){T0 + 3960, 1, true, true};
    sc->expect.max_stale_ms = 2000;
    judge(r, NULL, 0);
    ck_assert_ptr_nonnull(strstr(json, "\"stale_answers_ms\":2000,"));
    sc->expect.max_stale_ms = 1999;
    judge(r, "expect", 1);
    run_free(r);
}
END_TEST

/* A router that agreed, then saw a change the observer missed (another table for a
 * moment), then agreed again: no violation; one that stays different past converge_ms
 * after the change: a violation. */
START_TEST(test_convergence_transient_table)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    sample_add(r, -1000, 0, r->views[0].digest);
    sample_add(r, 2000, 0, 0xbad);          /* a table the observer never saw */
    sample_add(r, 2400, 0, r->views[0].digest);
    judge(r, NULL, 0);
    sample_add(r, 6000, 0, 0xbad);          /* different again, and it stays so */
    sample_add(r, 8500, 0, 0xbad);          /* 2.5 s: within converge_ms */
    judge(r, NULL, 0);
    sample_add(r, 9100, 0, 0xbad);          /* 3.1 s */
    judge(r, "convergence", 1);
    ck_assert_ptr_nonnull(strstr(json, "3.1 s > bound 3.0 s"));
    run_free(r);
}
END_TEST

/* A router restarted: converge_ms counts from when it came back. */
START_TEST(test_convergence_router_restarted)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    r->router_down_from[0][0] = T0 + 1000;
    r->router_down_to[0][0] = T0 + 2000;
    r->nrouter_down[0] = 1;
    sample_add(r, 4500, 0, 0xbad);
    judge(r, NULL, 0);
    sample_add(r, 5100, 0, 0xbad);
    judge(r, "convergence", 1);
    run_free(r);
}
END_TEST

START_TEST(test_deaths)
{
    struct ch_run *r = run_new();

    view_add(r, -5000, -1, 0);
    req(r, 1100, RL_WIRE_ALLOWED, 4);
    r->ndeaths = 1;
    snprintf(r->deaths[0], sizeof(r->deaths[0]), "rl-node b (status 0x9)");
    judge(r, "no-deaths", 1);
    ck_assert_ptr_nonnull(strstr(json, "\"examples\":[\"rl-node b (status 0x9)\"]"));
    run_free(r);
}
END_TEST

START_TEST(test_expect)
{
    struct ch_run *r = run_new();
    struct ch_scenario *sc = scenario_of(r);

    view_add(r, -5000, -1, 0);
    impair_add(r, 0, 1000, 1200, "killed");
    req(r, 1100, RL_WIRE_FAIL_OPEN, 0);
    sc->expect.max_policy = 0;
    judge(r, "expect", 1);
    ck_assert_ptr_nonnull(strstr(json, "max_policy_answers: 1 > 0"));
    sc->expect.max_policy = 1;
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "expect").checked, 1);
    sc->expect.min_policy = 2;
    judge(r, "expect", 1);
    ck_assert_ptr_nonnull(strstr(json, "min_policy_answers: 1 < 2"));
    sc->expect.min_policy = 1;
    judge(r, NULL, 0);
    run_free(r);
}
END_TEST

START_TEST(test_expect_latency_and_extra)
{
    struct ch_run *r = run_new();
    struct ch_scenario *sc = scenario_of(r);

    view_add(r, -5000, -1, 0);
    view_add(r, 1500, SHARD, 1);
    allowed(r, 1100, 5, 4);
    allowed(r, 1600, 3, 4); /* 3 past L, within L x 2 */
    req_full(r, 3100, 8, 4, RL_WIRE_ALLOWED, 4, 120 * 1000);
    sc->expect.max_extra = 3;
    sc->expect.max_latency_ms = 120;
    sc->expect.max_view_changes = 1;
    judge(r, NULL, 0);
    ck_assert_uint_eq(inv_of(json, "expect").checked, 3);
    sc->expect.max_extra = 2;
    judge(r, "expect", 1);
    sc->expect.max_extra = 3;
    sc->expect.max_latency_ms = 119;
    judge(r, "expect", 1);
    sc->expect.max_latency_ms = -1;
    sc->expect.max_view_changes = 0;
    judge(r, "expect", 1);
    run_free(r);
}
END_TEST

static Suite *
chaos_suite(void)
{
    Suite *s = suite_create("chaos");
    TCase *tc = tcase_create("scenario");

    tcase_add_test(tc, test_shipped_scenarios_load);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_step_parsed);
    tcase_add_test(tc, test_bad_files);
    tcase_add_test(tc, test_planned_steps_parsed);
    suite_add_tcase(s, tc);
    tc = tcase_create("verdict");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_control_passes);
    tcase_add_test(tc, test_exactness_over_limit);
    tcase_add_test(tc, test_exactness_refused_below_limit);
    tcase_add_test(tc, test_window_of_node);
    tcase_add_test(tc, test_exactness_policy_excludes);
    tcase_add_test(tc, test_exactness_policy_lookback);
    tcase_add_test(tc, test_exactness_lost_excludes);
    tcase_add_test(tc, test_bounded_loss_holds);
    tcase_add_test(tc, test_bounded_loss_violated);
    tcase_add_test(tc, test_bounded_loss_restart);
    tcase_add_test(tc, test_bounded_loss_reregistered);
    tcase_add_test(tc, test_bounded_loss_blind);
    tcase_add_test(tc, test_fresh_start_holds);
    tcase_add_test(tc, test_fresh_start_violated);
    tcase_add_test(tc, test_fresh_start_inherited_all);
    tcase_add_test(tc, test_fresh_start_late_in_flight);
    tcase_add_test(tc, test_planned_move);
    tcase_add_test(tc, test_planned_move_reregistered);
    tcase_add_test(tc, test_planned_move_cut_off);
    tcase_add_test(tc, test_planned_move_clean_stop);
    tcase_add_test(tc, test_policy_unimpaired);
    tcase_add_test(tc, test_policy_impaired);
    tcase_add_test(tc, test_policy_every_node_impaired);
    tcase_add_test(tc, test_policy_wrong_kind);
    tcase_add_test(tc, test_liveness_late);
    tcase_add_test(tc, test_liveness_just_late);
    tcase_add_test(tc, test_liveness_lost_excused);
    tcase_add_test(tc, test_liveness_held_by_move);
    tcase_add_test(tc, test_liveness_lost);
    tcase_add_test(tc, test_liveness_pending);
    tcase_add_test(tc, test_liveness_error);
    tcase_add_test(tc, test_convergence_violated);
    tcase_add_test(tc, test_convergence_holds);
    tcase_add_test(tc, test_convergence_second_view);
    tcase_add_test(tc, test_convergence_router_ahead);
    tcase_add_test(tc, test_convergence_router_restarted);
    tcase_add_test(tc, test_convergence_transient_table);
    tcase_add_test(tc, test_stale_answers);
    tcase_add_test(tc, test_deaths);
    tcase_add_test(tc, test_expect);
    tcase_add_test(tc, test_expect_latency_and_extra);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(chaos_suite)
