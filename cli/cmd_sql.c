/*
 * gradtrace sql TRACE [QUERY]: run SQL on a trace, read-only.
 *
 * The trace is opened read-only (gt_trace_open) and guarded three ways so a
 * query can neither change it nor reach another file: an authorizer that
 * refuses every write, ATTACH/DETACH and every PRAGMA that sets something
 * (with a message naming what was refused), SQLITE_DBCONFIG_DEFENSIVE, and
 * a check that each prepared statement is read-only (which also stops
 * VACUUM INTO). Queries come from argv or, without one, from stdin, where
 * they are split into statements with sqlite3_prepare's tail; without one
 * on a terminal, at a prompt (prompt_loop) that takes sqlite3's .tables,
 * .schema, .help and .quit too.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include "cmd.h"
#include "grow.h"
#include <gradtrace/multi.h>
#include <gradtrace/sql_guard.h>
#include "strbuf.h"
#include <gradtrace/table_out.h>
#include <gradtrace/trace.h>

typedef struct param {
    const char *name; /* as given, without a prefix or with one */
    const char *value;
} param;

/* Bind every parameter of `st` from the -p list: the integer, then the
 * decimal real number, that the whole value spells, else the text (so
 * "nan", "inf" or "0x10" stay text). Returns 0, or -1 with the name of a
 * parameter that has no value in *missing. */
static int bind_params(sqlite3_stmt *st, const param *ps, size_t n, const char **missing)
{
    int count = sqlite3_bind_parameter_count(st);
    for (int k = 1; k <= count; k++) {
        const char *pname = sqlite3_bind_parameter_name(st, k);
        const param *p = NULL;
        for (size_t i = 0; pname && i < n && !p; i++) {
            const char *want = ps[i].name;
            if (!strcmp(want, pname) ||
                (strchr(":@$", pname[0]) && !strcmp(want, pname + 1)))
                p = &ps[i];
        }
        if (!p) {
            *missing = pname ? pname : "?";
            return -1;
        }
        char *end;
        errno = 0;
        long long iv = strtoll(p->value, &end, 10);
        if (*p->value && !*end && !errno) {
            sqlite3_bind_int64(st, k, iv);
            continue;
        }
        double dv = strtod(p->value, &end);
        if (*p->value && !*end &&
            strspn(p->value, "0123456789.eE+-") == strlen(p->value)) {
            sqlite3_bind_double(st, k, dv);
            continue;
        }
        sqlite3_bind_text(st, k, p->value, -1, SQLITE_STATIC);
    }
    return 0;
}

/* Read all of stdin into a NUL-terminated string; NULL on failure. */
static char *read_stdin(void)
{
    gt_strbuf b = GT_STRBUF_INIT;
    char chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, stdin)) > 0)
        if (gt_strbuf_add(&b, chunk, got) != 0)
            break; /* b.oom: detach gives NULL */
    if (ferror(stdin)) {
        gt_strbuf_release(&b);
        return NULL;
    }
    return gt_strbuf_detach(&b);
}

/* Run the statements of `sql` (several, split with sqlite3_prepare's
 * tail) on db, guarded by g, with the -p parameters, printing their rows
 * to stdout as o says; *printed tells whether a statement before printed
 * rows (a blank line goes between tables). Returns 0, or -1 after printing
 * one line on stderr for the first statement that failed or was refused
 * (the ones after it are not run). */
static int run_sql(sqlite3 *db, gt_sql_guard *g, const char *sql, const param *ps,
                   size_t nps, const gt_table_opts *o, int *printed)
{
    sqlite3_stmt *st = NULL;
    int ret = -1;
    const char *tail = sql;
    while (*tail) {
        const char *next = NULL;
        gt_sql_guard_clear(g);
        int rc = gt_db_prepare_first(db, tail, &st, &next);
        if (rc != SQLITE_OK) {
            if (gt_sql_guard_why(g)[0])
                fprintf(stderr, "gradtrace: sql: refused: %s\n", gt_sql_guard_why(g));
            else
                fprintf(stderr, "gradtrace: sql: %s\n", sqlite3_errmsg(db));
            goto out;
        }
        tail = next;
        if (!st) /* only blanks or a comment */
            continue;
        if (!sqlite3_stmt_readonly(st)) {
            fprintf(stderr,
                    "gradtrace: sql: refused: the trace is read-only and "
                    "this statement would write: %s\n",
                    sqlite3_sql(st));
            goto out;
        }
        const char *missing;
        if (bind_params(st, ps, nps, &missing) != 0) {
            fprintf(stderr,
                    "gradtrace: sql: no value for parameter %s: "
                    "give it with -p %s=VALUE\n",
                    missing, missing + (strchr(":@$", missing[0]) ? 1 : 0));
            goto out;
        }
        if (*printed && sqlite3_column_count(st) && o->mode == GT_OUT_TABLE)
            fputc('\n', stdout);
        rc = gt_table_print(st, o, stdout, NULL);
        if (rc != SQLITE_OK) {
            fflush(stdout);
            fprintf(stderr, "gradtrace: sql: %s\n",
                    rc == SQLITE_NOMEM ? "out of memory" : sqlite3_errmsg(db));
            goto out;
        }
        if (sqlite3_column_count(st))
            *printed = 1;
        sqlite3_finalize(st);
        st = NULL;
    }
    ret = 0;
out:
    sqlite3_finalize(st);
    return ret;
}

/* The tables and views of the trace (its own and gradtrace's TEMP views,
 * which shadow the file's of the same name), and the SQL that made them:
 * what .tables and .schema read. */
#define SCHEMA_SQL                                                                       \
    "SELECT name, sql, min(ord) FROM (SELECT name, type, sql, 0 AS ord"                  \
    " FROM sqlite_temp_schema UNION ALL SELECT name, type, sql, 1 FROM sqlite_schema)"   \
    " WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"

/* .tables: the names, in columns as wide as the longest (80 a line).
 * .schema [NAME]: the CREATE statements (of NAME only, if given). Returns
 * 0, or -1 after printing why on stderr. */
static int dot_schema(sqlite3 *db, const char *name, int names_only)
{
    sqlite3_stmt *st = NULL;
    /* a TEMP view shadows the file's view of its name, as in queries */
    const char *sql = name ? SCHEMA_SQL " AND name = ?1 GROUP BY name"
                           : SCHEMA_SQL " GROUP BY name ORDER BY name";
    if (gt_db_prepare(db, sql, &st) != SQLITE_OK) {
        fprintf(stderr, "gradtrace: sql: %s\n", sqlite3_errmsg(db));
        return -1;
    }
    if (name)
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    size_t width = 0, prev = 0;
    int n = 0, rc;
    while (names_only && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        size_t w = strlen((const char *)sqlite3_column_text(st, 0));
        width = w > width ? w : width;
    }
    sqlite3_reset(st);
    int per_line = names_only ? (int)(80 / (width + 2)) : 1;
    per_line = per_line < 1 ? 1 : per_line;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *what = (const char *)sqlite3_column_text(st, names_only ? 0 : 1);
        if (names_only) {
            what = what ? what : "";
            if (n % per_line) /* pad the name before to the column's width */
                printf("%*s", (int)(width + 2 - prev), "");
            else if (n)
                putchar('\n');
            fputs(what, stdout);
            prev = strlen(what);
            n++;
        } else {
            printf("%s;\n", what ? what : "");
            n++;
        }
    }
    if (names_only && n)
        putchar('\n');
    if (rc != SQLITE_DONE)
        fprintf(stderr, "gradtrace: sql: %s\n", sqlite3_errmsg(db));
    else if (name && !n)
        fprintf(stderr, "gradtrace: sql: no table or view named %s\n", name);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE && (n || !name) ? 0 : -1;
}

static const char prompt_help[] =
    "Enter SQL statements ending in ';' (read-only), or:\n"
    "  .tables           the tables and views\n"
    "  .schema [NAME]    the CREATE statement of each (or of NAME)\n"
    "  .help             this help\n"
    "  .quit             leave (or end of input: Ctrl-D)\n"
    "The tables and views are described in SCHEMA.md (see gradtrace sql --help).\n";

/* One dot command (line, without its newline): 1 to go on, 0 to quit. */
static int dot_command(sqlite3 *db, char *line)
{
    char *cmd = strtok(line, " \t\r");
    char *arg = strtok(NULL, " \t\r");
    if (!strcmp(cmd, ".quit") || !strcmp(cmd, ".exit"))
        return 0;
    if (!strcmp(cmd, ".tables"))
        dot_schema(db, NULL, 1);
    else if (!strcmp(cmd, ".schema"))
        dot_schema(db, arg, 0);
    else if (!strcmp(cmd, ".help"))
        fputs(prompt_help, stdout);
    else
        fprintf(stderr, "gradtrace: sql: unknown command %s (see .help)\n", cmd);
    return 1;
}

/* The prompt of `gradtrace sql TRACE` on a terminal: lines from stdin are
 * gathered until they end a statement (sqlite3_complete), which then runs
 * as a QUERY argument would; a line starting with '.' at the start of a
 * statement is a dot command. An error is said and the prompt goes on.
 * Returns the exit status: 0, or 2 when reading stdin failed. */
static int prompt_loop(sqlite3 *db, gt_sql_guard *g, const param *ps, size_t nps,
                       const gt_table_opts *o, const char *path)
{
    gt_strbuf stmt = GT_STRBUF_INIT;
    char line[4096];
    int go = 1, printed = 0;
    fprintf(stderr,
            "gradtrace sql on %s (read-only): end statements with ';', .help for "
            "help, .quit to leave\n",
            path);
    while (go) {
        fputs(stmt.len ? "      ...> " : "gradtrace> ", stdout);
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin))
            break;
        if (!stmt.len && line[strspn(line, " \t")] == '.') {
            line[strcspn(line, "\n")] = 0;
            go = dot_command(db, line + strspn(line, " \t"));
            continue;
        }
        if (gt_strbuf_add(&stmt, line, strlen(line)) != 0) {
            fprintf(stderr, "gradtrace: sql: out of memory\n");
            break;
        }
        if (!sqlite3_complete(stmt.p))
            continue;
        printed = 0;
        run_sql(db, g, stmt.p, ps, nps, o, &printed);
        fflush(stdout);
        gt_strbuf_reset(&stmt);
    }
    if (go)
        putchar('\n'); /* after the prompt Ctrl-D left */
    int status = ferror(stdin) ? 2 : 0;
    gt_strbuf_release(&stmt);
    return status;
}

static void usage(FILE *out)
{
    char schema[4096];
    fprintf(out,
            "usage: gradtrace sql [options] TRACE... | DIR [QUERY]\n"
            "\n"
            "Run SQL on a trace, read-only. Without QUERY (or with '-') the\n"
            "statements are read from stdin; without QUERY on a terminal, at a\n"
            "prompt that also takes .tables, .schema [NAME], .help and .quit.\n"
            "Several traces (the ranks of a distributed run) or a directory: every\n"
            "table and view across them, with a leading rank column (table traces\n"
            "lists them). The tables and views (op_log, mutations, saved,\n"
            "invalidations, tensor_history, ...) are described, with a cookbook of\n"
            "queries, in\n"
            "  %s\n"
            "\n"
            "options:\n"
            "  --table             aligned columns (default when stdout is a terminal)\n"
            "  --tsv               tab-separated (default otherwise)\n"
            "  --csv               comma-separated values (RFC 4180)\n"
            "  --json              one JSON array of objects per statement\n"
            "  --header            print column names (default)\n"
            "  --no-header         do not print column names\n"
            "  --max-width N       table mode: cut cells longer than N characters\n"
            "                      (default 60 on a terminal, 0 = never)\n"
            "  -p, --param NAME=VALUE\n"
            "                      bind :NAME (or @NAME, $NAME) in the queries\n"
            "  -h, --help          show this help\n"
            "\n"
            "exit status: 0 success, 2 bad usage, unreadable trace, SQL error or\n"
            "a statement refused because it would write\n",
            gt_doc_path("SCHEMA.md", schema, sizeof schema));
}

/* What the options ask: the output, and the -p parameters. */
typedef struct sql_opts {
    gt_table_opts o;
    param *ps;
    size_t nps, cap;
} sql_opts;

/* Add the parameter of `-p NAME=VALUE` (arg, which this cuts at '=': the
 * name and the value stay in it). Returns 0, or -1 after printing why on
 * stderr. */
static int add_param(sql_opts *so, char *arg)
{
    char *eq = strchr(arg, '=');
    if (!eq || eq == arg) {
        fprintf(stderr, "gradtrace: sql: bad --param '%s': want NAME=VALUE\n", arg);
        return -1;
    }
    if (GT_ALLOC_GROW(so->ps, so->nps + 1, so->cap, 4) != 0) {
        fprintf(stderr, "gradtrace: sql: out of memory\n");
        return -1;
    }
    *eq = '\0';
    so->ps[so->nps].name = arg;
    so->ps[so->nps].value = eq + 1;
    so->nps++;
    return 0;
}

/* The N of --max-width N into so. Returns 0, or -1 after printing why on
 * stderr. */
static int set_max_width(sql_opts *so, const char *arg)
{
    char *end;
    long w = strtol(arg, &end, 10);
    if (!*arg || *end || w < 0 || w > 100000) {
        fprintf(stderr,
                "gradtrace: sql: bad --max-width '%s': "
                "want a number of characters\n",
                arg);
        return -1;
    }
    so->o.max_width = (int)w;
    return 0;
}

/* Read the options of argv into *so (getopt_long: optind then points at
 * the first operand). Returns -1 to go on, else the exit status: 0 after
 * --help, 2 after printing a bad option's error. */
static int parse_options(int argc, char **argv, sql_opts *so)
{
    enum {
        OPT_TABLE = 256,
        OPT_TSV,
        OPT_CSV,
        OPT_JSON,
        OPT_HEADER,
        OPT_NO_HEADER,
        OPT_MAX_WIDTH
    };
    static const struct option longopts[] = {
        {"table", no_argument, NULL, OPT_TABLE},
        {"tsv", no_argument, NULL, OPT_TSV},
        {"csv", no_argument, NULL, OPT_CSV},
        {"json", no_argument, NULL, OPT_JSON},
        {"header", no_argument, NULL, OPT_HEADER},
        {"no-header", no_argument, NULL, OPT_NO_HEADER},
        {"max-width", required_argument, NULL, OPT_MAX_WIDTH},
        {"param", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hp:", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_TABLE:
            so->o.mode = GT_OUT_TABLE;
            break;
        case OPT_TSV:
            so->o.mode = GT_OUT_TSV;
            break;
        case OPT_CSV:
            so->o.mode = GT_OUT_CSV;
            break;
        case OPT_JSON:
            so->o.mode = GT_OUT_JSON;
            break;
        case OPT_HEADER:
        case OPT_NO_HEADER:
            so->o.header = c == OPT_HEADER;
            break;
        case OPT_MAX_WIDTH:
            if (set_max_width(so, optarg) != 0)
                return 2;
            break;
        case 'p':
            if (add_param(so, optarg) != 0)
                return 2;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            return gt_usage_error("sql", usage, "option '%s' needs a value",
                                  argv[optind - 1]);
        default:
            return gt_usage_error("sql", usage, "unknown option '%s'", argv[optind - 1]);
        }
    }
    return -1;
}

/* Open the ntraces traces of paths: one as *t, with its views
 * (gt_cmd_open); several (or a directory) joined into one connection
 * *mdb (multi.h). The connection to query in *db. Returns 0, or -1 after
 * printing why on stderr. */
static int open_traces(int ntraces, char **paths, gt_trace **t, sqlite3 **mdb,
                       sqlite3 **db)
{
    if (!gt_multi_wanted(ntraces, paths)) {
        if (gt_cmd_open(GT_CMD_TRACE | GT_CMD_VIEWS, paths[0], t) != 0)
            return -1;
        *db = gt_trace_db(*t);
        return 0;
    }
    gt_rank_set set;
    int mrc = gt_rank_set_load(&set, ntraces, paths);
    if (mrc == 0 && (mrc = gt_multi_connect(&set, mdb)) == GT_EINVAL)
        fprintf(stderr, "gradtrace: sql: %s\n", gt_rank_set_errmsg(&set));
    else if (mrc != 0)
        fprintf(stderr, "gradtrace: %s\n", gt_rank_set_errmsg(&set));
    gt_rank_set_release(&set);
    if (mrc != 0)
        return -1;
    *db = *mdb;
    return 0;
}

int gt_cmd_sql(int argc, char **argv)
{
    int tty = isatty(STDOUT_FILENO);
    sql_opts so = {.o = {tty ? GT_OUT_TABLE : GT_OUT_TSV, 1, -1}};
    gt_trace *t = NULL;
    sqlite3 *mdb = NULL, *db = NULL; /* mdb: several traces joined (multi.c) */
    char *input = NULL;
    gt_sql_guard g = GT_SQL_GUARD_INIT;
    int status = parse_options(argc, argv, &so);

    if (status >= 0)
        goto out;
    status = 2;
    if (so.o.max_width < 0)
        so.o.max_width = so.o.mode == GT_OUT_TABLE && tty ? 60 : 0;
    /* several traces (or a directory): TRACE... [QUERY] (multi.h) */
    int ntraces = gt_sql_count_traces(argc - optind, argv + optind);
    if (ntraces < 1 || (ntraces == 1 && argc - optind > 2)) {
        status = gt_usage_error("sql", usage, "want a trace and at most one query");
        goto out;
    }
    const char *path = argv[optind];
    const char *sql = argc - optind > ntraces ? argv[argc - 1] : "-";
    /* no query, on a terminal: a prompt, as sqlite3 gives */
    int interactive = argc - optind == ntraces && isatty(STDIN_FILENO);
    if (!interactive && !strcmp(sql, "-")) {
        if (!(input = read_stdin())) {
            fprintf(stderr, "gradtrace: sql: cannot read queries from stdin: %s\n",
                    strerror(errno ? errno : EIO));
            goto out;
        }
        sql = input;
    }
    if (open_traces(ntraces, argv + optind, &t, &mdb, &db) != 0)
        goto out;
    if (gt_sql_guard_connection(db, &g) != SQLITE_OK) {
        fprintf(stderr, "gradtrace: sql: cannot make %s read-only: %s\n", path,
                sqlite3_errmsg(db));
        goto out;
    }
    if (interactive) {
        status = prompt_loop(db, &g, so.ps, so.nps, &so.o, path);
        goto out;
    }
    int printed = 0;
    if (run_sql(db, &g, sql, so.ps, so.nps, &so.o, &printed) != 0)
        goto out;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "gradtrace: sql: cannot write the result: %s\n", strerror(errno));
        goto out;
    }
    status = 0;
out:
    gt_trace_close(t);
    sqlite3_close(mdb);
    gt_sql_guard_release(&g);
    free(input);
    free(so.ps);
    return status;
}
