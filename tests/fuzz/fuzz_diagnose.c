/*
 * libFuzzer harness: open + diagnose, text and JSON (`gradtrace diagnose
 * TRACE`, `gradtrace diagnose --json TRACE`), the door every command goes
 * through and the command users run first on a trace somebody sent.
 * See fuzz_common.h for how inputs are loaded and what counts as a bug.
 */
#include "cmd.h"
#include "fuzz_common.h"

/* One output per input, text or JSON, chosen by a hash of the input so a
 * given input always takes the same path (both would open and diagnose the
 * trace twice: half the rate). Every mutation of a trace draws again, so
 * each trace is seen both ways. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (gtf_load(data, size) != 0)
        return 0;
    if (gtf_hash(data, size) & 1) {
        const char *json[] = {"diagnose", "--json", gtf_path()};
        gtf_run(gt_cmd_diagnose, 3, json);
    } else {
        const char *text[] = {"diagnose", "--color", "never", gtf_path()};
        gtf_run(gt_cmd_diagnose, 4, text);
    }
    return 0;
}
