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
 * A descriptor whose last entry is the report marker (RLS_REPORT_KEY = RLS_REPORT_VALUE,
 * Envoy's apply_on_stream_done: docs/ENVOY.md) is matched and keyed without that entry and
 * its parts are ADJUSTs of its hits: charged past the limit too.
 * The answer is built by rls_reply.c; a call with a grpc-timeout waits in rls_wait.c's heap.
 * Here also the front's state on one loop (rls_front.h).
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth.h"
#include "conn.h"
#include "log.h"
#include "rls_arena.h"
#include "router_int.h"
#include "rls_front.h"
#include "rls_int.h"
#include "rls_wait.h"
#include "rules.h"
#include "shardmap.h"

#define RLS_DESCRIPTORS_MAX 64u /* descriptors of one request */
#define RLS_HITS_MAX 1000000u   /* hits_addend (the CHECK's cost bound) */
/* The last entry that makes a descriptor a report of a cost already spent (docs/ENVOY.md,
 * "Charging a stream's real cost"). */
#define RLS_REPORT_KEY "ratelimiter.charge"
#define RLS_REPORT_VALUE "stream_done"
/* A call with a grpc-timeout is answered this long before it passes (its tenth, within
 * [1, 50] ms), so the answer reaches Envoy before Envoy gives up. */
#define RLS_TIMEOUT_MARGIN_MIN 1u
#define RLS_TIMEOUT_MARGIN_MAX 50u

/* ---- who calls ---------------------------------------------------------------------------- */

#define RLS_AUTH_WARN_MS 10000u /* refusals are said at most this often (per worker) */

/* A refused call, said at warn at most every RLS_AUTH_WARN_MS. */
static void
auth_warn(struct rl_router *r, const char *peer, const char *why)
{
    uint64_t now = uv_now(r->loop);

    if (r->rls->auth_warned_ms == 0 || now - r->rls->auth_warned_ms >= RLS_AUTH_WARN_MS) {
        rl_log_warn("rls %s: %s (%llu refused so far; said at most every %u s)", peer, why,
                    (unsigned long long)r->rls->n.auth_failures, RLS_AUTH_WARN_MS / 1000);
        r->rls->auth_warned_ms = now != 0 ? now : 1;
    }
}

int
rl_rls_call_auth(struct rl_rls_call *call, const uint8_t *addr, const char *peer, const char *authz,
                 size_t len)
{
    struct rl_router *r = call->r;
    const struct rl_client_conf *cl = NULL;
    uint64_t wait;

    call->tenant = rl_wire_tenant(NULL, addr);
    if (r->conf->nauth_clients == 0) {
        return 0;
    }
    wait = rl_listener_auth_wait_ms(&r->listener, addr);
    if (wait > 0) {
        r->stats.auth_failures++;
        r->rls->n.auth_failures++;
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
        r->rls->n.auth_failures++;
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
    call->tenant = rl_wire_tenant(cl->name, addr);
    return 0;
}

/* ---- a part's answer, the call's deadline ------------------------------------------------ */

/* The failure policy's answer for a part with no decision. */
static void
part_fail(const struct rl_router *r, struct rl_rls_part *pt)
{
    pt->code = r->conf->inline_fail_closed ? RL_WIRE_FAIL_CLOSED : RL_WIRE_FAIL_OPEN;
    pt->retry_ms = r->conf->inline_fail_closed ? r->conf->session_timeout_ms : 0;
}

/* One part fewer in flight; the answer goes once none is left. */
static void
call_part_done(struct rl_rls_call *s)
{
    if (--s->outstanding == 0 && !s->finished) {
        rl_rls_wait_remove(s->r->rls->wait, &s->wait);
        rls_reply_finish(s);
    }
}

/* p's CHECK (p->sink, a part) was answered (its rl_sink_answer_fn): rep (a node's, or the
 * failure policy's), or err != 0 with an ERROR the node gave. */
static void
part_answer(struct rl_router *r, struct rl_pending *p, const struct rl_wire_check_reply *rep,
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

/* A call past its grpc-timeout (out of the heap): the parts still in flight are orphaned
 * and answered by the failure policy, the call with what is known. */
static void
call_expire(struct rl_rls_wait_node *n)
{
    struct rl_rls_call *call =
        (struct rl_rls_call *)((char *)n - offsetof(struct rl_rls_call, wait));
    struct rl_router *r = call->r;

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
        r->rls->n.timeouts++;
        rls_reply_finish(call);
        call->answered(call); /* may free call */
    }
}

static void
wait_closed(void *arg)
{
    rl_router_unhold(arg);
}

/* Puts call in the deadline heap: its grpc-timeout less the margin, when that comes before
 * the router's deadline. 0, or -1 (out of memory: the router's deadline applies). */
static int
wait_add(struct rl_rls_call *call)
{
    struct rl_router *r = call->r;
    struct rl_rls_front *f = r->rls;
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
    if (f->wait == NULL) {
        if (r->closing ||
            (f->wait = rl_rls_wait_new(r->loop, call_expire, wait_closed, r)) == NULL) {
            return -1;
        }
        rl_router_hold(r);
    }
    return rl_rls_wait_add(f->wait, &call->wait, now + ms);
}

/* ---- the front's state on one loop --------------------------------------------------------- */

struct rl_rls_front *
rl_rls_front_new(void)
{
    return calloc(1, sizeof(struct rl_rls_front));
}

void
rl_rls_front_close(struct rl_router *r)
{
    if (r->rls != NULL) {
        rl_rls_wait_close(r->rls->wait);
    }
}

void
rl_rls_front_free(struct rl_rls_front *f)
{
    if (f != NULL) {
        rl_rls_wait_free(f->wait);
        rl_rls_metrics_free(f->metrics);
        free(f);
    }
}

/* ---- a call ------------------------------------------------------------------------------- */

/* The entries of descriptor d (at most RL_ENVOY_ENTRIES_MAX) into e, as the envoy config
 * matches them: without a last report marker (*report, may be NULL, says whether there was
 * one). Returns how many. */
static size_t
entries_of(const rls_descriptor *d, struct rl_envoy_entry *e, bool *report)
{
    size_t n = d->n_entries;
    bool rep = n > 0 && rls_bytes_is(d->entries[n - 1]->key, RLS_REPORT_KEY) &&
               rls_bytes_is(d->entries[n - 1]->value, RLS_REPORT_VALUE);

    if (report != NULL) {
        *report = rep;
    }
    n -= rep;
    for (size_t k = 0; k < n; k++) {
        e[k].key = rls_bytes(d->entries[k]->key);
        e[k].key_len = d->entries[k]->key.len;
        e[k].value = rls_bytes(d->entries[k]->value);
        e[k].value_len = d->entries[k]->value.len;
    }
    return n;
}

/* The cost of descriptor d: its own hits_addend, else the request's, else 1. */

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
    if (l->burst != 0 && rl_algo_has_burst((enum rl_algo)w->algo)) {
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

/* n zeroed elements of size from the call's arena (malloc beyond it); NULL: out of memory. */
static void *
arena_calloc(struct rl_rls_call *call, size_t n, size_t size)
{
    void *p;

    if (size != 0 && n > SIZE_MAX / size) {
        return NULL;
    }
    p = rls_arena_take_apart(call, n * size);
    if (p != NULL) {
        memset(p, 0, n * size);
    }
    return p;
}

int
rl_rls_call_decode(struct rl_rls_call *s, const uint8_t *msg, size_t len)
{
    /* unpacked into the call's arena: a request's dozen allocations cost no malloc */
    s->arena_alloc.alloc = rls_arena_take;
    s->arena_alloc.free = rls_arena_give;
    s->arena_alloc.allocator_data = s;
    s->arena_used = 0;
    s->arena_spilled = false;
    s->spilled_bytes = 0;
    s->req = envoy__service__ratelimit__v3__rate_limit_request__unpack(&s->arena_alloc, len, msg);
    if (s->req == NULL) {
        rl_rls_call_fail(s, GRPC_INVALID_ARGUMENT, "cannot decode a RateLimitRequest");
        return -1;
    }
    s->cfg = s->r->envoy;
    if (s->cfg != NULL) {
        rl_envoy_config_hold(s->cfg);
    }
    return 0;
}

/* Upstream's two checks of a request, with its words, and this front's bounds. 0, or -1
 * (the call is answered). */
static int
start_check(struct rl_rls_call *s, size_t dlen)
{
    const rls_request *req = s->req;

    if (dlen == 0) {
        rl_rls_call_fail(s, GRPC_UNKNOWN, "rate limit domain must not be empty");
        return -1;
    }
    if (req->n_descriptors == 0) {
        rl_rls_call_fail(s, GRPC_UNKNOWN, "rate limit descriptor list must not be empty");
        return -1;
    }
    if (req->n_descriptors > RLS_DESCRIPTORS_MAX) {
        rl_rls_call_fail(s, GRPC_RESOURCE_EXHAUSTED, "more than %u descriptors",
                         RLS_DESCRIPTORS_MAX);
        return -1;
    }
    if (dlen > RL_WIRE_SERVICE_MAX) {
        rl_rls_call_fail(s, GRPC_INVALID_ARGUMENT, "domain longer than %u bytes",
                         RL_WIRE_SERVICE_MAX);
        return -1;
    }
    if (rl_conf_rule(s->r->conf, rls_bytes(req->domain), dlen, NULL, 0) != NULL) {
        /* Configured rules are authoritative: an inline limit for the service is refused. */
        rl_rls_call_fail(s, GRPC_FAILED_PRECONDITION,
                         "domain is a [service] of cluster.conf: configured rules apply to it");
        return -1;
    }
    return 0;
}

/* Descriptor i matched against the configuration (or its RateLimitOverride): s->descs[i].
 * Returns the parts it makes. */
static size_t
match_desc(struct rl_rls_call *s, size_t i, size_t dlen)
{
    const struct rl_envoy_config *cfg = s->cfg;
    const rls_request *req = s->req;
    const rls_descriptor *d = req->descriptors[i];
    struct rls_desc *out = &s->descs[i];
    struct rl_envoy_entry e[RL_ENVOY_ENTRIES_MAX];
    const struct rl_envoy_desc *m;
    size_t n;

    if (d->n_entries == 0 || d->n_entries > RL_ENVOY_ENTRIES_MAX) {
        return 0;
    }
    n = entries_of(d, e, &out->report);
    if (n == 0) {
        return 0; /* the marker alone: nothing to match */
    }
    if (d->limit != NULL) {
        /* Envoy's RateLimitOverride: that limit, under the same counter key, in a known
         * domain only, never in shadow mode (as upstream); an unknown unit limits nothing */
        struct rl_envoy_limit *o = &out->ovr;

        if (cfg == NULL || rl_envoy_domain(cfg, rls_bytes(req->domain), dlen) == NULL ||
            rl_envoy_unit_seconds((enum rl_envoy_unit)d->limit->unit) == 0) {
            return 0;
        }
        o->requests_per_unit = d->limit->requests_per_unit;
        o->unit = (enum rl_envoy_unit)d->limit->unit;
        o->algo = RL_ALGO_FIXED_WINDOW;
        o->name = (char *)"";
        out->limits = o;
        out->nlimits = 1;
        return 1;
    }
    m = cfg != NULL ? rl_envoy_match(cfg, rls_bytes(req->domain), dlen, e, n, NULL) : NULL;
    if (m == NULL) {
        return 0;
    }
    out->matched = m;
    out->shadow = m->shadow_mode;
    out->quota = m->quota_mode;
    out->detailed = m->detailed_metric;
    if (m->limits[0].unlimited) {
        out->unlimited = true;
        return 0;
    }
    out->limits = m->limits;
    out->nlimits = m->nlimits;
    return m->nlimits;
}

/* Every descriptor matched (s->descs) and room for its parts (s->parts). 0, or -1 (the
 * call is answered). */
static int
start_match(struct rl_rls_call *s, size_t dlen)
{
    const rls_request *req = s->req;
    size_t nparts = 0;

    s->descs = arena_calloc(s, req->n_descriptors, sizeof(*s->descs));
    if (s->descs == NULL) {
        rl_rls_call_fail(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < req->n_descriptors; i++) {
        if (rls_hits_of(req, req->descriptors[i]) > RLS_HITS_MAX) {
            rl_rls_call_fail(s, GRPC_INVALID_ARGUMENT, "hits_addend larger than %u", RLS_HITS_MAX);
            return -1;
        }
        nparts += match_desc(s, i, dlen);
    }
    s->parts = arena_calloc(s, nparts ? nparts : 1, sizeof(*s->parts));
    if (s->parts == NULL) {
        rl_rls_call_fail(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return -1;
    }
    return 0;
}

/* Descriptor i's counter key, as upstream builds it, into key (RL_WIRE_USER_MAX + 1
 * bytes): too long for a CHECK's user, its head and a hash of the whole. Returns its
 * length, or 0 when out of memory. */
static size_t
desc_key(const struct rl_rls_call *s, size_t i, size_t dlen, char *key)
{
    const rls_request *req = s->req;
    const rls_descriptor *d = req->descriptors[i];
    const char *share[RL_ENVOY_ENTRIES_MAX];
    struct rl_envoy_entry e[RL_ENVOY_ENTRIES_MAX];
    size_t klen, n = entries_of(d, e, NULL);

    memset(share, 0, sizeof(share[0]) * n);
    if (d->limit == NULL) {
        rl_envoy_match(s->cfg, rls_bytes(req->domain), dlen, e, n, share);
    }
    klen =
        rl_envoy_counter_key(key, RL_WIRE_USER_MAX + 1, rls_bytes(req->domain), dlen, e, n, share);
    if (klen > RL_WIRE_USER_MAX) {
        char *full = malloc(klen + 1);
        uint64_t h1, h2;

        if (full == NULL) {
            return 0;
        }
        rl_envoy_counter_key(full, klen + 1, rls_bytes(req->domain), dlen, e, n, share);
        h1 = rl_shardmap_key_hash("rls", 3, full, klen);
        h2 = rl_shardmap_key_hash("rls2", 4, full, klen);
        free(full);
        snprintf(key + RL_WIRE_USER_MAX - 34, 35, "#%016" PRIx64 "%016" PRIx64, h1, h2);
        klen = RL_WIRE_USER_MAX - 1;
    }
    return klen;
}

/* Limit j of descriptor i (its counter key given) as one part: sent, or answered now (a
 * limit no CHECK can carry, or the failure policy when it cannot be sent). */
static void
part_send(struct rl_rls_call *s, size_t i, size_t j, size_t dlen, const char *key, size_t klen)
{
    const struct rls_desc *m = &s->descs[i];
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
    w.service.ptr = rls_bytes(s->req->domain);
    w.service.len = dlen;
    w.user.ptr = key;
    w.user.len = klen;
    if (m->nlimits > 1) {
        /* several limits on one descriptor are counted apart, even equal ones */
        w.endpoint.len = (size_t)snprintf(ep, sizeof(ep), "limit%zu", j);
        w.endpoint.ptr = ep;
    }
    w.cost = (uint32_t)rls_hits_of(s->req, s->req->descriptors[i]);
    pt->peek = w.cost == 0;
    if (m->report) {
        /* a cost already spent: charged, past the limit too (ADJUST) */
        w.op = RL_WIRE_OP_ADJUST;
        w.delta = (int32_t)w.cost;
        w.cost = 0;
    }
    w.tenant = s->tenant;
    if (inline_limit(pt->lim, &w.limit) != 0) {
        if (pt->lim->requests_per_unit == 0) {
            pt->code = RL_WIRE_LIMITED; /* upstream: 0 per unit refuses everything */
        } else {
            /* a window the algorithm cannot count (the loader refuses it) */
            pt->unsendable = true;
            pt->code = s->r->conf->inline_fail_closed ? RL_WIRE_FAIL_CLOSED : RL_WIRE_FAIL_OPEN;
        }
        return;
    }
    s->outstanding++;
    if (rl_forward_inline(s->r, &w, pt, part_answer, &pt->p, &now) != 0) {
        pt->code = now.code;
        pt->retry_ms = now.retry_after_ms;
        s->outstanding--;
    }
}

/* Every limit that matched, sent at once. 0, or -1 (out of memory: the call is answered). */
static int
start_send(struct rl_rls_call *s, size_t dlen)
{
    const rls_request *req = s->req;

    for (size_t i = 0; i < req->n_descriptors; i++) {
        const struct rls_desc *m = &s->descs[i];
        char key[RL_WIRE_USER_MAX + 1];
        size_t klen;

        if (m->nlimits == 0) {
            continue;
        }
        klen = desc_key(s, i, dlen, key);
        if (klen == 0) {
            rl_rls_call_fail(s, GRPC_RESOURCE_EXHAUSTED, "out of memory");
            return -1;
        }
        for (size_t j = 0; j < m->nlimits; j++) {
            if (replaced(s, req->n_descriptors, m->limits[j].name)) {
                continue; /* as if it were not there (upstream: OK, no current_limit) */
            }
            part_send(s, i, j, dlen, key, klen);
        }
    }
    return 0;
}

void
rl_rls_call_start(struct rl_rls_call *s)
{
    size_t dlen = s->req->domain.len;

    if (start_check(s, dlen) != 0 || start_match(s, dlen) != 0) {
        return;
    }
    /* Every part at once; one extra count so that answers given meanwhile (a connection
     * to a node lost while sending) cannot finish the call half-built. */
    s->outstanding = 1;
    if (start_send(s, dlen) != 0) {
        s->outstanding--;
        return;
    }
    if (s->has_timeout && s->outstanding > 1 && !s->finished) {
        (void)wait_add(s); /* out of memory: the router's deadline answers */
    }
    call_part_done(s);
}

void
rl_rls_call_release(struct rl_rls_call *call)
{
    rl_rls_wait_remove(call->r->rls->wait, &call->wait);
    for (uint32_t k = 0; k < call->nparts; k++) {
        if (call->parts[k].p != NULL) {
            call->parts[k].p->sink = NULL;
        }
    }
    if (call->req != NULL && call->arena_spilled) {
        /* only what came from malloc needs freeing: the arena goes with the call */
        envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(call->req,
                                                                         &call->arena_alloc);
    }
    call->req = NULL;
    rl_envoy_config_drop(call->cfg);
    call->cfg = NULL;
    if (call->descs != NULL) {
        rls_arena_give(call, call->descs);
    }
    call->descs = NULL;
    if (call->parts != NULL) {
        rls_arena_give(call, call->parts);
    }
    call->parts = NULL;
    call->nparts = 0;
    if (call->out != NULL) {
        rls_arena_give(call, call->out);
    }
    call->out = NULL;
}
