/*
 * Diagnosis: replay each backward call of a trace and report every saved
 * tensor whose value was changed between its save and the backward that
 * needed it (and the other finding kinds below).
 *
 * This header is the contract between the diagnosis (diagnose.c, replay.c)
 * and its users (cli/cmd_diagnose.c, graph.c). Findings refer to trace rows by
 * id, so a user can fetch whatever else it wants to show from the trace.
 * Fields may be added; the ones here keep their meaning.
 */
#ifndef GT_INSPECTOR_DIAGNOSE_H
#define GT_INSPECTOR_DIAGNOSE_H

#include <stddef.h>
#include <stdint.h>

#include "trace.h"

enum gt_finding_kind {
    GT_FINDING_INPLACE_INVALIDATED_SAVED = 0, /* "inplace_invalidated_saved" */
    GT_FINDING_SILENT_STORAGE_WRITE = 1,      /* "silent_storage_write" */
    GT_FINDING_BACKWARD_TWICE = 2,            /* "backward_twice" */
    GT_FINDING_LEAF_INPLACE = 3,              /* "leaf_inplace" */
    /* The run raised an error of the in-place family that no finding
     * explains (the replay cannot pin it): what the trace knows about it. */
    GT_FINDING_UNEXPLAINED = 4, /* "unexplained" */
    /* PyTorch's view + in-place errors, raised at the in-place op itself: */
    GT_FINDING_VIEW_MULTI_OUTPUT_INPLACE = 5,    /* "view_multi_output_inplace":
                                                  * an output of split, chunk,
                                                  * unbind, ... */
    GT_FINDING_VIEW_NO_GRAD_INPLACE = 6,         /* "view_no_grad_inplace": a view
                                                  * made under no_grad, changed
                                                  * with grad mode on */
    GT_FINDING_VIEW_INFERENCE_INPLACE = 7,       /* "view_inference_inplace": a
                                                  * view made in inference mode,
                                                  * changed in normal mode */
    GT_FINDING_VIEW_CUSTOM_FUNCTION_INPLACE = 8, /* "view_custom_function_inplace":
                                                  * a view returned by a custom
                                                  * autograd Function */
    /* Writes PyTorch cannot see (silent.c): */
    GT_FINDING_SILENT_STORAGE_SWAP = 9, /* "silent_storage_swap": a saved
                                         * tensor found on another storage
                                         * (.data =, set_) */
    GT_FINDING_SILENT_SAVED_WRITE = 10, /* "silent_saved_write": a saved
                                         * tensor's bytes changed without a
                                         * version bump (--check-saved) */
    /* In-place ops PyTorch refused for what the written tensor is, raised
     * at the op (refused.c): */
    GT_FINDING_INPLACE_OVERLAP = 11,          /* "inplace_overlap": elements of
                                               * the written tensor share memory
                                               * (an expand, broadcast_to) */
    GT_FINDING_INPLACE_INPUT_OVERLAP = 12,    /* "inplace_input_overlap": an
                                               * input of the op shares memory
                                               * with the written tensor */
    GT_FINDING_INPLACE_INFERENCE_TENSOR = 13, /* "inplace_inference_tensor": a
                                               * tensor made in inference mode,
                                               * changed outside it */
    GT_FINDING_INPLACE_DTYPE = 14,            /* "inplace_dtype": the result's
                                               * dtype does not fit the written
                                               * tensor's (int *= float) */
    GT_FINDING_INPLACE_SHAPE = 15,            /* "inplace_shape": the broadcast
                                               * result is larger than the
                                               * written tensor */
    GT_FINDING_DETACH_VIEW_INPLACE = 16,      /* "detach_view_inplace":
                                               * detach_() on a view */
    GT_FINDING_RESIZE_REQUIRES_GRAD = 17,     /* "resize_requires_grad":
                                               * resize_() of a tensor that
                                               * requires grad */
    /* backward() of a tensor with no grad_fn (cut.c): */
    GT_FINDING_ROOT_WITHOUT_GRAD = 18,      /* "root_without_grad": where the
                                             * graph was cut (detach, no_grad, an
                                             * op with no gradient, a tensor made
                                             * from .item()), or the tensors it
                                             * comes from that never required
                                             * grad */
    GT_FINDING_GRAD_INPUT_UNREACHABLE = 19, /* "grad_input_unreachable":
                                             * an input of autograd.grad the
                                             * outputs' graph does not reach
                                             * (never used, used elsewhere,
                                             * detached, under no_grad), or
                                             * one that does not require
                                             * grad */
    /* DistributedDataParallel's "Expected to have finished reduction in the
     * prior iteration": the parameters the backward before did not reach,
     * each with why (unused.c; gt_finding.params): */
    GT_FINDING_DDP_UNUSED_PARAMETERS = 20, /* "ddp_unused_parameters" */
    /* Kinds added later are appended here, never renumbered. */
};

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

typedef struct gt_diagnose_options {
    int64_t backward; /* restrict to this backward_calls.id; 0 = all */
} gt_diagnose_options;

/* Replay the backward calls of `t` and collect findings into *out.
 * Returns 0 (even with zero findings) or a negative GT_E* code with a
 * one-line message on t (gt_trace_errmsg); *out is written only on
 * success. */
GT_WARN_UNUSED int gt_diagnose(gt_trace *t, const gt_diagnose_options *opts,
                               gt_findings **out /* OUT */);

/* silent.c: append the findings of writes PyTorch cannot see (storage
 * swaps) for backward call `only` (0: all) to f, growing f->v to exactly its
 * new size: call it after every other finding is added. Returns 0 or a
 * negative GT_E* code with the message on t (f then holds what was added). */
struct sqlite3;
GT_WARN_UNUSED int gt__diagnose_silent(gt_trace *t, int64_t only, gt_findings *f);

/* 1 if the node that saved row `saved_seq` (saved_tensors.seq) never reads
 * it in its backward (BatchNorm's running statistics in training mode), so
 * a write to it is no silent write (silent.c). */
int gt__dx_slot_unread(struct sqlite3 *db, int64_t saved_seq);

/* 1 if tensor `tensor` (tensors.id) was made under torch.func's vmap, whose
 * messages show one sample's shape (silent.c). */
int gt__dx_under_vmap(struct sqlite3 *db, int64_t tensor);

/* The `target` of a ddp_unused_parameters finding as JSON (SQLite's json
 * functions), malloc'd into *out: {"rank", "ddp": {"location",
 * "fixed_code"}, "parameters": [{"index", "name", "module", "tensor",
 * "dtype", "shape", "names", "reason", "seq", "op", "location",
 * "made_at", "fixed_code"}]} (docs/diagnose.md). Returns 0 or a negative
 * GT_E* code with the message on t (unused.c). */
GT_WARN_UNUSED int gt_ddp_unused_json(gt_trace *t, const gt_finding *f,
                                      char **out /* OUT */);

/* Free findings; accepts NULL. */
void gt_findings_free(gt_findings *f);

#endif
