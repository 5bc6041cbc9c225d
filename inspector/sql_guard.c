/* The guard on a connection that runs SQL a user wrote; see sql_guard.h. */
#include <gradtrace/sql_guard.h>

#include <string.h>
#include <strings.h>

/* PRAGMAs whose argument names a table or index to read, not a value. */
static const char *const read_pragmas_with_arg[] = {
    "table_info",        "table_xinfo",     "index_list",
    "index_info",        "index_xinfo",     "foreign_key_list",
    "foreign_key_check", "integrity_check", "quick_check",
};

/* PRAGMAs that act even without an argument. */
static const char *const acting_pragmas[] = {
    "optimize",
    "wal_checkpoint",
    "incremental_vacuum",
    "shrink_memory",
};

static int in_list(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcasecmp(name, list[i]))
            return 1;
    return 0;
}

/* The verb of a write action, for the refusal message; *a1 is cleared when
 * it does not name the object written. */
static const char *write_verb(int action, const char **a1)
{
    const char *verb;
    if ((action == SQLITE_INSERT || action == SQLITE_DELETE) && *a1 &&
        (!strcmp(*a1, "sqlite_master") || !strcmp(*a1, "sqlite_temp_master"))) {
        /* the first step of CREATE and DROP statements */
        *a1 = NULL;
        return "changing the schema (CREATE, DROP)";
    }
    switch (action) {
    case SQLITE_INSERT:
        verb = "INSERT into";
        break;
    case SQLITE_UPDATE:
        verb = "UPDATE of";
        break;
    case SQLITE_DELETE:
        verb = "DELETE from";
        break;
    case SQLITE_CREATE_TABLE:
    case SQLITE_CREATE_TEMP_TABLE:
        verb = "CREATE TABLE";
        break;
    case SQLITE_CREATE_VIEW:
    case SQLITE_CREATE_TEMP_VIEW:
        verb = "CREATE VIEW";
        break;
    case SQLITE_CREATE_INDEX:
    case SQLITE_CREATE_TEMP_INDEX:
        verb = "CREATE INDEX";
        break;
    case SQLITE_CREATE_TRIGGER:
    case SQLITE_CREATE_TEMP_TRIGGER:
        verb = "CREATE TRIGGER";
        break;
    case SQLITE_DROP_TABLE:
    case SQLITE_DROP_TEMP_TABLE:
        verb = "DROP TABLE";
        break;
    case SQLITE_DROP_VIEW:
    case SQLITE_DROP_TEMP_VIEW:
        verb = "DROP VIEW";
        break;
    case SQLITE_DROP_INDEX:
    case SQLITE_DROP_TEMP_INDEX:
        verb = "DROP INDEX";
        break;
    case SQLITE_DROP_TRIGGER:
    case SQLITE_DROP_TEMP_TRIGGER:
        verb = "DROP TRIGGER";
        break;
    case SQLITE_ALTER_TABLE:
        verb = "ALTER TABLE";
        break;
    case SQLITE_REINDEX:
        verb = "REINDEX";
        break;
    case SQLITE_ANALYZE:
        verb = "ANALYZE";
        break;
    case SQLITE_CREATE_VTABLE:
        verb = "CREATE VIRTUAL TABLE";
        break;
    case SQLITE_DROP_VTABLE:
        verb = "DROP of a virtual table";
        break;
    default:
        verb = "this statement";
        *a1 = NULL;
        break;
    }
    return verb;
}

static int authorize(void *ud, int action, const char *a1, const char *a2, const char *db,
                     const char *trigger)
{
    gt_sql_guard *g = ud;
    (void)db;
    (void)trigger;
    if (g->why.len || g->why.oom) /* keep the first reason: it names what the
                                      user wrote */
        return SQLITE_DENY;
    switch (action) {
    case SQLITE_SELECT:
    case SQLITE_READ:
    case SQLITE_FUNCTION:
    case SQLITE_RECURSIVE:
    case SQLITE_TRANSACTION:
    case SQLITE_SAVEPOINT:
        return SQLITE_OK;
    case SQLITE_UPDATE:
        /* Using a table-valued function (json_each, pragma_table_info)
         * asks for UPDATE of sqlite_master columns when SQLite sets the
         * virtual table up. A real UPDATE of sqlite_master is still stopped:
         * writable_schema is off, the statement is not read-only (checked
         * after prepare) and the connection is read-only. */
        if (a1 && (!strcmp(a1, "sqlite_master") || !strcmp(a1, "sqlite_temp_master")))
            return SQLITE_OK;
        break;
    case SQLITE_PRAGMA:
        if (in_list(a1, read_pragmas_with_arg,
                    sizeof read_pragmas_with_arg / sizeof *read_pragmas_with_arg))
            return SQLITE_OK;
        if (!a2 &&
            !in_list(a1, acting_pragmas, sizeof acting_pragmas / sizeof *acting_pragmas))
            return SQLITE_OK;
        gt_strbuf_addf(&g->why,
                       "PRAGMA %s%s%s would change the trace or the connection; "
                       "only reading pragmas are allowed",
                       a1, a2 ? " = " : "", a2 ? a2 : "");
        return SQLITE_DENY;
    case SQLITE_ATTACH:
    case SQLITE_DETACH:
        gt_strbuf_adds(
            &g->why, "ATTACH and DETACH are not allowed: gradtrace sql reads one trace");
        return SQLITE_DENY;
    default:
        break;
    }
    const char *verb = write_verb(action, &a1);
    gt_strbuf_addf(&g->why, "the trace is read-only: %s%s%s is not allowed", verb,
                   a1 ? " " : "", a1 ? a1 : "");
    return SQLITE_DENY;
}

int gt_sql_guard_connection(sqlite3 *db, gt_sql_guard *g)
{
    int on = 0;
    sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 0);
    if (sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, &on) != SQLITE_OK || !on)
        return SQLITE_ERROR;
    return sqlite3_set_authorizer(db, authorize, g);
}

void gt_sql_guard_clear(gt_sql_guard *g)
{
    if (g->why.oom)
        gt_strbuf_release(&g->why); /* the flag sticks otherwise */
    else
        gt_strbuf_reset(&g->why);
}

const char *gt_sql_guard_why(const gt_sql_guard *g)
{
    if (g->why.oom)
        return "the statement would change the trace or the connection "
               "(out of memory for the details)";
    return gt_strbuf_str(&g->why);
}

void gt_sql_guard_release(gt_sql_guard *g)
{
    if (g)
        gt_strbuf_release(&g->why);
}
