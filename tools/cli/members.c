/*
 * members: the cluster as rl-cli reads it for hash, rules and status: a ZooKeeper session
 * of its own (blocking calls, each bounded by a wait of a few seconds, so an unreachable
 * ensemble is said at once rather than waited for), and the membership: the [node]
 * sections with static membership, or the live members and the assignment in ZooKeeper.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"
#include "zkadmin.h"

#include "cli.h"

int
cli_zk_open(struct cli_zk *zk, const struct rl_conf *conf, int wait_ms)
{
    static const struct rl_zkm_cbs no_cbs = {NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    int rc;

    zk->z = NULL;
    zk->wait_ms = wait_ms;
    uv_loop_init(&zk->loop);
    rc = rl_zkm_create(&zk->z, &zk->loop, conf->zookeeper, conf->session_timeout_ms,
                       conf->cluster_name, &no_cbs, NULL);
    if (rc == 0) {
        rl_zkm_secure(zk->z, conf->secret, conf->secret_len);
    }
    return rc;
}

void
cli_zk_close(struct cli_zk *zk)
{
    rl_zkm_destroy(zk->z);
    zk->z = NULL;
    uv_run(&zk->loop, UV_RUN_DEFAULT);
    uv_loop_close(&zk->loop);
}

/* The [node] sections as members. */
static int
members_static(const struct rl_conf *conf, struct cli_members *m)
{
    m->v = calloc(conf->nnodes ? conf->nnodes : 1, sizeof(*m->v));
    if (m->v == NULL) {
        snprintf(m->why, sizeof(m->why), "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < conf->nnodes; i++) {
        uint16_t port;
        const char *host = rl_conf_node_dial(&conf->nodes[i], &port);

        snprintf(m->v[i].name, sizeof(m->v[i].name), "%s", conf->nodes[i].name);
        rl_format_hostport(m->v[i].addr, sizeof(m->v[i].addr), host, port);
    }
    m->n = conf->nnodes;
    m->from = "static membership, the [node] sections";
    return 0;
}

int
cli_zk_wait_ms(const struct cli *o)
{
    return o->timeout_ms > CLI_ZK_WAIT_MS ? o->timeout_ms : CLI_ZK_WAIT_MS;
}

/* The members and the assignment in ZooKeeper, through zk. */
static int
members_zk(const struct rl_conf *conf, struct cli_zk *zk, struct cli_members *m)
{
    char *text = NULL, err[256];
    size_t len = 0;
    int64_t version = -1;
    int rc;

    rc = rl_zkm_read_members(zk->z, &m->v, &m->n, zk->wait_ms);
    if (rc == 0) {
        rc = rl_zkm_get_assignment(zk->z, &text, &len, &version, zk->wait_ms);
    }
    if (rc == -ETIMEDOUT) {
        snprintf(m->why, sizeof(m->why), "ZooKeeper at %s is unreachable (no session in %d ms)",
                 conf->zookeeper, zk->wait_ms);
    } else if (rc != 0) {
        snprintf(m->why, sizeof(m->why), "cannot read the membership from ZooKeeper at %s: %s",
                 conf->zookeeper, strerror(-rc));
    }
    if (rc != 0) {
        free(text);
        return rc;
    }
    if (len > 0 && rl_assignment_parse(&m->a, text, len, err, sizeof(err)) == 0) {
        m->have_a = true;
    } else if (len > 0) {
        fprintf(stderr, "rl-cli: warning: the assignment in ZooKeeper does not parse (%s); "
                        "routers ignore it, and so does this answer\n", err);
    }
    free(text);
    m->from = m->have_a ? "live members and assignment in ZooKeeper" : "live members in ZooKeeper";
    return 0;
}

int
cli_members_read(const struct cli *o, const struct rl_conf *conf, struct cli_zk *zk,
                 struct cli_members *m)
{
    struct cli_zk own;
    int rc;

    memset(m, 0, sizeof(*m));
    m->from = "";
    if (rl_assignment_init(&m->a, conf->shards) != 0) {
        snprintf(m->why, sizeof(m->why), "out of memory");
        return -ENOMEM;
    }
    if (conf->zookeeper[0] == '\0') {
        return members_static(conf, m);
    }
    if (zk != NULL) {
        return members_zk(conf, zk, m);
    }
    rc = cli_zk_open(&own, conf, cli_zk_wait_ms(o));
    if (rc == 0) {
        rc = members_zk(conf, &own, m);
    } else {
        snprintf(m->why, sizeof(m->why), "ZooKeeper at %s: %s", conf->zookeeper, strerror(-rc));
    }
    cli_zk_close(&own);
    return rc;
}

void
cli_members_free(struct cli_members *m)
{
    free(m->v);
    m->v = NULL;
    rl_assignment_deinit(&m->a);
}
