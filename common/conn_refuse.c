/*
 * conn_refuse: how the connection module answers a peer it will not serve (conn.h): the
 * protocol errors (rl_conn_protocol_error, with a hint when the bytes look like HTTP or
 * TLS), the refusals a listener counts (conn_refuse_counted: ERROR, then close), and the
 * warnings about them, logged at warn once per address and kind a minute (conn_should_warn;
 * at debug otherwise). Used by reading (conn_read.c: a bad frame, buffers spent, probation)
 * and accepting (conn_listen.c: the caps, timeouts, failed AUTHs); it calls only conn.c.
 * Not for deciding whom to refuse (conn_listen.c, conn_read.c).
 */
#include "conn.h"

#include <string.h>

#include <xxhash.h>

#include "conn_int.h"
#include "log.h"
#include "wire.h"

/* What the first bytes of a stream that broke the protocol look like, for the warning. */
static const char *
conn_sniff(const char *p, size_t n)
{
    static const char *const http[] = {"GET ", "POST", "PUT ", "HEAD", "DELE", "OPTI",
                                       "PATC", "CONN", "TRAC", "PRI "};

    if (n >= 2 && (unsigned char)p[0] == 0x16 && (unsigned char)p[1] == 0x03) {
        return " (the bytes look like a TLS handshake: this port speaks the ratelimiter binary "
               "protocol, in clear)";
    }
    for (size_t i = 0; n >= 4 && i < sizeof(http) / sizeof(http[0]); i++) {
        if (memcmp(p, http[i], 4) == 0) {
            return " (the bytes look like an HTTP request: this port speaks the ratelimiter "
                   "binary protocol, docs/PROTOCOL.md)";
        }
    }
    return "";
}

/* True when an event of `kind` from c's peer address should be logged at warn now: once per
 * address and kind per RL_CONN_WARN_INTERVAL_MS (as far as 64 slots remember). */
bool
conn_should_warn(struct rl_listener *l, const struct rl_conn *c, enum conn_warn kind)
{
    const char *colon = strrchr(c->peer, ':');
    size_t len = colon != NULL ? (size_t)(colon - c->peer) : strlen(c->peer);
    uint64_t h = XXH3_64bits_withSeed(c->peer, len, kind);
    struct rl_listener_warned *w = &l->warned[h % RL_CONN_WARN_PEERS];
    uint64_t now = uv_now(c->q->loop);

    if (w->peer_hash == h && w->at_ms != 0 && now - w->at_ms < RL_CONN_WARN_INTERVAL_MS) {
        return false;
    }
    w->peer_hash = h;
    w->at_ms = now != 0 ? now : 1;
    return true;
}

void
rl_conn_protocol_error(struct rl_conn *c, uint32_t id, uint32_t err, const char *msg,
                       const char *p, size_t n)
{
    struct rl_listener *l = c->listener;

    if (!c->open) {
        return;
    }
    if (l == NULL) {
        rl_log_warn("%s: protocol error, closing the connection: %s", c->peer, msg);
        rl_conn_close(c, UV_EPROTO);
        return;
    }
    l->stats.protocol_closes++;
    if (conn_should_warn(l, c, CONN_WARN_PROTOCOL)) {
        rl_log_warn("client %s: protocol error, answered and closed: %s%s (further errors from "
                    "this address are logged at debug for a minute)",
                    c->peer, msg, conn_sniff(p, n));
    } else {
        rl_log_debug("client %s: protocol error, answered and closed: %s", c->peer, msg);
    }
    if (rl_wire_put_error(&c->out, id, err, msg) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    rl_conn_finish(c);
}

/* Answers c ERROR err and closes it, counting it in *counter (and, unless it is a timeout or
 * a pre-AUTH connection closed for a newer one, in connections_refused) and logging it at
 * warn once per address and kind a minute. */
void
conn_refuse_counted(struct rl_conn *c, uint64_t *counter, enum conn_warn kind, uint32_t err,
                    const char *msg)
{
    struct rl_listener *l = c->listener;

    (*counter)++;
    if (kind != CONN_WARN_FRAME_TIMEOUT && kind != CONN_WARN_AUTH_TIMEOUT &&
        kind != CONN_WARN_PREAUTH) {
        l->stats.connections_refused++;
    }
    if (conn_should_warn(l, c, kind)) {
        rl_log_warn("client %s: %s; answered ERROR and closed (further cases from this address "
                    "are logged at debug for a minute)",
                    c->peer, msg);
    } else {
        rl_log_debug("client %s: %s; answered ERROR and closed", c->peer, msg);
    }
    rl_conn_refuse(c, err, msg);
}

void
conn_refuse_probation(struct rl_conn *c)
{
    conn_pause(c);
    conn_refuse_counted(c, c->refusal_counter, CONN_WARN_REFUSED, RL_WIRE_ERR_OVERLOADED,
                        c->refusal);
}

void
conn_refuse_buffers(struct rl_conn *c)
{
    conn_pause(c);
    conn_refuse_counted(c, &c->listener->stats.refused_buffers, CONN_WARN_BUFFERS,
                        RL_WIRE_ERR_OVERLOADED,
                        "server busy: the memory for client buffers (buffer_memory) is spent");
}
