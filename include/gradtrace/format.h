/*
 * The trace format's values: the one place where the recorder (which
 * writes traces) and the inspector (which reads them) meet, beside the DDL
 * itself (schema/gradtrace.sql, documented in schema/SCHEMA.md).
 * tests/test_format.c checks this header against that DDL: the table list,
 * the rows of the lookup tables and the run's initial status.
 *
 * Each enumeration is one X-macro list, X(enumerator, value, name), from
 * which the C enum and the name stored in the trace (lookup table row or
 * status text) both come.
 */
#ifndef GRADTRACE_FORMAT_H
#define GRADTRACE_FORMAT_H

#ifdef __cplusplus
extern "C" {
#endif

/* Schema version written by this release (PRAGMA user_version and
 * run.schema_version of the trace); readers open this version and older. */
#define GT_SCHEMA_VERSION 6
/* The gradtrace release (run.gradtrace_version), GT_VERSION_STRING: the
 * build defines it from CMakeLists.txt's project(VERSION), the version the
 * Python package has too. */
#ifndef GT_VERSION_STRING
#error "GT_VERSION_STRING comes from the build (CMakeLists.txt, add_compile_definitions)"
#endif

/* Roles of an op's tensor argument: op_args.role, table roles. */
#define GT_ROLE_MAP(X)                                                                   \
    X(GT_ROLE_INPUT, 0, "input")                                                         \
    X(GT_ROLE_OUTPUT, 1, "output")                                                       \
    X(GT_ROLE_MUTATED, 2, "mutated")

/* Phases of an op: ops.phase, table phases. */
#define GT_PHASE_MAP(X)                                                                  \
    X(GT_PHASE_FORWARD, 0, "forward")                                                    \
    X(GT_PHASE_BACKWARD, 1, "backward")                                                  \
    X(GT_PHASE_OTHER, 2, "other")

/* How a run ended: run.status holds the name. A run that has not ended
 * (still recording, or killed) has GT_RUN_STATUS_RUNNING, the column's
 * default. */
#define GT_RUN_STATUS_MAP(X)                                                             \
    X(GT_RUN_OK, 0, GT_RUN_STATUS_OK)                                                    \
    X(GT_RUN_EXCEPTION, 1, GT_RUN_STATUS_EXCEPTION)                                      \
    X(GT_RUN_SIGNAL, 2, GT_RUN_STATUS_SIGNAL)
/* The names as literals, for SQL text: "... WHERE status = '" GT_RUN_STATUS_OK "'" */
#define GT_RUN_STATUS_OK        "ok"
#define GT_RUN_STATUS_EXCEPTION "exception"
#define GT_RUN_STATUS_SIGNAL    "signal"
#define GT_RUN_STATUS_RUNNING   "running"

/* How a backward call ended: backward_calls.status holds the name
 * (GT_BACKWARD_RUNNING, the column's default, while it runs or if the
 * process died in it). */
#define GT_BACKWARD_STATUS_MAP(X)                                                        \
    X(GT_BACKWARD_RUNNING, 0, GT_BACKWARD_STATUS_RUNNING)                                \
    X(GT_BACKWARD_OK, 1, GT_BACKWARD_STATUS_OK)                                          \
    X(GT_BACKWARD_ERROR, 2, GT_BACKWARD_STATUS_ERROR)
/* The names as literals, for SQL text. */
#define GT_BACKWARD_STATUS_RUNNING "running"
#define GT_BACKWARD_STATUS_OK      "ok"
#define GT_BACKWARD_STATUS_ERROR   "error"

/* backward_calls.api of a call torch.compile made while compiling (its
 * AOTAutograd tracing the backward graph), not the user: this prefix, then
 * the API ("torch.compile: torch.autograd.grad"). Left out of the calls
 * `info` and `diagnose` list. */
#define GT_API_BY_COMPILER "torch.compile: "

#define GT__FORMAT_ENUM(name, value, text) name = value,
enum gt_role { GT_ROLE_MAP(GT__FORMAT_ENUM) };
enum gt_phase { GT_PHASE_MAP(GT__FORMAT_ENUM) };
enum gt_run_status { GT_RUN_STATUS_MAP(GT__FORMAT_ENUM) };
enum gt_backward_status { GT_BACKWARD_STATUS_MAP(GT__FORMAT_ENUM) };
#undef GT__FORMAT_ENUM

/* The tables of the schema, in the order schema/gradtrace.sql creates them
 * (views and indexes are not tables). X(name). */
/* clang-format off */
#define GT_TABLE_LIST(X)                                                 \
    X(run) X(strings) X(phases) X(roles) X(threads) X(frames) X(stacks)  \
    X(ops) X(op_args) X(storages) X(tensors) X(version_bumps) X(nodes)   \
    X(edges) X(node_outputs) X(saved_tensors) X(saved_earlier)           \
    X(backward_calls) X(backward_roots) X(backward_inputs) X(node_execs) \
    X(errors) X(storage_swaps) X(saved_fingerprints) X(names)         \
    X(kernel_writes)
/* clang-format on */

/* The name of a value of each enumeration, as the trace stores it; NULL for
 * a value outside the list. These functions can't fail. */
#define GT__FORMAT_CASE(name, value, text)                                               \
    case value:                                                                          \
        return text;
static inline const char *gt_role_name(int role)
{
    switch (role) {
        GT_ROLE_MAP(GT__FORMAT_CASE)
    }
    return 0;
}
static inline const char *gt_phase_name(int phase)
{
    switch (phase) {
        GT_PHASE_MAP(GT__FORMAT_CASE)
    }
    return 0;
}
static inline const char *gt_run_status_name(int status)
{
    switch (status) {
        GT_RUN_STATUS_MAP(GT__FORMAT_CASE)
    }
    return 0;
}
static inline const char *gt_backward_status_name(int status)
{
    switch (status) {
        GT_BACKWARD_STATUS_MAP(GT__FORMAT_CASE)
    }
    return 0;
}
#undef GT__FORMAT_CASE

#ifdef __cplusplus
}
#endif

#endif
