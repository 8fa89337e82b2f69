/*
 * check_prometheus: the metrics as a real Prometheus (Debian's prometheus and promtool,
 * installed by scripts/deps.sh) sees them, with real rl-node and rl-router processes (static
 * membership, nodes a and b, each process with `metrics = 127.0.0.1:PORT`), and the files of
 * deploy/. Asserted:
 *   - `promtool check metrics` accepts a scrape of the router and of each node;
 *   - `promtool check rules deploy/prometheus/alerts.yml` and `promtool test rules
 *     deploy/prometheus/alerts_test.yml` exit 0;
 *   - after known traffic through the router (users placed on each node as the router's table
 *     places them, each sending more CHECKs than their fixed window allows, plus CHECKs of a
 *     service with no rule) and a scrape of every target that started after it, Prometheus's
 *     query API answers exactly: the router's decisions by code (allowed A, limited L,
 *     no_rule N), the nodes' decisions (A, L; each node its own users' share), forwards (A+L
 *     in all, per node its share), the router's request histogram _count (A+L+N), no policy
 *     answers, up == 1 for all three targets;
 *   - /api/v1/rules lists every rule of alerts.yml, each evaluated with health "ok", and no
 *     alert is pending or firing on this healthy cluster;
 *   - every PromQL expr of deploy/grafana/ratelimiter.json (Grafana's $__ variables and the
 *     dashboard's own replaced) is accepted by Prometheus (status success) and the panels'
 *     datasource is the ${DS_PROMETHEUS} input.

 *   - with ZooKeeper instead (issue 20): `rl-cli rules push` of a service name that is not
 *     UTF-8 is refused (exit 2, FILE:LINE and the byte offset) and writes nothing; the same
 *     text put in the rules znode by hand is refused by every process; printable UTF-8 names
 *     (and a quote and backslashes) are taken; after each, every page passes `promtool check
 *     metrics`.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "reqclient.h"
#include "harness.h"
#include "httpget.h"
#include "rltest.h"
#include "shardmap.h"
#include "wire.h"

#define SHARDS 64
#define LIMIT 5 /* the fixed window of service api */
#define SENDS 8 /* CHECKs per user: LIMIT allowed, SENDS - LIMIT limited */
#define USERS_PER_NODE 4
#define NO_RULE_SENDS 7
#define T_TIMEOUT 5000
#define SCRAPE_WAIT_MS 30000

enum { NODE_A, NODE_B, NNODES };

static const char *const node_names[NNODES] = {"a", "b"};
static const char alerts_path[] = RL_SOURCE_DIR "/deploy/prometheus/alerts.yml";
static const char alerts_test_path[] = RL_SOURCE_DIR "/deploy/prometheus/alerts_test.yml";
static const char dashboard_path[] = RL_SOURCE_DIR "/deploy/grafana/ratelimiter.json";
static const char *const alert_names[] = {
    "RateLimiterNodeDown",
    "RateLimiterRouterDown",
    "RateLimiterNotReady",
    "RateLimiterZooKeeperDisconnected",
    "RateLimiterPolicyAnswersRising",
    "RateLimiterBackstopRefusing",
    "RateLimiterHandoffsFailed",
    "RateLimiterMemoryNearCap",
    "RateLimiterRequestLogDrops",
};

static int node_ports[NNODES], node_mports[NNODES], router_port, router_mport, prom_port;
static struct rl_harness_server nodes[NNODES], router;
static pid_t prom_pid;
static char prom_log[PATH_MAX];

static int64_t
mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double
wall_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
free_port(void)
{
    int p = rl_harness_free_port();

    ck_assert_int_gt(p, 0);
    return p;
}

/* Runs a shell command, its output into out (NUL-terminated, truncated); the exit status, or
 * -1 if it did not exit normally. */
static int
run(const char *cmd, char *out, size_t len)
{
    FILE *f = popen(cmd, "r");
    size_t n = 0;
    int st;

    ck_assert_msg(f != NULL, "popen %s: %s", cmd, strerror(errno));
    while (n + 1 < len) {
        size_t r = fread(out + n, 1, len - 1 - n, f);

        if (r == 0) {
            break;
        }
        n += r;
    }
    out[n] = '\0';
    {
        char sink[4096];

        while (fread(sink, 1, sizeof(sink), f) > 0) {
        }
    }
    st = pclose(f);
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Picks the ports, writes the config (cluster: its [cluster] section, shards = SHARDS) into
 * conf, starts nodes a and b and the router, and waits for their metrics listeners. */
static void
start_processes(char *conf, size_t len, const char *cluster)
{
    for (int i = 0; i < NNODES; i++) {
        node_ports[i] = free_port();
        node_mports[i] = free_port();
    }
    router_port = free_port();
    router_mport = free_port();
    ck_assert_int_eq(rl_harness_tmppath(conf, len, "cluster.conf"), 0);
    ck_assert_int_eq(rl_harness_write_file(conf,
                                           "%sshards = %d\n"
                                           /* every refusal reaches its node, which
                                              the node families below count */
                                           "[router]\nlisten = 127.0.0.1:%d\n"
                                           "deny_cache = off\n"
                                           "metrics = 127.0.0.1:%d\n"
                                           "[node a]\nlisten = 127.0.0.1:%d\n"
                                           "metrics = 127.0.0.1:%d\n"
                                           "[node b]\nlisten = 127.0.0.1:%d\n"
                                           "metrics = %d\n" /* a bare port: 127.0.0.1 */
                                           "[service api]\nlimit = fixed_window %d per 1h\n",
                                           cluster, SHARDS, router_port, router_mport,
                                           node_ports[NODE_A], node_mports[NODE_A],
                                           node_ports[NODE_B], node_mports[NODE_B], LIMIT),
                     0);
    memset(nodes, 0, sizeof(nodes));
    memset(&router, 0, sizeof(router));
    for (int i = 0; i < NNODES; i++) {
        ck_assert_int_eq(rl_harness_node_start(&nodes[i], conf, node_names[i], node_ports[i], 0),
                         0);
    }
    ck_assert_int_eq(rl_harness_router_start(&router, conf, router_port), 0);
    for (int i = 0; i < NNODES; i++) {
        ck_assert_int_eq(rl_harness_wait_port("127.0.0.1", node_mports[i], 5000), 0);
    }
    ck_assert_int_eq(rl_harness_wait_port("127.0.0.1", router_mport, 5000), 0);
}

static void
setup(void)
{
    char conf[PATH_MAX], yml[PATH_MAX], tsdb[PATH_MAX], listen[64], cfgarg[PATH_MAX + 32],
        tsdbarg[PATH_MAX + 32];
    char out[256];

    /* Fail early and clearly without the tools (scripts/deps.sh installs them). */
    ck_assert_msg(run("command -v prometheus && command -v promtool", out, sizeof(out)) == 0,
                  "prometheus and promtool are needed (Debian package prometheus: run "
                  "scripts/deps.sh)");
    start_processes(conf, sizeof(conf), "[cluster]\nname = prom\n");
    prom_port = free_port();

    ck_assert_int_eq(rl_harness_tmppath(yml, sizeof(yml), "prometheus.yml"), 0);
    ck_assert_int_eq(rl_harness_tmppath(tsdb, sizeof(tsdb), "prom-data"), 0);
    ck_assert_int_eq(rl_harness_tmppath(prom_log, sizeof(prom_log), "prometheus.log"), 0);
    ck_assert_int_eq(rl_harness_write_file(yml,
                                           "global:\n"
                                           "  scrape_interval: 1s\n"
                                           "  scrape_timeout: 1s\n"
                                           "  evaluation_interval: 1s\n"
                                           "rule_files:\n"
                                           "  - %s\n"
                                           "scrape_configs:\n"
                                           "  - job_name: rl-router\n"
                                           "    static_configs:\n"
                                           "      - targets: ['127.0.0.1:%d']\n"
                                           "  - job_name: rl-node\n"
                                           "    static_configs:\n"
                                           "      - targets: ['127.0.0.1:%d', '127.0.0.1:%d']\n",
                                           alerts_path, router_mport, node_mports[NODE_A],
                                           node_mports[NODE_B]),
                     0);
    snprintf(cfgarg, sizeof(cfgarg), "--config.file=%s", yml);
    snprintf(tsdbarg, sizeof(tsdbarg), "--storage.tsdb.path=%s", tsdb);
    snprintf(listen, sizeof(listen), "--web.listen-address=127.0.0.1:%d", prom_port);
    {
        const char *const argv[] = {"prometheus",
                                    cfgarg,
                                    tsdbarg,
                                    listen,
                                    "--log.level=warn",
                                    "--storage.tsdb.retention.time=1h",
                                    NULL};
        int rc = rl_harness_spawn(argv, prom_log, &prom_pid);

        ck_assert_msg(rc == 0, "cannot start prometheus: %s", strerror(-rc));
    }
}

static void
teardown(void)
{
    rl_harness_cleanup();
}

/* ---- talking to Prometheus ---- */

/* GET path from Prometheus into r (status 200 or 400/422 with a JSON error). */
static void
prom_get(const char *path, struct rl_http_resp *r)
{
    int rc = rl_http_get(prom_port, path, T_TIMEOUT, r);

    if (rc != 0) {
        rl_harness_print_log(prom_log, 30);
    }
    ck_assert_msg(rc == 0, "GET %s from prometheus: %s", path, strerror(-rc));
}

/*
 * Runs an instant query. Returns how many samples the answer holds (-1 if Prometheus
 * refused it: *err then holds its error) and the first one's value in *v (NAN if none).
 */
static int
prom_query(const char *query, double *v, char *err, size_t errlen)
{
    char enc[8192], path[8400];
    struct rl_http_resp r;
    int n = 0;
    const char *p;

    *v = NAN;
    ck_assert_int_ge(rl_http_urlencode(enc, sizeof(enc), query), 0);
    snprintf(path, sizeof(path), "/api/v1/query?query=%s", enc);
    prom_get(path, &r);
    if (strstr(r.body, "\"status\":\"success\"") == NULL) {
        if (err != NULL) {
            snprintf(err, errlen, "HTTP %d: %s", r.status, r.body);
        }
        rl_http_free(&r);
        return -1;
    }
    ck_assert_int_eq(r.status, 200);
    /* {"status":"success","data":{"resultType":"vector","result":[{"metric":{...},
     * "value":[1700000000.123,"50"]},...]}} (a scalar: "result":[ts,"v"]) */
    for (p = r.body; (p = strstr(p, "\"value\":[")) != NULL; p++) {
        const char *q = strstr(p, ",\"");

        ck_assert_msg(q != NULL, "bad answer to %s: %s", query, r.body);
        if (n++ == 0) {
            *v = strtod(q + 2, NULL);
        }
    }
    if (n == 0 && (p = strstr(r.body, "\"resultType\":\"scalar\",\"result\":[")) != NULL) {
        const char *q = strstr(p, ",\"");

        ck_assert_ptr_nonnull(q);
        *v = strtod(q + 2, NULL);
        n = 1;
    }
    rl_http_free(&r);
    return n;
}

/* The single value a query must have. */
static double
prom_value(const char *query)
{
    char err[1024] = "";
    double v;
    int n = prom_query(query, &v, err, sizeof(err));

    ck_assert_msg(n >= 0, "query %s: %s", query, err);
    ck_assert_msg(n == 1, "query %s: %d samples, not 1", query, n);
    return v;
}

static void
expect(const char *query, double want)
{
    double v = prom_value(query);

    ck_assert_msg(v == want, "%s = %.17g, not %.17g", query, v, want);
}

/* Waits until Prometheus is ready and every target has been scraped, successfully, at or
 * after wall time t (seconds). */
static void
wait_scraped_after(double t)
{
    int64_t deadline = mono_ms() + SCRAPE_WAIT_MS;
    char err[1024];
    double v = NAN, up = NAN;
    int n = -1;

    for (;;) {
        struct rl_http_resp r;

        if (rl_http_get(prom_port, "/-/ready", 1000, &r) == 0) {
            int status = r.status;

            rl_http_free(&r);
            if (status == 200) {
                n = prom_query("count(up == 1)", &up, err, sizeof(err));
                if (n == 1 && up == 3) {
                    n = prom_query("min(timestamp(up))", &v, err, sizeof(err));
                    if (n == 1 && v >= t) {
                        return;
                    }
                }
            }
        }
        if (mono_ms() >= deadline) {
            break;
        }
        if (waitpid(prom_pid, NULL, WNOHANG) != 0) {
            rl_harness_print_log(prom_log, 40);
            ck_abort_msg("prometheus exited");
        }
        usleep(200 * 1000);
    }
    rl_harness_print_log(prom_log, 40);
    ck_abort_msg("no scrape of every target after the traffic within %d ms (up: %g, oldest "
                 "scrape %.3f, traffic ended %.3f)",
                 SCRAPE_WAIT_MS, up, v, t);
}

/* Waits until every rule of alerts.yml has been evaluated; returns the /api/v1/rules answer
 * (free it). */
static void
wait_rules(struct rl_http_resp *r)
{
    int64_t deadline = mono_ms() + SCRAPE_WAIT_MS;
    size_t nalerts = sizeof(alert_names) / sizeof(alert_names[0]);

    for (;;) {
        size_t ok = 0;

        prom_get("/api/v1/rules", r);
        ck_assert_int_eq(r->status, 200);
        for (const char *p = r->body; (p = strstr(p, "\"health\":\"ok\"")) != NULL; p++) {
            ok++;
        }
        ck_assert_msg(strstr(r->body, "\"health\":\"err\"") == NULL, "a rule failed: %s", r->body);
        if (ok == nalerts) {
            return;
        }
        ck_assert_msg(mono_ms() < deadline, "rules not all evaluated: %s", r->body);
        rl_http_free(r);
        usleep(200 * 1000);
    }
}

/* ---- traffic ---- */

/* The node (NODE_A, NODE_B) owning (svc, user) in the table the router builds. */
static int
owner_of(const struct rl_shardmap *map, const char *svc, const char *user)
{
    uint64_t h = rl_shardmap_key_hash(svc, strlen(svc), user, strlen(user));
    uint32_t o = rl_shardmap_owner(map, rl_shardmap_shard(h, SHARDS));

    ck_assert_uint_ne(o, RL_SHARDMAP_NONE);
    for (int i = 0; i < NNODES; i++) {
        if (strcmp(map->members[o].name, node_names[i]) == 0) {
            return i;
        }
    }
    ck_abort_msg("owner %s is not a node of the config", map->members[o].name);
    return -1;
}

/* Sends the traffic; returns A, L and N by code in want[], and each node's share in share[]. */
static void
send_traffic(uint64_t *allowed, uint64_t *limited, uint64_t *no_rule, uint64_t share[NNODES])
{
    struct rl_member members[NNODES] = {0};
    struct rl_shardmap *map = NULL;
    struct rl_client *c = NULL;
    struct rl_wire_reply rep;
    int placed[NNODES] = {0};
    char user[32];

    for (int i = 0; i < NNODES; i++) {
        snprintf(members[i].name, sizeof(members[i].name), "%s", node_names[i]);
        snprintf(members[i].addr, sizeof(members[i].addr), "127.0.0.1:%d", node_ports[i]);
    }
    ck_assert_int_eq(rl_shardmap_create(&map, SHARDS, members, NNODES, NULL), 0);
    ck_assert_int_eq(rl_client_connect(&c, "127.0.0.1", (uint16_t)router_port, T_TIMEOUT), 0);
    *allowed = *limited = *no_rule = 0;
    share[NODE_A] = share[NODE_B] = 0;
    for (int u = 0; placed[NODE_A] < USERS_PER_NODE || placed[NODE_B] < USERS_PER_NODE; u++) {
        int node;

        ck_assert_int_lt(u, 10000);
        snprintf(user, sizeof(user), "user%d", u);
        node = owner_of(map, "api", user);
        if (placed[node] == USERS_PER_NODE) {
            continue;
        }
        placed[node]++;
        for (int k = 0; k < SENDS; k++) {
            ck_assert_int_eq(rl_client_check(c, "api", user, NULL, 1, &rep, T_TIMEOUT), 0);
            ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
            ck_assert_uint_eq(rep.check.code, k < LIMIT ? RL_WIRE_ALLOWED : RL_WIRE_LIMITED);
            *(k < LIMIT ? allowed : limited) += 1;
            share[node]++;
        }
    }
    for (int k = 0; k < NO_RULE_SENDS; k++) {
        snprintf(user, sizeof(user), "who%d", k);
        ck_assert_int_eq(rl_client_check(c, "unruled", user, NULL, 1, &rep, T_TIMEOUT), 0);
        ck_assert_uint_eq(rep.op, RL_WIRE_OP_CHECK);
        ck_assert_uint_eq(rep.check.code, RL_WIRE_NO_RULE);
        (*no_rule)++;
    }
    rl_client_destroy(c);
    rl_shardmap_destroy(map);
}

/* ---- the dashboard ---- */

/* Replaces Grafana's variables in a PromQL expression: what Grafana would send. */
static void
grafana_expand(const char *in, char *out, size_t len)
{
    static const struct {
        const char *var, *with;
    } vars[] = {
        {"$__rate_interval", "1m"}, {"${__rate_interval}", "1m"}, {"$__interval", "15s"},
        {"${__interval}", "15s"},   {"$__range", "1h"},           {"${__range}", "1h"},
        {"$instance", ".*"},        {"${instance}", ".*"},        {"$service", ".*"},
        {"${service}", ".*"},
    };
    size_t n = 0;

    while (*in != '\0' && n + 1 < len) {
        bool done = false;

        for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]) && !done; i++) {
            size_t vl = strlen(vars[i].var), wl = strlen(vars[i].with);

            if (strncmp(in, vars[i].var, vl) == 0 && n + wl + 1 < len) {
                memcpy(out + n, vars[i].with, wl);
                n += wl;
                in += vl;
                done = true;
            }
        }
        if (!done) {
            out[n++] = *in++;
        }
    }
    out[n] = '\0';
    ck_assert_msg(strchr(out, '$') == NULL, "a variable the test does not know in %s", out);
}

/* Reads the JSON string that starts at p (after its opening quote) into out, unescaped;
 * returns the character after its closing quote. */
static const char *
json_string(const char *p, char *out, size_t len)
{
    size_t n = 0;

    for (; *p != '\0' && *p != '"'; p++) {
        char c = *p;

        if (c == '\\') {
            p++;
            switch (*p) {
            case 'n':
                c = '\n';
                break;
            case 't':
                c = '\t';
                break;
            case 'r':
                c = '\r';
                break;
            case '"':
            case '\\':
            case '/':
                c = *p;
                break;
            default:
                ck_abort_msg("JSON escape \\%c not handled by the test", *p);
            }
        }
        ck_assert_uint_lt(n + 1, len);
        out[n++] = c;
    }
    ck_assert_int_eq(*p, '"');
    out[n] = '\0';
    return p + 1;
}

static void
check_dashboard(void)
{
    static char json[1 << 20];
    char expr[4096], expanded[4096], err[2048];
    int len = rl_harness_read_file(dashboard_path, json, sizeof(json));
    int nexpr = 0;

    ck_assert_msg(len > 0, "cannot read %s: %s", dashboard_path, strerror(-len));
    ck_assert_int_lt(len, (int)sizeof(json) - 1);
    ck_assert_msg(strstr(json, "\"${DS_PROMETHEUS}\"") != NULL, "no ${DS_PROMETHEUS} datasource");
    ck_assert_msg(strstr(json, "\"name\": \"DS_PROMETHEUS\"") != NULL, "no DS_PROMETHEUS input");
    for (const char *p = json; (p = strstr(p, "\"expr\"")) != NULL;) {
        double v;
        int n;

        p += strlen("\"expr\"");
        while (*p == ' ' || *p == ':') {
            p++;
        }
        ck_assert_int_eq(*p, '"');
        p = json_string(p + 1, expr, sizeof(expr));
        if (expr[0] == '\0') {
            continue;
        }
        grafana_expand(expr, expanded, sizeof(expanded));
        n = prom_query(expanded, &v, err, sizeof(err));
        ck_assert_msg(n >= 0, "dashboard expr %s refused: %s", expanded, err);
        nexpr++;
    }
    ck_assert_int_ge(nexpr, 15);
    fprintf(stderr, "check_prometheus: %d dashboard exprs accepted\n", nexpr);
}

/* ---- the test ---- */

START_TEST(promtool_files)
{
    char out[16384], cmd[PATH_MAX * 2];

    snprintf(cmd, sizeof(cmd), "promtool check rules '%s' 2>&1", alerts_path);
    ck_assert_msg(run(cmd, out, sizeof(out)) == 0, "%s:\n%s", cmd, out);
    snprintf(cmd, sizeof(cmd), "promtool test rules '%s' 2>&1", alerts_test_path);
    ck_assert_msg(run(cmd, out, sizeof(out)) == 0, "%s:\n%s", cmd, out);
    ck_assert_ptr_nonnull(strstr(out, "SUCCESS"));
}
END_TEST

/* Scrapes /metrics of the listener on port, which must hold each of want[] (NULL-ended), and
 * has `promtool check metrics` judge the page; the page into r (free it). */
static void
scrape_promtool(int port, const char *const want[], struct rl_http_resp *r)
{
    static int nscrapes;
    char path[PATH_MAX], cmd[PATH_MAX + 64], out[8192];

    /* A loaded machine may still be bringing the process to ready (its first view, the
     * links to the nodes): the page is read again until it holds every want[] (a wait of up
     * to 30 s, not an assertion on time). */
    for (int tries = 0;; tries++) {
        size_t k;

        ck_assert_int_eq(rl_http_get(port, "/metrics", T_TIMEOUT, r), 0);
        ck_assert_int_eq(r->status, 200);
        for (k = 0; want != NULL && want[k] != NULL && strstr(r->body, want[k]) != NULL; k++) {
        }
        if (want == NULL || want[k] == NULL) {
            break;
        }
        /* (the page is cut in the message: Check refuses messages past a few KiB) */
        ck_assert_msg(tries < 300, "no %s in the page of port %d:\n%.2000s", want[k], port,
                      r->body);
        rl_http_free(r);
        usleep(100 * 1000);
    }
    ck_assert_int_eq(rl_harness_tmppath(path, sizeof(path), "scrape-%d.txt", nscrapes++), 0);
    ck_assert_int_eq(rl_harness_write_file(path, "%s", r->body), 0);
    snprintf(cmd, sizeof(cmd), "promtool check metrics < '%s' 2>&1", path);
    ck_assert_msg(run(cmd, out, sizeof(out)) == 0, "%s (port %d):\n%s", cmd, port, out);
}

START_TEST(scrapes_pass_promtool)
{
    const int ports[] = {router_mport, node_mports[NODE_A], node_mports[NODE_B]};

    for (size_t i = 0; i < sizeof(ports) / sizeof(ports[0]); i++) {
        const char *want[] = {i == 0 ? "\nrl_router_ready 1\n" : "\nrl_node_ready 1\n", NULL};
        struct rl_http_resp r;

        scrape_promtool(ports[i], want, &r);
        rl_http_free(&r);
        ck_assert_int_eq(rl_http_get(ports[i], "/readyz", T_TIMEOUT, &r), 0);
        ck_assert_int_eq(r.status, 200);
        rl_http_free(&r);
    }
}
END_TEST

START_TEST(prometheus_sees_traffic)
{
    uint64_t a, l, nr, share[NNODES];
    double t_end;
    int64_t t0 = mono_ms();
    char q[512];
    struct rl_http_resp r;

    send_traffic(&a, &l, &nr, share);
    t_end = wall_s();
    ck_assert_uint_eq(a, 2 * USERS_PER_NODE * LIMIT);
    ck_assert_uint_eq(l, 2 * USERS_PER_NODE * (SENDS - LIMIT));
    wait_scraped_after(t_end);
    fprintf(stderr, "check_prometheus: scraped after the traffic in %lld ms\n",
            (long long)(mono_ms() - t0));

    expect("sum(rl_router_decisions_total{code=\"allowed\"})", (double)a);
    expect("sum(rl_router_decisions_total{code=\"limited\"})", (double)l);
    expect("sum(rl_router_decisions_total{code=\"no_rule\"})", (double)nr);
    expect("sum(rl_router_decisions_total{code=~\"fail_open|fail_closed\"})", 0);
    expect("sum(rl_router_decisions_total{service=\"api\"})", (double)(a + l));
    expect("sum(rl_node_decisions_total{code=\"allowed\"})", (double)a);
    expect("sum(rl_node_decisions_total{code=\"limited\"})", (double)l);
    expect("sum(rl_node_decisions_total{code=\"no_rule\"})", 0);
    expect("sum(rl_router_forwarded_total)", (double)(a + l));
    expect("rl_router_request_duration_seconds_count", (double)(a + l + nr));
    expect("rl_router_request_duration_seconds_bucket{le=\"+Inf\"}", (double)(a + l + nr));
    expect("sum(rl_node_decision_duration_seconds_count)", (double)(a + l));
    expect("sum(rl_router_policy_answers_total)", 0);
    for (int i = 0; i < NNODES; i++) {
        snprintf(q, sizeof(q), "rl_router_forwarded_total{node=\"%s\"}", node_names[i]);
        expect(q, (double)share[i]);
        snprintf(q, sizeof(q), "sum(rl_node_decisions_total{instance=\"127.0.0.1:%d\"})",
                 node_mports[i]);
        expect(q, (double)share[i]);
        snprintf(q, sizeof(q), "rl_node_keys{instance=\"127.0.0.1:%d\",service=\"api\"}",
                 node_mports[i]);
        expect(q, USERS_PER_NODE);
        snprintf(q, sizeof(q), "rl_router_node_up{node=\"%s\"}", node_names[i]);
        expect(q, 1);
        snprintf(q, sizeof(q), "up{job=\"rl-node\",instance=\"127.0.0.1:%d\"}", node_mports[i]);
        expect(q, 1);
        snprintf(q, sizeof(q), "rl_build_info{job=\"rl-node\",name=\"%s\"}", node_names[i]);
        expect(q, 1);
    }
    snprintf(q, sizeof(q), "up{job=\"rl-router\",instance=\"127.0.0.1:%d\"}", router_mport);
    expect(q, 1);
    expect("count(up)", 3);
    expect("rl_router_members", NNODES);
    expect("rl_router_shards_unowned", 0);
    expect("sum(rl_router_node_shards)", SHARDS);
    expect("min(rl_node_ready)", 1);
    expect("rl_router_ready", 1);
    expect("count(process_resident_memory_bytes > 0)", 3);

    /* The alert rules: loaded, evaluated fine, and quiet on a healthy cluster. */
    wait_rules(&r);
    ck_assert_ptr_nonnull(strstr(r.body, "\"name\":\"ratelimiter.availability\""));
    ck_assert_ptr_nonnull(strstr(r.body, "\"name\":\"ratelimiter.decisions\""));
    ck_assert_ptr_nonnull(strstr(r.body, "\"name\":\"ratelimiter.resources\""));
    for (size_t i = 0; i < sizeof(alert_names) / sizeof(alert_names[0]); i++) {
        char want[128];

        snprintf(want, sizeof(want), "\"name\":\"%s\"", alert_names[i]);
        ck_assert_msg(strstr(r.body, want) != NULL, "rule %s not loaded", alert_names[i]);
    }
    rl_http_free(&r);
    prom_get("/api/v1/alerts", &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_msg(strstr(r.body, "\"state\":\"firing\"") == NULL &&
                      strstr(r.body, "\"state\":\"pending\"") == NULL,
                  "alerts on a healthy cluster: %s", r.body);
    rl_http_free(&r);

    check_dashboard();
    fprintf(stderr, "check_prometheus: the Prometheus test took %lld ms\n",
            (long long)(mono_ms() - t0));
}
END_TEST

/* ---- names that are not UTF-8: the rules push ---- */

static struct rl_harness_zk zk;
static char zk_conf[PATH_MAX];

/* The same three processes and listeners, with ZooKeeper (its rules znode), no Prometheus. */
static void
zk_setup(void)
{
    char cluster[256];

    memset(&zk, 0, sizeof(zk));
    ck_assert_int_eq(rl_harness_zk_start(&zk), 0);
    snprintf(cluster, sizeof(cluster),
             "[cluster]\nname = names\nzookeeper = %s\nsession_timeout = 2s\n", zk.connect);
    start_processes(zk_conf, sizeof(zk_conf), cluster);
}

/* Waits until every process's page holds line (e.g. its reload failures), then has promtool
 * judge each page, which must not hold avoid. */
static void
pages_settle(const char *line, const char *avoid)
{
    const int ports[] = {router_mport, node_mports[NODE_A], node_mports[NODE_B]};
    const char *want[] = {line, NULL};

    for (size_t i = 0; i < sizeof(ports) / sizeof(ports[0]); i++) {
        struct rl_http_resp r;

        for (int waited = 0;; waited += 100) {
            ck_assert_int_eq(rl_http_get(ports[i], "/metrics", T_TIMEOUT, &r), 0);
            if (strstr(r.body, line) != NULL) {
                break;
            }
            ck_assert_msg(waited < 10000, "no %s in the page of port %d:\n%s", line, ports[i],
                          r.body);
            rl_http_free(&r);
            usleep(100 * 1000);
        }
        rl_http_free(&r);
        scrape_promtool(ports[i], want, &r);
        ck_assert_msg(avoid == NULL || strstr(r.body, avoid) == NULL, "%s in:\n%s", avoid, r.body);
        rl_http_free(&r);
    }
}

/*
 * issue 20: `rl-cli rules push` of `[service bad\xff\xfe]` is refused (exit 2, FILE:LINE and
 * the byte offset) and nothing is written; the same text written to the rules znode behind
 * rl-cli's back (an older rl-cli, a hand edit) is refused by every process, whose pages still
 * pass promtool; a push of names in printable UTF-8 is taken and its labels pass too.
 */
START_TEST(bad_name_push_refused)
{
    static const char bad_text[] = "[service api]\nlimit = fixed_window 5 per 1h\n"
                                   "[service bad\xff\xfe]\nlimit = gcra 1 per 1s\n";
    char bad[PATH_MAX], good[PATH_MAX], out[8192], want[PATH_MAX + 128];
    const char *push_bad[] = {"rl-cli", "rules", "push", bad, "--config", zk_conf, NULL};
    const char *push_good[] = {"rl-cli", "rules", "push", good, "--config", zk_conf, NULL};

    ck_assert_int_eq(rl_harness_tmppath(bad, sizeof(bad), "bad.rules"), 0);
    ck_assert_int_eq(rl_harness_tmppath(good, sizeof(good), "good.rules"), 0);
    ck_assert_int_eq(rl_harness_write_file(bad, "%s", bad_text), 0);
    pages_settle("\nrl_rules_reload_failures_total 0\n", NULL);

    ck_assert_int_eq(rl_harness_run(push_bad, out, sizeof(out), 20000), 2);
    snprintf(want, sizeof(want),
             "%s:3: service name \"bad\\xff\\xfe\" is not valid UTF-8 at byte offset 3", bad);
    ck_assert_msg(strstr(out, want) != NULL, "no %s in: %s", want, out);
    ck_assert_int_eq(rl_harness_zk_get(zk.connect, "/ratelimiter/names/rules", out, sizeof(out)),
                     -ENOENT);

    ck_assert_int_eq(
        rl_harness_zk_put(zk.connect, "/ratelimiter/names/rules", bad_text, sizeof(bad_text) - 1),
        0);
    pages_settle("\nrl_rules_reload_failures_total 1\n", "service=\"bad");

    ck_assert_int_eq(rl_harness_write_file(good, "[service api]\nlimit = fixed_window 5 per 1h\n"
                                                 "[service caf\xc3\xa9 /\xe2\x82\xac]\n"
                                                 "limit = gcra 1 per 1s\n"
                                                 "[service \"q\\\\]\nlimit = gcra 1 per 1s\n"),
                     0);
    ck_assert_msg(rl_harness_run(push_good, out, sizeof(out), 20000) == 0, "%s", out);
    pages_settle("\nrl_rules_reloads_total 1\n", NULL);
    {
        struct rl_http_resp r;
        const char *labels[] = {"service=\"caf\xc3\xa9\"", "service=\"\\\"q\\\\\\\\\"", NULL};

        scrape_promtool(router_mport, labels, &r);
        rl_http_free(&r);
    }
}
END_TEST

static Suite *
prometheus_suite(void)
{
    Suite *s = suite_create("prometheus");
    TCase *tf = tcase_create("files");
    TCase *tc = tcase_create("cluster");
    TCase *tn = tcase_create("names");

    tcase_set_timeout(tf, 60);
    tcase_add_test(tf, promtool_files);
    suite_add_tcase(s, tf);

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, scrapes_pass_promtool);
    tcase_add_test(tc, prometheus_sees_traffic);
    suite_add_tcase(s, tc);

    tcase_add_checked_fixture(tn, zk_setup, teardown);
    tcase_set_timeout(tn, 120);
    tcase_add_test(tn, bad_name_push_refused);
    suite_add_tcase(s, tn);
    return s;
}

RL_TEST_MAIN(prometheus_suite)
