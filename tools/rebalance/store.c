/*
 * store: rl-rebalance's inputs and outputs (store.h): members and the assignment in force
 * from files, ZooKeeper or the configuration; the new assignment to a file or, by
 * compare-and-set, to ZooKeeper; the previous one back for --rollback.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"
#include "parse.h"
#include "say.h"
#include "store.h"
#include "zkadmin.h"

/* The text of an assignment of nshards shards with no overrides; malloc'd, or NULL. */
static char *
empty_assignment(uint32_t nshards, size_t *len)
{
    char header[64];

    *len = (size_t)snprintf(header, sizeof(header), "rl-assignment 1 %u\n", nshards);
    return strdup(header);
}

/* A byte of a node name in the assignment format (assignment.h). */
static bool
name_byte(unsigned char c)
{
    return c > ' ' && c != 0x7f && c != '#';
}

/*
 * A members file: one "NAME HOST:PORT" per line, '#' comments, blank lines ignored. On error
 * err holds "line N: what is wrong".
 */
int
rb_parse_members(char *text, struct rl_member **out, size_t *n, char *err, size_t errlen)
{
    struct rl_member *m = NULL;
    size_t cap = 0, k = 0, i;
    unsigned line = 0;
    char *p = text, *save = NULL;
    int rc = 0;

    *out = NULL;
    *n = 0;
    for (char *l = strtok_r(p, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save)) {
        char *hash = strchr(l, '#'), *name, *addr, *extra, *s2 = NULL;

        line++;
        if (hash != NULL) {
            *hash = '\0';
        }
        name = strtok_r(l, " \t\r", &s2);
        if (name == NULL) {
            continue;
        }
        addr = strtok_r(NULL, " \t\r", &s2);
        extra = strtok_r(NULL, " \t\r", &s2);
        if (addr == NULL || extra != NULL) {
            snprintf(err, errlen, "line %u: expected \"NAME HOST:PORT\"", line);
            rc = -EINVAL;
            goto out;
        }
        if (strlen(name) >= RL_SHARDMAP_NAME_MAX || strlen(addr) >= RL_SHARDMAP_NAME_MAX) {
            snprintf(err, errlen, "line %u: name or address longer than %d bytes", line,
                     RL_SHARDMAP_NAME_MAX - 1);
            rc = -EINVAL;
            goto out;
        }
        for (i = 0; name[i] != '\0'; i++) {
            if (!name_byte((unsigned char)name[i])) {
                snprintf(err, errlen, "line %u: node name holds a control byte or '#'", line);
                rc = -EINVAL;
                goto out;
            }
        }
        for (i = 0; i < k; i++) {
            if (strcmp(m[i].name, name) == 0) {
                snprintf(err, errlen, "line %u: node %s is listed twice", line, name);
                rc = -EINVAL;
                goto out;
            }
        }
        if (k == cap) {
            struct rl_member *g;

            cap = cap ? cap * 2 : 16;
            g = realloc(m, cap * sizeof(*m));
            if (g == NULL) {
                rc = -ENOMEM;
                goto out;
            }
            m = g;
        }
        memset(&m[k], 0, sizeof(m[k]));
        memcpy(m[k].name, name, strlen(name));
        memcpy(m[k].addr, addr, strlen(addr));
        k++;
    }
out:
    if (rc != 0) {
        free(m);
        return rc;
    }
    *out = m;
    *n = k;
    return 0;
}

const char *
rb_zk_error(int rc)
{
    switch (rc) {
    case -ETIMEDOUT:
        return "timed out (is ZooKeeper running and reachable?)";
    case -ECONNRESET:
        return "the connection broke during the request";
    case -ENOTCONN:
        return "not connected";
    case -EACCES:
        return "permission denied";
    default:
        return strerror(-rc);
    }
}

int
rb_zk_connect(struct rb_run *r)
{
    static const struct rl_zkm_cbs no_cbs = {NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    int rc;

    if (r->zkm != NULL) {
        return 0;
    }
    rc = uv_loop_init(&r->loop);
    if (rc != 0) {
        return rb_fail("cannot start an event loop: %s", uv_strerror(rc));
    }
    r->loop_ready = true;
    rc = rl_zkm_create(&r->zkm, &r->loop, r->conf->zookeeper, r->conf->session_timeout_ms,
                       r->conf->cluster_name, &no_cbs, NULL);
    if (rc == 0) {
        rl_zkm_secure(r->zkm, r->conf->secret, r->conf->secret_len);
    }
    if (rc != 0) {
        r->zkm = NULL;
        return rb_fail("cannot start a ZooKeeper session with %s: %s", r->conf->zookeeper,
                       rc == -EINVAL ? "bad connect string or cluster name" : uv_strerror(rc));
    }
    return 0;
}

void
rb_zk_close(struct rb_run *r)
{
    if (r->zkm != NULL) {
        rl_zkm_destroy(r->zkm);
        r->zkm = NULL;
    }
    if (r->loop_ready) {
        /* Runs the close callbacks that free the session's memory. */
        uv_run(&r->loop, UV_RUN_DEFAULT);
        if (uv_loop_close(&r->loop) != 0) {
            rl_log_warn("event loop closed with handles open");
        }
        r->loop_ready = false;
    }
}

int
rb_load_members(struct rb_run *r)
{
    char err[256], *text = NULL;
    size_t len, i;
    int rc;

    if (r->o.members_file != NULL) {
        rc = rl_file_read_small(r->o.members_file, RB_SMALL_FILE_MAX, &text, &len);
        if (rc != 0) {
            return rb_fail("cannot read %s: %s", r->o.members_file, rl_file_strerror(rc));
        }
        rc = rb_parse_members(text, &r->members, &r->nmembers, err, sizeof(err));
        free(text);
        if (rc == -ENOMEM) {
            return rb_fail("out of memory");
        }
        if (rc != 0) {
            fprintf(stderr, "rl-rebalance: %s: %s\n", r->o.members_file, err);
            return RB_EXIT_USAGE;
        }
        snprintf(r->members_from, sizeof(r->members_from), "from %s", r->o.members_file);
    } else if (r->conf->zookeeper[0] != '\0') {
        rc = rb_zk_connect(r);
        if (rc != 0) {
            return rc;
        }
        rc = rl_zkm_read_members(r->zkm, &r->members, &r->nmembers, r->o.timeout_ms);
        if (rc != 0) {
            return rb_fail("cannot read the members from ZooKeeper %s: %s", r->conf->zookeeper,
                           rb_zk_error(rc));
        }
        snprintf(r->members_from, sizeof(r->members_from), "from ZooKeeper %s", r->conf->zookeeper);
    } else {
        r->members = calloc(r->conf->nnodes ? r->conf->nnodes : 1, sizeof(*r->members));
        if (r->members == NULL) {
            return rb_fail("out of memory");
        }
        for (i = 0; i < r->conf->nnodes; i++) {
            const struct rl_node_conf *nc = &r->conf->nodes[i];
            uint16_t port;
            const char *host = rl_conf_node_dial(nc, &port);

            snprintf(r->members[i].name, sizeof(r->members[i].name), "%s", nc->name);
            rl_format_hostport(r->members[i].addr, sizeof(r->members[i].addr), host, port);
        }
        r->nmembers = r->conf->nnodes;
        snprintf(r->members_from, sizeof(r->members_from), "static, from the [node] sections");
    }
    if (r->nmembers == 0) {
        return rb_fail("no live members (%s): nothing to balance", r->members_from);
    }
    return 0;
}

/*
 * The assignment in force: --assignment FILE, else ZooKeeper's, else none. When writing to
 * ZooKeeper its version is read in any case: it is the compare-and-set's expectation.
 */
int
rb_load_assignment(struct rb_run *r)
{
    char err[256];
    char *zk_text = NULL;
    size_t zk_len = 0;
    int rc;

    r->version = -1;
    rc = rl_assignment_init(&r->current, r->conf->shards);
    if (rc != 0) {
        return rb_fail("out of memory");
    }
    if (r->conf->zookeeper[0] != '\0' &&
        (r->target == RB_TARGET_ZK || r->o.assignment_file == NULL)) {
        rc = rb_zk_connect(r);
        if (rc != 0) {
            return rc;
        }
        rc = rl_zkm_get_assignment(r->zkm, &zk_text, &zk_len, &r->version, r->o.timeout_ms);
        if (rc != 0) {
            return rb_fail("cannot read the assignment from ZooKeeper %s: %s", r->conf->zookeeper,
                           rb_zk_error(rc));
        }
    }
    if (r->o.assignment_file != NULL) {
        free(zk_text);
        rc = rl_file_read_small(r->o.assignment_file, RB_SMALL_FILE_MAX, &r->cur_text, &r->cur_len);
        if (rc != 0) {
            return rb_fail("cannot read %s: %s", r->o.assignment_file, rl_file_strerror(rc));
        }
        if (rl_assignment_parse(&r->current, r->cur_text, r->cur_len, err, sizeof(err)) != 0) {
            fprintf(stderr, "rl-rebalance: %s: %s\n", r->o.assignment_file, err);
            return RB_EXIT_USAGE;
        }
        snprintf(r->assignment_from, sizeof(r->assignment_from), "from %s", r->o.assignment_file);
        return 0;
    }
    r->cur_text = zk_text;
    r->cur_len = zk_len;
    if (r->version == -1) {
        snprintf(r->assignment_from, sizeof(r->assignment_from), "%s",
                 r->conf->zookeeper[0] != '\0' ? "none in ZooKeeper yet" : "none");
        return 0;
    }
    snprintf(r->assignment_from, sizeof(r->assignment_from), "ZooKeeper version %" PRId64,
             r->version);
    if (r->cur_len > 0 &&
        rl_assignment_parse(&r->current, r->cur_text, r->cur_len, err, sizeof(err)) != 0) {
        /* Routers ignore an assignment that does not parse, so in force is none. */
        fprintf(stderr,
                "rl-rebalance: warning: the assignment in ZooKeeper (version %" PRId64
                ") does not parse (%s); routers ignore it, and so does this plan\n",
                r->version, err);
    }
    return 0;
}

/*
 * Writes text to FILE, and first what it replaces to FILE.prev: the old FILE, or when there
 * was none an assignment with no overrides (what was in force then, as far as the file
 * knows), so a rollback always has something to go back to.
 */
int
rb_write_file(const struct rb_run *r, const char *text, size_t len, bool *had_old)
{
    char prev[4096], *old = NULL;
    size_t oldlen;
    int rc;

    *had_old = false;
    if ((size_t)snprintf(prev, sizeof(prev), "%s.prev", r->o.out) >= sizeof(prev)) {
        return rb_fail("%s: name too long", r->o.out);
    }
    rc = rl_file_read_small(r->o.out, RB_SMALL_FILE_MAX, &old, &oldlen);
    if (rc == -ENOENT) {
        old = empty_assignment(r->conf->shards, &oldlen);
        rc = old != NULL ? 0 : -ENOMEM;
    } else if (rc == 0) {
        *had_old = true;
    }
    if (rc != 0) {
        return rb_fail("cannot read %s: %s; nothing was written", r->o.out, rl_file_strerror(rc));
    }
    rc = rl_file_write_atomic(prev, old, oldlen);
    free(old);
    if (rc != 0) {
        return rb_fail("cannot write %s: %s; nothing was written", prev, strerror(-rc));
    }
    rc = rl_file_write_atomic(r->o.out, text, len);
    if (rc != 0) {
        return rb_fail("cannot write %s: %s", r->o.out, strerror(-rc));
    }
    return 0;
}

/* Says that the assignment moved from version `was` to `now` (-1 none, -2 unknown). */
static int
conflict(int64_t was, int64_t now)
{
    char a[32], b[32];

    snprintf(a, sizeof(a), "%" PRId64, was);
    snprintf(b, sizeof(b), "%" PRId64, now);
    fprintf(stderr,
            "rl-rebalance: the assignment changed while this ran (version %s -> %s); nothing was "
            "written; run again\n",
            was == -1 ? "none" : a,
            now == -1   ? "none"
            : now == -2 ? "unknown"
                        : b);
    return RB_EXIT_CONFLICT;
}

/* The CAS of text over the version read at start; prints the outcome. */
int
rb_write_zk(struct rb_run *r, const char *text, size_t len, int64_t *new_version)
{
    char *now = NULL;
    size_t nowlen;
    int64_t v = -1;
    int rc;

    rc = rl_zkm_set_assignment(r->zkm, text, len, r->version, new_version, r->o.timeout_ms);
    if (rc == -EAGAIN) {
        if (rl_zkm_get_assignment(r->zkm, &now, &nowlen, &v, r->o.timeout_ms) != 0) {
            v = -2;
        }
        free(now);
        return conflict(r->version, v);
    }
    if (rc == -EMSGSIZE) {
        return rb_fail("the assignment is %zu bytes, more than ZooKeeper takes (%u): nothing was "
                       "written",
                       len, RL_ZKM_DATA_MAX);
    }
    if (rc == -ECONNRESET) {
        return rb_fail("the connection to ZooKeeper broke while writing: the write may or may not "
                       "have happened; read /ratelimiter/%s/assignment before running again",
                       r->conf->cluster_name);
    }
    if (rc != 0) {
        return rb_fail("cannot write the assignment to ZooKeeper %s: %s", r->conf->zookeeper,
                       rb_zk_error(rc));
    }
    return 0;
}

/* 0 when the assignment in ZooKeeper is still at the version read at start. */
int
rb_check_version(const struct rb_run *r)
{
    char *now = NULL;
    size_t nowlen;
    int64_t v;
    int rc = rl_zkm_get_assignment(r->zkm, &now, &nowlen, &v, r->o.timeout_ms);

    free(now);
    if (rc != 0) {
        return rb_fail("cannot read the assignment from ZooKeeper %s: %s", r->conf->zookeeper,
                       rb_zk_error(rc));
    }
    if (v != r->version) {
        return conflict(r->version, v);
    }
    return 0;
}

int
rb_read_prev(struct rb_run *r, char **text, size_t *len, int64_t *pv, char *path, size_t pathlen)
{
    char err[256];
    int rc;

    *text = NULL;
    *len = 0;
    *pv = -1;
    if (r->target == RB_TARGET_FILE) {
        char *cur = NULL;
        size_t clen;

        snprintf(path, pathlen, "%s.prev", r->o.out);
        rc = rl_file_read_small(path, RB_SMALL_FILE_MAX, text, len);
        if (rc != 0) {
            return rb_fail("cannot read %s: %s; nothing to roll back to", path,
                           rl_file_strerror(rc));
        }
        /* In force, as far as this file goes: its own text. */
        rc = rl_file_read_small(r->o.out, RB_SMALL_FILE_MAX, &cur, &clen);
        if (rc == 0 && rl_assignment_parse(&r->current, cur, clen, err, sizeof(err)) != 0) {
            fprintf(stderr, "rl-rebalance: warning: %s: %s; taken as no overrides\n", r->o.out,
                    err);
        }
        free(cur);
        if (rc != 0 && rc != -ENOENT) {
            return rb_fail("cannot read %s: %s", r->o.out, rl_file_strerror(rc));
        }
        snprintf(r->assignment_from, sizeof(r->assignment_from), "%s", r->o.out);
        return 0;
    }
    rc = rl_zkm_get_assignment_prev(r->zkm, text, len, pv, r->o.timeout_ms);
    if (rc != 0) {
        return rb_fail("cannot read assignment.prev from ZooKeeper %s: %s", r->conf->zookeeper,
                       rb_zk_error(rc));
    }
    snprintf(path, pathlen, "/ratelimiter/%s/assignment.prev", r->conf->cluster_name);
    if (*pv == -1) {
        if (r->version == -1) {
            return rb_fail("there is no assignment in ZooKeeper: nothing to roll back");
        }
        /* The first write created the assignment: before it there were no overrides. */
        free(*text);
        *text = empty_assignment(r->conf->shards, len);
        if (*text == NULL) {
            return rb_fail("out of memory");
        }
    }
    return 0;
}
