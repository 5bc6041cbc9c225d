/*
 * The summary of one trace (`gradtrace info`): what ran, how it ended, how
 * many rows each table holds, the backward calls and the errors, as text
 * for a person or as one JSON object (built by SQLite's JSON functions).
 */
#ifndef GT_INSPECTOR_INFO_H
#define GT_INSPECTOR_INFO_H

#include <stdio.h>

#include <gradtrace/trace.h>

/* The text shows every call of a run with at most GT_INFO_SHOW_ALL_UP_TO,
 * else the first and last GT_INFO_SHOWN_AT_ENDS and every call that did
 * not return ok. */
#define GT_INFO_SHOW_ALL_UP_TO 10
#define GT_INFO_SHOWN_AT_ENDS  3

/* Write t's summary to out: one JSON object and a newline with json set,
 * else the text (every backward call with all set, else a run of many
 * summarised by its ends and the calls that did not return ok). Returns
 * SQLITE_OK, SQLITE_CORRUPT when the trace has no run row, SQLITE_NOMEM,
 * or another SQLite result code (the message: sqlite3_errmsg of
 * gt_trace_db(t)). out may hold a part on failure. */
int gt_info_print(gt_trace *t, int json, int all, FILE *out);

#endif
