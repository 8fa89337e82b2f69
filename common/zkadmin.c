/*
 * zkadmin: the tools' blocking calls (zkadmin.h), on a session of zkm.c that the tool does
 * not need to run a loop for: the reads and writes of the assignment, assignment.prev, the
 * rules, the envoy config and the slices znodes, and the reads of the members (nodes/) and
 * the routers announced (routers/). Writes make the parent znodes and claim what they
 * replace for the cluster (its ACL, with a secret). The blocking primitives they stand on
 * (zkm_ready, zkm_sync_parents, zkm_sync_get) are this file's own. Not for watching, nor for
 * a node's registration or a router's announcement (zkm.h: zkm.c, zkmembers.c).
 */
#include "zkadmin.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "zkm_int.h"

/* Attempts at reading a znode that keeps changing size between exists and get. */
#define ZKM_GET_TRIES 5

/* ---- the blocking primitives ---- */

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

/* ---- the tools' reads and writes ---- */

/* A blocking read of path, as rl_zkm_get_assignment reads the assignment. */
static int
admin_get(struct rl_zkm *z, const char *path, char **text, size_t *len, int64_t *version,
          int timeout_ms)
{
    int rc;

    *text = NULL;
    *len = 0;
    *version = -1;
    rc = zkm_ready(z, timeout_ms);
    return rc != 0 ? rc : zkm_sync_get(z, path, text, len, version);
}

/* What every write checks and waits for first: the text (and the caller's other arguments:
 * args_ok), a session, the parent znodes. */
static int
admin_begin(struct rl_zkm *z, const char *text, size_t len, int args_ok, int timeout_ms)
{
    int rc;

    if (len > RL_ZKM_DATA_MAX) {
        return -EMSGSIZE;
    }
    if ((text == NULL && len > 0) || !args_ok) {
        return -EINVAL;
    }
    rc = zkm_ready(z, timeout_ms);
    return rc != 0 ? rc : zkm_sync_parents(z);
}

/*
 * The text written now is the cluster's: so is the ACL of the znode it replaces (one left
 * from before the secret, or by a stranger, is closed as it is replaced). 0 without a secret
 * or when the znode is not there.
 */
static int
admin_claim(struct rl_zkm *z, const char *path)
{
    int rc;

    if (!z->secure) {
        return 0;
    }
    rc = zoo_set_acl(z->zh, path, -1, &z->acl);
    return rc == ZOK || rc == ZNONODE ? 0 : zkm_errno(rc);
}

int
rl_zkm_get_assignment(struct rl_zkm *z, char **text, size_t *len, int64_t *version, int timeout_ms)
{
    return admin_get(z, z->asg_path, text, len, version, timeout_ms);
}

int
rl_zkm_get_assignment_prev(struct rl_zkm *z, char **text, size_t *len, int64_t *version,
                           int timeout_ms)
{
    return admin_get(z, z->prev_path, text, len, version, timeout_ms);
}

int
rl_zkm_get_rules(struct rl_zkm *z, char **text, size_t *len, int64_t *version, int timeout_ms)
{
    return admin_get(z, z->rules_path, text, len, version, timeout_ms);
}

/* Compare-and-set of path, the replaced text going to prev in the same transaction
 * (rl_zkm_set_assignment's contract). */
static int
admin_cas(struct rl_zkm *z, const char *path, const char *prev, const char *what,
          const char *text, size_t len, int64_t expected_version, int64_t *new_version,
          const char *prev_text, size_t prev_len, int timeout_ms)
{
    zoo_op_t ops[2];
    zoo_op_result_t res[2];
    struct Stat st[2], pst;
    char pbuf[2][ZKM_PATH_MAX];
    char *old = NULL;
    size_t oldlen;
    int64_t cur;
    int nops, rc;

    rc = admin_begin(z, text, len, expected_version >= -1 && expected_version <= INT32_MAX,
                     timeout_ms);
    if (rc != 0) {
        return rc;
    }
    memset(st, 0, sizeof(st));
    if (expected_version == -1) {
        zoo_create_op_init(&ops[0], path, text != NULL ? text : "", (int)len, zkm_acl(z, 0),
                           ZOO_PERSISTENT, pbuf[0], sizeof(pbuf[0]));
        nops = 1;
    } else {
        /* The replaced text goes to prev in the same multi, which only commits if the
         * assignment is still at expected_version: prev holds exactly what was replaced. */
        rc = zkm_sync_get(z, path, &old, &oldlen, &cur);
        if (rc != 0) {
            return rc;
        }
        if (cur != expected_version) {
            free(old);
            return -EAGAIN;
        }
        zoo_set_op_init(&ops[0], path, text != NULL ? text : "", (int)len,
                        (int)expected_version, &st[0]);
        rc = admin_claim(z, path);
        if (rc == 0) {
            rc = admin_claim(z, prev);
        }
        if (rc != 0) {
            free(old);
            return rc;
        }
        if (prev_text != NULL) {
            free(old);
            old = malloc(prev_len + 1);
            if (old == NULL) {
                return -ENOMEM;
            }
            memcpy(old, prev_text, prev_len);
            oldlen = prev_len;
        }
        rc = zoo_exists(z->zh, prev, 0, &pst);
        if (rc == ZOK) {
            zoo_set_op_init(&ops[1], prev, old, (int)oldlen, -1, &st[1]);
        } else if (rc == ZNONODE) {
            zoo_create_op_init(&ops[1], prev, old, (int)oldlen, zkm_acl(z, 0),
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
    rl_log_info("zk: %s written, version %" PRId64 " (%zu bytes)", what,
                expected_version == -1 ? (int64_t)0 : (int64_t)st[0].version, len);
    return 0;
}

int
rl_zkm_set_assignment(struct rl_zkm *z, const char *text, size_t len, int64_t expected_version,
                      int64_t *new_version, int timeout_ms)
{
    return admin_cas(z, z->asg_path, z->prev_path, "assignment", text, len, expected_version,
                     new_version, NULL, 0, timeout_ms);
}

int
rl_zkm_get_slices(struct rl_zkm *z, char **text, size_t *len, int64_t *version, int timeout_ms)
{
    return admin_get(z, z->slices_path, text, len, version, timeout_ms);
}

int
rl_zkm_get_slices_prev(struct rl_zkm *z, char **text, size_t *len, int64_t *version,
                       int timeout_ms)
{
    return admin_get(z, z->slices_prev_path, text, len, version, timeout_ms);
}

int
rl_zkm_set_slices(struct rl_zkm *z, const char *text, size_t len, int64_t expected_version,
                  int64_t *new_version, const char *prev_text, size_t prev_len, int timeout_ms)
{
    if (prev_len > RL_ZKM_DATA_MAX) {
        return -EMSGSIZE;
    }
    return admin_cas(z, z->slices_path, z->slices_prev_path, "slices", text, len,
                     expected_version, new_version, prev_text, prev_len, timeout_ms);
}

int
rl_zkm_set_rules(struct rl_zkm *z, const char *text, size_t len, int64_t *new_version,
                 int timeout_ms)
{
    struct Stat st;
    int64_t version = 0;
    int rc;

    rc = admin_begin(z, text, len, 1, timeout_ms);
    if (rc != 0) {
        return rc;
    }
    rc = zoo_create(z->zh, z->rules_path, text != NULL ? text : "", (int)len, zkm_acl(z, 0),
                    ZOO_PERSISTENT, NULL, 0);
    if (rc == ZNODEEXISTS) {
        rc = admin_claim(z, z->rules_path);
        if (rc != 0) {
            return rc;
        }
        memset(&st, 0, sizeof(st));
        rc = zoo_set2(z->zh, z->rules_path, text != NULL ? text : "", (int)len, -1, &st);
        if (rc == ZNONODE) {
            return -EAGAIN; /* deleted meanwhile: push again */
        }
        version = st.version;
    }
    if (rc != ZOK) {
        return zkm_errno(rc);
    }
    if (new_version != NULL) {
        *new_version = version;
    }
    rl_log_info("zk: rules written, version %" PRId64 " (%zu bytes)", version, len);
    return 0;
}

int
rl_zkm_get_envoy(struct rl_zkm *z, char **text, size_t *len, int64_t *version, int timeout_ms)
{
    return admin_get(z, z->envoy_path, text, len, version, timeout_ms);
}

int
rl_zkm_set_envoy(struct rl_zkm *z, const char *text, size_t len, int64_t expected_version,
                 int64_t *new_version, int timeout_ms)
{
    struct Stat st;
    int64_t version = 0;
    int rc;

    rc = admin_begin(z, text, len, expected_version >= -1 && expected_version <= INT32_MAX,
                     timeout_ms);
    if (rc != 0) {
        return rc;
    }
    if (expected_version == -1) {
        rc = zoo_create(z->zh, z->envoy_path, text != NULL ? text : "", (int)len, zkm_acl(z, 0),
                        ZOO_PERSISTENT, NULL, 0);
    } else {
        rc = admin_claim(z, z->envoy_path);
        if (rc != 0) {
            return rc;
        }
        memset(&st, 0, sizeof(st));
        rc = zoo_set2(z->zh, z->envoy_path, text != NULL ? text : "", (int)len,
                      (int)expected_version, &st);
        version = st.version;
    }
    if (rc == ZNONODE || rc == ZNODEEXISTS || rc == ZBADVERSION) {
        return -EAGAIN;
    }
    if (rc != ZOK) {
        return zkm_errno(rc);
    }
    if (new_version != NULL) {
        *new_version = version;
    }
    rl_log_info("zk: envoy config written, version %" PRId64 " (%zu bytes)", version, len);
    return 0;
}

int
rl_zkm_delete_envoy(struct rl_zkm *z, int64_t expected_version, int timeout_ms)
{
    int rc;

    if (expected_version < 0 || expected_version > INT32_MAX) {
        return -EINVAL;
    }
    rc = zkm_ready(z, timeout_ms);
    if (rc != 0) {
        return rc;
    }
    rc = admin_claim(z, z->envoy_path);
    if (rc != 0) {
        return rc;
    }
    rc = zoo_delete(z->zh, z->envoy_path, (int)expected_version);
    if (rc == ZNONODE || rc == ZBADVERSION) {
        return -EAGAIN;
    }
    return rc == ZOK ? 0 : zkm_errno(rc);
}

/* ---- the members and the routers ---- */

/* The children of dir (nodes/ or routers/) with their data, sorted by name. */
static int
zkm_read_dir(struct rl_zkm *z, const char *dir, struct rl_member **out, size_t *n, int timeout_ms)
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
        if (dir == z->nodes_path) {
            /* its state (states/<name>): absent is active */
            char sbuf[16];
            int slen = (int)sizeof(sbuf) - 1;

            snprintf(path, sizeof(path), "%s/%s", z->states_path, sv.data[i]);
            rc = zoo_get(z->zh, path, 0, sbuf, &slen, &st);
            if (rc == ZOK && slen == 7 && memcmp(sbuf, "joining", 7) == 0) {
                m[k].state = RL_MEMBER_JOINING;
            } else if (rc == ZOK && slen == 7 && memcmp(sbuf, "leaving", 7) == 0) {
                m[k].state = RL_MEMBER_LEAVING;
            } else if (rc != ZOK && rc != ZNONODE) {
                rc = zkm_errno(rc);
                goto out;
            }
        }
        k++;
    }
    rc = 0;
    if (k > 1) { /* qsort's array may not be NULL, even of 0 elements */
        qsort(m, k, sizeof(*m), zkm_member_cmp);
    }
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
rl_zkm_read_members(struct rl_zkm *z, struct rl_member **out, size_t *n, int timeout_ms)
{
    return zkm_read_dir(z, z->nodes_path, out, n, timeout_ms);
}

int
rl_zkm_read_routers(struct rl_zkm *z, struct rl_member **out, size_t *n, int timeout_ms)
{
    return zkm_read_dir(z, z->routers_path, out, n, timeout_ms);
}
