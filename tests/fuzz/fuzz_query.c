/*
 * libFuzzer harness: the commands that query a trace as tables -- sql (this
 * gradtrace's TEMP views and raw queries, in every output mode), info (text
 * and JSON) and history (text and JSON).
 * See fuzz_common.h for how inputs are loaded and what counts as a bug.
 */
#include "cmd.h"
#include "fuzz_common.h"

/* The views and a few raw queries, grouped so each command runs several
 * statements. A statement that fails stops its group, so the views a
 * hostile trace may have broken are spread out. */
static const struct {
    const char *mode;
    const char *sql;
} queries[] = {
    {"--table", "SELECT * FROM invalidations"},
    {"--json", "SELECT * FROM tensor_history; SELECT * FROM op_log; SELECT * FROM saved"},
    /* Not stack_frames: on a cycle in stacks.parent it never ends, even
     * under a LIMIT. Not backward_reach: on a cycle in edges its recursive
     * CTE never ends (it carries depth through a UNION). Both known. */
    {"--csv", "SELECT * FROM backward_log; SELECT * FROM error_log; SELECT * FROM run"},
    {"--tsv", "SELECT * FROM graph_edges; SELECT * FROM tensor_info; "
              "SELECT * FROM variables; SELECT * FROM saved_memory; "
              "SELECT * FROM mutations; SELECT * FROM events LIMIT 500"},
    {"--table", "PRAGMA quick_check"},
};

/* info, the door (a trace it refuses, every command refuses the same way),
 * then one of the other commands, chosen by a hash of the input so a given
 * input always takes the same path: all nine on every input would open the
 * trace and build the views nine times (a quarter of the rate). Every
 * mutation of a trace draws again. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (gtf_load(data, size) != 0)
        return 0;
    const char *path = gtf_path();
    const char *info[] = {"info", path};
    if (gtf_run(gt_cmd_info, 2, info) == 2)
        return 0;
    size_t nq = sizeof queries / sizeof queries[0];
    size_t k = gtf_hash(data, size) % (nq + 3);
    if (k < nq) {
        const char *a[] = {"sql", queries[k].mode, path, queries[k].sql};
        gtf_run(gt_cmd_sql, 4, a);
    } else if (k == nq) {
        const char *a[] = {"info", "--json", path};
        gtf_run(gt_cmd_info, 3, a);
    } else if (k == nq + 1) {
        const char *a[] = {"history", "--reads", path, "class_weights"};
        gtf_run(gt_cmd_history, 4, a);
    } else {
        const char *a[] = {"history", "--json", "--all", path, "1"};
        gtf_run(gt_cmd_history, 5, a);
    }
    return 0;
}
