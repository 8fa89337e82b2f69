/*
 * zkadmin: the tools' blocking reads and writes of the cluster's znodes in ZooKeeper
 * (rl-rebalance, rl-regions, rl-cli members, status, rules push and assign): the members and
 * the routers announced, the assignment, the rules, the envoy config and the slices, on an
 * rl_zkm session (zkm.h): the assignment is compare-and-set, the replaced text going to
 * /ratelimiter/<cluster>/assignment.prev in the same transaction (for rollback); the rules
 * znode is written whole; the envoy config znode is compare-and-set. The calls keep zkm's
 * rl_zkm_ prefix. Not for the node's and the router's watches of the same znodes (zkm.h),
 * nor for parsing what they hold (assignment.h, conf.h).
 */
#ifndef RL_ZKADMIN_H
#define RL_ZKADMIN_H

#include <stddef.h>
#include <stdint.h>

#include "zkm.h"

/*
 * The tool's calls, blocking: each waits up to timeout_ms for a session (-ETIMEDOUT when
 * none comes), then makes its requests, each of which the client fails within about the
 * session timeout when the server stops answering. Errors: -ETIMEDOUT, -ECONNRESET (the
 * connection broke mid-request: the outcome of a write is unknown, read it back), -ENOTCONN,
 * -EACCES, -EIO.
 */

/*
 * The members, sorted by name, into a malloc'd array (*out, free it; NULL when none):
 * nodes/ (rl_zkm_read_members, each with its state from states/<name>, as routers see it)
 * or the routers announced (rl_zkm_read_routers; the address in addr).
 */
int rl_zkm_read_members(struct rl_zkm *z, struct rl_member **out, size_t *n, int timeout_ms);
int rl_zkm_read_routers(struct rl_zkm *z, struct rl_member **out, size_t *n, int timeout_ms);

/*
 * Reads the assignment into a malloc'd, NUL-terminated *text of *len bytes (free it) and its
 * version; *text NULL, *len 0 and *version -1 when the znode does not exist.
 */
int rl_zkm_get_assignment(struct rl_zkm *z, char **text, size_t *len, int64_t *version,
                          int timeout_ms);

/*
 * Compare-and-set of the assignment: creates it when expected_version is -1, else replaces it
 * if its version is still expected_version, writing the replaced text to assignment.prev in
 * the same transaction. Returns 0 with *new_version set (if not NULL), -EAGAIN when the
 * assignment changed (or appeared, or went) since expected_version was read, and then
 * nothing was written; -EMSGSIZE when len exceeds RL_ZKM_DATA_MAX; or an error above.
 */
int rl_zkm_set_assignment(struct rl_zkm *z, const char *text, size_t len, int64_t expected_version,
                          int64_t *new_version, int timeout_ms);

/* Reads assignment.prev, as rl_zkm_get_assignment reads the assignment. */
int rl_zkm_get_assignment_prev(struct rl_zkm *z, char **text, size_t *len, int64_t *version,
                               int timeout_ms);

/* Reads the rules znode as rl_zkm_get_assignment reads the assignment. */
int rl_zkm_get_rules(struct rl_zkm *z, char **text, size_t *len, int64_t *version, int timeout_ms);

/*
 * Writes the rules znode (blocking): creates it (version 0) or replaces its data whatever
 * its version, with the cluster's ACL. Returns 0 with *new_version (if not NULL) the znode's
 * data version now, -EMSGSIZE past RL_ZKM_DATA_MAX, -EAGAIN when it was deleted meanwhile,
 * or an error of the tool's calls above. The caller validates the text first: processes
 * refuse rules that do not parse, and keep the ones they have.
 */
int rl_zkm_set_rules(struct rl_zkm *z, const char *text, size_t len, int64_t *new_version,
                     int timeout_ms);

/* Reads the envoy config znode as rl_zkm_get_assignment reads the assignment. */
int rl_zkm_get_envoy(struct rl_zkm *z, char **text, size_t *len, int64_t *version, int timeout_ms);

/*
 * Compare-and-set of the envoy config znode (a bundle, envoycfg.h): creates it when
 * expected_version is -1, else replaces its data if its version is still expected_version.
 * Returns 0 with *new_version set (if not NULL), -EAGAIN when it changed (or appeared, or
 * went) since, and then nothing was written; -EMSGSIZE past RL_ZKM_DATA_MAX; or an error of
 * the tool's calls above. The caller validates the text first.
 */
int rl_zkm_set_envoy(struct rl_zkm *z, const char *text, size_t len, int64_t expected_version,
                     int64_t *new_version, int timeout_ms);

/*
 * Deletes the envoy config znode if its version is still expected_version (routers go back
 * to their own [cluster] envoy_config). 0, -EAGAIN (changed or gone), or an error above.
 */
int rl_zkm_delete_envoy(struct rl_zkm *z, int64_t expected_version, int timeout_ms);

/*
 * The regions' slices (docs/REGIONS.md): /ratelimiter/<cluster>/slices and slices.prev, read
 * and compare-and-set exactly as the assignment and assignment.prev above, except that a
 * non-NULL prev_text is what goes to slices.prev instead of the replaced text (rl-regions'
 * second phase keeps there the text from before its first).
 */
int rl_zkm_get_slices(struct rl_zkm *z, char **text, size_t *len, int64_t *version,
                      int timeout_ms);
int rl_zkm_get_slices_prev(struct rl_zkm *z, char **text, size_t *len, int64_t *version,
                           int timeout_ms);
int rl_zkm_set_slices(struct rl_zkm *z, const char *text, size_t len, int64_t expected_version,
                      int64_t *new_version, const char *prev_text, size_t prev_len,
                      int timeout_ms);

#endif
