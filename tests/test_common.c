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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strbuf_add),
        cmocka_unit_test(test_strbuf_oom_sticks),
        cmocka_unit_test(test_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
