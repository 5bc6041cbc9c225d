/* gradtrace record: placeholder until its issue lands. */
#include <stdio.h>

#include "cmd.h"

int gt_cmd_record(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "gradtrace: record: not built yet\n");
    return 2;
}
