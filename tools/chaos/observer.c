/*
 * observer: the membership timeline, as ZooKeeper tells it. A thread with its own libuv loop
 * watches the cluster's members and assignment with the same zkm module the routers use and,
 * on every change, builds the table the routers should build (rl_view_build), and
 * appends a view (time, members, owner of every shard, digest) to the run. It connects to
 * ZooKeeper directly, never through a fault proxy, so it sees what the cluster's
 * coordinator decided, not what one cut-off node believes. It writes to the run's record
 * (run.c) and calls nothing else of rl-chaos.
 */
#include "chaos.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "shardmap.h"
#include "view.h"
#include "zkm.h"

struct ch_observer {
    struct ch_run *run;
    uv_loop_t loop;
    uv_async_t stop;
    struct rl_zkm *zkm;
    struct rl_view view;
    pthread_t thread;
};

static void
publish(struct ch_observer *o)
{
    struct ch_run *r = o->run;
    const struct ch_scenario *sc = r->sc;
    struct rl_shardmap *map;
    struct ch_view *v;
    uint8_t node_of[64];
    char err[128], names[128] = "";

    if (rl_view_build(&map, sc->shards, &o->view, err, sizeof(err)) != 0) {
        return;
    }
    pthread_mutex_lock(&r->lock);
    if (r->nviews == CH_VIEWS_MAX) {
        pthread_mutex_unlock(&r->lock);
        rl_shardmap_destroy(map);
        return;
    }
    v = &r->views[r->nviews];
    memset(v, 0, sizeof(*v));
    v->owner = malloc(sc->shards);
    if (v->owner == NULL) {
        pthread_mutex_unlock(&r->lock);
        rl_shardmap_destroy(map);
        return;
    }
    v->t_ms = ch_now_ms();
    v->digest = (uint64_t)rl_shardmap_digest_stat(map); /* as STATS reports it */
    v->asg_version = o->view.asg_version;
    for (size_t i = 0; i < map->nmembers && i < 64; i++) {
        node_of[i] = CH_NONE;
        for (int k = 0; k < sc->nodes; k++) {
            if (strcmp(map->members[i].name, ch_node_name(k)) == 0) {
                node_of[i] = (uint8_t)k;
                v->members |= (uint8_t)(1u << k);
                v->since[k] = map->members[i].since;
                v->nmembers++;
                snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
                         names[0] != '\0' ? "," : "", map->members[i].name);
            }
        }
    }
    for (uint32_t s = 0; s < sc->shards; s++) {
        uint32_t m = rl_shardmap_owner(map, s);

        v->owner[s] = m == RL_SHARDMAP_NONE || m >= 64 ? CH_NONE : node_of[m];
    }
    r->nviews++;
    pthread_mutex_unlock(&r->lock);
    ch_event(r, "zookeeper: members {%s}, assignment version %lld", names,
             (long long)o->view.asg_version);
    rl_shardmap_destroy(map);
}

static void
on_members(void *arg, const struct rl_member *members, size_t n)
{
    struct ch_observer *o = arg;

    if (rl_view_set_members(&o->view, members, n) == 0) {
        publish(o);
    }
}

static void
on_assignment(void *arg, const char *text, size_t len, int64_t version)
{
    struct ch_observer *o = arg;

    if (rl_view_set_assignment(&o->view, text, len, version) == 0) {
        publish(o);
    }
}

/* The observer's own session: while it is not connected, the timeline is blind. */
static void
on_state(void *arg, enum rl_zkm_state state)
{
    struct ch_observer *o = arg;
    struct ch_run *r = o->run;
    int64_t now = ch_now_ms();

    pthread_mutex_lock(&r->lock);
    if (state != RL_ZKM_CONNECTED && (r->nblind == 0 || r->blind_to[r->nblind - 1] != INT64_MAX) &&
        r->nblind < 64) {
        r->blind_from[r->nblind] = now;
        r->blind_to[r->nblind++] = INT64_MAX;
    } else if (state == RL_ZKM_CONNECTED && r->nblind > 0 &&
               r->blind_to[r->nblind - 1] == INT64_MAX) {
        r->blind_to[r->nblind - 1] = now;
    }
    pthread_mutex_unlock(&r->lock);
    ch_event(r, "observer's ZooKeeper session: %s", rl_zkm_state_name(state));
}

static void
on_stop(uv_async_t *a)
{
    struct ch_observer *o = a->data;

    rl_zkm_destroy(o->zkm);
    o->zkm = NULL;
    uv_close((uv_handle_t *)a, NULL);
}

static void *
observer_main(void *arg)
{
    struct ch_observer *o = arg;

    uv_run(&o->loop, UV_RUN_DEFAULT);
    return NULL;
}

int
ch_observer_start(struct ch_observer **out, struct ch_run *r, const char *zk_connect,
                  const char *cluster)
{
    static const struct rl_zkm_cbs cbs = {on_members, on_assignment, on_state, NULL, NULL, NULL, NULL};
    struct ch_observer *o = calloc(1, sizeof(*o));
    int rc;

    *out = NULL;
    if (o == NULL) {
        return -ENOMEM;
    }
    o->run = r;
    o->view.asg_version = -1;
    if ((rc = uv_loop_init(&o->loop)) != 0) {
        free(o);
        return rc;
    }
    uv_async_init(&o->loop, &o->stop, on_stop);
    o->stop.data = o;
    rc = rl_zkm_create(&o->zkm, &o->loop, zk_connect, (uint32_t)r->sc->session_timeout_ms,
                       cluster, &cbs, o);
    if (rc == 0) {
        rc = rl_zkm_watch(o->zkm);
    }
    if (rc != 0 || pthread_create(&o->thread, NULL, observer_main, o) != 0) {
        rl_zkm_destroy(o->zkm);
        uv_close((uv_handle_t *)&o->stop, NULL);
        uv_run(&o->loop, UV_RUN_DEFAULT);
        uv_loop_close(&o->loop);
        free(o);
        return rc != 0 ? rc : -EAGAIN;
    }
    *out = o;
    return 0;
}

void
ch_observer_stop(struct ch_observer *o)
{
    if (o == NULL) {
        return;
    }
    uv_async_send(&o->stop);
    pthread_join(o->thread, NULL);
    uv_loop_close(&o->loop);
    rl_view_deinit(&o->view);
    free(o);
}
