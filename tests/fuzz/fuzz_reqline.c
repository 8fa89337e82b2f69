/*
 * fuzz_reqline: the request-log line (common/reqline.h) on any bytes. Invariants: a parsed
 * line's fields lie inside it; an accepted line whose fields unescape formats back into a
 * line that parses to the same values (its eighth field, `cached`, `adjust` or `release`,
 * included); escaping any bytes and unescaping them gives the
 * bytes back.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "reqline.h"
#include "fuzz.h"

static void
inside(const char *f, uint32_t len, const char *p, size_t n)
{
    MUST(f >= p && f + len <= p + n);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    struct rl_reqline r, r2;
    static char svc[RL_REQLINE_MAX], usr[RL_REQLINE_MAX], line[RL_REQLINE_MAX];
    static char esc[3 * 4096 + 1], back[3 * 4096 + 1];

    /* Escaping round-trips for any bytes. */
    if (size <= 4096) {
        size_t e = rl_reqline_escape(esc, p, size);
        int u = rl_reqline_unescape(esc, e, back);

        MUST(u == (int)size && memcmp(back, p, size) == 0);
    }
    if (size > RL_REQLINE_MAX || rl_reqline_parse(p, size, 0, &r) != 0) {
        return 0;
    }
    inside(r.node, r.nlen, p, size);
    inside(r.service, r.slen, p, size);
    inside(r.user, r.ulen, p, size);
    int sl = rl_reqline_unescape(r.service, r.slen, svc);
    int ul = rl_reqline_unescape(r.user, r.ulen, usr);
    if (sl < 0 || ul < 0 || r.nlen >= 64) {
        return 0;
    }
    char node[64];
    memcpy(node, r.node, r.nlen);
    node[r.nlen] = '\0';
    size_t n = rl_reqline_format_tag(line, r.ts_ms, r.shard,
                                     strcmp(node, "-") == 0 ? NULL : node, r.code, r.key_hash, svc,
                                     (size_t)sl, usr, (size_t)ul, r.tag);
    MUST(n >= 1 && line[n - 1] == '\n');
    if (rl_reqline_parse(line, n - 1, 0, &r2) == 0) {
        MUST(r2.ts_ms == r.ts_ms && r2.shard == r.shard && r2.code == r.code &&
             r2.key_hash == r.key_hash && r2.tag == r.tag && r2.cached == r.cached);
    }
    return 0;
}
