/*
 * rl-cli: a small client for people, scripts and demos. It sends one kind of request (CHECK,
 * PING, STATS, CLOCK) to a node or router and prints each reply as one line that is easy to
 * read and to grep, or prints the shard a (service, user) pair hashes to. Not a load
 * generator (rl-bench is) and not a library: everything here is file-local.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#include <uv.h>

#include "auth.h"
#include "reqclient.h"
#include "conf.h"
#include "parse.h"
#include "zkadmin.h"
#include "zkm.h"
#include "shardmap.h"
#include "clock.h"
#include "wire.h"

#include "cli.h"

static void
usage(FILE *f)
{
    fprintf(f, "usage: rl-cli [--target HOST:PORT] [--timeout-ms MS] COMMAND [ARGS]\n"
               "\n"
               "commands:\n"
               "  check SERVICE USER [ENDPOINT] [--cost N] [--repeat N] [--interval-ms MS]\n"
               "                 ask for a decision; one line per reply\n"
               "  ping           who answers (a router or a node's name)\n"
               "  stats          the server's counters, one \"key value\" per line\n"
               "  status [--config FILE] [--json] [--interval-ms MS]\n"
               "                 the cluster on one screen: the router's view and, with\n"
               "                 --config, every member's shards, keys, decisions/s (over\n"
               "                 --interval-ms, default 1000), memory and rules version, and\n"
               "                 who is missing; exit 1 when something is\n"
               "  clock NOW_MS   set a --test-clock node's clock (ms since the epoch)\n"
               "  hash SERVICE USER [--shards S | --config FILE]\n"
               "                 the key hash and shard of a (service, user) pair; with\n"
               "                 --config, the cluster's shard count and the node that owns it\n"
               "                 ([node] sections, or the live members and assignment in\n"
               "                 ZooKeeper)\n"
               "  throttled [--service S] [--since DURATION] [--top N] [--json]\n"
               "                 throttling episodes (a node's, or every node's through a\n"
               "                 router): service, endpoint, user, start, end, duration,\n"
               "                 refused, node; most refused first\n"
               "  gen-token FILE  write a new random token to FILE (mode 0600, must not exist)\n"
               "                 and print the token_sha256 line of its [client NAME] section\n"
               "  hash-token [FILE]\n"
               "                 print the token_sha256 line for the token in FILE (default:\n"
               "                 --token-file), never the token itself\n"
               "  rules check FILE [--config FILE]\n"
               "                 validate a rules file ([service] sections only)\n"
               "  rules push FILE --config FILE\n"
               "                 validate FILE, then write it to the cluster's rules znode in\n"
               "                 ZooKeeper: every node and router switches to it\n"
               "  rules show --config FILE\n"
               "                 the rules znode's version, digest and text\n"
               "\n"
               "options:\n"
               "  --target HOST:PORT  server (default " CLI_DEFAULT_TARGET ", the router)\n"
               "  --timeout-ms MS     per request and for connecting (default 2000)\n"
               "  --cost N            cost of each CHECK (default 1; 0 peeks)\n"
               "  --repeat N          send the CHECK N times (default 1)\n"
               "  --interval-ms MS    pause between repeated CHECKs (default 0)\n"
               "  --shards S          shard count for hash (default 4096)\n"
               "  --config FILE       cluster.conf for hash, status and rules\n"
               "  --service S         throttled: only service S\n"
               "  --since DURATION    throttled: only episodes open or ended within DURATION\n"
               "                      (500ms, 10s, 10m, 2h...)\n"
               "  --top N             throttled: at most N episodes, 1..100 (default 20)\n"
               "  --json              throttled, status: one JSON object instead of a table\n"
               "  --token-file FILE   AUTH with the token in FILE first (a router's client\n"
               "                      token, or a node's cluster secret; mode 0600); default\n"
               "                      $RL_TOKEN_FILE, none when unset\n"
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

static int
usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "rl-cli: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\ntry rl-cli --help\n");
    return CLI_EXIT_USAGE;
}

/* A number in 0..max for an option: rl_parse_u64, 0 or -1. */
static int
parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    return rl_parse_u64(s, 0, max, out) == NULL ? 0 : -1;
}

const char *
cli_errno_text(int rc)
{
    switch (rc) {
    case -EINVAL:
        return "expected HOST:PORT";
    case -ENXIO:
        return "cannot resolve the host name";
    case -ECONNRESET:
        return "the server closed the connection";
    case -EPROTO:
        return "protocol error (bad reply)";
    case -ETIMEDOUT:
        return "timed out";
    default:
        return strerror(-rc);
    }
}

static int
connect_target(const struct cli *o, struct rl_client **c)
{
    int rc = rl_client_connect_addr(c, o->target, o->timeout_ms);
    char why[320];

    if (rc != 0) {
        fprintf(stderr, "rl-cli: cannot connect to %s: %s\n", o->target, cli_errno_text(rc));
        return CLI_EXIT_FAIL;
    }
    rc = rl_client_auth_file(*c, o->token_file, o->timeout_ms, why, sizeof(why));
    if (rc != 0) {
        fprintf(stderr, "rl-cli: %s: %s\n", o->target, why);
        rl_client_destroy(*c);
        *c = NULL;
        return rc == -EACCES || rc == -EINVAL || rc == -ENOENT ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}

static int
request_failed(const struct cli *o, const char *what, int rc)
{
    fprintf(stderr, "rl-cli: %s to %s: %s\n", what, o->target, cli_errno_text(rc));
    return CLI_EXIT_FAIL;
}

static void
print_error_reply(const struct rl_wire_reply *rep)
{
    printf("ERROR %s: %.*s\n", rl_wire_err_name(rep->err), (int)rep->message.len,
           rep->message.ptr != NULL ? rep->message.ptr : "");
}

static void
print_upper(const char *s)
{
    for (; *s != '\0'; s++) {
        putchar(*s >= 'a' && *s <= 'z' ? *s - 'a' + 'A' : *s);
    }
}

static void
sleep_ms(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int
cmd_check(const struct cli *o, int argc, char **argv)
{
    struct rl_wire_reply *rep;
    struct rl_client *c = NULL;
    const char *endpoint;
    uint64_t i;
    int rc, status;

    if (argc < 2 || argc > 3) {
        return usage_error("%s: expected SERVICE USER [ENDPOINT]", "check");
    }
    endpoint = argc == 3 ? argv[2] : NULL;
    rep = malloc(sizeof(*rep));
    if (rep == NULL) {
        fprintf(stderr, "rl-cli: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    status = connect_target(o, &c);
    for (i = 0; c != NULL && status != CLI_EXIT_FAIL && i < o->repeat; i++) {
        if (i > 0 && o->interval_ms > 0) {
            sleep_ms(o->interval_ms);
        }
        rc = rl_client_check(c, argv[0], argv[1], endpoint, o->cost, rep, o->timeout_ms);
        if (rc != 0) {
            status = request_failed(o, "check", rc);
            break;
        }
        printf("check %s %s%s%s cost=%u -> ", argv[0], argv[1], endpoint ? " " : "",
               endpoint ? endpoint : "", o->cost);
        if (rep->op == RL_WIRE_OP_ERROR) {
            print_error_reply(rep);
            status = CLI_EXIT_FAIL;
        } else {
            static const int by_code[] = {
                [RL_WIRE_ALLOWED] = CLI_EXIT_OK,          [RL_WIRE_LIMITED] = CLI_EXIT_LIMITED,
                [RL_WIRE_FAIL_OPEN] = CLI_EXIT_FAIL_OPEN, [RL_WIRE_FAIL_CLOSED] = CLI_EXIT_FAIL_CLOSED,
                [RL_WIRE_NO_RULE] = CLI_EXIT_NO_RULE,     [RL_WIRE_QUEUED] = CLI_EXIT_QUEUED,
            };

            /* The last answer decides; a later one replaces an earlier one. */
            status = rep->check.code < sizeof(by_code) / sizeof(by_code[0])
                         ? by_code[rep->check.code]
                         : CLI_EXIT_FAIL;
            print_upper(rl_wire_code_name(rep->check.code));
            printf(" limit=%llu remaining=%llu reset_ms=%llu retry_after_ms=%llu\n",
                   (unsigned long long)rep->check.limit, (unsigned long long)rep->check.remaining,
                   (unsigned long long)rep->check.reset_ms,
                   (unsigned long long)rep->check.retry_after_ms);
        }
        fflush(stdout);
    }
    rl_client_destroy(c);
    free(rep);
    return status;
}

static int
cmd_ping(const struct cli *o)
{
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    struct rl_client *c = NULL;
    uint64_t t0;
    int rc, status;

    if (rep == NULL) {
        fprintf(stderr, "rl-cli: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    status = connect_target(o, &c);
    if (status == CLI_EXIT_OK) {
        t0 = rl_clock_mono_ns();
        rc = rl_client_ping(c, rep, o->timeout_ms);
        if (rc != 0) {
            status = request_failed(o, "ping", rc);
        } else if (rep->op == RL_WIRE_OP_ERROR) {
            printf("ping -> ");
            print_error_reply(rep);
            status = CLI_EXIT_FAIL;
        } else {
            printf("ping -> %.*s rtt_us=%llu\n", (int)rep->name.len,
                   rep->name.ptr != NULL ? rep->name.ptr : "",
                   (unsigned long long)((rl_clock_mono_ns() - t0) / 1000));
        }
    }
    rl_client_destroy(c);
    free(rep);
    return status;
}

static int
cmd_stats(const struct cli *o)
{
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    struct rl_client *c = NULL;
    size_t i;
    int rc, status;

    if (rep == NULL) {
        fprintf(stderr, "rl-cli: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    status = connect_target(o, &c);
    if (status == CLI_EXIT_OK) {
        rc = rl_client_stats(c, rep, o->timeout_ms);
        if (rc != 0) {
            status = request_failed(o, "stats", rc);
        } else if (rep->op == RL_WIRE_OP_ERROR) {
            printf("stats -> ");
            print_error_reply(rep);
            status = CLI_EXIT_FAIL;
        } else {
            for (i = 0; i < rep->nstats; i++) {
                printf("%.*s %lld\n", (int)rep->stat_keys[i].len, rep->stat_keys[i].ptr,
                       (long long)rep->stat_vals[i]);
            }
        }
    }
    rl_client_destroy(c);
    free(rep);
    return status;
}

static int
cmd_clock(const struct cli *o, int argc, char **argv)
{
    struct rl_client *c = NULL;
    uint64_t now_ms;
    int rc, status;

    if (argc != 1 || parse_u64(argv[0], UINT64_MAX, &now_ms) != 0) {
        return usage_error("%s: expected NOW_MS, milliseconds since the epoch", "clock");
    }
    status = connect_target(o, &c);
    if (status == CLI_EXIT_OK) {
        rc = rl_client_clock(c, now_ms, o->timeout_ms);
        if (rc == -EOPNOTSUPP) {
            fprintf(stderr, "rl-cli: clock: %s does not take CLOCK (a node needs --test-clock)\n",
                    o->target);
            status = CLI_EXIT_FAIL;
        } else if (rc != 0) {
            status = request_failed(o, "clock", rc);
        } else {
            printf("clock -> now_ms=%llu\n", (unsigned long long)now_ms);
        }
    }
    rl_client_destroy(c);
    return status;
}

/* Prints n bytes for a table cell: control bytes as '?'. */
static void
print_cell(const struct rl_wire_str *v, const char *none, int width)
{
    int n = 0;

    if (v->ptr == NULL) {
        n = printf("%s", none);
    } else {
        for (uint32_t i = 0; i < v->len; i++, n++) {
            unsigned char ch = (unsigned char)v->ptr[i];

            putchar(ch < 0x20 || ch == 0x7f ? '?' : ch);
        }
    }
    printf("%*s", n < width ? width - n + 1 : 1, "");
}

static void
print_json_str(const struct rl_wire_str *v)
{
    if (v->ptr == NULL) {
        printf("null");
        return;
    }
    putchar('"');
    for (uint32_t i = 0; i < v->len; i++) {
        unsigned char ch = (unsigned char)v->ptr[i];

        if (ch == '"' || ch == '\\') {
            printf("\\%c", ch);
        } else if (ch < 0x20 || ch >= 0x7f) {
            printf("\\u%04x", ch);
        } else {
            putchar(ch);
        }
    }
    putchar('"');
}

/* ms since the epoch as UTC "2024-05-01T12:00:00.123Z". */
static void
format_ms(uint64_t ms, char *buf, size_t len)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;

    if (gmtime_r(&secs, &tm) == NULL) {
        snprintf(buf, len, "%llu", (unsigned long long)ms);
        return;
    }
    snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (unsigned)(ms % 1000));
}

static void
format_duration(uint64_t ms, char *buf, size_t len)
{
    if (ms < 10000) {
        snprintf(buf, len, "%llums", (unsigned long long)ms);
    } else if (ms < 600000) {
        snprintf(buf, len, "%.1fs", (double)ms / 1000);
    } else {
        snprintf(buf, len, "%llum%02llus", (unsigned long long)(ms / 60000),
                 (unsigned long long)(ms / 1000 % 60));
    }
}

static void
print_throttled(const struct rl_wire_reply *rep, bool json)
{
    uint64_t now = rl_clock_real_ms();
    char start[96], end[96], dur[48];

    if (json) {
        printf("{\"episodes\":[");
        for (size_t i = 0; i < rep->nepisodes; i++) {
            const struct rl_wire_episode *e = &rep->episodes[i];

            printf("%s{\"service\":", i > 0 ? "," : "");
            print_json_str(&e->service);
            printf(",\"endpoint\":");
            print_json_str(&e->endpoint);
            printf(",\"user\":");
            print_json_str(&e->user);
            printf(",\"start_ms\":%llu,\"end_ms\":%llu,\"refused\":%llu,\"ended\":\"%s\","
                   "\"node\":",
                   (unsigned long long)e->start_ms, (unsigned long long)e->end_ms,
                   (unsigned long long)e->refused, rl_wire_ended_name(e->ended));
            print_json_str(&e->node);
            putchar('}');
        }
        printf("],\"missing\":[");
        for (size_t i = 0; i < rep->nmissing; i++) {
            printf("%s", i > 0 ? "," : "");
            print_json_str(&rep->missing[i]);
        }
        printf("]}\n");
        return;
    }
    printf("%-16s %-16s %-20s %-24s %-24s %-10s %8s  %s\n", "SERVICE", "ENDPOINT", "USER", "START",
           "END", "DURATION", "REFUSED", "NODE");
    for (size_t i = 0; i < rep->nepisodes; i++) {
        const struct rl_wire_episode *e = &rep->episodes[i];
        bool open = e->ended == RL_WIRE_ENDED_OPEN;
        uint64_t until = open ? now : e->end_ms;

        format_ms(e->start_ms, start, sizeof(start));
        if (open) {
            snprintf(end, sizeof(end), "open");
        } else {
            format_ms(e->end_ms, end, sizeof(end));
            /* say how it ended: "...Z allowed" would not fit the column; the JSON has it */
        }
        if (until >= e->start_ms) {
            format_duration(until - e->start_ms, dur, sizeof(dur));
        } else {
            snprintf(dur, sizeof(dur), "-");
        }
        print_cell(&e->service, "-", 16);
        print_cell(&e->endpoint, "-", 16);
        print_cell(&e->user, "-", 20);
        printf("%-24s %-24s %-10s %8llu  ", start, end, dur, (unsigned long long)e->refused);
        print_cell(&e->node, "-", 0);
        printf("(%s)\n", rl_wire_ended_name(e->ended));
    }
    if (rep->nepisodes == 0) {
        printf("(no throttling episodes)\n");
    }
}

static int
cmd_throttled(const struct cli *o, int argc, char **argv)
{
    struct rl_wire_reply *rep;
    struct rl_client *c = NULL;
    int rc, status;

    (void)argv;
    if (argc != 0) {
        return usage_error("%s: takes no arguments (--service, --since, --top, --json)",
                           "throttled");
    }
    rep = malloc(sizeof(*rep));
    if (rep == NULL) {
        fprintf(stderr, "rl-cli: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    status = connect_target(o, &c);
    if (status == CLI_EXIT_OK) {
        rc = rl_client_throttled(c, o->service, o->since_set ? &o->since_ms : NULL, o->top, rep,
                                 o->timeout_ms);
        if (rc != 0) {
            status = request_failed(o, "throttled", rc);
        } else if (rep->op == RL_WIRE_OP_ERROR) {
            printf("throttled -> ");
            print_error_reply(rep);
            status = CLI_EXIT_FAIL;
        } else {
            print_throttled(rep, o->json);
            if (rep->nmissing > 0) {
                fprintf(stderr, "rl-cli: throttled: no answer from %zu node(s):", rep->nmissing);
                for (size_t i = 0; i < rep->nmissing; i++) {
                    fprintf(stderr, " %.*s", (int)rep->missing[i].len, rep->missing[i].ptr);
                }
                fprintf(stderr, "\n");
            }
        }
    }
    rl_client_destroy(c);
    free(rep);
    return status;
}

/* The members of the cluster in config: the [node] sections, or ZooKeeper's live ones
 * (with the assignment in force, into *a). Returns 0 or an exit status after a message. */
int
cli_members(const struct rl_conf *conf, struct rl_member **members, size_t *n,
             struct rl_assignment *a, bool *have_a, const char **from)
{
    static const struct rl_zkm_cbs no_cbs = {NULL, NULL, NULL, NULL, NULL};
    struct rl_zkm *z = NULL;
    uv_loop_t loop;
    char *text = NULL, err[256];
    size_t len = 0;
    int64_t version = -1;
    int rc;

    *have_a = false;
    if (conf->zookeeper[0] == '\0') {
        *members = calloc(conf->nnodes ? conf->nnodes : 1, sizeof(**members));
        if (*members == NULL) {
            fprintf(stderr, "rl-cli: out of memory\n");
            return CLI_EXIT_FAIL;
        }
        for (size_t i = 0; i < conf->nnodes; i++) {
            uint16_t port;
            const char *host = rl_conf_node_dial(&conf->nodes[i], &port);

            snprintf((*members)[i].name, sizeof((*members)[i].name), "%s", conf->nodes[i].name);
            rl_format_hostport((*members)[i].addr, sizeof((*members)[i].addr), host, port);
        }
        *n = conf->nnodes;
        *from = "static membership, the [node] sections";
        return CLI_EXIT_OK;
    }
    uv_loop_init(&loop);
    rc = rl_zkm_create(&z, &loop, conf->zookeeper, conf->session_timeout_ms, conf->cluster_name,
                       &no_cbs, NULL);
    if (rc == 0) {
        rl_zkm_secure(z, conf->secret, conf->secret_len);
        rc = rl_zkm_read_members(z, members, n, 5000);
    }
    if (rc == 0) {
        rc = rl_zkm_get_assignment(z, &text, &len, &version, 5000);
    }
    rl_zkm_destroy(z);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    if (rc != 0) {
        fprintf(stderr, "rl-cli: cannot read the membership from ZooKeeper %s: %s\n",
                conf->zookeeper, strerror(-rc));
        free(text);
        return CLI_EXIT_FAIL;
    }
    if (len > 0 && rl_assignment_parse(a, text, len, err, sizeof(err)) == 0) {
        *have_a = true;
    } else if (len > 0) {
        fprintf(stderr, "rl-cli: warning: the assignment in ZooKeeper does not parse (%s); "
                        "routers ignore it, and so does this answer\n", err);
    }
    free(text);
    *from = *have_a ? "live members and assignment in ZooKeeper" : "live members in ZooKeeper";
    return CLI_EXIT_OK;
}

static int
cmd_hash(const struct cli *o, int argc, char **argv)
{
    struct rl_conf *conf = NULL;
    struct rl_member *members = NULL;
    struct rl_shardmap *map = NULL;
    struct rl_assignment a;
    bool have_a = false;
    const char *from = "";
    uint32_t shards = o->shards, shard, owner;
    char err[512];
    size_t n = 0;
    uint64_t h;
    int status;

    if (argc != 2) {
        return usage_error("%s: expected SERVICE USER", "hash");
    }
    if (o->config != NULL) {
        if (rl_conf_load(o->config, &conf, err, sizeof(err)) != 0) {
            fprintf(stderr, "%s\n", err);
            return CLI_EXIT_USAGE;
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
    if (rl_assignment_init(&a, shards) != 0) {
        rl_conf_destroy(conf);
        return CLI_EXIT_FAIL;
    }
    status = cli_members(conf, &members, &n, &a, &have_a, &from);
    if (status == CLI_EXIT_OK &&
        rl_shardmap_create(&map, shards, members, n, have_a ? &a : NULL) != 0) {
        fprintf(stderr, "rl-cli: cannot build the shard table\n");
        status = CLI_EXIT_FAIL;
    }
    if (status == CLI_EXIT_OK) {
        owner = rl_shardmap_owner(map, shard);
        if (owner == RL_SHARDMAP_NONE) {
            printf("owner: none (no live node; %s)\n", from);
        } else {
            printf("owner: %s %s (%s)\n", map->members[owner].name, map->members[owner].addr,
                   from);
        }
    }
    rl_shardmap_destroy(map);
    free(members);
    rl_assignment_deinit(&a);
    rl_conf_destroy(conf);
    return status;
}

enum {
    OPT_TARGET = 256,
    OPT_TIMEOUT,
    OPT_COST,
    OPT_REPEAT,
    OPT_INTERVAL,
    OPT_SHARDS,
    OPT_CONFIG,
    OPT_TOKEN_FILE,
    OPT_SERVICE,
    OPT_SINCE,
    OPT_TOP,
    OPT_JSON,
    OPT_HELP,
    OPT_VERSION,
};

static const struct option long_opts[] = {
    {"target", required_argument, NULL, OPT_TARGET},
    {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
    {"cost", required_argument, NULL, OPT_COST},
    {"repeat", required_argument, NULL, OPT_REPEAT},
    {"interval-ms", required_argument, NULL, OPT_INTERVAL},
    {"shards", required_argument, NULL, OPT_SHARDS},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"service", required_argument, NULL, OPT_SERVICE},
    {"since", required_argument, NULL, OPT_SINCE},
    {"top", required_argument, NULL, OPT_TOP},
    {"json", no_argument, NULL, OPT_JSON},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

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
    char err[512];

    *conf = NULL;
    if (o->config == NULL) {
        if (!zk) {
            return CLI_EXIT_OK;
        }
        fprintf(stderr, "rl-cli: rules %s: needs --config FILE (the cluster's ZooKeeper)\n", sub);
        return CLI_EXIT_USAGE;
    }
    if (rl_conf_load(o->config, conf, err, sizeof(err)) != 0) {
        fprintf(stderr, "rl-cli: %s\n", err);
        return CLI_EXIT_USAGE;
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
static int
cmd_rules(const struct cli *o, int nargs, char **args)
{
    static const struct rl_zkm_cbs no_cbs = {NULL, NULL, NULL, NULL, NULL};
    const char *sub = nargs > 0 ? args[0] : "";
    struct rl_conf *conf = NULL, *fresh = NULL;
    struct rl_zkm *z = NULL;
    char *text = NULL, err[512], warn[512];
    size_t len = 0;
    int64_t version = -1;
    uv_loop_t loop;
    int rc, status;
    bool push = strcmp(sub, "push") == 0, check = strcmp(sub, "check") == 0;

    if (!push && !check && strcmp(sub, "show") != 0) {
        return usage_error("rules: expected check FILE, push FILE or show, not \"%s\"", sub);
    }
    if ((push || check) != (nargs == 2) || nargs > 2) {
        return usage_error("rules %s: wrong number of arguments", sub);
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
    uv_loop_init(&loop);
    rc = rl_zkm_create(&z, &loop, conf->zookeeper, conf->session_timeout_ms, conf->cluster_name,
                       &no_cbs, NULL);
    if (rc == 0) {
        rl_zkm_secure(z, conf->secret, conf->secret_len);
        if (push) {
            rc = rl_zkm_set_rules(z, text, len, &version, o->timeout_ms > 5000 ? o->timeout_ms
                                                                                : 5000);
        } else {
            free(text);
            text = NULL;
            rc = rl_zkm_get_rules(z, &text, &len, &version,
                                  o->timeout_ms > 5000 ? o->timeout_ms : 5000);
        }
    }
    rl_zkm_destroy(z);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
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

/* gen-token FILE, hash-token [FILE]: tokens for [client NAME] sections. */
static int
cmd_token(const struct cli *o, const char *cmd, int nargs, char **args)
{
    uint8_t raw[32], h[RL_AUTH_HASH_LEN];
    char token[RL_AUTH_TOKEN_MAX], hex[2 * RL_AUTH_HASH_LEN + 1], why[320];
    size_t len;
    int rc;

    if (strcmp(cmd, "gen-token") == 0) {
        FILE *f;
        int fd;

        if (nargs != 1) {
            return usage_error("%s: expected FILE", cmd);
        }
        if (getentropy(raw, sizeof(raw)) != 0) {
            fprintf(stderr, "rl-cli: no randomness: %s\n", strerror(errno));
            return CLI_EXIT_FAIL;
        }
        rl_auth_format_hash(raw, token); /* 64 hex digits: 256 random bits */
        len = 2 * sizeof(raw);
        fd = open(args[0], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (f == NULL || fprintf(f, "%.*s\n", (int)len, token) < 0 || fclose(f) != 0) {
            fprintf(stderr, "rl-cli: cannot write %s: %s\n", args[0], strerror(errno));
            if (f == NULL && fd >= 0) {
                close(fd);
            }
            rl_auth_wipe(token, sizeof(token));
            return CLI_EXIT_FAIL;
        }
    } else {
        const char *path = nargs == 1 ? args[0] : o->token_file;

        if (nargs > 1 || path == NULL) {
            return usage_error("%s: expected FILE (or --token-file FILE)", cmd);
        }
        rc = rl_auth_read_secret(path, 1, token, sizeof(token), &len, why, sizeof(why));
        if (rc != 0) {
            fprintf(stderr, "rl-cli: %s\n", why);
            return CLI_EXIT_USAGE;
        }
    }
    rl_auth_sha256(token, len, h);
    rl_auth_format_hash(h, hex);
    printf("token_sha256 = %s\n", hex);
    rl_auth_wipe(token, sizeof(token));
    rl_auth_wipe(raw, sizeof(raw));
    return CLI_EXIT_OK;
}

int
main(int argc, char **argv)
{
    struct cli o;
    const char *cmd;
    uint64_t v;
    int ch, nargs;
    char **args;

    memset(&o, 0, sizeof(o));
    o.target = CLI_DEFAULT_TARGET;
    o.timeout_ms = 2000;
    o.cost = 1;
    o.repeat = 1;
    o.shards = CLI_DEFAULT_SHARDS;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
        switch (ch) {
        case OPT_TARGET:
            o.target = optarg;
            break;
        case OPT_TIMEOUT:
            if (parse_u64(optarg, 3600000, &v) != 0 || v == 0) {
                return usage_error("--timeout-ms: expected 1..3600000, not %s", optarg);
            }
            o.timeout_ms = (int)v;
            break;
        case OPT_COST:
            if (parse_u64(optarg, UINT32_MAX, &v) != 0) {
                return usage_error("--cost: expected 0..4294967295, not %s", optarg);
            }
            o.cost = (uint32_t)v;
            o.cost_set = true;
            break;
        case OPT_REPEAT:
            if (parse_u64(optarg, UINT64_MAX, &v) != 0 || v == 0) {
                return usage_error("--repeat: expected a positive count, not %s", optarg);
            }
            o.repeat = v;
            o.repeat_set = true;
            break;
        case OPT_INTERVAL:
            if (parse_u64(optarg, 86400000, &v) != 0) {
                return usage_error("--interval-ms: expected 0..86400000, not %s", optarg);
            }
            o.interval_ms = v;
            o.interval_set = true;
            break;
        case OPT_SHARDS:
            if (parse_u64(optarg, CLI_SHARDS_MAX, &v) != 0 || v == 0) {
                return usage_error("--shards: expected 1..1048576, not %s", optarg);
            }
            o.shards = (uint32_t)v;
            o.shards_set = true;
            break;
        case OPT_CONFIG:
            o.config = optarg;
            break;
        case OPT_TOKEN_FILE:
            o.token_file = optarg;
            break;
        case OPT_SERVICE:
            if (optarg[0] == '\0' || strlen(optarg) > RL_WIRE_SERVICE_MAX) {
                return usage_error("--service: expected 1..128 bytes, not \"%s\"", optarg);
            }
            o.service = optarg;
            break;
        case OPT_SINCE:
            if (rl_parse_duration_ms(optarg, &v) != NULL) {
                return usage_error("--since: expected a duration (10s, 10m, 2h), not %s", optarg);
            }
            o.since_ms = v;
            o.since_set = true;
            break;
        case OPT_TOP:
            if (parse_u64(optarg, RL_WIRE_TOP_MAX, &v) != 0 || v == 0) {
                return usage_error("--top: expected 1..100, not %s", optarg);
            }
            o.top = (uint32_t)v;
            break;
        case OPT_JSON:
            o.json = true;
            break;
        case OPT_HELP:
            usage(stdout);
            return CLI_EXIT_OK;
        case OPT_VERSION:
            printf("rl-cli %s\n", RL_VERSION);
            return CLI_EXIT_OK;
        default:
            return usage_error("unknown or incomplete option %s", argv[optind - 1]);
        }
    }
    if (optind >= argc) {
        return usage_error("%s", "expected a command: check, ping, stats, status, clock, "
                                 "throttled, hash, gen-token, hash-token or rules");
    }
    cmd = argv[optind];
    args = argv + optind + 1;
    nargs = argc - optind - 1;
    if (strcmp(cmd, "check") != 0 && (o.cost_set || o.repeat_set)) {
        return usage_error("%s: --cost and --repeat go with check", cmd);
    }
    if (strcmp(cmd, "check") != 0 && strcmp(cmd, "status") != 0 && o.interval_set) {
        return usage_error("%s: --interval-ms goes with check and status", cmd);
    }
    if (strcmp(cmd, "hash") != 0 && o.shards_set) {
        return usage_error("%s: --shards goes with hash", cmd);
    }
    if (strcmp(cmd, "hash") != 0 && strcmp(cmd, "status") != 0 && strcmp(cmd, "rules") != 0 &&
        o.config != NULL) {
        return usage_error("%s: --config goes with hash, status and rules", cmd);
    }
    if (strcmp(cmd, "status") != 0 && strcmp(cmd, "throttled") != 0 && o.json) {
        return usage_error("%s: --json goes with status and throttled", cmd);
    }
    if (strcmp(cmd, "throttled") != 0 && (o.service != NULL || o.since_set || o.top != 0)) {
        return usage_error("%s: --service, --since and --top go with throttled", cmd);
    }
    if (o.shards_set && o.config != NULL) {
        return usage_error("%s: --shards or --config, not both (the config has the count)",
                           cmd);
    }
    if (strcmp(cmd, "check") == 0) {
        return cmd_check(&o, nargs, args);
    }
    if (strcmp(cmd, "ping") == 0 || strcmp(cmd, "stats") == 0) {
        if (nargs != 0) {
            return usage_error("%s: takes no arguments", cmd);
        }
        return cmd[0] == 'p' ? cmd_ping(&o) : cmd_stats(&o);
    }
    if (strcmp(cmd, "clock") == 0) {
        return cmd_clock(&o, nargs, args);
    }
    if (strcmp(cmd, "status") == 0) {
        if (nargs != 0) {
            return usage_error("%s: takes no arguments", cmd);
        }
        return cli_status(&o, o.json);
    }
    if (strcmp(cmd, "throttled") == 0) {
        return cmd_throttled(&o, nargs, args);
    }
    if (strcmp(cmd, "hash") == 0) {
        return cmd_hash(&o, nargs, args);
    }
    if (strcmp(cmd, "gen-token") == 0 || strcmp(cmd, "hash-token") == 0) {
        return cmd_token(&o, cmd, nargs, args);
    }
    if (strcmp(cmd, "rules") == 0) {
        return cmd_rules(&o, nargs, args);
    }
    return usage_error("unknown command %s", cmd);
}
