/*
 * fuzz_assign: the shard-assignment text format (common/shardmap.h) on any bytes, for a
 * cluster of 64 shards. Invariants: an error leaves the assignment as it was; an accepted
 * text formats back to a canonical text that parses to the same overrides, and formatting
 * that again gives the same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shardmap.h"
#include "assignment.h"
#include "fuzz.h"

#define SHARDS 64u

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rl_assignment a, b;
    char err[256];
    char *t1 = NULL, *t2 = NULL;
    size_t l1, l2;

    MUST(rl_assignment_init(&a, SHARDS) == 0);
    MUST(rl_assignment_init(&b, SHARDS) == 0);
    MUST(rl_assignment_set(&a, 3, "keep") == 0);
    if (rl_assignment_parse(&a, (const char *)data, size, err, sizeof(err)) != 0) {
        MUST(strcmp(a.owner[3], "keep") == 0);
        for (uint32_t s = 0; s < SHARDS; s++) {
            MUST(s == 3 || a.owner[s][0] == '\0');
        }
    } else {
        MUST(rl_assignment_format(&a, &t1, &l1) == 0);
        MUST(rl_assignment_parse(&b, t1, l1, err, sizeof(err)) == 0);
        for (uint32_t s = 0; s < SHARDS; s++) {
            MUST(strcmp(a.owner[s], b.owner[s]) == 0);
        }
        MUST(rl_assignment_format(&b, &t2, &l2) == 0);
        MUST(l1 == l2 && memcmp(t1, t2, l1) == 0);
        free(t1);
        free(t2);
    }
    rl_assignment_deinit(&a);
    rl_assignment_deinit(&b);
    return 0;
}
