/*
 * cmd_envoy: `rl-cli envoy check|push|show|delete`, the envoy config znode that every router
 * serving Envoy watches (docs/ENVOY.md, "Changing the configuration live"): a file or a
 * directory of envoyproxy/ratelimit YAML validated as the routers load it (FILE:LINE), then
 * written as one bundle with a version compare-and-set. Not for the rules (cmd_cluster.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoycfg.h"
#include "parse.h"
#include "zkadmin.h"

#include "cli.h"

/* Reads and validates path as the routers would load it, bundled (for a push, also no larger
 * than a znode may hold): the exit status, with *bundle and *blen set when it is valid (free
 * *bundle). */
static int
envoy_validate(const char *path, const struct rl_conf *conf, bool push, char **bundle, size_t *blen,
               struct rl_envoy_config **out)
{
    struct rl_envoy_opts eo = {.merge_domains = conf != NULL && conf->envoy_merge_domains};
    struct rl_envoy_files fs;
    char err[600];

    *bundle = NULL;
    *out = NULL;
    if (rl_envoy_read(path, &fs, err, sizeof(err)) != 0 ||
        rl_envoy_parse_files(&fs, &eo, out, err, sizeof(err)) != 0) {
        rl_envoy_files_free(&fs);
        fprintf(stderr, "rl-cli: %s\nrl-cli: envoy config refused whole: nothing written\n", err);
        return CLI_EXIT_USAGE;
    }
    if (rl_envoy_bundle(&fs, bundle, blen) != 0) {
        rl_envoy_files_free(&fs);
        fprintf(stderr,
                "rl-cli: %s: a file name cannot be carried (printable UTF-8 of 1..%u "
                "bytes) or out of memory: nothing written\n",
                path, RL_ENVOY_NAME_MAX);
        return CLI_EXIT_USAGE;
    }
    rl_envoy_files_free(&fs);
    if (*blen > RL_ZKM_DATA_MAX && push) {
        fprintf(stderr,
                "rl-cli: %s: %zu bytes as a bundle, more than a znode may hold (%u bytes): "
                "nothing written\n",
                path, *blen, RL_ZKM_DATA_MAX);
        free(*bundle);
        *bundle = NULL;
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

/* One limit as the tree prints it: "500 per second", "unlimited", with its extensions. */
static void
print_limit(const struct rl_envoy_limit *l)
{
    if (l->unlimited) {
        printf("unlimited");
    } else {
        printf("%" PRIu32 " per %s", l->requests_per_unit, rl_envoy_unit_name(l->unit));
    }
    if (l->algo_set) {
        printf(" %s", rl_algo_name(l->algo));
    }
    if (l->algo_set && l->burst != l->requests_per_unit) {
        printf(" burst %" PRIu32, l->burst);
    }
    if (l->name != NULL && l->name[0] != '\0') {
        printf(" name %s", l->name);
    }
}

/* A descriptor and those below it, depth levels in: "key=value" (or "key", any value),
 * then its limits ("; " between them), "shadow" when in shadow_mode, and where it is. */
static void
print_desc(const struct rl_envoy_desc *d, int depth)
{
    printf("%*s%s", 2 * depth, "", d->key);
    if (d->value != NULL) {
        printf("=%s", d->value);
    }
    for (size_t i = 0; i < d->nlimits; i++) {
        printf(i == 0 ? ": " : "; ");
        print_limit(&d->limits[i]);
    }
    if (d->shadow_mode) {
        printf(", shadow");
    }
    printf("  (%s:%d)\n", d->file, d->line);
    for (size_t i = 0; i < d->nchildren; i++) {
        print_desc(d->children[i], depth + 1);
    }
}

/* What `envoy check` prints of a configuration that loads: each domain, then its
 * descriptors as a tree, a level two spaces in. */
static void
print_tree(const struct rl_envoy_config *c)
{
    for (size_t i = 0; i < c->ndomains; i++) {
        const struct rl_envoy_domain *dom = &c->domains[i];

        printf("domain %s\n", dom->name);
        for (size_t k = 0; k < dom->root.nchildren; k++) {
            print_desc(dom->root.children[k], 1);
        }
    }
}

/* VERSION as given: "none" (-1: the znode must not exist) or 0..2^31-1. */
static int
parse_version(const char *s, int64_t *v)
{
    uint64_t n;

    if (strcmp(s, "none") == 0) {
        *v = -1;
        return 0;
    }
    if (rl_parse_u64(s, 0, INT32_MAX, &n) != NULL) {
        return -1;
    }
    *v = (int64_t)n;
    return 0;
}

/* The znode's bundle as `show` prints it: a summary line, then each file. */
static void
show(const char *text, size_t len, int64_t version, const struct rl_conf *conf)
{
    struct rl_envoy_opts eo = {.merge_domains = conf->envoy_merge_domains};
    struct rl_envoy_files fs;
    struct rl_envoy_config *c = NULL;
    char what[64], err[600];

    snprintf(what, sizeof(what), "znode version %" PRId64, version);
    if (rl_envoy_unbundle(what, text, len, &fs, err, sizeof(err)) != 0) {
        printf("znode version %" PRId64 ": not a bundle (%s): routers keep the configuration "
               "they have\n",
               version, err);
        return;
    }
    if (rl_envoy_parse_files(&fs, &eo, &c, err, sizeof(err)) == 0) {
        printf("znode version %" PRId64 ", %zu files, %zu domains, %zu descriptors: in force "
               "on every router serving Envoy\n",
               version, fs.n, c->ndomains, c->ndescriptors);
        rl_envoy_config_free(c);
    } else {
        printf("znode version %" PRId64 ": does not load (%s): routers keep the configuration "
               "they have\n",
               version, err);
    }
    for (size_t i = 0; i < fs.n; i++) {
        printf("--- %s (%zu bytes)\n", fs.f[i].name, fs.f[i].len);
        fwrite(fs.f[i].text, 1, fs.f[i].len, stdout);
        if (fs.f[i].len > 0 && fs.f[i].text[fs.f[i].len - 1] != '\n') {
            putchar('\n');
        }
    }
    rl_envoy_files_free(&fs);
}

/* envoy check PATH | push PATH [VERSION] | show | delete VERSION */
int
cli_cmd_envoy(const struct cli *o, const struct cli_cmd *cmd, int nargs, char **args)
{
    const char *sub = nargs > 0 ? args[0] : "";
    bool check = strcmp(sub, "check") == 0, push = strcmp(sub, "push") == 0;
    bool del = strcmp(sub, "delete") == 0, shw = strcmp(sub, "show") == 0;
    struct rl_conf *conf = NULL;
    struct rl_envoy_config *c = NULL;
    struct cli_zk zk;
    char *bundle = NULL, *text = NULL;
    size_t blen = 0, len = 0;
    int64_t expect = -2, version = -1;
    int rc, status;

    (void)cmd;
    if (!check && !push && !del && !shw) {
        return cli_usage_error("envoy: expected check PATH, push PATH [VERSION], show or delete "
                               "VERSION, not \"%s\"",
                               sub);
    }
    if ((check && nargs != 2) || (push && nargs != 2 && nargs != 3) || (shw && nargs != 1) ||
        (del && nargs != 2)) {
        return cli_usage_error("envoy %s: wrong number of arguments", sub);
    }
    if ((push && nargs == 3 && parse_version(args[2], &expect) != 0) ||
        (del && (parse_version(args[1], &expect) != 0 || expect < 0))) {
        return cli_usage_error("envoy %s: VERSION is the znode version rl-cli envoy show "
                               "printed (or none, for push), not \"%s\"",
                               args[nargs - 1]);
    }
    if (o->config == NULL && !check) {
        fprintf(stderr, "rl-cli: envoy %s: needs --config FILE (the cluster's ZooKeeper)\n", sub);
        return CLI_EXIT_USAGE;
    }
    if (o->config != NULL) {
        status = cli_load_config(o, &conf);
        if (status != CLI_EXIT_OK) {
            return status;
        }
        if (!check && conf->zookeeper[0] == '\0') {
            fprintf(stderr,
                    "rl-cli: envoy %s: %s has no zookeeper: with static membership, edit each "
                    "router's [cluster] envoy_config (routers pick the change up)\n",
                    sub, o->config);
            rl_conf_destroy(conf);
            return CLI_EXIT_USAGE;
        }
    }
    if (check || push) {
        status = envoy_validate(args[1], conf, push, &bundle, &blen, &c);
        if (status != CLI_EXIT_OK) {
            rl_envoy_config_free(c);
            rl_conf_destroy(conf);
            return status;
        }
    }
    if (check) {
        printf("%s: %zu domains, %zu descriptors, %zu bytes as a bundle: valid%s\n", args[1],
               c->ndomains, c->ndescriptors, blen,
               blen > RL_ZKM_DATA_MAX ? " (as a local envoy_config only: too large to push, "
                                        "more than a znode may hold)"
                                      : "");
        print_tree(c);
        rl_envoy_config_free(c);
        free(bundle);
        rl_conf_destroy(conf);
        return CLI_EXIT_OK;
    }
    /* A write is worth a longer wait than a look. */
    rc = cli_zk_open(&zk, conf, o->timeout_ms > 5000 ? o->timeout_ms : 5000);
    if (rc == 0 && (shw || (push && expect == -2))) {
        rc = rl_zkm_get_envoy(zk.z, &text, &len, &version, zk.wait_ms);
        expect = version; /* push without VERSION: over what is there now */
    }
    if (rc == 0 && push) {
        rc = rl_zkm_set_envoy(zk.z, bundle, blen, expect, &version, zk.wait_ms);
    } else if (rc == 0 && del) {
        rc = rl_zkm_delete_envoy(zk.z, expect, zk.wait_ms);
    }
    cli_zk_close(&zk);
    status = CLI_EXIT_OK;
    if (rc == -EAGAIN && expect < 0) {
        fprintf(stderr,
                "rl-cli: envoy %s: the znode exists (someone else wrote it): nothing "
                "written; see rl-cli envoy show\n",
                sub);
        status = CLI_EXIT_FAIL;
    } else if (rc == -EAGAIN) {
        fprintf(stderr,
                "rl-cli: envoy %s: the znode is not at version %" PRId64
                " (someone else changed it): nothing written; see rl-cli envoy show\n",
                sub, expect);
        status = CLI_EXIT_FAIL;
    } else if (rc != 0) {
        fprintf(stderr, "rl-cli: envoy %s: ZooKeeper %s: %s\n", sub, conf->zookeeper,
                rc == -EMSGSIZE ? "larger than a znode may hold" : strerror(-rc));
        status = CLI_EXIT_FAIL;
    } else if (push) {
        printf("envoy config pushed to /ratelimiter/%s/envoy: znode version %" PRId64
               " (%zu domains, %zu descriptors, %zu bytes); every router serving Envoy puts "
               "it in force over its own envoy_config\n",
               conf->cluster_name, version, c->ndomains, c->ndescriptors, blen);
    } else if (del) {
        printf("envoy config znode deleted: every router serving Envoy goes back to its own "
               "[cluster] envoy_config\n");
    } else if (version < 0) {
        printf("no envoy config znode: every router serves its own [cluster] envoy_config\n");
    } else {
        show(text, len, version, conf);
    }
    rl_envoy_config_free(c);
    free(bundle);
    free(text);
    rl_conf_destroy(conf);
    return status;
}
