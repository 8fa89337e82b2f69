/*
 * check_shardmap: the Check suite of the shard map's three modules, one test case each:
 * common/shardmap.c ("core"), common/assignment.c and common/view.c. Known-answer tests pin the key
 * hash, the shard and the rendezvous owners to literal values, so any change to the mapping (which
 * would make routers of two versions disagree) fails here; property tests check order
 * independence, minimal movement on leave and join, overrides, the text format and balance.
 * Not a benchmark: bench/shardmap_balance.c and bench/shardmap_bench.c measure.
 */
#include "rltest.h"
#include "assignment.h"
#include "shardmap.h"
#include "view.h"

#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define NSHARDS 4096u

/* A deterministic generator for shuffles, so that a failure reproduces. */
static uint64_t
rand64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void
shuffle(struct rl_member *m, size_t n, uint64_t *state)
{
    struct rl_member t;
    size_t i, j;

    for (i = n; i > 1; i--) {
        j = (size_t)(rand64(state) % i);
        t = m[i - 1];
        m[i - 1] = m[j];
        m[j] = t;
    }
}

/* Members "node-1" .. "node-n" (n <= 128). */
static void
nodes(struct rl_member *m, size_t n)
{
    size_t i;

    memset(m, 0, n * sizeof(*m));
    for (i = 0; i < n; i++) {
        snprintf(m[i].name, sizeof(m[i].name), "node-%zu", i + 1);
        snprintf(m[i].addr, sizeof(m[i].addr), "127.0.0.1:%zu", 7401 + i);
    }
}

static struct rl_shardmap *
build(const struct rl_member *m, size_t n, const struct rl_assignment *a)
{
    struct rl_shardmap *sm = NULL;

    RL_CHECK_INT_EQ(rl_shardmap_create(&sm, NSHARDS, m, n, a), 0);
    RL_CHECK(sm != NULL);
    return sm;
}

/* The owner's name of shard s, or "" for none. */
static const char *
owner_name(const struct rl_shardmap *sm, uint32_t s)
{
    uint32_t o = rl_shardmap_owner(sm, s);

    return o == RL_SHARDMAP_NONE ? "" : sm->members[o].name;
}

static uint64_t
key_hash(const char *service, const char *user)
{
    return rl_shardmap_key_hash(service, strlen(service), user, strlen(user));
}

START_TEST(test_key_hash_known)
{
    /* Cross-checked with `xxhsum -H3` over the bytes service, 0x00, user. */
    ck_assert_uint_eq(key_hash("checkout", "u42"), 0x28eab3f4db03304dull);
    ck_assert_uint_eq(key_hash("search", "203.0.113.7"), 0x7e279fdff3db7df4ull);
    ck_assert_uint_eq(key_hash("api", "key_9f8e7d6c5b4a"), 0x79c8c489dfa170bdull);
    ck_assert_uint_eq(key_hash("a", ""), 0x0d78baac08237ddbull);
    ck_assert_uint_eq(key_hash("", ""), 0xc44bdff4074eecdbull);

    ck_assert_uint_eq(rl_shardmap_shard(key_hash("checkout", "u42"), NSHARDS), 77);
    ck_assert_uint_eq(rl_shardmap_shard(key_hash("search", "203.0.113.7"), NSHARDS), 3572);
    ck_assert_uint_eq(rl_shardmap_shard(key_hash("api", "key_9f8e7d6c5b4a"), NSHARDS), 189);
    ck_assert_uint_eq(rl_shardmap_shard(key_hash("a", ""), NSHARDS), 3547);
}
END_TEST

START_TEST(test_key_hash_lengths)
{
    /*
     * Every split of keys around the stack buffer's size (385 bytes) hashes as XXH3 of the
     * concatenation, whether it takes the stack or the streaming path.
     */
    static const size_t lens[] = {0, 1, 16, 17, 128, 129, 240, 241, 256, 257, 383, 384, 385, 1000};
    size_t nl = sizeof(lens) / sizeof(lens[0]), i, j;
    char *s = malloc(1000), *u = malloc(1000), *cat = malloc(2001);
    uint64_t st = 42;

    ck_assert_ptr_nonnull(s);
    ck_assert_ptr_nonnull(u);
    ck_assert_ptr_nonnull(cat);
    for (i = 0; i < 1000; i++) {
        s[i] = (char)rand64(&st);
        u[i] = (char)rand64(&st);
    }
    for (i = 0; i < nl; i++) {
        for (j = 0; j < nl; j++) {
            memcpy(cat, s, lens[i]);
            cat[lens[i]] = '\0';
            memcpy(cat + lens[i] + 1, u, lens[j]);
            RL_CHECK_UINT_EQ(rl_shardmap_key_hash(s, lens[i], u, lens[j]),
                             XXH3_64bits(cat, lens[i] + 1 + lens[j]));
        }
    }
    free(s);
    free(u);
    free(cat);
}
END_TEST

START_TEST(test_owner_known)
{
    /* Cross-checked with an independent Python implementation of docs/SHARDING.md. */
    static const char want[] = "bbcababaaacc";
    struct rl_member m[3] = {{"c", "h:3", 0, 0, 0}, {"a", "h:1", 0, 0, 0}, {"b", "h:2", 0, 0, 0}};
    struct rl_shardmap *sm = build(m, 3, NULL);
    uint32_t s;
    char name[2] = {0};

    ck_assert_str_eq(sm->members[0].name, "a");
    ck_assert_str_eq(sm->members[0].addr, "h:1");
    ck_assert_str_eq(sm->members[2].name, "c");
    for (s = 0; s < 12; s++) {
        name[0] = want[s];
        RL_CHECK(strcmp(owner_name(sm, s), name) == 0, "shard %u: %s, want %s", s,
                 owner_name(sm, s), name);
    }
    ck_assert_str_eq(owner_name(sm, 4095), "c");
    /* The shards of the known keys above: checkout/u42, search/203.0.113.7, api/key_... */
    ck_assert_str_eq(owner_name(sm, 77), "c");
    ck_assert_str_eq(owner_name(sm, 3572), "a");
    ck_assert_str_eq(owner_name(sm, 189), "a");
    ck_assert_uint_eq(rl_shardmap_hrw(0, m, 3), 2); /* m[2] is "b" */
    ck_assert_uint_eq(rl_shardmap_hrw(2, m, 3), 0); /* m[0] is "c" */
    rl_shardmap_destroy(sm);
}
END_TEST

START_TEST(test_order_independent)
{
    struct rl_member m[10];
    struct rl_assignment a;
    struct rl_shardmap *ref, *sm;
    uint64_t st = 7;
    uint32_t s;
    int k;

    nodes(m, 10);
    ck_assert_int_eq(rl_assignment_init(&a, NSHARDS), 0);
    ck_assert_int_eq(rl_assignment_set(&a, 3, "node-4"), 0);
    ck_assert_int_eq(rl_assignment_set(&a, 4000, "gone"), 0);
    ref = build(m, 10, &a);
    for (k = 0; k < 20; k++) {
        shuffle(m, 10, &st);
        sm = build(m, 10, &a);
        for (s = 0; s < NSHARDS; s++) {
            RL_CHECK_STR_EQ(owner_name(sm, s), owner_name(ref, s));
        }
        rl_shardmap_destroy(sm);
    }
    rl_shardmap_destroy(ref);
    rl_assignment_deinit(&a);
}
END_TEST

START_TEST(test_hrw_agrees)
{
    struct rl_member m[13];
    struct rl_shardmap *sm;
    uint64_t st = 9;
    uint32_t s, o;

    nodes(m, 13);
    shuffle(m, 13, &st);
    sm = build(m, 13, NULL);
    for (s = 0; s < NSHARDS; s++) {
        o = rl_shardmap_hrw(s, m, 13);
        RL_CHECK_UINT_NE(o, RL_SHARDMAP_NONE);
        RL_CHECK_STR_EQ(m[o].name, owner_name(sm, s));
    }
    ck_assert_uint_eq(rl_shardmap_hrw(0, m, 0), RL_SHARDMAP_NONE);
    rl_shardmap_destroy(sm);
}
END_TEST

START_TEST(test_leave_moves_only_its_shards)
{
    struct rl_member m[16], rest[16];
    struct rl_shardmap *all, *sm;
    size_t n, gone, i, j;
    uint32_t s, moved, owned;

    for (n = 2; n <= 16; n++) {
        nodes(m, n);
        all = build(m, n, NULL);
        for (gone = 0; gone < n; gone++) {
            for (i = 0, j = 0; i < n; i++) {
                if (i != gone) {
                    rest[j++] = m[i];
                }
            }
            sm = build(rest, n - 1, NULL);
            moved = owned = 0;
            for (s = 0; s < NSHARDS; s++) {
                bool was_gone = strcmp(owner_name(all, s), m[gone].name) == 0;
                bool changed = strcmp(owner_name(all, s), owner_name(sm, s)) != 0;

                owned += was_gone;
                moved += changed;
                RL_CHECK(changed == was_gone, "n=%zu, %s left: shard %u moved %s -> %s", n,
                         m[gone].name, s, owner_name(all, s), owner_name(sm, s));
            }
            RL_CHECK_UINT_EQ(moved, owned);
            rl_shardmap_destroy(sm);
        }
        rl_shardmap_destroy(all);
    }
}
END_TEST

START_TEST(test_join_moves_only_to_it)
{
    struct rl_member m[33];
    struct rl_shardmap *before, *after;
    size_t n;
    uint32_t s, taken;

    for (n = 1; n <= 32; n++) {
        nodes(m, n + 1);
        before = build(m, n, NULL);
        after = build(m, n + 1, NULL);
        taken = 0;
        for (s = 0; s < NSHARDS; s++) {
            if (strcmp(owner_name(before, s), owner_name(after, s)) != 0) {
                RL_CHECK_STR_EQ(owner_name(after, s), m[n].name);
                taken++;
            }
        }
        if (n + 1 == 8) {
            /* About S/N: 512 for N = 8, within +-35%. */
            RL_CHECK_UINT_GE(taken, 512 * 65 / 100);
            RL_CHECK_UINT_LE(taken, 512 * 135 / 100);
        }
        RL_CHECK_UINT_GT(taken, 0);
        rl_shardmap_destroy(before);
        rl_shardmap_destroy(after);
    }
}
END_TEST

START_TEST(test_overrides)
{
    struct rl_member m[3] = {{"a", "", 0, 0, 0}, {"b", "", 0, 0, 0}, {"c", "", 0, 0, 0}};
    struct rl_assignment a;
    struct rl_shardmap *hrw, *sm, *two;
    uint32_t s;

    ck_assert_int_eq(rl_assignment_init(&a, NSHARDS), 0);
    hrw = build(m, 3, NULL);
    /* Shard 0 is b's by HRW, shard 2 is c's, shard 3 is a's. */
    ck_assert_int_eq(rl_assignment_set(&a, 0, "c"), 0);
    ck_assert_int_eq(rl_assignment_set(&a, 2, "c"), 0);
    ck_assert_int_eq(rl_assignment_set(&a, 3, "zz"), 0);
    ck_assert_int_eq(rl_assignment_set(&a, 4095, "a"), 0);
    sm = build(m, 3, &a);
    ck_assert_str_eq(owner_name(sm, 0), "c");
    ck_assert_str_eq(owner_name(sm, 2), "c");
    ck_assert_str_eq(owner_name(sm, 3), "a"); /* "zz" is not live: HRW */
    ck_assert_str_eq(owner_name(sm, 4095), "a");
    for (s = 0; s < NSHARDS; s++) {
        if (s != 0 && s != 4095) {
            RL_CHECK_STR_EQ(owner_name(sm, s), owner_name(hrw, s));
        }
    }
    /* c leaves: its overrides fall back to HRW among a and b. */
    two = build(m, 2, &a);
    ck_assert_str_eq(owner_name(two, 0), "b");
    ck_assert_str_eq(owner_name(two, 4095), "a");
    for (s = 0; s < NSHARDS; s++) {
        RL_CHECK_STR_EQ(owner_name(two, s), s == 4095 ? "a" : m[rl_shardmap_hrw(s, m, 2)].name);
    }
    rl_shardmap_destroy(two);
    rl_shardmap_destroy(sm);
    rl_shardmap_destroy(hrw);
    rl_assignment_deinit(&a);
}
END_TEST

/* Joining and leaving members own no shard: the table is the one of the active members,
 * an override naming a non-active member falls back to HRW among the active ones, and the
 * non-active members stay listed (routers know their addresses). */
START_TEST(test_states_not_placed)
{
    struct rl_member m[3] = {{"a", "", 0, 0, 0}, {"b", "", 0, 0, 0}, {"c", "", 0, 0, 0}};
    struct rl_member two[2] = {{"a", "", 0, 0, 0}, {"b", "", 0, 0, 0}};
    struct rl_assignment a;
    struct rl_shardmap *ab, *sm;
    uint32_t s, max;
    double mean;

    ck_assert_int_eq(rl_assignment_init(&a, NSHARDS), 0);
    ck_assert_int_eq(rl_assignment_set(&a, 7, "c"), 0);
    ab = build(two, 2, NULL);
    for (uint8_t st = RL_MEMBER_JOINING; st <= RL_MEMBER_LEAVING; st++) {
        m[2].state = st;
        sm = build(m, 3, &a);
        ck_assert_uint_eq(sm->nmembers, 3);
        ck_assert_uint_eq(rl_shardmap_find(sm, "c"), 2);
        for (s = 0; s < NSHARDS; s++) {
            RL_CHECK_STR_EQ(owner_name(sm, s), owner_name(ab, s));
            ck_assert_uint_ne(rl_shardmap_hrw(s, m, 3), 2);
        }
        ck_assert_uint_eq(rl_shardmap_digest(sm), rl_shardmap_digest(ab));
        rl_shardmap_balance(sm, &max, &mean);
        ck_assert(mean == (double)NSHARDS / 2);
        rl_shardmap_destroy(sm);
    }
    /* nobody active: nobody owns anything */
    m[0].state = m[1].state = m[2].state = RL_MEMBER_LEAVING;
    sm = build(m, 3, &a);
    for (s = 0; s < NSHARDS; s++) {
        ck_assert_uint_eq(rl_shardmap_owner(sm, s), RL_SHARDMAP_NONE);
    }
    rl_shardmap_destroy(sm);
    ck_assert_str_eq(rl_member_state_name(RL_MEMBER_JOINING), "joining");
    ck_assert_str_eq(rl_member_state_name(9), "?");
    rl_shardmap_destroy(ab);
    rl_assignment_deinit(&a);
}
END_TEST

START_TEST(test_create_errors)
{
    struct rl_member m[3] = {{"a", "", 0, 0, 0}, {"b", "", 0, 0, 0}, {"a", "other", 0, 0, 0}};
    struct rl_member bad;
    struct rl_assignment a;
    struct rl_shardmap *sm = (struct rl_shardmap *)1;
    uint32_t max;
    double mean;

    ck_assert_int_eq(rl_shardmap_create(&sm, NSHARDS, m, 3, NULL), -EINVAL);
    ck_assert_ptr_null(sm);
    ck_assert_int_eq(rl_shardmap_create(&sm, 0, m, 2, NULL), -EINVAL);
    ck_assert_int_eq(rl_shardmap_create(&sm, RL_SHARDMAP_SHARDS_MAX + 1, m, 2, NULL), -EINVAL);
    memset(&bad, 0, sizeof(bad));
    ck_assert_int_eq(rl_shardmap_create(&sm, NSHARDS, &bad, 1, NULL), -EINVAL);
    memset(bad.name, 'x', sizeof(bad.name));
    ck_assert_int_eq(rl_shardmap_create(&sm, NSHARDS, &bad, 1, NULL), -EINVAL);
    ck_assert_int_eq(rl_assignment_init(&a, 1024), 0);
    ck_assert_int_eq(rl_shardmap_create(&sm, NSHARDS, m, 2, &a), -EINVAL);
    rl_assignment_deinit(&a);

    /* No members: no owners, and balance says so. */
    ck_assert_int_eq(rl_shardmap_create(&sm, NSHARDS, NULL, 0, NULL), 0);
    ck_assert_uint_eq(rl_shardmap_owner(sm, 0), RL_SHARDMAP_NONE);
    ck_assert_uint_eq(rl_shardmap_owner(sm, NSHARDS - 1), RL_SHARDMAP_NONE);
    ck_assert_uint_eq(rl_shardmap_find(sm, "a"), RL_SHARDMAP_NONE);
    rl_shardmap_balance(sm, &max, &mean);
    ck_assert_uint_eq(max, 0);
    ck_assert_double_eq(mean, 0);
    rl_shardmap_destroy(sm);
    rl_shardmap_destroy(NULL);
}
END_TEST

START_TEST(test_find)
{
    struct rl_member m[20];
    struct rl_shardmap *sm;
    uint64_t st = 3;
    size_t i;
    uint32_t k;

    nodes(m, 20);
    shuffle(m, 20, &st);
    sm = build(m, 20, NULL);
    for (i = 0; i < 20; i++) {
        k = rl_shardmap_find(sm, m[i].name);
        RL_CHECK_UINT_NE(k, RL_SHARDMAP_NONE);
        RL_CHECK_STR_EQ(sm->members[k].name, m[i].name);
        RL_CHECK_STR_EQ(sm->members[k].addr, m[i].addr);
    }
    for (i = 1; i < 20; i++) {
        RL_CHECK_INT_LT(strcmp(sm->members[i - 1].name, sm->members[i].name), 0);
    }
    ck_assert_uint_eq(rl_shardmap_find(sm, "node-0"), RL_SHARDMAP_NONE);
    ck_assert_uint_eq(rl_shardmap_find(sm, "node-21"), RL_SHARDMAP_NONE);
    ck_assert_uint_eq(rl_shardmap_find(sm, ""), RL_SHARDMAP_NONE);
    rl_shardmap_destroy(sm);
}
END_TEST

START_TEST(test_assignment_set)
{
    struct rl_assignment a;
    char name[RL_SHARDMAP_NAME_MAX + 1];

    ck_assert_int_eq(rl_assignment_init(&a, 0), -EINVAL);
    ck_assert_int_eq(rl_assignment_init(&a, RL_SHARDMAP_SHARDS_MAX + 1), -EINVAL);
    ck_assert_int_eq(rl_assignment_init(&a, 8), 0);
    ck_assert_int_eq(rl_assignment_set(&a, 8, "a"), -EINVAL);
    ck_assert_int_eq(rl_assignment_set(&a, 1, "a b"), -EINVAL);
    ck_assert_int_eq(rl_assignment_set(&a, 1, "a#b"), -EINVAL);
    ck_assert_int_eq(rl_assignment_set(&a, 1, "a\tb"), -EINVAL);
    memset(name, 'n', RL_SHARDMAP_NAME_MAX);
    name[RL_SHARDMAP_NAME_MAX] = '\0';
    ck_assert_int_eq(rl_assignment_set(&a, 1, name), -EINVAL);
    name[RL_SHARDMAP_NAME_MAX - 1] = '\0';
    ck_assert_int_eq(rl_assignment_set(&a, 1, name), 0);
    ck_assert_str_eq(a.owner[1], name);
    ck_assert_int_eq(rl_assignment_set(&a, 1, NULL), 0);
    ck_assert_str_eq(a.owner[1], "");
    ck_assert_int_eq(rl_assignment_set(&a, 7, "nœud-7"), 0); /* UTF-8 bytes are name bytes */
    rl_assignment_deinit(&a);
}
END_TEST

START_TEST(test_format_parse_roundtrip)
{
    static const char want[] = "rl-assignment 1 4096\n"
                               "0 node-3\n"
                               "17 b\n"
                               "4095 node-1\n";
    static const char text[] = "rl-assignment 1 4096   # written by hand\r\n"
                               "\n"
                               "# a comment line\n"
                               "   \t\n"
                               "4095\tnode-1\r\n"
                               "  0 node-3 # moved off the hot node\n"
                               "17 b";
    struct rl_assignment a, b;
    char *out, *out2;
    size_t len, len2;
    char err[128];
    uint32_t s;

    ck_assert_int_eq(rl_assignment_init(&a, NSHARDS), 0);
    ck_assert_int_eq(rl_assignment_init(&b, NSHARDS), 0);
    ck_assert_int_eq(rl_assignment_set(&a, 4095, "node-1"), 0);
    ck_assert_int_eq(rl_assignment_set(&a, 0, "node-3"), 0);
    ck_assert_int_eq(rl_assignment_set(&a, 17, "b"), 0);
    ck_assert_int_eq(rl_assignment_format(&a, &out, &len), 0);
    ck_assert_str_eq(out, want);
    ck_assert_uint_eq(len, strlen(want));

    ck_assert_int_eq(rl_assignment_parse(&b, out, len, err, sizeof(err)), 0);
    for (s = 0; s < NSHARDS; s++) {
        RL_CHECK_STR_EQ(a.owner[s], b.owner[s]);
    }
    ck_assert_int_eq(rl_assignment_format(&b, &out2, &len2), 0);
    ck_assert_str_eq(out2, out);
    free(out2);

    /* Comments, blank lines, tabs, CRLF and no final newline; then replaces, not merges. */
    ck_assert_int_eq(rl_assignment_set(&b, 5, "stale"), 0);
    ck_assert_int_eq(rl_assignment_parse(&b, text, strlen(text), err, sizeof(err)), 0);
    ck_assert_int_eq(rl_assignment_format(&b, &out2, &len2), 0);
    ck_assert_str_eq(out2, want);
    free(out2);
    free(out);

    /* No overrides at all. */
    ck_assert_int_eq(rl_assignment_parse(&b, "rl-assignment 1 4096", 20, err, sizeof(err)), 0);
    ck_assert_int_eq(rl_assignment_format(&b, &out, &len), 0);
    ck_assert_str_eq(out, "rl-assignment 1 4096\n");
    free(out);

    /* A name the format cannot carry is refused, not written. */
    strcpy(a.owner[9], "has space");
    ck_assert_int_eq(rl_assignment_format(&a, &out, &len), -EINVAL);
    rl_assignment_deinit(&a);
    rl_assignment_deinit(&b);
}
END_TEST

static const struct {
    const char *text;
    const char *err;
} parse_errors[] = {
    {"", "line 1: expected \"rl-assignment 1 SHARDS\""},
    {"\n", "line 1: expected \"rl-assignment 1 SHARDS\""},
    {"# comment\nrl-assignment 1 4096\n", "line 1: expected \"rl-assignment 1 SHARDS\""},
    {"rl-assign 1 4096\n", "line 1: expected \"rl-assignment 1 SHARDS\""},
    {"rl-assignment\n", "line 1: expected \"rl-assignment 1 SHARDS\""},
    {"rl-assignment 2 4096\n", "line 1: unsupported version \"2\""},
    {"rl-assignment 1\n", "line 1: shard count is missing or not a number"},
    {"rl-assignment 1 4k\n", "line 1: shard count is missing or not a number"},
    {"rl-assignment 1 1024\n", "line 1: assignment is for 1024 shards, not 4096"},
    {"rl-assignment 1 4096 x\n", "line 1: unexpected bytes after the shard count"},
    {"rl-assignment 1 4096\n1 a\n4096 b\n", "line 3: shard 4096 is out of range (0..4095)"},
    {"rl-assignment 1 4096\n99999999999 b\n", "line 2: shard \"99999999999\" is not a number"},
    {"rl-assignment 1 4096\n-1 b\n", "line 2: shard \"-1\" is not a number"},
    {"rl-assignment 1 4096\nx b\n", "line 2: shard \"x\" is not a number"},
    {"rl-assignment 1 4096\n1 a\n\n1 b\n", "line 4: shard 1 is already assigned on line 2"},
    {"rl-assignment 1 4096\n1 a\n1 a\n", "line 3: shard 1 is already assigned on line 2"},
    {"rl-assignment 1 4096\n7\n", "line 2: shard 7 has no node name"},
    {"rl-assignment 1 4096\n7 # nobody\n", "line 2: shard 7 has no node name"},
    {"rl-assignment 1 4096\n7 "
     "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn\n",
     "line 2: node name is longer than 63 bytes"},
    {"rl-assignment 1 4096\n7 a b\n", "line 2: unexpected bytes after the node name"},
    {"rl-assignment 1 4096\n7 a 8 b\n", "line 2: unexpected bytes after the node name"},
    {"rl-assignment 1 4096\n7 a\x01\n", "line 2: unexpected bytes after the node name"},
    {"rl-assignment 1 4096\n\x01 a\n", "line 2: control byte 0x01"},
    {"rl-assignment 1 4096\n7 \x7f\n", "line 2: control byte 0x7f"},
};

START_TEST(test_parse_errors)
{
    const char *text = parse_errors[_i].text;
    struct rl_assignment a;
    char err[128];

    ck_assert_int_eq(rl_assignment_init(&a, NSHARDS), 0);
    ck_assert_int_eq(rl_assignment_set(&a, 12, "kept"), 0);
    ck_assert_int_eq(rl_assignment_parse(&a, text, strlen(text), err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, parse_errors[_i].err);
    /* A failed parse leaves the assignment as it was. */
    ck_assert_str_eq(a.owner[12], "kept");
    ck_assert_str_eq(a.owner[1], "");
    ck_assert_str_eq(a.owner[7], "");
    /* No err buffer, or a short one, is fine. */
    ck_assert_int_eq(rl_assignment_parse(&a, text, strlen(text), NULL, 0), -EINVAL);
    ck_assert_int_eq(rl_assignment_parse(&a, text, strlen(text), err, 4), -EINVAL);
    ck_assert_str_eq(err, "lin");
    rl_assignment_deinit(&a);
}
END_TEST

START_TEST(test_parse_nul_byte)
{
    static const char text[] = "rl-assignment 1 4096\n3 a\0b\n";
    struct rl_assignment a;
    char err[128];

    ck_assert_int_eq(rl_assignment_init(&a, NSHARDS), 0);
    ck_assert_int_eq(rl_assignment_parse(&a, text, sizeof(text) - 1, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "line 2: unexpected bytes after the node name");
    ck_assert_int_eq(rl_assignment_parse(&a, NULL, 0, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "line 1: expected \"rl-assignment 1 SHARDS\"");
    rl_assignment_deinit(&a);
}
END_TEST

START_TEST(test_balance)
{
    /*
     * Measured (bench/shardmap_balance.c, docs/SHARDING.md) with names node-1..node-N:
     * max/mean is at most 1.133 for N <= 16 and 1.338 for N <= 64, as uniform random
     * placement would give. The bounds are loose on purpose: they catch a broken mix (a
     * member that wins far too often), not an unlucky one.
     */
    struct rl_member m[64];
    struct rl_shardmap *sm;
    uint32_t max;
    double mean;
    size_t n;

    nodes(m, 64);
    for (n = 2; n <= 64; n++) {
        sm = build(m, n, NULL);
        rl_shardmap_balance(sm, &max, &mean);
        ck_assert_double_eq_tol(mean, (double)NSHARDS / (double)n, 1e-9);
        RL_CHECK(max / mean <= (n <= 16 ? 1.25 : 1.5), "n=%zu: max/mean %.3f", n, max / mean);
        rl_shardmap_destroy(sm);
    }
}
END_TEST

/* The digest as shardmap.h defines it, spelt out byte by byte: the reference. */
static uint64_t
digest_ref(const struct rl_shardmap *sm)
{
    unsigned char *buf = malloc(4 + (size_t)sm->nshards * RL_SHARDMAP_NAME_MAX);
    size_t len = 0, nl;
    uint64_t d;
    uint32_t s;

    ck_assert_ptr_nonnull(buf);
    buf[len++] = (unsigned char)(sm->nshards & 0xff);
    buf[len++] = (unsigned char)(sm->nshards >> 8 & 0xff);
    buf[len++] = (unsigned char)(sm->nshards >> 16 & 0xff);
    buf[len++] = (unsigned char)(sm->nshards >> 24 & 0xff);
    for (s = 0; s < sm->nshards; s++) {
        nl = strlen(owner_name(sm, s));
        memcpy(buf + len, owner_name(sm, s), nl);
        len += nl;
        buf[len++] = 0;
    }
    d = XXH3_64bits(buf, len);
    free(buf);
    return d;
}

START_TEST(test_digest_known)
{
    /* {a, b, c} over 12 shards: owners "bbcababaaacc" (test_owner_known). */
    /* 12 as 4 little-endian bytes, then the owners; the last 0x00 is the literal's NUL. */
    static const char bytes[] = "\x0c\x00\x00\x00"
                                "b\0b\0c\0a\0b\0a\0b\0a\0a\0a\0c\0c";
    static const char none[4 + 12] = "\x0c";
    struct rl_member m[3] = {{"c", "h:3", 0, 0, 0}, {"a", "h:1", 0, 0, 0}, {"b", "h:2", 0, 0, 0}};
    struct rl_member longm[5];
    struct rl_shardmap *sm = NULL;
    uint64_t d;
    uint32_t ns;

    ck_assert_int_eq(rl_shardmap_create(&sm, 12, m, 3, NULL), 0);
    d = rl_shardmap_digest(sm);
    ck_assert_uint_eq(d, XXH3_64bits(bytes, sizeof(bytes)));
    ck_assert_uint_eq(d, 0x4fadf9fcbdb8fc72ull); /* the shared libxxhash agrees */
    ck_assert_int_eq(rl_shardmap_digest_stat(sm), (int64_t)(d >> 1));
    rl_shardmap_destroy(sm);

    /* No members: every shard contributes just its 0x00. */
    ck_assert_int_eq(rl_shardmap_create(&sm, 12, m, 0, NULL), 0);
    ck_assert_uint_eq(rl_shardmap_digest(sm), XXH3_64bits(none, sizeof(none)));
    rl_shardmap_destroy(sm);
    ck_assert_int_eq(rl_shardmap_digest_stat(NULL), 0);

    /* Whole tables, many times the function's internal buffer, also with the longest names
     * (63 bytes), which fill it fastest, and with shard counts around its size. */
    sm = build(m, 3, NULL);
    ck_assert_uint_eq(rl_shardmap_digest(sm), digest_ref(sm));
    ck_assert_int_ge(rl_shardmap_digest_stat(sm), 0);
    rl_shardmap_destroy(sm);
    memset(longm, 0, sizeof(longm));
    memset(longm[0].name, 'a', 1);
    memset(longm[1].name, 'b', RL_SHARDMAP_NAME_MAX - 2);
    memset(longm[2].name, 'c', RL_SHARDMAP_NAME_MAX - 1);
    memset(longm[3].name, 'd', RL_SHARDMAP_NAME_MAX - 1);
    memset(longm[4].name, 'e', RL_SHARDMAP_NAME_MAX - 1);
    for (ns = 1; ns <= NSHARDS; ns = ns * 3 + 1) {
        ck_assert_int_eq(rl_shardmap_create(&sm, ns, longm, 5, NULL), 0);
        RL_CHECK_UINT_EQ(rl_shardmap_digest(sm), digest_ref(sm));
        rl_shardmap_destroy(sm);
    }
    sm = build(longm, 5, NULL);
    ck_assert_uint_eq(rl_shardmap_digest(sm), digest_ref(sm));
    rl_shardmap_destroy(sm);
}
END_TEST

START_TEST(test_digest_order_and_moves)
{
    struct rl_member m[10];
    struct rl_assignment a;
    struct rl_shardmap *sm;
    uint64_t st = 11, ref, d;
    const char *hrw5, *other;
    int k;

    nodes(m, 10);
    ck_assert_int_eq(rl_assignment_init(&a, NSHARDS), 0);
    ck_assert_int_eq(rl_assignment_set(&a, 3, "node-4"), 0);
    ck_assert_int_eq(rl_assignment_set(&a, 4000, "gone"), 0);
    sm = build(m, 10, &a);
    ref = rl_shardmap_digest(sm);
    hrw5 = m[rl_shardmap_hrw(5, m, 10)].name;
    other = strcmp(hrw5, "node-1") == 0 ? "node-2" : "node-1";
    rl_shardmap_destroy(sm);
    /* The same members in any order, with the same assignment: the same digest. */
    for (k = 0; k < 20; k++) {
        shuffle(m, 10, &st);
        sm = build(m, 10, &a);
        RL_CHECK_UINT_EQ(rl_shardmap_digest(sm), ref);
        rl_shardmap_destroy(sm);
    }
    nodes(m, 10);
    /* An override that names the owner HRW gives anyway moves nothing: same digest. */
    ck_assert_int_eq(rl_assignment_set(&a, 5, hrw5), 0);
    sm = build(m, 10, &a);
    ck_assert_uint_eq(rl_shardmap_digest(sm), ref);
    rl_shardmap_destroy(sm);
    /* One shard moved to another member: another digest; moved back: the same again. */
    ck_assert_int_eq(rl_assignment_set(&a, 5, other), 0);
    sm = build(m, 10, &a);
    ck_assert_str_eq(owner_name(sm, 5), other);
    d = rl_shardmap_digest(sm);
    ck_assert_uint_ne(d, ref);
    ck_assert_int_ne(rl_shardmap_digest_stat(sm), (int64_t)(ref >> 1));
    rl_shardmap_destroy(sm);
    ck_assert_int_eq(rl_assignment_set(&a, 5, NULL), 0);
    sm = build(m, 10, &a);
    ck_assert_uint_eq(rl_shardmap_digest(sm), ref);
    rl_shardmap_destroy(sm);
    /* A member gone, or another shard count: another digest. */
    sm = build(m, 9, &a);
    ck_assert_uint_ne(rl_shardmap_digest(sm), ref);
    rl_shardmap_destroy(sm);
    ck_assert_int_eq(rl_shardmap_create(&sm, NSHARDS / 2, m, 10, NULL), 0);
    ck_assert_uint_ne(rl_shardmap_digest(sm), ref);
    rl_shardmap_destroy(sm);
    rl_assignment_deinit(&a);
}
END_TEST

START_TEST(test_digest_build_equals_create)
{
    static const char text[] = "rl-assignment 1 4096\n5 node-2\n77 node-7\n4000 gone\n";
    struct rl_member m[7];
    struct rl_view v = {.asg_version = -1};
    struct rl_assignment a;
    struct rl_shardmap *built, *made;
    char err[128];
    uint64_t st = 13;

    /* A view as ZooKeeper gives it (members in any order), and the same by hand. */
    nodes(m, 7);
    ck_assert_int_eq(rl_assignment_init(&a, NSHARDS), 0);
    ck_assert_int_eq(rl_assignment_parse(&a, text, strlen(text), NULL, 0), 0);
    made = build(m, 7, &a);
    shuffle(m, 7, &st);
    ck_assert_int_eq(rl_view_set_members(&v, m, 7), 0);
    ck_assert_int_eq(rl_view_set_assignment(&v, text, strlen(text), 3), 0);
    ck_assert_int_eq(rl_view_build(&built, NSHARDS, &v, err, sizeof(err)), 0);
    ck_assert_str_eq(err, "");
    ck_assert_uint_eq(rl_shardmap_digest(built), rl_shardmap_digest(made));
    ck_assert_int_eq(rl_shardmap_digest_stat(built), rl_shardmap_digest_stat(made));
    rl_shardmap_destroy(built);
    rl_shardmap_destroy(made);

    /* No assignment, and one that does not parse (left out): the members' table alone. */
    made = build(m, 7, NULL);
    ck_assert_int_eq(rl_view_set_assignment(&v, NULL, 0, -1), 0);
    ck_assert_int_eq(rl_view_build(&built, NSHARDS, &v, err, sizeof(err)), 0);
    ck_assert_uint_eq(rl_shardmap_digest(built), rl_shardmap_digest(made));
    rl_shardmap_destroy(built);
    ck_assert_int_eq(rl_view_set_assignment(&v, "rl-assignment 1 12\n", 19, 4), 0);
    ck_assert_int_eq(rl_view_build(&built, NSHARDS, &v, err, sizeof(err)), 0);
    ck_assert_str_ne(err, "");
    ck_assert_uint_eq(rl_shardmap_digest(built), rl_shardmap_digest(made));
    rl_shardmap_destroy(built);
    rl_shardmap_destroy(made);
    rl_view_deinit(&v);
    rl_assignment_deinit(&a);
}
END_TEST

static Suite *
shardmap_suite(void)
{
    Suite *s = suite_create("shardmap");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_key_hash_known);
    tcase_add_test(tc, test_key_hash_lengths);
    tcase_add_test(tc, test_owner_known);
    tcase_add_test(tc, test_order_independent);
    tcase_add_test(tc, test_hrw_agrees);
    tcase_add_test(tc, test_leave_moves_only_its_shards);
    tcase_add_test(tc, test_join_moves_only_to_it);
    tcase_add_test(tc, test_overrides);
    tcase_add_test(tc, test_states_not_placed);
    tcase_add_test(tc, test_create_errors);
    tcase_add_test(tc, test_find);
    tcase_add_test(tc, test_balance);
    tcase_add_test(tc, test_digest_known);
    tcase_add_test(tc, test_digest_order_and_moves);
    suite_add_tcase(s, tc);

    tc = tcase_create("view");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_digest_build_equals_create);
    suite_add_tcase(s, tc);

    tc = tcase_create("assignment");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_assignment_set);
    tcase_add_test(tc, test_format_parse_roundtrip);
    tcase_add_loop_test(tc, test_parse_errors, 0,
                        (int)(sizeof(parse_errors) / sizeof(parse_errors[0])));
    tcase_add_test(tc, test_parse_nul_byte);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(shardmap_suite)
