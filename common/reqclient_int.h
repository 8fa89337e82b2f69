/*
 * reqclient_int: what the two files of the request client share, and nothing else
 * includes: struct rl_client, and the transport's calls the typed calls make of it.
 * reqclient.c is the transport (connect, TLS, the poll loop that writes while it reads,
 * frames in and out); reqclient_calls.c, above it, the typed calls (CHECK, PING, AUTH,
 * STATS, ..., and check_many's pipelined batch).
 */
#ifndef RL_REQCLIENT_INT_H
#define RL_REQCLIENT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "reqclient.h"
#include "tls.h"
#include "wire.h"

/*
 * Ids of the single-request calls start here and stay in the upper half of the id space,
 * so a late reply to one of them cannot be mistaken for one of check_many's (the lower
 * half, each batch after the last one's ids, so that neither can a late or repeated reply
 * to an earlier batch).
 */
#define CLIENT_ID_BASE 0x80000000u

struct rl_client {
    int fd;
    int rd_err;       /* set once the peer closed or the stream broke: reads are over */
    int wr_err;       /* set once a write failed: writes are over */
    uint32_t next_id; /* for the single-request calls */
    uint32_t batch_id; /* check_many: the last id its last batch took (below CLIENT_ID_BASE) */
    size_t held;      /* bytes of the frame recv returned last, dropped on the next call */
    struct rl_buf in;
    struct rl_buf out;
    struct rl_wire_decoder dec;
    struct rl_wire_reply scratch; /* check_many decodes here: the struct is large */
    struct rl_tls *tls; /* NULL: plain TCP (rl_client_start_tls) */
    struct rl_buf ct;   /* TLS: ciphertext not yet sent; what c->out held, encrypted */
    char *raw;          /* TLS: CLIENT_READ_CHUNK, where ciphertext is received */
    char tls_why[256];  /* TLS: why the handshake or a record failed */
};

/* ---- reqclient.c: the transport --------------------------------------------------------- */

/* The monotonic deadline timeout_ms from now, in ns; -1 (none) for a negative timeout. */
int64_t client_deadline_after(int timeout_ms);

/* True once the deadline (of client_deadline_after) has passed; never for -1. */
bool client_expired(int64_t deadline);

/* Drops the frame the last recv returned: its strings were valid until this call. */
void client_release_held(struct rl_client *c);

/* Sends what the socket takes. Returns 0 or a negative errno. */
int client_write_some(struct rl_client *c);

/* One poll round, writing what is queued and reading: 0, -ETIMEDOUT or a negative errno
 * (a read error is left in rd_err, behind the frames already buffered). */
int client_pump(struct rl_client *c, int64_t deadline);

/* Writes everything queued by the deadline: 0 or a negative errno. */
int client_flush_until(struct rl_client *c, int64_t deadline);

/* Takes the next frame and decodes it into *rep; the frame stays held until the next call. */
int client_recv_until(struct rl_client *c, struct rl_wire_reply *rep, int64_t deadline);

#endif
