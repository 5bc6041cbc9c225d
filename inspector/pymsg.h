/*
 * PyTorch's error messages, parsed: which error of the in-place family a
 * message is, and what it says about the tensor (dtype, shape, versions,
 * the grad_fn and output it names). Internal to the inspector. The texts
 * are PyTorch 2.13's (torch/csrc/autograd: SavedVariable::unpack,
 * check_inplace, handle_view_on_rebase, the engine's "second time" check);
 * older releases word a few differently ("Output 1 of SplitBackward0"),
 * which the parser accepts as well.
 */
#ifndef GT_INSPECTOR_PYMSG_H
#define GT_INSPECTOR_PYMSG_H

#include <stdint.h>

/* The error family gradtrace explains, one value per message PyTorch has. */
enum gt_pymsg_kind {
    GT_PYMSG_OTHER = 0,      /* not one of ours */
    GT_PYMSG_VERSION,        /* "one of the variables needed for gradient
                              * computation has been modified by an inplace
                              * operation: [...] is at version N; expected
                              * version M instead" */
    GT_PYMSG_TWICE,          /* "Trying to backward through the graph a
                              * second time ..." */
    GT_PYMSG_LEAF,           /* "a leaf Variable that requires grad is being
                              * used in an in-place operation." */
    GT_PYMSG_VIEW_OF_LEAF,   /* "a view of a leaf Variable that requires
                              * grad is being used in an in-place operation." */
    GT_PYMSG_VIEW_MULTI,     /* "Output N of F is a view and is being modified
                              * inplace. This view is the output of a function
                              * that returns multiple views. ..." */
    GT_PYMSG_VIEW_NO_GRAD,   /* "A view was created in no_grad mode and is
                              * being modified inplace with grad mode
                              * enabled. ..." (or "Output N of F is a view of a
                              * view which was created in no_grad mode ...") */
    GT_PYMSG_VIEW_INFERENCE, /* the same, "created in inference mode and is
                              * being modified inplace in normal mode" */
    GT_PYMSG_LEAF_MOVED,     /* the engine's "a leaf Variable that requires grad
                              * has been used in an in-place operation." and
                              * "leaf variable has been moved into the graph
                              * interior" (raised in backward) */
    GT_PYMSG_VIEW_CUSTOM,    /* "Output N of F is a view and is being modified
                              * inplace. This view was created inside a custom
                              * Function (or because an input was returned
                              * as-is) ..." */
    GT_PYMSG_CAPTURED,       /* torch.func's "During a grad (vjp, jvp, grad,
                              * etc) transform, the function provided attempted
                              * to call in-place operation (OP) that would
                              * mutate a captured Tensor." */
    /* In-place ops PyTorch refuses for what the written tensor is, raised
     * at the op (the kernel's checks, or the autograd layer's): */
    GT_PYMSG_OVERLAP,       /* "unsupported operation: more than one element
                             * of the written-to tensor refers to a single
                             * memory location. ..." (an expanded tensor) */
    GT_PYMSG_OVERLAP_INPUT, /* "unsupported operation: some elements of the
                             * input tensor and the written-to tensor refer to
                             * a single memory location. ..." */
    GT_PYMSG_INFERENCE,     /* "Inplace update to inference tensor outside
                             * InferenceMode is not allowed. ..." */
    GT_PYMSG_DTYPE,         /* "result type Float can't be cast to the
                             * desired output type Long" */
    GT_PYMSG_SHAPE,         /* "output with shape [3] doesn't match the
                             * broadcast shape [2, 3]" */
    GT_PYMSG_DETACH_VIEW,   /* "Can't detach views in-place. Use detach()
                             * instead. ..." */
    GT_PYMSG_RESIZE_GRAD,   /* "cannot resize variables that require grad" */
    /* Not an in-place error, but one every user meets, explained from the
     * same records: */
    GT_PYMSG_NO_GRAD_FN,  /* "element 0 of tensors does not require grad and
                           * does not have a grad_fn" (backward of a tensor
                           * cut from the graph) */
    GT_PYMSG_GRAD_UNUSED, /* autograd.grad: "The differentiated Tensor at index
                           * N appears to not have been used in the graph"
                           * ("One of the differentiated Tensors ..." before
                           * 2.x): N in output_nr, -1 if not given */
    GT_PYMSG_GRAD_NO_REQ, /* autograd.grad: "One of the differentiated Tensors
                           * does not require grad" */
};

/* A parsed message; what it quotes from the message (any number of sizes,
 * any name) is held on the heap: gt__pymsg_release frees it. */
typedef struct gt_pymsg {
    int kind; /* enum gt_pymsg_kind */
    /* GT_PYMSG_VERSION: */
    int has_versions;  /* 1 if dtype, shape and both versions were read */
    char dtype[16];    /* "float32" for [torch.FloatTensor ...]: one of a
                        * fixed list of names, "" for another type */
    const char *shape; /* "16,8": the sizes without brackets or spaces;
                        * "" if none; inside text */
    int64_t version, expected;
    /* GT_PYMSG_VERSION (", which is output N of NAME,") and the view kinds
     * ("Output N of NAME is a view"): */
    const char *grad_fn; /* NAME, "" if the message names none; inside text */
    int64_t output_nr;
    /* GT_PYMSG_DTYPE: the result's and the written tensor's dtypes as
     * PyTorch's Python names ("float32", "int64"; the message's own word
     * when it is none of the known ones, "" if unread). GT_PYMSG_SHAPE:
     * the written tensor's sizes in shape, the broadcast result's in
     * bshape ("2,3"; "" if unread, inside text). */
    char result_dtype[24], out_dtype[24];
    const char *bshape;
    char *text; /* owns shape, grad_fn and bshape; NULL when all are "" */
} gt_pymsg;

/* Parse `msg` (NULL reads as an empty message) into *out: a message of no
 * known kind gives kind GT_PYMSG_OTHER. Returns 0, or -1 when out of memory
 * (then *out is that of an empty message and holds no memory). */
int gt__pymsg_parse(const char *msg, gt_pymsg *out /* OUT */);

/* Free what a parsed message holds (it reads as an empty one after).
 * Can't fail. */
void gt__pymsg_release(gt_pymsg *m);

/* 1 for the kinds PyTorch raises at the in-place op itself (leaf and view
 * errors), 0 for the others. */
int gt__pymsg_at_op(int kind);

/* 1 for the kinds of an in-place op refused for what its tensor is
 * (GT_PYMSG_OVERLAP .. GT_PYMSG_RESIZE_GRAD), 0 for the others. */
int gt__pymsg_refused(int kind);

/* The SQL LIKE patterns that select the messages of the family (for a
 * query over the errors table), as one "message LIKE ... OR ..." text. */
#define GT__PYMSG_FAMILY_SQL                                                             \
    "(message LIKE '%modified by an inplace operation%'"                                 \
    " OR message LIKE '%backward through the graph a second time%'"                      \
    " OR message LIKE '%leaf Variable that requires grad is being used in an in-place%'" \
    " OR message LIKE '%leaf Variable that requires grad has been used in an in-place%'" \
    " OR message LIKE '%leaf variable has been moved into the graph interior%'"          \
    " OR message LIKE '%is a view and is being modified inplace%'"                       \
    " OR message LIKE '%is a view of a view which was created in%'"                      \
    " OR message LIKE '%view was created in%mode and is being modified inplace%'"        \
    " OR message LIKE '%that would mutate a captured Tensor%'"                           \
    " OR message LIKE '%the written-to tensor refer%to a single memory location%'"       \
    " OR message LIKE '%Inplace update to inference tensor outside InferenceMode%'"      \
    " OR message LIKE '%result type % can''t be cast to the desired output type %'"      \
    " OR message LIKE '%output with shape [%] doesn''t match the broadcast shape [%'"    \
    " OR message LIKE '%Can''t detach views in-place%'"                                  \
    " OR message LIKE '%cannot resize variables that require grad%'"                     \
    " OR message LIKE '%does not require grad and does not have a grad_fn%'"             \
    " OR message LIKE '%differentiated Tensor%')"

/* 1 if a tensor recorded with sizes `recorded` ("3,4") is the tensor a
 * message showing `shown` ("4") names: the same sizes or, for a tensor made
 * under torch.func's vmap (`batched`), the sizes with batch dimensions taken
 * out (vmap's messages show one sample's shape, the trace holds the
 * physical batched tensor the ops ran on). */
int gt__pymsg_shape_fits(const char *recorded, const char *shown, int batched);

#endif
