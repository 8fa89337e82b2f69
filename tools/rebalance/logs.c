/*
 * logs: the scan of the request logs given on the command line (logs.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "logs.h"
#include "say.h"

int
rb_scan_logs(struct rb_run *r)
{
    uint64_t t0, prev_lines = 0, prev_bad = 0;
    int i, rc;

    rc = rl_logscan_create(&r->scan, r->conf->shards);
    if (rc != 0) {
        return rb_fail("out of memory");
    }
    rl_logscan_set_progress(r->scan, isatty(STDERR_FILENO) && !r->o.quiet);
    rl_logscan_set_stop(r->scan, &*r->stop);
    t0 = rl_clock_mono_ns();
    for (i = 0; i < r->o.nlogs; i++) {
        const struct rl_logscan_result *res;

        rc = rl_logscan_file(r->scan, r->o.logs[i]);
        if (rc == -EINTR && *r->stop) {
            return 0;
        }
        if (rc != 0) {
            return rb_fail("cannot read %s: %s; nothing was written", r->o.logs[i],
                           rc == -ENOMEM ? "out of memory" : strerror(-rc));
        }
        res = rl_logscan_result(r->scan);
        if (i == 0) {
            rb_say(r, "Logs\n");
        }
        rb_say(r, "  %s: %s lines, %s malformed\n",
               strcmp(r->o.logs[i], "-") == 0 ? "(standard input)" : r->o.logs[i],
               RB_COUNT(res->lines - prev_lines), RB_COUNT(res->malformed - prev_bad));
        prev_lines = res->lines;
        prev_bad = res->malformed;
    }
    r->scan_secs = (double)(rl_clock_mono_ns() - t0) / 1e9;
    return 0;
}
