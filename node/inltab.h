/*
 * inltab: the inline limits a node holds counters for (docs/PROTOCOL.md, "Inline limits"),
 * each interned once as a tier of its own so the key table's 24-bit tier field can name it:
 * inline tier ids are RL_INLTAB_BASE + slot, above every configured tier id (at most
 * RL_CONF_TIERS_MAX), so a change of the configured rules never renumbers them. At most
 * RL_INLTAB_MAX distinct limits; each counts the keys that follow it (rl_inltab_ref), and a
 * limit with none is reclaimed when room is needed. Not for judging (limiter.c).
 */
#ifndef RL_INLTAB_H
#define RL_INLTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ruleset.h"

#define RL_INLTAB_MAX 65536u
#define RL_INLTAB_BASE 0x800000u

struct rl_inltab;

int rl_inltab_create(struct rl_inltab **out);
void rl_inltab_destroy(struct rl_inltab *t);

/*
 * The tier id of the limit (want's algo, limit, window_ms, burst), interned when new: 0 with
 * *id, -ENOSPC when RL_INLTAB_MAX limits with keys are held, or -ENOMEM. May move the tiers:
 * pointers from rl_inltab_tier are valid until the next intern.
 */
int rl_inltab_intern(struct rl_inltab *t, const struct rl_tier *want, uint32_t *id);

/* The interned tier of id (its id field is id), or NULL when id is not one in use. */
const struct rl_tier *rl_inltab_tier(const struct rl_inltab *t, uint32_t id);

/* Whether id is an inline tier id (in use or not). */
static inline bool
rl_inltab_is(uint32_t id)
{
    return id >= RL_INLTAB_BASE && id < RL_INLTAB_BASE + RL_INLTAB_MAX;
}

/* A key following id was added (+1) or dropped (-1). */
void rl_inltab_ref(struct rl_inltab *t, uint32_t id, int delta);

/* Limits held (interned, with keys or not yet reclaimed). */
size_t rl_inltab_count(const struct rl_inltab *t);

#endif
