/*
 * fuzz_envoycfg: envoyproxy/ratelimit's YAML configuration (common/envoycfg.h) on any text.
 * Invariants: it either returns a config or one error line "fuzz.yaml..." (never both,
 * never neither); a config keeps the documented bounds (descriptors, depth, limits per
 * descriptor, string lengths), its domains are found by their names, every limit is either
 * unlimited with no unit or has one, and every descriptor reached by values without '*' is
 * what the matcher returns for that path when it has limits (NULL when it has none).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "envoycfg.h"
#include "fuzz.h"

static size_t seen;

static void
walk(const struct rl_envoy_config *c, const char *domain, const struct rl_envoy_desc *d,
     struct rl_envoy_entry *path, size_t depth, bool exact)
{
    seen++;
    MUST(d->nlimits <= RL_ENVOY_LIMITS_MAX);
    for (size_t i = 0; i < d->nlimits; i++) {
        const struct rl_envoy_limit *l = &d->limits[i];
        MUST(l->unlimited == (l->unit == RL_ENVOY_UNIT_UNKNOWN));
        MUST(!l->unlimited || d->nlimits == 1);
        MUST(l->name != NULL && strlen(l->name) <= RL_ENVOY_NAME_MAX);
        MUST(l->nreplaces <= RL_ENVOY_REPLACES_MAX);
        for (size_t j = 0; j < l->nreplaces; j++) {
            MUST(l->replaces[j][0] != '\0' && strcmp(l->replaces[j], l->name) != 0);
        }
        MUST(l->burst >= 1 || !rl_algo_has_burst(l->algo) || l->requests_per_unit == 0);
    }
    if (depth > 0) {
        MUST(depth <= RL_ENVOY_DEPTH_MAX);
        MUST(d->key != NULL && d->key[0] != '\0' && strlen(d->key) <= RL_ENVOY_NAME_MAX);
        MUST(d->value == NULL || (d->value[0] != '\0' && strlen(d->value) <= RL_ENVOY_VALUE_MAX));
        MUST(!d->share_threshold || d->wildcard);
        if (exact) {
            const struct rl_envoy_desc *m =
                rl_envoy_match(c, domain, strlen(domain), path, depth, NULL);
            MUST(m == (d->nlimits > 0 ? d : NULL));
        }
    }
    for (size_t i = 0; i < d->nchildren; i++) {
        const struct rl_envoy_desc *ch = d->children[i];
        path[depth] = (struct rl_envoy_entry){ch->key, strlen(ch->key), ch->value ? ch->value : "",
                                              ch->value ? strlen(ch->value) : 0};
        walk(c, domain, ch, path, depth + 1, exact && ch->value != NULL && !ch->wildcard);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rl_envoy_config *c = NULL;
    struct rl_envoy_opts opts = {.merge_domains = size > 0 && (data[0] & 1)};
    struct rl_envoy_entry path[RL_ENVOY_DEPTH_MAX + 1];
    char err[512];

    err[0] = '\0';
    /* An input that starts as a bundle (the envoy znode) is read as one: its files, then
     * their YAML. */
    const size_t mlen = strlen(RL_ENVOY_BUNDLE_MAGIC);
    int rc;
    if (size >= mlen && memcmp(data, RL_ENVOY_BUNDLE_MAGIC, mlen) == 0) {
        struct rl_envoy_files fs;
        rc = rl_envoy_unbundle("fuzz", (const char *)data, size, &fs, err, sizeof(err));
        if (rc != 0) {
            MUST(fs.f == NULL && fs.n == 0 && strncmp(err, "fuzz: ", 6) == 0);
            return 0;
        }
        for (size_t i = 0; i < fs.n; i++) {
            MUST(fs.f[i].len <= RL_ENVOY_FILE_MAX && fs.f[i].text[fs.f[i].len] == '\0');
        }
        rc = rl_envoy_parse_files(&fs, &opts, &c, err, sizeof(err));
        rl_envoy_files_free(&fs);
    } else {
        rc = rl_envoy_parse("fuzz.yaml", (const char *)data, size, &opts, &c, err, sizeof(err));
        MUST(rc == 0 || strncmp(err, "fuzz.yaml", 9) == 0);
    }
    if (rc != 0) {
        MUST(c == NULL);
        return 0;
    }
    MUST(c != NULL);
    MUST((c->ndomains >= 1 || size >= mlen) && c->ndescriptors <= RL_ENVOY_DESCRIPTORS_MAX);
    seen = 0;
    for (size_t i = 0; i < c->ndomains; i++) {
        const char *name = c->domains[i].name;
        MUST(name[0] != '\0' && strlen(name) <= RL_ENVOY_NAME_MAX);
        MUST(rl_envoy_domain(c, name, strlen(name)) == &c->domains[i]);
        walk(c, name, &c->domains[i].root, path, 0, true);
    }
    MUST(seen == c->ndescriptors + c->ndomains);
    rl_envoy_config_free(c);
    return 0;
}
