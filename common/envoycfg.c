/*
 * envoycfg: the YAML reader of the envoycfg module (envoycfg.h): envoyproxy/ratelimit's
 * configuration turned into a struct rl_envoy_config with libyaml's document API and checked
 * as upstream's config_impl.go checks it (same messages where upstream has one), plus the
 * bounds and the two extensions of docs/ENVOY.md; every rejection is "FILE:LINE: message".
 * Not for matching a request (envoycfg_match.c), reading files, directories or bundles
 * (envoycfg_src.c), nor the service.
 */
#include "envoycfg.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "envoycfg_int.h"
#include "utf8.h"

static const struct {
    const char *name;
    enum rl_envoy_unit unit;
    uint64_t seconds;
} units[] = {
    {"second", RL_ENVOY_UNIT_SECOND, 1},    {"minute", RL_ENVOY_UNIT_MINUTE, 60},
    {"hour", RL_ENVOY_UNIT_HOUR, 3600},     {"day", RL_ENVOY_UNIT_DAY, 86400},
    {"week", RL_ENVOY_UNIT_WEEK, 604800},   {"month", RL_ENVOY_UNIT_MONTH, 2592000},
    {"year", RL_ENVOY_UNIT_YEAR, 31536000},
};

const char *
rl_envoy_unit_name(enum rl_envoy_unit u)
{
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (units[i].unit == u) {
            return units[i].name;
        }
    }
    return "unknown";
}

uint64_t
rl_envoy_unit_seconds(enum rl_envoy_unit u)
{
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (units[i].unit == u) {
            return units[i].seconds;
        }
    }
    return 0;
}

/* ---- loading ---------------------------------------------------------------------------- */

struct ld {
    struct rl_envoy_config *c;
    const struct rl_envoy_opts *opts;
    const char *file; /* c->files[...] */
    yaml_document_t *doc;
    unsigned char *seen; /* per node: visited (an alias would visit a node twice) */
    size_t nnodes;
    char *err;
    size_t errlen;
};

static int
fail(struct ld *l, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (line > 0) {
        snprintf(l->err, l->errlen, "%s:%d: %s", l->file, line, msg);
    } else {
        snprintf(l->err, l->errlen, "%s: %s", l->file, msg);
    }
    return -1;
}

/* Text of a scalar as printable UTF-8 for a message (cut at 80 bytes). */
static const char *
shown(const char *s, size_t n, char *buf, size_t cap)
{
    rl_utf8_escape(buf, cap, s, n > 80 ? 80 : n, 0);
    return buf;
}

static int
line_of(const yaml_node_t *n)
{
    return (int)n->start_mark.line + 1;
}

/* The node at index id, marked seen; NULL (after fail) when it was seen already: an alias. */
static yaml_node_t *
node_at(struct ld *l, int id, int line)
{
    yaml_node_t *n = yaml_document_get_node(l->doc, id);

    if (n == NULL) {
        fail(l, line, "broken YAML document");
        return NULL;
    }
    size_t i = (size_t)(id - 1);
    if (i < l->nnodes) {
        if (l->seen[i]) {
            fail(l, line_of(n), "YAML aliases are not supported");
            return NULL;
        }
        l->seen[i] = 1;
    }
    return n;
}

static bool
is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
        return false;
    }
    const char *v = (const char *)n->data.scalar.value;
    return n->data.scalar.length == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
           strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

/* A string field: a scalar (null -> ""), printable UTF-8, at most max bytes. */
static int
get_str(struct ld *l, const yaml_node_t *n, const char *what, size_t max, char **out)
{
    char b[400];

    if (n->type != YAML_SCALAR_NODE) {
        return fail(l, line_of(n), "%s must be a string", what);
    }
    const char *s = (const char *)n->data.scalar.value;
    size_t len = is_null(n) ? 0 : n->data.scalar.length;
    if (len > max) {
        return fail(l, line_of(n), "%s is longer than %zu bytes", what, max);
    }
    size_t at;
    const char *bad = rl_utf8_check(s, len, &at);
    if (bad != NULL) {
        return fail(l, line_of(n), "%s '%s' %s (byte %zu)", what, shown(s, len, b, sizeof(b)), bad,
                    at);
    }
    *out = strndup(s, len);
    if (*out == NULL) {
        return fail(l, line_of(n), "out of memory");
    }
    return 0;
}

static int
get_bool(struct ld *l, const yaml_node_t *n, const char *what, bool *out)
{
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES",
                                      "on",   "On",   "ON",   "y",   "Y"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No", "NO",
                                     "off",   "Off",   "OFF",   "n",  "N"};

    if (n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        const char *v = (const char *)n->data.scalar.value;
        if (is_null(n)) {
            *out = false;
            return 0;
        }
        for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
            if (strcmp(v, yes[i]) == 0) {
                *out = true;
                return 0;
            }
            if (strcmp(v, no[i]) == 0) {
                *out = false;
                return 0;
            }
        }
    }
    return fail(l, line_of(n), "%s must be true or false", what);
}

static int
get_u32(struct ld *l, const yaml_node_t *n, const char *what, uint32_t *out)
{
    if (n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        const char *v = (const char *)n->data.scalar.value;
        size_t len = n->data.scalar.length;
        if (is_null(n)) {
            *out = 0;
            return 0;
        }
        if (*v == '+') {
            v++;
            len--;
        }
        uint64_t x = 0;
        size_t i = 0;
        for (; i < len && v[i] >= '0' && v[i] <= '9' && x <= UINT32_MAX; i++) {
            x = x * 10 + (uint64_t)(v[i] - '0');
        }
        if (len > 0 && i == len && x <= UINT32_MAX) {
            *out = (uint32_t)x;
            return 0;
        }
    }
    return fail(l, line_of(n), "%s must be an integer 0..4294967295", what);
}

/* The keys a mapping may have: checked once, before any value is read. */
static int
check_keys(struct ld *l, const yaml_node_t *map, const char *where, const char *const *keys)
{
    char b[400];

    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *k = yaml_document_get_node(l->doc, p->key);
        if (k == NULL || k->type != YAML_SCALAR_NODE) {
            return fail(l, k ? line_of(k) : line_of(map), "config error, key is not a string");
        }
        const char *ks = (const char *)k->data.scalar.value;
        bool ok = false;
        for (size_t i = 0; keys[i] != NULL && !ok; i++) {
            ok = strlen(keys[i]) == k->data.scalar.length && strcmp(keys[i], ks) == 0;
        }
        if (!ok) {
            return fail(l, line_of(k), "config error, unknown key '%s'%s%s",
                        shown(ks, k->data.scalar.length, b, sizeof(b)), where[0] ? " in " : "",
                        where);
        }
        for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
            const yaml_node_t *k2 = yaml_document_get_node(l->doc, q->key);
            if (k2->data.scalar.length == k->data.scalar.length &&
                memcmp(k2->data.scalar.value, ks, k->data.scalar.length) == 0) {
                return fail(l, line_of(k), "key '%s' appears twice (line %d)", ks, line_of(k2));
            }
        }
    }
    return 0;
}

static bool
key_is(struct ld *l, const yaml_node_pair_t *p, const char *name)
{
    const yaml_node_t *k = yaml_document_get_node(l->doc, p->key);
    return strcmp((const char *)k->data.scalar.value, name) == 0;
}

static void
desc_free(struct rl_envoy_desc *d)
{
    for (size_t i = 0; i < d->nlimits; i++) {
        free(d->limits[i].name);
        for (size_t j = 0; j < d->limits[i].nreplaces; j++) {
            free(d->limits[i].replaces[j]);
        }
        free(d->limits[i].replaces);
    }
    free(d->limits);
    for (size_t i = 0; i < d->nchildren; i++) {
        desc_free(d->children[i]);
        free(d->children[i]);
    }
    free(d->children);
    free(d->index);
    free(d->wildcards);
    free(d->key);
    free(d->value);
    free(d->composite);
    free(d->full_key);
}

static int
parse_replaces(struct ld *l, const yaml_node_t *seq, struct rl_envoy_limit *lim)
{
    static const char *const keys[] = {"name", NULL};

    if (is_null(seq)) {
        return 0;
    }
    if (seq->type != YAML_SEQUENCE_NODE) {
        return fail(l, line_of(seq), "replaces must be a list of maps with a name");
    }
    size_t n = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (n > RL_ENVOY_REPLACES_MAX) {
        return fail(l, line_of(seq), "more than %u replaces entries", RL_ENVOY_REPLACES_MAX);
    }
    lim->replaces = calloc(n ? n : 1, sizeof(char *));
    if (lim->replaces == NULL) {
        return fail(l, line_of(seq), "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *m = node_at(l, seq->data.sequence.items.start[i], line_of(seq));
        if (m == NULL) {
            return -1;
        }
        if (m->type != YAML_MAPPING_NODE) {
            return fail(l, line_of(m), "config error, replaces must be a list of maps");
        }
        if (check_keys(l, m, "replaces", keys) != 0) {
            return -1;
        }
        char *name = NULL;
        for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top;
             p++) {
            const yaml_node_t *v = node_at(l, p->value, line_of(m));
            free(name);
            name = NULL;
            if (v == NULL || get_str(l, v, "replaces name", RL_ENVOY_NAME_MAX, &name) != 0) {
                return -1;
            }
        }
        lim->replaces[lim->nreplaces++] = name;
        if (name == NULL || name[0] == '\0') {
            return fail(l, line_of(m), "should not have an empty replaces entry");
        }
        if (strcmp(name, lim->name) == 0) {
            return fail(l, line_of(m), "replaces should not contain name of same descriptor");
        }
    }
    return 0;
}

static int
parse_limit(struct ld *l, const yaml_node_t *m, struct rl_envoy_limit *lim)
{
    static const char *const keys[] = {"unit",     "requests_per_unit", "unlimited", "name",
                                       "replaces", "algorithm",         "burst",     NULL};
    const yaml_node_t *unit = NULL, *algo = NULL, *burst = NULL, *repl = NULL;
    char b[400];

    lim->line = line_of(m);
    lim->algo = RL_ALGO_FIXED_WINDOW;
    if (m->type != YAML_MAPPING_NODE) {
        return fail(l, line_of(m), "rate_limit must be a map (or a list of maps)");
    }
    if (check_keys(l, m, "rate_limit", keys) != 0) {
        return -1;
    }
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        const yaml_node_t *v = node_at(l, p->value, line_of(m));
        int rc = 0;
        if (v == NULL) {
            return -1;
        }
        if (key_is(l, p, "unit")) {
            unit = v;
        } else if (key_is(l, p, "requests_per_unit")) {
            rc = get_u32(l, v, "requests_per_unit", &lim->requests_per_unit);
        } else if (key_is(l, p, "unlimited")) {
            rc = get_bool(l, v, "unlimited", &lim->unlimited);
        } else if (key_is(l, p, "name")) {
            free(lim->name);
            lim->name = NULL;
            rc = get_str(l, v, "name", RL_ENVOY_NAME_MAX, &lim->name);
        } else if (key_is(l, p, "replaces")) {
            repl = v;
        } else if (key_is(l, p, "algorithm")) {
            algo = v;
        } else {
            burst = v;
        }
        if (rc != 0) {
            return -1;
        }
    }
    if (lim->name == NULL && (lim->name = strdup("")) == NULL) {
        return fail(l, lim->line, "out of memory");
    }
    bool valid_unit = false;
    if (unit != NULL) {
        char *u = NULL;
        if (get_str(l, unit, "unit", RL_ENVOY_NAME_MAX, &u) != 0) {
            return -1;
        }
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]) && !valid_unit; i++) {
            if (strcasecmp(u, units[i].name) == 0) {
                valid_unit = true;
                lim->unit = units[i].unit;
            }
        }
        if (lim->unlimited && valid_unit) {
            free(u);
            return fail(l, line_of(unit), "should not specify rate limit unit when unlimited");
        }
        if (!lim->unlimited && !valid_unit) {
            fail(l, line_of(unit), "invalid rate limit unit '%s'",
                 shown(u, strlen(u), b, sizeof(b)));
            free(u);
            return -1;
        }
        free(u);
        lim->unit = lim->unlimited ? RL_ENVOY_UNIT_UNKNOWN : lim->unit;
    } else if (!lim->unlimited) {
        return fail(l, lim->line, "invalid rate limit unit ''");
    }
    if (repl != NULL && parse_replaces(l, repl, lim) != 0) {
        return -1;
    }
    if (algo != NULL) {
        char *a = NULL;
        if (get_str(l, algo, "algorithm", RL_ENVOY_NAME_MAX, &a) != 0) {
            return -1;
        }
        int rc = rl_algo_parse(a, &lim->algo);
        if (rc == 0 && lim->algo == RL_ALGO_CONCURRENCY) {
            rc = -1; /* a slot needs a RELEASE, which the gRPC front never sends */
        }
        if (rc != 0) {
            fail(l, line_of(algo),
                 "unknown algorithm '%s' (fixed_window, sliding_window_log, "
                 "sliding_window_counter, token_bucket, gcra, leaky_bucket)",
                 shown(a, strlen(a), b, sizeof(b)));
            free(a);
            return -1;
        }
        free(a);
        lim->algo_set = true;
        if (lim->unlimited) {
            return fail(l, line_of(algo), "an unlimited rate_limit takes no algorithm");
        }
        if (rl_envoy_unit_seconds(lim->unit) * 1000 > rl_algo_window_max(lim->algo)) {
            return fail(l, line_of(algo),
                        "unit %s is longer than the 49.7 days %s allows (use fixed_window or "
                        "sliding_window_counter)",
                        rl_envoy_unit_name(lim->unit), rl_algo_name(lim->algo));
        }
    }
    lim->burst = lim->requests_per_unit;
    if (burst != NULL) {
        if (!rl_algo_has_burst(lim->algo)) {
            return fail(l, line_of(burst),
                        "burst needs algorithm token_bucket, gcra or leaky_bucket");
        }
        if (get_u32(l, burst, "burst", &lim->burst) != 0) {
            return -1;
        }
        if (lim->burst == 0) {
            return fail(l, line_of(burst), "burst must be 1..4294967295");
        }
    }
    return 0;
}

static int
parse_limits(struct ld *l, const yaml_node_t *v, struct rl_envoy_desc *d)
{
    const yaml_node_t *one[1] = {v};
    size_t n = 1;

    if (is_null(v)) {
        return 0;
    }
    if (v->type == YAML_SEQUENCE_NODE) {
        n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
        if (n == 0 || n > RL_ENVOY_LIMITS_MAX) {
            return fail(l, line_of(v), "a list of rate_limit has 1..%u items", RL_ENVOY_LIMITS_MAX);
        }
    }
    d->limits = calloc(n, sizeof(*d->limits));
    if (d->limits == NULL) {
        return fail(l, line_of(v), "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *m = one[0];
        if (v->type == YAML_SEQUENCE_NODE &&
            (m = node_at(l, v->data.sequence.items.start[i], line_of(v))) == NULL) {
            return -1;
        }
        d->nlimits++;
        if (parse_limit(l, m, &d->limits[i]) != 0) {
            return -1;
        }
        if (d->limits[i].unlimited && n > 1) {
            return fail(l, line_of(m), "an unlimited rate_limit must be the descriptor's only one");
        }
    }
    return 0;
}

static int
cmp_children(const struct rl_envoy_desc *d, uint32_t a, uint32_t b)
{
    const char *sb = d->children[b]->composite;
    int c = envoy_cmp_cat(d->children[a]->composite, sb, strlen(sb), NULL, 0, NULL, 0);
    return c != 0 ? c : (a < b ? -1 : a > b);
}

/* Builds d->index (a heap sort: no recursion, O(n log n)) and d->wildcards from
 * d->children; a duplicate composite is an error at the later of the two. */
static int
finish_children(struct ld *l, struct rl_envoy_desc *d)
{
    size_t n = d->nchildren;
    uint32_t *ix = realloc(d->index, (n ? n : 1) * sizeof(uint32_t));
    struct rl_envoy_desc **w = realloc(d->wildcards, (n ? n : 1) * sizeof(*w));

    if (ix != NULL) {
        d->index = ix;
    }
    if (w != NULL) {
        d->wildcards = w;
    }
    if (ix == NULL || w == NULL) {
        return fail(l, d->line, "out of memory");
    }
    d->nwildcards = 0;
    for (size_t i = 0; i < n; i++) {
        ix[i] = (uint32_t)i;
        if (d->children[i]->wildcard) {
            w[d->nwildcards++] = d->children[i];
        }
    }
    /* heap sort of ix by (composite, position) */
    for (size_t start = n / 2; start-- > 0;) {
        for (size_t root = start;;) {
            size_t c = 2 * root + 1;
            if (c >= n) {
                break;
            }
            if (c + 1 < n && cmp_children(d, ix[c], ix[c + 1]) < 0) {
                c++;
            }
            if (cmp_children(d, ix[root], ix[c]) >= 0) {
                break;
            }
            uint32_t t = ix[root];
            ix[root] = ix[c];
            ix[c] = t;
            root = c;
        }
    }
    for (size_t end = n; end-- > 1;) {
        uint32_t t = ix[0];
        ix[0] = ix[end];
        ix[end] = t;
        for (size_t root = 0;;) {
            size_t c = 2 * root + 1;
            if (c >= end) {
                break;
            }
            if (c + 1 < end && cmp_children(d, ix[c], ix[c + 1]) < 0) {
                c++;
            }
            if (cmp_children(d, ix[root], ix[c]) >= 0) {
                break;
            }
            t = ix[root];
            ix[root] = ix[c];
            ix[c] = t;
            root = c;
        }
    }
    /* the first duplicate in file order: the smallest later position of an equal pair */
    const struct rl_envoy_desc *dup = NULL;
    uint32_t dup_at = UINT32_MAX;
    for (size_t i = 1; i < n; i++) {
        if (strcmp(d->children[ix[i - 1]]->composite, d->children[ix[i]]->composite) == 0 &&
            ix[i] < dup_at) {
            dup_at = ix[i];
            dup = d->children[ix[i]];
        }
    }
    if (dup != NULL) {
        char b[400];
        const char *saved = l->file;
        l->file = dup->file;
        fail(l, dup->line, "duplicate descriptor composite key '%s'",
             shown(dup->full_key, strlen(dup->full_key), b, sizeof(b)));
        l->file = saved;
        return -1;
    }
    return 0;
}

static int parse_descriptors(struct ld *l, const yaml_node_t *seq, struct rl_envoy_desc *parent,
                             unsigned depth);

static int
parse_desc(struct ld *l, const yaml_node_t *m, struct rl_envoy_desc *parent, unsigned depth,
           struct rl_envoy_desc *d)
{
    static const char *const keys[] = {
        "key",        "value",           "rate_limit",      "descriptors",     "shadow_mode",
        "quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "metadata",
        NULL};
    const yaml_node_t *limits = NULL, *children = NULL;
    char b[400];

    d->file = l->file;
    d->line = line_of(m);
    if (m->type != YAML_MAPPING_NODE) {
        return fail(l, line_of(m),
                    "config error, yaml file contains list of type other than map: %s",
                    m->type == YAML_SCALAR_NODE ? shown((const char *)m->data.scalar.value,
                                                        m->data.scalar.length, b, sizeof(b))
                                                : "a list");
    }
    if (check_keys(l, m, "a descriptor", keys) != 0) {
        return -1;
    }
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        const yaml_node_t *v;
        int rc = 0;
        if (key_is(l, p, "metadata")) {
            /* upstream passes it on as response metadata; not kept here (docs/ENVOY.md),
             * nor walked: its nodes are free-form */
            continue;
        }
        if ((v = node_at(l, p->value, line_of(m))) == NULL) {
            return -1;
        }
        if (key_is(l, p, "key")) {
            rc = get_str(l, v, "key", RL_ENVOY_NAME_MAX, &d->key);
        } else if (key_is(l, p, "value")) {
            rc = get_str(l, v, "value", RL_ENVOY_VALUE_MAX, &d->value);
        } else if (key_is(l, p, "rate_limit")) {
            limits = v;
        } else if (key_is(l, p, "descriptors")) {
            children = v;
        } else if (key_is(l, p, "shadow_mode")) {
            rc = get_bool(l, v, "shadow_mode", &d->shadow_mode);
        } else if (key_is(l, p, "quota_mode")) {
            rc = get_bool(l, v, "quota_mode", &d->quota_mode);
        } else if (key_is(l, p, "detailed_metric")) {
            rc = get_bool(l, v, "detailed_metric", &d->detailed_metric);
        } else if (key_is(l, p, "value_to_metric")) {
            rc = get_bool(l, v, "value_to_metric", &d->value_to_metric);
        } else {
            rc = get_bool(l, v, "share_threshold", &d->share_threshold);
        }
        if (rc != 0) {
            return -1;
        }
    }
    if (d->key == NULL || d->key[0] == '\0') {
        return fail(l, d->line, "descriptor has empty key");
    }
    if (d->value != NULL && d->value[0] == '\0') {
        free(d->value); /* upstream: an empty value is no value */
        d->value = NULL;
    }
    size_t kl = strlen(d->key), vl = d->value ? strlen(d->value) : 0;
    d->composite = malloc(kl + vl + 2);
    if (d->composite == NULL) {
        return fail(l, d->line, "out of memory");
    }
    memcpy(d->composite, d->key, kl + 1);
    if (d->value != NULL) {
        d->composite[kl] = '_';
        memcpy(d->composite + kl + 1, d->value, vl + 1);
    }
    d->wildcard = strchr(d->composite, '*') != NULL;
    size_t pl = strlen(parent->full_key);
    d->full_key = malloc(pl + kl + vl + 3);
    if (d->full_key == NULL) {
        return fail(l, d->line, "out of memory");
    }
    snprintf(d->full_key, pl + kl + vl + 3, "%s.%s", parent->full_key, d->composite);
    if (d->share_threshold && !d->wildcard) {
        return fail(l, d->line,
                    "share_threshold can only be used with wildcard values (containing '*'), "
                    "but found key '%s'",
                    shown(d->composite, strlen(d->composite), b, sizeof(b)));
    }
    if (limits != NULL && parse_limits(l, limits, d) != 0) {
        return -1;
    }
    if (children != NULL) {
        return parse_descriptors(l, children, d, depth + 1);
    }
    return finish_children(l, d);
}

/* Appends the descriptors of seq to parent's children (depth: parent's level + 1). */
static int
parse_descriptors(struct ld *l, const yaml_node_t *seq, struct rl_envoy_desc *parent,
                  unsigned depth)
{
    if (is_null(seq)) {
        return finish_children(l, parent);
    }
    if (seq->type != YAML_SEQUENCE_NODE) {
        return fail(l, line_of(seq), "descriptors must be a list of maps");
    }
    size_t n = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (n > 0 && depth > RL_ENVOY_DEPTH_MAX) {
        return fail(l, line_of(seq), "descriptors nest deeper than %u levels", RL_ENVOY_DEPTH_MAX);
    }
    if (n > RL_ENVOY_DESCRIPTORS_MAX - l->c->ndescriptors) {
        return fail(l, line_of(seq), "more than %u descriptors", RL_ENVOY_DESCRIPTORS_MAX);
    }
    struct rl_envoy_desc **ch =
        realloc(parent->children, (parent->nchildren + n + 1) * sizeof(*ch));
    if (ch == NULL) {
        return fail(l, line_of(seq), "out of memory");
    }
    parent->children = ch;
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *m = node_at(l, seq->data.sequence.items.start[i], line_of(seq));
        if (m == NULL) {
            return -1;
        }
        struct rl_envoy_desc *d = calloc(1, sizeof(*d));
        if (d == NULL) {
            return fail(l, line_of(m), "out of memory");
        }
        ch[parent->nchildren++] = d;
        l->c->ndescriptors++;
        if (parse_desc(l, m, parent, depth, d) != 0) {
            return -1;
        }
    }
    return finish_children(l, parent);
}

static int
cmp_domain(const void *a, const void *b)
{
    return strcmp(((const struct rl_envoy_domain *)a)->name,
                  ((const struct rl_envoy_domain *)b)->name);
}

static int
load_root(struct ld *l, const yaml_node_t *root)
{
    static const char *const keys[] = {"domain", "descriptors", NULL};
    const yaml_node_t *dom = NULL, *descs = NULL;
    char *name = NULL;
    char b[400];

    if (root != NULL && !is_null(root)) {
        if (root->type != YAML_MAPPING_NODE) {
            return fail(l, line_of(root), "the file must be a map of domain and descriptors");
        }
        if (check_keys(l, root, "", keys) != 0) {
            return -1;
        }
        for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
             p++) {
            const yaml_node_t *v = node_at(l, p->value, line_of(root));
            if (v == NULL) {
                return -1;
            }
            *(key_is(l, p, "domain") ? &dom : &descs) = v;
        }
    }
    if (dom != NULL && get_str(l, dom, "domain", RL_ENVOY_NAME_MAX, &name) != 0) {
        return -1;
    }
    if (name == NULL || name[0] == '\0') {
        free(name);
        return fail(l, dom ? line_of(dom) : 0, "config file cannot have empty domain");
    }
    struct rl_envoy_config *c = l->c;
    struct rl_envoy_domain *d = NULL;
    for (size_t i = 0; i < c->ndomains; i++) {
        if (strcmp(c->domains[i].name, name) == 0) {
            d = &c->domains[i];
        }
    }
    if (d != NULL && !(l->opts && l->opts->merge_domains)) {
        fail(l, line_of(dom), "duplicate domain '%s' in config file (first in %s:%d)",
             shown(name, strlen(name), b, sizeof(b)), d->root.file, d->root.line);
        free(name);
        return -1;
    }
    if (d == NULL) {
        struct rl_envoy_domain *nd = realloc(c->domains, (c->ndomains + 1) * sizeof(*nd));
        if (nd == NULL) {
            free(name);
            return fail(l, line_of(dom), "out of memory");
        }
        c->domains = nd;
        d = &c->domains[c->ndomains++];
        memset(d, 0, sizeof(*d));
        d->name = name;
        d->root.file = l->file;
        d->root.line = line_of(dom);
        if ((d->root.full_key = strdup(name)) == NULL) {
            return fail(l, line_of(dom), "out of memory");
        }
    } else {
        free(name);
    }
    if (descs == NULL) {
        return finish_children(l, &d->root);
    }
    return parse_descriptors(l, descs, &d->root, 1);
}

static int
yaml_fail(struct ld *l, const yaml_parser_t *parser)
{
    return fail(l, (int)(parser->problem_mark.line + 1), "error loading config file: %s%s%s",
                parser->problem ? parser->problem : "bad YAML", parser->context ? " " : "",
                parser->context ? parser->context : "");
}

/*
 * The first document's events, before libyaml builds it: refuses nesting deeper than
 * RL_ENVOY_YAML_DEPTH_MAX and aliases early, as the cost of libyaml's scanner grows with the
 * product of the nesting and the input (about a minute for 1 MiB of '[' unchecked).
 */
static int
precheck(struct ld *l, const char *text, size_t len)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    unsigned depth = 0;
    int rc = 0;

    if (!yaml_parser_initialize(&parser)) {
        return fail(l, 0, "out of memory");
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    for (bool done = false; !done && rc == 0;) {
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = yaml_fail(l, &parser);
            break;
        }
        switch (ev.type) {
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
            if (++depth > RL_ENVOY_YAML_DEPTH_MAX) {
                rc = fail(l, (int)ev.start_mark.line + 1, "YAML nests deeper than %u levels",
                          RL_ENVOY_YAML_DEPTH_MAX);
            }
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            depth--;
            break;
        case YAML_ALIAS_EVENT:
            rc = fail(l, (int)ev.start_mark.line + 1, "YAML aliases are not supported");
            break;
        case YAML_DOCUMENT_END_EVENT: /* only the first document counts, as upstream */
        case YAML_STREAM_END_EVENT:
            done = true;
            break;
        default:
            break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    return rc;
}

static int
parse_text(struct ld *l, const char *text, size_t len)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    int rc;

    if (len > RL_ENVOY_FILE_MAX) {
        return fail(l, 0, "file is larger than %u bytes", RL_ENVOY_FILE_MAX);
    }
    if (precheck(l, text, len) != 0) {
        return -1;
    }
    if (!yaml_parser_initialize(&parser)) {
        return fail(l, 0, "out of memory");
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        rc = yaml_fail(l, &parser);
        yaml_parser_delete(&parser);
        return rc;
    }
    l->doc = &doc;
    l->nnodes = (size_t)(doc.nodes.top - doc.nodes.start);
    l->seen = calloc(l->nnodes ? l->nnodes : 1, 1);
    if (l->seen == NULL) {
        rc = fail(l, 0, "out of memory");
    } else {
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (root != NULL) {
            l->seen[0] = 1;
        }
        rc = load_root(l, root);
    }
    free(l->seen);
    l->seen = NULL;
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

void
rl_envoy_config_hold(struct rl_envoy_config *c)
{
    __atomic_fetch_add(&c->refs, 1, __ATOMIC_RELAXED);
}

void
rl_envoy_config_free(struct rl_envoy_config *c)
{
    rl_envoy_config_drop(c);
}

/* Frees c (its last reference gone). */
static void
config_free(struct rl_envoy_config *c)
{
    for (size_t i = 0; i < c->ndomains; i++) {
        desc_free(&c->domains[i].root);
        free(c->domains[i].name);
    }
    free(c->domains);
    for (size_t i = 0; i < c->nfiles; i++) {
        free(c->files[i]);
    }
    free(c->files);
    free(c);
}

void
rl_envoy_config_drop(struct rl_envoy_config *c)
{
    if (c != NULL && __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        config_free(c);
    }
}

static int
add_file(struct ld *l, const char *name)
{
    char **f = realloc(l->c->files, (l->c->nfiles + 1) * sizeof(*f));

    if (f == NULL) {
        return -1;
    }
    l->c->files = f;
    if ((f[l->c->nfiles] = strdup(name)) == NULL) {
        return -1;
    }
    l->file = f[l->c->nfiles++];
    return 0;
}

static int
begin(struct ld *l, const struct rl_envoy_opts *opts, char *err, size_t errlen)
{
    memset(l, 0, sizeof(*l));
    l->opts = opts;
    l->err = err;
    l->errlen = errlen;
    l->file = "";
    l->c = calloc(1, sizeof(*l->c));
    if (l->c == NULL) {
        return -1;
    }
    l->c->refs = 1;
    return 0;
}

static int
end(struct ld *l, int rc, struct rl_envoy_config **out)
{
    if (rc != 0) {
        rl_envoy_config_free(l->c);
        *out = NULL;
        return -1;
    }
    if (l->c->ndomains > 1) { /* none at all: a bundle of no files */
        qsort(l->c->domains, l->c->ndomains, sizeof(*l->c->domains), cmp_domain);
    }
    *out = l->c;
    return 0;
}

int
rl_envoy_parse(const char *name, const char *text, size_t len, const struct rl_envoy_opts *opts,
               struct rl_envoy_config **out, char *err, size_t errlen)
{
    struct ld l;

    if (begin(&l, opts, err, errlen) != 0) {
        snprintf(err, errlen, "%s: out of memory", name);
        return -1;
    }
    if (add_file(&l, name) != 0) {
        snprintf(err, errlen, "%s: out of memory", name);
        return end(&l, -1, out);
    }
    return end(&l, parse_text(&l, text, len), out);
}

int
rl_envoy_parse_files(const struct rl_envoy_files *fs, const struct rl_envoy_opts *opts,
                     struct rl_envoy_config **out, char *err, size_t errlen)
{
    struct ld l;
    int rc = 0;

    if (begin(&l, opts, err, errlen) != 0) {
        snprintf(err, errlen, "envoy config: out of memory");
        return -1;
    }
    for (size_t i = 0; i < fs->n && rc == 0; i++) {
        if (add_file(&l, fs->f[i].name) != 0) {
            snprintf(err, errlen, "%s: out of memory", fs->f[i].name);
            rc = -1;
        } else {
            rc = parse_text(&l, fs->f[i].text, fs->f[i].len);
        }
    }
    return end(&l, rc, out);
}
