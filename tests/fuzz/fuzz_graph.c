/*
 * libFuzzer harness: `gradtrace graph` up to and including DOT output --
 * the diagnosis that picks the focus, building the graph through cgraph,
 * and writing it as DOT -- without layout, which fuzz_render covers.
 * See fuzz_common.h for how inputs are loaded and what counts as a bug.
 */
#include "cmd.h"
#include "fuzz_common.h"

/* The graph around the findings, or the whole backward call (--all) one
 * hop further: one of the two per input, chosen by a hash of the input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (gtf_load(data, size) != 0)
        return 0;
    if (gtf_hash(data, size) & 1) {
        const char *all[] = {"graph", "--all", "--hops", "1", "-o", "-", gtf_path()};
        gtf_run(gt_cmd_graph, 7, all);
    } else {
        const char *focus[] = {"graph", "-o", "-", gtf_path()};
        gtf_run(gt_cmd_graph, 4, focus);
    }
    return 0;
}
