/*
 * One-value SQL queries for tests that read a trace with SQLite directly
 * (the recorder's tests). Include after <cmocka.h>. Each fails the test if
 * the statement does not prepare or returns no row.
 */
#ifndef GT_TESTS_SQLQUERY_H
#define GT_TESTS_SQLQUERY_H

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>

/* `sql` prepared and stepped to its first row; the caller finalizes it. */
static inline sqlite3_stmt *q_row(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        print_error("prepare %s: %s\n", sql, sqlite3_errmsg(db));
    assert_int_equal(rc, SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    return st;
}

/* The integer in the first column of the first row of `sql`. */
static inline int64_t q_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = q_row(db, sql);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* The text in the first column of the first row of `sql`, in a static
 * buffer ("(null)" for NULL) valid until the next call. */
static inline const char *q_text(sqlite3 *db, const char *sql)
{
    static char buf[1024];
    sqlite3_stmt *st = q_row(db, sql);
    const unsigned char *t = sqlite3_column_text(st, 0);
    snprintf(buf, sizeof(buf), "%s", t ? (const char *)t : "(null)");
    sqlite3_finalize(st);
    return buf;
}

#endif
