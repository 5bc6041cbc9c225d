/*
 * The guard `gradtrace sql` puts on a trace connection before it runs SQL a
 * user wrote (cli/cmd_sql.c), for every other reader of user SQL (the Python
 * extension's Trace.sql): an authorizer that refuses every write,
 * ATTACH/DETACH and every PRAGMA that sets something, with a message naming
 * what was refused, and SQLITE_DBCONFIG_DEFENSIVE. Callers still check
 * sqlite3_stmt_readonly() on each prepared statement (which also stops
 * VACUUM INTO).
 */
#ifndef GT_INSPECTOR_SQL_GUARD_H
#define GT_INSPECTOR_SQL_GUARD_H

#include <sqlite3.h>

#include "strbuf.h"

typedef struct gt_sql_guard {
    gt_strbuf why; /* why the authorizer refused the last statement: the
                      first reason, whole (it names what the user wrote) */
} gt_sql_guard;

#define GT_SQL_GUARD_INIT                                                                \
    {                                                                                    \
        GT_STRBUF_INIT                                                                   \
    }

/* Install the guard on `db`; g must outlive the connection's use and start
 * as GT_SQL_GUARD_INIT (call gt_sql_guard_clear before each prepare, and
 * gt_sql_guard_release after the connection's last use). Returns SQLITE_OK
 * or an SQLite error code (the connection is then not safe for user SQL). */
int gt_sql_guard_connection(sqlite3 *db, gt_sql_guard *g);

/* Forget the reason of the last refusal, before the next prepare. Can't
 * fail. */
void gt_sql_guard_clear(gt_sql_guard *g);

/* Why the authorizer refused the statement prepared last, "" if it did not
 * (a fixed text when the reason did not fit in memory). Owned by g, valid
 * until its next change. Can't fail. */
const char *gt_sql_guard_why(const gt_sql_guard *g);

/* Free what g holds; g may be NULL. Can't fail. */
void gt_sql_guard_release(gt_sql_guard *g);

#endif
