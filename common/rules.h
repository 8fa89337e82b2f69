/*
 * rules: changing the [service] rules of a running rl-node or rl-router (docs/OPERATIONS.md,
 * "Changing rules live"), the part both share: where new rules come from (the --config file
 * on SIGHUP, or the rules znode of ZooKeeper, which takes precedence once it exists), how
 * they are checked (whole, or not at all), the swap into the live conf, the version and the
 * counters STATS reports, and the log lines. What depends on the rules (a node's limiter, a
 * router's requests in flight) is the program's: it is told through apply. Called on the loop
 * thread only; the parse of new rules (the file read, the check, the index and the digest:
 * O(services)) runs on libuv's thread pool, the swap back on the loop (docs/OPERATIONS.md).
 * Not for parsing (conf.h) nor for ZooKeeper itself (zkm.h).
 */
#ifndef RL_RULES_H
#define RL_RULES_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"

struct uv_loop_s;
struct rl_rules_job;

struct rl_rules {
    struct rl_conf *conf; /* the live conf, whose rules change in place */
    const char *path;     /* the --config file, for SIGHUP */
    struct rl_rules_status st;
    /*
     * The rules of conf have just changed: switch what depends on them. *old holds the
     * rules replaced; the callback may keep it (set *old to NULL, and destroy it once
     * nothing points into it), else it is destroyed on return. A negative errno puts the
     * old rules back (counted as a failure).
     */
    int (*apply)(void *arg, struct rl_conf **old);
    void *arg;
    /* The parse off the loop: one at a time; what comes meanwhile waits, the newest znode
     * text only (it supersedes an older one that waits) and a SIGHUP, the znode's first. */
    struct uv_loop_s *loop;       /* NULL: parsed on the caller's thread (tests) */
    struct rl_rules_job *job;     /* the parse in flight, if any */
    struct rl_rules_job *next_zk; /* the newest znode text waiting for it */
    bool next_file;               /* a SIGHUP waiting for it */
    /* Optional (NULL: none): held while the rules of conf are swapped and apply runs, for
     * readers on other threads (a router's workers, whose metrics another thread sums). */
    pthread_mutex_t *lock;
    bool closed;
};

/* Starts at version 0 (the config file) with conf's digest. New rules are parsed on loop's
 * thread pool (NULL: on the caller's thread, before the call returns). */
void rl_rules_init(struct rl_rules *r, struct uv_loop_s *loop, struct rl_conf *conf,
                   const char *path, int (*apply)(void *arg, struct rl_conf **old), void *arg);

/*
 * The process stops: a parse in flight is dropped (its result freed when the thread pool is
 * done with it, which the loop waits for: keep running the loop) and nothing waiting starts.
 * Idempotent; apply is never called again.
 */
void rl_rules_close(struct rl_rules *r);

/*
 * SIGHUP: reads the --config file again and puts its [service] sections in force (nothing
 * else of it: other sections need a restart, which the log line says). When the rules come
 * from ZooKeeper (version > 0) it only says so. A file that does not load is refused whole,
 * with its FILE:LINE error logged; the rules in force stay. The read and parse run off the
 * loop, after any parse in flight; the swap follows on the loop. Returns 0, or a negative
 * errno when the reload could not even start (logged and counted as a failure).
 */
int rl_rules_reload_file(struct rl_rules *r);

/*
 * The rules znode changed (zkm's on_rules): text[0..len) at data version `version`, or
 * version -1 when there is none. A new version is parsed as a rules file and put in force
 * (rules_version = version + 1); one that does not parse is refused whole (logged with its
 * line, counted in failures) and the rules in force stay. A znode that goes keeps the rules
 * in force: once pushed, the znode's last rules stay authoritative until a restart. Parsed off
 * the loop as rl_rules_reload_file; a newer version that comes meanwhile replaces an older
 * one still waiting, so the newest wins.
 */
void rl_rules_from_zk(struct rl_rules *r, const char *text, size_t len, int64_t version);

struct rl_prom;
/* Appends the rl_rules_* metric families (metrics.h) of st; NULL: rules from the config
 * file, never reloaded. */
void rl_rules_metrics(const struct rl_rules_status *st, uint64_t digest, struct rl_prom *p);

#endif
