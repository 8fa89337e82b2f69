/*
 * rl-cli status: one screen on the cluster for an operator (docs/OPERATIONS.md, "Cluster
 * status"). Asks the router (--target) for its STATS, reads the membership and the
 * assignment (ZooKeeper, or the [node] sections with static membership) when --config is
 * given, and asks every member for its STATS twice, --interval-ms apart, for its rate of
 * decisions. Prints a table, or one JSON object with --json (common/json.h). Each router is
 * named one way (its name in ZooKeeper when it is announced there). An unreachable ZooKeeper
 * is said as the reason, with its address, after a wait of a few seconds (CLI_ZK_WAIT_MS),
 * and nodes it would have told about are "unknown", never "up". Exit status 0 when the
 * router answered and every member expected is there and answered, 1 otherwise (the screen
 * still says what it could), 2 for a bad config.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "json.h"
#include "tls.h"
#include "zkadmin.h"

#include "cli.h"

#define STATUS_STATS_KEYS 10

/* The figures of one node, as its own STATS say. */
struct status_node {
    char name[RL_SHARDMAP_NAME_MAX];
    char addr[128];
    bool member;    /* in the membership read (ZooKeeper or [node] sections) */
    bool expected;  /* a [node] section of the config */
    bool answered;  /* its STATS came (both samples) */
    char why[160];  /* why not */
    int64_t keys, memory, checks0, checks1, uptime, registered, zk_state, rules_version;
    int64_t table_digest;
    /* shards in flight on it (its STATS shards_incoming, shards_outgoing; -1: a node that
     * does not say, one from before automatic handoff) */
    int64_t incoming, outgoing;
    uint8_t state; /* its member state (shardmap.h: active, joining, leaving) */
    double rate; /* decisions/s between the samples */
    uint64_t t0, t1;
    /* the router's view of it */
    bool in_router;
    int64_t r_up, r_shards, r_forwarded, r_failures;
    uint32_t shards; /* in the table built here */
    struct rl_client *c;
};

struct status {
    const struct cli *o;
    const struct rl_conf *conf;
    struct rl_tls_ctx *tls;      /* to the members: --tls-* or the config's tls_* files */
    struct rl_tls_ctx *tls_own;  /* built here from the config: freed at the end */
    struct status_node *nodes;
    size_t n, cap;
    struct rl_wire_reply *rep; /* the router's STATS, valid while its client is open */
    struct status_stat {
        char key[160];
        int64_t val;
    } *rstats; /* a copy of them, for after */
    size_t nrstats;
    bool router_ok;
    char router_name[128]; /* the one name of the router asked */
    char router_why[330];
    int64_t router_zk; /* its zk_state: -1 static membership, 0 connected, 1 connecting... */
    int64_t asg_version;
    size_t overrides;
    bool have_members;
    const char *from;
    char members_why[320]; /* why the membership is unknown (with --config) */
    struct rl_member *routers; /* announced in ZooKeeper (routers/); NULL: none or static */
    size_t nrouters;
    bool have_routers;
    size_t asked; /* routers[asked] is the one asked; nrouters when none is */
};

static struct status_node *
status_node(struct status *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++) {
        if (strcmp(s->nodes[i].name, name) == 0) {
            return &s->nodes[i];
        }
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        struct status_node *nn = realloc(s->nodes, cap * sizeof(*nn));

        if (nn == NULL) {
            return NULL;
        }
        s->nodes = nn;
        s->cap = cap;
    }
    memset(&s->nodes[s->n], 0, sizeof(s->nodes[s->n]));
    snprintf(s->nodes[s->n].name, sizeof(s->nodes[s->n].name), "%s", name);
    s->nodes[s->n].rules_version = -1;
    return &s->nodes[s->n++];
}

/* A value of the router's STATS, or def. */
static int64_t
router_stat(const struct status *s, const char *key, int64_t def)
{
    for (size_t i = 0; s->router_ok && i < s->nrstats; i++) {
        if (strcmp(s->rstats[i].key, key) == 0) {
            return s->rstats[i].val;
        }
    }
    return def;
}

/* The router's STATS, and its per-node keys (node.NAME.KEY). */
static void
status_router(struct status *s)
{
    struct rl_client *c = NULL;
    struct rl_wire_reply pr;
    int rc;

    s->rep = calloc(1, sizeof(*s->rep));
    if (s->rep == NULL) {
        snprintf(s->router_why, sizeof(s->router_why), "out of memory");
        return;
    }
    if (cli_connect(s->o, &c, s->router_why, sizeof(s->router_why)) != CLI_EXIT_OK) {
        return;
    }
    rc = rl_client_ping(c, &pr, s->o->timeout_ms);
    if (rc == 0 && pr.op == RL_WIRE_OP_PING) {
        snprintf(s->router_name, sizeof(s->router_name), "%.*s", (int)pr.name.len,
                 pr.name.ptr != NULL ? pr.name.ptr : "");
    }
    rc = rl_client_stats(c, s->rep, s->o->timeout_ms);
    if (rc != 0) {
        snprintf(s->router_why, sizeof(s->router_why), "%s", cli_errno_text(rc));
    } else if (s->rep->op != RL_WIRE_OP_STATS) {
        snprintf(s->router_why, sizeof(s->router_why), "answered STATS with ERROR %s: %.*s",
                 rl_wire_err_name(s->rep->err), (int)s->rep->message.len,
                 s->rep->message.ptr != NULL ? s->rep->message.ptr : "");
    } else {
        s->router_ok = true;
    }
    if (s->router_ok) {
        s->rstats = calloc(s->rep->nstats + 1, sizeof(*s->rstats));
        for (size_t i = 0; s->rstats != NULL && i < s->rep->nstats; i++) {
            snprintf(s->rstats[i].key, sizeof(s->rstats[i].key), "%.*s",
                     (int)s->rep->stat_keys[i].len, s->rep->stat_keys[i].ptr);
            s->rstats[i].val = s->rep->stat_vals[i];
        }
        s->nrstats = s->rstats != NULL ? s->rep->nstats : 0;
    }
    rl_client_destroy(c); /* the reply's strings were in its buffer */
    if (!s->router_ok) {
        return;
    }
    s->asg_version = router_stat(s, "assignment_version", -1);
    s->router_zk = router_stat(s, "zk_state", -2);
    for (size_t i = 0; i < s->nrstats; i++) {
        const char *key = s->rstats[i].key;
        char name[RL_SHARDMAP_NAME_MAX];
        const char *dot;
        struct status_node *nd;

        if (strncmp(key, "node.", 5) != 0) {
            continue;
        }
        dot = strrchr(key, '.');
        if (dot == NULL || dot <= key + 5 || (size_t)(dot - key - 5) >= sizeof(name)) {
            continue;
        }
        snprintf(name, sizeof(name), "%.*s", (int)(dot - key - 5), key + 5);
        nd = status_node(s, name);
        if (nd == NULL) {
            continue;
        }
        nd->in_router = true;
        if (strcmp(dot + 1, "up") == 0) {
            nd->r_up = s->rstats[i].val;
        } else if (strcmp(dot + 1, "shards") == 0) {
            nd->r_shards = s->rstats[i].val;
        } else if (strcmp(dot + 1, "forwarded") == 0) {
            nd->r_forwarded = s->rstats[i].val;
        } else if (strcmp(dot + 1, "failures") == 0) {
            nd->r_failures = s->rstats[i].val;
        }
    }
}

/* The membership and assignment of the config's cluster (through zk with ZooKeeper), and
 * the shards each member owns. Without them, members_why says why. */
static void
status_members(struct status *s, struct cli_zk *zk)
{
    struct rl_shardmap *map = NULL;
    struct cli_members m;

    for (size_t i = 0; i < s->conf->nnodes; i++) {
        struct status_node *nd = status_node(s, s->conf->nodes[i].name);

        if (nd != NULL) {
            nd->expected = true;
        }
    }
    if (cli_members_read(s->o, s->conf, zk, &m) != 0) {
        snprintf(s->members_why, sizeof(s->members_why), "%s", m.why);
        cli_members_free(&m);
        return;
    }
    s->have_members = true;
    s->from = m.from;
    for (uint32_t sh = 0; m.have_a && sh < m.a.nshards; sh++) {
        s->overrides += m.a.owner[sh][0] != '\0';
    }
    if (rl_shardmap_create(&map, s->conf->shards, m.v, m.n, m.have_a ? &m.a : NULL) == 0) {
        for (size_t i = 0; i < m.n; i++) {
            struct status_node *nd = status_node(s, m.v[i].name);

            if (nd == NULL) {
                continue;
            }
            nd->member = true;
            nd->state = m.v[i].state;
            snprintf(nd->addr, sizeof(nd->addr), "%s", m.v[i].addr);
            for (uint32_t sh = 0; sh < map->nshards; sh++) {
                nd->shards += map->owner[sh] == i;
            }
        }
    }
    rl_shardmap_destroy(map);
    cli_members_free(&m);
}

/* Whether an announced router is the one asked: the same name, or the same address (a
 * wildcard host announced matches any host on its port). */
static bool
router_is_asked(const struct status *s, const struct rl_member *r)
{
    const char *port = strrchr(r->addr, ':'), *tport = strrchr(s->o->target, ':');

    if (strcmp(r->name, s->router_name) == 0 || strcmp(r->addr, s->o->target) == 0) {
        return true;
    }
    return port != NULL && tport != NULL && strcmp(port, tport) == 0 &&
           (strncmp(r->addr, "0.0.0.0:", 8) == 0 || strncmp(r->addr, "[::]:", 5) == 0);
}

/* The routers announced in ZooKeeper (rl_zkm_announce_router), through zk; the router asked
 * takes its name there, so that it has one. */
static void
status_routers(struct status *s, struct cli_zk *zk)
{
    s->asked = 0;
    s->have_routers = rl_zkm_read_routers(zk->z, &s->routers, &s->nrouters, zk->wait_ms) == 0;
    if (!s->have_routers) {
        return;
    }
    while (s->asked < s->nrouters && !router_is_asked(s, &s->routers[s->asked])) {
        s->asked++;
    }
    if (s->router_ok && s->asked < s->nrouters) {
        snprintf(s->router_name, sizeof(s->router_name), "%s", s->routers[s->asked].name);
    }
}

/* With --config: the membership, the routers known, and ZooKeeper's state. */
static void
status_cluster(struct status *s)
{
    struct cli_zk zk = {.z = NULL};
    int rc = 0;

    if (s->conf->zookeeper[0] == '\0') {
        status_members(s, NULL);
        return;
    }
    rc = cli_zk_open(&zk, s->conf, cli_zk_wait_ms(s->o));
    if (rc == 0) {
        status_members(s, &zk);
    } else {
        snprintf(s->members_why, sizeof(s->members_why), "ZooKeeper at %s: %s",
                 s->conf->zookeeper, strerror(-rc));
    }
    /* Unreachable once is enough: no second wait for the routers. */
    if (s->have_members) {
        status_routers(s, &zk);
    }
    cli_zk_close(&zk);
}

/* One STATS sample of a member: the first connects (and AUTHs with the cluster secret). */
static void
status_sample(struct status *s, struct status_node *nd, struct rl_wire_reply *rep, bool first)
{
    int rc = 0;

    if (first) {
        rc = rl_client_connect_addr(&nd->c, nd->addr, s->o->timeout_ms);
        if (rc == 0 && s->tls != NULL) {
            char why[256];

            rc = rl_client_start_tls(nd->c, s->tls, s->o->timeout_ms, why, sizeof(why));
        }
        if (rc == 0 && s->conf->secret != NULL) {
            rc = rl_client_auth(nd->c, s->conf->secret, s->conf->secret_len, rep,
                                s->o->timeout_ms);
        }
    } else if (nd->c == NULL) {
        return;
    }
    if (rc == 0) {
        rc = rl_client_stats(nd->c, rep, s->o->timeout_ms);
    }
    if (rc == 0 && rep->op != RL_WIRE_OP_STATS) {
        snprintf(nd->why, sizeof(nd->why), "ERROR %s", rl_wire_err_name(rep->err));
        rc = -EPROTO;
    } else if (rc != 0) {
        snprintf(nd->why, sizeof(nd->why), "%s", cli_errno_text(rc));
    }
    if (rc != 0) {
        rl_client_destroy(nd->c);
        nd->c = NULL;
        nd->answered = false;
        return;
    }
    if (first) {
        nd->t0 = rl_clock_mono_ns();
        nd->checks0 = rl_client_stat(rep, "checks", 0);
        return;
    }
    nd->t1 = rl_clock_mono_ns();
    nd->answered = true;
    nd->checks1 = rl_client_stat(rep, "checks", 0);
    nd->keys = rl_client_stat(rep, "keys", 0);
    nd->memory = rl_client_stat(rep, "memory_bytes", 0);
    nd->uptime = rl_client_stat(rep, "uptime_ms", 0);
    nd->registered = rl_client_stat(rep, "registered", 0);
    nd->zk_state = rl_client_stat(rep, "zk_state", -1);
    nd->rules_version = rl_client_stat(rep, "rules_version", -1);
    nd->table_digest = rl_client_stat(rep, "table_digest", 0);
    nd->incoming = rl_client_stat(rep, "shards_incoming", -1);
    nd->outgoing = rl_client_stat(rep, "shards_outgoing", -1);
    nd->rate = nd->t1 > nd->t0 ? (double)(nd->checks1 - nd->checks0) * 1e9 /
                                     (double)(nd->t1 - nd->t0)
                               : 0.0;
}

/* What is wrong with a node, in a few words; "" when nothing is. */
static const char *
node_problem(const struct status *s, const struct status_node *nd)
{
    if (s->have_members && nd->expected && !nd->member) {
        return s->conf->zookeeper[0] != '\0' ? "missing: not registered in ZooKeeper"
                                             : "missing";
    }
    if (s->have_members && !nd->answered) {
        return "unreachable";
    }
    if (s->router_ok && nd->in_router && nd->r_up == 0) {
        return "router cannot reach it";
    }
    if (s->router_ok && s->have_members && nd->member && !nd->in_router) {
        return "not in the router's table";
    }
    if (!s->have_members && !(s->router_ok && nd->in_router)) {
        /* Nobody says whether it is up: neither the membership nor the router. */
        return s->members_why[0] != '\0' ? "unknown: ZooKeeper unreachable"
                                          : "unknown: not in the router's table";
    }
    return "";
}

/* Whether every process that reports a rules version reports the same; *version set to it. */
static bool
rules_agree(const struct status *s, int64_t *version)
{
    int64_t v = router_stat(s, "rules_version", -1);
    bool same = true;

    for (size_t i = 0; i < s->n; i++) {
        const struct status_node *nd = &s->nodes[i];

        if (!nd->answered || nd->rules_version < 0) {
            continue;
        }
        if (v < 0) {
            v = nd->rules_version;
        }
        same = same && nd->rules_version == v;
    }
    *version = v;
    return same;
}

/* The routers: those announced in ZooKeeper, else the one asked. */
static void
json_routers(struct rl_json *j, const struct status *s)
{
    rl_json_key(j, "routers");
    rl_json_begin_array(j);
    for (size_t i = 0; i < (s->have_routers ? s->nrouters : 1); i++) {
        rl_json_begin_object(j);
        rl_json_kv_str(j, "name", s->have_routers ? s->routers[i].name : s->router_name);
        rl_json_kv_str(j, "address", s->have_routers ? s->routers[i].addr : s->o->target);
        rl_json_end_object(j);
    }
    rl_json_end_array(j);
}

static void
json_node(struct rl_json *j, const struct status *s, const struct status_node *nd)
{
    rl_json_begin_object(j);
    rl_json_kv_str(j, "name", nd->name);
    rl_json_kv_str(j, "address", nd->addr);
    rl_json_kv_bool(j, "member", nd->member);
    rl_json_kv_bool(j, "answered", nd->answered);
    rl_json_kv_u64(j, "shards", nd->shards);
    rl_json_kv_i64(j, "router_shards", nd->r_shards);
    rl_json_kv_bool(j, "router_up", nd->r_up != 0);
    rl_json_kv_i64(j, "forwarded", nd->r_forwarded);
    rl_json_kv_i64(j, "failures", nd->r_failures);
    if (nd->answered) {
        rl_json_kv_i64(j, "keys", nd->keys);
        rl_json_kv_i64(j, "memory_bytes", nd->memory);
        rl_json_key(j, "decisions_per_s");
        rl_json_f64(j, nd->rate, 1);
        rl_json_kv_i64(j, "uptime_ms", nd->uptime);
        rl_json_kv_bool(j, "registered", nd->registered != 0);
        rl_json_kv_i64(j, "rules_version", nd->rules_version);
        rl_json_kv_i64(j, "table_digest", nd->table_digest);
        rl_json_kv_i64(j, "shards_incoming", nd->incoming);
        rl_json_kv_i64(j, "shards_outgoing", nd->outgoing);
    }
    rl_json_kv_str(j, "state", nd->member ? rl_member_state_name(nd->state) : "");
    rl_json_kv_str(j, "problem", node_problem(s, nd));
    rl_json_end_object(j);
}

static void
print_json(const struct status *s, bool ok)
{
    static const char *const router_keys[] = {"checks", "members", "assignment_version",
                                              "table_digest", "fail_open", "fail_closed",
                                              "rules_version", "zk_state"};
    static const int64_t router_defs[] = {0, 0, -1, 0, 0, 0, -1, -1};
    struct rl_json j;
    int64_t rv;
    bool agree = rules_agree(s, &rv);

    rl_json_init(&j, stdout);
    rl_json_begin_object(&j);
    rl_json_kv_bool(&j, "ok", ok);
    rl_json_kv_str(&j, "cluster", s->conf != NULL ? s->conf->cluster_name : "");
    rl_json_key(&j, "router");
    rl_json_begin_object(&j);
    rl_json_kv_str(&j, "target", s->o->target);
    rl_json_kv_bool(&j, "reachable", s->router_ok);
    rl_json_kv_str(&j, "name", s->router_name);
    if (!s->router_ok) {
        rl_json_kv_str(&j, "error", s->router_why);
    }
    for (size_t i = 0; i < sizeof(router_keys) / sizeof(router_keys[0]); i++) {
        rl_json_kv_i64(&j, router_keys[i], router_stat(s, router_keys[i], router_defs[i]));
    }
    rl_json_end_object(&j);
    if (s->conf != NULL && s->conf->zookeeper[0] != '\0') {
        rl_json_key(&j, "zookeeper");
        rl_json_begin_object(&j);
        rl_json_kv_str(&j, "address", s->conf->zookeeper);
        rl_json_kv_bool(&j, "reachable", s->members_why[0] == '\0');
        if (s->members_why[0] != '\0') {
            rl_json_kv_str(&j, "error", s->members_why);
        }
        rl_json_end_object(&j);
    }
    json_routers(&j, s);
    rl_json_kv_str(&j, "membership", s->have_members ? s->from : "");
    rl_json_kv_u64(&j, "shards", s->conf != NULL ? s->conf->shards : 0);
    rl_json_kv_u64(&j, "assignment_overrides", s->overrides);
    rl_json_kv_i64(&j, "rules_version", rv);
    rl_json_kv_bool(&j, "rules_agree", agree);
    rl_json_key(&j, "nodes");
    rl_json_begin_array(&j);
    for (size_t i = 0; i < s->n; i++) {
        json_node(&j, s, &s->nodes[i]);
    }
    rl_json_end_array(&j);
    rl_json_key(&j, "missing");
    rl_json_begin_array(&j);
    for (size_t i = 0; i < s->n; i++) {
        if (node_problem(s, &s->nodes[i])[0] != '\0') {
            rl_json_str(&j, s->nodes[i].name);
        }
    }
    rl_json_end_array(&j);
    cli_json_done(&j);
}

/* The router asked, and the others known, each by its one name. */
static void
text_routers(const struct status *s)
{
    const char *zk = "";

    if (s->router_zk == RL_ZKM_CONNECTING || s->router_zk == RL_ZKM_EXPIRED) {
        zk = s->router_zk == RL_ZKM_CONNECTING ? "; its ZooKeeper session: connecting (ZooKeeper "
                                                 "not reachable from it)"
                                               : "; its ZooKeeper session: expired";
    }
    if (s->router_ok) {
        printf("router %s (%s): %lld checks, %lld fail_open, %lld fail_closed, %lld members, "
               "table %016llx%s\n",
               s->o->target, s->router_name, (long long)router_stat(s, "checks", 0),
               (long long)router_stat(s, "fail_open", 0),
               (long long)router_stat(s, "fail_closed", 0),
               (long long)router_stat(s, "members", 0),
               (unsigned long long)router_stat(s, "table_digest", 0), zk);
    } else {
        printf("router %s: UNREACHABLE (%s)\n", s->o->target, s->router_why);
    }
    if (s->have_routers) {
        printf("routers known (ZooKeeper): %zu%s", s->nrouters, s->nrouters > 0 ? ":" : "");
        for (size_t i = 0; i < s->nrouters; i++) {
            printf("%s %s (%s%s)", i > 0 ? "," : "", s->routers[i].name, s->routers[i].addr,
                   i == s->asked ? ", the one asked" : "");
        }
        printf("\n");
    } else if (s->members_why[0] == '\0') {
        printf("routers known: %s (the one asked)\n", s->o->target);
    }
}

static void
print_text(const struct status *s)
{
    int64_t rv;
    bool agree = rules_agree(s, &rv);
    size_t up = 0, missing = 0;
    int64_t in_flight[2] = {0, 0}; /* shards incoming, outgoing, over the nodes that say */

    for (size_t i = 0; i < s->n; i++) {
        const char *problem = node_problem(s, &s->nodes[i]);

        up += problem[0] == '\0';
        missing += problem[0] != '\0';
    }
    if (s->members_why[0] != '\0') {
        /* No membership: no count of nodes up to give, only the reason. */
        printf("cluster %s: membership unknown: %s\n", s->conf->cluster_name, s->members_why);
    } else if (s->conf != NULL) {
        printf("cluster %s: %zu of %zu nodes up, %u shards, assignment version %lld",
               s->conf->cluster_name, up, s->n, s->conf->shards,
               (long long)(s->router_ok ? s->asg_version : -1));
    } else {
        printf("cluster (as the router sees it): %zu of %zu nodes up, assignment version %lld",
               up, s->n, (long long)(s->router_ok ? s->asg_version : -1));
    }
    if (s->have_members) {
        printf(" (%zu override%s)", s->overrides, s->overrides == 1 ? "" : "s");
    }
    if (s->members_why[0] == '\0') {
        printf("\n");
    }
    text_routers(s);
    if (rv >= 0) {
        printf("rules: version %lld%s\n", (long long)rv,
               agree ? ", the same on every process that answered"
                     : "; processes DISAGREE (see the RULES column)");
    }
    printf("\n%-12s %-22s %6s %10s %11s %10s %5s %9s  %s\n", "NODE", "ADDRESS", "SHARDS",
           "KEYS", "DECISIONS/S", "MEMORY", "RULES", "MOVING", "STATE");
    for (size_t i = 0; i < s->n; i++) {
        const struct status_node *nd = &s->nodes[i];
        const char *problem = node_problem(s, nd);
        char mem[32] = "-", keys[24] = "-", rate[24] = "-", rules[24] = "-", shards[24];
        char moving[48] = "-", state[64];

        snprintf(shards, sizeof(shards), "%lld",
                 (long long)(s->have_members ? (int64_t)nd->shards : nd->r_shards));
        if (nd->answered) {
            cli_format_bytes(nd->memory, mem, sizeof(mem));
            snprintf(keys, sizeof(keys), "%lld", (long long)nd->keys);
            snprintf(rate, sizeof(rate), "%.0f", nd->rate);
            if (nd->rules_version >= 0) {
                snprintf(rules, sizeof(rules), "%lld", (long long)nd->rules_version);
            }
            if (nd->incoming >= 0 && nd->outgoing >= 0) {
                /* shards being handed to it / by it now (docs/OPERATIONS.md, "Planned moves") */
                snprintf(moving, sizeof(moving), "%lld/%lld", (long long)nd->incoming,
                         (long long)nd->outgoing);
                in_flight[0] += nd->incoming;
                in_flight[1] += nd->outgoing;
            }
        }
        snprintf(state, sizeof(state), "%s%s%s",
                 problem[0] ? problem : (nd->answered ? "ok" : "up (router's view)"),
                 nd->member && nd->state != RL_MEMBER_ACTIVE ? ", " : "",
                 nd->member && nd->state != RL_MEMBER_ACTIVE ? rl_member_state_name(nd->state)
                                                             : "");
        printf("%-12s %-22s %6s %10s %11s %10s %5s %9s  %s\n", nd->name,
               nd->addr[0] ? nd->addr : "-", shards, keys, rate, mem, rules, moving, state);
    }
    if (in_flight[0] > 0 || in_flight[1] > 0) {
        printf("\nshards in flight: %lld incoming, %lld outgoing (MOVING: in/out per node; a "
               "planned move hands each one off with its counters)\n",
               (long long)in_flight[0], (long long)in_flight[1]);
    }
    if (s->o->config == NULL) {
        printf("\n(give --config FILE for each node's keys, memory and rate, and who is "
               "missing)\n");
    } else if (s->members_why[0] != '\0') {
        printf("\n%s: which nodes are members, and where, cannot be known from here; check "
               "the ensemble and the network path to it\n",
               s->members_why);
    } else if (missing > 0) {
        printf("\nmissing or unhealthy: %zu node%s\n", missing, missing == 1 ? "" : "s");
    }
}

int
cli_cmd_status(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv)
{
    struct status s;
    struct cli tls_opts; /* o, with the config's TLS when no --tls-* was given */
    struct rl_conf *conf = NULL;
    struct rl_wire_reply *rep = NULL;
    bool ok, sampled = false;
    int rc;

    if (argc != 0) {
        return cli_usage_error("%s: takes no arguments", cli_cmd_name(cmd));
    }
    memset(&s, 0, sizeof(s));
    s.o = o;
    s.from = "";
    if (o->config != NULL) {
        rc = cli_load_config(o, &conf);
        if (rc != CLI_EXIT_OK) {
            return rc;
        }
        s.conf = conf;
        s.tls = o->tls;
        if (s.tls == NULL && conf->tls_cert_file[0] != '\0') {
            /* The members want a certificate the cluster's CA signed: the config's. */
            char why[512];

            if (rl_tls_ctx_new(&s.tls_own, RL_TLS_CLIENT, conf->tls_cert_file,
                               conf->tls_key_file, conf->tls_ca_file, NULL, why,
                               sizeof(why)) != 0) {
                rl_conf_destroy(conf);
                return cli_usage_error("%s", why);
            }
            s.tls = s.tls_own;
            /* and to the router too */
            tls_opts = *o;
            tls_opts.tls = s.tls;
            s.o = &tls_opts;
        }
    }
    status_router(&s);
    if (conf != NULL) {
        status_cluster(&s);
        rep = malloc(sizeof(*rep));
        for (size_t i = 0; rep != NULL && i < s.n; i++) {
            if (s.nodes[i].member) {
                status_sample(&s, &s.nodes[i], rep, true);
                sampled = true;
            }
        }
        if (sampled) {
            cli_sleep_ms(o->interval_ms > 0 ? o->interval_ms : 1000);
        }
        for (size_t i = 0; rep != NULL && i < s.n; i++) {
            status_sample(&s, &s.nodes[i], rep, false);
            rl_client_destroy(s.nodes[i].c);
            s.nodes[i].c = NULL;
        }
        free(rep);
    }
    ok = s.router_ok && s.members_why[0] == '\0';
    for (size_t i = 0; i < s.n; i++) {
        ok = ok && node_problem(&s, &s.nodes[i])[0] == '\0';
    }
    if (o->json) {
        print_json(&s, ok);
    } else {
        print_text(&s);
    }
    free(s.nodes);
    free(s.routers);
    free(s.rstats);
    free(s.rep);
    rl_conf_destroy(conf);
    rl_tls_ctx_free(s.tls_own);
    return ok ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}
