/* The fix of a ddp_unused_parameters finding (unused.c finds them): for
 * each run of parameters with one module, reason and line, what to change
 * there; then find_unused_parameters=True at the DistributedDataParallel(...)
 * line. */
#include <stdio.h>
#include <string.h>

#include "diagnose_int.h"
#include "pysrc.h"

/* The stack of op `seq` (its line), 0 if none. */
static int64_t op_stack(gt__dctx *c, int64_t seq)
{
    return seq ? gt__dx_int(c, "SELECT stack FROM ops WHERE seq = ?1", seq, 0, NULL, 0)
               : 0;
}

/* See diagnose_int.h. */
int gt__dx_suggest_ddp(gt__dctx *c, gt_finding *f)
{
    gt_strbuf b = GT_STRBUF_INIT, where = GT_STRBUF_INIT, code = GT_STRBUF_INIT,
              mod = GT_STRBUF_INIT, fixed = GT_STRBUF_INIT;
    gt__opinfo o = {0};
    gt_strbuf_addf(&b,
                   "DistributedDataParallel expects a gradient for every parameter in "
                   "each backward");
    if (f->backward)
        gt_strbuf_addf(&b, ", and backward #%lld reached none of these",
                       (long long)f->backward);
    for (size_t i = 0, j; i < f->n_params; i = j) {
        const gt_ddp_param *p = &f->params[i];
        gt__py_module_of(p->name, &mod);
        gt_strbuf_adds(&b, i ? "; " : ": ");
        int64_t here = op_stack(c, p->op);
        for (j = i; j < f->n_params && f->params[j].reason == p->reason &&
                    op_stack(c, f->params[j].op) == here;
             j++) {
            gt_strbuf m2 = GT_STRBUF_INIT;
            gt__py_module_of(f->params[j].name, &m2);
            int same = !strcmp(gt_strbuf_str(&m2), gt_strbuf_str(&mod));
            gt_strbuf_release(&m2);
            if (!same)
                break;
            gt_strbuf_addf(&b, "%s%s", j > i ? ", " : "",
                           f->params[j].name ? f->params[j].name : "(unnamed)");
        }
        const char *m = mod.len ? gt_strbuf_str(&mod) : NULL;
        gt__dx_load_op(c, p->reason == GT_CUT_UNUSED ? p->made : p->op, &o);
        gt__dx_raising_code(c, o.stack, &where, &code);
        const char *at = gt_strbuf_str(&where), *line = gt_strbuf_str(&code);
        switch (p->reason) {
        case GT_CUT_UNUSED:
            gt_strbuf_addf(&b, " %s used by no op in the forward",
                           j - i > 1 ? "were" : "was");
            if (m)
                gt_strbuf_addf(&b,
                               " (module %s%s%s): call %s in forward() on the way to "
                               "the loss, or delete it",
                               m, at[0] ? ", made at " : "", at, m);
            else
                gt_strbuf_adds(&b, ": use it on the way to the loss, or delete it");
            break;
        case GT_CUT_OFF_PATH:
            gt_strbuf_addf(&b,
                           " %s read at %s (`%s`), but nothing computed from %s reaches "
                           "the loss: add that output to the loss, or delete %s and its "
                           "call",
                           j - i > 1 ? "are" : "is", at, line, j - i > 1 ? "them" : "it",
                           m ? m : "the layer");
            break;
        case GT_CUT_DETACH:
            gt_strbuf_addf(&b, " reach%s the loss only through detach() at %s",
                           j - i > 1 ? "" : "es", at);
            if (gt__py_without_alias(line, &fixed))
                gt_strbuf_addf(&b, ": `%s` if they should train", gt_strbuf_str(&fixed));
            else
                gt_strbuf_adds(&b, ": use the tensor itself there if they should train");
            gt_strbuf_adds(&b, ", else freeze them (requires_grad_(False)) before "
                               "DistributedDataParallel(...)");
            break;
        case GT_CUT_NO_GRAD:
            gt_strbuf_addf(&b,
                           " reach%s the loss only through %s at %s, which ran with grad "
                           "mode off: compute it outside torch.no_grad() if they should "
                           "train, else freeze them (requires_grad_(False)) before "
                           "DistributedDataParallel(...)",
                           j - i > 1 ? "" : "es", o.name[0] ? o.name : "an op", at);
            break;
        case GT_CUT_NONE:
            gt_strbuf_addf(&b,
                           " (the trace has backward #%lld reaching %s, or no such "
                           "parameter: not explained)",
                           (long long)f->backward, j - i > 1 ? "them" : "it");
            break;
        }
    }
    gt__dx_load_op(c, f->op, &o);
    gt__dx_raising_code(c, o.stack, &where, &code);
    gt_strbuf_adds(&b, "; or, if parameters go unused on purpose, pass "
                       "find_unused_parameters=True");
    if (gt__py_ddp_fixed_line(gt_strbuf_str(&code), &fixed) == 0 && fixed.len)
        gt_strbuf_addf(&b, ": `%s` at %s", gt_strbuf_str(&fixed), gt_strbuf_str(&where));
    else
        gt_strbuf_adds(&b, " to DistributedDataParallel(...)");
    c->oom |= where.oom || code.oom || mod.oom || fixed.oom;
    gt__dx_op_release(&o);
    gt_strbuf_release(&where);
    gt_strbuf_release(&code);
    gt_strbuf_release(&mod);
    gt_strbuf_release(&fixed);
    int rc = gt__dx_take_suggestion(c, f, &b);
    gt_strbuf_release(&b);
    return rc;
}
