/* scenario: see scenario.h. */
#include "scenario.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"

const char ch_scenario_help[] =
    "Scenario format (INI; ';' or '#' starts a comment; durations take ms, s, m):\n"
    "  [scenario]  name = NAME   description = TEXT   duration = 20s (traffic runs this long)\n"
    "  [cluster]   nodes = 3 (1..8, named a, b, c...)   routers = 2 (1..4, named 1, 2...)\n"
    "              shards = 256   session_timeout = 2s   deadline = 50ms\n"
    "              fencing = expiry|disconnect\n"
    "  [traffic]   rate = 2000 (requests/s, all routers)   users = 100 (per service)\n"
    "              distribution = uniform|zipf\n"
    "  [service NAME]  limit = fixed_window 20 per 1s (any cluster.conf limit; fixed_window\n"
    "              rules are judged per window)   failure = open|closed   weight = 1\n"
    "  [check]     margin = 250ms (answer within deadline + margin)\n"
    "              converge = SESSION+1s (routers agree with ZooKeeper within it)\n"
    "              planned_moves = keep|either (a shard moved while its old owner stayed a\n"
    "              member keeps its counters; either: or starts afresh, a move interrupted)\n"
    "  [expect]    max_policy_answers, min_policy_answers, max_extra_allowed,\n"
    "              max_view_changes,\n"
    "              max_latency = DUR, max_shard_move = DUR, max_stale_answers = DUR\n"
    "  [steps]     one per line: at TIME ACTION TARGET [from routers|zookeeper] [LATENCY]\n"
    "              [for DURATION]\n"
    "      at 5s kill node b          at 5s term node b         at 9s restart node b\n"
    "      at 5s pause node b for 1s  at 5s kill router 1       at 7s restart router 1\n"
    "      at 5s stop zookeeper for 3s                           at 5s pause zookeeper for 3s\n"
    "      at 5s partition node a from routers for 4s   (both ways, black hole)\n"
    "      at 5s partition node a from zookeeper for 6s\n"
    "      at 5s oneway node a from routers for 3s      (requests arrive, answers lost)\n"
    "      at 5s delay node a from routers 30ms for 5s  at 5s reset node a from routers\n"
    "      at 5s isolate node a for 6s   (--hosts only: its host's interface down)\n"
    "      at 5s add node d   (a node not started with the cluster joins: scale-out)\n"
    "      at 5s drain node a (SIGTERM, not waited for)   at 5020ms kill node a (mid-move)\n"
    "      at 5s assign 40 shards   (an assignment moving 40 shards, as rl-rebalance writes)\n"
    "      at 9s rollback   (the previous assignment back, as rl-rebalance --rollback)\n";

static const char *const node_names[CH_NODES_MAX] = {"a", "b", "c", "d", "e", "f", "g", "h"};

const char *
ch_node_name(int i)
{
    return i >= 0 && i < CH_NODES_MAX ? node_names[i] : "?";
}

void
ch_user_name(char *buf, size_t len, uint32_t u)
{
    snprintf(buf, len, "u%u", u);
}

struct ctx {
    struct ch_scenario *sc;
    const char *path;
    int line;
    char *err;
    size_t errlen;
};

static int
fail(struct ctx *c, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(c->err, c->errlen, "%s:%d: ", c->path, c->line);

    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < c->errlen) {
        vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
    }
    va_end(ap);
    return -1;
}

static char *
trim(char *s)
{
    char *e;

    while (isspace((unsigned char)*s)) {
        s++;
    }
    e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) {
        *--e = '\0';
    }
    return s;
}

static int
duration(struct ctx *c, const char *key, const char *v, int64_t *out)
{
    uint64_t ms;
    const char *why = rl_parse_duration_ms(v, &ms);

    if (why != NULL) {
        return fail(c, "%s \"%s\" %s", key, v, why);
    }
    *out = (int64_t)ms;
    return 0;
}

static int
number(struct ctx *c, const char *key, const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
    const char *why = rl_parse_u64(v, min, max, out);

    return why != NULL ? fail(c, "%s \"%s\" %s (%llu..%llu)", key, v, why,
                              (unsigned long long)min, (unsigned long long)max)
                       : 0;
}

/* "fixed_window 20 per 1s": the parts the verdict needs; other algorithms are not windowed. */
static int
service_limit(struct ctx *c, struct ch_service *s, const char *v)
{
    char algo[32], per[8], dur[32];
    uint64_t n;
    int64_t w = 0;

    if (strlen(v) >= sizeof(s->limit)) {
        return fail(c, "limit too long");
    }
    if (s->limit[0] != '\0') {
        return fail(c, "one limit per service in a scenario (the verdict judges one tier)");
    }
    strcpy(s->limit, v);
    if (sscanf(v, "%31s %llu %7s %31s", algo, (unsigned long long *)&n, per, dur) != 4 ||
        strcmp(per, "per") != 0) {
        return fail(c, "limit \"%s\" is not ALGORITHM N per DURATION", v);
    }
    if (duration(c, "limit", dur, &w) != 0) {
        return -1;
    }
    if (n == 0 || w == 0) {
        return fail(c, "limit \"%s\" needs N >= 1 per a duration >= 1ms", v);
    }
    s->windowed = strcmp(algo, "fixed_window") == 0;
    s->limit_n = n;
    s->window_ms = (uint64_t)w;
    return 0;
}

static int
find_node(struct ctx *c, const char *name, int *idx)
{
    for (int i = 0; i < c->sc->nodes; i++) {
        if (strcmp(name, node_names[i]) == 0) {
            *idx = i;
            return 0;
        }
    }
    return fail(c, "no node \"%s\" (nodes are a..%s: set [cluster] nodes before [steps])", name,
                node_names[c->sc->nodes - 1]);
}

/* at TIME ACTION TARGET [NAME] [from routers|zookeeper] [LATENCY] [for DURATION] */
static int
step(struct ctx *c, char *text)
{
    static const struct {
        const char *word;
        enum ch_action action;
    } actions[] = {{"kill", CH_KILL},           {"term", CH_TERM},     {"pause", CH_PAUSE},
                   {"restart", CH_RESTART},     {"stop", CH_STOP},     {"start", CH_START},
                   {"partition", CH_PARTITION}, {"oneway", CH_ONEWAY}, {"delay", CH_DELAY},
                   {"reset", CH_RESET},         {"isolate", CH_ISOLATE}, {"add", CH_ADD},
                   {"assign", CH_ASSIGN},       {"rollback", CH_ROLLBACK}, {"drain", CH_DRAIN}};
    struct ch_step *st;
    char *w[10], *save = NULL;
    int n = 0, i = 0, ai = -1;

    if (c->sc->nsteps == CH_STEPS_MAX) {
        return fail(c, "more than %d steps", CH_STEPS_MAX);
    }
    st = &c->sc->steps[c->sc->nsteps];
    memset(st, 0, sizeof(*st));
    st->line = c->line;
    snprintf(st->text, sizeof(st->text), "%s", text);
    for (char *t = strtok_r(text, " \t", &save); t != NULL; t = strtok_r(NULL, " \t", &save)) {
        if (n == 10) {
            return fail(c, "step has too many words");
        }
        w[n++] = t;
    }
    if (n < 3 || strcmp(w[0], "at") != 0) {
        return fail(c, "a step is \"at TIME ACTION TARGET ...\"");
    }
    if (duration(c, "at", w[1], &st->at_ms) != 0) {
        return -1;
    }
    for (size_t k = 0; k < sizeof(actions) / sizeof(actions[0]); k++) {
        ai = strcmp(w[2], actions[k].word) == 0 ? (int)k : ai;
    }
    if (ai < 0) {
        return fail(c, "unknown action \"%s\"", w[2]);
    }
    st->action = actions[ai].action;
    i = 3;
    if (st->action == CH_ASSIGN || st->action == CH_ROLLBACK) {
        /* "assign N shards", "rollback": ZooKeeper's assignment znode */
        uint64_t k = 0;

        st->target = CH_ZOOKEEPER;
        if (st->action == CH_ASSIGN &&
            (n != 5 || strcmp(w[4], "shards") != 0 ||
             number(c, "assign", w[3], 1, c->sc->shards, &k) != 0)) {
            return n != 5 || strcmp(w[4], "shards") != 0
                       ? fail(c, "assign is \"assign N shards\"")
                       : -1;
        }
        if (st->action == CH_ROLLBACK && n != 3) {
            return fail(c, "rollback takes nothing more");
        }
        st->arg_ms = (int64_t)k;
        c->sc->nsteps++;
        return 0;
    }
    if (i < n && strcmp(w[i], "zookeeper") == 0) {
        st->target = CH_ZOOKEEPER;
        i++;
    } else if (i + 1 < n && strcmp(w[i], "node") == 0) {
        st->target = CH_NODE;
        if (find_node(c, w[i + 1], &st->index) != 0) {
            return -1;
        }
        i += 2;
    } else if (i + 1 < n && strcmp(w[i], "router") == 0) {
        uint64_t r;

        st->target = CH_ROUTER;
        if (number(c, "router", w[i + 1], 1, (uint64_t)c->sc->routers, &r) != 0) {
            return -1;
        }
        st->index = (int)r - 1;
        i += 2;
    } else {
        return fail(c, "target must be \"node NAME\", \"router N\" or \"zookeeper\"");
    }
    if (i + 1 < n && strcmp(w[i], "from") == 0) {
        if (strcmp(w[i + 1], "routers") == 0) {
            st->path = CH_PATH_ROUTERS;
        } else if (strcmp(w[i + 1], "zookeeper") == 0) {
            st->path = CH_PATH_ZK;
        } else {
            return fail(c, "\"from\" takes routers or zookeeper");
        }
        i += 2;
    } else if (st->action == CH_PARTITION || st->action == CH_ONEWAY ||
               st->action == CH_DELAY || st->action == CH_RESET) {
        return fail(c, "%s needs \"from routers\" or \"from zookeeper\"", w[2]);
    }
    if (st->action == CH_DELAY) {
        if (i >= n || duration(c, "latency", w[i], &st->arg_ms) != 0) {
            return i >= n ? fail(c, "delay needs a latency (\"30ms\")") : -1;
        }
        i++;
    }
    if (i + 1 < n && strcmp(w[i], "for") == 0) {
        if (duration(c, "for", w[i + 1], &st->for_ms) != 0) {
            return -1;
        }
        i += 2;
    }
    if (i != n) {
        return fail(c, "unexpected \"%s\"", w[i]);
    }
    switch (st->action) {
    case CH_KILL:
    case CH_TERM:
    case CH_RESTART:
        if (st->target == CH_ZOOKEEPER || st->for_ms != 0) {
            return fail(c, "%s takes a node or a router, and no \"for\"", w[2]);
        }
        break;
    case CH_PAUSE:
        if (st->target == CH_ROUTER || st->for_ms == 0) {
            return fail(c, "pause takes a node or zookeeper, and \"for DURATION\"");
        }
        break;
    case CH_STOP:
    case CH_START:
        if (st->target != CH_ZOOKEEPER || (st->action == CH_START && st->for_ms != 0)) {
            return fail(c, "%s takes zookeeper (stop: optionally \"for DURATION\")", w[2]);
        }
        break;
    case CH_ISOLATE:
        if (st->target != CH_NODE || st->for_ms == 0) {
            return fail(c, "isolate takes a node and \"for DURATION\"");
        }
        break;
    case CH_DRAIN:
        if (st->target != CH_NODE || st->for_ms != 0) {
            return fail(c, "drain takes a node, and no \"for\"");
        }
        break;
    case CH_ADD:
        if (st->target != CH_NODE || st->for_ms != 0) {
            return fail(c, "add takes a node, and no \"for\"");
        }
        if (c->sc->spare[st->index]) {
            return fail(c, "node %s is added twice", ch_node_name(st->index));
        }
        for (int k = 0; k < c->sc->nsteps; k++) {
            if (c->sc->steps[k].target == CH_NODE && c->sc->steps[k].index == st->index) {
                return fail(c, "node %s is added after a step on it", ch_node_name(st->index));
            }
        }
        c->sc->spare[st->index] = true;
        break;
    default:
        if (st->target != CH_NODE) {
            return fail(c, "%s takes a node", w[2]);
        }
        if (st->action == CH_RESET && st->for_ms != 0) {
            return fail(c, "reset is instant: no \"for\"");
        }
        break;
    }
    c->sc->nsteps++;
    return 0;
}

static int
setting(struct ctx *c, const char *section, const char *key, const char *v,
        struct ch_service *svc)
{
    struct ch_scenario *sc = c->sc;
    uint64_t u;

    if (strcmp(section, "scenario") == 0) {
        if (strcmp(key, "name") == 0) {
            snprintf(sc->name, sizeof(sc->name), "%s", v);
        } else if (strcmp(key, "description") == 0) {
            snprintf(sc->description, sizeof(sc->description), "%s", v);
        } else if (strcmp(key, "duration") == 0) {
            return duration(c, key, v, &sc->duration_ms);
        } else {
            return fail(c, "unknown key \"%s\" in [scenario]", key);
        }
        return 0;
    }
    if (strcmp(section, "cluster") == 0) {
        if (sc->nsteps > 0) {
            return fail(c, "[cluster] must come before [steps]");
        }
        if (strcmp(key, "nodes") == 0) {
            if (number(c, key, v, 1, CH_NODES_MAX, &u) != 0) {
                return -1;
            }
            sc->nodes = (int)u;
        } else if (strcmp(key, "routers") == 0) {
            if (number(c, key, v, 1, CH_ROUTERS_MAX, &u) != 0) {
                return -1;
            }
            sc->routers = (int)u;
        } else if (strcmp(key, "shards") == 0) {
            if (number(c, key, v, 1, 65536, &u) != 0) {
                return -1;
            }
            sc->shards = (uint32_t)u;
        } else if (strcmp(key, "session_timeout") == 0) {
            return duration(c, key, v, &sc->session_timeout_ms);
        } else if (strcmp(key, "deadline") == 0) {
            return duration(c, key, v, &sc->deadline_ms);
        } else if (strcmp(key, "fencing") == 0) {
            if (strcmp(v, "expiry") != 0 && strcmp(v, "disconnect") != 0) {
                return fail(c, "fencing is expiry or disconnect");
            }
            sc->fence_disconnect = strcmp(v, "disconnect") == 0;
        } else {
            return fail(c, "unknown key \"%s\" in [cluster]", key);
        }
        return 0;
    }
    if (strcmp(section, "traffic") == 0) {
        if (strcmp(key, "rate") == 0) {
            if (number(c, key, v, 1, 200000, &u) != 0) {
                return -1;
            }
            sc->rate = (uint32_t)u;
        } else if (strcmp(key, "users") == 0) {
            if (number(c, key, v, 1, 1000000, &u) != 0) {
                return -1;
            }
            sc->users = (uint32_t)u;
        } else if (strcmp(key, "distribution") == 0) {
            if (strcmp(v, "uniform") != 0 && strcmp(v, "zipf") != 0) {
                return fail(c, "distribution is uniform or zipf");
            }
            sc->zipf = strcmp(v, "zipf") == 0;
        } else {
            return fail(c, "unknown key \"%s\" in [traffic]", key);
        }
        return 0;
    }
    if (svc != NULL) {
        if (strcmp(key, "limit") == 0) {
            return service_limit(c, svc, v);
        } else if (strcmp(key, "failure") == 0) {
            if (strcmp(v, "open") != 0 && strcmp(v, "closed") != 0) {
                return fail(c, "failure is open or closed");
            }
            svc->fail_closed = strcmp(v, "closed") == 0;
        } else if (strcmp(key, "weight") == 0) {
            if (number(c, key, v, 1, 1000, &u) != 0) {
                return -1;
            }
            svc->weight = (uint32_t)u;
        } else {
            return fail(c, "unknown key \"%s\" in [service]", key);
        }
        return 0;
    }
    if (strcmp(section, "check") == 0) {
        if (strcmp(key, "margin") == 0) {
            return duration(c, key, v, &sc->margin_ms);
        } else if (strcmp(key, "converge") == 0) {
            return duration(c, key, v, &sc->converge_ms);
        } else if (strcmp(key, "planned_moves") == 0) {
            if (strcmp(v, "keep") == 0 || strcmp(v, "either") == 0) {
                sc->planned = strcmp(v, "keep") == 0 ? CH_PLANNED_KEEP : CH_PLANNED_EITHER;
                return 0;
            }
            return fail(c, "planned_moves is keep or either");
        }
        return fail(c, "unknown key \"%s\" in [check]", key);
    }
    if (strcmp(section, "expect") == 0) {
        struct ch_expect *e = &sc->expect;

        int64_t *count = strcmp(key, "max_policy_answers") == 0   ? &e->max_policy
                         : strcmp(key, "min_policy_answers") == 0 ? &e->min_policy
                         : strcmp(key, "max_extra_allowed") == 0  ? &e->max_extra
                         : strcmp(key, "max_view_changes") == 0   ? &e->max_view_changes
                                                                  : NULL;

        if (count != NULL) {
            if (number(c, key, v, 0, UINT32_MAX, &u) != 0) {
                return -1;
            }
            *count = (int64_t)u;
            return 0;
        }
        if (strcmp(key, "max_latency") == 0) {
            return duration(c, key, v, &e->max_latency_ms);
        } else if (strcmp(key, "max_shard_move") == 0) {
            return duration(c, key, v, &e->max_move_ms);
        } else if (strcmp(key, "max_stale_answers") == 0) {
            return duration(c, key, v, &e->max_stale_ms);
        }
        return fail(c, "unknown key \"%s\" in [expect]", key);
    }
    return fail(c, "key \"%s\" outside a known section", key);
}

static void
defaults(struct ch_scenario *sc)
{
    memset(sc, 0, sizeof(*sc));
    sc->nodes = 3;
    sc->routers = 2;
    sc->shards = 256;
    sc->session_timeout_ms = 2000;
    sc->deadline_ms = 50;
    sc->duration_ms = 20000;
    sc->margin_ms = 250;
    sc->converge_ms = -1;
    sc->rate = 2000;
    sc->users = 100;
    sc->expect = (struct ch_expect){-1, -1, -1, -1, -1, -1, -1};
}

int
ch_scenario_load(struct ch_scenario *sc, const char *path, char *err, size_t errlen)
{
    struct ctx c = {sc, path, 0, err, errlen};
    char line[512], section[64] = "";
    struct ch_service *svc = NULL;
    int svc_line[CH_SERVICES_MAX] = {0}; /* where each [service NAME] is, for errors */
    FILE *f = fopen(path, "r");
    int rc = 0;

    defaults(sc);
    snprintf(sc->path, sizeof(sc->path), "%s", path);
    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        char *s, *eq;

        c.line++;
        if (strchr(line, '\n') == NULL && !feof(f)) {
            rc = fail(&c, "line longer than %zu bytes", sizeof(line) - 2);
            break;
        }
        s = line + strcspn(line, ";#");
        *s = '\0';
        s = trim(line);
        if (*s == '\0') {
            continue;
        }
        if (*s == '[') {
            char *end = strchr(s, ']');

            if (end == NULL || end[1] != '\0') {
                rc = fail(&c, "a section is [NAME]");
                break;
            }
            *end = '\0';
            snprintf(section, sizeof(section), "%s", trim(s + 1));
            svc = NULL;
            if (strncmp(section, "service ", 8) == 0) {
                const char *name = trim(section + 8);

                if (sc->nservices == CH_SERVICES_MAX) {
                    rc = fail(&c, "more than %d services", CH_SERVICES_MAX);
                    break;
                }
                if (*name == '\0' || strlen(name) >= CH_NAME_MAX || strchr(name, ' ') != NULL) {
                    rc = fail(&c, "a service is [service NAME], NAME one word under %d bytes",
                              CH_NAME_MAX);
                    break;
                }
                svc_line[sc->nservices] = c.line;
                svc = &sc->services[sc->nservices++];
                snprintf(svc->name, sizeof(svc->name), "%s", name);
                svc->weight = 1;
            } else if (strcmp(section, "scenario") != 0 && strcmp(section, "cluster") != 0 &&
                       strcmp(section, "traffic") != 0 && strcmp(section, "steps") != 0 &&
                       strcmp(section, "check") != 0 && strcmp(section, "expect") != 0) {
                rc = fail(&c, "unknown section [%s]", section);
            }
            continue;
        }
        if (strcmp(section, "steps") == 0) {
            rc = step(&c, s);
            continue;
        }
        eq = strchr(s, '=');
        if (eq == NULL) {
            rc = fail(&c, "expected KEY = VALUE");
            break;
        }
        *eq = '\0';
        rc = setting(&c, section, trim(s), trim(eq + 1), svc);
    }
    fclose(f);
    if (rc != 0) {
        return -1;
    }
    c.line = 0;
    if (sc->nservices == 0) {
        sc->nservices = 1;
        snprintf(sc->services[0].name, CH_NAME_MAX, "api");
        snprintf(sc->services[0].limit, CH_TEXT_MAX, "fixed_window 10 per 1s");
        sc->services[0].windowed = true;
        sc->services[0].limit_n = 10;
        sc->services[0].window_ms = 1000;
        sc->services[0].weight = 1;
    }
    for (int i = 0; i < sc->nservices; i++) {
        if (sc->services[i].limit[0] == '\0') {
            c.line = svc_line[i];
            return fail(&c, "[service %s] has no limit", sc->services[i].name);
        }
    }
    if (sc->converge_ms < 0) {
        sc->converge_ms = sc->session_timeout_ms + 1000;
    }
    if (sc->name[0] == '\0') {
        const char *base = strrchr(path, '/');
        size_t len;

        base = base != NULL ? base + 1 : path;
        len = strcspn(base, ".");
        snprintf(sc->name, sizeof(sc->name), "%.*s", (int)len, base);
    }
    for (int i = 0; i < sc->nsteps; i++) {
        if (sc->steps[i].at_ms + sc->steps[i].for_ms > sc->duration_ms) {
            c.line = sc->steps[i].line;
            return fail(&c, "step ends after the scenario's duration (%lld ms)",
                        (long long)sc->duration_ms);
        }
    }
    return 0;
}
