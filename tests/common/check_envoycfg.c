/*
 * check_envoycfg: the Check suite of common/envoycfg*.c. Loads envoyproxy/ratelimit's own test
 * configurations (the YAML files of its test/config folder, carried over as text) and
 * expects the limits and the rejections its config_test.go expects, then this project's
 * extensions, the bounds, the FILE:LINE of every message, directories of files and the
 * counter key. Not for the gRPC service (nothing serves it yet).
 */
#include "envoycfg.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rltest.h"

static struct rl_envoy_config *
load_opts(const char *text, const struct rl_envoy_opts *o)
{
    struct rl_envoy_config *c = NULL;
    char err[512] = "";

    int rc = rl_envoy_parse("t.yaml", text, strlen(text), o, &c, err, sizeof(err));
    ck_assert_msg(rc == 0, "unexpected error: %s", err);
    ck_assert_ptr_nonnull(c);
    return c;
}

static struct rl_envoy_config *
load(const char *text)
{
    return load_opts(text, NULL);
}

static void
expect_err(const char *text, const char *want)
{
    struct rl_envoy_config *c = (void *)1;
    char err[512] = "";

    int rc = rl_envoy_parse("t.yaml", text, strlen(text), NULL, &c, err, sizeof(err));
    ck_assert_msg(rc == -1, "loaded, expected %s", want);
    ck_assert_ptr_null(c);
    ck_assert_str_eq(err, want);
}

/* The descriptor matched by the entries "k1", "v1", "k2", "v2", ..., NULL. */
static const struct rl_envoy_desc *
match_share(const struct rl_envoy_config *c, const char *domain, const char **share, ...)
{
    struct rl_envoy_entry e[16];
    size_t n = 0;
    va_list ap;
    const char *k;

    va_start(ap, share);
    while ((k = va_arg(ap, const char *)) != NULL) {
        const char *v = va_arg(ap, const char *);
        e[n].key = k;
        e[n].key_len = strlen(k);
        e[n].value = v;
        e[n].value_len = strlen(v);
        n++;
    }
    va_end(ap);
    return rl_envoy_match(c, domain, strlen(domain), e, n, share);
}

#define match(c, d, ...) match_share(c, d, NULL, __VA_ARGS__, NULL)

/* requests_per_unit of the first limit of what matched, -1 for no match. */
static long
rpu(const struct rl_envoy_desc *d)
{
    return d == NULL ? -1 : (long)d->limits[0].requests_per_unit;
}

static const char basic_config[] = /* upstream test/config/basic_config.yaml */
    "# Basic configuration for testing.\n"
    "domain: test-domain\n"
    "descriptors:\n"
    "  - key: key1\n"
    "    value: value1\n"
    "    descriptors:\n"
    "      - key: subkey1\n"
    "        rate_limit:\n"
    "          unit: second\n"
    "          requests_per_unit: 5\n"
    "      - key: subkey1\n"
    "        value: subvalue1\n"
    "        rate_limit:\n"
    "          unit: second\n"
    "          requests_per_unit: 10\n"
    "  - key: key2\n"
    "    rate_limit:\n"
    "      unit: minute\n"
    "      requests_per_unit: 20\n"
    "  - key: key2\n"
    "    value: value2\n"
    "    rate_limit:\n"
    "      unit: minute\n"
    "      requests_per_unit: 30\n"
    "  - key: key2\n"
    "    value: value3\n"
    "  - key: key3\n"
    "    rate_limit:\n"
    "      unit: hour\n"
    "      requests_per_unit: 1\n"
    "  - key: key4\n"
    "    rate_limit:\n"
    "      name: key4_rate_limit\n"
    "      unit: day\n"
    "      requests_per_unit: 1\n"
    "  - key: key5\n"
    "    value: value5\n"
    "    rate_limit:\n"
    "      unit: day\n"
    "      requests_per_unit: 15\n"
    "    descriptors:\n"
    "      - key: subkey5\n"
    "        value: subvalue5\n"
    "        rate_limit:\n"
    "          unit: day\n"
    "          requests_per_unit: 25\n"
    "  - key: key6\n"
    "    rate_limit:\n"
    "      unlimited: true\n"
    "  - key: key7\n"
    "    detailed_metric: true\n"
    "    rate_limit:\n"
    "      unit: minute\n"
    "      requests_per_unit: 70\n";

START_TEST(test_upstream_basic)
{
    struct rl_envoy_config *c = load(basic_config);
    const struct rl_envoy_desc *d;
    struct rl_envoy_entry none = {"key1", 4, "value1", 6};

    ck_assert_uint_eq(c->ndomains, 1);
    ck_assert_uint_eq(c->ndescriptors, 12);
    ck_assert_ptr_null(rl_envoy_match(c, "foo_domain", 10, &none, 1, NULL));
    ck_assert_ptr_null(rl_envoy_match(c, "test-domain", 11, &none, 0, NULL));
    ck_assert_int_eq(rpu(match(c, "test-domain", "key1", "something")), -1);
    ck_assert_int_eq(rpu(match(c, "test-domain", "key1", "value1")), -1);
    /* a limit at a shallower level does not apply to a longer descriptor */
    ck_assert_int_eq(rpu(match(c, "test-domain", "key2", "value2", "subkey", "subvalue")), -1);
    ck_assert_int_eq(rpu(match(c, "test-domain", "key5", "value5", "subkey5", "subvalue")), -1);
    ck_assert_int_eq(rpu(match(c, "test-domain", "key5", "value5")), 15);
    ck_assert_int_eq(rpu(match(c, "test-domain", "key5", "value5", "subkey5", "subvalue5")), 25);

    d = match(c, "test-domain", "key1", "value1", "subkey1", "something");
    ck_assert_int_eq(rpu(d), 5);
    ck_assert_int_eq(d->limits[0].unit, RL_ENVOY_UNIT_SECOND);
    ck_assert_str_eq(d->full_key, "test-domain.key1_value1.subkey1");
    d = match(c, "test-domain", "key1", "value1", "subkey1", "subvalue1");
    ck_assert_int_eq(rpu(d), 10);
    ck_assert_str_eq(d->full_key, "test-domain.key1_value1.subkey1_subvalue1");
    d = match(c, "test-domain", "key2", "something");
    ck_assert_int_eq(rpu(d), 20);
    ck_assert_int_eq(d->limits[0].unit, RL_ENVOY_UNIT_MINUTE);
    ck_assert_str_eq(d->full_key, "test-domain.key2");
    d = match(c, "test-domain", "key2", "value2");
    ck_assert_int_eq(rpu(d), 30);
    ck_assert_str_eq(d->full_key, "test-domain.key2_value2");
    /* key2/value3 has no rate_limit: it whitelists the value */
    ck_assert_ptr_null(match(c, "test-domain", "key2", "value3"));
    d = match(c, "test-domain", "key3", "foo");
    ck_assert_int_eq(rpu(d), 1);
    ck_assert_str_eq(d->limits[0].name, "");
    ck_assert_int_eq(d->limits[0].unit, RL_ENVOY_UNIT_HOUR);
    d = match(c, "test-domain", "key4", "foo");
    ck_assert_str_eq(d->limits[0].name, "key4_rate_limit");
    ck_assert_int_eq(d->limits[0].unit, RL_ENVOY_UNIT_DAY);
    d = match(c, "test-domain", "key6", "foo");
    ck_assert(d->limits[0].unlimited);
    ck_assert_int_eq(d->limits[0].unit, RL_ENVOY_UNIT_UNKNOWN);
    d = match(c, "test-domain", "key7", "unspecified_value");
    ck_assert_int_eq(rpu(d), 70);
    ck_assert(d->detailed_metric);
    ck_assert(!d->shadow_mode);
    ck_assert_int_eq(d->limits[0].algo, RL_ALGO_FIXED_WINDOW);
    ck_assert(!d->limits[0].algo_set);
    rl_envoy_config_free(c);
}
END_TEST

/* upstream's examples/ratelimit/config/example.yaml, verbatim */
static const char example_yaml[] = "---\n"
                                   "domain: rl\n"
                                   "descriptors:\n"
                                   "  - key: category\n"
                                   "    value: account\n"
                                   "    rate_limit:\n"
                                   "      replaces:\n"
                                   "        - name: bkthomps\n"
                                   "        - name: fake_name\n"
                                   "      unit: minute\n"
                                   "      requests_per_unit: 4\n"
                                   "  - key: source_cluster\n"
                                   "    value: proxy\n"
                                   "    descriptors:\n"
                                   "      - key: destination_cluster\n"
                                   "        value: bkthomps\n"
                                   "        rate_limit:\n"
                                   "          replaces:\n"
                                   "            - name: bkthomps\n"
                                   "          unit: minute\n"
                                   "          requests_per_unit: 2\n"
                                   "      - key: destination_cluster\n"
                                   "        value: mock\n"
                                   "        rate_limit:\n"
                                   "          unit: minute\n"
                                   "          requests_per_unit: 1\n"
                                   "      - key: destination_cluster\n"
                                   "        value: override\n"
                                   "        rate_limit:\n"
                                   "          replaces:\n"
                                   "            - name: banned_limit\n"
                                   "          unit: minute\n"
                                   "          requests_per_unit: 2\n"
                                   "      - key: destination_cluster\n"
                                   "        value: fake\n"
                                   "        rate_limit:\n"
                                   "          name: fake_name\n"
                                   "          unit: minute\n"
                                   "          requests_per_unit: 2\n"
                                   "  - key: foo\n"
                                   "    rate_limit:\n"
                                   "      unit: minute\n"
                                   "      requests_per_unit: 2\n"
                                   "    descriptors:\n"
                                   "      - key: bar\n"
                                   "        rate_limit:\n"
                                   "          unit: minute\n"
                                   "          requests_per_unit: 3\n"
                                   "      - key: bar\n"
                                   "        value: bkthomps\n"
                                   "        rate_limit:\n"
                                   "          name: bkthomps\n"
                                   "          unit: minute\n"
                                   "          requests_per_unit: 1\n"
                                   "      - key: bar\n"
                                   "        value: banned\n"
                                   "        rate_limit:\n"
                                   "          name: banned_limit\n"
                                   "          unit: minute\n"
                                   "          requests_per_unit: 0\n"
                                   "      - key: baz\n"
                                   "        rate_limit:\n"
                                   "          unit: second\n"
                                   "          requests_per_unit: 1\n"
                                   "      - key: baz\n"
                                   "        value: not-so-shady\n"
                                   "        rate_limit:\n"
                                   "          unit: minute\n"
                                   "          requests_per_unit: 3\n"
                                   "      - key: baz\n"
                                   "        value: shady\n"
                                   "        rate_limit:\n"
                                   "          unit: minute\n"
                                   "          requests_per_unit: 3\n"
                                   "        shadow_mode: true\n"
                                   "      - key: bay\n"
                                   "        rate_limit:\n"
                                   "          unlimited: true\n"
                                   "  - key: unspec\n"
                                   "    detailed_metric: true\n"
                                   "    rate_limit:\n"
                                   "      unit: minute\n"
                                   "      requests_per_unit: 2\n"
                                   "  - key: qux\n"
                                   "    rate_limit:\n"
                                   "      unlimited: true\n"
                                   "  - key: service\n"
                                   "    value: service_1\n"
                                   "    quota_mode: true\n"
                                   "    rate_limit:\n"
                                   "      unit: minute\n"
                                   "      requests_per_unit: 1\n"
                                   "    metadata:\n"
                                   "      service_with_quota:\n"
                                   "        name: \"service_1\"\n"
                                   "  - key: service\n"
                                   "    value: service_2\n"
                                   "    quota_mode: true\n"
                                   "    rate_limit:\n"
                                   "      unit: minute\n"
                                   "      requests_per_unit: 2\n"
                                   "    metadata:\n"
                                   "      service_with_quota:\n"
                                   "        name: \"service_2\"\n";

/* upstream's examples/ratelimit/config/config.yaml, verbatim */
static const char config_yaml[] = "---\n"
                                  "domain: mongo_cps\n"
                                  "descriptors:\n"
                                  "  - key: database\n"
                                  "    value: users\n"
                                  "    rate_limit:\n"
                                  "      unit: second\n"
                                  "      requests_per_unit: 500\n"
                                  "\n"
                                  "  - key: database\n"
                                  "    value: default\n"
                                  "    rate_limit:\n"
                                  "      unit: second\n"
                                  "      requests_per_unit: 500\n";

START_TEST(test_upstream_examples)
{
    char dir[] = "/tmp/rl-envoycfg-XXXXXX";
    char path[512], err[512];
    struct rl_envoy_config *c = NULL;
    const struct rl_envoy_desc *d;
    FILE *f;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/example.yaml", dir);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fputs(example_yaml, f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/config.yaml", dir);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fputs(config_yaml, f);
    fclose(f);
    ck_assert_msg(rl_envoy_load(dir, NULL, &c, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(c->ndomains, 2);
    ck_assert_str_eq(c->domains[0].name, "mongo_cps"); /* sorted by name */
    ck_assert_int_eq(rpu(match(c, "mongo_cps", "database", "users")), 500);
    ck_assert_ptr_null(match(c, "mongo_cps", "database", "other"));

    d = match(c, "rl", "category", "account");
    ck_assert_int_eq(rpu(d), 4);
    ck_assert_uint_eq(d->limits[0].nreplaces, 2);
    ck_assert_str_eq(d->limits[0].replaces[1], "fake_name");
    ck_assert_int_eq(rpu(match(c, "rl", "foo", "x")), 2);
    ck_assert_int_eq(rpu(match(c, "rl", "foo", "x", "bar", "y")), 3);
    d = match(c, "rl", "foo", "x", "bar", "bkthomps");
    ck_assert_int_eq(rpu(d), 1);
    ck_assert_str_eq(d->limits[0].name, "bkthomps");
    ck_assert_int_eq(rpu(match(c, "rl", "foo", "x", "bar", "banned")), 0);
    ck_assert_int_eq(rpu(match(c, "rl", "foo", "x", "baz", "y")), 1);
    ck_assert_int_eq(match(c, "rl", "foo", "x", "baz", "y")->limits[0].unit, RL_ENVOY_UNIT_SECOND);
    ck_assert(!match(c, "rl", "foo", "x", "baz", "not-so-shady")->shadow_mode);
    ck_assert(match(c, "rl", "foo", "x", "baz", "shady")->shadow_mode);
    ck_assert(match(c, "rl", "foo", "x", "bay", "y")->limits[0].unlimited);
    ck_assert_ptr_null(match(c, "rl", "foo", "x", "other", "y"));
    ck_assert_ptr_null(match(c, "rl", "source_cluster", "proxy"));
    d = match(c, "rl", "source_cluster", "proxy", "destination_cluster", "override");
    ck_assert_str_eq(d->limits[0].replaces[0], "banned_limit");
    ck_assert_ptr_null(match(c, "rl", "source_cluster", "proxy", "destination_cluster", "x"));
    ck_assert(match(c, "rl", "unspec", "a")->detailed_metric);
    ck_assert(match(c, "rl", "service", "service_2")->quota_mode);
    ck_assert_int_eq(rpu(match(c, "rl", "service", "service_2")), 2);
    rl_envoy_config_free(c);
    unlink(path);
    snprintf(path, sizeof(path), "%s/example.yaml", dir);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(test_upstream_shadow_mode)
{
    struct rl_envoy_config *c = load(/* upstream test/config/shadowmode_config.yaml */
                                     "domain: test-domain\n"
                                     "descriptors:\n"
                                     "  - key: key1\n"
                                     "    value: value1\n"
                                     "    descriptors:\n"
                                     "      - key: subkey1\n"
                                     "        rate_limit:\n"
                                     "          unit: second\n"
                                     "          requests_per_unit: 5\n"
                                     "      - key: subkey1\n"
                                     "        value: subvalue1\n"
                                     "        rate_limit:\n"
                                     "          unit: second\n"
                                     "          requests_per_unit: 10\n"
                                     "        shadow_mode: true\n"
                                     "  - key: key2\n"
                                     "    rate_limit:\n"
                                     "      unit: minute\n"
                                     "      requests_per_unit: 20\n"
                                     "    shadow_mode: true\n"
                                     "  - key: key2\n"
                                     "    value: value2\n"
                                     "    rate_limit:\n"
                                     "      unit: minute\n"
                                     "      requests_per_unit: 30\n");

    ck_assert(!match(c, "test-domain", "key1", "value1", "subkey1", "x")->shadow_mode);
    ck_assert(match(c, "test-domain", "key1", "value1", "subkey1", "subvalue1")->shadow_mode);
    ck_assert(match(c, "test-domain", "key2", "x")->shadow_mode);
    ck_assert(!match(c, "test-domain", "key2", "value2")->shadow_mode);
    rl_envoy_config_free(c);
}
END_TEST

START_TEST(test_upstream_wildcard)
{
    struct rl_envoy_config *c = load(/* upstream test/config/wildcard.yaml */
                                     "domain: test-domain\n"
                                     "descriptors:\n"
                                     "  - key: wild\n"
                                     "    value: foo*\n"
                                     "    rate_limit: {unit: minute, requests_per_unit: 20}\n"
                                     "  - key: noWild\n"
                                     "    value: foo\n"
                                     "    rate_limit: {unit: minute, requests_per_unit: 21}\n"
                                     "  - key: noVal\n"
                                     "    rate_limit: {unit: minute, requests_per_unit: 22}\n"
                                     "  - key: midWild\n"
                                     "    value: bar*b\n"
                                     "    rate_limit: {unit: minute, requests_per_unit: 23}\n"
                                     "  - key: multiWild\n"
                                     "    value: foo*bar*baz\n"
                                     "    rate_limit: {unit: minute, requests_per_unit: 10}\n"
                                     "  - key: nestedWild\n"
                                     "    value: val1\n"
                                     "    descriptors:\n"
                                     "      - key: wild\n"
                                     "        value: goo*\n"
                                     "        rate_limit: {unit: minute, requests_per_unit: 24}\n");
    const struct rl_envoy_desc *d;

    ck_assert_int_eq(rpu(match(c, "test-domain", "noVal", "foo1")), 22);
    ck_assert_ptr_eq(match(c, "test-domain", "noVal", "foo1"),
                     match(c, "test-domain", "noVal", "foo2"));
    d = match(c, "test-domain", "wild", "foo1");
    ck_assert_int_eq(rpu(d), 20);
    ck_assert_ptr_eq(d, match(c, "test-domain", "wild", "foo2"));
    ck_assert_ptr_eq(d, match(c, "test-domain", "wild", "foo"));
    ck_assert_str_eq(d->full_key, "test-domain.wild_foo*");
    d = match(c, "test-domain", "nestedWild", "val1", "wild", "goo2");
    ck_assert_int_eq(rpu(d), 24);
    ck_assert_str_eq(d->full_key, "test-domain.nestedWild_val1.wild_goo*");
    ck_assert_ptr_null(match(c, "test-domain", "wild", "bar"));
    ck_assert_ptr_null(match(c, "test-domain", "noWild", "foo1"));
    ck_assert_int_eq(rpu(match(c, "test-domain", "noWild", "foo")), 21);
    ck_assert_int_eq(rpu(match(c, "test-domain", "midWild", "barab")), 23);
    ck_assert_int_eq(rpu(match(c, "test-domain", "midWild", "bar123b")), 23);
    ck_assert_int_eq(rpu(match(c, "test-domain", "midWild", "barb")), 23);
    ck_assert_ptr_null(match(c, "test-domain", "midWild", "bara"));
    ck_assert_ptr_null(match(c, "test-domain", "midWild", "xbarb"));
    ck_assert_ptr_null(match(c, "test-domain", "midWild", "bar"));
    ck_assert_int_eq(rpu(match(c, "test-domain", "multiWild", "foo123bar456baz")), 10);
    ck_assert_int_eq(rpu(match(c, "test-domain", "multiWild", "foobarbaz")), 10);
    ck_assert_ptr_null(match(c, "test-domain", "multiWild", "foo123baz"));
    ck_assert_ptr_null(match(c, "test-domain", "multiWild", "bar456baz"));
    ck_assert_ptr_null(match(c, "test-domain", "multiWild", "foobazbar"));
    rl_envoy_config_free(c);
}
END_TEST

START_TEST(test_upstream_share_threshold)
{
    struct rl_envoy_config *c = load(/* from upstream test/config/share_threshold.yaml */
                                     "domain: test-domain\n"
                                     "descriptors:\n"
                                     "  - key: files\n"
                                     "    value: files/*\n"
                                     "    share_threshold: true\n"
                                     "    rate_limit: {unit: minute, requests_per_unit: 100}\n"
                                     "  - key: nested\n"
                                     "    value: parent\n"
                                     "    descriptors:\n"
                                     "      - key: files\n"
                                     "        value: nested/*\n"
                                     "        share_threshold: true\n"
                                     "        rate_limit: {unit: minute, requests_per_unit: 200}\n"
                                     "  - key: file\n"
                                     "    value: test1\n"
                                     "    rate_limit: {unit: minute, requests_per_unit: 50}\n"
                                     "  - key: file\n"
                                     "    value: test*\n"
                                     "    share_threshold: true\n"
                                     "    rate_limit: {unit: minute, requests_per_unit: 101}\n"
                                     "  - key: plain\n"
                                     "    value: p*\n"
                                     "    rate_limit: {unit: minute, requests_per_unit: 7}\n");
    const char *share[2];
    char key[128];
    struct rl_envoy_entry e[2] = {{"files", 5, "files/a.pdf", 11}};

    ck_assert_int_eq(rpu(match_share(c, "test-domain", share, "files", "files/a.pdf", NULL)), 100);
    ck_assert_str_eq(share[0], "files/*");
    ck_assert_uint_eq(rl_envoy_counter_key(key, sizeof(key), "test-domain", 11, e, 1, share), 26);
    ck_assert_str_eq(key, "test-domain_files_files/*_");
    ck_assert_int_eq(rpu(match_share(c, "test-domain", share, "nested", "parent", "files",
                                     "nested/f.txt", NULL)),
                     200);
    ck_assert_ptr_null(share[0]);
    ck_assert_str_eq(share[1], "nested/*");
    /* an exact value is preferred over a wildcard one */
    ck_assert_int_eq(rpu(match_share(c, "test-domain", share, "file", "test1", NULL)), 50);
    ck_assert_ptr_null(share[0]);
    ck_assert_int_eq(rpu(match_share(c, "test-domain", share, "file", "test2", NULL)), 101);
    ck_assert_str_eq(share[0], "test*");
    /* a wildcard without share_threshold keeps the value in the counter key */
    ck_assert_int_eq(rpu(match_share(c, "test-domain", share, "plain", "pq", NULL)), 7);
    ck_assert_ptr_null(share[0]);
    /* a key that is the whole pattern, then a NUL and more (a gRPC key is bytes): it matches
     * the wildcard (files_files/ then anything), and the pattern is not trimmed, nor read
     * past its end (ASan: the trim compared up to the NUL, then read the byte after it) */
    e[0] = (struct rl_envoy_entry){"files_files/*\0zz", 16, "", 0};
    ck_assert_int_eq(rpu(rl_envoy_match(c, "test-domain", 11, e, 1, share)), 100);
    ck_assert_str_eq(share[0], "files_files/*");
    rl_envoy_config_free(c);
    expect_err("domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
               "t.yaml:3: share_threshold can only be used with wildcard values (containing "
               "'*'), but found key 'k_v'");
}
END_TEST

START_TEST(test_upstream_errors)
{
    /* upstream's test/config files that must fail, with upstream's message after FILE:LINE */
    expect_err("descriptors:\n", "t.yaml: config file cannot have empty domain");
    expect_err("", "t.yaml: config file cannot have empty domain");
    expect_err("domain: test-domain\ndescriptors:\n  - value: value1\n",
               "t.yaml:3: descriptor has empty key");
    expect_err("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n\n"
               "  - key: key1\n    value: value1\n",
               "t.yaml:6: duplicate descriptor composite key 'test-domain.key1_value1'");
    expect_err("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n"
               "    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n",
               "t.yaml:6: invalid rate limit unit 'foo'");
    expect_err("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n"
               "    descriptors:\n      - key: subkey1\n        rate_limit:\n"
               "          name: self\n          replaces:\n            - name: self\n"
               "          unit: second\n          requests_per_unit: 5\n",
               "t.yaml:10: replaces should not contain name of same descriptor");
    expect_err("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n"
               "    descriptors:\n      - key: subkey1\n        rate_limit:\n"
               "          name: self\n          replaces:\n            - name:\n"
               "          unit: second\n          requests_per_unit: 5\n",
               "t.yaml:10: should not have an empty replaces entry");
    expect_err("'''\n", "t.yaml:2: error loading config file: found unexpected end of stream "
                        "while scanning a quoted scalar");
    expect_err("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n"
               "    ratelimit:\n      unit: day\n      requests_per_unit: 5\n",
               "t.yaml:5: config error, unknown key 'ratelimit' in a descriptor");
    expect_err("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n"
               "    rate_limit:\n      unit: day\n      requestsperunit: 5\n",
               "t.yaml:7: config error, unknown key 'requestsperunit' in rate_limit");
    expect_err("0.25: test-domain\ndescriptors:\n", "t.yaml:1: config error, unknown key '0.25'");
    expect_err("domain: test-domain\ndescriptors:\n  - a\n  - b\n",
               "t.yaml:3: config error, yaml file contains list of type other than map: a");
    expect_err("domain: test-domain\ndescriptors:\n  - key: foo\n    rate_limit:\n"
               "      unlimited: true\n      unit: day\n      requests_per_unit: 25\n",
               "t.yaml:6: should not specify rate limit unit when unlimited");
}
END_TEST

START_TEST(test_domains_and_merge)
{
    char dir[] = "/tmp/rl-envoycfg-XXXXXX";
    char path[512], err[512];
    struct rl_envoy_config *c = NULL;
    struct rl_envoy_opts merge = {.merge_domains = true};
    FILE *f;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    static const char *const files[][2] = {
        {"a.yaml", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n"
                   "    rate_limit: {unit: minute, requests_per_unit: 10}\n"},
        {"b.yaml", "domain: test-domain\ndescriptors:\n  - key: key2\n    value: value2\n"
                   "    rate_limit: {unit: minute, requests_per_unit: 20}\n"},
        {"c.yaml", "domain: other\ndescriptors:\n  - key: k\n"
                   "    rate_limit: {unit: week, requests_per_unit: 3}\n"},
        {"notes.txt", "not yaml: ["},
        {".hidden.yaml", "not yaml: ["},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i][0]);
        ck_assert_ptr_nonnull(f = fopen(path, "w"));
        fputs(files[i][1], f);
        fclose(f);
    }
    /* upstream's default: a domain in two files is an error at the second */
    ck_assert_int_eq(rl_envoy_load(dir, NULL, &c, err, sizeof(err)), -1);
    snprintf(path, sizeof(path),
             "%s/b.yaml:1: duplicate domain 'test-domain' in config file "
             "(first in %s/a.yaml:1)",
             dir, dir);
    ck_assert_str_eq(err, path);
    /* MERGE_DOMAIN_CONFIG */
    ck_assert_int_eq(rl_envoy_load(dir, &merge, &c, err, sizeof(err)), 0);
    ck_assert_uint_eq(c->ndomains, 2);
    ck_assert_int_eq(rpu(match(c, "test-domain", "key1", "value1")), 10);
    ck_assert_int_eq(rpu(match(c, "test-domain", "key2", "value2")), 20);
    ck_assert_int_eq(match(c, "other", "k", "x")->limits[0].unit, RL_ENVOY_UNIT_WEEK);
    ck_assert_str_eq(match(c, "other", "k", "x")->file + strlen(dir), "/c.yaml");
    rl_envoy_config_free(c);
    /* a duplicate descriptor across merged files is still one, named at the later file */
    snprintf(path, sizeof(path), "%s/d.yaml", dir);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fputs("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n", f);
    fclose(f);
    ck_assert_int_eq(rl_envoy_load(dir, &merge, &c, err, sizeof(err)), -1);
    snprintf(path, sizeof(path),
             "%s/d.yaml:3: duplicate descriptor composite key "
             "'test-domain.key1_value1'",
             dir);
    ck_assert_str_eq(err, path);
    /* a single file */
    snprintf(path, sizeof(path), "%s/c.yaml", dir);
    ck_assert_int_eq(rl_envoy_load(path, NULL, &c, err, sizeof(err)), 0);
    ck_assert_uint_eq(c->ndomains, 1);
    rl_envoy_config_free(c);
    snprintf(path, sizeof(path), "%s/missing.yaml", dir);
    ck_assert_int_eq(rl_envoy_load(path, NULL, &c, err, sizeof(err)), -1);
    ck_assert(strstr(err, "missing.yaml: No such file or directory") != NULL);

    const char *rm[] = {"a.yaml", "b.yaml", "c.yaml", "d.yaml", "notes.txt", ".hidden.yaml"};
    for (size_t i = 0; i < sizeof(rm) / sizeof(rm[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, rm[i]);
        unlink(path);
    }
    rmdir(dir);
}
END_TEST

/* A directory without a YAML file (an operator's first step, or every file moved away): read
 * as no file, loaded as no domain, and its stamp taken, each more than once (a reload's
 * check), without undefined behaviour (the sanitizer build aborts on any). */
START_TEST(test_empty_directory)
{
    char dir[] = "/tmp/rl-envoycfg-XXXXXX";
    char err[512] = "";
    struct rl_envoy_files fs = {0};
    struct rl_envoy_config *c = NULL;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    for (int round = 0; round < 2; round++) {
        ck_assert_int_eq(rl_envoy_read(dir, &fs, err, sizeof(err)), 0);
        ck_assert_uint_eq(fs.n, 0);
        rl_envoy_files_free(&fs);
        (void)rl_envoy_stamp(dir);
        if (rl_envoy_load(dir, NULL, &c, err, sizeof(err)) == 0) {
            ck_assert_uint_eq(c->ndomains, 0);
            rl_envoy_config_free(c);
            c = NULL;
        } else {
            ck_assert_msg(err[0] != '\0', "a refusal says why");
        }
    }
    rmdir(dir);
}
END_TEST

/* The files of a directory carried in one bundle (the envoy znode): read, bundled, read back
 * and loaded give the same configuration and name the same FILE:LINE; a broken bundle is
 * refused; the stamp moves when a file does. */
START_TEST(test_bundle_and_stamp)
{
    char dir[] = "/tmp/rl-envoycfg-XXXXXX";
    char path[512], want[600], err[512];
    struct rl_envoy_files fs = {0}, back = {0};
    struct rl_envoy_config *c = NULL;
    char *b = NULL;
    size_t blen = 0;
    uint64_t s0, s1, s2;
    FILE *f;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    static const char *const files[][2] = {
        {"a.yaml", "domain: d1\ndescriptors:\n  - key: k\n"
                   "    rate_limit: {unit: minute, requests_per_unit: 10}\n"},
        {"b.yaml", "domain: d2\ndescriptors:\n  - key: k\n    value: \"v w\"\n"
                   "    rate_limit: {unit: year, requests_per_unit: 2}\n"},
    };
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i][0]);
        ck_assert_ptr_nonnull(f = fopen(path, "w"));
        fputs(files[i][1], f);
        fclose(f);
    }
    s0 = rl_envoy_stamp(dir);
    ck_assert_uint_ne(s0, 0);
    ck_assert_uint_eq(rl_envoy_stamp(dir), s0);
    ck_assert_int_eq(rl_envoy_read(dir, &fs, err, sizeof(err)), 0);
    ck_assert_uint_eq(fs.n, 2);
    ck_assert_int_eq(rl_envoy_bundle(&fs, &b, &blen), 0);
    ck_assert_uint_eq(strlen(b), blen);
    ck_assert(strncmp(b, RL_ENVOY_BUNDLE_MAGIC "\nfile ", strlen(RL_ENVOY_BUNDLE_MAGIC) + 6) == 0);
    ck_assert_int_eq(rl_envoy_unbundle("znode", b, blen, &back, err, sizeof(err)), 0);
    ck_assert_uint_eq(back.n, 2);
    for (size_t i = 0; i < 2; i++) {
        ck_assert_str_eq(back.f[i].name, fs.f[i].name);
        ck_assert_uint_eq(back.f[i].len, fs.f[i].len);
        ck_assert(memcmp(back.f[i].text, fs.f[i].text, fs.f[i].len) == 0);
    }
    ck_assert_int_eq(rl_envoy_parse_files(&back, NULL, &c, err, sizeof(err)), 0);
    ck_assert_uint_eq(c->ndomains, 2);
    ck_assert_int_eq(rpu(match(c, "d1", "k", "x")), 10);
    ck_assert_int_eq(match(c, "d2", "k", "v w")->limits[0].unit, RL_ENVOY_UNIT_YEAR);
    rl_envoy_config_free(c);
    rl_envoy_files_free(&back);
    /* errors name the file as it was read, line included */
    free(fs.f[1].text);
    fs.f[1].text = strdup("domain: d2\ndescriptors:\n  - key: k\n    rate_limit: {unit: eon}\n");
    fs.f[1].len = strlen(fs.f[1].text);
    free(b);
    ck_assert_int_eq(rl_envoy_bundle(&fs, &b, &blen), 0);
    ck_assert_int_eq(rl_envoy_unbundle("znode", b, blen, &back, err, sizeof(err)), 0);
    ck_assert_int_eq(rl_envoy_parse_files(&back, NULL, &c, err, sizeof(err)), -1);
    snprintf(want, sizeof(want), "%s/b.yaml:4: ", dir);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
    rl_envoy_files_free(&back);
    /* broken bundles: every cut of a valid one short of whole, a bad magic, a bad count */
    for (size_t cut = 0; cut < blen; cut++) {
        int rc = rl_envoy_unbundle("znode", b, cut, &back, err, sizeof(err));
        /* a cut right after a whole file is a shorter valid bundle; anything else is not */
        if (rc == 0) {
            ck_assert(cut == strlen(RL_ENVOY_BUNDLE_MAGIC) + 1 || b[cut - 1] == '\n');
            rl_envoy_files_free(&back);
        } else {
            ck_assert_ptr_null(back.f);
            ck_assert(strncmp(err, "znode: ", 7) == 0);
        }
    }
    /* a bundle of no files is an empty configuration: every domain unknown */
    ck_assert_int_eq(rl_envoy_unbundle("znode", b, strlen(RL_ENVOY_BUNDLE_MAGIC) + 1, &back, err,
                                       sizeof(err)),
                     0);
    ck_assert_uint_eq(back.n, 0);
    ck_assert_int_eq(rl_envoy_parse_files(&back, NULL, &c, err, sizeof(err)), 0);
    ck_assert_uint_eq(c->ndomains, 0);
    ck_assert_ptr_null(rl_envoy_domain(c, "d1", 2));
    ck_assert_ptr_null(match(c, "d1", "k", "x"));
    rl_envoy_config_free(c);
    ck_assert_int_eq(rl_envoy_unbundle("znode", "domain: x\n", 10, &back, err, sizeof(err)), -1);
    ck_assert(strstr(err, "not an envoy config bundle") != NULL);
    {
        char big[200];
        int n = snprintf(big, sizeof(big), "%s\nfile 99999999999999999999 x\n",
                         RL_ENVOY_BUNDLE_MAGIC);
        ck_assert_int_eq(rl_envoy_unbundle("znode", big, (size_t)n, &back, err, sizeof(err)), -1);
        n = snprintf(big, sizeof(big), "%s\nfile 2 \nab\n", RL_ENVOY_BUNDLE_MAGIC);
        ck_assert_int_eq(rl_envoy_unbundle("znode", big, (size_t)n, &back, err, sizeof(err)), -1);
        /* a name that is not printable UTF-8 (a NUL, a control character) */
        n = snprintf(big, sizeof(big), "%s\nfile 2 u_a\nab\n", RL_ENVOY_BUNDLE_MAGIC);
        big[strlen(RL_ENVOY_BUNDLE_MAGIC) + 9] = '\0';
        ck_assert_int_eq(rl_envoy_unbundle("znode", big, (size_t)n, &back, err, sizeof(err)), -1);
        n = snprintf(big, sizeof(big), "%s\nfile 2 u\ta\nab\n", RL_ENVOY_BUNDLE_MAGIC);
        ck_assert_int_eq(rl_envoy_unbundle("znode", big, (size_t)n, &back, err, sizeof(err)), -1);
        n = snprintf(big, sizeof(big), "%s\nfile 2 ok\nab\n", RL_ENVOY_BUNDLE_MAGIC);
        ck_assert_int_eq(rl_envoy_unbundle("znode", big, (size_t)n, &back, err, sizeof(err)), 0);
        ck_assert_str_eq(back.f[0].name, "ok");
        ck_assert_str_eq(back.f[0].text, "ab");
        rl_envoy_files_free(&back);
    }
    free(b);
    rl_envoy_files_free(&fs);
    /* the stamp: a rewritten file (other size) and a new file both move it */
    snprintf(path, sizeof(path), "%s/a.yaml", dir);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fputs("domain: d1\ndescriptors: []\n", f);
    fclose(f);
    s1 = rl_envoy_stamp(dir);
    ck_assert_uint_ne(s1, s0);
    snprintf(path, sizeof(path), "%s/c.yaml", dir);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fclose(f);
    s2 = rl_envoy_stamp(dir);
    ck_assert_uint_ne(s2, s1);
    ck_assert_uint_eq(rl_envoy_stamp(path), rl_envoy_stamp(path));
    unlink(path);
    ck_assert_uint_ne(rl_envoy_stamp(path), rl_envoy_stamp(dir));
    ck_assert_uint_eq(rl_envoy_stamp(path), 0);
    const char *rm[] = {"a.yaml", "b.yaml"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, rm[i]);
        unlink(path);
    }
    rmdir(dir);
}
END_TEST

START_TEST(test_extensions)
{
    struct rl_envoy_config *c =
        load("domain: api\n"
             "descriptors:\n"
             "  - key: user\n"
             "    rate_limit:\n"
             "      - unit: second\n"
             "        requests_per_unit: 10\n"
             "        algorithm: token_bucket\n"
             "        burst: 20\n"
             "        name: per-second\n"
             "      - unit: hour\n"
             "        requests_per_unit: 1000\n"
             "        algorithm: sliding_window_counter\n"
             "        replaces: [{name: old}]\n"
             "  - key: ip\n"
             "    rate_limit: {unit: Minute, requests_per_unit: 60, algorithm: gcra}\n"
             "  - key: y\n"
             "    rate_limit: {unit: YEAR, requests_per_unit: 1}\n");
    const struct rl_envoy_desc *d = match(c, "api", "user", "alice");

    ck_assert_uint_eq(d->nlimits, 2);
    ck_assert_int_eq(d->limits[0].algo, RL_ALGO_TOKEN_BUCKET);
    ck_assert(d->limits[0].algo_set);
    ck_assert_uint_eq(d->limits[0].burst, 20);
    ck_assert_str_eq(d->limits[0].name, "per-second");
    ck_assert_int_eq(d->limits[1].algo, RL_ALGO_SLIDING_WINDOW_COUNTER);
    ck_assert_int_eq(d->limits[1].unit, RL_ENVOY_UNIT_HOUR);
    ck_assert_uint_eq(d->limits[1].nreplaces, 1);
    ck_assert_str_eq(d->limits[1].replaces[0], "old");
    ck_assert_int_eq(d->limits[1].line, 10);
    d = match(c, "api", "ip", "1.2.3.4");
    ck_assert_int_eq(d->limits[0].algo, RL_ALGO_GCRA);
    ck_assert_uint_eq(d->limits[0].burst, 60); /* burst defaults to requests_per_unit */
    ck_assert_int_eq(d->limits[0].unit, RL_ENVOY_UNIT_MINUTE);
    ck_assert_int_eq(match(c, "api", "y", "")->limits[0].unit, RL_ENVOY_UNIT_YEAR);
    ck_assert_uint_eq(rl_envoy_unit_seconds(RL_ENVOY_UNIT_YEAR), 31536000);
    ck_assert_uint_eq(rl_envoy_unit_seconds(RL_ENVOY_UNIT_MONTH), 2592000);
    rl_envoy_config_free(c);

    expect_err("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n"
               "      algorithm: bogus\n",
               "t.yaml:6: unknown algorithm 'bogus' (fixed_window, sliding_window_log, "
               "sliding_window_counter, token_bucket, gcra, leaky_bucket)");
    /* concurrency needs RELEASE, which the gRPC front never sends: not an Envoy algorithm */
    expect_err("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n"
               "      algorithm: concurrency\n",
               "t.yaml:6: unknown algorithm 'concurrency' (fixed_window, sliding_window_log, "
               "sliding_window_counter, token_bucket, gcra, leaky_bucket)");
    expect_err("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n"
               "      burst: 5\n",
               "t.yaml:6: burst needs algorithm token_bucket, gcra or leaky_bucket");
    expect_err("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: year\n"
               "      algorithm: gcra\n",
               "t.yaml:6: unit year is longer than the 49.7 days gcra allows (use fixed_window "
               "or sliding_window_counter)");
    expect_err("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: year\n"
               "      algorithm: sliding_window_log\n",
               "t.yaml:6: unit year is longer than the 49.7 days sliding_window_log allows (use "
               "fixed_window or sliding_window_counter)");
    /* a year counts with the two window algorithms (366 days at most, docs/PROTOCOL.md) */
    c = load("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: year\n"
             "      requests_per_unit: 3\n      algorithm: sliding_window_counter\n");
    ck_assert_int_eq(match(c, "d", "k", "v")->limits[0].algo, RL_ALGO_SLIDING_WINDOW_COUNTER);
    ck_assert_uint_eq(rl_envoy_unit_seconds(RL_ENVOY_UNIT_YEAR) * 1000,
                      365ull * 86400 * 1000);
    ck_assert_uint_le(rl_envoy_unit_seconds(RL_ENVOY_UNIT_YEAR) * 1000,
                      rl_algo_window_max(RL_ALGO_FIXED_WINDOW));
    rl_envoy_config_free(c);
    expect_err("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      - unlimited: true\n"
               "      - unit: second\n",
               "t.yaml:5: an unlimited rate_limit must be the descriptor's only one");
    expect_err("domain: d\ndescriptors:\n  - key: k\n    rate_limit: []\n",
               "t.yaml:4: a list of rate_limit has 1..16 items");
}
END_TEST

START_TEST(test_checks_and_bounds)
{
    char *big;
    size_t n;

    expect_err("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n",
               "t.yaml:4: shadow_mode must be true or false");
    expect_err("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
               "requests_per_unit: -1}\n",
               "t.yaml:4: requests_per_unit must be an integer 0..4294967295");
    expect_err("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
               "requests_per_unit: 4294967296}\n",
               "t.yaml:4: requests_per_unit must be an integer 0..4294967295");
    expect_err("domain: d\ndescriptors:\n  - key: k\n    key: j\n",
               "t.yaml:4: key 'key' appears twice (line 3)");
    expect_err("domain: d\ndescriptors:\n  - key: k\n    unit: second\n",
               "t.yaml:4: config error, unknown key 'unit' in a descriptor");
    expect_err("domain: \"a\\x01b\"\n",
               "t.yaml:1: domain 'a\\x01b' has a control character (byte 1)");
    expect_err("domain: d\ndescriptors:\n  - key: \"\\x85\"\n",
               "t.yaml:3: key '\\xc2\\x85' has a control character (byte 0)");
    expect_err("domain: d\ndescriptors:\n  - &a {key: k}\n  - *a\n",
               "t.yaml:4: YAML aliases are not supported");
    /* deep YAML is refused before libyaml builds it (its cost grows with depth x size) */
    big = malloc(RL_ENVOY_FILE_MAX);
    n = (size_t)sprintf(big, "domain: d\nmetadata: ");
    memset(big + n, '[', RL_ENVOY_FILE_MAX - 1 - n);
    big[RL_ENVOY_FILE_MAX - 1] = '\0';
    expect_err(big, "t.yaml:2: YAML nests deeper than 64 levels");
    free(big);
    /* metadata is free-form, but not deeper than 64 levels either */
    struct rl_envoy_config *c0 = load("domain: d\ndescriptors:\n  - key: k\n    metadata: "
                                      "{a: [1, {b: [[[[[[[c]]]]]]]}], d: e}\n");
    rl_envoy_config_free(c0);
    expect_err("domain: d\ndescriptors: {key: k}\n",
               "t.yaml:2: descriptors must be a list of maps");
    expect_err("- domain: d\n", "t.yaml:1: the file must be a map of domain and descriptors");
    expect_err("domain: [d]\n", "t.yaml:1: domain must be a string");

    /* depth: 16 levels load, 17 do not */
    for (int depth = 16; depth <= 17; depth++) {
        big = malloc(65536);
        n = (size_t)sprintf(big, "domain: d\n");
        for (int i = 0; i < depth; i++) {
            n += (size_t)sprintf(big + n, "%*sdescriptors:\n%*s- key: k%d\n", 2 * i, "", 2 * i, "",
                                 i);
        }
        struct rl_envoy_config *c = NULL;
        char err[512];
        int rc = rl_envoy_parse("t.yaml", big, n, NULL, &c, err, sizeof(err));
        if (depth == 16) {
            ck_assert_msg(rc == 0, "%s", err);
            rl_envoy_config_free(c);
        } else {
            ck_assert_int_eq(rc, -1);
            ck_assert_str_eq(err, "t.yaml:35: descriptors nest deeper than 16 levels");
        }
        free(big);
    }
    /* string bounds */
    big = malloc(4096);
    memset(big, 'v', 4096);
    n = (size_t)sprintf(big, "domain: d\ndescriptors:\n  - key: k\n    value: ");
    big[n] = 'v'; /* over sprintf's NUL */
    big[n + RL_ENVOY_VALUE_MAX] = '\n';
    big[n + RL_ENVOY_VALUE_MAX + 1] = '\0';
    struct rl_envoy_config *c = load(big); /* exactly the bound */
    ck_assert_uint_eq(strlen(c->domains[0].root.children[0]->value), RL_ENVOY_VALUE_MAX);
    rl_envoy_config_free(c);
    big[n + RL_ENVOY_VALUE_MAX] = 'v';
    big[n + RL_ENVOY_VALUE_MAX + 1] = '\n';
    big[n + RL_ENVOY_VALUE_MAX + 2] = '\0';
    expect_err(big, "t.yaml:4: value is longer than 1024 bytes");
    free(big);
    /* file size */
    big = malloc(RL_ENVOY_FILE_MAX + 2);
    memset(big, '#', RL_ENVOY_FILE_MAX + 1);
    big[RL_ENVOY_FILE_MAX + 1] = '\0';
    expect_err(big, "t.yaml: file is larger than 1048576 bytes");
    free(big);
    /* a request longer than RL_ENVOY_ENTRIES_MAX matches nothing and reads nothing past it */
    c = load("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n");
    struct rl_envoy_entry many[RL_ENVOY_ENTRIES_MAX + 1];
    for (size_t i = 0; i <= RL_ENVOY_ENTRIES_MAX; i++) {
        many[i] = (struct rl_envoy_entry){"k", 1, "v", 1};
    }
    ck_assert_ptr_nonnull(rl_envoy_match(c, "d", 1, many, 1, NULL));
    ck_assert_uint_eq(c->domains[0].root.children[0]->limits[0].requests_per_unit, 0);
    ck_assert_ptr_null(rl_envoy_match(c, "d", 1, many, RL_ENVOY_ENTRIES_MAX + 1, NULL));
    /* request strings are bytes: a NUL inside one does not end it */
    struct rl_envoy_entry nul = {"k\0x", 3, "v", 1};
    ck_assert_ptr_null(rl_envoy_match(c, "d", 1, &nul, 1, NULL));
    rl_envoy_config_free(c);
}
END_TEST

START_TEST(test_counter_key)
{
    struct rl_envoy_entry e[2] = {{"key1", 4, "value1", 6}, {"subkey1", 7, "", 0}};
    char key[64];
    size_t n;

    n = rl_envoy_counter_key(key, sizeof(key), "test-domain", 11, e, 2, NULL);
    ck_assert_str_eq(key, "test-domain_key1_value1_subkey1__");
    ck_assert_uint_eq(n, strlen(key));
    n = rl_envoy_counter_key(key, 8, "test-domain", 11, e, 2, NULL);
    ck_assert_uint_eq(n, 33);
    ck_assert_str_eq(key, "test-do");
    ck_assert_uint_eq(rl_envoy_counter_key(NULL, 0, "d", 1, e, 0, NULL), 2);
}
END_TEST

static Suite *
envoycfg_suite(void)
{
    Suite *s = suite_create("envoycfg");
    TCase *tc = tcase_create("envoycfg");

    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_upstream_basic);
    tcase_add_test(tc, test_upstream_examples);
    tcase_add_test(tc, test_upstream_shadow_mode);
    tcase_add_test(tc, test_upstream_wildcard);
    tcase_add_test(tc, test_upstream_share_threshold);
    tcase_add_test(tc, test_upstream_errors);
    tcase_add_test(tc, test_domains_and_merge);
    tcase_add_test(tc, test_bundle_and_stamp);
    tcase_add_test(tc, test_empty_directory);
    tcase_add_test(tc, test_extensions);
    tcase_add_test(tc, test_checks_and_bounds);
    tcase_add_test(tc, test_counter_key);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(envoycfg_suite)
