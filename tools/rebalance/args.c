/*
 * args: rl-rebalance's options, --help and --version (args.h).
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "parse.h"
#include "say.h"

void
rb_usage(FILE *f)
{
    fprintf(f,
            "usage: rl-rebalance --config FILE [options] LOG...\n"
            "       rl-rebalance --config FILE --rollback [--out FILE] [--dry-run]\n"
            "\n"
            "Reads the routers' request logs (\"-\" for standard input), measures the load of\n"
            "every shard, and writes an assignment that levels the load per node while moving\n"
            "as little of it as possible. With ZooKeeper each moved shard is handed to its new\n"
            "node with its counters (only a lost old owner restarts its shards from zero); with\n"
            "--out FILE or static membership a moved shard's counters restart from zero.\n"
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
            RB_DEFAULT_TIMEOUT_MS);
}

int
rb_usage_error(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    rb_verror(fmt, ap);
    va_end(ap);
    fprintf(stderr, "\ntry rl-rebalance --help\n");
    return RB_EXIT_USAGE;
}

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

int
rb_parse_opts(struct rb_opts *o, int argc, char **argv, bool *done)
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
    o->timeout_ms = RB_DEFAULT_TIMEOUT_MS;
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
                return rb_usage_error("--budget %s: expected a percentage 0..100", optarg);
            }
            break;
        case OPT_TOLERANCE:
            if (parse_fraction(optarg, false, 10.0, &o->tolerance) != 0) {
                return rb_usage_error("--tolerance %s: expected a fraction such as 0.05, or 5%%",
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
                return rb_usage_error("--expect-version %s: expected a version number or \"none\"",
                                      optarg);
            }
            break;
        }
        case OPT_TIMEOUT:
            errno = 0;
            v = strtol(optarg, &end, 10);
            if (errno != 0 || *end != '\0' || end == optarg || v < 1 || v > 3600000) {
                return rb_usage_error("--timeout %s: expected milliseconds, 1..3600000", optarg);
            }
            o->timeout_ms = (int)v;
            break;
        case OPT_LOG_LEVEL:
            if (rl_log_level_parse(optarg, &o->level) != 0) {
                return rb_usage_error("--log-level %s: expected error, warn, info or debug",
                                      optarg);
            }
            break;
        case OPT_HELP:
            rb_usage(stdout);
            *done = true;
            return RB_EXIT_OK;
        case OPT_VERSION:
            printf("rl-rebalance %s\n", RL_VERSION);
            *done = true;
            return RB_EXIT_OK;
        default:
            return rb_usage_error("unknown option or missing value: %s", argv[optind - 1]);
        }
    }
    o->logs = argv + optind;
    o->nlogs = argc - optind;
    if (o->config == NULL) {
        return rb_usage_error("--config FILE is required");
    }
    if (o->rollback && o->nlogs > 0) {
        return rb_usage_error("--rollback reads no log");
    }
    if (o->rollback && o->assignment_file != NULL) {
        return rb_usage_error("--rollback goes back from the assignment in force: no --assignment");
    }
    if (!o->rollback && o->nlogs == 0) {
        return rb_usage_error("no request log given (LOG..., or - for standard input)");
    }
    return RB_EXIT_OK;
}
