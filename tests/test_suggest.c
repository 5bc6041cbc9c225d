/* Unit tests of the suggester (inspector/suggest.c, suggest_cut.c,
 * suggest_refused.c): the fix each finding gets, on traces built by hand
 * (no torch). The finders' own tests check what is found; these check
 * what the fix says. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define TB_PATH_PREFIX "gt_test_suggest"
#define TB_SOURCE_FILE "/src/suggest.py"
#include "findertrace.h"

/* The one finding of the trace at path, its fix checked to hold `want`. */
static void fix_holds(const char *path, int kind, const char *want)
{
    gt_findings *f = diagnose(path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, kind);
    assert_non_null(f->v[0].suggestion);
    if (!strstr(f->v[0].suggestion, want))
        printf("  want \"%s\" in: %s\n", want, f->v[0].suggestion);
    assert_non_null(strstr(f->v[0].suggestion, want));
    gt_findings_free(f);
    unlink(path);
}

/* A constant saved by a node and scaled in place before backward: update
 * a copy, or after backward. */
static void test_saved_constant_updated(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "saved");
    tb_tensor(&b, 100, 1, 3, 0, 0, 1, 0, 0, 0);
    tb_name(&b, 100, "scale");
    int64_t mul = tb_op(&b, "aten::mul.Tensor", GT_PHASE_FORWARD, 30, "y = x * scale");
    tb_node(&b, 1, "MulBackward0", mul, 1);
    tb_save(&b, 1, "other", 100, 0);
    tb_mutate(&b, "aten::mul_.Tensor", 31, "scale *= 0.5", 100, 1);
    gt_id bw = tb_backward(&b, 1, 0, 32);
    tb_backward_error(&b, bw, 32, "y.sum().backward()",
                      "one of the variables needed for gradient computation has been "
                      "modified by an inplace operation: [torch.FloatTensor [3]] is at "
                      "version 1; expected version 0 instead.");
    tb_close(&b, 1);
    fix_holds(b.path, GT_FINDING_INPLACE_INVALIDATED_SAVED, "scale.clone()");
}

/* A leaf that requires grad changed in place: under torch.no_grad(), with
 * the user's own line. */
static void test_leaf_under_no_grad(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "leaf");
    tb_tensor(&b, 10, 0, 3, 0, 1, 1, 0, 0, 0);
    tb_name(&b, 10, "w");
    assert_int_equal(gt_error(b.r, "RuntimeError",
                              "a leaf Variable that requires grad is being used in an "
                              "in-place operation.",
                              tb_stack(&b, 21, "    w.add_(1)"), 0, NULL),
                     0);
    tb_close(&b, 1);
    fix_holds(b.path, GT_FINDING_LEAF_INPLACE, "`with torch.no_grad(): w.add_(1)`");
}

/* A view of a multi-output op changed in place: its out-of-place form. */
static void test_view_out_of_place(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "view");
    tb_tensor(&b, 10, 1, 4, 0, 1, 1, 0, 0, 0);
    int64_t split =
        tb_op(&b, "aten::split.Tensor", GT_PHASE_FORWARD, 20, "a, c = x.split(2)");
    tb_tensor(&b, 11, 1, 2, 0, 1, 0, 10, 1, 10);
    assert_int_equal(gt_op_arg(b.r, split, GT_ROLE_OUTPUT, 0, 11, 0), 0);
    tb_name(&b, 11, "a");
    assert_int_equal(
        gt_error(b.r, "RuntimeError",
                 "Output 0 of SplitBackward0 is a view and is being modified "
                 "inplace. This view is the output of a function that "
                 "returns multiple views.",
                 tb_stack(&b, 21, "a += 1"), 0, NULL),
        0);
    tb_close(&b, 1);
    fix_holds(b.path, GT_FINDING_VIEW_MULTI_OUTPUT_INPLACE, "`a = a + (1)`");
}

/* A root cut from its graph by detach(): use the tensor itself (the
 * suggester's part for cut.c's findings, suggest_cut.c). */
static void test_cut_use_tensor_itself(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "cut");
    int64_t shape[1] = {4}, strides[1] = {1};
    gt_tensor_info w = {.id = 1,
                        .dtype = b.dtype,
                        .ndim = 1,
                        .shape = shape,
                        .strides = strides,
                        .requires_grad = 1,
                        .is_leaf = 1};
    assert_int_equal(gt_tensor(b.r, &w), 0);
    tb_name(&b, 1, "w");
    gt_node_info acc = {.id = 5,
                        .name = tb_str(&b, "AccumulateGrad"),
                        .sequence_nr = -1,
                        .thread = b.thread,
                        .variable = 1}; /* w has a graph */
    assert_int_equal(gt_node(b.r, &acc), 0);
    int64_t det = tb_op(&b, "aten::detach", GT_PHASE_FORWARD, 21, "z = w.detach()");
    assert_int_equal(gt_op_arg(b.r, det, GT_ROLE_INPUT, 0, 1, 0), 0);
    gt_tensor_info z = {.id = 2,
                        .dtype = b.dtype,
                        .ndim = 1,
                        .shape = shape,
                        .strides = strides,
                        .created_by = det};
    assert_int_equal(gt_tensor(b.r, &z), 0);
    assert_int_equal(gt_op_arg(b.r, det, GT_ROLE_OUTPUT, 0, 2, 0), 0);
    tb_name(&b, 2, "z");
    gt_backward_info bi = {.api = tb_str(&b, "Tensor.backward"),
                           .thread = b.thread,
                           .stack = tb_stack(&b, 30, "z.backward()")};
    gt_id bw;
    assert_int_equal(gt_backward_begin(b.r, &bi, &bw), 0);
    assert_int_equal(gt_backward_root(b.r, bw, 0, 2, 0), 0);
    tb_backward_error(&b, bw, 30, "z.backward()",
                      "element 0 of tensors does not require grad and does not have a "
                      "grad_fn");
    tb_close(&b, 1);
    fix_holds(b.path, GT_FINDING_ROOT_WITHOUT_GRAD, "`z = w`");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_saved_constant_updated),
        cmocka_unit_test(test_leaf_under_no_grad),
        cmocka_unit_test(test_view_out_of_place),
        cmocka_unit_test(test_cut_use_tensor_itself),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
