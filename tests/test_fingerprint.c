/*
 * The fingerprint of a saved tensor's elements (common/fingerprint.h): a
 * strided view hashes its own elements in row-major order and never the
 * bytes between them; a sampled fingerprint reads at most GT_FP_BUDGET
 * bytes, always the first and the last element, the same ones each time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <xxhash.h>

#include "fingerprint.h"

/* The GRU cell's case: a [4,16] chunk of a [4,48] float matrix. */
static void test_view_skips_neighbours(void **state)
{
    (void)state;
    float m[4 * 48], packed[4 * 16];
    for (int i = 0; i < 4 * 48; i++)
        m[i] = (float)i;
    for (int r = 0; r < 4; r++)
        memcpy(packed + r * 16, m + r * 48 + 16, 16 * sizeof(float));
    const int64_t sizes[] = {4, 16}, strides[] = {48, 1}, cont[] = {16, 1};
    uint64_t h = 0, hc = 0;
    for (int mode = GT_FP_SAMPLED; mode <= GT_FP_FULL; mode++) {
        assert_int_equal(gt_fp_view(m + 16, 4, 2, sizes, strides, mode, &h), 256);
        assert_int_equal(gt_fp_view(packed, 4, 2, sizes, cont, mode, &hc), 256);
        assert_true(h == hc); /* the elements, in order, as if contiguous */
        assert_true(h == XXH3_64bits(packed, sizeof packed));
        /* the neighbouring chunks written in place: the same fingerprint */
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 16; c++)
                m[r * 48 + c] = m[r * 48 + 32 + c] = -1.0f;
        uint64_t h2 = 0;
        assert_int_equal(gt_fp_view(m + 16, 4, 2, sizes, strides, mode, &h2), 256);
        assert_true(h2 == h);
        /* one of its own elements written: another */
        m[3 * 48 + 16 + 15] += 1.0f;
        assert_int_equal(gt_fp_view(m + 16, 4, 2, sizes, strides, mode, &h2), 256);
        assert_true(h2 != h);
        m[3 * 48 + 16 + 15] -= 1.0f;
    }
}

/* Transposed, broadcast and reversed views: read in memory order, each
 * element once. */
static void test_view_orders(void **state)
{
    (void)state;
    int32_t a[6] = {1, 2, 3, 4, 5, 6};
    const int64_t sz[] = {3, 2}, st[] = {1, 3}, csz[] = {6}, cst[] = {1};
    uint64_t h = 0, hc = 0;
    /* a transposed [2,3]: its memory, one run */
    assert_int_equal(gt_fp_view(a, 4, 2, sz, st, GT_FP_FULL, &h), 24);
    assert_int_equal(gt_fp_view(a, 4, 1, csz, cst, GT_FP_FULL, &hc), 24);
    assert_true(h == hc);
    assert_true(h == XXH3_64bits(a, sizeof a));
    /* expand: the element read once */
    int32_t one = 7;
    const int64_t bsz[] = {3}, bst[] = {0};
    assert_int_equal(gt_fp_view(&one, 4, 1, bsz, bst, GT_FP_SAMPLED, &h), 4);
    assert_true(h == XXH3_64bits(&one, 4));
    /* flip: the same elements, read forward from the lowest */
    const int64_t rst[] = {-1};
    assert_int_equal(gt_fp_view(a + 5, 4, 1, csz, rst, GT_FP_FULL, &h), 24);
    assert_true(h == XXH3_64bits(a, sizeof a));
    /* every other column of a transposed [4,4], reversed: its 8 elements */
    int32_t m[16], pick[8];
    for (int i = 0; i < 16; i++)
        m[i] = i * 10;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 2; c++)
            pick[r * 2 + c] = m[r * 4 + c * 2];
    const int64_t vsz[] = {2, 4}, vst[] = {-2, 4};
    assert_int_equal(gt_fp_view(m + 2, 4, 2, vsz, vst, GT_FP_FULL, &h), 32);
    assert_true(h == XXH3_64bits(pick, sizeof pick));
    /* no element: 0 bytes, hash 0; a 0-dim tensor: its one element */
    const int64_t zsz[] = {0, 5}, zst[] = {5, 1};
    h = 9;
    assert_int_equal(gt_fp_view(NULL, 4, 2, zsz, zst, GT_FP_FULL, &h), 0);
    assert_true(h == 0);
    assert_int_equal(gt_fp_view(&one, 4, 0, NULL, NULL, GT_FP_FULL, &h), 4);
    assert_true(h == XXH3_64bits(&one, 4));
    /* refused: off, no itemsize, no data */
    assert_int_equal(gt_fp_view(a, 4, 1, csz, cst, GT_FP_OFF, &h), -1);
    assert_int_equal(gt_fp_view(a, 0, 1, csz, cst, GT_FP_FULL, &h), -1);
    assert_int_equal(gt_fp_view(NULL, 4, 1, csz, cst, GT_FP_FULL, &h), -1);
}

/* A large tensor: sampled reads the budget, whole-tensor writes are seen,
 * and the first and last elements are among those read. */
static void test_sampled(void **state)
{
    (void)state;
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof *x);
    assert_non_null(x);
    for (int i = 0; i < N; i++)
        x[i] = (float)i * 0.5f;
    const int64_t sz[] = {1024, 1024}, st[] = {1024, 1};
    uint64_t h = 0, h2 = 0, hf = 0;
    assert_int_equal(gt_fp_view(x, 4, 2, sz, st, GT_FP_SAMPLED, &h), GT_FP_BUDGET);
    assert_int_equal(gt_fp_view(x, 4, 2, sz, st, GT_FP_SAMPLED, &h2), GT_FP_BUDGET);
    assert_true(h == h2); /* the same elements each time */
    assert_int_equal(gt_fp_view(x, 4, 2, sz, st, GT_FP_FULL, &hf), 4 * N);
    assert_true(hf == XXH3_64bits(x, 4 * (size_t)N));
    x[0] = -1.0f;
    assert_int_equal(gt_fp_view(x, 4, 2, sz, st, GT_FP_SAMPLED, &h2), GT_FP_BUDGET);
    assert_true(h2 != h);
    x[0] = 0.0f;
    x[N - 1] = -1.0f;
    assert_int_equal(gt_fp_view(x, 4, 2, sz, st, GT_FP_SAMPLED, &h2), GT_FP_BUDGET);
    assert_true(h2 != h);
    /* an in-place normalisation of every element */
    for (int i = 0; i < N; i++)
        x[i] = x[i] / 3.0f - 1.0f;
    assert_int_equal(gt_fp_view(x, 4, 2, sz, st, GT_FP_SAMPLED, &h2), GT_FP_BUDGET);
    assert_true(h2 != h);
    /* a strided view of it: still the budget, still its own elements */
    const int64_t vsz[] = {1024, 512}, vst[] = {1024, 2};
    assert_int_equal(gt_fp_view(x, 4, 2, vsz, vst, GT_FP_SAMPLED, &h), GT_FP_BUDGET);
    assert_int_equal(gt_fp_view(x, 4, 2, vsz, vst, GT_FP_FULL, &hf), 2 * N);
    x[1] = 12345.0f; /* between its elements */
    assert_int_equal(gt_fp_view(x, 4, 2, vsz, vst, GT_FP_FULL, &h2), 2 * N);
    assert_true(h2 == hf);
    free(x);
}

/* More dimensions than the stack arrays hold. */
static void test_many_dims(void **state)
{
    (void)state;
    int64_t sz[20], st[20];
    for (int d = 0; d < 20; d++) {
        sz[d] = d % 2 ? 2 : 1;
        st[d] = 1;
    }
    int64_t n = 1;
    for (int d = 19; d >= 0; d--) {
        st[d] = n;
        n *= sz[d];
    }
    unsigned char b[1024];
    for (int i = 0; i < 1024; i++)
        b[i] = (unsigned char)i;
    uint64_t h = 0;
    assert_int_equal(gt_fp_view(b, 1, 20, sz, st, GT_FP_FULL, &h), 1024);
    assert_true(h == XXH3_64bits(b, sizeof b));
}

static void test_mode_names(void **state)
{
    (void)state;
    assert_int_equal(gt_fp_mode_parse("sampled"), GT_FP_SAMPLED);
    assert_int_equal(gt_fp_mode_parse("full"), GT_FP_FULL);
    assert_int_equal(gt_fp_mode_parse("off"), GT_FP_OFF);
    assert_int_equal(gt_fp_mode_parse("on"), -1);
    assert_int_equal(gt_fp_mode_parse(NULL), -1);
    assert_string_equal(gt_fp_mode_name(GT_FP_SAMPLED), "sampled");
    assert_string_equal(gt_fp_mode_name(GT_FP_FULL), "full");
    assert_string_equal(gt_fp_mode_name(7), "off");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_view_skips_neighbours),
        cmocka_unit_test(test_view_orders),
        cmocka_unit_test(test_sampled),
        cmocka_unit_test(test_many_dims),
        cmocka_unit_test(test_mode_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
