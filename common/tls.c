/*
 * tls: the TLS engine of tls.h: contexts built from PEM files (the key file held to the
 * secret file's mode rule), reloaded by swapping the SSL_CTX under a mutex, and one SSL per
 * connection between two memory BIOs. Knows no socket and no event loop.
 */
#include "tls.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "file.h"

#define TLS_KEY_FILE_MAX (1u << 20) /* a PEM private key is a few KiB */

struct rl_tls_ctx {
    pthread_mutex_t mu;
    SSL_CTX *ctx; /* in force for new connections */
    enum rl_tls_role role;
    char *cert, *key, *ca, *alpn;
};

struct rl_tls {
    SSL *ssl;
    BIO *rbio; /* ciphertext from the peer */
    BIO *wbio; /* ciphertext to the peer */
    bool fed;  /* some ciphertext came in */
    unsigned char first; /* its first byte */
    char why[256];
};

static char *
dup_or_null(const char *s)
{
    return s != NULL && s[0] != '\0' ? strdup(s) : NULL;
}

/* OpenSSL's queued errors, last first, into why (and the queue emptied). */
static void
ssl_errors(char *why, size_t whylen, const char *what)
{
    unsigned long e, last = 0;
    char buf[256];

    while ((e = ERR_get_error()) != 0) {
        last = e;
    }
    if (last == 0) {
        snprintf(why, whylen, "%s", what);
        return;
    }
    ERR_error_string_n(last, buf, sizeof(buf));
    snprintf(why, whylen, "%s: %s", what, buf);
}

/* No passphrase: OpenSSL's default would ask the terminal, which a daemon has not. */
static int
no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)u;
    return 0;
}

/*
 * The private key of path, read under the rule of secret files (auth.h): a regular file that
 * neither group nor others may read or write. The bytes read are wiped.
 */
/* Whether path (NULL: none) is a regular file OpenSSL may open by name: a FIFO there would
 * block the process in OpenSSL's open (at start, or at a SIGHUP's reload). */
static bool
tls_file_ok(const char *key, const char *path, char *why, size_t whylen)
{
    int fd;

    if (path == NULL) {
        return true;
    }
    fd = rl_file_open(path, O_RDONLY, 0, 0);
    if (fd < 0) {
        snprintf(why, whylen, "%s: cannot open %s: %s", key, path, rl_file_strerror(fd));
        return false;
    }
    close(fd);
    return true;
}

static EVP_PKEY *
load_key(const char *path, char *why, size_t whylen)
{
    struct stat st;
    EVP_PKEY *pkey = NULL;
    char *buf = NULL;
    size_t n = 0;
    int fd;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        snprintf(why, whylen, "tls_key_file: cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) != 0) {
        snprintf(why, whylen, "tls_key_file: cannot stat %s: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, whylen, "tls_key_file: %s is not a regular file", path);
        goto out;
    }
    if ((st.st_mode & 077) != 0) {
        snprintf(why, whylen,
                 "tls_key_file: %s may be read or written by its group or others (mode %04o): "
                 "chmod 600 it",
                 path, (unsigned)(st.st_mode & 07777));
        goto out;
    }
    buf = malloc(TLS_KEY_FILE_MAX);
    if (buf == NULL) {
        snprintf(why, whylen, "tls_key_file: out of memory");
        goto out;
    }
    while (n < TLS_KEY_FILE_MAX) {
        ssize_t got = read(fd, buf + n, TLS_KEY_FILE_MAX - n);

        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got < 0) {
            snprintf(why, whylen, "tls_key_file: cannot read %s: %s", path, strerror(errno));
            goto out;
        }
        if (got == 0) {
            break;
        }
        n += (size_t)got;
    }
    {
        BIO *b = BIO_new_mem_buf(buf, (int)n);

        if (b != NULL) {
            pkey = PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL);
            BIO_free(b);
        }
        if (pkey == NULL) {
            char what[600];

            snprintf(what, sizeof(what),
                     "tls_key_file: %s holds no PEM private key (an encrypted one is not "
                     "taken: no passphrase is asked for)",
                     path);
            ssl_errors(why, whylen, what);
        }
    }
out:
    if (buf != NULL) {
        OPENSSL_cleanse(buf, TLS_KEY_FILE_MAX);
        free(buf);
    }
    close(fd);
    return pkey;
}

/* The server's ALPN choice: the context's protocol when the client offers it, else none. */
static int
alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
            unsigned int inlen, void *arg)
{
    const char *want = arg;
    size_t wl = strlen(want);

    (void)ssl;
    for (unsigned int i = 0; i < inlen;) {
        unsigned int l = in[i];

        if (i + 1 + l > inlen) {
            break;
        }
        if (l == wl && memcmp(in + i + 1, want, wl) == 0) {
            *out = in + i + 1;
            *outlen = (unsigned char)l;
            return SSL_TLSEXT_ERR_OK;
        }
        i += 1 + l;
    }
    return SSL_TLSEXT_ERR_NOACK;
}

static SSL_CTX *
build_ctx(const struct rl_tls_ctx *t, char *why, size_t whylen)
{
    bool server = t->role != RL_TLS_CLIENT;
    SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    char what[600];

    ERR_clear_error();
    if (ctx == NULL) {
        ssl_errors(why, whylen, "cannot create a TLS context");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* No session tickets or resumption: connections are long-lived, and a ticket is one more
     * key to rotate. */
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_num_tickets(ctx, 0);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    /* Memory BIOs: a write is taken whole, and its buffer may move between calls. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
    if (!tls_file_ok("tls_cert_file", t->cert, why, whylen) ||
        !tls_file_ok("tls_ca_file", t->ca, why, whylen)) {
        goto fail;
    }
    if (t->cert != NULL) {
        if (SSL_CTX_use_certificate_chain_file(ctx, t->cert) != 1) {
            snprintf(what, sizeof(what), "tls_cert_file: cannot use %s", t->cert);
            ssl_errors(why, whylen, what);
            goto fail;
        }
    }
    if (t->key != NULL) {
        EVP_PKEY *pkey = load_key(t->key, why, whylen);
        int ok;

        if (pkey == NULL) {
            goto fail;
        }
        ok = SSL_CTX_use_PrivateKey(ctx, pkey);
        EVP_PKEY_free(pkey);
        if (ok != 1 || (t->cert != NULL && SSL_CTX_check_private_key(ctx) != 1)) {
            snprintf(what, sizeof(what), "tls_key_file: %s is not the key of %s", t->key,
                     t->cert != NULL ? t->cert : "the certificate");
            ssl_errors(why, whylen, what);
            goto fail;
        }
    }
    if (t->ca != NULL) {
        if (SSL_CTX_load_verify_locations(ctx, t->ca, NULL) != 1) {
            snprintf(what, sizeof(what), "tls_ca_file: cannot load %s", t->ca);
            ssl_errors(why, whylen, what);
            goto fail;
        }
        if (server) {
            STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(t->ca);

            if (names != NULL) {
                SSL_CTX_set_client_CA_list(ctx, names);
            }
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        ssl_errors(why, whylen, "cannot load the system's CA certificates");
        goto fail;
    }
    switch (t->role) {
    case RL_TLS_SERVER:
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        break;
    case RL_TLS_SERVER_MUTUAL:
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        break;
    case RL_TLS_CLIENT:
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        break;
    }
    if (t->alpn != NULL) {
        if (server) {
            SSL_CTX_set_alpn_select_cb(ctx, alpn_select, t->alpn);
        } else {
            unsigned char wire[256];
            size_t l = strlen(t->alpn);

            wire[0] = (unsigned char)l;
            memcpy(wire + 1, t->alpn, l);
            SSL_CTX_set_alpn_protos(ctx, wire, (unsigned)(l + 1));
        }
    }
    return ctx;

fail:
    SSL_CTX_free(ctx);
    return NULL;
}

int
rl_tls_ctx_new(struct rl_tls_ctx **out, enum rl_tls_role role, const char *cert,
               const char *key, const char *ca, const char *alpn, char *why, size_t whylen)
{
    struct rl_tls_ctx *t;

    *out = NULL;
    if (role != RL_TLS_CLIENT && (cert == NULL || cert[0] == '\0' || key == NULL ||
                                  key[0] == '\0' || ca == NULL || ca[0] == '\0')) {
        snprintf(why, whylen, "tls_cert_file, tls_key_file and tls_ca_file go together");
        return -EINVAL;
    }
    if ((cert == NULL || cert[0] == '\0') != (key == NULL || key[0] == '\0')) {
        snprintf(why, whylen, "a TLS certificate needs its key, and a key its certificate");
        return -EINVAL;
    }
    if (alpn != NULL && (alpn[0] == '\0' || strlen(alpn) > 255)) {
        snprintf(why, whylen, "bad ALPN protocol name");
        return -EINVAL;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    pthread_mutex_init(&t->mu, NULL);
    t->role = role;
    t->cert = dup_or_null(cert);
    t->key = dup_or_null(key);
    t->ca = dup_or_null(ca);
    t->alpn = dup_or_null(alpn);
    t->ctx = build_ctx(t, why, whylen);
    if (t->ctx == NULL) {
        rl_tls_ctx_free(t);
        return -EINVAL;
    }
    *out = t;
    return 0;
}

int
rl_tls_ctx_reload(struct rl_tls_ctx *t, char *why, size_t whylen)
{
    SSL_CTX *ctx = build_ctx(t, why, whylen), *old;

    if (ctx == NULL) {
        return -EINVAL;
    }
    pthread_mutex_lock(&t->mu);
    old = t->ctx;
    t->ctx = ctx;
    pthread_mutex_unlock(&t->mu);
    SSL_CTX_free(old); /* its connections hold their own references */
    return 0;
}

void
rl_tls_ctx_free(struct rl_tls_ctx *t)
{
    if (t == NULL) {
        return;
    }
    SSL_CTX_free(t->ctx);
    free(t->cert);
    free(t->key);
    free(t->ca);
    free(t->alpn);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* ---- one connection ----------------------------------------------------------------------- */

struct rl_tls *
rl_tls_new(struct rl_tls_ctx *t)
{
    struct rl_tls *s = calloc(1, sizeof(*s));

    if (s == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&t->mu);
    s->ssl = SSL_new(t->ctx); /* takes its own reference to the context */
    pthread_mutex_unlock(&t->mu);
    s->rbio = BIO_new(BIO_s_mem());
    s->wbio = BIO_new(BIO_s_mem());
    if (s->ssl == NULL || s->rbio == NULL || s->wbio == NULL) {
        BIO_free(s->rbio);
        BIO_free(s->wbio);
        SSL_free(s->ssl);
        free(s);
        ERR_clear_error();
        return NULL;
    }
    /* An empty read BIO means "more to come", not EOF. */
    BIO_set_mem_eof_return(s->rbio, -1);
    SSL_set_bio(s->ssl, s->rbio, s->wbio);
    if (t->role == RL_TLS_CLIENT) {
        SSL_set_connect_state(s->ssl);
    } else {
        SSL_set_accept_state(s->ssl);
    }
    return s;
}

void
rl_tls_free(struct rl_tls *s)
{
    if (s == NULL) {
        return;
    }
    SSL_free(s->ssl); /* and its BIOs */
    free(s);
}

/* Fills s->why after a failed call that returned rc. */
static int
tls_fail(struct rl_tls *s, int rc)
{
    long v = SSL_get_verify_result(s->ssl);
    int err = SSL_get_error(s->ssl, rc);

    if (s->fed && (s->first < 0x14 || s->first > 0x17)) {
        /* Not a TLS record type (change_cipher_spec, alert, handshake, application_data). */
        snprintf(s->why, sizeof(s->why),
                 "the peer does not speak TLS (it answered in plaintext: is TLS off on that "
                 "port?)");
        ERR_clear_error();
    } else if (v != X509_V_OK) {
        snprintf(s->why, sizeof(s->why), "the peer's certificate was refused: %s",
                 X509_verify_cert_error_string(v));
        ERR_clear_error();
    } else if (err == SSL_ERROR_SYSCALL || err == SSL_ERROR_SSL) {
        unsigned long e, last = 0;
        const char *r;

        while ((e = ERR_get_error()) != 0) {
            last = e;
        }
        r = last != 0 ? ERR_reason_error_string(last) : NULL;
        if (r != NULL && strstr(r, "alert") != NULL) {
            /* The peer's alert: it refused the handshake, and says why. */
            snprintf(s->why, sizeof(s->why), "the peer refused the TLS handshake (%s)%s", r,
                     strstr(r, "certificate required") != NULL ||
                             strstr(r, "unknown ca") != NULL ||
                             strstr(r, "bad certificate") != NULL
                         ? ": it wants a certificate its CA signed"
                         : "");
        } else {
            snprintf(s->why, sizeof(s->why), "%s", r != NULL ? r : "TLS error");
        }
    } else {
        snprintf(s->why, sizeof(s->why), "TLS error %d", err);
        ERR_clear_error();
    }
    return -EPROTO;
}

int
rl_tls_start(struct rl_tls *s)
{
    int rc = SSL_do_handshake(s->ssl);

    if (rc == 1) {
        return 0;
    }
    switch (SSL_get_error(s->ssl, rc)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        return 0;
    default:
        return tls_fail(s, rc);
    }
}

int
rl_tls_feed(struct rl_tls *s, const void *p, size_t n)
{
    if (n == 0) {
        return 0;
    }
    if (!s->fed) {
        s->fed = true;
        s->first = *(const unsigned char *)p;
    }
    while (n > 0) {
        int chunk = n > (1u << 30) ? (1 << 30) : (int)n;
        int w = BIO_write(s->rbio, p, chunk);

        if (w <= 0) {
            return -ENOMEM;
        }
        p = (const char *)p + w;
        n -= (size_t)w;
    }
    return 0;
}

/* This thread's handshake work (rl_tls_handshake_work). */
static _Thread_local uint64_t tls_hs_steps, tls_hs_ns;

static uint64_t
tls_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void
rl_tls_handshake_work(uint64_t *steps, uint64_t *ns)
{
    *steps = tls_hs_steps;
    *ns = tls_hs_ns;
}

int
rl_tls_read(struct rl_tls *s, void *dst, size_t cap)
{
    size_t got = 0;
    int rc;

    if (cap > (1u << 30)) {
        cap = 1u << 30;
    }
    if (!SSL_is_init_finished(s->ssl)) {
        uint64_t t0 = tls_now_ns();

        rc = SSL_read_ex(s->ssl, dst, cap, &got);
        tls_hs_steps++;
        tls_hs_ns += tls_now_ns() - t0;
    } else {
        rc = SSL_read_ex(s->ssl, dst, cap, &got);
    }
    if (rc == 1) {
        return (int)got;
    }
    switch (SSL_get_error(s->ssl, rc)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
    case SSL_ERROR_ZERO_RETURN: /* close_notify: the TCP close follows */
        ERR_clear_error();
        return 0;
    default:
        return tls_fail(s, rc);
    }
}

long
rl_tls_write(struct rl_tls *s, const void *p, size_t n)
{
    size_t done = 0;
    int rc;

    if (n == 0) {
        return 0;
    }
    if (!SSL_is_init_finished(s->ssl)) {
        return 0;
    }
    rc = SSL_write_ex(s->ssl, p, n, &done);
    if (rc == 1) {
        return (long)done;
    }
    return tls_fail(s, rc);
}

size_t
rl_tls_pending(const struct rl_tls *s)
{
    return BIO_ctrl_pending(s->wbio);
}

size_t
rl_tls_take(struct rl_tls *s, void *dst, size_t cap)
{
    int n;

    if (cap > (1u << 30)) {
        cap = 1u << 30;
    }
    n = BIO_read(s->wbio, dst, (int)cap);
    return n > 0 ? (size_t)n : 0;
}

int
rl_tls_take_buf(struct rl_tls *s, struct rl_buf *b)
{
    size_t n = rl_tls_pending(s);

    if (n == 0) {
        return 0;
    }
    if (rl_buf_reserve(b, n) != 0) {
        return -ENOMEM;
    }
    b->len += rl_tls_take(s, b->data + b->len, n);
    return 0;
}

bool
rl_tls_partial(const struct rl_tls *s)
{
    return BIO_ctrl_pending(s->rbio) > 0 || SSL_has_pending(s->ssl) ||
           !SSL_is_init_finished(s->ssl);
}

bool
rl_tls_established(const struct rl_tls *s)
{
    return SSL_is_init_finished(s->ssl);
}

const char *
rl_tls_why(const struct rl_tls *s)
{
    return s->why[0] != '\0' ? s->why : "TLS error";
}
