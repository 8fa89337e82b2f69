/*
 * control: rl-bench's control loop (control.h): signals, interval reports, and waiting for
 * the workers.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "control.h"
#include "report.h"
#include "worker.h"

static void
sum_counts(struct bench *b, uint64_t *out)
{
    unsigned i, k;

    memset(out, 0, sizeof(uint64_t) * BENCH_NCOUNTS);
    for (i = 0; i < b->o.threads; i++) {
        for (k = 0; k < BENCH_NCOUNTS; k++) {
            out[k] += atomic_load_explicit(&b->workers[i].published[k], memory_order_relaxed);
        }
    }
}

static void
on_report(uv_timer_t *t)
{
    struct bench *b = t->data;
    uint64_t now = uv_hrtime(), counts[BENCH_NCOUNTS], d[BENCH_NCOUNTS];
    unsigned k;

    sum_counts(b, counts);
    for (k = 0; k < BENCH_NCOUNTS; k++) {
        d[k] = counts[k] - b->last_counts[k];
    }
    lg_print_interval(b, (double)(now - b->t_start) / 1e9, (double)(now - b->last_report_t) / 1e9,
                      d);
    memcpy(b->last_counts, counts, sizeof(counts));
    b->last_report_t = now;
}

static void
on_signal(uv_signal_t *s, int signum)
{
    struct bench *b = s->data;

    /* The first ^C drains what is in flight; a second one stops at once. */
    if (atomic_load(&b->stop) == 0) {
        atomic_store(&b->stop, 1);
    } else {
        atomic_store(&b->stop, 2);
    }
}

static void
on_done(uv_async_t *a)
{
    struct bench *b = a->data;

    if (atomic_load(&b->ndone) < b->o.threads) {
        return;
    }
    uv_close((uv_handle_t *)&b->sigint, NULL);
    uv_close((uv_handle_t *)&b->sigterm, NULL);
    uv_close((uv_handle_t *)&b->report, NULL);
    uv_close((uv_handle_t *)&b->done_async, NULL);
}

void
lg_control_run(struct bench *b, bool *failed, bool *ran)
{
    unsigned i, started = 0;
    int rc;

    *failed = false;
    *ran = false;
    uv_loop_init(&b->loop);
    uv_signal_init(&b->loop, &b->sigint);
    b->sigint.data = b;
    uv_signal_start(&b->sigint, on_signal, SIGINT);
    uv_signal_init(&b->loop, &b->sigterm);
    b->sigterm.data = b;
    uv_signal_start(&b->sigterm, on_signal, SIGTERM);
    uv_async_init(&b->loop, &b->done_async, on_done);
    b->done_async.data = b;
    uv_timer_init(&b->loop, &b->report);
    b->report.data = b;
    b->t_start = b->last_report_t = uv_hrtime();
    if (b->o.report_every > 0) {
        uint64_t ms = (uint64_t)(b->o.report_every * 1000.0 + 0.5);

        uv_timer_start(&b->report, on_report, ms, ms);
    }
    for (i = 0; i < b->o.threads; i++) {
        rc = uv_thread_create(&b->workers[i].thread, lg_worker_main, &b->workers[i]);
        if (rc != 0) {
            fprintf(stderr, "rl-bench: cannot start a thread: %s\n", uv_strerror(rc));
            atomic_store(&b->stop, 2);
            atomic_fetch_add(&b->ndone, b->o.threads - i);
            uv_async_send(&b->done_async);
            *failed = true;
            break;
        }
        started++;
    }
    uv_run(&b->loop, UV_RUN_DEFAULT);
    for (i = 0; i < started; i++) {
        uv_thread_join(&b->workers[i].thread);
    }
    if (uv_loop_close(&b->loop) != 0) {
        fprintf(stderr, "rl-bench: control loop not closed\n");
    }
    for (i = 0; i < started; i++) {
        struct worker *w = &b->workers[i];

        *failed = *failed || w->failed || w->err[0] != '\0';
        *ran = *ran || w->running;
    }
}
