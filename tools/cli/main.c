/*
 * rl-cli: a small client for people, scripts and demos. It sends one request (CHECK, ADJUST,
 * RELEASE, PING, STATS, CLOCK, THROTTLED, HOT) to a node or router and prints each reply as one
 * line that is easy to read and to grep, shows the cluster on one screen (status), and does the
 * chores of a cluster's config (hash, rules, tokens). This file is the command line only: the
 * options and their values (a negative number, adjust's DELTA, is a word, not an option). The
 * table of commands, and the usage written from it, is commands.c; the commands live in cmd_*.c
 * and status.c (cli.h says which module holds what).
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "parse.h"
#include "tls.h"

#include "cli.h"

enum {
    OPT_BASE = 256, /* OPT_BASE + enum cli_opt_bit: the options of some commands */
    OPT_TARGET = OPT_BASE + CLI_OPTBIT_COUNT,
    OPT_TIMEOUT,
    OPT_TOKEN_FILE,
    OPT_TLS_CA,
    OPT_TLS_CERT,
    OPT_TLS_KEY,
    OPT_HELP,
    OPT_VERSION,
};

#define OPT(n) (OPT_BASE + CLI_OPTBIT_##n)

static const struct option long_opts[] = {
    {"target", required_argument, NULL, OPT_TARGET},
    {"router", required_argument, NULL, OPT_TARGET},
    {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
    {"cost", required_argument, NULL, OPT(COST)},
    {"repeat", required_argument, NULL, OPT(REPEAT)},
    {"interval-ms", required_argument, NULL, OPT(INTERVAL)},
    {"shards", required_argument, NULL, OPT(SHARDS)},
    {"config", required_argument, NULL, OPT(CONFIG)},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"tls-ca", required_argument, NULL, OPT_TLS_CA},
    {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
    {"tls-key", required_argument, NULL, OPT_TLS_KEY},
    {"service", required_argument, NULL, OPT(SERVICE)},
    {"since", required_argument, NULL, OPT(SINCE)},
    {"top", required_argument, NULL, OPT(TOP)},
    {"json", no_argument, NULL, OPT(JSON)},
    {"episodes", no_argument, NULL, OPT(EPISODES)},
    {"limit", required_argument, NULL, OPT(LIMIT)},
    {"shard", required_argument, NULL, OPT(SHARD)},
    {"from", required_argument, NULL, OPT(FROM)},
    {"to", required_argument, NULL, OPT(TO)},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

/* The options that take a number, with their bounds. */
static const struct {
    int ch;
    uint64_t lo, max;
    const char *expect;
} numeric_opts[] = {
    {OPT_TIMEOUT, 1, 3600000, "1..3600000"},
    {OPT(COST), 0, UINT32_MAX, "0..4294967295"},
    {OPT(REPEAT), 1, UINT64_MAX, "a positive count"},
    {OPT(INTERVAL), 0, 86400000, "0..86400000"},
    {OPT(SHARDS), 1, CLI_SHARDS_MAX, "1..1048576"},
    {OPT(TOP), 1, RL_WIRE_TOP_MAX, "1..100"},
    {OPT(SHARD), 0, CLI_SHARDS_MAX - 1, "0..1048575"},
};

/* The number of a numeric option into *v: 0, or an exit status after a message. */
static int
take_number(int ch, const char *arg, uint64_t *v)
{
    char msg[128] = "expected a number, not %s";

    for (size_t i = 0; i < sizeof(numeric_opts) / sizeof(numeric_opts[0]); i++) {
        if (numeric_opts[i].ch != ch) {
            continue;
        }
        if (rl_parse_u64(arg, numeric_opts[i].lo, numeric_opts[i].max, v) == NULL) {
            return 0;
        }
        for (size_t k = 0; long_opts[k].name != NULL; k++) {
            if (long_opts[k].val == ch) {
                snprintf(msg, sizeof(msg), "--%s: expected %s, not %%s", long_opts[k].name,
                         numeric_opts[i].expect);
            }
        }
        return cli_usage_error(msg, arg);
    }
    return 0;
}

/* One option (getopt's ch and optarg) into o: 0, or an exit status after a message; -1 for
 * --help and --version, done. */
static int
take_option(struct cli *o, int ch, const char *arg)
{
    uint64_t v = 0;
    int rc = take_number(ch, arg, &v);

    if (rc != 0) {
        return rc;
    }
    if (ch >= OPT_BASE && ch < OPT_BASE + CLI_OPTBIT_COUNT) {
        o->given |= 1u << (ch - OPT_BASE);
    }
    switch (ch) {
    case OPT_TARGET:
        o->target = arg;
        return 0;
    case OPT_TIMEOUT:
        o->timeout_ms = (int)v;
        return 0;
    case OPT(COST):
        o->cost = (uint32_t)v;
        return 0;
    case OPT(REPEAT):
        o->repeat = v;
        return 0;
    case OPT(INTERVAL):
        o->interval_ms = v;
        return 0;
    case OPT(SHARDS):
        o->shards = (uint32_t)v;
        return 0;
    case OPT(TOP):
        o->top = (uint32_t)v;
        return 0;
    case OPT(CONFIG):
        o->config = arg;
        return 0;
    case OPT_TOKEN_FILE:
        o->token_file = arg;
        return 0;
    case OPT_TLS_CA:
        o->tls_ca = arg;
        return 0;
    case OPT_TLS_CERT:
        o->tls_cert = arg;
        return 0;
    case OPT_TLS_KEY:
        o->tls_key = arg;
        return 0;
    case OPT(SERVICE):
        if (arg[0] == '\0' || strlen(arg) > RL_WIRE_SERVICE_MAX) {
            return cli_usage_error("--service: expected 1..128 bytes, not \"%s\"", arg);
        }
        o->service = arg;
        return 0;
    case OPT(SINCE):
        if (rl_parse_duration_ms(arg, &o->since_ms) != NULL) {
            return cli_usage_error("--since: expected a duration (10s, 10m, 2h), not %s", arg);
        }
        return 0;
    case OPT(JSON):
        o->json = true;
        return 0;
    case OPT(EPISODES):
        return 0;
    case OPT(LIMIT):
        o->limit = arg;
        return 0;
    case OPT(SHARD):
        o->shard = (uint32_t)v;
        return 0;
    case OPT(FROM):
        o->from = arg;
        return 0;
    case OPT(TO):
        o->to = arg;
        return 0;
    case OPT_HELP:
        cli_usage(stdout);
        return -1;
    case OPT_VERSION:
        printf("rl-cli %s\n", RL_VERSION);
        return -1;
    default:
        return cli_usage_error("unknown or incomplete option %s", arg);
    }
}

/* Whether s is a negative integer ("-350"): an argument (adjust's DELTA), never an option. */
static bool
negative_number(const char *s)
{
    if (s[0] != '-' || s[1] == '\0') {
        return false;
    }
    for (s++; *s != '\0'; s++) {
        if (*s < '0' || *s > '9') {
            return false;
        }
    }
    return true;
}

/* Whether the option word s ("--name", without "=") takes the next word as its value: its
 * long_opts entry, matched whole or by a prefix of one option only, as getopt_long does. */
static bool
takes_value(const char *s)
{
    const struct option *hit = NULL;
    size_t len = strlen(s + 2), n = 0;

    for (size_t k = 0; long_opts[k].name != NULL; k++) {
        if (strncmp(long_opts[k].name, s + 2, len) == 0) {
            if (long_opts[k].name[len] == '\0') {
                return long_opts[k].has_arg == required_argument;
            }
            hit = &long_opts[k];
            n++;
        }
    }
    return n == 1 && hit->has_arg == required_argument;
}

/* Whether argv[i] is an option word; *value set when it takes argv[i + 1] as its value. */
static bool
option_word(int argc, char **argv, int i, bool *value)
{
    const char *a = argv[i];

    *value = false;
    if (a[0] != '-' || a[1] == '\0' || negative_number(a)) {
        return false;
    }
    *value = a[1] == '-' && strchr(a, '=') == NULL && takes_value(a) && i + 1 < argc;
    return true;
}

/*
 * argv in the order getopt_long reads without mistaking a negative DELTA for an option: the
 * options with their values first, then "--", then the other words in their order (getopt
 * would move them behind the options anyway). Words after a "--" of the user's stay
 * arguments. Returns a malloc'd vector of *argc words (the caller's strings), or NULL.
 */
static char **
ordered_args(int *argc, char **argv)
{
    char **v = calloc((size_t)*argc + 2, sizeof(*v));
    int n = 0, i;
    bool value;

    if (v == NULL) {
        return NULL;
    }
    v[n++] = argv[0];
    for (i = 1; i < *argc && strcmp(argv[i], "--") != 0; i++) {
        if (option_word(*argc, argv, i, &value)) {
            v[n++] = argv[i];
            if (value) {
                v[n++] = argv[++i];
            }
        }
    }
    v[n++] = "--";
    for (i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            while (++i < *argc) {
                v[n++] = argv[i];
            }
        } else if (!option_word(*argc, argv, i, &value)) {
            v[n++] = argv[i];
        } else if (value) {
            i++;
        }
    }
    *argc = n;
    return v;
}

int
main(int argc, char **argv)
{
    struct cli o = {
        .target = CLI_DEFAULT_TARGET,
        .timeout_ms = 2000,
        .cost = 1,
        .repeat = 1,
        .shards = CLI_DEFAULT_SHARDS,
    };
    const struct cli_cmd *cmd;
    /* static: still reachable when main returns, not a leak to LeakSanitizer */
    static char **words;
    char names[256];
    int ch, rc;

    words = ordered_args(&argc, argv);
    if (words == NULL) {
        return cli_out_of_memory();
    }
    argv = words;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
        rc = take_option(&o, ch, ch == '?' || ch == ':' ? argv[optind - 1] : optarg);
        if (rc != 0) {
            return rc < 0 ? CLI_EXIT_OK : rc;
        }
    }
    if (optind >= argc) {
        return cli_usage_error("expected a command: %s", cli_commands_with(0, names, sizeof(names)));
    }
    cmd = cli_find_command(argv[optind]);
    if (cmd == NULL) {
        return cli_usage_error("unknown command %s", argv[optind]);
    }
    rc = cli_check_options(&o, cmd);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    if (o.tls_ca != NULL || o.tls_cert != NULL || o.tls_key != NULL) {
        char why[512];

        if (o.tls_ca == NULL) {
            return cli_usage_error("%s need --tls-ca", "--tls-cert and --tls-key");
        }
        if (rl_tls_ctx_new(&o.tls, RL_TLS_CLIENT, o.tls_cert, o.tls_key, o.tls_ca, NULL, why,
                           sizeof(why)) != 0) {
            return cli_usage_error("%s", why);
        }
    }
    rc = cmd->run(&o, cmd, argc - optind - 1, argv + optind + 1);
    rl_tls_ctx_free(o.tls);
    return rc;
}
