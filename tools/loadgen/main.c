/*
 * rl-bench: a load generator for the wire protocol. Each worker thread runs a libuv loop
 * over its share of the connections, keeps up to --pipeline CHECKs in flight on each, and
 * records every reply's latency in a log-linear histogram (no per-sample storage). Closed
 * loop by default (refill as replies come back); with --rate it is open loop and measures
 * latency from each request's intended send time, so a stalled server cannot hide its
 * stall (coordinated omission). It is built to outrun the server: requests are encoded by
 * hand straight into one output buffer per connection, written with one write per
 * connection per loop turn, and CHECK replies are decoded in place. Not a correctness
 * test: it counts reply codes but does not judge them.
 *
 * This file only runs the modules in order: the options (options.h), the target's address
 * (conn.h), the bytes every request shares (workload.h), the workers (worker.h), the control
 * loop that runs them (control.h), and the summary (report.h). None calls back into it.
 * Exit status: 0 done, 1 cannot connect or a connection failed, 2 a usage error.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "conn.h"
#include "control.h"
#include "loadgen.h"
#include "options.h"
#include "tls.h"
#include "report.h"
#include "worker.h"
#include "workload.h"

int
main(int argc, char **argv)
{
    struct bench *b = calloc(1, sizeof(*b));
    int rc, status = 1;
    bool failed = false, ran = false;

    if (b == NULL) {
        fprintf(stderr, "rl-bench: out of memory\n");
        return 1;
    }
    rc = lg_parse_opts(argc, argv, &b->o);
    if (rc != 0) {
        free(b);
        return rc == 1 ? 0 : 2;
    }
    /* libuv writes with write(2): a server that hangs up must not kill us with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    if (lg_resolve_target(b) != 0) {
        goto out;
    }
    lg_encode_constants(b);
    if (lg_workers_init(b) != 0) {
        fprintf(stderr, "rl-bench: out of memory\n");
        goto out;
    }
    lg_control_run(b, &failed, &ran);
    if (ran) {
        lg_print_summary(b);
    }
    status = failed ? 1 : 0;

out:
    lg_workers_deinit(b);
    rl_tls_ctx_free(b->o.tls);
    free(b);
    return status;
}
