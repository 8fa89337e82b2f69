/*
 * json: the one JSON writer of the project (the node's events log, rl-cli's --json and
 * status, rl-chaos's verdict). Writes to a stdio stream as it goes, placing commas and
 * colons itself, so a caller says what it writes (an object, a key, a value) and never
 * how. Strings are bytes, not text: every byte outside printable ASCII is written as
 * \u00XX, so the output is plain ASCII and a reader gets each byte back (a user id that is
 * not UTF-8 stays what it was). Not a parser, and no pretty-printing.
 */
#ifndef RL_JSON_H
#define RL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define RL_JSON_DEPTH_MAX 16

struct rl_json {
    FILE *f;
    int depth;
    bool err;                          /* nesting broken: too deep, or an end without a begin */
    bool after_key;                    /* the next value completes a "key": pair */
    bool comma[RL_JSON_DEPTH_MAX + 1]; /* a value at this depth needs a comma before it */
};

/* Starts a document written to f. */
void rl_json_init(struct rl_json *j, FILE *f);

void rl_json_begin_object(struct rl_json *j);
void rl_json_end_object(struct rl_json *j);
void rl_json_begin_array(struct rl_json *j);
void rl_json_end_array(struct rl_json *j);

/* The key of the next value, inside an object. */
void rl_json_key(struct rl_json *j, const char *key);

/* Values. rl_json_str takes a NUL-terminated string, NULL writing null; rl_json_strn takes
 * n bytes, p NULL writing null. rl_json_f64 writes a finite number with at most `decimals`
 * digits after the point (null for NaN or infinity, which JSON lacks). */
void rl_json_str(struct rl_json *j, const char *s);
void rl_json_strn(struct rl_json *j, const char *p, size_t n);
void rl_json_u64(struct rl_json *j, uint64_t v);
void rl_json_i64(struct rl_json *j, int64_t v);
void rl_json_f64(struct rl_json *j, double v, int decimals);
void rl_json_bool(struct rl_json *j, bool v);
void rl_json_null(struct rl_json *j);

/* Shorthands for a key and its value. */
void rl_json_kv_str(struct rl_json *j, const char *key, const char *s);
void rl_json_kv_u64(struct rl_json *j, const char *key, uint64_t v);
void rl_json_kv_i64(struct rl_json *j, const char *key, int64_t v);
void rl_json_kv_bool(struct rl_json *j, const char *key, bool v);

/* Ends the document: 0 when every begin had its end and the stream took every byte,
 * -EINVAL for broken nesting, -EIO for a stream error. Writes nothing itself. */
int rl_json_finish(struct rl_json *j);

#endif
