/*
 * store: where rl-rebalance reads and writes assignments and members. The inputs: the live
 * members (a members file, ZooKeeper's membership, or the [node] sections) and the
 * assignment in force (a file, or ZooKeeper's, with its version). The outputs: a file
 * written atomically after its FILE.prev, or ZooKeeper's assignment by compare-and-set over
 * the version read at start (assignment.prev keeps the replaced one), and for --rollback the
 * previous assignment read back from either. The ZooKeeper session is opened on first use
 * and closed by rb_zk_close. Errors are printed here; functions return 0 or the tool's exit
 * status (run.h). Nothing here prints the report (report.h) or decides what to write.
 */
#ifndef RB_STORE_H
#define RB_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "run.h"

/*
 * A members file: one "NAME HOST:PORT" per line, '#' comments, blank lines ignored. text is
 * cut up in place. Returns 0 with *out (malloc'd, NULL when empty) and *n, -ENOMEM, or
 * -EINVAL with err holding "line N: what is wrong".
 */
int rb_parse_members(char *text, struct rl_member **out, size_t *n, char *err, size_t errlen);

/* A ZooKeeper request's negative errno in words, for an operator. */
const char *rb_zk_error(int rc);

/* Starts the ZooKeeper session if it is not started yet; rb_zk_close ends it (and is a no-op
 * when none was started). */
int rb_zk_connect(struct rb_run *r);
void rb_zk_close(struct rb_run *r);

/* Fills r->members, r->nmembers and r->members_from. */
int rb_load_members(struct rb_run *r);

/*
 * Fills r->current, r->cur_text and r->assignment_from: --assignment FILE, else ZooKeeper's,
 * else none. When writing to ZooKeeper, r->version is read in any case: it is the
 * compare-and-set's expectation.
 */
int rb_load_assignment(struct rb_run *r);

/*
 * The previous assignment, for --rollback: FILE.prev with --out FILE (r->current then
 * becomes FILE's own assignment), else ZooKeeper's assignment.prev with its version in *pv
 * (when there is none, but an assignment, the text of one with no overrides and *pv -1).
 * path names where it came from. *text is malloc'd.
 */
int rb_read_prev(struct rb_run *r, char **text, size_t *len, int64_t *pv, char *path,
                 size_t pathlen);

/*
 * Writes text to --out FILE, and first what it replaces to FILE.prev: the old FILE, or when
 * there was none an assignment with no overrides, so a rollback always has something to go
 * back to. *had_old says which.
 */
int rb_write_file(const struct rb_run *r, const char *text, size_t len, bool *had_old);

/* The compare-and-set of text over r->version; RB_EXIT_CONFLICT when it moved. */
int rb_write_zk(struct rb_run *r, const char *text, size_t len, int64_t *new_version);

/* 0 when the assignment in ZooKeeper is still at r->version, else RB_EXIT_CONFLICT. */
int rb_check_version(const struct rb_run *r);

#endif
