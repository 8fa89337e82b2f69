/*
 * rls_call: one ShouldRateLimit call of the gRPC front, whatever carries it (rls_h2.c): the
 * RateLimitRequest decoded, its descriptors matched against [cluster] envoy_config as
 * envoyproxy/ratelimit matches them, each limit that matched sent as one "part" (an
 * inline-limited CHECK, rl_forward_inline), and the RateLimitResponse built once every part
 * is answered (a node, or the failure policy). Not for HTTP/2 nor gRPC framing (rls_h2.c).
 */
#ifndef RL_RLS_CALL_H
#define RL_RLS_CALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "rls_wait.h"

struct rl_router;
struct rl_envoy_config;
struct rl_rls_part;
struct rls_desc;

enum {
    GRPC_OK = 0,
    GRPC_UNKNOWN = 2,
    GRPC_INVALID_ARGUMENT = 3,
    GRPC_RESOURCE_EXHAUSTED = 8,
    GRPC_FAILED_PRECONDITION = 9,
    GRPC_UNIMPLEMENTED = 12,
    GRPC_INTERNAL = 13,
    GRPC_PERMISSION_DENIED = 7,
    GRPC_UNAVAILABLE = 14,
    GRPC_UNAUTHENTICATED = 16,
};

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest rls_request;

struct rl_rls_call {
    /* the carrier's, set before anything else */
    struct rl_router *r;
    void *owner;
    /* The answer is ready (once): out (the message, its 5-byte gRPC prefix included) and
     * status GRPC_OK, or out NULL and a gRPC error in status and message. */
    void (*done)(struct rl_rls_call *call);
    /* A node's answer to a part was taken (outside the carrier's own reading). */
    void (*answered)(struct rl_rls_call *call);
    /* The request's grpc-timeout in ms, when has_timeout: the call is answered with what is
     * known a little before it passes (rls_call.c, RLS_TIMEOUT_MARGIN), when that comes
     * before the router's deadline. */
    uint64_t timeout_ms;
    bool has_timeout;
    uint32_t tenant; /* its inline CHECKs' (rl_wire_tenant), set by rl_rls_call_auth */

    /* the answer */
    bool finished;
    int status;
    char message[160]; /* printable ASCII other than '%' */
    uint8_t *out; /* in the arena's free end when it fits (rl_rls_call_out), else malloc's */
    size_t out_len;

    /* rls_call.c's */
    struct rl_envoy_config *cfg; /* held while the call lives: its parts point into it */
    rls_request *req;
    struct rls_desc *descs;
    struct rl_rls_part *parts;
    uint32_t nparts;
    uint32_t outstanding;         /* parts in flight, plus one while they are being sent */
    struct rl_rls_wait_node wait; /* in the deadline heap (rls_wait.h) with a grpc-timeout */
    /* where req is unpacked (the message, its arrays and strings), then descs and parts
     * are allocated: a request of a few descriptors fits, the rest comes from malloc */
    ProtobufCAllocator arena_alloc;
    size_t arena_used;
    bool arena_spilled; /* something of req came from malloc: free_unpacked must walk it */
    size_t spilled_bytes; /* taken from malloc beyond the arena since the call began (an
                             upper bound of what it holds there: what the carrier accounts) */
    _Alignas(16) uint8_t arena[1024];
};

/* Answers call with a gRPC error (status, message) unless it is answered already. */
void rl_rls_call_fail(struct rl_rls_call *call, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * With [client] sections in the config, a call must carry a client's token: authz is its
 * authorization header's value ("Bearer TOKEN"; NULL: none), addr the peer's address (16
 * bytes, conn.h). 0: allowed. -1: the call is answered UNAUTHENTICATED (no or a wrong token;
 * charged to addr as a failed AUTH, and refused without a look at the token while addr is
 * past its failed AUTHs a second) or PERMISSION_DENIED (a token without services = *, which
 * inline limits need), as the binary protocol's AUTH and CHECK would. peer names the
 * address in the log (never the token).
 */
int rl_rls_call_auth(struct rl_rls_call *call, const uint8_t *addr, const char *peer,
                     const char *authz, size_t len);

/* Decodes the RateLimitRequest (len bytes, no gRPC prefix). 0, or -1 when it fails to
 * decode (the call is answered with INVALID_ARGUMENT). */
int rl_rls_call_decode(struct rl_rls_call *call, const uint8_t *msg, size_t len);

/* Checks and matches the decoded request and sends its parts; done is called once the
 * answer is ready (maybe before this returns). */
void rl_rls_call_start(struct rl_rls_call *call);

/* Orphans the call's parts still in flight and frees what it holds (out included). */
void rl_rls_call_release(struct rl_rls_call *call);

#endif
