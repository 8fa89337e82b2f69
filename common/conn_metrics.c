/*
 * conn_metrics: the rl_connection* metric families of a listener (conn.h), its writer in
 * metrics.h's sense, apart from conn.c and conn_listen.c so the connection module does not
 * pull in the metrics server (libmicrohttpd): librlclient is built from them without it.
 */
#include "conn.h"
#include "metrics.h"

void
rl_listener_metrics(const struct rl_listener *l, struct rl_prom *p)
{
    struct rl_listener_stats s;

    rl_listener_stats(l, &s);
    rl_listener_metrics_of(&s, p);
}

void
rl_listener_metrics_of(const struct rl_listener_stats *st, struct rl_prom *p)
{
    char lab[64];

    rl_prom_family(p, "rl_connections", "gauge",
                   "Client connections open now (routers' connections included).");
    rl_prom_u64(p, "rl_connections", NULL, st->connections);
    rl_prom_family(p, "rl_router_connections", "gauge",
                   "Connections open now that said HELLO as a router.");
    rl_prom_u64(p, "rl_router_connections", NULL, st->routers);
    rl_prom_family(p, "rl_connection_peers", "gauge", "Distinct client addresses connected now.");
    rl_prom_u64(p, "rl_connection_peers", NULL, st->peers);
    rl_prom_family(p, "rl_connections_accepted_total", "counter", "Connections accepted.");
    rl_prom_u64(p, "rl_connections_accepted_total", NULL, st->connections_total);
    rl_prom_family(p, "rl_connections_refused_total", "counter",
                   "Connections refused, by limit: max_connections, max_connections_per_peer, "
                   "buffer_memory.");
    rl_prom_u64(p, "rl_connections_refused_total",
                rl_prom_labels(lab, sizeof(lab), "limit", "max_connections", NULL),
                st->refused_max);
    rl_prom_u64(p, "rl_connections_refused_total",
                rl_prom_labels(lab, sizeof(lab), "limit", "max_connections_per_peer", NULL),
                st->refused_peer);
    rl_prom_u64(p, "rl_connections_refused_total",
                rl_prom_labels(lab, sizeof(lab), "limit", "buffer_memory", NULL),
                st->refused_buffers);
    rl_prom_family(p, "rl_connections_closed_total", "counter",
                   "Connections closed by this process, by reason: protocol (after a protocol "
                   "error), idle (idle_timeout), frame_timeout.");
    rl_prom_u64(p, "rl_connections_closed_total",
                rl_prom_labels(lab, sizeof(lab), "reason", "protocol", NULL), st->protocol_closes);
    rl_prom_u64(p, "rl_connections_closed_total",
                rl_prom_labels(lab, sizeof(lab), "reason", "idle", NULL), st->idle_closes);
    rl_prom_u64(p, "rl_connections_closed_total",
                rl_prom_labels(lab, sizeof(lab), "reason", "frame_timeout", NULL),
                st->frame_timeouts);
    rl_prom_family(p, "rl_accept_errors_total", "counter",
                   "accept(2) failures (out of file descriptors).");
    rl_prom_u64(p, "rl_accept_errors_total", NULL, st->accept_errors);
    rl_prom_family(p, "rl_connection_buffer_bytes", "gauge",
                   "Memory held by client connection buffers now.");
    rl_prom_u64(p, "rl_connection_buffer_bytes", NULL, st->buffer_bytes);
}
