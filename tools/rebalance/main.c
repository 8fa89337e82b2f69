/*
 * rl-rebalance: the operator's tool that levels per-node load from the routers' request logs.
 * It reads the logs (logscan.h), the live members and the assignment in force (ZooKeeper, or
 * files), computes a plan (plan.h), prints a report for a person and one summary line for a
 * script, and writes the new assignment: to ZooKeeper by compare-and-set, keeping the replaced
 * one in assignment.prev, or to a file with --out, keeping FILE.prev. --rollback puts the
 * previous assignment back. docs/REBALANCE.md is the runbook.
 *
 * Exit status: 0 done (also when nothing needed to move, and after SIGINT or SIGTERM, which
 * write nothing), 1 a runtime error (ZooKeeper unreachable, a file unreadable), 2 a usage or
 * configuration error, 3 the assignment changed while this ran (nothing written).
 * Not a library: everything here is file-local.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <langinfo.h>
#include <locale.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <uv.h>

#include "clock.h"
#include "assignment.h"
#include "conf.h"
#include "file.h"
#include "log.h"
#include "logscan.h"
#include "parse.h"
#include "plan.h"
#include "shardmap.h"
#include "zkadmin.h"
#include "zkm.h"

#define EXIT_OK 0
#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define EXIT_CONFLICT 3

#define DEFAULT_TIMEOUT_MS 10000
#define SMALL_FILE_MAX (RL_ZKM_DATA_MAX + 1) /* members and assignment files */
#define BAR_CELLS 40
#define MOVES_SHOWN 10
#define NAME_COL_MAX 24

/* Where the new assignment goes. */
enum target { TARGET_NONE, TARGET_ZK, TARGET_FILE };

struct opts {
    const char *config;
    const char *out;
    const char *members_file;
    const char *assignment_file;
    bool dry_run;
    bool rollback;
    bool quiet;
    bool ascii;
    double tolerance; /* a fraction: 0.05 */
    double budget;    /* a fraction: 1 = no cap */
    int timeout_ms;
    bool expect_set;
    int64_t expect_version; /* --expect-version: -1 for none */
    enum rl_log_level level;
    char **logs;
    int nlogs;
};

struct run {
    struct opts o;
    struct rl_conf *conf;
    enum target target;
    bool utf8;

    uv_loop_t loop;
    bool loop_ready;
    struct rl_zkm *zkm;

    struct rl_member *members;
    size_t nmembers;
    char members_from[128];

    struct rl_assignment current; /* the assignment in force (no overrides when none) */
    char *cur_text;               /* its text as read, or NULL */
    size_t cur_len;
    int64_t version; /* the znode's version when read from ZooKeeper, else -1 */
    char assignment_from[128];

    struct rl_logscan *scan;
    double scan_secs;
    struct rl_plan plan;
    bool have_plan;
};

static volatile sig_atomic_t stop_flag;

static void
on_stop(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static void
usage(FILE *f)
{
    fprintf(f,
            "usage: rl-rebalance --config FILE [options] LOG...\n"
            "       rl-rebalance --config FILE --rollback [--out FILE] [--dry-run]\n"
            "\n"
            "Reads the routers' request logs (\"-\" for standard input), measures the load of\n"
            "every shard, and writes an assignment that levels the load per node while moving\n"
            "as little of it as possible (a moved shard's counters restart from zero).\n"
            "\n"
            "options:\n"
            "  --config FILE       cluster.conf (required)\n"
            "  --dry-run           only report; write nothing\n"
            "  --out FILE          write the assignment to FILE (the old one to FILE.prev)\n"
            "                      instead of ZooKeeper\n"
            "  --budget PCT        move at most PCT%% of the traffic (default 100)\n"
            "  --tolerance F       aim for max/mean <= 1 + F (default 0.05; \"5%%\" also works)\n"
            "  --members FILE      live members from FILE (lines \"NAME HOST:PORT\") instead of\n"
            "                      ZooKeeper or the [node] sections\n"
            "  --assignment FILE   the assignment in force, from FILE instead of ZooKeeper\n"
            "                      (without ZooKeeper: none unless given)\n"
            "  --rollback          put the previous assignment back (assignment.prev, or\n"
            "                      FILE.prev with --out FILE); reads no log\n"
            "  --quiet             print only the summary line (and errors)\n"
            "  --ascii             draw the bars with '#' instead of Unicode blocks\n"
            "  --timeout MS        for ZooKeeper's session and each request (default %d)\n"
            "  --expect-version V  write only if the assignment in ZooKeeper is still version V\n"
            "                      (\"none\": not created yet), e.g. the one a --dry-run you\n"
            "                      reviewed reported; exit 3 and write nothing otherwise\n"
            "  --log-level LEVEL   error, warn (default), info or debug\n"
            "  --help, --version\n"
            "\n"
            "The last line of the output is always \"summary: key=value ...\" for scripts.\n"
            "Exit status: 0 done (nothing to move is done too), 1 runtime error (ZooKeeper\n"
            "unreachable, unreadable file), 2 usage or configuration error, 3 the assignment\n"
            "changed while this ran (nothing written: run again).\n",
            DEFAULT_TIMEOUT_MS);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int
usage_error(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "rl-rebalance: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\ntry rl-rebalance --help\n");
    return EXIT_USAGE;
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int
fail(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "rl-rebalance: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return EXIT_FAIL;
}

/* The report: stdout, unless --quiet. */
static void say(const struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
say(const struct run *r, const char *fmt, ...)
{
    va_list ap;

    if (r->o.quiet) {
        return;
    }
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

/* ---- Small formatting helpers ------------------------------------------------------------ */

/* 1234567 as "1,234,567". */
static const char *
count_str(char *buf, size_t len, uint64_t v)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof(tmp), "%" PRIu64, v), i, o = 0;

    for (i = 0; i < n && (size_t)o + 2 < len; i++) {
        if (i > 0 && (n - i) % 3 == 0) {
            buf[o++] = ',';
        }
        buf[o++] = tmp[i];
    }
    buf[o] = '\0';
    return buf;
}

#define COUNT(v) count_str((char[32]){0}, 32, (v))

static double
share(uint64_t part, uint64_t total)
{
    return total == 0 ? 0.0 : 100.0 * (double)part / (double)total;
}

/* A bar of v out of max, BAR_CELLS wide, in eighths of a cell (or whole '#' cells). */
static void
print_bar(const struct run *r, uint64_t v, uint64_t max)
{
    static const char *const eighth[] = {"",       "\u258f", "\u258e", "\u258d",
                                         "\u258c", "\u258b", "\u258a", "\u2589"};
    uint64_t e = max == 0 ? 0 : (uint64_t)((long double)v * BAR_CELLS * 8 / max + 0.5L);
    uint64_t cells = e / 8, i;

    for (i = 0; i < cells; i++) {
        say(r, "%s", r->utf8 ? "\u2588" : "#");
    }
    if (r->utf8 && e % 8 != 0) {
        say(r, "%s", eighth[e % 8]);
        cells++;
    }
    for (; cells < BAR_CELLS; cells++) {
        say(r, " ");
    }
}

/* A byte of a node name in the assignment format (assignment.h). */
static bool
name_byte(unsigned char c)
{
    return c > ' ' && c != 0x7f && c != '#';
}

/*
 * A members file: one "NAME HOST:PORT" per line, '#' comments, blank lines ignored. On error
 * err holds "line N: what is wrong".
 */
static int
parse_members(char *text, struct rl_member **out, size_t *n, char *err, size_t errlen)
{
    struct rl_member *m = NULL;
    size_t cap = 0, k = 0, i;
    unsigned line = 0;
    char *p = text, *save = NULL;
    int rc = 0;

    *out = NULL;
    *n = 0;
    for (char *l = strtok_r(p, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save)) {
        char *hash = strchr(l, '#'), *name, *addr, *extra, *s2 = NULL;

        line++;
        if (hash != NULL) {
            *hash = '\0';
        }
        name = strtok_r(l, " \t\r", &s2);
        if (name == NULL) {
            continue;
        }
        addr = strtok_r(NULL, " \t\r", &s2);
        extra = strtok_r(NULL, " \t\r", &s2);
        if (addr == NULL || extra != NULL) {
            snprintf(err, errlen, "line %u: expected \"NAME HOST:PORT\"", line);
            rc = -EINVAL;
            goto out;
        }
        if (strlen(name) >= RL_SHARDMAP_NAME_MAX || strlen(addr) >= RL_SHARDMAP_NAME_MAX) {
            snprintf(err, errlen, "line %u: name or address longer than %d bytes", line,
                     RL_SHARDMAP_NAME_MAX - 1);
            rc = -EINVAL;
            goto out;
        }
        for (i = 0; name[i] != '\0'; i++) {
            if (!name_byte((unsigned char)name[i])) {
                snprintf(err, errlen, "line %u: node name holds a control byte or '#'", line);
                rc = -EINVAL;
                goto out;
            }
        }
        for (i = 0; i < k; i++) {
            if (strcmp(m[i].name, name) == 0) {
                snprintf(err, errlen, "line %u: node %s is listed twice", line, name);
                rc = -EINVAL;
                goto out;
            }
        }
        if (k == cap) {
            struct rl_member *g;

            cap = cap ? cap * 2 : 16;
            g = realloc(m, cap * sizeof(*m));
            if (g == NULL) {
                rc = -ENOMEM;
                goto out;
            }
            m = g;
        }
        memset(&m[k], 0, sizeof(m[k]));
        memcpy(m[k].name, name, strlen(name));
        memcpy(m[k].addr, addr, strlen(addr));
        k++;
    }
out:
    if (rc != 0) {
        free(m);
        return rc;
    }
    *out = m;
    *n = k;
    return 0;
}

/* ---- Inputs: members and the assignment in force ----------------------------------------- */

static const char *
zk_error(int rc)
{
    switch (rc) {
    case -ETIMEDOUT:
        return "timed out (is ZooKeeper running and reachable?)";
    case -ECONNRESET:
        return "the connection broke during the request";
    case -ENOTCONN:
        return "not connected";
    case -EACCES:
        return "permission denied";
    default:
        return strerror(-rc);
    }
}

static int
zk_connect(struct run *r)
{
    static const struct rl_zkm_cbs no_cbs = {NULL, NULL, NULL, NULL, NULL};
    int rc;

    if (r->zkm != NULL) {
        return 0;
    }
    rc = uv_loop_init(&r->loop);
    if (rc != 0) {
        return fail("cannot start an event loop: %s", uv_strerror(rc));
    }
    r->loop_ready = true;
    rc = rl_zkm_create(&r->zkm, &r->loop, r->conf->zookeeper, r->conf->session_timeout_ms,
                       r->conf->cluster_name, &no_cbs, NULL);
    if (rc == 0) {
        rl_zkm_secure(r->zkm, r->conf->secret, r->conf->secret_len);
    }
    if (rc != 0) {
        r->zkm = NULL;
        return fail("cannot start a ZooKeeper session with %s: %s", r->conf->zookeeper,
                    rc == -EINVAL ? "bad connect string or cluster name" : uv_strerror(rc));
    }
    return 0;
}

static void
zk_close(struct run *r)
{
    if (r->zkm != NULL) {
        rl_zkm_destroy(r->zkm);
        r->zkm = NULL;
    }
    if (r->loop_ready) {
        /* Runs the close callbacks that free the session's memory. */
        uv_run(&r->loop, UV_RUN_DEFAULT);
        if (uv_loop_close(&r->loop) != 0) {
            rl_log_warn("event loop closed with handles open");
        }
        r->loop_ready = false;
    }
}

static int
load_members(struct run *r)
{
    char err[256], *text = NULL;
    size_t len, i;
    int rc;

    if (r->o.members_file != NULL) {
        rc = rl_file_read_small(r->o.members_file, SMALL_FILE_MAX, &text, &len);
        if (rc != 0) {
            return fail("cannot read %s: %s", r->o.members_file, strerror(-rc));
        }
        rc = parse_members(text, &r->members, &r->nmembers, err, sizeof(err));
        free(text);
        if (rc == -ENOMEM) {
            return fail("out of memory");
        }
        if (rc != 0) {
            fprintf(stderr, "rl-rebalance: %s: %s\n", r->o.members_file, err);
            return EXIT_USAGE;
        }
        snprintf(r->members_from, sizeof(r->members_from), "from %s", r->o.members_file);
    } else if (r->conf->zookeeper[0] != '\0') {
        rc = zk_connect(r);
        if (rc != 0) {
            return rc;
        }
        rc = rl_zkm_read_members(r->zkm, &r->members, &r->nmembers, r->o.timeout_ms);
        if (rc != 0) {
            return fail("cannot read the members from ZooKeeper %s: %s", r->conf->zookeeper,
                        zk_error(rc));
        }
        snprintf(r->members_from, sizeof(r->members_from), "from ZooKeeper %s", r->conf->zookeeper);
    } else {
        r->members = calloc(r->conf->nnodes ? r->conf->nnodes : 1, sizeof(*r->members));
        if (r->members == NULL) {
            return fail("out of memory");
        }
        for (i = 0; i < r->conf->nnodes; i++) {
            const struct rl_node_conf *nc = &r->conf->nodes[i];
            uint16_t port;
            const char *host = rl_conf_node_dial(nc, &port);

            snprintf(r->members[i].name, sizeof(r->members[i].name), "%s", nc->name);
            rl_format_hostport(r->members[i].addr, sizeof(r->members[i].addr), host, port);
        }
        r->nmembers = r->conf->nnodes;
        snprintf(r->members_from, sizeof(r->members_from), "static, from the [node] sections");
    }
    if (r->nmembers == 0) {
        return fail("no live members (%s): nothing to balance", r->members_from);
    }
    return 0;
}

/*
 * The assignment in force: --assignment FILE, else ZooKeeper's, else none. When writing to
 * ZooKeeper its version is read in any case: it is the compare-and-set's expectation.
 */
static int
load_assignment(struct run *r)
{
    char err[256];
    char *zk_text = NULL;
    size_t zk_len = 0;
    int rc;

    r->version = -1;
    rc = rl_assignment_init(&r->current, r->conf->shards);
    if (rc != 0) {
        return fail("out of memory");
    }
    if (r->conf->zookeeper[0] != '\0' && (r->target == TARGET_ZK || r->o.assignment_file == NULL)) {
        rc = zk_connect(r);
        if (rc != 0) {
            return rc;
        }
        rc = rl_zkm_get_assignment(r->zkm, &zk_text, &zk_len, &r->version, r->o.timeout_ms);
        if (rc != 0) {
            return fail("cannot read the assignment from ZooKeeper %s: %s", r->conf->zookeeper,
                        zk_error(rc));
        }
    }
    if (r->o.assignment_file != NULL) {
        free(zk_text);
        rc = rl_file_read_small(r->o.assignment_file, SMALL_FILE_MAX, &r->cur_text, &r->cur_len);
        if (rc != 0) {
            return fail("cannot read %s: %s", r->o.assignment_file, strerror(-rc));
        }
        if (rl_assignment_parse(&r->current, r->cur_text, r->cur_len, err, sizeof(err)) != 0) {
            fprintf(stderr, "rl-rebalance: %s: %s\n", r->o.assignment_file, err);
            return EXIT_USAGE;
        }
        snprintf(r->assignment_from, sizeof(r->assignment_from), "from %s", r->o.assignment_file);
        return 0;
    }
    r->cur_text = zk_text;
    r->cur_len = zk_len;
    if (r->version == -1) {
        snprintf(r->assignment_from, sizeof(r->assignment_from), "%s",
                 r->conf->zookeeper[0] != '\0' ? "none in ZooKeeper yet" : "none");
        return 0;
    }
    snprintf(r->assignment_from, sizeof(r->assignment_from), "ZooKeeper version %" PRId64,
             r->version);
    if (r->cur_len > 0 &&
        rl_assignment_parse(&r->current, r->cur_text, r->cur_len, err, sizeof(err)) != 0) {
        /* Routers ignore an assignment that does not parse, so in force is none. */
        fprintf(stderr,
                "rl-rebalance: warning: the assignment in ZooKeeper (version %" PRId64
                ") does not parse (%s); routers ignore it, and so does this plan\n",
                r->version, err);
    }
    return 0;
}

/* ---- Reading the logs -------------------------------------------------------------------- */

static int
scan_logs(struct run *r)
{
    uint64_t t0, prev_lines = 0, prev_bad = 0;
    int i, rc;

    rc = rl_logscan_create(&r->scan, r->conf->shards);
    if (rc != 0) {
        return fail("out of memory");
    }
    rl_logscan_set_progress(r->scan, isatty(STDERR_FILENO) && !r->o.quiet);
    rl_logscan_set_stop(r->scan, &stop_flag);
    t0 = rl_clock_mono_ns();
    for (i = 0; i < r->o.nlogs; i++) {
        const struct rl_logscan_result *res;

        rc = rl_logscan_file(r->scan, r->o.logs[i]);
        if (rc == -EINTR && stop_flag) {
            return 0;
        }
        if (rc != 0) {
            return fail("cannot read %s: %s; nothing was written", r->o.logs[i],
                        rc == -ENOMEM ? "out of memory" : strerror(-rc));
        }
        res = rl_logscan_result(r->scan);
        if (i == 0) {
            say(r, "Logs\n");
        }
        say(r, "  %s: %s lines, %s malformed\n",
            strcmp(r->o.logs[i], "-") == 0 ? "(standard input)" : r->o.logs[i],
            COUNT(res->lines - prev_lines), COUNT(res->malformed - prev_bad));
        prev_lines = res->lines;
        prev_bad = res->malformed;
    }
    r->scan_secs = (double)(rl_clock_mono_ns() - t0) / 1e9;
    return 0;
}

static void
report_logs(const struct run *r)
{
    const struct rl_logscan_result *res = rl_logscan_result(r->scan);
    uint32_t s, loaded = 0;
    size_t i;

    for (s = 0; s < res->nshards; s++) {
        loaded += res->load[s] > 0;
    }
    say(r,
        "  total: %s lines (%.1f MiB) in %.2f s (%.1fM lines/s): %s requests, %s distinct keys, "
        "%s of %s shards with load\n",
        COUNT(res->lines), (double)res->bytes / (1 << 20), r->scan_secs,
        r->scan_secs > 0 ? (double)res->lines / r->scan_secs / 1e6 : 0.0, COUNT(res->requests),
        COUNT(res->distinct), COUNT(loaded), COUNT(res->nshards));
    if (res->unverified > 0) {
        say(r,
            "  %s keys are logged under names that do not hash to them (cut short by the "
            "router?): they count all the same\n",
            COUNT(res->unverified));
    }
    if (r->conf->log_sample > 1) {
        say(r,
            "  the routers log one request in %u (request_log_sample): counts are of logged "
            "requests\n",
            r->conf->log_sample);
    }
    if (res->malformed == 0) {
        return;
    }
    say(r, "  malformed: %s %s (%.3f%%), skipped:\n", COUNT(res->malformed),
        res->malformed == 1 ? "line" : "lines", share(res->malformed, res->lines));
    for (i = 0; i < RL_LOGSCAN_REASON_COUNT; i++) {
        if (res->reasons[i] > 0) {
            say(r, "    %12s  %s\n", COUNT(res->reasons[i]),
                rl_logscan_reason_text((enum rl_logscan_reason)i));
        }
    }
    say(r, "    first:");
    for (i = 0; i < res->nbad; i++) {
        const char *src = r->o.logs[res->bad[i].source];

        say(r, "%s %s:%" PRIu64 " (%s)", i > 0 ? "," : "",
            strcmp(src, "-") == 0 ? "(standard input)" : src, res->bad[i].line,
            rl_logscan_reason_text(res->bad[i].reason));
    }
    say(r, "\n");
    if (res->reasons[RL_LOGSCAN_SHARD_MISMATCH] + res->reasons[RL_LOGSCAN_SHARD_RANGE] >
        res->malformed / 2) {
        say(r,
            "  most malformed lines name another shard: were these logs written with "
            "shards = %u?\n",
            res->nshards);
    }
}

/* ---- The report -------------------------------------------------------------------------- */

static int
name_width(const struct rl_plan *p)
{
    int w = 4;
    size_t i;

    for (i = 0; i < p->nmembers; i++) {
        int l = (int)strlen(p->members[i].name);

        w = l > w ? l : w;
    }
    return w > NAME_COL_MAX ? NAME_COL_MAX : w;
}

static void
report_nodes(const struct run *r)
{
    const struct rl_plan *p = &r->plan;
    int w = name_width(p);
    uint64_t max = 0;
    size_t i;

    say(r, "\nNodes (%zu live, %s)\n", p->nmembers, r->members_from);
    say(r, "  %-*s  %15s %6s %7s   %15s %6s %7s\n", w, "node", "before", "share", "shards", "after",
        "share", "shards");
    for (i = 0; i < p->nmembers; i++) {
        say(r, "  %-*.*s  %15s %5.1f%% %7u   %15s %5.1f%% %7u\n", w, NAME_COL_MAX,
            p->members[i].name, COUNT(p->before[i]), share(p->before[i], p->total),
            p->shards_before[i], COUNT(p->after[i]), share(p->after[i], p->total),
            p->shards_after[i]);
        max = p->before[i] > max ? p->before[i] : max;
        max = p->after[i] > max ? p->after[i] : max;
    }
    say(r, "  %-*s  %15s %6s %7s   %15s\n", w, "mean", COUNT(p->total / p->nmembers), "", "",
        COUNT(p->total / p->nmembers));
    say(r,
        "\n  load per node, before and after (bars scaled to the busiest; fair share %.1f%%, "
        "target <= %.1f%%)\n",
        100.0 / (double)p->nmembers, share(p->target, p->total));
    for (i = 0; i < p->nmembers; i++) {
        say(r, "  %-*.*s  before ", w, NAME_COL_MAX, p->members[i].name);
        print_bar(r, p->before[i], max);
        say(r, " %5.1f%%\n", share(p->before[i], p->total));
        say(r, "  %-*s  after  ", w, "");
        print_bar(r, p->after[i], max);
        say(r, " %5.1f%%\n", share(p->after[i], p->total));
    }
}

static int
move_cmp(const void *x, const void *y)
{
    const struct rl_plan_move *a = x, *b = y;

    if (a->load != b->load) {
        return a->load > b->load ? -1 : 1;
    }
    return a->shard < b->shard ? -1 : a->shard > b->shard;
}

static void
report_plan(const struct run *r, uint32_t dead_overrides)
{
    const struct rl_plan *p = &r->plan;
    const struct rl_logscan_result *res = rl_logscan_result(r->scan);
    struct rl_plan_move *top;
    uint32_t n, i;

    say(r, "\nPlan (aim: max/mean <= %.2f; budget: %.0f%% of the traffic, %s requests)\n",
        1.0 + r->o.tolerance, 100.0 * r->o.budget, COUNT(p->budget_load));
    say(r, "  max/mean: %.2f -> %.2f\n", rl_plan_ratio(p->before, p->nmembers),
        rl_plan_ratio(p->after, p->nmembers));
    if (p->moved_shards == 0) {
        say(r, "  moved: nothing%s\n",
            rl_plan_ratio(p->before, p->nmembers) <= 1.0 + r->o.tolerance
                ? " (already within the aim)"
                : "");
    } else {
        say(r,
            "  moved: %u shards, %s requests = %.2f%% of the traffic: these users' counters "
            "restart from zero on their new node\n",
            p->moved_shards, COUNT(p->moved_load), share(p->moved_load, p->total));
        top = malloc(p->moved_shards * sizeof(*top));
        if (top != NULL) {
            memcpy(top, p->moves, p->moved_shards * sizeof(*top));
            qsort(top, p->moved_shards, sizeof(*top), move_cmp);
            n = p->moved_shards < MOVES_SHOWN ? p->moved_shards : MOVES_SHOWN;
            say(r, "  largest moves:\n");
            for (i = 0; i < n; i++) {
                say(r, "    shard %-7u %s -> %s  %.2f%% of the traffic, %s %s\n", top[i].shard,
                    p->members[top[i].from].name, p->members[top[i].to].name,
                    share(top[i].load, p->total), COUNT(res->keys[top[i].shard]),
                    res->keys[top[i].shard] == 1 ? "key" : "keys");
            }
            if (p->moved_shards > n) {
                say(r, "    ... and %u more\n", p->moved_shards - n);
            }
            free(top);
        }
    }
    if (p->budget_hit) {
        say(r, "  the budget stopped the plan before the aim: run with a larger --budget to go "
               "further\n");
    } else if (!p->hot_shard && rl_plan_ratio(p->after, p->nmembers) > 1.0 + r->o.tolerance) {
        say(r, "  the plan stopped above the aim: the busiest node's shards are each too big "
               "for any other node to take without becoming busier than it is\n");
    }
    say(r, "  overrides: %u in force -> %u in the new assignment", rl_plan_overrides(&r->current),
        rl_plan_overrides(&p->assignment));
    if (dead_overrides > 0) {
        say(r, " (%u naming nodes that are not live are dropped)", dead_overrides);
    }
    say(r, "\n");
}

/* Hot keys (above a node's fair share) and hot shards (above the target). Returns the count
 * of hot keys. */
static size_t
report_hot(const struct run *r)
{
    const struct rl_plan *p = &r->plan;
    const struct rl_logscan_result *res = rl_logscan_result(r->scan);
    struct rl_logscan_key *keys = NULL;
    size_t nkeys = 0, i, hot = 0;
    uint32_t s, shown = 0;

    if (rl_logscan_keys_above(r->scan, p->total / p->nmembers, &keys, &nkeys) != 0) {
        fprintf(stderr, "rl-rebalance: out of memory listing hot keys\n");
    }
    say(r, "\nHot keys (one key above a node's fair share, %.1f%% of the traffic)\n",
        100.0 / (double)p->nmembers);
    for (i = 0; i < nkeys; i++) {
        /* Strictly above total / N, without rounding. */
        if (keys[i].count * (uint64_t)p->nmembers <= p->total) {
            continue;
        }
        hot++;
        say(r,
            "  service %.*s user %.*s%s  key %016" PRIx64 "  shard %u  %.1f%% of the traffic, "
            "on %s\n",
            (int)keys[i].slen, keys[i].service, (int)keys[i].ulen, keys[i].user,
            keys[i].verified ? "" : " (as logged: not this key's full name)", keys[i].hash,
            keys[i].shard, share(keys[i].count, p->total),
            p->members[p->owner[keys[i].shard]].name);
    }
    if (hot == 0) {
        say(r, "  none\n");
    } else {
        say(r, "  Such a key's shard alone exceeds a node's fair share, and rebalancing cannot "
               "split a shard.\n"
               "  What the operator can do: raise that key's limit (its node does the work for "
               "it\n"
               "  anyway), make the service send a finer key (e.g. user + sub-account) so its "
               "load\n"
               "  spreads over shards, or give that node more capacity.\n");
    }
    free(keys);
    if (p->hot_shards > 0) {
        say(r, "\nHot shards (one shard above the target, %.1f%% of the traffic)\n",
            share(p->target, p->total));
        for (s = 0; s < p->nshards && shown < 20; s++) {
            if (r->scan != NULL && res->load[s] > p->target) {
                say(r, "  shard %-7u %.1f%% of the traffic, %s %s, on %s\n", s,
                    share(res->load[s], p->total), COUNT(res->keys[s]),
                    res->keys[s] == 1 ? "key" : "keys", p->members[p->owner[s]].name);
                shown++;
            }
        }
        if (p->hot_shards > shown) {
            say(r, "  ... and %u more\n", p->hot_shards - shown);
        }
        if (p->hot_shard) {
            say(r, "  The busiest node after the plan holds such a shard: no move can bring it "
                   "under the target.\n");
        }
    }
    return hot;
}

/* ---- Writing ----------------------------------------------------------------------------- */

/*
 * Writes text to FILE, and first what it replaces to FILE.prev: the old FILE, or when there
 * was none an assignment with no overrides (what was in force then, as far as the file
 * knows), so a rollback always has something to go back to.
 */
static int
write_out_file(const struct run *r, const char *text, size_t len, bool *had_old)
{
    char prev[4096], *old = NULL;
    size_t oldlen;
    int rc;

    *had_old = false;
    if ((size_t)snprintf(prev, sizeof(prev), "%s.prev", r->o.out) >= sizeof(prev)) {
        return fail("%s: name too long", r->o.out);
    }
    rc = rl_file_read_small(r->o.out, SMALL_FILE_MAX, &old, &oldlen);
    if (rc == -ENOENT) {
        char header[64];

        oldlen = (size_t)snprintf(header, sizeof(header), "rl-assignment 1 %u\n", r->conf->shards);
        old = strdup(header);
        rc = old != NULL ? 0 : -ENOMEM;
    } else if (rc == 0) {
        *had_old = true;
    }
    if (rc != 0) {
        return fail("cannot read %s: %s; nothing was written", r->o.out, strerror(-rc));
    }
    rc = rl_file_write_atomic(prev, old, oldlen);
    free(old);
    if (rc != 0) {
        return fail("cannot write %s: %s; nothing was written", prev, strerror(-rc));
    }
    rc = rl_file_write_atomic(r->o.out, text, len);
    if (rc != 0) {
        return fail("cannot write %s: %s", r->o.out, strerror(-rc));
    }
    return 0;
}

/* Says that the assignment moved from version `was` to `now` (-1 none, -2 unknown). */
static int
conflict(int64_t was, int64_t now)
{
    char a[32], b[32];

    snprintf(a, sizeof(a), "%" PRId64, was);
    snprintf(b, sizeof(b), "%" PRId64, now);
    fprintf(stderr,
            "rl-rebalance: the assignment changed while this ran (version %s -> %s); nothing was "
            "written; run again\n",
            was == -1 ? "none" : a,
            now == -1   ? "none"
            : now == -2 ? "unknown"
                        : b);
    return EXIT_CONFLICT;
}

/* The CAS of text over the version read at start; prints the outcome. */
static int
write_zk(struct run *r, const char *text, size_t len, int64_t *new_version)
{
    char *now = NULL;
    size_t nowlen;
    int64_t v = -1;
    int rc;

    rc = rl_zkm_set_assignment(r->zkm, text, len, r->version, new_version, r->o.timeout_ms);
    if (rc == -EAGAIN) {
        if (rl_zkm_get_assignment(r->zkm, &now, &nowlen, &v, r->o.timeout_ms) != 0) {
            v = -2;
        }
        free(now);
        return conflict(r->version, v);
    }
    if (rc == -EMSGSIZE) {
        return fail("the assignment is %zu bytes, more than ZooKeeper takes (%u): nothing was "
                    "written",
                    len, RL_ZKM_DATA_MAX);
    }
    if (rc == -ECONNRESET) {
        return fail("the connection to ZooKeeper broke while writing: the write may or may not "
                    "have happened; read /ratelimiter/%s/assignment before running again",
                    r->conf->cluster_name);
    }
    if (rc != 0) {
        return fail("cannot write the assignment to ZooKeeper %s: %s", r->conf->zookeeper,
                    zk_error(rc));
    }
    return 0;
}

static int
member_name_cmp(const void *key, const void *m)
{
    return strcmp(key, ((const struct rl_member *)m)->name);
}

/* 0 when the assignment in ZooKeeper is still at the version read at start. */
static int
check_version(const struct run *r)
{
    char *now = NULL;
    size_t nowlen;
    int64_t v;
    int rc = rl_zkm_get_assignment(r->zkm, &now, &nowlen, &v, r->o.timeout_ms);

    free(now);
    if (rc != 0) {
        return fail("cannot read the assignment from ZooKeeper %s: %s", r->conf->zookeeper,
                    zk_error(rc));
    }
    if (v != r->version) {
        return conflict(r->version, v);
    }
    return 0;
}

static int
rebalance(struct run *r)
{
    const struct rl_logscan_result *res;
    struct rl_plan_input in;
    const char *written = "none";
    char *text = NULL;
    size_t len, hot = 0;
    uint32_t s, dead = 0;
    int64_t newv = -1;
    bool had_old;
    int rc = EXIT_OK;

    rc = scan_logs(r);
    if (rc != 0) {
        return rc;
    }
    if (stop_flag) {
        say(r, "\nInterrupted: nothing was written\n");
        printf("summary: written=interrupted\n");
        return EXIT_OK;
    }
    res = rl_logscan_result(r->scan);
    report_logs(r);
    in = (struct rl_plan_input){.nshards = r->conf->shards,
                                .load = res->load,
                                .members = r->members,
                                .nmembers = r->nmembers,
                                .current = &r->current,
                                .tolerance = r->o.tolerance,
                                .budget = r->o.budget};
    rc = rl_plan_compute(&in, &r->plan);
    if (rc != 0) {
        return fail("cannot compute a plan: %s", rc == -ENOMEM
                                                     ? "out of memory"
                                                     : "a member's name cannot be written in an "
                                                       "assignment");
    }
    r->have_plan = true;
    for (s = 0; s < r->current.nshards; s++) {
        /* plan.members is sorted by name. */
        if (r->current.owner[s][0] != '\0' &&
            bsearch(r->current.owner[s], r->plan.members, r->plan.nmembers,
                    sizeof(*r->plan.members), member_name_cmp) == NULL) {
            dead++;
        }
    }
    report_nodes(r);
    report_plan(r, dead);
    hot = report_hot(r);
    if (rl_assignment_format(&r->plan.assignment, &text, &len) != 0) {
        return fail("cannot format the assignment");
    }
    say(r, "\nResult\n");
    if (res->requests == 0) {
        say(r, "  no valid request in the logs: nothing to plan; nothing was written\n");
    } else if (r->o.dry_run) {
        say(r, "  --dry-run: nothing was written\n");
        written = "dry-run";
    } else if (r->target == TARGET_FILE) {
        rc = write_out_file(r, text, len, &had_old);
        if (rc == 0) {
            say(r, "  written to %s (%u overrides); what it replaced is in %s.prev%s\n", r->o.out,
                rl_plan_overrides(&r->plan.assignment), r->o.out,
                had_old ? "" : " (no overrides: there was no file)");
            say(r, "  roll back: rl-rebalance --config %s --rollback --out %s\n", r->o.config,
                r->o.out);
            written = "file";
        }
    } else if (r->o.assignment_file == NULL &&
               ((r->cur_text != NULL && r->cur_len == len && memcmp(r->cur_text, text, len) == 0) ||
                (r->version == -1 && rl_plan_overrides(&r->plan.assignment) == 0))) {
        /* Unchanged from what was read: still a conflict if it changed since. */
        rc = check_version(r);
        if (rc == 0) {
            say(r, "  the assignment is unchanged: nothing was written\n");
            written = "unchanged";
        } else {
            written = rc == EXIT_CONFLICT ? "conflict" : "error";
        }
    } else {
        rc = write_zk(r, text, len, &newv);
        if (rc == 0) {
            char was[24];

            if (r->version == -1) {
                snprintf(was, sizeof(was), "none");
            } else {
                snprintf(was, sizeof(was), "%" PRId64, r->version);
            }
            say(r,
                "  written to ZooKeeper /ratelimiter/%s/assignment: version %s -> %" PRId64
                " (%u overrides)\n",
                r->conf->cluster_name, was, newv, rl_plan_overrides(&r->plan.assignment));
            if (r->version != -1) {
                say(r, "  the replaced assignment is in /ratelimiter/%s/assignment.prev\n",
                    r->conf->cluster_name);
            }
            say(r, "  roll back: rl-rebalance --config %s --rollback\n", r->o.config);
            written = "zk";
        } else if (rc == EXIT_CONFLICT) {
            written = "conflict";
        } else {
            written = "error";
        }
    }
    free(text);
    printf("summary: lines=%" PRIu64 " requests=%" PRIu64 " malformed=%" PRIu64
           " nodes=%zu before=%.3f after=%.3f moved_shards=%u moved_load=%.4f budget_hit=%d "
           "hot_keys=%zu hot_shards=%u overrides=%u scan_seconds=%.3f written=%s",
           res->lines, res->requests, res->malformed, r->plan.nmembers,
           rl_plan_ratio(r->plan.before, r->plan.nmembers),
           rl_plan_ratio(r->plan.after, r->plan.nmembers), r->plan.moved_shards,
           r->plan.total ? (double)r->plan.moved_load / (double)r->plan.total : 0.0,
           r->plan.budget_hit, hot, r->plan.hot_shards, rl_plan_overrides(&r->plan.assignment),
           r->scan_secs, written);
    if (strcmp(written, "zk") == 0) {
        printf(" version=%" PRId64, newv);
    }
    printf("\n");
    return rc;
}

/* ---- Rollback ---------------------------------------------------------------------------- */

/* Shards whose owner differs between two assignments, with the live members. */
static uint32_t
owners_changed(const struct run *r, const struct rl_assignment *a, const struct rl_assignment *b)
{
    struct rl_shardmap *ma = NULL, *mb = NULL;
    uint32_t s, n = 0;

    if (rl_shardmap_create(&ma, r->conf->shards, r->members, r->nmembers, a) == 0 &&
        rl_shardmap_create(&mb, r->conf->shards, r->members, r->nmembers, b) == 0) {
        for (s = 0; s < r->conf->shards; s++) {
            n += ma->owner[s] != mb->owner[s];
        }
    }
    rl_shardmap_destroy(ma);
    rl_shardmap_destroy(mb);
    return n;
}

static int
rollback(struct run *r)
{
    struct rl_assignment prev;
    char err[256], path[4096], header[64], *ptext = NULL;
    size_t plen = 0;
    int64_t pv = -1, newv = -1;
    const char *written = "none";
    bool had_old;
    uint32_t changed;
    int rc;

    if (rl_assignment_init(&prev, r->conf->shards) != 0) {
        return fail("out of memory");
    }
    if (r->target == TARGET_FILE) {
        char *cur = NULL;
        size_t clen;

        snprintf(path, sizeof(path), "%s.prev", r->o.out);
        rc = rl_file_read_small(path, SMALL_FILE_MAX, &ptext, &plen);
        if (rc != 0) {
            rc = fail("cannot read %s: %s; nothing to roll back to", path, strerror(-rc));
            goto out;
        }
        /* In force, as far as this file goes: its own text. */
        rc = rl_file_read_small(r->o.out, SMALL_FILE_MAX, &cur, &clen);
        if (rc == 0 && rl_assignment_parse(&r->current, cur, clen, err, sizeof(err)) != 0) {
            fprintf(stderr, "rl-rebalance: warning: %s: %s; taken as no overrides\n", r->o.out,
                    err);
        }
        free(cur);
        if (rc != 0 && rc != -ENOENT) {
            rc = fail("cannot read %s: %s", r->o.out, strerror(-rc));
            goto out;
        }
        snprintf(r->assignment_from, sizeof(r->assignment_from), "%s", r->o.out);
        rc = 0;
    } else {
        rc = rl_zkm_get_assignment_prev(r->zkm, &ptext, &plen, &pv, r->o.timeout_ms);
        if (rc != 0) {
            rc = fail("cannot read assignment.prev from ZooKeeper %s: %s", r->conf->zookeeper,
                      zk_error(rc));
            goto out;
        }
        snprintf(path, sizeof(path), "/ratelimiter/%s/assignment.prev", r->conf->cluster_name);
        if (pv == -1) {
            if (r->version == -1) {
                rc = fail("there is no assignment in ZooKeeper: nothing to roll back");
                goto out;
            }
            /* The first write created the assignment: before it there were no overrides. */
            plen =
                (size_t)snprintf(header, sizeof(header), "rl-assignment 1 %u\n", r->conf->shards);
            ptext = strdup(header);
            if (ptext == NULL) {
                rc = fail("out of memory");
                goto out;
            }
        }
    }
    if (plen > 0 && rl_assignment_parse(&prev, ptext, plen, err, sizeof(err)) != 0) {
        rc = fail("%s: %s; not rolled back", path, err);
        goto out;
    }
    changed = owners_changed(r, &r->current, &prev);
    say(r, "Rollback\n");
    if (r->target == TARGET_ZK && pv == -1) {
        /* The first write created the assignment: what it replaced was plain rendezvous
         * hashing, which is what rolling back restores. */
        say(r,
            "  in force: %u overrides (%s)\n  previous: no overrides, the state before the "
            "first rebalance (ZooKeeper holds no %s)\n",
            rl_plan_overrides(&r->current), r->assignment_from, path);
    } else {
        say(r, "  in force: %u overrides (%s)\n  previous: %u overrides (%s)\n",
            rl_plan_overrides(&r->current), r->assignment_from, rl_plan_overrides(&prev), path);
    }
    say(r,
        "  %u shards change owner with the %zu live members (their counters restart from "
        "zero)\n",
        changed, r->nmembers);
    if (r->o.dry_run) {
        say(r, "  --dry-run: nothing was written\n");
        written = "dry-run";
    } else if (r->target == TARGET_FILE) {
        rc = write_out_file(r, ptext, plen, &had_old);
        if (rc != 0) {
            written = "error";
            goto summary;
        }
        say(r,
            "  rolled back: %s now holds the previous assignment, and %s what it replaced "
            "(roll back again to undo)\n",
            r->o.out, path);
        written = "file";
    } else {
        rc = write_zk(r, ptext, plen, &newv);
        if (rc != 0) {
            written = rc == EXIT_CONFLICT ? "conflict" : "error";
            goto summary;
        }
        say(r,
            "  rolled back: /ratelimiter/%s/assignment version %" PRId64 " -> %" PRId64
            " holds the previous assignment; assignment.prev holds what it replaced (roll "
            "back again to undo)\n",
            r->conf->cluster_name, r->version, newv);
        written = "zk";
    }
summary:
    printf("summary: rollback=1 changed_shards=%u overrides=%u written=%s", changed,
           rl_plan_overrides(&prev), written);
    if (strcmp(written, "zk") == 0) {
        printf(" version=%" PRId64, newv);
    }
    printf("\n");
out:
    free(ptext);
    rl_assignment_deinit(&prev);
    return rc;
}

/* ---- Options ----------------------------------------------------------------------------- */

/* "0.05" or "5%" as a fraction in [0, max]. */
static int
parse_fraction(const char *s, bool percent_default, double max, double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || !(v >= 0)) {
        return -EINVAL;
    }
    if (*end == '%' && end[1] == '\0') {
        v /= 100;
    } else if (*end != '\0') {
        return -EINVAL;
    } else if (percent_default) {
        v /= 100;
    }
    if (v > max) {
        return -EINVAL;
    }
    *out = v;
    return 0;
}

enum {
    OPT_CONFIG = 256,
    OPT_DRY_RUN,
    OPT_OUT,
    OPT_BUDGET,
    OPT_TOLERANCE,
    OPT_MEMBERS,
    OPT_ASSIGNMENT,
    OPT_ROLLBACK,
    OPT_QUIET,
    OPT_ASCII,
    OPT_TIMEOUT,
    OPT_EXPECT_VERSION,
    OPT_LOG_LEVEL,
    OPT_HELP,
    OPT_VERSION,
};

static int
parse_opts(struct opts *o, int argc, char **argv, bool *done)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, OPT_CONFIG},
        {"dry-run", no_argument, NULL, OPT_DRY_RUN},
        {"out", required_argument, NULL, OPT_OUT},
        {"budget", required_argument, NULL, OPT_BUDGET},
        {"tolerance", required_argument, NULL, OPT_TOLERANCE},
        {"members", required_argument, NULL, OPT_MEMBERS},
        {"assignment", required_argument, NULL, OPT_ASSIGNMENT},
        {"rollback", no_argument, NULL, OPT_ROLLBACK},
        {"quiet", no_argument, NULL, OPT_QUIET},
        {"ascii", no_argument, NULL, OPT_ASCII},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"expect-version", required_argument, NULL, OPT_EXPECT_VERSION},
        {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
        {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0}};
    char *end;
    long v;
    int opt;

    *done = false;
    o->tolerance = RL_PLAN_DEFAULT_TOLERANCE;
    o->budget = 1.0;
    o->timeout_ms = DEFAULT_TIMEOUT_MS;
    o->level = RL_LOG_WARN;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case OPT_CONFIG:
            o->config = optarg;
            break;
        case OPT_DRY_RUN:
            o->dry_run = true;
            break;
        case OPT_OUT:
            o->out = optarg;
            break;
        case OPT_BUDGET:
            if (parse_fraction(optarg, true, 1.0, &o->budget) != 0) {
                return usage_error("--budget %s: expected a percentage 0..100", optarg);
            }
            break;
        case OPT_TOLERANCE:
            if (parse_fraction(optarg, false, 10.0, &o->tolerance) != 0) {
                return usage_error("--tolerance %s: expected a fraction such as 0.05, or 5%%",
                                   optarg);
            }
            break;
        case OPT_MEMBERS:
            o->members_file = optarg;
            break;
        case OPT_ASSIGNMENT:
            o->assignment_file = optarg;
            break;
        case OPT_ROLLBACK:
            o->rollback = true;
            break;
        case OPT_QUIET:
            o->quiet = true;
            break;
        case OPT_ASCII:
            o->ascii = true;
            break;
        case OPT_EXPECT_VERSION: {
            uint64_t ev;

            o->expect_set = true;
            if (strcmp(optarg, "none") == 0) {
                o->expect_version = -1;
            } else if (rl_parse_u64(optarg, 0, INT64_MAX, &ev) == NULL) {
                o->expect_version = (int64_t)ev;
            } else {
                return usage_error("--expect-version %s: expected a version number or \"none\"",
                                   optarg);
            }
            break;
        }
        case OPT_TIMEOUT:
            errno = 0;
            v = strtol(optarg, &end, 10);
            if (errno != 0 || *end != '\0' || end == optarg || v < 1 || v > 3600000) {
                return usage_error("--timeout %s: expected milliseconds, 1..3600000", optarg);
            }
            o->timeout_ms = (int)v;
            break;
        case OPT_LOG_LEVEL:
            if (rl_log_level_parse(optarg, &o->level) != 0) {
                return usage_error("--log-level %s: expected error, warn, info or debug", optarg);
            }
            break;
        case OPT_HELP:
            usage(stdout);
            *done = true;
            return EXIT_OK;
        case OPT_VERSION:
            printf("rl-rebalance %s\n", RL_VERSION);
            *done = true;
            return EXIT_OK;
        default:
            return usage_error("unknown option or missing value: %s", argv[optind - 1]);
        }
    }
    o->logs = argv + optind;
    o->nlogs = argc - optind;
    if (o->config == NULL) {
        return usage_error("--config FILE is required");
    }
    if (o->rollback && o->nlogs > 0) {
        return usage_error("--rollback reads no log");
    }
    if (o->rollback && o->assignment_file != NULL) {
        return usage_error("--rollback goes back from the assignment in force: no --assignment");
    }
    if (!o->rollback && o->nlogs == 0) {
        return usage_error("no request log given (LOG..., or - for standard input)");
    }
    return EXIT_OK;
}

static void
run_deinit(struct run *r)
{
    if (r->have_plan) {
        rl_plan_deinit(&r->plan);
    }
    rl_logscan_destroy(r->scan);
    zk_close(r);
    free(r->members);
    free(r->cur_text);
    rl_assignment_deinit(&r->current);
    rl_conf_destroy(r->conf);
}

int
main(int argc, char **argv)
{
    struct sigaction sa;
    struct run r;
    const char *cs;
    char err[512];
    bool done;
    int rc;

    memset(&r, 0, sizeof(r));
    rc = parse_opts(&r.o, argc, argv, &done);
    if (rc != EXIT_OK || done) {
        return rc;
    }
    rl_log_setup(r.o.level, "rl-rebalance");
    setlocale(LC_CTYPE, "");
    cs = nl_langinfo(CODESET);
    r.utf8 = !r.o.ascii && cs != NULL && strcmp(cs, "UTF-8") == 0;

    rc = rl_conf_load(r.o.config, &r.conf, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "rl-rebalance: %s\n", err);
        return EXIT_USAGE;
    }
    if (r.o.out != NULL) {
        r.target = TARGET_FILE;
    } else if (r.conf->zookeeper[0] != '\0') {
        r.target = TARGET_ZK;
    } else if (r.o.rollback || !r.o.dry_run) {
        rl_conf_destroy(r.conf);
        return usage_error("%s has no zookeeper: give --out FILE%s", r.o.config,
                           r.o.rollback ? "" : " or --dry-run");
    }
    if (r.o.dry_run && !r.o.rollback) {
        r.target = TARGET_NONE;
    }

    /* Interrupted, the tool writes nothing, closes its session and exits 0 (CONFIG.md). */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    rc = load_members(&r);
    if (rc == 0) {
        rc = load_assignment(&r);
    }
    if (rc == 0 && r.o.expect_set && r.target == TARGET_ZK) {
        /* The compare-and-set expects the version the operator reviewed, not the one read
         * now: ZooKeeper itself refuses the write if they differ (exit 3). */
        r.version = r.o.expect_version;
    }
    if (rc == 0) {
        say(&r, "rl-rebalance %s: cluster %s, %u shards, %zu live nodes (%s)\n", RL_VERSION,
            r.conf->cluster_name, r.conf->shards, r.nmembers, r.members_from);
        if (!r.o.rollback) {
            say(&r, "assignment in force: %s, %u overrides\n", r.assignment_from,
                rl_plan_overrides(&r.current));
        }
        say(&r, "\n");
        rc = r.o.rollback ? rollback(&r) : rebalance(&r);
    }
    fflush(stdout);
    run_deinit(&r);
    return rc;
}
