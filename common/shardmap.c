/*
 * shardmap: the key hash and the rendezvous placement of shards on members, overridden by
 * an assignment (assignment.c). Everything here must agree bit for bit between processes,
 * so the mapping is pinned by known-answer tests (tests/common/check_shardmap.c) and spelt
 * out in docs/SHARDING.md. Not for membership (who is live), the assignment's text format,
 * or I/O.
 */
#include "shardmap.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "assignment.h"

/*
 * XXH3 inlined: the streaming path's XXH3_state_t on the stack then relies on no shared
 * library's layout, and the router's short keys hash no slower (0.3 ns of 15 faster than a
 * call into libxxhash, bench/shardmap_bench.c). Digests are the same: XXH3 is specified.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

/* The protocol's longest key: a 128-byte service, the 0x00, a 256-byte user. */
#define KEY_STACK (128 + 1 + 256)

/* Golden-ratio increment: spreads consecutive shard numbers over all 64 bits. */
#define SHARD_SPREAD 0x9e3779b97f4a7c15ull

static uint64_t
key_hash_stream(const char *service, size_t slen, const char *user, size_t ulen)
{
    XXH3_state_t st;
    static const unsigned char zero = 0;

    XXH3_INITSTATE(&st);
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, service, slen);
    XXH3_64bits_update(&st, &zero, 1);
    XXH3_64bits_update(&st, user, ulen);
    return XXH3_64bits_digest(&st);
}

uint64_t
rl_shardmap_key_hash(const char *service, size_t slen, const char *user, size_t ulen)
{
    unsigned char buf[KEY_STACK];

    /* Written so that slen + ulen cannot overflow. */
    if (ulen >= KEY_STACK || slen >= KEY_STACK - ulen) {
        return key_hash_stream(service, slen, user, ulen);
    }
    if (slen > 0) {
        memcpy(buf, service, slen);
    }
    buf[slen] = 0;
    if (ulen > 0) {
        memcpy(buf + slen + 1, user, ulen);
    }
    return XXH3_64bits(buf, slen + 1 + ulen);
}

/* SplitMix64's finalizer (Stafford's Mix13): a bijection with full avalanche. */
static inline uint64_t
mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The rendezvous weight of a member (by its name's hash) for a shard. */
static inline uint64_t
weight(uint64_t name_hash, uint32_t shard)
{
    return mix64(name_hash ^ ((uint64_t)shard * SHARD_SPREAD));
}

static uint64_t
name_hash(const char *name)
{
    return XXH3_64bits(name, strnlen(name, RL_SHARDMAP_NAME_MAX));
}

static int
member_cmp(const void *x, const void *y)
{
    const struct rl_member *a = x, *b = y;

    return strcmp(a->name, b->name);
}

static bool
member_ok(const struct rl_member *m)
{
    return m->name[0] != '\0' && memchr(m->name, '\0', RL_SHARDMAP_NAME_MAX) != NULL;
}

int
rl_shardmap_create(struct rl_shardmap **out, uint32_t nshards, const struct rl_member *members,
                   size_t nmembers, const struct rl_assignment *assignment)
{
    struct rl_shardmap *m;
    uint64_t *hash = NULL;
    uint32_t s, best, o;
    uint64_t w, bw;
    size_t i;
    int rc = -EINVAL;

    *out = NULL;
    if (nshards == 0 || nshards > RL_SHARDMAP_SHARDS_MAX || nmembers >= RL_SHARDMAP_NONE ||
        (assignment != NULL && assignment->nshards != nshards)) {
        return -EINVAL;
    }
    for (i = 0; i < nmembers; i++) {
        if (!member_ok(&members[i])) {
            return -EINVAL;
        }
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return -ENOMEM;
    }
    m->nshards = nshards;
    m->nmembers = nmembers;
    m->owner = malloc(nshards * sizeof(*m->owner));
    m->members = malloc((nmembers > 0 ? nmembers : 1) * sizeof(*m->members));
    hash = malloc((nmembers > 0 ? nmembers : 1) * sizeof(*hash));
    if (m->owner == NULL || m->members == NULL || hash == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    if (nmembers > 0) {
        memcpy(m->members, members, nmembers * sizeof(*members));
        qsort(m->members, nmembers, sizeof(*m->members), member_cmp);
    }
    for (i = 0; i < nmembers; i++) {
        /* Two members of one name would make the table depend on their order. */
        if (i > 0 && strcmp(m->members[i - 1].name, m->members[i].name) == 0) {
            rc = -EINVAL;
            goto fail;
        }
        hash[i] = name_hash(m->members[i].name);
    }
    for (s = 0; s < nshards; s++) {
        /* Members are sorted, so on equal weights the smaller name keeps the shard. Only
         * active members are placed (a joining or leaving one owns nothing). */
        best = RL_SHARDMAP_NONE;
        bw = 0;
        for (i = 0; i < nmembers; i++) {
            if (m->members[i].state != RL_MEMBER_ACTIVE) {
                continue;
            }
            w = weight(hash[i], s);
            if (best == RL_SHARDMAP_NONE || w > bw) {
                bw = w;
                best = (uint32_t)i;
            }
        }
        m->owner[s] = best;
        if (best != RL_SHARDMAP_NONE && assignment != NULL && assignment->owner[s][0] != '\0') {
            o = rl_shardmap_find(m, assignment->owner[s]);
            if (o != RL_SHARDMAP_NONE && m->members[o].state == RL_MEMBER_ACTIVE) {
                m->owner[s] = o;
            }
        }
    }
    free(hash);
    *out = m;
    return 0;
fail:
    free(hash);
    rl_shardmap_destroy(m);
    return rc;
}

void
rl_shardmap_destroy(struct rl_shardmap *m)
{
    if (m == NULL) {
        return;
    }
    free(m->members);
    free(m->owner);
    free(m);
}

uint64_t
rl_shardmap_digest(const struct rl_shardmap *m)
{
    XXH3_state_t st;
    unsigned char buf[4096];
    size_t len = 4, nl;
    uint32_t s, o;

    XXH3_INITSTATE(&st);
    XXH3_64bits_reset(&st);
    buf[0] = (unsigned char)m->nshards; /* little-endian, whatever the host's order */
    buf[1] = (unsigned char)(m->nshards >> 8);
    buf[2] = (unsigned char)(m->nshards >> 16);
    buf[3] = (unsigned char)(m->nshards >> 24);
    /* Batched through buf: one update per few hundred shards, not one per name. */
    for (s = 0; s < m->nshards; s++) {
        if (len > sizeof(buf) - RL_SHARDMAP_NAME_MAX) {
            XXH3_64bits_update(&st, buf, len);
            len = 0;
        }
        o = m->owner[s];
        if (o != RL_SHARDMAP_NONE) {
            /* A member's name is NUL-terminated within RL_SHARDMAP_NAME_MAX (create). */
            nl = strnlen(m->members[o].name, RL_SHARDMAP_NAME_MAX - 1);
            memcpy(buf + len, m->members[o].name, nl);
            len += nl;
        }
        buf[len++] = 0;
    }
    XXH3_64bits_update(&st, buf, len);
    return XXH3_64bits_digest(&st);
}

uint32_t
rl_shardmap_find(const struct rl_shardmap *m, const char *name)
{
    size_t lo = 0, hi = m->nmembers, mid;
    int c;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        c = strcmp(name, m->members[mid].name);
        if (c == 0) {
            return (uint32_t)mid;
        }
        if (c < 0) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return RL_SHARDMAP_NONE;
}

uint32_t
rl_shardmap_hrw(uint32_t shard, const struct rl_member *members, size_t n)
{
    uint32_t best = RL_SHARDMAP_NONE;
    uint64_t w, bw = 0;
    size_t i;

    for (i = 0; i < n; i++) {
        if (members[i].state != RL_MEMBER_ACTIVE) {
            continue;
        }
        w = weight(name_hash(members[i].name), shard);
        if (best == RL_SHARDMAP_NONE || w > bw ||
            (w == bw && strncmp(members[i].name, members[best].name, RL_SHARDMAP_NAME_MAX) < 0)) {
            bw = w;
            best = (uint32_t)i;
        }
    }
    return best;
}

void
rl_shardmap_balance(const struct rl_shardmap *m, uint32_t *max, double *mean)
{
    uint32_t *count, s, owned = 0;
    size_t i, active = 0;

    *max = 0;
    *mean = 0;
    for (i = 0; i < m->nmembers; i++) {
        active += m->members[i].state == RL_MEMBER_ACTIVE;
    }
    if (active == 0) {
        return;
    }
    count = calloc(m->nmembers, sizeof(*count));
    if (count == NULL) {
        /* Counting without a buffer: O(S * n), but balance is a report, not a hot path. */
        for (i = 0; i < m->nmembers; i++) {
            uint32_t c = 0;

            for (s = 0; s < m->nshards; s++) {
                c += m->owner[s] == i;
            }
            *max = c > *max ? c : *max;
            owned += c;
        }
    } else {
        for (s = 0; s < m->nshards; s++) {
            if (m->owner[s] != RL_SHARDMAP_NONE) {
                count[m->owner[s]]++;
                owned++;
            }
        }
        for (i = 0; i < m->nmembers; i++) {
            *max = count[i] > *max ? count[i] : *max;
        }
        free(count);
    }
    *mean = (double)owned / (double)active;
}

const char *
rl_member_state_name(uint8_t state)
{
    switch (state) {
#define RL_MEMBER_STATE_CASE(n, v, str)                                                            \
    case v:                                                                                        \
        return str;
        RL_MEMBER_STATE_MAP(RL_MEMBER_STATE_CASE)
#undef RL_MEMBER_STATE_CASE
    default:
        return "?";
    }
}
