/*
 * rl-bench: a load generator for the wire protocol. Each worker thread runs a libuv loop
 * over its share of the connections, keeps up to --pipeline CHECKs in flight on each, and
 * records every reply's latency in a log-linear histogram (no per-sample storage). Closed
 * loop by default (refill as replies come back); with --rate it is open loop and measures
 * latency from each request's intended send time, so a stalled server cannot hide its
 * stall (coordinated omission). It is built to outrun the server: requests are encoded by
 * hand straight into one output buffer per connection, written with one write per
 * connection per loop turn, and CHECK replies are decoded in place. Not a correctness
 * test: it counts reply codes but does not judge them.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <uv.h>

#include "auth.h"
#include "buf.h"
#include "reqclient.h"
#include "parse.h"
#include "hist.h"
#include "mp.h"
#include "rng.h"
#include "wire.h"
#include "zipf.h"

/* Reply tallies: the six CHECK codes, then ERROR replies and requests never answered. */
#define BENCH_ERRORS RL_WIRE_CODE_COUNT
#define BENCH_LOST (RL_WIRE_CODE_COUNT + 1)
#define BENCH_NCOUNTS (RL_WIRE_CODE_COUNT + 2)

/* Per-connection input: room for several largest frames, so a partial frame left at the
 * end of a read always fits after compaction. */
#define BENCH_IN_CAP (256u * 1024)

/* Longest encoded CHECK: prefix, fixarray, op, id, user ("u" + 10 digits), suffix. */
#define BENCH_USER_MAX 16
#define BENCH_HDR_MAX (RL_WIRE_HDR_LEN + 2 + 5)

/* How long in-flight requests may take to come back once the run stops. */
#define BENCH_DRAIN_NS (2000000000ull)
#define BENCH_CONNECT_NS (5000000000ull)

enum dist { DIST_UNIFORM, DIST_ZIPF };

struct opts {
    char *target;
    const char *token_file; /* --token-file, else $RL_TOKEN_FILE; NULL: no AUTH */
    char token[RL_AUTH_TOKEN_MAX];
    size_t token_len;       /* 0: no AUTH */
    unsigned connections;
    unsigned pipeline;
    uint32_t keys;
    enum dist dist;
    double zipf_s;
    const char *service;
    const char *endpoint; /* NULL: nil */
    uint32_t cost;
    double duration;   /* seconds */
    uint64_t requests; /* 0: run for duration */
    double rate;       /* requests/s over all connections; 0: closed loop */
    bool sequential;
    double report_every; /* seconds; 0: off */
    bool json;
    unsigned threads;
    uint64_t seed; /* 0: from the clock */
};

struct worker;

struct conn {
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_write_t write_req;
    struct worker *w;
    unsigned index;
    bool connected;
    bool dead;
    bool writing;
    uint32_t inflight;
    char *in;
    size_t in_len;
    struct rl_buf out;  /* requests being encoded */
    struct rl_buf wbuf; /* a write that did not finish at once, in flight */
    /*
     * In-flight slots: a request's id is (generation << 16) | slot, so a reply finds its
     * send time in O(1) whatever order replies come in, and a stray id is recognised.
     */
    uint64_t *slot_t;
    uint16_t *slot_gen;
    uint8_t *slot_busy;
    uint16_t *free_slots;
    uint32_t nfree;
};

struct bench;

struct worker {
    struct bench *b;
    unsigned index;
    uv_thread_t thread;
    uv_loop_t loop;
    uv_check_t check;
    uv_timer_t tick;
    uv_timer_t end_timer;
    uv_poll_t tfd_poll;
    int tfd; /* timerfd for the open-loop schedule; -1 when closed loop */
    struct conn *conns;
    unsigned nconns;
    unsigned nconnected;
    unsigned nalive;
    unsigned rr; /* connection the next top-up starts with */
    bool running;
    bool stopping;
    bool finished;
    bool failed;
    uint64_t t0;        /* start of the run, ns (uv_hrtime) */
    uint64_t t_end;     /* last reply, or when draining gave up */
    uint64_t t_created; /* when connecting started */
    uint64_t drain_until;
    uint64_t sent;
    uint64_t budget; /* requests this worker may send; UINT64_MAX when unbounded */
    double interval_ns;
    uint64_t rng;
    uint64_t seq_next;
    struct rl_zipf zipf;
    uint64_t counts[BENCH_NCOUNTS];
    _Atomic uint64_t published[BENCH_NCOUNTS];
    struct rl_hist hist;
    struct rl_wire_decoder dec;
    struct rl_wire_reply *rep; /* slow-path decoding: the struct is large */
    char err[160];
};

struct bench {
    struct opts o;
    struct sockaddr_storage addr;
    struct worker *workers;
    uv_loop_t loop;
    uv_signal_t sigint;
    uv_signal_t sigterm;
    uv_timer_t report;
    uv_async_t done_async;
    atomic_int stop; /* 1: stop sending and drain; 2: stop now */
    atomic_uint ndone;
    uint64_t t_start;
    uint64_t last_report_t;
    uint64_t last_counts[BENCH_NCOUNTS];
    /* The encoded bytes that are the same in every request. */
    char prefix[RL_WIRE_SERVICE_MAX + 8];
    size_t prefix_len;
    char suffix[RL_WIRE_ENDPOINT_MAX + 16];
    size_t suffix_len;
};

static const char *const count_names[BENCH_NCOUNTS] = {
#define BENCH_NAME(n, v, s) s,
    RL_WIRE_CODE_MAP(BENCH_NAME)
#undef BENCH_NAME
        "errors",
    "lost",
};

/* Keys. */

static inline uint32_t
next_key(struct worker *w)
{
    const struct opts *o = &w->b->o;
    uint64_t k;

    if (o->sequential) {
        k = w->seq_next;
        w->seq_next += o->threads;
        if (w->seq_next >= o->keys) {
            w->seq_next = w->index % o->keys;
        }
        return (uint32_t)k;
    }
    if (o->dist == DIST_ZIPF) {
        return rl_zipf_sample(&w->zipf, &w->rng);
    }
    /* Lemire's multiply-shift: uniform enough for 32-bit ranges, and no division. */
    return (uint32_t)(((rl_rng_next(&w->rng) >> 32) * o->keys) >> 32);
}

/* Decimal digits of v into buf (at least 10 bytes), returning their count. */
static inline size_t
utoa32(char *buf, uint32_t v)
{
    char tmp[10];
    size_t n = 0, i;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (i = 0; i < n; i++) {
        buf[i] = tmp[n - 1 - i];
    }
    return n;
}

/* Connections. */

static void conn_kill(struct conn *c, const char *why, int status);
static void worker_finish(struct worker *w);
static void conn_flush(struct conn *c);

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
        conn_kill(c, "write", status);
        return;
    }
    conn_flush(c);
}

/* One write per connection per loop turn: try it at once, and if the socket takes only
 * part, hand the rest to libuv and keep encoding into the other buffer meanwhile. */
static void
conn_flush(struct conn *c)
{
    struct rl_buf tmp;
    uv_buf_t buf;
    int rc;

    if (c->writing || c->dead || rl_buf_unread(&c->out) == 0) {
        return;
    }
    buf = uv_buf_init(c->out.data + c->out.pos, (unsigned)rl_buf_unread(&c->out));
    rc = uv_try_write((uv_stream_t *)&c->tcp, &buf, 1);
    if (rc == (int)buf.len) {
        rl_buf_reset(&c->out);
        return;
    }
    if (rc < 0 && rc != UV_EAGAIN) {
        conn_kill(c, "write", rc);
        return;
    }
    if (rc > 0) {
        c->out.pos += (size_t)rc;
    }
    tmp = c->wbuf;
    c->wbuf = c->out;
    c->out = tmp;
    buf = uv_buf_init(c->wbuf.data + c->wbuf.pos, (unsigned)rl_buf_unread(&c->wbuf));
    c->write_req.data = c;
    rc = uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &buf, 1, on_write);
    if (rc < 0) {
        rl_buf_reset(&c->wbuf);
        conn_kill(c, "write", rc);
        return;
    }
    c->writing = true;
}

/* Encodes one CHECK for a fresh key into c->out; its latency will count from t. */
static int
conn_send_one(struct conn *c, uint64_t t)
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
    *p++ = (char)RL_WIRE_OP_CHECK;
    p = rl_mp_put_uint(p, id);
    memcpy(p, b->prefix, b->prefix_len);
    p += b->prefix_len;
    {
        /* "u" and the key's digits: a fixstr, since it is at most 11 bytes. */
        char *hdr = p;

        p[1] = 'u';
        n = 1 + utoa32(p + 2, next_key(c->w));
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

static void
worker_count(struct worker *w, unsigned what, uint64_t n)
{
    w->counts[what] += n;
}

/* Files one reply. Returns 0, or -1 when the stream can no longer be trusted. */
static int
conn_reply(struct conn *c, const char *payload, size_t len, uint64_t now)
{
    struct worker *w = c->w;
    uint64_t id, code;
    uint32_t slot;

    if (rl_mp_read_check(payload, len, &id, &code) != 0) {
        if (rl_wire_decode_reply(&w->dec, payload, len, w->rep) != 0) {
            return -1;
        }
        id = w->rep->id;
        if (w->rep->op == RL_WIRE_OP_AUTH && id == 0) {
            return 0; /* the answer to this connection's AUTH */
        }
        code = w->rep->op == RL_WIRE_OP_CHECK ? w->rep->check.code : BENCH_ERRORS;
    }
    slot = (uint32_t)(id & 0xffff);
    if (slot >= w->b->o.pipeline || !c->slot_busy[slot] ||
        c->slot_gen[slot] != (uint16_t)(id >> 16)) {
        /* ERROR id 0: the server could not read a request and will close. */
        worker_count(w, BENCH_ERRORS, 1);
        return id == 0 ? 0 : -1;
    }
    rl_hist_record(&w->hist, now > c->slot_t[slot] ? now - c->slot_t[slot] : 0);
    conn_release(c, slot);
    worker_count(w, (unsigned)code, 1);
    return 0;
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = h->data;

    *buf = uv_buf_init(c->in + c->in_len, (unsigned)(BENCH_IN_CAP - c->in_len));
}

static void
on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = s->data;
    struct worker *w = c->w;
    size_t off = 0, len;
    uint64_t now;
    int rc;

    if (nread < 0) {
        conn_kill(c, "read", (int)nread);
        return;
    }
    if (nread == 0) {
        return;
    }
    c->in_len += (size_t)nread;
    now = uv_hrtime();
    for (;;) {
        rc = rl_wire_frame(c->in + off, c->in_len - off, &len);
        if (rc == 0) {
            break;
        }
        if (rc < 0 || conn_reply(c, c->in + off + RL_WIRE_HDR_LEN, len, now) != 0) {
            conn_kill(c, "protocol", UV_EPROTO);
            return;
        }
        off += RL_WIRE_HDR_LEN + len;
    }
    if (off > 0) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
    w->t_end = now;
}

static void
on_close_conn(uv_handle_t *h)
{
    (void)h;
}

static void
conn_kill(struct conn *c, const char *why, int status)
{
    struct worker *w = c->w;

    if (c->dead) {
        return;
    }
    c->dead = true;
    if (c->inflight > 0) {
        worker_count(w, BENCH_LOST, c->inflight);
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
    if (c->connected) {
        w->nalive--;
    }
    if (w->nalive == 0 && w->running) {
        worker_finish(w);
    }
}

/* Workers. */

static void
worker_publish(struct worker *w)
{
    unsigned i;

    for (i = 0; i < BENCH_NCOUNTS; i++) {
        atomic_store_explicit(&w->published[i], w->counts[i], memory_order_relaxed);
    }
}

static uint64_t
worker_inflight(const struct worker *w)
{
    uint64_t n = 0;
    unsigned i;

    for (i = 0; i < w->nconns; i++) {
        n += w->conns[i].inflight;
    }
    return n;
}

/* Arms the timerfd for the next request the open-loop schedule owes. */
static void
worker_arm(struct worker *w, uint64_t now)
{
    struct itimerspec its;
    uint64_t due;

    if (w->tfd < 0 || w->stopping || w->sent >= w->budget) {
        return;
    }
    due = w->t0 + (uint64_t)((double)w->sent * w->interval_ns);
    /* Already due means every pipeline is full: a reply, not the timer, will make room
     * (arming a past time would spin the loop). */
    if (due <= now) {
        return;
    }
    memset(&its, 0, sizeof(its));
    its.it_value.tv_sec = (time_t)(due / 1000000000u);
    its.it_value.tv_nsec = (long)(due % 1000000000u);
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) {
        its.it_value.tv_nsec = 1;
    }
    timerfd_settime(w->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void
worker_top_up(struct worker *w, uint64_t now)
{
    const struct opts *o = &w->b->o;
    uint64_t allowed = w->budget - w->sent, due;
    unsigned i, k;
    struct conn *c;

    if (w->tfd >= 0) {
        due = now < w->t0 ? 0 : (uint64_t)((double)(now - w->t0) / w->interval_ns) + 1;
        if (due > w->budget) {
            due = w->budget;
        }
        allowed = due > w->sent ? due - w->sent : 0;
    }
    for (k = 0; k < w->nconns && allowed > 0; k++) {
        i = (w->rr + k) % w->nconns;
        c = &w->conns[i];
        if (c->dead) {
            continue;
        }
        while (c->inflight < o->pipeline && allowed > 0) {
            /* Open loop: the latency clock starts when the schedule said to send. */
            uint64_t t = w->tfd >= 0 ? w->t0 + (uint64_t)((double)w->sent * w->interval_ns) : now;

            if (conn_send_one(c, t) != 0) {
                conn_kill(c, "encode", UV_ENOMEM);
                break;
            }
            allowed--;
        }
        conn_flush(c);
    }
    w->rr = (w->rr + 1) % w->nconns;
}

static void
worker_stop(struct worker *w, uint64_t now)
{
    if (w->stopping) {
        return;
    }
    w->stopping = true;
    w->drain_until = now + BENCH_DRAIN_NS;
    if (w->tfd >= 0) {
        uv_poll_stop(&w->tfd_poll);
    }
}

static void
on_close_nop(uv_handle_t *h)
{
    (void)h;
}

static void
worker_finish(struct worker *w)
{
    unsigned i;

    if (w->finished) {
        return;
    }
    w->finished = true;
    if (w->t_end < w->t0) {
        w->t_end = w->t0;
    }
    for (i = 0; i < w->nconns; i++) {
        conn_kill(&w->conns[i], "close", 0);
    }
    worker_publish(w);
    uv_close((uv_handle_t *)&w->check, on_close_nop);
    uv_close((uv_handle_t *)&w->tick, on_close_nop);
    uv_close((uv_handle_t *)&w->end_timer, on_close_nop);
    if (w->tfd >= 0) {
        uv_close((uv_handle_t *)&w->tfd_poll, on_close_nop);
    }
}

static void
on_check(uv_check_t *h)
{
    struct worker *w = h->data;
    uint64_t now;

    if (!w->running || w->finished) {
        return;
    }
    now = uv_hrtime();
    if (!w->stopping && w->sent >= w->budget) {
        worker_stop(w, now);
    }
    if (!w->stopping) {
        worker_top_up(w, now);
        worker_arm(w, now);
    } else if (worker_inflight(w) == 0) {
        worker_finish(w);
        return;
    }
    worker_publish(w);
}

static void
on_end_timer(uv_timer_t *t)
{
    struct worker *w = t->data;

    worker_stop(w, uv_hrtime());
}

static void
worker_start(struct worker *w)
{
    const struct opts *o = &w->b->o;

    w->running = true;
    w->t0 = uv_hrtime();
    w->t_end = w->t0;
    if (o->requests == 0) {
        uint64_t ms = (uint64_t)ceil(o->duration * 1000.0);

        uv_timer_start(&w->end_timer, on_end_timer, ms, 0);
    }
    if (w->tfd >= 0) {
        worker_arm(w, w->t0 > 0 ? w->t0 - 1 : 0);
    }
}

static void
on_tick(uv_timer_t *t)
{
    struct worker *w = t->data;
    uint64_t now = uv_hrtime();
    int stop = atomic_load(&w->b->stop);

    if (w->finished) {
        return;
    }
    if (!w->running) {
        if (stop != 0 || now - w->t_created > BENCH_CONNECT_NS) {
            if (stop == 0) {
                snprintf(w->err, sizeof(w->err), "connecting timed out");
                fprintf(stderr, "rl-bench: %s\n", w->err);
                w->failed = true;
            }
            worker_finish(w);
        }
        return;
    }
    if (stop != 0) {
        worker_stop(w, now);
    }
    if (w->stopping && (stop == 2 || now >= w->drain_until)) {
        /* Whatever is still out will not be waited for: it counts as lost, and the run's
         * length stays what it was at the last reply. */
        worker_finish(w);
    }
}

static void
on_tfd(uv_poll_t *p, int status, int events)
{
    struct worker *w = p->data;
    uint64_t expirations;

    /* Only to wake the loop: the check handle sends what the schedule owes. */
    if (read(w->tfd, &expirations, sizeof(expirations)) < 0) {
        return;
    }
}

static void
on_connect(uv_connect_t *req, int status)
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
        if (!w->finished) {
            worker_finish(w);
        }
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
        conn_kill(c, "auth", UV_ENOMEM);
        return;
    }
    status = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (status < 0) {
        conn_kill(c, "read", status);
        return;
    }
    w->nalive++;
    if (++w->nconnected == w->nconns) {
        worker_start(w);
    }
}

static int
conn_init(struct worker *w, struct conn *c, unsigned index)
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

static void
conn_deinit(struct conn *c)
{
    free(c->in);
    free(c->slot_t);
    free(c->slot_gen);
    free(c->slot_busy);
    free(c->free_slots);
    rl_buf_deinit(&c->out);
    rl_buf_deinit(&c->wbuf);
}

static void
worker_main(void *arg)
{
    struct worker *w = arg;
    struct bench *b = w->b;
    unsigned i;
    int rc;

    /* The open-loop schedule wants microsecond wake-ups, not the default 50 us slack. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    uv_loop_init(&w->loop);
    uv_check_init(&w->loop, &w->check);
    w->check.data = w;
    uv_check_start(&w->check, on_check);
    uv_timer_init(&w->loop, &w->tick);
    w->tick.data = w;
    uv_timer_start(&w->tick, on_tick, 5, 5);
    uv_timer_init(&w->loop, &w->end_timer);
    w->end_timer.data = w;
    if (w->tfd >= 0) {
        uv_poll_init(&w->loop, &w->tfd_poll, w->tfd);
        w->tfd_poll.data = w;
        uv_poll_start(&w->tfd_poll, UV_READABLE, on_tfd);
    }
    w->t_created = uv_hrtime();
    for (i = 0; i < w->nconns; i++) {
        uv_tcp_init(&w->loop, &w->conns[i].tcp);
        w->conns[i].tcp.data = &w->conns[i];
    }
    for (i = 0; i < w->nconns; i++) {
        struct conn *c = &w->conns[i];

        c->connect_req.data = c;
        rc =
            uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&b->addr, on_connect);
        if (rc < 0) {
            snprintf(w->err, sizeof(w->err), "cannot connect to %s: %s", b->o.target,
                     uv_strerror(rc));
            fprintf(stderr, "rl-bench: %s\n", w->err);
            w->failed = true;
            c->dead = true;
            worker_finish(w);
            break;
        }
    }
    uv_run(&w->loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(&w->loop);
    if (rc != 0) {
        fprintf(stderr, "rl-bench: worker %u: loop not closed: %s\n", w->index, uv_strerror(rc));
    }
    atomic_fetch_add(&b->ndone, 1);
    uv_async_send(&b->done_async);
}

/* The control loop: signals, interval reports, and waiting for the workers. */

static void
sum_counts(struct bench *b, uint64_t *out)
{
    unsigned i, k;

    memset(out, 0, sizeof(uint64_t) * BENCH_NCOUNTS);
    for (i = 0; i < b->o.threads; i++) {
        for (k = 0; k < BENCH_NCOUNTS; k++) {
            out[k] += atomic_load_explicit(&b->workers[i].published[k], memory_order_relaxed);
        }
    }
}

static void
on_report(uv_timer_t *t)
{
    struct bench *b = t->data;
    uint64_t now = uv_hrtime(), counts[BENCH_NCOUNTS], d[BENCH_NCOUNTS], decisions = 0;
    double secs = (double)(now - b->last_report_t) / 1e9;
    unsigned k;

    sum_counts(b, counts);
    for (k = 0; k < BENCH_NCOUNTS; k++) {
        d[k] = counts[k] - b->last_counts[k];
        if (k < RL_WIRE_CODE_COUNT) {
            decisions += d[k];
        }
    }
    if (b->o.json) {
        printf("{\"type\":\"interval\",\"t\":%.3f,\"decisions_per_s\":%.1f",
               (double)(now - b->t_start) / 1e9, secs > 0 ? (double)decisions / secs : 0.0);
        for (k = 0; k < BENCH_NCOUNTS; k++) {
            printf(",\"%s\":%llu", count_names[k], (unsigned long long)d[k]);
        }
        printf("}\n");
    } else {
        printf("t=%.3f decisions/s=%.0f", (double)(now - b->t_start) / 1e9,
               secs > 0 ? (double)decisions / secs : 0.0);
        for (k = 0; k < BENCH_NCOUNTS; k++) {
            printf(" %s=%llu", count_names[k], (unsigned long long)d[k]);
        }
        printf("\n");
    }
    fflush(stdout);
    memcpy(b->last_counts, counts, sizeof(counts));
    b->last_report_t = now;
}

static void
on_signal(uv_signal_t *s, int signum)
{
    struct bench *b = s->data;

    /* The first ^C drains what is in flight; a second one stops at once. */
    if (atomic_load(&b->stop) == 0) {
        atomic_store(&b->stop, 1);
    } else {
        atomic_store(&b->stop, 2);
    }
}

static void
on_done(uv_async_t *a)
{
    struct bench *b = a->data;

    if (atomic_load(&b->ndone) < b->o.threads) {
        return;
    }
    uv_close((uv_handle_t *)&b->sigint, NULL);
    uv_close((uv_handle_t *)&b->sigterm, NULL);
    uv_close((uv_handle_t *)&b->report, NULL);
    uv_close((uv_handle_t *)&b->done_async, NULL);
}

/* Output. */

static void
print_summary(struct bench *b)
{
    const struct opts *o = &b->o;
    struct rl_hist *h = calloc(1, sizeof(*h));
    uint64_t counts[BENCH_NCOUNTS] = {0}, decisions = 0, sent = 0, elapsed = 0;
    double secs, p50, p99, p999, pmax;
    unsigned i, k;

    if (h == NULL) {
        return;
    }
    for (i = 0; i < o->threads; i++) {
        struct worker *w = &b->workers[i];

        rl_hist_merge(h, &w->hist);
        for (k = 0; k < BENCH_NCOUNTS; k++) {
            counts[k] += w->counts[k];
        }
        sent += w->sent;
        if (w->running && w->t_end - w->t0 > elapsed) {
            elapsed = w->t_end - w->t0;
        }
    }
    for (k = 0; k < RL_WIRE_CODE_COUNT; k++) {
        decisions += counts[k];
    }
    secs = (double)elapsed / 1e9;
    p50 = (double)rl_hist_quantile(h, 0.50) / 1e3;
    p99 = (double)rl_hist_quantile(h, 0.99) / 1e3;
    p999 = (double)rl_hist_quantile(h, 0.999) / 1e3;
    pmax = (double)h->max / 1e3;
    if (o->json) {
        printf("{\"type\":\"summary\",\"target\":\"%s\",\"threads\":%u,\"connections\":%u,"
               "\"pipeline\":%u,\"keys\":%u,\"dist\":\"%s\",\"zipf_s\":%g,\"rate\":%g,"
               "\"seconds\":%.6f,\"requests\":%llu,\"decisions\":%llu,\"decisions_per_s\":%.1f",
               o->target, o->threads, o->connections, o->pipeline, o->keys,
               o->sequential ? "sequential" : (o->dist == DIST_ZIPF ? "zipf" : "uniform"),
               o->zipf_s, o->rate, secs, (unsigned long long)sent, (unsigned long long)decisions,
               secs > 0 ? (double)decisions / secs : 0.0);
        for (k = 0; k < BENCH_NCOUNTS; k++) {
            printf(",\"%s\":%llu", count_names[k], (unsigned long long)counts[k]);
        }
        printf(",\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f}\n", p50, p99,
               p999, pmax);
    } else {
        printf("target        %s (%u thread%s, %u connections, pipeline %u%s)\n", o->target,
               o->threads, o->threads == 1 ? "" : "s", o->connections, o->pipeline,
               o->rate > 0 ? ", open loop" : "");
        printf("keys          %u %s\n", o->keys,
               o->sequential ? "sequential" : (o->dist == DIST_ZIPF ? "zipf" : "uniform"));
        printf("duration      %.3f s\n", secs);
        printf("requests      %llu\n", (unsigned long long)sent);
        printf("decisions     %llu\n", (unsigned long long)decisions);
        printf("decisions/s   %.0f\n", secs > 0 ? (double)decisions / secs : 0.0);
        for (k = 0; k < BENCH_NCOUNTS; k++) {
            printf("%-13s %llu\n", count_names[k], (unsigned long long)counts[k]);
        }
        printf("latency_us    p50 %.1f  p99 %.1f  p999 %.1f  max %.1f\n", p50, p99, p999, pmax);
    }
    fflush(stdout);
    free(h);
}

static void
usage(FILE *f)
{
    fprintf(f, "usage: rl-bench [options]\n"
               "Sends CHECK requests to a ratelimiter node or router and reports throughput,\n"
               "reply codes and latency.\n"
               "\n"
               "  --target HOST:PORT   server (default 127.0.0.1:7400, the router, as rl-cli)\n"
               "  --connections C      TCP connections in all (default 4)\n"
               "  --pipeline P         requests in flight per connection (default 64, <= 65536)\n"
               "  --threads N          worker threads, each with its own loop (default 1)\n"
               "  --keys K             distinct users \"u0\"..\"u<K-1>\" (default 1000000)\n"
               "  --dist uniform|zipf  how users are drawn (default uniform)\n"
               "  --zipf-s S           Zipf exponent, > 0 (default 1.0)\n"
               "  --sequential         users in order 0..K-1 (with --requests K: exactly K keys)\n"
               "  --service NAME       service (default \"bench\")\n"
               "  --endpoint E         endpoint (default nil)\n"
               "  --cost N             cost of each request (default 1)\n"
               "  --duration SECONDS   how long to send (default 5; fractions allowed)\n"
               "  --requests N         send N requests instead of running for a duration\n"
               "  --seed N             fixed random seed: the same users in the same order\n"
               "  --rate R             open loop at R requests/s in all; latency counts from\n"
               "                       each request's scheduled time (default 0: closed loop)\n"
               "  --report-every SECS  print a line per interval\n"
               "  --json               print the summary (and interval lines) as JSON\n"
               "  --token-file FILE    AUTH with the token in FILE on every connection (mode\n"
               "                       0600); default $RL_TOKEN_FILE, none when unset\n"
               "  --help, --version\n"
               "\n"
               "Exits 1 when it cannot connect or a connection fails, 2 on a usage error.\n"
               "^C stops sending, waits for the replies in flight, and prints the summary.\n");
}

/* A number in 0..max for an option: rl_parse_u64, 0 or -1. */
static int
parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    return rl_parse_u64(s, 0, max, out) == NULL ? 0 : -1;
}

static int
parse_double(const char *s, double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < 0) {
        return -1;
    }
    *out = v;
    return 0;
}

enum {
    OPT_TARGET = 256,
    OPT_CONNECTIONS,
    OPT_PIPELINE,
    OPT_KEYS,
    OPT_DIST,
    OPT_ZIPF_S,
    OPT_SERVICE,
    OPT_ENDPOINT,
    OPT_COST,
    OPT_DURATION,
    OPT_REQUESTS,
    OPT_RATE,
    OPT_SEQUENTIAL,
    OPT_REPORT,
    OPT_JSON,
    OPT_THREADS,
    OPT_SEED,
    OPT_TOKEN_FILE,
    OPT_HELP,
    OPT_VERSION,
};

static const struct option long_opts[] = {
    {"target", required_argument, NULL, OPT_TARGET},
    {"connections", required_argument, NULL, OPT_CONNECTIONS},
    {"pipeline", required_argument, NULL, OPT_PIPELINE},
    {"keys", required_argument, NULL, OPT_KEYS},
    {"dist", required_argument, NULL, OPT_DIST},
    {"zipf-s", required_argument, NULL, OPT_ZIPF_S},
    {"service", required_argument, NULL, OPT_SERVICE},
    {"endpoint", required_argument, NULL, OPT_ENDPOINT},
    {"cost", required_argument, NULL, OPT_COST},
    {"duration", required_argument, NULL, OPT_DURATION},
    {"requests", required_argument, NULL, OPT_REQUESTS},
    {"rate", required_argument, NULL, OPT_RATE},
    {"sequential", no_argument, NULL, OPT_SEQUENTIAL},
    {"report-every", required_argument, NULL, OPT_REPORT},
    {"json", no_argument, NULL, OPT_JSON},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"seed", required_argument, NULL, OPT_SEED},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

/* Returns 0, 1 for --help/--version (done), or 2 after printing a usage error. */
static int
parse_opts(int argc, char **argv, struct opts *o)
{
    uint64_t v;
    int ch;
    const char *bad = NULL;

    o->target = "127.0.0.1:7400";
    o->connections = 4;
    o->pipeline = 64;
    o->keys = 1000000;
    o->dist = DIST_UNIFORM;
    o->zipf_s = 1.0;
    o->service = "bench";
    o->endpoint = NULL;
    o->cost = 1;
    o->duration = 5.0;
    o->threads = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
        switch (ch) {
        case OPT_TARGET:
            o->target = optarg;
            break;
        case OPT_TOKEN_FILE:
            o->token_file = optarg;
            break;
        case OPT_CONNECTIONS:
            if (parse_u64(optarg, 100000, &v) != 0 || v == 0) {
                bad = "--connections: expected 1..100000";
            }
            o->connections = (unsigned)v;
            break;
        case OPT_PIPELINE:
            if (parse_u64(optarg, 65536, &v) != 0 || v == 0) {
                bad = "--pipeline: expected 1..65536";
            }
            o->pipeline = (unsigned)v;
            break;
        case OPT_KEYS:
            if (parse_u64(optarg, UINT32_MAX, &v) != 0 || v == 0) {
                bad = "--keys: expected 1..4294967295";
            }
            o->keys = (uint32_t)v;
            break;
        case OPT_DIST:
            if (strcmp(optarg, "uniform") == 0) {
                o->dist = DIST_UNIFORM;
            } else if (strcmp(optarg, "zipf") == 0) {
                o->dist = DIST_ZIPF;
            } else {
                bad = "--dist: expected uniform or zipf";
            }
            break;
        case OPT_ZIPF_S:
            if (parse_double(optarg, &o->zipf_s) != 0 || o->zipf_s <= 0 || o->zipf_s > 100) {
                bad = "--zipf-s: expected a number in (0, 100]";
            }
            break;
        case OPT_SERVICE:
            o->service = optarg;
            if (strlen(optarg) == 0 || strlen(optarg) > RL_WIRE_SERVICE_MAX) {
                bad = "--service: expected 1..128 bytes";
            }
            break;
        case OPT_ENDPOINT:
            o->endpoint = optarg;
            if (strlen(optarg) > RL_WIRE_ENDPOINT_MAX) {
                bad = "--endpoint: expected at most 128 bytes";
            }
            break;
        case OPT_COST:
            if (parse_u64(optarg, UINT32_MAX, &v) != 0) {
                bad = "--cost: expected 0..4294967295";
            }
            o->cost = (uint32_t)v;
            break;
        case OPT_DURATION:
            if (parse_double(optarg, &o->duration) != 0 || o->duration <= 0 || o->duration > 1e7) {
                bad = "--duration: expected a positive number of seconds";
            }
            break;
        case OPT_REQUESTS:
            if (parse_u64(optarg, UINT64_MAX / 2, &o->requests) != 0 || o->requests == 0) {
                bad = "--requests: expected a positive count";
            }
            break;
        case OPT_RATE:
            if (parse_double(optarg, &o->rate) != 0 || o->rate > 1e9) {
                bad = "--rate: expected requests per second, 0..1e9";
            }
            break;
        case OPT_SEQUENTIAL:
            o->sequential = true;
            break;
        case OPT_SEED:
            if (parse_u64(optarg, UINT64_MAX, &o->seed) != 0 || o->seed == 0) {
                bad = "--seed: expected a positive integer";
            }
            break;
        case OPT_REPORT:
            if (parse_double(optarg, &o->report_every) != 0 || o->report_every < 0.001) {
                bad = "--report-every: expected seconds, at least 0.001";
            }
            break;
        case OPT_JSON:
            o->json = true;
            break;
        case OPT_THREADS:
            if (parse_u64(optarg, 256, &v) != 0 || v == 0) {
                bad = "--threads: expected 1..256";
            }
            o->threads = (unsigned)v;
            break;
        case OPT_HELP:
            usage(stdout);
            return 1;
        case OPT_VERSION:
            printf("rl-bench %s\n", RL_VERSION);
            return 1;
        default:
            bad = "unknown option";
            if (optopt == 0 && optind > 0 && optind <= argc) {
                fprintf(stderr, "rl-bench: unknown or incomplete option %s\n", argv[optind - 1]);
                bad = "";
            }
            break;
        }
        if (bad != NULL) {
            break;
        }
    }
    if (bad == NULL && optind < argc) {
        fprintf(stderr, "rl-bench: unexpected argument %s\n", argv[optind]);
        bad = "";
    }
    if (bad == NULL && o->threads > o->connections) {
        bad = "--threads: at most one thread per connection";
    }
    if (bad == NULL && o->token_file == NULL) {
        o->token_file = getenv("RL_TOKEN_FILE");
    }
    if (bad == NULL && o->token_file != NULL && o->token_file[0] != '\0') {
        static char why[320];

        if (rl_auth_read_secret(o->token_file, 1, o->token, sizeof(o->token), &o->token_len, why,
                                sizeof(why)) != 0) {
            bad = why;
        }
    }
    if (bad != NULL) {
        if (*bad != '\0') {
            fprintf(stderr, "rl-bench: %s\n", bad);
        }
        fprintf(stderr, "try rl-bench --help\n");
        return 2;
    }
    return 0;
}

/* Connects once with the blocking client: resolves the target, proves it answers, and
 * yields the address that worked for the libuv connections. */
static int
resolve_target(struct bench *b)
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
    if (b->o.token_len > 0) {
        struct rl_wire_reply *rep = malloc(sizeof(*rep));

        rc = rep == NULL ? -ENOMEM
                         : rl_client_auth(c, b->o.token, b->o.token_len, rep, 5000);
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

static void
encode_constants(struct bench *b)
{
    const struct opts *o = &b->o;
    char *p;

    p = rl_mp_put_str(b->prefix, o->service, strlen(o->service));
    b->prefix_len = (size_t)(p - b->prefix);
    if (o->endpoint != NULL) {
        p = rl_mp_put_str(b->suffix, o->endpoint, strlen(o->endpoint));
    } else {
        p = b->suffix;
        *p++ = (char)0xc0;
    }
    p = rl_mp_put_uint(p, o->cost);
    b->suffix_len = (size_t)(p - b->suffix);
}

static int
workers_init(struct bench *b)
{
    const struct opts *o = &b->o;
    /* A fixed seed makes the sequence of users (not the timing) repeatable. */
    uint64_t seed = o->seed != 0 ? o->seed : uv_hrtime() ^ ((uint64_t)getpid() << 32);
    unsigned i, k, conn_index = 0;

    b->workers = calloc(o->threads, sizeof(*b->workers));
    if (b->workers == NULL) {
        return -ENOMEM;
    }
    for (i = 0; i < o->threads; i++) {
        struct worker *w = &b->workers[i];

        w->b = b;
        w->index = i;
        w->tfd = -1;
        w->nconns = o->connections / o->threads + (i < o->connections % o->threads ? 1 : 0);
        w->conns = calloc(w->nconns, sizeof(*w->conns));
        w->rep = malloc(sizeof(*w->rep));
        if (w->conns == NULL || w->rep == NULL || rl_wire_decoder_init(&w->dec) != 0) {
            return -ENOMEM;
        }
        for (k = 0; k < w->nconns; k++) {
            if (conn_init(w, &w->conns[k], conn_index++) != 0) {
                return -ENOMEM;
            }
        }
        w->budget = UINT64_MAX;
        if (o->requests != 0) {
            w->budget = o->requests / o->threads + (i < o->requests % o->threads ? 1 : 0);
        }
        w->rng = seed + 0x9e3779b97f4a7c15ull * (i + 1);
        w->seq_next = i % o->keys;
        if (o->dist == DIST_ZIPF) {
            rl_zipf_init(&w->zipf, o->keys, o->zipf_s);
        }
        if (o->rate > 0) {
            w->interval_ns = 1e9 / (o->rate * (double)w->nconns / (double)o->connections);
            w->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
            if (w->tfd < 0) {
                return -errno;
            }
        }
    }
    return 0;
}

static void
workers_deinit(struct bench *b)
{
    unsigned i, k;

    if (b->workers == NULL) {
        return;
    }
    for (i = 0; i < b->o.threads; i++) {
        struct worker *w = &b->workers[i];

        if (w->conns != NULL) {
            for (k = 0; k < w->nconns; k++) {
                conn_deinit(&w->conns[k]);
            }
        }
        if (w->rep != NULL) {
            rl_wire_decoder_deinit(&w->dec);
        }
        if (w->tfd >= 0) {
            close(w->tfd);
        }
        free(w->conns);
        free(w->rep);
    }
    free(b->workers);
}

int
main(int argc, char **argv)
{
    struct bench *b = calloc(1, sizeof(*b));
    unsigned i, started = 0;
    int rc, status = 1;
    bool failed = false, ran = false;

    if (b == NULL) {
        fprintf(stderr, "rl-bench: out of memory\n");
        return 1;
    }
    rc = parse_opts(argc, argv, &b->o);
    if (rc != 0) {
        free(b);
        return rc == 1 ? 0 : 2;
    }
    /* libuv writes with write(2): a server that hangs up must not kill us with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    if (resolve_target(b) != 0) {
        goto out;
    }
    encode_constants(b);
    if (workers_init(b) != 0) {
        fprintf(stderr, "rl-bench: out of memory\n");
        goto out;
    }
    uv_loop_init(&b->loop);
    uv_signal_init(&b->loop, &b->sigint);
    b->sigint.data = b;
    uv_signal_start(&b->sigint, on_signal, SIGINT);
    uv_signal_init(&b->loop, &b->sigterm);
    b->sigterm.data = b;
    uv_signal_start(&b->sigterm, on_signal, SIGTERM);
    uv_async_init(&b->loop, &b->done_async, on_done);
    b->done_async.data = b;
    uv_timer_init(&b->loop, &b->report);
    b->report.data = b;
    b->t_start = b->last_report_t = uv_hrtime();
    if (b->o.report_every > 0) {
        uint64_t ms = (uint64_t)(b->o.report_every * 1000.0 + 0.5);

        uv_timer_start(&b->report, on_report, ms, ms);
    }
    for (i = 0; i < b->o.threads; i++) {
        rc = uv_thread_create(&b->workers[i].thread, worker_main, &b->workers[i]);
        if (rc != 0) {
            fprintf(stderr, "rl-bench: cannot start a thread: %s\n", uv_strerror(rc));
            atomic_store(&b->stop, 2);
            atomic_fetch_add(&b->ndone, b->o.threads - i);
            uv_async_send(&b->done_async);
            failed = true;
            break;
        }
        started++;
    }
    uv_run(&b->loop, UV_RUN_DEFAULT);
    for (i = 0; i < started; i++) {
        uv_thread_join(&b->workers[i].thread);
    }
    if (uv_loop_close(&b->loop) != 0) {
        fprintf(stderr, "rl-bench: control loop not closed\n");
    }
    for (i = 0; i < started; i++) {
        struct worker *w = &b->workers[i];

        failed = failed || w->failed || w->err[0] != '\0';
        ran = ran || w->running;
    }
    if (ran) {
        print_summary(b);
    }
    status = failed ? 1 : 0;

out:
    workers_deinit(b);
    free(b);
    return status;
}
