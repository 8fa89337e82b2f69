/*
 * check_limiter: node/limiter.c over a real key table and rules parsed from text: rule
 * lookup and fallback, multi-tier atomicity, the deciding tier and reply fields, shadow mode,
 * peeks, forgetting idle keys, and a memory cap that evicts without ever refusing more than an
 * unlimited table would. The algorithms' own arithmetic is check_algo's.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "keytab.h"
#include "inltab.h"
#include "limiter.h"
#include "tenant.h"
#include "rltest.h"
#include "slices.h"
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

static struct rl_limiter *
limiter_from(const struct rl_conf *c, uint64_t memory)
{
    struct rl_limiter *l = NULL;

    RL_CHECK_INT_EQ(rl_limiter_create(&l, c, memory), 0);
    return l;
}

/* A CHECK request (id 77); endpoint NULL is nil. */
static struct rl_wire_req
req_for(const char *service, const char *user, const char *endpoint, uint32_t cost)
{
    struct rl_wire_req req;

    memset(&req, 0, sizeof(req));
    req.op = RL_WIRE_OP_CHECK;
    req.id = 77;
    req.service.ptr = service;
    req.service.len = (uint32_t)strlen(service);
    req.user.ptr = user;
    req.user.len = (uint32_t)strlen(user);
    req.endpoint.ptr = endpoint;
    req.endpoint.len = endpoint == NULL ? 0 : (uint32_t)strlen(endpoint);
    req.cost = cost;
    return req;
}

/* One CHECK; endpoint NULL is nil. */
static struct rl_wire_check_reply
check(struct rl_limiter *l, const char *service, const char *user, const char *endpoint,
      uint32_t cost, uint64_t now)
{
    struct rl_wire_req req = req_for(service, user, endpoint, cost);
    struct rl_wire_check_reply rep;

    rl_limiter_check(l, &req, now, &rep);
    RL_CHECK_UINT_EQ(rep.id, 77);
    return rep;
}

/* One CHECK of a key whose shard is owned since ownership epoch `epoch`. */
static struct rl_wire_check_reply
check_ep(struct rl_limiter *l, const char *service, const char *user, const char *endpoint,
         uint32_t cost, uint64_t now, uint16_t epoch)
{
    struct rl_wire_req req = req_for(service, user, endpoint, cost);
    struct rl_wire_check_reply rep;

    rl_limiter_check_epoch(l, &req, now, epoch, &rep);
    RL_CHECK_UINT_EQ(rep.id, 77);
    return rep;
}

/* The counters of service `name`. */
static struct rl_limiter_service_stats
svc_stats(const struct rl_limiter *l, const char *name)
{
    struct rl_limiter_service_stats s;

    for (size_t i = 0; i < rl_limiter_services(l); i++) {
        if (strcmp(rl_limiter_service_stats(l, i, &s), name) == 0) {
            return s;
        }
    }
    ck_abort_msg("no service %s", name);
    return s;
}

static struct rl_limiter_stats
stats(const struct rl_limiter *l)
{
    struct rl_limiter_stats s;

    rl_limiter_stats(l, &s);
    RL_CHECK_UINT_EQ(s.checks, s.allowed + s.limited + s.queued + s.no_rule);
    return s;
}

static void
assert_reply(const struct rl_wire_check_reply *r, uint32_t code, uint64_t limit, uint64_t remaining,
             uint64_t reset, uint64_t retry)
{
    RL_CHECK(r->code == code && r->limit == limit && r->remaining == remaining &&
                 r->reset_ms == reset && r->retry_after_ms == retry,
             "reply [%u %llu %llu %llu %llu], want [%u %llu %llu %llu %llu]", r->code,
             (unsigned long long)r->limit, (unsigned long long)r->remaining,
             (unsigned long long)r->reset_ms, (unsigned long long)r->retry_after_ms, code,
             (unsigned long long)limit, (unsigned long long)remaining, (unsigned long long)reset,
             (unsigned long long)retry);
}

#define T0 1699999200000ull /* a window boundary for windows of 1 s, 10 s, 1 min and 1 h */

START_TEST(test_no_rule)
{
    struct rl_conf *c = conf_from("[service a /x]\nlimit = fixed_window 1 per 1s\n");
    struct rl_limiter *l = limiter_from(c, 0);
    struct rl_wire_check_reply r;

    r = check(l, "nope", "u", NULL, 1, T0);
    assert_reply(&r, RL_WIRE_NO_RULE, 0, 0, 0, 0);
    /* Only [service a /x]: the service as a whole, or another endpoint, has no rule. */
    r = check(l, "a", "u", NULL, 1, T0);
    assert_reply(&r, RL_WIRE_NO_RULE, 0, 0, 0, 0);
    r = check(l, "a", "u", "/y", 0, T0);
    assert_reply(&r, RL_WIRE_NO_RULE, 0, 0, 0, 0);
    r = check(l, "a", "u", "/x", 1, T0);
    assert_reply(&r, RL_WIRE_ALLOWED, 1, 0, 1000, 0);
    struct rl_limiter_stats s = stats(l);
    ck_assert_uint_eq(s.checks, 4);
    ck_assert_uint_eq(s.no_rule, 3);
    ck_assert_uint_eq(s.peeks, 1);
    ck_assert_uint_eq(s.keys, 1);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_endpoint_fallback)
{
    struct rl_conf *c = conf_from("[service api]\nlimit = fixed_window 2 per 1s\n"
                                  "[service api /pay]\nlimit = fixed_window 1 per 1s\n");
    struct rl_limiter *l = limiter_from(c, 0);
    struct rl_wire_check_reply r;

    r = check(l, "api", "u", NULL, 1, T0);
    assert_reply(&r, RL_WIRE_ALLOWED, 2, 1, 1000, 0);
    /* "" is nil: the same service-wide counter. */
    r = check(l, "api", "u", "", 1, T0 + 10);
    assert_reply(&r, RL_WIRE_ALLOWED, 2, 0, 990, 0);
    /* The endpoint section counts apart. */
    r = check(l, "api", "u", "/pay", 1, T0 + 10);
    assert_reply(&r, RL_WIRE_ALLOWED, 1, 0, 990, 0);
    r = check(l, "api", "u", "/pay", 1, T0 + 10);
    assert_reply(&r, RL_WIRE_LIMITED, 1, 0, 990, 990);
    /* An endpoint without a section falls back to, and shares, the service's counter. */
    r = check(l, "api", "u", "/other", 1, T0 + 20);
    assert_reply(&r, RL_WIRE_LIMITED, 2, 0, 980, 980);
    /* Another user has counters of its own. */
    r = check(l, "api", "v", "/other", 1, T0 + 20);
    assert_reply(&r, RL_WIRE_ALLOWED, 2, 1, 980, 0);
    ck_assert_uint_eq(stats(l).keys, 3);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_multi_tier_atomic)
{
    struct rl_conf *c = conf_from("[service m]\n"
                                  "limit = fixed_window 5 per 1h\n"
                                  "limit = fixed_window 4 per 1s\n");
    struct rl_limiter *l = limiter_from(c, 0);
    struct rl_wire_check_reply r;

    r = check(l, "m", "u", NULL, 2, T0);
    assert_reply(&r, RL_WIRE_ALLOWED, 4, 2, 1000, 0); /* tier 2 has least left: 2 < 3 */
    /* Tier 1 would allow 3, tier 2 refuses: nothing consumed anywhere. */
    r = check(l, "m", "u", NULL, 3, T0 + 100);
    assert_reply(&r, RL_WIRE_LIMITED, 4, 2, 900, 900);
    /* A second later tier 2 is empty again, and tier 1 still holds 3, not 0. */
    r = check(l, "m", "u", NULL, 0, T0 + 1000);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 3, 3600000 - 1000, 0);
    r = check(l, "m", "u", NULL, 3, T0 + 1000);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 0, 3600000 - 1000, 0);
    /* Tier 1 refuses now; tier 2 would allow and reports what it holds, 4. */
    r = check(l, "m", "u", NULL, 1, T0 + 2000);
    assert_reply(&r, RL_WIRE_LIMITED, 5, 0, 3600000 - 2000, 3600000 - 2000);
    r = check(l, "m", "u", NULL, 0, T0 + 2000);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 0, 3600000 - 2000, 0);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_deciding_tier)
{
    struct rl_conf *c = conf_from("[service d]\n"
                                  "limit = fixed_window 1 per 1s\n"
                                  "limit = fixed_window 1 per 10s\n"
                                  "[service q]\n"
                                  "limit = fixed_window 100 per 1s\n"
                                  "limit = leaky_bucket 10 per 1s burst 5\n"
                                  "[service n]\n"
                                  "limit = token_bucket 10 per 1s burst 3\n"
                                  "limit = fixed_window 100 per 1s\n");
    struct rl_limiter *l = limiter_from(c, 0);
    struct rl_wire_check_reply r;

    /* Both left with 0: the first in file order decides. */
    r = check(l, "d", "u", NULL, 1, T0);
    assert_reply(&r, RL_WIRE_ALLOWED, 1, 0, 1000, 0);
    /* Both refuse: the one with the longest wait decides. */
    r = check(l, "d", "u", NULL, 1, T0 + 500);
    assert_reply(&r, RL_WIRE_LIMITED, 1, 0, 9500, 9500);
    /* Past 1 s only the second refuses. */
    r = check(l, "d", "u", NULL, 1, T0 + 1500);
    assert_reply(&r, RL_WIRE_LIMITED, 1, 0, 8500, 8500);

    /* Leaky shaping: QUEUED with the wait; the bucket decides with the least left. */
    r = check(l, "q", "u", NULL, 1, T0);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 4, 100, 0);
    r = check(l, "q", "u", NULL, 1, T0);
    assert_reply(&r, RL_WIRE_QUEUED, 5, 3, 200, 100);
    r = check(l, "q", "u", NULL, 3, T0);
    assert_reply(&r, RL_WIRE_QUEUED, 5, 0, 500, 200);
    r = check(l, "q", "u", NULL, 1, T0);
    assert_reply(&r, RL_WIRE_LIMITED, 5, 0, 500, 100);

    /* Cost past the burst can never pass. */
    r = check(l, "n", "u", NULL, 4, T0);
    assert_reply(&r, RL_WIRE_LIMITED, 3, 3, 0, RL_WIRE_RETRY_NEVER);
    struct rl_limiter_stats s = stats(l);
    ck_assert_uint_eq(s.queued, 2);
    ck_assert_uint_eq(s.limited, 4);
    ck_assert_uint_eq(s.allowed, 2);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_shadow)
{
    struct rl_conf *c = conf_from("[service s]\nmode = shadow\nlimit = fixed_window 1 per 1s\n"
                                  "[service sq]\nmode = shadow\n"
                                  "limit = leaky_bucket 1 per 1s burst 2\n"
                                  "[service e]\nlimit = fixed_window 1 per 1s\n");
    struct rl_limiter *l = limiter_from(c, 0);
    struct rl_wire_check_reply r;

    r = check(l, "s", "u", NULL, 1, T0);
    assert_reply(&r, RL_WIRE_ALLOWED, 1, 0, 1000, 0);
    for (int i = 0; i < 3; i++) {
        /* Judged as enforce would (remaining and reset), but allowed. */
        r = check(l, "s", "u", NULL, 1, T0 + 100);
        assert_reply(&r, RL_WIRE_ALLOWED, 1, 0, 900, 0);
    }
    /* A would-be refusal consumes nothing: the next window is fresh. */
    r = check(l, "s", "u", NULL, 0, T0 + 1000);
    assert_reply(&r, RL_WIRE_ALLOWED, 1, 1, 0, 0);
    /* Shadow shaping does not hold the caller either. */
    check(l, "sq", "u", NULL, 1, T0);
    r = check(l, "sq", "u", NULL, 1, T0);
    assert_reply(&r, RL_WIRE_ALLOWED, 2, 0, 2000, 0);
    /* The same in enforce mode refuses. */
    check(l, "e", "u", NULL, 1, T0);
    r = check(l, "e", "u", NULL, 1, T0);
    ck_assert_uint_eq(r.code, RL_WIRE_LIMITED);
    struct rl_limiter_stats s = stats(l);
    ck_assert_uint_eq(s.shadow_limited, 3);
    ck_assert_uint_eq(s.limited, 1);
    ck_assert_uint_eq(s.queued, 0);
    ck_assert_uint_eq(s.allowed, 8);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_peeks)
{
    struct rl_conf *c = conf_from("[service p]\n"
                                  "limit = sliding_window_log 3 per 1s\n"
                                  "limit = token_bucket 5 per 1s\n");
    struct rl_limiter *l = limiter_from(c, 0);
    struct rl_wire_check_reply r;

    for (int i = 0; i < 5; i++) {
        r = check(l, "p", "u", NULL, 0, T0 + i);
        assert_reply(&r, RL_WIRE_ALLOWED, 3, 3, 0, 0);
    }
    ck_assert_uint_eq(stats(l).keys, 0);
    r = check(l, "p", "u", NULL, 2, T0);
    assert_reply(&r, RL_WIRE_ALLOWED, 3, 1, 1000, 0);
    for (int i = 0; i < 5; i++) {
        r = check(l, "p", "u", NULL, 0, T0 + 10);
        assert_reply(&r, RL_WIRE_ALLOWED, 3, 1, 990, 0);
    }
    struct rl_limiter_stats s = stats(l);
    ck_assert_uint_eq(s.peeks, 10);
    ck_assert_uint_eq(s.keys, 2);
    ck_assert_uint_gt(s.memory_bytes, 0);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_sweep_forgets)
{
    struct rl_conf *c = conf_from("[service w]\n"
                                  "limit = fixed_window 2 per 1s\n"
                                  "limit = sliding_window_log 5 per 2s\n"
                                  "limit = gcra 4 per 1s\n");
    struct rl_limiter *l = limiter_from(c, 0);
    struct rl_limiter_stats s0 = stats(l);
    struct rl_limiter_stats s;
    char user[32];

    for (int i = 0; i < 100; i++) {
        snprintf(user, sizeof(user), "user-%d", i);
        RL_CHECK_UINT_EQ(check(l, "w", user, NULL, 1, T0).code, RL_WIRE_ALLOWED);
    }
    s = stats(l);
    ck_assert_uint_eq(s.keys, 300);
    ck_assert_uint_gt(s.memory_bytes, s0.memory_bytes);
    /* Full again: gcra at 250 ms (one emission interval), the window at 1 s, the log at 2 s. */
    rl_limiter_sweep(l, T0 + 249, 0, 1u << 20);
    ck_assert_uint_eq(stats(l).keys, 300);
    rl_limiter_sweep(l, T0 + 250, 0, 1u << 20);
    ck_assert_uint_eq(stats(l).keys, 200);
    rl_limiter_sweep(l, T0 + 999, 0, 1u << 20);
    ck_assert_uint_eq(stats(l).keys, 200);
    rl_limiter_sweep(l, T0 + 1000, 0, 1u << 20);
    s = stats(l);
    ck_assert_uint_eq(s.keys, 100);
    ck_assert_uint_eq(s.expired, 200);
    rl_limiter_sweep(l, T0 + 2000, 0, 1u << 20);
    s = stats(l);
    ck_assert_uint_eq(s.keys, 0);
    ck_assert_uint_eq(s.expired, 300);
    /* The table keeps its slots while the keys may come back: it shrinks once they have
     * stayed away for RL_KEYTAB_SHRINK_MS; then the logs' heap and the table's memory are
     * given back. */
    rl_limiter_sweep(l, T0 + 2000 + RL_KEYTAB_SHRINK_MS, 0, 1u << 20);
    ck_assert_uint_gt(stats(l).memory_bytes, s0.memory_bytes);
    rl_limiter_sweep(l, T0 + 2000 + 2 * RL_KEYTAB_SHRINK_MS, 0, 1u << 20);
    rl_limiter_sweep(l, T0 + 2000 + 2 * RL_KEYTAB_SHRINK_MS, 0, 1u << 20);
    s = stats(l);
    ck_assert_uint_le(s.memory_bytes, s0.memory_bytes);
    /* Forgotten keys start at full allowance. */
    ck_assert_uint_eq(check(l, "w", "user-1", NULL, 0, T0 + 2000).remaining, 2);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/* Tier ids past 16 bits (a file may have 2^20 - 1 tiers): a key of the last of 70,000 tiers
 * is judged, swept and counted by its own tier, not by the one whose id is its id's low 16
 * bits (a 1-per-second gcra here, which would be full, and forgotten, after a second). */
START_TEST(test_tier_ids_past_16_bits)
{
    enum { SECTIONS = 4375 }; /* 16 tiers each: 70,000 */
    size_t cap = (size_t)SECTIONS * (32 + 16 * 24), len = 0;
    char *text = malloc(cap);

    ck_assert_ptr_nonnull(text);
    for (int s = 0; s < SECTIONS; s++) {
        len += (size_t)snprintf(text + len, cap - len, "[service s%d]\n", s);
        for (int t = 0; t < 16; t++) {
            len += (size_t)snprintf(text + len, cap - len, "%s\n",
                                    s == SECTIONS - 1 && t == 15 ? "limit = fixed_window 3 per 1h"
                                                                 : "limit = gcra 1 per 1s");
        }
    }
    struct rl_conf *c = conf_from(text);
    free(text);
    ck_assert_uint_eq(c->ntiers, 70000);
    ck_assert_uint_eq(c->tiers[69999].id, 69999);
    struct rl_limiter *l = limiter_from(c, 0);
    char svc[16];
    snprintf(svc, sizeof(svc), "s%d", SECTIONS - 1);
    struct rl_wire_check_reply r = check(l, svc, "u", NULL, 1, T0);
    RL_CHECK_UINT_EQ(r.code, RL_WIRE_ALLOWED);
    RL_CHECK_UINT_EQ(r.limit, 1); /* the gcra tiers decide (least left) */
    for (int i = 0; i < 2; i++) {
        RL_CHECK_UINT_EQ(check(l, svc, "u", NULL, 1, T0 + 1000 * (i + 1)).code, RL_WIRE_ALLOWED);
    }
    /* The fixed window of 3 per hour is spent: it refuses, whatever the gcra tiers say. */
    r = check(l, svc, "u", NULL, 1, T0 + 3000);
    RL_CHECK_UINT_EQ(r.code, RL_WIRE_LIMITED);
    RL_CHECK_UINT_EQ(r.limit, 3);
    ck_assert_uint_eq(stats(l).keys, 16);
    /* A minute on, the gcra keys are full and forgotten; the window's key is not. */
    rl_limiter_sweep(l, T0 + 60000, 0, 1u << 20);
    ck_assert_uint_eq(stats(l).keys, 1);
    struct rl_limiter_service_stats vs;
    const char *name = rl_limiter_service_stats(l, SECTIONS - 1, &vs);
    ck_assert_str_eq(name, svc);
    RL_CHECK_UINT_EQ(vs.keys, 1);
    RL_CHECK_UINT_EQ(check(l, svc, "u", NULL, 1, T0 + 60000).code, RL_WIRE_LIMITED);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

static uint64_t
rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/*
 * A cap far below the working set: every new key is still served, evictions are counted, the
 * memory stays under the cap, and no request is refused that an unlimited table would allow.
 * One fixed_window tier and unit costs make that last claim exact: a key's count with the cap
 * is never above its count without it (eviction resets it to 0, and both then add one per
 * allowed request up to L). With more tiers, costs above 1 or other algorithms, an evicted
 * key may be allowed more meanwhile and so be refused later where the unlimited table allows;
 * each refusal is still justified by what was admitted (docs/ALGORITHMS.md).
 */
START_TEST(test_memory_cap)
{
    struct rl_conf *c = conf_from("[service c]\nlimit = fixed_window 30 per 1m\n");
    struct rl_limiter *capped = limiter_from(c, 64 * 1024);
    struct rl_limiter *free_ = limiter_from(c, 1ull << 30);
    uint64_t rs = 42;
    uint64_t now = T0;
    uint64_t refused_free = 0, refused_capped = 0;
    char user[32];

    for (int i = 0; i < 300000; i++) {
        /* Half the traffic from 10 hot users, half from 100000 others. */
        uint64_t u = rnd(&rs) % 2 == 0 ? rnd(&rs) % 10 : 10 + rnd(&rs) % 100000;
        struct rl_wire_check_reply a, b;

        now += rnd(&rs) % 3;
        snprintf(user, sizeof(user), "u%llu", (unsigned long long)u);
        a = check(free_, "c", user, NULL, 1, now);
        b = check(capped, "c", user, NULL, 1, now);
        refused_free += a.code == RL_WIRE_LIMITED;
        refused_capped += b.code == RL_WIRE_LIMITED;
        RL_CHECK(b.code == RL_WIRE_ALLOWED || a.code == RL_WIRE_LIMITED,
                 "capped refused %s at step %d, unlimited allowed", user, i);
        if (i % 1000 == 0) {
            rl_limiter_sweep(capped, now, 0, 4096);
            rl_limiter_sweep(free_, now, 0, 4096);
        }
    }
    struct rl_limiter_stats s = stats(capped);
    ck_assert_uint_gt(refused_free, 1000);
    ck_assert_uint_gt(refused_capped, 100);
    ck_assert_uint_gt(s.evicted, 1000);
    ck_assert_uint_le(s.memory_bytes, 64 * 1024);
    ck_assert_uint_gt(stats(free_).keys, s.keys);
    rl_limiter_destroy(capped);
    rl_limiter_destroy(free_);
    rl_conf_destroy(c);
}
END_TEST

/*
 * A clock stepped back a day: keys written while it was ahead are judged as bounded (at most
 * a window ahead of the clock), and the sweep forgets them at most three windows after the
 * step back, as it would keys written then. It kept them until the clock reached the day it had
 * stepped from (is_full read the state as stored).
 */
START_TEST(test_sweep_clock_day_back)
{
    struct rl_conf *c = conf_from("[service d]\n"
                                  "limit = token_bucket 4 per 1s\n"
                                  "limit = gcra 4 per 1s\n"
                                  "limit = leaky_bucket 4 per 1s\n"
                                  "limit = fixed_window 4 per 1s\n"
                                  "limit = sliding_window_counter 4 per 1s\n"
                                  "limit = sliding_window_log 4 per 1s\n"
                                  "[service n]\n"
                                  "limit = concurrency 4 lease 1s\n");
    struct rl_limiter *l = limiter_from(c, 0);
    const uint64_t DAY = 86400000ull;
    char user[32];

    for (int i = 0; i < 50; i++) {
        snprintf(user, sizeof(user), "user-%d", i);
        RL_CHECK_UINT_EQ(check(l, "d", user, NULL, 1, T0 + DAY).code, RL_WIRE_ALLOWED);
        RL_CHECK_UINT_EQ(check(l, "n", user, NULL, 1, T0 + DAY).code, RL_WIRE_ALLOWED);
    }
    ck_assert_uint_eq(stats(l).keys, 350);
    /* the clock back a day: a sweep at once keeps what is not full yet */
    rl_limiter_sweep(l, T0, 0, 1u << 20);
    ck_assert_uint_eq(stats(l).keys, 350);
    /* three windows (leases) later every key is back at full allowance and forgotten: a
     * window ahead at most, then its own window (two for sliding_window_counter, whose
     * previous window still counts) */
    rl_limiter_sweep(l, T0 + 3000, 0, 1u << 20);
    ck_assert_uint_eq(stats(l).keys, 0);
    ck_assert_uint_eq(stats(l).expired, 350);
    /* and the users start from full allowance */
    ck_assert_uint_eq(check(l, "d", "user-1", NULL, 0, T0 + 3000).remaining, 4);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/*
 * The node's sweep forgets a key once it has been full for a grace (1 s), and bounds what it
 * visits at its own clock, not at the clock less the grace: a key of a window shorter than
 * the grace, used just now, would otherwise lie "more than a window ahead" of the earlier
 * time and be moved back, refilled by what it had consumed.
 */
START_TEST(test_sweep_grace)
{
    struct rl_conf *c = conf_from("[service s]\n"
                                  "limit = token_bucket 10 per 100ms\n"
                                  "[service g]\n"
                                  "limit = gcra 10 per 100ms\n");
    struct rl_limiter *l = limiter_from(c, 0);
    const uint64_t now = T0 + 5000;

    RL_CHECK_UINT_EQ(check(l, "s", "u", NULL, 10, now).remaining, 0);
    RL_CHECK_UINT_EQ(check(l, "g", "u", NULL, 10, now).remaining, 0);
    rl_limiter_sweep(l, now, 1000, 1u << 20);
    ck_assert_uint_eq(stats(l).keys, 2);
    RL_CHECK_UINT_EQ(check(l, "s", "u", NULL, 1, now).code, RL_WIRE_LIMITED);
    RL_CHECK_UINT_EQ(check(l, "g", "u", NULL, 1, now).code, RL_WIRE_LIMITED);
    /* full at now + 100: kept until it has been full for the grace */
    rl_limiter_sweep(l, now + 1099, 1000, 1u << 20);
    ck_assert_uint_eq(stats(l).keys, 2);
    rl_limiter_sweep(l, now + 1100, 1000, 1u << 20);
    ck_assert_uint_eq(stats(l).keys, 0);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/*
 * A clock stepped back a day at the memory cap: the eviction scores keys that lay a day ahead
 * by judging copies of their states, which share their logs. The keys' own states are moved
 * back with the logs (rl_algo_bound), so once their logs have emptied the sweep forgets them;
 * it kept them for the day when only the copy's full_at moved (a review of rl_algo_bound).
 */
START_TEST(test_cap_clock_day_back)
{
    struct rl_conf *c = conf_from("[service g]\nlimit = sliding_window_log 5 per 1s\n");
    struct rl_limiter *l = limiter_from(c, 64 * 1024);
    const uint64_t DAY = 86400000ull;
    uint64_t ahead = 0, left;
    char user[32];

    for (; stats(l).evicted == 0; ahead++) {
        snprintf(user, sizeof(user), "a%llu", (unsigned long long)ahead);
        RL_CHECK_UINT_EQ(check(l, "g", user, NULL, 1, T0 + DAY).code, RL_WIRE_ALLOWED);
        ck_assert_uint_lt(ahead, 100000);
    }
    /* back a day: new users, each evicting after scoring a sample of the keys ahead */
    for (int i = 0; i < 4000; i++) {
        snprintf(user, sizeof(user), "b%d", i);
        RL_CHECK_UINT_EQ(check(l, "g", user, NULL, 1, T0).code, RL_WIRE_ALLOWED);
    }
    rl_limiter_sweep(l, T0 + 5000, 0, 1u << 24);
    left = stats(l).keys;
    /* the keys ahead are forgotten with the others: here each was sampled by some eviction
     * (keys ahead that nothing samples: test_sweep_clock_day_back) */
    ck_assert_msg(left == 0, "%llu of %llu keys left after the sweep", (unsigned long long)left,
                  (unsigned long long)ahead);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/* Sliding logs past their share of the cap are degraded to counters, and still count. */
START_TEST(test_log_cap)
{
    struct rl_conf *c = conf_from("[service g]\nlimit = sliding_window_log 100000 per 1h\n");
    struct rl_limiter *l = limiter_from(c, 256 * 1024);
    struct rl_wire_check_reply r;
    char user[32];
    uint64_t allowed = 0;

    /* 8 users, one entry per ms each: far more log than 128 KiB. */
    for (uint64_t t = 0; t < 20000; t++) {
        snprintf(user, sizeof(user), "g%llu", (unsigned long long)(t % 8));
        r = check(l, "g", user, NULL, 1, T0 + t);
        allowed += r.code == RL_WIRE_ALLOWED;
    }
    ck_assert_uint_eq(allowed, 20000);
    struct rl_limiter_stats s = stats(l);
    ck_assert_uint_gt(s.log_degraded, 0);
    ck_assert_uint_le(s.memory_bytes, 256 * 1024);
    /* Degraded keys still count, exactly within one window: each user has used 2500. */
    r = check(l, "g", "g3", NULL, 0, T0 + 20000);
    ck_assert_uint_eq(r.remaining, 100000 - 2500);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/*
 * A flood of distinct users of one service, far past the memory cap, neither lifts the limit
 * of a user of another service already limited, nor lets a new user of the flooded service
 * pass its limit (a sliding log with no memory left is degraded, not waved through). Per
 * algorithm.
 */
static const char *const flood_algos[] = {"fixed_window",           "sliding_window_log",
                                          "sliding_window_counter", "token_bucket",
                                          "gcra",                   "leaky_bucket"};

START_TEST(test_flood_isolation)
{
    char text[512];
    char user[32];
    struct rl_wire_check_reply r;
    uint64_t now = T0;
    int allowed = 0;

    snprintf(text, sizeof(text),
             "[service victim]\nlimit = %s 5 per 1h\n[service flood]\nlimit = %s 100 per 1h\n",
             flood_algos[_i], flood_algos[_i]);
    struct rl_conf *c = conf_from(text);
    struct rl_limiter *l = limiter_from(c, 1024 * 1024);

    for (int i = 0; i < 5; i++) {
        r = check(l, "victim", "v", NULL, 1, now);
        RL_CHECK(r.code == RL_WIRE_ALLOWED || r.code == RL_WIRE_QUEUED, "%s: victim request %d",
                 flood_algos[_i], i);
    }
    r = check(l, "victim", "v", NULL, 1, now);
    ck_assert_int_eq(r.code, RL_WIRE_LIMITED);
    /* 200,000 users of 33+ bytes of state each: several times the 1 MiB cap. Some flood
     * users exhaust their own limit, so the flood holds keys in force too. */
    for (int i = 0; i < 200000; i++) {
        snprintf(user, sizeof(user), "f%d", i);
        check(l, "flood", user, NULL, i % 7 == 0 ? 100 : 1, now + (uint64_t)i / 1000);
    }
    struct rl_limiter_stats st = stats(l);
    ck_assert_uint_gt(st.evicted, 10000);
    now += 200;
    r = check(l, "victim", "v", NULL, 1, now);
    RL_CHECK(r.code == RL_WIRE_LIMITED, "%s: the flood lifted victim's limit (code %u)",
             flood_algos[_i], r.code);
    /* A new user of the flooded service is judged against its limit. */
    for (int i = 0; i < 150; i++) {
        r = check(l, "flood", "newcomer", NULL, 1, now);
        allowed += r.code == RL_WIRE_ALLOWED || r.code == RL_WIRE_QUEUED;
    }
    RL_CHECK(allowed == 100, "%s: %d of 150 allowed on 100/h", flood_algos[_i], allowed);
    st = stats(l);
    ck_assert_uint_le(st.memory_bytes, 1024 * 1024);
    /* Every eviction came from the flooded service. */
    struct rl_limiter_service_stats vs, fs;
    size_t vi = strcmp(rl_limiter_service_stats(l, 0, &vs), "victim") == 0 ? 0 : 1;

    rl_limiter_service_stats(l, vi, &vs);
    rl_limiter_service_stats(l, 1 - vi, &fs);
    ck_assert_uint_eq(vs.evicted, 0);
    ck_assert_uint_eq(vs.keys, 1);
    ck_assert_uint_eq(fs.evicted, st.evicted);
    ck_assert_uint_eq(st.evicted_under_share, 0);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/*
 * Ownership epochs (rl_limiter_check_epoch): a state written under another epoch is judged
 * as absent, and is overwritten afresh under the new epoch once a request there is allowed;
 * under an unchanged epoch it keeps counting. Going back to an earlier epoch number is a new
 * tenure too: what counts is "the epoch the state was written under", not "a newer one".
 */
START_TEST(test_epoch_fresh_tenure)
{
    struct rl_conf *c = conf_from("[service e]\nlimit = fixed_window 5 per 1h\n");
    struct rl_limiter *l = limiter_from(c, 0);
    struct rl_wire_check_reply r;

    for (uint64_t i = 0; i < 5; i++) {
        r = check_ep(l, "e", "u", NULL, 1, T0 + i, 1);
        assert_reply(&r, RL_WIRE_ALLOWED, 5, 4 - i, 3600000 - i, 0);
    }
    r = check_ep(l, "e", "u", NULL, 1, T0 + 5, 1);
    assert_reply(&r, RL_WIRE_LIMITED, 5, 0, 3600000 - 5, 3600000 - 5);

    /* Epoch 2: a new tenure, full allowance at once (a peek sees it, then a request). */
    r = check_ep(l, "e", "u", NULL, 0, T0 + 10, 2);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 5, 0, 0);
    r = check_ep(l, "e", "u", NULL, 1, T0 + 10, 2);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 4, 3600000 - 10, 0);
    /* ... and it keeps counting under epoch 2. */
    for (uint64_t i = 0; i < 4; i++) {
        r = check_ep(l, "e", "u", NULL, 1, T0 + 11 + i, 2);
        assert_reply(&r, RL_WIRE_ALLOWED, 5, 3 - i, 3600000 - 11 - i, 0);
    }
    r = check_ep(l, "e", "u", NULL, 1, T0 + 20, 2);
    assert_reply(&r, RL_WIRE_LIMITED, 5, 0, 3600000 - 20, 3600000 - 20);
    /* Overwritten in place: still one key. */
    ck_assert_uint_eq(stats(l).keys, 1);

    /* Back to epoch 1: not the state of the first tenure, a fresh one. */
    r = check_ep(l, "e", "u", NULL, 0, T0 + 30, 1);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 5, 0, 0);
    r = check_ep(l, "e", "u", NULL, 1, T0 + 30, 1);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 4, 3600000 - 30, 0);
    r = check_ep(l, "e", "u", NULL, 1, T0 + 31, 1);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 3, 3600000 - 31, 0);
    /* Epoch 2's count is gone with it, and rl_limiter_check (epoch 0) is another epoch. */
    r = check_ep(l, "e", "u", NULL, 0, T0 + 40, 2);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 5, 0, 0);
    r = check(l, "e", "u", NULL, 0, T0 + 40);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 5, 0, 0);
    r = check_ep(l, "e", "u", NULL, 0, T0 + 40, 1);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 3, 3600000 - 40, 0);
    struct rl_limiter_stats s = stats(l);
    ck_assert_uint_eq(s.keys, 1);
    ck_assert_uint_eq(s.limited, 2);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/* Per algorithm (flood_algos): a user exhausted under epoch 7 is allowed at once under epoch
 * 8 and counts on from there; a user never exhausted keeps counting under epoch 7. */
START_TEST(test_epoch_each_algo)
{
    const char *algo = flood_algos[_i];
    char text[128];
    struct rl_wire_check_reply r;

    snprintf(text, sizeof(text), "[service a]\nlimit = %s 5 per 1h\n", algo);
    struct rl_conf *c = conf_from(text);
    struct rl_limiter *l = limiter_from(c, 0);

    for (uint64_t i = 0; i < 5; i++) {
        r = check_ep(l, "a", "u", NULL, 1, T0, 7);
        RL_CHECK(r.code == RL_WIRE_ALLOWED || r.code == RL_WIRE_QUEUED, "%s: request %d code %u",
                 algo, (int)i, r.code);
        RL_CHECK(r.limit == 5 && r.remaining == 4 - i, "%s: request %d: limit %llu remaining %llu",
                 algo, (int)i, (unsigned long long)r.limit, (unsigned long long)r.remaining);
    }
    r = check_ep(l, "a", "u", NULL, 1, T0, 7);
    RL_CHECK(r.code == RL_WIRE_LIMITED && r.remaining == 0, "%s: 6th: code %u remaining %llu", algo,
             r.code, (unsigned long long)r.remaining);
    /* w uses 2 of 5 under epoch 7. */
    r = check_ep(l, "a", "w", NULL, 1, T0, 7);
    RL_CHECK(r.remaining == 4, "%s: w remaining %llu", algo, (unsigned long long)r.remaining);
    r = check_ep(l, "a", "w", NULL, 1, T0, 7);
    RL_CHECK(r.remaining == 3, "%s: w remaining %llu", algo, (unsigned long long)r.remaining);

    /* Epoch 8: u starts afresh, allowed at once (not even queued behind the old backlog). */
    r = check_ep(l, "a", "u", NULL, 1, T0, 8);
    RL_CHECK(r.code == RL_WIRE_ALLOWED && r.retry_after_ms == 0 && r.limit == 5 && r.remaining == 4,
             "%s: epoch 8: code %u retry %llu limit %llu remaining %llu", algo, r.code,
             (unsigned long long)r.retry_after_ms, (unsigned long long)r.limit,
             (unsigned long long)r.remaining);
    r = check_ep(l, "a", "u", NULL, 1, T0, 8);
    RL_CHECK((r.code == RL_WIRE_ALLOWED || r.code == RL_WIRE_QUEUED) && r.remaining == 3,
             "%s: epoch 8, 2nd: code %u remaining %llu", algo, r.code,
             (unsigned long long)r.remaining);
    for (int i = 0; i < 3; i++) {
        r = check_ep(l, "a", "u", NULL, 0, T0, 8);
        RL_CHECK(r.code == RL_WIRE_ALLOWED && r.remaining == 3, "%s: epoch 8 peek: remaining %llu",
                 algo, (unsigned long long)r.remaining);
    }
    /* w's epoch did not change: no reset, it counts on from 3 to exhaustion. */
    for (uint64_t left = 2; left != UINT64_MAX; left--) {
        r = check_ep(l, "a", "w", NULL, 1, T0, 7);
        RL_CHECK((r.code == RL_WIRE_ALLOWED || r.code == RL_WIRE_QUEUED) && r.remaining == left,
                 "%s: w under epoch 7: code %u remaining %llu, want %llu", algo, r.code,
                 (unsigned long long)r.remaining, (unsigned long long)left);
    }
    r = check_ep(l, "a", "w", NULL, 1, T0, 7);
    RL_CHECK(r.code == RL_WIRE_LIMITED, "%s: w, 6th under epoch 7: code %u", algo, r.code);
    ck_assert_uint_eq(stats(l).keys, 2);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/* A sliding log of an earlier tenure is freed when the key starts afresh, not kept beside the
 * new one (log_bytes would double; LSan would see the leak); requests refused or peeked under
 * the new epoch free nothing. */
START_TEST(test_epoch_log_released)
{
    struct rl_conf *c = conf_from("[service g]\nlimit = sliding_window_log 1000 per 1h\n");
    struct rl_limiter *l = limiter_from(c, 0);
    struct rl_wire_check_reply r;
    struct rl_limiter_stats s1, s2;
    uint64_t lb1;

    ck_assert_uint_eq(svc_stats(l, "g").log_bytes, 0);
    /* One entry per ms: a log of 1000 entries. */
    for (uint64_t t = 0; t < 1000; t++) {
        r = check_ep(l, "g", "u", NULL, 1, T0 + t, 1);
        RL_CHECK(r.code == RL_WIRE_ALLOWED && r.remaining == 999 - t, "tenure 1, request %llu",
                 (unsigned long long)t);
    }
    r = check_ep(l, "g", "u", NULL, 1, T0 + 1000, 1);
    ck_assert_uint_eq(r.code, RL_WIRE_LIMITED);
    s1 = stats(l);
    lb1 = svc_stats(l, "g").log_bytes;
    ck_assert_uint_ge(lb1, 1000 * 8);

    /* Under epoch 2 a peek and a request refused even when fresh free nothing... */
    r = check_ep(l, "g", "u", NULL, 0, T0 + 1000, 2);
    assert_reply(&r, RL_WIRE_ALLOWED, 1000, 1000, 0, 0);
    r = check_ep(l, "g", "u", NULL, 1001, T0 + 1000, 2);
    assert_reply(&r, RL_WIRE_LIMITED, 1000, 1000, 0, RL_WIRE_RETRY_NEVER);
    ck_assert_uint_eq(svc_stats(l, "g").log_bytes, lb1);
    r = check_ep(l, "g", "u", NULL, 0, T0 + 1000, 1);
    ck_assert_uint_eq(r.remaining, 0);

    /* ... the first allowed one frees the old log: a new one of a single entry. */
    r = check_ep(l, "g", "u", NULL, 1, T0 + 1000, 2);
    assert_reply(&r, RL_WIRE_ALLOWED, 1000, 999, 3600000, 0);
    ck_assert_uint_lt(svc_stats(l, "g").log_bytes, lb1 / 8);
    for (uint64_t t = 1; t < 1000; t++) {
        r = check_ep(l, "g", "u", NULL, 1, T0 + 1000 + t, 2);
        RL_CHECK(r.code == RL_WIRE_ALLOWED && r.remaining == 999 - t, "tenure 2, request %llu",
                 (unsigned long long)t);
    }
    r = check_ep(l, "g", "u", NULL, 1, T0 + 2000, 2);
    ck_assert_uint_eq(r.code, RL_WIRE_LIMITED);
    /* Both tenures' 2000 entries are within the hour: had the first log been kept, twice. */
    s2 = stats(l);
    ck_assert_uint_le(svc_stats(l, "g").log_bytes, lb1 + 64);
    ck_assert_uint_le(s2.memory_bytes, s1.memory_bytes + 64);
    ck_assert_uint_eq(s2.keys, 1);
    ck_assert_uint_eq(s2.log_degraded, 0);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/* A request refused under a new epoch (cost past a tier's capacity: refused even when fresh)
 * consumes nothing, so it does not start the key afresh either: the old tenure's counts,
 * of the refusing tier and of a tier that allowed, are still there under the old epoch. */
START_TEST(test_epoch_refused_keeps_old)
{
    struct rl_conf *c = conf_from("[service e]\nlimit = fixed_window 5 per 1h\n"
                                  "[service m]\n"
                                  "limit = fixed_window 4 per 1h\n"
                                  "limit = fixed_window 3 per 1m\n");
    struct rl_limiter *l = limiter_from(c, 0);
    struct rl_wire_check_reply r;

    r = check_ep(l, "e", "u", NULL, 3, T0, 1);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 2, 3600000, 0);
    /* Epoch 2, cost 6 > 5: judged fresh (remaining 5), never allowed. */
    r = check_ep(l, "e", "u", NULL, 6, T0 + 10, 2);
    assert_reply(&r, RL_WIRE_LIMITED, 5, 5, 0, RL_WIRE_RETRY_NEVER);
    r = check_ep(l, "e", "u", NULL, 0, T0 + 10, 2);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 5, 0, 0);
    /* Epoch 1 still sees its 3. */
    r = check_ep(l, "e", "u", NULL, 0, T0 + 20, 1);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 2, 3600000 - 20, 0);
    r = check_ep(l, "e", "u", NULL, 2, T0 + 20, 1);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 0, 3600000 - 20, 0);
    r = check_ep(l, "e", "u", NULL, 1, T0 + 20, 1);
    assert_reply(&r, RL_WIRE_LIMITED, 5, 0, 3600000 - 20, 3600000 - 20);

    /* Two tiers: 4/h holds 1, 3/min holds 0 after epoch 1. */
    r = check_ep(l, "m", "u", NULL, 3, T0, 1);
    assert_reply(&r, RL_WIRE_ALLOWED, 3, 0, 60000, 0);
    /* Epoch 2, cost 4: the hour tier (fresh) allows, the minute tier refuses for ever. */
    r = check_ep(l, "m", "u", NULL, 4, T0 + 10, 2);
    assert_reply(&r, RL_WIRE_LIMITED, 3, 3, 0, RL_WIRE_RETRY_NEVER);
    /* A minute later under epoch 1: the minute tier is in a new window, the hour tier still
     * holds only 1 (the allowing tier was not started afresh by the refused request). */
    r = check_ep(l, "m", "u", NULL, 0, T0 + 60000, 1);
    assert_reply(&r, RL_WIRE_ALLOWED, 4, 1, 3600000 - 60000, 0);
    r = check_ep(l, "m", "u", NULL, 2, T0 + 60000, 1);
    assert_reply(&r, RL_WIRE_LIMITED, 4, 1, 3600000 - 60000, 3600000 - 60000);
    ck_assert_uint_eq(stats(l).keys, 3);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/* Every tier of a rule starts afresh together under a new epoch, including when one tier's
 * key was forgotten meanwhile and is inserted again (an insert before the stale tier). */
START_TEST(test_epoch_multi_tier)
{
    struct rl_conf *c = conf_from("[service m]\n"
                                  "limit = fixed_window 4 per 1m\n"
                                  "limit = fixed_window 6 per 1h\n");
    struct rl_limiter *l = limiter_from(c, 0);
    struct rl_wire_check_reply r;

    /* Epoch 1: both tiers used up (the minute tier then the hour one). */
    r = check_ep(l, "m", "u", NULL, 4, T0, 1);
    assert_reply(&r, RL_WIRE_ALLOWED, 4, 0, 60000, 0);
    r = check_ep(l, "m", "u", NULL, 2, T0 + 60000, 1);
    assert_reply(&r, RL_WIRE_ALLOWED, 6, 0, 3540000, 0);
    r = check_ep(l, "m", "u", NULL, 1, T0 + 60000, 1);
    assert_reply(&r, RL_WIRE_LIMITED, 6, 0, 3540000, 3540000);

    /* Epoch 2: both fresh (4 and 6; had either kept its count, remaining would be 2 or 0). */
    r = check_ep(l, "m", "u", NULL, 0, T0 + 60000, 2);
    assert_reply(&r, RL_WIRE_ALLOWED, 4, 4, 0, 0);
    r = check_ep(l, "m", "u", NULL, 4, T0 + 60000, 2);
    assert_reply(&r, RL_WIRE_ALLOWED, 4, 0, 60000, 0);
    r = check_ep(l, "m", "u", NULL, 1, T0 + 60000, 2);
    assert_reply(&r, RL_WIRE_LIMITED, 4, 0, 60000, 60000);
    /* Both count on under epoch 2: the hour tier holds 6 - 4 = 2. */
    r = check_ep(l, "m", "u", NULL, 2, T0 + 120000, 2);
    assert_reply(&r, RL_WIRE_ALLOWED, 6, 0, 3480000, 0);
    r = check_ep(l, "m", "u", NULL, 1, T0 + 120000, 2);
    assert_reply(&r, RL_WIRE_LIMITED, 6, 0, 3480000, 3480000);
    ck_assert_uint_eq(stats(l).keys, 2);

    /* The minute tier's key is full and forgotten; the hour tier's stays (used up). */
    rl_limiter_sweep(l, T0 + 180000, 0, 1u << 20);
    ck_assert_uint_eq(stats(l).keys, 1);
    /* Epoch 3: the minute tier is inserted, then the hour tier is found stale and restarts. */
    r = check_ep(l, "m", "u", NULL, 1, T0 + 180000, 3);
    assert_reply(&r, RL_WIRE_ALLOWED, 4, 3, 60000, 0);
    ck_assert_uint_eq(stats(l).keys, 2);
    r = check_ep(l, "m", "u", NULL, 4, T0 + 240000, 3);
    assert_reply(&r, RL_WIRE_ALLOWED, 4, 0, 60000, 0);
    r = check_ep(l, "m", "u", NULL, 1, T0 + 300000, 3);
    assert_reply(&r, RL_WIRE_ALLOWED, 6, 0, 3300000, 0);
    r = check_ep(l, "m", "u", NULL, 1, T0 + 300000, 3);
    assert_reply(&r, RL_WIRE_LIMITED, 6, 0, 3300000, 3300000);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/* The tenant check_inline's CHECKs carry (0: none). */
static uint32_t inline_tenant;

/* A CHECK with an inline limit (algo by its cluster.conf name; burst 0: nil). */
static int
check_inline(struct rl_limiter *l, const char *service, const char *user, const char *algo,
             uint32_t limit, uint64_t window, uint32_t burst, uint32_t cost, uint64_t now,
             struct rl_wire_check_reply *rep)
{
    struct rl_wire_req req = req_for(service, user, NULL, cost);
    enum rl_algo a;

    RL_CHECK_INT_EQ(rl_algo_parse(algo, &a), 0);
    req.limit.set = true;
    req.limit.algo = (uint8_t)a;
    req.limit.limit = limit;
    req.limit.window_ms = window;
    req.limit.has_burst = burst != 0;
    req.limit.burst = burst != 0 ? burst : limit;
    req.tenant = inline_tenant;
    return rl_limiter_check(l, &req, now, rep);
}

/* Every algorithm judges an inline limit exactly as the same configured tier. */
START_TEST(test_inline_same_as_configured)
{
    static const char *const algos[] = {"fixed_window",   "sliding_window_log",
                                        "sliding_window_counter", "token_bucket",
                                        "gcra",           "leaky_bucket"};
    char text[4096] = "";
    size_t n = 0;

    for (int i = 0; i < 6; i++) {
        bool b = i >= 3;

        n += (size_t)snprintf(text + n, sizeof(text) - n, "[service s%d]\nlimit = %s 5 per 1s%s\n",
                              i, algos[i], b ? " burst 3" : "");
    }
    struct rl_conf *c = conf_from(text);
    struct rl_limiter *l = limiter_from(c, 0);

    for (int i = 0; i < 6; i++) {
        char svc[8];
        bool b = i >= 3;
        unsigned allowed = 0;

        snprintf(svc, sizeof(svc), "s%d", i);
        for (int k = 0; k < 40; k++) {
            uint64_t now = T0 + (uint64_t)k * 70;
            struct rl_wire_check_reply want = check(l, svc, "alice", NULL, 1, now);
            struct rl_wire_check_reply got;

            RL_CHECK_INT_EQ(check_inline(l, "free", "alice", algos[i], 5, 1000, b ? 3 : 0, 1, now,
                                         &got),
                            0);
            RL_CHECK(memcmp(&want, &got, sizeof(got)) == 0,
                     "%s request %d: inline [%u %llu %llu %llu %llu], configured [%u %llu]",
                     algos[i], k, got.code, (unsigned long long)got.limit,
                     (unsigned long long)got.remaining, (unsigned long long)got.reset_ms,
                     (unsigned long long)got.retry_after_ms, want.code,
                     (unsigned long long)want.remaining);
            allowed += got.code == RL_WIRE_ALLOWED;
        }
        RL_CHECK(allowed > 0 && allowed < 40, "%s allowed %u of 40", algos[i], allowed);
    }
    /* fixed_window at its boundary: 5 in the window, the 6th refused, the next window free. */
    for (int k = 0; k < 5; k++) {
        struct rl_wire_check_reply r;

        RL_CHECK_INT_EQ(check_inline(l, "edge", "bob", "fixed_window", 5, 1000, 0, 1, T0 + 10, &r),
                        0);
        assert_reply(&r, RL_WIRE_ALLOWED, 5, 4 - (uint64_t)k, 990, 0);
    }
    {
        struct rl_wire_check_reply r;

        RL_CHECK_INT_EQ(check_inline(l, "edge", "bob", "fixed_window", 5, 1000, 0, 1, T0 + 999, &r),
                        0);
        assert_reply(&r, RL_WIRE_LIMITED, 5, 0, 1, 1);
        RL_CHECK_INT_EQ(check_inline(l, "edge", "bob", "fixed_window", 5, 1000, 0, 1, T0 + 1000,
                                     &r),
                        0);
        assert_reply(&r, RL_WIRE_ALLOWED, 5, 4, 1000, 0);
    }
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/* Two inline limits on one user, and a configured rule, never share a counter; a service with
 * configured rules refuses inline limits. */
START_TEST(test_inline_separate)
{
    struct rl_conf *c = conf_from("[service api /pay]\nlimit = fixed_window 2 per 1s\n");
    struct rl_limiter *l = limiter_from(c, 0);
    struct rl_wire_check_reply r;
    struct rl_limiter_stats st;

    for (int k = 0; k < 3; k++) {
        RL_CHECK_INT_EQ(check_inline(l, "x", "u", "fixed_window", 3, 1000, 0, 1, T0, &r), 0);
        RL_CHECK_UINT_EQ(r.code, RL_WIRE_ALLOWED);
    }
    RL_CHECK_INT_EQ(check_inline(l, "x", "u", "fixed_window", 3, 1000, 0, 1, T0, &r), 0);
    RL_CHECK_UINT_EQ(r.code, RL_WIRE_LIMITED);
    /* Another limit (window differs) for the same user: a fresh count. */
    RL_CHECK_INT_EQ(check_inline(l, "x", "u", "fixed_window", 3, 2000, 0, 1, T0, &r), 0);
    assert_reply(&r, RL_WIRE_ALLOWED, 3, 2, 2000, 0);
    /* The same limit for another service or user: fresh too. */
    RL_CHECK_INT_EQ(check_inline(l, "y", "u", "fixed_window", 3, 1000, 0, 1, T0, &r), 0);
    assert_reply(&r, RL_WIRE_ALLOWED, 3, 2, 1000, 0);
    RL_CHECK_INT_EQ(check_inline(l, "x", "v", "fixed_window", 3, 1000, 0, 1, T0, &r), 0);
    assert_reply(&r, RL_WIRE_ALLOWED, 3, 2, 1000, 0);
    /* "api" has a rule (for one endpoint only): inline refused, nothing counted. */
    st = stats(l);
    RL_CHECK_INT_EQ(check_inline(l, "api", "u", "fixed_window", 100, 1000, 0, 1, T0, &r), -EPERM);
    RL_CHECK_UINT_EQ(stats(l).checks, st.checks);
    r = check(l, "api", "u", "/pay", 1, T0);
    assert_reply(&r, RL_WIRE_ALLOWED, 2, 1, 1000, 0);
    /* A service named like a prefix of a configured one is not it. */
    RL_CHECK_INT_EQ(check_inline(l, "ap", "u", "fixed_window", 1, 1000, 0, 1, T0, &r), 0);
    st = stats(l);
    RL_CHECK_UINT_EQ(st.keys, 6);
    RL_CHECK_UINT_EQ(st.checks, 9);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/* A year's window (Envoy's `unit: year`, 365 days, past 32 bits of ms): an inline limit
 * counts to its limit and refuses past it until the year's window ends, like the same
 * configured tier; its window's high bits keep it apart from a 32-bit window of the same low
 * bits. */
START_TEST(test_inline_year)
{
    const uint64_t Y = 365ull * 86400000; /* 31536000000 */
    struct rl_conf *c = conf_from("[service cfg]\nlimit = fixed_window 3 per 365d\n"
                                  "[service cfs]\nlimit = sliding_window_counter 3 per 365d\n");
    struct rl_limiter *l = limiter_from(c, 0);
    struct rl_wire_check_reply r, want;
    const uint64_t now = T0 / Y * Y + 12345; /* early in a year's window */
    const uint64_t end = now - 12345 + Y;

    for (int k = 0; k < 3; k++) {
        RL_CHECK_INT_EQ(check_inline(l, "env", "u", "fixed_window", 3, Y, 0, 1, now + k, &r), 0);
        want = check(l, "cfg", "u", NULL, 1, now + k);
        assert_reply(&r, RL_WIRE_ALLOWED, 3, 2 - (uint64_t)k, end - now - k, 0);
        RL_CHECK(memcmp(&want, &r, sizeof(r)) == 0, "request %d: inline differs from configured",
                 k);
    }
    /* over the limit: refused, with the reset at the end of the year's window (past 2^32 ms,
     * so the retry is the longest finite wait a reply can say) */
    RL_CHECK_INT_EQ(check_inline(l, "env", "u", "fixed_window", 3, Y, 0, 1, now + 10, &r), 0);
    RL_CHECK_UINT_EQ(r.code, RL_WIRE_LIMITED);
    RL_CHECK_UINT_EQ(r.remaining, 0);
    RL_CHECK_UINT_EQ(r.reset_ms, end - now - 10);
    RL_CHECK_UINT_EQ(r.retry_after_ms, 4294967294u);
    want = check(l, "cfg", "u", NULL, 1, now + 10);
    RL_CHECK_UINT_EQ(want.code, RL_WIRE_LIMITED);
    /* 49.7 days later it is still refused: the count held for the whole year */
    RL_CHECK_INT_EQ(check_inline(l, "env", "u", "fixed_window", 3, Y, 0, 1, now + 4294967296ull,
                                 &r),
                    0);
    RL_CHECK_UINT_EQ(r.code, RL_WIRE_LIMITED);
    RL_CHECK_UINT_EQ(r.reset_ms, end - now - 4294967296ull);
    /* the next year's window: allowed again */
    RL_CHECK_INT_EQ(check_inline(l, "env", "u", "fixed_window", 3, Y, 0, 1, end, &r), 0);
    assert_reply(&r, RL_WIRE_ALLOWED, 3, 2, Y, 0);
    /* sliding_window_counter over a year, inline and configured alike */
    for (int k = 0; k < 4; k++) {
        RL_CHECK_INT_EQ(check_inline(l, "env", "s", "sliding_window_counter", 3, Y, 0, 1, now + k,
                                     &r),
                        0);
        want = check(l, "cfs", "s", NULL, 1, now + k);
        RL_CHECK_UINT_EQ(r.code, k < 3 ? RL_WIRE_ALLOWED : RL_WIRE_LIMITED);
        RL_CHECK(memcmp(&want, &r, sizeof(r)) == 0, "swc request %d differs", k);
    }
    /* 2^32 + 1000 ms is another limit than 1000 ms: its own count */
    for (int k = 0; k < 3; k++) {
        RL_CHECK_INT_EQ(check_inline(l, "env", "w", "fixed_window", 3, 1000, 0, 1, T0, &r), 0);
    }
    RL_CHECK_INT_EQ(check_inline(l, "env", "w", "fixed_window", 3, 1000, 0, 1, T0, &r), 0);
    RL_CHECK_UINT_EQ(r.code, RL_WIRE_LIMITED);
    RL_CHECK_INT_EQ(check_inline(l, "env", "w", "fixed_window", 3, 4294968296ull, 0, 1, T0, &r),
                    0);
    RL_CHECK_UINT_EQ(r.code, RL_WIRE_ALLOWED);
    RL_CHECK_UINT_EQ(r.remaining, 2);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/* At most RL_INLTAB_CLIENTS_MAX distinct inline limits with keys; a limit whose keys are
 * gone frees its place. */
START_TEST(test_inline_bound)
{
    struct rl_conf *c = conf_from("[service api]\nlimit = fixed_window 2 per 1s\n");
    struct rl_limiter *l = limiter_from(c, 64u << 20);
    struct rl_wire_check_reply r;

    /* It takes RL_INLTAB_CLIENTS_MAX / RL_INLTAB_TENANT_MAX tenants at their quota to fill
     * the clients' part. */
    for (uint32_t k = 0; k < RL_INLTAB_CLIENTS_MAX; k++) {
        inline_tenant = k / RL_INLTAB_TENANT_MAX;
        RL_CHECK_INT_EQ(check_inline(l, "x", "u", "fixed_window", 10 + k, 1000, 0, 1, T0, &r), 0);
        RL_CHECK_UINT_EQ(r.code, RL_WIRE_ALLOWED);
    }
    inline_tenant = 99;
    RL_CHECK_UINT_EQ(stats(l).keys, RL_INLTAB_CLIENTS_MAX);
    /* One more distinct limit: refused; a known one still answers. */
    RL_CHECK_INT_EQ(check_inline(l, "x", "u", "fixed_window", 5, 1000, 0, 1, T0, &r), -ENOSPC);
    inline_tenant = 0;
    RL_CHECK_INT_EQ(check_inline(l, "x", "w", "fixed_window", 10, 1000, 0, 1, T0, &r), 0);
    RL_CHECK_UINT_EQ(r.code, RL_WIRE_ALLOWED);
    inline_tenant = 99;
    /* A peek keeps no key, so it cannot free a place either. */
    RL_CHECK_INT_EQ(check_inline(l, "x", "u", "fixed_window", 6, 1000, 0, 0, T0, &r), -ENOSPC);
    /* Once the window has passed, the sweep forgets the keys and their limits can go. */
    rl_limiter_sweep(l, T0 + 5000, 0, 1u << 24);
    RL_CHECK_UINT_EQ(stats(l).keys, 0);
    RL_CHECK_INT_EQ(check_inline(l, "x", "u", "fixed_window", 5, 1000, 0, 1, T0 + 5000, &r), 0);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 4, 1000, 0);
    inline_tenant = 0;
    /* Configured rules still work. */
    r = check(l, "api", "u", NULL, 1, T0 + 5000);
    RL_CHECK_UINT_EQ(r.code, RL_WIRE_ALLOWED);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/*
 * Clients' inline limits at every tenant's quota fill only their part of the table: a
 * configured scope = global service's scaled tiers, interned in the same table, still find a
 * place (RL_INLTAB_RESERVE), so a flood of inline limits cannot leave it without an answer.
 */
START_TEST(test_inline_flood_leaves_room_for_global_tiers)
{
    struct rl_conf *c = conf_from("[cluster]\nregion = east\nregions = east:1 west:1\n"
                                  "[service g]\nscope = global\nlimit = fixed_window 10 per 1s\n");
    struct rl_limiter *l = limiter_from(c, 256u << 20);
    struct rl_wire_check_reply r;
    struct rl_wire_req req = req_for("g", "alice", NULL, 1);
    uint32_t held = 0;
    int rc;

    /* sixteen tenants at their quota: 65,536 limits asked for */
    for (uint32_t k = 0; k < RL_INLTAB_MAX; k++) {
        inline_tenant = k / RL_INLTAB_TENANT_MAX + 1;
        rc = check_inline(l, "x", "u", "fixed_window", 10 + k, 3600000, 0, 1, T0, &r);
        RL_CHECK(rc == 0 || rc == -ENOSPC, "rc %d", rc);
        held += rc == 0;
    }
    inline_tenant = 0;
    RL_CHECK_UINT_EQ(held, RL_INLTAB_CLIENTS_MAX);
    /* the global service, at its slice (5 of 10), for several users and slices */
    RL_CHECK_INT_EQ(rl_limiter_check(l, &req, T0, &r), 0);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 4, 1000, 0);
    for (uint32_t k = 0; k < 4; k++) {
        r = check(l, "g", k % 2 ? "bob" : "carol", NULL, 1, T0 + k);
        RL_CHECK_UINT_EQ(r.code, RL_WIRE_ALLOWED);
    }
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/*
 * A tenant holds at most RL_INLTAB_TENANT_MAX inline limits: past its quota its new limits
 * are refused (-EDQUOT, counted), its known ones still answer, and another tenant still gets
 * new ones. Limits of its own whose keys are gone are given back to it first.
 */
START_TEST(test_inline_tenant_quota)
{
    struct rl_conf *c = conf_from("[service api]\nlimit = fixed_window 2 per 1s\n");
    struct rl_limiter *l = limiter_from(c, 64u << 20);
    struct rl_wire_check_reply r;

    inline_tenant = 7;
    for (uint32_t k = 0; k < RL_INLTAB_TENANT_MAX; k++) {
        RL_CHECK_INT_EQ(check_inline(l, "x", "u", "gcra", 10 + k, 60000, 0, 1, T0, &r), 0);
    }
    RL_CHECK_INT_EQ(check_inline(l, "x", "u", "gcra", 5, 60000, 0, 1, T0, &r), -EDQUOT);
    RL_CHECK_UINT_EQ(stats(l).inline_over_quota, 1);
    RL_CHECK_INT_EQ(check_inline(l, "x", "v", "gcra", 10, 60000, 0, 1, T0, &r), 0);
    RL_CHECK_UINT_EQ(r.code, RL_WIRE_ALLOWED);
    /* Another tenant: the same four parts are a limit of its own, and new ones are taken. */
    inline_tenant = 8;
    RL_CHECK_INT_EQ(check_inline(l, "x", "w", "gcra", 10, 60000, 0, 1, T0, &r), 0);
    RL_CHECK_INT_EQ(check_inline(l, "x", "w", "gcra", 5, 60000, 0, 1, T0, &r), 0);
    /* ... and counts the same counter as tenant 7 for the same key: tenants share counters. */
    inline_tenant = 7;
    RL_CHECK_INT_EQ(check_inline(l, "x", "w", "gcra", 10, 60000, 0, 0, T0, &r), 0);
    RL_CHECK_UINT_EQ(r.remaining, 9);
    /* Once tenant 7's keys are forgotten, its limits without keys make room for its new one. */
    rl_limiter_sweep(l, T0 + 3600000, 0, 1u << 24);
    RL_CHECK_INT_EQ(check_inline(l, "x", "u", "gcra", 5, 60000, 0, 1, T0 + 3600000, &r), 0);
    RL_CHECK_UINT_EQ(r.code, RL_WIRE_ALLOWED);
    inline_tenant = 0;
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/*
 * Inline keys are shared by tenant as configured keys by service: a flood of distinct keys
 * of one tenant, far past the memory cap, evicts its own keys, never the in-force counter of
 * another tenant (whatever limit either uses), nor lets a new user of the flood's limit pass.
 */
START_TEST(test_inline_tenant_flood)
{
    struct rl_conf *c = conf_from("[service api]\nlimit = fixed_window 2 per 1s\n");
    struct rl_limiter *l = limiter_from(c, 1024 * 1024);
    struct rl_wire_check_reply r;
    char user[32];
    int allowed = 0;

    inline_tenant = 1; /* the victim: 5 per hour, used up */
    for (int i = 0; i < 5; i++) {
        RL_CHECK_INT_EQ(check_inline(l, "grpc", "alice", "fixed_window", 5, 3600000, 0, 1, T0, &r),
                        0);
        RL_CHECK_UINT_EQ(r.code, RL_WIRE_ALLOWED);
    }
    RL_CHECK_INT_EQ(check_inline(l, "grpc", "alice", "fixed_window", 5, 3600000, 0, 1, T0, &r), 0);
    RL_CHECK_UINT_EQ(r.code, RL_WIRE_LIMITED);
    inline_tenant = 2; /* the flood: 200,000 keys, some of them in force */
    for (int i = 0; i < 200000; i++) {
        snprintf(user, sizeof(user), "f%d", i);
        check_inline(l, "resp", user, "gcra", 100, 3600000, 0, i % 7 == 0 ? 100 : 1,
                     T0 + (uint64_t)i / 1000, &r);
    }
    struct rl_limiter_stats st = stats(l);
    ck_assert_uint_gt(st.evicted, 10000);
    ck_assert_uint_eq(st.evicted_under_share, 0);
    inline_tenant = 1;
    RL_CHECK_INT_EQ(check_inline(l, "grpc", "alice", "fixed_window", 5, 3600000, 0, 1, T0 + 300,
                                 &r), 0);
    RL_CHECK(r.code == RL_WIRE_LIMITED, "the flood lifted another tenant's limit (code %u)",
             r.code);
    inline_tenant = 2;
    for (int i = 0; i < 150; i++) {
        check_inline(l, "resp", "newcomer", "gcra", 100, 3600000, 0, 1, T0 + 300, &r);
        allowed += r.code == RL_WIRE_ALLOWED;
    }
    RL_CHECK(allowed == 100, "%d of 150 allowed on 100/h", allowed);
    inline_tenant = 0;
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/* The tenant map (tenant.h) against a plain array: random adds and removals (a record goes
 * when it holds nothing), every id found exactly when present, over many index resizes and
 * backward shifts. */
START_TEST(test_tenants_map)
{
    enum { IDS = 3000 };
    struct rl_tenants *ts;
    static bool present[IDS];
    uint64_t x = 88172645463325252ull;
    size_t n = 0;

    ck_assert_int_eq(rl_tenants_create(&ts), 0);
    memset(present, 0, sizeof(present));
    for (int step = 0; step < 200000; step++) {
        uint32_t id;
        struct rl_tenant *t;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        id = (uint32_t)(x % IDS) * 2654435761u; /* spread, colliding homes too */
        t = rl_tenants_find(ts, id);
        RL_CHECK((t != NULL) == present[x % IDS], "step %d: id %u found %d", step, id, t != NULL);
        if (t == NULL) {
            t = rl_tenants_add(ts, id);
            ck_assert_ptr_nonnull(t);
            ck_assert_uint_eq(t->id, id);
            t->limits = 1;
            present[x % IDS] = true;
            n++;
        } else {
            ck_assert_uint_eq(t->id, id);
            t->limits = 0;
            rl_tenants_settle(ts, t);
            present[x % IDS] = false;
            n--;
        }
        ck_assert_uint_eq(rl_tenants_count(ts), n);
    }
    for (uint32_t i = 0; i < IDS; i++) {
        struct rl_tenant *t = rl_tenants_find(ts, i * 2654435761u);

        ck_assert_int_eq(t != NULL, present[i]);
    }
    rl_tenants_reset_holdings(ts);
    ck_assert_uint_eq(rl_tenants_count(ts), n); /* they still hold a limit each */
    rl_tenants_destroy(ts);
}
END_TEST

/* A change of the rules renumbers configured tiers but keeps inline counters. */
START_TEST(test_inline_kept_by_rules_change)
{
    struct rl_conf *c = conf_from("[service api]\nlimit = fixed_window 2 per 1m\n");
    struct rl_limiter *l = limiter_from(c, 0);
    struct rl_conf *fresh = NULL;
    struct rl_limiter_reload res;
    struct rl_wire_check_reply r;
    char err[256] = "";

    for (int k = 0; k < 3; k++) {
        RL_CHECK_INT_EQ(check_inline(l, "x", "u", "gcra", 4, 60000, 4, 1, T0, &r), 0);
    }
    RL_CHECK_INT_EQ(check_inline(l, "x", "u", "token_bucket", 4, 60000, 0, 1, T0, &r), 0);
    RL_CHECK_INT_EQ(rl_conf_parse_rules("rules.conf",
                                        "[service a]\nlimit = gcra 1 per 1s\nlimit = gcra 2 per 1s\n"
                                        "[service b]\nlimit = fixed_window 9 per 1s\n"
                                        "[service api]\nlimit = fixed_window 3 per 1m\n",
                                        &fresh, err, sizeof(err)),
                    0);
    RL_CHECK_INT_EQ(rl_conf_swap_rules(c, fresh, NULL, 0), 0);
    RL_CHECK_INT_EQ(rl_limiter_set_rules(l, c, &res), 0);
    RL_CHECK_UINT_EQ(res.keys_kept, 2);
    RL_CHECK_UINT_EQ(stats(l).keys, 2);
    /* gcra 4 per 1m burst 4: 3 used, so one left, then refused. */
    RL_CHECK_INT_EQ(check_inline(l, "x", "u", "gcra", 4, 60000, 4, 1, T0 + 1, &r), 0);
    RL_CHECK_UINT_EQ(r.code, RL_WIRE_ALLOWED);
    RL_CHECK_INT_EQ(check_inline(l, "x", "u", "gcra", 4, 60000, 4, 1, T0 + 2, &r), 0);
    RL_CHECK_UINT_EQ(r.code, RL_WIRE_LIMITED);
    RL_CHECK_INT_EQ(check_inline(l, "x", "u", "token_bucket", 4, 60000, 0, 1, T0 + 2, &r), 0);
    RL_CHECK_UINT_EQ(r.code, RL_WIRE_ALLOWED);
    RL_CHECK_UINT_EQ(r.remaining, 2);
    /* A service that gained rules refuses inline from now on. */
    RL_CHECK_INT_EQ(check_inline(l, "b", "u", "gcra", 4, 60000, 4, 1, T0, &r), -EPERM);
    rl_limiter_destroy(l);
    rl_conf_destroy(fresh);
    rl_conf_destroy(c);
}
END_TEST

/* Regions (docs/REGIONS.md): a global service is judged at its slice, for every algorithm;
 * what a key consumed carries over a change of slice, up or down; a region-scoped service
 * and a config without regions are untouched. */
static const char *const global_limits[] = {
    "fixed_window 100 per 1h",        "sliding_window_log 100 per 1h",
    "sliding_window_counter 100 per 1h", "token_bucket 100 per 1h burst 100",
    "gcra 100 per 1h burst 100",      "leaky_bucket 100 per 1h burst 100",
};

static struct rl_slices *
slices_from(const char *text)
{
    struct rl_slices *s = NULL;
    char err[256] = "";

    RL_CHECK(rl_slices_parse(text, strlen(text), &s, err, sizeof(err)) == 0, "%s", err);
    return s;
}

START_TEST(test_global_slices)
{
    char text[1024];
    struct rl_conf *c;
    struct rl_limiter *l;
    struct rl_slices *s1, *s2;
    struct rl_wire_check_reply rep;
    const uint64_t now = 1700000000000ull;

    snprintf(text, sizeof(text),
             "[cluster]\nregion = east\nregions = east:1 west:3\n"
             "[service g]\nscope = global\nlimit = %s\n"
             "[service r]\nlimit = %s\n",
             global_limits[_i], global_limits[_i]);
    c = conf_from(text);
    ck_assert_uint_eq(rl_conf_region_slice(c), 250);
    l = limiter_from(c, 0);
    rep = check(l, "g", "u1", NULL, 0, now);
    ck_assert_uint_eq(rep.limit, 25);
    rep = check(l, "r", "u1", NULL, 0, now);
    ck_assert_uint_eq(rep.limit, 100);
    for (int i = 0; i < 20; i++) {
        rep = check(l, "g", "u1", NULL, 1, now);
        RL_CHECK(rep.code == RL_WIRE_ALLOWED || rep.code == RL_WIRE_QUEUED);
    }
    ck_assert_uint_eq(rep.remaining, 5);

    /* up: u1 to 800/1000, every other user of g to 500 */
    s1 = slices_from("# test\ngeneration 3\nservice g 500\nuser g u1 800\n");
    ck_assert_uint_eq(rl_slices_generation(s1), 3);
    rl_limiter_set_slices(l, s1, rl_conf_region_slice(c));
    rep = check(l, "g", "u1", NULL, 1, now);
    RL_CHECK(rep.code == RL_WIRE_ALLOWED || rep.code == RL_WIRE_QUEUED);
    ck_assert_uint_eq(rep.limit, 80);
    ck_assert_uint_eq(rep.remaining, 59);
    rep = check(l, "g", "u2", NULL, 0, now);
    ck_assert_uint_eq(rep.limit, 50);
    rep = check(l, "r", "u1", NULL, 0, now);
    ck_assert_uint_eq(rep.limit, 100);

    /* down: 21 consumed is over a slice of 10: refused, not restarted */
    s2 = slices_from("user g u1 100\n");
    rl_limiter_set_slices(l, s2, rl_conf_region_slice(c));
    rl_slices_destroy(s1);
    rep = check(l, "g", "u1", NULL, 1, now);
    ck_assert_uint_eq(rep.code, RL_WIRE_LIMITED);
    ck_assert_uint_eq(rep.limit, 10);
    ck_assert_uint_eq(rep.remaining, 0);
    /* other users: the region's own slice again (no service line) */
    rep = check(l, "g", "u2", NULL, 0, now);
    ck_assert_uint_eq(rep.limit, 25);

    /* none: back to the region's slice, 21 consumed of 25 */
    rl_limiter_set_slices(l, NULL, rl_conf_region_slice(c));
    rl_slices_destroy(s2);
    rep = check(l, "g", "u1", NULL, 1, now);
    RL_CHECK(rep.code == RL_WIRE_ALLOWED || rep.code == RL_WIRE_QUEUED);
    ck_assert_uint_eq(rep.remaining, 3);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);

    /* without regions a global service has the whole limit */
    snprintf(text, sizeof(text), "[service g]\nscope = global\nlimit = %s\n", global_limits[_i]);
    c = conf_from(text);
    l = limiter_from(c, 0);
    rep = check(l, "g", "u1", NULL, 0, now);
    ck_assert_uint_eq(rep.limit, 100);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/*
 * A clock stepped back a day on a global gcra (and leaky_bucket) key whose slice changed: it
 * is judged on a rescaled copy of its state. The key's own state is moved back first, so the
 * retry_after of a refusal is honoured; it was computed on a copy moved back afresh at each
 * request, and the key stayed refused past it for the day (a review of rl_algo_bound).
 */
START_TEST(test_slices_clock_day_back)
{
    static const char *const algos[] = {"gcra 100 per 1h burst 100",
                                        "leaky_bucket 100 per 1h burst 100"};
    const uint64_t now = 1700000000000ull, DAY = 86400000ull;

    for (size_t a = 0; a < 2; a++) {
        char text[512];
        struct rl_conf *c;
        struct rl_limiter *l;
        struct rl_slices *s1;
        struct rl_wire_check_reply rep;

        snprintf(text, sizeof(text),
                 "[cluster]\nregion = east\nregions = east:1 west:3\n"
                 "[service g]\nscope = global\nlimit = %s\n",
                 algos[a]);
        c = conf_from(text);
        l = limiter_from(c, 0);
        for (int i = 0; i < 25; i++) {
            rep = check(l, "g", "u1", NULL, 1, now + DAY);
            RL_CHECK(rep.code == RL_WIRE_ALLOWED || rep.code == RL_WIRE_QUEUED, "%s", algos[a]);
        }
        /* down to 10: the 25 consumed are over it; judged on a rescaled copy */
        s1 = slices_from("user g u1 100\n");
        rl_limiter_set_slices(l, s1, rl_conf_region_slice(c));
        rep = check(l, "g", "u1", NULL, 1, now);
        RL_CHECK(rep.code == RL_WIRE_LIMITED && rep.limit == 10, "%s: code %u", algos[a], rep.code);
        /* a window ahead at most, and 16 of the 25 to pay back at 10 an hour */
        RL_CHECK(rep.retry_after_ms <= 3600000ull + 5760000ull, "%s: retry %llu", algos[a],
                 (unsigned long long)rep.retry_after_ms);
        {
            uint64_t retry = rep.retry_after_ms;

            rep = check(l, "g", "u1", NULL, 1, now + retry - 1);
            RL_CHECK(rep.code == RL_WIRE_LIMITED, "%s: allowed before its retry", algos[a]);
            rep = check(l, "g", "u1", NULL, 1, now + retry);
            RL_CHECK(rep.code == RL_WIRE_ALLOWED || rep.code == RL_WIRE_QUEUED,
                     "%s: refused at its retry_after (%llu ms): code %u, retry %llu", algos[a],
                     (unsigned long long)retry, rep.code, (unsigned long long)rep.retry_after_ms);
        }
        rl_limiter_destroy(l);
        rl_slices_destroy(s1);
        rl_conf_destroy(c);
    }
}
END_TEST

START_TEST(test_slices_text)
{
    struct rl_slices *s = NULL;
    char err[256], esc[64], buf[128];
    const char *bad[] = {
        "service g 1001\n", "user g\n",        "user g %zz 5\n",
        "bogus\n",          "service g -1\n",  "service g 5 6 7 8\n",
        "generation -5\n",  "generation 7x\n", "generation 18446744073709551616\n"};
    /* a NUL byte: refused, not the lines after it dropped (line 2 here) */
    static const char nul[] = "generation 8\nuser g alice\0 10\nservice g 5\n";
    static const char top[] = "generation 18446744073709551615\n"; /* the largest taken */

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(rl_slices_parse(bad[i], strlen(bad[i]), &s, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_null(s);
        ck_assert_ptr_nonnull(strstr(err, "slices line 1"));
    }
    ck_assert_int_eq(rl_slices_parse(nul, sizeof(nul) - 1, &s, err, sizeof(err)), -EINVAL);
    ck_assert_ptr_null(s);
    ck_assert_ptr_nonnull(strstr(err, "slices line 2: a NUL byte"));
    ck_assert_int_eq(rl_slices_parse("\0junk", 5, &s, err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(rl_slices_parse(top, sizeof(top) - 1, &s, err, sizeof(err)), 0);
    rl_slices_destroy(s);
    s = NULL;
    ck_assert_uint_eq(rl_slices_escape("a b%\n", 5, esc, sizeof(esc)), 11);
    ck_assert_str_eq(esc, "a%20b%25%0A");
    snprintf(buf, sizeof(buf), "user g %s 7\ndefault 9\n", esc);
    ck_assert_int_eq(rl_slices_parse(buf, strlen(buf), &s, err, sizeof(err)), 0);
    ck_assert_uint_eq(rl_slices_get(s, "g", 1, "a b%\n", 5, 1), 7);
    ck_assert_uint_eq(rl_slices_get(s, "g", 1, "other", 5, 1), 9);
    ck_assert_uint_eq(rl_slices_users(s), 1);
    rl_slices_destroy(s);
    ck_assert_uint_eq(rl_slices_get(NULL, "g", 1, "x", 1, 42), 42);
}
END_TEST

/* One ADJUST of delta (id 77); endpoint NULL is nil. */
static struct rl_wire_check_reply
adjust(struct rl_limiter *l, const char *service, const char *user, const char *endpoint,
       int32_t delta, uint64_t now)
{
    struct rl_wire_req req = req_for(service, user, endpoint, 0);
    struct rl_wire_check_reply rep;

    req.op = RL_WIRE_OP_ADJUST;
    req.delta = delta;
    RL_CHECK_INT_EQ(rl_limiter_adjust(l, &req, now, 0, &rep), 0);
    RL_CHECK_UINT_EQ(rep.id, 77);
    return rep;
}

/* ADJUST through the limiter: every tier of the rule, no key inserted by a refund, NO_RULE,
 * shadow rules counted but never refusing, and no decision counted. */
START_TEST(test_adjust)
{
    struct rl_conf *c = conf_from("[service m]\n"
                                  "limit = fixed_window 10 per 1h\n"
                                  "limit = token_bucket 5 per 1s burst 5\n"
                                  "[service s]\nmode = shadow\nlimit = fixed_window 3 per 1s\n"
                                  "[service g]\nlimit = sliding_window_log 4 per 1s\n");
    struct rl_limiter *l = limiter_from(c, 1 << 20);
    struct rl_wire_check_reply r;
    struct rl_limiter_stats st;

    r = adjust(l, "none", "u", NULL, 5, T0);
    assert_reply(&r, RL_WIRE_NO_RULE, 0, 0, 0, 0);
    /* a refund of a key never seen changes nothing and inserts nothing */
    r = adjust(l, "m", "u", NULL, -3, T0);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 5, 0, 0);
    ck_assert_uint_eq(stats(l).keys, 0);
    /* 3 used of both tiers, 2 refunded: 2 back in each */
    check(l, "m", "u", NULL, 3, T0);
    r = adjust(l, "m", "u", NULL, -2, T0);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 4, 200, 0);
    r = check(l, "m", "u", NULL, 0, T0);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 4, 200, 0);
    /* the hour tier holds 1: a charge of 12 puts both tiers in debt */
    r = adjust(l, "m", "u", NULL, 12, T0);
    /* token bucket 13 of 5: 9 must drain for 1 to fit, 200 ms each; the hour tier's 13 of
     * 10 waits for the hour: the slowest decides */
    assert_reply(&r, RL_WIRE_ALLOWED, 10, 0, 3600000, 3600000);
    r = check(l, "m", "u", NULL, 1, T0 + 5000);
    ck_assert_uint_eq(r.code, RL_WIRE_LIMITED);
    ck_assert_uint_eq(r.retry_after_ms, 3600000 - 5000);
    /* refunds: never above full */
    r = adjust(l, "m", "u", NULL, -1000000, T0 + 5000);
    assert_reply(&r, RL_WIRE_ALLOWED, 5, 5, 0, 0);
    ck_assert_uint_eq(check(l, "m", "u", NULL, 1, T0 + 5000).code, RL_WIRE_ALLOWED);
    /* shadow: charged and counted, never refusing */
    r = adjust(l, "s", "u", NULL, 7, T0);
    assert_reply(&r, RL_WIRE_ALLOWED, 3, 0, 1000, 0);
    r = check(l, "s", "u", NULL, 1, T0 + 1);
    ck_assert_uint_eq(r.code, RL_WIRE_ALLOWED);
    ck_assert_uint_eq(stats(l).shadow_limited, 1);
    /* a sliding log: 3 logged, 2 refunded from the newest */
    check(l, "g", "u", NULL, 1, T0);
    check(l, "g", "u", NULL, 2, T0 + 500);
    r = adjust(l, "g", "u", NULL, -2, T0 + 600);
    assert_reply(&r, RL_WIRE_ALLOWED, 4, 3, 400, 0); /* only the entry at T0 is left */
    r = adjust(l, "g", "u", NULL, 5, T0 + 600);
    assert_reply(&r, RL_WIRE_ALLOWED, 4, 0, 1000, 1000); /* 6 of 4: the charge must leave */
    st = stats(l);
    ck_assert_uint_eq(st.checks, 7);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

/* ADJUST of an inline limit: the same key a CHECK with that limit counts. */
START_TEST(test_adjust_inline)
{
    struct rl_conf *c = conf_from("[service m]\nlimit = fixed_window 1 per 1s\n");
    struct rl_limiter *l = limiter_from(c, 1 << 20);
    struct rl_wire_check_reply r;
    struct rl_wire_req req = req_for("free", "u", NULL, 0);
    enum rl_algo a;

    ck_assert_int_eq(check_inline(l, "free", "u", "gcra", 10, 1000, 0, 4, T0, &r), 0);
    assert_reply(&r, RL_WIRE_ALLOWED, 10, 6, 400, 0);
    RL_CHECK_INT_EQ(rl_algo_parse("gcra", &a), 0);
    req.op = RL_WIRE_OP_ADJUST;
    req.delta = -3;
    req.limit.set = true;
    req.limit.algo = (uint8_t)a;
    req.limit.limit = 10;
    req.limit.window_ms = 1000;
    req.limit.burst = 10;
    req.tenant = inline_tenant;
    ck_assert_int_eq(rl_limiter_adjust(l, &req, T0, 0, &r), 0);
    assert_reply(&r, RL_WIRE_ALLOWED, 10, 9, 100, 0);
    ck_assert_int_eq(check_inline(l, "free", "u", "gcra", 10, 1000, 0, 0, T0, &r), 0);
    assert_reply(&r, RL_WIRE_ALLOWED, 10, 9, 100, 0);
    /* an inline limit on a configured service is refused, as for CHECK */
    req.service.ptr = "m";
    req.service.len = 1;
    ck_assert_int_eq(rl_limiter_adjust(l, &req, T0, 0, &r), -EPERM);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}
END_TEST

static Suite *
limiter_suite(void)
{
    Suite *s = suite_create("limiter");
    TCase *tc = tcase_create("limiter");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_no_rule);
    tcase_add_test(tc, test_adjust);
    tcase_add_test(tc, test_adjust_inline);
    tcase_add_loop_test(tc, test_flood_isolation, 0,
                        (int)(sizeof(flood_algos) / sizeof(flood_algos[0])));
    tcase_add_test(tc, test_endpoint_fallback);
    tcase_add_test(tc, test_multi_tier_atomic);
    tcase_add_test(tc, test_deciding_tier);
    tcase_add_test(tc, test_shadow);
    tcase_add_test(tc, test_peeks);
    tcase_add_test(tc, test_sweep_forgets);
    tcase_add_test(tc, test_sweep_clock_day_back);
    tcase_add_test(tc, test_sweep_grace);
    tcase_add_test(tc, test_tier_ids_past_16_bits);
    tcase_add_test(tc, test_memory_cap);
    tcase_add_test(tc, test_log_cap);
    tcase_add_test(tc, test_cap_clock_day_back);
    tcase_add_test(tc, test_epoch_fresh_tenure);
    tcase_add_loop_test(tc, test_epoch_each_algo, 0,
                        (int)(sizeof(flood_algos) / sizeof(flood_algos[0])));
    tcase_add_test(tc, test_epoch_log_released);
    tcase_add_test(tc, test_epoch_refused_keeps_old);
    tcase_add_test(tc, test_epoch_multi_tier);
    tcase_add_test(tc, test_inline_same_as_configured);
    tcase_add_test(tc, test_inline_separate);
    tcase_add_test(tc, test_inline_bound);
    tcase_add_test(tc, test_inline_flood_leaves_room_for_global_tiers);
    tcase_add_test(tc, test_inline_tenant_quota);
    tcase_add_test(tc, test_inline_tenant_flood);
    tcase_add_test(tc, test_tenants_map);
    tcase_add_test(tc, test_inline_year);
    tcase_add_test(tc, test_inline_kept_by_rules_change);
    tcase_add_loop_test(tc, test_global_slices, 0,
                        (int)(sizeof(global_limits) / sizeof(global_limits[0])));
    tcase_add_test(tc, test_slices_text);
    tcase_add_test(tc, test_slices_clock_day_back);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(limiter_suite)
