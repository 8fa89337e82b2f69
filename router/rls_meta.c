/*
 * rls_meta: a ShouldRateLimit answer written by hand in protobuf's wire format: its
 * statuses, headers and code (rls_response_write, below), and its `dynamic_metadata` (a google.protobuf.Struct,
 * RateLimitResponse field 6): what envoyproxy/ratelimit puts there (`domain`, `descriptors`
 * with their `entries` as "key=value", `limit` and `hitsAddend`, the request's `hitsAddend`)
 * and this project's `decided`: which descriptor and which limit decided the call
 * (docs/ENVOY.md, "Response metadata"). Written by hand in protobuf's wire format, backwards
 * (each message's content before its length and tag), straight into the response's buffer:
 * no message tree, no allocation, one pass. The bytes are those protobuf-c packs for the
 * same Struct (fields in the same order). Not for choosing what decided (rls_reply.c) nor
 * for the statuses.
 *
 * The wire format used (google/protobuf/struct.proto): Struct { repeated FieldsEntry 1 },
 * FieldsEntry { string key 1; Value value 2 }, Value { oneof: double number_value 2
 * (fixed64), string string_value 3, bool bool_value 4, Struct struct_value 5, ListValue
 * list_value 6 }, ListValue { repeated Value values 1 }; a length-delimited field is its tag
 * (field << 3 | 2), its length as a varint, its bytes.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "router_int.h"
#include "rls_int.h"
#include "utf8.h"

/* Tags: (field number << 3) | wire type (1: 64-bit, 0: varint, 2: length-delimited). */
#define TAG_FIELDS 0x0au   /* Struct.fields, ListValue.values, FieldsEntry.key */
#define TAG_VALUE 0x12u    /* FieldsEntry.value */
#define TAG_NUMBER 0x11u   /* Value.number_value */
#define TAG_STRING 0x1au   /* Value.string_value */
#define TAG_BOOL 0x20u     /* Value.bool_value */
#define TAG_STRUCT 0x2au   /* Value.struct_value */
#define TAG_LIST 0x32u     /* Value.list_value */
#define TAG_METADATA 0x32u /* RateLimitResponse.dynamic_metadata */

/* The most a field of a Struct adds besides its key and its string's bytes: tags and
 * varint lengths (5 bytes each at most: lengths below 4 GiB) at every level, a number's 8
 * bytes, a nested Struct's own tags. */
#define FIELD_MAX 64u
/* A string written escaped: at most 4 bytes per byte, and one for the escape's NUL. */
#define ESCAPED_MAX(n) (4 * (size_t)(n) + 1)

/* The writers below are inlined: a key's length is then a constant and its copy a few
 * moves. */
#define INLINE static inline __attribute__((always_inline))

/* The bytes written so far are [p, end): each write goes before them. */
struct bw {
    uint8_t *p;
};

INLINE void
put_raw(struct bw *w, const void *s, size_t n)
{
    w->p -= n;
    memcpy(w->p, s, n);
}

INLINE void
put_byte(struct bw *w, unsigned b)
{
    *--w->p = (uint8_t)b;
}

INLINE void
put_varint(struct bw *w, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;

    if (v < 0x80) { /* nearly every length here: one byte, or two */
        *--w->p = (uint8_t)v;
        return;
    }
    if (v < 0x4000) {
        w->p -= 2;
        w->p[0] = (uint8_t)(v | 0x80);
        w->p[1] = (uint8_t)(v >> 7);
        return;
    }
    do {
        tmp[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v != 0);
    put_raw(w, tmp, n);
}

/* The bytes written since mark (the end of a message's content) closed as a length-
 * delimited field of tag. */
INLINE void
close_len(struct bw *w, const uint8_t *mark, unsigned tag)
{
    put_varint(w, (uint64_t)(mark - w->p));
    put_byte(w, tag);
}

/* s[0..n) as text: as it is when printable UTF-8, else escaped (rl_utf8_escape: any other
 * byte as \xHH; a string field must hold UTF-8 and a request's entries were never checked).
 * The escape is written forwards in the room before w->p the bound reserved, then moved up. */
INLINE void
put_text(struct bw *w, const char *s, size_t n)
{
    size_t at, e;
    uint8_t *dst;

    if (rl_utf8_check(s, n, &at) == NULL) {
        put_raw(w, s, n);
        return;
    }
    dst = w->p - ESCAPED_MAX(n);
    e = rl_utf8_escape((char *)dst, ESCAPED_MAX(n), s, n, 0);
    memmove(w->p - e, dst, e);
    w->p -= e;
}

/* A Struct field's key, and the FieldsEntry around the value written since mark. */
INLINE void
close_field(struct bw *w, const uint8_t *mark, const char *key, size_t klen)
{
    const uint8_t *entry = mark;

    close_len(w, mark, TAG_VALUE);
    put_raw(w, key, klen);
    put_varint(w, klen);
    put_byte(w, TAG_FIELDS);
    close_len(w, entry, TAG_FIELDS);
}

#define KEY(k) k, sizeof(k) - 1

INLINE void
field_number(struct bw *w, const char *key, size_t klen, double d)
{
    uint8_t *mark = w->p;
    uint64_t bits;
    uint8_t le[8];

    memcpy(&bits, &d, sizeof(bits));
    for (int i = 0; i < 8; i++) {
        le[i] = (uint8_t)(bits >> (8 * i));
    }
    put_raw(w, le, 8);
    put_byte(w, TAG_NUMBER);
    close_field(w, mark, key, klen);
}

INLINE void
field_bool(struct bw *w, const char *key, size_t klen, bool b)
{
    uint8_t *mark = w->p;

    put_byte(w, b ? 1 : 0);
    put_byte(w, TAG_BOOL);
    close_field(w, mark, key, klen);
}

/* A string value s[0..n), escaped when it is not printable UTF-8 when text. */
INLINE void
field_string(struct bw *w, const char *key, size_t klen, const char *s, size_t n, bool text)
{
    uint8_t *mark = w->p, *val = w->p;

    if (text) {
        put_text(w, s, n);
    } else {
        put_raw(w, s, n);
    }
    close_len(w, val, TAG_STRING);
    close_field(w, mark, key, klen);
}

/* Upstream's form of a RateLimitOverride (Go's text of the message, near enough). */
static size_t
override_text(char *buf, size_t cap, const rls_descriptor *d)
{
    int n = snprintf(buf, cap, "requests_per_unit:%" PRIu32 " unit:%s", d->limit->requests_per_unit,
                     rl_envoy_unit_name((enum rl_envoy_unit)d->limit->unit));

    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

/* One descriptor of the request, as upstream's descriptorToStruct: a Value holding a Struct
 * of `entries` ("key=value" each), `limit` (an override) and `hitsAddend`. */
static void
desc_value(struct bw *w, const rls_descriptor *d)
{
    uint8_t *st = w->p, *field, *list;

    if (d->hits_addend != NULL) {
        field_number(w, KEY("hitsAddend"), (double)d->hits_addend->value);
    }
    if (d->limit != NULL) {
        char buf[96];
        size_t n = override_text(buf, sizeof(buf), d);

        field_string(w, KEY("limit"), buf, n, true);
    }
    field = list = w->p;
    for (size_t k = d->n_entries; k-- > 0;) {
        ProtobufCBinaryData key = d->entries[k]->key, val = d->entries[k]->value;
        uint8_t *item = w->p, *s = w->p;

        /* escaped("k=v") is escaped("k") "=" escaped("v"): '=' ends no character */
        put_text(w, rls_bytes(val), val.len);
        put_byte(w, '=');
        put_text(w, rls_bytes(key), key.len);
        close_len(w, s, TAG_STRING);
        close_len(w, item, TAG_FIELDS);
    }
    close_len(w, list, TAG_LIST);
    close_field(w, field, KEY("entries"));
    close_len(w, st, TAG_STRUCT);
}

/* `decided`: descriptor dec->desc, the limit of its part, the status it was given. */
static void
decided_field(struct bw *w, const struct rl_rls_call *s, const struct rls_decided *dec)
{
    const struct rls_desc *d = &s->descs[dec->desc];
    const struct rl_envoy_limit *lim = dec->part->lim;
    /* RateLimitResponse.RateLimit.Unit's names, by enum rl_envoy_unit */
    static const char *const units[] = {"UNKNOWN", "SECOND", "MINUTE", "HOUR",
                                        "DAY",     "MONTH",  "YEAR",   "WEEK"};
    size_t u = (size_t)lim->unit < sizeof(units) / sizeof(units[0]) ? (size_t)lim->unit : 0;
    const char *name = lim->name != NULL ? lim->name : "";
    uint8_t *field = w->p, *st = w->p, *lf, *ls;

    /* limit: {name, requests_per_unit, unit, index when the descriptor has several} */
    lf = ls = w->p;
    if (d->nlimits > 1) {
        field_number(w, KEY("index"), (double)(lim - d->limits));
    }
    field_string(w, KEY("unit"), units[u], strlen(units[u]), false);
    field_number(w, KEY("requests_per_unit"), (double)lim->requests_per_unit);
    field_string(w, KEY("name"), name, strlen(name), false); /* the loader's: UTF-8 */
    close_len(w, ls, TAG_STRUCT);
    close_field(w, lf, KEY("limit"));
    if (d->matched != NULL && d->matched->full_key != NULL && d->limits != &d->ovr) {
        const char *fk = d->matched->full_key; /* the loader's: UTF-8 */

        field_string(w, KEY("full_key"), fk, strlen(fk), false);
    }
    field_bool(w, KEY("shadow_mode"), d->shadow);
    field_bool(w, KEY("quota_mode"), d->quota);
    field_number(w, KEY("limit_remaining"), (double)dec->remaining);
    if (dec->over) {
        field_string(w, KEY("code"), KEY("OVER_LIMIT"), false);
    } else {
        field_string(w, KEY("code"), KEY("OK"), false);
    }
    field_number(w, KEY("descriptor"), (double)dec->desc);
    close_len(w, st, TAG_STRUCT);
    close_field(w, field, KEY("decided"));
}

size_t
rls_meta_bound(const struct rl_rls_call *s, const struct rls_decided *dec)
{
    const rls_request *req = s->req;
    size_t n = 4 * FIELD_MAX + ESCAPED_MAX(req->domain.len);

    for (size_t i = 0; i < req->n_descriptors; i++) {
        const rls_descriptor *d = req->descriptors[i];

        n += 4 * FIELD_MAX + ESCAPED_MAX(96);
        for (size_t k = 0; k < d->n_entries; k++) {
            n += FIELD_MAX + ESCAPED_MAX(d->entries[k]->key.len) +
                 ESCAPED_MAX(d->entries[k]->value.len);
        }
    }
    if (dec->part != NULL) {
        const struct rls_desc *d = &s->descs[dec->desc];
        const struct rl_envoy_limit *lim = dec->part->lim;

        n += 14 * FIELD_MAX + (lim->name != NULL ? strlen(lim->name) : 0);
        if (d->matched != NULL && d->matched->full_key != NULL) {
            n += strlen(d->matched->full_key);
        }
    }
    return n;
}

size_t
rls_meta_write(uint8_t *end, const struct rl_rls_call *s, const struct rls_decided *dec)
{
    const rls_request *req = s->req;
    struct bw w = {end};
    uint8_t *field, *list;

    if (dec->part != NULL) {
        decided_field(&w, s, dec);
    }
    if (req->hits_addend != 0) {
        field_number(&w, KEY("hitsAddend"), (double)req->hits_addend);
    }
    field_string(&w, KEY("domain"), rls_bytes(req->domain), req->domain.len, true);
    field = list = w.p;
    for (size_t i = req->n_descriptors; i-- > 0;) {
        uint8_t *item = w.p;

        desc_value(&w, req->descriptors[i]);
        close_len(&w, item, TAG_FIELDS);
    }
    close_len(&w, list, TAG_LIST);
    close_field(&w, field, KEY("descriptors"));
    close_len(&w, end, TAG_METADATA);
    return (size_t)(end - w.p);
}

/* ---- the RateLimitResponse's own fields ---------------------------------------------------- */

/* RateLimitResponse: overall_code 1, statuses 2, response_headers_to_add 3; DescriptorStatus:
 * code 1, current_limit 2, limit_remaining 3, duration_until_reset 4; RateLimit:
 * requests_per_unit 1, unit 2, name 3; Duration: seconds 1, nanos 2; HeaderValue: key 1,
 * value 2. Fields in number order, proto3: a zero number or an empty string is left out, a
 * message present is written even when empty; a negative int32 or enum takes 10 bytes. */
#define TAG_V1 0x08u /* field 1, varint */
#define TAG_V2 0x10u
#define TAG_V3 0x18u
#define TAG_L1 0x0au /* field 1, length-delimited */
#define TAG_L2 0x12u
#define TAG_L3 0x1au
#define TAG_L4 0x22u
/* the most one varint field takes (tag, 10-byte varint), and a message's tag and length */
#define VARINT_FIELD_MAX 11u
#define LEN_FIELD_MAX 6u

INLINE void
field_varint(struct bw *w, unsigned tag, uint64_t v)
{
    if (v != 0) {
        put_varint(w, v);
        put_byte(w, tag);
    }
}

/* an int32 or an enum: sign-extended to 64 bits, as protobuf's varint of a negative int32 */
INLINE void
field_int32(struct bw *w, unsigned tag, int32_t v)
{
    field_varint(w, tag, (uint64_t)(int64_t)v);
}

INLINE void
field_text(struct bw *w, unsigned tag, const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;

    if (n != 0) {
        put_raw(w, s, n);
        put_varint(w, n);
        put_byte(w, tag);
    }
}

static void
status_write(struct bw *w, const Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus *st)
{
    uint8_t *m = w->p;

    if (st->duration_until_reset != NULL) {
        uint8_t *d = w->p;

        field_int32(w, TAG_V2, st->duration_until_reset->nanos);
        field_varint(w, TAG_V1, (uint64_t)st->duration_until_reset->seconds);
        close_len(w, d, TAG_L4);
    }
    field_varint(w, TAG_V3, st->limit_remaining);
    if (st->current_limit != NULL) {
        uint8_t *l = w->p;

        field_text(w, TAG_L3, st->current_limit->name);
        field_int32(w, TAG_V2, (int32_t)st->current_limit->unit);
        field_varint(w, TAG_V1, st->current_limit->requests_per_unit);
        close_len(w, l, TAG_L2);
    }
    field_int32(w, TAG_V1, (int32_t)st->code);
    close_len(w, m, TAG_L2);
}

size_t
rls_response_bound(const Envoy__Service__Ratelimit__V3__RateLimitResponse *resp)
{
    size_t n = VARINT_FIELD_MAX;

    for (size_t i = 0; i < resp->n_statuses; i++) {
        const Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus *st =
            resp->statuses[i];

        n += 4 * LEN_FIELD_MAX + 7 * VARINT_FIELD_MAX;
        if (st->current_limit != NULL && st->current_limit->name != NULL) {
            n += strlen(st->current_limit->name);
        }
    }
    for (size_t i = 0; i < resp->n_response_headers_to_add; i++) {
        const Envoy__Config__Core__V3__HeaderValue *h = resp->response_headers_to_add[i];

        n += 3 * LEN_FIELD_MAX + (h->key != NULL ? strlen(h->key) : 0) +
             (h->value != NULL ? strlen(h->value) : 0);
    }
    return n;
}

size_t
rls_response_write(uint8_t *end, const Envoy__Service__Ratelimit__V3__RateLimitResponse *resp)
{
    struct bw w = {end};

    for (size_t i = resp->n_response_headers_to_add; i-- > 0;) {
        const Envoy__Config__Core__V3__HeaderValue *h = resp->response_headers_to_add[i];
        uint8_t *m = w.p;

        field_text(&w, TAG_L2, h->value);
        field_text(&w, TAG_L1, h->key);
        close_len(&w, m, TAG_L3);
    }
    for (size_t i = resp->n_statuses; i-- > 0;) {
        status_write(&w, resp->statuses[i]);
    }
    field_int32(&w, TAG_V1, (int32_t)resp->overall_code);
    return (size_t)(end - w.p);
}
