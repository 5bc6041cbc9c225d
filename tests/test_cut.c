/* Unit tests of inspector/cut.c: root_without_grad and
 * grad_input_unreachable findings, on traces built by hand (no torch). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define TB_PATH_PREFIX "gt_test_cut"
#define TB_SOURCE_FILE "/src/cut.py"
#include "findertrace.h"

#define NO_GRAD_FN                                                                       \
    "element 0 of tensors does not require grad and does not have a grad_fn"

/* Tensor `id` (float32 [4], no storage) made by op `by`, requiring grad or
 * not. */
static void made(tb *b, gt_id id, int64_t by, int rg)
{
    tb_tensor_1d(
        b,
        (gt_tensor_info){.id = id, .requires_grad = rg, .is_leaf = !by, .created_by = by},
        4);
    if (by)
        assert_int_equal(gt_op_arg(b->r, by, GT_ROLE_OUTPUT, 0, id, 0), 0);
}

/* An op reading `in` at `line`. */
static int64_t op_of(tb *b, const char *name, int line, const char *code, gt_id in)
{
    int64_t seq = tb_op(b, name, GT_PHASE_FORWARD, line, code);
    if (in)
        assert_int_equal(gt_op_arg(b->r, seq, GT_ROLE_INPUT, 0, in, 0), 0);
    return seq;
}

/* backward() of tensor `root` (no grad_fn node) at line 30, raising. */
static void backward_of(tb *b, gt_id root)
{
    gt_backward_info bi = {.api = tb_str(b, "Tensor.backward"),
                           .thread = b->thread,
                           .stack = tb_stack(b, 30, "loss.backward()")};
    gt_id bw;
    assert_int_equal(gt_backward_begin(b->r, &bi, &bw), 0);
    assert_int_equal(gt_backward_root(b->r, bw, 0, root, 0), 0);
    tb_backward_error(b, bw, 30, "loss.backward()", NO_GRAD_FN);
}

/* w (a leaf that requires grad) -> y = w * 2 (a graph) -> z = y.detach()
 * -> loss = z.sum(): the graph was cut at the detach, line 21. */
static void test_cut_at_detach(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "detach");
    made(&b, 1, 0, 1);
    tb_name(&b, 1, "w");
    int64_t mul = op_of(&b, "aten::mul.Tensor", 20, "y = w * 2", 1);
    made(&b, 2, mul, 1);
    tb_node(&b, 7, "MulBackward0", mul, 1);
    assert_int_equal(gt_node_output(b.r, 7, 0, 2), 0);
    tb_name(&b, 2, "y");
    int64_t det = op_of(&b, "aten::detach", 21, "z = y.detach()", 2);
    made(&b, 3, det, 0);
    tb_name(&b, 3, "z");
    int64_t sum = op_of(&b, "aten::sum", 22, "loss = z.sum()", 3);
    made(&b, 4, sum, 0);
    tb_name(&b, 4, "loss");
    backward_of(&b, 4);
    tb_close(&b, 1);

    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, GT_FINDING_ROOT_WITHOUT_GRAD);
    assert_int_equal(f->v[0].tensor, 4);
    assert_int_equal(f->v[0].cut, GT_CUT_DETACH);
    assert_int_equal(f->v[0].view_op, det); /* where it was cut */
    assert_int_equal(f->v[0].other, 2);     /* the input with a graph it took */
    assert_int_equal(f->v[0].first_to_fail, 1);
    gt_findings_free(f);
    unlink(b.path);
}

/* x (plain data) -> loss = x.sum(): nothing it comes from requires grad. */
static void test_no_source_requires_grad(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "plain");
    made(&b, 1, 0, 0);
    tb_name(&b, 1, "x");
    int64_t sum = op_of(&b, "aten::sum", 22, "loss = x.sum()", 1);
    made(&b, 2, sum, 0);
    tb_name(&b, 2, "loss");
    backward_of(&b, 2);
    tb_close(&b, 1);

    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, GT_FINDING_ROOT_WITHOUT_GRAD);
    assert_int_equal(f->v[0].cut, GT_CUT_NO_SOURCE);
    assert_int_equal(f->v[0].n_candidates, 1); /* the sources: x */
    assert_int_equal(f->v[0].candidates[0], 1);
    gt_findings_free(f);
    unlink(b.path);
}

/* w -> y = w * 2 under no_grad (grad mode off) -> loss = y.sum(). */
static void test_cut_under_no_grad(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "nograd");
    made(&b, 1, 0, 1);
    tb_name(&b, 1, "w");
    gt_op_info o = {.name = tb_str(&b, "aten::mul.Tensor"),
                    .phase = GT_PHASE_FORWARD,
                    .grad_mode = 0,
                    .thread = b.thread,
                    .stack = tb_stack(&b, 20, "    y = w * 2")};
    int64_t mul;
    assert_int_equal(gt_op(b.r, &o, &mul), 0);
    assert_int_equal(gt_op_arg(b.r, mul, GT_ROLE_INPUT, 0, 1, 0), 0);
    made(&b, 2, mul, 0);
    int64_t sum = op_of(&b, "aten::sum", 22, "loss = y.sum()", 2);
    made(&b, 3, sum, 0);
    backward_of(&b, 3);
    tb_close(&b, 1);

    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].cut, GT_CUT_NO_GRAD);
    assert_int_equal(f->v[0].view_op, mul);
    assert_int_equal(f->v[0].other, 1);
    gt_findings_free(f);
    unlink(b.path);
}

/* autograd.grad(loss, [w, u]) where u was used by no op: input 1 is
 * unreachable, the reason "unused". */
static void test_grad_input_unused(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "grad_unused");
    made(&b, 1, 0, 1);
    tb_name(&b, 1, "w");
    made(&b, 2, 0, 1);
    tb_name(&b, 2, "u");
    int64_t mul = op_of(&b, "aten::mul.Tensor", 20, "y = w * 2", 1);
    made(&b, 3, mul, 1);
    tb_node(&b, 7, "MulBackward0", mul, 1);
    assert_int_equal(gt_node_output(b.r, 7, 0, 3), 0);
    gt_backward_info bi = {.api = tb_str(&b, "torch.autograd.grad"),
                           .thread = b.thread,
                           .stack = tb_stack(&b, 30, "torch.autograd.grad(y, [w, u])")};
    gt_id bw;
    assert_int_equal(gt_backward_begin(b.r, &bi, &bw), 0);
    assert_int_equal(gt_backward_root(b.r, bw, 0, 3, 7), 0);
    assert_int_equal(gt_backward_input(b.r, bw, 0, 1), 0);
    assert_int_equal(gt_backward_input(b.r, bw, 1, 2), 0);
    tb_backward_error(&b, bw, 30, "torch.autograd.grad(y, [w, u])",
                      "The differentiated Tensor at index 1 appears to not have been "
                      "used in the graph. Set allow_unused=True if this is the desired "
                      "behavior.");
    tb_close(&b, 1);
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, GT_FINDING_GRAD_INPUT_UNREACHABLE);
    assert_int_equal(f->v[0].tensor, 2);
    assert_int_equal(f->v[0].cut, GT_CUT_UNUSED);
    gt_findings_free(f);
    unlink(b.path);
}

/* A run whose backward raised nothing of the kind: no finding. */
static void test_no_error_no_finding(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "none");
    made(&b, 1, 0, 0);
    int64_t sum = op_of(&b, "aten::sum", 22, "loss = x.sum()", 1);
    made(&b, 2, sum, 0);
    tb_close(&b, 1);
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 0);
    gt_findings_free(f);
    unlink(b.path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cut_at_detach),
        cmocka_unit_test(test_no_source_requires_grad),
        cmocka_unit_test(test_cut_under_no_grad),
        cmocka_unit_test(test_grad_input_unused),
        cmocka_unit_test(test_no_error_no_finding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
