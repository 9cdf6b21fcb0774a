/* cgrad core: the one UTF-8 codec of the library and the zoo (strict: no
 * overlong forms, surrogates or values above U+10FFFF). */
#ifndef CG_CORE_UTF8_H
#define CG_CORE_UTF8_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Length in bytes (1..4) of the valid sequence at s[0..n) with its code
 * point in *cp, or 0 if it is not valid UTF-8 (n must be at least 1). */
int cg_utf8_seq(const unsigned char *s, size_t n, uint32_t *cp);

/* Number of code points of a valid UTF-8 string, or -1 if s is not valid
 * UTF-8; *bad_at (optional) receives the byte offset of the first bad byte. */
int64_t cg_utf8_count(const char *s, size_t n, size_t *bad_at);

/* Decode UTF-8 text into a malloc'd array of code points; *n receives the
 * count. Newlines are translated as Python's text mode does ("\r\n" and a
 * lone "\r" become "\n"). name is used in messages (may be NULL). On
 * invalid input: NULL + error naming the byte offset. An empty text gives a
 * valid 1-element allocation and *n = 0. */
uint32_t *cg_utf8_decode(const char *s, size_t len, const char *name, int64_t *n);
/* The same without the newline translation. */
uint32_t *cg_utf8_decode_exact(const char *s, size_t len, const char *name, int64_t *n);

/* Append the UTF-8 form of code point c to buf (at least 4 bytes free);
 * returns the number of bytes written. */
int cg_utf8_put(uint32_t c, char *buf);

#ifdef __cplusplus
}
#endif
#endif
