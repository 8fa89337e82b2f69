/*
 * gate: who may use a server's connection. The node and the router admit a connection the
 * same way: when the config asks for it, the first frame must be an AUTH whose token the
 * config accepts (a node: the cluster secret; a router: a [client] token or the secret);
 * anything else first, or a wrong token, gets ERROR UNAUTHORIZED and the connection closes
 * once that is written. The refusals are counted and said at warn, at most every
 * RL_GATE_WARN_MS. Not for the tokens' cryptography (auth.h), the [client] sections and what
 * each may do (conf.h), or the connection itself (conn.h).
 */
#ifndef RL_GATE_H
#define RL_GATE_H

#include <stdbool.h>
#include <stdint.h>

struct rl_conf;
struct rl_conn;
struct rl_conn_limits;
struct rl_wire_req;

#define RL_GATE_WARN_MS 10000u /* refusals are said at most this often */

/* Whose tokens a gate accepts. */
enum rl_gate_kind {
    RL_GATE_NODE,   /* the cluster secret, required when there is one */
    RL_GATE_ROUTER, /* the [client] tokens (and the secret), required when any is configured */
};

struct rl_gate {
    const struct rl_conf *conf; /* NULL: nothing to check against, every connection is open */
    enum rl_gate_kind kind;
    uint64_t failures;  /* connections refused: no AUTH first, or a wrong token */
    uint64_t warned_ms; /* loop time of the last warning; 0: none yet */
};

/* Sets g up for conf (which must outlive it; NULL: open) with no refusals counted. */
void rl_gate_init(struct rl_gate *g, const struct rl_conf *conf, enum rl_gate_kind kind);

/* Sets lim->auth_required from what g requires, before the listener starts with lim. */
void rl_gate_limits(const struct rl_gate *g, struct rl_conn_limits *lim);

/*
 * A request req arrived on c: whether it may be served. True for an AUTH (answer it with
 * rl_gate_auth), on a connection that authenticated, or when the config asks for nothing.
 * False: the request was refused, the UNAUTHORIZED error is queued and c closes after it
 * (or at once, out of memory); the caller counts it among its errors.
 */
bool rl_gate_admit(struct rl_gate *g, struct rl_conn *c, const struct rl_wire_req *req);

/*
 * Answers the AUTH req on c: the principal's name ("anonymous" when there is nothing to
 * check against), c->principal set to its rl_client_conf. Returns 0, or -EACCES for a token
 * the config does not accept (or one under RL_AUTH_TOKEN_MIN bytes, or any token while c's
 * address is past its failed AUTHs a second, conn.h): then refused as by rl_gate_admit
 * (c->principal is NULL) and charged to c's address.
 */
int rl_gate_auth(struct rl_gate *g, struct rl_conn *c, const struct rl_wire_req *req);

#endif
