/*
 * librlclient's libuv client (include/ratelimiter/ratelimiter_uv.h), on common/conn.h's
 * framed connection as router/upstream.c is: one outgoing rl_conn, its own rl_connq
 * flusher, requests appended to conn.out and written once per loop turn.
 *
 * Requests live in a fixed table of max_pending slots. A slot's request id is its index + 1
 * in the low 20 bits and the slot's generation in the high 12, so a late reply to a request
 * that timed out (its slot since reused) does not match the new request. A request is
 * WAITING (encoded, no connection yet: sent on the next connect, in order) or IN_FLIGHT
 * (handed to the connection); one timer, armed at the earliest deadline, expires both.
 * Every path that ends a request unlinks it and frees its slot before the callback runs,
 * so a callback may submit requests or close the client.
 */
#include <ratelimiter/ratelimiter_uv.h>

#include <errno.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "conn.h"
#include "tls.h"
#include "wire.h"

#define SLOT_BITS 20u
#define SLOT_MASK ((1u << SLOT_BITS) - 1u)
#define NO_DEADLINE UINT64_MAX

enum { REQ_FREE, REQ_WAITING, REQ_IN_FLIGHT };

struct uvreq {
    uint32_t id;
    uint16_t gen;
    uint8_t state;
    uint8_t op; /* CHECK, ADJUST or RELEASE: the op its reply must carry */
    struct uvreq *prev, *next;
    uint64_t deadline; /* loop time, ms; NO_DEADLINE */
    rlc_uv_cb cb;
    void *arg;
    char *frame; /* WAITING: the encoded request */
    size_t len;
};

struct reqlist {
    struct uvreq *head, *tail;
    uint32_t n;
};

struct rlc_uv {
    uv_loop_t *loop;
    struct rl_tls_ctx *tls; /* NULL: plain TCP */
    struct rl_connq q;
    struct rl_conn conn;
    struct rl_wire_decoder dec;
    struct sockaddr_storage sa;
    uv_timer_t retry;
    uv_timer_t expiry;
    uint64_t expiry_at; /* when expiry is armed for; NO_DEADLINE: not armed */
    char token[RL_WIRE_TOKEN_MAX];
    size_t token_len;
    uint32_t backoff_ms, backoff_min, backoff_max;
    uint32_t max_pending;
    struct uvreq *slots;
    uint32_t *free_slots;
    uint32_t nfree;
    struct reqlist waiting, in_flight;
    int handles; /* q (counted once), retry, expiry, and conn while open */
    bool closing;
    bool conn_busy;     /* conn open or its close not finished */
    bool auth_pending;  /* AUTH sent on this connection, its answer not read */
    bool auth_refused;  /* the server refused the token on this connection */
    struct rlc_uv_stats st;
    struct rl_wire_reply rep; /* the reply being handled: large (STATS, THROTTLED) */
    void (*on_closed)(void *arg);
    void *closed_arg;
};

static void list_push(struct reqlist *l, struct uvreq *r)
{
    r->next = NULL;
    r->prev = l->tail;
    if (l->tail != NULL) {
        l->tail->next = r;
    } else {
        l->head = r;
    }
    l->tail = r;
    l->n++;
}

static void list_unlink(struct reqlist *l, struct uvreq *r)
{
    if (r->prev != NULL) {
        r->prev->next = r->next;
    } else {
        l->head = r->next;
    }
    if (r->next != NULL) {
        r->next->prev = r->prev;
    } else {
        l->tail = r->prev;
    }
    r->prev = r->next = NULL;
    l->n--;
}

static void
maybe_free(rlc_uv *u)
{
    void (*cb)(void *) = u->on_closed;
    void *arg = u->closed_arg;

    if (u->handles > 0) {
        return;
    }
    rl_conn_deinit(&u->conn);
    rl_wire_decoder_deinit(&u->dec);
    rl_auth_wipe(u->token, sizeof(u->token));
    rl_tls_ctx_free(u->tls);
    free(u->slots);
    free(u->free_slots);
    free(u);
    if (cb != NULL) {
        cb(arg);
    }
}

static void
handle_closed(uv_handle_t *h)
{
    rlc_uv *u = h->data;

    u->handles--;
    maybe_free(u);
}

static void
connq_closed(void *data)
{
    rlc_uv *u = data;

    u->handles--;
    maybe_free(u);
}

/* Ends request r (already unlinked): frees its slot, then calls its callback. */
static void
finish(rlc_uv *u, struct uvreq *r, int status, const struct rlc_reply *rep)
{
    rlc_uv_cb cb = r->cb;
    void *arg = r->arg;
    uint32_t slot = (uint32_t)(r - u->slots);

    free(r->frame);
    r->frame = NULL;
    r->state = REQ_FREE;
    r->id = 0;
    r->cb = NULL;
    r->gen = (uint16_t)((r->gen + 1) & 0xfffu);
    u->free_slots[u->nfree++] = slot;
    if (status == 0 || status == -EREMOTEIO) {
        u->st.replies++;
    } else if (status == -ETIMEDOUT) {
        u->st.timeouts++;
    } else if (status == -ECONNRESET || status == -EACCES) {
        u->st.lost++;
    }
    cb(arg, status, rep);
}

/* Ends every request of l with status. Requests the callbacks add go on l's tail and are
 * not ended here unless status is -ECANCELED (closing: nothing may stay). */
static void
fail_all(rlc_uv *u, struct reqlist *l, int status)
{
    struct uvreq *last = l->tail;
    bool done = last == NULL;

    while (!done && l->head != NULL) {
        struct uvreq *r = l->head;

        done = r == last && status != -ECANCELED;
        list_unlink(l, r);
        finish(u, r, status, NULL);
    }
}

/* ---- deadlines -------------------------------------------------------------------------- */

static void expiry_fire(uv_timer_t *t);

static void
arm_expiry(rlc_uv *u, uint64_t at)
{
    uint64_t now;

    if (u->closing || at == NO_DEADLINE || at >= u->expiry_at) {
        return;
    }
    now = uv_now(u->loop);
    u->expiry_at = at;
    uv_timer_start(&u->expiry, expiry_fire, at > now ? at - now : 0, 0);
}

static void
expire_list(rlc_uv *u, struct reqlist *l, uint64_t now, struct reqlist *out)
{
    struct uvreq *r = l->head;

    while (r != NULL) {
        struct uvreq *next = r->next;

        if (r->deadline <= now) {
            list_unlink(l, r);
            list_push(out, r);
        }
        r = next;
    }
}

static uint64_t
earliest(const struct reqlist *l)
{
    uint64_t at = NO_DEADLINE;

    for (const struct uvreq *r = l->head; r != NULL; r = r->next) {
        if (r->deadline < at) {
            at = r->deadline;
        }
    }
    return at;
}

static void
expiry_fire(uv_timer_t *t)
{
    rlc_uv *u = t->data;
    struct reqlist gone = {0};
    uint64_t now = uv_now(u->loop), a, b;

    u->expiry_at = NO_DEADLINE;
    expire_list(u, &u->waiting, now, &gone);
    expire_list(u, &u->in_flight, now, &gone);
    while (gone.head != NULL) {
        struct uvreq *r = gone.head;

        list_unlink(&gone, r);
        finish(u, r, -ETIMEDOUT, NULL);
    }
    a = earliest(&u->waiting);
    b = earliest(&u->in_flight);
    arm_expiry(u, a < b ? a : b);
}

/* ---- the connection --------------------------------------------------------------------- */

static void
send_waiting(rlc_uv *u)
{
    while (u->waiting.head != NULL) {
        struct uvreq *r = u->waiting.head;

        if (rl_buf_append(&u->conn.out, r->frame, r->len) != 0) {
            break; /* out of memory: it waits for its timeout or the next connect */
        }
        list_unlink(&u->waiting, r);
        free(r->frame);
        r->frame = NULL;
        r->state = REQ_IN_FLIGHT;
        list_push(&u->in_flight, r);
        u->st.sent++;
    }
    if (u->in_flight.n > u->st.max_in_flight) {
        u->st.max_in_flight = u->in_flight.n;
    }
    rl_conn_mark(&u->conn);
}

static void
uv_frame(struct rl_conn *c, const char *p, size_t n)
{
    rlc_uv *u = c->data;
    struct rl_wire_reply *rep = &u->rep;
    struct rlc_reply out;
    struct uvreq *r;
    uint32_t slot;

    if (rl_wire_decode_reply(&u->dec, p, n, rep) != 0) {
        rl_conn_close(c, UV_EPROTO);
        return;
    }
    if (rep->id == 0) {
        /* The answer to our AUTH, or an ERROR for a frame the server could not read (it
         * closes the connection next). */
        if (u->auth_pending && (rep->op == RL_WIRE_OP_AUTH || rep->op == RL_WIRE_OP_ERROR)) {
            u->auth_pending = false;
            u->auth_refused = rep->op == RL_WIRE_OP_ERROR;
        }
        return;
    }
    slot = (rep->id & SLOT_MASK) - 1u;
    if (slot >= u->max_pending) {
        return;
    }
    r = &u->slots[slot];
    if (r->state != REQ_IN_FLIGHT || r->id != rep->id) {
        return; /* a late reply to a request that timed out */
    }
    memset(&out, 0, sizeof(out));
    list_unlink(&u->in_flight, r);
    if (rep->op == r->op) {
        out.code = rep->check.code;
        out.limit = rep->check.limit;
        out.remaining = rep->check.remaining;
        out.reset_ms = rep->check.reset_ms;
        out.retry_after_ms = rep->check.retry_after_ms;
        finish(u, r, 0, &out);
    } else if (rep->op == RL_WIRE_OP_ERROR) {
        out.code = RLC_CODE_ERROR;
        out.error = rep->err;
        finish(u, r, -EREMOTEIO, &out);
    } else {
        /* another op's reply to this request: the server does not speak the protocol, and
         * nothing else it sends on this connection can be trusted */
        finish(u, r, -EPROTO, NULL);
        rl_conn_close(c, UV_EPROTO);
    }
}

static void
uv_connected(struct rl_conn *c, int status)
{
    rlc_uv *u = c->data;

    if (status != 0) {
        return; /* on_close follows */
    }
    u->st.connects++;
    u->st.connected = 1;
    u->backoff_ms = u->backoff_min;
    u->auth_refused = false;
    u->auth_pending = false;
    if (u->token_len > 0 && rl_wire_put_auth(&c->out, 0, u->token, u->token_len) == 0) {
        u->auth_pending = true;
    }
    send_waiting(u);
}

static void
uv_conn_close(struct rl_conn *c, int status)
{
    rlc_uv *u = c->data;
    int why = u->auth_refused ? -EACCES : -ECONNRESET;

    if (u->st.connected) {
        u->st.disconnects++;
    }
    u->st.connected = 0;
    fail_all(u, &u->in_flight, u->closing ? -ECANCELED : why);
    if (u->auth_refused && !u->closing) {
        /* The next connection would be refused the same way: fail what waits too. */
        fail_all(u, &u->waiting, -EACCES);
    }
}

static void start_connect(rlc_uv *u);

static void
retry_fire(uv_timer_t *t)
{
    start_connect(t->data);
}

static void
uv_conn_closed(struct rl_conn *c)
{
    rlc_uv *u = c->data;

    u->conn_busy = false;
    u->handles--;
    if (u->closing) {
        maybe_free(u);
        return;
    }
    uv_timer_start(&u->retry, retry_fire, u->backoff_ms, 0);
    u->backoff_ms = u->backoff_ms * 2 > u->backoff_max ? u->backoff_max : u->backoff_ms * 2;
}

static const struct rl_conn_ops uv_conn_ops = {
    .on_frame = uv_frame,
    .on_connect = uv_connected,
    .on_close = uv_conn_close,
    .on_closed = uv_conn_closed,
};

static void
start_connect(rlc_uv *u)
{
    if (u->closing || u->conn_busy) {
        return;
    }
    u->conn_busy = true;
    u->handles++;
    /* Replies free requests: never stop reading because of what we queued. */
    u->conn.out_max = SIZE_MAX;
    u->conn.hold_max = UINT32_MAX;
    rl_conn_connect(&u->conn, (const struct sockaddr *)&u->sa);
}

/* ---- the API ------------------------------------------------------------------------------ */

static int
resolve(const char *host, uint16_t port, struct sockaddr_storage *sa)
{
    struct addrinfo hints, *res = NULL;
    char service[8];

    memset(sa, 0, sizeof(*sa));
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)sa) == 0 ||
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)sa) == 0) {
        return 0;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    snprintf(service, sizeof(service), "%u", (unsigned)port);
    if (getaddrinfo(host, service, &hints, &res) != 0 || res == NULL) {
        return -ENXIO;
    }
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

int
rlc_uv_create(rlc_uv **out, uv_loop_t *loop, const struct rlc_uv_options *o)
{
    rlc_uv *u;
    int rc;

    if (out == NULL) {
        return -EINVAL;
    }
    *out = NULL;
    if (loop == NULL || o == NULL || o->host == NULL || o->host[0] == '\0' || o->port == 0 ||
        o->token_len > RL_WIRE_TOKEN_MAX || (o->token_len > 0 && o->token == NULL) ||
        o->max_pending > RLC_UV_MAX_PENDING_LIMIT) {
        return -EINVAL;
    }
    u = calloc(1, sizeof(*u));
    if (u == NULL) {
        return -ENOMEM;
    }
    rc = resolve(o->host, o->port, &u->sa);
    if (rc != 0) {
        free(u);
        return rc;
    }
    if (o->tls_ca_file != NULL || o->tls_cert_file != NULL || o->tls_key_file != NULL) {
        char why[512];

        if (o->tls_ca_file == NULL ||
            rl_tls_ctx_new(&u->tls, RL_TLS_CLIENT, o->tls_cert_file, o->tls_key_file,
                           o->tls_ca_file, NULL, why, sizeof(why)) != 0) {
            free(u);
            return -EINVAL;
        }
    }
    u->loop = loop;
    u->max_pending = o->max_pending != 0 ? o->max_pending : RLC_UV_DEFAULT_MAX_PENDING;
    u->backoff_min = o->backoff_min_ms != 0 ? o->backoff_min_ms : RLC_UV_DEFAULT_BACKOFF_MIN_MS;
    u->backoff_max = o->backoff_max_ms != 0 ? o->backoff_max_ms : RLC_UV_DEFAULT_BACKOFF_MAX_MS;
    if (u->backoff_max < u->backoff_min) {
        u->backoff_max = u->backoff_min;
    }
    u->backoff_ms = u->backoff_min;
    u->expiry_at = NO_DEADLINE;
    if (o->token_len > 0) {
        memcpy(u->token, o->token, o->token_len);
        u->token_len = o->token_len;
    }
    u->slots = calloc(u->max_pending, sizeof(*u->slots));
    u->free_slots = calloc(u->max_pending, sizeof(*u->free_slots));
    if (u->slots == NULL || u->free_slots == NULL || rl_wire_decoder_init(&u->dec) != 0) {
        rl_tls_ctx_free(u->tls);
        free(u->slots);
        free(u->free_slots);
        free(u);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < u->max_pending; i++) {
        u->free_slots[i] = u->max_pending - 1 - i; /* slot 0 first */
    }
    u->nfree = u->max_pending;
    rc = rl_connq_init(&u->q, loop);
    if (rc != 0) {
        rl_wire_decoder_deinit(&u->dec);
        rl_tls_ctx_free(u->tls);
        free(u->slots);
        free(u->free_slots);
        free(u);
        return rc;
    }
    rl_connq_set_tls(&u->q, NULL, u->tls);
    u->handles = 3;
    uv_timer_init(loop, &u->retry);
    u->retry.data = u;
    uv_timer_init(loop, &u->expiry);
    u->expiry.data = u;
    rl_conn_init(&u->conn, &u->q, &uv_conn_ops, u);
    start_connect(u);
    *out = u;
    return 0;
}

/* One CHECK (cost), ADJUST (delta) or RELEASE (cost: its count) submitted; bounds checked
 * by the callers but for the strings. */
static int
uv_submit(rlc_uv *u, uint8_t op, const char *service, const char *user, const char *endpoint,
          uint32_t cost, int32_t delta, int timeout_ms, rlc_uv_cb cb, void *arg)
{
    struct rl_wire_req req;
    struct rl_buf b;
    struct uvreq *r;
    size_t slen, ulen, elen;
    uint32_t slot;
    int rc;

    if (u == NULL || cb == NULL || service == NULL || user == NULL) {
        return -EINVAL;
    }
    if (u->closing) {
        return -ESHUTDOWN;
    }
    slen = strlen(service);
    ulen = strlen(user);
    elen = endpoint != NULL ? strlen(endpoint) : 0;
    if (slen < 1 || slen > RL_WIRE_SERVICE_MAX || ulen < 1 || ulen > RL_WIRE_USER_MAX ||
        elen > RL_WIRE_ENDPOINT_MAX) {
        return -EINVAL;
    }
    if (u->nfree == 0) {
        return -ENOBUFS;
    }
    slot = u->free_slots[u->nfree - 1];
    r = &u->slots[slot];
    memset(&req, 0, sizeof(req));
    req.op = op;
    req.id = ((uint32_t)r->gen << SLOT_BITS) | (slot + 1u);
    req.service.ptr = service;
    req.service.len = (uint32_t)slen;
    req.user.ptr = user;
    req.user.len = (uint32_t)ulen;
    if (endpoint != NULL) {
        req.endpoint.ptr = endpoint;
        req.endpoint.len = (uint32_t)elen;
    }
    req.cost = cost;
    req.delta = delta;
    if (u->conn.connected && !u->auth_refused) {
        rc = rl_wire_put_req(&u->conn.out, &req);
        if (rc != 0) {
            return -ENOMEM;
        }
        r->state = REQ_IN_FLIGHT;
        list_push(&u->in_flight, r);
        u->st.sent++;
        if (u->in_flight.n > u->st.max_in_flight) {
            u->st.max_in_flight = u->in_flight.n;
        }
        rl_conn_mark(&u->conn);
    } else {
        rl_buf_init(&b);
        if (rl_wire_put_req(&b, &req) != 0) {
            rl_buf_deinit(&b);
            return -ENOMEM;
        }
        r->frame = b.data; /* the buffer's memory is the request's now */
        r->len = b.len;
        r->state = REQ_WAITING;
        list_push(&u->waiting, r);
    }
    u->nfree--;
    r->id = req.id;
    r->op = op;
    r->cb = cb;
    r->arg = arg;
    if (timeout_ms < 0) {
        r->deadline = NO_DEADLINE;
    } else {
        uv_update_time(u->loop);
        r->deadline = uv_now(u->loop) + (uint64_t)timeout_ms;
        arm_expiry(u, r->deadline);
    }
    return 0;
}

int
rlc_uv_check(rlc_uv *u, const char *service, const char *user, const char *endpoint,
             uint32_t cost, int timeout_ms, rlc_uv_cb cb, void *arg)
{
    if (cost > RL_WIRE_COST_MAX) {
        return -EINVAL;
    }
    return uv_submit(u, RL_WIRE_OP_CHECK, service, user, endpoint, cost, 0, timeout_ms, cb, arg);
}

int
rlc_uv_adjust(rlc_uv *u, const char *service, const char *user, const char *endpoint,
              int32_t delta, int timeout_ms, rlc_uv_cb cb, void *arg)
{
    if (delta < -RL_WIRE_DELTA_MAX || delta > RL_WIRE_DELTA_MAX) {
        return -EINVAL;
    }
    return uv_submit(u, RL_WIRE_OP_ADJUST, service, user, endpoint, 0, delta, timeout_ms, cb,
                     arg);
}

int
rlc_uv_release(rlc_uv *u, const char *service, const char *user, const char *endpoint,
               uint32_t count, int timeout_ms, rlc_uv_cb cb, void *arg)
{
    if (count < 1 || count > RL_WIRE_COUNT_MAX) {
        return -EINVAL;
    }
    return uv_submit(u, RL_WIRE_OP_RELEASE, service, user, endpoint, count, 0, timeout_ms, cb,
                     arg);
}

void
rlc_uv_close(rlc_uv *u, void (*on_closed)(void *arg), void *arg)
{
    if (u == NULL || u->closing) {
        return;
    }
    u->closing = true;
    u->on_closed = on_closed;
    u->closed_arg = arg;
    uv_timer_stop(&u->retry);
    uv_timer_stop(&u->expiry);
    /* -ECANCELED drains the lists even of what the callbacks add (they get -ESHUTDOWN). */
    fail_all(u, &u->waiting, -ECANCELED);
    fail_all(u, &u->in_flight, -ECANCELED);
    rl_conn_close(&u->conn, UV_ECANCELED);
    uv_close((uv_handle_t *)&u->retry, handle_closed);
    uv_close((uv_handle_t *)&u->expiry, handle_closed);
    rl_connq_close(&u->q, connq_closed, u);
}

void
rlc_uv_get_stats(const rlc_uv *u, struct rlc_uv_stats *st)
{
    if (u == NULL || st == NULL) {
        return;
    }
    *st = u->st;
    st->waiting = u->waiting.n;
    st->in_flight = u->in_flight.n;
}
