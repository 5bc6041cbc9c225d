/*
 * gradtrace info TRACE [--json] [--all]: parse the options and print the
 * library's summary (info.h); several traces or a directory: one line per
 * rank (multi.h's gt_multi_info_db).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/error.h>

#include "cmd.h"
#include <gradtrace/info.h>
#include <gradtrace/multi.h>
#include <gradtrace/table_out.h>
#include <gradtrace/trace.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gradtrace info [--json] [--all] TRACE\n"
            "       gradtrace info [--json] TRACE... | DIR\n"
            "\n"
            "Summarise a trace: what ran and how it ended, rows per table,\n"
            "backward calls with their status and line, errors. Many backward\n"
            "calls are counted by outcome; the first and last %d are shown, and\n"
            "every one that did not return ok. Several traces (the ranks of a\n"
            "distributed run) or a directory of them: one line per rank.\n"
            "\n"
            "options:\n"
            "  --all       show every backward call\n"
            "  --json      one JSON object instead of text (every call)\n"
            "  -h, --help  show this help\n",
            GT_INFO_SHOWN_AT_ENDS);
}

/* `gradtrace info` over several traces: one line per trace, ordered by rank
 * (a table, or JSON with json set), from the library's summary
 * (gt_multi_info_db). Returns the exit status. */
static int info_ranks(int npaths, char **paths, int json)
{
    gt_rank_set set;
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int status = 2;
    if (gt_rank_set_load(&set, npaths, paths) != 0 || gt_multi_info_db(&set, &db) != 0) {
        fprintf(stderr, "gradtrace: %s\n", gt_rank_set_errmsg(&set));
        goto out;
    }
    if (gt_db_prepare(db, "SELECT * FROM ranks ORDER BY rowid", &st) != SQLITE_OK) {
        fprintf(stderr, "gradtrace: info: %s\n", sqlite3_errmsg(db));
        goto out;
    }
    gt_table_opts o = {json ? GT_OUT_JSON : GT_OUT_TABLE, 1, 0};
    if (gt_table_print(st, &o, stdout, NULL) != SQLITE_OK || fflush(stdout) != 0) {
        fprintf(stderr, "gradtrace: info: cannot write the summary\n");
        goto out;
    }
    status = 0;
out:
    sqlite3_finalize(st);
    sqlite3_close(db);
    gt_rank_set_release(&set);
    return status;
}

int gt_cmd_info(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"all", no_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    gt_trace *t = NULL;
    int json = 0, all = 0, status = 2, c;

    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'j':
            json = 1;
            break;
        case 'a':
            all = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return gt_usage_error("info", usage, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (gt_multi_wanted(argc - optind, argv + optind)) /* ranks: multi.h */
        return info_ranks(argc - optind, argv + optind, json);
    if (argc - optind != 1)
        return gt_usage_error("info", usage, "want exactly one trace");
    if (gt_cmd_open(GT_CMD_TRACE | GT_CMD_VIEWS, argv[optind], &t) != 0)
        return 2;
    int rc = gt_info_print(t, json, all, stdout);
    if (rc != SQLITE_OK) {
        fprintf(stderr, "gradtrace: info: cannot read %s: %s\n", argv[optind],
                rc == SQLITE_CORRUPT ? "no run row"
                : rc == SQLITE_NOMEM ? "out of memory"
                                     : sqlite3_errmsg(gt_trace_db(t)));
        goto out;
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "gradtrace: info: cannot write the summary\n");
        goto out;
    }
    status = 0;
out:
    gt_trace_close(t);
    return status;
}
