/* Unit tests of inspector/refused.c: in-place ops PyTorch refused for what
 * the written tensor is, on traces built by hand (no torch). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define TB_PATH_PREFIX "gt_test_refused"
#define TB_SOURCE_FILE "/src/refused.py"
#include "findertrace.h"

/* x (named, made by `maker` at line 20) written in place by `op` at line 21,
 * which raised `msg` before bumping its version. Returns the op's seq. */
static int64_t refused(tb *b, const char *maker, const char *op, const char *code,
                       const char *msg)
{
    tb_tensor(b, 9, 1, 1, 0, 0, 1, 0, 0, 0);
    int64_t mk = tb_op(b, maker, GT_PHASE_FORWARD, 20, "x = base.expand(4)");
    assert_int_equal(gt_op_arg(b->r, mk, GT_ROLE_INPUT, 0, 9, 0), 0);
    int64_t shape[1] = {4}, strides[1] = {0};
    gt_tensor_info t = {.id = 10,
                        .storage = 1,
                        .dtype = b->dtype,
                        .ndim = 1,
                        .shape = shape,
                        .strides = strides,
                        .created_by = mk,
                        .alias_of = 9,
                        .shares_version = 1,
                        .version_counter = 9};
    assert_int_equal(gt_tensor(b->r, &t), 0);
    assert_int_equal(gt_op_arg(b->r, mk, GT_ROLE_OUTPUT, 0, 10, 0), 0);
    tb_name(b, 10, "x");
    int64_t seq = tb_op(b, op, GT_PHASE_FORWARD, 21, code);
    assert_int_equal(gt_op_arg(b->r, seq, GT_ROLE_MUTATED, 0, 10, 0), 0);
    assert_int_equal(gt_error(b->r, "RuntimeError", msg, tb_stack(b, 21, code), 0, NULL),
                     0);
    tb_close(b, 1);
    return seq;
}

static void test_overlap(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "overlap");
    int64_t seq = refused(&b, "aten::expand", "aten::add_.Tensor", "x.add_(1)",
                          "unsupported operation: more than one element of the "
                          "written-to tensor refers to a single memory location. Please "
                          "clone() the tensor before performing the operation.");
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, GT_FINDING_INPLACE_OVERLAP);
    assert_int_equal(f->v[0].tensor, 10);
    assert_int_equal(f->v[0].op, seq);
    assert_true(f->v[0].view_op > 0); /* where x was made: the expand */
    assert_int_equal(f->v[0].n_mutations, 1);
    assert_int_equal(f->v[0].mutations[0].seq, seq);
    gt_findings_free(f);
    unlink(b.path);
}

static void test_dtype(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "dtype");
    refused(&b, "aten::expand", "aten::mul_.Tensor", "x.mul_(0.5)",
            "result type Float can't be cast to the desired output type Long");
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, GT_FINDING_INPLACE_DTYPE);
    assert_int_equal(f->v[0].tensor, 10);
    gt_findings_free(f);
    unlink(b.path);
}

static void test_resize(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "resize");
    refused(&b, "aten::expand", "aten::resize_", "x.resize_(8)",
            "cannot resize variables that require grad");
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, GT_FINDING_RESIZE_REQUIRES_GRAD);
    assert_int_equal(f->v[0].tensor, 10);
    gt_findings_free(f);
    unlink(b.path);
}

/* The other refused kinds, each from its message: the kind, and the
 * tensor written named. */
static void one_kind(const char *name, const char *op, const char *code, const char *msg,
                     int kind)
{
    tb b;
    tb_open(&b, name);
    refused(&b, "aten::expand", op, code, msg);
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, kind);
    assert_int_equal(f->v[0].tensor, 10);
    assert_string_equal(f->v[0].name, "x");
    gt_findings_free(f);
    unlink(b.path);
}

static void test_shape(void **state)
{
    (void)state;
    one_kind("shape", "aten::add_.Tensor", "x += y",
             "output with shape [4] doesn't match the broadcast shape [2, 4]",
             GT_FINDING_INPLACE_SHAPE);
}

static void test_input_overlap(void **state)
{
    (void)state;
    one_kind("input_overlap", "aten::add_.Tensor", "x.add_(x.flip(0))",
             "unsupported operation: some elements of the input tensor and the "
             "written-to tensor refer to a single memory location. Please clone() the "
             "tensor before performing the operation.",
             GT_FINDING_INPLACE_INPUT_OVERLAP);
}

static void test_inference_tensor(void **state)
{
    (void)state;
    one_kind("inference", "aten::add_.Tensor", "x.add_(1)",
             "Inplace update to inference tensor outside InferenceMode is not allowed.",
             GT_FINDING_INPLACE_INFERENCE_TENSOR);
}

static void test_detach_view(void **state)
{
    (void)state;
    one_kind("detach_view", "aten::detach_", "x.detach_()",
             "Can't detach views in-place. Use detach() instead.",
             GT_FINDING_DETACH_VIEW_INPLACE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overlap),       cmocka_unit_test(test_dtype),
        cmocka_unit_test(test_resize),        cmocka_unit_test(test_shape),
        cmocka_unit_test(test_input_overlap), cmocka_unit_test(test_inference_tensor),
        cmocka_unit_test(test_detach_view),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
