/* proxy: see proxy.h. */
#include "proxy.h"

#include "clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PROXY_TICK_MS 20           /* longest poll: how soon a mode change is seen at worst */
#define PROXY_HIGH (1024 * 1024)   /* a queue past this stops the reads that feed it... */
#define PROXY_LOW (PROXY_HIGH / 2) /* ...until it is back under this */
#define PROXY_READ 65536           /* one read(2) at most */
#define PROXY_ACCEPTS 64           /* accept(2)s per turn at most */

/* Bytes read from one side, waiting to be written to the other. */
struct chunk {
    struct chunk *next;
    int64_t due_us;  /* CLOCK_MONOTONIC: not written before */
    size_t len, off; /* off: how much is written already */
    char data[];
};

struct side {
    int fd;                    /* -1: none (the target not dialed yet, or a free pair) */
    struct chunk *head, *tail; /* bytes to write to fd, oldest first */
    size_t queued;             /* unwritten bytes in the queue */
    bool full;                 /* queued passed PROXY_HIGH and is not under PROXY_LOW yet */
};

/*
 * s[0] is the accepted side (client), s[1] the target side. Free when s[0].fd < 0. Held
 * (accepted in BLACKHOLE) while s[1].fd < 0, dialing while connecting, closing once a
 * side read 0: no more reads, the queues are written, then both sides closed.
 */
struct pair {
    struct side s[2];
    bool connecting;
    bool closing;
};

struct rl_proxy {
    int lfd;
    int target;
    int wake[2]; /* a pipe: set_mode/set_delay/stop write a byte to cut the poll short */
    atomic_int mode;
    atomic_int delay_ms;
    atomic_uint reset_gen; /* bumped by each set_mode(RESET) */
    atomic_int stop;
    pthread_t thread;
    pthread_mutex_t lock;         /* guards shared */
    struct rl_proxy_stats shared; /* what rl_proxy_stats() returns */

    /* The thread's own. */
    struct pair pairs[RL_PROXY_PAIRS];
    struct rl_proxy_stats mine; /* counted as things happen, copied to shared each turn */
    unsigned reset_seen;
    int64_t accept_pause_us; /* after EMFILE and the like: the listener is not polled until */
    char buf[PROXY_READ];
};

static int64_t
now_us(void)
{
    return (int64_t)(rl_clock_mono_ns() / 1000);
}

static void
sock_setup(int fd)
{
    int one = 1;

    /* Forward every chunk as it comes: Nagle would add latency the delay does not ask for. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void
close_rst(int fd)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};

    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
}

static void
side_clear(struct side *s, bool rst)
{
    while (s->head != NULL) {
        struct chunk *c = s->head;

        s->head = c->next;
        free(c);
    }
    if (s->fd >= 0) {
        if (rst) {
            close_rst(s->fd);
        } else {
            close(s->fd);
        }
    }
    s->fd = -1;
    s->tail = NULL;
    s->queued = 0;
    s->full = false;
}

static void
pair_close(struct rl_proxy *p, struct pair *pr, bool rst)
{
    side_clear(&pr->s[0], rst);
    side_clear(&pr->s[1], rst);
    pr->connecting = pr->closing = false;
    p->mine.open--;
    if (rst) {
        p->mine.resets++;
    }
}

/* Starts a non-blocking dial of the target for a held pair; a failure closes the pair. */
static void
pair_dial(struct rl_proxy *p, struct pair *pr)
{
    struct sockaddr_in sa = {0};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

    if (fd < 0) {
        pair_close(p, pr, false);
        return;
    }
    sock_setup(fd);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)p->target);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    pr->s[1].fd = fd;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        pr->connecting = false;
    } else if (errno == EINPROGRESS) {
        pr->connecting = true;
    } else {
        pair_close(p, pr, false);
    }
}

/* The dial of a connecting pair has an outcome (poll said so). */
static void
pair_connected(struct rl_proxy *p, struct pair *pr)
{
    int err = 0;
    socklen_t len = sizeof(err);

    if (getsockopt(pr->s[1].fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
        pair_close(p, pr, false);
        return;
    }
    pr->connecting = false;
}

static bool
writable(const struct pair *pr, int k)
{
    return pr->s[k].fd >= 0 && (k == 0 || !pr->connecting);
}

/* Whether bytes read from side k are discarded in this mode. */
static bool
dropping(int mode, int k)
{
    return (k == 0 && mode == RL_PROXY_DROP_UP) || (k == 1 && mode == RL_PROXY_DROP_DOWN);
}

/* Whether side k may be read now (outside BLACKHOLE). */
static bool
readable(const struct pair *pr, int k, int mode)
{
    return !pr->closing && writable(pr, k) && (!pr->s[1 - k].full || dropping(mode, k));
}

/*
 * Writes what is due of the queue toward side k. Returns false if the pair was closed (a
 * write error).
 */
static bool
side_flush(struct rl_proxy *p, struct pair *pr, int k, int64_t now)
{
    struct side *s = &pr->s[k];

    if (!writable(pr, k)) {
        return true;
    }
    while (s->head != NULL && s->head->due_us <= now) {
        struct chunk *c = s->head;
        ssize_t n = send(s->fd, c->data + c->off, c->len - c->off, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                break;
            }
            pair_close(p, pr, false);
            return false;
        }
        c->off += (size_t)n;
        s->queued -= (size_t)n;
        if (k == 1) {
            p->mine.bytes_up += (uint64_t)n;
        } else {
            p->mine.bytes_down += (uint64_t)n;
        }
        if (c->off == c->len) {
            s->head = c->next;
            if (s->head == NULL) {
                s->tail = NULL;
            }
            free(c);
        }
    }
    if (s->full && s->queued < PROXY_LOW) {
        s->full = false;
    }
    return true;
}

/* Reads side k once (poll said it is readable, or hung up). */
static void
side_read(struct rl_proxy *p, struct pair *pr, int k, int mode, int64_t now, int delay_ms)
{
    struct side *to = &pr->s[1 - k];
    ssize_t n = read(pr->s[k].fd, p->buf, sizeof(p->buf));
    struct chunk *c;

    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            pair_close(p, pr, false);
        }
        return;
    }
    if (n == 0) {
        pr->closing = true;
        return;
    }
    if (dropping(mode, k)) {
        if (k == 0) {
            p->mine.dropped_up += (uint64_t)n;
        } else {
            p->mine.dropped_down += (uint64_t)n;
        }
        return;
    }
    c = malloc(sizeof(*c) + (size_t)n);
    if (c == NULL) {
        pair_close(p, pr, false);
        return;
    }
    memcpy(c->data, p->buf, (size_t)n);
    c->next = NULL;
    c->due_us = now + (int64_t)delay_ms * 1000;
    c->len = (size_t)n;
    c->off = 0;
    if (to->tail != NULL) {
        to->tail->next = c;
    } else {
        to->head = c;
    }
    to->tail = c;
    to->queued += (size_t)n;
    if (to->queued > PROXY_HIGH) {
        to->full = true;
    }
}

static struct pair *
pair_free_slot(struct rl_proxy *p)
{
    for (int i = 0; i < RL_PROXY_PAIRS; i++) {
        if (p->pairs[i].s[0].fd < 0) {
            return &p->pairs[i];
        }
    }
    return NULL;
}

static void
proxy_accept(struct rl_proxy *p, int mode, int64_t now)
{
    for (int i = 0; i < PROXY_ACCEPTS; i++) {
        int c = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        struct pair *pr;

        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED) {
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                /* EMFILE and the like: the listener stays readable; wait a tick. */
                p->accept_pause_us = now + PROXY_TICK_MS * 1000;
            }
            return;
        }
        p->mine.accepted++;
        if (mode == RL_PROXY_RESET) {
            close_rst(c);
            p->mine.resets++;
            continue;
        }
        pr = pair_free_slot(p);
        if (pr == NULL) {
            close(c);
            continue;
        }
        sock_setup(c);
        pr->s[0].fd = c;
        pr->connecting = pr->closing = false;
        p->mine.open++;
        if (mode != RL_PROXY_BLACKHOLE) {
            pair_dial(p, pr);
        }
    }
}

/*
 * One turn's work before poll(2): resets, dials of held pairs, writes of what is due,
 * closes of drained closing pairs. Returns the poll timeout (ms) for the earliest chunk
 * not due yet, at most PROXY_TICK_MS.
 */
static int
proxy_service(struct rl_proxy *p, int mode, int64_t now)
{
    unsigned gen = atomic_load(&p->reset_gen);
    bool reset = gen != p->reset_seen || mode == RL_PROXY_RESET;
    int64_t wait_us = (int64_t)PROXY_TICK_MS * 1000;

    p->reset_seen = gen;
    for (int i = 0; i < RL_PROXY_PAIRS; i++) {
        struct pair *pr = &p->pairs[i];

        if (pr->s[0].fd < 0) {
            continue;
        }
        if (reset) {
            pair_close(p, pr, true);
            continue;
        }
        if (mode == RL_PROXY_BLACKHOLE) {
            continue;
        }
        if (pr->s[1].fd < 0) {
            pair_dial(p, pr);
            if (pr->s[0].fd < 0) {
                continue;
            }
        }
        if (!side_flush(p, pr, 0, now) || !side_flush(p, pr, 1, now)) {
            continue;
        }
        if (pr->closing && pr->s[0].queued == 0 && pr->s[1].queued == 0) {
            pair_close(p, pr, false);
            continue;
        }
        for (int k = 0; k < 2; k++) {
            const struct chunk *c = pr->s[k].head;

            if (c != NULL && writable(pr, k) && c->due_us > now && c->due_us - now < wait_us) {
                wait_us = c->due_us - now;
            }
        }
    }
    return (int)((wait_us + 999) / 1000);
}

static void *
proxy_main(void *arg)
{
    struct rl_proxy *p = arg;
    struct pollfd pfd[2 + 2 * RL_PROXY_PAIRS];
    int owner[2 + 2 * RL_PROXY_PAIRS]; /* pfd[j] is side owner[j] % 2 of pair owner[j] / 2 */

    while (!atomic_load(&p->stop)) {
        int mode = atomic_load(&p->mode), delay_ms;
        int64_t now = now_us();
        int timeout = proxy_service(p, mode, now), n = 0;

        pthread_mutex_lock(&p->lock);
        p->shared = p->mine;
        pthread_mutex_unlock(&p->lock);

        pfd[n].fd = p->wake[0];
        pfd[n++].events = POLLIN;
        pfd[n].fd = now >= p->accept_pause_us ? p->lfd : -1;
        pfd[n++].events = POLLIN;
        for (int i = 0; i < RL_PROXY_PAIRS && mode != RL_PROXY_BLACKHOLE; i++) {
            struct pair *pr = &p->pairs[i];

            for (int k = 0; k < 2 && pr->s[0].fd >= 0; k++) {
                short ev = 0;

                if (pr->s[k].fd < 0) {
                    continue;
                }
                if (k == 1 && pr->connecting) {
                    ev = POLLOUT;
                } else {
                    if (readable(pr, k, mode)) {
                        ev |= POLLIN;
                    }
                    if (pr->s[k].head != NULL && pr->s[k].head->due_us <= now) {
                        ev |= POLLOUT; /* due and not written: the socket was full */
                    }
                }
                owner[n] = 2 * i + k;
                pfd[n].fd = pr->s[k].fd;
                pfd[n++].events = ev;
            }
        }
        if (poll(pfd, (nfds_t)n, timeout) <= 0) {
            continue;
        }
        if (pfd[0].revents & POLLIN) {
            char drain[64];

            while (read(p->wake[0], drain, sizeof(drain)) > 0) {
            }
        }
        /* The mode may have changed while polling: act on the new one next turn. */
        if (atomic_load(&p->mode) != mode || atomic_load(&p->reset_gen) != p->reset_seen) {
            continue;
        }
        /* The delay in force when the bytes are read, not when the turn began. */
        delay_ms = atomic_load(&p->delay_ms);
        now = now_us();
        if (pfd[1].revents & POLLIN) {
            proxy_accept(p, mode, now);
        }
        for (int j = 2; j < n; j++) {
            struct pair *pr = &p->pairs[owner[j] / 2];
            int k = owner[j] % 2;
            short rev = pfd[j].revents;

            /* The pair may have been closed (and even reused) since pfd[j] was made. */
            if (rev == 0 || pr->s[k].fd != pfd[j].fd) {
                continue;
            }
            if (k == 1 && pr->connecting) {
                pair_connected(p, pr);
            } else if ((pfd[j].events & POLLIN) && (rev & (POLLIN | POLLHUP | POLLERR))) {
                side_read(p, pr, k, mode, now, delay_ms);
            } else if (rev & (POLLHUP | POLLERR | POLLNVAL)) {
                pair_close(p, pr, false); /* not read now: a reset, or gone both ways */
            }
        }
    }
    return NULL;
}

int
rl_proxy_start(struct rl_proxy **out, int target, int *port)
{
    struct rl_proxy *p = calloc(1, sizeof(*p));
    struct sockaddr_in sa = {0};
    socklen_t len = sizeof(sa);
    int one = 1, rc;

    *out = NULL;
    if (p == NULL) {
        return -ENOMEM;
    }
    for (int i = 0; i < RL_PROXY_PAIRS; i++) {
        p->pairs[i].s[0].fd = p->pairs[i].s[1].fd = -1;
    }
    p->target = target;
    p->wake[0] = p->wake[1] = -1;
    pthread_mutex_init(&p->lock, NULL);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)*port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (p->lfd < 0 || setsockopt(p->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(p->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(p->lfd, SOMAXCONN) != 0 ||
        getsockname(p->lfd, (struct sockaddr *)&sa, &len) != 0 ||
        pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        goto fail;
    }
    rc = pthread_create(&p->thread, NULL, proxy_main, p);
    if (rc != 0) {
        errno = rc;
        goto fail;
    }
    *port = ntohs(sa.sin_port);
    *out = p;
    return 0;

fail:
    rc = -errno;
    if (p->lfd >= 0) {
        close(p->lfd);
    }
    for (int k = 0; k < 2; k++) {
        if (p->wake[k] >= 0) {
            close(p->wake[k]);
        }
    }
    pthread_mutex_destroy(&p->lock);
    free(p);
    return rc;
}

static void
proxy_wake(struct rl_proxy *p)
{
    char b = 0;
    ssize_t n = write(p->wake[1], &b, 1); /* full (EAGAIN) is as good: it is readable */

    (void)n;
}

void
rl_proxy_set_mode(struct rl_proxy *p, enum rl_proxy_mode mode)
{
    if (p == NULL) {
        return;
    }
    /* The generation before the mode: a thread that sees mode RESET sees the bump too. */
    if (mode == RL_PROXY_RESET) {
        atomic_fetch_add(&p->reset_gen, 1);
    }
    atomic_store(&p->mode, (int)mode);
    proxy_wake(p);
}

void
rl_proxy_set_delay(struct rl_proxy *p, int delay_ms)
{
    if (p == NULL) {
        return;
    }
    atomic_store(&p->delay_ms, delay_ms > 0 ? delay_ms : 0);
    proxy_wake(p);
}

void
rl_proxy_stats(struct rl_proxy *p, struct rl_proxy_stats *out)
{
    pthread_mutex_lock(&p->lock);
    *out = p->shared;
    pthread_mutex_unlock(&p->lock);
}

void
rl_proxy_stop(struct rl_proxy *p)
{
    if (p == NULL) {
        return;
    }
    atomic_store(&p->stop, 1);
    proxy_wake(p);
    pthread_join(p->thread, NULL);
    for (int i = 0; i < RL_PROXY_PAIRS; i++) {
        if (p->pairs[i].s[0].fd >= 0) {
            pair_close(p, &p->pairs[i], false);
        }
    }
    close(p->lfd);
    close(p->wake[0]);
    close(p->wake[1]);
    pthread_mutex_destroy(&p->lock);
    free(p);
}
