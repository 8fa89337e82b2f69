/*
 * worker: rl-bench's worker threads (worker.h): the loop, the schedule, stopping and
 * draining.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "conn.h"
#include "worker.h"
#include "workload.h"

static void
worker_publish(struct worker *w)
{
    unsigned i;

    for (i = 0; i < BENCH_NCOUNTS; i++) {
        atomic_store_explicit(&w->published[i], w->counts[i], memory_order_relaxed);
    }
}

static uint64_t
worker_inflight(const struct worker *w)
{
    uint64_t n = 0;
    unsigned i;

    for (i = 0; i < w->nconns; i++) {
        n += w->conns[i].inflight;
    }
    return n;
}

/* Arms the timerfd for the next request the open-loop schedule owes. */
static void
worker_arm(struct worker *w, uint64_t now)
{
    struct itimerspec its;
    uint64_t due;

    if (w->tfd < 0 || w->stopping || w->sent >= w->budget) {
        return;
    }
    due = w->t0 + (uint64_t)((double)w->sent * w->interval_ns);
    /* Already due means every pipeline is full: a reply, not the timer, will make room
     * (arming a past time would spin the loop). */
    if (due <= now) {
        return;
    }
    memset(&its, 0, sizeof(its));
    its.it_value.tv_sec = (time_t)(due / 1000000000u);
    its.it_value.tv_nsec = (long)(due % 1000000000u);
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) {
        its.it_value.tv_nsec = 1;
    }
    timerfd_settime(w->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void
worker_top_up(struct worker *w, uint64_t now)
{
    const struct opts *o = &w->b->o;
    uint64_t allowed = w->budget - w->sent, due;
    unsigned i, k;
    struct conn *c;

    if (w->tfd >= 0) {
        due = now < w->t0 ? 0 : (uint64_t)((double)(now - w->t0) / w->interval_ns) + 1;
        if (due > w->budget) {
            due = w->budget;
        }
        allowed = due > w->sent ? due - w->sent : 0;
    }
    for (k = 0; k < w->nconns && allowed > 0; k++) {
        i = (w->rr + k) % w->nconns;
        c = &w->conns[i];
        if (c->dead) {
            continue;
        }
        while (c->inflight < o->pipeline && allowed > 0) {
            /* Open loop: the latency clock starts when the schedule said to send. */
            uint64_t t = w->tfd >= 0 ? w->t0 + (uint64_t)((double)w->sent * w->interval_ns) : now;

            if (lg_conn_send_one(c, t) != 0) {
                lg_conn_kill(c, "encode", UV_ENOMEM);
                break;
            }
            allowed--;
        }
        lg_conn_flush(c);
    }
    w->rr = (w->rr + 1) % w->nconns;
}

static void
worker_stop(struct worker *w, uint64_t now)
{
    if (w->stopping) {
        return;
    }
    w->stopping = true;
    w->drain_until = now + BENCH_DRAIN_NS;
    if (w->tfd >= 0) {
        uv_poll_stop(&w->tfd_poll);
    }
}

static void
on_close_nop(uv_handle_t *h)
{
    (void)h;
}

void
lg_worker_finish(struct worker *w)
{
    unsigned i;

    if (w->finished) {
        return;
    }
    w->finished = true;
    if (w->t_end < w->t0) {
        w->t_end = w->t0;
    }
    for (i = 0; i < w->nconns; i++) {
        lg_conn_kill(&w->conns[i], "close", 0);
    }
    worker_publish(w);
    uv_close((uv_handle_t *)&w->check, on_close_nop);
    uv_close((uv_handle_t *)&w->tick, on_close_nop);
    uv_close((uv_handle_t *)&w->end_timer, on_close_nop);
    if (w->tfd >= 0) {
        uv_close((uv_handle_t *)&w->tfd_poll, on_close_nop);
    }
}

static void worker_start(struct worker *w);

static void
on_check(uv_check_t *h)
{
    struct worker *w = h->data;
    uint64_t now;

    if (w->finished) {
        return;
    }
    if (!w->running) {
        /* The connections only count themselves: starting and finishing are decided here,
         * once a loop turn, so conn.c never calls up into the worker. */
        if (w->connect_failed) {
            lg_worker_finish(w);
            return;
        }
        if (w->nconnected < w->nconns) {
            return;
        }
        worker_start(w);
    }
    if (w->nalive == 0) {
        lg_worker_finish(w);
        return;
    }
    now = uv_hrtime();
    if (!w->stopping && w->sent >= w->budget) {
        worker_stop(w, now);
    }
    if (!w->stopping) {
        worker_top_up(w, now);
        worker_arm(w, now);
    } else if (worker_inflight(w) == 0) {
        lg_worker_finish(w);
        return;
    }
    worker_publish(w);
}

static void
on_end_timer(uv_timer_t *t)
{
    struct worker *w = t->data;

    worker_stop(w, uv_hrtime());
}

static void
worker_start(struct worker *w)
{
    const struct opts *o = &w->b->o;

    w->running = true;
    w->t0 = uv_hrtime();
    w->t_end = w->t0;
    if (o->requests == 0) {
        uint64_t ms = (uint64_t)ceil(o->duration * 1000.0);

        uv_timer_start(&w->end_timer, on_end_timer, ms, 0);
    }
    if (w->tfd >= 0) {
        worker_arm(w, w->t0 > 0 ? w->t0 - 1 : 0);
    }
}

static void
on_tick(uv_timer_t *t)
{
    struct worker *w = t->data;
    uint64_t now = uv_hrtime();
    int stop = atomic_load(&w->b->stop);

    if (w->finished) {
        return;
    }
    if (!w->running) {
        if (stop != 0 || now - w->t_created > BENCH_CONNECT_NS) {
            if (stop == 0) {
                snprintf(w->err, sizeof(w->err), "connecting timed out");
                fprintf(stderr, "rl-bench: %s\n", w->err);
                w->failed = true;
            }
            lg_worker_finish(w);
        }
        return;
    }
    if (stop != 0) {
        worker_stop(w, now);
    }
    if (w->stopping && (stop == 2 || now >= w->drain_until)) {
        /* Whatever is still out will not be waited for: it counts as lost, and the run's
         * length stays what it was at the last reply. */
        lg_worker_finish(w);
    }
}

static void
on_tfd(uv_poll_t *p, int status, int events)
{
    struct worker *w = p->data;
    uint64_t expirations;

    /* Only to wake the loop: the check handle sends what the schedule owes. */
    if (read(w->tfd, &expirations, sizeof(expirations)) < 0) {
        return;
    }
}

void
lg_worker_main(void *arg)
{
    struct worker *w = arg;
    struct bench *b = w->b;
    unsigned i;
    int rc;

    /* The open-loop schedule wants microsecond wake-ups, not the default 50 us slack. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    uv_loop_init(&w->loop);
    uv_check_init(&w->loop, &w->check);
    w->check.data = w;
    uv_check_start(&w->check, on_check);
    uv_timer_init(&w->loop, &w->tick);
    w->tick.data = w;
    uv_timer_start(&w->tick, on_tick, 5, 5);
    uv_timer_init(&w->loop, &w->end_timer);
    w->end_timer.data = w;
    if (w->tfd >= 0) {
        uv_poll_init(&w->loop, &w->tfd_poll, w->tfd);
        w->tfd_poll.data = w;
        uv_poll_start(&w->tfd_poll, UV_READABLE, on_tfd);
    }
    w->t_created = uv_hrtime();
    for (i = 0; i < w->nconns; i++) {
        uv_tcp_init(&w->loop, &w->conns[i].tcp);
        w->conns[i].tcp.data = &w->conns[i];
    }
    for (i = 0; i < w->nconns; i++) {
        struct conn *c = &w->conns[i];

        c->connect_req.data = c;
        rc = b->o.has_source ? uv_tcp_bind(&c->tcp, (const struct sockaddr *)&b->o.source, 0) : 0;
        if (rc == 0) {
            rc = uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&b->addr,
                                lg_on_connect);
        }
        if (rc < 0) {
            snprintf(w->err, sizeof(w->err), "cannot connect to %s: %s", b->o.target,
                     uv_strerror(rc));
            fprintf(stderr, "rl-bench: %s\n", w->err);
            w->failed = true;
            c->dead = true;
            lg_worker_finish(w);
            break;
        }
    }
    uv_run(&w->loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(&w->loop);
    if (rc != 0) {
        fprintf(stderr, "rl-bench: worker %u: loop not closed: %s\n", w->index, uv_strerror(rc));
    }
    atomic_fetch_add(&b->ndone, 1);
    uv_async_send(&b->done_async);
}

int
lg_workers_init(struct bench *b)
{
    const struct opts *o = &b->o;
    uint64_t seed = lg_seed(o);
    unsigned i, k, conn_index = 0;

    b->workers = calloc(o->threads, sizeof(*b->workers));
    if (b->workers == NULL) {
        return -ENOMEM;
    }
    for (i = 0; i < o->threads; i++) {
        struct worker *w = &b->workers[i];

        w->b = b;
        w->index = i;
        w->tfd = -1;
        w->nconns = o->connections / o->threads + (i < o->connections % o->threads ? 1 : 0);
        w->conns = calloc(w->nconns, sizeof(*w->conns));
        w->rep = malloc(sizeof(*w->rep));
        if (o->tls != NULL && (w->tls_raw = malloc(BENCH_TLS_RAW)) == NULL) {
            return -ENOMEM;
        }
        if (w->conns == NULL || w->rep == NULL || rl_wire_decoder_init(&w->dec) != 0) {
            return -ENOMEM;
        }
        for (k = 0; k < w->nconns; k++) {
            if (lg_conn_init(w, &w->conns[k], conn_index++) != 0) {
                return -ENOMEM;
            }
        }
        w->budget = UINT64_MAX;
        if (o->requests != 0) {
            w->budget = o->requests / o->threads + (i < o->requests % o->threads ? 1 : 0);
        }
        lg_keys_init(w, seed);
        if (o->rate > 0) {
            w->interval_ns = 1e9 / (o->rate * (double)w->nconns / (double)o->connections);
            w->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
            if (w->tfd < 0) {
                return -errno;
            }
        }
    }
    return 0;
}

void
lg_workers_deinit(struct bench *b)
{
    unsigned i, k;

    if (b->workers == NULL) {
        return;
    }
    for (i = 0; i < b->o.threads; i++) {
        struct worker *w = &b->workers[i];

        if (w->conns != NULL) {
            for (k = 0; k < w->nconns; k++) {
                lg_conn_deinit(&w->conns[k]);
            }
        }
        if (w->rep != NULL) {
            rl_wire_decoder_deinit(&w->dec);
        }
        if (w->tfd >= 0) {
            close(w->tfd);
        }
        free(w->conns);
        free(w->rep);
        free(w->tls_raw);
    }
    free(b->workers);
}
