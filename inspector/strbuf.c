/* A growable string; see strbuf.h. */
#include "strbuf.h"

#include <stdlib.h>
#include <string.h>

int gt_strbuf_add(gt_strbuf *b, const char *s, size_t n)
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
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}
