/*
 * commands: rl-cli's table of commands, in the order --help lists them, and what is written
 * from it: the usage, the lookup of a command by name, the "which commands take this
 * option" of a usage error. Not for parsing the command line (main.c) nor for running a
 * command (cmd_*.c, status.c).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* The commands, in the order --help lists them. Those that send one protocol op take their
 * name and code from wire.h's op list. */
static const struct cli_cmd commands[] = {
    {.op = RL_WIRE_OP_CHECK,
     .run = cli_cmd_check,
     .synopsis =
         "SERVICE USER [ENDPOINT] [--cost N] [--limit LIMIT] [--repeat N] [--interval-ms MS]",
     .help = "ask for a decision; one line per reply",
     .opts = CLI_O(COST) | CLI_O(REPEAT) | CLI_O(INTERVAL) | CLI_O(LIMIT)},
    {.op = RL_WIRE_OP_ADJUST,
     .run = cli_cmd_settle,
     .synopsis = "SERVICE USER DELTA [ENDPOINT] [--limit LIMIT] [--repeat N] [--interval-ms MS]",
     .help = "settle a reservation: charge DELTA (> 0) or refund it (< 0,\n"
             "-1000000..1000000); the key after it, printed as check's.\n"
             "Not idempotent: each one sent moves the counters",
     .opts = CLI_O(REPEAT) | CLI_O(INTERVAL) | CLI_O(LIMIT)},
    {.op = RL_WIRE_OP_RELEASE,
     .run = cli_cmd_settle,
     .synopsis = "SERVICE USER [COUNT] [ENDPOINT] [--limit LIMIT] [--repeat N] [--interval-ms MS]",
     .help = "give back COUNT (default 1) slots of a concurrency rule taken\n"
             "by check; the key after it, printed as check's",
     .opts = CLI_O(REPEAT) | CLI_O(INTERVAL) | CLI_O(LIMIT)},
    {.op = RL_WIRE_OP_PING,
     .run = cli_cmd_query,
     .help = "who answers (a router or a node's name)"},
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
     .synopsis = "[--service S] [--since DURATION] [--top N] [--episodes] [--json]",
     .help = "who was throttled (a node's episodes, or every node's\n"
             "through a router), one (service, user) a line: episodes,\n"
             "total refused, first start, last end; most refused first.\n"
             "--episodes: each episode instead (endpoint, start, end,\n"
             "duration, refused, node, how it ended)",
     .opts = CLI_O(SERVICE) | CLI_O(SINCE) | CLI_O(TOP) | CLI_O(EPISODES) | CLI_O(JSON)},
    {.op = RL_WIRE_OP_HOT,
     .run = cli_cmd_hot,
     .synopsis = "[--router HOST:PORT] [--service S] [--top N] [--json]",
     .help = "a router's hot keys: the (service, user) pairs it was sent\n"
             "the most CHECKs for lately (counts halve every 10 s), highest\n"
             "first, with how much of each count may be other keys'",
     .opts = CLI_O(SERVICE) | CLI_O(TOP) | CLI_O(JSON),
     .unknown_op = "only a router answers HOT"},
    {.name = "handoff",
     .run = cli_cmd_handoff,
     .synopsis = "--shard N --from HOST:PORT --to HOST:PORT",
     .help = "hand shard N's keys, with their counters, from one node to\n"
             "another (HANDOFF_OUT to --from, HANDOFF_IN to --to; both with\n"
             "--token-file and --tls-*); keys --to holds are replaced.\n"
             "Static membership only (with ZooKeeper shards move with their\n"
             "counters by themselves, and nodes refuse it). Stop sending that\n"
             "shard's CHECKs to --from first (docs/OPERATIONS.md, \"Handing\n"
             "a shard off by hand\")",
     .opts = CLI_O(SHARD) | CLI_O(FROM) | CLI_O(TO),
     .unknown_op = "a node from before handoff, or not a node"},
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

void
cli_usage(FILE *f)
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
               "  --limit LIMIT       check, adjust, release: send an inline limit,\n"
               "                      cluster.conf's syntax\n"
               "                      (\"gcra 10 per 1s burst 5\"; docs/PROTOCOL.md)\n"
               "  --repeat N          send the request N times (default 1)\n"
               "  --interval-ms MS    pause between repeated requests (default 0)\n"
               "  --shards S          shard count for hash (default 4096)\n"
               "  --shard N           handoff: the shard handed off\n"
               "  --from HOST:PORT    handoff: the node handing it (its old owner)\n"
               "  --to HOST:PORT      handoff: the node taking it (its new owner)\n"
               "  --config FILE       cluster.conf for hash, status and rules\n"
               "  --router HOST:PORT  the same as --target\n"
               "  --service S         throttled, hot: only service S\n"
               "  --since DURATION    throttled: only episodes open or ended within DURATION\n"
               "                      (500ms, 10s, 10m, 2h...)\n"
               "  --top N             throttled: at most N users (of the 100 episodes most\n"
               "                      refused), with --episodes or --json at most N\n"
               "                      episodes, 1..100 (default 20); hot: at most N keys\n"
               "                      (default 10)\n"
               "  --episodes          throttled: each episode, not the sum by user\n"
               "  --json              throttled, hot, status: one JSON object instead of a\n"
               "                      table (throttled: the episodes and their users)\n"
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
               "Exit status: 0 success (check, adjust, release: ALLOWED), 1 the server cannot be\n"
               "reached, answers ERROR or breaks the protocol, 2 usage or config error; check,\n"
               "adjust and release, by the (last) answer: 3 LIMITED, 4 QUEUED, 5 FAIL_OPEN,\n"
               "6 FAIL_CLOSED, 7 NO_RULE.\n"
               "throttled exits 0 also when some nodes did not answer (a router lists them as\n"
               "missing, on stderr and in the JSON).\n"
               "rl-cli and rl-bench both default to 127.0.0.1:7400, the router of the shipped\n"
               "cluster.conf.\n");
}

/* The commands whose table entries have any of bits ("a, b or c"), into buf. */
const char *
cli_commands_with(unsigned bits, char *buf, size_t len)
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
int
cli_check_options(const struct cli *o, const struct cli_cmd *cmd)
{
    unsigned extra = o->given & ~cmd->opts;
    char msg[512], with[256];

    for (int b = 0; b < CLI_OPTBIT_COUNT; b++) {
        if (extra & (1u << b)) {
            snprintf(msg, sizeof(msg), "%%s: --%s goes with %s", opt_names[b],
                     cli_commands_with(1u << b, with, sizeof(with)));
            return cli_usage_error(msg, cli_cmd_name(cmd));
        }
    }
    if ((o->given & CLI_O(SHARDS)) && o->config != NULL) {
        return cli_usage_error("%s: --shards or --config, not both (the config has the count)",
                               cli_cmd_name(cmd));
    }
    return CLI_EXIT_OK;
}

const struct cli_cmd *
cli_find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++) {
        if (strcmp(cli_cmd_name(&commands[i]), name) == 0) {
            return &commands[i];
        }
    }
    return NULL;
}
