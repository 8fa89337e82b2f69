/*
 * check_moving: what a real rl-router does with ERROR MOVING (docs/PROTOCOL.md, "ERROR
 * MOVING"; docs/OPERATIONS.md, "Planned moves"), against two fake nodes in this process
 * (threads speaking the wire, static membership n1 and n2) whose answers the test scripts:
 *   - MOVING naming the other member: the CHECK is sent there at once and its answer relayed
 *     (moved and move_redirected count it, no policy answer); two nodes naming each other:
 *     twice at once, then by backoff to the table's owner;
 *   - MOVING "" (and MOVING naming no member) a few times per key: the CHECK is held and sent
 *     again to the owner until it is answered (held_for_move, move_resent), never FAIL_OPEN;
 *   - MOVING for ever: the failure policy answers once handoff_wait passed (move_expired),
 *     never before, and the node is not counted down;
 *   - an inline-limited CHECK (re-encoded by the router, not relayed) reaches the new owner
 *     with its limit intact, and as it was sent: without the tenant element a node from
 *     before it was not sent;
 *   - a client that leaves while its CHECKs are held: the router stays up and lets them go;
 *   - a node that stops reading (a network gone, as far as the router can tell): once it has
 *     answered nothing for the stall bound, the router resets the connection, so the requests
 *     it still held for the node are dropped, not delivered when the node reads again (where
 *     they would be decided long after the failure policy answered them), and connects
 *     again;
 *   - a node whose connects never complete (its SYNs dropped): each attempt is given up after
 *     the same bound, and the router keeps trying and answering by policy meanwhile;
 *   - with ZooKeeper, a node that leaves the membership while it owes answers: the router
 *     retires its connections with a reset too, and sends the requests to the new owner.
 * Durations are never asserted: what the router decided is (its counters, the answers).
 * Not for the node's side of a move (check_moving_e2e, the chaos scenarios).
 */
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <zookeeper/zookeeper.h>

#include "buf.h"
#include "harness.h"
#include "reqclient.h"
#include "rltest.h"
#include "ruleset.h"
#include "wire.h"

#define T_TIMEOUT 10000
#define USERS 60
#define FAKE_CONNS 16
#define FAKE_KEYS 4096

enum fake_mode {
    FAKE_ALLOW,        /* ALLOWED, remaining 42 */
    FAKE_MOVING_TO,    /* MOVING naming fake.owner, every time */
    FAKE_MOVING_FIRST, /* MOVING naming fake.owner the first `times` CHECKs of each user */
};

struct fake {
    const char *name;
    int port;
    int lfd;
    pthread_t th;
    atomic_bool stop;
    atomic_int mode;
    const char *owner;
    int times;
    atomic_int checks;    /* CHECKs received */
    atomic_int moving;    /* MOVING answered */
    atomic_int inline_ok; /* CHECKs with the test's inline limit, intact */
    atomic_int adjusts;   /* ADJUSTs of delta 5, received as ADJUST */
    atomic_int tenants;   /* requests of 8 elements (a tenant), refused when pre_tenant */
    bool pre_tenant;      /* refuses them as a node from before the tenant element does */
    atomic_bool deaf;     /* reads no connection (accepts them), as a node cut off */
    atomic_bool hang_up;  /* closes the connection of the next CHECK, unanswered (once) */
    atomic_int resets;    /* connections the router reset (read: ECONNRESET) */
    /* when it stops being deaf: the bytes its connections held (FIONREAD) then, and those it
     * read since; more read than held: the router's kernel went on sending after that */
    atomic_long held_at_wake, read_since_wake;
    bool was_deaf;
    int rcvbuf; /* the accepted connections' SO_RCVBUF; 0: the kernel's */
    char users[FAKE_KEYS][32];
    int seen[FAKE_KEYS];
    int nusers;
};

static struct fake f1 = {.name = "n1"}, f2 = {.name = "n2"};
static struct rl_harness_server router;
static char conf_path[PATH_MAX];
static int router_port;

/* How many CHECKs of user this fake saw before this one (it counts this one). */
static int
fake_seen(struct fake *f, const struct rl_wire_str *user)
{
    for (int i = 0; i < f->nusers; i++) {
        if (strlen(f->users[i]) == user->len && memcmp(f->users[i], user->ptr, user->len) == 0) {
            return f->seen[i]++;
        }
    }
    if (f->nusers < FAKE_KEYS && user->len < sizeof(f->users[0])) {
        memcpy(f->users[f->nusers], user->ptr, user->len);
        f->users[f->nusers][user->len] = '\0';
        f->seen[f->nusers++] = 1;
    }
    return 0;
}

static void
fake_answer(struct fake *f, const struct rl_wire_req *req, struct rl_buf *out)
{
    struct rl_wire_check_reply rep = {req->id, RL_WIRE_ALLOWED, 100, 42, 1000, 0};
    int mode = atomic_load(&f->mode);
    int before;

    atomic_fetch_add(&f->checks, 1);
    if (req->op == RL_WIRE_OP_ADJUST && req->delta == 5) {
        atomic_fetch_add(&f->adjusts, 1);
    }
    if (req->limit.set && req->limit.algo == RL_ALGO_GCRA && req->limit.limit == 7 &&
        req->limit.window_ms == 60000 && req->cost == 2) {
        atomic_fetch_add(&f->inline_ok, 1);
    }
    before = fake_seen(f, &req->user);
    if (mode == FAKE_MOVING_TO || (mode == FAKE_MOVING_FIRST && before < f->times)) {
        atomic_fetch_add(&f->moving, 1);
        ck_assert_int_eq(rl_wire_put_moving(out, req->id, "shard moving", f->owner), 0);
        return;
    }
    ck_assert_int_eq(req->op == RL_WIRE_OP_ADJUST ? rl_wire_put_adjust_reply(out, &rep)
                                                  : rl_wire_put_check_reply(out, &rep),
                     0);
}

/* The fake node: accepts the router's connections, answers CHECKs as its mode says and
 * nothing else (HELLO, the probes: a node that predates them). */
static void *
fake_run(void *arg)
{
    struct fake *f = arg;
    struct pollfd pf[FAKE_CONNS + 1];
    struct rl_buf in[FAKE_CONNS + 1];
    struct rl_wire_decoder dec;
    int n = 1;

    ck_assert_int_eq(rl_wire_decoder_init(&dec), 0);
    pf[0].fd = f->lfd;
    pf[0].events = POLLIN;
    for (int i = 0; i <= FAKE_CONNS; i++) {
        rl_buf_init(&in[i]);
    }
    while (!atomic_load(&f->stop)) {
        if (f->was_deaf && !atomic_load(&f->deaf)) {
            long held = 0;

            for (int i = 1; i < n; i++) {
                int q = 0;

                held += ioctl(pf[i].fd, FIONREAD, &q) == 0 ? q : 0;
            }
            atomic_store(&f->held_at_wake, held);
            atomic_store(&f->read_since_wake, 0);
        }
        f->was_deaf = atomic_load(&f->deaf);
        if (poll(pf, f->was_deaf ? 1 : (nfds_t)n, 50) <= 0) {
            continue;
        }
        if ((pf[0].revents & POLLIN) && n <= FAKE_CONNS) {
            int fd = accept(f->lfd, NULL, NULL);

            if (fd >= 0) {
                pf[n].fd = fd;
                pf[n].events = POLLIN;
                pf[n].revents = 0;
                rl_buf_reset(&in[n]);
                n++;
            }
        }
        for (int i = 1; i < n; i++) {
            char buf[65536];
            ssize_t got;
            struct rl_buf out;
            size_t plen;
            bool hung_up = false;

            if (f->was_deaf || atomic_load(&f->deaf) ||
                !(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) {
                continue;
            }
            got = read(pf[i].fd, buf, sizeof(buf));
            atomic_fetch_add(&f->read_since_wake, got > 0 ? got : 0);
            for (size_t at = 0; got > 0 && atomic_load(&f->hang_up) && !hung_up;) {
                /* a CHECK among what was read (whole frames from its start, as the router
                 * writes them after the warm-up): the connection is closed unanswered */
                if (rl_wire_frame(buf + at, (size_t)got - at, &plen) != 1) {
                    break;
                }
                hung_up = plen > 2 &&
                          (unsigned char)buf[at + RL_WIRE_HDR_LEN + 1] == RL_WIRE_OP_CHECK &&
                          atomic_exchange(&f->hang_up, false);
                at += RL_WIRE_HDR_LEN + plen;
            }
            if (got <= 0 || hung_up) {
                struct rl_buf t = in[i];

                if (got < 0 && errno == ECONNRESET) {
                    atomic_fetch_add(&f->resets, 1);
                }
                close(pf[i].fd);
                pf[i] = pf[n - 1];
                in[i] = in[n - 1];
                in[n - 1] = t;
                rl_buf_reset(&in[n - 1]);
                n--;
                i--;
                continue;
            }
            ck_assert_int_eq(rl_buf_append(&in[i], buf, (size_t)got), 0);
            rl_buf_init(&out);
            while (rl_wire_frame(in[i].data + in[i].pos, in[i].len - in[i].pos, &plen) == 1) {
                struct rl_wire_req req;
                struct rl_wire_fault fault;

                const unsigned char *q =
                    (const unsigned char *)in[i].data + in[i].pos + RL_WIRE_HDR_LEN;

                if (f->pre_tenant && plen > 2 && q[1] == RL_WIRE_OP_HELLO) {
                    /* answered, so that the probe's answer is not taken for HELLO's */
                    ck_assert_int_eq(rl_wire_put_hello_reply(&out, 0, f->name), 0);
                    in[i].pos += RL_WIRE_HDR_LEN + plen;
                    continue;
                }
                if (plen > 3 && q[0] == 0x98 && q[1] == RL_WIRE_OP_CHECK) {
                    /* 8 elements: a tenant, or the router's probe for it (id 0) */
                    atomic_fetch_add(&f->tenants, 1);
                    if (f->pre_tenant) {
                        uint32_t id = q[2] < 0x80 ? q[2] : 0;
                        int w = q[2] == 0xcc ? 1 : q[2] == 0xcd ? 2 : q[2] == 0xce ? 4 : 0;

                        for (int k = 0; k < w && 3 + (size_t)k < plen; k++) {
                            id = id << 8 | q[3 + k];
                        } /* the test's ids fit */

                        ck_assert_int_eq(rl_wire_put_error(&out, id, RL_WIRE_ERR_BAD_FIELD,
                                                           "CHECK takes 6..7 elements"),
                                         0);
                        in[i].pos += RL_WIRE_HDR_LEN + plen;
                        continue;
                    }
                }
                if (rl_wire_decode_req(&dec, in[i].data + in[i].pos + RL_WIRE_HDR_LEN, plen, &req,
                                       &fault) == 0 &&
                    (req.op == RL_WIRE_OP_CHECK || req.op == RL_WIRE_OP_ADJUST)) {
                    fake_answer(f, &req, &out);
                }
                in[i].pos += RL_WIRE_HDR_LEN + plen;
            }
            for (size_t w = 0; w < out.len;) {
                /* a connection the router reset takes no answer: its read says so next */
                ssize_t k = send(pf[i].fd, out.data + w, out.len - w, MSG_NOSIGNAL);

                if (k < 0 && (errno == ECONNRESET || errno == EPIPE)) {
                    atomic_fetch_add(&f->resets, errno == ECONNRESET); /* else the read's */
                    break;
                }
                ck_assert_int_gt(k, 0);
                w += (size_t)k;
            }
            rl_buf_deinit(&out);
        }
    }
    for (int i = 1; i < n; i++) {
        close(pf[i].fd);
    }
    for (int i = 0; i <= FAKE_CONNS; i++) {
        rl_buf_deinit(&in[i]);
    }
    rl_wire_decoder_deinit(&dec);
    return NULL;
}

static void
fake_start(struct fake *f, int mode, const char *owner, int times)
{
    struct sockaddr_in a = {0};
    int one = 1;

    f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(f->lfd, 0);
    setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    f->port = rl_harness_free_port();
    a.sin_port = htons((uint16_t)f->port);
    if (f->rcvbuf > 0) { /* inherited by what it accepts */
        ck_assert_int_eq(setsockopt(f->lfd, SOL_SOCKET, SO_RCVBUF, &f->rcvbuf, sizeof(f->rcvbuf)),
                         0);
    }
    ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(f->lfd, 16), 0);
    atomic_store(&f->stop, false);
    atomic_store(&f->mode, mode);
    atomic_store(&f->checks, 0);
    atomic_store(&f->moving, 0);
    atomic_store(&f->inline_ok, 0);
    atomic_store(&f->adjusts, 0);
    atomic_store(&f->tenants, 0);
    atomic_store(&f->deaf, false);
    atomic_store(&f->resets, 0);
    f->was_deaf = false;
    f->owner = owner;
    f->times = times;
    f->nusers = 0;
    ck_assert_int_eq(pthread_create(&f->th, NULL, fake_run, f), 0);
}

static void
fake_stop(struct fake *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->th, NULL);
    close(f->lfd);
}

/* The router on router_port (taken by the caller) with the cluster.conf conf. */
static void
router_launch(const char *conf)
{
    ck_assert_int_eq(
        rl_harness_tmppath(conf_path, sizeof(conf_path), "moving-%d.conf", router_port), 0);
    ck_assert_int_eq(rl_harness_write_file(conf_path, "%s", conf), 0);
    ck_assert_int_eq(rl_harness_router_start(&router, conf_path, router_port), 0);
}

/* The router in front of f1 and f2, holding a MOVING at most handoff_wait; router_keys:
 * more lines of its [router] section. */
static void
router_start_keys(const char *handoff_wait, const char *failure, const char *deadline,
                  const char *router_keys)
{
    char conf[1024];

    router_port = rl_harness_free_port();
    snprintf(conf, sizeof(conf),
             "[cluster]\nname = mv\nshards = 64\nhandoff_wait = %s\n"
             "[router]\nlisten = 127.0.0.1:%d\ndeadline = %s\n%s"
             "[node n1]\nlisten = 127.0.0.1:%d\n"
             "[node n2]\nlisten = 127.0.0.1:%d\n"
             "[service shop]\nlimit = fixed_window 1000 per 1h\nfailure = %s\n",
             handoff_wait, router_port, deadline, router_keys, f1.port, f2.port, failure);
    router_launch(conf);
}

static void
router_start_deadline(const char *handoff_wait, const char *failure, const char *deadline)
{
    router_start_keys(handoff_wait, failure, deadline, "");
}

static void
router_start(const char *handoff_wait, const char *failure)
{
    router_start_deadline(handoff_wait, failure, "5s");
}

static void
stop_all(void)
{
    ck_assert_int_eq(rl_harness_server_stop(&router, SIGTERM, T_TIMEOUT), 0);
    fake_stop(&f1);
    fake_stop(&f2);
}

/* USERS CHECKs of distinct users through the router, pipelined; the codes by value. */
static void
check_users(const char *prefix, int *codes, uint32_t cost)
{
    struct rl_client *c = NULL;
    struct rl_wire_req reqs[USERS];
    struct rl_wire_check_reply reps[USERS];
    char users[USERS][32];

    memset(codes, 0, sizeof(int) * (RL_CLIENT_CODE_ERROR + 1));
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT), 0);
    for (int i = 0; i < USERS; i++) {
        snprintf(users[i], sizeof(users[i]), "%s-%d", prefix, i);
        rl_test_check_req(&reqs[i], "shop", users[i], cost);
    }
    ck_assert_int_eq(rl_client_check_many(c, reqs, USERS, reps, T_TIMEOUT), 0);
    for (int i = 0; i < USERS; i++) {
        ck_assert_uint_le(reps[i].code, RL_CLIENT_CODE_ERROR);
        codes[reps[i].code]++;
    }
    rl_client_destroy(c);
}

START_TEST(test_moving_named)
{
    int codes[RL_CLIENT_CODE_ERROR + 1];

    fake_start(&f1, FAKE_MOVING_TO, "n2", 0);
    fake_start(&f2, FAKE_ALLOW, "", 0);
    router_start("2s", "closed");
    check_users("named", codes, 1);
    /* every answer is n2's: those sent to n1 first went on to n2 at once */
    ck_assert_int_eq(codes[RL_WIRE_ALLOWED], USERS);
    ck_assert_int_gt(atomic_load(&f1.moving), 0);
    ck_assert_int_eq(atomic_load(&f2.checks), USERS);
    ck_assert_int_eq(rl_test_stat(router_port, "moved"), atomic_load(&f1.moving));
    ck_assert_int_eq(rl_test_stat(router_port, "move_redirected"), atomic_load(&f1.moving));
    ck_assert_int_eq(rl_test_stat(router_port, "held_for_move"), 0);
    ck_assert_int_eq(rl_test_stat(router_port, "fail_closed"), 0);
    ck_assert_int_eq(rl_test_stat(router_port, "owner_down"), 0);
    stop_all();
}
END_TEST

/* MOVING "" three times per user, then the answer: each is held and sent again. The same
 * with an owner no member has: taken as "". */
static void
held_run(const char *owner)
{
    int codes[RL_CLIENT_CODE_ERROR + 1];

    fake_start(&f1, FAKE_MOVING_FIRST, owner, 3);
    fake_start(&f2, FAKE_MOVING_FIRST, owner, 3);
    router_start("1m", "open");
    check_users("held", codes, 1);
    ck_assert_int_eq(codes[RL_WIRE_ALLOWED], USERS);
    ck_assert_int_eq(atomic_load(&f1.moving) + atomic_load(&f2.moving), 3 * USERS);
    ck_assert_int_eq(atomic_load(&f1.checks) + atomic_load(&f2.checks), 4 * USERS);
    ck_assert_int_eq(rl_test_stat(router_port, "moved"), 3 * USERS);
    ck_assert_int_eq(rl_test_stat(router_port, "held_for_move"), 3 * USERS);
    ck_assert_int_eq(rl_test_stat(router_port, "move_resent"), 3 * USERS);
    ck_assert_int_eq(rl_test_stat(router_port, "move_redirected"), 0);
    ck_assert_int_eq(rl_test_stat(router_port, "fail_open"), 0);
    ck_assert_int_eq(rl_test_stat(router_port, "move_expired"), 0);
    ck_assert_int_eq(rl_test_stat(router_port, "allowed"), USERS);
    stop_all();
}

START_TEST(test_moving_held)
{
    held_run("");
}
END_TEST

START_TEST(test_moving_unknown_owner)
{
    held_run("nobody");
}
END_TEST

/* Two nodes naming each other (the new owner names the old one until the records are in,
 * the old one the new one once it exported them): sent at once twice, then by backoff to
 * the table's owner, which answers once its three MOVINGs are spent: per user 4 MOVING
 * (3 from the owner, 1 from the other), 2 redirects, 2 holds, and the answer. */
START_TEST(test_moving_ping_pong)
{
    int codes[RL_CLIENT_CODE_ERROR + 1];

    fake_start(&f1, FAKE_MOVING_FIRST, "n2", 3);
    fake_start(&f2, FAKE_MOVING_FIRST, "n1", 3);
    router_start("1m", "open");
    check_users("pong", codes, 1);
    ck_assert_int_eq(codes[RL_WIRE_ALLOWED], USERS);
    ck_assert_int_eq(rl_test_stat(router_port, "moved"), 4 * USERS);
    ck_assert_int_eq(rl_test_stat(router_port, "move_redirected"), 2 * USERS);
    ck_assert_int_eq(rl_test_stat(router_port, "held_for_move"), 2 * USERS);
    ck_assert_int_eq(rl_test_stat(router_port, "move_resent"), 2 * USERS);
    ck_assert_int_eq(rl_test_stat(router_port, "fail_open"), 0);
    stop_all();
}
END_TEST

/* A move that never ends: the policy answers past handoff_wait, not before (every CHECK was
 * sent more than once), and nothing counts the node as down. */
START_TEST(test_moving_expires)
{
    int codes[RL_CLIENT_CODE_ERROR + 1];

    fake_start(&f1, FAKE_MOVING_TO, "", 0);
    fake_start(&f2, FAKE_MOVING_TO, "", 0);
    router_start("300ms", "closed");
    check_users("exp", codes, 1);
    ck_assert_int_eq(codes[RL_WIRE_FAIL_CLOSED], USERS);
    ck_assert_int_eq(rl_test_stat(router_port, "move_expired"), USERS);
    ck_assert_int_eq(rl_test_stat(router_port, "fail_closed"), USERS);
    /* 300 ms of backoffs of 16 ms at most: held again and again before the policy */
    ck_assert_int_ge(rl_test_stat(router_port, "held_for_move"), 2 * USERS);
    ck_assert_int_eq(rl_test_stat(router_port, "moved"),
                     atomic_load(&f1.moving) + atomic_load(&f2.moving));
    ck_assert_int_eq(rl_test_stat(router_port, "owner_down"), 0);
    ck_assert_int_eq(rl_test_stat(router_port, "deadline_expired"), 0);
    stop_all();
}
END_TEST

/* An inline-limited CHECK is re-encoded by the router (not relayed): what it sends again is
 * the same request, limit and cost included, and the same bytes: no tenant element to a
 * node from before it (before, the copy kept was encoded again with the tenant the first
 * send had left out, and such a node refused the resend). */
START_TEST(test_moving_inline)
{
    struct rl_wire_limit inl = {.set = true, .algo = RL_ALGO_GCRA, .limit = 7, .window_ms = 60000};
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;
    char user[32];

    f1.pre_tenant = f2.pre_tenant = true;
    fake_start(&f1, FAKE_MOVING_TO, "n2", 0);
    fake_start(&f2, FAKE_ALLOW, "", 0);
    router_start("2s", "closed");
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT), 0);
    /* each worker's connections asked each fake whether it takes tenants, and were told
     * not (a CHECK sent before that answer would carry one: the test waits it out) */
    for (int k = 0, last = -1, still = 0; k < 1000 && still < 30; k++) {
        int now = atomic_load(&f1.tenants) + 1000 * atomic_load(&f2.tenants);

        still = now == last && atomic_load(&f1.tenants) > 0 && atomic_load(&f2.tenants) > 0
                    ? still + 1
                    : 0; /* every connection's probe answered: none came for 300 ms */
        last = now;
        usleep(10000);
    }
    atomic_store(&f1.tenants, 0);
    atomic_store(&f2.tenants, 0);
    for (int i = 0; i < USERS; i++) {
        snprintf(user, sizeof(user), "inl-%d", i);
        ck_assert_int_eq(rl_client_check_limit(c, "free", user, NULL, 2, &inl, &rep, T_TIMEOUT), 0);
        ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
        ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    }
    rl_client_destroy(c);
    ck_assert_int_gt(atomic_load(&f1.moving), 0);
    ck_assert_int_eq(atomic_load(&f2.inline_ok), USERS);
    /* sent again as it went: without the tenant element, which these fakes (nodes from
     * before it) refuse */
    ck_assert_int_eq(atomic_load(&f1.tenants), 0);
    ck_assert_int_eq(atomic_load(&f2.tenants), 0);
    ck_assert_int_eq(rl_test_stat(router_port, "move_redirected"), atomic_load(&f1.moving));
    stop_all();
}
END_TEST

/*
 * Requests do not wait for room (node_window) at a node from before the tenant element: what
 * waits is sent later as it was kept, its tenant element included, which such a node refuses
 * (rl_upstream_send_bytes leaves the element out for it). 400 pipelined inline CHECKs through
 * a window of 16: every one decided, none waited.
 */
START_TEST(test_no_wait_for_a_pre_tenant_node)
{
    struct rl_wire_limit inl = {.set = true, .algo = RL_ALGO_GCRA, .limit = 7, .window_ms = 60000};
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;
    struct rl_wire_req req;
    static char users[400][32];
    char conf[1024];
    int errors = 0, allowed = 0;

    f1.pre_tenant = f2.pre_tenant = true;
    fake_start(&f1, FAKE_ALLOW, "", 0);
    fake_start(&f2, FAKE_ALLOW, "", 0);
    router_port = rl_harness_free_port();
    snprintf(conf, sizeof(conf),
             "[cluster]\nname = mv\nshards = 64\n"
             "[router]\nlisten = 127.0.0.1:%d\ndeadline = 5s\nnode_window = 16\n"
             "[node n1]\nlisten = 127.0.0.1:%d\n"
             "[node n2]\nlisten = 127.0.0.1:%d\n"
             "[service shop]\nlimit = fixed_window 1000 per 1h\n",
             router_port, f1.port, f2.port);
    router_launch(conf);
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT), 0);
    /* the tenant probes answered: the router knows both nodes are from before it */
    for (int k = 0, last = -1, still = 0; k < 1000 && still < 30; k++) {
        int now = atomic_load(&f1.tenants) + 1000 * atomic_load(&f2.tenants);

        still = now == last && atomic_load(&f1.tenants) > 0 && atomic_load(&f2.tenants) > 0
                    ? still + 1
                    : 0;
        last = now;
        usleep(10000);
    }
    for (int i = 0; i < 400; i++) {
        snprintf(users[i], sizeof(users[i]), "w-%d", i);
        rl_test_check_req(&req, "free", users[i], 2);
        req.id = (uint32_t)i + 1;
        req.limit = inl;
        ck_assert_int_eq(rl_client_queue(c, &req), 0);
    }
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    for (int i = 0; i < 400; i++) {
        ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
        errors += rep.op == RL_WIRE_OP_ERROR;
        allowed += rep.op == RL_WIRE_OP_CHECK && rep.check.code == RL_WIRE_ALLOWED;
    }
    ck_assert_int_eq(errors, 0);
    ck_assert_int_eq(allowed, 400);
    ck_assert_int_eq(rl_test_stat(router_port, "node_waits"), 0);
    rl_client_destroy(c);
    stop_all();
}
END_TEST

/* An ADJUST answered MOVING is sent on as an ADJUST (its op, its delta), and answered under
 * op 9: a resend never turns a settlement into a CHECK. */
START_TEST(test_moving_adjust)
{
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;
    char user[32];

    fake_start(&f1, FAKE_MOVING_TO, "n2", 0);
    fake_start(&f2, FAKE_MOVING_FIRST, "", 1);
    router_start("1m", "closed");
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT), 0);
    for (int i = 0; i < USERS; i++) {
        snprintf(user, sizeof(user), "adj-%d", i);
        ck_assert_int_eq(
            rl_client_settle(c, RL_WIRE_OP_ADJUST, "shop", user, NULL, 5, NULL, &rep, T_TIMEOUT),
            0);
        ck_assert_uint_eq(rep.op, RL_WIRE_OP_ADJUST);
        ck_assert_uint_eq(rep.check.code, RL_WIRE_ALLOWED);
    }
    rl_client_destroy(c);
    /* every ADJUST reached f2 as one, twice (its first answered MOVING ""), none as a CHECK */
    ck_assert_int_eq(atomic_load(&f2.adjusts), 2 * USERS);
    ck_assert_int_eq(atomic_load(&f2.checks), 2 * USERS);
    ck_assert_int_gt(rl_test_stat(router_port, "move_resent"), 0);
    stop_all();
}
END_TEST

/* The client goes while its CHECKs are held: they are let go at handoff_wait, to no one. */
START_TEST(test_moving_client_leaves)
{
    struct rl_client *c = NULL;
    struct rl_wire_req req;
    struct rl_wire_reply rep;

    fake_start(&f1, FAKE_MOVING_TO, "", 0);
    fake_start(&f2, FAKE_MOVING_TO, "", 0);
    router_start("500ms", "open");
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT), 0);
    memset(&req, 0, sizeof(req));
    req.op = RL_WIRE_OP_CHECK;
    req.service.ptr = "shop";
    req.service.len = 4;
    req.cost = 1;
    for (int i = 0; i < USERS; i++) {
        char user[32];

        snprintf(user, sizeof(user), "gone-%d", i);
        req.id = (uint32_t)i + 1;
        req.user.ptr = user;
        req.user.len = strlen(user);
        ck_assert_int_eq(rl_client_queue(c, &req), 0);
    }
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    for (int i = 0; i < 200 && rl_test_stat(router_port, "held_for_move") < USERS; i++) {
        usleep(10 * 1000);
    }
    ck_assert_int_ge(rl_test_stat(router_port, "held_for_move"), USERS);
    rl_client_destroy(c);
    for (int i = 0; i < 500 && rl_test_stat(router_port, "move_expired") < USERS; i++) {
        usleep(10 * 1000);
    }
    ck_assert_int_eq(rl_test_stat(router_port, "move_expired"), USERS);
    /* still serving */
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_ping(c, &rep, T_TIMEOUT), 0);
    rl_client_destroy(c);
    stop_all();
}
END_TEST

/* The deaf fakes a and b (b may be NULL) read again: once one has seen the router's reset,
 * they read what their kernels held then, and whatever else comes for 300 ms more. */
static void
fakes_wake(struct fake *a, struct fake *b)
{
    struct fake *f[2] = {a, b};
    int n = b != NULL ? 2 : 1;
    bool reset = false, drained = false;

    for (int i = 0; i < n; i++) {
        atomic_store(&f[i]->deaf, false);
    }
    for (int k = 0; k < 500 && !(reset && drained); k++) {
        usleep(10 * 1000);
        reset = false;
        drained = true;
        for (int i = 0; i < n; i++) {
            reset |= atomic_load(&f[i]->resets) > 0;
            drained &= atomic_load(&f[i]->read_since_wake) >= atomic_load(&f[i]->held_at_wake);
        }
    }
    ck_assert_msg(reset, "no fake saw the router's reset");
    usleep(300 * 1000);
}

/*
 * First, connections that owe nothing stay up however long they are idle (the fakes never
 * answer the router's HELLO and probes: those are owed nothing). Then both fakes stop reading
 * (with small receive buffers, so most of what the router sends them stays in the router's
 * kernel, as it does when a node's network is gone): the CHECKs sent meanwhile get the
 * failure policy at the deadline (1 s); at the stall bound (the deadline plus 1 s) the router
 * resets each connection with answers owed. When the fakes read again they find the reset
 * after at most their receive buffer's CHECKs, not the STALLED CHECKs the router forwarded
 * (before, the router kept the connection and the fakes read them all, to decide them
 * seconds late), and the router, connected again, is served.
 */
#define STALLED 4000
START_TEST(test_stall_reset)
{
    struct rl_wire_req *reqs = calloc(STALLED, sizeof(*reqs));
    struct rl_wire_check_reply *reps = calloc(STALLED, sizeof(*reps));
    char(*users)[32] = calloc(STALLED, sizeof(*users));
    int codes[RL_CLIENT_CODE_ERROR + 1], before, read_after;
    struct rl_client *c = NULL;
    char log[65536];
    bool reset = false;

    ck_assert_ptr_nonnull(reqs);
    ck_assert_ptr_nonnull(reps);
    ck_assert_ptr_nonnull(users);
    f1.rcvbuf = f2.rcvbuf = 4096;
    fake_start(&f1, FAKE_ALLOW, "", 0);
    fake_start(&f2, FAKE_ALLOW, "", 0);
    router_start_deadline("1s", "open", "1s");
    check_users("warm", codes, 1);
    ck_assert_int_eq(codes[RL_WIRE_ALLOWED], USERS);
    usleep(3500 * 1000); /* past the stall bound and two checks: idle, owing nothing */
    ck_assert_int_ge(rl_harness_read_file(router.log_path, log, sizeof(log)), 0);
    ck_assert_msg(strstr(log, "connection reset") == NULL, "an idle connection was reset");
    ck_assert_int_eq(atomic_load(&f1.resets) + atomic_load(&f2.resets), 0);
    before = atomic_load(&f1.checks) + atomic_load(&f2.checks);
    atomic_store(&f1.deaf, true);
    atomic_store(&f2.deaf, true);
    for (int i = 0; i < STALLED; i++) {
        snprintf(users[i], sizeof(users[i]), "stalled-user-%d", i);
        rl_test_check_req(&reqs[i], "shop", users[i], 1);
    }
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT), 0);
    ck_assert_int_eq(rl_client_check_many(c, reqs, STALLED, reps, T_TIMEOUT), 0);
    for (int i = 0; i < STALLED; i++) {
        ck_assert_uint_eq(reps[i].code, RL_WIRE_FAIL_OPEN);
    }
    rl_client_destroy(c);
    ck_assert_int_ge(rl_test_stat(router_port, "forwarded"), USERS + STALLED / 2);
    /* the router says when it resets (its log), a second or so after the requests waited */
    for (int k = 0; k < 1000 && !reset; k++) {
        usleep(10 * 1000);
        reset = rl_harness_read_file(router.log_path, log, sizeof(log)) >= 0 &&
                strstr(log, "connection reset (what had not reached the node is dropped") != NULL;
    }
    ck_assert_msg(reset, "the router never reset the connections of nodes that stopped reading");
    fakes_wake(&f1, &f2);
    read_after = atomic_load(&f1.checks) + atomic_load(&f2.checks) - before;
    /* what was in the fakes' buffers at most; the rest was dropped with the reset */
    ck_assert_msg(read_after < STALLED / 2, "the nodes read %d of the %d CHECKs given up on",
                  read_after, STALLED);
    /* connected again: answered by the nodes, not the policy */
    check_users("after", codes, 1);
    ck_assert_int_eq(codes[RL_WIRE_ALLOWED], USERS);
    f1.rcvbuf = f2.rcvbuf = 0;
    free(reqs);
    free(reps);
    free(users);
    stop_all();
}
END_TEST

/* Node n1's port takes no connection: a listener with a backlog of 0, already full, so the
 * kernel drops the router's SYNs (a host gone); n2 is a fake node. Each connect to n1 is
 * given up after the stall bound and tried again; n1's users get the policy at once, n2's
 * are served. */
START_TEST(test_connect_given_up)
{
    struct sockaddr_in a = {0};
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), fill[2];
    int codes[RL_CLIENT_CODE_ERROR + 1], port = rl_harness_free_port();
    char log[65536];
    bool given_up = false;

    ck_assert_int_ge(lfd, 0);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    ck_assert_int_eq(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(lfd, 0), 0);
    for (int i = 0; i < 2; i++) { /* the first fills the queue; the second's SYN is dropped */
        fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fill[i], 0);
        (void)connect(fill[i], (struct sockaddr *)&a, sizeof(a));
    }
    f1.lfd = lfd;
    f1.port = port;
    fake_start(&f2, FAKE_ALLOW, "", 0);
    router_start_deadline("1s", "closed", "200ms");
    for (int k = 0; k < 1000 && !given_up; k++) {
        usleep(10 * 1000);
        given_up = rl_harness_read_file(router.log_path, log, sizeof(log)) >= 0 &&
                   strstr(log, "connect not completed in") != NULL;
    }
    ck_assert_msg(given_up, "the router never gave up a connect to a node that takes none");
    check_users("gone", codes, 1);
    ck_assert_int_eq(codes[RL_WIRE_ALLOWED] + codes[RL_WIRE_FAIL_CLOSED], USERS);
    ck_assert_int_gt(codes[RL_WIRE_ALLOWED], 0);
    ck_assert_int_gt(codes[RL_WIRE_FAIL_CLOSED], 0);
    ck_assert_int_eq(rl_test_stat(router_port, "fail_closed"), codes[RL_WIRE_FAIL_CLOSED]);
    ck_assert_int_eq(rl_harness_server_stop(&router, SIGTERM, T_TIMEOUT), 0);
    fake_stop(&f2);
    close(fill[0]);
    close(fill[1]);
    close(lfd);
}
END_TEST

static void
zk_quiet(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh;
    (void)type;
    (void)state;
    (void)path;
    (void)ctx;
}

/* The member znode of a fake node, as a node writes it (ephemeral, its address). */
static void
zk_member(zhandle_t *zh, const char *name, int port)
{
    char path[128], addr[64];

    snprintf(path, sizeof(path), "/ratelimiter/mv/nodes/%s", name);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    ck_assert_int_eq(
        zoo_create(zh, path, addr, (int)strlen(addr), &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, NULL, 0),
        ZOK);
}

/*
 * ZooKeeper for the fakes: started, the cluster's directories made, f1 and f2 started and
 * registered as n1 and n2, and the router launched with handoff_wait and router_keys (more
 * [router] lines), both members in its table. Returns the test's ZooKeeper handle.
 */
static zhandle_t *
zk_pair_up(struct rl_harness_zk *zk, const char *handoff_wait, const char *router_keys)
{
    const char *dirs[] = {"/ratelimiter", "/ratelimiter/mv", "/ratelimiter/mv/nodes"};
    char conf[1024];
    zhandle_t *zh;

    memset(zk, 0, sizeof(*zk));
    ck_assert_int_eq(rl_harness_zk_start(zk), 0);
    zh = zookeeper_init(zk->connect, zk_quiet, 10000, NULL, NULL, 0);
    ck_assert_ptr_nonnull(zh);
    for (int i = 0; i < 200 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++) {
        usleep(50 * 1000);
    }
    ck_assert_int_eq(zoo_state(zh), ZOO_CONNECTED_STATE);
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        int rc = zoo_create(zh, dirs[i], "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);

        ck_assert_msg(rc == ZOK || rc == ZNODEEXISTS, "create %s: %d", dirs[i], rc);
    }
    fake_start(&f1, FAKE_ALLOW, "", 0);
    fake_start(&f2, FAKE_ALLOW, "", 0);
    zk_member(zh, "n1", f1.port);
    zk_member(zh, "n2", f2.port);
    router_port = rl_harness_free_port();
    snprintf(conf, sizeof(conf),
             "[cluster]\nname = mv\nshards = 64\nzookeeper = %s\nsession_timeout = 2s\n"
             "handoff_wait = %s\n"
             "[router]\nlisten = 127.0.0.1:%d\ndeadline = 5s\n%s"
             "[service shop]\nlimit = fixed_window 1000 per 1h\n",
             zk->connect, handoff_wait, router_port, router_keys);
    router_launch(conf);
    for (int k = 0; k < 500 && rl_test_stat(router_port, "members") != 2; k++) {
        usleep(10 * 1000);
    }
    ck_assert_int_eq(rl_test_stat(router_port, "members"), 2);
    return zh;
}

/*
 * With ZooKeeper: the test registers the two fakes (their member znodes). n1 stops reading
 * (a small receive buffer: the rest stays in the router's kernel) and CHECKs wait on it; then
 * its znode goes, as a node's does when it leaves or its session expires. The router retires
 * n1's connections with a reset, long before their stall bound (10 s), and sends n1's CHECKs
 * to n2, the new owner, which answers them all. When n1 reads again it finds the reset after
 * at most a receive buffer's CHECKs (before, a retired connection was closed, and n1 read
 * every CHECK the router had given up on it: a node cut off would decide them when its network
 * came back).
 */
START_TEST(test_retire_reset)
{
    struct rl_wire_req *reqs = calloc(STALLED, sizeof(*reqs));
    char(*users)[32] = calloc(STALLED, sizeof(*users));
    struct rl_harness_zk zk;
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;
    zhandle_t *zh;
    int codes[RL_CLIENT_CODE_ERROR + 1], before, forwarded, allowed = 0, read_after;
    char log[65536];

    ck_assert_ptr_nonnull(reqs);
    ck_assert_ptr_nonnull(users);
    f1.rcvbuf = 4096;
    zh = zk_pair_up(&zk, "5s", "");
    check_users("warm", codes, 1);
    ck_assert_int_eq(codes[RL_WIRE_ALLOWED], USERS);
    ck_assert_int_gt(atomic_load(&f1.checks), 0);

    atomic_store(&f1.deaf, true);
    before = atomic_load(&f1.checks);
    forwarded = (int)rl_test_stat(router_port, "forwarded");
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT), 0);
    for (int i = 0; i < STALLED; i++) {
        snprintf(users[i], sizeof(users[i]), "retired-user-%d", i);
        rl_test_check_req(&reqs[i], "shop", users[i], 1);
        reqs[i].id = (uint32_t)i + 1;
        ck_assert_int_eq(rl_client_queue(c, &reqs[i]), 0);
    }
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    for (int k = 0; k < 500 && rl_test_stat(router_port, "forwarded") < forwarded + STALLED; k++) {
        usleep(10 * 1000);
    }
    ck_assert_int_ge(rl_test_stat(router_port, "forwarded"), forwarded + STALLED);
    /* n1 leaves the membership with its CHECKs unanswered */
    ck_assert_int_eq(zoo_delete(zh, "/ratelimiter/mv/nodes/n1", -1), ZOK);
    for (int n = 0; n < STALLED; n++) {
        ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
        ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
        allowed += rep.check.code == RL_WIRE_ALLOWED;
    }
    ck_assert_int_eq(allowed, STALLED); /* n1's went on to n2 */
    ck_assert_int_gt(rl_test_stat(router_port, "move_lost_conn"), 0);
    fakes_wake(&f1, NULL);
    read_after = atomic_load(&f1.checks) - before;
    ck_assert_msg(read_after < (int)rl_test_stat(router_port, "move_lost_conn") / 2,
                  "n1 read %d of the %lld CHECKs the router took from it", read_after,
                  (long long)rl_test_stat(router_port, "move_lost_conn"));
    /* what its kernel held when it woke, and nothing more: none came after the reset (with a
     * plain close the router's kernel went on sending what it held until n1's first answer
     * met the closed socket, hundreds of CHECKs more) */
    ck_assert_int_gt(atomic_load(&f1.held_at_wake), 0);
    ck_assert_msg(atomic_load(&f1.read_since_wake) == atomic_load(&f1.held_at_wake),
                  "n1 read %ld bytes after it woke, %ld of them held then",
                  (long)atomic_load(&f1.read_since_wake), (long)atomic_load(&f1.held_at_wake));
    /* the retirement, not the stall bound (10 s), reset them */
    ck_assert_int_ge(rl_harness_read_file(router.log_path, log, sizeof(log)), 0);
    ck_assert_ptr_null(strstr(log, "unanswered: connection reset"));
    rl_client_destroy(c);
    f1.rcvbuf = 0;
    zookeeper_close(zh);
    ck_assert_int_eq(rl_harness_server_stop(&router, SIGTERM, T_TIMEOUT), 0);
    fake_stop(&f1);
    fake_stop(&f2);
    ck_assert_int_eq(rl_harness_zk_stop(&zk), 0);
    free(reqs);
    free(users);
}
END_TEST

/* A client of the router with 200 CHECKs of distinct users sent, pipelined, to nodes that do
 * not read: once at least 50 wait in the router for room (node_window 16). */
static struct rl_client *
send_waiting(void)
{
    static char users[200][32];
    struct rl_client *c = NULL;
    struct rl_wire_req req;

    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT), 0);
    for (int i = 0; i < 200; i++) {
        snprintf(users[i], sizeof(users[i]), "lv-%d", i);
        rl_test_check_req(&req, "shop", users[i], 1);
        req.id = (uint32_t)i + 1;
        ck_assert_int_eq(rl_client_queue(c, &req), 0);
    }
    ck_assert_int_eq(rl_client_flush(c, T_TIMEOUT), 0);
    for (int k = 0; k < 500 && rl_test_stat(router_port, "node_waits") < 50; k++) {
        usleep(10 * 1000);
    }
    ck_assert_int_ge(rl_test_stat(router_port, "node_waits"), 50);
    return c;
}

/*
 * Requests waiting in the router for room at n1 and n2 (node_window 16, neither reading) when
 * both leave the membership: each is held and resent to the new owner (none here), then
 * answered by policy after handoff_wait; none points to a node's upstream, which is freed once
 * its connections close (before, the resend's failure counted itself on it: a
 * heap-use-after-free under ASan, which the router's log would show). Both leave in one
 * ZooKeeper transaction, and neither answers: had the router seen n2 alone for a moment, a
 * reading n2 would have taken n1's requests (no move expired: a flake of loaded machines).
 */
START_TEST(test_waiting_when_nodes_leave)
{
    struct rl_harness_zk zk;
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;
    static char log[1 << 20];
    zhandle_t *zh;
    int codes[RL_CLIENT_CODE_ERROR + 1];
    int answered = 0;

    zoo_op_t gone[2];
    zoo_op_result_t gone_rc[2];

    zh = zk_pair_up(&zk, "500ms", "node_window = 16\nworkers = 1\n");
    check_users("warm", codes, 1);
    atomic_store(&f1.deaf, true);
    atomic_store(&f2.deaf, true);
    c = send_waiting();
    zoo_delete_op_init(&gone[0], "/ratelimiter/mv/nodes/n1", -1);
    zoo_delete_op_init(&gone[1], "/ratelimiter/mv/nodes/n2", -1);
    ck_assert_int_eq(zoo_multi(zh, 2, gone, gone_rc), ZOK);
    for (int i = 0; i < 200; i++) {
        ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
        ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
        answered++;
    }
    ck_assert_int_eq(answered, 200);
    ck_assert_int_ge(rl_test_stat(router_port, "move_expired"), 1);
    rl_client_destroy(c);
    zookeeper_close(zh);
    ck_assert_int_eq(rl_harness_server_stop(&router, SIGTERM, T_TIMEOUT), 0);
    ck_assert_int_ge(rl_harness_read_file(router.log_path, log, sizeof(log)), 0);
    ck_assert_msg(strstr(log, "AddressSanitizer") == NULL, "the router's log: %.2000s",
                  strstr(log, "==ERROR") != NULL ? strstr(log, "==ERROR") : log);
    atomic_store(&f1.deaf, false);
    atomic_store(&f2.deaf, false);
    fake_stop(&f1);
    fake_stop(&f2);
    ck_assert_int_eq(rl_harness_zk_stop(&zk), 0);
}
END_TEST

/*
 * n1 leaves cleanly (its states/ znode says "leaving", as a clean stop writes it) while
 * requests wait in the router for room at it (node_window 16, n1 not reading), and stops: its
 * connections close before its member znode goes. What waited keeps waiting until the table
 * drops n1, then is held and sent to the new owner (n2, which answers): every CHECK ALLOWED by
 * a node. (The first on_room answered it by policy as the connections went: a lifted limit
 * under failure = open, which the review of 2026-11-30 found.)
 */
START_TEST(test_waiting_when_a_leaving_node_stops)
{
    struct rl_harness_zk zk;
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;
    zhandle_t *zh;
    int codes[RL_CLIENT_CODE_ERROR + 1];
    int allowed = 0, rc;
    int64_t digest;

    zh = zk_pair_up(&zk, "5s", "node_window = 16\nworkers = 1\n");
    check_users("warm", codes, 1);
    atomic_store(&f1.deaf, true);
    c = send_waiting();
    digest = rl_test_stat(router_port, "table_digest");
    rc = zoo_create(zh, "/ratelimiter/mv/states", "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    ck_assert_msg(rc == ZOK || rc == ZNODEEXISTS, "create states: %d", rc);
    ck_assert_int_eq(
        zoo_create(zh, "/ratelimiter/mv/states/n1", "leaving", 7, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0),
        ZOK);
    for (int k = 0; k < 500 && rl_test_stat(router_port, "table_digest") == digest; k++) {
        usleep(10 * 1000);
    }
    ck_assert_int_ne(rl_test_stat(router_port, "table_digest"), digest); /* n1 seen leaving */
    fake_stop(&f1); /* unread, its connections close; its member znode still there */
    usleep(300 * 1000);
    ck_assert_int_eq(zoo_delete(zh, "/ratelimiter/mv/nodes/n1", -1), ZOK);
    for (int i = 0; i < 200; i++) {
        ck_assert_int_eq(rl_client_recv(c, &rep, T_TIMEOUT), 0);
        ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
        allowed += rep.check.code == RL_WIRE_ALLOWED;
    }
    ck_assert_int_eq(allowed, 200); /* none by policy */
    rl_client_destroy(c);
    zookeeper_close(zh);
    ck_assert_int_eq(rl_harness_server_stop(&router, SIGTERM, T_TIMEOUT), 0);
    fake_stop(&f2);
    ck_assert_int_eq(rl_harness_zk_stop(&zk), 0);
}
END_TEST

/*
 * n1 closes the connection its window of CHECKs went on, unanswered, while more wait in the
 * router for room at n1 (node_window 16): those are sent on n1's other connection at once and
 * answered by n1, not by the failure policy at their deadline (no reply or request would have
 * sent them: everything n1 owed was on the lost connection).
 */
START_TEST(test_waiting_when_a_connection_drops)
{
    struct rl_wire_req reqs[200];
    struct rl_wire_check_reply reps[200];
    static char users[200][32];
    struct rl_client *c = NULL;
    int codes[RL_CLIENT_CODE_ERROR + 1];
    int allowed = 0, closed = 0, n1 = 0;

    fake_start(&f1, FAKE_ALLOW, "", 0);
    fake_start(&f2, FAKE_ALLOW, "", 0);
    router_start_keys("1s", "closed", "30s", "node_window = 16\nworkers = 1\n");
    check_users("warm", codes, 1);
    ck_assert_int_eq(codes[RL_WIRE_ALLOWED], USERS);
    n1 = atomic_load(&f1.checks);
    atomic_store(&f1.hang_up, true);
    for (int i = 0; i < 200; i++) {
        snprintf(users[i], sizeof(users[i]), "drop-%d", i);
        rl_test_check_req(&reqs[i], "shop", users[i], 1);
    }
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT), 0);
    /* a deadline of 30 s: the test's own 10 s ends first if they wait for it */
    ck_assert_int_eq(rl_client_check_many(c, reqs, 200, reps, T_TIMEOUT), 0);
    for (int i = 0; i < 200; i++) {
        allowed += reps[i].code == RL_WIRE_ALLOWED;
        closed += reps[i].code == RL_WIRE_FAIL_CLOSED;
    }
    rl_client_destroy(c);
    ck_assert(!atomic_load(&f1.hang_up)); /* n1 did hang up */
    ck_assert_int_gt(rl_test_stat(router_port, "node_waits"), 0);
    /* those on the lost connection (n1's window, 16 at most) by policy; the rest by the nodes */
    ck_assert_int_le(closed, 16);
    ck_assert_int_eq(allowed + closed, 200);
    ck_assert_int_gt(atomic_load(&f1.checks) - n1, 0); /* n1 answered some after it */
    stop_all();
}
END_TEST

static Suite *
moving_suite(void)
{
    Suite *s = suite_create("moving");
    TCase *tc = tcase_create("router");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_moving_named);
    tcase_add_test(tc, test_moving_held);
    tcase_add_test(tc, test_moving_unknown_owner);
    tcase_add_test(tc, test_moving_ping_pong);
    tcase_add_test(tc, test_moving_expires);
    tcase_add_test(tc, test_moving_inline);
    tcase_add_test(tc, test_moving_client_leaves);
    tcase_add_test(tc, test_moving_adjust);
    tcase_add_test(tc, test_no_wait_for_a_pre_tenant_node);
    tcase_add_test(tc, test_stall_reset);
    tcase_add_test(tc, test_connect_given_up);
    tcase_add_test(tc, test_retire_reset);
    tcase_add_test(tc, test_waiting_when_nodes_leave);
    tcase_add_test(tc, test_waiting_when_a_connection_drops);
    tcase_add_test(tc, test_waiting_when_a_leaving_node_stops);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return rl_test_run(moving_suite());
}
