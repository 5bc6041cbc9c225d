/* What the subcommands share; see cmd.h. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cmd.h"

/* The identity of a finding: what it says, without the trace's own row ids
 * (node, tensor and event numbers differ between ranks, and between the
 * nodes of a loop unrolled in one forward). KEY_HEAD and KEY_TAIL are what
 * gt_finding_site_key_sql shares. */
#define KEY_HEAD                                                                         \
    "SELECT json_array(f ->> '$.kind', f -> '$.node.name', f -> '$.node.location',"      \
    " f -> '$.saved.slot', f -> '$.saved.names', f -> '$.saved.dtype',"                  \
    " f -> '$.saved.shape', f -> '$.saved.version_at_backward',"
#define KEY_TAIL                                                                         \
    " f -> '$.backward.index', f -> '$.backward.location', f -> '$.freed_by.index',"     \
    " f -> '$.leaf', f -> '$.location', f -> '$.view.expression',"                       \
    " f -> '$.view.origin.location'"
const char gt_finding_key_sql[] = KEY_HEAD
    " f -> '$.saved.saved_version',"
    " (SELECT json_group_array(json_array(m.value ->> '$.op', m.value -> '$.location',"
    "   m.value -> '$.names', m.value -> '$.version_after'))"
    "  FROM json_each(f, '$.mutations') m),"
    " f ->> '$.suggestion'," KEY_TAIL ") FROM (SELECT ?1 AS f)";

/* The site of a finding: its identity without the versions its tensor was
 * saved at and written to (the writes as the set of their ops, lines and
 * names) nor the fix worded for that version's writes: the nodes one line
 * makes in each round of a loop, each saving the tensor the loop writes at
 * its version of it (f[i] = f[i - 1] * x). */
const char gt_finding_site_key_sql[] = KEY_HEAD
    " (SELECT json_group_array(w) FROM (SELECT DISTINCT"
    "  json_array(m.value ->> '$.op', m.value -> '$.location', m.value -> '$.names')"
    "  AS w FROM json_each(f, '$.mutations') m ORDER BY w))," KEY_TAIL
    ") FROM (SELECT ?1 AS f)";

const gt_command gt_commands[] = {
    {"record", gt_cmd_record, 0, "run a Python script and record its autograd activity"},
    {"diagnose", gt_cmd_diagnose, GT_CMD_TRACE,
     "replay backward and name the mutation that broke it"},
    {"graph", gt_cmd_graph, GT_CMD_TRACE, "draw the autograd graph (DOT, SVG, PNG)"},
    {"sql", gt_cmd_sql, GT_CMD_TRACE | GT_CMD_VIEWS,
     "query a trace with SQL (read-only)"},
    {"info", gt_cmd_info, GT_CMD_TRACE | GT_CMD_VIEWS,
     "summarise a trace: run, counts, backward calls, errors"},
    {"history", gt_cmd_history, GT_CMD_TRACE | GT_CMD_VIEWS,
     "every write, save and use of one variable's versions"},
    {"memory", gt_cmd_memory, GT_CMD_TRACE,
     "what backward holds in memory, by module, line and node type"},
};
const size_t gt_ncommands = sizeof gt_commands / sizeof gt_commands[0];

const gt_command *gt_command_find(const char *name)
{
    for (size_t i = 0; i < gt_ncommands; i++)
        if (!strcmp(name, gt_commands[i].name))
            return &gt_commands[i];
    return NULL;
}

int gt_cmd_open(const char *cmd, const char *path, gt_trace **out)
{
    const gt_command *c = gt_command_find(cmd);
    unsigned needs = c ? c->needs : GT_CMD_TRACE;
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
