/*
 * Diagnosis: replay each backward call of a trace and report every saved
 * tensor whose value was changed between its save and the backward that
 * needed it (and the other finding kinds of finding.h).
 *
 * This header is the contract between the diagnosis (diagnose.c, replay.c)
 * and its users (report.c, graph.c). Findings refer to trace rows by
 * id, so a user can fetch whatever else it wants to show from the trace.
 * Fields may be added; the ones here keep their meaning.
 */
#ifndef GT_INSPECTOR_DIAGNOSE_H
#define GT_INSPECTOR_DIAGNOSE_H

#include <stdint.h>

#include <gradtrace/finding.h>
#include <gradtrace/trace.h>

typedef struct gt_diagnose_options {
    int64_t backward; /* restrict to this backward_calls.id; 0 = all */
} gt_diagnose_options;

/* Replay the backward calls of `t` and collect findings into *out.
 * Returns 0 (even with zero findings) or a negative GT_E* code with a
 * one-line message on t (gt_trace_errmsg); *out is written only on
 * success. */
GT_WARN_UNUSED int gt_diagnose(gt_trace *t, const gt_diagnose_options *opts,
                               gt_findings **out /* OUT */);

#endif
