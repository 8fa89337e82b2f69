/*
 * check_handoff: the handoff of live keys between limiters (node/handoff.h; limiter.h,
 * rl_limiter_export and rl_limiter_import), without processes. For every algorithm, a
 * multi-tier rule, a shadow rule and inline limits with their tenant: a sender judges a
 * history, exports every live key as the record stream, the stream is decoded and imported
 * into another limiter whose clock is offset, and from then on every decision of the
 * receiver is the reference's (a limiter that judged the same history and never moved).
 * Concurrency keys (configured, in a multi-tier rule, inline) carry the slots they hold, after
 * a history that released some. Also: a receiver with another limit carries the consumption over, one without the tier
 * skips the key, a region's slice of a global rule continues (and carries over to another
 * slice), a log too long for a record travels as its counts, and the decoder refuses every
 * truncation and corruption without crashing; a shard's keys exported alone. Not for the
 * transfer between processes (check_handoff_e2e).
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>
#include <xxhash.h>

#include "buf.h"
#include "conf.h"
#include "inltab.h"
#include "handoff.h"
#include "limiter.h"
#include "rltest.h"
#include "wire.h"

#define T0 1700000000000ull          /* 800 s into its hour */
#define DAY_OFFSET (3 * 86400000ull) /* a multiple of every window used here */

static const char *const algos[] = {
    "fixed_window", "sliding_window_log", "sliding_window_counter", "token_bucket",
    "gcra",         "leaky_bucket",       "concurrency"};
#define NALGOS 7 /* the inline limits; the first 6 are the rates */

static const char *rules_text =
    "[service fw]\nlimit = fixed_window 7 per 1m\n"
    "[service swl]\nlimit = sliding_window_log 7 per 1m\n"
    "[service swc]\nlimit = sliding_window_counter 7 per 1m\n"
    "[service tb]\nlimit = token_bucket 7 per 1m burst 9\n"
    "[service gcra]\nlimit = gcra 7 per 1m burst 3\n"
    "[service lb]\nlimit = leaky_bucket 7 per 1m burst 4\n"
    "[service multi]\nlimit = fixed_window 9 per 1h\nlimit = gcra 5 per 10s\n"
    "limit = sliding_window_log 6 per 1m\nlimit = concurrency 5 lease 30s\n"
    "[service shadow]\nmode = shadow\nlimit = token_bucket 3 per 1m\n"
    "[service conc]\nlimit = concurrency 4 lease 20s\n";

static const char *const services[] = {"fw",    "swl",    "swc", "tb", "gcra",
                                        "lb",    "multi",  "shadow", "conc"};
#define NSERVICES 9
#define NUSERS 6

static struct rl_conf *
conf_from(const char *text)
{
    struct rl_conf *c = NULL;
    char err[256] = "";

    RL_CHECK(rl_conf_parse("test.conf", text, &c, err, sizeof(err)) == 0, "conf: %s", err);
    return c;
}

static struct rl_limiter *
limiter_from(const struct rl_conf *c)
{
    struct rl_limiter *l = NULL;

    ck_assert_int_eq(rl_limiter_create(&l, c, 64ull << 20), 0);
    return l;
}

/* One CHECK: configured (algo NULL) or inline (algo, limit, window; tenant 7). */
static struct rl_wire_check_reply
check(struct rl_limiter *l, const char *service, const char *user, const char *algo, uint32_t cost,
      uint64_t now)
{
    struct rl_wire_req req;
    struct rl_wire_check_reply rep;

    memset(&req, 0, sizeof(req));
    req.id = 1;
    req.service.ptr = service;
    req.service.len = (uint32_t)strlen(service);
    req.user.ptr = user;
    req.user.len = (uint32_t)strlen(user);
    req.cost = cost;
    if (algo != NULL) {
        enum rl_algo a;

        ck_assert_int_eq(rl_algo_parse(algo, &a), 0);
        req.limit.set = true;
        req.limit.algo = (uint8_t)a;
        req.limit.limit = 5;
        req.limit.window_ms = 30000;
        req.limit.has_burst = rl_algo_has_burst(a);
        req.limit.burst = 5;
        req.tenant = 7;
    }
    ck_assert_int_eq(rl_limiter_check(l, &req, now, &rep), 0);
    return rep;
}

/* One RELEASE of 1 slot: configured (algo NULL) or inline, as check() sends them. */
static void
release(struct rl_limiter *l, const char *service, const char *user, const char *algo,
        uint64_t now)
{
    struct rl_wire_req req;
    struct rl_wire_check_reply rep;

    memset(&req, 0, sizeof(req));
    req.op = RL_WIRE_OP_RELEASE;
    req.id = 1;
    req.service.ptr = service;
    req.service.len = (uint32_t)strlen(service);
    req.user.ptr = user;
    req.user.len = (uint32_t)strlen(user);
    req.cost = 1;
    if (algo != NULL) {
        req.limit.set = true;
        req.limit.algo = RL_ALGO_CONCURRENCY;
        req.limit.limit = 5;
        req.limit.window_ms = 30000;
        req.limit.burst = 5;
        req.tenant = 7;
    }
    ck_assert_int_eq(rl_limiter_release(l, &req, now, 0, &rep), 0);
    ck_assert_uint_eq(rep.code, RL_WIRE_ALLOWED);
}

/* The requests of step k: a few users of every service and every inline algorithm. */
static void
step(struct rl_limiter *l, int k, uint64_t now, struct rl_wire_check_reply *out, size_t *n)
{
    char user[16];

    *n = 0;
    for (int u = 0; u < NUSERS; u++) {
        uint32_t cost = (uint32_t)((k + u) % 3);

        snprintf(user, sizeof(user), "u%d", u);
        for (int s = 0; s < NSERVICES; s++) {
            out[(*n)++] = check(l, services[s], user, NULL, cost, now);
        }
        for (int a = 0; a < NALGOS; a++) {
            out[(*n)++] = check(l, "free", user, algos[a], cost, now);
        }
        if (k < 30 && (k + u) % 4 == 0) {
            /* the history gives slots back too (the continuation only CHECKs) */
            release(l, "multi", user, NULL, now);
            release(l, "conc", user, NULL, now);
            release(l, "free", user, "concurrency", now);
        }
    }
}

#define PER_STEP (NUSERS * (NSERVICES + NALGOS))

/* Times of the history and of the continuation: irregular, some within one ms. */
static uint64_t
at(int k)
{
    return T0 + (uint64_t)k * 1733 + (uint64_t)(k % 4 == 0) * 7;
}

struct sink {
    struct rl_buf buf;
    uint64_t n;
};

static bool
want_all(void *arg, uint64_t fp_hi, uint32_t fp_lo, uint32_t shard, uint16_t epoch)
{
    (void)shard;
    (void)arg;
    (void)fp_hi;
    (void)fp_lo;
    return epoch == 0;
}

static int
to_sink(void *arg, const struct rl_handoff_key *k)
{
    struct sink *s = arg;

    s->n++;
    return rl_handoff_put_key(&s->buf, k);
}

/* Exports every live key of l at now as a stream; decodes it into *keys (n of them). */
static void
export_decode(struct rl_limiter *l, uint64_t now, struct rl_handoff_key **keys, size_t *n)
{
    struct sink s;
    struct rl_handoff_rec rec;
    size_t off = 0, cap;
    long r;

    rl_buf_init(&s.buf);
    s.n = 0;
    ck_assert_int_eq(rl_handoff_put_header(&s.buf, now, 5), 0);
    ck_assert_int_eq(rl_limiter_export(l, now, want_all, to_sink, &s), 0);
    ck_assert_int_eq(rl_handoff_put_end(&s.buf, s.n), 0);
    cap = s.n + 1;
    *keys = calloc(cap, sizeof(**keys));
    ck_assert_ptr_nonnull(*keys);
    *n = 0;
    r = rl_handoff_next(s.buf.data, s.buf.len, &rec, NULL);
    ck_assert_int_gt(r, 0);
    ck_assert_uint_eq(rec.type, RL_HANDOFF_HEADER);
    ck_assert_uint_eq(rec.version, RL_HANDOFF_VERSION);
    ck_assert_uint_eq(rec.sender_now_ms, now);
    ck_assert_uint_eq(rec.shard, 5);
    off = (size_t)r;
    for (;;) {
        ck_assert_uint_lt(*n, cap);
        r = rl_handoff_next(s.buf.data + off, s.buf.len - off, &rec, &(*keys)[*n]);
        ck_assert_int_gt(r, 0);
        off += (size_t)r;
        if (rec.type == RL_HANDOFF_END) {
            ck_assert_uint_eq(rec.nkeys, s.n);
            break;
        }
        ck_assert_uint_eq(rec.type, RL_HANDOFF_KEY);
        (*n)++;
    }
    ck_assert_uint_eq(off, s.buf.len);
    ck_assert_uint_eq(*n, s.n);
    rl_buf_deinit(&s.buf);
}

static void
same_reply(const struct rl_wire_check_reply *a, const struct rl_wire_check_reply *b, int k,
           size_t i, const char *what)
{
    ck_assert_msg(a->code == b->code && a->limit == b->limit && a->remaining == b->remaining &&
                      a->reset_ms == b->reset_ms && a->retry_after_ms == b->retry_after_ms,
                  "%s, step %d, request %zu (service %s): %u/%llu/%llu/%llu/%llu, reference "
                  "%u/%llu/%llu/%llu/%llu",
                  what, k, i,
                  i % (NSERVICES + NALGOS) < NSERVICES
                      ? services[i % (NSERVICES + NALGOS)]
                      : algos[i % (NSERVICES + NALGOS) - NSERVICES],
                  a->code, (unsigned long long)a->limit, (unsigned long long)a->remaining,
                  (unsigned long long)a->reset_ms, (unsigned long long)a->retry_after_ms, b->code,
                  (unsigned long long)b->limit, (unsigned long long)b->remaining,
                  (unsigned long long)b->reset_ms, (unsigned long long)b->retry_after_ms);
}

/*
 * History on the sender and the reference, export at the end, import into a receiver whose
 * clock reads `offset` more, then the same requests on receiver and reference: the same
 * replies. With offset a multiple of every window, exact for all; with another offset, the
 * buckets and logs stay exact (checked by the caller choosing the services compared).
 */
static void
roundtrip(uint64_t offset, bool windows_too)
{
    struct rl_conf *c = conf_from(rules_text);
    struct rl_limiter *snd = limiter_from(c), *rcv = limiter_from(c), *ref = limiter_from(c);
    struct rl_wire_check_reply a[PER_STEP], b[PER_STEP];
    struct rl_handoff_key *keys;
    struct rl_limiter_import_stats st;
    struct rl_limiter_stats ls;
    size_t na, nb, n;
    int k;

    for (k = 0; k < 30; k++) {
        step(snd, k, at(k), a, &na);
        step(ref, k, at(k), b, &nb);
    }
    export_decode(snd, at(k), &keys, &n);
    ck_assert_uint_gt(n, 0);
    memset(&st, 0, sizeof(st));
    ck_assert_int_eq(rl_limiter_import(rcv, at(k) + offset, 3, 0, keys, n, &st), 0);
    ck_assert_uint_eq(st.imported, n);
    ck_assert_uint_eq(st.no_tier + st.invalid + st.no_memory + st.carried, 0);
    rl_limiter_stats(rcv, &ls);
    ck_assert_uint_le(ls.keys, n);
    free(keys);
    for (; k < 90; k++) {
        /* the receiver checks under epoch 3, which the import wrote */
        step(ref, k, at(k), b, &nb);
        {
            char user[16];
            size_t i = 0;

            for (int u = 0; u < NUSERS; u++) {
                uint32_t cost = (uint32_t)((k + u) % 3);

                snprintf(user, sizeof(user), "u%d", u);
                for (int s = 0; s < NSERVICES + NALGOS; s++, i++) {
                    struct rl_wire_req req;
                    enum rl_algo al;

                    memset(&req, 0, sizeof(req));
                    req.id = 1;
                    req.service.ptr = s < NSERVICES ? services[s] : "free";
                    req.service.len = (uint32_t)strlen(req.service.ptr);
                    req.user.ptr = user;
                    req.user.len = (uint32_t)strlen(user);
                    req.cost = cost;
                    if (s >= NSERVICES) {
                        ck_assert_int_eq(rl_algo_parse(algos[s - NSERVICES], &al), 0);
                        req.limit.set = true;
                        req.limit.algo = (uint8_t)al;
                        req.limit.limit = 5;
                        req.limit.window_ms = 30000;
                        req.limit.has_burst = rl_algo_has_burst(al);
                        req.limit.burst = 5;
                        req.tenant = 7;
                    }
                    ck_assert_int_eq(rl_limiter_check_epoch(rcv, &req, at(k) + offset, 3, &a[i]),
                                     0);
                    if (!windows_too &&
                        (s == 0 || s == 2 || s == 6 || s == NSERVICES || s == NSERVICES + 2)) {
                        continue; /* epoch-aligned windows under an odd offset */
                    }
                    same_reply(&a[i], &b[i], k, i, windows_too ? "day offset" : "odd offset");
                }
            }
        }
    }
    rl_limiter_destroy(snd);
    rl_limiter_destroy(rcv);
    rl_limiter_destroy(ref);
    rl_conf_destroy(c);
}

START_TEST(test_roundtrip_every_algorithm)
{
    roundtrip(DAY_OFFSET, true);
}
END_TEST

START_TEST(test_roundtrip_odd_offset)
{
    roundtrip(DAY_OFFSET + 12345, false);
}
END_TEST

/* A receiver whose clock is behind: the same (times are relative). */
START_TEST(test_roundtrip_clock_behind)
{
    roundtrip((uint64_t)0 - DAY_OFFSET, true);
}
END_TEST

/* The receiver's rules give the tier another limit: the consumption carries over (3 used of
 * 3, 1000 there: 997); no such tier there: skipped; another window: skipped. */
START_TEST(test_import_other_rules)
{
    static const char *const kinds[] = {"fixed_window 3 per 1h",
                                        "sliding_window_log 3 per 1h",
                                        "sliding_window_counter 3 per 1h",
                                        "token_bucket 3 per 1h",
                                        "gcra 3 per 1h",
                                        "leaky_bucket 3 per 1h"};

    for (int i = 0; i < 6; i++) {
        char t1[128], t2[128], t3[128];
        struct rl_conf *c1, *c2, *c3;
        struct rl_limiter *snd, *rcv, *none;
        struct rl_handoff_key *keys;
        struct rl_limiter_import_stats st;
        size_t n;

        snprintf(t1, sizeof(t1), "[service s]\nlimit = %s\n", kinds[i]);
        snprintf(t2, sizeof(t2), "[service s]\nlimit = %s 1000 per 1h\n", algos[i]);
        snprintf(t3, sizeof(t3), "[service s]\nlimit = %s 3 per 2h\n", algos[i]);
        c1 = conf_from(t1);
        c2 = conf_from(t2);
        c3 = conf_from(t3);
        snd = limiter_from(c1);
        rcv = limiter_from(c2);
        none = limiter_from(c3);
        for (int k = 0; k < 3; k++) {
            ck_assert_uint_ne(check(snd, "s", "u", NULL, 1, T0).code, RL_WIRE_LIMITED);
        }
        export_decode(snd, T0 + 5, &keys, &n);
        ck_assert_uint_eq(n, 1);
        memset(&st, 0, sizeof(st));
        ck_assert_int_eq(rl_limiter_import(rcv, T0 + 5, 0, 0, keys, n, &st), 0);
        ck_assert_uint_eq(st.imported, 1);
        ck_assert_uint_eq(st.carried, 1);
        ck_assert_uint_eq(check(rcv, "s", "u", NULL, 0, T0 + 5).remaining, 997);
        memset(&st, 0, sizeof(st));
        ck_assert_int_eq(rl_limiter_import(none, T0 + 5, 0, 0, keys, n, &st), 0);
        ck_assert_uint_eq(st.no_tier, 1);
        ck_assert_uint_eq(st.imported, 0);
        ck_assert_uint_eq(check(none, "s", "u", NULL, 0, T0 + 5).remaining, 3);
        free(keys);
        rl_limiter_destroy(snd);
        rl_limiter_destroy(rcv);
        rl_limiter_destroy(none);
        rl_conf_destroy(c1);
        rl_conf_destroy(c2);
        rl_conf_destroy(c3);
    }
}
END_TEST

/* A region's slice of a global rule travels as an inline tier of the service's account: the
 * receiver continues it (25 of 100 here, 20 used: 5 left), and one with a larger slice (50)
 * carries the 20 over (30 left). */
START_TEST(test_global_slice)
{
    for (int i = 0; i < 6; i++) {
        char text[256];
        struct rl_conf *c;
        struct rl_limiter *snd, *rcv, *big;
        struct rl_handoff_key *keys;
        struct rl_limiter_import_stats st;
        size_t n;

        snprintf(text, sizeof(text),
                 "[cluster]\nregion = east\nregions = east:1 west:3\n"
                 "[service g]\nscope = global\nlimit = %s 100 per 1h\n",
                 algos[i]);
        c = conf_from(text);
        snd = limiter_from(c);
        rcv = limiter_from(c);
        big = limiter_from(c);
        rl_limiter_set_slices(big, NULL, 500);
        for (int k = 0; k < 20; k++) {
            ck_assert_uint_ne(check(snd, "g", "u", NULL, 1, T0).code, RL_WIRE_LIMITED);
        }
        ck_assert_uint_eq(check(snd, "g", "u", NULL, 0, T0).remaining, 5);
        export_decode(snd, T0, &keys, &n);
        ck_assert_uint_eq(n, 1);
        ck_assert_uint_eq(keys[0].kind, RL_HANDOFF_INLINE);
        memset(&st, 0, sizeof(st));
        ck_assert_int_eq(rl_limiter_import(rcv, T0 + DAY_OFFSET, 0, 0, keys, n, &st), 0);
        ck_assert_uint_eq(st.imported, 1);
        ck_assert_uint_eq(check(rcv, "g", "u", NULL, 0, T0 + DAY_OFFSET).remaining, 5);
        ck_assert_int_eq(rl_limiter_import(big, T0 + DAY_OFFSET, 0, 0, keys, n, &st), 0);
        ck_assert_msg(check(big, "g", "u", NULL, 0, T0 + DAY_OFFSET).remaining == 30, "%s",
                      algos[i]);
        free(keys);
        rl_limiter_destroy(snd);
        rl_limiter_destroy(rcv);
        rl_limiter_destroy(big);
        rl_conf_destroy(c);
    }
}
END_TEST

/* An inline CHECK of tenant `tenant`, fixed_window `limit` per 1h; its return code. */
static int
check_tenant(struct rl_limiter *l, const char *user, uint32_t tenant, uint32_t limit, uint64_t now)
{
    struct rl_wire_req req;
    struct rl_wire_check_reply rep;

    memset(&req, 0, sizeof(req));
    req.service.ptr = "x";
    req.service.len = 1;
    req.user.ptr = user;
    req.user.len = (uint32_t)strlen(user);
    req.cost = 1;
    req.limit.set = true;
    req.limit.algo = RL_ALGO_FIXED_WINDOW;
    req.limit.limit = limit;
    req.limit.window_ms = 3600000;
    req.tenant = tenant;
    return rl_limiter_check(l, &req, now, &rep);
}

/* Clients' inline limits handed off to a node count in its clients' part of the inline table
 * as the ones it admitted itself: imported into a node whose clients' part is full, they are
 * skipped, and a global service's scaled tiers still find their reserved places, its own
 * imported ones included. (Before, imports took the reserve: then the global service's CHECKs
 * were refused OVERLOADED.) */
START_TEST(test_imports_leave_the_scaled_tiers_reserve)
{
    const char *text = "[cluster]\nregion = east\nregions = east:1 west:1\n"
                       "[service g]\nscope = global\nlimit = fixed_window 10 per 1h\n";
    struct rl_conf *c = conf_from(text);
    struct rl_limiter *snd = limiter_from(c), *rcv = limiter_from(c);
    struct rl_limiter_import_stats st;
    struct rl_handoff_key *keys;
    size_t n;
    char user[32];

    /* the sender: 4,096 limits of one tenant, and the global service's tier */
    for (uint32_t k = 0; k < RL_INLTAB_TENANT_MAX; k++) {
        ck_assert_int_eq(check_tenant(snd, "u", 99, 100 + k, T0), 0);
    }
    ck_assert_uint_eq(check(snd, "g", "alice", NULL, 1, T0).code, RL_WIRE_ALLOWED);
    /* the receiver: its clients' part full */
    for (uint32_t k = 0; k < RL_INLTAB_CLIENTS_MAX; k++) {
        snprintf(user, sizeof(user), "v%u", k % 7);
        ck_assert_int_eq(check_tenant(rcv, user, 1 + k / RL_INLTAB_TENANT_MAX, 20000 + k, T0), 0);
    }
    export_decode(snd, T0, &keys, &n);
    ck_assert_uint_eq(n, RL_INLTAB_TENANT_MAX + 1);
    memset(&st, 0, sizeof(st));
    ck_assert_int_eq(rl_limiter_import(rcv, T0, 0, 0, keys, n, &st), 0);
    ck_assert_uint_eq(st.imported, 1); /* alice's counter of g */
    ck_assert_uint_eq(st.no_memory, RL_INLTAB_TENANT_MAX);
    /* alice kept her count (1 of her slice of 5); another user of g finds a tier too */
    ck_assert_uint_eq(check(rcv, "g", "alice", NULL, 0, T0).remaining, 4);
    ck_assert_uint_eq(check(rcv, "g", "bob", NULL, 1, T0).code, RL_WIRE_ALLOWED);
    free(keys);
    rl_limiter_destroy(snd);
    rl_limiter_destroy(rcv);
    rl_conf_destroy(c);
}
END_TEST

/* A log of more than RL_ALGO_XLOG_MAX entries travels as RL_ALGO_XLOG_MAX, consecutive
 * entries merged at their newest time: at every moment of the next window the receiver
 * allows no more than the sender would (each cost expires at its time or later), and at most
 * one group's entries fewer. (Before: as its sliding_window_counter counts, which allowed
 * 1,243 more than the limit after such a move.) */
START_TEST(test_long_log)
{
    struct rl_conf *c = conf_from("[service s]\nlimit = sliding_window_log 2000 per 20s\n");
    struct rl_limiter *snd = limiter_from(c), *rcv = limiter_from(c);
    struct rl_handoff_key *keys;
    size_t n;
    uint32_t total = 0;

    for (uint64_t k = 0; k < 2000; k++) {
        ck_assert_uint_eq(check(snd, "s", "u", NULL, 1, T0 + 3 * k / 2).code, RL_WIRE_ALLOWED);
    }
    export_decode(snd, T0 + 3000, &keys, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(keys[0].st.shape, RL_ALGO_SLIDING_WINDOW_LOG);
    ck_assert_uint_eq(keys[0].st.nlog, RL_ALGO_XLOG_MAX);
    for (uint32_t i = 0; i < keys[0].st.nlog; i++) {
        total += keys[0].st.cost[i];
    }
    ck_assert_uint_eq(total, 2000);
    ck_assert_int_eq(rl_limiter_import(rcv, T0 + 3000, 0, 0, keys, n, NULL), 0);
    for (uint64_t t = T0 + 3000; t <= T0 + 24000; t += 7) {
        uint32_t a = check(snd, "s", "u", NULL, 0, t).remaining;
        uint32_t b = check(rcv, "s", "u", NULL, 0, t).remaining;

        ck_assert_msg(b <= a && b + 2 >= a,
                      "at +%llu ms: %u left at the receiver, %u at the sender",
                      (unsigned long long)(t - T0), b, a);
    }
    ck_assert_uint_eq(check(rcv, "s", "u", NULL, 0, T0 + 24000).remaining, 2000);
    free(keys);
    rl_limiter_destroy(snd);
    rl_limiter_destroy(rcv);
    rl_conf_destroy(c);
}
END_TEST

/* A record whose times lie far ahead (a bad record, not a clock's step back) freezes its key
 * for one window at most. */
START_TEST(test_import_far_future)
{
    for (int i = 0; i < 6; i++) {
        char text[128];
        struct rl_conf *c;
        struct rl_limiter *snd, *rcv;
        struct rl_handoff_key *keys;
        size_t n;

        snprintf(text, sizeof(text), "[service s]\nlimit = %s 3 per 1m\n", algos[i]);
        c = conf_from(text);
        snd = limiter_from(c);
        rcv = limiter_from(c);
        for (int k = 0; k < 3; k++) {
            (void)check(snd, "s", "u", NULL, 1, T0);
        }
        export_decode(snd, T0, &keys, &n);
        ck_assert_uint_eq(n, 1);
        if (keys[0].st.shape == RL_ALGO_SLIDING_WINDOW_LOG) {
            keys[0].st.age[0] = -(INT64_C(1) << 61);
        } else if (keys[0].st.shape == RL_ALGO_FIXED_WINDOW ||
                   keys[0].st.shape == RL_ALGO_SLIDING_WINDOW_COUNTER) {
            keys[0].st.t_ms = INT64_C(1) << 61;
        } else {
            keys[0].st.t_ms = -(INT64_C(1) << 61);
        }
        ck_assert_int_eq(rl_limiter_import(rcv, T0, 0, 0, keys, n, NULL), 0);
        ck_assert_uint_eq(check(rcv, "s", "u", NULL, 1, T0).code, RL_WIRE_LIMITED);
        /* two windows later (a sliding counter weighs the previous one): allowed again */
        ck_assert_msg(check(rcv, "s", "u", NULL, 1, T0 + 3 * 60000 + 1).code != RL_WIRE_LIMITED,
                      "%s", algos[i]);
        free(keys);
        rl_limiter_destroy(snd);
        rl_limiter_destroy(rcv);
        rl_conf_destroy(c);
    }
}
END_TEST

/* Every prefix of a stream is incomplete (0) or a whole record; every single-byte change
 * decodes to a record or -EINVAL, never a crash nor a read past the bytes (ASan). */
struct shard_sink {
    struct rl_handoff_key *keys;
    size_t n, cap;
};

static int
to_array(void *arg, const struct rl_handoff_key *k)
{
    struct shard_sink *s = arg;

    ck_assert_uint_lt(s->n, s->cap);
    s->keys[s->n++] = *k;
    return 0;
}

/*
 * Per-shard export: every key records the shard of its (service, user) at insert (each tier
 * of a multi-tier rule, inline limits too), rl_limiter_export_shard gives exactly a shard's
 * keys of the epoch asked for, and a receiver that imports one shard continues its users' counters,
 * records them under that shard, and starts the other shards' users from zero.
 */
START_TEST(test_export_shard)
{
    struct rl_conf *c = conf_from("[cluster]\nshards = 8\n"
                                  "[service fw]\nlimit = fixed_window 7 per 1m\n"
                                  "[service multi]\nlimit = fixed_window 9 per 1h\n"
                                  "limit = gcra 5 per 10s\n");
    struct rl_limiter *snd = limiter_from(c), *rcv = limiter_from(c);
    size_t per_shard[8] = {0}, total = 0;
    struct shard_sink s;
    char user[16];
    enum { NU = 40 };

    s.cap = 4 * NU;
    s.keys = calloc(s.cap, sizeof(*s.keys));
    ck_assert_ptr_nonnull(s.keys);
    for (int u = 0; u < NU; u++) {
        struct rl_wire_req req;

        snprintf(user, sizeof(user), "user-%d", u);
        memset(&req, 0, sizeof(req));
        req.service.ptr = "fw";
        req.service.len = 2;
        req.user.ptr = user;
        req.user.len = (uint32_t)strlen(user);
        /* fw: 1 key, multi: 2 (one a tier), the inline limit of service free: 1; each
         * under the shard of its own (service, user) */
        per_shard[rl_limiter_shard(snd, &req)] += 1;
        (void)check(snd, "fw", user, NULL, 3, T0);
        req.service.ptr = "multi";
        req.service.len = 5;
        per_shard[rl_limiter_shard(snd, &req)] += 2;
        (void)check(snd, "multi", user, NULL, 2, T0);
        req.service.ptr = "free";
        req.service.len = 4;
        per_shard[rl_limiter_shard(snd, &req)] += 1;
        (void)check(snd, "free", user, "gcra", 1, T0);
    }
    for (uint32_t sh = 0; sh < 8; sh++) {
        s.n = 0;
        ck_assert_int_eq(rl_limiter_export_shard(snd, T0 + 10, sh, 0, to_array, &s), 0);
        ck_assert_msg(s.n == per_shard[sh], "shard %u: %zu keys exported, %zu held", sh, s.n,
                      per_shard[sh]);
        total += s.n;
    }
    ck_assert_uint_eq(total, 4 * NU);
    /* keys of another tenure (their epoch is not the shard's now) are not sent */
    s.n = 0;
    ck_assert_int_eq(rl_limiter_export_shard(snd, T0 + 10, 3, 1, to_array, &s), 0);
    ck_assert_uint_eq(s.n, 0);
    /* shard 3 to the receiver, 20 s later by its clock */
    s.n = 0;
    ck_assert_int_eq(rl_limiter_export_shard(snd, T0 + 10, 3, 0, to_array, &s), 0);
    ck_assert_uint_gt(s.n, 0);
    ck_assert_int_eq(rl_limiter_import(rcv, T0 + 20010, 0, 3, s.keys, s.n, NULL), 0);
    for (uint32_t sh = 0; sh < 8; sh++) {
        size_t n = s.n;

        s.n = 0;
        ck_assert_int_eq(rl_limiter_export_shard(rcv, T0 + 20010, sh, 0, to_array, &s), 0);
        ck_assert_uint_eq(s.n, sh == 3 ? n : 0);
        s.n = n;
    }
    for (int u = 0; u < NU; u++) {
        struct rl_wire_req req;
        struct rl_wire_check_reply r;

        snprintf(user, sizeof(user), "user-%d", u);
        memset(&req, 0, sizeof(req));
        req.service.ptr = "fw";
        req.service.len = 2;
        req.user.ptr = user;
        req.user.len = (uint32_t)strlen(user);
        r = check(rcv, "fw", user, NULL, 1, T0 + 20010);
        /* 3 used before (the window of 1m still runs 20 s later): 7 - 3 - 1 */
        ck_assert_uint_eq(r.remaining, rl_limiter_shard(rcv, &req) == 3 ? 3 : 6);
    }
    {
        /* a caller that knows the shard (the node, in ZooKeeper mode) gives it in the
         * preparation: the key is recorded under it, not hashed again */
        struct rl_wire_req req;
        struct rl_limiter_prep prep;
        struct rl_wire_check_reply rep;
        size_t before;

        memset(&req, 0, sizeof(req));
        req.service.ptr = "fw";
        req.service.len = 2;
        req.user.ptr = "given";
        req.user.len = 5;
        req.cost = 1;
        rl_limiter_prepare(rcv, &req, &prep);
        ck_assert_uint_eq(prep.shard, RL_LIMITER_SHARD_UNKNOWN);
        prep.shard = (rl_limiter_shard(rcv, &req) + 1) % 8;
        s.n = 0;
        ck_assert_int_eq(rl_limiter_export_shard(rcv, T0 + 20010, prep.shard, 0, to_array, &s), 0);
        before = s.n;
        ck_assert_int_eq(rl_limiter_check_prepared(rcv, &req, &prep, T0 + 20010, 0, &rep), 0);
        s.n = 0;
        ck_assert_int_eq(rl_limiter_export_shard(rcv, T0 + 20010, prep.shard, 0, to_array, &s), 0);
        ck_assert_uint_eq(s.n, before + 1);
    }
    free(s.keys);
    rl_limiter_destroy(snd);
    rl_limiter_destroy(rcv);
    rl_conf_destroy(c);
}
END_TEST

/* Each key offered, as the digest of its record's bytes (order aside, two exports agree iff
 * their digests do). */
struct digest_sink {
    uint64_t *d;
    size_t n, cap;
    uint32_t shard; /* the one shard wanted */
};

static bool
want_shard(void *arg, uint64_t fp_hi, uint32_t fp_lo, uint32_t shard, uint16_t epoch)
{
    const struct digest_sink *s = arg;

    (void)fp_hi;
    (void)fp_lo;
    return shard == s->shard && epoch == 0;
}

static int
to_digests(void *arg, const struct rl_handoff_key *k)
{
    struct digest_sink *s = arg;
    struct rl_buf b;

    rl_buf_init(&b);
    ck_assert_int_eq(rl_handoff_put_key(&b, k), 0);
    ck_assert_uint_lt(s->n, s->cap);
    s->d[s->n++] = XXH3_64bits(b.data, b.len);
    rl_buf_deinit(&b);
    return 0;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

/*
 * rl_limiter_export a slice at a time offers exactly the keys a whole export at its begin
 * would, with the same states, whatever the limiter does between the slices: CHECKs of other
 * shards' users (new keys, their logs), a whole export of another shard, a rules change.
 */
START_TEST(test_export_in_slices)
{
    static const char *const svc[] = {"fw", "swl", "tb"};
    struct rl_conf *c = conf_from("[cluster]\nshards = 8\n"
                                  "[service fw]\nlimit = fixed_window 7 per 1m\n"
                                  "[service swl]\nlimit = sliding_window_log 5 per 1m\n"
                                  "[service tb]\nlimit = token_bucket 7 per 1m burst 9\n");
    struct rl_conf *c2 = conf_from("[cluster]\nshards = 8\n"
                                   "[service fw]\nlimit = fixed_window 7 per 1m\n"
                                   "[service swl]\nlimit = sliding_window_log 5 per 1m\n"
                                   "[service tb]\nlimit = token_bucket 7 per 1m burst 9\n"
                                   "[service new]\nlimit = gcra 3 per 1s\n");

    /* mode 0: only CHECKs between the slices; 1: a whole export of another shard after the
     * fifth slice; 2: a rules change there (either offers the rest of the pass at once) */
    for (int mode = 0; mode < 3; mode++) {
        struct rl_limiter *l = limiter_from(c);
        struct digest_sink whole = {calloc(60000, 8), 0, 60000, 3};
        struct digest_sink sliced = {calloc(60000, 8), 0, 60000, 3};
        struct digest_sink other = {calloc(60000, 8), 0, 60000, 5};
        char user[24];
        int rc, steps = 0, late = 0;

        ck_assert(whole.d != NULL && sliced.d != NULL && other.d != NULL);
        for (int u = 0; u < 12000; u++) {
            snprintf(user, sizeof(user), "user-%d", u);
            (void)check(l, svc[u % 3], user, NULL, 1 + (uint32_t)(u % 4), T0 + (uint64_t)(u % 50));
        }
        ck_assert_int_eq(rl_limiter_export(l, T0 + 100, want_shard, to_digests, &whole), 0);
        ck_assert_uint_gt(whole.n, 1000);
        ck_assert_int_eq(rl_limiter_export_begin(l, T0 + 100, want_shard, to_digests, &sliced), 0);
        while ((rc = rl_limiter_export_step(l, 1024)) == 0) {
            steps++;
            /* between two slices: users of the other shards, old and new (shard 3's users
             * are frozen, as a node answers MOVING for them) */
            for (int k = 0; k < 40; k++, late++) {
                struct rl_wire_req req;

                snprintf(user, sizeof(user), "late-%d", late);
                memset(&req, 0, sizeof(req));
                req.service.ptr = svc[late % 3];
                req.service.len = (uint32_t)strlen(svc[late % 3]);
                req.user.ptr = user;
                req.user.len = (uint32_t)strlen(user);
                if (rl_limiter_shard(l, &req) != 3) {
                    (void)check(l, svc[late % 3], user, NULL, 1, T0 + 100);
                }
            }
            if (mode == 1 && steps == 5) {
                ck_assert_int_eq(rl_limiter_export(l, T0 + 100, want_shard, to_digests, &other), 0);
                ck_assert_uint_gt(other.n, 0);
            }
            if (mode == 2 && steps == 5) {
                ck_assert_int_eq(rl_limiter_set_rules(l, c2, NULL), 0);
            }
        }
        ck_assert_int_eq(rc, 1);
        if (mode == 0) {
            ck_assert_int_gt(steps, 12); /* a slice at a time: 12,000+ keys, 1,024 slots */
        } else {
            ck_assert_int_eq(steps, 5); /* ended by what came after the fifth slice */
        }
        qsort(whole.d, whole.n, 8, cmp_u64);
        qsort(sliced.d, sliced.n, 8, cmp_u64);
        ck_assert_uint_eq(sliced.n, whole.n);
        ck_assert(memcmp(whole.d, sliced.d, whole.n * 8) == 0);
        rl_limiter_destroy(l);
        free(whole.d);
        free(sliced.d);
        free(other.d);
    }
    rl_conf_destroy(c2);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_decoder_bounded)
{
    struct rl_handoff_key k, out;
    struct rl_handoff_rec rec;
    struct rl_buf b;
    char *copy;

    memset(&k, 0, sizeof(k));
    k.fp_hi = 0x1234567890abcdefull;
    k.fp_lo = 0xabcdef;
    k.algo = RL_ALGO_SLIDING_WINDOW_LOG;
    k.limit = 100;
    k.window_ms = 60000;
    k.burst = 100;
    k.st.shape = RL_ALGO_SLIDING_WINDOW_LOG;
    k.st.nlog = 40;
    for (uint32_t i = 0; i < k.st.nlog; i++) {
        k.st.age[i] = i == 39 ? -1000 : 59000 - (int64_t)i * 1000;
        k.st.cost[i] = i + 1;
    }
    rl_buf_init(&b);
    ck_assert_int_eq(rl_handoff_put_key(&b, &k), 0);
    for (size_t n = 0; n < b.len; n++) {
        ck_assert_int_eq(rl_handoff_next(b.data, n, &rec, &out), 0);
    }
    ck_assert_int_eq(rl_handoff_next(b.data, b.len, &rec, &out), (long)b.len);
    {
        /* the body is exactly one MessagePack value, as any decoder reads it: an array of
         * the 13 fields docs/PROTOCOL.md lists */
        msgpack_unpacked u;
        size_t off = 0;

        msgpack_unpacked_init(&u);
        ck_assert_int_eq(msgpack_unpack_next(&u, b.data + 4, b.len - 4, &off),
                         MSGPACK_UNPACK_SUCCESS);
        ck_assert_uint_eq(off, b.len - 4);
        ck_assert_int_eq(u.data.type, MSGPACK_OBJECT_ARRAY);
        ck_assert_uint_eq(u.data.via.array.size, 13);
        ck_assert_uint_eq(u.data.via.array.ptr[12].via.array.size, 80);
        msgpack_unpacked_destroy(&u);
    }
    ck_assert_uint_eq(out.st.nlog, 40);
    ck_assert_int_eq(out.st.age[39], -1000);
    ck_assert_uint_eq(out.st.cost[39], 40);
    ck_assert_uint_eq(out.fp_hi, k.fp_hi);
    copy = malloc(b.len);
    ck_assert_ptr_nonnull(copy);
    for (size_t i = 0; i < b.len; i++) {
        for (int v = 0; v < 256; v += 17) {
            long r;

            memcpy(copy, b.data, b.len);
            copy[i] = (char)v;
            r = rl_handoff_next(copy, b.len, &rec, &out);
            ck_assert(r == -EINVAL || r == 0 || r == (long)b.len || (r > 0 && (size_t)r <= b.len));
        }
    }
    /* a length past the bound is refused before anything is read */
    memcpy(copy, "\x00\x01\x00\x01", 4);
    ck_assert_int_eq(rl_handoff_next(copy, b.len, &rec, &out), -EINVAL);
    free(copy);
    /* a concurrency key: its slots as log entries; an N past the cap is refused */
    k.algo = RL_ALGO_CONCURRENCY;
    k.st.shape = RL_ALGO_CONCURRENCY;
    k.limit = RL_CONF_CONCURRENCY_MAX;
    rl_buf_reset(&b);
    ck_assert_int_eq(rl_handoff_put_key(&b, &k), 0);
    ck_assert_int_eq(rl_handoff_next(b.data, b.len, &rec, &out), (long)b.len);
    ck_assert_uint_eq(out.algo, RL_ALGO_CONCURRENCY);
    ck_assert_uint_eq(out.st.nlog, 40);
    k.limit = RL_CONF_CONCURRENCY_MAX + 1;
    rl_buf_reset(&b);
    ck_assert_int_eq(rl_handoff_put_key(&b, &k), 0);
    ck_assert_int_eq(rl_handoff_next(b.data, b.len, &rec, &out), -EINVAL);
    rl_buf_deinit(&b);
}
END_TEST

static Suite *
handoff_suite(void)
{
    Suite *s = suite_create("handoff");
    TCase *tc = tcase_create("handoff");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_roundtrip_every_algorithm);
    tcase_add_test(tc, test_roundtrip_odd_offset);
    tcase_add_test(tc, test_roundtrip_clock_behind);
    tcase_add_test(tc, test_import_other_rules);
    tcase_add_test(tc, test_global_slice);
    tcase_add_test(tc, test_long_log);
    tcase_add_test(tc, test_imports_leave_the_scaled_tiers_reserve);
    tcase_add_test(tc, test_import_far_future);
    tcase_add_test(tc, test_decoder_bounded);
    tcase_add_test(tc, test_export_shard);
    tcase_add_test(tc, test_export_in_slices);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(handoff_suite)
