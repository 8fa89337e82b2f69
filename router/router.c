/*
 * router: the router's life cycle. Creating one allocates its pending slab (pending.c),
 * opens the request log and starts listening for clients (session.c); closing it stops
 * listening, closes every connection, its timers and the log, and frees it once the last
 * handle's close callback ran. What it does in between is in the files router_int.h lists.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "front.h"
#include "reqlog.h"
#include "resp_front.h"
#include "rls_front.h"
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
router_handle_closed(uv_handle_t *h)
{
    struct rl_router *r = h->data;

    r->handles--;
    rl_router_maybe_free(r);
}

static void
router_connq_closed(void *data)
{
    struct rl_router *r = data;

    r->handles--;
    rl_router_maybe_free(r);
}

static void
router_listener_closed(struct rl_listener *l)
{
    struct rl_router *r = l->data;

    r->handles--;
    rl_router_maybe_free(r);
}

void
rl_router_maybe_free(struct rl_router *r)
{
    if (!r->closing || r->handles > 0) {
        return;
    }
    rl_table_deinit(r);
    rl_pending_deinit(r);
    rl_shed_deinit(r);
    rl_front_free(r);
    rl_rls_front_free(r->rls);
    rl_resp_free(r->resp);
    free(r->rule_codes);
    rl_wire_decoder_deinit(&r->dec);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

int
rl_router_adopt(struct rl_router *r, uv_os_sock_t fd)
{
    if (r->closing) {
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
    r->loop = loop;
    r->conf = conf;
    r->opts = *opts;
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
    r->resp = rl_resp_new();
    r->rls = rl_rls_front_new(opts->envoy);
    r->rule_codes = calloc(conf->nrules + 1, sizeof(*r->rule_codes));
    r->rule_rows = conf->nrules + 1;
    r->unowned = conf->shards;
    rc = r->rule_codes != NULL && r->resp != NULL && r->rls != NULL
             ? rl_pending_init(r, r->opts.max_pending)
             : -ENOMEM;
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
    rl_connq_set_tls(&r->connq, opts->tls_server, opts->tls_client);
    uv_timer_init(loop, &r->deadline_timer);
    r->deadline_timer.data = r;
    uv_timer_init(loop, &r->retire_timer);
    r->retire_timer.data = r;
    uv_timer_init(loop, &r->hot_timer);
    r->hot_timer.data = r;
    if (r->hot != NULL) {
        uv_timer_start(&r->hot_timer, rl_shed_publish_fire, RL_SHED_PUBLISH_MS,
                       RL_SHED_PUBLISH_MS);
        uv_unref((uv_handle_t *)&r->hot_timer);
    }
    /* the flusher, the deadline, retire and hot-key timers, the listener with its clients */
    r->handles = 5;
    pthread_mutex_init(&r->mu, NULL);
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
    rl_resp_free(r->resp);
    rl_rls_front_free(r->rls);
    free(r);
    return rc;
}

void
rl_router_close(struct rl_router *r)
{
    if (r->closing) {
        return;
    }
    r->closing = true;
    uv_close((uv_handle_t *)&r->deadline_timer, router_handle_closed);
    uv_close((uv_handle_t *)&r->retire_timer, router_handle_closed);
    uv_close((uv_handle_t *)&r->hot_timer, router_handle_closed);
    rl_health_close(r);
    rl_listener_close(&r->listener, router_listener_closed);
    rl_front_close_all(r);
    rl_rls_front_close(r);
    rl_table_close(r);
    /* Whatever is still pending has no client left to answer (all closed above). */
    rl_pending_drain(r);
    if (r->log != NULL && !r->log_shared) {
        rl_reqlog_close(r->log);
    }
    r->log = NULL;
    rl_connq_close(&r->connq, router_connq_closed, r);
}
