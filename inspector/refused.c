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

static int64_t any_tensor(gt__dctx *c, int64_t t)
{
    (void)c;
    return t;
}

/* How finding f (of kind f->kind, tensor f->tensor written by op `op` at
 * error `seq`) compares with PyTorch's message m: f->matches_error, where
 * the tensor (or the input overlapping it) was made (f->view_op) and that
 * input (f->other). Returns 0 or a negative GT_E* code. */
static int match_message(gt__dctx *c, gt_finding *f, const gt_pymsg *m, int64_t op,
                         int64_t seq)
{
    int64_t tensor = f->tensor, other = 0;
    int rc, kind = f->kind;
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
    f->other = other;
    return 0;
}

static int one_in(gt__dctx *c, int64_t seq, const gt_pymsg *m, int64_t stack,
                  int64_t backward, gt_strbuf *where, gt_strbuf *code, char **target,
                  char **expr)
{
    int64_t frame = 0, op = 0, tensor = 0;
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
    if (op && ((kind == GT_FINDING_DETACH_VIEW_INPLACE &&
                !gt__dx_op_is(c, op, "aten::detach_")) ||
               (kind == GT_FINDING_RESIZE_REQUIRES_GRAD &&
                !gt__dx_op_is(c, op, "aten::resize"))))
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
    if (tensor && (rc = match_message(c, f, m, op, seq)) != 0)
        return rc;
    if ((rc = gt__dx_add_attempt(c, f, op, stack)) != 0)
        return rc;
    return 0;
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
