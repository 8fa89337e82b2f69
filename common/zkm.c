/*
 * zkm: ZooKeeper membership on a libuv loop. The client library's threads only copy what
 * they are given into an event and queue it (zkm_push); the loop thread drains the queue in
 * zkm_async_cb and owns every decision: registration, member scans, assignment reads, new
 * sessions. Requests are asynchronous and pipelined (a session's requests are answered in
 * order, so "create the parents, then read the children" needs no waiting in between).
 * Each zhandle has a generation; events of an older one are dropped, so an expired session
 * cannot disturb its successor. Not for the shard map, and not a general ZooKeeper wrapper.
 */
#include "zkm.h"

#include "auth.h"

#include <errno.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zookeeper/zookeeper.h>

#include "log.h"

/* "/ratelimiter/" + cluster, then + "/assignment.prev", then + "/" + name. */
#define ZKM_CLUSTER_MAX 64
#define ZKM_ROOT_MAX 80
#define ZKM_DIR_MAX 100
#define ZKM_PATH_MAX 168
/* How often a registration that is still waiting says so again. */
#define ZKM_WAIT_LOG_MS 10000
/* How often a failed zookeeper_init (a host name that does not resolve) is retried. */
#define ZKM_INIT_RETRY_MS 2000
/* Attempts at reading a znode that keeps changing size between exists and get. */
#define ZKM_GET_TRIES 5

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
enum { ZKM_DW_ASG, ZKM_DW_RULES, ZKM_DW_COUNT };
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

struct rl_zkm {
    uv_loop_t *loop;
    uv_async_t async;
    uv_timer_t timer; /* retries: a failed init, a waiting registration, a failed read */
    int nopen;        /* handles not yet closed */
    int closing;
    struct rl_zkm_cbs cbs;
    void *arg;
    char *hosts;
    int timeout_ms;
    char root[ZKM_ROOT_MAX];
    char nodes_path[ZKM_DIR_MAX];
    char asg_path[ZKM_DIR_MAX];
    char prev_path[ZKM_DIR_MAX];
    char rules_path[ZKM_DIR_MAX];
    char routers_path[ZKM_DIR_MAX];
    char announce_path[ZKM_PATH_MAX]; /* rl_zkm_announce_router: routers/<name>; "" if none */
    char announce_data[RL_SHARDMAP_NAME_MAX];
    uint64_t announced_gen; /* the session whose create was sent (0: send it again) */
    atomic_int announce_failed; /* set by the create's completion (ZooKeeper's thread) */
    atomic_int announce_warned; /* a failure was logged; cleared by a success */

    /* rl_zkm_secure: the digest credential and the ACLs made from it; immutable after. */
    int secure;
    char zk_cred[RL_AUTH_ZK_CRED_MAX];
    char zk_id[RL_AUTH_ZK_ID_MAX];
    struct ACL acl_entries[2];
    struct ACL_vector acl;      /* the cluster's znodes: the digest may do all, world read */
    struct ACL top_entries[2];
    struct ACL_vector top_acl;  /* /ratelimiter, shared by clusters: world may also create */

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

    /* The watch. */
    int watching;
    int mem_busy, mem_dirty, mem_known;
    uint64_t scan_seq;
    struct zkm_scan *scan;
    struct rl_member *members; /* as last delivered */
    size_t nmembers;
    struct zkm_dw dw[ZKM_DW_COUNT]; /* the assignment and the rules */

    /* Shared with the client's threads, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    struct zkm_ev *head, **tail;
    int lost;        /* an event was dropped for want of memory: read everything again */
    uint64_t lk_gen; /* the generation whose state lk_state is */
    int lk_state;    /* that handle's last session state, for the blocking calls */
};

static const char *const zkm_state_names[] = {
#define RL_ZKM_STATE_NAME(n, s) s,
    RL_ZKM_STATE_MAP(RL_ZKM_STATE_NAME)
#undef RL_ZKM_STATE_NAME
};

static void zkm_new_session(struct rl_zkm *z);
static void zkm_set_reg(struct rl_zkm *z, int reg);
static void zkm_reg_step(struct rl_zkm *z);
static void zkm_members_refresh(struct rl_zkm *z);
static void zkm_asg_refresh(struct rl_zkm *z);
static void zkm_dw_refresh(struct rl_zkm *z, int which);

const char *
rl_zkm_state_name(enum rl_zkm_state state)
{
    if ((size_t)state >= sizeof(zkm_state_names) / sizeof(zkm_state_names[0])) {
        return "?";
    }
    return zkm_state_names[state];
}

/* A znode name we create, as conf.c accepts it: [A-Za-z0-9._-]{1,max}, not "." or "..". */
static int
zkm_name_ok(const char *s, size_t max)
{
    size_t n = s != NULL ? strlen(s) : 0;

    if (n == 0 || n > max || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-')) {
            return 0;
        }
    }
    return 1;
}

static int
zkm_errno(int rc)
{
    if (rc == ZOK) {
        return 0;
    }
    if (rc == ZNONODE) {
        return -ENOENT;
    }
    if (rc == ZNODEEXISTS || rc == ZBADVERSION) {
        return -EAGAIN;
    }
    if (rc == ZCONNECTIONLOSS) {
        return -ECONNRESET;
    }
    if (rc == ZOPERATIONTIMEOUT) {
        return -ETIMEDOUT;
    }
    if (rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE || rc == ZCLOSING) {
        return -ENOTCONN;
    }
    if (rc == ZNOAUTH || rc == ZAUTHFAILED) {
        return -EACCES;
    }
    if (rc == ZBADARGUMENTS) {
        return -EINVAL;
    }
    if (rc == ZMARSHALLINGERROR) {
        return -ENOMEM;
    }
    return -EIO;
}

/*
 * The client library's own lines, at its WARN level and above, without its timestamp and
 * thread (log.c has them), at our DEBUG level: it logs every reconnection attempt, some
 * sixty lines a second while the server is down, and the state changes that matter are
 * logged by zkm_on_session.
 */
static void
zkm_zlog(const char *msg)
{
    const char *p = strstr(msg, "ZOO_");

    rl_log_debug("zk client: %s", p != NULL ? p : msg);
}

static void
zkm_ev_free(struct zkm_ev *ev)
{
    free(ev->path);
    free(ev->data);
    for (size_t i = 0; i < ev->nnames; i++) {
        free(ev->names[i]);
    }
    free(ev->names);
    free(ev);
}

/* Queues ev for the loop thread. Any thread. */
static void
zkm_push(struct rl_zkm *z, struct zkm_ev *ev)
{
    ev->next = NULL;
    pthread_mutex_lock(&z->mu);
    *z->tail = ev;
    z->tail = &ev->next;
    pthread_mutex_unlock(&z->mu);
    uv_async_send(&z->async);
}

/* The client's threads. */

static void
zkm_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    struct zkm_sess *s = ctx;
    struct rl_zkm *z = s->z;
    struct zkm_ev *ev;

    (void)zh;
    if (type == ZOO_SESSION_EVENT) {
        pthread_mutex_lock(&z->mu);
        if (s->gen == z->lk_gen) {
            z->lk_state = state;
            pthread_cond_broadcast(&z->cond);
        }
        pthread_mutex_unlock(&z->mu);
    }
    ev = calloc(1, sizeof(*ev));
    if (ev != NULL && path != NULL && path[0] != '\0') {
        ev->path = strdup(path);
        if (ev->path == NULL) {
            free(ev);
            ev = NULL;
        }
    }
    if (ev == NULL) {
        pthread_mutex_lock(&z->mu);
        z->lost = 1;
        pthread_mutex_unlock(&z->mu);
        uv_async_send(&z->async);
        return;
    }
    ev->z = z;
    ev->gen = s->gen;
    ev->kind = type == ZOO_SESSION_EVENT ? ZKM_EV_SESSION : ZKM_EV_WATCH;
    ev->type = type;
    ev->state = state;
    zkm_push(z, ev);
}

static void
zkm_ignore_done(int rc, const char *value, const void *data)
{
    (void)rc;
    (void)value;
    (void)data;
}

static void
zkm_string_done(int rc, const char *value, const void *data)
{
    struct zkm_ev *ev = (struct zkm_ev *)data;

    (void)value;
    ev->rc = rc;
    zkm_push(ev->z, ev);
}

static void
zkm_stat_done(int rc, const struct Stat *stat, const void *data)
{
    struct zkm_ev *ev = (struct zkm_ev *)data;

    ev->rc = rc;
    if (rc == ZOK && stat != NULL) {
        ev->stat = *stat;
    }
    zkm_push(ev->z, ev);
}

static void
zkm_data_done(int rc, const char *value, int value_len, const struct Stat *stat, const void *data)
{
    struct zkm_ev *ev = (struct zkm_ev *)data;

    ev->rc = rc;
    if (rc == ZOK) {
        if (stat != NULL) {
            ev->stat = *stat;
        }
        if (value != NULL && value_len > 0) {
            ev->data = malloc((size_t)value_len + 1);
            if (ev->data == NULL) {
                ev->rc = ZSYSTEMERROR;
            } else {
                memcpy(ev->data, value, (size_t)value_len);
                ev->data[value_len] = '\0';
                ev->len = (size_t)value_len;
            }
        }
    }
    zkm_push(ev->z, ev);
}

static void
zkm_strings_done(int rc, const struct String_vector *sv, const void *data)
{
    struct zkm_ev *ev = (struct zkm_ev *)data;

    ev->rc = rc;
    if (rc == ZOK && sv != NULL && sv->count > 0) {
        ev->names = calloc((size_t)sv->count, sizeof(*ev->names));
        if (ev->names == NULL) {
            ev->rc = ZSYSTEMERROR;
        }
        for (int32_t i = 0; ev->names != NULL && i < sv->count; i++) {
            ev->names[i] = strdup(sv->data[i]);
            if (ev->names[i] == NULL) {
                ev->rc = ZSYSTEMERROR;
                break;
            }
            ev->nnames++;
        }
    }
    zkm_push(ev->z, ev);
}

/* The loop thread. */

static void zkm_retry_later(struct rl_zkm *z, uint64_t ms);
static void zkm_announce(struct rl_zkm *z);

static void
zkm_timer_cb(uv_timer_t *t)
{
    struct rl_zkm *z = t->data;

    if (z->zh == NULL) {
        zkm_new_session(z);
        return;
    }
    if (!z->connected) {
        return; /* the CONNECTED event will redo everything */
    }
    if (z->reg == ZKM_REG_WAIT) {
        zkm_set_reg(z, ZKM_REG_IDLE);
    }
    zkm_reg_step(z);
    zkm_announce(z);
    if (z->mem_dirty) {
        zkm_members_refresh(z);
    }
    for (int k = 0; k < ZKM_DW_COUNT; k++) {
        if (z->dw[k].dirty) {
            zkm_dw_refresh(z, k);
        }
    }
}

static void
zkm_retry_later(struct rl_zkm *z, uint64_t ms)
{
    if (!z->closing && !uv_is_active((uv_handle_t *)&z->timer)) {
        uv_timer_start(&z->timer, zkm_timer_cb, ms, 0);
    }
}

/* A request to be sent: the result comes back through the queue as this event. */
static struct zkm_ev *
zkm_op(struct rl_zkm *z, enum zkm_kind kind)
{
    struct zkm_ev *ev = calloc(1, sizeof(*ev));

    if (ev == NULL) {
        rl_log_error("zk: out of memory; retrying");
        zkm_retry_later(z, RL_ZKM_RETRY_MS);
        return NULL;
    }
    ev->z = z;
    ev->gen = z->gen;
    ev->kind = kind;
    return ev;
}

/* A request the client refused at once gets no completion: queue its failure ourselves, so
 * every result, good or bad, arrives the same way. */
static void
zkm_sent(struct rl_zkm *z, struct zkm_ev *ev, int rc)
{
    if (rc != ZOK) {
        ev->rc = rc;
        zkm_push(z, ev);
    }
}

/* Every change of z->reg goes through here, so on_registered hears when HELD begins or ends. */
static void
zkm_set_reg(struct rl_zkm *z, int reg)
{
    int was = z->reg == ZKM_REG_HELD;

    z->reg = (enum zkm_reg)reg;
    if (!z->closing && was != (reg == ZKM_REG_HELD) && z->cbs.on_registered != NULL) {
        z->cbs.on_registered(z->arg, reg == ZKM_REG_HELD);
    }
}

static void
zkm_set_state(struct rl_zkm *z, enum rl_zkm_state state)
{
    if (z->state == state) {
        return;
    }
    z->state = state;
    if (z->cbs.on_state != NULL) {
        z->cbs.on_state(z->arg, state);
    }
}

/* The ACL of a znode the cluster creates: the top one, or one of its own. */
static struct ACL_vector *
zkm_acl(struct rl_zkm *z, int top)
{
    if (!z->secure) {
        return &ZOO_OPEN_ACL_UNSAFE;
    }
    return top ? &z->top_acl : &z->acl;
}

/*
 * Whether v is an ACL the cluster wrote: it names the cluster's digest with every
 * permission, and gives world at most READ. A znode anyone could write, or that names no
 * digest of this cluster's secret, was not written by this cluster (or was opened since).
 * Called on the client's threads: reads only what rl_zkm_secure set.
 */
static int
zkm_acl_ours(const struct rl_zkm *z, const struct ACL_vector *v)
{
    int ours = 0;

    for (int32_t i = 0; v != NULL && i < v->count; i++) {
        const struct ACL *a = &v->data[i];

        if (a->id.scheme == NULL || a->id.id == NULL) {
            return 0;
        }
        if (strcmp(a->id.scheme, "digest") == 0 && strcmp(a->id.id, z->zk_id) == 0 &&
            (a->perms & ZOO_PERM_ALL) == ZOO_PERM_ALL) {
            ours = 1;
        } else if (strcmp(a->id.scheme, "digest") != 0 && (a->perms & ~ZOO_PERM_READ) != 0) {
            return 0; /* world, ip, ...: someone else may write it */
        }
    }
    return ours;
}

static void
zkm_acl_done(int rc, struct ACL_vector *acl, struct Stat *stat, const void *data)
{
    struct zkm_ev *ev = (struct zkm_ev *)data;

    ev->rc = rc;
    if (rc == ZOK) {
        ev->acl_ours = zkm_acl_ours(ev->z, acl);
        if (stat != NULL) {
            ev->stat = *stat;
        }
    }
    zkm_push(ev->z, ev);
}

static void
zkm_close_done(int rc, const void *data)
{
    if (rc != ZOK && rc != ZNONODE && rc != ZCLOSING) {
        rl_log_warn("zk: cannot close %s to strangers (set its ACL): %s", (const char *)data,
                    zerror(rc));
    }
}

/*
 * Creates /ratelimiter, its cluster and nodes/ once per session; existing ones are fine.
 * With a secret, the cluster's two are also given its ACL, which closes a subtree made
 * before the secret was set (an open ACL lets anyone set it; a stranger's lets nobody, and
 * that is said at warn).
 */
static void
zkm_parents(struct rl_zkm *z)
{
    const char *paths[] = {"/ratelimiter", z->root, z->nodes_path};

    if (z->parents_gen == z->gen) {
        return;
    }
    z->parents_gen = z->gen;
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        zoo_acreate(z->zh, paths[i], "", 0, zkm_acl(z, i == 0), ZOO_PERSISTENT, zkm_ignore_done,
                    NULL);
        if (z->secure && i > 0) {
            zoo_aset_acl(z->zh, paths[i], -1, &z->acl, zkm_close_done, paths[i]);
        }
    }
}

/* Registration. */

static void
zkm_reg_check(struct rl_zkm *z)
{
    struct zkm_ev *ev = zkm_op(z, ZKM_OP_REG_CHECK);

    if (ev == NULL) {
        if (z->reg == ZKM_REG_BUSY) {
            zkm_set_reg(z, ZKM_REG_IDLE);
        }
        return;
    }
    zkm_sent(z, ev, zoo_aexists(z->zh, z->reg_path, 1, zkm_stat_done, ev));
}

static void
zkm_reg_step(struct rl_zkm *z)
{
    struct zkm_ev *ev;

    if (z->reg != ZKM_REG_IDLE || !z->connected || z->zh == NULL) {
        return;
    }
    ev = zkm_op(z, ZKM_OP_REG_CREATE);
    if (ev == NULL) {
        return;
    }
    zkm_parents(z);
    zkm_set_reg(z, ZKM_REG_BUSY);
    zkm_sent(z, ev,
             zoo_acreate(z->zh, z->reg_path, z->addr, (int)strlen(z->addr), zkm_acl(z, 0),
                         ZOO_EPHEMERAL, zkm_string_done, ev));
}

static void
zkm_reg_created(struct rl_zkm *z, int rc)
{
    if (z->reg != ZKM_REG_BUSY) {
        return;
    }
    if (rc == ZOK) {
        rl_log_info("zk: registered nodes/%s = %s (session 0x%" PRIx64 ")", z->name, z->addr,
                    (uint64_t)z->session_id);
        zkm_set_reg(z, ZKM_REG_HELD);
        z->reg_version = 0;
        z->wait_since = 0;
        zkm_reg_check(z); /* to watch it: someone deleting it by hand is noticed */
    } else if (rc == ZNODEEXISTS) {
        zkm_reg_check(z); /* whose is it? */
    } else {
        if (rc == ZNONODE) {
            z->parents_gen = 0; /* a parent went (deleted by hand?) */
        }
        if (rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT) {
            rl_log_warn("zk: cannot create nodes/%s: %s; retrying", z->name, zerror(rc));
        }
        zkm_set_reg(z, ZKM_REG_IDLE);
        zkm_retry_later(z, RL_ZKM_RETRY_MS);
    }
}

static void
zkm_reg_checked(struct rl_zkm *z, int rc, const struct Stat *st)
{
    uint64_t now = uv_now(z->loop);

    if (z->reg != ZKM_REG_BUSY && z->reg != ZKM_REG_HELD) {
        return;
    }
    if (rc == ZNONODE) {
        if (z->reg == ZKM_REG_HELD) {
            rl_log_warn("zk: nodes/%s was deleted under us; creating it again", z->name);
        }
        zkm_set_reg(z, ZKM_REG_IDLE);
        zkm_reg_step(z);
        return;
    }
    if (rc != ZOK) {
        /* A HELD znode stays ours whatever this read did; the watch comes back with the
         * reconnection (the CONNECTED event checks again). */
        if (z->reg == ZKM_REG_BUSY) {
            zkm_set_reg(z, ZKM_REG_IDLE);
            zkm_retry_later(z, RL_ZKM_RETRY_MS);
        }
        return;
    }
    if (st->ephemeralOwner == z->session_id) {
        if (z->reg != ZKM_REG_HELD) {
            rl_log_info("zk: nodes/%s is already this session's (0x%" PRIx64 ")", z->name,
                        (uint64_t)z->session_id);
        }
        zkm_set_reg(z, ZKM_REG_HELD);
        z->reg_version = st->version;
        z->wait_since = 0;
        return;
    }
    /*
     * Another session's. Most likely this node's previous process, dead but not yet expired:
     * wait for the server to expire it (the exists watch fires on the deletion; the timer is
     * the fallback). Deleting it would be quicker, but would also evict a live twin.
     */
    if (z->wait_since == 0) {
        z->wait_since = now;
        z->wait_logged = now;
        if (st->ephemeralOwner == 0) {
            rl_log_error("zk: nodes/%s exists as a persistent znode, which never expires: "
                         "delete it by hand; waiting",
                         z->name);
        } else {
            rl_log_warn("zk: nodes/%s is held by session 0x%" PRIx64 ", not ours (0x%" PRIx64
                        "): a previous process? waiting for that session to expire",
                        z->name, (uint64_t)st->ephemeralOwner, (uint64_t)z->session_id);
        }
    } else if (now - z->wait_logged >= ZKM_WAIT_LOG_MS) {
        z->wait_logged = now;
        rl_log_warn("zk: still waiting for nodes/%s, held by session 0x%" PRIx64 " (%" PRIu64 " s)",
                    z->name, (uint64_t)st->ephemeralOwner, (now - z->wait_since) / 1000);
    }
    zkm_set_reg(z, ZKM_REG_WAIT);
    zkm_retry_later(z, RL_ZKM_RETRY_MS);
}

/* Members. */

static void
zkm_scan_free(struct zkm_scan *s)
{
    if (s != NULL) {
        free(s->m);
        free(s->ok);
        free(s);
    }
}

static int
zkm_member_cmp(const void *a, const void *b)
{
    return strcmp(((const struct rl_member *)a)->name, ((const struct rl_member *)b)->name);
}

static int
zkm_members_same(const struct rl_member *a, size_t na, const struct rl_member *b, size_t nb)
{
    if (na != nb) {
        return 0;
    }
    for (size_t i = 0; i < na; i++) {
        if (strcmp(a[i].name, b[i].name) != 0 || strcmp(a[i].addr, b[i].addr) != 0 ||
            a[i].since != b[i].since) {
            return 0;
        }
    }
    return 1;
}

static void
zkm_members_refresh(struct rl_zkm *z)
{
    struct zkm_ev *ev;

    if (!z->watching) {
        return;
    }
    if (z->mem_busy || !z->connected || z->zh == NULL) {
        z->mem_dirty = 1;
        return;
    }
    ev = zkm_op(z, ZKM_OP_CHILDREN);
    if (ev == NULL) {
        z->mem_dirty = 1;
        return;
    }
    z->mem_busy = 1;
    z->mem_dirty = 0;
    zkm_parents(z);
    zkm_sent(z, ev, zoo_aget_children(z->zh, z->nodes_path, 1, zkm_strings_done, ev));
}

static void
zkm_scan_finish(struct rl_zkm *z)
{
    struct zkm_scan *s = z->scan;
    size_t n = 0;

    z->scan = NULL;
    z->mem_busy = 0;
    if (s->failed) {
        z->mem_dirty = 1;
        zkm_retry_later(z, RL_ZKM_RETRY_MS);
        zkm_scan_free(s);
        return;
    }
    for (size_t i = 0; i < s->n; i++) {
        if (s->ok[i] == (z->secure ? 3 : 1)) {
            s->m[n++] = s->m[i];
        }
    }
    qsort(s->m, n, sizeof(*s->m), zkm_member_cmp);
    if (!z->mem_known || !zkm_members_same(s->m, n, z->members, z->nmembers)) {
        free(z->members);
        z->members = s->m;
        z->nmembers = n;
        z->mem_known = 1;
        s->m = NULL;
        rl_log_debug("zk: %zu members", n);
        if (z->cbs.on_members != NULL) {
            z->cbs.on_members(z->arg, z->members, z->nmembers);
        }
    }
    zkm_scan_free(s);
    if (!z->closing && z->mem_dirty) {
        zkm_members_refresh(z);
    }
}

static void
zkm_children_done(struct rl_zkm *z, struct zkm_ev *ev)
{
    struct zkm_scan *s;
    char path[ZKM_PATH_MAX];

    if (ev->rc != ZOK) {
        z->mem_busy = 0;
        z->mem_dirty = 1;
        if (ev->rc == ZNONODE) {
            z->parents_gen = 0;
        }
        zkm_retry_later(z, RL_ZKM_RETRY_MS);
        return;
    }
    s = calloc(1, sizeof(*s));
    if (s != NULL) {
        s->m = calloc(ev->nnames + 1, sizeof(*s->m));
        s->ok = calloc(ev->nnames + 1, 1);
    }
    if (s == NULL || s->m == NULL || s->ok == NULL) {
        zkm_scan_free(s);
        rl_log_error("zk: out of memory reading members; retrying");
        z->mem_busy = 0;
        z->mem_dirty = 1;
        zkm_retry_later(z, RL_ZKM_RETRY_MS);
        return;
    }
    zkm_scan_free(z->scan);
    z->scan = s;
    s->seq = ++z->scan_seq;
    s->n = ev->nnames;
    /* One more pending than requests while sending, so no result can finish the scan early. */
    s->pending = 1;
    for (size_t i = 0; i < ev->nnames; i++) {
        struct zkm_ev *op;

        if (strlen(ev->names[i]) >= RL_SHARDMAP_NAME_MAX) {
            rl_log_warn("zk: member name nodes/%.40s... is too long; ignored", ev->names[i]);
            continue;
        }
        snprintf(s->m[i].name, sizeof(s->m[i].name), "%s", ev->names[i]);
        op = zkm_op(z, ZKM_OP_MEMBER);
        if (op == NULL) {
            s->failed = 1;
            break;
        }
        op->seq = s->seq;
        op->slot = i;
        s->pending++;
        snprintf(path, sizeof(path), "%s/%s", z->nodes_path, ev->names[i]);
        zkm_sent(z, op, zoo_aget(z->zh, path, 0, zkm_data_done, op));
        if (z->secure) {
            op = zkm_op(z, ZKM_OP_MEMBER_ACL);
            if (op == NULL) {
                s->failed = 1;
                break;
            }
            op->seq = s->seq;
            op->slot = i;
            s->pending++;
            zkm_sent(z, op, zoo_aget_acl(z->zh, path, zkm_acl_done, op));
        }
    }
    if (--s->pending == 0) {
        zkm_scan_finish(z);
    }
}

static void
zkm_member_done(struct rl_zkm *z, struct zkm_ev *ev)
{
    struct zkm_scan *s = z->scan;

    if (s == NULL || ev->seq != s->seq) {
        return;
    }
    if (ev->rc == ZOK && ev->kind == ZKM_OP_MEMBER_ACL) {
        if (ev->acl_ours) {
            s->ok[ev->slot] |= 2;
        } else {
            rl_log_warn("zk: nodes/%s was not written by this cluster (its ACL is not the "
                        "cluster secret's): ignored, given no shards",
                        s->m[ev->slot].name);
        }
    } else if (ev->rc == ZOK) {
        if (ev->len == 0 || ev->len >= RL_SHARDMAP_NAME_MAX || memchr(ev->data, 0, ev->len)) {
            rl_log_warn("zk: member nodes/%s has a bad address (%zu bytes); ignored",
                        s->m[ev->slot].name, ev->len);
        } else {
            memcpy(s->m[ev->slot].addr, ev->data, ev->len);
            s->m[ev->slot].since = ev->stat.czxid;
            s->ok[ev->slot] |= 1;
        }
    } else if (ev->rc != ZNONODE) {
        s->failed = 1; /* ZNONODE: gone since the listing; its child event follows */
    }
    if (--s->pending == 0) {
        zkm_scan_finish(z);
    }
}

/* Watched data: the assignment (ZKM_DW_ASG), and the rules (ZKM_DW_RULES). The same steps
 * for both: exists (leaves a watch), then with a secret whose it is, then get. */

static void
zkm_dw_refresh(struct rl_zkm *z, int which)
{
    struct zkm_dw *w = &z->dw[which];
    struct zkm_ev *ev;

    if (!w->on) {
        return;
    }
    if (w->busy || !z->connected || z->zh == NULL) {
        w->dirty = 1;
        return;
    }
    ev = zkm_op(z, ZKM_OP_ASG_EXISTS);
    if (ev == NULL) {
        w->dirty = 1;
        return;
    }
    ev->slot = (size_t)which;
    w->busy = 1;
    w->dirty = 0;
    zkm_parents(z);
    /* exists leaves a watch whether or not the znode is there; get only when it is. */
    zkm_sent(z, ev, zoo_aexists(z->zh, w->path, 1, zkm_stat_done, ev));
}

static void
zkm_asg_refresh(struct rl_zkm *z)
{
    zkm_dw_refresh(z, ZKM_DW_ASG);
}

static void
zkm_dw_deliver(struct rl_zkm *z, int which, const char *text, size_t len, int64_t version,
               int64_t key)
{
    struct zkm_dw *w = &z->dw[which];
    void (*cb)(void *, const char *, size_t, int64_t) =
        which == ZKM_DW_ASG ? z->cbs.on_assignment : z->cbs.on_rules;

    if (w->known && w->key == key) {
        return;
    }
    w->known = 1;
    w->key = key;
    rl_log_debug("zk: %s version %" PRId64 ", %zu bytes", w->what, version, len);
    if (cb != NULL) {
        cb(z->arg, text != NULL ? text : "", len, version);
    }
}

static void
zkm_asg_done(struct rl_zkm *z, struct zkm_ev *ev)
{
    int which = (int)ev->slot;
    struct zkm_dw *w = &z->dw[which];
    struct zkm_ev *op;

    if (ev->kind == ZKM_OP_ASG_EXISTS && ev->rc == ZOK && z->secure) {
        /* Whose it is first: a stranger's assignment (or rules) is never read. */
        op = zkm_op(z, ZKM_OP_ASG_ACL);
        if (op == NULL) {
            w->busy = 0;
            w->dirty = 1;
            return;
        }
        op->slot = (size_t)which;
        zkm_sent(z, op, zoo_aget_acl(z->zh, w->path, zkm_acl_done, op));
        return;
    }
    if (ev->kind == ZKM_OP_ASG_ACL && ev->rc == ZOK && !ev->acl_ours) {
        w->busy = 0;
        if (!w->known || w->key != ev->stat.mzxid) {
            rl_log_warn("zk: the %s was not written by this cluster (its ACL is not the "
                        "cluster secret's): ignored, as if there were none",
                        w->what);
        }
        zkm_dw_deliver(z, which, NULL, 0, -1, ev->stat.mzxid);
        if (!z->closing && w->dirty) {
            zkm_dw_refresh(z, which);
        }
        return;
    }
    if ((ev->kind == ZKM_OP_ASG_EXISTS || ev->kind == ZKM_OP_ASG_ACL) && ev->rc == ZOK) {
        op = zkm_op(z, ZKM_OP_ASG_GET);
        if (op == NULL) {
            w->busy = 0;
            w->dirty = 1;
            return;
        }
        op->slot = (size_t)which;
        zkm_sent(z, op, zoo_aget(z->zh, w->path, 1, zkm_data_done, op));
        return;
    }
    w->busy = 0;
    if (ev->rc == ZNONODE) {
        zkm_dw_deliver(z, which, NULL, 0, -1, -1);
    } else if (ev->rc == ZOK) {
        zkm_dw_deliver(z, which, ev->data, ev->len, ev->stat.version, ev->stat.mzxid);
    } else {
        w->dirty = 1;
        zkm_retry_later(z, RL_ZKM_RETRY_MS);
        return;
    }
    if (!z->closing && w->dirty) {
        zkm_dw_refresh(z, which);
    }
}

/* Sessions. */

/*
 * The create's completion, on ZooKeeper's thread: a failure (the name still held by a
 * session of a router that died, or a twin; a connection lost mid-create) asks the loop,
 * through the flag and the async, to send it again a little later. Said once a streak.
 */
static void
zkm_announce_done(int rc, const char *value, const void *data)
{
    struct rl_zkm *z = (struct rl_zkm *)data;

    (void)value;
    if (rc == ZOK) {
        atomic_store(&z->announce_warned, 0);
        return;
    }
    if (rc == ZCLOSING || rc == ZSESSIONEXPIRED) {
        return; /* a new session announces again */
    }
    if (atomic_exchange(&z->announce_warned, 1) == 0) {
        if (rc == ZNODEEXISTS) {
            rl_log_warn("zk: %s is held by another session (this router's previous process, "
                        "until its session expires, or a router with the same --name); "
                        "retrying every %d ms",
                        z->announce_path, RL_ZKM_RETRY_MS);
        } else {
            rl_log_warn("zk: cannot announce %s: %s; retrying every %d ms", z->announce_path,
                        zerror(rc), RL_ZKM_RETRY_MS);
        }
    }
    atomic_store(&z->announce_failed, 1);
    uv_async_send(&z->async);
}

/* Router side: the ephemeral routers/<name>, once per session (rl_zkm_announce_router). */
static void
zkm_announce(struct rl_zkm *z)
{
    if (z->announce_path[0] == '\0' || z->announced_gen == z->gen) {
        return;
    }
    z->announced_gen = z->gen;
    zkm_parents(z);
    zoo_acreate(z->zh, z->routers_path, "", 0, zkm_acl(z, 0), ZOO_PERSISTENT, zkm_ignore_done,
                NULL);
    zoo_acreate(z->zh, z->announce_path, z->announce_data, (int)strlen(z->announce_data),
                zkm_acl(z, 0), ZOO_EPHEMERAL, zkm_announce_done, z);
}

static void
zkm_resync(struct rl_zkm *z)
{
    zkm_announce(z);
    if (z->reg == ZKM_REG_WAIT) {
        zkm_set_reg(z, ZKM_REG_IDLE);
    }
    if (z->reg == ZKM_REG_IDLE) {
        zkm_reg_step(z);
    } else if (z->reg == ZKM_REG_HELD) {
        zkm_reg_check(z);
    }
    if (z->watching) {
        zkm_members_refresh(z);
    }
    for (int k = 0; k < ZKM_DW_COUNT; k++) {
        zkm_dw_refresh(z, k);
    }
}

/* Closes the handle: its threads are joined when this returns, so none of its callbacks can
 * run afterwards, and a new generation makes stale whatever it queued. */
static void
zkm_close_handle(struct rl_zkm *z)
{
    zhandle_t *zh = z->zh;

    if (zh == NULL) {
        return;
    }
    z->zh = NULL;
    z->gen++;
    z->connected = 0;
    pthread_mutex_lock(&z->mu);
    z->lk_gen = 0;
    pthread_mutex_unlock(&z->mu);
    zookeeper_close(zh);
    free(z->sess);
    z->sess = NULL;
}

static void
zkm_new_session(struct rl_zkm *z)
{
    struct zkm_sess *s;
    zhandle_t *zh;

    zkm_close_handle(z);
    z->gen++;
    z->connected = 0;
    z->connected_before = 0;
    z->session_id = 0;
    if (z->reg != ZKM_REG_OFF) {
        zkm_set_reg(z, ZKM_REG_IDLE);
    }
    z->wait_since = 0;
    zkm_scan_free(z->scan);
    z->scan = NULL;
    z->mem_busy = 0;
    z->mem_dirty = z->watching;
    for (int k = 0; k < ZKM_DW_COUNT; k++) {
        z->dw[k].busy = 0;
        z->dw[k].dirty = z->dw[k].on;
    }

    s = malloc(sizeof(*s));
    if (s == NULL) {
        rl_log_error("zk: out of memory starting a session; retrying");
        zkm_retry_later(z, ZKM_INIT_RETRY_MS);
        return;
    }
    s->z = z;
    s->gen = z->gen;
    pthread_mutex_lock(&z->mu);
    z->lk_gen = z->gen;
    z->lk_state = ZOO_CONNECTING_STATE;
    pthread_mutex_unlock(&z->mu);
    zh = zookeeper_init2(z->hosts, zkm_watcher, z->timeout_ms, NULL, s, 0, zkm_zlog);
    if (zh == NULL) {
        int err = errno;

        free(s);
        /* A name that does not resolve, most likely: it may resolve later. */
        if (z->init_failures++ % 30 == 0) {
            rl_log_error("zk: cannot start a session with %s: %s; retrying every %d ms", z->hosts,
                         strerror(err), ZKM_INIT_RETRY_MS);
        }
        zkm_retry_later(z, ZKM_INIT_RETRY_MS);
        return;
    }
    z->init_failures = 0;
    z->zh = zh;
    z->sess = s;
    if (z->secure) {
        /* Sent before any request of the session, and again by the client on reconnects. */
        zoo_add_auth(zh, "digest", z->zk_cred, (int)strlen(z->zk_cred), NULL, NULL);
    }
}

static void
zkm_on_session(struct rl_zkm *z, int state)
{
    if (state == ZOO_CONNECTED_STATE) {
        const clientid_t *id = zoo_client_id(z->zh);

        z->session_id = id->client_id;
        if (z->connected_before) {
            rl_log_info("zk: reconnected; session 0x%" PRIx64 " survived", (uint64_t)z->session_id);
        } else {
            rl_log_info("zk: connected to %s, session 0x%" PRIx64 ", timeout %d ms", z->hosts,
                        (uint64_t)z->session_id, zoo_recv_timeout(z->zh));
        }
        z->connected = 1;
        z->connected_before = 1;
        zkm_set_state(z, RL_ZKM_CONNECTED);
        if (!z->closing) {
            zkm_resync(z);
        }
    } else if (state == ZOO_EXPIRED_SESSION_STATE) {
        rl_log_warn("zk: session 0x%" PRIx64 " expired%s; starting a new one",
                    (uint64_t)z->session_id,
                    z->reg == ZKM_REG_HELD ? " (and our znode with it)" : "");
        z->connected = 0;
        zkm_set_state(z, RL_ZKM_EXPIRED);
        if (!z->closing) {
            zkm_new_session(z);
        }
    } else if (state == ZOO_AUTH_FAILED_STATE) {
        rl_log_error("zk: authentication failed; starting a new session in %d ms",
                     ZKM_INIT_RETRY_MS);
        z->connected = 0;
        zkm_set_state(z, RL_ZKM_EXPIRED);
        if (!z->closing) {
            zkm_close_handle(z);
            zkm_retry_later(z, ZKM_INIT_RETRY_MS);
        }
    } else {
        /* CONNECTING (or ASSOCIATING): the client reconnects by itself within the session. */
        if (z->connected) {
            rl_log_warn("zk: connection lost; reconnecting (session 0x%" PRIx64
                        " lives on for up to %d ms)",
                        (uint64_t)z->session_id, z->timeout_ms);
        }
        z->connected = 0;
        z->parents_gen = 0;
        zkm_set_state(z, RL_ZKM_CONNECTING);
    }
}

static void
zkm_on_watch(struct rl_zkm *z, int type, const char *path)
{
    if (path == NULL || type == ZOO_NOTWATCHING_EVENT) {
        return;
    }
    if (strcmp(path, z->nodes_path) == 0) {
        zkm_members_refresh(z);
    } else if (strcmp(path, z->asg_path) == 0) {
        zkm_asg_refresh(z);
    } else if (strcmp(path, z->rules_path) == 0) {
        zkm_dw_refresh(z, ZKM_DW_RULES);
    } else if (z->reg != ZKM_REG_OFF && strcmp(path, z->reg_path) == 0) {
        /* Deleted (ours, or the old session's we wait for), created or changed: creating
         * again sorts it out (created, or exists and then whose it is). */
        if (z->reg == ZKM_REG_HELD && type == ZOO_DELETED_EVENT) {
            rl_log_warn("zk: nodes/%s was deleted under us; creating it again", z->name);
        }
        if (z->reg == ZKM_REG_HELD || z->reg == ZKM_REG_WAIT) {
            zkm_set_reg(z, ZKM_REG_IDLE);
            zkm_reg_step(z);
        }
    }
}

static void
zkm_handle(struct rl_zkm *z, struct zkm_ev *ev)
{
    if (ev->gen != z->gen) {
        return; /* from a session closed since */
    }
    switch (ev->kind) {
    case ZKM_EV_SESSION:
        zkm_on_session(z, ev->state);
        break;
    case ZKM_EV_WATCH:
        zkm_on_watch(z, ev->type, ev->path);
        break;
    case ZKM_OP_REG_CREATE:
        zkm_reg_created(z, ev->rc);
        break;
    case ZKM_OP_REG_CHECK:
        zkm_reg_checked(z, ev->rc, &ev->stat);
        break;
    case ZKM_OP_CHILDREN:
        zkm_children_done(z, ev);
        break;
    case ZKM_OP_MEMBER:
    case ZKM_OP_MEMBER_ACL:
        zkm_member_done(z, ev);
        break;
    case ZKM_OP_ASG_EXISTS:
    case ZKM_OP_ASG_ACL:
    case ZKM_OP_ASG_GET:
        zkm_asg_done(z, ev);
        break;
    }
}

static void
zkm_async_cb(uv_async_t *a)
{
    struct rl_zkm *z = a->data;
    struct zkm_ev *ev, *next;
    int lost;

    pthread_mutex_lock(&z->mu);
    ev = z->head;
    z->head = NULL;
    z->tail = &z->head;
    lost = z->lost;
    z->lost = 0;
    pthread_mutex_unlock(&z->mu);
    if (atomic_exchange(&z->announce_failed, 0) && !z->closing) {
        z->announced_gen = 0; /* the timer sends the create again */
        zkm_retry_later(z, RL_ZKM_RETRY_MS);
    }
    for (; ev != NULL; ev = next) {
        next = ev->next;
        /* A callback may have destroyed z: the rest is only freed. */
        if (!z->closing) {
            zkm_handle(z, ev);
        }
        zkm_ev_free(ev);
    }
    if (lost && !z->closing) {
        rl_log_error("zk: out of memory: an event was lost; reading everything again");
        if (z->connected) {
            zkm_resync(z);
        }
    }
}

static void
zkm_close_cb(uv_handle_t *h)
{
    struct rl_zkm *z = h->data;
    struct zkm_ev *ev, *next;

    if (--z->nopen > 0) {
        return;
    }
    for (ev = z->head; ev != NULL; ev = next) {
        next = ev->next;
        zkm_ev_free(ev);
    }
    zkm_scan_free(z->scan);
    free(z->members);
    free(z->hosts);
    pthread_cond_destroy(&z->cond);
    pthread_mutex_destroy(&z->mu);
    free(z);
}

int
rl_zkm_create(struct rl_zkm **out, uv_loop_t *loop, const char *hosts, uint32_t session_timeout_ms,
              const char *cluster, const struct rl_zkm_cbs *cbs, void *arg)
{
    pthread_condattr_t ca;
    struct rl_zkm *z;
    int rc;

    *out = NULL;
    if (loop == NULL || hosts == NULL || hosts[0] == '\0' ||
        !zkm_name_ok(cluster, ZKM_CLUSTER_MAX) || session_timeout_ms == 0 ||
        session_timeout_ms > INT32_MAX) {
        return -EINVAL;
    }
    z = calloc(1, sizeof(*z));
    if (z == NULL) {
        return -ENOMEM;
    }
    z->hosts = strdup(hosts);
    if (z->hosts == NULL) {
        rc = -ENOMEM;
        goto fail_alloc;
    }
    z->loop = loop;
    z->timeout_ms = (int)session_timeout_ms;
    if (cbs != NULL) {
        z->cbs = *cbs;
    }
    z->arg = arg;
    z->state = RL_ZKM_CONNECTING;
    z->tail = &z->head;
    snprintf(z->root, sizeof(z->root), "/ratelimiter/%s", cluster);
    snprintf(z->nodes_path, sizeof(z->nodes_path), "%s/nodes", z->root);
    snprintf(z->routers_path, sizeof(z->routers_path), "%s/routers", z->root);
    snprintf(z->asg_path, sizeof(z->asg_path), "%s/assignment", z->root);
    snprintf(z->prev_path, sizeof(z->prev_path), "%s/assignment.prev", z->root);
    snprintf(z->rules_path, sizeof(z->rules_path), "%s/rules", z->root);
    z->dw[ZKM_DW_ASG].path = z->asg_path;
    z->dw[ZKM_DW_ASG].what = "assignment";
    z->dw[ZKM_DW_RULES].path = z->rules_path;
    z->dw[ZKM_DW_RULES].what = "rules";
    z->dw[ZKM_DW_ASG].key = z->dw[ZKM_DW_RULES].key = -1;

    rc = -pthread_mutex_init(&z->mu, NULL);
    if (rc != 0) {
        goto fail_alloc;
    }
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = -pthread_cond_init(&z->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        goto fail_mutex;
    }
    rc = uv_async_init(loop, &z->async, zkm_async_cb);
    if (rc != 0) {
        goto fail_cond;
    }
    z->async.data = z;
    uv_timer_init(loop, &z->timer);
    z->timer.data = z;
    z->nopen = 2;

    /* Process-wide, like our own log: the client's INFO lines are one per request. */
    zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);
    zkm_new_session(z);
    *out = z;
    return 0;

fail_cond:
    pthread_cond_destroy(&z->cond);
fail_mutex:
    pthread_mutex_destroy(&z->mu);
fail_alloc:
    free(z->hosts);
    free(z);
    return rc;
}

void
rl_zkm_destroy(struct rl_zkm *z)
{
    if (z == NULL || z->closing) {
        return;
    }
    z->closing = 1;
    if (z->zh != NULL && z->reg == ZKM_REG_HELD && z->connected) {
        /* Closing the session removes the znode as well; deleting it first makes its end
         * explicit in the server's log. Synchronous: a healthy server answers in a few ms. */
        int rc = zoo_delete(z->zh, z->reg_path, z->reg_version);
        if (rc == ZOK) {
            rl_log_info("zk: unregistered nodes/%s", z->name);
        } else {
            rl_log_warn("zk: deleting nodes/%s: %s (closing the session removes it)", z->name,
                        zerror(rc));
        }
    }
    zkm_close_handle(z);
    uv_timer_stop(&z->timer);
    uv_close((uv_handle_t *)&z->timer, zkm_close_cb);
    uv_close((uv_handle_t *)&z->async, zkm_close_cb);
}

int
rl_zkm_register(struct rl_zkm *z, const char *name, const char *addr)
{
    size_t alen = addr != NULL ? strlen(addr) : 0;

    if (!zkm_name_ok(name, RL_SHARDMAP_NAME_MAX - 1) || alen == 0 || alen >= RL_SHARDMAP_NAME_MAX) {
        return -EINVAL;
    }
    if (z->reg != ZKM_REG_OFF) {
        return -EALREADY;
    }
    snprintf(z->name, sizeof(z->name), "%s", name);
    snprintf(z->addr, sizeof(z->addr), "%s", addr);
    snprintf(z->reg_path, sizeof(z->reg_path), "%s/%s", z->nodes_path, name);
    zkm_set_reg(z, ZKM_REG_IDLE);
    zkm_reg_step(z);
    return 0;
}

int
rl_zkm_registered(const struct rl_zkm *z)
{
    return z->reg == ZKM_REG_HELD;
}

int
rl_zkm_watch(struct rl_zkm *z)
{
    if (z->watching) {
        return -EALREADY;
    }
    z->watching = 1;
    z->dw[ZKM_DW_ASG].on = 1;
    zkm_members_refresh(z);
    zkm_asg_refresh(z);
    return 0;
}

int
rl_zkm_watch_rules(struct rl_zkm *z)
{
    if (z->dw[ZKM_DW_RULES].on) {
        return -EALREADY;
    }
    z->dw[ZKM_DW_RULES].on = 1;
    zkm_dw_refresh(z, ZKM_DW_RULES);
    return 0;
}

void
rl_zkm_secure(struct rl_zkm *z, const char *secret, size_t len)
{
    static char world[] = "world", anyone[] = "anyone", digest[] = "digest";

    if (secret == NULL || z->secure) {
        return;
    }
    rl_auth_zk_digest(secret, len, z->zk_cred, z->zk_id);
    z->acl_entries[0].perms = ZOO_PERM_ALL;
    z->acl_entries[0].id.scheme = digest;
    z->acl_entries[0].id.id = z->zk_id;
    z->acl_entries[1].perms = ZOO_PERM_READ;
    z->acl_entries[1].id.scheme = world;
    z->acl_entries[1].id.id = anyone;
    z->acl.count = 2;
    z->acl.data = z->acl_entries;
    z->top_entries[0] = z->acl_entries[0];
    z->top_entries[1] = z->acl_entries[1];
    z->top_entries[1].perms = ZOO_PERM_READ | ZOO_PERM_CREATE;
    z->top_acl.count = 2;
    z->top_acl.data = z->top_entries;
    z->secure = 1;
    if (z->zh != NULL) {
        zoo_add_auth(z->zh, "digest", z->zk_cred, (int)strlen(z->zk_cred), NULL, NULL);
    }
}

void
rl_zkm_refresh(struct rl_zkm *z)
{
    zkm_members_refresh(z);
    zkm_asg_refresh(z);
}

/* The blocking calls. */

/* Waits for a connected session until timeout_ms, replacing an expired one. */
static int
zkm_ready(struct rl_zkm *z, int timeout_ms)
{
    struct timespec dl;
    int state, rc = 0;

    if (z->closing) {
        return -EINVAL;
    }
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (dl.tv_nsec >= 1000000000) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000;
    }
    for (;;) {
        if (z->zh == NULL) {
            zkm_new_session(z);
            if (z->zh == NULL) {
                return -ENOTCONN;
            }
        }
        pthread_mutex_lock(&z->mu);
        while (rc == 0 && z->lk_state != ZOO_CONNECTED_STATE &&
               z->lk_state != ZOO_EXPIRED_SESSION_STATE && z->lk_state != ZOO_AUTH_FAILED_STATE) {
            rc = pthread_cond_timedwait(&z->cond, &z->mu, &dl);
        }
        state = z->lk_state;
        pthread_mutex_unlock(&z->mu);
        if (state == ZOO_CONNECTED_STATE) {
            return 0;
        }
        if (rc != 0) {
            return -ETIMEDOUT;
        }
        if (state == ZOO_AUTH_FAILED_STATE) {
            return -EACCES;
        }
        /* Expired: the loop would make a new session, but the tool may not run the loop. */
        rl_log_warn("zk: session expired; starting a new one");
        zkm_new_session(z);
    }
}

static int
zkm_sync_parents(struct rl_zkm *z)
{
    const char *paths[] = {"/ratelimiter", z->root, z->nodes_path};

    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        int rc = zoo_create(z->zh, paths[i], "", 0, zkm_acl(z, i == 0), ZOO_PERSISTENT, NULL, 0);
        if (rc != ZOK && rc != ZNODEEXISTS) {
            return zkm_errno(rc);
        }
        if (z->secure && i > 0) {
            rc = zoo_set_acl(z->zh, paths[i], -1, &z->acl);
            if (rc != ZOK) {
                rl_log_error("zk: cannot set the cluster's ACL on %s: %s", paths[i], zerror(rc));
                return zkm_errno(rc);
            }
        }
    }
    return 0;
}

/* Reads path into a malloc'd NUL-terminated buffer; NULL and version -1 when absent. */
static int
zkm_sync_get(struct rl_zkm *z, const char *path, char **text, size_t *len, int64_t *version)
{
    *text = NULL;
    *len = 0;
    *version = -1;
    for (int i = 0; i < ZKM_GET_TRIES; i++) {
        struct Stat st;
        char *buf;
        int blen, rc;

        rc = zoo_exists(z->zh, path, 0, &st);
        if (rc == ZNONODE) {
            return 0;
        }
        if (rc != ZOK) {
            return zkm_errno(rc);
        }
        buf = malloc((size_t)st.dataLength + 1);
        if (buf == NULL) {
            return -ENOMEM;
        }
        blen = st.dataLength;
        rc = zoo_get(z->zh, path, 0, buf, &blen, &st);
        if (rc == ZOK && st.dataLength <= blen) {
            blen = blen < 0 ? 0 : blen; /* -1: null data */
            buf[blen] = '\0';
            *text = buf;
            *len = (size_t)blen;
            *version = st.version;
            return 0;
        }
        free(buf);
        if (rc != ZOK && rc != ZNONODE) {
            return zkm_errno(rc);
        }
        /* It went, or grew, between the two reads: read again. */
    }
    return -EAGAIN;
}

/* The children of dir (nodes/ or routers/) with their data, sorted by name. */
static int
zkm_read_dir(struct rl_zkm *z, const char *dir, struct rl_member **out, size_t *n,
             int timeout_ms);

int
rl_zkm_read_members(struct rl_zkm *z, struct rl_member **out, size_t *n, int timeout_ms)
{
    return zkm_read_dir(z, z->nodes_path, out, n, timeout_ms);
}

int
rl_zkm_read_routers(struct rl_zkm *z, struct rl_member **out, size_t *n, int timeout_ms)
{
    return zkm_read_dir(z, z->routers_path, out, n, timeout_ms);
}

int
rl_zkm_announce_router(struct rl_zkm *z, const char *name, const char *addr)
{
    char clean[RL_SHARDMAP_NAME_MAX];
    size_t i;

    if (name == NULL || addr == NULL || name[0] == '\0' ||
        strlen(addr) >= sizeof(z->announce_data)) {
        return -EINVAL;
    }
    /* A znode name: no '/', and not "." or "..". */
    for (i = 0; name[i] != '\0' && i + 1 < sizeof(clean); i++) {
        clean[i] = name[i] == '/' ? '_' : name[i];
    }
    clean[i] = '\0';
    if (strcmp(clean, ".") == 0 || strcmp(clean, "..") == 0) {
        return -EINVAL;
    }
    if (name[i] != '\0') {
        rl_log_warn("zk: router name \"%s\" is longer than %zu bytes: announced as routers/%s "
                    "(give routers short distinct --name values)",
                    name, sizeof(clean) - 1, clean);
    }
    snprintf(z->announce_path, sizeof(z->announce_path), "%s/%s", z->routers_path, clean);
    snprintf(z->announce_data, sizeof(z->announce_data), "%s", addr);
    if (z->zh != NULL && z->connected) {
        zkm_announce(z);
    }
    return 0;
}

static int
zkm_read_dir(struct rl_zkm *z, const char *dir, struct rl_member **out, size_t *n,
             int timeout_ms)
{
    struct String_vector sv = {0, NULL};
    struct rl_member *m = NULL;
    size_t k = 0;
    int rc;

    *out = NULL;
    *n = 0;
    rc = zkm_ready(z, timeout_ms);
    if (rc != 0) {
        return rc;
    }
    rc = zoo_get_children(z->zh, dir, 0, &sv);
    if (rc == ZNONODE) {
        return 0;
    }
    if (rc != ZOK) {
        return zkm_errno(rc);
    }
    if (sv.count > 0) {
        m = calloc((size_t)sv.count, sizeof(*m));
        if (m == NULL) {
            rc = -ENOMEM;
            goto out;
        }
    }
    for (int32_t i = 0; i < sv.count; i++) {
        char path[ZKM_PATH_MAX];
        char buf[RL_SHARDMAP_NAME_MAX];
        int blen = (int)sizeof(buf) - 1;
        struct Stat st;

        if (strlen(sv.data[i]) >= RL_SHARDMAP_NAME_MAX) {
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s", dir, sv.data[i]);
        rc = zoo_get(z->zh, path, 0, buf, &blen, &st);
        if (rc == ZNONODE) {
            continue;
        }
        if (rc != ZOK) {
            rc = zkm_errno(rc);
            goto out;
        }
        if (blen <= 0 || st.dataLength >= RL_SHARDMAP_NAME_MAX) {
            rl_log_warn("zk: %s/%s has a bad address; ignored", dir, sv.data[i]);
            continue;
        }
        if (z->secure) {
            struct ACL_vector acl = {0, NULL};
            int ours;

            rc = zoo_get_acl(z->zh, path, &acl, &st);
            if (rc == ZNONODE) {
                continue;
            }
            if (rc != ZOK) {
                rc = zkm_errno(rc);
                goto out;
            }
            ours = zkm_acl_ours(z, &acl);
            deallocate_ACL_vector(&acl);
            if (!ours) {
                rl_log_warn("zk: %s/%s was not written by this cluster (its ACL is not the "
                            "cluster secret's): ignored",
                            dir, sv.data[i]);
                continue;
            }
        }
        buf[blen] = '\0';
        snprintf(m[k].name, sizeof(m[k].name), "%s", sv.data[i]);
        snprintf(m[k].addr, sizeof(m[k].addr), "%s", buf);
        k++;
    }
    rc = 0;
    qsort(m, k, sizeof(*m), zkm_member_cmp);
out:
    deallocate_String_vector(&sv);
    if (rc != 0 || k == 0) {
        free(m);
        m = NULL;
        k = 0;
    }
    *out = m;
    *n = k;
    return rc;
}

int
rl_zkm_get_assignment(struct rl_zkm *z, char **text, size_t *len, int64_t *version, int timeout_ms)
{
    int rc;

    *text = NULL;
    *len = 0;
    *version = -1;
    rc = zkm_ready(z, timeout_ms);
    return rc != 0 ? rc : zkm_sync_get(z, z->asg_path, text, len, version);
}

int
rl_zkm_get_assignment_prev(struct rl_zkm *z, char **text, size_t *len, int64_t *version,
                           int timeout_ms)
{
    int rc;

    *text = NULL;
    *len = 0;
    *version = -1;
    rc = zkm_ready(z, timeout_ms);
    return rc != 0 ? rc : zkm_sync_get(z, z->prev_path, text, len, version);
}

int
rl_zkm_set_assignment(struct rl_zkm *z, const char *text, size_t len, int64_t expected_version,
                      int64_t *new_version, int timeout_ms)
{
    zoo_op_t ops[2];
    zoo_op_result_t res[2];
    struct Stat st[2], pst;
    char pbuf[2][ZKM_PATH_MAX];
    char *old = NULL;
    size_t oldlen;
    int64_t cur;
    int nops, rc;

    if (len > RL_ZKM_DATA_MAX) {
        return -EMSGSIZE;
    }
    if ((text == NULL && len > 0) || expected_version < -1 || expected_version > INT32_MAX) {
        return -EINVAL;
    }
    rc = zkm_ready(z, timeout_ms);
    if (rc == 0) {
        rc = zkm_sync_parents(z);
    }
    if (rc != 0) {
        return rc;
    }
    memset(st, 0, sizeof(st));
    if (expected_version == -1) {
        zoo_create_op_init(&ops[0], z->asg_path, text != NULL ? text : "", (int)len,
                           zkm_acl(z, 0), ZOO_PERSISTENT, pbuf[0], sizeof(pbuf[0]));
        nops = 1;
    } else {
        /* The replaced text goes to prev in the same multi, which only commits if the
         * assignment is still at expected_version: prev holds exactly what was replaced. */
        rc = zkm_sync_get(z, z->asg_path, &old, &oldlen, &cur);
        if (rc != 0) {
            return rc;
        }
        if (cur != expected_version) {
            free(old);
            return -EAGAIN;
        }
        zoo_set_op_init(&ops[0], z->asg_path, text != NULL ? text : "", (int)len,
                        (int)expected_version, &st[0]);
        /* The text written now is the cluster's: so is the ACL (an assignment left from before
         * the secret, or by a stranger, is closed as it is replaced). */
        for (int k = 0; z->secure && k < 2; k++) {
            rc = zoo_set_acl(z->zh, k == 0 ? z->asg_path : z->prev_path, -1, &z->acl);
            if (rc != ZOK && rc != ZNONODE) {
                free(old);
                return zkm_errno(rc);
            }
        }
        rc = zoo_exists(z->zh, z->prev_path, 0, &pst);
        if (rc == ZOK) {
            zoo_set_op_init(&ops[1], z->prev_path, old, (int)oldlen, -1, &st[1]);
        } else if (rc == ZNONODE) {
            zoo_create_op_init(&ops[1], z->prev_path, old, (int)oldlen, zkm_acl(z, 0),
                               ZOO_PERSISTENT, pbuf[1], sizeof(pbuf[1]));
        } else {
            free(old);
            return zkm_errno(rc);
        }
        nops = 2;
    }
    memset(res, 0, sizeof(res));
    rc = zoo_multi(z->zh, nops, ops, res);
    free(old);
    if (rc == ZNONODE || rc == ZNODEEXISTS || rc == ZBADVERSION) {
        return -EAGAIN;
    }
    if (rc != ZOK) {
        return zkm_errno(rc);
    }
    if (new_version != NULL) {
        *new_version = expected_version == -1 ? 0 : st[0].version;
    }
    rl_log_info("zk: assignment written, version %" PRId64 " (%zu bytes)",
                expected_version == -1 ? (int64_t)0 : (int64_t)st[0].version, len);
    return 0;
}

int
rl_zkm_get_rules(struct rl_zkm *z, char **text, size_t *len, int64_t *version, int timeout_ms)
{
    int rc;

    *text = NULL;
    *len = 0;
    *version = -1;
    rc = zkm_ready(z, timeout_ms);
    return rc != 0 ? rc : zkm_sync_get(z, z->rules_path, text, len, version);
}

int
rl_zkm_set_rules(struct rl_zkm *z, const char *text, size_t len, int64_t *new_version,
                 int timeout_ms)
{
    struct Stat st;
    int rc;

    if (len > RL_ZKM_DATA_MAX) {
        return -EMSGSIZE;
    }
    if (text == NULL && len > 0) {
        return -EINVAL;
    }
    rc = zkm_ready(z, timeout_ms);
    if (rc == 0) {
        rc = zkm_sync_parents(z);
    }
    if (rc != 0) {
        return rc;
    }
    rc = zoo_create(z->zh, z->rules_path, text != NULL ? text : "", (int)len, zkm_acl(z, 0),
                    ZOO_PERSISTENT, NULL, 0);
    if (rc == ZOK) {
        if (new_version != NULL) {
            *new_version = 0;
        }
    } else if (rc == ZNODEEXISTS) {
        /* The text written now is the cluster's: so is the ACL (rules left from before the
         * secret, or by a stranger, are closed as they are replaced). */
        if (z->secure) {
            rc = zoo_set_acl(z->zh, z->rules_path, -1, &z->acl);
            if (rc != ZOK && rc != ZNONODE) {
                return zkm_errno(rc);
            }
        }
        memset(&st, 0, sizeof(st));
        rc = zoo_set2(z->zh, z->rules_path, text != NULL ? text : "", (int)len, -1, &st);
        if (rc == ZNONODE) {
            return -EAGAIN; /* deleted meanwhile: push again */
        }
        if (rc != ZOK) {
            return zkm_errno(rc);
        }
        if (new_version != NULL) {
            *new_version = st.version;
        }
    } else {
        return zkm_errno(rc);
    }
    rl_log_info("zk: rules written, version %" PRId64 " (%zu bytes)",
                new_version != NULL ? *new_version : (int64_t)-1, len);
    return 0;
}
