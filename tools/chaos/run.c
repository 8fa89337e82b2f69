/*
 * run: the record of one scenario run (struct ch_run, chaos.h) and every append to it that
 * more than one part of rl-chaos makes: the event log, the impairments, the deaths, the
 * routers' sampled digests, and the last view read back. Each takes the run's lock, since
 * the traffic threads, the observer's thread and the main thread all write. Calls nothing
 * of rl-chaos; everything else of it calls this. Also the one way its parts dial a router or a
 * node (ch_run_connect: on loopback, or at its host with AUTH, over TLS when the hosts file
 * gives the cluster TLS). Not the judging (verdict.c).
 */
#include "chaos.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reqclient.h"
#include "tls.h"

struct ch_run *
ch_run_new(const struct ch_scenario *sc, bool verbose)
{
    struct ch_run *r = calloc(1, sizeof(*r));

    if (r != NULL) {
        pthread_mutex_init(&r->lock, NULL);
        r->sc = sc;
        r->verbose = verbose;
    }
    return r;
}

void
ch_run_free(struct ch_run *r)
{
    if (r == NULL) {
        return;
    }
    for (int i = 0; i < CH_ROUTERS_MAX; i++) {
        free(r->traffic[i].reqs);
    }
    for (int i = 0; i < r->nviews; i++) {
        free(r->views[i].owner);
    }
    ch_report_free(r->report);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

void
ch_event(struct ch_run *r, const char *fmt, ...)
{
    struct ch_event *e;
    va_list ap;

    pthread_mutex_lock(&r->lock);
    if (r->nevents == CH_EVENTS_MAX) {
        pthread_mutex_unlock(&r->lock);
        return;
    }
    e = &r->events[r->nevents++];
    e->t_ms = ch_now_ms();
    va_start(ap, fmt);
    vsnprintf(e->text, sizeof(e->text), fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&r->lock);
    if (r->verbose) {
        printf("  %7.3fs  %s\n", r->t0_ms != 0 ? (double)(e->t_ms - r->t0_ms) / 1000.0 : 0.0,
               e->text);
        fflush(stdout);
    }
}

int
ch_run_impair(struct ch_run *r, int node, int64_t from, int64_t to, const char *what)
{
    int i;

    pthread_mutex_lock(&r->lock);
    i = r->nimpairs < CH_IMPAIRS_MAX ? r->nimpairs++ : CH_IMPAIRS_MAX - 1;
    r->impairs[i] = (struct ch_impair){node, from, to, false, ""};
    snprintf(r->impairs[i].what, sizeof(r->impairs[i].what), "%s", what);
    pthread_mutex_unlock(&r->lock);
    return i;
}

void
ch_run_death(struct ch_run *r, const char *fmt, ...)
{
    va_list ap;

    pthread_mutex_lock(&r->lock);
    if (r->ndeaths < 8) {
        va_start(ap, fmt);
        vsnprintf(r->deaths[r->ndeaths++], sizeof(r->deaths[0]), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&r->lock);
}

void
ch_run_sample(struct ch_run *r, int64_t t_ms, int router, uint64_t digest)
{
    pthread_mutex_lock(&r->lock);
    if (r->nsamples < CH_SAMPLES_MAX) {
        r->samples[r->nsamples++] = (struct ch_sample){t_ms, router, digest};
    }
    pthread_mutex_unlock(&r->lock);
}

uint64_t
ch_run_digest(struct ch_run *r, int *nmembers)
{
    uint64_t d = 0;

    pthread_mutex_lock(&r->lock);
    if (r->nviews > 0) {
        d = r->views[r->nviews - 1].digest;
        *nmembers = r->views[r->nviews - 1].nmembers;
    } else {
        *nmembers = 0;
    }
    pthread_mutex_unlock(&r->lock);
    return d;
}

int
ch_run_connect(const struct ch_run *r, bool as_router, int i, struct rl_client **out,
               int timeout_ms)
{
    const struct ch_host *h = NULL;
    char addr[96], why[400];
    int port = as_router ? r->router_port[i] : r->node_port[i], rc;

    if (r->hosts != NULL) {
        h = as_router ? &r->hosts->router[i] : &r->hosts->node[i];
    }
    snprintf(addr, sizeof(addr),
             strchr(h != NULL ? h->addr : "", ':') != NULL ? "[%s]:%d" : "%s:%d",
             h != NULL ? h->addr : "127.0.0.1", port);
    rc = rl_client_connect_addr(out, addr, timeout_ms);
    if (rc != 0 || r->hosts == NULL) {
        return rc;
    }
    if (r->hosts->tls != NULL) {
        /* the client certificate too: a node requires one of every direct connection */
        static atomic_bool told;

        rc = rl_client_start_tls(*out, r->hosts->tls, timeout_ms, why, sizeof(why));
        if (rc != 0 && rc != -ETIMEDOUT && !atomic_exchange(&told, true)) {
            /* a handshake refused (not one cut short by a fault) says what is wrong, once */
            fprintf(stderr, "rl-chaos: TLS with %s failed: %s\n", addr, why);
        }
        if (rc != 0) {
            rl_client_destroy(*out);
            *out = NULL;
            return rc;
        }
    }
    rc = rl_client_auth_file(*out, as_router ? r->hosts->token_file : r->hosts->secret_file,
                             timeout_ms, why, sizeof(why));
    if (rc != 0) {
        rl_client_destroy(*out);
        *out = NULL;
    }
    return rc;
}
