/* What the commands share (cmd.h): opening a trace as a command needs it,
 * and the usage error. Below every command: it calls none. */
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    (void)usage; /* `gradtrace CMD --help` prints it */
    fprintf(stderr, "gradtrace: %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see gradtrace %s --help)\n", cmd);
    return 2;
}

/* The repository folder a document lives in: the schema's own, or docs/. */
static const char *doc_folder(const char *name)
{
    return strcmp(name, "SCHEMA.md") ? "docs" : "schema";
}

const char *gt_doc_path(const char *name, char *buf, size_t n)
{
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        /* <site-packages>/gradtrace/_bin/gradtrace -> gradtrace/docs/NAME */
        char *bin = dirname(exe);
        snprintf(buf, n, "%s/../docs/%s", bin, name);
        char real[PATH_MAX];
        if (realpath(buf, real)) {
            snprintf(buf, n, "%s", real);
            return buf;
        }
    }
#ifdef GT_SOURCE_DIR
    snprintf(buf, n, "%s/%s/%s", GT_SOURCE_DIR, doc_folder(name), name);
    if (access(buf, R_OK) == 0)
        return buf;
#endif
    snprintf(buf, n, "%s/%s in gradtrace's sources", doc_folder(name), name);
    return buf;
}
