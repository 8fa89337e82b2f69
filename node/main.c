/*
 * rl-node: the ratelimiter node. Reads cluster.conf, builds the limiter for its rules,
 * serves the wire protocol on its listen address and, when ZooKeeper is configured,
 * registers itself there, saying at warn (every RL_NODE_WARN_MS) for as long as it is not
 * registered: routers send an unregistered node no traffic. Start-up, signals and exit
 * statuses are daemon.h's: SIGTERM/SIGINT close the connections and the znode and exit 0,
 * with ZooKeeper after handing every shard to its next owner (move.h; at most [node NAME]
 * drain_timeout); a starting node is `joining` (placed nowhere) until its first view is in;
 * SIGHUP reopens the --log-file and reloads the [service] rules (rules.h), which may also
 * come from the rules znode in ZooKeeper: counters of unchanged tiers are kept.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "daemon.h"
#include "limiter.h"
#include "move.h"
#include "slices.h"
#include "log.h"
#include "rules.h"
#include "server.h"
#include "shardmap.h"
#include "throttle.h"
#include "view.h"
#include "zkm.h"

#define RL_NODE_CHECK_MS 1000u /* how often the registration is looked at */
#define RL_NODE_WARN_MS 10000u /* how often an unregistered node says so */
#define RL_NODE_LINGER_MS 300u /* a drained node answers this long after deregistering */
#define RL_NODE_FIRST_WARN_MS 3000u

enum { OPT_TEST_CLOCK = 0x2000 };

struct node {
    struct rl_daemon d;
    struct rl_server server;
    struct rl_limiter *limiter;
    struct rl_zkm *zkm;
    struct rl_rules rules; /* where the rules in force came from (STATS rules_*) */
    uv_timer_t reg_timer;
    uv_timer_t linger_timer; /* a clean stop's last answers after deregistering */
    bool test_clock;
    int zk_state;          /* enum rl_zkm_state, as last told */
    int registered;        /* as last seen */
    uint64_t unreg_since;  /* loop time the node has been unregistered since */
    uint64_t lost_since;   /* loop time the session was lost (not CONNECTED) at, else 0 */
    uint64_t last_warn;    /* loop time of the last "not registered" warning */
    char dial[128];        /* the address registered for routers: advertise, else listen */
    /* the view of the cluster the routers have, to answer only for this node's shards */
    struct rl_view view;
    /* the shard states of automatic handoff, and the bitmap of shards decided here that
     * the server reads (rl_server_set_owned) */
    struct rl_move *move;
    bool owned_set; /* the server has the bitmap (a first view was applied) */
    bool joined;    /* `joining` was lifted */
    bool in_view;   /* the last view read has this node in it */
    bool draining;  /* SIGTERM: handing the shards off */
    uint32_t nowned;
    /* per shard: bumped each time this node gains it, and for every shard when its
     * registration is lost, so a shard that comes back starts from full allowance
     * (rl_limiter_check_epoch): its counters here are from an earlier tenure */
    uint16_t *epochs;
    /* the regions' slices in force (docs/REGIONS.md), from the slices znode; NULL: none */
    struct rl_slices *slices;
};

static const char usage[] =
    "usage: rl-node --config FILE --name NAME [--listen HOST:PORT] [--test-clock]\n"
    "               [--log-level error|warn|info|debug] [--log-file FILE]\n"
    "               [--metrics HOST:PORT]\n"
    "\n"
    "Serves the counters of the shards it owns over the ratelimiter wire protocol.\n"
    "  --config FILE      cluster.conf to read (rules, [node NAME] defaults, ZooKeeper)\n"
    "  --name NAME        this node's name: its znode and its [node NAME] section\n"
    "  --listen HOST:PORT address to serve on (default: listen of [node NAME])\n"
    "  --test-clock       accept CLOCK requests that set the node's clock (tests only)\n"
    "  --log-level LEVEL  verbosity (default info)\n"
    "  --log-file FILE    log there instead of stderr; SIGHUP reopens it\n"
    "  --metrics HOST:PORT  serve /metrics, /healthz, /readyz there (default: metrics of\n"
    "                     [node NAME]; \"off\": none)\n"
    "  --help, --version\n"
    "Signals: TERM/INT stop (with ZooKeeper: every shard handed to its next owner first,\n"
    "at most [node NAME] drain_timeout, then the znode deleted), HUP reopens the log file\n"
    "and reloads the [service] rules of --config (unless they come from ZooKeeper: rl-cli\n"
    "rules push).\n";

static const struct option node_options[] = {{"test-clock", no_argument, NULL, OPT_TEST_CLOCK},
                                             {NULL, 0, NULL, 0}};

static int
node_option(struct rl_daemon *d, int opt, const char *arg)
{
    struct node *n = d->data;

    (void)arg;
    if (opt == OPT_TEST_CLOCK) {
        n->test_clock = true;
        return 0;
    }
    return 2;
}

static void
node_close_server(struct node *n)
{
    rl_rules_close(&n->rules); /* a parse in flight is dropped: no apply to a closing node */
    rl_server_close(&n->server, NULL);
    n->server.move = NULL;
    rl_move_destroy(n->move);
    n->move = NULL;
}

static void
node_linger_done(uv_handle_t *h)
{
    node_close_server(h->data);
}

static void
node_linger_end(uv_timer_t *t)
{
    uv_close((uv_handle_t *)t, node_linger_done);
}

/* A drained node deregisters, then keeps answering (every shard MOVING to its new owner, or
 * not owned) for RL_NODE_LINGER_MS before it closes, when it decides no shard any more: a router whose view still names it as
 * an owner then holds or redirects the request instead of finding no connection and
 * answering by failure policy (the routers learn of the deregistration a moment later). */
static void
node_finish_drain(void *arg)
{
    struct node *n = arg;

    if (n->zkm != NULL) {
        rl_zkm_destroy(n->zkm);
        n->zkm = NULL;
        uv_close((uv_handle_t *)&n->reg_timer, NULL);
    }
    /* past drain_timeout some shards are still decided here: no linger (their next owners
     * start them afresh now, and two nodes must never decide one key) */
    if (rl_move_count_owned(n->move) > 0 || uv_timer_init(&n->d.loop, &n->linger_timer) != 0) {
        node_close_server(n);
        return;
    }
    n->linger_timer.data = n;
    /* from now: saying goodbye to ZooKeeper blocks (up to seconds when it is going away), and
     * the loop's time is from before it */
    uv_update_time(&n->d.loop);
    if (uv_timer_start(&n->linger_timer, node_linger_end, RL_NODE_LINGER_MS, 0) != 0) {
        uv_close((uv_handle_t *)&n->linger_timer, node_linger_done);
    }
}

static void
node_finish_stop(void *arg)
{
    struct node *n = arg;

    if (n->zkm != NULL) {
        rl_zkm_destroy(n->zkm);
        n->zkm = NULL;
        uv_close((uv_handle_t *)&n->reg_timer, NULL);
    }
    node_close_server(n);
}

/*
 * SIGTERM, SIGINT. With ZooKeeper, a registered and connected node first says `leaving`:
 * its own view then queues every shard it decides for its next owner (move.h), and it stops
 * once they are shipped or at drain_timeout. Otherwise it stops at once (today's stop).
 */
static void
node_stop(struct rl_daemon *d)
{
    struct node *n = d->data;
    const struct rl_node_conf *nc = rl_conf_node(d->conf, d->name);
    uint32_t timeout = nc != NULL && nc->drain_timeout_ms != 0 ? nc->drain_timeout_ms
                                                                : RL_CONF_DRAIN_TIMEOUT_MS;

    if (n->draining) {
        return;
    }
    if (n->move == NULL || n->zkm == NULL || !rl_zkm_registered(n->zkm) ||
        n->zk_state != RL_ZKM_CONNECTED || !n->owned_set) {
        node_finish_stop(n);
        return;
    }
    n->draining = true;
    rl_log_info("clean stop: leaving (handing %u shard(s) to their next owners, at most %u ms)",
                rl_move_count_owned(n->move), timeout);
    rl_zkm_set_state(n->zkm, RL_MEMBER_LEAVING);
    rl_move_drain(n->move, timeout, node_finish_drain, n);
}

/*
 * Says what the registration is, when it changes and, while it is missing, periodically.
 * A session that stays lost past its timeout has expired on the server (its znode is gone
 * and routers moved the node's shards away) though the client learns it only when it gets
 * through again: that is said periodically too.
 */
static void
node_check_registration(uv_timer_t *t)
{
    struct node *n = t->data;
    uint64_t now = uv_now(&n->d.loop);
    uint32_t timeout = n->d.conf->session_timeout_ms;
    int reg = n->zkm != NULL && rl_zkm_registered(n->zkm);

    rl_server_set_membership(&n->server, n->zk_state, reg);
    if (reg && !n->registered) {
        rl_log_info("registered in ZooKeeper at %s as %s (%s): routers may send it traffic",
                    n->d.conf->zookeeper, n->d.name, n->dial);
    } else if (!reg && n->registered) {
        rl_log_warn("lost its registration in ZooKeeper at %s (the session expired or the "
                    "znode went): routers send this node no traffic until it registers again",
                    n->d.conf->zookeeper);
        /* Its shards went to others meanwhile: what it counted is no longer current. */
        for (uint32_t s = 0; s < n->d.conf->shards; s++) {
            n->epochs[s]++;
        }
        if (n->move != NULL) {
            rl_move_lost(n->move);
        }
        /* It comes back as a node joining: `joining` written before its member znode in
         * the new session, lifted once it has read a view with itself in it, so its shards
         * come back to it from their owners meanwhile with their counters, whatever order
         * its views take. */
        if (n->joined && !n->draining && n->zkm != NULL) {
            n->joined = false;
            n->in_view = false;
            rl_zkm_set_state(n->zkm, RL_MEMBER_JOINING);
        }
        n->unreg_since = now;
        n->last_warn = now;
    } else if (reg && n->lost_since != 0 && now - n->lost_since >= timeout &&
               now - n->last_warn >= RL_NODE_WARN_MS) {
        rl_log_warn("ZooKeeper at %s unreachable for %llu s, past the %u ms session timeout: "
                    "this node's znode has likely expired and routers send it no traffic; it "
                    "registers again once it gets through",
                    n->d.conf->zookeeper, (unsigned long long)((now - n->lost_since) / 1000),
                    timeout);
        n->last_warn = now;
    } else if (!reg && now - n->last_warn >= RL_NODE_WARN_MS) {
        rl_log_warn("not registered in ZooKeeper at %s yet (session %s, for %llu s): routers "
                    "send this node no traffic until it is",
                    n->d.conf->zookeeper, rl_zkm_state_name((enum rl_zkm_state)n->zk_state),
                    (unsigned long long)((now - n->unreg_since) / 1000));
        n->last_warn = now;
    }
    n->registered = reg;
}

/*
 * Ready: listening, this process registered (its own session holds nodes/NAME: a process
 * restarted before its previous one's session expired sees that one's znode in its view,
 * and stays `joining` until it expires, so that the others take its shards from zero first
 * and hand them back with their counters, instead of expecting them from each other), and a
 * view with this node in it read. Lifting `joining` lets the others place shards here, and
 * send their counters first.
 */
static void
node_lift_joining(struct node *n)
{
    if (!n->joined && !n->draining && n->in_view && n->zkm != NULL &&
        rl_zkm_registered(n->zkm)) {
        n->joined = true;
        rl_zkm_set_state(n->zkm, RL_MEMBER_ACTIVE);
        rl_log_info("view read: joining lifted (shards are placed here from now on)");
    }
}

/*
 * Rebuilds the table from the members and assignment last seen, exactly as the routers do,
 * and hands the server the shards this node owns in it and the table's digest (STATS
 * table_digest, to compare with the routers').
 */
static void
node_rebuild(struct node *n)
{
    const struct rl_conf *conf = n->d.conf;
    struct rl_shardmap *map;
    uint32_t self, count;
    int64_t digest;
    size_t nmembers;
    const char *state;
    char err[128];

    if (rl_view_build(&map, conf->shards, &n->view, err, sizeof(err)) != 0) {
        rl_log_error("cannot build the shard table: out of memory; keeping the old one");
        return;
    }
    if (err[0] != '\0') {
        rl_log_warn("assignment version %lld ignored: %s", (long long)n->view.asg_version, err);
    }
    self = rl_shardmap_find(map, n->d.name);
    state = self != RL_SHARDMAP_NONE ? rl_member_state_name(map->members[self].state) : "";
    digest = rl_shardmap_digest_stat(map);
    nmembers = map->nmembers;
    /* The shard states follow the table (a gained shard is a new tenure: its epoch bumped,
     * or it is awaited from its old owner); the server reads the bitmap they keep. */
    rl_move_view(n->move, map);
    rl_server_set_owned(&n->server, rl_move_owned(n->move), conf->shards, digest);
    n->owned_set = true;
    count = rl_move_count_owned(n->move);
    if (count != n->nowned || self == RL_SHARDMAP_NONE) {
        rl_log_info("owns %u of %u shards (%zu members, assignment version %lld)%s%s", count,
                    conf->shards, nmembers, (long long)n->view.asg_version,
                    self == RL_SHARDMAP_NONE ? "; not a member in this view yet" : "; ",
                    self == RL_SHARDMAP_NONE ? "" : state);
    }
    n->nowned = count;
    n->server.shards_owned = count;
    n->in_view = self != RL_SHARDMAP_NONE;
    node_lift_joining(n);
}

static void
node_members(void *arg, const struct rl_member *members, size_t count)
{
    struct node *n = arg;

    if (rl_view_set_members(&n->view, members, count) != 0) {
        rl_log_error("membership update lost: out of memory");
        return;
    }
    if (n->move != NULL) {
        rl_move_members_read(n->move); /* a read of this session's: the view is current */
    }
    node_rebuild(n);
}

static void
node_assignment(void *arg, const char *text, size_t len, int64_t version)
{
    struct node *n = arg;

    if (rl_view_set_assignment(&n->view, text, len, version) != 0) {
        rl_log_error("assignment update lost: out of memory");
        return;
    }
    node_rebuild(n);
}

/* The registration changed: the server answers CHECKs only while it is held (fencing). */
static void
node_registered(void *arg, int registered)
{
    struct node *n = arg;

    node_check_registration(&n->reg_timer);
    if (registered) {
        node_lift_joining(n);
    }
}

static void
node_zk_state(void *arg, enum rl_zkm_state state)
{
    struct node *n = arg;

    n->zk_state = (int)state;
    if (n->move != NULL) {
        rl_move_views_current(n->move, state == RL_ZKM_CONNECTED);
    }
    if (state == RL_ZKM_EXPIRED) {
        n->server.zk_expiries++;
    }
    if (state == RL_ZKM_CONNECTED) {
        n->lost_since = 0;
        rl_log_info("ZooKeeper session: %s", rl_zkm_state_name(state));
    } else {
        if (n->lost_since == 0) {
            n->lost_since = uv_now(&n->d.loop);
        }
        rl_log_warn("ZooKeeper session: %s", rl_zkm_state_name(state));
    }
    node_check_registration(&n->reg_timer);
}

/* /metrics, on the loop thread (metrics.h). */
static void
node_metrics(void *arg, struct rl_prom *p)
{
    struct node *n = arg;

    rl_prom_build_info(p, "rl-node", n->d.name);
    rl_server_metrics(&n->server, p);
}

static bool
node_ready(void *arg, char *why, size_t len)
{
    struct node *n = arg;

    return rl_server_ready(&n->server, why, len);
}

/* The rules of the live conf were swapped: the limiter follows, keeping the counters of
 * the tiers that stayed. The pause is one pass over the key table. */
static int
node_apply_rules(void *arg, struct rl_conf **old)
{
    struct node *n = arg;
    struct rl_limiter_reload res;
    uint64_t t0 = uv_hrtime();
    int rc;

    (void)old;
    rc = rl_limiter_set_rules(n->limiter, n->d.conf, &res);
    if (rc != 0) {
        rl_log_error("cannot switch the limiter to the new rules: %s", strerror(-rc));
        return rc;
    }
    rl_log_info("limiter: %llu tiers unchanged, %llu with a new limit or burst (what was "
                "consumed carries over), %llu keys keep their counters, %llu keys of "
                "tiers removed or with another algorithm or window restart from full "
                "allowance (%.1f ms)",
                (unsigned long long)res.tiers_kept, (unsigned long long)res.tiers_carried,
                (unsigned long long)res.keys_kept,
                (unsigned long long)res.keys_dropped, (double)(uv_hrtime() - t0) / 1e6);
    if (res.log_memory_missing) {
        rl_log_warn("the new rules have a sliding_window_log tier but this node started without "
                    "one: it has no memory set aside for logs, so they are degraded to "
                    "sliding_window_counter until it restarts");
    }
    return 0;
}

static void
node_rules_zk(void *arg, const char *text, size_t len, int64_t version)
{
    struct node *n = arg;

    rl_rules_from_zk(&n->rules, text, len, version);
}

/* The slices znode changed (docs/REGIONS.md): parsed here (at most RL_ZKM_DATA_MAX bytes, a
 * few ms), applied at once. One that does not parse is refused: the last ones stay. */
static void
node_slices_zk(void *arg, const char *text, size_t len, int64_t version)
{
    struct node *n = arg;
    struct rl_slices *s = NULL;
    char err[256];
    int rc;

    if (version >= 0 && len > 0) {
        rc = rl_slices_parse(text, len, &s, err, sizeof(err));
        if (rc != 0) {
            rl_log_error("slices znode data version %lld refused, slices_version %lld stays: %s",
                         (long long)version, (long long)n->server.slices_version,
                         rc == -ENOMEM ? "out of memory" : err);
            n->server.slices_failures++;
            return;
        }
    }
    rl_limiter_set_slices(n->limiter, s, rl_conf_region_slice(n->d.conf));
    rl_slices_destroy(n->slices);
    n->slices = s;
    n->server.slices_version = version >= 0 ? version + 1 : 0;
    n->server.slices_generation = rl_slices_generation(s);
    n->server.slices_users = rl_slices_users(s);
    /* The figure STATS reports (0: none, else the znode's data version + 1), then the
     * znode's own, as rl-regions names it. */
    if (version < 0) {
        rl_log_info("slices_version 0 applied (no slices znode): the weight shares");
        return;
    }
    rl_log_info("slices_version %lld applied (slices znode data version %lld): generation "
                "%llu, %zu services, %zu users",
                (long long)n->server.slices_version, (long long)version,
                (unsigned long long)rl_slices_generation(s), rl_slices_services(s),
                rl_slices_users(s));
}

static void
node_hup(struct rl_daemon *d)
{
    struct node *n = d->data;

    if (n->server.throttle != NULL && n->server.throttle->log != NULL) {
        int rc = rl_throttle_reopen(n->server.throttle);

        if (rc != 0) {
            rl_log_error("SIGHUP: cannot reopen the events log %s: %s",
                         n->server.throttle->log->path, strerror(-rc));
        } else {
            rl_log_info("SIGHUP: reopened the events log %s", n->server.throttle->log->path);
        }
    }
    rl_rules_reload_file(&n->rules);
}

static const struct rl_daemon_spec node_spec = {
    .prog = "rl-node",
    .usage = usage,
    .name_required = true,
    .extra = node_options,
    .on_option = node_option,
    .on_stop = node_stop,
    .on_hup = node_hup,
    .tls_mutual = true,
    .tls_client = true, /* automatic handoff dials the other nodes */
};

static uint64_t
node_now_ms(void *arg)
{
    struct node *n = arg;

    return rl_clock_now_ms(&n->server.clock);
}

/* Registers in ZooKeeper and starts watching the registration. Returns 0 or a negative errno. */
static int
node_register(struct node *n)
{
    static const struct rl_zkm_cbs cbs = {node_members, node_assignment, node_zk_state,
                                          node_registered, node_rules_zk, NULL, node_slices_zk};
    uv_loop_t *loop = &n->d.loop;
    int rc;

    n->zk_state = RL_ZKM_CONNECTING;
    n->epochs = calloc(n->d.conf->shards, sizeof(*n->epochs));
    if (n->epochs == NULL) {
        return -ENOMEM;
    }
    rl_server_set_epochs(&n->server, n->epochs);
    {
        struct rl_move_opts mo = {0};

        mo.nshards = n->d.conf->shards;
        mo.self = n->d.name;
        mo.handoff_wait_ms = n->d.conf->handoff_wait_ms;
        mo.secret = n->d.conf->secret;
        mo.secret_len = n->d.conf->secret_len;
        mo.tls = n->d.tls_client;
        mo.epochs = n->epochs;
        mo.limiter = n->limiter;
        mo.now_ms = node_now_ms;
        mo.now_arg = n;
        rc = rl_move_create(&n->move, loop, &mo);
        if (rc != 0) {
            return rc;
        }
        n->server.move = n->move;
    }
    rc = rl_zkm_create(&n->zkm, loop, n->d.conf->zookeeper, n->d.conf->session_timeout_ms,
                       n->d.conf->cluster_name, &cbs, n);
    if (rc == 0) {
        rl_zkm_secure(n->zkm, n->d.conf->secret, n->d.conf->secret_len);
        /* joining until its first view is in: placed nowhere before it is ready */
        rl_zkm_set_state(n->zkm, RL_MEMBER_JOINING);
        rc = rl_zkm_register(n->zkm, n->d.name, n->dial);
    }
    if (rc == 0) {
        rc = rl_zkm_watch(n->zkm);
    }
    if (rc == 0) {
        rc = rl_zkm_watch_rules(n->zkm);
    }
    if (rc == 0) {
        rc = rl_zkm_watch_slices(n->zkm);
    }
    if (rc != 0) {
        return rc;
    }
    rl_server_set_membership(&n->server, n->zk_state, 0);
    /* The first warning comes after RL_NODE_FIRST_WARN_MS, the next ones every
     * RL_NODE_WARN_MS. */
    n->unreg_since = uv_now(loop);
    n->last_warn = n->unreg_since - (RL_NODE_WARN_MS - RL_NODE_FIRST_WARN_MS);
    uv_timer_init(loop, &n->reg_timer);
    n->reg_timer.data = n;
    uv_timer_start(&n->reg_timer, node_check_registration, RL_NODE_CHECK_MS, RL_NODE_CHECK_MS);
    return 0;
}


/* A config written when `failure = open` waved every request through while its owner was
 * unreachable: the routers now hold such a rule to their backstop (docs/OPERATIONS.md, "The
 * backstop"). The node applies no failure policy itself, but says so at start, as the
 * routers do, so that an operator reading either log learns it. */
static void
node_failure_notice(const struct rl_conf *conf)
{
    const char *first;
    size_t n = rl_conf_backstopped(conf, &first);

    if (n > 0) {
        rl_log_warn("%zu rule(s) with failure = open (the first: service %s): while this "
                    "node cannot be reached, routers now judge them by their backstop "
                    "instead of allowing every request; failure = open_unlimited keeps the "
                    "old meaning (docs/OPERATIONS.md, \"The backstop\")",
                    n, first);
    }
}

int
main(int argc, char **argv)
{
    static struct node n;
    const struct rl_node_conf *nc;
    struct rl_server_opts opts = {0};
    uint64_t memory;
    int rc;

    n.view.asg_version = -1;
    rc = rl_daemon_init(&n.d, &node_spec, argc, argv, &n);
    if (rc != RL_DAEMON_RUN) {
        rl_daemon_destroy(&n.d);
        return rc;
    }
    nc = rl_conf_node(n.d.conf, n.d.name);
    memory = (nc != NULL && nc->memory != 0) ? nc->memory : RL_CONF_DEFAULT_MEMORY;
    if (rl_daemon_listen(&n.d, nc != NULL ? nc->host : NULL, nc != NULL ? nc->port : 0,
                         "no [node NAME] section for this --name",
                         n.d.conf->secret != NULL) != 0) {
        rl_daemon_destroy(&n.d);
        return 2;
    }
    if (nc != NULL && nc->adv_host != NULL) {
        rl_format_hostport(n.dial, sizeof(n.dial), nc->adv_host, nc->adv_port);
    } else if (rl_conf_is_wildcard(n.d.host) && n.d.conf->zookeeper[0] != '\0') {
        rl_daemon_fail(&n.d,
                       "rl-node: %s is a wildcard address, which routers cannot dial: set "
                       "advertise = HOST:PORT in [node %s]",
                       n.d.addr, n.d.name);
        rl_daemon_destroy(&n.d);
        return 2;
    } else {
        snprintf(n.dial, sizeof(n.dial), "%s", n.d.addr);
    }
    rc = rl_limiter_create(&n.limiter, n.d.conf, memory);
    if (rc != 0) {
        rl_daemon_fail(&n.d, "rl-node: cannot create the limiter: %s", strerror(-rc));
        rl_daemon_destroy(&n.d);
        return 1;
    }
    opts.name = n.d.name;
    opts.host = n.d.host;
    opts.port = n.d.port;
    opts.tls = n.d.tls_server;
    opts.test_clock = n.test_clock;
    opts.limits = n.d.conf->clients;
    opts.conf = n.d.conf;
    rl_rules_init(&n.rules, rl_daemon_loop(&n.d), n.d.conf, n.d.config_path, node_apply_rules,
                  &n);
    opts.rules = &n.rules.st;
    rc = rl_server_start(&n.server, rl_daemon_loop(&n.d), n.limiter, &opts);
    if (rc != 0) {
        if (n.server.events_log_failed) {
            rl_daemon_fail(&n.d,
                           "rl-node: cannot open the events log %s ([cluster] events_log): %s",
                           n.d.conf->events_log, strerror(-rc));
        } else {
            rl_daemon_fail(&n.d, "rl-node: cannot listen on %s: %s", n.d.addr, uv_strerror(rc));
        }
        rc = 1;
        goto out;
    }
    if (n.d.conf->zookeeper[0] != '\0') {
        rc = node_register(&n);
        if (rc != 0) {
            rl_daemon_fail(&n.d, "rl-node: cannot use ZooKeeper at %s: %s",
                           n.d.conf->zookeeper, strerror(-rc));
            rl_zkm_destroy(n.zkm);
            n.zkm = NULL;
            n.server.move = NULL;
            rl_move_destroy(n.move);
            n.move = NULL;
            rl_server_close(&n.server, NULL);
            rc = 1;
            goto out;
        }
    }
    {
        const struct rl_metrics_ops mops = {node_metrics, node_ready, &n};

        rc = rl_daemon_metrics(&n.d, nc != NULL ? nc->metrics_host : NULL,
                               nc != NULL ? nc->metrics_port : 0, &mops);
        if (rc != 0) {
            node_stop(&n.d);
            goto out;
        }
    }
    rl_log_info("serving on %s (memory cap %llu bytes%s); %s", n.d.addr,
                (unsigned long long)memory, n.test_clock ? ", test clock" : "",
                n.zkm != NULL ? "registering in ZooKeeper (not registered yet)"
                              : "static membership");
    node_failure_notice(n.d.conf);
    rl_daemon_run(&n.d);
    rc = 0;
out:
    /* The limiter's rules point into the config, which rl_daemon_destroy frees; the server's
     * handles are closed (or only closing, which touches no limiter) by now. */
    rl_rules_close(&n.rules);
    rl_limiter_destroy(n.limiter);
    rl_slices_destroy(n.slices);
    rl_view_deinit(&n.view);
    free(n.epochs);
    rl_daemon_destroy(&n.d);
    return rc;
}
