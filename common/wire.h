/*
 * wire: the codec and framing of docs/PROTOCOL.md (v1), on msgpack-c.
 *
 * A frame is a 4-byte big-endian length N (1..65536) and N bytes holding exactly one
 * MessagePack value. This module splits frames out of a byte stream, decodes requests (node
 * and router side) and replies (client side), and encodes both straight into an rl_buf.
 * It checks every length and container header against the bytes actually present before
 * msgpack-c sees them, so a hostile header can never make it allocate more than a small
 * multiple of the frame size. It does not own sockets or decide what a request means.
 */
#ifndef RL_WIRE_H
#define RL_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "buf.h"

#define RL_WIRE_HDR_LEN 4
#define RL_WIRE_FRAME_MAX 65536u
#define RL_WIRE_SERVICE_MAX 128u
#define RL_WIRE_USER_MAX 256u
#define RL_WIRE_ENDPOINT_MAX 128u
#define RL_WIRE_COST_MAX 1000000u
#define RL_WIRE_DELTA_MAX 1000000 /* ADJUST's |delta| */
#define RL_WIRE_COUNT_MAX 1000000u /* RELEASE's count (1..) */
/* CLOCK's now_ms (test-only): 2^62 ms, 146 million years, leaves every window end and
 * bucket time that a node computes from now (W < 2^35) clear of 2^64. */
#define RL_WIRE_CLOCK_MAX (UINT64_C(1) << 62)
#define RL_WIRE_RETRY_NEVER 4294967295u
#define RL_WIRE_ROLE_MAX 32u
#define RL_WIRE_TOKEN_MAX 256u
/* The longest AUTH payload: [6, id, token] with a 32-bit id and a 256-byte token (fixarray,
 * op, uint32 id, bin 16 header). A frame announcing more before AUTH is refused. */
#define RL_WIRE_AUTH_FRAME_MAX (1u + 1u + 5u + 3u + RL_WIRE_TOKEN_MAX)
/* THROTTLED (docs/PROTOCOL.md, "THROTTLED"): node names in a reply, how many episodes a
 * reply holds at most (and by default), and how many missing nodes it names at most. */
#define RL_WIRE_NODE_MAX 64u
#define RL_WIRE_TOP_MAX 100u
#define RL_WIRE_TOP_DEFAULT 20u
#define RL_WIRE_MISSING_MAX 64u
/* HANDOFF_OUT and HANDOFF_IN (docs/PROTOCOL.md, "HANDOFF_OUT, HANDOFF_IN"): the most bytes of
 * handoff records one message carries (the rest of its frame: at most 31 bytes), and the
 * most shards a cluster may have (RL_SHARDMAP_SHARDS_MAX). */
#define RL_WIRE_RECORDS_MAX 65500u
#define RL_WIRE_SHARDS_MAX 1048576u

/*
 * The op table: every protocol op, declared here once. Everything op-specific is derived
 * from it: the enum and names below, request decode (wire_req.c), reply decode
 * (wire_reply.c), the node's dispatch (node/server.c), the router's (router/session.c), and
 * docs/PROTOCOL.md's op list is checked against it (tests/common/check_wire.c). One row:
 *
 *   R(A, NAME, name, code, req_min, req_max, req, reply_len, reply, node, router)
 *
 *   NAME, name  RL_WIRE_OP_NAME; rl_wire_op_name() gives #name
 *   code        the opcode, element 0 of every message
 *   req_min..req_max  elements a request may have, op and id included (0 0: never a request)
 *   req         the request's shape: wire_req_<req> decodes its fields after the arity check,
 *               wire_put_req_<req> encodes them (rl_wire_put_req)
 *   reply_len   elements of its reply, exactly
 *   reply       the reply's shape: wire_reply_<reply> decodes its fields
 *   node        NODE: a node serves it (server_<name> in node/server.c); NONE: it does not
 *   router      what a router does with it (router/session.c): FORWARD it to the key's owning
 *               node (rl_forward_<name>), FANOUT to every node and merge (rl_fanout_<name>),
 *               SELF: answer it itself (session_<name>), NONE: UNKNOWN_OP
 *
 * A is passed through to R untouched, so R can hand it a macro of its own (RL_WIRE_OP_MAP).
 */
#define RL_WIRE_OP_TABLE(R, A)                                                                     \
    R(A, CHECK, check, 1, 6, 8, check, 7, check, NODE, FORWARD)                                    \
    R(A, PING, ping, 2, 2, 2, bare, 3, named, NODE, SELF)                                          \
    R(A, STATS, stats, 3, 2, 2, bare, 3, stats, NODE, SELF)                                        \
    R(A, CLOCK, clock, 4, 3, 3, clock, 3, clock, NODE, NONE)                                       \
    R(A, HELLO, hello, 5, 3, 3, hello, 3, named, NODE, NONE)                                       \
    R(A, AUTH, auth, 6, 3, 3, auth, 3, named, NODE, SELF)                                          \
    R(A, THROTTLED, throttled, 7, 2, 5, throttled, 4, throttled, NODE, FANOUT)                     \
    R(A, HOT, hot, 8, 2, 4, hot, 4, hot, NONE, SELF)                                               \
    R(A, ADJUST, adjust, 9, 6, 8, adjust, 7, check, NODE, FORWARD)                                 \
    R(A, RELEASE, release, 10, 6, 8, release, 7, check, NODE, FORWARD)                             \
    R(A, HANDOFF_OUT, handoff_out, 11, 4, 4, handoff_out, 4, handoff_out, NODE, NONE)              \
    R(A, HANDOFF_IN, handoff_in, 12, 4, 6, handoff_in, 4, handoff_in, NODE, NONE)                  \
    R(A, ERROR, error, 255, 0, 0, none, 4, error, NONE, NONE)

/*
 * Designated initializers of an array indexed by opcode, from one column of the op table:
 * RL_WIRE_OP_BY(req, wire_req_) is [code] = wire_req_<req>, for every op (reply likewise);
 * RL_WIRE_OP_BY(node, SERVER_) is [code] = SERVER_<node>(name), the caller defining
 * SERVER_NODE(n) and SERVER_NONE(n) (router likewise, with its four values).
 */
#define RL_WIRE_OP_BY(column, P) RL_WIRE_OP_TABLE(RL_WIRE_OP_BY_##column, P)
#define RL_WIRE_OP_BY_req(P, N, n, v, req_min, req_max, req, ...) [v] = P##req,
#define RL_WIRE_OP_BY_reply(P, N, n, v, req_min, req_max, req, reply_len, reply, ...)              \
    [v] = P##reply,
#define RL_WIRE_OP_BY_node(P, N, n, v, req_min, req_max, req, reply_len, reply, node, router)      \
    [v] = P##node(n),
#define RL_WIRE_OP_BY_router(P, N, n, v, req_min, req_max, req, reply_len, reply, node, router)    \
    [v] = P##router(n),

/* Opcodes: X(name, value, text), the op table's first three columns. */
#define RL_WIRE_OP_MAP_ROW(X, N, n, v, ...) X(N, v, #n)
#define RL_WIRE_OP_MAP(X) RL_WIRE_OP_TABLE(RL_WIRE_OP_MAP_ROW, X)

/* CHECK reply codes: X(name, value, text). */
#define RL_WIRE_CODE_MAP(X)                                                                        \
    X(ALLOWED, 0, "allowed")                                                                       \
    X(LIMITED, 1, "limited")                                                                       \
    X(FAIL_OPEN, 2, "fail_open")                                                                   \
    X(FAIL_CLOSED, 3, "fail_closed")                                                               \
    X(NO_RULE, 4, "no_rule")                                                                       \
    X(QUEUED, 5, "queued")

/* ERROR reply codes: X(name, value, text). */
#define RL_WIRE_ERR_MAP(X)                                                                         \
    X(MALFORMED, 1, "malformed")                                                                   \
    X(UNKNOWN_OP, 2, "unknown_op")                                                                 \
    X(BAD_FIELD, 3, "bad_field")                                                                   \
    X(OVERLOADED, 4, "overloaded")                                                                 \
    X(UNAUTHORIZED, 5, "unauthorized")                                                             \
    X(NOT_OWNER, 6, "not_owner")                                                                   \
    X(MOVING, 7, "moving")

/* How a throttling episode ended (THROTTLED's `ended`): X(name, value, text). */
#define RL_WIRE_ENDED_MAP(X)                                                                       \
    X(OPEN, 0, "open")                                                                             \
    X(ALLOWED, 1, "allowed")                                                                       \
    X(IDLE, 2, "idle")

enum rl_wire_ended {
#define RL_WIRE_ENUM(n, v, s) RL_WIRE_ENDED_##n = v,
    RL_WIRE_ENDED_MAP(RL_WIRE_ENUM)
#undef RL_WIRE_ENUM
};

enum rl_wire_op {
#define RL_WIRE_ENUM(n, v, s) RL_WIRE_OP_##n = v,
    RL_WIRE_OP_MAP(RL_WIRE_ENUM)
#undef RL_WIRE_ENUM
};
enum rl_wire_code {
#define RL_WIRE_ENUM(n, v, s) RL_WIRE_##n = v,
    RL_WIRE_CODE_MAP(RL_WIRE_ENUM)
#undef RL_WIRE_ENUM
        RL_WIRE_CODE_COUNT
};
enum rl_wire_err {
#define RL_WIRE_ENUM(n, v, s) RL_WIRE_ERR_##n = v,
    RL_WIRE_ERR_MAP(RL_WIRE_ENUM)
#undef RL_WIRE_ENUM
};

/* How a router treats an op (the op table's router column). */
enum rl_wire_route {
    RL_WIRE_ROUTE_NONE,    /* not served: UNKNOWN_OP */
    RL_WIRE_ROUTE_FORWARD, /* to the node owning the request's key */
    RL_WIRE_ROUTE_FANOUT,  /* to every node, the answers merged */
    RL_WIRE_ROUTE_SELF,    /* answered by the router itself */
};

/* One row of the op table, for code that looks an op up at run time. */
struct rl_wire_op_info {
    uint32_t op;
    const char *name;  /* "check" */
    const char *upper; /* "CHECK", as error messages name it */
    uint8_t req_min;   /* elements of a request, op and id included; 0: never a request */
    uint8_t req_max;
    uint8_t reply_len; /* elements of its reply */
    bool node;         /* a node serves it */
    uint8_t router;    /* enum rl_wire_route */
};

/* The row of op, or NULL when op is not in the table. */
const struct rl_wire_op_info *rl_wire_op_info(uint32_t op);
/* The table's rows in table order, and how many there are. */
const struct rl_wire_op_info *rl_wire_ops(size_t *n);

/* Names for logs and docs; "?" for a value outside the map. */
const char *rl_wire_op_name(uint32_t op);
const char *rl_wire_code_name(uint32_t code);
const char *rl_wire_err_name(uint32_t err);
const char *rl_wire_ended_name(uint32_t ended);

/* A string inside a decoded frame: not NUL-terminated, valid while the frame's bytes are. */
struct rl_wire_str {
    const char *ptr; /* NULL for nil */
    uint32_t len;
};

/*
 * A CHECK's inline limit (docs/PROTOCOL.md, "Inline limits"): [algorithm, limit, window_ms,
 * burst|nil], the bounds of a cluster.conf `limit` line. algo is an enum rl_algo (ruleset.h);
 * burst is the limit when the request gave nil (has_burst false).
 */
struct rl_wire_limit {
    bool set; /* false: no inline limit (6 elements, or nil) */
    bool has_burst;
    uint8_t algo;
    uint32_t limit;     /* 1..4294967295 */
    uint64_t window_ms; /* 1..rl_algo_window_max(algo) (ruleset.h): 366 days at most */
    uint32_t burst;     /* 1..4294967295 */
};

/* A decoded request. Only the fields of its op are set. */
struct rl_wire_req {
    uint32_t op;
    uint32_t id;
    struct rl_wire_str service; /* CHECK */
    struct rl_wire_str user;
    struct rl_wire_str endpoint; /* ptr NULL when nil; nil and "" both mean the whole service */
    uint32_t cost; /* CHECK: 0..RL_WIRE_COST_MAX; RELEASE: its count, 1..RL_WIRE_COUNT_MAX */
    int32_t delta;              /* ADJUST: -RL_WIRE_DELTA_MAX..RL_WIRE_DELTA_MAX */
    struct rl_wire_limit limit; /* CHECK, ADJUST, RELEASE: its inline limit, if any */
    /* CHECK's optional 8th element (docs/PROTOCOL.md, "Inline limits"): the client an inline
     * CHECK is accounted to, rl_wire_tenant's; 0: none given. Sent only with a limit. */
    uint32_t tenant;
    uint64_t now_ms; /* CLOCK */
    struct rl_wire_str role; /* HELLO: "router" */
    struct rl_wire_str token; /* AUTH: 1..256 bytes, string or binary */
    /* THROTTLED: service (above, ptr NULL: any) filters; since_ms when has_since; top
     * 1..RL_WIRE_TOP_MAX (RL_WIRE_TOP_DEFAULT when not given). HOT: service and top alike
     * (top 0 when not given: the router's default) */
    uint64_t since_ms;
    bool has_since;
    uint32_t top;
    /* HANDOFF_OUT: shard and the byte offset to read from; HANDOFF_IN: shard and records
     * (0..RL_WIRE_RECORDS_MAX bytes, binary) */
    uint32_t shard;
    uint64_t offset;
    struct rl_wire_str records;
    /* HANDOFF_IN's optional 5th element: true on the last message of a shard's automatic
     * move (docs/PROTOCOL.md, "Automatic handoff"); false when absent */
    bool final;
    bool has_final; /* the 5th element was given: an automatic move's message */
    /* HANDOFF_IN's optional 6th element: the sending node's member name (0..63 bytes); ptr
     * NULL when absent */
    struct rl_wire_str from;
};

/* One throttling episode in a THROTTLED reply. Strings point into the frame (decoded) or
 * the caller's memory (encoded). */
struct rl_wire_episode {
    struct rl_wire_str service;  /* 1..128 bytes */
    struct rl_wire_str endpoint; /* ptr NULL: nil (the service as a whole); 1..128 bytes */
    struct rl_wire_str user;     /* 1..256 bytes */
    struct rl_wire_str node;     /* 0..64 bytes: the node that recorded it */
    uint64_t start_ms;           /* the first refusal */
    uint64_t end_ms;             /* when it ended; 0 while open */
    uint64_t refused;            /* requests refused (LIMITED) in it */
    uint32_t ended;              /* enum rl_wire_ended */
};

/* One key of a HOT reply: the router's count of (service, user) requests. */
struct rl_wire_hot_key {
    struct rl_wire_str service; /* 1..128 bytes */
    struct rl_wire_str user;    /* 1..256 bytes (a router sends at most its first 64) */
    uint64_t count;             /* requests counted, decayed (docs/PROTOCOL.md, "HOT") */
    uint64_t err;               /* at most this much of count may be other keys' */
};

struct rl_wire_check_reply {
    uint32_t id;
    uint32_t code;
    uint64_t limit;
    uint64_t remaining;
    uint64_t reset_ms;
    uint64_t retry_after_ms;
};

#define RL_WIRE_STATS_MAX 256

/* A decoded reply (client side). Only the fields of its op are set. */
struct rl_wire_reply {
    uint32_t op;
    uint32_t id;
    struct rl_wire_check_reply check; /* CHECK */
    struct rl_wire_str name;          /* PING, HELLO: who answered; AUTH: who you are */
    uint64_t now_ms;                  /* CLOCK */
    uint32_t err;                     /* ERROR: code and message */
    struct rl_wire_str message;
    /* ERROR MOVING's optional 5th element: the member to ask now; "" (len 0, ptr non-NULL):
     * ask this node again shortly; ptr NULL: not given (treated as "") */
    struct rl_wire_str owner;
    size_t nstats; /* STATS: pairs, at most RL_WIRE_STATS_MAX, in the order received */
    struct rl_wire_str stat_keys[RL_WIRE_STATS_MAX];
    int64_t stat_vals[RL_WIRE_STATS_MAX];
    size_t nepisodes; /* THROTTLED: at most RL_WIRE_TOP_MAX, in the order received */
    struct rl_wire_episode episodes[RL_WIRE_TOP_MAX];
    size_t nmissing; /* THROTTLED: nodes that did not answer (router), at most
                        RL_WIRE_MISSING_MAX */
    struct rl_wire_str missing[RL_WIRE_MISSING_MAX];
    uint64_t period_ms; /* HOT: the counts halve this often */
    size_t nhot;        /* HOT: at most RL_WIRE_TOP_MAX, highest count first */
    struct rl_wire_hot_key hot[RL_WIRE_TOP_MAX];
    struct rl_wire_str records; /* HANDOFF_OUT: whole handoff records */
    uint64_t next;              /* HANDOFF_OUT: the offset to read next; 0: that was the end */
    uint64_t imported;          /* HANDOFF_IN: keys imported from the message */
    uint64_t skipped;           /* HANDOFF_IN: keys not imported (no such tier here, ...) */
};

/* What went wrong with a request, ready to be sent back as an ERROR reply. */
struct rl_wire_fault {
    uint32_t id;  /* the request's id, 0 when unreadable */
    uint32_t err; /* enum rl_wire_err */
    bool fatal;   /* framing broken: answer, then close the connection */
    char msg[128];
};

/*
 * Looks for one frame at the start of p[0..n). Returns 1 when a whole frame is there
 * (*payload_len set; the payload starts at p + RL_WIRE_HDR_LEN), 0 when more bytes are
 * needed (*payload_len set to the announced length once the header is in), or -EPROTO when the length prefix is 0 or above RL_WIRE_FRAME_MAX (fatal).
 */
int rl_wire_frame(const char *p, size_t n, size_t *payload_len);

/*
 * Decoder state: a msgpack zone reused across frames so decoding does not allocate. Each
 * decode clears it first; a frame that never reaches msgpack-c leaves it empty.
 */
struct rl_wire_decoder {
    msgpack_zone zone;
    bool no_clock; /* CLOCK is an unknown op here (a router; a node without --test-clock):
                      UNKNOWN_OP whatever its elements, never BAD_FIELD; false after init */
};

/* Returns 0 or -ENOMEM. deinit frees what init and the decodes since took. */
int rl_wire_decoder_init(struct rl_wire_decoder *d);
void rl_wire_decoder_deinit(struct rl_wire_decoder *d);

/*
 * Decodes one request payload (the N bytes of a frame). Returns 0 with *req filled, or -1
 * with *fault filled: MALFORMED (fatal when the bytes are not exactly one msgpack value;
 * not fatal when they are one value but not a request array), UNKNOWN_OP, or BAD_FIELD
 * naming the field. Strings in *req point into p.
 */
int rl_wire_decode_req(struct rl_wire_decoder *d, const char *p, size_t n, struct rl_wire_req *req,
                       struct rl_wire_fault *fault);

/*
 * Decodes one reply payload. Returns 0, -EPROTO when it is not a well-formed v1 reply (exact
 * arity per op, known reply and error codes only, STATS values integers that fit int64), or
 * -ENOMEM. Strings in *rep point into p.
 */
int rl_wire_decode_reply(struct rl_wire_decoder *d, const char *p, size_t n,
                         struct rl_wire_reply *rep);

/*
 * Encoders: each appends one whole frame (length prefix included) to out and returns 0,
 * -ENOMEM, or -EMSGSIZE when the payload would pass RL_WIRE_FRAME_MAX (or a STATS reply
 * RL_WIRE_STATS_MAX pairs); on failure out is left as it was. Strings longer than the
 * protocol allows are the caller's bug, except in rl_wire_put_check, which encodes whatever
 * it is given (tests send bad requests with it).
 */
int rl_wire_put_check(struct rl_buf *out, const struct rl_wire_req *req);
/* ADJUST [9, id, service, user, endpoint, delta, limit, tenant] from req (req->delta in
 * place of the cost; the limit and tenant as rl_wire_put_check sends them), and its reply,
 * a CHECK reply's shape under op 9 (docs/PROTOCOL.md, "ADJUST"). */
int rl_wire_put_adjust(struct rl_buf *out, const struct rl_wire_req *req);
int rl_wire_put_adjust_reply(struct rl_buf *out, const struct rl_wire_check_reply *rep);
/* RELEASE [10, id, service, user, endpoint, count, limit, tenant] from req (req->cost is the
 * count; the limit and tenant as rl_wire_put_check sends them), and its reply, a CHECK
 * reply's shape under op 10 (docs/PROTOCOL.md, "RELEASE"). */
int rl_wire_put_release(struct rl_buf *out, const struct rl_wire_req *req);
int rl_wire_put_release_reply(struct rl_buf *out, const struct rl_wire_check_reply *rep);
/*
 * The tenant id a router gives the inline CHECKs of a client (docs/PROTOCOL.md, "Inline
 * limits"): a 32-bit hash of its [client NAME] when it authenticated as one (name not NULL),
 * else of its address (addr: 16 bytes, IPv4 mapped into IPv6; NULL: unknown, all zeros).
 * Never 0 (0 is "none"); the same in every process.
 */
uint32_t rl_wire_tenant(const char *name, const uint8_t *addr);
/*
 * Whether a node takes the tenant element, asked once per connection: a CHECK of 8 elements
 * with id 0 and an empty service, which a node answers with an ERROR either way (no state):
 * rl_wire_tenant_taken is false for the answer of a node from before the element (`CHECK
 * takes 6..7 elements`), true for any other, so a router sends tenants only to nodes that
 * take them (docs/PROTOCOL.md, "Inline limits, by tenant").
 */
int rl_wire_put_tenant_probe(struct rl_buf *out);
bool rl_wire_tenant_taken(const struct rl_wire_reply *rep);
int rl_wire_put_ping(struct rl_buf *out, uint32_t id);
int rl_wire_put_stats(struct rl_buf *out, uint32_t id);
int rl_wire_put_clock(struct rl_buf *out, uint32_t id, uint64_t now_ms);
int rl_wire_put_check_reply(struct rl_buf *out, const struct rl_wire_check_reply *rep);
int rl_wire_put_ping_reply(struct rl_buf *out, uint32_t id, const char *name);
/* HELLO [5, id, role] and its reply [5, id, name] (docs/PROTOCOL.md, "HELLO"). */
int rl_wire_put_hello(struct rl_buf *out, uint32_t id, const char *role);
int rl_wire_put_hello_reply(struct rl_buf *out, uint32_t id, const char *name);
/* AUTH [6, id, token] and its reply [6, id, principal] (docs/PROTOCOL.md, "AUTH"). */
int rl_wire_put_auth(struct rl_buf *out, uint32_t id, const char *token, size_t len);
int rl_wire_put_auth_reply(struct rl_buf *out, uint32_t id, const char *principal);
int rl_wire_put_clock_reply(struct rl_buf *out, uint32_t id, uint64_t now_ms);
int rl_wire_put_error(struct rl_buf *out, uint32_t id, uint32_t err, const char *msg);
/* ERROR MOVING [255, id, 7, msg, owner]: owner the member name to ask now, "" to ask again
 * shortly (docs/PROTOCOL.md, "MOVING"). */
int rl_wire_put_moving(struct rl_buf *out, uint32_t id, const char *msg, const char *owner);
int rl_wire_put_stats_reply(struct rl_buf *out, uint32_t id, const char *const *keys,
                            const int64_t *vals, size_t n);
/*
 * THROTTLED [7, id, service|nil, since_ms|nil, top] from req (service.ptr NULL: nil; since_ms
 * nil unless has_since; top 0 is sent as nil), and its reply [7, id, [episode...],
 * [missing...]]. The reply holds eps[0..n) in the order given, but at most RL_WIRE_TOP_MAX
 * and only as many as fit the frame: it stops before the first that would not fit, and
 * *nput (may be NULL) says how many went in. At most RL_WIRE_MISSING_MAX names of missing
 * are sent. Strings past their bounds are -EMSGSIZE.
 */
int rl_wire_put_throttled(struct rl_buf *out, const struct rl_wire_req *req);
/*
 * HOT [8, id, service|nil, top|nil] from req (service.ptr NULL: nil; top 0: nil), and its
 * reply [8, id, period_ms, [[service, user, count, err]...]] with keys[0..n) (at most
 * RL_WIRE_TOP_MAX; strings past their bounds are -EMSGSIZE).
 */
int rl_wire_put_hot(struct rl_buf *out, const struct rl_wire_req *req);
int rl_wire_put_hot_reply(struct rl_buf *out, uint32_t id, uint64_t period_ms,
                          const struct rl_wire_hot_key *keys, size_t n);
/*
 * HANDOFF_OUT [11, id, shard, offset] and its reply [11, id, records, next]; HANDOFF_IN
 * [12, id, shard, records] and its reply [12, id, imported, skipped] (docs/PROTOCOL.md).
 * records: binary, at most RL_WIRE_RECORDS_MAX bytes (else -EMSGSIZE).
 */
int rl_wire_put_handoff_out(struct rl_buf *out, uint32_t id, uint32_t shard, uint64_t offset);
int rl_wire_put_handoff_out_reply(struct rl_buf *out, uint32_t id, const void *records,
                                  size_t len, uint64_t next);
int rl_wire_put_handoff_in(struct rl_buf *out, uint32_t id, uint32_t shard, const void *records,
                           size_t len);
/* HANDOFF_IN with its 5th element `final` (true: the shard's last message) and, when from
 * is not NULL, its 6th: the sender's member name (at most 63 bytes). */
int rl_wire_put_handoff_in_final(struct rl_buf *out, uint32_t id, uint32_t shard,
                                 const void *records, size_t len, bool final, const char *from);
int rl_wire_put_handoff_in_reply(struct rl_buf *out, uint32_t id, uint64_t imported,
                                 uint64_t skipped);
/*
 * Any request: req encoded by its op's encoder above (the op table's req column), or -EINVAL
 * for an op that is not a request (not in the table, or ERROR).
 */
int rl_wire_put_req(struct rl_buf *out, const struct rl_wire_req *req);
int rl_wire_put_throttled_reply(struct rl_buf *out, uint32_t id, const struct rl_wire_episode *eps,
                                size_t n, const struct rl_wire_str *missing, size_t nmissing,
                                size_t *nput);

#endif
