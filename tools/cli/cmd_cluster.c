/*
 * cmd_cluster: the commands that work on the cluster's config and its ZooKeeper rather than
 * on a server: `hash` (the shard of a key, and with --config the node that owns it) and
 * `rules check|push|show` (the rules znode, docs/OPERATIONS.md "Changing rules live").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "zkadmin.h"

#include "cli.h"

/* Reads a whole file of at most max bytes into a NUL-terminated buffer (free it). */
static int
read_text(const char *path, size_t max, char **out, size_t *len)
{
    FILE *f = fopen(path, "re");
    char *buf;
    size_t n;

    *out = NULL;
    if (f == NULL) {
        return -errno;
    }
    buf = malloc(max + 2);
    if (buf == NULL) {
        fclose(f);
        return -ENOMEM;
    }
    n = fread(buf, 1, max + 1, f);
    if (ferror(f)) {
        int e = errno != 0 ? errno : EIO;

        fclose(f);
        free(buf);
        return -e;
    }
    fclose(f);
    if (n > max) {
        free(buf);
        return -EMSGSIZE;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

/* Loads the --config for a rules command; exit status on failure, after a message. */
static int
rules_config(const struct cli *o, const char *sub, bool zk, struct rl_conf **conf)
{
    int status;

    *conf = NULL;
    if (o->config == NULL) {
        if (!zk) {
            return CLI_EXIT_OK;
        }
        fprintf(stderr, "rl-cli: rules %s: needs --config FILE (the cluster's ZooKeeper)\n", sub);
        return CLI_EXIT_USAGE;
    }
    status = cli_load_config(o, conf);
    if (status != CLI_EXIT_OK) {
        return status;
    }
    if (zk && (*conf)->zookeeper[0] == '\0') {
        fprintf(stderr,
                "rl-cli: rules %s: %s has no zookeeper: with static membership, edit the "
                "[service] sections of each process's config and send it SIGHUP\n",
                sub, o->config);
        rl_conf_destroy(*conf);
        *conf = NULL;
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

/* rules check FILE, rules push FILE, rules show: the rules znode (docs/OPERATIONS.md). */
/* A path that rules check/push hands to envoy check/push: a directory, or a file named
 * *.yaml or *.yml (envoyproxy/ratelimit's configuration, docs/ENVOY.md). */
static bool
envoy_path(const char *path)
{
    struct stat st;
    size_t n = strlen(path);

    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        return true;
    }
    return (n > 5 && strcmp(path + n - 5, ".yaml") == 0) ||
           (n > 4 && strcmp(path + n - 4, ".yml") == 0);
}

int
cli_cmd_rules(const struct cli *o, const struct cli_cmd *cmd, int nargs, char **args)
{
    const char *sub = nargs > 0 ? args[0] : "";
    struct rl_conf *conf = NULL, *fresh = NULL;
    struct cli_zk zk;
    char *text = NULL, err[512], warn[512];
    size_t len = 0;
    int64_t version = -1;
    int rc, status;
    bool push = strcmp(sub, "push") == 0, check = strcmp(sub, "check") == 0;

    if (!push && !check && strcmp(sub, "show") != 0) {
        return cli_usage_error("rules: expected check FILE, push FILE or show, not \"%s\"", sub);
    }
    if ((push || check) != (nargs == 2) || nargs > 2) {
        return cli_usage_error("rules %s: wrong number of arguments", sub);
    }
    if ((push || check) && envoy_path(args[1])) {
        /* envoyproxy/ratelimit's YAML (a *.yaml file or a directory): its own znode */
        return cli_cmd_envoy(o, cmd, nargs, args);
    }
    if (push || check) {
        rc = read_text(args[1], RL_ZKM_DATA_MAX, &text, &len);
        if (rc != 0) {
            fprintf(stderr, "rl-cli: %s: %s\n", args[1],
                    rc == -EMSGSIZE ? "larger than a znode may hold (1000 KiB)" : strerror(-rc));
            return CLI_EXIT_USAGE;
        }
        if (memchr(text, '\0', len) != NULL) {
            fprintf(stderr, "rl-cli: %s: contains a NUL byte\n", args[1]);
            free(text);
            return CLI_EXIT_USAGE;
        }
        if (rl_conf_parse_rules(args[1], text, &fresh, err, sizeof(err)) != 0) {
            fprintf(stderr, "rl-cli: %s\nrl-cli: rules refused whole: nothing written\n", err);
            free(text);
            return CLI_EXIT_USAGE;
        }
        if (fresh->nrules == 0) {
            /* every process refuses rules without a [service] section while it has some */
            fprintf(stderr,
                    "rl-cli: %s: no [service] section: every CHECK would be NO_RULE "
                    "(allowed); processes with rules refuse it%s\n",
                    args[1], push ? ": nothing written" : "");
            free(text);
            rl_conf_destroy(fresh);
            return CLI_EXIT_USAGE;
        }
    }
    status = rules_config(o, sub, !check, &conf);
    if (status != CLI_EXIT_OK) {
        free(text);
        rl_conf_destroy(fresh);
        return status;
    }
    if (fresh != NULL && conf != NULL) {
        /* The [client] sections of the config against the new rules: a warning, as the
         * routers would log it. The swap is of this process's copy only. */
        if (rl_conf_swap_rules(conf, fresh, warn, sizeof(warn)) == 0 && warn[0] != '\0') {
            fprintf(stderr, "rl-cli: warning: %s\n", warn);
        }
        /* swap back: conf's digest and counts are printed from fresh below */
        (void)rl_conf_swap_rules(conf, fresh, NULL, 0);
    }
    if (check) {
        printf("%s: %zu sections, %zu tiers, rules_digest %lld: valid\n", args[1], fresh->nrules,
               fresh->ntiers, (long long)fresh->rules_digest);
        free(text);
        rl_conf_destroy(fresh);
        rl_conf_destroy(conf);
        return CLI_EXIT_OK;
    }
    /* A write is worth a longer wait than a look. */
    rc = cli_zk_open(&zk, conf, o->timeout_ms > 5000 ? o->timeout_ms : 5000);
    if (rc == 0 && push) {
        rc = rl_zkm_set_rules(zk.z, text, len, &version, zk.wait_ms);
    } else if (rc == 0) {
        free(text);
        text = NULL;
        rc = rl_zkm_get_rules(zk.z, &text, &len, &version, zk.wait_ms);
    }
    cli_zk_close(&zk);
    if (rc != 0) {
        fprintf(stderr, "rl-cli: rules %s: ZooKeeper %s: %s\n", sub, conf->zookeeper,
                strerror(-rc));
        status = CLI_EXIT_FAIL;
    } else if (push) {
        printf("rules pushed to /ratelimiter/%s/rules: znode version %lld, rules_version %lld, "
               "rules_digest %lld (%zu sections, %zu tiers)\n",
               conf->cluster_name, (long long)version, (long long)version + 1,
               (long long)fresh->rules_digest, fresh->nrules, fresh->ntiers);
    } else if (version < 0) {
        printf("no rules znode: every process runs the [service] sections of its config "
               "(rules_version 0)\n");
    } else {
        struct rl_conf *shown = NULL;

        if (rl_conf_parse_rules("znode", text, &shown, err, sizeof(err)) == 0) {
            printf("znode version %lld, rules_version %lld, rules_digest %lld\n",
                   (long long)version, (long long)version + 1, (long long)shown->rules_digest);
        } else {
            printf("znode version %lld: does not parse (%s): processes keep their rules\n",
                   (long long)version, err);
        }
        rl_conf_destroy(shown);
        fwrite(text, 1, len, stdout);
        if (len > 0 && text[len - 1] != '\n') {
            putchar('\n');
        }
    }
    free(text);
    rl_conf_destroy(fresh);
    rl_conf_destroy(conf);
    return status;
}

/* hash SERVICE USER [--shards S | --config FILE]: the shard of a key, and its owner. */
int
cli_cmd_hash(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv)
{
    struct rl_conf *conf = NULL;
    struct rl_shardmap *map = NULL;
    struct cli_members m;
    uint32_t shards = o->shards, shard, owner;
    uint64_t h;
    int status;

    if (argc != 2) {
        return cli_usage_error("%s: expected SERVICE USER", cli_cmd_name(cmd));
    }
    if (o->config != NULL) {
        status = cli_load_config(o, &conf);
        if (status != CLI_EXIT_OK) {
            return status;
        }
        shards = conf->shards;
    }
    h = rl_shardmap_key_hash(argv[0], strlen(argv[0]), argv[1], strlen(argv[1]));
    shard = rl_shardmap_shard(h, shards);
    printf("hash %s %s -> key_hash=0x%016llx shard=%u shards=%u\n", argv[0], argv[1],
           (unsigned long long)h, (unsigned)shard, shards);
    if (conf == NULL) {
        return CLI_EXIT_OK;
    }
    status = CLI_EXIT_OK;
    if (cli_members_read(o, conf, NULL, &m) != 0) {
        fprintf(stderr, "rl-cli: %s\n", m.why);
        status = CLI_EXIT_FAIL;
    } else if (rl_shardmap_create(&map, shards, m.v, m.n, m.have_a ? &m.a : NULL) != 0) {
        fprintf(stderr, "rl-cli: cannot build the shard table\n");
        status = CLI_EXIT_FAIL;
    } else {
        owner = rl_shardmap_owner(map, shard);
        if (owner == RL_SHARDMAP_NONE) {
            printf("owner: none (no live node; %s)\n", m.from);
        } else {
            printf("owner: %s %s (%s)\n", map->members[owner].name, map->members[owner].addr,
                   m.from);
        }
    }
    rl_shardmap_destroy(map);
    cli_members_free(&m);
    rl_conf_destroy(conf);
    return status;
}
