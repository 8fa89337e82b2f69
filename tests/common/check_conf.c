/*
 * check_conf: the Check suite of common/conf*.c and common/ruleset.c. It parses strings
 * (rl_conf_parse) so every case names its own file, asserts each error by its exact
 * "NAME:LINE: " prefix and a key phrase, loads files where paths depend on them, and fuzzes
 * the parser with mutations of a valid file (run it under RL_SANITIZE to make the fuzz test
 * mean something; every message it gets must be printable UTF-8). Names: printable UTF-8
 * (common/utf8.c at the edges of each length), refused with the byte offset. Not for the
 * programs that read the conf.
 */
#include "conf.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "harness.h"

#include "rltest.h"
#include "utf8.h"

/* The example of CONFIG.md, verbatim. */
static const char example[] =
    "[cluster]\n"
    "name = demo                   ; names this cluster's subtree in ZooKeeper\n"
    "zookeeper = 127.0.0.1:2181    ; comma-separated ensemble; empty = static membership "
    "below\n"
    "session_timeout = 4s\n"
    "shards = 4096                 ; fixed for the cluster's life\n"
    "\n"
    "[router]\n"
    "listen = 127.0.0.1:7400\n"
    "deadline = 50ms               ; longest a request waits on a node before its failure "
    "policy answers\n"
    "request_log = requests.log    ; where the rebalance tool's input goes; empty = off\n"
    "\n"
    "[node a]                      ; a static member (used when zookeeper is empty) and the\n"
    "listen = 127.0.0.1:7401       ; defaults for `rl-node --name a`\n"
    "\n"
    "[service checkout]            ; rules for service \"checkout\", every endpoint\n"
    "failure = open                ; open | closed\n"
    "mode = enforce                ; enforce | shadow\n"
    "limit = token_bucket 100 per 1m burst 20\n"
    "limit = fixed_window 1000 per 1h\n"
    "\n"
    "[service checkout /pay]       ; rules for endpoint \"/pay\" of \"checkout\" only\n"
    "limit = gcra 5 per 1s\n";

static struct rl_conf *
parse_ok(const char *text)
{
    struct rl_conf *c = NULL;
    char err[512] = "";
    int rc = rl_conf_parse("t.conf", text, &c, err, sizeof(err));

    ck_assert_msg(rc == 0, "parse failed (%d): %s", rc, err);
    ck_assert_ptr_nonnull(c);
    return c;
}

static void
expect_error(const char *text, int line, const char *phrase)
{
    struct rl_conf *c = NULL;
    char err[1024] = "";
    char prefix[64];
    int rc = rl_conf_parse("t.conf", text, &c, err, sizeof(err));

    ck_assert_msg(rc == -EINVAL, "rc %d, err \"%s\" for:\n%s", rc, err, text);
    ck_assert_ptr_null(c);
    snprintf(prefix, sizeof(prefix), "t.conf:%d: ", line);
    ck_assert_msg(strncmp(err, prefix, strlen(prefix)) == 0, "\"%s\" does not start with \"%s\"",
                  err, prefix);
    ck_assert_msg(strstr(err, phrase) != NULL, "\"%s\" does not say \"%s\"", err, phrase);
    ck_assert_msg(strchr(err, '\n') == NULL, "\"%s\" is not one line", err);
}

START_TEST(test_example)
{
    struct rl_conf *c = parse_ok(example);
    const struct rl_rule *r;
    const struct rl_tier *t;

    ck_assert_str_eq(c->path, "t.conf");
    ck_assert_str_eq(c->cluster_name, "demo");
    ck_assert_str_eq(c->zookeeper, "127.0.0.1:2181");
    ck_assert_uint_eq(c->session_timeout_ms, 4000);
    ck_assert_uint_eq(c->shards, 4096);
    ck_assert_str_eq(c->router_host, "127.0.0.1");
    ck_assert_uint_eq(c->router_port, 7400);
    ck_assert_uint_eq(c->deadline_ms, 50);
    ck_assert_str_eq(c->request_log, "requests.log");
    ck_assert_uint_eq(c->log_sample, 1);

    ck_assert_uint_eq(c->nnodes, 1);
    ck_assert_str_eq(c->nodes[0].name, "a");
    ck_assert_str_eq(c->nodes[0].host, "127.0.0.1");
    ck_assert_uint_eq(c->nodes[0].port, 7401);
    ck_assert_uint_eq(c->nodes[0].memory, RL_CONF_DEFAULT_MEMORY);
    ck_assert_int_eq(c->nodes[0].line, 12);
    ck_assert_ptr_eq(rl_conf_node(c, "a"), &c->nodes[0]);

    ck_assert_uint_eq(c->nrules, 2);
    ck_assert_uint_eq(c->ntiers, 3);
    r = &c->rules[0];
    ck_assert_str_eq(r->service, "checkout");
    ck_assert_ptr_null(r->endpoint);
    ck_assert_uint_eq(r->service_len, 8);
    ck_assert_uint_eq(r->endpoint_len, 0);
    ck_assert(!r->fail_closed);
    ck_assert(!r->shadow);
    ck_assert_uint_eq(r->id, 0);
    ck_assert_uint_eq(r->first_tier, 0);
    ck_assert_uint_eq(r->ntiers, 2);
    ck_assert_int_eq(r->line, 15);
    t = &c->tiers[0];
    ck_assert_int_eq(t->algo, RL_ALGO_TOKEN_BUCKET);
    ck_assert_uint_eq(t->limit, 100);
    ck_assert_uint_eq(t->window_ms, 60000);
    ck_assert_uint_eq(t->burst, 20);
    ck_assert_uint_eq(t->id, 0);
    t = &c->tiers[1];
    ck_assert_int_eq(t->algo, RL_ALGO_FIXED_WINDOW);
    ck_assert_uint_eq(t->limit, 1000);
    ck_assert_uint_eq(t->window_ms, 3600000);
    ck_assert_uint_eq(t->burst, 1000);
    ck_assert_uint_eq(t->id, 1);

    r = &c->rules[1];
    ck_assert_str_eq(r->service, "checkout");
    ck_assert_str_eq(r->endpoint, "/pay");
    ck_assert_uint_eq(r->endpoint_len, 4);
    ck_assert(!r->fail_closed);
    ck_assert(!r->shadow);
    ck_assert_uint_eq(r->id, 1);
    ck_assert_uint_eq(r->first_tier, 2);
    ck_assert_uint_eq(r->ntiers, 1);
    ck_assert_int_eq(r->line, 21);
    t = &c->tiers[2];
    ck_assert_int_eq(t->algo, RL_ALGO_GCRA);
    ck_assert_uint_eq(t->limit, 5);
    ck_assert_uint_eq(t->window_ms, 1000);
    ck_assert_uint_eq(t->burst, 5);
    ck_assert_uint_eq(t->id, 2);

    ck_assert_ptr_eq(rl_conf_rule(c, "checkout", 8, "/pay", 4), &c->rules[1]);
    ck_assert_ptr_eq(rl_conf_rule(c, "checkout", 8, "/cart", 5), &c->rules[0]);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_defaults)
{
    struct rl_conf *c = parse_ok("");

    ck_assert_str_eq(c->cluster_name, "default");
    ck_assert_str_eq(c->zookeeper, "");
    ck_assert_uint_eq(c->session_timeout_ms, 4000);
    ck_assert_uint_eq(c->shards, 4096);
    ck_assert_str_eq(c->router_host, "127.0.0.1");
    ck_assert_uint_eq(c->router_port, 7400);
    ck_assert_uint_eq(c->deadline_ms, 50);
    ck_assert_str_eq(c->request_log, "");
    ck_assert_uint_eq(c->log_sample, 1);
    ck_assert_uint_eq(c->router_workers, 0); /* unset: one per core */
    ck_assert(!c->inline_fail_closed);
    ck_assert_str_eq(c->envoy_config, "");
    ck_assert(!c->envoy_merge_domains); /* upstream's default: a domain in two files is wrong */
    ck_assert_ptr_null(c->rls_host); /* off */
    ck_assert_uint_eq(c->rls_port, 0);
    ck_assert(!c->rls_fail_error);
    ck_assert_int_eq(c->rls_headers, RL_CONF_RLS_HEADERS_OFF);
    ck_assert_uint_eq(c->events_log_max_size, 64ull << 20);
    ck_assert_uint_eq(c->events_log_keep, 4);
    ck_assert_uint_eq(c->events_log_rate, 100);
    ck_assert_uint_eq(c->nnodes, 0);
    ck_assert_uint_eq(c->nrules, 0);
    ck_assert_uint_eq(c->ntiers, 0);
    ck_assert_ptr_null(rl_conf_rule(c, "checkout", 8, NULL, 0));
    ck_assert_ptr_null(rl_conf_node(c, "a"));
    rl_conf_destroy(c);

    /* [router] rls: a bare port is loopback; empty is off. */
    c = parse_ok("[router]\nrls = 8081\n");
    ck_assert_str_eq(c->rls_host, "127.0.0.1");
    ck_assert_uint_eq(c->rls_port, 8081);
    rl_conf_destroy(c);
    c = parse_ok("[router]\nrls =\n");
    ck_assert_ptr_null(c->rls_host);
    rl_conf_destroy(c);

    /* Empty sections keep the defaults; a node's memory defaults; the rule's policies too. */
    c = parse_ok("[cluster]\n[router]\n[node b]\nlisten = [::1]:9\n[service s]\n"
                 "limit = leaky_bucket 7 per 2s\n");
    ck_assert_str_eq(c->cluster_name, "default");
    ck_assert_uint_eq(c->router_port, 7400);
    ck_assert_str_eq(c->nodes[0].host, "::1");
    ck_assert_uint_eq(c->nodes[0].port, 9);
    ck_assert_uint_eq(c->nodes[0].memory, RL_CONF_DEFAULT_MEMORY);
    ck_assert(!c->rules[0].fail_closed);
    ck_assert(!c->rules[0].shadow);
    ck_assert_uint_eq(c->tiers[0].burst, 7);
    rl_conf_destroy(c);
    /* "0 (never)" is any duration of 0, with its unit too */
    for (int i = 0; i < 3; i++) {
        static const char *const never[] = {"[clients]\nidle_timeout = 0\n",
                                            "[clients]\nidle_timeout = 0s\n",
                                            "[clients]\nidle_timeout = 0ms\n"};

        c = parse_ok(never[i]);
        ck_assert_uint_eq(c->clients.idle_timeout_ms, 0);
        rl_conf_destroy(c);
    }
}
END_TEST

START_TEST(test_every_key)
{
    struct rl_conf *c = parse_ok("[cluster]\n"
                                 "name = prod-eu_1.a\n"
                                 "zookeeper = zk1:2181,zk2:2181,10.0.0.3:2181/chroot\n"
                                 "session_timeout = 10m\n"
                                 "shards = 1048576\n"
                                 "insecure = yes\n"
                                 "inline_failure = closed\n"
                                 "envoy_config = /etc/ratelimit/config\n"
                                 "envoy_merge_domains = yes\n"
                                 "[router]\n"
                                 "listen = 0.0.0.0:8000\n"
                                 "rls = 0.0.0.0:8081\n"
                                 "rls_failure = error\n"
                                 "rls_headers = draft\n"
                                 "deadline = 1ms\n"
                                 "request_log =\n"
                                 "request_log_sample = 100\n"
                                 "workers = 64\n"
                                 "[clients]\n"
                                 "max_connections = 500\n"
                                 "max_connections_per_peer = 20\n"
                                 "router_reserve = 0\n"
                                 "idle_timeout = 0\n"
                                 "frame_timeout = 2s\n"
                                 "buffer_memory = 32mb\n"
                                 "[node n1]\n"
                                 "memory = 512MB\n"
                                 "listen = 0.0.0.0:7401\n"
                                 "advertise = host-1.example:7411\n"
                                 "[node n2]\n"
                                 "listen = 127.0.0.1:7402\n"
                                 "memory = 1mb\n"
                                 "[service s]\n"
                                 "failure = closed\n"
                                 "mode = shadow\n"
                                 "limit = token_bucket 4294967295 per 4294967295ms "
                                 "burst 4294967295\n"
                                 "limit = sliding_window_log 1 per 1ms\n");

    ck_assert_str_eq(c->cluster_name, "prod-eu_1.a");
    ck_assert_str_eq(c->zookeeper, "zk1:2181,zk2:2181,10.0.0.3:2181/chroot");
    ck_assert_uint_eq(c->session_timeout_ms, 600000);
    ck_assert_uint_eq(c->shards, 1048576);
    ck_assert(c->insecure);
    ck_assert(c->inline_fail_closed);
    ck_assert(c->rls_fail_error);
    ck_assert_int_eq(c->rls_headers, RL_CONF_RLS_HEADERS_DRAFT);
    ck_assert_str_eq(c->router_host, "0.0.0.0");
    ck_assert_uint_eq(c->router_port, 8000);
    ck_assert_uint_eq(c->deadline_ms, 1);
    ck_assert_str_eq(c->request_log, "");
    ck_assert_uint_eq(c->log_sample, 100);
    ck_assert_uint_eq(c->router_workers, 64);
    ck_assert_str_eq(c->envoy_config, "/etc/ratelimit/config");
    ck_assert(c->envoy_merge_domains);
    ck_assert_str_eq(c->rls_host, "0.0.0.0");
    ck_assert_uint_eq(c->rls_port, 8081);
    ck_assert_uint_eq(c->clients.max_connections, 500);
    ck_assert_uint_eq(c->clients.max_per_peer, 20);
    ck_assert_uint_eq(c->clients.router_reserve, 0);
    ck_assert_uint_eq(c->clients.idle_timeout_ms, 0);
    ck_assert_uint_eq(c->clients.frame_timeout_ms, 2000);
    ck_assert_uint_eq(c->clients.buffer_memory, 32ull << 20);
    ck_assert_uint_eq(c->nnodes, 2);
    ck_assert_str_eq(c->nodes[0].host, "0.0.0.0");
    {
        uint16_t port;

        ck_assert_str_eq(rl_conf_node_dial(&c->nodes[0], &port), "host-1.example");
        ck_assert_uint_eq(port, 7411);
        ck_assert_str_eq(rl_conf_node_dial(&c->nodes[1], &port), "127.0.0.1");
        ck_assert_uint_eq(port, 7402);
    }
    ck_assert_uint_eq(c->nodes[0].memory, 512ull << 20);
    ck_assert_uint_eq(c->nodes[1].memory, 1ull << 20);
    ck_assert_ptr_eq(rl_conf_node(c, "n2"), &c->nodes[1]);
    ck_assert_ptr_null(rl_conf_node(c, "n3"));
    ck_assert(c->rules[0].fail_closed);
    ck_assert(c->rules[0].shadow);
    ck_assert_int_eq(c->tiers[0].algo, RL_ALGO_TOKEN_BUCKET);
    ck_assert_uint_eq(c->tiers[0].limit, RL_CONF_LIMIT_MAX);
    ck_assert_uint_eq(c->tiers[0].window_ms, RL_CONF_WINDOW32_MAX);
    ck_assert_uint_eq(c->tiers[0].burst, RL_CONF_LIMIT_MAX);
    ck_assert_int_eq(c->tiers[1].algo, RL_ALGO_SLIDING_WINDOW_LOG);
    ck_assert_uint_eq(c->tiers[1].limit, 1);
    ck_assert_uint_eq(c->tiers[1].window_ms, 1);
    ck_assert_uint_eq(c->tiers[1].burst, 1);
    rl_conf_destroy(c);
}
END_TEST

static const struct {
    const char *text;
    int line;
    const char *phrase;
} errors[] = {
    /* Unknown sections and keys. */
    {"[foo]\n", 1, "unknown section [foo] (use cluster, router, clients, node, service or client)"},
    {"\n\n[cluster]\nnmae = x\n", 4, "unknown key \"nmae\" in a [cluster] section"},
    /* Regions (docs/REGIONS.md). */
    {"[cluster]\nregions = a:1 b\n", 2, "regions: \"a:1 b\" is not a list of NAME:WEIGHT"},
    {"[cluster]\nregions = a:0\n", 2, "has a weight outside 1..1000000"},
    {"[cluster]\nregions = a:1 a:2\n", 2, "names a region twice"},
    {"[cluster]\nregion = a/b\n", 2, "region: \"a/b\" is not 1..64 characters"},
    {"[cluster]\nregion = c\nregions = a:1 b:1\n", 3,
     "[cluster] region \"c\" is not one of [cluster] regions"},
    {"[cluster]\nregions = a:1 b:1\n", 2, "[cluster] regions is set but not [cluster] region"},
    {"[service s]\nscope = world\n", 2, "scope: \"world\" is not region or global"},
    /* [client NAME] and the cluster secret. */
    {"[client web]\nservices = s\n[service s]\nlimit = gcra 1 per 1s\n", 1,
     "[client web] has no token_sha256"},
    {"[client web]\ntoken_sha256 = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", 1, "[client web] has no services"},
    {"[client web]\ntoken_sha256 = abc\n", 2,
     "token_sha256: \"abc\" is not 64 hex digits (the SHA-256 of the token: rl-cli hash-token)"},
    {"[client web]\ntoken_sha256 = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\nservices = nosuch\n", 3,
     "services: \"nosuch\" has no [service nosuch] section in this file"},
    {"[client web]\nservices = ,\n", 2, "services: \",\" names no service"},
    {"[client cluster]\n", 1, "nor \"cluster\", the name of the cluster secret"},
    {"[client a]\ntoken_sha256 = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\nservices = *\n[client a]\n", 4,
     "duplicate section [client a] (first at line 1)"},
    {"[client a]\ntoken_sha256 = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\ntoken_sha256 = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\ntoken_sha256 = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n"
     "token_sha256 = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\ntoken_sha256 = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", 6, "is one token too many"},
    {"[client a]\nstats = maybe\n", 2, "stats: \"maybe\" is not yes or no"},
    {"[cluster]\nsecret_file = /nonexistent/secret\n", 2,
     "secret_file: cannot open /nonexistent/secret: No such file or directory"},
    {"[cluster]\nfencing = sometimes\n", 2, "fencing: \"sometimes\" is not expiry or disconnect"},
    {"[node a]\nlisten = h:1\nlimit = gcra 1 per 1s\n", 3, "unknown key \"limit\""},
    {"[service s]\nlisten = h:1\n", 2, "unknown key \"listen\" in a [service] section"},
    /* Bad values, [cluster]. */
    {"[cluster]\nname = a/b\n", 2,
     "name: \"a/b\" is not 1..64 characters of A-Z a-z 0-9 _ . - (nor . or ..)"},
    {"[cluster]\nname = ..\n", 2, "name: \"..\" is not 1..64"},
    {"[cluster]\nname =\n", 2, "name: \"\" is not 1..64"},
    {"[cluster]\nname = "
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
     2, "is not 1..64"},
    {"[cluster]\nzookeeper = zk1\n", 2,
     "zookeeper: \"zk1\" is not HOST:PORT[,HOST:PORT...][/CHROOT]"},
    {"[cluster]\nzookeeper = zk1:2181,\n", 2, "is not HOST:PORT[,HOST:PORT...]"},
    {"[cluster]\nzookeeper = zk1:2181, zk2:2181\n", 2, "is not HOST:PORT[,HOST:PORT...]"},
    {"[cluster]\nzookeeper = zk1:2181/\n", 2, "is not HOST:PORT[,HOST:PORT...]"},
    {"[cluster]\nzookeeper = zk1:70000\n", 2, "has a port outside 1..65535"},
    {"[cluster]\nsession_timeout = 4\n", 2,
     "session_timeout: \"4\" is not a duration (use ms, s, m, h or d)"},
    {"[cluster]\nsession_timeout = 999ms\n", 2,
     "session_timeout: \"999ms\" is out of range (1s..10m)"},
    {"[cluster]\nsession_timeout = 11m\n", 2, "is out of range (1s..10m)"},
    {"[cluster]\nsession_timeout = 99999999999999999999s\n", 2, "is too large"},
    {"[cluster]\nshards = 0\n", 2, "shards: \"0\" is out of range (1..1048576)"},
    {"[cluster]\nshards = 1048577\n", 2, "is out of range (1..1048576)"},
    {"[cluster]\nshards = 4k\n", 2, "shards: \"4k\" is not a number"},
    {"[cluster]\nshards = -1\n", 2, "is not a number"},
    /* Bad values, [router]. */
    {"[router]\nlisten = localhost\n", 2, "listen: \"localhost\" is not HOST:PORT"},
    {"[clients]\nmax_connections = 0\n", 2, "is out of range (1..1000000)"},
    {"[cluster]\ninsecure = maybe\n", 2, "insecure: \"maybe\" is not yes or no"},
    {"[cluster]\nenvoy_merge_domains = 1\n", 2,
     "envoy_merge_domains: \"1\" is not yes or no"},
    {"[router]\nenvoy_merge_domains = yes\n", 2, "envoy_merge_domains"},
    {"[cluster]\ninline_failure = shut\n", 2, "inline_failure: \"shut\" is not open or closed"},
    {"[router]\nrls = localhost\n", 2, "rls: \"localhost\" is not HOST:PORT"},
    {"[router]\nrls_failure = open\n", 2, "rls_failure: \"open\" is not policy or error"},
    {"[router]\nrls_headers = x-ratelimit\n", 2,
     "rls_headers: \"x-ratelimit\" is not off, ratelimit or draft"},
    {"[node a]\nlisten = 0.0.0.0:7401\n", 1,
     "[node a] listens on the wildcard address 0.0.0.0: add advertise = HOST:PORT"},
    {"[node a]\nlisten = [::]:7401\n", 1, "wildcard address ::"},
    {"[node a]\nlisten = 0.0.0.0:7401\nadvertise = 0.0.0.0:7401\n", 3,
     "advertise: \"0.0.0.0:7401\" is a wildcard address"},
    {"[clients]\nmax_connections_per_peer = many\n", 2, "max_connections_per_peer"},
    {"[clients]\nidle_timeout = 5\n", 2, "idle_timeout"},
    {"[clients]\nidle_timeout = 999ms\n", 2, "idle_timeout"},
    {"[clients]\nframe_timeout = 10ms\n", 2, "is out of range (100ms..1h)"},
    {"[clients]\nbuffer_memory = 10kb\n", 2, "is below the minimum of 1mb"},
    {"[clients]\nmax_conns = 5\n", 2, "max_conns"},
    {"[clients]\n[clients]\n", 2, "duplicate section [clients] (first at line 1)"},
    {"[router]\nlisten = 127.0.0.1:0\n", 2, "has a port outside 1..65535"},
    {"[router]\nlisten = 127.0.0.1:7400;x\n", 2, "is not HOST:PORT"},
    {"[router]\ndeadline = 0ms\n", 2, "deadline: \"0ms\" is out of range (1ms..10m)"},
    {"[router]\ndeadline = 50\n", 2, "is not a duration"},
    {"[router]\nrequest_log_sample = 0\n", 2,
     "request_log_sample: \"0\" is out of range (1..4294967295)"},
    {"[router]\nrequest_log_sample = 4294967296\n", 2, "is out of range"},
    {"[router]\nworkers = 0\n", 2, "workers: \"0\" is out of range (1..64)"},
    {"[router]\nworkers = 65\n", 2, "workers: \"65\" is out of range (1..64)"},
    {"[router]\nworkers = two\n", 2, "is not a number"},
    {"[cluster]\nevents_log_keep = 1001\n", 2,
     "events_log_keep: \"1001\" is out of range (0..1000)"},
    {"[cluster]\nevents_log_rate = 1000001\n", 2,
     "events_log_rate: \"1000001\" is out of range (0..1000000)"},
    {"[cluster]\nevents_log_max_size = lots\n", 2, "is not a size"},
    {"[router]\nevents_log_keep = 1\n", 2, "events_log_keep"},
    /* Bad values, [node]. */
    {"[node a]\nlisten = 127.0.0.1:7401\nmemory = 1000kb\n", 3,
     "memory: \"1000kb\" is below the minimum of 1mb"},
    {"[node a]\nlisten = 127.0.0.1:7401\nmemory = 1tb\n", 3,
     "memory: \"1tb\" is not a size (use bytes or k, kb, m, mb, g or gb)"},
    {"[node a]\nlisten = 127.0.0.1\n", 2, "listen: \"127.0.0.1\" is not HOST:PORT"},
    /* Bad values, [service]. */
    {"[service s]\nlimit = 10 per\n", 2,
     "limit: \"10 per\" is not \"ALGORITHM N per DURATION [burst B]\""},
    {"[service s]\nlimit =\n", 2, "is not \"ALGORITHM N per DURATION [burst B]\""},
    {"[service s]\nlimit = gcra 10 every 1s\n", 2, "is not \"ALGORITHM N per"},
    {"[service s]\nlimit = gcra 10 per 1s burst\n", 2, "is not \"ALGORITHM N per"},
    {"[service s]\nlimit = gcra 10 per 1s burst 5 6\n", 2, "is not \"ALGORITHM N per"},
    {"[service s]\nlimit = gcra 10 per 1s bust 5\n", 2, "is not \"ALGORITHM N per"},
    {"[service s]\nlimit = bucket 10 per 1s\n", 2,
     "limit: \"bucket 10 per 1s\" has an unknown algorithm (use fixed_window, "
     "sliding_window_log, sliding_window_counter, token_bucket, gcra, leaky_bucket or concurrency)"},
    {"[service s]\nlimit = concurrency 5 per 1s\n", 2,
     "limit: \"concurrency 5 per 1s\" is not \"concurrency N lease DURATION\""},
    {"[service s]\nlimit = concurrency 5 lease 1s burst 5\n", 2,
     "is not \"concurrency N lease DURATION\""},
    {"[service s]\nlimit = gcra 5 lease 1s\n", 2, "is not \"ALGORITHM N per"},
    {"[service s]\nlimit = concurrency 10001 lease 1s\n", 2,
     "has a concurrency outside 1..10000"},
    {"[service s]\nlimit = concurrency 0 lease 1s\n", 2, "has a concurrency outside 1..10000"},
    {"[service s]\nlimit = concurrency 5 lease 4294967296ms\n", 2,
     "has a lease outside 1ms..4294967295ms (about 49.7 days)"},
    {"[router]\ndeny_cache = yes\n", 2,
     "deny_cache: \"yes\" is not on, off or a number of entries (0..16777216)"},
    {"[service s]\nlimit = fixed_window 10 per 1s burst 5\n", 2,
     "has a burst, which only token_bucket, gcra and leaky_bucket take"},
    {"[service s]\nlimit = sliding_window_counter 10 per 1s burst 5\n", 2, "has a burst"},
    {"[service s]\nlimit = gcra 0 per 1s\n", 2, "has a limit outside 1..4294967295"},
    {"[service s]\nlimit = gcra 4294967296 per 1s\n", 2, "has a limit outside 1..4294967295"},
    {"[service s]\nlimit = gcra ten per 1s\n", 2, "has a limit \"ten\" that is not a number"},
    {"[service s]\nlimit = gcra 10 per 1x\n", 2,
     "has a window \"1x\" that is not a duration (use ms, s, m, h or d)"},
    {"[service s]\nlimit = gcra 10 per 1\n", 2, "that is not a duration"},
    {"[service s]\nlimit = gcra 10 per 0ms\n", 2, "has a window outside 1ms..4294967295ms"},
    {"[service s]\nlimit = gcra 10 per 50d\n", 2,
     "has a window outside 1ms..4294967295ms (about 49.7 days; only fixed_window and "
     "sliding_window_counter count longer windows, up to 366 days)"},
    {"[service s]\nlimit = token_bucket 10 per 4294967296ms\n", 2,
     "has a window outside 1ms..4294967295ms"},
    {"[service s]\nlimit = sliding_window_log 10 per 365d\n", 2,
     "has a window outside 1ms..4294967295ms"},
    {"[service s]\nlimit = fixed_window 10 per 367d\n", 2,
     "has a window outside 1ms..31622400000ms (366 days)"},
    {"[service s]\nlimit = sliding_window_counter 10 per 31622400001ms\n", 2,
     "has a window outside 1ms..31622400000ms (366 days)"},
    {"[service s]\nlimit = gcra 10 per 1s burst 0\n", 2, "has a burst outside 1..4294967295"},
    {"[service s]\nlimit = gcra 10 per 1s burst x\n", 2, "has a burst \"x\" that is not a number"},
    {"[service s]\nfailure = maybe\nlimit = gcra 1 per 1s\n", 2,
     "failure: \"maybe\" is not open, open_unlimited or closed"},
    {"[service s]\nmode = dry\nlimit = gcra 1 per 1s\n", 2,
     "mode: \"dry\" is not enforce or shadow"},
    /* Duplicate sections. */
    {"[node a]\nlisten = h:1\n[node a]\nlisten = h:2\n", 3,
     "duplicate section [node a] (first at line 1)"},
    {"[service s /e]\nlimit = gcra 1 per 1s\n[service s /e]\nlimit = gcra 1 per 1s\n", 3,
     "duplicate section [service s /e] (first at line 1)"},
    {"[service s]\nlimit = gcra 1 per 1s\n[service s /e]\nlimit = gcra 1 per 1s\n"
     "[service  s ]\nlimit = gcra 1 per 1s\n",
     5, "duplicate section [service s] (first at line 1)"},
    {"[cluster]\n[router]\n[cluster]\n", 3, "duplicate section [cluster] (first at line 1)"},
    {"[router]\n[router]\n", 2, "duplicate section [router] (first at line 1)"},
    /* Two nodes on one address (the host compared without case). */
    {"[node a]\nlisten = h:1\n[node b]\nlisten = H:1\n", 4,
     "listen: \"H:1\" is also the listen address of [node a] (line 1)"},
    /* Duplicate keys. */
    {"[service s]\nmode = shadow\nlimit = gcra 1 per 1s\nmode = enforce\n", 4,
     "duplicate key \"mode\" (first at line 2)"},
    {"[service s]\nfailure = open\nfailure = open\nlimit = gcra 1 per 1s\n", 3,
     "duplicate key \"failure\""},
    {"[node a]\nlisten = h:1\nlisten = h:2\n", 3, "duplicate key \"listen\" (first at line 2)"},
    {"[cluster]\nshards = 1\nshards = 2\n", 3, "duplicate key \"shards\""},
    {"[router]\nrequest_log = a\nrequest_log = b\n", 3, "duplicate key \"request_log\""},
    /* Malformed section headers. */
    {"[node a\n", 1, "malformed section header"},
    {"[]\n", 1, "malformed section header"},
    {"[ ]\n", 1, "malformed section header"},
    {"[cluster] x\n", 1, "malformed section header"},
    {"[cluster x]\n", 1, "malformed section header: expected [cluster]"},
    {"[router x]\n", 1, "malformed section header: expected [router]"},
    {"[node]\n", 1, "malformed section header: expected [node NAME]"},
    {"[node a b]\n", 1, "malformed section header: expected [node NAME]"},
    {"[service]\n", 1, "malformed section header: expected [service SERVICE]"},
    {"[service a b c]\n", 1, "expected [service SERVICE] or [service SERVICE ENDPOINT]"},
    {"[node a/b]\n", 1, "node name \"a/b\" is not 1..63 characters"},
    {"[node .]\n", 1, "node name \".\" is not 1..63"},
    {"[node aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa]\n", 1,
     "is not 1..63"},
    {"[service "
     "sssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssss"
     "ssssssssssssssssssssssssssssssssssssssssss]\n",
     1, "service name is not 1..128 bytes"},
    {"[service s "
     "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"
     "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee]\n",
     1, "endpoint name is not 1..128 bytes"},
    /* Names are printable UTF-8 (no invalid sequence, overlong form, surrogate, nor C0, DEL
     * or C1 control); the message shows the bad bytes as \xHH and gives their offset. */
    {"[service s\x01]\n", 1, "service name \"s\\x01\" has a control character at byte offset 1"},
    {"[service bad\xff\xfe]\nlimit = gcra 1 per 1s\n", 1,
     "service name \"bad\\xff\\xfe\" is not valid UTF-8 at byte offset 3"},
    {"[service \xc0\xaf]\n", 1, "service name \"\\xc0\\xaf\" is not valid UTF-8 at byte offset 0"},
    {"[service ab\xe0\x80\xaf]\n", 1, "is not valid UTF-8 at byte offset 2"},    /* overlong '/' */
    {"[service a\xed\xa0\x80]\n", 1, "is not valid UTF-8 at byte offset 1"},     /* U+D800 */
    {"[service a\xf4\x90\x80\x80]\n", 1, "is not valid UTF-8 at byte offset 1"}, /* > U+10FFFF */
    {"[service caf\xc3]\n", 1, "is not valid UTF-8 at byte offset 3"},           /* cut short */
    {"[service a\x7f]\n", 1, "service name \"a\\x7f\" has a control character at byte offset 1"},
    {"[service s /p\xc2\x85]\n", 1,
     "endpoint name \"/p\\xc2\\x85\" has a control character at byte offset 2"}, /* U+0085 */
    {"[service s /\xe2\x82\xac\x80]\n", 1,
     "endpoint name \"/\xe2\x82\xac\\x80\" is not valid "
     "UTF-8 at byte offset 4"},
    {"[node a\xff]\nlisten = h:1\n", 1, "node name \"a\\xff\" is not valid UTF-8 at byte offset 1"},
    {"[client w\xe9"
     "b]\n",
     1, "client name \"w\\xe9b\" is not valid UTF-8 at byte offset 1"},
    {"[node \xc3\xa9]\n", 1, "node name \"\xc3\xa9\" is not 1..63 characters"},
    {"[cluster]\nname = x\x1b[2J\n", 2,
     "name: \"x\\x1b[2J\" has a control character at byte offset 1"},
    {"[cluster]\nname = \xfe\n", 2, "name: \"\\xfe\" is not valid UTF-8 at byte offset 0"},
    {"[\xff\x01]\n", 1, "unknown section [\\xff\\x01]"},
    /* Keys outside a section, lines that are not KEY = VALUE. */
    {"name = x\n[cluster]\n", 1, "key \"name\" is outside any section"},
    {"; only a comment\n[foo]\nx = 1\n", 2, "unknown section [foo]"},
    {"[cluster]\nname\n", 2, "expected KEY = VALUE"},
    {"[cluster]\nname: x\n", 2, "expected KEY = VALUE"},
    {"[cluster]\n= x\n", 2, "expected KEY = VALUE"},
    {"[cluster]\n]\n", 2, "expected KEY = VALUE"},
    /* An indented line is a line of its own, never the continuation of a value. */
    {"[router]\nrequest_log = a\n    b\n", 3, "expected KEY = VALUE"},
    {"[service s]\nlimit = gcra 1 per 1s\n  limit = gcra 1 per 1s burst 0\n", 3,
     "has a burst outside"},
    /* What a section must have, reported at its header. */
    {"[service s]\nmode = shadow\n\n[router]\n", 1, "[service s] has no limit"},
    {"[cluster]\n\n[service s /e]\n; nothing\n", 3, "[service s /e] has no limit"},
    {"[node a]\nmemory = 1g\n", 1, "[node a] has no listen"},
    {"[node a]\n[node b]\nlisten = h:1\n", 1, "[node a] has no listen"},
    /* Tiers per section. */
    {"[service s]\n"
     "limit = gcra 1 per 1s\nlimit = gcra 1 per 1s\nlimit = gcra 1 per 1s\n"
     "limit = gcra 1 per 1s\nlimit = gcra 1 per 1s\nlimit = gcra 1 per 1s\n"
     "limit = gcra 1 per 1s\nlimit = gcra 1 per 1s\nlimit = gcra 1 per 1s\n"
     "limit = gcra 1 per 1s\nlimit = gcra 1 per 1s\nlimit = gcra 1 per 1s\n"
     "limit = gcra 1 per 1s\nlimit = gcra 1 per 1s\nlimit = gcra 1 per 1s\n"
     "limit = gcra 1 per 1s\nlimit = gcra 2 per 1s\n",
     18, "limit: \"gcra 2 per 1s\" is one tier too many: a section has at most 16"},
};

/* Client sections resolve to rules; tokens match by hash, in constant time; the secret is
 * read from its file and answers as "cluster". */
START_TEST(test_clients_and_secret)
{
    char secret[PATH_MAX], text[PATH_MAX + 1024], web[65], err[256];
    uint8_t h[32];
    struct rl_conf *c = NULL;
    const struct rl_rule *shop, *other;

    ck_assert_int_eq(rl_harness_tmppath(secret, sizeof(secret), "secret"), 0);
    ck_assert_int_eq(rl_harness_write_file(secret, "0123456789abcdef0123\n"), 0);
    ck_assert_int_eq(chmod(secret, 0600), 0);
    rl_auth_sha256("tok-web", 7, h);
    rl_auth_format_hash(h, web);
    snprintf(text, sizeof(text),
             "[cluster]\nsecret_file = %s\nfencing = disconnect\n[client web]\n"
             "token_sha256 = %s\ntoken_sha256 = %s\nservices = shop, x\n"
             "[service shop]\nlimit = gcra 1 per 1s\n[service shop e]\nlimit = gcra 1 per 1s\n"
             "[service other]\nlimit = gcra 1 per 1s\n[service x]\nlimit = gcra 1 per 1s\n",
             secret, "00000000000000000000000000000000000000000000000000000000000000ff", web);
    ck_assert_msg(rl_conf_parse("t.conf", text, &c, err, sizeof(err)) == 0, "%s", err);
    ck_assert(c->fence_disconnect);
    ck_assert_uint_eq(c->secret_len, 20);
    ck_assert_int_eq(memcmp(c->secret, "0123456789abcdef0123", 20), 0);
    ck_assert_uint_eq(c->nauth_clients, 1);
    ck_assert_uint_eq(c->auth_clients[0].nhashes, 2);
    ck_assert_ptr_eq(rl_conf_client_by_token(c, "tok-web", 7), &c->auth_clients[0]);
    ck_assert_ptr_null(rl_conf_client_by_token(c, "tok-web ", 8));
    ck_assert_ptr_eq(rl_conf_client_by_token(c, "0123456789abcdef0123", 20), &c->cluster_client);
    ck_assert(rl_conf_is_secret(c, "0123456789abcdef0123", 20));
    ck_assert(!rl_conf_is_secret(c, "0123456789abcdef012", 19));
    shop = rl_conf_rule(c, "shop", 4, "e", 1);
    other = rl_conf_rule(c, "other", 5, NULL, 0);
    ck_assert(rl_conf_client_may(&c->auth_clients[0], shop));
    ck_assert(rl_conf_client_may(&c->auth_clients[0], rl_conf_rule(c, "shop", 4, NULL, 0)));
    ck_assert(!rl_conf_client_may(&c->auth_clients[0], other));
    ck_assert(!rl_conf_client_may(&c->auth_clients[0], NULL));
    ck_assert(rl_conf_client_may(&c->cluster_client, other));
    rl_conf_destroy(c);
    /* Readable by others: refused, and the message never holds the secret. */
    ck_assert_int_eq(chmod(secret, 0640), 0);
    ck_assert_int_eq(rl_conf_parse("t.conf", text, &c, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "(mode 0640): chmod 600 it") != NULL, "%s", err);
    ck_assert_msg(strstr(err, "0123456789") == NULL, "%s", err);
    /* Too short to be a secret. */
    ck_assert_int_eq(rl_harness_write_file(secret, "short\n"), 0);
    ck_assert_int_eq(chmod(secret, 0600), 0);
    ck_assert_int_eq(rl_conf_parse("t.conf", text, &c, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "holds 5 bytes; at least 16 are needed") != NULL, "%s", err);
}
END_TEST

/* [clients] adjust and [client NAME] adjust: who may refund, and which rules a router's deny
 * cache may then hold (rl_conf_rule_refundable). */
START_TEST(test_client_adjust)
{
    static const char rules[] = "[service shop]\nlimit = gcra 1 per 1s\n"
                                "[service other]\nlimit = gcra 1 per 1s\n";
    static const char hash[] = "00000000000000000000000000000000000000000000000000000000000000ff";
    char text[2048];
    struct rl_conf *c;

    /* No [client] sections: everyone may refund, so every rule may be refunded... */
    c = parse_ok(rules);
    ck_assert(c->clients_adjust);
    ck_assert(rl_conf_may_refund(c, NULL));
    ck_assert(rl_conf_rule_refundable(c, rl_conf_rule(c, "shop", 4, NULL, 0)));
    rl_conf_destroy(c);
    /* ...unless [clients] adjust = no */
    snprintf(text, sizeof(text), "[clients]\nadjust = no\n%s", rules);
    c = parse_ok(text);
    ck_assert(!rl_conf_may_refund(c, NULL));
    ck_assert(!rl_conf_rule_refundable(c, rl_conf_rule(c, "shop", 4, NULL, 0)));
    rl_conf_destroy(c);
    /* [client] sections: the default is [clients] adjust (yes), each may say otherwise; a rule
     * may be refunded when a client that may refund may CHECK under it */
    snprintf(text, sizeof(text),
             "[client a]\ntoken_sha256 = %s\nservices = shop\n"
             "[client b]\ntoken_sha256 = %s\nservices = *\nadjust = no\n%s",
             hash, "00000000000000000000000000000000000000000000000000000000000000fe", rules);
    c = parse_ok(text);
    ck_assert(c->auth_clients[0].adjust);
    ck_assert(!c->auth_clients[1].adjust);
    ck_assert(rl_conf_may_refund(c, &c->auth_clients[0]));
    ck_assert(!rl_conf_may_refund(c, &c->auth_clients[1]));
    ck_assert(rl_conf_rule_refundable(c, rl_conf_rule(c, "shop", 4, NULL, 0)));
    ck_assert(!rl_conf_rule_refundable(c, rl_conf_rule(c, "other", 5, NULL, 0)));
    rl_conf_destroy(c);
    /* [clients] adjust = no, written after the sections, is their default all the same */
    snprintf(text, sizeof(text),
             "[client a]\ntoken_sha256 = %s\nservices = shop\n"
             "[client b]\ntoken_sha256 = %s\nservices = *\nadjust = yes\n"
             "[clients]\nadjust = no\n%s",
             hash, "00000000000000000000000000000000000000000000000000000000000000fe", rules);
    c = parse_ok(text);
    ck_assert(!c->auth_clients[0].adjust);
    ck_assert(c->auth_clients[1].adjust);
    ck_assert(rl_conf_rule_refundable(c, rl_conf_rule(c, "other", 5, NULL, 0)));
    rl_conf_destroy(c);
    expect_error("[clients]\nadjust = maybe\n", 2, "is not yes or no");
}
END_TEST

START_TEST(test_errors)
{
    expect_error(errors[_i].text, errors[_i].line, errors[_i].phrase);
}
END_TEST

START_TEST(test_error_buffers)
{
    struct rl_conf *c = NULL;
    char small[12];

    /* A short buffer gets a truncated, terminated message; no buffer is allowed. */
    memset(small, 'x', sizeof(small));
    ck_assert_int_eq(rl_conf_parse("t.conf", "[foo]\n", &c, small, sizeof(small)), -EINVAL);
    ck_assert_str_eq(small, "t.conf:1: u");
    ck_assert_ptr_null(c);
    ck_assert_int_eq(rl_conf_parse("t.conf", "[foo]\n", &c, NULL, 0), -EINVAL);
    ck_assert_ptr_null(c);
}
END_TEST

START_TEST(test_long_lines)
{
    size_t n = 5000;
    char *text = malloc(n + 64);
    struct rl_conf *c;
    int len;

    ck_assert_ptr_nonnull(text);
    /* A long comment is fine: the limit applies to what is left of a line. */
    len = snprintf(text, n + 64, "[router]\nrequest_log = x.log ; ");
    memset(text + len, 'c', n);
    strcpy(text + len + n, "\ndeadline = 7ms\n");
    c = parse_ok(text);
    ck_assert_str_eq(c->request_log, "x.log");
    ck_assert_uint_eq(c->deadline_ms, 7);
    rl_conf_destroy(c);

    len = snprintf(text, n + 64, "[router]\nrequest_log = ");
    memset(text + len, 'p', n);
    strcpy(text + len + n, "\n");
    expect_error(text, 2, "line is longer than 4096 bytes");

    /* A value past libinih's default 200 bytes, and a section name past its 49. */
    len = snprintf(text, n + 64, "[router]\nrequest_log = /");
    memset(text + len, 'p', 3000);
    strcpy(text + len + 3000, "\n");
    c = parse_ok(text);
    ck_assert_uint_eq(strlen(c->request_log), 3001);
    rl_conf_destroy(c);
    free(text);

    c = parse_ok("[service ssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssss "
                 "/eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"
                 "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee]\nlimit = gcra 1 per 1s\n");
    ck_assert_uint_eq(c->rules[0].service_len, 68);
    ck_assert_uint_eq(c->rules[0].endpoint_len, 128);
    ck_assert_ptr_eq(rl_conf_rule(c, c->rules[0].service, 68, c->rules[0].endpoint, 128),
                     &c->rules[0]);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_too_many_tiers)
{
    /* 65536 sections of 16 tiers: the 1048576th tier is one too many. */
    size_t cap = (size_t)65536 * (32 + 16 * 24);
    char *text = malloc(cap);
    struct rl_conf *c;
    size_t len = 0;
    int s;
    int t;

    ck_assert_ptr_nonnull(text);
    for (s = 0; s < 65536; s++) {
        len += (size_t)snprintf(text + len, cap - len, "[service s%d]\n", s);
        for (t = 0; t < 16; t++) {
            if (s == 65535 && t == 15) {
                break;
            }
            len += (size_t)snprintf(text + len, cap - len, "limit = gcra %d per 1s\n", t + 1);
        }
    }
    c = parse_ok(text);
    ck_assert_uint_eq(c->ntiers, RL_CONF_TIERS_MAX);
    ck_assert_uint_eq(c->tiers[RL_CONF_TIERS_MAX - 1].id, 1048574);
    ck_assert_uint_eq(c->rules[65535].first_tier, 65535 * 16);
    ck_assert_ptr_eq(rl_conf_rule(c, "s65535", 6, NULL, 0), &c->rules[65535]);
    rl_conf_destroy(c);

    snprintf(text + len, cap - len, "limit = gcra 1 per 1s\n");
    expect_error(text, 65536 * 17, "is one tier too many: a file has at most 1048575");
    free(text);
}
END_TEST

START_TEST(test_comments)
{
    struct rl_conf *c = parse_ok("# a comment\n"
                                 "; another\n"
                                 "   # an indented one\n"
                                 "[cluster] ; after a header\n"
                                 "name = demo\t# after a tab\n"
                                 "zookeeper = zk:1 # a comment\n"
                                 "[router]\t# after a tab\n"
                                 "request_log = /var/log/a;b#c.log ; no blank, no comment\n"
                                 "  deadline = 75ms\n"
                                 "\tlisten = 127.0.0.1:9 ;\n"
                                 "[service s]\n"
                                 "limit = gcra 1 per 1s    ; first\n"
                                 "    limit = gcra 2 per 1s # second, indented\n");

    ck_assert_str_eq(c->cluster_name, "demo");
    ck_assert_str_eq(c->zookeeper, "zk:1");
    ck_assert_str_eq(c->request_log, "/var/log/a;b#c.log");
    ck_assert_uint_eq(c->deadline_ms, 75);
    ck_assert_uint_eq(c->router_port, 9);
    ck_assert_uint_eq(c->ntiers, 2);
    ck_assert_uint_eq(c->tiers[1].limit, 2);
    rl_conf_destroy(c);

    /* A comment may leave an empty value. */
    c = parse_ok("[router]\nrequest_log = ; off\n");
    ck_assert_str_eq(c->request_log, "");
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_bom_crlf)
{
    struct rl_conf *c = parse_ok("\xEF\xBB\xBF[cluster]\r\nname = x\r\n\r\n[service s /e]\r\n"
                                 "limit = gcra 3 per 2s\r\n");

    ck_assert_str_eq(c->cluster_name, "x");
    ck_assert_str_eq(c->rules[0].endpoint, "/e");
    ck_assert_uint_eq(c->tiers[0].window_ms, 2000);
    rl_conf_destroy(c);
    /* No trailing newline, and a BOM only counts on the first line. */
    c = parse_ok("[cluster]\nname = y");
    ck_assert_str_eq(c->cluster_name, "y");
    rl_conf_destroy(c);
    expect_error("[cluster]\n\xEF\xBB\xBFname = y\n", 2, "unknown key");
}
END_TEST

static const struct {
    const char *in;
    uint64_t ms; /* when phrase is NULL */
    const char *phrase;
} durations[] = {
    {"0ms", 0, NULL},
    {"50ms", 50, NULL},
    {"4s", 4000, NULL},
    {"007s", 7000, NULL},
    {"1m", 60000, NULL},
    {"2h", 7200000, NULL},
    {"1d", 86400000, NULL},
    {"18446744073709551615ms", UINT64_MAX, NULL},
    {"213503982334d", 213503982334ull * 86400000, NULL},
    {"213503982335d", 0, "is too large"},
    {"18446744073709551616ms", 0, "is too large"},
    {"4", 0, "is not a duration (use ms, s, m, h or d)"},
    {"s", 0, "is not a duration"},
    {"", 0, "is not a duration"},
    {"4 s", 0, "is not a duration"},
    {"-1s", 0, "is not a duration"},
    {"+1s", 0, "is not a duration"},
    {"4S", 0, "is not a duration"},
    {"1.5s", 0, "is not a duration"},
    {"4sec", 0, "is not a duration"},
    {"4mss", 0, "is not a duration"},
};

START_TEST(test_durations)
{
    uint64_t ms = 12345;
    const char *why = rl_parse_duration_ms(durations[_i].in, &ms);

    if (durations[_i].phrase == NULL) {
        ck_assert_msg(why == NULL, "\"%s\": %s", durations[_i].in, why);
        ck_assert_uint_eq(ms, durations[_i].ms);
    } else {
        ck_assert_msg(why != NULL && strstr(why, durations[_i].phrase) != NULL,
                      "\"%s\": got \"%s\"", durations[_i].in, why ? why : "(null)");
        ck_assert_uint_eq(ms, 12345);
    }
}
END_TEST

static const struct {
    const char *in;
    uint64_t bytes;
    const char *phrase;
} sizes[] = {
    {"0", 0, NULL},
    {"4096", 4096, NULL},
    {"1k", 1024, NULL},
    {"1kb", 1024, NULL},
    {"2KB", 2048, NULL},
    {"1m", 1ull << 20, NULL},
    {"512mb", 512ull << 20, NULL},
    {"512Mb", 512ull << 20, NULL},
    {"1g", 1ull << 30, NULL},
    {"3GB", 3ull << 30, NULL},
    {"17179869183g", 17179869183ull << 30, NULL},
    {"17179869184g", 0, "is too large"},
    {"99999999999999999999", 0, "is too large"},
    {"", 0, "is not a size (use bytes or k, kb, m, mb, g or gb)"},
    {"kb", 0, "is not a size"},
    {"1b", 0, "is not a size"},
    {"1tb", 0, "is not a size"},
    {"1 kb", 0, "is not a size"},
    {"1kbb", 0, "is not a size"},
    {"1.5g", 0, "is not a size"},
    {"-1", 0, "is not a size"},
};

START_TEST(test_sizes)
{
    uint64_t bytes = 12345;
    const char *why = rl_parse_size(sizes[_i].in, &bytes);

    if (sizes[_i].phrase == NULL) {
        ck_assert_msg(why == NULL, "\"%s\": %s", sizes[_i].in, why);
        ck_assert_uint_eq(bytes, sizes[_i].bytes);
    } else {
        ck_assert_msg(why != NULL && strstr(why, sizes[_i].phrase) != NULL, "\"%s\": got \"%s\"",
                      sizes[_i].in, why ? why : "(null)");
        ck_assert_uint_eq(bytes, 12345);
    }
}
END_TEST

static const struct {
    const char *in;
    const char *host;
    uint16_t port;
    const char *phrase;
} hostports[] = {
    {"127.0.0.1:7400", "127.0.0.1", 7400, NULL},
    {"localhost:1", "localhost", 1, NULL},
    {"zk-1.example_x:65535", "zk-1.example_x", 65535, NULL},
    {"[::1]:7400", "::1", 7400, NULL},
    {"[fe80::1%eth0]:80", "fe80::1%eth0", 80, NULL},
    {"h:0", NULL, 0, "has a port outside 1..65535"},
    {"h:65536", NULL, 0, "has a port outside 1..65535"},
    {"h:99999999999999999999999", NULL, 0, "has a port outside 1..65535"},
    {"h:", NULL, 0, "is not HOST:PORT"},
    {"h:12a", NULL, 0, "is not HOST:PORT"},
    {"h:-1", NULL, 0, "is not HOST:PORT"},
    {":80", NULL, 0, "is not HOST:PORT"},
    {"h", NULL, 0, "is not HOST:PORT"},
    {"", NULL, 0, "is not HOST:PORT"},
    {"::1:80", NULL, 0, "is not HOST:PORT"},
    {"[::1]80", NULL, 0, "is not HOST:PORT"},
    {"[]:80", NULL, 0, "is not HOST:PORT"},
    {"[::1:80", NULL, 0, "is not HOST:PORT"},
    {"a b:80", NULL, 0, "is not HOST:PORT"},
    {"a/b:80", NULL, 0, "is not HOST:PORT"},
};

/* What may be served without authentication (and what a wildcard is). */
START_TEST(test_loopback_and_wildcard)
{
    static const char *const loop[] = {"127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.2"};
    static const char *const not_loop[] = {"0.0.0.0", "10.0.0.1", "128.0.0.1", "::",
                                           "fe80::1", "::ffff:10.0.0.1", "localhost", ""};

    for (size_t i = 0; i < sizeof(loop) / sizeof(loop[0]); i++) {
        ck_assert_msg(rl_parse_is_loopback(loop[i]), "%s", loop[i]);
    }
    for (size_t i = 0; i < sizeof(not_loop) / sizeof(not_loop[0]); i++) {
        ck_assert_msg(!rl_parse_is_loopback(not_loop[i]), "%s", not_loop[i]);
    }
    ck_assert(rl_conf_is_wildcard("0.0.0.0"));
    ck_assert(rl_conf_is_wildcard("::"));
    ck_assert(!rl_conf_is_wildcard("127.0.0.1"));
}
END_TEST

START_TEST(test_hostports)
{
    char *host = NULL;
    uint16_t port = 4242;
    const char *why = rl_parse_hostport(hostports[_i].in, &host, &port);

    if (hostports[_i].phrase == NULL) {
        ck_assert_msg(why == NULL, "\"%s\": %s", hostports[_i].in, why);
        ck_assert_str_eq(host, hostports[_i].host);
        ck_assert_uint_eq(port, hostports[_i].port);
        free(host);
    } else {
        ck_assert_msg(why != NULL && strstr(why, hostports[_i].phrase) != NULL,
                      "\"%s\": got \"%s\"", hostports[_i].in, why ? why : "(null)");
        ck_assert_ptr_null(host);
        ck_assert_uint_eq(port, 4242);
    }
}
END_TEST

/* utf8.h at the edges of each length: what is printable UTF-8, and where it is not. */
static const struct {
    const char *s;
    const char *why; /* NULL: printable */
    size_t at;
} utf8_cases[] = {
    {"", NULL, 0},
    {" ~", NULL, 0},
    {"\xc2\xa0\xdf\xbf", NULL, 0},                                 /* U+00A0, U+07FF */
    {"\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xef\xbf\xbf", NULL, 0}, /* U+0800 U+D7FF U+E000 U+FFFF */
    {"\xf0\x90\x80\x80\xf4\x8f\xbf\xbf", NULL, 0},                 /* U+10000, U+10FFFF */
    {"a\x1f", "has a control character", 1},
    {"ab\x7f", "has a control character", 2},
    {"\xc2\x80", "has a control character", 0},  /* U+0080 */
    {"x\xc2\x9f", "has a control character", 1}, /* U+009F */
    {"\x80", "is not valid UTF-8", 0},
    {"\xc1\xbf", "is not valid UTF-8", 0},         /* overlong U+007F */
    {"\xe0\x9f\xbf", "is not valid UTF-8", 0},     /* overlong U+07FF */
    {"\xf0\x8f\xbf\xbf", "is not valid UTF-8", 0}, /* overlong U+FFFF */
    {"ok\xed\xbf\xbf", "is not valid UTF-8", 2},   /* U+DFFF */
    {"\xf4\x90\x80\x80", "is not valid UTF-8", 0}, /* U+110000 */
    {"\xf5\x80\x80\x80", "is not valid UTF-8", 0},
    {"\xe2\x82", "is not valid UTF-8", 0}, /* cut short */
    {"\xe2\x82x", "is not valid UTF-8", 0},
};

START_TEST(test_utf8)
{
    size_t at = 99;
    const char *why = rl_utf8_check(utf8_cases[_i].s, strlen(utf8_cases[_i].s), &at);
    char out[64];

    if (utf8_cases[_i].why == NULL) {
        ck_assert_ptr_null(why);
        /* Printable text is written as it is. */
        rl_utf8_escape(out, sizeof(out), utf8_cases[_i].s, strlen(utf8_cases[_i].s), 0);
        ck_assert_str_eq(out, utf8_cases[_i].s);
    } else {
        ck_assert_msg(why != NULL && strcmp(why, utf8_cases[_i].why) == 0, "got %s",
                      why != NULL ? why : "(null)");
        ck_assert_uint_eq(at, utf8_cases[_i].at);
        /* The escaped text is printable. */
        rl_utf8_escape(out, sizeof(out), utf8_cases[_i].s, strlen(utf8_cases[_i].s), 0);
        ck_assert_ptr_null(rl_utf8_check(out, strlen(out), &at));
    }
}
END_TEST

START_TEST(test_algo_names)
{
    ck_assert_str_eq(rl_algo_name(RL_ALGO_FIXED_WINDOW), "fixed_window");
    ck_assert_str_eq(rl_algo_name(RL_ALGO_SLIDING_WINDOW_LOG), "sliding_window_log");
    ck_assert_str_eq(rl_algo_name(RL_ALGO_SLIDING_WINDOW_COUNTER), "sliding_window_counter");
    ck_assert_str_eq(rl_algo_name(RL_ALGO_TOKEN_BUCKET), "token_bucket");
    ck_assert_str_eq(rl_algo_name(RL_ALGO_GCRA), "gcra");
    ck_assert_str_eq(rl_algo_name(RL_ALGO_LEAKY_BUCKET), "leaky_bucket");
    ck_assert_str_eq(rl_algo_name(RL_ALGO_COUNT), "unknown");
    ck_assert_str_eq(rl_algo_name((enum rl_algo) - 1), "unknown");
}
END_TEST

/* Printable UTF-8 names are taken and looked up as bytes; a rules file (rl-cli rules push,
 * the rules znode, SIGHUP) refuses a bad one with the same message. */
START_TEST(test_utf8_names)
{
    struct rl_conf *c =
        parse_ok("[service caf\xc3\xa9]\nlimit = gcra 1 per 1s\n"
                 "[service \xe6\x94\xaf\xe4\xbb\x98 /pay\xe2\x82\xac\xf0\x9f\x98\x80]\n"
                 "limit = gcra 1 per 1s\n");
    struct rl_conf *r = NULL;
    char err[512];

    ck_assert_ptr_eq(rl_conf_rule(c, "caf\xc3\xa9", 5, NULL, 0), &c->rules[0]);
    ck_assert_ptr_eq(
        rl_conf_rule(c, "\xe6\x94\xaf\xe4\xbb\x98", 6, "/pay\xe2\x82\xac\xf0\x9f\x98\x80", 11),
        &c->rules[1]);
    rl_conf_destroy(c);
    ck_assert_int_eq(rl_conf_parse_rules("new.rules",
                                         "[service ok]\nlimit = gcra 1 per 1s\n"
                                         "[service bad\xff\xfe]\nlimit = gcra 1 per 1s\n",
                                         &r, err, sizeof(err)),
                     -EINVAL);
    ck_assert_ptr_null(r);
    ck_assert_str_eq(
        err, "new.rules:3: service name \"bad\\xff\\xfe\" is not valid UTF-8 at byte offset 3");
}
END_TEST

START_TEST(test_rule_lookup)
{
    struct rl_conf *c = parse_ok("[service checkout]\nlimit = fixed_window 10 per 1s\n"
                                 "[service checkout /pay]\nlimit = gcra 5 per 1s\n"
                                 "[service check]\nlimit = gcra 1 per 1s\n"
                                 "[service api /v1]\nlimit = gcra 2 per 1s\n");
    const struct rl_rule *wide = &c->rules[0];
    const struct rl_rule *pay = &c->rules[1];
    const char buf[] = "checkout/payXYZ";

    ck_assert_ptr_eq(rl_conf_rule(c, "checkout", 8, NULL, 0), wide);
    ck_assert_ptr_eq(rl_conf_rule(c, "checkout", 8, "", 0), wide);
    ck_assert_ptr_eq(rl_conf_rule(c, "checkout", 8, "/pay", 0), wide);
    ck_assert_ptr_eq(rl_conf_rule(c, "checkout", 8, "/pay", 4), pay);
    ck_assert_ptr_eq(rl_conf_rule(c, "checkout", 8, "/refund", 7), wide);
    ck_assert_ptr_eq(rl_conf_rule(c, "checkout", 8, "/pa", 3), wide);
    ck_assert_ptr_eq(rl_conf_rule(c, "checkout", 8, "/pay/", 5), wide);
    /* Lengths, not NULs, delimit the names. */
    ck_assert_ptr_eq(rl_conf_rule(c, buf, 8, buf + 8, 4), pay);
    ck_assert_ptr_eq(rl_conf_rule(c, buf, 5, buf + 8, 4), &c->rules[2]);
    ck_assert_ptr_null(rl_conf_rule(c, buf, 7, NULL, 0));
    ck_assert_ptr_null(rl_conf_rule(c, "checkoutx", 9, NULL, 0));
    /* A service with endpoint sections only has no rule elsewhere. */
    ck_assert_ptr_eq(rl_conf_rule(c, "api", 3, "/v1", 3), &c->rules[3]);
    ck_assert_ptr_null(rl_conf_rule(c, "api", 3, "/v2", 3));
    ck_assert_ptr_null(rl_conf_rule(c, "api", 3, NULL, 0));
    ck_assert_ptr_null(rl_conf_rule(c, "nosuch", 6, "/pay", 4));
    ck_assert_ptr_null(rl_conf_rule(c, "", 0, NULL, 0));
    ck_assert_ptr_null(rl_conf_rule(c, NULL, 0, NULL, 0));
    ck_assert_ptr_null(rl_conf_rule(NULL, "checkout", 8, NULL, 0));
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_rule_lookup_many)
{
    /* Enough rules to grow the index several times; every one must still be found. */
    size_t cap = 3000 * 96;
    char *text = malloc(cap);
    struct rl_conf *c;
    char s[32];
    char e[32];
    size_t len = 0;
    int i;

    ck_assert_ptr_nonnull(text);
    for (i = 0; i < 3000; i++) {
        len +=
            (size_t)snprintf(text + len, cap - len, "[service svc%d%s]\nlimit = gcra %d per 1s\n",
                             i / 2, i % 2 ? " /e" : "", i + 1);
    }
    c = parse_ok(text);
    free(text);
    ck_assert_uint_eq(c->nrules, 3000);
    ck_assert_uint_ge(c->index_cap, 2 * c->nrules);
    for (i = 0; i < 1500; i++) {
        int sl = snprintf(s, sizeof(s), "svc%d", i);
        int el = snprintf(e, sizeof(e), "/x%d", i);

        ck_assert_ptr_eq(rl_conf_rule(c, s, (size_t)sl, NULL, 0), &c->rules[2 * i]);
        ck_assert_ptr_eq(rl_conf_rule(c, s, (size_t)sl, "/e", 2), &c->rules[2 * i + 1]);
        ck_assert_ptr_eq(rl_conf_rule(c, s, (size_t)sl, e, (size_t)el), &c->rules[2 * i]);
        ck_assert_uint_eq(c->tiers[c->rules[2 * i + 1].first_tier].limit, (uint32_t)(2 * i + 2));
    }
    ck_assert_ptr_null(rl_conf_rule(c, "svc1500", 7, NULL, 0));
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_tiers_in_order)
{
    struct rl_conf *c = parse_ok("[service a]\n"
                                 "limit = token_bucket 10 per 1s burst 30\n"
                                 "mode = shadow\n"
                                 "limit = sliding_window_counter 1000 per 1h\n"
                                 "[service b /x]\n"
                                 "failure = closed\n"
                                 "limit = leaky_bucket 3 per 100ms burst 9\n"
                                 "limit = fixed_window 50 per 1d\n");
    const struct rl_rule *a = rl_conf_rule(c, "a", 1, "/any", 4);
    const struct rl_rule *b = rl_conf_rule(c, "b", 1, "/x", 2);
    const struct rl_tier *t;

    ck_assert_ptr_eq(a, &c->rules[0]);
    ck_assert_ptr_eq(b, &c->rules[1]);
    ck_assert(a->shadow && !a->fail_closed);
    ck_assert(!b->shadow && b->fail_closed);
    ck_assert_uint_eq(a->ntiers, 2);
    ck_assert_uint_eq(b->ntiers, 2);
    t = &c->tiers[a->first_tier];
    ck_assert_int_eq(t[0].algo, RL_ALGO_TOKEN_BUCKET);
    ck_assert_uint_eq(t[0].id, 0);
    ck_assert_uint_eq(t[0].burst, 30);
    ck_assert_int_eq(t[1].algo, RL_ALGO_SLIDING_WINDOW_COUNTER);
    ck_assert_uint_eq(t[1].id, 1);
    ck_assert_uint_eq(t[1].window_ms, 3600000);
    ck_assert_uint_eq(t[1].burst, 1000);
    t = &c->tiers[b->first_tier];
    ck_assert_uint_eq(b->first_tier, 2);
    ck_assert_int_eq(t[0].algo, RL_ALGO_LEAKY_BUCKET);
    ck_assert_uint_eq(t[0].id, 2);
    ck_assert_uint_eq(t[0].window_ms, 100);
    ck_assert_uint_eq(t[0].burst, 9);
    ck_assert_int_eq(t[1].algo, RL_ALGO_FIXED_WINDOW);
    ck_assert_uint_eq(t[1].id, 3);
    ck_assert_uint_eq(t[1].window_ms, 86400000);
    rl_conf_destroy(c);
}
END_TEST

/* concurrency N lease DURATION: N up to RL_CONF_CONCURRENCY_MAX, the lease as the window (up
 * to 4294967295 ms), no burst; with rate tiers in one section. */
START_TEST(test_concurrency_tier)
{
    struct rl_conf *c = parse_ok("[service export]\n"
                                 "limit = concurrency 5 lease 30s\n"
                                 "limit = token_bucket 100 per 1m\n"
                                 "limit = concurrency 10000 lease 4294967295ms\n");
    const struct rl_tier *t = &c->tiers[c->rules[0].first_tier];

    ck_assert_uint_eq(c->rules[0].ntiers, 3);
    ck_assert_int_eq(t[0].algo, RL_ALGO_CONCURRENCY);
    ck_assert_uint_eq(t[0].limit, 5);
    ck_assert_uint_eq(t[0].window_ms, 30000);
    ck_assert_uint_eq(t[0].burst, 5);
    ck_assert_int_eq(t[1].algo, RL_ALGO_TOKEN_BUCKET);
    ck_assert_int_eq(t[2].algo, RL_ALGO_CONCURRENCY);
    ck_assert_uint_eq(t[2].limit, RL_CONF_CONCURRENCY_MAX);
    ck_assert_uint_eq(t[2].window_ms, RL_CONF_WINDOW32_MAX);
    ck_assert_str_eq(rl_algo_name(RL_ALGO_CONCURRENCY), "concurrency");
    ck_assert(!rl_algo_has_burst(RL_ALGO_CONCURRENCY));
    ck_assert_uint_eq(rl_algo_limit_max(RL_ALGO_CONCURRENCY), 10000);
    ck_assert_uint_eq(rl_algo_limit_max(RL_ALGO_GCRA), RL_CONF_LIMIT_MAX);
    rl_conf_destroy(c);
}
END_TEST

/* Windows past 32 bits of ms: a year for the two window algorithms (up to 366 days), the
 * same bound as an inline limit's (docs/PROTOCOL.md); the others stop at 4294967295 ms. */
START_TEST(test_long_windows)
{
    struct rl_conf *c = parse_ok("[service y]\n"
                                 "limit = fixed_window 3 per 365d\n"
                                 "limit = sliding_window_counter 5 per 366d\n"
                                 "limit = token_bucket 7 per 4294967295ms\n");
    const struct rl_tier *t = &c->tiers[c->rules[0].first_tier];

    ck_assert_uint_eq(t[0].window_ms, 365ull * 86400000);
    ck_assert_uint_eq(t[1].window_ms, RL_CONF_WINDOW_MAX);
    ck_assert_uint_eq(t[1].window_ms, 366ull * 86400000);
    ck_assert_uint_eq(t[2].window_ms, RL_CONF_WINDOW32_MAX);
    ck_assert_uint_eq(rl_algo_window_max(RL_ALGO_FIXED_WINDOW), RL_CONF_WINDOW_MAX);
    ck_assert_uint_eq(rl_algo_window_max(RL_ALGO_SLIDING_WINDOW_COUNTER), RL_CONF_WINDOW_MAX);
    for (int a = RL_ALGO_SLIDING_WINDOW_LOG; a <= RL_ALGO_LEAKY_BUCKET; a++) {
        if (a != RL_ALGO_SLIDING_WINDOW_COUNTER) {
            ck_assert_uint_eq(rl_algo_window_max((enum rl_algo)a), RL_CONF_WINDOW32_MAX);
        }
    }
    /* a window's high bits are part of the tier: 2^32 + 1000 ms is not 1000 ms */
    rl_conf_destroy(c);
    c = parse_ok("[service a]\nlimit = fixed_window 3 per 4294968296ms\n"
                 "[service b]\nlimit = fixed_window 3 per 1000ms\n");
    ck_assert_uint_eq(c->tiers[0].window_ms, 4294968296ull);
    ck_assert_uint_eq(c->tiers[1].window_ms, 1000);
    rl_conf_destroy(c);
}
END_TEST

START_TEST(test_load_file)
{
    char path[] = "/tmp/check_conf_XXXXXX";
    char err[512] = "";
    char want[600];
    struct rl_conf *c = NULL;
    int fd = mkstemp(path);
    FILE *f;

    ck_assert_int_ge(fd, 0);
    f = fdopen(fd, "w");
    ck_assert_ptr_nonnull(f);
    fputs(example, f);
    fclose(f);
    ck_assert_int_eq(rl_conf_load(path, &c, err, sizeof(err)), 0);
    ck_assert_str_eq(c->path, path);
    ck_assert_str_eq(c->cluster_name, "demo");
    ck_assert_uint_eq(c->ntiers, 3);
    rl_conf_destroy(c);

    f = fopen(path, "a");
    ck_assert_ptr_nonnull(f);
    fputs("limit = gcra 5 per\n", f);
    fclose(f);
    ck_assert_int_eq(rl_conf_load(path, &c, err, sizeof(err)), -EINVAL);
    ck_assert_ptr_null(c);
    snprintf(want, sizeof(want), "%s:23: limit: \"gcra 5 per\" is not", path);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "got \"%s\"", err);

    /* A file with a NUL byte is refused, not silently cut. */
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fwrite("[cluster]\nname = a\0b\n", 1, 21, f);
    fclose(f);
    ck_assert_int_eq(rl_conf_load(path, &c, err, sizeof(err)), -EINVAL);
    snprintf(want, sizeof(want), "%s:2: line contains a NUL byte", path);
    ck_assert_str_eq(err, want);
    unlink(path);

    ck_assert_int_eq(rl_conf_load(path, &c, err, sizeof(err)), -ENOENT);
    ck_assert_ptr_null(c);
    snprintf(want, sizeof(want), "%s: %s", path, strerror(ENOENT));
    ck_assert_str_eq(err, want);

    ck_assert_int_eq(rl_conf_load("/tmp", &c, err, sizeof(err)), -EISDIR);
    ck_assert_ptr_null(c);
    ck_assert_msg(strncmp(err, "/tmp: ", 6) == 0, "got \"%s\"", err);
}
END_TEST

/* Relative paths of a file are the file's directory's, whatever the cwd; a string's (and
 * an absolute path, and "") are kept as written. */
START_TEST(test_relative_paths)
{
    char dir[] = "/tmp/check_conf_dir_XXXXXX";
    char real[PATH_MAX], conf[PATH_MAX + 32], sub[PATH_MAX + 32], secret[PATH_MAX + 32];
    char want[PATH_MAX + 64], rel[PATH_MAX], err[512] = "";
    const char *base;
    struct rl_conf *c = NULL;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_ptr_nonnull(realpath(dir, real));
    snprintf(conf, sizeof(conf), "%s/cluster.conf", dir);
    snprintf(sub, sizeof(sub), "%s/sub", dir);
    snprintf(secret, sizeof(secret), "%s/sub/secret", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    ck_assert_int_eq(rl_harness_write_file(secret, "0123456789abcdef0123\n"), 0);
    ck_assert_int_eq(chmod(secret, 0600), 0);
    ck_assert_int_eq(rl_harness_write_file(conf, "[cluster]\nsecret_file = sub/secret\n"
                                                 "events_log = ev-%%n.jsonl\n"
                                                 "events_log_max_size = 1mb\n"
                                                 "events_log_keep = 0\nevents_log_rate = 0\n"
                                                 "envoy_config = envoy\n"
                                                 "[router]\nrequest_log = x.log\n"),
                     0);

    /* From elsewhere, by a path relative to the cwd: the paths are absolute all the same. */
    base = strrchr(dir, '/') + 1;
    ck_assert_int_eq(chdir("/tmp"), 0);
    snprintf(rel, sizeof(rel), "./%s/cluster.conf", base);
    ck_assert_msg(rl_conf_load(rel, &c, err, sizeof(err)) == 0, "%s", err);
    snprintf(want, sizeof(want), "%s/x.log", real);
    ck_assert_str_eq(c->request_log, want);
    snprintf(want, sizeof(want), "%s/ev-%%n.jsonl", real);
    ck_assert_str_eq(c->events_log, want);
    ck_assert_uint_eq(c->events_log_max_size, 1ull << 20);
    ck_assert_uint_eq(c->events_log_keep, 0);
    ck_assert_uint_eq(c->events_log_rate, 0);
    snprintf(want, sizeof(want), "%s/sub/secret", real);
    ck_assert_str_eq(c->secret_file, want);
    ck_assert_uint_eq(c->secret_len, 20);
    snprintf(want, sizeof(want), "%s/envoy", real);
    ck_assert_str_eq(c->envoy_config, want);
    rl_conf_destroy(c);

    /* Absolute and empty paths are kept. */
    ck_assert_int_eq(chdir("/"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf, "[cluster]\nevents_log =\n"
                                                 "[router]\nrequest_log = /var/log/r.log\n"),
                     0);
    ck_assert_msg(rl_conf_load(conf, &c, err, sizeof(err)) == 0, "%s", err);
    ck_assert_str_eq(c->request_log, "/var/log/r.log");
    ck_assert_str_eq(c->events_log, "");
    ck_assert_str_eq(c->secret_file, "");
    rl_conf_destroy(c);

    /* A string has no directory: its paths stay relative to the cwd. */
    ck_assert_msg(
        rl_conf_parse("t.conf", "[router]\nrequest_log = x.log\n", &c, err, sizeof(err)) == 0, "%s",
        err);
    ck_assert_str_eq(c->request_log, "x.log");
    rl_conf_destroy(c);

    unlink(secret);
    rmdir(sub);
    unlink(conf);
    rmdir(dir);
}
END_TEST

/* Fuzz: the parser either loads or names a line; it never crashes nor leaks (ASan). */

static const char *const fuzz_words[] = {
    "[",
    "]",
    "=",
    ":",
    ";",
    "#",
    " ",
    "\t",
    "\n",
    "\r\n",
    "\xEF\xBB\xBF",
    "\xff",
    "[service ",
    "[node ",
    "[cluster]",
    "[router]",
    "limit = ",
    "burst",
    "per",
    "gcra",
    "token_bucket",
    "fixed_window",
    "0",
    "4294967295",
    "4294967296",
    "99999999999999999999",
    "ms",
    "d",
    "listen = ",
    "[::1]:",
    "127.0.0.1:7401",
    ",",
    "/",
    "memory = 1g",
    "mode = shadow",
    "failure = closed",
    "..",
};

static uint64_t
fuzz_next(uint64_t *state)
{
    /* splitmix64: small, seedable, the same on every machine. */
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void
fuzz_mutate(char *buf, size_t *len, size_t cap, uint64_t *st)
{
    size_t at = *len != 0 ? fuzz_next(st) % *len : 0;
    size_t n;
    const char *w;

    switch (fuzz_next(st) % 5) {
    case 0: /* overwrite a byte */
        if (*len != 0) {
            buf[at] = (char)(1 + fuzz_next(st) % 255);
        }
        break;
    case 1: /* delete a run */
        n = fuzz_next(st) % 16;
        if (at + n > *len) {
            n = *len - at;
        }
        memmove(buf + at, buf + at + n, *len - at - n);
        *len -= n;
        break;
    case 2: /* insert a word */
        w = fuzz_words[fuzz_next(st) % (sizeof(fuzz_words) / sizeof(fuzz_words[0]))];
        n = strlen(w);
        if (*len + n < cap) {
            memmove(buf + at + n, buf + at, *len - at);
            memcpy(buf + at, w, n);
            *len += n;
        }
        break;
    case 3: /* duplicate a run */
        n = fuzz_next(st) % 64;
        if (at + n > *len) {
            n = *len - at;
        }
        if (*len + n < cap) {
            memmove(buf + at + n, buf + at, *len - at);
            *len += n;
        }
        break;
    default: /* truncate */
        *len = at;
        break;
    }
    buf[*len] = '\0';
}

START_TEST(test_fuzz)
{
    const char *seed_env = getenv("RL_FUZZ_SEED");
    uint64_t st = seed_env != NULL ? strtoull(seed_env, NULL, 0) : 0x5eed;
    char buf[8192];
    char err[256];
    int iter;
    int ok = 0;

    for (iter = 0; iter < 20000; iter++) {
        size_t len = strlen(example);
        struct rl_conf *c = NULL;
        int rounds = 1 + (int)(fuzz_next(&st) % 8);
        int rc;
        size_t i;

        memcpy(buf, example, len + 1);
        while (rounds-- > 0) {
            fuzz_mutate(buf, &len, sizeof(buf) - 1, &st);
        }
        err[0] = '\0';
        rc = rl_conf_parse("fuzz.conf", buf, &c, err, sizeof(err));
        if (rc == 0) {
            ok++;
            ck_assert_ptr_nonnull(c);
            for (i = 0; i < c->nrules; i++) {
                const struct rl_rule *r = &c->rules[i];

                ck_assert_ptr_eq(
                    rl_conf_rule(c, r->service, r->service_len, r->endpoint, r->endpoint_len), r);
                ck_assert_uint_le(r->first_tier + r->ntiers, c->ntiers);
            }
            for (i = 0; i < c->nnodes; i++) {
                ck_assert_ptr_eq(rl_conf_node(c, c->nodes[i].name), &c->nodes[i]);
            }
            rl_conf_destroy(c);
        } else {
            ck_assert_int_eq(rc, -EINVAL);
            ck_assert_ptr_null(c);
            ck_assert_msg(strncmp(err, "fuzz.conf:", 10) == 0, "got \"%s\" for:\n%s", err, buf);
            ck_assert_msg(strchr(err, '\n') == NULL, "got \"%s\"", err);
            ck_assert_msg(rl_utf8_check(err, strlen(err), &i) == NULL,
                          "not printable UTF-8 at %zu: \"%s\"", i, err);
        }
    }
    /* Some mutations must leave a valid file, or the test only exercises error paths. */
    ck_assert_int_gt(ok, 100);
}
END_TEST

static Suite *
conf_suite(void)
{
    Suite *s = suite_create("conf");
    TCase *tc = tcase_create("parse");
    TCase *values = tcase_create("values");
    TCase *rules = tcase_create("rules");
    TCase *fuzz = tcase_create("fuzz");

    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_example);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_every_key);
    tcase_add_loop_test(tc, test_errors, 0, (int)(sizeof(errors) / sizeof(errors[0])));
    tcase_add_test(tc, test_clients_and_secret);
    tcase_add_test(tc, test_client_adjust);
    tcase_add_test(tc, test_error_buffers);
    tcase_add_test(tc, test_long_lines);
    tcase_add_test(tc, test_too_many_tiers);
    tcase_add_test(tc, test_comments);
    tcase_add_test(tc, test_bom_crlf);
    tcase_add_test(tc, test_load_file);
    tcase_add_test(tc, test_relative_paths);
    suite_add_tcase(s, tc);

    tcase_set_timeout(values, 10);
    tcase_add_loop_test(values, test_durations, 0, (int)(sizeof(durations) / sizeof(durations[0])));
    tcase_add_loop_test(values, test_sizes, 0, (int)(sizeof(sizes) / sizeof(sizes[0])));
    tcase_add_test(values, test_loopback_and_wildcard);
    tcase_add_loop_test(values, test_hostports, 0, (int)(sizeof(hostports) / sizeof(hostports[0])));
    tcase_add_test(values, test_algo_names);
    tcase_add_loop_test(values, test_utf8, 0, (int)(sizeof(utf8_cases) / sizeof(utf8_cases[0])));
    suite_add_tcase(s, values);

    tcase_set_timeout(rules, 10);
    tcase_add_test(rules, test_rule_lookup);
    tcase_add_test(rules, test_utf8_names);
    tcase_add_test(rules, test_rule_lookup_many);
    tcase_add_test(rules, test_tiers_in_order);
    tcase_add_test(rules, test_long_windows);
    tcase_add_test(rules, test_concurrency_tier);
    suite_add_tcase(s, rules);

    tcase_set_timeout(fuzz, 120);
    tcase_add_test(fuzz, test_fuzz);
    suite_add_tcase(s, fuzz);
    return s;
}

RL_TEST_MAIN(conf_suite)
