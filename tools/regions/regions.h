/*
 * rl-regions (docs/REGIONS.md): the reconciliation of global limits across regional clusters.
 * One run reads every region (its slices znode and its router's hot keys of each global
 * service: the users to plan), measures each user's allowed work in every region (a cost-0
 * CHECK through its router: what the node counted as consumed, never the requests it
 * refused), plans the next slices from that (plan.c), reports, and writes them into every
 * region's ZooKeeper by compare-and-set in two phases (store.c): first every slice lowered to
 * the smaller of old and new, then the new ones, so the slices in force never sum past the
 * global limit while the writes land one region after the other. Not for judging (the
 * nodes do it) nor for the command line (main.c).
 */
#ifndef RG_REGIONS_H
#define RG_REGIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "conf.h"
#include "slices.h"
#include "zkm.h"

#define RG_SERVICES_MAX 256 /* global services reconciled */
#define RG_EXIT_OK 0
#define RG_EXIT_FAIL 1    /* nothing written (a usage or configuration error, no memory) */
#define RG_EXIT_PARTIAL 2 /* a region could not be reached: it keeps its last slices */
#define RG_EXIT_CHANGED 3 /* compare-and-set refused a write: slices changed since read */

struct rl_tls_ctx;

struct rg_opts {
    const char *configs[RL_CONF_REGIONS_MAX];
    size_t nconfigs;
    uint32_t floor;       /* thousandths an idle region keeps of an active user's limit */
    uint64_t min_count;   /* a hot key with fewer requests lately is left at the default */
    uint32_t top;         /* hot keys asked of each router per service */
    int timeout_ms;       /* per region: ZooKeeper session and router */
    uint64_t interval_ms; /* 0: once */
    uint64_t hold_ms;     /* wait between reading and writing (tests, demonstrations) */
    uint64_t settle_ms;   /* wait between the phases, for the nodes to apply phase one */
    bool dry_run;
    bool rollback;
    bool quiet;
};

/* One hot key a router listed: its count of requests lately (docs/PROTOCOL.md, "HOT"). */
struct rg_hot {
    uint32_t svc;
    char *user;
    size_t ulen;
    uint64_t count, err;
};

struct rg_region {
    const char *config_path;
    struct rl_conf *conf;
    const char *name;
    uint32_t default_slice; /* its weight's share, thousandths */
    char router[160];       /* host:port of its router */
    struct rl_tls_ctx *tls; /* its [cluster] tls_* as a client's, or NULL: plain TCP */
    /* one run's */
    uv_loop_t loop;
    bool loop_ready;
    struct rl_zkm *zkm;
    bool reachable;
    char why[256];
    char *old_text;
    size_t old_len;
    int64_t version; /* of the slices znode as read; -1 none */
    struct rl_slices *old;
    char *prev_text; /* --rollback: slices.prev */
    size_t prev_len;
    char *new_text; /* the target */
    size_t new_len;
    uint64_t demand[RG_SERVICES_MAX]; /* the users' allowed work (rg_user), summed per service */
    struct rg_hot *hot;               /* the router's hot keys of the global services */
    size_t nhot;
};

/* One (service, user) whose slices are planned. */
struct rg_user {
    uint32_t svc;
    char *user;
    size_t ulen;
    /* allowed work in each region: the part of its slice in use now (consumed, as the
     * owner node counts it, in millionths of the global limit), 0 where unmeasured */
    uint64_t demand[RL_CONF_REGIONS_MAX];
    uint32_t old[RL_CONF_REGIONS_MAX];
    uint32_t slice[RL_CONF_REGIONS_MAX];
    bool line; /* has user lines in the plan (else the service's slice) */
};

struct rg_run {
    struct rg_opts o;
    struct rg_region r[RL_CONF_REGIONS_MAX];
    size_t n;
    char *services[RG_SERVICES_MAX];
    size_t nservices;
    struct rg_user *users;
    size_t nusers, users_cap;
    uint64_t generation;
};

/* plan.c */
int rg_load(struct rg_run *run);  /* the configs: regions, global services */
void rg_select(struct rg_run *run); /* the users to plan, and their slices now */
void rg_plan(struct rg_run *run);   /* users' slices from their allowed work */
int rg_texts(struct rg_run *run); /* every reachable region's new text */
void rg_report(const struct rg_run *run);
int rg_add_user(struct rg_run *run, uint32_t svc, const char *user, size_t ulen);
char *rg_min_text(const struct rg_run *run, const struct rg_region *g, size_t *len);

/* store.c */
void rg_read(struct rg_run *run);    /* each region: slices (and prev), hot keys */
void rg_measure(struct rg_run *run); /* each region: the users' allowed work (cost-0 CHECKs) */
int rg_write(struct rg_run *run);  /* the two phases; an RG_EXIT_* */
void rg_close(struct rg_run *run); /* sessions and what one run read */
void rg_free(struct rg_run *run);

int rg_say(const struct rg_run *run, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
