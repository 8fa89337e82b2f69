/*
 * reqlog: the request log, one per process, in at most three buffers. Any thread (the
 * router's workers) formats into `fill` under `mu`; the owner loop's thread (the one given to
 * create) swaps it with `disk` and hands `disk` to uv_fs_write on the thread pool. A worker
 * that finds `fill` half full wakes the owner loop (uv_async) to flush it; one that finds it
 * full while the owner has not taken it yet moves it to `ready` (when empty), which the owner
 * writes first. With `fill` and `ready` full while a write is in flight, lines are dropped
 * (counted): the router's latency never depends on the disk.
 */
#include "reqlog.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "logfile.h"
#include "metrics.h"
#include "reqline.h"

/* A line is at most 20+1+10+1+64+1+10+1+16+1+3*128+1+3*256+1 bytes: RL_REQLINE_MAX
 * leaves room. */
#define REQLOG_FLUSH_MS 1000u

struct rl_reqlog {
    uv_loop_t *loop;
    uv_timer_t timer;
    uv_async_t wake; /* a worker asks the owner loop to flush `fill` */
    pthread_mutex_t mu; /* fill, fill_len, stats, closing */
    uv_thread_t owner;  /* the thread of loop */
    int handles;
    uv_fs_t wreq;
    char *path;
    uv_file fd;
    uint32_t sample;
    uint64_t sample_count; /* requests offered to rl_reqlog_sample (atomic) */
    char *fill;
    size_t fill_len;
    char *disk;
    size_t disk_len;
    char *ready; /* a full `fill` waiting for the owner loop (other threads only); NULL: none */
    size_t ready_len;
    char *spare; /* the third buffer while `ready` is empty */
    bool writing;
    bool reopen;
    bool closing;
    uint64_t size;     /* bytes in the file now (as opened, plus what was written) */
    uint64_t max_size; /* rotate once the file reaches it; 0: never */
    uint32_t keep;     /* rotated files kept: PATH.1 .. PATH.keep */
    struct rl_reqlog_stats stats;
};

/* Counts one event in l->stats (read by other threads under mu). */
static void
reqlog_count(struct rl_reqlog *l, uint64_t *counter)
{
    pthread_mutex_lock(&l->mu);
    (*counter)++;
    pthread_mutex_unlock(&l->mu);
}

static int
reqlog_open(struct rl_reqlog *l)
{
    /* It holds user ids: readable by the owner and its group, not by everyone. */
    int fd = rl_logfile_open(l->path, &l->size);

    if (fd < 0) {
        reqlog_count(l, &l->stats.errors);
        rl_log_error("request log %s: %s", l->path, strerror(-fd));
        return fd;
    }
    l->fd = fd;
    return 0;
}

static void reqlog_close_fd(struct rl_reqlog *l);

/* PATH to PATH.1 ... (logfile.h), and a new PATH. Synchronous renames on the loop thread: a
 * few syscalls per rotation. */
static void
reqlog_rotate(struct rl_reqlog *l)
{
    reqlog_close_fd(l);
    if (rl_logfile_shift(l->path, l->keep) != 0) {
        reqlog_count(l, &l->stats.errors);
    }
    reqlog_count(l, &l->stats.rotations);
    reqlog_open(l);
}

static void
reqlog_close_fd(struct rl_reqlog *l)
{
    uv_fs_t req;

    if (l->fd >= 0) {
        uv_fs_close(NULL, &req, l->fd, NULL);
        uv_fs_req_cleanup(&req);
        l->fd = -1;
    }
}

static void
reqlog_free(uv_handle_t *h)
{
    struct rl_reqlog *l = h->data;

    if (--l->handles > 0) {
        return;
    }
    pthread_mutex_destroy(&l->mu);
    free(l->fill);
    free(l->disk);
    free(l->ready);
    free(l->spare);
    free(l->path);
    free(l);
}

/* Writes `fill` synchronously: only at close, when nothing else may wait on it. */
static void
reqlog_final(struct rl_reqlog *l)
{
    uv_fs_t req;
    uv_buf_t b;

    pthread_mutex_lock(&l->mu);
    if (l->ready != NULL) {
        b = uv_buf_init(l->ready, (unsigned)l->ready_len);
        if (l->fd >= 0 && uv_fs_write(NULL, &req, l->fd, &b, 1, -1, NULL) < 0) {
            l->stats.errors++;
        }
        if (l->fd >= 0) {
            uv_fs_req_cleanup(&req);
        }
    }
    b = uv_buf_init(l->fill, (unsigned)l->fill_len);
    if (l->fd >= 0 && l->fill_len > 0) {
        if (uv_fs_write(NULL, &req, l->fd, &b, 1, -1, NULL) < 0) {
            l->stats.errors++;
        }
        uv_fs_req_cleanup(&req);
    }
    l->fill_len = 0;
    pthread_mutex_unlock(&l->mu);
    reqlog_close_fd(l);
    uv_close((uv_handle_t *)&l->timer, reqlog_free);
    uv_close((uv_handle_t *)&l->wake, reqlog_free);
}

static void reqlog_flush(struct rl_reqlog *l);

static void
reqlog_written(uv_fs_t *req)
{
    struct rl_reqlog *l = req->data;
    bool more;

    if (req->result < 0) {
        pthread_mutex_lock(&l->mu);
        l->stats.errors++;
        pthread_mutex_unlock(&l->mu);
        rl_log_warn("request log %s: %s", l->path, uv_strerror((int)req->result));
    } else {
        l->size += (uint64_t)req->result;
    }
    uv_fs_req_cleanup(req);
    l->writing = false;
    l->disk_len = 0;
    if (l->closing) {
        reqlog_final(l);
        return;
    }
    if (l->max_size != 0 && l->size >= l->max_size) {
        l->reopen = false;
        reqlog_rotate(l);
    } else if (l->reopen) {
        l->reopen = false;
        reqlog_close_fd(l);
        reqlog_open(l);
    }
    /* A buffer that filled while we wrote goes out now rather than at the next tick. */
    pthread_mutex_lock(&l->mu);
    more = l->ready != NULL || l->fill_len >= RL_REQLOG_BUF / 2;
    pthread_mutex_unlock(&l->mu);
    if (more) {
        reqlog_flush(l);
    }
}

static void
reqlog_flush(struct rl_reqlog *l)
{
    uv_buf_t b;
    char *tmp;
    bool empty;

    pthread_mutex_lock(&l->mu);
    empty = l->fill_len == 0 && l->ready == NULL;
    pthread_mutex_unlock(&l->mu);
    if (l->writing || empty) {
        return;
    }
    if (l->fd < 0 && reqlog_open(l) != 0) {
        /* The file cannot be opened (counted in errors); keep the newest lines for later. */
        pthread_mutex_lock(&l->mu);
        l->fill_len = 0;
        if (l->ready != NULL) {
            l->spare = l->ready;
            l->ready = NULL;
        }
        pthread_mutex_unlock(&l->mu);
        return;
    }
    pthread_mutex_lock(&l->mu);
    tmp = l->disk;
    if (l->ready != NULL) {
        /* the older lines first */
        l->disk = l->ready;
        l->disk_len = l->ready_len;
        l->ready = NULL;
        l->spare = tmp;
    } else {
        l->disk = l->fill;
        l->disk_len = l->fill_len;
        l->fill = tmp;
        l->fill_len = 0;
    }
    pthread_mutex_unlock(&l->mu);
    b = uv_buf_init(l->disk, (unsigned)l->disk_len);
    l->wreq.data = l;
    if (uv_fs_write(l->loop, &l->wreq, l->fd, &b, 1, -1, reqlog_written) != 0) {
        pthread_mutex_lock(&l->mu);
        l->stats.errors++;
        pthread_mutex_unlock(&l->mu);
        l->disk_len = 0;
        return;
    }
    l->writing = true;
}

static void
reqlog_tick(uv_timer_t *t)
{
    reqlog_flush(t->data);
}

static void
reqlog_wake(uv_async_t *a)
{
    struct rl_reqlog *l = a->data;

    if (!l->closing) {
        reqlog_flush(l);
    }
}

int
rl_reqlog_create(struct rl_reqlog **out, uv_loop_t *loop, const char *path, uint32_t sample)
{
    struct rl_reqlog *l = calloc(1, sizeof(*l));
    int rc = -ENOMEM;

    if (l == NULL) {
        return -ENOMEM;
    }
    l->loop = loop;
    l->fd = -1;
    l->sample = sample ? sample : 1;
    l->path = strdup(path);
    l->fill = malloc(RL_REQLOG_BUF);
    l->disk = malloc(RL_REQLOG_BUF);
    l->spare = malloc(RL_REQLOG_BUF);
    if (l->path == NULL || l->fill == NULL || l->disk == NULL || l->spare == NULL) {
        goto fail;
    }
    pthread_mutex_init(&l->mu, NULL);
    l->owner = uv_thread_self();
    rc = reqlog_open(l);
    if (rc != 0) {
        pthread_mutex_destroy(&l->mu);
        goto fail;
    }
    uv_async_init(loop, &l->wake, reqlog_wake);
    l->wake.data = l;
    l->handles = 2;
    uv_timer_init(loop, &l->timer);
    l->timer.data = l;
    uv_timer_start(&l->timer, reqlog_tick, REQLOG_FLUSH_MS, REQLOG_FLUSH_MS);
    *out = l;
    return 0;
fail:
    free(l->fill);
    free(l->disk);
    free(l->spare);
    free(l->path);
    free(l);
    return rc;
}

int
rl_reqlog_sample(struct rl_reqlog *l)
{
    uint64_t n;

    if (l->sample == 1) {
        return 1; /* log everything: no count to keep */
    }
    /* Every worker calls this once a request: a counter, not the mutex. */
    n = __atomic_add_fetch(&l->sample_count, 1, __ATOMIC_RELAXED);
    return n % l->sample == 0;
}

void
rl_reqlog_add(struct rl_reqlog *l, uint64_t ts_ms, uint32_t shard, const char *node, uint32_t code,
              uint64_t key_hash, const char *service, size_t slen, const char *user, size_t ulen)
{
    rl_reqlog_add_ex(l, ts_ms, shard, node, code, key_hash, service, slen, user, ulen, false);
}

void
rl_reqlog_add_ex(struct rl_reqlog *l, uint64_t ts_ms, uint32_t shard, const char *node,
                 uint32_t code, uint64_t key_hash, const char *service, size_t slen,
                 const char *user, size_t ulen, bool cached)
{
    rl_reqlog_add_tag(l, ts_ms, shard, node, code, key_hash, service, slen, user, ulen,
                      cached ? RL_REQLINE_TAG_CACHED : RL_REQLINE_TAG_NONE);
}

void
rl_reqlog_add_tag(struct rl_reqlog *l, uint64_t ts_ms, uint32_t shard, const char *node,
                  uint32_t code, uint64_t key_hash, const char *service, size_t slen,
                  const char *user, size_t ulen, enum rl_reqline_tag tag)
{
    uv_thread_t self = uv_thread_self();
    bool wake, moved = false;

    pthread_mutex_lock(&l->mu);
    if (l->closing) {
        pthread_mutex_unlock(&l->mu);
        return;
    }
    if (RL_REQLOG_BUF - l->fill_len < RL_REQLINE_MAX && uv_thread_equal(&l->owner, &self)) {
        /* On the owner loop's thread: flush now, as a lone loop always did. */
        pthread_mutex_unlock(&l->mu);
        reqlog_flush(l);
        pthread_mutex_lock(&l->mu);
    }
    if (RL_REQLOG_BUF - l->fill_len < RL_REQLINE_MAX && l->ready == NULL && l->spare != NULL) {
        /* The owner loop has not taken it yet: it waits as `ready`, a new `fill` goes on. */
        l->ready = l->fill;
        l->ready_len = l->fill_len;
        l->fill = l->spare;
        l->fill_len = 0;
        l->spare = NULL;
        moved = true;
    }
    if (RL_REQLOG_BUF - l->fill_len < RL_REQLINE_MAX) {
        /* `ready` waits too (a write is in flight): drop, counted. */
        l->stats.dropped++;
        pthread_mutex_unlock(&l->mu);
        uv_async_send(&l->wake);
        return;
    }
    wake = l->fill_len < RL_REQLOG_BUF / 2;
    l->fill_len += rl_reqline_format_tag(l->fill + l->fill_len, ts_ms, shard, node, code,
                                       key_hash, service, slen, user, ulen, tag);
    l->stats.lines++;
    /* Half full: the owner loop flushes it now rather than at its next tick. */
    wake = moved || (wake && l->fill_len >= RL_REQLOG_BUF / 2);
    pthread_mutex_unlock(&l->mu);
    if (wake) {
        uv_async_send(&l->wake);
    }
}

void
rl_reqlog_set_rotation(struct rl_reqlog *l, uint64_t max_size, uint32_t keep)
{
    l->max_size = max_size;
    l->keep = keep;
}

void
rl_reqlog_reopen(struct rl_reqlog *l)
{
    if (l->writing) {
        l->reopen = true;
        return;
    }
    reqlog_close_fd(l);
    reqlog_open(l);
}

void
rl_reqlog_stats(const struct rl_reqlog *l, struct rl_reqlog_stats *s)
{
    uint64_t offered = __atomic_load_n(&l->sample_count, __ATOMIC_RELAXED);

    pthread_mutex_lock((pthread_mutex_t *)&l->mu);
    *s = l->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&l->mu);
    s->skipped = l->sample == 1 ? 0 : offered - offered / l->sample;
}

void
rl_reqlog_metrics(const struct rl_reqlog *l, struct rl_prom *p)
{
    struct rl_reqlog_stats ls = {0};

    if (l != NULL) {
        rl_reqlog_stats(l, &ls);
    }
    rl_prom_family(p, "rl_router_request_log_lines_total", "counter",
                   "Lines written to the request log.");
    rl_prom_u64(p, "rl_router_request_log_lines_total", NULL, ls.lines);
    rl_prom_family(p, "rl_router_request_log_dropped_total", "counter",
                   "Request-log lines dropped because the writer fell behind.");
    rl_prom_u64(p, "rl_router_request_log_dropped_total", NULL, ls.dropped);
    rl_prom_family(p, "rl_router_request_log_rotations_total", "counter", "Request-log rotations.");
    rl_prom_u64(p, "rl_router_request_log_rotations_total", NULL, ls.rotations);
}

void
rl_reqlog_close(struct rl_reqlog *l)
{
    pthread_mutex_lock(&l->mu);
    l->closing = true;
    pthread_mutex_unlock(&l->mu);
    uv_timer_stop(&l->timer);
    if (!l->writing) {
        reqlog_final(l);
    }
}
