/*
 * hosts: reads the hosts file of a run across network namespaces (rl-chaos run --hosts FILE,
 * docs/CHAOS.md "Across hosts"): which namespace and address ZooKeeper, each node and each
 * router has, the interface every host reaches the others by, the cluster secret, the
 * clients' token, the TLS files (the cluster's CA, each host's certificate and key, rl-chaos's
 * own), and extra [cluster] lines for every config. scripts/netns.sh writes it
 * after building the namespaces. Not the namespaces themselves (the script's), nor what is
 * done with them (cluster.c, faults.c).
 *
 * One directive a line; `#` starts a comment line:
 *   zookeeper NETNS ADDR        node NAME NETNS ADDR        router N NETNS ADDR
 *   device DEV                  secret_file PATH            token_file PATH
 *   token_sha256 HEX            cluster KEY = VALUE         (added to [cluster])
 *   tls_ca_file PATH            tls node NAME CERT KEY      tls router N CERT KEY
 *   tls client CERT KEY         (with tls_ca_file, every node, router and the client need one)
 */
#include "chaos.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scenario.h"
#include "tls.h"

static int
fail(char *err, size_t errlen, const char *path, int line, const char *why, const char *what)
{
    snprintf(err, errlen, "%s:%d: %s%s%s", path, line, why, what[0] != '\0' ? ": " : "", what);
    return -1;
}

static int
node_index(const struct ch_scenario *sc, const char *name)
{
    for (int i = 0; i < sc->nodes; i++) {
        if (strcmp(ch_node_name(i), name) == 0) {
            return i;
        }
    }
    return -1;
}

static int
set_host(struct ch_host *h, const char *netns, const char *addr)
{
    if (strlen(netns) >= sizeof(h->netns) || strlen(addr) >= sizeof(h->addr) ||
        strspn(addr, "0123456789abcdefABCDEF.:") != strlen(addr)) {
        return -1;
    }
    snprintf(h->netns, sizeof(h->netns), "%s", netns);
    snprintf(h->addr, sizeof(h->addr), "%s", addr);
    return 0;
}

static int
copy(char *dst, size_t len, const char *v)
{
    return (size_t)snprintf(dst, len, "%s", v) >= len ? -1 : 0;
}

static int
set_tls(struct ch_host *h, const char *cert, const char *key)
{
    if (h == NULL || copy(h->tls_cert, sizeof(h->tls_cert), cert) != 0) {
        return -1;
    }
    return copy(h->tls_key, sizeof(h->tls_key), key);
}

/* The host a "tls" line names (w[1] w[2]...), or NULL; *at is where its files are in w. */
static struct ch_host *
tls_host(struct ch_hosts *h, const struct ch_scenario *sc, char **w, int n, int *at)
{
    if (n == 4 && strcmp(w[1], "client") == 0) {
        *at = 2;
        return &h->client;
    }
    *at = 3;
    if (n == 5 && strcmp(w[1], "node") == 0) {
        int i = node_index(sc, w[2]);

        return i < 0 ? NULL : &h->node[i];
    }
    if (n == 5 && strcmp(w[1], "router") == 0) {
        int i = atoi(w[2]) - 1;

        return i < 0 || i >= sc->routers ? NULL : &h->router[i];
    }
    return NULL;
}

int
ch_hosts_load(struct ch_hosts *h, const char *path, const struct ch_scenario *sc, char *err,
              size_t errlen)
{
    FILE *f = fopen(path, "r");
    char buf[1024];
    int line = 0, rc = 0;

    memset(h, 0, sizeof(*h));
    if (f == NULL) {
        return fail(err, errlen, path, 0, "cannot open", "");
    }
    while (rc == 0 && fgets(buf, sizeof(buf), f) != NULL) {
        char *w[6] = {NULL}, *save = NULL, *rest;
        int n = 0;

        line++;
        buf[strcspn(buf, "\r\n")] = '\0';
        rest = buf + strspn(buf, " \t");
        if (rest[0] == '\0' || rest[0] == '#') {
            continue;
        }
        if (strncmp(rest, "cluster ", 8) == 0) {
            size_t used = strlen(h->cluster_extra);
            int k = snprintf(h->cluster_extra + used, sizeof(h->cluster_extra) - used, "%s\n",
                             rest + 8);

            if (k < 0 || (size_t)k >= sizeof(h->cluster_extra) - used || !strchr(rest, '=')) {
                rc = fail(err, errlen, path, line, "a cluster line is \"cluster KEY = VALUE\"", "");
            }
            continue;
        }
        for (char *t = strtok_r(rest, " \t", &save); t != NULL && n < 6;
             t = strtok_r(NULL, " \t", &save)) {
            w[n++] = t;
        }
        if (n == 3 && strcmp(w[0], "zookeeper") == 0) {
            rc = set_host(&h->zk, w[1], w[2]);
        } else if (n == 4 && strcmp(w[0], "node") == 0) {
            int i = node_index(sc, w[1]);

            rc = i < 0 ? -1 : set_host(&h->node[i], w[2], w[3]);
        } else if (n == 4 && strcmp(w[0], "router") == 0) {
            int i = atoi(w[1]) - 1;

            rc = i < 0 || i >= sc->routers ? -1 : set_host(&h->router[i], w[2], w[3]);
        } else if (n == 2 && strcmp(w[0], "device") == 0) {
            rc = copy(h->dev, sizeof(h->dev), w[1]);
        } else if (n == 2 && strcmp(w[0], "secret_file") == 0) {
            rc = copy(h->secret_file, sizeof(h->secret_file), w[1]);
        } else if (n == 2 && strcmp(w[0], "token_file") == 0) {
            rc = copy(h->token_file, sizeof(h->token_file), w[1]);
        } else if (n == 2 && strcmp(w[0], "token_sha256") == 0 && strlen(w[1]) == 64) {
            rc = copy(h->token_sha256, sizeof(h->token_sha256), w[1]);
        } else if (n == 2 && strcmp(w[0], "tls_ca_file") == 0) {
            rc = copy(h->tls_ca_file, sizeof(h->tls_ca_file), w[1]);
        } else if (n >= 4 && strcmp(w[0], "tls") == 0) {
            int at = 0;
            struct ch_host *th = tls_host(h, sc, w, n, &at);

            rc = th == NULL ? -1 : set_tls(th, w[at], w[at + 1]);
        } else {
            rc = -1;
        }
        if (rc != 0) {
            fail(err, errlen, path, line, "not a hosts line (or a name, address or value too long)",
                 w[0]);
        }
    }
    fclose(f);
    if (rc != 0) {
        return -1;
    }
    if (h->zk.addr[0] == '\0') {
        return fail(err, errlen, path, line, "no zookeeper line", "");
    }
    for (int i = 0; i < sc->nodes; i++) {
        if (h->node[i].addr[0] == '\0') {
            return fail(err, errlen, path, line, "no line for node", ch_node_name(i));
        }
    }
    for (int i = 0; i < sc->routers; i++) {
        if (h->router[i].addr[0] == '\0') {
            return fail(err, errlen, path, line, "a router has no line (router N NETNS ADDR)", "");
        }
    }
    if (h->dev[0] == '\0' || h->secret_file[0] == '\0' || h->token_file[0] == '\0' ||
        h->token_sha256[0] == '\0') {
        return fail(err, errlen, path, line,
                    "device, secret_file, token_file and token_sha256 are required", "");
    }
    if (h->tls_ca_file[0] != '\0') {
        for (int i = 0; i < sc->nodes; i++) {
            if (h->node[i].tls_cert[0] == '\0') {
                return fail(err, errlen, path, line, "with tls_ca_file, no tls line for node",
                            ch_node_name(i));
            }
        }
        for (int i = 0; i < sc->routers; i++) {
            if (h->router[i].tls_cert[0] == '\0') {
                return fail(err, errlen, path, line,
                            "with tls_ca_file, a router has no tls line (tls router N CERT KEY)",
                            "");
            }
        }
        if (h->client.tls_cert[0] == '\0') {
            return fail(err, errlen, path, line,
                        "with tls_ca_file, rl-chaos needs its own (tls client CERT KEY)", "");
        }
    }
    return 0;
}

int
ch_hosts_tls(struct ch_hosts *h, char *err, size_t errlen)
{
    char why[400];

    if (h->tls_ca_file[0] == '\0') {
        return 0;
    }
    if (rl_tls_ctx_new(&h->tls, RL_TLS_CLIENT, h->client.tls_cert, h->client.tls_key,
                       h->tls_ca_file, NULL, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "TLS: %s", why);
        return -1;
    }
    return 0;
}

void
ch_hosts_free(struct ch_hosts *h)
{
    if (h != NULL) {
        rl_tls_ctx_free(h->tls);
        free(h);
    }
}
