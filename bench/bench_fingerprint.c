/*
 * bench_fingerprint: the cost per saved byte of --check-saved, which hashes
 * every saved CPU tensor with XXH3 (libxxhash) at save and again at use.
 * Anchor: memcpy of the same bytes (what cloning the saved tensor would
 * cost), measured in the same run, rounds interleaved, best of the rounds.
 * Prints `name: value unit` lines; never fails.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "bench.h"

static volatile uint64_t sink;

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
    return 0;
}
