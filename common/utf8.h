/*
 * utf8: byte strings as UTF-8 text. The names that enter from files and the wire are checked
 * here (rl_utf8_check: printable UTF-8 or the offset of the first bad byte), and text that a
 * reader wants valid whatever the bytes (the metrics page, error messages) is written here
 * (rl_utf8_escape). UTF-8 is RFC 3629's: shortest forms only, no surrogates, nothing past
 * U+10FFFF. Not a Unicode library: no normalisation, no character classes beyond the
 * controls.
 */
#ifndef RL_UTF8_H
#define RL_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The character at the start of s[0..n): its length (1..4) with its code point in *cp, or 0
 * when s does not start with a well-formed one (a stray continuation byte, a byte never used
 * in UTF-8, an overlong form, a surrogate, a code point past U+10FFFF, a sequence cut short
 * or n == 0).
 */
size_t rl_utf8_char(const char *s, size_t n, uint32_t *cp);

/* C0 controls (U+0000..U+001F), DEL (U+007F) and C1 controls (U+0080..U+009F). */
bool rl_utf8_is_control(uint32_t cp);

/*
 * Whether s[0..n) is printable UTF-8: well-formed, no control character. NULL when it is;
 * otherwise "is not valid UTF-8" or "has a control character", with *at the byte offset of
 * the first character (or byte) at fault.
 */
const char *rl_utf8_check(const char *s, size_t n, size_t *at);

/* rl_utf8_escape() flags. */
#define RL_UTF8_PROM 1u /* a Prometheus label value: also \\ \" \n, and \\xHH for \xHH */

/*
 * Writes s[0..n) into dst (cap bytes; terminated when cap > 0) as printable UTF-8: each
 * printable character as it is, each other byte (not part of a well-formed character, or of
 * a control character) as the four characters \xHH (lower-case hex). With RL_UTF8_PROM, the
 * text is a label value of the Prometheus text format: backslash, double quote and newline
 * are written \\, \" and \n, and the other bytes \\xHH (so the value holds the text \xHH).
 * Stops before a character or escape that does not fit whole. Returns the bytes written,
 * the NUL not counted.
 */
size_t rl_utf8_escape(char *dst, size_t cap, const char *s, size_t n, unsigned flags);

#endif
