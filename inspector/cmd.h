/*
 * The gradtrace subcommands. Each takes argc/argv with argv[0] the
 * subcommand's name, parses its options with getopt_long, and returns the
 * process exit status: 0 success (diagnose: no findings), 1 diagnose found
 * problems, 2 usage or input error. Messages go to stderr as
 * "gradtrace: <what failed>: <why>", lowercase, no trailing period.
 */
#ifndef GT_INSPECTOR_CMD_H
#define GT_INSPECTOR_CMD_H

#include <stdio.h>

int gt_cmd_record(int argc, char **argv);   /* cmd_record.c */
int gt_cmd_diagnose(int argc, char **argv); /* cmd_diagnose.c */
int gt_cmd_graph(int argc, char **argv);    /* cmd_graph.c */
int gt_cmd_sql(int argc, char **argv);      /* cmd_sql.c */
int gt_cmd_info(int argc, char **argv);     /* cmd_info.c */
int gt_cmd_history(int argc, char **argv);  /* cmd_history.c */


/* A usage error: print "gradtrace: <cmd>: <message>" and then the command's
 * usage to stderr; returns 2, the exit status for it (cmd_common.c). */
int gt_usage_error(const char *cmd, void (*usage)(FILE *), const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
