/*
 * The life of a variable's version counter (`gradtrace history`): for a
 * variable name, every tensor bound to it (the last five, or every one),
 * for a tensor id that tensor; then every event on its version counter
 * (which its views and detach() share): created or first seen, written,
 * saved for backward, used as a backward root, and with reads every op
 * that read it, each with its user line.
 */
#ifndef GT_INSPECTOR_HISTORY_H
#define GT_INSPECTOR_HISTORY_H

#include <stdio.h>

#include <gradtrace/trace.h>

/* How many of the tensors bound to a name are shown without `all`. */
#define GT_HISTORY_LAST 5

/* Write the history of `what` (a variable name, or a tensor id in digits)
 * in trace t (named `path` in messages) to out: a line saying what is
 * shown and a table, or with json set the rows as a JSON array. reads:
 * include the ops that read it; all: every tensor bound to the name, not
 * the last five. Returns 0; 1 when the trace has no such variable or
 * tensor ("no variable 'x' in run.db; its variables include ..." on t,
 * terminal-safe); or a negative GT_E* code with the message on t. out may
 * hold a part on failure. */
int gt_history_print(gt_trace *t, const char *path, const char *what, int reads, int all,
                     int json, FILE *out);

#endif
