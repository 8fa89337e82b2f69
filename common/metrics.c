/*
 * metrics: the HTTP listener for operators on libmicrohttpd (/metrics, /healthz, /readyz;
 * metrics.h). The HTTP thread never reads the owner's counters: it asks the loop for a
 * snapshot (uv_async) and waits on a condition variable, with a deadline; then it formats
 * the parts the loop only copied (rl_prom_defer) into the page. The exposition writer, the
 * histogram and the process figures are prom.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "metrics.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "log.h"

/*
 * What keeps /healthz answering while clients misbehave (docs/OPERATIONS.md, "Metrics").
 * libmicrohttpd stops accepting once its connection limit is reached, so connections that
 * dripped their headers could hold every slot and leave probes in the listen backlog; it
 * closes only connections idle for its timeout. So:
 *   - one address holds at most METRICS_PER_ADDRESS connections (libmicrohttpd's per-IP
 *     limit): the rest of the RL_METRICS_MAX_CONNECTIONS slots stay free for others;
 *   - past RL_METRICS_MAX_CONNECTIONS, a newcomer takes the slot of a connection still
 *     waiting for its headers (metrics_evict): of an address holding more connections than
 *     the newcomer's, the one of the address holding most; else one that has waited
 *     METRICS_EVICT_AGE_MS (a client sends its request at once): the longest waiting. Its
 *     socket is shut down (408 first, when nothing was asked yet), and libmicrohttpd closes
 *     it. So a few addresses that drip their headers cannot keep a probe out (the attack
 *     round of 2026-11-30: 4 addresses refused 90% of /healthz); without such a connection
 *     the accept policy refuses (libmicrohttpd accepts and closes at once).
 *     libmicrohttpd's own limit is set above ours, as is the slots' array, so that it never
 *     stops accepting while evicted connections close, which would leave connections
 *     hanging in the backlog;
 *   - a request's headers must be in within METRICS_HEADER_DEADLINE_MS of the accept (or of
 *     the end of the previous answer on a kept-alive connection), and its answer be sent
 *     within RL_METRICS_TIMEOUT_S after that, however the client drips: the sweeper thread
 *     shuts down the socket of a connection past its deadline (a fresh one is told 408
 *     first), and libmicrohttpd closes it. libmicrohttpd calls the CLOSED notification before
 *     it closes the descriptor, and the sweeper only touches a slot under cmu while it is
 *     live, so it never shuts down a descriptor that has been reused.
 */
#define METRICS_PER_ADDRESS 8u
#define METRICS_HEADER_DEADLINE_MS 5000u
#define METRICS_MHD_LIMIT (2u * RL_METRICS_MAX_CONNECTIONS) /* never reached: see above */
#define METRICS_SLOTS METRICS_MHD_LIMIT /* live connections: ours, and those shut, closing */
#define METRICS_EVICT_AGE_MS 250u
#define METRICS_WARN_EVERY_MS 60000 /* refusals and deadline closes, logged at most this often */

enum metrics_phase {
    METRICS_FRESH,     /* accepted, no request yet */
    METRICS_BODY,      /* headers in, a body announced still coming (dropped as it comes) */
    METRICS_ANSWERING, /* the request is in: it is handled and answered */
    METRICS_KEPT,      /* kept alive after an answer, waiting for the next request */
};

struct metrics_conn {
    bool live;  /* between libmicrohttpd's STARTED and CLOSED notifications */
    bool shut;  /* the sweeper, or an eviction, has shut its socket down */
    enum metrics_phase phase;
    int fd;
    int64_t deadline_ms; /* CLOCK_MONOTONIC */
    int64_t since_ms;    /* when it began to wait for headers (accept, or its last answer) */
    struct metrics_addr {
        uint8_t len; /* 4 (IPv4), 16 (IPv6), 0: unknown */
        uint8_t b[16];
    } addr;
};

struct rl_metrics {
    uv_loop_t *loop;
    uv_async_t async;
    struct MHD_Daemon *daemon;
    struct rl_metrics_ops ops;
    uint16_t port;
    atomic_uint_fast64_t requests;
    /* the connections, shared by the HTTP thread and the sweeper, under cmu */
    pthread_mutex_t cmu;
    pthread_cond_t ccv;
    pthread_t sweeper;
    bool sweeper_running;
    bool sweeper_stop;
    int64_t sweep_at; /* when the sweeper wakes next; INT64_MAX: when told */
    unsigned live;    /* slots in use */
    unsigned nshut;   /* of which shut down, closing */
    struct metrics_conn conns[METRICS_SLOTS];
    uint64_t refused, expired, evicted; /* since the last warning */
    int64_t warned_ms;         /* when the last warning was logged; 0: never */
    /* the loop's scratch, owned by the loop thread: the text it renders and the parts it
     * leaves for the HTTP thread to format (rl_prom_defer) */
    struct rl_buf work;
    struct rl_prom_later work_later;
    /* shared with the HTTP thread, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t asked;    /* snapshots asked for */
    uint64_t answered; /* the last snapshot covers every ask up to this one */
    uint64_t timed_out; /* the last ask whose wait ran out: while it is unanswered the loop
                           is stuck, and later asks are refused at once, not one by one */
    bool stopping;
    bool page_wanted;   /* an ask since the last snapshot wants /metrics, not just liveness */
    struct rl_buf raw;  /* the loop's last rendering, not formatted yet (raw_ready) */
    struct rl_prom_later raw_later;
    bool raw_ready;
    uint64_t raw_at, raw_cost; /* when the loop rendered it; its time doing so, ns */
    struct rl_buf snap; /* the last page, formatted */
    uint64_t snap_at;   /* uv_hrtime() when its figures were taken; 0: never */
    uint64_t snap_cost; /* its whole cost, ns: the loop's render and the formatting */
    uint64_t snap_loop_cost; /* the loop's part of it, ns */
    bool ready;
    char why[256];
};

static int64_t
metrics_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Logs refusals and deadline closes at warn, at most every METRICS_WARN_EVERY_MS (with
 * how many since the last line), so a flood cannot fill the log. Under cmu. */
static void
metrics_warn_abuse(struct rl_metrics *m, int64_t now)
{
    if (m->warned_ms != 0 && now - m->warned_ms < METRICS_WARN_EVERY_MS) {
        return;
    }
    if (m->refused == 0 && m->expired == 0 && m->evicted == 0) {
        return;
    }
    rl_log_warn("metrics listener: %llu connections refused at the limit of %u, %llu closed "
                "for a newcomer while they waited for their headers, %llu closed past the "
                "request deadline (%u ms for the headers)",
                (unsigned long long)m->refused, (unsigned)RL_METRICS_MAX_CONNECTIONS,
                (unsigned long long)m->evicted, (unsigned long long)m->expired,
                (unsigned)METRICS_HEADER_DEADLINE_MS);
    m->refused = 0;
    m->expired = 0;
    m->evicted = 0;
    m->warned_ms = now;
}

/* Sets a connection's deadline, waking the sweeper if it would sleep past it. Under cmu. */
static void
metrics_set_deadline(struct rl_metrics *m, struct metrics_conn *c, enum metrics_phase phase,
                     int64_t deadline_ms)
{
    c->phase = phase;
    c->deadline_ms = deadline_ms;
    if (deadline_ms < m->sweep_at) {
        pthread_cond_signal(&m->ccv);
    }
}

static void
metrics_addr_of(struct metrics_addr *a, const struct sockaddr *sa, socklen_t len)
{
    memset(a, 0, sizeof(*a));
    if (sa != NULL && sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        a->len = 4;
        memcpy(a->b, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
    } else if (sa != NULL && sa->sa_family == AF_INET6 &&
               len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        a->len = 16;
        memcpy(a->b, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
    }
}

static bool
metrics_addr_eq(const struct metrics_addr *x, const struct metrics_addr *y)
{
    return x->len != 0 && x->len == y->len && memcmp(x->b, y->b, x->len) == 0;
}

/* The connections of address a that count against the limit (live, not shut). Under cmu. */
static unsigned
metrics_held_by(const struct rl_metrics *m, const struct metrics_addr *a)
{
    unsigned n = 0;

    for (unsigned i = 0; i < METRICS_SLOTS; i++) {
        n += m->conns[i].live && !m->conns[i].shut && metrics_addr_eq(&m->conns[i].addr, a);
    }
    return n;
}

/* Shuts a live connection's socket down, libmicrohttpd then reads EOF and closes it. One still
 * waiting for its request is told 408 first: nothing has been written to it yet, and the HTTP
 * thread will not write before its handler has moved the slot out of METRICS_FRESH and
 * METRICS_BODY, under cmu. Under cmu. */
static void
metrics_shut(struct rl_metrics *m, struct metrics_conn *c)
{
    static const char timeout[] = "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
                                  "Content-Length: 0\r\n\r\n";

    if (c->phase == METRICS_FRESH || c->phase == METRICS_BODY) {
        (void)send(c->fd, timeout, sizeof(timeout) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    shutdown(c->fd, SHUT_RDWR);
    c->shut = true;
    m->nshut++;
}

/* Makes room for a newcomer from address a at the limit (the file's head comment): shuts down
 * a connection still waiting for its headers, of an address holding more than a does (the one
 * holding most; of its connections the longest waiting), else the longest waiting for at
 * least METRICS_EVICT_AGE_MS. Returns whether one was. Under cmu; at most METRICS_SLOTS^2
 * steps, only at the limit. */
static bool
metrics_evict(struct rl_metrics *m, const struct metrics_addr *a, int64_t now)
{
    unsigned mine = metrics_held_by(m, a), best_held = 0;
    struct metrics_conn *best = NULL, *oldest = NULL;

    for (unsigned i = 0; i < METRICS_SLOTS; i++) {
        struct metrics_conn *c = &m->conns[i];
        unsigned held;

        if (!c->live || c->shut || c->phase == METRICS_ANSWERING) {
            continue;
        }
        if (oldest == NULL || c->since_ms < oldest->since_ms) {
            oldest = c;
        }
        held = metrics_held_by(m, &c->addr);
        if (held > mine && (best == NULL || held > best_held ||
                            (held == best_held && c->since_ms < best->since_ms))) {
            best = c;
            best_held = held;
        }
    }
    if (best == NULL && oldest != NULL && now - oldest->since_ms >= (int64_t)METRICS_EVICT_AGE_MS) {
        best = oldest;
    }
    if (best == NULL) {
        return false;
    }
    metrics_shut(m, best);
    m->evicted++;
    return true;
}

/* libmicrohttpd's accept policy, on the HTTP thread: past RL_METRICS_MAX_CONNECTIONS a new
 * connection takes the slot of one still waiting for its headers (metrics_evict), or is
 * refused (closed at once). Connections are counted by metrics_notify, on the same thread, so
 * the counts are exact. */
static enum MHD_Result
metrics_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    struct rl_metrics *m = cls;
    struct metrics_addr a;
    enum MHD_Result ok = MHD_YES;
    int64_t now = metrics_now_ms();

    metrics_addr_of(&a, addr, addrlen);
    pthread_mutex_lock(&m->cmu);
    if (m->live >= METRICS_SLOTS ||
        (m->live - m->nshut >= RL_METRICS_MAX_CONNECTIONS && !metrics_evict(m, &a, now))) {
        ok = MHD_NO;
        m->refused++;
    }
    metrics_warn_abuse(m, now);
    pthread_mutex_unlock(&m->cmu);
    return ok;
}

/* libmicrohttpd's connection notifications, on the HTTP thread: a slot with the headers'
 * deadline for a new connection, freed when it closes (before its descriptor is). */
static void
metrics_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
               enum MHD_ConnectionNotificationCode toe)
{
    struct rl_metrics *m = cls;
    struct metrics_conn *c = *socket_context;

    pthread_mutex_lock(&m->cmu);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);

        const union MHD_ConnectionInfo *ai =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        int64_t now = metrics_now_ms();

        c = NULL;
        for (unsigned i = 0; i < METRICS_SLOTS && ci != NULL; i++) {
            if (!m->conns[i].live) {
                c = &m->conns[i];
                break;
            }
        }
        if (c != NULL) {
            *c = (struct metrics_conn){.live = true, .fd = (int)ci->connect_fd, .since_ms = now};
            if (ai != NULL && ai->client_addr != NULL) {
                metrics_addr_of(&c->addr, ai->client_addr,
                                ai->client_addr->sa_family == AF_INET6
                                    ? (socklen_t)sizeof(struct sockaddr_in6)
                                    : (socklen_t)sizeof(struct sockaddr_in));
            }
            m->live++;
            metrics_set_deadline(m, c, METRICS_FRESH, now + (int64_t)METRICS_HEADER_DEADLINE_MS);
        } else if (ci != NULL) {
            /* Cannot happen (metrics_accept counts): not tracked, so not kept either. */
            shutdown((int)ci->connect_fd, SHUT_RDWR);
        }
        *socket_context = c;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED && c != NULL) {
        c->live = false;
        m->live--;
        m->nshut -= c->shut;
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&m->cmu);
}

static struct metrics_conn *
metrics_conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return ci != NULL ? ci->socket_context : NULL;
}

/* libmicrohttpd's request-completed notification, on the HTTP thread: the answer is sent (or
 * the request ended otherwise); a kept-alive connection has the headers' deadline again. */
static void
metrics_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                  enum MHD_RequestTerminationCode toe)
{
    struct rl_metrics *m = cls;
    struct metrics_conn *c = metrics_conn_of(conn);

    (void)con_cls;
    (void)toe;
    if (c == NULL) {
        return;
    }
    pthread_mutex_lock(&m->cmu);
    if (c->live) {
        c->since_ms = metrics_now_ms();
        metrics_set_deadline(m, c, METRICS_KEPT, c->since_ms + (int64_t)METRICS_HEADER_DEADLINE_MS);
    }
    pthread_mutex_unlock(&m->cmu);
}

/* The sweeper thread: shuts down the connections past their deadline (metrics_shut). Sleeps
 * until the next deadline. */
static void *
metrics_sweep(void *arg)
{
    struct rl_metrics *m = arg;

    pthread_mutex_lock(&m->cmu);
    while (!m->sweeper_stop) {
        int64_t now = metrics_now_ms(), next = INT64_MAX;

        for (unsigned i = 0; i < METRICS_SLOTS; i++) {
            struct metrics_conn *c = &m->conns[i];

            if (!c->live || c->shut) {
                continue;
            }
            if (c->deadline_ms > now) {
                next = c->deadline_ms < next ? c->deadline_ms : next;
                continue;
            }
            metrics_shut(m, c);
            m->expired++;
            metrics_warn_abuse(m, now);
        }
        m->sweep_at = next;
        if (next == INT64_MAX) {
            pthread_cond_wait(&m->ccv, &m->cmu);
        } else {
            struct timespec until = {.tv_sec = (time_t)(next / 1000),
                                     .tv_nsec = (long)(next % 1000) * 1000000L};

            pthread_cond_timedwait(&m->ccv, &m->cmu, &until);
        }
    }
    pthread_mutex_unlock(&m->cmu);
    return NULL;
}

static void
metrics_async(uv_async_t *a)
{
    struct rl_metrics *m = a->data;
    struct rl_prom p = {.out = &m->work, .err = 0, .later = &m->work_later};
    uint64_t target;
    char why[256] = "";
    bool ready;
    struct rl_buf tmp;
    struct rl_prom_later ltmp;
    uint64_t t0 = 0, t1 = 0;
    bool page;

    pthread_mutex_lock(&m->mu);
    target = m->asked;
    page = m->page_wanted;
    m->page_wanted = false;
    pthread_mutex_unlock(&m->mu);

    /* /healthz and /readyz need only the answer and the readiness: no page is rendered
     * for them, so probing them costs the loop next to nothing. The large families are
     * only copied here (rl_prom_defer): the HTTP thread formats them. */
    if (page) {
        rl_prom_later_drop(&m->work_later); /* a rendering nobody took */
        t0 = uv_hrtime();
        rl_buf_reset(&m->work);
        m->ops.render(m->ops.arg, &p);
        if (p.err != 0) {
            rl_buf_reset(&m->work); /* out of memory: an empty page rather than half of one */
            rl_prom_later_drop(&m->work_later);
        }
        t1 = uv_hrtime();
    }
    ready = m->ops.ready(m->ops.arg, why, sizeof(why));

    pthread_mutex_lock(&m->mu);
    if (page) {
        tmp = m->raw;
        m->raw = m->work;
        m->work = tmp;
        ltmp = m->raw_later;
        m->raw_later = m->work_later;
        m->work_later = ltmp;
        m->raw_ready = true;
        m->raw_at = t1;
        m->raw_cost = t1 - t0;
    }
    m->ready = ready;
    snprintf(m->why, sizeof(m->why), "%s", why);
    m->answered = target;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

static enum MHD_Result
metrics_send(struct MHD_Connection *conn, unsigned status, const char *type, const char *body,
             size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result rc;

    if (r == NULL) {
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result
metrics_text(struct MHD_Connection *conn, unsigned status, const char *text)
{
    return metrics_send(conn, status, "text/plain; charset=utf-8", text, strlen(text));
}

/* Asks the loop for a snapshot and waits for it; false when the loop did not answer in time
 * (or the listener is stopping). Returns with mu held when true. */
static bool
metrics_snapshot(struct rl_metrics *m, bool page)
{
    struct timespec until;
    uint64_t mine, wait_ms;

    pthread_mutex_lock(&m->mu);
    /* An earlier ask ran out and is still unanswered: the loop is stuck. Give it a moment
     * (it may just have woken) rather than the full wait, so that queued requests are not
     * refused one second at a time. */
    wait_ms = m->answered < m->timed_out ? RL_METRICS_STUCK_WAIT_MS : RL_METRICS_LOOP_WAIT_MS;
    mine = ++m->asked;
    m->page_wanted = m->page_wanted || page;
    pthread_mutex_unlock(&m->mu);
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)(wait_ms / 1000);
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    uv_async_send(&m->async);
    pthread_mutex_lock(&m->mu);
    while (m->answered < mine && !m->stopping) {
        if (pthread_cond_timedwait(&m->cv, &m->mu, &until) == ETIMEDOUT) {
            break;
        }
    }
    if (m->answered >= mine && !m->stopping) {
        return true;
    }
    if (m->answered < mine && mine > m->timed_out) {
        m->timed_out = mine;
    }
    pthread_mutex_unlock(&m->mu);
    return false;
}

/*
 * Whether the last page is recent enough to serve again, without asking the loop: younger
 * than RL_METRICS_CACHE_FACTOR times what it cost to make (the loop's render and this
 * thread's formatting), and at most RL_METRICS_CACHE_MAX_MS; a page that cost under
 * RL_METRICS_CACHE_MIN_COST_US (a few hundred series) is never served twice, every scrape of
 * it renders anew; one of 20,000 services (~15 ms, 0.3 of it on the loop) is, for about
 * 750 ms, so that any number of scrapers cost the process at most 1/RL_METRICS_CACHE_FACTOR
 * of a core (the formatting shares the machine's cores with the loop).
 * Returns with mu held when true.
 */
static bool
metrics_fresh(struct rl_metrics *m)
{
    uint64_t now = uv_hrtime(), ttl;

    pthread_mutex_lock(&m->mu);
    ttl = m->snap_cost * RL_METRICS_CACHE_FACTOR;
    if (ttl > RL_METRICS_CACHE_MAX_MS * UINT64_C(1000000)) {
        ttl = RL_METRICS_CACHE_MAX_MS * UINT64_C(1000000);
    }
    if (m->snap_at != 0 && !m->stopping && m->snap_cost >= RL_METRICS_CACHE_MIN_COST_US * 1000u &&
        now - m->snap_at < ttl) {
        return true;
    }
    pthread_mutex_unlock(&m->mu);
    return false;
}

/*
 * Formats the loop's last rendering into the page (on this, the HTTP thread, without mu:
 * the loop may render the next one meanwhile) and puts it in snap. With mu held on entry
 * and on return.
 */
static void
metrics_format(struct rl_metrics *m)
{
    struct rl_buf text = m->raw, page;
    struct rl_prom_later later = m->raw_later;
    uint64_t at = m->raw_at, loop_cost = m->raw_cost, t0, t1;

    rl_buf_init(&m->raw);
    m->raw_later = (struct rl_prom_later){NULL, 0, 0};
    m->raw_ready = false;
    pthread_mutex_unlock(&m->mu);
    rl_buf_init(&page);
    t0 = uv_hrtime();
    if (rl_prom_later_finish(&later, &text, &page) != 0) {
        rl_buf_reset(&page); /* out of memory: an empty page rather than half of one */
    }
    t1 = uv_hrtime();
    rl_buf_deinit(&text);
    rl_prom_later_deinit(&later);
    pthread_mutex_lock(&m->mu);
    text = m->snap;
    m->snap = page;
    m->snap_at = at;
    m->snap_cost = loop_cost + (t1 - t0);
    m->snap_loop_cost = loop_cost;
    pthread_mutex_unlock(&m->mu);
    rl_buf_deinit(&text); /* the page before */
    pthread_mutex_lock(&m->mu);
}

static enum MHD_Result
metrics_page(struct rl_metrics *m, struct MHD_Connection *conn)
{
    struct rl_buf body;
    struct rl_prom p = {.out = &body, .err = 0};
    enum MHD_Result rc;
    uint64_t cost, loop_cost;

    rl_buf_init(&body);
    if (!metrics_fresh(m)) {
        if (!metrics_snapshot(m, true)) {
            return metrics_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE,
                                "the event loop did not answer in time\n");
        }
        if (m->raw_ready) {
            metrics_format(m);
        }
    }
    if (rl_buf_append(&body, m->snap.data, m->snap.len) != 0) {
        p.err = -ENOMEM;
    }
    cost = m->snap_cost;
    loop_cost = m->snap_loop_cost;
    pthread_mutex_unlock(&m->mu);
    rl_prom_process(&p);
    rl_prom_family(&p, "rl_metrics_render_loop_seconds", "gauge",
                   "Time the event loop spent on this page: copying its figures (the text is "
                   "formatted on the listener's thread).");
    rl_prom_f64(&p, "rl_metrics_render_loop_seconds", NULL, (double)loop_cost / 1e9);
    rl_prom_family(&p, "rl_metrics_render_seconds", "gauge",
                   "Time this page took to make: the loop's part and the formatting.");
    rl_prom_f64(&p, "rl_metrics_render_seconds", NULL, (double)cost / 1e9);
    if (p.err != 0) {
        rl_buf_deinit(&body);
        return metrics_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    }
    rc = metrics_send(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", body.data,
                      body.len);
    rl_buf_deinit(&body);
    return rc;
}

static enum MHD_Result
metrics_handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                const char *version, const char *upload_data, size_t *upload_data_size,
                void **con_cls)
{
    struct rl_metrics *m = cls;
    char line[320];
    bool ready;

    (void)version;
    (void)upload_data;
    if (*con_cls == NULL) {
        struct metrics_conn *c = metrics_conn_of(conn);

        if (c != NULL) { /* the headers are in: a body still has the headers' deadline, and
                            its connection may be taken for a newcomer (metrics_evict) */
            pthread_mutex_lock(&m->cmu);
            if (c->live) {
                metrics_set_deadline(m, c, METRICS_BODY, c->deadline_ms);
            }
            pthread_mutex_unlock(&m->cmu);
        }
        *con_cls = m; /* headers only so far: wait for the body, if any */
        return MHD_YES;
    }
    if (*upload_data_size != 0) {
        *upload_data_size = 0; /* a body is never wanted: drop it */
        return MHD_YES;
    }
    {
        struct metrics_conn *c = metrics_conn_of(conn);

        if (c != NULL) { /* the whole request is in: now the answer's deadline */
            pthread_mutex_lock(&m->cmu);
            if (c->live) {
                metrics_set_deadline(m, c, METRICS_ANSWERING,
                                     metrics_now_ms() + (int64_t)RL_METRICS_TIMEOUT_S * 1000);
            }
            pthread_mutex_unlock(&m->cmu);
        }
    }
    atomic_fetch_add(&m->requests, 1);
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        struct MHD_Response *r = MHD_create_response_from_buffer(
            sizeof("only GET and HEAD\n") - 1, (void *)"only GET and HEAD\n",
            MHD_RESPMEM_PERSISTENT);
        enum MHD_Result rc;

        if (r == NULL) {
            return MHD_NO;
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
        rc = MHD_queue_response(conn, MHD_HTTP_METHOD_NOT_ALLOWED, r);
        MHD_destroy_response(r);
        return rc;
    }
    if (strcmp(url, "/metrics") == 0) {
        return metrics_page(m, conn);
    }
    if (strcmp(url, "/healthz") == 0) {
        if (!metrics_snapshot(m, false)) {
            return metrics_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE,
                                "not alive: the event loop did not answer in time\n");
        }
        pthread_mutex_unlock(&m->mu);
        return metrics_text(conn, MHD_HTTP_OK, "ok\n");
    }
    if (strcmp(url, "/readyz") == 0) {
        if (!metrics_snapshot(m, false)) {
            return metrics_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE,
                                "not ready: the event loop did not answer in time\n");
        }
        ready = m->ready;
        snprintf(line, sizeof(line), "not ready: %s\n", m->why);
        pthread_mutex_unlock(&m->mu);
        return ready ? metrics_text(conn, MHD_HTTP_OK, "ready\n")
                     : metrics_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, line);
    }
    return metrics_text(conn, MHD_HTTP_NOT_FOUND,
                        "not found: this listener serves /metrics, /healthz and /readyz\n");
}

static void
metrics_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[256];

    (void)cls;
    vsnprintf(line, sizeof(line), fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    rl_log_debug("metrics listener: %s", line);
}

/* A listening socket on host:port; returns the fd or a negative errno. */
static int
metrics_listen(const char *host, uint16_t port, uint16_t *bound, char *err, size_t errlen)
{
    struct addrinfo hints, *ai = NULL;
    char ports[8];
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int fd, one = 1, rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(ports, sizeof(ports), "%u", port);
    rc = getaddrinfo(host, ports, &hints, &ai);
    if (rc != 0 || ai == NULL) {
        snprintf(err, errlen, "metrics: bad address %s:%u: %s", host, port, gai_strerror(rc));
        return -EINVAL;
    }
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = -errno;
        freeaddrinfo(ai);
        snprintf(err, errlen, "metrics: socket: %s", strerror(-rc));
        return rc;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
        rc = -errno;
        freeaddrinfo(ai);
        close(fd);
        snprintf(err, errlen, "metrics: cannot listen on %s:%u: %s", host, port, strerror(-rc));
        return rc;
    }
    freeaddrinfo(ai);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                : ((struct sockaddr_in *)&ss)->sin_port);
    }
    return fd;
}

/* Stops the sweeper thread, if it runs, and waits for it. */
static void
metrics_sweeper_stop(struct rl_metrics *m)
{
    if (!m->sweeper_running) {
        return;
    }
    pthread_mutex_lock(&m->cmu);
    m->sweeper_stop = true;
    pthread_cond_signal(&m->ccv);
    pthread_mutex_unlock(&m->cmu);
    pthread_join(m->sweeper, NULL);
    m->sweeper_running = false;
}

static void
metrics_closed(uv_handle_t *h)
{
    struct rl_metrics *m = h->data;

    pthread_cond_destroy(&m->ccv);
    pthread_mutex_destroy(&m->cmu);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    rl_buf_deinit(&m->work);
    rl_prom_later_deinit(&m->work_later);
    rl_buf_deinit(&m->raw);
    rl_prom_later_deinit(&m->raw_later);
    rl_buf_deinit(&m->snap);
    free(m);
}

int
rl_metrics_start(struct rl_metrics **out, uv_loop_t *loop, const char *host, uint16_t port,
                 const struct rl_metrics_ops *ops, char *err, size_t errlen)
{
    struct rl_metrics *m;
    pthread_condattr_t ca;
    int fd;

    *out = NULL;
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        snprintf(err, errlen, "metrics: out of memory");
        return -ENOMEM;
    }
    m->loop = loop;
    m->ops = *ops;
    rl_buf_init(&m->work);
    rl_buf_init(&m->raw);
    rl_buf_init(&m->snap);
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_mutex_init(&m->cmu, NULL);
    pthread_cond_init(&m->ccv, &ca);
    pthread_condattr_destroy(&ca);
    m->sweep_at = INT64_MAX;
    fd = metrics_listen(host, port, &m->port, err, errlen);
    if (fd < 0) {
        pthread_cond_destroy(&m->ccv);
        pthread_mutex_destroy(&m->cmu);
        pthread_cond_destroy(&m->cv);
        pthread_mutex_destroy(&m->mu);
        free(m);
        return fd;
    }
    uv_async_init(loop, &m->async, metrics_async);
    m->async.data = m;
    if (pthread_create(&m->sweeper, NULL, metrics_sweep, m) != 0) {
        close(fd);
        snprintf(err, errlen, "metrics: cannot start the listener's sweeper thread");
        uv_close((uv_handle_t *)&m->async, metrics_closed);
        return -EAGAIN;
    }
    m->sweeper_running = true;
    /* The limits and what they are for: "the listener", above. */
    m->daemon = MHD_start_daemon(
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, metrics_accept, m, metrics_handler,
        m, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)METRICS_MHD_LIMIT, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)METRICS_PER_ADDRESS, MHD_OPTION_NOTIFY_CONNECTION, metrics_notify, m,
        MHD_OPTION_NOTIFY_COMPLETED, metrics_completed, m, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)RL_METRICS_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32768,
        MHD_OPTION_EXTERNAL_LOGGER, metrics_mhd_log, NULL, MHD_OPTION_END);
    if (m->daemon == NULL) {
        close(fd);
        metrics_sweeper_stop(m);
        snprintf(err, errlen, "metrics: libmicrohttpd would not start on %s:%u", host, port);
        uv_close((uv_handle_t *)&m->async, metrics_closed);
        return -EIO;
    }
    *out = m;
    return 0;
}

uint16_t
rl_metrics_port(const struct rl_metrics *m)
{
    return m->port;
}

uint64_t
rl_metrics_requests(const struct rl_metrics *m)
{
    return atomic_load(&((struct rl_metrics *)m)->requests);
}

void
rl_metrics_stop(struct rl_metrics *m)
{
    if (m == NULL) {
        return;
    }
    pthread_mutex_lock(&m->mu);
    m->stopping = true; /* a request waiting for this (busy) loop gives up now */
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    metrics_sweeper_stop(m);
    MHD_stop_daemon(m->daemon); /* joins the HTTP thread; closes the listening socket */
    uv_close((uv_handle_t *)&m->async, metrics_closed);
}
