/*
 * conf_load: reads cluster.conf (or a rules file, or a string) into a struct rl_conf, the
 * top of the config reader. libinih splits `KEY = VALUE` lines and calls conf_handler; the
 * lines themselves come from conf_reader, which counts them (Debian's libinih gives the
 * handler no line number), strips comments and blanks, and hands section headers to
 * conf_sections.c, because libinih cuts section names to 49 bytes and never tells the
 * handler that a section began. Each key goes to its setter through conf_keys.c's table;
 * once the whole file is in, the clients and the regions are checked (conf_client.c,
 * conf_keys.c). Every error is one line "FILE:LINE: what is wrong"; parsing stops at the
 * first one. Calls go down: conf_load.c -> conf_sections.c, conf_keys.c (the table) ->
 * conf_service.c, conf_client.c -> conf_util.c -> conf.c. Not for command-line options, nor
 * for anything that changes after load.
 */
#include "conf.h"

#include "conf_int.h"
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* libinih's callbacks. */

static bool
is_blank(int ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n' || ch == '\v' || ch == '\f';
}

/* Reads the next physical line into p->buf; false at the end or on a read error. */
static bool
next_line(struct conf_parser *p, size_t *len)
{
    ssize_t n;
    size_t need;

    if (p->fp != NULL) {
        errno = 0;
        n = getline(&p->buf, &p->bufcap, p->fp);
        if (n < 0) {
            if (ferror(p->fp)) {
                conf_fail(p, 0, errno != 0 ? -errno : -EIO, "cannot read: %s",
                          strerror(errno != 0 ? errno : EIO));
            }
            return false;
        }
        *len = (size_t)n;
        return true;
    }
    if (*p->text == '\0') {
        return false;
    }
    need = strcspn(p->text, "\n");
    need += p->text[need] == '\n';
    if (need + 1 > p->bufcap) {
        char *buf = realloc(p->buf, need + 1);

        if (buf == NULL) {
            conf_nomem(p);
            return false;
        }
        p->buf = buf;
        p->bufcap = need + 1;
    }
    memcpy(p->buf, p->text, need);
    p->buf[need] = '\0';
    p->text += need;
    *len = need;
    return true;
}

/*
 * The ini_reader: hands libinih one line per physical line, so its line numbers stay ours,
 * with comments and surrounding blanks removed. Removing the leading blanks means an
 * indented line is read like any other and never continues the previous value. Section
 * headers are handled here and reach libinih as blank lines.
 */
static char *
conf_reader(char *str, int num, void *stream)
{
    struct conf_parser *p = stream;
    char *s;
    char *e;
    char *q;
    size_t len;

    if (p->err != 0 || p->eof) {
        return NULL;
    }
    if (!next_line(p, &len)) {
        p->eof = true;
        if (p->err == 0) {
            conf_section_close(p);
        }
        return NULL;
    }
    p->line++;
    s = p->buf;
    e = p->buf + len;
    if (memchr(s, '\0', len) != NULL) {
        conf_fail(p, p->line, -EINVAL, "line contains a NUL byte");
        return NULL;
    }
    if (p->line == 1 && len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {
        s += 3;
    }
    while (s < e && is_blank((unsigned char)*s)) {
        s++;
    }
    if (s < e && (*s == ';' || *s == '#')) {
        e = s;
    }
    /* An inline comment starts at ';' or '#' after a blank, so "a#b" is a value. */
    for (q = s + 1; q < e; q++) {
        if ((*q == ';' || *q == '#') && is_blank((unsigned char)q[-1])) {
            e = q;
            break;
        }
    }
    while (e > s && is_blank((unsigned char)e[-1])) {
        e--;
    }
    *e = '\0';
    str[0] = '\0';
    if (s == e) {
        return str;
    }
    if (*s == '[') {
        conf_section_close(p);
        conf_section_open(p, s, e);
        return p->err != 0 ? NULL : str;
    }
    q = s + strcspn(s, "=:");
    if (*q != '=' || q == s) {
        /* libinih would also take "KEY: VALUE"; no key of ours has a ':' so refuse it. */
        conf_fail(p, p->line, -EINVAL, "expected KEY = VALUE");
        return NULL;
    }
    if (e - s > RL_CONF_LINE_MAX || e - s >= num) {
        conf_fail(p, p->line, -EINVAL, "line is longer than %d bytes",
                  num - 1 < RL_CONF_LINE_MAX ? num - 1 : RL_CONF_LINE_MAX);
        return NULL;
    }
    memcpy(str, s, (size_t)(e - s) + 1);
    return str;
}

static int
conf_handler(void *user, const char *section, const char *name, const char *value)
{
    struct conf_parser *p = user;
    const struct conf_key *key;
    const char *why;
    size_t i;

    /* The reader keeps the section: libinih's copy of its name is cut to 49 bytes. */
    (void)section;
    if (p->err != 0) {
        return 0;
    }
    if (!p->in_section) {
        conf_fail(p, p->line, -EINVAL, "key \"%s\" is outside any section", name);
        return 0;
    }
    for (i = 0; i < conf_nkeys; i++) {
        if (conf_keys[i].kind == p->sec.kind && strcmp(conf_keys[i].name, name) == 0) {
            break;
        }
    }
    if (i == conf_nkeys) {
        conf_fail(p, p->line, -EINVAL, "unknown key \"%s\" in a [%s] section", name,
                  conf_kinds[p->sec.kind].name);
        return 0;
    }
    key = &conf_keys[i];
    if (!key->repeat && p->sec.seen[i] != 0) {
        conf_fail(p, p->line, -EINVAL, "duplicate key \"%s\" (first at line %d)", name,
                  p->sec.seen[i]);
        return 0;
    }
    p->sec.seen[i] = p->line;
    why = key->set(p, value);
    if (why != NULL) {
        conf_fail(p, p->line, -EINVAL, "%s: \"%s\" %s", name, value, why);
        return 0;
    }
    return 1;
}

/* Loading. */

/*
 * libinih's options are process globals in Debian's build. conf is their only user in
 * ratelimiter and sets the same values for every load, once: loads may run at once on several
 * threads (a router's workers parse new rules each on the thread pool). The reader already
 * removes leading blanks, so turning multiline off is belt and braces; the line length is what
 * lets a long zookeeper list through.
 */
static pthread_once_t conf_ini_once = PTHREAD_ONCE_INIT;

static void
conf_ini_options(void)
{
    ini_allow_multiline = false;
    ini_max_line = RL_CONF_LINE_MAX + 3;
    ini_initial_alloc = RL_CONF_LINE_MAX + 3;
}

static int
conf_run(struct conf_parser *p, struct rl_conf **out)
{
    int rc;

    *out = NULL;
    if (p->msg != NULL && p->msglen != 0) {
        p->msg[0] = '\0';
    }
    p->c = conf_create(p->name);
    if (p->c == NULL) {
        conf_fail(p, 0, -ENOMEM, "out of memory");
        return p->err;
    }
    pthread_once(&conf_ini_once, conf_ini_options);
    rc = ini_parse_stream(conf_reader, p, conf_handler, p);
    if (rc == -2) {
        conf_fail(p, p->line, -ENOMEM, "out of memory");
    } else if (rc != 0 && p->err == 0) {
        /* The reader refuses every line libinih could not parse, so this is a guard. */
        conf_fail(p, rc, -EINVAL, "syntax error");
    }
    free(p->buf);
    p->buf = NULL;
    if (p->err == 0) {
        p->c->rules_digest = rl_ruleset_digest(p->c);
        conf_auth_finish(p);
    }
    if (p->err == 0) {
        conf_regions_finish(p);
    }
    if (p->err != 0) {
        rl_conf_destroy(p->c);
        return p->err;
    }
    *out = p->c;
    return 0;
}

/*
 * The directory of the file name, absolute when it resolves (a process that changes its cwd
 * later still finds the files), else as written; NULL without memory.
 */
static char *
conf_dir(const char *name)
{
    const char *slash = strrchr(name, '/');
    char *dir, *real;

    if (slash == NULL) {
        dir = strdup(".");
    } else {
        dir = strndup(name, slash == name ? 1 : (size_t)(slash - name));
    }
    real = dir != NULL ? realpath(dir, NULL) : NULL;
    if (real != NULL) {
        free(dir);
        return real;
    }
    return dir;
}

/* Parses a file (text NULL) or a string, the whole config or only [service] sections. */
static int
conf_parse(const char *name, const char *text, bool rules_only, struct rl_conf **out, char *err,
           size_t errlen)
{
    struct conf_parser p;
    int rc;

    memset(&p, 0, sizeof(p));
    p.name = name;
    p.text = text;
    p.msg = err;
    p.msglen = errlen;
    p.rules_only = rules_only;
    if (text == NULL) {
        /* A regular file only (a FIFO would block the process: at start, or at a SIGHUP's
         * reload), opened O_CLOEXEC so a process that forks never leaks it into a child. */
        int fd = rl_file_open(name, O_RDONLY, 0, 0);

        p.fp = fd >= 0 ? fdopen(fd, "r") : NULL;
        if (p.fp == NULL) {
            rc = fd >= 0 ? -errno : fd;
            if (fd >= 0) {
                close(fd);
            }
            conf_fail(&p, 0, rc, "%s", rl_file_strerror(rc));
            *out = NULL;
            return rc;
        }
        p.dir = conf_dir(name);
        if (p.dir == NULL) {
            fclose(p.fp);
            conf_fail(&p, 0, -ENOMEM, "out of memory");
            *out = NULL;
            return -ENOMEM;
        }
    }
    rc = conf_run(&p, out);
    if (p.fp != NULL) {
        fclose(p.fp);
    }
    free(p.dir);
    return rc;
}

int
rl_conf_load(const char *path, struct rl_conf **out, char *err, size_t errlen)
{
    return conf_parse(path, NULL, false, out, err, errlen);
}

int
rl_conf_parse(const char *name, const char *text, struct rl_conf **out, char *err, size_t errlen)
{
    return conf_parse(name, text, false, out, err, errlen);
}

int
rl_conf_parse_rules(const char *name, const char *text, struct rl_conf **out, char *err,
                    size_t errlen)
{
    return conf_parse(name, text, true, out, err, errlen);
}

int
rl_conf_load_rules(const char *path, struct rl_conf **out, char *err, size_t errlen)
{
    return conf_parse(path, NULL, true, out, err, errlen);
}
