/*
 * run: the state of one rl-rebalance run, shared by its modules: the options as given
 * (args.h), the configuration, where the new assignment goes, the ZooKeeper session, the
 * live members and the assignment in force (store.h), the log scan (logs.h) and the plan.
 * main.c fills it in order and each module reads what came before it; none of them calls
 * back into main.c. Also the tool's exit statuses (docs/REBALANCE.md). Declarations only.
 */
#ifndef RB_RUN_H
#define RB_RUN_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "assignment.h"
#include "conf.h"
#include "log.h"
#include "logscan.h"
#include "plan.h"
#include "shardmap.h"
#include "zkm.h"

#define RB_EXIT_OK 0
#define RB_EXIT_FAIL 1
#define RB_EXIT_USAGE 2
#define RB_EXIT_CONFLICT 3

#define RB_DEFAULT_TIMEOUT_MS 10000
#define RB_SMALL_FILE_MAX (RL_ZKM_DATA_MAX + 1) /* members and assignment files */

/* Where the new assignment goes. */
enum rb_target { RB_TARGET_NONE, RB_TARGET_ZK, RB_TARGET_FILE };

struct rb_opts {
    const char *config;
    const char *out;
    const char *members_file;
    const char *assignment_file;
    bool dry_run;
    bool rollback;
    bool quiet;
    bool ascii;
    double tolerance; /* a fraction: 0.05 */
    double budget;    /* a fraction: 1 = no cap */
    int timeout_ms;
    bool expect_set;
    int64_t expect_version; /* --expect-version: -1 for none */
    enum rl_log_level level;
    char **logs;
    int nlogs;
};

struct rb_run {
    struct rb_opts o;
    struct rl_conf *conf;
    enum rb_target target;
    bool utf8;
    const volatile sig_atomic_t *stop; /* set by SIGINT or SIGTERM */

    uv_loop_t loop;
    bool loop_ready;
    struct rl_zkm *zkm;

    struct rl_member *members;
    size_t nmembers;
    char members_from[128];

    struct rl_assignment current; /* the assignment in force (no overrides when none) */
    char *cur_text;               /* its text as read, or NULL */
    size_t cur_len;
    int64_t version; /* the znode's version when read from ZooKeeper, else -1 */
    char assignment_from[128];

    struct rl_logscan *scan;
    double scan_secs;
    struct rl_plan plan;
    bool have_plan;
};

#endif
