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

#include <gradtrace/error.h>

#include "strbuf.h"

typedef struct gt_trace gt_trace;

/* Open `path` for reading. Returns GT_OK, or a negative GT_E* code.
 * A handle (and the connection under it, gt_trace_db) is used by one thread
 * at a time: it holds no lock of its own, nor SQLite's connection mutex.
 * Either way *out is a handle to pass to gt_trace_close (SQLite's
 * sqlite3_open): on failure one that holds only the one-line message,
 * gt_trace_errmsg (e.g. "cannot open run.db: not a gradtrace trace"), and
 * serves nothing else; NULL when even that could not be allocated
 * (gt_trace_errmsg(NULL) is "out of memory"). */
GT_WARN_UNUSED int gt_trace_open(const char *path, gt_trace **out /* OUT */);

/* Make this gradtrace's views (schema/views.sql) the ones the connection
 * sees, as TEMP views that shadow the copies stored in the file: a crafted
 * file cannot redefine them, and older traces get the current definitions.
 * Commands that query views call it once after opening; diagnose and graph,
 * which do not, skip its cost. Returns GT_OK or a GT_E* code with the message
 * on t. */
GT_WARN_UNUSED int gt_trace_use_views(gt_trace *t);

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
 * table) were found, 0 if none, and describes them in *what (emptied
 * first, then the whole text however long: it may quote SQLite's message
 * about the file), e.g. "saved tensors pointing at no tensor: 3; cannot
 * read edges: no such table: edges". GT_ENOMEM (*what released, the message
 * on the handle) when a check could not run for want of memory: that is no
 * damage. The caller releases *what. */
int gt_trace_check_links(gt_trace *t, gt_strbuf *what /* OUT */) GT_WARN_UNUSED;

/* ---- the reading layer ---------------------------------------------------
 *
 * What the readers (diagnose, history, the JSON output, graph) ask of a
 * trace, written once: statements prepared once per trace and kept on the
 * handle, and typed calls for the questions every reader asks. A typed
 * call returning int returns 1 (found), 0 (no such row: *out zeroed) or a
 * negative GT_E* code, with the message kept on the handle
 * (gt_trace_errmsg); out-parameters are written on 1 and 0 only. */

/* The innermost user frame of the stack row aliased `s` in SQL (its own
 * frame when none is marked): the one join of every reader that shows a
 * line. */
#define GT_USER_FRAME(s) "coalesce(" s ".user_frame, " s ".frame)"

/* Every statement the inspector runs is prepared here (tests/check-prepare
 * fails on an sqlite3_prepare_* anywhere else): so a failed prepare is
 * reported one way, and the failure-injection tests reach every one.
 *
 *   gt_trace_stmt       a query with fixed text: prepared once per trace
 *   gt_trace_int/_text  its first column, for one-value lookups
 *   gt_trace_prepare    SQL built at run time, or a query stepped while the
 *                       same text's cached statement may be in use
 *   gt_db_prepare       a connection that is no trace's (a rank set's, a
 *                       scratch one for JSON); _first for SQL a user typed */

/* The prepared statement for `sql`, which must be a string literal or an
 * array that lives as long as the trace (its address is the key), kept on
 * the trace until it closes and returned reset with no bindings. The
 * caller resets it when done (sqlite3_reset), so that no cached statement
 * is left on a row; a caller that steps it must call nothing that asks for
 * the same `sql` before it is done (a recursive reader uses
 * gt_trace_prepare). NULL on error, with the message on the handle. */
sqlite3_stmt *gt_trace_stmt(gt_trace *t, const char *sql);

/* A statement of the caller's own for `sql` (any text, not cached): GT_OK
 * with *out to sqlite3_finalize, or a negative GT_E* code (GT_ENOMEM,
 * GT_ECORRUPT "cannot read trace: ...") with the message on the handle and
 * *out NULL. */
int gt_trace_prepare(gt_trace *t, const char *sql,
                     sqlite3_stmt **out /* OUT */) GT_WARN_UNUSED;

/* sqlite3_prepare_v2 on a connection that is not a trace's (the message
 * stays on db, sqlite3_errmsg): SQLITE_OK with *out to finalize, else
 * SQLite's result code with *out NULL. */
int gt_db_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **out /* OUT */);

/* The same for the first statement of a script (SQL a user typed:
 * `gradtrace sql`, Trace.sql(), under sql_guard.h's authorizer), the text
 * after it at *tail (may be NULL); *out is NULL for a script of only
 * blanks and comments. */
int gt_db_prepare_first(sqlite3 *db, const char *sql, sqlite3_stmt **out /* OUT */,
                        const char **tail /* OUT */);

/* The first column of the first row cached `sql` (gt_trace_stmt) gives
 * with ?1 = a and ?2 = b (a parameter sql lacks is not bound): 1 with
 * *out; 0 when there is no row or the value is NULL (*out 0); a negative
 * GT_E* code with the message on the handle (*out 0). */
int gt_trace_int(gt_trace *t, const char *sql, int64_t a, int64_t b,
                 int64_t *out /* OUT */) GT_WARN_UNUSED;

/* The same as text, into out (emptied first; left empty unless 1). */
int gt_trace_text(gt_trace *t, const char *sql, int64_t a, int64_t b,
                  gt_strbuf *out /* OUT */) GT_WARN_UNUSED;

/* Column i of the row st is on as text (sqlite3_column_text), NULL for SQL
 * NULL -- or when converting a number to text ran out of memory: SQLite
 * then makes the value NULL (sqlite3_column_type says SQLITE_NULL too) and
 * sets the connection's error code, which is what sets *oom here. Every
 * text read of the inspector goes through it, so that a failed conversion
 * is never read as "no value". *oom is left alone otherwise. */
const char *gt_column_text(sqlite3_stmt *st, int i, int *oom);

/* A malloc'd copy of column i's text (gt_column_text), NULL for SQL NULL;
 * *oom set when out of memory. */
char *gt_column_dup(sqlite3_stmt *st, int i, int *oom);

/* The error model of the inspector library (SQLite's sqlite3_errmsg): a
 * call on a trace, or on anything built on it (gt_diagnose, gt_graph_build,
 * the replayer), that returns a negative GT_E* code keeps its one-line
 * message on the trace, without program name or newline ("cannot read
 * trace: ..."): the commands add "gradtrace: " when they print it. "" when
 * the last top-level call (gt_trace_use_views, gt_diagnose,
 * gt_graph_build) succeeded. Owned by t, valid until its next call.
 * A NULL t (gt_trace_open out of memory): "out of memory". */
const char *gt_trace_errmsg(const gt_trace *t);

/* The GT_E* code that came with gt_trace_errmsg (0 if none; GT_ENOMEM for
 * a NULL t). */
int gt_trace_errcode(const gt_trace *t);

/* A code location: the innermost user frame of a stack. Strings are owned
 * (gt_loc_release), NULL when the trace has none. */
typedef struct gt_loc {
    int64_t frame; /* frames.id, 0 if none */
    int64_t line;
    char *file, *function, *code;
    char *json; /* {"file", "line", "function", "code"} (SQLite's
                 * json_object, the trace's own value types) */
} gt_loc;

/* The location of stack `stack` (0 reads as none). */
int gt_trace_loc(gt_trace *t, int64_t stack, gt_loc *out /* OUT */) GT_WARN_UNUSED;

/* The same at the stack's innermost user frame only (stacks.user_frame, as
 * views.sql's event_location reads it): 0 when none is marked. The graph
 * labels a node with this one: a line of the user's, or none. */
int gt_trace_user_loc(gt_trace *t, int64_t stack, gt_loc *out /* OUT */) GT_WARN_UNUSED;

/* The lines of source file `file` as it is now, when it still holds every
 * line the trace recorded of it (each frame's line and code, indentation
 * and trailing blanks aside): 1 with *n lines at *lines (lines[i] is line
 * i + 1, its line ending cut; owned by the trace, read once per file). 0
 * when it cannot be read, or when it changed since the run: nothing may be
 * read from it then (a line number found in it would not be the run's);
 * gt_trace_sources_changed lists it. Every reader of the user's source
 * files goes through this. A negative GT_E* code on failure. */
int gt_trace_source(gt_trace *t, const char *file, const char *const **lines /* OUT */,
                    size_t *n /* OUT */) GT_WARN_UNUSED;

/* The files gt_trace_source found changed since the run, in the order it
 * found them: *files (owned by the trace), their count returned. */
size_t gt_trace_sources_changed(gt_trace *t, const char *const **files /* OUT */);

/* In the source file of location `l` (gt_trace_source: as long as it holds
 * what ran), inside the function that holds its line (the nearest `def`
 * above it indented less, to the end of its body), the one line that holds
 * `call` (a text such as "save_for_backward(") outside a comment: its
 * number, and its text (indentation and comment cut) malloc'd into *code.
 * 0 when the file cannot be read or changed, or no line or more than one
 * holds `call`; GT_ENOMEM when out of memory. */
int64_t gt_loc_find_in_function(gt_trace *t, const gt_loc *l, const char *call,
                                char **code /* OUT */);

/* Free what a location owns and zero it; accepts a zeroed one. */
void gt_loc_release(gt_loc *l);

/* The parent of stack `stack` (0 if it has none). */
int gt_trace_stack_parent(gt_trace *t, int64_t stack,
                          int64_t *out /* OUT */) GT_WARN_UNUSED;

/* A row of the trace's tensors table, as every reader reads it. The texts
 * live in buf, kept from one gt_trace_tensor to the next; start from
 * GT_TENSOR_ROW_INIT and free with gt_tensor_row_release. */
typedef struct gt_tensor_row {
    int64_t storage, storage_offset, version_counter;
    int64_t alias_of;   /* the tensor it views, 0 if none */
    int64_t created_by; /* ops.seq of the op that output it, 0 if unknown */
    int requires_grad, is_leaf;
    const char *dtype;   /* "float32"; "" when the trace names none */
    const char *shape;   /* the sizes as written, a JSON array ("[16,8]");
                          * NULL when unknown */
    const char *strides; /* the same for the strides */
    gt_strbuf buf;       /* holds the texts */
} gt_tensor_row;

#define GT_TENSOR_ROW_INIT                                                               \
    {                                                                                    \
        0, 0, 0, 0, 0, 0, 0, "", NULL, NULL, GT_STRBUF_INIT                              \
    }

/* Read tensor `id` into *out: 1; 0 when there is no such row (*out as
 * GT_TENSOR_ROW_INIT leaves it, its memory kept); a negative GT_E* code with
 * the message on the handle (the same). */
int gt_trace_tensor(gt_trace *t, int64_t id, gt_tensor_row *out /* OUT */) GT_WARN_UNUSED;

/* Free what a tensor row holds and reset it to GT_TENSOR_ROW_INIT. Can't fail. */
void gt_tensor_row_release(gt_tensor_row *x);

/* The variable names of a tensor: its own, its bases' (nearest first, at
 * most 16 views deep), then those of tensors sharing its version counter
 * that are no view of it or of its bases (a view's name is not its base's),
 * each once, in binding order within a rank: *n strings at *out, owned by
 * the trace (read once per tensor, as the trace was then). 1 when there is
 * at least one. */
int gt_trace_names(gt_trace *t, int64_t tensor, const char *const **out /* OUT */,
                   size_t *n /* OUT */) GT_WARN_UNUSED;

/* The names of the nearest of `tensor` and its bases (at most max_depth
 * views up) that has any: its own, else its base's, ... (a drawing's
 * label); the first *n of gt_trace_names's, same order and owner. 1 when
 * there is at least one. */
int gt_trace_names_nearest(gt_trace *t, int64_t tensor, int max_depth,
                           const char *const **out /* OUT */,
                           size_t *n /* OUT */) GT_WARN_UNUSED;

/* The same names as one JSON array (SQLite's json_group_array), malloc'd
 * into *out ("[]" for none). Returns 0 or a negative GT_E* code. */
int gt_trace_names_json(gt_trace *t, int64_t tensor, char **out /* OUT */) GT_WARN_UNUSED;

#endif
