/*
 * envoycfg_int.h: private to the files of the envoycfg module (envoycfg.c the YAML reader's
 * walk of a file, envoycfg_desc.c its descriptors, envoycfg_match.c the matcher,
 * envoycfg_src.c the files and bundles read). Holds the agreement the reader and the matcher
 * share: the order of a descriptor's `index`, which the reader sorts and the matcher
 * searches; and what the reader's two files share: the state of a load (struct ld) and the
 * functions envoycfg.c calls in envoycfg_desc.c (calls go that way only). Nothing outside
 * the module includes it.
 */
#ifndef RL_ENVOYCFG_INT_H
#define RL_ENVOYCFG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

struct rl_envoy_config;
struct rl_envoy_desc;
struct rl_envoy_opts;

/*
 * The sign of strcmp(s, the concatenation of a[0..an), b[0..bn) and c[0..cn)): bytes compared
 * unsigned, a proper prefix first. The reader sorts a descriptor's children by it (their
 * composites, ties by file position) and the matcher binary-searches "key_value" and "key"
 * with it, so both agree on one order. b and c may be NULL when their length is 0.
 */
int envoy_cmp_cat(const char *s, const char *a, size_t an, const char *b, size_t bn, const char *c,
                  size_t cn);

/* ---- the reader (envoycfg.c, envoycfg_desc.c) ------------------------------------------- */

/* The state of one load: the config being built, the file being read, its document. */
struct ld {
    struct rl_envoy_config *c;
    const struct rl_envoy_opts *opts;
    const char *file; /* c->files[...] */
    yaml_document_t *doc;
    unsigned char *seen; /* per node: visited (an alias would visit a node twice) */
    size_t nnodes;
    char *err;
    size_t errlen;
};

/* envoycfg_desc.c: the helpers over YAML nodes. */

/* Writes "FILE:LINE: message" (no line when line <= 0) into l->err; returns -1. */
int envoy_fail(struct ld *l, int line, const char *fmt, ...);
/* Text of a scalar as printable UTF-8 for a message (cut at 80 bytes), in buf. */
const char *envoy_shown(const char *s, size_t n, char *buf, size_t cap);
int envoy_line_of(const yaml_node_t *n);
/* The node at index id, marked seen; NULL (after envoy_fail) when it was seen already. */
yaml_node_t *envoy_node_at(struct ld *l, int id, int line);
bool envoy_is_null(const yaml_node_t *n);
/* A string field: a scalar (null -> ""), printable UTF-8, at most max bytes. */
int envoy_get_str(struct ld *l, const yaml_node_t *n, const char *what, size_t max, char **out);
/* The keys a mapping may have: checked once, before any value is read. */
int envoy_check_keys(struct ld *l, const yaml_node_t *map, const char *where,
                     const char *const *keys);
bool envoy_key_is(struct ld *l, const yaml_node_pair_t *p, const char *name);

/* envoycfg_desc.c: the descriptors. */

/* Frees what a descriptor holds, its children's trees included (not d itself). */
void envoy_desc_free(struct rl_envoy_desc *d);
/* Builds d->index and d->wildcards once its children are read. */
int envoy_finish_children(struct ld *l, struct rl_envoy_desc *d);
/* Appends the descriptors of seq to parent's children (depth: parent's level + 1). */
int envoy_parse_descriptors(struct ld *l, const yaml_node_t *seq, struct rl_envoy_desc *parent,
                            unsigned depth);

#endif
