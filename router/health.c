/*
 * health: whether the router can route, and saying so when it cannot. Readiness (/readyz)
 * asks for a table in which every shard has an owner, and its reason names ZooKeeper when
 * the session is the cause. A router whose membership comes from ZooKeeper and that has no
 * session or no members answers every CHECK by failure policy (with failure = open, only
 * the router's backstop limits; with open_unlimited, nothing): it says so at warn RL_ROUTER_FIRST_WARN_MS after it started (or after it lost
 * them), then every RL_ROUTER_WARN_MS while it lasts, naming the address it tries. Not for
 * the ZooKeeper session itself (zkm.h) or the metrics (rmetrics.c).
 */
#include <stdio.h>

#include "log.h"
#include "router_int.h"
#include "zkm.h"

#define HEALTH_TICK_MS 1000u /* how often the session and the membership are looked at */

/* Whether the router has no membership from ZooKeeper to route by: no session, or no members. */
static bool
health_zk_lacking(const struct rl_router *r)
{
    return r->zk_state != RL_ROUTER_ZK_NONE &&
           (r->zk_state != RL_ZKM_CONNECTED || r->view.nmembers == 0);
}

/* The router lacks a membership from ZooKeeper since now: the first warning comes
 * RL_ROUTER_FIRST_WARN_MS from now, the next ones every RL_ROUTER_WARN_MS. */
static void
health_lacking_since(struct rl_router *r, uint64_t now)
{
    r->unhealthy_since = now;
    r->health_warned = now - (RL_ROUTER_WARN_MS - RL_ROUTER_FIRST_WARN_MS);
}

static void
health_tick(uv_timer_t *t)
{
    struct rl_router *r = t->data;
    uint64_t now = uv_now(r->loop);

    if (!health_zk_lacking(r)) {
        r->unhealthy_since = 0;
        return;
    }
    if (r->unhealthy_since == 0) {
        health_lacking_since(r, now);
    }
    if (now - r->health_warned < RL_ROUTER_WARN_MS || r->worker > 0) {
        return; /* of a process's workers, the first one says it */
    }
    r->health_warned = now;
    if (r->zk_state != RL_ZKM_CONNECTED) {
        if (r->view.nmembers == 0) {
            rl_log_warn("ZooKeeper at %s not reachable for %llu s (session %s): no members, so "
                        "every CHECK is answered by its service's failure policy (with "
                        "failure = open: the router's backstop)",
                        r->zk_addr, (unsigned long long)((now - r->unhealthy_since) / 1000),
                        rl_zkm_state_name((enum rl_zkm_state)r->zk_state));
        } else {
            rl_log_warn("ZooKeeper at %s not reachable for %llu s (session %s): routing by the "
                        "last membership seen (%zu nodes), which may be stale",
                        r->zk_addr, (unsigned long long)((now - r->unhealthy_since) / 1000),
                        rl_zkm_state_name((enum rl_zkm_state)r->zk_state), r->view.nmembers);
        }
    } else {
        rl_log_warn("no node registered in ZooKeeper at %s (cluster %s) for %llu s: every CHECK "
                    "is answered by its service's failure policy",
                    r->zk_addr, r->conf->cluster_name,
                    (unsigned long long)((now - r->unhealthy_since) / 1000));
    }
}

void
rl_router_set_zookeeper(struct rl_router *r, const char *addr, int state)
{
    if (r->closing) {
        return;
    }
    r->zk_expiries += state == RL_ZKM_EXPIRED; /* a worker's: rproc counts the process's */
    if (r->zk_state == RL_ROUTER_ZK_NONE) {
        snprintf(r->zk_addr, sizeof(r->zk_addr), "%s", addr);
        uv_timer_init(r->loop, &r->health_timer);
        r->health_timer.data = r;
        rl_router_hold(r);
        health_lacking_since(r, uv_now(r->loop));
        uv_timer_start(&r->health_timer, health_tick, HEALTH_TICK_MS, HEALTH_TICK_MS);
    }
    r->zk_state = state;
}

void
rl_health_close(struct rl_router *r)
{
    if (r->zk_state != RL_ROUTER_ZK_NONE) {
        uv_close((uv_handle_t *)&r->health_timer, rl_router_handle_closed);
    }
}

bool
rl_router_ready(const struct rl_router *r, char *why, size_t len)
{
    char zk[400] = "";

    if (r->closing) {
        snprintf(why, len, "shutting down");
        return false;
    }
    if (r->zk_state != RL_ROUTER_ZK_NONE && r->zk_state != RL_ZKM_CONNECTED) {
        snprintf(zk, sizeof(zk), "ZooKeeper at %s not reachable (session %s): ", r->zk_addr,
                 rl_zkm_state_name((enum rl_zkm_state)r->zk_state));
    }
    if (r->map == NULL || r->map->nmembers == 0) {
        if (r->zk_state == RL_ZKM_CONNECTED) {
            snprintf(why, len, "no members: no node is registered in ZooKeeper at %s (cluster %s)",
                     r->zk_addr, r->conf->cluster_name);
        } else {
            snprintf(why, len, "%sno members: no shard has an owner", zk);
        }
        return false;
    }
    if (r->unowned > 0) {
        snprintf(why, len, "%s%u of %u shards have no owner", zk, r->unowned, r->conf->shards);
        return false;
    }
    return true;
}
