/* proxy: see proxy.h. */
#include "proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct rl_proxy {
    int lfd;
    int target;
    int fds[RL_PROXY_PAIRS][2]; /* [i][0] the accepted side, [i][1] the target side; -1: free */
    atomic_int mode;
    atomic_int stop;
    pthread_t thread;
};

static int
proxy_dial(int port)
{
    struct sockaddr_in sa = {0};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static void
proxy_drop(struct rl_proxy *p, int i)
{
    close(p->fds[i][0]);
    close(p->fds[i][1]);
    p->fds[i][0] = p->fds[i][1] = -1;
}

static void *
proxy_main(void *arg)
{
    struct rl_proxy *p = arg;
    struct pollfd pfd[1 + 2 * RL_PROXY_PAIRS];
    char buf[16384];

    while (!atomic_load(&p->stop)) {
        int pass = atomic_load(&p->mode) == RL_PROXY_PASS, n = 1;

        pfd[0].fd = p->lfd;
        pfd[0].events = POLLIN;
        for (int i = 0; i < RL_PROXY_PAIRS; i++) {
            for (int k = 0; k < 2; k++) {
                pfd[n].fd = p->fds[i][k];
                pfd[n].events = pass ? POLLIN : 0;
                n++;
            }
        }
        if (poll(pfd, (nfds_t)n, 20) <= 0) {
            continue;
        }
        if (pfd[0].revents & POLLIN) {
            int c = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC), slot = -1;

            for (int i = 0; i < RL_PROXY_PAIRS && c >= 0 && slot < 0; i++) {
                slot = p->fds[i][0] < 0 ? i : -1;
            }
            if (c >= 0 && slot >= 0) {
                p->fds[slot][0] = c;
                p->fds[slot][1] = proxy_dial(p->target);
                if (p->fds[slot][1] < 0) {
                    proxy_drop(p, slot);
                }
            } else if (c >= 0) {
                close(c);
            }
        }
        for (int i = 0, j = 1; pass && i < RL_PROXY_PAIRS; i++, j += 2) {
            for (int k = 0; k < 2 && p->fds[i][0] >= 0; k++) {
                ssize_t got;

                if (!(pfd[j + k].revents & (POLLIN | POLLHUP | POLLERR))) {
                    continue;
                }
                got = read(p->fds[i][k], buf, sizeof(buf));
                if (got <= 0 || write(p->fds[i][1 - k], buf, (size_t)got) != got) {
                    proxy_drop(p, i);
                }
            }
        }
    }
    return NULL;
}

int
rl_proxy_start(struct rl_proxy **out, int target, int *port)
{
    struct rl_proxy *p = calloc(1, sizeof(*p));
    struct sockaddr_in sa = {0};
    socklen_t len = sizeof(sa);
    int one = 1;

    *out = NULL;
    if (p == NULL) {
        return -ENOMEM;
    }
    memset(p->fds, -1, sizeof(p->fds));
    p->target = target;
    p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)*port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(p->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(p->lfd, 16) != 0 || getsockname(p->lfd, (struct sockaddr *)&sa, &len) != 0 ||
        pthread_create(&p->thread, NULL, proxy_main, p) != 0) {
        int rc = -errno;

        if (p->lfd >= 0) {
            close(p->lfd);
        }
        free(p);
        return rc;
    }
    *port = ntohs(sa.sin_port);
    *out = p;
    return 0;
}

void
rl_proxy_set_mode(struct rl_proxy *p, enum rl_proxy_mode mode)
{
    atomic_store(&p->mode, (int)mode);
}

void
rl_proxy_stop(struct rl_proxy *p)
{
    if (p == NULL) {
        return;
    }
    atomic_store(&p->stop, 1);
    pthread_join(p->thread, NULL);
    for (int i = 0; i < RL_PROXY_PAIRS; i++) {
        if (p->fds[i][0] >= 0) {
            proxy_drop(p, i);
        }
    }
    close(p->lfd);
    free(p);
}
