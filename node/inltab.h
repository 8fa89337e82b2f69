/*
 * inltab: the inline limits a node holds counters for (docs/PROTOCOL.md, "Inline limits"),
 * each interned once as a tier of its own so the key table's 24-bit tier field can name it:
 * inline tier ids are RL_INLTAB_BASE + slot, above every configured tier id (at most
 * RL_CONF_TIERS_MAX), so a change of the configured rules never renumbers them. At most
 * RL_INLTAB_MAX distinct limits; each counts the keys that follow it (rl_inltab_ref), and a
 * limit with none is reclaimed when room is needed. Each limit has an owner, the tenant the
 * CHECKs that use it are accounted to (docs/PROTOCOL.md, "Inline limits"): two owners of the
 * same four parts hold two limits, and a quota (asked of the caller when an owner would take
 * one more) keeps one owner from taking the slots of the others, and the owners under quota
 * together from taking the last RL_INLTAB_RESERVE (those without quota's). Not for judging
 * (limiter.c).
 */
#ifndef RL_INLTAB_H
#define RL_INLTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ruleset.h"

#define RL_INLTAB_MAX 65536u
#define RL_INLTAB_BASE 0x800000u
/* The inline limits one tenant may hold (its quota): 1/16 of the table, so that it takes
 * sixteen clients together to fill it. */
#define RL_INLTAB_TENANT_MAX 4096u
/* The limits only an intern without quota may take (a scope = global service's scaled tiers,
 * docs/REGIONS.md): clients' inline limits together hold at most RL_INLTAB_CLIENTS_MAX, so
 * that they cannot take every place and leave a configured global service without one. */
#define RL_INLTAB_RESERVE 4096u
#define RL_INLTAB_CLIENTS_MAX (RL_INLTAB_MAX - RL_INLTAB_RESERVE)

struct rl_inltab;

/* What the table asks of its owner (the limiter): the accounting of limits by owner. */
struct rl_inltab_ops {
    /* owner took a new limit (+1), or one of its limits was reclaimed (-1) */
    void (*owned)(void *arg, uint32_t owner, int delta);
    /* whether owner may take one more limit (asked only for an intern under quota) */
    bool (*may_add)(void *arg, uint32_t owner);
    void *arg;
};

/* ops may be NULL (no accounting, no quota); it is copied. */
int rl_inltab_create(struct rl_inltab **out, const struct rl_inltab_ops *ops);
void rl_inltab_destroy(struct rl_inltab *t);

/* Whose limit an intern asks for. */
enum rl_inltab_who {
    RL_INLTAB_SCALED,   /* a scope = global service's scaled tier: may take the reserve */
    RL_INLTAB_CLIENT,   /* a client's inline limit: its owner's quota (ops->may_add), and the
                           clients' part of the table (RL_INLTAB_CLIENTS_MAX) */
    RL_INLTAB_IMPORTED, /* a client's inline limit handed off to this node: admitted by its
                           owner's quota on the sender, so only the clients' part bounds it */
};

/*
 * The tier id of owner's limit (want's algo, limit, window_ms, burst), interned when new: 0
 * with *id; -EDQUOT when it is new, who is RL_INLTAB_CLIENT and ops->may_add refuses owner
 * one more (even after limits without keys were reclaimed); -ENOSPC when RL_INLTAB_MAX
 * limits with keys are held, or for a client's, RL_INLTAB_CLIENTS_MAX clients' ones; or
 * -ENOMEM. May move the tiers: pointers from rl_inltab_tier are valid until the next intern.
 */
int rl_inltab_intern(struct rl_inltab *t, const struct rl_tier *want, uint32_t owner,
                     enum rl_inltab_who who, uint32_t *id);

/* The owner of an interned tier id (0 when id is not one in use). */
uint32_t rl_inltab_owner(const struct rl_inltab *t, uint32_t id);

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
