/*
 * log: leveled lines on stderr. One write(2) per line so lines from several threads (the
 * ZooKeeper client's) do not interleave. Not buffered: logs are for rare events. A log file
 * is put in place of stderr with dup2(2), atomically, so a thread writing while the file is
 * reopened never sees a closed descriptor, and whatever else writes to stderr (the
 * ZooKeeper client's own warnings) lands in the file too.
 */
#include "log.h"

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
    fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) {
        return -errno;
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

void
rl_log(enum rl_log_level level, const char *fmt, ...)
{
    char line[1024];
    struct timespec ts;
    struct tm tm;
    size_t n;
    va_list ap;

    if (level > log_level) {
        return;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = (size_t)snprintf(line, sizeof(line), "%02d:%02d:%02d.%03ld %s %s: ", tm.tm_hour, tm.tm_min,
                         tm.tm_sec, ts.tv_nsec / 1000000, log_tag, log_names[level]);
    /* A line longer than the buffer is cut; the newline is always kept. */
    va_start(ap, fmt);
    n += rl_log_vformat(line + n, sizeof(line) - n - 1, fmt, ap);
    va_end(ap);
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}
