/*
 * report: the sections of rl-rebalance's report and its summary line (report.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "say.h"

#define MOVES_SHOWN 10
#define NAME_COL_MAX 24

void
rb_report_logs(const struct rb_run *r)
{
    const struct rl_logscan_result *res = rl_logscan_result(r->scan);
    uint32_t s, loaded = 0;
    size_t i;

    for (s = 0; s < res->nshards; s++) {
        loaded += res->load[s] > 0;
    }
    rb_say(r,
           "  total: %s lines (%.1f MiB) in %.2f s (%.1fM lines/s): %s requests, %s distinct keys, "
           "%s of %s shards with load\n",
           RB_COUNT(res->lines), (double)res->bytes / (1 << 20), r->scan_secs,
           r->scan_secs > 0 ? (double)res->lines / r->scan_secs / 1e6 : 0.0,
           RB_COUNT(res->requests), RB_COUNT(res->distinct), RB_COUNT(loaded),
           RB_COUNT(res->nshards));
    if (res->unverified > 0) {
        rb_say(r,
               "  %s keys are logged under names that do not hash to them (cut short by the "
               "router?): they count all the same\n",
               RB_COUNT(res->unverified));
    }
    if (res->cached > 0) {
        rb_say(r,
               "  %s lines are LIMITED answers from a router's deny cache: not counted as load "
               "(no node was asked)\n",
               RB_COUNT(res->cached));
    }
    if (res->no_rule > 0) {
        rb_say(r,
               "  %s lines are NO_RULE answers (a service without rules): not counted as load "
               "(the router answers them wherever the shard is)\n",
               RB_COUNT(res->no_rule));
    }
    if (r->conf->log_sample > 1) {
        rb_say(r,
               "  the routers log one request in %u (request_log_sample): counts are of logged "
               "requests\n",
               r->conf->log_sample);
    }
    if (res->malformed == 0) {
        return;
    }
    rb_say(r, "  malformed: %s %s (%.3f%%), skipped:\n", RB_COUNT(res->malformed),
           res->malformed == 1 ? "line" : "lines", rb_share(res->malformed, res->lines));
    for (i = 0; i < RL_LOGSCAN_REASON_COUNT; i++) {
        if (res->reasons[i] > 0) {
            rb_say(r, "    %12s  %s\n", RB_COUNT(res->reasons[i]),
                   rl_logscan_reason_text((enum rl_logscan_reason)i));
        }
    }
    rb_say(r, "    first:");
    for (i = 0; i < res->nbad; i++) {
        const char *src = r->o.logs[res->bad[i].source];

        rb_say(r, "%s %s:%" PRIu64 " (%s)", i > 0 ? "," : "",
               strcmp(src, "-") == 0 ? "(standard input)" : src, res->bad[i].line,
               rl_logscan_reason_text(res->bad[i].reason));
    }
    rb_say(r, "\n");
    if (res->reasons[RL_LOGSCAN_SHARD_MISMATCH] + res->reasons[RL_LOGSCAN_SHARD_RANGE] >
        res->malformed / 2) {
        rb_say(r,
               "  most malformed lines name another shard: were these logs written with "
               "shards = %u?\n",
               res->nshards);
    }
}

static int
name_width(const struct rl_plan *p)
{
    int w = 4;
    size_t i;

    for (i = 0; i < p->nmembers; i++) {
        int l = (int)strlen(p->members[i].name);

        w = l > w ? l : w;
    }
    return w > NAME_COL_MAX ? NAME_COL_MAX : w;
}

void
rb_report_nodes(const struct rb_run *r)
{
    const struct rl_plan *p = &r->plan;
    int w = name_width(p);
    uint64_t max = 0;
    size_t i;

    rb_say(r, "\nNodes (%zu live, %s)\n", p->nmembers, r->members_from);
    rb_say(r, "  %-*s  %15s %6s %7s   %15s %6s %7s\n", w, "node", "before", "share", "shards",
           "after", "share", "shards");
    for (i = 0; i < p->nmembers; i++) {
        rb_say(r, "  %-*.*s  %15s %5.1f%% %7u   %15s %5.1f%% %7u\n", w, NAME_COL_MAX,
               p->members[i].name, RB_COUNT(p->before[i]), rb_share(p->before[i], p->total),
               p->shards_before[i], RB_COUNT(p->after[i]), rb_share(p->after[i], p->total),
               p->shards_after[i]);
        max = p->before[i] > max ? p->before[i] : max;
        max = p->after[i] > max ? p->after[i] : max;
    }
    rb_say(r, "  %-*s  %15s %6s %7s   %15s\n", w, "mean", RB_COUNT(p->total / p->nmembers), "", "",
           RB_COUNT(p->total / p->nmembers));
    rb_say(r,
           "\n  load per node, before and after (bars scaled to the busiest; fair share %.1f%%, "
           "target <= %.1f%%)\n",
           100.0 / (double)p->nmembers, rb_share(p->target, p->total));
    for (i = 0; i < p->nmembers; i++) {
        rb_say(r, "  %-*.*s  before ", w, NAME_COL_MAX, p->members[i].name);
        rb_print_bar(r, p->before[i], max);
        rb_say(r, " %5.1f%%\n", rb_share(p->before[i], p->total));
        rb_say(r, "  %-*s  after  ", w, "");
        rb_print_bar(r, p->after[i], max);
        rb_say(r, " %5.1f%%\n", rb_share(p->after[i], p->total));
    }
}

static int
move_cmp(const void *x, const void *y)
{
    const struct rl_plan_move *a = x, *b = y;

    if (a->load != b->load) {
        return a->load > b->load ? -1 : 1;
    }
    return a->shard < b->shard ? -1 : a->shard > b->shard;
}

void
rb_report_plan(const struct rb_run *r, uint32_t dead_overrides)
{
    const struct rl_plan *p = &r->plan;
    const struct rl_logscan_result *res = rl_logscan_result(r->scan);
    struct rl_plan_move *top;
    uint32_t n, i;

    rb_say(r, "\nPlan (aim: max/mean <= %.2f; budget: %.0f%% of the traffic, %s requests)\n",
           1.0 + r->o.tolerance, 100.0 * r->o.budget, RB_COUNT(p->budget_load));
    rb_say(r, "  max/mean: %.2f -> %.2f\n", rl_plan_ratio(p->before, p->nmembers),
           rl_plan_ratio(p->after, p->nmembers));
    if (p->moved_shards == 0) {
        rb_say(r, "  moved: nothing%s\n",
               rl_plan_ratio(p->before, p->nmembers) <= 1.0 + r->o.tolerance
                   ? " (already within the aim)"
                   : "");
    } else {
        rb_say(r, "  moved: %u shards, %s requests = %.2f%% of the traffic: %s\n", p->moved_shards,
               RB_COUNT(p->moved_load), rb_share(p->moved_load, p->total), rb_move_cost(r));
        top = malloc(p->moved_shards * sizeof(*top));
        if (top != NULL) {
            memcpy(top, p->moves, p->moved_shards * sizeof(*top));
            qsort(top, p->moved_shards, sizeof(*top), move_cmp);
            n = p->moved_shards < MOVES_SHOWN ? p->moved_shards : MOVES_SHOWN;
            rb_say(r, "  largest moves:\n");
            for (i = 0; i < n; i++) {
                rb_say(r, "    shard %-7u %s -> %s  %.2f%% of the traffic, %s %s\n", top[i].shard,
                       p->members[top[i].from].name, p->members[top[i].to].name,
                       rb_share(top[i].load, p->total), RB_COUNT(res->keys[top[i].shard]),
                       res->keys[top[i].shard] == 1 ? "key" : "keys");
            }
            if (p->moved_shards > n) {
                rb_say(r, "    ... and %u more\n", p->moved_shards - n);
            }
            free(top);
        }
    }
    if (p->budget_hit) {
        rb_say(r, "  the budget stopped the plan before the aim: run with a larger --budget to go "
                  "further\n");
    } else if (!p->hot_shard && rl_plan_ratio(p->after, p->nmembers) > 1.0 + r->o.tolerance) {
        rb_say(r, "  the plan stopped above the aim: the busiest node's shards are each too big "
                  "for any other node to take without becoming busier than it is\n");
    }
    rb_say(r, "  overrides: %u in force -> %u in the new assignment",
           rl_plan_overrides(&r->current), rl_plan_overrides(&p->assignment));
    if (dead_overrides > 0) {
        rb_say(r, " (%u naming nodes that are not live are dropped)", dead_overrides);
    }
    rb_say(r, "\n");
}

/* Hot keys (above a node's fair share) and hot shards (above the target). Returns the count
 * of hot keys. */
size_t
rb_report_hot(const struct rb_run *r)
{
    const struct rl_plan *p = &r->plan;
    const struct rl_logscan_result *res = rl_logscan_result(r->scan);
    struct rl_logscan_key *keys = NULL;
    size_t nkeys = 0, i, hot = 0;
    uint32_t s, shown = 0;

    if (rl_logscan_keys_above(r->scan, p->total / p->nmembers, &keys, &nkeys) != 0) {
        fprintf(stderr, "rl-rebalance: out of memory listing hot keys\n");
    }
    rb_say(r, "\nHot keys (one key above a node's fair share, %.1f%% of the traffic)\n",
           100.0 / (double)p->nmembers);
    for (i = 0; i < nkeys; i++) {
        /* Strictly above total / N, without rounding. */
        if (keys[i].count * (uint64_t)p->nmembers <= p->total) {
            continue;
        }
        hot++;
        rb_say(r,
               "  service %.*s user %.*s%s  key %016" PRIx64 "  shard %u  %.1f%% of the traffic, "
               "on %s\n",
               (int)keys[i].slen, keys[i].service, (int)keys[i].ulen, keys[i].user,
               keys[i].verified ? "" : " (as logged: not this key's full name)", keys[i].hash,
               keys[i].shard, rb_share(keys[i].count, p->total),
               p->members[p->owner[keys[i].shard]].name);
    }
    if (hot == 0) {
        rb_say(r, "  none\n");
    } else {
        rb_say(r, "  Such a key's shard alone exceeds a node's fair share, and rebalancing cannot "
                  "split a shard.\n"
                  "  What the operator can do: raise that key's limit (its node does the work for "
                  "it\n"
                  "  anyway), make the service send a finer key (e.g. user + sub-account) so its "
                  "load\n"
                  "  spreads over shards, or give that node more capacity.\n");
    }
    free(keys);
    if (p->hot_shards > 0) {
        rb_say(r, "\nHot shards (one shard above the target, %.1f%% of the traffic)\n",
               rb_share(p->target, p->total));
        for (s = 0; s < p->nshards && shown < 20; s++) {
            if (r->scan != NULL && res->load[s] > p->target) {
                rb_say(r, "  shard %-7u %.1f%% of the traffic, %s %s, on %s\n", s,
                       rb_share(res->load[s], p->total), RB_COUNT(res->keys[s]),
                       res->keys[s] == 1 ? "key" : "keys", p->members[p->owner[s]].name);
                shown++;
            }
        }
        if (p->hot_shards > shown) {
            rb_say(r, "  ... and %u more\n", p->hot_shards - shown);
        }
        if (p->hot_shard) {
            rb_say(r, "  The busiest node after the plan holds such a shard: no move can bring it "
                      "under the target.\n");
        }
    }
    return hot;
}

void
rb_report_summary(const struct rb_run *r, size_t hot, const char *written, int64_t newv)
{
    const struct rl_logscan_result *res = rl_logscan_result(r->scan);

    printf("summary: lines=%" PRIu64 " requests=%" PRIu64 " malformed=%" PRIu64
           " nodes=%zu before=%.3f after=%.3f moved_shards=%u moved_load=%.4f budget_hit=%d "
           "hot_keys=%zu hot_shards=%u overrides=%u scan_seconds=%.3f written=%s",
           res->lines, res->requests, res->malformed, r->plan.nmembers,
           rl_plan_ratio(r->plan.before, r->plan.nmembers),
           rl_plan_ratio(r->plan.after, r->plan.nmembers), r->plan.moved_shards,
           r->plan.total ? (double)r->plan.moved_load / (double)r->plan.total : 0.0,
           r->plan.budget_hit, hot, r->plan.hot_shards, rl_plan_overrides(&r->plan.assignment),
           r->scan_secs, written);
    rb_summary_end(written, newv);
}

void
rb_summary_end(const char *written, int64_t newv)
{
    if (strcmp(written, "zk") == 0) {
        printf(" version=%" PRId64, newv);
    }
    printf("\n");
}

const char *
rb_written_failed(int rc)
{
    return rc == RB_EXIT_CONFLICT ? "conflict" : "error";
}
