/*
 * connlimits: what a listener allows its clients (cluster.conf's [clients] section, read by
 * conf_keys.c and enforced by conn_listen.c). One plain struct so the config parser needs no libuv.
 * docs/CONFIG.md and docs/OPERATIONS.md ("Limits on clients") describe each field.
 */
#ifndef RL_CONNLIMITS_H
#define RL_CONNLIMITS_H

#include <stdbool.h>
#include <stdint.h>

#define RL_CONN_DEFAULT_MAX_CONNECTIONS 10000u
#define RL_CONN_DEFAULT_MAX_PER_PEER 1000u
#define RL_CONN_DEFAULT_ROUTER_RESERVE 64u
#define RL_CONN_DEFAULT_IDLE_TIMEOUT_MS (300u * 1000u)
#define RL_CONN_DEFAULT_FRAME_TIMEOUT_MS (10u * 1000u)
#define RL_CONN_DEFAULT_BUFFER_MEMORY (256ull * 1024 * 1024)
#define RL_CONN_DEFAULT_AUTH_TIMEOUT_MS (5u * 1000u)
/* The TLS handshake gate (conn.h, rl_connq_hs_*): handshakes in progress at once from one
 * address and on one loop (a router's worker), and a loop turn's handshake budget. */
#define RL_CONN_DEFAULT_TLS_PER_PEER 64u
#define RL_CONN_DEFAULT_TLS_HANDSHAKES 1024u
#define RL_CONN_HS_TURN_STEPS 8u
#define RL_CONN_HS_TURN_US 2000u
/* and the share of a loop's time handshakes may take over time (percent of wall time: a
 * loop spinning through short turns still spends at most this much on handshakes) */
#define RL_CONN_HS_SHARE_PCT 20u

struct rl_conn_limits {
    uint32_t max_connections;  /* client connections open at once */
    uint32_t max_per_peer;     /* client connections open at once from one IP address */
    uint32_t router_reserve;   /* further connections only routers (HELLO) may take: nodes */
    uint64_t idle_timeout_ms;  /* closed after this long without progress; 0: never */
    uint64_t frame_timeout_ms; /* a frame must be complete this long after its first byte */
    uint64_t buffer_memory;    /* bytes of buffers of every client connection together */
    uint64_t auth_timeout_ms;  /* a connection that must AUTH is closed this long after
                                  accept without it; 0: the default */
    bool auth_required;        /* the owner's gate wants AUTH first: until then a connection
                                  is pre-AUTH (conn.h); set by the owner, not the config */
};

/* The defaults above. */
static inline struct rl_conn_limits
rl_conn_limits_default(void)
{
    struct rl_conn_limits l = {
        RL_CONN_DEFAULT_MAX_CONNECTIONS,  RL_CONN_DEFAULT_MAX_PER_PEER,
        RL_CONN_DEFAULT_ROUTER_RESERVE,   RL_CONN_DEFAULT_IDLE_TIMEOUT_MS,
        RL_CONN_DEFAULT_FRAME_TIMEOUT_MS, RL_CONN_DEFAULT_BUFFER_MEMORY,
        RL_CONN_DEFAULT_AUTH_TIMEOUT_MS,  false,
    };
    return l;
}

#endif
