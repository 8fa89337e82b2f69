/*
 * cli: the helpers every rl-cli command uses: errors in words, the usage error, loading
 * --config, connecting to --target (with AUTH), and the one request path of the commands
 * that send a protocol op (cli_exchange), so ping, stats, clock, check and throttled differ
 * only in what they put in the request and how they print the reply. No command lives here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "tls.h"

#include "cli.h"

const char *
cli_cmd_name(const struct cli_cmd *cmd)
{
    return cmd->name != NULL ? cmd->name : rl_wire_op_name(cmd->op);
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

int
cli_usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "rl-cli: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\ntry rl-cli --help\n");
    return CLI_EXIT_USAGE;
}

int
cli_out_of_memory(void)
{
    fprintf(stderr, "rl-cli: out of memory\n");
    return CLI_EXIT_FAIL;
}

void
cli_sleep_ms(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int
cli_load_config(const struct cli *o, struct rl_conf **conf)
{
    char err[512];

    if (rl_conf_load(o->config, conf, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err); /* FILE:LINE: what is wrong */
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

int
cli_connect(const struct cli *o, struct rl_client **c, char *why, size_t whylen)
{
    int rc = rl_client_connect_addr(c, o->target, o->timeout_ms);

    if (rc != 0) {
        snprintf(why, whylen, "cannot connect: %s", cli_errno_text(rc));
        *c = NULL;
        return CLI_EXIT_FAIL;
    }
    if (o->tls != NULL) {
        char tw[256];

        rc = rl_client_start_tls(*c, o->tls, o->timeout_ms, tw, sizeof(tw));
        if (rc != 0) {
            snprintf(why, whylen, "TLS with %s failed: %s", o->target, tw);
            rl_client_destroy(*c);
            *c = NULL;
            return CLI_EXIT_FAIL;
        }
    }
    rc = rl_client_auth_file(*c, o->token_file, o->timeout_ms, why, whylen);
    if (rc != 0) {
        rl_client_destroy(*c);
        *c = NULL;
        return rc == -EACCES || rc == -EINVAL || rc == -ENOENT ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}

/* Sends x's request once and reads its reply into rep: 0 or a negative errno. */
static int
exchange_once(const struct cli *o, struct rl_client *c, const struct cli_exchange *x,
              struct rl_wire_reply *rep)
{
    int rc = rl_client_queue(c, &x->req);

    if (rc == 0) {
        rc = rl_client_flush(c, o->timeout_ms);
    }
    if (rc == 0) {
        rc = rl_client_recv(c, rep, o->timeout_ms);
    }
    if (rc == 0 && rep->op == RL_WIRE_OP_ERROR) {
        return rep->id == x->req.id || rep->id == 0 ? 0 : -EPROTO;
    }
    return rc == 0 && (rep->id != x->req.id || rep->op != x->req.op) ? -EPROTO : rc;
}

int
cli_exchange(const struct cli *o, const struct cli_cmd *cmd, struct cli_exchange *x)
{
    const char *name = cli_cmd_name(cmd);
    struct rl_wire_reply *rep = malloc(sizeof(*rep));
    struct rl_client *c = NULL;
    char why[320], op[32];
    uint64_t t0;
    int rc, status;

    if (rep == NULL) {
        return cli_out_of_memory();
    }
    status = cli_connect(o, &c, why, sizeof(why));
    if (status != CLI_EXIT_OK) {
        fprintf(stderr, "rl-cli: %s: %s\n", o->target, why);
    }
    x->req.op = cmd->op;
    for (uint64_t i = 0; c != NULL && status != CLI_EXIT_FAIL && (i == 0 || i < x->repeat); i++) {
        if (i > 0 && x->interval_ms > 0) {
            cli_sleep_ms(x->interval_ms);
        }
        x->req.id = (uint32_t)(i % UINT32_MAX) + 1;
        t0 = rl_clock_mono_ns();
        rc = exchange_once(o, c, x, rep);
        if (rc != 0) {
            const char *tw = rl_client_tls_why(c);

            fprintf(stderr, "rl-cli: %s to %s: %s%s%s\n", name, o->target, cli_errno_text(rc),
                    tw != NULL ? ": TLS: " : "", tw != NULL ? tw : "");
            status = CLI_EXIT_FAIL;
        } else if (rep->op == RL_WIRE_OP_ERROR && rep->err == RL_WIRE_ERR_UNKNOWN_OP &&
                   cmd->unknown_op != NULL) {
            fprintf(stderr, "rl-cli: %s: %s does not take %s (%s)\n", name, o->target,
                    cli_upper(rl_wire_op_name(cmd->op), op, sizeof(op)), cmd->unknown_op);
            status = CLI_EXIT_FAIL;
        } else if (rep->op == RL_WIRE_OP_ERROR) {
            printf("%s -> ", x->label != NULL ? x->label : name);
            cli_print_error_reply(rep);
            status = CLI_EXIT_FAIL;
        } else {
            status = x->print(o, x, rep, (rl_clock_mono_ns() - t0) / 1000);
        }
        fflush(stdout);
    }
    rl_client_destroy(c);
    free(rep);
    return status;
}
