/* The fix for a finding of the in-place ops PyTorch refused for what the
 * written tensor is (refused.c finds them): write out of place, or give
 * the tensor memory of its own. Reads the finding and the trace; part of
 * the suggester (suggest.c calls it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/error.h>

#include "diagnose_int.h"
#include "pysrc.h"

/* ---- the fixes ---------------------------------------------------------- */

/* The texts a fix is built from, on the heap (names and lines are as long
 * as the user wrote them), by role. */
enum { NAME, OTHER, WHERE, CODE, OOP, MWHERE, ARGS, OUT, NBUF };
typedef struct fx {
    gt_strbuf b[NBUF];
    gt__opinfo o;
    gt__tinfo t;
} fx;

static void fx_release(gt__dctx *c, fx *x)
{
    for (int i = 0; i < NBUF; i++) {
        c->oom |= x->b[i].oom;
        gt_strbuf_release(&x->b[i]);
    }
    gt__dx_op_release(&x->o);
    gt__dx_tinfo_release(&x->t);
}

#define S(b) gt_strbuf_str(&(b))

/* The arguments of the call `call` ("resize_(") on the line, as written:
 * what lies between its parenthesis and the line's last ')'. */
static void call_args(const char *code, const char *call, gt_strbuf *out)
{
    gt_strbuf_reset(out);
    const char *p = strstr(code, call);
    const char *q = p ? strrchr(code, ')') : NULL;
    if (p && q && q >= p + strlen(call))
        gt_strbuf_add(out, p + strlen(call), (size_t)(q - p - strlen(call)));
}

static int suggest_in(gt__dctx *c, gt_finding *f, fx *x)
{
    gt_strbuf *b = &x->b[OUT];
    if (f->name)
        gt_strbuf_adds(&x->b[NAME], f->name);
    else if (f->tensor)
        gt__dx_first_name(c, f->tensor, &x->b[NAME]);
    if (f->other)
        gt__dx_first_name(c, f->other, &x->b[OTHER]);
    gt__dx_raising_code(c, f->stack, &x->b[WHERE], &x->b[CODE]);
    const char *nm = x->b[NAME].len ? S(x->b[NAME]) : "the tensor", *code = S(x->b[CODE]);
    /* the expression written, for lines that write through a subscript */
    const char *lhs = f->written && f->written[0] ? f->written : nm;
    gt__py_out_of_place_line(code, lhs, &x->b[OOP]);
    const char *oop = S(x->b[OOP]);
    gt__dx_load_op(c, f->view_op, &x->o);
    gt__dx_stack_loc(c, x->o.stack, &x->b[MWHERE], NULL, NULL);
    const char *made = S(x->b[MWHERE]), *mop = x->o.name;
    int rc = f->tensor ? gt__dx_load_tensor(c, f->tensor, &x->t) : 0;
    if (rc)
        return rc;
    switch (f->kind) {
    case GT_FINDING_INPLACE_OVERLAP:
        gt_strbuf_addf(
            b,
            "%s repeats its elements in memory (%s%s%s returns a view whose "
            "elements share memory), so an in-place write cannot give each its "
            "own value: ",
            nm, mop[0] ? mop : "an expand", made[0] ? " at " : "", made);
        if (oop[0])
            gt_strbuf_addf(b, "write out of place, `%s`, or ", oop);
        gt_strbuf_addf(b, "give it memory of its own first: `%s = %s.clone()`%s%s", nm,
                       nm, made[0] ? " after " : " before this line", made);
        if (made[0] && mop[0] && strstr(mop, "expand")) /* or at the expand itself */
            gt_strbuf_adds(b, " (or add .clone() after the expand on that line)");
        break;
    case GT_FINDING_INPLACE_INPUT_OVERLAP:
        gt_strbuf_addf(b, "an input of `%s` reads the memory it writes%s%s%s%s%s: ", code,
                       x->b[OTHER].len ? " (" : "", S(x->b[OTHER]),
                       x->b[OTHER].len && made[0] ? ", made at " : "",
                       x->b[OTHER].len ? made : "", x->b[OTHER].len ? ")" : "");
        if (x->b[OTHER].len)
            gt_strbuf_addf(b, "pass a copy, `%s.clone()`, in its place", S(x->b[OTHER]));
        else
            gt_strbuf_adds(b, "pass a copy of that input (`.clone()`) in its place");
        if (oop[0])
            gt_strbuf_addf(b, ", or write out of place, `%s`", oop);
        break;
    case GT_FINDING_INPLACE_INFERENCE_TENSOR:
        gt_strbuf_addf(
            b,
            "%s was made in inference mode%s%s, and a tensor made there can "
            "never be changed in place outside it: change a normal copy, "
            "`%s = %s.clone()` outside torch.inference_mode() before this line, "
            "or make it under torch.no_grad() instead of "
            "torch.inference_mode()",
            nm, made[0] ? " at " : "", made, nm, nm);
        break;
    case GT_FINDING_INPLACE_DTYPE: {
        gt_pymsg m;
        char *msg = NULL;
        sqlite3_stmt *st = NULL;
        int s = sqlite3_prepare_v2(c->db, "SELECT message FROM errors WHERE seq = ?1", -1,
                                   &st, NULL);
        if (s == SQLITE_OK) {
            sqlite3_bind_int64(st, 1, f->error_seq);
            if ((s = sqlite3_step(st)) == SQLITE_ROW) {
                const char *t = gt_column_text(st, 0, &c->oom);
                msg = t ? strdup(t) : NULL;
            }
        }
        gt__dx_lookup_nomem(c, s);
        sqlite3_finalize(st);
        if (gt__pymsg_parse(msg, &m) != 0) {
            free(msg);
            return gt__dx_nomem(c);
        }
        free(msg);
        const char *dt = x->t.found && x->t.dtype[0] ? x->t.dtype : m.out_dtype;
        const char *rt = m.result_dtype[0] ? m.result_dtype : "another dtype";
        gt_strbuf_addf(b, "%s is %s%s%s%s, and `%s` gives %s, which %s cannot hold: ", nm,
                       dt[0] ? dt : "of another dtype", made[0] ? " (made at " : "", made,
                       made[0] ? ")" : "", code, rt, dt[0] ? dt : "it");
        if (oop[0])
            gt_strbuf_addf(b, "write out of place, `%s` (a new %s tensor), or ", oop, rt);
        gt_strbuf_addf(b, "make %s %s where it is made (`.to(torch.%s)`)", nm, rt, rt);
        gt__pymsg_release(&m);
        break;
    }
    case GT_FINDING_INPLACE_SHAPE:
        gt_strbuf_addf(
            b, "%s has shape [%s], and `%s` broadcasts to a larger shape%s%s%s", nm,
            x->t.found ? x->t.shape : "?", code, x->b[OTHER].len ? " (that of " : "",
            S(x->b[OTHER]), x->b[OTHER].len ? ")" : "");
        gt_strbuf_adds(b, ", which does not fit in it: ");
        if (oop[0])
            gt_strbuf_addf(b,
                           "write out of place, `%s` (a new tensor of the larger shape), "
                           "or ",
                           oop);
        gt_strbuf_addf(b,
                       "bring %s to shape [%s] first (index or reduce it, e.g. "
                       ".sum(0) or .mean(0) over the extra dimension)",
                       x->b[OTHER].len ? S(x->b[OTHER]) : "the other operand",
                       x->t.found ? x->t.shape : "?");
        break;
    case GT_FINDING_DETACH_VIEW_INPLACE:
        gt_strbuf_addf(
            b,
            "%s is a view%s%s%s%s%s, and detach_() cannot change a view in place: "
            "`%s = %s.detach()` makes a detached tensor without changing it",
            nm, mop[0] ? " (made by " : "", mop, made[0] ? " at " : "", made,
            mop[0] ? ")" : "", nm, nm);
        break;
    case GT_FINDING_RESIZE_REQUIRES_GRAD:
        call_args(code, "resize_(", &x->b[ARGS]);
        gt_strbuf_addf(
            b,
            "%s requires grad and autograd cannot follow a resize: if the number "
            "of elements stays the same, reshape out of place (`%s = "
            "%s.reshape(%s)`); otherwise make a new tensor of the new size (for a "
            "parameter, a new nn.Parameter), or resize a detached copy "
            "(`%s = %s.detach().resize_(%s)`, which has no history)",
            nm, nm, nm, x->b[ARGS].len ? S(x->b[ARGS]) : "...", nm, nm,
            x->b[ARGS].len ? S(x->b[ARGS]) : "...");
        break;
    default:
        return 0;
    }
    return gt__dx_take_suggestion(c, f, b);
}

int gt__dx_suggest_refused(gt__dctx *c, gt_finding *f)
{
    fx x = {.o = {.name = ""}};
    int rc = suggest_in(c, f, &x);
    fx_release(c, &x);
    return rc;
}
