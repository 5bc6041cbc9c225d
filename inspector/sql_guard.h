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

typedef struct gt_sql_guard {
    char why[256]; /* why the authorizer refused the last statement, or "" */
} gt_sql_guard;

/* Install the guard on `db`; g must outlive the connection's use and start
 * zeroed (clear g->why before each prepare). Returns SQLITE_OK or an SQLite
 * error code (the connection is then not safe for user SQL). */
int gt_sql_guard_connection(sqlite3 *db, gt_sql_guard *g);

#endif
