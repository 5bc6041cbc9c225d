/* Byte extents of strided tensors and their exact overlap; see extent.h. */
#include "extent.h"

#include <stdlib.h>
#include <string.h>

void gt__extent_release(gt_extent *e)
{
    free(e->size);
    memset(e, 0, sizeof *e);
}

/* An extent that holds nothing and is unknown; 0. */
static int unknown(gt_extent *e)
{
    gt__extent_release(e);
    return 0;
}

int gt__extent_init(gt_extent *e, int64_t offset, const int64_t *sizes,
                    const int64_t *strides, int nd, int64_t elem)
{
    memset(e, 0, sizeof *e);
    if (offset < 0 || elem <= 0 || nd < 0 ||
        __builtin_mul_overflow(offset, elem, &e->off))
        return unknown(e);
    e->elem = elem;
    int64_t last = e->off; /* first byte of the last element */
    for (int i = 0; i < nd; i++) {
        int64_t n = sizes[i], s = strides[i], sb, span;
        if (n < 0 || s < 0)
            return unknown(e);
        if (n == 0) { /* no element at all */
            free(e->size);
            e->size = e->stride = NULL;
            e->nd = 0;
            e->lo = e->hi = e->off;
            e->known = 1;
            return 0;
        }
        if (n == 1 || s == 0)
            continue;
        if (__builtin_mul_overflow(s, elem, &sb) ||
            __builtin_mul_overflow(n - 1, sb, &span) ||
            __builtin_add_overflow(last, span, &last))
            return unknown(e);
        if (!e->size) { /* room for every dimension left, sizes then strides */
            if (!(e->size = malloc(2 * (size_t)(nd - i) * sizeof *e->size))) {
                memset(e, 0, sizeof *e);
                return -1;
            }
            e->stride = e->size + (nd - i);
        }
        /* Insert, keeping strides in decreasing order. */
        int k = e->nd++;
        while (k > 0 && e->stride[k - 1] < sb) {
            e->stride[k] = e->stride[k - 1];
            e->size[k] = e->size[k - 1];
            k--;
        }
        e->stride[k] = sb;
        e->size[k] = n;
    }
    if (__builtin_add_overflow(last, elem, &e->hi))
        return unknown(e);
    e->lo = e->off;
    e->known = 1;
    return 0;
}

/* A view of an extent without copying its dimensions: dims [d, nd) of `e`
 * at byte offset `off`. */
typedef struct piece {
    const gt_extent *e;
    int d;
    int64_t off, lo, hi;
} piece;

static int64_t piece_span(const gt_extent *e, int d)
{
    int64_t span = e->elem;
    for (int i = d; i < e->nd; i++)
        span += (e->size[i] - 1) * e->stride[i]; /* bounded by init's checks */
    return span;
}

/* 1 if the piece's elements fill [lo, hi) without a gap. */
static int dense(const piece *p)
{
    int64_t want = p->e->elem;
    for (int i = p->e->nd - 1; i >= p->d; i--) {
        if (p->e->stride[i] > want)
            return 0;
        want = p->e->stride[i] * p->e->size[i];
    }
    return 1;
}

static int overlap(const piece *a, const piece *b, long *budget)
{
    if (a->hi <= b->lo || b->hi <= a->lo)
        return 0;
    if (--*budget < 0)
        return 1;
    int da = dense(a), db = dense(b);
    if (da && db)
        return 1;
    /* Split the piece that is not dense (of two, the wider) along its
     * outermost dimension; only the sub-pieces inside the other's bytes. */
    const piece *s = a, *o = b;
    if (da || (!db && (b->hi - b->lo) > (a->hi - a->lo))) {
        s = b;
        o = a;
    }
    const gt_extent *e = s->e;
    int64_t stride = e->stride[s->d], n = e->size[s->d];
    int64_t span = piece_span(e, s->d + 1);
    /* Sub-piece i covers [s->off + i*stride, + span): keep o->lo - span <
     * s->off + i*stride < o->hi. */
    int64_t first = 0, last = n - 1;
    if (o->lo - span >= s->off)
        first = (o->lo - span - s->off) / stride + 1;
    if (o->hi - 1 < s->off + last * stride)
        last = o->hi - 1 >= s->off ? (o->hi - 1 - s->off) / stride : -1;
    for (int64_t i = first; i <= last; i++) {
        piece sub = {e, s->d + 1, s->off + i * stride, 0, 0};
        sub.lo = sub.off;
        sub.hi = sub.off + span;
        if (overlap(&sub, o, budget))
            return 1;
        if (*budget < 0)
            return 1;
    }
    return 0;
}

int gt__extent_overlap(const gt_extent *a, const gt_extent *b)
{
    if (!a->known || !b->known || a->lo == a->hi || b->lo == b->hi)
        return 0;
    piece pa = {a, 0, a->off, a->lo, a->hi}, pb = {b, 0, b->off, b->lo, b->hi};
    long budget = 100000;
    return overlap(&pa, &pb, &budget);
}
