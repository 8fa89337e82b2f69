/*
 * log: leveled lines on stderr. One write(2) per line so lines from several threads (the
 * ZooKeeper client's) do not interleave. Not buffered: logs are for rare events. A log file
 * is put in place of stderr with dup2(2), atomically, so a thread writing while the file is
 * reopened never sees a closed descriptor, and whatever else writes to stderr (the
 * ZooKeeper client's own warnings) lands in the file too. rl_log_limited keeps a line that
 * a client can cause to one per interval, with the count of those it dropped.
 */
#include "log.h"

#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static enum rl_log_level log_level = RL_LOG_INFO;
static char log_tag[32] = "rl";
static char log_path[4096];

static const char *const log_names[] = {
#define RL_LOG_NAME(n, s) s,
    RL_LOG_LEVEL_MAP(RL_LOG_NAME)
#undef RL_LOG_NAME
};

void
rl_log_setup(enum rl_log_level level, const char *tag)
{
    log_level = level;
    if (tag != NULL) {
        snprintf(log_tag, sizeof(log_tag), "%s", tag);
    }
}

int
rl_log_open(const char *path)
{
    int len = snprintf(log_path, sizeof(log_path), "%s", path);

    if (len < 0 || (size_t)len >= sizeof(log_path)) {
        log_path[0] = '\0';
        errno = ENAMETOOLONG;
        return -ENAMETOOLONG;
    }
    return rl_log_reopen();
}

int
rl_log_reopen(void)
{
    int fd, saved;

    if (log_path[0] == '\0') {
        return 0;
    }
    fd = rl_file_open(log_path, O_WRONLY | O_APPEND | O_CREAT, 0640, 1);
    if (fd < 0) {
        return fd;
    }
    if (fd != STDERR_FILENO && dup2(fd, STDERR_FILENO) < 0) {
        saved = errno;
        close(fd);
        errno = saved;
        return -saved;
    }
    if (fd != STDERR_FILENO) {
        close(fd);
    }
    return 0;
}

int
rl_log_level_parse(const char *s, enum rl_log_level *out)
{
    for (size_t i = 0; i < sizeof(log_names) / sizeof(log_names[0]); i++) {
        if (strcmp(s, log_names[i]) == 0) {
            *out = (enum rl_log_level)i;
            return 0;
        }
    }
    return -EINVAL;
}

size_t
rl_log_vformat(char *line, size_t cap, const char *fmt, va_list ap)
{
    int n = vsnprintf(line, cap, fmt, ap);

    if (n < 0) {
        line[0] = '\0';
        return 0;
    }
    return (size_t)n < cap ? (size_t)n : cap - 1;
}

/* Writes one line: the prefix, fmt with ap, then tail (may be NULL), cut to the buffer. */
static void
log_line(enum rl_log_level level, const char *tail, const char *fmt, va_list ap)
{
    char line[1024];
    struct timespec ts;
    struct tm tm;
    size_t n;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = (size_t)snprintf(line, sizeof(line), "%02d:%02d:%02d.%03ld %s %s: ", tm.tm_hour, tm.tm_min,
                         tm.tm_sec, ts.tv_nsec / 1000000, log_tag, log_names[level]);
    /* A line longer than the buffer is cut; the newline is always kept. */
    n += rl_log_vformat(line + n, sizeof(line) - n - 1, fmt, ap);
    if (tail != NULL) {
        size_t t = strlen(tail);

        if (t > sizeof(line) - n - 1) {
            t = sizeof(line) - n - 1;
        }
        memcpy(line + n, tail, t);
        n += t;
    }
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}

void
rl_log(enum rl_log_level level, const char *fmt, ...)
{
    va_list ap;

    if (level > log_level) {
        return;
    }
    va_start(ap, fmt);
    log_line(level, NULL, fmt, ap);
    va_end(ap);
}

bool
rl_log_limited(struct rl_log_limit *lim, uint64_t now_ms, uint64_t every_ms,
               enum rl_log_level level, const char *fmt, ...)
{
    char tail[96];
    va_list ap;

    if (level > log_level) {
        return false;
    }
    if (lim->printed && now_ms - lim->last_ms < every_ms && now_ms >= lim->last_ms) {
        lim->suppressed++;
        return false;
    }
    tail[0] = '\0';
    if (lim->suppressed > 0) {
        snprintf(tail, sizeof(tail), " (%llu more like this in the last %llu s not logged)",
                 (unsigned long long)lim->suppressed,
                 (unsigned long long)(now_ms >= lim->last_ms
                                          ? (now_ms - lim->last_ms + 999) / 1000
                                          : 0));
    }
    lim->printed = true;
    lim->last_ms = now_ms;
    lim->suppressed = 0;
    va_start(ap, fmt);
    log_line(level, tail[0] != '\0' ? tail : NULL, fmt, ap);
    va_end(ap);
    return true;
}
