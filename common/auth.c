/*
 * auth: SHA-256, SHA-1, base64 and the constant-time comparison come from libcrypto; this
 * file only strings them together (auth.h). Reading secret files and wiping memory are in
 * secret.c, which needs no libcrypto.
 */
#include "auth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "parse.h"

void
rl_auth_sha256(const void *p, size_t n, uint8_t out[RL_AUTH_HASH_LEN])
{
    unsigned int len = RL_AUTH_HASH_LEN;

    if (EVP_Digest(p, n, out, &len, EVP_sha256(), NULL) != 1) {
        /* Only out of memory inside libcrypto: a hash that matches nothing. */
        memset(out, 0, RL_AUTH_HASH_LEN);
    }
}

bool
rl_auth_equal(const void *a, const void *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}

int
rl_auth_parse_hash(const char *hex, uint8_t out[RL_AUTH_HASH_LEN])
{
    if (strlen(hex) != 2 * RL_AUTH_HASH_LEN) {
        return -EINVAL;
    }
    for (size_t i = 0; i < RL_AUTH_HASH_LEN; i++) {
        int hi = rl_hex_digit(hex[2 * i]), lo = rl_hex_digit(hex[2 * i + 1]);

        if (hi < 0 || lo < 0) {
            return -EINVAL;
        }
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

void
rl_auth_format_hash(const uint8_t h[RL_AUTH_HASH_LEN], char out[2 * RL_AUTH_HASH_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < RL_AUTH_HASH_LEN; i++) {
        out[2 * i] = digits[h[i] >> 4];
        out[2 * i + 1] = digits[h[i] & 15];
    }
    out[2 * RL_AUTH_HASH_LEN] = '\0';
}

void
rl_auth_zk_digest(const char *secret, size_t len, char cred[RL_AUTH_ZK_CRED_MAX],
                  char id[RL_AUTH_ZK_ID_MAX])
{
    uint8_t h[RL_AUTH_HASH_LEN];
    uint8_t sha1[20];
    unsigned int sha1_len = sizeof(sha1);
    char hex[2 * RL_AUTH_HASH_LEN + 1];
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx != NULL;

    /* password = hex(SHA-256("zookeeper:" || secret)) */
    ok = ok && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
    ok = ok && EVP_DigestUpdate(ctx, "zookeeper:", 10) == 1;
    ok = ok && EVP_DigestUpdate(ctx, secret, len) == 1;
    ok = ok && EVP_DigestFinal_ex(ctx, h, NULL) == 1;
    EVP_MD_CTX_free(ctx);
    if (!ok) {
        memset(h, 0, sizeof(h));
    }
    rl_auth_format_hash(h, hex);
    snprintf(cred, RL_AUTH_ZK_CRED_MAX, "%s:%s", RL_AUTH_ZK_USER, hex);
    /* ZooKeeper's DigestAuthenticationProvider: user ":" base64(sha1("user:password")). */
    if (EVP_Digest(cred, strlen(cred), sha1, &sha1_len, EVP_sha1(), NULL) != 1) {
        memset(sha1, 0, sizeof(sha1));
    }
    {
        unsigned char b64[32];

        EVP_EncodeBlock(b64, sha1, sizeof(sha1));
        snprintf(id, RL_AUTH_ZK_ID_MAX, "%s:%s", RL_AUTH_ZK_USER, (const char *)b64);
    }
    rl_auth_wipe(h, sizeof(h));
    rl_auth_wipe(hex, sizeof(hex));
}
