/*
 * rls_call: one ShouldRateLimit call (rls_call.h).
 *
 * A call's RateLimitRequest names a domain of [cluster] envoy_config (envoycfg.h) and lists
 * descriptors. Each descriptor is matched as envoyproxy/ratelimit matches it; each limit
 * of the descriptor that matched becomes one "part": an inline-limited CHECK (service = the
 * domain, user = upstream's counter key, cost = hits_addend) forwarded like any other CHECK
 * (forward.c: rl_forward_inline) to the owner of (service, user), all parts of a call at
 * once. The pending record points back to its part (rl_pending.sink); when the last part is
 * answered (the node, or the failure policy at the deadline) the RateLimitResponse is built
 * and handed to the carrier (done). A carrier that goes away orphans the parts
 * (rl_rls_call_release: sink = NULL): their answers are then dropped like those of a client
 * that left. Bounds: RLS_DESCRIPTORS_MAX descriptors, hits_addend up to RLS_HITS_MAX.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "envoycfg.h"
#include "router_int.h"
#include "rls_call.h"
#include "rules.h"
#include "shardmap.h"

#define RLS_DESCRIPTORS_MAX 64u /* descriptors of one request */
#define RLS_HITS_MAX 1000000u   /* hits_addend (the CHECK's cost bound) */

typedef Envoy__Service__Ratelimit__V3__RateLimitResponse rls_response;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus rls_status;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit rls_limit;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor rls_descriptor;

/* One limit of one descriptor of a call: a CHECK in flight, or answered. */
struct rl_rls_part {
    struct rl_rls_call *call;
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
};

void
rl_rls_call_fail(struct rl_rls_call *call, int status, const char *fmt, ...)
{
    va_list ap;

    if (call->finished) {
        return;
    }
    call->finished = true;
    call->status = status;
    call->r->rls_calls[2]++;
    va_start(ap, fmt);
    vsnprintf(call->message, sizeof(call->message), fmt, ap);
    va_end(ap);
    /* grpc-message is percent-encoded: keep it to printable ASCII other than '%' */
    for (char *q = call->message; *q != '\0'; q++) {
        if (*q < 0x20 || *q > 0x7e || *q == '%') {
            *q = '?';
        }
    }
    call->done(call);
}

static uint32_t
clamp_u32(uint64_t v)
{
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* Builds the RateLimitResponse once every part is answered, and hands it over. */
static void
call_finish(struct rl_rls_call *s)
{
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
    s->r->rls_calls[resp.overall_code ==
                            ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT
                        ? 1
                        : 0]++;
    free(st);
    free(stp);
    free(lims);
    free(durs);
    s->finished = true;
    s->done(s);
    return;
nomem:
    free(st);
    free(stp);
    free(lims);
    free(durs);
    rl_rls_call_fail(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
}

/* One part fewer in flight; the answer goes once none is left. */
static void
call_part_done(struct rl_rls_call *s)
{
    if (--s->outstanding == 0 && !s->finished) {
        call_finish(s);
    }
}

void
rl_rls_answer(struct rl_router *r, struct rl_pending *p, const struct rl_wire_check_reply *rep,
              uint32_t err)
{
    struct rl_rls_part *pt = p->sink;
    struct rl_rls_call *s = pt->call;

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
    call_part_done(s);
    s->answered(s);
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

int
rl_rls_call_decode(struct rl_rls_call *s, const uint8_t *msg, size_t len)
{
    s->req = envoy__service__ratelimit__v3__rate_limit_request__unpack(NULL, len, msg);
    if (s->req == NULL) {
        rl_rls_call_fail(s, GRPC_INVALID_ARGUMENT, "cannot decode a RateLimitRequest");
        return -1;
    }
    s->cfg = s->r->envoy;
    if (s->cfg != NULL) {
        rl_envoy_shared_hold(s->cfg);
    }
    return 0;
}

void
rl_rls_call_start(struct rl_rls_call *s)
{
    struct rl_router *r = s->r;
    const struct rl_envoy_config *cfg = s->cfg != NULL ? s->cfg->c : NULL;
    rls_request *req = s->req;
    size_t dlen, nparts = 0;

    /* upstream's two checks, with its words */
    dlen = strlen(req->domain);
    if (dlen == 0) {
        rl_rls_call_fail(s, GRPC_UNKNOWN, "rate limit domain must not be empty");
        return;
    }
    if (req->n_descriptors == 0) {
        rl_rls_call_fail(s, GRPC_UNKNOWN, "rate limit descriptor list must not be empty");
        return;
    }
    if (req->n_descriptors > RLS_DESCRIPTORS_MAX) {
        rl_rls_call_fail(s, GRPC_RESOURCE_EXHAUSTED, "more than %u descriptors",
                         RLS_DESCRIPTORS_MAX);
        return;
    }
    if (dlen > RL_WIRE_SERVICE_MAX) {
        rl_rls_call_fail(s, GRPC_INVALID_ARGUMENT, "domain longer than %u bytes",
                         RL_WIRE_SERVICE_MAX);
        return;
    }
    if (rl_conf_rule(r->conf, req->domain, dlen, NULL, 0) != NULL) {
        /* Configured rules are authoritative: an inline limit for the service is refused. */
        rl_rls_call_fail(s, GRPC_FAILED_PRECONDITION,
                         "domain is a [service] of cluster.conf: configured rules apply to it");
        return;
    }
    s->descs = calloc(req->n_descriptors, sizeof(*s->descs));
    if (s->descs == NULL) {
        rl_rls_call_fail(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    for (size_t i = 0; i < req->n_descriptors; i++) {
        const rls_descriptor *d = req->descriptors[i];
        struct rl_envoy_entry e[RL_ENVOY_ENTRIES_MAX];
        const struct rl_envoy_desc *m;

        if (hits_of(req, d) > RLS_HITS_MAX) {
            rl_rls_call_fail(s, GRPC_INVALID_ARGUMENT, "hits_addend larger than %u", RLS_HITS_MAX);
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
        rl_rls_call_fail(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
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
                rl_rls_call_fail(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
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
            struct rl_rls_part *pt = &s->parts[s->nparts++];
            struct rl_wire_req w;
            struct rl_wire_check_reply now;
            char ep[16];

            pt->call = s;
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
    call_part_done(s);
}

void
rl_rls_call_release(struct rl_rls_call *call)
{
    for (uint32_t k = 0; k < call->nparts; k++) {
        if (call->parts[k].p != NULL) {
            call->parts[k].p->sink = NULL;
        }
    }
    if (call->req != NULL) {
        envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(call->req, NULL);
        call->req = NULL;
    }
    rl_envoy_shared_drop(call->cfg);
    call->cfg = NULL;
    free(call->descs);
    call->descs = NULL;
    free(call->parts);
    call->parts = NULL;
    call->nparts = 0;
    free(call->out);
    call->out = NULL;
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
