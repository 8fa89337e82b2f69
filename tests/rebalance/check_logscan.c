/*
 * check_logscan: the Check suite of tools/rebalance/logscan.c, the request log reader. Lines
 * are built here the way router/reqlog.c writes them (same escaping, real key hashes), then
 * fed whole, byte by byte and in every split, from memory and from files larger than one read
 * block. It checks the counts per shard and per key, each reason a line is skipped, the
 * line numbers reported, CRLF and a last line without newline, and the unescaping of names.
 * No timing assertions.
 */
#include "logscan.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reqline.h"
#include "rltest.h"
#include "shardmap.h"
#include "wire.h"

#define NSHARDS 4096u

/* The cheap assertion of rltest.h (calls into Check only when it fails). */
#define EXPECT(c) RL_CHECK(c)

/* One log line for (service, user), newline included, written by the router's own
 * formatter: the scanner is tested on what the writer really writes. */
static size_t
make_line(char *buf, uint64_t ts, const char *node, const char *svc, size_t slen, const char *user,
          size_t ulen)
{
    uint64_t h = rl_shardmap_key_hash(svc, slen, user, ulen);
    size_t o = rl_reqline_format(buf, ts, rl_shardmap_shard(h, NSHARDS),
                                 strcmp(node, "-") == 0 ? NULL : node, 0, h, svc, slen, user, ulen);

    buf[o] = '\0';
    return o;
}

static size_t
line_for(char *buf, const char *svc, const char *user)
{
    return make_line(buf, 1700000000000ull, "node-1", svc, strlen(svc), user, strlen(user));
}

static struct rl_logscan *
scanner(void)
{
    struct rl_logscan *s = NULL;

    ck_assert_int_eq(rl_logscan_create(&s, NSHARDS), 0);
    return s;
}

static void
feed_all(struct rl_logscan *s, const char *text, size_t len)
{
    ck_assert_int_eq(rl_logscan_begin(s, "test"), 0);
    ck_assert_int_eq(rl_logscan_feed(s, text, len), 0);
    ck_assert_int_eq(rl_logscan_end(s), 0);
}

/* A log of n lines over k keys, in a growing buffer. */
static char *
make_log(size_t n, size_t k, size_t *len)
{
    size_t cap = n * 96 + 1, o = 0, i;
    char *log = malloc(cap), user[32];

    ck_assert_ptr_nonnull(log);
    for (i = 0; i < n; i++) {
        snprintf(user, sizeof(user), "user %zu", (i * 7919) % k); /* a space: escaped */
        o += make_line(log + o, 1700000000000ull + i, i % 3 ? "node-2" : "-", "svc", 3, user,
                       strlen(user));
    }
    *len = o;
    return log;
}

static void
same_result(const struct rl_logscan *a, const struct rl_logscan *b)
{
    const struct rl_logscan_result *x = rl_logscan_result(a), *y = rl_logscan_result(b);

    EXPECT(x->lines == y->lines);
    EXPECT(x->requests == y->requests);
    EXPECT(x->malformed == y->malformed);
    EXPECT(x->distinct == y->distinct);
    EXPECT(x->bytes == y->bytes);
    EXPECT(memcmp(x->load, y->load, NSHARDS * sizeof(*x->load)) == 0);
    EXPECT(memcmp(x->keys, y->keys, NSHARDS * sizeof(*x->keys)) == 0);
    EXPECT(memcmp(x->reasons, y->reasons, sizeof(x->reasons)) == 0);
    EXPECT(x->nbad == y->nbad);
    EXPECT(memcmp(x->bad, y->bad, x->nbad * sizeof(x->bad[0])) == 0);
}

START_TEST(test_empty)
{
    struct rl_logscan *s = scanner();
    const struct rl_logscan_result *r = rl_logscan_result(s);
    char path[] = "/tmp/check_logscan_XXXXXX";
    int fd = mkstemp(path);
    uint32_t i;

    ck_assert_int_ge(fd, 0);
    close(fd);
    feed_all(s, "", 0);
    ck_assert_int_eq(rl_logscan_file(s, path), 0);
    unlink(path);
    ck_assert_uint_eq(r->lines, 0);
    ck_assert_uint_eq(r->requests, 0);
    ck_assert_uint_eq(r->malformed, 0);
    ck_assert_uint_eq(r->distinct, 0);
    ck_assert_uint_eq(r->sources, 2);
    for (i = 0; i < NSHARDS; i++) {
        EXPECT(r->load[i] == 0 && r->keys[i] == 0);
    }
    rl_logscan_destroy(s);
}
END_TEST

START_TEST(test_counts)
{
    struct rl_logscan *s = scanner();
    const struct rl_logscan_result *r = rl_logscan_result(s);
    struct rl_logscan_key *keys;
    char log[4096];
    size_t o = 0, n, i;
    uint64_t ha = rl_shardmap_key_hash("checkout", 8, "alice", 5);
    uint64_t hb = rl_shardmap_key_hash("checkout", 8, "bob", 3);

    for (i = 0; i < 5; i++) {
        o += line_for(log + o, "checkout", "alice");
    }
    o += line_for(log + o, "checkout", "bob");
    o += line_for(log + o, "checkout", "bob");
    o += line_for(log + o, "search", "carol");
    feed_all(s, log, o);
    ck_assert_uint_eq(r->lines, 8);
    ck_assert_uint_eq(r->requests, 8);
    ck_assert_uint_eq(r->malformed, 0);
    ck_assert_uint_eq(r->distinct, 3);
    ck_assert_uint_eq(r->bytes, o);
    ck_assert_uint_ge(r->load[ha % NSHARDS], 5);
    ck_assert_uint_ge(r->keys[ha % NSHARDS], 1);
    ck_assert_int_eq(rl_logscan_keys_above(s, 1, &keys, &n), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(keys[0].hash, ha);
    ck_assert_uint_eq(keys[0].count, 5);
    ck_assert_uint_eq(keys[0].shard, ha % NSHARDS);
    ck_assert_int_eq((int)keys[0].slen, 8);
    ck_assert(memcmp(keys[0].service, "checkout", 8) == 0);
    ck_assert(keys[0].ulen == 5 && memcmp(keys[0].user, "alice", 5) == 0);
    ck_assert_uint_eq(keys[1].hash, hb);
    ck_assert_uint_eq(keys[1].count, 2);
    free(keys);
    ck_assert_int_eq(rl_logscan_keys_above(s, 5, &keys, &n), 0);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(keys);
    rl_logscan_destroy(s);
}
END_TEST

/* The answers a router gives itself wherever the shard is: NO_RULE (anyone may send CHECKs
 * of a service without rules, for users chosen to land in shards of their choice) and its
 * deny cache's LIMITED are read but are no shard's load; the failure policy's answers are
 * demand the shard's node serves when it is up, and count. */
START_TEST(test_router_answers_are_no_load)
{
    struct rl_logscan *s = scanner();
    const struct rl_logscan_result *r = rl_logscan_result(s);
    char log[4096];
    size_t o = 0;
    uint64_t h = rl_shardmap_key_hash("nosuch", 6, "crafted", 7);
    uint64_t hp = rl_shardmap_key_hash("checkout", 8, "dora", 4);
    uint32_t sh = rl_shardmap_shard(h, NSHARDS), shp = rl_shardmap_shard(hp, NSHARDS);

    for (int i = 0; i < 5; i++) {
        o += rl_reqline_format(log + o, 1700000000000ull, sh, "node-1", RL_WIRE_NO_RULE, h,
                               "nosuch", 6, "crafted", 7);
    }
    o += rl_reqline_format(log + o, 1700000000000ull, shp, "node-1", RL_WIRE_FAIL_OPEN, hp,
                           "checkout", 8, "dora", 4);
    o += line_for(log + o, "checkout", "alice");
    feed_all(s, log, o);
    ck_assert_uint_eq(r->lines, 7);
    ck_assert_uint_eq(r->no_rule, 5);
    ck_assert_uint_eq(r->requests, 2);
    ck_assert_uint_eq(r->malformed, 0);
    ck_assert_uint_eq(r->load[sh], sh == shp ? 1 : 0);
    ck_assert_uint_ge(r->load[shp], 1);
    rl_logscan_destroy(s);
}
END_TEST

/* Distinct keys per shard, over enough keys to grow the table several times. */
START_TEST(test_distinct)
{
    struct rl_logscan *s = scanner();
    const struct rl_logscan_result *r = rl_logscan_result(s);
    uint64_t *want = calloc(NSHARDS, sizeof(*want)), sum = 0;
    size_t len, i;
    char *log = make_log(200000, 50000, &len), user[32];

    ck_assert_ptr_nonnull(want);
    for (i = 0; i < 50000; i++) {
        snprintf(user, sizeof(user), "user %zu", i);
        want[rl_shardmap_key_hash("svc", 3, user, strlen(user)) % NSHARDS]++;
    }
    feed_all(s, log, len);
    feed_all(s, log, len); /* the same keys again: nothing new */
    ck_assert_uint_eq(r->requests, 400000);
    ck_assert_uint_eq(r->distinct, 50000);
    for (i = 0; i < NSHARDS; i++) {
        EXPECT(r->keys[i] == want[i]);
        sum += r->keys[i];
    }
    ck_assert_uint_eq(sum, 50000);
    free(want);
    free(log);
    rl_logscan_destroy(s);
}
END_TEST

/* Malformed lines: "%H" stands for the key hash of (svc, u) and "%S" for its shard. */
static const struct {
    const char *line;
    enum rl_logscan_reason reason;
} bad_lines[] = {
    {"", RL_LOGSCAN_FIELDS},
    {"1700000000000", RL_LOGSCAN_FIELDS},
    {"1 %S node 0 %H svc", RL_LOGSCAN_FIELDS},
    {"1 %S node 0 %H svc u extra", RL_LOGSCAN_FIELDS},
    {"1  %S node 0 %H svc u", RL_LOGSCAN_FIELDS},
    {"1 %S node 0 %H svc  u", RL_LOGSCAN_FIELDS},
    {"1 %S node 0 %H svc u ", RL_LOGSCAN_FIELDS},
    {" 1 %S node 0 %H svc u", RL_LOGSCAN_FIELDS},
    {"1\t%S node 0 %H svc u", RL_LOGSCAN_TIMESTAMP},
    {"x %S node 0 %H svc u", RL_LOGSCAN_TIMESTAMP},
    {"-1 %S node 0 %H svc u", RL_LOGSCAN_TIMESTAMP},
    {"123456789012345678901 %S node 0 %H svc u", RL_LOGSCAN_TIMESTAMP},
    {"1 x node 0 %H svc u", RL_LOGSCAN_SHARD},
    {"1 12345678901 node 0 %H svc u", RL_LOGSCAN_SHARD},
    {"1 4096 node 0 %H svc u", RL_LOGSCAN_SHARD_RANGE},
    {"1 %T node 0 %H svc u", RL_LOGSCAN_SHARD_MISMATCH},
    {"1 %S node x %H svc u", RL_LOGSCAN_CODE},
    {"1 %S no\x01"
     "de 0 %H svc u",
     RL_LOGSCAN_NODE},
    {"1 %S node 0 0123 svc u", RL_LOGSCAN_KEYHASH},
    {"1 %S node 0 %Hf svc u", RL_LOGSCAN_KEYHASH},
    {"1 %S node 0 0123456789abcdeg svc u", RL_LOGSCAN_KEYHASH},
    {"1 %S node 0 0x23456789abcdef svc u", RL_LOGSCAN_KEYHASH},
    {"1 %S node 0 %H s\x01"
     "vc u",
     RL_LOGSCAN_NAME},
    {"1 %S node 0 %H svc u\x7f", RL_LOGSCAN_NAME},
    {"1 %S node 0 %H svc u\xc3\xa9", RL_LOGSCAN_NAME},
    {"1 %S node 0 %H svc u%", RL_LOGSCAN_NAME},
    {"1 %S node 0 %H svc u%4", RL_LOGSCAN_NAME},
    {"1 %S node 0 %H svc u%zz", RL_LOGSCAN_NAME},
};

/* Expands %H, %S and %T (a shard that is not the key's) for the key (svc, u). */
static size_t
expand(char *out, const char *tmpl)
{
    uint64_t h = rl_shardmap_key_hash("svc", 3, "u", 1);
    size_t o = 0;

    for (const char *p = tmpl; *p != '\0'; p++) {
        if (p[0] == '%' && p[1] == 'H') {
            o += (size_t)sprintf(out + o, "%016" PRIx64, h);
            p++;
        } else if (p[0] == '%' && p[1] == 'S') {
            o += (size_t)sprintf(out + o, "%u", rl_shardmap_shard(h, NSHARDS));
            p++;
        } else if (p[0] == '%' && p[1] == 'T') {
            o += (size_t)sprintf(out + o, "%u", (rl_shardmap_shard(h, NSHARDS) + 1) % NSHARDS);
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o++] = '\n';
    return o;
}

START_TEST(test_malformed)
{
    struct rl_logscan *s = scanner();
    const struct rl_logscan_result *r = rl_logscan_result(s);
    char buf[512];
    size_t n = expand(buf, bad_lines[_i].line);

    feed_all(s, buf, n);
    ck_assert_msg(r->malformed == 1, "line \"%s\": %" PRIu64 " malformed, %" PRIu64 " kept",
                  bad_lines[_i].line, r->malformed, r->requests);
    ck_assert_msg(r->reasons[bad_lines[_i].reason] == 1, "line \"%s\": expected \"%s\", got \"%s\"",
                  bad_lines[_i].line, rl_logscan_reason_text(bad_lines[_i].reason),
                  rl_logscan_reason_text(r->bad[0].reason));
    ck_assert_uint_eq(r->lines, 1);
    ck_assert_uint_eq(r->requests, 0);
    ck_assert_uint_eq(r->distinct, 0);
    ck_assert_uint_eq(r->nbad, 1);
    ck_assert_uint_eq(r->bad[0].line, 1);
    ck_assert_uint_eq(r->bad[0].source, 0);
    /* The same line followed by a good one: the good one still counts. */
    n = expand(buf, "1 %S node 0 %H svc u");
    feed_all(s, buf, n);
    ck_assert_uint_eq(r->requests, 1);
    /* And the bad line again, now that its key has been seen: still malformed (the names of a
     * key seen before are not unescaped again, but every line's escapes are checked). */
    n = expand(buf, bad_lines[_i].line);
    feed_all(s, buf, n);
    ck_assert_msg(r->malformed == 2, "line \"%s\" after its key: %" PRIu64 " malformed",
                  bad_lines[_i].line, r->malformed);
    ck_assert_uint_eq(r->reasons[bad_lines[_i].reason], 2);
    ck_assert_uint_eq(r->requests, 1);
    rl_logscan_destroy(s);
}
END_TEST

START_TEST(test_reason_text)
{
    ck_assert_str_eq(rl_logscan_reason_text(RL_LOGSCAN_TOO_LONG), "line is longer than 4096 bytes");
    ck_assert_str_eq(rl_logscan_reason_text(RL_LOGSCAN_REASON_COUNT), "unknown");
}
END_TEST

/* Malformed lines are counted by reason, and the first ones are reported in line order,
 * with their source, even when a good-looking line is judged after the lines behind it. */
START_TEST(test_bad_examples)
{
    struct rl_logscan *s = scanner();
    const struct rl_logscan_result *r = rl_logscan_result(s);
    char log[8192];
    size_t o = 0, i;

    o += line_for(log + o, "svc", "w");
    /* Line 2: the first line of (svc, u)'s hash, with a bad escape: judged when its batch is
     * counted, after line 3. */
    o += expand(log + o, "1 %S node 0 %H svc u%zz");
    o += expand(log + o, "x");
    o += line_for(log + o, "svc", "u");
    for (i = 0; i < 6; i++) {
        o += expand(log + o, "1 2 3"); /* lines 5..10 */
    }
    ck_assert_int_eq(rl_logscan_begin(s, "a.log"), 0);
    ck_assert_int_eq(rl_logscan_feed(s, log, o), 0);
    ck_assert_int_eq(rl_logscan_end(s), 0);
    ck_assert_uint_eq(r->lines, 10);
    ck_assert_uint_eq(r->requests, 2);
    ck_assert_uint_eq(r->malformed, 8);
    ck_assert_uint_eq(r->reasons[RL_LOGSCAN_NAME], 1);
    ck_assert_uint_eq(r->reasons[RL_LOGSCAN_TIMESTAMP], 1);
    ck_assert_uint_eq(r->reasons[RL_LOGSCAN_FIELDS], 6);
    ck_assert_uint_eq(r->nbad, RL_LOGSCAN_EXAMPLES);
    ck_assert_uint_eq(r->bad[0].line, 2);
    ck_assert_int_eq(r->bad[0].reason, RL_LOGSCAN_NAME);
    ck_assert_uint_eq(r->bad[1].line, 3);
    ck_assert_int_eq(r->bad[1].reason, RL_LOGSCAN_TIMESTAMP);
    for (i = 2; i < RL_LOGSCAN_EXAMPLES; i++) {
        ck_assert_uint_eq(r->bad[i].line, i + 3);
    }
    /* A second source: line numbers start again, and later lines do not displace earlier. */
    ck_assert_int_eq(rl_logscan_begin(s, "b.log"), 0);
    ck_assert_int_eq(rl_logscan_feed(s, "bad\n", 4), 0);
    ck_assert_int_eq(rl_logscan_end(s), 0);
    ck_assert_uint_eq(r->malformed, 9);
    ck_assert_uint_eq(r->bad[RL_LOGSCAN_EXAMPLES - 1].source, 0);
    ck_assert_uint_eq(r->sources, 2);
    rl_logscan_destroy(s);

    /* With room left, the second source's line is kept, with its source and line. */
    s = scanner();
    r = rl_logscan_result(s);
    feed_all(s, "bad\n", 4);
    ck_assert_int_eq(rl_logscan_begin(s, "b.log"), 0);
    ck_assert_int_eq(rl_logscan_feed(s, "\nbad\n", 5), 0);
    ck_assert_int_eq(rl_logscan_end(s), 0);
    ck_assert_uint_eq(r->nbad, 3);
    ck_assert(r->bad[0].source == 0 && r->bad[0].line == 1);
    ck_assert(r->bad[1].source == 1 && r->bad[1].line == 1);
    ck_assert(r->bad[2].source == 1 && r->bad[2].line == 2);
    rl_logscan_destroy(s);
}
END_TEST

/* A log fed in pieces of every size, and at random cuts, counts exactly as fed whole. */
START_TEST(test_split_pieces)
{
    struct rl_logscan *whole = scanner(), *s;
    size_t l1, l2, blen, len, piece, o;
    char *a = make_log(150, 40, &l1), *b = make_log(150, 60, &l2), bad[256], *log;

    /* A malformed line in the middle, so that line numbers are compared too. */
    blen = expand(bad, "1 %S node 0 %H svc u%zz");
    len = l1 + blen + l2;
    log = malloc(len);
    ck_assert_ptr_nonnull(log);
    memcpy(log, a, l1);
    memcpy(log + l1, bad, blen);
    memcpy(log + l1 + blen, b, l2);
    feed_all(whole, log, len);
    ck_assert_uint_eq(rl_logscan_result(whole)->malformed, 1);
    ck_assert_uint_eq(rl_logscan_result(whole)->bad[0].line, 151);
    for (piece = 1; piece <= 97; piece++) {
        s = scanner();
        ck_assert_int_eq(rl_logscan_begin(s, "test"), 0);
        for (o = 0; o < len; o += piece) {
            ck_assert_int_eq(rl_logscan_feed(s, log + o, len - o < piece ? len - o : piece), 0);
        }
        ck_assert_int_eq(rl_logscan_end(s), 0);
        same_result(whole, s);
        rl_logscan_destroy(s);
    }
    rl_logscan_destroy(whole);
    free(a);
    free(b);
    free(log);
}
END_TEST

START_TEST(test_split_random)
{
    struct rl_logscan *whole = scanner(), *s;
    uint64_t seed = 12345;
    size_t len, o, cut;
    char *log = make_log(5000, 700, &len);
    int round;

    feed_all(whole, log, len);
    ck_assert_uint_eq(rl_logscan_result(whole)->requests, 5000);
    for (round = 0; round < 20; round++) {
        s = scanner();
        ck_assert_int_eq(rl_logscan_begin(s, "test"), 0);
        for (o = 0; o < len; o += cut) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            cut = 1 + (size_t)((seed >> 33) % 3000);
            cut = cut > len - o ? len - o : cut;
            ck_assert_int_eq(rl_logscan_feed(s, log + o, cut), 0);
        }
        ck_assert_int_eq(rl_logscan_end(s), 0);
        same_result(whole, s);
        rl_logscan_destroy(s);
    }
    rl_logscan_destroy(whole);
    free(log);
}
END_TEST

/* A line over RL_LOGSCAN_LINE_MAX is one malformed line, whole or in pieces; the next line
 * counts; a line of exactly the maximum is read. */
START_TEST(test_overlong)
{
    size_t max = RL_LOGSCAN_LINE_MAX, n, o, piece;
    char *log = malloc(3 * max + 1024), good[512];
    size_t glen = line_for(good, "svc", "u");
    static const size_t pieces[] = {1, 7, 100, 4095, 4096, 4097, 100000};

    ck_assert_ptr_nonnull(log);
    /* Line 1: too long. Line 2: good. Line 3: exactly max bytes (a good line padded in its
     * user field is not valid, so a malformed line of max bytes, read and judged). */
    memset(log, 'x', max + 1);
    o = max + 1;
    log[o++] = '\n';
    memcpy(log + o, good, glen);
    o += glen;
    memset(log + o, 'y', max);
    o += max;
    log[o++] = '\n';
    memcpy(log + o, good, glen);
    o += glen;
    n = o;
    for (size_t k = 0; k < sizeof(pieces) / sizeof(pieces[0]); k++) {
        struct rl_logscan *s = scanner();
        const struct rl_logscan_result *r = rl_logscan_result(s);

        piece = pieces[k];
        ck_assert_int_eq(rl_logscan_begin(s, "test"), 0);
        for (o = 0; o < n; o += piece) {
            ck_assert_int_eq(rl_logscan_feed(s, log + o, n - o < piece ? n - o : piece), 0);
        }
        ck_assert_int_eq(rl_logscan_end(s), 0);
        ck_assert_msg(r->lines == 4, "piece %zu: %" PRIu64 " lines", piece, r->lines);
        ck_assert_uint_eq(r->requests, 2);
        ck_assert_uint_eq(r->reasons[RL_LOGSCAN_TOO_LONG], 1);
        ck_assert_uint_eq(r->reasons[RL_LOGSCAN_TIMESTAMP], 1);
        ck_assert_uint_eq(r->bad[0].line, 1);
        ck_assert_uint_eq(r->bad[1].line, 3);
        ck_assert_int_eq(r->bad[1].reason, RL_LOGSCAN_TIMESTAMP);
        rl_logscan_destroy(s);
    }
    /* Too long and never ended by a newline. */
    {
        struct rl_logscan *s = scanner();

        ck_assert_int_eq(rl_logscan_begin(s, "test"), 0);
        ck_assert_int_eq(rl_logscan_feed(s, log, max), 0);
        ck_assert_int_eq(rl_logscan_feed(s, log, max), 0);
        ck_assert_int_eq(rl_logscan_end(s), 0);
        ck_assert_uint_eq(rl_logscan_result(s)->reasons[RL_LOGSCAN_TOO_LONG], 1);
        ck_assert_uint_eq(rl_logscan_result(s)->lines, 1);
        rl_logscan_destroy(s);
    }
    free(log);
}
END_TEST

START_TEST(test_crlf_and_last_line)
{
    struct rl_logscan *s = scanner();
    const struct rl_logscan_result *r = rl_logscan_result(s);
    char log[1024], *nl;
    size_t o = 0, n;

    n = line_for(log + o, "svc", "u");
    log[o + n - 1] = '\r';
    log[o + n] = '\n';
    o += n + 1;
    n = line_for(log + o, "svc", "v");
    o += n - 1; /* no newline at the end */
    feed_all(s, log, o);
    ck_assert_uint_eq(r->lines, 2);
    ck_assert_uint_eq(r->requests, 2);
    ck_assert_uint_eq(r->distinct, 2);
    /* A lone '\r' inside a line is not a blank. */
    n = line_for(log, "svc", "u");
    nl = strchr(log, ' ');
    *nl = '\r';
    feed_all(s, log, n);
    ck_assert_uint_eq(r->malformed, 1);
    rl_logscan_destroy(s);
}
END_TEST

START_TEST(test_unescape)
{
    char out[64];

    ck_assert_int_eq(rl_reqline_unescape("abc", 3, out), 3);
    ck_assert(memcmp(out, "abc", 3) == 0);
    ck_assert_int_eq(rl_reqline_unescape("a%20b%25c", 9, out), 5);
    ck_assert(memcmp(out, "a b%c", 5) == 0);
    ck_assert_int_eq(rl_reqline_unescape("%00%ff%C3%A9", 12, out), 4);
    ck_assert(memcmp(out, "\x00\xff\xc3\xa9", 4) == 0);
    ck_assert_int_eq(rl_reqline_unescape("-", 1, out), 0);
    ck_assert_int_eq(rl_reqline_unescape("%2d", 3, out), 1);
    ck_assert_int_eq(out[0], '-');
    ck_assert_int_eq(rl_reqline_unescape("--", 2, out), 2);
    ck_assert_int_eq(rl_reqline_unescape("%", 1, out), -EINVAL);
    ck_assert_int_eq(rl_reqline_unescape("%4", 2, out), -EINVAL);
    ck_assert_int_eq(rl_reqline_unescape("%4g", 3, out), -EINVAL);
    ck_assert_int_eq(rl_reqline_unescape("a b", 3, out), -EINVAL);
    ck_assert_int_eq(rl_reqline_unescape("a\x01", 2, out), -EINVAL);
}
END_TEST

/* Names that need escaping (spaces, '%', bytes above 0x7e, empty, a literal "-") are logged
 * escaped, verified against the key hash, and kept as logged. */
START_TEST(test_escaped_names)
{
    static const struct {
        const char *svc, *user;
        size_t slen, ulen;
    } keys[] = {
        {"check out", "al ice", 9, 6},
        {"svc", "50%", 3, 3},
        {"svc", "caf\xc3\xa9", 3, 5},
        {"svc", "", 3, 0},
        {"svc", "-", 3, 1},
        {"", "u", 0, 1},
        {"svc", "nul\0byte", 3, 8},
        {"svc", "tab\tnl\n", 3, 7},
    };
    struct rl_logscan *s = scanner();
    const struct rl_logscan_result *r = rl_logscan_result(s);
    struct rl_logscan_key *found;
    char log[4096], esc[64];
    size_t o = 0, n, i, k;

    for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        /* Key i gets i + 2 lines, so the ranking below knows which is which. */
        for (k = 0; k < i + 2; k++) {
            o += make_line(log + o, 1, "-", keys[i].svc, keys[i].slen, keys[i].user, keys[i].ulen);
        }
    }
    feed_all(s, log, o);
    ck_assert_uint_eq(r->malformed, 0);
    ck_assert_uint_eq(r->distinct, sizeof(keys) / sizeof(keys[0]));
    ck_assert_int_eq(rl_logscan_keys_above(s, 0, &found, &n), 0);
    ck_assert_uint_eq(n, sizeof(keys) / sizeof(keys[0]));
    for (i = 0; i < n; i++) {
        size_t want = n - 1 - i;
        char un[64];

        ck_assert_uint_eq(found[i].count, want + 2);
        ck_assert(found[i].verified);
        ck_assert_uint_eq(found[i].hash, rl_shardmap_key_hash(keys[want].svc, keys[want].slen,
                                                              keys[want].user, keys[want].ulen));
        k = rl_reqline_escape(esc, keys[want].user, keys[want].ulen);
        ck_assert_uint_eq(found[i].ulen, k);
        ck_assert(memcmp(found[i].user, esc, k) == 0);
        if (keys[want].ulen > 0 && strcmp(keys[want].user, "-") != 0) {
            ck_assert_int_eq(rl_reqline_unescape(found[i].user, found[i].ulen, un),
                             (int)keys[want].ulen);
            ck_assert(memcmp(un, keys[want].user, keys[want].ulen) == 0);
        }
    }
    free(found);
    /* A needless escape still names the key: the check is on the unescaped bytes. */
    o = line_for(log, "svc", "u");
    memcpy(log + o - 2, "%75\n", 4);
    feed_all(s, log, o + 2);
    ck_assert_uint_eq(r->malformed, 0);
    rl_logscan_destroy(s);
}
END_TEST

/*
 * A key logged under names that do not hash to it (a router that cuts long names short, or
 * a corrupt name) still counts: the key hash decides. The key is marked unverified, and
 * its first names are kept as logged.
 */
START_TEST(test_unverified_names)
{
    struct rl_logscan *s = scanner();
    const struct rl_logscan_result *r = rl_logscan_result(s);
    struct rl_logscan_key *found;
    char log[1024];
    size_t o = 0, n;

    o += expand(log + o, "1 %S node 0 %H svc u-cut-short");
    o += line_for(log + o, "svc", "u");
    o += expand(log + o, "1 %S node 0 %H - u");
    o += line_for(log + o, "svc", "w");
    feed_all(s, log, o);
    ck_assert_uint_eq(r->malformed, 0);
    ck_assert_uint_eq(r->requests, 4);
    ck_assert_uint_eq(r->distinct, 2);
    ck_assert_uint_eq(r->unverified, 1);
    ck_assert_int_eq(rl_logscan_keys_above(s, 1, &found, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(found[0].count, 3);
    ck_assert(!found[0].verified);
    ck_assert(found[0].ulen == 11 && memcmp(found[0].user, "u-cut-short", 11) == 0);
    free(found);
    rl_logscan_destroy(s);
}
END_TEST

/* Files: larger than a read block, so lines straddle reads; "-" is standard input; a file
 * that cannot be opened is an error, not a count. */
START_TEST(test_file)
{
    struct rl_logscan *mem = scanner(), *s = scanner();
    char path[] = "/tmp/check_logscan_XXXXXX";
    size_t len;
    char *log = make_log(60000, 5000, &len);
    int fd = mkstemp(path);

    ck_assert_uint_gt(len, 2 * RL_LOGSCAN_BLOCK);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, log, len), (ssize_t)len);
    close(fd);
    feed_all(mem, log, len);
    ck_assert_int_eq(rl_logscan_file(s, path), 0);
    same_result(mem, s);
    ck_assert_uint_eq(rl_logscan_result(s)->requests, 60000);

    /* Standard input. */
    fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(dup2(fd, STDIN_FILENO), STDIN_FILENO);
    close(fd);
    ck_assert_int_eq(rl_logscan_file(s, "-"), 0);
    ck_assert_uint_eq(rl_logscan_result(s)->requests, 120000);
    ck_assert_uint_eq(rl_logscan_result(s)->distinct, 5000);
    unlink(path);
    ck_assert_int_eq(rl_logscan_file(s, path), -ENOENT);
    ck_assert_int_eq(rl_logscan_file(s, "/"), -EISDIR);
    ck_assert_uint_eq(rl_logscan_result(s)->requests, 120000);
    free(log);
    rl_logscan_destroy(mem);
    rl_logscan_destroy(s);
}
END_TEST

START_TEST(test_stop_flag)
{
    volatile sig_atomic_t stop = 1;
    struct rl_logscan *s = scanner();

    rl_logscan_set_stop(s, &stop);
    ck_assert_int_eq(rl_logscan_file(s, "/dev/zero"), -EINTR);
    rl_logscan_destroy(s);
}
END_TEST

START_TEST(test_create_errors)
{
    struct rl_logscan *s = (struct rl_logscan *)1;

    ck_assert_int_eq(rl_logscan_create(&s, 0), -EINVAL);
    ck_assert_ptr_null(s);
    ck_assert_int_eq(rl_logscan_create(&s, RL_SHARDMAP_SHARDS_MAX + 1), -EINVAL);
    rl_logscan_destroy(NULL);
}
END_TEST

static Suite *
logscan_suite(void)
{
    Suite *s = suite_create("logscan");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_empty);
    tcase_add_test(tc, test_counts);
    tcase_add_test(tc, test_router_answers_are_no_load);
    tcase_add_test(tc, test_distinct);
    tcase_add_loop_test(tc, test_malformed, 0, (int)(sizeof(bad_lines) / sizeof(bad_lines[0])));
    tcase_add_test(tc, test_reason_text);
    tcase_add_test(tc, test_bad_examples);
    tcase_add_test(tc, test_split_pieces);
    tcase_add_test(tc, test_split_random);
    tcase_add_test(tc, test_overlong);
    tcase_add_test(tc, test_crlf_and_last_line);
    tcase_add_test(tc, test_unescape);
    tcase_add_test(tc, test_escaped_names);
    tcase_add_test(tc, test_unverified_names);
    tcase_add_test(tc, test_file);
    tcase_add_test(tc, test_stop_flag);
    tcase_add_test(tc, test_create_errors);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(logscan_suite)
