/* gradtrace: record PyTorch runs into a trace and inspect traces. */
#include <stdio.h>
#include <string.h>

#include <gradtrace/recorder.h>

#include "cmd.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"record", gt_cmd_record, "run a Python script and record its autograd activity"},
    {"diagnose", gt_cmd_diagnose, "replay backward and name the mutation that broke it"},
    {"graph", gt_cmd_graph, "draw the autograd graph (DOT, SVG, PNG)"},
    {"sql", gt_cmd_sql, "query a trace with SQL (read-only)"},
    {"info", gt_cmd_info, "summarise a trace: run, counts, backward calls, errors"},
    {"history", gt_cmd_history, "every write, save and use of one variable's versions"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: gradtrace <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].help);
    fprintf(out, "\n'gradtrace <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("gradtrace %s (trace schema %d)\n", GT_VERSION_STRING, GT_SCHEMA_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "gradtrace: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
