/*
 * loop: runs one scenario on the clock: starts the cluster (cluster.c) and waits until every
 * router agrees with ZooKeeper, starts the traffic, then every tick does the steps due and
 * undoes the ones ending (faults.c), reaps unexpected deaths, probes cut-off nodes, samples
 * the routers and prints a line a second; after the run, lets the routers settle and stops
 * everything. SIGINT and SIGTERM end a run early, without a verdict. Not the judging
 * (verdict.c) nor the command line (main.c).
 */
#include "loop.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"

#define TICK_MS 50
#define SAMPLE_MS 250
#define PROBE_MS 200

static void
live_line(struct ch_cluster *c, int64_t t_ms, unsigned long long *last_total)
{
    struct ch_run *r = c->run;
    unsigned long long code[8] = {0}, total = 0, late = 0, unsent = 0;
    int nm, alive, agree;

    for (int i = 0; i < r->sc->routers; i++) {
        for (int k = 0; k < 8; k++) {
            code[k] += atomic_load(&r->traffic[i].by_code[k]);
        }
        late += atomic_load(&r->traffic[i].late);
        unsent += atomic_load(&r->traffic[i].unsent);
    }
    for (int k = 0; k < 8; k++) {
        total += code[k];
    }
    ch_run_digest(r, &nm);
    agree = ch_cluster_sample(c, &alive);
    printf("%5.1fs %6llu/s | allowed %7llu limited %7llu open %5llu closed %5llu err %4llu "
           "lost %4llu late %4llu unsent %5llu | members %d/%d | routers agree %d/%d\n",
           (double)t_ms / 1000.0, total - *last_total, code[0], code[1], code[2], code[3],
           code[6], code[7], late, unsent, nm, r->sc->nodes, agree, alive);
    fflush(stdout);
    *last_total = total;
}

/* Set by SIGINT or SIGTERM: the run stops early, everything is stopped, no verdict. */
static volatile sig_atomic_t interrupted;

static void
on_interrupt(int sig)
{
    interrupted = 1;
    signal(sig, SIG_DFL); /* a second one ends rl-chaos at once (its children die with it) */
}

void
ch_loop_catch_interrupts(void)
{
    signal(SIGINT, on_interrupt);
    signal(SIGTERM, on_interrupt);
}

int
ch_loop_run(struct ch_run *r)
{
    const struct ch_scenario *sc = r->sc;
    struct ch_cluster *c = calloc(1, sizeof(*c));
    int64_t end, next_sample, next_line, next_probe, settle_end;
    unsigned long long last_total = 0;
    int alive, nm, rc = 3, started = 0;

    if (c == NULL) {
        return 3;
    }
    c->run = r;
    printf("rl-chaos: scenario %s: %d nodes, %d routers, %u shards, session %lld ms, deadline "
           "%lld ms, %u req/s for %lld s\n",
           sc->name, sc->nodes, sc->routers, sc->shards, (long long)sc->session_timeout_ms,
           (long long)sc->deadline_ms, sc->rate, (long long)sc->duration_ms / 1000);
    if (sc->description[0] != '\0') {
        printf("  %s\n", sc->description);
    }
    fflush(stdout);
    if (ch_cluster_start(c) != 0) {
        rc = interrupted ? 130 : 3;
        goto out;
    }
    /* Every router agrees with ZooKeeper before traffic starts (every node started: an
     * `add` step's node joins later)... */
    for (int i = 0; i < sc->nodes; i++) {
        started += !sc->spare[i];
    }
    for (int64_t until = ch_now_ms() + 15000;; ch_sleep_us(100 * 1000)) {
        uint64_t d = ch_run_digest(r, &nm);

        /* ...and no shard in flight: the cluster formed (a node's first view may expect
         * shards a while) before the scenario's moves begin */
        if (d != 0 && nm == started && ch_cluster_sample(c, &alive) == sc->routers &&
            ch_cluster_in_flight(c) == 0) {
            break;
        }
        if (ch_now_ms() > until || interrupted) {
            fprintf(stderr, "rl-chaos: %s\n",
                    interrupted ? "interrupted: stopping the cluster, no verdict"
                                : "the routers did not agree with ZooKeeper (or shards were "
                                  "still in flight) within 15 s");
            rc = interrupted ? 130 : 3;
            goto out;
        }
    }
    r->t0_ms = ch_now_ms();
    ch_report_start(r->report, r->t0_ms, ch_mono_us());
    ch_event(r, "traffic starts");
    for (int i = 0; i < sc->routers; i++) {
        if (ch_traffic_start(&r->traffic[i], r, i) != 0) {
            fprintf(stderr, "rl-chaos: cannot start traffic\n");
            goto out;
        }
    }
    end = r->t0_ms + sc->duration_ms;
    next_sample = next_probe = r->t0_ms;
    next_line = r->t0_ms + 1000;
    for (int64_t now = ch_now_ms(); now < end && !interrupted; now = ch_now_ms()) {
        /* the ends that are due first, then the starts: a step that ends when the next on
         * the same target begins must not undo it */
        for (int i = 0; i < sc->nsteps; i++) {
            if (c->undo_at[i] > 0 && c->undo_at[i] <= now) {
                ch_fault_undo(c, i);
                ch_report_step(r->report, i, CH_STEP_END, ch_now_ms());
                c->undo_at[i] = -1;
            }
        }
        for (int i = 0; i < sc->nsteps; i++) {
            if (r->t0_ms + sc->steps[i].at_ms <= now && c->undo_at[i] == 0) {
                ch_report_step(r->report, i, CH_STEP_BEGIN, ch_now_ms());
                ch_fault_do(c, i);
                ch_report_step(r->report, i, CH_STEP_DONE, ch_now_ms());
                if (c->undo_at[i] == 0) {
                    c->undo_at[i] = -1; /* done, nothing to undo */
                }
            }
        }
        ch_cluster_reap(c);
        if (now >= next_probe) {
            for (int i = 0; i < sc->nodes; i++) {
                if (c->probe_until[i] != 0 && now <= c->probe_until[i]) {
                    ch_fault_probe(c, i);
                }
            }
            next_probe = now + PROBE_MS;
        }
        if (now >= next_line) {
            live_line(c, now - r->t0_ms, &last_total);
            next_line += 1000;
            next_sample = now + SAMPLE_MS;
        } else if (now >= next_sample) {
            ch_cluster_sample(c, &alive);
            next_sample = now + SAMPLE_MS;
        }
        ch_sleep_us(TICK_MS * 1000);
    }
    for (int i = 0; i < sc->nsteps; i++) {
        if (c->undo_at[i] > 0) {
            ch_fault_undo(c, i);
            ch_report_step(r->report, i, CH_STEP_END, ch_now_ms());
        }
    }
    ch_report_stop(r->report, ch_now_ms());
    ch_event(r, "traffic stops");
    for (int i = 0; i < sc->routers; i++) {
        ch_traffic_stop(&r->traffic[i]);
    }
    if (interrupted) {
        fprintf(stderr, "rl-chaos: interrupted at %.1f s: stopping the cluster, no verdict\n",
                (double)(ch_now_ms() - r->t0_ms) / 1000.0);
        rc = 130;
        goto out;
    }
    /* Settling: the routers still up must agree with ZooKeeper within the bound. */
    settle_end = ch_now_ms() + sc->converge_ms;
    while (ch_now_ms() < settle_end && !interrupted) {
        uint64_t d = ch_run_digest(r, &nm);
        int agree = ch_cluster_sample(c, &alive);

        ch_cluster_reap(c);
        if (d != 0 && agree == alive) {
            break;
        }
        ch_sleep_us(100 * 1000);
    }
    if (interrupted) {
        fprintf(stderr, "rl-chaos: interrupted while settling: stopping the cluster, no "
                        "verdict\n");
        rc = 130;
        goto out;
    }
    live_line(c, ch_now_ms() - r->t0_ms, &last_total);
    ch_cluster_print_causes(c);
    ch_cluster_backstop_stats(c);
    rc = 0;
out:
    ch_cluster_stop(c, rc == 0);
    if (rc == 0 && r->report != NULL) {
        /* the routers are stopped: their request logs are complete */
        for (int i = 0; i < sc->routers; i++) {
            int e = ch_report_read_reqlog(r->report, c->router_reqlog[i]);

            if (e != 0) {
                fprintf(stderr, "rl-chaos: %s: %s\n", c->router_reqlog[i], strerror(-e));
            }
        }
        ch_report_backstop(r->report);
    }
    free(c);
    return rc;
}
