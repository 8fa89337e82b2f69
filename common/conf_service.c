/*
 * conf_service: the [service SERVICE] and [service SERVICE ENDPOINT] sections of
 * cluster.conf and of rules files: the header (names that travel on the wire, one section
 * per service and endpoint, the rule entered in ruleset.h's index), and the keys failure,
 * mode and limit, whose grammar "ALGORITHM N per DURATION [burst B]" (or "concurrency N
 * lease DURATION") is parsed here into
 * the file's tiers. The rule model itself is ruleset.h's.
 */
#include "conf_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONF_SERVICE_MAX 128 /* S and E of [service S E] */

#define CONF_DURATION_PHRASE "is not a duration (use ms, s, m, h or d)"
#define CONF_LIMIT_PHRASE "is not \"ALGORITHM N per DURATION [burst B]\""

const char *
conf_set_failure(struct conf_parser *p, const char *v)
{
    struct rl_rule *r = &p->c->rules[p->sec.index];

    /* open: FAIL_OPEN under the router's backstop (docs/OPERATIONS.md, "The backstop");
     * open_unlimited: FAIL_OPEN for every request, as `open` meant before the backstop. */
    if (strcmp(v, "open_unlimited") == 0) {
        r->fail_closed = false;
        r->fail_unlimited = true;
        return NULL;
    }
    r->fail_unlimited = false;
    return conf_set_either(&r->fail_closed, v, "open", "closed",
                           "is not open, open_unlimited or closed");
}

const char *
conf_set_mode(struct conf_parser *p, const char *v)
{
    return conf_set_either(&p->c->rules[p->sec.index].shadow, v, "enforce", "shadow",
                      "is not enforce or shadow");
}

const char *
conf_set_scope(struct conf_parser *p, const char *v)
{
    return conf_set_either(&p->c->rules[p->sec.index].global, v, "region", "global",
                           "is not region or global");
}

/* A count N or burst B of a limit: 1..RL_CONF_LIMIT_MAX. */
static const char *
limit_count(struct conf_parser *p, const char *what, const char *tok, uint32_t *out)
{
    uint64_t n;
    const char *why = rl_parse_u64(tok, 0, UINT64_MAX, &n);

    if (why != NULL && strcmp(why, "is not a number") == 0) {
        snprintf(p->why, sizeof(p->why), "has a %s \"%s\" that is not a number", what, tok);
        return p->why;
    }
    if (why != NULL || n < 1 || n > RL_CONF_LIMIT_MAX) {
        snprintf(p->why, sizeof(p->why), "has a %s outside 1..%u", what, RL_CONF_LIMIT_MAX);
        return p->why;
    }
    *out = (uint32_t)n;
    return NULL;
}

static void
append_text(char *buf, size_t size, const char *text)
{
    size_t len = strlen(buf);

    snprintf(buf + len, size - len, "%s", text);
}

/* Appends "a, b, c<last>d": every algorithm, or those that take a burst. */
static void
append_algos(char *buf, size_t size, bool burst_only, const char *last)
{
    int n = 0;
    int i;
    int k;

    for (i = 0; i < RL_ALGO_COUNT; i++) {
        n += !burst_only || rl_algo_has_burst((enum rl_algo)i);
    }
    for (i = 0, k = 0; i < RL_ALGO_COUNT; i++) {
        if (!burst_only || rl_algo_has_burst((enum rl_algo)i)) {
            append_text(buf, size, k == 0 ? "" : k == n - 1 ? last : ", ");
            append_text(buf, size, rl_algo_name((enum rl_algo)i));
            k++;
        }
    }
}

/* ALGORITHM N per DURATION [burst B] */
static const char *
parse_limit(struct conf_parser *p, const char *v, struct rl_tier *t)
{
    char copy[RL_CONF_LINE_MAX + 1];
    char *tok[7];
    char *save = NULL;
    int ntok = 0;
    const char *why;
    uint64_t window;

    snprintf(copy, sizeof(copy), "%s", v);
    for (char *w = strtok_r(copy, " \t", &save); w != NULL; w = strtok_r(NULL, " \t", &save)) {
        if (ntok == 7) {
            return CONF_LIMIT_PHRASE;
        }
        tok[ntok++] = w;
    }
    if (ntok >= 1 && strcmp(tok[0], "concurrency") == 0 &&
        (ntok != 4 || strcmp(tok[2], "lease") != 0)) {
        return "is not \"concurrency N lease DURATION\"";
    }
    if ((ntok != 4 && ntok != 6) ||
        strcmp(tok[2], strcmp(tok[0], "concurrency") == 0 ? "lease" : "per") != 0 ||
        (ntok == 6 && strcmp(tok[4], "burst") != 0)) {
        return CONF_LIMIT_PHRASE;
    }
    if (rl_algo_parse(tok[0], &t->algo) != 0) {
        snprintf(p->why, sizeof(p->why), "has an unknown algorithm (use ");
        append_algos(p->why, sizeof(p->why), false, " or ");
        append_text(p->why, sizeof(p->why), ")");
        return p->why;
    }
    why = limit_count(p, "limit", tok[1], &t->limit);
    if (why != NULL && t->algo != RL_ALGO_CONCURRENCY) {
        return why;
    }
    if (why != NULL || t->limit > rl_algo_limit_max(t->algo)) {
        snprintf(p->why, sizeof(p->why), "has a concurrency outside 1..%u",
                 RL_CONF_CONCURRENCY_MAX);
        return p->why;
    }
    why = rl_parse_duration_ms(tok[3], &window);
    if (why != NULL && strcmp(why, CONF_DURATION_PHRASE) == 0) {
        snprintf(p->why, sizeof(p->why), "has a window \"%s\" that %s", tok[3], why);
        return p->why;
    }
    if (why != NULL || window < 1 || window > rl_algo_window_max(t->algo)) {
        if (t->algo == RL_ALGO_CONCURRENCY) {
            snprintf(p->why, sizeof(p->why), "has a lease outside 1ms..%ums (about 49.7 days)",
                     (unsigned)rl_algo_window_max(t->algo));
        } else if (rl_algo_window_max(t->algo) == RL_CONF_WINDOW_MAX) {
            snprintf(p->why, sizeof(p->why), "has a window outside 1ms..%llums (366 days)",
                     (unsigned long long)RL_CONF_WINDOW_MAX);
        } else {
            snprintf(p->why, sizeof(p->why),
                     "has a window outside 1ms..%ums (about 49.7 days; only fixed_window and "
                     "sliding_window_counter count longer windows, up to 366 days)",
                     RL_CONF_WINDOW32_MAX);
        }
        return p->why;
    }
    t->window_ms = window;
    t->burst = t->limit;
    if (ntok == 6) {
        if (!rl_algo_has_burst(t->algo)) {
            snprintf(p->why, sizeof(p->why), "has a burst, which only ");
            append_algos(p->why, sizeof(p->why), true, " and ");
            append_text(p->why, sizeof(p->why), " take");
            return p->why;
        }
        why = limit_count(p, "burst", tok[5], &t->burst);
        if (why != NULL) {
            return why;
        }
    }
    return NULL;
}

const char *
conf_set_limit(struct conf_parser *p, const char *v)
{
    struct rl_conf *c = p->c;
    struct rl_rule *r = &c->rules[p->sec.index];
    struct rl_tier t, *slot;
    const char *why = parse_limit(p, v, &t);

    if (why != NULL) {
        return why;
    }
    if (r->ntiers == RL_CONF_RULE_TIERS_MAX) {
        return "is one tier too many: a section has at most 16";
    }
    if (c->ntiers == RL_CONF_TIERS_MAX) {
        return "is one tier too many: a file has at most 1048575";
    }
    slot = conf_push(p, &c->tiers, c->ntiers, &p->tiers_cap, sizeof(*slot), 16);
    if (slot == NULL) {
        return "could not be stored: out of memory";
    }
    /* Tiers of one section are contiguous: only the current section appends. */
    t.id = (uint32_t)c->ntiers;
    t.seed = rl_ruleset_tier_seed(r, r->ntiers, &t);
    t.key_seed = rl_ruleset_tier_key_seed(r, &c->tiers[r->first_tier], &t);
    *slot = t;
    c->ntiers++;
    r->ntiers++;
    return NULL;
}

/* Service and endpoint names travel on the wire: 1..128 bytes. They hold no blank (the header
 * is split at blanks) and are printable UTF-8 (conf_section_open has checked). */
static bool
valid_service(const char *s)
{
    size_t n = strlen(s);

    return n >= 1 && n <= CONF_SERVICE_MAX;
}

int
conf_section_service(struct conf_parser *p, const char *service, const char *endpoint)
{
    struct rl_conf *c = p->c;
    size_t slen = strlen(service);
    size_t elen = endpoint != NULL ? strlen(endpoint) : 0;
    const struct rl_rule *old;
    struct rl_rule *r;

    if (!valid_service(service) || (endpoint != NULL && !valid_service(endpoint))) {
        conf_fail(p, p->line, -EINVAL,
                  "%s name is not 1..128 bytes without blanks or control characters",
                  valid_service(service) ? "endpoint" : "service");
        return -EINVAL;
    }
    old = rl_ruleset_find(c, service, slen, endpoint, elen);
    if (old != NULL) {
        conf_fail(p, p->line, -EINVAL, "duplicate section [service %s%s%s] (first at line %d)",
                  service, endpoint != NULL ? " " : "", endpoint != NULL ? endpoint : "",
                  old->line);
        return -EINVAL;
    }
    r = conf_push(p, &c->rules, c->nrules, &p->rules_cap, sizeof(*r), 8);
    if (r == NULL) {
        return -ENOMEM;
    }
    r->service = strdup(service);
    r->endpoint = endpoint != NULL ? strdup(endpoint) : NULL;
    /* Counted now, so that rl_conf_destroy frees what the two strdups got. */
    c->nrules++;
    if (r->service == NULL || (endpoint != NULL && r->endpoint == NULL)) {
        conf_nomem(p);
        return -ENOMEM;
    }
    r->service_len = slen;
    r->endpoint_len = elen;
    r->id = (uint32_t)(c->nrules - 1);
    r->first_tier = (uint32_t)c->ntiers;
    r->line = p->line;
    if (rl_ruleset_index_add(c) != 0) {
        conf_nomem(p);
        return -ENOMEM;
    }
    p->sec.index = r->id;
    return 0;
}
