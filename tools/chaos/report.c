/*
 * report: keeps, while a run goes, what its page draws (report.h): per 100 ms bucket the
 * answers by outcome and a latency histogram, in atomics the traffic threads add to without
 * a lock, and when each step began, was done and ended; then writes the page: the markup and
 * script of report_page.c around two JSON documents, the timeline (written here through the
 * project's JSON writer) and the verdict (verdict.c's file, copied in). The page needs no
 * network: everything is inline. Not the drawing (the page's script does it) nor the judging.
 */
#include "report.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chaos.h"
#include "json.h"
#include "reqline.h"

/* The request log's NODE for a backstop answer (router/backstop.h's RL_BACKSTOP_LOG_NODE,
 * a documented part of the log's format: common/reqline.h). */
#define CH_BACKSTOP_NODE "backstop"

/* Latency bins: exact below 8 us, then 8 a power of two up to 2^27 us (134 s), the last
 * bin holding anything slower. */
#define LAT_SUB 8
#define LAT_BINS (LAT_SUB + 24 * LAT_SUB)
/* Answers keep coming after traffic stops (the routers' deadlines, the drain of the last
 * replies: deadline + margin + 2 s at most); later ones count in the last bucket. */
#define TAIL_MS 10000
/* The verdict's JSON is small (a few KB); more than this is not a verdict rl-chaos wrote. */
#define VERDICT_MAX (4 << 20)

struct bucket {
    _Atomic uint32_t count[CH_OUT_COUNT];
    _Atomic uint32_t lat[LAT_BINS];
    uint32_t logged[2]; /* backstop answers in the routers' logs: allowed, limited */
};

struct ch_report {
    const struct ch_scenario *sc;
    int64_t t0_ms, t0_us, stop_ms;
    int nbuckets;
    struct bucket *b;
    int64_t step_at[CH_STEPS_MAX][3]; /* wall clock per ch_step_mark; 0: not reached */
    /* the routers' request logs: how many were read, the backstop answers in them (allowed,
     * limited), and those no answer the client counted could be matched to */
    int logs_read;
    uint64_t logged[2], unmatched[2];
};

static const char *const outcome_names[CH_OUT_COUNT] = {
    "allowed",          "limited",          "fail_open", "fail_closed",
    "backstop_allowed", "backstop_limited", "error",     "lost",
    "unsent"};

struct ch_report *
ch_report_new(const struct ch_scenario *sc)
{
    struct ch_report *rep = calloc(1, sizeof(*rep));

    if (rep == NULL) {
        return NULL;
    }
    rep->sc = sc;
    rep->nbuckets =
        (int)((sc->duration_ms + sc->deadline_ms + sc->margin_ms + TAIL_MS) / CH_REPORT_BUCKET_MS) +
        1;
    rep->b = calloc((size_t)rep->nbuckets, sizeof(*rep->b));
    if (rep->b == NULL) {
        free(rep);
        return NULL;
    }
    return rep;
}

void
ch_report_free(struct ch_report *rep)
{
    if (rep != NULL) {
        free(rep->b);
        free(rep);
    }
}

void
ch_report_start(struct ch_report *rep, int64_t t0_ms, int64_t t0_us)
{
    if (rep != NULL) {
        rep->t0_ms = t0_ms;
        rep->t0_us = t0_us;
    }
}

void
ch_report_stop(struct ch_report *rep, int64_t t_ms)
{
    if (rep != NULL) {
        rep->stop_ms = t_ms;
    }
}

enum ch_outcome
ch_report_outcome(uint8_t code)
{
    switch (code) {
    case 0:
        return CH_OUT_ALLOWED;
    case 1:
        return CH_OUT_LIMITED;
    case 2:
        return CH_OUT_FAIL_OPEN;
    case 3:
        return CH_OUT_FAIL_CLOSED;
    case CH_CODE_LOST:
        return CH_OUT_LOST;
    default:
        return CH_OUT_ERROR;
    }
}

int
ch_report_lat_bin(int64_t us)
{
    int oct = 0;
    int bin;

    if (us < LAT_SUB) {
        return us < 0 ? 0 : (int)us;
    }
    while ((us >> (oct + 1)) != 0) {
        oct++; /* us's highest bit: oct >= 3 */
    }
    bin = LAT_SUB + (oct - 3) * LAT_SUB + (int)((us >> (oct - 3)) & (LAT_SUB - 1));
    return bin < LAT_BINS ? bin : LAT_BINS - 1;
}

double
ch_report_bin_us(int bin)
{
    int oct, sub;

    if (bin < LAT_SUB) {
        return bin;
    }
    oct = (bin - LAT_SUB) / LAT_SUB + 3;
    sub = (bin - LAT_SUB) % LAT_SUB;
    /* [(8 + sub) << (oct - 3), (9 + sub) << (oct - 3)): its middle */
    return ((double)(LAT_SUB + sub) + 0.5) * (double)(1LL << (oct - 3));
}

/* The bucket of a moment us after traffic started; before it, the first; past the end, the
 * last. */
static struct bucket *
bucket_at(const struct ch_report *rep, int64_t us)
{
    int64_t i = us / (CH_REPORT_BUCKET_MS * 1000);

    i = i < 0 ? 0 : i >= rep->nbuckets ? rep->nbuckets - 1 : i;
    return &rep->b[i];
}

void
ch_report_answer(struct ch_report *rep, uint8_t code, int64_t t_send_us, int64_t t_done_us)
{
    enum ch_outcome o = ch_report_outcome(code);

    if (rep == NULL || rep->t0_us == 0) {
        return;
    }
    atomic_fetch_add_explicit(&bucket_at(rep, t_done_us - rep->t0_us)->count[o], 1,
                              memory_order_relaxed);
    if (o != CH_OUT_LOST) {
        atomic_fetch_add_explicit(
            &bucket_at(rep, t_send_us - rep->t0_us)->lat[ch_report_lat_bin(t_done_us - t_send_us)],
            1, memory_order_relaxed);
    }
}

void
ch_report_unsent(struct ch_report *rep, int64_t now_us)
{
    if (rep != NULL && rep->t0_us != 0) {
        atomic_fetch_add_explicit(&bucket_at(rep, now_us - rep->t0_us)->count[CH_OUT_UNSENT], 1,
                                  memory_order_relaxed);
    }
}

void
ch_report_step(struct ch_report *rep, int si, enum ch_step_mark mark, int64_t t_ms)
{
    if (rep != NULL && si >= 0 && si < CH_STEPS_MAX) {
        rep->step_at[si][mark] = t_ms;
    }
}

int
ch_report_read_reqlog(struct ch_report *rep, const char *path)
{
    FILE *f;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;

    if (rep == NULL || rep->t0_ms == 0) {
        return 0;
    }
    f = fopen(path, "r");
    if (f == NULL) {
        return errno == ENOENT ? 0 : -errno;
    }
    rep->logs_read++;
    while ((n = getline(&line, &cap, f)) > 0) {
        struct rl_reqline l;
        int64_t i;
        int kind;

        if (line[n - 1] == '\n') {
            n--;
        }
        if (rl_reqline_parse(line, (size_t)n, 0, &l) != 0 || l.cached ||
            l.nlen != strlen(CH_BACKSTOP_NODE) || memcmp(l.node, CH_BACKSTOP_NODE, l.nlen) != 0 ||
            (l.code != 1 && l.code != 2)) {
            continue; /* not a backstop answer (or a torn last line of a killed router) */
        }
        kind = l.code == 2 ? 0 : 1; /* FAIL_OPEN: an allowance; LIMITED: a refusal */
        i = ((int64_t)l.ts_ms - rep->t0_ms) / CH_REPORT_BUCKET_MS;
        i = i < 0 ? 0 : i >= rep->nbuckets ? rep->nbuckets - 1 : i;
        rep->b[i].logged[kind]++;
        rep->logged[kind]++;
    }
    free(line);
    fclose(f);
    return 0;
}

void
ch_report_backstop(struct ch_report *rep)
{
    static const enum ch_outcome from[2] = {CH_OUT_FAIL_OPEN, CH_OUT_LIMITED};
    static const enum ch_outcome to[2] = {CH_OUT_BACKSTOP_ALLOWED, CH_OUT_BACKSTOP_LIMITED};

    if (rep == NULL) {
        return;
    }
    for (int k = 0; k < 2; k++) {
        uint64_t owed = 0;

        for (int i = 0; i < rep->nbuckets; i++) {
            owed += rep->b[i].logged[k];
            /* this bucket, then the one before (the log's clock and the client's agree to a
             * few ms, not exactly), then the next ones */
            for (int d = 0; d <= 1 && d <= i && owed > 0; d++) {
                struct bucket *b = &rep->b[i - d];
                uint64_t have = atomic_load(&b->count[from[k]]);
                uint64_t take = owed < have ? owed : have;

                atomic_store(&b->count[from[k]], (uint32_t)(have - take));
                atomic_fetch_add(&b->count[to[k]], (uint32_t)take);
                owed -= take;
            }
        }
        rep->unmatched[k] = owed;
    }
}

/* ---- the page -------------------------------------------------------------------------- */

/* How many buckets the page shows: the run's duration, and any later answers. */
static int
shown_buckets(const struct ch_report *rep)
{
    int n = (int)((rep->sc->duration_ms + CH_REPORT_BUCKET_MS - 1) / CH_REPORT_BUCKET_MS);

    for (int i = rep->nbuckets - 1; i >= n; i--) {
        for (int k = 0; k < CH_OUT_COUNT; k++) {
            if (atomic_load(&rep->b[i].count[k]) != 0) {
                return i + 1;
            }
        }
    }
    return n < rep->nbuckets ? n : rep->nbuckets;
}

/* The latency (ms) below which a share p of bucket i's answers came; false when none. */
static bool
percentile_ms(const struct bucket *b, double p, double *out)
{
    uint64_t n = 0, want, seen = 0;

    for (int k = 0; k < LAT_BINS; k++) {
        n += atomic_load(&b->lat[k]);
    }
    if (n == 0) {
        return false;
    }
    want = (uint64_t)(p * (double)n + 0.999999);
    want = want < 1 ? 1 : want;
    for (int k = 0; k < LAT_BINS; k++) {
        seen += atomic_load(&b->lat[k]);
        if (seen >= want) {
            *out = ch_report_bin_us(k) / 1000.0;
            return true;
        }
    }
    return false;
}

/* "at 4s kill node b" without "at 4s ". */
static const char *
step_label(const struct ch_step *st)
{
    const char *s = st->text;

    if (strncmp(s, "at ", 3) == 0) {
        const char *sp = strchr(s + 3, ' ');

        s = sp != NULL ? sp + 1 : s;
    }
    return s;
}

static bool
same_target(const struct ch_step *a, const struct ch_step *b)
{
    return a->target == b->target && (a->target == CH_ZOOKEEPER || a->index == b->index);
}

/* When step si's fault ends on the page: its `for`; a kill or stop without one, when the
 * same target was started again (or at the end); anything else, when it was done. */
static int64_t
fault_end(const struct ch_report *rep, int si)
{
    const struct ch_scenario *sc = rep->sc;
    const struct ch_step *st = &sc->steps[si];
    int64_t from = rep->step_at[si][CH_STEP_BEGIN], best = 0;

    if (st->for_ms > 0) {
        return rep->step_at[si][CH_STEP_END] != 0 ? rep->step_at[si][CH_STEP_END] : rep->stop_ms;
    }
    if (st->action != CH_KILL && st->action != CH_TERM && st->action != CH_STOP) {
        return rep->step_at[si][CH_STEP_DONE] != 0 ? rep->step_at[si][CH_STEP_DONE] : from;
    }
    for (int k = 0; k < sc->nsteps; k++) {
        const struct ch_step *o = &sc->steps[k];
        int64_t at = rep->step_at[k][CH_STEP_DONE];
        bool starts = st->action == CH_STOP ? o->action == CH_START : o->action == CH_RESTART;

        if (k != si && starts && same_target(st, o) && at != 0 &&
            rep->step_at[k][CH_STEP_BEGIN] >= from && (best == 0 || at < best)) {
            best = at;
        }
    }
    return best != 0 ? best : rep->stop_ms;
}

static void
write_scenario(struct rl_json *js, const struct ch_scenario *sc)
{
    rl_json_key(js, "scenario");
    rl_json_begin_object(js);
    rl_json_kv_str(js, "name", sc->name);
    rl_json_kv_str(js, "description", sc->description);
    rl_json_kv_i64(js, "nodes", sc->nodes);
    rl_json_kv_i64(js, "routers", sc->routers);
    rl_json_kv_u64(js, "shards", sc->shards);
    rl_json_kv_u64(js, "rate", sc->rate);
    rl_json_kv_u64(js, "users", sc->users);
    rl_json_kv_i64(js, "duration_ms", sc->duration_ms);
    rl_json_kv_i64(js, "session_timeout_ms", sc->session_timeout_ms);
    rl_json_kv_i64(js, "deadline_ms", sc->deadline_ms);
    rl_json_kv_i64(js, "margin_ms", sc->margin_ms);
    rl_json_key(js, "services");
    rl_json_begin_array(js);
    for (int i = 0; i < sc->nservices; i++) {
        rl_json_begin_object(js);
        rl_json_kv_str(js, "name", sc->services[i].name);
        rl_json_kv_str(js, "limit", sc->services[i].limit);
        rl_json_kv_str(js, "failure", sc->services[i].fail_closed ? "closed" : "open");
        rl_json_end_object(js);
    }
    rl_json_end_array(js);
    rl_json_end_object(js);
}

static void
write_series(struct rl_json *js, const struct ch_report *rep, int n)
{
    static const double ps[2] = {0.5, 0.99};
    static const char *const pnames[2] = {"p50", "p99"};

    rl_json_key(js, "series");
    rl_json_begin_object(js);
    for (int k = 0; k < CH_OUT_COUNT; k++) {
        rl_json_key(js, outcome_names[k]);
        rl_json_begin_array(js);
        for (int i = 0; i < n; i++) {
            rl_json_u64(js, atomic_load(&rep->b[i].count[k]));
        }
        rl_json_end_array(js);
    }
    rl_json_end_object(js);
    rl_json_key(js, "latency_ms");
    rl_json_begin_object(js);
    for (int p = 0; p < 2; p++) {
        rl_json_key(js, pnames[p]);
        rl_json_begin_array(js);
        for (int i = 0; i < n; i++) {
            double v;

            if (percentile_ms(&rep->b[i], ps[p], &v)) {
                rl_json_f64(js, v, 3);
            } else {
                rl_json_null(js);
            }
        }
        rl_json_end_array(js);
    }
    rl_json_end_object(js);
}

static void
write_faults(struct rl_json *js, const struct ch_report *rep)
{
    const struct ch_scenario *sc = rep->sc;

    rl_json_key(js, "faults");
    rl_json_begin_array(js);
    for (int i = 0; i < sc->nsteps; i++) {
        const char *label = step_label(&sc->steps[i]), *sp = strchr(label, ' ');
        int64_t from = rep->step_at[i][CH_STEP_BEGIN], to;

        if (from == 0) {
            continue; /* never reached */
        }
        to = fault_end(rep, i);
        to = to < from ? from : to;
        rl_json_begin_object(js);
        rl_json_kv_str(js, "label", label);
        rl_json_key(js, "kind");
        rl_json_strn(js, label, sp != NULL ? (size_t)(sp - label) : strlen(label));
        rl_json_kv_i64(js, "step", i);
        rl_json_kv_i64(js, "from_ms", from - rep->t0_ms);
        rl_json_kv_i64(js, "to_ms", to - rep->t0_ms);
        rl_json_end_object(js);
    }
    rl_json_end_array(js);
}

/* ZooKeeper's membership as the observer read it (the count at the start, then each change
 * within what the page shows), and the run's event log. */
static void
write_views_events(struct rl_json *js, const struct ch_report *rep, const struct ch_run *r,
                   int64_t end_ms)
{
    int first = 0, last_n = -1;

    for (int k = 0; k < r->nviews; k++) {
        first = r->views[k].t_ms <= rep->t0_ms ? k : first;
    }
    rl_json_key(js, "members");
    rl_json_begin_array(js);
    for (int k = first; k < r->nviews && r->views[k].t_ms - rep->t0_ms <= end_ms; k++) {
        int64_t t = r->views[k].t_ms - rep->t0_ms;

        if (r->views[k].nmembers == last_n) {
            continue;
        }
        last_n = r->views[k].nmembers;
        rl_json_begin_object(js);
        rl_json_kv_i64(js, "t_ms", t < 0 ? 0 : t);
        rl_json_kv_i64(js, "n", last_n);
        rl_json_end_object(js);
    }
    rl_json_end_array(js);
    rl_json_key(js, "events");
    rl_json_begin_array(js);
    for (int k = 0; k < r->nevents; k++) {
        rl_json_begin_object(js);
        rl_json_kv_i64(js, "t_ms", r->events[k].t_ms - rep->t0_ms);
        rl_json_kv_str(js, "text", r->events[k].text);
        rl_json_end_object(js);
    }
    rl_json_end_array(js);
}

/* The timeline as JSON into a string (malloc'd, *len set), or NULL. */
static char *
timeline_json(const struct ch_report *rep, const struct ch_run *r, size_t *len)
{
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    struct rl_json js;
    int n = shown_buckets(rep), rc;

    if (f == NULL) {
        return NULL;
    }
    rl_json_init(&js, f);
    rl_json_begin_object(&js);
    write_scenario(&js, rep->sc);
    rl_json_kv_i64(&js, "bucket_ms", CH_REPORT_BUCKET_MS);
    rl_json_kv_i64(&js, "nbuckets", n);
    rl_json_kv_i64(&js, "stop_ms", rep->stop_ms != 0 ? rep->stop_ms - rep->t0_ms : 0);
    write_series(&js, rep, n);
    rl_json_key(&js, "backstop");
    rl_json_begin_object(&js);
    rl_json_kv_i64(&js, "logs_read", rep->logs_read);
    rl_json_kv_u64(&js, "logged_allowed", rep->logged[0]);
    rl_json_kv_u64(&js, "logged_limited", rep->logged[1]);
    rl_json_kv_u64(&js, "unmatched", rep->unmatched[0] + rep->unmatched[1]);
    rl_json_end_object(&js);
    write_faults(&js, rep);
    write_views_events(&js, rep, r, (int64_t)n * CH_REPORT_BUCKET_MS);
    rl_json_end_object(&js);
    rc = rl_json_finish(&js);
    if (fclose(f) != 0 || rc != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* JSON inside <script>: a '<' (only ever in a string) as \u003c, so no "</script>" in a
 * user's text can end the element. */
static void
put_json(FILE *f, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '<') {
            fputs("\\u003c", f);
        } else {
            fputc(s[i], f);
        }
    }
}

/* The verdict's JSON (malloc'd, *len set), or NULL when there is none to read. */
static char *
read_verdict(const char *path, size_t *len)
{
    FILE *f = path != NULL ? fopen(path, "rb") : NULL;
    char *buf;

    if (f == NULL) {
        return NULL;
    }
    buf = malloc(VERDICT_MAX);
    *len = buf != NULL ? fread(buf, 1, VERDICT_MAX, f) : 0;
    fclose(f);
    if (buf != NULL && (*len == 0 || *len == VERDICT_MAX || buf[0] != '{')) {
        free(buf);
        buf = NULL;
    }
    return buf;
}

int
ch_report_write(const struct ch_report *rep, const struct ch_run *r, const char *dir,
                const char *verdict_json)
{
    char path[4096];
    size_t tlen = 0, vlen = 0;
    char *timeline, *verdict;
    FILE *f;
    int rc = 0;

    if (rep == NULL) {
        return 0;
    }
    snprintf(path, sizeof(path), "%s/index.html", dir);
    timeline = timeline_json(rep, r, &tlen);
    verdict = read_verdict(verdict_json, &vlen);
    f = fopen(path, "w");
    if (timeline == NULL || f == NULL) {
        fprintf(stderr, "rl-chaos: %s: %s\n", path,
                f == NULL ? strerror(errno) : "cannot build the timeline");
        rc = -1;
    } else {
        fputs(ch_report_page_head, f);
        fputs("<script type=\"application/json\" id=\"timeline-data\">", f);
        put_json(f, timeline, tlen);
        fputs("</script>\n<script type=\"application/json\" id=\"verdict-data\">", f);
        if (verdict != NULL) {
            put_json(f, verdict, vlen);
        } else {
            fputs("null", f);
        }
        fputs("</script>\n", f);
        fputs(ch_report_page_tail, f);
    }
    if (f != NULL && fclose(f) != 0 && rc == 0) {
        fprintf(stderr, "rl-chaos: %s: %s\n", path, strerror(errno));
        rc = -1;
    }
    if (rc == 0) {
        printf("report: %s\n", path);
    }
    free(timeline);
    free(verdict);
    return rc;
}
