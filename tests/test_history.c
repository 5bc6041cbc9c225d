/*
 * Tests for `gradtrace history` (cli/cmd_history.c) on traces written
 * through the recorder API: the seed's class_weights, a tensor id, reads,
 * JSON, a name bound in a loop (the last five, --all), and bad input.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sqlite3.h>

#include "cmd.h"
#include "sqltrace.h"

SQLTRACE_SEED_FIXTURE("test_history")

/* Run `gradtrace history` with the given arguments ("@" = the seed trace). */
static void history(captured *c, int n, ...)
{
    char *argv[8] = {"history"};
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n && i < 6; i++) {
        const char *a = va_arg(ap, const char *);
        argv[i + 1] = strcmp(a, "@") ? (char *)a : seed_path;
    }
    va_end(ap);
    argv[n + 1] = NULL;
    run_captured(gt_cmd_history, n + 1, argv, NULL, c);
}

/* The seed story as history tells it: created, saved by the loss at
 * version 0, then six writes through three views to version 6. */
static void test_class_weights(void **state)
{
    (void)state;
    captured c;
    history(&c, 2, "@", "class_weights");
    assert_int_equal(c.status, 0);
    assert_string_equal(c.err, "");
    assert_string_equal(c.out,
                        "class_weights: 1 tensor bound to this name, with the tensors "
                        "sharing its version "
                        "counter\n"
                        "seq  event       tensor  version  what                        "
                        "line                 code\n"
                        "---  ----------  ------  -------  --------------------------  "
                        "-------------------  "
                        "----------------------------------------------------------\n"
                        "  1  first seen       1\n"
                        " 12  saved            1        0  NllLossBackward0 as weight  "
                        "examples/seed.py:38  "
                        "loss = F.nll_loss(log_probs, target, weight=class_weights)\n"
                        " 14  created          5           aten::select.int            "
                        "examples/seed.py:44  "
                        "class_weights[i] *= 1.0 + share\n"
                        " 16  write            5        1  aten::mul_.Tensor           "
                        "examples/seed.py:44  "
                        "class_weights[i] *= 1.0 + share\n"
                        " 18  write            5        2  aten::copy_                 "
                        "examples/seed.py:44  "
                        "class_weights[i] *= 1.0 + share\n"
                        " 20  created          6           aten::select.int            "
                        "examples/seed.py:44  "
                        "class_weights[i] *= 1.0 + share\n"
                        " 22  write            6        3  aten::mul_.Tensor           "
                        "examples/seed.py:44  "
                        "class_weights[i] *= 1.0 + share\n"
                        " 24  write            6        4  aten::copy_                 "
                        "examples/seed.py:44  "
                        "class_weights[i] *= 1.0 + share\n"
                        " 26  created          7           aten::select.int            "
                        "examples/seed.py:44  "
                        "class_weights[i] *= 1.0 + share\n"
                        " 28  write            7        5  aten::mul_.Tensor           "
                        "examples/seed.py:44  "
                        "class_weights[i] *= 1.0 + share\n"
                        " 30  write            7        6  aten::copy_                 "
                        "examples/seed.py:44  "
                        "class_weights[i] *= 1.0 + share\n");
    captured_free(&c);
}

/* By tensor id: the same counter from one of its views; the root of the
 * backward call shows for loss. */
static void test_by_id_and_root(void **state)
{
    (void)state;
    captured c;
    history(&c, 2, "@", "6");
    assert_int_equal(c.status, 0);
    assert_contains(c.out, "6: tensor 6 and every tensor sharing its version counter\n");
    assert_contains(c.out,
                    " 12  saved            1        0  NllLossBackward0 as weight  ");
    assert_contains(c.out, " 30  write            7        6  aten::copy_  ");
    captured_free(&c);

    history(&c, 2, "@", "loss");
    assert_int_equal(c.status, 0);
    assert_contains(c.out, "  8  created             4           aten::nll_loss_forward  "
                           "examples/seed.py:38  ");
    assert_contains(c.out, " 31  backward root       4           Tensor.backward #1      "
                           "examples/seed.py:47  loss.backward()\n");
    captured_free(&c);
}

/* --reads adds the ops that read the counter; --json gives the same rows. */
static void test_reads_and_json(void **state)
{
    (void)state;
    captured c;
    history(&c, 3, "--reads", "@", "class_weights");
    assert_int_equal(c.status, 0);
    assert_contains(c.out, "  read             1        0  aten::nll_loss_forward ");
    captured_free(&c);

    history(&c, 3, "--json", "@", "class_weights");
    assert_int_equal(c.status, 0);
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    assert_int_equal(
        sqlite3_prepare_v2(db,
                           "SELECT json_array_length(?1), "
                           "(SELECT group_concat(json_extract(value, '$.event') || "
                           "'@' || json_extract(value, '$.seq'), ' ') "
                           "FROM json_each(?1)), "
                           "json_extract(?1, '$[1].what'), "
                           "json_extract(?1, '$[10].version')",
                           -1, &st, NULL),
        SQLITE_OK);
    sqlite3_bind_text(st, 1, c.out, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 11);
    assert_string_equal(
        (const char *)sqlite3_column_text(st, 1),
        "first seen@1 saved@12 created@14 write@16 write@18 created@20 write@22 "
        "write@24 created@26 write@28 write@30");
    assert_string_equal((const char *)sqlite3_column_text(st, 2),
                        "NllLossBackward0 as weight");
    assert_int_equal(sqlite3_column_int(st, 3), 6);
    sqlite3_finalize(st);
    sqlite3_close(db);
    captured_free(&c);
}

/* A name bound anew in each of 8 steps: the last five counters unless
 * --all. */
static void test_name_bound_in_a_loop(void **state)
{
    (void)state;
    char path[64];
    tb b;
    captured c;
    snprintf(path, sizeof path, "/tmp/gt_test_history_loop_%d.db", (int)getpid());
    tb_open(&b, path);
    gt_id line = tb_user_stack(&b, 12, "h = x * 2");
    for (int i = 0; i < 8; i++) {
        int64_t op = tb_op(&b, "aten::mul.Tensor", line, 0);
        tb_tensor(&b, 100 + i, 100 + i, "float32", 1, 4, 0, op, 0, 100 + i);
        assert_int_equal(gt_name(b.r, op, 100 + i, "h"), GT_OK);
    }
    assert_int_equal(gt_run_end(b.r, GT_RUN_OK, 0, 0), GT_OK);
    assert_int_equal(gt_recorder_close(b.r), GT_OK);

    char *argv[] = {"history", path, "h", NULL};
    run_captured(gt_cmd_history, 3, argv, NULL, &c);
    assert_int_equal(c.status, 0);
    assert_contains(c.out, "h: 8 tensors were bound to this name; the last 5 are shown "
                           "(--all shows every one)\n");
    assert_null(strstr(c.out, "     102  "));
    assert_contains(c.out, "     103           aten::mul.Tensor  ");
    assert_contains(c.out, "     107           aten::mul.Tensor  ");
    captured_free(&c);

    char *argv_all[] = {"history", "--all", path, "h", NULL};
    run_captured(gt_cmd_history, 4, argv_all, NULL, &c);
    assert_int_equal(c.status, 0);
    assert_contains(c.out,
                    "h: 8 tensors bound to this name, with the tensors sharing their "
                    "version counter\n");
    assert_contains(c.out, "     100           aten::mul.Tensor  ");
    captured_free(&c);
    unlink(path);
}

static void test_bad_input(void **state)
{
    (void)state;
    captured c;
    history(&c, 2, "@", "nope");
    assert_int_equal(c.status, 1);
    assert_string_equal(c.out, "");
    assert_contains(c.err, "gradtrace: history: no variable 'nope' in ");
    assert_contains(c.err,
                    "; its variables include class_weights, log_probs, loss, target\n");
    captured_free(&c);

    history(&c, 2, "@", "424242");
    assert_int_equal(c.status, 1);
    assert_contains(c.err, "gradtrace: history: no tensor '424242' in ");
    captured_free(&c);

    history(&c, 1, "@");
    assert_int_equal(c.status, 2);
    assert_contains(c.err,
                    "gradtrace: history: want a trace and a variable name or tensor "
                    "id (see gradtrace history --help)\n");
    captured_free(&c);

    history(&c, 3, "--bogus", "@", "x");
    assert_int_equal(c.status, 2);
    /* one line, and where the options are */
    assert_string_equal(c.err,
                        "gradtrace: history: unknown option '--bogus' (see gradtrace "
                        "history --help)\n");
    captured_free(&c);

    history(&c, 2, "/nonexistent/run.db", "x");
    assert_int_equal(c.status, 2);
    assert_contains(c.err, "gradtrace: cannot open /nonexistent/run.db: ");
    captured_free(&c);

    history(&c, 1, "--help");
    assert_int_equal(c.status, 0);
    assert_contains(c.out,
                    "usage: gradtrace history [options] TRACE VARIABLE|TENSOR-ID\n");
    captured_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_class_weights),
        cmocka_unit_test(test_by_id_and_root),
        cmocka_unit_test(test_reads_and_json),
        cmocka_unit_test(test_name_bound_in_a_loop),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup_seed, teardown_seed);
}
