/* The fix for a root_without_grad or grad_input_unreachable finding
 * (cut.c finds them): where to stop cutting the graph, or what to make
 * require grad. Reads the finding and the trace; part of the suggester
 * (suggest.c calls it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/error.h>

#include "diagnose_int.h"
#include "pysrc.h"

/* ---- the fix ------------------------------------------------------------ */

enum { ROOT, INPUT, WHERE, CODE, FIXED, OUT, NBUF };

/* "; ... none of the tensors it comes from (a, b) required grad ...": the
 * sources' names and the fix, appended to out. */
static void sources_text(gt__dctx *c, const gt_finding *f, gt_strbuf *out)
{
    gt_strbuf nm = GT_STRBUF_INIT, list = GT_STRBUF_INIT;
    for (size_t i = 0; i < f->n_candidates; i++) {
        gt__dx_first_name(c, f->candidates[i], &nm);
        if (nm.len)
            gt_strbuf_addf(&list, "%s%s", list.len ? ", " : "", gt_strbuf_str(&nm));
    }
    gt_strbuf_addf(
        out,
        "; none of the tensors it comes from%s%s%s required grad when the ops "
        "used them (plain data, or parameters with requires_grad=False: a frozen "
        "model): set requires_grad=True on what should be trained (`for p in "
        "model.parameters(): p.requires_grad_(True)`), or do not call backward() "
        "when nothing is",
        list.len ? " (" : "", gt_strbuf_str(&list), list.len ? ")" : "");
    c->oom |= nm.oom || list.oom;
    gt_strbuf_release(&nm);
    gt_strbuf_release(&list);
}

static int suggest_in(gt__dctx *c, gt_finding *f, gt_strbuf *b)
{
    gt_strbuf *out = &b[OUT];
    gt__opinfo o = {0};
    gt__dx_first_name(c, f->tensor, &b[ROOT]);
    if (f->other)
        gt__dx_first_name(c, f->other, &b[INPUT]);
    gt__dx_load_op(c, f->view_op, &o);
    gt__dx_raising_code(c, o.stack, &b[WHERE], &b[CODE]);
    const char *root = b[ROOT].len ? gt_strbuf_str(&b[ROOT]) : "the tensor";
    const char *where = gt_strbuf_str(&b[WHERE]), *code = gt_strbuf_str(&b[CODE]);
    const char *in = b[INPUT].len ? gt_strbuf_str(&b[INPUT]) : "its input";
    if (f->kind == GT_FINDING_GRAD_INPUT_UNREACHABLE) {
        gt__opinfo m = {0};
        gt__dx_load_op(c, f->op, &m);
        gt__dx_stack_loc(c, m.stack, &b[FIXED], NULL, NULL);
        gt__dx_op_release(&m);
        const char *made = gt_strbuf_str(&b[FIXED]);
        switch (f->cut) {
        case GT_CUT_LATE:
            gt_strbuf_addf(
                out,
                "%s did not require grad yet when %s at %s read it (requires_grad "
                "was set later), so the outputs have no graph back to it: call "
                "`%s.requires_grad_()` before the ops that use it%s%s",
                root, o.name, where, root, made[0] ? ", right after " : "", made);
            break;
        case GT_CUT_INPUT_NO_GRAD:
            gt_strbuf_addf(
                out,
                "%s does not require grad%s%s%s: set it before the ops that use it "
                "(`%s.requires_grad_()`%s%s), or leave it out of the inputs",
                root, made[0] ? " (made at " : "", made, made[0] ? ")" : "", root,
                made[0] ? " after " : "", made);
            break;
        case GT_CUT_NO_GRAD:
            gt_strbuf_addf(out,
                           "%s reaches the outputs only through %s at %s, which ran with "
                           "grad mode off: compute that with grad mode on (outside "
                           "`torch.no_grad()`)",
                           root, o.name, where);
            break;
        case GT_CUT_DETACH:
            gt_strbuf_addf(out,
                           "%s reaches the outputs only through detach() at %s: use %s "
                           "itself there",
                           root, where, root);
            break;
        default:
            if (f->cut == GT_CUT_UNUSED)
                gt_strbuf_addf(out, "no op read %s before the call", root);
            else
                gt_strbuf_addf(
                    out, "%s is read (first at %s), but not on the way to the outputs",
                    root, where);
            gt_strbuf_adds(
                out, ", so the outputs do not depend on it: pass allow_unused=True if "
                     "that is expected (its gradient is then None; "
                     "materialize_grads=True gives zeros), e.g. a layer this loss does "
                     "not use, or leave it out of the inputs (for parameters, pass those "
                     "the loss uses)");
            break;
        }
        gt__dx_op_release(&o);
        return gt__dx_take_suggestion(c, f, out);
    }
    switch (f->cut) {
    case GT_CUT_DETACH:
    case GT_CUT_DATA: {
        /* the line without its .detach() or .data */
        const char *how = gt__py_without_alias(code, &b[FIXED]);
        gt_strbuf_addf(out, "%s is cut from %s's graph by %s at %s", root, in,
                       how                     ? how
                       : f->cut == GT_CUT_DATA ? ".data"
                                               : "detach()",
                       where);
        if (b[FIXED].len)
            gt_strbuf_addf(out,
                           ": if gradients should flow through it, use %s itself: `%s`",
                           in, gt_strbuf_str(&b[FIXED]));
        else
            gt_strbuf_addf(out, ": if gradients should flow through it, use %s itself",
                           in);
        gt_strbuf_adds(out, "; if not, nothing there needs backward()");
        break;
    }
    case GT_CUT_NO_GRAD:
        gt_strbuf_addf(
            out,
            "%s at %s ran with grad mode off (inside `torch.no_grad()`, "
            "`torch.inference_mode()` or a function decorated with one), so "
            "%s has no graph back to %s: compute it with grad mode on, outside "
            "that block",
            o.name, where, root, in);
        break;
    case GT_CUT_NO_GRADIENT:
        gt_strbuf_addf(
            out,
            "%s at %s has no gradient (%s result), so nothing flows back "
            "through it to %s's inputs: compute the loss from a differentiable "
            "value instead (probabilities from softmax rather than argmax, a "
            "sigmoid rather than a comparison, float rather than integer "
            "tensors)",
            o.name, where,
            strstr(o.name, "argmax") || strstr(o.name, "argmin") ? "an index"
                                                                 : "an integer or bool",
            root);
        if (!f->other) /* the walk met no graph before it either */
            sources_text(c, f, out);
        break;
    case GT_CUT_ITEM: {
        gt__opinfo m = {0};
        gt__dx_load_op(c, f->op, &m);
        gt__dx_stack_loc(c, m.stack, &b[FIXED], NULL, NULL);
        if (!strncmp(o.name, "aten::detach", 12))
            gt_strbuf_addf(out,
                           "detach() at %s took %s out of the graph (to NumPy or Python "
                           "values), and %s was made from values at %s, with no graph: "
                           "compute the loss with torch ops on %s itself (no .detach(), "
                           ".numpy(), .tolist()), and use NumPy only for metrics",
                           where, in, root, gt_strbuf_str(&b[FIXED]), in);
        else
            gt_strbuf_addf(
                out,
                ".item() at %s turned a tensor with a graph into a Python "
                "number, and %s was made from numbers at %s, with no graph: keep "
                "the tensor (add the losses as tensors, e.g. `total = total + "
                "loss`, and call backward() on that), and use .item() only for "
                "logging",
                where, root, gt_strbuf_str(&b[FIXED]));
        gt__dx_op_release(&m);
        break;
    }
    default:
        gt_strbuf_addf(out, "%s comes from nothing with a graph", root);
        sources_text(c, f, out);
        break;
    }
    gt__dx_op_release(&o);
    return gt__dx_take_suggestion(c, f, out);
}

int gt__dx_suggest_cut(gt__dctx *c, gt_finding *f)
{
    gt_strbuf b[NBUF] = {0};
    int rc = suggest_in(c, f, b);
    for (int i = 0; i < NBUF; i++) {
        c->oom |= b[i].oom;
        gt_strbuf_release(&b[i]);
    }
    return rc;
}
