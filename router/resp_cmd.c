/*
 * resp_cmd: the RESP front's command table (docs/RESP.md) and the dispatch through it, as
 * Redis's processCommand: one row per command holds its name, its arity (arguments, the
 * name included: at least min, at most max, in groups of step past min), its flags and its
 * handler; resp_command finds the row, refuses a client that has not passed AUTH (unless
 * the row says no_auth), checks the arity from the row and runs the handler. COMMAND's reply
 * is written from the same rows. Here also the connection's own commands (AUTH, HELLO,
 * PING, ECHO, CLIENT, SELECT, QUIT, COMMAND, INFO) with the errors worded as Redis words
 * them. The commands that go to the nodes are resp_check.c's; the connection is resp.c's.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "front.h"
#include "resp.h"
#include "resp_int.h"
#include "router_int.h"

/* "ERR wrong number of arguments for 'name' command". */
static int
err_arity(struct rl_buf *b, const struct rl_resp_arg *name)
{
    char lower[64];
    size_t n = name->len < sizeof(lower) - 1 ? name->len : sizeof(lower) - 1;

    for (size_t i = 0; i < n; i++) {
        char ch = name->ptr[i];

        lower[i] = (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch;
    }
    lower[n] = '\0';
    return rl_resp_put_error(b, "ERR wrong number of arguments for '%s' command", lower);
}

static int
put_hello(struct resp_conn *c, struct rl_buf *b)
{
    int p = c->proto;

    if (rl_resp_put_map(b, 7, p) != 0 || rl_resp_put_str(b, "server") != 0 ||
        rl_resp_put_str(b, "ratelimiter") != 0 || rl_resp_put_str(b, "version") != 0 ||
        rl_resp_put_str(b, RESP_COMPAT_VERSION) != 0 || put_kv(b, "proto", p) != 0 ||
        put_kv(b, "id", (int64_t)c->id) != 0 || rl_resp_put_str(b, "mode") != 0 ||
        rl_resp_put_str(b, "standalone") != 0 || rl_resp_put_str(b, "role") != 0 ||
        rl_resp_put_str(b, "master") != 0 || rl_resp_put_str(b, "modules") != 0 ||
        rl_resp_put_array(b, 0) != 0) {
        return -ENOMEM;
    }
    return 0;
}

/* AUTH's token: the client it names, or a refusal written to b (1). */
static int
auth_token(struct resp_conn *c, const struct rl_resp_arg *tok, struct rl_buf *b)
{
    const struct rl_conf *conf = c->r->conf;
    const struct rl_client_conf *cl;
    uint64_t wait;

    if (conf->nauth_clients == 0) {
        rl_resp_put_error(b, "ERR AUTH <password> called without any password configured for "
                             "the default user. Are you sure your configuration is correct?");
        return 1;
    }
    /* failed AUTHs are counted per address with the binary protocol's and gRPC's */
    wait = rl_listener_auth_wait_ms(&c->r->listener, rl_front_peer_addr(c->fc));
    if (wait > 0) {
        char msg[160];

        c->r->stats.auth_failures++;
        c->quit = true;
        snprintf(msg, sizeof(msg),
                 "ERR too many failed AUTHs from this address (more than %u a second): try "
                 "again in %llu ms",
                 RL_CONN_AUTHFAIL_RATE, (unsigned long long)wait);
        rl_resp_put_error(b, msg);
        return 1;
    }
    cl = tok->len > 0 && tok->len <= 256 ? rl_conf_client_by_token(conf, tok->ptr, tok->len) : NULL;
    if (cl == NULL) {
        rl_listener_auth_failed(&c->r->listener, rl_front_peer_addr(c->fc));
        c->r->stats.auth_failures++;
        if (++c->auth_fails >= RESP_AUTH_TRIES) {
            c->quit = true;
        }
        rl_resp_put_error(b, "WRONGPASS invalid username-password pair or user is disabled.");
        return 1;
    }
    c->authed = true;
    c->principal = cl;
    rl_front_authenticated(c->fc);
    return 0;
}

/* CLIENT SETNAME's and HELLO's SETNAME: a name of printable ASCII without spaces (Redis's
 * rule), RESP_NAME_MAX bytes at most, set on c; or an error reply written to b (1). */
static int
set_name(struct resp_conn *c, const struct rl_resp_arg *nm, struct rl_buf *b)
{
    for (size_t i = 0; i < nm->len; i++) {
        if (nm->ptr[i] < '!' || nm->ptr[i] > '~') {
            rl_resp_put_error(b, "ERR Client names cannot contain spaces, newlines or special "
                                 "characters.");
            return 1;
        }
    }
    if (nm->len > RESP_NAME_MAX) {
        rl_resp_put_error(b, "ERR client name too long (%u bytes at most)", RESP_NAME_MAX);
        return 1;
    }
    memcpy(c->name, nm->ptr, nm->len);
    c->name_len = nm->len;
    return 0;
}

static int
cmd_hello(struct resp_conn *c, ARGS)
{
    int64_t proto = c->proto;
    size_t i = 1;

    if (cmd->argc >= 2) {
        if (rl_resp_int64(&cmd->argv[1], &proto) != 0) {
            return rl_resp_put_error(b, "ERR Protocol version is not an integer or out of range");
        }
        if (proto != 2 && proto != 3) {
            return rl_resp_put_error(b, "NOPROTO unsupported protocol version");
        }
        i = 2;
    }
    for (; i < cmd->argc; i++) {
        if (rl_resp_is(&cmd->argv[i], "AUTH") && i + 2 < cmd->argc) {
            if (auth_token(c, &cmd->argv[i + 2], b) != 0) {
                return 0;
            }
            i += 2;
        } else if (rl_resp_is(&cmd->argv[i], "SETNAME") && i + 1 < cmd->argc) {
            if (set_name(c, &cmd->argv[++i], b) != 0) {
                return 0;
            }
        } else {
            return rl_resp_put_error(b, "ERR Syntax error in HELLO option '%.*s'",
                                     (int)(cmd->argv[i].len > 64 ? 64 : cmd->argv[i].len),
                                     cmd->argv[i].ptr);
        }
    }
    if (!c->authed) {
        return rl_resp_put_error(b, "NOAUTH HELLO must be called with the client already "
                                    "authenticated, otherwise the HELLO <proto> AUTH <user> "
                                    "<pass> option can be used to authenticate the client and "
                                    "select the RESP protocol version at the same time");
    }
    c->proto = (int)proto;
    return put_hello(c, b);
}

/* CLIENT's subcommands this front answers, with their arity as Redis counts it (CLIENT and
 * the subcommand included): a known one with another count gets Redis's arity error. */
static const struct {
    const char *name, *lower;
    uint16_t argc;
} client_subs[] = {{"SETNAME", "setname", 3}, {"GETNAME", "getname", 2}, {"ID", "id", 2},
                   {"SETINFO", "setinfo", 4}};

static int
cmd_client(struct resp_conn *c, ARGS)
{
    for (size_t i = 0; i < sizeof(client_subs) / sizeof(client_subs[0]); i++) {
        if (rl_resp_is(&cmd->argv[1], client_subs[i].name) && cmd->argc != client_subs[i].argc) {
            return rl_resp_put_error(b, "ERR wrong number of arguments for 'client|%s' command",
                                     client_subs[i].lower);
        }
    }
    if (rl_resp_is(&cmd->argv[1], "SETNAME") && cmd->argc == 3) {
        return set_name(c, &cmd->argv[2], b) != 0 ? 0 : rl_resp_put_simple(b, "OK");
    }
    if (rl_resp_is(&cmd->argv[1], "GETNAME") && cmd->argc == 2) {
        return c->name_len > 0 ? rl_resp_put_bulk(b, c->name, c->name_len)
                               : rl_resp_put_null(b, c->proto);
    }
    if (rl_resp_is(&cmd->argv[1], "ID") && cmd->argc == 2) {
        return rl_resp_put_int(b, (int64_t)c->id);
    }
    if (rl_resp_is(&cmd->argv[1], "SETINFO") && cmd->argc == 4) {
        return rl_resp_put_simple(b, "OK"); /* libraries announce themselves: noted, unused */
    }
    return rl_resp_put_error(b, "ERR unknown subcommand '%.*s'. Try CLIENT HELP.",
                             (int)(cmd->argv[1].len > 64 ? 64 : cmd->argv[1].len),
                             cmd->argv[1].ptr);
}

/* The flags of a row. COMMAND shows the first four under their names; no_auth is the
 * router's (the commands a client may send before AUTH), not shown. */
enum {
    RESP_F_WRITE = 1u << 0,
    RESP_F_NOSCRIPT = 1u << 1,
    RESP_F_FAST = 1u << 2,
    RESP_F_LOADING = 1u << 3,
    RESP_F_SHOWN = 4, /* the flags above, by bit */
    RESP_F_NOAUTH = 1u << 4,
};

static const char *const resp_flag_names[RESP_F_SHOWN] = {"write", "noscript", "fast", "loading"};

/* One command: how it is called, what runs it, what COMMAND says of it. */
struct resp_cmd_row {
    const char *name;            /* lower case, as COMMAND lists it */
    uint16_t min;                /* arguments, the name included */
    uint16_t max;                /* 0: no bound */
    uint16_t step;               /* past min, arguments come in groups of step (0: any number) */
    uint16_t flags;              /* RESP_F_* */
    int8_t first, last, keystep; /* COMMAND's key positions */
    /* the reply to a wrong number of arguments; NULL: Redis's "wrong number of arguments" */
    const char *usage;
    int (*run)(struct resp_conn *c, ARGS);
};

/* COMMAND's arity: exact (min == max), or negative: at least. */
static int
row_arity(const struct resp_cmd_row *row)
{
    return row->max == row->min ? row->min : -(int)row->min;
}

static bool
row_arity_ok(const struct resp_cmd_row *row, size_t argc)
{
    return argc >= row->min && (row->max == 0 || argc <= row->max) &&
           (row->step == 0 || (argc - row->min) % row->step == 0);
}

static int
put_cmd_info(struct rl_buf *b, const struct resp_cmd_row *row, int proto)
{
    size_t nflags = 0;

    for (size_t f = 0; f < RESP_F_SHOWN; f++) {
        nflags += (row->flags >> f) & 1u;
    }
    if (rl_resp_put_array(b, 10) != 0 || rl_resp_put_str(b, row->name) != 0 ||
        rl_resp_put_int(b, row_arity(row)) != 0 || rl_resp_put_set(b, nflags, proto) != 0) {
        return -ENOMEM;
    }
    for (size_t f = 0; f < RESP_F_SHOWN; f++) {
        if (((row->flags >> f) & 1u) != 0 && rl_resp_put_simple(b, resp_flag_names[f]) != 0) {
            return -ENOMEM;
        }
    }
    if (rl_resp_put_int(b, row->first) != 0 || rl_resp_put_int(b, row->last) != 0 ||
        rl_resp_put_int(b, row->keystep) != 0 || rl_resp_put_set(b, 0, proto) != 0 ||
        rl_resp_put_set(b, 0, proto) != 0 || rl_resp_put_array(b, 0) != 0 ||
        rl_resp_put_array(b, 0) != 0) {
        return -ENOMEM;
    }
    return 0;
}

static const struct resp_cmd_row *cmd_rows(size_t *n);
static const struct resp_cmd_row *cmd_find(const struct rl_resp_arg *name);

static int
cmd_command(struct resp_conn *c, ARGS)
{
    size_t nrows;
    const struct resp_cmd_row *rows = cmd_rows(&nrows);

    if (cmd->argc == 1) {
        int rc = rl_resp_put_array(b, nrows);

        for (size_t i = 0; rc == 0 && i < nrows; i++) {
            rc = put_cmd_info(b, &rows[i], c->proto);
        }
        return rc;
    }
    if (rl_resp_is(&cmd->argv[1], "COUNT")) {
        return rl_resp_put_int(b, (int64_t)nrows);
    }
    if (rl_resp_is(&cmd->argv[1], "DOCS")) {
        /* No documentation is served: clients fall back to their own help. */
        return rl_resp_put_map(b, 0, c->proto);
    }
    if (rl_resp_is(&cmd->argv[1], "LIST")) {
        int rc = rl_resp_put_array(b, nrows);

        for (size_t i = 0; rc == 0 && i < nrows; i++) {
            rc = rl_resp_put_str(b, rows[i].name);
        }
        return rc;
    }
    if (rl_resp_is(&cmd->argv[1], "INFO")) {
        int rc = rl_resp_put_array(b, cmd->argc - 2);

        for (size_t k = 2; rc == 0 && k < cmd->argc; k++) {
            const struct resp_cmd_row *row = cmd_find(&cmd->argv[k]);

            rc = row != NULL ? put_cmd_info(b, row, c->proto) : rl_resp_put_null(b, c->proto);
        }
        return rc;
    }
    return rl_resp_put_error(b, "ERR unknown subcommand '%.*s'. Try COMMAND HELP.",
                             (int)(cmd->argv[1].len > 64 ? 64 : cmd->argv[1].len),
                             cmd->argv[1].ptr);
}

static int
cmd_info(struct resp_conn *c, ARGS)
{
    struct rl_router *r = c->r;
    struct rl_resp *g = c->g;
    struct rl_router_stats st;
    uint64_t pending = 0;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    int rc;

    if (f == NULL) {
        return -ENOMEM;
    }
    rl_rmetrics_totals(r, &st, &pending);
    fprintf(f,
            "# Server\r\nredis_version:%s\r\nredis_mode:standalone\r\nratelimiter_version:%s\r\n"
            "process_id:%ld\r\ntcp_port:%u\r\nloading:0\r\n\r\n",
            RESP_COMPAT_VERSION, RL_VERSION, (long)getpid(), (unsigned)r->conf->resp_port);
    fprintf(f, "# Clients\r\nconnected_clients:%u\r\n\r\n",
            rl_wgroup_front_conns(r->group, RL_FRONT_RESP, g->nconns));
    fprintf(f,
            "# Stats (this worker)\r\ntotal_commands_processed:%" PRIu64
            "\r\ncl_throttle_commands:%" PRIu64 "\r\nrl_check_keys:%" PRIu64
            "\r\nerror_replies:%" PRIu64 "\r\nprotocol_errors:%" PRIu64 "\r\n\r\n",
            g->counts[RESP_N_COMMANDS], g->counts[RESP_N_THROTTLES], g->counts[RESP_N_CHECKS],
            g->counts[RESP_N_ERRORS], g->counts[RESP_N_PROTOCOL]);
    fprintf(f, "# Router\r\nworkers:%u\r\npending:%" PRIu64 "\r\n",
            r->group->n, pending);
#define RESP_INFO_FIELD(f_, s_) fprintf(f, "%s:%" PRIu64 "\r\n", s_, st.f_);
    RL_ROUTER_STATS_MAP(RESP_INFO_FIELD)
#undef RESP_INFO_FIELD
    if (fclose(f) != 0) {
        free(text);
        return -ENOMEM;
    }
    if (c->proto >= 3) {
        /* a RESP3 verbatim string, as Redis answers INFO */
        char head[40];
        int hn = snprintf(head, sizeof(head), "=%zu\r\ntxt:", len + 4);

        rc = rl_buf_append(b, head, (size_t)hn) != 0 || rl_buf_append(b, text, len) != 0 ||
                     rl_buf_append(b, "\r\n", 2) != 0
                 ? -ENOMEM
                 : 0;
    } else {
        rc = rl_resp_put_bulk(b, text, len);
    }
    free(text);
    return rc;
}

/* The unknown-command error, worded as Redis words it. */
static int
err_unknown(const struct rl_resp_cmd *cmd, struct rl_buf *b)
{
    char args[512];
    size_t n = 0;

    args[0] = '\0';
    for (size_t i = 1; i < cmd->argc && n < sizeof(args) - 140; i++) {
        int w = snprintf(args + n, sizeof(args) - n, "'%.*s' ",
                         (int)(cmd->argv[i].len > 128 ? 128 : cmd->argv[i].len), cmd->argv[i].ptr);

        if (w < 0) {
            break;
        }
        n += (size_t)w;
    }
    return rl_resp_put_error(b, "ERR unknown command '%.*s', with args beginning with: %s",
                             (int)(cmd->argv[0].len > 128 ? 128 : cmd->argv[0].len),
                             cmd->argv[0].ptr, args);
}

static int
cmd_auth(struct resp_conn *c, ARGS)
{
    return auth_token(c, &cmd->argv[cmd->argc - 1], b) == 0 ? rl_resp_put_simple(b, "OK") : 0;
}

static int
cmd_quit(struct resp_conn *c, ARGS)
{
    (void)cmd;
    c->quit = true;
    return rl_resp_put_simple(b, "OK");
}

static int
cmd_ping(struct resp_conn *c, ARGS)
{
    (void)c;
    return cmd->argc == 1 ? rl_resp_put_simple(b, "PONG")
                          : rl_resp_put_bulk(b, cmd->argv[1].ptr, cmd->argv[1].len);
}

static int
cmd_echo(struct resp_conn *c, ARGS)
{
    (void)c;
    return rl_resp_put_bulk(b, cmd->argv[1].ptr, cmd->argv[1].len);
}

static int
cmd_select(struct resp_conn *c, ARGS)
{
    int64_t db;

    (void)c;
    if (rl_resp_int64(&cmd->argv[1], &db) != 0) {
        return rl_resp_put_error(b, "ERR value is not an integer or out of range");
    }
    return db != 0 ? rl_resp_put_error(b, "ERR DB index is out of range")
                   : rl_resp_put_simple(b, "OK");
}

/* The commands served: the dispatch and COMMAND read this table only. */
static const struct resp_cmd_row resp_cmds[] = {
    {"cl.throttle", 5, 6, 0, RESP_F_WRITE, 1, 1, 1,
     "Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> "
     "<period> [<quantity>]",
     resp_throttle},
    {"rl.check", 3, 6, 0, RESP_F_WRITE, 0, 0, 0, NULL, resp_check},
    {"rl.mcheck", 5, 0, 4, RESP_F_WRITE, 0, 0, 0, NULL, resp_mcheck},
    {"rl.adjust", 4, 5, 0, RESP_F_WRITE, 0, 0, 0, NULL, resp_adjust},
    {"rl.release", 3, 5, 0, RESP_F_WRITE, 0, 0, 0, NULL, resp_release},
    {"auth", 2, 3, 0, RESP_F_NOSCRIPT | RESP_F_NOAUTH, 0, 0, 0, NULL, cmd_auth},
    {"hello", 1, 0, 0, RESP_F_NOSCRIPT | RESP_F_NOAUTH, 0, 0, 0, NULL, cmd_hello},
    {"ping", 1, 2, 0, RESP_F_FAST, 0, 0, 0, NULL, cmd_ping},
    {"echo", 2, 2, 0, RESP_F_FAST, 0, 0, 0, NULL, cmd_echo},
    {"client", 2, 0, 0, RESP_F_NOSCRIPT, 0, 0, 0, NULL, cmd_client},
    {"select", 2, 2, 0, RESP_F_FAST, 0, 0, 0, NULL, cmd_select},
    {"quit", 1, 0, 0, RESP_F_FAST | RESP_F_NOAUTH, 0, 0, 0, NULL, cmd_quit},
    {"command", 1, 0, 0, RESP_F_LOADING, 0, 0, 0, NULL, cmd_command},
    {"info", 1, 0, 0, RESP_F_LOADING, 0, 0, 0, NULL, cmd_info},
};

static const struct resp_cmd_row *
cmd_rows(size_t *n)
{
    *n = sizeof(resp_cmds) / sizeof(resp_cmds[0]);
    return resp_cmds;
}

/* The row of the command called name (any case), or NULL. */
static const struct resp_cmd_row *
cmd_find(const struct rl_resp_arg *name)
{
    for (size_t i = 0; i < sizeof(resp_cmds) / sizeof(resp_cmds[0]); i++) {
        if (rl_resp_is(name, resp_cmds[i].name)) {
            return &resp_cmds[i];
        }
    }
    return NULL;
}

/* Runs one command through its row. A reply written now goes to b (the loop's scratch
 * buffer), then to c->out, or to a slot of its own when replies wait before it;
 * CL.THROTTLE and RL.CHECK take a slot for the reply to come instead. -ENOMEM: close. */
int
resp_command(struct resp_conn *c, const struct rl_resp_cmd *cmd)
{
    const struct resp_cmd_row *row = cmd_find(&cmd->argv[0]);
    struct rl_buf *b = &c->g->tmp, *dst;
    int rc;

    c->g->counts[RESP_N_COMMANDS]++;
    if (c->authed) {
        rl_front_authenticated(c->fc); /* no [client] sections: a first command (front.h) */
    }
    rl_buf_reset(b);
    if (!c->authed && (row == NULL || (row->flags & RESP_F_NOAUTH) == 0)) {
        rc = rl_resp_put_error(b, "NOAUTH Authentication required.");
    } else if (row == NULL) {
        rc = err_unknown(cmd, b);
    } else if (!row_arity_ok(row, cmd->argc)) {
        rc = row->usage != NULL ? rl_resp_put_error(b, "%s", row->usage)
                                : err_arity(b, &cmd->argv[0]);
    } else {
        rc = row->run(c, cmd, b);
    }
    if (rc != 0 || c->closing || b->len == 0) {
        return rc;
    }
    if (b->data[0] == '-') {
        c->g->counts[RESP_N_ERRORS]++;
    }
    dst = resp_reply_to(c);
    return dst == NULL || rl_buf_append(dst, b->data, b->len) != 0 ? -ENOMEM : 0;
}
