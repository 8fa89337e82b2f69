/*
 * cli: what rl-cli's commands share across its files (main.c parses the command line;
 * status.c is `rl-cli status`). Not a library: only rl-cli includes it.
 */
#ifndef RL_CLI_H
#define RL_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"
#include "assignment.h"
#include "shardmap.h"

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

struct cli {
    const char *target;
    int timeout_ms;
    uint32_t cost;
    uint64_t repeat;
    uint64_t interval_ms;
    uint32_t shards;
    const char *config;
    const char *token_file; /* --token-file, else $RL_TOKEN_FILE */
    const char *service; /* throttled --service */
    uint64_t since_ms;   /* throttled --since */
    uint32_t top;        /* throttled --top; 0: the server's default */
    bool since_set;
    bool cost_set;
    bool repeat_set;
    bool interval_set;
    bool shards_set;
    bool json; /* --json (status, throttled) */
};

/* A client call's negative errno in words. */
const char *cli_errno_text(int rc);

/* The members of the cluster in conf: the [node] sections, or ZooKeeper's live ones (with
 * the assignment in force, into *a, initialised by the caller). Returns 0 or an exit
 * status after a message; *from says where they came from. */
int cli_members(const struct rl_conf *conf, struct rl_member **members, size_t *n,
                struct rl_assignment *a, bool *have_a, const char **from);

/* rl-cli status [--json]: status.c. */
int cli_status(const struct cli *o, bool json);

#endif
