/*
 * throttle: open episodes in a fixed array with a free list, found by an open-addressing
 * index (linear probing, backward-shift deletion) on XXH3 of the key; closed episodes in a
 * ring; queries select their top episodes with a bounded heap, and are admitted by a GCRA of
 * their own. See throttle.h.
 */
#include "throttle.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "json.h"
#include "log.h"
#include "logfile.h"
#include "metrics.h"
#include "seed.h"

/* The index's hash of a key, seeded with t's secret seed (seed.h): clients choose users. */
static uint64_t
key_hash(const struct rl_throttle *t, const char *service, size_t slen, const char *endpoint,
         size_t elen, const char *user, size_t ulen)
{
    char buf[RL_WIRE_SERVICE_MAX + RL_WIRE_ENDPOINT_MAX + RL_WIRE_USER_MAX + 2];
    size_t n = 0;

    memcpy(buf + n, service, slen);
    n += slen;
    buf[n++] = '\0';
    if (elen > 0) {
        memcpy(buf + n, endpoint, elen);
        n += elen;
    }
    buf[n++] = '\0';
    memcpy(buf + n, user, ulen);
    n += ulen;
    return XXH3_64bits_withSeed(buf, n, t->seed);
}

/* The events log (throttle.h): lines are formatted through a memory stream into `line`,
 * gathered in `buf`, and written with write(2) once a second (the tick), when buf is full,
 * before a rotation, at a reopen and at the end. */

static int
log_create(struct rl_throttle *t, const char *path)
{
    struct rl_throttle_log *l = calloc(1, sizeof(*l));
    int fd;

    if (l == NULL) {
        return -ENOMEM;
    }
    t->log = l;
    l->fd = -1;
    l->max_size = RL_THROTTLE_LOG_MAX_SIZE_DEFAULT;
    l->keep = RL_THROTTLE_LOG_KEEP_DEFAULT;
    l->rate = RL_THROTTLE_LOG_RATE_DEFAULT;
    l->path = strdup(path);
    l->buf = malloc(RL_THROTTLE_LOG_BUF);
    l->line = malloc(RL_THROTTLE_LINE_MAX);
    if (l->path == NULL || l->buf == NULL || l->line == NULL) {
        return -ENOMEM;
    }
    l->mem = fmemopen(l->line, RL_THROTTLE_LINE_MAX, "w");
    if (l->mem == NULL) {
        return -errno;
    }
    fd = rl_logfile_open(path, &l->size);
    if (fd < 0) {
        return fd;
    }
    l->fd = fd;
    return 0;
}

/* Writes buf out; opens the file first if a reopen failed. The lines are gone either way. */
static void
log_flush(struct rl_throttle *t)
{
    struct rl_throttle_log *l = t->log;
    int rc;

    if (l->len == 0) {
        return;
    }
    if (l->fd < 0) {
        rc = rl_logfile_open(l->path, &l->size);
        if (rc < 0) {
            t->stats.log_errors++;
            l->len = 0;
            return;
        }
        l->fd = rc;
    }
    rc = rl_logfile_write(l->fd, l->buf, l->len);
    if (rc != 0) {
        t->stats.log_errors++;
        rl_log_warn("events log %s: %s", l->path, strerror(-rc));
    } else {
        l->size += l->len;
    }
    l->len = 0;
}

static void
log_close_fd(struct rl_throttle_log *l)
{
    if (l->fd >= 0) {
        close(l->fd);
        l->fd = -1;
    }
}

static void
log_rotate(struct rl_throttle *t)
{
    struct rl_throttle_log *l = t->log;
    int rc;

    log_flush(t);
    log_close_fd(l);
    if (rl_logfile_shift(l->path, l->keep) != 0) {
        t->stats.log_errors++;
    }
    t->stats.log_rotations++;
    rc = rl_logfile_open(l->path, &l->size);
    if (rc < 0) {
        t->stats.log_errors++;
        rl_log_warn("events log %s: %s", l->path, strerror(-rc));
        return;
    }
    l->fd = rc;
}

/* Appends the line formatted in mem: rotates first when it would take the file past
 * max_size (a file holds at least one line, so a line longer than max_size still goes). */
static void
log_put(struct rl_throttle *t)
{
    struct rl_throttle_log *l = t->log;
    long end;
    size_t n;

    fputc('\n', l->mem);
    fflush(l->mem);
    end = ftell(l->mem);
    if (ferror(l->mem) || end <= 0 || (size_t)end >= RL_THROTTLE_LINE_MAX) {
        t->stats.log_errors++; /* cannot happen: a line is at most about 3.7 KB */
        return;
    }
    n = (size_t)end;
    if (l->max_size != 0 && l->size + l->len + n > l->max_size && l->size + l->len > 0) {
        log_rotate(t);
    }
    if (l->len + n > RL_THROTTLE_LOG_BUF) {
        log_flush(t);
    }
    memcpy(l->buf + l->len, l->line, n);
    l->len += n;
}

static void
log_begin(struct rl_throttle_log *l, struct rl_json *j)
{
    rewind(l->mem);
    rl_json_init(j, l->mem);
    rl_json_begin_object(j);
}

/* The summary of the episodes dropped since the last one, if any. */
static void
log_summary(struct rl_throttle *t)
{
    struct rl_throttle_log *l = t->log;
    struct rl_json j;

    if (l->drop_n == 0) {
        return;
    }
    log_begin(l, &j);
    rl_json_kv_u64(&j, "dropped", l->drop_n);
    rl_json_kv_u64(&j, "refused", l->drop_refused);
    rl_json_kv_u64(&j, "from_ms", l->drop_from_ms);
    rl_json_kv_u64(&j, "to_ms", l->drop_to_ms);
    rl_json_kv_str(&j, "node", t->node);
    rl_json_end_object(&j);
    log_put(t);
    l->drop_n = 0;
    l->drop_refused = 0;
}

static void
log_destroy(struct rl_throttle *t)
{
    struct rl_throttle_log *l = t->log;

    if (l == NULL) {
        return;
    }
    if (l->mem != NULL && l->buf != NULL) {
        log_summary(t);
        log_flush(t);
    }
    log_close_fd(l);
    if (l->mem != NULL) {
        fclose(l->mem);
    }
    free(l->line);
    free(l->buf);
    free(l->path);
    free(l);
    t->log = NULL;
}

void
rl_throttle_set_log_bounds(struct rl_throttle *t, uint64_t max_size, uint32_t keep, uint32_t rate)
{
    if (t == NULL || t->log == NULL) {
        return;
    }
    t->log->max_size = max_size;
    t->log->keep = keep;
    t->log->rate = rate;
}

int
rl_throttle_reopen(struct rl_throttle *t)
{
    struct rl_throttle_log *l;
    int fd;

    if (t == NULL || t->log == NULL) {
        return 0;
    }
    l = t->log;
    log_flush(t);
    log_close_fd(l);
    fd = rl_logfile_open(l->path, &l->size);
    if (fd < 0) {
        t->stats.log_errors++;
        return fd;
    }
    l->fd = fd;
    return 0;
}

int
rl_throttle_create(struct rl_throttle **out, uint32_t capacity, const char *node,
                   const char *events_log)
{
    struct rl_throttle *t;

    *out = NULL;
    if (capacity == 0) {
        return 0;
    }
    if (capacity > RL_THROTTLE_MAX) {
        return -EINVAL;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        return -ENOMEM;
    }
    t->cap = capacity;
    t->seed = rl_seed_random(t);
    t->nslots = 1;
    while (t->nslots < 2 * capacity) {
        t->nslots <<= 1;
    }
    t->open = calloc(capacity, sizeof(*t->open));
    t->ring = calloc(capacity, sizeof(*t->ring));
    t->slots = calloc(t->nslots, sizeof(*t->slots));
    t->scratch = calloc(2 * (size_t)capacity, sizeof(*t->scratch));
    if (t->open == NULL || t->ring == NULL || t->slots == NULL || t->scratch == NULL) {
        rl_throttle_destroy(t);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < capacity; i++) {
        t->open[i].next = i + 1;
    }
    t->free_head = 0;
    snprintf(t->node, sizeof(t->node), "%s", node != NULL ? node : "");
    if (events_log != NULL && events_log[0] != '\0') {
        int rc = log_create(t, events_log);

        if (rc != 0) {
            rl_throttle_destroy(t);
            return rc;
        }
    }
    *out = t;
    return 0;
}

void
rl_throttle_destroy(struct rl_throttle *t)
{
    if (t == NULL) {
        return;
    }
    log_destroy(t);
    free(t->open);
    free(t->ring);
    free(t->slots);
    free(t->scratch);
    free(t);
}

static bool
ep_is(const struct rl_throttle_ep *e, uint64_t h, const char *service, size_t slen,
      const char *endpoint, size_t elen, const char *user, size_t ulen)
{
    return e->hash == h && e->slen == slen && e->elen == elen && e->ulen == ulen &&
           memcmp(e->service, service, slen) == 0 && memcmp(e->user, user, ulen) == 0 &&
           (elen == 0 || memcmp(e->endpoint, endpoint, elen) == 0);
}

/* The slot of the key's open episode, or of the empty slot that ends its probe. */
static uint32_t
find_slot(const struct rl_throttle *t, uint64_t h, const char *service, size_t slen,
          const char *endpoint, size_t elen, const char *user, size_t ulen)
{
    uint32_t mask = t->nslots - 1, i = (uint32_t)h & mask;

    while (t->slots[i] != 0 &&
           !ep_is(&t->open[t->slots[i] - 1], h, service, slen, endpoint, elen, user, ulen)) {
        i = (i + 1) & mask;
    }
    return i;
}

/* Removes slot i from the index, shifting back the entries its removal would hide. */
static void
slot_delete(struct rl_throttle *t, uint32_t i)
{
    uint32_t mask = t->nslots - 1, j = i;

    for (;;) {
        uint32_t home;

        j = (j + 1) & mask;
        if (t->slots[j] == 0) {
            break;
        }
        home = (uint32_t)t->open[t->slots[j] - 1].hash & mask;
        /* Entry j may move to i when i lies cyclically in [home, j). */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            t->slots[i] = t->slots[j];
            i = j;
        }
    }
    t->slots[i] = 0;
}

/* Writes closed episode e at now, or counts it as dropped past the second's cap. */
static void
log_episode(struct rl_throttle *t, const struct rl_throttle_ep *e, uint64_t now)
{
    struct rl_throttle_log *l = t->log;
    struct rl_json j;

    if (now >= l->win_ms + 1000 || now < l->win_ms) {
        l->win_ms = now;
        l->win_lines = 0;
    }
    if (l->rate != 0 && l->win_lines >= l->rate) {
        if (l->drop_n == 0 || e->end_ms < l->drop_from_ms) {
            l->drop_from_ms = e->end_ms;
        }
        if (l->drop_n == 0 || e->end_ms > l->drop_to_ms) {
            l->drop_to_ms = e->end_ms;
        }
        l->drop_n++;
        l->drop_refused += e->refused;
        t->stats.log_dropped++;
        return;
    }
    l->win_lines++;
    log_begin(l, &j);
    rl_json_key(&j, "service");
    rl_json_strn(&j, e->service, e->slen);
    rl_json_key(&j, "endpoint");
    rl_json_strn(&j, e->has_endpoint ? e->endpoint : NULL, e->elen);
    rl_json_key(&j, "user");
    rl_json_strn(&j, e->user, e->ulen);
    rl_json_kv_u64(&j, "start_ms", e->start_ms);
    rl_json_kv_u64(&j, "end_ms", e->end_ms);
    rl_json_kv_u64(&j, "refused", e->refused);
    rl_json_kv_str(&j, "ended", rl_wire_ended_name(e->ended));
    rl_json_kv_str(&j, "node", t->node);
    rl_json_end_object(&j);
    log_put(t);
    t->stats.log_lines++;
}

/* Moves the open episode in slot i to the ring, ended at end_ms (now is the clock, for the
 * events log's cap). */
static void
close_slot(struct rl_throttle *t, uint32_t i, uint64_t end_ms, uint32_t ended, uint64_t now)
{
    uint32_t idx = t->slots[i] - 1;
    struct rl_throttle_ep *e = &t->open[idx];
    struct rl_throttle_ep *r = &t->ring[t->ring_head];

    e->end_ms = end_ms;
    e->ended = ended;
    /* Only the used bytes: an episode is mostly its string buffers. */
    memcpy(r, e, offsetof(struct rl_throttle_ep, service));
    memcpy(r->service, e->service, e->slen);
    memcpy(r->endpoint, e->endpoint, e->elen);
    memcpy(r->user, e->user, e->ulen);
    if (t->log != NULL) {
        log_episode(t, r, now);
    }
    t->ring_head = t->ring_head + 1 == t->cap ? 0 : t->ring_head + 1;
    if (t->ring_len < t->cap) {
        t->ring_len++;
    }
    slot_delete(t, i);
    e->next = t->free_head;
    t->free_head = idx;
    t->nopen--;
    t->stats.closed++;
}

void
rl_throttle_limited(struct rl_throttle *t, const char *service, size_t slen, const char *endpoint,
                    size_t elen, const char *user, size_t ulen, uint64_t now,
                    uint64_t retry_after_ms)
{
    uint64_t h;
    uint32_t i, idx;
    struct rl_throttle_ep *e;

    if (t == NULL || slen > RL_WIRE_SERVICE_MAX || elen > RL_WIRE_ENDPOINT_MAX ||
        ulen > RL_WIRE_USER_MAX) {
        return;
    }
    h = key_hash(t, service, slen, endpoint, elen, user, ulen);
    i = find_slot(t, h, service, slen, endpoint, elen, user, ulen);
    if (t->slots[i] != 0) {
        e = &t->open[t->slots[i] - 1];
    } else if (t->free_head == t->cap) {
        t->stats.dropped++;
        return;
    } else {
        idx = t->free_head;
        e = &t->open[idx];
        t->free_head = e->next;
        t->slots[i] = idx + 1;
        t->nopen++;
        t->stats.recorded++;
        e->hash = h;
        e->start_ms = now;
        e->end_ms = 0;
        e->until_ms = 0;
        e->refused = 0;
        e->ended = RL_WIRE_ENDED_OPEN;
        e->slen = (uint16_t)slen;
        e->elen = (uint16_t)elen;
        e->ulen = (uint16_t)ulen;
        e->has_endpoint = elen > 0;
        memcpy(e->service, service, slen);
        if (elen > 0) {
            memcpy(e->endpoint, endpoint, elen);
        }
        memcpy(e->user, user, ulen);
    }
    e->refused++;
    e->last_ms = now;
    if (retry_after_ms != RL_WIRE_RETRY_NEVER) {
        e->until_ms = now + retry_after_ms < now ? UINT64_MAX : now + retry_after_ms;
    } else if (e->until_ms < now) {
        /* Never (a cost over what the limit holds): waiting does not help, so the refusal
         * adds no wait, and the episode goes idle a grace after it. It stayed open until the
         * key was allowed: a user who never came back held an open slot for good. */
        e->until_ms = now;
    }
}

void
rl_throttle_allowed(struct rl_throttle *t, const char *service, size_t slen, const char *endpoint,
                    size_t elen, const char *user, size_t ulen, uint64_t now)
{
    uint64_t h;
    uint32_t i;

    if (!rl_throttle_any_open(t) || slen > RL_WIRE_SERVICE_MAX || elen > RL_WIRE_ENDPOINT_MAX ||
        ulen > RL_WIRE_USER_MAX) {
        return;
    }
    h = key_hash(t, service, slen, endpoint, elen, user, ulen);
    i = find_slot(t, h, service, slen, endpoint, elen, user, ulen);
    if (t->slots[i] != 0) {
        close_slot(t, i, now, RL_WIRE_ENDED_ALLOWED, now);
    }
}

void
rl_throttle_tick(struct rl_throttle *t, uint64_t now)
{
    if (t == NULL) {
        return;
    }
    /* Walk the index rather than the entries: closing needs the slot. A deletion shifts a
     * later entry back into slot i, so i is looked at again before moving on. The entry that
     * wraps from the end to the start may be seen twice or missed: it is only a tick. */
    for (uint32_t i = 0; t->nopen > 0 && i < t->nslots;) {
        const struct rl_throttle_ep *e;

        if (t->slots[i] == 0) {
            i++;
            continue;
        }
        e = &t->open[t->slots[i] - 1];
        if (e->until_ms <= UINT64_MAX - RL_THROTTLE_IDLE_GRACE_MS &&
            e->until_ms + RL_THROTTLE_IDLE_GRACE_MS <= now) {
            close_slot(t, i, e->until_ms, RL_WIRE_ENDED_IDLE, now);
            continue;
        }
        i++;
    }
    if (t->log != NULL) {
        log_summary(t);
        log_flush(t);
    }
}

static int
ep_cmp(const void *a, const void *b)
{
    const struct rl_throttle_ep *x = *(const struct rl_throttle_ep *const *)a;
    const struct rl_throttle_ep *y = *(const struct rl_throttle_ep *const *)b;

    if (x->refused != y->refused) {
        return x->refused > y->refused ? -1 : 1;
    }
    if (x->start_ms != y->start_ms) {
        return x->start_ms < y->start_ms ? -1 : 1;
    }
    return 0;
}

static bool
ep_match(const struct rl_throttle_ep *e, const char *service, size_t slen, bool open,
         const uint64_t *since_ms, uint64_t now)
{
    if (service != NULL && (e->slen != slen || memcmp(e->service, service, slen) != 0)) {
        return false;
    }
    if (since_ms == NULL || open) {
        return true;
    }
    return *since_ms >= now || e->end_ms >= now - *since_ms;
}

/* The worst of the heap h[0..n) (by ep_cmp) goes to its root. */
static void
heap_down(const struct rl_throttle_ep **h, size_t n, size_t i)
{
    for (;;) {
        size_t w = i, l = 2 * i + 1, r = l + 1;

        if (l < n && ep_cmp(&h[l], &h[w]) > 0) {
            w = l;
        }
        if (r < n && ep_cmp(&h[r], &h[w]) > 0) {
            w = r;
        }
        if (w == i) {
            return;
        }
        {
            const struct rl_throttle_ep *x = h[i];

            h[i] = h[w];
            h[w] = x;
        }
        i = w;
    }
}

/* e joins the best `top` kept in the heap h[0..*n): a heap of the worst at its root, so an
 * episode that is not better than the worst kept costs one comparison. */
static void
heap_offer(const struct rl_throttle_ep **h, size_t *n, size_t top,
           const struct rl_throttle_ep *e)
{
    if (*n < top) {
        size_t i = (*n)++;

        h[i] = e;
        while (i > 0 && ep_cmp(&h[i], &h[(i - 1) / 2]) > 0) {
            const struct rl_throttle_ep *x = h[i];

            h[i] = h[(i - 1) / 2];
            h[(i - 1) / 2] = x;
            i = (i - 1) / 2;
        }
    } else if (top > 0 && ep_cmp(&e, &h[0]) < 0) {
        h[0] = e;
        heap_down(h, *n, 0);
    }
}

/*
 * One pass over the open table's index and the ring, keeping the best `top` in a heap
 * (O(n log top), one comparison for most: ~0.1 ms at RL_THROTTLE_MAX, where sorting every
 * episode took milliseconds of the node's loop), then those `top` sorted.
 */
size_t
rl_throttle_query(struct rl_throttle *t, const char *service, size_t slen,
                  const uint64_t *since_ms, uint64_t now, uint32_t top,
                  struct rl_wire_episode *out)
{
    size_t n = 0, k;

    if (t == NULL) {
        return 0;
    }
    for (uint32_t i = 0; i < t->nslots; i++) {
        if (t->slots[i] != 0 &&
            ep_match(&t->open[t->slots[i] - 1], service, slen, true, since_ms, now)) {
            heap_offer(t->scratch, &n, top, &t->open[t->slots[i] - 1]);
        }
    }
    for (uint32_t i = 0; i < t->ring_len; i++) {
        if (ep_match(&t->ring[i], service, slen, false, since_ms, now)) {
            heap_offer(t->scratch, &n, top, &t->ring[i]);
        }
    }
    qsort(t->scratch, n, sizeof(*t->scratch), ep_cmp);
    for (k = 0; k < n && k < top; k++) {
        const struct rl_throttle_ep *e = t->scratch[k];
        struct rl_wire_episode *w = &out[k];

        w->service.ptr = e->service;
        w->service.len = e->slen;
        w->endpoint.ptr = e->has_endpoint ? e->endpoint : NULL;
        w->endpoint.len = e->elen;
        w->user.ptr = e->user;
        w->user.len = e->ulen;
        w->node.ptr = t->node;
        w->node.len = (uint32_t)strlen(t->node);
        w->start_ms = e->start_ms;
        w->end_ms = e->end_ms;
        w->refused = e->refused;
        w->ended = e->ended;
    }
    return k;
}

bool
rl_throttle_query_admit(struct rl_throttle *t, uint64_t now)
{
    const uint64_t interval = 1000u / RL_THROTTLE_QUERY_RATE;
    const uint64_t tolerance = (RL_THROTTLE_QUERY_BURST - 1u) * interval;
    uint64_t tat;

    if (t == NULL) {
        return true; /* nothing recorded: the answer is empty and cheap */
    }
    if (t->query_tat > now + tolerance + interval) {
        t->query_tat = now; /* the clock went back: start over */
    }
    tat = t->query_tat > now ? t->query_tat : now;
    if (tat - now > tolerance) {
        t->stats.query_refused++;
        return false;
    }
    t->query_tat = tat + interval;
    return true;
}

void
rl_throttle_stats(const struct rl_throttle *t, struct rl_throttle_stats *s)
{
    if (t == NULL) {
        memset(s, 0, sizeof(*s));
        return;
    }
    *s = t->stats;
    s->open = t->nopen;
}

void
rl_throttle_metrics(const struct rl_throttle *t, struct rl_prom *p)
{
    struct rl_throttle_stats ts = {0};

    if (t != NULL) {
        rl_throttle_stats(t, &ts);
    }
    rl_prom_one(p, "rl_node_throttle_open", "gauge",
                "Throttling episodes open now (keys refused and not allowed since).", NULL,
                ts.open);
    rl_prom_one(p, "rl_node_throttle_episodes_total", "counter",
                "Throttling episodes opened (a key's first refusal after being allowed).",
                NULL, ts.recorded);
    rl_prom_one(p, "rl_node_throttle_dropped_total", "counter",
                "Refusals not recorded because throttle_events episodes were open.", NULL,
                ts.dropped);
    rl_prom_one(p, "rl_node_throttle_log_lines_total", "counter",
                "Closed episodes written to the events log.", NULL, ts.log_lines);
    rl_prom_one(p, "rl_node_throttle_log_dropped_total", "counter",
                "Closed episodes not written to the events log: past events_log_rate lines in "
                "their second (summed in its summary lines).",
                NULL, ts.log_dropped);
    rl_prom_one(p, "rl_node_throttle_log_rotations_total", "counter",
                "Events-log files rotated for their size (events_log_max_size).", NULL,
                ts.log_rotations);
    rl_prom_one(p, "rl_node_throttle_log_errors_total", "counter",
                "Events-log opens or writes that failed (their lines are lost).", NULL,
                ts.log_errors);
}
