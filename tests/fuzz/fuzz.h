/* fuzz: what the libFuzzer harnesses of tests/fuzz share (docs/FUZZING.md). */
#ifndef RL_FUZZ_H
#define RL_FUZZ_H

#include <stdlib.h>

/* An invariant: a violation is a finding, reported by libFuzzer as a crash. */
#define MUST(x)                                                                                    \
    do {                                                                                           \
        if (!(x)) {                                                                                \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
