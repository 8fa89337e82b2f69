/*
 * conf_int: what the files of the config reader share, and nothing else includes: the
 * parser's state (struct conf_parser), the key table and section kinds, and the calls each
 * file makes of a file below it. From the top: conf_load.c reads lines and loads (libinih,
 * the entry points); conf_sections.c opens and checks sections; conf_keys.c holds the key
 * table and the setters of [cluster], [router], [clients] and [node]; conf_service.c the
 * [service] sections and the limit grammar; conf_client.c the [client] sections and the
 * cluster secret; conf_util.c the errors, arrays, name checks and shared setters they all
 * use; conf.c the struct rl_conf itself (defaults, queries, release).
 */
#ifndef RL_CONF_INT_H
#define RL_CONF_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "conf.h"

#define CONF_NODE_NAME_MAX 63 /* [node NAME] and [client NAME] */
#define CONF_KEYS_MAX 64      /* keys of every section kind together */

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
    const char *args[2]; /* what each argument names, for messages: "node", "service"... */
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
    int region_line; /* where [cluster] region or regions was last set */
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
    int tls_line; /* the first tls_* key's */
    size_t rules_cap;
    size_t tiers_cap;
    bool rules_only; /* a rules file: [service] sections only */
    int err;         /* 0, or the negative errno of the first error */
    char *msg;
    size_t msglen;
    char why[256]; /* phrases built at run time */
};

/* ---- conf.c: the struct rl_conf itself ----------------------------------------------- */

/* A conf with every default, named name (its path); NULL without memory. */
struct rl_conf *conf_create(const char *name);

/* ---- conf_util.c: the helpers under every other file ----------------------------------- */

/* Records the first error, "NAME:LINE: ..." (line 0: "NAME: ..."), in p->msg. */
void __attribute__((format(printf, 4, 5)))
conf_fail(struct conf_parser *p, int line, int err, const char *fmt, ...);

/* Fails with -ENOMEM at the current line; returns the phrase for a setter to return. */
const char *conf_nomem(struct conf_parser *p);

/*
 * Room for one more element at index n of an array p grows: arrp is the address of the
 * array's pointer, *cap its allocated count (first, then doubled). Returns the element,
 * zeroed, or NULL after conf_nomem with the array as it was.
 */
void *conf_push(struct conf_parser *p, void *arrp, size_t n, size_t *cap, size_t size,
                size_t first);

/* A copy of s, or NULL after conf_nomem. */
char *conf_strdup(struct conf_parser *p, const char *s);

/* A name that is also safe as a znode path component: [A-Za-z0-9_.-]{1,max}, not . or .. */
bool conf_valid_name(const char *s, size_t max);

/* Every name (of a section, of the cluster) is printable UTF-8 first (utf8.h): NULL, or the
 * phrase with the byte offset at fault, "is not valid UTF-8 at byte offset 3", in p->why. */
const char *conf_name_text(struct conf_parser *p, const char *name);

/* The setters the sections share; each returns NULL or the phrase after `KEY: "VALUE"`. */
const char *conf_set_string(struct conf_parser *p, char **field, const char *v);
/* One of two words: off sets *field false, on true; anything else gets phrase. */
const char *conf_set_either(bool *field, const char *v, const char *off, const char *on,
                            const char *phrase);
const char *conf_set_yesno(bool *field, const char *v);

/* ---- conf_sections.c ------------------------------------------------------------------- */

extern const struct conf_kind_def conf_kinds[];

/* Opens the section whose header is the line [s, e), brackets included. */
void conf_section_open(struct conf_parser *p, char *s, char *e);

/* Checks what a section needs once all its keys are in; errors point at its header. */
void conf_section_close(struct conf_parser *p);

/* ---- conf_keys.c: every key, and the setters of [cluster], [router], [clients], [node] -- */

extern const struct conf_key conf_keys[];
extern const size_t conf_nkeys;

/* After the whole file: [cluster] region is one of [cluster] regions (docs/REGIONS.md). */
void conf_regions_finish(struct conf_parser *p);

/* ---- conf_service.c -------------------------------------------------------------------- */

/* Opens [service S] or [service S E]: 0, or a negative errno after conf_fail. */
int conf_section_service(struct conf_parser *p, const char *service, const char *endpoint);
const char *conf_set_failure(struct conf_parser *p, const char *v);
const char *conf_set_mode(struct conf_parser *p, const char *v);
const char *conf_set_scope(struct conf_parser *p, const char *v);
const char *conf_set_limit(struct conf_parser *p, const char *v);

/* ---- conf_client.c --------------------------------------------------------------------- */

/* Opens [client NAME]: 0, or a negative errno after conf_fail. */
int conf_section_client(struct conf_parser *p, const char *name);
const char *conf_set_client_token(struct conf_parser *p, const char *v);
const char *conf_set_client_services(struct conf_parser *p, const char *v);
const char *conf_set_client_stats(struct conf_parser *p, const char *v);
const char *conf_set_client_adjust(struct conf_parser *p, const char *v);
const char *conf_set_clients_adjust(struct conf_parser *p, const char *v);

/* Once the whole file is in: each client's services resolved against the rules, the
 * cluster secret's principal, and the secret read from secret_file. */
void conf_auth_finish(struct conf_parser *p);

#endif
