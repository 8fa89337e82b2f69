/*
 * level: a rebalance run (level.h): logs, plan, report, write, summary.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "level.h"
#include "logs.h"
#include "report.h"
#include "say.h"
#include "store.h"

static int
member_name_cmp(const void *key, const void *m)
{
    return strcmp(key, ((const struct rl_member *)m)->name);
}

int
rb_rebalance(struct rb_run *r)
{
    const struct rl_logscan_result *res;
    struct rl_plan_input in;
    const char *written = "none";
    char *text = NULL;
    size_t len, hot = 0;
    uint32_t s, dead = 0;
    int64_t newv = -1;
    bool had_old;
    int rc = RB_EXIT_OK;

    rc = rb_scan_logs(r);
    if (rc != 0) {
        return rc;
    }
    if (*r->stop) {
        rb_say(r, "\nInterrupted: nothing was written\n");
        printf("summary: written=interrupted\n");
        return RB_EXIT_OK;
    }
    res = rl_logscan_result(r->scan);
    rb_report_logs(r);
    in = (struct rl_plan_input){.nshards = r->conf->shards,
                                .load = res->load,
                                .members = r->members,
                                .nmembers = r->nmembers,
                                .current = &r->current,
                                .tolerance = r->o.tolerance,
                                .budget = r->o.budget};
    rc = rl_plan_compute(&in, &r->plan);
    if (rc != 0) {
        return rb_fail("cannot compute a plan: %s", rc == -ENOMEM
                                                        ? "out of memory"
                                                        : "a member's name cannot be written in an "
                                                          "assignment");
    }
    r->have_plan = true;
    for (s = 0; s < r->current.nshards; s++) {
        /* plan.members is sorted by name. */
        if (r->current.owner[s][0] != '\0' &&
            bsearch(r->current.owner[s], r->plan.members, r->plan.nmembers,
                    sizeof(*r->plan.members), member_name_cmp) == NULL) {
            dead++;
        }
    }
    rb_report_nodes(r);
    rb_report_plan(r, dead);
    hot = rb_report_hot(r);
    if (rl_assignment_format(&r->plan.assignment, &text, &len) != 0) {
        return rb_fail("cannot format the assignment");
    }
    rb_say(r, "\nResult\n");
    if (res->requests == 0) {
        rb_say(r, "  no valid request in the logs: nothing to plan; nothing was written\n");
    } else if (r->o.dry_run) {
        rb_say(r, "  --dry-run: nothing was written\n");
        written = "dry-run";
    } else if (r->target == RB_TARGET_FILE) {
        rc = rb_write_file(r, text, len, &had_old);
        if (rc == 0) {
            rb_say(r, "  written to %s (%u overrides); what it replaced is in %s.prev%s\n",
                   r->o.out, rl_plan_overrides(&r->plan.assignment), r->o.out,
                   had_old ? "" : " (no overrides: there was no file)");
            rb_say(r, "  roll back: rl-rebalance --config %s --rollback --out %s\n", r->o.config,
                   r->o.out);
            written = "file";
        }
    } else if (r->o.assignment_file == NULL &&
               ((r->cur_text != NULL && r->cur_len == len && memcmp(r->cur_text, text, len) == 0) ||
                (r->version == -1 && rl_plan_overrides(&r->plan.assignment) == 0))) {
        /* Unchanged from what was read: still a conflict if it changed since. */
        rc = rb_check_version(r);
        if (rc == 0) {
            rb_say(r, "  the assignment is unchanged: nothing was written\n");
            written = "unchanged";
        } else {
            written = rb_written_failed(rc);
        }
    } else {
        rc = rb_write_zk(r, text, len, &newv);
        if (rc == 0) {
            char was[24];

            if (r->version == -1) {
                snprintf(was, sizeof(was), "none");
            } else {
                snprintf(was, sizeof(was), "%" PRId64, r->version);
            }
            rb_say(r,
                   "  written to ZooKeeper /ratelimiter/%s/assignment: version %s -> %" PRId64
                   " (%u overrides)\n",
                   r->conf->cluster_name, was, newv, rl_plan_overrides(&r->plan.assignment));
            if (r->version != -1) {
                rb_say(r, "  the replaced assignment is in /ratelimiter/%s/assignment.prev\n",
                       r->conf->cluster_name);
            }
            rb_say(r, "  roll back: rl-rebalance --config %s --rollback\n", r->o.config);
            written = "zk";
        } else {
            written = rb_written_failed(rc);
        }
    }
    free(text);
    rb_report_summary(r, hot, written, newv);
    return rc;
}
