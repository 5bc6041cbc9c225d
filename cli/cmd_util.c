/* What the commands share (cmd.h): opening a trace as a command needs it,
 * and the usage error. Below every command: it calls none. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cmd.h"

int gt_cmd_open(unsigned needs, const char *path, gt_trace **out)
{
    gt_trace *t = NULL;
    if (gt_trace_open(path, &t) != 0 ||
        ((needs & GT_CMD_VIEWS) && gt_trace_use_views(t) != 0)) {
        fprintf(stderr, "gradtrace: %s\n", gt_trace_errmsg(t));
        gt_trace_close(t);
        return 2;
    }
    if (gt_trace_note(t)) /* what opening did: a killed trace finished */
        fprintf(stderr, "gradtrace: note: %s\n", gt_trace_note(t));
    *out = t;
    return 0;
}

int gt_usage_error(const char *cmd, void (*usage)(FILE *), const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "gradtrace: %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    usage(stderr);
    return 2;
}
