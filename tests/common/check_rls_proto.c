/*
 * check_rls_proto: the Check suite of rlrls_proto, the C that protoc-c generates from the
 * vendored Envoy rate limit service protos (proto/). Encodes and decodes a RateLimitRequest
 * and a RateLimitResponse with protobuf-c, and proves wire compatibility both ways with
 * Python's protobuf (tests/common/rls_pyproto.py generates its code from the same .proto
 * files at run time). Not for the gRPC service (nothing serves it yet).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "rltest.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest Req;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse Resp;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor Desc;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry Entry;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__RateLimitOverride Override;

/* The domain and an entry's key and value are bytes in C (proto/README.md): a string
 * literal's bytes, without its NUL. */
#define BYTES(lit) ((ProtobufCBinaryData){sizeof(lit) - 1, (uint8_t *)(lit)})
/* b holds exactly the literal's bytes. */
#define ck_assert_bytes_eq(b, lit)                                                                 \
    do {                                                                                           \
        ProtobufCBinaryData b_ = (b);                                                              \
        ck_assert_uint_eq(b_.len, sizeof(lit) - 1);                                                \
        ck_assert(b_.len == 0 || memcmp(b_.data, (lit), b_.len) == 0);                             \
    } while (0)

/* The request rls_pyproto.py encodes, built in C. */
static size_t
pack_sample(uint8_t **out)
{
    Req r = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    Desc d0 = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT;
    Desc d1 = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT;
    Entry e0 = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT;
    Entry e1 = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT;
    Entry e2 = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT;
    Override o =
        ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__RATE_LIMIT_OVERRIDE__INIT;
    Google__Protobuf__UInt64Value hits = GOOGLE__PROTOBUF__UINT64_VALUE__INIT;
    Entry *ents0[] = {&e0, &e1}, *ents1[] = {&e2};
    Desc *descs[] = {&d0, &d1};

    e0.key = BYTES("remote_address");
    e0.value = BYTES("10.0.0.1\0tail"); /* a NUL is one more byte */
    e1.key = BYTES("path");
    e1.value = BYTES("/caf\xc3\xa9");
    e2.key = BYTES("generic_key");
    o.requests_per_unit = 42;
    o.unit = ENVOY__TYPE__V3__RATE_LIMIT_UNIT__HOUR;
    hits.value = 7;
    d0.n_entries = 2;
    d0.entries = ents0;
    d0.limit = &o;
    d0.hits_addend = &hits;
    d1.n_entries = 1;
    d1.entries = ents1;
    r.domain = BYTES("edge");
    r.n_descriptors = 2;
    r.descriptors = descs;
    r.hits_addend = 3;

    size_t n = envoy__service__ratelimit__v3__rate_limit_request__get_packed_size(&r);
    *out = malloc(n);
    ck_assert_ptr_nonnull(*out);
    ck_assert_uint_eq(envoy__service__ratelimit__v3__rate_limit_request__pack(&r, *out), n);
    return n;
}

/* Asserts that r is the sample request, field by field. */
static void
check_sample(const Req *r)
{
    ck_assert_bytes_eq(r->domain, "edge");
    ck_assert_uint_eq(r->hits_addend, 3);
    ck_assert_uint_eq(r->n_descriptors, 2);
    const Desc *d = r->descriptors[0];
    ck_assert_uint_eq(d->n_entries, 2);
    ck_assert_bytes_eq(d->entries[0]->key, "remote_address");
    ck_assert_bytes_eq(d->entries[0]->value, "10.0.0.1\0tail");
    ck_assert_bytes_eq(d->entries[1]->key, "path");
    ck_assert_bytes_eq(d->entries[1]->value, "/caf\xc3\xa9");
    ck_assert_ptr_nonnull(d->limit);
    ck_assert_uint_eq(d->limit->requests_per_unit, 42);
    ck_assert_int_eq(d->limit->unit, ENVOY__TYPE__V3__RATE_LIMIT_UNIT__HOUR);
    ck_assert_ptr_nonnull(d->hits_addend);
    ck_assert_uint_eq(d->hits_addend->value, 7);
    d = r->descriptors[1];
    ck_assert_uint_eq(d->n_entries, 1);
    ck_assert_bytes_eq(d->entries[0]->key, "generic_key");
    ck_assert_bytes_eq(d->entries[0]->value, "");
    ck_assert_ptr_null(d->limit);
    ck_assert_ptr_null(d->hits_addend);
}

START_TEST(test_request_round_trip)
{
    uint8_t *buf;
    size_t n = pack_sample(&buf);
    Req *r = envoy__service__ratelimit__v3__rate_limit_request__unpack(NULL, n, buf);

    ck_assert_ptr_nonnull(r);
    check_sample(r);
    envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(r, NULL);
    /* field 1 is the domain: its tag and length lead the bytes */
    ck_assert_uint_eq(buf[0], (1 << 3) | 2);
    ck_assert_uint_eq(buf[1], 4);
    ck_assert_mem_eq(buf + 2, "edge", 4);
    /* every cut of the message short of its end is refused, or decodes to something smaller */
    for (size_t cut = 1; cut < n; cut++) {
        r = envoy__service__ratelimit__v3__rate_limit_request__unpack(NULL, cut, buf);
        if (r != NULL) {
            ck_assert(envoy__service__ratelimit__v3__rate_limit_request__get_packed_size(r) < n);
            envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(r, NULL);
        }
    }
    free(buf);
}
END_TEST

START_TEST(test_response_round_trip)
{
    Resp r = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
    Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus st =
        ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__DESCRIPTOR_STATUS__INIT;
    Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit lim =
        ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__INIT;
    Google__Protobuf__Duration reset = GOOGLE__PROTOBUF__DURATION__INIT;
    Envoy__Config__Core__V3__HeaderValue h = ENVOY__CONFIG__CORE__V3__HEADER_VALUE__INIT;
    Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus *sts[] = {&st};
    Envoy__Config__Core__V3__HeaderValue *hs[] = {&h};
    uint8_t buf[256];

    lim.name = "per-ip";
    lim.requests_per_unit = 10;
    lim.unit = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__UNIT__WEEK;
    reset.seconds = 59;
    st.code = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT;
    st.current_limit = &lim;
    st.limit_remaining = 0;
    st.duration_until_reset = &reset;
    h.key = "x-ratelimit-limit";
    h.value = "10";
    r.overall_code = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT;
    r.n_statuses = 1;
    r.statuses = sts;
    r.n_response_headers_to_add = 1;
    r.response_headers_to_add = hs;
    size_t n = envoy__service__ratelimit__v3__rate_limit_response__get_packed_size(&r);
    ck_assert_uint_le(n, sizeof(buf));
    ck_assert_uint_eq(envoy__service__ratelimit__v3__rate_limit_response__pack(&r, buf), n);
    Resp *u = envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, n, buf);
    ck_assert_ptr_nonnull(u);
    ck_assert_int_eq(u->overall_code, 2);
    ck_assert_uint_eq(u->n_statuses, 1);
    ck_assert_int_eq(u->statuses[0]->current_limit->unit, 7); /* WEEK is 7 upstream */
    ck_assert_str_eq(u->statuses[0]->current_limit->name, "per-ip");
    ck_assert_int_eq(u->statuses[0]->duration_until_reset->seconds, 59);
    ck_assert_str_eq(u->response_headers_to_add[0]->key, "x-ratelimit-limit");
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(u, NULL);
}
END_TEST

static char *
slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = malloc(65536);

    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(buf);
    *len = fread(buf, 1, 65535, f);
    buf[*len] = '\0';
    fclose(f);
    return buf;
}

START_TEST(test_python_wire)
{
    char dir[] = "/tmp/rl-rlsproto-XXXXXX";
    char bin[256], txt[256], cmd[1024];
    size_t n;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(bin, sizeof(bin), "%s/req.bin", dir);
    snprintf(txt, sizeof(txt), "%s/req.txt", dir);

    /* Python encodes, protobuf-c decodes */
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s/tests/common/rls_pyproto.py encode %s",
             RL_SOURCE_DIR, bin);
    ck_assert_int_eq(system(cmd), 0);
    char *bytes = slurp(bin, &n);
    Req *r = envoy__service__ratelimit__v3__rate_limit_request__unpack(NULL, n, (uint8_t *)bytes);
    ck_assert_ptr_nonnull(r);
    check_sample(r);
    envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(r, NULL);
    free(bytes);

    /* protobuf-c encodes, Python decodes */
    uint8_t *buf;
    n = pack_sample(&buf);
    FILE *f = fopen(bin, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
    fclose(f);
    free(buf);
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s/tests/common/rls_pyproto.py decode %s > %s",
             RL_SOURCE_DIR, bin, txt);
    ck_assert_int_eq(system(cmd), 0);
    char *text = slurp(txt, &n);
    ck_assert_str_eq(text, "domain=edge hits_addend=3\n"
                           "descriptor has_limit=True has_hits=True\n"
                           "limit=42 unit=3\n"
                           "hits=7\n"
                           "entry remote_address=10.0.0.1\\0tail\n"
                           "entry path=/caf\xc3\xa9\n"
                           "descriptor has_limit=False has_hits=False\n"
                           "entry generic_key=\n");
    free(text);
    unlink(bin);
    unlink(txt);
    rmdir(dir);
}
END_TEST

static Suite *
rls_proto_suite(void)
{
    Suite *s = suite_create("rls_proto");
    TCase *tc = tcase_create("rls_proto");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_request_round_trip);
    tcase_add_test(tc, test_response_round_trip);
    tcase_add_test(tc, test_python_wire);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(rls_proto_suite)
