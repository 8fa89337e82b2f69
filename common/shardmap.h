/*
 * shardmap: which shard a (service, user) belongs to, and which node owns each shard.
 * shard = XXH3_64(service, user) mod S; shards are placed on the live members by
 * rendezvous hashing (highest random weight), then overridden shard by shard by the
 * rebalance tool's assignment when it names a live member. Every router computes the same
 * table from the same members and assignment, whatever order it learnt them in.
 * Not for talking to ZooKeeper (zkm.h) or to nodes.
 */
#ifndef RL_SHARDMAP_H
#define RL_SHARDMAP_H

#include <stddef.h>
#include <stdint.h>

#define RL_SHARDMAP_NAME_MAX 64
#define RL_SHARDMAP_NONE UINT32_MAX /* no owner: no live member */

/* A live member: its name (the znode's) and address "host:port". */
struct rl_member {
    char name[RL_SHARDMAP_NAME_MAX];
    char addr[RL_SHARDMAP_NAME_MAX];
};

/* The 64-bit key hash of (service, user), as the router and the rebalance log use it. */
uint64_t rl_shardmap_key_hash(const char *service, size_t slen, const char *user, size_t ulen);

/* The shard of a key hash. */
static inline uint32_t
rl_shardmap_shard(uint64_t key_hash, uint32_t nshards)
{
    return (uint32_t)(key_hash % nshards);
}

/* An assignment: per-shard overrides by node name (the rebalance tool's output). */
struct rl_assignment {
    uint32_t nshards;
    char (*owner)[RL_SHARDMAP_NAME_MAX]; /* owner[s]: a node name, or "" for no override */
};

/* Allocates an assignment of nshards with no overrides. Returns 0 or -ENOMEM. */
int rl_assignment_init(struct rl_assignment *a, uint32_t nshards);
void rl_assignment_deinit(struct rl_assignment *a);

/*
 * Parses the text format (docs/OPERATIONS.md): a first line "rl-assignment 1 SHARDS", then
 * one "SHARD NODE" line per override; '#' starts a comment. Returns 0, or -EINVAL with err
 * set to "line N: what is wrong".
 */
int rl_assignment_parse(struct rl_assignment *a, const char *text, size_t len, char *err,
                        size_t errlen);

/* Writes the text format into a malloc'd string (*out, *outlen). Returns 0 or -ENOMEM. */
int rl_assignment_format(const struct rl_assignment *a, char **out, size_t *outlen);

/* The table: owner index (into members) of every shard. */
struct rl_shardmap {
    uint32_t nshards;
    size_t nmembers;
    struct rl_member *members; /* sorted by name */
    uint32_t *owner;           /* owner[s]: index into members, or RL_SHARDMAP_NONE */
    uint64_t version;          /* caller's: membership/assignment generation it was built from */
};

/*
 * Builds the table from members (any order; copied and sorted) and an optional assignment
 * (NULL for none). Returns 0 with *out set, or -ENOMEM.
 */
int rl_shardmap_create(struct rl_shardmap **out, uint32_t nshards, const struct rl_member *members,
                       size_t nmembers, const struct rl_assignment *assignment);
void rl_shardmap_destroy(struct rl_shardmap *m);

/* The owner of shard s: an index into m->members, or RL_SHARDMAP_NONE. */
static inline uint32_t
rl_shardmap_owner(const struct rl_shardmap *m, uint32_t shard)
{
    return m->owner[shard];
}

/* The rendezvous owner of shard s among members, ignoring any assignment. */
uint32_t rl_shardmap_hrw(uint32_t shard, const struct rl_member *members, size_t n);

/* Balance: max and mean shards per member (max/mean is the figure docs report). */
void rl_shardmap_balance(const struct rl_shardmap *m, uint32_t *max, double *mean);

#endif
