/*
 * envoycfg_int.h: private to the files of the envoycfg module (envoycfg.c the YAML reader,
 * envoycfg_match.c the matcher, envoycfg_src.c the files and bundles read). Holds the one
 * contract the reader and the matcher share: the order of a descriptor's `index`, which the
 * reader sorts and the matcher searches. Nothing outside the module includes it.
 */
#ifndef RL_ENVOYCFG_INT_H
#define RL_ENVOYCFG_INT_H

#include <stddef.h>

/*
 * The sign of strcmp(s, the concatenation of a[0..an), b[0..bn) and c[0..cn)): bytes compared
 * unsigned, a proper prefix first. The reader sorts a descriptor's children by it (their
 * composites, ties by file position) and the matcher binary-searches "key_value" and "key"
 * with it, so both agree on one order. b and c may be NULL when their length is 0.
 */
int envoy_cmp_cat(const char *s, const char *a, size_t an, const char *b, size_t bn, const char *c,
                  size_t cn);

#endif
