/*
 * prom: the Prometheus text exposition writer (rl_prom_*) every module writes its own
 * families with, the parts of a page the loop only copies and the HTTP thread formats later
 * (rl_prom_defer), the latency histogram and the process figures (metrics.h). The listener
 * that serves the page is metrics.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "metrics.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "utf8.h"

/* ---- the exposition writer ---- */

static void
prom_append(struct rl_prom *p, const char *s, size_t n)
{
    if (p->err == 0 && rl_buf_append(p->out, s, n) != 0) {
        p->err = -ENOMEM;
    }
}

static void
prom_printf(struct rl_prom *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
prom_printf(struct rl_prom *p, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    size_t n;

    va_start(ap, fmt);
    n = rl_log_vformat(line, sizeof(line), fmt, ap);
    va_end(ap);
    prom_append(p, line, n);
}

void
rl_prom_defer(struct rl_prom *p, rl_prom_fmt_fn fmt, void *snap)
{
    struct rl_prom_later *l = p->later;

    if (snap == NULL) {
        if (p->err == 0) {
            p->err = -ENOMEM;
        }
        return;
    }
    if (l != NULL && l->n == l->cap) {
        size_t cap = l->cap != 0 ? 2 * l->cap : 8;
        struct rl_prom_later_part *v = realloc(l->v, cap * sizeof(*v));

        if (v != NULL) {
            l->v = v;
            l->cap = cap;
        }
    }
    if (l == NULL || l->n == l->cap) { /* a plain writer (or no room to defer): now */
        fmt(snap, p);
        free(snap);
        return;
    }
    l->v[l->n++] = (struct rl_prom_later_part){.at = p->out->len, .fmt = fmt, .snap = snap};
}

int
rl_prom_later_finish(struct rl_prom_later *later, const struct rl_buf *text, struct rl_buf *page)
{
    struct rl_prom p = {.out = page, .err = 0, .later = NULL};
    size_t from = 0;

    for (size_t i = 0; i < later->n; i++) {
        struct rl_prom_later_part *part = &later->v[i];

        if (part->at > from) {
            prom_append(&p, text->data + from, part->at - from);
        }
        from = part->at;
        if (p.err == 0) {
            part->fmt(part->snap, &p);
        }
        free(part->snap);
    }
    later->n = 0;
    if (text->len > from) {
        prom_append(&p, text->data + from, text->len - from);
    }
    return p.err;
}

void
rl_prom_later_drop(struct rl_prom_later *later)
{
    for (size_t i = 0; i < later->n; i++) {
        free(later->v[i].snap);
    }
    later->n = 0;
}

void
rl_prom_later_deinit(struct rl_prom_later *later)
{
    rl_prom_later_drop(later);
    free(later->v);
    later->v = NULL;
    later->cap = 0;
}

void
rl_prom_family(struct rl_prom *p, const char *name, const char *type, const char *help)
{
    prom_printf(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void
rl_prom_u64(struct rl_prom *p, const char *name, const char *labels, uint64_t v)
{
    if (labels != NULL && labels[0] != '\0') {
        prom_printf(p, "%s{%s} %llu\n", name, labels, (unsigned long long)v);
    } else {
        prom_printf(p, "%s %llu\n", name, (unsigned long long)v);
    }
}

void
rl_prom_f64(struct rl_prom *p, const char *name, const char *labels, double v)
{
    if (labels != NULL && labels[0] != '\0') {
        prom_printf(p, "%s{%s} %.15g\n", name, labels, v);
    } else {
        prom_printf(p, "%s %.15g\n", name, v);
    }
}

void
rl_prom_one(struct rl_prom *p, const char *name, const char *type, const char *help,
            const char *labels, uint64_t v)
{
    rl_prom_family(p, name, type, help);
    rl_prom_u64(p, name, labels, v);
}

void
rl_prom_build_info(struct rl_prom *p, const char *program, const char *name)
{
    char lab[256];

    rl_prom_one(p, "rl_build_info", "gauge", "The program and version running; always 1.",
                rl_prom_labels(lab, sizeof(lab), "program", program, "version", RL_VERSION,
                               "name", name, NULL),
                1);
}

void
rl_prom_zookeeper(struct rl_prom *p, bool connected, uint64_t expiries)
{
    rl_prom_one(p, "rl_zookeeper_connected", "gauge",
                "1 while the ZooKeeper session is connected (absent with static membership).",
                NULL, connected ? 1 : 0);
    rl_prom_one(p, "rl_zookeeper_session_expiries_total", "counter",
                "ZooKeeper sessions lost for good (a node's costs it its znode and its shards).",
                NULL, expiries);
}

const char *
rl_prom_labels(char *dst, size_t cap, ...)
{
    va_list ap;
    size_t n = 0;
    const char *k;

    if (cap == 0) {
        return dst;
    }
    dst[0] = '\0';
    va_start(ap, cap);
    while ((k = va_arg(ap, const char *)) != NULL) {
        const char *v = va_arg(ap, const char *);
        size_t start = n; /* where this pair begins: cut back here if it cannot end */
        int w = snprintf(dst + n, cap - n, "%s%s=\"", n > 0 ? "," : "", k);

        if (w < 0 || (size_t)w + 2 > cap - n) { /* the name, and room for `"` and NUL */
            dst[start] = '\0';
            break;
        }
        n += (size_t)w;
        /* Whole characters and escapes only, leaving room for the closing `"`. */
        n += rl_utf8_escape(dst + n, cap - n - 1, v != NULL ? v : "", v != NULL ? strlen(v) : 0,
                            RL_UTF8_PROM);
        dst[n++] = '"';
        dst[n] = '\0';
    }
    va_end(ap);
    return dst;
}

/* ---- the histogram ---- */

const uint64_t rl_hist_bounds_ns[RL_HIST_BUCKETS] = {
    1000,     2500,      5000,      10000,      25000,      50000,      100000,
    250000,   500000,    1000000,   2500000,    5000000,    10000000,   25000000,
    50000000, 100000000, 250000000, 1000000000, 2500000000, 5000000000, 10000000000,
};

void
rl_hist_observe(struct rl_hist *h, uint64_t ns, uint64_t n)
{
    unsigned i = 0;

    while (i < RL_HIST_BUCKETS && ns > rl_hist_bounds_ns[i]) {
        i++;
    }
    h->counts[i] += n;
    h->count += n;
    h->sum_ns += ns * n;
}

void
rl_hist_add(struct rl_hist *h, const struct rl_hist *from)
{
    for (unsigned i = 0; i <= RL_HIST_BUCKETS; i++) {
        h->counts[i] += from->counts[i];
    }
    h->count += from->count;
    h->sum_ns += from->sum_ns;
}

void
rl_prom_hist(struct rl_prom *p, const char *name, const char *labels, const struct rl_hist *h)
{
    char series[160], lab[512];
    uint64_t cum = 0;
    const char *sep = labels != NULL && labels[0] != '\0' ? "," : "";
    const char *pre = labels != NULL ? labels : "";

    snprintf(series, sizeof(series), "%s_bucket", name);
    for (unsigned i = 0; i <= RL_HIST_BUCKETS; i++) {
        cum += h->counts[i];
        if (i < RL_HIST_BUCKETS) {
            snprintf(lab, sizeof(lab), "%s%sle=\"%.9g\"", pre, sep,
                     (double)rl_hist_bounds_ns[i] / 1e9);
        } else {
            snprintf(lab, sizeof(lab), "%s%sle=\"+Inf\"", pre, sep);
        }
        rl_prom_u64(p, series, lab, cum);
    }
    snprintf(series, sizeof(series), "%s_sum", name);
    rl_prom_f64(p, series, labels, (double)h->sum_ns / 1e9);
    snprintf(series, sizeof(series), "%s_count", name);
    rl_prom_u64(p, series, labels, h->count);
}

/* ---- process figures ---- */

/* btime from /proc/stat: when the machine booted, in Unix seconds; 0 if unknown. */
static uint64_t
boot_time(void)
{
    FILE *f = fopen("/proc/stat", "re");
    char line[256];
    unsigned long long bt = 0;

    if (f == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "btime %llu", &bt) == 1) {
            break;
        }
    }
    fclose(f);
    return bt;
}

void
rl_prom_process(struct rl_prom *p)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "re");
    size_t n = 0;
    long tick = sysconf(_SC_CLK_TCK);
    long page = sysconf(_SC_PAGESIZE);
    struct rlimit rl;
    DIR *d;
    uint64_t fds = 0;

    if (f != NULL) {
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
    /* Fields after the command name, which is in parentheses and may hold anything. */
    const char *rp = strrchr(buf, ')');
    unsigned long long utime = 0, stime = 0, start = 0, vsize = 0;
    long long rss = 0;
    if (rp != NULL && tick > 0 &&
        sscanf(rp + 2,
               "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d "
               "%llu %llu %lld",
               &utime, &stime, &start, &vsize, &rss) == 5) {
        rl_prom_family(p, "process_cpu_seconds_total", "counter",
                       "User and system CPU time spent, in seconds.");
        rl_prom_f64(p, "process_cpu_seconds_total", NULL, (double)(utime + stime) / (double)tick);
        rl_prom_family(p, "process_resident_memory_bytes", "gauge",
                       "Resident memory size in bytes.");
        rl_prom_u64(p, "process_resident_memory_bytes", NULL,
                    (uint64_t)(rss > 0 ? rss : 0) * (uint64_t)(page > 0 ? page : 4096));
        rl_prom_family(p, "process_virtual_memory_bytes", "gauge",
                       "Virtual memory size in bytes.");
        rl_prom_u64(p, "process_virtual_memory_bytes", NULL, vsize);
        rl_prom_family(p, "process_start_time_seconds", "gauge",
                       "Start time of the process since the Unix epoch, in seconds.");
        rl_prom_f64(p, "process_start_time_seconds", NULL,
                    (double)boot_time() + (double)start / (double)tick);
    }
    d = opendir("/proc/self/fd");
    if (d != NULL) {
        struct dirent *de;

        while ((de = readdir(d)) != NULL) {
            fds += de->d_name[0] != '.';
        }
        closedir(d);
        rl_prom_family(p, "process_open_fds", "gauge", "Number of open file descriptors.");
        rl_prom_u64(p, "process_open_fds", NULL, fds > 0 ? fds - 1 : 0); /* less opendir's */
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl_prom_family(p, "process_max_fds", "gauge",
                       "Maximum number of open file descriptors.");
        rl_prom_u64(p, "process_max_fds", NULL,
                    rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur);
    }
}
