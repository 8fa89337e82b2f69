/*
 * plan: rl-regions' computation (regions.h): the regions and global services of the configs,
 * the users to reconcile (hot keys with enough requests, and users that have lines already),
 * their next slices from demand, the slices texts, the phase-one texts (every slice the
 * smaller of old and new) and the report. No I/O but the report's stdout (store.c reads and
 * writes).
 */
#include "regions.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
rg_say(const struct rg_run *run, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (run->o.quiet) {
        return 0;
    }
    va_start(ap, fmt);
    n = vprintf(fmt, ap);
    va_end(ap);
    return n;
}

static int
rg_service_ix(const struct rg_run *run, const char *name, size_t len)
{
    for (size_t i = 0; i < run->nservices; i++) {
        if (strlen(run->services[i]) == len && memcmp(run->services[i], name, len) == 0) {
            return (int)i;
        }
    }
    return -1;
}

int
rg_load(struct rg_run *run)
{
    char err[512];

    for (size_t i = 0; i < run->o.nconfigs; i++) {
        struct rg_region *g = &run->r[i];
        const struct rl_conf *c;
        int rc = rl_conf_load(run->o.configs[i], &g->conf, err, sizeof(err));

        if (rc != 0) {
            fprintf(stderr, "%s\n", err); /* FILE:LINE: what is wrong */
            return RG_EXIT_FAIL;
        }
        run->n++;
        c = g->conf;
        g->config_path = run->o.configs[i];
        if (c->region[0] == '\0' || c->zookeeper[0] == '\0') {
            fprintf(stderr, "rl-regions: %s: needs [cluster] region, regions and zookeeper\n",
                    g->config_path);
            return RG_EXIT_FAIL;
        }
        g->name = c->region;
        g->default_slice = rl_conf_region_slice(c);
        snprintf(g->router, sizeof(g->router), strchr(c->router_host, ':') ? "[%s]:%u" : "%s:%u",
                 c->router_host, (unsigned)c->router_port);
        for (size_t k = 0; k < i; k++) {
            if (strcmp(run->r[k].name, g->name) == 0) {
                fprintf(stderr, "rl-regions: %s and %s are both region %s\n", run->r[k].config_path,
                        g->config_path, g->name);
                return RG_EXIT_FAIL;
            }
        }
        if (c->nregions != run->r[0].conf->nregions ||
            memcmp(c->regions, run->r[0].conf->regions, sizeof(c->regions)) != 0) {
            fprintf(stderr, "rl-regions: %s: [cluster] regions differs from %s's\n", g->config_path,
                    run->r[0].config_path);
            return RG_EXIT_FAIL;
        }
        for (size_t k = 0; k < c->nrules; k++) {
            const struct rl_rule *r = &c->rules[k];

            if (!r->global || rg_service_ix(run, r->service, r->service_len) >= 0) {
                continue;
            }
            if (run->nservices == RG_SERVICES_MAX) {
                fprintf(stderr, "rl-regions: more than %d global services\n", RG_SERVICES_MAX);
                return RG_EXIT_FAIL;
            }
            run->services[run->nservices] = strdup(r->service);
            if (run->services[run->nservices] == NULL) {
                return RG_EXIT_FAIL;
            }
            run->nservices++;
        }
    }
    if (run->n != run->r[0].conf->nregions) {
        fprintf(stderr, "rl-regions: [cluster] regions names %u regions, %zu configs given\n",
                run->r[0].conf->nregions, run->n);
        return RG_EXIT_FAIL;
    }
    if ((uint64_t)run->o.floor * run->n > RL_CONF_SLICE_UNIT) {
        fprintf(stderr, "rl-regions: --floor %u times %zu regions is over 1000\n", run->o.floor,
                run->n);
        return RG_EXIT_FAIL;
    }
    return RG_EXIT_OK;
}

static struct rg_user *
rg_find_user(struct rg_run *run, uint32_t svc, const char *user, size_t ulen)
{
    for (size_t i = 0; i < run->nusers; i++) {
        struct rg_user *u = &run->users[i];

        if (u->svc == svc && u->ulen == ulen && memcmp(u->user, user, ulen) == 0) {
            return u;
        }
    }
    return NULL;
}

int
rg_add_user(struct rg_run *run, uint32_t svc, const char *user, size_t ulen)
{
    struct rg_user *u;

    if (rg_find_user(run, svc, user, ulen) != NULL) {
        return 0;
    }
    if (run->nusers == RL_SLICES_ENTRIES_MAX - RG_SERVICES_MAX) {
        return -ENOSPC;
    }
    if (run->nusers == run->users_cap) {
        size_t cap = run->users_cap == 0 ? 64 : 2 * run->users_cap;
        void *p = realloc(run->users, cap * sizeof(*run->users));

        if (p == NULL) {
            return -ENOMEM;
        }
        run->users = p;
        run->users_cap = cap;
    }
    u = &run->users[run->nusers];
    memset(u, 0, sizeof(*u));
    u->user = malloc(ulen + 1);
    if (u->user == NULL) {
        return -ENOMEM;
    }
    memcpy(u->user, user, ulen);
    u->user[ulen] = '\0';
    u->ulen = ulen;
    u->svc = svc;
    run->nusers++;
    return 0;
}

/* Users with lines in a region's slices now: planned again (or released). */
static void
rg_old_line(void *arg, const char *service, size_t slen, const char *user, size_t ulen,
            uint32_t slice)
{
    struct rg_run *run = arg;
    int svc = rg_service_ix(run, service, slen);

    (void)slice;
    if (user != NULL && svc >= 0) {
        (void)rg_add_user(run, (uint32_t)svc, user, ulen);
    }
}

void
rg_select(struct rg_run *run)
{
    for (size_t i = 0; i < run->n; i++) {
        const struct rg_region *g = &run->r[i];

        for (size_t k = 0; g->reachable && k < g->nhot; k++) {
            const struct rg_hot *h = &g->hot[k];

            if (h->count - h->err >= run->o.min_count) {
                (void)rg_add_user(run, h->svc, h->user, h->ulen);
            }
        }
        rl_slices_each(g->old, rg_old_line, run);
    }
    for (size_t k = 0; k < run->nusers; k++) {
        struct rg_user *u = &run->users[k];

        for (size_t i = 0; i < run->n; i++) {
            const struct rg_region *g = &run->r[i];

            u->demand[i] = 0;
            u->old[i] = rl_slices_get(g->old, run->services[u->svc], strlen(run->services[u->svc]),
                                      u->user, u->ulen, g->default_slice);
        }
    }
}

/*
 * Each user's next slices: the floor in every region, and the rest of the limit shared in
 * proportion to the allowed work measured (rg_measure). Requests a region refused are not
 * work: however many of them come for a user in one region (another client's, say), they
 * take nothing from her share elsewhere; what can grow a region's share is only what its
 * node allowed, at most its slice.
 */
void
rg_plan(struct rg_run *run)
{
    const uint32_t P = RL_CONF_SLICE_UNIT;
    const uint32_t f = run->o.floor;

    for (size_t k = 0; k < run->nusers; k++) {
        struct rg_user *u = &run->users[k];
        uint64_t total = 0, given = 0;
        size_t top = 0;

        for (size_t i = 0; i < run->n; i++) {
            total += u->demand[i];
            if (u->demand[i] > u->demand[top]) {
                top = i;
            }
        }
        u->line = total > 0;
        for (size_t i = 0; i < run->n; i++) {
            if (!u->line) {
                u->slice[i] = run->r[i].default_slice;
                continue;
            }
            u->slice[i] = f + (uint32_t)((uint64_t)(P - f * run->n) * u->demand[i] / total);
            given += u->slice[i];
        }
        if (u->line) {
            u->slice[top] += (uint32_t)(P - given);
        }
    }
}

/* Appends to a growing text. */
struct rg_text {
    char *p;
    size_t len, cap;
    bool failed;
};

static void
rg_append(struct rg_text *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(t->p == NULL ? NULL : t->p + t->len, t->p == NULL ? 0 : t->cap - t->len, fmt,
                      ap);
        va_end(ap);
        if (n < 0) {
            t->failed = true;
            return;
        }
        if (t->p != NULL && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap == 0 ? 4096 : t->cap;
        while (cap <= t->len + (size_t)n) {
            cap *= 2;
        }
        char *q = realloc(t->p, cap);
        if (q == NULL) {
            t->failed = true;
            return;
        }
        t->p = q;
        t->cap = cap;
    }
}

static void
rg_user_line(struct rg_text *t, const char *service, const char *user, size_t ulen, uint32_t v)
{
    char esc[3 * 256 + 1];

    rl_slices_escape(user, ulen, esc, sizeof(esc));
    rg_append(t, "user %s %s %u\n", service, esc, v);
}

int
rg_texts(struct rg_run *run)
{
    uint64_t gen = 0;

    for (size_t i = 0; i < run->n; i++) {
        if (run->r[i].reachable && rl_slices_generation(run->r[i].old) > gen) {
            gen = rl_slices_generation(run->r[i].old);
        }
    }
    run->generation = gen + 1;
    for (size_t i = 0; i < run->n; i++) {
        struct rg_region *g = &run->r[i];
        struct rg_text t = {NULL, 0, 0, false};

        if (!g->reachable) {
            continue;
        }
        rg_append(&t, "# rl-regions: region %s's slices of the global limits, in thousandths\n",
                  g->name);
        rg_append(&t, "generation %" PRIu64 "\n", run->generation);
        for (size_t k = 0; k < run->nservices; k++) {
            rg_append(&t, "service %s %u\n", run->services[k], g->default_slice);
        }
        for (size_t k = 0; k < run->nusers; k++) {
            const struct rg_user *u = &run->users[k];

            if (u->line) {
                rg_user_line(&t, run->services[u->svc], u->user, u->ulen, u->slice[i]);
            }
        }
        if (t.failed || t.len > RL_ZKM_DATA_MAX) {
            free(t.p);
            fprintf(stderr, "rl-regions: region %s: %s\n", g->name,
                    t.failed ? "out of memory" : "slices text too large");
            return RG_EXIT_FAIL;
        }
        free(g->new_text);
        g->new_text = t.p;
        g->new_len = t.len;
    }
    return RG_EXIT_OK;
}

struct rg_min {
    struct rg_text t;
    const struct rl_slices *a, *b;
    uint32_t fallback;
};

static void
rg_min_line(void *arg, const char *service, size_t slen, const char *user, size_t ulen,
            uint32_t slice)
{
    struct rg_min *m = arg;
    uint32_t x = rl_slices_get(m->a, service, slen, user, ulen, m->fallback);
    uint32_t y = rl_slices_get(m->b, service, slen, user, ulen, m->fallback);
    char svc[129];

    (void)slice;
    snprintf(svc, sizeof(svc), "%.*s", (int)slen, service);
    if (user == NULL) {
        rg_append(&m->t, "service %s %u\n", svc, x < y ? x : y);
    } else {
        rg_user_line(&m->t, svc, user, ulen, x < y ? x : y);
    }
}

/*
 * The phase-one text of g: every slice the smaller of what it is (old text) and what it
 * will be (text), for each line of either; text is the new or the rolled-back text. NULL
 * without memory. Lines of both come twice: the parser keeps the last, the same value.
 */
char *
rg_min_text(const struct rg_run *run, const struct rg_region *g, size_t *len)
{
    struct rg_min m = {{NULL, 0, 0, false}, g->old, NULL, g->default_slice};
    struct rl_slices *next = NULL;
    char err[256];

    if (rl_slices_parse(g->new_text, g->new_len, &next, err, sizeof(err)) != 0) {
        return NULL;
    }
    m.b = next;
    rg_append(&m.t,
              "# rl-regions: region %s, phase one: every slice the smaller of old and "
              "new\ngeneration %" PRIu64 "\n",
              g->name, run->generation);
    for (size_t k = 0; k < run->nservices; k++) {
        rg_min_line(&m, run->services[k], strlen(run->services[k]), NULL, 0, 0);
    }
    rl_slices_each(g->old, rg_min_line, &m);
    rl_slices_each(next, rg_min_line, &m);
    rl_slices_destroy(next);
    if (m.t.failed || m.t.len > RL_ZKM_DATA_MAX) {
        free(m.t.p);
        return NULL;
    }
    *len = m.t.len;
    return m.t.p;
}

void
rg_report(const struct rg_run *run)
{
    rg_say(run, "rl-regions: %zu regions, %zu global services, floor %u/1000%s\n", run->n,
           run->nservices, run->o.floor, run->o.dry_run ? " (dry run: nothing written)" : "");
    for (size_t i = 0; i < run->n; i++) {
        const struct rg_region *g = &run->r[i];

        if (!g->reachable) {
            rg_say(run, "region %s: UNREACHABLE (%s): keeps its last slices\n", g->name, g->why);
            continue;
        }
        rg_say(run,
               "region %s: slices version %" PRId64 ", generation %" PRIu64
               ", default slice %u/1000, router %s\n",
               g->name, g->version, rl_slices_generation(g->old), g->default_slice, g->router);
        for (size_t k = 0; k < run->nservices; k++) {
            rg_say(run,
                   "  service %s: demand %" PRIu64
                   " (its planned users' allowed work now, millionths of their limits)\n",
                   run->services[k], g->demand[k]);
        }
    }
    for (size_t k = 0; k < run->nusers; k++) {
        const struct rg_user *u = &run->users[k];
        char esc[3 * 256 + 1];

        rl_slices_escape(u->user, u->ulen, esc, sizeof(esc));
        rg_say(run, "user %s %s:", run->services[u->svc], esc);
        for (size_t i = 0; i < run->n; i++) {
            rg_say(run, " %s demand %" PRIu64 " slice %u -> %u%s", run->r[i].name, u->demand[i],
                   u->old[i], u->slice[i], i + 1 < run->n ? ";" : "");
        }
        rg_say(run, "%s\n", u->line ? "" : " (released to the service's slice)");
    }
}
