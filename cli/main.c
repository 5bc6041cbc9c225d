/* gradtrace: record PyTorch runs into a trace and inspect traces. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include "cmd.h"
#include "gt_build.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: gradtrace <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < gt_ncommands; i++)
        fprintf(out, "  %-9s %s\n", gt_commands[i].name, gt_commands[i].help);
    fprintf(out, "\n'gradtrace <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("gradtrace %s (trace schema %d)\nadapters: %s\n", GT_VERSION_STRING,
               GT_SCHEMA_VERSION, GT_BUILD_ADAPTERS);
        return 0;
    }
    /* the commands word their own option errors (one line each) */
    opterr = 0;
    const gt_command *cmd = gt_command_find(argv[1]);
    if (cmd) /* the command opens its trace with gt_cmd_open, as cmd->needs says */
        return cmd->run(argc - 1, argv + 1);
    fprintf(stderr, "gradtrace: unknown %s '%s' (see gradtrace --help)\n",
            argv[1][0] == '-' ? "option" : "command", argv[1]);
    return 2;
}
