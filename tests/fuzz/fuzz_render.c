/*
 * libFuzzer harness: `gradtrace graph` laid out and rendered as SVG through
 * gvc -- Graphviz's dot layout and the SVG renderer on labels, colours and
 * sizes that came from the trace. The slow one: layout costs more than
 * everything else an input goes through.
 * See fuzz_common.h for how inputs are loaded and what counts as a bug.
 */
#include "cmd.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (gtf_load(data, size) != 0)
        return 0;
    const char *svg[] = {"graph", "--format", "svg", "-o", "-", gtf_path()};
    gtf_run(gt_cmd_graph, 6, svg);
    return 0;
}
