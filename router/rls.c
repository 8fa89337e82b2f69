/*
 * rls: Envoy's rate limit service, envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit,
 * served by a router worker over HTTP/2 with prior knowledge (h2c; libnghttp2) on the sockets
 * the process accepts on [router] rls (rproc.c hands them out as it does the clients').
 *
 * A call's RateLimitRequest names a domain of [cluster] envoy_config (envoycfg.h) and lists
 * descriptors. Each descriptor is matched as envoyproxy/ratelimit matches it; each limit
 * of the descriptor that matched becomes one "part": an inline-limited CHECK (service = the
 * domain, user = upstream's counter key, cost = hits_addend) forwarded like any other CHECK
 * (forward.c: rl_forward_inline) to the owner of (service, user), all parts of a call at
 * once. The pending record points back to its part (rl_pending.sink); when the last part is
 * answered (the node, or the failure policy at the deadline) the RateLimitResponse goes out.
 * A stream or connection that goes away orphans its parts (sink = NULL): their answers are
 * then dropped like those of a client that left.
 *
 * Bounds: one message of at most RLS_MSG_MAX bytes per call, RLS_STREAMS_MAX streams at once
 * per connection, RLS_HEADERS_MAX header bytes per request, RLS_BUFFERED_MAX request bytes
 * held per connection, output: reading stops while RLS_WRITE_QUEUE_MAX bytes are unsent.
 * Timeouts ([clients]): a connection with no call open closes after idle_timeout; a call
 * whose request is not complete within frame_timeout is reset. Not for the matching nor the
 * YAML (envoycfg.c), nor for the routing (forward.c).
 */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "clock.h"
#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "envoycfg.h"
#include "log.h"
#include "router_int.h"
#include "rproc.h"
#include "rules.h"
#include "shardmap.h"

#define RLS_MSG_MAX (64u * 1024)           /* bytes of one gRPC message */
#define RLS_STREAMS_MAX 100u               /* concurrent streams (calls) per connection */
#define RLS_HEADERS_MAX (16u * 1024)       /* header bytes of one request */
#define RLS_BUFFERED_MAX (1024u * 1024)    /* request bytes held per connection */
#define RLS_WRITE_QUEUE_MAX (1024u * 1024) /* unsent output at which reading stops */
#define RLS_DESCRIPTORS_MAX 64u            /* descriptors of one request */
#define RLS_HITS_MAX 1000000u              /* hits_addend (the CHECK's cost bound) */
#define RLS_TICK_MS 1000u
#define RLS_READ_BUF (64u * 1024)

enum {
    GRPC_OK = 0,
    GRPC_UNKNOWN = 2,
    GRPC_INVALID_ARGUMENT = 3,
    GRPC_RESOURCE_EXHAUSTED = 8,
    GRPC_FAILED_PRECONDITION = 9,
    GRPC_UNIMPLEMENTED = 12,
    GRPC_INTERNAL = 13,
};

static const char rls_path[] = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest rls_request;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse rls_response;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus rls_status;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit rls_limit;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor rls_descriptor;

struct rls_conn;
struct rls_stream;

/* The per-loop state: the connections, one read buffer. */
struct rl_rls {
    struct rls_conn *conns;
    uint32_t nconns;
    uint64_t buffered; /* request bytes held by every connection of this loop */
    char rbuf[RLS_READ_BUF];
    bool rbuf_busy;
};

/* One limit of one descriptor of a call: a CHECK in flight, or answered. */
struct rl_rls_part {
    struct rls_stream *s;
    struct rl_pending *p; /* in flight; NULL once answered (or never sent) */
    uint32_t desc;        /* the request's descriptor it belongs to */
    const struct rl_envoy_limit *lim;
    uint32_t code; /* enum rl_wire_code */
    uint64_t remaining, reset_ms, retry_ms;
};

/* Per descriptor of a call: what matched. */
struct rls_desc {
    const struct rl_envoy_limit *limits; /* nlimits of them; none: OK, no current_limit */
    size_t nlimits;
    bool unlimited;
    bool shadow;
    struct rl_envoy_limit ovr; /* Envoy's RateLimitOverride, when the request gave one */
    const struct rl_envoy_desc *matched; /* in the configuration, for `replaces` */
};

struct rls_stream {
    struct rls_conn *c;
    struct rls_stream *prev, *next;
    int32_t id;
    uint64_t opened_ms;
    uint32_t hbytes;
    bool bad_method, bad_path, got_ctype, bad_ctype, complete, responded, too_big;
    uint8_t *body;
    size_t len, cap;
    /* the call */
    struct rl_envoy_shared *cfg; /* held while the call lives: its parts point into it */
    rls_request *req;
    struct rls_desc *descs;
    struct rl_rls_part *parts;
    uint32_t nparts;
    uint32_t outstanding; /* parts in flight, plus one while they are being sent */
    /* the reply: a message (5-byte prefix included) then trailers, or trailers only */
    uint8_t *out;
    size_t out_len, out_off;
    int status;
    char message[160];
};

struct rls_wreq {
    uv_write_t req;
    struct rls_conn *c;
    size_t len;
    uint8_t data[];
};

struct rls_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    struct rl_router *r;
    nghttp2_session *ng;
    struct rls_conn *prev, *next;
    struct rls_stream *streams;
    uint32_t nstreams;
    uint64_t buffered;  /* request bytes held by its streams */
    uint64_t active_ms; /* loop time of the last read, or of the last call closed */
    size_t writing;     /* bytes handed to uv_write and not yet written */
    bool reading;
    bool closing;
    int handles; /* tcp and timer not yet closed */
};

static void conn_close(struct rls_conn *c);
static void conn_flush(struct rls_conn *c);

/* ---- the answer of a call ----------------------------------------------------------------- */

static ssize_t
out_read(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
         nghttp2_data_source *src, void *arg)
{
    struct rls_stream *s = src->ptr;
    size_t n = s->out_len - s->out_off;
    char status[16];

    (void)arg;
    if (n > len) {
        n = len;
    }
    memcpy(buf, s->out + s->out_off, n);
    s->out_off += n;
    if (s->out_off == s->out_len) {
        nghttp2_nv tr[] = {
            {(uint8_t *)"grpc-status", (uint8_t *)status, 11, 0, NGHTTP2_NV_FLAG_NONE},
        };

        tr[0].valuelen = (size_t)snprintf(status, sizeof(status), "%d", s->status);
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(ng, id, tr, 1) != 0) {
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        }
    }
    return (ssize_t)n;
}

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE             \
    }

/* Sends s's answer: its message when out is set, else trailers only with status/message. */
static void
stream_respond(struct rls_stream *s)
{
    struct rls_conn *c = s->c;
    char status[16];
    int rc;

    if (s->responded) {
        return;
    }
    s->responded = true;
    snprintf(status, sizeof(status), "%d", s->status);
    if (s->out != NULL) {
        nghttp2_nv hdrs[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
        nghttp2_data_provider dp = {.source.ptr = s, .read_callback = out_read};

        rc = nghttp2_submit_response(c->ng, s->id, hdrs, 2, &dp);
    } else {
        nghttp2_nv hdrs[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                             NV("grpc-status", status), NV("grpc-message", s->message)};

        rc = nghttp2_submit_response(c->ng, s->id, hdrs, s->message[0] ? 4 : 3, NULL);
    }
    if (rc != 0) {
        nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    }
}

/* Answers s with a gRPC error (trailers only). */
static void stream_fail(struct rls_stream *s, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
stream_fail(struct rls_stream *s, int status, const char *fmt, ...)
{
    va_list ap;

    s->status = status;
    s->c->r->rls_calls[2]++;
    va_start(ap, fmt);
    vsnprintf(s->message, sizeof(s->message), fmt, ap);
    va_end(ap);
    /* grpc-message is percent-encoded: keep it to printable ASCII other than '%' */
    for (char *q = s->message; *q != '\0'; q++) {
        if (*q < 0x20 || *q > 0x7e || *q == '%') {
            *q = '?';
        }
    }
    stream_respond(s);
}

static uint32_t
clamp_u32(uint64_t v)
{
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* Builds the RateLimitResponse once every part is answered, and sends it. */
static void
stream_finish(struct rls_stream *s)
{
    const struct rl_conf *conf = s->c->r->conf;
    size_t n = s->req->n_descriptors;
    rls_response resp = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
    rls_status *st = calloc(n ? n : 1, sizeof(*st));
    rls_status **stp = calloc(n ? n : 1, sizeof(*stp));
    rls_limit *lims = calloc(n ? n : 1, sizeof(*lims));
    Google__Protobuf__Duration *durs = calloc(n ? n : 1, sizeof(*durs));
    uint64_t now = rl_clock_real_ms();
    size_t len;

    if (st == NULL || stp == NULL || lims == NULL || durs == NULL) {
        goto nomem;
    }
    resp.overall_code = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
    for (size_t i = 0; i < n; i++) {
        const struct rls_desc *d = &s->descs[i];
        const struct rl_rls_part *pick = NULL;
        bool over = false;

        envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(&st[i]);
        stp[i] = &st[i];
        st[i].code = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
        if (d->unlimited) {
            st[i].limit_remaining = UINT32_MAX; /* as upstream */
            continue;
        }
        /* The descriptor's answer: its first part over limit, else the one with the least
         * remaining (several limits on one descriptor, the extension). */
        for (uint32_t k = 0; k < s->nparts; k++) {
            const struct rl_rls_part *pt = &s->parts[k];
            bool pover = pt->code == RL_WIRE_LIMITED || pt->code == RL_WIRE_FAIL_CLOSED;

            if (pt->desc != i) {
                continue;
            }
            if (pover && !over) {
                pick = pt;
                over = true;
            } else if (!over && (pick == NULL || pt->remaining < pick->remaining)) {
                pick = pt;
            }
        }
        if (pick == NULL) {
            continue; /* no limit: OK without current_limit, as upstream */
        }
        envoy__service__ratelimit__v3__rate_limit_response__rate_limit__init(&lims[i]);
        lims[i].name = pick->lim->name != NULL ? pick->lim->name : (char *)"";
        lims[i].requests_per_unit = pick->lim->requests_per_unit;
        lims[i].unit =
            (Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit__Unit)pick->lim->unit;
        st[i].current_limit = &lims[i];
        st[i].limit_remaining = over ? 0 : clamp_u32(pick->remaining);
        {
            /* Until the window resets: the node's reset (or retry when refused), else the
             * unit's boundary on the wall clock, as upstream's CalculateReset. */
            uint64_t ms = over && pick->retry_ms != 0 ? pick->retry_ms : pick->reset_ms;
            uint64_t unit_ms = rl_envoy_unit_seconds(pick->lim->unit) * 1000;

            if (ms == 0 && unit_ms != 0) {
                ms = unit_ms - now % unit_ms;
            }
            google__protobuf__duration__init(&durs[i]);
            durs[i].seconds = (int64_t)(ms / 1000);
            durs[i].nanos = (int32_t)(ms % 1000) * 1000000;
            st[i].duration_until_reset = &durs[i];
        }
        if (over && !d->shadow) {
            st[i].code = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT;
            resp.overall_code =
                ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT;
        }
    }
    (void)conf;
    resp.n_statuses = n;
    resp.statuses = stp;
    len = envoy__service__ratelimit__v3__rate_limit_response__get_packed_size(&resp);
    s->out = malloc(5 + len);
    if (s->out == NULL) {
        goto nomem;
    }
    s->out[0] = 0;
    s->out[1] = (uint8_t)(len >> 24);
    s->out[2] = (uint8_t)(len >> 16);
    s->out[3] = (uint8_t)(len >> 8);
    s->out[4] = (uint8_t)len;
    envoy__service__ratelimit__v3__rate_limit_response__pack(&resp, s->out + 5);
    s->out_len = 5 + len;
    s->status = GRPC_OK;
    s->c->r->rls_calls[resp.overall_code ==
                               ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT
                           ? 1
                           : 0]++;
    free(st);
    free(stp);
    free(lims);
    free(durs);
    stream_respond(s);
    return;
nomem:
    free(st);
    free(stp);
    free(lims);
    free(durs);
    stream_fail(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
}

/* One part fewer in flight; the answer goes once none is left. */
static void
stream_part_done(struct rls_stream *s)
{
    if (--s->outstanding == 0 && !s->responded) {
        stream_finish(s);
    }
}

void
rl_rls_answer(struct rl_router *r, struct rl_pending *p, const struct rl_wire_check_reply *rep,
              uint32_t err)
{
    struct rl_rls_part *pt = p->sink;
    struct rls_stream *s = pt->s;

    p->sink = NULL;
    pt->p = NULL;
    if (rep != NULL) {
        pt->code = rep->code;
        pt->remaining = rep->remaining;
        pt->reset_ms = rep->reset_ms;
        pt->retry_ms = rep->retry_after_ms;
    } else {
        /* The node refused the CHECK (err): no decision, as when it cannot be reached. */
        (void)err;
        pt->code = r->conf->inline_fail_closed ? RL_WIRE_FAIL_CLOSED : RL_WIRE_FAIL_OPEN;
        pt->retry_ms = r->conf->inline_fail_closed ? r->conf->session_timeout_ms : 0;
    }
    stream_part_done(s);
    conn_flush(s->c);
}

/* ---- a call ------------------------------------------------------------------------------- */

/* The cost of descriptor d: its own hits_addend, else the request's, else 1. */
static uint64_t
hits_of(const rls_request *req, const rls_descriptor *d)
{
    if (d->hits_addend != NULL) {
        return d->hits_addend->value;
    }
    return req->hits_addend != 0 ? req->hits_addend : 1;
}

/* The inline limit a configured limit counts with: the algorithm given, else fixed_window;
 * N per unit. 0: it cannot be sent (no requests allowed, or a window past 2^32 - 1 ms). */
static int
inline_limit(const struct rl_envoy_limit *l, struct rl_wire_limit *w)
{
    uint64_t ms = rl_envoy_unit_seconds(l->unit) * 1000;

    if (l->requests_per_unit == 0 || ms == 0 || ms > UINT32_MAX) {
        return -1;
    }
    memset(w, 0, sizeof(*w));
    w->set = true;
    w->algo = (uint8_t)(l->algo_set ? l->algo : RL_ALGO_FIXED_WINDOW);
    w->limit = l->requests_per_unit;
    w->window_ms = (uint32_t)ms;
    if (l->burst != 0 && (w->algo == RL_ALGO_TOKEN_BUCKET || w->algo == RL_ALGO_GCRA ||
                          w->algo == RL_ALGO_LEAKY_BUCKET)) {
        w->has_burst = true;
        w->burst = l->burst;
    }
    return 0;
}

/* Upstream's `replaces`: a named limit is not applied when a limit matched by any
 * descriptor of the same request names it in its `replaces`. */
static bool
replaced(const struct rls_stream *s, size_t n, const char *name)
{
    for (size_t i = 0; name != NULL && name[0] != '\0' && i < n; i++) {
        const struct rl_envoy_desc *m = s->descs[i].matched;

        for (size_t j = 0; m != NULL && j < m->nlimits; j++) {
            for (size_t k = 0; k < m->limits[j].nreplaces; k++) {
                if (strcmp(m->limits[j].replaces[k], name) == 0) {
                    return true;
                }
            }
        }
    }
    return false;
}

static void
stream_call(struct rls_stream *s)
{
    struct rl_router *r = s->c->r;
    const struct rl_envoy_config *cfg;
    rls_request *req;
    uint32_t mlen;
    size_t dlen, nparts = 0;

    if (s->bad_method || s->bad_path) {
        stream_fail(s, GRPC_UNIMPLEMENTED, "unknown method (only POST %s)", rls_path);
        return;
    }
    if (!s->got_ctype || s->bad_ctype) {
        stream_fail(s, GRPC_INVALID_ARGUMENT, "content-type must be application/grpc");
        return;
    }
    if (s->too_big) {
        stream_fail(s, GRPC_RESOURCE_EXHAUSTED, "message larger than %u bytes", RLS_MSG_MAX);
        return;
    }
    if (s->len < 5) {
        stream_fail(s, GRPC_INVALID_ARGUMENT, "no request message");
        return;
    }
    if (s->body[0] != 0) {
        stream_fail(s, GRPC_UNIMPLEMENTED, "compressed messages are not supported");
        return;
    }
    mlen = (uint32_t)s->body[1] << 24 | (uint32_t)s->body[2] << 16 | (uint32_t)s->body[3] << 8 |
           s->body[4];
    if ((size_t)mlen + 5 != s->len) {
        stream_fail(s, GRPC_INVALID_ARGUMENT, "the request is not one gRPC message");
        return;
    }
    req = envoy__service__ratelimit__v3__rate_limit_request__unpack(NULL, mlen, s->body + 5);
    if (req == NULL) {
        stream_fail(s, GRPC_INVALID_ARGUMENT, "cannot decode a RateLimitRequest");
        return;
    }
    s->req = req;
    s->cfg = r->envoy;
    if (s->cfg != NULL) {
        rl_envoy_shared_hold(s->cfg);
    }
    cfg = s->cfg != NULL ? s->cfg->c : NULL;
    free(s->body);
    s->body = NULL;
    s->c->buffered -= s->cap;
    s->c->r->rls->buffered -= s->cap;
    s->cap = s->len = 0;
    /* upstream's two checks, with its words */
    dlen = strlen(req->domain);
    if (dlen == 0) {
        stream_fail(s, GRPC_UNKNOWN, "rate limit domain must not be empty");
        return;
    }
    if (req->n_descriptors == 0) {
        stream_fail(s, GRPC_UNKNOWN, "rate limit descriptor list must not be empty");
        return;
    }
    if (req->n_descriptors > RLS_DESCRIPTORS_MAX) {
        stream_fail(s, GRPC_RESOURCE_EXHAUSTED, "more than %u descriptors", RLS_DESCRIPTORS_MAX);
        return;
    }
    if (dlen > RL_WIRE_SERVICE_MAX) {
        stream_fail(s, GRPC_INVALID_ARGUMENT, "domain longer than %u bytes", RL_WIRE_SERVICE_MAX);
        return;
    }
    if (rl_conf_rule(r->conf, req->domain, dlen, NULL, 0) != NULL) {
        /* Configured rules are authoritative: an inline limit for the service is refused. */
        stream_fail(s, GRPC_FAILED_PRECONDITION,
                    "domain is a [service] of cluster.conf: configured rules apply to it");
        return;
    }
    s->descs = calloc(req->n_descriptors, sizeof(*s->descs));
    if (s->descs == NULL) {
        stream_fail(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    for (size_t i = 0; i < req->n_descriptors; i++) {
        const rls_descriptor *d = req->descriptors[i];
        struct rl_envoy_entry e[RL_ENVOY_ENTRIES_MAX];
        const struct rl_envoy_desc *m;

        if (hits_of(req, d) > RLS_HITS_MAX) {
            stream_fail(s, GRPC_INVALID_ARGUMENT, "hits_addend larger than %u", RLS_HITS_MAX);
            return;
        }
        if (d->n_entries == 0 || d->n_entries > RL_ENVOY_ENTRIES_MAX) {
            continue;
        }
        for (size_t k = 0; k < d->n_entries; k++) {
            e[k].key = d->entries[k]->key;
            e[k].key_len = strlen(d->entries[k]->key);
            e[k].value = d->entries[k]->value;
            e[k].value_len = strlen(d->entries[k]->value);
        }
        if (d->limit != NULL) {
            /* Envoy's RateLimitOverride: that limit, under the same counter key, in a known
             * domain only, never in shadow mode (as upstream); an unknown unit limits nothing */
            struct rl_envoy_limit *o = &s->descs[i].ovr;

            if (cfg == NULL || rl_envoy_domain(cfg, req->domain, dlen) == NULL ||
                rl_envoy_unit_seconds((enum rl_envoy_unit)d->limit->unit) == 0) {
                continue;
            }
            o->requests_per_unit = d->limit->requests_per_unit;
            o->unit = (enum rl_envoy_unit)d->limit->unit;
            o->algo = RL_ALGO_FIXED_WINDOW;
            o->name = (char *)"";
            s->descs[i].limits = o;
            s->descs[i].nlimits = 1;
            nparts++;
            continue;
        }
        m = cfg != NULL ? rl_envoy_match(cfg, req->domain, dlen, e, d->n_entries, NULL) : NULL;
        if (m == NULL) {
            continue;
        }
        s->descs[i].matched = m;
        s->descs[i].shadow = m->shadow_mode;
        if (m->limits[0].unlimited) {
            s->descs[i].unlimited = true;
            continue;
        }
        s->descs[i].limits = m->limits;
        s->descs[i].nlimits = m->nlimits;
        nparts += m->nlimits;
    }
    s->parts = calloc(nparts ? nparts : 1, sizeof(*s->parts));
    if (s->parts == NULL) {
        stream_fail(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    /* Every part at once; one extra count so that answers given meanwhile (a connection
     * to a node lost while sending) cannot finish the call half-built. */
    s->outstanding = 1;
    for (size_t i = 0; i < req->n_descriptors; i++) {
        const struct rls_desc *m = &s->descs[i];
        const rls_descriptor *d = req->descriptors[i];
        const char *share[RL_ENVOY_ENTRIES_MAX];
        struct rl_envoy_entry e[RL_ENVOY_ENTRIES_MAX];
        char key[RL_WIRE_USER_MAX + 1];
        size_t klen;

        if (m->nlimits == 0) {
            continue;
        }
        for (size_t k = 0; k < d->n_entries; k++) {
            e[k].key = d->entries[k]->key;
            e[k].key_len = strlen(d->entries[k]->key);
            e[k].value = d->entries[k]->value;
            e[k].value_len = strlen(d->entries[k]->value);
        }
        memset(share, 0, sizeof(share[0]) * d->n_entries);
        if (d->limit == NULL) {
            rl_envoy_match(cfg, req->domain, dlen, e, d->n_entries, share);
        }
        klen = rl_envoy_counter_key(key, sizeof(key), req->domain, dlen, e, d->n_entries, share);
        if (klen > RL_WIRE_USER_MAX) {
            /* Too long for a CHECK's user: its head and a hash of the whole. */
            char *full = malloc(klen + 1);
            uint64_t h1, h2;

            if (full == NULL) {
                stream_fail(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
                s->outstanding--;
                return;
            }
            rl_envoy_counter_key(full, klen + 1, req->domain, dlen, e, d->n_entries, share);
            h1 = rl_shardmap_key_hash("rls", 3, full, klen);
            h2 = rl_shardmap_key_hash("rls2", 4, full, klen);
            free(full);
            snprintf(key + RL_WIRE_USER_MAX - 34, 35, "#%016" PRIx64 "%016" PRIx64, h1, h2);
            klen = RL_WIRE_USER_MAX - 1;
        }
        for (size_t j = 0; j < m->nlimits; j++) {
            if (replaced(s, req->n_descriptors, m->limits[j].name)) {
                continue; /* as if it were not there (upstream: OK, no current_limit) */
            }
            struct rl_rls_part *pt = &s->parts[s->nparts++];
            struct rl_wire_req w;
            struct rl_wire_check_reply now;
            char ep[16];

            pt->s = s;
            pt->desc = (uint32_t)i;
            pt->lim = &m->limits[j];
            memset(&w, 0, sizeof(w));
            w.op = RL_WIRE_OP_CHECK;
            w.id = (uint32_t)s->nparts;
            w.service.ptr = req->domain;
            w.service.len = dlen;
            w.user.ptr = key;
            w.user.len = klen;
            if (m->nlimits > 1) {
                /* several limits on one descriptor are counted apart, even equal ones */
                w.endpoint.len = (size_t)snprintf(ep, sizeof(ep), "limit%zu", j);
                w.endpoint.ptr = ep;
            }
            w.cost = (uint32_t)hits_of(req, d);
            if (inline_limit(pt->lim, &w.limit) != 0) {
                if (pt->lim->requests_per_unit == 0) {
                    pt->code = RL_WIRE_LIMITED; /* upstream: 0 per unit refuses everything */
                } else {
                    /* unit: year under fixed_window: past what a CHECK's window can say */
                    pt->code =
                        r->conf->inline_fail_closed ? RL_WIRE_FAIL_CLOSED : RL_WIRE_FAIL_OPEN;
                }
                continue;
            }
            s->outstanding++;
            if (rl_forward_inline(r, &w, pt, &pt->p, &now) != 0) {
                pt->code = now.code;
                pt->retry_ms = now.retry_after_ms;
                s->outstanding--;
            }
        }
    }
    stream_part_done(s);
}

/* Orphans s's parts still in flight and frees it. */
static void
stream_free(struct rls_stream *s)
{
    struct rls_conn *c = s->c;

    for (uint32_t k = 0; k < s->nparts; k++) {
        if (s->parts[k].p != NULL) {
            s->parts[k].p->sink = NULL;
        }
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
    c->buffered -= s->cap;
    c->r->rls->buffered -= s->cap;
    if (s->req != NULL) {
        envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(s->req, NULL);
    }
    rl_envoy_shared_drop(s->cfg);
    free(s->body);
    free(s->descs);
    free(s->parts);
    free(s->out);
    free(s);
}

/* The request bytes this loop's gRPC connections may hold together: its share of
 * [clients] buffer_memory. */
static uint64_t
rls_budget(const struct rl_router *r)
{
    uint32_t n = r->proc != NULL ? rl_rproc_workers(r->proc) : 1;

    return r->opts.limits.buffer_memory / (n ? n : 1);
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
    if (c->nstreams >= RLS_STREAMS_MAX) {
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* nghttp2 resets the stream */
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    s->c = c;
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

static int
on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
          const uint8_t *value, size_t vlen, uint8_t flags, void *arg)
{
    struct rls_stream *s;

    (void)flags;
    (void)arg;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) {
        return 0;
    }
    s = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    if (s == NULL) {
        return 0;
    }
    s->hbytes += (uint32_t)(nlen + vlen + 32);
    if (s->hbytes > RLS_HEADERS_MAX) {
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset */
    }
    if (nlen == 7 && memcmp(name, ":method", 7) == 0) {
        s->bad_method = !(vlen == 4 && memcmp(value, "POST", 4) == 0);
    } else if (nlen == 5 && memcmp(name, ":path", 5) == 0) {
        s->bad_path = !(vlen == sizeof(rls_path) - 1 && memcmp(value, rls_path, vlen) == 0);
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
        /* per connection, and this loop's share of [clients] buffer_memory */
        if (c->buffered - s->cap + cap > RLS_BUFFERED_MAX ||
            c->r->rls->buffered - s->cap + cap > rls_budget(c->r)) {
            nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, id, NGHTTP2_ENHANCE_YOUR_CALM);
            return 0;
        }
        b = realloc(s->body, cap);
        if (b == NULL) {
            nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, id, NGHTTP2_INTERNAL_ERROR);
            return 0;
        }
        c->buffered = c->buffered - s->cap + cap;
        c->r->rls->buffered = c->r->rls->buffered - s->cap + cap;
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

    (void)arg;
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
        c->active_ms = uv_now(c->r->loop);
    }
    return 0;
}

static nghttp2_session_callbacks *rls_cbs; /* the same for every session; never freed */

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
}

/* ---- the connection ----------------------------------------------------------------------- */

static void
conn_handle_closed(uv_handle_t *h)
{
    struct rls_conn *c = h->data;
    struct rl_router *r = c->r;

    if (--c->handles > 0) {
        return;
    }
    free(c);
    r->handles--;
    rl_router_maybe_free(r);
}

static void
conn_close(struct rls_conn *c)
{
    struct rl_rls *g = c->r->rls;

    if (c->closing) {
        return;
    }
    c->closing = true;
    while (c->streams != NULL) {
        stream_free(c->streams);
    }
    nghttp2_session_del(c->ng);
    c->ng = NULL;
    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        g->conns = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    g->nconns--;
    __atomic_fetch_sub(&c->r->rls_conns, 1, __ATOMIC_RELAXED);
    if (c->r->proc != NULL) {
        rl_rproc_rls_closed(c->r->proc);
    }
    uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
    uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
}

static void on_read(uv_stream_t *h, ssize_t n, const uv_buf_t *buf);

static void
on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    struct rls_conn *c = h->data;
    struct rl_rls *g = c->r->rls;

    (void)hint;
    if (g->rbuf_busy) {
        buf->base = NULL;
        buf->len = 0;
        return;
    }
    g->rbuf_busy = true;
    buf->base = g->rbuf;
    buf->len = sizeof(g->rbuf);
}

static void
on_written(uv_write_t *w, int status)
{
    struct rls_wreq *q = (struct rls_wreq *)w;
    struct rls_conn *c = q->c;

    c->writing -= q->len;
    free(q);
    if (c->closing) {
        return;
    }
    if (status < 0) {
        conn_close(c);
        return;
    }
    if (c->writing == 0 && !nghttp2_session_want_read(c->ng) &&
        !nghttp2_session_want_write(c->ng)) {
        conn_close(c); /* a GOAWAY went out and nothing is left to do */
        return;
    }
    if (!c->reading && c->writing < RLS_WRITE_QUEUE_MAX) {
        c->reading = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0;
    }
}

/* Writes out what nghttp2 has to send; closes the connection when it is done with it. */
static void
conn_flush(struct rls_conn *c)
{
    struct rls_wreq *q = NULL;
    size_t len = 0, cap = 0;

    if (c->closing) {
        return;
    }
    for (;;) {
        const uint8_t *d;
        ssize_t n = nghttp2_session_mem_send(c->ng, &d);

        if (n < 0) {
            free(q);
            conn_close(c);
            return;
        }
        if (n == 0) {
            break;
        }
        if (len + (size_t)n > cap) {
            size_t ncap = cap ? cap * 2 : 4096;
            struct rls_wreq *nq;

            while (ncap < len + (size_t)n) {
                ncap *= 2;
            }
            nq = realloc(q, sizeof(*q) + ncap);
            if (nq == NULL) {
                free(q);
                conn_close(c);
                return;
            }
            q = nq;
            cap = ncap;
        }
        memcpy(q->data + len, d, (size_t)n);
        len += (size_t)n;
    }
    if (len > 0) {
        uv_buf_t b = uv_buf_init((char *)q->data, (unsigned)len);

        q->c = c;
        q->len = len;
        if (uv_write(&q->req, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0) {
            free(q);
            conn_close(c);
            return;
        }
        c->writing += len;
        if (c->writing >= RLS_WRITE_QUEUE_MAX && c->reading) {
            uv_read_stop((uv_stream_t *)&c->tcp);
            c->reading = false;
        }
    }
    if (!nghttp2_session_want_read(c->ng) && !nghttp2_session_want_write(c->ng) &&
        c->writing == 0) {
        conn_close(c);
    }
}

static void
on_read(uv_stream_t *h, ssize_t n, const uv_buf_t *buf)
{
    struct rls_conn *c = h->data;
    struct rl_rls *g = c->r->rls;

    if (buf->base == g->rbuf) {
        g->rbuf_busy = false;
    }
    if (c->closing) {
        return;
    }
    if (n < 0) {
        conn_close(c);
        return;
    }
    if (n == 0) {
        return;
    }
    c->active_ms = uv_now(c->r->loop);
    if (nghttp2_session_mem_recv(c->ng, (const uint8_t *)buf->base, (size_t)n) < 0) {
        conn_close(c); /* a protocol error: nghttp2 has queued a GOAWAY we do not wait for */
        return;
    }
    conn_flush(c);
}

/* Every second: idle connections close; calls whose request is late are reset. */
static void
conn_tick(uv_timer_t *t)
{
    struct rls_conn *c = t->data;
    const struct rl_conn_limits *lim = &c->r->opts.limits;
    uint64_t now = uv_now(c->r->loop);

    if (c->closing) {
        return;
    }
    if (c->nstreams == 0 && lim->idle_timeout_ms != 0 &&
        now - c->active_ms >= lim->idle_timeout_ms) {
        nghttp2_session_terminate_session(c->ng, NGHTTP2_NO_ERROR);
        conn_flush(c);
        if (!c->closing && c->writing == 0) {
            conn_close(c);
        }
        return;
    }
    if (lim->frame_timeout_ms != 0) {
        for (struct rls_stream *s = c->streams; s != NULL; s = s->next) {
            if (!s->complete && now - s->opened_ms >= lim->frame_timeout_ms) {
                s->complete = true;
                nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
            }
        }
        conn_flush(c);
    }
}

int
rl_rls_adopt(struct rl_router *r, uv_os_sock_t fd)
{
    static uv_once_t once = UV_ONCE_INIT;
    nghttp2_settings_entry set[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, RLS_STREAMS_MAX},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, RLS_HEADERS_MAX},
    };
    struct rls_conn *c;
    int rc;

    uv_once(&once, rls_make_callbacks);
    if (r->closing || rls_cbs == NULL) {
        return UV_ECANCELED;
    }
    if (r->rls == NULL) {
        r->rls = calloc(1, sizeof(*r->rls));
        if (r->rls == NULL) {
            return UV_ENOMEM;
        }
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return UV_ENOMEM;
    }
    c->r = r;
    rc = nghttp2_session_server_new(&c->ng, rls_cbs, c);
    if (rc != 0) {
        free(c);
        return UV_ENOMEM;
    }
    uv_tcp_init(r->loop, &c->tcp);
    c->tcp.data = c;
    rc = uv_tcp_open(&c->tcp, fd);
    if (rc != 0) {
        /* not the handle's: the caller closes fd */
        nghttp2_session_del(c->ng);
        c->handles = 1;
        r->handles++;
        c->closing = true;
        uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
        return rc;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_timer_init(r->loop, &c->timer);
    c->timer.data = c;
    c->handles = 2;
    r->handles++;
    c->active_ms = uv_now(r->loop);
    c->next = r->rls->conns;
    if (c->next != NULL) {
        c->next->prev = c;
    }
    r->rls->conns = c;
    r->rls->nconns++;
    __atomic_fetch_add(&r->rls_conns, 1, __ATOMIC_RELAXED);
    uv_timer_start(&c->timer, conn_tick, RLS_TICK_MS, RLS_TICK_MS);
    nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, set, sizeof(set) / sizeof(set[0]));
    c->reading = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0;
    conn_flush(c);
    return 0;
}

void
rl_rls_close(struct rl_router *r)
{
    if (r->rls == NULL) {
        return;
    }
    while (r->rls->conns != NULL) {
        conn_close(r->rls->conns);
    }
}

struct rl_envoy_shared *
rl_envoy_shared_new(struct rl_envoy_config *c)
{
    struct rl_envoy_shared *s = calloc(1, sizeof(*s));

    if (s != NULL) {
        s->c = c;
        s->refs = 1;
    }
    return s;
}

void
rl_envoy_shared_hold(struct rl_envoy_shared *s)
{
    __atomic_fetch_add(&s->refs, 1, __ATOMIC_RELAXED);
}

void
rl_envoy_shared_drop(struct rl_envoy_shared *s)
{
    if (s != NULL && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        rl_envoy_config_free(s->c);
        free(s);
    }
}

void
rl_rls_set_config(struct rl_router *r, struct rl_envoy_shared *sh)
{
    struct rl_envoy_shared *old = r->envoy;

    rl_envoy_shared_hold(sh);
    r->envoy = sh;
    rl_envoy_shared_drop(old);
}

void
rl_rls_free(struct rl_router *r)
{
    free(r->rls);
    r->rls = NULL;
}
