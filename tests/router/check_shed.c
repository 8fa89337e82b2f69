/*
 * check_shed: the router's deny cache (denycache.h) and hot-key sketch (hotkeys.h) as data
 * structures: how long a LIMITED holds and the fields answered, what misses, invalidation
 * by rules, shard and lost node connection, bounded sets with eviction; and the cache's one
 * promise checked against the real limiter (node/limiter.h) over random traffic of every
 * cacheable algorithm, with the node's whole-ms clock and random send-to-decision delays:
 * whenever the cache answers LIMITED, the node asked at that moment refuses too. The sketch:
 * exact counts while the keys fit, the heavy hitter found among many light keys, the error
 * bound, halving, the filter and the merge of two sketches. And the router's rate-limited
 * warnings (log.h, rl_log_limited, which forward.c uses for the refusals of front CHECKs a
 * client can cause at will): one line per interval per reason, with the count dropped.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "denycache.h"
#include "hotkeys.h"
#include "limiter.h"
#include "log.h"
#include "rltest.h"
#include "wire.h"

#define MS 1000000ull

static struct rl_deny_key
key_of(uint64_t hash, uint32_t rule, uint32_t cost, uint32_t shard)
{
    struct rl_deny_key k = {hash, hash * 31 + 7, rule, cost, shard};

    return k;
}

static struct rl_wire_check_reply
limited(uint64_t limit, uint64_t remaining, uint64_t reset, uint64_t retry)
{
    struct rl_wire_check_reply r = {0, RL_WIRE_LIMITED, limit, remaining, reset, retry};

    return r;
}

START_TEST(test_until)
{
    /* 1 ms for the node's whole-ms clock, 1 ms per started second for the clock rates. */
    ck_assert_uint_eq(rl_deny_until(1000 * MS, 1000), 1000 * MS + 998 * MS);
    ck_assert_uint_eq(rl_deny_until(1000 * MS, 1001), 1000 * MS + 998 * MS);
    ck_assert_uint_eq(rl_deny_until(0, 100), 98 * MS);
    ck_assert_uint_eq(rl_deny_until(5, 2), 0);
    ck_assert_uint_eq(rl_deny_until(5, 1), 0);
    ck_assert_uint_eq(rl_deny_until(5, 0), 0);
    ck_assert_uint_eq(rl_deny_until(5, RL_WIRE_RETRY_NEVER), RL_DENY_NEVER);
}
END_TEST

START_TEST(test_hit_fields_and_expiry)
{
    struct rl_deny d;
    struct rl_deny_key k = key_of(42, 3, 1, 7);
    struct rl_wire_check_reply rep = limited(10, 0, 5000, 1000), got;
    uint64_t sent = 100 * MS;

    ck_assert_int_eq(rl_deny_init(&d, 1024, 16), 0);
    ck_assert_uint_eq(d.st.entries, 1024);
    ck_assert(!rl_deny_lookup(&d, &k, sent, 0, &got));
    ck_assert(rl_deny_insert(&d, &k, sent, sent + 2 * MS, 0, &rep));
    memset(&got, 0, sizeof(got));
    ck_assert(rl_deny_lookup(&d, &k, sent + 300 * MS + 1, 0, &got));
    ck_assert_uint_eq(got.code, RL_WIRE_LIMITED);
    ck_assert_uint_eq(got.limit, 10);
    ck_assert_uint_eq(got.remaining, 0);
    ck_assert_uint_eq(got.retry_after_ms, 700); /* 699.999999 ms left, rounded up */
    ck_assert_uint_eq(got.reset_ms, 4700);
    ck_assert(rl_deny_lookup(&d, &k, sent + 998 * MS - 1, 0, &got));
    ck_assert_uint_eq(got.retry_after_ms, 3);
    /* At sent + retry - margin the node may allow: the entry is gone. */
    ck_assert(!rl_deny_lookup(&d, &k, sent + 998 * MS, 0, &got));
    ck_assert(!rl_deny_lookup(&d, &k, sent + 10, 0, &got)); /* dropped, not just expired */
    ck_assert_uint_eq(d.st.hits, 2);
    ck_assert_uint_eq(d.st.inserts, 1);
    rl_deny_deinit(&d);
}
END_TEST

START_TEST(test_what_misses)
{
    struct rl_deny d;
    struct rl_deny_key k = key_of(42, 3, 2, 7), o;
    struct rl_wire_check_reply rep = limited(10, 1, 5000, 1000), got;
    struct rl_wire_check_reply allowed = {0, RL_WIRE_ALLOWED, 10, 3, 5000, 0};
    struct rl_wire_check_reply queued = {0, RL_WIRE_QUEUED, 10, 3, 5000, 40};
    struct rl_wire_check_reply closed = {0, RL_WIRE_FAIL_CLOSED, 0, 0, 0, 4000};
    uint64_t t = 50 * MS;

    ck_assert_int_eq(rl_deny_init(&d, 64, 16), 0);
    /* Only LIMITED is remembered, and never a peek or a wait too short to hold. */
    ck_assert(!rl_deny_insert(&d, &k, t, t, 0, &allowed));
    ck_assert(!rl_deny_insert(&d, &k, t, t, 0, &queued));
    ck_assert(!rl_deny_insert(&d, &k, t, t, 0, &closed));
    o = k;
    o.cost = 0;
    ck_assert(!rl_deny_insert(&d, &o, t, t, 0, &rep));
    rep.retry_after_ms = 2;
    ck_assert(!rl_deny_insert(&d, &k, t, t, 0, &rep));
    rep.retry_after_ms = 1000;
    /* Already past by the time the reply came. */
    ck_assert(!rl_deny_insert(&d, &k, t, t + 999 * MS, 0, &rep));
    ck_assert(rl_deny_insert(&d, &k, t, t + MS, 0, &rep));
    ck_assert(rl_deny_lookup(&d, &k, t + MS, 0, &got));
    ck_assert_uint_eq(got.remaining, 1);
    /* Any other field of the key is another request. */
    o = k;
    o.cost = 1;
    ck_assert(!rl_deny_lookup(&d, &o, t + MS, 0, &got));
    o = k;
    o.rule = 4;
    ck_assert(!rl_deny_lookup(&d, &o, t + MS, 0, &got));
    o = k;
    o.fp ^= 1;
    ck_assert(!rl_deny_lookup(&d, &o, t + MS, 0, &got));
    o = k;
    o.hash ^= 1;
    ck_assert(!rl_deny_lookup(&d, &o, t + MS, 0, &got));
    /* The node lost a connection since (maybe restarted, its counters at zero). */
    ck_assert(!rl_deny_lookup(&d, &k, t + MS, 1, &got));
    ck_assert(!rl_deny_lookup(&d, &k, t + MS, 0, &got));
    rl_deny_deinit(&d);
}
END_TEST

START_TEST(test_invalidation)
{
    struct rl_deny d;
    struct rl_deny_key a = key_of(1, 0, 1, 3), b = key_of(2, 0, 1, 5);
    struct rl_wire_check_reply rep = limited(1, 0, 60000, 60000), got;

    ck_assert_int_eq(rl_deny_init(&d, 64, 8), 0);
    ck_assert(rl_deny_insert(&d, &a, 10 * MS, 11 * MS, 0, &rep));
    ck_assert(rl_deny_insert(&d, &b, 10 * MS, 11 * MS, 0, &rep));
    /* Shard 3's owner changed: a is forgotten, b stays. */
    rl_deny_forget_shard(&d, 3, 20 * MS);
    ck_assert(!rl_deny_lookup(&d, &a, 21 * MS, 0, &got));
    ck_assert(rl_deny_lookup(&d, &b, 21 * MS, 0, &got));
    /* An answer to a request sent before the change is not taken; one sent after is. */
    ck_assert(!rl_deny_insert(&d, &a, 15 * MS, 22 * MS, 0, &rep));
    ck_assert(!rl_deny_insert(&d, &a, 20 * MS, 22 * MS, 0, &rep));
    ck_assert(rl_deny_insert(&d, &a, 21 * MS, 22 * MS, 0, &rep));
    ck_assert(rl_deny_lookup(&d, &a, 23 * MS, 0, &got));
    /* Rules changed: everything goes. */
    rl_deny_forget_all(&d, 30 * MS);
    ck_assert(!rl_deny_lookup(&d, &a, 31 * MS, 0, &got));
    ck_assert(!rl_deny_lookup(&d, &b, 31 * MS, 0, &got));
    ck_assert(!rl_deny_insert(&d, &b, 29 * MS, 31 * MS, 0, &rep));
    ck_assert(rl_deny_insert(&d, &b, 31 * MS, 32 * MS, 0, &rep));
    ck_assert(rl_deny_lookup(&d, &b, 33 * MS, 0, &got));
    ck_assert_uint_eq(d.st.invalidations, 2);
    /* A shard past the table's count is never remembered apart, but rules still clear it. */
    rl_deny_forget_shard(&d, 99, 40 * MS);
    ck_assert(rl_deny_lookup(&d, &b, 41 * MS, 0, &got));
    rl_deny_deinit(&d);
}
END_TEST

START_TEST(test_bounded_and_eviction)
{
    struct rl_deny d;
    struct rl_wire_check_reply rep = limited(1, 0, 1000, 1000), got;
    struct rl_deny_key k;

    /* One set of 4 ways: the fifth key evicts the one expiring first. */
    ck_assert_int_eq(rl_deny_init(&d, 4, 1), 0);
    ck_assert_uint_eq(d.nsets, 1);
    for (uint32_t i = 0; i < 4; i++) {
        rep.retry_after_ms = 1000 + 100 * (i == 2 ? 0 : i + 1); /* key 2 expires first */
        k = key_of(100 + i, 0, 1, 0);
        ck_assert(rl_deny_insert(&d, &k, MS, MS, 0, &rep));
    }
    rep.retry_after_ms = 5000;
    k = key_of(200, 0, 1, 0);
    ck_assert(rl_deny_insert(&d, &k, MS, MS, 0, &rep));
    ck_assert_uint_eq(d.st.evictions, 1);
    ck_assert(rl_deny_lookup(&d, &k, 2 * MS, 0, &got));
    k = key_of(102, 0, 1, 0);
    ck_assert(!rl_deny_lookup(&d, &k, 2 * MS, 0, &got));
    for (uint32_t i = 0; i < 4; i++) {
        k = key_of(100 + i, 0, 1, 0);
        ck_assert(rl_deny_lookup(&d, &k, 2 * MS, 0, &got) == (i != 2));
    }
    /* An expired way is taken before a valid one: no eviction counted. */
    k = key_of(300, 0, 1, 0);
    ck_assert(rl_deny_insert(&d, &k, 1500 * MS, 1500 * MS, 0, &rep));
    ck_assert_uint_eq(d.st.evictions, 1);
    /* 1000 keys through a table of 4: never more than 4 held, no allocation. */
    for (uint32_t i = 0; i < 1000; i++) {
        k = key_of(1000 + i, 0, 1, 0);
        ck_assert(rl_deny_insert(&d, &k, 2000 * MS, 2000 * MS, 0, &rep));
    }
    ck_assert_uint_eq(d.st.entries, 4);
    /* Refusals that never expire (a cost past the capacity: one request each) go before one
     * that ends: a flood of them never pushes out a user held at its limit. */
    rl_deny_deinit(&d);
    ck_assert_int_eq(rl_deny_init(&d, 4, 1), 0);
    k = key_of(1, 0, 1, 0);
    rep = limited(1, 0, 1000, 1000);
    ck_assert(rl_deny_insert(&d, &k, MS, MS, 0, &rep));
    rep.retry_after_ms = RL_WIRE_RETRY_NEVER;
    for (uint32_t i = 0; i < 1000; i++) {
        k = key_of(5000 + i, 0, 100, 0);
        ck_assert(rl_deny_insert(&d, &k, MS, MS, 0, &rep));
    }
    k = key_of(1, 0, 1, 0);
    ck_assert(rl_deny_lookup(&d, &k, 2 * MS, 0, &got));
    ck_assert_uint_eq(got.retry_after_ms, 999);
    /* Each table draws its sets with a secret seed of its own. */
    {
        struct rl_deny d2;

        ck_assert_int_eq(rl_deny_init(&d2, 4, 1), 0);
        ck_assert_uint_ne(d.seed, d2.seed);
        rl_deny_deinit(&d2);
    }
    /* Off: nothing is kept. */
    rl_deny_deinit(&d);
    ck_assert_int_eq(rl_deny_init(&d, 0, 1), 0);
    ck_assert(!rl_deny_on(&d));
    ck_assert(!rl_deny_insert(&d, &k, MS, MS, 0, &rep));
    ck_assert(!rl_deny_lookup(&d, &k, MS, 0, &got));
    rl_deny_deinit(&d);
}
END_TEST

/* SplitMix64, for reproducible traffic. */
static uint64_t
mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/*
 * The cache's promise against the real limiter: users send requests of costs 1..3 at random
 * real times (ns). A request the cache answers is also put to the node at that moment (its
 * clock the whole ms of the real time), which must refuse it; any other request goes to the
 * node, which decides after a random delay of up to 3 ms, and its answer is remembered as
 * sent at the request's time; the next request comes after that decision (real time is one
 * time line for the node and the router).
 */
static void
exact_against_limiter(const char *rules, bool one_tier)
{
    struct rl_conf *c = NULL;
    struct rl_limiter *l = NULL;
    struct rl_deny d;
    char err[256] = "";
    uint64_t seed = 12345, t = 1700000000000ull * MS, hits = 0, limited_n = 0;
    char user[16];

    ck_assert_msg(rl_conf_parse("t.conf", rules, &c, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(rl_limiter_create(&l, c, 0), 0);
    ck_assert_int_eq(rl_deny_init(&d, 256, 1), 0);
    for (int i = 0; i < 60000; i++) {
        struct rl_wire_req req;
        struct rl_wire_check_reply rep, cached;
        struct rl_deny_key k;
        uint64_t r = mix(&seed);
        uint32_t u = (uint32_t)(r % 4);
        uint64_t decide;

        t += mix(&seed) % (3 * MS); /* the next request, up to 3 ms later */
        snprintf(user, sizeof(user), "u%u", u);
        memset(&req, 0, sizeof(req));
        req.op = RL_WIRE_OP_CHECK;
        req.service.ptr = "s";
        req.service.len = 1;
        req.user.ptr = user;
        req.user.len = (uint32_t)strlen(user);
        req.cost = 1 + (uint32_t)((r >> 8) % 3);
        k = key_of(u, 0, req.cost, 0);
        if (rl_deny_lookup(&d, &k, t, 0, &cached)) {
            hits++;
            rl_limiter_check(l, &req, t / MS, &rep);
            ck_assert_msg(rep.code == RL_WIRE_LIMITED,
                          "%s: cached LIMITED for %s cost %u at %llu ns, node says %u", rules,
                          user, req.cost, (unsigned long long)t, rep.code);
            /* The node, asked now, waits at least as long as the cache says (+1 ms). */
            ck_assert_uint_le(cached.retry_after_ms, rep.retry_after_ms + 2);
            if (one_tier) {
                ck_assert_uint_eq(cached.limit, rep.limit);
            }
            continue;
        }
        decide = t + mix(&seed) % (3 * MS);
        rl_limiter_check(l, &req, decide / MS, &rep);
        limited_n += rep.code == RL_WIRE_LIMITED;
        rl_deny_insert(&d, &k, t, decide, 0, &rep);
        t = decide; /* the next request comes after the node decided (real time runs on) */
    }
    /* The test would prove nothing if the cache never answered. */
    ck_assert_msg(hits > 300, "%s: only %llu hits of %llu refusals", rules,
                  (unsigned long long)hits, (unsigned long long)limited_n);
    rl_deny_deinit(&d);
    rl_limiter_destroy(l);
    rl_conf_destroy(c);
}

START_TEST(test_exact_fixed_window)
{
    exact_against_limiter("[service s]\nlimit = fixed_window 20 per 100ms\n", true);
}
END_TEST

START_TEST(test_exact_sliding_window_counter)
{
    exact_against_limiter("[service s]\nlimit = sliding_window_counter 20 per 100ms\n", true);
}
END_TEST

START_TEST(test_exact_token_bucket)
{
    exact_against_limiter("[service s]\nlimit = token_bucket 50 per 1s burst 10\n", true);
}
END_TEST

START_TEST(test_exact_gcra_and_leaky)
{
    exact_against_limiter("[service s]\nlimit = gcra 50 per 1s burst 5\n", true);
    exact_against_limiter("[service s]\nlimit = leaky_bucket 50 per 1s burst 5\n", true);
}
END_TEST

START_TEST(test_exact_tiers)
{
    exact_against_limiter("[service s]\nlimit = fixed_window 30 per 200ms\n"
                          "limit = token_bucket 100 per 1s burst 8\n",
                          false);
}
END_TEST

/* ---- the hot-key sketch ------------------------------------------------------------------ */

static void
hot_add_user(struct rl_hot *h, uint32_t u, uint64_t now)
{
    char name[16];

    snprintf(name, sizeof(name), "user%u", u);
    rl_hot_add(h, u * 0x9e3779b97f4a7c15ull, u, "svc", 3, name, strlen(name), now);
}

START_TEST(test_hot_exact_when_it_fits)
{
    struct rl_hot *h = malloc(sizeof(*h));
    const struct rl_hot_counter *top[RL_HOT_K];
    size_t n;

    rl_hot_init(h, 0);
    for (uint32_t u = 0; u < 50; u++) {
        for (uint32_t i = 0; i <= u; i++) {
            hot_add_user(h, u, 1);
        }
    }
    n = rl_hot_top(h, top, 5, NULL, NULL);
    ck_assert_uint_eq(n, 5);
    for (uint32_t i = 0; i < 5; i++) {
        char name[16];

        snprintf(name, sizeof(name), "user%u", 49 - i);
        ck_assert_uint_eq(top[i]->count, 50 - i);
        ck_assert_uint_eq(top[i]->err, 0);
        ck_assert_uint_eq(top[i]->ulen, strlen(name));
        ck_assert_int_eq(memcmp(top[i]->user, name, top[i]->ulen), 0);
    }
    n = rl_hot_top(h, top, RL_HOT_K, NULL, NULL);
    ck_assert_uint_eq(n, 50);
    free(h);
}
END_TEST

START_TEST(test_hot_heavy_hitter)
{
    struct rl_hot *h = malloc(sizeof(*h));
    const struct rl_hot_counter *top[3];
    uint64_t seed = 7;
    size_t n;

    rl_hot_init(h, 0);
    /* 1 request in 3 is user 0, the rest spread over 100000 users: far more keys than
     * counters, so the light ones keep replacing each other. All within the requests a
     * period counts one by one. */
    ck_assert_uint_le(60000, RL_HOT_EXACT);
    for (uint32_t i = 0; i < 60000; i++) {
        hot_add_user(h, i % 3 == 0 ? 0 : 1 + (uint32_t)(mix(&seed) % 100000), 5);
    }
    n = rl_hot_top(h, top, 3, NULL, NULL);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(memcmp(top[0]->user, "user0", 5), 0);
    ck_assert_uint_eq(top[0]->ulen, 5);
    /* Its true count, 20000, lies within [count - err, count]. */
    ck_assert_uint_ge(top[0]->count, 20000);
    ck_assert_uint_le(top[0]->count - top[0]->err, 20000);
    /* Every count overestimates by at most total / K. */
    ck_assert_uint_le(top[1]->err, 60000 / RL_HOT_K + 1);
    free(h);
}
END_TEST

/* Past RL_HOT_EXACT requests in a period the sketch samples: the total stays exact, a heavy
 * hitter is still first, and its count estimates its true count closely. */
START_TEST(test_hot_sampled)
{
    struct rl_hot *h = malloc(sizeof(*h));
    const struct rl_hot_counter *top[3];
    uint64_t seed = 11, n_all = RL_HOT_EXACT + 2000000, hot = 0;
    size_t n;

    rl_hot_init(h, 0);
    for (uint64_t i = 0; i < n_all; i++) {
        bool is_hot = i % 4 == 0;

        hot += is_hot;
        hot_add_user(h, is_hot ? 0 : 1 + (uint32_t)(mix(&seed) % 100000), 5);
    }
    /* Every request counted, but those passed over since the last sample. */
    ck_assert_uint_eq(h->total + h->skipped, n_all);
    n = rl_hot_top(h, top, 3, NULL, NULL);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(memcmp(top[0]->user, "user0", 5), 0);
    /* Within 5% of its true count (the estimate's spread here is about 0.5%). */
    ck_assert_uint_ge(top[0]->count, hot - hot / 20);
    ck_assert_uint_le(top[0]->count, hot + hot / 20);
    /* Once a period passes, counting is one by one again. */
    rl_hot_decay(h, 5 + RL_HOT_PERIOD_MS);
    ck_assert_uint_eq(h->period_adds, 0);
    free(h);
}
END_TEST

static bool
keep_even(void *arg, const struct rl_hot_counter *c)
{
    (void)arg;
    return (c->user[c->ulen - 1] - '0') % 2 == 0;
}

START_TEST(test_hot_decay_filter_merge)
{
    struct rl_hot *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
    const struct rl_hot_counter *top[10];
    size_t n;

    rl_hot_init(a, 0);
    for (int i = 0; i < 64; i++) {
        hot_add_user(a, 1, 10);
    }
    for (int i = 0; i < 8; i++) {
        hot_add_user(a, 2, 10);
    }
    /* One period later the counts are halved, two later quartered. */
    rl_hot_decay(a, RL_HOT_PERIOD_MS);
    n = rl_hot_top(a, top, 10, NULL, NULL);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(top[0]->count, 32);
    ck_assert_uint_eq(top[1]->count, 4);
    rl_hot_decay(a, 2 * RL_HOT_PERIOD_MS + 5);
    n = rl_hot_top(a, top, 10, NULL, NULL);
    ck_assert_uint_eq(top[0]->count, 16);
    /* Filtered: only the even users. */
    n = rl_hot_top(a, top, 10, keep_even, NULL);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(memcmp(top[0]->user, "user2", 5), 0);
    /* Merged: a key in both sums, a key in one keeps its count. */
    rl_hot_init(b, 2 * RL_HOT_PERIOD_MS);
    for (int i = 0; i < 40; i++) {
        hot_add_user(b, 2, 2 * RL_HOT_PERIOD_MS);
    }
    hot_add_user(b, 3, 2 * RL_HOT_PERIOD_MS);
    rl_hot_merge(a, b);
    n = rl_hot_top(a, top, 10, NULL, NULL);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(memcmp(top[0]->user, "user2", 5), 0);
    ck_assert_uint_eq(top[0]->count, 42);
    ck_assert_uint_eq(top[1]->count, 16);
    ck_assert_uint_eq(top[2]->count, 1);
    ck_assert_uint_eq(a->total, 16 + 2 + 41);
    free(a);
    free(b);
}
END_TEST

/* The lines of the file at path containing needle. */
static int
log_lines_with(const char *path, const char *needle)
{
    char line[2048];
    int n = 0;
    FILE *f = fopen(path, "r");

    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof(line), f) != NULL) {
        n += strstr(line, needle) != NULL;
    }
    fclose(f);
    return n;
}

START_TEST(test_log_limited)
{
    char path[] = "/tmp/rl_check_shed_log_XXXXXX";
    struct rl_log_limit a = {0}, b = {0};
    int fd = mkstemp(path);
    int printed = 0;

    ck_assert_int_ge(fd, 0);
    close(fd);
    rl_log_setup(RL_LOG_INFO, "t");
    ck_assert_int_eq(rl_log_open(path), 0);
    /* A flood of 100,000 refusals over 25 s (clock under control), two reasons: one line per
     * reason per 10 s, each after the first saying how many it stands for. */
    for (uint64_t i = 0; i < 100000; i++) {
        uint64_t now = 5000 + i / 4; /* 4 a ms */

        printed += rl_log_limited(&a, now, 10000, RL_LOG_WARN, "node x refused: %s", "alpha");
        printed += rl_log_limited(&b, now, 10000, RL_LOG_WARN, "node x refused: %s", "beta");
    }
    ck_assert_int_eq(printed, 6); /* at 5 s, 15 s, 25 s for each */
    ck_assert_int_eq(log_lines_with(path, "refused: alpha"), 3);
    ck_assert_int_eq(log_lines_with(path, "refused: beta"), 3);
    ck_assert_int_eq(log_lines_with(path, "refused: alpha (39999 more like this in the last 10 s "
                                          "not logged)"),
                     2);
    ck_assert_uint_eq(a.suppressed, 100000 - 3 - 2 * 39999); /* since 25 s */
    /* A line below the level is neither printed nor counted. */
    rl_log_setup(RL_LOG_ERROR, "t");
    ck_assert(!rl_log_limited(&a, 99000, 10000, RL_LOG_WARN, "quiet"));
    ck_assert_int_eq(log_lines_with(path, "quiet"), 0);
    /* A clock that went back does not silence the log for good. */
    rl_log_setup(RL_LOG_INFO, "t");
    ck_assert(rl_log_limited(&b, 10, 10000, RL_LOG_WARN, "node x refused: %s", "back"));
    ck_assert_int_eq(log_lines_with(path, "back (19999 more like this in the last 0 s"), 1);
    unlink(path);
}
END_TEST

static Suite *
shed_suite(void)
{
    Suite *s = suite_create("shed");
    TCase *tc = tcase_create("denycache");
    TCase *th = tcase_create("hotkeys");
    TCase *tl = tcase_create("log");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_until);
    tcase_add_test(tc, test_hit_fields_and_expiry);
    tcase_add_test(tc, test_what_misses);
    tcase_add_test(tc, test_invalidation);
    tcase_add_test(tc, test_bounded_and_eviction);
    tcase_add_test(tc, test_exact_fixed_window);
    tcase_add_test(tc, test_exact_sliding_window_counter);
    tcase_add_test(tc, test_exact_token_bucket);
    tcase_add_test(tc, test_exact_gcra_and_leaky);
    tcase_add_test(tc, test_exact_tiers);
    suite_add_tcase(s, tc);
    tcase_add_test(th, test_hot_exact_when_it_fits);
    tcase_add_test(th, test_hot_heavy_hitter);
    tcase_add_test(th, test_hot_sampled);
    tcase_add_test(th, test_hot_decay_filter_merge);
    suite_add_tcase(s, th);
    tcase_add_test(tl, test_log_limited);
    suite_add_tcase(s, tl);
    return s;
}

RL_TEST_MAIN(shed_suite)
