/*
 * proto/utf8.h - UTF-8 checks shared by the job and envelope code: strict
 * validation (no overlongs, no surrogates, nothing above U+10FFFF) and a
 * sanitizer that turns arbitrary bytes into valid UTF-8 for quoting.
 * Internal to proto/.
 */
#ifndef RUNNEL_PROTO_UTF8_H
#define RUNNEL_PROTO_UTF8_H

#include <stddef.h>

/* Length (1-4) of the valid UTF-8 character at s, or 0 when the bytes at s
 * (at most n of them) do not start one. */
size_t proto_utf8_char(const unsigned char *s, size_t n);

/* Copies s (len bytes of valid UTF-8) into dst, at most max bytes of it,
 * cut at a character boundary so the copy stays valid UTF-8, and a NUL
 * (dst holds max + 1 bytes). */
void proto_utf8_copy_cut(char *dst, const char *s, size_t len, size_t max);

/* 1 when s[0..n) is entirely valid UTF-8. */
int proto_utf8_valid(const char *s, size_t n);

/*
 * Copies characters of src that start before budget into dst, as valid UTF-8:
 * each byte that does not start a valid character, and each NUL byte,
 * becomes U+FFFD, and a
 * character that would cross budget is left out (cut at a character
 * boundary).  src_len is the full input length, used to judge the last
 * character.  dst must hold 3 * budget bytes.  Returns the bytes written.
 */
size_t proto_utf8_sanitize(char *dst, const char *src, size_t src_len, size_t budget);

#endif
