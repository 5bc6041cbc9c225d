/*
 * Tests for graph.c: hand-made traces written with the recorder API, drawn,
 * and the DOT read back with cgraph (agmemread) to check nodes, edges and
 * labels; SVG and PNG checked for shape; label escaping round-tripped.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <graphviz/cgraph.h>

#include <gradtrace/recorder.h>

#include <gradtrace/graph.h>
#include "graph_int.h"
#include <gradtrace/graph_render.h>
#include <gradtrace/trace.h>

/* ---- building traces ---------------------------------------------------- */

static char tmpdir[256];

typedef struct tb {
    gt_recorder *r;
    char path[512];
    gt_id thread;
} tb;

static void tb_open(tb *t, const char *name)
{
    char err[256] = "";
    memset(t, 0, sizeof *t);
    snprintf(t->path, sizeof t->path, "%s/%s", tmpdir, name);
    unlink(t->path);
    assert_int_equal(gt_recorder_open(t->path, NULL, err, sizeof err, &t->r), 0);
    assert_int_equal(gt_intern_thread(t->r, 1, "main", &t->thread), 0);
}

static void tb_close(tb *t)
{
    assert_int_equal(gt_run_end(t->r, GT_RUN_EXCEPTION, 1, 0), 0);
    assert_int_equal(gt_recorder_close(t->r), 0);
    t->r = NULL;
}

static gt_id tb_str(tb *t, const char *s)
{
    gt_id id;
    assert_int_equal(gt_intern_string(t->r, s, strlen(s), &id), 0);
    return id;
}

/* A one-frame stack whose frame is the user's. */
static gt_id tb_stack(tb *t, const char *file, int line, const char *code)
{
    gt_id frame, stack;
    assert_int_equal(gt_intern_frame(t->r, file, line, "<module>", code, &frame), 0);
    assert_int_equal(gt_intern_stack(t->r, 0, frame, frame, &stack), 0);
    return stack;
}

static int64_t tb_op(tb *t, const char *name, gt_id stack)
{
    gt_op_info op = {.name = tb_str(t, name),
                     .phase = GT_PHASE_FORWARD,
                     .grad_mode = 1,
                     .thread = t->thread,
                     .stack = stack};
    int64_t seq;
    assert_int_equal(gt_op(t->r, &op, &seq), 0);
    return seq;
}

static void tb_tensor(tb *t, gt_id id, int ndim, const int64_t *shape, int is_leaf)
{
    int64_t strides[4] = {1, 1, 1, 1};
    gt_tensor_info ti = {.id = id,
                         .dtype = tb_str(t, "float32"),
                         .ndim = ndim,
                         .shape = shape,
                         .strides = strides,
                         .is_leaf = is_leaf,
                         .requires_grad = 1};
    assert_int_equal(gt_tensor(t->r, &ti), 0);
}

static void tb_node(tb *t, gt_id id, const char *name, int64_t op, gt_id variable)
{
    gt_node_info n = {.id = id,
                      .name = tb_str(t, name),
                      .op = op,
                      .sequence_nr = -1,
                      .thread = t->thread,
                      .variable = variable};
    assert_int_equal(gt_node(t->r, &n), 0);
}

static void tb_edge(tb *t, gt_id node, int pos, gt_id next)
{
    assert_int_equal(gt_edge(t->r, node, pos, next, 0), 0);
}

static int64_t tb_saved(tb *t, gt_id node, const char *slot, gt_id tensor,
                        int64_t version)
{
    int64_t seq;
    assert_int_equal(
        gt_saved_tensor(t->r, node, tb_str(t, slot), tensor, version, 0, 12, &seq), 0);
    return seq;
}

static gt_id tb_backward(tb *t, gt_id root_tensor, gt_id root_node, int ok)
{
    gt_backward_info bi = {
        .api = tb_str(t, "Tensor.backward"),
        .thread = t->thread,
        .stack = tb_stack(t, "/home/u/seed_class_weights.py", 48, "loss.backward()")};
    gt_id id;
    assert_int_equal(gt_backward_begin(t->r, &bi, &id), 0);
    assert_int_equal(gt_backward_root(t->r, id, 0, root_tensor, root_node), 0);
    assert_int_equal(gt_backward_end(t->r, id, ok), 0);
    return id;
}

/* ---- the seed-like trace ------------------------------------------------ */

/* What the seed scenario records, by hand: a linear layer, log_softmax and
 * nll_loss with class weights saved at version 0, then three in-place
 * multiplications of the weights at line 45 (versions 1, 2, 3). */
typedef struct seed {
    tb t;
    int64_t saved_weight, saved_self;
    int64_t mul[3], bump[3];
    gt_mutation muts[3];
    gt_finding finding;
    gt_findings findings;
} seed;

static void make_seed(seed *s, const char *name)
{
    static const char file[] = "/home/u/seed_class_weights.py";
    tb *t = &s->t;
    int64_t w_shape[2] = {3, 4}, cw_shape[1] = {3}, lp_shape[2] = {16, 3};
    tb_open(t, name);
    gt_run_info run = {.cwd = "/home", .rank = -1};
    assert_int_equal(gt_run_set(t->r, &run), 0);

    tb_tensor(t, 1, 2, w_shape, 1); /* model.0.weight */
    assert_int_equal(gt_name(t->r, 1, 1, "model.0.weight"), 0);
    tb_tensor(t, 2, 1, cw_shape, 1); /* class_weights */
    assert_int_equal(gt_name(t->r, 2, 2, "class_weights"), 0);

    gt_id lin = tb_stack(t, file, 37, "log_probs = F.log_softmax(model(x), dim=1)");
    gt_id nll = tb_stack(t, file, 38,
                         "loss = F.nll_loss(log_probs, target, weight=class_weights)");
    gt_id upd = tb_stack(t, file, 45, "class_weights[i] *= 1.0 + share");

    int64_t op_mm = tb_op(t, "aten::mm", lin);
    int64_t op_ls = tb_op(t, "aten::_log_softmax", lin);
    tb_tensor(t, 5, 2, lp_shape, 0);
    assert_int_equal(gt_name(t->r, op_ls, 5, "log_probs"), 0);
    int64_t op_nll = tb_op(t, "aten::nll_loss_forward", nll);
    tb_tensor(t, 7, 0, NULL, 0);

    tb_node(t, 10, "AccumulateGrad", 0, 1);
    tb_node(t, 11, "MmBackward0", op_mm, 0);
    tb_edge(t, 11, 0, 10);
    tb_node(t, 12, "LogSoftmaxBackward0", op_ls, 0);
    tb_edge(t, 12, 0, 11);
    tb_node(t, 13, "NllLossBackward0", op_nll, 0);
    tb_edge(t, 13, 0, 12);
    s->saved_self = tb_saved(t, 13, "self", 5, 0);
    s->saved_weight = tb_saved(t, 13, "weight", 2, 0);

    for (int i = 0; i < 3; i++) {
        s->mul[i] = tb_op(t, "aten::mul_.Tensor", upd);
        assert_int_equal(gt_version_bump(t->r, s->mul[i], 2, i + 1, 0, &s->bump[i]), 0);
        s->muts[i] = (gt_mutation){.seq = s->mul[i],
                                   .bump_seq = s->bump[i],
                                   .tensor = 2,
                                   .version_after = i + 1};
    }
    gt_id bw = tb_backward(t, 7, 13, 0);
    assert_int_equal(bw, 1);
    tb_close(t);

    s->finding = (gt_finding){.kind = GT_FINDING_INPLACE_INVALIDATED_SAVED,
                              .first_to_fail = 1,
                              .backward = 1,
                              .node = 13,
                              .saved_seq = s->saved_weight,
                              .tensor = 2,
                              .saved_version = 0,
                              .version_at_backward = 3,
                              .n_mutations = 3,
                              .mutations = s->muts};
    s->findings = (gt_findings){.n = 1, .v = &s->finding};
}

/* ---- reading drawings back ---------------------------------------------- */

static gt_graph *build(const char *path, const gt_graph_options *opts)
{
    gt_trace *tr = NULL;
    gt_graph *g = NULL;
    assert_int_equal(gt_trace_open(path, &tr), 0);
    int rc = gt_graph_build(tr, opts, &g);
    if (rc)
        print_error("gt_graph_build: %s\n", gt_trace_errmsg(tr));
    assert_int_equal(rc, 0);
    gt_trace_close(tr);
    return g;
}

/* Render g as DOT and parse it back with cgraph. */
static Agraph_t *reparse(gt_graph *g)
{
    char *data = NULL;
    size_t len = 0;
    assert_int_equal(gt_graph_render_data(g, GT_GRAPH_DOT, &data, &len), 0);
    assert_true(len > 0);
    Agraph_t *back = agmemread(data);
    free(data);
    assert_non_null(back);
    return back;
}

static Agnode_t *node(Agraph_t *g, const char *name)
{
    return agnode(g, (char *)name, 0);
}

static const char *attr(void *obj, const char *name)
{
    const char *v = agget(obj, (char *)name);
    return v ? v : "";
}

/* A label as the viewer sees it: DOT's \\ and \n and Graphviz's &amp;
 * decoded. Returns a static buffer. */
static const char *shown(const char *label)
{
    static char out[8192];
    size_t o = 0;
    for (const char *p = label; *p && o + 2 < sizeof out; p++) {
        if (p[0] == '\\' && p[1] == '\\')
            out[o++] = '\\', p++;
        else if (p[0] == '\\' && p[1] == 'n')
            out[o++] = '\n', p++;
        else if (!strncmp(p, "&amp;", 5))
            out[o++] = '&', p += 4;
        else
            out[o++] = *p;
    }
    out[o] = '\0';
    return out;
}

static const char *label_of(Agraph_t *g, const char *name)
{
    Agnode_t *n = node(g, name);
    if (!n)
        print_error("no node %s in the graph\n", name);
    assert_non_null(n);
    return shown(attr(n, "label"));
}

static void assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle))
        print_error("expected \"%s\" in \"%s\"\n", needle, hay);
    assert_non_null(strstr(hay, needle));
}

/* The label of the cluster (a line's group) holding node `name`, or "". */
static const char *group_label_of(Agraph_t *g, const char *name)
{
    Agnode_t *n = node(g, name);
    assert_non_null(n);
    for (Agraph_t *sub = agfstsubg(g); sub; sub = agnxtsubg(sub))
        if (!strncmp(agnameof(sub), "cluster_line", 12) && agsubnode(sub, n, 0))
            return shown(attr(sub, "label"));
    return "";
}

static int has_edge(Agraph_t *g, const char *tail, const char *head)
{
    Agnode_t *t = node(g, tail), *h = node(g, head);
    return t && h && agedge(g, t, h, NULL, 0) != NULL;
}

/* Nodes whose name starts with prefix. */
static int count_nodes(Agraph_t *g, const char *prefix)
{
    int n = 0;
    for (Agnode_t *v = agfstnode(g); v; v = agnxtnode(g, v))
        n += !strncmp(agnameof(v), prefix, strlen(prefix));
    return n;
}

/* Nodes whose class attribute holds the word cls. */
static int count_class(Agraph_t *g, const char *cls)
{
    int n = 0;
    for (Agnode_t *v = agfstnode(g); v; v = agnxtnode(g, v)) {
        char buf[256];
        snprintf(buf, sizeof buf, " %s ", attr(v, "class"));
        char want[64];
        snprintf(want, sizeof want, " %s ", cls);
        n += strstr(buf, want) != NULL;
    }
    return n;
}

static int count_edges(Agraph_t *g)
{
    int n = 0;
    for (Agnode_t *v = agfstnode(g); v; v = agnxtnode(g, v))
        for (Agedge_t *e = agfstout(g, v); e; e = agnxtout(g, e))
            n++;
    return n;
}

static void set_name(char *buf, size_t n, const char *prefix, int64_t id)
{
    snprintf(buf, n, "%s%lld", prefix, (long long)id);
}

/* ---- tests -------------------------------------------------------------- */

static void test_seed_structure(void **state)
{
    (void)state;
    seed s;
    make_seed(&s, "seed.db");
    gt_graph_options o = {.hops = -1, .findings = &s.findings};
    gt_graph *g = build(s.t.path, &o);
    assert_int_equal(gt_graph_backward(g), 1);
    assert_int_equal(gt_graph_nodes_total(g), 4);
    /* Two hops from NllLossBackward0: itself, LogSoftmax, Mm; not the leaf. */
    assert_int_equal(gt_graph_nodes_drawn(g), 3);
    assert_int_equal(gt_graph_findings_shown(g), 1);
    Agraph_t *d = reparse(g);
    assert_int_equal(count_nodes(d, "n"), 3);
    assert_null(node(d, "n10"));
    assert_true(has_edge(d, "more_in_n11", "n11"));
    assert_int_equal(count_class(d, "gt-mutation"), 3);
    agclose(d);
    gt_graph_free(g);
}

static void test_seed_dot(void **state)
{
    (void)state;
    seed s;
    char sw[32], ss[32], m[3][32];
    make_seed(&s, "seed_dot.db");
    gt_graph_options o = {.hops = 5, .findings = &s.findings};
    gt_graph *g = build(s.t.path, &o);
    assert_int_equal(gt_graph_findings_shown(g), 1);
    Agraph_t *d = reparse(g);

    /* Autograd nodes with their user lines, edges from next to node. */
    assert_int_equal(count_nodes(d, "n"), 4);
    assert_contains(label_of(d, "n13"),
                    "NllLossBackward0\nseed_class_weights.py:38\n"
                    "loss = F.nll_loss(log_probs, target, weight=class_weights)");
    /* n11 and n12 come from line 37: a group labelled once with the line,
     * holding nodes labelled with their names. */
    assert_string_equal(label_of(d, "n12"), "LogSoftmaxBackward0");
    assert_string_equal(group_label_of(d, "n12"),
                        "seed_class_weights.py:37\n"
                        "log_probs = F.log_softmax(model(x), dim=1)");
    assert_string_equal(group_label_of(d, "n11"), group_label_of(d, "n12"));
    assert_string_equal(group_label_of(d, "n13"), "");
    /* Tooltips: the path relative to the run's directory (/home). */
    assert_string_equal(attr(node(d, "n12"), "tooltip"), "u/seed_class_weights.py:37");
    assert_contains(label_of(d, "n10"), "AccumulateGrad\nfloat32 [3,4]\nmodel.0.weight");
    assert_string_equal(attr(node(d, "n10"), "fillcolor"), "lightblue");
    assert_string_equal(attr(node(d, "n10"), "class"), "gt-node gt-leaf");
    assert_true(has_edge(d, "n10", "n11"));
    assert_true(has_edge(d, "n11", "n12"));
    assert_true(has_edge(d, "n12", "n13"));
    assert_false(has_edge(d, "n13", "n12"));
    assert_contains(label_of(d, "n13"), "(backward root)");

    /* The failing node is outlined. */
    assert_string_equal(attr(node(d, "n13"), "color"), "red");
    assert_string_equal(attr(node(d, "n13"), "penwidth"), "3");
    assert_contains(attr(node(d, "n13"), "class"), "gt-fail");
    assert_string_equal(attr(node(d, "n12"), "color"), "black");

    /* The saved tensor the finding is about, invalidated; the node's other
     * one is listed in its label, not drawn (--all-saved draws it). */
    set_name(sw, sizeof sw, "s", s.saved_weight);
    set_name(ss, sizeof ss, "s", s.saved_self);
    assert_int_equal(count_nodes(d, "s"), 1);
    assert_int_equal(count_class(d, "gt-saved"), 1);
    assert_int_equal(count_class(d, "gt-invalidated"), 1);
    assert_int_equal(count_class(d, "gt-leaf"), 1);
    assert_int_equal(count_class(d, "gt-root"), 1);
    assert_int_equal(count_class(d, "gt-fail"), 1);
    assert_string_equal(label_of(d, sw),
                        "weight (saved)\nfloat32 [3]\nclass_weights\nsaved at version 0\n"
                        "version 3 when backward ran");
    assert_null(node(d, ss));
    assert_string_equal(attr(node(d, sw), "shape"), "note");
    assert_string_equal(attr(node(d, sw), "color"), "red");
    assert_true(has_edge(d, sw, "n13"));

    /* Each mutation in red with its line and the version it produced. */
    assert_int_equal(count_class(d, "gt-mutation"), 3);
    for (int i = 0; i < 3; i++) {
        char want[128];
        set_name(m[i], sizeof m[i], "m", s.mul[i]);
        snprintf(want, sizeof want,
                 "aten::mul_.Tensor\nseed_class_weights.py:45\n"
                 "class_weights[i] *= 1.0 + share\n\xe2\x86\x92 version %d",
                 i + 1);
        assert_string_equal(label_of(d, m[i]), want);
        assert_string_equal(attr(node(d, m[i]), "color"), "red");
        assert_true(has_edge(d, m[i], sw));
        assert_false(has_edge(d, m[i], ss));
        assert_string_equal(attr(agedge(d, node(d, m[i]), node(d, sw), NULL, 0), "color"),
                            "red");
    }
    /* The mutations stacked in order by invisible edges. */
    for (int i = 0; i + 1 < 3; i++) {
        Agedge_t *order = agedge(d, node(d, m[i]), node(d, m[i + 1]), NULL, 0);
        assert_non_null(order);
        assert_string_equal(attr(order, "style"), "invis");
    }
    /* 3 next edges + 1 saved + 3 mutations + 2 order + 5 invisible legend. */
    assert_int_equal(count_edges(d), 14);
    assert_int_equal(count_nodes(d, "legend_"), 6);
    assert_non_null(agsubg(d, (char *)"cluster_legend", 0));
    assert_contains(shown(agget(d, (char *)"label")),
                    "backward call 1 of seed_dot.db: Tensor.backward at "
                    "seed_class_weights.py:48 (raised)\nall 4 autograd nodes, 1 finding");
    agclose(d);
    gt_graph_free(g);
}

static void test_seed_without_findings(void **state)
{
    (void)state;
    seed s;
    make_seed(&s, "seed_nofind.db");
    gt_graph_options o = {.hops = -1, .no_legend = 1};
    gt_graph *g = build(s.t.path, &o);
    Agraph_t *d = reparse(g);
    assert_int_equal(gt_graph_findings_shown(g), 0);
    assert_int_equal(count_nodes(d, "n"), 4);
    assert_int_equal(count_class(d, "gt-mutation"), 0);
    assert_int_equal(count_nodes(d, "legend_"), 0);
    assert_null(agsubg(d, (char *)"cluster_legend", 0));
    assert_string_equal(attr(node(d, "n13"), "color"), "black");
    assert_contains(shown(agget(d, (char *)"label")),
                    "all 4 autograd nodes, no findings");
    agclose(d);
    gt_graph_free(g);
}

/* A chain of 50 nodes n1 <- n2 <- ... <- n50 (n50 the root), the finding on
 * node 25: focus keeps 2 hops each way. Each node made by its own line
 * (no repeats to draw once), or with one_line all by the same line (a loop:
 * one repeated node). */
static void make_chain_lines(tb *t, const char *name, int nback, int one_line)
{
    tb_open(t, name);
    for (int i = 1; i <= 50; i++) {
        gt_id st = tb_stack(t, "/home/u/chain.py", one_line ? 7 : 6 + i, "y = f(y)");
        int64_t op = tb_op(t, "aten::sin", st);
        tb_node(t, i, "SinBackward0", op, 0);
        if (i > 1)
            tb_edge(t, i, 0, i - 1);
    }
    tb_tensor(t, 99, 0, NULL, 0);
    for (int b = 0; b < nback; b++)
        tb_backward(t, 99, 50, 1);
    tb_close(t);
}

static void make_chain(tb *t, const char *name, int nback)
{
    make_chain_lines(t, name, nback, 0);
}

static void test_focus_hops(void **state)
{
    (void)state;
    tb t;
    make_chain(&t, "chain.db", 1);
    gt_finding f = {
        .kind = GT_FINDING_BACKWARD_TWICE, .backward = 1, .node = 25, .first_to_fail = 1};
    gt_findings fs = {.n = 1, .v = &f};

    gt_graph_options o = {.hops = -1, .findings = &fs};
    gt_graph *g = build(t.path, &o);
    Agraph_t *d = reparse(g);
    assert_int_equal(gt_graph_nodes_total(g), 50);
    assert_int_equal(gt_graph_nodes_drawn(g), 5);
    assert_int_equal(count_nodes(d, "n"), 5);
    for (int i = 23; i <= 27; i++) {
        char nm[16];
        set_name(nm, sizeof nm, "n", i);
        assert_non_null(node(d, nm));
    }
    assert_null(node(d, "n22"));
    assert_null(node(d, "n28"));
    /* Where the chain goes on: node 23's input 22 and node 27's user 28. */
    assert_string_equal(label_of(d, "more_in_n23"), "\xe2\x8b\xaf 1 more input");
    assert_string_equal(label_of(d, "more_out_n27"), "\xe2\x8b\xaf 1 more user");
    assert_true(has_edge(d, "more_in_n23", "n23"));
    assert_true(has_edge(d, "n27", "more_out_n27"));
    assert_int_equal(count_nodes(d, "more_"), 2);
    assert_contains(shown(agget(d, (char *)"label")),
                    "5 of 50 autograd nodes: 2 hops around 1 finding node, 1 finding");
    agclose(d);
    gt_graph_free(g);

    o.hops = 0;
    g = build(t.path, &o);
    assert_int_equal(gt_graph_nodes_drawn(g), 1);
    gt_graph_free(g);

    o.hops = 10;
    g = build(t.path, &o);
    assert_int_equal(gt_graph_nodes_drawn(g), 21);
    gt_graph_free(g);

    o.all = 1;
    g = build(t.path, &o);
    d = reparse(g);
    assert_int_equal(gt_graph_nodes_drawn(g), 50);
    assert_int_equal(count_nodes(d, "n"), 50);
    assert_int_equal(count_nodes(d, "more_"), 0);
    assert_true(has_edge(d, "n1", "n2"));
    assert_true(has_edge(d, "n49", "n50"));
    agclose(d);
    gt_graph_free(g);
}

/* A loss over a Cat of 60 time steps, each step a chain of 5 nodes, every
 * node made by its own line (no repeats): ring 2 (60 nodes) is wider than
 * the screen budget, so the default drawing takes the Cat's first 3 inputs
 * and follows each down its chain, instead of stopping at the Cat. */
static void test_wide_ring_in_part(void **state)
{
    (void)state;
    tb t;
    tb_open(&t, "wide_ring.db");
    int line = 1;
    gt_id st = tb_stack(&t, "/home/u/w.py", line++, "loss = mse(out, y)");
    tb_node(&t, 1, "MseLossBackward0", tb_op(&t, "aten::mse_loss", st), 0);
    st = tb_stack(&t, "/home/u/w.py", line++, "out = torch.cat(outs)");
    tb_node(&t, 2, "CatBackward0", tb_op(&t, "aten::cat", st), 0);
    tb_edge(&t, 1, 0, 2);
    for (int k = 0; k < 60; k++) {
        gt_id prev = 2;
        for (int m = 0; m < 6; m++) {
            gt_id id = 100 + k * 10 + m;
            st = tb_stack(&t, "/home/u/w.py", line++, "s");
            tb_node(&t, id, m ? "MulBackward0" : "AddmmBackward0",
                    tb_op(&t, "aten::x", st), 0);
            tb_edge(&t, prev, m ? 0 : k, id);
            prev = id;
        }
    }
    tb_tensor(&t, 99, 0, NULL, 0);
    tb_backward(&t, 99, 1, 1);
    tb_close(&t);

    gt_graph *g = build(t.path, NULL);
    Agraph_t *d = reparse(g);
    assert_int_equal(gt_graph_nodes_total(g), 2 + 60 * 6);
    /* root, Cat, then 3 steps of 6 nodes each */
    assert_int_equal(gt_graph_nodes_drawn(g), 2 + 3 * 6);
    for (int k = 0; k < 3; k++)
        for (int m = 0; m < 6; m++) {
            char nm[16];
            set_name(nm, sizeof nm, "n", 100 + k * 10 + m);
            assert_non_null(node(d, nm));
        }
    assert_null(node(d, "n130"));
    assert_string_equal(label_of(d, "more_in_n2"), "\xe2\x8b\xaf 57 more inputs");
    assert_contains(shown(agget(d, (char *)"label")),
                    "20 of 362 autograd nodes: 1 hop around 1 root, then 3 of each "
                    "node's neighbours 6 hops further");
    agclose(d);
    gt_graph_free(g);

    /* --hops is obeyed as given */
    gt_graph_options o = {.hops = 1};
    g = build(t.path, &o);
    assert_int_equal(gt_graph_nodes_drawn(g), 2);
    gt_graph_free(g);
}

/* The block drawn once for repeats `name` (cluster_repeatN): its label. */
static const char *repeat_label(Agraph_t *g, const char *name)
{
    Agraph_t *sub = agsubg(g, (char *)name, 0);
    assert_non_null(sub);
    return shown(attr(sub, "label"));
}

/* The chain's 50 SinBackward0 nodes made by one line in a loop: the default
 * drawing shows the repeated node once, "×N", its repeats feeding it as a
 * loop; the root and a finding's node are never folded into it, the
 * repeats on either side of the finding folded apart; --all and --hops draw
 * every node. */
static void test_repeats_drawn_once(void **state)
{
    (void)state;
    tb t;
    make_chain_lines(&t, "chain_repeat.db", 1, 1);

    gt_graph *g = build(t.path, NULL);
    Agraph_t *d = reparse(g);
    /* n2..n49 repeat (n1 has no input: it differs); n49, next to the root,
     * stands for them; n1, an input only hidden repeats use, is hidden too */
    assert_int_equal(gt_graph_nodes_total(g), 50);
    assert_int_equal(gt_graph_nodes_drawn(g), 2);
    assert_non_null(node(d, "n49"));
    assert_non_null(node(d, "n50"));
    assert_null(node(d, "n1"));
    assert_null(node(d, "n48"));
    assert_contains(repeat_label(d, "cluster_repeat1"), "\xc3\x97"
                                                        "48\n");
    assert_contains(repeat_label(d, "cluster_repeat1"), "48 hidden");
    /* one line made the block: the cluster says it, the node its name */
    assert_contains(repeat_label(d, "cluster_repeat1"), "chain.py:7\ny = f(y)");
    assert_string_equal(label_of(d, "n49"), "SinBackward0");
    Agraph_t *block = agsubg(d, (char *)"cluster_repeat1", 0);
    assert_non_null(block);
    assert_non_null(agsubnode(block, node(d, "n49"), 0));
    Agedge_t *loop = agedge(d, node(d, "n49"), node(d, "n49"), NULL, 0);
    assert_non_null(loop);
    assert_string_equal(attr(loop, "class"), "gt-recur");
    assert_string_equal(attr(loop, "constraint"), "false");
    assert_true(has_edge(d, "n49", "n50"));
    assert_int_equal(count_nodes(d, "more_"), 0);
    const char *title = shown(agget(d, (char *)"label"));
    assert_contains(title, "2 of 50 autograd nodes, no findings");
    assert_contains(title, "48 nodes hidden (--all draws them): 48 in repeats of a block "
                           "drawn once (\xc3\x97"
                           "48)");
    agclose(d);
    gt_graph_free(g);

    /* A finding on node 25: it stays itself, between n24 (for n2..n24,
     * ×23) and n26 (for n26..n49, ×24), the root beyond. */
    gt_finding f = {
        .kind = GT_FINDING_BACKWARD_TWICE, .backward = 1, .node = 25, .first_to_fail = 1};
    gt_findings fs = {.n = 1, .v = &f};
    gt_graph_options o = {.hops = -1, .findings = &fs};
    g = build(t.path, &o);
    d = reparse(g);
    assert_int_equal(gt_graph_nodes_drawn(g), 4);
    assert_int_equal(gt_graph_findings_shown(g), 1);
    assert_contains(attr(node(d, "n25"), "class"), "gt-fail");
    assert_null(agsubnode(agsubg(d, (char *)"cluster_repeat1", 0), node(d, "n25"), 0));
    assert_null(agsubnode(agsubg(d, (char *)"cluster_repeat2", 0), node(d, "n25"), 0));
    assert_contains(repeat_label(d, "cluster_repeat1"), "\xc3\x97"
                                                        "23\n");
    assert_contains(repeat_label(d, "cluster_repeat2"), "\xc3\x97"
                                                        "24\n");
    assert_true(has_edge(d, "n24", "n25"));
    assert_true(has_edge(d, "n25", "n26"));
    assert_true(has_edge(d, "n26", "n50"));
    agclose(d);
    gt_graph_free(g);

    /* --hops and --all ask for the nodes themselves */
    o.hops = 3;
    g = build(t.path, &o);
    assert_int_equal(gt_graph_nodes_drawn(g), 7);
    gt_graph_free(g);
    o.all = 1;
    g = build(t.path, &o);
    d = reparse(g);
    assert_int_equal(gt_graph_nodes_drawn(g), 50);
    assert_int_equal(count_nodes(d, "n"), 50);
    assert_null(agsubg(d, (char *)"cluster_repeat1", 0));
    agclose(d);
    gt_graph_free(g);
}

/* A chain of 50 layers made by one line (an nn.Sequential's forward), each
 * saving a tensor [4, width]: layers 1-25 of `w1`, 26-50 of `w2`. */
static void make_width_chain(tb *t, const char *name, int64_t w1, int64_t w2)
{
    tb_open(t, name);
    for (int i = 1; i <= 50; i++) {
        gt_id st = tb_stack(t, "/home/u/net.py", 9, "x = layer(x)");
        int64_t shape[2] = {4, i <= 25 ? w1 : w2};
        tb_tensor(t, 100 + i, 2, shape, 0);
        tb_node(t, i, "ConvolutionBackward0", tb_op(t, "aten::convolution", st), 0);
        tb_saved(t, i, "input", 100 + i, 0);
        if (i > 1)
            tb_edge(t, i, 0, i - 1);
    }
    tb_tensor(t, 99, 0, NULL, 0);
    tb_backward(t, 99, 50, 1);
    tb_close(t);
}

/* Only truly identical blocks are drawn once: layers of the same op and
 * line but of other widths (DCGAN's convolutions) are not repeats of each
 * other; layers of one width are. */
static void test_repeats_need_same_shapes(void **state)
{
    (void)state;
    tb t;
    make_width_chain(&t, "widths.db", 64, 128);
    gt_graph *g = build(t.path, NULL);
    Agraph_t *d = reparse(g);
    /* n2..n25 (n1 has no input) and n26..n49 (n50 the root) apart */
    assert_contains(repeat_label(d, "cluster_repeat1"), "\xc3\x97"
                                                        "24\n");
    assert_contains(repeat_label(d, "cluster_repeat2"), "\xc3\x97"
                                                        "24\n");
    assert_null(agsubg(d, (char *)"cluster_repeat3", 0));
    Agnode_t *a = NULL, *b = NULL;
    for (Agnode_t *n = agfstnode(agsubg(d, (char *)"cluster_repeat1", 0)); n;
         n = agnxtnode(agsubg(d, (char *)"cluster_repeat1", 0), n))
        a = n;
    for (Agnode_t *n = agfstnode(agsubg(d, (char *)"cluster_repeat2", 0)); n;
         n = agnxtnode(agsubg(d, (char *)"cluster_repeat2", 0), n))
        b = n;
    assert_non_null(a);
    assert_non_null(b);
    int na = atoi(agnameof(a) + 1), nb = atoi(agnameof(b) + 1);
    printf("# drawn once: n%d (width 64), n%d (width 128)\n", na, nb);
    assert_true(na >= 2 && na <= 25);
    assert_true(nb >= 26 && nb <= 49);
    agclose(d);
    gt_graph_free(g);

    make_width_chain(&t, "widths_same.db", 64, 64);
    g = build(t.path, NULL);
    d = reparse(g);
    assert_contains(repeat_label(d, "cluster_repeat1"), "\xc3\x97"
                                                        "48\n");
    assert_null(agsubg(d, (char *)"cluster_repeat2", 0));
    agclose(d);
    gt_graph_free(g);
}

/* A long narrow chain wraps into columns of 12 ranks: nodes share a column's
 * group, and only the edges between columns stop constraining the ranks. */
static void test_wrap_long_chain(void **state)
{
    (void)state;
    tb t;
    make_chain(&t, "chain_wrap.db", 1);
    gt_graph_options o = {.hops = -1, .all = 1};
    gt_graph *g = build(t.path, &o);
    Agraph_t *d = reparse(g);
    /* n1, the chain's input, is a leaf: it hangs beside n2, in no column */
    assert_string_equal(attr(node(d, "n1"), "group"), "");
    assert_string_equal(attr(node(d, "n2"), "group"), "column0");
    assert_string_equal(attr(node(d, "n12"), "group"), "column0");
    assert_string_equal(attr(node(d, "n13"), "group"), "column1");
    assert_string_equal(attr(node(d, "n50"), "group"), "column4");
    Agedge_t *cut = agedge(d, node(d, "n12"), node(d, "n13"), NULL, 0);
    Agedge_t *kept = agedge(d, node(d, "n11"), node(d, "n12"), NULL, 0);
    assert_non_null(cut);
    assert_non_null(kept);
    assert_string_equal(attr(cut, "constraint"), "false");
    assert_string_equal(attr(cut, "style"), "dashed");
    assert_string_not_equal(attr(kept, "constraint"), "false");
    agclose(d);
    gt_graph_free(g);

    /* --hops 5 around the root: 6 ranks, one straight column, no cut */
    o.all = 0;
    o.hops = 5;
    g = build(t.path, &o);
    d = reparse(g);
    assert_int_equal(gt_graph_nodes_drawn(g), 6);
    assert_string_equal(attr(node(d, "n46"), "group"), "column0");
    assert_string_not_equal(
        attr(agedge(d, node(d, "n49"), node(d, "n50"), NULL, 0), "constraint"), "false");
    agclose(d);
    gt_graph_free(g);
}

static void test_choose_backward(void **state)
{
    (void)state;
    tb t;
    make_chain(&t, "chain3.db", 3);

    /* No findings: the last call. */
    gt_graph *g = build(t.path, NULL);
    assert_int_equal(gt_graph_backward(g), 3);
    /* 50 nodes, more than a screen's worth: the 40 nearest the root */
    assert_int_equal(gt_graph_nodes_drawn(g), GT_GRAPH_SCREEN_NODES);
    gt_graph_free(g);

    /* Findings: the first to fail, else the first with a call. */
    gt_finding f[2] = {
        {.kind = GT_FINDING_BACKWARD_TWICE, .backward = 1, .node = 10},
        {.kind = GT_FINDING_BACKWARD_TWICE,
         .backward = 2,
         .node = 40,
         .first_to_fail = 1},
    };
    gt_findings fs = {.n = 2, .v = f};
    gt_graph_options o = {.hops = -1, .findings = &fs};
    g = build(t.path, &o);
    assert_int_equal(gt_graph_backward(g), 2);
    assert_int_equal(gt_graph_findings_shown(g), 1);
    assert_int_equal(gt_graph_nodes_drawn(g), 5);
    gt_graph_free(g);
    f[1].first_to_fail = 0;
    g = build(t.path, &o);
    assert_int_equal(gt_graph_backward(g), 1);
    gt_graph_free(g);

    /* An explicit call; one that does not exist. */
    o.backward = 3;
    g = build(t.path, &o);
    assert_int_equal(gt_graph_backward(g), 3);
    assert_int_equal(gt_graph_findings_shown(g), 0);
    gt_graph_free(g);
    o.backward = 7;
    gt_trace *tr = NULL;
    assert_int_equal(gt_trace_open(t.path, &tr), 0);
    g = NULL;
    assert_int_equal(gt_graph_build(tr, &o, &g), GT_EINVAL);
    assert_null(g);
    assert_contains(gt_trace_errmsg(tr), "has no backward call 7 (it has 3)");
    gt_trace_close(tr);

    /* A run killed as its last call began: that call has no roots yet, the
     * one before it is drawn (asked for, the last one still fails). */
    tb_open(&t, "killed.db");
    for (int i = 1; i <= 3; i++)
        tb_node(&t, i, "SinBackward0", 0, 0);
    tb_edge(&t, 2, 0, 1);
    tb_edge(&t, 3, 0, 2);
    tb_tensor(&t, 99, 0, NULL, 0);
    tb_backward(&t, 99, 3, 1);
    gt_backward_info bi = {.api = tb_str(&t, "Tensor.backward"), .thread = t.thread};
    gt_id id;
    assert_int_equal(gt_backward_begin(t.r, &bi, &id), 0);
    assert_int_equal(id, 2);
    tb_close(&t);
    g = build(t.path, NULL);
    assert_int_equal(gt_graph_backward(g), 1);
    assert_int_equal(gt_graph_nodes_drawn(g), 3);
    gt_graph_free(g);
    o = (gt_graph_options){.hops = -1, .backward = 2};
    assert_int_equal(gt_trace_open(t.path, &tr), 0);
    assert_int_equal(gt_graph_build(tr, &o, &g), GT_EINVAL);
    assert_contains(gt_trace_errmsg(tr), "backward call 2 of");
    gt_trace_close(tr);
}

static void test_label_escape(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        size_t max;
        const char *out;
    } cases[] = {
        {"plain", 0, "plain"},
        {"  trimmed\t \n", 0, "trimmed"},
        {"a\\b", 0, "a\\\\b"},
        {"say \"hi\"", 0, "say \"hi\""},
        {"x < y > z", 0, "x < y > z"},
        {"a & b &amp; c", 0, "a &amp; b &amp;amp; c"},
        {"one\ntwo", 0, "one\\ntwo"},
        {"crlf\r\nnext", 0, "crlf\\nnext"},
        {"tab\there", 0, "tab here"},
        {"bell\a", 0, "bell\xef\xbf\xbd"},
        {"bad \xff byte", 0, "bad \xef\xbf\xbd byte"},
        {"cut \xe8\xae", 0, "cut \xef\xbf\xbd\xef\xbf\xbd"},
        {"\\N \\G", 0, "\\\\N \\\\G"},
        {"\xe8\xae\xad\xe7\xbb\x83.py", 0, "\xe8\xae\xad\xe7\xbb\x83.py"},
        {"abcdefghij", 5, "abcd\xe2\x80\xa6"},
        {"abcde", 5, "abcde"},
        {"\xe8\xae\xad\xe7\xbb\x83\xe8\xae\xad\xe7\xbb\x83", 3,
         "\xe8\xae\xad\xe7\xbb\x83\xe2\x80\xa6"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = gt_graph_label_escape(cases[i].in, cases[i].max);
        assert_non_null(got);
        if (strcmp(got, cases[i].out))
            print_error("case %zu: want \"%s\" got \"%s\"\n", i, cases[i].out, got);
        assert_string_equal(got, cases[i].out);
        free(got);
    }
}

/* Every awkward character in file names, code and variable names. */
static const char awkward_file[] =
    "/tmp/\xe9\xa1\xb9\xe7\x9b\xae \"q\"/\xe8\xae\xad\xe7\xbb\x83<&>.py";
static const char awkward_code[] = "s = \"a\\\\b\" + '<tag>' & x  # \\n not a newline";
static const char awkward_name[] = "\xe6\x9d\x83\xe9\x87\x8d\"<&>\\";

static void make_awkward(tb *t, const char *name, int64_t *mut, int64_t *saved)
{
    char longcode[300];
    memset(longcode, 'x', sizeof longcode - 1);
    longcode[sizeof longcode - 1] = '\0';
    memcpy(longcode, "long = ", 7);
    int64_t shape[1] = {2};
    tb_open(t, name);
    gt_id st = tb_stack(t, awkward_file, 3, awkward_code);
    gt_id st_long = tb_stack(t, awkward_file, 4, longcode);
    gt_id st_nl = tb_stack(t, awkward_file, 5, "first\nsecond");
    tb_tensor(t, 1, 1, shape, 1);
    assert_int_equal(gt_name(t->r, 1, 1, awkward_name), 0);
    int64_t op = tb_op(t, "aten::mul", st);
    tb_node(t, 1, "AccumulateGrad", 0, 1);
    tb_node(t, 2, "MulBackward0", op, 0);
    tb_edge(t, 2, 0, 1);
    *saved = tb_saved(t, 2, "self", 1, 0);
    int64_t op2 = tb_op(t, "aten::sum", st_nl);
    tb_node(t, 3, "SumBackward0", op2, 0);
    tb_edge(t, 3, 0, 2);
    *mut = tb_op(t, "aten::add_.Tensor", st_long);
    assert_int_equal(gt_version_bump(t->r, *mut, 1, 1, 0, NULL), 0);
    tb_tensor(t, 9, 0, NULL, 0);
    tb_backward(t, 9, 3, 0);
    tb_close(t);
}

static void test_awkward_round_trip(void **state)
{
    (void)state;
    tb t;
    int64_t mut, saved;
    char mname[32], sname[32], want[512];
    make_awkward(&t, "awkward \"\xe8\xae\xad\xe7\xbb\x83\".db", &mut, &saved);
    gt_mutation m = {.seq = mut, .bump_seq = 1, .tensor = 1, .version_after = 1};
    gt_finding f = {.kind = GT_FINDING_INPLACE_INVALIDATED_SAVED,
                    .first_to_fail = 1,
                    .backward = 1,
                    .node = 2,
                    .saved_seq = saved,
                    .tensor = 1,
                    .version_at_backward = 1,
                    .n_mutations = 1,
                    .mutations = &m};
    gt_findings fs = {.n = 1, .v = &f};
    gt_graph_options o = {.hops = -1, .findings = &fs};
    gt_graph *g = build(t.path, &o);
    Agraph_t *d = reparse(g);

    /* Base name with quotes, <, &, > and Chinese; code verbatim. */
    snprintf(want, sizeof want, "MulBackward0\n\xe8\xae\xad\xe7\xbb\x83<&>.py:3\n%s",
             awkward_code);
    assert_contains(label_of(d, "n2"), want);
    /* The tooltip keeps the whole path. */
    snprintf(want, sizeof want, "%s:3", awkward_file);
    assert_string_equal(shown(attr(node(d, "n2"), "tooltip")), want);
    /* A newline in the source stays a line break. */
    assert_contains(label_of(d, "n3"), ".py:5\nfirst\nsecond");
    /* Variable names with quotes, <&> and a backslash. */
    assert_contains(label_of(d, "n1"), awkward_name);
    set_name(sname, sizeof sname, "s", saved);
    assert_contains(label_of(d, sname), awkward_name);
    /* A long line elided to 60 characters. */
    set_name(mname, sizeof mname, "m", mut);
    const char *ml = label_of(d, mname);
    assert_contains(
        ml, "long = xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\xe2\x80\xa6\n");
    assert_null(strstr(ml, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\xe2"));
    assert_true(has_edge(d, mname, sname));
    /* The title holds the trace's file name with its quotes. */
    assert_contains(shown(agget(d, (char *)"label")),
                    "backward call 1 of awkward \"\xe8\xae\xad\xe7\xbb\x83\".db");
    agclose(d);

    /* SVG: XML-escaped by gvc; nothing raw that would break the XML. */
    char *svg = NULL;
    size_t len = 0;
    assert_int_equal(gt_graph_render_data(g, GT_GRAPH_SVG, &svg, &len), 0);
    assert_int_equal(strlen(svg), len);
    assert_true(!strncmp(svg, "<?xml", 5));
    assert_non_null(strstr(svg, "</svg>"));
    assert_contains(svg, "&#39;&lt;tag&gt;&#39; &amp; x");
    assert_contains(svg, "\xe8\xae\xad\xe7\xbb\x83&lt;&amp;&gt;.py:3");
    assert_null(strstr(svg, "<tag>"));
    assert_null(strstr(svg, "<&>"));
    free(svg);
    gt_graph_free(g);
}

/* A saved tensor's label names the tensor (its own names), else the view
 * base it was made from; a tensor sharing only the version counter lends
 * none (trace.h's gt_trace_names_nearest). */
static void test_view_names(void **state)
{
    (void)state;
    tb t;
    int64_t shape[1] = {4};
    tb_open(&t, "view_names.db");
    gt_id st = tb_stack(&t, "model.py", 3, "y = w[1:] * w[1:]");
    tb_tensor(&t, 1, 1, shape, 1); /* w, a leaf */
    assert_int_equal(gt_name(t.r, 1, 1, "w"), 0);
    int64_t strides[1] = {1};
    gt_tensor_info v = {.id = 2,
                        .dtype = tb_str(&t, "float32"),
                        .ndim = 1,
                        .shape = shape,
                        .strides = strides,
                        .requires_grad = 1,
                        .alias_of = 1,
                        .shares_version = 1};
    assert_int_equal(gt_tensor(t.r, &v), 0); /* w[1:], unnamed */
    v.id = 3;
    assert_int_equal(gt_tensor(t.r, &v), 0); /* another view, named */
    assert_int_equal(gt_name(t.r, 2, 3, "row"), 0);
    int64_t op = tb_op(&t, "aten::mul", st);
    tb_node(&t, 1, "AccumulateGrad", 0, 1);
    tb_node(&t, 2, "MulBackward0", op, 0);
    tb_edge(&t, 2, 0, 1);
    int64_t s2 = tb_saved(&t, 2, "self", 2, 0);
    int64_t s3 = tb_saved(&t, 2, "other", 3, 0);
    tb_tensor(&t, 9, 0, NULL, 0);
    tb_backward(&t, 9, 2, 1);
    tb_close(&t);

    gt_graph_options o = {.hops = -1, .saved = 1};
    gt_graph *g = build(t.path, &o);
    Agraph_t *d = reparse(g);
    char name[32];
    set_name(name, sizeof name, "s", s2);
    assert_contains(label_of(d, name), "\nw\n"); /* its base's name only */
    set_name(name, sizeof name, "s", s3);
    assert_contains(label_of(d, name), "\nrow\n"); /* its own, not its base's */
    agclose(d);
    gt_graph_free(g);
    unlink(t.path);
}

static void test_png(void **state)
{
    (void)state;
    seed s;
    char *png = NULL;
    size_t len = 0;
    make_seed(&s, "seed_png.db");
    gt_graph_options o = {.hops = -1, .findings = &s.findings};
    gt_graph *g = build(s.t.path, &o);
    int rc = gt_graph_render_data(g, GT_GRAPH_PNG, &png, &len);
    if (rc)
        print_error("png: %s\n", gt_graph_errmsg(g));
    assert_int_equal(rc, 0);
    assert_true(len > 1000);
    assert_memory_equal(png, "\x89PNG\r\n\x1a\n", 8);
    assert_memory_equal(png + 12, "IHDR", 4);
    const unsigned char *u = (const unsigned char *)png;
    uint32_t w = (uint32_t)u[16] << 24 | u[17] << 16 | u[18] << 8 | u[19];
    uint32_t h = (uint32_t)u[20] << 24 | u[21] << 16 | u[22] << 8 | u[23];
    /* 4 nodes, 2 saved, 3 mutations and a legend: more tall than tiny. */
    assert_true(w >= 300 && w <= 10000);
    assert_true(h >= 300 && h <= 10000);
    free(png);
    gt_graph_free(g);
}

static void test_render_files(void **state)
{
    (void)state;
    seed s;
    char path[600], tmp[640];
    struct stat st;
    make_seed(&s, "seed_files.db");
    gt_graph_options o = {.hops = -1, .findings = &s.findings};
    gt_graph *g = build(s.t.path, &o);

    static const char *const exts[] = {"dot", "svg", "png"};
    for (int f = 0; f < 3; f++) {
        int fmt = -1;
        snprintf(path, sizeof path, "%s/\xe5\x9b\xbe \"g\".%s", tmpdir, exts[f]);
        assert_int_equal(gt_graph_format_from_path(path, &fmt), 0);
        assert_int_equal(fmt, f);
        assert_int_equal(gt_graph_render(g, fmt, path), 0);
        assert_int_equal(stat(path, &st), 0);
        assert_true(st.st_size > 100);
        snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
        assert_int_not_equal(stat(tmp, &st), 0); /* no temporary left */
    }
    /* A directory that does not exist: an error, no file. */
    snprintf(path, sizeof path, "%s/missing/g.svg", tmpdir);
    assert_int_equal(gt_graph_render(g, GT_GRAPH_SVG, path), GT_EIO);
    assert_contains(gt_graph_errmsg(g), "cannot write");
    assert_contains(gt_graph_errmsg(g), "missing/g.svg");
    /* a success clears it */
    snprintf(path, sizeof path, "%s/ok.dot", tmpdir);
    assert_int_equal(gt_graph_render(g, GT_GRAPH_DOT, path), 0);
    assert_string_equal(gt_graph_errmsg(g), "");
    gt_graph_free(g);

    int fmt = 7;
    assert_int_equal(gt_graph_format_from_path("g.jpeg", &fmt), GT_EINVAL);
    assert_int_equal(gt_graph_format_from_path("dir.svg/g", &fmt), GT_EINVAL);
    assert_int_equal(gt_graph_format_parse("PNG", &fmt), 0);
    assert_int_equal(fmt, GT_GRAPH_PNG);
    assert_int_equal(gt_graph_format_parse("gv", &fmt), 0);
    assert_int_equal(fmt, GT_GRAPH_DOT);
    assert_string_equal(gt_graph_format_name(GT_GRAPH_SVG), "svg");
}

static void test_layout_limit(void **state)
{
    (void)state;
    tb t;
    char *data = NULL;
    size_t len = 0;
    make_chain(&t, "chain_limit.db", 1);
    gt_graph_options o = {.hops = -1, .all = 1, .layout_limit = 40};
    gt_graph *g = build(t.path, &o);
    assert_int_equal(gt_graph_render_data(g, GT_GRAPH_SVG, &data, &len), GT_EINVAL);
    assert_null(data);
    /* 50 nodes, 3 legend items (no saved notes, no findings to explain) */
    assert_contains(gt_graph_errmsg(g),
                    "cannot lay out 53 nodes as svg (the limit is 40)");
    assert_contains(gt_graph_errmsg(g), "--format dot");
    assert_null(strstr(gt_graph_errmsg(g), "gradtrace:")); /* the command adds it */
    /* DOT has no limit. */
    assert_int_equal(gt_graph_render_data(g, GT_GRAPH_DOT, &data, &len), 0);
    assert_non_null(strstr(data, "n50"));
    free(data);
    gt_graph_free(g);

    /* Without findings and above the limit, focus falls back on the root,
     * as far as a quarter of the limit allows (room for notes, markers). */
    o.all = 0;
    g = build(t.path, &o);
    assert_int_equal(gt_graph_nodes_drawn(g), 10);
    Agraph_t *d = reparse(g);
    assert_non_null(node(d, "n50"));
    assert_non_null(node(d, "n41"));
    assert_null(node(d, "n40"));
    assert_contains(shown(agget(d, (char *)"label")),
                    "10 of 50 autograd nodes: 9 hops around 1 root");
    agclose(d);
    gt_graph_free(g);
}

/* Graphviz's messages are kept on the handle, never printed by the
 * library: one outside any build or render (the program's own use of
 * cgraph) reaches no stderr either. */
static void test_graphviz_messages_not_printed(void **state)
{
    (void)state;
    tb t;
    make_chain(&t, "messages.db", 1);
    gt_graph *g = build(t.path, NULL); /* gradtrace's handler installed */
    char *svg = NULL;
    size_t len = 0;
    assert_int_equal(gt_graph_render_data(g, GT_GRAPH_SVG, &svg, &len), 0);
    free(svg);

    char path[600];
    snprintf(path, sizeof path, "%s/stderr.txt", tmpdir);
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(path, "w+");
    assert_non_null(f);
    assert_true(saved >= 0 && dup2(fileno(f), 2) == 2);
    agerr(AGWARN, "%s\n", "a message outside any render");
    fflush(stderr);
    assert_int_equal(dup2(saved, 2), 2);
    close(saved);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    char got[256] = "";
    rewind(f);
    assert_true(fread(got, 1, sizeof got - 1, f) == (size_t)(n < 255 ? n : 255));
    fclose(f);
    printf("# stderr: \"%s\"\n", got);
    assert_int_equal(n, 0);
    /* nor kept on a handle it is not about */
    assert_string_equal(gt_graph_warnings(g), "");
    gt_graph_free(g);
}

/* A render error names the path whole, however long (a path is the user's:
 * 2,600 bytes here, beyond any fixed message buffer). */
static void test_render_error_long_path(void **state)
{
    (void)state;
    tb t;
    make_chain(&t, "long_path.db", 1);
    gt_graph *g = build(t.path, NULL);
    gt_strbuf path = GT_STRBUF_INIT;
    gt_strbuf_addf(&path, "%s/missing", tmpdir);
    for (int i = 0; i < 13; i++) {
        gt_strbuf_adds(&path, "/");
        for (int k = 0; k < 199; k++)
            gt_strbuf_adds(&path, "d");
    }
    gt_strbuf_adds(&path, "/end.svg");
    assert_false(path.oom);
    assert_true(path.len > 2600);
    gt_strbuf want = GT_STRBUF_INIT;
    gt_strbuf_addf(&want, "cannot write %s: %s", path.p, strerror(ENOENT));
    assert_int_equal(gt_graph_render(g, GT_GRAPH_SVG, path.p), GT_EIO);
    assert_string_equal(gt_graph_errmsg(g), want.p);
    /* a success clears it */
    char *data = NULL;
    size_t len = 0;
    assert_int_equal(gt_graph_render_data(g, GT_GRAPH_DOT, &data, &len), 0);
    free(data);
    assert_string_equal(gt_graph_errmsg(g), "");
    gt_strbuf_release(&want);
    gt_strbuf_release(&path);
    gt_graph_free(g);
}

/* Graphviz's messages are kept whole, however long (they quote names from
 * the trace), without their level, one a line, whether cgraph hands them
 * over in one piece or in several. (Each piece stays under 1,024 bytes:
 * Graphviz 2.42's agerr reuses its va_list to format a longer one.) */
static void test_graphviz_messages_whole(void **state)
{
    (void)state;
    gt_strbuf name = GT_STRBUF_INIT, got = GT_STRBUF_INIT, want = GT_STRBUF_INIT;
    for (int k = 0; k < 900; k++)
        gt_strbuf_add(&name, &"abcdefghij"[k % 10], 1);
    assert_false(name.oom);
    gt__graph_messages(&got);
    agerr(AGWARN, "node %s", name.p);
    agerr(AGPREV, "%s", name.p);
    agerr(AGPREV, "%s has an odd label\n", name.p);
    agerr(AGERR, "graph %s", name.p); /* ended by the next piece */
    agerr(AGPREV, " is too large\n");
    gt__graph_messages(NULL);
    gt_strbuf_addf(&want, "node %s%s%s has an odd label\ngraph %s is too large\n", name.p,
                   name.p, name.p, name.p);
    assert_false(got.oom);
    assert_string_equal(gt_strbuf_str(&got), want.p);
    /* nothing more once detached */
    agerr(AGWARN, "%s\n", "after");
    assert_int_equal(got.len, want.len);
    gt_strbuf_release(&name);
    gt_strbuf_release(&got);
    gt_strbuf_release(&want);
}

static void test_no_backward(void **state)
{
    (void)state;
    tb t;
    tb_open(&t, "nobw.db");
    gt_id st = tb_stack(&t, "/home/u/f.py", 1, "y = x.exp()");
    tb_node(&t, 1, "AccumulateGrad", 0, 0);
    tb_node(&t, 2, "ExpBackward0", tb_op(&t, "aten::exp", st), 0);
    tb_edge(&t, 2, 0, 1);
    tb_close(&t);
    gt_graph *g = build(t.path, NULL);
    assert_int_equal(gt_graph_backward(g), 0);
    Agraph_t *d = reparse(g);
    assert_true(has_edge(d, "n1", "n2"));
    assert_contains(label_of(d, "n2"), "(backward root)");
    assert_contains(shown(agget(d, (char *)"label")), "(no backward call recorded)");
    agclose(d);
    gt_graph_free(g);

    /* An empty trace has nothing to draw. */
    tb_open(&t, "empty.db");
    tb_close(&t);
    gt_trace *tr = NULL;
    assert_int_equal(gt_trace_open(t.path, &tr), 0);
    assert_int_equal(gt_graph_build(tr, NULL, &g), GT_EINVAL);
    assert_contains(gt_trace_errmsg(tr), "holds no autograd graph to draw");
    gt_trace_close(tr);
}

/* What a damaged or hostile trace may hold: a cycle, an edge to a node
 * that was never recorded, a saved tensor that was not matched. */
static void test_odd_graphs(void **state)
{
    (void)state;
    tb t;
    tb_open(&t, "odd.db");
    tb_node(&t, 1, "A", 0, 0);
    tb_node(&t, 2, "B", 0, 0);
    tb_node(&t, 3, "C", 0, 0);
    tb_edge(&t, 1, 0, 2);
    tb_edge(&t, 2, 0, 3);
    tb_edge(&t, 3, 0, 1);
    tb_edge(&t, 2, 1, 99);
    tb_edge(&t, 2, 2, 0); /* an empty edge */
    tb_edge(&t, 3, 1, 3); /* itself */
    int64_t saved = tb_saved(&t, 2, "self", 0, 4);
    tb_backward(&t, 0, 1, 1);
    tb_close(&t);

    gt_graph *g = build(t.path, NULL);
    assert_int_equal(gt_graph_nodes_total(g), 4);
    Agraph_t *d = reparse(g);
    assert_true(has_edge(d, "n2", "n1"));
    assert_true(has_edge(d, "n3", "n2"));
    assert_true(has_edge(d, "n1", "n3"));
    assert_true(has_edge(d, "n3", "n3"));
    assert_true(has_edge(d, "n99", "n2"));
    assert_string_equal(label_of(d, "n99"), "(node 99 not recorded)");
    assert_string_equal(label_of(d, "n1"), "A\n(backward root)");
    char sname[32];
    set_name(sname, sizeof sname, "s", saved);
    assert_string_equal(label_of(d, sname), "self (saved)\nsaved at version 4");
    agclose(d);
    /* And it lays out. */
    char *svg = NULL;
    size_t len = 0;
    assert_int_equal(gt_graph_render_data(g, GT_GRAPH_SVG, &svg, &len), 0);
    assert_non_null(strstr(svg, "(node 99 not recorded)"));
    free(svg);
    gt_graph_free(g);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "%s/gt_test_graph_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[400];
    if (getenv("GT_KEEP_TMP"))
        return 0;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_label_escape),
        cmocka_unit_test(test_seed_structure),
        cmocka_unit_test(test_seed_dot),
        cmocka_unit_test(test_seed_without_findings),
        cmocka_unit_test(test_focus_hops),
        cmocka_unit_test(test_repeats_drawn_once),
        cmocka_unit_test(test_repeats_need_same_shapes),
        cmocka_unit_test(test_graphviz_messages_not_printed),
        cmocka_unit_test(test_wide_ring_in_part),
        cmocka_unit_test(test_choose_backward),
        cmocka_unit_test(test_awkward_round_trip),
        cmocka_unit_test(test_view_names),
        cmocka_unit_test(test_png),
        cmocka_unit_test(test_render_files),
        cmocka_unit_test(test_render_error_long_path),
        cmocka_unit_test(test_graphviz_messages_whole),
        cmocka_unit_test(test_layout_limit),
        cmocka_unit_test(test_wrap_long_chain),
        cmocka_unit_test(test_no_backward),
        cmocka_unit_test(test_odd_graphs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
