/* gradtrace sql: placeholder until its issue lands. */
#include <stdio.h>

#include "cmd.h"

int gt_cmd_sql(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "gradtrace: sql: not built yet\n");
    return 2;
}
