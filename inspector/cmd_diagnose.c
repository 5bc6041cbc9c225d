/* gradtrace diagnose: placeholder until its issue lands. */
#include <stdio.h>

#include "cmd.h"

int gt_cmd_diagnose(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "gradtrace: diagnose: not built yet\n");
    return 2;
}
