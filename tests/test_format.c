/*
 * include/gradtrace/format.h against schema/gradtrace.sql (the DDL the
 * recorder compiles in): the same tables, the rows of the lookup tables
 * (roles, phases) equal to the enums' names, and the status the DDL gives
 * a run and a backward call that have not ended.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include <gradtrace/format.h>

#include "gt_schema_sql.h"

/* An in-memory database holding the schema. */
static sqlite3 *schema_db(void)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    char *err = NULL;
    int rc = sqlite3_exec(db, gt_schema_sql, NULL, NULL, &err);
    if (rc != SQLITE_OK)
        fail_msg("schema/gradtrace.sql: %s", err ? err : "?");
    return db;
}

/* The text of the first column of the first row of sql (with ?1 = i if sql
 * has it), as a
 * malloc'd string, or NULL if there is no row or it is NULL. */
static char *text_of(sqlite3 *db, const char *sql, int64_t i)
{
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_int64(st, 1, i);
    char *out = NULL;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        out = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return out;
}

static int64_t int_of(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

#define TABLE_NAME(name) #name,
static const char *const tables[] = {GT_TABLE_LIST(TABLE_NAME)};
#undef TABLE_NAME
#define NTABLES (sizeof tables / sizeof *tables)

/* GT_TABLE_LIST names every table of the DDL, in the DDL's order, and
 * nothing else. */
static void test_tables(void **state)
{
    (void)state;
    sqlite3 *db = schema_db();
    sqlite3_stmt *st = NULL;
    assert_int_equal(
        sqlite3_prepare_v2(db,
                           "SELECT name FROM sqlite_schema WHERE type = 'table'"
                           " AND name NOT LIKE 'sqlite_%' ORDER BY rowid",
                           -1, &st, NULL),
        SQLITE_OK);
    size_t n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        if (n >= NTABLES)
            fail_msg("table %s of the DDL is not in GT_TABLE_LIST", name);
        if (strcmp(name, tables[n]))
            fail_msg("table %zu: the DDL has %s, GT_TABLE_LIST %s", n, name, tables[n]);
        n++;
    }
    sqlite3_finalize(st);
    if (n != NTABLES)
        fail_msg("GT_TABLE_LIST has %zu tables, the DDL %zu (first missing: %s)", NTABLES,
                 n, tables[n]);
    sqlite3_close(db);
}

/* The rows of lookup table `table` are exactly the (value, name) pairs of
 * its X-macro list. */
static void check_lookup(sqlite3 *db, const char *table, const int *values,
                         const char *const *names, size_t n)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", table);
    assert_int_equal(int_of(db, sql), n);
    snprintf(sql, sizeof sql, "SELECT name FROM %s WHERE id = ?1", table);
    for (size_t i = 0; i < n; i++) {
        char *got = text_of(db, sql, values[i]);
        if (!got || strcmp(got, names[i]))
            fail_msg("%s row %d: the DDL has %s, format.h %s", table, values[i],
                     got ? got : "(none)", names[i]);
        free(got);
    }
}

#define VALUE(e, v, t) e,
#define NAME(e, v, t)  t,
static void test_lookup_tables(void **state)
{
    (void)state;
    sqlite3 *db = schema_db();
    static const int roles[] = {GT_ROLE_MAP(VALUE)};
    static const char *const role_names[] = {GT_ROLE_MAP(NAME)};
    check_lookup(db, "roles", roles, role_names, sizeof roles / sizeof *roles);
    static const int phases[] = {GT_PHASE_MAP(VALUE)};
    static const char *const phase_names[] = {GT_PHASE_MAP(NAME)};
    check_lookup(db, "phases", phases, phase_names, sizeof phases / sizeof *phases);
    sqlite3_close(db);
}

/* The name functions agree with the lists and refuse other values. */
static void test_names(void **state)
{
    (void)state;
    assert_string_equal(gt_role_name(GT_ROLE_MUTATED), "mutated");
    assert_string_equal(gt_phase_name(GT_PHASE_OTHER), "other");
    assert_string_equal(gt_run_status_name(GT_RUN_SIGNAL), "signal");
    assert_string_equal(gt_backward_status_name(GT_BACKWARD_ERROR), "error");
    assert_null(gt_role_name(3));
    assert_null(gt_phase_name(-1));
    assert_null(gt_run_status_name(3));
    assert_null(gt_backward_status_name(3));
}

/* A run and a backward call start with the status format.h calls running. */
static void test_default_status(void **state)
{
    (void)state;
    sqlite3 *db = schema_db();
    char *err = NULL;
    int rc =
        sqlite3_exec(db,
                     "INSERT INTO run (id, gradtrace_version, schema_version, start_ns)"
                     " VALUES (1, 'x', 0, 0)",
                     NULL, NULL, &err);
    if (rc != SQLITE_OK)
        fail_msg("insert run: %s", err);
    char *status = text_of(db, "SELECT status FROM run WHERE id = ?1", 1);
    assert_non_null(status);
    assert_string_equal(status, GT_RUN_STATUS_RUNNING);
    free(status);
    status = text_of(db,
                     "SELECT dflt_value FROM pragma_table_info('backward_calls')"
                     " WHERE name = 'status'",
                     0);
    assert_non_null(status);
    char want[32];
    snprintf(want, sizeof want, "'%s'", gt_backward_status_name(GT_BACKWARD_RUNNING));
    assert_string_equal(status, want);
    free(status);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_lookup_tables),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_default_status),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
