/*
 * workload: the bytes every request shares, and each worker's draw of users (workload.h).
 */
#include <string.h>
#include <unistd.h>

#include "mp.h"
#include "workload.h"

void
lg_encode_constants(struct bench *b)
{
    const struct opts *o = &b->o;
    char *p;

    p = rl_mp_put_str(b->prefix, o->service, strlen(o->service));
    b->prefix_len = (size_t)(p - b->prefix);
    if (o->endpoint != NULL) {
        p = rl_mp_put_str(b->suffix, o->endpoint, strlen(o->endpoint));
    } else {
        p = b->suffix;
        *p++ = (char)0xc0;
    }
    /* element 5: CHECK's cost, ADJUST's delta, RELEASE's count */
    p = o->op == RL_WIRE_OP_ADJUST ? rl_mp_put_int32(p, o->delta) : rl_mp_put_uint(p, o->cost);
    b->suffix_len = (size_t)(p - b->suffix);
}

uint64_t
lg_seed(const struct opts *o)
{
    /* A fixed seed makes the sequence of users (not the timing) repeatable. */
    return o->seed != 0 ? o->seed : uv_hrtime() ^ ((uint64_t)getpid() << 32);
}

void
lg_keys_init(struct worker *w, uint64_t seed)
{
    const struct opts *o = &w->b->o;

    w->rng = seed + 0x9e3779b97f4a7c15ull * (w->index + 1);
    w->seq_next = w->index % o->keys;
    if (o->dist == DIST_ZIPF) {
        rl_zipf_init(&w->zipf, o->keys, o->zipf_s);
    }
}
