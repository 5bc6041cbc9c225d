/*
 * gradtrace history TRACE VARIABLE|TENSOR: the life of a variable's version
 * counter, the question people otherwise answer by printing x._version
 * around suspect lines.
 *
 * For a variable name, every tensor that was bound to it (the last five by
 * default, --all for every one) and, for a tensor id, that tensor; then, in
 * order, every event on its version counter (which its views and detach()
 * share): created (or first seen, for a tensor no recorded op made, such as
 * torch.tensor([...]) or one made before recording), written (with the
 * version the write produced), saved for
 * backward (with the version saved), used as a backward root, and with
 * --reads every op that read it. Each with its user line. One table, read
 * from the tensor_history view; --json prints the same rows as JSON.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include "cmd.h"
#include "table_out.h"
#include "termtext.h"
#include "trace.h"

#define DEFAULT_LAST 5

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

static void usage(FILE *o)
{
    fprintf(
        o,
        "usage: gradtrace history [options] TRACE VARIABLE|TENSOR-ID\n"
        "\n"
        "Show every event on the version counter of a variable (or of the tensor\n"
        "with that id): created, written and the version each write produced,\n"
        "saved for backward and at which version, used as a backward root; each\n"
        "with its line. Views and detach() share their base's counter: their\n"
        "writes are shown too.\n"
        "\n"
        "options:\n"
        "  --reads      also show every op that read it\n"
        "  --all        every tensor ever bound to the name (default: the last %d)\n"
        "  --json       print the rows as JSON\n"
        "  -h, --help   show this help\n"
        "\n"
        "exit status: 0 shown, 1 no such variable or tensor, 2 usage or input error\n",
        DEFAULT_LAST);
}

/* 1 if s is a tensor id (digits only). */
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

/* "gradtrace: history: no variable 'x' in run.db; variables: a, b, ..." */
static void say_unknown(sqlite3 *db, const char *path, const char *what, int by_id)
{
    sqlite3_stmt *st = NULL;
    const char *some;
    int oom = 0; /* the list is a hint: out of memory leaves it out */
    fprintf(stderr, "gradtrace: history: no %s '", by_id ? "tensor" : "variable");
    gt_term_puts(stderr, what);
    fprintf(stderr, "' in ");
    gt_term_puts(stderr, path);
    if (!by_id &&
        sqlite3_prepare_v2(db,
                           "SELECT group_concat(name, ', ') FROM (SELECT DISTINCT "
                           "s.text AS name FROM names n JOIN strings s "
                           "ON s.id = n.name ORDER BY 1 LIMIT 12)",
                           -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && (some = gt_column_text(st, 0, &oom)) != NULL) {
        fprintf(stderr, "; its variables include ");
        gt_term_puts(stderr, some);
    }
    sqlite3_finalize(st);
    fputc('\n', stderr);
}

int gt_cmd_history(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"reads", no_argument, NULL, 'r'},
        {"all", no_argument, NULL, 'a'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int reads = 0, all = 0, json = 0, c, status = 2;
    gt_trace *t = NULL;
    sqlite3_stmt *st = NULL;

    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'r':
            reads = 1;
            break;
        case 'a':
            all = 1;
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return gt_usage_error("history", usage, "unknown option '%s'",
                                  argv[optind - 1]);
        }
    }
    if (argc - optind != 2)
        return gt_usage_error("history", usage,
                              "want a trace and a variable name or tensor id");
    const char *path = argv[optind], *what = argv[optind + 1];
    int by_id = is_id(what);
    if (gt_cmd_open("history", path, &t) != 0)
        return 2;
    sqlite3 *db = gt_trace_db(t);
    int64_t counters = count_counters(t, what, by_id);
    if (counters < 0)
        goto read_error;
    if (counters == 0) {
        say_unknown(db, path, what, by_id);
        status = 1;
        goto out;
    }
    int64_t shown = all || counters <= DEFAULT_LAST ? counters : DEFAULT_LAST;
    if (!(st = gt_trace_stmt(t, by_id ? rows_by_id : rows_by_name)))
        goto read_error;
    if (by_id)
        sqlite3_bind_int64(st, 1, strtoll(what, NULL, 10));
    else
        sqlite3_bind_text(st, 1, what, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, shown);
    sqlite3_bind_int(st, 3, reads);
    if (!json) {
        gt_term_puts(stdout, what);
        if (by_id)
            printf(": tensor %s and every tensor sharing its version counter\n", what);
        else if (shown < counters)
            printf(": %" PRId64 " tensors were bound to this name; the last %" PRId64
                   " are shown (--all shows every one)\n",
                   counters, shown);
        else
            printf(": %" PRId64
                   " tensor%s bound to this name, with the tensors sharing %s "
                   "version counter\n",
                   counters, counters == 1 ? "" : "s", counters == 1 ? "its" : "their");
    }
    gt_table_opts opts = {
        .mode = json ? GT_OUT_JSON : GT_OUT_TABLE, .header = 1, .max_width = 60};
    if (gt_table_print(st, &opts, stdout, NULL) != SQLITE_OK) {
        fprintf(stderr, "gradtrace: history %s: cannot read trace: %s\n", path,
                sqlite3_errmsg(db));
        goto out;
    }
    /* the statement is the trace's: gt_trace_stmt resets it on its next
     * use, gt_trace_close finalizes it */
    status = 0;
    goto out;
read_error:
    /* "cannot read trace: ..." or "out of memory", from the reading layer */
    fprintf(stderr, "gradtrace: history %s: %s\n", path, gt_trace_errmsg(t));
out:
    if (fflush(stdout) != 0 && status != 2) {
        fprintf(stderr, "gradtrace: history: cannot write output\n");
        status = 2;
    }
    gt_trace_close(t);
    return status;
}
