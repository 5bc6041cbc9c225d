/* A growable string; see strbuf.h. */
#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gt_strbuf_reserve(gt_strbuf *b, size_t n)
{
    if (b->oom)
        return -1;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return -1;
        }
        b->p = p;
        b->cap = cap;
    }
    return 0;
}

int gt_strbuf_add(gt_strbuf *b, const char *s, size_t n)
{
    if (gt_strbuf_reserve(b, n) != 0)
        return -1;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int gt_strbuf_adds(gt_strbuf *b, const char *s)
{
    return gt_strbuf_add(b, s, strlen(s));
}

int gt_strbuf_vaddf(gt_strbuf *b, const char *fmt, va_list ap)
{
    char tmp[256];
    va_list again;
    if (b->oom)
        return -1;
    va_copy(again, ap);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    if (n < 0 || (size_t)n < sizeof tmp) {
        va_end(again);
        return n < 0 ? -1 : gt_strbuf_add(b, tmp, (size_t)n);
    }
    int rc = gt_strbuf_reserve(b, (size_t)n);
    if (rc == 0) { /* straight into the buffer, NUL included */
        vsnprintf(b->p + b->len, (size_t)n + 1, fmt, again);
        b->len += (size_t)n;
    }
    va_end(again);
    return rc;
}

int gt_strbuf_addf(gt_strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = gt_strbuf_vaddf(b, fmt, ap);
    va_end(ap);
    return rc;
}

void gt_strbuf_reset(gt_strbuf *b)
{
    b->len = 0;
    if (b->p)
        b->p[0] = '\0';
}

void gt_strbuf_release(gt_strbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

const char *gt_strbuf_str(const gt_strbuf *b)
{
    return b->p && !b->oom ? b->p : "";
}

char *gt_strbuf_detach(gt_strbuf *b)
{
    char *p = b->oom ? NULL : b->p ? b->p : strdup("");
    if (b->oom)
        free(b->p);
    memset(b, 0, sizeof *b);
    return p;
}
