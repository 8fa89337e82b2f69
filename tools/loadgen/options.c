/*
 * options: rl-bench's options, --help and --version (options.h).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"
#include "parse.h"
#include "tls.h"

static void
usage(FILE *f)
{
    fprintf(f, "usage: rl-bench [options]\n"
               "Sends CHECK requests (or ADJUST, RELEASE: --op) to a ratelimiter node or router\n"
               "and reports throughput, reply codes and latency.\n"
               "\n"
               "  --target HOST:PORT   server (default 127.0.0.1:7400, the router, as rl-cli)\n"
               "  --source ADDR        connect from this local IP address (e.g. 127.0.0.2:\n"
               "                       another client for a router's per-client shares)\n"
               "  --connections C      TCP connections in all (default 4)\n"
               "  --pipeline P         requests in flight per connection (default 64, <= 65536)\n"
               "  --threads N          worker threads, each with its own loop (default 1)\n"
               "  --keys K             distinct users \"u0\"..\"u<K-1>\" (default 1000000)\n"
               "  --dist uniform|zipf  how users are drawn (default uniform)\n"
               "  --zipf-s S           Zipf exponent, > 0 (default 1.0)\n"
               "  --sequential         users in order 0..K-1 (with --requests K: exactly K keys)\n"
               "  --service NAME       service (default \"bench\")\n"
               "  --endpoint E         endpoint (default nil)\n"
               "  --cost N             cost of each request (default 1); --op release: the\n"
               "                       slots each gives back (1..1000000)\n"
               "  --op OP              check, adjust or release: the request sent (default\n"
               "                       check); replies counted by code as CHECK's\n"
               "  --delta D            --op adjust: each ADJUST's delta, -1000000..1000000\n"
               "                       (default 1: a charge; < 0 a refund)\n"
               "  --duration SECONDS   how long to send (default 5; fractions allowed)\n"
               "  --requests N         send N requests instead of running for a duration\n"
               "  --seed N             fixed random seed: the same users in the same order\n"
               "  --rate R             open loop at R requests/s in all; latency counts from\n"
               "                       each request's scheduled time (default 0: closed loop)\n"
               "  --report-every SECS  print a line per interval\n"
               "  --json               print the summary (and interval lines) as JSON\n"
               "  --token-file FILE    AUTH with the token in FILE on every connection (mode\n"
               "                       0600); default $RL_TOKEN_FILE, none when unset\n"
               "  --tls-ca FILE        speak TLS, checking the server's certificate against\n"
               "                       the CA certificates in FILE (PEM)\n"
               "  --tls-cert FILE, --tls-key FILE\n"
               "                       this client's certificate and key, for a server that\n"
               "                       wants one (a node with TLS); the key mode 0600\n"
               "  --help, --version\n"
               "\n"
               "Exits 1 when it cannot connect or a connection fails, 2 on a usage error.\n"
               "^C stops sending, waits for the replies in flight, and prints the summary.\n");
}

/* A number in 0..max for an option: rl_parse_u64, 0 or -1. */
static int
parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    return rl_parse_u64(s, 0, max, out) == NULL ? 0 : -1;
}

static int
parse_double(const char *s, double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < 0) {
        return -1;
    }
    *out = v;
    return 0;
}

enum {
    OPT_TARGET = 256,
    OPT_SOURCE,
    OPT_CONNECTIONS,
    OPT_PIPELINE,
    OPT_KEYS,
    OPT_DIST,
    OPT_ZIPF_S,
    OPT_SERVICE,
    OPT_ENDPOINT,
    OPT_COST,
    OPT_DURATION,
    OPT_REQUESTS,
    OPT_RATE,
    OPT_SEQUENTIAL,
    OPT_REPORT,
    OPT_JSON,
    OPT_THREADS,
    OPT_SEED,
    OPT_TOKEN_FILE,
    OPT_TLS_CA,
    OPT_TLS_CERT,
    OPT_TLS_KEY,
    OPT_OP,
    OPT_DELTA,
    OPT_HELP,
    OPT_VERSION,
};

static const struct option long_opts[] = {
    {"target", required_argument, NULL, OPT_TARGET},
    {"source", required_argument, NULL, OPT_SOURCE},
    {"connections", required_argument, NULL, OPT_CONNECTIONS},
    {"pipeline", required_argument, NULL, OPT_PIPELINE},
    {"keys", required_argument, NULL, OPT_KEYS},
    {"dist", required_argument, NULL, OPT_DIST},
    {"zipf-s", required_argument, NULL, OPT_ZIPF_S},
    {"service", required_argument, NULL, OPT_SERVICE},
    {"endpoint", required_argument, NULL, OPT_ENDPOINT},
    {"cost", required_argument, NULL, OPT_COST},
    {"duration", required_argument, NULL, OPT_DURATION},
    {"requests", required_argument, NULL, OPT_REQUESTS},
    {"rate", required_argument, NULL, OPT_RATE},
    {"sequential", no_argument, NULL, OPT_SEQUENTIAL},
    {"report-every", required_argument, NULL, OPT_REPORT},
    {"json", no_argument, NULL, OPT_JSON},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"seed", required_argument, NULL, OPT_SEED},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"tls-ca", required_argument, NULL, OPT_TLS_CA},
    {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
    {"tls-key", required_argument, NULL, OPT_TLS_KEY},
    {"op", required_argument, NULL, OPT_OP},
    {"delta", required_argument, NULL, OPT_DELTA},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

/* Returns 0, 1 for --help/--version (done), or 2 after printing a usage error. */
int
lg_parse_opts(int argc, char **argv, struct opts *o)
{
    uint64_t v;
    int ch;
    const char *bad = NULL;

    o->target = "127.0.0.1:7400";
    o->connections = 4;
    o->pipeline = 64;
    o->keys = 1000000;
    o->dist = DIST_UNIFORM;
    o->zipf_s = 1.0;
    o->service = "bench";
    o->endpoint = NULL;
    o->cost = 1;
    o->op = RL_WIRE_OP_CHECK;
    o->delta = 1;
    o->duration = 5.0;
    o->threads = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
        switch (ch) {
        case OPT_TARGET:
            o->target = optarg;
            break;
        case OPT_SOURCE:
            memset(&o->source, 0, sizeof(o->source));
            if (uv_ip4_addr(optarg, 0, (struct sockaddr_in *)&o->source) != 0 &&
                uv_ip6_addr(optarg, 0, (struct sockaddr_in6 *)&o->source) != 0) {
                bad = "--source: expected an IPv4 or IPv6 address";
            }
            o->has_source = true;
            break;
        case OPT_TOKEN_FILE:
            o->token_file = optarg;
            break;
        case OPT_TLS_CA:
            o->tls_ca = optarg;
            break;
        case OPT_TLS_CERT:
            o->tls_cert = optarg;
            break;
        case OPT_TLS_KEY:
            o->tls_key = optarg;
            break;
        case OPT_CONNECTIONS:
            if (parse_u64(optarg, 100000, &v) != 0 || v == 0) {
                bad = "--connections: expected 1..100000";
            }
            o->connections = (unsigned)v;
            break;
        case OPT_PIPELINE:
            if (parse_u64(optarg, 65536, &v) != 0 || v == 0) {
                bad = "--pipeline: expected 1..65536";
            }
            o->pipeline = (unsigned)v;
            break;
        case OPT_KEYS:
            if (parse_u64(optarg, UINT32_MAX, &v) != 0 || v == 0) {
                bad = "--keys: expected 1..4294967295";
            }
            o->keys = (uint32_t)v;
            break;
        case OPT_DIST:
            if (strcmp(optarg, "uniform") == 0) {
                o->dist = DIST_UNIFORM;
            } else if (strcmp(optarg, "zipf") == 0) {
                o->dist = DIST_ZIPF;
            } else {
                bad = "--dist: expected uniform or zipf";
            }
            break;
        case OPT_ZIPF_S:
            if (parse_double(optarg, &o->zipf_s) != 0 || o->zipf_s <= 0 || o->zipf_s > 100) {
                bad = "--zipf-s: expected a number in (0, 100]";
            }
            break;
        case OPT_SERVICE:
            o->service = optarg;
            if (strlen(optarg) == 0 || strlen(optarg) > RL_WIRE_SERVICE_MAX) {
                bad = "--service: expected 1..128 bytes";
            }
            break;
        case OPT_ENDPOINT:
            o->endpoint = optarg;
            if (strlen(optarg) > RL_WIRE_ENDPOINT_MAX) {
                bad = "--endpoint: expected at most 128 bytes";
            }
            break;
        case OPT_COST:
            if (parse_u64(optarg, UINT32_MAX, &v) != 0) {
                bad = "--cost: expected 0..4294967295";
            }
            o->cost = (uint32_t)v;
            break;
        case OPT_OP:
            if (strcmp(optarg, "check") == 0) {
                o->op = RL_WIRE_OP_CHECK;
            } else if (strcmp(optarg, "adjust") == 0) {
                o->op = RL_WIRE_OP_ADJUST;
            } else if (strcmp(optarg, "release") == 0) {
                o->op = RL_WIRE_OP_RELEASE;
            } else {
                bad = "--op: expected check, adjust or release";
            }
            break;
        case OPT_DELTA: {
            bool neg = optarg[0] == '-';

            if (parse_u64(neg ? optarg + 1 : optarg, RL_WIRE_DELTA_MAX, &v) != 0) {
                bad = "--delta: expected -1000000..1000000";
            }
            o->delta = neg ? -(int32_t)v : (int32_t)v;
            break;
        }
        case OPT_DURATION:
            if (parse_double(optarg, &o->duration) != 0 || o->duration <= 0 || o->duration > 1e7) {
                bad = "--duration: expected a positive number of seconds";
            }
            break;
        case OPT_REQUESTS:
            if (parse_u64(optarg, UINT64_MAX / 2, &o->requests) != 0 || o->requests == 0) {
                bad = "--requests: expected a positive count";
            }
            break;
        case OPT_RATE:
            if (parse_double(optarg, &o->rate) != 0 || o->rate > 1e9) {
                bad = "--rate: expected requests per second, 0..1e9";
            }
            break;
        case OPT_SEQUENTIAL:
            o->sequential = true;
            break;
        case OPT_SEED:
            if (parse_u64(optarg, UINT64_MAX, &o->seed) != 0 || o->seed == 0) {
                bad = "--seed: expected a positive integer";
            }
            break;
        case OPT_REPORT:
            if (parse_double(optarg, &o->report_every) != 0 || o->report_every < 0.001) {
                bad = "--report-every: expected seconds, at least 0.001";
            }
            break;
        case OPT_JSON:
            o->json = true;
            break;
        case OPT_THREADS:
            if (parse_u64(optarg, 256, &v) != 0 || v == 0) {
                bad = "--threads: expected 1..256";
            }
            o->threads = (unsigned)v;
            break;
        case OPT_HELP:
            usage(stdout);
            return 1;
        case OPT_VERSION:
            printf("rl-bench %s\n", RL_VERSION);
            return 1;
        default:
            bad = "unknown option";
            if (optopt == 0 && optind > 0 && optind <= argc) {
                fprintf(stderr, "rl-bench: unknown or incomplete option %s\n", argv[optind - 1]);
                bad = "";
            }
            break;
        }
        if (bad != NULL) {
            break;
        }
    }
    if (bad == NULL && optind < argc) {
        fprintf(stderr, "rl-bench: unexpected argument %s\n", argv[optind]);
        bad = "";
    }
    if (bad == NULL && o->op == RL_WIRE_OP_RELEASE &&
        (o->cost == 0 || o->cost > RL_WIRE_COUNT_MAX)) {
        bad = "--op release: --cost (the count) must be 1..1000000";
    }
    if (bad == NULL && o->threads > o->connections) {
        bad = "--threads: at most one thread per connection";
    }
    if (bad == NULL && o->token_file == NULL) {
        o->token_file = getenv("RL_TOKEN_FILE");
    }
    if (bad == NULL && o->token_file != NULL && o->token_file[0] != '\0') {
        static char why[320];

        if (rl_auth_read_secret(o->token_file, 1, o->token, sizeof(o->token), &o->token_len, why,
                                sizeof(why)) != 0) {
            bad = why;
        }
    }
    if (bad == NULL && (o->tls_ca != NULL || o->tls_cert != NULL || o->tls_key != NULL)) {
        static char why[512];

        if (o->tls_ca == NULL) {
            bad = "--tls-cert and --tls-key need --tls-ca";
        } else if (rl_tls_ctx_new(&o->tls, RL_TLS_CLIENT, o->tls_cert, o->tls_key, o->tls_ca,
                                  NULL, why, sizeof(why)) != 0) {
            bad = why;
        }
    }
    if (bad != NULL) {
        if (*bad != '\0') {
            fprintf(stderr, "rl-bench: %s\n", bad);
        }
        fprintf(stderr, "try rl-bench --help\n");
        return 2;
    }
    return 0;
}
