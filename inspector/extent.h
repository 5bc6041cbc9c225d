/*
 * The bytes a strided tensor covers in its storage, and whether two such
 * tensors share any byte. Internal to the inspector (diagnose.c uses it to
 * tell a write that reaches a saved tensor from one that only touches the
 * same storage: the four gates of an LSTM cell are views over disjoint,
 * interleaved pieces of one buffer).
 *
 * A tensor's elements are the byte ranges [off + sum(i_k * stride_k),
 * + elem) for 0 <= i_k < size_k, everything in bytes. Dimensions of size 1
 * and of stride 0 (expand) are dropped: they add no byte. The overlap test
 * is exact; it splits the tensors along their outermost dimension until the
 * pieces are single dense blocks or fall apart, and only gives up (answers
 * "overlap", the safe side for a checker) past a fixed amount of work.
 * Any number of dimensions: the kept ones are held on the heap.
 */
#ifndef GT_INSPECTOR_EXTENT_H
#define GT_INSPECTOR_EXTENT_H

#include <stdint.h>

typedef struct gt_extent {
    int known;       /* 0: layout unknown (unparsable, overflowing, negative
                      * strides): overlaps nothing */
    int nd;          /* dimensions kept, outermost (largest stride) first */
    int64_t off;     /* first byte, counting from the storage's start */
    int64_t elem;    /* bytes per element */
    int64_t lo, hi;  /* [lo, hi): the bytes from the first element's first
                      * byte to the last's end; lo == hi: no element */
    int64_t *size;   /* nd sizes, then room for the strides; malloc'd, NULL
                      * while no dimension is kept */
    int64_t *stride; /* nd strides in bytes, inside size's allocation */
} gt_extent;

/* Build *e from a tensor's element offset, sizes and strides (in elements,
 * `nd` of each) and its element size in bytes. A layout that cannot be
 * represented (negative values, overflow) gives known = 0. Returns 0, or -1
 * when out of memory (then known = 0 and e holds no memory). Release with
 * gt__extent_release. */
int gt__extent_init(gt_extent *e, int64_t offset, const int64_t *sizes,
                    const int64_t *strides, int nd, int64_t elem);

/* Free what e holds and zero it (known = 0). Accepts a zeroed extent.
 * Can't fail. */
void gt__extent_release(gt_extent *e);

/* 1 if both extents are known and share at least one byte, else 0 (also
 * 1 when the exact answer would take too long to compute). */
int gt__extent_overlap(const gt_extent *a, const gt_extent *b);

#endif
