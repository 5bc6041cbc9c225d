/* gradtrace graph: placeholder until its issue lands. */
#include <stdio.h>

#include "cmd.h"

int gt_cmd_graph(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "gradtrace: graph: not built yet\n");
    return 2;
}
