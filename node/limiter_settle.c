/*
 * limiter_settle: ADJUST and RELEASE (limiter.h, rl_limiter_adjust and rl_limiter_release and
 * their _prepared forms): a charge or refund applied to every tier of a key, concurrency
 * slots given back, then the reply of what is left, judged as limiter.c judges a CHECK
 * (limiter_int.h). Limiter.c never calls it. Not for CHECK (limiter.c), nor for the
 * arithmetic of a refund or a release (algo.c, algo_conc.c).
 */
#include <string.h>

#include "limiter_int.h"

/* ADJUST, step 1: delta applied to every tier's state of req's key; a charge inserts the
 * keys not in the table, a refund leaves them out (a key not held has nothing to give). */
static void
lim_adjust_all(struct rl_limiter *l, const struct rl_wire_req *req, uint32_t shard,
               const struct lim_judge *j, const struct rl_limiter_prep *prep, uint64_t now,
               uint16_t epoch)
{
    for (uint32_t i = 0; i < j->ntiers; i++) {
        const struct rl_tier *t = &j->tiers[i];
        struct rl_keytab_entry *e = rl_keytab_find(l->tab, prep->fp_hi[i], prep->fp_lo[i]);
        struct rl_algo_state s;

        if (t->algo == RL_ALGO_CONCURRENCY) {
            continue; /* slots are taken by CHECK and given back by RELEASE only */
        }
        if (e != NULL) {
            lim_entry_current(l, e, t, epoch);
            lim_commit_or_adjust(l, t, &e->st, NULL, now, 0, req->delta);
            continue;
        }
        if (req->delta <= 0) {
            continue;
        }
        memset(&s, 0, sizeof(s));
        lim_commit_or_adjust(l, t, &s, NULL, now, 0, req->delta);
        if (rl_algo_is_full(t, &s, now)) {
            lim_release_state(l, t, &s);
            continue;
        }
        lim_store_new(l, t, &s, prep->fp_hi[i], prep->fp_lo[i], now, epoch, req, &shard);
    }
}

/* RELEASE, step 1: req->cost slots given back in every concurrency tier of req's key (a key
 * not held has none to give); the other tiers are left as they are. */
static void
lim_release_all(struct rl_limiter *l, const struct rl_wire_req *req, const struct lim_judge *j,
                const struct rl_limiter_prep *prep, uint64_t now, uint16_t epoch)
{
    for (uint32_t i = 0; i < j->ntiers; i++) {
        const struct rl_tier *t = &j->tiers[i];
        struct rl_keytab_entry *e;
        uint64_t given = 0, asked;

        if (t->algo != RL_ALGO_CONCURRENCY) {
            continue;
        }
        e = rl_keytab_find(l->tab, prep->fp_hi[i], prep->fp_lo[i]);
        if (e != NULL) {
            lim_entry_current(l, e, t, epoch);
            {
                uint64_t before = rl_algo_heap_bytes(t, &e->st);

                given = rl_algo_conc_release(t, &e->st, now, req->cost);
                lim_count_log(l, t, rl_algo_heap_bytes(t, &e->st) - before);
            }
        }
        /* what the key did not hold, of at most N: no holder takes more than N slots, so a
         * larger count is no holder that outlived its lease (before, one RELEASE of
         * 1,000,000 on an empty key counted 1,000,000) */
        asked = req->cost < t->limit ? req->cost : t->limit;
        if (asked > given) {
            l->st.releases_late += asked - given;
        }
    }
}

/* ADJUST (release false) or RELEASE: applied, then the reply of what is left. */
static int
lim_settle_key(struct rl_limiter *l, const struct rl_wire_req *req,
               const struct rl_limiter_prep *prep, uint64_t now, uint16_t epoch, bool release,
               struct rl_wire_check_reply *rep)
{
    const struct rl_algo_result *dec;
    uint64_t remaining = UINT64_MAX;
    uint64_t queue = 0;
    struct lim_judge j;
    int rc;

    memset(rep, 0, sizeof(*rep));
    rep->id = req->id;
    if (!req->limit.set && prep->rule == NULL) {
        rep->code = RL_WIRE_NO_RULE;
        return 0;
    }
    rc = lim_select_tiers(l, req, prep->rule, &j);
    if (rc != 0) {
        return rc;
    }
    if (release) {
        lim_release_all(l, req, &j, prep, now, epoch);
    } else {
        lim_adjust_all(l, req, prep->shard, &j, prep, now, epoch);
    }
    /* The reply: what is left after it (a peek's answer), and the wait of a request of
     * cost 1 (0: it would be allowed now; a shadow rule refuses nothing). */
    lim_judge_all(l, &j, prep, now, 0, epoch);
    dec = lim_decide_allowed(l, j.ntiers, &queue);
    rep->code = RL_WIRE_ALLOWED;
    rep->limit = dec->limit;
    rep->remaining = dec->remaining;
    rep->reset_ms = dec->reset_ms;
    if (!j.shadow && lim_judge_all(l, &j, prep, now, 1, epoch)) {
        dec = lim_decide_refused(l, j.ntiers, 1, &remaining);
        rep->retry_after_ms = dec->retry_ms;
    }
    return 0;
}

int
rl_limiter_adjust_prepared(struct rl_limiter *l, const struct rl_wire_req *req,
                           const struct rl_limiter_prep *prep, uint64_t now, uint16_t epoch,
                           struct rl_wire_check_reply *rep)
{
    return lim_settle_key(l, req, prep, now, epoch, false, rep);
}

int
rl_limiter_release_prepared(struct rl_limiter *l, const struct rl_wire_req *req,
                            const struct rl_limiter_prep *prep, uint64_t now, uint16_t epoch,
                            struct rl_wire_check_reply *rep)
{
    return lim_settle_key(l, req, prep, now, epoch, true, rep);
}

int
rl_limiter_release(struct rl_limiter *l, const struct rl_wire_req *req, uint64_t now,
                   uint16_t epoch, struct rl_wire_check_reply *rep)
{
    struct rl_limiter_prep prep;

    rl_limiter_prepare(l, req, &prep);
    return rl_limiter_release_prepared(l, req, &prep, now, epoch, rep);
}

int
rl_limiter_adjust(struct rl_limiter *l, const struct rl_wire_req *req, uint64_t now, uint16_t epoch,
                  struct rl_wire_check_reply *rep)
{
    struct rl_limiter_prep prep;

    rl_limiter_prepare(l, req, &prep);
    return rl_limiter_adjust_prepared(l, req, &prep, now, epoch, rep);
}
