/*
 * conf_util: the helpers every file of the config reader stands on (conf_int.h), below all
 * of them: the first error of a load in "FILE:LINE: what is wrong" (conf_fail, conf_nomem),
 * the growth of the arrays a file fills (conf_push) and copies (conf_strdup), the checks of
 * names (printable UTF-8: conf_name_text; a znode path component: conf_valid_name), and the
 * value setters the sections share (a string, one of two words, yes or no). Calls nothing
 * of the reader's other files. Not for any key or section of its own (conf_keys.c and
 * conf_sections.c), nor for reading lines (conf_load.c).
 */
#include "conf_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

/* Errors. */

/* The message is written as printable UTF-8 (utf8.h): what it quotes from the file (a name,
 * a value) may hold any byte, and it goes to terminals, logs and rl-cli's output. */
void
conf_fail(struct conf_parser *p, int line, int err, const char *fmt, ...)
{
    char raw[RL_CONF_LINE_MAX + 1024];
    va_list ap;
    int n;

    if (p->err != 0) {
        return;
    }
    p->err = err;
    if (p->msg == NULL || p->msglen == 0) {
        return;
    }
    if (line > 0) {
        n = snprintf(raw, sizeof(raw), "%s:%d: ", p->name, line);
    } else {
        n = snprintf(raw, sizeof(raw), "%s: ", p->name);
    }
    if (n < 0) {
        n = 0;
    } else if ((size_t)n >= sizeof(raw)) {
        n = (int)sizeof(raw) - 1;
    }
    va_start(ap, fmt);
    vsnprintf(raw + n, sizeof(raw) - (size_t)n, fmt, ap);
    va_end(ap);
    rl_utf8_escape(p->msg, p->msglen, raw, strlen(raw), 0);
}

const char *
conf_nomem(struct conf_parser *p)
{
    conf_fail(p, p->line, -ENOMEM, "out of memory");
    return "could not be stored: out of memory";
}

void *
conf_push(struct conf_parser *p, void *arrp, size_t n, size_t *cap, size_t size, size_t first)
{
    void *arr;

    memcpy(&arr, arrp, sizeof(arr));
    if (n == *cap) {
        size_t ncap = *cap != 0 ? *cap * 2 : first;
        void *grown = realloc(arr, ncap * size);

        if (grown == NULL) {
            conf_nomem(p);
            return NULL;
        }
        arr = grown;
        memcpy(arrp, &arr, sizeof(arr));
        *cap = ncap;
    }
    return memset((char *)arr + n * size, 0, size);
}

char *
conf_strdup(struct conf_parser *p, const char *s)
{
    char *copy = strdup(s);

    if (copy == NULL) {
        conf_nomem(p);
    }
    return copy;
}

/* Names. */

const char *
conf_name_text(struct conf_parser *p, const char *name)
{
    size_t at = 0;
    const char *why = rl_utf8_check(name, strlen(name), &at);

    if (why == NULL) {
        return NULL;
    }
    snprintf(p->why, sizeof(p->why), "%s at byte offset %zu", why, at);
    return p->why;
}

bool
conf_valid_name(const char *s, size_t max)
{
    size_t n;

    for (n = 0; s[n] != '\0'; n++) {
        if (!rl_is_alnum((unsigned char)s[n]) && s[n] != '_' && s[n] != '.' && s[n] != '-') {
            return false;
        }
    }
    return n >= 1 && n <= max && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* The setters the sections share. */

const char *
conf_set_string(struct conf_parser *p, char **field, const char *v)
{
    char *copy = strdup(v);

    if (copy == NULL) {
        return conf_nomem(p);
    }
    free(*field);
    *field = copy;
    return NULL;
}

const char *
conf_set_either(bool *field, const char *v, const char *off, const char *on, const char *phrase)
{
    if (strcmp(v, off) == 0) {
        *field = false;
    } else if (strcmp(v, on) == 0) {
        *field = true;
    } else {
        return phrase;
    }
    return NULL;
}

const char *
conf_set_yesno(bool *field, const char *v)
{
    return conf_set_either(field, v, "no", "yes", "is not yes or no");
}
