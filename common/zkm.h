/*
 * zkm: the ZooKeeper session client of node, router and tools (zkm.c: the session, the
 * watches; zkmembers.c: registration, announcement, member scans). A node keeps one
 * ephemeral znode /ratelimiter/<cluster>/nodes/<name> holding "host:port" for as long as it
 * lives, across lost connections and expired sessions; a router watches the members and the
 * assignment znode /ratelimiter/<cluster>/assignment and is told of every change; both may
 * watch the rules znode. The tools' blocking reads and writes (the members, the assignment,
 * the rules) are zkadmin.h's.
 *
 * The ZooKeeper client (zookeeper_mt) runs its callbacks on its own threads; zkm hands every
 * event to the libuv loop through a uv_async_t, so the callbacks below run on the loop thread
 * only, and every function here is called from the loop thread only. Nothing here blocks the
 * loop except the calls documented as blocking (rl_zkm_destroy and the tools' calls).
 *
 * Not for computing owners (shardmap.h) nor for parsing the assignment (assignment.h's text
 * format is stored verbatim).
 */
#ifndef RL_ZKM_H
#define RL_ZKM_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "shardmap.h"

#define RL_ZKM_STATE_MAP(X)                                                                        \
    X(CONNECTED, "connected")   /* a session is up (a new one, or the old one back) */             \
    X(CONNECTING, "connecting") /* the connection is lost; the client retries and the session      \
                                   may survive: keep serving with what was last seen */            \
    X(EXPIRED, "expired")       /* the session is gone (and the node's znode with it); a new       \
                                   session is being made, CONNECTED follows when it is up */

enum rl_zkm_state {
#define RL_ZKM_STATE_ENUM(n, s) RL_ZKM_##n,
    RL_ZKM_STATE_MAP(RL_ZKM_STATE_ENUM)
#undef RL_ZKM_STATE_ENUM
};

/* Longest assignment text accepted, under ZooKeeper's default 1 MiB jute.maxbuffer. */
#define RL_ZKM_DATA_MAX (1000u * 1024)

/*
 * Callbacks, each optional (NULL), each run on the loop thread. Data passed in is valid for
 * the call only. A callback may call rl_zkm_destroy; no callback follows it.
 */
struct rl_zkm_cbs {
    /* The full member list, sorted by name, after every change (and once after watch starts
     * and the first read completes): a member joins, leaves, changes address, registers
     * again (a new znode: `since` differs) or changes state (states/<name>: joining,
     * leaving, or absent: active). A member whose name or address does not fit a
     * struct rl_member is left out, with a warning. */
    void (*on_members)(void *arg, const struct rl_member *members, size_t n);
    /* The assignment text and its znode version, after every change (and once at first
     * read); len 0 and version -1 when the znode does not exist. text is not NUL-terminated. */
    void (*on_assignment)(void *arg, const char *text, size_t len, int64_t version);
    /* The session's state, when it changes; it starts as CONNECTING, which is not told. */
    void (*on_state)(void *arg, enum rl_zkm_state state);
    /* Node side: the znode became held by this session (1) or stopped being (0). */
    void (*on_registered)(void *arg, int registered);
    /* After rl_zkm_watch_rules: the rules znode /ratelimiter/<cluster>/rules, its text and
     * data version, after every change (and once at first read, and after a new session when
     * it changed meanwhile); len 0 and version -1 when it does not exist (or, with a secret,
     * was not written by this cluster). text is not NUL-terminated. */
    void (*on_rules)(void *arg, const char *text, size_t len, int64_t version);
    /* After rl_zkm_watch_envoy: the envoy config znode /ratelimiter/<cluster>/envoy (a bundle
     * of envoyproxy/ratelimit YAML files, envoycfg.h), as on_rules is told the rules. */
    void (*on_envoy)(void *arg, const char *text, size_t len, int64_t version);
    /* After rl_zkm_watch_slices: the regions' slices znode /ratelimiter/<cluster>/slices
     * (docs/REGIONS.md), as on_rules. */
    void (*on_slices)(void *arg, const char *text, size_t len, int64_t version);
};

struct rl_zkm;

/*
 * Starts a session with the ensemble hosts ("h1:2181,h2:2181", optionally with a /chroot) for
 * cluster, whose name must be 1..64 bytes of [A-Za-z0-9._-], not "." or ".." (conf's rule).
 * The connection is made in the background: create succeeds whether or not ZooKeeper is reachable,
 * and the session comes up (and registration and watches happen) whenever it is. session_timeout_ms
 * is asked of the server, which clamps it to [2, 20] of its tickTime. cbs is copied; arg is
 * passed to every callback. Returns 0 with *out set, -EINVAL for a bad argument, -ENOMEM,
 * or a libuv error.
 */
int rl_zkm_create(struct rl_zkm **out, uv_loop_t *loop, const char *hosts,
                  uint32_t session_timeout_ms, const char *cluster, const struct rl_zkm_cbs *cbs,
                  void *arg);

/*
 * Closes the session (deleting the node's znode at once when this session holds it, then
 * closing the session, which removes it too) and closes the libuv handles; the memory is
 * freed in their close callbacks, so run the loop afterwards (uv_loop_close then returns 0).
 * No callback runs after this call. Blocks while the client says goodbye: a few ms with a
 * healthy server; with one that stopped answering, up to about the session timeout plus the
 * client's own close timeouts (4.5 s). NULL is a no-op.
 */
void rl_zkm_destroy(struct rl_zkm *z);

/*
 * Node side: keeps the ephemeral znode nodes/<name> with data addr from now on. name follows
 * the cluster-name rule but has at most 63 bytes; addr has 1..63. On a lost connection nothing is
 * done (the session may survive); on an expired session a new session re-creates the znode. If the
 * znode exists and belongs to another session (a previous process of this node that died),
 * zkm waits for that session to expire, watching the znode and retrying every
 * RL_ZKM_RETRY_MS, and logs it: it never deletes another session's znode, because that
 * process may be alive (a misconfigured twin, or a partitioned one whose session has not
 * expired yet), and two live owners of one name would split the shards. Returns 0, -EINVAL,
 * or -EALREADY when this rl_zkm has registered already.
 */
int rl_zkm_register(struct rl_zkm *z, const char *name, const char *addr);

/* Retry period of a registration that waits for a previous session's znode to go. */
#define RL_ZKM_RETRY_MS 500

/* Whether the znode is known to be held by this rl_zkm's current session. */
int rl_zkm_registered(const struct rl_zkm *z);

/*
 * Node side: this node's state (enum rl_member_state, shardmap.h), kept in the ephemeral
 * znode states/<name> of the registration's session (docs/OPERATIONS.md, "Planned moves"):
 * JOINING or LEAVING creates or sets it (data "joining", "leaving"), ACTIVE deletes it. Set
 * before rl_zkm_register, the state is written before the member znode (a node starting
 * as JOINING is never seen active before it is ready). Kept across new sessions; deleted
 * after the member znode by rl_zkm_destroy. Returns 0 or -EINVAL.
 */
int rl_zkm_set_state(struct rl_zkm *z, int state);
/* Whether the state last set is written in ZooKeeper by the current session. */
int rl_zkm_state_written(const struct rl_zkm *z);

/*
 * Router side: keeps the ephemeral znode routers/<name> (a '/' in name becomes '_') with
 * data addr, created again with every new session, so operators and rl-cli status see the
 * routers that run. Another session holding the same name is logged, never deleted.
 * Returns 0 or -EINVAL.
 */
int rl_zkm_announce_router(struct rl_zkm *z, const char *name, const char *addr);

/*
 * Router side: from now on, watches nodes/ and the assignment and calls on_members and
 * on_assignment on every change, again after every new session. Returns 0 or -EALREADY.
 */
int rl_zkm_watch(struct rl_zkm *z);

/*
 * Node and router side: from now on, watches the rules znode and calls on_rules on every
 * change, again after every new session (docs/OPERATIONS.md, "Changing rules live").
 * Returns 0 or -EALREADY.
 */
int rl_zkm_watch_rules(struct rl_zkm *z);

/* Node side: from now on, watches the slices znode and calls on_slices on every change, as
 * rl_zkm_watch_rules. Returns 0 or -EALREADY. */
int rl_zkm_watch_slices(struct rl_zkm *z);

/*
 * Router side: from now on, watches the envoy config znode and calls on_envoy on every
 * change, again after every new session (docs/ENVOY.md, "Changing the configuration live").
 * Returns 0 or -EALREADY.
 */
int rl_zkm_watch_envoy(struct rl_zkm *z);

/*
 * Closes the cluster's subtree to strangers with the cluster secret (docs/OPERATIONS.md,
 * "ZooKeeper ACLs"): the session authenticates with a digest credential derived from it,
 * every znode this rl_zkm creates gets the ACL "that digest may do all, world may read"
 * (/ratelimiter itself: world may also create, for other clusters), the cluster's parents are
 * given that ACL, and a member znode or assignment whose ACL is not that is ignored with a
 * warning. Call right after rl_zkm_create, before the loop runs; secret NULL is a no-op.
 */
void rl_zkm_secure(struct rl_zkm *z, const char *secret, size_t len);

/*
 * Reads the members and the assignment again now (or as soon as the session is up), as if
 * their watches had fired: for a router a node told that its view is stale. Callbacks follow
 * only for what changed. No-op unless watching.
 */
void rl_zkm_refresh(struct rl_zkm *z);

/* "connected", "connecting" or "expired". */
const char *rl_zkm_state_name(enum rl_zkm_state state);

#endif
