/*
 * conf: loads cluster.conf into a struct rl_conf (the rules through ruleset.h, which also
 * answers "which rule applies to this request"). libinih splits `KEY = VALUE` lines and calls
 * conf_handler; the lines themselves come from conf_reader, which counts them (Debian's libinih
 * gives the handler no line number), strips comments and blanks, and parses section headers itself,
 * because libinih cuts section names to 49 bytes and never tells the handler that a section began.
 * Every error is one line "FILE:LINE: what is wrong"; parsing stops at the first one.
 * Not for command-line options, nor for anything that changes after load.
 */
#include "conf.h"

#include "auth.h"

#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CONF_NAME_MAX 64 /* [cluster] name, a znode path component */
#define CONF_NODE_NAME_MAX 63
#define CONF_SERVICE_MAX 128 /* S and E of [service S E] */
#define CONF_SHARDS_MAX 1048576u
#define CONF_SESSION_MIN 1000u /* ms; ZooKeeper itself clamps to 2..20 ticks */
#define CONF_SESSION_MAX 600000u
#define CONF_DEADLINE_MAX 600000u
#define CONF_MEMORY_MIN (1024ull * 1024)
#define CONF_KEYS_MAX 64 /* keys of every section kind together */

#define CONF_DURATION_PHRASE "is not a duration (use ms, s, m, h or d)"
#define CONF_LIMIT_PHRASE "is not \"ALGORITHM N per DURATION [burst B]\""

enum conf_kind { CONF_CLUSTER, CONF_ROUTER, CONF_CLIENTS, CONF_NODE, CONF_SERVICE, CONF_CLIENT };

struct conf_parser;

struct conf_key {
    enum conf_kind kind; /* the section it belongs in */
    const char *name;
    const char *(*set)(struct conf_parser *p, const char *value);
    bool repeat;
};

struct conf_kind_def {
    const char *name;
    int min_args;
    int max_args;
    const char *usage;
};

/* The section being read. */
struct conf_section {
    enum conf_kind kind;
    int line;
    size_t index;            /* into c->nodes, c->rules or c->auth_clients */
    int seen[CONF_KEYS_MAX]; /* line where each key of conf_keys was set, 0 if not yet */
};

struct conf_parser {
    struct rl_conf *c;
    const char *name; /* the file as errors name it */
    char *dir;        /* the file's directory, for relative paths; NULL for a string */
    FILE *fp;         /* the source: fp, or text when fp is NULL */
    const char *text;
    char *buf; /* the current physical line, NUL-terminated */
    size_t bufcap;
    int line;
    bool in_section;
    bool eof;
    struct conf_section sec;
    int cluster_line; /* where [cluster] and [router] were, 0 if not yet */
    int router_line;
    int clients_line;
    size_t nodes_cap;
    size_t auth_cap;
    int secret_line;
    size_t rules_cap;
    size_t tiers_cap;
    bool rules_only; /* a rules file: [service] sections only */
    int err;         /* 0, or the negative errno of the first error */
    char *msg;
    size_t msglen;
    char why[256]; /* phrases built at run time */
};

/* Errors. */

static void __attribute__((format(printf, 4, 5)))
conf_fail(struct conf_parser *p, int line, int err, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (p->err != 0) {
        return;
    }
    p->err = err;
    if (p->msg == NULL || p->msglen == 0) {
        return;
    }
    if (line > 0) {
        n = snprintf(p->msg, p->msglen, "%s:%d: ", p->name, line);
    } else {
        n = snprintf(p->msg, p->msglen, "%s: ", p->name);
    }
    if (n < 0 || (size_t)n >= p->msglen) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(p->msg + n, p->msglen - (size_t)n, fmt, ap);
    va_end(ap);
}

static const char *
conf_nomem(struct conf_parser *p)
{
    conf_fail(p, p->line, -ENOMEM, "out of memory");
    return "could not be stored: out of memory";
}

/*
 * Room for one more element at index n of an array p grows: arrp is the address of the
 * array's pointer, *cap its allocated count (first, then doubled). Returns the element,
 * zeroed, or NULL after conf_nomem with the array as it was.
 */
static void *
conf_push(struct conf_parser *p, void *arrp, size_t n, size_t *cap, size_t size, size_t first)
{
    void *arr;

    memcpy(&arr, arrp, sizeof(arr));
    if (n == *cap) {
        size_t ncap = *cap != 0 ? *cap * 2 : first;
        void *grown = realloc(arr, ncap * size);

        if (grown == NULL) {
            conf_nomem(p);
            return NULL;
        }
        arr = grown;
        memcpy(arrp, &arr, sizeof(arr));
        *cap = ncap;
    }
    return memset((char *)arr + n * size, 0, size);
}

/* A copy of s, or NULL after conf_nomem. */
static char *
conf_strdup(struct conf_parser *p, const char *s)
{
    char *copy = strdup(s);

    if (copy == NULL) {
        conf_nomem(p);
    }
    return copy;
}

/* Small lexical helpers. */

static bool
is_blank(int ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n' || ch == '\v' || ch == '\f';
}

/* A name that is also safe as a znode path component: [A-Za-z0-9_.-]{1,max}, not . or .. */
static bool
valid_name(const char *s, size_t max)
{
    size_t n;

    for (n = 0; s[n] != '\0'; n++) {
        if (!rl_is_alnum((unsigned char)s[n]) && s[n] != '_' && s[n] != '.' && s[n] != '-') {
            return false;
        }
    }
    return n >= 1 && n <= max && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* Key setters: each returns NULL or the phrase that follows `KEY: "VALUE"`. */

static const char *
set_string(struct conf_parser *p, char **field, const char *v)
{
    char *copy = strdup(v);

    if (copy == NULL) {
        return conf_nomem(p);
    }
    free(*field);
    *field = copy;
    return NULL;
}

/* An integer or duration that must lie in [min, max]; range is how the phrase shows them. */
static const char *
set_u64_bounded(struct conf_parser *p, uint64_t *field, const char *v, bool duration, uint64_t min,
                uint64_t max, const char *range)
{
    const char *why;
    uint64_t n;

    why = duration ? rl_parse_duration_ms(v, &n) : rl_parse_u64(v, 0, UINT64_MAX, &n);
    if (why == NULL && (n < min || n > max)) {
        snprintf(p->why, sizeof(p->why), "is out of range (%s)", range);
        why = p->why;
    }
    if (why == NULL) {
        *field = n;
    }
    return why;
}

/* The same into a 32-bit field (max below 2^32). */
static const char *
set_bounded(struct conf_parser *p, uint32_t *field, const char *v, bool duration, uint64_t min,
            uint64_t max, const char *range)
{
    uint64_t n = 0;
    const char *why = set_u64_bounded(p, &n, v, duration, min, max, range);

    if (why == NULL) {
        *field = (uint32_t)n;
    }
    return why;
}

/*
 * A path key (secret_file, events_log, request_log): in a file, a relative path is taken
 * relative to the file's directory, so a config means the same files whatever the cwd of
 * the process that loads it. "" stays "" (off).
 */
static const char *
set_path(struct conf_parser *p, char **field, const char *v)
{
    char *full;

    if (p->dir == NULL || v[0] == '\0' || v[0] == '/') {
        return set_string(p, field, v);
    }
    if (asprintf(&full, "%s/%s", p->dir, v) < 0) {
        return conf_nomem(p);
    }
    free(*field);
    *field = full;
    return NULL;
}

static const char *
set_cluster_name(struct conf_parser *p, const char *v)
{
    if (!valid_name(v, CONF_NAME_MAX)) {
        return "is not 1..64 characters of A-Z a-z 0-9 _ . - (nor . or ..)";
    }
    return set_string(p, &p->c->cluster_name, v);
}

/* A ZooKeeper connect string: HOST:PORT[,HOST:PORT...][/CHROOT], or "" for none. */
static const char *
set_zookeeper(struct conf_parser *p, const char *v)
{
    static const char *const phrase = "is not HOST:PORT[,HOST:PORT...][/CHROOT]";
    char item[RL_CONF_LINE_MAX + 1];
    const char *q = v;
    const char *end = v + strlen(v);
    const char *slash = strchr(v, '/');
    const char *why;
    char *host;
    uint16_t port;
    size_t i;

    if (*v != '\0') {
        if (slash != NULL) {
            if (slash[1] == '\0') {
                return phrase;
            }
            for (i = 1; slash[i] != '\0'; i++) {
                if ((unsigned char)slash[i] <= ' ' || slash[i] == 0x7f) {
                    return phrase;
                }
            }
            end = slash;
        }
        for (;;) {
            const char *comma = memchr(q, ',', (size_t)(end - q));
            const char *stop = comma != NULL ? comma : end;

            memcpy(item, q, (size_t)(stop - q));
            item[stop - q] = '\0';
            why = rl_parse_hostport(item, &host, &port);
            if (why != NULL) {
                return strncmp(why, "has a port", 10) == 0 ? why : phrase;
            }
            free(host);
            if (comma == NULL) {
                break;
            }
            q = comma + 1;
        }
    }
    return set_string(p, &p->c->zookeeper, v);
}

static const char *
set_session_timeout(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->session_timeout_ms, v, true, CONF_SESSION_MIN, CONF_SESSION_MAX,
                       "1s..10m");
}

static const char *
set_shards(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->shards, v, false, 1, CONF_SHARDS_MAX, "1..1048576");
}

/* One of two words: off sets *field false, on true; anything else gets phrase. */
static const char *
set_either(bool *field, const char *v, const char *off, const char *on, const char *phrase)
{
    if (strcmp(v, off) == 0) {
        *field = false;
    } else if (strcmp(v, on) == 0) {
        *field = true;
    } else {
        return phrase;
    }
    return NULL;
}

static const char *
set_yesno(bool *field, const char *v)
{
    return set_either(field, v, "no", "yes", "is not yes or no");
}

static const char *
set_insecure(struct conf_parser *p, const char *v)
{
    return set_yesno(&p->c->insecure, v);
}

static const char *
set_fencing(struct conf_parser *p, const char *v)
{
    return set_either(&p->c->fence_disconnect, v, "expiry", "disconnect",
                      "is not expiry or disconnect");
}

/* Only the path here: the file is read once the whole config is in (conf_finish). */
static const char *
set_secret_file(struct conf_parser *p, const char *v)
{
    p->secret_line = p->line;
    return set_path(p, &p->c->secret_file, v);
}

static const char *
set_client_token(struct conf_parser *p, const char *v)
{
    struct rl_client_conf *cl = &p->c->auth_clients[p->sec.index];

    if (cl->nhashes == RL_CONF_CLIENT_HASHES) {
        return "is one token too many: a client has at most 4 (for rotation)";
    }
    if (rl_auth_parse_hash(v, cl->hashes[cl->nhashes]) != 0) {
        return "is not 64 hex digits (the SHA-256 of the token: rl-cli hash-token)";
    }
    cl->nhashes++;
    return NULL;
}

static const char *
set_client_services(struct conf_parser *p, const char *v)
{
    struct rl_client_conf *cl = &p->c->auth_clients[p->sec.index];

    if (v[strspn(v, " \t,")] == '\0') {
        return "names no service (list them, or * for every service)";
    }
    cl->services_line = p->line;
    return set_string(p, &cl->services, v);
}

static const char *
set_client_stats(struct conf_parser *p, const char *v)
{
    return set_yesno(&p->c->auth_clients[p->sec.index].stats, v);
}

static const char *
set_router_listen(struct conf_parser *p, const char *v)
{
    char *host;
    uint16_t port;
    const char *why = rl_parse_hostport(v, &host, &port);

    if (why != NULL) {
        return why;
    }
    free(p->c->router_host);
    p->c->router_host = host;
    p->c->router_port = port;
    return NULL;
}

/*
 * `metrics = HOST:PORT`: an operator's HTTP listener (metrics.h). Empty: off. A bare PORT
 * binds 127.0.0.1, so the listener is loopback unless an address is written out.
 */
static const char *
set_metrics(char **host, uint16_t *port, const char *v)
{
    char *h;
    uint16_t pt;
    const char *why;
    size_t i;

    free(*host);
    *host = NULL;
    *port = 0;
    if (*v == '\0') {
        return NULL;
    }
    for (i = 0; v[i] >= '0' && v[i] <= '9'; i++) {
    }
    if (v[i] == '\0') {
        char buf[32];

        snprintf(buf, sizeof(buf), "127.0.0.1:%s", v);
        why = rl_parse_hostport(buf, &h, &pt);
    } else {
        why = rl_parse_hostport(v, &h, &pt);
    }
    if (why != NULL) {
        return why;
    }
    *host = h;
    *port = pt;
    return NULL;
}

static const char *
set_router_metrics(struct conf_parser *p, const char *v)
{
    return set_metrics(&p->c->router_metrics_host, &p->c->router_metrics_port, v);
}

static const char *
set_node_metrics(struct conf_parser *p, const char *v)
{
    struct rl_node_conf *n = &p->c->nodes[p->sec.index];

    return set_metrics(&n->metrics_host, &n->metrics_port, v);
}

static const char *
set_deadline(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->deadline_ms, v, true, 1, CONF_DEADLINE_MAX, "1ms..10m");
}

/* [cluster] throttle_events: node/throttle.h's RL_THROTTLE_MAX, repeated to keep common/
 * free of node headers. */
#define CONF_THROTTLE_EVENTS_MAX 16384u

static const char *
set_throttle_events(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->throttle_events, v, false, 0, CONF_THROTTLE_EVENTS_MAX,
                       "0..16384");
}

static const char *
set_events_log(struct conf_parser *p, const char *v)
{
    return set_path(p, &p->c->events_log, v);
}

/* The events log's bounds (node/throttle.h's defaults are repeated in conf_create). */
static const char *
set_events_log_max_size(struct conf_parser *p, const char *v)
{
    if (strcmp(v, "0") == 0) {
        p->c->events_log_max_size = 0;
        return NULL;
    }
    return rl_parse_size(v, &p->c->events_log_max_size);
}

static const char *
set_events_log_keep(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->events_log_keep, v, false, 0, 1000, "0..1000");
}

static const char *
set_events_log_rate(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->events_log_rate, v, false, 0, 1000000, "0..1000000");
}

static const char *
set_request_log(struct conf_parser *p, const char *v)
{
    return set_path(p, &p->c->request_log, v);
}

static const char *
set_request_log_sample(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->log_sample, v, false, 1, UINT32_MAX, "1..4294967295");
}

/* A size of memory: at least 1 MiB. */
static const char *
set_memory(uint64_t *field, const char *v)
{
    uint64_t bytes;
    const char *why = rl_parse_size(v, &bytes);

    if (why != NULL) {
        return why;
    }
    if (bytes < CONF_MEMORY_MIN) {
        return "is below the minimum of 1mb";
    }
    *field = bytes;
    return NULL;
}

static const char *
set_max_connections(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->clients.max_connections, v, false, 1, 1000000, "1..1000000");
}

static const char *
set_max_per_peer(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->clients.max_per_peer, v, false, 1, 1000000, "1..1000000");
}

static const char *
set_router_reserve(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->clients.router_reserve, v, false, 0, 10000, "0..10000");
}

static const char *
set_idle_timeout(struct conf_parser *p, const char *v)
{
    if (strcmp(v, "0") == 0) {
        p->c->clients.idle_timeout_ms = 0;
        return NULL;
    }
    return set_u64_bounded(p, &p->c->clients.idle_timeout_ms, v, true, 1000, 7ull * 86400000,
                           "0 (never), or 1s..7d");
}

static const char *
set_frame_timeout(struct conf_parser *p, const char *v)
{
    return set_u64_bounded(p, &p->c->clients.frame_timeout_ms, v, true, 100, 3600000, "100ms..1h");
}

static const char *
set_buffer_memory(struct conf_parser *p, const char *v)
{
    return set_memory(&p->c->clients.buffer_memory, v);
}

static const char *
set_request_log_max_size(struct conf_parser *p, const char *v)
{
    if (strcmp(v, "0") == 0) {
        p->c->log_max_size = 0;
        return NULL;
    }
    return rl_parse_size(v, &p->c->log_max_size);
}

static const char *
set_request_log_keep(struct conf_parser *p, const char *v)
{
    return set_bounded(p, &p->c->log_keep, v, false, 0, 1000, "0..1000");
}

/* Two nodes on one address: the second could never listen, and ZooKeeper would publish one
 * address under two names. The phrase, or NULL when no other node of the file listens there. */
static const char *
listen_taken(struct conf_parser *p, const struct rl_node_conf *n, const char *host, uint16_t port)
{
    for (size_t i = 0; i < p->c->nnodes; i++) {
        const struct rl_node_conf *o = &p->c->nodes[i];

        if (o != n && o->host != NULL && o->port == port && strcasecmp(o->host, host) == 0) {
            snprintf(p->why, sizeof(p->why), "is also the listen address of [node %s] (line %d)",
                     o->name, o->line);
            return p->why;
        }
    }
    return NULL;
}

/* [node] listen, or advertise: the address others dial, so never a wildcard. */
static const char *
set_node_address(struct conf_parser *p, const char *v, bool advertise)
{
    struct rl_node_conf *n = &p->c->nodes[p->sec.index];
    char *host;
    uint16_t port;
    const char *why = rl_parse_hostport(v, &host, &port);

    if (why != NULL) {
        return why;
    }
    if (advertise) {
        why = rl_conf_is_wildcard(host)
                  ? "is a wildcard address: advertise is the address other hosts dial"
                  : NULL;
    } else {
        why = listen_taken(p, n, host, port);
    }
    if (why != NULL) {
        free(host);
        return why;
    }
    free(advertise ? n->adv_host : n->host);
    *(advertise ? &n->adv_host : &n->host) = host;
    *(advertise ? &n->adv_port : &n->port) = port;
    return NULL;
}

static const char *
set_node_listen(struct conf_parser *p, const char *v)
{
    return set_node_address(p, v, false);
}

static const char *
set_node_advertise(struct conf_parser *p, const char *v)
{
    return set_node_address(p, v, true);
}

static const char *
set_node_memory(struct conf_parser *p, const char *v)
{
    return set_memory(&p->c->nodes[p->sec.index].memory, v);
}

static const char *
set_failure(struct conf_parser *p, const char *v)
{
    return set_either(&p->c->rules[p->sec.index].fail_closed, v, "open", "closed",
                      "is not open or closed");
}

static const char *
set_mode(struct conf_parser *p, const char *v)
{
    return set_either(&p->c->rules[p->sec.index].shadow, v, "enforce", "shadow",
                      "is not enforce or shadow");
}

/* A count N or burst B of a limit: 1..RL_CONF_LIMIT_MAX. */
static const char *
limit_count(struct conf_parser *p, const char *what, const char *tok, uint32_t *out)
{
    uint64_t n;
    const char *why = rl_parse_u64(tok, 0, UINT64_MAX, &n);

    if (why != NULL && strcmp(why, "is not a number") == 0) {
        snprintf(p->why, sizeof(p->why), "has a %s \"%s\" that is not a number", what, tok);
        return p->why;
    }
    if (why != NULL || n < 1 || n > RL_CONF_LIMIT_MAX) {
        snprintf(p->why, sizeof(p->why), "has a %s outside 1..%u", what, RL_CONF_LIMIT_MAX);
        return p->why;
    }
    *out = (uint32_t)n;
    return NULL;
}

static void
append_text(char *buf, size_t size, const char *text)
{
    size_t len = strlen(buf);

    snprintf(buf + len, size - len, "%s", text);
}

/* Appends "a, b, c<last>d": every algorithm, or those that take a burst. */
static void
append_algos(char *buf, size_t size, bool burst_only, const char *last)
{
    int n = 0;
    int i;
    int k;

    for (i = 0; i < RL_ALGO_COUNT; i++) {
        n += !burst_only || rl_algo_has_burst((enum rl_algo)i);
    }
    for (i = 0, k = 0; i < RL_ALGO_COUNT; i++) {
        if (!burst_only || rl_algo_has_burst((enum rl_algo)i)) {
            append_text(buf, size, k == 0 ? "" : k == n - 1 ? last : ", ");
            append_text(buf, size, rl_algo_name((enum rl_algo)i));
            k++;
        }
    }
}

/* ALGORITHM N per DURATION [burst B] */
static const char *
parse_limit(struct conf_parser *p, const char *v, struct rl_tier *t)
{
    char copy[RL_CONF_LINE_MAX + 1];
    char *tok[7];
    char *save = NULL;
    int ntok = 0;
    const char *why;
    uint64_t window;

    snprintf(copy, sizeof(copy), "%s", v);
    for (char *w = strtok_r(copy, " \t", &save); w != NULL; w = strtok_r(NULL, " \t", &save)) {
        if (ntok == 7) {
            return CONF_LIMIT_PHRASE;
        }
        tok[ntok++] = w;
    }
    if ((ntok != 4 && ntok != 6) || strcmp(tok[2], "per") != 0 ||
        (ntok == 6 && strcmp(tok[4], "burst") != 0)) {
        return CONF_LIMIT_PHRASE;
    }
    if (rl_algo_parse(tok[0], &t->algo) != 0) {
        snprintf(p->why, sizeof(p->why), "has an unknown algorithm (use ");
        append_algos(p->why, sizeof(p->why), false, " or ");
        append_text(p->why, sizeof(p->why), ")");
        return p->why;
    }
    why = limit_count(p, "limit", tok[1], &t->limit);
    if (why != NULL) {
        return why;
    }
    why = rl_parse_duration_ms(tok[3], &window);
    if (why != NULL && strcmp(why, CONF_DURATION_PHRASE) == 0) {
        snprintf(p->why, sizeof(p->why), "has a window \"%s\" that %s", tok[3], why);
        return p->why;
    }
    if (why != NULL || window < 1 || window > RL_CONF_WINDOW_MAX) {
        snprintf(p->why, sizeof(p->why), "has a window outside 1ms..%ums", RL_CONF_WINDOW_MAX);
        return p->why;
    }
    t->window_ms = (uint32_t)window;
    t->burst = t->limit;
    if (ntok == 6) {
        if (!rl_algo_has_burst(t->algo)) {
            snprintf(p->why, sizeof(p->why), "has a burst, which only ");
            append_algos(p->why, sizeof(p->why), true, " and ");
            append_text(p->why, sizeof(p->why), " take");
            return p->why;
        }
        why = limit_count(p, "burst", tok[5], &t->burst);
        if (why != NULL) {
            return why;
        }
    }
    return NULL;
}

static const char *
set_limit(struct conf_parser *p, const char *v)
{
    struct rl_conf *c = p->c;
    struct rl_rule *r = &c->rules[p->sec.index];
    struct rl_tier t, *slot;
    const char *why = parse_limit(p, v, &t);

    if (why != NULL) {
        return why;
    }
    if (r->ntiers == RL_CONF_RULE_TIERS_MAX) {
        return "is one tier too many: a section has at most 16";
    }
    if (c->ntiers == RL_CONF_TIERS_MAX) {
        return "is one tier too many: a file has at most 65535";
    }
    slot = conf_push(p, &c->tiers, c->ntiers, &p->tiers_cap, sizeof(*slot), 16);
    if (slot == NULL) {
        return "could not be stored: out of memory";
    }
    /* Tiers of one section are contiguous: only the current section appends. */
    t.id = (uint16_t)c->ntiers;
    t.seed = rl_ruleset_tier_seed(r, r->ntiers, &t);
    *slot = t;
    c->ntiers++;
    r->ntiers++;
    return NULL;
}

/* Every key, by section. */
static const struct conf_key conf_keys[] = {
    {CONF_CLUSTER, "name", set_cluster_name, false},
    {CONF_CLUSTER, "zookeeper", set_zookeeper, false},
    {CONF_CLUSTER, "session_timeout", set_session_timeout, false},
    {CONF_CLUSTER, "shards", set_shards, false},
    {CONF_CLUSTER, "insecure", set_insecure, false},
    {CONF_CLUSTER, "secret_file", set_secret_file, false},
    {CONF_CLUSTER, "fencing", set_fencing, false},
    {CONF_CLUSTER, "throttle_events", set_throttle_events, false},
    {CONF_CLUSTER, "events_log", set_events_log, false},
    {CONF_CLUSTER, "events_log_max_size", set_events_log_max_size, false},
    {CONF_CLUSTER, "events_log_keep", set_events_log_keep, false},
    {CONF_CLUSTER, "events_log_rate", set_events_log_rate, false},
    {CONF_ROUTER, "listen", set_router_listen, false},
    {CONF_ROUTER, "deadline", set_deadline, false},
    {CONF_ROUTER, "request_log", set_request_log, false},
    {CONF_ROUTER, "request_log_sample", set_request_log_sample, false},
    {CONF_ROUTER, "request_log_max_size", set_request_log_max_size, false},
    {CONF_ROUTER, "request_log_keep", set_request_log_keep, false},
    {CONF_ROUTER, "metrics", set_router_metrics, false},
    {CONF_CLIENTS, "max_connections", set_max_connections, false},
    {CONF_CLIENTS, "max_connections_per_peer", set_max_per_peer, false},
    {CONF_CLIENTS, "router_reserve", set_router_reserve, false},
    {CONF_CLIENTS, "idle_timeout", set_idle_timeout, false},
    {CONF_CLIENTS, "frame_timeout", set_frame_timeout, false},
    {CONF_CLIENTS, "buffer_memory", set_buffer_memory, false},
    {CONF_NODE, "listen", set_node_listen, false},
    {CONF_NODE, "advertise", set_node_advertise, false},
    {CONF_NODE, "memory", set_node_memory, false},
    {CONF_NODE, "metrics", set_node_metrics, false},
    {CONF_SERVICE, "failure", set_failure, false},
    {CONF_SERVICE, "mode", set_mode, false},
    {CONF_SERVICE, "limit", set_limit, true},
    {CONF_CLIENT, "token_sha256", set_client_token, true},
    {CONF_CLIENT, "services", set_client_services, false},
    {CONF_CLIENT, "stats", set_client_stats, false},
};

#define CONF_NKEYS (sizeof(conf_keys) / sizeof(conf_keys[0]))
_Static_assert(CONF_NKEYS <= CONF_KEYS_MAX, "conf_section.seen has a slot per key");

static const struct conf_kind_def conf_kinds[] = {
    [CONF_CLUSTER] = {"cluster", 0, 0, "[cluster]"},
    [CONF_ROUTER] = {"router", 0, 0, "[router]"},
    [CONF_CLIENTS] = {"clients", 0, 0, "[clients]"},
    [CONF_NODE] = {"node", 1, 1, "[node NAME]"},
    [CONF_SERVICE] = {"service", 1, 2, "[service SERVICE] or [service SERVICE ENDPOINT]"},
    [CONF_CLIENT] = {"client", 1, 1, "[client NAME]"},
};

const char *
rl_conf_node_dial(const struct rl_node_conf *n, uint16_t *port)
{
    *port = n->adv_host != NULL ? n->adv_port : n->port;
    return n->adv_host != NULL ? n->adv_host : n->host;
}

bool
rl_conf_is_wildcard(const char *host)
{
    return strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0 ||
           strcmp(host, "0:0:0:0:0:0:0:0") == 0;
}

const struct rl_node_conf *
rl_conf_node(const struct rl_conf *c, const char *name)
{
    size_t i;

    for (i = 0; c != NULL && name != NULL && i < c->nnodes; i++) {
        if (strcmp(c->nodes[i].name, name) == 0) {
            return &c->nodes[i];
        }
    }
    return NULL;
}

/* Sections. */

/* Checks what a section needs once all its keys are in; errors point at its header. */
static void
section_close(struct conf_parser *p)
{
    const struct rl_conf *c = p->c;

    if (!p->in_section) {
        return;
    }
    p->in_section = false;
    if (p->sec.kind == CONF_NODE && c->nodes[p->sec.index].host == NULL) {
        conf_fail(p, p->sec.line, -EINVAL, "[node %s] has no listen", c->nodes[p->sec.index].name);
    } else if (p->sec.kind == CONF_NODE && rl_conf_is_wildcard(c->nodes[p->sec.index].host) &&
               c->nodes[p->sec.index].adv_host == NULL) {
        conf_fail(p, p->sec.line, -EINVAL,
                  "[node %s] listens on the wildcard address %s: add advertise = HOST:PORT, "
                  "the address routers dial",
                  c->nodes[p->sec.index].name, c->nodes[p->sec.index].host);
    } else if (p->sec.kind == CONF_CLIENT && c->auth_clients[p->sec.index].nhashes == 0) {
        conf_fail(p, p->sec.line, -EINVAL, "[client %s] has no token_sha256",
                  c->auth_clients[p->sec.index].name);
    } else if (p->sec.kind == CONF_CLIENT && c->auth_clients[p->sec.index].services == NULL) {
        conf_fail(p, p->sec.line, -EINVAL,
                  "[client %s] has no services (list them, or * for every service)",
                  c->auth_clients[p->sec.index].name);
    } else if (p->sec.kind == CONF_SERVICE && c->rules[p->sec.index].ntiers == 0) {
        const struct rl_rule *r = &c->rules[p->sec.index];

        conf_fail(p, p->sec.line, -EINVAL, "[service %s%s%s] has no limit", r->service,
                  r->endpoint != NULL ? " " : "", r->endpoint != NULL ? r->endpoint : "");
    }
}

static int
section_node(struct conf_parser *p, const char *name)
{
    struct rl_conf *c = p->c;
    const struct rl_node_conf *old = rl_conf_node(c, name);
    struct rl_node_conf *n;

    if (!valid_name(name, CONF_NODE_NAME_MAX)) {
        conf_fail(p, p->line, -EINVAL,
                  "node name \"%s\" is not 1..63 characters of A-Z a-z 0-9 _ . - (nor . or ..)",
                  name);
        return -EINVAL;
    }
    if (old != NULL) {
        conf_fail(p, p->line, -EINVAL, "duplicate section [node %s] (first at line %d)", name,
                  old->line);
        return -EINVAL;
    }
    n = conf_push(p, &c->nodes, c->nnodes, &p->nodes_cap, sizeof(*n), 4);
    if (n == NULL || (n->name = conf_strdup(p, name)) == NULL) {
        return -ENOMEM;
    }
    n->memory = RL_CONF_DEFAULT_MEMORY;
    n->line = p->line;
    p->sec.index = c->nnodes++;
    return 0;
}

static int
section_client(struct conf_parser *p, const char *name)
{
    struct rl_conf *c = p->c;
    struct rl_client_conf *cl;

    if (!valid_name(name, CONF_NODE_NAME_MAX) || strcmp(name, "cluster") == 0) {
        conf_fail(p, p->line, -EINVAL,
                  "client name \"%s\" is not 1..63 characters of A-Z a-z 0-9 _ . - (nor . or "
                  ".., nor \"cluster\", the name of the cluster secret)",
                  name);
        return -EINVAL;
    }
    for (size_t i = 0; i < c->nauth_clients; i++) {
        if (strcmp(c->auth_clients[i].name, name) == 0) {
            conf_fail(p, p->line, -EINVAL, "duplicate section [client %s] (first at line %d)", name,
                      c->auth_clients[i].line);
            return -EINVAL;
        }
    }
    cl = conf_push(p, &c->auth_clients, c->nauth_clients, &p->auth_cap, sizeof(*cl), 4);
    if (cl == NULL || (cl->name = conf_strdup(p, name)) == NULL) {
        return -ENOMEM;
    }
    cl->line = p->line;
    p->sec.index = c->nauth_clients++;
    return 0;
}

/* Service and endpoint names travel on the wire: 1..128 bytes, no blanks nor controls. */
static bool
valid_service(const char *s)
{
    size_t n;

    for (n = 0; s[n] != '\0'; n++) {
        if ((unsigned char)s[n] < 0x20 || s[n] == 0x7f) {
            return false;
        }
    }
    return n >= 1 && n <= CONF_SERVICE_MAX;
}

static int
section_service(struct conf_parser *p, const char *service, const char *endpoint)
{
    struct rl_conf *c = p->c;
    size_t slen = strlen(service);
    size_t elen = endpoint != NULL ? strlen(endpoint) : 0;
    const struct rl_rule *old;
    struct rl_rule *r;

    if (!valid_service(service) || (endpoint != NULL && !valid_service(endpoint))) {
        conf_fail(p, p->line, -EINVAL,
                  "%s name is not 1..128 bytes without blanks or control characters",
                  valid_service(service) ? "endpoint" : "service");
        return -EINVAL;
    }
    old = rl_ruleset_find(c, service, slen, endpoint, elen);
    if (old != NULL) {
        conf_fail(p, p->line, -EINVAL, "duplicate section [service %s%s%s] (first at line %d)",
                  service, endpoint != NULL ? " " : "", endpoint != NULL ? endpoint : "",
                  old->line);
        return -EINVAL;
    }
    r = conf_push(p, &c->rules, c->nrules, &p->rules_cap, sizeof(*r), 8);
    if (r == NULL) {
        return -ENOMEM;
    }
    r->service = strdup(service);
    r->endpoint = endpoint != NULL ? strdup(endpoint) : NULL;
    /* Counted now, so that rl_conf_destroy frees what the two strdups got. */
    c->nrules++;
    if (r->service == NULL || (endpoint != NULL && r->endpoint == NULL)) {
        conf_nomem(p);
        return -ENOMEM;
    }
    r->service_len = slen;
    r->endpoint_len = elen;
    r->id = (uint32_t)(c->nrules - 1);
    r->first_tier = (uint32_t)c->ntiers;
    r->line = p->line;
    if (rl_ruleset_index_add(c) != 0) {
        conf_nomem(p);
        return -ENOMEM;
    }
    p->sec.index = r->id;
    return 0;
}

/* Opens the section whose header is the line [s, e), brackets included. */
static void
section_open(struct conf_parser *p, char *s, char *e)
{
    char *arg[4];
    char *save = NULL;
    int nargs = 0;
    int kind;
    int *seen_line;
    int rc = 0;

    if (e[-1] != ']' || e - s < 2) {
        conf_fail(p, p->line, -EINVAL, "malformed section header");
        return;
    }
    e[-1] = '\0';
    for (char *w = strtok_r(s + 1, " \t\v\f", &save); w != NULL && nargs < 4;
         w = strtok_r(NULL, " \t\v\f", &save)) {
        arg[nargs++] = w;
    }
    if (nargs == 0) {
        conf_fail(p, p->line, -EINVAL, "malformed section header");
        return;
    }
    for (kind = 0; kind <= CONF_CLIENT && strcmp(arg[0], conf_kinds[kind].name) != 0; kind++) {
    }
    if (kind > CONF_CLIENT) {
        conf_fail(p, p->line, -EINVAL,
                  "unknown section [%s] (use cluster, router, clients, node, service or client)",
                  arg[0]);
        return;
    }
    if (nargs - 1 < conf_kinds[kind].min_args || nargs - 1 > conf_kinds[kind].max_args) {
        conf_fail(p, p->line, -EINVAL, "malformed section header: expected %s",
                  conf_kinds[kind].usage);
        return;
    }
    if (p->rules_only && kind != CONF_SERVICE) {
        conf_fail(p, p->line, -EINVAL,
                  "[%s] in a rules file, which holds only [service ...] sections", arg[0]);
        return;
    }
    memset(&p->sec, 0, sizeof(p->sec));
    p->sec.kind = (enum conf_kind)kind;
    p->sec.line = p->line;
    switch (p->sec.kind) {
    case CONF_CLUSTER:
    case CONF_ROUTER:
    case CONF_CLIENTS:
        seen_line = p->sec.kind == CONF_CLUSTER  ? &p->cluster_line
                    : p->sec.kind == CONF_ROUTER ? &p->router_line
                                                 : &p->clients_line;
        if (*seen_line != 0) {
            conf_fail(p, p->line, -EINVAL, "duplicate section [%s] (first at line %d)", arg[0],
                      *seen_line);
            return;
        }
        *seen_line = p->line;
        break;
    case CONF_NODE:
        rc = section_node(p, arg[1]);
        break;
    case CONF_SERVICE:
        rc = section_service(p, arg[1], nargs == 3 ? arg[2] : NULL);
        break;
    case CONF_CLIENT:
        rc = section_client(p, arg[1]);
        break;
    }
    p->in_section = rc == 0;
}

/* libinih's callbacks. */

/* Reads the next physical line into p->buf; false at the end or on a read error. */
static bool
next_line(struct conf_parser *p, size_t *len)
{
    ssize_t n;
    size_t need;

    if (p->fp != NULL) {
        errno = 0;
        n = getline(&p->buf, &p->bufcap, p->fp);
        if (n < 0) {
            if (ferror(p->fp)) {
                conf_fail(p, 0, errno != 0 ? -errno : -EIO, "cannot read: %s",
                          strerror(errno != 0 ? errno : EIO));
            }
            return false;
        }
        *len = (size_t)n;
        return true;
    }
    if (*p->text == '\0') {
        return false;
    }
    need = strcspn(p->text, "\n");
    need += p->text[need] == '\n';
    if (need + 1 > p->bufcap) {
        char *buf = realloc(p->buf, need + 1);

        if (buf == NULL) {
            conf_nomem(p);
            return false;
        }
        p->buf = buf;
        p->bufcap = need + 1;
    }
    memcpy(p->buf, p->text, need);
    p->buf[need] = '\0';
    p->text += need;
    *len = need;
    return true;
}

/*
 * The ini_reader: hands libinih one line per physical line, so its line numbers stay ours,
 * with comments and surrounding blanks removed. Removing the leading blanks means an
 * indented line is read like any other and never continues the previous value. Section
 * headers are handled here and reach libinih as blank lines.
 */
static char *
conf_reader(char *str, int num, void *stream)
{
    struct conf_parser *p = stream;
    char *s;
    char *e;
    char *q;
    size_t len;

    if (p->err != 0 || p->eof) {
        return NULL;
    }
    if (!next_line(p, &len)) {
        p->eof = true;
        if (p->err == 0) {
            section_close(p);
        }
        return NULL;
    }
    p->line++;
    s = p->buf;
    e = p->buf + len;
    if (memchr(s, '\0', len) != NULL) {
        conf_fail(p, p->line, -EINVAL, "line contains a NUL byte");
        return NULL;
    }
    if (p->line == 1 && len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {
        s += 3;
    }
    while (s < e && is_blank((unsigned char)*s)) {
        s++;
    }
    if (s < e && (*s == ';' || *s == '#')) {
        e = s;
    }
    /* An inline comment starts at ';' or '#' after a blank, so "a#b" is a value. */
    for (q = s + 1; q < e; q++) {
        if ((*q == ';' || *q == '#') && is_blank((unsigned char)q[-1])) {
            e = q;
            break;
        }
    }
    while (e > s && is_blank((unsigned char)e[-1])) {
        e--;
    }
    *e = '\0';
    str[0] = '\0';
    if (s == e) {
        return str;
    }
    if (*s == '[') {
        section_close(p);
        section_open(p, s, e);
        return p->err != 0 ? NULL : str;
    }
    q = s + strcspn(s, "=:");
    if (*q != '=' || q == s) {
        /* libinih would also take "KEY: VALUE"; no key of ours has a ':' so refuse it. */
        conf_fail(p, p->line, -EINVAL, "expected KEY = VALUE");
        return NULL;
    }
    if (e - s > RL_CONF_LINE_MAX || e - s >= num) {
        conf_fail(p, p->line, -EINVAL, "line is longer than %d bytes",
                  num - 1 < RL_CONF_LINE_MAX ? num - 1 : RL_CONF_LINE_MAX);
        return NULL;
    }
    memcpy(str, s, (size_t)(e - s) + 1);
    return str;
}

static int
conf_handler(void *user, const char *section, const char *name, const char *value)
{
    struct conf_parser *p = user;
    const struct conf_key *key;
    const char *why;
    size_t i;

    /* The reader keeps the section: libinih's copy of its name is cut to 49 bytes. */
    (void)section;
    if (p->err != 0) {
        return 0;
    }
    if (!p->in_section) {
        conf_fail(p, p->line, -EINVAL, "key \"%s\" is outside any section", name);
        return 0;
    }
    for (i = 0; i < CONF_NKEYS; i++) {
        if (conf_keys[i].kind == p->sec.kind && strcmp(conf_keys[i].name, name) == 0) {
            break;
        }
    }
    if (i == CONF_NKEYS) {
        conf_fail(p, p->line, -EINVAL, "unknown key \"%s\" in a [%s] section", name,
                  conf_kinds[p->sec.kind].name);
        return 0;
    }
    key = &conf_keys[i];
    if (!key->repeat && p->sec.seen[i] != 0) {
        conf_fail(p, p->line, -EINVAL, "duplicate key \"%s\" (first at line %d)", name,
                  p->sec.seen[i]);
        return 0;
    }
    p->sec.seen[i] = p->line;
    why = key->set(p, value);
    if (why != NULL) {
        conf_fail(p, p->line, -EINVAL, "%s: \"%s\" %s", name, value, why);
        return 0;
    }
    return 1;
}

/* Loading. */

static struct rl_conf *
conf_create(const char *name)
{
    struct rl_conf *c = calloc(1, sizeof(*c));

    if (c == NULL) {
        return NULL;
    }
    c->path = strdup(name);
    c->cluster_name = strdup("default");
    c->zookeeper = strdup("");
    c->session_timeout_ms = 4000;
    c->shards = 4096;
    c->router_host = strdup("127.0.0.1");
    c->router_port = 7400;
    c->deadline_ms = 50;
    c->request_log = strdup("");
    c->events_log = strdup("");
    c->throttle_events = 1024;
    c->events_log_max_size = 64ull << 20;
    c->events_log_keep = 4;
    c->events_log_rate = 100;
    c->secret_file = strdup("");
    c->log_sample = 1;
    c->log_max_size = 256ull << 20;
    c->log_keep = 4;
    c->clients = rl_conn_limits_default();
    if (c->path == NULL || c->cluster_name == NULL || c->zookeeper == NULL ||
        c->router_host == NULL || c->request_log == NULL || c->secret_file == NULL ||
        c->events_log == NULL) {
        rl_conf_destroy(c);
        return NULL;
    }
    return c;
}

/* Resolves a client's services line into its rules[] once every [service] is known. */
static void
client_resolve(struct conf_parser *p, struct rl_client_conf *cl)
{
    const struct rl_conf *c = p->c;
    char missing[RL_CONF_LINE_MAX + 1];
    int rc;

    cl->rules = calloc(c->nrules != 0 ? c->nrules : 1, sizeof(*cl->rules));
    if (cl->rules == NULL) {
        conf_nomem(p);
        return;
    }
    rc =
        rl_ruleset_resolve(cl->services, c, cl->rules, &cl->all_services, missing, sizeof(missing));
    if (rc == -ENOMEM) {
        conf_nomem(p);
    } else if (rc != 0) {
        conf_fail(p, cl->services_line, -EINVAL,
                  "services: \"%s\" has no [service %s] section in this file", missing, missing);
    }
}

/* What needs the whole file: clients' services, and the cluster secret's file. */
static void
conf_finish(struct conf_parser *p)
{
    struct rl_conf *c = p->c;
    char why[320];
    int rc;

    for (size_t i = 0; i < c->nauth_clients && p->err == 0; i++) {
        client_resolve(p, &c->auth_clients[i]);
    }
    c->rules_digest = rl_ruleset_digest(c);
    c->cluster_client.name = (char *)"cluster";
    c->cluster_client.all_services = true;
    c->cluster_client.stats = true;
    if (p->err != 0 || c->secret_file[0] == '\0') {
        return;
    }
    c->secret = malloc(RL_AUTH_TOKEN_MAX);
    if (c->secret == NULL) {
        conf_nomem(p);
        return;
    }
    rc = rl_auth_read_secret(c->secret_file, RL_AUTH_SECRET_MIN, c->secret, RL_AUTH_TOKEN_MAX,
                             &c->secret_len, why, sizeof(why));
    if (rc != 0) {
        conf_fail(p, p->secret_line, -EINVAL, "secret_file: %s", why);
        return;
    }
    rl_auth_sha256(c->secret, c->secret_len, c->secret_hash);
}

const struct rl_client_conf *
rl_conf_client_by_token(const struct rl_conf *c, const char *token, size_t len)
{
    const struct rl_client_conf *found = NULL;
    uint8_t h[RL_AUTH_HASH_LEN];

    rl_auth_sha256(token, len, h);
    /* Every hash is compared, whatever matched first. */
    for (size_t i = 0; i < c->nauth_clients; i++) {
        for (uint32_t j = 0; j < c->auth_clients[i].nhashes; j++) {
            if (rl_auth_equal(h, c->auth_clients[i].hashes[j], RL_AUTH_HASH_LEN) && found == NULL) {
                found = &c->auth_clients[i];
            }
        }
    }
    if (c->secret != NULL && rl_auth_equal(h, c->secret_hash, RL_AUTH_HASH_LEN) && found == NULL) {
        found = &c->cluster_client;
    }
    rl_auth_wipe(h, sizeof(h));
    return found;
}

bool
rl_conf_is_secret(const struct rl_conf *c, const char *token, size_t len)
{
    uint8_t h[RL_AUTH_HASH_LEN];
    bool ok;

    if (c->secret == NULL) {
        return false;
    }
    rl_auth_sha256(token, len, h);
    ok = rl_auth_equal(h, c->secret_hash, RL_AUTH_HASH_LEN);
    rl_auth_wipe(h, sizeof(h));
    return ok;
}

static int
conf_run(struct conf_parser *p, struct rl_conf **out)
{
    int rc;

    *out = NULL;
    if (p->msg != NULL && p->msglen != 0) {
        p->msg[0] = '\0';
    }
    p->c = conf_create(p->name);
    if (p->c == NULL) {
        conf_fail(p, 0, -ENOMEM, "out of memory");
        return p->err;
    }
    /*
     * libinih's options are process globals in Debian's build. conf is their only user in
     * ratelimiter and sets the same values on every load, which happens at start-up. The
     * reader already removes leading blanks, so turning multiline off is belt and braces;
     * the line length is what lets a long zookeeper list through.
     */
    ini_allow_multiline = false;
    ini_max_line = RL_CONF_LINE_MAX + 3;
    ini_initial_alloc = RL_CONF_LINE_MAX + 3;
    rc = ini_parse_stream(conf_reader, p, conf_handler, p);
    if (rc == -2) {
        conf_fail(p, p->line, -ENOMEM, "out of memory");
    } else if (rc != 0 && p->err == 0) {
        /* The reader refuses every line libinih could not parse, so this is a guard. */
        conf_fail(p, rc, -EINVAL, "syntax error");
    }
    free(p->buf);
    p->buf = NULL;
    if (p->err == 0) {
        conf_finish(p);
    }
    if (p->err != 0) {
        rl_conf_destroy(p->c);
        return p->err;
    }
    *out = p->c;
    return 0;
}

/*
 * The directory of the file name, absolute when it resolves (a process that changes its cwd
 * later still finds the files), else as written; NULL without memory.
 */
static char *
conf_dir(const char *name)
{
    const char *slash = strrchr(name, '/');
    char *dir, *real;

    if (slash == NULL) {
        dir = strdup(".");
    } else {
        dir = strndup(name, slash == name ? 1 : (size_t)(slash - name));
    }
    real = dir != NULL ? realpath(dir, NULL) : NULL;
    if (real != NULL) {
        free(dir);
        return real;
    }
    return dir;
}

/* Parses a file (text NULL) or a string, the whole config or only [service] sections. */
static int
conf_parse(const char *name, const char *text, bool rules_only, struct rl_conf **out, char *err,
           size_t errlen)
{
    struct conf_parser p;
    int rc;

    memset(&p, 0, sizeof(p));
    p.name = name;
    p.text = text;
    p.msg = err;
    p.msglen = errlen;
    p.rules_only = rules_only;
    if (text == NULL) {
        /* "e": O_CLOEXEC, so a process that forks never leaks the file into a child. */
        p.fp = fopen(name, "re");
        if (p.fp == NULL) {
            rc = -errno;
            conf_fail(&p, 0, rc, "%s", strerror(errno));
            *out = NULL;
            return rc;
        }
        p.dir = conf_dir(name);
        if (p.dir == NULL) {
            fclose(p.fp);
            conf_fail(&p, 0, -ENOMEM, "out of memory");
            *out = NULL;
            return -ENOMEM;
        }
    }
    rc = conf_run(&p, out);
    if (p.fp != NULL) {
        fclose(p.fp);
    }
    free(p.dir);
    return rc;
}

int
rl_conf_load(const char *path, struct rl_conf **out, char *err, size_t errlen)
{
    return conf_parse(path, NULL, false, out, err, errlen);
}

int
rl_conf_parse(const char *name, const char *text, struct rl_conf **out, char *err, size_t errlen)
{
    return conf_parse(name, text, false, out, err, errlen);
}

int
rl_conf_parse_rules(const char *name, const char *text, struct rl_conf **out, char *err,
                    size_t errlen)
{
    return conf_parse(name, text, true, out, err, errlen);
}

int
rl_conf_load_rules(const char *path, struct rl_conf **out, char *err, size_t errlen)
{
    return conf_parse(path, NULL, true, out, err, errlen);
}

void
rl_conf_destroy(struct rl_conf *c)
{
    size_t i;

    if (c == NULL) {
        return;
    }
    for (i = 0; i < c->nnodes; i++) {
        free(c->nodes[i].name);
        free(c->nodes[i].host);
        free(c->nodes[i].adv_host);
        free(c->nodes[i].metrics_host);
    }
    for (i = 0; i < c->nauth_clients; i++) {
        free(c->auth_clients[i].name);
        free(c->auth_clients[i].services);
        free(c->auth_clients[i].rules);
        rl_auth_wipe(c->auth_clients[i].hashes, sizeof(c->auth_clients[i].hashes));
    }
    free(c->auth_clients);
    if (c->secret != NULL) {
        rl_auth_wipe(c->secret, RL_AUTH_TOKEN_MAX);
        free(c->secret);
    }
    free(c->secret_file);
    free(c->nodes);
    rl_ruleset_deinit(c);
    free(c->request_log);
    free(c->events_log);
    free(c->router_host);
    free(c->router_metrics_host);
    free(c->zookeeper);
    free(c->cluster_name);
    free(c->path);
    free(c);
}
