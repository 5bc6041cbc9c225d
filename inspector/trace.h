/*
 * Opening a trace for reading: the one door through which every inspector
 * command reaches a trace file.
 *
 * gt_trace_open checks, in order: the file exists and is readable, it is not
 * empty, it is an SQLite database, it holds a gradtrace schema (table run and
 * PRAGMA user_version > 0), and that schema is not newer than this build.
 * A trace left with a write-ahead log by a killed recording is checkpointed
 * first, so every committed batch is visible. The connection is then opened
 * read-only with query_only set.
 *
 * Long traces read fast: the readers' lookups rely on the indexes the
 * recorder creates when it closes a trace (schema/indexes.sql). A trace of
 * 256 KiB or more that lacks them is
 *   - finished in place if its recording was killed (run.status 'running',
 *     no recorder holds its flock, the file is writable): the indexes are
 *     created once, as closing would have, and gt_trace_note says so;
 *   - otherwise (a live recording, a read-only file, a trace that was not
 *     killed) read from a private indexed copy: a temporary database SQLite
 *     deletes on close, filled from one snapshot; the file is not changed.
 */
#ifndef GT_INSPECTOR_TRACE_H
#define GT_INSPECTOR_TRACE_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gt_trace gt_trace;

/* Open `path` for reading. On failure returns a negative GT_E* code, writes
 * a one-line message without a trailing newline to err (e.g. "cannot open
 * run.db: not a gradtrace trace"), and leaves *out untouched. */
int gt_trace_open(const char *path, gt_trace **out /* OUT */, char *err, size_t errlen);

/* Make this gradtrace's views (schema/views.sql) the ones the connection
 * sees, as TEMP views that shadow the copies stored in the file: a crafted
 * file cannot redefine them, and older traces get the current definitions.
 * Commands that query views call it once after opening; diagnose and graph,
 * which do not, skip its cost. Returns GT_OK or a GT_E* code with a message
 * in err. */
int gt_trace_use_views(gt_trace *t, char *err, size_t errlen);

/* Close and free; accepts NULL. */
void gt_trace_close(gt_trace *t);

/* The read-only connection, owned by the trace. */
sqlite3 *gt_trace_db(gt_trace *t);

/* One line (no program name, no newline) saying what opening did to the
 * file beyond reading it (a killed trace finished in place), for the
 * command to print on stderr; NULL if nothing. Owned by the trace. */
const char *gt_trace_note(gt_trace *t);

/* The path the trace was opened with. */
const char *gt_trace_path(gt_trace *t);

/* Schema version of the file (PRAGMA user_version). */
int gt_trace_schema_version(gt_trace *t);

/* 1 if the trace may lack the end of the run: the recording did not close
 * it (run.status = 'running': the process was killed or is still running),
 * or it stopped recording early (gt_trace_stopped_seq), else 0. */
int gt_trace_partial(gt_trace *t);

/* The last event seq recorded when recording stopped early (the size cap,
 * schema 2's run.stopped_seq), and why ("size cap: ... bytes > max_bytes
 * ..."); 0 and NULL when it did not. The string is owned by the trace. */
int64_t gt_trace_stopped_seq(gt_trace *t);
const char *gt_trace_stopped_reason(gt_trace *t);

/* Check that the trace's rows fit together: saved tensors, edges, bumps,
 * roots, node executions and stacks point at rows that exist (a recording,
 * even a killed one, never leaves them otherwise; a damaged or hand-edited
 * file may). Returns how many kinds of dangling reference (or unreadable
 * table) were found, 0 if none, and describes them in what[n], e.g. "saved
 * tensors pointing at no tensor: 3; cannot read edges: no such table: edges". */
int gt_trace_check_links(gt_trace *t, char *what, size_t n);

#endif
