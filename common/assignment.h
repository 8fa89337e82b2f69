/*
 * assignment: per-shard overrides by node name, the rebalance tool's output, and their text
 * format (docs/SHARDING.md, "The assignment"): a first line "rl-assignment 1 SHARDS", then
 * one "SHARD NODE" line per override. The table applies it (shardmap.h,
 * rl_shardmap_create). Not for computing owners, nor for reading or writing where the text
 * is kept (zkm.h, zkadmin.h, a file).
 */
#ifndef RL_ASSIGNMENT_H
#define RL_ASSIGNMENT_H

#include <stddef.h>
#include <stdint.h>

#include "shardmap.h"

struct rl_assignment {
    uint32_t nshards;
    char (*owner)[RL_SHARDMAP_NAME_MAX]; /* owner[s]: a node name, or "" for no override */
};

/*
 * Allocates an assignment of nshards (1..RL_SHARDMAP_SHARDS_MAX) with no overrides.
 * Returns 0, -EINVAL for a bad nshards, or -ENOMEM. Free with rl_assignment_deinit.
 */
int rl_assignment_init(struct rl_assignment *a, uint32_t nshards);
void rl_assignment_deinit(struct rl_assignment *a);

/*
 * Sets the override of shard to node, or clears it when node is NULL or "". A node name is
 * 1..63 bytes, none of them a space, a control byte (below 0x21, or 0x7f) or '#', so that
 * the text format can carry it. Returns 0, or -EINVAL for a shard out of range or a bad name.
 */
int rl_assignment_set(struct rl_assignment *a, uint32_t shard, const char *node);

/*
 * Parses the text format (docs/SHARDING.md) into a, which rl_assignment_init sized for the
 * cluster: a first line "rl-assignment 1 SHARDS" whose SHARDS must equal a->nshards, then
 * one "SHARD NODE" line per override; '#' starts a comment; blank lines are ignored.
 * Returns 0 with a holding exactly the file's overrides, or -EINVAL with err set to
 * "line N: what is wrong" (err may be NULL), or -ENOMEM; on error a is unchanged.
 */
int rl_assignment_parse(struct rl_assignment *a, const char *text, size_t len, char *err,
                        size_t errlen);

/*
 * Writes the text format, overrides in shard order, into a malloc'd NUL-terminated string
 * (*out, the caller frees it; *outlen excludes the NUL). The same assignment always gives
 * the same bytes. Returns 0, -EINVAL when an override is not a valid node name (see
 * rl_assignment_set), or -ENOMEM.
 */
int rl_assignment_format(const struct rl_assignment *a, char **out, size_t *outlen);

#endif
