/*
 * envoylive: the router's envoyproxy/ratelimit configuration while it runs (envoylive.h):
 * the local file's stat stamp polled on a libuv timer, SIGHUP, and the envoy znode, each
 * loaded whole on the main loop and handed to the workers through the apply callback. Not
 * for parsing (common/envoycfg*.c) nor for ZooKeeper's session (common/zkm.c).
 */
#include "envoylive.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoycfg.h"
#include "log.h"
#include "metrics.h"

struct rl_envoy_live {
    uv_timer_t timer;
    bool timing;
    char *path; /* "" when none */
    struct rl_envoy_opts eopts;
    void (*apply)(void *arg, struct rl_envoy_config *sh);
    void *arg;
    uint64_t stamp;                   /* the local path's, when last read or looked at */
    bool znode_active;                /* a pushed configuration is in force */
    int64_t znode_version;            /* its version */
    uint64_t loads_ok, loads_refused; /* configurations put in force, or refused, since start */
};

/* The local configuration: the path's, or an empty one when there is none. */
static int
load_local(struct rl_envoy_live *l, struct rl_envoy_config **ec, char *err, size_t errlen)
{
    if (l->path[0] == '\0') {
        struct rl_envoy_files none = {NULL, 0};

        return rl_envoy_parse_files(&none, &l->eopts, ec, err, errlen);
    }
    return rl_envoy_load(l->path, &l->eopts, ec, err, errlen);
}

/* Puts ec in force (taken). */
static int
put(struct rl_envoy_live *l, struct rl_envoy_config *ec)
{
    l->apply(l->arg, ec);
    rl_envoy_config_drop(ec);
    return 0;
}

/* Reads the local configuration again and puts it in force; what says why, for the log. */
static void
reload_local(struct rl_envoy_live *l, const char *what)
{
    struct rl_envoy_config *ec = NULL;
    char err[600];
    size_t nd, ns;

    l->stamp = l->path[0] != '\0' ? rl_envoy_stamp(l->path) : 0;
    if (load_local(l, &ec, err, sizeof(err)) != 0) {
        l->loads_refused++;
        rl_log_error("%s: [cluster] envoy_config not reloaded, the previous configuration "
                     "stays: %s",
                     what, err);
        return;
    }
    nd = ec->ndomains;
    ns = ec->ndescriptors;
    if (put(l, ec) != 0) {
        rl_log_error("%s: [cluster] envoy_config not reloaded: out of memory", what);
        l->loads_refused++;
        return;
    }
    l->loads_ok++;
    rl_log_info("%s: envoy_config %s reloaded: %zu domains, %zu descriptors", what,
                l->path[0] != '\0' ? l->path : "(none: empty)", nd, ns);
}

static void
on_poll(uv_timer_t *t)
{
    struct rl_envoy_live *l = t->data;
    uint64_t s = rl_envoy_stamp(l->path);

    if (s == l->stamp) {
        return;
    }
    if (l->znode_active) {
        l->stamp = s;
        rl_log_info("envoy_config %s changed: not applied, the configuration pushed to "
                    "ZooKeeper (znode version %" PRId64 ") is in force",
                    l->path, l->znode_version);
        return;
    }
    reload_local(l, "envoy_config changed");
}

int
rl_envoy_live_start(struct rl_envoy_live **out, uv_loop_t *loop,
                    const struct rl_envoy_live_opts *opts, struct rl_envoy_config **first,
                    char *err, size_t errlen)
{
    struct rl_envoy_live *l = calloc(1, sizeof(*l));
    struct rl_envoy_config *ec = NULL;

    *out = NULL;
    *first = NULL;
    if (l == NULL || (l->path = strdup(opts->path != NULL ? opts->path : "")) == NULL) {
        free(l);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    l->eopts.merge_domains = opts->merge_domains;
    l->apply = opts->apply;
    l->arg = opts->arg;
    l->znode_version = -1;
    l->stamp = l->path[0] != '\0' ? rl_envoy_stamp(l->path) : 0;
    if (load_local(l, &ec, err, errlen) != 0) {
        free(l->path);
        free(l);
        return -1;
    }
    *first = ec;
    uv_timer_init(loop, &l->timer);
    l->timer.data = l;
    if (l->path[0] != '\0') {
        uint32_t ms = opts->poll_ms != 0 ? opts->poll_ms : RL_ENVOY_POLL_MS;

        uv_timer_start(&l->timer, on_poll, ms, ms);
        uv_unref((uv_handle_t *)&l->timer);
        l->timing = true;
    }
    *out = l;
    return 0;
}

void
rl_envoy_live_znode(struct rl_envoy_live *l, const char *text, size_t len, int64_t version)
{
    struct rl_envoy_files fs;
    struct rl_envoy_config *ec = NULL;
    char what[64], err[600];
    size_t nd, ns;

    if (version < 0) {
        if (!l->znode_active) {
            return;
        }
        l->znode_active = false;
        l->znode_version = -1;
        reload_local(l, "envoy config znode deleted, back to the local envoy_config");
        return;
    }
    snprintf(what, sizeof(what), "envoy znode version %" PRId64, version);
    int rc = rl_envoy_unbundle(what, text, len, &fs, err, sizeof(err));
    if (rc == 0) {
        rc = rl_envoy_parse_files(&fs, &l->eopts, &ec, err, sizeof(err));
        rl_envoy_files_free(&fs);
    }
    if (rc != 0) {
        l->loads_refused++;
        rl_log_error("envoy config from ZooKeeper (znode version %" PRId64
                     ") refused, the previous configuration stays: %s",
                     version, err);
        return;
    }
    nd = ec->ndomains;
    ns = ec->ndescriptors;
    if (put(l, ec) != 0) {
        rl_log_error("envoy config from ZooKeeper (znode version %" PRId64
                     ") not applied: out of memory",
                     version);
        l->loads_refused++;
        return;
    }
    l->loads_ok++;
    l->znode_active = true;
    l->znode_version = version;
    rl_log_info("envoy config from ZooKeeper, znode version %" PRId64
                ", in force over the local envoy_config: %zu domains, %zu descriptors",
                version, nd, ns);
}

void
rl_envoy_live_hup(struct rl_envoy_live *l)
{
    if (l->znode_active) {
        rl_log_info("SIGHUP: envoy_config not reloaded: the configuration pushed to ZooKeeper "
                    "(znode version %" PRId64 ") is in force",
                    l->znode_version);
        return;
    }
    if (l->path[0] != '\0') {
        reload_local(l, "SIGHUP");
    }
}

const char *
rl_envoy_live_source(const struct rl_envoy_live *l, int64_t *version)
{
    *version = l->znode_active ? l->znode_version : -1;
    return l->znode_active ? "znode" : l->path[0] != '\0' ? "file" : "none";
}

void
rl_envoy_live_metrics(const struct rl_envoy_live *l, struct rl_prom *p)
{
    rl_prom_one(p, "rl_router_envoy_config_version", "gauge",
                "Where the envoy configuration in force came from: 0 the local envoy_config, "
                "else the envoy znode's version + 1",
                NULL, l->znode_active ? (uint64_t)l->znode_version + 1 : 0);
    rl_prom_family(p, "rl_router_envoy_config_reloads_total", "counter",
                   "Envoy configurations read since start (files changed, SIGHUP, the znode), "
                   "by result: ok (in force) or refused (the previous one stayed)");
    rl_prom_u64(p, "rl_router_envoy_config_reloads_total", "result=\"ok\"", l->loads_ok);
    rl_prom_u64(p, "rl_router_envoy_config_reloads_total", "result=\"refused\"", l->loads_refused);
}

static void
on_closed(uv_handle_t *h)
{
    struct rl_envoy_live *l = h->data;

    free(l->path);
    free(l);
}

void
rl_envoy_live_close(struct rl_envoy_live *l)
{
    if (l == NULL) {
        return;
    }
    uv_timer_stop(&l->timer);
    uv_close((uv_handle_t *)&l->timer, on_closed);
}
