/*
 * json: see json.h. Comma placement is one flag per depth: set after each value, cleared by
 * a begin, so the writer never needs to look back at what it wrote.
 */
#include "json.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

void
rl_json_init(struct rl_json *j, FILE *f)
{
    j->f = f;
    j->depth = 0;
    j->err = false;
    j->after_key = false;
    for (int i = 0; i <= RL_JSON_DEPTH_MAX; i++) {
        j->comma[i] = false;
    }
}

/* Before any value or begin: the comma that separates it from the previous one. */
static void
pre_value(struct rl_json *j)
{
    if (j->after_key) {
        j->after_key = false;
        return;
    }
    if (j->comma[j->depth]) {
        fputc(',', j->f);
    }
}

/* After a value: the next one at this depth needs a comma. */
static void
post_value(struct rl_json *j)
{
    j->comma[j->depth] = true;
}

static void
begin(struct rl_json *j, char c)
{
    pre_value(j);
    fputc(c, j->f);
    if (j->depth == RL_JSON_DEPTH_MAX) {
        j->err = true;
        return;
    }
    j->depth++;
    j->comma[j->depth] = false;
}

static void
end(struct rl_json *j, char c)
{
    fputc(c, j->f);
    if (j->depth == 0 || j->after_key) {
        j->err = true;
        return;
    }
    j->depth--;
    post_value(j);
}

void
rl_json_begin_object(struct rl_json *j)
{
    begin(j, '{');
}

void
rl_json_end_object(struct rl_json *j)
{
    end(j, '}');
}

void
rl_json_begin_array(struct rl_json *j)
{
    begin(j, '[');
}

void
rl_json_end_array(struct rl_json *j)
{
    end(j, ']');
}

static void
put_string(FILE *f, const char *p, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];

        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc(c, f);
        } else if (c < 0x20 || c >= 0x7f) {
            fprintf(f, "\\u%04x", c);
        } else {
            fputc(c, f);
        }
    }
    fputc('"', f);
}

void
rl_json_key(struct rl_json *j, const char *key)
{
    if (j->after_key) {
        j->err = true;
    }
    pre_value(j);
    put_string(j->f, key, strlen(key));
    fputc(':', j->f);
    j->after_key = true;
}

void
rl_json_strn(struct rl_json *j, const char *p, size_t n)
{
    pre_value(j);
    if (p == NULL) {
        fputs("null", j->f);
    } else {
        put_string(j->f, p, n);
    }
    post_value(j);
}

void
rl_json_str(struct rl_json *j, const char *s)
{
    rl_json_strn(j, s, s != NULL ? strlen(s) : 0);
}

void
rl_json_u64(struct rl_json *j, uint64_t v)
{
    pre_value(j);
    fprintf(j->f, "%" PRIu64, v);
    post_value(j);
}

void
rl_json_i64(struct rl_json *j, int64_t v)
{
    pre_value(j);
    fprintf(j->f, "%" PRId64, v);
    post_value(j);
}

void
rl_json_f64(struct rl_json *j, double v, int decimals)
{
    pre_value(j);
    if (isfinite(v)) {
        fprintf(j->f, "%.*f", decimals < 0 ? 0 : decimals, v);
    } else {
        fputs("null", j->f);
    }
    post_value(j);
}

void
rl_json_bool(struct rl_json *j, bool v)
{
    pre_value(j);
    fputs(v ? "true" : "false", j->f);
    post_value(j);
}

void
rl_json_null(struct rl_json *j)
{
    pre_value(j);
    fputs("null", j->f);
    post_value(j);
}

void
rl_json_kv_str(struct rl_json *j, const char *key, const char *s)
{
    rl_json_key(j, key);
    rl_json_str(j, s);
}

void
rl_json_kv_u64(struct rl_json *j, const char *key, uint64_t v)
{
    rl_json_key(j, key);
    rl_json_u64(j, v);
}

void
rl_json_kv_i64(struct rl_json *j, const char *key, int64_t v)
{
    rl_json_key(j, key);
    rl_json_i64(j, v);
}

void
rl_json_kv_bool(struct rl_json *j, const char *key, bool v)
{
    rl_json_key(j, key);
    rl_json_bool(j, v);
}

int
rl_json_finish(struct rl_json *j)
{
    if (j->err || j->depth != 0 || j->after_key) {
        return -EINVAL;
    }
    return ferror(j->f) ? -EIO : 0;
}
