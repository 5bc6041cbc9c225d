/*
 * The life of a variable's version counter (history.h): every tensor bound
 * to a name (or one tensor id) and every event on its counter, read from
 * the tensor_history view.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include <gradtrace/history.h>
#include "strbuf.h"
#include <gradtrace/table_out.h>
#include <gradtrace/termtext.h>
#include "trace_int.h"

#define DEFAULT_LAST GT_HISTORY_LAST

/* The version counters to show, as CTE `vcs(vc, first)`: ?1 is the name
 * (or the tensor id), ?2 how many of the most recently bound counters. */
#define VCS_BY_NAME                                                                      \
    "vcs AS (SELECT t.version_counter AS vc, min(n.seq) AS first FROM names n "          \
    "JOIN strings s ON s.id = n.name JOIN tensors t ON t.id = n.tensor "                 \
    "WHERE s.text = ?1 GROUP BY t.version_counter ORDER BY first DESC LIMIT ?2)"
#define VCS_BY_ID                                                                        \
    "vcs AS (SELECT version_counter AS vc, seq AS first FROM tensors WHERE id = ?1 "     \
    "AND ?2 IS NOT NULL)"

/* The rows: ?3 = 1 to include reads. Paths under the run's working
 * directory are shown relative to it. */
#define ROWS_SQL                                                                         \
    "SELECT h.seq,"                                                                      \
    " CASE h.kind WHEN 'bump' THEN CASE WHEN h.detail = 'observed'"                      \
    "   THEN 'write (seen later)' ELSE 'write' END"                                      \
    "   WHEN 'root' THEN 'backward root'"                                                \
    "   WHEN 'created' THEN CASE WHEN h.op IS NULL THEN 'first seen' ELSE 'created' END" \
    "   ELSE h.kind END AS event,"                                                       \
    " h.tensor, h.version,"                                                              \
    " CASE h.kind WHEN 'saved' THEN h.op || ' as ' || h.detail"                          \
    "   WHEN 'root' THEN h.op || ' #' || substr(h.detail, 10) ELSE h.op END AS what,"    \
    " CASE WHEN h.file IS NULL THEN NULL"                                                \
    "   WHEN r.cwd IS NOT NULL AND substr(h.file, 1, length(r.cwd) + 1) = r.cwd || '/'"  \
    "   THEN substr(h.file, length(r.cwd) + 2) ELSE h.file END || ':' || h.line AS "     \
    "line,"                                                                              \
    " trim(h.code) AS code"                                                              \
    " FROM tensor_history h JOIN vcs ON h.version_counter = vcs.vc"                      \
    " LEFT JOIN run r ON r.id = 1"                                                       \
    " WHERE h.kind IN ('created', 'bump', 'saved', 'root') OR (?3 AND h.kind = 'read')"  \
    " ORDER BY vcs.first, h.seq, h.kind"

/* The two statements, prepared once on the trace (gt_trace_stmt). */
static const char rows_by_name[] = "WITH " VCS_BY_NAME " " ROWS_SQL;
static const char rows_by_id[] = "WITH " VCS_BY_ID " " ROWS_SQL;

static int is_id(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

/* How many version counters the name was bound to (or 1 if the tensor
 * exists), -1 on a read error (the message on t). */
static int64_t count_counters(gt_trace *t, const char *what, int by_id)
{
    static const char by_id_sql[] = "SELECT count(*) FROM tensors WHERE id = ?1";
    static const char by_name_sql[] =
        "SELECT count(DISTINCT t.version_counter) FROM names n "
        "JOIN strings s ON s.id = n.name JOIN tensors t "
        "ON t.id = n.tensor WHERE s.text = ?1";
    sqlite3_stmt *st = gt_trace_stmt(t, by_id ? by_id_sql : by_name_sql);
    int64_t n = -1;
    if (!st)
        return -1;
    if (by_id)
        sqlite3_bind_int64(st, 1, strtoll(what, NULL, 10));
    else
        sqlite3_bind_text(st, 1, what, -1, SQLITE_STATIC);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    else if ((s & 0xff) == SQLITE_NOMEM)
        gt__trace_fail(t, GT_ENOMEM, "out of memory");
    else
        gt__trace_fail(t, GT_ECORRUPT, "cannot read trace: %s",
                       sqlite3_errmsg(gt_trace_db(t)));
    sqlite3_reset(st);
    return n;
}

/* The message for a name (or id) the trace does not have, on t:
 * "no variable 'x' in run.db; its variables include a, b, ...". Returns 1. */
static int say_unknown(gt_trace *t, const char *path, const char *what, int by_id)
{
    gt_strbuf some = GT_STRBUF_INIT; /* a hint: out of memory leaves it out */
    char *w = gt_term_text(what), *p = gt_term_text(path), *s = NULL;
    if (!by_id && gt_trace_text(t,
                                "SELECT group_concat(name, ', ') FROM (SELECT DISTINCT "
                                "s.text AS name FROM names n JOIN strings s "
                                "ON s.id = n.name ORDER BY 1 LIMIT 12)",
                                0, 0, &some) == 1)
        s = gt_term_text(gt_strbuf_str(&some));
    gt__trace_fail(t, GT_EINVAL, "no %s '%s' in %s%s%s", by_id ? "tensor" : "variable",
                   w ? w : what, p ? p : path, s ? "; its variables include " : "",
                   s ? s : "");
    gt_strbuf_release(&some);
    free(w);
    free(p);
    free(s);
    return 1;
}

int gt_history_print(gt_trace *t, const char *path, const char *what, int reads, int all,
                     int json, FILE *out)
{
    int by_id = is_id(what);
    sqlite3_stmt *st;
    int64_t counters = count_counters(t, what, by_id);
    if (counters < 0)
        return gt_trace_errcode(t);
    if (counters == 0)
        return say_unknown(t, path, what, by_id);
    int64_t shown = all || counters <= DEFAULT_LAST ? counters : DEFAULT_LAST;
    if (!(st = gt_trace_stmt(t, by_id ? rows_by_id : rows_by_name)))
        return gt_trace_errcode(t);
    if (by_id)
        sqlite3_bind_int64(st, 1, strtoll(what, NULL, 10));
    else
        sqlite3_bind_text(st, 1, what, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, shown);
    sqlite3_bind_int(st, 3, reads);
    if (!json) {
        gt_term_puts(out, what);
        if (by_id)
            fprintf(out, ": tensor %s and every tensor sharing its version counter\n",
                    what);
        else if (shown < counters)
            fprintf(out,
                    ": %" PRId64 " tensors were bound to this name; the last %" PRId64
                    " are shown (--all shows every one)\n",
                    counters, shown);
        else
            fprintf(out,
                    ": %" PRId64
                    " tensor%s bound to this name, with the tensors sharing %s "
                    "version counter\n",
                    counters, counters == 1 ? "" : "s", counters == 1 ? "its" : "their");
    }
    gt_table_opts opts = {
        .mode = json ? GT_OUT_JSON : GT_OUT_TABLE, .header = 1, .max_width = 60};
    /* the statement is the trace's: gt_trace_stmt resets it on its next use,
     * gt_trace_close finalizes it */
    if (gt_table_print(st, &opts, out, NULL) != SQLITE_OK)
        return gt__trace_fail(t, GT_ECORRUPT, "cannot read trace: %s",
                              sqlite3_errmsg(gt_trace_db(t)));
    return 0;
}
