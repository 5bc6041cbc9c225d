/* gradtrace info: placeholder until its issue lands. */
#include <stdio.h>

#include "cmd.h"

int gt_cmd_info(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "gradtrace: info: not built yet\n");
    return 2;
}
