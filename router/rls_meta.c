/*
 * rls_meta: a ShouldRateLimit answer's `dynamic_metadata` (a google.protobuf.Struct,
 * RateLimitResponse field 6): what envoyproxy/ratelimit puts there (`domain`, `descriptors`
 * with their `entries` as "key=value", `limit` and `hitsAddend`, the request's `hitsAddend`)
 * and this project's `decided`: which descriptor and which limit decided the call
 * (docs/ENVOY.md, "Response metadata"). Built in an arena of 4 KiB blocks (one malloc for
 * a call of a few descriptors) freed once the response is packed. Not for choosing what decided
 * (rls_reply.c) nor for the statuses.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router_int.h"
#include "rls_int.h"
#include "utf8.h"

typedef Google__Protobuf__Struct pb_struct;
typedef Google__Protobuf__Value pb_value;
typedef Google__Protobuf__Struct__FieldsEntry pb_field;
typedef Google__Protobuf__ListValue pb_list;

#define RLS_ARENA_BLOCK 4096u

/* A block of the arena: the blocks are chained, freed together; the newest is at the head
 * and allocations are cut from it until it is full. */
struct rls_arena_block {
    struct rls_arena_block *next;
    size_t used, cap;
    max_align_t data[];
};

/* n zeroed bytes, aligned for any type; NULL (and a->failed) when out of memory. */
static void *
arena_alloc(struct rls_arena *a, size_t n)
{
    struct rls_arena_block *b = a->head;
    size_t align = sizeof(max_align_t);
    size_t at;

    n = (n + align - 1) / align * align;
    if (b == NULL || b->cap - b->used < n) {
        size_t cap = n > RLS_ARENA_BLOCK ? n : RLS_ARENA_BLOCK;

        b = malloc(sizeof(*b) + cap);
        if (b == NULL) {
            a->failed = true;
            return NULL;
        }
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    at = b->used;
    b->used += n;
    return memset((char *)b->data + at, 0, n);
}

void
rls_arena_free(struct rls_arena *a)
{
    struct rls_arena_block *b = a->head;

    while (b != NULL) {
        struct rls_arena_block *next = b->next;

        free(b);
        b = next;
    }
    a->head = NULL;
    a->failed = false;
}

/* s[0..n) as a protobuf string: printable UTF-8 as it is, any other byte as \xHH (a string
 * field must hold UTF-8, and a request's entries were never checked). */
static char *
arena_text(struct rls_arena *a, const char *s, size_t n)
{
    size_t at;
    char *t;

    if (rl_utf8_check(s, n, &at) == NULL) {
        t = arena_alloc(a, n + 1);
        if (t != NULL) {
            memcpy(t, s, n);
        }
        return t;
    }
    t = arena_alloc(a, 4 * n + 1);
    if (t != NULL) {
        rl_utf8_escape(t, 4 * n + 1, s, n, 0);
    }
    return t;
}

/* A request's string s as a protobuf string: itself when printable UTF-8 (it lives as long
 * as the response is packed), else an escaped copy. */
static char *
text_ref(struct rls_arena *a, const char *s)
{
    size_t n = strlen(s), at;

    return rl_utf8_check(s, n, &at) == NULL ? (char *)s : arena_text(a, s, n);
}

static pb_struct *
new_struct(struct rls_arena *a, size_t cap)
{
    pb_struct *st = arena_alloc(a, sizeof(*st));
    pb_field **fields = arena_alloc(a, (cap ? cap : 1) * sizeof(*fields));

    if (st == NULL || fields == NULL) {
        return NULL;
    }
    google__protobuf__struct__init(st);
    st->fields = fields;
    return st;
}

/* A field key = v appended to st (room for it was made by new_struct). */
static pb_value *
add_field(struct rls_arena *a, pb_struct *st, const char *key)
{
    pb_field *f = arena_alloc(a, sizeof(*f));
    pb_value *v = arena_alloc(a, sizeof(*v));

    if (st == NULL || f == NULL || v == NULL) {
        return NULL;
    }
    google__protobuf__struct__fields_entry__init(f);
    google__protobuf__value__init(v);
    f->key = (char *)key;
    f->value = v;
    st->fields[st->n_fields++] = f;
    return v;
}

static void
put_number(struct rls_arena *a, pb_struct *st, const char *key, double n)
{
    pb_value *v = add_field(a, st, key);

    if (v != NULL) {
        v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE;
        v->number_value = n;
    }
}

static void
put_string(struct rls_arena *a, pb_struct *st, const char *key, char *s)
{
    pb_value *v = add_field(a, st, key);

    if (v != NULL && s != NULL) {
        v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
        v->string_value = s;
    }
}

static void
put_bool(struct rls_arena *a, pb_struct *st, const char *key, bool b)
{
    pb_value *v = add_field(a, st, key);

    if (v != NULL) {
        v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE;
        v->bool_value = b;
    }
}

static void
put_struct(struct rls_arena *a, pb_struct *st, const char *key, pb_struct *sub)
{
    pb_value *v = add_field(a, st, key);

    if (v != NULL && sub != NULL) {
        v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE;
        v->struct_value = sub;
    }
}

/* A list of n values, its items to be filled (kind unset until then). */
static pb_value **
put_list(struct rls_arena *a, pb_struct *st, const char *key, size_t n)
{
    pb_value *v = add_field(a, st, key);
    pb_list *l = arena_alloc(a, sizeof(*l));
    pb_value **items = arena_alloc(a, (n ? n : 1) * sizeof(*items));

    if (v == NULL || l == NULL || items == NULL) {
        return NULL;
    }
    google__protobuf__list_value__init(l);
    for (size_t i = 0; i < n; i++) {
        items[i] = arena_alloc(a, sizeof(*items[i]));
        if (items[i] == NULL) {
            return NULL;
        }
        google__protobuf__value__init(items[i]);
    }
    l->n_values = n;
    l->values = items;
    v->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE;
    v->list_value = l;
    return items;
}

/* "key=value" of an entry, as upstream writes it. */
static char *
entry_text(struct rls_arena *a,
           const Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry *e)
{
    size_t kl = strlen(e->key), vl = strlen(e->value), at;
    char *raw = arena_alloc(a, kl + vl + 2);

    if (raw == NULL) {
        return NULL;
    }
    memcpy(raw, e->key, kl);
    raw[kl] = '=';
    memcpy(raw + kl + 1, e->value, vl);
    if (rl_utf8_check(raw, kl + 1 + vl, &at) == NULL) {
        return raw; /* as it is: the common case, one copy */
    }
    return arena_text(a, raw, kl + 1 + vl);
}

/* Upstream's form of a RateLimitOverride (Go's text of the message, near enough). */
static char *
override_text(struct rls_arena *a, const rls_descriptor *d)
{
    char buf[96];
    int n = snprintf(buf, sizeof(buf), "requests_per_unit:%" PRIu32 " unit:%s",
                     d->limit->requests_per_unit,
                     rl_envoy_unit_name((enum rl_envoy_unit)d->limit->unit));

    return arena_text(a, buf, (size_t)n);
}

/* One descriptor of the request, as upstream's descriptorToStruct. */
static pb_struct *
desc_struct(struct rls_arena *a, const rls_descriptor *d)
{
    pb_struct *st = new_struct(a, 3);
    pb_value **items = put_list(a, st, "entries", d->n_entries);

    for (size_t k = 0; items != NULL && k < d->n_entries; k++) {
        char *t = entry_text(a, d->entries[k]);

        if (t != NULL) {
            items[k]->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE;
            items[k]->string_value = t;
        }
    }
    if (d->limit != NULL) {
        put_string(a, st, "limit", override_text(a, d));
    }
    if (d->hits_addend != NULL) {
        put_number(a, st, "hitsAddend", (double)d->hits_addend->value);
    }
    return st;
}

/* `decided`: descriptor i, the limit of part pt, the status st gave it. */
static pb_struct *
decided_struct(struct rls_arena *a, const struct rl_rls_call *s, const struct rls_decided *dec)
{
    const struct rls_desc *d = &s->descs[dec->desc];
    const struct rl_envoy_limit *lim = dec->part->lim;
    pb_struct *st = new_struct(a, 9), *ls = new_struct(a, 4);
    /* RateLimitResponse.RateLimit.Unit's names, by enum rl_envoy_unit */
    static const char *const units[] = {"UNKNOWN", "SECOND", "MINUTE", "HOUR",
                                        "DAY",     "MONTH",  "YEAR",   "WEEK"};
    size_t u = (size_t)lim->unit < sizeof(units) / sizeof(units[0]) ? (size_t)lim->unit : 0;
    put_number(a, st, "descriptor", (double)dec->desc);
    put_string(a, st, "code", (char *)(dec->over ? "OVER_LIMIT" : "OK"));
    put_number(a, st, "limit_remaining", (double)dec->remaining);
    put_bool(a, st, "quota_mode", d->quota);
    put_bool(a, st, "shadow_mode", d->shadow);
    if (d->matched != NULL && d->matched->full_key != NULL && d->limits != &d->ovr) {
        put_string(a, st, "full_key", d->matched->full_key); /* the loader's: UTF-8 */
    }
    put_string(a, ls, "name", lim->name != NULL ? lim->name : (char *)"");
    put_number(a, ls, "requests_per_unit", (double)lim->requests_per_unit);
    put_string(a, ls, "unit", (char *)units[u]);
    if (d->nlimits > 1) {
        put_number(a, ls, "index", (double)(lim - d->limits));
    }
    put_struct(a, st, "limit", ls);
    return st;
}

pb_struct *
rls_meta_build(struct rls_arena *a, const struct rl_rls_call *s, const struct rls_decided *dec)
{
    const rls_request *req = s->req;
    pb_struct *top = new_struct(a, 4);
    pb_value **items = put_list(a, top, "descriptors", req->n_descriptors);

    put_string(a, top, "domain", text_ref(a, req->domain));
    for (size_t i = 0; items != NULL && i < req->n_descriptors; i++) {
        pb_struct *ds = desc_struct(a, req->descriptors[i]);

        if (ds != NULL) {
            items[i]->kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE;
            items[i]->struct_value = ds;
        }
    }
    if (req->hits_addend != 0) {
        put_number(a, top, "hitsAddend", (double)req->hits_addend);
    }
    if (dec->part != NULL) {
        put_struct(a, top, "decided", decided_struct(a, s, dec));
    }
    return a->failed ? NULL : top;
}
