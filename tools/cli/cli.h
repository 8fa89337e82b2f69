/*
 * cli: what rl-cli's modules share. main.c parses the command line and looks the command
 * up in commands.c's table (struct cli_cmd), from which commands.c also writes the usage;
 * cli.c holds the helpers every command uses (messages, connecting, the one request path of
 * the commands that send a protocol op); output.c the formatting of figures and table
 * cells; members.c the cluster's membership (ZooKeeper or the [node] sections);
 * cmd_server.c, cmd_cluster.c, cmd_envoy.c and cmd_token.c the commands; status.c `rl-cli
 * status`. No module calls into main.c. Not a library: only rl-cli includes it.
 */
#ifndef RL_CLI_H
#define RL_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <uv.h>

#include "conf.h"
#include "json.h"
#include "assignment.h"
#include "reqclient.h"
#include "shardmap.h"
#include "wire.h"
#include "zkm.h"

/* Exit statuses (documented in --help and docs/CONFIG.md): a script branches on them. */
#define CLI_EXIT_OK 0    /* done; for check: ALLOWED */
#define CLI_EXIT_FAIL 1  /* server unreachable, ERROR reply, broken protocol */
#define CLI_EXIT_USAGE 2 /* bad command line or config */
#define CLI_EXIT_LIMITED 3
#define CLI_EXIT_QUEUED 4
#define CLI_EXIT_FAIL_OPEN 5
#define CLI_EXIT_FAIL_CLOSED 6
#define CLI_EXIT_NO_RULE 7

#define CLI_DEFAULT_TARGET "127.0.0.1:7400"
#define CLI_DEFAULT_SHARDS 4096u
#define CLI_SHARDS_MAX 1048576u

/* The options that go with some commands only: a command's table entry says which it takes. */
#define CLI_OPTS_MAP(X)                                                                            \
    X(COST, "cost")                                                                                \
    X(REPEAT, "repeat")                                                                            \
    X(INTERVAL, "interval-ms")                                                                     \
    X(SHARDS, "shards")                                                                            \
    X(CONFIG, "config")                                                                            \
    X(SERVICE, "service")                                                                          \
    X(SINCE, "since")                                                                              \
    X(TOP, "top")                                                                                  \
    X(JSON, "json")                                                                                \
    X(LIMIT, "limit")                                                                              \
    X(EPISODES, "episodes")                                                                        \
    X(SHARD, "shard")                                                                              \
    X(FROM, "from")                                                                                \
    X(TO, "to")

enum cli_opt_bit {
#define CLI_OPT_ENUM(n, s) CLI_OPTBIT_##n,
    CLI_OPTS_MAP(CLI_OPT_ENUM)
#undef CLI_OPT_ENUM
        CLI_OPTBIT_COUNT
};

#define CLI_O(n) (1u << CLI_OPTBIT_##n)

struct cli {
    const char *target;
    int timeout_ms;
    uint32_t cost;
    uint64_t repeat;
    uint64_t interval_ms;
    uint32_t shards;
    const char *config;
    const char *token_file; /* --token-file, else $RL_TOKEN_FILE */
    const char *tls_ca;     /* --tls-ca: TLS, the server's certificate checked against it */
    const char *tls_cert;   /* --tls-cert, --tls-key: this client's (a node wants one) */
    const char *tls_key;
    struct rl_tls_ctx *tls; /* built from those; NULL: plain TCP */
    const char *service; /* throttled --service */
    uint64_t since_ms;   /* throttled --since */
    uint32_t top;        /* throttled --top; 0: the server's default */
    bool json;           /* --json (status, throttled) */
    const char *limit;   /* check --limit: an inline limit in cluster.conf's syntax */
    uint32_t shard;      /* handoff --shard */
    const char *from;    /* handoff --from, --to: HOST:PORT of the nodes */
    const char *to;
    unsigned given;      /* CLI_O() of the options given */
};

struct cli_cmd;

/* A command's handler: args are the words after the command's name. Returns an exit status. */
typedef int (*cli_run_fn)(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv);

/* One command of rl-cli: commands.c's table. */
struct cli_cmd {
    const char *name;     /* NULL: the name of op (rl_wire_op_name) */
    uint32_t op;          /* the protocol op it sends (RL_WIRE_OP_*), 0 when none */
    cli_run_fn run;
    const char *synopsis; /* its arguments, for the usage */
    const char *help;     /* what it does, for the usage: lines split at '\n' */
    unsigned opts;        /* CLI_O() of the options it takes */
    const char *unknown_op; /* why a server may not know op (answered UNKNOWN_OP), or NULL */
};

/* The command's name: its own, or its op's. */
const char *cli_cmd_name(const struct cli_cmd *cmd);

/* ---- commands.c ------------------------------------------------------------------------- */

/* The usage (--help), written from the table of commands. */
void cli_usage(FILE *f);

/* The command called name, or NULL. */
const struct cli_cmd *cli_find_command(const char *name);

/* The names of the commands taking any of bits (CLI_O(); 0: every command), as "a, b or c",
 * into buf (len bytes). Returns buf. */
const char *cli_commands_with(unsigned bits, char *buf, size_t len);

/* The options in o->given that cmd takes: CLI_EXIT_OK, or CLI_EXIT_USAGE after a message
 * naming the commands that take the one given. */
int cli_check_options(const struct cli *o, const struct cli_cmd *cmd);

/* ---- cli.c ------------------------------------------------------------------------------ */

/* A client call's negative errno in words. */
const char *cli_errno_text(int rc);

/* "rl-cli: " fmt (with arg), then the --help hint, on stderr; returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *fmt, const char *arg);

/* Prints "rl-cli: out of memory" on stderr; returns CLI_EXIT_FAIL. */
int cli_out_of_memory(void);

void cli_sleep_ms(uint64_t ms);

/* Loads --config into *conf; an exit status after a message on failure. */
int cli_load_config(const struct cli *o, struct rl_conf **conf);

/*
 * Connects to --target and AUTHs with --token-file (or $RL_TOKEN_FILE). Returns CLI_EXIT_OK
 * with *c set, or an exit status with why filled (without the target's address).
 */
int cli_connect(const struct cli *o, struct rl_client **c, char *why, size_t whylen);

/*
 * The request path of the commands that send one protocol op: connects, then sends req
 * (its op the command's, its id set here) repeat times (0: once), interval_ms apart, and
 * hands each reply of that op to print. An ERROR reply is printed as "LABEL -> ERROR ..."
 * (LABEL: label, or the command's name) and ends it with CLI_EXIT_FAIL, as do a transport
 * error and a reply of another op. Otherwise the exit status is the last print's.
 */
struct cli_exchange {
    struct rl_wire_req req;
    const char *label;
    uint64_t repeat;
    uint64_t interval_ms;
    /* Prints a reply; rtt_us since its request was sent. Returns the exit status. */
    int (*print)(const struct cli *o, const struct cli_exchange *x,
                 const struct rl_wire_reply *rep, uint64_t rtt_us);
};

int cli_exchange(const struct cli *o, const struct cli_cmd *cmd, struct cli_exchange *x);

/* ---- output.c --------------------------------------------------------------------------- */

/* Ends a --json document (its object), and its line. */
void cli_json_done(struct rl_json *j);

/* "ERROR name: message" and a newline, on stdout. */
void cli_print_error_reply(const struct rl_wire_reply *rep);

/* s in capitals into buf. Returns buf. */
const char *cli_upper(const char *s, char *buf, size_t len);

/* A table cell of width columns (and a space): none when v is nil, control bytes as '?'. */
void cli_print_cell(const struct rl_wire_str *v, const char *none, int width);

/* ms since the epoch as UTC "2024-05-01T12:00:00.123Z". */
void cli_format_ms(uint64_t ms, char *buf, size_t len);

/* A duration: "850ms", "12.5s", "3m12s". */
void cli_format_duration(uint64_t ms, char *buf, size_t len);

/* A byte count: "512 B", "1.9 MiB". */
void cli_format_bytes(int64_t v, char *buf, size_t len);

/* ---- members.c -------------------------------------------------------------------------- */

/* How long rl-cli waits for ZooKeeper at most by default: a few seconds, not a session. */
#define CLI_ZK_WAIT_MS 3000

/* A ZooKeeper session of rl-cli's (the config's ensemble, secured with its secret). */
struct cli_zk {
    uv_loop_t loop;
    struct rl_zkm *z;
    int wait_ms; /* what each blocking call waits at most */
};

/* The wait for ZooKeeper: --timeout-ms, at least CLI_ZK_WAIT_MS. */
int cli_zk_wait_ms(const struct cli *o);

/* Starts a session with conf's ZooKeeper; 0 or a negative errno. Close it in any case. */
int cli_zk_open(struct cli_zk *zk, const struct rl_conf *conf, int wait_ms);
void cli_zk_close(struct cli_zk *zk);

/* The members of a cluster and the assignment in force. */
struct cli_members {
    struct rl_member *v; /* malloc'd */
    size_t n;
    struct rl_assignment a;
    bool have_a;
    const char *from; /* where they came from, in words */
    char why[320];    /* when they could not be read: why */
};

/*
 * The members of conf's cluster: its [node] sections with static membership, else the live
 * ones in ZooKeeper with the assignment in force, through zk (open), or through a session of
 * its own when zk is NULL. Returns 0, or a negative errno with m->why filled (an
 * unreachable ZooKeeper named with its address). cli_members_free in any case.
 */
int cli_members_read(const struct cli *o, const struct rl_conf *conf, struct cli_zk *zk,
                     struct cli_members *m);
void cli_members_free(struct cli_members *m);

/* ---- the commands ----------------------------------------------------------------------- */

int cli_cmd_check(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv);
/* adjust and release */
int cli_cmd_settle(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv);
int cli_cmd_query(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv);
int cli_cmd_clock(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv);
int cli_cmd_throttled(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv);
int cli_cmd_hot(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv);
/* cmd_handoff.c */
int cli_cmd_handoff(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv);
int cli_cmd_hash(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv);
int cli_cmd_rules(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv);
int cli_cmd_envoy(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv);
int cli_cmd_token(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv);
int cli_cmd_status(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv);

#endif
