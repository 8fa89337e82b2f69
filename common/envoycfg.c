/*
 * envoycfg: the YAML reader of the envoycfg module (envoycfg.h): envoyproxy/ratelimit's
 * configuration turned into a struct rl_envoy_config with libyaml's document API and checked
 * as upstream's config_impl.go checks it (same messages where upstream has one), plus the
 * bounds and the two extensions of docs/ENVOY.md; every rejection is "FILE:LINE: message".
 * This file walks a file's text: its YAML events checked first (nesting, aliases), then the
 * document loaded and its root read (domain, descriptors, domains merged across files), and
 * the config's life (hold, drop); the descriptors under the root, with their checks and
 * index, are envoycfg_desc.c's. Not for matching a request (envoycfg_match.c), reading
 * files, directories or bundles (envoycfg_src.c), nor the service.
 */
#include "envoycfg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "envoycfg_int.h"

static int
cmp_domain(const void *a, const void *b)
{
    return strcmp(((const struct rl_envoy_domain *)a)->name,
                  ((const struct rl_envoy_domain *)b)->name);
}

static int
load_root(struct ld *l, const yaml_node_t *root)
{
    static const char *const keys[] = {"domain", "descriptors", NULL};
    const yaml_node_t *dom = NULL, *descs = NULL;
    char *name = NULL;
    char b[400];

    if (root != NULL && !envoy_is_null(root)) {
        if (root->type != YAML_MAPPING_NODE) {
            return envoy_fail(l, envoy_line_of(root), "the file must be a map of domain and descriptors");
        }
        if (envoy_check_keys(l, root, "", keys) != 0) {
            return -1;
        }
        for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
             p++) {
            const yaml_node_t *v = envoy_node_at(l, p->value, envoy_line_of(root));
            if (v == NULL) {
                return -1;
            }
            *(envoy_key_is(l, p, "domain") ? &dom : &descs) = v;
        }
    }
    if (dom != NULL && envoy_get_str(l, dom, "domain", RL_ENVOY_NAME_MAX, &name) != 0) {
        return -1;
    }
    if (name == NULL || name[0] == '\0') {
        free(name);
        return envoy_fail(l, dom ? envoy_line_of(dom) : 0, "config file cannot have empty domain");
    }
    struct rl_envoy_config *c = l->c;
    struct rl_envoy_domain *d = NULL;
    for (size_t i = 0; i < c->ndomains; i++) {
        if (strcmp(c->domains[i].name, name) == 0) {
            d = &c->domains[i];
        }
    }
    if (d != NULL && !(l->opts && l->opts->merge_domains)) {
        envoy_fail(l, envoy_line_of(dom), "duplicate domain '%s' in config file (first in %s:%d)",
             envoy_shown(name, strlen(name), b, sizeof(b)), d->root.file, d->root.line);
        free(name);
        return -1;
    }
    if (d == NULL) {
        struct rl_envoy_domain *nd = realloc(c->domains, (c->ndomains + 1) * sizeof(*nd));
        if (nd == NULL) {
            free(name);
            return envoy_fail(l, envoy_line_of(dom), "out of memory");
        }
        c->domains = nd;
        d = &c->domains[c->ndomains++];
        memset(d, 0, sizeof(*d));
        d->name = name;
        d->root.file = l->file;
        d->root.line = envoy_line_of(dom);
        if ((d->root.full_key = strdup(name)) == NULL) {
            return envoy_fail(l, envoy_line_of(dom), "out of memory");
        }
    } else {
        free(name);
    }
    if (descs == NULL) {
        return envoy_finish_children(l, &d->root);
    }
    return envoy_parse_descriptors(l, descs, &d->root, 1);
}

static int
yaml_fail(struct ld *l, const yaml_parser_t *parser)
{
    return envoy_fail(l, (int)(parser->problem_mark.line + 1), "error loading config file: %s%s%s",
                parser->problem ? parser->problem : "bad YAML", parser->context ? " " : "",
                parser->context ? parser->context : "");
}

/*
 * The first document's events, before libyaml builds it: refuses nesting deeper than
 * RL_ENVOY_YAML_DEPTH_MAX and aliases early, as the cost of libyaml's scanner grows with the
 * product of the nesting and the input (about a minute for 1 MiB of '[' unchecked).
 */
static int
precheck(struct ld *l, const char *text, size_t len)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    unsigned depth = 0;
    int rc = 0;

    if (!yaml_parser_initialize(&parser)) {
        return envoy_fail(l, 0, "out of memory");
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    for (bool done = false; !done && rc == 0;) {
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = yaml_fail(l, &parser);
            break;
        }
        switch (ev.type) {
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
            if (++depth > RL_ENVOY_YAML_DEPTH_MAX) {
                rc = envoy_fail(l, (int)ev.start_mark.line + 1, "YAML nests deeper than %u levels",
                          RL_ENVOY_YAML_DEPTH_MAX);
            }
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            depth--;
            break;
        case YAML_ALIAS_EVENT:
            rc = envoy_fail(l, (int)ev.start_mark.line + 1, "YAML aliases are not supported");
            break;
        case YAML_DOCUMENT_END_EVENT: /* only the first document counts, as upstream */
        case YAML_STREAM_END_EVENT:
            done = true;
            break;
        default:
            break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    return rc;
}

static int
parse_text(struct ld *l, const char *text, size_t len)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    int rc;

    if (len > RL_ENVOY_FILE_MAX) {
        return envoy_fail(l, 0, "file is larger than %u bytes", RL_ENVOY_FILE_MAX);
    }
    if (precheck(l, text, len) != 0) {
        return -1;
    }
    if (!yaml_parser_initialize(&parser)) {
        return envoy_fail(l, 0, "out of memory");
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        rc = yaml_fail(l, &parser);
        yaml_parser_delete(&parser);
        return rc;
    }
    l->doc = &doc;
    l->nnodes = (size_t)(doc.nodes.top - doc.nodes.start);
    l->seen = calloc(l->nnodes ? l->nnodes : 1, 1);
    if (l->seen == NULL) {
        rc = envoy_fail(l, 0, "out of memory");
    } else {
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (root != NULL) {
            l->seen[0] = 1;
        }
        rc = load_root(l, root);
    }
    free(l->seen);
    l->seen = NULL;
    l->doc = NULL; /* the document dies here */
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

void
rl_envoy_config_hold(struct rl_envoy_config *c)
{
    __atomic_fetch_add(&c->refs, 1, __ATOMIC_RELAXED);
}

void
rl_envoy_config_free(struct rl_envoy_config *c)
{
    rl_envoy_config_drop(c);
}

/* Frees c (its last reference gone). */
static void
config_free(struct rl_envoy_config *c)
{
    for (size_t i = 0; i < c->ndomains; i++) {
        envoy_desc_free(&c->domains[i].root);
        free(c->domains[i].name);
    }
    free(c->domains);
    for (size_t i = 0; i < c->nfiles; i++) {
        free(c->files[i]);
    }
    free(c->files);
    free(c);
}

void
rl_envoy_config_drop(struct rl_envoy_config *c)
{
    if (c != NULL && __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        config_free(c);
    }
}

static int
add_file(struct ld *l, const char *name)
{
    char **f = realloc(l->c->files, (l->c->nfiles + 1) * sizeof(*f));

    if (f == NULL) {
        return -1;
    }
    l->c->files = f;
    if ((f[l->c->nfiles] = strdup(name)) == NULL) {
        return -1;
    }
    l->file = f[l->c->nfiles++];
    return 0;
}

static int
begin(struct ld *l, const struct rl_envoy_opts *opts, char *err, size_t errlen)
{
    memset(l, 0, sizeof(*l));
    l->opts = opts;
    l->err = err;
    l->errlen = errlen;
    l->file = "";
    l->c = calloc(1, sizeof(*l->c));
    if (l->c == NULL) {
        return -1;
    }
    l->c->refs = 1;
    return 0;
}

static int
end(struct ld *l, int rc, struct rl_envoy_config **out)
{
    if (rc != 0) {
        rl_envoy_config_free(l->c);
        *out = NULL;
        return -1;
    }
    if (l->c->ndomains > 1) { /* none at all: a bundle of no files */
        qsort(l->c->domains, l->c->ndomains, sizeof(*l->c->domains), cmp_domain);
    }
    *out = l->c;
    return 0;
}

int
rl_envoy_parse(const char *name, const char *text, size_t len, const struct rl_envoy_opts *opts,
               struct rl_envoy_config **out, char *err, size_t errlen)
{
    struct ld l;

    if (begin(&l, opts, err, errlen) != 0) {
        snprintf(err, errlen, "%s: out of memory", name);
        return -1;
    }
    if (add_file(&l, name) != 0) {
        snprintf(err, errlen, "%s: out of memory", name);
        return end(&l, -1, out);
    }
    return end(&l, parse_text(&l, text, len), out);
}

int
rl_envoy_parse_files(const struct rl_envoy_files *fs, const struct rl_envoy_opts *opts,
                     struct rl_envoy_config **out, char *err, size_t errlen)
{
    struct ld l;
    int rc = 0;

    if (begin(&l, opts, err, errlen) != 0) {
        snprintf(err, errlen, "envoy config: out of memory");
        return -1;
    }
    for (size_t i = 0; i < fs->n && rc == 0; i++) {
        if (add_file(&l, fs->f[i].name) != 0) {
            snprintf(err, errlen, "%s: out of memory", fs->f[i].name);
            rc = -1;
        } else {
            rc = parse_text(&l, fs->f[i].text, fs->f[i].len);
        }
    }
    return end(&l, rc, out);
}
