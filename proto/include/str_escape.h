/*
 * str_escape: makes a user-supplied string safe to print on a terminal or
 * in a log line, so that a job name, an error message quoting user bytes or
 * a path cannot move the cursor, clear the screen, start a fake log line or
 * hide text (terminal escapes, CR, newlines, bidi overrides).
 *
 * Escaped, and only these:
 *   backslash          \\          (so every escape below is unambiguous)
 *   \n \r \t ESC       \n \r \t \e
 *   other C0 and DEL   \xHH
 *   C1 (U+0080-U+009F), U+2028/U+2029 (line/paragraph separators), bidi
 *   embedding, override and isolate marks (U+202A-U+202E, U+2066-U+2069)
 *                      \uXXXX
 *   invalid UTF-8 (stray, overlong, surrogate, > U+10FFFF, truncated)
 *                      \xHH per byte
 * Everything else (printable ASCII, valid UTF-8) is copied as is.
 *
 * Pure: no allocation except in gpt_str_escape_dup and gpt_str_json, no
 * globals; any thread.
 */
#ifndef GPT_STR_ESCAPE_H
#define GPT_STR_ESCAPE_H

#include <jansson.h>
#include <stddef.h>

/* Keep '\n' and '\t' as they are (multi-line text such as generated
 * samples); CR, ESC and every other control is still escaped. */
#define GPT_STR_ESCAPE_KEEP_NEWLINE 1u

/* The worst case: every input byte becomes "\xHH". */
#define GPT_STR_ESCAPE_SIZE(len) (4 * (len) + 1)

/* Escapes `len` bytes of `s` into `out` (`cap` bytes, always NUL-terminated
 * when cap > 0, cut at an escape boundary when too small). Returns the
 * length the whole escaped string needs, without the NUL (as snprintf), so
 * a return >= cap means it was cut. */
size_t gpt_str_escape(char *out, size_t cap, const char *s, size_t len, unsigned flags);

/* The escaped copy of a NUL-terminated string (NULL -> ""); returns new
 * malloc'd memory, NULL on ENOMEM. */
char *gpt_str_escape_dup(const char *s, unsigned flags);

/* A JSON string of s (NULL: ""). jansson refuses invalid UTF-8: such a
 * string (a hostile name, a byte model's output) is sent escaped as above
 * (GPT_STR_ESCAPE_KEEP_NEWLINE) rather than dropped. New reference; NULL
 * on ENOMEM. */
json_t *gpt_str_json(const char *s);

#endif
