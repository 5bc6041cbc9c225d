/*
 * Kernel writes: the ops that write a tensor argument without their schema
 * marking it written (`Tensor(a!)`) and without moving its version counter.
 * Both adapters record such a write (table kernel_writes, schema v6) when
 * the op ran and the counter did not move; the inspector reports a saved
 * tensor written this way before the backward that read it
 * (silent_kernel_write). One list, read by the engine adapter's shim, the
 * dispatch adapter (which hands it to Python as kernel_writes()), the
 * inspector (the reason it prints) and tests/e2e/test_kernel_writes.py,
 * which finds the family by running every registered op that takes a
 * running-statistics argument and checks the list against what it found.
 *
 * X(op, args, when, reason):
 *   op      the operator's name without its overload ("aten::native_batch_norm";
 *           every overload, .out included, is meant)
 *   args    the written arguments' names, comma-separated, as the schema names
 *           them
 *   when    the name of a bool argument that must be true for the write to
 *           happen ("training"), or "" for always
 *   reason  why the op writes them, one sentence for the report
 *
 * Writes the schema does mark are not listed: an argument marked written
 * whose counter did not move after the op returned (a fused optimizer's
 * kernel, which has no ADInplaceOrView kernel to bump it) is recorded the
 * same way by rule. Nor are c10d's in-place collectives (their own rule,
 * SCHEMA.md "op_args"). Docs: docs/diagnose.md, "Kernel writes".
 */
#ifndef GRADTRACE_KWRITES_H
#define GRADTRACE_KWRITES_H

#include <string.h>

/* clang-format off */
#define GT_KERNEL_WRITES(X)                                                              \
    X("aten::native_batch_norm", "running_mean,running_var", "training",                 \
      "BatchNorm in training mode updates its running statistics in place")             \
    X("aten::cudnn_batch_norm", "running_mean,running_var", "training",                  \
      "cuDNN's BatchNorm in training mode updates its running statistics in place")     \
    X("aten::miopen_batch_norm", "running_mean,running_var", "training",                 \
      "MIOpen's BatchNorm in training mode updates its running statistics in place")    \
    X("aten::batch_norm_update_stats", "running_mean,running_var", "",                   \
      "it updates the running statistics in place with the batch's")                   \
    X("aten::batch_norm_gather_stats", "running_mean,running_var", "",                   \
      "SyncBatchNorm's CUDA kernel updates the running statistics in place")            \
    X("aten::batch_norm_gather_stats_with_counts", "running_mean,running_var", "",       \
      "SyncBatchNorm's CUDA kernel updates the running statistics in place")
/* clang-format on */

/* Ops whose schema marks an argument written though they change none of
 * its elements (metadata, autograd state): never a kernel write. X(op). */
/* clang-format off */
#define GT_WRITES_NO_ELEMENT(X)                                                          \
    X("aten::detach_") X("aten::record_stream") X("aten::requires_grad_")                \
    X("aten::retain_grad") X("aten::set_data") X("aten::_coalesced_")
/* clang-format on */

/* The reason of op `name` ("aten::native_batch_norm", an overload name
 * after a '.' ignored), NULL if it is not listed. Can't fail. */
static inline const char *gt_kernel_write_reason(const char *name)
{
    size_t n = 0;
    while (name[n] && name[n] != '.')
        n++;
#define GT__KW_REASON(op, args, when, reason)                                            \
    if (sizeof(op) - 1 == n && !memcmp(op, name, n))                                     \
        return reason;
    GT_KERNEL_WRITES(GT__KW_REASON)
#undef GT__KW_REASON
    return 0;
}

#endif
