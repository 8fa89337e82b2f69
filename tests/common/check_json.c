/*
 * check_json: the Check suite of common/json.c. Writes documents into memory streams and
 * compares them byte for byte: nesting and commas, every value kind, the byte escaping of
 * strings, and the nesting errors rl_json_finish reports. Not for the documents the
 * programs write (their own suites check those).
 */
#include "json.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rltest.h"

struct doc {
    char *text;
    size_t len;
    FILE *f;
    struct rl_json j;
};

static void
doc_open(struct doc *d)
{
    d->text = NULL;
    d->len = 0;
    d->f = open_memstream(&d->text, &d->len);
    ck_assert_ptr_nonnull(d->f);
    rl_json_init(&d->j, d->f);
}

/* Closes the stream; returns rl_json_finish's code. */
static int
doc_close(struct doc *d)
{
    int rc = rl_json_finish(&d->j);

    fclose(d->f);
    return rc;
}

START_TEST(test_nesting_and_commas)
{
    struct doc d;

    doc_open(&d);
    rl_json_begin_object(&d.j);
    rl_json_kv_str(&d.j, "name", "a");
    rl_json_kv_u64(&d.j, "n", 18446744073709551615ull);
    rl_json_kv_i64(&d.j, "neg", -5);
    rl_json_key(&d.j, "list");
    rl_json_begin_array(&d.j);
    rl_json_u64(&d.j, 1);
    rl_json_begin_object(&d.j);
    rl_json_end_object(&d.j);
    rl_json_begin_array(&d.j);
    rl_json_end_array(&d.j);
    rl_json_null(&d.j);
    rl_json_bool(&d.j, false);
    rl_json_end_array(&d.j);
    rl_json_kv_bool(&d.j, "ok", true);
    rl_json_key(&d.j, "ratio");
    rl_json_f64(&d.j, 0.125, 2);
    rl_json_key(&d.j, "nan");
    rl_json_f64(&d.j, NAN, 2);
    rl_json_kv_str(&d.j, "none", NULL);
    rl_json_end_object(&d.j);
    ck_assert_int_eq(doc_close(&d), 0);
    ck_assert_str_eq(d.text, "{\"name\":\"a\",\"n\":18446744073709551615,\"neg\":-5,"
                             "\"list\":[1,{},[],null,false],\"ok\":true,\"ratio\":0.12,"
                             "\"nan\":null,\"none\":null}");
    free(d.text);
}
END_TEST

START_TEST(test_string_bytes)
{
    struct doc d;
    const char raw[] = {'a', '"', '\\', '\n', 0, (char)0xff, (char)0xc3, (char)0xa9, '~', 0x7f};

    doc_open(&d);
    rl_json_strn(&d.j, raw, sizeof(raw));
    ck_assert_int_eq(doc_close(&d), 0);
    ck_assert_str_eq(d.text, "\"a\\\"\\\\\\u000a\\u0000\\u00ff\\u00c3\\u00a9~\\u007f\"");
    free(d.text);

    doc_open(&d);
    rl_json_begin_object(&d.j);
    rl_json_kv_str(&d.j, "k\"ey", "");
    rl_json_end_object(&d.j);
    ck_assert_int_eq(doc_close(&d), 0);
    ck_assert_str_eq(d.text, "{\"k\\\"ey\":\"\"}");
    free(d.text);
}
END_TEST

START_TEST(test_nesting_errors)
{
    struct doc d;

    doc_open(&d); /* an end without a begin */
    rl_json_end_object(&d.j);
    ck_assert_int_eq(doc_close(&d), -EINVAL);
    free(d.text);

    doc_open(&d); /* a begin without its end */
    rl_json_begin_array(&d.j);
    ck_assert_int_eq(doc_close(&d), -EINVAL);
    free(d.text);

    doc_open(&d); /* a key without its value */
    rl_json_begin_object(&d.j);
    rl_json_key(&d.j, "k");
    rl_json_end_object(&d.j);
    ck_assert_int_eq(doc_close(&d), -EINVAL);
    free(d.text);

    doc_open(&d); /* deeper than RL_JSON_DEPTH_MAX */
    for (int i = 0; i <= RL_JSON_DEPTH_MAX; i++) {
        rl_json_begin_array(&d.j);
    }
    for (int i = 0; i <= RL_JSON_DEPTH_MAX; i++) {
        rl_json_end_array(&d.j);
    }
    ck_assert_int_eq(doc_close(&d), -EINVAL);
    free(d.text);

    doc_open(&d); /* the deepest allowed */
    for (int i = 0; i < RL_JSON_DEPTH_MAX; i++) {
        rl_json_begin_array(&d.j);
    }
    for (int i = 0; i < RL_JSON_DEPTH_MAX; i++) {
        rl_json_end_array(&d.j);
    }
    ck_assert_int_eq(doc_close(&d), 0);
    free(d.text);
}
END_TEST

static Suite *
json_suite(void)
{
    Suite *s = suite_create("json");
    TCase *tc = tcase_create("writer");

    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_nesting_and_commas);
    tcase_add_test(tc, test_string_bytes);
    tcase_add_test(tc, test_nesting_errors);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(json_suite)
