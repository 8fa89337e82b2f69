/*
 * check_resp: the Check suite of common/resp.c: multibulk and inline commands as
 * redis-server reads them (quotes, escapes, empty lines, pipelined commands, commands cut at
 * every byte), each bound and each protocol error with Redis's words, and the RESP2/RESP3
 * writers byte for byte. Not for the commands (tests/integration/check_resp.c).
 */
#include "resp.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rltest.h"

static struct rl_resp_cmd cmd;

/* Parses text (copied: inline commands are rewritten in place). */
static int
parse(const char *text, size_t len, size_t *used, const char **err)
{
    static char buf[RL_RESP_CMD_MAX + 1024];

    ck_assert_uint_le(len, sizeof(buf));
    memcpy(buf, text, len);
    return rl_resp_parse(buf, len, &cmd, used, err);
}

static void
arg_is(size_t i, const char *want, size_t wlen)
{
    ck_assert_uint_gt(cmd.argc, i);
    ck_assert_uint_eq(cmd.argv[i].len, wlen);
    ck_assert(memcmp(cmd.argv[i].ptr, want, wlen) == 0);
}

START_TEST(test_multibulk)
{
    const char *t = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n";
    size_t used = 0;
    const char *err = NULL;

    ck_assert_int_eq(parse(t, strlen(t), &used, &err), RL_RESP_CMD);
    ck_assert_uint_eq(cmd.argc, 3);
    arg_is(0, "SET", 3);
    arg_is(1, "k", 1);
    arg_is(2, "", 0);
    ck_assert_uint_eq(used, strlen("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"));
    ck_assert_int_eq(parse(t + used, strlen(t) - used, &used, &err), RL_RESP_CMD);
    arg_is(0, "PING", 4);
    /* binary bytes, CR LF inside a bulk string */
    ck_assert_int_eq(parse("*1\r\n$4\r\na\r\n\0\r\n", 14, &used, &err), RL_RESP_CMD);
    arg_is(0, "a\r\n\0", 4);
    /* an empty array is a command of no arguments (skipped by the caller) */
    ck_assert_int_eq(parse("*0\r\n", 4, &used, &err), RL_RESP_CMD);
    ck_assert_uint_eq(cmd.argc, 0);
    ck_assert_uint_eq(used, 4);
    ck_assert_int_eq(parse("*-1\r\n", 5, &used, &err), RL_RESP_CMD);
    ck_assert_uint_eq(cmd.argc, 0);
}
END_TEST

/* A command cut anywhere is incomplete, never wrong. */
START_TEST(test_every_cut)
{
    const char *ts[] = {"*2\r\n$11\r\nCL.THROTTLE\r\n$10\r\nabcdefghij\r\n",
                        "CL.THROTTLE \"a b\\x41\" 'c'\r\n", "PING\n"};

    for (size_t k = 0; k < sizeof(ts) / sizeof(ts[0]); k++) {
        size_t n = strlen(ts[k]), used;
        const char *err = NULL;

        for (size_t cut = 0; cut < n; cut++) {
            int rc = parse(ts[k], cut, &used, &err);

            ck_assert_msg(rc == RL_RESP_MORE, "%zu at %zu: %d %s", k, cut, rc, err ? err : "");
        }
    }
}
END_TEST

START_TEST(test_inline)
{
    size_t used;
    const char *err = NULL;
    const char *t = "  CL.THROTTLE  user123 15\t30 60\r\nPING\n";

    ck_assert_int_eq(parse(t, strlen(t), &used, &err), RL_RESP_CMD);
    ck_assert_uint_eq(cmd.argc, 5);
    arg_is(0, "CL.THROTTLE", 11);
    arg_is(1, "user123", 7);
    arg_is(4, "60", 2);
    ck_assert_uint_eq(used, strlen("  CL.THROTTLE  user123 15\t30 60\r\n"));
    /* quotes and escapes as sdssplitargs */
    t = "ECHO \"a\\tb\\x41\\\"\" 'it\\'s' \"\" x\n";
    ck_assert_int_eq(parse(t, strlen(t), &used, &err), RL_RESP_CMD);
    ck_assert_uint_eq(cmd.argc, 5);
    arg_is(1, "a\tbA\"", 5);
    arg_is(2, "it's", 4);
    arg_is(3, "", 0);
    arg_is(4, "x", 1);
    /* an empty line: no arguments */
    ck_assert_int_eq(parse("\r\n", 2, &used, &err), RL_RESP_CMD);
    ck_assert_uint_eq(cmd.argc, 0);
    ck_assert_uint_eq(used, 2);
    /* unbalanced quotes, and a closing quote followed by a letter */
    ck_assert_int_eq(parse("ECHO \"abc\n", 10, &used, &err), RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: unbalanced quotes in request");
    ck_assert_int_eq(parse("ECHO 'a'b\n", 10, &used, &err), RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: unbalanced quotes in request");
}
END_TEST

START_TEST(test_bounds)
{
    size_t used;
    const char *err = NULL;
    char *big = malloc(RL_RESP_CMD_MAX + 16);
    char head[64];
    int n;

    ck_assert_ptr_nonnull(big);
    /* an inline command without its newline: more, up to the bound, then refused */
    memset(big, 'a', RL_RESP_INLINE_MAX);
    ck_assert_int_eq(parse(big, RL_RESP_INLINE_MAX - 1, &used, &err), RL_RESP_MORE);
    ck_assert_int_eq(parse(big, RL_RESP_INLINE_MAX, &used, &err), RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: too big inline request");
    /* too many arguments */
    n = snprintf(head, sizeof(head), "*%u\r\n", RL_RESP_ARGS_MAX + 1);
    ck_assert_int_eq(parse(head, (size_t)n, &used, &err), RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: invalid multibulk length");
    ck_assert_int_eq(parse("*x\r\n", 4, &used, &err), RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: invalid multibulk length");
    /* a bulk string past the bound, a negative one, a bad one */
    n = snprintf(head, sizeof(head), "*1\r\n$%u\r\n", RL_RESP_BULK_MAX + 1);
    ck_assert_int_eq(parse(head, (size_t)n, &used, &err), RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: invalid bulk length");
    ck_assert_int_eq(parse("*1\r\n$-1\r\n", 9, &used, &err), RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: invalid bulk length");
    ck_assert_int_eq(parse("*1\r\n$99999999999999999999\r\n", 27, &used, &err), RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: invalid bulk length");
    ck_assert_int_eq(parse("*1\r\n$0000000000000000000000000000000000000", 42, &used, &err),
                     RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: too big bulk count string");
    /* the whole command is bounded: 5 bulk strings of 64 KiB are too much */
    ck_assert_int_eq(parse("*5\r\n$65536\r\n", 12, &used, &err), RL_RESP_MORE);
    {
        size_t off = (size_t)snprintf(big, 32, "*5\r\n");
        int rc = RL_RESP_MORE;

        for (int i = 0; i < 5 && rc == RL_RESP_MORE; i++) {
            off += (size_t)snprintf(big + off, 32, "$%u\r\n", RL_RESP_BULK_MAX);
            rc = parse(big, off, &used, &err);
            if (rc == RL_RESP_MORE) {
                memset(big + off, 'x', RL_RESP_BULK_MAX);
                memcpy(big + off + RL_RESP_BULK_MAX, "\r\n", 2);
                off += RL_RESP_BULK_MAX + 2;
            }
        }
        ck_assert_int_eq(rc, RL_RESP_ERR);
        ck_assert_str_eq(err, "Protocol error: invalid bulk length");
        ck_assert_uint_le(off, RL_RESP_CMD_MAX);
    }
    /* not '$', a header line without its CR, a bulk string without CRLF */
    ck_assert_int_eq(parse("*1\r\n:1\r\n", 8, &used, &err), RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: expected '$', got ':'");
    memset(big, '9', 64);
    big[0] = '*';
    ck_assert_int_eq(parse(big, 64, &used, &err), RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: too big mbulk count string");
    ck_assert_int_eq(parse("*1\r\n$1\r\nab\r\n", 12, &used, &err), RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: bulk string not terminated by CRLF");
    ck_assert_int_eq(parse("*1\rx", 4, &used, &err), RL_RESP_ERR);
    free(big);
}
END_TEST

START_TEST(test_numbers)
{
    struct rl_resp_arg a;
    int64_t v;
    const char *ok[] = {"0", "-1", "9223372036854775807", "-9223372036854775808"};
    const int64_t want[] = {0, -1, INT64_MAX, INT64_MIN};
    const char *bad[] = {"",
                         "-",
                         "-0",
                         "+1",
                         " 1",
                         "1 ",
                         "01",
                         "9223372036854775808",
                         "18446744073709551615",
                         "18446744073709551617",
                         "1.5",
                         "x"};

    for (size_t i = 0; i < 4; i++) {
        a.ptr = ok[i];
        a.len = strlen(ok[i]);
        ck_assert_int_eq(rl_resp_int64(&a, &v), 0);
        ck_assert(v == want[i]);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        a.ptr = bad[i];
        a.len = strlen(bad[i]);
        ck_assert_msg(rl_resp_int64(&a, &v) == -1, "%s", bad[i]);
    }
    a.ptr = "cl.Throttle";
    a.len = 11;
    ck_assert(rl_resp_is(&a, "CL.THROTTLE"));
    ck_assert(!rl_resp_is(&a, "CL.THROTTL"));
}
END_TEST

START_TEST(test_writers)
{
    struct rl_buf b;

    rl_buf_init(&b);
    ck_assert_int_eq(rl_resp_put_array(&b, 5), 0);
    ck_assert_int_eq(rl_resp_put_int(&b, -1), 0);
    ck_assert_int_eq(rl_resp_put_simple(&b, "O\r\nK"), 0);
    ck_assert_int_eq(rl_resp_put_error(&b, "ERR unknown command '%s'", "x\ny"), 0);
    ck_assert_int_eq(rl_resp_put_bulk(&b, "a\0b", 3), 0);
    ck_assert_int_eq(rl_resp_put_null(&b, 2), 0);
    ck_assert_int_eq(rl_resp_put_null(&b, 3), 0);
    ck_assert_int_eq(rl_resp_put_map(&b, 2, 2), 0);
    ck_assert_int_eq(rl_resp_put_map(&b, 2, 3), 0);
    ck_assert_int_eq(rl_resp_put_set(&b, 1, 3), 0);
    {
        const char want[] = "*5\r\n:-1\r\n+O  K\r\n-ERR unknown command 'x y'\r\n$3\r\na\0b\r\n"
                            "$-1\r\n_\r\n*4\r\n%2\r\n~1\r\n";

        ck_assert_uint_eq(b.len, sizeof(want) - 1);
        ck_assert(memcmp(b.data, want, b.len) == 0);
    }
    rl_buf_deinit(&b);
}
END_TEST

/* Every integer written as "%lld" writes it: the ends of int64, each power of ten and its
 * neighbours, random values of every length; and an array of them in one call. */
START_TEST(test_integers_as_printf)
{
    int64_t vs[4096];
    size_t nv = 0;
    uint64_t rs = 0x5eed;
    struct rl_buf b, want;

    vs[nv++] = 0;
    vs[nv++] = INT64_MAX;
    vs[nv++] = INT64_MIN;
    vs[nv++] = INT64_MIN + 1;
    for (int64_t p = 1; p <= INT64_MAX / 10; p *= 10) {
        vs[nv++] = p - 1;
        vs[nv++] = p;
        vs[nv++] = p + 1;
        vs[nv++] = -p;
        vs[nv++] = 1 - p;
        vs[nv++] = 10 * p - 1;
    }
    while (nv < sizeof(vs) / sizeof(vs[0])) {
        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
        vs[nv++] = (int64_t)(rs >> (rs & 63)) * ((rs & 64) != 0 ? -1 : 1);
    }
    rl_buf_init(&b);
    rl_buf_init(&want);
    for (size_t i = 0; i < nv; i++) {
        char line[32];
        int n = snprintf(line, sizeof(line), ":%lld\r\n", (long long)vs[i]);

        ck_assert_int_eq(rl_resp_put_int(&b, vs[i]), 0);
        ck_assert_int_eq(rl_buf_append(&want, line, (size_t)n), 0);
        ck_assert_msg(b.len == want.len && memcmp(b.data, want.data, b.len) == 0,
                      "%lld written as %.*s", (long long)vs[i], (int)(b.len - (want.len - n)),
                      b.data + want.len - n);
    }
    /* in arrays: the same bytes behind each array's head */
    rl_buf_reset(&b);
    rl_buf_reset(&want);
    for (size_t i = 0; i + 5 <= nv; i += 5) {
        char head[8];

        ck_assert_int_eq(rl_resp_put_int_array(&b, vs + i, 5), 0);
        ck_assert_int_eq(rl_buf_append(&want, head, (size_t)snprintf(head, 8, "*5\r\n")), 0);
        for (size_t k = 0; k < 5; k++) {
            ck_assert_int_eq(rl_resp_put_int(&want, vs[i + k]), 0);
        }
    }
    ck_assert_uint_eq(b.len, want.len);
    ck_assert(memcmp(b.data, want.data, b.len) == 0);
    ck_assert_int_eq(rl_resp_put_int_array(&b, vs, 0), 0);
    ck_assert_int_eq(b.data[b.len - 4], '*');
    ck_assert_int_eq(rl_resp_put_int_array(&b, vs, RL_RESP_INT_ARRAY_MAX + 1), -ENOMEM);
    rl_buf_deinit(&b);
    rl_buf_deinit(&want);
}
END_TEST

/* Length lines read in one pass take what the two-pass reading takes, with the same N:
 * leading zeros, signs, the longest lengths, and lines cut before their LF. */
START_TEST(test_length_lines)
{
    size_t used;
    const char *err = NULL;
    char t[128];
    int n;

    ck_assert_int_eq(parse("*1\r\n$01\r\nx\r\n", strlen("*1\r\n$01\r\nx\r\n"), &used, &err),
                     RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: invalid bulk length");
    ck_assert_int_eq(parse("*01\r\n$1\r\nx\r\n", strlen("*01\r\n$1\r\nx\r\n"), &used, &err),
                     RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: invalid multibulk length");
    ck_assert_int_eq(parse("*1\r\n$-0\r\n", strlen("*1\r\n$-0\r\n"), &used, &err), RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: invalid bulk length");
    ck_assert_int_eq(parse("*1\r\n$+1\r\nx\r\n", strlen("*1\r\n$+1\r\nx\r\n"), &used, &err),
                     RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: invalid bulk length");
    ck_assert_int_eq(parse("*1\r\n$1\rx", strlen("*1\r\n$1\rx"), &used, &err), RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: too big bulk count string"); /* CR without LF */
    /* 18 and 19 digits: both read, both past the bound */
    ck_assert_int_eq(parse("*1\r\n$100000000000000000\r\n", strlen("*1\r\n$100000000000000000\r\n"),
                           &used, &err),
                     RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: invalid bulk length");
    ck_assert_int_eq(parse("*1\r\n$1000000000000000000\r\n",
                           strlen("*1\r\n$1000000000000000000\r\n"), &used, &err),
                     RL_RESP_ERR);
    ck_assert_str_eq(err, "Protocol error: invalid bulk length");
    ck_assert_int_eq(parse("*1\r\n$10\r", strlen("*1\r\n$10\r"), &used, &err), RL_RESP_MORE);
    /* every length of the bound's neighbourhood, as many digits as it has */
    for (unsigned len = 0; len <= 12; len++) {
        n = snprintf(t, sizeof(t), "*2\r\n$%u\r\n%.*s\r\n$0\r\n\r\n", len, (int)len,
                     "abcdefghijkl");
        ck_assert_int_eq(parse(t, (size_t)n, &used, &err), RL_RESP_CMD);
        ck_assert_uint_eq(used, (size_t)n);
        arg_is(0, "abcdefghijkl", len);
        ck_assert_uint_eq(cmd.argv[1].len, 0);
    }
    /* the case of a word: letters fold, nothing else does */
    {
        struct rl_resp_arg a = {"PING", 4};

        ck_assert(rl_resp_is(&a, "ping"));
        a.ptr = "P@NG"; /* '@' | 0x20 is '`', not a letter */
        ck_assert(!rl_resp_is(&a, "p`ng"));
        a.ptr = "PI\0G";
        ck_assert(!rl_resp_is(&a, "pi"));
        ck_assert(!rl_resp_is(&a, "pi g"));
        a.len = 2;
        ck_assert(!rl_resp_is(&a, "pin"));
        ck_assert(rl_resp_is(&a, "Pi"));
        a.len = 0;
        ck_assert(rl_resp_is(&a, ""));
        ck_assert(!rl_resp_is(&a, "p"));
    }
}
END_TEST

static Suite *
resp_suite(void)
{
    Suite *s = suite_create("resp");
    TCase *tc = tcase_create("codec");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_multibulk);
    tcase_add_test(tc, test_every_cut);
    tcase_add_test(tc, test_inline);
    tcase_add_test(tc, test_bounds);
    tcase_add_test(tc, test_numbers);
    tcase_add_test(tc, test_writers);
    tcase_add_test(tc, test_integers_as_printf);
    tcase_add_test(tc, test_length_lines);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(resp_suite)
