/*
 * hostile: the fake router of hostile.h. Requests are read as frames and only their op and
 * id are looked at (the id's encoding starts at byte 2 of [op, id, ...] and is copied as it
 * is), so the replies need no codec.
 */
#include "hostile.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct hostile_conn {
    struct rl_hostile *h;
    int fd;
};

static int
read_full(int fd, unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = read(fd, p, n);

        if (k <= 0) {
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* The reply to one request in out (its header included); returns its length. */
static size_t
hostile_reply(const struct rl_hostile *h, const unsigned char *in, unsigned char *out)
{
    size_t idlen = in[2] < 0x80 ? 1 : in[2] == 0xcc ? 2 : in[2] == 0xcd ? 3 : 5;
    size_t o = 4;
    uint64_t retry = h->retry;
    uint32_t len = h->len;

    if (in[1] != 6 && len != 0) {
        out[0] = (unsigned char)(len >> 24);
        out[1] = (unsigned char)(len >> 16);
        out[2] = (unsigned char)(len >> 8);
        out[3] = (unsigned char)len;
        memset(out + 4, 0, 16);
        return 20;
    }
    if (in[1] == 6) { /* AUTH */
        out[o++] = 0x93;
        out[o++] = 0x06;
        memcpy(out + o, in + 2, idlen);
        o += idlen;
        memcpy(out + o, "\xa7hostile", 8);
        o += 8;
    } else {
        out[o++] = 0x97;
        out[o++] = 0x01;
        memcpy(out + o, in + 2, idlen);
        o += idlen;
        out[o++] = 0x05; /* QUEUED */
        out[o++] = 0x04; /* limit */
        out[o++] = 0x00; /* remaining */
        out[o++] = 0xcd; /* reset_ms 1000 */
        out[o++] = 0x03;
        out[o++] = 0xe8;
        out[o++] = 0xcf; /* retry_after_ms, uint 64 */
        for (int i = 7; i >= 0; i--) {
            out[o++] = (unsigned char)(retry >> (8 * i));
        }
    }
    out[0] = out[1] = out[2] = 0;
    out[3] = (unsigned char)(o - 4);
    return o;
}

/* A CHECK reply [1, id, ALLOWED, 4, 3, 1000, 0] for a uint 32 id. */
static size_t
hostile_allowed(uint32_t id, unsigned char *out)
{
    static const unsigned char tail[] = {0x00, 0x04, 0x03, 0xcd, 0x03, 0xe8, 0x00};

    memcpy(out, "\0\0\0\x0e\x97\x01\xce", 7);
    out[7] = (unsigned char)(id >> 24);
    out[8] = (unsigned char)(id >> 16);
    out[9] = (unsigned char)(id >> 8);
    out[10] = (unsigned char)id;
    memcpy(out + 11, tail, sizeof(tail));
    return 18;
}

/* STRAY: replies to ids nobody asked for, as fast as the client takes them (the socket
 * never runs dry), until the client goes away. */
static void
hostile_stray(int fd)
{
    unsigned char out[256 * 18];
    size_t n = 0;

    for (uint32_t i = 0; i < 256; i++) {
        n += hostile_allowed(i % 2 ? 0xfffffff0u : 0x7ffffff0u, out + n);
    }
    while (send(fd, out, n, MSG_NOSIGNAL) == (ssize_t)n) {
    }
}

/* The id of a request as a uint 32 (its encoding starts at byte 2 of [op, id, ...]). */
static uint32_t
hostile_id(const unsigned char *in)
{
    switch (in[2]) {
    case 0xcc:
        return in[3];
    case 0xcd:
        return (uint32_t)in[3] << 8 | in[4];
    case 0xce:
        return (uint32_t)in[3] << 24 | (uint32_t)in[4] << 16 | (uint32_t)in[5] << 8 | in[6];
    default:
        return in[2];
    }
}

static void *
hostile_conn(void *arg)
{
    struct hostile_conn hc = *(struct hostile_conn *)arg;
    unsigned char *in = malloc(65536), out[64];

    free(arg);
    while (in != NULL) {
        unsigned char hdr[4];
        uint32_t n;

        if (read_full(hc.fd, hdr, 4) != 0) {
            break;
        }
        n = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
        if (n < 3 || n > 65536 || read_full(hc.fd, in, n) != 0) {
            break;
        }
        if (in[1] != 6 && hc.h->mode == RL_HOSTILE_STRAY) {
            hostile_stray(hc.fd);
            break;
        }
        if (in[1] != 6 && hc.h->mode == RL_HOSTILE_WRONG_OP) {
            size_t idlen = in[2] < 0x80 ? 1 : in[2] == 0xcc ? 2 : in[2] == 0xcd ? 3 : 5;
            size_t o = 4;

            out[o++] = 0x93;
            out[o++] = 0x02;
            memcpy(out + o, in + 2, idlen);
            o += idlen;
            out[o++] = 0xa1;
            out[o++] = 'x';
            out[0] = out[1] = out[2] = 0;
            out[3] = (unsigned char)(o - 4);
            (void)!write(hc.fd, out, o);
            continue;
        }
        (void)!write(hc.fd, out, hostile_reply(hc.h, in, out));
        if (in[1] != 6 && hc.h->mode == RL_HOSTILE_REPEAT) {
            usleep(50 * 1000);
            (void)!write(hc.fd, out, hostile_allowed(hostile_id(in), out));
        }
    }
    free(in);
    close(hc.fd);
    return NULL;
}

static void *
hostile_accept(void *arg)
{
    struct rl_hostile *h = arg;

    for (;;) {
        int fd = accept(h->lfd, NULL, NULL);
        struct hostile_conn *hc;
        pthread_t t;

        if (fd < 0) {
            return NULL; /* rl_hostile_stop */
        }
        hc = malloc(sizeof(*hc));
        if (hc == NULL) {
            close(fd);
            continue;
        }
        hc->h = h;
        hc->fd = fd;
        if (pthread_create(&t, NULL, hostile_conn, hc) == 0) {
            pthread_detach(t);
        } else {
            free(hc);
            close(fd);
        }
    }
}

int
rl_hostile_start(struct rl_hostile *h)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    pthread_t t;

    h->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(h->lfd, 0);
    ck_assert_int_eq(bind(h->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(h->lfd, 16), 0);
    ck_assert_int_eq(getsockname(h->lfd, (struct sockaddr *)&sa, &len), 0);
    ck_assert_int_eq(pthread_create(&t, NULL, hostile_accept, h), 0);
    pthread_detach(t);
    return ntohs(sa.sin_port);
}

void
rl_hostile_stop(struct rl_hostile *h)
{
    /* shutdown wakes the accept (close alone would not); the descriptor closes after. */
    shutdown(h->lfd, SHUT_RDWR);
    usleep(10 * 1000);
    close(h->lfd);
    h->lfd = -1;
}
