/*
 * auth: the few cryptographic pieces of authentication, on OpenSSL's libcrypto (Debian's
 * libssl-dev): SHA-256 of tokens, constant-time comparison, reading a secret file that only
 * its owner may read, and the ZooKeeper digest credential derived from the cluster secret.
 * Not for deciding who may do what (conf.h holds the clients, gate.h applies them), and
 * nothing here logs a secret or a token.
 */
#ifndef RL_AUTH_H
#define RL_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RL_AUTH_HASH_LEN 32     /* SHA-256 */
#define RL_AUTH_TOKEN_MAX 256u  /* bytes of a token or secret on the wire */
#define RL_AUTH_SECRET_MIN 16u  /* shortest cluster secret accepted */
#define RL_AUTH_TOKEN_MIN 16u   /* shortest client token accepted (AUTH, rl-cli hash-token) */
#define RL_AUTH_ZK_USER "ratelimiter"
#define RL_AUTH_ZK_CRED_MAX 96  /* "ratelimiter:" + 64 hex digits + NUL */
#define RL_AUTH_ZK_ID_MAX 64    /* "ratelimiter:" + 28 base64 characters + NUL */

/* SHA-256 of p[0..n). */
void rl_auth_sha256(const void *p, size_t n, uint8_t out[RL_AUTH_HASH_LEN]);

/* Whether a[0..n) equals b[0..n), in time that depends on n only. */
bool rl_auth_equal(const void *a, const void *b, size_t n);

/* Parses 64 hex digits (either case) into out. Returns 0 or -EINVAL. */
int rl_auth_parse_hash(const char *hex, uint8_t out[RL_AUTH_HASH_LEN]);

/* Writes the 64 lower-case hex digits of h and a NUL into out (65 bytes). */
void rl_auth_format_hash(const uint8_t h[RL_AUTH_HASH_LEN], char out[2 * RL_AUTH_HASH_LEN + 1]);

/*
 * Reads a secret (or token) file: a regular file that neither its group nor others may
 * read, write or run (mode & 077 == 0), holding 1..RL_AUTH_TOKEN_MAX bytes once one trailing
 * "\n" or "\r\n" is removed, and at least min_len of them. Returns 0 with the bytes in
 * out[0..*len) (cap >= RL_AUTH_TOKEN_MAX), or a negative errno with why holding a phrase
 * that names the problem but never the content: -EACCES for the mode, -EINVAL for the size,
 * or open's or read's errno.
 */
int rl_auth_read_secret(const char *path, size_t min_len, char *out, size_t cap, size_t *len,
                        char *why, size_t whylen);

/*
 * The ZooKeeper digest credential and ACL id for a cluster secret: cred is the
 * "ratelimiter:PASSWORD" given to zoo_add_auth, whose password is the hex SHA-256 of
 * "zookeeper:" and the secret (so ZooKeeper, which receives it in clear, never sees the
 * secret itself); id is the "ratelimiter:BASE64(SHA1(cred))" that digest ACLs name.
 */
void rl_auth_zk_digest(const char *secret, size_t len, char cred[RL_AUTH_ZK_CRED_MAX],
                       char id[RL_AUTH_ZK_ID_MAX]);

/* Wipes n bytes at p in a way the compiler keeps. */
void rl_auth_wipe(void *p, size_t n);

#endif
