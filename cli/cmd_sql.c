/*
 * gradtrace sql TRACE [QUERY]: run SQL on a trace, read-only.
 *
 * The trace is opened read-only (gt_trace_open) and guarded three ways so a
 * query can neither change it nor reach another file: an authorizer that
 * refuses every write, ATTACH/DETACH and every PRAGMA that sets something
 * (with a message naming what was refused), SQLITE_DBCONFIG_DEFENSIVE, and
 * a check that each prepared statement is read-only (which also stops
 * VACUUM INTO). Queries come from argv or, without one, from stdin, where
 * they are split into statements with sqlite3_prepare's tail.
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
#include "multi.h"
#include "sql_guard.h"
#include "strbuf.h"
#include "table_out.h"
#include "trace.h"

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

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gradtrace sql [options] TRACE... | DIR [QUERY]\n"
            "\n"
            "Run SQL on a trace, read-only. Without QUERY (or with '-') the\n"
            "statements are read from stdin. Views such as op_log, mutations,\n"
            "saved, invalidations and tensor_history are described in\n"
            "schema/SCHEMA.md, with a cookbook of queries. Several traces (the ranks\n"
            "of a distributed run) or a directory: every table and view across them,\n"
            "with a leading rank column (table traces lists them).\n"
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
            "a statement refused because it would write\n");
}

int gt_cmd_sql(int argc, char **argv)
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
    int tty = isatty(STDOUT_FILENO);
    gt_table_opts o = {tty ? GT_OUT_TABLE : GT_OUT_TSV, 1, -1};
    param *ps = NULL;
    size_t nps = 0;
    gt_trace *t = NULL;
    sqlite3 *mdb = NULL; /* several traces joined (multi.c) */
    char *input = NULL;
    sqlite3_stmt *st = NULL;
    gt_sql_guard g = GT_SQL_GUARD_INIT;
    int status = 2, c;

    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hp:", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_TABLE:
            o.mode = GT_OUT_TABLE;
            break;
        case OPT_TSV:
            o.mode = GT_OUT_TSV;
            break;
        case OPT_CSV:
            o.mode = GT_OUT_CSV;
            break;
        case OPT_JSON:
            o.mode = GT_OUT_JSON;
            break;
        case OPT_HEADER:
            o.header = 1;
            break;
        case OPT_NO_HEADER:
            o.header = 0;
            break;
        case OPT_MAX_WIDTH: {
            char *end;
            long w = strtol(optarg, &end, 10);
            if (!*optarg || *end || w < 0 || w > 100000) {
                fprintf(stderr,
                        "gradtrace: sql: bad --max-width '%s': "
                        "want a number of characters\n",
                        optarg);
                goto out;
            }
            o.max_width = (int)w;
            break;
        }
        case 'p': {
            const char *eq = strchr(optarg, '=');
            param *p;
            if (!eq || eq == optarg) {
                fprintf(stderr, "gradtrace: sql: bad --param '%s': want NAME=VALUE\n",
                        optarg);
                goto out;
            }
            p = realloc(ps, (nps + 1) * sizeof *ps);
            if (!p) {
                fprintf(stderr, "gradtrace: sql: out of memory\n");
                goto out;
            }
            ps = p;
            /* NAME ends at '=': cut it there in argv, which we own now. */
            optarg[eq - optarg] = '\0';
            ps[nps].name = optarg;
            ps[nps].value = eq + 1;
            nps++;
            break;
        }
        case 'h':
            usage(stdout);
            status = 0;
            goto out;
        case ':':
            status = gt_usage_error("sql", usage, "option '%s' needs a value",
                                    argv[optind - 1]);
            goto out;
        default:
            status =
                gt_usage_error("sql", usage, "unknown option '%s'", argv[optind - 1]);
            goto out;
        }
    }
    if (o.max_width < 0)
        o.max_width = o.mode == GT_OUT_TABLE && tty ? 60 : 0;
    /* several traces (or a directory): TRACE... [QUERY] (multi.h) */
    int ntraces = gt_sql_count_traces(argc - optind, argv + optind);
    if (ntraces < 1 || (ntraces == 1 && argc - optind > 2)) {
        status = gt_usage_error("sql", usage, "want a trace and at most one query");
        goto out;
    }
    const char *path = argv[optind];
    const char *sql = argc - optind > ntraces ? argv[argc - 1] : "-";
    if (!strcmp(sql, "-")) {
        if (!(input = read_stdin())) {
            fprintf(stderr, "gradtrace: sql: cannot read queries from stdin: %s\n",
                    strerror(errno ? errno : EIO));
            goto out;
        }
        sql = input;
    }

    sqlite3 *db;
    if (gt_multi_wanted(ntraces, argv + optind)) {
        gt_rank_set set;
        int mrc = gt_rank_set_load(&set, ntraces, argv + optind);
        if (mrc == 0 && (mrc = gt_multi_connect(&set, &mdb)) == GT_EINVAL)
            fprintf(stderr, "gradtrace: sql: %s\n", gt_rank_set_errmsg(&set));
        else if (mrc != 0)
            fprintf(stderr, "gradtrace: %s\n", gt_rank_set_errmsg(&set));
        gt_rank_set_release(&set);
        if (mrc != 0)
            goto out;
        db = mdb;
    } else if (gt_cmd_open(GT_CMD_TRACE | GT_CMD_VIEWS, path, &t) != 0) {
        goto out;
    } else {
        db = gt_trace_db(t);
    }
    if (gt_sql_guard_connection(db, &g) != SQLITE_OK) {
        fprintf(stderr, "gradtrace: sql: cannot make %s read-only: %s\n", path,
                sqlite3_errmsg(db));
        goto out;
    }

    int printed = 0;
    const char *tail = sql;
    while (*tail) {
        const char *next = NULL;
        gt_sql_guard_clear(&g);
        int rc = sqlite3_prepare_v2(db, tail, -1, &st, &next);
        if (rc != SQLITE_OK) {
            if (gt_sql_guard_why(&g)[0])
                fprintf(stderr, "gradtrace: sql: refused: %s\n", gt_sql_guard_why(&g));
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
        if (printed && sqlite3_column_count(st) && o.mode == GT_OUT_TABLE)
            fputc('\n', stdout);
        rc = gt_table_print(st, &o, stdout, NULL);
        if (rc != SQLITE_OK) {
            fflush(stdout);
            fprintf(stderr, "gradtrace: sql: %s\n",
                    rc == SQLITE_NOMEM ? "out of memory" : sqlite3_errmsg(db));
            goto out;
        }
        if (sqlite3_column_count(st))
            printed = 1;
        sqlite3_finalize(st);
        st = NULL;
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "gradtrace: sql: cannot write the result: %s\n", strerror(errno));
        goto out;
    }
    status = 0;
out:
    sqlite3_finalize(st);
    gt_trace_close(t);
    sqlite3_close(mdb);
    gt_sql_guard_release(&g);
    free(input);
    free(ps);
    return status;
}
