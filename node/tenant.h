/*
 * tenant: the node's accounting of inline limits by tenant (docs/PROTOCOL.md, "Inline
 * limits"; docs/ALGORITHMS.md, "Under memory pressure"): for each tenant id that holds an
 * inline limit, a key or log bytes, the limits it holds (for its quota) and its key, log and
 * eviction counts (its share of the key table, as a configured service has one). A record
 * exists exactly while it holds something, so the map is bounded by what the node holds, not
 * by how many tenants ever came. An open-addressing index over a dense array (backward-shift
 * deletion, swap-remove). Not for judging (limiter.c) nor for interning limits (inltab.c).
 */
#ifndef RL_TENANT_H
#define RL_TENANT_H

#include <stddef.h>
#include <stdint.h>

#include "limiter.h"

struct rl_tenant {
    uint32_t id;
    uint32_t limits; /* inline limits it holds (inltab) */
    struct rl_limiter_service_stats st; /* its keys, log bytes, evictions */
};

struct rl_tenants;

int rl_tenants_create(struct rl_tenants **out);
void rl_tenants_destroy(struct rl_tenants *ts);

/* The record of id, or NULL when it holds nothing. Valid until the next rl_tenants_add or
 * rl_tenants_settle. */
struct rl_tenant *rl_tenants_find(struct rl_tenants *ts, uint32_t id);

/* The record of id, added (zeroed) when absent; NULL only out of memory. */
struct rl_tenant *rl_tenants_add(struct rl_tenants *ts, uint32_t id);

/* Drops x's record if it holds nothing now (no limit, key nor log byte). */
void rl_tenants_settle(struct rl_tenants *ts, struct rl_tenant *x);

/* Records held (tenants holding something). */
size_t rl_tenants_count(const struct rl_tenants *ts);

/* Zeroes every record's keys and log bytes, dropping those left holding nothing (the
 * limiter counts them again in a walk of its table). */
void rl_tenants_reset_holdings(struct rl_tenants *ts);

#endif
