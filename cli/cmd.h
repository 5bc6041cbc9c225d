/*
 * The gradtrace subcommands. Each takes argc/argv with argv[0] the
 * subcommand's name, parses its options with getopt_long, and returns the
 * process exit status: 0 success (diagnose: no findings), 1 diagnose found
 * problems, 2 usage or input error. Messages go to stderr as
 * "gradtrace: <what failed>: <why>", lowercase, no trailing period.
 */
#ifndef GT_CLI_CMD_H
#define GT_CLI_CMD_H

#include <stdio.h>

#include <gradtrace/trace.h>

int gt_cmd_record(int argc, char **argv);   /* cmd_record.c */
int gt_cmd_diagnose(int argc, char **argv); /* cmd_diagnose.c */
int gt_cmd_graph(int argc, char **argv);    /* cmd_graph.c */
int gt_cmd_sql(int argc, char **argv);      /* cmd_sql.c */
int gt_cmd_info(int argc, char **argv);     /* cmd_info.c */
int gt_cmd_history(int argc, char **argv);  /* cmd_history.c */
int gt_cmd_memory(int argc, char **argv);   /* cmd_memory.c */

/* What a command needs before it can run (gt_cmd_open's flags). */
enum {
    GT_CMD_TRACE = 1 << 0, /* a trace opened with gt_trace_open */
    GT_CMD_VIEWS = 1 << 1, /* ... with gradtrace's TEMP views (gt_trace_use_views) */
};

/* The command table (cmd_common.c): what `gradtrace` runs (main.c). */
typedef struct gt_command {
    const char *name;
    int (*run)(int argc, char **argv);
    unsigned needs; /* GT_CMD_*: what it asks gt_cmd_open for */
    const char *help;
} gt_command;

extern const gt_command gt_commands[];
extern const size_t gt_ncommands;

/* The entry of command `name`, or NULL if there is none. */
const gt_command *gt_command_find(const char *name);

/* Open trace `path` as a command needs it (`needs`, GT_CMD_*: with
 * gradtrace's views for GT_CMD_VIEWS) (cmd_util.c). On failure prints
 * "gradtrace: <why>" to stderr, returns 2 (the exit status for it) and
 * leaves *out untouched; on success prints what opening did to the file
 * (gt_trace_note) as "gradtrace: note: ..." and returns 0. */
GT_WARN_UNUSED int gt_cmd_open(unsigned needs, const char *path,
                               gt_trace **out /* OUT */);

/* A usage error: print one line, "gradtrace: <cmd>: <message> (see gradtrace
 * <cmd> --help)", to stderr (usage is what --help prints; not printed here);
 * returns 2, the exit status for it (cmd_util.c). */
int gt_usage_error(const char *cmd, void (*usage)(FILE *), const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Where the document `name` (SCHEMA.md, guide.md, ...) is on this machine:
 * the installed package's copy (gradtrace/docs/ beside the _bin/ folder of
 * the running command) when it is there, else the source tree's (the
 * command built in a build tree), else `name` under "docs/" or "schema/"
 * as the repository names it. Writes at most n bytes into buf (always
 * terminated) and returns buf; can't fail (cmd_util.c). */
const char *gt_doc_path(const char *name, char *buf, size_t n);

#endif
