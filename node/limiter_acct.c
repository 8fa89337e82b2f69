/*
 * limiter_acct: the limiter's books (limiter_int.h): the account each key and each log byte
 * counts in (its service's, or an inline limit's tenant's), which every insert and drop of
 * the key table goes through, and the callbacks that tell the key table (keytab.h) and the
 * inline limits (inltab.h) what a key is worth: whether it is full, its eviction's score, an
 * eviction counted, a key released; a tenant's limits and quota. Calls nothing of the
 * limiter's other files. Not for judging or consuming (limiter.c), nor for the services'
 * names and a reload of the rules (limiter_rules.c).
 */
#include "limiter_int.h"

const struct rl_tier *
lim_entry_tier(const struct rl_limiter *l, const struct rl_keytab_entry *e)
{
    if (rl_inltab_is(e->tier)) {
        return rl_inltab_tier(l->inl, e->tier);
    }
    return e->tier < l->conf->ntiers ? &l->conf->tiers[e->tier] : NULL;
}

/* The account t's keys count in: its service's, or for an inline limit its tenant's (the
 * owner of the limit: docs/PROTOCOL.md, "Inline limits"), added when it holds nothing yet and
 * create is set. NULL only for an inline limit's tenant that holds nothing (create unset) or
 * cannot be recorded (out of memory: then its keys count in the inline pseudo-service). */
struct rl_limiter_service_stats *
lim_acct(const struct rl_limiter *l, const struct rl_tier *t, bool create)
{
    if (rl_inltab_is(t->id)) {
        uint32_t owner = rl_inltab_owner(l->inl, t->id);
        struct rl_tenant *x = create ? rl_tenants_add(l->tenants, owner)
                                     : rl_tenants_find(l->tenants, owner);

        if (x == NULL) {
            return create ? (struct rl_limiter_service_stats *)&l->inl_svc.st : NULL;
        }
        return &x->st;
    }
    return (struct rl_limiter_service_stats *)&l->svcs[l->svc_of_tier[t->id]].st;
}

/* Drops t's tenant record when it holds nothing any more. */
static void
lim_settle(struct rl_limiter *l, const struct rl_tier *t)
{
    if (rl_inltab_is(t->id)) {
        rl_tenants_settle(l->tenants, rl_tenants_find(l->tenants, rl_inltab_owner(l->inl, t->id)));
    }
}

/* A key of t's account was added (+1) or dropped (-1), the counts of the walk of
 * rl_limiter_set_rules included (which leaves an inline limit's count of keys alone). */
void
lim_count_key_acct(struct rl_limiter *l, const struct rl_tier *t, int delta)
{
    struct rl_limiter_service_stats *v = lim_acct(l, t, true);

    if (rl_inltab_is(t->id)) {
        l->inl_svc.st.keys += delta > 0 ? 1 : (uint64_t)-1;
    }
    if (delta > 0) {
        l->nactive += v->keys == 0;
        v->keys++;
        l->nkeys++;
    } else {
        v->keys--;
        l->nkeys--;
        l->nactive -= v->keys == 0;
        lim_settle(l, t);
    }
}

/* A key of t's account was added (+1) or dropped (-1); an inline limit counts its keys. */
void
lim_count_key(struct rl_limiter *l, const struct rl_tier *t, int delta)
{
    if (rl_inltab_is(t->id)) {
        rl_inltab_ref(l->inl, t->id, delta);
    }
    lim_count_key_acct(l, t, delta);
}

/* The log bytes of t's account changed by delta (wrapping arithmetic for a decrease). */
void
lim_count_log(struct rl_limiter *l, const struct rl_tier *t, uint64_t delta)
{
    struct rl_limiter_service_stats *v;
    bool had;

    if (delta == 0) {
        return;
    }
    v = lim_acct(l, t, true);
    had = v->log_bytes != 0;
    v->log_bytes += delta;
    l->log_bytes += delta;
    l->nlogging += (v->log_bytes != 0) - had;
    lim_settle(l, t);
}

/* inltab's accounting: owner took (+1) or lost (-1) an inline limit. */
void
lim_owned(void *arg, uint32_t owner, int delta)
{
    struct rl_limiter *l = arg;
    struct rl_tenant *x = delta > 0 ? rl_tenants_add(l->tenants, owner)
                                    : rl_tenants_find(l->tenants, owner);

    if (x == NULL) {
        return; /* out of memory: the quota counts fewer limits than it could */
    }
    if (delta > 0) {
        x->limits++;
    } else if (x->limits > 0) {
        x->limits--;
        rl_tenants_settle(l->tenants, x);
    }
}

/* inltab's quota: a tenant holds at most RL_INLTAB_TENANT_MAX inline limits. */
bool
lim_may_add(void *arg, uint32_t owner)
{
    struct rl_limiter *l = arg;
    const struct rl_tenant *x = rl_tenants_find(l->tenants, owner);

    return x == NULL || x->limits < RL_INLTAB_TENANT_MAX;
}

/* The sweep's question: is e full at now (the sweep's clock less its grace)? Its state is
 * bounded first at the sweep's own clock (rl_algo_bound, as a judgment then would: a clock
 * stepped back leaves it at most a window ahead), so a key written while the clock was ahead
 * is forgotten within three windows of the step back, not when the clock reaches the time it
 * was written at (a day later, for a day's step). */
bool
lim_is_full(void *arg, struct rl_keytab_entry *e, uint64_t now)
{
    struct rl_limiter *l = arg;
    const struct rl_tier *t = lim_entry_tier(l, e);

    if (t == NULL) {
        return true;
    }
    rl_algo_bound(t, &e->st, l->sweep_now > now ? l->sweep_now : now);
    return rl_algo_is_full(t, &e->st, now);
}

/*
 * The eviction's score of e for an insert of tier `for_tier` (keytab.h): class 0, a key back
 * at full allowance (losing it changes nothing); 1, a key of a service holding at least an
 * equal share of the keys (counting the inserting service) that would allow a request of
 * cost 1 now; 2, such a key that would not (its limit is in force); 3 and 4, the same for a
 * service under its share. Within a class, the key full soonest goes first.
 */
uint64_t
lim_score(void *arg, struct rl_keytab_entry *e, uint64_t now, uint32_t for_tier)
{
    struct rl_limiter *l = arg;
    const struct rl_tier *t = lim_entry_tier(l, e);
    const uint64_t mask = (UINT64_C(1) << RL_KEYTAB_CLASS_SHIFT) - 1;
    struct rl_algo_state st, next;
    struct rl_algo_result r;
    uint64_t at, n, cls, held;
    const struct rl_limiter_service_stats *v, *ins = NULL;
    const struct rl_tier *ft;

    if (t == NULL || rl_algo_is_full(t, &e->st, now)) {
        return 0;
    }
    v = lim_acct(l, t, false);
    held = v != NULL ? v->keys : 0;
    n = l->nactive;
    ft = rl_inltab_is(for_tier) ? rl_inltab_tier(l->inl, for_tier)
         : for_tier < l->conf->ntiers ? &l->conf->tiers[for_tier]
                                      : NULL;
    if (ft != NULL) {
        ins = lim_acct(l, ft, false);
    }
    if (ft != NULL && (ins == NULL || ins->keys == 0)) {
        n++; /* the inserting account is about to hold a key */
    }
    /* The copy shares a log's entries: the key's own state is bounded first (a clock stepped
     * back), so that its full_at moves with them. A log's judge prunes it: a pure effect of
     * time. */
    rl_algo_bound(t, &e->st, now);
    st = e->st;
    rl_algo_judge(t, &st, now, 1, &r, &next);
    cls = held * n >= l->nkeys ? 1 : 3;
    cls += !r.allowed;
    at = rl_algo_full_at(t, &e->st);
    return cls << RL_KEYTAB_CLASS_SHIFT | (at < mask ? at : mask);
}

void
lim_evicted(void *arg, const struct rl_keytab_entry *e, uint64_t score)
{
    struct rl_limiter *l = arg;
    const struct rl_tier *t = lim_entry_tier(l, e);
    uint64_t cls = score >> RL_KEYTAB_CLASS_SHIFT;
    struct rl_limiter_service_stats *v;

    if (t == NULL) {
        return;
    }
    v = rl_inltab_is(t->id) ? &l->inl_svc.st : lim_acct(l, t, false);
    v->evicted++;
    if (cls == 2 || cls == 4) {
        v->evicted_in_force++;
        l->st.evicted_in_force++;
    }
    if (cls >= 3) {
        l->st.evicted_under_share++;
    }
}

void
lim_release_state(struct rl_limiter *l, const struct rl_tier *t, struct rl_algo_state *s)
{
    lim_count_log(l, t, -rl_algo_heap_bytes(t, s));
    rl_algo_release(t, s);
}

void
lim_release(void *arg, struct rl_keytab_entry *e)
{
    struct rl_limiter *l = arg;
    const struct rl_tier *t = lim_entry_tier(l, e);

    if (t != NULL) {
        lim_release_state(l, t, &e->st);
        lim_count_key(l, t, -1);
    }
}
