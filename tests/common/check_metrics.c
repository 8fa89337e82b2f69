/*
 * check_metrics: common/metrics.{c,h}, the exposition writer, the histogram and the HTTP
 * listener on a real loopback socket (harness/httpget.h as the client). Asserted:
 *   - rl_prom_labels escapes backslash, double quote and newline in values, writes each byte
 *     that is not UTF-8 and each control character as the text \xHH (so the labels are
 *     printable UTF-8 whatever a value holds), joins pairs with commas, takes a NULL value as
 *     empty; at every capacity from 0 up it writes nothing past cap, always terminates, and
 *     never leaves an escape or a character cut in half;
 *   - rl_prom_family/u64/f64 write the exposition lines (braces only with labels);
 *   - rl_hist_observe puts a value equal to a bound in that bound's bucket and one above it in
 *     the next (above the last: +Inf), counts n observations, sums ns * n; rl_prom_hist
 *     writes cumulative _bucket series with the documented le values (seconds), the +Inf one
 *     equal to _count, _sum in seconds, and the owner's labels before le;
 *   - the listener, its loop run by a thread of the test: GET /metrics is 200 with
 *     Content-Type text/plain; version=0.0.4, the render callback's text first, then the
 *     process_* families; HEAD has no body; /healthz 200 "ok"; /readyz 200 "ready" or 503
 *     "not ready: <the ready callback's reason>"; an unknown path 404; POST 405 with
 *     Allow: GET, HEAD; rl_metrics_requests counts them; port 0 binds a free port that
 *     rl_metrics_port reports; a bad address is -EINVAL, a port in use -EADDRINUSE;
 *   - a loop that does not run: /metrics and /healthz answer 503 after about
 *     RL_METRICS_LOOP_WAIT_MS (not hang), and 200 once the loop runs;
 *   - 200 idle connections (the limit is RL_METRICS_MAX_CONNECTIONS) neither crash the
 *     listener nor keep it from answering a GET once they are closed;
 *   - 40 concurrent scrapers from one address each get a whole page, those past the
 *     per-address limit (8) refused at once and served when they try again;
 *   - the limits from several addresses: past 8 per address and past
 *     RL_METRICS_MAX_CONNECTIONS in all, a connection is closed at once, not left in the
 *     backlog; a connection that has not sent its headers 5 s after its accept is told 408
 *     and closed, and a kept-alive one quiet for 5 s after its answer is closed.
 */
#include <check.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "buf.h"
#include "httpget.h"
#include "metrics.h"
#include "rltest.h"

#define T_HTTP_MS 5000

static int64_t
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- rl_prom_labels ---- */

START_TEST(labels_escape)
{
    char dst[256];

    ck_assert_str_eq(rl_prom_labels(dst, sizeof(dst), NULL), "");
    ck_assert_str_eq(rl_prom_labels(dst, sizeof(dst), "service", "api", NULL), "service=\"api\"");
    ck_assert_str_eq(rl_prom_labels(dst, sizeof(dst), "service", "api", "code", "allowed", NULL),
                     "service=\"api\",code=\"allowed\"");
    ck_assert_str_eq(rl_prom_labels(dst, sizeof(dst), "v", "a\\b\"c\nd", NULL),
                     "v=\"a\\\\b\\\"c\\nd\"");
    ck_assert_str_eq(rl_prom_labels(dst, sizeof(dst), "v", "\\\\\"\"\n\n", NULL),
                     "v=\"\\\\\\\\\\\"\\\"\\n\\n\"");
    ck_assert_str_eq(rl_prom_labels(dst, sizeof(dst), "empty", "", "none", NULL, NULL),
                     "empty=\"\",none=\"\"");
    /* Printable UTF-8 passes as it is (braces, commas too); a control character other than
     * newline (here a tab) is written as the text \x09, its backslash escaped. */
    ck_assert_str_eq(rl_prom_labels(dst, sizeof(dst), "u", "é\t{},=", NULL), "u=\"é\\\\x09{},=\"");
}
END_TEST

/*
 * Whether s is a prefix-closed run of complete escapes: no backslash without the character
 * it escapes, nothing but \\ \" \n after a backslash, and no bare '"' or newline inside a
 * value. Returns false with *where set at the first bad byte.
 */
static bool
labels_escapes_whole(const char *s, size_t *where)
{
    bool in_value = false;

    for (size_t i = 0; s[i] != '\0'; i++) {
        if (!in_value) {
            if (s[i] == '"') {
                in_value = true;
            } else if (s[i] == '\n' || s[i] == '\\') {
                *where = i;
                return false;
            }
            continue;
        }
        if (s[i] == '\\') {
            if (s[i + 1] != '\\' && s[i + 1] != '"' && s[i + 1] != 'n') {
                *where = i;
                return false;
            }
            i++;
        } else if (s[i] == '"') {
            in_value = false;
        } else if (s[i] == '\n') {
            *where = i;
            return false;
        }
    }
    return true;
}

/* True when s is `k="v"` pairs, joined by commas, each quote closed (or s is empty). */
static bool
labels_pairs_whole(const char *s)
{
    bool in = false;
    size_t quotes = 0;

    for (const char *p = s; *p != '\0'; p++) {
        if (in && *p == '\\' && p[1] != '\0') {
            p++;
            continue;
        }
        if (*p == '"') {
            in = !in;
            quotes++;
        }
    }
    return !in && quotes % 2 == 0 && (s[0] == '\0' || s[strlen(s) - 1] == '"');
}

/* Whether s is valid UTF-8 (RFC 3629, table 3-7 of Unicode: shortest forms, no surrogates,
 * nothing past U+10FFFF) holding no C0 control, DEL nor C1 control. The test's own oracle,
 * by byte ranges. */
static bool
printable_utf8(const char *str, size_t *where)
{
    static const struct {
        unsigned char lo[4], hi[4];
        int n;
    } forms[] = {
        {{0x20}, {0x7e}, 1},
        {{0xc2, 0xa0}, {0xc2, 0xbf}, 2}, /* U+00A0.., past the C1 controls */
        {{0xc3, 0x80}, {0xdf, 0xbf}, 2},
        {{0xe0, 0xa0, 0x80}, {0xe0, 0xbf, 0xbf}, 3},
        {{0xe1, 0x80, 0x80}, {0xec, 0xbf, 0xbf}, 3},
        {{0xed, 0x80, 0x80}, {0xed, 0x9f, 0xbf}, 3},
        {{0xee, 0x80, 0x80}, {0xef, 0xbf, 0xbf}, 3},
        {{0xf0, 0x90, 0x80, 0x80}, {0xf0, 0xbf, 0xbf, 0xbf}, 4},
        {{0xf1, 0x80, 0x80, 0x80}, {0xf3, 0xbf, 0xbf, 0xbf}, 4},
        {{0xf4, 0x80, 0x80, 0x80}, {0xf4, 0x8f, 0xbf, 0xbf}, 4},
    };
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, len = strlen(str);

    while (i < len) {
        size_t f;

        for (f = 0; f < sizeof(forms) / sizeof(forms[0]); f++) {
            int k = 0;

            while (k < forms[f].n && i + (size_t)k < len && s[i + k] >= forms[f].lo[k] &&
                   s[i + k] <= forms[f].hi[k]) {
                k++;
            }
            if (k == forms[f].n) {
                break;
            }
        }
        if (f == sizeof(forms) / sizeof(forms[0])) {
            *where = i;
            return false;
        }
        i += (size_t)forms[f].n;
    }
    return true;
}

/* Whatever bytes a value holds, the labels are printable UTF-8 with only the escapes of the
 * text format: bytes that are not UTF-8 (stray, overlong, surrogate, past U+10FFFF, cut
 * short) and control characters are written as the text \xHH, at every capacity. */
START_TEST(labels_invalid_utf8)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"bad\xff\xfe", "v=\"bad\\\\xff\\\\xfe\""},
        {"\xc0\xaf", "v=\"\\\\xc0\\\\xaf\""},                       /* overlong '/' */
        {"\xe0\x80\xaf", "v=\"\\\\xe0\\\\x80\\\\xaf\""},            /* overlong '/' */
        {"\xed\xa0\x80x", "v=\"\\\\xed\\\\xa0\\\\x80x\""},          /* U+D800 */
        {"\xf4\x90\x80\x80", "v=\"\\\\xf4\\\\x90\\\\x80\\\\x80\""}, /* > U+10FFFF */
        {"caf\xc3", "v=\"caf\\\\xc3\""},                            /* cut short */
        {"\xc2\x85\x7f\x01", "v=\"\\\\xc2\\\\x85\\\\x7f\\\\x01\""}, /* C1, DEL, C0 */
        {"a\"b\\c\nd\re\xff", "v=\"a\\\"b\\\\c\\nd\\\\x0de\\\\xff\""},
        {"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "v=\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""},
    };
    char dst[256], cut[256];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t where = 0;

        rl_prom_labels(dst, sizeof(dst), "v", cases[i].in, NULL);
        RL_CHECK_STR_EQ(dst, cases[i].out);
        RL_CHECK(printable_utf8(dst, &where), "case %zu: byte %zu of [%s]", i, where, dst);
        for (size_t cap = 1; cap <= strlen(dst) + 1; cap++) {
            rl_prom_labels(cut, cap, "v", cases[i].in, "w", cases[i].in, NULL);
            RL_CHECK(printable_utf8(cut, &where), "case %zu cap %zu: byte %zu of [%s]", i, cap,
                     where, cut);
            RL_CHECK(labels_escapes_whole(cut, &where), "case %zu cap %zu: escape cut at %zu", i,
                     cap, where);
            RL_CHECK(labels_pairs_whole(cut), "case %zu cap %zu: [%s]", i, cap, cut);
        }
    }
}
END_TEST

/* A cut value never leaves half of a UTF-8 character. */
START_TEST(labels_utf8_cut)
{
    const char *v = "\xc3\xa9\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"; /* é é € 😀 */
    char dst[64];

    for (size_t cap = 1; cap < 32; cap++) {
        size_t len;

        rl_prom_labels(dst, cap, "k", v, NULL);
        len = strlen(dst);
        RL_CHECK(labels_pairs_whole(dst), "cap %zu: [%s]", cap, dst);
        if (len >= 2) {
            /* The byte before the closing quote ends a character: ASCII or a last
             * continuation byte of a complete sequence. */
            const char *q = strchr(dst, '"');
            size_t vlen = len - (size_t)(q + 1 - dst) - 1;

            for (size_t i = 0; i < vlen;) {
                unsigned char c = (unsigned char)q[1 + i];
                size_t w = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;

                RL_CHECK(i + w <= vlen, "cap %zu: character cut in [%s]", cap, dst);
                i += w;
            }
        }
    }
}
END_TEST

START_TEST(labels_truncation)
{
    static const char *const values[] = {"plain", "a\\b\"c\nd", "\\\\\\\\", "\"\"\"\"\"\"",
                                         "\n\n\n"};
    char full[512], dst[600];

    for (size_t vi = 0; vi < sizeof(values) / sizeof(values[0]); vi++) {
        const char *v = values[vi];
        size_t full_len;

        rl_prom_labels(full, sizeof(full), "key", v, "second", v, NULL);
        full_len = strlen(full);
        for (size_t cap = 0; cap <= full_len + 4; cap++) {
            size_t where = 0, len;

            memset(dst, 0x5a, sizeof(dst));
            RL_CHECK(rl_prom_labels(dst, cap, "key", v, "second", v, NULL) == dst);
            for (size_t i = cap; i < sizeof(dst); i++) {
                RL_CHECK(dst[i] == 0x5a, "cap %zu: byte %zu written (value %zu)", cap, i, vi);
            }
            if (cap == 0) {
                continue;
            }
            len = strnlen(dst, cap);
            RL_CHECK(len < cap, "cap %zu: not terminated (value %zu)", cap, vi);
            RL_CHECK(labels_escapes_whole(dst, &where), "cap %zu: escape cut at %zu in [%s]", cap,
                     where, dst);
            /* Whatever is cut, what is left is whole pairs: every quote opened is closed,
             * and it never ends inside a pair (after `,` or `=`). */
            RL_CHECK(labels_pairs_whole(dst), "cap %zu: a pair left open in [%s]", cap, dst);
            /* Room for it all gives it all: cap == full_len + 1 is exactly enough. */
            if (cap > full_len) {
                RL_CHECK_STR_EQ(dst, full);
            }
        }
    }
}
END_TEST

/* ---- the writer and the histogram ---- */

START_TEST(prom_lines)
{
    struct rl_buf out;
    struct rl_prom p = {.out = &out, .err = 0};
    char lab[64];

    rl_buf_init(&out);
    rl_prom_family(&p, "rl_x_total", "counter", "Things done.");
    rl_prom_u64(&p, "rl_x_total", NULL, 7);
    rl_prom_u64(&p, "rl_x_total", "", 8);
    rl_prom_u64(&p, "rl_x_total", rl_prom_labels(lab, sizeof(lab), "k", "v", NULL), UINT64_MAX);
    rl_prom_f64(&p, "rl_y", NULL, 0.25);
    rl_prom_f64(&p, "rl_y", "k=\"v\"", -1);
    ck_assert_int_eq(p.err, 0);
    ck_assert_int_eq(rl_buf_append(&out, "", 1), 0);
    ck_assert_str_eq((const char *)out.data, "# HELP rl_x_total Things done.\n"
                                             "# TYPE rl_x_total counter\n"
                                             "rl_x_total 7\n"
                                             "rl_x_total 8\n"
                                             "rl_x_total{k=\"v\"} 18446744073709551615\n"
                                             "rl_y 0.25\n"
                                             "rl_y{k=\"v\"} -1\n");
    rl_buf_deinit(&out);
}
END_TEST

/* The le values rl_prom_hist writes, one per rl_hist_bounds_ns. */
static const char *const le_text[RL_HIST_BUCKETS] = {
    "1e-06",   "2.5e-06", "5e-06", "1e-05",  "2.5e-05", "5e-05", "0.0001",
    "0.00025", "0.0005",  "0.001", "0.0025", "0.005",   "0.01",  "0.025",
    "0.05",    "0.1",     "0.25",  "1",      "2.5",     "5",     "10",
};

START_TEST(hist_buckets)
{
    struct rl_hist h;

    /* Each bound belongs to its own bucket (le: less or equal), one more to the next. */
    for (unsigned i = 0; i < RL_HIST_BUCKETS; i++) {
        memset(&h, 0, sizeof(h));
        rl_hist_observe(&h, rl_hist_bounds_ns[i], 1);
        RL_CHECK_UINT_EQ(h.counts[i], 1);
        rl_hist_observe(&h, rl_hist_bounds_ns[i] + 1, 2);
        RL_CHECK_UINT_EQ(h.counts[i + 1], 2);
        if (i > 0) {
            rl_hist_observe(&h, rl_hist_bounds_ns[i - 1] + 1, 4);
            RL_CHECK_UINT_EQ(h.counts[i], 5);
        }
        RL_CHECK_UINT_EQ(h.count, i > 0 ? 7 : 3);
        RL_CHECK(le_text[i] != NULL &&
                     strtod(le_text[i], NULL) * 1e9 == (double)rl_hist_bounds_ns[i],
                 "bound %u", i);
    }
    memset(&h, 0, sizeof(h));
    rl_hist_observe(&h, 0, 1);
    rl_hist_observe(&h, 1000, 2);
    rl_hist_observe(&h, 1001, 1);
    rl_hist_observe(&h, UINT64_C(10000000000), 1);
    rl_hist_observe(&h, UINT64_C(10000000001), 3);
    rl_hist_observe(&h, UINT64_C(3600) * 1000000000, 1);
    rl_hist_observe(&h, 5000, 0);
    ck_assert_uint_eq(h.counts[0], 3);
    ck_assert_uint_eq(h.counts[1], 1);
    ck_assert_uint_eq(h.counts[RL_HIST_BUCKETS - 1], 1);
    ck_assert_uint_eq(h.counts[RL_HIST_BUCKETS], 4);
    ck_assert_uint_eq(h.count, 9);
    ck_assert_uint_eq(h.sum_ns, 2000u + 1001u + UINT64_C(10000000000) + 3u * UINT64_C(10000000001) +
                                    UINT64_C(3600) * 1000000000u);
}
END_TEST

/* Renders h as name with labels (or NULL) and checks every line against what it must be. */
static void
check_hist_text(const struct rl_hist *h, const char *labels)
{
    struct rl_buf out, want;
    struct rl_prom p = {.out = &out, .err = 0};
    char line[512];
    uint64_t cum = 0;
    const char *pre = labels != NULL && labels[0] != '\0' ? labels : NULL;
    const char *sum_line, *nl;
    double sum;

    rl_buf_init(&out);
    rl_buf_init(&want);
    rl_prom_family(&p, "rl_t_seconds", "histogram", "Latency.");
    rl_prom_hist(&p, "rl_t_seconds", labels, h);
    ck_assert_int_eq(p.err, 0);
    ck_assert_int_eq(rl_buf_append(&out, "", 1), 0);

    snprintf(line, sizeof(line), "# HELP rl_t_seconds Latency.\n# TYPE rl_t_seconds histogram\n");
    ck_assert_int_eq(rl_buf_append(&want, line, strlen(line)), 0);
    for (unsigned i = 0; i <= RL_HIST_BUCKETS; i++) {
        cum += h->counts[i];
        snprintf(line, sizeof(line), "rl_t_seconds_bucket{%s%sle=\"%s\"} %llu\n",
                 pre != NULL ? pre : "", pre != NULL ? "," : "",
                 i < RL_HIST_BUCKETS ? le_text[i] : "+Inf", (unsigned long long)cum);
        ck_assert_int_eq(rl_buf_append(&want, line, strlen(line)), 0);
    }
    ck_assert_uint_eq(cum, h->count);
    ck_assert_int_eq(rl_buf_append(&want, "", 1), 0);
    /* The buckets, exactly; then _sum (a float) and _count. */
    ck_assert_int_eq(strncmp((const char *)out.data, (const char *)want.data, want.len - 1), 0);
    sum_line = (const char *)out.data + want.len - 1;
    snprintf(line, sizeof(line), "rl_t_seconds_sum%s%s%s ", pre != NULL ? "{" : "",
             pre != NULL ? pre : "", pre != NULL ? "}" : "");
    ck_assert_msg(strncmp(sum_line, line, strlen(line)) == 0, "sum line: %s", sum_line);
    sum = strtod(sum_line + strlen(line), NULL);
    ck_assert_msg(fabs(sum - (double)h->sum_ns / 1e9) <= 1e-9 * fmax(1.0, sum), "sum %.17g", sum);
    nl = strchr(sum_line, '\n');
    ck_assert_ptr_nonnull(nl);
    snprintf(line, sizeof(line), "rl_t_seconds_count%s%s%s %llu\n", pre != NULL ? "{" : "",
             pre != NULL ? pre : "", pre != NULL ? "}" : "", (unsigned long long)h->count);
    ck_assert_str_eq(nl + 1, line);
    rl_buf_deinit(&out);
    rl_buf_deinit(&want);
}

START_TEST(hist_output)
{
    struct rl_hist h;

    memset(&h, 0, sizeof(h));
    check_hist_text(&h, NULL); /* all zero */
    rl_hist_observe(&h, 0, 1);
    rl_hist_observe(&h, 1000, 2);
    rl_hist_observe(&h, 7000, 5);
    rl_hist_observe(&h, 300000, 1);
    rl_hist_observe(&h, 999999999, 1);
    rl_hist_observe(&h, 2000000000, 2);
    check_hist_text(&h, NULL);
    check_hist_text(&h, "");
    check_hist_text(&h, "service=\"api\",node=\"a\"");
}
END_TEST

/* A deferred part: writes the snap's text as a sample's value. */
static void
defer_fmt(const void *snap, struct rl_prom *p)
{
    rl_prom_u64(p, "rl_later", NULL, strtoull(snap, NULL, 10));
}

static char *
defer_snap(const char *v)
{
    char *s = strdup(v);

    ck_assert_ptr_nonnull(s);
    return s;
}

/* Parts left for later land at their place, in order; with no later list they are written
 * at once, the same bytes; a NULL snap is out of memory; a dropped page frees its parts. */
START_TEST(prom_defer)
{
    struct rl_buf text, page, now;
    struct rl_prom p = {.out = &text, .err = 0}, q = {.out = &now, .err = 0};
    struct rl_prom_later later = {NULL, 0, 0};
    static const char want[] = "rl_a 1\nrl_later 2\nrl_later 3\nrl_b 4\nrl_later 5\n";

    rl_buf_init(&text);
    rl_buf_init(&page);
    rl_buf_init(&now);
    p.later = &later;
    for (int k = 0; k < 2; k++) {
        struct rl_prom *w = k == 0 ? &p : &q;

        rl_prom_u64(w, "rl_a", NULL, 1);
        rl_prom_defer(w, defer_fmt, defer_snap("2"));
        rl_prom_defer(w, defer_fmt, defer_snap("3"));
        rl_prom_u64(w, "rl_b", NULL, 4);
        rl_prom_defer(w, defer_fmt, defer_snap("5"));
        ck_assert_int_eq(w->err, 0);
    }
    ck_assert_uint_eq(later.n, 3);
    ck_assert_int_eq(rl_buf_append(&now, "", 1), 0);
    ck_assert_str_eq(now.data, want); /* the plain writer: at once */
    ck_assert_int_eq(rl_buf_append(&text, "", 1), 0);
    ck_assert_str_eq(text.data, "rl_a 1\nrl_b 4\n"); /* the loop's part alone */
    text.len--;
    ck_assert_int_eq(rl_prom_later_finish(&later, &text, &page), 0);
    ck_assert_uint_eq(later.n, 0);
    ck_assert_int_eq(rl_buf_append(&page, "", 1), 0);
    ck_assert_str_eq(page.data, want);

    rl_prom_defer(&p, defer_fmt, defer_snap("6"));
    rl_prom_defer(&p, defer_fmt, NULL);
    ck_assert_int_eq(p.err, -ENOMEM);
    ck_assert_uint_eq(later.n, 1);
    rl_prom_later_drop(&later); /* freed unformatted: ASan's leak check */
    ck_assert_uint_eq(later.n, 0);
    rl_prom_later_deinit(&later);
    rl_buf_deinit(&text);
    rl_buf_deinit(&page);
    rl_buf_deinit(&now);
}
END_TEST

/* ---- the listener ---- */

/* What the owner's callbacks show; set by the test thread, read on the loop thread. */
static atomic_int t_ready = 1;
static atomic_uint t_renders;
static const char t_why[] = "warming up: 3 of 16 shards";

#define T_RENDER_TEXT                                                                              \
    "# HELP rl_test_things Things.\n# TYPE rl_test_things gauge\n"                                 \
    "rl_test_things{v=\"q\\\"\\\\\\n\"} 42\n"                                                      \
    "rl_later 43\n"                                                                                \
    "# HELP rl_test_more More.\n# TYPE rl_test_more gauge\nrl_test_more 1\n"

static uv_thread_t t_loop_thread;
static atomic_int t_later_on_loop; /* a deferred part was formatted on the loop thread */

/* The deferred part of the page, formatted by the HTTP thread. */
static void
t_later_fmt(const void *snap, struct rl_prom *p)
{
    uv_thread_t self = uv_thread_self();

    if (uv_thread_equal(&self, &t_loop_thread)) {
        atomic_store(&t_later_on_loop, 1);
    }
    defer_fmt(snap, p);
}

static void
t_render(void *arg, struct rl_prom *p)
{
    char lab[64];

    (void)arg;
    t_loop_thread = uv_thread_self();
    atomic_fetch_add(&t_renders, 1);
    rl_prom_family(p, "rl_test_things", "gauge", "Things.");
    rl_prom_u64(p, "rl_test_things", rl_prom_labels(lab, sizeof(lab), "v", "q\"\\\n", NULL), 42);
    rl_prom_defer(p, t_later_fmt, strdup("43"));
    rl_prom_one(p, "rl_test_more", "gauge", "More.", NULL, 1);
}

static bool
t_is_ready(void *arg, char *why, size_t len)
{
    (void)arg;
    if (atomic_load(&t_ready)) {
        return true;
    }
    snprintf(why, len, "%s", t_why);
    return false;
}

static const struct rl_metrics_ops t_ops = {t_render, t_is_ready, NULL};

/* A loop with a listener, run by a thread until lt_stop(). */
struct lt {
    uv_loop_t loop;
    uv_async_t stop;
    uv_thread_t thread;
    bool running;
    struct rl_metrics *m;
    int port;
};

static void
lt_stop_cb(uv_async_t *a)
{
    struct lt *t = a->data;

    rl_metrics_stop(t->m); /* on the loop thread, as metrics.h wants */
    t->m = NULL;
    uv_close((uv_handle_t *)a, NULL);
}

static void
lt_thread(void *arg)
{
    struct lt *t = arg;

    uv_run(&t->loop, UV_RUN_DEFAULT);
}

/* Starts the listener on 127.0.0.1:port (0: any); the loop runs only if run. */
static void
lt_start(struct lt *t, uint16_t port, bool run)
{
    char err[256] = "";
    int rc;

    memset(t, 0, sizeof(*t));
    ck_assert_int_eq(uv_loop_init(&t->loop), 0);
    ck_assert_int_eq(uv_async_init(&t->loop, &t->stop, lt_stop_cb), 0);
    t->stop.data = t;
    rc = rl_metrics_start(&t->m, &t->loop, "127.0.0.1", port, &t_ops, err, sizeof(err));
    ck_assert_msg(rc == 0, "rl_metrics_start: %d %s", rc, err);
    t->port = rl_metrics_port(t->m);
    ck_assert_int_gt(t->port, 0);
    if (port != 0) {
        ck_assert_int_eq(t->port, port);
    }
    if (run) {
        ck_assert_int_eq(uv_thread_create(&t->thread, lt_thread, t), 0);
        t->running = true;
    }
}

static void
lt_run(struct lt *t)
{
    ck_assert(!t->running);
    ck_assert_int_eq(uv_thread_create(&t->thread, lt_thread, t), 0);
    t->running = true;
}

static void
lt_stop(struct lt *t)
{
    if (t->running) {
        ck_assert_int_eq(uv_async_send(&t->stop), 0);
        ck_assert_int_eq(uv_thread_join(&t->thread), 0);
        t->running = false;
    } else {
        rl_metrics_stop(t->m);
        t->m = NULL;
        uv_close((uv_handle_t *)&t->stop, NULL);
        uv_run(&t->loop, UV_RUN_DEFAULT);
    }
    ck_assert_ptr_null(t->m);
    ck_assert_int_eq(uv_loop_close(&t->loop), 0);
}

static void
get(int port, const char *path, struct rl_http_resp *r)
{
    int rc = rl_http_get(port, path, T_HTTP_MS, r);

    ck_assert_msg(rc == 0, "GET %s: %s", path, strerror(-rc));
}

/*
 * GET, retried for up to 10 s (a generous wait) while refused: a slot is free again only
 * once the listener has seen the connection that held it close, a moment after the peer (or
 * the deadline) closed it.
 */
static void
get_soon(int port, const char *path, struct rl_http_resp *r)
{
    int64_t t0 = now_ms();

    for (int rc = -ECONNRESET; rc != 0;) {
        rc = rl_http_get(port, path, 15000, r);
        ck_assert_msg(rc == 0 || ((rc == -ECONNRESET || rc == -EPROTO) && now_ms() - t0 < 10000),
                      "GET %s once slots are free: %s", path, strerror(-rc));
    }
}

START_TEST(listener_pages)
{
    struct lt t;
    struct rl_http_resp r;
    char h[256];
    static const char *const process_families[] = {
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_virtual_memory_bytes ",
        "process_start_time_seconds ",
        "process_open_fds ",
        "process_max_fds ",
    };
    unsigned renders;

    atomic_store(&t_ready, 1);
    lt_start(&t, 0, true);

    get(t.port, "/metrics", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(rl_http_header(&r, "Content-Type", h, sizeof(h)));
    ck_assert_msg(strncmp(h, "text/plain; version=0.0.4", 25) == 0, "Content-Type: %s", h);
    ck_assert_msg(strncmp(r.body, T_RENDER_TEXT, strlen(T_RENDER_TEXT)) == 0, "body:\n%s", r.body);
    ck_assert_int_eq(atomic_load(&t_later_on_loop), 0); /* formatted off the loop */
    ck_assert_ptr_nonnull(strstr(r.body, "\nrl_metrics_render_loop_seconds "));
    ck_assert_ptr_nonnull(strstr(r.body, "\n# TYPE rl_metrics_render_seconds gauge\n"));
    for (size_t i = 0; i < sizeof(process_families) / sizeof(process_families[0]); i++) {
        char want[96];

        snprintf(want, sizeof(want), "\n%s", process_families[i]);
        ck_assert_msg(strstr(r.body, want) != NULL, "no %s in:\n%s", process_families[i], r.body);
        snprintf(want, sizeof(want), "# TYPE %.*s", (int)strlen(process_families[i]) - 1,
                 process_families[i]);
        ck_assert_msg(strstr(r.body, want) != NULL, "no %s", want);
    }
    ck_assert_uint_eq(strlen(r.body), r.body_len);
    ck_assert_int_eq(r.body[r.body_len - 1], '\n');
    renders = atomic_load(&t_renders);
    ck_assert_uint_ge(renders, 1);
    rl_http_free(&r);

    /* A later scrape renders anew: at once when the page is cheap, as here on a quiet
     * machine; a page that cost more than RL_METRICS_CACHE_MIN_COST_US to make (ASan on a
     * loaded machine) may be served again for up to RL_METRICS_CACHE_MAX_MS. */
    {
        int64_t t0 = now_ms();

        for (;;) {
            get(t.port, "/metrics", &r);
            ck_assert_int_eq(r.status, 200);
            rl_http_free(&r);
            if (atomic_load(&t_renders) > renders ||
                now_ms() - t0 > 3 * (int64_t)RL_METRICS_CACHE_MAX_MS) {
                break;
            }
            usleep(100 * 1000);
        }
        ck_assert_uint_gt(atomic_load(&t_renders), renders);
    }

    /* A query string does not change the path. */
    get(t.port, "/metrics?debug=1", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "rl_test_things"));
    rl_http_free(&r);

    ck_assert_int_eq(rl_http_request(t.port, "HEAD", "/metrics", T_HTTP_MS, &r), 0);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.body_len, 0);
    rl_http_free(&r);

    /* Probes answer from the loop without a page being rendered for them. */
    renders = atomic_load(&t_renders);
    get(t.port, "/healthz", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "ok\n");
    rl_http_free(&r);

    get(t.port, "/readyz", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, "ready\n");
    rl_http_free(&r);
    ck_assert_uint_eq(atomic_load(&t_renders), renders);

    atomic_store(&t_ready, 0);
    get(t.port, "/readyz", &r);
    ck_assert_int_eq(r.status, 503);
    ck_assert_str_eq(r.body, "not ready: warming up: 3 of 16 shards\n");
    rl_http_free(&r);
    /* Not ready is not dead. */
    get(t.port, "/healthz", &r);
    ck_assert_int_eq(r.status, 200);
    rl_http_free(&r);
    atomic_store(&t_ready, 1);
    get(t.port, "/readyz", &r);
    ck_assert_int_eq(r.status, 200);
    rl_http_free(&r);

    get(t.port, "/nope", &r);
    ck_assert_int_eq(r.status, 404);
    rl_http_free(&r);
    get(t.port, "/metrics/", &r);
    ck_assert_int_eq(r.status, 404);
    rl_http_free(&r);

    ck_assert_int_eq(rl_http_request(t.port, "POST", "/metrics", T_HTTP_MS, &r), 0);
    ck_assert_int_eq(r.status, 405);
    ck_assert_ptr_nonnull(rl_http_header(&r, "Allow", h, sizeof(h)));
    ck_assert_str_eq(h, "GET, HEAD");
    rl_http_free(&r);
    ck_assert_int_eq(rl_http_request(t.port, "DELETE", "/healthz", T_HTTP_MS, &r), 0);
    ck_assert_int_eq(r.status, 405);
    rl_http_free(&r);

    /* 13 answered so far, whatever the path or method. */
    ck_assert_uint_eq(rl_metrics_requests(t.m), 13);
    lt_stop(&t);
}
END_TEST

START_TEST(listener_ports)
{
    struct lt t, t2;
    struct rl_metrics *m = NULL;
    struct rl_http_resp r;
    char err[256];
    uv_loop_t loop;
    int rc;

    /* Port 0 picks a free port, and a second listener gets another. */
    lt_start(&t, 0, true);
    lt_start(&t2, 0, true);
    ck_assert_int_ne(t.port, t2.port);
    get(t2.port, "/healthz", &r);
    ck_assert_int_eq(r.status, 200);
    rl_http_free(&r);
    lt_stop(&t2);

    ck_assert_int_eq(uv_loop_init(&loop), 0);
    err[0] = '\0';
    rc = rl_metrics_start(&m, &loop, "127.0.0.1", (uint16_t)t.port, &t_ops, err, sizeof(err));
    ck_assert_int_eq(rc, -EADDRINUSE);
    ck_assert_ptr_null(m);
    ck_assert_msg(err[0] != '\0', "no reason given");
    err[0] = '\0';
    rc = rl_metrics_start(&m, &loop, "not an address", 0, &t_ops, err, sizeof(err));
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_ptr_null(m);
    ck_assert_msg(err[0] != '\0', "no reason given");
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);

    /* The listener that holds the port still serves. */
    get(t.port, "/healthz", &r);
    ck_assert_int_eq(r.status, 200);
    rl_http_free(&r);
    lt_stop(&t);

    /* A fixed port, once freed, can be listened on again (SO_REUSEADDR). */
    lt_start(&t2, (uint16_t)t.port, true);
    get(t2.port, "/healthz", &r);
    ck_assert_int_eq(r.status, 200);
    rl_http_free(&r);
    lt_stop(&t2);
}
END_TEST

START_TEST(listener_stuck_loop)
{
    struct lt t;
    struct rl_http_resp r;
    int64_t t0, took;
    unsigned renders;

    lt_start(&t, 0, false);            /* the loop does not run */
    renders = atomic_load(&t_renders); /* (other tests' renders, with CK_FORK=no) */
    t0 = now_ms();
    get(t.port, "/metrics", &r);
    took = now_ms() - t0;
    ck_assert_int_eq(r.status, 503);
    ck_assert_ptr_nonnull(strstr(r.body, "did not answer"));
    /* not before the wait (load only delays it); the upper bound only says it ended */
    ck_assert_msg(took >= (int64_t)RL_METRICS_LOOP_WAIT_MS - 50 &&
                      took <= (int64_t)RL_METRICS_LOOP_WAIT_MS + 5000,
                  "answered after %lld ms", (long long)took);
    rl_http_free(&r);

    t0 = now_ms();
    get(t.port, "/healthz", &r);
    took = now_ms() - t0;
    ck_assert_int_eq(r.status, 503);
    /* A loop known stuck does not make each request wait the full second (one that waited
     * could not answer before it). */
    ck_assert_msg(took < (int64_t)RL_METRICS_LOOP_WAIT_MS - 100, "answered after %lld ms",
                  (long long)took);
    rl_http_free(&r);
    get(t.port, "/readyz", &r);
    ck_assert_int_eq(r.status, 503);
    rl_http_free(&r);
    ck_assert_uint_eq(atomic_load(&t_renders), renders); /* nothing rendered off the loop */

    /* Once the loop runs, the same listener answers. */
    lt_run(&t);
    get(t.port, "/metrics", &r); /* 200: the loop answered within the wait, else 503 */
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "rl_test_things"));
    rl_http_free(&r);
    get(t.port, "/healthz", &r);
    ck_assert_int_eq(r.status, 200);
    rl_http_free(&r);
    lt_stop(&t);
}
END_TEST

/* A GET from a thread of its own, for requests in flight while the test does something. */
struct bg_get {
    uv_thread_t thread;
    int port;
    const char *path;
    int rc;
    int status;
    int64_t took_ms;
    bool page_whole; /* for /metrics: the render's text and the process_* families */
};

static void
bg_get_thread(void *arg)
{
    struct bg_get *g = arg;
    struct rl_http_resp r;
    int64_t t0 = now_ms();

    g->rc = rl_http_get(g->port, g->path, 15000, &r);
    g->took_ms = now_ms() - t0;
    if (g->rc == 0) {
        g->status = r.status;
        g->page_whole = strncmp(r.body, T_RENDER_TEXT, strlen(T_RENDER_TEXT)) == 0 &&
                        strstr(r.body, "\nprocess_max_fds ") != NULL;
        rl_http_free(&r);
    }
}

/* A listener whose loop never runs, stopped while a request waits for the loop: the stop
 * releases the request at once (503) instead of waiting out RL_METRICS_LOOP_WAIT_MS. */
START_TEST(listener_stop_stuck)
{
    struct lt t;
    struct bg_get g = {.path = "/metrics"};
    int64_t t0;

    lt_start(&t, 0, false);
    g.port = t.port;
    ck_assert_int_eq(uv_thread_create(&g.thread, bg_get_thread, &g), 0);
    usleep(300 * 1000);
    t0 = now_ms();
    lt_stop(&t);
    /* a stop that waited the request out could not return before the wait */
    ck_assert_int_lt(now_ms() - t0, (int64_t)RL_METRICS_LOOP_WAIT_MS - 100);
    ck_assert_int_eq(uv_thread_join(&g.thread), 0);
    ck_assert_msg(g.rc != 0 || g.status == 503, "rc %d status %d", g.rc, g.status);
}
END_TEST

#define FLOOD 200

START_TEST(listener_flood)
{
    struct lt t;
    struct rl_http_resp r;
    int fds[FLOOD];
    struct sockaddr_in sin = {.sin_family = AF_INET};
    int64_t t0;

    lt_start(&t, 0, true);
    sin.sin_port = htons((uint16_t)t.port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < FLOOD; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fds[i], 0);
        if (connect(fds[i], (struct sockaddr *)&sin, sizeof(sin)) != 0) {
            ck_assert_msg(errno == EINPROGRESS || errno == EAGAIN, "connect: %s", strerror(errno));
        }
    }
    /* Some send half a request, and stay. */
    for (int i = 0; i < FLOOD; i += 7) {
        (void)send(fds[i], "GET /metr", 9, MSG_NOSIGNAL);
    }
    usleep(300 * 1000); /* the listener takes what it takes */
    for (int i = 0; i < FLOOD; i++) {
        close(fds[i]);
    }
    t0 = now_ms();
    get_soon(t.port, "/metrics", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_ptr_nonnull(strstr(r.body, "rl_test_things"));
    rl_http_free(&r);
    /* And the next one at once. */
    ck_assert_int_eq(rl_http_get(t.port, "/healthz", 2000, &r), 0);
    ck_assert_int_eq(r.status, 200);
    rl_http_free(&r);
    fprintf(stderr, "check_metrics: GET after a flood of %d answered in %lld ms\n", FLOOD,
            (long long)(now_ms() - t0));
    lt_stop(&t);
}
END_TEST

/* More concurrent scrapers from one address than the listener takes from one address at
 * once (T_PER_ADDRESS): each is either answered a whole page or refused at once (closed
 * without an answer, never left in the listen backlog), and one that tries again gets its
 * page. Refused connections never reach the handler: the requests counted are the pages. */
#define SCRAPERS 40
#define T_PER_ADDRESS 8 /* METRICS_PER_ADDRESS in metrics.c */

struct bg_scraper {
    struct bg_get get;
    int refused;
    int64_t slowest_refusal_ms;
};

static void
bg_scraper_thread(void *arg)
{
    struct bg_scraper *s = arg;

    for (int tries = 0; tries < 200; tries++) {
        bg_get_thread(&s->get);
        if (s->get.rc != -ECONNRESET && s->get.rc != -EPROTO) {
            return;
        }
        s->refused++;
        if (s->get.took_ms > s->slowest_refusal_ms) {
            s->slowest_refusal_ms = s->get.took_ms;
        }
        usleep(5 * 1000);
    }
}

START_TEST(listener_concurrent)
{
    struct lt t;
    static struct bg_scraper g[SCRAPERS];
    int refused = 0;
    int64_t slowest = 0;

    lt_start(&t, 0, true);
    for (int i = 0; i < SCRAPERS; i++) {
        g[i] = (struct bg_scraper){.get = {.port = t.port, .path = "/metrics"}};
        ck_assert_int_eq(uv_thread_create(&g[i].get.thread, bg_scraper_thread, &g[i]), 0);
    }
    for (int i = 0; i < SCRAPERS; i++) {
        ck_assert_int_eq(uv_thread_join(&g[i].get.thread), 0);
    }
    for (int i = 0; i < SCRAPERS; i++) {
        ck_assert_msg(g[i].get.rc == 0, "scraper %d: %s", i, strerror(-g[i].get.rc));
        ck_assert_int_eq(g[i].get.status, 200);
        ck_assert_msg(g[i].get.page_whole, "scraper %d: page not whole", i);
        refused += g[i].refused;
        slowest = g[i].slowest_refusal_ms > slowest ? g[i].slowest_refusal_ms : slowest;
    }
    fprintf(stderr, "check_metrics: %d scrapers from one address: %d refusals, slowest %lld ms\n",
            SCRAPERS, refused, (long long)slowest);
    ck_assert_int_lt(slowest, 5000); /* refused, not queued (a generous bound) */
    ck_assert_uint_eq(rl_metrics_requests(t.m), SCRAPERS);
    lt_stop(&t);
}
END_TEST

/* A blocking connection to 127.0.0.1:port from the loopback address src, or -1 (any
 * thread). */
static int
try_connect_from(const char *src, int port)
{
    struct sockaddr_in s = {.sin_family = AF_INET}, a = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        return -1;
    }
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (inet_pton(AF_INET, src, &s.sin_addr) != 1 ||
        bind(fd, (struct sockaddr *)&s, sizeof(s)) != 0 ||
        connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A blocking connection to 127.0.0.1:port from the loopback address src. */
static int
connect_from(const char *src, int port)
{
    struct sockaddr_in s = {.sin_family = AF_INET}, a = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(inet_pton(AF_INET, src, &s.sin_addr), 1);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&s, sizeof(s)), 0);
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_msg(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect: %s",
                  strerror(errno));
    return fd;
}

/* Reads fd until the peer closes it, within timeout_ms, into buf (NUL-terminated). Returns
 * the milliseconds it took, or -1 if it was still open at the end. */
static int64_t
wait_closed(int fd, char *buf, size_t cap, int timeout_ms)
{
    int64_t t0 = now_ms();
    size_t have = 0;

    buf[0] = '\0';
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        int64_t left = timeout_ms - (now_ms() - t0);
        char tmp[512];
        ssize_t r;

        if (left <= 0 || poll(&p, 1, (int)left) == 0) {
            return -1;
        }
        r = recv(fd, tmp, sizeof(tmp), 0);
        if (r <= 0) {
            return now_ms() - t0;
        }
        if (have + (size_t)r < cap) {
            memcpy(buf + have, tmp, (size_t)r);
            have += (size_t)r;
            buf[have] = '\0';
        }
    }
}

/*
 * The limits, from several loopback addresses: T_PER_ADDRESS connections from each of four
 * addresses fill RL_METRICS_MAX_CONNECTIONS; a 9th from one of them is closed at once
 * (libmicrohttpd's per-IP limit), not left in the backlog; one from a fifth address is served
 * in the place of the held connection that waited longest. The other held connections, which
 * sent half a request, are told 408 and closed at the headers' deadline (5 s after their
 * accept); then the listener answers again,
 * and a kept-alive connection that goes quiet after its answer is closed at the same deadline
 * without a 408.
 */
START_TEST(listener_limits)
{
    static const char *const srcs[] = {"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"};
    static const char half[] = "GET /metrics HTTP/1.1\r\n";
    static const char keep[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    static const char close_req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    enum { NSRC = sizeof(srcs) / sizeof(srcs[0]) };
    struct lt t;
    struct rl_http_resp r;
    int held[NSRC * T_PER_ADDRESS], extra;
    char buf[1024];
    int64_t t0, took;

    ck_assert_uint_eq(NSRC * T_PER_ADDRESS, RL_METRICS_MAX_CONNECTIONS);
    lt_start(&t, 0, true);
    t0 = now_ms();
    for (int i = 0; i < NSRC * T_PER_ADDRESS; i++) {
        held[i] = connect_from(srcs[i % NSRC], t.port);
        ck_assert_int_eq(send(held[i], half, sizeof(half) - 1, MSG_NOSIGNAL), sizeof(half) - 1);
    }
    usleep(200 * 1000); /* taken by the listener */
    extra = connect_from("127.0.0.1", t.port);
    /* closed at once: well before the 5 s deadline that closes the held ones */
    took = wait_closed(extra, buf, sizeof(buf), 4000);
    ck_assert_msg(took >= 0 && took < 2500, "a 9th connection from 127.0.0.1: closed after %lld ms",
                  (long long)took);
    ck_assert_str_eq(buf, "");
    close(extra);
    /* A 33rd, from a fifth address, asking at once: served, in the slot of the held
     * connection that waited longest of an address holding more (all hold 8: the first),
     * which is told 408 now. */
    extra = connect_from("127.0.0.5", t.port);
    ck_assert_int_eq(send(extra, close_req, sizeof(close_req) - 1, MSG_NOSIGNAL),
                     sizeof(close_req) - 1);
    took = wait_closed(extra, buf, sizeof(buf), 4000);
    ck_assert_msg(took >= 0 && took < 2500, "a 33rd connection: closed after %lld ms",
                  (long long)took);
    ck_assert_msg(strncmp(buf, "HTTP/1.1 200 ", 13) == 0, "a 33rd connection: told '%s'", buf);
    close(extra);
    took = wait_closed(held[0], buf, sizeof(buf), 2500);
    ck_assert_msg(took >= 0 && strncmp(buf, "HTTP/1.1 408 ", 13) == 0,
                  "the longest waiting held connection: after %lld ms, told '%s'", (long long)took,
                  buf);
    close(held[0]);
    held[0] = -1;
    for (int i = 1; i < NSRC * T_PER_ADDRESS; i++) {
        struct pollfd p = {held[i], POLLIN, 0};

        ck_assert_msg(poll(&p, 1, 0) == 0, "held connection %d closed with the first", i);
    }
    for (int i = 1; i < NSRC * T_PER_ADDRESS; i++) {
        took = wait_closed(held[i], buf, sizeof(buf), 12000);
        ck_assert_msg(took >= 0, "held connection %d still open at the deadline", i);
        ck_assert_msg(strncmp(buf, "HTTP/1.1 408 ", 13) == 0, "held connection %d: told '%s'", i,
                      buf);
        close(held[i]);
    }
    took = now_ms() - t0;
    /* at the deadline: not before it (load only delays it), and not a second one later */
    ck_assert_msg(took >= 4800 && took < 9500, "held connections closed after %lld ms",
                  (long long)took);
    get_soon(t.port, "/healthz", &r);
    ck_assert_int_eq(r.status, 200);
    rl_http_free(&r);

    /* Kept alive after an answer, then quiet: closed at the deadline, without a 408. */
    extra = connect_from("127.0.0.2", t.port);
    ck_assert_int_eq(send(extra, keep, sizeof(keep) - 1, MSG_NOSIGNAL), sizeof(keep) - 1);
    t0 = now_ms();
    took = wait_closed(extra, buf, sizeof(buf), 12000);
    ck_assert_msg(took >= 4800 && took < 9500, "kept-alive connection closed after %lld ms",
                  (long long)took);
    ck_assert_msg(strncmp(buf, "HTTP/1.1 200 ", 13) == 0 && strstr(buf, " 408 ") == NULL,
                  "kept-alive connection was told '%s'", buf);
    close(extra);
    lt_stop(&t);
}
END_TEST

/* The attack round of 2026-11-30: T_PER_ADDRESS connections from each of four addresses that
 * send a request line, then a header line every 500 ms, and connect again whenever closed. */
struct dripper {
    int port;
    bool body; /* whole headers announcing a body, then the body a byte at a time */
    atomic_bool stop;
    unsigned connects;
};

static void *
drip_run(void *arg)
{
    static const char *const srcs[] = {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"};
    static const char line[] = "GET /metrics HTTP/1.1\r\n", hdr[] = "X-Drip: 1\r\n";
    static const char post[] =
        "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n";
    enum { N = 4 * T_PER_ADDRESS };
    struct dripper *d = arg;
    int fds[N];
    int64_t dripped = now_ms();

    for (int i = 0; i < N; i++) {
        fds[i] = -1;
    }
    while (!atomic_load(&d->stop)) {
        bool drip = now_ms() - dripped >= 500;

        for (int i = 0; i < N; i++) {
            char tmp[256];
            struct pollfd p = {fds[i], POLLIN, 0};

            if (fds[i] >= 0 && poll(&p, 1, 0) > 0 && recv(fds[i], tmp, sizeof(tmp), 0) <= 0) {
                close(fds[i]);
                fds[i] = -1;
            }
            if (fds[i] < 0 && (fds[i] = try_connect_from(srcs[i % 4], d->port)) >= 0) {
                d->connects++;
                if (d->body) {
                    (void)send(fds[i], post, sizeof(post) - 1, MSG_NOSIGNAL);
                } else {
                    (void)send(fds[i], line, sizeof(line) - 1, MSG_NOSIGNAL);
                }
            } else if (fds[i] >= 0 && drip) {
                (void)send(fds[i], d->body ? "x" : hdr, d->body ? 1 : sizeof(hdr) - 1,
                           MSG_NOSIGNAL);
            }
        }
        if (drip) {
            dripped = now_ms();
        }
        usleep(10 * 1000);
    }
    for (int i = 0; i < N; i++) {
        if (fds[i] >= 0) {
            close(fds[i]);
        }
    }
    return NULL;
}

/*
 * Four addresses dripping their headers on every slot they can hold (8 each: all 32) keep
 * no probe out: a probe from a fifth address every 200 ms for 7 s (past the headers' 5 s
 * deadline, so the drippers connect again) is answered 200 each time. (Before: 4 addresses
 * made 90% of the probes fail.)
 */
static void
drip_and_probe(bool body)
{
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    struct lt t;
    struct dripper d = {.connects = 0, .body = body};
    pthread_t th;
    int probes = 0, ok = 0;
    char buf[1024];
    int64_t t0;

    lt_start(&t, 0, true);
    d.port = t.port;
    atomic_init(&d.stop, false);
    ck_assert_int_eq(pthread_create(&th, NULL, drip_run, &d), 0);
    usleep(500 * 1000); /* every slot taken */
    t0 = now_ms();
    while (now_ms() - t0 < 7000) {
        int fd = try_connect_from("127.0.0.9", t.port);

        probes++;
        if (fd >= 0) {
            if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof(req) - 1) &&
                wait_closed(fd, buf, sizeof(buf), 3000) >= 0 &&
                strncmp(buf, "HTTP/1.1 200 ", 13) == 0) {
                ok++;
            }
            close(fd);
        }
        usleep(200 * 1000);
    }
    atomic_store(&d.stop, true);
    pthread_join(th, NULL);
    lt_stop(&t);
    ck_assert_uint_ge(d.connects, 32);
    ck_assert_msg(ok == probes, "%d of %d probes answered beside the drippers (%s)", ok, probes,
                  body ? "bodies" : "headers");
}

START_TEST(listener_drip_many)
{
    drip_and_probe(false);
}
END_TEST

/* The same with whole headers that announce a body of 100,000 bytes, then drip it: such a
 * connection may be taken for a newcomer too (it was held for the answer's 10 s). */
START_TEST(listener_drip_body)
{
    drip_and_probe(true);
}
END_TEST

static Suite *
metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("writer");
    TCase *tl = tcase_create("listener");

    tcase_add_test(tc, labels_escape);
    tcase_add_test(tc, labels_truncation);
    tcase_add_test(tc, labels_utf8_cut);
    tcase_add_test(tc, labels_invalid_utf8);
    tcase_add_test(tc, prom_lines);
    tcase_add_test(tc, prom_defer);
    tcase_add_test(tc, hist_buckets);
    tcase_add_test(tc, hist_output);
    suite_add_tcase(s, tc);

    tcase_set_timeout(tl, 60);
    tcase_add_test(tl, listener_pages);
    tcase_add_test(tl, listener_ports);
    tcase_add_test(tl, listener_stuck_loop);
    tcase_add_test(tl, listener_stop_stuck);
    tcase_add_test(tl, listener_flood);
    tcase_add_test(tl, listener_concurrent);
    tcase_add_test(tl, listener_limits);
    tcase_add_test(tl, listener_drip_many);
    tcase_add_test(tl, listener_drip_body);
    suite_add_tcase(s, tl);
    return s;
}

RL_TEST_MAIN(metrics_suite)
