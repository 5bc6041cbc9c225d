/*
 * The summary `gradtrace info TRACE [--json] [--all]` prints (info.h): what
 * a user looks at first.
 *
 * What ran (engine, versions, command line), how it ended (status, exit
 * code, duration), how many rows each table holds, the backward calls with
 * their status and user line, and every error with its type, message and
 * line. A run of many backward calls (a training loop records one a step)
 * is summarised: the calls counted by outcome, the first and last few
 * shown, and every call that did not return ok; --all shows every call.
 * The JSON holds every call. The JSON is built by one SQL query with
 * SQLite's json functions, the text by a few small queries.
 *
 * Every query is linear in the trace (up to a sort): the per-call counts
 * come from one GROUP BY pass over node_execs, backward_roots and errors,
 * not from a subquery per call (backward_log's definition), which made
 * info quadratic in backward calls (50,000 calls: 542 s).
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include <gradtrace/info.h>
#include <gradtrace/multi.h>
#include <gradtrace/table_out.h>
#include <gradtrace/termtext.h>
#include <gradtrace/trace.h>

/* The tables counted, in the order they are shown. Constant names only:
 * they are pasted into SQL text. */
static const char *const counted[] = {
    "ops",           "op_args",        "tensors",        "storages",
    "version_bumps", "nodes",          "edges",          "node_outputs",
    "saved_tensors", "backward_calls", "backward_roots", "backward_inputs",
    "node_execs",    "errors",         "names",          "threads",
    "stacks",        "frames",         "strings",
};
#define N_COUNTED (sizeof counted / sizeof *counted)

/* The highest seq of any event table: the number of events recorded. */
#define EVENTS_SQL                                                                       \
    "SELECT max(m) FROM (SELECT max(seq) AS m FROM ops"                                  \
    " UNION ALL SELECT max(seq) FROM tensors"                                            \
    " UNION ALL SELECT max(seq) FROM version_bumps"                                      \
    " UNION ALL SELECT max(seq) FROM nodes"                                              \
    " UNION ALL SELECT max(seq) FROM saved_tensors"                                      \
    " UNION ALL SELECT max(end_seq) FROM backward_calls"                                 \
    " UNION ALL SELECT max(seq) FROM backward_calls"                                     \
    " UNION ALL SELECT max(seq) FROM node_execs"                                         \
    " UNION ALL SELECT max(seq) FROM errors)"

/* The run row, with argv as one line and the duration in seconds. */
#define RUN_SQL                                                                          \
    "SELECT gradtrace_version, schema_version, engine, engine_version,"                  \
    " python_version,"                                                                   \
    " CASE WHEN json_valid(argv) AND json_type(argv) = 'array'"                          \
    "  THEN (SELECT group_concat(value, ' ') FROM json_each(run.argv))"                  \
    "  ELSE argv END,"                                                                   \
    " cwd, pid, host, status, exit_code, signal,"                                        \
    " CASE WHEN end_ns IS NOT NULL THEN (end_ns - start_ns) / 1e9 END,"                  \
    " datetime(start_ns / 1000000000, 'unixepoch')"                                      \
    " FROM run WHERE id = 1"

/* Every backward call with its counts and first error, in one pass: the
 * rows of view backward_log, built without its per-call subqueries. */
#define BACKWARD_ROWS                                                                    \
    "WITH nx AS (SELECT backward, count(*) AS n FROM node_execs"                         \
    "  GROUP BY backward),"                                                              \
    " rt AS (SELECT backward, count(*) AS n FROM backward_roots"                         \
    "  GROUP BY backward),"                                                              \
    " fe AS (SELECT backward, min(seq) AS seq FROM errors"                               \
    "  WHERE backward IS NOT NULL GROUP BY backward)"                                    \
    " SELECT b.id AS id, sa.text AS api, b.status AS status, l.file AS file,"            \
    " l.line AS line, l.code AS code, se.text AS error_type,"                            \
    " e.message AS error, coalesce(rt.n, 0) AS roots,"                                   \
    " coalesce(nx.n, 0) AS nodes_run, b.retain_graph AS retain_graph,"                   \
    " b.create_graph AS create_graph"                                                    \
    " FROM backward_calls b JOIN strings sa ON sa.id = b.api"                            \
    " LEFT JOIN rt ON rt.backward = b.id"                                                \
    " LEFT JOIN nx ON nx.backward = b.id"                                                \
    " LEFT JOIN fe ON fe.backward = b.id"                                                \
    " LEFT JOIN errors e ON e.seq = fe.seq"                                              \
    " LEFT JOIN strings se ON se.id = e.type"                                            \
    " LEFT JOIN locations l ON l.stack = b.stack"

#define BACKWARD_SQL                                                                     \
    "SELECT id, api, status, file, line, code, error_type, error, roots,"                \
    " nodes_run FROM (" BACKWARD_ROWS ") WHERE NOT " BY_COMPILER("api") " ORDER BY id"

/* Whether the api text `col` names a call torch.compile made while compiling. */
#define BY_COMPILER(col) "(" col " LIKE '" GT_API_BY_COMPILER "%')"

/* How many backward calls the user made, how many of each outcome, and how
 * many torch.compile made while compiling (not listed). */
#define BACKWARD_COUNT_SQL                                                               \
    "SELECT total(NOT c), total(NOT c AND status = '" GT_BACKWARD_STATUS_OK "'),"        \
    " total(NOT c AND status = '" GT_BACKWARD_STATUS_ERROR "'),"                         \
    " total(NOT c AND status NOT IN ('" GT_BACKWARD_STATUS_OK                            \
    "', '" GT_BACKWARD_STATUS_ERROR "')), total(c)"                                      \
    " FROM (SELECT b.status, " BY_COMPILER("s.text") " AS c FROM backward_calls b"       \
                                                     "  JOIN strings s ON s.id = b.api)"

/* The text shows every call of a run with at most this many, else the
 * first and last SHOWN_AT_ENDS and every call that did not return ok. */
#define SHOW_ALL_UP_TO GT_INFO_SHOW_ALL_UP_TO
#define SHOWN_AT_ENDS  GT_INFO_SHOWN_AT_ENDS

#define ERRORS_SQL                                                                       \
    "SELECT type, message, file, line, code, backward FROM error_log"                    \
    " ORDER BY seq"

/* The whole summary as one JSON object (?1 = path, ?2 = partial, ?3 and ?4
 * = where and why recording stopped early, 0 and NULL if it did not, ?5 =
 * what does not fit together, NULL if all does). */
static const char json_head[] =
    "SELECT json_object("
    " 'trace', ?1,"
    " 'partial', json(CASE WHEN ?2 THEN 'true' ELSE 'false' END),"
    " 'stopped', CASE WHEN ?3 > 0 THEN json_object('seq', ?3, 'reason', ?4) END,"
    " 'inconsistent', ?5,"
    " 'run', (SELECT json_object("
    "   'gradtrace_version', gradtrace_version,"
    "   'schema_version', schema_version,"
    "   'engine', engine, 'engine_version', engine_version,"
    "   'python_version', python_version,"
    "   'argv', CASE WHEN json_valid(argv) THEN json(argv) ELSE argv END,"
    "   'cwd', cwd, 'pid', pid, 'rank', rank, 'host', host,"
    "   'status', status, 'exit_code', exit_code, 'signal', signal,"
    "   'start_ns', start_ns, 'end_ns', end_ns,"
    "   'duration_s', CASE WHEN end_ns IS NOT NULL"
    "                 THEN (end_ns - start_ns) / 1e9 END,"
    "   'options', CASE WHEN json_valid(options) THEN json(options) ELSE options END)"
    "  FROM run WHERE id = 1),"
    " 'events', (" EVENTS_SQL "),"
    " 'backward_counts', (SELECT json_object('total', count(*),"
    "   'ok', coalesce(sum(status = '" GT_BACKWARD_STATUS_OK "'), 0),"
    "   'error', coalesce(sum(status = '" GT_BACKWARD_STATUS_ERROR "'), 0),"
    "   'running', coalesce(sum(status NOT IN ('" GT_BACKWARD_STATUS_OK
    "', '" GT_BACKWARD_STATUS_ERROR "')), 0),"
    "   'by_compiler', (SELECT count(*) FROM backward_calls b JOIN strings s"
    "    ON s.id = b.api WHERE " BY_COMPILER(
        "s.text") ")) FROM backward_calls),"
                  " 'backward_calls', (SELECT json_group_array(json(o)) FROM ("
                  "   SELECT json_object('id', id, 'api', api, 'status', status,"
                  "    'retain_graph', retain_graph, 'create_graph', create_graph,"
                  "    'roots', roots, 'nodes_run', nodes_run,"
                  "    'file', file, 'line', line, 'code', code,"
                  "    'error_type', error_type, 'error', error,"
                  "    'by_compiler', json(CASE WHEN " BY_COMPILER(
                      "api") " THEN 'true'"
                             "     ELSE 'false' END)) AS o"
                             "   FROM (" BACKWARD_ROWS ") ORDER BY id)),"
                             " 'errors', (SELECT json_group_array(json(o)) FROM ("
                             "   SELECT json_object('seq', seq, 'type', type, 'message', "
                             "message,"
                             "    'backward', backward, 'file', file, 'line', line,"
                             "    'function', function, 'code', code) AS o"
                             "   FROM error_log ORDER BY seq)),"
                             " 'counts', json_object(";

/* Build the JSON query: json_head, then 'name', (SELECT count(*) FROM name)
 * for every counted table. Returns a malloc'd string or NULL. */
static char *json_sql(void)
{
    size_t cap = sizeof json_head + 16;
    for (size_t i = 0; i < N_COUNTED; i++)
        cap += 2 * strlen(counted[i]) + 40;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    size_t n = (size_t)snprintf(s, cap, "%s", json_head);
    for (size_t i = 0; i < N_COUNTED; i++)
        n += (size_t)snprintf(s + n, cap - n, "%s'%s', (SELECT count(*) FROM %s)",
                              i ? ", " : "", counted[i], counted[i]);
    snprintf(s + n, cap - n, "))");
    return s;
}

/* The SQLite result code of trace t's last failed gt_trace_stmt or
 * gt_trace_prepare (SQLITE_NOMEM when out of memory): gt_info_print's
 * error model. */
static int stmt_rc(gt_trace *t)
{
    if (gt_trace_errcode(t) == GT_ENOMEM)
        return SQLITE_NOMEM;
    int rc = sqlite3_errcode(gt_trace_db(t));
    return rc != SQLITE_OK ? rc : SQLITE_ERROR;
}

/* Column i as text, "" for NULL; out of memory sets *oom (and gives ""). */
static const char *col(sqlite3_stmt *st, int i, int *oom)
{
    const char *s = gt_column_text(st, i, oom);
    return s ? s : "";
}

static int print_json(gt_trace *t, FILE *out)
{
    sqlite3_stmt *st = NULL;
    gt_strbuf broken = GT_STRBUF_INIT;
    char *sql = json_sql();
    int rc = SQLITE_NOMEM;
    if (!sql)
        goto out;
    if (gt_trace_prepare(t, sql, &st) != 0) {
        rc = stmt_rc(t);
        goto out;
    }
    sqlite3_bind_text(st, 1, gt_trace_path(t), -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, gt_trace_partial(t));
    sqlite3_bind_int64(st, 3, gt_trace_stopped_seq(t));
    if (gt_trace_stopped_reason(t))
        sqlite3_bind_text(st, 4, gt_trace_stopped_reason(t), -1, SQLITE_STATIC);
    int links = gt_trace_check_links(t, &broken);
    if (links < 0) {
        rc = SQLITE_NOMEM;
        goto out;
    }
    if (links > 0)
        sqlite3_bind_text(st, 5, gt_strbuf_str(&broken), -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        int oom = 0;
        const char *doc = col(st, 0, &oom);
        rc = oom ? SQLITE_NOMEM : SQLITE_OK;
        if (!oom)
            fprintf(out, "%s\n", doc);
    }
out:
    sqlite3_finalize(st);
    gt_strbuf_release(&broken);
    free(sql);
    return rc;
}

/* Column i as text from the trace, control characters shown as escapes
 * (termtext.h), a NUL included (as \x00): the text output never passes
 * trace text to the terminal as it is. */
static void tput(FILE *out, sqlite3_stmt *st, int i, int *oom)
{
    const char *s = col(st, i, oom); /* before _bytes: the length of the text */
    gt_term_putn(out, s, (size_t)sqlite3_column_bytes(st, i));
}

/* A flight recording's window (--keep-last N, schema v4): which backward
 * calls it kept. Traces of older schemas, or whole recordings, print
 * nothing. */
static void print_window(FILE *out, gt_trace *t)
{
    sqlite3_stmt *st =
        gt_trace_stmt(t, "SELECT keep_last, kept_from_backward, kept_from_seq"
                         " FROM run WHERE id = 1 AND keep_last IS NOT NULL");
    if (st && sqlite3_step(st) == SQLITE_ROW) {
        fprintf(out,
                "window     the last %" PRId64 " backward calls were kept (--keep-last)",
                (int64_t)sqlite3_column_int64(st, 0));
        if (sqlite3_column_type(st, 1) != SQLITE_NULL)
            fprintf(out,
                    ": calls from #%" PRId64 " and events from %" PRId64
                    " whole;\n           earlier events only where the window"
                    " refers to them",
                    (int64_t)sqlite3_column_int64(st, 1),
                    (int64_t)sqlite3_column_int64(st, 2));
        fputc('\n', out);
    }
    sqlite3_reset(st);
}

/* Print `msg` with every line after the first indented by `indent`; each
 * line's text sanitized. */
static void put_indented(FILE *out, const char *msg, const char *indent)
{
    for (;;) {
        const char *nl = strchr(msg, '\n');
        gt_term_putn(out, msg, nl ? (size_t)(nl - msg) : strlen(msg));
        if (!nl)
            break;
        fputc('\n', out);
        msg = nl + 1;
        if (!*msg)
            break;
        fputs(indent, out);
    }
}

/* The run: what ran, where, how it ended, what the trace lacks. Returns an
 * SQLite result code (SQLITE_CORRUPT: no run row); out of memory reading a
 * text sets *oom. */
static int print_run(gt_trace *t, FILE *out, int *oomp)
{
    sqlite3_stmt *st = NULL;
    gt_strbuf broken = GT_STRBUF_INIT;
    int rc, oom = 0;

    if (!(st = gt_trace_stmt(t, RUN_SQL))) {
        rc = stmt_rc(t);
        goto out;
    }
    if ((rc = sqlite3_step(st)) != SQLITE_ROW) {
        rc = rc == SQLITE_DONE ? SQLITE_CORRUPT : rc;
        goto out;
    }
    fputs("trace      ", out);
    gt_term_puts(out, gt_trace_path(t));
    fprintf(out, " (schema %d, written by gradtrace ", sqlite3_column_int(st, 1));
    tput(out, st, 0, &oom);
    fputs(")\nengine     ", out);
    if (sqlite3_column_type(st, 2) == SQLITE_NULL)
        fputs("unknown", out);
    else
        tput(out, st, 2, &oom);
    fputc(' ', out);
    tput(out, st, 3, &oom);
    if (sqlite3_column_type(st, 4) != SQLITE_NULL) {
        fputs(", python ", out);
        tput(out, st, 4, &oom);
    }
    fputc('\n', out);
    if (sqlite3_column_type(st, 5) != SQLITE_NULL) {
        fputs("command    ", out);
        tput(out, st, 5, &oom);
        fputc('\n', out);
    }
    if (sqlite3_column_type(st, 6) != SQLITE_NULL) {
        fputs("cwd        ", out);
        tput(out, st, 6, &oom);
        fputc('\n', out);
    }
    fputs("started    ", out);
    tput(out, st, 13, &oom);
    fputs(" UTC", out);
    if (sqlite3_column_type(st, 7) != SQLITE_NULL) {
        fputs(", pid ", out);
        tput(out, st, 7, &oom);
    }
    if (sqlite3_column_type(st, 8) != SQLITE_NULL) {
        fputs(" on ", out);
        tput(out, st, 8, &oom);
    }
    fputc('\n', out);
    gt_print_rank_line(out, t); /* distributed runs (multi.c) */
    fputs("status     ", out);
    tput(out, st, 9, &oom);
    if (sqlite3_column_type(st, 10) != SQLITE_NULL)
        fprintf(out, ", exit code %d", sqlite3_column_int(st, 10));
    if (sqlite3_column_int(st, 11))
        fprintf(out, ", signal %d", sqlite3_column_int(st, 11));
    if (sqlite3_column_type(st, 12) != SQLITE_NULL)
        fprintf(out, ", %.3f s", sqlite3_column_double(st, 12));
    fputc('\n', out);
    print_window(out, t);
    if (gt_trace_stopped_seq(t)) {
        fprintf(out, "           recording stopped early, after event %" PRId64 " (",
                gt_trace_stopped_seq(t));
        gt_term_puts(out, gt_trace_stopped_reason(t));
        fprintf(out, ");\n           what came after is not in the trace\n");
    } else if (gt_trace_partial(t)) {
        fprintf(out, "           partial trace: the recording did not finish (killed, or "
                     "still running);\n           it holds every batch committed until "
                     "then\n");
    }
    int links = gt_trace_check_links(t, &broken);
    if (links < 0) {
        rc = SQLITE_NOMEM;
        goto out;
    }
    if (links > 0) {
        fputs("           damaged: its rows do not fit together (", out);
        gt_term_puts(out, gt_strbuf_str(&broken));
        fputs(")\n", out);
    }

    rc = SQLITE_OK;
out:
    sqlite3_reset(st);
    gt_strbuf_release(&broken);
    *oomp |= oom;
    return rc;
}

/* The number of events and the rows of each table. */
static int print_counts(gt_trace *t, FILE *out)
{
    sqlite3_stmt *st = NULL;
    int rc;
    if (!(st = gt_trace_stmt(t, EVENTS_SQL))) {
        rc = stmt_rc(t);
        goto out;
    }
    int64_t events =
        (rc = sqlite3_step(st)) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    st = NULL;
    if (rc != SQLITE_ROW)
        goto out;
    fprintf(out, "events     %" PRId64 "\n", events);
    fprintf(out, "\nrows per table\n");
    for (size_t i = 0; i < N_COUNTED; i++) {
        char sql[96];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", counted[i]);
        if (gt_trace_prepare(t, sql, &st) != 0) {
            rc = stmt_rc(t);
            goto out;
        }
        if ((rc = sqlite3_step(st)) != SQLITE_ROW)
            goto out;
        fprintf(out, "  %-16s %10" PRId64 "\n", counted[i],
                (int64_t)sqlite3_column_int64(st, 0));
        sqlite3_finalize(st);
        st = NULL;
    }

    rc = SQLITE_OK;
out:
    sqlite3_finalize(st);
    return rc;
}

/* The backward calls: counted by outcome, then shown (all, or the ends and
 * every one that did not return ok). */
static int print_backward_calls(gt_trace *t, FILE *out, int all, int *oomp)
{
    sqlite3_stmt *st = NULL;
    int rc, oom = 0;
    if (!(st = gt_trace_stmt(t, BACKWARD_COUNT_SQL))) {
        rc = stmt_rc(t);
        goto out;
    }
    if ((rc = sqlite3_step(st)) != SQLITE_ROW)
        goto out;
    int64_t total = (int64_t)sqlite3_column_double(st, 0);
    int64_t n_ok = (int64_t)sqlite3_column_double(st, 1);
    int64_t n_err = (int64_t)sqlite3_column_double(st, 2);
    int64_t n_run = (int64_t)sqlite3_column_double(st, 3);
    int64_t n_compiler = (int64_t)sqlite3_column_double(st, 4);
    sqlite3_reset(st);
    if (total == 0) {
        fprintf(out, "\nbackward calls: none\n");
    } else {
        fprintf(out, "\nbackward calls: %" PRId64 " (", total);
        const char *sep = "";
        if (n_ok) {
            fprintf(out, "%" PRId64 " ok", n_ok);
            sep = ", ";
        }
        if (n_err) {
            fprintf(out, "%s%" PRId64 " error", sep, n_err);
            sep = ", ";
        }
        if (n_run)
            fprintf(out, "%s%" PRId64 " running", sep, n_run);
        fputs(")\n", out);
    }
    if (n_compiler)
        fprintf(out,
                "  (and %" PRId64 " torch.compile made while compiling the backward"
                " graph, not listed)\n",
                n_compiler);
    int every = all || total <= SHOW_ALL_UP_TO;
    if (!(st = gt_trace_stmt(t, BACKWARD_SQL))) {
        rc = stmt_rc(t);
        goto out;
    }
    int64_t i = 0, hidden = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        i++;
        int ok = !strcmp(col(st, 2, &oom), GT_BACKWARD_STATUS_OK);
        if (!every && ok && i > SHOWN_AT_ENDS && i <= total - SHOWN_AT_ENDS) {
            hidden++;
            continue;
        }
        if (hidden) {
            fprintf(out, "  ... %" PRId64 " more call%s, ok (--all shows every call)\n",
                    hidden, hidden == 1 ? "" : "s");
            hidden = 0;
        }
        fprintf(out, "  #%d ", sqlite3_column_int(st, 0));
        tput(out, st, 1, &oom);
        fputs("  ", out);
        tput(out, st, 2, &oom);
        if (sqlite3_column_type(st, 3) != SQLITE_NULL) {
            fputs("  ", out);
            tput(out, st, 3, &oom);
            fprintf(out, ":%d", sqlite3_column_int(st, 4));
        }
        if (sqlite3_column_type(st, 5) != SQLITE_NULL) {
            fputs("  ", out);
            tput(out, st, 5, &oom);
        }
        fprintf(out, "\n      %d root%s, %d node%s run\n", sqlite3_column_int(st, 8),
                sqlite3_column_int(st, 8) == 1 ? "" : "s", sqlite3_column_int(st, 9),
                sqlite3_column_int(st, 9) == 1 ? "" : "s");
    }
    if (rc != SQLITE_DONE)
        goto out;

    rc = SQLITE_OK;
out:
    sqlite3_reset(st);
    *oomp |= oom;
    return rc;
}

/* Every error, with its line and message. */
static int print_errors(gt_trace *t, FILE *out, int *oomp)
{
    sqlite3_stmt *st = NULL;
    int rc, oom = 0;
    if (!(st = gt_trace_stmt(t, ERRORS_SQL))) {
        rc = stmt_rc(t);
        goto out;
    }
    int n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!n++)
            fprintf(out, "\nerrors\n");
        fputs("  ", out);
        tput(out, st, 0, &oom);
        if (sqlite3_column_type(st, 2) != SQLITE_NULL) {
            fputs(" at ", out);
            tput(out, st, 2, &oom);
            fprintf(out, ":%d", sqlite3_column_int(st, 3));
        }
        if (sqlite3_column_type(st, 5) != SQLITE_NULL)
            fprintf(out, " (in backward #%d)", sqlite3_column_int(st, 5));
        fputc('\n', out);
        if (sqlite3_column_type(st, 4) != SQLITE_NULL) {
            fputs("    ", out);
            tput(out, st, 4, &oom);
            fputc('\n', out);
        }
        fputs("    ", out);
        put_indented(out, col(st, 1, &oom), "    ");
        fputc('\n', out);
    }
    if (rc != SQLITE_DONE)
        goto out;
    if (!n)
        fprintf(out, "\nerrors: none\n");
    rc = SQLITE_OK;
out:
    sqlite3_reset(st);
    *oomp |= oom;
    return rc;
}

static int print_text(gt_trace *t, FILE *out, int all)
{
    int oom = 0; /* a text read ran out of memory */
    int rc = print_run(t, out, &oom);
    if (rc == SQLITE_OK)
        rc = print_counts(t, out);
    if (rc == SQLITE_OK)
        rc = print_backward_calls(t, out, all, &oom);
    if (rc == SQLITE_OK)
        rc = print_errors(t, out, &oom);
    return rc == SQLITE_OK && oom ? SQLITE_NOMEM : rc;
}

int gt_info_print(gt_trace *t, int json, int all, FILE *out)
{
    return json ? print_json(t, out) : print_text(t, out, all);
}
