/*
 * fuzz_conf: the cluster.conf parser (common/conf.h) on any text. Invariants: it either
 * returns a config or one error line "NAME:LINE: ..." (never both, never neither), and a
 * config it returns keeps the documented bounds (tiers inside their rules, limits and
 * windows in range, every rule findable by its own service and endpoint).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    char err[512];
    struct rl_conf *c = NULL;
    int rc;

    if (text == NULL) {
        return 0;
    }
    memcpy(text, data, size);
    text[size] = '\0';
    err[0] = '\0';
    rc = rl_conf_parse("fuzz.conf", text, &c, err, sizeof(err));
    if (rc != 0) {
        MUST(c == NULL);
        MUST(strncmp(err, "fuzz.conf", 9) == 0);
    } else {
        MUST(c != NULL);
        MUST(c->shards >= 1 && c->shards <= 1048576);
        MUST(c->clients.max_connections >= 1);
        for (size_t i = 0; i < c->nrules; i++) {
            const struct rl_rule *r = &c->rules[i];

            MUST(r->first_tier + r->ntiers <= c->ntiers);
            MUST(r->service_len >= 1 && r->service_len <= 128);
            MUST(rl_conf_rule(c, r->service, r->service_len, r->endpoint, r->endpoint_len) == r);
        }
        for (size_t i = 0; i < c->ntiers; i++) {
            MUST(c->tiers[i].window_ms >= 1);
            MUST(c->tiers[i].id == i);
        }
        for (size_t i = 0; i < c->nnodes; i++) {
            MUST(rl_conf_node(c, c->nodes[i].name) == &c->nodes[i]);
        }
        rl_conf_destroy(c);
    }
    free(text);
    return 0;
}
