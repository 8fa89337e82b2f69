/*
 * counts: the decision counters of the CHECK path, written by whoever answers a CHECK
 * (forward.c, shed.c, and the fronts' own answers): by rule and reply code, the end-to-end
 * latency, and the STATS counters by code. One writer per router (its loop); read by the
 * metrics page and STATS (rmetrics.c). Not for reporting them (rmetrics.c).
 */
#include <stdint.h>

#include "router_int.h"

void
rl_counts_answer(struct rl_router *r, const struct rl_rule *rule, uint32_t code, uint64_t start_ns)
{
    size_t row = rule != NULL ? rule->id : r->conf->nrules;

    /* A request forwarded under rules since replaced (answered within a deadline of the
     * swap) is not counted by service: its rule's id indexes the old rules. */
    if (rule != NULL && !rl_router_rule_current(r, rule)) {
        row = SIZE_MAX;
    }
    if (code < RL_WIRE_CODE_COUNT && row < r->rule_rows) {
        r->rule_codes[row][code]++;
    }
    rl_hist_observe(&r->latency, rl_router_now_ns(r) - start_ns, 1);
    if (code == RL_WIRE_ALLOWED) {
        r->stats.allowed++;
    } else if (code == RL_WIRE_LIMITED) {
        r->stats.limited++;
    } else if (code == RL_WIRE_QUEUED) {
        r->stats.queued++;
    } else if (code == RL_WIRE_FAIL_OPEN) {
        r->stats.fail_open++;
    } else if (code == RL_WIRE_FAIL_CLOSED) {
        r->stats.fail_closed++;
    } else if (code == RL_WIRE_NO_RULE) {
        r->stats.no_rule++;
    }
}
