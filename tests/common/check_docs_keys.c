/*
 * check_docs_keys: the cluster.conf keys the docs name are the loader's, both ways, as
 * test_docs_ops keeps docs/PROTOCOL.md's op list and the op table the same rows:
 *   - every key docs/ENVOY.md, CONFIG.md, RESP.md, OPERATIONS.md and REGIONS.md name in a
 *     code span, `[SECTION] key` or `[SECTION] key = value`, is a key of that section in
 *     the loader's table (common/conf_keys.c); a bare `key = value` is a key of some
 *     section; in a code block, the `key = value` lines under a `[SECTION]` line are keys
 *     of that section;
 *   - every key of the loader's table has its row in docs/CONFIG.md (| `key` | ...) under
 *     its section's heading (## [SECTION] ...), and every such row is a key of the section.
 * Not for what the keys do (check_conf) nor for the command lines the docs show.
 */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf_int.h"
#include "rltest.h"

static const char *const docs[] = {"ENVOY", "CONFIG", "RESP", "OPERATIONS", "REGIONS"};

/* Code spans of the form `word = value` that are not cluster.conf keys: C fields and
 * formulas. A new one fails the test until it is a key or listed here. */
static const char *const not_keys[] = {"sink", "shard", "slice_r"};

static char *
doc_read(const char *name)
{
    char path[512];
    char *doc = malloc(1 << 21);
    FILE *fp;
    size_t n;

    ck_assert_ptr_nonnull(doc);
    snprintf(path, sizeof(path), "%s/docs/%s.md", RL_SOURCE_DIR, name);
    fp = fopen(path, "r");
    ck_assert_msg(fp != NULL, "cannot open %s", path);
    n = fread(doc, 1, (1 << 21) - 1, fp);
    ck_assert_msg(feof(fp), "%s is larger than the test reads", path);
    doc[n] = '\0';
    fclose(fp);
    return doc;
}

static bool
is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

/* The section kind called name (len bytes), or -1. */
static int
kind_of(const char *name, size_t len)
{
    for (int k = CONF_CLUSTER; k <= CONF_CLIENT; k++) {
        if (strlen(conf_kinds[k].name) == len && memcmp(conf_kinds[k].name, name, len) == 0) {
            return k;
        }
    }
    return -1;
}

/* Whether key (len bytes) is a key of section kind (-1: of any section). */
static bool
is_key(int kind, const char *key, size_t len)
{
    for (size_t i = 0; i < conf_nkeys; i++) {
        if ((kind < 0 || conf_keys[i].kind == (enum conf_kind)kind) &&
            strlen(conf_keys[i].name) == len && memcmp(conf_keys[i].name, key, len) == 0) {
            return true;
        }
    }
    return false;
}

/* A section line "[kind ARGS]" at s (up to end): its kind, or -1 (not a conf section). *rest
 * is what follows the ']'. */
static int
section_at(const char *s, const char *end, const char **rest)
{
    const char *p = s + 1, *close;
    int kind;

    if (s >= end || *s != '[') {
        return -1;
    }
    while (p < end && *p >= 'a' && *p <= 'z') {
        p++;
    }
    close = memchr(s, ']', (size_t)(end - s));
    if (close == NULL || (*p != ']' && *p != ' ')) {
        return -1;
    }
    kind = kind_of(s + 1, (size_t)(p - s - 1));
    *rest = close + 1;
    return kind;
}

/* One code span (s..end, without the backticks) of doc name, line lineno. */
static void
check_span(const char *name, int lineno, const char *s, const char *end)
{
    const char *rest = NULL, *key;
    int kind = section_at(s, end, &rest);
    size_t len = 0;

    if (kind >= 0) {
        /* `[SECTION] key` or `[SECTION] key = value` */
        if (rest >= end || *rest != ' ') {
            return;
        }
        key = rest + 1;
        while (key + len < end && is_word(key[len])) {
            len++;
        }
        if (len == 0 || !(key + len == end || strncmp(key + len, " = ", 3) == 0)) {
            return; /* `[cluster] tls_*`, or prose */
        }
        ck_assert_msg(is_key(kind, key, len), "docs/%s.md:%d: `%.*s`: no key %.*s in [%s]", name,
                      lineno, (int)(end - s), s, (int)len, key, conf_kinds[kind].name);
        return;
    }
    /* `key = value` */
    while (s + len < end && is_word(s[len])) {
        len++;
    }
    if (len == 0 || s + len + 3 > end || strncmp(s + len, " = ", 3) != 0) {
        return;
    }
    for (size_t i = 0; i < sizeof(not_keys) / sizeof(not_keys[0]); i++) {
        if (strlen(not_keys[i]) == len && memcmp(not_keys[i], s, len) == 0) {
            return;
        }
    }
    ck_assert_msg(is_key(-1, s, len), "docs/%s.md:%d: `%.*s`: no key %.*s in any section",
                  name, lineno, (int)(end - s), s, (int)len, s);
}

/* A line of a code block: a section line sets *kind (-1: not a conf section), a
 * `key = value` line under a conf section must be one of its keys. */
static void
check_block_line(const char *name, int lineno, const char *s, const char *end, int *kind)
{
    const char *rest;
    size_t len = 0;

    if (*s == '[') {
        *kind = section_at(s, end, &rest);
        return;
    }
    if (*kind < 0) {
        return;
    }
    while (s + len < end && is_word(s[len])) {
        len++;
    }
    if (len == 0) {
        return;
    }
    rest = s + len;
    while (rest < end && *rest == ' ') {
        rest++;
    }
    if (rest < end && *rest == '=') {
        ck_assert_msg(is_key(*kind, s, len), "docs/%s.md:%d: %.*s: no key %.*s in [%s]", name,
                      lineno, (int)(end - s), s, (int)len, s, conf_kinds[*kind].name);
    }
}

START_TEST(test_docs_name_real_keys)
{
    for (size_t d = 0; d < sizeof(docs) / sizeof(docs[0]); d++) {
        char *doc = doc_read(docs[d]);
        bool fenced = false;
        int lineno = 0, kind = -1;

        for (const char *line = doc; *line != '\0';) {
            const char *end = strchr(line, '\n');

            if (end == NULL) {
                end = line + strlen(line);
            }
            lineno++;
            if (strncmp(line, "```", 3) == 0) {
                fenced = !fenced;
                kind = -1;
            } else if (fenced) {
                check_block_line(docs[d], lineno, line, end, &kind);
            } else {
                for (const char *p = memchr(line, '`', (size_t)(end - line)); p != NULL;) {
                    const char *q = memchr(p + 1, '`', (size_t)(end - p - 1));

                    if (q == NULL) {
                        break;
                    }
                    check_span(docs[d], lineno, p + 1, q);
                    p = q + 1 < end ? memchr(q + 1, '`', (size_t)(end - q - 1)) : NULL;
                }
            }
            line = *end == '\n' ? end + 1 : end;
        }
        free(doc);
    }
}
END_TEST

/* Whether a "## " heading (up to its line's end) is kind's section: names "[kind]" or
 * "[kind ". */
static bool
heading_is(const char *h, int kind)
{
    const char *end = strchr(h, '\n');
    char a[32], b[32];

    snprintf(a, sizeof(a), "[%s]", conf_kinds[kind].name);
    snprintf(b, sizeof(b), "[%s ", conf_kinds[kind].name);
    for (const char *p = h; p < end; p++) {
        if (strncmp(p, a, strlen(a)) == 0 || strncmp(p, b, strlen(b)) == 0) {
            return true;
        }
    }
    return false;
}

START_TEST(test_config_md_rows_are_the_keys)
{
    char *doc = doc_read("CONFIG");
    bool documented[CONF_KEYS_MAX] = {false};
    const char *heading = NULL;

    for (const char *line = doc; *line != '\0';) {
        const char *end = strchr(line, '\n');

        if (end == NULL) {
            end = line + strlen(line);
        }
        if (strncmp(line, "## ", 3) == 0) {
            heading = line;
        } else if (strncmp(line, "| `", 3) == 0 && heading != NULL) {
            const char *key = line + 3, *tick = memchr(key, '`', (size_t)(end - key));

            ck_assert_ptr_nonnull(tick);
            for (int k = CONF_CLUSTER; k <= CONF_CLIENT; k++) {
                if (!heading_is(heading, k)) {
                    continue;
                }
                ck_assert_msg(is_key(k, key, (size_t)(tick - key)),
                              "docs/CONFIG.md documents `%.*s` under \"%.*s\": no such key",
                              (int)(tick - key), key, (int)(strchr(heading, '\n') - heading),
                              heading);
                for (size_t i = 0; i < conf_nkeys; i++) {
                    documented[i] |= conf_keys[i].kind == (enum conf_kind)k &&
                                     strlen(conf_keys[i].name) == (size_t)(tick - key) &&
                                     memcmp(conf_keys[i].name, key, (size_t)(tick - key)) == 0;
                }
            }
        }
        line = *end == '\n' ? end + 1 : end;
    }
    for (size_t i = 0; i < conf_nkeys; i++) {
        ck_assert_msg(documented[i],
                      "[%s] %s has no row (| `%s` | ...) under its heading in docs/CONFIG.md",
                      conf_kinds[conf_keys[i].kind].name, conf_keys[i].name, conf_keys[i].name);
    }
    free(doc);
}
END_TEST

static Suite *
docs_keys_suite(void)
{
    Suite *s = suite_create("docs_keys");
    TCase *tc = tcase_create("docs_keys");

    tcase_add_test(tc, test_docs_name_real_keys);
    tcase_add_test(tc, test_config_md_rows_are_the_keys);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(docs_keys_suite)
