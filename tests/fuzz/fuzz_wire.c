/*
 * fuzz_wire: the frame splitter and the request and reply decoders of common/wire.h on any
 * bytes, as a server and a client read them from a socket. Invariants: a frame never
 * claims more than the input holds; a decoded request's strings lie inside its frame and
 * keep the documented bounds; a request that decodes re-encodes (CHECK, ADJUST, RELEASE, PING, STATS,
 * CLOCK, HELLO, AUTH, THROTTLED, HANDOFF_OUT, HANDOFF_IN) and decodes again to the same
 * values; the short readers of CHECK, ADJUST, RELEASE and their replies (wire_fast.h) take a
 * frame only when the full decoders do, with the same fields.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "ruleset.h"
#include "wire.h"
#include "wire_fast.h"
#include "fuzz.h"

static struct rl_wire_decoder dec;
static struct rl_wire_reply rep, fast_rep;
static int ready;

static void
str_inside(struct rl_wire_str s, const char *p, size_t n, uint32_t max)
{
    if (s.ptr == NULL) {
        return;
    }
    MUST(s.len <= max);
    MUST(s.ptr >= p && s.ptr + s.len <= p + n);
}

/* Re-encodes a decoded CHECK, ADJUST or RELEASE and decodes it again: the same fields. */
static void
roundtrip_check(const struct rl_wire_req *r)
{
    struct rl_wire_req again;
    struct rl_wire_fault fault;
    struct rl_buf b;
    size_t plen;

    rl_buf_init(&b);
    if (rl_wire_put_req(&b, r) == 0) {
        MUST(rl_wire_frame(b.data, b.len, &plen) == 1);
        MUST(plen + RL_WIRE_HDR_LEN == b.len);
        MUST(rl_wire_decode_req(&dec, b.data + RL_WIRE_HDR_LEN, plen, &again, &fault) == 0);
        MUST(again.op == r->op && again.id == r->id && again.cost == r->cost &&
             again.delta == r->delta);
        MUST(again.service.len == r->service.len &&
             memcmp(again.service.ptr, r->service.ptr, r->service.len) == 0);
        MUST(again.user.len == r->user.len &&
             memcmp(again.user.ptr, r->user.ptr, r->user.len) == 0);
        MUST(memcmp(&again.limit, &r->limit, sizeof(r->limit)) == 0);
        /* the tenant goes with a limit only */
        MUST(again.tenant == (r->limit.set ? r->tenant : 0));
    }
    rl_buf_deinit(&b);
}

/* Re-encodes a decoded THROTTLED and decodes it again: the same fields. */
static void
roundtrip_throttled(const struct rl_wire_req *r)
{
    struct rl_wire_req again;
    struct rl_wire_fault fault;
    struct rl_buf b;
    size_t plen;

    rl_buf_init(&b);
    if (rl_wire_put_throttled(&b, r) == 0) {
        MUST(rl_wire_frame(b.data, b.len, &plen) == 1);
        MUST(rl_wire_decode_req(&dec, b.data + RL_WIRE_HDR_LEN, plen, &again, &fault) == 0);
        MUST(again.op == RL_WIRE_OP_THROTTLED && again.id == r->id && again.top == r->top &&
             again.has_since == r->has_since && again.since_ms == r->since_ms);
        MUST((again.service.ptr == NULL) == (r->service.ptr == NULL) &&
             again.service.len == r->service.len &&
             (r->service.ptr == NULL ||
              memcmp(again.service.ptr, r->service.ptr, r->service.len) == 0));
    }
    rl_buf_deinit(&b);
}

/* Re-encodes a decoded HANDOFF_OUT or HANDOFF_IN and decodes it again: the same fields. */
static void
roundtrip_handoff(const struct rl_wire_req *r)
{
    struct rl_wire_req again;
    struct rl_wire_fault fault;
    struct rl_buf b;
    size_t plen;

    rl_buf_init(&b);
    MUST(rl_wire_put_req(&b, r) == 0);
    MUST(rl_wire_frame(b.data, b.len, &plen) == 1);
    MUST(rl_wire_decode_req(&dec, b.data + RL_WIRE_HDR_LEN, plen, &again, &fault) == 0);
    MUST(again.op == r->op && again.id == r->id && again.shard == r->shard);
    if (r->op == RL_WIRE_OP_HANDOFF_OUT) {
        MUST(again.offset == r->offset);
    } else {
        MUST(again.records.len == r->records.len &&
             (r->records.len == 0 ||
              memcmp(again.records.ptr, r->records.ptr, r->records.len) == 0));
    }
    rl_buf_deinit(&b);
}

static int
same_str(struct rl_wire_str a, struct rl_wire_str b)
{
    if (a.len == 0 && b.len == 0) {
        return (a.ptr == NULL) == (b.ptr == NULL);
    }
    return a.ptr == b.ptr && a.len == b.len;
}

/* What a short reader takes, the full decoder takes, with the same fields. */
static void
fast_agrees(const char *f, size_t plen)
{
    struct rl_wire_req fast, full;
    struct rl_wire_fault fault;
    size_t tail;

    if (rl_wire_fast_check(f, plen, &fast, &tail) == 0) {
        MUST(fast.op == RL_WIRE_OP_CHECK);
    }
    if (rl_wire_fast_keyed(f, plen, &fast, &tail) == 0) {
        MUST(tail > 2 && tail < plen);
        MUST(rl_wire_decode_req(&dec, f, plen, &full, &fault) == 0);
        MUST(full.op == fast.op &&
             (fast.op == RL_WIRE_OP_CHECK || fast.op == RL_WIRE_OP_ADJUST ||
              fast.op == RL_WIRE_OP_RELEASE));
        MUST(full.id == fast.id && full.cost == fast.cost && full.delta == fast.delta);
        MUST(same_str(full.service, fast.service) && same_str(full.user, fast.user) &&
             same_str(full.endpoint, fast.endpoint));
    }
    if (rl_wire_fast_keyed_all(f, plen, &fast, &tail) == 0) {
        MUST(tail > 2 && tail < plen);
        MUST(rl_wire_decode_req(&dec, f, plen, &full, &fault) == 0);
        MUST(full.op == fast.op && full.id == fast.id && full.cost == fast.cost &&
             full.delta == fast.delta && full.tenant == fast.tenant &&
             memcmp(&full.limit, &fast.limit, sizeof(full.limit)) == 0);
        MUST(same_str(full.service, fast.service) && same_str(full.user, fast.user) &&
             same_str(full.endpoint, fast.endpoint));
    }
    if (rl_wire_fast_check_reply(f, plen, &fast_rep, &tail) == 0) {
        MUST(fast_rep.op == RL_WIRE_OP_CHECK);
    }
    if (rl_wire_fast_keyed_reply(f, plen, &fast_rep, &tail) == 0) {
        MUST(tail > 2 && tail < plen);
        MUST(rl_wire_decode_reply(&dec, f, plen, &rep) == 0);
        MUST(rep.op == fast_rep.op && rep.id == fast_rep.id);
        MUST(memcmp(&rep.check, &fast_rep.check, sizeof(rep.check)) == 0);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    size_t off = 0, plen;
    int rc;

    if (!ready) {
        MUST(rl_wire_decoder_init(&dec) == 0);
        ready = 1;
    }
    while (off < size) {
        rc = rl_wire_frame(p + off, size - off, &plen);
        if (rc <= 0) {
            MUST(rc == 0 || rc == -EPROTO);
            break;
        }
        MUST(plen >= 1 && plen <= RL_WIRE_FRAME_MAX);
        MUST(RL_WIRE_HDR_LEN + plen <= size - off);
        const char *f = p + off + RL_WIRE_HDR_LEN;
        struct rl_wire_req req;
        struct rl_wire_fault fault;

        if (rl_wire_decode_req(&dec, f, plen, &req, &fault) == 0) {
            MUST(rl_wire_op_info(req.op) != NULL && req.op != RL_WIRE_OP_ERROR);
            str_inside(req.service, f, plen, RL_WIRE_SERVICE_MAX);
            str_inside(req.user, f, plen, RL_WIRE_USER_MAX);
            str_inside(req.endpoint, f, plen, RL_WIRE_ENDPOINT_MAX);
            str_inside(req.role, f, plen, RL_WIRE_ROLE_MAX);
            str_inside(req.token, f, plen, RL_WIRE_TOKEN_MAX);
            str_inside(req.records, f, plen, RL_WIRE_RECORDS_MAX);
            if (req.op == RL_WIRE_OP_HANDOFF_OUT || req.op == RL_WIRE_OP_HANDOFF_IN) {
                MUST(req.shard < RL_WIRE_SHARDS_MAX);
                MUST(req.op == RL_WIRE_OP_HANDOFF_OUT || req.records.ptr != NULL);
                roundtrip_handoff(&req);
            }
            if (req.op == RL_WIRE_OP_CHECK) {
                MUST(req.cost <= RL_WIRE_COST_MAX);
                MUST(req.service.len >= 1 && req.user.len >= 1);
                MUST(!req.limit.set || (req.limit.algo < RL_ALGO_COUNT && req.limit.limit >= 1 &&
                                        req.limit.window_ms >= 1 && req.limit.burst >= 1));
                roundtrip_check(&req);
            }
            if (req.op == RL_WIRE_OP_ADJUST) {
                MUST(req.delta >= -RL_WIRE_DELTA_MAX && req.delta <= RL_WIRE_DELTA_MAX);
                MUST(req.cost == 0 && req.service.len >= 1 && req.user.len >= 1);
                MUST(!req.limit.set || (req.limit.algo < RL_ALGO_COUNT && req.limit.limit >= 1 &&
                                        req.limit.window_ms >= 1 && req.limit.burst >= 1));
                roundtrip_check(&req);
            }
            if (req.op == RL_WIRE_OP_RELEASE) {
                MUST(req.cost >= 1 && req.cost <= RL_WIRE_COUNT_MAX && req.delta == 0);
                MUST(req.service.len >= 1 && req.user.len >= 1);
                MUST(!req.limit.set || (req.limit.algo < RL_ALGO_COUNT && req.limit.limit >= 1 &&
                                        req.limit.limit <= rl_algo_limit_max(req.limit.algo) &&
                                        req.limit.window_ms >= 1 && req.limit.burst >= 1));
                roundtrip_check(&req);
            }
            if (req.op == RL_WIRE_OP_THROTTLED) {
                MUST(req.top >= 1 && req.top <= RL_WIRE_TOP_MAX);
                roundtrip_throttled(&req);
            }
            if (req.op == RL_WIRE_OP_HOT) {
                MUST(req.top <= RL_WIRE_TOP_MAX); /* 0: not given */
            }
        } else {
            MUST(fault.err >= RL_WIRE_ERR_MALFORMED && fault.err <= RL_WIRE_ERR_OVERLOADED);
            MUST(memchr(fault.msg, '\0', sizeof(fault.msg)) != NULL);
        }
        fast_agrees(f, plen);
        if (rl_wire_decode_reply(&dec, f, plen, &rep) == 0) {
            MUST(rep.nstats <= RL_WIRE_STATS_MAX);
            MUST(rep.nepisodes <= RL_WIRE_TOP_MAX && rep.nmissing <= RL_WIRE_MISSING_MAX);
            MUST(rep.nhot <= RL_WIRE_TOP_MAX);
            for (size_t i = 0; i < rep.nhot; i++) {
                str_inside(rep.hot[i].service, f, plen, RL_WIRE_SERVICE_MAX);
                str_inside(rep.hot[i].user, f, plen, RL_WIRE_USER_MAX);
            }
            for (size_t i = 0; i < rep.nepisodes; i++) {
                str_inside(rep.episodes[i].service, f, plen, RL_WIRE_SERVICE_MAX);
                str_inside(rep.episodes[i].endpoint, f, plen, RL_WIRE_ENDPOINT_MAX);
                str_inside(rep.episodes[i].user, f, plen, RL_WIRE_USER_MAX);
                str_inside(rep.episodes[i].node, f, plen, RL_WIRE_NODE_MAX);
                MUST(rep.episodes[i].ended <= RL_WIRE_ENDED_IDLE);
            }
            for (size_t i = 0; i < rep.nmissing; i++) {
                str_inside(rep.missing[i], f, plen, RL_WIRE_NODE_MAX);
            }
            str_inside(rep.name, f, plen, UINT32_MAX);
            str_inside(rep.records, f, plen, RL_WIRE_RECORDS_MAX);
            str_inside(rep.message, f, plen, UINT32_MAX);
        }
        off += RL_WIRE_HDR_LEN + plen;
    }
    return 0;
}
