/*
 * rl-cli: a small client for people, scripts and demos. It sends one request (CHECK, PING,
 * STATS, CLOCK, THROTTLED, HOT) to a node or router and prints each reply as one line that is easy
 * to read and to grep, shows the cluster on one screen (status), and does the chores of a
 * cluster's config (hash, rules, tokens). This file is the command line only: the options,
 * and the table of commands that the usage is written from and that dispatch looks up. The
 * commands live in cmd_*.c and status.c (cli.h says which module holds what).
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "parse.h"
#include "tls.h"

#include "cli.h"

/* The commands, in the order --help lists them. Those that send one protocol op take their
 * name and code from wire.h's op list. */
static const struct cli_cmd commands[] = {
    {.op = RL_WIRE_OP_CHECK,
     .run = cli_cmd_check,
     .synopsis = "SERVICE USER [ENDPOINT] [--cost N] [--limit LIMIT] [--repeat N] [--interval-ms MS]",
     .help = "ask for a decision; one line per reply",
     .opts = CLI_O(COST) | CLI_O(REPEAT) | CLI_O(INTERVAL) | CLI_O(LIMIT)},
    {.op = RL_WIRE_OP_PING, .run = cli_cmd_query, .help = "who answers (a router or a node's name)"},
    {.op = RL_WIRE_OP_STATS,
     .run = cli_cmd_query,
     .help = "the server's counters, one \"key value\" per line"},
    {.name = "status",
     .run = cli_cmd_status,
     .synopsis = "[--config FILE] [--json] [--interval-ms MS]",
     .help = "the cluster on one screen: the router's view and, with\n"
             "--config, every member's shards, keys, decisions/s (over\n"
             "--interval-ms, default 1000), memory and rules version, and\n"
             "who is missing (ZooKeeper unreachable: said, after at most\n"
             "--timeout-ms or 3 s); exit 1 when something is",
     .opts = CLI_O(CONFIG) | CLI_O(JSON) | CLI_O(INTERVAL)},
    {.op = RL_WIRE_OP_CLOCK,
     .run = cli_cmd_clock,
     .synopsis = "NOW_MS",
     .help = "set a --test-clock node's clock (ms since the epoch)",
     .unknown_op = "a node needs --test-clock"},
    {.name = "hash",
     .run = cli_cmd_hash,
     .synopsis = "SERVICE USER [--shards S | --config FILE]",
     .help = "the key hash and shard of a (service, user) pair; with\n"
             "--config, the cluster's shard count and the node that owns it\n"
             "([node] sections, or the live members and assignment in\n"
             "ZooKeeper)",
     .opts = CLI_O(SHARDS) | CLI_O(CONFIG)},
    {.op = RL_WIRE_OP_THROTTLED,
     .run = cli_cmd_throttled,
     .synopsis = "[--service S] [--since DURATION] [--top N] [--json]",
     .help = "throttling episodes (a node's, or every node's through a\n"
             "router): service, endpoint, user, start, end, duration,\n"
             "refused, node, how it ended; most refused first",
     .opts = CLI_O(SERVICE) | CLI_O(SINCE) | CLI_O(TOP) | CLI_O(JSON)},
    {.op = RL_WIRE_OP_HOT,
     .run = cli_cmd_hot,
     .synopsis = "[--router HOST:PORT] [--service S] [--top N] [--json]",
     .help = "a router's hot keys: the (service, user) pairs it was sent\n"
             "the most CHECKs for lately (counts halve every 10 s), highest\n"
             "first, with how much of each count may be other keys'",
     .opts = CLI_O(SERVICE) | CLI_O(TOP) | CLI_O(JSON),
     .unknown_op = "only a router answers HOT"},
    {.name = "gen-token",
     .run = cli_cmd_token,
     .synopsis = "FILE",
     .help = "write a new random token to FILE (mode 0600, must not exist)\n"
             "and print the token_sha256 line of its [client NAME] section"},
    {.name = "hash-token",
     .run = cli_cmd_token,
     .synopsis = "[FILE]",
     .help = "print the token_sha256 line for the token in FILE (default:\n"
             "--token-file), never the token itself"},
    {.name = "rules",
     .run = cli_cmd_rules,
     .synopsis = "check FILE [--config FILE] | push FILE --config FILE | show --config FILE",
     .help = "check: validate a rules file ([service] sections only);\n"
             "push: validate it, then write it to the cluster's rules znode\n"
             "in ZooKeeper (every node and router switches to it);\n"
             "show: the rules znode's version, digest and text;\n"
             "a directory or a *.yaml file is envoyproxy/ratelimit's\n"
             "configuration: check and push do what envoy check/push do",
     .opts = CLI_O(CONFIG)},
    {.name = "envoy",
     .run = cli_cmd_envoy,
     .synopsis = "check PATH | push PATH [VERSION] | show | delete VERSION",
     .help = "check: validate envoyproxy/ratelimit YAML (a file or a\n"
             "directory of *.yaml) as the routers load it;\n"
             "push: validate it, then write it to the cluster's envoy znode\n"
             "if that is still at VERSION (default: as read just before);\n"
             "every router serving Envoy puts it in force over its own\n"
             "envoy_config; show: the znode's version and files;\n"
             "delete: routers go back to their own envoy_config",
     .opts = CLI_O(CONFIG)},
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static const char *const opt_names[CLI_OPTBIT_COUNT] = {
#define CLI_OPT_NAME(n, s) s,
    CLI_OPTS_MAP(CLI_OPT_NAME)
#undef CLI_OPT_NAME
};

#define HELP_INDENT 17

static void
usage(FILE *f)
{
    fprintf(f, "usage: rl-cli [--target HOST:PORT] [--timeout-ms MS] COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const struct cli_cmd *c = &commands[i];
        const char *line = c->help;
        int n = fprintf(f, "  %s%s%s", cli_cmd_name(c), c->synopsis ? " " : "",
                        c->synopsis ? c->synopsis : "");

        /* The help's first line beside a short synopsis, else under it. */
        if (n >= HELP_INDENT) {
            n = fprintf(f, "\n") - 1;
        }
        while (line != NULL) {
            const char *nl = strchr(line, '\n');

            fprintf(f, "%*s%.*s\n", HELP_INDENT - n, "",
                    nl ? (int)(nl - line) : (int)strlen(line), line);
            n = 0;
            line = nl ? nl + 1 : NULL;
        }
    }
    fprintf(f, "\n"
               "options:\n"
               "  --target HOST:PORT  server (default " CLI_DEFAULT_TARGET ", the router)\n"
               "  --timeout-ms MS     per request and for connecting (default 2000)\n"
               "  --cost N            cost of each CHECK (default 1; 0 peeks)\n"
               "  --limit LIMIT       check: send an inline limit, cluster.conf's syntax\n"
               "                      (\"gcra 10 per 1s burst 5\"; docs/PROTOCOL.md)\n"
               "  --repeat N          send the CHECK N times (default 1)\n"
               "  --interval-ms MS    pause between repeated CHECKs (default 0)\n"
               "  --shards S          shard count for hash (default 4096)\n"
               "  --config FILE       cluster.conf for hash, status and rules\n"
               "  --router HOST:PORT  the same as --target\n"
               "  --service S         throttled, hot: only service S\n"
               "  --since DURATION    throttled: only episodes open or ended within DURATION\n"
               "                      (500ms, 10s, 10m, 2h...)\n"
               "  --top N             throttled: at most N episodes, 1..100 (default 20);\n"
               "                      hot: at most N keys (default 10)\n"
               "  --json              throttled, hot, status: one JSON object instead of a\n"
               "                      table\n"
               "  --token-file FILE   AUTH with the token in FILE first (a router's client\n"
               "                      token, or a node's cluster secret; mode 0600); default\n"
               "                      $RL_TOKEN_FILE, none when unset\n"
               "  --tls-ca FILE       speak TLS, checking the server's certificate against the\n"
               "                      CA certificates in FILE (PEM)\n"
               "  --tls-cert FILE, --tls-key FILE\n"
               "                      this client's certificate and key (PEM; the key mode\n"
               "                      0600), for a server that wants one (a node with TLS)\n"
               "  --help, --version\n"
               "\n"
               "Exit status: 0 success (check: ALLOWED), 1 the server cannot be reached, answers\n"
               "ERROR or breaks the protocol, 2 usage or config error; check, by its (last)\n"
               "answer: 3 LIMITED, 4 QUEUED, 5 FAIL_OPEN, 6 FAIL_CLOSED, 7 NO_RULE. throttled exits 0\n"
               "also when some nodes did not answer (a router lists them as missing, on stderr\n"
               "and in the JSON).\n"
               "rl-cli and rl-bench both default to 127.0.0.1:7400, the router of the shipped\n"
               "cluster.conf.\n");
}

/* The commands whose table entries have any of bits ("a, b or c"), into buf. */
static const char *
commands_with(unsigned bits, char *buf, size_t len)
{
    size_t k = 0, n = 0;

    for (size_t i = 0; i < NCOMMANDS; i++) {
        n += (commands[i].opts & bits) != 0 || bits == 0;
    }
    buf[0] = '\0';
    for (size_t i = 0, used = 0; i < NCOMMANDS && used < len; i++) {
        if ((commands[i].opts & bits) == 0 && bits != 0) {
            continue;
        }
        k++;
        used += (size_t)snprintf(buf + used, len - used, "%s%s",
                                 k == 1 ? "" : (k == n ? " or " : ", "), cli_cmd_name(&commands[i]));
    }
    return buf;
}

/* An option given to a command that does not take it: a usage error naming who takes it. */
static int
check_options(const struct cli *o, const struct cli_cmd *cmd)
{
    unsigned extra = o->given & ~cmd->opts;
    char msg[512], with[256];

    for (int b = 0; b < CLI_OPTBIT_COUNT; b++) {
        if (extra & (1u << b)) {
            snprintf(msg, sizeof(msg), "%%s: --%s goes with %s", opt_names[b],
                     commands_with(1u << b, with, sizeof(with)));
            return cli_usage_error(msg, cli_cmd_name(cmd));
        }
    }
    if ((o->given & CLI_O(SHARDS)) && o->config != NULL) {
        return cli_usage_error("%s: --shards or --config, not both (the config has the count)",
                               cli_cmd_name(cmd));
    }
    return CLI_EXIT_OK;
}

static const struct cli_cmd *
find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++) {
        if (strcmp(cli_cmd_name(&commands[i]), name) == 0) {
            return &commands[i];
        }
    }
    return NULL;
}

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
    {"limit", required_argument, NULL, OPT(LIMIT)},
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
    case OPT(LIMIT):
        o->limit = arg;
        return 0;
    case OPT_HELP:
        usage(stdout);
        return -1;
    case OPT_VERSION:
        printf("rl-cli %s\n", RL_VERSION);
        return -1;
    default:
        return cli_usage_error("unknown or incomplete option %s", arg);
    }
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
    char names[256];
    int ch, rc;

    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
        rc = take_option(&o, ch, ch == '?' || ch == ':' ? argv[optind - 1] : optarg);
        if (rc != 0) {
            return rc < 0 ? CLI_EXIT_OK : rc;
        }
    }
    if (optind >= argc) {
        return cli_usage_error("expected a command: %s", commands_with(0, names, sizeof(names)));
    }
    cmd = find_command(argv[optind]);
    if (cmd == NULL) {
        return cli_usage_error("unknown command %s", argv[optind]);
    }
    rc = check_options(&o, cmd);
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
