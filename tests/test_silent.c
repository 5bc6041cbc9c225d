/* Unit tests of inspector/silent.c: writes PyTorch cannot see (a saved
 * tensor swapped to other memory, a saved tensor's bytes changed without a
 * version bump, a kernel write: an op that wrote it and moved no version),
 * on traces built by hand (no torch). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define TB_PATH_PREFIX "gt_test_silent"
#define TB_SOURCE_FILE "/src/silent.py"
#include "findertrace.h"

/* w (tensor 10 on storage 1) saved by node 1 (MulBackward0); returns the
 * save's seq. */
static int64_t saved_w(tb *b)
{
    assert_int_equal(gt_storage(b->r, 1, 12, b->cpu), 0);
    assert_int_equal(gt_storage(b->r, 2, 12, b->cpu), 0);
    tb_tensor(b, 10, 1, 3, 0, 0, 1, 0, 0, 0);
    tb_name(b, 10, "w");
    int64_t mul = tb_op(b, "aten::mul.Tensor", GT_PHASE_FORWARD, 20, "y = x * w");
    tb_node(b, 1, "MulBackward0", mul, 1);
    return tb_save(b, 1, "other", 10, 0);
}

static void test_storage_swap(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "swap");
    int64_t saved = saved_w(&b);
    gt_swap_info sw = {.tensor = 10,
                       .old_storage = 1,
                       .new_storage = 2,
                       .stack = tb_stack(&b, 21, "w.data = other")};
    assert_int_equal(gt_storage_swap(b.r, &sw), 0);
    gt_id bw = tb_backward(&b, 1, 0, 22);
    assert_int_equal(gt_backward_end(b.r, bw, 1), 0);
    tb_close(&b, 1);
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, GT_FINDING_SILENT_STORAGE_SWAP);
    assert_int_equal(f->v[0].tensor, 10);
    assert_int_equal(f->v[0].node, 1);
    assert_int_equal(f->v[0].saved_seq, saved);
    assert_int_equal(f->v[0].backward, bw);
    gt_findings_free(f);
    unlink(b.path);
}

/* Fingerprints at save and at use: different bytes with no version bump
 * are a silent write; equal ones are none. */
static void fingerprints(uint64_t at_save, uint64_t at_use, size_t want)
{
    tb b;
    tb_open(&b, want ? "prints" : "prints_same");
    int64_t saved = saved_w(&b);
    assert_int_equal(gt_fingerprint(b.r, saved, 0, 0, 12, at_save), 0);
    gt_id bw = tb_backward(&b, 1, 0, 22);
    assert_int_equal(gt_fingerprint(b.r, saved, 1, bw, 12, at_use), 0);
    assert_int_equal(gt_backward_end(b.r, bw, 1), 0);
    tb_close(&b, 1);
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, want);
    if (want) {
        assert_int_equal(f->v[0].kind, GT_FINDING_SILENT_SAVED_WRITE);
        assert_int_equal(f->v[0].tensor, 10);
        assert_int_equal(f->v[0].node, 1);
    }
    gt_findings_free(f);
    unlink(b.path);
}

static void test_saved_bytes_changed(void **state)
{
    (void)state;
    fingerprints(0x1111, 0x2222, 1);
}

static void test_saved_bytes_same(void **state)
{
    (void)state;
    fingerprints(0x1111, 0x1111, 0);
}

/* Backward call 1 from node 1, at line `line`: the save's fingerprint
 * 0x1111 at save and 0x2222 at use (`nbytes` each); closes the trace and
 * returns its findings (the file removed). */
static gt_findings *changed_then_diagnosed(tb *b, int64_t saved, int line, int64_t nbytes)
{
    gt_id bw = tb_backward(b, 1, 0, line);
    assert_int_equal(gt_fingerprint(b->r, saved, 0, 0, nbytes, 0x1111), 0);
    assert_int_equal(gt_fingerprint(b->r, saved, 1, bw, nbytes, 0x2222), 0);
    assert_int_equal(gt_backward_end(b->r, bw, 1), 0);
    tb_close(b, 1);
    gt_findings *f = diagnose(b->path, 0, 0);
    unlink(b->path);
    return f;
}

/* w's memory handed out (a detach at line 22 makes tensor 11 on its
 * storage, with a counter of its own) after a read at line 21, then its
 * bytes changed: the fix names the hand-out, the read is no write. With
 * `writer`, an op at line 24 writes tensor 11 (no bump of w's counter): the
 * silent_storage_write of that write is the one finding, the changed
 * fingerprint adds none. Recorded with check_saved `mode`. */
static gt_findings *handed_out(const char *mode, int writer)
{
    tb b;
    tb_open(&b, writer ? "handed_write" : "handed");
    char opts[64];
    snprintf(opts, sizeof opts, "{\"check_saved\":\"%s\"}", mode);
    gt_run_info ri = {.options_json = opts, .rank = -1, .local_rank = -1};
    assert_int_equal(gt_run_set(b.r, &ri), 0);
    int64_t saved = saved_w(&b);
    int64_t sum = tb_op(&b, "aten::sum", GT_PHASE_FORWARD, 21, "w.sum()");
    assert_int_equal(gt_op_arg(b.r, sum, GT_ROLE_INPUT, 0, 10, 0), 0);
    int64_t det =
        tb_op(&b, "aten::detach", GT_PHASE_FORWARD, 22, "v = w.detach().numpy()");
    assert_int_equal(gt_op_arg(b.r, det, GT_ROLE_INPUT, 0, 10, 0), 0);
    tb_tensor_1d(&b,
                 (gt_tensor_info){
                     .id = 11, .storage = 1, .created_by = det, .version_counter = 11},
                 3);
    assert_int_equal(gt_op_arg(b.r, det, GT_ROLE_OUTPUT, 0, 11, 0), 0);
    int64_t wr = 0;
    if (writer) {
        wr = tb_op(&b, "mylib::fill_", GT_PHASE_FORWARD, 24, "mylib.fill_(v)");
        assert_int_equal(gt_op_arg(b.r, wr, GT_ROLE_MUTATED, 0, 11, 0), 0);
    }
    gt_findings *f = changed_then_diagnosed(&b, saved, 25, 12);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, writer ? GT_FINDING_SILENT_STORAGE_WRITE
                                          : GT_FINDING_SILENT_SAVED_WRITE);
    assert_int_equal(f->v[0].n_mutations, writer ? 1 : 0);
    if (writer)
        assert_int_equal(f->v[0].mutations[0].seq, wr);
    return f;
}

static void test_saved_write_handed_out(void **state)
{
    (void)state;
    gt_findings *f = handed_out("sampled", 0);
    const char *fix = f->v[0].suggestion;
    assert_non_null(strstr(fix, ", after /src/silent.py:22 (aten::detach, the last"));
    assert_non_null(strstr(fix, "found by the sampled check"));
    gt_findings_free(f);
    f = handed_out("full", 0);
    fix = f->v[0].suggestion;
    assert_non_null(strstr(fix, ", after /src/silent.py:22 (aten::detach"));
    assert_null(strstr(fix, "sampled"));
    gt_findings_free(f);
    gt_findings_free(handed_out("sampled", 1));
}

/* A training-mode BatchNorm's saved running statistics (its batch mean
 * result1 has elements) are not read by its backward: a later forward
 * updating them changes their fingerprint, and that is no finding. */
static void test_saved_bytes_unread_slot(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "prints_unread");
    assert_int_equal(gt_storage(b.r, 1, 16, b.cpu), 0);
    assert_int_equal(gt_storage(b.r, 2, 16, b.cpu), 0);
    tb_tensor(&b, 10, 1, 4, 0, 0, 1, 0, 0, 0);
    tb_tensor(&b, 11, 2, 4, 0, 0, 0, 0, 0, 0);
    int64_t op =
        tb_op(&b, "aten::native_batch_norm", GT_PHASE_FORWARD, 20, "y1 = bn(x1)");
    tb_node(&b, 1, "NativeBatchNormBackward0", op, 1);
    int64_t saved = tb_save(&b, 1, "running_mean", 10, 0);
    tb_save(&b, 1, "result1", 11, 0);
    gt_findings *f = changed_then_diagnosed(&b, saved, 22, 16);
    assert_int_equal(f->n, 0);
    gt_findings_free(f);
}

/* An op writing saved w (a `mutated` argument, no bump) between the save
 * and backward: a silent_kernel_write naming that op when kernel_writes
 * says it wrote with no bump (kw); without the row (an op that raised
 * before writing) no finding; the same write after backward none. */
static void kernel_write(const char *name, int kw, int after_backward, size_t want)
{
    tb b;
    tb_open(&b, name);
    int64_t saved = saved_w(&b);
    gt_id bw = 0;
    if (after_backward) {
        bw = tb_backward(&b, 1, 0, 22);
        assert_int_equal(gt_backward_end(b.r, bw, 1), 0);
    }
    int64_t op = tb_op(&b, "aten::native_batch_norm", GT_PHASE_FORWARD, 21, "m(x2)");
    assert_int_equal(gt_op_arg(b.r, op, GT_ROLE_INPUT, 3, 10, 0), 0);
    assert_int_equal(gt_op_arg(b.r, op, GT_ROLE_MUTATED, 0, 10, 0), 0);
    if (kw)
        assert_int_equal(gt_kernel_write(b.r, op, 10, 0, 0), 0);
    assert_int_equal(gt_kernel_write(b.r, op, 10, -1, 0), GT_EINVAL);
    if (!after_backward) {
        bw = tb_backward(&b, 1, 0, 22);
        assert_int_equal(gt_backward_end(b.r, bw, 1), 0);
    }
    tb_close(&b, 1);
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, want);
    if (want) {
        assert_int_equal(f->v[0].kind, GT_FINDING_SILENT_KERNEL_WRITE);
        assert_string_equal(gt_finding_kind_name(f->v[0].kind), "silent_kernel_write");
        assert_int_equal(gt_finding_family(f->v[0].kind), GT_FAMILY_SAVED);
        assert_int_equal(f->v[0].tensor, 10);
        assert_int_equal(f->v[0].node, 1);
        assert_int_equal(f->v[0].saved_seq, saved);
        assert_int_equal(f->v[0].backward, bw);
        assert_int_equal(f->v[0].n_mutations, 1);
        assert_int_equal(f->v[0].mutations[0].seq, op);
        assert_non_null(strstr(f->v[0].suggestion, "in training mode"));
    }
    gt_findings_free(f);
    unlink(b.path);
}

static void test_kernel_write(void **state)
{
    (void)state;
    kernel_write("kwrite", 1, 0, 1);
}

static void test_write_that_raised(void **state)
{
    (void)state;
    kernel_write("kwrite_raised", 0, 0, 0);
}

static void test_kernel_write_after_backward(void **state)
{
    (void)state;
    kernel_write("kwrite_after", 1, 1, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_storage_swap),
        cmocka_unit_test(test_saved_bytes_changed),
        cmocka_unit_test(test_saved_bytes_same),
        cmocka_unit_test(test_saved_write_handed_out),
        cmocka_unit_test(test_saved_bytes_unread_slot),
        cmocka_unit_test(test_kernel_write),
        cmocka_unit_test(test_write_that_raised),
        cmocka_unit_test(test_kernel_write_after_backward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
