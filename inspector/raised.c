/* Errors PyTorch raises at the in-place op itself (a leaf, or a view it
 * forbids changing), and errors of the in-place family nothing else in the
 * trace explains; see diagnose_int.h.
 *
 * PyTorch raises these in its autograd layer, before the op reaches the
 * dispatcher where the recorder sits, so the op itself is usually not in
 * the trace: what is there is the error, its stack (the raising line), the
 * variables the user's frame held at that moment (names at the error's
 * seq) and the recorded ops that made those tensors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include "diagnose_int.h"
#include "pysrc.h"

/* written: the expression the line changes ("w[:, pos]" of
 * "w[:, pos] -= e"), "" if none; its variables are looked at before the
 * rest of the line's (e may be a view of another leaf). */
static int find_leaf(gt__dctx *c, int64_t err_seq, int64_t frame, const char *code,
                     const char *written, int64_t *leaf, int64_t *op)
{
    int64_t wop, wt;
    *leaf = 0;
    *op = 0;
    /* The op itself, if it was recorded: the last op of the same user line
     * before the error, with a mutated argument. */
    int rc = gt__dx_write_on_line(c, err_seq, frame, &wop, &wt);
    if (rc)
        return rc;
    int64_t l = wt ? gt__dx_leaf_of(c, wt) : 0;
    if (l) {
        *leaf = l;
        *op = wop;
        return 0;
    }
    /* Otherwise the latest variable named in the written expression, then
     * on the line, that is (a view of) a leaf requiring grad. */
    if (written && written[0])
        *leaf = gt__dx_named_on_line(c, err_seq, written, NULL, gt__dx_leaf_of, NULL);
    if (!*leaf && code && code[0])
        *leaf = gt__dx_named_on_line(c, err_seq, code, NULL, gt__dx_leaf_of, NULL);
    return 0;
}

/* The tensor last assigned to `name` before event `before`: the output of
 * the latest op whose user line assigns it ("name = ..."). 0 if none. */
static int64_t assigned_tensor(gt__dctx *c, const char *name, int64_t before)
{
    int64_t t = 0;
    int s;
    sqlite3_stmt *st =
        gt__dx_stmt(c, "SELECT o.seq, c.text, (SELECT tensor FROM op_args a"
                       " WHERE a.op = o.seq AND a.role = 1 ORDER BY pos"
                       " LIMIT 1) FROM ops o JOIN stacks s ON s.id = o.stack"
                       " JOIN frames f ON f.id = " GT_USER_FRAME(
                           "s") " JOIN strings c ON c.id = f.code"
                                " WHERE o.seq < ?1 ORDER BY o.seq DESC LIMIT 200000");
    if (!st)
        return 0;
    sqlite3_bind_int64(st, 1, before);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *code = gt_column_text(st, 1, &c->oom);
        if (!code || sqlite3_column_type(st, 2) == SQLITE_NULL)
            continue;
        if (gt__py_assigns(code, name)) {
            t = sqlite3_column_int64(st, 2);
            break;
        }
    }
    gt__dx_done(c, st, s);
    return t;
}

/* "SplitWithSizes" -> "aten::split_with_sizes": the aten op of a backward
 * node's forward function, as PyTorch 2.13 prints it ("Output 1 of Split");
 * older releases append "Backward0", dropped here. Written to out
 * (emptied first); out of memory sets c->oom and leaves out "". */
static void aten_op_name(gt__dctx *c, const char *fn, gt_strbuf *out)
{
    gt_strbuf_reset(out);
    gt_strbuf_adds(out, "aten::");
    for (const char *p = fn; *p; p++) {
        if (!strncmp(p, "Backward", 8) && (p[8] == 0 || (p[8] >= '0' && p[8] <= '9')))
            break;
        if (*p >= 'A' && *p <= 'Z') {
            if (p != fn)
                gt_strbuf_add(out, "_", 1);
            char lower = (char)(*p - 'A' + 'a');
            gt_strbuf_add(out, &lower, 1);
        } else {
            gt_strbuf_add(out, p, 1);
        }
    }
    if (out->oom)
        c->oom = 1;
}

/* The view op named by the message ("Output N of Split"): its output N
 * made by the latest op "aten::split..." before `seq`; 0 when none. */
static int view_by_message(gt__dctx *c, const gt_pymsg *m, int64_t seq, int64_t *tensor)
{
    gt_strbuf pat = GT_STRBUF_INIT;
    sqlite3_stmt *st = NULL;
    int rc = 0, s;
    *tensor = 0;
    if (!m->grad_fn[0])
        return 0;
    aten_op_name(c, m->grad_fn, &pat);
    if (pat.oom)
        return gt__dx_nomem(c);
    if (!(st = gt_trace_stmt(
              c->t, "SELECT a.tensor FROM ops o JOIN strings s ON s.id = o.name "
                    "JOIN op_args a ON a.op = o.seq AND a.role = 1 AND a.pos = ?3 "
                    "WHERE o.seq < ?2 AND o.seq > ?2 - 100000 AND (s.text = ?1 OR "
                    "s.text LIKE ?1 || '.%') ORDER BY o.seq DESC LIMIT 1"))) {
        gt_strbuf_release(&pat);
        return gt_trace_errcode(c->t);
    }
    sqlite3_bind_text(st, 1, gt_strbuf_str(&pat), -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, seq);
    sqlite3_bind_int64(st, 3, m->output_nr);
    if ((s = sqlite3_step(st)) == SQLITE_ROW)
        *tensor = sqlite3_column_int64(st, 0);
    else if (s != SQLITE_DONE)
        rc = gt__dx_sql_fail(c);
    sqlite3_reset(st);
    gt_strbuf_release(&pat);
    return rc;
}

/* The view of leaf `leaf` the raising line wrote through, when the line
 * named no variable for it (`x[:, 1].mul_(2)`): the latest output of an op
 * of the same user frame, before the error, that is a view of the leaf. */
static int64_t view_on_line(gt__dctx *c, int64_t err_seq, int64_t frame, int64_t leaf)
{
    int64_t out = 0;
    sqlite3_stmt *st =
        gt__dx_stmt(c, "SELECT a.tensor FROM ops o JOIN op_args a ON a.op = o.seq"
                       " AND a.role = 1 JOIN stacks s ON s.id = o.stack"
                       " WHERE o.seq < ?1 AND o.seq > ?1 - 10000"
                       " AND " GT_USER_FRAME("s") " = ?2"
                                                  " ORDER BY o.seq DESC, a.pos LIMIT 8");
    int s = SQLITE_OK;
    if (st) {
        sqlite3_bind_int64(st, 1, err_seq);
        sqlite3_bind_int64(st, 2, frame);
        while (!out && (s = sqlite3_step(st)) == SQLITE_ROW) {
            int64_t t = sqlite3_column_int64(st, 0);
            if (t != leaf && gt__dx_leaf_of(c, t) == leaf)
                out = t;
        }
    }
    gt__dx_done(c, st, s);
    return out;
}

static int finding_kind(int msg_kind)
{
    switch (msg_kind) {
    case GT_PYMSG_VIEW_MULTI:
        return GT_FINDING_VIEW_MULTI_OUTPUT_INPLACE;
    case GT_PYMSG_VIEW_NO_GRAD:
        return GT_FINDING_VIEW_NO_GRAD_INPLACE;
    case GT_PYMSG_VIEW_INFERENCE:
        return GT_FINDING_VIEW_INFERENCE_INPLACE;
    case GT_PYMSG_VIEW_CUSTOM:
        return GT_FINDING_VIEW_CUSTOM_FUNCTION_INPLACE;
    default:
        return GT_FINDING_LEAF_INPLACE;
    }
}

/* A leaf error raised inside backward call `backward` by a reentrant
 * checkpoint's recomputation (its inputs are detached leaves there): the
 * write inside the checkpointed function that changed one of the call's
 * inputs when the forward ran it. Sets *node to the checkpoint's node and
 * *op, *tensor, *stack to that write; all 0 if there is none. */
static void recomputed_write(gt__dctx *c, int64_t backward, int64_t *node, int64_t *op,
                             int64_t *tensor, int64_t *stack)
{
    *node = *op = *tensor = *stack = 0;
    sqlite3_stmt *st = gt__dx_stmt(
        c, "WITH RECURSIVE g(id) AS (SELECT node FROM backward_roots WHERE backward = ?1"
           " UNION SELECT e.next FROM edges e JOIN g ON e.node = g.id"
           " WHERE e.next IS NOT NULL) "
           "SELECT n.id, a.op, a.tensor, o.stack FROM g JOIN nodes n ON n.id = g.id"
           " JOIN ops k ON k.seq = n.op JOIN strings kn ON kn.id = k.name"
           " JOIN op_args i ON i.op = k.seq AND i.role = 0"
           " JOIN op_args a ON a.tensor = i.tensor AND a.role = 2 AND a.op > k.seq"
           "  AND a.op <= n.seq"
           " JOIN ops o ON o.seq = a.op "
           "WHERE kn.text LIKE '%CheckpointFunction.apply' ORDER BY a.op LIMIT 1");
    int s = SQLITE_OK;
    if (st) {
        sqlite3_bind_int64(st, 1, backward);
        if ((s = sqlite3_step(st)) == SQLITE_ROW) {
            *node = sqlite3_column_int64(st, 0);
            *op = sqlite3_column_int64(st, 1);
            *tensor = sqlite3_column_int64(st, 2);
            *stack = sqlite3_column_int64(st, 3);
        }
    }
    gt__dx_done(c, st, s);
}

/* What one_raised reads from the raising line, on the heap: a line and
 * the names in it are as long as the user wrote them. */
typedef struct raising {
    gt_strbuf where, code, want;
    char *target, *expr; /* strlen(code) + 1 bytes each */
} raising;

static void raising_release(raising *l)
{
    gt_strbuf_release(&l->where);
    gt_strbuf_release(&l->code);
    gt_strbuf_release(&l->want);
    free(l->target);
    free(l->expr);
}

static int one_raised_in(gt__dctx *c, int64_t seq, const gt_pymsg *m, int64_t stack,
                         int64_t backward, raising *l)
{
    int64_t frame, tensor = 0, op = 0, origin = 0;
    int rc;
    int kind = finding_kind(m->kind);
    int64_t rnode = 0, rtensor = 0, rop = 0, rstack = 0;
    if (kind == GT_FINDING_LEAF_INPLACE && backward)
        recomputed_write(c, backward, &rnode, &rop, &rtensor, &rstack);
    if (rstack)
        stack = rstack; /* the recomputation raised at the same line */
    gt__dx_stack_loc(c, stack, &l->where, &l->code, &frame);
    const char *code = gt_strbuf_str(&l->code);
    /* what pysrc copies out of the line fits in the line's own length */
    size_t room = strlen(code) + 1;
    if (!(l->target = malloc(room)) || !(l->expr = malloc(room)))
        return gt__dx_nomem(c);
    char *target = l->target;
    gt__py_target(code, target, room);
    gt__py_written(code, l->expr, room);
    if (rnode) {
        tensor = rtensor;
        op = rop;
    } else if (kind == GT_FINDING_LEAF_INPLACE) {
        if ((rc = find_leaf(c, seq, frame, code, l->expr, &tensor, &op)) != 0)
            return rc;
        if (!tensor && target[0])
            tensor = assigned_tensor(c, target, seq);
        if (m->kind == GT_PYMSG_VIEW_OF_LEAF && target[0]) {
            /* A view of the leaf: where that view was made. */
            int64_t view = 0, leaf;
            if ((rc = gt__dx_named_tensor(c, target, seq, &view)) != 0)
                return rc;
            if (!view)
                view = tensor;
            if (view && (leaf = gt__dx_leaf_of(c, view)) != 0 && leaf != view) {
                origin = gt__dx_view_origin(c, view);
                tensor = leaf;
            }
        }
        if (m->kind == GT_PYMSG_VIEW_OF_LEAF && !origin && tensor && frame) {
            int64_t view = view_on_line(c, seq, frame, gt__dx_leaf_of(c, tensor));
            if (view) {
                origin = gt__dx_view_origin(c, view);
                tensor = gt__dx_leaf_of(c, view);
            }
        }
    } else {
        if (target[0] && (rc = gt__dx_named_tensor(c, target, seq, &tensor)) != 0)
            return rc;
        if (!tensor && (rc = view_by_message(c, m, seq, &tensor)) != 0)
            return rc;
        origin = tensor ? gt__dx_view_origin(c, tensor) : 0;
    }
    gt_finding *f = gt__dx_add_finding(c, kind, backward);
    if (!f)
        return gt__dx_nomem(c);
    if (target[0] && !(f->name = strdup(target)))
        return gt__dx_nomem(c);
    if (l->expr[0] && !(f->written = strdup(l->expr)))
        return gt__dx_nomem(c);
    f->first_to_fail = 1;
    f->tensor = tensor;
    f->stack = stack;
    f->op = op;
    f->node = rnode; /* a reentrant checkpoint's recomputation raised it */
    f->error_seq = seq;
    f->view_op = origin;
    if (kind != GT_FINDING_LEAF_INPLACE && origin && m->grad_fn[0]) {
        /* The message names the function that made the view: does the
         * recorded origin agree? (Custom Functions run no aten op of their
         * name: not compared.) */
        gt__opinfo o = {0};
        aten_op_name(c, m->grad_fn, &l->want);
        const char *want = gt_strbuf_str(&l->want);
        gt__dx_load_op(c, origin, &o);
        size_t n = strlen(want);
        if (kind != GT_FINDING_VIEW_CUSTOM_FUNCTION_INPLACE)
            f->matches_error =
                !strncmp(o.name, want, n) && (o.name[n] == 0 || o.name[n] == '.');
        gt__dx_op_release(&o);
    }
    if ((rc = gt__dx_add_attempt(c, f, op, stack)) != 0)
        return rc;
    return 0;
}

static int one_raised(gt__dctx *c, int64_t seq, const gt_pymsg *m, int64_t stack,
                      int64_t backward)
{
    raising l = {GT_STRBUF_INIT, GT_STRBUF_INIT, GT_STRBUF_INIT, NULL, NULL};
    int rc = one_raised_in(c, seq, m, stack, backward, &l);
    raising_release(&l);
    return rc;
}

int gt__dx_raised_at_op(gt__dctx *c)
{
    return gt__dx_each_error(c, gt__pymsg_at_op, one_raised);
}

/* ---- errors nothing explains ------------------------------------------- */

/* The tensors matching a version message (dtype, shape, and a counter that
 * reached the version PyTorch found), each with its last write before the
 * error: candidates and mutations of f. */
static int candidates(gt__dctx *c, gt_finding *f, const gt_pymsg *m, int64_t seq)
{
    sqlite3_stmt *st = NULL;
    int rc = 0, s;
    size_t cap = 0;
    if (!m->has_versions)
        return 0;
    if (!(st = gt_trace_stmt(
              c->t,
              "SELECT t.id, (SELECT b.op FROM version_bumps b JOIN tensors w ON w.id = "
              "b.tensor "
              " WHERE w.version_counter = t.version_counter AND b.seq < ?4 "
              " ORDER BY b.seq DESC LIMIT 1), "
              " (SELECT b.version FROM version_bumps b JOIN tensors w ON w.id = b.tensor "
              " WHERE w.version_counter = t.version_counter AND b.seq < ?4 "
              " ORDER BY b.seq DESC LIMIT 1) "
              "FROM tensors t JOIN strings d ON d.id = t.dtype "
              "WHERE d.text = ?1 AND t.shape = '[' || ?2 || ']' AND t.id = "
              "t.version_counter AND EXISTS ("
              " SELECT 1 FROM version_bumps b JOIN tensors w ON w.id = b.tensor "
              " WHERE w.version_counter = t.version_counter AND b.version = ?3 AND b.seq "
              "< "
              "?4) "
              "ORDER BY t.id LIMIT 50")))
        return gt_trace_errcode(c->t);
    sqlite3_bind_text(st, 1, m->dtype, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, m->shape, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, m->version);
    sqlite3_bind_int64(st, 4, seq);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (f->n_candidates == cap) {
            cap = cap ? cap * 2 : 4;
            int64_t *v = realloc(f->candidates, cap * sizeof *v);
            gt_mutation *mv = realloc(f->mutations, cap * sizeof *mv);
            if (v)
                f->candidates = v;
            if (mv)
                f->mutations = mv;
            if (!v || !mv) {
                rc = gt__dx_nomem(c);
                break;
            }
        }
        int64_t t = sqlite3_column_int64(st, 0);
        f->candidates[f->n_candidates++] = t;
        if (sqlite3_column_type(st, 1) != SQLITE_NULL) {
            gt_mutation *mu = &f->mutations[f->n_mutations++];
            memset(mu, 0, sizeof *mu);
            mu->seq = sqlite3_column_int64(st, 1);
            mu->tensor = t;
            mu->version_after = sqlite3_column_int64(st, 2);
        }
    }
    if (!rc && s != SQLITE_DONE && s != SQLITE_ROW)
        rc = gt__dx_sql_fail(c);
    sqlite3_reset(st);
    if (!rc && f->n_candidates == 1)
        f->tensor = f->candidates[0];
    return rc;
}

/* 1 if the graph of backward call `bw` holds nodes made before recording
 * started: no recorded op made them (nodes.op NULL, not an accumulator),
 * whether first seen from the call's roots or earlier, through an op that
 * took a tensor one made (a saved tensor changed while recording). */
static int built_before_recording(gt__dctx *c, int64_t bw)
{
    gt_replay *r = NULL;
    int out = 0;
    if (!bw || gt__replay_backward(c->rp, bw, &r) != 0)
        return 0; /* unknown: read as "recorded" (the message stays on c->t) */
    for (size_t i = 0; i < r->n && !out; i++) {
        const gt_replay_node *nd = &r->order[i];
        out = !nd->accumulate_grad && !nd->op;
    }
    gt__replay_free(r);
    return out;
}

int gt__dx_unexplained(gt__dctx *c, size_t first)
{
    sqlite3_stmt *st = NULL;
    int rc = 0, s;
    gt_pymsg m;
    if ((rc = gt_trace_prepare(c->t, gt__dx_sql_family, &st)) != 0)
        return rc;
    gt__pymsg_parse(NULL, &m); /* holds nothing */
    while (!rc && (s = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t seq = sqlite3_column_int64(st, 0), bw = sqlite3_column_int64(st, 3);
        gt__pymsg_release(&m);
        if (gt__pymsg_parse(gt_column_text(st, 1, &c->oom), &m) != 0) {
            rc = gt__dx_nomem(c);
            break;
        }
        if (m.kind == GT_PYMSG_OTHER || (c->only && bw != c->only))
            continue;
        /* Explained: a finding about this error. One that names another
         * tensor than the message (matches_error 0) says so itself; an
         * unexplained finding is for an error nothing is reported about. */
        int explained = 0;
        size_t n = c->f->n;
        for (size_t k = first; k < n && !explained; k++) {
            const gt_finding *g = &c->f->v[k];
            if (g->kind == GT_FINDING_UNEXPLAINED)
                continue;
            if (g->error_seq == seq && (g->first_to_fail || g->matches_error == 1))
                explained = 1;
            else if (bw && g->backward == bw && g->first_to_fail)
                explained = 1;
        }
        if (explained)
            continue;
        int mismatch = 0;
        gt_finding *f = gt__dx_add_finding(c, GT_FINDING_UNEXPLAINED, bw);
        if (!f) {
            rc = gt__dx_nomem(c);
            break;
        }
        f->error_seq = seq;
        f->stack = sqlite3_column_int64(st, 2);
        f->mismatch = mismatch;
        f->first_to_fail = 0;
        f->outside_recording = built_before_recording(c, bw);
        if (m.kind == GT_PYMSG_VERSION) {
            f->saved_version = m.expected;
            f->version_at_backward = m.version;
            rc = candidates(c, f, &m, seq);
        }
    }
    gt__pymsg_release(&m);
    if (!rc && s != SQLITE_DONE && s != SQLITE_ROW)
        rc = gt__dx_sql_fail(c);
    sqlite3_finalize(st);
    return rc;
}
