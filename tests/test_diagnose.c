/* Unit tests of inspector/diagnose.c and `gradtrace diagnose`
 * (cmd_diagnose.c), on traces built by hand with the recorder API. */
#include <fcntl.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <gradtrace/recorder.h>

#include "cmd.h"
#include <gradtrace/diagnose.h>
#include <gradtrace/trace.h>

#define TB_PATH_PREFIX "gt_test_diag"
#define TB_SOURCE_FILE "/src/train.py"
#include "tracebuilder.h"

#include "findertrace.h"

/* Run `gradtrace diagnose` with `args` (NULL-terminated), capturing stdout
 * into out (malloc'd). Returns the exit status. */
static int run_cmd(char **out, ...)
{
    char *argv[16];
    int argc = 0;
    va_list ap;
    argv[argc++] = "diagnose";
    va_start(ap, out);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && argc < 15)
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;

    char tmp[] = "/tmp/gt_test_diag_out_XXXXXX";
    int fd = mkstemp(tmp);
    assert_true(fd >= 0);
    fflush(stdout);
    int saved = dup(1);
    dup2(fd, 1);
    int status = gt_cmd_diagnose(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    off_t n = lseek(fd, 0, SEEK_END);
    *out = calloc(1, (size_t)n + 1);
    assert_int_equal(pread(fd, *out, (size_t)n, 0), n);
    close(fd);
    unlink(tmp);
    return status;
}

/* json_extract(doc, path) as text ("" for NULL). */
static char *jx(const char *doc, const char *path)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    static char buf[4096];
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT json_extract(?1, ?2)", -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(st, 1, doc, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
    int s = sqlite3_step(st);
    if (s != SQLITE_ROW)
        printf("  json_extract(%s) failed on: %s\n", path, doc);
    assert_int_equal(s, SQLITE_ROW);
    const char *v = (const char *)sqlite3_column_text(st, 0);
    snprintf(buf, sizeof buf, "%s", v ? v : "");
    sqlite3_finalize(st);
    sqlite3_close(db);
    return buf;
}

/* ---- the seed: class weights updated in place before backward ---------- */

#define SEED_MSG                                                                         \
    "one of the variables needed for gradient computation has been modified by an "      \
    "inplace operation: [torch.FloatTensor [3]] is at version 6; expected version 0 "    \
    "instead. Hint: enable anomaly detection."

/* class_weights (100) saved as `weight` by NllLossBackward0 (node 1), then
 * changed three times through select views (mul_ + copy_ each: versions
 * 1..6) at line 43, then backward at line 46 raising PyTorch's error. */
static void build_seed(tb *b, const char *name, int mutate, int ended)
{
    tb_open(b, name);
    assert_int_equal(gt_storage(b->r, 1, 12, b->cpu), 0);
    assert_int_equal(gt_storage(b->r, 2, 64, b->cpu), 0);
    tb_tensor(b, 100, 1, 3, 0, 0, 1, 0, 0, 0);
    tb_name(b, 100, "class_weights");
    tb_tensor(b, 101, 2, 16, 0, 1, 0, 0, 0, 0);
    int64_t ls = tb_op(b, "aten::_log_softmax", GT_PHASE_FORWARD, 36,
                       "    log_probs = F.log_softmax(model(x), dim=1)");
    tb_node(b, 2, "LogSoftmaxBackward0", ls, 4);
    tb_save(b, 2, "result", 101, 0);
    int64_t nll = tb_op(b, "aten::nll_loss_forward", GT_PHASE_FORWARD, 37,
                        "    loss = F.nll_loss(log_probs, target, weight=class_weights)");
    tb_node(b, 1, "NllLossBackward0", nll, 5);
    assert_int_equal(gt_edge(b->r, 1, 0, 2, 0), 0);
    tb_save(b, 1, "self", 101, 0);
    tb_save(b, 1, "weight", 100, 0);
    if (mutate) {
        for (int i = 0; i < 3; i++) {
            gt_id view = 110 + i;
            tb_tensor(b, view, 1, 1, i, 0, 0, 100, 1, 100);
            tb_mutate(b, "aten::mul_.Tensor", 43,
                      "        class_weights[i] *= 1.0 + share", view, 2 * i + 1);
            tb_mutate(b, "aten::copy_", 43, "        class_weights[i] *= 1.0 + share",
                      view, 2 * i + 2);
        }
    }
    gt_id bw = tb_backward(b, 1, 0, 46);
    if (mutate)
        tb_backward_error(b, bw, 46, "loss.backward()", SEED_MSG);
    else
        assert_int_equal(gt_backward_end(b->r, bw, 1), 0);
    if (ended >= 0)
        tb_close(b, ended);
}

static void test_seed_finding(void **state)
{
    (void)state;
    tb b;
    build_seed(&b, "seed", 1, 1);
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    gt_finding *x = &f->v[0];
    assert_int_equal(x->kind, GT_FINDING_INPLACE_INVALIDATED_SAVED);
    assert_int_equal(x->node, 1);
    assert_int_equal(x->tensor, 100);
    assert_int_equal(x->backward, 1);
    assert_int_equal(x->saved_version, 0);
    assert_int_equal(x->version_at_backward, 6);
    assert_int_equal(x->n_mutations, 6);
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(x->mutations[i].version_after, (int64_t)i + 1);
        assert_int_equal(x->mutations[i].tensor, 110 + (int64_t)i / 2);
    }
    assert_int_equal(x->first_to_fail, 1);
    assert_int_equal(x->matches_error, 1);
    assert_true(x->error_seq > 0);
    assert_string_equal(x->suggestion,
                        "update a copy: class_weights = class_weights.clone()"
                        ".detach() before changing it, or move the update "
                        "after backward()");
    gt_findings_free(f);

    /* The command: JSON in the shape, exit 1. */
    char *out;
    assert_int_equal(run_cmd(&out, "--json", b.path, NULL), 1);
    assert_string_equal(jx(out, "$.trace"), b.path);
    assert_string_equal(jx(out, "$.partial"), "0");
    assert_string_equal(jx(out, "$.error.type"), "RuntimeError");
    assert_string_equal(jx(out, "$.error.location.line"), "46");
    assert_string_equal(jx(out, "$.findings[0].kind"), "inplace_invalidated_saved");
    assert_string_equal(jx(out, "$.findings[0].first_to_fail"), "1");
    assert_string_equal(jx(out, "$.findings[0].backward.index"), "1");
    assert_string_equal(jx(out, "$.findings[0].backward.location.code"),
                        "loss.backward()");
    assert_string_equal(jx(out, "$.findings[0].node.name"), "NllLossBackward0");
    assert_string_equal(jx(out, "$.findings[0].node.location.line"), "37");
    assert_string_equal(jx(out, "$.findings[0].node.location.file"), "/src/train.py");
    assert_string_equal(jx(out, "$.findings[0].saved.slot"), "weight");
    assert_string_equal(jx(out, "$.findings[0].saved.dtype"), "float32");
    assert_string_equal(jx(out, "$.findings[0].saved.shape"), "[3]");
    assert_string_equal(jx(out, "$.findings[0].saved.names"), "[\"class_weights\"]");
    assert_string_equal(jx(out, "$.findings[0].saved.saved_version"), "0");
    assert_string_equal(jx(out, "$.findings[0].saved.version_at_backward"), "6");
    assert_string_equal(jx(out, "$.findings[0].mutations[0].op"), "aten::mul_.Tensor");
    assert_string_equal(jx(out, "$.findings[0].mutations[1].op"), "aten::copy_");
    assert_string_equal(jx(out, "$.findings[0].mutations[5].version_after"), "6");
    assert_string_equal(jx(out, "$.findings[0].mutations[5].location.line"), "43");
    assert_string_equal(jx(out, "$.findings[0].mutations[0].names"),
                        "[\"class_weights\"]");
    assert_string_equal(jx(out, "$.findings[0].mutations[0].location.function"),
                        "<module>");
    assert_string_equal(jx(out, "$.findings[0].matches_error"), "1");
    assert_string_equal(jx(out, "$.findings[1]"), "");
    free(out);

    /* Text: the pair, clickable locations, no colour off a terminal. */
    assert_int_equal(run_cmd(&out, b.path, NULL), 1);
    printf("%s", out);
    assert_non_null(strstr(out, "class_weights modified in place after NllLossBackward0 "
                                "saved it as weight (version 0 -> 6)"));
    assert_non_null(strstr(out, "/src/train.py:37"));
    assert_non_null(strstr(out, "/src/train.py:43"));
    assert_non_null(strstr(out, "class_weights[i] *= 1.0 + share"));
    assert_non_null(strstr(out, "backward #1 found version 6, expected 0"));
    assert_non_null(strstr(out, "matches the error"));
    assert_null(strstr(out, "\033["));
    free(out);
    assert_int_equal(run_cmd(&out, "--color", "always", b.path, NULL), 1);
    assert_non_null(strstr(out, "\033["));
    free(out);
    unlink(b.path);
}

static void test_seed_control_no_findings(void **state)
{
    (void)state;
    tb b;
    build_seed(&b, "control", 0, 1);
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 0);
    gt_findings_free(f);
    char *out;
    assert_int_equal(run_cmd(&out, "--json", b.path, NULL), 0);
    assert_string_equal(jx(out, "$.findings"), "[]");
    assert_string_equal(jx(out, "$.error"), "");
    assert_non_null(strstr(out, "\"error\":null"));
    free(out);
    assert_int_equal(run_cmd(&out, b.path, NULL), 0);
    assert_non_null(strstr(out, "no findings"));
    free(out);
    unlink(b.path);
}

/* A killed recording: no gt_run_end, no close (no indexes), status running. */
static void test_partial_trace(void **state)
{
    (void)state;
    tb b;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        build_seed(&b, "partial", 1, -1);
        gt_recorder_flush(b.r);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(WEXITSTATUS(status), 0);
    snprintf(b.path, sizeof b.path, "/tmp/gt_test_diag_%d_%s.db", (int)pid, "partial");
    gt_findings *f = diagnose(b.path, 0, 1);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].version_at_backward, 6);
    assert_int_equal(f->v[0].n_mutations, 6);
    gt_findings_free(f);
    char *out;
    assert_int_equal(run_cmd(&out, "--json", b.path, NULL), 1);
    assert_string_equal(jx(out, "$.partial"), "1");
    free(out);
    assert_int_equal(run_cmd(&out, b.path, NULL), 1);
    assert_non_null(strstr(out, "the trace is partial"));
    free(out);
    char p[300];
    unlink(b.path);
    snprintf(p, sizeof p, "%s-wal", b.path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", b.path);
    unlink(p);
}

/* ---- silent writes through an alias with its own counter --------------- */

static void test_silent_storage_write(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "silent");
    assert_int_equal(gt_storage(b.r, 1, 24, b.cpu), 0);
    tb_tensor(&b, 200, 1, 3, 0, 1, 1, 0, 0, 0); /* w = storage[0:3] */
    tb_name(&b, 200, "w");
    int64_t op = tb_op(&b, "aten::mul", GT_PHASE_FORWARD, 10, "y = x * w");
    tb_node(&b, 1, "MulBackward0", op, 3);
    tb_save(&b, 1, "other", 200, 0);
    /* w.data: same bytes, its own counter; and a neighbour at [3:6]. */
    tb_tensor(&b, 201, 1, 3, 0, 0, 1, 200, 0, 0);
    tb_tensor(&b, 202, 1, 3, 3, 0, 1, 0, 0, 0);
    int64_t w1 = tb_mutate(&b, "aten::mul_.Tensor", 11, "w.data.mul_(2)", 201, 1);
    tb_mutate(&b, "aten::zero_", 12, "other.zero_()", 202, 1);
    gt_id bw = tb_backward(&b, 1, 0, 13);
    assert_int_equal(gt_backward_end(b.r, bw, 1), 0);
    tb_close(&b, 1);

    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, GT_FINDING_SILENT_STORAGE_WRITE);
    assert_int_equal(f->v[0].tensor, 200);
    assert_int_equal(f->v[0].first_to_fail, 0);
    assert_int_equal(f->v[0].saved_version, 0);
    assert_int_equal(f->v[0].version_at_backward, 0);
    assert_int_equal(f->v[0].n_mutations, 1);
    assert_int_equal(f->v[0].mutations[0].seq, w1);
    assert_int_equal(f->v[0].mutations[0].tensor, 201);
    gt_findings_free(f);
    char *out;
    assert_int_equal(run_cmd(&out, "--json", b.path, NULL), 1);
    assert_string_equal(jx(out, "$.findings[0].kind"), "silent_storage_write");
    assert_string_equal(jx(out, "$.findings[0].mutations[0].location.line"), "11");
    assert_string_equal(jx(out, "$.findings[0].mutations[0].names"), "[\"w\"]");
    assert_string_equal(jx(out, "$.findings[0].saved.names"), "[\"w\"]");
    free(out);
    unlink(b.path);
}

/* A non-reentrant checkpoint whose function changes its input in place:
 * the input h (300) was saved by the call (op C) at version 0, the write
 * inside the function bumped it, and the checkpoint_input rows of the two
 * nodes made in the region are written after that write (saved_earlier).
 * One finding (the first node run), its write the one inside. */
static void test_checkpoint_input_changed_inside(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "ckpt_inside");
    assert_int_equal(gt_storage(b.r, 1, 32, b.cpu), 0);
    tb_tensor(&b, 300, 1, 8, 0, 0, 1, 0, 0, 0);
    tb_name(&b, 300, "h");
    int64_t call = tb_op(&b, "torch.utils.checkpoint", GT_PHASE_FORWARD, 20,
                         "out = checkpoint(block, h, use_reentrant=False)");
    int64_t w = tb_mutate(&b, "aten::mul_.Tensor", 5, "    h.mul_(2)", 300, 1);
    tb_node(&b, 1, "SinBackward0", call, 3);
    tb_node(&b, 2, "MulBackward0", call, 4);
    assert_int_equal(gt_edge(b.r, 2, 0, 1, 0), 0);
    for (gt_id n = 1; n <= 2; n++)
        assert_int_equal(gt_saved_tensor_at(b.r, n, tb_str(&b, "checkpoint_input[0]"),
                                            300, 0, 0, 32, call, NULL),
                         0);
    gt_id bw = tb_backward(&b, 2, 0, 22);
    tb_backward_error(
        &b, bw, 22, "loss.backward()",
        "one of the variables needed for gradient computation has been "
        "modified by an inplace operation: [torch.FloatTensor [8]], which is "
        "output 0 of MulBackward0, is at version 1; expected version 0 "
        "instead.");
    tb_close(&b, 1);

    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, GT_FINDING_INPLACE_INVALIDATED_SAVED);
    assert_int_equal(f->v[0].node, 2); /* the higher sequence_nr runs first */
    assert_int_equal(f->v[0].tensor, 300);
    assert_int_equal(f->v[0].first_to_fail, 1);
    assert_int_equal(f->v[0].saved_version, 0);
    assert_int_equal(f->v[0].version_at_backward, 1);
    assert_int_equal(f->v[0].n_mutations, 1);
    assert_int_equal(f->v[0].mutations[0].seq, w);
    gt_findings_free(f);
    unlink(b.path);
}

/* A c10d collective writes the saved tensor itself (same counter) without a
 * bump: a silent write. An aten op's unbumped write (it raised before
 * writing) and an ordinary bumped write are not silent writes. */
static void test_collective_silent_write(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "collective");
    assert_int_equal(gt_storage(b.r, 1, 12, b.cpu), 0);
    tb_tensor(&b, 400, 1, 3, 0, 0, 1, 0, 0, 0); /* stats */
    tb_name(&b, 400, "stats");
    int64_t op = tb_op(&b, "aten::mul", GT_PHASE_FORWARD, 20, "y = w * stats");
    tb_node(&b, 1, "MulBackward0", op, 3);
    tb_save(&b, 1, "other", 400, 0);
    int64_t raised =
        tb_op(&b, "aten::add_.Tensor", GT_PHASE_FORWARD, 21, "stats.add_(bad)");
    assert_int_equal(gt_op_arg(b.r, raised, GT_ROLE_MUTATED, 0, 400, 0), 0);
    int64_t ar =
        tb_op(&b, "c10d::allreduce_", GT_PHASE_FORWARD, 22, "dist.all_reduce(stats)");
    assert_int_equal(gt_op_arg(b.r, ar, GT_ROLE_INPUT, 0, 400, 0), 0);
    assert_int_equal(gt_op_arg(b.r, ar, GT_ROLE_MUTATED, 0, 400, 0), 0);
    gt_id bw = tb_backward(&b, 1, 0, 23);
    assert_int_equal(gt_backward_end(b.r, bw, 1), 0);
    tb_close(&b, 1);

    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, GT_FINDING_SILENT_STORAGE_WRITE);
    assert_int_equal(f->v[0].tensor, 400);
    assert_int_equal(f->v[0].version_at_backward, 0);
    assert_int_equal(f->v[0].n_mutations, 1);
    assert_int_equal(f->v[0].mutations[0].seq, ar);
    assert_int_equal(f->v[0].mutations[0].bump_seq, 0);
    assert_non_null(strstr(f->v[0].suggestion, "reduce a copy"));
    gt_findings_free(f);
    char *out;
    assert_int_equal(run_cmd(&out, b.path, NULL), 1);
    assert_non_null(strstr(out, "stats overwritten by the collective c10d::allreduce_"));
    free(out);
    unlink(b.path);

    /* the same collective after the backward: nothing to report */
    tb_open(&b, "collective_after");
    assert_int_equal(gt_storage(b.r, 1, 12, b.cpu), 0);
    tb_tensor(&b, 400, 1, 3, 0, 0, 1, 0, 0, 0);
    op = tb_op(&b, "aten::mul", GT_PHASE_FORWARD, 20, "y = w * stats");
    tb_node(&b, 1, "MulBackward0", op, 3);
    tb_save(&b, 1, "other", 400, 0);
    bw = tb_backward(&b, 1, 0, 23);
    assert_int_equal(gt_backward_end(b.r, bw, 1), 0);
    ar = tb_op(&b, "c10d::allreduce_", GT_PHASE_FORWARD, 24, "dist.all_reduce(stats)");
    assert_int_equal(gt_op_arg(b.r, ar, GT_ROLE_MUTATED, 0, 400, 0), 0);
    tb_close(&b, 1);
    f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 0);
    gt_findings_free(f);
    unlink(b.path);
}

/* LSTMCell on CPU: sigmoid_/tanh_ on the four unsafe_chunk pieces of one
 * [B, 4H] gates buffer, each piece a view with its own version counter over
 * interleaved, disjoint bytes. Each op saves its result; writes to the other
 * pieces do not reach it (no finding), a write through a view that does
 * overlap (here a column of the whole buffer) does. */
static void test_disjoint_pieces_of_one_buffer(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "gates");
    enum { B = 3, H = 5 };
    assert_int_equal(gt_storage(b.r, 1, B * 4 * H * 4, b.cpu), 0);
    int64_t shape[2] = {B, H}, strides[2] = {4 * H, 1};
    int64_t seqs[4];
    for (int k = 0; k < 4; k++) {
        gt_tensor_info t = {.id = 400 + k,
                            .storage = 1,
                            .dtype = b.dtype,
                            .ndim = 2,
                            .shape = shape,
                            .strides = strides,
                            .storage_offset = k * H,
                            .requires_grad = 1,
                            .is_leaf = 0,
                            .version_counter = 400 + k};
        assert_int_equal(gt_tensor(b.r, &t), 0);
    }
    for (int k = 0; k < 4; k++) {
        seqs[k] = tb_mutate(&b, k == 2 ? "aten::tanh_" : "aten::sigmoid_", 20, "lstm(x)",
                            400 + k, 1);
        tb_node(&b, 1 + k, k == 2 ? "TanhBackward0" : "SigmoidBackward0", seqs[k],
                10 + k);
        tb_save(&b, 1 + k, "result", 400 + k, 1);
    }
    int64_t op = tb_op(&b, "aten::cat", GT_PHASE_FORWARD, 21, "h = cat(gates)");
    tb_node(&b, 5, "CatBackward0", op, 20);
    for (int k = 0; k < 4; k++)
        assert_int_equal(gt_edge(b.r, 5, k, 1 + k, 0), 0);
    gt_id bw = tb_backward(&b, 5, 1, 22);
    assert_int_equal(gt_backward_end(b.r, bw, 1), 0);
    /* Column 2 of the whole buffer: inside gate 0 only, for every row. */
    int64_t cshape[1] = {B}, cstrides[1] = {4 * H};
    gt_tensor_info col = {.id = 410,
                          .storage = 1,
                          .dtype = b.dtype,
                          .ndim = 1,
                          .shape = cshape,
                          .strides = cstrides,
                          .storage_offset = 2,
                          .version_counter = 410};
    assert_int_equal(gt_tensor(b.r, &col), 0);
    int64_t w = tb_mutate(&b, "aten::zero_", 23, "col.zero_()", 410, 1);
    gt_id bw2 = tb_backward(&b, 5, 0, 24);
    assert_int_equal(gt_backward_end(b.r, bw2, 1), 0);
    tb_close(&b, 1);

    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, GT_FINDING_SILENT_STORAGE_WRITE);
    assert_int_equal(f->v[0].backward, bw2);
    assert_int_equal(f->v[0].tensor, 400);
    assert_int_equal(f->v[0].n_mutations, 1);
    assert_int_equal(f->v[0].mutations[0].seq, w);
    gt_findings_free(f);
    unlink(b.path);
}

/* A custom autograd Function's node saves a tensor from inside its
 * forward; the tensor is then changed in place. "saved at" names the line
 * that called the Function (node.location), the line inside forward is
 * node.inner_location. */
static void test_custom_function_saved_at_caller(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "customfn");
    gt_id call_f, fwd_f, torch_f, s_call, s_apply, s_fwd;
    assert_int_equal(gt_intern_frame(b.r, TB_SOURCE_FILE, 20, "<module>",
                                     "y = MyExp.apply(x)", &call_f),
                     0);
    assert_int_equal(gt_intern_stack(b.r, 0, call_f, call_f, &s_call), 0);
    assert_int_equal(gt_intern_frame(b.r, "/torch/autograd/function.py", 575, "apply",
                                     "return super().apply(*args)", &torch_f),
                     0);
    assert_int_equal(gt_intern_stack(b.r, s_call, torch_f, call_f, &s_apply), 0);
    assert_int_equal(gt_intern_frame(b.r, TB_SOURCE_FILE, 12, "MyExp.forward",
                                     "result = x.exp()", &fwd_f),
                     0);
    assert_int_equal(gt_intern_stack(b.r, s_apply, fwd_f, fwd_f, &s_fwd), 0);
    tb_tensor(&b, 600, 0, 3, 0, 1, 1, 0, 0, 0);
    tb_tensor(&b, 601, 0, 3, 0, 1, 0, 0, 0, 0);
    tb_name(&b, 601, "y");
    gt_op_info o = {.name = tb_str(&b, "aten::exp"),
                    .phase = GT_PHASE_FORWARD,
                    .grad_mode = 0,
                    .thread = b.thread,
                    .stack = s_fwd};
    int64_t op;
    assert_int_equal(gt_op(b.r, &o, &op), 0);
    tb_node(&b, 1, "MyExpBackward", op, 1);
    tb_save(&b, 1, "saved_0", 601, 0);
    tb_mutate(&b, "aten::add_.Tensor", 21, "y.add_(1)", 601, 1);
    gt_id bw = tb_backward(&b, 1, 0, 22);
    assert_int_equal(gt_backward_end(b.r, bw, 1), 0);
    tb_close(&b, 1);

    char *out;
    assert_int_equal(run_cmd(&out, "--json", b.path, NULL), 1);
    assert_string_equal(jx(out, "$.findings[0].kind"), "inplace_invalidated_saved");
    assert_string_equal(jx(out, "$.findings[0].node.location.line"), "20");
    assert_string_equal(jx(out, "$.findings[0].node.inner_location.line"), "12");
    assert_string_equal(jx(out, "$.findings[0].node.inner_location.function"),
                        "MyExp.forward");
    free(out);
    /* An aten node ("ExpBackward0") keeps the op's own line. */
    unlink(b.path);
}

/* ---- backward twice ---------------------------------------------------- */

static void build_twice(tb *b, const char *name, int retain)
{
    tb_open(b, name);
    tb_tensor(b, 300, 0, 3, 0, 1, 1, 0, 0, 0);
    int64_t op = tb_op(b, "aten::exp", GT_PHASE_FORWARD, 5, "y = x.exp()");
    tb_node(b, 1, "ExpBackward0", op, 1);
    tb_tensor(b, 301, 0, 3, 0, 1, 0, 0, 0, 0);
    int64_t s = 0;
    assert_int_equal(gt_saved_tensor(b->r, 1, tb_str(b, "result"), 301, 0, 1, 12, &s), 0);
    int64_t sop = tb_op(b, "aten::sum", GT_PHASE_FORWARD, 6, "loss = y.sum()");
    tb_node(b, 2, "SumBackward0", sop, 2);
    assert_int_equal(gt_edge(b->r, 2, 0, 1, 0), 0);
    gt_id b1 = tb_backward(b, 2, retain, 7);
    assert_int_equal(gt_backward_end(b->r, b1, 1), 0);
    gt_id b2 = tb_backward(b, 2, 0, 8);
    if (retain)
        assert_int_equal(gt_backward_end(b->r, b2, 1), 0);
    else
        tb_backward_error(
            b, b2, 8, "loss.backward()",
            "Trying to backward through the graph a second time (or directly "
            "access saved tensors after they have already been freed).");
    tb_close(b, 1);
}

static void test_backward_twice(void **state)
{
    (void)state;
    tb b;
    build_twice(&b, "twice", 0);
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, GT_FINDING_BACKWARD_TWICE);
    assert_int_equal(f->v[0].backward, 2);
    assert_int_equal(f->v[0].other_backward, 1);
    assert_int_equal(f->v[0].node, 1);
    assert_int_equal(f->v[0].first_to_fail, 1);
    assert_int_equal(f->v[0].matches_error, 1);
    assert_non_null(strstr(f->v[0].suggestion, "retain_graph=True"));
    assert_non_null(strstr(f->v[0].suggestion, "/src/train.py:7"));
    gt_findings_free(f);

    /* --backward 1 alone: nothing wrong with the first call. */
    f = diagnose(b.path, 1, 0);
    assert_int_equal(f->n, 0);
    gt_findings_free(f);
    f = diagnose(b.path, 2, 0);
    assert_int_equal(f->n, 1);
    gt_findings_free(f);

    char *out;
    assert_int_equal(run_cmd(&out, "--json", b.path, NULL), 1);
    assert_string_equal(jx(out, "$.findings[0].kind"), "backward_twice");
    assert_string_equal(jx(out, "$.findings[0].backward.location.line"), "8");
    assert_string_equal(jx(out, "$.findings[0].freed_by.index"), "1");
    assert_string_equal(jx(out, "$.findings[0].freed_by.location.line"), "7");
    assert_string_equal(jx(out, "$.findings[0].mutations"), "[]");
    free(out);
    assert_int_equal(run_cmd(&out, "--backward", "1", b.path, NULL), 0);
    free(out);
    unlink(b.path);

    build_twice(&b, "twice_retained", 1);
    f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 0);
    gt_findings_free(f);
    unlink(b.path);
}

/* ---- in-place on a leaf ------------------------------------------------ */

static void test_leaf_inplace(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "leaf");
    tb_tensor(&b, 400, 0, 3, 0, 1, 1, 0, 0, 0);
    tb_name(&b, 400, "w");
    tb_tensor(&b, 401, 0, 3, 0, 0, 1, 0, 0, 0);
    tb_name(&b, 401, "wx");
    assert_int_equal(gt_error(b.r, "RuntimeError",
                              "a leaf Variable that requires grad is being used in an "
                              "in-place operation.",
                              tb_stack(&b, 21, "    w += 1  # wx too"), 0, NULL),
                     0);
    tb_close(&b, 1);
    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].kind, GT_FINDING_LEAF_INPLACE);
    assert_int_equal(f->v[0].tensor, 400);
    assert_int_equal(f->v[0].first_to_fail, 1);
    assert_non_null(strstr(f->v[0].suggestion, "torch.no_grad()"));
    gt_findings_free(f);
    char *out;
    assert_int_equal(run_cmd(&out, "--json", b.path, NULL), 1);
    assert_string_equal(jx(out, "$.findings[0].kind"), "leaf_inplace");
    assert_string_equal(jx(out, "$.findings[0].location.line"), "21");
    assert_string_equal(jx(out, "$.findings[0].leaf.names"), "[\"w\"]");
    assert_string_equal(jx(out, "$.findings[0].backward"), "");
    free(out);
    unlink(b.path);
}

/* ---- two saved tensors broken in one backward -------------------------- */

/* a (node 9) and b (node 3) both saved, both changed; the engine runs
 * node 9 first, so its tensor is the one PyTorch names. */
static void test_two_invalidated(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "two");
    tb_tensor(&b, 500, 0, 3, 0, 1, 0, 0, 0, 0);
    tb_name(&b, 500, "a");
    int64_t s = tb_op(&b, "aten::sin", GT_PHASE_FORWARD, 3, "b = a.sin()");
    tb_node(&b, 3, "SinBackward0", s, 3);
    tb_save(&b, 3, "self", 500, 0);
    tb_tensor(&b, 501, 0, 3, 0, 1, 0, 0, 0, 0);
    tb_name(&b, 501, "b");
    int64_t c = tb_op(&b, "aten::cos", GT_PHASE_FORWARD, 4, "c = b.cos()");
    tb_node(&b, 9, "CosBackward0", c, 9);
    assert_int_equal(gt_edge(b.r, 9, 0, 3, 0), 0);
    tb_save(&b, 9, "self", 501, 0);
    tb_mutate(&b, "aten::add_.Tensor", 5, "a += 1", 500, 1);
    tb_mutate(&b, "aten::mul_.Tensor", 6, "b *= 2", 501, 1);
    tb_mutate(&b, "aten::mul_.Tensor", 7, "b *= 2", 501, 2);
    gt_id bw = tb_backward(&b, 9, 0, 8);
    tb_backward_error(&b, bw, 8, "c.sum().backward()",
                      "one of the variables needed for gradient computation has been "
                      "modified by an inplace operation: [torch.FloatTensor [3]] is at "
                      "version 2; expected version 0 instead.");
    tb_close(&b, 1);

    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 2);
    assert_int_equal(f->v[0].node, 9);
    assert_int_equal(f->v[0].tensor, 501);
    assert_int_equal(f->v[0].version_at_backward, 2);
    assert_int_equal(f->v[0].first_to_fail, 1);
    assert_int_equal(f->v[0].matches_error, 1);
    assert_non_null(strstr(f->v[0].suggestion, "`b = b * (2)`"));
    assert_int_equal(f->v[1].node, 3);
    assert_int_equal(f->v[1].tensor, 500);
    assert_int_equal(f->v[1].version_at_backward, 1);
    assert_int_equal(f->v[1].first_to_fail, 0);
    assert_int_equal(f->v[1].matches_error, 0);
    assert_non_null(strstr(f->v[1].suggestion, "`a = a + (1)`"));
    gt_findings_free(f);
    unlink(b.path);
}

/* ---- node_execs: the check point is when the engine ran the node ------ */

/* t is saved by A (sequence_nr 5) and B (3). During the backward, after A
 * ran and before B ran, a hook changes t in place: only B sees it. */
static void test_bump_during_backward(void **state)
{
    (void)state;
    tb b;
    tb_open(&b, "execs");
    tb_tensor(&b, 600, 0, 3, 0, 1, 0, 0, 0, 0);
    tb_name(&b, 600, "t");
    tb_node(&b, 3, "SinBackward0",
            tb_op(&b, "aten::sin", GT_PHASE_FORWARD, 3, "u = t.sin()"), 3);
    tb_save(&b, 3, "self", 600, 0);
    tb_node(&b, 5, "CosBackward0",
            tb_op(&b, "aten::cos", GT_PHASE_FORWARD, 4, "v = t.cos()"), 5);
    tb_save(&b, 5, "self", 600, 0);
    assert_int_equal(gt_edge(b.r, 5, 0, 3, 0), 0);
    gt_id bw = tb_backward(&b, 5, 0, 9);
    assert_int_equal(gt_node_exec(b.r, bw, 5), 0);
    int64_t op = tb_op(&b, "aten::mul_.Tensor", GT_PHASE_BACKWARD, 7, "    t.mul_(2)");
    assert_int_equal(gt_op_arg(b.r, op, GT_ROLE_MUTATED, 0, 600, 0), 0);
    assert_int_equal(gt_version_bump(b.r, op, 600, 1, 0, NULL), 0);
    assert_int_equal(gt_node_exec(b.r, bw, 3), 0);
    assert_int_equal(gt_backward_end(b.r, bw, 0), 0);
    tb_close(&b, 1);

    gt_findings *f = diagnose(b.path, 0, 0);
    assert_int_equal(f->n, 1);
    assert_int_equal(f->v[0].node, 3);
    assert_int_equal(f->v[0].version_at_backward, 1);
    assert_int_equal(f->v[0].n_mutations, 1);
    assert_int_equal(f->v[0].mutations[0].seq, op);
    assert_int_equal(f->v[0].first_to_fail, 1);
    assert_int_equal(f->v[0].matches_error, -1);
    gt_findings_free(f);
    char *out;
    assert_int_equal(run_cmd(&out, "--json", b.path, NULL), 1);
    assert_string_equal(jx(out, "$.findings[0].mutations[0].phase"), "backward");
    assert_string_equal(jx(out, "$.findings[0].mutations[0].location.line"), "7");
    free(out);
    unlink(b.path);
}

/* ---- a damaged trace: every read failure is an error, not a crash ----- */

static void test_damaged_trace(void **state)
{
    (void)state;
    static const char *drops[] = {"edges", "saved_tensors", "version_bumps",
                                  "node_outputs"};
    for (size_t i = 0; i < sizeof drops / sizeof drops[0]; i++) {
        tb b;
        char name[64], sql[128];
        snprintf(name, sizeof name, "damaged_%s", drops[i]);
        build_seed(&b, name, 1, 1);
        sqlite3 *db;
        assert_int_equal(sqlite3_open(b.path, &db), SQLITE_OK);
        snprintf(sql, sizeof sql, "DROP TABLE %s", drops[i]);
        assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
        sqlite3_close(db);
        gt_trace *t;
        gt_findings *f = NULL;
        assert_int_equal(gt_trace_open(b.path, &t), 0);
        int rc = gt_diagnose(t, NULL, &f);
        printf("  without %s: %d %s\n", drops[i], rc, gt_trace_errmsg(t));
        assert_int_equal(rc, GT_ECORRUPT);
        assert_null(f);
        assert_non_null(strstr(gt_trace_errmsg(t), "cannot read trace: no such table"));
        char *out;
        assert_int_equal(run_cmd(&out, b.path, NULL), 2);
        assert_string_equal(out, "");
        free(out);
        gt_trace_close(t);
        unlink(b.path);
    }
}

/* ---- bad input --------------------------------------------------------- */

static void test_bad_input(void **state)
{
    (void)state;
    char *out;
    char path[] = "/tmp/gt_test_diag_junk_XXXXXX";
    int fd = mkstemp(path);
    assert_int_equal(write(fd, "hello, not a database at all", 28), 28);
    close(fd);
    assert_int_equal(run_cmd(&out, path, NULL), 2);
    assert_string_equal(out, "");
    free(out);
    unlink(path);
    assert_int_equal(run_cmd(&out, "/nonexistent/run.db", NULL), 2);
    free(out);
    assert_int_equal(run_cmd(&out, NULL), 2);
    free(out);
    assert_int_equal(run_cmd(&out, "--backward", "0", "x.db", NULL), 2);
    free(out);
    assert_int_equal(run_cmd(&out, "--bogus", "x.db", NULL), 2);
    free(out);
    tb b;
    build_seed(&b, "badbw", 0, 1);
    assert_int_equal(run_cmd(&out, "--backward", "9", b.path, NULL), 2);
    assert_string_equal(out, "");
    free(out);
    unlink(b.path);
}

/* The error model (trace.h): a failed open still hands back a handle that
 * holds the message, without the program's name; a failed call keeps its
 * message on the trace; a call that succeeds clears it. */
static void test_trace_errors(void **state)
{
    (void)state;
    gt_trace *t = NULL;
    assert_int_equal(gt_trace_open("/nonexistent/run.db", &t), GT_EIO);
    assert_non_null(t);
    assert_non_null(strstr(gt_trace_errmsg(t), "cannot open /nonexistent/run.db: "));
    assert_int_equal(gt_trace_errcode(t), GT_EIO);
    gt_trace_close(t);
    t = NULL;
    assert_int_equal(gt_trace_open("/tmp", &t), GT_EINVAL);
    assert_string_equal(gt_trace_errmsg(t), "cannot open /tmp: is a directory");
    gt_trace_close(t);
    assert_string_equal(gt_trace_errmsg(NULL), "out of memory");
    /* the message whole, however long the path (it was cut at 1,023 bytes) */
    char *longpath = malloc(3001), *want = malloc(3100);
    assert_non_null(longpath);
    assert_non_null(want);
    memset(longpath, 'p', 3000);
    memcpy(longpath, "/nonexistent/", 13);
    longpath[3000] = 0;
    snprintf(want, 3100, "cannot open %s: %s", longpath, strerror(ENOENT));
    assert_int_equal(gt_trace_open(longpath, &t), GT_EIO);
    assert_string_equal(gt_trace_errmsg(t), want);
    gt_trace_close(t);
    free(longpath);
    free(want);

    tb b;
    gt_findings *f = NULL;
    build_seed(&b, "errmodel", 1, 1);
    assert_int_equal(gt_trace_open(b.path, &t), GT_OK);
    assert_string_equal(gt_trace_errmsg(t), "");
    gt_diagnose_options o = {.backward = 99};
    assert_int_equal(gt_diagnose(t, &o, &f), GT_EINVAL);
    assert_null(f);
    assert_non_null(strstr(gt_trace_errmsg(t), "no backward call 99 in "));
    assert_null(strstr(gt_trace_errmsg(t), "gradtrace:"));
    assert_int_equal(gt_diagnose(t, NULL, &f), 0);
    assert_string_equal(gt_trace_errmsg(t), "");
    gt_findings_free(f);
    gt_trace_close(t);
    unlink(b.path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_finding),
        cmocka_unit_test(test_trace_errors),
        cmocka_unit_test(test_seed_control_no_findings),
        cmocka_unit_test(test_partial_trace),
        cmocka_unit_test(test_silent_storage_write),
        cmocka_unit_test(test_checkpoint_input_changed_inside),
        cmocka_unit_test(test_collective_silent_write),
        cmocka_unit_test(test_disjoint_pieces_of_one_buffer),
        cmocka_unit_test(test_custom_function_saved_at_caller),
        cmocka_unit_test(test_backward_twice),
        cmocka_unit_test(test_leaf_inplace),
        cmocka_unit_test(test_two_invalidated),
        cmocka_unit_test(test_bump_during_backward),
        cmocka_unit_test(test_damaged_trace),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
