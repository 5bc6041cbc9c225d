/*
 * Several traces at once: the traces of a distributed run's ranks.
 *
 * Naming (the contract with python/gradtrace/_dist.py): under a
 * launcher that sets RANK, rank N's trace for the path `run.db` is
 * `run.rankN.db` (`.rankN` before the file name's extension), or `{rank}`
 * in the path replaced by N.
 *
 * The multi-trace commands (info, diagnose, sql) take trace files and directories;
 * a directory stands for the gradtrace traces directly in it. Traces are
 * ordered by run.rank (traces without a rank last, by name).
 */
#ifndef GT_INSPECTOR_MULTI_H
#define GT_INSPECTOR_MULTI_H

#include <stddef.h>
#include <stdint.h>

#include <gradtrace/error.h>

#include "strbuf.h"
#include <gradtrace/trace.h>

/* The path rank N writes for `path`: `{rank}` replaced, else `.rankN`
 * inserted before the file name's extension. Returns a malloc'd string,
 * NULL when out of memory. */
char *gt_rank_path(const char *path, int64_t rank);

/* The path this process writes for `path`: gt_rank_path() with the rank in
 * the environment's RANK (digits only), else a copy of path. NULL when out
 * of memory. */
char *gt_env_rank_path(const char *path);

/* One trace of a set: its path and the rank its run row names. */
typedef struct gt_rank_trace {
    char *path;
    int64_t rank; /* run.rank; -1 if none */
    int has_rank;
} gt_rank_trace;

/* A set of traces, and the handle its calls keep their last error on. */
typedef struct gt_rank_set {
    size_t n;
    gt_rank_trace *v; /* ordered by rank, then path */
    gt_strbuf err;    /* gt_rank_set_errmsg: however long the paths it names */
} gt_rank_set;

/* Initialise *s with `paths` (files and directories) expanded, reading each
 * trace's rank. A directory contributes its regular files whose first 16
 * bytes are the SQLite header (non-recursive). Returns 0, or a negative
 * GT_E* code with s empty and a one-line message on it, without program
 * name ("cannot read directory runs: ...", "no traces in directory runs",
 * "cannot open ...": gt_rank_set_errmsg). Release s after either. */
GT_WARN_UNUSED int gt_rank_set_load(gt_rank_set *s, int npaths, char **paths);

/* The message of the last failed call on s, "" if none ("out of memory"
 * when it did not fit in memory). Owned by s, valid until its next call or
 * gt_rank_set_release. */
const char *gt_rank_set_errmsg(const gt_rank_set *s);

/* Free a set's contents, its message too; the set itself may be on the
 * stack. */
void gt_rank_set_release(gt_rank_set *s);

/* "0-3", "0, 2", "0-1, 5": the ranks in ranks[0..n) (ascending) as the
 * shortest text of ranges, appended to out (a gt_strbuf, strbuf.h: however
 * many ranks). Returns GT_OK, or GT_ENOMEM (out's sticky flag set). */
int gt_format_ranks_buf(const int64_t *ranks, size_t n, gt_strbuf *out)
    __attribute__((warn_unused_result));

/* The same into buf[len] (always terminated; cut at len - 1 bytes). */
void gt_format_ranks(const int64_t *ranks, size_t n, char *buf, size_t len);

#include <sqlite3.h>
#include <stdio.h>

/* A connection over every trace of `s` (at most gt_multi_max_traces()):
 * the first trace is `main`, the others are attached as t1, t2, ...
 * (read-only, like main). TEMP views named after each table and view of
 * this gradtrace's schema (schema/views.sql definitions, not the files'
 * copies) union the traces, each row with a leading `rank` column: the
 * trace's run.rank, or its position in `s` when it has none; columns a
 * trace's older schema lacks read as NULL. TEMP table `traces` (rank,
 * schema, path) lists them. Returns 0 and the connection in *out, or a
 * negative GT_E* code with the message on s (gt_rank_set_errmsg): GT_EINVAL
 * for more traces than SQLite can attach. Prints nothing. */
GT_WARN_UNUSED int gt_multi_connect(gt_rank_set *s, sqlite3 **out /* OUT */);

/* The summary `gradtrace info A B...` prints: an in-memory database, into
 * *out, whose table `ranks` holds one row per trace of s, in s's order
 * (rank, local_rank, world_size, backend, host, pid, status, ops,
 * backward_calls, errors, first_error, bytes, launcher_run_id, trace).
 * Returns 0, or a negative GT_E* code with the whole line after
 * "gradtrace: " on s (gt_rank_set_errmsg): a trace that cannot be opened
 * or read (report_multi.c). */
GT_WARN_UNUSED int gt_multi_info_db(gt_rank_set *s, sqlite3 **out /* OUT */);

/* How many traces gt_multi_connect can join (SQLite's attach limit + 1). */
int gt_multi_max_traces(void);

/* 1 if `npaths` trace arguments ask for the multi-trace form of a command
 * (more than one, or a directory), else 0. */
int gt_multi_wanted(int npaths, char **paths);

/* sql's positional arguments TRACE... [QUERY]: how many are traces. The
 * last is a query unless it names an existing file or directory; "-" is
 * the query "read stdin". With one argument, it is the trace. */
int gt_sql_count_traces(int npos, char **pos);

/* For `gradtrace info` on one trace: "rank       R of N (local L), backend B,
 * launcher run id J\n" when the run row names a rank (parts it lacks left
 * out), nothing otherwise. */
void gt_print_rank_line(FILE *out, gt_trace *t);

#endif
