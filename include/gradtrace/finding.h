/*
 * A finding: what the diagnosis reports, one problem each, naming trace rows
 * by id (so a user can fetch whatever else it wants to show from the trace).
 * The kinds, their names and families, and the findings' memory. The types
 * every layer shares: the finders make findings, the suggester and the
 * report read them (diagnose.h runs the diagnosis that fills them).
 * Fields may be added; the ones here keep their meaning.
 */
#ifndef GT_INSPECTOR_FINDING_H
#define GT_INSPECTOR_FINDING_H

#include <stddef.h>
#include <stdint.h>

/* Every finding kind, once: X(NAME, value, "json name", FAMILY, printer).
 * The enum (GT_FINDING_NAME = value), the JSON names
 * (gt_finding_kind_name), the families (gt_finding_family) and the text
 * report's headline printers (report_text.c's head_<printer>) are made from
 * this list. Kinds added later are appended, never renumbered.
 *
 *   inplace_invalidated_saved  a saved tensor changed in place before the
 *                              backward that needed it (the replay, diagnose.c)
 *   silent_storage_write       ... changed through an alias autograd cannot
 *                              see (a c10d collective, a raw storage write)
 *   backward_twice             a second backward through a freed graph
 *   leaf_inplace               an in-place op on a leaf that requires grad
 *   unexplained                the run raised an error of the in-place family
 *                              that no finding explains (raised.c): what the
 *                              trace knows about it
 *   view_*                     PyTorch's view + in-place errors, raised at the
 *                              in-place op itself (raised.c): an output of
 *                              split, chunk, unbind, ...; a view made under
 *                              no_grad or in inference mode and changed
 *                              outside it; a view a custom Function returned
 *   silent_storage_swap        a saved tensor found on another storage (.data =,
 *                              set_; silent.c)
 *   silent_saved_write         a saved tensor's bytes changed without a
 *                              version bump (--check-saved; silent.c)
 *   inplace_overlap ...        in-place ops PyTorch refused for what the
 *   resize_requires_grad       written tensor is, raised at the op
 *                              (refused.c): elements that share memory (an
 *                              expand), an input sharing its memory, an
 *                              inference tensor changed outside it, a dtype
 *                              (int *= float) or shape the result does not
 *                              fit, detach_() on a view, resize_() of a
 *                              tensor that requires grad
 *   root_without_grad          backward() of a tensor with no grad_fn (cut.c):
 *                              where the graph was cut (detach, no_grad, an op
 *                              with no gradient, .item()), or the tensors it
 *                              comes from that never required grad
 *   grad_input_unreachable     an input of autograd.grad the outputs' graph
 *                              does not reach (never used, used elsewhere,
 *                              detached, under no_grad), or one that does not
 *                              require grad (cut.c)
 *   ddp_unused_parameters      DistributedDataParallel's "Expected to have
 *                              finished reduction in the prior iteration":
 *                              the parameters the backward before did not
 *                              reach, each with why (unused.c; gt_finding's
 *                              params)
 *   silent_kernel_write        a saved tensor written by an op that moved no
 *                              version (kernel_writes: BatchNorm's running
 *                              statistics in training mode, a fused
 *                              optimizer's step; include/gradtrace/kwrites.h)
 *                              before the backward that read it (diagnose.c) */
#define GT_FINDING_KINDS(X)                                                              \
    X(INPLACE_INVALIDATED_SAVED, 0, "inplace_invalidated_saved", SAVED, invalidated)     \
    X(SILENT_STORAGE_WRITE, 1, "silent_storage_write", SAVED, silent_write)              \
    X(BACKWARD_TWICE, 2, "backward_twice", SAVED, twice)                                 \
    X(LEAF_INPLACE, 3, "leaf_inplace", LEAF, leaf)                                       \
    X(UNEXPLAINED, 4, "unexplained", UNEXPLAINED, unexplained)                           \
    X(VIEW_MULTI_OUTPUT_INPLACE, 5, "view_multi_output_inplace", VIEW, view)             \
    X(VIEW_NO_GRAD_INPLACE, 6, "view_no_grad_inplace", VIEW, view)                       \
    X(VIEW_INFERENCE_INPLACE, 7, "view_inference_inplace", VIEW, view)                   \
    X(VIEW_CUSTOM_FUNCTION_INPLACE, 8, "view_custom_function_inplace", VIEW, view)       \
    X(SILENT_STORAGE_SWAP, 9, "silent_storage_swap", SAVED, swap)                        \
    X(SILENT_SAVED_WRITE, 10, "silent_saved_write", SAVED, saved_write)                  \
    X(INPLACE_OVERLAP, 11, "inplace_overlap", REFUSED, overlap)                          \
    X(INPLACE_INPUT_OVERLAP, 12, "inplace_input_overlap", REFUSED, input_overlap)        \
    X(INPLACE_INFERENCE_TENSOR, 13, "inplace_inference_tensor", REFUSED, inference)      \
    X(INPLACE_DTYPE, 14, "inplace_dtype", REFUSED, dtype)                                \
    X(INPLACE_SHAPE, 15, "inplace_shape", REFUSED, shape)                                \
    X(DETACH_VIEW_INPLACE, 16, "detach_view_inplace", REFUSED, detach_view)              \
    X(RESIZE_REQUIRES_GRAD, 17, "resize_requires_grad", REFUSED, resize)                 \
    X(ROOT_WITHOUT_GRAD, 18, "root_without_grad", CUT, root)                             \
    X(GRAD_INPUT_UNREACHABLE, 19, "grad_input_unreachable", CUT, input)                  \
    X(DDP_UNUSED_PARAMETERS, 20, "ddp_unused_parameters", DDP, ddp_unused)               \
    X(SILENT_KERNEL_WRITE, 21, "silent_kernel_write", SAVED, kernel_write)

#define GT__FINDING_ENUM(name, value, json, family, printer) GT_FINDING_##name = value,
enum gt_finding_kind { GT_FINDING_KINDS(GT__FINDING_ENUM) };
#undef GT__FINDING_ENUM

/* What a kind is about, and so how the report shows it: where the error
 * was raised and what else it names. */
enum gt_finding_family {
    GT_FAMILY_SAVED,       /* a saved tensor and the backward that needed it */
    GT_FAMILY_LEAF,        /* an in-place op on a leaf, raised at the op */
    GT_FAMILY_VIEW,        /* an in-place op on a view, raised at the op */
    GT_FAMILY_REFUSED,     /* an in-place op refused for what its tensor is */
    GT_FAMILY_CUT,         /* a graph that does not reach the root (input) */
    GT_FAMILY_UNEXPLAINED, /* an error no finding explains */
    GT_FAMILY_DDP,         /* parameters a backward left without a gradient,
                            * raised at DistributedDataParallel's next
                            * forward */
};

/* The kind's family (enum gt_finding_family); -1 for an unknown kind. */
int gt_finding_family(int kind);

/* The kind whose JSON name is `name`; -1 if none. */
int gt_finding_kind_of(const char *name);

/* root_without_grad, grad_input_unreachable: why the graph does not reach
 * the root (the input). */
enum gt_cut_reason {
    GT_CUT_NONE = 0,
    GT_CUT_DETACH,      /* "detach": detach() of a tensor with a graph */
    GT_CUT_NO_GRAD,     /* "no_grad": an op ran with grad mode off on one */
    GT_CUT_NO_GRADIENT, /* "not_differentiable": an op with no gradient
                         * (argmax, a comparison, an integer result) */
    GT_CUT_ITEM,        /* "item": a Python number from .item() made into
                         * a new tensor */
    GT_CUT_NO_SOURCE,   /* "no_input_requires_grad": nothing it comes from
                         * required grad (frozen parameters, plain data) */
    GT_CUT_DATA,        /* "data": it comes from `.data` of a tensor with a
                         * graph (an alias no op made) */
    /* grad_input_unreachable only (detach and no_grad as above, for the
     * first op that read the input): */
    GT_CUT_UNUSED,        /* "unused": no op read the input before the call */
    GT_CUT_OFF_PATH,      /* "not_on_path": ops read it, none on the way to
                           * the outputs */
    GT_CUT_INPUT_NO_GRAD, /* "input_does_not_require_grad" */
    GT_CUT_LATE,          /* "requires_grad_too_late": requires_grad was set
                           * after the ops read it */
};

/* A cut reason's name as printed in JSON (target.cut.reason: "detach",
 * ...); "" for GT_CUT_NONE or an unknown value. */
const char *gt_cut_reason_name(int reason);

/* The kind's name as printed in JSON ("inplace_invalidated_saved", ...). */
const char *gt_finding_kind_name(int kind);

typedef struct gt_mutation {
    int64_t seq;           /* ops.seq of the writing op */
    int64_t bump_seq;      /* version_bumps.seq, 0 for a silent write */
    int64_t tensor;        /* tensors.id written */
    int64_t version_after; /* counter value after the write, -1 if none */
    /* Added after the first contract: */
    int64_t stack; /* stacks.id of a write that has no op row (seq 0):
                    * an in-place op PyTorch refused before running
                    * it; 0 otherwise */
} gt_mutation;

/* ddp_unused_parameters: one parameter DDP got no gradient for. */
typedef struct gt_ddp_param {
    int64_t tensor; /* tensors.id, 0 if the index is none of DDP's list */
    int64_t index;  /* its index in DDP's parameter list, as the message
                     * numbers it */
    int reason;     /* enum gt_cut_reason: GT_CUT_UNUSED (no op read it in
                     * the forward), GT_CUT_OFF_PATH (read, but nothing
                     * from it reached the loss), GT_CUT_DETACH,
                     * GT_CUT_NO_GRAD (cut on the way); GT_CUT_NONE unknown */
    int64_t op;     /* ops.seq of the op that cut it, or (not_on_path) the
                     * first op that read it; 0 if none */
    int64_t made;   /* ops.seq of the op that made it (its module's line) */
    char *name;     /* DDP's name for it ("aux.weight"), NULL if unknown;
                     * owned */
} gt_ddp_param;

typedef struct gt_finding {
    int kind;                    /* enum gt_finding_kind */
    int first_to_fail;           /* 1 for the one the engine raises on */
    int64_t backward;            /* backward_calls.id, 0 if none */
    int64_t other_backward;      /* backward_twice: the earlier call that freed it */
    int64_t node;                /* nodes.id of the node that needs the tensor */
    int64_t saved_seq;           /* saved_tensors.seq, 0 if none */
    int64_t tensor;              /* tensors.id of the saved (or leaf) tensor */
    int64_t saved_version;       /* version at save, -1 if none */
    int64_t version_at_backward; /* counter value when backward reached it */
    size_t n_mutations;
    gt_mutation *mutations; /* in order; owned by the finding */
    char *suggestion;       /* owned by the finding */
    /* Added after the first contract (same meaning forever): */
    int64_t error_seq;   /* errors.seq of the error this finding explains
                          * (the backward's error, or the leaf op's), 0 if none */
    int matches_error;   /* 1: dtype, shape, versions (and the grad_fn, when
                          * PyTorch names one) equal the backward's error
                          * message's; backward_twice: the error is PyTorch's
                          * "second time" one; 0: they differ; -1: no error
                          * to compare with */
    int64_t stack;       /* stacks.id where it happened when there is no node
                          * (leaf_inplace: where the op raised), else 0 */
    int64_t op;          /* leaf_inplace: ops.seq of the in-place op if it was
                          * recorded, else 0 */
    char *name;          /* leaf_inplace and the view kinds: the variable
                          * the raising line changes, parsed from its code,
                          * NULL if none; owned by the finding */
    int64_t view_op;     /* view kinds, and leaf_inplace on a view of a leaf:
                          * ops.seq of the op that made the view (its
                          * origin), 0 if unknown */
    size_t n_candidates; /* unexplained: the tensors whose dtype, shape and
                          * versions match PyTorch's message (tensors.id,
                          * owned); their last writes are in mutations.
                          * root_without_grad: the tensors without a graph
                          * the root comes from (at most 8) */
    int64_t *candidates;
    int mismatch;          /* unexplained: 1 if a finding was marked first to
                            * fail for the error's backward call but does not
                            * match the message */
    int outside_recording; /* unexplained: 1 if the graph of its backward call
                            * was built before recording started (nodes no
                            * recorded op made, first seen when the call
                            * began): their saves and the writes before are
                            * not in the trace */
    char *written;         /* leaf_inplace and the view kinds: the expression
                            * the raising line changes in place as the user
                            * wrote it ("v1[0]", "x[:, 1]", "m.weight[0]"),
                            * NULL if the line is not of a known form; owned */
    int cut;               /* root_without_grad: enum gt_cut_reason */
    int64_t other;         /* inplace_input_overlap: the input sharing the
                            * written tensor's memory; inplace_shape: the
                            * operand of the broadcast shape;
                            * root_without_grad: the input with a graph the
                            * cut took; ddp_unused_parameters: the rank the
                            * message names, -1 if none; else 0 */
    size_t n_params;       /* ddp_unused_parameters: the parameters, in the
                            * message's order (owned); op is the
                            * DistributedDataParallel(...) call's first op */
    gt_ddp_param *params;
} gt_finding;

typedef struct gt_findings {
    size_t n;
    gt_finding *v; /* owned */
} gt_findings;

/* Free what a finding owns (not the finding). Can't fail. */
void gt_finding_release(gt_finding *f);

/* Free findings; accepts NULL. */
void gt_findings_free(gt_findings *f);

#endif
