/*
 * output: how rl-cli writes figures for people: ERROR replies, table cells, times,
 * durations and byte counts. JSON is written with common/json.h; this module only ends a
 * document.
 */
#include <stdio.h>
#include <time.h>

#include "cli.h"

void
cli_json_done(struct rl_json *j)
{
    rl_json_end_object(j);
    (void)rl_json_finish(j);
    putchar('\n');
}

void
cli_print_error_reply(const struct rl_wire_reply *rep)
{
    printf("ERROR %s: %.*s\n", rl_wire_err_name(rep->err), (int)rep->message.len,
           rep->message.ptr != NULL ? rep->message.ptr : "");
}

const char *
cli_upper(const char *s, char *buf, size_t len)
{
    size_t i = 0;

    for (; len > 0 && s[i] != '\0' && i < len - 1; i++) {
        buf[i] = s[i] >= 'a' && s[i] <= 'z' ? (char)(s[i] - 'a' + 'A') : s[i];
    }
    if (len > 0) {
        buf[i] = '\0';
    }
    return buf;
}

void
cli_print_cell(const struct rl_wire_str *v, const char *none, int width)
{
    int n = 0;

    if (v->ptr == NULL) {
        n = printf("%s", none);
    } else {
        for (uint32_t i = 0; i < v->len; i++, n++) {
            unsigned char ch = (unsigned char)v->ptr[i];

            putchar(ch < 0x20 || ch == 0x7f ? '?' : ch);
        }
    }
    printf("%*s", n < width ? width - n + 1 : 1, "");
}

void
cli_format_ms(uint64_t ms, char *buf, size_t len)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;

    if (gmtime_r(&secs, &tm) == NULL) {
        snprintf(buf, len, "%llu", (unsigned long long)ms);
        return;
    }
    snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (unsigned)(ms % 1000));
}

void
cli_format_duration(uint64_t ms, char *buf, size_t len)
{
    if (ms < 10000) {
        snprintf(buf, len, "%llums", (unsigned long long)ms);
    } else if (ms < 600000) {
        snprintf(buf, len, "%.1fs", (double)ms / 1000);
    } else {
        snprintf(buf, len, "%llum%02llus", (unsigned long long)(ms / 60000),
                 (unsigned long long)(ms / 1000 % 60));
    }
}

void
cli_format_bytes(int64_t v, char *buf, size_t len)
{
    if (v >= (1ll << 30)) {
        snprintf(buf, len, "%.1f GiB", (double)v / (double)(1ll << 30));
    } else if (v >= (1ll << 20)) {
        snprintf(buf, len, "%.1f MiB", (double)v / (double)(1ll << 20));
    } else if (v >= 1024) {
        snprintf(buf, len, "%.1f KiB", (double)v / 1024.0);
    } else {
        snprintf(buf, len, "%lld B", (long long)v);
    }
}
