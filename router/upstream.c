/*
 * upstream: connections from the router to one node. A connection that fails is closed at
 * once and its requests handed back to the router (on_lost), which answers them by failure
 * policy: no request waits on a dead node. Reconnects back off from 50 ms to 2 s, doubling,
 * and reset when a connection succeeds or the node re-registers (rl_upstream_kick).
 */
#include "upstream.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "log.h"

#define UPSTREAM_READ_CHUNK (64u * 1024u)

static void upconn_connect(struct rl_upconn *c);
static void upstream_retry(uv_timer_t *t);

/* Drops one open handle; the upstream is freed with its last handle once retired. */
static void
upstream_unref(struct rl_upstream *u)
{
    u->handles--;
    if (u->retired && u->handles == 0) {
        for (int i = 0; i < RL_UPSTREAM_CONNS; i++) {
            rl_buf_deinit(&u->conns[i].in);
            rl_buf_deinit(&u->conns[i].out);
            rl_buf_deinit(&u->conns[i].inflight);
            rl_wire_decoder_deinit(&u->conns[i].dec);
        }
        free(u);
    }
}

static void
upstream_handle_closed(uv_handle_t *h)
{
    upstream_unref(h->data);
}

static void
upconn_closed(uv_handle_t *h)
{
    struct rl_upconn *c = h->data;

    c->closing = false;
    upstream_unref(c->up);
}

static void
schedule_retry(struct rl_upstream *u)
{
    if (u->retired || uv_is_active((uv_handle_t *)&u->retry)) {
        return;
    }
    uv_timer_start(&u->retry, upstream_retry, u->backoff_ms, 0);
}

/* Closes c and hands its pending requests back to the router. */
static void
upconn_lost(struct rl_upconn *c, int status)
{
    struct rl_upstream *u = c->up;

    if (!c->open) {
        return;
    }
    if (c->connected) {
        u->stats.downs++;
        rl_log_warn("node %s (%s): connection lost: %s", u->name, u->addr, uv_strerror(status));
    }
    c->open = false;
    c->closing = true;
    c->connected = false;
    if (c->npending > 0) {
        u->ops.on_lost(u->ops.arg, c);
    }
    rl_buf_reset(&c->in);
    rl_buf_reset(&c->out);
    /* Requests of a write that failed must not go out on the next connection: they were
     * answered by policy above. Resetting keeps the memory a cancelled write points into. */
    rl_buf_reset(&c->inflight);
    uv_close((uv_handle_t *)&c->tcp, upconn_closed);
    schedule_retry(u);
}

static void
upconn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct rl_upconn *c = h->data;

    (void)suggested;
    if (rl_buf_reserve(&c->in, UPSTREAM_READ_CHUNK) != 0) {
        buf->base = NULL;
        buf->len = 0;
        return;
    }
    buf->base = c->in.data + c->in.len;
    buf->len = c->in.cap - c->in.len;
}

static void
upconn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct rl_upconn *c = s->data;
    struct rl_upstream *u = c->up;
    size_t plen;
    int rc;

    (void)buf;
    if (nread < 0) {
        upconn_lost(c, (int)nread);
        return;
    }
    c->in.len += (size_t)nread;
    while (c->open) {
        rc = rl_wire_frame(c->in.data + c->in.pos, rl_buf_unread(&c->in), &plen);
        if (rc == 0) {
            break;
        }
        if (rc < 0) {
            upconn_lost(c, UV_EPROTO);
            return;
        }
        u->stats.replies++;
        u->ops.on_frame(u->ops.arg, c, c->in.data + c->in.pos + RL_WIRE_HDR_LEN, plen);
        c->in.pos += RL_WIRE_HDR_LEN + plen;
    }
    rl_buf_compact(&c->in);
}

static void
upconn_connected(uv_connect_t *req, int status)
{
    struct rl_upconn *c = req->data;
    struct rl_upstream *u = c->up;

    if (!c->open) {
        return;
    }
    if (status < 0) {
        rl_log_debug("node %s (%s): connect: %s", u->name, u->addr, uv_strerror(status));
        upconn_lost(c, status);
        return;
    }
    if (uv_read_start((uv_stream_t *)&c->tcp, upconn_alloc, upconn_read) != 0) {
        upconn_lost(c, UV_EIO);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    if (!rl_upstream_up(u)) {
        rl_log_info("node %s (%s): connected", u->name, u->addr);
    }
    c->connected = true;
    u->backoff_ms = RL_UPSTREAM_BACKOFF_MIN_MS;
}

static void
upconn_connect(struct rl_upconn *c)
{
    struct rl_upstream *u = c->up;

    if (c->open || c->closing || u->retired) {
        return;
    }
    uv_tcp_init(u->loop, &c->tcp);
    c->tcp.data = c;
    c->open = true;
    u->handles++;
    c->creq.data = c;
    if (uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&u->sa, upconn_connected) !=
        0) {
        upconn_lost(c, UV_ECONNREFUSED);
    }
}

static void
upstream_retry(uv_timer_t *t)
{
    struct rl_upstream *u = t->data;
    bool closing = false;

    for (int i = 0; i < RL_UPSTREAM_CONNS; i++) {
        upconn_connect(&u->conns[i]);
        closing = closing || u->conns[i].closing;
    }
    u->backoff_ms *= 2;
    if (u->backoff_ms > RL_UPSTREAM_BACKOFF_MAX_MS) {
        u->backoff_ms = RL_UPSTREAM_BACKOFF_MAX_MS;
    }
    /* A connection still closing (lost this loop turn, kicked at once) cannot be reopened
     * yet; without another try it would stay down until some other connection fails. */
    if (closing) {
        schedule_retry(u);
    }
}

int
rl_upstream_create(struct rl_upstream **out, uv_loop_t *loop, const char *name, const char *addr,
                   const struct rl_upstream_ops *ops)
{
    struct rl_upstream *u;
    char *host = NULL;
    uint16_t port;
    int rc;

    if (rl_parse_hostport(addr, &host, &port) != NULL) {
        return -EINVAL;
    }
    u = calloc(1, sizeof(*u));
    if (u == NULL) {
        free(host);
        return -ENOMEM;
    }
    rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&u->sa);
    if (rc != 0) {
        rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&u->sa);
    }
    free(host);
    if (rc != 0) {
        free(u);
        return -EINVAL;
    }
    snprintf(u->name, sizeof(u->name), "%s", name);
    snprintf(u->addr, sizeof(u->addr), "%s", addr);
    u->loop = loop;
    u->ops = *ops;
    u->backoff_ms = RL_UPSTREAM_BACKOFF_MIN_MS;
    uv_timer_init(loop, &u->retry);
    u->retry.data = u;
    u->handles = 1;
    for (int i = 0; i < RL_UPSTREAM_CONNS; i++) {
        struct rl_upconn *c = &u->conns[i];

        c->up = u;
        rl_buf_init(&c->in);
        rl_buf_init(&c->out);
        rl_buf_init(&c->inflight);
        if (rl_wire_decoder_init(&c->dec) != 0) {
            /* Nothing is open yet but the timer: retiring frees everything. */
            rl_upstream_retire(u);
            return -ENOMEM;
        }
        upconn_connect(c);
    }
    *out = u;
    return 0;
}

bool
rl_upstream_up(const struct rl_upstream *u)
{
    for (int i = 0; i < RL_UPSTREAM_CONNS; i++) {
        if (u->conns[i].connected) {
            return true;
        }
    }
    return false;
}

struct rl_upconn *
rl_upstream_pick(struct rl_upstream *u)
{
    if (u->retired) {
        return NULL;
    }
    for (int i = 0; i < RL_UPSTREAM_CONNS; i++) {
        struct rl_upconn *c = &u->conns[u->rr++ % RL_UPSTREAM_CONNS];

        if (c->connected &&
            rl_buf_unread(&c->out) + rl_buf_unread(&c->inflight) < RL_UPSTREAM_OUT_MAX) {
            return c;
        }
    }
    return NULL;
}

void
rl_upstream_mark(struct rl_upconn *c)
{
    if (!c->dirty) {
        c->dirty = true;
        c->up->ops.on_dirty(c->up->ops.arg, c);
    }
}

static void
upconn_written(uv_write_t *w, int status)
{
    struct rl_upconn *c = w->data;

    c->writing = false;
    rl_buf_reset(&c->inflight);
    if (status < 0) {
        upconn_lost(c, status);
        return;
    }
    if (rl_buf_unread(&c->out) > 0) {
        rl_upstream_flush(c);
    }
}

void
rl_upstream_flush(struct rl_upconn *c)
{
    struct rl_buf tmp;
    uv_buf_t b;

    if (!c->connected || c->writing || rl_buf_unread(&c->out) == 0) {
        return;
    }
    tmp = c->inflight;
    c->inflight = c->out;
    c->out = tmp;
    b = uv_buf_init(c->inflight.data + c->inflight.pos, (unsigned)rl_buf_unread(&c->inflight));
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, upconn_written) != 0) {
        upconn_lost(c, UV_EIO);
        return;
    }
    c->writing = true;
}

void
rl_upstream_kick(struct rl_upstream *u)
{
    if (u->retired) {
        return;
    }
    u->backoff_ms = RL_UPSTREAM_BACKOFF_MIN_MS;
    uv_timer_stop(&u->retry);
    upstream_retry(&u->retry);
}

void
rl_upstream_retire(struct rl_upstream *u)
{
    if (u->retired) {
        return;
    }
    u->retired = true;
    uv_timer_stop(&u->retry);
    for (int i = 0; i < RL_UPSTREAM_CONNS; i++) {
        upconn_lost(&u->conns[i], UV_ECANCELED);
    }
    uv_close((uv_handle_t *)&u->retry, upstream_handle_closed);
}
