/*
 * algo: the six rate algorithms of docs/ALGORITHMS.md over a 16-byte state, exact in integers
 * (which derives every formula). Each judge answers the docs/PROTOCOL.md reply fields
 * as exact "largest amount" and "smallest wait" quantities under the node clock, which the
 * tests verify by brute force. Not for finding keys or combining tiers, nor for a state's
 * export and import for the handoff (algo_handoff.c); algo_int.h holds the helpers over a
 * state that both read.
 *
 * Bounds: L and B are below 2^32, W below 2^32 too except for fixed_window and
 * sliding_window_counter (up to 366 days, below 2^35: rl_algo_window_max, ruleset.h), costs
 * at most 10^6 and now below 2^62 ms, so products such as L*W or now*L are taken in 128 bits
 * and every stored quantity fits its field (those two store a window index and counts below
 * 2^32, never W itself).
 *
 * States, all zero when never seen (full allowance):
 *   fixed_window            a = window index k, b = count in window k
 *   sliding_window_log      a = struct rl_slog *, b = newest time + W (full at), 0 when empty;
 *                           degraded (a log the memory cap could not keep): a = k << 1 | 1,
 *                           b as sliding_window_counter (a log pointer has bit 0 clear)
 *   sliding_window_counter  a = window index k, b = previous count << 32 | current count
 *   token_bucket            a = last update (ms), b = deficit D in 1/W token
 *   gcra, leaky_bucket      a, b[0..31] = TAT*L (96 bits, ms scaled by L);
 *                           b[32..63] = floor(TAT) - last update (ms, exact below 2^31)
 *   concurrency             algo_conc.c's (dispatched there; ADJUST leaves it alone)
 */
#include "algo_int.h"

#include <errno.h>
#include <string.h>

#include "slog.h"

/* A finite retry is one less than RL_ALGO_NEVER at most, so the sentinel stays unambiguous;
 * only a wait over 49.7 days is affected, and retrying early is merely refused again. */
static uint64_t
retry_wait(u128 w)
{
    return w >= RL_ALGO_NEVER ? RL_ALGO_NEVER - 1 : (uint64_t)w;
}

static u128
ceil_div(u128 a, u128 b)
{
    return a / b + (a % b != 0);
}

/* ---- fixed_window ---------------------------------------------------------------------- */

static void
fw_judge(const struct rl_tier *t, const struct rl_algo_state *s, uint64_t now, uint32_t cost,
         struct rl_algo_result *r, struct rl_algo_state *next)
{
    uint64_t L = t->limit;
    uint64_t W = t->window_ms;
    uint64_t k = now / W;
    uint64_t cnt = 0;
    uint64_t after;
    uint64_t end;

    /* A stored window later than now's is a clock that stepped back: keep judging in it. */
    if (s->b != 0 && s->a >= k) {
        k = s->a;
        cnt = s->b;
    }
    end = (k + 1) * W;
    r->allowed = cost == 0 || cnt + cost <= L;
    after = r->allowed ? cnt + cost : cnt;
    r->limit = L;
    r->remaining = after <= L ? L - after : 0;
    r->reset_ms = after > 0 ? end - now : 0;
    if (!r->allowed) {
        /* Window k+1 starts empty, and cost <= L fits in it. */
        r->retry_ms = cost > L ? RL_ALGO_NEVER : retry_wait(end - now);
    } else if (cost > 0) {
        next->a = k;
        next->b = after;
    }
}

static uint64_t
fw_full_at(const struct rl_tier *t, const struct rl_algo_state *s)
{
    return s->b == 0 ? 0 : (s->a + 1) * (uint64_t)t->window_ms;
}

/* ---- sliding_window_log ---------------------------------------------------------------- */

static void swc_judge(const struct rl_tier *t, const struct rl_algo_state *s, uint64_t now,
                      uint32_t cost, struct rl_algo_result *r, struct rl_algo_state *next);
static uint64_t swc_full_at(const struct rl_tier *t, const struct rl_algo_state *s);

/*
 * Turns the log of *s (pruned at now_eff) into the sliding_window_counter state of the same
 * history and frees it: the costs at or after the start of now_eff's window k are window k's
 * count, the rest (all after now_eff - W, so in window k - 1) the previous count. `folded` is
 * a cost rl_slog_append just added to the newest entry instead of logging it at now_eff: it
 * is moved to window k, where it belongs.
 */
static void
swl_degrade(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now_eff, uint32_t folded)
{
    struct rl_slog *g = swl_log(s);
    uint64_t W = t->window_ms;
    uint64_t k = now_eff / W;
    uint64_t cur = rl_slog_sum_since(g, k * W);
    uint64_t prev = rl_slog_sum(g) - cur;
    uint64_t newest;
    struct rl_algo_state c;

    if (folded > 0 && rl_slog_newest(g, &newest) && newest < k * W) {
        prev -= folded;
        cur += folded;
    }
    rl_slog_destroy(g);
    /* Both are at most L < 2^32: the log held at most L once the request was allowed. */
    c.a = k;
    c.b = (prev > UINT32_MAX ? UINT32_MAX : prev) << 32 | (cur > UINT32_MAX ? UINT32_MAX : cur);
    swl_tag(s, &c);
}


static void
swl_judge(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now, uint32_t cost,
          struct rl_algo_result *r)
{
    struct rl_slog *g = swl_log(s);
    uint64_t L = t->limit;
    uint64_t W = t->window_ms;
    uint64_t now_eff = rl_slog_prune(g, now, (uint32_t)t->window_ms);
    uint64_t sum = rl_slog_sum(g);
    uint64_t after;
    uint64_t newest = 0;
    bool any;

    if (sum == 0) {
        s->b = 0; /* every entry left the window: the key is full and may be forgotten */
    }
    r->allowed = cost == 0 || sum + cost <= L;
    after = r->allowed ? sum + cost : sum;
    r->limit = L;
    r->remaining = after <= L ? L - after : 0;
    if (r->allowed && cost > 0) {
        newest = now_eff;
        any = true;
    } else {
        any = rl_slog_newest(g, &newest);
    }
    /* The newest entry is inside (now_eff - W, now_eff] and now <= now_eff: positive. */
    r->reset_ms = any ? newest + W - now : 0;
    if (!r->allowed) {
        if (cost > L) {
            r->retry_ms = RL_ALGO_NEVER;
        } else {
            /* The oldest entries must leave until `need` is freed; the last of them sets the
             * wait. Nothing else frees anything, as refused requests are not logged. */
            uint64_t need = sum + cost - L;

            r->retry_ms = retry_wait((u128)rl_slog_reach(g, need) + W - now);
        }
    }
}

/* Returns 0 when logged, 1 when the key is (now) degraded. next, the state judged as a
 * sliding_window_counter, is read only when the key is degraded already (NULL otherwise). */
static int
swl_commit(const struct rl_tier *t, struct rl_algo_state *s, const struct rl_algo_state *next,
           uint64_t now, uint32_t cost, uint64_t room)
{
    struct rl_slog *g;
    uint64_t now_eff;
    uint64_t newest;
    int rc;

    if (swl_degraded(s)) {
        *s = *next; /* judged as a sliding_window_counter */
        return 1;
    }
    g = swl_log(s);
    now_eff = rl_slog_prune(g, now, (uint32_t)t->window_ms);
    rc = rl_slog_append(&g, now_eff, cost, room);
    s->a = (uintptr_t)g;
    if (rc == 0) {
        if (rl_slog_newest(g, &newest)) {
            s->b = newest + t->window_ms;
        }
        return 0;
    }
    if (rc < 0) {
        /* No log could be had: the key starts degraded, with this cost counted. */
        struct rl_algo_state c = {now_eff / t->window_ms, cost};

        swl_tag(s, &c);
        return 1;
    }
    swl_degrade(t, s, now_eff, cost);
    return 1;
}

/* ---- sliding_window_counter ------------------------------------------------------------ */

/* The window k of now (or of the state, if later), the elapsed e in it, and the counts of
 * windows k-1 (p) and k (cur) as time alone has made them. */
static void
swc_load(const struct rl_tier *t, const struct rl_algo_state *s, uint64_t now, uint64_t *k,
         uint64_t *e, uint64_t *p, uint64_t *cur)
{
    uint64_t W = t->window_ms;
    uint64_t sp = s->b >> 32;
    uint64_t sc = s->b & 0xffffffffu;

    *k = now / W;
    *p = 0;
    *cur = 0;
    if (s->b != 0) {
        if (s->a >= *k) {
            *k = s->a;
            *p = sp;
            *cur = sc;
        } else if (s->a + 1 == *k) {
            *p = sc;
        }
    }
    *e = max64(now, *k * W) - *k * W;
}

/* The smallest wait for a refused request of cost <= L; usage only falls as time passes, so
 * the first phase in which the test passes holds the answer. */
static uint64_t
swc_retry(uint64_t L, uint64_t W, uint64_t k, uint64_t p, uint64_t cur, uint64_t cost, uint64_t now)
{
    /* In window k: p(W - e') <= (L - cur - cost)W, smallest e' = W - floor(R/p), which is
     * > e since the request is refused at e. */
    if (L >= cur + cost && p > 0) {
        u128 f = (u128)(L - cur - cost) * W / p;

        if (f >= 1) {
            return retry_wait((u128)k * W + (W - (uint64_t)f) - now);
        }
    }
    /* In window k+1, where p' = cur and nothing is current: cur(W - e'') <= (L - cost)W. */
    if (cur == 0) {
        return retry_wait((u128)(k + 1) * W - now);
    }
    u128 f2 = (u128)(L - cost) * W / cur;
    if (f2 >= 1) {
        uint64_t e2 = f2 >= W ? 0 : W - (uint64_t)f2;

        return retry_wait((u128)(k + 1) * W + e2 - now);
    }
    /* Window k+2 starts with nothing counted. */
    return retry_wait((u128)(k + 2) * W - now);
}

static void
swc_judge(const struct rl_tier *t, const struct rl_algo_state *s, uint64_t now, uint32_t cost,
          struct rl_algo_result *r, struct rl_algo_state *next)
{
    uint64_t L = t->limit;
    uint64_t W = t->window_ms;
    uint64_t k, e, p, cur, after;
    u128 LW = (u128)L * W;
    u128 pw;
    u128 q;

    swc_load(t, s, now, &k, &e, &p, &cur);
    pw = (u128)p * (W - e);
    r->allowed = cost == 0 || pw + (u128)(cur + cost) * W <= LW;
    after = r->allowed ? cur + cost : cur;
    r->limit = L;
    q = LW >= pw ? (LW - pw) / W : 0;
    r->remaining = q > after ? (uint64_t)(q - after) : 0;
    if (after > 0) {
        r->reset_ms = (k + 2) * W - now; /* window k+1 still weighs what k counted */
    } else if (pw > 0) {
        r->reset_ms = (k + 1) * W - now;
    } else {
        r->reset_ms = 0;
    }
    if (!r->allowed) {
        r->retry_ms = cost > L ? RL_ALGO_NEVER : swc_retry(L, W, k, p, cur, cost, now);
    } else if (cost > 0) {
        /* after <= L < 2^32 since the request fit; p < 2^32 as it was a stored count. */
        next->a = k;
        next->b = p << 32 | after;
    }
}

static uint64_t
swc_full_at(const struct rl_tier *t, const struct rl_algo_state *s)
{
    uint64_t W = t->window_ms;

    if ((s->b & 0xffffffffu) != 0) {
        return (s->a + 2) * W;
    }
    return s->b != 0 ? (s->a + 1) * W : 0;
}

/* ---- token_bucket, gcra, leaky_bucket -------------------------------------------------- */

/*
 * The decision shared by the three buckets, from the deficit d (in 1/W token: B*W - d is the
 * allowance times W) at now_eff = max(now, last update). Sets *da to the deficit after.
 */
static void
bucket_decide(const struct rl_tier *t, u128 d, uint64_t now_eff, uint64_t now, uint32_t cost,
              struct rl_algo_result *r, u128 *da)
{
    uint64_t L = t->limit;
    uint64_t W = t->window_ms;
    uint64_t B = rl_tier_capacity(t);
    u128 BW = (u128)B * W;
    u128 cw = (u128)cost * W;
    uint64_t delta = now_eff - now;

    r->allowed = cost == 0 || d + cw <= BW;
    *da = r->allowed ? d + cw : d;
    r->limit = B;
    r->remaining = BW > *da ? (uint64_t)((BW - *da) / W) : 0;
    /* The deficit falls by L per ms once the clock is past now_eff. */
    r->reset_ms = *da == 0 || L == 0 ? 0 : sat64(delta + ceil_div(*da, L));
    if (!r->allowed) {
        r->retry_ms =
            cost > B ? RL_ALGO_NEVER : retry_wait(delta + ceil_div(d - (u128)(B - cost) * W, L));
    }
}

static void
tb_judge(const struct rl_tier *t, const struct rl_algo_state *s, uint64_t now, uint32_t cost,
         struct rl_algo_result *r, struct rl_algo_state *next)
{
    uint64_t now_eff = max64(now, s->a);
    u128 refill = (u128)(now_eff - s->a) * t->limit;
    u128 d = s->b > refill ? s->b - refill : 0;
    u128 da;

    bucket_decide(t, d, now_eff, now, cost, r, &da);
    if (r->allowed && cost > 0) {
        next->a = now_eff;
        next->b = (uint64_t)da; /* <= B*W < 2^64 */
    }
}

static uint64_t
tb_full_at(const struct rl_tier *t, const struct rl_algo_state *s)
{
    if (s->b == 0) {
        return 0;
    }
    return t->limit == 0 ? UINT64_MAX : sat64(s->a + ceil_div(s->b, t->limit));
}

/*
 * TAT*L = X is exact; the deficit at now_eff is X - now_eff*L, the very D of token_bucket, so
 * both admit and answer alike. The last update time (kept as an offset behind TAT) is what
 * makes them agree when the clock steps back too.
 */
static void
gcra_judge(const struct rl_tier *t, const struct rl_algo_state *s, uint64_t now, uint32_t cost,
           struct rl_algo_result *r, struct rl_algo_state *next)
{
    uint64_t L = t->limit;
    u128 x = gcra_x(s);
    uint64_t last = 0;
    uint64_t now_eff;
    u128 nl, d, da;

    if (L > 0 && x != 0) {
        /* TAT itself may pass 2^64 ms (L = 1 with B*W near 2^64); the last update cannot. */
        u128 tat = x / L;
        uint64_t off = gcra_off_decode((uint32_t)(s->b >> 32));

        last = tat > off ? (uint64_t)(tat - off) : 0;
    }
    now_eff = max64(now, last);
    nl = (u128)now_eff * L;
    d = x > nl ? x - nl : 0;
    bucket_decide(t, d, now_eff, now, cost, r, &da);
    if (t->algo == RL_ALGO_LEAKY_BUCKET && r->allowed && cost > 0) {
        /* The first unit departs at max(TAT, now_eff), d/L ms after now_eff. */
        r->queue_ms = sat64((u128)(now_eff - now) + ceil_div(d, L));
    }
    if (r->allowed && cost > 0) {
        u128 xa = nl + da;
        uint64_t off = sat64(xa / L - now_eff);

        next->a = (uint64_t)xa;
        next->b = (uint64_t)(xa >> 64) | (uint64_t)gcra_off_encode(off) << 32;
    }
}

static uint64_t
gcra_full_at(const struct rl_tier *t, const struct rl_algo_state *s)
{
    u128 x = gcra_x(s);

    if (x == 0) {
        return 0;
    }
    return t->limit == 0 ? UINT64_MAX : sat64(ceil_div(x, t->limit));
}

static void
gcra_rescale(const struct rl_tier *from, const struct rl_tier *to, struct rl_algo_state *s)
{
    uint64_t L1 = from->limit, L2 = to->limit;
    u128 x = gcra_x(s);
    u128 tat, nl, d, xa;
    uint64_t off, last;

    if (x == 0 || L1 == L2) {
        return;
    }
    if (L1 == 0 || L2 == 0) {
        s->a = 0;
        s->b = 0;
        return;
    }
    tat = x / L1;
    off = gcra_off_decode((uint32_t)(s->b >> 32));
    last = tat > off ? (uint64_t)(tat - off) : 0;
    nl = (u128)last * L1;
    d = x > nl ? x - nl : 0;
    xa = (u128)last * L2 + d;
    off = sat64(xa / L2 - last);
    s->a = (uint64_t)xa;
    s->b = (uint64_t)(xa >> 64) | (uint64_t)gcra_off_encode(off) << 32;
}

/*
 * A clock stepped back by more than a window. Up to W a step back freezes a key as long as
 * the step (each algorithm judges at now_eff = max(now, its latest time)); a longer one
 * would freeze it as long as the step too, a day for a day. So a state whose latest time
 * lies more than one window W ahead of now is first moved back, whole, to lie W ahead (for
 * the windows: window now/W + 1), as an imported record's times are (algo_handoff.c,
 * import_bound): nothing consumed is given back (counts, deficits, logs keep their values;
 * only their times move), and a step back freezes a key at most one window.
 */
/* Whether window k lies more than one window ahead of now's (k > now / W + 1), told by a
 * multiplication, not a division on the hot path: (k - 1) * W > now. A stored window index
 * times W stays below 2^63 (now <= 2^62, W < 2^35). */
static inline bool
window_ahead(uint64_t k, uint64_t now, uint64_t W)
{
    return k >= 2 && (k - 1) * W > now;
}

void
rl_algo_bound(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now)
{
    uint64_t W = t->window_ms;
    uint64_t most = now > UINT64_MAX - W ? UINT64_MAX : now + W;

    switch (t->algo) {
    case RL_ALGO_FIXED_WINDOW:
    case RL_ALGO_SLIDING_WINDOW_COUNTER:
        if (s->b != 0 && window_ahead(s->a, now, W)) {
            s->a = now / W + 1;
        }
        return;
    case RL_ALGO_SLIDING_WINDOW_LOG:
        if (swl_degraded(s)) {
            struct rl_algo_state c = swl_counter(s);

            if (c.b != 0 && window_ahead(c.a, now, W)) {
                c.a = now / W + 1;
                swl_tag(s, &c);
            }
        } else {
            uint64_t shift = rl_slog_bound(swl_log(s), now, (uint32_t)W);

            s->b = s->b > shift ? s->b - shift : 0;
        }
        return;
    case RL_ALGO_TOKEN_BUCKET:
        if (s->b != 0 && s->a > most) {
            s->a = most;
        }
        return;
    case RL_ALGO_GCRA:
    case RL_ALGO_LEAKY_BUCKET: {
        uint64_t L = t->limit;
        u128 x = gcra_x(s), tat;
        uint64_t off, last;

        if (L == 0 || x == 0) {
            return;
        }
        if (x < ((u128)most + 1) * L) {
            return; /* TAT <= most, and so the last update: no division on the hot path */
        }
        tat = x / L;
        off = gcra_off_decode((uint32_t)(s->b >> 32));
        last = tat > off ? (uint64_t)(tat - off) : 0; /* read as gcra_judge reads it */
        if (last <= most) {
            return;
        }
        x -= (u128)(last - most) * L; /* TAT and the last update move back alike */
        s->a = (uint64_t)x;
        s->b = (s->b & ~(uint64_t)0xffffffffu) | (uint64_t)(x >> 64);
        return;
    }
    case RL_ALGO_CONCURRENCY:
        rl_algo_conc_bound(t, s, now);
        return;
    default:
        return;
    }
}

/* ---- ADJUST: charges and refunds (docs/ALGORITHMS.md, "ADJUST") ------------------------ */

uint64_t
rl_algo_debt_cap(const struct rl_tier *t)
{
    uint64_t cap = (uint64_t)(rl_algo_has_burst(t->algo) ? t->burst : t->limit) + RL_ALGO_DEBT_OVER;

    return cap < RL_ALGO_DEBT_MAX ? cap : RL_ALGO_DEBT_MAX;
}

/* A count after a charge (capped at cap) or a refund (at least 0). */
static uint64_t
adj_count(uint64_t cnt, int64_t delta, uint64_t cap)
{
    if (delta >= 0) {
        uint64_t n = cnt + (uint64_t)delta;

        return n > cap ? max64(cnt, cap) : n;
    }
    return cnt > (uint64_t)-delta ? cnt - (uint64_t)-delta : 0;
}

/* A deficit in 1/W token (token_bucket, gcra, leaky_bucket) after a charge or a refund. */
static u128
adj_deficit(u128 d, int64_t delta, uint64_t W, uint64_t most)
{
    if (delta >= 0) {
        u128 cap = (u128)most * W;
        u128 n = d + (u128)(uint64_t)delta * W;

        return n > cap ? (d > cap ? d : cap) : n;
    }
    u128 back = (u128)(uint64_t)-delta * W;
    return d > back ? d - back : 0;
}

/* sliding_window_counter (and a degraded log): window k's count only, never k-1's. */
static void
swc_adjust(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now, int64_t delta)
{
    uint64_t k, e, p, cur;

    swc_load(t, s, now, &k, &e, &p, &cur);
    cur = adj_count(cur, delta, rl_algo_debt_cap(t));
    if (p == 0 && cur == 0) {
        s->a = 0;
        s->b = 0;
        return;
    }
    s->a = k;
    s->b = p << 32 | cur;
}

int
rl_algo_adjust(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now, int64_t delta,
               uint64_t room)
{
    uint64_t W = t->window_ms;

    if (delta == 0) {
        return 0;
    }
    rl_algo_bound(t, s, now);
    switch (t->algo) {
    case RL_ALGO_FIXED_WINDOW: {
        uint64_t k = now / W;
        uint64_t cnt = 0;

        if (s->b != 0 && s->a >= k) {
            k = s->a;
            cnt = s->b;
        }
        cnt = adj_count(cnt, delta, rl_algo_debt_cap(t));
        s->a = cnt != 0 ? k : 0;
        s->b = cnt;
        return 0;
    }
    case RL_ALGO_SLIDING_WINDOW_LOG: {
        struct rl_slog *g;
        uint64_t sum, newest, most = rl_algo_debt_cap(t);

        if (swl_degraded(s)) {
            struct rl_algo_state c = swl_counter(s);

            swc_adjust(t, &c, now, delta);
            if (c.a == 0 && c.b == 0) {
                s->a = 0;
                s->b = 0;
            } else {
                swl_tag(s, &c);
            }
            return 1;
        }
        g = swl_log(s);
        rl_slog_prune(g, now, (uint32_t)W);
        sum = rl_slog_sum(g);
        if (delta < 0) {
            rl_slog_take(g, (uint64_t)-delta);
            s->b = rl_slog_newest(g, &newest) && rl_slog_sum(g) > 0 ? newest + W : 0;
            return 0;
        }
        if (sum >= most) {
            return 0;
        }
        if ((uint64_t)delta > most - sum) {
            delta = (int64_t)(most - sum);
        }
        /* The charge is logged at the log's now (swl_commit prunes to it again) as an allowed
         * request of that cost would be. The key is not degraded, so swl_commit needs no counter to
         * go on with (a degrade it makes counts the log itself, swl_degrade). */
        return swl_commit(t, s, NULL, now, (uint32_t)delta, room);
    }
    case RL_ALGO_SLIDING_WINDOW_COUNTER:
        swc_adjust(t, s, now, delta);
        return 0;
    case RL_ALGO_TOKEN_BUCKET: {
        uint64_t now_eff = max64(now, s->a);
        u128 refill = (u128)(now_eff - s->a) * t->limit;
        u128 d = s->b > refill ? s->b - refill : 0;

        d = adj_deficit(d, delta, W, rl_algo_debt_cap(t));
        s->a = d != 0 ? now_eff : 0;
        s->b = (uint64_t)d; /* <= RL_ALGO_DEBT_MAX * W < 2^64 */
        return 0;
    }
    case RL_ALGO_GCRA:
    case RL_ALGO_LEAKY_BUCKET: {
        uint64_t L = t->limit;
        u128 x = gcra_x(s);
        uint64_t last = 0;
        uint64_t now_eff, off;
        u128 nl, d, xa;

        if (L == 0) {
            return 0;
        }
        if (x != 0) {
            u128 tat = x / L;

            off = gcra_off_decode((uint32_t)(s->b >> 32));
            last = tat > off ? (uint64_t)(tat - off) : 0;
        }
        now_eff = max64(now, last);
        nl = (u128)now_eff * L;
        d = x > nl ? x - nl : 0;
        d = adj_deficit(d, delta, W, rl_algo_debt_cap(t));
        if (d == 0) {
            s->a = 0;
            s->b = 0;
            return 0;
        }
        /* now_eff*L < 2^94 and d <= 2^32 * 2^32: below the 96 bits kept */
        xa = nl + d;
        off = sat64(xa / L - now_eff);
        s->a = (uint64_t)xa;
        s->b = (uint64_t)(xa >> 64) | (uint64_t)gcra_off_encode(off) << 32;
        return 0;
    }
    default:
        return 0;
    }
}

/* ---- the interface --------------------------------------------------------------------- */

void
rl_algo_judge(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now, uint32_t cost,
              struct rl_algo_result *r, struct rl_algo_state *next)
{
    memset(r, 0, sizeof(*r));
    rl_algo_bound(t, s, now);
    *next = *s;
    switch (t->algo) {
    case RL_ALGO_FIXED_WINDOW:
        fw_judge(t, s, now, cost, r, next);
        break;
    case RL_ALGO_SLIDING_WINDOW_LOG:
        if (swl_degraded(s)) {
            struct rl_algo_state c = swl_counter(s);
            struct rl_algo_state n = c;

            swc_judge(t, &c, now, cost, r, &n);
            swl_tag(next, &n);
            break;
        }
        swl_judge(t, s, now, cost, r);
        *next = *s;
        break;
    case RL_ALGO_SLIDING_WINDOW_COUNTER:
        swc_judge(t, s, now, cost, r, next);
        break;
    case RL_ALGO_TOKEN_BUCKET:
        tb_judge(t, s, now, cost, r, next);
        break;
    case RL_ALGO_GCRA:
    case RL_ALGO_LEAKY_BUCKET:
        gcra_judge(t, s, now, cost, r, next);
        break;
    case RL_ALGO_CONCURRENCY:
        rl_algo_conc_judge(t, s, now, cost, r);
        *next = *s;
        break;
    default:
        /* An unknown algorithm never refuses: the parser makes this unreachable. */
        r->allowed = true;
        break;
    }
}

int
rl_algo_commit_capped(const struct rl_tier *t, struct rl_algo_state *s,
                      const struct rl_algo_state *next, uint64_t now, uint32_t cost, uint64_t room)
{
    if (cost == 0) {
        return 0;
    }
    if (t->algo == RL_ALGO_SLIDING_WINDOW_LOG) {
        return swl_commit(t, s, next, now, cost, room);
    }
    if (t->algo == RL_ALGO_CONCURRENCY) {
        return rl_algo_conc_commit(t, s, now, cost, room);
    }
    *s = *next;
    return 0;
}

int
rl_algo_commit(const struct rl_tier *t, struct rl_algo_state *s, const struct rl_algo_state *next,
               uint64_t now, uint32_t cost)
{
    return rl_algo_commit_capped(t, s, next, now, cost, UINT64_MAX);
}

uint64_t
rl_algo_full_at(const struct rl_tier *t, const struct rl_algo_state *s)
{
    switch (t->algo) {
    case RL_ALGO_FIXED_WINDOW:
        return fw_full_at(t, s);
    case RL_ALGO_SLIDING_WINDOW_LOG:
        if (swl_degraded(s)) {
            struct rl_algo_state c = swl_counter(s);

            return swc_full_at(t, &c);
        }
        return s->b;
    case RL_ALGO_SLIDING_WINDOW_COUNTER:
        return swc_full_at(t, s);
    case RL_ALGO_TOKEN_BUCKET:
        return tb_full_at(t, s);
    case RL_ALGO_GCRA:
    case RL_ALGO_LEAKY_BUCKET:
        return gcra_full_at(t, s);
    case RL_ALGO_CONCURRENCY:
        return rl_algo_conc_full_at(s);
    default:
        return 0;
    }
}

void
rl_algo_rescale(const struct rl_tier *from, const struct rl_tier *to, struct rl_algo_state *s)
{
    if (from->algo == to->algo &&
        (from->algo == RL_ALGO_GCRA || from->algo == RL_ALGO_LEAKY_BUCKET)) {
        gcra_rescale(from, to, s);
    }
}

/*
 * now >= tb_full_at and now >= gcra_full_at without their 128-bit division (the sweep asks
 * this of every key it visits, and a CHECK of a new key once): for an integer now,
 * now >= ceil(x / L) is x <= now * L. full_at saturates at UINT64_MAX, which only a now of
 * UINT64_MAX reaches: rl_algo_is_full answers that now first.
 */
static bool
tb_is_full(const struct rl_tier *t, const struct rl_algo_state *s, uint64_t now)
{
    if (s->b == 0) {
        return true;
    }
    return now >= s->a && (u128)(now - s->a) * t->limit >= s->b; /* a limit of 0: never */
}

static bool
gcra_is_full(const struct rl_tier *t, const struct rl_algo_state *s, uint64_t now)
{
    u128 x = gcra_x(s);

    return x == 0 || x <= (u128)now * t->limit; /* a limit of 0: never */
}

bool
rl_algo_is_full(const struct rl_tier *t, const struct rl_algo_state *s, uint64_t now)
{
    /* Every state is frozen until now reaches the times it stores, and full_at is past them
     * all, so a clock that stepped back is handled here as well. */
    if (now == UINT64_MAX) {
        return true; /* full_at is never later */
    }
    switch (t->algo) {
    case RL_ALGO_TOKEN_BUCKET:
        return tb_is_full(t, s, now);
    case RL_ALGO_GCRA:
    case RL_ALGO_LEAKY_BUCKET:
        return gcra_is_full(t, s, now);
    default:
        return now >= rl_algo_full_at(t, s);
    }
}

void
rl_algo_release(const struct rl_tier *t, struct rl_algo_state *s)
{
    if ((t->algo == RL_ALGO_SLIDING_WINDOW_LOG && !swl_degraded(s)) ||
        t->algo == RL_ALGO_CONCURRENCY) {
        rl_slog_destroy(swl_log(s));
    }
    s->a = 0;
    s->b = 0;
}

uint64_t
rl_algo_heap_bytes(const struct rl_tier *t, const struct rl_algo_state *s)
{
    return (t->algo == RL_ALGO_SLIDING_WINDOW_LOG && !swl_degraded(s)) ||
                   t->algo == RL_ALGO_CONCURRENCY
               ? rl_slog_bytes(swl_log(s))
               : 0;
}

bool
rl_algo_degraded(const struct rl_tier *t, const struct rl_algo_state *s)
{
    return t->algo == RL_ALGO_SLIDING_WINDOW_LOG && swl_degraded(s);
}
