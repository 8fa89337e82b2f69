/*
 * metrics: a process's HTTP listener for operators (docs/OPERATIONS.md, "Metrics"):
 * GET /metrics (Prometheus text exposition format 0.0.4), GET /healthz (alive: the event
 * loop answers) and GET /readyz (the owner's readiness), served by libmicrohttpd on a thread
 * of its own. Only the loop thread may read the process's counters, so a request asks the
 * loop (uv_async) to render a snapshot and waits for it at most RL_METRICS_LOOP_WAIT_MS: the
 * loop spends one render per scrape (tens of microseconds; families of thousands of series
 * are only copied there, and formatted on the HTTP thread: rl_prom_defer), never a socket
 * operation or a wait, and a loop that is stuck gets 503 answers instead of a stuck scraper.
 * A large page (thousands of services: one whose render and formatting cost
 * RL_METRICS_CACHE_MIN_COST_US or more) is served again, without asking the loop, while it
 * is younger than RL_METRICS_CACHE_FACTOR times that cost (at most RL_METRICS_CACHE_MAX_MS),
 * so parallel or frequent scrapers share one render and one formatting. Process figures
 * (CPU, RSS, descriptors) are read from /proc on the HTTP thread.
 *
 * Also the exposition writer (rl_prom_*) and a fixed-bucket latency histogram, used by the
 * node's and the router's render functions (prom.c; the listener is metrics.c). Not for the
 * framed protocol (conn.h).
 */
#ifndef RL_METRICS_H
#define RL_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "buf.h"

#define RL_METRICS_LOOP_WAIT_MS 1000u /* a request waits this long for the loop's snapshot */
#define RL_METRICS_STUCK_WAIT_MS 50u  /* ... or this long while an earlier wait ran out */
#define RL_METRICS_CACHE_FACTOR 50u    /* a page is served again while younger than 50x its
                                          cost (the loop's render and the formatting) ... */
#define RL_METRICS_CACHE_MAX_MS 1000u  /* ... and at most this old (docs/OPERATIONS.md) */
#define RL_METRICS_CACHE_MIN_COST_US 1000u /* a page cheaper than this is never reused */
#define RL_METRICS_MAX_CONNECTIONS 32u /* HTTP connections at once; more are refused */
#define RL_METRICS_TIMEOUT_S 10u       /* an idle HTTP connection is closed after this */

/*
 * The exposition writer: appends to out; the first allocation failure sticks in err.
 *
 * It is also the one interface through which figures reach the exposition: every module that
 * keeps figures writes its own families (names, types and help texts are its own) from its
 * own state, through a writer of the form
 *
 *     void rl_<module>_metrics(const struct rl_<module> *m, struct rl_prom *p);
 *
 * (rl_listener_metrics, rl_limiter_metrics, rl_keytab_metrics, rl_throttle_metrics,
 * rl_rules_metrics, rl_reqlog_metrics...). A process's render function (node/server.c,
 * router/rmetrics.c) writes only its own families and calls each module's writer; it is
 * never handed a module's stats struct to format.
 */
struct rl_prom_later;

struct rl_prom {
    struct rl_buf *out;
    int err;
    struct rl_prom_later *later; /* NULL: rl_prom_defer formats at once (see there) */
};

/*
 * Families of thousands of series (one per service) are not formatted on the loop: the
 * module's writer copies its figures (counters, and the names the labels need, into one
 * malloc'd block: snap) and hands them here with the function that formats them. On the
 * listener's page, fmt(snap, p) runs later on the listener's HTTP thread and its text takes
 * the place of this call in the page; snap is then freed (free()), and also when a page is
 * dropped unformatted. With a writer whose later is NULL (a test's or a bench's plain
 * rl_prom), fmt runs at once. fmt must use nothing but snap: the loop goes on meanwhile. A
 * NULL snap (its allocation failed) sets err to -ENOMEM.
 */
typedef void (*rl_prom_fmt_fn)(const void *snap, struct rl_prom *p);
void rl_prom_defer(struct rl_prom *p, rl_prom_fmt_fn fmt, void *snap);

/* The parts left for later in one page's render: where in its text each goes. */
struct rl_prom_later {
    struct rl_prom_later_part {
        size_t at; /* offset in the rendered text */
        rl_prom_fmt_fn fmt;
        void *snap;
    } *v;
    size_t n, cap;
};

/* Appends to page the rendered text with each later part formatted at its place, and
 * frees the parts' snapshots (later is left empty). Returns 0 or -ENOMEM (page is then
 * partial). Any thread. */
int rl_prom_later_finish(struct rl_prom_later *later, const struct rl_buf *text,
                         struct rl_buf *page);

/* Frees the parts' snapshots unformatted (later is left empty, its array kept). */
void rl_prom_later_drop(struct rl_prom_later *later);

/* Frees the array too. */
void rl_prom_later_deinit(struct rl_prom_later *later);

/* "# HELP name help" and "# TYPE name type" (type: counter, gauge, histogram). */
void rl_prom_family(struct rl_prom *p, const char *name, const char *type, const char *help);

/* One sample: `name{labels} value`. labels is NULL or the inside of the braces, as built
 * by rl_prom_labels. */
void rl_prom_u64(struct rl_prom *p, const char *name, const char *labels, uint64_t v);
void rl_prom_f64(struct rl_prom *p, const char *name, const char *labels, double v);

/* Builds `k1="v1",k2="v2"` into dst (cap bytes, always terminated) from NULL-ended pairs of
 * label names and values, escaping backslash, double quote and newline in values; any other
 * byte that is not part of a printable UTF-8 character (invalid UTF-8, a control character)
 * becomes the text \xHH (written `\\xHH`: rl_utf8_escape, RL_UTF8_PROM), so the page is
 * valid whatever a value holds. A value cut for room ends on a whole character. Returns
 * dst. */
const char *rl_prom_labels(char *dst, size_t cap, ...);

/* A latency histogram in fixed buckets (upper bounds in rl_hist_bounds_ns: 1 us to 10 s, in
 * steps of 1, 2.5, 5), in nanoseconds; exposed in seconds. The top ones are for the waits of
 * a planned move (handoff_wait, 2 s by default) and a router's deadline. Owned by one
 * thread. */
#define RL_HIST_BUCKETS 21
struct rl_hist {
    uint64_t counts[RL_HIST_BUCKETS + 1]; /* the last: above every bound (+Inf) */
    uint64_t count;
    uint64_t sum_ns;
};

extern const uint64_t rl_hist_bounds_ns[RL_HIST_BUCKETS];

/* Records n observations of ns each. */
void rl_hist_observe(struct rl_hist *h, uint64_t ns, uint64_t n);

/* Adds the observations of `from` to h (one kept by another thread, handed over). */
void rl_hist_add(struct rl_hist *h, const struct rl_hist *from);

/* The family and its _bucket, _sum and _count series (cumulative), with extra labels (or
 * NULL). Call rl_prom_family(p, name, "histogram", help) first. */
void rl_prom_hist(struct rl_prom *p, const char *name, const char *labels,
                  const struct rl_hist *h);

/* What the listener asks of its owner, on the loop thread. */
struct rl_metrics_ops {
    /* Appends the process's own families (the rl_ ones) to p. */
    void (*render)(void *arg, struct rl_prom *p);
    /* Whether the process is ready to serve; if not, why, in why (why_len bytes). */
    bool (*ready)(void *arg, char *why, size_t why_len);
    void *arg;
};

struct rl_metrics;

/*
 * Starts serving on host:port (an IPv4 or IPv6 literal, or "localhost"), port 0 meaning any
 * free port (rl_metrics_port tells which). Returns 0, or a negative errno with a one-line
 * reason in err: -EINVAL for a bad address, -EADDRINUSE, ... Must be called on the loop
 * thread; the loop must run for requests to be answered.
 */
int rl_metrics_start(struct rl_metrics **out, uv_loop_t *loop, const char *host, uint16_t port,
                     const struct rl_metrics_ops *ops, char *err, size_t errlen);

/* The port it listens on. */
uint16_t rl_metrics_port(const struct rl_metrics *m);

/* Scrapes answered since start (any path), for the owner's own figures. */
uint64_t rl_metrics_requests(const struct rl_metrics *m);

/* Stops the HTTP thread (waiting for it), then closes the loop handle and frees m once it is
 * closed (the loop must run for that). NULL is a no-op. On the loop thread. */
void rl_metrics_stop(struct rl_metrics *m);

/* One family of one sample: HELP, TYPE and `name{labels} v`. */
void rl_prom_one(struct rl_prom *p, const char *name, const char *type, const char *help,
                 const char *labels, uint64_t v);

/* rl_build_info{program,version,name} 1. */
void rl_prom_build_info(struct rl_prom *p, const char *program, const char *name);

/* rl_zookeeper_connected and rl_zookeeper_session_expiries_total, for a process with a
 * ZooKeeper session. */
void rl_prom_zookeeper(struct rl_prom *p, bool connected, uint64_t expiries);

/* Appends the process_* families (CPU seconds, resident and virtual memory, open and max
 * descriptors, start time) read from /proc/self; any thread. */
void rl_prom_process(struct rl_prom *p);

#endif
