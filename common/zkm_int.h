/*
 * zkm_int: what the three files of the ZooKeeper client share, and nothing else includes:
 * struct rl_zkm, the event queue's events, and the calls each file makes of another.
 * zkm.c owns the session, the queue from the client's threads to the loop and the watched
 * data (assignment, rules); zkmembers.c, above it, the registration, the router's
 * announcement and the member scans, which the session calls through struct zkm_part;
 * zkadmin.c, above both, the tools' blocking reads and writes.
 */
#ifndef RL_ZKM_INT_H
#define RL_ZKM_INT_H

#include <stdatomic.h>
#include <pthread.h>
#include <stdint.h>

#include <zookeeper/zookeeper.h>

#include "auth.h"
#include "zkm.h"

/* "/ratelimiter/" + cluster, then + "/assignment.prev", then + "/" + name. */
#define ZKM_CLUSTER_MAX 64
#define ZKM_ROOT_MAX 80
#define ZKM_DIR_MAX 100
#define ZKM_PATH_MAX 168

enum zkm_kind {
    ZKM_EV_SESSION,
    ZKM_EV_WATCH,
    ZKM_OP_REG_CREATE,
    ZKM_OP_REG_CHECK,
    ZKM_OP_CHILDREN,
    ZKM_OP_MEMBER,
    ZKM_OP_MEMBER_ACL,
    ZKM_OP_ASG_EXISTS,
    ZKM_OP_ASG_ACL,
    ZKM_OP_ASG_GET,
    ZKM_OP_STATES,    /* the children of states/, for their watch only */
    ZKM_OP_STATES_EX, /* states/ itself, when it is missing: a watch for its creation */
    ZKM_OP_STATE,     /* a scan's read of one member's states/<name> */
    ZKM_OP_STATE_SET, /* this node's own states/<name>: created, set or deleted */
};

/* The registration: OFF until rl_zkm_register, then IDLE (to do), BUSY (a request is out),
 * HELD (our session owns the znode) or WAIT (another session owns it). */
enum zkm_reg { ZKM_REG_OFF, ZKM_REG_IDLE, ZKM_REG_BUSY, ZKM_REG_HELD, ZKM_REG_WAIT };

/* A watcher event, or an asynchronous request and then its result. */
struct zkm_ev {
    struct zkm_ev *next;
    struct rl_zkm *z;
    uint64_t gen; /* the session generation it belongs to */
    enum zkm_kind kind;
    int type, state; /* watcher events */
    char *path;      /* watcher events */
    int rc;
    struct Stat stat;
    char *data; /* get results, malloc'd */
    size_t len;
    char **names; /* children results, malloc'd */
    size_t nnames;
    uint64_t seq; /* ZKM_OP_MEMBER: the scan, and its slot */
    size_t slot;
    int acl_ours; /* ZKM_OP_*_ACL: the znode's ACL is the cluster's (zkm_acl_ours) */
};

/* A znode whose data is watched and delivered on every change (by mzxid). */
enum { ZKM_DW_ASG, ZKM_DW_RULES, ZKM_DW_ENVOY, ZKM_DW_SLICES, ZKM_DW_COUNT };
struct zkm_dw {
    const char *path;
    const char *what; /* for the log */
    int on;           /* watched */
    int busy, dirty, known;
    int64_t key; /* mzxid of the data last delivered, -1 when absent */
};

/* A handle's context: which rl_zkm and generation its watcher events belong to. */
struct zkm_sess {
    struct rl_zkm *z;
    uint64_t gen;
};

/* One read of the members: the children's names, then each one's address. */
struct zkm_scan {
    uint64_t seq;
    size_t n, pending;
    int failed;
    struct rl_member *m;
    unsigned char *ok; /* bit 0: address read; bit 1: ACL the cluster's (secure only) */
};

/*
 * What runs on the session besides its watched data: the members (zkmembers.c), plugged in
 * (rl_zkm.part) by the first of its calls that needs them, so the session calls down into
 * it without naming it. reset: for a new session (the registration is to be made again, a
 * scan in flight is dropped); resync: once a session is up (all: after CONNECTED,
 * everything again; else the timer's retries of what is due); handle: a result of its own
 * requests (1), or not one (0); watch: a watcher event on its znodes (1), or not one (0);
 * wakeup: the loop woken (an announcement to retry); close: as the session closes; free:
 * what is left once the handles are closed.
 */
struct zkm_part {
    void (*reset)(struct rl_zkm *z);
    void (*resync)(struct rl_zkm *z, int all);
    int (*handle)(struct rl_zkm *z, struct zkm_ev *ev);
    int (*watch)(struct rl_zkm *z, int type, const char *path);
    void (*wakeup)(struct rl_zkm *z);
    void (*close)(struct rl_zkm *z);
    void (*free)(struct rl_zkm *z);
};

struct rl_zkm {
    uv_loop_t *loop;
    uv_async_t async;
    uv_timer_t timer; /* retries: a failed init, a waiting registration, a failed read */
    int nopen;        /* handles not yet closed */
    int closing;
    struct rl_zkm_cbs cbs;
    void *arg;
    const struct zkm_part *part; /* the members, NULL until plugged in */
    char *hosts;
    int timeout_ms;
    char root[ZKM_ROOT_MAX];
    char nodes_path[ZKM_DIR_MAX];
    char states_path[ZKM_DIR_MAX]; /* states/: joining or leaving members */
    char asg_path[ZKM_DIR_MAX];
    char prev_path[ZKM_DIR_MAX];
    char rules_path[ZKM_DIR_MAX];
    char envoy_path[ZKM_DIR_MAX];
    char slices_path[ZKM_DIR_MAX];      /* regions' slices (docs/REGIONS.md) */
    char slices_prev_path[ZKM_DIR_MAX]; /* what the last write replaced */
    char routers_path[ZKM_DIR_MAX];
    char announce_path[ZKM_PATH_MAX]; /* rl_zkm_announce_router: routers/<name>; "" if none */
    char announce_data[RL_SHARDMAP_NAME_MAX];
    uint64_t announced_gen;     /* the session whose create was sent (0: send it again) */
    atomic_int announce_failed; /* set by the create's completion (ZooKeeper's thread) */
    atomic_int announce_warned; /* a failure was logged; cleared by a success */

    /* rl_zkm_secure: the digest credential and the ACLs made from it; immutable after. */
    int secure;
    char zk_cred[RL_AUTH_ZK_CRED_MAX];
    char zk_id[RL_AUTH_ZK_ID_MAX];
    struct ACL acl_entries[2];
    struct ACL_vector acl; /* the cluster's znodes: the digest may do all, world read */
    struct ACL top_entries[2];
    struct ACL_vector top_acl; /* /ratelimiter, shared by clusters: world may also create */

    /* The session, loop thread only. */
    zhandle_t *zh;
    struct zkm_sess *sess;
    uint64_t gen;
    uint64_t parents_gen; /* the generation that created the parent znodes */
    int connected;
    int connected_before; /* this session was connected once: a CONNECTED is a reconnect */
    int64_t session_id;
    enum rl_zkm_state state; /* as last told to on_state */
    int init_failures;

    /* The registration. */
    enum zkm_reg reg;
    char name[RL_SHARDMAP_NAME_MAX];
    char addr[RL_SHARDMAP_NAME_MAX];
    char reg_path[ZKM_PATH_MAX];
    int32_t reg_version;
    uint64_t wait_since, wait_logged; /* loop time (ms) the wait began and was last logged */

    /* This node's state znode states/<name> (rl_zkm_set_state): the state wanted, and what
     * this session holds (state_gen: the session it was written in, 0: nothing written in
     * this session; state_have: what was written) */
    char state_path[ZKM_PATH_MAX];
    int state_want, state_have, state_busy;
    uint64_t state_gen;

    /* The watch. */
    int watching;
    int mem_busy, mem_dirty, mem_known;
    uint64_t scan_seq;
    struct zkm_scan *scan;
    struct rl_member *members; /* as last delivered */
    size_t nmembers;
    struct zkm_dw dw[ZKM_DW_COUNT]; /* the assignment, the rules, the envoy config, the slices */

    /* Shared with the client's threads, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    struct zkm_ev *head, **tail;
    int lost;        /* an event was dropped for want of memory: read everything again */
    uint64_t lk_gen; /* the generation whose state lk_state is */
    int lk_state;    /* that handle's last session state, for the blocking calls */
};

/* zkm.c: the queue, requests and their completions (run on the client's threads). */
int zkm_errno(int rc);
int zkm_member_cmp(const void *a, const void *b); /* qsort's: by name */
int zkm_name_ok(const char *s, size_t max);
void zkm_retry_later(struct rl_zkm *z, uint64_t ms);
struct zkm_ev *zkm_op(struct rl_zkm *z, enum zkm_kind kind);
void zkm_sent(struct rl_zkm *z, struct zkm_ev *ev, int rc);
struct zkm_ev *zkm_read_begin(struct rl_zkm *z, enum zkm_kind kind, int *busy, int *dirty);
void zkm_ignore_done(int rc, const char *value, const void *data);
void zkm_string_done(int rc, const char *value, const void *data);
void zkm_stat_done(int rc, const struct Stat *stat, const void *data);
void zkm_data_done(int rc, const char *value, int value_len, const struct Stat *stat,
                   const void *data);
void zkm_void_done(int rc, const void *data);
void zkm_strings_done(int rc, const struct String_vector *sv, const void *data);
void zkm_acl_done(int rc, struct ACL_vector *acl, struct Stat *stat, const void *data);

/* zkm.c: the cluster's ACLs and parent znodes. */
struct ACL_vector *zkm_acl(struct rl_zkm *z, int top);
int zkm_acl_ours(const struct rl_zkm *z, const struct ACL_vector *v);
void zkm_parents(struct rl_zkm *z);

/* zkm.c: a new session (the previous handle closed), as the loop and zkadmin.c start one. */
void zkm_new_session(struct rl_zkm *z);

/* zkm.c: reads a watched znode (ZKM_DW_*) again, if it is watched. */
void zkm_dw_refresh(struct rl_zkm *z, int which);

#endif
