/* Unit tests of inspector/extent.c: byte extents of strided tensors and
 * their exact overlap, checked against a brute-force byte map. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "extent.h"

/* (Re)build *e (zeroed or built before): what it held is released. */
static void ext(gt_extent *e, int64_t off, int nd, const int64_t *sz, const int64_t *st,
                int64_t elem)
{
    gt__extent_release(e);
    assert_int_equal(gt__extent_init(e, off, sz, st, nd, elem), 0);
}

/* The four gates of an LSTM cell: unsafe_chunk(4, 1) of a [B, 4H] buffer. */
static void test_lstm_gates_are_disjoint(void **state)
{
    (void)state;
    int64_t sz[2] = {5, 51}, st[2] = {204, 1};
    gt_extent g[4] = {0};
    for (int k = 0; k < 4; k++)
        ext(&g[k], 51 * k, 2, sz, st, 8);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            assert_int_equal(gt__extent_overlap(&g[i], &g[j]), i == j);
    /* The whole buffer overlaps every gate; one element of gate 2 only gate 2. */
    int64_t bsz[2] = {5, 204}, bst[2] = {204, 1}, one = 1, s1 = 1;
    gt_extent buf = {0}, e = {0};
    ext(&buf, 0, 2, bsz, bst, 8);
    ext(&e, 3 * 204 + 102 + 7, 1, &one, &s1, 8);
    for (int k = 0; k < 4; k++) {
        assert_int_equal(gt__extent_overlap(&buf, &g[k]), 1);
        assert_int_equal(gt__extent_overlap(&e, &g[k]), k == 2);
    }
    for (int k = 0; k < 4; k++)
        gt__extent_release(&g[k]);
    gt__extent_release(&buf);
    gt__extent_release(&e);
}

static void test_edge_cases(void **state)
{
    (void)state;
    gt_extent a = {0}, b = {0};
    int64_t n3 = 3, n0 = 0, s1 = 1, s0 = 0, neg = -1;
    /* Adjacent, not overlapping. */
    ext(&a, 0, 1, &n3, &s1, 4);
    ext(&b, 3, 1, &n3, &s1, 4);
    assert_int_equal(gt__extent_overlap(&a, &b), 0);
    /* Different element sizes over the same bytes (x.view(torch.int8)). */
    int64_t n12 = 12;
    ext(&b, 11, 1, &n12, &s1, 1);
    assert_int_equal(gt__extent_overlap(&a, &b), 1);
    ext(&b, 12, 1, &n12, &s1, 1);
    assert_int_equal(gt__extent_overlap(&a, &b), 0);
    /* Empty tensors overlap nothing. */
    ext(&b, 0, 1, &n0, &s1, 4);
    assert_int_equal(b.known, 1);
    assert_int_equal(gt__extent_overlap(&a, &b), 0);
    /* Expanded (stride 0) covers its one element. */
    ext(&b, 2, 1, &n12, &s0, 4);
    assert_int_equal(gt__extent_overlap(&a, &b), 1);
    assert_int_equal(b.hi - b.lo, 4);
    /* Unknown layouts (negative stride, overflow) overlap nothing. */
    ext(&b, 0, 1, &n3, &neg, 4);
    assert_int_equal(b.known, 0);
    assert_int_equal(gt__extent_overlap(&a, &b), 0);
    int64_t huge = INT64_MAX / 2;
    ext(&b, 0, 1, &huge, &huge, 4);
    assert_int_equal(b.known, 0);
    ext(&b, INT64_MAX / 2, 1, &n3, &s1, 4);
    assert_int_equal(b.known, 0);
    gt__extent_release(&a);
    gt__extent_release(&b);
}

/* Random small layouts against a byte map. */
static int brute(const gt_extent *a, const int64_t *sa, const int64_t *ta, int na,
                 int64_t oa, int64_t ea, const int64_t *sb, const int64_t *tb, int nb,
                 int64_t ob, int64_t eb)
{
    static unsigned char map[8192];
    memset(map, 0, sizeof map);
    (void)a;
    int64_t idx[4] = {0};
    for (int pass = 0; pass < 2; pass++) {
        const int64_t *s = pass ? sb : sa, *t = pass ? tb : ta;
        int n = pass ? nb : na;
        int64_t o = pass ? ob : oa, e = pass ? eb : ea;
        int64_t total = 1;
        for (int i = 0; i < n; i++)
            total *= s[i];
        for (int64_t lin = 0; lin < total; lin++) {
            int64_t rem = lin, pos = o;
            for (int i = n - 1; i >= 0; i--) {
                idx[i] = rem % s[i];
                rem /= s[i];
                pos += idx[i] * t[i];
            }
            for (int64_t byte = pos * e; byte < (pos + 1) * e; byte++) {
                if (pass && map[byte])
                    return 1;
                if (!pass)
                    map[byte] = 1;
            }
        }
    }
    return 0;
}

static void test_random_against_bytes(void **state)
{
    (void)state;
    srand(12345);
    int agree = 0, overlaps = 0;
    for (int trial = 0; trial < 20000; trial++) {
        int64_t sz[2][3], st[2][3], off[2], el[2];
        int nd[2];
        gt_extent e[2] = {{0}};
        for (int k = 0; k < 2; k++) {
            nd[k] = rand() % 4;
            el[k] = (int64_t[]){1, 2, 4}[rand() % 3];
            off[k] = rand() % 24;
            for (int i = 0; i < nd[k]; i++) {
                sz[k][i] = rand() % 5;
                st[k][i] = rand() % 12;
            }
            ext(&e[k], off[k], nd[k], sz[k], st[k], el[k]);
            assert_int_equal(e[k].known, 1);
        }
        /* Element sizes differ: offsets and strides are in each tensor's own
         * elements, the map in bytes. */
        int want = brute(&e[0], sz[0], st[0], nd[0], off[0], el[0], sz[1], st[1], nd[1],
                         off[1], el[1]);
        int got = gt__extent_overlap(&e[0], &e[1]);
        if (got != want)
            fail_msg("trial %d: got %d, want %d", trial, got, want);
        assert_int_equal(gt__extent_overlap(&e[1], &e[0]), want);
        agree++;
        overlaps += want;
        gt__extent_release(&e[0]);
        gt__extent_release(&e[1]);
    }
    assert_int_equal(agree, 20000);
    assert_true(overlaps > 1000 && overlaps < 19000); /* both answers exercised */
}

/* A large tensor against a comb of single elements: exact and quick. */
static void test_large(void **state)
{
    (void)state;
    int64_t sz[3] = {64, 512, 512}, st[3] = {1024 * 512, 1024, 1};
    gt_extent a = {0}, b = {0};
    ext(&a, 0, 3, sz, st, 4);   /* left half of every row */
    ext(&b, 512, 3, sz, st, 4); /* right half */
    assert_int_equal(gt__extent_overlap(&a, &b), 0);
    ext(&b, 511, 3, sz, st, 4);
    assert_int_equal(gt__extent_overlap(&a, &b), 1);
    gt__extent_release(&a);
    gt__extent_release(&b);
}

/* No bound on dimensions: a tensor of 1,000 (size-1 dims around a [3]),
 * and one of 100 kept dims of size 2 (strides 1..100 elements: an
 * as_strided layout) checked against the byte map. */
static void test_many_dims(void **state)
{
    (void)state;
    enum { N = 1000, K = 100 };
    int64_t *sz = malloc(N * sizeof *sz), *st = malloc(N * sizeof *st);
    assert_non_null(sz);
    assert_non_null(st);
    for (int i = 0; i < N; i++) {
        sz[i] = 1;
        st[i] = 3;
    }
    sz[N / 2] = 3;
    st[N / 2] = 1;
    gt_extent a = {0}, b = {0};
    int64_t one = 1, s1 = 1;
    ext(&a, 10, N, sz, st, 4);
    assert_int_equal(a.known, 1);
    assert_int_equal(a.nd, 1);
    assert_int_equal(a.lo, 40);
    assert_int_equal(a.hi, 52);
    ext(&b, 12, 1, &one, &s1, 4);
    assert_int_equal(gt__extent_overlap(&a, &b), 1);
    ext(&b, 13, 1, &one, &s1, 4);
    assert_int_equal(gt__extent_overlap(&a, &b), 0);
    for (int i = 0; i < K; i++) {
        sz[i] = 2;
        st[i] = 3 * (i + 1); /* byte stride 3 * (i + 1): gaps of two bytes */
    }
    ext(&a, 0, K, sz, st, 1);
    assert_int_equal(a.known, 1);
    assert_int_equal(a.nd, K);
    assert_int_equal(a.hi, 3 * K * (K + 1) / 2 + 1);
    /* every element sits at a multiple of 3: bytes 1 and 2 mod 3 are free */
    for (int64_t at = 0; at < 60; at++) {
        ext(&b, at, 1, &one, &s1, 1);
        assert_int_equal(gt__extent_overlap(&a, &b), at % 3 == 0);
    }
    gt__extent_release(&a);
    gt__extent_release(&b);
    free(sz);
    free(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lstm_gates_are_disjoint),
        cmocka_unit_test(test_edge_cases),
        cmocka_unit_test(test_random_against_bytes),
        cmocka_unit_test(test_large),
        cmocka_unit_test(test_many_dims),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
