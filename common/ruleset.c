/*
 * ruleset: the rules of a conf once parsed (ruleset.h): the algorithms' names, a tier's
 * identity, the (service, endpoint) -> rule index and its O(1) lookup, the digest, the
 * resolution of a client's services against the rules, and the swap of one conf's rules
 * into another. conf_service.c builds the rules a section at a time through this file. Not for
 * reading text: a `limit` line's syntax is conf_service.c's.
 */
#include "ruleset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "conf.h"

static const struct {
    const char *name;
} algos[] = {
#define RULESET_ALGO(n, s, b) {s},
    RL_ALGO_MAP(RULESET_ALGO)
#undef RULESET_ALGO
};

const char *
rl_algo_name(enum rl_algo a)
{
    return (unsigned)a < RL_ALGO_COUNT ? algos[a].name : "unknown";
}

int
rl_algo_parse(const char *name, enum rl_algo *out)
{
    for (int a = 0; a < RL_ALGO_COUNT; a++) {
        if (strcmp(name, algos[a].name) == 0) {
            *out = (enum rl_algo)a;
            return 0;
        }
    }
    return -EINVAL;
}

uint64_t
rl_ruleset_tier_seed(const struct rl_rule *r, uint32_t pos, const struct rl_tier *t)
{
    uint64_t v[6] = {pos, (uint64_t)t->algo, t->limit, t->window_ms, t->burst, r->endpoint != NULL};
    uint64_t h = XXH3_64bits_withSeed(r->service, r->service_len, UINT64_C(0x726c2d7469657231));

    if (r->endpoint != NULL) {
        h = XXH3_64bits_withSeed(r->endpoint, r->endpoint_len, h);
    }
    return XXH3_64bits_withSeed(v, sizeof(v), h);
}

uint64_t
rl_ruleset_tier_key_seed(const struct rl_rule *r, const struct rl_tier *prev,
                         const struct rl_tier *t)
{
    uint64_t ord = 0;
    uint64_t v[5];
    uint64_t h = XXH3_64bits_withSeed(r->service, r->service_len, UINT64_C(0x726c2d6b65797331));

    for (uint32_t i = 0; i < r->ntiers; i++) {
        ord += prev[i].algo == t->algo && prev[i].window_ms == t->window_ms;
    }
    v[0] = ord;
    v[1] = (uint64_t)t->algo;
    v[2] = t->window_ms;
    v[3] = r->endpoint != NULL;
    v[4] = UINT64_C(0x6b6579); /* "key": not a seed's layout */
    if (r->endpoint != NULL) {
        h = XXH3_64bits_withSeed(r->endpoint, r->endpoint_len, h);
    }
    return XXH3_64bits_withSeed(v, sizeof(v), h);
}

/* The (service, endpoint) -> rule index: open addressing, linear probing, load <= 1/2. */

static uint64_t
rule_hash(const char *s, size_t slen, const char *e, size_t elen)
{
    uint64_t h = XXH3_64bits(s, slen);

    /* Seeding the endpoint's hash with the service's lets the fallback reuse h. */
    return elen != 0 ? XXH3_64bits_withSeed(e, elen, h) : h;
}

static const struct rl_rule *
index_find(const struct rl_conf *c, uint64_t h, const char *s, size_t slen, const char *e,
           size_t elen)
{
    size_t mask = c->index_cap - 1;
    size_t i;

    for (i = (size_t)h & mask;; i = (i + 1) & mask) {
        uint32_t slot = c->index[i];
        const struct rl_rule *r;

        if (slot == 0) {
            return NULL;
        }
        r = &c->rules[slot - 1];
        if (r->service_len == slen && r->endpoint_len == elen && memcmp(r->service, s, slen) == 0 &&
            (elen == 0 || memcmp(r->endpoint, e, elen) == 0)) {
            return r;
        }
    }
}

static void
index_put(uint32_t *index, size_t cap, const struct rl_rule *r)
{
    size_t i = (size_t)rule_hash(r->service, r->service_len, r->endpoint, r->endpoint_len);

    for (i &= cap - 1; index[i] != 0; i = (i + 1) & (cap - 1)) {
    }
    index[i] = r->id + 1;
}

const struct rl_rule *
rl_ruleset_find(const struct rl_conf *c, const char *service, size_t slen, const char *endpoint,
                size_t elen)
{
    if (c->index_cap == 0) {
        return NULL;
    }
    return index_find(c, rule_hash(service, slen, endpoint, elen), service, slen, endpoint, elen);
}

int
rl_ruleset_index_add(struct rl_conf *c)
{
    size_t i;

    if (c->nrules * 2 > c->index_cap) {
        size_t cap = c->index_cap != 0 ? c->index_cap * 2 : 16;
        uint32_t *index = calloc(cap, sizeof(*index));

        if (index == NULL) {
            return -ENOMEM;
        }
        free(c->index);
        c->index = index;
        c->index_cap = cap;
        for (i = 0; i + 1 < c->nrules; i++) {
            index_put(c->index, cap, &c->rules[i]);
        }
    }
    index_put(c->index, c->index_cap, &c->rules[c->nrules - 1]);
    return 0;
}

const struct rl_rule *
rl_conf_rule(const struct rl_conf *c, const char *service, size_t slen, const char *endpoint,
             size_t elen)
{
    const struct rl_rule *r;
    uint64_t h;

    if (c == NULL || c->nrules == 0 || service == NULL || slen == 0) {
        return NULL;
    }
    h = XXH3_64bits(service, slen);
    if (endpoint != NULL && elen != 0) {
        r = index_find(c, XXH3_64bits_withSeed(endpoint, elen, h), service, slen, endpoint, elen);
        if (r != NULL) {
            return r;
        }
    }
    return index_find(c, h, service, slen, NULL, 0);
}

uint64_t
rl_ruleset_digest(const struct rl_conf *c)
{
    XXH3_state_t *st = XXH3_createState();
    uint64_t h, v[4];

    if (st == NULL) {
        return 0;
    }
    XXH3_64bits_reset_withSeed(st, UINT64_C(0x726c2d72756c6573));
    v[0] = c->nrules;
    XXH3_64bits_update(st, v, sizeof(v[0]));
    for (size_t i = 0; i < c->nrules; i++) {
        const struct rl_rule *r = &c->rules[i];

        v[0] = r->fail_closed;
        v[1] = (uint64_t)r->shadow | (uint64_t)r->global << 1;
        v[2] = r->ntiers;
        v[3] = r->endpoint != NULL;
        XXH3_64bits_update(st, v, sizeof(v));
        /* the names too: a rule with no tier would otherwise leave no trace of them */
        XXH3_64bits_update(st, r->service, r->service_len + 1);
        if (r->endpoint != NULL) {
            XXH3_64bits_update(st, r->endpoint, r->endpoint_len + 1);
        }
        for (uint32_t k = 0; k < r->ntiers; k++) {
            XXH3_64bits_update(st, &c->tiers[r->first_tier + k].seed, sizeof(uint64_t));
        }
    }
    h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h & (UINT64_MAX >> 1);
}

int
rl_ruleset_resolve(const char *services, const struct rl_conf *c, bool *rules, bool *all,
                   char *missing, size_t mlen)
{
    char *words = strdup(services), *save = NULL;
    int rc = 0;

    if (words == NULL) {
        return -ENOMEM;
    }
    for (char *w = strtok_r(words, " \t,", &save); w != NULL; w = strtok_r(NULL, " \t,", &save)) {
        bool found = false;

        if (strcmp(w, "*") == 0) {
            *all = true;
            continue;
        }
        for (size_t i = 0; i < c->nrules; i++) {
            if (strcmp(c->rules[i].service, w) == 0) {
                rules[i] = true;
                found = true;
            }
        }
        if (!found && rc == 0) {
            snprintf(missing, mlen, "%s", w);
            rc = -ENOENT;
        }
    }
    free(words);
    return rc;
}

#define RULESET_SWAP(a, b)                                                                         \
    do {                                                                                           \
        __typeof__(a) ruleset_swap_tmp_ = (a);                                                     \
        (a) = (b);                                                                                 \
        (b) = ruleset_swap_tmp_;                                                                   \
    } while (0)

int
rl_conf_swap_rules(struct rl_conf *live, struct rl_conf *fresh, char *warn, size_t warnlen)
{
    bool **arrays = calloc(live->nauth_clients + 1, sizeof(*arrays));
    char missing[RL_CONF_LINE_MAX + 1];
    size_t i;

    if (warn != NULL && warnlen > 0) {
        warn[0] = '\0';
    }
    if (arrays == NULL) {
        return -ENOMEM;
    }
    /* Everything that can fail first, so that a failure changes nothing. */
    for (i = 0; i < live->nauth_clients; i++) {
        struct rl_client_conf *cl = &live->auth_clients[i];
        bool all = cl->all_services;
        int rc;

        arrays[i] = calloc(fresh->nrules != 0 ? fresh->nrules : 1, sizeof(**arrays));
        if (arrays[i] == NULL) {
            goto nomem;
        }
        rc = cl->services == NULL ? 0
                                  : rl_ruleset_resolve(cl->services, fresh, arrays[i], &all,
                                                       missing, sizeof(missing));
        if (rc == -ENOMEM) {
            i++;
            goto nomem;
        }
        if (rc != 0 && warn != NULL && warnlen > 0 && warn[0] == '\0') {
            snprintf(warn, warnlen,
                     "[client %s] names service \"%s\", which has no rule now: its CHECKs of it "
                     "get ERROR UNAUTHORIZED",
                     cl->name, missing);
        }
    }
    RULESET_SWAP(live->rules, fresh->rules);
    RULESET_SWAP(live->nrules, fresh->nrules);
    RULESET_SWAP(live->tiers, fresh->tiers);
    RULESET_SWAP(live->ntiers, fresh->ntiers);
    RULESET_SWAP(live->index, fresh->index);
    RULESET_SWAP(live->index_cap, fresh->index_cap);
    RULESET_SWAP(live->rules_digest, fresh->rules_digest);
    for (i = 0; i < live->nauth_clients; i++) {
        free(live->auth_clients[i].rules);
        live->auth_clients[i].rules = arrays[i];
    }
    free(arrays);
    return 0;

nomem:
    while (i-- > 0) {
        free(arrays[i]);
    }
    free(arrays);
    return -ENOMEM;
}

void
rl_ruleset_deinit(struct rl_conf *c)
{
    for (size_t i = 0; i < c->nrules; i++) {
        free(c->rules[i].service);
        free(c->rules[i].endpoint);
    }
    free(c->rules);
    free(c->tiers);
    free(c->index);
    c->rules = NULL;
    c->tiers = NULL;
    c->index = NULL;
    c->nrules = c->ntiers = c->index_cap = 0;
}
