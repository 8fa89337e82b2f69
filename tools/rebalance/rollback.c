/*
 * rollback: rl-rebalance --rollback (rollback.h): reads the previous assignment, reports
 * what going back changes, writes it where it came from, and prints the summary line.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "rollback.h"
#include "say.h"
#include "store.h"

/* Shards whose owner differs between two assignments, with the live members. */
static uint32_t
owners_changed(const struct rb_run *r, const struct rl_assignment *a, const struct rl_assignment *b)
{
    struct rl_shardmap *ma = NULL, *mb = NULL;
    uint32_t s, n = 0;

    if (rl_shardmap_create(&ma, r->conf->shards, r->members, r->nmembers, a) == 0 &&
        rl_shardmap_create(&mb, r->conf->shards, r->members, r->nmembers, b) == 0) {
        for (s = 0; s < r->conf->shards; s++) {
            n += ma->owner[s] != mb->owner[s];
        }
    }
    rl_shardmap_destroy(ma);
    rl_shardmap_destroy(mb);
    return n;
}

int
rb_rollback(struct rb_run *r)
{
    struct rl_assignment prev;
    char err[256], path[4096], *ptext = NULL;
    size_t plen = 0;
    int64_t pv = -1, newv = -1;
    const char *written = "none";
    bool had_old;
    uint32_t changed;
    int rc;

    if (rl_assignment_init(&prev, r->conf->shards) != 0) {
        return rb_fail("out of memory");
    }
    rc = rb_read_prev(r, &ptext, &plen, &pv, path, sizeof(path));
    if (rc != 0) {
        goto out;
    }
    if (plen > 0 && rl_assignment_parse(&prev, ptext, plen, err, sizeof(err)) != 0) {
        rc = rb_fail("%s: %s; not rolled back", path, err);
        goto out;
    }
    changed = owners_changed(r, &r->current, &prev);
    rb_say(r, "Rollback\n");
    if (r->target == RB_TARGET_ZK && pv == -1) {
        /* The first write created the assignment: what it replaced was plain rendezvous
         * hashing, which is what rolling back restores. */
        rb_say(r,
               "  in force: %u overrides (%s)\n  previous: no overrides, the state before the "
               "first rebalance (ZooKeeper holds no %s)\n",
               rl_plan_overrides(&r->current), r->assignment_from, path);
    } else {
        rb_say(r, "  in force: %u overrides (%s)\n  previous: %u overrides (%s)\n",
               rl_plan_overrides(&r->current), r->assignment_from, rl_plan_overrides(&prev), path);
    }
    rb_say(r, "  %u shards change owner with the %zu live members: %s\n", changed, r->nmembers,
           rb_move_cost(r));
    if (r->o.dry_run) {
        rb_say(r, "  --dry-run: nothing was written\n");
        written = "dry-run";
    } else if (r->target == RB_TARGET_FILE) {
        rc = rb_write_file(r, ptext, plen, &had_old);
        if (rc != 0) {
            written = "error";
            goto summary;
        }
        rb_say(r,
               "  rolled back: %s now holds the previous assignment, and %s what it replaced "
               "(roll back again to undo)\n",
               r->o.out, path);
        written = "file";
    } else {
        rc = rb_write_zk(r, ptext, plen, &newv);
        if (rc != 0) {
            written = rb_written_failed(rc);
            goto summary;
        }
        rb_say(r,
               "  rolled back: /ratelimiter/%s/assignment version %" PRId64 " -> %" PRId64
               " holds the previous assignment; assignment.prev holds what it replaced (roll "
               "back again to undo)\n",
               r->conf->cluster_name, r->version, newv);
        written = "zk";
    }
summary:
    printf("summary: rollback=1 changed_shards=%u overrides=%u written=%s", changed,
           rl_plan_overrides(&prev), written);
    rb_summary_end(written, newv);
out:
    free(ptext);
    rl_assignment_deinit(&prev);
    return rc;
}
