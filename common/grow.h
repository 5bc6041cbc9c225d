/*
 * Growing an array by doubling (git's ALLOC_GROW): one helper for every
 * array that gains items one at a time.
 *
 *     item *v = NULL; size_t n = 0, cap = 0;
 *     if (GT_ALLOC_GROW(v, n + 1, cap, 16) != 0)
 *         return GT_ENOMEM;        // v and cap unchanged
 *     v[n++] = x;
 *
 * Invariant: v holds cap items (NULL when cap is 0). GT_ALLOC_GROW makes it
 * hold at least `need`: cap becomes `first` (at least 1) and then doubles
 * until it is enough. Returns 0, or -1 when out of memory or when the size
 * would overflow, v and cap then unchanged.
 */
#ifndef GT_COMMON_GROW_H
#define GT_COMMON_GROW_H

#include <stddef.h>

#define GT_ALLOC_GROW(v, need, cap, first)                                               \
    gt_alloc_grow((void *)&(v), (need), &(cap), sizeof *(v), (first))

/* The function behind GT_ALLOC_GROW: `vp` points at the array's pointer
 * (any object pointer type), `size` is one item's size. */
int gt_alloc_grow(void *vp, size_t need, size_t *cap, size_t size, size_t first)
    __attribute__((warn_unused_result));

#endif
