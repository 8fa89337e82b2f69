/*
 * rls_h2: Envoy's rate limit service, envoy.service.ratelimit.v3.RateLimitService/
 * ShouldRateLimit, served over HTTP/2 with prior knowledge (h2c; libnghttp2) on the
 * connections of front.c accepted on [router] rls. One nghttp2 server session per
 * connection; each stream is one call (rls_call.c) once its request is complete.
 *
 * Bounds: one message of at most RLS_MSG_MAX bytes per call, RLS_STREAMS_MAX streams at once
 * per connection, RLS_HEADERS_MAX decoded header bytes per request, trailers included (a request
 * past it is reset; RLS_STRIKES_MAX such requests end the connection with GOAWAY
 * ENHANCE_YOUR_CALM), RLS_BUFFERED_MAX request bytes held per connection (and the worker's share of
 * [clients] buffer_memory: front.c), a call's memory beyond its arena (its request decoded, its
 * answer) held the same way until its stream closes (a request that does not fit: answered
 * RESOURCE_EXHAUSTED before anything is decided), output: reading
 * stops while RLS_WRITE_QUEUE_MAX bytes are unsent. Per loop turn, a connection handles
 * RL_CONN_TURN_BYTES of input (front.c's turn budget), its decoded header bytes and RLS_FRAME_COST
 * per control frame charged to it too. Control frames (PING, SETTINGS, WINDOW_UPDATE, PRIORITY,
 * RST_STREAM, empty DATA and CONTINUATION, HEADERS on a stream already opened) draw on a bucket of
 * RLS_CTRL_BURST, refilled by RLS_CTRL_RATE a second and RLS_CTRL_PER_CALL per request: a
 * connection that empties it is ended with GOAWAY ENHANCE_YOUR_CALM; nghttp2 bounds the SETTINGS
 * entries of a frame and the ACKs queued (RLS_MAX_SETTINGS, RLS_MAX_ACKS). The connection is
 * "opening" (front.c: the pre-AUTH share, auth_timeout) until its first call that passes
 * authentication: a valid token, or without [client] sections any complete ShouldRateLimit request.
 * Timeouts ([clients]): a connection with no call open closes after idle_timeout (with a GOAWAY); a
 * call whose request is not complete within frame_timeout is reset, and so is one whose answer is
 * not out frame_timeout after it was ready. Not for the call itself (rls_call.c), nor for the
 * socket (front.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <nghttp2/nghttp2.h>

#include "auth.h"
#include "front.h"
#include "router_int.h"
#include "rls_call.h"
#include "rls_front.h"
#include "rls_mem.h"

#define RLS_MSG_MAX (64u * 1024)           /* bytes of one gRPC message */
#define RLS_STREAMS_MAX 100u               /* concurrent streams (calls) per connection */
#define RLS_HEADERS_MAX (16u * 1024)       /* header bytes of one request */
#define RLS_BUFFERED_MAX (1024u * 1024)    /* request bytes held per connection */
#define RLS_WRITE_QUEUE_MAX (1024u * 1024) /* unsent output at which reading stops */
#define RLS_TICK_MS 1000u
#define RLS_STRIKES_MAX 8u      /* requests past RLS_HEADERS_MAX before GOAWAY */
#define RLS_CTRL_BURST 1024u    /* control frames a connection may send at once */
#define RLS_CTRL_RATE 16u       /* and a second, over time */
#define RLS_CTRL_PER_CALL 8u    /* and per request stream it opens */
#define RLS_FRAME_COST 64u      /* turn budget a control frame costs beyond its bytes */
#define RLS_MAX_SETTINGS 16u    /* entries in one SETTINGS frame (nghttp2) */
#define RLS_MAX_ACKS 128u       /* PING/SETTINGS ACKs nghttp2 may queue (nghttp2) */

static const char rls_path[] = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

struct rls_conn;

struct rls_stream {
    struct rls_conn *c;
    struct rls_stream *prev, *next;
    int32_t id;
    uint64_t opened_ms;
    uint32_t hbytes;
    bool bad_method, bad_path, got_ctype, bad_ctype, complete, responded, too_big;
    bool bad_timeout; /* a grpc-timeout header that is not one */
    bool regular;     /* a header other than a pseudo-header was seen */
    uint8_t pseudo;   /* the pseudo-headers seen (pseudo_header's bits) */
    char *authz;      /* the authorization header's value (NUL-terminated copy); NULL: none */
    size_t authz_len;
    uint8_t *body;
    size_t len, cap;
    struct rl_rls_call call;
    size_t out_off;       /* of call.out, sent */
    size_t call_held;     /* of call.spilled_bytes, held against the connection's bounds */
    uint64_t answered_ms; /* when the answer was submitted: its output must go in
                             frame_timeout (h2_tick) */
    bool reset;           /* h2_tick reset it: once */
};

/* A connection's HTTP/2 state (front.c's connection carries it). */
struct rls_conn {
    struct rl_front_conn *fc;
    struct rl_router *r;
    nghttp2_session *ng;
    struct rl_rls_mem mem;
    nghttp2_mem ngmem;
    struct rls_stream *streams;
    uint32_t nstreams;
    uint32_t strikes;    /* requests reset for their header bytes */
    uint64_t ctrl;       /* control frames the bucket holds, in 1/1000 */
    uint64_t ctrl_ms;    /* loop time the bucket was last refilled */
    bool calm;           /* GOAWAY ENHANCE_YOUR_CALM queued: input is dropped */
};

/* c keeps breaking the limits: GOAWAY ENHANCE_YOUR_CALM (once; what it sends then is
 * dropped, and the connection closes once the GOAWAY is written). */
static void
rls_calm(struct rls_conn *c)
{
    if (c->calm) {
        return;
    }
    c->calm = true;
    c->r->rls->n.streams[RL_RLS_CONN_CALM]++;
    nghttp2_session_terminate_session(c->ng, NGHTTP2_ENHANCE_YOUR_CALM);
}

/* The control-frame bucket: refilled by time, then n frames (1000 each) taken from it;
 * false when it is empty. */
static bool
rls_ctrl_take(struct rls_conn *c, uint64_t n)
{
    uint64_t now = uv_now(c->r->loop), cap = (uint64_t)RLS_CTRL_BURST * 1000u;

    c->ctrl += (now - c->ctrl_ms) * RLS_CTRL_RATE; /* 1000 per frame: RATE per 1000 ms */
    c->ctrl_ms = now;
    if (c->ctrl > cap) {
        c->ctrl = cap;
    }
    if (c->ctrl < n) {
        c->ctrl = 0;
        return false;
    }
    c->ctrl -= n;
    return true;
}

/* ---- the answer of a call ----------------------------------------------------------------- */

/* A gRPC status in decimal as a header's value: from a table (static storage, which nghttp2
 * may keep without a copy: *stays) for the codes gRPC defines, which is every answer, else
 * written into buf (16 bytes). */
static nghttp2_nv
status_nv(int status, char *buf)
{
    static const char *const codes[] = {"0", "1", "2",  "3",  "4",  "5",  "6",  "7", "8",
                                        "9", "10", "11", "12", "13", "14", "15", "16"};
    nghttp2_nv nv = {(uint8_t *)"grpc-status", (uint8_t *)buf, 11, 0, NGHTTP2_NV_FLAG_NO_COPY_NAME};

    if (status >= 0 && status < (int)(sizeof(codes) / sizeof(codes[0]))) {
        nv.value = (uint8_t *)codes[status];
        nv.valuelen = status < 10 ? 1 : 2;
        nv.flags |= NGHTTP2_NV_FLAG_NO_COPY_VALUE;
        return nv;
    }
    nv.valuelen = (size_t)snprintf(buf, 16, "%d", status);
    return nv;
}

static ssize_t
out_read(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
         nghttp2_data_source *src, void *arg)
{
    struct rls_stream *s = src->ptr;
    size_t n = s->call.out_len - s->out_off;
    char status[16];

    (void)arg;
    if (n > len) {
        n = len;
    }
    memcpy(buf, s->call.out + s->out_off, n);
    s->out_off += n;
    if (s->out_off == s->call.out_len) {
        nghttp2_nv tr[] = {status_nv(s->call.status, status)};

        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(ng, id, tr, 1) != 0) {
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        }
    }
    return (ssize_t)n;
}

/* A header of constant name and value: nghttp2 keeps the pointers (no copy). */
#define NV_CONST(n, v)                                                                             \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1,                              \
            NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE                           \
    }
#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NO_COPY_NAME     \
    }

/* Holds what s's call took from malloc beyond its arena (its request decoded, descriptors,
 * parts, answer) against the connection's RLS_BUFFERED_MAX and the worker's share of
 * [clients] buffer_memory, as a request's bytes are held while it is read (on_data), until
 * the stream closes. Never closes another connection to make room. False: past them. */
static bool
stream_hold_call(struct rls_stream *s)
{
    size_t want = s->call.spilled_bytes;

    if (want != s->call_held) {
        if (rl_front_hold_spare(s->c->fc, s->call_held, want) != 0) {
            return false;
        }
        s->call_held = want;
    }
    return true;
}

/* Sends s's answer: its message when out is set, else trailers only with status/message. A
 * decided answer is always sent: its memory is held as far as the bounds let it (the call's
 * request, held since stream_call, bounds how many calls a connection has open, and so their
 * answers), never traded for an error that Envoy would take for "allow". */
static void
stream_respond(struct rl_rls_call *call)
{
    struct rls_stream *s = call->owner;
    struct rls_conn *c = s->c;
    char status[16];
    int rc;

    if (s->responded) {
        return;
    }
    s->responded = true;
    s->answered_ms = uv_now(c->r->loop);
    (void)stream_hold_call(s); /* past the bounds: what the request held stays held */
    if (call->out != NULL) {
        nghttp2_nv hdrs[] = {NV_CONST(":status", "200"),
                             NV_CONST("content-type", "application/grpc")};
        nghttp2_data_provider dp = {.source.ptr = s, .read_callback = out_read};

        rc = nghttp2_submit_response(c->ng, s->id, hdrs, 2, &dp);
    } else {
        nghttp2_nv hdrs[] = {NV_CONST(":status", "200"),
                             NV_CONST("content-type", "application/grpc"),
                             status_nv(call->status, status),
                             NV("grpc-message", call->message)};

        rc = nghttp2_submit_response(c->ng, s->id, hdrs, call->message[0] ? 4 : 3, NULL);
    }
    if (rc != 0) {
        nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    }
}

/* A node answered one of s's parts (outside nghttp2's reading): what is ready goes out at
 * the end of this loop turn, with the other answers the turn gave this connection. */
static void
stream_answered(struct rl_rls_call *call)
{
    struct rls_stream *s = call->owner;

    rl_front_mark(s->c->fc);
}

/* The request of s is complete: checks its gRPC framing and starts the call. */
static void
stream_call(struct rls_stream *s)
{
    uint32_t mlen;
    int rc;

    if (s->bad_method || s->bad_path) {
        rl_rls_call_fail(&s->call, GRPC_UNIMPLEMENTED, "unknown method (only POST %s)", rls_path);
        return;
    }
    if (!s->got_ctype || s->bad_ctype) {
        rl_rls_call_fail(&s->call, GRPC_INVALID_ARGUMENT, "content-type must be application/grpc");
        return;
    }
    rc = rl_rls_call_auth(&s->call, rl_front_peer_addr(s->c->fc), rl_front_peer(s->c->fc), s->authz,
                          s->authz_len);
    if (s->authz != NULL) {
        rl_auth_wipe(s->authz, s->authz_len);
        free(s->authz);
        s->authz = NULL;
    }
    if (rc != 0) {
        return;
    }
    rl_front_authenticated(s->c->fc); /* the connection's opening is over (front.c) */
    if (s->bad_timeout) {
        rl_rls_call_fail(&s->call, GRPC_INVALID_ARGUMENT,
                         "malformed grpc-timeout (1 to 8 digits, then H, M, S, m, u or n)");
        return;
    }
    if (s->too_big) {
        rl_rls_call_fail(&s->call, GRPC_RESOURCE_EXHAUSTED, "message larger than %u bytes",
                         RLS_MSG_MAX);
        return;
    }
    if (s->len < 5) {
        rl_rls_call_fail(&s->call, GRPC_INVALID_ARGUMENT, "no request message");
        return;
    }
    if (s->body[0] != 0) {
        rl_rls_call_fail(&s->call, GRPC_UNIMPLEMENTED, "compressed messages are not supported");
        return;
    }
    mlen = (uint32_t)s->body[1] << 24 | (uint32_t)s->body[2] << 16 | (uint32_t)s->body[3] << 8 |
           s->body[4];
    if ((size_t)mlen + 5 != s->len) {
        rl_rls_call_fail(&s->call, GRPC_INVALID_ARGUMENT, "the request is not one gRPC message");
        return;
    }
    rc = rl_rls_call_decode(&s->call, s->body + 5, mlen);
    free(s->body);
    s->body = NULL;
    rl_front_hold(s->c->fc, s->cap, 0);
    s->cap = s->len = 0;
    if (rc == 0 && !stream_hold_call(s)) {
        rl_rls_call_release(&s->call);
        rl_rls_call_fail(&s->call, GRPC_RESOURCE_EXHAUSTED,
                         "the connection holds too many requests and answers");
        return;
    }
    if (rc == 0) {
        uint64_t steps = rl_envoy_match_steps();

        rl_rls_call_start(&s->call);
        /* its descriptors' wildcard matching, charged as input read: a connection whose calls
         * cost the loop much waits that many turns' budgets before it reads again */
        rl_front_charge(s->c->fc, rl_envoy_match_steps() - steps);
    }
}

/* Orphans s's call and frees it. */
static void
stream_free(struct rls_stream *s)
{
    struct rls_conn *c = s->c;

    rl_rls_call_release(&s->call);
    if (s->authz != NULL) {
        rl_auth_wipe(s->authz, s->authz_len);
        free(s->authz);
    }
    if (s->prev != NULL) {
        s->prev->next = s->next;
    } else {
        c->streams = s->next;
    }
    if (s->next != NULL) {
        s->next->prev = s->prev;
    }
    c->nstreams--;
    rl_front_hold(c->fc, s->cap + s->call_held, 0);
    free(s->body);
    rl_rls_mem_free(s, &c->mem);
}

/*
 * A grpc-timeout header (gRPC over HTTP/2: 1 to 8 digits and a unit, H M S m u n) in ms,
 * rounded down; -1: not one.
 */
static int64_t
parse_timeout(const uint8_t *v, size_t len)
{
    uint64_t n = 0, us;

    if (len < 2 || len > 9) {
        return -1;
    }
    for (size_t i = 0; i + 1 < len; i++) {
        if (v[i] < '0' || v[i] > '9') {
            return -1;
        }
        n = n * 10 + (uint64_t)(v[i] - '0');
    }
    switch (v[len - 1]) {
    case 'H':
        us = n * 3600u * 1000000u;
        break;
    case 'M':
        us = n * 60u * 1000000u;
        break;
    case 'S':
        us = n * 1000000u;
        break;
    case 'm':
        us = n * 1000u;
        break;
    case 'u':
        us = n;
        break;
    case 'n':
        us = n / 1000u;
        break;
    default:
        return -1;
    }
    return (int64_t)(us / 1000u); /* 99999999 H fits: under 2^59 us */
}

/* ---- nghttp2's callbacks ------------------------------------------------------------------ */

static int
on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f, void *arg)
{
    struct rls_conn *c = arg;
    struct rls_stream *s;

    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) {
        return 0;
    }
    /* a request earns its connection room for the control frames that go with it */
    c->ctrl += (uint64_t)RLS_CTRL_PER_CALL * 1000u;
    if (c->nstreams >= RLS_STREAMS_MAX) {
        c->r->rls->n.streams[RL_RLS_STREAM_REFUSED]++;
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* nghttp2 resets the stream */
    }
    s = rl_rls_mem_calloc(1, sizeof(*s), &c->mem);
    if (s == NULL) {
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    s->c = c;
    s->call.r = c->r;
    s->call.owner = s;
    s->call.done = stream_respond;
    s->call.answered = stream_answered;
    s->id = f->hd.stream_id;
    s->opened_ms = uv_now(c->r->loop);
    s->next = c->streams;
    if (c->streams != NULL) {
        c->streams->prev = s;
    }
    c->streams = s;
    c->nstreams++;
    nghttp2_session_set_stream_user_data(ng, s->id, s);
    return 0;
}

/* The pseudo-headers every request has (pseudo_header's bits: :method, :path, :scheme). */
#define RLS_PSEUDO_REQUIRED 0x7u

/* A request's pseudo-header (RFC 9113, 8.3.1): false when it is malformed (unknown, empty,
 * or seen before); :method and :path are noted for stream_call (POST and the service's path
 * only). One missing is on_frame's to find, once the request's headers are all in. */
static bool
pseudo_header(struct rls_stream *s, const uint8_t *name, size_t nlen, const uint8_t *value,
              size_t vlen)
{
    static const struct {
        const char *name;
        size_t len;
    } known[] = {{":method", 7}, {":path", 5}, {":scheme", 7}, {":authority", 10}};

    for (unsigned k = 0; k < sizeof(known) / sizeof(known[0]); k++) {
        if (nlen == known[k].len && memcmp(name, known[k].name, nlen) == 0) {
            if (s->pseudo & (1u << k)) {
                return false;
            }
            s->pseudo |= (uint8_t)(1u << k);
            if (k == 0) {
                s->bad_method = !(vlen == 4 && memcmp(value, "POST", 4) == 0);
            } else if (k == 1) {
                s->bad_path =
                    !(vlen == sizeof(rls_path) - 1 && memcmp(value, rls_path, vlen) == 0);
            }
            return vlen != 0; /* none of them may be empty */
        }
    }
    return false;
}

/* A connection-specific header (RFC 9113, 8.2.2): a request with one is malformed; te may
 * only say "trailers". */
static bool
connection_specific(const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen)
{
    switch (nlen) {
    case 2:
        return memcmp(name, "te", 2) == 0 &&
               !(vlen == 8 && strncasecmp((const char *)value, "trailers", 8) == 0);
    case 7:
        return memcmp(name, "upgrade", 7) == 0;
    case 10:
        return memcmp(name, "connection", 10) == 0 || memcmp(name, "keep-alive", 10) == 0;
    case 16:
        return memcmp(name, "proxy-connection", 16) == 0;
    case 17:
        return memcmp(name, "transfer-encoding", 17) == 0;
    default:
        return false;
    }
}

/* Resets s's stream as malformed (RFC 9113, 8.1.1): never answered. */
static int
malformed(nghttp2_session *ng, int32_t id)
{
    nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, id, NGHTTP2_PROTOCOL_ERROR);
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
}

/* Every header of a request's header block and of its trailers: the decoded bytes of both
 * count against RLS_HEADERS_MAX and the turn's budget. Trailers are checked, not read. */
static int
on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
          const uint8_t *value, size_t vlen, uint8_t flags, void *arg)
{
    struct rls_stream *s;
    bool trailer;

    (void)flags;
    if (f->hd.type != NGHTTP2_HEADERS) {
        return 0;
    }
    trailer = f->headers.cat != NGHTTP2_HCAT_REQUEST;
    s = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    rl_front_charge(((struct rls_conn *)arg)->fc, nlen + vlen + 32); /* the turn's budget */
    if (s == NULL) {
        return 0;
    }
    s->hbytes += (uint32_t)(nlen + vlen + 32);
    if (s->hbytes > RLS_HEADERS_MAX) {
        if (++s->c->strikes >= RLS_STRIKES_MAX) {
            rls_calm(s->c);
        }
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset */
    }
    if (nlen != 0 && name[0] == ':') {
        /* a pseudo-header: before the others, each once, only a request's, not in trailers */
        if (trailer || s->regular || !pseudo_header(s, name, nlen, value, vlen)) {
            return malformed(ng, f->hd.stream_id);
        }
        return 0;
    }
    s->regular = true;
    if (connection_specific(name, nlen, value, vlen)) {
        return malformed(ng, f->hd.stream_id);
    }
    if (trailer) {
        return 0;
    }
    if (nlen == 13 && memcmp(name, "authorization", 13) == 0) {
        char *a = malloc(vlen + 1); /* vlen is within RLS_HEADERS_MAX */

        if (a == NULL) {
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        }
        memcpy(a, value, vlen);
        a[vlen] = '\0';
        if (s->authz != NULL) {
            rl_auth_wipe(s->authz, s->authz_len);
            free(s->authz);
        }
        s->authz = a;
        s->authz_len = vlen;
    } else if (nlen == 12 && memcmp(name, "grpc-timeout", 12) == 0) {
        int64_t ms = parse_timeout(value, vlen);

        s->bad_timeout = ms < 0;
        s->call.has_timeout = ms >= 0;
        s->call.timeout_ms = ms >= 0 ? (uint64_t)ms : 0;
    } else if (nlen == 12 && memcmp(name, "content-type", 12) == 0) {
        s->got_ctype = true;
        s->bad_ctype = !(vlen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
                         (vlen == 16 || value[16] == '+' || value[16] == ';'));
    }
    return 0;
}

static int
on_data(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *arg)
{
    struct rls_conn *c = arg;
    struct rls_stream *s = nghttp2_session_get_stream_user_data(ng, id);

    (void)flags;
    if (s == NULL || s->too_big || s->responded) {
        return 0;
    }
    if (s->len + len > RLS_MSG_MAX + 5) {
        s->too_big = true; /* answered at the end of the request; what follows is dropped */
        return 0;
    }
    if (s->len + len > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        uint8_t *b;

        while (cap < s->len + len) {
            cap *= 2;
        }
        if (cap > RLS_MSG_MAX + 5) {
            cap = RLS_MSG_MAX + 5;
        }
        /* per connection, and this loop's share of [clients] buffer_memory: the doubled size
         * if it fits as it is, else exactly what is needed (which may make room) */
        if (rl_front_hold_spare(c->fc, s->cap, cap) != 0) {
            cap = s->len + len;
            if (rl_front_hold(c->fc, s->cap, cap) != 0) {
                nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, id, NGHTTP2_ENHANCE_YOUR_CALM);
                return 0;
            }
        }
        b = realloc(s->body, cap);
        if (b == NULL) {
            rl_front_hold(c->fc, cap, s->cap);
            nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, id, NGHTTP2_INTERNAL_ERROR);
            return 0;
        }
        s->body = b;
        s->cap = cap;
    }
    memcpy(s->body + s->len, data, len);
    s->len += len;
    return 0;
}

static int
on_frame(nghttp2_session *ng, const nghttp2_frame *f, void *arg)
{
    struct rls_stream *s;

    if (f->hd.type == NGHTTP2_RST_STREAM) {
        ((struct rls_conn *)arg)->r->rls->n.streams[RL_RLS_STREAM_RESET_BY_CLIENT]++;
        return 0;
    }
    if (f->hd.type == NGHTTP2_HEADERS) {
        s = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
        /* malformed, never answered (RFC 9113, 8.1 and 8.3.1): a request without :method,
         * :scheme or :path, trailers that do not end the stream */
        if (s != NULL && !s->complete &&
            (f->headers.cat == NGHTTP2_HCAT_REQUEST
                 ? (s->pseudo & RLS_PSEUDO_REQUIRED) != RLS_PSEUDO_REQUIRED
                 : !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))) {
            s->complete = s->responded = true;
            malformed(ng, f->hd.stream_id);
            return 0;
        }
    }
    if ((f->hd.type != NGHTTP2_DATA && f->hd.type != NGHTTP2_HEADERS) ||
        !(f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        return 0;
    }
    s = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    if (s == NULL || s->complete) {
        return 0;
    }
    s->complete = true;
    stream_call(s);
    return 0;
}

static int
on_stream_close(nghttp2_session *ng, int32_t id, uint32_t err, void *arg)
{
    struct rls_conn *c = arg;
    struct rls_stream *s = nghttp2_session_get_stream_user_data(ng, id);

    (void)err;
    if (s != NULL) {
        nghttp2_session_set_stream_user_data(ng, id, NULL);
        stream_free(s);
        rl_front_touch(c->fc);
    }
    return 0;
}

/* Every RST_STREAM the router sends, whoever decided it (a timeout, a bound, nghttp2):
 * REFUSED_STREAM (nghttp2, past the streams allowed before the client acknowledged them)
 * counts as refused, the others as reset. */
static int
on_frame_sent(nghttp2_session *ng, const nghttp2_frame *f, void *arg)
{
    struct rl_router *r = ((struct rls_conn *)arg)->r;

    (void)ng;
    if (f->hd.type == NGHTTP2_RST_STREAM) {
        r->rls->n.streams[f->rst_stream.error_code == NGHTTP2_REFUSED_STREAM
                              ? RL_RLS_STREAM_REFUSED
                              : RL_RLS_STREAM_RESET_BY_SERVER]++;
    }
    return 0;
}

/* Every frame's header: a control frame costs the turn budget RLS_FRAME_COST and a token of
 * the connection's bucket; an empty bucket ends the connection. A request's own frames are
 * not control frames: the HEADERS that opens its stream, CONTINUATION and DATA with bytes,
 * the DATA that ends it; its trailers are, as is any HEADERS on a stream already opened
 * (else empty HEADERS on one stream would cost nothing). */
static int
on_begin_frame(nghttp2_session *ng, const nghttp2_frame_hd *hd, void *arg)
{
    struct rls_conn *c = arg;

    if ((hd->type == NGHTTP2_DATA && (hd->length > 0 || (hd->flags & NGHTTP2_FLAG_END_STREAM))) ||
        (hd->type == NGHTTP2_HEADERS && hd->length > 0 &&
         hd->stream_id > nghttp2_session_get_last_proc_stream_id(ng)) ||
        (hd->type == NGHTTP2_CONTINUATION && hd->length > 0) || hd->type == NGHTTP2_GOAWAY) {
        return 0;
    }
    rl_front_charge(c->fc, RLS_FRAME_COST);
    if (!rls_ctrl_take(c, 1000u)) {
        rls_calm(c);
    }
    return 0;
}

static nghttp2_session_callbacks *rls_cbs; /* the same for every session; never freed */
static nghttp2_option *rls_opts;           /* likewise */

static void
rls_make_callbacks(void)
{
    if (nghttp2_session_callbacks_new(&rls_cbs) != 0) {
        rls_cbs = NULL;
        return;
    }
    nghttp2_session_callbacks_set_on_begin_headers_callback(rls_cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(rls_cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(rls_cbs, on_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(rls_cbs, on_frame);
    nghttp2_session_callbacks_set_on_stream_close_callback(rls_cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(rls_cbs, on_frame_sent);
    nghttp2_session_callbacks_set_on_begin_frame_callback(rls_cbs, on_begin_frame);
    if (nghttp2_option_new(&rls_opts) != 0) {
        nghttp2_session_callbacks_del(rls_cbs);
        rls_cbs = NULL;
        return;
    }
    nghttp2_option_set_max_settings(rls_opts, RLS_MAX_SETTINGS);
    nghttp2_option_set_max_outbound_ack(rls_opts, RLS_MAX_ACKS);
    /* HTTP's rules on top of HTTP/2 are this front's (on_header: exactly one :method, POST,
     * one :path, the service's, no other pseudo-header than :scheme and :authority, and
     * stream_call: content-type application/grpc): nghttp2's own checks of every header's
     * name and value were a tenth of the router's instructions per call, for headers that
     * are never used, forwarded or logged (docs/ENVOY.md, "Errors") */
    nghttp2_option_set_no_http_messaging(rls_opts, 1);
}
/* ---- the connection (front.c's callbacks) -------------------------------------------------- */

static int
h2_open(struct rl_front_conn *fc)
{
    static uv_once_t once = UV_ONCE_INIT;
    nghttp2_settings_entry set[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, RLS_STREAMS_MAX},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, RLS_HEADERS_MAX},
        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
    };
    struct rls_conn *c;

    uv_once(&once, rls_make_callbacks);
    if (rls_cbs == NULL) {
        return UV_ECANCELED;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return UV_ENOMEM;
    }
    c->fc = fc;
    c->r = rl_front_router(fc);
    c->ctrl = (uint64_t)RLS_CTRL_BURST * 1000u;
    c->ctrl_ms = uv_now(c->r->loop);
    c->ngmem.mem_user_data = &c->mem;
    c->ngmem.malloc = rl_rls_mem_malloc;
    c->ngmem.free = rl_rls_mem_free;
    c->ngmem.calloc = rl_rls_mem_calloc;
    c->ngmem.realloc = rl_rls_mem_realloc;
    if (nghttp2_session_server_new3(&c->ng, rls_cbs, c, rls_opts, &c->ngmem) != 0) {
        rl_rls_mem_drop(&c->mem);
        free(c);
        return UV_ENOMEM;
    }
    nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, set, sizeof(set) / sizeof(set[0]));
    rl_front_set_proto(fc, c);
    return 0;
}

static int
h2_bytes(struct rl_front_conn *fc, const uint8_t *data, size_t len)
{
    struct rls_conn *c = rl_front_proto(fc);

    if (c->calm) {
        return 0; /* GOAWAY ENHANCE_YOUR_CALM queued: the rest is dropped */
    }
    /* a protocol error: nghttp2 has queued a GOAWAY that is not waited for */
    return nghttp2_session_mem_recv(c->ng, data, len) < 0 ? -1 : 0;
}

static int
h2_produce(struct rl_front_conn *fc)
{
    struct rls_conn *c = rl_front_proto(fc);

    for (;;) {
        const uint8_t *d;
        ssize_t n = nghttp2_session_mem_send(c->ng, &d);

        if (n < 0) {
            return -1;
        }
        if (n == 0) {
            return 0;
        }
        if (rl_front_write(fc, d, (size_t)n) != 0) {
            return -1;
        }
    }
}

static bool
h2_finished(struct rl_front_conn *fc)
{
    struct rls_conn *c = rl_front_proto(fc);

    return !nghttp2_session_want_read(c->ng) && !nghttp2_session_want_write(c->ng);
}

static bool
h2_busy(struct rl_front_conn *fc)
{
    struct rls_conn *c = rl_front_proto(fc);

    return c->nstreams != 0;
}

static void
h2_idle(struct rl_front_conn *fc)
{
    struct rls_conn *c = rl_front_proto(fc);

    nghttp2_session_terminate_session(c->ng, NGHTTP2_NO_ERROR);
}

/* Calls whose request is late are reset, and so are calls whose answer is still not out
 * frame_timeout after it was ready (the client keeps its flow-control window shut, or does
 * not read): the answer's memory goes with the stream. */
static void
h2_tick(struct rl_front_conn *fc, uint64_t now, uint64_t frame_timeout_ms)
{
    struct rls_conn *c = rl_front_proto(fc);

    for (struct rls_stream *s = c->streams; s != NULL; s = s->next) {
        if (!s->complete && now - s->opened_ms >= frame_timeout_ms) {
            s->complete = true;
            nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
        } else if (s->responded && !s->reset && s->answered_ms != 0 &&
                   now - s->answered_ms >= frame_timeout_ms) {
            s->reset = true;
            nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
        }
    }
}

static void
h2_close(struct rl_front_conn *fc)
{
    struct rls_conn *c = rl_front_proto(fc);

    while (c->streams != NULL) {
        stream_free(c->streams);
    }
    nghttp2_session_del(c->ng);
    rl_rls_mem_drop(&c->mem);
    free(c);
}

/* The gRPC front's per-loop state: its counters and calls' deadline heap (rls_front.h). */
static int
h2_new_loop(struct rl_router *r)
{
    r->rls = rl_rls_front_new();
    return r->rls != NULL ? 0 : -ENOMEM;
}

static void
h2_free_loop(struct rl_router *r)
{
    rl_rls_front_free(r->rls);
    r->rls = NULL;
}

const struct rl_front_ops rl_rls_h2_ops = {
    .name = "rls",
    .limits =
        {
            .write_queue_max = RLS_WRITE_QUEUE_MAX,
            .held_max = RLS_BUFFERED_MAX,
            .tick_ms = RLS_TICK_MS,
            .turn_bytes = RL_CONN_TURN_BYTES,
        },
    .on_open = h2_open,
    .on_bytes = h2_bytes,
    .produce = h2_produce,
    .finished = h2_finished,
    .busy = h2_busy,
    .on_idle = h2_idle,
    .on_tick = h2_tick,
    .on_close = h2_close,
    .new_loop = h2_new_loop,
    .close_loop = rl_rls_front_close,
    .free_loop = h2_free_loop,
};
