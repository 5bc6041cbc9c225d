/*
 * The terminal-safe text of termtext.h: which bytes are shown as escapes
 * and which are kept, through both the copy and the FILE writers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <gradtrace/termtext.h>

/* gt_term_putn's output for n bytes of s, as a malloc'd string. */
static char *put_n(const char *s, size_t n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    gt_term_putn(f, s, n);
    assert_int_equal(fclose(f), 0);
    return buf;
}

/* Both forms give `want` for the NUL-terminated `in`. */
static void check(const char *in, const char *want)
{
    char *t = gt_term_text(in);
    assert_non_null(t);
    assert_string_equal(t, want);
    free(t);
    char *p = put_n(in, strlen(in));
    assert_string_equal(p, want);
    free(p);
}

static void test_c0_controls(void **state)
{
    (void)state;
    check("a\x1b[31mred", "a\\x1b[31mred");
    check("50%\rdone", "50%\\rdone");
    check("ding\a", "ding\\x07");
    check("one\ntwo\tthree", "one\\ntwo\\tthree");
    check("\x01\x1f", "\\x01\\x1f");
    check("\x1b]0;title\x07", "\\x1b]0;title\\x07");
}

static void test_del_and_c1(void **state)
{
    (void)state;
    check("x\x7fy", "x\\x7fy");
    /* U+009B (CSI) as UTF-8, and U+0080 / U+009F at the range's ends */
    check("\xc2\x9b"
          "31m",
          "\\u009b31m");
    check("\xc2\x80|\xc2\x9f", "\\u0080|\\u009f");
    /* U+00A0 and U+00E9 are not controls: kept */
    check("\xc2\xa0"
          "caf\xc3\xa9",
          "\xc2\xa0"
          "caf\xc3\xa9");
}

/* Bidirectional controls reorder what a terminal shows ("Trojan Source",
 * CVE-2021-42574): a line like `if x: # RLO ... LRI` can look like other
 * code. Each is shown as \uNNNN; neighbouring Arabic/Hebrew text is kept. */
static void test_bidi_controls(void **state)
{
    (void)state;
    check("a\xe2\x80\xae"
          "b",
          "a\\u202eb");                                    /* RLO */
    check("\xe2\x80\xaa|\xe2\x80\xac", "\\u202a|\\u202c"); /* LRE, PDF */
    check("\xe2\x81\xa6"
          "x\xe2\x81\xa9",
          "\\u2066x\\u2069");                            /* LRI, PDI */
    check("\xe2\x80\x8e\xe2\x80\x8f", "\\u200e\\u200f"); /* LRM, RLM */
    check("\xd8\x9c", "\\u061c");                        /* ALM */
    /* neighbours that are not controls: U+2065, U+206A, U+200D (ZWJ, in
     * emoji), U+2029 and Hebrew alef stay */
    check("\xe2\x81\xa5\xe2\x81\xaa\xe2\x80\x8d\xe2\x80\xa9\xd7\x90",
          "\xe2\x81\xa5\xe2\x81\xaa\xe2\x80\x8d\xe2\x80\xa9\xd7\x90");
}

static void test_invalid_utf8(void **state)
{
    (void)state;
    check("\x9b"
          "31m",
          "\\x9b31m"); /* a bare C1 byte */
    check("a\xff"
          "b",
          "a\\xffb");                                  /* never valid */
    check("\xc0\xaf", "\\xc0\\xaf");                   /* overlong '/' */
    check("\xe4\xb8", "\\xe4\\xb8");                   /* cut short */
    check("\xed\xa0\x80", "\\xed\\xa0\\x80");          /* a surrogate */
    check("\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"); /* above U+10FFFF */
    check("\xe4\x1b", "\\xe4\\x1b");                   /* lead byte, then ESC */
}

static void test_ordinary_text_unchanged(void **state)
{
    (void)state;
    const char *const same[] = {
        "",
        "/home/user/project/train.py",
        "loss = F.nll_loss(log_probs, target, weight=class_weights)",
        "/home/\xe7\x94\xa8\xe6\x88\xb7/\xe8\xae\xad\xe7\xbb\x83.py", /* /home/用户/训练.py
                                                                       */
        "\xe6\x95\xb0\xe6\x8d\xae \xf0\x9f\x94\xa5 emoji",            /* 数据 🔥 */
        "C:\\path\\with\\backslashes",
        "quotes \" ' and ~ {} [] <>",
    };
    for (size_t i = 0; i < sizeof same / sizeof *same; i++)
        check(same[i], same[i]);
}

static void test_null_and_nul(void **state)
{
    (void)state;
    char *t = gt_term_text(NULL);
    assert_string_equal(t, "");
    free(t);
    char *p = put_n("a\0\x1b", 3);
    assert_string_equal(p, "a\\x00\\x1b");
    free(p);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    gt_term_puts(f, NULL);
    gt_term_puts(f, "ok\x1b");
    fclose(f);
    assert_string_equal(buf, "ok\\x1b");
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_c0_controls),
        cmocka_unit_test(test_del_and_c1),
        cmocka_unit_test(test_bidi_controls),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_ordinary_text_unchanged),
        cmocka_unit_test(test_null_and_nul),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
