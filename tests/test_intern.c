/* Tests of recorder/intern.c (the hash tables) and of interning through the
 * recorder API: equal input gives the same id and one row. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <gradtrace/recorder.h>

#include "intern.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GT_TMPDIR_PREFIX "gt_test_intern"
#include "tmpdir.h"
#include "sqlquery.h"

/* ---- the tables -------------------------------------------------------- */

static void test_strtab_find_add_grow(void **state)
{
    (void)state;
    gt__strtab t;
    gt__strtab_init(&t);
    assert_int_equal(gt__strtab_find(&t, "a", 1, gt__strhash("a", 1)), 0);
    char buf[32];
    for (int i = 0; i < 5000; i++) {
        int n = snprintf(buf, sizeof(buf), "s%d", i);
        uint64_t h = gt__strhash(buf, (size_t)n);
        assert_int_equal(gt__strtab_find(&t, buf, (size_t)n, h), 0);
        assert_int_equal(gt__strtab_add(&t, buf, (size_t)n, h, i + 1), 0);
    }
    assert_int_equal(t.n, 5000);
    assert_true(t.cap >= 10000);
    for (int i = 0; i < 5000; i++) {
        int n = snprintf(buf, sizeof(buf), "s%d", i);
        assert_int_equal(gt__strtab_find(&t, buf, (size_t)n, gt__strhash(buf, (size_t)n)),
                         i + 1);
    }
    /* prefixes, empty string and embedded NUL are distinct keys */
    assert_int_equal(gt__strtab_find(&t, "s1", 1, gt__strhash("s1", 1)), 0);
    assert_int_equal(gt__strtab_add(&t, "", 0, gt__strhash("", 0), 9001), 0);
    assert_int_equal(gt__strtab_add(&t, "a\0b", 3, gt__strhash("a\0b", 3), 9002), 0);
    assert_int_equal(gt__strtab_find(&t, "", 0, gt__strhash("", 0)), 9001);
    assert_int_equal(gt__strtab_find(&t, "a\0b", 3, gt__strhash("a\0b", 3)), 9002);
    assert_int_equal(gt__strtab_find(&t, "a\0c", 3, gt__strhash("a\0c", 3)), 0);
    /* a string bigger than an arena block */
    size_t big = 100000;
    char *s = malloc(big);
    assert_non_null(s);
    memset(s, 'x', big);
    assert_int_equal(gt__strtab_add(&t, s, big, gt__strhash(s, big), 9003), 0);
    assert_int_equal(gt__strtab_find(&t, s, big, gt__strhash(s, big)), 9003);
    /* small strings after it still go to the shared block */
    assert_int_equal(gt__strtab_add(&t, "after", 5, gt__strhash("after", 5), 9004), 0);
    assert_int_equal(gt__strtab_find(&t, "after", 5, gt__strhash("after", 5)), 9004);
    assert_int_equal(gt__strtab_find(&t, "s4999", 5, gt__strhash("s4999", 5)), 5000);
    free(s);
    assert_true(gt__strtab_bytes(&t) > big);
    gt__strtab_release(&t);
    assert_int_equal(t.n, 0);
}

static void test_inttab_keys_and_aux(void **state)
{
    (void)state;
    gt__inttab t2, t4;
    gt__inttab_init(&t2, 2);
    gt__inttab_init(&t4, 4);
    int64_t aux = -1;
    int64_t k[4] = {0, 1, 0, 0};
    assert_int_equal(gt__inttab_find(&t2, k, &aux), 0);
    for (int64_t p = 0; p < 100; p++)
        for (int64_t f = 1; f <= 50; f++) {
            int64_t key[2] = {p, f};
            assert_int_equal(gt__inttab_add(&t2, key, p * 1000 + f, f * 7), 0);
        }
    assert_int_equal(t2.n, 5000);
    for (int64_t p = 0; p < 100; p++)
        for (int64_t f = 1; f <= 50; f++) {
            int64_t key[2] = {p, f};
            assert_int_equal(gt__inttab_find(&t2, key, &aux), p * 1000 + f);
            assert_int_equal(aux, f * 7);
        }
    int64_t swapped[2] = {5, 100}; /* (100, 5) is absent */
    assert_int_equal(gt__inttab_find(&t2, swapped, NULL), 0);
    /* 4 keys: only the full tuple matches */
    int64_t a[4] = {1, 10, 2, 0}, b[4] = {1, 10, 2, 3}, c[4] = {1, 11, 2, 0};
    assert_int_equal(gt__inttab_add(&t4, a, 1, 0), 0);
    assert_int_equal(gt__inttab_add(&t4, b, 2, 0), 0);
    assert_int_equal(gt__inttab_find(&t4, a, NULL), 1);
    assert_int_equal(gt__inttab_find(&t4, b, NULL), 2);
    assert_int_equal(gt__inttab_find(&t4, c, NULL), 0);
    assert_int_equal(gt__inttab_bytes(&t2), t2.cap * 4 * sizeof(int64_t));
    gt__inttab_release(&t2);
    gt__inttab_release(&t4);
}

/* ---- through the recorder ---------------------------------------------- */

static void test_recorder_dedupes_strings_frames_stacks_threads(void **state)
{
    (void)state;
    char err[256];
    gt_recorder *r = NULL;
    assert_int_equal(gt_recorder_open(tpath("intern.db"), NULL, err, sizeof(err), &r), 0);

    gt_id a, b, c, e1, e2;
    assert_int_equal(gt_intern_string(r, "aten::mul", 9, &a), 0);
    assert_int_equal(gt_intern_string(r, "aten::mul_", 10, &b), 0);
    assert_int_equal(gt_intern_string(r, "aten::mul_", 9, &c), 0); /* a prefix */
    assert_int_equal(a, 1);
    assert_int_equal(b, 2);
    assert_int_equal(c, a);
    assert_int_equal(gt_intern_string(r, "", 0, &e1), 0);
    assert_int_equal(gt_intern_string(r, NULL, 0, &e2), 0);
    assert_int_equal(e1, e2);

    gt_id f1, f2, f3, f4, f5;
    assert_int_equal(gt_intern_frame(r, "m.py", 3, "f", "y = x", &f1), 0);
    assert_int_equal(gt_intern_frame(r, "m.py", 3, "f", "y = x", &f2), 0);
    assert_int_equal(gt_intern_frame(r, "m.py", 4, "f", "y = x", &f3), 0);
    assert_int_equal(gt_intern_frame(r, "m.py", 3, "f", NULL, &f4), 0);
    assert_int_equal(gt_intern_frame(r, "m.py", 3, "g", "y = x", &f5), 0);
    assert_int_equal(f1, f2);
    assert_true(f3 != f1 && f4 != f1 && f5 != f1 && f3 != f4 && f4 != f5);
    /* the frame's strings are shared with gt_intern_string */
    gt_id file_id;
    assert_int_equal(gt_intern_string(r, "m.py", 4, &file_id), 0);

    /* the same chain interned twice gives the same ids */
    gt_id chain1[3], chain2[3], parent = 0;
    gt_id frames[3] = {f1, f3, f5};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(gt_intern_stack(r, parent, frames[i], f3, &chain1[i]), 0);
        parent = chain1[i];
    }
    parent = 0;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(gt_intern_stack(r, parent, frames[i], f3, &chain2[i]), 0);
        parent = chain2[i];
    }
    assert_memory_equal(chain1, chain2, sizeof(chain1));
    /* same frame under another parent is another stack */
    gt_id other;
    assert_int_equal(gt_intern_stack(r, chain1[0], f5, 0, &other), 0);
    assert_true(other != chain1[2]);

    gt_id t1, t2, t3;
    assert_int_equal(gt_intern_thread(r, 100, "MainThread", &t1), 0);
    assert_int_equal(gt_intern_thread(r, 100, "renamed", &t2), 0);
    assert_int_equal(gt_intern_thread(r, 101, NULL, &t3), 0);
    assert_int_equal(t1, t2);
    assert_true(t3 != t1);

    /* many stacks: ids stay stable past table growth */
    gt_id first[2000];
    for (int i = 0; i < 2000; i++)
        assert_int_equal(gt_intern_stack(r, chain1[2], i % 2 ? f1 : f4, 0, &first[i]), 0);
    parent = chain1[2];
    gt_id deep[2000];
    for (int i = 0; i < 2000; i++) {
        assert_int_equal(gt_intern_stack(r, parent, frames[i % 3], 0, &deep[i]), 0);
        parent = deep[i];
    }
    parent = chain1[2];
    for (int i = 0; i < 2000; i++) {
        gt_id again;
        assert_int_equal(gt_intern_stack(r, parent, frames[i % 3], 0, &again), 0);
        assert_int_equal(again, deep[i]);
        parent = again;
    }
    assert_int_equal(first[0], first[2]);
    assert_int_equal(first[1], first[3]);
    assert_int_equal(gt_recorder_close(r), 0);

    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(tpath("intern.db"), &db), SQLITE_OK);
    /* strings: aten::mul, aten::mul_, "", m.py, f, y = x, g */
    assert_int_equal(q_int(db, "SELECT count(*) FROM strings"), 7);
    assert_int_equal(q_int(db, "SELECT count(DISTINCT text) FROM strings"), 7);
    assert_int_equal(q_int(db, "SELECT count(*) FROM frames"), 4);
    assert_int_equal(q_int(db, "SELECT code IS NULL FROM frames WHERE id = 3"), 1);
    assert_int_equal(q_int(db, "SELECT file FROM frames WHERE id = 1"), file_id);
    /* 3 + 1 + 2 + 2000 stacks, (chain1[2], f1) being both first[1] and deep[0] */
    assert_int_equal(q_int(db, "SELECT count(*) FROM stacks"), 2005);
    assert_int_equal(q_int(db, "SELECT count(*) FROM (SELECT DISTINCT parent, frame"
                               " FROM stacks)"),
                     2005);
    assert_int_equal(q_int(db, "SELECT count(*) FROM stacks WHERE parent IS NULL"), 1);
    assert_int_equal(q_int(db, "SELECT user_frame FROM stacks WHERE id = 3"), f3);
    assert_int_equal(q_int(db, "SELECT count(*) FROM threads"), 2);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT name FROM threads WHERE os_tid = 100",
                                        -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "MainThread");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strtab_find_add_grow),
        cmocka_unit_test(test_inttab_keys_and_aux),
        cmocka_unit_test(test_recorder_dedupes_strings_frames_stacks_threads),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
