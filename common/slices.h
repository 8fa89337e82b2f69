/*
 * slices: the slices of global limits a node enforces in its region (docs/REGIONS.md), read
 * from the text of the slices znode that rl-regions writes: a slice for every global service
 * (or one default for all) and overrides for the few users whose demand is uneven across
 * regions, in thousandths of the global limit (RL_CONF_SLICE_UNIT). Immutable once parsed;
 * a lookup is one hash and one probe sequence. Bounded: at most RL_SLICES_ENTRIES_MAX lines
 * from a text of at most RL_ZKM_DATA_MAX bytes. Not for judging (limiter.c) nor for
 * ZooKeeper (zkm.h).
 */
#ifndef RL_SLICES_H
#define RL_SLICES_H

#include <stddef.h>
#include <stdint.h>

/* Service and user lines a slices text may hold together. */
#define RL_SLICES_ENTRIES_MAX 65536u

struct rl_slices;

/*
 * Parses text (len bytes, not NUL-terminated; docs/REGIONS.md, "The slices znode"). Returns 0
 * with *out, or -EINVAL with a one-line reason in err (nothing made), or -ENOMEM.
 */
int rl_slices_parse(const char *text, size_t len, struct rl_slices **out, char *err, size_t errlen);
void rl_slices_destroy(struct rl_slices *s);

/*
 * The slice of (service, user) in thousandths: the user's line, else the service's, else the
 * text's `default`, else fallback. s may be NULL (then fallback).
 */
uint32_t rl_slices_get(const struct rl_slices *s, const char *service, size_t slen,
                       const char *user, size_t ulen, uint32_t fallback);

/* Calls fn for every service line (user NULL, ulen 0) and user line of s, in no order. */
void rl_slices_each(const struct rl_slices *s,
                    void (*fn)(void *arg, const char *service, size_t slen, const char *user,
                               size_t ulen, uint32_t slice),
                    void *arg);

/* The text's generation (0 when it has none), and how many service and user lines it had. */
uint64_t rl_slices_generation(const struct rl_slices *s);
size_t rl_slices_users(const struct rl_slices *s);
size_t rl_slices_services(const struct rl_slices *s);

/*
 * The user escaping of the text: bytes outside '!'..'~' and '%' are written %HH. Writes the
 * escaped user into out (NUL-terminated, truncated to outlen - 1) and returns its length
 * untruncated. rl_slices_unescape undoes it in place and returns the length, or -1 for a bad
 * escape.
 */
size_t rl_slices_escape(const char *user, size_t ulen, char *out, size_t outlen);
long rl_slices_unescape(char *s);

#endif
