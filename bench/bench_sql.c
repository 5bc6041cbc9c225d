/*
 * bench_sql: how long the trace views take on a synthetic training trace,
 * beside two anchors measured in the same run on the same file: a plain
 * `SELECT count(*) FROM ops`, and gt_diagnose (the replay that the
 * invalidations view must agree with).
 *
 * The trace (written with the recorder API, as the adapter would) has STEPS
 * training steps. Each step: a forward chain of GRAPH ops, one node each
 * (edges to the previous node and to a parameter's AccumulateGrad), saving
 * its input activation and its parameter; filler ops that bump a scratch
 * buffer; one backward; an optimizer step bumping every parameter. In the
 * last step one activation is changed in place before the backward: the
 * invalidations view, like the diagnosis, must find exactly that one.
 *
 * Prints `name: value unit` lines. Never fails the build: errors are printed
 * as `error: ...` and the program exits 0.
 *
 * Usage: bench_sql [total-ops] [steps] [graph-ops]   (default 200000 100 200)
 * With GT_BENCH_KEEP set, the trace file is left in /tmp for inspection.
 */
#include <gradtrace/recorder.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <gradtrace/diagnose.h>
#include <gradtrace/trace.h>

#include "bench.h"

#define PARAMS 8

/* Write the trace; returns 0 or -1 (message printed). */
static int generate(const char *path, long total, long steps, long graph)
{
    gt_recorder *r = NULL;
    gt_recorder_options o = {0};
    char err[256];
    int ok = -1;
    long per_step = total / steps;
    long filler = per_step - graph - PARAMS;
    gt_id next_tensor = 1, next_node = 1, thread, frames[5], stacks[5], s_opt, s_bug,
          s_bw;
    gt_id n_mm, n_add, n_mul, n_acc, n_mmb, n_f32, cpu, s_self, s_mat2, api;
    gt_id param[PARAMS], acc[PARAMS], scratch;
    int64_t pver[PARAMS] = {0}, sver = 0, seq;
    const int64_t shape[2] = {64, 64}, strides[2] = {64, 1};

    if (filler < 0)
        filler = 0;
    o.overwrite = 1;
    if (gt_recorder_open(path, &o, err, sizeof err, &r) != 0) {
        printf("error: cannot create %s: %s\n", path, err);
        return -1;
    }
    CHECK(gt_intern_thread(r, 1, "MainThread", &thread));
    for (int i = 0; i < 5; i++) {
        char code[32];
        snprintf(code, sizeof code, "h%d = layer%d(h%d)", i + 1, i, i);
        CHECK(gt_intern_frame(r, "train.py", 10 + i, "forward", code, &frames[i]));
        CHECK(gt_intern_stack(r, 0, frames[i], frames[i], &stacks[i]));
    }
    gt_id f;
    CHECK(gt_intern_frame(r, "train.py", 30, "<module>", "opt.step()", &f));
    CHECK(gt_intern_stack(r, 0, f, f, &s_opt));
    CHECK(gt_intern_frame(r, "train.py", 25, "<module>", "h.mul_(0.5)", &f));
    CHECK(gt_intern_stack(r, 0, f, f, &s_bug));
    CHECK(gt_intern_frame(r, "train.py", 28, "<module>", "loss.backward()", &f));
    CHECK(gt_intern_stack(r, 0, f, f, &s_bw));
    CHECK(gt_intern_string(r, "aten::mm", 8, &n_mm));
    CHECK(gt_intern_string(r, "aten::add_.Tensor", 17, &n_add));
    CHECK(gt_intern_string(r, "aten::mul_.Tensor", 17, &n_mul));
    CHECK(gt_intern_string(r, "AccumulateGrad", 14, &n_acc));
    CHECK(gt_intern_string(r, "MmBackward0", 11, &n_mmb));
    CHECK(gt_intern_string(r, "float32", 7, &n_f32));
    CHECK(gt_intern_string(r, "cpu", 3, &cpu));
    CHECK(gt_intern_string(r, "self", 4, &s_self));
    CHECK(gt_intern_string(r, "mat2", 4, &s_mat2));
    CHECK(gt_intern_string(r, "Tensor.backward", 15, &api));

    gt_tensor_info t = {0};
    t.dtype = n_f32;
    t.ndim = 2;
    t.shape = shape;
    t.strides = strides;
    for (int p = 0; p <= PARAMS; p++) {
        t.id = next_tensor++;
        t.storage = t.id;
        t.requires_grad = p < PARAMS;
        t.is_leaf = 1;
        CHECK(gt_storage(r, t.storage, 64 * 64 * 4, cpu));
        CHECK(gt_tensor(r, &t));
        if (p == PARAMS) {
            scratch = t.id;
            break;
        }
        param[p] = t.id;
        gt_node_info n = {0};
        n.id = acc[p] = next_node++;
        n.name = n_acc;
        n.sequence_nr = -1;
        n.variable = param[p];
        CHECK(gt_node(r, &n));
    }

    for (long s = 0; s < steps; s++) {
        int last = s == steps - 1;
        gt_id act = next_tensor++, prev_node = 0, bug_act = 0;
        t.id = act;
        t.storage = act;
        t.requires_grad = 0;
        CHECK(gt_storage(r, act, 64 * 64 * 4, cpu));
        CHECK(gt_tensor(r, &t));
        for (long k = 0; k < graph; k++) {
            gt_op_info op = {n_mm, GT_PHASE_FORWARD, 1, thread, stacks[k % 5]};
            int p = (int)(k % PARAMS);
            CHECK(gt_op(r, &op, &seq));
            CHECK(gt_op_arg(r, seq, GT_ROLE_INPUT, 0, act, 0));
            CHECK(gt_op_arg(r, seq, GT_ROLE_INPUT, 1, param[p], pver[p]));
            t.id = next_tensor++;
            t.storage = t.id;
            t.requires_grad = 1;
            t.is_leaf = 0;
            t.created_by = seq;
            CHECK(gt_storage(r, t.id, 64 * 64 * 4, cpu));
            CHECK(gt_tensor(r, &t));
            gt_node_info n = {0};
            n.id = next_node++;
            n.name = n_mmb;
            n.op = seq;
            n.sequence_nr = k;
            n.thread = thread;
            CHECK(gt_node(r, &n));
            CHECK(gt_edge(r, n.id, 0, prev_node, 0));
            CHECK(gt_edge(r, n.id, 1, acc[p], 0));
            CHECK(gt_node_output(r, n.id, 0, t.id));
            CHECK(gt_saved_tensor(r, n.id, s_self, act, 0, 0, 64 * 64 * 4, NULL));
            CHECK(gt_saved_tensor(r, n.id, s_mat2, param[p], pver[p], 0, 64 * 64 * 4,
                                  NULL));
            if (last && k == graph / 2)
                bug_act = act;
            act = t.id;
            prev_node = n.id;
        }
        for (long k = 0; k < filler; k++) {
            gt_op_info op = {n_add, GT_PHASE_OTHER, 0, thread, s_opt};
            CHECK(gt_op(r, &op, &seq));
            CHECK(gt_op_arg(r, seq, GT_ROLE_MUTATED, 0, scratch, sver));
            CHECK(gt_version_bump(r, seq, scratch, ++sver, 0, NULL));
        }
        if (last) {
            gt_op_info op = {n_mul, GT_PHASE_FORWARD, 1, thread, s_bug};
            CHECK(gt_op(r, &op, &seq));
            CHECK(gt_op_arg(r, seq, GT_ROLE_MUTATED, 0, bug_act, 0));
            CHECK(gt_version_bump(r, seq, bug_act, 1, 0, NULL));
        }
        gt_backward_info b = {api, 0, 0, thread, s_bw};
        gt_id bw;
        CHECK(gt_backward_begin(r, &b, &bw));
        CHECK(gt_backward_root(r, bw, 0, act, prev_node));
        CHECK(gt_backward_end(r, bw, !last));
        for (int p = 0; p < PARAMS && !last; p++) {
            gt_op_info op = {n_add, GT_PHASE_OTHER, 0, thread, s_opt};
            CHECK(gt_op(r, &op, &seq));
            CHECK(gt_op_arg(r, seq, GT_ROLE_MUTATED, 0, param[p], pver[p]));
            CHECK(gt_version_bump(r, seq, param[p], ++pver[p], 0, NULL));
        }
    }
    CHECK(gt_run_end(r, GT_RUN_EXCEPTION, 1, 0));
    ok = 0;
out:
    if (gt_recorder_close(r) != 0 && ok == 0) {
        printf("error: closing the trace failed\n");
        ok = -1;
    }
    return ok;
}

/* Time one query: its first column of the first row in *value. */
static double timed(sqlite3 *db, const char *sql, long long *value)
{
    sqlite3_stmt *st;
    double t0 = now_s();
    *value = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        printf("error: %s: %s\n", sql, sqlite3_errmsg(db));
        return -1;
    }
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (*value == -1)
            *value = sqlite3_column_int64(st, 0);
    if (rc != SQLITE_DONE)
        printf("error: %s: %s\n", sql, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return now_s() - t0;
}

int main(int argc, char **argv)
{
    long total = argc > 1 ? atol(argv[1]) : 200000;
    long steps = argc > 2 ? atol(argv[2]) : 100;
    long graph = argc > 3 ? atol(argv[3]) : 200;
    char path[64];
    gt_trace *t = NULL;
    gt_findings *fs = NULL;
    long long v;

    if (total <= 0 || steps <= 0 || graph <= 0) {
        printf("error: usage: bench_sql [total-ops] [steps] [graph-ops]\n");
        return 0;
    }
    snprintf(path, sizeof path, "/tmp/gt_bench_sql_%d.db", (int)getpid());
    double t0 = now_s();
    if (generate(path, total, steps, graph) != 0)
        goto out;
    printf("trace_write: %.2f s\n", now_s() - t0);
    if (gt_trace_open(path, &t) != 0 || gt_trace_use_views(t) != 0) {
        printf("error: %s\n", gt_trace_errmsg(t));
        goto out;
    }
    sqlite3 *db = gt_trace_db(t);
    double anchor = timed(db, "SELECT count(*) FROM ops", &v);
    printf("ops: %lld\n", v);
    printf("anchor_count_ops: %.3f s\n", anchor);

    t0 = now_s();
    if (gt_diagnose(t, NULL, &fs) != 0) {
        printf("error: diagnose: %s\n", gt_trace_errmsg(t));
        goto out;
    }
    double diag = now_s() - t0;
    size_t inplace = 0;
    for (size_t i = 0; i < fs->n; i++)
        inplace += fs->v[i].kind == GT_FINDING_INPLACE_INVALIDATED_SAVED;
    printf("anchor_diagnose: %.3f s (%zu in-place findings)\n", diag, inplace);

    static const struct {
        const char *name, *sql;
    } q[] = {
        {"invalidations", "SELECT count(*) FROM invalidations"},
        {"op_log_all_rows", "SELECT count(line) FROM op_log"},
        {"mutations_all_rows", "SELECT count(version_before) FROM mutations"},
        {"saved_all_rows", "SELECT count(line) FROM saved"},
        {"saved_memory", "SELECT count(*) FROM saved_memory"},
        {"backward_log", "SELECT count(error_type) FROM backward_log"},
        {"tensor_history_one_tensor",
         "SELECT count(*) FROM tensor_history WHERE tensor = 1"},
        {"events_one_line",
         "SELECT count(*) FROM events WHERE file = 'train.py' AND line = 25"},
        {"backward_reach_last", "SELECT count(*) FROM backward_reach WHERE backward = "
                                "(SELECT max(id) FROM backward_calls)"},
    };
    for (size_t i = 0; i < sizeof q / sizeof *q; i++) {
        double s = timed(db, q[i].sql, &v);
        printf("view_%s: %.3f s (%.1fx count(*) ops, %.2fx diagnose; result %lld)\n",
               q[i].name, s, anchor > 0 ? s / anchor : 0, diag > 0 ? s / diag : 0, v);
    }
out:
    gt_findings_free(fs);
    gt_trace_close(t);
    if (getenv("GT_BENCH_KEEP"))
        printf("trace kept: %s\n", path);
    else
        unlink(path);
    return 0;
}
