/*
 * envoylive: where rl-router's envoyproxy/ratelimit configuration comes from while it runs
 * (docs/ENVOY.md, "Changing the configuration live"): the local [cluster] envoy_config (file
 * or directory), read again when a cheap stat(2) stamp of it changes or on SIGHUP, and the
 * envoy znode that `rl-cli envoy push` writes, which takes precedence over the local file
 * while it exists. Each new configuration is loaded whole on the main loop and handed to the
 * workers (rl_rproc_set_envoy); one that does not load is logged as FILE:LINE and the
 * previous one stays. Not for parsing (common/envoycfg.h) nor for serving (rls_call.c).
 */
#ifndef RL_ENVOYLIVE_H
#define RL_ENVOYLIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "envoycfg.h"

/* How often the local file's stamp is taken. */
#define RL_ENVOY_POLL_MS 1000u

struct rl_envoy_live_opts {
    const char *path;   /* [cluster] envoy_config; "" or NULL: none (an empty configuration,
                           every domain unknown, until one is pushed) */
    bool merge_domains; /* [cluster] envoy_merge_domains */
    uint32_t poll_ms;   /* the stamp's period; 0: RL_ENVOY_POLL_MS */
    /* A new configuration to put in force (the callee takes its own hold). */
    void (*apply)(void *arg, struct rl_envoy_config *sh);
    void *arg;
};

struct rl_envoy_live;

/*
 * Loads the local configuration (the path's, or an empty one) and starts watching the path.
 * 0 with *out set and *first the configuration to start with (one hold, the caller's); -1
 * with one line in err (the loader's FILE:LINE) and nothing started.
 */
int rl_envoy_live_start(struct rl_envoy_live **out, uv_loop_t *loop,
                        const struct rl_envoy_live_opts *opts, struct rl_envoy_config **first,
                        char *err, size_t errlen);

/* The envoy znode changed: its bundle (text, len) and data version, or version -1 when it
 * does not exist (then the local configuration is put back in force). */
void rl_envoy_live_znode(struct rl_envoy_live *l, const char *text, size_t len, int64_t version);

/* SIGHUP: reads the local configuration again (applied unless a pushed one is in force). */
void rl_envoy_live_hup(struct rl_envoy_live *l);

/* Where the configuration in force came from: "file", "znode" or "none"; and the znode's
 * version when it is "znode" (-1 otherwise). */
const char *rl_envoy_live_source(const struct rl_envoy_live *l, int64_t *version);

struct rl_prom;

/* /metrics, on the main loop: rl_router_envoy_config_version (0: the local files; a pushed
 * configuration: its znode version + 1) and rl_router_envoy_config_reloads_total{result}. */
void rl_envoy_live_metrics(const struct rl_envoy_live *l, struct rl_prom *p);

/* Stops watching; the memory goes once the loop has closed the timer. NULL is a no-op. */
void rl_envoy_live_close(struct rl_envoy_live *l);

#endif
