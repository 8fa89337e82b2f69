/*
 * zkm: the ZooKeeper session on a libuv loop (zkm.h), shared by node, router and tools. The
 * client library's threads only copy what they are given into an event and queue it
 * (zkm_push); the loop thread drains the queue in zkm_async_cb and owns every decision: new
 * sessions, the watched data (assignment, rules), and the calls of the part that runs on
 * the session (struct zkm_part: zkmembers.c's registration and member scans, plugged in by
 * its own first call, so nothing here names it). Requests are asynchronous and pipelined (a
 * session's requests are answered in order, so "create the parents, then read the children"
 * needs no waiting in between). Each zhandle has a generation; events of an older one are
 * dropped, so an expired session cannot disturb its successor. The tools' blocking calls
 * are zkadmin.c's. Not for the shard map, and not a general ZooKeeper wrapper.
 */
#include "zkm.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "zkm_int.h"

/* How often a failed zookeeper_init (a host name that does not resolve) is retried. */
#define ZKM_INIT_RETRY_MS 2000

static const char *const zkm_state_names[] = {
#define RL_ZKM_STATE_NAME(n, s) s,
    RL_ZKM_STATE_MAP(RL_ZKM_STATE_NAME)
#undef RL_ZKM_STATE_NAME
};

const char *
rl_zkm_state_name(enum rl_zkm_state state)
{
    if ((size_t)state >= sizeof(zkm_state_names) / sizeof(zkm_state_names[0])) {
        return "?";
    }
    return zkm_state_names[state];
}

/* A znode name we create, as conf_util.c accepts it: [A-Za-z0-9._-]{1,max}, not "." or "..". */
int
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

/* qsort's order of members: by name (the scans' and the tools' reads'). */
int
zkm_member_cmp(const void *a, const void *b)
{
    return strcmp(((const struct rl_member *)a)->name, ((const struct rl_member *)b)->name);
}

int
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

void
zkm_ignore_done(int rc, const char *value, const void *data)
{
    (void)rc;
    (void)value;
    (void)data;
}

void
zkm_string_done(int rc, const char *value, const void *data)
{
    struct zkm_ev *ev = (struct zkm_ev *)data;

    (void)value;
    ev->rc = rc;
    zkm_push(ev->z, ev);
}

void
zkm_stat_done(int rc, const struct Stat *stat, const void *data)
{
    struct zkm_ev *ev = (struct zkm_ev *)data;

    ev->rc = rc;
    if (rc == ZOK && stat != NULL) {
        ev->stat = *stat;
    }
    zkm_push(ev->z, ev);
}

void
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

void
zkm_void_done(int rc, const void *data)
{
    struct zkm_ev *ev = (struct zkm_ev *)data;

    ev->rc = rc;
    zkm_push(ev->z, ev);
}

void
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
    if (z->part != NULL) {
        z->part->resync(z, 0);
    }
    for (int k = 0; k < ZKM_DW_COUNT; k++) {
        if (z->dw[k].dirty) {
            zkm_dw_refresh(z, k);
        }
    }
}

void
zkm_retry_later(struct rl_zkm *z, uint64_t ms)
{
    if (!z->closing && !uv_is_active((uv_handle_t *)&z->timer)) {
        uv_timer_start(&z->timer, zkm_timer_cb, ms, 0);
    }
}

/* A request to be sent: the result comes back through the queue as this event. */
struct zkm_ev *
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
void
zkm_sent(struct rl_zkm *z, struct zkm_ev *ev, int rc)
{
    if (rc != ZOK) {
        ev->rc = rc;
        zkm_push(z, ev);
    }
}

/*
 * Starts a read guarded by busy and dirty (one in flight at a time; dirty: read again when
 * it is done): NULL with *dirty set when one is out, the session is not up or memory is
 * short, else the request's event with *busy set, *dirty cleared and the parents made.
 */
struct zkm_ev *
zkm_read_begin(struct rl_zkm *z, enum zkm_kind kind, int *busy, int *dirty)
{
    struct zkm_ev *ev;

    if (*busy || !z->connected || z->zh == NULL) {
        *dirty = 1;
        return NULL;
    }
    ev = zkm_op(z, kind);
    if (ev == NULL) {
        *dirty = 1;
        return NULL;
    }
    *busy = 1;
    *dirty = 0;
    zkm_parents(z);
    return ev;
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
struct ACL_vector *
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
int
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

void
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
 * Creates /ratelimiter, its cluster, nodes/ and states/ once per session; existing ones are fine.
 * With a secret, the cluster's two are also given its ACL, which closes a subtree made
 * before the secret was set (an open ACL lets anyone set it; a stranger's lets nobody, and
 * that is said at warn).
 */
void
zkm_parents(struct rl_zkm *z)
{
    const char *paths[] = {"/ratelimiter", z->root, z->nodes_path, z->states_path};

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

/* Watched data: the assignment (ZKM_DW_ASG), the rules (ZKM_DW_RULES) and the envoy config
 * (ZKM_DW_ENVOY). The same steps for each: exists (leaves a watch), then with a secret whose
 * it is, then get. */

void
zkm_dw_refresh(struct rl_zkm *z, int which)
{
    struct zkm_dw *w = &z->dw[which];
    struct zkm_ev *ev;

    if (!w->on) {
        return;
    }
    ev = zkm_read_begin(z, ZKM_OP_ASG_EXISTS, &w->busy, &w->dirty);
    if (ev == NULL) {
        return;
    }
    ev->slot = (size_t)which;
    /* exists leaves a watch whether or not the znode is there; get only when it is. */
    zkm_sent(z, ev, zoo_aexists(z->zh, w->path, 1, zkm_stat_done, ev));
}

static void
zkm_dw_deliver(struct rl_zkm *z, int which, const char *text, size_t len, int64_t version,
               int64_t key)
{
    struct zkm_dw *w = &z->dw[which];
    void (*cb)(void *, const char *, size_t, int64_t) =
        which == ZKM_DW_ASG     ? z->cbs.on_assignment
        : which == ZKM_DW_RULES ? z->cbs.on_rules
        : which == ZKM_DW_ENVOY ? z->cbs.on_envoy
                                : z->cbs.on_slices;

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

static void
zkm_resync(struct rl_zkm *z)
{
    if (z->part != NULL) {
        z->part->resync(z, 1);
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

void
zkm_new_session(struct rl_zkm *z)
{
    struct zkm_sess *s;
    zhandle_t *zh;

    zkm_close_handle(z);
    z->gen++;
    z->connected = 0;
    z->connected_before = 0;
    z->session_id = 0;
    if (z->part != NULL) {
        z->part->reset(z);
    }
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
    if (z->part != NULL && z->part->watch(z, type, path)) {
        return;
    }
    if (strcmp(path, z->asg_path) == 0) {
        zkm_dw_refresh(z, ZKM_DW_ASG);
    } else if (strcmp(path, z->rules_path) == 0) {
        zkm_dw_refresh(z, ZKM_DW_RULES);
    } else if (strcmp(path, z->envoy_path) == 0) {
        zkm_dw_refresh(z, ZKM_DW_ENVOY);
    } else if (strcmp(path, z->slices_path) == 0) {
        zkm_dw_refresh(z, ZKM_DW_SLICES);
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
    case ZKM_OP_ASG_EXISTS:
    case ZKM_OP_ASG_ACL:
    case ZKM_OP_ASG_GET:
        zkm_asg_done(z, ev);
        break;
    default:
        if (z->part != NULL) {
            z->part->handle(z, ev);
        }
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
    if (!z->closing && z->part != NULL) {
        z->part->wakeup(z);
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
    if (z->part != NULL) {
        z->part->free(z);
    }
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
    snprintf(z->states_path, sizeof(z->states_path), "%s/states", z->root);
    snprintf(z->routers_path, sizeof(z->routers_path), "%s/routers", z->root);
    snprintf(z->asg_path, sizeof(z->asg_path), "%s/assignment", z->root);
    snprintf(z->prev_path, sizeof(z->prev_path), "%s/assignment.prev", z->root);
    snprintf(z->rules_path, sizeof(z->rules_path), "%s/rules", z->root);
    z->dw[ZKM_DW_ASG].path = z->asg_path;
    z->dw[ZKM_DW_ASG].what = "assignment";
    z->dw[ZKM_DW_RULES].path = z->rules_path;
    z->dw[ZKM_DW_RULES].what = "rules";
    snprintf(z->envoy_path, sizeof(z->envoy_path), "%s/envoy", z->root);
    z->dw[ZKM_DW_ENVOY].path = z->envoy_path;
    z->dw[ZKM_DW_ENVOY].what = "envoy config";
    snprintf(z->slices_path, sizeof(z->slices_path), "%s/slices", z->root);
    snprintf(z->slices_prev_path, sizeof(z->slices_prev_path), "%s/slices.prev", z->root);
    z->dw[ZKM_DW_SLICES].path = z->slices_path;
    z->dw[ZKM_DW_SLICES].what = "slices";
    z->dw[ZKM_DW_ASG].key = z->dw[ZKM_DW_RULES].key = z->dw[ZKM_DW_ENVOY].key = -1;
    z->dw[ZKM_DW_SLICES].key = -1;

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
    if (z->part != NULL) {
        z->part->close(z);
    }
    zkm_close_handle(z);
    uv_timer_stop(&z->timer);
    uv_close((uv_handle_t *)&z->timer, zkm_close_cb);
    uv_close((uv_handle_t *)&z->async, zkm_close_cb);
}

/* Starts watching one watched znode (ZKM_DW_*): -EALREADY if it is watched already. */
static int
zkm_dw_watch(struct rl_zkm *z, int which)
{
    if (z->dw[which].on) {
        return -EALREADY;
    }
    z->dw[which].on = 1;
    zkm_dw_refresh(z, which);
    return 0;
}

int
rl_zkm_watch_rules(struct rl_zkm *z)
{
    return zkm_dw_watch(z, ZKM_DW_RULES);
}

int
rl_zkm_watch_envoy(struct rl_zkm *z)
{
    return zkm_dw_watch(z, ZKM_DW_ENVOY);
}

int
rl_zkm_watch_slices(struct rl_zkm *z)
{
    return zkm_dw_watch(z, ZKM_DW_SLICES);
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
