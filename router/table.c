/*
 * table: where the router sends each shard. Membership and assignment (from ZooKeeper or
 * the static [node] list) are kept in a view (shardmap.h) and rebuilt into the shard table
 * at each change, keeping the connections of the members that stay (upstream.h) and retiring
 * those of the members that left, without dropping a request in flight. Rules replaced live
 * are kept until no request from before the swap can still point into them. Not for the
 * routing of one request (forward.c).
 */
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "utf8.h"
#include "router_int.h"

static struct rl_upstream *
upstream_find(struct rl_router *r, const char *name)
{
    for (struct rl_upstream *u = r->upstreams; u != NULL; u = u->next) {
        if (strcmp(u->name, name) == 0) {
            return u;
        }
    }
    return NULL;
}

static void
upstream_unlink(struct rl_router *r, struct rl_upstream *u)
{
    struct rl_upstream **pp = &r->upstreams;

    while (*pp != u) {
        pp = &(*pp)->next;
    }
    *pp = u->next;
}

static void
router_rebuild(struct rl_router *r)
{
    struct rl_shardmap *map;
    struct rl_upstream **owners;
    struct rl_upstream_ops ops = r->up_ops; /* router.c's: a node's replies go to forward.c */
    char err[128];

    ops.secret = r->conf->secret;
    ops.secret_len = r->conf->secret_len;
    ops.on_rules = rl_shed_on_rules;
    ops.deadline_ms = r->conf->deadline_ms; /* for the stall bound (RL_UPSTREAM_STALL_MIN_MS) */
    if (rl_view_build(&map, r->conf->shards, &r->view, err, sizeof(err)) != 0) {
        rl_log_error("cannot build the shard table: out of memory; keeping the old one");
        return;
    }
    if (err[0] != '\0') {
        rl_log_warn("assignment version %lld ignored: %s", (long long)r->view.asg_version, err);
    }
    owners = calloc(map->nmembers ? map->nmembers : 1, sizeof(*owners));
    if (owners == NULL) {
        rl_shardmap_destroy(map);
        return;
    }
    /* Keep the connections of members that stay at the same address. */
    for (size_t i = 0; i < map->nmembers; i++) {
        struct rl_upstream *u = upstream_find(r, map->members[i].name);

        if (u != NULL && strcmp(u->addr, map->members[i].addr) != 0) {
            upstream_unlink(r, u);
            rl_forward_unqueue(r, u);
            rl_upstream_retire(u);
            u = NULL;
        }
        if (u == NULL) {
            if (rl_upstream_create(&u, &r->connq, map->members[i].name, map->members[i].addr,
                                   &ops) != 0) {
                char shown[4 * sizeof(map->members[i].addr)];

                /* a member znode's data, anyone's without the cluster secret: escaped */
                rl_utf8_escape(shown, sizeof(shown), map->members[i].addr,
                               strlen(map->members[i].addr), 0);
                rl_log_warn("node %s: bad address \"%s\"", map->members[i].name, shown);
                /* Keep a placeholder-free table: route its shards by failure policy. */
                continue;
            }
            u->next = r->upstreams;
            r->upstreams = u;
            rl_shed_upstream(r, u);
        } else if (!rl_upstream_up(u)) {
            rl_upstream_kick(u);
        }
        owners[i] = u;
    }
    for (size_t i = 0; i < map->nmembers; i++) {
        if (owners[i] == NULL) {
            for (uint32_t s = 0; s < map->nshards; s++) {
                if (map->owner[s] == i) {
                    map->owner[s] = RL_SHARDMAP_NONE;
                }
            }
        }
    }
    /* Retire the nodes that left; their requests in flight are answered by policy (with
     * ZooKeeper: held and sent to the new owners, forward.c, as a clean stop left). */
    for (struct rl_upstream *u = r->upstreams, *next; u != NULL; u = next) {
        bool live = false;

        next = u->next;
        for (size_t i = 0; i < map->nmembers; i++) {
            live = live || owners[i] == u;
        }
        if (!live) {
            rl_log_info("node %s left the membership", u->name);
            upstream_unlink(r, u);
            rl_forward_unqueue(r, u);
            rl_upstream_retire(u);
        }
    }
    rl_shed_table(r, map, owners);
    rl_shardmap_destroy(r->map);
    free(r->owners);
    r->map = map;
    r->owners = owners;
    /* Of the table as routed: a member without an upstream owns nothing in it (above). */
    r->table_digest = rl_shardmap_digest_stat(map);
    r->stats.table_builds++;
    r->unowned = 0;
    for (uint32_t sh = 0; sh < map->nshards; sh++) {
        r->unowned += map->owner[sh] == RL_SHARDMAP_NONE;
    }
    {
        uint32_t max;
        double mean;

        rl_shardmap_balance(map, &max, &mean);
        rl_log_info("shard table rebuilt: %zu members, assignment version %lld, max/mean %.2f",
                    map->nmembers, (long long)r->view.asg_version, mean > 0 ? max / mean : 0.0);
    }
}

void
rl_router_set_members(struct rl_router *r, const struct rl_member *members, size_t n)
{
    if (r->closing) {
        return;
    }
    pthread_mutex_lock(&r->mu);
    if (rl_view_set_members(&r->view, members, n) != 0) {
        pthread_mutex_unlock(&r->mu);
        rl_log_error("membership update lost: out of memory");
        return;
    }
    router_rebuild(r);
    pthread_mutex_unlock(&r->mu);
}

void
rl_router_set_assignment(struct rl_router *r, const char *text, size_t len, int64_t version)
{
    if (r->closing) {
        return;
    }
    pthread_mutex_lock(&r->mu);
    if (rl_view_set_assignment(&r->view, text, len, version) != 0) {
        pthread_mutex_unlock(&r->mu);
        rl_log_error("assignment update lost: out of memory");
        return;
    }
    router_rebuild(r);
    pthread_mutex_unlock(&r->mu);
}

/* Frees the oldest retired rules. */
static void
retired_pop(struct rl_router *r)
{
    struct router_retired *x = r->retired;

    r->retired = x->next;
    rl_conf_destroy(x->conf);
    free(x);
}

/* Frees the retired rules no request in flight can point to: every request created before a
 * swap has a deadline at or before the swap's `until`, and leaves the FIFO by then; but one a
 * node answered MOVING may be sent again until handoff_wait past its first send (so leaves by
 * until + handoff_wait): while any such is in flight (nmoving), that bound holds. */
void
rl_table_retire_fire(uv_timer_t *t)
{
    struct rl_router *r = t->data;
    uint64_t now = uv_now(r->loop);

    while (r->retired != NULL && r->retired->until < now &&
           (r->fifo_head == NULL || r->fifo_head->deadline > r->retired->until) &&
           (r->nmoving == 0 || r->retired->until + r->conf->handoff_wait_ms < now)) {
        retired_pop(r);
    }
    if (r->retired != NULL) {
        /* (past until: requests still in flight from before the swap; look again soon) */
        uint64_t wait = r->retired->until >= now ? r->retired->until - now + 1 : 5;

        uv_timer_start(&r->retire_timer, rl_table_retire_fire, wait, 0);
    }
}

/*
 * The metrics' answers per rule follow the new rules: a rule of the same service and
 * endpoint keeps its counts, a new one starts at zero, a removed one's go (its series ends).
 * Out of memory, the old counts are kept only where they fit. A worker's caller holds r->mu
 * (rules.h's lock).
 */
static void
router_recount_rules(struct rl_router *r, const struct rl_conf *old)
{
    const struct rl_conf *c = r->conf;
    uint64_t(*codes)[RL_WIRE_CODE_COUNT] = calloc(c->nrules + 1, sizeof(*codes));

    if (codes == NULL) {
        /* Keep the old rows: counts land where the rule ids still fit, metrics show what
         * the rows hold. */
        rl_log_error("out of memory: the per-service answer counts may be wrong until a "
                     "restart");
        return;
    }
    for (size_t i = 0; i < c->nrules; i++) {
        const struct rl_rule *n = &c->rules[i];
        /* the old rules' own index: O(1) a rule, not O(old rules) */
        const struct rl_rule *o =
            rl_ruleset_find(old, n->service, n->service_len, n->endpoint, n->endpoint_len);

        if (o != NULL && (size_t)o->id + 1 < r->rule_rows) {
            memcpy(codes[i], r->rule_codes[o->id], sizeof(codes[i]));
        }
    }
    memcpy(codes[c->nrules], r->rule_codes[r->rule_rows - 1], sizeof(codes[c->nrules]));
    free(r->rule_codes);
    r->rule_codes = codes;
    r->rule_rows = c->nrules + 1;
}

void
rl_router_rules_changed(struct rl_router *r, struct rl_conf *old)
{
    struct router_retired *x, **pp;

    if (old == NULL) {
        return;
    }
    router_recount_rules(r, old);
    rl_shed_rules(r, old);
    if (r->npending == 0 || r->closing) {
        rl_conf_destroy(old);
        return;
    }
    x = calloc(1, sizeof(*x));
    if (x == NULL) {
        /* Never free rules a request may still read: keep them for good. */
        rl_log_error("out of memory: the replaced rules are kept until exit");
        return;
    }
    x->conf = old;
    x->until = uv_now(r->loop) + r->conf->deadline_ms;
    for (pp = &r->retired; *pp != NULL; pp = &(*pp)->next) {
    }
    *pp = x;
    if (!uv_is_active((uv_handle_t *)&r->retire_timer)) {
        uv_timer_start(&r->retire_timer, rl_table_retire_fire, r->conf->deadline_ms + 1, 0);
    }
}

void
rl_table_close(struct rl_router *r)
{
    pthread_mutex_lock(&r->mu);
    while (r->upstreams != NULL) {
        struct rl_upstream *u = r->upstreams;

        r->upstreams = u->next;
        rl_upstream_retire(u);
    }
    pthread_mutex_unlock(&r->mu);
}

void
rl_table_deinit(struct rl_router *r)
{
    rl_shardmap_destroy(r->map);
    r->map = NULL;
    free(r->owners);
    r->owners = NULL;
    rl_view_deinit(&r->view);
    while (r->retired != NULL) {
        retired_pop(r);
    }
}
