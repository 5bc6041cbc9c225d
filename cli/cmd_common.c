/* The command table (cmd.h): what `gradtrace` runs. */
#include <stdio.h>
#include <string.h>

#include "cmd.h"

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
