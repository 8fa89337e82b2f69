/*
 * check_rules: changing rules live, without a process: rules files (rl_conf_parse_rules:
 * [service] sections only, FILE:LINE errors like the full parser's), the swap into a live conf
 * (rl_conf_swap_rules: clients resolved again, pointers kept), tier seeds and the rules digest,
 * the key table's remap walk (rl_keytab_remap) and the limiter's switch (rl_limiter_set_rules:
 * keys of unchanged tiers keep their counts whatever moved around them, a new limit or
 * burst carries what was consumed over for all six algorithms and tier by tier (checked
 * against a limiter created under the new rules), another algorithm or window restarts
 * full, removed ones are dropped, per-service accounting rebuilt), and rules.c's
 * parse off the loop (rl_rules_*: nothing is put in force before the loop runs the thread
 * pool's result, the newest znode text wins, a refused one keeps the rules, a close while a
 * parse is in flight drops it).
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "conf.h"
#include "keytab.h"
#include "limiter.h"
#include "rltest.h"
#include "rules.h"
#include "wire.h"

static struct rl_conf *
conf_from(const char *text)
{
    struct rl_conf *c = NULL;
    char err[256] = "";
    int rc = rl_conf_parse("test.conf", text, &c, err, sizeof(err));

    RL_CHECK(rc == 0, "conf: %s", err);
    return c;
}

static struct rl_conf *
rules_from(const char *text)
{
    struct rl_conf *c = NULL;
    char err[256] = "";
    int rc = rl_conf_parse_rules("rules.conf", text, &c, err, sizeof(err));

    RL_CHECK(rc == 0, "rules: %s", err);
    return c;
}

static uint64_t
remaining(struct rl_limiter *l, const char *service, const char *user, uint32_t cost,
          uint64_t now, uint32_t *code)
{
    struct rl_wire_req req;
    struct rl_wire_check_reply rep;

    memset(&req, 0, sizeof(req));
    req.op = RL_WIRE_OP_CHECK;
    req.id = 1;
    req.service.ptr = service;
    req.service.len = (uint32_t)strlen(service);
    req.user.ptr = user;
    req.user.len = (uint32_t)strlen(user);
    req.cost = cost;
    rl_limiter_check(l, &req, now, &rep);
    if (code != NULL) {
        *code = rep.code;
    }
    return rep.remaining;
}

/* Swaps fresh into live, switches l, destroys the old rules. */
static void
switch_rules(struct rl_conf *live, struct rl_conf *fresh, struct rl_limiter *l,
             struct rl_limiter_reload *res)
{
    char warn[256];

    ck_assert_int_eq(rl_conf_swap_rules(live, fresh, warn, sizeof(warn)), 0);
    ck_assert_int_eq(rl_limiter_set_rules(l, live, res), 0);
    rl_conf_destroy(fresh);
}

/* ---- rules files ------------------------------------------------------------------------- */

START_TEST(test_rules_file_ok)
{
    struct rl_conf *c = rules_from("; rules\n[service a]\nlimit = fixed_window 10 per 1m\n"
                                   "[service a /x]\nfailure = closed\nlimit = gcra 5 per 1s\n");

    ck_assert_uint_eq(c->nrules, 2);
    ck_assert_uint_eq(c->ntiers, 2);
    ck_assert_ptr_nonnull(rl_conf_rule(c, "a", 1, "/x", 2));
    ck_assert(rl_conf_rule(c, "a", 1, "/x", 2)->fail_closed);
    ck_assert_uint_ne(c->rules_digest, 0);
    ck_assert_uint_le(c->rules_digest, (uint64_t)INT64_MAX);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_rules_file_errors)
{
    static const struct {
        const char *text;
        const char *err;
    } cases[] = {
        {"[service a]\nlimit = fixed_window 10 per 1m\n[node n]\nlisten = 127.0.0.1:1\n",
         "rules.conf:3: [node] in a rules file, which holds only [service ...] sections"},
        {"[cluster]\nname = x\n",
         "rules.conf:1: [cluster] in a rules file, which holds only [service ...] sections"},
        {"[service a]\nlimit = fixed_window 10 per\n",
         "rules.conf:2: limit: \"fixed_window 10 per\" is not \"ALGORITHM N per DURATION "
         "[burst B]\""},
        {"[service a]\n", "rules.conf:1: [service a] has no limit"},
        {"limit = gcra 1 per 1s\n", "rules.conf:1: key \"limit\" is outside any section"},
        {"[service a]\nlimit = gcra 1 per 1s\n[service a]\nlimit = gcra 1 per 1s\n",
         "rules.conf:3: duplicate section [service a] (first at line 1)"},
        {"[client w]\ntoken_sha256 = 00\n",
         "rules.conf:1: [client] in a rules file, which holds only [service ...] sections"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct rl_conf *c = (struct rl_conf *)1;
        char err[256] = "";

        ck_assert_int_eq(rl_conf_parse_rules("rules.conf", cases[i].text, &c, err, sizeof(err)),
                         -EINVAL);
        ck_assert_ptr_null(c);
        ck_assert_str_eq(err, cases[i].err);
    }
}
END_TEST

START_TEST(test_rules_load_missing)
{
    struct rl_conf *c = NULL;
    char err[256];

    ck_assert_int_eq(rl_conf_load_rules("/nonexistent/rules.conf", &c, err, sizeof(err)),
                     -ENOENT);
    ck_assert_str_eq(err, "/nonexistent/rules.conf: No such file or directory");
}
END_TEST

/* Seeds depend on the tier and its place in its section, not on other sections; the digest
 * follows any change, and not comments. */
START_TEST(test_seeds_and_digest)
{
    struct rl_conf *a = rules_from("[service a]\nlimit = fixed_window 10 per 1m\n"
                                   "limit = gcra 5 per 1s\n[service b]\nlimit = gcra 1 per 1s\n");
    struct rl_conf *b = rules_from("[service z]\nlimit = gcra 3 per 1s\n"
                                   "[service b]\nlimit = gcra 1 per 1s ; same\n"
                                   "[service a]\nlimit = fixed_window 10 per 1m\n"
                                   "limit = gcra 5 per 2s\n");
    struct rl_conf *a2 = rules_from("# comment\n[service a]\nlimit = fixed_window 10 per 1m\n"
                                    "limit = gcra 5 per 1s\n\n[service b]\n"
                                    "limit = gcra 1 per 1s\n");
    struct rl_conf *m = rules_from("[service a]\nmode = shadow\nlimit = fixed_window 10 per 1m\n"
                                   "limit = gcra 5 per 1s\n[service b]\nlimit = gcra 1 per 1s\n");

    /* a's first tier and b's tier are the same; a's second changed (window) */
    ck_assert_uint_eq(a->tiers[0].seed, b->tiers[2].seed);
    ck_assert_uint_eq(a->tiers[2].seed, b->tiers[1].seed);
    ck_assert_uint_ne(a->tiers[1].seed, b->tiers[3].seed);
    ck_assert_uint_ne(a->tiers[0].seed, a->tiers[1].seed);
    ck_assert_uint_eq(a->rules_digest, a2->rules_digest);
    ck_assert_uint_ne(a->rules_digest, b->rules_digest);
    /* mode changes the digest, not the seeds (counters stay) */
    ck_assert_uint_ne(a->rules_digest, m->rules_digest);
    ck_assert_uint_eq(a->tiers[1].seed, m->tiers[1].seed);
    rl_conf_destroy(a);
    rl_conf_destroy(b);
    rl_conf_destroy(a2);
    rl_conf_destroy(m);
}
END_TEST

/* ---- swap --------------------------------------------------------------------------------- */

START_TEST(test_swap_clients)
{
    struct rl_conf *live = conf_from(
        "[service a]\nlimit = gcra 1 per 1s\n[service b]\nlimit = gcra 1 per 1s\n"
        "[client w]\ntoken_sha256 = "
        "0000000000000000000000000000000000000000000000000000000000000000\nservices = b\n"
        "[client all]\ntoken_sha256 = "
        "1111111111111111111111111111111111111111111111111111111111111111\nservices = *\n");
    struct rl_conf *fresh = rules_from("[service c]\nlimit = gcra 2 per 1s\n"
                                       "[service b /x]\nlimit = gcra 3 per 1s\n"
                                       "[service b]\nlimit = gcra 4 per 1s\n");
    const struct rl_client_conf *w = &live->auth_clients[0];
    const struct rl_client_conf *all = &live->auth_clients[1];
    uint64_t d = fresh->rules_digest;
    char warn[256];

    ck_assert(rl_conf_client_may(w, rl_conf_rule(live, "b", 1, NULL, 0)));
    ck_assert(!rl_conf_client_may(w, rl_conf_rule(live, "a", 1, NULL, 0)));
    ck_assert_int_eq(rl_conf_swap_rules(live, fresh, warn, sizeof(warn)), 0);
    ck_assert_str_eq(warn, "");
    /* the same client struct, resolved against the new rules */
    ck_assert_ptr_eq(w, &live->auth_clients[0]);
    ck_assert_uint_eq(live->nrules, 3);
    ck_assert_uint_eq(live->rules_digest, d);
    ck_assert_ptr_null(rl_conf_rule(live, "a", 1, NULL, 0));
    ck_assert(rl_conf_client_may(w, rl_conf_rule(live, "b", 1, "/x", 2)));
    ck_assert(rl_conf_client_may(w, rl_conf_rule(live, "b", 1, NULL, 0)));
    ck_assert(!rl_conf_client_may(w, rl_conf_rule(live, "c", 1, NULL, 0)));
    ck_assert(rl_conf_client_may(all, rl_conf_rule(live, "c", 1, NULL, 0)));
    /* fresh holds the old rules now */
    ck_assert_uint_eq(fresh->nrules, 2);
    ck_assert_ptr_nonnull(rl_conf_rule(fresh, "a", 1, NULL, 0));
    rl_conf_destroy(fresh);

    /* b goes: the client keeps nothing, with a warning */
    fresh = rules_from("[service c]\nlimit = gcra 2 per 1s\n");
    ck_assert_int_eq(rl_conf_swap_rules(live, fresh, warn, sizeof(warn)), 0);
    ck_assert_str_eq(warn, "[client w] names service \"b\", which has no rule now: its CHECKs "
                           "of it get ERROR UNAUTHORIZED");
    ck_assert(!rl_conf_client_may(w, rl_conf_rule(live, "c", 1, NULL, 0)));
    rl_conf_destroy(fresh);
    rl_conf_destroy(live);
}
END_TEST

/* ---- limiter ------------------------------------------------------------------------------ */

/* Keys of unchanged tiers keep their counts when rules are added before them and reordered;
 * a tier whose limit changed carries what was consumed over; a removed rule's keys go. */
START_TEST(test_limiter_keeps_counts)
{
    struct rl_conf *live = conf_from("[service a]\nlimit = fixed_window 10 per 1h\n"
                                     "[service b]\nlimit = fixed_window 10 per 1h\n"
                                     "[service c]\nlimit = fixed_window 10 per 1h\n");
    struct rl_limiter *l = NULL;
    struct rl_limiter_reload res;
    struct rl_limiter_stats st;
    char user[32];
    const uint64_t now = 1000000;
    uint32_t code;

    ck_assert_int_eq(rl_limiter_create(&l, live, 64ull << 20), 0);
    for (int u = 0; u < 200; u++) {
        snprintf(user, sizeof(user), "u%d", u);
        for (int k = 0; k < 3; k++) {
            (void)remaining(l, "a", user, 1, now, NULL);
            (void)remaining(l, "b", user, 1, now, NULL);
            (void)remaining(l, "c", user, 1, now, NULL);
        }
    }
    /* new d first, c removed, b's limit changed, a unchanged but moved */
    switch_rules(live,
                 rules_from("[service d]\nlimit = gcra 5 per 1s\n"
                            "[service b]\nlimit = fixed_window 20 per 1h\n"
                            "[service a]\nlimit = fixed_window 10 per 1h\n"),
                 l, &res);
    ck_assert_uint_eq(res.tiers_kept, 1);
    ck_assert_uint_eq(res.tiers_carried, 1);
    ck_assert_uint_eq(res.keys_kept, 400);
    ck_assert_uint_eq(res.keys_dropped, 200);
    for (int u = 0; u < 200; u++) {
        snprintf(user, sizeof(user), "u%d", u);
        RL_CHECK_UINT_EQ(remaining(l, "a", user, 1, now, NULL), 6);  /* 10 - 3 - 1 */
        RL_CHECK_UINT_EQ(remaining(l, "b", user, 1, now, NULL), 16); /* 20 - 3 - 1 */
        (void)remaining(l, "c", user, 1, now, &code);
        RL_CHECK_UINT_EQ(code, RL_WIRE_NO_RULE);
        (void)remaining(l, "d", user, 1, now, &code);
        RL_CHECK_UINT_EQ(code, RL_WIRE_ALLOWED);
    }
    rl_limiter_stats(l, &st);
    ck_assert_uint_eq(st.keys, 600);
    /* per service: d, b, a in the new order, keys counted again */
    ck_assert_uint_eq(rl_limiter_services(l), 3);
    for (size_t i = 0; i < 3; i++) {
        struct rl_limiter_service_stats vs;
        const char *name = rl_limiter_service_stats(l, i, &vs);

        ck_assert_str_eq(name, i == 0 ? "d" : i == 1 ? "b" : "a");
        ck_assert_uint_eq(vs.keys, 200);
    }
    rl_limiter_destroy(l);
    rl_conf_destroy(live);
}
END_TEST

/* A tier's identity in its section is its algorithm, window and ordinal among the section's
 * tiers of both, not its position: a tier added after or inserted before another algorithm
 * keeps the first's counts; a change of window or algorithm restarts it. Failure and mode
 * keep counts. */
START_TEST(test_limiter_tier_positions)
{
    struct rl_conf *live = conf_from("[service a]\nlimit = fixed_window 10 per 1h\n");
    struct rl_limiter *l = NULL;
    struct rl_limiter_reload res;
    const uint64_t now = 5000;

    ck_assert_int_eq(rl_limiter_create(&l, live, 64ull << 20), 0);
    ck_assert_uint_eq(remaining(l, "a", "x", 4, now, NULL), 6);
    switch_rules(live,
                 rules_from("[service a]\nfailure = closed\nmode = shadow\n"
                            "limit = fixed_window 10 per 1h\nlimit = gcra 100 per 1s\n"),
                 l, &res);
    ck_assert_uint_eq(res.keys_kept, 1);
    ck_assert_uint_eq(remaining(l, "a", "x", 1, now, NULL), 5);
    switch_rules(live,
                 rules_from("[service a]\nlimit = gcra 100 per 1s\n"
                            "limit = fixed_window 10 per 1h\n"),
                 l, &res);
    ck_assert_uint_eq(res.keys_kept, 2);
    ck_assert_uint_eq(res.keys_dropped, 0);
    ck_assert_uint_eq(remaining(l, "a", "x", 1, now, NULL), 4);
    /* another window, another algorithm: both restart */
    switch_rules(live,
                 rules_from("[service a]\nlimit = token_bucket 100 per 1s\n"
                            "limit = fixed_window 10 per 2h\n"),
                 l, &res);
    ck_assert_uint_eq(res.keys_kept, 0);
    ck_assert_uint_eq(res.keys_dropped, 2);
    ck_assert_uint_eq(remaining(l, "a", "x", 1, now, NULL), 9);
    rl_limiter_destroy(l);
    rl_conf_destroy(live);
}
END_TEST

/* Sliding logs: their bytes follow the keys kept, and go with the keys dropped. */
START_TEST(test_limiter_log_memory)
{
    struct rl_conf *live = conf_from("[service s]\nlimit = sliding_window_log 50 per 1h\n"
                                     "[service t]\nlimit = sliding_window_log 50 per 1h\n");
    struct rl_limiter *l = NULL;
    struct rl_limiter_reload res;
    struct rl_limiter_service_stats vs;
    struct rl_limiter_stats st0, st1;
    uint64_t s_bytes = 0;
    char user[32];

    ck_assert_int_eq(rl_limiter_create(&l, live, 64ull << 20), 0);
    for (int u = 0; u < 50; u++) {
        snprintf(user, sizeof(user), "u%d", u);
        for (int k = 0; k < 20; k++) {
            (void)remaining(l, "s", user, 1, 1000 + (uint64_t)k, NULL);
            (void)remaining(l, "t", user, 1, 1000 + (uint64_t)k, NULL);
        }
    }
    ck_assert_str_eq(rl_limiter_service_stats(l, 0, &vs), "s");
    s_bytes = vs.log_bytes;
    ck_assert_uint_gt(s_bytes, 0);
    rl_limiter_stats(l, &st0);
    /* t changes its window (its keys go), s stays */
    switch_rules(live,
                 rules_from("[service t]\nlimit = sliding_window_log 60 per 2h\n"
                            "[service s]\nlimit = sliding_window_log 50 per 1h\n"),
                 l, &res);
    ck_assert_uint_eq(res.keys_kept, 50);
    ck_assert_str_eq(rl_limiter_service_stats(l, 1, &vs), "s");
    ck_assert_uint_eq(vs.log_bytes, s_bytes);
    ck_assert_uint_eq(vs.keys, 50);
    ck_assert_str_eq(rl_limiter_service_stats(l, 0, &vs), "t");
    ck_assert_uint_eq(vs.log_bytes, 0);
    ck_assert_uint_eq(vs.keys, 0);
    rl_limiter_stats(l, &st1);
    ck_assert_uint_lt(st1.memory_bytes, st0.memory_bytes);
    ck_assert_uint_eq(remaining(l, "s", "u0", 1, 2000, NULL), 29);
    ck_assert_uint_eq(remaining(l, "t", "u0", 1, 2000, NULL), 59);
    rl_limiter_destroy(l);
    rl_conf_destroy(live);
}
END_TEST

/* ---- a new limit carries what was consumed over (docs/OPERATIONS.md) --------------------- */

#define CARRY_T0 1700000000000ull /* 800 s into its hour */

/* The CHECK of `cost` of (service, user) at now: its code and remaining. */
struct carry_reply {
    uint32_t code;
    uint64_t remaining;
    uint64_t reset_ms;
    uint64_t retry;
};

static struct carry_reply
carry_check(struct rl_limiter *l, const char *service, const char *user, uint32_t cost,
            uint64_t now)
{
    struct rl_wire_req req;
    struct rl_wire_check_reply rep;
    struct carry_reply r;

    memset(&req, 0, sizeof(req));
    req.id = 1;
    req.service.ptr = service;
    req.service.len = (uint32_t)strlen(service);
    req.user.ptr = user;
    req.user.len = (uint32_t)strlen(user);
    req.cost = cost;
    ck_assert_int_eq(rl_limiter_check(l, &req, now, &rep), 0);
    r.code = rep.code;
    r.remaining = rep.remaining;
    r.reset_ms = rep.reset_ms;
    r.retry = rep.retry_after_ms;
    return r;
}

static const char *const carry_algos[] = {"fixed_window",  "sliding_window_log",
                                          "sliding_window_counter", "token_bucket",
                                          "gcra",          "leaky_bucket"};

/*
 * For each algorithm: a user spends `used` of `ALGO from per 1h`, the limit becomes
 * `ALGO to per 1h` live, and from then on every decision (a peek, then `steps` CHECKs of 1
 * spread over the hour) is the reference's: a limiter created under the new rules whose user
 * spent the same at the same time. Lowering below what was spent refuses (remaining 0).
 */
static void
carry_case(const char *algo, uint32_t from, uint32_t to, uint32_t used)
{
    char text[256];
    struct rl_conf *live, *ref_conf;
    struct rl_limiter *l = NULL, *ref = NULL;
    struct rl_limiter_reload res;
    struct carry_reply a, b;
    uint64_t now = CARRY_T0;

    snprintf(text, sizeof(text), "[service s]\nlimit = %s %u per 1h\n", algo, from);
    live = conf_from(text);
    snprintf(text, sizeof(text), "[service s]\nlimit = %s %u per 1h\n", algo, to);
    ref_conf = conf_from(text);
    ck_assert_int_eq(rl_limiter_create(&l, live, 64ull << 20), 0);
    ck_assert_int_eq(rl_limiter_create(&ref, ref_conf, 64ull << 20), 0);
    for (uint32_t k = 0; k < used; k++) {
        a = carry_check(l, "s", "u", 1, now);
        ck_assert_uint_ne(a.code, RL_WIRE_LIMITED); /* used <= from */
        if (k < to) {
            (void)carry_check(ref, "s", "u", 1, now);
        }
    }
    switch_rules(live, rules_from(text), l, &res);
    ck_assert_uint_eq(res.tiers_carried, from != to);
    ck_assert_uint_eq(res.keys_kept, 1);
    ck_assert_uint_eq(res.keys_dropped, 0);
    /* a peek at the same instant: what is left under the new limit */
    a = carry_check(l, "s", "u", 0, now);
    ck_assert_msg(a.remaining == (to > used ? to - used : 0),
                  "%s %u -> %u, %u used: remaining %llu", algo, from, to, used,
                  (unsigned long long)a.remaining);
    if (used > to) {
        a = carry_check(l, "s", "u", 1, now);
        ck_assert_uint_eq(a.code, RL_WIRE_LIMITED);
        ck_assert_uint_eq(a.remaining, 0);
    } else {
        for (int k = 0; k < 40; k++) {
            a = carry_check(l, "s", "u", 1, now);
            b = carry_check(ref, "s", "u", 1, now);
            ck_assert_msg(a.code == b.code && a.remaining == b.remaining &&
                              a.reset_ms == b.reset_ms && a.retry == b.retry,
                          "%s %u -> %u, step %d at %llu: %u/%llu/%llu/%llu, reference "
                          "%u/%llu/%llu/%llu",
                          algo, from, to, k, (unsigned long long)now, a.code,
                          (unsigned long long)a.remaining, (unsigned long long)a.reset_ms,
                          (unsigned long long)a.retry, b.code, (unsigned long long)b.remaining,
                          (unsigned long long)b.reset_ms, (unsigned long long)b.retry);
            now += 37777 * (uint64_t)(k % 5);
        }
    }
    rl_limiter_destroy(l);
    rl_limiter_destroy(ref);
    rl_conf_destroy(live);
    rl_conf_destroy(ref_conf);
}

/* The case: 3 of 3 spent, the limit raised to 1000: 997 left, for every algorithm;
 * and raised less, lowered, lowered below what was spent. */
START_TEST(test_limiter_carry_limit)
{
    for (size_t i = 0; i < sizeof(carry_algos) / sizeof(carry_algos[0]); i++) {
        carry_case(carry_algos[i], 3, 1000, 3);
        carry_case(carry_algos[i], 10, 12, 4);
        carry_case(carry_algos[i], 10, 6, 4);
        carry_case(carry_algos[i], 10, 2, 4);
        carry_case(carry_algos[i], 10, 10, 4);
    }
}
END_TEST

/* A burst change of the bucket algorithms carries over too: 3 of burst 3 spent, burst 1000:
 * 997 left. */
START_TEST(test_limiter_carry_burst)
{
    static const char *const bucket[] = {"token_bucket", "gcra", "leaky_bucket"};

    for (size_t i = 0; i < 3; i++) {
        char text[256];
        struct rl_conf *live;
        struct rl_limiter *l = NULL;
        struct rl_limiter_reload res;

        snprintf(text, sizeof(text), "[service s]\nlimit = %s 10 per 1h burst 3\n", bucket[i]);
        live = conf_from(text);
        ck_assert_int_eq(rl_limiter_create(&l, live, 64ull << 20), 0);
        for (int k = 0; k < 3; k++) {
            (void)carry_check(l, "s", "u", 1, CARRY_T0);
        }
        ck_assert_uint_eq(carry_check(l, "s", "u", 1, CARRY_T0).code, RL_WIRE_LIMITED);
        snprintf(text, sizeof(text), "[service s]\nlimit = %s 10 per 1h burst 1000\n", bucket[i]);
        switch_rules(live, rules_from(text), l, &res);
        ck_assert_uint_eq(res.keys_kept, 1);
        ck_assert_uint_eq(carry_check(l, "s", "u", 0, CARRY_T0).remaining, 997);
        rl_limiter_destroy(l);
        rl_conf_destroy(live);
    }
}
END_TEST

/* Multi-tier rules tier by tier: each tier of an unchanged algorithm and window carries its
 * own consumption over; a tier whose window changed restarts alone; shadow rules alike. */
START_TEST(test_limiter_carry_tiers)
{
    struct rl_conf *live = conf_from("[service s]\nmode = shadow\n"
                                     "limit = fixed_window 3 per 1h\n"
                                     "limit = gcra 5 per 1m\n"
                                     "limit = token_bucket 4 per 1s\n");
    struct rl_limiter *l = NULL;
    struct rl_limiter_reload res;
    struct rl_limiter_stats st;

    ck_assert_int_eq(rl_limiter_create(&l, live, 64ull << 20), 0);
    for (int k = 0; k < 3; k++) {
        ck_assert_uint_eq(carry_check(l, "s", "u", 1, CARRY_T0).code, RL_WIRE_ALLOWED);
    }
    /* shadow: allowed, but counted as would-be refused */
    ck_assert_uint_eq(carry_check(l, "s", "u", 1, CARRY_T0).code, RL_WIRE_ALLOWED);
    rl_limiter_stats(l, &st);
    ck_assert_uint_eq(st.shadow_limited, 1);
    /* raised, reordered; the token bucket's window changes */
    switch_rules(live,
                 rules_from("[service s]\nlimit = token_bucket 1000 per 2s\n"
                            "limit = gcra 1000 per 1m\n"
                            "limit = fixed_window 1000 per 1h\n"),
                 l, &res);
    ck_assert_uint_eq(res.tiers_carried, 2);
    ck_assert_uint_eq(res.keys_kept, 2);
    ck_assert_uint_eq(res.keys_dropped, 1);
    /* the deciding tier (least left): fixed window 997 and gcra 997 (3 spent each), the
     * token bucket fresh (1000) */
    ck_assert_uint_eq(carry_check(l, "s", "u", 0, CARRY_T0).remaining, 997);
    ck_assert_uint_eq(carry_check(l, "s", "u", 1, CARRY_T0).remaining, 996);
    /* the token bucket alone, 1000 - 1 */
    switch_rules(live, rules_from("[service s]\nlimit = token_bucket 1000 per 2s\n"), l, &res);
    ck_assert_uint_eq(res.tiers_kept, 1);
    ck_assert_uint_eq(carry_check(l, "s", "u", 0, CARRY_T0).remaining, 999);
    rl_limiter_destroy(l);
    rl_conf_destroy(live);
}
END_TEST

/* Another algorithm or window: the key restarts from full allowance (documented). */
START_TEST(test_limiter_carry_not_across)
{
    struct rl_conf *live = conf_from("[service s]\nlimit = fixed_window 3 per 1h\n"
                                     "[service t]\nlimit = gcra 3 per 1h\n");
    struct rl_limiter *l = NULL;
    struct rl_limiter_reload res;

    ck_assert_int_eq(rl_limiter_create(&l, live, 64ull << 20), 0);
    for (int k = 0; k < 3; k++) {
        (void)carry_check(l, "s", "u", 1, CARRY_T0);
        (void)carry_check(l, "t", "u", 1, CARRY_T0);
    }
    switch_rules(live,
                 rules_from("[service s]\nlimit = sliding_window_counter 1000 per 1h\n"
                            "[service t]\nlimit = gcra 1000 per 2h\n"),
                 l, &res);
    ck_assert_uint_eq(res.keys_kept, 0);
    ck_assert_uint_eq(res.keys_dropped, 2);
    ck_assert_uint_eq(carry_check(l, "s", "u", 0, CARRY_T0).remaining, 1000);
    ck_assert_uint_eq(carry_check(l, "t", "u", 0, CARRY_T0).remaining, 1000);
    rl_limiter_destroy(l);
    rl_conf_destroy(live);
}
END_TEST

/* Key seeds: the same for a tier whose limit or burst changed or that moved among other
 * algorithms' tiers; another for another window, algorithm, section or ordinal. */
START_TEST(test_key_seeds)
{
    struct rl_conf *a = rules_from("[service a]\nlimit = gcra 5 per 1s\nlimit = gcra 9 per 1s\n"
                                   "limit = fixed_window 3 per 1h\n[service b]\n"
                                   "limit = gcra 5 per 1s\n");
    struct rl_conf *b = rules_from("[service a]\nlimit = fixed_window 1000 per 1h\n"
                                   "limit = gcra 50 per 1s burst 70\nlimit = gcra 9 per 2s\n");

    ck_assert_uint_ne(a->tiers[0].key_seed, a->tiers[1].key_seed); /* ordinal */
    ck_assert_uint_ne(a->tiers[0].key_seed, a->tiers[3].key_seed); /* section */
    ck_assert_uint_eq(a->tiers[2].key_seed, b->tiers[0].key_seed); /* limit, moved */
    ck_assert_uint_ne(a->tiers[2].seed, b->tiers[0].seed);
    ck_assert_uint_eq(a->tiers[0].key_seed, b->tiers[1].key_seed); /* limit and burst */
    ck_assert_uint_ne(a->tiers[1].key_seed, b->tiers[2].key_seed); /* window */
    rl_conf_destroy(a);
    rl_conf_destroy(b);
}
END_TEST

/* The remap walk over a table mid-resize and with long runs: every key seen once, the
 * dropped ones gone, the rest findable. Drops every other key of a table grown to ~100k. */
static int remap_seen;

static bool
drop_odd(void *arg, struct rl_keytab_entry *e)
{
    (void)arg;
    remap_seen++;
    return (e->fp_lo & 1) == 0;
}

static bool
kt_full(void *arg, struct rl_keytab_entry *e, uint64_t now)
{
    (void)arg;
    (void)e;
    (void)now;
    return false;
}

static uint64_t
kt_score(void *arg, struct rl_keytab_entry *e, uint64_t now, uint32_t tier)
{
    (void)arg;
    (void)e;
    (void)now;
    (void)tier;
    return 0;
}

static void
kt_release(void *arg, struct rl_keytab_entry *e)
{
    (void)arg;
    (void)e;
}

START_TEST(test_keytab_remap)
{
    struct rl_keytab_ops ops = {kt_full, kt_score, NULL, kt_release, NULL};
    struct rl_keytab *t = NULL;
    struct rl_keytab_stats ks;
    const int n = 100000;

    ck_assert_int_eq(rl_keytab_create(&t, 64ull << 20, &ops), 0);
    for (int i = 0; i < n; i++) {
        uint64_t hi;
        uint32_t lo;

        rl_keytab_fingerprint((uint64_t)i * 0x9e3779b97f4a7c15ull, (uint64_t)i, &hi, &lo);
        ck_assert_ptr_nonnull(rl_keytab_insert(t, hi, (uint32_t)i, 0, 0));
    }
    rl_keytab_stats(t, &ks);
    remap_seen = 0;
    ck_assert_uint_eq(rl_keytab_remap(t, drop_odd, NULL), (size_t)n / 2);
    ck_assert_int_eq(remap_seen, n);
    rl_keytab_stats(t, &ks);
    ck_assert_uint_eq(ks.keys, (uint64_t)n / 2);
    ck_assert_uint_eq(ks.resize_left, 0);
    for (int i = 0; i < n; i++) {
        uint64_t hi;
        uint32_t lo;

        rl_keytab_fingerprint((uint64_t)i * 0x9e3779b97f4a7c15ull, (uint64_t)i, &hi, &lo);
        RL_CHECK((rl_keytab_find(t, hi, (uint32_t)i) != NULL) == (i % 2 == 0), "key %d", i);
    }
    rl_keytab_destroy(t);
}
END_TEST

/* The pause of a switch, per million keys (printed; docs/OPERATIONS.md quotes it). Not a
 * bound: only that it ends and keeps every key of an unchanged rule. */
START_TEST(test_limiter_reload_pause)
{
    struct rl_conf *live = conf_from("[service a]\nlimit = fixed_window 1000 per 1h\n"
                                     "[service b]\nlimit = fixed_window 1000 per 1h\n");
    struct rl_limiter *l = NULL;
    struct rl_limiter_reload res;
    const char *env = getenv("RL_RULES_BENCH_KEYS");
    int n = env != NULL ? atoi(env) : 200000;
    struct timespec t0, t1;
    char user[32];
    double ms;

    ck_assert_int_eq(rl_limiter_create(&l, live, 4ull << 30), 0);
    for (int u = 0; u < n; u++) {
        snprintf(user, sizeof(user), "user-%d", u);
        (void)remaining(l, u % 2 ? "a" : "b", user, 1, 1000, NULL);
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    switch_rules(live,
                 rules_from("[service a]\nlimit = fixed_window 1000 per 1h\n"
                            "[service b]\nlimit = fixed_window 2000 per 2h\n"),
                 l, &res);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    fprintf(stderr, "rules switch: %d keys (%llu kept, %llu dropped) in %.1f ms: %.0f ms per "
                    "million keys\n",
            n, (unsigned long long)res.keys_kept, (unsigned long long)res.keys_dropped, ms,
            ms * 1e6 / n);
    ck_assert_uint_eq(res.keys_kept, (uint64_t)n / 2);
    ck_assert_uint_eq(res.keys_dropped, (uint64_t)(n - n / 2));
    rl_limiter_destroy(l);
    rl_conf_destroy(live);
}
END_TEST

/* ---- rules.c: the parse off the loop ------------------------------------------------------ */

struct applied {
    int calls;
    int refuse; /* apply returns -ENOMEM */
};

static int
count_apply(void *arg, struct rl_conf **old)
{
    struct applied *a = arg;

    (void)old;
    a->calls++;
    return a->refuse ? -ENOMEM : 0;
}

/* n [service] sections, s00000 .. , limit base + i % 7 */
static char *
many_services(unsigned n, unsigned base)
{
    size_t cap = (size_t)n * 64 + 1, len = 0;
    char *t = malloc(cap);

    ck_assert_ptr_nonnull(t);
    t[0] = '\0';
    for (unsigned i = 0; i < n; i++) {
        len +=
            (size_t)snprintf(t + len, cap - len,
                             "[service s%05u]\nlimit = token_bucket %u per 1s\n", i, base + i % 7);
    }
    return t;
}

static uint64_t
digest_of(const char *text)
{
    struct rl_conf *c = rules_from(text);
    uint64_t d = c->rules_digest;

    rl_conf_destroy(c);
    return d;
}

START_TEST(test_rules_zk_off_loop)
{
    struct rl_conf *live = conf_from("[service a]\nlimit = fixed_window 10 per 1h\n");
    char *big = many_services(20000, 10);
    const char *v3 = "[service c]\nlimit = fixed_window 30 per 1h\n";
    struct applied a = {0, 0};
    struct rl_rules r;
    uv_loop_t loop;

    ck_assert_int_eq(uv_loop_init(&loop), 0);
    rl_rules_init(&r, &loop, live, "unused.conf", count_apply, &a);
    /* v1 goes to the thread pool; v2 waits; v3 replaces v2 before its parse began */
    rl_rules_from_zk(&r, big, strlen(big), 1);
    rl_rules_from_zk(&r, "[service b]\nlimit = fixed_window 20 per 1h\n", 43, 2);
    rl_rules_from_zk(&r, v3, strlen(v3), 3);
    ck_assert_int_eq(r.st.version, 0); /* nothing in force until the loop runs */
    ck_assert_int_eq(a.calls, 0);
    ck_assert_ptr_nonnull(r.job);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(a.calls, 2);
    ck_assert_int_eq(r.st.version, 4);
    ck_assert_uint_eq(r.st.reloads, 2);
    ck_assert_uint_eq(r.st.failures, 0);
    ck_assert_uint_eq((uint64_t)r.st.digest, digest_of(v3));
    ck_assert_uint_eq(live->rules_digest, digest_of(v3));
    ck_assert_ptr_null(r.job);

    /* the same version again: nothing to do; one that does not parse: refused, v3 stays */
    rl_rules_from_zk(&r, v3, strlen(v3), 3);
    ck_assert_ptr_null(r.job);
    rl_rules_from_zk(&r, "[service d]\nlimit = nonsense\n", 29, 4);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(r.st.version, 4);
    ck_assert_uint_eq(r.st.failures, 1);
    ck_assert_uint_eq(live->rules_digest, digest_of(v3));

    /* an apply that fails puts the old rules back */
    a.refuse = 1;
    rl_rules_from_zk(&r, "[service e]\nlimit = fixed_window 5 per 1h\n", 42, 5);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(r.st.version, 4);
    ck_assert_uint_eq(r.st.failures, 2);
    ck_assert_uint_eq(live->rules_digest, digest_of(v3));
    a.refuse = 0;

    /* closed while a parse is in flight (and one waits): dropped, freed, never applied */
    a.calls = 0;
    rl_rules_from_zk(&r, big, strlen(big), 6);
    rl_rules_from_zk(&r, v3, strlen(v3), 7);
    rl_rules_close(&r);
    rl_rules_from_zk(&r, v3, strlen(v3), 8);
    ck_assert_int_eq(rl_rules_reload_file(&r), 0);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(a.calls, 0);
    ck_assert_int_eq(r.st.version, 4);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    free(big);
    rl_conf_destroy(live);
}
END_TEST

START_TEST(test_rules_file_off_loop)
{
    char path[] = "/tmp/check_rules_XXXXXX";
    int fd = mkstemp(path);
    const char *text = "[cluster]\nshards = 8\n[service f]\nlimit = fixed_window 7 per 1h\n";
    const char *zk = "[service z]\nlimit = fixed_window 9 per 1h\n";
    struct rl_conf *live = conf_from("[service a]\nlimit = fixed_window 10 per 1h\n");
    struct applied a = {0, 0};
    struct rl_rules r;
    uv_loop_t loop;

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    rl_rules_init(&r, &loop, live, path, count_apply, &a);
    ck_assert_int_eq(rl_rules_reload_file(&r), 0);
    ck_assert_int_eq(a.calls, 0);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(a.calls, 1);
    ck_assert_uint_eq(r.st.reloads, 1);
    ck_assert_int_eq(r.st.version, 0);
    ck_assert_uint_eq(live->rules_digest,
                      digest_of("[service f]\nlimit = fixed_window 7 per 1h\n"));

    /* a SIGHUP, then a push while it is parsed: the push wins, whichever order */
    ck_assert_int_eq(rl_rules_reload_file(&r), 0);
    rl_rules_from_zk(&r, zk, strlen(zk), 0);
    ck_assert_int_eq(rl_rules_reload_file(&r), 0); /* waits; then only says "from ZooKeeper" */
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(r.st.version, 1);
    ck_assert_uint_eq(live->rules_digest, digest_of(zk));

    /* a file that does not load: refused, counted */
    rl_rules_init(&r, &loop, live, "/nonexistent/cluster.conf", count_apply, &a);
    ck_assert_int_eq(rl_rules_reload_file(&r), 0);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_uint_eq(r.st.failures, 1);
    ck_assert_uint_eq(live->rules_digest, digest_of(zk));
    rl_rules_close(&r);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    unlink(path);
    rl_conf_destroy(live);
}
END_TEST

static Suite *
rules_suite(void)
{
    Suite *s = suite_create("rules");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_rules_file_ok);
    tcase_add_test(tc, test_rules_file_errors);
    tcase_add_test(tc, test_rules_load_missing);
    tcase_add_test(tc, test_seeds_and_digest);
    tcase_add_test(tc, test_swap_clients);
    tcase_add_test(tc, test_limiter_keeps_counts);
    tcase_add_test(tc, test_limiter_tier_positions);
    tcase_add_test(tc, test_limiter_log_memory);
    tcase_add_test(tc, test_limiter_carry_limit);
    tcase_add_test(tc, test_limiter_carry_burst);
    tcase_add_test(tc, test_limiter_carry_tiers);
    tcase_add_test(tc, test_limiter_carry_not_across);
    tcase_add_test(tc, test_key_seeds);
    tcase_add_test(tc, test_keytab_remap);
    tcase_add_test(tc, test_limiter_reload_pause);
    tcase_add_test(tc, test_rules_zk_off_loop);
    tcase_add_test(tc, test_rules_file_off_loop);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(rules_suite)
