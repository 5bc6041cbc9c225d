/* In-place ops PyTorch refuses for what the written tensor is, not for
 * what autograd saved: its elements share memory (an expand), an input
 * shares its memory, it is an inference tensor, its dtype or shape cannot
 * hold the result, detach_() of a view, resize_() of a tensor that requires
 * grad (diagnose.h, kinds 11 to 17; pymsg.h, the messages).
 *
 * The kernel's checks (overlap, dtype, shape) and the autograd layer's
 * (inference tensors) raise inside an op the recorder saw start, so the op
 * and the tensor it writes are usually in the trace; detach_() and resize_()
 * raise before the dispatcher, and the tensor is then the variable the
 * raising line writes, as the recorder bound it when it recorded the error.
 * Each finding names that tensor, the op that made it (the expand, the op
 * run in inference mode, the factory of an integer tensor) and the fix. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/error.h>

#include "diagnose_int.h"
#include "pysrc.h"

/* The finding kind of a message kind: both lists run in the same order. */
_Static_assert(GT_PYMSG_RESIZE_GRAD - GT_PYMSG_OVERLAP ==
                   GT_FINDING_RESIZE_REQUIRES_GRAD - GT_FINDING_INPLACE_OVERLAP,
               "pymsg.h's refused kinds and diagnose.h's differ");
static int finding_kind(int msg_kind)
{
    return GT_FINDING_INPLACE_OVERLAP + (msg_kind - GT_PYMSG_OVERLAP);
}

int64_t gt__dx_int(gt__dctx *c, const char *sql, int64_t a, int64_t b, const char *b_text,
                   int64_t dflt)
{
    sqlite3_stmt *st = NULL;
    int64_t out = dflt;
    int s = sqlite3_prepare_v2(c->db, sql, -1, &st, NULL);
    if (s == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, a);
        if (b_text)
            sqlite3_bind_text(st, 2, b_text, -1, SQLITE_STATIC);
        else
            sqlite3_bind_int64(st, 2, b);
        if ((s = sqlite3_step(st)) == SQLITE_ROW &&
            sqlite3_column_type(st, 0) != SQLITE_NULL)
            out = sqlite3_column_int64(st, 0);
    }
    gt__dx_lookup_nomem(c, s);
    sqlite3_finalize(st);
    return out;
}

/* 1 if tensor t repeats elements: a stride of 0 on a dimension of more
 * than one element (expand, broadcast_to, expand_as). */
static int64_t repeats_elements(gt__dctx *c, int64_t t)
{
    return gt__dx_int(c,
                      "SELECT EXISTS (SELECT 1 FROM tensors t, json_each(t.strides) s, "
                      "json_each(t.shape) z WHERE t.id = ?1 AND s.key = z.key "
                      "AND s.value = 0 AND z.value > 1)",
                      t, 0, NULL, 0);
}

/* The input of op `op` other than `written` on the same storage: the one
 * the kernel found overlapping the written tensor; or `written` itself
 * given again as another argument (`m[m] = ...`: the mask indexes the
 * tensor it is written into). 0 if none. */
static int64_t overlapping_input(gt__dctx *c, int64_t op, int64_t written)
{
    return gt__dx_int(c,
                      "SELECT a.tensor FROM op_args a JOIN tensors t ON t.id = a.tensor "
                      "JOIN tensors w ON w.id = ?2 WHERE a.op = ?1 AND a.role = 0 "
                      "AND (a.tensor != ?2 OR a.pos > 0) AND t.storage = w.storage "
                      "ORDER BY a.tensor = ?2, a.pos LIMIT 1",
                      op, written, NULL, 0);
}

/* The input of op `op` whose shape is `shape` ("2,3"). 0 if none. */
static int64_t input_of_shape(gt__dctx *c, int64_t op, const char *shape)
{
    return gt__dx_int(
        c,
        "SELECT a.tensor FROM op_args a JOIN tensors t ON t.id = a.tensor "
        "WHERE a.op = ?1 AND a.role = 0 AND "
        "replace(replace(replace(t.shape, '[', ''), ']', ''), ' ', '') = ?2 "
        "ORDER BY a.pos LIMIT 1",
        op, 0, shape, 0);
}

/* The op name of ops.seq `op`, compared with prefix `want`. */
static int op_is(gt__dctx *c, int64_t op, const char *want)
{
    gt__opinfo o = {0};
    gt__dx_load_op(c, op, &o);
    int is = !strncmp(o.name, want, strlen(want));
    gt__dx_op_release(&o);
    return is;
}

/* The tensor a line writes that no recorded op shows: the variable it
 * names, whatever that tensor is. */
int64_t gt__dx_first_op(gt__dctx *c, int64_t t, int64_t before)
{
    return gt__dx_int(c, "SELECT min(op) FROM op_args WHERE tensor = ?1 AND op < ?2", t,
                      before, NULL, 0);
}

int64_t gt__dx_made_at(gt__dctx *c, int64_t t, int64_t before)
{
    int64_t by = gt__dx_view_origin(c, t);
    if (!by) /* torch.tensor(...): lift_fresh gives back its input */
        by = gt__dx_first_op(c, t, before);
    /* A dispatch mode sees the aten::detach it causes itself (a factory
     * with requires_grad=True): the op the user's line ran is the one that
     * made the detach's input, on the same line. */
    if (by && op_is(c, by, "aten::detach") && !op_is(c, by, "aten::detach_"))
        by = gt__dx_int(
            c,
            "SELECT t.created_by FROM op_args a JOIN tensors t ON t.id = a.tensor "
            "JOIN ops d ON d.seq = a.op JOIN ops m ON m.seq = t.created_by "
            "WHERE a.op = ?1 AND a.role = 0 AND m.stack IS d.stack "
            "ORDER BY a.pos LIMIT 1",
            by, 0, NULL, by);
    return by;
}

static int64_t any_tensor(gt__dctx *c, int64_t t)
{
    (void)c;
    return t;
}

static int one_in(gt__dctx *c, int64_t seq, const gt_pymsg *m, int64_t stack,
                  int64_t backward, gt_strbuf *where, gt_strbuf *code, char **target,
                  char **expr)
{
    int64_t frame = 0, op = 0, tensor = 0, other = 0;
    int rc, kind = finding_kind(m->kind);
    gt__dx_stack_loc(c, stack, where, code, &frame);
    const char *line = gt_strbuf_str(code);
    size_t room = strlen(line) + 1;
    if (!(*target = malloc(room)) || !(*expr = malloc(room)))
        return gt__dx_nomem(c);
    gt__py_target(line, *target, room);
    gt__py_written(line, *expr, room);
    if ((rc = gt__dx_write_on_line(c, seq, frame, &op, &tensor)) != 0)
        return rc;
    /* detach_() and resize_() raise before the dispatcher: an op of the
     * line recorded before them is another write */
    if (op &&
        ((kind == GT_FINDING_DETACH_VIEW_INPLACE && !op_is(c, op, "aten::detach_")) ||
         (kind == GT_FINDING_RESIZE_REQUIRES_GRAD && !op_is(c, op, "aten::resize"))))
        op = tensor = 0;
    if (!tensor && (*target)[0] &&
        (rc = gt__dx_named_tensor(c, *target, seq, &tensor)) != 0)
        return rc;
    if (!tensor && (*expr)[0])
        tensor = gt__dx_named_on_line(c, seq, *expr, NULL, any_tensor, NULL);

    gt_finding *f = gt__dx_add_finding(c, kind, backward);
    if (!f)
        return gt__dx_nomem(c);
    if ((*target)[0] && !(f->name = strdup(*target)))
        return gt__dx_nomem(c);
    if ((*expr)[0] && !(f->written = strdup(*expr)))
        return gt__dx_nomem(c);
    f->first_to_fail = 1;
    f->tensor = tensor;
    f->stack = stack;
    f->op = op;
    f->error_seq = seq;
    if (tensor) {
        gt__tinfo ti;
        if ((rc = gt__dx_load_tensor(c, tensor, &ti)) != 0)
            return rc;
        switch (kind) {
        case GT_FINDING_INPLACE_OVERLAP:
            f->matches_error = repeats_elements(c, tensor) ? 1 : -1;
            break;
        case GT_FINDING_INPLACE_INPUT_OVERLAP:
            other = op ? overlapping_input(c, op, tensor) : 0;
            f->matches_error = other ? 1 : -1;
            break;
        case GT_FINDING_INPLACE_DTYPE:
            if (m->out_dtype[0] && ti.found)
                f->matches_error = !strcmp(ti.dtype, m->out_dtype);
            break;
        case GT_FINDING_INPLACE_SHAPE:
            other = op && m->bshape[0] ? input_of_shape(c, op, m->bshape) : 0;
            if (m->bshape[0] && ti.found) /* a 0-d tensor's shape is "" */
                f->matches_error = !strcmp(ti.shape, m->shape);
            break;
        case GT_FINDING_DETACH_VIEW_INPLACE:
            f->matches_error = ti.found && ti.alias_of ? 1 : -1;
            break;
        case GT_FINDING_RESIZE_REQUIRES_GRAD:
            /* requires_grad=True of a factory is set after the op that the
             * trace saw: unknown then, unless the graph made it a leaf */
            f->matches_error =
                ti.found && (ti.requires_grad || gt__dx_leaf_of(c, tensor)) ? 1 : -1;
            break;
        default:
            break;
        }
        gt__dx_tinfo_release(&ti);
        /* where the tensor written (or the input overlapping it) was made */
        f->view_op = gt__dx_made_at(
            c, other && kind == GT_FINDING_INPLACE_INPUT_OVERLAP ? other : tensor, seq);
        if (kind == GT_FINDING_INPLACE_INFERENCE_TENSOR && f->view_op) {
            gt__opinfo o = {0};
            gt__dx_load_op(c, f->view_op, &o);
            f->matches_error = o.name[0] && !o.grad_mode ? 1 : -1;
            gt__dx_op_release(&o);
        }
    }
    f->other = other;
    if ((rc = gt__dx_add_attempt(c, f, op, stack)) != 0)
        return rc;
    return gt__dx_suggest(c, f);
}

static int one(gt__dctx *c, int64_t seq, const gt_pymsg *m, int64_t stack,
               int64_t backward)
{
    gt_strbuf where = GT_STRBUF_INIT, code = GT_STRBUF_INIT;
    char *target = NULL, *expr = NULL;
    int rc = one_in(c, seq, m, stack, backward, &where, &code, &target, &expr);
    if (where.oom || code.oom)
        c->oom = 1;
    gt_strbuf_release(&where);
    gt_strbuf_release(&code);
    free(target);
    free(expr);
    return rc;
}

int gt__dx_refused(gt__dctx *c)
{
    return gt__dx_each_error(c, gt__pymsg_refused, one);
}

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
    gt__dx_out_of_place_line(code, lhs, &x->b[OOP]);
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

int gt__dx_take_suggestion(gt__dctx *c, gt_finding *f, gt_strbuf *b)
{
    if (b->oom)
        return gt__dx_nomem(c);
    free(f->suggestion);
    f->suggestion = gt_strbuf_detach(b);
    return f->suggestion ? 0 : gt__dx_nomem(c);
}

int gt__dx_suggest_refused(gt__dctx *c, gt_finding *f)
{
    fx x = {.o = {.name = ""}};
    int rc = suggest_in(c, f, &x);
    fx_release(c, &x);
    return rc;
}
