/*
 * limiter_rules: the rules as the limiter holds them (limiter_int.h): its tiers grouped by
 * service, the index of the services by name (whether a service has configured rules), a
 * copy of the tiers its keys follow, and rl_limiter_set_rules (limiter.h), a reload that
 * moves every key to its tier's new index (or drops it) and counts it again through
 * limiter_acct.c. Not for judging (limiter.c), nor for parsing the rules (ruleset.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "limiter_int.h"

static int
lim_names_init(struct lim_names *h, size_t n)
{
    size_t cap = 16;

    while (cap < 2 * n + 2) {
        cap *= 2;
    }
    h->slot = calloc(cap, sizeof(*h->slot));
    h->mask = cap - 1;
    return h->slot == NULL ? -ENOMEM : 0;
}

/* The index of name in v (n of them, all indexed in h), or UINT32_MAX with *at the free
 * slot where it goes. */
static uint32_t
lim_names_find(const struct lim_names *h, const struct lim_svc *v, const char *name, size_t *at)
{
    size_t i = (size_t)XXH3_64bits(name, strlen(name)) & h->mask;

    for (; h->slot[i] != 0; i = (i + 1) & h->mask) {
        if (strcmp(v[h->slot[i] - 1].name, name) == 0) {
            return h->slot[i] - 1;
        }
    }
    *at = i;
    return UINT32_MAX;
}

/* Groups the rules of c by service: *svcs (*nsvcs of them, in order of first appearance),
 * and each tier's service; *names indexes *svcs by name (free its slot array). */
static int
lim_group_ix(const struct rl_conf *c, struct lim_svc **svcs, uint32_t *nsvcs,
             uint32_t **svc_of_tier, struct lim_names *names)
{
    struct lim_svc *v = calloc(c->nrules + 1, sizeof(*v));
    uint32_t *of = calloc(c->ntiers + 1, sizeof(*of));
    uint32_t n = 0;

    if (v == NULL || of == NULL || lim_names_init(names, c->nrules) != 0) {
        free(v);
        free(of);
        return -ENOMEM;
    }
    for (size_t i = 0; i < c->nrules; i++) {
        const struct rl_rule *r = &c->rules[i];
        size_t at = 0;
        uint32_t k = lim_names_find(names, v, r->service, &at);

        if (k == UINT32_MAX) {
            k = n++;
            v[k].name = r->service;
            names->slot[at] = k + 1;
        }
        for (uint32_t t = 0; t < r->ntiers; t++) {
            of[r->first_tier + t] = k;
        }
    }
    *svcs = v;
    *nsvcs = n;
    *svc_of_tier = of;
    return 0;
}

int
lim_services(struct rl_limiter *l)
{
    struct lim_names *names = calloc(1, sizeof(*names));

    if (names == NULL) {
        return -ENOMEM;
    }
    if (lim_group_ix(l->conf, &l->svcs, &l->nsvcs, &l->svc_of_tier, names) != 0) {
        free(names);
        return -ENOMEM;
    }
    l->names = names;
    return 0;
}

/* Whether service (not NUL-terminated) has a [service S] or [service S E] section. */
bool
lim_configured(const struct rl_limiter *l, const char *service, size_t len)
{
    const struct lim_names *h = l->names;
    size_t i = (size_t)XXH3_64bits(service, len) & h->mask;

    for (; h->slot[i] != 0; i = (i + 1) & h->mask) {
        const char *name = l->svcs[h->slot[i] - 1].name;

        if (strncmp(name, service, len) == 0 && name[len] == '\0') {
            return true;
        }
    }
    return false;
}

uint32_t
lim_maxtiers(const struct rl_conf *c)
{
    uint32_t m = 1;

    for (size_t i = 0; i < c->nrules; i++) {
        if (c->rules[i].ntiers > m) {
            m = c->rules[i].ntiers;
        }
    }
    return m;
}

/* A copy of c's tiers (at least one element, so never NULL on success). */
struct rl_tier *
lim_copy_tiers(const struct rl_conf *c)
{
    struct rl_tier *t = calloc(c->ntiers + 1, sizeof(*t));

    if (t != NULL && c->ntiers > 0) {
        memcpy(t, c->tiers, c->ntiers * sizeof(*t));
    }
    return t;
}

int
lim_seed_cmp(const void *a, const void *b)
{
    uint64_t x = ((const struct lim_seed_ix *)a)->seed, y = ((const struct lim_seed_ix *)b)->seed;

    return x < y ? -1 : x > y;
}

/* One entry of the walk: to its tier's new index, or dropped (its state freed here, under
 * the old tier it follows). Counts what is kept in its new service. */
static bool
lim_remap_entry(void *arg, struct rl_keytab_entry *e)
{
    struct rl_limiter *l = arg;
    uint32_t to = e->tier < l->ntiers ? l->remap[e->tier] : LIM_GONE;
    const struct rl_tier *t;

    if (rl_inltab_is(e->tier)) {
        /* An inline limit's key is not the rules': it keeps its tier id and its counter
         * (its limit's count of keys is unchanged too). */
        t = rl_inltab_tier(l->inl, e->tier);
        if (t == NULL) {
            return false; /* cannot happen: a limit with keys is never reclaimed */
        }
        lim_count_key_acct(l, t, +1);
        lim_count_log(l, t, rl_algo_heap_bytes(t, &e->st));
        return true;
    }

    if (to == LIM_GONE) {
        if (e->tier < l->ntiers) {
            rl_algo_release(&l->tiers[e->tier], &e->st);
        }
        return false;
    }
    t = &l->conf->tiers[to];
    /* The same algorithm and window (the same key seed): what was consumed stays consumed
     * under the new limit and burst. */
    rl_algo_rescale(&l->tiers[e->tier], t, &e->st);
    e->tier = to;
    lim_count_key(l, t, +1);
    lim_count_log(l, t, rl_algo_heap_bytes(t, &e->st));
    return true;
}

int
rl_limiter_set_rules(struct rl_limiter *l, const struct rl_conf *conf,
                     struct rl_limiter_reload *out)
{
    struct lim_seed_ix *ix = calloc(conf->ntiers + 1, sizeof(*ix));
    uint32_t *remap = calloc(l->ntiers + 1, sizeof(*remap));
    struct rl_tier *tiers = lim_copy_tiers(conf);
    uint32_t maxtiers = lim_maxtiers(conf);
    struct lim_tier *scratch = NULL;
    struct rl_tier *gtiers = NULL;
    struct lim_svc *svcs = NULL;
    uint32_t nsvcs = 0, *svc_of_tier = NULL;
    struct lim_names names = {NULL, 0};
    struct rl_limiter_reload res;
    struct rl_keytab_stats ks;
    bool logs = false;

    memset(&res, 0, sizeof(res));
    /* An export open a slice at a time reads keys under the rules in force: it is offered
     * the rest of them before anything here changes (it ends at its next step). */
    if (rl_keytab_scanning(l->tab)) {
        (void)rl_keytab_scan_step(l->tab, SIZE_MAX);
    }
    if (maxtiers > l->maxtiers) {
        scratch = calloc(maxtiers, sizeof(*scratch));
        gtiers = calloc(maxtiers, sizeof(*gtiers));
    }
    if (ix == NULL || remap == NULL || tiers == NULL ||
        (maxtiers > l->maxtiers && (scratch == NULL || gtiers == NULL)) ||
        lim_group_ix(conf, &svcs, &nsvcs, &svc_of_tier, &names) != 0) {
        free(ix);
        free(remap);
        free(tiers);
        free(scratch);
        free(gtiers);
        return -ENOMEM;
    }
    /* Nothing can fail from here on. Old tier -> new tier with the same key seed (section,
     * algorithm, window, ordinal), whatever its limit and burst. */
    for (size_t i = 0; i < conf->ntiers; i++) {
        ix[i].seed = conf->tiers[i].key_seed;
        ix[i].ix = (uint32_t)i;
        logs |= conf->tiers[i].algo == RL_ALGO_SLIDING_WINDOW_LOG ||
                conf->tiers[i].algo == RL_ALGO_CONCURRENCY;
    }
    qsort(ix, conf->ntiers, sizeof(*ix), lim_seed_cmp);
    for (size_t i = 0; i < l->ntiers; i++) {
        struct lim_seed_ix key = {l->tiers[i].key_seed, 0};
        const struct lim_seed_ix *hit =
            conf->ntiers == 0 ? NULL : bsearch(&key, ix, conf->ntiers, sizeof(*ix), lim_seed_cmp);

        remap[i] = hit != NULL ? hit->ix : LIM_GONE;
        if (hit != NULL && conf->tiers[hit->ix].seed == l->tiers[i].seed) {
            res.tiers_kept++;
        } else if (hit != NULL) {
            res.tiers_carried++;
        }
    }
    free(ix);
    /* The services' cumulative counters follow their names; what they hold is counted
     * again by the walk. */
    for (uint32_t o = 0; o < l->nsvcs; o++) {
        size_t at;
        uint32_t k = lim_names_find(&names, svcs, l->svcs[o].name, &at);

        if (k != UINT32_MAX) {
            svcs[k].st = l->svcs[o].st;
            svcs[k].st.keys = 0;
            svcs[k].st.log_bytes = 0;
        }
    }
    free(l->names->slot);
    *l->names = names;
    l->conf = conf;
    l->gowners_conf = NULL; /* the global services' owners are read again at the next import */
    free(l->svcs);
    free(l->svc_of_tier);
    l->svcs = svcs;
    l->nsvcs = nsvcs;
    l->svc_of_tier = svc_of_tier;
    l->nactive = 0;
    l->nlogging = 0;
    l->nkeys = 0;
    l->log_bytes = 0;
    l->inl_svc.st.keys = 0;
    l->inl_svc.st.log_bytes = 0;
    rl_tenants_reset_holdings(l->tenants);
    if (scratch != NULL) {
        free(l->scratch);
        l->scratch = scratch;
        free(l->gtiers);
        l->gtiers = gtiers;
        l->gtiers_cap = maxtiers;
        l->maxtiers = maxtiers;
    }
    l->remap = remap;
    res.keys_dropped = rl_keytab_remap(l->tab, lim_remap_entry, l);
    l->remap = NULL;
    free(remap);
    free(l->tiers);
    l->tiers = tiers;
    l->ntiers = conf->ntiers;
    rl_keytab_stats(l->tab, &ks);
    res.keys_kept = ks.keys;
    res.log_memory_missing = logs && l->log_cap == 0;
    if (out != NULL) {
        *out = res;
    }
    return 0;
}
