/*
 * cmd_server: the commands that send one protocol op to --target (check, adjust, release,
 * ping, stats, clock, throttled, hot). Each fills its request and prints its reply as one line (or
 * a table, or JSON; throttled sums its episodes by user first); cli_exchange does the rest. Not for
 * commands that read the config or ZooKeeper.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "json.h"
#include "parse.h"

#include "cli.h"

static int
check_print(const struct cli *o, const struct cli_exchange *x, const struct rl_wire_reply *rep,
            uint64_t rtt_us)
{
    static const int by_code[] = {
        [RL_WIRE_ALLOWED] = CLI_EXIT_OK,          [RL_WIRE_LIMITED] = CLI_EXIT_LIMITED,
        [RL_WIRE_FAIL_OPEN] = CLI_EXIT_FAIL_OPEN, [RL_WIRE_FAIL_CLOSED] = CLI_EXIT_FAIL_CLOSED,
        [RL_WIRE_NO_RULE] = CLI_EXIT_NO_RULE,     [RL_WIRE_QUEUED] = CLI_EXIT_QUEUED,
    };
    char code[32];

    (void)o;
    (void)rtt_us;
    printf("%s -> %s limit=%llu remaining=%llu reset_ms=%llu retry_after_ms=%llu\n", x->label,
           cli_upper(rl_wire_code_name(rep->check.code), code, sizeof(code)),
           (unsigned long long)rep->check.limit, (unsigned long long)rep->check.remaining,
           (unsigned long long)rep->check.reset_ms, (unsigned long long)rep->check.retry_after_ms);
    /* The last answer decides; a later one replaces an earlier one. */
    return rep->check.code < sizeof(by_code) / sizeof(by_code[0]) ? by_code[rep->check.code]
                                                                  : CLI_EXIT_FAIL;
}

/* --limit into req: the config's own parser, "limit = " in a section of its own. 0, or an exit
 * status after a message. */
static int
inline_limit(const struct cli *o, struct rl_wire_req *req)
{
    struct rl_conf *c = NULL;
    char text[1200], err[512] = "";
    const struct rl_tier *t;

    if (o->limit == NULL) {
        return CLI_EXIT_OK;
    }
    if (strlen(o->limit) > 1000 || strchr(o->limit, '\n') != NULL) {
        return cli_usage_error("--limit: expected %s", "ALGORITHM N per DURATION [burst B]");
    }
    snprintf(text, sizeof(text), "[service x]\nlimit = %s\n", o->limit);
    if (rl_conf_parse_rules("--limit", text, &c, err, sizeof(err)) != 0 || c->ntiers != 1) {
        const char *why = strstr(err, "limit: ");

        rl_conf_destroy(c);
        return cli_usage_error("--limit: %s", why != NULL ? why + 7 : err);
    }
    t = &c->tiers[0];
    req->limit.set = true;
    req->limit.algo = (uint8_t)t->algo;
    req->limit.limit = t->limit;
    req->limit.window_ms = t->window_ms;
    req->limit.burst = t->burst;
    req->limit.has_burst = rl_algo_has_burst(t->algo); /* B, or N when not given */
    rl_conf_destroy(c);
    return CLI_EXIT_OK;
}

/* The key of check, adjust and release: SERVICE USER, and ENDPOINT when given. */
static void
request_key(struct rl_wire_req *req, const char *service, const char *user, const char *endpoint)
{
    req->service = (struct rl_wire_str){service, (uint32_t)strlen(service)};
    req->user = (struct rl_wire_str){user, (uint32_t)strlen(user)};
    if (endpoint != NULL) {
        req->endpoint = (struct rl_wire_str){endpoint, (uint32_t)strlen(endpoint)};
    }
}

int
cli_cmd_check(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv)
{
    struct cli_exchange x = {.repeat = o->repeat, .interval_ms = o->interval_ms,
                             .print = check_print};
    const char *endpoint = argc == 3 ? argv[2] : NULL;
    char label[1024];
    int rc;

    if (argc < 2 || argc > 3) {
        return cli_usage_error("%s: expected SERVICE USER [ENDPOINT]", cli_cmd_name(cmd));
    }
    request_key(&x.req, argv[0], argv[1], endpoint);
    x.req.cost = o->cost;
    rc = inline_limit(o, &x.req);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    snprintf(label, sizeof(label), "%s %s %s%s%s cost=%u%s%s", cli_cmd_name(cmd), argv[0], argv[1],
             endpoint ? " " : "", endpoint ? endpoint : "", o->cost, o->limit ? " limit=" : "",
             o->limit ? o->limit : "");
    x.label = label;
    return cli_exchange(o, cmd, &x);
}

/*
 * adjust SERVICE USER DELTA [ENDPOINT] and release SERVICE USER [COUNT] [ENDPOINT], the
 * arguments of RESP's RL.ADJUST and RL.RELEASE: an ADJUST (op 9) or a RELEASE (op 10), whose
 * replies have a CHECK reply's shape and are printed (and exit) as check's.
 */
int
cli_cmd_settle(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv)
{
    struct cli_exchange x = {.repeat = o->repeat, .interval_ms = o->interval_ms,
                             .print = check_print};
    bool adjust = cmd->op == RL_WIRE_OP_ADJUST;
    const char *endpoint = argc == 4 ? argv[3] : NULL;
    char label[1024], amount[32];
    uint64_t v = 1;
    int rc;

    if (adjust && (argc < 3 || argc > 4)) {
        return cli_usage_error("%s: expected SERVICE USER DELTA [ENDPOINT]", cli_cmd_name(cmd));
    }
    if (!adjust && (argc < 2 || argc > 4)) {
        return cli_usage_error("%s: expected SERVICE USER [COUNT] [ENDPOINT]", cli_cmd_name(cmd));
    }
    if (adjust) {
        const char *d = argv[2];
        bool neg = d[0] == '-';

        if (rl_parse_u64(neg ? d + 1 : d, 0, RL_WIRE_DELTA_MAX, &v) != NULL) {
            return cli_usage_error("adjust: DELTA must be an integer of -1000000..1000000, not %s",
                                   d);
        }
        x.req.delta = neg ? -(int32_t)v : (int32_t)v;
        snprintf(amount, sizeof(amount), "delta=%d", x.req.delta);
    } else {
        if (argc >= 3 && rl_parse_u64(argv[2], 1, RL_WIRE_COUNT_MAX, &v) != NULL) {
            return cli_usage_error("release: COUNT must be an integer of 1..1000000, not %s",
                                   argv[2]);
        }
        x.req.cost = (uint32_t)v;
        snprintf(amount, sizeof(amount), "count=%u", x.req.cost);
    }
    request_key(&x.req, argv[0], argv[1], endpoint);
    rc = inline_limit(o, &x.req);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    snprintf(label, sizeof(label), "%s %s %s%s%s %s%s%s", cli_cmd_name(cmd), argv[0], argv[1],
             endpoint ? " " : "", endpoint ? endpoint : "", amount, o->limit ? " limit=" : "",
             o->limit ? o->limit : "");
    x.label = label;
    return cli_exchange(o, cmd, &x);
}

static int
ping_print(const struct cli *o, const struct cli_exchange *x, const struct rl_wire_reply *rep,
           uint64_t rtt_us)
{
    (void)o;
    (void)x;
    printf("ping -> %.*s rtt_us=%llu\n", (int)rep->name.len,
           rep->name.ptr != NULL ? rep->name.ptr : "", (unsigned long long)rtt_us);
    return CLI_EXIT_OK;
}

static int
stats_print(const struct cli *o, const struct cli_exchange *x, const struct rl_wire_reply *rep,
            uint64_t rtt_us)
{
    (void)o;
    (void)x;
    (void)rtt_us;
    for (size_t i = 0; i < rep->nstats; i++) {
        printf("%.*s %lld\n", (int)rep->stat_keys[i].len, rep->stat_keys[i].ptr,
               (long long)rep->stat_vals[i]);
    }
    return CLI_EXIT_OK;
}

/* ping and stats: a request without arguments. */
int
cli_cmd_query(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv)
{
    struct cli_exchange x = {.print = cmd->op == RL_WIRE_OP_PING ? ping_print : stats_print};

    if (argc != 0) {
        return cli_usage_error("%s: takes no arguments", cli_cmd_name(cmd));
    }
    return cli_exchange(o, cmd, &x);
}

static int
clock_print(const struct cli *o, const struct cli_exchange *x, const struct rl_wire_reply *rep,
            uint64_t rtt_us)
{
    (void)rtt_us;
    if (rep->now_ms != x->req.now_ms) {
        fprintf(stderr, "rl-cli: clock to %s: %s\n", o->target, cli_errno_text(-EPROTO));
        return CLI_EXIT_FAIL;
    }
    printf("clock -> now_ms=%llu\n", (unsigned long long)rep->now_ms);
    return CLI_EXIT_OK;
}

int
cli_cmd_clock(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv)
{
    struct cli_exchange x = {.print = clock_print};

    if (argc != 1 || rl_parse_u64(argv[0], 0, UINT64_MAX, &x.req.now_ms) != NULL) {
        return cli_usage_error("%s: expected NOW_MS, milliseconds since the epoch",
                               cli_cmd_name(cmd));
    }
    return cli_exchange(o, cmd, &x);
}

/* One (service, user) of a THROTTLED reply, summed over its episodes. */
struct throttled_user {
    const struct rl_wire_episode *e; /* its first episode: service and user */
    size_t episodes;
    uint64_t refused;
    uint64_t first_start;
    uint64_t last_end; /* 0 when one of its episodes is still open */
};

static bool
same_str(const struct rl_wire_str *a, const struct rl_wire_str *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->ptr, b->ptr, a->len) == 0);
}

/* Most refused first; then the earliest start, then the reply's order. */
static int
user_cmp(const void *a, const void *b)
{
    const struct throttled_user *x = a, *y = b;

    if (x->refused != y->refused) {
        return x->refused > y->refused ? -1 : 1;
    }
    if (x->first_start != y->first_start) {
        return x->first_start < y->first_start ? -1 : 1;
    }
    return x->e < y->e ? -1 : (x->e > y->e);
}

/* The reply's episodes summed by (service, user) into u (room for rep->nepisodes), sorted
 * by user_cmp; returns how many. */
static size_t
throttled_users(const struct rl_wire_reply *rep, struct throttled_user *u)
{
    size_t n = 0;

    for (size_t i = 0; i < rep->nepisodes; i++) {
        const struct rl_wire_episode *e = &rep->episodes[i];
        size_t k = 0;

        while (k < n && !(same_str(&u[k].e->service, &e->service) &&
                          same_str(&u[k].e->user, &e->user))) {
            k++;
        }
        if (k == n) {
            u[n++] = (struct throttled_user){.e = e, .first_start = e->start_ms, .last_end = 1};
        }
        u[k].episodes++;
        u[k].refused += e->refused;
        u[k].first_start = e->start_ms < u[k].first_start ? e->start_ms : u[k].first_start;
        if (e->ended == RL_WIRE_ENDED_OPEN || u[k].last_end == 0) {
            u[k].last_end = 0;
        } else if (e->end_ms > u[k].last_end) {
            u[k].last_end = e->end_ms;
        }
    }
    qsort(u, n, sizeof(*u), user_cmp);
    return n;
}

/* The per-user summary as a table: one (service, user) a line, at most top of them. */
static void
throttled_summary(const struct rl_wire_reply *rep, const struct throttled_user *u, size_t n,
                  size_t top)
{
    char start[96], end[96];

    printf("%-16s %-24s %8s %10s  %-24s %s\n", "SERVICE", "USER", "EPISODES", "REFUSED",
           "FIRST_START", "LAST_END");
    for (size_t i = 0; i < n && i < top; i++) {
        cli_format_ms(u[i].first_start, start, sizeof(start));
        if (u[i].last_end == 0) {
            snprintf(end, sizeof(end), "open");
        } else {
            cli_format_ms(u[i].last_end, end, sizeof(end));
        }
        cli_print_cell(&u[i].e->service, "-", 16);
        cli_print_cell(&u[i].e->user, "-", 24);
        printf("%8zu %10llu  %-24s %s\n", u[i].episodes, (unsigned long long)u[i].refused, start,
               end);
    }
    if (n == 0) {
        printf("(no throttling episodes)\n");
    } else if (n > top) {
        printf("(%zu more users; --top N shows more)\n", n - top);
    }
    if (rep->nepisodes == RL_WIRE_TOP_MAX) {
        printf("(summed over the %u episodes most refused; --since narrows)\n",
               RL_WIRE_TOP_MAX);
    }
}

/* The summary's users in --json: the 6 keys a user. */
static void
throttled_json_users(struct rl_json *j, const struct throttled_user *u, size_t n)
{
    rl_json_key(j, "users");
    rl_json_begin_array(j);
    for (size_t i = 0; i < n; i++) {
        rl_json_begin_object(j);
        rl_json_key(j, "service");
        rl_json_strn(j, u[i].e->service.ptr, u[i].e->service.len);
        rl_json_key(j, "user");
        rl_json_strn(j, u[i].e->user.ptr, u[i].e->user.len);
        rl_json_kv_u64(j, "episodes", u[i].episodes);
        rl_json_kv_u64(j, "refused", u[i].refused);
        rl_json_kv_u64(j, "first_start_ms", u[i].first_start);
        rl_json_kv_u64(j, "last_end_ms", u[i].last_end);
        rl_json_end_object(j);
    }
    rl_json_end_array(j);
}

/* THROTTLED's reply as {"episodes":[...],"users":[...],"missing":[...]}: the reply's 8 keys
 * an episode, and the n users they sum to. */
static void
throttled_json(const struct rl_wire_reply *rep, const struct throttled_user *u, size_t n)
{
    struct rl_json j;

    rl_json_init(&j, stdout);
    rl_json_begin_object(&j);
    rl_json_key(&j, "episodes");
    rl_json_begin_array(&j);
    for (size_t i = 0; i < rep->nepisodes; i++) {
        const struct rl_wire_episode *e = &rep->episodes[i];

        rl_json_begin_object(&j);
        rl_json_key(&j, "service");
        rl_json_strn(&j, e->service.ptr, e->service.len);
        rl_json_key(&j, "endpoint");
        rl_json_strn(&j, e->endpoint.ptr, e->endpoint.len);
        rl_json_key(&j, "user");
        rl_json_strn(&j, e->user.ptr, e->user.len);
        rl_json_kv_u64(&j, "start_ms", e->start_ms);
        rl_json_kv_u64(&j, "end_ms", e->end_ms);
        rl_json_kv_u64(&j, "refused", e->refused);
        rl_json_kv_str(&j, "ended", rl_wire_ended_name(e->ended));
        rl_json_key(&j, "node");
        rl_json_strn(&j, e->node.ptr, e->node.len);
        rl_json_end_object(&j);
    }
    rl_json_end_array(&j);
    throttled_json_users(&j, u, n);
    rl_json_key(&j, "missing");
    rl_json_begin_array(&j);
    for (size_t i = 0; i < rep->nmissing; i++) {
        rl_json_strn(&j, rep->missing[i].ptr, rep->missing[i].len);
    }
    rl_json_end_array(&j);
    cli_json_done(&j);
}

/* THROTTLED's reply as a table, one episode a line: NODE the node that recorded it, ENDED
 * how the episode ended (open, allowed, idle). */
static void
throttled_table(const struct rl_wire_reply *rep)
{
    uint64_t now = rl_clock_real_ms();
    char start[96], end[96], dur[48];

    printf("%-16s %-16s %-20s %-24s %-24s %-10s %8s  %-12s %s\n", "SERVICE", "ENDPOINT", "USER",
           "START", "END", "DURATION", "REFUSED", "NODE", "ENDED");
    for (size_t i = 0; i < rep->nepisodes; i++) {
        const struct rl_wire_episode *e = &rep->episodes[i];
        bool open = e->ended == RL_WIRE_ENDED_OPEN;
        uint64_t until = open ? now : e->end_ms;

        cli_format_ms(e->start_ms, start, sizeof(start));
        if (open) {
            snprintf(end, sizeof(end), "open");
        } else {
            cli_format_ms(e->end_ms, end, sizeof(end));
        }
        if (until >= e->start_ms) {
            cli_format_duration(until - e->start_ms, dur, sizeof(dur));
        } else {
            snprintf(dur, sizeof(dur), "-");
        }
        cli_print_cell(&e->service, "-", 16);
        cli_print_cell(&e->endpoint, "-", 16);
        cli_print_cell(&e->user, "-", 20);
        printf("%-24s %-24s %-10s %8llu  ", start, end, dur, (unsigned long long)e->refused);
        cli_print_cell(&e->node, "-", 12);
        printf("%s\n", rl_wire_ended_name(e->ended));
    }
    if (rep->nepisodes == 0) {
        printf("(no throttling episodes)\n");
    }
}

static int
throttled_print(const struct cli *o, const struct cli_exchange *x, const struct rl_wire_reply *rep,
                uint64_t rtt_us)
{
    struct throttled_user *u = calloc(rep->nepisodes + 1, sizeof(*u));
    size_t n;

    (void)x;
    (void)rtt_us;
    if (u == NULL) {
        return cli_out_of_memory();
    }
    n = throttled_users(rep, u);
    if (o->json) {
        throttled_json(rep, u, n);
    } else if (o->given & CLI_O(EPISODES)) {
        throttled_table(rep);
    } else {
        throttled_summary(rep, u, n, o->top != 0 ? o->top : RL_WIRE_TOP_DEFAULT);
    }
    free(u);
    if (rep->nmissing > 0) {
        fprintf(stderr, "rl-cli: throttled: no answer from %zu node(s):", rep->nmissing);
        for (size_t i = 0; i < rep->nmissing; i++) {
            fprintf(stderr, " %.*s", (int)rep->missing[i].len, rep->missing[i].ptr);
        }
        fprintf(stderr, "\n");
    }
    return CLI_EXIT_OK;
}

int
cli_cmd_throttled(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv)
{
    struct cli_exchange x = {.print = throttled_print};

    (void)argv;
    if (argc != 0) {
        return cli_usage_error("%s: takes no arguments (--service, --since, --top, --episodes, "
                               "--json)",
                               cli_cmd_name(cmd));
    }
    if (o->service != NULL) {
        x.req.service = (struct rl_wire_str){o->service, (uint32_t)strlen(o->service)};
    }
    x.req.since_ms = o->since_ms;
    x.req.has_since = (o->given & CLI_O(SINCE)) != 0;
    /* The summary sums the most episodes a reply holds; --top is its count of users. */
    x.req.top = o->json || (o->given & CLI_O(EPISODES)) ? o->top : RL_WIRE_TOP_MAX;
    return cli_exchange(o, cmd, &x);
}

/* HOT's reply: a table, one key a line, or {"period_ms":N,"keys":[{...}]}. */
static int
hot_print(const struct cli *o, const struct cli_exchange *x, const struct rl_wire_reply *rep,
          uint64_t rtt_us)
{
    (void)x;
    (void)rtt_us;
    if (o->json) {
        struct rl_json j;

        rl_json_init(&j, stdout);
        rl_json_begin_object(&j);
        rl_json_kv_u64(&j, "period_ms", rep->period_ms);
        rl_json_key(&j, "keys");
        rl_json_begin_array(&j);
        for (size_t i = 0; i < rep->nhot; i++) {
            rl_json_begin_object(&j);
            rl_json_key(&j, "service");
            rl_json_strn(&j, rep->hot[i].service.ptr, rep->hot[i].service.len);
            rl_json_key(&j, "user");
            rl_json_strn(&j, rep->hot[i].user.ptr, rep->hot[i].user.len);
            rl_json_kv_u64(&j, "count", rep->hot[i].count);
            rl_json_kv_u64(&j, "err", rep->hot[i].err);
            rl_json_end_object(&j);
        }
        rl_json_end_array(&j);
        cli_json_done(&j);
        return CLI_EXIT_OK;
    }
    printf("%-16s %-24s %12s %10s\n", "SERVICE", "USER", "COUNT", "ERR");
    for (size_t i = 0; i < rep->nhot; i++) {
        cli_print_cell(&rep->hot[i].service, "-", 16);
        cli_print_cell(&rep->hot[i].user, "-", 24);
        printf("%12llu %10llu\n", (unsigned long long)rep->hot[i].count,
               (unsigned long long)rep->hot[i].err);
    }
    if (rep->nhot == 0) {
        printf("(no keys counted)\n");
    }
    printf("(counts halve every %llu ms)\n", (unsigned long long)rep->period_ms);
    return CLI_EXIT_OK;
}

int
cli_cmd_hot(const struct cli *o, const struct cli_cmd *cmd, int argc, char **argv)
{
    struct cli_exchange x = {.print = hot_print};

    (void)argv;
    if (argc != 0) {
        return cli_usage_error("%s: takes no arguments (--service, --top, --json)",
                               cli_cmd_name(cmd));
    }
    if (o->service != NULL) {
        x.req.service = (struct rl_wire_str){o->service, (uint32_t)strlen(o->service)};
    }
    x.req.top = o->top;
    return cli_exchange(o, cmd, &x);
}
