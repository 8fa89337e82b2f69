/*
 * envoycfg: envoyproxy/ratelimit's YAML configuration (domains of nested descriptors with
 * their rate_limit), loaded as that service loads it, with this project's two extensions
 * (an `algorithm:` per rate_limit, several limits on one descriptor), and the lookup of the
 * limit for a request's descriptor as its GetLimit does (docs/ENVOY.md says both). Parsed
 * with libyaml; every rejection is one line "FILE:LINE: message"; every input is bounded
 * (RL_ENVOY_*_MAX). Not for the gRPC service, the counting nor cluster.conf (conf.h).
 */
#ifndef RL_ENVOYCFG_H
#define RL_ENVOYCFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ruleset.h"

/* Bounds of what a configuration may hold (docs/ENVOY.md, "Bounds"). */
#define RL_ENVOY_FILE_MAX (1u << 20)     /* bytes in one YAML file */
#define RL_ENVOY_FILES_MAX 256u          /* *.yaml files in one directory */
#define RL_ENVOY_DEPTH_MAX 16u           /* descriptor nesting levels below a domain */
#define RL_ENVOY_YAML_DEPTH_MAX 64u      /* YAML maps and lists inside one another (metadata too) */
#define RL_ENVOY_DESCRIPTORS_MAX 100000u /* descriptors in the whole configuration */
#define RL_ENVOY_LIMITS_MAX 16u          /* limits on one descriptor (extension) */
#define RL_ENVOY_REPLACES_MAX 64u        /* `replaces` entries of one limit */
#define RL_ENVOY_NAME_MAX 256u           /* bytes of a domain, key, limit name or replaces name */
#define RL_ENVOY_VALUE_MAX 1024u         /* bytes of a descriptor value */
#define RL_ENVOY_ENTRIES_MAX 64u         /* entries of a request's descriptor that can match */

/* rate_limit `unit`, with the numbers of RateLimitResponse.RateLimit.Unit in rls.proto. */
enum rl_envoy_unit {
    RL_ENVOY_UNIT_UNKNOWN = 0, /* only with `unlimited: true` */
    RL_ENVOY_UNIT_SECOND = 1,
    RL_ENVOY_UNIT_MINUTE = 2,
    RL_ENVOY_UNIT_HOUR = 3,
    RL_ENVOY_UNIT_DAY = 4,
    RL_ENVOY_UNIT_MONTH = 5, /* 30 days, as upstream divides time */
    RL_ENVOY_UNIT_YEAR = 6,  /* 365 days */
    RL_ENVOY_UNIT_WEEK = 7,
};

/* The unit's name as written in the YAML ("second"...), "unknown" otherwise. */
const char *rl_envoy_unit_name(enum rl_envoy_unit u);

/* The unit's length in seconds as upstream divides time (month 30 days, year 365); 0 for
 * UNKNOWN or a value out of range. */
uint64_t rl_envoy_unit_seconds(enum rl_envoy_unit u);

/* One `rate_limit` (or one item of a list of them, the extension). */
struct rl_envoy_limit {
    uint32_t requests_per_unit; /* 0 when not given, as upstream (every request over limit) */
    enum rl_envoy_unit unit;    /* UNKNOWN iff unlimited */
    bool unlimited;
    enum rl_algo algo; /* `algorithm:` (extension); fixed_window when not given */
    bool algo_set;     /* `algorithm:` was given */
    uint32_t burst;    /* `burst:` (extension, bucket algorithms); requests_per_unit by default */
    char *name;        /* "" when not given */
    char **replaces;   /* nreplaces names, none empty, none equal to name */
    size_t nreplaces;
    int line;
};

/* One descriptor of the configuration (or a domain's root, with key NULL). */
struct rl_envoy_desc {
    char *key;       /* NULL for a domain's root */
    char *value;     /* NULL when the descriptor has no value (it matches any value) */
    char *composite; /* "key" or "key_value": what upstream indexes and compares */
    char *full_key;  /* "domain.composite.composite...": upstream's FullKey, its stat name */
    bool shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold;
    bool wildcard;                 /* composite holds '*' */
    struct rl_envoy_limit *limits; /* nlimits of them; 0 when it has no rate_limit */
    size_t nlimits;
    struct rl_envoy_desc **children; /* in file order */
    size_t nchildren;
    uint32_t *index;                  /* children sorted by composite, for the exact lookups */
    struct rl_envoy_desc **wildcards; /* the children with wildcard set, in file order */
    size_t nwildcards;
    const char *file; /* points into rl_envoy_config.files */
    int line;
};

struct rl_envoy_domain {
    char *name;
    struct rl_envoy_desc root;
};

struct rl_envoy_config {
    struct rl_envoy_domain *domains; /* sorted by name */
    size_t ndomains;
    size_t ndescriptors;
    char **files; /* the files loaded, for rl_envoy_desc.file */
    size_t nfiles;
    uint32_t refs; /* atomic: holders (rl_envoy_config_hold); a loaded config has one */
};

/* Loading options. */
struct rl_envoy_opts {
    /* Upstream's MERGE_DOMAIN_CONFIG: a domain in several files has its descriptors merged
     * (a duplicate descriptor is still an error); without it a second one is an error. */
    bool merge_domains;
};

/* A configuration's source files, read whole: what rl_envoy_load reads from the disk, and
 * what a bundle (the envoy znode in ZooKeeper, docs/OPERATIONS.md) carries. */
struct rl_envoy_file {
    char *name; /* as errors name it: the path read, or the name the bundle gives */
    char *text; /* len bytes, NUL-terminated */
    size_t len;
};
struct rl_envoy_files {
    struct rl_envoy_file *f;
    size_t n;
};

void rl_envoy_files_free(struct rl_envoy_files *fs);

/*
 * Reads path whole into *fs: a YAML file, or a directory whose `*.yaml` files are taken in
 * name order (names starting with '.' skipped; at most RL_ENVOY_FILES_MAX, each at most
 * RL_ENVOY_FILE_MAX bytes). 0, or -1 with "PATH: message" in err (errlen > 0).
 */
int rl_envoy_read(const char *path, struct rl_envoy_files *fs, char *err, size_t errlen);

/* Loads the files of fs, in order, as one configuration: the results of rl_envoy_load. */
int rl_envoy_parse_files(const struct rl_envoy_files *fs, const struct rl_envoy_opts *opts,
                         struct rl_envoy_config **out, char *err, size_t errlen);

/*
 * Loads path: a YAML file, or a directory whose `*.yaml` files are loaded in name order
 * (names starting with '.' skipped). Returns 0 with *out set, or -1 with one line in err
 * ("FILE:LINE: message", or "PATH: message" when no line applies; errlen > 0). opts may be
 * NULL. rl_envoy_read then rl_envoy_parse_files.
 */
int rl_envoy_load(const char *path, const struct rl_envoy_opts *opts, struct rl_envoy_config **out,
                  char *err, size_t errlen);

/* Loads one file's text (len bytes, need not end in NUL) named name in messages; the same
 * results as rl_envoy_load. For tests and the fuzzer. */
int rl_envoy_parse(const char *name, const char *text, size_t len, const struct rl_envoy_opts *opts,
                   struct rl_envoy_config **out, char *err, size_t errlen);

/*
 * A bundle: several files in one text, as the envoy znode holds them (docs/OPERATIONS.md,
 * "ZooKeeper layout"). The first line is RL_ENVOY_BUNDLE_MAGIC; then, for each file, a line
 * "file BYTES NAME" (NAME: 1..RL_ENVOY_NAME_MAX bytes of printable UTF-8) followed by exactly
 * BYTES bytes of the file and one "\n". rl_envoy_bundle writes fs as one (malloc'd, *len
 * bytes, NUL-terminated: free it); 0 or -1 (out of memory, or a name it cannot carry).
 */
#define RL_ENVOY_BUNDLE_MAGIC "# ratelimiter envoy config bundle 1"
int rl_envoy_bundle(const struct rl_envoy_files *fs, char **out, size_t *len);

/*
 * Reads a bundle (len bytes) into *fs, with the bounds of rl_envoy_read; 0, or -1 with
 * "what: message" in err (what names the bundle in messages).
 */
int rl_envoy_unbundle(const char *what, const char *text, size_t len, struct rl_envoy_files *fs,
                      char *err, size_t errlen);

/*
 * A cheap stamp of path's files as stat(2) sees them (the file, or the directory and its
 * `*.yaml` files: names, sizes, modification times, inodes), for noticing a change without
 * reading them. Two equal stamps mean nothing changed as far as stat can tell; 0 when path
 * cannot be read.
 */
uint64_t rl_envoy_stamp(const char *path);

/* A loaded configuration is shared by reference: it is born with one (the loader's
 * caller's); hold adds one (any thread: a process's workers and their calls in flight share
 * one config); drop gives one back and the last frees it. c may be NULL for drop. free is
 * drop, for the holder of the only reference. */
void rl_envoy_config_hold(struct rl_envoy_config *c);
void rl_envoy_config_drop(struct rl_envoy_config *c);
void rl_envoy_config_free(struct rl_envoy_config *c);

/* The domain called name (len bytes), or NULL. */
const struct rl_envoy_domain *rl_envoy_domain(const struct rl_envoy_config *c, const char *name,
                                              size_t len);

/* One entry of a request's descriptor; the strings need no terminating NUL. */
struct rl_envoy_entry {
    const char *key;
    size_t key_len;
    const char *value;
    size_t value_len;
};

/*
 * The configuration descriptor whose limits apply to a request's descriptor (n entries) in
 * domain, as upstream's GetLimit finds it: entry i is looked up among the children of the
 * descriptor entry i-1 matched (the domain's root for i = 0), first as "key_value" exactly,
 * then against the wildcard children in file order, then as "key" alone; the walk stops at
 * the first entry nothing matches or at a descriptor with no children. The result is the
 * descriptor matched by the LAST entry, if it has limits; NULL otherwise (unknown domain,
 * n == 0, n > RL_ENVOY_ENTRIES_MAX, a shorter or longer path, or no rate_limit there).
 * share, when not NULL, has n slots: slot i is the wildcard value (star included) when
 * entry i was matched by a wildcard descriptor with share_threshold, NULL otherwise.
 * No allocation; safe from several threads at once.
 */
const struct rl_envoy_desc *rl_envoy_match(const struct rl_envoy_config *c, const char *domain,
                                           size_t dlen, const struct rl_envoy_entry *e, size_t n,
                                           const char **share);

/* The bytes wildcard matching compared on the calling thread since it started: the work of
 * the matches between two reads, which the gRPC front charges to the connection whose calls
 * they were (a config of many wildcards against long values costs a call milliseconds). */
uint64_t rl_envoy_match_steps(void);

/*
 * Upstream's counter key for a descriptor, without its prefix nor time bucket:
 * "domain_" then "key_value_" for each entry (with the share slot's pattern in place of the
 * value when set). Writes it into dst (cap bytes, terminated when cap > 0) and returns its
 * length, which may be cap or more (then dst holds a cut copy), as snprintf.
 */
size_t rl_envoy_counter_key(char *dst, size_t cap, const char *domain, size_t dlen,
                            const struct rl_envoy_entry *e, size_t n, const char **share);

#endif
