/*
 * router: the router's life cycle, the assembly of its files. Creating one allocates its
 * pending slab (pending.c, its expiry given forward.c's failure policy), installs the
 * upstreams' callbacks (forward.c), joins its worker group (or makes a group of one), opens
 * the request log and starts listening for clients (session.c); closing it stops listening,
 * closes every connection, its timers and the log, and frees it once the last handle's close
 * callback ran (router_int.h's lifetime rule: on_unheld). What it does in between is in the
 * files router_int.h lists.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "front.h"
#include "log.h"
#include "reqlog.h"
#include "router_int.h"

const struct rl_rules_status *
rl_router_rules_status(const struct rl_router *r)
{
    return r->opts.rules;
}

void
rl_router_reopen_log(struct rl_router *r)
{
    if (r->log != NULL && !r->log_shared) {
        rl_reqlog_reopen(r->log);
    }
}

static void
router_connq_closed(void *data)
{
    rl_router_unhold(data);
}

static void
router_listener_closed(struct rl_listener *l)
{
    rl_router_unhold(l->data);
}

/* The workers r is one of (opts->group), or a group of one: itself. */
static void
router_group(struct rl_router *r, const struct rl_router_opts *opts)
{
    static const uint64_t none;

    if (opts->group != NULL) {
        r->group = opts->group;
        r->worker = opts->worker;
        return;
    }
    r->alone_routers[0] = r;
    r->alone.n = 1;
    r->alone.routers = r->alone_routers;
    r->alone.accept_errors = &none;
    r->alone.zk_expiries = &r->zk_expiries;
    r->group = &r->alone;
}

/* pending.c's expiry: a request past its deadline gets its failure policy (forward.c); its
 * node may still answer it late. */
static void
router_expired(struct rl_router *r, struct rl_pending *p)
{
    rl_forward_fail(r, p, true);
}

/* r's on_unheld: closing, its last handle closed (router_int.h's lifetime rule). */
static void
router_free(struct rl_router *r)
{
    void (*on_freed)(void *arg);
    void *arg;

    rl_table_deinit(r);
    rl_pending_deinit(r);
    rl_shed_deinit(r);
    rl_front_free(r);
    rl_envoy_config_drop(r->envoy);
    free(r->rule_codes);
    rl_wire_decoder_deinit(&r->dec);
    pthread_mutex_destroy(&r->mu);
    on_freed = r->opts.on_freed;
    arg = r->opts.arg;
    free(r);
    if (on_freed != NULL) {
        on_freed(arg);
    }
}

int
rl_router_adopt(struct rl_router *r, uv_os_sock_t fd)
{
    if (r->closing || r->draining) {
        return UV_ECANCELED;
    }
    return rl_listener_adopt(&r->listener, fd);
}

int
rl_router_create(struct rl_router **out, uv_loop_t *loop, const struct rl_conf *conf,
                 const struct rl_router_opts *opts)
{
    struct rl_router *r;
    int rc;

    r = calloc(1, sizeof(*r));
    if (r == NULL || rl_wire_decoder_init(&r->dec) != 0) {
        free(r);
        return -ENOMEM;
    }
    r->dec.no_clock = true; /* never a router's op: UNKNOWN_OP whatever its elements */
    r->loop = loop;
    r->conf = conf;
    r->opts = *opts;
    r->envoy = opts->envoy;
    if (r->envoy != NULL) {
        rl_envoy_config_hold(r->envoy);
    }
    router_group(r, opts);
    if (r->opts.limits.max_connections == 0) {
        r->opts.limits = rl_conn_limits_default();
    }
    r->opts.limits.router_reserve = 0; /* a router's clients are applications */
    if (r->opts.max_pending == 0 || r->opts.max_pending > ROUTER_PENDING_MAX) {
        r->opts.max_pending = 262144;
    }
    snprintf(r->name, sizeof(r->name), "%s", opts->name);
    rl_gate_init(&r->gate, conf, RL_GATE_ROUTER);
    rl_gate_limits(&r->gate, &r->opts.limits);
    r->zk_state = RL_ROUTER_ZK_NONE;
    r->view.asg_version = -1;
    r->rule_codes = calloc(conf->nrules + 1, sizeof(*r->rule_codes));
    r->rule_rows = conf->nrules + 1;
    r->unowned = conf->shards;
    rc = r->rule_codes != NULL ? rl_front_init(r) : -ENOMEM;
    if (rc == 0) {
        rc = rl_pending_init(r, r->opts.max_pending, router_expired, rl_forward_resend);
    }
    if (rc == 0) {
        rc = rl_shed_init(r);
    }
    if (rc != 0) {
        goto fail;
    }
    if (opts->log != NULL) {
        r->log = opts->log;
        r->log_shared = true;
    } else if (conf->request_log != NULL && conf->request_log[0] != '\0') {
        rc = rl_reqlog_create(&r->log, loop, conf->request_log, conf->log_sample);
        if (rc != 0) {
            goto fail;
        }
        rl_reqlog_set_rotation(r->log, conf->log_max_size, conf->log_keep);
    }
    rc = rl_connq_init(&r->connq, loop);
    if (rc != 0) {
        goto fail;
    }
    r->on_unheld = router_free;
    r->up_ops.on_reply = rl_forward_on_reply;
    r->up_ops.on_lost = rl_forward_on_lost;
    r->up_ops.on_batch = rl_forward_on_batch;
    r->up_ops.on_room = rl_forward_on_room;
    r->up_ops.arg = r;
    rl_router_hold(r);
    rl_connq_set_tls(&r->connq, opts->tls_server, opts->tls_client);
    uv_timer_init(loop, &r->deadline_timer);
    r->deadline_timer.data = r;
    rl_router_hold(r);
    uv_timer_init(loop, &r->retire_timer);
    r->retire_timer.data = r;
    rl_router_hold(r);
    uv_timer_init(loop, &r->held_timer);
    r->held_timer.data = r;
    rl_router_hold(r);
    uv_timer_init(loop, &r->hot_timer);
    r->hot_timer.data = r;
    rl_router_hold(r);
    uv_timer_init(loop, &r->drain_timer);
    r->drain_timer.data = r;
    rl_router_hold(r);
    if (r->hot != NULL) {
        uv_timer_start(&r->hot_timer, rl_shed_publish_fire, RL_SHED_PUBLISH_MS,
                       RL_SHED_PUBLISH_MS);
        uv_unref((uv_handle_t *)&r->hot_timer);
    }
    pthread_mutex_init(&r->mu, NULL);
    rl_router_hold(r); /* the listener, closed by rl_router_close even if it did not start */
    rc = rl_listener_start(&r->listener, &r->connq, opts->adopt ? NULL : opts->host, opts->port,
                           &rl_session_ops,
                           sizeof(struct rl_cconn), &r->opts.limits, r);
    if (rc != 0) {
        rl_router_close(r);
        return rc;
    }
    *out = r;
    return 0;

fail:
    if (r->log != NULL && !r->log_shared) {
        rl_reqlog_close(r->log);
    }
    rl_pending_deinit(r);
    rl_shed_deinit(r);
    rl_wire_decoder_deinit(&r->dec);
    free(r->rule_codes);
    rl_front_free(r);
    rl_envoy_config_drop(r->envoy);
    free(r);
    return rc;
}

void
rl_router_set_envoy(struct rl_router *r, struct rl_envoy_config *cfg)
{
    struct rl_envoy_config *old = r->envoy;

    if (cfg != NULL) {
        rl_envoy_config_hold(cfg);
    }
    r->envoy = cfg;
    rl_envoy_config_drop(old);
}

/* The drain ends when nothing forwarded waits for its answer, every binary client has
 * written its answers and closed, and no front connection holds requests it read and did not
 * answer (a RESP pipeline's commands waiting for a slot) nor answers not yet written, or at
 * its end. */
static void
router_drain_tick(uv_timer_t *t)
{
    struct rl_router *r = t->data;

    if ((r->npending > 0 || r->listener.conns != NULL || rl_front_unanswered(r)) &&
        uv_now(r->loop) < r->drain_end) {
        return;
    }
    uv_timer_stop(t);
    if (r->npending > 0 || r->listener.conns != NULL) {
        rl_log_warn("stopping: %" PRIu32 " request(s) still unanswered after the drain", r->npending);
    }
    r->drain_done(r->drain_arg);
}

void
rl_router_drain(struct rl_router *r, void (*done)(void *arg), void *arg)
{
    if (r->closing || r->draining) {
        return;
    }
    r->draining = true;
    r->drain_done = done;
    r->drain_arg = arg;
    r->drain_end = uv_now(r->loop) + (r->conf->deadline_ms < RL_ROUTER_DRAIN_MAX_MS
                                          ? r->conf->deadline_ms
                                          : RL_ROUTER_DRAIN_MAX_MS) +
                   RL_ROUTER_DRAIN_GRACE_MS;
    rl_listener_finish(&r->listener);
    rl_front_drain(r);
    uv_timer_start(&r->drain_timer, router_drain_tick, RL_ROUTER_DRAIN_TICK_MS,
                   RL_ROUTER_DRAIN_TICK_MS);
}

void
rl_router_close(struct rl_router *r)
{
    if (r->closing) {
        return;
    }
    r->closing = true;
    uv_close((uv_handle_t *)&r->drain_timer, rl_router_handle_closed);
    uv_close((uv_handle_t *)&r->deadline_timer, rl_router_handle_closed);
    uv_close((uv_handle_t *)&r->retire_timer, rl_router_handle_closed);
    uv_close((uv_handle_t *)&r->held_timer, rl_router_handle_closed);
    uv_close((uv_handle_t *)&r->hot_timer, rl_router_handle_closed);
    rl_health_close(r);
    rl_listener_close(&r->listener, router_listener_closed);
    rl_front_close_all(r);
    rl_table_close(r);
    /* Whatever is still pending has no client left to answer (all closed above). */
    rl_pending_drain(r);
    if (r->log != NULL && !r->log_shared) {
        rl_reqlog_close(r->log);
    }
    r->log = NULL;
    rl_connq_close(&r->connq, router_connq_closed, r);
}
