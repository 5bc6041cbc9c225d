/* Unit tests of inspector/unused.c (ddp_unused_parameters) on a trace built
 * by hand with the recorder API: DistributedDataParallel(model) detaching
 * its four parameters in order, a forward inside DDP's forward where one is
 * on the loss's path, one feeds a branch the loss does not use, one is cut
 * by detach(), one is never read; a backward; DDP's error at the next
 * forward. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <gradtrace/recorder.h>

#include <gradtrace/diagnose.h>
#include <gradtrace/report.h>
#include "strbuf.h"
#include <gradtrace/trace.h>

#define TB_PATH_PREFIX "gt_test_unused"
#define TB_SOURCE_FILE "/src/train.py"
#include "tracebuilder.h"

#define MSG                                                                              \
    "Expected to have finished reduction in the prior iteration before starting a new "  \
    "one. This error indicates that your module has parameters that were not used in "   \
    "producing loss. You can enable unused parameter detection by passing the keyword "  \
    "argument `find_unused_parameters=True` to "                                         \
    "`torch.nn.parallel.DistributedDataParallel`, and by \nmaking sure all `forward` "   \
    "function outputs participate in calculating loss. \n"

enum { P_FC = 1, P_AUX, P_ENC, P_EXTRA, X = 10, H, SIDE, E, ED, LOSS };

static void tensor(tb *b, gt_id id, int leaf_param)
{
    tb_tensor_1d(
        b, (gt_tensor_info){.id = id, .requires_grad = leaf_param, .is_leaf = leaf_param},
        4);
}

/* A stack of the user's line `line` (`code`) calling torch's `fn` in
 * `file`, then (if ucode) the user's line `uline` inside it. */
static gt_id stack2(tb *b, int line, const char *code, const char *file, const char *fn,
                    int uline, const char *ucode)
{
    gt_id fu, ft, s0, s1, f2, s2;
    assert_int_equal(gt_intern_frame(b->r, TB_SOURCE_FILE, line, "main", code, &fu), 0);
    assert_int_equal(gt_intern_stack(b->r, 0, fu, fu, &s0), 0);
    assert_int_equal(gt_intern_frame(b->r, file, 100, fn, "x", &ft), 0);
    assert_int_equal(gt_intern_stack(b->r, s0, ft, fu, &s1), 0);
    if (!ucode)
        return s1;
    assert_int_equal(
        gt_intern_frame(b->r, TB_SOURCE_FILE, uline, "Net.forward", ucode, &f2), 0);
    assert_int_equal(gt_intern_stack(b->r, s1, f2, f2, &s2), 0);
    return s2;
}

/* An op named `name` at `stack` reading in0 (and in1 if not 0), giving out. */
static int64_t op(tb *b, const char *name, gt_id stack, gt_id in0, gt_id in1, gt_id out)
{
    int64_t seq = tb_op_at(b, name, GT_PHASE_FORWARD, stack);
    assert_int_equal(gt_op_arg(b->r, seq, GT_ROLE_INPUT, 0, in0, 0), 0);
    if (in1)
        assert_int_equal(gt_op_arg(b->r, seq, GT_ROLE_INPUT, 1, in1, 0), 0);
    if (out)
        assert_int_equal(gt_op_arg(b->r, seq, GT_ROLE_OUTPUT, 0, out, 0), 0);
    return seq;
}

static void node(tb *b, gt_id id, const char *name, int64_t made_by, gt_id variable)
{
    tb_node_named(
        b,
        (gt_node_info){.id = id, .op = made_by, .sequence_nr = -1, .variable = variable},
        name);
}

/* The trace, with `tail` after MSG (the message's parameter lines). The
 * ops that matter: *aux (the first to read aux's weight), *cut (the
 * detach). */
static void build(tb *b, const char *name, const char *tail, int64_t *aux, int64_t *cut)
{
    char msg[1024];
    tb_open(b, name);
    for (gt_id p = P_FC; p <= P_EXTRA; p++)
        tensor(b, p, 1);
    /* DistributedDataParallel(model): param.detach() of each, in order */
    gt_id sync = stack2(b, 10, "ddp = DistributedDataParallel(model)",
                        "/py/torch/distributed/utils.py", "_sync_module_states", 0, NULL);
    for (gt_id p = P_FC; p <= P_EXTRA; p++) {
        tensor(b, 100 + p, 0);
        op(b, "aten::detach", sync, p, 0, 100 + p);
    }
    /* the forward, inside DDP's */
    const char *ddpf = "/py/torch/nn/parallel/distributed.py";
    const char *fwd = "DistributedDataParallel.forward", *call = "loss = ddp(x).sum()";
    tensor(b, X, 0);
    op(b, "aten::randn", tb_stack(b, 19, "x = torch.randn(4)"), X, 0, 0);
    for (gt_id t = H; t <= LOSS; t++)
        tensor(b, t, 0);
    int64_t mh = op(b, "aten::mul", stack2(b, 20, call, ddpf, fwd, 3, "h = self.fc(x)"),
                    X, P_FC, H);
    *aux = op(b, "aten::mul", stack2(b, 20, call, ddpf, fwd, 4, "side = self.aux(h)"), H,
              P_AUX, SIDE);
    int64_t me =
        op(b, "aten::mul", stack2(b, 20, call, ddpf, fwd, 5, "e = self.enc(x).detach()"),
           X, P_ENC, E);
    *cut = op(b, "aten::detach",
              stack2(b, 20, call, ddpf, fwd, 5, "e = self.enc(x).detach()"), E, 0, ED);
    int64_t ml = op(b, "aten::add", tb_stack(b, 20, call), H, ED, LOSS);
    node(b, 1, "AccumulateGrad", 0, P_FC);
    node(b, 2, "AccumulateGrad", 0, P_AUX);
    node(b, 3, "AccumulateGrad", 0, P_ENC);
    node(b, 11, "MulBackward0", mh, 0);
    node(b, 12, "MulBackward0", *aux, 0);
    node(b, 13, "MulBackward0", me, 0);
    node(b, 15, "AddBackward0", ml, 0);
    assert_int_equal(gt_edge(b->r, 15, 0, 11, 0), 0);
    assert_int_equal(gt_edge(b->r, 11, 0, 1, 0), 0);
    assert_int_equal(gt_edge(b->r, 12, 0, 11, 0), 0);
    assert_int_equal(gt_edge(b->r, 12, 1, 2, 0), 0);
    assert_int_equal(gt_edge(b->r, 13, 0, 3, 0), 0);
    assert_int_equal(gt_node_output(b->r, 15, 0, LOSS), 0);
    gt_backward_info bi = {.api = tb_str(b, "Tensor.backward"),
                           .thread = b->thread,
                           .stack = tb_stack(b, 21, "loss.backward()")};
    gt_id bw;
    assert_int_equal(gt_backward_begin(b->r, &bi, &bw), 0);
    assert_int_equal(gt_backward_root(b->r, bw, 0, LOSS, 15), 0);
    assert_int_equal(gt_backward_end(b->r, bw, 1), 0);
    /* the next forward raises */
    snprintf(msg, sizeof msg, "%s%s", MSG, tail);
    assert_int_equal(gt_error(b->r, "RuntimeError", msg, tb_stack(b, 20, call), 0, NULL),
                     0);
    static const char *const names[] = {"fc.weight", "aux.weight", "enc.weight",
                                        "extra.weight"};
    for (gt_id p = P_FC; p <= P_EXTRA; p++) {
        char nm[64];
        snprintf(nm, sizeof nm, "ddp.module.%s", names[p - 1]);
        assert_int_equal(gt_name(b->r, gt_recorder_seq(b->r), p, nm), 0);
    }
    tb_end(b, GT_RUN_EXCEPTION, 1);
}

/* The one ddp_unused_parameters finding of b's trace, the trace's
 * `diagnose --json` document (report.c's JSON of that finding) and its
 * text report (report_text.c's). */
static gt_findings *diagnose(tb *b, const gt_finding **f, char **json, char **text)
{
    gt_trace *t;
    gt_findings *fs = NULL;
    assert_int_equal(gt_trace_open(b->path, &t), 0);
    assert_int_equal(gt_diagnose(t, NULL, &fs), 0);
    *f = NULL;
    for (size_t i = 0; i < fs->n; i++)
        if (fs->v[i].kind == GT_FINDING_DDP_UNUSED_PARAMETERS) {
            assert_null(*f);
            *f = &fs->v[i];
        }
    assert_non_null(*f);
    gt_strbuf doc = GT_STRBUF_INIT;
    int status = 0;
    assert_int_equal(gt_diagnose_json(t, b->path, NULL, &doc, &status), 0);
    assert_non_null(strstr(gt_strbuf_str(&doc), "\"kind\":\"ddp_unused_parameters\""));
    *json = strdup(gt_strbuf_str(&doc));
    assert_non_null(*json);
    gt_strbuf_release(&doc);
    gt_report r;
    gt_strbuf out = GT_STRBUF_INIT;
    assert_int_equal(gt_report_build(t, b->path, NULL, &r), 0);
    assert_int_equal(gt_report_text(t, &r, b->path, 0, &out), 0);
    *text = strdup(gt_strbuf_str(&out));
    assert_non_null(*text);
    gt_strbuf_release(&out);
    gt_report_release(&r);
    printf("  %s\n  %s\n%s", (*f)->suggestion, *json, *text);
    gt_trace_close(t);
    return fs;
}

static void test_indices(void **state)
{
    (void)state;
    tb b;
    int64_t aux, cut;
    build(&b, "indices",
          "Parameter indices which did not receive grad for rank 1: 1 2 3\n", &aux, &cut);
    const gt_finding *f;
    char *json, *text;
    gt_findings *fs = diagnose(&b, &f, &json, &text);
    assert_string_equal(gt_finding_kind_name(f->kind), "ddp_unused_parameters");
    assert_int_equal(f->matches_error, 1);
    assert_int_equal(f->other, 1); /* the rank */
    assert_int_equal(f->backward, 1);
    assert_int_equal(f->n_params, 3);
    const struct {
        gt_id tensor;
        const char *name;
        int reason;
        int64_t op;
    } want[] = {{P_AUX, "aux.weight", GT_CUT_OFF_PATH, aux},
                {P_ENC, "enc.weight", GT_CUT_DETACH, cut},
                {P_EXTRA, "extra.weight", GT_CUT_UNUSED, 0}};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(f->params[i].index, (int64_t)i + 1);
        assert_int_equal(f->params[i].tensor, want[i].tensor);
        assert_string_equal(f->params[i].name, want[i].name);
        assert_int_equal(f->params[i].reason, want[i].reason);
        assert_int_equal(f->params[i].op, want[i].op);
    }
    assert_non_null(strstr(f->suggestion, "aux.weight is read at "));
    assert_non_null(strstr(f->suggestion, "`e = self.enc(x)` if they should train"));
    assert_non_null(strstr(f->suggestion, "extra.weight was used by no op"));
    assert_non_null(strstr(f->suggestion, "`ddp = DistributedDataParallel(model, "
                                          "find_unused_parameters=True)` at "));
    assert_non_null(strstr(json, "\"name\":\"enc.weight\",\"module\":\"enc\""));
    assert_non_null(strstr(json, "\"reason\":\"detach\""));
    assert_non_null(strstr(json, "\"fixed_code\":\"e = self.enc(x)\""));
    assert_non_null(strstr(json, "\"rank\":1"));
    assert_non_null(strstr(text,
                           "DistributedDataParallel got no gradient for aux.weight, "
                           "enc.weight, extra.weight in backward #1, so its next "
                           "forward raised  [ddp_unused_parameters"));
    assert_non_null(strstr(text, "    parameters  enc.weight (module enc): cut from the "
                                 "loss by detach()\n    cut at      /src/train.py:5 "));
    assert_non_null(strstr(text,
                           "    parameters  extra.weight (module extra): used by no "
                           "op in the forward\n    made at     /src/train.py:10 "));
    assert_non_null(strstr(text, "    wrapped at  /src/train.py:10 "));
    assert_null(strstr(text, "needed by")); /* raised at the forward, not backward */
    free(json);
    free(text);
    gt_findings_free(fs);
    unlink(b.path);
}

/* TORCH_DISTRIBUTED_DEBUG=INFO names them too; an index of a parameter the
 * backward reached does not match. */
static void test_names_and_mismatch(void **state)
{
    (void)state;
    tb b;
    int64_t aux, cut;
    build(&b, "names",
          "Parameters which did not receive grad for rank 0: aux.weight, fc.weight\n"
          "Parameter indices which did not receive grad for rank 0: 0 1\n",
          &aux, &cut);
    const gt_finding *f;
    char *json, *text;
    gt_findings *fs = diagnose(&b, &f, &json, &text);
    assert_int_equal(f->n_params, 2);
    assert_string_equal(f->params[0].name, "fc.weight");
    assert_string_equal(f->params[1].name, "aux.weight");
    assert_int_equal(f->matches_error, 0); /* fc.weight got its gradient */
    assert_int_equal(f->params[0].reason, GT_CUT_NONE);
    assert_int_equal(f->params[1].reason, GT_CUT_OFF_PATH);
    assert_non_null(strstr(json, "\"name\":\"fc.weight\",\"module\":\"fc\""));
    free(json);
    free(text);
    gt_findings_free(fs);
    unlink(b.path);

    /* no list at all: the parameters the backward did not reach */
    build(&b, "nolist", "", &aux, &cut);
    fs = diagnose(&b, &f, &json, &text);
    assert_int_equal(f->n_params, 3);
    assert_int_equal(f->matches_error, -1);
    assert_int_equal(f->other, -1);
    assert_string_equal(f->params[2].name, "extra.weight");
    free(json);
    free(text);
    gt_findings_free(fs);
    unlink(b.path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_indices),
        cmocka_unit_test(test_names_and_mismatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
