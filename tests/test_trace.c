/*
 * Tests for the reading layer of inspector/trace.c (<gradtrace/trace.h>):
 * the statement cache, the one-value readers, the statements a caller owns,
 * and the typed tensor row, on the seed trace (tests/sqltrace.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <sqlite3.h>

#include <gradtrace/report.h>
#include <gradtrace/trace.h>

#include "sqltrace.h"

SQLTRACE_SEED_FIXTURE("test_trace")

static gt_trace *open_seed(void)
{
    gt_trace *t = NULL;
    assert_int_equal(gt_trace_open(seed_path, &t), GT_OK);
    return t;
}

static const char sql_dtype[] =
    "SELECT s.text FROM tensors t JOIN strings s ON s.id = t.dtype WHERE t.id = ?1";

/* One statement per SQL text, handed out reset and unbound. */
static void test_stmt_cache(void **state)
{
    (void)state;
    gt_trace *t = open_seed();
    static const char sql[] = "SELECT id FROM tensors WHERE id >= ?1 ORDER BY id";
    sqlite3_stmt *st = gt_trace_stmt(t, sql);
    assert_non_null(st);
    sqlite3_bind_int64(st, 1, 3);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int64(st, 0), 3);
    /* left on a row: the next caller gets it back from the start, its
     * binding cleared (?1 NULL: no row) */
    assert_ptr_equal(gt_trace_stmt(t, sql), st);
    assert_int_equal(sqlite3_stmt_busy(st), 0);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_reset(st);
    /* another text, another statement */
    sqlite3_stmt *other = gt_trace_stmt(t, sql_dtype);
    assert_non_null(other);
    assert_ptr_not_equal(other, st);
    sqlite3_reset(other);
    gt_trace_close(t);
}

static void test_stmt_error(void **state)
{
    (void)state;
    gt_trace *t = open_seed();
    assert_null(gt_trace_stmt(t, "SELECT x FROM no_such_table"));
    assert_int_equal(gt_trace_errcode(t), GT_ECORRUPT);
    assert_string_equal(gt_trace_errmsg(t),
                        "cannot read trace: no such table: no_such_table");
    gt_trace_close(t);
}

static void test_int(void **state)
{
    (void)state;
    gt_trace *t = open_seed();
    int64_t v = -1;
    /* log_probs (tensor 2) was made by an op; class_weights (1) views none */
    assert_int_equal(
        gt_trace_int(t, "SELECT created_by FROM tensors WHERE id = ?1", 2, 0, &v), 1);
    assert_true(v > 0);
    assert_int_equal(
        gt_trace_int(t, "SELECT alias_of FROM tensors WHERE id = ?1", 1, 0, &v), 0);
    assert_int_equal(v, 0);
    v = -1;
    assert_int_equal(
        gt_trace_int(t, "SELECT alias_of FROM tensors WHERE id = ?1", 99, 0, &v), 0);
    assert_int_equal(v, 0);
    /* ?2 bound too */
    assert_int_equal(
        gt_trace_int(t, "SELECT count(*) FROM version_bumps WHERE seq BETWEEN ?1 AND ?2",
                     seed.bump_seq[0], seed.bump_seq[2], &v),
        1);
    assert_int_equal(v, 3);
    v = -1;
    assert_int_equal(gt_trace_int(t, "SELECT x FROM no_such_table", 0, 0, &v),
                     GT_ECORRUPT);
    assert_int_equal(v, 0);
    assert_string_equal(gt_trace_errmsg(t),
                        "cannot read trace: no such table: no_such_table");
    gt_trace_close(t);
}

static void test_text(void **state)
{
    (void)state;
    gt_trace *t = open_seed();
    gt_strbuf b = GT_STRBUF_INIT;
    assert_int_equal(gt_trace_text(t, sql_dtype, 3, 0, &b), 1);
    assert_string_equal(gt_strbuf_str(&b), "int64");
    assert_int_equal(gt_trace_text(t, sql_dtype, 99, 0, &b), 0);
    assert_string_equal(gt_strbuf_str(&b), "");
    gt_strbuf_release(&b);
    gt_trace_close(t);
}

/* A statement of the caller's own: any text, two at once for one text. */
static void test_prepare(void **state)
{
    (void)state;
    gt_trace *t = open_seed();
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", "tensors");
    sqlite3_stmt *a = NULL, *b = NULL;
    assert_int_equal(gt_trace_prepare(t, sql, &a), GT_OK);
    assert_int_equal(gt_trace_prepare(t, sql, &b), GT_OK);
    assert_ptr_not_equal(a, b);
    assert_int_equal(sqlite3_step(a), SQLITE_ROW);
    assert_int_equal(sqlite3_step(b), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int64(a, 0), 7);
    sqlite3_finalize(a);
    sqlite3_finalize(b);
    b = (sqlite3_stmt *)&b;
    assert_int_equal(gt_trace_prepare(t, "SELEC 1", &b), GT_ECORRUPT);
    assert_null(b);
    assert_string_equal(gt_trace_errmsg(t),
                        "cannot read trace: near \"SELEC\": syntax error");
    gt_trace_close(t);
}

static void test_db_prepare(void **state)
{
    (void)state;
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    const char *tail = NULL;
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    assert_int_equal(gt_db_prepare(db, "SELECT json_quote(?1)", &st), SQLITE_OK);
    sqlite3_bind_text(st, 1, "a\"b", -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "\"a\\\"b\"");
    sqlite3_finalize(st);
    st = (sqlite3_stmt *)&st;
    assert_int_equal(gt_db_prepare(db, "SELECT * FROM nowhere", &st), SQLITE_ERROR);
    assert_null(st);
    assert_string_equal(sqlite3_errmsg(db), "no such table: nowhere");
    assert_int_equal(gt_db_prepare_first(db, "SELECT 1; SELECT 2", &st, &tail),
                     SQLITE_OK);
    assert_non_null(st);
    assert_string_equal(tail, " SELECT 2");
    sqlite3_finalize(st);
    assert_int_equal(gt_db_prepare_first(db, "  -- nothing\n", &st, &tail), SQLITE_OK);
    assert_null(st);
    sqlite3_close(db);
}

/* The typed tensor row: numbers, texts, NULLs, and a row that is not. */
static void test_tensor(void **state)
{
    (void)state;
    gt_trace *t = open_seed();
    gt_tensor_row x = GT_TENSOR_ROW_INIT;
    assert_int_equal(gt_trace_tensor(t, 2, &x), 1); /* log_probs [16, 3] */
    assert_int_equal(x.storage, 2);
    assert_int_equal(x.storage_offset, 0);
    assert_true(x.created_by > 0);
    assert_int_equal(x.alias_of, 0);
    assert_int_equal(x.is_leaf, 0);
    assert_string_equal(x.dtype, "float32");
    assert_string_equal(x.shape, "[16,3]");
    assert_string_equal(x.strides, "[3,1]");
    assert_int_equal(gt_trace_tensor(t, 6, &x), 1); /* a view of class_weights */
    assert_int_equal(x.alias_of, 1);
    assert_int_equal(x.version_counter, 1);
    assert_int_equal(x.storage, 1);
    assert_string_equal(x.shape, "[]");
    assert_int_equal(gt_trace_tensor(t, 99, &x), 0);
    assert_int_equal(x.storage, 0);
    assert_int_equal(x.alias_of, 0);
    assert_string_equal(x.dtype, "");
    assert_null(x.shape);
    assert_null(x.strides);
    gt_tensor_row_release(&x);
    assert_null(x.buf.p);
    gt_trace_close(t);
}

/* A query the report cannot run says why (SQLite's message, kept on the
 * handle where the reading layer met it), not "not an error". */
static void test_report_failure_message(void **state)
{
    (void)state;
    char path[64];
    seed_ids bad_ids;
    snprintf(path, sizeof path, "/tmp/gt_test_trace_bad_%d.db", (int)getpid());
    build_seed(path, &bad_ids, 1, NULL);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db, "DROP TABLE names; CREATE TABLE names (x)", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    gt_trace *t = NULL;
    gt_report r;
    assert_int_equal(gt_trace_open(path, &t), GT_OK);
    assert_int_equal(gt_report_build(t, "bad.db", NULL, &r), GT_ECORRUPT);
    const char *want = "cannot read trace: no such column: ";
    if (strncmp(gt_trace_errmsg(t), want, strlen(want)) != 0)
        fail_msg("message \"%s\", not \"%s...\"", gt_trace_errmsg(t), want);
    gt_report_release(&r);
    gt_trace_close(t);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stmt_cache), cmocka_unit_test(test_stmt_error),
        cmocka_unit_test(test_int),        cmocka_unit_test(test_text),
        cmocka_unit_test(test_prepare),    cmocka_unit_test(test_db_prepare),
        cmocka_unit_test(test_tensor),     cmocka_unit_test(test_report_failure_message),
    };
    return cmocka_run_group_tests(tests, setup_seed, teardown_seed);
}
