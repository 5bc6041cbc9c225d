/*
 * Printing the rows of a prepared statement: an aligned table for people, or
 * tab-separated, CSV or JSON for scripts.
 *
 * The statement is stepped to completion (or to its first error) and every
 * row is printed; nothing about the statement is kept. JSON is produced by
 * SQLite's own json_quote() through a helper statement on the same
 * connection, so it is always valid whatever the text holds: one array of
 * objects (column name -> value) per statement, on one line.
 */
#ifndef GT_INSPECTOR_TABLE_OUT_H
#define GT_INSPECTOR_TABLE_OUT_H

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>

enum gt_out_mode {
    GT_OUT_TABLE = 0, /* aligned columns, numbers right-aligned, NULL blank */
    GT_OUT_TSV = 1,   /* tab-separated; tabs and newlines in values as \t \n */
    GT_OUT_CSV = 2,   /* RFC 4180: quoted when needed, NULL as empty */
    GT_OUT_JSON = 3,  /* [{"col": value, ...}, ...]; NULL as null */
};

typedef struct gt_table_opts {
    int mode;      /* enum gt_out_mode */
    int header;    /* 1: print column names first (not used by JSON) */
    int max_width; /* table mode: cut longer cells to this many characters
                      (ending in "..."); 0 = never cut */
} gt_table_opts;

/* Step `st` until SQLITE_DONE and print its rows to `out` as `opts` says.
 * A statement without result columns prints nothing. Returns SQLITE_OK, or
 * the SQLite error code of the failing step (the message is then
 * sqlite3_errmsg of the statement's connection; rows already stepped may
 * have been printed) or SQLITE_NOMEM. *rows, if not NULL, receives the
 * number of rows printed. The statement is reset, not finalized. */
int gt_table_print(sqlite3_stmt *st, const gt_table_opts *opts, FILE *out,
                   int64_t *rows /* OUT, may be NULL */);

#endif
