/*
 * server_handoff: HANDOFF_OUT and HANDOFF_IN on the node (server_handoff.h). An export is a
 * snapshot of the shard's records (header, keys, end) taken when offset 0 is asked for, then
 * handed out in messages of whole records, each continuing where the last ended; the last one
 * frees it. An import checks every record of its message before it imports any, so a
 * malformed message changes nothing. Not for the dispatch or the admin budget (server.c).
 */
#include "server_handoff.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handoff.h"
#include "limiter.h"
#include "log.h"
#include "move.h"
#include "server_state.h"
#include "wire.h"

struct rl_server_handoff {
    /* the export in progress: its records, the shard, where the next message starts */
    struct rl_buf snap;
    bool open;
    uint32_t shard;
    uint64_t next;
    uint64_t keys;
    struct rl_handoff_key key; /* one decoded key (an import's) */
};

void
rl_server_handoff_free(struct rl_server_handoff *h)
{
    if (h != NULL) {
        rl_buf_deinit(&h->snap);
        free(h);
    }
}

static struct rl_server_handoff *
ho_state(struct rl_server *s)
{
    if (s->handoff == NULL) {
        s->handoff = calloc(1, sizeof(*s->handoff));
        if (s->handoff != NULL) {
            rl_buf_init(&s->handoff->snap);
        }
    }
    return s->handoff;
}

static int
ho_error(struct rl_server *s, struct rl_buf *out, uint32_t id, uint32_t err, const char *msg)
{
    s->errors++;
    return rl_wire_put_error(out, id, err, msg);
}

/* Refuses a handoff request the server cannot take: no state (out of memory) or a shard
 * out of range. True when refused, the error's result in *rc. */
static bool
ho_refused(struct rl_server *s, const struct rl_server_handoff *h, const struct rl_wire_req *req,
           struct rl_buf *out, int *rc)
{
    uint32_t nshards = rl_limiter_shards(s->limiter);
    char msg[160];

    if (h == NULL) {
        *rc = ho_error(s, out, req->id, RL_WIRE_ERR_OVERLOADED, "out of memory");
        return true;
    }
    if (req->shard >= nshards) {
        snprintf(msg, sizeof(msg),
                 "shard %" PRIu32 " is out of range: this cluster has %" PRIu32 " shards",
                 req->shard, nshards);
        *rc = ho_error(s, out, req->id, RL_WIRE_ERR_BAD_FIELD, msg);
        return true;
    }
    return false;
}

/* A by-hand handoff (rl-cli's: no `final`) of a node with ZooKeeper membership, where
 * planned moves carry a shard's counters by themselves (move.c): an export only of a shard
 * this node decides now (after its move its counters went with it; what it kept is an older
 * snapshot, which imported elsewhere would roll the shard's counters back), and no import (one
 * would replace the counters of a shard the node decides, or be forgotten when the node takes
 * the shard under a new tenure). True when refused, the error's result in *rc. */
static bool
ho_zk_refused(struct rl_server *s, const struct rl_wire_req *req, bool in, struct rl_buf *out,
              int *rc)
{
    char msg[224];

    if (s->zk_state == RL_SERVER_ZK_NONE || req->has_final) {
        return false;
    }
    if (in) {
        snprintf(msg, sizeof(msg),
                 "node %s has ZooKeeper membership: a shard's counters move with it by "
                 "themselves; a by-hand HANDOFF_IN (without final) is refused",
                 s->name);
        *rc = ho_error(s, out, req->id, RL_WIRE_ERR_BAD_FIELD, msg);
        return true;
    }
    if (!rl_server_owns_shard(s, req->shard)) {
        snprintf(msg, sizeof(msg),
                 "shard %" PRIu32 " is not owned by node %s: its counters are where it is owned",
                 req->shard, s->name);
        *rc = ho_error(s, out, req->id, RL_WIRE_ERR_NOT_OWNER, msg);
        return true;
    }
    return false;
}

static void
ho_close_export(struct rl_server_handoff *h)
{
    rl_buf_deinit(&h->snap);
    rl_buf_init(&h->snap);
    h->open = false;
}

static int
ho_put_key(void *arg, const struct rl_handoff_key *k)
{
    struct rl_server_handoff *h = arg;

    if (h->snap.len > RL_SERVER_HANDOFF_MAX) {
        return -EFBIG;
    }
    h->keys++;
    return rl_handoff_put_key(&h->snap, k);
}

/* The ownership epoch of shard here: the keys it judges by (0 with static membership). */
static uint16_t
ho_epoch(const struct rl_server *s, uint32_t shard)
{
    return s->epochs != NULL && shard < s->nshards ? s->epochs[shard] : 0;
}

/* A new export of shard: the snapshot of its records at the node's now (the keys of its
 * current tenure: an earlier one's are judged as absent here, and are not sent). */
static int
ho_snapshot(struct rl_server *s, struct rl_server_handoff *h, uint32_t shard)
{
    int rc;

    ho_close_export(h);
    h->shard = shard;
    h->keys = 0;
    h->next = 0;
    rc = rl_handoff_put_header(&h->snap, s->now_ms, shard);
    if (rc == 0) {
        rc = rl_limiter_export_shard(s->limiter, s->now_ms, shard, ho_epoch(s, shard), ho_put_key,
                                     h);
    }
    if (rc == 0) {
        rc = rl_handoff_put_end(&h->snap, h->keys);
    }
    if (rc != 0) {
        ho_close_export(h);
        return rc;
    }
    h->open = true;
    rl_log_info("handoff: shard %" PRIu32 " exported: %" PRIu64 " keys, %zu bytes of records",
                shard, h->keys, h->snap.len);
    return 0;
}

int
rl_server_handoff_out(struct rl_server *s, const struct rl_wire_req *req, struct rl_buf *out)
{
    struct rl_server_handoff *h = ho_state(s);
    size_t start, end;
    char msg[160];
    int rc;

    if (ho_refused(s, h, req, out, &rc) || ho_zk_refused(s, req, false, out, &rc)) {
        return rc;
    }
    if (req->offset == 0) {
        rc = ho_snapshot(s, h, req->shard);
        if (rc != 0) {
            snprintf(msg, sizeof(msg),
                     rc == -EFBIG ? "shard %" PRIu32 " holds more than %u MiB of records: too "
                                    "large to export"
                                  : "out of memory exporting shard %" PRIu32,
                     req->shard, RL_SERVER_HANDOFF_MAX >> 20);
            return ho_error(s, out, req->id, RL_WIRE_ERR_OVERLOADED, msg);
        }
    } else if (!h->open || h->shard != req->shard || h->next != req->offset) {
        snprintf(msg, sizeof(msg),
                 "no export of shard %" PRIu32 " continues at offset %" PRIu64
                 ": start one at offset 0 (one export at a time)",
                 req->shard, req->offset);
        return ho_error(s, out, req->id, RL_WIRE_ERR_BAD_FIELD, msg);
    }
    /* whole records, as many as fit a message (a record is at most ~15 KB: one always fits) */
    start = end = (size_t)req->offset;
    while (end + 4 <= h->snap.len) {
        const unsigned char *b = (const unsigned char *)h->snap.data + end;
        size_t len = 4 + ((size_t)b[0] << 24 | (size_t)b[1] << 16 | (size_t)b[2] << 8 | b[3]);

        if (end + len - start > RL_WIRE_RECORDS_MAX) {
            break;
        }
        end += len;
    }
    if (end == start && start < h->snap.len) {
        /* cannot happen: a key record is at most ~15 KB (RL_ALGO_XLOG_MAX entries) */
        ho_close_export(h);
        return ho_error(s, out, req->id, RL_WIRE_ERR_OVERLOADED,
                        "a record is larger than a message: export abandoned");
    }
    h->next = end < h->snap.len ? end : 0;
    rc = rl_wire_put_handoff_out_reply(out, req->id, h->snap.data + start, end - start, h->next);
    if (h->next == 0) {
        ho_close_export(h);
    }
    return rc;
}

/* Whether every record of p[0..n) is whole, of this version and of shard; if not, why. */
static bool
ho_check(struct rl_server_handoff *h, const char *p, size_t n, uint32_t shard, char *msg,
         size_t len)
{
    struct rl_handoff_rec rec;
    size_t off = 0;

    while (off < n) {
        long r = rl_handoff_next(p + off, n - off, &rec, &h->key);

        if (r == 0) {
            snprintf(msg, len,
                     "records: the record at byte %zu is cut short (a message carries whole "
                     "records)",
                     off);
            return false;
        }
        if (r < 0) {
            snprintf(msg, len, "records: byte %zu starts no handoff record of version %u", off,
                     RL_HANDOFF_VERSION);
            return false;
        }
        if (rec.type == RL_HANDOFF_HEADER && rec.shard != shard) {
            snprintf(msg, len,
                     "records: the header is of shard %" PRIu32 ", the request's shard is %" PRIu32,
                     rec.shard, shard);
            return false;
        }
        off += (size_t)r;
    }
    return true;
}

/* HANDOFF_IN's records, checked whole, as keys one at a time (rl_limiter_import_each). */
struct ho_reader {
    struct rl_server_handoff *h;
    const char *p;
    size_t n, off;
    bool end; /* an end record was read */
};

static const struct rl_handoff_key *
ho_next_key(void *arg)
{
    struct ho_reader *r = arg;
    struct rl_handoff_rec rec;

    while (r->off < r->n) {
        long len = rl_handoff_next(r->p + r->off, r->n - r->off, &rec, &r->h->key);

        r->off += (size_t)len; /* checked by ho_check: every record is whole and valid */
        if (rec.type == RL_HANDOFF_KEY) {
            return &r->h->key;
        }
        r->end = r->end || rec.type == RL_HANDOFF_END;
    }
    return NULL;
}

int
rl_server_handoff_in(struct rl_server *s, const struct rl_wire_req *req, struct rl_buf *out)
{
    struct rl_server_handoff *h = ho_state(s);
    struct rl_limiter_import_stats st;
    struct ho_reader r = {h, req->records.ptr, req->records.len, 0, false};
    char msg[160];
    int rc;

    if (ho_refused(s, h, req, out, &rc) || ho_zk_refused(s, req, true, out, &rc)) {
        return rc;
    }
    if (!ho_check(h, r.p, r.n, req->shard, msg, sizeof(msg))) {
        return ho_error(s, out, req->id, RL_WIRE_ERR_BAD_FIELD, msg);
    }
    /* An automatic move's message (it has `final`): only into a shard expected here. */
    if (req->has_final && s->move != NULL) {
        int mv = rl_move_in_begin(s->move, req->shard, r.n, req->from.ptr, req->from.len,
                                  req->final && r.n == 0, msg, sizeof(msg));

        if (mv < 0) {
            return ho_error(s, out, req->id, RL_WIRE_ERR_BAD_FIELD, msg);
        }
        if (mv > 0) {
            return rl_wire_put_handoff_in_reply(out, req->id, 0, 0);
        }
    }
    memset(&st, 0, sizeof(st));
    if (rl_limiter_import_each(s->limiter, s->now_ms, ho_epoch(s, req->shard), req->shard,
                               ho_next_key, &r, &st) != 0) {
        return ho_error(s, out, req->id, RL_WIRE_ERR_OVERLOADED, "out of memory");
    }
    if (req->has_final && s->move != NULL) {
        rl_move_in_end(s->move, req->shard, st.imported, req->final);
    }
    if (r.end && !req->has_final) {
        rl_log_info("handoff: shard %" PRIu32 " received (last message: %" PRIu64
                    " keys imported, %" PRIu64 " skipped)",
                    req->shard, st.imported, st.no_tier + st.invalid + st.no_memory);
    }
    return rl_wire_put_handoff_in_reply(out, req->id, st.imported,
                                        st.no_tier + st.invalid + st.no_memory);
}
