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

#include "trace.h"

int gt_cmd_record(int argc, char **argv);   /* cmd_record.c */
int gt_cmd_diagnose(int argc, char **argv); /* cmd_diagnose.c */
int gt_cmd_graph(int argc, char **argv);    /* cmd_graph.c */
int gt_cmd_sql(int argc, char **argv);      /* cmd_sql.c */
int gt_cmd_info(int argc, char **argv);     /* cmd_info.c */
int gt_cmd_history(int argc, char **argv);  /* cmd_history.c */
int gt_cmd_memory(int argc, char **argv);   /* cmd_memory.c */

/* `gradtrace info` over several traces: one line per trace, ordered by rank
 * (a table, or JSON with json set). Returns the exit status. */
int gt_multi_info(int npaths, char **paths, int json); /* cmd_multi.c */

/* `gradtrace diagnose` over several traces: each diagnosed on its own, then
 * each rank's outcome and every distinct finding once with its ranks. Exit
 * status: 1 if any rank has findings, else 2 if a trace could not be
 * diagnosed, else 0. */
int gt_multi_diagnose(int npaths, char **paths, int json, long long backward);

/* The notes a diagnosis carries besides its findings (cmd_diagnose.c), read
 * from its JSON document `doc` (`gradtrace diagnose --json`'s object) with
 * SQLite's JSON functions on `db` (any connection): GT_NOTE_COMPILED, the
 * line saying torch.compile'd code ran eagerly while recording (none if it
 * did not); GT_NOTE_OUTSIDE, one line per backward call that ran nodes whose
 * forward ran before recording started. Each line is terminal-safe text
 * without "note: " and newline. Returns 0 with *lines (malloc'd, free with
 * gt_diagnose_notes_free) and *n, or -1 when out of memory (or SQLite
 * fails) with *lines NULL and *n 0. */
enum { GT_NOTE_COMPILED, GT_NOTE_OUTSIDE };
int gt_diagnose_notes(sqlite3 *db, const char *doc, int which, char ***lines /* OUT */,
                      size_t *n /* OUT */);
void gt_diagnose_notes_free(char **lines, size_t n);

/* SQL (one parameter: a finding's JSON document, one row, one column) giving
 * the finding's identity: what its text says, without row ids. Two findings
 * with the same identity say the same thing (cmd_common.c). */
extern const char gt_finding_key_sql[];

/* The same for a finding's site: its identity but for the versions (the
 * version saved, the writes' versions, the fix's wording). Findings with one
 * site are one finding repeated, diagnose prints them once (cmd_common.c). */
extern const char gt_finding_site_key_sql[];

/* For each of fs's findings, into lead[i] (fs->n entries), the index of
 * the first of the findings with the same site (gt_finding_site_key_sql:
 * diagnose prints them as one, "repeated N times"). 0, or GT_ENOMEM /
 * GT_ESQL (cmd_diagnose.c). */
struct gt_findings;
int gt_findings_same(gt_trace *t, const struct gt_findings *fs, size_t *lead /* OUT */);

/* What a command needs before it can run (gt_command.needs). */
enum {
    GT_CMD_TRACE = 1 << 0, /* a trace opened with gt_trace_open */
    GT_CMD_VIEWS = 1 << 1, /* ... with gradtrace's TEMP views (gt_trace_use_views) */
};

/* The command table (cmd_common.c): what `gradtrace` runs (main.c), and the
 * Python extension too (inspector/python/_gtinspect.c). */
typedef struct gt_command {
    const char *name;
    int (*run)(int argc, char **argv);
    unsigned needs; /* GT_CMD_* */
    const char *help;
} gt_command;

extern const gt_command gt_commands[];
extern const size_t gt_ncommands;

/* The entry of command `name`, or NULL if there is none. */
const gt_command *gt_command_find(const char *name);

/* Open trace `path` as command `cmd` needs it (its table entry's flags:
 * with gradtrace's views for GT_CMD_VIEWS). On failure prints
 * "gradtrace: <why>" to stderr, returns 2 (the exit status for it) and
 * leaves *out untouched; on success prints what opening did to the file
 * (gt_trace_note) as "gradtrace: note: ..." and returns 0. */
GT_WARN_UNUSED int gt_cmd_open(const char *cmd, const char *path,
                               gt_trace **out /* OUT */);

/* A usage error: print "gradtrace: <cmd>: <message>" and then the command's
 * usage to stderr; returns 2, the exit status for it (cmd_common.c). */
int gt_usage_error(const char *cmd, void (*usage)(FILE *), const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
