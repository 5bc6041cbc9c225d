/*
 * bench_fingerprint: what fingerprinting a saved tensor costs
 * (common/fingerprint.c, which both adapters call at save and again at
 * use). First the hash alone per byte (XXH3, libxxhash) beside memcpy of
 * the same bytes (what cloning the saved tensor would cost); then one
 * gt_fp_view per view shape (contiguous, transposed, a GRU gate slice, a
 * 4 MB activation), sampled (the default) and full, in ns per tensor beside
 * memcpy of the bytes it read. Rounds interleaved, best of the rounds.
 * Prints `name: value unit` lines; never fails.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "bench.h"
#include "fingerprint.h"

static volatile uint64_t sink;

/* One view shape: sizes and strides in floats over a buffer of `span`. */
typedef struct shape {
    const char *name;
    int ndim;
    int64_t sizes[2], strides[2];
    size_t span;
} shape;

/* ns per gt_fp_view of each shape in each mode, beside memcpy of the bytes
 * read. */
static void per_view(void)
{
    static const shape shapes[] = {
        {"act_32x128", 2, {32, 128}, {128, 1}, 32 * 128},
        {"weight_t_128x128", 2, {128, 128}, {1, 128}, 128 * 128},
        {"gru_gate_4x16", 2, {4, 16}, {48, 1}, 4 * 48},
        {"act_1024x1024", 2, {1024, 1024}, {1024, 1}, 1024 * 1024},
    };
    const int rounds = 7;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const shape *v = &shapes[k];
        float *x = malloc(v->span * sizeof *x);
        unsigned char *dst = malloc(GT_FP_BUDGET * 256 + 4 * v->span);
        if (!x || !dst) {
            printf("error: out of memory\n");
            free(x);
            free(dst);
            return;
        }
        for (size_t i = 0; i < v->span; i++)
            x[i] = (float)i * 0.25f;
        for (int mode = GT_FP_SAMPLED; mode <= GT_FP_FULL; mode++) {
            uint64_t h = 0;
            int64_t read = gt_fp_view(x, 4, v->ndim, v->sizes, v->strides, mode, &h);
            size_t reps = (size_t)((64u << 20) / (read > 0 ? read : 1));
            reps = reps < 16 ? 16 : reps > 200000 ? 200000 : reps;
            double best = 1e30, best_copy = 1e30;
            for (int r = 0; r < rounds; r++) {
                double t0 = now_s();
                for (size_t i = 0; i < reps; i++) {
                    gt_fp_view(x, 4, v->ndim, v->sizes, v->strides, mode, &h);
                    sink += h;
                }
                double t1 = now_s();
                for (size_t i = 0; i < reps; i++) {
                    memcpy(dst, x, (size_t)read);
                    sink += dst[i % (size_t)read];
                }
                double t2 = now_s();
                best = t1 - t0 < best ? t1 - t0 : best;
                best_copy = t2 - t1 < best_copy ? t2 - t1 : best_copy;
            }
            const char *m = mode == GT_FP_SAMPLED ? "sampled" : "full";
            printf("fingerprint_%s_%s: %.1f ns/tensor (%lld bytes read)\n", m, v->name,
                   best * 1e9 / (double)reps, (long long)read);
            printf("anchor_memcpy_%s_%s: %.1f ns/tensor\n", m, v->name,
                   best_copy * 1e9 / (double)reps);
        }
        free(x);
        free(dst);
    }
}

int main(void)
{
    static const size_t sizes[] = {4096, 65536, 1 << 20, 16 << 20};
    const int rounds = 7;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        unsigned char *src = malloc(n), *dst = malloc(n);
        if (!src || !dst) {
            printf("error: out of memory for %zu bytes\n", n);
            free(src);
            free(dst);
            return 0;
        }
        for (size_t i = 0; i < n; i++)
            src[i] = (unsigned char)(i * 2654435761u >> 13);
        memset(dst, 0, n);
        /* enough repetitions for ~64 MB per measurement */
        size_t reps = (64u << 20) / n;
        double best_hash = 1e30, best_copy = 1e30;
        for (int r = 0; r < rounds; r++) {
            double t0 = now_s();
            for (size_t i = 0; i < reps; i++) {
                memcpy(dst, src, n);
                sink += dst[i % n];
            }
            double t1 = now_s();
            for (size_t i = 0; i < reps; i++)
                sink += XXH3_64bits(src, n);
            double t2 = now_s();
            if (t1 - t0 < best_copy)
                best_copy = t1 - t0;
            if (t2 - t1 < best_hash)
                best_hash = t2 - t1;
        }
        double bytes = (double)n * (double)reps;
        printf("fingerprint_xxh3_%zuB: %.4f ns/byte\n", n, best_hash * 1e9 / bytes);
        printf("anchor_memcpy_%zuB: %.4f ns/byte\n", n, best_copy * 1e9 / bytes);
        printf("fingerprint_vs_memcpy_%zuB: %.2f ratio\n", n, best_hash / best_copy);
        free(src);
        free(dst);
    }
    per_view();
    return 0;
}
