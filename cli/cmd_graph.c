/* gradtrace graph: draw one backward call's autograd graph (graph.h). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include "cmd.h"
#include <gradtrace/diagnose.h>
#include <gradtrace/report.h>
#include <gradtrace/graph.h>
#include <gradtrace/graph_render.h>
#include <gradtrace/memory.h>
#include <gradtrace/trace.h>

static const char usage_text[] =
    "usage: gradtrace graph TRACE -o FILE [--format dot|svg|png] [--backward N]\n"
    "                       [--hops K] [--all] [--saved] [--bytes] [--no-legend]\n"
    "\n"
    "Draw the autograd graph of one backward call: its nodes with the user's\n"
    "lines, saved tensors, and for each finding the in-place ops that changed a\n"
    "saved tensor (red) and the node the backward fails on (outlined).\n"
    "Without --hops or --all the drawing fits a screen: at most 40 nodes around\n"
    "the findings (or the roots), blocks repeated in a row (an RNN's time steps,\n"
    "a stack of layers) drawn once as \"\xc3\x97N\"; the title says what was left out.\n"
    "A finding repeated in several blocks is drawn once, labelled with how many\n"
    "and which (\"\xc3\x97"
    "6 in blocks.0\xe2\x80\x93"
    "5.mlp\"); labels name the module that ran\n"
    "each op and stay at least 11 px high (a drawing that cannot fit the screen\n"
    "at that size is drawn larger).\n"
    "\n"
    "  -o, --output FILE   where to write; '-' for standard output\n"
    "  -f, --format FMT    dot, svg or png (default: from FILE's extension;\n"
    "                      dot for '-')\n"
    "  -b, --backward N    the backward call to draw (default: the one with\n"
    "                      findings, else the last)\n"
    "  -k, --hops K        draw nodes within K edges of a finding (default 2)\n"
    "  -a, --all           draw the whole graph, not just around the findings\n"
    "      --saved, --all-saved\n"
    "                      draw every saved tensor as a note (by default a\n"
    "                      drawing with findings notes only the tensors they are\n"
    "                      about, and a large one lists the others in their node)\n"
    "      --bytes         colour and thicken each node by the bytes its saved\n"
    "                      tensors hold (gradtrace memory), and say them\n"
    "      --no-legend     leave the legend out\n"
    "  -h, --help          show this help\n";

/* Parse a non-negative integer in [min, max]; 0 on success. */
static int parse_int(const char *s, long long min, long long max, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* The arguments after the options (argv[optind...]): one TRACE, an -o
 * FILE, and a format named or told by FILE's extension (into *format when
 * not named). 0, or 2 after saying what is wrong. */
static int check_args(int argc, char **argv, const char *output, const char *format_name,
                      int *format)
{
    if (optind >= argc) {
        fprintf(stderr, "gradtrace: graph: missing TRACE (usage: gradtrace graph TRACE "
                        "-o FILE [options])\n");
        return 2;
    }
    if (argc - optind > 1) {
        fprintf(stderr, "gradtrace: graph: unexpected argument '%s'\n", argv[optind + 1]);
        return 2;
    }
    if (!output) {
        fprintf(stderr,
                "gradtrace: graph: missing -o FILE (use '-' for standard output)\n");
        return 2;
    }
    if (!format_name) {
        if (!strcmp(output, "-")) {
            *format = GT_GRAPH_DOT;
        } else if (gt_graph_format_from_path(output, format) != 0) {
            fprintf(stderr,
                    "gradtrace: graph: cannot tell the format of %s from its "
                    "extension: use --format dot, svg or png\n",
                    output);
            return 2;
        }
    }

    return 0;
}

int gt_cmd_graph(int argc, char **argv)
{
    enum { OPT_NO_LEGEND = 256, OPT_SAVED, OPT_BYTES };
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"format", required_argument, NULL, 'f'},
        {"backward", required_argument, NULL, 'b'},
        {"hops", required_argument, NULL, 'k'},
        {"all", no_argument, NULL, 'a'},
        {"no-legend", no_argument, NULL, OPT_NO_LEGEND},
        {"saved", no_argument, NULL, OPT_SAVED},
        {"all-saved", no_argument, NULL, OPT_SAVED},
        {"bytes", no_argument, NULL, OPT_BYTES},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    gt_graph_options opts = {.hops = -1};
    const char *output = NULL, *format_name = NULL;
    gt_trace *trace = NULL;
    gt_graph *graph = NULL;
    int format = -1, c, status = 2, bytes = 0;
    long long v;

    optind = 0; /* reset: main may have parsed before */
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:f:b:k:ah", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            output = optarg;
            break;
        case 'f':
            format_name = optarg;
            if (gt_graph_format_parse(optarg, &format) != 0) {
                fprintf(stderr,
                        "gradtrace: graph: unknown format '%s' (use dot, svg or png)\n",
                        optarg);
                return 2;
            }
            break;
        case 'b':
            if (parse_int(optarg, 1, INT64_MAX, &v) != 0) {
                fprintf(stderr,
                        "gradtrace: graph: --backward wants a positive number, "
                        "not '%s'\n",
                        optarg);
                return 2;
            }
            opts.backward = v;
            break;
        case 'k':
            if (parse_int(optarg, 0, 1000000, &v) != 0) {
                fprintf(stderr,
                        "gradtrace: graph: --hops wants a number >= 0, not '%s'\n",
                        optarg);
                return 2;
            }
            opts.hops = (int)v;
            break;
        case 'a':
            opts.all = 1;
            break;
        case OPT_NO_LEGEND:
            opts.no_legend = 1;
            break;
        case OPT_SAVED:
            opts.saved = 1;
            break;
        case OPT_BYTES:
            bytes = 1;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        case ':':
            fprintf(stderr, "gradtrace: graph: option '%s' needs a value\n",
                    argv[optind - 1]);
            return 2;
        default:
            if (optopt && optopt < 256)
                fprintf(stderr,
                        "gradtrace: graph: unknown option '-%c' (see gradtrace "
                        "graph --help)\n",
                        optopt);
            else
                fprintf(stderr,
                        "gradtrace: graph: unknown option '%s' (see gradtrace "
                        "graph --help)\n",
                        argv[optind - 1]);
            return 2;
        }
    }
    if (check_args(argc, argv, output, format_name, &format) != 0)
        return 2;
    if (gt_cmd_open(GT_CMD_TRACE, argv[optind], &trace) != 0)
        return 2;
    gt_strbuf notes = GT_STRBUF_INIT;
    int rc = gt_graph_build_focused(trace, &opts, &graph, &notes);
    for (const char *w = gt_strbuf_str(&notes); *w;) {
        const char *nl = strchr(w, '\n');
        int n = nl ? (int)(nl - w) : (int)strlen(w);
        fprintf(stderr, "gradtrace: graph: %.*s\n", n, w);
        w += n + (nl != NULL);
    }
    gt_strbuf_release(&notes);
    if (rc == 0 && bytes)
        rc = gt_memory_paint(trace, gt_graph_agraph(graph), gt_graph_backward(graph));
    if (rc != 0) {
        fprintf(stderr, "gradtrace: graph: %s\n", gt_trace_errmsg(trace));
        goto out;
    }
    rc = gt_graph_render(graph, format, output);
    /* Graphviz's messages, under our name (never "(null): ...") */
    for (const char *w = gt_graph_warnings(graph); *w;) {
        const char *nl = strchr(w, '\n');
        int n = nl ? (int)(nl - w) : (int)strlen(w);
        fprintf(stderr, "gradtrace: graph: graphviz: %.*s\n", n, w);
        w += n + (nl != NULL);
    }
    if (rc != 0) {
        fprintf(stderr, "gradtrace: graph: %s\n", gt_graph_errmsg(graph));
        goto out;
    }
    if (strcmp(output, "-"))
        printf("wrote %s: backward call %lld, %zu of %zu autograd nodes, %zu %s\n",
               output, (long long)gt_graph_backward(graph), gt_graph_nodes_drawn(graph),
               gt_graph_nodes_total(graph), gt_graph_findings_shown(graph),
               gt_graph_findings_shown(graph) == 1 ? "finding" : "findings");
    status = 0;
out:
    gt_graph_free(graph);
    gt_trace_close(trace);
    return status;
}
