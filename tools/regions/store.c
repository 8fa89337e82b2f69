/*
 * store: what rl-regions reads from and writes to the regions (regions.h): a ZooKeeper
 * session per region for the slices znode (compare-and-set, zkadmin.h), and connections to
 * its router (TLS with the region's [cluster] tls_* when set, then AUTH with its secret) for
 * the hot keys of the global services (HOT) and the planned users' allowed work (cost-0
 * CHECKs, pipelined). A region where any of these fails
 * is unreachable for the run: nothing is written there, and the others' slices only go
 * down. Not for planning (plan.c).
 */
#include "regions.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reqclient.h"
#include "tls.h"
#include "zkadmin.h"

static void
rg_unreachable(struct rg_region *g, const char *what, int rc)
{
    if (!g->reachable) {
        return;
    }
    g->reachable = false;
    snprintf(g->why, sizeof(g->why), "%s: %s", what,
             rc == -ETIMEDOUT ? "timed out" : strerror(rc < 0 ? -rc : rc));
}

static int
rg_connect(struct rg_region *g)
{
    static const struct rl_zkm_cbs no_cbs = {NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    int rc;

    rc = uv_loop_init(&g->loop);
    if (rc != 0) {
        return rc;
    }
    g->loop_ready = true;
    rc = rl_zkm_create(&g->zkm, &g->loop, g->conf->zookeeper, g->conf->session_timeout_ms,
                       g->conf->cluster_name, &no_cbs, NULL);
    if (rc != 0) {
        g->zkm = NULL;
        return rc;
    }
    rl_zkm_secure(g->zkm, g->conf->secret, g->conf->secret_len);
    return 0;
}

/* A connection to g's router: TLS when its config has tls_*, then AUTH with the cluster
 * secret when it has one. rep is scratch. On failure *out is NULL and g->why may say why. */
static int
rg_router(struct rg_run *run, struct rg_region *g, struct rl_wire_reply *rep,
          struct rl_client **out)
{
    struct rl_client *c = NULL;
    char why[256];
    int rc;

    *out = NULL;
    if (g->conf->tls_cert_file[0] != '\0' && g->tls == NULL &&
        rl_tls_ctx_new(&g->tls, RL_TLS_CLIENT, g->conf->tls_cert_file, g->conf->tls_key_file,
                       g->conf->tls_ca_file, NULL, why, sizeof(why)) != 0) {
        g->tls = NULL;
        g->reachable = false;
        snprintf(g->why, sizeof(g->why), "router: TLS: %.200s", why);
        return -EPROTO;
    }
    rc = rl_client_connect_addr(&c, g->router, run->o.timeout_ms);
    if (rc == 0 && g->tls != NULL) {
        rc = rl_client_start_tls(c, g->tls, run->o.timeout_ms, why, sizeof(why));
        if (rc != 0 && g->reachable) {
            g->reachable = false;
            snprintf(g->why, sizeof(g->why), "router: TLS: %.200s", why);
        }
    }
    if (rc == 0 && g->conf->secret != NULL) {
        rc = rl_client_auth(c, g->conf->secret, g->conf->secret_len, rep, run->o.timeout_ms);
        if (rc == 0 && rep->op == RL_WIRE_OP_ERROR) {
            rc = -EACCES;
        }
    }
    if (rc != 0) {
        rl_client_destroy(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* The router's hot keys of every global service. */
static int
rg_read_hot(struct rg_run *run, struct rg_region *g)
{
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    struct rl_client *c = NULL;
    int rc;

    if (rep == NULL) {
        return -ENOMEM;
    }
    rc = rg_router(run, g, rep, &c);
    for (size_t k = 0; rc == 0 && k < run->nservices; k++) {
        rc = rl_client_hot(c, run->services[k], run->o.top, rep, run->o.timeout_ms);
        if (rc == 0 && rep->op != RL_WIRE_OP_HOT) {
            rc = -EPROTO;
        }
        for (size_t i = 0; rc == 0 && i < rep->nhot; i++) {
            const struct rl_wire_hot_key *h = &rep->hot[i];
            struct rg_hot *x;
            void *p = realloc(g->hot, (g->nhot + 1) * sizeof(*g->hot));

            if (p == NULL) {
                rc = -ENOMEM;
                break;
            }
            g->hot = p;
            x = &g->hot[g->nhot];
            x->user = malloc(h->user.len + 1);
            if (x->user == NULL) {
                rc = -ENOMEM;
                break;
            }
            memcpy(x->user, h->user.ptr, h->user.len);
            x->user[h->user.len] = '\0';
            x->ulen = h->user.len;
            x->svc = (uint32_t)k;
            x->count = h->count;
            x->err = h->err;
            g->nhot++;
        }
    }
    rl_client_destroy(c);
    free(rep);
    return rc;
}

/*
 * The allowed work of every planned user in g: a cost-0 CHECK of (service, user) through
 * its router, judged by the owner node under the slice in force and consuming nothing;
 * limit - remaining is what the node counts as consumed now (never a refused request), and
 * as a part of the slice in force, u->old[i], it is u->demand[i] in millionths of the
 * global limit. Pipelined, RG_MEASURE_BATCH at a time.
 */
#define RG_MEASURE_BATCH 512u

static int
rg_measure_region(struct rg_run *run, size_t i)
{
    struct rg_region *g = &run->r[i];
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    struct rl_wire_req *reqs = calloc(RG_MEASURE_BATCH, sizeof(*reqs));
    struct rl_wire_check_reply *reps = calloc(RG_MEASURE_BATCH, sizeof(*reps));
    struct rl_client *c = NULL;
    int rc = rep == NULL || reqs == NULL || reps == NULL ? -ENOMEM : 0;

    if (rc == 0 && run->nusers > 0) {
        rc = rg_router(run, g, rep, &c);
    }
    for (size_t at = 0; rc == 0 && at < run->nusers; at += RG_MEASURE_BATCH) {
        size_t n = run->nusers - at < RG_MEASURE_BATCH ? run->nusers - at : RG_MEASURE_BATCH;

        for (size_t k = 0; k < n; k++) {
            const struct rg_user *u = &run->users[at + k];

            memset(&reqs[k], 0, sizeof(reqs[k]));
            reqs[k].op = RL_WIRE_OP_CHECK;
            reqs[k].service.ptr = run->services[u->svc];
            reqs[k].service.len = (uint32_t)strlen(run->services[u->svc]);
            reqs[k].user.ptr = u->user;
            reqs[k].user.len = (uint32_t)u->ulen;
            reqs[k].cost = 0;
        }
        rc = rl_client_check_many(c, reqs, n, reps, run->o.timeout_ms);
        for (size_t k = 0; rc == 0 && k < n; k++) {
            struct rg_user *u = &run->users[at + k];
            const struct rl_wire_check_reply *r = &reps[k];
            uint64_t used;

            if ((r->code != RL_WIRE_ALLOWED && r->code != RL_WIRE_LIMITED &&
                 r->code != RL_WIRE_QUEUED) ||
                r->limit == 0) {
                continue; /* no rule, an error, the owner down: no work seen */
            }
            used = r->remaining < r->limit ? r->limit - r->remaining : 0;
            u->demand[i] = (uint64_t)((double)u->old[i] * 1000.0 * (double)used / (double)r->limit);
            g->demand[u->svc] += u->demand[i];
        }
    }
    rl_client_destroy(c);
    free(rep);
    free(reqs);
    free(reps);
    return rc;
}

void
rg_measure(struct rg_run *run)
{
    for (size_t i = 0; i < run->n; i++) {
        struct rg_region *g = &run->r[i];
        int rc;

        memset(g->demand, 0, sizeof(g->demand));
        if (!g->reachable) {
            continue;
        }
        rc = rg_measure_region(run, i);
        if (rc != 0) {
            rg_unreachable(g, "router", rc);
        }
    }
}

void
rg_read(struct rg_run *run)
{
    char err[256];

    for (size_t i = 0; i < run->n; i++) {
        struct rg_region *g = &run->r[i];
        int64_t v;
        int rc;

        g->reachable = true;
        g->why[0] = '\0';
        rc = rg_connect(g);
        if (rc != 0) {
            rg_unreachable(g, "ZooKeeper session", rc);
            continue;
        }
        rc = rl_zkm_get_slices(g->zkm, &g->old_text, &g->old_len, &g->version, run->o.timeout_ms);
        if (rc != 0) {
            rg_unreachable(g, "ZooKeeper", rc);
            continue;
        }
        if (g->old_len > 0 &&
            rl_slices_parse(g->old_text, g->old_len, &g->old, err, sizeof(err)) != 0) {
            fprintf(stderr, "rl-regions: region %s: its slices are ignored: %s\n", g->name, err);
        }
        if (run->o.rollback) {
            rc = rl_zkm_get_slices_prev(g->zkm, &g->prev_text, &g->prev_len, &v, run->o.timeout_ms);
            if (rc != 0) {
                rg_unreachable(g, "ZooKeeper", rc);
            }
            continue;
        }
        rc = rg_read_hot(run, g);
        if (rc != 0) {
            rg_unreachable(g, "router", rc);
        }
    }
}

static void
rg_sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* One compare-and-set; prints what became of it. */
static int
rg_cas(struct rg_run *run, struct rg_region *g, const char *text, size_t len, const char *phase,
       bool keep_prev)
{
    int64_t nv = -1;
    int rc = rl_zkm_set_slices(g->zkm, text, len, g->version, &nv,
                               keep_prev ? (g->old_text != NULL ? g->old_text : "") : NULL,
                               keep_prev ? g->old_len : 0, run->o.timeout_ms);

    if (rc == -EAGAIN) {
        fprintf(stderr,
                "rl-regions: region %s: its slices changed since they were read (another "
                "rl-regions?): %s refused by compare-and-set\n",
                g->name, phase);
        return RG_EXIT_CHANGED;
    }
    if (rc != 0) {
        rg_unreachable(g, "ZooKeeper write", rc);
        fprintf(stderr, "rl-regions: region %s: %s not written: %s\n", g->name, phase, g->why);
        return RG_EXIT_PARTIAL;
    }
    rg_say(run, "region %s: %s written, version %" PRId64 "\n", g->name, phase, nv);
    g->version = nv;
    return RG_EXIT_OK;
}

int
rg_write(struct rg_run *run)
{
    bool all = true;
    int status = RG_EXIT_OK;
    char *min[RL_CONF_REGIONS_MAX] = {NULL};
    size_t minlen[RL_CONF_REGIONS_MAX] = {0};

    for (size_t i = 0; i < run->n; i++) {
        all &= run->r[i].reachable;
    }
    if (run->o.hold_ms > 0) {
        rg_say(run, "holding %" PRIu64 " ms before writing\n", run->o.hold_ms);
        fflush(stdout);
        rg_sleep_ms(run->o.hold_ms);
    }
    /* Phase one: every reachable region down to the smaller of old and new. */
    for (size_t i = 0; i < run->n && status == RG_EXIT_OK; i++) {
        struct rg_region *g = &run->r[i];

        if (!g->reachable) {
            continue;
        }
        min[i] = rg_min_text(run, g, &minlen[i]);
        if (min[i] == NULL) {
            fprintf(stderr, "rl-regions: region %s: out of memory\n", g->name);
            status = RG_EXIT_FAIL;
            break;
        }
        status = rg_cas(run, g, min[i], minlen[i], all ? "phase one" : "lowered slices", false);
    }
    for (size_t i = 0; i < run->n; i++) {
        all &= run->r[i].reachable;
    }
    /* The nodes apply what their ZooKeeper tells them within milliseconds; give them that
     * before any slice grows. */
    if (status == RG_EXIT_OK && all && run->o.settle_ms > 0) {
        rg_sleep_ms(run->o.settle_ms);
    }
    /* Phase two, only when every region took phase one. */
    for (size_t i = 0; i < run->n && status == RG_EXIT_OK && all; i++) {
        struct rg_region *g = &run->r[i];

        status = rg_cas(run, g, g->new_text, g->new_len, "phase two", true);
        all &= g->reachable;
    }
    for (size_t i = 0; i < run->n; i++) {
        free(min[i]);
    }
    if (status == RG_EXIT_OK && !all) {
        status = RG_EXIT_PARTIAL;
    }
    return status;
}

void
rg_close(struct rg_run *run)
{
    for (size_t i = 0; i < run->n; i++) {
        struct rg_region *g = &run->r[i];

        if (g->zkm != NULL) {
            rl_zkm_destroy(g->zkm);
            g->zkm = NULL;
        }
        if (g->loop_ready) {
            uv_run(&g->loop, UV_RUN_DEFAULT);
            (void)uv_loop_close(&g->loop);
            g->loop_ready = false;
        }
        free(g->old_text);
        free(g->prev_text);
        free(g->new_text);
        rl_slices_destroy(g->old);
        for (size_t k = 0; k < g->nhot; k++) {
            free(g->hot[k].user);
        }
        free(g->hot);
        g->old_text = g->prev_text = g->new_text = NULL;
        g->old_len = g->prev_len = g->new_len = 0;
        g->old = NULL;
        g->hot = NULL;
        g->nhot = 0;
        g->version = -1;
        memset(g->demand, 0, sizeof(g->demand));
    }
    for (size_t k = 0; k < run->nusers; k++) {
        free(run->users[k].user);
    }
    run->nusers = 0;
}

void
rg_free(struct rg_run *run)
{
    rg_close(run);
    for (size_t i = 0; i < run->n; i++) {
        rl_conf_destroy(run->r[i].conf);
        rl_tls_ctx_free(run->r[i].tls);
    }
    for (size_t k = 0; k < run->nservices; k++) {
        free(run->services[k]);
    }
    free(run->users);
}
