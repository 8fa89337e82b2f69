/*
 * fuzz_rls: the decoding of a RateLimitRequest (envoy.service.ratelimit.v3, proto/) by the
 * C that protoc-c generates, on any bytes, then the matcher of common/envoycfg.h on what it
 * decoded. Invariants: a decoded request's known fields re-encode to a message that decodes
 * to the same encoding (no field lost or invented; unknown fields are left out, as
 * protobuf-c keeps some it cannot write back, e.g. field number 0 in an overlong tag); its
 * domain and entries (bytes, NUL bytes included: proto/README.md) have their bytes when not
 * empty; matching its
 * descriptors against a fixed configuration either finds nothing or a descriptor of that
 * configuration with limits, and the counter key ends where its length says.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "envoycfg.h"
#include "fuzz.h"

static struct rl_envoy_config *cfg;

/* A bytes field's bytes ("" when empty, as router/rls_int.h's rls_bytes). */
static const char *
bytes_of(ProtobufCBinaryData b)
{
    return b.len != 0 ? (const char *)b.data : "";
}

static const char cfg_text[] = "domain: edge\n"
                               "descriptors:\n"
                               "  - key: remote_address\n"
                               "    rate_limit: {unit: second, requests_per_unit: 10}\n"
                               "  - key: path\n"
                               "    value: /api*\n"
                               "    share_threshold: true\n"
                               "    descriptors:\n"
                               "      - key: method\n"
                               "        value: GET\n"
                               "        rate_limit: {unit: minute, requests_per_unit: 5}\n"
                               "  - key: generic_key\n"
                               "    value: a\n"
                               "    rate_limit: {unit: hour, requests_per_unit: 1}\n";

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];

    if (cfg == NULL) {
        MUST(rl_envoy_parse("fuzz.yaml", cfg_text, sizeof(cfg_text) - 1, NULL, &cfg, err,
                            sizeof(err)) == 0);
    }
    Envoy__Service__Ratelimit__V3__RateLimitRequest *r =
        envoy__service__ratelimit__v3__rate_limit_request__unpack(NULL, size, data);
    if (r == NULL) {
        return 0;
    }
    MUST(r->domain.len == 0 || r->domain.data != NULL);
    /* every message of r, to hide their unknown fields while packing */
    size_t nm = 1, k = 0;
    for (size_t i = 0; i < r->n_descriptors; i++) {
        nm += 3 + r->descriptors[i]->n_entries;
    }
    ProtobufCMessage **msgs = malloc(nm * sizeof(*msgs));
    unsigned *unknown = malloc(nm * sizeof(*unknown));
    MUST(msgs != NULL && unknown != NULL);
    msgs[k++] = &r->base;
    for (size_t i = 0; i < r->n_descriptors; i++) {
        Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor *d = r->descriptors[i];
        msgs[k++] = &d->base;
        for (size_t j = 0; j < d->n_entries; j++) {
            msgs[k++] = &d->entries[j]->base;
        }
        if (d->limit != NULL) {
            msgs[k++] = &d->limit->base;
        }
        if (d->hits_addend != NULL) {
            msgs[k++] = &d->hits_addend->base;
        }
    }
    for (size_t i = 0; i < k; i++) {
        unknown[i] = msgs[i]->n_unknown_fields;
        msgs[i]->n_unknown_fields = 0;
    }
    size_t n = envoy__service__ratelimit__v3__rate_limit_request__get_packed_size(r);
    uint8_t *buf = malloc(n ? n : 1);
    MUST(buf != NULL);
    MUST(envoy__service__ratelimit__v3__rate_limit_request__pack(r, buf) == n);
    Envoy__Service__Ratelimit__V3__RateLimitRequest *r2 =
        envoy__service__ratelimit__v3__rate_limit_request__unpack(NULL, n, buf);
    MUST(r2 != NULL);
    MUST(envoy__service__ratelimit__v3__rate_limit_request__get_packed_size(r2) == n);
    uint8_t *buf2 = malloc(n ? n : 1);
    MUST(buf2 != NULL);
    MUST(envoy__service__ratelimit__v3__rate_limit_request__pack(r2, buf2) == n);
    MUST(memcmp(buf, buf2, n) == 0);
    for (size_t i = 0; i < k; i++) {
        msgs[i]->n_unknown_fields = unknown[i];
    }
    free(msgs);
    free(unknown);

    for (size_t i = 0; i < r->n_descriptors; i++) {
        const Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor *d = r->descriptors[i];
        struct rl_envoy_entry e[RL_ENVOY_ENTRIES_MAX];
        const char *share[RL_ENVOY_ENTRIES_MAX];
        size_t ne = d->n_entries < RL_ENVOY_ENTRIES_MAX ? d->n_entries : RL_ENVOY_ENTRIES_MAX;
        for (size_t j = 0; j < ne; j++) {
            ProtobufCBinaryData ek = d->entries[j]->key, ev = d->entries[j]->value;
            MUST((ek.len == 0 || ek.data != NULL) && (ev.len == 0 || ev.data != NULL));
            e[j] = (struct rl_envoy_entry){bytes_of(ek), ek.len, bytes_of(ev), ev.len};
        }
        const char *dom = bytes_of(r->domain);
        const struct rl_envoy_desc *m = rl_envoy_match(cfg, dom, r->domain.len, e, ne, share);
        MUST(m == NULL || m->nlimits > 0);
        char key[64];
        size_t kl = rl_envoy_counter_key(key, sizeof(key), dom, r->domain.len, e, ne, share);
        /* the key's bytes may hold a NUL (a value's): it ends where the length says */
        MUST(key[kl < sizeof(key) ? kl : sizeof(key) - 1] == '\0');
    }
    envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(r2, NULL);
    envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(r, NULL);
    free(buf);
    free(buf2);
    return 0;
}
