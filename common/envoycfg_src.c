/*
 * envoycfg_src: where an envoyproxy/ratelimit configuration's text comes from (envoycfg.h):
 * a file or a directory of `*.yaml` read whole, the bundle that carries such files in one
 * znode, and a stat(2) stamp that tells a change without reading anything. Not for the YAML
 * (envoycfg.c) nor for matching (envoycfg_match.c).
 */
#include "envoycfg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "utf8.h"

void
rl_envoy_files_free(struct rl_envoy_files *fs)
{
    if (fs == NULL) {
        return;
    }
    for (size_t i = 0; i < fs->n; i++) {
        free(fs->f[i].name);
        free(fs->f[i].text);
    }
    free(fs->f);
    fs->f = NULL;
    fs->n = 0;
}

/* Appends a file named name (copied) with text (taken: freed on failure). */
static int
files_add(struct rl_envoy_files *fs, const char *name, size_t nlen, char *text, size_t len)
{
    struct rl_envoy_file *f = realloc(fs->f, (fs->n + 1) * sizeof(*f));
    char *n = malloc(nlen + 1);

    if (f != NULL) {
        fs->f = f;
    }
    if (f == NULL || n == NULL) {
        free(n);
        free(text);
        return -1;
    }
    memcpy(n, name, nlen);
    n[nlen] = '\0';
    fs->f[fs->n].name = n;
    fs->f[fs->n].text = text;
    fs->f[fs->n].len = len;
    fs->n++;
    return 0;
}

static int
read_one(const char *path, struct rl_envoy_files *fs, char *err, size_t errlen)
{
    int fd = rl_file_open(path, O_RDONLY, 0, 0);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    char *buf;
    size_t n;

    if (f == NULL) {
        int rc = fd >= 0 ? -errno : fd;

        if (fd >= 0) {
            close(fd);
        }
        snprintf(err, errlen, "%s: %s", path, rl_file_strerror(rc));
        return -1;
    }
    buf = malloc(RL_ENVOY_FILE_MAX + 2);
    if (buf == NULL) {
        fclose(f);
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    n = fread(buf, 1, RL_ENVOY_FILE_MAX + 1, f);
    if (ferror(f)) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    if (n > RL_ENVOY_FILE_MAX) {
        snprintf(err, errlen, "%s: file is larger than %u bytes", path, RL_ENVOY_FILE_MAX);
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    if (files_add(fs, path, strlen(path), buf, n) != 0) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    return 0;
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The `*.yaml` names of directory path (not starting with '.'), sorted, as full paths. */
static int
list_dir(const char *path, char ***out, size_t *nout, char *err, size_t errlen)
{
    DIR *dir = opendir(path);
    char **names = NULL;
    size_t nnames = 0;
    struct dirent *de;
    int rc = 0;

    *out = NULL;
    *nout = 0;
    if (dir == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    while (rc == 0 && (de = readdir(dir)) != NULL) {
        size_t len = strlen(de->d_name);
        if (de->d_name[0] == '.' || len < 6 || strcmp(de->d_name + len - 5, ".yaml") != 0) {
            continue;
        }
        if (nnames == RL_ENVOY_FILES_MAX) {
            snprintf(err, errlen, "%s: more than %u *.yaml files", path, RL_ENVOY_FILES_MAX);
            rc = -1;
            break;
        }
        char **nn = realloc(names, (nnames + 1) * sizeof(*nn));
        char *full = malloc(strlen(path) + len + 2);
        if (nn != NULL) {
            names = nn;
        }
        if (nn == NULL || full == NULL) {
            free(full);
            snprintf(err, errlen, "%s: out of memory", path);
            rc = -1;
            break;
        }
        sprintf(full, "%s/%s", path, de->d_name);
        names[nnames++] = full;
    }
    closedir(dir);
    if (rc != 0) {
        for (size_t i = 0; i < nnames; i++) {
            free(names[i]);
        }
        free(names);
        return -1;
    }
    if (nnames > 1) { /* qsort's array may not be NULL, even of 0 elements */
        qsort(names, nnames, sizeof(*names), cmp_str);
    }
    *out = names;
    *nout = nnames;
    return 0;
}

int
rl_envoy_read(const char *path, struct rl_envoy_files *fs, char *err, size_t errlen)
{
    struct stat st;
    char **names;
    size_t n;
    int rc = 0;

    fs->f = NULL;
    fs->n = 0;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        rc = read_one(path, fs, err, errlen);
        if (rc != 0) {
            rl_envoy_files_free(fs);
        }
        return rc;
    }
    if (list_dir(path, &names, &n, err, errlen) != 0) {
        return -1;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = read_one(names[i], fs, err, errlen);
    }
    for (size_t i = 0; i < n; i++) {
        free(names[i]);
    }
    free(names);
    if (rc != 0) {
        rl_envoy_files_free(fs);
    }
    return rc;
}

int
rl_envoy_load(const char *path, const struct rl_envoy_opts *opts, struct rl_envoy_config **out,
              char *err, size_t errlen)
{
    struct rl_envoy_files fs;
    int rc;

    *out = NULL;
    if (rl_envoy_read(path, &fs, err, errlen) != 0) {
        return -1;
    }
    rc = rl_envoy_parse_files(&fs, opts, out, err, errlen);
    rl_envoy_files_free(&fs);
    return rc;
}

/* ---- bundles ---------------------------------------------------------------------------- */

static bool
bundle_name_ok(const char *s, size_t n)
{
    size_t at;

    return n >= 1 && n <= RL_ENVOY_NAME_MAX && memchr(s, '\n', n) == NULL &&
           rl_utf8_check(s, n, &at) == NULL;
}

int
rl_envoy_bundle(const struct rl_envoy_files *fs, char **out, size_t *len)
{
    size_t cap = sizeof(RL_ENVOY_BUNDLE_MAGIC) + 1, at;
    char *b;

    *out = NULL;
    *len = 0;
    for (size_t i = 0; i < fs->n; i++) {
        if (!bundle_name_ok(fs->f[i].name, strlen(fs->f[i].name))) {
            return -1;
        }
        cap += 32 + strlen(fs->f[i].name) + fs->f[i].len + 1;
    }
    b = malloc(cap);
    if (b == NULL) {
        return -1;
    }
    at = (size_t)snprintf(b, cap, "%s\n", RL_ENVOY_BUNDLE_MAGIC);
    for (size_t i = 0; i < fs->n; i++) {
        at += (size_t)snprintf(b + at, cap - at, "file %zu %s\n", fs->f[i].len, fs->f[i].name);
        memcpy(b + at, fs->f[i].text, fs->f[i].len);
        at += fs->f[i].len;
        b[at++] = '\n';
    }
    b[at] = '\0';
    *out = b;
    *len = at;
    return 0;
}

int
rl_envoy_unbundle(const char *what, const char *text, size_t len, struct rl_envoy_files *fs,
                  char *err, size_t errlen)
{
    size_t mlen = strlen(RL_ENVOY_BUNDLE_MAGIC), at;

    fs->f = NULL;
    fs->n = 0;
    if (len < mlen + 1 || memcmp(text, RL_ENVOY_BUNDLE_MAGIC, mlen) != 0 || text[mlen] != '\n') {
        snprintf(err, errlen, "%s: not an envoy config bundle (its first line is not \"%s\")", what,
                 RL_ENVOY_BUNDLE_MAGIC);
        return -1;
    }
    at = mlen + 1;
    while (at < len) {
        const char *line = text + at;
        const char *nl = memchr(line, '\n', len - at);
        size_t bytes = 0, i = 5;
        char *copy;

        if (fs->n == RL_ENVOY_FILES_MAX) {
            snprintf(err, errlen, "%s: more than %u files", what, RL_ENVOY_FILES_MAX);
            goto bad;
        }
        if (nl == NULL || (size_t)(nl - line) < 8 || memcmp(line, "file ", 5) != 0) {
            snprintf(err, errlen, "%s: file %zu: expected a line \"file BYTES NAME\"", what,
                     fs->n + 1);
            goto bad;
        }
        while (line + i < nl && line[i] >= '0' && line[i] <= '9' && bytes <= RL_ENVOY_FILE_MAX) {
            bytes = bytes * 10 + (size_t)(line[i++] - '0');
        }
        if (i == 5 || line + i >= nl || line[i] != ' ' || bytes > RL_ENVOY_FILE_MAX ||
            !bundle_name_ok(line + i + 1, (size_t)(nl - line) - i - 1)) {
            snprintf(err, errlen,
                     "%s: file %zu: expected \"file BYTES NAME\" with BYTES at most %u and a "
                     "printable NAME",
                     what, fs->n + 1, RL_ENVOY_FILE_MAX);
            goto bad;
        }
        at = (size_t)(nl - text) + 1;
        if (len - at < bytes + 1 || text[at + bytes] != '\n') {
            snprintf(err, errlen, "%s: file %zu: shorter than its %zu bytes", what, fs->n + 1,
                     bytes);
            goto bad;
        }
        copy = malloc(bytes + 1);
        if (copy != NULL) {
            memcpy(copy, text + at, bytes);
            copy[bytes] = '\0';
        }
        if (copy == NULL ||
            files_add(fs, line + i + 1, (size_t)(nl - line) - i - 1, copy, bytes) != 0) {
            snprintf(err, errlen, "%s: out of memory", what);
            goto bad;
        }
        at += bytes + 1;
    }
    return 0;
bad:
    rl_envoy_files_free(fs);
    return -1;
}

/* ---- stamp ------------------------------------------------------------------------------ */

static uint64_t
fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++) {
        h = (h ^ b[i]) * 0x100000001b3ull;
    }
    return h;
}

static uint64_t
stamp_one(uint64_t h, const char *path, const struct stat *st)
{
    int64_t v[5] = {(int64_t)st->st_size, (int64_t)st->st_mtim.tv_sec, (int64_t)st->st_mtim.tv_nsec,
                    (int64_t)st->st_ino, (int64_t)st->st_ctim.tv_nsec};

    h = fnv(h, path, strlen(path) + 1);
    return fnv(h, v, sizeof(v));
}

uint64_t
rl_envoy_stamp(const char *path)
{
    uint64_t h = 0xcbf29ce484222325ull;
    struct stat st;
    char **names;
    size_t n;
    char err[16];

    if (stat(path, &st) != 0) {
        return 0;
    }
    h = stamp_one(h, path, &st);
    if (S_ISDIR(st.st_mode) && list_dir(path, &names, &n, err, sizeof(err)) == 0) {
        for (size_t i = 0; i < n; i++) {
            if (stat(names[i], &st) == 0) {
                h = stamp_one(h, names[i], &st);
            }
            free(names[i]);
        }
        free(names);
    }
    return h != 0 ? h : 1;
}
