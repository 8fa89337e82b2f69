/*
 * check_conn: the framed connection of conn.h, once for every user of it. A listener runs
 * on a libuv loop in a thread of the test; the test talks to it over real loopback sockets.
 * The listener's connections echo each frame's payload `amplify` times (so a client that
 * stops reading piles up output fast), or hold it (payload "H...") until the test releases
 * every held request. Checked: frames cut anywhere arrive whole and in order; a client that
 * stops reading is paused (the server stops reading it, its queued output stays near the
 * bound) and resumed once it drains, with every reply in order; held requests pause reading
 * at hold_max and resume on release; a half-closed client gets every reply before the close;
 * a bad length prefix gets ERROR MALFORMED and a close, counted; past max_connections a new
 * client gets ERROR OVERLOADED; an outgoing connection reports a peer that hangs up; many
 * clients sending all they can split a turn's input instead of each taking a full share.
 */
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include "conn.h"
#include "rltest.h"
#include "wire.h"

#define HOLD_MAX 16u

struct srv {
    uv_loop_t loop;
    uv_async_t wake;
    struct rl_connq q;
    struct rl_listener l;
    pthread_t thread;
    uint16_t port;
    int amplify;
    atomic_int release; /* the test asks for every held request to be answered */
    atomic_int stop;
    atomic_uint_fast64_t frames;      /* frames handed to on_frame */
    atomic_uint_fast64_t frames_dot2; /* of which from 127.0.0.2 */
    int frame_work;                   /* a busy loop of this many steps for each frame */
    atomic_uint_fast64_t max_queued;  /* most output queued on one connection */
    atomic_uint_fast64_t pauses;      /* times a connection was seen not reading */
    atomic_uint_fast64_t conn_closes; /* on_close calls */
    struct rl_conn *held[4096];
    size_t nheld;
    /* bytes of frames handled in the loop turn under way (q.turn: turn_seen), and the most
     * in one turn after the first WARM_TURNS */
    uint64_t turn_seen, turn_bytes, turns;
    atomic_uint_fast64_t max_turn_bytes;
};

#define WARM_TURNS 5

static void
srv_frame(struct rl_conn *c, const char *p, size_t n)
{
    struct srv *s = c->data;
    unsigned char hdr[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16),
                            (unsigned char)(n >> 8), (unsigned char)n};

    atomic_fetch_add(&s->frames, 1);
    if (c->addr[12] == 127 && c->addr[15] == 2) {
        atomic_fetch_add(&s->frames_dot2, 1);
    }
    for (volatile int k = 0; k < s->frame_work; k++) {
    }
    if (s->q.turn != s->turn_seen) {
        if (++s->turns > WARM_TURNS && s->turn_bytes > atomic_load(&s->max_turn_bytes)) {
            atomic_store(&s->max_turn_bytes, s->turn_bytes);
        }
        s->turn_seen = s->q.turn;
        s->turn_bytes = 0;
    }
    s->turn_bytes += RL_WIRE_HDR_LEN + n;
    if (p[0] == 'H') {
        /* Answered when the test releases: the reply is sent then. */
        rl_conn_hold(c);
        s->held[s->nheld++] = c;
        return;
    }
    for (int i = 0; i < s->amplify; i++) {
        rl_buf_append(&c->out, hdr, 4);
        rl_buf_append(&c->out, p, n);
    }
    if (rl_conn_queued(c) > atomic_load(&s->max_queued)) {
        atomic_store(&s->max_queued, rl_conn_queued(c));
    }
    rl_conn_mark(c);
}

static void
srv_close(struct rl_conn *c, int status)
{
    struct srv *s = c->data;

    (void)status;
    atomic_fetch_add(&s->conn_closes, 1);
    for (size_t i = 0; i < s->nheld; i++) {
        if (s->held[i] == c) {
            s->held[i] = s->held[--s->nheld];
            i--;
        }
    }
}

static const struct rl_conn_ops srv_ops = {.on_frame = srv_frame, .on_close = srv_close};

static void
srv_wake(uv_async_t *a)
{
    struct srv *s = a->data;

    if (atomic_exchange(&s->release, 0)) {
        while (s->nheld > 0) {
            struct rl_conn *c = s->held[--s->nheld];
            static const char rep[] = {0, 0, 0, 1, 'R'};

            rl_buf_append(&c->out, rep, sizeof(rep));
            rl_conn_release(c);
        }
    }
    if (atomic_load(&s->stop)) {
        rl_listener_close(&s->l, NULL);
        rl_connq_close(&s->q, NULL, NULL);
        uv_close((uv_handle_t *)&s->wake, NULL);
    }
}

/* Samples whether connections are paused, every millisecond. */
static void
srv_sample(uv_timer_t *t)
{
    struct srv *s = t->data;

    for (struct rl_conn *c = s->l.conns; c != NULL; c = c->next) {
        if (!c->reading && !c->finishing && !c->eof) {
            atomic_fetch_add(&s->pauses, 1);
        }
    }
    if (atomic_load(&s->stop)) {
        uv_close((uv_handle_t *)t, NULL);
    }
}

static void *
srv_main(void *arg)
{
    struct srv *s = arg;
    uv_timer_t sample;

    uv_timer_init(&s->loop, &sample);
    sample.data = s;
    uv_timer_start(&sample, srv_sample, 1, 1);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    return NULL;
}

static struct srv *
srv_start(int amplify, uint32_t max_connections)
{
    struct srv *s = calloc(1, sizeof(*s));
    struct sockaddr_in sa;
    int len = sizeof(sa);
    struct rl_conn_limits lim = rl_conn_limits_default();

    RL_CHECK(s != NULL);
    lim.max_connections = max_connections;
    lim.router_reserve = 0;
    s->amplify = amplify;
    RL_CHECK_INT_EQ(uv_loop_init(&s->loop), 0);
    RL_CHECK_INT_EQ(rl_connq_init(&s->q, &s->loop), 0);
    RL_CHECK_INT_EQ(rl_listener_start(&s->l, &s->q, "127.0.0.1", 0, &srv_ops,
                                      sizeof(struct rl_conn), &lim, s),
                    0);
    RL_CHECK_INT_EQ(uv_tcp_getsockname(&s->l.tcp, (struct sockaddr *)&sa, &len), 0);
    s->port = ntohs(sa.sin_port);
    uv_async_init(&s->loop, &s->wake, srv_wake);
    s->wake.data = s;
    RL_CHECK_INT_EQ(pthread_create(&s->thread, NULL, srv_main, s), 0);
    return s;
}

static void
srv_stop(struct srv *s)
{
    atomic_store(&s->stop, 1);
    uv_async_send(&s->wake);
    pthread_join(s->thread, NULL);
    RL_CHECK_INT_EQ(uv_loop_close(&s->loop), 0);
    free(s);
}

/* A connection to port on 127.0.0.1 from the address from (127.0.0.1 when 0). */
static int
dial_from(uint16_t port, uint32_t from)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    struct sockaddr_in src = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    RL_CHECK_INT_GE(fd, 0);
    if (from != 0) {
        src.sin_addr.s_addr = htonl(from);
        RL_CHECK_INT_EQ(bind(fd, (struct sockaddr *)&src, sizeof(src)), 0);
    }
    RL_CHECK_INT_EQ(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

static int
dial(uint16_t port)
{
    return dial_from(port, 0);
}

static void
send_all(int fd, const void *p, size_t n)
{
    const char *q = p;

    while (n > 0) {
        ssize_t w = send(fd, q, n, MSG_NOSIGNAL);

        RL_CHECK(w > 0, "send: %s", strerror(errno));
        q += w;
        n -= (size_t)w;
    }
}

/* Reads exactly n bytes within 10 s; returns how many arrived before EOF. */
static size_t
recv_n(int fd, void *p, size_t n)
{
    char *q = p;
    size_t got = 0;

    while (got < n) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ssize_t r;

        RL_CHECK(poll(&pfd, 1, 10000) == 1, "no data within 10 s (%zu of %zu)", got, n);
        r = recv(fd, q + got, n - got, 0);
        if (r <= 0) {
            break;
        }
        got += (size_t)r;
    }
    return got;
}

/* True when the peer closed: EOF within 5 s. */
static bool
peer_closed(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    char b;

    return poll(&pfd, 1, 5000) == 1 && recv(fd, &b, 1, 0) == 0;
}

/* One frame whose payload is "F" and a 4-digit sequence number. */
static size_t
put_frame(char *buf, unsigned seq)
{
    char pay[6];

    snprintf(pay, sizeof(pay), "F%04u", seq % 10000);
    memcpy(buf, "\0\0\0\5", 4);
    memcpy(buf + 4, pay, 5);
    return 9;
}

/* Reads one error frame and returns its code (the payload is [255, id, err, msg]). */
static uint32_t
recv_error(int fd)
{
    char buf[512];
    struct rl_wire_decoder d;
    struct rl_wire_reply rep;
    size_t plen;
    uint32_t err;

    RL_CHECK_UINT_EQ(recv_n(fd, buf, 4), 4);
    plen = (size_t)(unsigned char)buf[0] << 24 | (size_t)(unsigned char)buf[1] << 16 |
           (size_t)(unsigned char)buf[2] << 8 | (unsigned char)buf[3];
    RL_CHECK_UINT_LT(plen, sizeof(buf) - 4);
    RL_CHECK_UINT_EQ(recv_n(fd, buf + 4, plen), plen);
    RL_CHECK_INT_EQ(rl_wire_decoder_init(&d), 0);
    RL_CHECK_INT_EQ(rl_wire_decode_reply(&d, buf + 4, plen, &rep), 0);
    RL_CHECK_UINT_EQ(rep.op, RL_WIRE_OP_ERROR);
    err = rep.err;
    rl_wire_decoder_deinit(&d);
    return err;
}

START_TEST(test_frames_cut_anywhere)
{
    struct srv *s = srv_start(1, 0);
    int fd = dial(s->port);
    char out[9 * 300], in[9 * 300];
    size_t n = 0;

    for (unsigned i = 0; i < 300; i++) {
        n += put_frame(out + n, i);
    }
    /* One byte, then odd-sized pieces: frames straddle every boundary. */
    for (size_t off = 0, step = 1; off < n; off += step, step = step % 17 + 3) {
        send_all(fd, out + off, off + step > n ? n - off : step);
        usleep(200);
    }
    ck_assert_uint_eq(recv_n(fd, in, n), n);
    ck_assert_msg(memcmp(in, out, n) == 0, "replies differ from the frames sent, or reordered");
    ck_assert_uint_eq(atomic_load(&s->frames), 300);
    close(fd);
    srv_stop(s);
}
END_TEST

/* One frame of BIG bytes: "F", a 4-digit sequence number, then filler. */
enum { BIG = 1004, BIG_PAY = BIG - 4, AMPLIFY = 4 };

static void
put_big(char *buf, unsigned seq)
{
    put_frame(buf, seq);
    buf[2] = (char)(BIG_PAY >> 8);
    buf[3] = (char)(BIG_PAY & 0xff);
    memset(buf + 9, 'x', BIG - 9);
}

START_TEST(test_slow_reader_paused_then_resumed)
{
    /* 20 000 frames of 1 KB are 20 MB of requests, each answered with 4 copies: 80 MB of
     * replies, far more than the kernel's socket buffers, which the client does not read
     * while it sends. */
    enum { FRAMES = 20000 };
    struct srv *s = srv_start(AMPLIFY, 0);
    int fd = dial(s->port);
    char *out = malloc((size_t)FRAMES * BIG), *in = malloc(AMPLIFY * BIG);
    size_t n = (size_t)FRAMES * BIG, sent = 0;
    uint64_t processed_while_stalled;
    const int flags = MSG_NOSIGNAL | MSG_DONTWAIT;

    for (unsigned i = 0; i < FRAMES; i++) {
        put_big(out + (size_t)i * BIG, i);
    }
    /* Send without reading until the socket would block for 1 s: the server stopped
     * reading us. */
    for (int idle = 0; sent < n && idle < 100;) {
        ssize_t w = send(fd, out + sent, n - sent, flags);

        if (w > 0) {
            sent += (size_t)w;
            idle = 0;
        } else {
            RL_CHECK(errno == EAGAIN, "send: %s", strerror(errno));
            usleep(10000);
            idle++;
        }
    }
    ck_assert_msg(sent < n, "all %zu bytes were taken: the server never stopped reading", n);
    processed_while_stalled = atomic_load(&s->frames);
    ck_assert_msg(processed_while_stalled < FRAMES, "every frame was processed while stalled");
    ck_assert_msg(atomic_load(&s->pauses) > 0, "the connection was never seen paused");
    /* Queued output stays within the bound plus one frame's replies. */
    ck_assert_msg(atomic_load(&s->max_queued) <= RL_CONN_OUT_MAX + AMPLIFY * BIG,
                  "queued %llu bytes past the %u bound",
                  (unsigned long long)atomic_load(&s->max_queued), RL_CONN_OUT_MAX);
    /* Now read everything while sending the rest: every reply, in order. */
    for (unsigned i = 0; i < FRAMES; i++) {
        while (sent < n) {
            ssize_t w = send(fd, out + sent, n - sent, flags);

            if (w <= 0) {
                break;
            }
            sent += (size_t)w;
        }
        RL_CHECK_UINT_EQ(recv_n(fd, in, AMPLIFY * BIG), AMPLIFY * BIG);
        for (int k = 0; k < AMPLIFY; k++) {
            if (memcmp(in + k * BIG, out + (size_t)i * BIG, BIG) != 0) {
                ck_abort_msg("reply %u copy %d is not frame %u's", i, k, i);
            }
        }
    }
    ck_assert_uint_eq(atomic_load(&s->frames), FRAMES);
    free(out);
    free(in);
    close(fd);
    srv_stop(s);
}
END_TEST

START_TEST(test_holds_pause_and_release_resumes)
{
    struct srv *s = srv_start(1, 0);
    int fd = dial(s->port);
    char buf[9 * 64], rep[5 * 64];
    size_t n = 0;

    /* Each connection holds at most hold_max requests: the listener default. */
    ck_assert_uint_ge(RL_CONN_HOLD_MAX, HOLD_MAX);
    for (unsigned i = 0; i < 64; i++) {
        n += put_frame(buf + n, i);
        buf[n - 5] = 'H';
    }
    /* 64 held requests are far below the default bound: all processed, none answered. */
    send_all(fd, buf, n);
    for (int i = 0; i < 200 && atomic_load(&s->frames) < 64; i++) {
        usleep(5000);
    }
    ck_assert_uint_eq(atomic_load(&s->frames), 64);
    atomic_store(&s->release, 1);
    uv_async_send(&s->wake);
    ck_assert_uint_eq(recv_n(fd, rep, sizeof(rep)), sizeof(rep));
    for (int i = 0; i < 64; i++) {
        RL_CHECK_INT_EQ(rep[i * 5 + 4], 'R');
    }
    close(fd);
    srv_stop(s);
}
END_TEST

START_TEST(test_hold_max_pauses_reading)
{
    enum { N = RL_CONN_HOLD_MAX + 500 };
    struct srv *s = srv_start(1, 0);
    int fd = dial(s->port);
    char *buf = malloc((size_t)N * 9), *rep = malloc((size_t)N * 5);
    size_t n = 0;

    for (unsigned i = 0; i < N; i++) {
        n += put_frame(buf + n, i);
        buf[n - 5] = 'H';
    }
    send_all(fd, buf, n);
    for (int i = 0; i < 100; i++) {
        usleep(5000);
    }
    /* Processing stops at the bound: the rest waits in the input buffer or the socket. */
    ck_assert_uint_eq(atomic_load(&s->frames), RL_CONN_HOLD_MAX);
    ck_assert_msg(atomic_load(&s->pauses) > 0, "not paused at hold_max");
    /* Releasing brings holds to 0 (below half): the connection resumes with the frames it
     * had read, which are held again; a second release answers them. */
    atomic_store(&s->release, 1);
    uv_async_send(&s->wake);
    ck_assert_uint_eq(recv_n(fd, rep, (size_t)RL_CONN_HOLD_MAX * 5), (size_t)RL_CONN_HOLD_MAX * 5);
    for (int i = 0; i < 200 && atomic_load(&s->frames) < N; i++) {
        usleep(5000);
    }
    ck_assert_uint_eq(atomic_load(&s->frames), N);
    atomic_store(&s->release, 1);
    uv_async_send(&s->wake);
    ck_assert_uint_eq(recv_n(fd, rep, 500 * 5), 500 * 5);
    free(buf);
    free(rep);
    close(fd);
    srv_stop(s);
}
END_TEST

/* A sender: writes 9-byte frames on fd as fast as the socket takes them until stop. */
struct blaster {
    int fd;
    atomic_int *stop;
    pthread_t t;
};

static void *
blast(void *arg)
{
    struct blaster *b = arg;
    static char buf[9 * 7000];
    size_t n = 0;

    for (unsigned i = 0; i < 7000; i++) {
        n += put_frame(buf + n, i);
    }
    while (!atomic_load(b->stop)) {
        if (send(b->fd, buf, n, MSG_NOSIGNAL) <= 0) {
            break;
        }
    }
    return NULL;
}

/*
 * Many clients that send all they can split a loop turn's input share (RL_CONN_TURN_ALL)
 * instead of each taking RL_CONN_TURN_BYTES: with 16 of them, no turn handles more than
 * twice RL_CONN_TURN_ALL, plus one connection's full share and a least share with a frame for
 * each (a turn of 16 x 64 KiB before), so one that sends now and then waits one short turn.
 */
START_TEST(test_many_senders_share_a_turn)
{
    enum { SENDERS = 16 };
    struct srv *s = srv_start(0, 0);
    struct blaster b[SENDERS];
    atomic_int stop = 0;
    uint64_t most;
    uint64_t bound = 2u * RL_CONN_TURN_ALL + RL_CONN_TURN_BYTES + SENDERS * (RL_CONN_TURN_MIN + 9u);

    for (int i = 0; i < SENDERS; i++) {
        b[i].fd = dial(s->port);
        b[i].stop = &stop;
        RL_CHECK_INT_EQ(pthread_create(&b[i].t, NULL, blast, &b[i]), 0);
    }
    for (int i = 0; i < 100 && atomic_load(&s->frames) < 2000000; i++) {
        usleep(10 * 1000);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < SENDERS; i++) {
        shutdown(b[i].fd, SHUT_RDWR);
        pthread_join(b[i].t, NULL);
        close(b[i].fd);
    }
    most = atomic_load(&s->max_turn_bytes);
    fprintf(stderr, "most input handled in one turn: %llu bytes (bound %llu), %llu frames\n",
            (unsigned long long)most, (unsigned long long)bound,
            (unsigned long long)atomic_load(&s->frames));
    ck_assert_uint_gt(most, 0);
    ck_assert_msg(most <= bound, "a turn handled %llu bytes of input, over %llu",
                  (unsigned long long)most, (unsigned long long)bound);
    srv_stop(s);
}
END_TEST

/*
 * A loop turn is split between clients (addresses) first, then between a client's
 * connections (common/turnshare.h): 16 connections from 127.0.0.1 and one from 127.0.0.2,
 * all sending all they can, get half the turn each side (the lone one is read about as much
 * as the 16 together), where a split by connection gave the lone one a 17th (6%).
 */
START_TEST(test_one_client_many_connections_shares_as_one)
{
    enum { MANY = 16 };
    struct srv *s = srv_start(0, 0);
    struct blaster b[MANY + 1];
    atomic_int stop = 0;
    double part;

    /* each frame costs the loop more than sending it costs a sender: the senders keep their
     * sockets full however busy the machine, and the shares alone decide who is read */
    s->frame_work = 400;
    {
        /* and a deep receive queue, taken by the connections it accepts: the kernel holds
         * more of each than a turn reads */
        int deep = 4 << 20;
        uv_os_fd_t lfd;

        RL_CHECK_INT_EQ(uv_fileno((uv_handle_t *)&s->l.tcp, &lfd), 0);
        RL_CHECK_INT_EQ(setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &deep, sizeof(deep)), 0);
    }

    for (int i = 0; i <= MANY; i++) {
        int deep = 4 << 20;

        b[i].fd = i < MANY ? dial(s->port) : dial_from(s->port, 0x7f000002u);
        /* a deep send queue: what the loop reads of a connection is what its share lets it,
         * not what its sender thread, on a busy machine, managed to write in time */
        RL_CHECK_INT_EQ(setsockopt(b[i].fd, SOL_SOCKET, SO_SNDBUF, &deep, sizeof(deep)), 0);
        b[i].stop = &stop;
        RL_CHECK_INT_EQ(pthread_create(&b[i].t, NULL, blast, &b[i]), 0);
    }
    for (int i = 0; i < 200 && atomic_load(&s->frames) < 500000; i++) {
        usleep(10 * 1000);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i <= MANY; i++) {
        shutdown(b[i].fd, SHUT_RDWR);
        pthread_join(b[i].t, NULL);
        close(b[i].fd);
    }
    part = (double)atomic_load(&s->frames_dot2) / (double)atomic_load(&s->frames);
    fprintf(stderr, "the lone client's part of %llu frames: %.1f%%\n",
            (unsigned long long)atomic_load(&s->frames), 100.0 * part);
    ck_assert_uint_gt(atomic_load(&s->frames), 100000);
    ck_assert_msg(part >= 0.25, "the lone client got %.1f%% of the input handled", 100.0 * part);
    srv_stop(s);
}
END_TEST

START_TEST(test_half_close_gets_every_reply)
{
    struct srv *s = srv_start(1, 0);
    int fd = dial(s->port);
    char out[9 * 100], in[9 * 100 + 1];
    size_t n = 0;

    for (unsigned i = 0; i < 100; i++) {
        n += put_frame(out + n, i);
    }
    /* The last request is held: the close must wait for its answer too. */
    out[n - 5] = 'H';
    send_all(fd, out, n);
    shutdown(fd, SHUT_WR);
    ck_assert_uint_eq(recv_n(fd, in, n - 9), n - 9);
    ck_assert(memcmp(in, out, n - 9) == 0);
    usleep(100000);
    atomic_store(&s->release, 1);
    uv_async_send(&s->wake);
    ck_assert_uint_eq(recv_n(fd, in, 5), 5);
    ck_assert_int_eq(in[4], 'R');
    ck_assert_msg(peer_closed(fd), "no close after the last reply");
    close(fd);
    srv_stop(s);
}
END_TEST

START_TEST(test_bad_length_is_refused_and_counted)
{
    struct srv *s = srv_start(1, 0);
    int fd = dial(s->port);
    const char http[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    int other = dial(s->port);
    char out[9], in[9];

    send_all(fd, http, sizeof(http) - 1);
    ck_assert_uint_eq(recv_error(fd), RL_WIRE_ERR_MALFORMED);
    ck_assert(peer_closed(fd));
    close(fd);
    fd = dial(s->port);
    send_all(fd, "\0\0\0\0", 4); /* length 0 */
    ck_assert_uint_eq(recv_error(fd), RL_WIRE_ERR_MALFORMED);
    ck_assert(peer_closed(fd));
    close(fd);
    ck_assert_uint_eq(s->l.stats.protocol_closes, 2);
    /* A neighbour is not disturbed. */
    put_frame(out, 7);
    send_all(other, out, 9);
    ck_assert_uint_eq(recv_n(other, in, 9), 9);
    ck_assert(memcmp(in, out, 9) == 0);
    close(other);
    srv_stop(s);
}
END_TEST

START_TEST(test_over_max_connections_refused)
{
    struct srv *s = srv_start(1, 2);
    int a = dial(s->port), b = dial(s->port), c = dial(s->port);
    char out[9], in[9];

    ck_assert_uint_eq(recv_error(c), RL_WIRE_ERR_OVERLOADED);
    ck_assert(peer_closed(c));
    close(c);
    put_frame(out, 1);
    send_all(b, out, 9);
    ck_assert_uint_eq(recv_n(b, in, 9), 9);
    ck_assert_uint_eq(s->l.stats.connections_refused, 1);
    close(a);
    close(b);
    srv_stop(s);
}
END_TEST

/* ---- outgoing ---------------------------------------------------------------------------- */

struct dialer {
    struct rl_conn conn;
    int connected;
    int closed;
    int close_status;
    char got[16];
    size_t ngot;
};

static void
dial_frame(struct rl_conn *c, const char *p, size_t n)
{
    struct dialer *d = (struct dialer *)c;

    memcpy(d->got + d->ngot, p, n < sizeof(d->got) - d->ngot ? n : sizeof(d->got) - d->ngot);
    d->ngot += n;
}

static void
dial_connect(struct rl_conn *c, int status)
{
    struct dialer *d = (struct dialer *)c;

    d->connected = status == 0 ? 1 : -1;
    if (status == 0) {
        rl_buf_append(&c->out, "\0\0\0\3abc", 7);
        rl_conn_mark(c);
    }
}

static void
dial_close(struct rl_conn *c, int status)
{
    struct dialer *d = (struct dialer *)c;

    d->closed++;
    d->close_status = status;
}

static void
dial_closed(struct rl_conn *c)
{
    rl_connq_close(c->q, NULL, NULL);
}

static const struct rl_conn_ops dial_ops = {.on_frame = dial_frame,
                                            .on_connect = dial_connect,
                                            .on_close = dial_close,
                                            .on_closed = dial_closed};

START_TEST(test_outgoing_reports_hangup)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0), fd;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    uv_loop_t loop;
    struct rl_connq q;
    struct dialer d;
    char buf[7];
    pid_t pid;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(lfd, 1), 0);
    ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
    pid = fork();
    if (pid == 0) {
        /* The peer: reads the request, answers one frame, hangs up. */
        fd = accept(lfd, NULL, NULL);
        if (fd >= 0 && recv_n(fd, buf, 7) == 7) {
            send_all(fd, "\0\0\0\2ok", 6);
        }
        close(fd);
        _exit(0);
    }
    uv_loop_init(&loop);
    rl_connq_init(&q, &loop);
    rl_conn_init(&d.conn, &q, &dial_ops, NULL);
    d.connected = d.closed = d.close_status = 0;
    d.ngot = 0;
    ck_assert_int_eq(rl_conn_connect(&d.conn, (struct sockaddr *)&sa), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(d.connected, 1);
    ck_assert_uint_eq(d.ngot, 2);
    ck_assert(memcmp(d.got, "ok", 2) == 0);
    ck_assert_int_eq(d.closed, 1);
    ck_assert_int_eq(d.close_status, UV_EOF);
    rl_conn_deinit(&d.conn);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    close(lfd);
}
END_TEST

static Suite *
conn_suite(void)
{
    Suite *s = suite_create("conn");
    TCase *tc = tcase_create("conn");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_frames_cut_anywhere);
    tcase_add_test(tc, test_slow_reader_paused_then_resumed);
    tcase_add_test(tc, test_holds_pause_and_release_resumes);
    tcase_add_test(tc, test_hold_max_pauses_reading);
    tcase_add_test(tc, test_half_close_gets_every_reply);
    tcase_add_test(tc, test_many_senders_share_a_turn);
    tcase_add_test(tc, test_one_client_many_connections_shares_as_one);
    tcase_add_test(tc, test_bad_length_is_refused_and_counted);
    tcase_add_test(tc, test_over_max_connections_refused);
    tcase_add_test(tc, test_outgoing_reports_hangup);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(conn_suite)
