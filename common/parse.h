/*
 * parse: the value parsers every program shares: config values and command-line options
 * alike. Each returns NULL on success, or a short phrase to print after the value, so a
 * caller writes "--keys: \"12x\" is not a number" or "cluster.conf:7: listen ... is not
 * HOST:PORT" with the same words everywhere. Not for whole config lines (conf_load.c).
 */
#ifndef RL_PARSE_H
#define RL_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Character classes of the parsers, ASCII only (no locale). */
static inline int
rl_is_digit(int ch)
{
    return ch >= '0' && ch <= '9';
}

static inline int
rl_is_alnum(int ch)
{
    return rl_is_digit(ch) || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

/* The value of hexadecimal digit ch (either case), or -1 if it is not one. */
static inline int
rl_hex_digit(int ch)
{
    if (rl_is_digit(ch)) {
        return ch - '0';
    }
    if (ch >= 'a' && ch <= 'f') {
        return ch - 'a' + 10;
    }
    if (ch >= 'A' && ch <= 'F') {
        return ch - 'A' + 10;
    }
    return -1;
}

/*
 * Decimal digits only (no sign, no blanks, no 0x), in [min, max]. Phrases: "is not a
 * number", "is too large" (past 2^64-1), "is out of range" (outside [min, max]).
 */
const char *rl_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* Digits and a required unit ms, s, m, h or d ("50ms", "4s", "1h"), in milliseconds. */
const char *rl_parse_duration_ms(const char *s, uint64_t *out);

/* Digits, then nothing (bytes) or k, kb, m, mb, g, gb in any case (powers of 1024). */
const char *rl_parse_size(const char *s, uint64_t *out);

/*
 * HOST:PORT or [IPV6]:PORT (a zone is allowed: "[fe80::1%eth0]:7400"), port 1..65535. On
 * success *host is a malloc'd copy without brackets that the caller frees.
 */
const char *rl_parse_hostport(const char *s, char **host, uint16_t *port);

/* True when host is a loopback address literal: 127.0.0.0/8, ::1, or ::ffff:127.x.y.z. */
bool rl_parse_is_loopback(const char *host);

/* Formats host and port back into "HOST:PORT", bracketing an IPv6 host; returns snprintf's. */
int rl_format_hostport(char *buf, size_t len, const char *host, uint16_t port);

#endif
