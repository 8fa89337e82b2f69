/*
 * shardmap: which shard a (service, user) belongs to, and which node owns each shard.
 * shard = XXH3_64(service, 0x00, user) mod S; shards are placed on the live members by
 * rendezvous hashing (highest random weight), then overridden shard by shard by the
 * rebalance tool's assignment (assignment.h) when it names a live active member. Every router
 * computes the same table from the same members and assignment, whatever order it learnt
 * them in. docs/SHARDING.md gives the exact hash inputs. Not for the assignment's text
 * format (assignment.h), what a table is rebuilt from (view.h), nor for talking to
 * ZooKeeper (zkm.h) or to nodes.
 */
#ifndef RL_SHARDMAP_H
#define RL_SHARDMAP_H

#include <stddef.h>
#include <stdint.h>

#define RL_SHARDMAP_NAME_MAX 64         /* bytes of a name, with its NUL: names are 1..63 */
#define RL_SHARDMAP_NONE UINT32_MAX     /* no owner: no live member */
#define RL_SHARDMAP_SHARDS_MAX 1048576u /* the most shards a cluster may have (docs/CONFIG.md) */

/*
 * A member's state (ZooKeeper's states/<name>, docs/OPERATIONS.md "Planned moves"): ACTIVE
 * (no state znode; static members always), JOINING (starting: not placed until ready) or
 * LEAVING (stopping cleanly: handing its shards off). Only ACTIVE members own shards.
 */
#define RL_MEMBER_STATE_MAP(X)                                                                     \
    X(ACTIVE, 0, "active")                                                                         \
    X(JOINING, 1, "joining")                                                                       \
    X(LEAVING, 2, "leaving")

enum rl_member_state {
#define RL_MEMBER_STATE_ENUM(n, v, s) RL_MEMBER_##n = v,
    RL_MEMBER_STATE_MAP(RL_MEMBER_STATE_ENUM)
#undef RL_MEMBER_STATE_ENUM
};

/* "active", "joining", "leaving"; "?" for another value. */
const char *rl_member_state_name(uint8_t state);

/*
 * A live member: its name (the znode's) and address "host:port", and which registration it
 * is: the zxid that created its znode (ZooKeeper's czxid; 0 when unknown, as for static
 * members). A node that lost its session and registered again has a new one, although its
 * name and address are the same: it is a new tenure (its counters restarted). Owners are
 * computed from names only, over the ACTIVE members (state): a joining or leaving member
 * stays in the list (routers know its address) but owns no shard, and an assignment naming
 * it falls back to the rendezvous owner among the active ones.
 */
struct rl_member {
    char name[RL_SHARDMAP_NAME_MAX];
    char addr[RL_SHARDMAP_NAME_MAX];
    int64_t since;
    int64_t created_ms; /* when its registration was made, ZooKeeper's clock (ms since the
                           epoch, the znode's ctime); 0: not known (static members) */
    uint8_t state;      /* enum rl_member_state; 0 (zero-initialised): ACTIVE */
};

/*
 * The 64-bit key hash of (service, user), as the router and the rebalance log use it:
 * XXH3_64bits (seed 0) of the service bytes, one 0x00 byte, then the user bytes. Any
 * lengths work; keys within the protocol's bounds (128 + 256 bytes) hash from the stack.
 */
uint64_t rl_shardmap_key_hash(const char *service, size_t slen, const char *user, size_t ulen);

/* The shard of a key hash. */
static inline uint32_t
rl_shardmap_shard(uint64_t key_hash, uint32_t nshards)
{
    return (uint32_t)(key_hash % nshards);
}

struct rl_assignment;

/* The table: owner index (into members) of every shard. Immutable once created. */
struct rl_shardmap {
    uint32_t nshards;
    size_t nmembers;
    struct rl_member *members; /* sorted by name (strcmp) */
    uint32_t *owner;           /* owner[s]: index into members, or RL_SHARDMAP_NONE */
    uint64_t version;          /* caller's: membership/assignment generation it was built from */
};

/*
 * Builds the table from members (any order; copied and sorted) and an optional assignment
 * (NULL for none). Returns 0 with *out set (free with rl_shardmap_destroy, version 0), or
 * -EINVAL when nshards is out of range, a member's name is empty, not NUL-terminated within
 * RL_SHARDMAP_NAME_MAX or given twice, or the assignment has another nshards; or -ENOMEM.
 * With no members every shard's owner is RL_SHARDMAP_NONE.
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

/*
 * The table's digest, for comparing tables across processes: a router's or a node's STATS
 * `table_digest` against another's, or against the table a tool builds (rl_view_build)
 * from its own read of ZooKeeper. XXH3_64bits (seed 0) over nshards as 4 little-endian
 * bytes, then for each shard in order its owner's name bytes and one 0x00 byte (just the
 * 0x00 for RL_SHARDMAP_NONE). It depends only on who owns each shard: the same members in
 * any order with the same assignment give the same digest, a shard with another owner (or
 * a different shard count) another digest; members that own no shard and m->version do
 * not count. O(nshards); a caller that reports it often keeps it (docs/PROTOCOL.md, STATS).
 */
uint64_t rl_shardmap_digest(const struct rl_shardmap *m);

/*
 * The digest as STATS reports it (`table_digest`, routers and nodes alike): STATS values
 * are signed 64-bit, so the digest's top 63 bits, `(int64_t)(digest >> 1)`, never negative.
 * 0 for no table (m NULL); a table's is 0 only with odds of 2^-63. The one conversion:
 * router, node and tools all go through it.
 */
static inline int64_t
rl_shardmap_digest_stat(const struct rl_shardmap *m)
{
    return m == NULL ? 0 : (int64_t)(rl_shardmap_digest(m) >> 1);
}

/* The index of the member called name in m->members, or RL_SHARDMAP_NONE. O(log n). */
uint32_t rl_shardmap_find(const struct rl_shardmap *m, const char *name);

/*
 * The rendezvous owner of shard s among the ACTIVE members (any order), ignoring any
 * assignment: an index into members, or RL_SHARDMAP_NONE when none is active. Agrees with
 * rl_shardmap_create.
 * O(n) hashes of the names: for one shard; the table is the fast path.
 */
uint32_t rl_shardmap_hrw(uint32_t shard, const struct rl_member *members, size_t n);

/*
 * Balance: the most shards any member owns and the mean per active member (max/mean is the
 * figure docs report). Both 0 with no active member.
 */
void rl_shardmap_balance(const struct rl_shardmap *m, uint32_t *max, double *mean);

#endif
