/*
 * plan: the rebalance tool's arithmetic. From the load of every shard, the live members and
 * the current assignment, computes a new owner for every shard that levels the per-node load
 * while moving as little load as possible (a moved shard restarts its counters from zero, so
 * moved load is the cost), within an optional budget, and the assignment that says so.
 * Deterministic: the same inputs give the same plan, byte for byte, whatever the order of the
 * members. Not for reading logs (logscan.h) or talking to ZooKeeper (zkm.h).
 *
 * The method is greedy. Starting from the current owners, while the most loaded node is above
 * target = mean * (1 + tolerance), move one shard from it to the least loaded node: (a) the
 * smallest shard that alone brings it down to the target and still fits under the target on
 * the receiver, unless smaller shards, largest first, would get there moving less load, in
 * which case (b); (b) the largest shard that fits under the target on the receiver; (c) the
 * one that most lowers max(L_hot - x, L_cold + x), if that is below L_hot. A node that no move
 * helps (a hot shard, or the budget) is set aside and levelling goes on among the others. A
 * shard moves at most once; a shard with no load never moves; a move that would take the
 * moved load past the budget is not made. Ties go to the lower shard number and to the name
 * that sorts first (strcmp).
 */
#ifndef RL_PLAN_H
#define RL_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "assignment.h"
#include "shardmap.h"

#define RL_PLAN_DEFAULT_TOLERANCE 0.05

struct rl_plan_input {
    uint32_t nshards;
    const uint64_t *load;            /* load[s]: requests seen for shard s */
    const struct rl_member *members; /* live members, any order, distinct names */
    size_t nmembers;
    const struct rl_assignment *current; /* the assignment in force, or NULL for none; an
                                            override naming a node not live is ignored */
    double tolerance;                    /* aim for max/mean <= 1 + tolerance (>= 0; e.g. 0.05) */
    double budget; /* at most this share of the total load moves (0..1; 1 = no cap) */
};

/* One shard that changes owner, in the order the plan chose them. */
struct rl_plan_move {
    uint32_t shard;
    uint32_t from, to; /* indexes into rl_plan.members */
    uint64_t load;
};

struct rl_plan {
    uint32_t nshards;
    struct rl_member *members; /* the live members, sorted by name (strcmp) */
    size_t nmembers;
    uint32_t *before_owner;  /* current owner per shard (index into members) */
    uint32_t *owner;         /* new owner per shard (index into members) */
    uint32_t *hrw;           /* rendezvous owner per shard among the members, no assignment */
    uint64_t *before;        /* per-member load now */
    uint64_t *after;         /* per-member load after the plan */
    uint32_t *shards_before; /* per-member shards owned now (loaded or not) */
    uint32_t *shards_after;
    uint64_t total;       /* total load */
    uint64_t target;      /* the per-node load aimed at: floor(mean * (1 + tolerance)) */
    uint64_t budget_load; /* the most load the budget lets move */
    uint64_t moved_load;  /* load of the shards that change owner */
    uint32_t moved_shards;
    struct rl_plan_move *moves; /* moved_shards of them */
    bool budget_hit;            /* the budget stopped a move the plan wanted */
    bool hot_shard;      /* the plan ended above the target on a node whose biggest shard alone
                            exceeds the target: no move can help there */
    uint32_t hot_shards; /* shards whose load alone exceeds the target */
    struct rl_assignment assignment; /* the new assignment: an override for every shard whose
                                        new owner differs from its rendezvous owner */
};

/*
 * Computes the plan into *out (which need not be initialised). Returns 0, -EINVAL (no
 * members, a bad member list, a tolerance or budget out of range, or an assignment for
 * another shard count) or -ENOMEM; on error *out holds nothing to free. Free with
 * rl_plan_deinit.
 */
int rl_plan_compute(const struct rl_plan_input *in, struct rl_plan *out);
void rl_plan_deinit(struct rl_plan *p);

/* max/mean of a per-member load vector (0 when empty or no load). */
double rl_plan_ratio(const uint64_t *load, size_t n);

/* Overrides in an assignment (shards with a node named). */
uint32_t rl_plan_overrides(const struct rl_assignment *a);

#endif
