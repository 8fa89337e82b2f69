/*
 * rl-cli status: one screen on the cluster for an operator (docs/OPERATIONS.md, "Cluster
 * status"). Asks the router (--target) for its STATS, reads the membership and the
 * assignment (ZooKeeper, or the [node] sections with static membership) when --config is
 * given, and asks every member for its STATS twice, --interval-ms apart, for its rate of
 * decisions. Prints a table, or one JSON object with --json. Exit status 0 when the router
 * answered and every member expected is there and answered, 1 otherwise (the screen still
 * says what it could), 2 for a bad config.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uv.h>

#include "cli.h"
#include "reqclient.h"
#include "clock.h"
#include "conf.h"
#include "shardmap.h"
#include "wire.h"
#include "zkm.h"

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
    struct status_node *nodes;
    size_t n, cap;
    struct rl_wire_reply *rep; /* the router's STATS, valid while its client is open */
    struct status_stat {
        char key[160];
        int64_t val;
    } *rstats; /* a copy of them, for after */
    size_t nrstats;
    bool router_ok;
    char router_name[128];
    char router_why[330];
    int64_t asg_version;
    size_t overrides;
    bool have_members;
    const char *from;
    struct rl_member *routers; /* announced in ZooKeeper (routers/); NULL: none or static */
    size_t nrouters;
    bool have_routers;
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
    rc = rl_client_connect_addr(&c, s->o->target, s->o->timeout_ms);
    if (rc == 0) {
        char why[320];

        rc = rl_client_auth_file(c, s->o->token_file, s->o->timeout_ms, why, sizeof(why));
        if (rc != 0) {
            snprintf(s->router_why, sizeof(s->router_why), "%s", why);
            rl_client_destroy(c);
            return;
        }
        rc = rl_client_ping(c, &pr, s->o->timeout_ms);
        if (rc == 0 && pr.op == RL_WIRE_OP_PING) {
            snprintf(s->router_name, sizeof(s->router_name), "%.*s", (int)pr.name.len,
                     pr.name.ptr != NULL ? pr.name.ptr : "");
        }
        rc = rl_client_stats(c, s->rep, s->o->timeout_ms);
    }
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

/* The membership and assignment of the config's cluster, and the shards each owns. */
static int
status_members(struct status *s)
{
    struct rl_member *members = NULL;
    struct rl_assignment a;
    struct rl_shardmap *map = NULL;
    bool have_a = false;
    size_t n = 0;
    int rc;

    for (size_t i = 0; i < s->conf->nnodes; i++) {
        struct status_node *nd = status_node(s, s->conf->nodes[i].name);

        if (nd != NULL) {
            nd->expected = true;
        }
    }
    if (rl_assignment_init(&a, s->conf->shards) != 0) {
        return CLI_EXIT_FAIL;
    }
    rc = cli_members(s->conf, &members, &n, &a, &have_a, &s->from);
    if (rc != CLI_EXIT_OK) {
        rl_assignment_deinit(&a);
        return rc;
    }
    s->have_members = true;
    for (uint32_t sh = 0; have_a && sh < a.nshards; sh++) {
        s->overrides += a.owner[sh][0] != '\0';
    }
    if (rl_shardmap_create(&map, s->conf->shards, members, n, have_a ? &a : NULL) == 0) {
        for (size_t i = 0; i < n; i++) {
            struct status_node *nd = status_node(s, members[i].name);

            if (nd == NULL) {
                continue;
            }
            nd->member = true;
            snprintf(nd->addr, sizeof(nd->addr), "%s", members[i].addr);
            for (uint32_t sh = 0; sh < map->nshards; sh++) {
                nd->shards += map->owner[sh] == i;
            }
        }
    }
    rl_shardmap_destroy(map);
    free(members);
    rl_assignment_deinit(&a);
    return CLI_EXIT_OK;
}

/* The routers announced in ZooKeeper (rl_zkm_announce_router). */
static void
status_routers(struct status *s)
{
    static const struct rl_zkm_cbs no_cbs = {NULL, NULL, NULL, NULL, NULL};
    struct rl_zkm *z = NULL;
    uv_loop_t loop;
    int rc;

    if (s->conf->zookeeper[0] == '\0') {
        return;
    }
    uv_loop_init(&loop);
    rc = rl_zkm_create(&z, &loop, s->conf->zookeeper, s->conf->session_timeout_ms,
                       s->conf->cluster_name, &no_cbs, NULL);
    if (rc == 0) {
        rl_zkm_secure(z, s->conf->secret, s->conf->secret_len);
        rc = rl_zkm_read_routers(z, &s->routers, &s->nrouters, 5000);
    }
    rl_zkm_destroy(z);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    s->have_routers = rc == 0;
}

/* One STATS sample of a member: the first connects (and AUTHs with the cluster secret). */
static void
status_sample(struct status *s, struct status_node *nd, struct rl_wire_reply *rep, bool first)
{
    int rc = 0;

    if (first) {
        rc = rl_client_connect_addr(&nd->c, nd->addr, s->o->timeout_ms);
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
    nd->rate = nd->t1 > nd->t0 ? (double)(nd->checks1 - nd->checks0) * 1e9 /
                                     (double)(nd->t1 - nd->t0)
                               : 0.0;
}

static void
status_sleep(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void
human_bytes(char *buf, size_t len, int64_t v)
{
    if (v >= (1ll << 30)) {
        snprintf(buf, len, "%.1f GiB", (double)v / (double)(1ll << 30));
    } else if (v >= (1ll << 20)) {
        snprintf(buf, len, "%.1f MiB", (double)v / (double)(1ll << 20));
    } else if (v >= 1024) {
        snprintf(buf, len, "%.1f KiB", (double)v / 1024.0);
    } else {
        snprintf(buf, len, "%lld B", (long long)v);
    }
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
    return "";
}

static void
json_str(const char *v)
{
    putchar('"');
    for (; *v != '\0'; v++) {
        unsigned char ch = (unsigned char)*v;

        if (ch == '"' || ch == '\\') {
            printf("\\%c", ch);
        } else if (ch < 0x20) {
            printf("\\u%04x", ch);
        } else {
            putchar(ch);
        }
    }
    putchar('"');
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

static void
print_json(const struct status *s, bool ok)
{
    int64_t rv;
    bool agree = rules_agree(s, &rv);

    printf("{\"ok\":%s,\"cluster\":", ok ? "true" : "false");
    json_str(s->conf != NULL ? s->conf->cluster_name : "");
    printf(",\"router\":{\"target\":");
    json_str(s->o->target);
    printf(",\"reachable\":%s,\"name\":", s->router_ok ? "true" : "false");
    json_str(s->router_name);
    if (!s->router_ok) {
        printf(",\"error\":");
        json_str(s->router_why);
    }
    printf(",\"checks\":%lld,\"members\":%lld,\"assignment_version\":%lld,"
           "\"table_digest\":%lld,\"fail_open\":%lld,\"fail_closed\":%lld,"
           "\"rules_version\":%lld}",
           (long long)router_stat(s, "checks", 0), (long long)router_stat(s, "members", 0),
           (long long)router_stat(s, "assignment_version", -1),
           (long long)router_stat(s, "table_digest", 0), (long long)router_stat(s, "fail_open", 0),
           (long long)router_stat(s, "fail_closed", 0),
           (long long)router_stat(s, "rules_version", -1));
    printf(",\"routers\":[");
    if (s->have_routers) {
        for (size_t i = 0; i < s->nrouters; i++) {
            printf("%s{\"name\":", i > 0 ? "," : "");
            json_str(s->routers[i].name);
            printf(",\"address\":");
            json_str(s->routers[i].addr);
            putchar('}');
        }
    } else {
        printf("{\"name\":");
        json_str(s->router_name);
        printf(",\"address\":");
        json_str(s->o->target);
        putchar('}');
    }
    printf("],\"membership\":");
    json_str(s->have_members ? s->from : "");
    printf(",\"shards\":%u,\"assignment_overrides\":%zu,\"rules_version\":%lld,"
           "\"rules_agree\":%s,\"nodes\":[",
           s->conf != NULL ? s->conf->shards : 0, s->overrides, (long long)rv,
           agree ? "true" : "false");
    for (size_t i = 0; i < s->n; i++) {
        const struct status_node *nd = &s->nodes[i];

        printf("%s{\"name\":", i > 0 ? "," : "");
        json_str(nd->name);
        printf(",\"address\":");
        json_str(nd->addr);
        printf(",\"member\":%s,\"answered\":%s,\"shards\":%u,\"router_shards\":%lld,"
               "\"router_up\":%s,\"forwarded\":%lld,\"failures\":%lld",
               nd->member ? "true" : "false", nd->answered ? "true" : "false", nd->shards,
               (long long)nd->r_shards, nd->r_up ? "true" : "false", (long long)nd->r_forwarded,
               (long long)nd->r_failures);
        if (nd->answered) {
            printf(",\"keys\":%lld,\"memory_bytes\":%lld,\"decisions_per_s\":%.1f,"
                   "\"uptime_ms\":%lld,\"registered\":%s,\"rules_version\":%lld,"
                   "\"table_digest\":%lld",
                   (long long)nd->keys, (long long)nd->memory, nd->rate, (long long)nd->uptime,
                   nd->registered ? "true" : "false", (long long)nd->rules_version,
                   (long long)nd->table_digest);
        }
        printf(",\"problem\":");
        json_str(node_problem(s, nd));
        putchar('}');
    }
    printf("],\"missing\":[");
    for (size_t i = 0, k = 0; i < s->n; i++) {
        if (node_problem(s, &s->nodes[i])[0] != '\0') {
            printf("%s", k++ > 0 ? "," : "");
            json_str(s->nodes[i].name);
        }
    }
    printf("]}\n");
}

static void
print_text(const struct status *s)
{
    int64_t rv;
    bool agree = rules_agree(s, &rv);
    size_t up = 0, missing = 0;

    for (size_t i = 0; i < s->n; i++) {
        up += s->nodes[i].answered || (!s->have_members && s->nodes[i].r_up);
        missing += node_problem(s, &s->nodes[i])[0] != '\0';
    }
    if (s->conf != NULL) {
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
    printf("\n");
    if (s->router_ok) {
        printf("router %s (%s): %lld checks, %lld fail_open, %lld fail_closed, %lld members, "
               "table %016llx\n",
               s->o->target, s->router_name, (long long)router_stat(s, "checks", 0),
               (long long)router_stat(s, "fail_open", 0),
               (long long)router_stat(s, "fail_closed", 0),
               (long long)router_stat(s, "members", 0),
               (unsigned long long)router_stat(s, "table_digest", 0));
    } else {
        printf("router %s: UNREACHABLE (%s)\n", s->o->target, s->router_why);
    }
    if (s->have_routers) {
        printf("routers known (ZooKeeper): %zu%s", s->nrouters, s->nrouters > 0 ? ":" : "");
        for (size_t i = 0; i < s->nrouters; i++) {
            printf("%s %s (%s)", i > 0 ? "," : "", s->routers[i].name, s->routers[i].addr);
        }
        printf("\n");
    } else {
        printf("routers known: %s (the one asked)\n", s->o->target);
    }
    if (rv >= 0) {
        printf("rules: version %lld%s\n", (long long)rv,
               agree ? ", the same on every process that answered"
                     : "; processes DISAGREE (see the RULES column)");
    }
    printf("\n%-12s %-22s %6s %10s %11s %10s %5s  %s\n", "NODE", "ADDRESS", "SHARDS", "KEYS",
           "DECISIONS/S", "MEMORY", "RULES", "STATE");
    for (size_t i = 0; i < s->n; i++) {
        const struct status_node *nd = &s->nodes[i];
        const char *problem = node_problem(s, nd);
        char mem[32] = "-", keys[24] = "-", rate[24] = "-", rules[24] = "-", shards[24];

        snprintf(shards, sizeof(shards), "%lld",
                 (long long)(s->have_members ? (int64_t)nd->shards : nd->r_shards));
        if (nd->answered) {
            human_bytes(mem, sizeof(mem), nd->memory);
            snprintf(keys, sizeof(keys), "%lld", (long long)nd->keys);
            snprintf(rate, sizeof(rate), "%.0f", nd->rate);
            if (nd->rules_version >= 0) {
                snprintf(rules, sizeof(rules), "%lld", (long long)nd->rules_version);
            }
        }
        printf("%-12s %-22s %6s %10s %11s %10s %5s  %s\n", nd->name,
               nd->addr[0] ? nd->addr : "-", shards, keys, rate, mem, rules,
               problem[0] ? problem : (nd->answered ? "ok" : "up (router's view)"));
    }
    if (!s->have_members) {
        printf("\n(give --config FILE for each node's keys, memory and rate, and who is "
               "missing)\n");
    } else if (missing > 0) {
        printf("\nmissing or unhealthy: %zu node%s\n", missing, missing == 1 ? "" : "s");
    }
}

int
cli_status(const struct cli *o, bool json)
{
    struct status s;
    struct rl_conf *conf = NULL;
    struct rl_wire_reply *rep = NULL;
    char err[512];
    bool ok;
    int rc = CLI_EXIT_OK;

    memset(&s, 0, sizeof(s));
    s.o = o;
    s.from = "";
    if (o->config != NULL) {
        if (rl_conf_load(o->config, &conf, err, sizeof(err)) != 0) {
            fprintf(stderr, "%s\n", err);
            return CLI_EXIT_USAGE;
        }
        s.conf = conf;
    }
    status_router(&s);
    if (conf != NULL) {
        rc = status_members(&s);
        status_routers(&s);
        rep = malloc(sizeof(*rep));
        for (size_t i = 0; rep != NULL && i < s.n; i++) {
            if (s.nodes[i].member) {
                status_sample(&s, &s.nodes[i], rep, true);
            }
        }
        status_sleep(o->interval_ms > 0 ? o->interval_ms : 1000);
        for (size_t i = 0; rep != NULL && i < s.n; i++) {
            status_sample(&s, &s.nodes[i], rep, false);
            rl_client_destroy(s.nodes[i].c);
            s.nodes[i].c = NULL;
        }
        free(rep);
    }
    ok = s.router_ok && rc == CLI_EXIT_OK;
    for (size_t i = 0; i < s.n; i++) {
        ok = ok && node_problem(&s, &s.nodes[i])[0] == '\0';
    }
    if (json) {
        print_json(&s, ok);
    } else {
        print_text(&s);
    }
    free(s.nodes);
    free(s.routers);
    free(s.rstats);
    free(s.rep);
    rl_conf_destroy(conf);
    return ok ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}
