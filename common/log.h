/*
 * log: leveled logging to stderr, the one process-global thing in ratelimiter.
 * Not for request logs (see reqlog.h) nor for anything a client reads.
 */
#ifndef RL_LOG_H
#define RL_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RL_LOG_LEVEL_MAP(X)                                                                        \
    X(ERROR, "error")                                                                              \
    X(WARN, "warn")                                                                                \
    X(INFO, "info")                                                                                \
    X(DEBUG, "debug")

enum rl_log_level {
#define RL_LOG_ENUM(n, s) RL_LOG_##n,
    RL_LOG_LEVEL_MAP(RL_LOG_ENUM)
#undef RL_LOG_ENUM
};

/* Sets the most verbose level printed (RL_LOG_INFO by default) and the process tag. */
void rl_log_setup(enum rl_log_level level, const char *tag);

/*
 * Sends the log (and everything else written to stderr) to path from now on: opened for
 * appending, created 0640. rl_log_reopen opens the same path again (after logrotate moved
 * the file). Both return 0 or a negative errno (errno set too).
 */
int rl_log_open(const char *path);
int rl_log_reopen(void);

/* Parses "error", "warn", "info" or "debug"; returns 0 or -EINVAL. */
int rl_log_level_parse(const char *s, enum rl_log_level *out);

/* Prints one line "TIME tag LEVEL message" to stderr when level is enabled. */
void rl_log(enum rl_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Formats into line[0..cap) (cap >= 1), cutting what does not fit, and returns the length
 * kept: at most cap - 1, 0 on an encoding error. For the callers that build one line of
 * their own (a message to the console, a metrics line).
 */
size_t rl_log_vformat(char *line, size_t cap, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/*
 * A log line that something outside the process can make happen at will (a client's
 * request refused by a node): one struct rl_log_limit per reason, owned by one thread.
 * rl_log_limited prints at most one line per every_ms of now_ms (the caller's clock, in
 * ms); the lines it drops in between are counted, and the next line it prints ends in
 * " (N more like this in the last S s not logged)". Returns true when it printed.
 */
struct rl_log_limit {
    uint64_t last_ms;    /* when the last line was printed */
    uint64_t suppressed; /* lines dropped since */
    bool printed;        /* a line was printed (last_ms is meaningful) */
};

bool rl_log_limited(struct rl_log_limit *lim, uint64_t now_ms, uint64_t every_ms,
                    enum rl_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#define rl_log_error(...) rl_log(RL_LOG_ERROR, __VA_ARGS__)
#define rl_log_warn(...) rl_log(RL_LOG_WARN, __VA_ARGS__)
#define rl_log_info(...) rl_log(RL_LOG_INFO, __VA_ARGS__)
#define rl_log_debug(...) rl_log(RL_LOG_DEBUG, __VA_ARGS__)

#endif
