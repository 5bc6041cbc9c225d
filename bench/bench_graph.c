/*
 * bench_graph: how long `gradtrace graph` takes on a big trace, in focus mode
 * and with --all, beside its anchor measured in the same run: the time to
 * build the cgraph graph alone (no layout, no rendering).
 *
 * The trace is written with the recorder API: an MLP of `layers` layers,
 * five autograd nodes each (AccumulateGrad for weight and bias, TBackward0,
 * AddmmBackward0 saving mat1 and mat2, ReluBackward0 saving its result), so
 * 2000 layers make 10,000 nodes. Between forward and backward one in-place
 * op changes the saved ReLU output of the middle layer: diagnose finds it,
 * and focus draws its neighbourhood.
 *
 * Prints `name: value unit` lines. Never fails: errors are printed as
 * `error: ...` and the program still exits 0. A refused layout (too many
 * nodes) is printed as `all_svg_svg: refused` with the message. Last, a
 * second, smaller trace whose --all graph is just under the layout limit
 * shows the slowest layout the default limit still accepts
 * (`at_limit_all_svg`); the layout-limit argument applies to all_svg only.
 *
 * Usage: bench_graph [layers] [layout-limit]   (default 2000 layers and
 * GT_GRAPH_DEFAULT_LAYOUT_LIMIT; the trace goes to $TMPDIR or /tmp)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <gradtrace/recorder.h>

#include <gradtrace/diagnose.h>
#include <gradtrace/graph.h>
#include <gradtrace/graph_render.h>
#include <gradtrace/trace.h>

#include "bench.h"

static gt_id str(gt_recorder *r, const char *s)
{
    gt_id id = 0;
    if (gt_intern_string(r, s, strlen(s), &id) != 0)
        return 0;
    return id;
}

/* Write the MLP trace; returns 0 or -1 (message printed). */
static int make_trace(const char *path, int layers)
{
    gt_recorder *r = NULL;
    gt_recorder_options ro = {.overwrite = 1};
    char err[256] = "";
    int ok = -1;
    gt_id thread, frame_fwd, frame_upd, stack_fwd, stack_upd, frame_bw, stack_bw;
    int64_t shape2[2] = {64, 64}, strides2[2] = {64, 1}, shape1[1] = {64},
            strides1[1] = {1};

    if (gt_recorder_open(path, &ro, err, sizeof err, &r) != 0) {
        printf("error: cannot create %s: %s\n", path, err);
        return -1;
    }
    gt_id f32 = str(r, "float32"), accum = str(r, "AccumulateGrad"),
          tback = str(r, "TBackward0"), addmm = str(r, "AddmmBackward0"),
          relu = str(r, "ReluBackward0"), op_addmm = str(r, "aten::addmm"),
          op_relu = str(r, "aten::relu"), op_t = str(r, "aten::t"),
          op_mul = str(r, "aten::mul_.Tensor"), s_mat1 = str(r, "mat1"),
          s_mat2 = str(r, "mat2"), s_result = str(r, "result");
    CHECK(gt_intern_thread(r, 1, "main", &thread));
    CHECK(gt_intern_frame(r, "/bench/mlp.py", 20, "forward", "h = torch.relu(layer(h))",
                          &frame_fwd));
    CHECK(gt_intern_stack(r, 0, frame_fwd, frame_fwd, &stack_fwd));
    CHECK(gt_intern_frame(r, "/bench/mlp.py", 31, "<module>", "acts[mid].mul_(0.5)",
                          &frame_upd));
    CHECK(gt_intern_stack(r, 0, frame_upd, frame_upd, &stack_upd));
    CHECK(gt_intern_frame(r, "/bench/mlp.py", 33, "<module>", "loss.backward()",
                          &frame_bw));
    CHECK(gt_intern_stack(r, 0, frame_bw, frame_bw, &stack_bw));

    /* Ids: tensors and nodes 10*layer + k. */
    gt_id prev_node = 0, prev_act = 1, mid_act = 0;
    gt_tensor_info x = {.id = prev_act,
                        .dtype = f32,
                        .ndim = 2,
                        .shape = shape2,
                        .strides = strides2,
                        .is_leaf = 1};
    CHECK(gt_tensor(r, &x));
    for (int l = 1; l <= layers; l++) {
        gt_id base = 10 * (gt_id)l;
        gt_id w = base + 1, b = base + 2, wt = base + 3, pre = base + 4, act = base + 5;
        gt_tensor_info tw = {.id = w,
                             .dtype = f32,
                             .ndim = 2,
                             .shape = shape2,
                             .strides = strides2,
                             .requires_grad = 1,
                             .is_leaf = 1};
        gt_tensor_info tb = {.id = b,
                             .dtype = f32,
                             .ndim = 1,
                             .shape = shape1,
                             .strides = strides1,
                             .requires_grad = 1,
                             .is_leaf = 1};
        CHECK(gt_tensor(r, &tw));
        CHECK(gt_tensor(r, &tb));
        char name[64];
        snprintf(name, sizeof name, "layers.%d.weight", l - 1);
        CHECK(gt_name(r, gt_recorder_seq(r), w, name));
        snprintf(name, sizeof name, "layers.%d.bias", l - 1);
        CHECK(gt_name(r, gt_recorder_seq(r), b, name));

        int64_t seq_t, seq_mm, seq_relu;
        gt_op_info o = {.name = op_t,
                        .phase = GT_PHASE_FORWARD,
                        .grad_mode = 1,
                        .thread = thread,
                        .stack = stack_fwd};
        CHECK(gt_op(r, &o, &seq_t));
        o.name = op_addmm;
        CHECK(gt_op(r, &o, &seq_mm));
        o.name = op_relu;
        CHECK(gt_op(r, &o, &seq_relu));
        gt_tensor_info tp = {.id = pre,
                             .dtype = f32,
                             .ndim = 2,
                             .shape = shape2,
                             .strides = strides2,
                             .requires_grad = 1,
                             .created_by = seq_mm};
        gt_tensor_info ta = tp;
        ta.id = act;
        ta.created_by = seq_relu;
        gt_tensor_info twt = tp;
        twt.id = wt;
        twt.created_by = seq_t;
        twt.alias_of = w;
        twt.shares_version = 1;
        twt.version_counter = w;
        CHECK(gt_tensor(r, &twt));
        CHECK(gt_tensor(r, &tp));
        CHECK(gt_tensor(r, &ta));
        CHECK(gt_op_arg(r, seq_relu, GT_ROLE_INPUT, 0, pre, 0));
        CHECK(gt_op_arg(r, seq_relu, GT_ROLE_OUTPUT, 0, act, 0));

        gt_node_info n = {.id = base + 1,
                          .name = accum,
                          .sequence_nr = -1,
                          .thread = thread,
                          .variable = w};
        CHECK(gt_node(r, &n));
        n = (gt_node_info){.id = base + 2,
                           .name = accum,
                           .sequence_nr = -1,
                           .thread = thread,
                           .variable = b};
        CHECK(gt_node(r, &n));
        n = (gt_node_info){.id = base + 3,
                           .name = tback,
                           .op = seq_t,
                           .sequence_nr = 3 * l,
                           .thread = thread};
        CHECK(gt_node(r, &n));
        CHECK(gt_edge(r, base + 3, 0, base + 1, 0));
        n = (gt_node_info){.id = base + 4,
                           .name = addmm,
                           .op = seq_mm,
                           .sequence_nr = 3 * l + 1,
                           .thread = thread};
        CHECK(gt_node(r, &n));
        CHECK(gt_edge(r, base + 4, 0, base + 2, 0));
        CHECK(gt_edge(r, base + 4, 1, prev_node, 0));
        CHECK(gt_edge(r, base + 4, 2, base + 3, 0));
        CHECK(gt_saved_tensor(r, base + 4, s_mat1, prev_act, 0, 0, 64 * 64 * 4, NULL));
        CHECK(gt_saved_tensor(r, base + 4, s_mat2, wt, 0, 0, 64 * 64 * 4, NULL));
        n = (gt_node_info){.id = base + 5,
                           .name = relu,
                           .op = seq_relu,
                           .sequence_nr = 3 * l + 2,
                           .thread = thread};
        CHECK(gt_node(r, &n));
        CHECK(gt_edge(r, base + 5, 0, base + 4, 0));
        CHECK(gt_saved_tensor(r, base + 5, s_result, act, 0, 1, 64 * 64 * 4, NULL));
        CHECK(gt_node_output(r, base + 5, 0, act));
        prev_node = base + 5;
        prev_act = act;
        if (l == layers / 2)
            mid_act = act;
    }
    /* The bug: the middle layer's saved ReLU output changed in place. */
    int64_t seq_mul;
    gt_op_info o = {.name = op_mul,
                    .phase = GT_PHASE_FORWARD,
                    .grad_mode = 1,
                    .thread = thread,
                    .stack = stack_upd};
    CHECK(gt_op(r, &o, &seq_mul));
    CHECK(gt_op_arg(r, seq_mul, GT_ROLE_MUTATED, 0, mid_act, 0));
    CHECK(gt_version_bump(r, seq_mul, mid_act, 1, 0, NULL));

    gt_backward_info bi = {
        .api = str(r, "Tensor.backward"), .thread = thread, .stack = stack_bw};
    gt_id bw;
    CHECK(gt_backward_begin(r, &bi, &bw));
    CHECK(gt_backward_root(r, bw, 0, prev_act, prev_node));
    CHECK(gt_error(r, "RuntimeError",
                   "one of the variables needed for gradient computation has been "
                   "modified by an inplace operation",
                   stack_bw, bw, NULL));
    CHECK(gt_backward_end(r, bw, 0));
    CHECK(gt_run_end(r, GT_RUN_EXCEPTION, 1, 0));
    ok = 0;
out:
    if (gt_recorder_close(r) != 0 && ok == 0) {
        printf("error: closing %s failed\n", path);
        ok = -1;
    }
    return ok;
}

/* Build (and time it), then render in `format` to path (and time it).
 * Prints `<name>_build` and `<name>_<format>` lines. */
static void measure(gt_trace *t, const gt_findings *fs, const char *name, int all,
                    size_t limit, int format, const char *path, double *build_s)
{
    gt_graph_options o = {.hops = -1, .all = all, .findings = fs, .layout_limit = limit};
    gt_graph *g = NULL;
    double t0 = now_s();
    if (gt_graph_build(t, &o, &g) != 0) {
        printf("error: %s: build: %s\n", name, gt_trace_errmsg(t));
        return;
    }
    double t1 = now_s();
    *build_s = t1 - t0;
    printf("%s_build: %.4f s\n", name, t1 - t0);
    printf("%s_drawn_nodes: %zu nodes\n", name, gt_graph_nodes_drawn(g));
    printf("%s_graphviz_nodes: %d nodes\n", name, agnnodes(gt_graph_agraph(g)));
    int rc = gt_graph_render(g, format, path);
    double t2 = now_s();
    if (rc == GT_EINVAL)
        printf("%s_%s: refused (%s) after %.4f s\n", name, gt_graph_format_name(format),
               gt_graph_errmsg(g), t2 - t1);
    else if (rc != 0)
        printf("error: %s: %s\n", name, gt_graph_errmsg(g));
    else
        printf("%s_%s: %.4f s\n", name, gt_graph_format_name(format), t2 - t1);
    gt_graph_free(g);
}

int main(int argc, char **argv)
{
    int layers = argc > 1 ? atoi(argv[1]) : 2000;
    size_t limit = argc > 2 ? (size_t)atol(argv[2]) : 0;
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char path[512], out[600];
    gt_trace *t = NULL;
    gt_findings *fs = NULL;
    double build_s = 0, focus_build_s = 0;

    if (layers < 2)
        layers = 2;
    snprintf(path, sizeof path, "%s/bench_graph_%ld.db", dir, (long)getpid());
    double t0 = now_s();
    if (make_trace(path, layers) != 0)
        goto out;
    printf("trace_nodes: %d nodes\n", 5 * layers);
    printf("trace_write: %.3f s\n", now_s() - t0);

    if (gt_trace_open(path, &t) != 0) {
        printf("error: %s\n", gt_trace_errmsg(t));
        goto out;
    }
    t0 = now_s();
    gt_diagnose_options dopts = {0};
    if (gt_diagnose(t, &dopts, &fs) != 0) {
        printf("error: diagnose: %s\n", gt_trace_errmsg(t));
        goto out;
    }
    double diag_s = now_s() - t0;
    printf("diagnose: %.4f s\n", diag_s);
    printf("findings: %zu findings\n", fs->n);

    /* Focus: what `gradtrace graph trace.db -o x.svg` does after diagnose. */
    snprintf(out, sizeof out, "%s.focus.svg", path);
    t0 = now_s();
    measure(t, fs, "focus", 0, 0, GT_GRAPH_SVG, out, &focus_build_s);
    double focus_s = now_s() - t0;
    printf("focus_svg_total: %.4f s (diagnose + build + layout + render: %.4f s)\n",
           focus_s, focus_s + diag_s);
    printf("focus_svg_total_over_focus_build: %.2f x\n",
           focus_build_s > 0 ? focus_s / focus_build_s : 0.0);
    snprintf(out, sizeof out, "%s.focus.png", path);
    measure(t, fs, "focus_png", 0, 0, GT_GRAPH_PNG, out, &build_s);
    unlink(out);
    snprintf(out, sizeof out, "%s.focus.svg", path);
    unlink(out);

    /* --all: the anchor (build only), DOT, and SVG (refused above the limit). */
    snprintf(out, sizeof out, "%s.all.dot", path);
    measure(t, fs, "all", 1, 0, GT_GRAPH_DOT, out, &build_s);
    unlink(out);
    snprintf(out, sizeof out, "%s.all.svg", path);
    measure(t, fs, "all_svg", 1, limit, GT_GRAPH_SVG, out, &build_s);
    unlink(out);
    printf("all_build_over_focus_build: %.1f x\n",
           focus_build_s > 0 ? build_s / focus_build_s : 0.0);

    /* The worst layout --all still accepts: a trace just under the limit
     * (8 Graphviz nodes a layer: 5 autograd nodes, 3 saved tensors). */
    size_t lim = GT_GRAPH_DEFAULT_LAYOUT_LIMIT;
    int small = (int)((lim - 8) / 8);
    gt_findings_free(fs);
    fs = NULL;
    gt_trace_close(t);
    t = NULL;
    unlink(path);
    if (small < 2 || make_trace(path, small) != 0)
        goto out;
    if (gt_trace_open(path, &t) != 0 || gt_diagnose(t, &dopts, &fs) != 0) {
        printf("error: %s\n", gt_trace_errmsg(t));
        goto out;
    }
    snprintf(out, sizeof out, "%s.limit.svg", path);
    measure(t, fs, "at_limit_all", 1, 0, GT_GRAPH_SVG, out, &build_s);
    unlink(out);
out:
    gt_findings_free(fs);
    gt_trace_close(t);
    unlink(path);
    return 0;
}
