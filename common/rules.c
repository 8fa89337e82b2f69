/*
 * rules: new rules for a running process (rules.h). Both sources end in rules_put: the swap
 * into the live conf, then the program's apply, then the counters and one log line.
 */
#include "rules.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"

#define RULES_ERR_MAX 512

void
rl_rules_init(struct rl_rules *r, struct rl_conf *conf, const char *path,
              int (*apply)(void *arg, struct rl_conf **old), void *arg)
{
    memset(r, 0, sizeof(*r));
    r->conf = conf;
    r->path = path;
    r->apply = apply;
    r->arg = arg;
    r->st.version = 0;
    r->st.digest = (int64_t)conf->rules_digest;
}

/* Puts fresh's rules in force as `version`; fresh is consumed. Returns 0 or -ENOMEM. */
static int
rules_put(struct rl_rules *r, struct rl_conf *fresh, int64_t version, const char *from)
{
    char warn[RULES_ERR_MAX];
    size_t nrules = fresh->nrules, ntiers = fresh->ntiers;
    int rc;

    if (fresh->rules_digest == r->conf->rules_digest) {
        /* The same rules: nothing to switch, and no pause for it. */
        rl_conf_destroy(fresh);
        if (version != r->st.version) {
            r->st.version = version;
            r->st.reloads++;
        }
        rl_log_info("rules from %s: unchanged (digest %016" PRIx64 "); rules_version %" PRId64,
                    from, (uint64_t)r->st.digest, r->st.version);
        return 0;
    }
    rc = rl_conf_swap_rules(r->conf, fresh, warn, sizeof(warn));
    if (rc == 0 && r->apply != NULL) {
        rc = r->apply(r->arg, &fresh);
        if (rc != 0 && rl_conf_swap_rules(r->conf, fresh, NULL, 0) != 0) {
            /* Cannot happen short of memory for the clients' arrays twice in a row. */
            rl_log_error("rules from %s: cannot put the old rules back either", from);
        }
    }
    rl_conf_destroy(fresh);
    if (rc != 0) {
        r->st.failures++;
        rl_log_error("rules from %s refused: %s; the rules in force stay (rules_version %" PRId64
                     ")",
                     from, strerror(-rc), r->st.version);
        return rc;
    }
    if (warn[0] != '\0') {
        rl_log_warn("rules from %s: %s", from, warn);
    }
    r->st.version = version;
    r->st.digest = (int64_t)r->conf->rules_digest;
    r->st.reloads++;
    rl_log_info("rules from %s in force: %zu sections, %zu tiers, digest %016" PRIx64
                ", rules_version %" PRId64,
                from, nrules, ntiers, (uint64_t)r->st.digest, r->st.version);
    return 0;
}

int
rl_rules_reload_file(struct rl_rules *r)
{
    struct rl_conf *fresh = NULL;
    char err[RULES_ERR_MAX];
    int rc;

    if (r->st.version > 0) {
        rl_log_info("SIGHUP: the rules come from ZooKeeper (rules_version %" PRId64
                    "), not from %s: not reloaded (push them with rl-cli rules push)",
                    r->st.version, r->path);
        return 0;
    }
    rc = rl_conf_load(r->path, &fresh, err, sizeof(err));
    if (rc != 0) {
        r->st.failures++;
        rl_log_error("SIGHUP: rules not reloaded, %s is refused whole: %s; the rules in force "
                     "stay (digest %016" PRIx64 ")",
                     r->path, err, (uint64_t)r->st.digest);
        return rc;
    }
    rl_log_info("SIGHUP: reloading the [service] sections of %s (other sections are read "
                "at start only: a change to them needs a restart)",
                r->path);
    return rules_put(r, fresh, 0, r->path);
}

void
rl_rules_from_zk(struct rl_rules *r, const char *text, size_t len, int64_t version)
{
    struct rl_conf *fresh = NULL;
    char name[RULES_ERR_MAX / 2];
    char err[RULES_ERR_MAX];
    char *copy;
    int rc;

    snprintf(name, sizeof(name), "zookeeper:/ratelimiter/%s/rules@%" PRId64,
             r->conf->cluster_name, version);
    if (version < 0) {
        if (r->st.version > 0) {
            rl_log_warn("the rules znode is gone: rules_version %" PRId64
                        " stays in force (the znode's last rules are authoritative until a "
                        "restart)",
                        r->st.version);
        }
        return;
    }
    if (version + 1 == r->st.version) {
        return;
    }
    if (memchr(text, '\0', len) != NULL) {
        r->st.failures++;
        rl_log_error("rules in %s refused: they contain a NUL byte; the rules in force stay "
                     "(rules_version %" PRId64 ")",
                     name, r->st.version);
        return;
    }
    copy = malloc(len + 1);
    if (copy == NULL) {
        r->st.failures++;
        rl_log_error("rules in %s refused: out of memory", name);
        return;
    }
    memcpy(copy, text, len);
    copy[len] = '\0';
    rc = rl_conf_parse_rules(name, copy, &fresh, err, sizeof(err));
    free(copy);
    if (rc != 0) {
        r->st.failures++;
        rl_log_error("rules refused whole: %s; the rules in force stay (rules_version %" PRId64
                     ")",
                     err, r->st.version);
        return;
    }
    (void)rules_put(r, fresh, version + 1, name);
}

void
rl_rules_metrics(const struct rl_rules_status *st, uint64_t digest, struct rl_prom *p)
{
    char lab[64], hex[24];

    rl_prom_family(p, "rl_rules_version", "gauge",
                   "Version of the rules in force: 0 from the config file, N from the rules "
                   "znode (its data version + 1).");
    rl_prom_f64(p, "rl_rules_version", NULL, st != NULL ? (double)st->version : 0.0);
    rl_prom_family(p, "rl_rules_info", "gauge",
                   "Always 1; digest is the hash of the rules in force (STATS rules_digest, in "
                   "hex): processes that run the same rules show the same.");
    snprintf(hex, sizeof(hex), "%016llx",
             (unsigned long long)(st != NULL ? (uint64_t)st->digest : digest));
    rl_prom_u64(p, "rl_rules_info", rl_prom_labels(lab, sizeof(lab), "digest", hex, NULL), 1);
    rl_prom_family(p, "rl_rules_reloads_total", "counter", "Rules reloads applied.");
    rl_prom_u64(p, "rl_rules_reloads_total", NULL, st != NULL ? st->reloads : 0);
    rl_prom_family(p, "rl_rules_reload_failures_total", "counter",
                   "Rules reloads refused (an invalid file or znode: the old rules stay).");
    rl_prom_u64(p, "rl_rules_reload_failures_total", NULL, st != NULL ? st->failures : 0);
}
