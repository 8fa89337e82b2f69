/*
 * logscan: a hand-written line parser over large blocks, and an open-addressing table of key
 * hashes. The hot path is one memchr for the newline, one pass over the line's bytes, one
 * division for the shard check and one probe into the table; names are unescaped and hashed
 * only the first time a key is seen. Lines that span blocks are carried in a buffer of
 * RL_LOGSCAN_LINE_MAX bytes, so memory does not depend on the input but on its distinct keys.
 */
#include "logscan.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "reqline.h"
#include "shardmap.h"
#include "wire.h"

/* The table grows past 7/10 full: linear probing stays short up to there. */
#define TAB_MIN_BITS 12
#define TAB_FILL_NUM 7
#define TAB_FILL_DEN 10

/* Internal verdicts: 0 for a good line, BAD(reason) for a malformed one (reasons start at 0). */
#define BAD(reason) ((int)(reason) + 1)
#define REASON(bad) ((enum rl_logscan_reason)((bad)-1))

/* Progress: first shown after a second of reading a source, then redrawn every 250 ms. */
#define PROGRESS_AFTER_NS 1000000000ull
#define PROGRESS_EVERY_NS 250000000ull

/* A slot is empty while its count is 0: every stored key has been seen at least once. */
struct slot {
    uint64_t hash;
    uint64_t count;
};

/*
 * Parsed lines wait in a batch of this many while their slots are prefetched: with keys
 * spread over a table larger than the cache, that overlaps the misses instead of paying them
 * one line at a time (1M uniform keys read twice as fast as with no batch).
 */
#define BATCH 16

struct parsed {
    uint64_t hash;
    uint64_t line_no;
    uint32_t shard;
    uint32_t slen, ulen;
    const char *sv, *us; /* in the caller's piece or the carry buffer: valid until flushed */
    bool cached;         /* answered from a router's deny cache: no node's load */
    bool no_rule;        /* NO_RULE: the router answers it wherever the shard is */
};

struct rl_logscan {
    uint32_t nshards;
    uint64_t *load;
    uint64_t *keys;
    struct rl_logscan_result res;

    /* key hash -> count, and where its first-seen name starts in the arena */
    struct slot *tab;
    size_t *name;
    unsigned bits;
    size_t used;
    uint64_t seed;
    char *arena;
    size_t arena_len, arena_cap;

    struct parsed batch[BATCH];
    size_t nbatch;

    /* the source being read */
    const char *src_name;
    uint64_t line_no; /* the line being read, 1-based */
    bool skipping;    /* inside an overlong line, until its newline */
    size_t carry_len; /* bytes of a line begun in an earlier piece */
    char carry[RL_LOGSCAN_LINE_MAX + 1];

    const volatile sig_atomic_t *stop;

    /* progress */
    bool progress;
    bool progress_shown;
    uint64_t src_start_ns, last_draw_ns;
    uint64_t src_bytes, src_size;
    uint64_t src_lines0; /* lines read before this source */
};

const char *
rl_logscan_reason_text(enum rl_logscan_reason r)
{
    return rl_reqline_reason_text((enum rl_reqline_reason)r);
}

/* SplitMix64's finalizer, seeded: the table index, so crafted keys cannot pile up. */
static inline uint64_t
mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline size_t
slot_of(const struct rl_logscan *s, uint64_t hash)
{
    return (size_t)(mix(hash ^ s->seed) >> (64 - s->bits));
}

int
rl_logscan_create(struct rl_logscan **out, uint32_t nshards)
{
    struct rl_logscan *s;

    *out = NULL;
    if (nshards == 0 || nshards > RL_SHARDMAP_SHARDS_MAX) {
        return -EINVAL;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return -ENOMEM;
    }
    s->nshards = nshards;
    s->bits = TAB_MIN_BITS;
    s->load = calloc(nshards, sizeof(*s->load));
    s->keys = calloc(nshards, sizeof(*s->keys));
    s->tab = calloc((size_t)1 << s->bits, sizeof(*s->tab));
    s->name = calloc((size_t)1 << s->bits, sizeof(*s->name));
    if (s->load == NULL || s->keys == NULL || s->tab == NULL || s->name == NULL) {
        rl_logscan_destroy(s);
        return -ENOMEM;
    }
    /* Only the table's layout depends on the seed, never a result: results are sorted. */
    if (getrandom(&s->seed, sizeof(s->seed), GRND_NONBLOCK) != (ssize_t)sizeof(s->seed)) {
        s->seed = rl_clock_mono_ns() * 0x9e3779b97f4a7c15ull;
    }
    s->res.nshards = nshards;
    s->res.load = s->load;
    s->res.keys = s->keys;
    *out = s;
    return 0;
}

void
rl_logscan_destroy(struct rl_logscan *s)
{
    if (s == NULL) {
        return;
    }
    free(s->load);
    free(s->keys);
    free(s->tab);
    free(s->name);
    free(s->arena);
    free(s);
}

void
rl_logscan_set_progress(struct rl_logscan *s, bool on)
{
    s->progress = on;
}

void
rl_logscan_set_stop(struct rl_logscan *s, const volatile sig_atomic_t *stop)
{
    s->stop = stop;
}

const struct rl_logscan_result *
rl_logscan_result(const struct rl_logscan *s)
{
    return &s->res;
}

/*
 * Counts a malformed line, and keeps it as an example if it is among the first ones: a
 * batched line may be judged after a later one, so the examples are kept in line order.
 */
static void
malformed(struct rl_logscan *s, enum rl_logscan_reason r, uint64_t line_no)
{
    struct rl_logscan_bad *bad = s->res.bad;
    uint32_t src = s->res.sources - 1;
    size_t i;

    s->res.lines++;
    s->res.malformed++;
    s->res.reasons[r]++;
    i = s->res.nbad;
    if (i == RL_LOGSCAN_EXAMPLES) {
        if (bad[i - 1].source < src || (bad[i - 1].source == src && bad[i - 1].line < line_no)) {
            return;
        }
        i--;
    } else {
        s->res.nbad++;
    }
    while (i > 0 && bad[i - 1].source == src && bad[i - 1].line > line_no) {
        bad[i] = bad[i - 1];
        i--;
    }
    bad[i] = (struct rl_logscan_bad){.source = src, .line = line_no, .reason = r};
}

static int
tab_grow(struct rl_logscan *s)
{
    unsigned bits = s->bits + 1;
    size_t cap = (size_t)1 << bits, old_cap = (size_t)1 << s->bits, i, j;
    struct slot *tab = calloc(cap, sizeof(*tab));
    size_t *name = malloc(cap * sizeof(*name));

    if (tab == NULL || name == NULL) {
        free(tab);
        free(name);
        return -ENOMEM;
    }
    s->bits = bits;
    for (i = 0; i < old_cap; i++) {
        if (s->tab[i].count == 0) {
            continue;
        }
        j = slot_of(s, s->tab[i].hash);
        while (tab[j].count != 0) {
            j = (j + 1) & (cap - 1);
        }
        tab[j] = s->tab[i];
        name[j] = s->name[i];
    }
    free(s->tab);
    free(s->name);
    s->tab = tab;
    s->name = name;
    return 0;
}

/* names_match's verdict for names that unescape but do not hash to the key. */
#define UNVERIFIED (-1)

/*
 * Whether the (escaped) service and user hash to hash: 0, UNVERIFIED, or
 * BAD(RL_LOGSCAN_NAME) for a bad escape. A "-" may stand for "" or for "-": either may match.
 */
static int
names_match(uint64_t hash, const char *sv, size_t sl, const char *us, size_t ul)
{
    char sbuf[RL_LOGSCAN_LINE_MAX], ubuf[RL_LOGSCAN_LINE_MAX];
    int sn = rl_reqline_unescape(sv, sl, sbuf);
    int un = rl_reqline_unescape(us, ul, ubuf);
    int si, ui;

    if (sn < 0 || un < 0) {
        return BAD(RL_LOGSCAN_NAME);
    }
    /* i = 0: the unescaped text; i = 1: a "-" taken literally. */
    for (si = 0; si < 2; si++) {
        for (ui = 0; ui < 2; ui++) {
            const char *sp = si ? "-" : sbuf;
            const char *up = ui ? "-" : ubuf;
            size_t slen = si ? 1 : (size_t)sn, ulen = ui ? 1 : (size_t)un;

            if ((si && sn != 0) || (ui && un != 0)) {
                continue;
            }
            if (rl_shardmap_key_hash(sp, slen, up, ulen) == hash) {
                return 0;
            }
        }
    }
    return UNVERIFIED;
}

/*
 * Remembers "SERVICE USER" as logged, after one byte that says whether the names were
 * verified ('v') or not ('u'); returns its offset in the arena, or -1.
 */
static int64_t
arena_add(struct rl_logscan *s, bool verified, const char *sv, size_t sl, const char *us, size_t ul)
{
    size_t need = 1 + sl + 1 + ul + 1, off;

    if (s->arena_cap - s->arena_len < need) {
        size_t cap = s->arena_cap ? s->arena_cap * 2 : 1u << 16;
        char *a;

        while (cap - s->arena_len < need) {
            cap *= 2;
        }
        a = realloc(s->arena, cap);
        if (a == NULL) {
            return -1;
        }
        s->arena = a;
        s->arena_cap = cap;
    }
    off = s->arena_len;
    s->arena[off] = verified ? 'v' : 'u';
    memcpy(s->arena + off + 1, sv, sl);
    s->arena[off + 1 + sl] = ' ';
    memcpy(s->arena + off + 1 + sl + 1, us, ul);
    s->arena[off + 1 + sl + 1 + ul] = '\0';
    s->arena_len += need;
    return (int64_t)off;
}

/*
 * Counts one request of a key: 0, BAD(RL_LOGSCAN_NAME) when the key is new and its names
 * are badly escaped, or -ENOMEM.
 */
static int
count_key(struct rl_logscan *s, uint64_t hash, uint32_t shard, const char *sv, size_t sl,
          const char *us, size_t ul)
{
    size_t mask = ((size_t)1 << s->bits) - 1, i = slot_of(s, hash);
    int64_t off;
    int rc;

    for (;;) {
        struct slot *e = &s->tab[i];

        if (e->hash == hash && e->count != 0) {
            e->count++;
            return 0;
        }
        if (e->count == 0) {
            break;
        }
        i = (i + 1) & mask;
    }
    rc = names_match(hash, sv, sl, us, ul);
    if (rc > 0) {
        return rc;
    }
    off = arena_add(s, rc == 0, sv, sl, us, ul);
    if (off < 0) {
        return -ENOMEM;
    }
    s->tab[i].hash = hash;
    s->tab[i].count = 1;
    s->name[i] = (size_t)off;
    s->used++;
    s->keys[shard]++;
    s->res.distinct++;
    s->res.unverified += rc != 0;
    if (s->used * TAB_FILL_DEN > (mask + 1) * TAB_FILL_NUM) {
        return tab_grow(s);
    }
    return 0;
}

/* Parses one line (no newline) into *out: 0, or BAD(reason) (reqline.h's reasons). */
static inline int
parse_line(const struct rl_logscan *s, const char *p, size_t n, struct parsed *out)
{
    struct rl_reqline l;
    int rc = rl_reqline_parse(p, n, s->nshards, &l);

    if (rc != 0) {
        return rc;
    }
    out->hash = l.key_hash;
    out->shard = l.shard;
    out->sv = l.service;
    out->slen = l.slen;
    out->us = l.user;
    out->ulen = l.ulen;
    out->cached = l.cached;
    out->no_rule = l.code == RL_WIRE_NO_RULE;
    return 0;
}

/* Counts the batched lines, in order. Returns 0 or -ENOMEM. */
static int
flush(struct rl_logscan *s)
{
    size_t i;
    int rc = 0;

    for (i = 0; i < s->nbatch && rc == 0; i++) {
        const struct parsed *b = &s->batch[i];

        if (b->cached || b->no_rule) {
            /* The router answered it without asking the node (a refusal it remembered, a
             * service without rules: anyone may send those, for users chosen to land in the
             * shards they like), and would wherever the shard is: not the shard's load. */
            s->res.cached += b->cached;
            s->res.no_rule += b->no_rule;
            s->res.lines++;
            continue;
        }
        rc = count_key(s, b->hash, b->shard, b->sv, b->slen, b->us, b->ulen);
        if (rc > 0) {
            malformed(s, REASON(rc), b->line_no);
            rc = 0;
        } else if (rc == 0) {
            s->load[b->shard]++;
            s->res.requests++;
            s->res.lines++;
        }
    }
    s->nbatch = 0;
    return rc;
}

/* One whole line: parsed now, counted now if malformed, else when its batch is flushed. */
static inline int
line(struct rl_logscan *s, const char *p, size_t n)
{
    struct parsed *b = &s->batch[s->nbatch];
    int rc = parse_line(s, p, n, b);

    if (rc > 0) {
        malformed(s, REASON(rc), s->line_no);
    } else {
        b->line_no = s->line_no;
        __builtin_prefetch(&s->tab[slot_of(s, b->hash)], 1);
        if (++s->nbatch == BATCH) {
            s->line_no++;
            return flush(s);
        }
    }
    s->line_no++;
    return 0;
}

int
rl_logscan_begin(struct rl_logscan *s, const char *name)
{
    s->src_name = name;
    s->line_no = 1;
    s->skipping = false;
    s->carry_len = 0;
    s->res.sources++;
    s->src_start_ns = s->progress ? rl_clock_mono_ns() : 0;
    s->last_draw_ns = 0;
    s->progress_shown = false;
    s->src_bytes = 0;
    s->src_size = 0;
    s->src_lines0 = s->res.lines;
    return 0;
}

int
rl_logscan_feed(struct rl_logscan *s, const char *data, size_t len)
{
    const char *p = data, *end = data + len, *nl;
    size_t take;
    int rc;

    s->res.bytes += len;
    s->src_bytes += len;
    if (s->skipping) {
        nl = memchr(p, '\n', len);
        if (nl == NULL) {
            return 0;
        }
        s->skipping = false;
        s->line_no++;
        p = nl + 1;
    }
    if (s->carry_len > 0) {
        nl = memchr(p, '\n', (size_t)(end - p));
        take = (size_t)((nl != NULL ? nl : end) - p);
        if (s->carry_len + take > RL_LOGSCAN_LINE_MAX) {
            malformed(s, RL_LOGSCAN_TOO_LONG, s->line_no);
            s->carry_len = 0;
            if (nl == NULL) {
                s->skipping = true;
                return 0;
            }
            s->line_no++;
            p = nl + 1;
        } else {
            memcpy(s->carry + s->carry_len, p, take);
            s->carry_len += take;
            if (nl == NULL) {
                return 0;
            }
            /* The carried line is counted before the carry buffer can be reused. */
            rc = line(s, s->carry, s->carry_len);
            if (rc == 0) {
                rc = flush(s);
            }
            s->carry_len = 0;
            if (rc != 0) {
                return rc;
            }
            p = nl + 1;
        }
    }
    while (p < end && (nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        if ((size_t)(nl - p) > RL_LOGSCAN_LINE_MAX) {
            malformed(s, RL_LOGSCAN_TOO_LONG, s->line_no);
            s->line_no++;
        } else if ((rc = line(s, p, (size_t)(nl - p))) != 0) {
            return rc;
        }
        p = nl + 1;
    }
    /* The batch points into data, which the caller may reuse once this returns. */
    rc = flush(s);
    if (rc != 0) {
        return rc;
    }
    take = (size_t)(end - p);
    if (take > RL_LOGSCAN_LINE_MAX) {
        malformed(s, RL_LOGSCAN_TOO_LONG, s->line_no);
        s->skipping = true;
    } else if (take > 0) {
        memcpy(s->carry, p, take);
        s->carry_len = take;
    }
    return 0;
}

int
rl_logscan_end(struct rl_logscan *s)
{
    int rc = 0;

    if (s->carry_len > 0) {
        rc = line(s, s->carry, s->carry_len);
        if (rc == 0) {
            rc = flush(s);
        }
    }
    s->carry_len = 0;
    s->skipping = false;
    return rc;
}

static void
human_bytes(char *buf, size_t len, uint64_t b)
{
    if (b >= (1ull << 30)) {
        snprintf(buf, len, "%.1f GiB", (double)b / (double)(1ull << 30));
    } else {
        snprintf(buf, len, "%.1f MiB", (double)b / (double)(1ull << 20));
    }
}

static void
progress_draw(struct rl_logscan *s, bool last)
{
    uint64_t now = rl_clock_mono_ns();
    char done[32], size[32];
    double secs;

    if (!last &&
        (now - s->src_start_ns < PROGRESS_AFTER_NS || now - s->last_draw_ns < PROGRESS_EVERY_NS)) {
        return;
    }
    if (last && !s->progress_shown) {
        return;
    }
    s->last_draw_ns = now;
    s->progress_shown = true;
    secs = (double)(now - s->src_start_ns) / 1e9;
    human_bytes(done, sizeof(done), s->src_bytes);
    if (s->src_size > 0) {
        human_bytes(size, sizeof(size), s->src_size);
        fprintf(stderr, "\r\033[Krl-rebalance: %s: %s of %s (%.0f%%), %.1fM lines, %.0f MiB/s%s",
                s->src_name, done, size, 100.0 * (double)s->src_bytes / (double)s->src_size,
                (double)(s->res.lines - s->src_lines0) / 1e6,
                (double)s->src_bytes / (secs * (1 << 20)), last ? "\n" : "");
    } else {
        fprintf(stderr, "\r\033[Krl-rebalance: %s: %s, %.1fM lines, %.0f MiB/s%s", s->src_name,
                done, (double)(s->res.lines - s->src_lines0) / 1e6,
                (double)s->src_bytes / (secs * (1 << 20)), last ? "\n" : "");
    }
}

int
rl_logscan_file(struct rl_logscan *s, const char *path)
{
    bool is_stdin = strcmp(path, "-") == 0;
    struct stat st;
    char *buf = NULL;
    ssize_t n;
    int fd, rc = 0;

    fd = is_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -errno;
    }
    buf = malloc(RL_LOGSCAN_BLOCK);
    if (buf == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    rl_logscan_begin(s, is_stdin ? "(standard input)" : path);
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        s->src_size = (uint64_t)st.st_size;
        /* The file is read once, front to back. */
        posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    }
    for (;;) {
        if (s->stop != NULL && *s->stop) {
            rc = -EINTR;
            break;
        }
        n = read(fd, buf, RL_LOGSCAN_BLOCK);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            rc = -errno;
            break;
        }
        if (n == 0) {
            break;
        }
        rc = rl_logscan_feed(s, buf, (size_t)n);
        if (rc != 0) {
            break;
        }
        if (s->progress) {
            progress_draw(s, false);
        }
    }
    if (rc == 0) {
        rc = rl_logscan_end(s);
    }
    if (s->progress) {
        /* Ends the progress line so that what follows starts on a line of its own. */
        progress_draw(s, true);
    }
out:
    free(buf);
    if (!is_stdin) {
        close(fd);
    }
    return rc;
}

static int
key_cmp(const void *x, const void *y)
{
    const struct rl_logscan_key *a = x, *b = y;

    if (a->count != b->count) {
        return a->count > b->count ? -1 : 1;
    }
    return a->hash < b->hash ? -1 : a->hash > b->hash;
}

int
rl_logscan_keys_above(const struct rl_logscan *s, uint64_t min, struct rl_logscan_key **out,
                      size_t *n)
{
    size_t cap = (size_t)1 << s->bits, i, k = 0, cnt = 0;
    struct rl_logscan_key *v;

    *out = NULL;
    *n = 0;
    for (i = 0; i < cap; i++) {
        cnt += s->tab[i].count > min;
    }
    if (cnt == 0) {
        return 0;
    }
    v = calloc(cnt, sizeof(*v));
    if (v == NULL) {
        return -ENOMEM;
    }
    for (i = 0; i < cap; i++) {
        const char *name, *sp;

        if (s->tab[i].count <= min) {
            continue;
        }
        name = s->arena + s->name[i] + 1;
        sp = strchr(name, ' ');
        v[k].verified = name[-1] == 'v';
        v[k].hash = s->tab[i].hash;
        v[k].count = s->tab[i].count;
        v[k].shard = (uint32_t)(s->tab[i].hash % s->nshards);
        v[k].service = name;
        v[k].slen = (size_t)(sp - name);
        v[k].user = sp + 1;
        v[k].ulen = strlen(sp + 1);
        k++;
    }
    qsort(v, k, sizeof(*v), key_cmp);
    *out = v;
    *n = k;
    return 0;
}
