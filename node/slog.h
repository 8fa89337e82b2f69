/*
 * slog: the log behind sliding_window_log: the (time, cost) of the requests one key was
 * allowed, oldest first, in a ring buffer of 8-byte entries (a 32-bit offset from a base time
 * and a 32-bit cost) that doubles when full and halves when a quarter full. Entries with the
 * same time are merged, and entries are dropped once out of the window, so a log never holds
 * more than min(L, W) entries. Not for deciding anything (algo.c judges with it).
 *
 * A NULL log is an empty one. Every function that takes a time first treats it as
 * max(time, latest time the log has seen), so a clock that steps back never revives entries
 * that already left the window.
 */
#ifndef RL_SLOG_H
#define RL_SLOG_H

#include <stdbool.h>
#include <stdint.h>

/* Bounds of the ring: entries (a power of two). 2^31 entries are 16 GiB: a memory cap stops
 * a log long before that. */
#define RL_SLOG_MIN_CAP 4u
#define RL_SLOG_MAX_CAP (1u << 31)

struct rl_slog;

/* Heap bytes the log holds (0 for NULL). */
uint64_t rl_slog_bytes(const struct rl_slog *g);

/*
 * Moves the log to max(now, its latest time) and drops the entries with a time at or before
 * that minus window_ms. Returns the time used. A pure effect of time: what the log decides
 * afterwards is what it would have decided anyway.
 */
uint64_t rl_slog_prune(struct rl_slog *g, uint64_t now, uint32_t window_ms);

/*
 * A clock stepped back by more than a window: when the latest time the log has seen lies
 * more than window_ms ahead of now, moves every entry (and that time) back by the same
 * amount, so that it lies window_ms ahead. Returns that amount, 0 when nothing moved (or g
 * is NULL). Costs and their spacing are kept: nothing is given back, only when.
 */
uint64_t rl_slog_bound(struct rl_slog *g, uint64_t now, uint32_t window_ms);

/* Total cost of the entries held. */
uint64_t rl_slog_sum(const struct rl_slog *g);

/* Total cost of the entries at or after time t. */
uint64_t rl_slog_sum_since(const struct rl_slog *g, uint64_t t);

/* Whether the log holds entries, and the time of the newest one. */
bool rl_slog_newest(const struct rl_slog *g, uint64_t *t);

/*
 * The time of the entry at which the costs summed from the oldest first reach need
 * (1 <= need <= rl_slog_sum): once that entry has left the window, at least need is freed.
 */
uint64_t rl_slog_reach(const struct rl_slog *g, uint64_t need);

/*
 * Appends (t, cost), t at or after every time the log has seen (rl_slog_prune's result), cost
 * >= 1, merging with the newest entry when it has the same time. *gp may be NULL (a new log is
 * allocated) and may move. The log grows only if that costs at most `room` more heap bytes and
 * malloc succeeds; otherwise the cost is added to the newest entry (counted, but it leaves
 * the window early: errs toward allowing). A log holds at most 2^32 - 1 (its running totals
 * are 32-bit): a cost past that is cut to fit, and once it is full nothing more is logged
 * (a log of a CHECK holds at most L < 2^32 and of an ADJUST at most RL_ALGO_DEBT_MAX, so
 * only a bad handoff record asks for more; the cut log still refuses every request). Returns
 * 0 when logged exactly (or nothing was left to log), 1 when folded, or -ENOMEM when nothing
 * could be logged (no log and none could be allocated).
 * It may also shrink a log that is three quarters empty.
 */
int rl_slog_append(struct rl_slog **gp, uint64_t t, uint32_t cost, uint64_t room);

/* Entries held (merged ones count once), and entry i (0: the oldest) as its time and cost:
 * what a handoff record carries (node/handoff.h). */
uint32_t rl_slog_len(const struct rl_slog *g);
void rl_slog_get(const struct rl_slog *g, uint32_t i, uint64_t *t, uint32_t *cost);

/*
 * g's entries, oldest first, as at most max (>= 1) into age[] (now - the entry's time,
 * negative when later than now) and cost[]: what a handoff record carries. A longer log has
 * its consecutive entries merged in max groups, each at its newest entry's time with the
 * group's costs summed (saturating at UINT32_MAX): every cost is carried and none ends
 * earlier than in g (a part may end later, by at most its group's span). Returns how many.
 */
uint32_t rl_slog_export(const struct rl_slog *g, uint64_t now, uint32_t max, int64_t *age,
                        uint32_t *cost);

/* Takes up to amount off the newest entries (the newest first, dropping those emptied): a
 * refund (ADJUST). Returns what it took. */
uint64_t rl_slog_take(struct rl_slog *g, uint64_t amount);

/* Takes up to amount off the oldest entries (the oldest first, dropping those emptied): a
 * concurrency RELEASE. Returns what it took. */
uint64_t rl_slog_take_oldest(struct rl_slog *g, uint64_t amount);

/* A copy (tests probe future times on copies); NULL for NULL or when malloc fails. */
struct rl_slog *rl_slog_dup(const struct rl_slog *g);

void rl_slog_destroy(struct rl_slog *g);

#endif
