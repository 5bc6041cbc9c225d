/*
 * A growable NUL-terminated string, for building labels, table lines and
 * escaped text. Start from {0}; free(b.p) when done. After an allocation
 * fails, `oom` is set and every later append does nothing, so a caller may
 * append many pieces and check once.
 */
#ifndef GT_INSPECTOR_STRBUF_H
#define GT_INSPECTOR_STRBUF_H

#include <stddef.h>

typedef struct gt_strbuf {
    char *p;    /* the text, NUL-terminated; NULL until the first append */
    size_t len; /* bytes of text, without the NUL */
    size_t cap; /* bytes allocated */
    int oom;    /* 1 once an allocation failed */
} gt_strbuf;

/* Append the n bytes at s. Returns 0, or -1 when out of memory (then and
 * after). */
int gt_strbuf_add(gt_strbuf *b, const char *s, size_t n);

#endif
