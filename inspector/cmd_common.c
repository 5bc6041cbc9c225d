/* What the subcommands share; see cmd.h. */
#include <stdarg.h>
#include <stdio.h>

#include "cmd.h"

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
