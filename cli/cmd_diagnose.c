/* gradtrace diagnose: replay backward from a trace and name which mutation
 * invalidated which saved tensor. Parses the options, asks the library for
 * the report (report.h) and prints it: text for a person at a terminal, or
 * --json (the contract of the report's document). Several traces (the
 * ranks of a distributed run) are diagnosed one by one in this process and
 * reported together. Exit: 0 no findings, 1 findings, 2 usage/input. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gradtrace/error.h>

#include "cmd.h"
#include <gradtrace/multi.h>
#include <gradtrace/report.h>
#include "strbuf.h"

static void usage(FILE *o)
{
    fprintf(o,
            "usage: gradtrace diagnose [options] TRACE... | DIR\n"
            "\n"
            "Replay each backward call of TRACE and report every saved tensor that was\n"
            "changed between its save and the backward that needed it, every in-place\n"
            "error PyTorch raised at the op (leaf, views, expanded or overlapping\n"
            "memory, inference tensors, dtype or shape that cannot hold the result,\n"
            "detach_ of a view, resize_), and any in-place error the replay cannot pin\n"
            "(kind unexplained): a run that raised one always gets a finding. Also why\n"
            "a backward() root has no grad_fn (detach, .data, no_grad, an op with no\n"
            "gradient, .item(), nothing requiring grad) and why an autograd.grad input\n"
            "is not on the outputs' graph. Several traces (the ranks of a distributed\n"
            "run) or a directory: each rank diagnosed, each distinct finding printed\n"
            "once with the ranks it was found on.\n"
            "\n"
            "options:\n"
            "  --json              print the findings as JSON\n"
            "  --backward N        only backward call N (1-based, in call order)\n"
            "  --color WHEN        colour the text: auto (default, on a terminal),\n"
            "                      always, never\n"
            "  -h, --help          show this help\n"
            "\n"
            "exit status: 0 no findings, 1 findings, 2 usage or input error, or no\n"
            "findings in a trace whose rows do not fit together (a damaged file)\n");
}

/* Diagnose trace `path` into *r, saying why not on stderr. 0, or 2 (the
 * exit status for it). */
static int diagnose_one(const char *path, long long backward, gt_report *r)
{
    gt_trace *t = NULL;
    gt_diagnose_options opts = {.backward = backward};
    memset(r, 0, sizeof *r);
    if (gt_cmd_open(GT_CMD_TRACE, path, &t) != 0)
        return 2;
    int rc = gt_report_build(t, path, &opts, r);
    if (rc != 0)
        fprintf(stderr, "gradtrace: diagnose %s: %s\n", path, gt_trace_errmsg(t));
    gt_trace_close(t);
    return rc ? 2 : 0;
}

/* `gradtrace diagnose` over several traces: each diagnosed on its own, in
 * this process, then each rank's outcome and every distinct finding once
 * with its ranks (gt_multi_report). Exit status: 1 if any rank has
 * findings, else 2 if a trace could not be diagnosed, else 0. */
static int diagnose_ranks(int npaths, char **paths, int json, long long backward)
{
    gt_rank_set set;
    char **docs = NULL;
    int *codes = NULL, status = 2, any_findings = 0, any_error = 0;
    gt_strbuf out = GT_STRBUF_INIT;
    if (gt_rank_set_load(&set, npaths, paths) != 0) {
        fprintf(stderr, "gradtrace: %s\n", gt_rank_set_errmsg(&set));
        gt_rank_set_release(&set);
        return 2;
    }
    docs = calloc(set.n ? set.n : 1, sizeof *docs);
    codes = calloc(set.n ? set.n : 1, sizeof *codes);
    if (!docs || !codes)
        goto oom;
    for (size_t i = 0; i < set.n; i++) {
        gt_report r;
        codes[i] = diagnose_one(set.v[i].path, backward, &r);
        if (codes[i] == 0)
            codes[i] = r.status;
        docs[i] = r.doc ? r.doc : strdup("");
        r.doc = NULL;
        gt_report_release(&r);
        if (!docs[i])
            goto oom;
        if (codes[i] == 1)
            any_findings = 1;
        else if (codes[i] != 0 || !docs[i][0])
            any_error = 1;
    }
    if (gt_multi_report(&set, docs, codes, json, &out) != 0)
        goto oom;
    fwrite(gt_strbuf_str(&out), 1, out.len, stdout);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "gradtrace: diagnose: cannot write output\n");
        goto out;
    }
    status = any_findings ? 1 : any_error ? 2 : 0;
    goto out;
oom:
    fprintf(stderr, "gradtrace: diagnose: out of memory\n");
out:
    for (size_t i = 0; docs && i < set.n; i++)
        free(docs[i]);
    free(docs);
    free(codes);
    gt_strbuf_release(&out);
    gt_rank_set_release(&set);
    return status;
}

int gt_cmd_diagnose(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"backward", required_argument, NULL, 'b'},
        {"color", required_argument, NULL, 'c'},
        {"colour", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int json = 0, color = -1, ch, status = 2;
    long long backward = 0;
    gt_trace *t = NULL;
    gt_report r = {0};
    gt_strbuf text = GT_STRBUF_INIT;

    optind = 0;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "hb:", longopts, NULL)) != -1) {
        switch (ch) {
        case 'j':
            json = 1;
            break;
        case 'b': {
            char *end;
            backward = strtoll(optarg, &end, 10);
            if (*optarg == 0 || *end != 0 || backward < 1) {
                fprintf(stderr,
                        "gradtrace: diagnose: --backward wants a call number "
                        "(1, 2, ...), not '%s'\n",
                        optarg);
                return 2;
            }
            break;
        }
        case 'c':
            if (!strcmp(optarg, "always"))
                color = 1;
            else if (!strcmp(optarg, "never"))
                color = 0;
            else if (!strcmp(optarg, "auto"))
                color = -1;
            else {
                fprintf(stderr,
                        "gradtrace: diagnose: --color wants auto, always or never\n");
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return gt_usage_error("diagnose", usage, "%s '%s'",
                                  optopt && ch == ':' ? "missing value for option"
                                                      : "unknown option",
                                  argv[optind - 1]);
        }
    }
    if (gt_multi_wanted(argc - optind, argv + optind)) /* ranks: multi.h */
        return diagnose_ranks(argc - optind, argv + optind, json, backward);
    if (optind != argc - 1)
        return gt_usage_error("diagnose", usage, "%s",
                              optind >= argc ? "missing trace file"
                                             : "too many arguments");
    const char *path = argv[optind];
    if (gt_cmd_open(GT_CMD_TRACE, path, &t) != 0)
        return 2;
    gt_diagnose_options opts = {.backward = backward};
    if (gt_report_build(t, path, &opts, &r) != 0) {
        fprintf(stderr, "gradtrace: diagnose %s: %s\n", path, gt_trace_errmsg(t));
        goto out;
    }
    if (json) {
        printf("%s\n", r.doc);
    } else {
        if (color < 0)
            color = isatty(STDOUT_FILENO) && !getenv("NO_COLOR");
        if (gt_report_text(t, &r, path, color, &text) != 0) {
            fprintf(stderr, "gradtrace: diagnose %s: %s\n", path, gt_trace_errmsg(t));
            goto out;
        }
        fwrite(gt_strbuf_str(&text), 1, text.len, stdout);
    }
    status = r.status;
out:
    if (fflush(stdout) != 0 && status != 2) {
        fprintf(stderr, "gradtrace: diagnose: cannot write output\n");
        status = 2;
    }
    gt_strbuf_release(&text);
    gt_report_release(&r);
    gt_trace_close(t);
    return status;
}
