/*
 * say: rl-rebalance's output primitives (say.h): the report's printf that --quiet silences,
 * the error messages, and the number formats and bars of the report.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "say.h"

void
rb_say(const struct rb_run *r, const char *fmt, ...)
{
    va_list ap;

    if (r->o.quiet) {
        return;
    }
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

void
rb_verror(const char *fmt, va_list ap)
{
    fprintf(stderr, "rl-rebalance: ");
    vfprintf(stderr, fmt, ap);
}

int
rb_fail(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    rb_verror(fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return RB_EXIT_FAIL;
}

const char *
rb_count_str(char *buf, size_t len, uint64_t v)
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

double
rb_share(uint64_t part, uint64_t total)
{
    return total == 0 ? 0.0 : 100.0 * (double)part / (double)total;
}

const char *
rb_move_cost(const struct rb_run *r)
{
    if (r->conf != NULL && r->conf->zookeeper[0] != '\0' && r->o.out == NULL) {
        return "each is handed to its new node with its counters (planned move; only a lost old "
               "owner would restart its shards from zero)";
    }
    return "these users' counters restart from zero on their new node (no ZooKeeper: no "
           "handoff)";
}

/* In eighths of a cell, or whole '#' cells. */
void
rb_print_bar(const struct rb_run *r, uint64_t v, uint64_t max)
{
    static const char *const eighth[] = {"",       "\u258f", "\u258e", "\u258d",
                                         "\u258c", "\u258b", "\u258a", "\u2589"};
    uint64_t e = max == 0 ? 0 : (uint64_t)((long double)v * RB_BAR_CELLS * 8 / max + 0.5L);
    uint64_t cells = e / 8, i;

    for (i = 0; i < cells; i++) {
        rb_say(r, "%s", r->utf8 ? "\u2588" : "#");
    }
    if (r->utf8 && e % 8 != 0) {
        rb_say(r, "%s", eighth[e % 8]);
        cells++;
    }
    for (; cells < RB_BAR_CELLS; cells++) {
        rb_say(r, " ");
    }
}
