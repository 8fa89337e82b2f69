/*
 * rls_int: what the files of a ShouldRateLimit call share, and nothing else includes:
 * rls_call.c (a call: who calls, its descriptors matched, its parts sent and answered) above
 * rls_reply.c (the answer: the RateLimitResponse built from the parts, or a gRPC error).
 * Not for HTTP/2 (rls_h2.c) nor the deadline heap (rls_wait.c).
 */
#ifndef RL_RLS_INT_H
#define RL_RLS_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "envoycfg.h"
#include "rls_call.h"

typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor rls_descriptor;

/* One limit of one descriptor of a call: a CHECK in flight, or answered. */
struct rl_rls_part {
    struct rl_rls_call *call;
    struct rl_pending *p; /* in flight; NULL once answered (or never sent) */
    uint32_t desc;        /* the request's descriptor it belongs to */
    const struct rl_envoy_limit *lim;
    uint32_t code;   /* enum rl_wire_code */
    bool unsendable; /* a limit no CHECK can carry: answered by inline_failure, not a failure */
    bool peek;       /* 0 hits: over when nothing is left (docs/ENVOY.md, "Charging...") */
    uint64_t remaining, reset_ms, retry_ms;
};

/* Per descriptor of a call: what matched. */
struct rls_desc {
    const struct rl_envoy_limit *limits; /* nlimits of them; none: OK, no current_limit */
    size_t nlimits;
    bool unlimited;
    bool shadow;
    bool quota;                /* quota_mode: over limit refuses only with every quota one */
    bool report;               /* its last entry is the report marker: its hits are ADJUSTed */
    bool detailed;             /* detailed_metric: its hits counted by full key (rls_metrics.c) */
    struct rl_envoy_limit ovr; /* Envoy's RateLimitOverride, when the request gave one */
    const struct rl_envoy_desc *matched; /* in the configuration, for `replaces` */
};

/* A string field that protoc-c reads as bytes (proto/README.md: the domain, an entry's key
 * and value), so that a NUL byte in it is one more byte, not its end: its bytes, "" when
 * empty (protobuf-c leaves an empty field's data NULL). Not NUL-terminated. */
static inline const char *
rls_bytes(ProtobufCBinaryData b)
{
    return b.len != 0 ? (const char *)b.data : "";
}

/* b holds exactly the NUL-terminated s. */
static inline bool
rls_bytes_is(ProtobufCBinaryData b, const char *s)
{
    return b.len == strlen(s) && memcmp(rls_bytes(b), s, b.len) == 0;
}

/* The cost of descriptor d: its own hits_addend, else the request's, else 1. */
static inline uint64_t
rls_hits_of(const rls_request *req, const rls_descriptor *d)
{
    if (d->hits_addend != NULL) {
        return d->hits_addend->value;
    }
    return req->hits_addend != 0 ? req->hits_addend : 1;
}

/* What decided a call (rls_reply.c): descriptor desc, through the limit of part (NULL:
 * no descriptor with a limit), its status's code and limit_remaining. */
struct rls_decided {
    size_t desc;
    const struct rl_rls_part *part;
    bool over;
    uint32_t remaining;
};

/* rls_meta.c: the response's dynamic_metadata for call s (docs/ENVOY.md, "Response
 * metadata"), RateLimitResponse field 6 encoded by hand. rls_meta_bound: the most bytes
 * rls_meta_write may use (room for escapes included); rls_meta_write: writes the field
 * (tag, length, Struct) so that it ends at end, using at most the bound's bytes before end,
 * and returns its length (the field's bytes are [end - length, end)). */
size_t rls_meta_bound(const struct rl_rls_call *s, const struct rls_decided *dec);
size_t rls_meta_write(uint8_t *end, const struct rl_rls_call *s, const struct rls_decided *dec);

/* rls_meta.c: the rest of a RateLimitResponse written by hand in the same way: the fields
 * rls_reply.c builds (overall_code, statuses, response_headers_to_add), the bytes protobuf-c
 * packs for them (check_rls_pack compares the two); the others (request_headers_to_add,
 * raw_body, a quota, a header's raw_value) are never built and not written.
 * rls_response_bound: the most bytes rls_response_write uses; rls_response_write: writes
 * the fields so that they end at end and returns their length. */
size_t rls_response_bound(const Envoy__Service__Ratelimit__V3__RateLimitResponse *resp);
size_t rls_response_write(uint8_t *end,
                          const Envoy__Service__Ratelimit__V3__RateLimitResponse *resp);

/* rls_reply.c: every part of s is answered: builds the RateLimitResponse (or the gRPC
 * error [router] rls_failure = error gives) and hands it over (s->done). */
void rls_reply_finish(struct rl_rls_call *s);

#endif
