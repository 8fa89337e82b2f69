/*
 * reqclient_calls: the typed calls of the request client (reqclient.h), on its transport
 * (reqclient.c, through reqclient_int.h): one request and its reply matched by id (CHECK,
 * ADJUST and RELEASE,
 * PING, AUTH and the token files, STATS and rl_client_stat, THROTTLED, HOT, CLOCK), and
 * check_many's pipelined batch, its n ids after the last batch's, filed as they come. Not for sockets, TLS or
 * framing (reqclient.c), and not thread-safe.
 */
#include "reqclient.h"

#include "auth.h"
#include "reqclient_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t
take_id(struct rl_client *c)
{
    uint32_t id = c->next_id++;

    if (c->next_id == 0) {
        c->next_id = CLIENT_ID_BASE;
    }
    return id;
}

/*
 * Sends one queued-up request and waits for the reply carrying its id, skipping late
 * replies to earlier calls that timed out, until the deadline: replies that keep coming
 * for other ids do not hold the call past it. An ERROR with id 0 (the server could not
 * read our id) is taken as the answer. Returns 0 with *rep set, or a negative errno.
 */
static int
call(struct rl_client *c, uint32_t id, uint32_t op, struct rl_wire_reply *rep, int64_t deadline)
{
    int rc;

    rc = client_flush_until(c, deadline);
    if (rc != 0) {
        return rc;
    }
    for (;;) {
        rc = client_recv_until(c, rep, deadline);
        if (rc != 0) {
            return rc;
        }
        if (rep->op == RL_WIRE_OP_ERROR && (rep->id == id || rep->id == 0)) {
            return 0;
        }
        if (rep->id == id) {
            return rep->op == op ? 0 : -EPROTO;
        }
        if (client_expired(deadline)) {
            return -ETIMEDOUT;
        }
    }
}

/* Starts a single request: the frame the last call returned is dropped, req gets op and a
 * fresh id. */
static void
req_begin(struct rl_client *c, struct rl_wire_req *req, uint32_t op)
{
    client_release_held(c);
    memset(req, 0, sizeof(*req));
    req->op = op;
    req->id = take_id(c);
}

/* Queues req and waits for its reply. */
static int
req_call(struct rl_client *c, const struct rl_wire_req *req, struct rl_wire_reply *rep,
         int64_t deadline)
{
    int rc = rl_client_queue(c, req);

    if (rc != 0) {
        return rc;
    }
    return call(c, req->id, req->op, rep, deadline);
}

static void
set_str(struct rl_wire_str *field, const char *s)
{
    if (s != NULL) {
        field->ptr = s;
        field->len = (uint32_t)strlen(s);
    }
}

int
rl_client_check(struct rl_client *c, const char *service, const char *user, const char *endpoint,
                uint32_t cost, struct rl_wire_reply *rep, int timeout_ms)
{
    return rl_client_check_limit(c, service, user, endpoint, cost, NULL, rep, timeout_ms);
}

int
rl_client_check_limit(struct rl_client *c, const char *service, const char *user,
                      const char *endpoint, uint32_t cost, const struct rl_wire_limit *limit,
                      struct rl_wire_reply *rep, int timeout_ms)
{
    int64_t deadline = client_deadline_after(timeout_ms);
    struct rl_wire_req req;

    req_begin(c, &req, RL_WIRE_OP_CHECK);
    set_str(&req.service, service);
    set_str(&req.user, user);
    set_str(&req.endpoint, endpoint);
    req.cost = cost;
    if (limit != NULL && limit->set) {
        req.limit = *limit;
    }
    return req_call(c, &req, rep, deadline);
}

int
rl_client_settle(struct rl_client *c, uint32_t op, const char *service, const char *user,
                 const char *endpoint, int64_t amount, const struct rl_wire_limit *limit,
                 struct rl_wire_reply *rep, int timeout_ms)
{
    int64_t deadline = client_deadline_after(timeout_ms);
    struct rl_wire_req req;

    req_begin(c, &req, op);
    set_str(&req.service, service);
    set_str(&req.user, user);
    set_str(&req.endpoint, endpoint);
    if (op == RL_WIRE_OP_ADJUST) {
        req.delta = (int32_t)amount;
    } else {
        req.cost = (uint32_t)amount;
    }
    if (limit != NULL && limit->set) {
        req.limit = *limit;
    }
    return req_call(c, &req, rep, deadline);
}

static int
simple_call(struct rl_client *c, uint32_t op, uint64_t now_ms, struct rl_wire_reply *rep,
            int timeout_ms)
{
    int64_t deadline = client_deadline_after(timeout_ms);
    struct rl_wire_req req;

    req_begin(c, &req, op);
    req.now_ms = now_ms;
    return req_call(c, &req, rep, deadline);
}

int
rl_client_ping(struct rl_client *c, struct rl_wire_reply *rep, int timeout_ms)
{
    return simple_call(c, RL_WIRE_OP_PING, 0, rep, timeout_ms);
}

int
rl_client_auth(struct rl_client *c, const char *token, size_t len, struct rl_wire_reply *rep,
               int timeout_ms)
{
    int64_t deadline = client_deadline_after(timeout_ms);
    struct rl_wire_req req;
    int rc;

    req_begin(c, &req, RL_WIRE_OP_AUTH);
    req.token.ptr = token;
    req.token.len = (uint32_t)len;
    rc = req_call(c, &req, rep, deadline);
    if (rc == 0 && rep->op == RL_WIRE_OP_ERROR) {
        return rep->err == RL_WIRE_ERR_UNAUTHORIZED ? -EACCES : -EPROTO;
    }
    return rc;
}

int
rl_client_auth_token_file(const char *path, int (*auth)(void *arg, const char *token, size_t len),
                          void *arg, const char *(*describe)(int rc), char *why, size_t whylen)
{
    char token[RL_AUTH_TOKEN_MAX];
    size_t len;
    int rc;

    if (path == NULL) {
        path = getenv("RL_TOKEN_FILE");
    }
    if (path == NULL || path[0] == '\0') {
        return 0;
    }
    rc = rl_auth_read_secret(path, 1, token, sizeof(token), &len, why, whylen);
    if (rc == 0) {
        rc = auth(arg, token, len);
        if (rc == -EACCES) {
            snprintf(why, whylen, "the server refused the token in %s", path);
        } else if (rc != 0) {
            snprintf(why, whylen, "AUTH failed: %s", describe(rc));
        }
    }
    rl_auth_wipe(token, sizeof(token));
    return rc;
}

/* The timeout of rl_client_auth_file's AUTH, for its callback. */
struct auth_arg {
    struct rl_client *c;
    int timeout_ms;
};

static int
auth_with(void *arg, const char *token, size_t len)
{
    struct auth_arg *a = arg;

    return rl_client_auth(a->c, token, len, &a->c->scratch, a->timeout_ms);
}

static const char *
describe_errno(int rc)
{
    return strerror(-rc);
}

int
rl_client_auth_file(struct rl_client *c, const char *path, int timeout_ms, char *why, size_t whylen)
{
    struct auth_arg a = {c, timeout_ms};

    return rl_client_auth_token_file(path, auth_with, &a, describe_errno, why, whylen);
}

int
rl_client_stats(struct rl_client *c, struct rl_wire_reply *rep, int timeout_ms)
{
    return simple_call(c, RL_WIRE_OP_STATS, 0, rep, timeout_ms);
}

int
rl_client_throttled(struct rl_client *c, const char *service, const uint64_t *since_ms,
                    uint32_t top, struct rl_wire_reply *rep, int timeout_ms)
{
    int64_t deadline = client_deadline_after(timeout_ms);
    struct rl_wire_req req;

    req_begin(c, &req, RL_WIRE_OP_THROTTLED);
    set_str(&req.service, service);
    if (since_ms != NULL) {
        req.has_since = true;
        req.since_ms = *since_ms;
    }
    req.top = top;
    return req_call(c, &req, rep, deadline);
}

int
rl_client_hot(struct rl_client *c, const char *service, uint32_t top, struct rl_wire_reply *rep,
              int timeout_ms)
{
    int64_t deadline = client_deadline_after(timeout_ms);
    struct rl_wire_req req;

    req_begin(c, &req, RL_WIRE_OP_HOT);
    set_str(&req.service, service);
    req.top = top;
    return req_call(c, &req, rep, deadline);
}

int
rl_client_clock(struct rl_client *c, uint64_t now_ms, int timeout_ms)
{
    struct rl_wire_reply *rep = &c->scratch;
    int rc;

    rc = simple_call(c, RL_WIRE_OP_CLOCK, now_ms, rep, timeout_ms);
    if (rc != 0) {
        return rc;
    }
    if (rep->op == RL_WIRE_OP_ERROR) {
        return rep->err == RL_WIRE_ERR_UNKNOWN_OP ? -EOPNOTSUPP : -EPROTO;
    }
    return rep->now_ms == now_ms ? 0 : -EPROTO;
}

int64_t
rl_client_stat(const struct rl_wire_reply *rep, const char *key, int64_t def)
{
    size_t klen = strlen(key), i;

    if (rep->op != RL_WIRE_OP_STATS) {
        return def;
    }
    for (i = 0; i < rep->nstats; i++) {
        if (rep->stat_keys[i].len == klen && memcmp(rep->stat_keys[i].ptr, key, klen) == 0) {
            return rep->stat_vals[i];
        }
    }
    return def;
}

/*
 * Files one reply of a check_many batch whose ids are base + 1 .. base + n. Returns 0, 1
 * for a reply to something else (a late answer to an earlier single call or batch,
 * skipped), or -EPROTO for a reply no request of the batch can own: a duplicate, an ERROR
 * with id 0, or the wrong op.
 */
static int
file_reply(const struct rl_wire_reply *rep, uint32_t base, uint8_t *seen, size_t n,
           struct rl_wire_check_reply *reps)
{
    size_t i;

    if (rep->id == 0) {
        return -EPROTO;
    }
    if (rep->id <= base || rep->id - base > n) {
        return 1;
    }
    i = rep->id - base - 1;
    if (seen[i / 8] & (1u << (i % 8))) {
        return -EPROTO;
    }
    seen[i / 8] |= (uint8_t)(1u << (i % 8));
    if (rep->op == RL_WIRE_OP_CHECK) {
        reps[i] = rep->check;
        reps[i].id = rep->id;
    } else if (rep->op == RL_WIRE_OP_ERROR) {
        memset(&reps[i], 0, sizeof(reps[i]));
        reps[i].id = rep->id;
        reps[i].code = RL_CLIENT_CODE_ERROR;
        reps[i].limit = rep->err;
    } else {
        return -EPROTO;
    }
    return 0;
}

int
rl_client_check_many(struct rl_client *c, struct rl_wire_req *reqs, size_t n,
                     struct rl_wire_check_reply *reps, int timeout_ms)
{
    int64_t deadline = client_deadline_after(timeout_ms);
    uint8_t *seen = NULL;
    size_t got = 0, i, len;
    uint32_t base;
    const char *p;
    int rc;

    client_release_held(c);
    if (n == 0) {
        return 0;
    }
    if (n >= CLIENT_ID_BASE) {
        return -EINVAL;
    }
    seen = calloc(n / 8 + 1, 1);
    if (seen == NULL) {
        return -ENOMEM;
    }
    /* Ids after the last batch's, from 1 again when they would reach CLIENT_ID_BASE: a reply
     * to an earlier batch, late or sent twice, is skipped, not taken for this one's. */
    base = n < CLIENT_ID_BASE - c->batch_id ? c->batch_id : 0;
    c->batch_id = base + (uint32_t)n;
    /* Everything is encoded up front (about 30 bytes a request) and written as the socket
     * takes it; client_pump() reads between writes, so neither side's buffers can fill for good. */
    for (i = 0; i < n; i++) {
        reqs[i].op = RL_WIRE_OP_CHECK;
        reqs[i].id = base + (uint32_t)(i + 1);
        rc = rl_wire_put_check(&c->out, &reqs[i]);
        if (rc != 0) {
            goto out;
        }
    }
    rc = client_write_some(c);
    while (rc == 0 && got < n) {
        for (;;) {
            rc = rl_wire_frame(c->in.data + c->in.pos, rl_buf_unread(&c->in), &len);
            if (rc <= 0) {
                break;
            }
            p = c->in.data + c->in.pos + RL_WIRE_HDR_LEN;
            c->in.pos += RL_WIRE_HDR_LEN + len;
            rc = rl_wire_decode_reply(&c->dec, p, len, &c->scratch);
            if (rc != 0) {
                rc = rc == -ENOMEM ? rc : -EPROTO;
                goto out;
            }
            rc = file_reply(&c->scratch, base, seen, n, reps);
            if (rc < 0) {
                goto out;
            }
            if (rc == 0) {
                got++;
            }
        }
        if (rc < 0) {
            c->rd_err = -EPROTO;
            goto out;
        }
        if (got == n) {
            break;
        }
        if (c->rd_err != 0) {
            rc = c->rd_err;
            goto out;
        }
        if (client_expired(deadline)) {
            rc = -ETIMEDOUT; /* replies to other ids kept coming: they do not hold the batch */
            goto out;
        }
        rc = client_pump(c, deadline);
        if (rc == -ECONNRESET && c->rd_err == 0) {
            /* The write side failed: read what the server sent before it left. */
            c->rd_err = rc;
            rc = 0;
        }
    }

out:
    client_release_held(c);
    free(seen);
    return rc;
}
