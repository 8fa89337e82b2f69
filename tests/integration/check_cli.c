/*
 * check_cli: rl-cli as a script uses it, against a real rl-node: its exit status tells the
 * answer (0 ALLOWED, 3 LIMITED, 7 NO_RULE, 1 unreachable, 2 usage), and `hash --config`
 * names the node that owns a key, the same one the shard map computes from the config;
 * `adjust` and `release` settle a key through a router or a node, printed as check prints
 * (and rl-bench --op sends the same requests);
 * `envoy check` prints the domains and descriptors it loaded, as a tree; and the router's
 * start line names every listener it serves on, and whether it takes TLS.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conf.h"
#include "harness.h"
#include "rltest.h"
#include "shardmap.h"

static char conf_path[PATH_MAX];
static int node_ports[2];

/* Runs rl-cli with args; returns its exit status, its stdout and stderr in out. */
static int
cli(char *out, size_t len, const char *const argv[])
{
    int rc = rl_harness_run(argv, out, len, 10000);

    ck_assert_msg(rc >= 0, "%s did not run to its end: %d", argv[0], rc);
    return rc;
}

START_TEST(test_exit_codes_and_owner)
{
    struct rl_harness_server node = {0};
    char out[4096], target[64], expect[256];
    struct rl_conf *conf = NULL;
    struct rl_shardmap *map = NULL;
    struct rl_member members[2] = {0};
    char err[256];
    uint64_t h;
    uint32_t owner;

    node_ports[0] = rl_harness_free_port();
    node_ports[1] = rl_harness_free_port();
    ck_assert_int_eq(rl_harness_tmppath(conf_path, sizeof(conf_path), "cli.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf_path,
                                           "[cluster]\nshards = 64\n"
                                           "[node a]\nlisten = 127.0.0.1:%d\n"
                                           "[node b]\nlisten = 127.0.0.1:%d\n"
                                           "[service web]\nlimit = fixed_window 1 per 1h\n",
                                           node_ports[0], node_ports[1]),
                     0);
    ck_assert_int_eq(rl_harness_node_start(&node, conf_path, "a", node_ports[0], 0), 0);
    snprintf(target, sizeof(target), "127.0.0.1:%d", node_ports[0]);
    {
        const char *check[] = {"rl-cli", "--target", target, "check", "web", "u", NULL};
        const char *nope[] = {"rl-cli", "--target", target, "check", "nope", "u", NULL};
        const char *twice[] = {"rl-cli", "--target", target, "check", "web", "v", "--repeat", "2",
                               NULL};
        const char *down[] = {"rl-cli", "--target", "127.0.0.1:1", "check", "web", "u", NULL};
        const char *bad[] = {"rl-cli", "--target", target, "check", "web", NULL};

        ck_assert_int_eq(cli(out, sizeof(out), check), 0);
        ck_assert_ptr_nonnull(strstr(out, "-> ALLOWED"));
        ck_assert_int_eq(cli(out, sizeof(out), check), 3);
        ck_assert_ptr_nonnull(strstr(out, "-> LIMITED"));
        ck_assert_int_eq(cli(out, sizeof(out), nope), 7);
        ck_assert_ptr_nonnull(strstr(out, "-> NO_RULE"));
        /* With --repeat the last answer decides: allowed, then limited. */
        ck_assert_int_eq(cli(out, sizeof(out), twice), 3);
        ck_assert_int_eq(cli(out, sizeof(out), down), 1);
        ck_assert_int_eq(cli(out, sizeof(out), bad), 2);
    }
    /* hash --config: the shard count and the owner come from the config. */
    ck_assert_int_eq(rl_conf_load(conf_path, &conf, err, sizeof(err)), 0);
    for (size_t i = 0; i < 2; i++) {
        snprintf(members[i].name, sizeof(members[i].name), "%s", conf->nodes[i].name);
        snprintf(members[i].addr, sizeof(members[i].addr), "127.0.0.1:%d", node_ports[i]);
    }
    ck_assert_int_eq(rl_shardmap_create(&map, conf->shards, members, 2, NULL), 0);
    for (int u = 0; u < 8; u++) {
        char user[16];
        const char *hash[] = {"rl-cli", "hash", "web", user, "--config", conf_path, NULL};

        snprintf(user, sizeof(user), "user%d", u);
        h = rl_shardmap_key_hash("web", 3, user, strlen(user));
        owner = rl_shardmap_owner(map, rl_shardmap_shard(h, 64));
        ck_assert_int_eq(cli(out, sizeof(out), hash), 0);
        snprintf(expect, sizeof(expect), "shard=%u shards=64", rl_shardmap_shard(h, 64));
        ck_assert_msg(strstr(out, expect) != NULL, "\"%s\" lacks \"%s\"", out, expect);
        snprintf(expect, sizeof(expect), "owner: %s %s", map->members[owner].name,
                 map->members[owner].addr);
        ck_assert_msg(strstr(out, expect) != NULL, "\"%s\" lacks \"%s\"", out, expect);
    }
    rl_shardmap_destroy(map);
    rl_conf_destroy(conf);
    ck_assert_int_eq(rl_harness_server_stop(&node, SIGTERM, 10000), 0);
}
END_TEST

/* Runs rl-cli with args and checks its exit status and that its output has want. */
static void
cli_says(const char *const argv[], int status, const char *want)
{
    char out[4096];
    int rc = cli(out, sizeof(out), argv);

    ck_assert_msg(rc == status, "%s %s %s %s: exit %d, not %d: %s", argv[3], argv[4], argv[5],
                  argv[6] ? argv[6] : "", rc, status, out);
    ck_assert_msg(want == NULL || strstr(out, want) != NULL, "\"%s\" lacks \"%s\"", out, want);
}

/* adjust and release, through a router and straight to the node: their replies printed as
 * check's (the key after them) and the exit status by their code; a negative DELTA is an
 * argument, not an option; bad amounts are usage errors, sent nowhere. */
START_TEST(test_adjust_and_release)
{
    struct rl_harness_server node = {0}, router = {0};
    char conf[PATH_MAX], rt[64], nt[64];
    int rport = rl_harness_free_port(), nport = rl_harness_free_port();
    const char *inl = "fixed_window 5 per 1h";

    ck_assert_int_eq(rl_harness_tmppath(conf, sizeof(conf), "settle.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf,
                                           "[router]\nlisten = 127.0.0.1:%d\n"
                                           "[node a]\nlisten = 127.0.0.1:%d\n"
                                           "[service web]\nlimit = fixed_window 10 per 1h\n"
                                           "[service exports]\nlimit = concurrency 2 lease 1h\n",
                                           rport, nport),
                     0);
    ck_assert_int_eq(rl_harness_node_start(&node, conf, "a", nport, 0), 0);
    ck_assert_int_eq(rl_harness_router_start(&router, conf, rport), 0);
    snprintf(rt, sizeof(rt), "127.0.0.1:%d", rport);
    snprintf(nt, sizeof(nt), "127.0.0.1:%d", nport);
    {
        const char *check4[] = {"rl-cli", "--target", rt, "check", "web", "u", "--cost", "4", NULL};
        const char *refund[] = {"rl-cli", "--target", rt, "adjust", "web", "u", "-3", NULL};
        const char *charge[] = {"rl-cli", "--target", nt, "adjust", "web", "u", "20", "/x", NULL};
        const char *check[] = {"rl-cli", "--target", rt, "check", "web", "u", NULL};
        const char *norule[] = {"rl-cli", "--target", rt, "adjust", "nope", "u", "1", NULL};
        const char *after[] = {"rl-cli", "--target", rt, "--", "adjust", "web", "v", "-1", NULL};

        cli_says(check4, 0, "-> ALLOWED limit=10 remaining=6 ");
        /* A refund of 3 of the 4 consumed: 9 left. */
        cli_says(refund, 0, "adjust web u delta=-3 -> ALLOWED limit=10 remaining=9 ");
        /* A charge past the limit is applied (the key in debt), then CHECKs are refused. */
        cli_says(charge, 0, "adjust web u /x delta=20 -> ALLOWED limit=10 remaining=0 ");
        cli_says(check, 3, "-> LIMITED limit=10 remaining=0 ");
        cli_says(norule, 7, "adjust nope u delta=1 -> NO_RULE");
        /* Nothing consumed: a refund gives nothing back, never above a full allowance. */
        cli_says(after, 0, "adjust web v delta=-1 -> ALLOWED limit=10 remaining=10 ");
    }
    {
        const char *take2[] = {"rl-cli", "--target", rt, "check", "exports", "e", "--repeat", "2",
                               NULL};
        const char *take[] = {"rl-cli", "--target", rt, "check", "exports", "e", NULL};
        const char *give[] = {"rl-cli", "--target", nt, "release", "exports", "e", NULL};
        const char *give2[] = {"rl-cli", "--target", rt, "release", "exports", "e", "2", "/csv",
                               NULL};

        cli_says(take2, 0, "-> ALLOWED limit=2 remaining=0 ");
        cli_says(take, 3, "-> LIMITED limit=2 remaining=0 ");
        cli_says(give, 0, "release exports e count=1 -> ALLOWED limit=2 remaining=1 ");
        cli_says(take, 0, "-> ALLOWED limit=2 remaining=0 ");
        cli_says(give2, 0, "release exports e /csv count=2 -> ALLOWED limit=2 remaining=2 ");
    }
    {
        /* An inline limit, as check sends one: the same key settled. */
        const char *take[] = {"rl-cli", "--target", rt, "check", "inl", "u", "--cost", "5",
                              "--limit", inl, NULL};
        const char *refund[] = {"rl-cli", "--target", rt, "adjust", "inl", "u", "-2", "--limit",
                                inl, NULL};

        cli_says(take, 0, "-> ALLOWED limit=5 remaining=0 ");
        cli_says(refund, 0, "adjust inl u delta=-2 limit=fixed_window 5 per 1h -> ALLOWED limit=5 "
                            "remaining=2 ");
    }
    {
        const char *nodelta[] = {"rl-cli", "--target", rt, "adjust", "web", "u", NULL};
        const char *big[] = {"rl-cli", "--target", rt, "adjust", "web", "u", "1000001", NULL};
        const char *small[] = {"rl-cli", "--target", rt, "adjust", "web", "u", "-1000001", NULL};
        const char *word[] = {"rl-cli", "--target", rt, "adjust", "web", "u", "x", NULL};
        const char *zero[] = {"rl-cli", "--target", rt, "release", "exports", "e", "0", NULL};
        const char *cost[] = {"rl-cli", "--target", rt, "release", "exports", "e", "--cost", "2",
                              NULL};
        const char *down[] = {"rl-cli", "--target", "127.0.0.1:1", "release", "exports", "e",
                              NULL};

        cli_says(nodelta, 2, "expected SERVICE USER DELTA [ENDPOINT]");
        cli_says(big, 2, "DELTA must be an integer of -1000000..1000000, not 1000001");
        cli_says(small, 2, "not -1000001");
        cli_says(word, 2, "not x");
        cli_says(zero, 2, "COUNT must be an integer of 1..1000000, not 0");
        cli_says(cost, 2, "--cost goes with check");
        cli_says(down, 1, NULL);
    }
    ck_assert_int_eq(rl_harness_server_stop(&router, SIGTERM, 10000), 0);
    ck_assert_int_eq(rl_harness_server_stop(&node, SIGTERM, 10000), 0);
}
END_TEST

/* rl-bench --op: ADJUSTs and RELEASEs, their delta in each of MessagePack's integer formats
 * (negative fixint, int 8, 16, 32, and a positive one), applied to the key as rl-cli reads it
 * back; every reply counted as ALLOWED under its own op. */
START_TEST(test_bench_ops)
{
    struct rl_harness_server node = {0};
    char conf[PATH_MAX], nt[64], out[8192];
    int nport = rl_harness_free_port();
    static const struct {
        const char *delta;
        const char *remaining; /* of 1000000, after it */
    } steps[] = {
        {"-100000", "remaining=900000 "}, {"-1000", "remaining=901000 "},
        {"-100", "remaining=901100 "},    {"-5", "remaining=901105 "},
        {"300", "remaining=900805 "},
    };

    ck_assert_int_eq(rl_harness_tmppath(conf, sizeof(conf), "ops.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf,
                                           "[node a]\nlisten = 127.0.0.1:%d\n"
                                           "[service web]\nlimit = fixed_window 1000000 per 1h\n"
                                           "[service exports]\nlimit = concurrency 3 lease 1h\n",
                                           nport),
                     0);
    ck_assert_int_eq(rl_harness_node_start(&node, conf, "a", nport, 0), 0);
    snprintf(nt, sizeof(nt), "127.0.0.1:%d", nport);
    {
        const char *take[] = {"rl-cli", "--target", nt, "check", "web", "u0", "--cost", "200000",
                              NULL};

        cli_says(take, 0, "remaining=800000 ");
    }
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        const char *bench[] = {"rl-bench", "--target", nt, "--service", "web", "--keys", "1",
                               "--op", "adjust", "--delta", steps[i].delta, "--requests", "1",
                               "--json", NULL};
        const char *peek[] = {"rl-cli", "--target", nt, "check", "web", "u0", "--cost", "0", NULL};

        ck_assert_int_eq(cli(out, sizeof(out), bench), 0);
        ck_assert_msg(strstr(out, "\"requests\":1,") != NULL && strstr(out, "\"allowed\":1,"),
                      "--delta %s: %s", steps[i].delta, out);
        cli_says(peek, 0, steps[i].remaining);
    }
    {
        const char *take[] = {"rl-cli", "--target", nt, "check", "exports", "u0", "--repeat", "3",
                              NULL};
        const char *bench[] = {"rl-bench", "--target", nt, "--service", "exports", "--keys", "1",
                               "--op", "release", "--cost", "2", "--requests", "1", "--json", NULL};
        const char *peek[] = {"rl-cli", "--target", nt, "check", "exports", "u0", "--cost", "0",
                              NULL};

        cli_says(take, 0, "remaining=0 ");
        ck_assert_int_eq(cli(out, sizeof(out), bench), 0);
        ck_assert_msg(strstr(out, "\"allowed\":1,") != NULL, "%s", out);
        cli_says(peek, 0, "remaining=2 ");
    }
    {
        const char *bad[] = {"rl-bench", "--target", nt, "--op", "refund", NULL};

        ck_assert_int_eq(cli(out, sizeof(out), bad), 2);
        ck_assert_msg(strstr(out, "--op: expected check, adjust or release") != NULL, "%s", out);
    }
    ck_assert_int_eq(rl_harness_server_stop(&node, SIGTERM, 10000), 0);
}
END_TEST

/* A broken cluster.conf: every program that reads it exits non-zero (2; rl-regions 1, its code
 * for "nothing written", docs/REGIONS.md) with one line that starts with FILE:LINE: (rl-rebalance, rl-cli and rl-regions put their own name first); a node's --name
 * that no node can have (a '/', empty) exits 2 with a line that says so, before anything
 * else is tried (it was taken to ZooKeeper, which refused it: exit 1, "Invalid argument"). */
/* Every program answers --help (its usage, exit 0) and --version ("NAME VERSION", exit 0). */
START_TEST(test_every_program_help_and_version)
{
    static const char *const progs[] = {"rl-node",  "rl-router", "rl-rebalance", "rl-cli",
                                        "rl-bench", "rl-chaos",  "rl-regions",   "rl-genlog"};
    char out[16384], want[64];

    for (size_t i = 0; i < sizeof(progs) / sizeof(progs[0]); i++) {
        const char *help[] = {progs[i], "--help", NULL};
        const char *version[] = {progs[i], "--version", NULL};

        ck_assert_msg(cli(out, sizeof(out), help) == 0, "%s --help: %s", progs[i], out);
        ck_assert_msg(strstr(out, "usage") != NULL || strstr(out, "Usage") != NULL,
                      "%s --help: %s", progs[i], out);
        ck_assert_msg(cli(out, sizeof(out), version) == 0, "%s --version: %s", progs[i], out);
        snprintf(want, sizeof(want), "%s %s", progs[i], RL_VERSION);
        ck_assert_msg(strstr(out, want) != NULL, "%s --version: %s", progs[i], out);
    }
}
END_TEST

START_TEST(test_config_error_line)
{
    char bad[PATH_MAX], want[PATH_MAX + 8], out[4096];
    const char *rebalance[] = {"rl-rebalance", "--config", bad, "--dry-run", "/dev/null", NULL};
    const char *cli_status[] = {"rl-cli", "--config", bad, "status", NULL};
    const char *regions[] = {"rl-regions", "--config", bad, "--config", bad, "--dry-run", NULL};
    const char *node[] = {"rl-node", "--config", bad, "--name", "a", NULL};
    const char *router[] = {"rl-router", "--config", bad, NULL};
    const char *const *progs[] = {rebalance, cli_status, regions, node, router};
    const int codes[] = {2, 2, 1, 2, 2};
    char good[PATH_MAX];
    const char *slash[] = {"rl-node", "--config", good, "--name", "x/y", NULL};
    const char *empty[] = {"rl-node", "--config", good, "--name", "", NULL};

    ck_assert_int_eq(rl_harness_tmppath(bad, sizeof(bad), "bad.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(bad, "[cluster]\nname = x\n\n[service s]\n"
                                                "limit = token_bucket ten per 1s\n"),
                     0);
    snprintf(want, sizeof(want), "%s:5: ", bad);
    for (size_t i = 0; i < sizeof(progs) / sizeof(progs[0]); i++) {
        ck_assert_int_eq(cli(out, sizeof(out), progs[i]), codes[i]);
        ck_assert_msg(strncmp(out, want, strlen(want)) == 0 && strchr(out, '\n') != NULL &&
                          strchr(out, '\n')[1] == '\0',
                      "%s: \"%s\" is not one line starting with \"%s\"", progs[i][0], out, want);
    }
    ck_assert_int_eq(rl_harness_tmppath(good, sizeof(good), "zk.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(good, "[cluster]\nname = x\nzookeeper = 127.0.0.1:1\n"
                                                 "[service s]\nlimit = gcra 1 per 1s\n"),
                     0);
    ck_assert_int_eq(cli(out, sizeof(out), slash), 2);
    ck_assert_msg(strstr(out, "--name: not a node name") != NULL, "%s", out);
    ck_assert_int_eq(cli(out, sizeof(out), empty), 2);
    ck_assert_msg(strstr(out, "--name: not a node name") != NULL, "%s", out);
}
END_TEST

/* envoy check prints what it loaded: each domain, then its descriptors as a tree (two spaces
 * a level), each with its limits, shadow mode and where it is; a file that does not load
 * exits 2 with FILE:LINE and prints no tree. */
START_TEST(test_envoy_check_tree)
{
    char yaml[PATH_MAX], bad[PATH_MAX], out[8192], want[6 * PATH_MAX];
    const char *check[] = {"rl-cli", "envoy", "check", yaml, NULL};
    const char *nope[] = {"rl-cli", "envoy", "check", bad, NULL};

    ck_assert_int_eq(rl_harness_tmppath(yaml, sizeof(yaml), "envoy.yaml"), 0);
    ck_assert_int_eq(rl_harness_write_file(yaml,
                                           "domain: mongo\n"
                                           "descriptors:\n"
                                           "  - key: database\n"
                                           "    value: users\n"
                                           "    rate_limit:\n"
                                           "      unit: second\n"
                                           "      requests_per_unit: 500\n"
                                           "  - key: database\n"
                                           "    value: default\n"
                                           "    shadow_mode: true\n"
                                           "    rate_limit:\n"
                                           "      unit: minute\n"
                                           "      requests_per_unit: 20\n"
                                           "      algorithm: gcra\n"
                                           "      burst: 5\n"
                                           "  - key: message_type\n"
                                           "    value: marketing\n"
                                           "    descriptors:\n"
                                           "      - key: to_number\n"
                                           "        rate_limit:\n"
                                           "          unit: day\n"
                                           "          requests_per_unit: 4\n"
                                           "  - key: internal\n"
                                           "    rate_limit:\n"
                                           "      unlimited: true\n"),
                     0);
    ck_assert_int_eq(cli(out, sizeof(out), check), 0);
    ck_assert_msg(strstr(out, "1 domains, 5 descriptors") != NULL, "%s", out);
    snprintf(want, sizeof(want),
             "valid\n"
             "domain mongo\n"
             "  database=users: 500 per second  (%s:3)\n"
             "  database=default: 20 per minute gcra burst 5, shadow  (%s:8)\n"
             "  message_type=marketing  (%s:16)\n"
             "    to_number: 4 per day  (%s:19)\n"
             "  internal: unlimited  (%s:23)\n",
             yaml, yaml, yaml, yaml, yaml);
    ck_assert_msg(strstr(out, want) != NULL, "\"%s\" lacks \"%s\"", out, want);

    ck_assert_int_eq(rl_harness_tmppath(bad, sizeof(bad), "bad.yaml"), 0);
    ck_assert_int_eq(rl_harness_write_file(bad, "domain: d\ndescriptors:\n  - key: k\n"
                                                "    rate_limit:\n      unit: fortnight\n"
                                                "      requests_per_unit: 1\n"),
                     0);
    ck_assert_int_eq(cli(out, sizeof(out), nope), 2);
    snprintf(want, sizeof(want), "%s:5", bad);
    ck_assert_msg(strstr(out, want) != NULL, "\"%s\" lacks \"%s\"", out, want);
    ck_assert_msg(strstr(out, "domain d") == NULL, "%s", out);
}
END_TEST

/* Waits for want in the router's log (it is written right after the port accepts). */
static bool
log_has(const struct rl_harness_server *s, const char *want, char *log, size_t len)
{
    for (int k = 0; k < 200; k++) {
        if (rl_harness_read_file(s->log_path, log, len) >= 0 && strstr(log, want) != NULL) {
            return true;
        }
        usleep(25 * 1000);
    }
    return false;
}

/* The router's start line names every listener (binary, gRPC, RESP) and whether it takes
 * TLS; an operator reads what serves where from it. */
START_TEST(test_router_start_line)
{
    struct rl_harness_server router = {0};
    char conf[PATH_MAX], yaml[PATH_MAX], want[256];
    static char log[1 << 16];
    int port = rl_harness_free_port(), rls = rl_harness_free_port();
    int resp = rl_harness_free_port(), node = rl_harness_free_port();

    ck_assert_int_eq(rl_harness_tmppath(yaml, sizeof(yaml), "start.yaml"), 0);
    ck_assert_int_eq(rl_harness_write_file(yaml, "domain: d\ndescriptors:\n  - key: k\n"
                                                 "    rate_limit:\n      unit: hour\n"
                                                 "      requests_per_unit: 1\n"),
                     0);
    ck_assert_int_eq(rl_harness_tmppath(conf, sizeof(conf), "start.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf,
                                           "[cluster]\nenvoy_config = %s\n"
                                           "[router]\nlisten = 127.0.0.1:%d\n"
                                           "rls = 127.0.0.1:%d\nresp = 127.0.0.1:%d\n"
                                           "[node a]\nlisten = 127.0.0.1:%d\n",
                                           yaml, port, rls, resp, node),
                     0);
    ck_assert_int_eq(rl_harness_router_start(&router, conf, port), 0);
    snprintf(want, sizeof(want),
             "serving on 127.0.0.1:%d (binary, plain TCP), 127.0.0.1:%d (gRPC, plain TCP), "
             "127.0.0.1:%d (RESP, plain TCP); static membership",
             port, rls, resp);
    ck_assert_msg(log_has(&router, want, log, sizeof(log)), "\"%s\" lacks \"%s\"", log, want);
    ck_assert_int_eq(rl_harness_server_stop(&router, SIGTERM, 10000), 0);

    /* Without the fronts: said as such. */
    ck_assert_int_eq(rl_harness_write_file(conf,
                                           "[router]\nlisten = 127.0.0.1:%d\n"
                                           "[node a]\nlisten = 127.0.0.1:%d\n",
                                           port, node),
                     0);
    ck_assert_int_eq(truncate(router.log_path, 0), 0);
    ck_assert_int_eq(rl_harness_router_start(&router, conf, port), 0);
    snprintf(want, sizeof(want),
             "serving on 127.0.0.1:%d (binary, plain TCP), no gRPC, no RESP; static membership",
             port);
    ck_assert_msg(log_has(&router, want, log, sizeof(log)), "\"%s\" lacks \"%s\"", log, want);
    ck_assert_int_eq(rl_harness_server_stop(&router, SIGTERM, 10000), 0);

    /* With the cluster's TLS: every listener says so. */
    {
        const char *dir = rl_harness_tmpdir();

        ck_assert_int_eq(rl_harness_tls_ca(dir, "startca"), 0);
        ck_assert_int_eq(rl_harness_tls_cert(dir, "startrouter", "startca"), 0);
        ck_assert_int_eq(rl_harness_write_file(conf,
                                               "[cluster]\ntls_cert_file = %s/startrouter.pem\n"
                                               "tls_key_file = %s/startrouter.key\n"
                                               "tls_ca_file = %s/startca.pem\n"
                                               "[router]\nlisten = 127.0.0.1:%d\n"
                                               "resp = 127.0.0.1:%d\n"
                                               "[node a]\nlisten = 127.0.0.1:%d\n",
                                               dir, dir, dir, port, resp, node),
                         0);
    }
    ck_assert_int_eq(truncate(router.log_path, 0), 0);
    ck_assert_int_eq(rl_harness_router_start(&router, conf, port), 0);
    snprintf(want, sizeof(want),
             "serving on 127.0.0.1:%d (binary, TLS), no gRPC, 127.0.0.1:%d (RESP, TLS); static "
             "membership",
             port, resp);
    ck_assert_msg(log_has(&router, want, log, sizeof(log)), "\"%s\" lacks \"%s\"", log, want);
    ck_assert_int_eq(rl_harness_server_stop(&router, SIGTERM, 10000), 0);
}
END_TEST

static Suite *
cli_suite(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("cli");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_exit_codes_and_owner);
    tcase_add_test(tc, test_every_program_help_and_version);
    tcase_add_test(tc, test_adjust_and_release);
    tcase_add_test(tc, test_bench_ops);
    tcase_add_test(tc, test_envoy_check_tree);
    tcase_add_test(tc, test_config_error_line);
    tcase_add_test(tc, test_router_start_line);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(cli_suite)
