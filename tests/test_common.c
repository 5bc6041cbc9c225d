/*
 * The low-level helpers of common/: the growable string (strbuf.h) and the
 * UTF-8 decoder (utf8.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gtmap.h"
#include "intlist.h"
#include "strbuf.h"
#include "utf8.h"

static void test_strbuf_add(void **state)
{
    (void)state;
    gt_strbuf b = GT_STRBUF_INIT;
    assert_string_equal(gt_strbuf_str(&b), "");
    assert_int_equal(gt_strbuf_adds(&b, "ab"), 0);
    assert_int_equal(gt_strbuf_add(&b, "cdef", 2), 0);
    assert_int_equal(gt_strbuf_addf(&b, "-%d-%s", 42, "x"), 0);
    assert_string_equal(gt_strbuf_str(&b), "abcd-42-x");
    assert_int_equal(b.len, 9);
    /* longer than addf's stack buffer */
    char big[1000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(gt_strbuf_addf(&b, "%s!", big), 0);
    assert_int_equal(b.len, 9 + 999 + 1);
    assert_int_equal(b.p[b.len - 1], '!');
    assert_int_equal(b.p[b.len], '\0');
    gt_strbuf_reset(&b);
    assert_string_equal(gt_strbuf_str(&b), "");
    assert_true(b.cap > 1000); /* memory kept */
    assert_int_equal(gt_strbuf_adds(&b, "q"), 0);
    char *s = gt_strbuf_detach(&b);
    assert_string_equal(s, "q");
    assert_null(b.p);
    assert_int_equal(b.len, 0);
    free(s);
    s = gt_strbuf_detach(&b); /* empty: a malloc'd "" */
    assert_non_null(s);
    assert_string_equal(s, "");
    free(s);
    gt_strbuf_release(&b);
}

/* Once an allocation failed every append fails, the text reads "", and
 * detach gives NULL and frees. */
static void test_strbuf_oom_sticks(void **state)
{
    (void)state;
    gt_strbuf b = GT_STRBUF_INIT;
    assert_int_equal(gt_strbuf_adds(&b, "kept?"), 0);
    b.oom = 1; /* as after a failed realloc */
    assert_int_equal(gt_strbuf_adds(&b, "x"), -1);
    assert_int_equal(gt_strbuf_addf(&b, "%d", 1), -1);
    assert_string_equal(gt_strbuf_str(&b), "");
    gt_strbuf_reset(&b);
    assert_int_equal(gt_strbuf_adds(&b, "x"), -1); /* reset keeps the flag */
    assert_null(gt_strbuf_detach(&b));
    assert_null(b.p);
    assert_int_equal(b.oom, 0);
    gt_strbuf_release(&b);
}

/* gt_utf8_next's length and code point for s (n bytes). */
static void check_next(const char *s, size_t n, size_t want_len, uint32_t want_cp)
{
    uint32_t cp = 0xffffffff;
    size_t len = gt_utf8_next((const unsigned char *)s, n, &cp);
    if (len != want_len)
        fail_msg("%zu bytes: length %zu, want %zu", n, len, want_len);
    if (want_len && cp != want_cp)
        fail_msg("%zu bytes: U+%04X, want U+%04X", n, (unsigned)cp, (unsigned)want_cp);
    if (!want_len && cp != 0xffffffff)
        fail_msg("%zu bytes: invalid but *cp written", n);
}

static void test_utf8(void **state)
{
    (void)state;
    check_next("A", 1, 1, 'A');
    check_next("\xc3\xa9", 2, 2, 0xe9);
    check_next("\xe2\x80\xae", 3, 3, 0x202e);
    check_next("\xf0\x9f\x98\x80", 4, 4, 0x1f600);
    check_next("\xf4\x8f\xbf\xbf", 4, 4, 0x10ffff);
    check_next("\xc0\x80", 2, 0, 0);         /* overlong */
    check_next("\xe0\x80\x80", 3, 0, 0);     /* overlong */
    check_next("\xed\xa0\x80", 3, 0, 0);     /* surrogate */
    check_next("\xf4\x90\x80\x80", 4, 0, 0); /* above U+10FFFF */
    check_next("\xe2\x80", 2, 0, 0);         /* cut short */
    check_next("\x80", 1, 0, 0);             /* stray continuation */
    check_next("\xc3\x28", 2, 0, 0);         /* bad continuation */
    assert_int_equal(gt_utf8_next((const unsigned char *)"\xc3\xa9", 2, NULL), 2);
    assert_int_equal(gt_utf8_width(""), 0);
    assert_int_equal(gt_utf8_width("h\xc3\xa9llo"), 5);
    assert_int_equal(gt_utf8_width("\xf0\x9f\x98\x80!"), 2);
}

/* The int-list encoder and decoder agree on every value, the extremes
 * included; the decoder refuses what is not such a list. */
static void test_intlist(void **state)
{
    (void)state;
    const int64_t v[] = {0, 1, -1, 16, -8, INT64_MAX, INT64_MIN, 1234567890123};
    size_t n = sizeof v / sizeof *v;
    char buf[GT_INTS_ROOM(8)];
    size_t len = gt_ints_format(buf, v, n);
    assert_string_equal(buf, "[0,1,-1,16,-8,9223372036854775807,-9223372036854775808,"
                             "1234567890123]");
    assert_int_equal(len, strlen(buf));
    assert_true(len < sizeof buf);
    char *m = gt_ints_json(v, n);
    assert_non_null(m);
    assert_string_equal(m, buf);
    free(m);
    int64_t back[8];
    assert_int_equal(gt_ints_parse(buf, back, 8), (int)n);
    for (size_t i = 0; i < n; i++)
        assert_true(back[i] == v[i]);
    char *empty = gt_ints_json(NULL, 0);
    assert_string_equal(empty, "[]");
    assert_int_equal(gt_ints_parse(empty, back, 8), 0);
    free(empty);
    assert_int_equal(gt_ints_parse("[16, 8]", back, 8), 2);
    assert_true(back[0] == 16 && back[1] == 8);
    assert_int_equal(gt_ints_parse(buf, back, 7), -1); /* more than max */
    assert_int_equal(gt_ints_parse("16,8", back, 8), -1);
    assert_int_equal(gt_ints_parse("[16, x]", back, 8), -1);
    assert_int_equal(gt_ints_parse(NULL, back, 8), -1);
}

/* The map against a plain array over random puts, upserts, gets and
 * deletes on a small key space (long probe runs, wrap-around, growth,
 * backward-shift deletion). */
static void test_gtmap(void **state)
{
    (void)state;
    enum { KEYS = 700 };
    static uint64_t ref[KEYS];
    static int has[KEYS];
    gt_map m = {0};
    uint64_t x = 88172645463325252ull;
    size_t len = 0;
    for (int step = 0; step < 200000; step++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t k = (size_t)(x % KEYS);
        /* keys that collide in their low bits, some on k2/k3 */
        uint64_t k1 = (uint64_t)k << 20, k2 = k % 3, k3 = k % 5 == 0;
        switch ((x >> 32) % 4) {
        case 0:
            assert_int_equal(gt_map_put(&m, k1, k2, k3, x), 0);
            len += !has[k];
            ref[k] = x, has[k] = 1;
            break;
        case 1: {
            int added = -1;
            uint64_t *v = gt_map_upsert(&m, k1, k2, k3, &added);
            assert_non_null(v);
            assert_int_equal(added, !has[k]);
            if (has[k])
                assert_true(*v == ref[k]);
            else
                assert_true(*v == 0);
            *v = x + 1;
            len += !has[k];
            ref[k] = x + 1, has[k] = 1;
            break;
        }
        case 2:
            assert_int_equal(gt_map_del(&m, k1, k2, k3), has[k]);
            len -= has[k];
            has[k] = 0;
            break;
        default: {
            uint64_t *v = gt_map_get(&m, k1, k2, k3);
            if (has[k]) {
                assert_non_null(v);
                assert_true(*v == ref[k]);
            } else {
                assert_null(v);
            }
        }
        }
        assert_int_equal(m.len, len);
    }
    for (size_t k = 0; k < KEYS; k++) {
        uint64_t *v = gt_map_get(&m, (uint64_t)k << 20, k % 3, k % 5 == 0);
        assert_int_equal(v != NULL, has[k]);
    }
    /* reset empties it and keeps the slots: filled again, it does not grow */
    size_t cap = m.cap, n = m.len;
    gt_map_entry *slots = m.slots;
    gt_map_reset(&m);
    assert_int_equal(m.len, 0);
    assert_int_equal(m.cap, cap);
    for (size_t k = 0; k < KEYS; k++)
        assert_null(gt_map_get(&m, (uint64_t)k << 20, k % 3, k % 5 == 0));
    for (size_t k = 0; k < n; k++)
        assert_int_equal(gt_map_put(&m, (uint64_t)k, 0, 0, k + 1), 0);
    assert_ptr_equal(m.slots, slots);
    assert_int_equal(m.len, n);
    for (size_t k = 0; k < n; k++)
        assert_true(*gt_map_get(&m, (uint64_t)k, 0, 0) == k + 1);
    gt_map_clear(&m);
    assert_null(gt_map_get(&m, 1, 0, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strbuf_add), cmocka_unit_test(test_strbuf_oom_sticks),
        cmocka_unit_test(test_utf8),       cmocka_unit_test(test_intlist),
        cmocka_unit_test(test_gtmap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
