/*
 * zkmembers: who is in the cluster, on the session of zkm.c (zkm.h): a node's registration
 * (its ephemeral nodes/<name>, kept across lost connections and expired sessions, never
 * taken from another session), a router's announcement (routers/<name>), the scans of
 * nodes/ a watching router delivers through on_members (rl_zkm_watch, which also starts
 * zkm.c's watch of the assignment). The session calls it through struct zkm_part
 * (zkm_int.h), plugged in by the first of those calls; nothing in zkm.c names this file.
 * Loop thread only. Not for the session itself, nor for the assignment and the rules
 * (zkm.c), nor for the tools' blocking reads of nodes/ and routers/ (zkadmin.c).
 */
#include "zkm.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "utf8.h"
#include "zkm_int.h"

/* How often a registration that is still waiting says so again. */
#define ZKMEMBERS_WAIT_LOG_MS 10000

static void zkm_reg_step(struct rl_zkm *z);
static void zkm_state_step(struct rl_zkm *z);

/* A state znode's data: "joining" or "leaving" (docs/OPERATIONS.md, "Planned moves"). */
static const char *
zkm_state_data(int state)
{
    return state == RL_MEMBER_JOINING ? "joining" : state == RL_MEMBER_LEAVING ? "leaving" : "";
}

/* Registration. */

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
    /* The state first (joining): in one session requests are applied in order, so no
     * reader ever sees this member without it, and places no shard on it too early. */
    zkm_state_step(z);
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
    } else if (now - z->wait_logged >= ZKMEMBERS_WAIT_LOG_MS) {
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
zkm_members_same(const struct rl_member *a, size_t na, const struct rl_member *b, size_t nb)
{
    if (na != nb) {
        return 0;
    }
    for (size_t i = 0; i < na; i++) {
        if (strcmp(a[i].name, b[i].name) != 0 || strcmp(a[i].addr, b[i].addr) != 0 ||
            a[i].since != b[i].since || a[i].state != b[i].state) {
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
    ev = zkm_read_begin(z, ZKM_OP_CHILDREN, &z->mem_busy, &z->mem_dirty);
    if (ev != NULL) {
        struct zkm_ev *st = zkm_op(z, ZKM_OP_STATES);

        /* states/ first, for its child watch: a state made after this read fires it, one
         * made before is seen by the scan's reads of each member's state, sent after. */
        if (st != NULL) {
            zkm_sent(z, st, zoo_aget_children(z->zh, z->states_path, 1, zkm_strings_done, st));
        }
        zkm_sent(z, ev, zoo_aget_children(z->zh, z->nodes_path, 1, zkm_strings_done, ev));
    }
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

/* A request of scan s about its member at slot: NULL, and the scan failed, without memory. */
static struct zkm_ev *
zkm_scan_op(struct rl_zkm *z, struct zkm_scan *s, enum zkm_kind kind, size_t slot)
{
    struct zkm_ev *op = zkm_op(z, kind);

    if (op == NULL) {
        s->failed = 1;
        return NULL;
    }
    op->seq = s->seq;
    op->slot = slot;
    s->pending++;
    return op;
}

static void
zkm_children_done(struct rl_zkm *z, struct zkm_ev *ev)
{
    struct zkm_scan *s;
    char path[ZKM_PATH_MAX], spath[ZKM_PATH_MAX];

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
        if (!zkm_name_ok(ev->names[i], RL_SHARDMAP_NAME_MAX - 1)) {
            /* not a name a node can have (--name takes letters, digits, '.', '_', '-'):
             * written by hand, and it would break STATS' lines and assignments */
            char shown[4 * RL_SHARDMAP_NAME_MAX];

            rl_utf8_escape(shown, sizeof(shown), ev->names[i], strlen(ev->names[i]), 0);
            rl_log_warn("zk: member name nodes/%s is not a node's name (letters, digits, '.', "
                        "'_', '-'); ignored",
                        shown);
            continue;
        }
        snprintf(s->m[i].name, sizeof(s->m[i].name), "%s", ev->names[i]);
        snprintf(path, sizeof(path), "%s/%s", z->nodes_path, ev->names[i]);
        op = zkm_scan_op(z, s, ZKM_OP_MEMBER, i);
        if (op == NULL) {
            break;
        }
        zkm_sent(z, op, zoo_aget(z->zh, path, 0, zkm_data_done, op));
        snprintf(spath, sizeof(spath), "%s/%s", z->states_path, ev->names[i]);
        op = zkm_scan_op(z, s, ZKM_OP_STATE, i);
        if (op == NULL) {
            break;
        }
        /* a data watch: joining becoming leaving, or the state going */
        zkm_sent(z, op, zoo_aget(z->zh, spath, 1, zkm_data_done, op));
        if (z->secure) {
            op = zkm_scan_op(z, s, ZKM_OP_MEMBER_ACL, i);
            if (op == NULL) {
                break;
            }
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
    if (ev->kind == ZKM_OP_STATE) {
        if (ev->rc == ZOK) {
            if (ev->len == 7 && memcmp(ev->data, "joining", 7) == 0) {
                s->m[ev->slot].state = RL_MEMBER_JOINING;
            } else if (ev->len == 7 && memcmp(ev->data, "leaving", 7) == 0) {
                s->m[ev->slot].state = RL_MEMBER_LEAVING;
            } else {
                rl_log_warn("zk: states/%s holds neither \"joining\" nor \"leaving\" (%zu "
                            "bytes): taken as active",
                            s->m[ev->slot].name, ev->len);
            }
        } else if (ev->rc != ZNONODE) {
            s->failed = 1; /* ZNONODE: active */
        }
    } else if (ev->rc == ZOK && ev->kind == ZKM_OP_MEMBER_ACL) {
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
            s->m[ev->slot].created_ms = ev->stat.ctime;
            s->ok[ev->slot] |= 1;
        }
    } else if (ev->rc != ZNONODE) {
        s->failed = 1; /* ZNONODE: gone since the listing; its child event follows */
    }
    if (--s->pending == 0) {
        zkm_scan_finish(z);
    }
}

/* This node's state (rl_zkm_set_state). */

/*
 * Brings states/<name> to what is wanted, one request at a time: created (ephemeral, this
 * session's) or set when joining or leaving, deleted when active. A new session starts with
 * nothing written (the old one's ephemeral went with it).
 */
static void
zkm_state_step(struct rl_zkm *z)
{
    struct zkm_ev *ev;
    const char *d = zkm_state_data(z->state_want);

    if (z->state_path[0] == '\0' || z->state_busy || !z->connected || z->zh == NULL ||
        z->closing) {
        return;
    }
    if (z->state_gen != z->gen) {
        z->state_gen = z->gen;
        z->state_have = RL_MEMBER_ACTIVE; /* nothing of ours in this session yet */
    }
    if (z->state_have == z->state_want) {
        return;
    }
    ev = zkm_op(z, ZKM_OP_STATE_SET);
    if (ev == NULL) {
        zkm_retry_later(z, RL_ZKM_RETRY_MS);
        return;
    }
    ev->slot = (size_t)z->state_want;
    z->state_busy = 1;
    zkm_parents(z);
    if (z->state_want == RL_MEMBER_ACTIVE) {
        zkm_sent(z, ev, zoo_adelete(z->zh, z->state_path, -1, zkm_void_done, ev));
    } else if (z->state_have == RL_MEMBER_ACTIVE) {
        zkm_sent(z, ev,
                 zoo_acreate(z->zh, z->state_path, d, (int)strlen(d), zkm_acl(z, 0),
                             ZOO_EPHEMERAL, zkm_string_done, ev));
    } else {
        ev->seq = 1; /* a set */
        zkm_sent(z, ev, zoo_aset(z->zh, z->state_path, d, (int)strlen(d), -1, zkm_stat_done, ev));
    }
}

static void
zkm_state_done(struct rl_zkm *z, struct zkm_ev *ev)
{
    int want = (int)ev->slot;

    z->state_busy = 0;
    if (ev->rc == ZOK || (want == RL_MEMBER_ACTIVE && ev->rc == ZNONODE)) {
        z->state_have = want;
        rl_log_info("zk: states/%s %s", z->name,
                    want == RL_MEMBER_ACTIVE ? "deleted (active)" : zkm_state_data(want));
    } else if (ev->rc == ZNODEEXISTS) {
        /* there already (this session's, after a lost reply): set it instead */
        z->state_have = want == RL_MEMBER_JOINING ? RL_MEMBER_LEAVING : RL_MEMBER_JOINING;
    } else if (ev->rc == ZNONODE && ev->seq == 1) {
        z->state_have = RL_MEMBER_ACTIVE; /* gone: create it again */
    } else {
        if (ev->rc != ZCONNECTIONLOSS && ev->rc != ZOPERATIONTIMEOUT) {
            rl_log_warn("zk: cannot write states/%s: %s; retrying", z->name, zerror(ev->rc));
        }
        zkm_retry_later(z, RL_ZKM_RETRY_MS);
        return;
    }
    zkm_state_step(z);
}

/* The router's announcement. */

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

/* The session's calls, through zkm_members_part (struct zkm_part, zkm_int.h). */

static void
zkm_members_reset(struct rl_zkm *z)
{
    if (z->reg != ZKM_REG_OFF) {
        zkm_set_reg(z, ZKM_REG_IDLE);
    }
    z->wait_since = 0;
    z->state_busy = 0;
    z->state_gen = 0;
    zkm_scan_free(z->scan);
    z->scan = NULL;
    z->mem_busy = 0;
    z->mem_dirty = z->watching;
}

static void
zkm_members_resync(struct rl_zkm *z, int all)
{
    zkm_announce(z);
    if (z->reg == ZKM_REG_WAIT) {
        zkm_set_reg(z, ZKM_REG_IDLE);
    }
    if (z->reg == ZKM_REG_IDLE) {
        zkm_reg_step(z);
    } else if (all && z->reg == ZKM_REG_HELD) {
        zkm_reg_check(z);
    }
    if (all || z->mem_dirty) {
        zkm_members_refresh(z);
    }
    zkm_state_step(z);
}

static int
zkm_members_handle(struct rl_zkm *z, struct zkm_ev *ev)
{
    switch (ev->kind) {
    case ZKM_OP_REG_CREATE:
        zkm_reg_created(z, ev->rc);
        return 1;
    case ZKM_OP_REG_CHECK:
        zkm_reg_checked(z, ev->rc, &ev->stat);
        return 1;
    case ZKM_OP_CHILDREN:
        zkm_children_done(z, ev);
        return 1;
    case ZKM_OP_MEMBER:
    case ZKM_OP_MEMBER_ACL:
    case ZKM_OP_STATE:
        zkm_member_done(z, ev);
        return 1;
    case ZKM_OP_STATES:
        if (ev->rc == ZNONODE && z->watching) {
            /* no states/ yet (a cluster older than it): watch for its creation */
            struct zkm_ev *op = zkm_op(z, ZKM_OP_STATES_EX);

            if (op != NULL) {
                zkm_sent(z, op, zoo_aexists(z->zh, z->states_path, 1, zkm_stat_done, op));
            }
        }
        return 1;
    case ZKM_OP_STATES_EX:
        return 1;
    case ZKM_OP_STATE_SET:
        zkm_state_done(z, ev);
        return 1;
    default:
        return 0;
    }
}

static int
zkm_members_watch(struct rl_zkm *z, int type, const char *path)
{
    size_t sl = strlen(z->states_path);

    if (strcmp(path, z->nodes_path) == 0 ||
        (strncmp(path, z->states_path, sl) == 0 && (path[sl] == '\0' || path[sl] == '/'))) {
        zkm_members_refresh(z);
        return 1;
    }
    if (z->reg == ZKM_REG_OFF || strcmp(path, z->reg_path) != 0) {
        return 0;
    }
    /* Deleted (ours, or the old session's we wait for), created or changed: creating again
     * sorts it out (created, or exists and then whose it is). */
    if (z->reg == ZKM_REG_HELD && type == ZOO_DELETED_EVENT) {
        rl_log_warn("zk: nodes/%s was deleted under us; creating it again", z->name);
    }
    if (z->reg == ZKM_REG_HELD || z->reg == ZKM_REG_WAIT) {
        zkm_set_reg(z, ZKM_REG_IDLE);
        zkm_reg_step(z);
    }
    return 1;
}

static void
zkm_members_wakeup(struct rl_zkm *z)
{
    if (atomic_exchange(&z->announce_failed, 0)) {
        z->announced_gen = 0; /* the timer sends the create again */
        zkm_retry_later(z, RL_ZKM_RETRY_MS);
    }
}

static void
zkm_members_close(struct rl_zkm *z)
{
    int rc;

    if (z->zh == NULL || z->reg != ZKM_REG_HELD || !z->connected) {
        return;
    }
    /* Closing the session removes the znode as well; deleting it first makes its end
     * explicit in the server's log. Synchronous: a healthy server answers in a few ms. */
    rc = zoo_delete(z->zh, z->reg_path, z->reg_version);
    if (rc == ZOK) {
        rl_log_info("zk: unregistered nodes/%s", z->name);
    } else {
        rl_log_warn("zk: deleting nodes/%s: %s (closing the session removes it)", z->name,
                    zerror(rc));
    }
    /* the state after the member: never an active-looking member in between */
    if (z->state_gen == z->gen && z->state_have != RL_MEMBER_ACTIVE) {
        rc = zoo_delete(z->zh, z->state_path, -1);
        if (rc != ZOK && rc != ZNONODE) {
            rl_log_warn("zk: deleting states/%s: %s (closing the session removes it)", z->name,
                        zerror(rc));
        }
    }
}

static void
zkm_members_free(struct rl_zkm *z)
{
    zkm_scan_free(z->scan);
    z->scan = NULL;
    free(z->members);
    z->members = NULL;
}

static const struct zkm_part zkm_members_part = {
    .reset = zkm_members_reset,
    .resync = zkm_members_resync,
    .handle = zkm_members_handle,
    .watch = zkm_members_watch,
    .wakeup = zkm_members_wakeup,
    .close = zkm_members_close,
    .free = zkm_members_free,
};

/* Plugs the members into the session, by the first call of zkm.h's that needs them: until
 * then there is nothing of theirs to reset, resync, handle or free. */
static void
zkm_members_plug(struct rl_zkm *z)
{
    z->part = &zkm_members_part;
}

/* The calls of zkm.h. */

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
    zkm_members_plug(z);
    snprintf(z->name, sizeof(z->name), "%s", name);
    snprintf(z->addr, sizeof(z->addr), "%s", addr);
    snprintf(z->reg_path, sizeof(z->reg_path), "%s/%s", z->nodes_path, name);
    snprintf(z->state_path, sizeof(z->state_path), "%s/%s", z->states_path, name);
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
rl_zkm_set_state(struct rl_zkm *z, int state)
{
    if (state != RL_MEMBER_ACTIVE && state != RL_MEMBER_JOINING && state != RL_MEMBER_LEAVING) {
        return -EINVAL;
    }
    z->state_want = state;
    if (z->reg != ZKM_REG_OFF) {
        zkm_state_step(z);
    }
    return 0;
}

int
rl_zkm_state_written(const struct rl_zkm *z)
{
    return z->state_gen == z->gen && z->state_have == z->state_want && !z->state_busy;
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
    zkm_members_plug(z);
    snprintf(z->announce_path, sizeof(z->announce_path), "%s/%s", z->routers_path, clean);
    snprintf(z->announce_data, sizeof(z->announce_data), "%s", addr);
    if (z->zh != NULL && z->connected) {
        zkm_announce(z);
    }
    return 0;
}

int
rl_zkm_watch(struct rl_zkm *z)
{
    if (z->watching) {
        return -EALREADY;
    }
    zkm_members_plug(z);
    z->watching = 1;
    z->dw[ZKM_DW_ASG].on = 1;
    zkm_members_refresh(z);
    zkm_dw_refresh(z, ZKM_DW_ASG);
    return 0;
}

void
rl_zkm_refresh(struct rl_zkm *z)
{
    zkm_members_refresh(z);
    zkm_dw_refresh(z, ZKM_DW_ASG);
}
