/*
 * envoycfg_match: the matcher of envoycfg (envoycfg.h): a request descriptor's
 * configuration descriptor as upstream's GetLimit finds it (exact "key_value", then the
 * wildcards in file order, then "key" alone; the last entry's descriptor wins, so the most
 * specific path that the configuration has), and upstream's counter key. Reads a loaded
 * configuration only: no allocation, safe from several threads. Not for reading YAML
 * (envoycfg.c) nor for the files and bundles a configuration comes from (envoycfg_src.c).
 */
#include "envoycfg.h"

#include <stdbool.h>
#include <string.h>

#include "envoycfg_int.h"

const struct rl_envoy_domain *
rl_envoy_domain(const struct rl_envoy_config *c, const char *name, size_t len)
{
    size_t lo = 0, hi = c->ndomains;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *d = c->domains[mid].name;
        size_t dl = strlen(d);
        int cmp = memcmp(d, name, dl < len ? dl : len);
        if (cmp == 0) {
            cmp = dl < len ? -1 : dl > len;
        }
        if (cmp == 0) {
            return &c->domains[mid];
        }
        if (cmp < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return NULL;
}

int
envoy_cmp_cat(const char *s, const char *a, size_t an, const char *b, size_t bn, const char *c,
              size_t cn)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = an + bn + cn;

    for (size_t i = 0; i < n; i++, p++) {
        if (*p == '\0') {
            return -1; /* s is a proper prefix */
        }
        unsigned char x = (unsigned char)(i < an ? a[i] : i < an + bn ? b[i - an] : c[i - an - bn]);
        if (*p != x) {
            return *p < x ? -1 : 1; /* the terminating NUL sorts first */
        }
    }
    return *p != '\0';
}

/* The child whose composite is exactly "key_value" (with_value) or "key". */
static const struct rl_envoy_desc *
find_child(const struct rl_envoy_desc *d, const struct rl_envoy_entry *e, bool with_value)
{
    size_t lo = 0, hi = d->nchildren;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *s = d->children[d->index[mid]]->composite;
        int cmp = with_value ? envoy_cmp_cat(s, e->key, e->key_len, "_", 1, e->value, e->value_len)
                             : envoy_cmp_cat(s, e->key, e->key_len, NULL, 0, NULL, 0);
        if (cmp == 0) {
            return d->children[d->index[mid]];
        }
        if (cmp < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return NULL;
}

/* Bytes compared by wild_match on this thread since it started (rl_envoy_match_steps). */
static _Thread_local uint64_t match_steps;

uint64_t
rl_envoy_match_steps(void)
{
    return match_steps;
}

/* upstream's wildcardMatch of pattern (split on '*') against key "_" value. */
static bool
wild_match(const char *pat, const struct rl_envoy_entry *e)
{
    size_t n = e->key_len + 1 + e->value_len;
    size_t pos = 0; /* next unread position of the subject */
    const char *seg = pat;
    bool first = true;

#define SUBJ(i)                                                                                    \
    ((i) < e->key_len ? e->key[(i)] : (i) == e->key_len ? '_' : e->value[(i)-e->key_len - 1])
    for (;;) {
        const char *star = strchr(seg, '*');
        size_t sl = star ? (size_t)(star - seg) : strlen(seg);
        match_steps += sl + 1;
        if (first && star == NULL) { /* no '*': exact */
            if (sl != n) {
                return false;
            }
            for (size_t i = 0; i < n; i++) {
                if (SUBJ(i) != seg[i]) {
                    return false;
                }
            }
            return true;
        }
        if (first) { /* prefix */
            if (sl > n) {
                return false;
            }
            for (size_t i = 0; i < sl; i++) {
                if (SUBJ(i) != seg[i]) {
                    return false;
                }
            }
            pos = sl;
        } else if (star == NULL) { /* suffix, after what the earlier segments took */
            if (sl > n - pos) {
                return false;
            }
            for (size_t i = 0; i < sl; i++) {
                if (SUBJ(n - sl + i) != seg[i]) {
                    return false;
                }
            }
            return true;
        } else { /* middle: leftmost occurrence, leaving room for nothing yet */
            bool found = false;
            for (size_t at = pos; !found && at + sl <= n; at++) {
                size_t i = 0;
                while (i < sl && SUBJ(at + i) == seg[i]) {
                    i++;
                }
                match_steps += i + 1;
                if (i == sl) {
                    found = true;
                    pos = at + sl;
                }
            }
            if (!found) {
                return false;
            }
        }
        first = false;
        seg = star + 1;
    }
#undef SUBJ
}

const struct rl_envoy_desc *
rl_envoy_match(const struct rl_envoy_config *c, const char *domain, size_t dlen,
               const struct rl_envoy_entry *e, size_t n, const char **share)
{
    const struct rl_envoy_domain *dom = rl_envoy_domain(c, domain, dlen);
    const struct rl_envoy_desc *cur, *found = NULL;

    if (share != NULL) {
        for (size_t i = 0; i < n; i++) {
            share[i] = NULL;
        }
    }
    if (dom == NULL || n == 0 || n > RL_ENVOY_ENTRIES_MAX) {
        return NULL;
    }
    cur = &dom->root;
    for (size_t i = 0; i < n; i++) {
        const struct rl_envoy_desc *next = find_child(cur, &e[i], true);
        if (next == NULL) {
            for (size_t w = 0; w < cur->nwildcards && next == NULL; w++) {
                if (wild_match(cur->wildcards[w]->composite, &e[i])) {
                    next = cur->wildcards[w];
                    if (next->share_threshold && share != NULL) {
                        /* upstream trims "key_" off the pattern; the key is bytes (a NUL may
                         * be one of them), the pattern a C string: compared within both */
                        const char *p = next->composite;
                        if (strnlen(p, e[i].key_len + 1) > e[i].key_len &&
                            memcmp(p, e[i].key, e[i].key_len) == 0 && p[e[i].key_len] == '_') {
                            p += e[i].key_len + 1;
                        }
                        share[i] = p;
                    }
                }
            }
        }
        if (next == NULL) {
            next = find_child(cur, &e[i], false);
        }
        if (next == NULL) {
            return NULL;
        }
        if (i == n - 1 && next->nlimits > 0) {
            found = next;
        }
        if (next->nchildren == 0) {
            return found;
        }
        cur = next;
    }
    return found;
}

size_t
rl_envoy_counter_key(char *dst, size_t cap, const char *domain, size_t dlen,
                     const struct rl_envoy_entry *e, size_t n, const char **share)
{
    size_t len = 0;

#define PUT(s, l)                                                                                  \
    do {                                                                                           \
        for (size_t k_ = 0; k_ < (l); k_++, len++) {                                               \
            if (len + 1 < cap) {                                                                   \
                dst[len] = (s)[k_];                                                                \
            }                                                                                      \
        }                                                                                          \
    } while (0)
    PUT(domain, dlen);
    PUT("_", 1);
    for (size_t i = 0; i < n; i++) {
        PUT(e[i].key, e[i].key_len);
        PUT("_", 1);
        if (share != NULL && share[i] != NULL) {
            PUT(share[i], strlen(share[i]));
        } else {
            PUT(e[i].value, e[i].value_len);
        }
        PUT("_", 1);
    }
#undef PUT
    if (cap > 0) {
        dst[len < cap ? len : cap - 1] = '\0';
    }
    return len;
}
