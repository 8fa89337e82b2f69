/*
 * tls: TLS (OpenSSL, 1.2 and later only) as a byte transformer that knows no socket, so the
 * same engine sits under every transport of the tree: the libuv connections of conn.h (the
 * node's and the router's listeners, the router's connections to nodes, librlclient's loop
 * client), the blocking request client (reqclient.h) and rl-bench's connections. Each
 * connection's SSL has two memory BIOs: the owner feeds the ciphertext it read
 * (rl_tls_feed), takes the plaintext out (rl_tls_read), hands plaintext to send
 * (rl_tls_write) and writes the ciphertext that produced (rl_tls_take); the handshake runs
 * inside those calls.
 *
 * A context (struct rl_tls_ctx) is built from three PEM files: a certificate chain, its
 * private key (held to the secret file's rule: a regular file no group or other may read or
 * write) and the CA that signs the peers' certificates. Its role says what a peer must show:
 *   - RL_TLS_SERVER: a client certificate is asked for and, when one is shown, must chain to
 *     the CA; a client may show none (the router's client listener: clients AUTH instead);
 *   - RL_TLS_SERVER_MUTUAL: a client certificate chaining to the CA is required (a node's
 *     listener: routers and anything else that talks to a node directly);
 *   - RL_TLS_CLIENT: the server's certificate must chain to the CA; the certificate and key
 *     are optional and shown when the server asks (mutual TLS towards nodes).
 * Only the chain is verified, not a host name or address: a cluster's members advertise
 * addresses that may change (containers, NAT), so membership is "holds a certificate the
 * cluster's CA signed"; a CA dedicated to the cluster is what makes that mean something.
 *
 * rl_tls_ctx_reload rebuilds the SSL_CTX from the same files (SIGHUP) and swaps it in for
 * the connections made from then on; established connections keep the one they started
 * with. Contexts are shared by threads (a router's workers): the swap is under a mutex.
 * Not for the metrics listener (plain HTTP on loopback), nor for ZooKeeper (its C client
 * has no TLS as Debian builds it).
 */
#ifndef RL_TLS_H
#define RL_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* The first byte of every TLS handshake record: what a TLS client sends first. */
#define RL_TLS_RECORD_HANDSHAKE 0x16

enum rl_tls_role {
    RL_TLS_SERVER,
    RL_TLS_SERVER_MUTUAL,
    RL_TLS_CLIENT,
};

struct rl_tls_ctx;
struct rl_tls;

/*
 * Builds a context of role from cert, key and ca (PEM paths; for RL_TLS_CLIENT cert and key
 * may be NULL or "", and ca NULL or "" means the system's default CAs). alpn: NULL, or a
 * protocol a server selects when the client offers it ("h2") / a client offers. Returns 0
 * with *out set, or a negative errno with why filled (which file, and what is wrong).
 */
int rl_tls_ctx_new(struct rl_tls_ctx **out, enum rl_tls_role role, const char *cert,
                   const char *key, const char *ca, const char *alpn, char *why, size_t whylen);

/* Rebuilds the context from its files; on failure the one in force stays and why says why. */
int rl_tls_ctx_reload(struct rl_tls_ctx *t, char *why, size_t whylen);

void rl_tls_ctx_free(struct rl_tls_ctx *t);

/* A connection's TLS state from the context in force now; NULL when out of memory. A client's
 * rl_tls_start must then be called to produce its ClientHello. */
struct rl_tls *rl_tls_new(struct rl_tls_ctx *t);
void rl_tls_free(struct rl_tls *s);

/* Client side: begins the handshake (the ClientHello is then waiting in rl_tls_pending).
 * Returns 0 or -EPROTO. */
int rl_tls_start(struct rl_tls *s);

/* Ciphertext p[0..n) read from the peer. Returns 0 or -ENOMEM. */
int rl_tls_feed(struct rl_tls *s, const void *p, size_t n);

/*
 * Plaintext into dst[0..cap): returns the bytes written (> 0), 0 when no more is there until
 * more ciphertext is fed (or the peer sent close_notify), or -EPROTO when the handshake or a
 * record failed (rl_tls_why says why). The handshake advances here too: call rl_tls_pending
 * after, it may have something to send.
 */
int rl_tls_read(struct rl_tls *s, void *dst, size_t cap);

/* Plaintext to send: encrypted whole once the handshake is done. Returns n, 0 when the
 * handshake is not done yet (nothing taken), or -EPROTO. */
long rl_tls_write(struct rl_tls *s, const void *p, size_t n);

/* Ciphertext waiting to be sent, and taking it: into dst (returns the bytes taken), or
 * appended whole to b (returns 0 or -ENOMEM). */
size_t rl_tls_pending(const struct rl_tls *s);
size_t rl_tls_take(struct rl_tls *s, void *dst, size_t cap);
int rl_tls_take_buf(struct rl_tls *s, struct rl_buf *b);

/* Ciphertext fed that does not make a whole record yet, or a handshake not done: what a
 * peer that stops sending mid-record leaves behind (frame_timeout applies to it). */
bool rl_tls_partial(const struct rl_tls *s);

/* The handshake is done: plaintext flows both ways. */
bool rl_tls_established(const struct rl_tls *s);

/*
 * The handshake work this thread has done so far, all its connections together: the
 * rl_tls_read calls made while a handshake was not done (steps) and the nanoseconds they
 * took (a monotonic clock). The loop's handshake gate (conn.h, rl_connq_hs_*) budgets it
 * per turn.
 */
void rl_tls_handshake_work(uint64_t *steps, uint64_t *ns);

/* Why the last call failed, in words: OpenSSL's reason, the certificate verification's, or
 * that the peer does not speak TLS at all (it answered in plaintext). */
const char *rl_tls_why(const struct rl_tls *s);

#endif
