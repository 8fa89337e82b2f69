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
#include <strings.h>

#include "auth.h"
#include "clock.h"
#include "conn.h"
#include "log.h"
#include "envoycfg.h"
#include "router_int.h"
#include "rls_call.h"
#include "rules.h"
#include "shardmap.h"

#define RLS_DESCRIPTORS_MAX 64u /* descriptors of one request */
#define RLS_HITS_MAX 1000000u   /* hits_addend (the CHECK's cost bound) */
/* A call with a grpc-timeout is answered this long before it passes (its tenth, within
 * [1, 50] ms), so the answer reaches Envoy before Envoy gives up. */
#define RLS_TIMEOUT_MARGIN_MIN 1u
#define RLS_TIMEOUT_MARGIN_MAX 50u

typedef Envoy__Service__Ratelimit__V3__RateLimitResponse rls_response;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus rls_status;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit rls_limit;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor rls_descriptor;
typedef Envoy__Config__Core__V3__HeaderValue rls_header;

/* response_headers_to_add: at most three, of at most this many bytes each */
#define RLS_HEADER_VALUE_MAX 160u

/* One limit of one descriptor of a call: a CHECK in flight, or answered. */
struct rl_rls_part {
    struct rl_rls_call *call;
    struct rl_pending *p; /* in flight; NULL once answered (or never sent) */
    uint32_t desc;        /* the request's descriptor it belongs to */
    const struct rl_envoy_limit *lim;
    uint32_t code;   /* enum rl_wire_code */
    bool unsendable; /* a limit no CHECK can carry: answered by inline_failure, not a failure */
    uint64_t remaining, reset_ms, retry_ms;
};

/* Per worker: the calls waiting for their grpc-timeout (a min-heap on deadline_ms). */
struct rl_rls_wait {
    uv_timer_t timer;
    struct rl_rls_call **heap;
    uint32_t n, cap;
    uint64_t armed_ms; /* the timer's due time; 0: not armed */
    bool closed;
};

/* Per descriptor of a call: what matched. */
struct rls_desc {
    const struct rl_envoy_limit *limits; /* nlimits of them; none: OK, no current_limit */
    size_t nlimits;
    bool unlimited;
    bool shadow;
    bool detailed;             /* detailed_metric: its hits counted by full key (rls_metrics.c) */
    struct rl_envoy_limit ovr; /* Envoy's RateLimitOverride, when the request gave one */
    const struct rl_envoy_desc *matched; /* in the configuration, for `replaces` */
};

/* The call's domain when envoy_config has it, else "" (the label of its metrics). */
static const char *
call_domain(const struct rl_rls_call *call)
{
    const rls_request *req = call->req;

    if (req != NULL && call->cfg != NULL && req->domain[0] != '\0' &&
        rl_envoy_domain(call->cfg->c, req->domain, strlen(req->domain)) != NULL) {
        return req->domain;
    }
    return "";
}

/* The full key of descriptor d of a detailed_metric, as upstream names its stats:
 * domain.key1_value1.key2_value2 (malloc'd; NULL: out of memory). */
static char *
detailed_key(const rls_request *req, const rls_descriptor *d, size_t *len)
{
    size_t n = strlen(req->domain), at;
    char *k;

    for (size_t i = 0; i < d->n_entries; i++) {
        n += 2 + strlen(d->entries[i]->key) + strlen(d->entries[i]->value);
    }
    k = malloc(n + 1);
    if (k == NULL) {
        return NULL;
    }
    at = (size_t)sprintf(k, "%s", req->domain);
    for (size_t i = 0; i < d->n_entries; i++) {
        at += (size_t)sprintf(k + at, ".%s_%s", d->entries[i]->key, d->entries[i]->value);
    }
    *len = at;
    return k;
}

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
    rl_rls_metrics_call(call->r, call_domain(call), RL_RLS_ERROR);
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

/* ---- who calls ---------------------------------------------------------------------------- */

#define RLS_AUTH_WARN_MS 10000u /* refusals are said at most this often (per worker) */

/* A refused call, said at warn at most every RLS_AUTH_WARN_MS. */
static void
auth_warn(struct rl_router *r, const char *peer, const char *why)
{
    uint64_t now = uv_now(r->loop);

    if (r->rls_auth_warned_ms == 0 || now - r->rls_auth_warned_ms >= RLS_AUTH_WARN_MS) {
        rl_log_warn("rls %s: %s (%llu refused so far; said at most every %u s)", peer, why,
                    (unsigned long long)r->rls_auth_failures, RLS_AUTH_WARN_MS / 1000);
        r->rls_auth_warned_ms = now != 0 ? now : 1;
    }
}

int
rl_rls_call_auth(struct rl_rls_call *call, const uint8_t *addr, const char *peer, const char *authz,
                 size_t len)
{
    struct rl_router *r = call->r;
    const struct rl_client_conf *cl = NULL;
    uint64_t wait;

    if (r->conf->nauth_clients == 0) {
        return 0;
    }
    wait = rl_listener_auth_wait_ms(&r->listener, addr);
    if (wait > 0) {
        r->stats.auth_failures++;
        r->rls_auth_failures++;
        auth_warn(r, peer, "refused: too many failed authentications from this address");
        rl_rls_call_fail(call, GRPC_UNAUTHENTICATED,
                         "too many failed authentications from this address (more than %u a "
                         "second); try again in %llu ms",
                         RL_CONN_AUTHFAIL_RATE, (unsigned long long)wait);
        return -1;
    }
    if (authz != NULL && len > 7 && strncasecmp(authz, "Bearer ", 7) == 0) {
        const char *t = authz + 7;
        size_t n = len - 7;

        while (n > 0 && *t == ' ') {
            t++;
            n--;
        }
        /* too short a token is never accepted (as AUTH): it could be guessed */
        if (n >= RL_AUTH_TOKEN_MIN) {
            cl = rl_conf_client_by_token(r->conf, t, n);
        }
    }
    if (cl == NULL) {
        rl_listener_auth_failed(&r->listener, addr);
        r->stats.auth_failures++;
        r->rls_auth_failures++;
        auth_warn(r, peer, authz == NULL ? "refused: no authorization" : "refused: unknown token");
        rl_rls_call_fail(call, GRPC_UNAUTHENTICATED,
                         authz == NULL ? "this router needs authorization: Bearer <token> of a "
                                         "[client]"
                                       : "unknown token");
        return -1;
    }
    if (!rl_conf_client_may(cl, NULL)) {
        /* A services list names configured services only, which refuse inline limits. */
        r->stats.unauthorized++;
        rl_rls_call_fail(call, GRPC_PERMISSION_DENIED,
                         "this client's token does not allow inline limits (services = *)");
        return -1;
    }
    return 0;
}

/* ---- the calls' deadlines ------------------------------------------------------------------ */

static void
heap_set(struct rl_rls_wait *w, uint32_t i, struct rl_rls_call *c)
{
    w->heap[i] = c;
    c->heap_at = i + 1;
}

static void
heap_up(struct rl_rls_wait *w, uint32_t i)
{
    struct rl_rls_call *c = w->heap[i];

    while (i > 0 && w->heap[(i - 1) / 2]->deadline_ms > c->deadline_ms) {
        heap_set(w, i, w->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(w, i, c);
}

static void
heap_down(struct rl_rls_wait *w, uint32_t i)
{
    struct rl_rls_call *c = w->heap[i];

    for (;;) {
        uint32_t k = 2 * i + 1;

        if (k >= w->n) {
            break;
        }
        if (k + 1 < w->n && w->heap[k + 1]->deadline_ms < w->heap[k]->deadline_ms) {
            k++;
        }
        if (w->heap[k]->deadline_ms >= c->deadline_ms) {
            break;
        }
        heap_set(w, i, w->heap[k]);
        i = k;
    }
    heap_set(w, i, c);
}

/* Takes call out of the deadline heap, if it is in. */
static void
wait_remove(struct rl_rls_call *call)
{
    struct rl_rls_wait *w = call->r->rls_wait;
    uint32_t i;

    if (call->heap_at == 0) {
        return;
    }
    i = call->heap_at - 1;
    call->heap_at = 0;
    if (--w->n != i) {
        struct rl_rls_call *m = w->heap[w->n];

        heap_set(w, i, m);
        heap_down(w, i);
        heap_up(w, m->heap_at - 1);
    }
}

static void wait_fire(uv_timer_t *t);

/* The timer, due at the earliest deadline. */
static void
wait_arm(struct rl_rls_wait *w, uint64_t now)
{
    uint64_t due;

    if (w->n == 0 || w->closed) {
        return;
    }
    due = w->heap[0]->deadline_ms;
    if (w->armed_ms != 0 && w->armed_ms <= due) {
        return;
    }
    w->armed_ms = due;
    uv_timer_start(&w->timer, wait_fire, due > now ? due - now : 0, 0);
}

/* The failure policy's answer for a part with no decision. */
static void
part_fail(const struct rl_router *r, struct rl_rls_part *pt)
{
    pt->code = r->conf->inline_fail_closed ? RL_WIRE_FAIL_CLOSED : RL_WIRE_FAIL_OPEN;
    pt->retry_ms = r->conf->inline_fail_closed ? r->conf->session_timeout_ms : 0;
}

static void call_finish(struct rl_rls_call *s);

/* Calls past their grpc-timeout: the parts still in flight are orphaned and answered by
 * the failure policy, the call with what is known. */
static void
wait_fire(uv_timer_t *t)
{
    struct rl_router *r = t->data;
    struct rl_rls_wait *w = r->rls_wait;
    uint64_t now = uv_now(r->loop);

    w->armed_ms = 0;
    while (w->n > 0 && w->heap[0]->deadline_ms <= now) {
        struct rl_rls_call *call = w->heap[0];

        wait_remove(call);
        for (uint32_t k = 0; k < call->nparts; k++) {
            struct rl_rls_part *pt = &call->parts[k];

            if (pt->p != NULL) {
                pt->p->sink = NULL;
                pt->p = NULL;
                part_fail(r, pt);
            }
        }
        call->outstanding = 0;
        if (!call->finished) {
            call->r->rls_timeouts++;
            call_finish(call);
            call->answered(call); /* may free call */
        }
    }
    wait_arm(w, now);
}

/* Puts call in the deadline heap: its grpc-timeout less the margin, when that comes before
 * the router's deadline. 0, or -1 (out of memory: the router's deadline applies). */
static int
wait_add(struct rl_rls_call *call)
{
    struct rl_router *r = call->r;
    struct rl_rls_wait *w = r->rls_wait;
    uint64_t now = uv_now(r->loop), margin = call->timeout_ms / 10, ms;

    if (margin < RLS_TIMEOUT_MARGIN_MIN) {
        margin = RLS_TIMEOUT_MARGIN_MIN;
    } else if (margin > RLS_TIMEOUT_MARGIN_MAX) {
        margin = RLS_TIMEOUT_MARGIN_MAX;
    }
    ms = call->timeout_ms > margin ? call->timeout_ms - margin : 0;
    if (ms >= r->conf->deadline_ms) {
        return 0; /* the parts' own deadline comes first */
    }
    if (w == NULL) {
        if (r->closing || (w = calloc(1, sizeof(*w))) == NULL) {
            return -1;
        }
        uv_timer_init(r->loop, &w->timer);
        w->timer.data = r;
        rl_router_hold(r);
        r->rls_wait = w;
    }
    if (w->closed) {
        return -1;
    }
    if (w->n == w->cap) {
        uint32_t cap = w->cap ? w->cap * 2 : 64;
        struct rl_rls_call **h = realloc(w->heap, cap * sizeof(*h));

        if (h == NULL) {
            return -1;
        }
        w->heap = h;
        w->cap = cap;
    }
    call->deadline_ms = now + ms;
    w->heap[w->n] = call;
    call->heap_at = ++w->n;
    heap_up(w, w->n - 1);
    wait_arm(w, now);
    return 0;
}

static void
wait_closed(uv_handle_t *h)
{
    rl_router_handle_closed(h);
}

void
rl_rls_call_close(struct rl_router *r)
{
    if (r->rls_wait != NULL && !r->rls_wait->closed) {
        r->rls_wait->closed = true;
        uv_close((uv_handle_t *)&r->rls_wait->timer, wait_closed);
    }
}

void
rl_rls_call_free(struct rl_router *r)
{
    if (r->rls_wait != NULL) {
        free(r->rls_wait->heap);
        free(r->rls_wait);
        r->rls_wait = NULL;
    }
}

/* ---- the answer --------------------------------------------------------------------------- */

/* Whether a part was left without a decision (owner unreachable, no answer in time). */
static bool
part_undecided(const struct rl_rls_part *pt)
{
    return !pt->unsendable && (pt->code == RL_WIRE_FAIL_OPEN || pt->code == RL_WIRE_FAIL_CLOSED);
}

/* The seconds a status's duration_until_reset says, rounded up. */
static uint64_t
reset_seconds(const rls_status *st)
{
    const Google__Protobuf__Duration *d = st->duration_until_reset;

    if (d == NULL) {
        return 0;
    }
    return (uint64_t)d->seconds + (d->nanos > 0 ? 1 : 0);
}

/* A String of HTTP structured fields (RFC 8941): printable ASCII, quoted, with '"' and '\\'
 * escaped; other bytes become '_'. */
static void
sf_string(char *out, size_t cap, const char *s)
{
    size_t n = 0;

    out[n++] = '"';
    for (; *s != '\0' && n + 3 < cap; s++) {
        char ch = *s;

        if (ch == '"' || ch == '\\') {
            out[n++] = '\\';
        } else if (ch < 0x20 || ch > 0x7e) {
            ch = '_';
        }
        out[n++] = ch;
    }
    out[n++] = '"';
    out[n] = '\0';
}

/*
 * [router] rls_headers: response_headers_to_add from the most restrictive status (the one
 * with a limit and the least limit_remaining, the first of equals), as envoyproxy/ratelimit
 * picks it with LIMIT_RESPONSE_HEADERS_ENABLED. ratelimit: its three default headers
 * RateLimit-Limit (requests_per_unit), RateLimit-Remaining, RateLimit-Reset (seconds).
 * draft: the IETF httpapi fields RateLimit-Policy ("name";q=N;w=unit seconds) and
 * RateLimit ("name";r=remaining;t=seconds). Returns how many were filled in h/hp/vals.
 */
static size_t
call_headers(const struct rl_conf *conf, rls_status *const *stp, size_t n, rls_header *h,
             rls_header **hp, char (*vals)[RLS_HEADER_VALUE_MAX])
{
    const rls_status *min = NULL;
    uint32_t least = UINT32_MAX;
    char name[80];
    size_t k = 0;

    if (conf->rls_headers == RL_CONF_RLS_HEADERS_OFF) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (stp[i]->current_limit != NULL && stp[i]->limit_remaining < least) {
            min = stp[i];
            least = stp[i]->limit_remaining;
        }
    }
    if (min == NULL) {
        return 0;
    }
    for (size_t i = 0; i < 3; i++) {
        envoy__config__core__v3__header_value__init(&h[i]);
        hp[i] = &h[i];
        h[i].value = vals[i];
    }
    if (conf->rls_headers == RL_CONF_RLS_HEADERS_RATELIMIT) {
        h[0].key = (char *)"RateLimit-Limit";
        snprintf(vals[0], RLS_HEADER_VALUE_MAX, "%" PRIu32, min->current_limit->requests_per_unit);
        h[1].key = (char *)"RateLimit-Remaining";
        snprintf(vals[1], RLS_HEADER_VALUE_MAX, "%" PRIu32, min->limit_remaining);
        h[2].key = (char *)"RateLimit-Reset";
        snprintf(vals[2], RLS_HEADER_VALUE_MAX, "%" PRIu64, reset_seconds(min));
        k = 3;
    } else {
        const char *nm = min->current_limit->name;

        sf_string(name, sizeof(name), nm != NULL && nm[0] != '\0' ? nm : "default");
        h[0].key = (char *)"RateLimit-Policy";
        snprintf(vals[0], RLS_HEADER_VALUE_MAX, "%s;q=%" PRIu32 ";w=%" PRIu64, name,
                 min->current_limit->requests_per_unit,
                 rl_envoy_unit_seconds((enum rl_envoy_unit)min->current_limit->unit));
        h[1].key = (char *)"RateLimit";
        snprintf(vals[1], RLS_HEADER_VALUE_MAX, "%s;r=%" PRIu32 ";t=%" PRIu64, name,
                 min->limit_remaining, reset_seconds(min));
        k = 2;
    }
    return k;
}

static uint64_t hits_of(const rls_request *req, const rls_descriptor *d);

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
    rls_header hdrs[3], *hdrp[3];
    bool shadowed = false;
    char hvals[3][RLS_HEADER_VALUE_MAX];
    size_t len;

    wait_remove(s);
    if (s->r->conf->rls_fail_error) {
        for (uint32_t k = 0; k < s->nparts; k++) {
            if (part_undecided(&s->parts[k])) {
                free(st);
                free(stp);
                free(lims);
                free(durs);
                rl_rls_call_fail(s, GRPC_UNAVAILABLE,
                                 "no decision for every limit in time ([router] rls_failure = "
                                 "error)");
                return;
            }
        }
    }
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
        shadowed |= over && d->shadow;
        if (d->detailed) {
            size_t klen = 0;
            char *key = detailed_key(s->req, s->req->descriptors[i], &klen);

            if (key != NULL) {
                rl_rls_metrics_detailed(s->r, key, klen,
                                        !over       ? RL_RLS_WITHIN_LIMIT
                                        : d->shadow ? RL_RLS_SHADOW_MODE
                                                    : RL_RLS_DETAILED_OVER,
                                        hits_of(s->req, s->req->descriptors[i]));
                free(key);
            }
        }
    }
    resp.n_statuses = n;
    resp.statuses = stp;
    resp.n_response_headers_to_add = call_headers(s->r->conf, stp, n, hdrs, hdrp, hvals);
    resp.response_headers_to_add = hdrp;
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
    {
        const char *dom = call_domain(s);
        enum rl_rls_result res = RL_RLS_OK;

        if (resp.overall_code ==
            ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT) {
            res = RL_RLS_OVER_LIMIT;
        } else if (dom[0] == '\0') {
            res = RL_RLS_UNKNOWN_DOMAIN;
        } else if (shadowed) {
            res = RL_RLS_SHADOW;
        }
        rl_rls_metrics_call(s->r, dom, res);
    }
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
        part_fail(r, pt);
    }
    call_part_done(s);
    s->answered(s);
}

/* ---- a call ------------------------------------------------------------------------------- */

/* The entries of descriptor d (at most RL_ENVOY_ENTRIES_MAX) into e, as the envoy config
 * matches them. */
static void
entries_of(const rls_descriptor *d, struct rl_envoy_entry *e)
{
    for (size_t k = 0; k < d->n_entries; k++) {
        e[k].key = d->entries[k]->key;
        e[k].key_len = strlen(d->entries[k]->key);
        e[k].value = d->entries[k]->value;
        e[k].value_len = strlen(d->entries[k]->value);
    }
}

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
 * N per unit. 0: it cannot be sent (no requests allowed, or a window the algorithm cannot
 * count, which the loader refuses). */
static int
inline_limit(const struct rl_envoy_limit *l, struct rl_wire_limit *w)
{
    uint64_t ms = rl_envoy_unit_seconds(l->unit) * 1000;
    enum rl_algo a = l->algo_set ? l->algo : RL_ALGO_FIXED_WINDOW;

    if (l->requests_per_unit == 0 || ms == 0 || ms > rl_algo_window_max(a)) {
        return -1;
    }
    memset(w, 0, sizeof(*w));
    w->set = true;
    w->algo = (uint8_t)(l->algo_set ? l->algo : RL_ALGO_FIXED_WINDOW);
    w->limit = l->requests_per_unit;
    w->window_ms = ms;
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
replaced(const struct rl_rls_call *s, size_t n, const char *name)
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
        entries_of(d, e);
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
        s->descs[i].detailed = m->detailed_metric;
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
        entries_of(d, e);
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
            if (replaced(s, req->n_descriptors, m->limits[j].name)) {
                continue; /* as if it were not there (upstream: OK, no current_limit) */
            }
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
                    /* a window the algorithm cannot count (the loader refuses it) */
                    pt->unsendable = true;
                    pt->code =
                        r->conf->inline_fail_closed ? RL_WIRE_FAIL_CLOSED : RL_WIRE_FAIL_OPEN;
                }
                continue;
            }
            s->outstanding++;
            if (rl_forward_inline(r, &w, pt, rl_rls_answer, &pt->p, &now) != 0) {
                pt->code = now.code;
                pt->retry_ms = now.retry_after_ms;
                s->outstanding--;
            }
        }
    }
    if (s->has_timeout && s->outstanding > 1 && !s->finished) {
        (void)wait_add(s); /* out of memory: the router's deadline answers */
    }
    call_part_done(s);
}

void
rl_rls_call_release(struct rl_rls_call *call)
{
    wait_remove(call);
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
