/*
 * What the libFuzzer harnesses of the trace reader share (fuzz_common.c).
 *
 * Each harness (fuzz_diagnose.c, fuzz_query.c, fuzz_graph.c, fuzz_render.c)
 * is one executable that defines LLVMFuzzerTestOneInput and runs one entry
 * point of the inspector on every input, through the commands exactly as a
 * user runs them (argv in, exit status out).
 *
 * Inputs reach the inspector from memory: SQLite's memdb VFS is made the
 * default VFS, so the path a command opens, an absolute one, names a memdb
 * database shared between the connections of this process; gtf_load() puts
 * each input into it with one write. A real file at that path has the
 * input's size and first 512 bytes, which is all gt_trace_open reads itself
 * (stat, the 16-byte header); every page SQLite reads comes from memory.
 * The inspector's own open path is used unchanged.
 *
 * What counts as a bug: any sanitizer report, a crash, a hang (libFuzzer's
 * -timeout), a leak (LeakSanitizer, at exit and in -runs; for SQLite's
 * memory, which fuzz_mem.c serves, gtf_run's count), or a command
 * returning something other than 0, 1 (diagnose found problems) or 2
 * (unreadable input): gtf_run() aborts on that so the fuzzer keeps the input.
 *
 * Half of the mutations are libFuzzer's byte-level ones, half change the
 * input as a trace, with SQL (LLVMFuzzerCustomMutator, in fuzz_common.c).
 *
 * With GT_FUZZ_VERBOSE=1 in the environment the commands' output is not
 * silenced (to reproduce one input by hand); with GT_FUZZ_PROFILE=1 each
 * command's wall time goes to stderr.
 */
#ifndef GT_TESTS_FUZZ_COMMON_H
#define GT_TESTS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size,
                               unsigned seed);

/* The path the commands open: it holds the current input. */
const char *gtf_path(void);

/* Make data[size] the trace at gtf_path(). Returns 0, or -1 if it could not
 * (then the input is skipped). */
int gtf_load(const uint8_t *data, size_t size);

/* A hash of data[size] (FNV-1a over about 1024 of its bytes), for harnesses that pick one
 * of several paths per input: the same input always takes the same one. */
uint32_t gtf_hash(const uint8_t *data, size_t size);

/* Run one subcommand with argv args[0..argc-1] (args[0] the command's
 * name), its stdout and stderr silenced; returns its exit status, and
 * aborts on one no command documents (not 0, 1 or 2). */
int gtf_run(int (*cmd)(int, char **), int argc, const char *const *args);

/* SQLite's allocator for the harnesses (fuzz_mem.c): size classes in large
 * blocks, poisoned for ASan by hand, freed ones reused first in first out.
 * gtf_mem_install() makes it SQLite's (SQLITE_CONFIG_MALLOC; before any other
 * SQLite call): 0, or -1 if SQLite refused. gtf_mem_live(): the allocations
 * SQLite holds now (gtf_run checks a command leaves none behind). */
int gtf_mem_install(void);
long long gtf_mem_live(void);

#endif
