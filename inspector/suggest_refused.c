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

/* What every refused kind's fix reads: the finding, the names and lines
 * gathered for it, and the text being written. */
typedef struct rfix {
    gt__dctx *c;
    gt_finding *f;
    fx *x;
    gt_strbuf *b;           /* the fix */
    const char *nm;         /* the tensor written, as named */
    const char *code, *oop; /* the raising line, its out-of-place form */
    const char *made, *mop; /* where the tensor was made, by which op */
} rfix;

static int fix_overlap(rfix *r)
{
    const char *nm = r->nm, *made = r->made, *mop = r->mop;
    gt_strbuf_addf(r->b,
                   "%s repeats its elements in memory (%s%s%s returns a view whose "
                   "elements share memory), so an in-place write cannot give each its "
                   "own value: ",
                   nm, mop[0] ? mop : "an expand", made[0] ? " at " : "", made);
    if (r->oop[0])
        gt_strbuf_addf(r->b, "write out of place, `%s`, or ", r->oop);
    gt_strbuf_addf(r->b, "give it memory of its own first: `%s = %s.clone()`%s%s", nm, nm,
                   made[0] ? " after " : " before this line", made);
    if (made[0] && mop[0] && strstr(mop, "expand")) /* or at the expand itself */
        gt_strbuf_adds(r->b, " (or add .clone() after the expand on that line)");
    return 0;
}

static int fix_input_overlap(rfix *r)
{
    gt_strbuf *other = &r->x->b[OTHER];
    gt_strbuf_addf(r->b,
                   "an input of `%s` reads the memory it writes%s%s%s%s%s: ", r->code,
                   other->len ? " (" : "", gt_strbuf_str(other),
                   other->len && r->made[0] ? ", made at " : "",
                   other->len ? r->made : "", other->len ? ")" : "");
    if (other->len)
        gt_strbuf_addf(r->b, "pass a copy, `%s.clone()`, in its place",
                       gt_strbuf_str(other));
    else
        gt_strbuf_adds(r->b, "pass a copy of that input (`.clone()`) in its place");
    if (r->oop[0])
        gt_strbuf_addf(r->b, ", or write out of place, `%s`", r->oop);
    return 0;
}

static int fix_inference(rfix *r)
{
    const char *nm = r->nm, *made = r->made;
    gt_strbuf_addf(r->b,
                   "%s was made in inference mode%s%s, and a tensor made there can "
                   "never be changed in place outside it: change a normal copy, "
                   "`%s = %s.clone()` outside torch.inference_mode() before this line, "
                   "or make it under torch.no_grad() instead of "
                   "torch.inference_mode()",
                   nm, made[0] ? " at " : "", made, nm, nm);
    return 0;
}

/* The message of error `seq`, parsed into *m; GT_ENOMEM when out of memory
 * (a message that cannot be read parses as none). */
static int error_message(gt__dctx *c, int64_t seq, gt_pymsg *m)
{
    gt_strbuf msg = GT_STRBUF_INIT;
    int found = gt__dx_text(c, "SELECT message FROM errors WHERE seq = ?1", seq, &msg);
    int rc =
        gt__pymsg_parse(found ? gt_strbuf_str(&msg) : NULL, m) != 0 ? gt__dx_nomem(c) : 0;
    gt_strbuf_release(&msg);
    return rc;
}

static int fix_dtype(rfix *r)
{
    gt_pymsg m;
    const char *nm = r->nm, *made = r->made;
    int rc = error_message(r->c, r->f->error_seq, &m);
    if (rc)
        return rc;
    const char *dt = r->x->t.found && r->x->t.dtype[0] ? r->x->t.dtype : m.out_dtype;
    const char *rt = m.result_dtype[0] ? m.result_dtype : "another dtype";
    gt_strbuf_addf(r->b, "%s is %s%s%s%s, and `%s` gives %s, which %s cannot hold: ", nm,
                   dt[0] ? dt : "of another dtype", made[0] ? " (made at " : "", made,
                   made[0] ? ")" : "", r->code, rt, dt[0] ? dt : "it");
    if (r->oop[0])
        gt_strbuf_addf(r->b, "write out of place, `%s` (a new %s tensor), or ", r->oop,
                       rt);
    gt_strbuf_addf(r->b, "make %s %s where it is made (`.to(torch.%s)`)", nm, rt, rt);
    gt__pymsg_release(&m);
    return 0;
}

static int fix_shape(rfix *r)
{
    gt_strbuf *other = &r->x->b[OTHER];
    const char *shape = r->x->t.found ? r->x->t.shape : "?";
    gt_strbuf_addf(r->b, "%s has shape [%s], and `%s` broadcasts to a larger shape%s%s%s",
                   r->nm, shape, r->code, other->len ? " (that of " : "",
                   gt_strbuf_str(other), other->len ? ")" : "");
    gt_strbuf_adds(r->b, ", which does not fit in it: ");
    if (r->oop[0])
        gt_strbuf_addf(r->b,
                       "write out of place, `%s` (a new tensor of the larger shape), "
                       "or ",
                       r->oop);
    gt_strbuf_addf(r->b,
                   "bring %s to shape [%s] first (index or reduce it, e.g. "
                   ".sum(0) or .mean(0) over the extra dimension)",
                   other->len ? gt_strbuf_str(other) : "the other operand", shape);
    return 0;
}

static int fix_detach_view(rfix *r)
{
    const char *nm = r->nm, *made = r->made, *mop = r->mop;
    gt_strbuf_addf(r->b,
                   "%s is a view%s%s%s%s%s, and detach_() cannot change a view in place: "
                   "`%s = %s.detach()` makes a detached tensor without changing it",
                   nm, mop[0] ? " (made by " : "", mop, made[0] ? " at " : "", made,
                   mop[0] ? ")" : "", nm, nm);
    return 0;
}

static int fix_resize(rfix *r)
{
    const char *nm = r->nm;
    gt_strbuf *args = &r->x->b[ARGS];
    call_args(r->code, "resize_(", args);
    const char *a = args->len ? gt_strbuf_str(args) : "...";
    gt_strbuf_addf(r->b,
                   "%s requires grad and autograd cannot follow a resize: if the number "
                   "of elements stays the same, reshape out of place (`%s = "
                   "%s.reshape(%s)`); otherwise make a new tensor of the new size (for a "
                   "parameter, a new nn.Parameter), or resize a detached copy "
                   "(`%s = %s.detach().resize_(%s)`, which has no history)",
                   nm, nm, nm, a, nm, nm, a);
    return 0;
}

/* The fix of each refused kind, in the kinds' order (finding.h). */
static int (*const fixes[])(rfix *) = {
    fix_overlap, fix_input_overlap, fix_inference, fix_dtype,
    fix_shape,   fix_detach_view,   fix_resize,
};
_Static_assert(sizeof fixes / sizeof fixes[0] ==
                   GT_FINDING_RESIZE_REQUIRES_GRAD - GT_FINDING_INPLACE_OVERLAP + 1,
               "a fix for every refused kind");

static int suggest_in(gt__dctx *c, gt_finding *f, fx *x)
{
    if (f->kind < GT_FINDING_INPLACE_OVERLAP || f->kind > GT_FINDING_RESIZE_REQUIRES_GRAD)
        return 0;
    if (f->name)
        gt_strbuf_adds(&x->b[NAME], f->name);
    else if (f->tensor)
        gt__dx_first_name(c, f->tensor, &x->b[NAME]);
    if (f->other)
        gt__dx_first_name(c, f->other, &x->b[OTHER]);
    gt__dx_raising_code(c, f->stack, &x->b[WHERE], &x->b[CODE]);
    rfix r = {.c = c, .f = f, .x = x, .b = &x->b[OUT]};
    r.nm = x->b[NAME].len ? S(x->b[NAME]) : "the tensor";
    r.code = S(x->b[CODE]);
    /* the expression written, for lines that write through a subscript */
    const char *lhs = f->written && f->written[0] ? f->written : r.nm;
    gt__py_out_of_place_line(r.code, lhs, &x->b[OOP]);
    r.oop = S(x->b[OOP]);
    gt__dx_load_op(c, f->view_op, &x->o);
    gt__dx_stack_loc(c, x->o.stack, &x->b[MWHERE], NULL, NULL);
    r.made = S(x->b[MWHERE]);
    r.mop = x->o.name;
    int rc = f->tensor ? gt__dx_load_tensor(c, f->tensor, &x->t) : 0;
    if (!rc)
        rc = fixes[f->kind - GT_FINDING_INPLACE_OVERLAP](&r);
    return rc ? rc : gt__dx_take_suggestion(c, f, r.b);
}

int gt__dx_suggest_refused(gt__dctx *c, gt_finding *f)
{
    fx x = {.o = {.name = ""}};
    int rc = suggest_in(c, f, &x);
    fx_release(c, &x);
    return rc;
}
