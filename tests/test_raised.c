/* Unit tests of inspector/raised.c: errors PyTorch raises at the in-place
 * op itself (leaf_inplace, the view kinds) and errors nothing explains
 * (unexplained), on traces built by hand (no torch). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define TB_PATH_PREFIX "gt_test_raised"
#define TB_SOURCE_FILE "/src/raised.py"
#include "findertrace.h"

/* An error raised at line `line` (`code`), in no backward call. */
static void raise_at(tb *b, int line, const char *code, const char *msg)
{
    assert_int_equal(
        gt_error(b->r, "RuntimeError", msg, tb_stack(b, line, code), 0, NULL), 0);
}

static void test_leaf_written_through_subscript(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "leaf");
    tb_tensor(&b, 10, 0, 3, 0, 1, 1, 0, 0, 0);
    tb_name(&b, 10, "w");
    raise_at(
        &b, 21, "    w[0] = 1",
        "a leaf Variable that requires grad is being used in an in-place operation.");
    tb_close(&b, 1);
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, GT_FINDING_LEAF_INPLACE);
    assert_int_equal(f->v[0].tensor, 10);
    assert_string_equal(f->v[0].name, "w");
    assert_string_equal(f->v[0].written, "w[0]");
    assert_int_equal(f->v[0].first_to_fail, 1);
    assert_true(f->v[0].error_seq > 0);
    gt_findings_free(f);
    unlink(b.path);
}

static void test_view_of_multi_output(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "multi");
    tb_tensor(&b, 10, 1, 4, 0, 1, 1, 0, 0, 0);
    tb_name(&b, 10, "x");
    int64_t split =
        tb_op(&b, "aten::split.Tensor", GT_PHASE_FORWARD, 20, "a, c = x.split(2)");
    tb_tensor(&b, 11, 1, 2, 0, 1, 0, 10, 1, 10);
    assert_int_equal(gt_op_arg(b.r, split, GT_ROLE_OUTPUT, 0, 11, 0), 0);
    tb_name(&b, 11, "a");
    raise_at(&b, 21, "a.mul_(2)",
             "Output 0 of SplitBackward0 is a view and is being modified inplace. This "
             "view is the output of a function that returns multiple views. Such "
             "functions do not allow the output views to be modified inplace.");
    tb_close(&b, 1);
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, GT_FINDING_VIEW_MULTI_OUTPUT_INPLACE);
    assert_string_equal(f->v[0].name, "a");
    assert_int_equal(f->v[0].tensor, 11);
    gt_findings_free(f);
    unlink(b.path);
}

/* A view changed in place, raising `msg`: the kind, and the view named. */
static void view_kind(const char *name, const char *msg, int kind)
{
    tb b;
    tb_open(&b, name);
    tb_tensor(&b, 10, 1, 4, 0, 1, 1, 0, 0, 0);
    int64_t op = tb_op(&b, "aten::slice.Tensor", GT_PHASE_FORWARD, 20, "v = x[1:]");
    tb_tensor(&b, 11, 1, 3, 1, 1, 0, 10, 1, 10);
    assert_int_equal(gt_op_arg(b.r, op, GT_ROLE_OUTPUT, 0, 11, 0), 0);
    tb_name(&b, 11, "v");
    raise_at(&b, 21, "v.zero_()", msg);
    tb_close(&b, 1);
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, kind);
    assert_string_equal(f->v[0].name, "v");
    assert_int_equal(f->v[0].tensor, 11);
    gt_findings_free(f);
    unlink(b.path);
}

static void test_view_kinds(void **state)
{
    (void)state;
    view_kind("nograd",
              "A view was created in no_grad mode and is being modified inplace with "
              "grad mode enabled.",
              GT_FINDING_VIEW_NO_GRAD_INPLACE);
    view_kind("inference",
              "A view was created in inference mode and is being modified inplace in "
              "normal mode.",
              GT_FINDING_VIEW_INFERENCE_INPLACE);
    view_kind("custom",
              "Output 0 of MyFnBackward is a view and is being modified inplace. This "
              "view was created inside a custom Function (or because an input was "
              "returned as-is) and the autograd logic to handle view+inplace would "
              "override the custom backward associated with the custom Function.",
              GT_FINDING_VIEW_CUSTOM_FUNCTION_INPLACE);
}

/* A version error whose backward saved nothing the trace knows: the
 * replay cannot pin it, so it is unexplained, with the message's versions. */
static void test_unexplained_version_error(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "unexplained");
    tb_node(&b, 1, "MulBackward0", 0, 1);
    gt_id bw = tb_backward(&b, 1, 0, 30);
    tb_backward_error(&b, bw, 30, "loss.backward()",
                      "one of the variables needed for gradient computation has been "
                      "modified by an inplace operation: [torch.FloatTensor [5]] is at "
                      "version 2; expected version 1 instead.");
    tb_close(&b, 1);
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, GT_FINDING_UNEXPLAINED);
    assert_int_equal(f->v[0].saved_version, 1);
    assert_int_equal(f->v[0].version_at_backward, 2);
    assert_int_equal(f->v[0].backward, bw);
    gt_findings_free(f);
    unlink(b.path);
}

/* An error of another family is no finding of these kinds. */
static void test_other_errors_ignored(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "other");
    raise_at(&b, 21, "x = y @ z", "mat1 and mat2 shapes cannot be multiplied");
    tb_close(&b, 1);
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 0);
    gt_findings_free(f);
    unlink(b.path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_leaf_written_through_subscript),
        cmocka_unit_test(test_view_of_multi_output),
        cmocka_unit_test(test_view_kinds),
        cmocka_unit_test(test_unexplained_version_error),
        cmocka_unit_test(test_other_errors_ignored),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
