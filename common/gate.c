/*
 * gate: the AUTH exchange and the refusal of a connection that did not pass it, for the
 * node and the router alike (gate.h). The messages name the process and what it wants, so a
 * client's error says what to configure; they never quote a token.
 */
#include "gate.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>

#include <uv.h>

#include "auth.h"
#include "conf.h"
#include "conn.h"
#include "log.h"
#include "wire.h"

/* What a gate of each kind says, by enum rl_gate_kind. */
static const struct {
    const char *need;  /* a frame other than AUTH came first */
    const char *wrong; /* the AUTH's token is not accepted */
} gate_text[] = {
    [RL_GATE_NODE] = {"this node needs AUTH with the cluster secret before anything else",
                      "AUTH refused: not the cluster secret"},
    [RL_GATE_ROUTER] = {"this router needs AUTH with a client token first",
                        "AUTH refused: unknown token"},
};

void
rl_gate_init(struct rl_gate *g, const struct rl_conf *conf, enum rl_gate_kind kind)
{
    g->conf = conf;
    g->kind = kind;
    g->failures = 0;
    g->warned_ms = 0;
}

/* Whether anything but AUTH must wait for a token. */
static bool
gate_required(const struct rl_gate *g)
{
    if (g->conf == NULL) {
        return false;
    }
    return g->kind == RL_GATE_NODE ? g->conf->secret != NULL : g->conf->nauth_clients > 0;
}

void
rl_gate_limits(const struct rl_gate *g, struct rl_conn_limits *lim)
{
    lim->auth_required = gate_required(g);
}

/* Whether there is no token to check an AUTH against. */
static bool
gate_open(const struct rl_gate *g)
{
    if (g->conf == NULL) {
        return true;
    }
    if (g->conf->secret != NULL) {
        return false;
    }
    return g->kind == RL_GATE_NODE || g->conf->nauth_clients == 0;
}

/* ERROR UNAUTHORIZED, said at most every RL_GATE_WARN_MS, then c closes once it is written. */
static void
gate_refuse(struct rl_gate *g, struct rl_conn *c, uint32_t id, const char *msg)
{
    uint64_t now = uv_now(c->q->loop);

    g->failures++;
    if (g->warned_ms == 0 || now - g->warned_ms >= RL_GATE_WARN_MS) {
        rl_log_warn("%s: %s (%llu refused so far; said at most every %u s)", c->peer, msg,
                    (unsigned long long)g->failures, RL_GATE_WARN_MS / 1000);
        g->warned_ms = now;
    }
    if (rl_wire_put_error(&c->out, id, RL_WIRE_ERR_UNAUTHORIZED, msg) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    rl_conn_finish(c);
}

bool
rl_gate_admit(struct rl_gate *g, struct rl_conn *c, const struct rl_wire_req *req)
{
    if (c->principal != NULL || req->op == RL_WIRE_OP_AUTH || !gate_required(g)) {
        return true;
    }
    gate_refuse(g, c, req->id, gate_text[g->kind].need);
    return false;
}

/* The AUTH reply naming who the client is. */
static void
gate_welcome(struct rl_conn *c, uint32_t id, const char *name)
{
    if (rl_wire_put_auth_reply(&c->out, id, name) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    rl_conn_mark(c);
}

/* An AUTH from an address past its failed AUTHs a second: refused without looking at the
 * token, so guessing goes no faster than RL_CONN_AUTHFAIL_RATE a second. */
static void
gate_slow_down(struct rl_gate *g, struct rl_conn *c, uint32_t id, uint64_t wait_ms)
{
    char msg[160];

    snprintf(msg, sizeof(msg),
             "AUTH refused: too many failed AUTHs from this address (more than %u a second); "
             "try again in %" PRIu64 " ms",
             RL_CONN_AUTHFAIL_RATE, wait_ms);
    gate_refuse(g, c, id, msg);
}

int
rl_gate_auth(struct rl_gate *g, struct rl_conn *c, const struct rl_wire_req *req)
{
    const struct rl_client_conf *cl = NULL;
    uint64_t wait_ms;

    if (gate_open(g)) {
        /* Nothing to check against: the server is open, and says so. */
        gate_welcome(c, req->id, "anonymous");
        return 0;
    }
    wait_ms = rl_conn_auth_wait_ms(c);
    if (wait_ms > 0) {
        gate_slow_down(g, c, req->id, wait_ms);
        return -EACCES;
    }
    if (req->token.len < RL_AUTH_TOKEN_MIN) {
        /* Never accepted, whatever hash a config holds: too short to be guessed slowly. */
    } else if (g->kind == RL_GATE_NODE) {
        cl = rl_conf_is_secret(g->conf, req->token.ptr, req->token.len) ? &g->conf->cluster_client
                                                                        : NULL;
    } else {
        cl = rl_conf_client_by_token(g->conf, req->token.ptr, req->token.len);
    }
    if (cl == NULL) {
        c->principal = NULL;
        rl_conn_auth_failed(c);
        gate_refuse(g, c, req->id, gate_text[g->kind].wrong);
        return -EACCES;
    }
    rl_conn_authenticated(c, cl);
    gate_welcome(c, req->id, cl->name);
    return 0;
}
