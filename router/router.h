/*
 * router: the stateless layer-7 proxy of the cluster (docs/OPERATIONS.md). Accepts clients,
 * hashes each CHECK's (service, user) to a shard and the shard to its owner, forwards it
 * over the owner's pooled connections with a router-chosen id, and relays the reply under
 * the client's id. A request whose owner is down, or that outlives the deadline, is answered
 * by its service's failure policy. Answers PING and STATS itself and fans THROTTLED out to
 * every node. Membership and assignment come from ZooKeeper (or the static [node] list)
 * through rl_router_set_members/_set_assignment, which swap the table without dropping
 * requests in flight; rl_router_set_zookeeper tells it the session's state, which its
 * readiness, STATS and warnings name. Not for the ZooKeeper session itself (zkm.h) or the
 * node connections' mechanics (upstream.h). The implementation is one file per concern
 * (router_int.h lists them).
 */
#ifndef RL_ROUTER_H
#define RL_ROUTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "conf.h"
#include "connlimits.h"
#include "envoycfg.h" /* rl_envoy_config: shared by reference (hold / drop) */
#include "metrics.h"
#include "shardmap.h"

/* Router counters, X(name, text): reported by STATS. */
#define RL_ROUTER_STATS_MAP(X)                                                                     \
    X(checks, "checks")                                                                            \
    X(adjusts, "adjusts")   /* ADJUSTs answered (not decisions) */                                 \
    X(releases, "releases") /* RELEASEs answered (not decisions) */                                \
    X(forwarded, "forwarded")                                                                      \
    X(allowed, "allowed")                                                                          \
    X(limited, "limited")                                                                          \
    X(queued, "queued")                                                                            \
    X(fail_open, "fail_open")                                                                      \
    X(fail_closed, "fail_closed")                                                                  \
    X(no_rule, "no_rule")                                                                          \
    X(deadline_expired, "deadline_expired")                                                        \
    X(owner_down, "owner_down")                                                                    \
    X(errors, "errors")                                                                            \
    X(overloaded, "overloaded")                                                                    \
    X(late_replies, "late_replies")                                                                \
    X(node_waits, "node_waits")           /* waited in the router for room at their node */        \
    X(node_wait_lost, "node_wait_lost")   /* answered by policy: their bytes were written over */  \
    X(not_owner, "not_owner")             /* nodes refused a shard: answered by policy */          \
    X(view_refreshes, "view_refreshes")   /* ZooKeeper re-reads asked for after NOT_OWNER */       \
    X(not_owner_held, "not_owner_held")   /* NOT_OWNER "shard is another's": held as a MOVING */   \
    X(moved, "moved")                     /* ERROR MOVING answers: a shard in a planned move */    \
    X(move_redirected, "move_redirected") /* sent at once to the owner a MOVING named */           \
    X(held_for_move, "held_for_move")     /* backoffs waited before sending to the owner again */  \
    X(move_resent, "move_resent")         /* sent again after such a backoff */                    \
    X(move_expired, "move_expired")     /* answered by policy: handoff_wait past the first send */ \
    X(move_lost, "move_lost")           /* answered by policy: its bytes were not kept */          \
    X(move_lost_conn, "move_lost_conn") /* lost on the connection of a node that left: resent */   \
    X(unauthorized, "unauthorized")     /* requests a client's token does not allow */             \
    X(auth_failures, "auth_failures")   /* connections closed: no AUTH, or a wrong token */        \
    X(table_builds, "table_builds")

struct rl_router_stats {
#define RL_ROUTER_FIELD(n, s) uint64_t n;
    RL_ROUTER_STATS_MAP(RL_ROUTER_FIELD)
#undef RL_ROUTER_FIELD
};

#define RL_ROUTER_REFRESH_MS 500u
#define RL_ROUTER_ZK_NONE (-1) /* static membership: no ZooKeeper configured */
/* A router with ZooKeeper but no session or no members says so at warn this long after it
 * started (or lost them), then every RL_ROUTER_WARN_MS while it lasts. */
#define RL_ROUTER_FIRST_WARN_MS 3000u
#define RL_ROUTER_WARN_MS 10000u

struct rl_front_def;
struct rl_wgroup;

struct rl_router_opts {
    const char *name; /* answered to PING */
    const char *host;
    uint16_t port;
    struct rl_conn_limits limits; /* cluster.conf [clients]; zero: the defaults */
    uint32_t max_pending;     /* requests in flight to nodes; 0: 262144 */
    /* Optional: a node said this router's view of the cluster is stale (NOT_OWNER): read
     * it again. Called at most every RL_ROUTER_REFRESH_MS. */
    void (*on_stale)(void *arg);
    void *arg;
    /* Optional: where the rules in force came from (rules.h), kept up to date by the caller:
     * STATS rules_version, rules_digest, rules_reloads, rules_reload_failures. NULL: version
     * 0 and the digest of conf. */
    const struct rl_rules_status *rules;
    /* Workers (rproc.h): the router takes no socket of its own and serves the connections
     * handed to rl_router_adopt; log is the process's request log (not the router's to close;
     * NULL: conf's request_log is opened by the router itself). */
    bool adopt;
    struct rl_reqlog *log;
    /* The envoyproxy/ratelimit configuration ([cluster] envoy_config) the gRPC front answers
     * from, loaded once by the process and read-only while any router runs; NULL: none. */
    struct rl_envoy_config *envoy; /* the router holds its own reference */
    /* NULL, or TLS on the client listener / the connections to nodes (tls.h; the process's,
     * outliving every router) */
    struct rl_tls_ctx *tls_server;
    struct rl_tls_ctx *tls_client;
    /* Optional: called with arg once a closed router is freed (its last handle closed). */
    void (*on_freed)(void *arg);
    /* Workers (rproc.h): the process's worker group (router_int.h) this router is worker
     * `worker` of; NULL: a router alone. */
    struct rl_wgroup *group;
    uint32_t worker;
    /* The front table (front.h; the process's: rl_fronts), RL_FRONT_KINDS rows, by
     * which rl_front_adopt serves a front's sockets; NULL: no front. */
    const struct rl_front_def *fronts;
};


struct rl_router;

/*
 * Creates a router for conf (which must outlive it) and starts listening. Returns 0 or a
 * negative errno. Membership starts empty: call rl_router_set_members.
 */
int rl_router_create(struct rl_router **out, uv_loop_t *loop, const struct rl_conf *conf,
                     const struct rl_router_opts *opts);

/* Replaces the membership (copied) and rebuilds the table. */
void rl_router_set_members(struct rl_router *r, const struct rl_member *members, size_t n);

/* Replaces the assignment (text format of assignment.h; len 0 = none) and rebuilds the table.
 * A text that does not parse is logged and ignored (the previous table stays). */
void rl_router_set_assignment(struct rl_router *r, const char *text, size_t len,
                              int64_t version);

/*
 * The rules of conf have just been swapped (rl_conf_swap_rules): old holds the rules
 * replaced, which requests still in flight point to. The router takes it and destroys it
 * once no request from before the swap is in flight (within the deadline). New requests use
 * the new rules at once: their failure policy, mode and the clients' permissions.
 */
void rl_router_rules_changed(struct rl_router *r, struct rl_conf *old);

/*
 * The membership comes from ZooKeeper at addr (copied on the first call), whose session is
 * now in state (an enum rl_zkm_state): call once after create with RL_ZKM_CONNECTING, then at
 * each change. From then on /readyz's reason names ZooKeeper when the session is the cause,
 * STATS zk_state and the rl_zookeeper_* metrics follow it, and while there is no session or
 * no member the router warns (RL_ROUTER_FIRST_WARN_MS, then every RL_ROUTER_WARN_MS). Never
 * called: static membership (STATS zk_state -1).
 */
void rl_router_set_zookeeper(struct rl_router *r, const char *addr, int state);

/* The rules status STATS reports (opts.rules), or NULL when none was given: for metrics. */
const struct rl_rules_status *rl_router_rules_status(const struct rl_router *r);

/* A client connection accepted by another thread joins r (opts.adopt): fd is r's from then
 * on. Returns 0, or UV_ECANCELED when r is closing (fd stays the caller's). */
int rl_router_adopt(struct rl_router *r, uv_os_sock_t fd);

/* Reopens the request log (SIGHUP). */
void rl_router_reopen_log(struct rl_router *r);

/* Appends the router's rl_ metric families (docs/OPERATIONS.md, "Metrics") to p. */
void rl_router_metrics(struct rl_router *r, struct rl_prom *p);

/* Whether the router is ready (/readyz): it has a table in which every shard has a reachable
 * owner; if not, why (in why[0..len), naming ZooKeeper and its address when the session is
 * not connected). */
bool rl_router_ready(const struct rl_router *r, char *why, size_t len);

/* Stops listening, answers nothing more, closes every connection and the request log, and
 * frees the router once all its handles are closed (run the loop to finish). */
void rl_router_close(struct rl_router *r);

/*
 * The clean stop's first half (SIGTERM): r takes no new connection and reads no more
 * requests, answers every request already forwarded (by its node, or by the failure policy
 * at its deadline) and writes the answers; then, or once the deadline (at most
 * RL_ROUTER_DRAIN_MAX_MS) plus RL_ROUTER_DRAIN_GRACE_MS has passed, done(arg) runs, which
 * closes r (rl_router_close).
 */
void rl_router_drain(struct rl_router *r, void (*done)(void *arg), void *arg);

/* The envoy configuration in force from now on (held here; the previous one is dropped; the
 * gRPC front's calls in flight keep theirs). cfg may be NULL. */
void rl_router_set_envoy(struct rl_router *r, struct rl_envoy_config *cfg);

#define RL_ROUTER_DRAIN_MAX_MS 2000u
#define RL_ROUTER_DRAIN_GRACE_MS 250u
#define RL_ROUTER_DRAIN_TICK_MS 5u

#endif
