/*
 * UTF-8, decoded in one place for the terminal-safe text (termtext.c), the
 * table output (table_out.c) and graph labels (graph.c).
 */
#ifndef GT_COMMON_UTF8_H
#define GT_COMMON_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* The length of the valid UTF-8 sequence at s (at most n bytes, n > 0)
 * and its code point in *cp; 0, *cp untouched, when the bytes there are
 * not one (overlong, surrogate, above U+10FFFF, cut short, stray
 * continuation byte). cp may be NULL. Can't fail otherwise. */
size_t gt_utf8_next(const unsigned char *s, size_t n, uint32_t *cp /* OUT */);

/* Characters in the NUL-terminated s as a terminal shows them, one per
 * byte that is not a continuation byte (invalid bytes count one each). */
size_t gt_utf8_width(const char *s);

#endif
