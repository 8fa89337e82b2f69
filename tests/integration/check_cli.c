/*
 * check_cli: rl-cli as a script uses it, against a real rl-node: its exit status tells the
 * answer (0 ALLOWED, 3 LIMITED, 7 NO_RULE, 1 unreachable, 2 usage), and `hash --config`
 * names the node that owns a key, the same one the shard map computes from the config;
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
    tcase_add_test(tc, test_envoy_check_tree);
    tcase_add_test(tc, test_router_start_line);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(cli_suite)
