/*
 * check_client: the blocking client against a fake server on a loopback ephemeral port.
 * The fake answers each batch of requests it reads in reversed order, with fields computed
 * from the request (remaining = cost * 2, ...), so a reply filed under the wrong request
 * shows. Other modes of the fake stay silent, hang up, or send bad frames. Not a test of
 * the real node: tests/integration does that.
 */
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "buf.h"
#include "reqclient.h"
#include "clock.h"
#include "rltest.h"
#include "wire.h"

enum fake_mode {
    FAKE_NORMAL,      /* answer every batch, reversed */
    FAKE_SILENT,      /* read and never answer */
    FAKE_CLOSE,       /* hang up on the first bytes */
    FAKE_REPLY_CLOSE, /* answer the first batch, then hang up */
    FAKE_OVERSIZE,    /* answer with a length prefix of 65537 */
    FAKE_GARBAGE,     /* answer with a frame that is not msgpack */
    FAKE_DRIP,        /* answer one byte per write */
    FAKE_MAX_FRAME,   /* answer PING with a frame of exactly RL_WIRE_FRAME_MAX bytes */
};

struct fake {
    int lfd;
    uint16_t port;
    enum fake_mode mode;
    pthread_t thread;
    atomic_uint_fast64_t checks;  /* CHECK requests answered */
    atomic_uint_fast64_t batches; /* reads that held at least one request */
};

/* What the fake needs of a request to answer it once the batch is read. */
struct fake_req {
    uint32_t op;
    uint32_t id;
    uint32_t cost;
    uint32_t user_len;
    uint64_t now_ms;
    int error; /* service "err": answer ERROR BAD_FIELD */
};

static void
write_all(int fd, const char *p, size_t n)
{
    ssize_t w;

    while (n > 0) {
        w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) {
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

static void
fake_answer(struct fake *f, struct rl_buf *out, const struct fake_req *r)
{
    static const char *const keys[] = {"checks", "keys", "negative"};
    int64_t vals[3];
    struct rl_wire_check_reply rep;

    switch (r->op) {
    case RL_WIRE_OP_CHECK:
        if (r->error) {
            rl_wire_put_error(out, r->id, RL_WIRE_ERR_BAD_FIELD, "service");
            break;
        }
        atomic_fetch_add(&f->checks, 1);
        rep.id = r->id;
        rep.code = r->cost % 6;
        rep.limit = 1000 + (uint64_t)r->cost;
        rep.remaining = (uint64_t)r->cost * 2;
        rep.reset_ms = (uint64_t)r->cost * 3;
        rep.retry_after_ms = r->user_len;
        rl_wire_put_check_reply(out, &rep);
        break;
    case RL_WIRE_OP_PING:
        rl_wire_put_ping_reply(out, r->id, "fake");
        break;
    case RL_WIRE_OP_STATS:
        vals[0] = (int64_t)atomic_load(&f->checks);
        vals[1] = 42;
        vals[2] = -5;
        rl_wire_put_stats_reply(out, r->id, keys, vals, 3);
        break;
    case RL_WIRE_OP_CLOCK:
        /* now_ms 0 plays a node without --test-clock. */
        if (r->now_ms == 0) {
            rl_wire_put_error(out, r->id, RL_WIRE_ERR_UNKNOWN_OP, "clock");
        } else {
            rl_wire_put_clock_reply(out, r->id, r->now_ms);
        }
        break;
    default:
        break;
    }
}

/* A PING reply whose payload is exactly RL_WIRE_FRAME_MAX bytes. */
static void
fake_max_frame(struct rl_buf *out, uint32_t id)
{
    struct rl_buf probe;
    size_t base = 1000, len;
    char *name;

    rl_buf_init(&probe);
    name = malloc(RL_WIRE_FRAME_MAX);
    RL_CHECK(name != NULL);
    memset(name, 'n', RL_WIRE_FRAME_MAX - 1);
    name[base] = '\0';
    RL_CHECK_INT_EQ(rl_wire_put_ping_reply(&probe, id, name), 0);
    len = base + (RL_WIRE_FRAME_MAX - (probe.len - RL_WIRE_HDR_LEN));
    name[base] = 'n';
    name[len] = '\0';
    RL_CHECK_INT_EQ(rl_wire_put_ping_reply(out, id, name), 0);
    RL_CHECK_UINT_EQ(out->len, RL_WIRE_HDR_LEN + RL_WIRE_FRAME_MAX);
    free(name);
    rl_buf_deinit(&probe);
}

/* Serves one connection until the client closes it or the mode says hang up. */
static void
fake_serve(struct fake *f, int fd)
{
    struct rl_wire_decoder dec;
    struct rl_wire_fault fault;
    struct rl_wire_req req;
    struct rl_buf in, out;
    struct fake_req *batch = NULL;
    size_t nbatch, cap = 0, len, i;
    ssize_t n;
    int replied = 0;

    rl_wire_decoder_init(&dec);
    rl_buf_init(&in);
    rl_buf_init(&out);
    for (;;) {
        rl_buf_compact(&in);
        rl_buf_reserve(&in, 65536);
        n = recv(fd, in.data + in.len, in.cap - in.len, 0);
        if (n <= 0) {
            break;
        }
        in.len += (size_t)n;
        if (f->mode == FAKE_SILENT) {
            rl_buf_reset(&in);
            continue;
        }
        if (f->mode == FAKE_CLOSE || (f->mode == FAKE_REPLY_CLOSE && replied)) {
            break;
        }
        nbatch = 0;
        while (rl_wire_frame(in.data + in.pos, rl_buf_unread(&in), &len) == 1) {
            const char *p = in.data + in.pos + RL_WIRE_HDR_LEN;

            in.pos += RL_WIRE_HDR_LEN + len;
            if (rl_wire_decode_req(&dec, p, len, &req, &fault) != 0) {
                continue;
            }
            if (nbatch == cap) {
                cap = cap ? cap * 2 : 256;
                batch = realloc(batch, cap * sizeof(*batch));
                RL_CHECK(batch != NULL);
            }
            batch[nbatch].op = req.op;
            batch[nbatch].id = req.id;
            batch[nbatch].cost = req.cost;
            batch[nbatch].user_len = req.user.len;
            batch[nbatch].now_ms = req.now_ms;
            batch[nbatch].error = req.op == RL_WIRE_OP_CHECK && req.service.len == 3 &&
                                  memcmp(req.service.ptr, "err", 3) == 0;
            nbatch++;
        }
        if (nbatch == 0) {
            continue;
        }
        atomic_fetch_add(&f->batches, 1);
        rl_buf_reset(&out);
        switch (f->mode) {
        case FAKE_OVERSIZE:
            rl_buf_append(&out, "\x00\x01\x00\x01\x92\x02\x01", 7);
            break;
        case FAKE_GARBAGE:
            rl_buf_append(&out, "\x00\x00\x00\x01\xc1", 5);
            break;
        case FAKE_MAX_FRAME:
            fake_max_frame(&out, batch[0].id);
            break;
        default:
            for (i = nbatch; i-- > 0;) {
                fake_answer(f, &out, &batch[i]);
            }
            break;
        }
        if (f->mode == FAKE_DRIP) {
            for (i = 0; i < out.len; i++) {
                write_all(fd, out.data + i, 1);
                usleep(1000);
            }
        } else {
            write_all(fd, out.data, out.len);
        }
        replied = 1;
    }
    free(batch);
    rl_buf_deinit(&in);
    rl_buf_deinit(&out);
    rl_wire_decoder_deinit(&dec);
}

static void *
fake_main(void *arg)
{
    struct fake *f = arg;
    int fd;

    for (;;) {
        fd = accept(f->lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) {
                continue;
            }
            return NULL;
        }
        fake_serve(f, fd);
        close(fd);
    }
}

/* A listening socket on 127.0.0.1 with a port the kernel chose. */
static int
listen_loopback(int backlog, uint16_t *port)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd, one = 1;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    RL_CHECK_INT_GE(fd, 0);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    RL_CHECK_INT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    RL_CHECK_INT_EQ(listen(fd, backlog), 0);
    RL_CHECK_INT_EQ(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

static struct fake *
fake_start(enum fake_mode mode)
{
    struct fake *f = calloc(1, sizeof(*f));

    RL_CHECK(f != NULL);
    f->mode = mode;
    f->lfd = listen_loopback(16, &f->port);
    RL_CHECK_INT_EQ(pthread_create(&f->thread, NULL, fake_main, f), 0);
    return f;
}

/* Stops accepting and waits for the fake; the client must be gone first. */
static void
fake_stop(struct fake *f)
{
    shutdown(f->lfd, SHUT_RDWR);
    pthread_join(f->thread, NULL);
    close(f->lfd);
    free(f);
}

static struct rl_client *
connect_fake(const struct fake *f)
{
    struct rl_client *c = NULL;

    RL_CHECK_INT_EQ(rl_client_connect(&c, "127.0.0.1", f->port, 2000), 0);
    RL_CHECK(c != NULL);
    return c;
}

static uint64_t
elapsed_ms(uint64_t start_ns)
{
    return (rl_clock_mono_ns() - start_ns) / 1000000;
}

START_TEST(test_connect_refused)
{
    struct rl_client *c = (struct rl_client *)1;
    uint16_t port;
    int fd = listen_loopback(1, &port);

    /* The port was just ours and is closed now: nothing listens there. */
    close(fd);
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", port, 1000), -ECONNREFUSED);
    ck_assert_ptr_null(c);
}
END_TEST

START_TEST(test_connect_timeout)
{
    struct rl_client *c = NULL, *first = NULL;
    uint16_t port;
    uint64_t t0;
    int fd = listen_loopback(0, &port);

    /* A backlog of 0 admits one connection that is never accepted; Linux then drops the
     * SYNs of the next, so its connect can only time out. */
    ck_assert_int_eq(rl_client_connect(&first, "127.0.0.1", port, 1000), 0);
    t0 = rl_clock_mono_ns();
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", port, 200), -ETIMEDOUT);
    ck_assert_uint_ge(elapsed_ms(t0), 190);
    ck_assert_uint_lt(elapsed_ms(t0), 1000);
    ck_assert_ptr_null(c);
    rl_client_destroy(first);
    close(fd);
}
END_TEST

START_TEST(test_connect_names)
{
    struct fake *f = fake_start(FAKE_NORMAL);
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;
    char addr[64];

    snprintf(addr, sizeof(addr), "localhost:%u", (unsigned)f->port);
    ck_assert_int_eq(rl_client_connect_addr(&c, addr, 2000), 0);
    ck_assert_int_eq(rl_client_ping(c, &rep, 2000), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_PING);
    rl_client_destroy(c);
    snprintf(addr, sizeof(addr), "[127.0.0.1]:%u", (unsigned)f->port);
    ck_assert_int_eq(rl_client_connect_addr(&c, addr, 2000), 0);
    rl_client_destroy(c);

    ck_assert_int_eq(rl_client_connect_addr(&c, "127.0.0.1", 100), -EINVAL);
    ck_assert_int_eq(rl_client_connect_addr(&c, ":7401", 100), -EINVAL);
    ck_assert_int_eq(rl_client_connect_addr(&c, "127.0.0.1:0", 100), -EINVAL);
    ck_assert_int_eq(rl_client_connect_addr(&c, "127.0.0.1:65536", 100), -EINVAL);
    ck_assert_int_eq(rl_client_connect_addr(&c, "127.0.0.1:7x", 100), -EINVAL);
    ck_assert_int_eq(rl_client_connect_addr(&c, "127.0.0.1:-1", 100), -EINVAL);
    ck_assert_int_eq(rl_client_connect_addr(&c, "[::1:7401", 100), -EINVAL);
    ck_assert_int_eq(rl_client_connect(&c, "", 7401, 100), -EINVAL);
    ck_assert_ptr_null(c);
    fake_stop(f);
}
END_TEST

START_TEST(test_check_one)
{
    struct fake *f = fake_start(FAKE_NORMAL);
    struct rl_client *c = connect_fake(f);
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_check(c, "checkout", "u42", NULL, 7, &rep, 2000), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
    ck_assert_uint_eq(rep.check.id, rep.id);
    ck_assert_uint_eq(rep.check.code, 1);
    ck_assert_uint_eq(rep.check.limit, 1007);
    ck_assert_uint_eq(rep.check.remaining, 14);
    ck_assert_uint_eq(rep.check.reset_ms, 21);
    ck_assert_uint_eq(rep.check.retry_after_ms, 3);
    ck_assert_int_eq(rl_client_check(c, "checkout", "user-5", "/pay", 0, &rep, 2000), 0);
    ck_assert_uint_eq(rep.check.remaining, 0);
    ck_assert_uint_eq(rep.check.retry_after_ms, 6);

    /* An ERROR answer is a reply, not a failure of the call. */
    ck_assert_int_eq(rl_client_check(c, "err", "u1", NULL, 1, &rep, 2000), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_ERROR);
    ck_assert_uint_eq(rep.err, RL_WIRE_ERR_BAD_FIELD);
    ck_assert_uint_eq(rep.message.len, 7);
    ck_assert_int_eq(memcmp(rep.message.ptr, "service", 7), 0);
    rl_client_destroy(c);
    fake_stop(f);
}
END_TEST

/* Sends n CHECKs with cost i and user "u<i>" (service "err" when i % err_every == 1) and
 * checks every reply landed at its own index. */
static void
check_many_n(size_t n, size_t err_every)
{
    struct fake *f = fake_start(FAKE_NORMAL);
    struct rl_client *c = connect_fake(f);
    struct rl_wire_req *reqs = calloc(n, sizeof(*reqs));
    struct rl_wire_check_reply *reps = calloc(n, sizeof(*reps));
    char *users = malloc(n * 16);
    size_t i;
    int len;

    RL_CHECK(reqs != NULL);
    RL_CHECK(reps != NULL);
    RL_CHECK(users != NULL);
    for (i = 0; i < n; i++) {
        int err = err_every != 0 && i % err_every == 1;

        len = snprintf(users + i * 16, 16, "u%zu", i);
        reqs[i].service.ptr = err ? "err" : "svc";
        reqs[i].service.len = 3;
        reqs[i].user.ptr = users + i * 16;
        reqs[i].user.len = (uint32_t)len;
        reqs[i].cost = (uint32_t)i;
        reqs[i].id = 77; /* overwritten */
    }
    RL_CHECK_INT_EQ(rl_client_check_many(c, reqs, n, reps, 20000), 0);
    for (i = 0; i < n; i++) {
        RL_CHECK_UINT_EQ(reqs[i].id, i + 1);
        RL_CHECK_UINT_EQ(reps[i].id, i + 1);
        if (err_every != 0 && i % err_every == 1) {
            RL_CHECK_UINT_EQ(reps[i].code, RL_CLIENT_CODE_ERROR);
            RL_CHECK_UINT_EQ(reps[i].limit, RL_WIRE_ERR_BAD_FIELD);
            continue;
        }
        RL_CHECK_UINT_EQ(reps[i].code, i % 6);
        RL_CHECK_UINT_EQ(reps[i].limit, 1000 + i);
        RL_CHECK_UINT_EQ(reps[i].remaining, 2 * i);
        RL_CHECK_UINT_EQ(reps[i].reset_ms, 3 * i);
        RL_CHECK_UINT_EQ(reps[i].retry_after_ms, strlen(users + i * 16));
    }
    /* The connection is still in step: a single call after the batch works. */
    {
        struct rl_wire_reply rep;

        RL_CHECK_INT_EQ(rl_client_ping(c, &rep, 2000), 0);
        RL_CHECK_UINT_EQ(rep.op, RL_WIRE_OP_PING);
    }
    rl_client_destroy(c);
    free(users);
    free(reps);
    free(reqs);
    fake_stop(f);
}

START_TEST(test_check_many_small)
{
    struct fake *f = fake_start(FAKE_NORMAL);
    struct rl_client *c = connect_fake(f);

    ck_assert_int_eq(rl_client_check_many(c, NULL, 0, NULL, 100), 0);
    rl_client_destroy(c);
    fake_stop(f);
    check_many_n(1, 0);
    check_many_n(100, 7);
}
END_TEST

START_TEST(test_check_many_10000)
{
    check_many_n(10000, 0);
}
END_TEST

START_TEST(test_check_many_no_deadlock)
{
    /* About 9 MB each way: far past the loopback socket buffers, so this only finishes if
     * the client reads while it writes (the fake writes its replies blocking). */
    check_many_n(300000, 1000);
}
END_TEST

START_TEST(test_recv_timeout)
{
    struct fake *f = fake_start(FAKE_SILENT);
    struct rl_client *c = connect_fake(f);
    struct rl_wire_reply rep;
    struct rl_wire_req reqs[3];
    struct rl_wire_check_reply reps[3];
    uint64_t t0 = rl_clock_mono_ns();

    ck_assert_int_eq(rl_client_check(c, "svc", "u1", NULL, 1, &rep, 150), -ETIMEDOUT);
    ck_assert_uint_ge(elapsed_ms(t0), 140);
    ck_assert_uint_lt(elapsed_ms(t0), 1000);
    t0 = rl_clock_mono_ns();
    ck_assert_int_eq(rl_client_recv(c, &rep, 0), -ETIMEDOUT);
    ck_assert_uint_lt(elapsed_ms(t0), 100);
    memset(reqs, 0, sizeof(reqs));
    reqs[0].service.ptr = reqs[1].service.ptr = reqs[2].service.ptr = "svc";
    reqs[0].service.len = reqs[1].service.len = reqs[2].service.len = 3;
    reqs[0].user.ptr = reqs[1].user.ptr = reqs[2].user.ptr = "u";
    reqs[0].user.len = reqs[1].user.len = reqs[2].user.len = 1;
    ck_assert_int_eq(rl_client_check_many(c, reqs, 3, reps, 100), -ETIMEDOUT);
    rl_client_destroy(c);
    fake_stop(f);
}
END_TEST

START_TEST(test_server_close)
{
    struct fake *f = fake_start(FAKE_CLOSE);
    struct rl_client *c = connect_fake(f);
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_check(c, "svc", "u1", NULL, 1, &rep, 2000), -ECONNRESET);
    ck_assert_int_eq(rl_client_ping(c, &rep, 2000), -ECONNRESET);
    rl_client_destroy(c);
    fake_stop(f);

    /* A reply sent before the close is still delivered, then the close is reported. */
    f = fake_start(FAKE_REPLY_CLOSE);
    c = connect_fake(f);
    ck_assert_int_eq(rl_client_check(c, "svc", "u1", NULL, 4, &rep, 2000), 0);
    ck_assert_uint_eq(rep.check.remaining, 8);
    ck_assert_int_eq(rl_client_check(c, "svc", "u1", NULL, 1, &rep, 2000), -ECONNRESET);
    ck_assert_int_eq(rl_client_recv(c, &rep, 2000), -ECONNRESET);
    rl_client_destroy(c);
    fake_stop(f);
}
END_TEST

START_TEST(test_oversized_frame)
{
    struct fake *f = fake_start(FAKE_OVERSIZE);
    struct rl_client *c = connect_fake(f);
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_ping(c, &rep, 2000), -EPROTO);
    /* The stream has lost its framing for good. */
    ck_assert_int_eq(rl_client_recv(c, &rep, 100), -EPROTO);
    rl_client_destroy(c);
    fake_stop(f);
}
END_TEST

START_TEST(test_garbage_frame)
{
    struct fake *f = fake_start(FAKE_GARBAGE);
    struct rl_client *c = connect_fake(f);
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_ping(c, &rep, 2000), -EPROTO);
    rl_client_destroy(c);
    fake_stop(f);
}
END_TEST

START_TEST(test_max_frame)
{
    struct fake *f = fake_start(FAKE_MAX_FRAME);
    struct rl_client *c = connect_fake(f);
    struct rl_wire_reply rep;
    uint32_t i;

    /* The largest legal frame is a reply like any other. */
    ck_assert_int_eq(rl_client_ping(c, &rep, 5000), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_PING);
    ck_assert_uint_gt(rep.name.len, 65500);
    for (i = 0; i < rep.name.len; i++) {
        RL_CHECK_INT_EQ(rep.name.ptr[i], 'n');
    }
    rl_client_destroy(c);
    fake_stop(f);
}
END_TEST

START_TEST(test_drip)
{
    struct fake *f = fake_start(FAKE_DRIP);
    struct rl_client *c = connect_fake(f);
    struct rl_wire_reply rep;

    /* Every reply arrives one byte per segment: frames are put back together. */
    ck_assert_int_eq(rl_client_check(c, "svc", "abcdef", NULL, 1000000, &rep, 5000), 0);
    ck_assert_uint_eq(rep.check.limit, 1001000);
    ck_assert_uint_eq(rep.check.remaining, 2000000);
    ck_assert_uint_eq(rep.check.retry_after_ms, 6);
    ck_assert_int_eq(rl_client_ping(c, &rep, 5000), 0);
    ck_assert_uint_eq(rep.name.len, 4);
    rl_client_destroy(c);
    fake_stop(f);
}
END_TEST

START_TEST(test_ping_stats_clock)
{
    struct fake *f = fake_start(FAKE_NORMAL);
    struct rl_client *c = connect_fake(f);
    struct rl_wire_reply rep;

    ck_assert_int_eq(rl_client_ping(c, &rep, 2000), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_PING);
    ck_assert_uint_eq(rep.name.len, 4);
    ck_assert_int_eq(memcmp(rep.name.ptr, "fake", 4), 0);

    ck_assert_int_eq(rl_client_check(c, "svc", "u1", NULL, 1, &rep, 2000), 0);
    ck_assert_int_eq(rl_client_check(c, "svc", "u2", NULL, 1, &rep, 2000), 0);
    ck_assert_int_eq(rl_client_stat(&rep, "checks", -1), -1); /* not a STATS reply */
    ck_assert_int_eq(rl_client_stats(c, &rep, 2000), 0);
    ck_assert_uint_eq(rep.op, RL_WIRE_OP_STATS);
    ck_assert_uint_eq(rep.nstats, 3);
    ck_assert_int_eq(rl_client_stat(&rep, "checks", -1), 2);
    ck_assert_int_eq(rl_client_stat(&rep, "keys", -1), 42);
    ck_assert_int_eq(rl_client_stat(&rep, "negative", 0), -5);
    ck_assert_int_eq(rl_client_stat(&rep, "check", -1), -1);
    ck_assert_int_eq(rl_client_stat(&rep, "absent", 9), 9);

    ck_assert_int_eq(rl_client_clock(c, 1700000000123ull, 2000), 0);
    ck_assert_int_eq(rl_client_clock(c, 0, 2000), -EOPNOTSUPP);
    rl_client_destroy(c);
    fake_stop(f);
}
END_TEST

START_TEST(test_queue_raw_recv)
{
    /* [2, 9] by hand: PING with id 9. */
    static const char ping9[] = {0, 0, 0, 3, (char)0x92, 0x02, 0x09};
    struct fake *f = fake_start(FAKE_NORMAL);
    struct rl_client *c = connect_fake(f);
    struct rl_wire_req req;
    struct rl_wire_reply rep;
    int seen9 = 0, seen10 = 0, i;

    memset(&req, 0, sizeof(req));
    req.op = RL_WIRE_OP_CLOCK;
    req.id = 10;
    req.now_ms = 5;
    ck_assert_int_eq(rl_client_queue_raw(c, ping9, sizeof(ping9)), 0);
    ck_assert_int_eq(rl_client_queue(c, &req), 0);
    req.op = 99;
    ck_assert_int_eq(rl_client_queue(c, &req), -EINVAL);
    ck_assert_int_eq(rl_client_flush(c, 2000), 0);
    for (i = 0; i < 2; i++) {
        RL_CHECK_INT_EQ(rl_client_recv(c, &rep, 2000), 0);
        if (rep.id == 9) {
            RL_CHECK_UINT_EQ(rep.op, RL_WIRE_OP_PING);
            seen9++;
        } else {
            RL_CHECK_UINT_EQ(rep.id, 10);
            RL_CHECK_UINT_EQ(rep.op, RL_WIRE_OP_CLOCK);
            RL_CHECK_UINT_EQ(rep.now_ms, 5);
            seen10++;
        }
    }
    ck_assert_int_eq(seen9, 1);
    ck_assert_int_eq(seen10, 1);
    ck_assert_int_eq(rl_client_recv(c, &rep, 50), -ETIMEDOUT);
    ck_assert_int_ge(rl_client_fd(c), 0);
    rl_client_destroy(c);
    fake_stop(f);
}
END_TEST

static Suite *
client_suite(void)
{
    Suite *s = suite_create("client");
    TCase *tc = tcase_create("connect");

    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_connect_refused);
    tcase_add_test(tc, test_connect_timeout);
    tcase_add_test(tc, test_connect_names);
    suite_add_tcase(s, tc);

    tc = tcase_create("calls");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_check_one);
    tcase_add_test(tc, test_ping_stats_clock);
    tcase_add_test(tc, test_queue_raw_recv);
    suite_add_tcase(s, tc);

    tc = tcase_create("pipeline");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_check_many_small);
    tcase_add_test(tc, test_check_many_10000);
    tcase_add_test(tc, test_check_many_no_deadlock);
    suite_add_tcase(s, tc);

    tc = tcase_create("faults");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_recv_timeout);
    tcase_add_test(tc, test_server_close);
    tcase_add_test(tc, test_oversized_frame);
    tcase_add_test(tc, test_garbage_frame);
    tcase_add_test(tc, test_max_frame);
    tcase_add_test(tc, test_drip);
    suite_add_tcase(s, tc);
    return s;
}

RL_TEST_MAIN(client_suite)
