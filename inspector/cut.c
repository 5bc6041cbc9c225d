/* backward() of a tensor with no grad_fn ("element 0 of tensors does not
 * require grad and does not have a grad_fn"): where the graph stopped
 * reaching it (diagnose.h, root_without_grad).
 *
 * From the root, the walk goes back through the ops that made each tensor
 * without a graph, nearest first, to the first op that took a tensor with
 * one and gave none: a detach(), an op run with grad mode off (a tensor
 * that requires grad as input is enough there), or an op with no gradient
 * (argmax, a comparison). An op with an integer or bool result is
 * remembered on the way: it cuts any graph. When nothing on the way had a
 * graph, the root comes from tensors that never had one: one made by
 * torch.tensor() after an .item() of a tensor with a graph, or inputs and
 * parameters that did not require grad when the ops used them (frozen: an
 * op with grad mode on gave no grad_fn).
 *
 * "With a graph" is read from what the engine made, not from a tensor's
 * requires_grad as first seen (a parameter frozen later keeps that): a
 * grad_fn node for its output, or an AccumulateGrad node for a leaf. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/error.h>

#include "diagnose_int.h"
#include "pysrc.h"

#define MAX_WALK    20000 /* tensors looked at from one root */
#define MAX_SOURCES 8

/* The first root tensor of backward call ?1 without a grad_fn node. */
static const char sql_roots[] =
    "SELECT tensor FROM backward_roots WHERE backward = ?1 AND node IS NULL "
    "AND tensor IS NOT NULL ORDER BY pos LIMIT 1";
/* The op that made tensor ?1 (a view's own op), else the first op that
 * gave it as an output. */
static const char sql_made[] = "SELECT coalesce(t.created_by, (SELECT min(a.op) FROM "
                               "op_args a WHERE a.tensor = t.id "
                               "AND a.role = 1)) FROM tensors t WHERE t.id = ?1";
/* An op's inputs: tensor, whether it had a graph (a grad_fn node, or an
 * AccumulateGrad node made before the op), whether it was recorded as
 * requiring grad. */
static const char sql_inputs[] =
    "SELECT a.tensor, EXISTS (SELECT 1 FROM node_outputs n WHERE n.tensor = a.tensor) "
    " OR EXISTS (SELECT 1 FROM nodes g WHERE g.variable = a.tensor AND g.seq < ?1), "
    " t.requires_grad FROM op_args a JOIN tensors t ON t.id = a.tensor "
    "WHERE a.op = ?1 AND a.role = 0 ORDER BY a.pos";

/* One op of the walk. */
typedef struct wop {
    int64_t seq, stack;
    int grad_mode;
    gt_strbuf name;
    char dtype[32]; /* its first output's dtype */
} wop;

static int load(gt__dctx *c, int64_t seq, int64_t out, wop *o)
{
    gt__opinfo oi = {0};
    gt__dx_load_op(c, seq, &oi);
    gt_strbuf_reset(&o->name);
    gt_strbuf_adds(&o->name, oi.name);
    o->seq = seq;
    o->stack = oi.stack;
    o->grad_mode = oi.grad_mode;
    gt__dx_op_release(&oi);
    gt__tinfo t;
    o->dtype[0] = 0;
    if (gt__dx_load_tensor(c, out, &t) != 0)
        return -1;
    snprintf(o->dtype, sizeof o->dtype, "%s", t.dtype);
    gt__dx_tinfo_release(&t);
    return o->name.oom ? gt__dx_nomem(c) : 0;
}

/* 1 for a dtype no gradient flows through. */
static int integral(const char *dtype)
{
    return !strncmp(dtype, "int", 3) || !strncmp(dtype, "uint", 4) ||
           !strcmp(dtype, "bool");
}

/* What the walk found. */
typedef struct cut {
    int reason;        /* enum gt_cut_reason */
    int64_t op, input; /* the cutting op and the input with a graph */
    int64_t nodiff;    /* the nearest op with an integral result, 0 none */
    int64_t sources[MAX_SOURCES];
    size_t n_sources;
} cut;

static int walk(gt__dctx *c, int64_t root, int64_t before, cut *k)
{
    sqlite3_stmt *made = NULL, *in = NULL;
    gt_imap seen = {0};
    int64_t *q = NULL;
    size_t qn = 0, qcap = 0, head = 0;
    wop o = {0};
    int rc = 0;
    if (!(made = gt_trace_stmt(c->t, sql_made)) ||
        !(in = gt_trace_stmt(c->t, sql_inputs))) {
        rc = gt_trace_errcode(c->t);
        goto out;
    }
#define PUSH(t)                                                                          \
    do {                                                                                 \
        int64_t v_;                                                                      \
        if (gt__imap_get(&seen, (t), &v_))                                               \
            break;                                                                       \
        if (gt__imap_put(&seen, (t), 1) != 0) {                                          \
            rc = gt__dx_nomem(c);                                                        \
            goto out;                                                                    \
        }                                                                                \
        if (qn == qcap) {                                                                \
            size_t nc_ = qcap ? qcap * 2 : 64;                                           \
            int64_t *nq_ = realloc(q, nc_ * sizeof *q);                                  \
            if (!nq_) {                                                                  \
                rc = gt__dx_nomem(c);                                                    \
                goto out;                                                                \
            }                                                                            \
            q = nq_;                                                                     \
            qcap = nc_;                                                                  \
        }                                                                                \
        q[qn++] = (t);                                                                   \
    } while (0)
    PUSH(root);
    while (head < qn && head < MAX_WALK && !k->reason) {
        int64_t t = q[head++], by = 0;
        sqlite3_bind_int64(made, 1, t);
        int s = sqlite3_step(made);
        if (s == SQLITE_ROW)
            by = sqlite3_column_int64(made, 0);
        gt__dx_lookup_nomem(c, s);
        sqlite3_reset(made);
        if (!by || by >= before) {
            if (k->n_sources < MAX_SOURCES)
                k->sources[k->n_sources++] = t;
            continue;
        }
        if ((rc = load(c, by, t, &o)) != 0)
            goto out;
        const char *name = gt_strbuf_str(&o.name);
        int detach = !strncmp(name, "aten::detach", 12);
        int self_detach = detach && o.grad_mode; /* a dispatch mode's own, below */
        sqlite3_bind_int64(in, 1, by);
        int64_t inputs = 0;
        while ((s = sqlite3_step(in)) == SQLITE_ROW) {
            int64_t i = sqlite3_column_int64(in, 0);
            int graph = sqlite3_column_int(in, 1), wants = sqlite3_column_int(in, 2);
            if (i == t)
                continue; /* torch.tensor's lift_fresh gives back its input */
            inputs++;
            if (self_detach && !graph) {
                /* detach() of a tensor without a graph cuts nothing (a
                 * dispatch mode's own after a factory): t is what the
                 * user holds and names, the source */
                if (k->n_sources < MAX_SOURCES)
                    k->sources[k->n_sources++] = t;
                continue;
            }
            if (!k->reason && (graph || (!o.grad_mode && wants))) {
                k->reason = !o.grad_mode ? GT_CUT_NO_GRAD
                            : detach     ? GT_CUT_DETACH
                                         : GT_CUT_NO_GRADIENT;
                k->op = by;
                k->input = i;
            }
            if (k->reason)
                continue;
            if (wants) { /* a parameter, frozen since: a source, not walked */
                int64_t v;
                if (!gt__imap_get(&seen, i, &v) && k->n_sources < MAX_SOURCES) {
                    if (gt__imap_put(&seen, i, 1) != 0) {
                        rc = gt__dx_nomem(c);
                        goto out;
                    }
                    k->sources[k->n_sources++] = i;
                }
            } else {
                PUSH(i);
            }
        }
        gt__dx_lookup_nomem(c, s);
        sqlite3_reset(in);
        if (!inputs && !self_detach && k->n_sources < MAX_SOURCES)
            k->sources[k->n_sources++] = t; /* a factory's output */
        if (!k->reason && !k->nodiff && inputs && integral(o.dtype))
            k->nodiff = by;
    }
#undef PUSH
out:
    sqlite3_reset(made);
    sqlite3_reset(in);
    gt__imap_clear(&seen);
    gt_strbuf_release(&o.name);
    free(q);
    return rc;
}

/* The latest op before event `before` that took a tensor with a graph out
 * of it into Python: an .item() (aten::_local_scalar_dense), or a
 * detach() (before .numpy() or .tolist(), which are no ops). Its ops.seq,
 * 0 if none. */
static int64_t item_before(gt__dctx *c, int64_t before)
{
    return gt__dx_int(
        c,
        "SELECT o.seq FROM ops o JOIN strings n ON n.id = o.name "
        "JOIN op_args a ON a.op = o.seq AND a.role = 0 "
        "WHERE n.text IN ('aten::_local_scalar_dense', 'aten::detach') AND o.seq < ?1 "
        "AND o.seq > ?1 - "
        "1000000 "
        "AND EXISTS (SELECT 1 FROM node_outputs g WHERE g.tensor = a.tensor) "
        "ORDER BY o.seq DESC LIMIT 1",
        before, 0, NULL, 0);
}

/* The tensor .item() op `item` read. */
static int64_t item_input(gt__dctx *c, int64_t item)
{
    return gt__dx_int(c,
                      "SELECT tensor FROM op_args WHERE op = ?1 AND role = 0 "
                      "ORDER BY pos LIMIT 1",
                      item, 0, NULL, 0);
}

/* The tensor with a graph that source t aliases with a version counter of
 * its own, no op making it: t is its `.data`. 0 if none. The recorder
 * takes a tensor first met on a known storage for an alias of the first
 * tensor there, and a freed storage's address can come back: a number made
 * into a tensor (torch.tensor, an op's output) or a wrapped Python scalar
 * (0-d) on it is no `.data`, nor is a tensor of another geometry. */
static int64_t data_of(gt__dctx *c, int64_t t)
{
    return gt__dx_int(
        c,
        "SELECT g.id FROM tensors s JOIN tensors g ON g.id = s.alias_of "
        "WHERE s.id = ?1 AND s.created_by IS NULL AND s.version_counter != "
        "g.version_counter "
        "AND s.shape != '[]' AND s.shape = g.shape AND s.strides = g.strides "
        "AND NOT EXISTS (SELECT 1 FROM op_args o WHERE o.tensor = s.id AND o.role = 1) "
        "AND EXISTS (SELECT 1 FROM node_outputs n WHERE n.tensor = g.id) "
        "ORDER BY g.id DESC LIMIT 1",
        t, 0, NULL, 0);
}

static int one_root(gt__dctx *c, int64_t backward, int64_t err_seq, int64_t err_stack,
                    int64_t root)
{
    cut k = {0};
    int rc = walk(c, root, err_seq, &k);
    if (rc)
        return rc;
    gt_finding *f = gt__dx_add_finding(c, GT_FINDING_ROOT_WITHOUT_GRAD, backward);
    if (!f)
        return gt__dx_nomem(c);
    f->first_to_fail = 1;
    f->tensor = root;
    f->error_seq = err_seq;
    f->stack = err_stack;
    f->cut = k.reason;
    f->view_op = k.op;
    f->other = k.input;
    if (!k.reason && k.nodiff) {
        f->cut = GT_CUT_NO_GRADIENT;
        f->view_op = k.nodiff;
    }
    for (size_t i = 0; i < k.n_sources && !f->cut; i++) {
        int64_t g = data_of(c, k.sources[i]);
        if (g) {
            f->cut = GT_CUT_DATA;
            f->view_op = gt__dx_first_op(c, k.sources[i], INT64_MAX);
            f->other = g;
        }
    }
    if (!f->cut) {
        /* a tensor made from Python numbers after an .item() of one with
         * a graph: the first such source */
        for (size_t i = 0; i < k.n_sources && !f->cut; i++) {
            int64_t by = gt__dx_first_op(c, k.sources[i], INT64_MAX);
            int64_t item = by ? item_before(c, by) : 0;
            if (item) {
                f->cut = GT_CUT_ITEM;
                f->view_op = item;
                f->op = by;
                f->other = item_input(c, item);
            }
        }
    }
    if (!f->cut)
        f->cut = GT_CUT_NO_SOURCE;
    if (f->cut == GT_CUT_DETACH) {
        /* a dispatch mode records `.data` as aten::detach: the line says */
        gt_strbuf where = GT_STRBUF_INIT, code = GT_STRBUF_INIT, rest = GT_STRBUF_INIT;
        gt__opinfo o = {0};
        gt__dx_load_op(c, f->view_op, &o);
        gt__dx_raising_code(c, o.stack, &where, &code);
        const char *how = gt__py_without_alias(gt_strbuf_str(&code), &rest);
        if (how && !strcmp(how, ".data"))
            f->cut = GT_CUT_DATA;
        c->oom |= where.oom || code.oom || rest.oom;
        gt__dx_op_release(&o);
        gt_strbuf_release(&where);
        gt_strbuf_release(&code);
        gt_strbuf_release(&rest);
    }
    if (k.n_sources) {
        if (!(f->candidates = malloc(k.n_sources * sizeof *f->candidates)))
            return gt__dx_nomem(c);
        memcpy(f->candidates, k.sources, k.n_sources * sizeof *f->candidates);
        f->n_candidates = k.n_sources;
    }
    return 0;
}

/* The input of autograd.grad call b (backward_inputs.pos `index`, or with
 * index < 0 the first) that the outputs' graph does not reach (no node of
 * it accumulates into it or has it as output): its tensors.id, 0 if none. */
static int64_t unreached_input(gt__dctx *c, int64_t b, int64_t index)
{
    return gt__dx_int(
        c,
        "WITH RECURSIVE g(id) AS (SELECT node FROM backward_roots WHERE backward = ?1 "
        " AND node IS NOT NULL UNION SELECT e.next FROM edges e JOIN g ON e.node = g.id "
        " WHERE e.next IS NOT NULL) "
        "SELECT i.tensor FROM backward_inputs i WHERE i.backward = ?1 "
        "AND (?2 < 0 OR i.pos = ?2) "
        "AND NOT EXISTS (SELECT 1 FROM g JOIN nodes n ON n.id = g.id "
        " WHERE n.variable = i.tensor) "
        "AND NOT EXISTS (SELECT 1 FROM g JOIN node_outputs o ON o.node = g.id "
        " WHERE o.tensor = i.tensor) ORDER BY i.pos LIMIT 1",
        b, index, NULL, 0);
}

/* An input of autograd.grad call b that does not require grad: no node
 * has it as output or accumulates into it, nor was it recorded requiring
 * grad. 0 if none. */
static int64_t input_without_grad(gt__dctx *c, int64_t b)
{
    return gt__dx_int(
        c,
        "SELECT i.tensor FROM backward_inputs i JOIN tensors t ON t.id = i.tensor "
        "WHERE i.backward = ?1 AND t.requires_grad = 0 "
        "AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.variable = i.tensor) "
        "AND NOT EXISTS (SELECT 1 FROM node_outputs o WHERE o.tensor = i.tensor) "
        "ORDER BY i.pos LIMIT 1",
        b, 0, NULL, 0);
}

/* A finding for input `t` of autograd.grad call b that its outputs' graph
 * does not reach (no_req: it does not require grad): why, from the first
 * op that read it before the call. */
static int one_input(gt__dctx *c, int64_t b, int64_t err_seq, int64_t err_stack,
                     int64_t t, int no_req)
{
    gt_finding *f = gt__dx_add_finding(c, GT_FINDING_GRAD_INPUT_UNREACHABLE, b);
    if (!f)
        return gt__dx_nomem(c);
    f->first_to_fail = 1;
    f->tensor = t;
    f->error_seq = err_seq;
    f->stack = err_stack;
    /* where it was made, and the first op that read it (not one writing it:
     * an initializer's uniform_) */
    f->op = gt__dx_made_at(c, t, err_seq); /* a parameter: its init */
    int64_t reader =
        gt__dx_int(c,
                   "SELECT min(a.op) FROM op_args a WHERE a.tensor = ?1 "
                   "AND a.role = 0 AND a.op < ?2 AND NOT EXISTS (SELECT 1 FROM "
                   "op_args w WHERE w.op = a.op AND w.role = 2 AND w.tensor = ?1)",
                   t, err_seq, NULL, 0);
    f->view_op = reader;
    if (no_req) {
        f->cut = GT_CUT_INPUT_NO_GRAD;
    } else if (!reader) {
        f->cut = GT_CUT_UNUSED;
    } else {
        gt__opinfo o = {0};
        gt__dx_load_op(c, reader, &o);
        gt__tinfo ti;
        int late = gt__dx_load_tensor(c, t, &ti) == 0 && ti.found && !ti.requires_grad;
        gt__dx_tinfo_release(&ti);
        f->cut = late                                   ? GT_CUT_LATE
                 : !o.grad_mode                         ? GT_CUT_NO_GRAD
                 : !strncmp(o.name, "aten::detach", 12) ? GT_CUT_DETACH
                                                        : GT_CUT_OFF_PATH;
        gt__dx_op_release(&o);
    }
    return 0;
}

static int one(gt__dctx *c, int64_t seq, const gt_pymsg *m, int64_t stack,
               int64_t backward)
{
    if (!backward || (c->only && backward != c->only))
        return 0;
    if (m->kind == GT_PYMSG_GRAD_UNUSED || m->kind == GT_PYMSG_GRAD_NO_REQ) {
        int no_req = m->kind == GT_PYMSG_GRAD_NO_REQ;
        int64_t t = no_req ? input_without_grad(c, backward)
                           : unreached_input(c, backward, m->output_nr);
        if (!t && !no_req && m->output_nr >= 0) /* an index the trace numbers otherwise */
            t = unreached_input(c, backward, -1);
        return t ? one_input(c, backward, seq, stack, t, no_req) : 0;
    }
    /* PyTorch names the first root without one ("element 0"): that one */
    int64_t root = gt__dx_int(c, sql_roots, backward, 0, NULL, 0);
    return root ? one_root(c, backward, seq, stack, root) : 0;
}

static int is_no_grad_fn(int kind)
{
    return kind == GT_PYMSG_NO_GRAD_FN || kind == GT_PYMSG_GRAD_UNUSED ||
           kind == GT_PYMSG_GRAD_NO_REQ;
}

int gt__dx_cut(gt__dctx *c)
{
    return gt__dx_each_error(c, is_no_grad_fn, one);
}
