/*
 * conn: the framed libuv connection of conn.h. One state machine for every connection:
 *
 *   reading --(queued output > out_max, or holds >= hold_max)--> paused
 *   paused  --(both back to half their bound: leftover frames processed)--> reading
 *   any     --(peer EOF, rl_conn_finish, refusal, protocol error)--> finishing
 *   finishing --(output written, nothing held)--> closed
 *
 * Writes happen at the end of the read that produced them, and otherwise in connq_flush (a
 * uv_check, after the loop's I/O) or when the previous write completes, so the replies to
 * one read leave in one uv_write, and output produced elsewhere (the router's replies from
 * nodes) is gathered per connection for the loop turn; the flush is also where paused
 * connections resume and finished ones close.
 */
#include "conn.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <xxhash.h>

#include "log.h"
#include "wire.h"

static void conn_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);
static void conn_flush(struct rl_conn *c);

/* ---- the flusher ------------------------------------------------------------------------ */

static void
connq_flush(uv_check_t *h)
{
    struct rl_connq *q = h->data;

    /* A new turn: connections that spent their input budget in the last one go on. */
    q->turn++;
    while (q->throttled != NULL) {
        struct rl_conn *c = q->throttled;

        q->throttled = c->throttle_next;
        c->throttle_next = NULL;
        c->throttled = false;
        rl_conn_mark(c);
    }
    /* Flushing a connection may process frames it had left unread, which dirties others
     * (the router forwards them to nodes): drain until nothing is dirty. */
    while (q->dirty != NULL) {
        struct rl_conn *c = q->dirty;

        q->dirty = c->dirty_next;
        c->dirty_next = NULL;
        c->dirty = false;
        conn_flush(c);
    }
    if (q->throttled == NULL) {
        uv_idle_stop(&q->idle);
    }
}

static void
connq_idle(uv_idle_t *h)
{
    (void)h; /* only there to keep poll from blocking while connections are dirty */
}

static void
connq_handle_closed(uv_handle_t *h)
{
    struct rl_connq *q = h->data;

    if (--q->handles == 0) {
        free(q->slab);
        q->slab = NULL;
        if (q->on_closed != NULL) {
            q->on_closed(q->data);
        }
    }
}

int
rl_connq_init(struct rl_connq *q, uv_loop_t *loop)
{
    int rc;

    memset(q, 0, sizeof(*q));
    q->loop = loop;
    q->client_budget = RL_CONN_DEFAULT_BUFFER_MEMORY;
    q->slab = malloc(RL_CONN_READ_CHUNK);
    if (q->slab == NULL) {
        return UV_ENOMEM;
    }
    rc = uv_check_init(loop, &q->check);
    if (rc != 0) {
        free(q->slab);
        q->slab = NULL;
        return rc;
    }
    q->check.data = q;
    uv_idle_init(loop, &q->idle);
    q->idle.data = q;
    q->handles = 2;
    rc = uv_check_start(&q->check, connq_flush);
    /* The flusher alone must not keep the loop alive. */
    uv_unref((uv_handle_t *)&q->check);
    uv_unref((uv_handle_t *)&q->idle);
    return rc;
}

void
rl_connq_close(struct rl_connq *q, void (*on_closed)(void *data), void *data)
{
    if (q->closing) {
        return;
    }
    q->closing = true;
    q->on_closed = on_closed;
    q->data = data;
    uv_close((uv_handle_t *)&q->check, connq_handle_closed);
    uv_close((uv_handle_t *)&q->idle, connq_handle_closed);
}

/* ---- one connection --------------------------------------------------------------------- */

static void
conn_setup(struct rl_conn *c, struct rl_connq *q, const struct rl_conn_ops *ops, void *data)
{
    c->q = q;
    c->ops = ops;
    c->data = data;
    rl_buf_init(&c->in);
    rl_buf_init(&c->out);
    rl_buf_init(&c->inflight);
    c->out_max = RL_CONN_OUT_MAX;
    c->hold_max = RL_CONN_HOLD_MAX;
    snprintf(c->peer, sizeof(c->peer), "?");
}

void
rl_conn_init(struct rl_conn *c, struct rl_connq *q, const struct rl_conn_ops *ops, void *data)
{
    memset(c, 0, sizeof(*c));
    conn_setup(c, q, ops, data);
}

void
rl_conn_deinit(struct rl_conn *c)
{
    rl_buf_deinit(&c->in);
    rl_buf_deinit(&c->out);
    rl_buf_deinit(&c->inflight);
}

/* Brings q->client_bytes up to date with the buffers of c (a listener's connection). */
static void
conn_account(struct rl_conn *c)
{
    uint64_t bytes;

    if (c->listener == NULL) {
        return;
    }
    bytes = (uint64_t)c->in.cap + c->out.cap + c->inflight.cap;
    c->q->client_bytes = c->q->client_bytes - c->acct_bytes + bytes;
    c->acct_bytes = bytes;
}

/* Empties b, and gives its memory back when it grew past what an idle connection keeps. */
static void
buf_trim(struct rl_buf *b)
{
    if (rl_buf_unread(b) != 0) {
        return;
    }
    if (b->cap > RL_CONN_KEEP_BYTES) {
        rl_buf_deinit(b);
    } else {
        rl_buf_reset(b);
    }
}

/* Fills c->peer ("ip:port") and, when addr is not NULL, the address as 16 bytes (IPv4
 * mapped into IPv6). */
static void
conn_peer_name(struct rl_conn *c, uint8_t *addr)
{
    struct sockaddr_storage sa;
    int len = sizeof(sa);
    char ip[INET6_ADDRSTRLEN];

    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &len) != 0) {
        if (addr != NULL) {
            memset(addr, 0, 16);
        }
        return;
    }
    if (sa.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&sa;

        uv_ip6_name(a, ip, sizeof(ip));
        snprintf(c->peer, sizeof(c->peer), "[%s]:%u", ip, ntohs(a->sin6_port));
        if (addr != NULL) {
            memcpy(addr, &a->sin6_addr, 16);
        }
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&sa;

        uv_ip4_name(a, ip, sizeof(ip));
        snprintf(c->peer, sizeof(c->peer), "%s:%u", ip, ntohs(a->sin_port));
        if (addr != NULL) {
            memset(addr, 0, 10);
            addr[10] = addr[11] = 0xff;
            memcpy(addr + 12, &a->sin_addr, 4);
        }
    }
}

/* ---- peers: client connections per address ----------------------------------------------- */

static size_t
peer_bucket(const uint8_t *addr)
{
    return (size_t)(XXH3_64bits(addr, 16) % RL_CONN_PEER_BUCKETS);
}

/* The count of addr, created at 0 if absent; NULL when out of memory. */
static struct rl_conn_peer *
peer_get(struct rl_listener *l, const uint8_t *addr)
{
    struct rl_conn_peer **head = &l->peers[peer_bucket(addr)];
    struct rl_conn_peer *p;

    for (p = *head; p != NULL; p = p->next) {
        if (memcmp(p->addr, addr, 16) == 0) {
            return p;
        }
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return NULL;
    }
    memcpy(p->addr, addr, 16);
    p->next = *head;
    *head = p;
    l->stats.peers++;
    return p;
}

/* Frees the count of p's address once no connection holds it. */
static void
peer_drop(struct rl_listener *l, struct rl_conn_peer *p)
{
    struct rl_conn_peer **pp = &l->peers[peer_bucket(p->addr)];

    if (p->count > 0) {
        return;
    }
    while (*pp != p) {
        pp = &(*pp)->next;
    }
    *pp = p->next;
    free(p);
    l->stats.peers--;
}

/* c stops counting as a client of its listener (closing, or turned router). */
static void
conn_unclient(struct rl_conn *c)
{
    struct rl_listener *l = c->listener;

    if (c->peer_entry != NULL) {
        c->peer_entry->count--;
        peer_drop(l, c->peer_entry);
        c->peer_entry = NULL;
        l->clients--;
    }
}

static void
listener_unref(struct rl_listener *l)
{
    l->handles--;
    if (l->closing && l->handles == 0 && l->on_closed != NULL) {
        l->on_closed(l);
    }
}

static void listener_accept(uv_stream_t *server, int status);

static void
conn_closed(uv_handle_t *h)
{
    struct rl_conn *c = h->data;
    struct rl_listener *l = c->listener;

    rl_buf_reset(&c->in);
    rl_buf_reset(&c->out);
    rl_buf_reset(&c->inflight);
    c->holds = 0;
    c->writing = false;
    c->eof = false;
    c->finishing = false;
    if (c->ops->on_closed != NULL) {
        c->ops->on_closed(c);
    }
    if (l != NULL) {
        rl_conn_deinit(c);
        conn_account(c);
        free(c);
        listener_unref(l);
        if (l->accept_paused && !l->closing) {
            /* A descriptor is free again: take the connection accept(2) left waiting. */
            l->accept_paused = false;
            listener_accept((uv_stream_t *)&l->tcp, 0);
        }
    }
}

static void
conn_unthrottle(struct rl_conn *c)
{
    struct rl_conn **pp = &c->q->throttled;

    if (!c->throttled) {
        return;
    }
    while (*pp != c) {
        pp = &(*pp)->throttle_next;
    }
    *pp = c->throttle_next;
    c->throttle_next = NULL;
    c->throttled = false;
}

void
rl_conn_close(struct rl_conn *c, int status)
{
    struct rl_listener *l = c->listener;

    if (!c->open) {
        return;
    }
    c->open = false;
    c->connected = false;
    c->reading = false;
    c->close_status = status;
    /* The throttled list outlives this loop turn, the handle does not. */
    conn_unthrottle(c);
    if (l != NULL) {
        if (c->prev != NULL) {
            c->prev->next = c->next;
        } else {
            l->conns = c->next;
        }
        if (c->next != NULL) {
            c->next->prev = c->prev;
        }
        c->prev = c->next = NULL;
        l->stats.connections--;
        conn_unclient(c);
        if (c->router || c->probation) {
            l->reserve_used--;
            l->stats.routers -= c->router;
            c->router = c->probation = false;
        }
    }
    if (c->ops->on_close != NULL) {
        c->ops->on_close(c, status);
    }
    /* A write in progress is cancelled (its callback runs first); the buffers it points
     * into are emptied only in conn_closed. */
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

void
rl_conn_mark(struct rl_conn *c)
{
    if (c->dirty || !c->open) {
        return;
    }
    if (c->q->dirty == NULL && !c->q->closing) {
        uv_idle_start(&c->q->idle, connq_idle);
    }
    c->dirty = true;
    c->dirty_next = c->q->dirty;
    c->q->dirty = c;
}

static void
conn_pause(struct rl_conn *c)
{
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

/* c handled its share of input for this loop turn: it waits for the next flush. */
static void
conn_throttle(struct rl_conn *c)
{
    conn_pause(c);
    if (c->throttled) {
        return;
    }
    if (c->listener != NULL) {
        c->listener->stats.throttled++;
    }
    c->throttled = true;
    c->throttle_next = c->q->throttled;
    c->q->throttled = c;
    if (!c->q->closing) {
        uv_idle_start(&c->q->idle, connq_idle); /* the next turn must not block in poll */
    }
}

void
rl_conn_finish(struct rl_conn *c)
{
    if (!c->open) {
        return;
    }
    c->finishing = true;
    conn_pause(c);
    rl_conn_mark(c);
}

void
rl_conn_refuse(struct rl_conn *c, uint32_t err, const char *msg)
{
    if (rl_wire_put_error(&c->out, 0, err, msg) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    rl_conn_finish(c);
}

void
rl_conn_hold(struct rl_conn *c)
{
    c->holds++;
}

void
rl_conn_release(struct rl_conn *c)
{
    if (c->holds > 0) {
        c->holds--;
    }
    /* The flush decides whether c resumes reading or, finishing, closes. */
    rl_conn_mark(c);
}

/* ---- protocol errors and refusals --------------------------------------------------------- */

/* What the first bytes of a stream that broke the protocol look like, for the warning. */
static const char *
conn_sniff(const char *p, size_t n)
{
    static const char *const http[] = {"GET ", "POST", "PUT ", "HEAD", "DELE", "OPTI",
                                       "PATC", "CONN", "TRAC", "PRI "};

    if (n >= 2 && (unsigned char)p[0] == 0x16 && (unsigned char)p[1] == 0x03) {
        return " (the bytes look like a TLS handshake: this port speaks the ratelimiter binary "
               "protocol, in clear)";
    }
    for (size_t i = 0; n >= 4 && i < sizeof(http) / sizeof(http[0]); i++) {
        if (memcmp(p, http[i], 4) == 0) {
            return " (the bytes look like an HTTP request: this port speaks the ratelimiter "
                   "binary protocol, docs/PROTOCOL.md)";
        }
    }
    return "";
}

/* What a warning is about: each is logged at warn once per address a minute. */
enum conn_warn { WARN_PROTOCOL = 1, WARN_BUFFERS, WARN_REFUSED, WARN_FRAME_TIMEOUT };

/* True when an event of `kind` from c's peer address should be logged at warn now: once per
 * address and kind per RL_CONN_WARN_INTERVAL_MS (as far as 64 slots remember). */
static bool
listener_should_warn(struct rl_listener *l, const struct rl_conn *c, enum conn_warn kind)
{
    const char *colon = strrchr(c->peer, ':');
    size_t len = colon != NULL ? (size_t)(colon - c->peer) : strlen(c->peer);
    uint64_t h = XXH3_64bits_withSeed(c->peer, len, kind);
    struct rl_listener_warned *w = &l->warned[h % RL_CONN_WARN_PEERS];
    uint64_t now = uv_now(c->q->loop);

    if (w->peer_hash == h && w->at_ms != 0 && now - w->at_ms < RL_CONN_WARN_INTERVAL_MS) {
        return false;
    }
    w->peer_hash = h;
    w->at_ms = now != 0 ? now : 1;
    return true;
}

void
rl_conn_protocol_error(struct rl_conn *c, uint32_t id, uint32_t err, const char *msg,
                       const char *p, size_t n)
{
    struct rl_listener *l = c->listener;

    if (!c->open) {
        return;
    }
    if (l == NULL) {
        rl_log_warn("%s: protocol error, closing the connection: %s", c->peer, msg);
        rl_conn_close(c, UV_EPROTO);
        return;
    }
    l->stats.protocol_closes++;
    if (listener_should_warn(l, c, WARN_PROTOCOL)) {
        rl_log_warn("client %s: protocol error, answered and closed: %s%s (further errors from "
                    "this address are logged at debug for a minute)",
                    c->peer, msg, conn_sniff(p, n));
    } else {
        rl_log_debug("client %s: protocol error, answered and closed: %s", c->peer, msg);
    }
    if (rl_wire_put_error(&c->out, id, err, msg) != 0) {
        rl_conn_close(c, UV_ENOMEM);
        return;
    }
    rl_conn_finish(c);
}

/* Answers c ERROR err and closes it, counting it in *counter (and, unless it is a frame
 * timeout, in connections_refused) and logging it at warn once per address and kind a
 * minute. */
static void
conn_refuse_counted(struct rl_conn *c, uint64_t *counter, enum conn_warn kind, uint32_t err,
                    const char *msg)
{
    struct rl_listener *l = c->listener;

    (*counter)++;
    if (kind != WARN_FRAME_TIMEOUT) {
        l->stats.connections_refused++;
    }
    if (listener_should_warn(l, c, kind)) {
        rl_log_warn("client %s: %s; answered ERROR and closed (further cases from this address "
                    "are logged at debug for a minute)",
                    c->peer, msg);
    } else {
        rl_log_debug("client %s: %s; answered ERROR and closed", c->peer, msg);
    }
    rl_conn_refuse(c, err, msg);
}

/* c, taken from the router reserve, did not say HELLO in time: it gets the refusal its
 * numbers earned. */
static void
conn_refuse_probation(struct rl_conn *c)
{
    conn_pause(c);
    conn_refuse_counted(c, c->refusal_counter, WARN_REFUSED, RL_WIRE_ERR_OVERLOADED, c->refusal);
}

/* ---- reading ---------------------------------------------------------------------------- */

/* True when growing c's buffers by n bytes would pass the clients' buffer memory. */
static bool
conn_over_budget(const struct rl_conn *c, size_t n)
{
    return c->listener != NULL && c->q->client_bytes + n > c->q->client_budget;
}

/*
 * Every read lands in the loop's slab (one largest read), so a connection holds no input
 * buffer of its own between requests: only what a read leaves unprocessed (an unfinished
 * frame, or frames left for the next turn) is copied into c->in, within the clients' buffer
 * memory (conn_read).
 */
static void
conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct rl_conn *c = h->data;

    (void)suggested;
    if (c->q->slab != NULL) {
        buf->base = c->q->slab;
        buf->len = RL_CONN_READ_CHUNK;
        return;
    }
    /* The flusher is closing: read into the connection's own buffer. */
    rl_buf_compact(&c->in);
    if (rl_buf_reserve(&c->in, RL_CONN_READ_CHUNK) != 0) {
        buf->base = NULL; /* libuv answers UV_ENOBUFS */
        buf->len = 0;
        return;
    }
    buf->base = c->in.data + c->in.len;
    buf->len = c->in.cap - c->in.len;
}

/*
 * Hands the whole frames of p[0..n) to the owner until c is backlogged, finishing, closed or
 * through its input share of the loop turn; returns the bytes taken. Stopping mid-batch
 * bounds what one read can queue (64 KiB of 7-byte STATS requests would otherwise be
 * answered with megabytes) and what one client streaming large frames costs the others.
 */
static size_t
conn_frames(struct rl_conn *c, const char *p, size_t n)
{
    bool batch = false;
    size_t used = 0;
    size_t plen;
    int rc;

    if (c->turn != c->q->turn) {
        c->turn = c->q->turn;
        c->turn_bytes = 0;
    }
    while (c->connected && !c->finishing && !rl_conn_backlogged(c)) {
        /* Outgoing connections (the router's to nodes) carry replies the process asked for;
         * a router's connection to a node carries many clients: both get more. */
        if (c->turn_bytes >= (c->listener == NULL || c->router ? 16u : 1u) * RL_CONN_TURN_BYTES) {
            conn_throttle(c);
            break;
        }
        rc = rl_wire_frame(p + used, n - used, &plen);
        if (rc == 0) {
            break;
        }
        if (rc < 0) {
            rl_conn_protocol_error(c, 0, RL_WIRE_ERR_MALFORMED, "frame length must be 1..65536",
                                   p + used, n - used);
            break;
        }
        if (!batch && c->ops->on_batch != NULL) {
            c->ops->on_batch(c);
            batch = true;
        }
        /* The payload stays valid even if on_frame closes c: buffers live until conn_closed,
         * and the slab until the loop's flusher closes. */
        used += RL_WIRE_HDR_LEN + plen;
        c->turn_bytes += RL_WIRE_HDR_LEN + plen;
        if (c->probation && !(plen >= 2 && (unsigned char)p[used - plen] == 0x93 &&
                              ((unsigned char)p[used - plen + 1] == RL_WIRE_OP_HELLO ||
                               (unsigned char)p[used - plen + 1] == RL_WIRE_OP_AUTH))) {
            /* Taken from the router reserve, it had to open with HELLO ([5, id, role]), or
             * with the AUTH ([6, id, token]) a node with a cluster secret needs first. */
            conn_refuse_probation(c);
            break;
        }
        c->ops->on_frame(c, p + used - plen, plen);
    }
    if (batch && c->ops->on_batch_end != NULL) {
        c->ops->on_batch_end(c);
    }
    if (used > 0) {
        c->partial_ms = 0; /* a frame completed: what is left is a new one */
    }
    return used;
}

/* After c->in was consumed up to its pos: compact it, free it when empty, and keep the time
 * the unfinished frame in it began. */
static void
conn_input_done(struct rl_conn *c)
{
    if (!c->open) {
        return;
    }
    rl_buf_compact(&c->in);
    if (rl_buf_unread(&c->in) == 0) {
        buf_trim(&c->in);
        c->partial_ms = 0;
    } else if (c->partial_ms == 0) {
        c->partial_ms = uv_now(c->q->loop);
    }
    conn_account(c);
}

/* Processes the frames waiting in c->in. */
static void
conn_process(struct rl_conn *c)
{
    c->in.pos += conn_frames(c, c->in.data + c->in.pos, rl_buf_unread(&c->in));
    conn_input_done(c);
}

/* c needs buffer memory the clients' budget (buffer_memory) no longer has. */
static void
conn_refuse_buffers(struct rl_conn *c)
{
    conn_pause(c);
    conn_refuse_counted(c, &c->listener->stats.refused_buffers, WARN_BUFFERS,
                        RL_WIRE_ERR_OVERLOADED,
                        "server busy: the memory for client buffers (buffer_memory) is spent");
}

/* Appends p[0..n) to c->in, or refuses c when that would pass the clients' buffer memory. */
static bool
conn_keep_input(struct rl_conn *c, const char *p, size_t n)
{
    if (conn_over_budget(c, n) || rl_buf_append(&c->in, p, n) != 0) {
        if (c->listener == NULL) {
            rl_conn_close(c, UV_ENOMEM);
            return false;
        }
        conn_refuse_buffers(c);
        return false;
    }
    return true;
}

static void
conn_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct rl_conn *c = stream->data;
    bool was_dirty = c->dirty;

    if (nread == UV_EOF && c->listener != NULL) {
        /* A half-closed client still gets the replies to what it sent (libuv stopped
         * reading); the flush closes once they are out. */
        c->eof = true;
        c->reading = false;
        rl_conn_mark(c);
        return;
    }
    if (nread == UV_ENOBUFS && c->listener != NULL) {
        conn_refuse_buffers(c);
        return;
    }
    if (nread < 0) {
        rl_conn_close(c, (int)nread);
        return;
    }
    if (nread == 0) {
        return;
    }
    c->active_ms = uv_now(c->q->loop);
    if (buf->base == c->q->slab && rl_buf_unread(&c->in) == 0) {
        /* Nothing waiting: the frames are handled where they landed. */
        size_t used = conn_frames(c, buf->base, (size_t)nread);
        size_t left = (size_t)nread - used;

        if (c->open && left > 0 && !conn_keep_input(c, buf->base + used, left)) {
            return;
        }
        conn_input_done(c);
    } else {
        if (buf->base == c->q->slab && !conn_keep_input(c, buf->base, (size_t)nread)) {
            return;
        }
        if (buf->base != c->q->slab) {
            c->in.len += (size_t)nread;
        }
        conn_process(c);
    }
    if (c->open && (c->finishing || rl_conn_backlogged(c))) {
        /* The peer asks faster than it reads: stop reading until the output drains. */
        conn_pause(c);
    }
    if (c->dirty && !was_dirty) {
        /* The replies of this read leave now, in one write, rather than after every other
         * connection's batch of the loop turn: a pipelining client gets them a batch
         * earlier (c stays on the dirty list; its flush there finds nothing new). Output
         * that was already waiting (the router's requests to a node, gathered from several
         * clients' reads) keeps waiting for the loop turn's flush, which batches it. */
        conn_flush(c);
    }
}

static int
conn_start_reading(struct rl_conn *c)
{
    int rc = uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_read);

    c->reading = rc == 0;
    return rc;
}

/* ---- writing ---------------------------------------------------------------------------- */

static void
conn_written(uv_write_t *w, int status)
{
    struct rl_conn *c = w->data;

    c->writing = false;
    rl_buf_reset(&c->inflight);
    if (!c->open) {
        return;
    }
    if (status < 0) {
        rl_conn_close(c, status);
        return;
    }
    c->active_ms = uv_now(c->q->loop);
    buf_trim(&c->inflight);
    /* Straight on, not through the dirty list: what piled up meanwhile goes now, and a
     * paused connection resumes without costing the loop another turn. */
    conn_flush(c);
    conn_account(c);
}

/* True when a paused c may take work again: its output and held requests are back to half
 * their bound, and it is not waiting for the next turn. */
static bool
conn_may_resume(const struct rl_conn *c)
{
    size_t queued = rl_conn_queued(c);

    return !c->reading && !c->eof && !c->finishing && !c->throttled &&
           queued <= c->out_max / 2 && c->holds <= c->hold_max / 2 &&
           !(rl_conn_budget_spent(c) && queued > RL_CONN_KEEP_BYTES / 2);
}

static void
conn_flush(struct rl_conn *c)
{
    struct rl_buf tmp;
    uv_buf_t b;

    if (!c->connected) {
        return;
    }
    if (conn_may_resume(c)) {
        /* Resume: first the frames read before the pause, then the socket. */
        conn_process(c);
        if (!c->connected) {
            return;
        }
        if (!c->finishing && !c->throttled && !rl_conn_backlogged(c) &&
            conn_start_reading(c) != 0) {
            rl_conn_close(c, UV_EIO);
            return;
        }
    }
    if (c->writing) {
        return;
    }
    if (rl_buf_unread(&c->out) == 0) {
        if ((c->finishing || c->eof) && c->holds == 0) {
            rl_conn_close(c, 0);
        }
        return;
    }
    /* Swap buffers so output produced while this write is in flight goes to a fresh one. */
    tmp = c->inflight;
    c->inflight = c->out;
    c->out = tmp;
    b = uv_buf_init(c->inflight.data + c->inflight.pos, (unsigned)rl_buf_unread(&c->inflight));
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, conn_written) != 0) {
        rl_conn_close(c, UV_EIO);
        return;
    }
    c->writing = true;
    conn_account(c);
}

/* ---- outgoing ---------------------------------------------------------------------------- */

static void
conn_connected(uv_connect_t *req, int status)
{
    struct rl_conn *c = req->data;

    if (!c->open) {
        return;
    }
    if (status == 0) {
        uv_tcp_nodelay(&c->tcp, 1);
        status = conn_start_reading(c);
    }
    if (status != 0) {
        if (c->ops->on_connect != NULL) {
            c->ops->on_connect(c, status);
        }
        rl_conn_close(c, status);
        return;
    }
    c->connected = true;
    conn_peer_name(c, NULL);
    if (c->ops->on_connect != NULL) {
        c->ops->on_connect(c, 0);
    }
    rl_conn_mark(c);
}

int
rl_conn_connect(struct rl_conn *c, const struct sockaddr *sa)
{
    int rc;

    if (c->open) {
        return UV_EALREADY;
    }
    uv_tcp_init(c->q->loop, &c->tcp);
    c->tcp.data = c;
    c->open = true;
    c->creq.data = c;
    rc = uv_tcp_connect(&c->creq, &c->tcp, sa, conn_connected);
    if (rc != 0) {
        rl_conn_close(c, rc);
    }
    return rc;
}

/* ---- listeners -------------------------------------------------------------------------- */

/* How long a connection taken from the router reserve has to say HELLO. */
#define RL_CONN_PROBATION_MS 2000u

uint64_t
rl_conn_raise_fd_limit(void)
{
    struct rlimit r;

    if (getrlimit(RLIMIT_NOFILE, &r) != 0) {
        return 1024;
    }
    if (r.rlim_cur < r.rlim_max) {
        rlim_t want = r.rlim_max == RLIM_INFINITY ? (rlim_t)1 << 20 : r.rlim_max;
        struct rlimit n = {want, r.rlim_max};

        if (setrlimit(RLIMIT_NOFILE, &n) == 0) {
            r.rlim_cur = want;
        }
    }
    return r.rlim_cur == RLIM_INFINITY ? (uint64_t)1 << 20 : (uint64_t)r.rlim_cur;
}

static void
listener_handle_closed(uv_handle_t *h)
{
    listener_unref(h->data);
}

/* Descriptors this listener may hold open at once, refusals in progress included. */
static uint64_t
listener_fd_ceiling(const struct rl_listener *l)
{
    return l->fd_limit > RL_CONN_FD_SLACK / 2 ? l->fd_limit - RL_CONN_FD_SLACK / 2 : 1;
}

static void
listener_accept(uv_stream_t *server, int status)
{
    struct rl_listener *l = server->data;
    struct rl_conn_peer *peer = NULL;
    const char *why = NULL;
    uint64_t *counter = NULL;
    uint8_t addr[16];
    uint64_t now = uv_now(l->q->loop);
    struct rl_conn *c;

    if (status < 0) {
        /* libuv met EMFILE or ENFILE (descriptors taken by something else than clients) and
         * closed what was waiting: count it, and say so. */
        l->stats.accept_errors++;
        if (now - l->accept_warned_ms >= 10000 || l->accept_warned_ms == 0) {
            l->accept_warned_ms = now != 0 ? now : 1;
            rl_log_warn("accept: %s; connections waiting to be accepted were closed (%" PRIu64
                        " accept errors so far; descriptor limit %" PRIu64 ")",
                        uv_strerror(status), l->stats.accept_errors, l->fd_limit);
        }
        return;
    }
    if (l->closing) {
        return;
    }
    if (l->stats.connections >= listener_fd_ceiling(l)) {
        /* At the descriptor limit: leave the connection in the kernel's queue (libuv stops
         * watching the listener until uv_accept) rather than let accept(2) fail and libuv
         * close the queue silently; the next close takes it. */
        l->accept_paused = true;
        return;
    }
    c = calloc(1, l->conn_size);
    if (c == NULL) {
        rl_log_warn("accept: out of memory");
        return;
    }
    conn_setup(c, l->q, l->ops, l->data);
    c->listener = l;
    uv_tcp_init(l->q->loop, &c->tcp);
    c->tcp.data = c;
    c->open = true;
    l->handles++;
    c->next = l->conns;
    if (l->conns != NULL) {
        l->conns->prev = c;
    }
    l->conns = c;
    l->stats.connections++;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        rl_conn_close(c, UV_ECONNABORTED);
        return;
    }
    l->stats.connections_total++;
    c->connected = true;
    c->accepted_ms = c->active_ms = now;
    uv_tcp_nodelay(&c->tcp, 1);
    conn_peer_name(c, addr);
    if (l->clients >= l->max_clients) {
        why = "server busy: too many connections (max_connections)";
        counter = &l->stats.refused_max;
    } else if ((peer = peer_get(l, addr)) != NULL && peer->count >= l->lim.max_per_peer) {
        why = "server busy: too many connections from this address (max_connections_per_peer)";
        counter = &l->stats.refused_peer;
    }
    if (why != NULL) {
        if (peer != NULL) {
            peer_drop(l, peer);
        }
        if (l->reserve_used < l->lim.router_reserve) {
            /* A router's connection must not be refused for clients' numbers: it may say
             * HELLO from the reserve first; anything else gets the refusal. */
            c->probation = true;
            c->refusal = why;
            c->refusal_counter = counter;
            l->reserve_used++;
        } else {
            conn_refuse_counted(c, counter, WARN_REFUSED, RL_WIRE_ERR_OVERLOADED, why);
            return;
        }
    } else if (peer != NULL) {
        peer->count++;
        c->peer_entry = peer;
        l->clients++;
    }
    if (conn_start_reading(c) != 0) {
        rl_conn_close(c, UV_EIO);
    }
}

bool
rl_conn_set_router(struct rl_conn *c)
{
    struct rl_listener *l = c->listener;

    if (l == NULL || c->router) {
        return true;
    }
    if (c->probation) {
        c->probation = false;
    } else {
        if (l->reserve_used >= l->lim.router_reserve) {
            return l->lim.router_reserve == 0; /* no reserve: it stays a client */
        }
        conn_unclient(c);
        l->reserve_used++;
    }
    c->router = true;
    l->stats.routers++;
    return true;
}

/* Refuses what waited too long in the router reserve, closes idle connections, and times out
 * unfinished frames. */
static void
listener_tick(uv_timer_t *t)
{
    struct rl_listener *l = t->data;
    uint64_t now = uv_now(l->q->loop);
    struct rl_conn *next;
    char msg[128];

    for (struct rl_conn *c = l->conns; c != NULL; c = next) {
        next = c->next;
        if (!c->connected || c->finishing) {
            continue;
        }
        if (c->probation && now - c->accepted_ms >= RL_CONN_PROBATION_MS) {
            conn_refuse_probation(c);
        } else if (c->partial_ms != 0 && c->reading && l->lim.frame_timeout_ms != 0 &&
                   now - c->partial_ms >= l->lim.frame_timeout_ms) {
            snprintf(msg, sizeof(msg), "frame not completed within %" PRIu64 " ms (frame_timeout)",
                     l->lim.frame_timeout_ms);
            conn_pause(c);
            conn_refuse_counted(c, &l->stats.frame_timeouts, WARN_FRAME_TIMEOUT,
                                RL_WIRE_ERR_MALFORMED, msg);
        } else if (l->lim.idle_timeout_ms != 0 && c->holds == 0 && !c->router &&
                   now - c->active_ms >= l->lim.idle_timeout_ms) {
            l->stats.idle_closes++;
            rl_log_debug("client %s: idle for %" PRIu64 " ms (idle_timeout), closed", c->peer,
                         now - c->active_ms);
            rl_conn_close(c, 0);
        }
    }
}

int
rl_listener_start(struct rl_listener *l, struct rl_connq *q, const char *host, uint16_t port,
                  const struct rl_conn_ops *ops, size_t conn_size,
                  const struct rl_conn_limits *lim, void *data)
{
    struct sockaddr_storage addr;
    uint64_t room;
    int rc;

    memset(l, 0, sizeof(*l));
    l->q = q;
    l->ops = ops;
    l->conn_size = conn_size < sizeof(struct rl_conn) ? sizeof(struct rl_conn) : conn_size;
    l->data = data;
    l->lim = lim != NULL ? *lim : rl_conn_limits_default();
    if (l->lim.max_connections == 0) {
        l->lim.max_connections = RL_CONN_DEFAULT_MAX_CONNECTIONS;
    }
    if (l->lim.max_per_peer == 0) {
        l->lim.max_per_peer = l->lim.max_connections;
    }
    if (l->lim.buffer_memory != 0) {
        q->client_budget = l->lim.buffer_memory; /* one listener per loop in every program */
    }
    /* Every client, router and refusal in progress needs a descriptor: fit them under the
     * limit, so a refusal is an ERROR the client reads, never a silent close. */
    l->fd_limit = rl_conn_raise_fd_limit();
    room = l->fd_limit > RL_CONN_FD_SLACK + l->lim.router_reserve
               ? l->fd_limit - RL_CONN_FD_SLACK - l->lim.router_reserve
               : 1;
    l->max_clients = l->lim.max_connections <= room ? l->lim.max_connections : (uint32_t)room;
    if (l->max_clients < l->lim.max_connections) {
        rl_log_warn("the descriptor limit (%" PRIu64 ", ulimit -n) is below max_connections "
                    "(%" PRIu32 ") + router_reserve (%" PRIu32 ") + %u for the rest: taking at "
                    "most %" PRIu32 " clients, refusing more with ERROR OVERLOADED; raise the "
                    "hard limit (LimitNOFILE=, ulimit -Hn) or lower max_connections",
                    l->fd_limit, l->lim.max_connections, l->lim.router_reserve, RL_CONN_FD_SLACK,
                    l->max_clients);
    }
    uv_tcp_init(q->loop, &l->tcp);
    l->tcp.data = l;
    uv_timer_init(q->loop, &l->tick);
    l->tick.data = l;
    l->handles = 2;
    rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
    if (rc != 0) {
        rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr);
    }
    if (rc == 0) {
        rc = uv_tcp_bind(&l->tcp, (const struct sockaddr *)&addr, 0);
    }
    if (rc == 0) {
        rc = uv_listen((uv_stream_t *)&l->tcp, 1024, listener_accept);
    }
    if (rc == 0) {
        uv_timer_start(&l->tick, listener_tick, RL_CONN_TICK_MS, RL_CONN_TICK_MS);
    }
    return rc;
}

void
rl_listener_stats(const struct rl_listener *l, struct rl_listener_stats *s)
{
    *s = l->stats;
    s->buffer_bytes = l->q->client_bytes;
}

void
rl_listener_close(struct rl_listener *l, void (*on_closed)(struct rl_listener *l))
{
    if (l->closing) {
        return;
    }
    l->closing = true;
    l->on_closed = on_closed;
    uv_close((uv_handle_t *)&l->tcp, listener_handle_closed);
    uv_close((uv_handle_t *)&l->tick, listener_handle_closed);
    while (l->conns != NULL) {
        rl_conn_close(l->conns, 0);
    }
}
