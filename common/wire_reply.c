/*
 * wire_reply: reply decoding, the client side of the codec. A reply is accepted only in one
 * of v1's shapes with its exact element count, known reply and error codes, and every number
 * within its field's type; anything else is -EPROTO, since the server is not speaking v1.
 */
#include "wire.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "wire_int.h"

/* A v1 client accepts only the reply codes and error codes v1 defines: those with a name. */
static bool
wire_code_known(uint32_t code)
{
    return strcmp(rl_wire_code_name(code), "?") != 0;
}

static bool
wire_err_known(uint32_t err)
{
    return strcmp(rl_wire_err_name(err), "?") != 0;
}

/*
 * The reply shapes of the op table's reply column. Each decodes the fields after the op and
 * the id of a reply whose element count is already the op's: e is its elements.
 */
typedef int (*wire_reply_fn)(const msgpack_object *e, struct rl_wire_reply *rep);

static int
wire_reply_check(const msgpack_object *e, struct rl_wire_reply *rep)
{
    uint64_t v;

    if (!wire_uint(&e[2], UINT32_MAX, &v) || !wire_code_known((uint32_t)v) ||
        !wire_uint(&e[3], UINT64_MAX, &rep->check.limit) ||
        !wire_uint(&e[4], UINT64_MAX, &rep->check.remaining) ||
        !wire_uint(&e[5], UINT64_MAX, &rep->check.reset_ms) ||
        !wire_uint(&e[6], UINT64_MAX, &rep->check.retry_after_ms)) {
        return -EPROTO;
    }
    rep->check.id = rep->id;
    rep->check.code = (uint32_t)v;
    return 0;
}

/* [op, id, name]: who answered (PING, HELLO), who you are (AUTH). */
static int
wire_reply_named(const msgpack_object *e, struct rl_wire_reply *rep)
{
    return wire_str(&e[2], 0, UINT32_MAX, &rep->name) ? 0 : -EPROTO;
}

static int
wire_reply_clock(const msgpack_object *e, struct rl_wire_reply *rep)
{
    return wire_uint(&e[2], UINT64_MAX, &rep->now_ms) ? 0 : -EPROTO;
}

static int
wire_reply_error(const msgpack_object *e, struct rl_wire_reply *rep)
{
    uint64_t v;

    if (!wire_uint(&e[2], UINT32_MAX, &v) || !wire_err_known((uint32_t)v) ||
        !wire_str(&e[3], 0, UINT32_MAX, &rep->message)) {
        return -EPROTO;
    }
    rep->err = (uint32_t)v;
    return 0;
}

/* ERROR MOVING's 5 elements [255, id, 7, message, owner] (the only ERROR with a 5th). */
static int
wire_reply_error5(const msgpack_object *e, struct rl_wire_reply *rep)
{
    if (wire_reply_error(e, rep) != 0 || rep->err != RL_WIRE_ERR_MOVING ||
        !wire_str(&e[4], 0, UINT32_MAX, &rep->owner)) {
        return -EPROTO;
    }
    if (rep->owner.ptr == NULL) {
        rep->owner.ptr = "";
    }
    return 0;
}

static int
wire_reply_stats(const msgpack_object *e, struct rl_wire_reply *rep)
{
    const msgpack_object *m = &e[2];
    uint32_t i;

    if (m->type != MSGPACK_OBJECT_MAP || m->via.map.size > RL_WIRE_STATS_MAX) {
        return -EPROTO;
    }
    for (i = 0; i < m->via.map.size; i++) {
        const msgpack_object_kv *kv = &m->via.map.ptr[i];

        if (kv->key.type != MSGPACK_OBJECT_STR) {
            return -EPROTO;
        }
        if (kv->val.type == MSGPACK_OBJECT_POSITIVE_INTEGER && kv->val.via.u64 <= INT64_MAX) {
            rep->stat_vals[i] = (int64_t)kv->val.via.u64;
        } else if (kv->val.type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
            rep->stat_vals[i] = kv->val.via.i64;
        } else {
            return -EPROTO;
        }
        rep->stat_keys[i].ptr = kv->key.via.str.ptr;
        rep->stat_keys[i].len = kv->key.via.str.size;
    }
    rep->nstats = m->via.map.size;
    return 0;
}

static bool
wire_key_is(const msgpack_object *k, const char *name)
{
    size_t n = strlen(name);

    return k->via.str.size == n && memcmp(k->via.str.ptr, name, n) == 0;
}

/* One episode: a map of exactly the 8 keys, each once, in any order. */
static int
wire_episode(const msgpack_object *m, struct rl_wire_episode *ep)
{
    static const char *const keys[8] = {"service", "endpoint", "user",  "start_ms",
                                        "end_ms",  "refused",  "ended", "node"};
    unsigned seen = 0;
    struct rl_wire_str ended = {NULL, 0};

    if (m->type != MSGPACK_OBJECT_MAP || m->via.map.size != 8) {
        return -EPROTO;
    }
    memset(ep, 0, sizeof(*ep));
    for (uint32_t i = 0; i < 8; i++) {
        const msgpack_object *k = &m->via.map.ptr[i].key;
        const msgpack_object *v = &m->via.map.ptr[i].val;
        unsigned which = 8;
        bool ok;

        if (k->type != MSGPACK_OBJECT_STR) {
            return -EPROTO;
        }
        for (unsigned j = 0; j < 8 && which == 8; j++) {
            if (wire_key_is(k, keys[j])) {
                which = j;
            }
        }
        if (which == 8 || (seen & (1u << which)) != 0) {
            return -EPROTO;
        }
        seen |= 1u << which;
        switch (which) {
        case 0:
            ok = wire_str(v, 1, RL_WIRE_SERVICE_MAX, &ep->service);
            break;
        case 1:
            ok = v->type == MSGPACK_OBJECT_NIL ||
                 wire_str(v, 1, RL_WIRE_ENDPOINT_MAX, &ep->endpoint);
            break;
        case 2:
            ok = wire_str(v, 1, RL_WIRE_USER_MAX, &ep->user);
            break;
        case 3:
            ok = wire_uint(v, UINT64_MAX, &ep->start_ms);
            break;
        case 4:
            ok = wire_uint(v, UINT64_MAX, &ep->end_ms);
            break;
        case 5:
            ok = wire_uint(v, UINT64_MAX, &ep->refused);
            break;
        case 6:
            ok = wire_str(v, 1, 16, &ended);
            ep->ended = UINT32_MAX;
#define RL_WIRE_ENDED_IS(n, val, str)                                                              \
    if (ok && ended.len == sizeof(str) - 1 && memcmp(ended.ptr, str, ended.len) == 0) {            \
        ep->ended = val;                                                                           \
    }
            RL_WIRE_ENDED_MAP(RL_WIRE_ENDED_IS)
#undef RL_WIRE_ENDED_IS
            ok = ok && ep->ended != UINT32_MAX;
            break;
        default:
            ok = wire_str(v, 0, RL_WIRE_NODE_MAX, &ep->node);
            break;
        }
        if (!ok) {
            return -EPROTO;
        }
    }
    return 0;
}

static int
wire_reply_throttled(const msgpack_object *e, struct rl_wire_reply *rep)
{
    if (e[2].type != MSGPACK_OBJECT_ARRAY || e[2].via.array.size > RL_WIRE_TOP_MAX ||
        e[3].type != MSGPACK_OBJECT_ARRAY || e[3].via.array.size > RL_WIRE_MISSING_MAX) {
        return -EPROTO;
    }
    for (uint32_t i = 0; i < e[2].via.array.size; i++) {
        if (wire_episode(&e[2].via.array.ptr[i], &rep->episodes[i]) != 0) {
            return -EPROTO;
        }
    }
    for (uint32_t i = 0; i < e[3].via.array.size; i++) {
        if (!wire_str(&e[3].via.array.ptr[i], 0, RL_WIRE_NODE_MAX, &rep->missing[i])) {
            return -EPROTO;
        }
    }
    rep->nepisodes = e[2].via.array.size;
    rep->nmissing = e[3].via.array.size;
    return 0;
}

/* [8, id, period_ms, [[service, user, count, err]...]] */
static int
wire_reply_hot(const msgpack_object *e, struct rl_wire_reply *rep)
{
    if (!wire_uint(&e[2], UINT64_MAX, &rep->period_ms) || e[3].type != MSGPACK_OBJECT_ARRAY ||
        e[3].via.array.size > RL_WIRE_TOP_MAX) {
        return -EPROTO;
    }
    for (uint32_t i = 0; i < e[3].via.array.size; i++) {
        const msgpack_object *k = &e[3].via.array.ptr[i];
        struct rl_wire_hot_key *h = &rep->hot[i];

        if (k->type != MSGPACK_OBJECT_ARRAY || k->via.array.size != 4 ||
            !wire_str(&k->via.array.ptr[0], 1, RL_WIRE_SERVICE_MAX, &h->service) ||
            !wire_str(&k->via.array.ptr[1], 1, RL_WIRE_USER_MAX, &h->user) ||
            !wire_uint(&k->via.array.ptr[2], UINT64_MAX, &h->count) ||
            !wire_uint(&k->via.array.ptr[3], UINT64_MAX, &h->err)) {
            return -EPROTO;
        }
    }
    rep->nhot = e[3].via.array.size;
    return 0;
}

/* Each op's reply shape, by opcode (the op table's reply column). */
/* HANDOFF_OUT's [11, id, records, next]. */
static int
wire_reply_handoff_out(const msgpack_object *e, struct rl_wire_reply *rep)
{
    if (e[2].type != MSGPACK_OBJECT_BIN || e[2].via.bin.size > RL_WIRE_RECORDS_MAX ||
        !wire_uint(&e[3], UINT64_MAX, &rep->next)) {
        return -EPROTO;
    }
    rep->records.ptr = e[2].via.bin.ptr;
    rep->records.len = e[2].via.bin.size;
    return 0;
}

/* HANDOFF_IN's [12, id, imported, skipped]. */
static int
wire_reply_handoff_in(const msgpack_object *e, struct rl_wire_reply *rep)
{
    return wire_uint(&e[2], UINT64_MAX, &rep->imported) &&
                   wire_uint(&e[3], UINT64_MAX, &rep->skipped)
               ? 0
               : -EPROTO;
}

static const wire_reply_fn wire_reply_fns[256] = {RL_WIRE_OP_BY(reply, wire_reply_)};

int
rl_wire_decode_reply(struct rl_wire_decoder *d, const char *p, size_t n, struct rl_wire_reply *rep)
{
    msgpack_object obj;
    const msgpack_object *e;
    const struct rl_wire_op_info *info;
    uint32_t size;
    bool nomem;
    uint64_t v;

    /* The stat arrays are left as they are: only the first nstats pairs are meaningful. */
    rep->op = 0;
    rep->id = 0;
    memset(&rep->check, 0, sizeof(rep->check));
    rep->name.ptr = NULL;
    rep->name.len = 0;
    rep->now_ms = 0;
    rep->err = 0;
    rep->message.ptr = NULL;
    rep->message.len = 0;
    rep->owner.ptr = NULL;
    rep->owner.len = 0;
    rep->nstats = 0;
    rep->nepisodes = 0;
    rep->nmissing = 0;
    rep->period_ms = 0;
    rep->nhot = 0;
    rep->records.ptr = NULL;
    rep->records.len = 0;
    rep->next = 0;
    rep->imported = 0;
    rep->skipped = 0;
    if (rl_wire_unpack(d, p, n, &obj, &nomem, NULL) != NULL) {
        return nomem ? -ENOMEM : -EPROTO;
    }
    if (obj.type != MSGPACK_OBJECT_ARRAY || obj.via.array.size < 2) {
        return -EPROTO;
    }
    e = obj.via.array.ptr;
    size = obj.via.array.size;
    if (!wire_uint(&e[0], UINT32_MAX, &v)) {
        return -EPROTO;
    }
    rep->op = (uint32_t)v;
    if (!wire_uint(&e[1], UINT32_MAX, &v)) {
        return -EPROTO;
    }
    rep->id = (uint32_t)v;
    info = rl_wire_op_info(rep->op);
    if (rep->op == RL_WIRE_OP_ERROR && size == 5) {
        return wire_reply_error5(e, rep);
    }
    if (info == NULL || size != info->reply_len) {
        return -EPROTO;
    }
    return wire_reply_fns[rep->op](e, rep);
}
