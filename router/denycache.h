/*
 * denycache: the router's memory of LIMITED answers (docs/OPERATIONS.md, "The deny cache").
 * A node's LIMITED answer to a CHECK of cost c by user u under rule R says that the same
 * request stays refused for retry_after ms, because everything that can happen to the
 * counters meanwhile (other requests) only consumes more. So the router may answer the same
 * (rule, user, cost) itself until then, counted from when the request was sent, less the
 * node's rounding and a clock-rate allowance (rl_deny_until). It never answers anything but
 * LIMITED and only answers what a node said.
 *
 * The promise: a refusal is remembered only when the node decided it under the router's own
 * rules. Rules change in each process on its own (each watches ZooKeeper, each takes its
 * own SIGHUP), so the router does not take that for granted: it asks. Its caller (shed.c,
 * upstream.h) keeps, per node connection, since when the node is known to hold the rules
 * the router holds (a STATS on that connection whose rules_digest is the router's: the
 * rules probe, sent at connect, when the router's rules change, then every second), and
 * inserts a LIMITED only for a request sent on that connection after that: the node reads
 * a connection's requests in order, so it decided that request after the probe, under the
 * same rules unless it changed them since. A router whose rules change forgets everything
 * (rl_deny_forget_all) and waits for new probe answers; so does a node whose probed digest
 * moves (it changed its rules first): the router forgets everything sent until then. Not
 * covered: a node that changes its rules and back between two probes.
 *
 * A refusal outlives its node (docs/OPERATIONS.md, "What a loss costs"): the router keeps
 * answering it through a lost connection, a dead or restarted owner and the shard's move,
 * since the owner that refused would still refuse until then. The promise: never refuses
 * what the owner that refused would still refuse, and never across a rules change.
 *
 * A fixed table of 4-way sets allocated once (no allocation per request): an insert takes
 * a free or expired way of its set, else evicts the one expiring soonest. The set of a key is
 * drawn with a secret seed of the process, so that no client can choose users whose
 * refusals land in another's set and evict it. Invalidation is
 * lazy and O(1): every entry keeps the time its request was sent, and an entry is valid only
 * if that is after the last invalidation of everything (rules changed) and of its shard
 * (rl_deny_forget_shard: the table supports it; the router no longer calls it); and each
 * entry keeps an epoch, valid only while the caller's is the same (the router passes 0). Not for
 * the routing itself (forward.c) nor for the probe (upstream.c); the data structure is usable
 * without a router (the unit tests).
 */
#ifndef RL_DENYCACHE_H
#define RL_DENYCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define RL_DENY_WAYS 4u
#define RL_DENY_DEFAULT 65536u /* entries when [router] deny_cache = on */
#define RL_DENY_NEVER UINT64_MAX

/* What identifies a request for the cache: the rule (so the service and the endpoint's
 * section), two independent 64-bit hashes of (service, user), the cost, and the shard. */
struct rl_deny_key {
    uint64_t hash; /* the shard map's key hash of (service, user) */
    uint64_t fp;   /* rl_deny_fp of the user */
    uint32_t rule; /* rule id in the rules in force */
    uint32_t cost;
    uint32_t shard;
};

struct rl_deny_entry {
    uint64_t hash, fp;
    uint64_t sent_ns;     /* when the request that the node refused was sent (read) */
    uint64_t until_ns;    /* answered LIMITED while now < until_ns; RL_DENY_NEVER: never allowed */
    uint64_t allow_ns;    /* sent_ns + retry_after: what the answer's retry_after counts to */
    uint64_t reset_ns;    /* sent_ns + reset */
    uint64_t limit, remaining;
    uint64_t node_epoch;  /* the node's epoch (upstream.h) when it answered */
    uint32_t rule, cost, shard;
    bool used;
};

struct rl_deny_stats {
    uint64_t hits;          /* CHECKs answered from the cache */
    uint64_t inserts;       /* LIMITED answers remembered */
    uint64_t evictions;     /* valid entries dropped to make room */
    uint64_t invalidations; /* events that forgot entries: rules, a shard's owner */
    uint64_t entries;       /* capacity */
    /* Kept by the router (shed.c), not by this table: */
    uint64_t unconfirmed; /* LIMITED answers not remembered: the node's rules not known to be
                             the router's when the request was sent */
    uint64_t confirms;    /* rules probe answers: the node holds the router's rules */
    uint64_t mismatches;  /* rules probe answers: it does not (or refused the probe) */
};

struct rl_deny {
    struct rl_deny_entry *e; /* nsets * RL_DENY_WAYS; NULL: off */
    /* beside each entry, 32 bits of its key's fp (never 0) while it is used, else 0: a
     * lookup reads its set's four in one cache line and an entry only when they match */
    uint32_t *tag;
    uint32_t nsets; /* a power of two */
    uint64_t seed;  /* secret: where a key's set is */
    uint64_t *shard_inval;   /* per shard: the last invalidation (ns) */
    uint32_t nshards;
    uint64_t all_inval; /* the last invalidation of everything (ns) */
    struct rl_deny_stats st;
};

/* Allocates room for at least `entries` (rounded up to a power of two of sets; 0: off) over
 * nshards shards. Returns 0 or -ENOMEM. */
int rl_deny_init(struct rl_deny *d, uint32_t entries, uint32_t nshards);
void rl_deny_deinit(struct rl_deny *d);

static inline bool
rl_deny_on(const struct rl_deny *d)
{
    return d->e != NULL;
}

/* The second hash of the user (independent of the shard map's). */
uint64_t rl_deny_fp(const char *user, size_t ulen);

/*
 * Until when a LIMITED answer with retry_after retry_ms (RL_WIRE_RETRY_NEVER: never) to a
 * request sent at sent_ns holds, in the same clock as sent_ns: the node decided at its clock's
 * whole ms N > sent - 1 ms and allows at N + retry, so it refuses at every time before
 * sent + retry - 1 ms; less retry/1000 for the rates of two machines' clocks (NTP holds each
 * within 500 ppm). 0 when nothing can be cached.
 */
uint64_t rl_deny_until(uint64_t sent_ns, uint64_t retry_ms);

/*
 * A LIMITED answer for k, if one holds at now_ns from a node whose epoch is now node_epoch:
 * fills rep (code LIMITED; limit and remaining as the node said, reset and retry_after
 * counted down to now, rounded up) and returns true. An expired or
 * invalidated entry is dropped. now_ns 0: the clock (uv_hrtime) is read when an entry for k
 * is found, so a batch's stale time never stretches an entry past its end.
 */
bool rl_deny_lookup(struct rl_deny *d, const struct rl_deny_key *k, uint64_t now_ns,
                    uint64_t node_epoch, struct rl_wire_check_reply *rep);

/* Remembers the node's reply rep (only LIMITED ones are kept) to k sent at sent_ns, read at
 * now_ns, the node's epoch being node_epoch. The caller has checked that the node decided
 * under the router's rules (above). Returns true when kept. */
bool rl_deny_insert(struct rl_deny *d, const struct rl_deny_key *k, uint64_t sent_ns,
                    uint64_t now_ns, uint64_t node_epoch, const struct rl_wire_check_reply *rep);

/* Forgets everything sent up to now_ns (rules changed). */
void rl_deny_forget_all(struct rl_deny *d, uint64_t now_ns);

/* Forgets what shard's requests sent up to now_ns were answered (its owner changed). */
void rl_deny_forget_shard(struct rl_deny *d, uint32_t shard, uint64_t now_ns);

#endif
