/*
 * algo: the seven algorithms of docs/ALGORITHMS.md as functions over a 16-byte per-key, per-tier state,
 * in exact integer arithmetic. A zeroed state is a key never seen: full allowance.
 * Not for finding keys (keytab.h) or combining tiers (limiter.h).
 *
 * Time is the node clock in ms. If now is before a time stored in a state (the real clock
 * stepped back), the algorithms use the stored time instead, so a step back never refuses
 * more than the state already did.
 */
#ifndef RL_ALGO_H
#define RL_ALGO_H

#include <stdbool.h>
#include <stdint.h>

#include "ruleset.h"

/* retry_ms when a request can never be allowed (its cost exceeds the tier's capacity); the
 * same value as RL_WIRE_RETRY_NEVER. A finite wait that large is reported one less. */
#define RL_ALGO_NEVER 4294967295u

/* The state of one key under one tier. Its meaning depends on the algorithm (algo.c). */
struct rl_algo_state {
    uint64_t a;
    uint64_t b;
};

/* The decision of one tier for one request, before anything is consumed. */
struct rl_algo_result {
    bool allowed;
    uint64_t limit;     /* N for window algorithms, B for bucket algorithms */
    uint64_t remaining; /* what could still be consumed right after this request */
    uint64_t reset_ms;  /* until back at full allowance, if nothing more is consumed */
    uint64_t retry_ms;  /* refused: smallest wait after which the same request is allowed,
                           RL_WIRE_RETRY_NEVER (4294967295) when never; allowed: 0 */
    uint64_t queue_ms;  /* leaky_bucket, allowed: wait until the request's departure slot */
};

/*
 * A clock stepped back by more than a window (docs/ALGORITHMS.md, "Clock stepping back"):
 * when the latest time of *s lies more than one window ahead of now, moves the whole state
 * back to lie one window ahead, keeping what it counts. rl_algo_judge and rl_algo_adjust do
 * it first; a caller that judges a copy of a key's state (which shares a sliding log's or a
 * concurrency key's entries) bounds the key's own state first, so the two do not part.
 */
void rl_algo_bound(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now);

/*
 * Judges a request of `cost` at `now` against state *s of tier t. Fills *r. When allowed,
 * *next is the state after consuming (for sliding_window_log, *next == *s and consuming is
 * rl_algo_commit's job). Never modifies *s but for effects of the clock: a sliding log (and a
 * concurrency key's slots) drop entries that have left the window (which changes no
 * decision), and a state more than a window ahead of now is first moved back (rl_algo_bound:
 * from then on it is judged as moved).
 * A cost of 0 is always allowed and consumes nothing.
 */
void rl_algo_judge(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now, uint32_t cost,
                   struct rl_algo_result *r, struct rl_algo_state *next);

/*
 * Consumes: stores *next into *s, or for sliding_window_log appends (now, cost) to the log.
 * Call it only after rl_algo_judge allowed the same request at the same now. Returns as
 * rl_algo_commit_capped with unlimited room (1 only when malloc fails).
 */
int rl_algo_commit(const struct rl_tier *t, struct rl_algo_state *s,
                   const struct rl_algo_state *next, uint64_t now, uint32_t cost);

/*
 * As rl_algo_commit, but a sliding log may take at most `room` more heap bytes (the node's
 * memory cap). A log that would need more, or a new key that cannot have one, is degraded:
 * its history becomes the sliding_window_counter state of the same counts (previous and
 * current fixed window), its log is freed, and from then on it is judged and consumed as a
 * sliding_window_counter (docs/ALGORITHMS.md, "Under memory pressure") until it is full and
 * forgotten. Returns 0 when logged exactly, 1 when the key is degraded.
 */
int rl_algo_commit_capped(const struct rl_tier *t, struct rl_algo_state *s,
                          const struct rl_algo_state *next, uint64_t now, uint32_t cost,
                          uint64_t room);

/*
 * ADJUST (docs/ALGORITHMS.md, "ADJUST"): a charge (delta > 0) consumes delta in state *s of
 * tier t at now whatever is left, past the limit too (the key is in debt: refused until time
 * pays it back), up to rl_algo_debt_cap(t) outstanding; a refund (delta < 0) gives back at most
 * -delta of what the state holds now, never more than it holds (never above a full
 * allowance) and never from a past window (fixed_window and sliding_window_counter: window
 * k's count only; sliding_window_log: its newest entries first; the buckets: the deficit
 * left at now). A sliding log charged takes at most `room` more heap bytes, degraded as
 * rl_algo_commit_capped degrades it. Returns 1 when the key is (now) degraded, else 0.
 */
#define RL_ALGO_DEBT_MAX 4294967295u
/* How far past a full allowance charges may go: one largest charge (RL_WIRE_DELTA_MAX), so
 * that however many charges come, a key's debt is at most what one charge can make. */
#define RL_ALGO_DEBT_OVER 1000000u
/* The most a key of tier t may hold consumed (its debt included): its capacity (B for the
 * buckets, N for the windows) plus RL_ALGO_DEBT_OVER, at most RL_ALGO_DEBT_MAX (the windows'
 * counts and the log's entries are 32-bit). Charges stop there; a key already past it (its
 * tier's capacity lowered by a reload) keeps what it holds. */
uint64_t rl_algo_debt_cap(const struct rl_tier *t);
int rl_algo_adjust(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now, int64_t delta,
                   uint64_t room);

/* True when the state is back at full allowance at now, so the key can be forgotten. */
bool rl_algo_is_full(const struct rl_tier *t, const struct rl_algo_state *s, uint64_t now);

/* The earliest time at which the state is back at full allowance (eviction picks the
 * smallest). */
uint64_t rl_algo_full_at(const struct rl_tier *t, const struct rl_algo_state *s);

/*
 * A state written under tier `from` carried over to tier `to`, the same algorithm with other
 * limit and burst (a region's slice of a global limit changed, docs/REGIONS.md): what was
 * consumed stays consumed. Counts, logs and token_bucket deficits mean the same under both
 * and are left; a gcra or leaky_bucket state, which holds TAT times the rate, is re-expressed
 * at the new rate with the same deficit and last update.
 */
void rl_algo_rescale(const struct rl_tier *from, const struct rl_tier *to,
                     struct rl_algo_state *s);

/*
 * A state as a handoff carries it to another host (node/handoff.h): its times relative to
 * the sender's clock, so a host with another clock continues it.
 */
#define RL_ALGO_XLOG_MAX 1024u /* log entries one record carries; a longer log goes as its
                                  sliding_window_counter state (counts of two windows) */
struct rl_algo_xstate {
    uint8_t shape; /* enum rl_algo of the fields below: the tier's algorithm, or
                      SLIDING_WINDOW_COUNTER for a sliding_window_log degraded or too long */
    int64_t t_ms;  /* fixed_window, sliding_window_counter: ms from now until the end of the
                      state's window k (negative once it has ended); token_bucket, gcra,
                      leaky_bucket: ms from the last update until now (negative: the update
                      is later than now, a clock stepped back); sliding_window_log: unused */
    uint64_t v;    /* fixed_window: the count; sliding_window_counter: previous count << 32 |
                      current count; token_bucket: the deficit in 1/W token; gcra,
                      leaky_bucket: TAT*L - max(now, last update)*L, the deficit */
    uint32_t nlog; /* sliding_window_log: entries, oldest first, in age/cost */
    int64_t age[RL_ALGO_XLOG_MAX]; /* now - the entry's time */
    uint32_t cost[RL_ALGO_XLOG_MAX];
};

/*
 * Writes state s of tier t at now into *x. Returns 1 when s is full at now (nothing to send),
 * else 0. A sliding log is pruned at now first (a pure effect of time), as judging does.
 */
int rl_algo_export(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now,
                   struct rl_algo_xstate *x);

/*
 * The state of tier t at now (this host's clock) continuing x: *s (zeroed by the caller) as
 * if the key had been judged here all along, exact for the bucket algorithms and the logs;
 * the window algorithms' window k becomes the window of this clock whose end is nearest to
 * now + x->t_ms (exact while the clocks differ by less than half a window; the count then
 * expires with this host's window, earlier or later by the clock difference). A log takes
 * at most `room` heap bytes; one that cannot is built degraded. A time more than a window
 * ahead of now (no clock's step back: a bad record) is taken as one window ahead, so no
 * record freezes a key for longer. Returns 0, or -EINVAL when
 * x's shape does not fit t's algorithm or is out of range (then *s stays zero).
 */
int rl_algo_import(const struct rl_tier *t, const struct rl_algo_xstate *x, uint64_t now,
                   uint64_t room, struct rl_algo_state *s);

/* Frees what the state owns beyond its 16 bytes (a sliding log); leaves it zeroed. */
void rl_algo_release(const struct rl_tier *t, struct rl_algo_state *s);

/* True when a sliding_window_log state was degraded to a counter at the memory cap. */
bool rl_algo_degraded(const struct rl_tier *t, const struct rl_algo_state *s);

/* Heap bytes the state owns beyond its 16 bytes. */
uint64_t rl_algo_heap_bytes(const struct rl_tier *t, const struct rl_algo_state *s);

/*
 * concurrency (node/algo_conc.c, docs/ALGORITHMS.md "concurrency"): every rl_algo_* call above
 * serves it too (judge: N slots, each held for the tier's window, its lease; commit: takes
 * cost slots; adjust: changes nothing). These are its own: the slots held at now (leases
 * ended are freed first), and RELEASE: gives back up to count slots, the oldest held first,
 * returning how many it gave (fewer when fewer were held; 0 for a tier of another algorithm).
 * The rest are algo.c's dispatch targets.
 */
uint64_t rl_algo_conc_held(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now);
/* rl_algo_bound of a concurrency key: slots taken more than a lease ahead of now move back so
 * that the newest was taken a lease ahead (it then ends two leases from now at most). */
void rl_algo_conc_bound(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now);
uint64_t rl_algo_conc_release(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now,
                              uint64_t count);
void rl_algo_conc_judge(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now,
                        uint32_t cost, struct rl_algo_result *r);
int rl_algo_conc_commit(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now,
                        uint32_t cost, uint64_t room);
uint64_t rl_algo_conc_full_at(const struct rl_algo_state *s);
void rl_algo_conc_free(struct rl_algo_state *s);
uint64_t rl_algo_conc_heap_bytes(const struct rl_algo_state *s);
int rl_algo_conc_export(const struct rl_tier *t, struct rl_algo_state *s, uint64_t now,
                        struct rl_algo_xstate *x);
int rl_algo_conc_import(const struct rl_tier *t, const struct rl_algo_xstate *x, uint64_t now,
                        uint64_t room, struct rl_algo_state *s);

#endif
