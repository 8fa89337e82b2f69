/*
 * rules: new rules for a running process (rules.h). Both sources queue a job: its parse runs
 * on libuv's thread pool (rules_work, which touches nothing live), and its after-work
 * callback (rules_after, on the loop) ends in rules_put: the swap into the live conf, then
 * the program's apply, then the counters and one log line. One job at a time, so results
 * are put in force in the order they were asked for.
 */
#include "rules.h"

#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "log.h"
#include "metrics.h"

#define RULES_ERR_MAX 512

/* One parse: its input, then (from the thread pool) its output. */
struct rl_rules_job {
    uv_work_t req;
    struct rl_rules *r; /* NULL once rl_rules_close dropped it */
    bool zk;            /* the znode's text, else the --config file */
    int64_t version;    /* zk: the data version */
    char *input;        /* zk: the text (NUL-terminated); file: the path */
    char name[RULES_ERR_MAX / 2];
    struct rl_conf *fresh;
    int rc;
    char err[RULES_ERR_MAX];
};

static void rules_next(struct rl_rules *r);

static void
job_free(struct rl_rules_job *j)
{
    if (j != NULL) {
        rl_conf_destroy(j->fresh);
        free(j->input);
        free(j);
    }
}

/* The thread pool: the parse, on the job's own memory only. */
static void
rules_work(uv_work_t *req)
{
    struct rl_rules_job *j = req->data;

    j->err[0] = '\0';
    if (j->zk) {
        j->rc = rl_conf_parse_rules(j->name, j->input, &j->fresh, j->err, sizeof(j->err));
    } else {
        j->rc = rl_conf_load(j->input, &j->fresh, j->err, sizeof(j->err));
    }
    if (j->rc != 0) {
        rl_conf_destroy(j->fresh);
        j->fresh = NULL;
    }
    free(j->input);
    j->input = NULL;
}

void
rl_rules_init(struct rl_rules *r, struct uv_loop_s *loop, struct rl_conf *conf, const char *path,
              int (*apply)(void *arg, struct rl_conf **old), void *arg)
{
    memset(r, 0, sizeof(*r));
    r->loop = loop;
    r->conf = conf;
    r->path = path;
    r->apply = apply;
    r->arg = arg;
    r->st.version = 0;
    r->st.digest = (int64_t)conf->rules_digest;
}

/* Puts fresh's rules in force as `version`; fresh is consumed. Returns 0 or -ENOMEM. */
static int rules_put_locked(struct rl_rules *r, struct rl_conf *fresh, int64_t version,
                            const char *from);

static int
rules_put(struct rl_rules *r, struct rl_conf *fresh, int64_t version, const char *from)
{
    int rc;

    if (r->lock != NULL) {
        pthread_mutex_lock(r->lock);
    }
    rc = rules_put_locked(r, fresh, version, from);
    if (r->lock != NULL) {
        pthread_mutex_unlock(r->lock);
    }
    return rc;
}

static int
rules_put_locked(struct rl_rules *r, struct rl_conf *fresh, int64_t version, const char *from)
{
    char warn[RULES_ERR_MAX];
    size_t nrules = fresh->nrules, ntiers = fresh->ntiers;
    int rc;

    if (nrules == 0 && r->conf->nrules > 0) {
        /* A file cut to nothing (or a rules document emptied) would make every CHECK
         * NO_RULE, which allows: every limit lifted at once, and every counter lost. */
        rl_conf_destroy(fresh);
        r->st.failures++;
        rl_log_error(
            "rules from %s refused: no [service] section where %zu are in force (a "
            "file cut short?); the rules in force stay (rules_version %" PRId64
            "); to serve without any rule, restart with none in the config file (and no rules "
            "znode)",
            from, r->conf->nrules, r->st.version);
        return -EINVAL;
    }
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

/* The loop: a parse is done (status UV_ECANCELED: it never ran). */
static void
rules_after(uv_work_t *req, int status)
{
    struct rl_rules_job *j = req->data;
    struct rl_rules *r = j->r;
    struct rl_conf *fresh;

    if (r == NULL) {
        job_free(j); /* dropped by rl_rules_close (status UV_ECANCELED if it never ran) */
        return;
    }
    r->job = NULL;
    if (status != 0) {
        /* Only a cancel makes one, and only rl_rules_close cancels: cannot happen. */
        job_free(j);
        rules_next(r);
        return;
    }
    fresh = j->fresh;
    j->fresh = NULL;
    if (j->zk) {
        if (j->rc != 0) {
            r->st.failures++;
            rl_log_error("rules refused whole: %s; the rules in force stay (rules_version %" PRId64
                         ")",
                         j->err, r->st.version);
        } else {
            (void)rules_put(r, fresh, j->version + 1, j->name);
        }
    } else if (j->rc != 0) {
        r->st.failures++;
        rl_log_error("SIGHUP: rules not reloaded, %s is refused whole: %s; the rules in force "
                     "stay (digest %016" PRIx64 ")",
                     r->path, j->err, (uint64_t)r->st.digest);
    } else {
        rl_log_info("SIGHUP: reloading the [service] sections of %s (other sections are read "
                    "at start only: a change to them needs a restart)",
                    r->path);
        (void)rules_put(r, fresh, 0, r->path);
    }
    job_free(j);
    rules_next(r);
}

/* Starts the parse that waits, if none is in flight: the znode's text first (a SIGHUP after
 * it only says the rules come from ZooKeeper, a SIGHUP before it is overridden by it). */
static void
rules_next(struct rl_rules *r)
{
    while (r->job == NULL && !r->closed) {
        struct rl_rules_job *j;
        int rc;

        if (r->next_zk != NULL) {
            j = r->next_zk;
            r->next_zk = NULL;
            if (j->version + 1 == r->st.version) {
                job_free(j); /* in force already */
                continue;
            }
        } else if (r->next_file) {
            r->next_file = false;
            if (r->st.version > 0) {
                rl_log_info("SIGHUP: the rules come from ZooKeeper (rules_version %" PRId64
                            "), not from %s: not reloaded (push them with rl-cli rules push)",
                            r->st.version, r->path);
                continue;
            }
            j = calloc(1, sizeof(*j));
            if (j == NULL || (j->input = strdup(r->path)) == NULL) {
                free(j);
                r->st.failures++;
                rl_log_error("SIGHUP: rules not reloaded: out of memory; the rules in force "
                             "stay (digest %016" PRIx64 ")",
                             (uint64_t)r->st.digest);
                continue;
            }
        } else {
            return;
        }
        j->r = r;
        j->req.data = j;
        r->job = j;
        if (r->loop == NULL) {
            rules_work(&j->req);
            rules_after(&j->req, 0);
            return; /* rules_after went on with what waits */
        }
        rc = uv_queue_work(r->loop, &j->req, rules_work, rules_after);
        if (rc != 0) {
            r->job = NULL;
            r->st.failures++;
            rl_log_error("rules from %s not reloaded: cannot start their parse: %s; the rules "
                         "in force stay (rules_version %" PRId64 ")",
                         j->zk ? j->name : r->path, uv_strerror(rc), r->st.version);
            job_free(j);
        }
    }
}

int
rl_rules_reload_file(struct rl_rules *r)
{
    if (r->closed) {
        return 0;
    }
    r->next_file = true;
    rules_next(r);
    return 0;
}

void
rl_rules_from_zk(struct rl_rules *r, const char *text, size_t len, int64_t version)
{
    struct rl_rules_job *j;
    char name[RULES_ERR_MAX / 2];

    if (r->closed) {
        return;
    }
    snprintf(name, sizeof(name), "zookeeper:/ratelimiter/%s/rules@%" PRId64, r->conf->cluster_name,
             version);
    if (version < 0) {
        if (r->st.version > 0) {
            rl_log_warn("the rules znode is gone: rules_version %" PRId64
                        " stays in force (the znode's last rules are authoritative until a "
                        "restart)",
                        r->st.version);
        }
        return;
    }
    if (version + 1 == r->st.version && r->job == NULL && r->next_zk == NULL) {
        return;
    }
    if (memchr(text, '\0', len) != NULL) {
        r->st.failures++;
        rl_log_error("rules in %s refused: they contain a NUL byte; the rules in force stay "
                     "(rules_version %" PRId64 ")",
                     name, r->st.version);
        return;
    }
    j = calloc(1, sizeof(*j));
    if (j == NULL || (j->input = malloc(len + 1)) == NULL) {
        free(j);
        r->st.failures++;
        rl_log_error("rules in %s refused: out of memory", name);
        return;
    }
    memcpy(j->input, text, len);
    j->input[len] = '\0';
    j->zk = true;
    j->version = version;
    memcpy(j->name, name, sizeof(name));
    job_free(r->next_zk); /* superseded before its parse began */
    r->next_zk = j;
    rules_next(r);
}

void
rl_rules_close(struct rl_rules *r)
{
    r->closed = true;
    r->next_file = false;
    job_free(r->next_zk);
    r->next_zk = NULL;
    if (r->job != NULL) {
        r->job->r = NULL;
        /* Not started yet: rules_after runs with UV_ECANCELED; else it runs when done. */
        (void)uv_cancel((uv_req_t *)&r->job->req);
        r->job = NULL;
    }
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
