/*
 * fuzz_slices: the regions' slices text (common/slices.h, docs/REGIONS.md) on any bytes.
 * Invariants: a text is accepted whole or refused with one "slices line N:" line; every line
 * of an accepted text is found again by its own (service, user) with its slice, in 0..1000,
 * and counted; escaping any bytes and unescaping them gives them back.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "slices.h"

struct seen {
    const struct rl_slices *s;
    size_t users, services;
};

static void
each(void *arg, const char *service, size_t slen, const char *user, size_t ulen, uint32_t slice)
{
    struct seen *x = arg;

    MUST(slice <= 1000);
    MUST(slen >= 1 && slen <= 128);
    if (user != NULL) {
        MUST(ulen >= 1 && ulen <= 256);
        MUST(rl_slices_get(x->s, service, slen, user, ulen, 4242) == slice);
        x->users++;
    } else {
        x->services++;
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rl_slices *s = NULL;
    char err[256];
    char *esc, *copy;
    size_t n;
    int rc = rl_slices_parse((const char *)data, size, &s, err, sizeof(err));

    if (rc != 0) {
        MUST(s == NULL);
        MUST(strncmp(err, "slices line ", 12) == 0 && strchr(err, '\n') == NULL);
    } else {
        struct seen x = {s, 0, 0};

        rl_slices_each(s, each, &x);
        MUST(x.users == rl_slices_users(s) && x.services == rl_slices_services(s));
        MUST(x.users + x.services <= RL_SLICES_ENTRIES_MAX);
        rl_slices_destroy(s);
    }
    n = rl_slices_escape((const char *)data, size, NULL, 0);
    esc = malloc(n + 1);
    MUST(esc != NULL);
    MUST(rl_slices_escape((const char *)data, size, esc, n + 1) == n);
    MUST(strlen(esc) == n);
    copy = strdup(esc);
    MUST(copy != NULL);
    MUST(rl_slices_unescape(copy) == (long)size);
    MUST(memcmp(copy, data, size) == 0);
    free(copy);
    free(esc);
    return 0;
}
