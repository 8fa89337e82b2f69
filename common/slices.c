/*
 * slices: a slices text parsed into one open-addressing table keyed by (service, user), a
 * service's own line having no user (slices.h). The names live in one copy of the text.
 */
#include "slices.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "conf.h"
#include "parse.h"

struct sl_entry {
    const char *service; /* NULL: empty slot */
    const char *user;    /* NULL: the service's own line */
    uint32_t slen, ulen;
    uint32_t slice;
};

struct rl_slices {
    char *text; /* the names, NUL-separated */
    struct sl_entry *slot;
    size_t mask;
    size_t nusers, nservices;
    uint64_t generation;
    uint32_t dflt; /* UINT32_MAX: none */
};

static uint64_t
sl_hash(const char *service, size_t slen, const char *user, size_t ulen)
{
    uint64_t h = XXH3_64bits(service, slen);

    return user == NULL ? h : XXH3_64bits_withSeed(user, ulen, h);
}

static struct sl_entry *
sl_find(const struct rl_slices *s, const char *service, size_t slen, const char *user, size_t ulen)
{
    size_t i = (size_t)sl_hash(service, slen, user, ulen) & s->mask;

    for (; s->slot[i].service != NULL; i = (i + 1) & s->mask) {
        const struct sl_entry *e = &s->slot[i];

        if (e->slen == slen && memcmp(e->service, service, slen) == 0 &&
            (e->user == NULL) == (user == NULL) &&
            (user == NULL || (e->ulen == ulen && memcmp(e->user, user, ulen) == 0))) {
            return (struct sl_entry *)e;
        }
    }
    return (struct sl_entry *)&s->slot[i];
}

long
rl_slices_unescape(char *s)
{
    size_t o = 0;

    for (size_t i = 0; s[i] != '\0'; i++) {
        if (s[i] == '%') {
            int hi = rl_hex_digit((unsigned char)s[i + 1]);
            int lo = hi < 0 ? -1 : rl_hex_digit((unsigned char)s[i + 2]);

            if (lo < 0) {
                return -1;
            }
            s[o++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            s[o++] = s[i];
        }
    }
    s[o] = '\0';
    return (long)o;
}

size_t
rl_slices_escape(const char *user, size_t ulen, char *out, size_t outlen)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;

    for (size_t i = 0; i < ulen; i++) {
        unsigned char c = (unsigned char)user[i];
        char buf[3];
        size_t k = 0;

        if (c > ' ' && c <= '~' && c != '%') {
            buf[k++] = (char)c;
        } else {
            buf[k++] = '%';
            buf[k++] = hex[c >> 4];
            buf[k++] = hex[c & 15];
        }
        for (size_t j = 0; j < k; j++, n++) {
            if (outlen > 0 && n < outlen - 1) {
                out[n] = buf[j];
            }
        }
    }
    if (outlen > 0) {
        out[n < outlen ? n : outlen - 1] = '\0';
    }
    return n;
}

/* A slice: an integer 0..RL_CONF_SLICE_UNIT. */
static bool
sl_number(const char *w, uint32_t *out)
{
    char *end = NULL;
    unsigned long v;

    if (w == NULL || *w < '0' || *w > '9') {
        return false;
    }
    v = strtoul(w, &end, 10);
    if (*end != '\0' || v > RL_CONF_SLICE_UNIT) {
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

static int
sl_fail(char *err, size_t errlen, size_t line, const char *why)
{
    snprintf(err, errlen, "slices line %zu: %s", line, why);
    return -EINVAL;
}

int
rl_slices_parse(const char *text, size_t len, struct rl_slices **out, char *err, size_t errlen)
{
    struct rl_slices *s = calloc(1, sizeof(*s));
    size_t lines = 0, cap = 16, lineno = 0;
    char *p, *save = NULL;
    int rc = -EINVAL;

    *out = NULL;
    if (s == NULL || (s->text = malloc(len + 1)) == NULL) {
        free(s);
        return -ENOMEM;
    }
    memcpy(s->text, text, len);
    s->text[len] = '\0';
    s->dflt = UINT32_MAX;
    {
        const char *nul = memchr(text, '\0', len);

        if (nul != NULL) { /* the lines past it would be dropped unread */
            size_t at = 1;

            for (const char *q = text; q < nul; q++) {
                at += *q == '\n';
            }
            rc = sl_fail(err, errlen, at, "a NUL byte (the slices are text)");
            goto fail;
        }
    }
    for (size_t i = 0; i < len; i++) {
        lines += text[i] == '\n';
    }
    if (lines > 2 * RL_SLICES_ENTRIES_MAX + 16) {
        rc = sl_fail(err, errlen, 0, "too many lines");
        goto fail;
    }
    while (cap < 2 * lines + 2) {
        cap *= 2;
    }
    s->slot = calloc(cap, sizeof(*s->slot));
    if (s->slot == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    s->mask = cap - 1;
    for (char *line = strtok_r(s->text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        char *w[5] = {NULL, NULL, NULL, NULL, NULL};
        char *wsave = NULL;
        int nw = 0;
        uint32_t v = 0;

        lineno++;
        if (line[0] == '#') {
            continue;
        }
        for (p = strtok_r(line, " \t\r", &wsave); p != NULL && nw < 5;
             p = strtok_r(NULL, " \t\r", &wsave)) {
            w[nw++] = p;
        }
        if (nw == 0) {
            continue;
        }
        if (nw == 5) {
            rc = sl_fail(err, errlen, lineno, "too many words");
            goto fail;
        }
        if (strcmp(w[0], "generation") == 0 && nw == 2) {
            char *end = NULL;

            errno = 0;
            s->generation = strtoull(w[1], &end, 10);
            if (w[1][0] < '0' || w[1][0] > '9' || *end != '\0' || errno == ERANGE) {
                rc = sl_fail(err, errlen, lineno, "the generation is not a number 0..2^64-1");
                goto fail;
            }
        } else if (strcmp(w[0], "default") == 0 && nw == 2 && sl_number(w[1], &v)) {
            s->dflt = v;
        } else if ((strcmp(w[0], "service") == 0 && nw == 3 && sl_number(w[2], &v)) ||
                   (strcmp(w[0], "user") == 0 && nw == 4 && sl_number(w[3], &v))) {
            bool user = w[0][0] == 'u';
            long ulen = user ? rl_slices_unescape(w[2]) : 0;
            size_t slen = strlen(w[1]);
            struct sl_entry *e;

            if ((user && (ulen < 1 || ulen > 256)) || slen > 128) {
                rc = sl_fail(err, errlen, lineno, "bad service or user name");
                goto fail;
            }
            if (s->nusers + s->nservices == RL_SLICES_ENTRIES_MAX) {
                rc = sl_fail(err, errlen, lineno, "more than 65536 service and user lines");
                goto fail;
            }
            e = sl_find(s, w[1], slen, user ? w[2] : NULL, user ? (size_t)ulen : 0);
            if (e->service == NULL) {
                e->service = w[1];
                e->slen = (uint32_t)slen;
                e->user = user ? w[2] : NULL;
                e->ulen = user ? (uint32_t)ulen : 0;
                s->nusers += user;
                s->nservices += !user;
            }
            e->slice = v;
        } else {
            rc = sl_fail(err, errlen, lineno,
                         "not \"generation N\", \"default S\", \"service NAME S\" or "
                         "\"user SERVICE USER S\" with S in 0..1000");
            goto fail;
        }
    }
    *out = s;
    return 0;

fail:
    rl_slices_destroy(s);
    return rc;
}

void
rl_slices_destroy(struct rl_slices *s)
{
    if (s != NULL) {
        free(s->text);
        free(s->slot);
        free(s);
    }
}

uint32_t
rl_slices_get(const struct rl_slices *s, const char *service, size_t slen, const char *user,
              size_t ulen, uint32_t fallback)
{
    const struct sl_entry *e;

    if (s == NULL) {
        return fallback;
    }
    if (s->nusers > 0) {
        e = sl_find(s, service, slen, user, ulen);
        if (e->service != NULL) {
            return e->slice;
        }
    }
    if (s->nservices > 0) {
        e = sl_find(s, service, slen, NULL, 0);
        if (e->service != NULL) {
            return e->slice;
        }
    }
    return s->dflt != UINT32_MAX ? s->dflt : fallback;
}

uint64_t
rl_slices_generation(const struct rl_slices *s)
{
    return s == NULL ? 0 : s->generation;
}

size_t
rl_slices_users(const struct rl_slices *s)
{
    return s == NULL ? 0 : s->nusers;
}

size_t
rl_slices_services(const struct rl_slices *s)
{
    return s == NULL ? 0 : s->nservices;
}

void
rl_slices_each(const struct rl_slices *s,
               void (*fn)(void *arg, const char *service, size_t slen, const char *user,
                          size_t ulen, uint32_t slice),
               void *arg)
{
    if (s == NULL) {
        return;
    }
    for (size_t i = 0; i <= s->mask; i++) {
        const struct sl_entry *e = &s->slot[i];

        if (e->service != NULL) {
            fn(arg, e->service, e->slen, e->user, e->ulen, e->slice);
        }
    }
}
