/* See grow.h. */
#include "grow.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int gt_alloc_grow(void *vp, size_t need, size_t *cap, size_t size, size_t first)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : first ? first : 1;
    while (n < need) {
        if (n > SIZE_MAX / 2)
            return -1;
        n *= 2;
    }
    if (size && n > SIZE_MAX / size)
        return -1;
    void *p;
    memcpy(&p, vp, sizeof p); /* the array's pointer, whatever its type */
    void *q = realloc(p, n * size);
    if (!q)
        return -1;
    memcpy(vp, &q, sizeof q);
    *cap = n;
    return 0;
}
