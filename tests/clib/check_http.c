/*
 * check_http: librlclient's HTTP mapping (rlc_http_*) against docs/INTEGRATION.md, string
 * for string: every code, the rounding edges of reset_ms and retry_after_ms (0, 1, 999,
 * 1000, 1001 ms), the window, the legacy fields, structured-field escaping of the policy
 * name, the bounds on what a server says (a QUEUED wait over the bound is refused, header
 * seconds clamped), the client-side failure policy, formatting, and the names. Only the
 * public header.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <ratelimiter/ratelimiter.h>

#include "rltest.h"

static struct rlc_reply
reply(uint32_t code, uint64_t limit, uint64_t remaining, uint64_t reset_ms, uint64_t retry_ms)
{
    struct rlc_reply r = {.code = code, .limit = limit, .remaining = remaining,
                          .reset_ms = reset_ms, .retry_after_ms = retry_ms};

    return r;
}

/* The formatted headers of the answer to r. */
static const char *
lines(const struct rlc_reply *r, const char *policy, uint32_t window, unsigned flags, int *status)
{
    static char buf[4096];
    struct rlc_http_answer a;

    ck_assert_int_eq(rlc_http_answer(r, policy, window, flags, &a), 0);
    *status = a.status;
    ck_assert_int_ge(rlc_http_format(&a, buf, sizeof(buf)), 0);
    return buf;
}

START_TEST(test_doc_examples)
{
    struct rlc_reply r;
    struct rlc_http_answer a;
    int st;

    r = reply(RLC_ALLOWED, 100, 42, 12300, 0);
    ck_assert_str_eq(lines(&r, "api", 60, 0, &st),
                     "RateLimit-Policy: \"api\";q=100;w=60\r\n"
                     "RateLimit: \"api\";r=42;t=13\r\n");
    ck_assert_int_eq(st, 0);
    r = reply(RLC_LIMITED, 100, 0, 12300, 12300);
    ck_assert_str_eq(lines(&r, "api", 60, 0, &st),
                     "RateLimit-Policy: \"api\";q=100;w=60\r\n"
                     "RateLimit: \"api\";r=0;t=13\r\n"
                     "Retry-After: 13\r\n");
    ck_assert_int_eq(st, 429);
    ck_assert_str_eq(lines(&r, "api", 60, RLC_HTTP_LEGACY, &st),
                     "RateLimit-Policy: \"api\";q=100;w=60\r\n"
                     "RateLimit: \"api\";r=0;t=13\r\n"
                     "Retry-After: 13\r\n"
                     "X-RateLimit-Limit: 100\r\n"
                     "X-RateLimit-Remaining: 0\r\n"
                     "X-RateLimit-Reset: 13\r\n");
    /* QUEUED: pass on after waiting, with headers. */
    r = reply(RLC_QUEUED, 4, 0, 250, 250);
    ck_assert_int_eq(rlc_http_answer(&r, "upload", 0, 0, &a), 0);
    ck_assert_int_eq(a.status, 0);
    ck_assert_uint_eq(a.wait_ms, 250);
    ck_assert_uint_eq(a.nheaders, 2);
    ck_assert_str_eq(a.headers[0].name, "RateLimit-Policy");
    ck_assert_str_eq(a.headers[0].value, "\"upload\";q=4");
    ck_assert_str_eq(a.headers[1].name, "RateLimit");
    ck_assert_str_eq(a.headers[1].value, "\"upload\";r=0;t=1");
    /* FAIL_CLOSED: 503 and Retry-After only. */
    r = reply(RLC_FAIL_CLOSED, 0, 0, 0, 4000);
    ck_assert_str_eq(lines(&r, "api", 60, RLC_HTTP_LEGACY, &st), "Retry-After: 4\r\n");
    ck_assert_int_eq(st, 503);
    /* FAIL_OPEN and NO_RULE: pass, no headers, even with legacy on. */
    r = reply(RLC_FAIL_OPEN, 0, 0, 0, 0);
    ck_assert_str_eq(lines(&r, "api", 60, RLC_HTTP_LEGACY, &st), "");
    ck_assert_int_eq(st, 0);
    r = reply(RLC_NO_RULE, 0, 0, 0, 0);
    ck_assert_int_eq(rlc_http_answer(&r, "api", 60, RLC_HTTP_LEGACY, &a), 0);
    ck_assert_int_eq(a.status, 0);
    ck_assert_uint_eq(a.nheaders, 0);
    ck_assert_uint_eq(a.wait_ms, 0);
}
END_TEST

/* ceil(ms / 1000) for t= and X-RateLimit-Reset; Retry-After the same and at least 1 when
 * retry_after_ms > 0. */
START_TEST(test_rounding)
{
    static const struct {
        uint64_t ms;
        const char *t;
    } cases[] = {{0, "0"}, {1, "1"}, {999, "1"}, {1000, "1"}, {1001, "2"},
                 {1999, "2"}, {2000, "2"}, {60000, "60"}, {4294967295u, "4294968"}};
    char want[512];
    struct rlc_reply r;
    int st;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        r = reply(RLC_LIMITED, 10, 0, cases[i].ms, cases[i].ms);
        snprintf(want, sizeof(want),
                 "RateLimit-Policy: \"p\";q=10\r\nRateLimit: \"p\";r=0;t=%s\r\n"
                 "Retry-After: %s\r\nX-RateLimit-Limit: 10\r\nX-RateLimit-Remaining: 0\r\n"
                 "X-RateLimit-Reset: %s\r\n",
                 cases[i].t, cases[i].t, cases[i].t);
        ck_assert_str_eq(lines(&r, "p", 0, RLC_HTTP_LEGACY, &st), want);
        ck_assert_int_eq(st, 429);
        r = reply(RLC_ALLOWED, 10, 9, cases[i].ms, 0);
        snprintf(want, sizeof(want), "RateLimit-Policy: \"p\";q=10;w=1\r\n"
                                     "RateLimit: \"p\";r=9;t=%s\r\n", cases[i].t);
        ck_assert_str_eq(lines(&r, "p", 1, 0, &st), want);
        ck_assert_int_eq(st, 0);
        r = reply(RLC_FAIL_CLOSED, 0, 0, 0, cases[i].ms);
        snprintf(want, sizeof(want), "Retry-After: %s\r\n", cases[i].t);
        ck_assert_str_eq(lines(&r, "p", 1, 0, &st), want);
        ck_assert_int_eq(st, 503);
    }
}
END_TEST

START_TEST(test_escaping_and_bounds)
{
    struct rlc_reply r = reply(RLC_ALLOWED, 5, 4, 1000, 0);
    struct rlc_http_answer a;
    char name[RLC_HTTP_POLICY_MAX + 2];
    int st;

    ck_assert_str_eq(lines(&r, "a\"b\\c d\te\x7f\xc3\xa9", 0, 0, &st),
                     "RateLimit-Policy: \"a\\\"b\\\\c d_e___\";q=5\r\n"
                     "RateLimit: \"a\\\"b\\\\c d_e___\";r=4;t=1\r\n");
    /* The longest name, every byte escaped, still fits a value. */
    memset(name, '"', RLC_HTTP_POLICY_MAX);
    name[RLC_HTTP_POLICY_MAX] = '\0';
    r = reply(RLC_LIMITED, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX);
    ck_assert_int_eq(rlc_http_answer(&r, name, UINT32_MAX, RLC_HTTP_LEGACY, &a), 0);
    ck_assert_uint_eq(a.nheaders, 6);
    ck_assert_str_eq(a.headers[1].value + 2 * RLC_HTTP_POLICY_MAX + 2,
                     ";r=18446744073709551615;t=4294968");
    ck_assert_str_eq(a.headers[2].value, "4294968");
    name[RLC_HTTP_POLICY_MAX] = 'x';
    name[RLC_HTTP_POLICY_MAX + 1] = '\0';
    ck_assert_int_eq(rlc_http_answer(&r, name, 0, 0, &a), -EINVAL);
    ck_assert_int_eq(rlc_http_answer(&r, "", 0, 0, &a), -EINVAL);
    ck_assert_int_eq(rlc_http_answer(&r, NULL, 0, 0, &a), -EINVAL);
    r.code = RLC_CODE_ERROR;
    ck_assert_int_eq(rlc_http_answer(&r, "p", 0, 0, &a), -EINVAL);
    r.code = 6;
    ck_assert_int_eq(rlc_http_answer(&r, "p", 0, 0, &a), -EINVAL);
}
END_TEST

/* What a server says is bounded (docs/CLIENTS.md, "What a client accepts from a server"):
 * a QUEUED wait over 10 s (RLC_HTTP_MAX_WAIT_MS) is not passed on as wait_ms but answered
 * as LIMITED, and no header carries more than 4294968 s (4294967295 ms, "never", rounded
 * up), whatever reset_ms or retry_after_ms a broken or hostile server sent. */
START_TEST(test_hostile_values)
{
    static const uint64_t hostile[] = {UINT64_MAX, (uint64_t)1 << 40, 4294967296u,
                                       4294967295u, 10001};
    static const char *const retry[] = {"4294968", "4294968", "4294968", "4294968", "11"};
    struct rlc_http_answer a;
    struct rlc_reply r;
    char want[512];
    int st;

    for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
        r = reply(RLC_QUEUED, 4, 0, 1000, hostile[i]);
        ck_assert_int_eq(rlc_http_answer(&r, "up", 0, 0, &a), 0);
        ck_assert_int_eq(a.status, 429);
        ck_assert_uint_eq(a.wait_ms, 0);
        snprintf(want, sizeof(want), "RateLimit-Policy: \"up\";q=4\r\n"
                 "RateLimit: \"up\";r=0;t=1\r\nRetry-After: %s\r\n", retry[i]);
        ck_assert_str_eq(lines(&r, "up", 0, 0, &st), want);
        ck_assert_int_eq(st, 429);
    }
    /* the bound itself is held */
    r = reply(RLC_QUEUED, 4, 0, 1000, 10000);
    ck_assert_int_eq(rlc_http_answer(&r, "up", 0, 0, &a), 0);
    ck_assert_int_eq(a.status, 0);
    ck_assert_uint_eq(a.wait_ms, 10000);
    ck_assert_uint_eq(a.nheaders, 2);
    /* t=, Retry-After and X-RateLimit-Reset are clamped for every code that sends them */
    for (size_t i = 0; i < 3; i++) {
        r = reply(RLC_LIMITED, 4, 0, hostile[i], hostile[i]);
        ck_assert_str_eq(lines(&r, "p", 0, RLC_HTTP_LEGACY, &st),
                         "RateLimit-Policy: \"p\";q=4\r\nRateLimit: \"p\";r=0;t=4294968\r\n"
                         "Retry-After: 4294968\r\nX-RateLimit-Limit: 4\r\n"
                         "X-RateLimit-Remaining: 0\r\nX-RateLimit-Reset: 4294968\r\n");
        r = reply(RLC_ALLOWED, 4, 3, hostile[i], 0);
        ck_assert_str_eq(lines(&r, "p", 0, 0, &st),
                         "RateLimit-Policy: \"p\";q=4\r\nRateLimit: \"p\";r=3;t=4294968\r\n");
        r = reply(RLC_FAIL_CLOSED, 0, 0, 0, hostile[i]);
        ck_assert_str_eq(lines(&r, "p", 0, 0, &st), "Retry-After: 4294968\r\n");
        ck_assert_int_eq(st, 503);
    }
}
END_TEST

/* rlc_http_answer_wait: the caller's own bound on QUEUED waits. */
START_TEST(test_answer_wait)
{
    struct rlc_reply r = reply(RLC_QUEUED, 4, 0, 1000, 250);
    struct rlc_http_answer a;

    ck_assert_uint_eq(RLC_HTTP_MAX_WAIT_MS, 10000);
    ck_assert_uint_eq(RLC_HTTP_MAX_SECONDS, 4294968);
    ck_assert_int_eq(rlc_http_answer_wait(&r, "up", 0, 0, 250, &a), 0);
    ck_assert_int_eq(a.status, 0);
    ck_assert_uint_eq(a.wait_ms, 250);
    ck_assert_int_eq(rlc_http_answer_wait(&r, "up", 0, 0, 249, &a), 0);
    ck_assert_int_eq(a.status, 429);
    ck_assert_uint_eq(a.wait_ms, 0);
    ck_assert_str_eq(a.headers[2].name, "Retry-After");
    ck_assert_str_eq(a.headers[2].value, "1");
    ck_assert_int_eq(rlc_http_answer_wait(&r, "up", 0, 0, 0, &a), 0);
    ck_assert_int_eq(a.status, 429);
    /* no bound: the server's wait as it is (the caller's own business), headers still clamped */
    r = reply(RLC_QUEUED, 4, 0, UINT64_MAX, (uint64_t)1 << 40);
    ck_assert_int_eq(rlc_http_answer_wait(&r, "up", 0, 0, UINT64_MAX, &a), 0);
    ck_assert_int_eq(a.status, 0);
    ck_assert_uint_eq(a.wait_ms, (uint64_t)1 << 40);
    ck_assert_str_eq(a.headers[1].value, "\"up\";r=0;t=4294968");
    ck_assert_int_eq(rlc_http_answer_wait(NULL, "up", 0, 0, 0, &a), -EINVAL);
    r.code = RLC_CODE_ERROR;
    ck_assert_int_eq(rlc_http_answer_wait(&r, "up", 0, 0, 0, &a), -EINVAL);
}
END_TEST

START_TEST(test_unreachable_format_names)
{
    struct rlc_http_answer a;
    char buf[64];

    rlc_http_unreachable(0, &a);
    ck_assert_int_eq(a.status, 0);
    ck_assert_uint_eq(a.nheaders, 0);
    ck_assert_int_eq(rlc_http_format(&a, buf, sizeof(buf)), 0);
    ck_assert_str_eq(buf, "");
    rlc_http_unreachable(1, &a);
    ck_assert_int_eq(a.status, 503);
    ck_assert_int_eq(rlc_http_format(&a, buf, sizeof(buf)), 16);
    ck_assert_str_eq(buf, "Retry-After: 1\r\n");
    /* Too small: -ENOSPC and an empty string, exactly-fitting works. */
    ck_assert_int_eq(rlc_http_format(&a, buf, 16), -ENOSPC);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(rlc_http_format(&a, buf, 17), 16);
    ck_assert_str_eq(rlc_http_reason(429), "Too Many Requests");
    ck_assert_str_eq(rlc_http_reason(503), "Service Unavailable");
    ck_assert_str_eq(rlc_code_name(RLC_ALLOWED), "ALLOWED");
    ck_assert_str_eq(rlc_code_name(RLC_LIMITED), "LIMITED");
    ck_assert_str_eq(rlc_code_name(RLC_FAIL_OPEN), "FAIL_OPEN");
    ck_assert_str_eq(rlc_code_name(RLC_FAIL_CLOSED), "FAIL_CLOSED");
    ck_assert_str_eq(rlc_code_name(RLC_NO_RULE), "NO_RULE");
    ck_assert_str_eq(rlc_code_name(RLC_QUEUED), "QUEUED");
    ck_assert_str_eq(rlc_code_name(RLC_CODE_ERROR), "ERROR");
    ck_assert_str_eq(rlc_code_name(6), "?");
    ck_assert_str_eq(rlc_error_name(RLC_ERR_UNAUTHORIZED), "UNAUTHORIZED");
    ck_assert_str_eq(rlc_error_name(RLC_ERR_NOT_OWNER), "NOT_OWNER");
    ck_assert_str_eq(rlc_error_name(RLC_ERR_MOVING), "MOVING");
    ck_assert_str_eq(rlc_error_name(8), "?");
    ck_assert_str_eq(rlc_strerror(-ETIMEDOUT), "timed out");
    ck_assert_str_eq(rlc_strerror(-12345), "unknown error");
    ck_assert_str_eq(rlc_version(), "0.1.0");
}
END_TEST

static Suite *
http_suite(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("http");

    tcase_add_test(tc, test_doc_examples);
    tcase_add_test(tc, test_rounding);
    tcase_add_test(tc, test_escaping_and_bounds);
    tcase_add_test(tc, test_hostile_values);
    tcase_add_test(tc, test_answer_wait);
    tcase_add_test(tc, test_unreachable_format_names);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(http_suite)
