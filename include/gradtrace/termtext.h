/*
 * Text from a trace, made safe for a terminal.
 *
 * Strings read from a trace (paths, source lines, names, error messages,
 * argv, cwd) may hold anything, and printed as they are an ESC or a CR can
 * move the cursor or recolour the terminal. These helpers write such text
 * with every control character replaced by a visible escape:
 *
 *   tab, newline, CR      \t  \n  \r
 *   other C0, DEL         \xNN   (ESC is \x1b)
 *   C1 (U+0080..U+009F)   \u0080 .. \u009f
 *   bidi controls         \u061c \u200e \u200f \u202a..\u202e \u2066..\u2069
 *                         (they reorder what is shown: "Trojan Source")
 *   invalid UTF-8 byte    \xNN
 *
 * Valid UTF-8 other than that (Chinese paths, accents) is kept unchanged.
 * Only trace text goes through here: our own colour codes are written as
 * they are.
 */
#ifndef GT_INSPECTOR_TERMTEXT_H
#define GT_INSPECTOR_TERMTEXT_H

#include <stddef.h>
#include <stdio.h>

/* Write the first n bytes of s (may hold NUL bytes: shown as \x00). */
void gt_term_putn(FILE *f, const char *s, size_t n);

/* Write the NUL-terminated s; NULL writes nothing. */
void gt_term_puts(FILE *f, const char *s);

/* A malloc'd sanitized copy of s (NULL s gives ""), or NULL when out of
 * memory. */
char *gt_term_text(const char *s);

#endif
