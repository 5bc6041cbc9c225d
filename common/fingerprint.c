/* The fingerprint of a saved tensor's elements (fingerprint.h). */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include "fingerprint.h"

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#define STACK_DIMS 16
#define STAGE      4096 /* bytes gathered before a streaming update */
#define DIRECT     1024 /* a run this long is hashed where it lies */

/* The view in memory order: its dimensions of size 1 and of stride 0 (a
 * broadcast repeats elements already read) dropped, a reversed dimension
 * turned forward (data moved to its lowest element), the rest sorted by
 * decreasing stride and each merged into the one before where the two walk
 * memory as one (stride = next stride * next size). A contiguous view, or
 * a permutation of one (a transposed weight), is one dimension of stride
 * 1. */
typedef struct view {
    const unsigned char *data;
    size_t itemsize;
    int nd;
    int64_t *sizes, *strides; /* nd each; a 0-dim view is one element */
    int64_t n;                /* elements read */
} view;

/* Where the bytes go: gathered into buf (a sampled fingerprint, all of it
 * at once; a full one, flushed into the streaming state when it fills). */
typedef struct sink {
    unsigned char *buf;
    size_t len, cap;
    XXH3_state_t *st; /* NULL: everything fits in buf */
    int64_t total;
} sink;

static void sink_put(sink *s, const unsigned char *p, size_t n)
{
    s->total += (int64_t)n;
    if (s->st && n >= DIRECT) {
        if (s->len)
            XXH3_64bits_update(s->st, s->buf, s->len);
        s->len = 0;
        XXH3_64bits_update(s->st, p, n);
        return;
    }
    while (n) {
        if (s->len == s->cap) { /* only with a state: a sample fits its buffer */
            XXH3_64bits_update(s->st, s->buf, s->len);
            s->len = 0;
        }
        size_t k = s->cap - s->len < n ? s->cap - s->len : n;
        memcpy(s->buf + s->len, p, k);
        s->len += k;
        p += k;
        n -= k;
    }
}

/* Feed elements [start, start + count) of v, in row-major order, to s. */
static void feed(sink *s, const view *v, int64_t start, int64_t count, int64_t *idx)
{
    int last = v->nd - 1;
    if (last < 0) { /* one element */
        sink_put(s, v->data, v->itemsize);
        return;
    }
    int64_t off = 0, rest = start;
    for (int d = last; d >= 0; d--) {
        idx[d] = rest % v->sizes[d];
        rest /= v->sizes[d];
        off += idx[d] * v->strides[d];
    }
    while (count > 0) {
        int64_t n = 1;
        if (v->strides[last] == 1) {
            n = v->sizes[last] - idx[last];
            if (n > count)
                n = count;
        }
        sink_put(s, v->data + off * (int64_t)v->itemsize, (size_t)n * v->itemsize);
        count -= n;
        idx[last] += n;
        off += n * v->strides[last];
        for (int d = last; d > 0 && idx[d] == v->sizes[d]; d--) {
            off -= idx[d] * v->strides[d];
            idx[d] = 0;
            idx[d - 1]++;
            off += v->strides[d - 1];
        }
    }
}

/* v from the caller's geometry into the arrays sz, st (ndim each), data
 * and itemsize set. Returns the number of elements (0: none). */
static int64_t shape(view *v, int ndim, const int64_t *sizes, const int64_t *strides,
                     int64_t *sz, int64_t *st)
{
    int nd = 0;
    for (int d = 0; d < ndim; d++) {
        if (sizes[d] == 0)
            return 0;
        if (sizes[d] == 1 || strides[d] == 0)
            continue;
        int64_t size = sizes[d], stride = strides[d];
        if (stride < 0) {
            v->data += (size - 1) * stride * (int64_t)v->itemsize;
            stride = -stride;
        }
        int j = nd++; /* insertion by decreasing stride */
        for (; j > 0 && st[j - 1] < stride; j--) {
            sz[j] = sz[j - 1];
            st[j] = st[j - 1];
        }
        sz[j] = size;
        st[j] = stride;
    }
    int64_t n = 1;
    int m = 0;
    for (int d = 0; d < nd; d++) {
        n *= sz[d];
        if (m && st[m - 1] == st[d] * sz[d]) {
            sz[m - 1] *= sz[d];
            st[m - 1] = st[d];
            continue;
        }
        sz[m] = sz[d];
        st[m] = st[d];
        m++;
    }
    v->sizes = sz;
    v->strides = st;
    v->nd = m;
    v->n = n;
    return n;
}

int64_t gt_fp_view(const void *data, size_t itemsize, int ndim, const int64_t *sizes,
                   const int64_t *strides, int mode, uint64_t *hash)
{
    if ((mode != GT_FP_SAMPLED && mode != GT_FP_FULL) || !itemsize || ndim < 0)
        return -1;
    for (int d = 0; d < ndim; d++)
        if (sizes[d] < 0)
            return -1;
    int64_t small[4 * STACK_DIMS], *mem = small;
    if (ndim > STACK_DIMS && !(mem = malloc(4 * (size_t)ndim * sizeof *mem)))
        return -1;
    int64_t *sz = mem, *st = mem + ndim, *idx = mem + 2 * ndim;
    if (ndim <= STACK_DIMS) {
        st = mem + STACK_DIMS;
        idx = mem + 2 * STACK_DIMS;
    }
    view v = {.data = data, .itemsize = itemsize};
    int64_t out = 0;
    if (!data) {
        for (int d = 0; d < ndim; d++)
            if (sizes[d] == 0) {
                *hash = 0;
                goto out;
            }
        out = -1;
        goto out;
    }
    if (!shape(&v, ndim, sizes, strides, sz, st)) {
        *hash = 0;
        goto out;
    }
    unsigned char stage[STAGE];
    sink s = {.buf = stage, .cap = sizeof stage};
    int64_t bytes = v.n * (int64_t)itemsize;
    if (mode == GT_FP_FULL && v.nd <= 1 && (v.nd == 0 || v.strides[0] == 1)) {
        *hash = XXH3_64bits(v.data, (size_t)bytes); /* contiguous: where it lies */
        out = bytes;
        goto out;
    }
    /* a sample: `runs` runs of `per` elements, within the budget */
    int64_t per = GT_FP_BUDGET / (int64_t)itemsize / GT_FP_RUNS;
    per = per < 1 ? 1 : per;
    int64_t runs = GT_FP_BUDGET / (per * (int64_t)itemsize);
    runs = runs > GT_FP_RUNS ? GT_FP_RUNS : runs;
    if (bytes <= GT_FP_BUDGET) {
        feed(&s, &v, 0, v.n, idx);
    } else if (mode == GT_FP_SAMPLED && runs >= 2) {
        /* run k starts at k * (n - per) / (runs - 1): the first at 0, the
         * last ending at the last element; stepped without overflow or a
         * division per run (at = k * q + k * r / (runs - 1), carried) */
        int64_t span = v.n - per, q = span / (runs - 1), r = span % (runs - 1);
        size_t run = (size_t)per * itemsize;
        int64_t at = 0, frac = 0;
        for (int64_t k = 0; k < runs; k++, at += q, frac += r) {
            if (frac >= runs - 1) {
                at++;
                frac -= runs - 1;
            }
            if (v.nd == 1 && v.strides[0] == 1) { /* contiguous: copy the run */
                const unsigned char *p = v.data + at * (int64_t)itemsize;
                if (run == GT_FP_BUDGET / GT_FP_RUNS) /* a constant size: inlined */
                    memcpy(s.buf + s.len, p, GT_FP_BUDGET / GT_FP_RUNS);
                else
                    memcpy(s.buf + s.len, p, run);
                s.len += run;
                s.total += (int64_t)run;
            } else {
                feed(&s, &v, at, per, idx);
            }
        }
    } else {
        XXH3_state_t state;
        XXH3_INITSTATE(&state);
        XXH3_64bits_reset(&state);
        s.st = &state;
        feed(&s, &v, 0, v.n, idx);
        if (s.len)
            XXH3_64bits_update(&state, s.buf, s.len);
        *hash = XXH3_64bits_digest(&state);
        out = s.total;
        goto out;
    }
    *hash = XXH3_64bits(s.buf, s.len);
    out = s.total;
out:
    if (mem != small)
        free(mem);
    return out;
}

int gt_fp_mode_parse(const char *name)
{
    if (!name)
        return -1;
    if (!strcmp(name, "sampled"))
        return GT_FP_SAMPLED;
    if (!strcmp(name, "full"))
        return GT_FP_FULL;
    if (!strcmp(name, "off"))
        return GT_FP_OFF;
    return -1;
}

const char *gt_fp_mode_name(int mode)
{
    return mode == GT_FP_SAMPLED ? "sampled" : mode == GT_FP_FULL ? "full" : "off";
}
