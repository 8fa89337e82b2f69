/*
 * parse: the shared value parsers (parse.h).
 */
#include "parse.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PARSE_DURATION_PHRASE "is not a duration (use ms, s, m, h or d)"


static int
lower(int ch)
{
    return (ch >= 'A' && ch <= 'Z') ? ch - 'A' + 'a' : ch;
}

/* Reads decimal digits from *s into *out; NULL, "not a number" or "too large". */
static const char *
scan_u64(const char **s, uint64_t *out)
{
    const char *q = *s;
    uint64_t v = 0;

    if (!rl_is_digit((unsigned char)*q)) {
        return "is not a number";
    }
    for (; rl_is_digit((unsigned char)*q); q++) {
        unsigned d = (unsigned)(*q - '0');

        if (v > (UINT64_MAX - d) / 10) {
            return "is too large";
        }
        v = v * 10 + d;
    }
    *s = q;
    *out = v;
    return NULL;
}

const char *
rl_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    const char *why = scan_u64(&s, out);

    if (why == NULL && *s != '\0') {
        return "is not a number";
    }
    if (why == NULL && (*out < min || *out > max)) {
        return "is out of range";
    }
    return why;
}

/* The value parsers of conf.h. */

const char *
rl_parse_duration_ms(const char *s, uint64_t *out)
{
    static const struct {
        const char *unit;
        uint64_t ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
    uint64_t v;
    size_t i;

    if (scan_u64(&s, &v) != NULL) {
        return rl_is_digit((unsigned char)*s) ? "is too large" : PARSE_DURATION_PHRASE;
    }
    for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(s, units[i].unit) == 0) {
            if (v > UINT64_MAX / units[i].ms) {
                return "is too large";
            }
            *out = v * units[i].ms;
            return NULL;
        }
    }
    return PARSE_DURATION_PHRASE;
}

const char *
rl_parse_size(const char *s, uint64_t *out)
{
    static const char *const phrase = "is not a size (use bytes or k, kb, m, mb, g or gb)";
    unsigned shift;
    uint64_t v;

    if (scan_u64(&s, &v) != NULL) {
        return rl_is_digit((unsigned char)*s) ? "is too large" : phrase;
    }
    switch (lower((unsigned char)*s)) {
    case '\0':
        *out = v;
        return NULL;
    case 'k':
        shift = 10;
        break;
    case 'm':
        shift = 20;
        break;
    case 'g':
        shift = 30;
        break;
    default:
        return phrase;
    }
    s++;
    if (lower((unsigned char)*s) == 'b') {
        s++;
    }
    if (*s != '\0') {
        return phrase;
    }
    if (v > (UINT64_MAX >> shift)) {
        return "is too large";
    }
    *out = v << shift;
    return NULL;
}

const char *
rl_parse_hostport(const char *s, char **host, uint16_t *port)
{
    static const char *const phrase = "is not HOST:PORT";
    const char *h = s;
    const char *colon;
    const char *why;
    size_t hlen;
    uint64_t v;
    size_t i;

    if (*s == '[') {
        /* [IPV6]:PORT, optionally with a zone ("[fe80::1%eth0]:7400"). */
        const char *close = strchr(s, ']');

        if (close == NULL || close[1] != ':') {
            return phrase;
        }
        h = s + 1;
        hlen = (size_t)(close - h);
        colon = close + 1;
        for (i = 0; i < hlen; i++) {
            if (!rl_is_alnum((unsigned char)h[i]) && h[i] != ':' && h[i] != '.' && h[i] != '%') {
                return phrase;
            }
        }
    } else {
        colon = strchr(s, ':');
        if (colon == NULL || strchr(colon + 1, ':') != NULL) {
            return phrase;
        }
        hlen = (size_t)(colon - s);
        for (i = 0; i < hlen; i++) {
            if (!rl_is_alnum((unsigned char)h[i]) && h[i] != '-' && h[i] != '.' && h[i] != '_') {
                return phrase;
            }
        }
    }
    if (hlen == 0) {
        return phrase;
    }
    why = rl_parse_u64(colon + 1, 0, UINT64_MAX, &v);
    if (why != NULL && strcmp(why, "is too large") != 0) {
        return phrase;
    }
    if (why != NULL || v < 1 || v > 65535) {
        return "has a port outside 1..65535";
    }
    *host = strndup(h, hlen);
    if (*host == NULL) {
        return "could not be stored: out of memory";
    }
    *port = (uint16_t)v;
    return NULL;
}

int
rl_format_hostport(char *buf, size_t len, const char *host, uint16_t port)
{
    return snprintf(buf, len, strchr(host, ':') != NULL ? "[%s]:%u" : "%s:%u", host,
                    (unsigned)port);
}

bool
rl_parse_is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;

    if (inet_pton(AF_INET, host, &a4) == 1) {
        return (ntohl(a4.s_addr) >> 24) == 127;
    }
    if (inet_pton(AF_INET6, host, &a6) == 1) {
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

        if (IN6_IS_ADDR_LOOPBACK(&a6)) {
            return true;
        }
        return memcmp(a6.s6_addr, mapped, 12) == 0 && a6.s6_addr[12] == 127;
    }
    return false;
}
