/* Unit tests of inspector/replay.c: engine order and version arithmetic, on
 * traces built by hand with the recorder API. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <gradtrace/recorder.h>

#include "replay.h"
#include <gradtrace/trace.h>

#define TB_PATH_PREFIX "gt_test_replay"
#define TB_SOURCE_FILE "model.py"
#include "tracebuilder.h"

/* ---- a tiny trace builder ---------------------------------------------- */

/* A float32 tensor of `n` elements on `storage` (0: none). */
static void tb_tensor(tb *b, gt_id id, gt_id storage, int64_t n, int64_t offset,
                      gt_id alias_of, gt_id vc)
{
    tb_tensor_1d(b,
                 (gt_tensor_info){.id = id,
                                  .storage = storage,
                                  .storage_offset = offset,
                                  .alias_of = alias_of,
                                  .shares_version = alias_of && vc,
                                  .version_counter = vc},
                 n);
}

static int64_t tb_op(tb *b, const char *name, int line)
{
    return tb_op_at(b, name, GT_PHASE_FORWARD, line ? tb_stack(b, line, name) : 0);
}

static void tb_node(tb *b, gt_id id, const char *name, int64_t op, int64_t seqnr,
                    gt_id variable)
{
    tb_node_named(
        b, (gt_node_info){.id = id, .op = op, .sequence_nr = seqnr, .variable = variable},
        name);
}

/* Leaf tensor `tensor` (3 elements) and `node`, its AccumulateGrad. */
static void tb_leaf(tb *b, gt_id node, gt_id tensor)
{
    tb_tensor(b, tensor, 0, 3, 0, 0, 0);
    tb_node(b, node, "torch::autograd::AccumulateGrad", 0, -1, tensor);
}

/* Node `id`, with sequence_nr `id` too, made by forward op `op` at `line`. */
static void tb_op_node(tb *b, gt_id id, const char *name, const char *op, int line)
{
    tb_node(b, id, name, tb_op(b, op, line), id, 0);
}

static void tb_edges(tb *b, gt_id node, int n, ...)
{
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        assert_int_equal(gt_edge(b->r, node, i, va_arg(ap, gt_id), 0), 0);
    va_end(ap);
}

static gt_id tb_backward(tb *b, int nroots, const gt_id *roots, int retain)
{
    return tb_backward_from(b, "Tensor.backward", retain,
                            tb_stack(b, 99, "loss.backward()"), nroots, roots);
}

/* A torch.autograd.grad call from `root` with inputs=[input], ended ok. */
static gt_id tb_grad(tb *b, gt_id root, gt_id input)
{
    gt_id id = tb_backward_from(b, "torch.autograd.grad", 0, 0, 1, &root);
    assert_int_equal(gt_backward_input(b->r, id, 0, input), 0);
    assert_int_equal(gt_backward_end(b->r, id, 1), 0);
    return id;
}

/* Close the recording and open it for reading with a replayer. */
static void tb_finish(tb *b, gt_trace **t, gt_replayer **rp)
{
    tb_end(b, GT_RUN_OK, 0);
    assert_int_equal(gt_trace_open(b->path, t), 0);
    assert_int_equal(gt__replayer_new(*t, rp), 0);
}

static void tb_cleanup(tb *b, gt_trace *t, gt_replayer *rp)
{
    gt__replayer_free(rp);
    gt_trace_close(t);
    unlink(b->path);
}

static void assert_order(const gt_replay *r, size_t n, const int64_t *want)
{
    for (size_t i = 0; i < r->n; i++)
        printf("  order[%zu] = node %lld\n", i, (long long)r->order[i].id);
    assert_int_equal(r->n, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(r->order[i].id, want[i]);
}

/* gt__replay_counter(vc, from_seq, from_version, to_seq), which must
 * succeed, write *bumps and find the counter at `version` after `n` bumps.
 * Returns the bumps (malloc'd, NULL when none). */
static gt_mutation *assert_counter(gt_replayer *rp, int64_t vc, int64_t from_seq,
                                   int64_t from_version, int64_t to_seq, int64_t version,
                                   size_t n)
{
    static gt_mutation unwritten;
    int64_t got_version = -1;
    gt_mutation *m = &unwritten;
    size_t got_n = 0;
    int rc = gt__replay_counter(rp, vc, from_seq, from_version, to_seq, &got_version, &m,
                                &got_n);
    if (rc)
        print_error("gt__replay_counter: %s\n", gt_strerror(rc));
    assert_int_equal(rc, 0);
    assert_true(m != &unwritten);
    assert_int_equal(got_version, version);
    assert_int_equal(got_n, n);
    return m;
}

/* ---- engine order ------------------------------------------------------ */

/* R(10) -> Acc0, N(9), M(7); M -> D(3); N -> D; D -> Acc1.
 * The engine runs AccumulateGrad first when it is ready, then the higher
 * sequence_nr; D waits for both its parents. */
static void test_order_priority_and_dependencies(void **state)
{
    (void)state;
    tb b;
    gt_trace *t;
    gt_replayer *rp;
    gt_replay *r;
    tb_open(&b, "order");
    tb_leaf(&b, 20, 100);
    tb_leaf(&b, 21, 101);
    tb_op_node(&b, 3, "MulBackward0", "aten::mul", 3);
    tb_op_node(&b, 7, "ExpBackward0", "aten::exp", 4);
    tb_op_node(&b, 9, "SinBackward0", "aten::sin", 5);
    tb_op_node(&b, 10, "AddBackward0", "aten::add", 6);
    tb_edges(&b, 10, 3, (gt_id)20, (gt_id)9, (gt_id)7);
    tb_edges(&b, 7, 1, (gt_id)3);
    tb_edges(&b, 9, 1, (gt_id)3);
    tb_edges(&b, 3, 2, (gt_id)21, (gt_id)0);
    gt_id root = 10;
    gt_id bw = tb_backward(&b, 1, &root, 0);
    assert_int_equal(gt_backward_end(b.r, bw, 1), 0);
    tb_finish(&b, &t, &rp);

    assert_int_equal(gt__replay_backward(rp, bw, &r), 0);
    const int64_t want[] = {10, 20, 9, 7, 3, 21};
    assert_order(r, 6, want);
    assert_int_equal(r->order[1].accumulate_grad, 1);
    assert_int_equal(r->order[2].priority, 9);
    assert_int_equal(r->status, GT_BACKWARD_OK);
    assert_int_equal(r->retain_graph, 0);
    assert_int_equal(gt__replay_find(r, 7), 3);
    assert_int_equal(gt__replay_find(r, 12345), -1);
    gt__replay_free(r);
    tb_cleanup(&b, t, rp);
}

/* Roots 6, 5 and 8, where 5 feeds 6: the fed root waits for its edge
 * (dependencies count per edge, as with GraphRoot), so 5 runs before 6
 * despite the lower sequence number; 8, ready and highest, runs first.
 * Node 30 also feeds 1 but is not reachable from the roots: not replayed. */
static void test_order_multiple_roots(void **state)
{
    (void)state;
    tb b;
    gt_trace *t;
    gt_replayer *rp;
    gt_replay *r;
    tb_open(&b, "roots");
    tb_op_node(&b, 1, "ExpBackward0", "aten::exp", 1);
    tb_op_node(&b, 6, "MulBackward0", "aten::mul", 2);
    tb_op_node(&b, 5, "SumBackward0", "aten::sum", 3);
    tb_op_node(&b, 8, "NegBackward0", "aten::neg", 4);
    tb_op_node(&b, 30, "CosBackward0", "aten::cos", 5);
    tb_edges(&b, 5, 1, (gt_id)6);
    tb_edges(&b, 6, 1, (gt_id)1);
    tb_edges(&b, 8, 1, (gt_id)1);
    tb_edges(&b, 30, 1, (gt_id)1);
    gt_id roots[] = {6, 5, 8};
    gt_id bw = tb_backward(&b, 3, roots, 1);
    assert_int_equal(gt_node_exec(b.r, bw, 8), 0);
    assert_int_equal(gt_backward_end(b.r, bw, 0), 0);
    tb_finish(&b, &t, &rp);

    assert_int_equal(gt__replay_backward(rp, bw, &r), 0);
    const int64_t want[] = {8, 5, 6, 1};
    assert_order(r, 4, want);
    assert_int_equal(r->status, GT_BACKWARD_ERROR);
    assert_int_equal(r->retain_graph, 1);
    assert_int_equal(r->has_execs, 1);
    assert_true(r->order[0].exec_seq > r->seq);
    assert_int_equal(r->order[1].exec_seq, 0);
    gt__replay_free(r);

    assert_int_equal(gt__replay_backward(rp, 42, &r), GT_EINVAL);
    assert_non_null(strstr(gt_trace_errmsg(t), "no backward call 42"));
    tb_cleanup(&b, t, rp);
}

/* inputs=: R -> A -> Acc(x), R -> B -> Acc(y), A -> C (non-leaf input c).
 * torch.autograd.grad(out, inputs=[x]) runs R and A only (x's AccumulateGrad
 * just captures); Tensor.backward(inputs=[x]) runs it too; inputs=[c]
 * (C's output) runs R and A, not C. B, not on a path to an input, never
 * runs. */
static void test_order_inputs(void **state)
{
    (void)state;
    tb b;
    gt_trace *t;
    gt_replayer *rp;
    gt_replay *r;
    tb_open(&b, "inputs");
    tb_leaf(&b, 40, 100);
    tb_leaf(&b, 41, 101);
    tb_tensor(&b, 102, 0, 3, 0, 0, 0);
    tb_op_node(&b, 2, "MulBackward0", "aten::mul", 2);
    assert_int_equal(gt_node_output(b.r, 2, 0, 102), 0);
    tb_op_node(&b, 4, "ExpBackward0", "aten::exp", 3);
    tb_op_node(&b, 5, "SinBackward0", "aten::sin", 4);
    tb_op_node(&b, 9, "AddBackward0", "aten::add", 5);
    tb_edges(&b, 9, 2, (gt_id)4, (gt_id)5);
    tb_edges(&b, 4, 2, (gt_id)40, (gt_id)2);
    tb_edges(&b, 5, 1, (gt_id)41);
    gt_id root = 9;
    gt_id g1 = tb_grad(&b, root, 100);
    gt_id g2 = tb_backward(&b, 1, &root, 1);
    assert_int_equal(gt_backward_input(b.r, g2, 0, 100), 0);
    assert_int_equal(gt_backward_end(b.r, g2, 1), 0);
    gt_id g3 = tb_grad(&b, root, 102);
    tb_finish(&b, &t, &rp);

    assert_int_equal(gt__replay_backward(rp, g1, &r), 0);
    assert_int_equal(r->has_inputs, 1);
    assert_int_equal(r->grad_api, 1);
    const int64_t want1[] = {9, 4};
    assert_order(r, 2, want1);
    gt__replay_free(r);
    assert_int_equal(gt__replay_backward(rp, g2, &r), 0);
    assert_int_equal(r->grad_api, 0);
    const int64_t want2[] = {9, 4, 40};
    assert_order(r, 3, want2);
    gt__replay_free(r);
    assert_int_equal(gt__replay_backward(rp, g3, &r), 0);
    const int64_t want3[] = {9, 4};
    assert_order(r, 2, want3);
    /* the same call again: the replayer's copy, shared, freed by each holder
     * in any order (the replayer keeps the last few until it is freed) */
    gt_replay *again = NULL;
    assert_int_equal(gt__replay_backward(rp, g3, &again), 0);
    assert_ptr_equal(again, r);
    gt__replay_free(r);
    assert_order(again, 2, want3);
    gt__replay_free(again);
    /* an earlier call again: kept too, the same order */
    assert_int_equal(gt__replay_backward(rp, g1, &r), 0);
    assert_int_equal(r->grad_api, 1);
    assert_order(r, 2, want1);
    gt__replay_free(r);
    tb_cleanup(&b, t, rp);
}

/* ---- version arithmetic ------------------------------------------------ */

/* t (counter t) with a view v sharing it and an unrelated u: saved at
 * version 0, bumped through v (1) and t (2), u bumped (its own counter),
 * then the backward; a later bump (3) is after the backward. */
static void test_counter_bumps_between_save_and_backward(void **state)
{
    (void)state;
    tb b;
    gt_trace *t;
    gt_replayer *rp;
    tb_open(&b, "counter");
    assert_int_equal(gt_storage(b.r, 1, 12, b.cpu), 0);
    assert_int_equal(gt_storage(b.r, 2, 12, b.cpu), 0);
    tb_tensor(&b, 100, 1, 3, 0, 0, 0);
    tb_tensor(&b, 101, 1, 1, 1, 100, 100); /* v = t[1] */
    tb_tensor(&b, 102, 2, 3, 0, 0, 0);
    int64_t op = tb_op(&b, "aten::mul", 10), save;
    tb_node(&b, 1, "MulBackward0", op, 1, 0);
    assert_int_equal(gt_saved_tensor(b.r, 1, tb_str(&b, "self"), 100, 0, 0, 12, &save),
                     0);
    int64_t m1 = tb_op(&b, "aten::mul_.Tensor", 11), b1;
    assert_int_equal(gt_op_arg(b.r, m1, GT_ROLE_MUTATED, 0, 101, 0), 0);
    assert_int_equal(gt_version_bump(b.r, m1, 101, 1, 0, &b1), 0);
    int64_t u = tb_op(&b, "aten::add_.Tensor", 12);
    assert_int_equal(gt_version_bump(b.r, u, 102, 1, 0, NULL), 0);
    int64_t m2 = tb_op(&b, "aten::zero_", 13), b2;
    assert_int_equal(gt_version_bump(b.r, m2, 100, 2, 0, &b2), 0);
    gt_id root = 1;
    gt_id bw = tb_backward(&b, 1, &root, 0);
    assert_int_equal(gt_backward_end(b.r, bw, 1), 0);
    int64_t m3 = tb_op(&b, "aten::zero_", 14);
    assert_int_equal(gt_version_bump(b.r, m3, 100, 3, 0, NULL), 0);
    /* An observed bump (the adapter saw version 7 without predicting it). */
    int64_t ob;
    assert_int_equal(gt_version_bump(b.r, 0, 100, 7, 1, &ob), 0);
    tb_finish(&b, &t, &rp);

    gt_replay *r;
    assert_int_equal(gt__replay_backward(rp, bw, &r), 0);
    gt_mutation *m = assert_counter(rp, 100, save, 0, r->seq, 2, 2);
    assert_int_equal(m[0].seq, m1);
    assert_int_equal(m[0].bump_seq, b1);
    assert_int_equal(m[0].tensor, 101);
    assert_int_equal(m[0].version_after, 1);
    assert_int_equal(m[1].seq, m2);
    assert_int_equal(m[1].tensor, 100);
    assert_int_equal(m[1].version_after, 2);
    free(m);

    /* From after the first bump: only the second counts. */
    free(assert_counter(rp, 100, b1, 1, r->seq, 2, 1));

    /* Up to the end of the trace: the later bump and the observed one
     * count; an observed bump has no op. */
    m = assert_counter(rp, 100, save, 0, INT64_MAX, 7, 4);
    assert_int_equal(m[2].seq, m3);
    assert_int_equal(m[3].seq, 0);
    assert_int_equal(m[3].bump_seq, ob);
    assert_int_equal(m[3].version_after, 7);
    free(m);

    /* The unrelated counter moved once; nothing happened to counter 101's
     * id (it is not a counter of its own). */
    free(assert_counter(rp, 102, 0, 0, r->seq, 1, 1));
    assert_null(assert_counter(rp, 101, 0, 0, r->seq, 0, 0));
    gt__replay_free(r);
    tb_cleanup(&b, t, rp);
}

/* A counter with many tensors (a parameter with a view per step) and a
 * short window: the window plan (scan the window's bumps) must give the
 * same answer as the per-tensor plan above. 60 views, 3 bumps in a window
 * of a few events. */
static void test_counter_many_tensors_short_window(void **state)
{
    (void)state;
    tb b;
    gt_trace *t;
    gt_replayer *rp;
    tb_open(&b, "window");
    tb_tensor(&b, 1000, 0, 3, 0, 0, 0);
    for (int i = 1; i <= 60; i++)
        tb_tensor(&b, 1000 + i, 0, 3, 0, 1000, 1000);
    tb_tensor(&b, 2000, 0, 3, 0, 0, 0);
    int64_t save;
    tb_op_node(&b, 1, "MmBackward0", "aten::mm", 1);
    assert_int_equal(gt_saved_tensor(b.r, 1, tb_str(&b, "mat2"), 1060, 4, 0, 12, &save),
                     0);
    int64_t b1, b2, b3;
    assert_int_equal(gt_version_bump(b.r, 0, 1007, 5, 1, &b1), 0);
    assert_int_equal(gt_version_bump(b.r, 0, 2000, 9, 0, NULL), 0);
    assert_int_equal(gt_version_bump(b.r, 0, 1000, 6, 0, &b2), 0);
    assert_int_equal(gt_version_bump(b.r, 0, 1033, 7, 0, &b3), 0);
    gt_id root = 1;
    gt_id bw = tb_backward(&b, 1, &root, 0);
    assert_int_equal(gt_backward_end(b.r, bw, 1), 0);
    assert_int_equal(gt_version_bump(b.r, 0, 1001, 8, 0, NULL), 0);
    tb_finish(&b, &t, &rp);

    gt_replay *r;
    assert_int_equal(gt__replay_backward(rp, bw, &r), 0);
    assert_true(r->seq - save < 4 * 61); /* the window plan's condition */
    gt_mutation *m = assert_counter(rp, 1000, save, 4, r->seq, 7, 3);
    assert_int_equal(m[0].bump_seq, b1);
    assert_int_equal(m[0].tensor, 1007);
    assert_int_equal(m[0].seq, 0); /* observed: no op */
    assert_int_equal(m[1].bump_seq, b2);
    assert_int_equal(m[2].bump_seq, b3);
    assert_int_equal(m[2].version_after, 7);
    free(m);
    gt__replay_free(r);
    tb_cleanup(&b, t, rp);
}

/* ---- hash map ---------------------------------------------------------- */

static void test_imap(void **state)
{
    (void)state;
    gt_imap m = {0};
    int64_t v;
    assert_int_equal(gt__imap_get(&m, 5, &v), 0);
    for (int64_t k = 1; k <= 10000; k++)
        assert_int_equal(gt__imap_put(&m, k * 7919, k), 0);
    assert_int_equal(m.len, 10000);
    assert_int_equal(gt__imap_put(&m, 7919, 42), 0);
    assert_int_equal(m.len, 10000);
    assert_int_equal(gt__imap_get(&m, 7919, &v), 1);
    assert_int_equal(v, 42);
    assert_int_equal(gt__imap_get(&m, 7919 * 5000, &v), 1);
    assert_int_equal(v, 5000);
    assert_int_equal(gt__imap_get(&m, 7918, &v), 0);
    gt__imap_clear(&m);
    assert_int_equal(gt__imap_get(&m, 7919, &v), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_priority_and_dependencies),
        cmocka_unit_test(test_order_multiple_roots),
        cmocka_unit_test(test_order_inputs),
        cmocka_unit_test(test_counter_bumps_between_save_and_backward),
        cmocka_unit_test(test_counter_many_tensors_short_window),
        cmocka_unit_test(test_imap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
