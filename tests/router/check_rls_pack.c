/*
 * check_rls_pack: the RateLimitResponse written by hand (router/rls_meta.c,
 * rls_response_write) against protobuf-c's pack of the same message, byte for byte: random
 * responses of 0 to 6 statuses (every code and unit, limits with and without a name,
 * durations with negative and large values, remaining 0 and past 2^31) and 0 to 3 headers,
 * within rls_response_bound.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rls_int.h"
#include "rltest.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitResponse rls_response;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus rls_status;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit rls_limit;
typedef Envoy__Config__Core__V3__HeaderValue rls_header;

static uint64_t seed = 0x9e3779b97f4a7c15u;

static uint64_t
rnd(void)
{
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return seed;
}

/* a number of the kinds that change a varint's length, or 0 */
static uint64_t
rnd_num(void)
{
    static const uint64_t edge[] = {0, 1, 127, 128, 16383, 16384, 0x7fffffff, 0x80000000u,
                                    0xffffffffu};

    return rnd() % 3 == 0 ? edge[rnd() % (sizeof(edge) / sizeof(edge[0]))] : rnd() >> (rnd() % 64);
}

static void
rnd_text(char *buf, size_t cap)
{
    size_t n = rnd() % 4 == 0 ? 0 : rnd() % (cap - 1);

    for (size_t i = 0; i < n; i++) {
        buf[i] = (char)('a' + rnd() % 26);
    }
    buf[n] = '\0';
}

/* Packs resp both ways; the hand's bytes must be protobuf-c's. */
static void
compare(const rls_response *resp)
{
    size_t bound = rls_response_bound(resp);
    size_t want = envoy__service__ratelimit__v3__rate_limit_response__get_packed_size(resp);
    uint8_t *a = malloc(want + 1), *b = malloc(bound + 16), *end;
    size_t got;

    ck_assert_uint_gt(bound, 0);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(envoy__service__ratelimit__v3__rate_limit_response__pack(resp, a), want);
    memset(b, 0xee, bound + 16);
    end = b + 8 + bound;
    got = rls_response_write(end, resp);
    ck_assert_msg(got <= bound, "wrote %zu bytes, bound %zu", got, bound);
    ck_assert_uint_eq(got, want);
    ck_assert_msg(memcmp(end - got, a, want) == 0, "bytes differ (%zu statuses, %zu headers)",
                  resp->n_statuses, resp->n_response_headers_to_add);
    for (size_t i = 0; i < 8; i++) { /* nothing written outside [end - bound, end) */
        ck_assert_uint_eq(b[i], 0xee);
        ck_assert_uint_eq(end[i], 0xee);
    }
    free(a);
    free(b);
}

START_TEST(test_random_responses)
{
    for (int round = 0; round < 20000; round++) {
        rls_response resp = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
        rls_status st[6], *stp[6];
        rls_limit lim[6];
        Google__Protobuf__Duration dur[6];
        rls_header h[3], *hp[3];
        char names[6][40], keys[3][24], vals[3][40];

        resp.overall_code = rnd() % 3;
        resp.n_statuses = rnd() % 7;
        for (size_t i = 0; i < resp.n_statuses; i++) {
            envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(&st[i]);
            stp[i] = &st[i];
            st[i].code = rnd() % 3;
            st[i].limit_remaining = (uint32_t)rnd_num();
            if (rnd() % 4 != 0) {
                envoy__service__ratelimit__v3__rate_limit_response__rate_limit__init(&lim[i]);
                lim[i].requests_per_unit = (uint32_t)rnd_num();
                lim[i].unit = rnd() % 8;
                rnd_text(names[i], sizeof(names[i]));
                lim[i].name = rnd() % 5 == 0 ? NULL : names[i];
                st[i].current_limit = &lim[i];
            }
            if (rnd() % 4 != 0) {
                google__protobuf__duration__init(&dur[i]);
                dur[i].seconds = (int64_t)rnd_num() * (rnd() % 5 == 0 ? -1 : 1);
                dur[i].nanos = (int32_t)(rnd() % 1000000000) * (rnd() % 7 == 0 ? -1 : 1);
                if (rnd() % 5 == 0) {
                    dur[i].nanos = 0;
                }
                st[i].duration_until_reset = &dur[i];
            }
        }
        resp.statuses = stp;
        resp.n_response_headers_to_add = rnd() % 4;
        for (size_t i = 0; i < resp.n_response_headers_to_add; i++) {
            envoy__config__core__v3__header_value__init(&h[i]);
            hp[i] = &h[i];
            rnd_text(keys[i], sizeof(keys[i]));
            rnd_text(vals[i], sizeof(vals[i]));
            h[i].key = keys[i];
            h[i].value = vals[i];
        }
        resp.response_headers_to_add = hp;
        compare(&resp);
    }
}
END_TEST

static Suite *
rls_pack_suite(void)
{
    Suite *s = suite_create("rls_pack");
    TCase *tc = tcase_create("pack");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_random_responses);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(rls_pack_suite)
