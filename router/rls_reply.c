/*
 * rls_reply: the answer of a ShouldRateLimit call (rls_int.h), once every part is answered:
 * each descriptor's status from its parts (the first over limit, else the least remaining),
 * the call's code with quota_mode and what decided it (its dynamic_metadata: rls_meta.c),
 * the RateLimitResponse packed behind its 5-byte gRPC prefix, the headers [router]
 * rls_headers asks for, and the call counted (totals, by domain, detailed_metric keys); or a
 * gRPC error (rl_rls_call_fail). Not for sending the parts (rls_call.c) nor the carrier
 * (rls_h2.c).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "rls_arena.h"
#include "router_int.h"
#include "rls_front.h"
#include "rls_int.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitResponse rls_response;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus rls_status;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit rls_limit;
typedef Envoy__Config__Core__V3__HeaderValue rls_header;

#define RLS_OVER ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT

/* response_headers_to_add: at most three, of at most this many bytes each */
#define RLS_HEADER_VALUE_MAX 160u

/* The call's domain when envoy_config has it, else "" (the label of its metrics). */
static const char *
call_domain(const struct rl_rls_call *call)
{
    const rls_request *req = call->req;
    const struct rl_envoy_domain *d;

    if (req != NULL && call->cfg != NULL && req->domain.len != 0 &&
        (d = rl_envoy_domain(call->cfg, rls_bytes(req->domain), req->domain.len)) != NULL) {
        return d->name;
    }
    return "";
}

/* The n bytes of s at k + at, a NUL byte written as the six characters \u0000 (a metric's
 * label is a C string); k has room for 6n. Returns the new at. */
static size_t
detailed_put(char *k, size_t at, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\0') {
            memcpy(k + at, "\\u0000", 6);
            at += 6;
        } else {
            k[at++] = s[i];
        }
    }
    return at;
}

/* The full key of descriptor d of a detailed_metric, as upstream names its stats:
 * domain.key1_value1.key2_value2 (malloc'd, NUL-terminated, holding no other NUL; NULL: out
 * of memory). */
static char *
detailed_key(const rls_request *req, const rls_descriptor *d, size_t *len)
{
    size_t n = req->domain.len, at;
    char *k;

    for (size_t i = 0; i < d->n_entries; i++) {
        n += 2 + d->entries[i]->key.len + d->entries[i]->value.len;
    }
    k = malloc(6 * n + 1);
    if (k == NULL) {
        return NULL;
    }
    at = detailed_put(k, 0, rls_bytes(req->domain), req->domain.len);
    for (size_t i = 0; i < d->n_entries; i++) {
        k[at++] = '.';
        at = detailed_put(k, at, rls_bytes(d->entries[i]->key), d->entries[i]->key.len);
        k[at++] = '_';
        at = detailed_put(k, at, rls_bytes(d->entries[i]->value), d->entries[i]->value.len);
    }
    k[at] = '\0';
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
    call->r->rls->n.calls[2]++;
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

/* A call of at most this many descriptors is built in struct rls_built itself (on the
 * stack, no allocation); a larger one in arrays of its own. */
#define RLS_BUILT_INLINE 4u

/* What a response is built in: per descriptor, its status, limit and duration. A field set
 * here that rls_response_write (rls_meta.c) does not write must be added there too:
 * check_rls_pack holds the two to protobuf-c's bytes. */
struct rls_built {
    rls_response resp;
    rls_status *st, **stp;
    rls_limit *lims;
    Google__Protobuf__Duration *durs;
    const struct rl_rls_part **picks; /* per descriptor: the part its status shows, or NULL */
    rls_header hdrs[3], *hdrp[3];
    char hvals[3][RLS_HEADER_VALUE_MAX];
    bool shadowed; /* a descriptor over its limit passed only because of shadow_mode */
    struct {       /* the arrays above for a call of RLS_BUILT_INLINE descriptors or fewer */
        rls_status st[RLS_BUILT_INLINE], *stp[RLS_BUILT_INLINE];
        rls_limit lims[RLS_BUILT_INLINE];
        Google__Protobuf__Duration durs[RLS_BUILT_INLINE];
        const struct rl_rls_part *picks[RLS_BUILT_INLINE];
    } in;
};

static int
built_alloc(struct rls_built *b, size_t n)
{
    rls_response init = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;

    memset(b, 0, sizeof(*b));
    b->resp = init;
    if (n <= RLS_BUILT_INLINE) {
        b->st = b->in.st;
        b->stp = b->in.stp;
        b->lims = b->in.lims;
        b->durs = b->in.durs;
        b->picks = b->in.picks;
        return 0;
    }
    b->st = calloc(n, sizeof(*b->st));
    b->stp = calloc(n, sizeof(*b->stp));
    b->lims = calloc(n, sizeof(*b->lims));
    b->durs = calloc(n, sizeof(*b->durs));
    b->picks = calloc(n, sizeof(*b->picks));
    return b->st == NULL || b->stp == NULL || b->lims == NULL || b->durs == NULL || b->picks == NULL
               ? -1
               : 0;
}

static void
built_free(struct rls_built *b)
{
    if (b->st == b->in.st) {
        return;
    }
    free(b->st);
    free(b->stp);
    free(b->lims);
    free(b->durs);
    free(b->picks);
}

/* [router] rls_failure = error: a call with a limit left without a decision is answered
 * UNAVAILABLE (true). */
static bool
finish_undecided(struct rl_rls_call *s)
{
    if (!s->r->conf->rls_fail_error) {
        return false;
    }
    for (uint32_t k = 0; k < s->nparts; k++) {
        if (part_undecided(&s->parts[k])) {
            rl_rls_call_fail(s, GRPC_UNAVAILABLE,
                             "no decision for every limit in time ([router] rls_failure = "
                             "error)");
            return true;
        }
    }
    return false;
}

/* Descriptor i's answer: its first part over limit (*over), else the one with the least
 * remaining (several limits on one descriptor, the extension); NULL: no limit. */
static const struct rl_rls_part *
desc_pick(const struct rl_rls_call *s, size_t i, bool *over)
{
    const struct rl_rls_part *pick = NULL;

    *over = false;
    for (uint32_t k = 0; k < s->nparts; k++) {
        const struct rl_rls_part *pt = &s->parts[k];
        /* 0 hits (a check before the cost is known) is over once nothing is left; a
         * report's charge (ADJUST) is applied whatever is left, never over */
        bool pover =
            pt->code == RL_WIRE_LIMITED || pt->code == RL_WIRE_FAIL_CLOSED ||
            (pt->peek && !s->descs[i].report && pt->code == RL_WIRE_ALLOWED && pt->remaining == 0);

        if (pt->desc != i) {
            continue;
        }
        if (pover && !*over) {
            pick = pt;
            *over = true;
        } else if (!*over && (pick == NULL || pt->remaining < pick->remaining)) {
            pick = pt;
        }
    }
    return pick;
}

/* Until the window resets: the node's reset (or retry when refused, unless the hits can
 * never pass: then the window's reset too, not the "never" sentinel), else the unit's
 * boundary on the wall clock (now), as upstream's CalculateReset. */
static void
status_reset(Google__Protobuf__Duration *d, const struct rl_rls_part *pick, bool over, uint64_t now)
{
    uint64_t ms = over && pick->retry_ms != 0 && pick->retry_ms != RL_WIRE_RETRY_NEVER
                      ? pick->retry_ms
                      : pick->reset_ms;
    uint64_t unit_ms = rl_envoy_unit_seconds(pick->lim->unit) * 1000;

    if (ms == 0 && unit_ms != 0) {
        ms = unit_ms - now % unit_ms;
    }
    google__protobuf__duration__init(d);
    d->seconds = (int64_t)(ms / 1000);
    d->nanos = (int32_t)(ms % 1000) * 1000000;
}

/* detailed_metric: descriptor i's hits counted by its full key. */
static void
desc_detailed(const struct rl_rls_call *s, size_t i, bool over)
{
    size_t klen = 0;
    char *key = detailed_key(s->req, s->req->descriptors[i], &klen);

    if (key != NULL) {
        rl_rls_metrics_detailed(s->r, key, klen,
                                !over                ? RL_RLS_WITHIN_LIMIT
                                : s->descs[i].shadow ? RL_RLS_SHADOW_MODE
                                                     : RL_RLS_DETAILED_OVER,
                                rls_hits_of(s->req, s->req->descriptors[i]));
        free(key);
    }
}

/* Status i of b, from descriptor i's parts. */
static void
desc_status(const struct rl_rls_call *s, size_t i, struct rls_built *b, uint64_t now)
{
    const struct rls_desc *d = &s->descs[i];
    const struct rl_rls_part *pick;
    rls_status *st = &b->st[i];
    bool over;

    envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(st);
    b->stp[i] = st;
    st->code = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
    if (d->unlimited) {
        st->limit_remaining = UINT32_MAX; /* as upstream */
        return;
    }
    pick = desc_pick(s, i, &over);
    if (pick == NULL) {
        return; /* no limit: OK without current_limit, as upstream */
    }
    envoy__service__ratelimit__v3__rate_limit_response__rate_limit__init(&b->lims[i]);
    b->lims[i].name = pick->lim->name != NULL ? pick->lim->name : (char *)"";
    b->lims[i].requests_per_unit = pick->lim->requests_per_unit;
    b->lims[i].unit =
        (Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit__Unit)pick->lim->unit;
    st->current_limit = &b->lims[i];
    st->limit_remaining = over ? 0 : clamp_u32(pick->remaining);
    status_reset(&b->durs[i], pick, over, now);
    st->duration_until_reset = &b->durs[i];
    b->picks[i] = pick;
    if (over && !d->shadow && !d->report) {
        st->code = RLS_OVER; /* the call's code is call_decide's (quota_mode) */
    }
    b->shadowed |= over && d->shadow;
    if (d->detailed) {
        desc_detailed(s, i, over);
    }
}

/*
 * The call's code and what decided it, as envoyproxy/ratelimit judges with quota_mode: the
 * call is over its limit when a descriptor without quota_mode is (the first of them
 * decided), or when every quota_mode descriptor with a limit is (the first decided);
 * otherwise OK, decided by the descriptor with a limit and the least limit_remaining among
 * those OK (the first of equals). A descriptor without a limit (none matched, unlimited,
 * replaced) takes no part.
 */
static void
call_decide(const struct rl_rls_call *s, struct rls_built *b, struct rls_decided *dec)
{
    size_t n = s->req->n_descriptors, none = (size_t)-1;
    size_t rate_over = none, quota_over = none, least = none;
    size_t quotas = 0, quotas_over = 0;

    for (size_t i = 0; i < n; i++) {
        bool over = b->st[i].code == RLS_OVER;

        if (b->picks[i] == NULL) {
            continue;
        }
        if (s->descs[i].quota) {
            quotas++;
            quotas_over += over;
            if (over && quota_over == none) {
                quota_over = i;
            }
        } else if (over && rate_over == none) {
            rate_over = i;
        }
        if (!over && (least == none || b->st[i].limit_remaining < b->st[least].limit_remaining)) {
            least = i;
        }
    }
    memset(dec, 0, sizeof(*dec));
    b->resp.overall_code = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
    if (rate_over != none || (quotas > 0 && quotas_over == quotas)) {
        b->resp.overall_code = RLS_OVER;
        dec->desc = rate_over != none ? rate_over : quota_over;
    } else if (least != none) {
        dec->desc = least;
    } else {
        return;
    }
    dec->part = b->picks[dec->desc];
    dec->over = b->st[dec->desc].code == RLS_OVER;
    dec->remaining = b->st[dec->desc].limit_remaining;
}

/* resp packed into s->out behind the gRPC prefix (uncompressed, its length), its
 * dynamic_metadata (field 6, the last set) written after the fields protobuf-c packs
 * (rls_meta.c), as protobuf-c would have placed it. -1: out of memory. */
static int
response_pack(struct rl_rls_call *s, const rls_response *resp, const struct rls_decided *dec)
{
    size_t hand = rls_response_bound(resp), bound = rls_meta_bound(s, dec), len, meta;
    uint8_t *end;

    /* by hand (rls_meta.c), written backwards behind the metadata */
    if (rl_rls_call_out(s, 5 + hand + bound) == NULL) {
        return -1;
    }
    end = s->out + 5 + hand + bound;
    meta = rls_meta_write(end, s, dec);
    len = meta + rls_response_write(end - meta, resp);
    memmove(s->out + 5, end - len, len);
    s->out[0] = 0;
    s->out[1] = (uint8_t)(len >> 24);
    s->out[2] = (uint8_t)(len >> 16);
    s->out[3] = (uint8_t)(len >> 8);
    s->out[4] = (uint8_t)len;
    s->out_len = 5 + len;
    return 0;
}

/* The call answered with b: counted in the totals and by domain. */
static void
finish_count(struct rl_rls_call *s, const struct rls_built *b)
{
    bool over = b->resp.overall_code == RLS_OVER;
    const char *dom = call_domain(s);
    enum rl_rls_result res = RL_RLS_OK;

    s->r->rls->n.calls[over ? 1 : 0]++;
    if (over) {
        res = RL_RLS_OVER_LIMIT;
    } else if (dom[0] == '\0') {
        res = RL_RLS_UNKNOWN_DOMAIN;
    } else if (b->shadowed) {
        res = RL_RLS_SHADOW;
    }
    rl_rls_metrics_call(s->r, dom, res);
}

void
rls_reply_finish(struct rl_rls_call *s)
{
    size_t n = s->req->n_descriptors;
    uint64_t now = rl_clock_real_ms();
    struct rls_decided dec;
    struct rls_built b;

    if (finish_undecided(s)) {
        return;
    }
    if (built_alloc(&b, n) != 0) {
        goto nomem;
    }
    for (size_t i = 0; i < n; i++) {
        desc_status(s, i, &b, now);
    }
    call_decide(s, &b, &dec);
    b.resp.n_statuses = n;
    b.resp.statuses = b.stp;
    b.resp.n_response_headers_to_add = call_headers(s->r->conf, b.stp, n, b.hdrs, b.hdrp, b.hvals);
    b.resp.response_headers_to_add = b.hdrp;
    if (response_pack(s, &b.resp, &dec) != 0) {
        goto nomem;
    }
    s->status = GRPC_OK;
    finish_count(s, &b);
    built_free(&b);
    s->finished = true;
    s->done(s);
    return;
nomem:
    built_free(&b);
    rl_rls_call_fail(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
}
