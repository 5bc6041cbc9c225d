/*
 * gradtrace history TRACE VARIABLE|TENSOR: the life of a variable's version
 * counter (history.h), the question people otherwise answer by printing
 * x._version around suspect lines. Parses the options and prints what the
 * library reads.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/error.h>

#include "cmd.h"
#include <gradtrace/history.h>
#include <gradtrace/trace.h>

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
        GT_HISTORY_LAST);
}

/* 1 if s is a tensor id (digits only). */
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
    if (gt_cmd_open(GT_CMD_TRACE | GT_CMD_VIEWS, path, &t) != 0)
        return 2;
    int rc = gt_history_print(t, path, what, reads, all, json, stdout);
    if (rc == 1) {
        fprintf(stderr, "gradtrace: history: %s\n", gt_trace_errmsg(t));
        status = 1;
        goto out;
    }
    if (rc == 0) {
        status = 0;
        goto out;
    }
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
