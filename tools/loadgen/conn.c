/*
 * conn: rl-bench's connections (conn.h): encoding, writing, reading replies, closing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "mp.h"
#include "reqclient.h"
#include "tls.h"
#include "workload.h"

static void
on_write(uv_write_t *req, int status)
{
    struct conn *c = req->data;

    c->writing = false;
    rl_buf_reset(&c->wbuf);
    if (c->dead) {
        return;
    }
    if (status < 0) {
        lg_conn_kill(c, "write", status);
        return;
    }
    lg_conn_flush(c);
}

/* One write per connection per loop turn: try it at once, and if the socket takes only
 * part, hand the rest to libuv and keep encoding into the other buffer meanwhile. */
void
lg_conn_flush(struct conn *c)
{
    struct rl_buf tmp, *src = &c->out;
    uv_buf_t buf;
    int rc;

    if (c->writing || c->dead) {
        return;
    }
    if (c->tls != NULL) {
        /* TLS: what is encoded is encrypted (once the handshake is done) and the ciphertext,
         * with anything the handshake has to send, is what is written. */
        long n = rl_tls_write(c->tls, c->out.data + c->out.pos, rl_buf_unread(&c->out));

        if (n < 0) {
            fprintf(stderr, "rl-bench: connection %u: TLS: %s\n", c->index, rl_tls_why(c->tls));
            lg_conn_kill(c, "tls", UV_EPROTO);
            return;
        }
        c->out.pos += (size_t)n;
        if (rl_buf_unread(&c->out) == 0) {
            rl_buf_reset(&c->out);
        }
        if (rl_tls_take_buf(c->tls, &c->ct) != 0) {
            lg_conn_kill(c, "tls", UV_ENOMEM);
            return;
        }
        src = &c->ct;
    }
    if (rl_buf_unread(src) == 0) {
        return;
    }
    buf = uv_buf_init(src->data + src->pos, (unsigned)rl_buf_unread(src));
    rc = uv_try_write((uv_stream_t *)&c->tcp, &buf, 1);
    if (rc == (int)buf.len) {
        rl_buf_reset(src);
        return;
    }
    if (rc < 0 && rc != UV_EAGAIN) {
        lg_conn_kill(c, "write", rc);
        return;
    }
    if (rc > 0) {
        src->pos += (size_t)rc;
    }
    tmp = c->wbuf;
    c->wbuf = *src;
    *src = tmp;
    buf = uv_buf_init(c->wbuf.data + c->wbuf.pos, (unsigned)rl_buf_unread(&c->wbuf));
    c->write_req.data = c;
    rc = uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &buf, 1, on_write);
    if (rc < 0) {
        rl_buf_reset(&c->wbuf);
        lg_conn_kill(c, "write", rc);
        return;
    }
    c->writing = true;
}

/* Encodes one request (--op: a CHECK, ADJUST or RELEASE) for a fresh key into c->out; its latency
 * will count from t. */
int
lg_conn_send_one(struct conn *c, uint64_t t)
{
    struct bench *b = c->w->b;
    uint32_t slot, id;
    char *p, *start;
    size_t n;

    if (rl_buf_reserve(&c->out, BENCH_HDR_MAX + b->prefix_len + BENCH_USER_MAX + b->suffix_len) !=
        0) {
        return -ENOMEM;
    }
    slot = c->free_slots[--c->nfree];
    c->slot_gen[slot]++;
    c->slot_busy[slot] = 1;
    c->slot_t[slot] = t;
    id = ((uint32_t)c->slot_gen[slot] << 16) | slot;

    start = c->out.data + c->out.len;
    p = start + RL_WIRE_HDR_LEN;
    *p++ = (char)0x96;
    *p++ = (char)b->o.op;
    p = rl_mp_put_uint(p, id);
    memcpy(p, b->prefix, b->prefix_len);
    p += b->prefix_len;
    {
        /* "u" and the key's digits: a fixstr, since it is at most 11 bytes. */
        char *hdr = p;

        p[1] = 'u';
        n = 1 + lg_utoa32(p + 2, lg_next_key(c->w));
        *hdr = (char)(0xa0 | n);
        p += 1 + n;
    }
    memcpy(p, b->suffix, b->suffix_len);
    p += b->suffix_len;
    n = (size_t)(p - start) - RL_WIRE_HDR_LEN;
    start[0] = 0;
    start[1] = 0;
    start[2] = (char)(n >> 8);
    start[3] = (char)n;
    c->out.len += (size_t)(p - start);
    c->inflight++;
    c->w->sent++;
    return 0;
}

static void
conn_release(struct conn *c, uint32_t slot)
{
    c->slot_busy[slot] = 0;
    c->free_slots[c->nfree++] = (uint16_t)slot;
    c->inflight--;
}

/* Files one reply. Returns 0, or -1 when the stream can no longer be trusted. */
static int
conn_reply(struct conn *c, const char *payload, size_t len, uint64_t now)
{
    struct worker *w = c->w;
    uint64_t id, code;
    uint32_t slot;

    if (rl_mp_read_check(payload, len, w->b->o.op, &id, &code) != 0) {
        if (rl_wire_decode_reply(&w->dec, payload, len, w->rep) != 0) {
            return -1;
        }
        id = w->rep->id;
        if (w->rep->op == RL_WIRE_OP_AUTH && id == 0) {
            return 0; /* the answer to this connection's AUTH */
        }
        code = w->rep->op == w->b->o.op ? w->rep->check.code : BENCH_ERRORS;
    }
    slot = (uint32_t)(id & 0xffff);
    if (slot >= w->b->o.pipeline || !c->slot_busy[slot] ||
        c->slot_gen[slot] != (uint16_t)(id >> 16)) {
        /* ERROR id 0: the server could not read a request and will close. */
        lg_worker_count(w, BENCH_ERRORS, 1);
        return id == 0 ? 0 : -1;
    }
    rl_hist_record(&w->hist, now > c->slot_t[slot] ? now - c->slot_t[slot] : 0);
    conn_release(c, slot);
    lg_worker_count(w, (unsigned)code, 1);
    return 0;
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = h->data;

    if (c->tls != NULL) {
        *buf = uv_buf_init(c->w->tls_raw, BENCH_TLS_RAW);
        return;
    }
    *buf = uv_buf_init(c->in + c->in_len, (unsigned)(BENCH_IN_CAP - c->in_len));
}

static int conn_frames(struct conn *c, uint64_t now);
static void conn_up(struct conn *c);

/* TLS: ciphertext read, decrypted into c->in and its replies filed. Returns 0 or -1 (c was
 * killed). */
static int
conn_tls_read(struct conn *c, const char *p, size_t n, uint64_t now)
{
    int got;

    if (rl_tls_feed(c->tls, p, n) != 0) {
        lg_conn_kill(c, "tls", UV_ENOMEM);
        return -1;
    }
    for (;;) {
        got = rl_tls_read(c->tls, c->in + c->in_len, BENCH_IN_CAP - c->in_len);
        if (got < 0) {
            fprintf(stderr, "rl-bench: connection %u: TLS: %s\n", c->index, rl_tls_why(c->tls));
            lg_conn_kill(c, "tls", UV_EPROTO);
            return -1;
        }
        if (got == 0) {
            break;
        }
        c->in_len += (size_t)got;
        if (conn_frames(c, now) != 0) {
            return -1;
        }
    }
    if (!c->up && rl_tls_established(c->tls)) {
        conn_up(c);
    }
    if (!c->dead) {
        lg_conn_flush(c); /* the handshake's answer, or what waited for it */
    }
    return c->dead ? -1 : 0;
}

static void
on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = s->data;
    struct worker *w = c->w;
    uint64_t now;

    if (nread < 0) {
        lg_conn_kill(c, "read", (int)nread);
        return;
    }
    if (nread == 0) {
        return;
    }
    now = uv_hrtime();
    if (c->tls != NULL) {
        if (conn_tls_read(c, buf->base, (size_t)nread, now) != 0) {
            return;
        }
    } else {
        c->in_len += (size_t)nread;
        if (conn_frames(c, now) != 0) {
            return;
        }
    }
    w->t_end = now;
}

/* Files the whole replies in c->in. Returns 0, or -1 when c was killed. */
static int
conn_frames(struct conn *c, uint64_t now)
{
    size_t off = 0, len;
    int rc;

    for (;;) {
        rc = rl_wire_frame(c->in + off, c->in_len - off, &len);
        if (rc == 0) {
            break;
        }
        if (rc < 0 || conn_reply(c, c->in + off + RL_WIRE_HDR_LEN, len, now) != 0) {
            lg_conn_kill(c, "protocol", UV_EPROTO);
            return -1;
        }
        off += RL_WIRE_HDR_LEN + len;
    }
    if (off > 0) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
    return 0;
}

static void
on_close_conn(uv_handle_t *h)
{
    (void)h;
}

void
lg_conn_kill(struct conn *c, const char *why, int status)
{
    struct worker *w = c->w;

    if (c->dead) {
        return;
    }
    c->dead = true;
    if (c->inflight > 0) {
        lg_worker_count(w, BENCH_LOST, c->inflight);
        c->inflight = 0;
    }
    if (!w->finished && status != 0 && status != UV_ECANCELED) {
        snprintf(w->err, sizeof(w->err), "connection %u: %s: %s", c->index, why,
                 status == UV_EOF ? "server closed the connection" : uv_strerror(status));
        fprintf(stderr, "rl-bench: %s\n", w->err);
    }
    if (!uv_is_closing((uv_handle_t *)&c->tcp)) {
        uv_close((uv_handle_t *)&c->tcp, on_close_conn);
    }
    if (c->up) {
        w->nalive--; /* at 0 the worker finishes (its check handle) */
    }
}

void
lg_on_connect(uv_connect_t *req, int status)
{
    struct conn *c = req->data;
    struct worker *w = c->w;

    if (status < 0) {
        if (status != UV_ECANCELED && !w->failed) {
            snprintf(w->err, sizeof(w->err), "cannot connect to %s: %s", w->b->o.target,
                     uv_strerror(status));
            fprintf(stderr, "rl-bench: %s\n", w->err);
            w->failed = true;
        }
        c->dead = true;
        w->connect_failed = true; /* the worker finishes (its check handle) */
        return;
    }
    if (c->dead) {
        return;
    }
    c->connected = true;
    uv_tcp_nodelay(&c->tcp, 1);
    /* AUTH goes first; its reply (id 0) is skipped by conn_reply. */
    if (w->b->o.token_len > 0 &&
        rl_wire_put_auth(&c->out, 0, w->b->o.token, w->b->o.token_len) != 0) {
        lg_conn_kill(c, "auth", UV_ENOMEM);
        return;
    }
    if (w->b->o.tls != NULL) {
        /* TLS: the connection counts once its handshake is done (conn_tls_read). */
        c->tls = rl_tls_new(w->b->o.tls);
        if (c->tls == NULL || rl_tls_start(c->tls) != 0) {
            lg_conn_kill(c, "tls", c->tls == NULL ? UV_ENOMEM : UV_EPROTO);
            return;
        }
    }
    status = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (status < 0) {
        lg_conn_kill(c, "read", status);
        return;
    }
    if (c->tls != NULL) {
        lg_conn_flush(c); /* the ClientHello */
        return;
    }
    conn_up(c);
}

/* c is connected (and, with TLS, through its handshake): the worker starts once all are. */
static void
conn_up(struct conn *c)
{
    struct worker *w = c->w;

    c->up = true;
    w->nalive++;
    w->nconnected++; /* once all are, the worker starts (its check handle) */
}

int
lg_conn_init(struct worker *w, struct conn *c, unsigned index)
{
    unsigned p = w->b->o.pipeline, i;

    c->w = w;
    c->index = index;
    c->in = malloc(BENCH_IN_CAP);
    c->slot_t = calloc(p, sizeof(*c->slot_t));
    c->slot_gen = calloc(p, sizeof(*c->slot_gen));
    c->slot_busy = calloc(p, sizeof(*c->slot_busy));
    c->free_slots = calloc(p, sizeof(*c->free_slots));
    rl_buf_init(&c->out);
    rl_buf_init(&c->wbuf);
    rl_buf_init(&c->ct);
    if (c->in == NULL || c->slot_t == NULL || c->slot_gen == NULL || c->slot_busy == NULL ||
        c->free_slots == NULL) {
        return -ENOMEM;
    }
    for (i = 0; i < p; i++) {
        c->free_slots[i] = (uint16_t)(p - 1 - i);
    }
    c->nfree = p;
    return 0;
}

void
lg_conn_deinit(struct conn *c)
{
    free(c->in);
    free(c->slot_t);
    free(c->slot_gen);
    free(c->slot_busy);
    free(c->free_slots);
    rl_buf_deinit(&c->out);
    rl_buf_deinit(&c->wbuf);
    rl_buf_deinit(&c->ct);
    rl_tls_free(c->tls);
    c->tls = NULL;
}

/* Connects once with the blocking client: resolves the target, proves it answers, and
 * yields the address that worked for the libuv connections. */
int
lg_resolve_target(struct bench *b)
{
    struct rl_client *c = NULL;
    socklen_t len = sizeof(b->addr);
    int rc;

    rc = rl_client_connect_addr(&c, b->o.target, 5000);
    if (rc != 0) {
        fprintf(stderr, "rl-bench: cannot connect to %s: %s\n", b->o.target,
                rc == -EINVAL ? "expected HOST:PORT" : strerror(-rc));
        return rc;
    }
    if (b->o.tls != NULL) {
        char why[256];

        rc = rl_client_start_tls(c, b->o.tls, 5000, why, sizeof(why));
        if (rc != 0) {
            fprintf(stderr, "rl-bench: %s: TLS: %s\n", b->o.target, why);
            rl_client_destroy(c);
            return rc;
        }
    }
    if (b->o.token_len > 0) {
        struct rl_wire_reply *rep = malloc(sizeof(*rep));

        rc = rep == NULL ? -ENOMEM : rl_client_auth(c, b->o.token, b->o.token_len, rep, 5000);
        free(rep);
        if (rc != 0) {
            fprintf(stderr, "rl-bench: %s: AUTH %s\n", b->o.target,
                    rc == -EACCES ? "refused: not a token this server takes" : strerror(-rc));
            rl_client_destroy(c);
            return rc;
        }
    }
    rc = getpeername(rl_client_fd(c), (struct sockaddr *)&b->addr, &len) == 0 ? 0 : -errno;
    rl_client_destroy(c);
    if (rc != 0) {
        fprintf(stderr, "rl-bench: %s: %s\n", b->o.target, strerror(-rc));
    }
    return rc;
}
