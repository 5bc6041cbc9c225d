/*
 * trace_int.h - what the inspector's own modules share about a trace
 * handle beyond the public <gradtrace/trace.h>: clearing and setting the
 * handle's last error, and the table check. Not installed, not for cli/.
 */
#ifndef GT_TRACE_INT_H
#define GT_TRACE_INT_H

#include <string.h>

#include <gradtrace/trace.h>

/* Forget the handle's message: each top-level call on a trace
 * (gt_trace_use_views, gt_diagnose, gt_graph_build) starts with it, so
 * gt_trace_errmsg is "" after it succeeds. Can't fail. */
void gt__trace_clear(gt_trace *t);

/* 1 if the file has a table named `name`, else 0: for a table of this
 * gradtrace's schema (format.h's list) what opening read of the file's
 * schema, for another name a lookup in sqlite_schema (0 when it cannot
 * run). Can't fail. */
int gt__trace_has_table(gt_trace *t, const char *name);

/* Set the handle's message (printf) and return code; for the readers built
 * on the handle. */
int gt__trace_fail(gt_trace *t, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* file relative to dir (the part after "dir/") when it lies below dir, else
 * file itself: how every path of the output is shown. Can't fail. */
static inline const char *gt__path_below(const char *file, const char *dir)
{
    size_t n = dir ? strlen(dir) : 0;
    if (file && n > 1 && !strncmp(file, dir, n) && file[n] == '/')
        return file + n + 1;
    return file;
}

#endif /* GT_TRACE_INT_H */
