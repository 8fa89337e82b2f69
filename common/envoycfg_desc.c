/*
 * envoycfg_desc: the descriptors of an envoyproxy/ratelimit configuration (envoycfg.c reads
 * the file and its root): each descriptor and its rate_limit read from the YAML nodes under
 * a domain and checked as upstream's config_impl.go checks them (same messages where
 * upstream has one, plus docs/ENVOY.md's bounds and extensions), each descriptor's children
 * sorted into its index, a tree freed; the units of a limit (rl_envoy_unit_*); and the
 * helpers over YAML nodes both files read with (a field as a string, the keys of a map, an
 * alias refused, the "FILE:LINE: message" of a rejection). Not for the text, the document or
 * the config's life (envoycfg.c), nor for matching (envoycfg_match.c). Calls nothing of
 * envoycfg.c.
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

int
envoy_fail(struct ld *l, int line, const char *fmt, ...)
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
const char *
envoy_shown(const char *s, size_t n, char *buf, size_t cap)
{
    rl_utf8_escape(buf, cap, s, n > 80 ? 80 : n, 0);
    return buf;
}

int
envoy_line_of(const yaml_node_t *n)
{
    return (int)n->start_mark.line + 1;
}

/* The node at index id, marked seen; NULL (after envoy_fail) when it was seen already: an alias. */
yaml_node_t *
envoy_node_at(struct ld *l, int id, int line)
{
    yaml_node_t *n = yaml_document_get_node(l->doc, id);

    if (n == NULL) {
        envoy_fail(l, line, "broken YAML document");
        return NULL;
    }
    size_t i = (size_t)(id - 1);
    if (i < l->nnodes) {
        if (l->seen[i]) {
            envoy_fail(l, envoy_line_of(n), "YAML aliases are not supported");
            return NULL;
        }
        l->seen[i] = 1;
    }
    return n;
}

bool
envoy_is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
        return false;
    }
    const char *v = (const char *)n->data.scalar.value;
    return n->data.scalar.length == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
           strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

/* A string field: a scalar (null -> ""), printable UTF-8, at most max bytes. */
int
envoy_get_str(struct ld *l, const yaml_node_t *n, const char *what, size_t max, char **out)
{
    char b[400];

    if (n->type != YAML_SCALAR_NODE) {
        return envoy_fail(l, envoy_line_of(n), "%s must be a string", what);
    }
    const char *s = (const char *)n->data.scalar.value;
    size_t len = envoy_is_null(n) ? 0 : n->data.scalar.length;
    if (len > max) {
        return envoy_fail(l, envoy_line_of(n), "%s is longer than %zu bytes", what, max);
    }
    size_t at;
    const char *bad = rl_utf8_check(s, len, &at);
    if (bad != NULL) {
        return envoy_fail(l, envoy_line_of(n), "%s '%s' %s (byte %zu)", what, envoy_shown(s, len, b, sizeof(b)), bad,
                    at);
    }
    *out = strndup(s, len);
    if (*out == NULL) {
        return envoy_fail(l, envoy_line_of(n), "out of memory");
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
        if (envoy_is_null(n)) {
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
    return envoy_fail(l, envoy_line_of(n), "%s must be true or false", what);
}

static int
get_u32(struct ld *l, const yaml_node_t *n, const char *what, uint32_t *out)
{
    if (n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        const char *v = (const char *)n->data.scalar.value;
        size_t len = n->data.scalar.length;
        if (envoy_is_null(n)) {
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
    return envoy_fail(l, envoy_line_of(n), "%s must be an integer 0..4294967295", what);
}

/* The keys a mapping may have: checked once, before any value is read. */
int
envoy_check_keys(struct ld *l, const yaml_node_t *map, const char *where, const char *const *keys)
{
    char b[400];

    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *k = yaml_document_get_node(l->doc, p->key);
        if (k == NULL || k->type != YAML_SCALAR_NODE) {
            return envoy_fail(l, k ? envoy_line_of(k) : envoy_line_of(map), "config error, key is not a string");
        }
        const char *ks = (const char *)k->data.scalar.value;
        bool ok = false;
        for (size_t i = 0; keys[i] != NULL && !ok; i++) {
            ok = strlen(keys[i]) == k->data.scalar.length && strcmp(keys[i], ks) == 0;
        }
        if (!ok) {
            return envoy_fail(l, envoy_line_of(k), "config error, unknown key '%s'%s%s",
                        envoy_shown(ks, k->data.scalar.length, b, sizeof(b)), where[0] ? " in " : "",
                        where);
        }
        for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
            const yaml_node_t *k2 = yaml_document_get_node(l->doc, q->key);
            if (k2->data.scalar.length == k->data.scalar.length &&
                memcmp(k2->data.scalar.value, ks, k->data.scalar.length) == 0) {
                return envoy_fail(l, envoy_line_of(k), "key '%s' appears twice (line %d)", ks, envoy_line_of(k2));
            }
        }
    }
    return 0;
}

bool
envoy_key_is(struct ld *l, const yaml_node_pair_t *p, const char *name)
{
    const yaml_node_t *k = yaml_document_get_node(l->doc, p->key);
    return strcmp((const char *)k->data.scalar.value, name) == 0;
}

void
envoy_desc_free(struct rl_envoy_desc *d)
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
        envoy_desc_free(d->children[i]);
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

    if (envoy_is_null(seq)) {
        return 0;
    }
    if (seq->type != YAML_SEQUENCE_NODE) {
        return envoy_fail(l, envoy_line_of(seq), "replaces must be a list of maps with a name");
    }
    size_t n = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (n > RL_ENVOY_REPLACES_MAX) {
        return envoy_fail(l, envoy_line_of(seq), "more than %u replaces entries", RL_ENVOY_REPLACES_MAX);
    }
    lim->replaces = calloc(n ? n : 1, sizeof(char *));
    if (lim->replaces == NULL) {
        return envoy_fail(l, envoy_line_of(seq), "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *m = envoy_node_at(l, seq->data.sequence.items.start[i], envoy_line_of(seq));
        if (m == NULL) {
            return -1;
        }
        if (m->type != YAML_MAPPING_NODE) {
            return envoy_fail(l, envoy_line_of(m), "config error, replaces must be a list of maps");
        }
        if (envoy_check_keys(l, m, "replaces", keys) != 0) {
            return -1;
        }
        char *name = NULL;
        for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top;
             p++) {
            const yaml_node_t *v = envoy_node_at(l, p->value, envoy_line_of(m));
            free(name);
            name = NULL;
            if (v == NULL || envoy_get_str(l, v, "replaces name", RL_ENVOY_NAME_MAX, &name) != 0) {
                return -1;
            }
        }
        lim->replaces[lim->nreplaces++] = name;
        if (name == NULL || name[0] == '\0') {
            return envoy_fail(l, envoy_line_of(m), "should not have an empty replaces entry");
        }
        if (strcmp(name, lim->name) == 0) {
            return envoy_fail(l, envoy_line_of(m), "replaces should not contain name of same descriptor");
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

    lim->line = envoy_line_of(m);
    lim->algo = RL_ALGO_FIXED_WINDOW;
    if (m->type != YAML_MAPPING_NODE) {
        return envoy_fail(l, envoy_line_of(m), "rate_limit must be a map (or a list of maps)");
    }
    if (envoy_check_keys(l, m, "rate_limit", keys) != 0) {
        return -1;
    }
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        const yaml_node_t *v = envoy_node_at(l, p->value, envoy_line_of(m));
        int rc = 0;
        if (v == NULL) {
            return -1;
        }
        if (envoy_key_is(l, p, "unit")) {
            unit = v;
        } else if (envoy_key_is(l, p, "requests_per_unit")) {
            rc = get_u32(l, v, "requests_per_unit", &lim->requests_per_unit);
        } else if (envoy_key_is(l, p, "unlimited")) {
            rc = get_bool(l, v, "unlimited", &lim->unlimited);
        } else if (envoy_key_is(l, p, "name")) {
            free(lim->name);
            lim->name = NULL;
            rc = envoy_get_str(l, v, "name", RL_ENVOY_NAME_MAX, &lim->name);
        } else if (envoy_key_is(l, p, "replaces")) {
            repl = v;
        } else if (envoy_key_is(l, p, "algorithm")) {
            algo = v;
        } else {
            burst = v;
        }
        if (rc != 0) {
            return -1;
        }
    }
    if (lim->name == NULL && (lim->name = strdup("")) == NULL) {
        return envoy_fail(l, lim->line, "out of memory");
    }
    bool valid_unit = false;
    if (unit != NULL) {
        char *u = NULL;
        if (envoy_get_str(l, unit, "unit", RL_ENVOY_NAME_MAX, &u) != 0) {
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
            return envoy_fail(l, envoy_line_of(unit), "should not specify rate limit unit when unlimited");
        }
        if (!lim->unlimited && !valid_unit) {
            envoy_fail(l, envoy_line_of(unit), "invalid rate limit unit '%s'",
                 envoy_shown(u, strlen(u), b, sizeof(b)));
            free(u);
            return -1;
        }
        free(u);
        lim->unit = lim->unlimited ? RL_ENVOY_UNIT_UNKNOWN : lim->unit;
    } else if (!lim->unlimited) {
        return envoy_fail(l, lim->line, "invalid rate limit unit ''");
    }
    if (repl != NULL && parse_replaces(l, repl, lim) != 0) {
        return -1;
    }
    if (algo != NULL) {
        char *a = NULL;
        if (envoy_get_str(l, algo, "algorithm", RL_ENVOY_NAME_MAX, &a) != 0) {
            return -1;
        }
        int rc = rl_algo_parse(a, &lim->algo);
        if (rc == 0 && lim->algo == RL_ALGO_CONCURRENCY) {
            rc = -1; /* a slot needs a RELEASE, which the gRPC front never sends */
        }
        if (rc != 0) {
            envoy_fail(l, envoy_line_of(algo),
                 "unknown algorithm '%s' (fixed_window, sliding_window_log, "
                 "sliding_window_counter, token_bucket, gcra, leaky_bucket)",
                 envoy_shown(a, strlen(a), b, sizeof(b)));
            free(a);
            return -1;
        }
        free(a);
        lim->algo_set = true;
        if (lim->unlimited) {
            return envoy_fail(l, envoy_line_of(algo), "an unlimited rate_limit takes no algorithm");
        }
        if (rl_envoy_unit_seconds(lim->unit) * 1000 > rl_algo_window_max(lim->algo)) {
            return envoy_fail(l, envoy_line_of(algo),
                        "unit %s is longer than the 49.7 days %s allows (use fixed_window or "
                        "sliding_window_counter)",
                        rl_envoy_unit_name(lim->unit), rl_algo_name(lim->algo));
        }
    }
    lim->burst = lim->requests_per_unit;
    if (burst != NULL) {
        if (!rl_algo_has_burst(lim->algo)) {
            return envoy_fail(l, envoy_line_of(burst),
                        "burst needs algorithm token_bucket, gcra or leaky_bucket");
        }
        if (get_u32(l, burst, "burst", &lim->burst) != 0) {
            return -1;
        }
        if (lim->burst == 0) {
            return envoy_fail(l, envoy_line_of(burst), "burst must be 1..4294967295");
        }
    }
    return 0;
}

static int
parse_limits(struct ld *l, const yaml_node_t *v, struct rl_envoy_desc *d)
{
    const yaml_node_t *one[1] = {v};
    size_t n = 1;

    if (envoy_is_null(v)) {
        return 0;
    }
    if (v->type == YAML_SEQUENCE_NODE) {
        n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
        if (n == 0 || n > RL_ENVOY_LIMITS_MAX) {
            return envoy_fail(l, envoy_line_of(v), "a list of rate_limit has 1..%u items", RL_ENVOY_LIMITS_MAX);
        }
    }
    d->limits = calloc(n, sizeof(*d->limits));
    if (d->limits == NULL) {
        return envoy_fail(l, envoy_line_of(v), "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *m = one[0];
        if (v->type == YAML_SEQUENCE_NODE &&
            (m = envoy_node_at(l, v->data.sequence.items.start[i], envoy_line_of(v))) == NULL) {
            return -1;
        }
        d->nlimits++;
        if (parse_limit(l, m, &d->limits[i]) != 0) {
            return -1;
        }
        if (d->limits[i].unlimited && n > 1) {
            return envoy_fail(l, envoy_line_of(m), "an unlimited rate_limit must be the descriptor's only one");
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
int
envoy_finish_children(struct ld *l, struct rl_envoy_desc *d)
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
        return envoy_fail(l, d->line, "out of memory");
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
        envoy_fail(l, dup->line, "duplicate descriptor composite key '%s'",
             envoy_shown(dup->full_key, strlen(dup->full_key), b, sizeof(b)));
        l->file = saved;
        return -1;
    }
    return 0;
}

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
    d->line = envoy_line_of(m);
    if (m->type != YAML_MAPPING_NODE) {
        return envoy_fail(l, envoy_line_of(m),
                    "config error, yaml file contains list of type other than map: %s",
                    m->type == YAML_SCALAR_NODE ? envoy_shown((const char *)m->data.scalar.value,
                                                        m->data.scalar.length, b, sizeof(b))
                                                : "a list");
    }
    if (envoy_check_keys(l, m, "a descriptor", keys) != 0) {
        return -1;
    }
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        const yaml_node_t *v;
        int rc = 0;
        if (envoy_key_is(l, p, "metadata")) {
            /* upstream passes it on as response metadata; not kept here (docs/ENVOY.md),
             * nor walked: its nodes are free-form */
            continue;
        }
        if ((v = envoy_node_at(l, p->value, envoy_line_of(m))) == NULL) {
            return -1;
        }
        if (envoy_key_is(l, p, "key")) {
            rc = envoy_get_str(l, v, "key", RL_ENVOY_NAME_MAX, &d->key);
        } else if (envoy_key_is(l, p, "value")) {
            rc = envoy_get_str(l, v, "value", RL_ENVOY_VALUE_MAX, &d->value);
        } else if (envoy_key_is(l, p, "rate_limit")) {
            limits = v;
        } else if (envoy_key_is(l, p, "descriptors")) {
            children = v;
        } else if (envoy_key_is(l, p, "shadow_mode")) {
            rc = get_bool(l, v, "shadow_mode", &d->shadow_mode);
        } else if (envoy_key_is(l, p, "quota_mode")) {
            rc = get_bool(l, v, "quota_mode", &d->quota_mode);
        } else if (envoy_key_is(l, p, "detailed_metric")) {
            rc = get_bool(l, v, "detailed_metric", &d->detailed_metric);
        } else if (envoy_key_is(l, p, "value_to_metric")) {
            rc = get_bool(l, v, "value_to_metric", &d->value_to_metric);
        } else {
            rc = get_bool(l, v, "share_threshold", &d->share_threshold);
        }
        if (rc != 0) {
            return -1;
        }
    }
    if (d->key == NULL || d->key[0] == '\0') {
        return envoy_fail(l, d->line, "descriptor has empty key");
    }
    if (d->value != NULL && d->value[0] == '\0') {
        free(d->value); /* upstream: an empty value is no value */
        d->value = NULL;
    }
    size_t kl = strlen(d->key), vl = d->value ? strlen(d->value) : 0;
    d->composite = malloc(kl + vl + 2);
    if (d->composite == NULL) {
        return envoy_fail(l, d->line, "out of memory");
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
        return envoy_fail(l, d->line, "out of memory");
    }
    snprintf(d->full_key, pl + kl + vl + 3, "%s.%s", parent->full_key, d->composite);
    if (d->share_threshold && !d->wildcard) {
        return envoy_fail(l, d->line,
                    "share_threshold can only be used with wildcard values (containing '*'), "
                    "but found key '%s'",
                    envoy_shown(d->composite, strlen(d->composite), b, sizeof(b)));
    }
    if (limits != NULL && parse_limits(l, limits, d) != 0) {
        return -1;
    }
    if (children != NULL) {
        return envoy_parse_descriptors(l, children, d, depth + 1);
    }
    return envoy_finish_children(l, d);
}

/* Appends the descriptors of seq to parent's children (depth: parent's level + 1). */
int
envoy_parse_descriptors(struct ld *l, const yaml_node_t *seq, struct rl_envoy_desc *parent,
                  unsigned depth)
{
    if (envoy_is_null(seq)) {
        return envoy_finish_children(l, parent);
    }
    if (seq->type != YAML_SEQUENCE_NODE) {
        return envoy_fail(l, envoy_line_of(seq), "descriptors must be a list of maps");
    }
    size_t n = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (n > 0 && depth > RL_ENVOY_DEPTH_MAX) {
        return envoy_fail(l, envoy_line_of(seq), "descriptors nest deeper than %u levels", RL_ENVOY_DEPTH_MAX);
    }
    if (n > RL_ENVOY_DESCRIPTORS_MAX - l->c->ndescriptors) {
        return envoy_fail(l, envoy_line_of(seq), "more than %u descriptors", RL_ENVOY_DESCRIPTORS_MAX);
    }
    struct rl_envoy_desc **ch =
        realloc(parent->children, (parent->nchildren + n + 1) * sizeof(*ch));
    if (ch == NULL) {
        return envoy_fail(l, envoy_line_of(seq), "out of memory");
    }
    parent->children = ch;
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *m = envoy_node_at(l, seq->data.sequence.items.start[i], envoy_line_of(seq));
        if (m == NULL) {
            return -1;
        }
        struct rl_envoy_desc *d = calloc(1, sizeof(*d));
        if (d == NULL) {
            return envoy_fail(l, envoy_line_of(m), "out of memory");
        }
        ch[parent->nchildren++] = d;
        l->c->ndescriptors++;
        if (parse_desc(l, m, parent, depth, d) != 0) {
            return -1;
        }
    }
    return envoy_finish_children(l, parent);
}
