/*
 * fuzz_handoff: the handoff record decoder (node/handoff.h, rl_handoff_next) on any bytes, as
 * a node reads HANDOFF_IN's records, record after record. Invariants: a record never claims
 * more than the input holds nor more than RL_HANDOFF_RECORD_MAX; a decoded key keeps the
 * bounds of its fields (a log of at most RL_ALGO_XLOG_MAX entries); a key re-encodes to a
 * record that decodes to the same key, and a header and an end likewise.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "handoff.h"
#include "fuzz.h"

static struct rl_handoff_key key, again;

static void
roundtrip(const struct rl_handoff_rec *rec)
{
    struct rl_handoff_rec rec2;
    struct rl_buf b;
    long r;

    rl_buf_init(&b);
    if (rec->type == RL_HANDOFF_KEY) {
        MUST(rl_handoff_put_key(&b, &key) == 0);
    } else if (rec->type == RL_HANDOFF_HEADER) {
        MUST(rl_handoff_put_header(&b, rec->sender_now_ms, rec->shard) == 0);
    } else {
        MUST(rl_handoff_put_end(&b, rec->nkeys) == 0);
    }
    r = rl_handoff_next(b.data, b.len, &rec2, &again);
    MUST(r == (long)b.len && rec2.type == rec->type);
    if (rec->type == RL_HANDOFF_KEY) {
        MUST(again.fp_hi == key.fp_hi && again.fp_lo == key.fp_lo && again.kind == key.kind &&
             again.ref == key.ref && again.algo == key.algo && again.limit == key.limit &&
             again.window_ms == key.window_ms && again.burst == key.burst &&
             again.st.shape == key.st.shape && again.st.t_ms == key.st.t_ms &&
             again.st.v == key.st.v && again.st.nlog == key.st.nlog);
        MUST(memcmp(again.st.age, key.st.age, key.st.nlog * sizeof(key.st.age[0])) == 0);
        MUST(memcmp(again.st.cost, key.st.cost, key.st.nlog * sizeof(key.st.cost[0])) == 0);
    } else {
        MUST(rec2.shard == rec->shard && rec2.sender_now_ms == rec->sender_now_ms &&
             rec2.nkeys == rec->nkeys && rec2.version == rec->version);
    }
    rl_buf_deinit(&b);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    size_t off = 0;

    while (off < size) {
        struct rl_handoff_rec rec;
        long r = rl_handoff_next(p + off, size - off, &rec, &key);

        if (r <= 0) {
            MUST(r == 0 || r == -EINVAL);
            break;
        }
        MUST((size_t)r <= size - off && (size_t)r <= 4 + RL_HANDOFF_RECORD_MAX);
        MUST(rec.type <= RL_HANDOFF_END);
        if (rec.type == RL_HANDOFF_KEY) {
            MUST(key.st.nlog <= RL_ALGO_XLOG_MAX && key.kind <= RL_HANDOFF_INLINE &&
                 key.fp_lo <= 0xffffffu && key.window_ms >= 1);
        } else if (rec.type == RL_HANDOFF_HEADER) {
            MUST(rec.version == RL_HANDOFF_VERSION);
        }
        roundtrip(&rec);
        off += (size_t)r;
    }
    return 0;
}
