/*
 * A growable NUL-terminated string, for building labels, table lines and
 * escaped text, in the recorder and the inspector alike (git's strbuf,
 * curl's dynbuf).
 *
 * Invariants: start from {0} (or GT_STRBUF_INIT); `p` is NULL until the
 * first append, else NUL-terminated at `len`. After an allocation fails,
 * `oom` is set and sticks: every later append does nothing and returns -1,
 * so a caller may append many pieces and check once. gt_strbuf_reset keeps
 * the memory and the oom flag; gt_strbuf_release frees both.
 */
#ifndef GT_COMMON_STRBUF_H
#define GT_COMMON_STRBUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct gt_strbuf {
    char *p;    /* the text, NUL-terminated; NULL until the first append */
    size_t len; /* bytes of text, without the NUL */
    size_t cap; /* bytes allocated */
    int oom;    /* 1 once an allocation failed */
} gt_strbuf;

#define GT_STRBUF_INIT                                                                   \
    {                                                                                    \
        0                                                                                \
    }

/* Make room for n more bytes (and the NUL after them) without appending.
 * Returns 0, or -1 when out of memory (then and after). */
int gt_strbuf_reserve(gt_strbuf *b, size_t n);

/* Append the n bytes at s. Returns 0, or -1 when out of memory (then and
 * after). */
int gt_strbuf_add(gt_strbuf *b, const char *s, size_t n);

/* Append the NUL-terminated s. Returns 0, or -1 when out of memory. */
int gt_strbuf_adds(gt_strbuf *b, const char *s);

/* Append printf-formatted text. Returns 0, or -1 when out of memory or on
 * a format error (then b is unchanged but for the oom flag). */
int gt_strbuf_addf(gt_strbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* gt_strbuf_addf with a va_list (consumed as vprintf does). */
int gt_strbuf_vaddf(gt_strbuf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* Empty the text, keeping the memory (and the oom flag). Can't fail. */
void gt_strbuf_reset(gt_strbuf *b);

/* Free the memory and return b to {0}. Can't fail. */
void gt_strbuf_release(gt_strbuf *b);

/* The text so far: "" when empty or after an allocation failed. Owned by
 * b, valid until the next change. Can't fail. */
const char *gt_strbuf_str(const gt_strbuf *b);

/* Hand the text over to the caller (free() it) and return b to {0}. An
 * empty buffer gives a malloc'd ""; NULL (b released) after an allocation
 * failed or when that "" cannot be allocated. */
char *gt_strbuf_detach(gt_strbuf *b);

#endif
