/* DistributedDataParallel's "Expected to have finished reduction in the
 * prior iteration before starting a new one ... parameters that were not
 * used in producing loss" (finding.h, ddp_unused_parameters): which
 * parameters backward did not reach, and why.
 *
 * DDP raises it at the forward after a backward that left some of its
 * parameters without a gradient. The message numbers them by their index
 * in DDP's parameter list ("Parameter indices which did not receive grad
 * for rank 0: 2 3"), and with TORCH_DISTRIBUTED_DEBUG=INFO also names them
 * ("Parameters which did not receive grad for rank 0: aux.bias,
 * aux.weight"). That list is the module's named_parameters() that require
 * grad, the order in which DistributedDataParallel(...) detached them to
 * broadcast them (torch.distributed.utils._sync_module_states): the trace
 * holds those detach ops, so an index is a tensor. Without them (init_sync
 * off), the parameters are the tensors the user's frame names
 * `<ddp>.module.<name>`, in the order the trace first saw them.
 *
 * For each parameter, from the forward that ran inside the DDP module
 * before that backward (ops from its first DDP frame up to the backward
 * call): no op read it (never used); an op read it, and along the ops that
 * took what came of it a detach() or an op run with grad mode off took it
 * (cut there); or ops read it and none of that reached the loss (its
 * output went unused). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/error.h>

#include "diagnose_int.h"
#include "grow.h"

#define REDUCTION_MSG "Expected to have finished reduction in the prior iteration"

/* ---- the message ------------------------------------------------------- */

/* What the message lists: indices, names (the debug line), the rank. */
typedef struct listed {
    int64_t *idx;
    size_t nidx;
    char **names;
    size_t nnames;
    int64_t rank; /* -1 if not given */
} listed;

static void listed_release(listed *l)
{
    free(l->idx);
    for (size_t i = 0; i < l->nnames; i++)
        free(l->names[i]);
    free(l->names);
    memset(l, 0, sizeof *l);
}

/* The text after "<head> for rank N: " up to the end of its line, the rank
 * into *rank; NULL if the message has no such line. */
static const char *after_rank(const char *msg, const char *head, int64_t *rank,
                              size_t *len)
{
    const char *p = strstr(msg, head);
    if (!p)
        return NULL;
    p += strlen(head);
    if (strncmp(p, " for rank ", 10) != 0)
        return NULL;
    p += 10;
    char *end;
    long long r = strtoll(p, &end, 10);
    if (end == p || end[0] != ':' || end[1] != ' ')
        return NULL;
    *rank = r;
    p = end + 2;
    *len = strcspn(p, "\n");
    return p;
}

/* Parse msg into *l; -1 when out of memory (l then holds what was read). */
static int parse_listed(const char *msg, listed *l)
{
    size_t len;
    int64_t rank = -1;
    memset(l, 0, sizeof *l);
    l->rank = -1;
    const char *p =
        after_rank(msg, "Parameter indices which did not receive grad", &rank, &len);
    if (p) {
        l->rank = rank;
        if (!(l->idx = malloc((len / 2 + 1) * sizeof *l->idx)))
            return -1;
        for (const char *q = p, *e = p + len; q < e;) {
            char *end;
            long long v = strtoll(q, &end, 10);
            if (end == q || end > e)
                break;
            l->idx[l->nidx++] = v;
            q = end;
        }
    }
    p = after_rank(msg, "Parameters which did not receive grad", &rank, &len);
    if (p) {
        l->rank = rank;
        size_t cap = 1;
        for (size_t i = 0; i < len; i++)
            cap += p[i] == ',';
        if (!(l->names = calloc(cap, sizeof *l->names)))
            return -1;
        for (const char *q = p, *e = p + len; q < e;) {
            while (q < e && *q == ' ')
                q++;
            const char *c = q;
            while (c < e && *c != ',')
                c++;
            const char *t = c;
            while (t > q && t[-1] == ' ')
                t--;
            if (t > q && !(l->names[l->nnames++] = strndup(q, (size_t)(t - q))))
                return -1;
            q = c + 1;
        }
    }
    return 0;
}

/* ---- the parameters ---------------------------------------------------- */

/* DDP's parameter list: tensors in index order, and the op of the
 * DistributedDataParallel(...) call that detached the first (0: none). */
typedef struct plist {
    int64_t *v;
    size_t n, cap;
    int64_t at;
} plist;

static int plist_add(plist *p, int64_t t)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->v[i] == t)
            return 0; /* shared parameters are listed once */
    if (GT_ALLOC_GROW(p->v, p->n + 1, p->cap, 16) != 0)
        return -1;
    p->v[p->n++] = t;
    return 0;
}

/* The stacks below a frame of function `fn_like` (a LIKE pattern) in a file
 * LIKE `file_like`: the WITH clause the queries below share. */
#define UNDER(fn_like, file_like)                                                        \
    "WITH RECURSIVE d(id) AS (SELECT s.id FROM stacks s JOIN frames fr ON fr.id = "      \
    "s.frame JOIN strings fn ON fn.id = fr.function JOIN strings ff ON ff.id = fr.file " \
    "WHERE fn.text LIKE '" fn_like "' AND ff.text LIKE '" file_like "' "                 \
    "UNION SELECT s.id FROM stacks s JOIN d ON s.parent = d.id) "

/* DDP's broadcast of the module's state at DistributedDataParallel(...):
 * param.detach() for each of named_parameters(), in order, before ?1. */
static const char sql_sync[] =
    UNDER("%_sync_module_states",
          "%distributed%utils.py") "SELECT o.seq, o.stack, a.tensor, t.requires_grad "
                                   "FROM ops o "
                                   "JOIN strings n ON n.id = o.name JOIN op_args a ON "
                                   "a.op = o.seq AND a.role = 0 "
                                   "JOIN tensors t ON t.id = a.tensor WHERE n.text = "
                                   "'aten::detach' AND o.seq < ?1 "
                                   "AND o.stack IN (SELECT id FROM d) ORDER BY o.seq";

/* Without them: the leaves requiring grad the user's frame names
 * `<x>.module.<name>` at or before ?1, in the order first seen. */
static const char sql_named[] =
    "SELECT DISTINCT n.tensor FROM names n JOIN strings s ON s.id = n.name "
    "JOIN tensors t ON t.id = n.tensor WHERE n.seq <= ?1 AND s.text LIKE '%.module.%' "
    "AND t.requires_grad = 1 AND t.is_leaf = 1 ORDER BY n.tensor";

/* The first op in (?1, ?2) that ran inside a DDP module's forward. */
static const char sql_ddp_forward[] =
    UNDER("%forward", "%nn/parallel/distributed.py") "SELECT min(o.seq) FROM ops o WHERE "
                                                     "o.seq > ?1 AND o.seq < ?2 "
                                                     "AND o.stack IN (SELECT id FROM d)";

/* The leaves whose gradient backward call ?1 accumulates: AccumulateGrad
 * nodes reachable from its roots. */
static const char sql_reached[] =
    "WITH RECURSIVE g(id) AS (SELECT node FROM backward_roots WHERE backward = ?1 "
    "AND node IS NOT NULL UNION SELECT e.next FROM edges e JOIN g ON e.node = g.id "
    "WHERE e.next IS NOT NULL) "
    "SELECT n.variable FROM g JOIN nodes n ON n.id = g.id WHERE n.variable IS NOT NULL";

/* The tensor arguments of the ops in [?1, ?2), in order. */
static const char sql_window[] =
    "SELECT a.op, a.role, a.tensor, o.grad_mode, coalesce(s.text, '') FROM op_args a "
    "JOIN ops o ON o.seq = a.op LEFT JOIN strings s ON s.id = o.name "
    "WHERE a.op >= ?1 AND a.op < ?2 ORDER BY a.op, a.role, a.pos";

/* Run `sql` with ?1 = a, ?2 = b; call row(c, st, arg) for each row (stops
 * at its first non-zero result). */
static int each_row(gt__dctx *c, const char *sql, int64_t a, int64_t b,
                    int (*row)(gt__dctx *c, sqlite3_stmt *st, void *arg), void *arg)
{
    int rc = 0, s;
    sqlite3_stmt *st = gt_trace_stmt(c->t, sql);
    if (!st)
        return gt_trace_errcode(c->t);
    sqlite3_bind_int64(st, 1, a);
    sqlite3_bind_int64(st, 2, b);
    while ((s = sqlite3_step(st)) == SQLITE_ROW)
        if ((rc = row(c, st, arg)) != 0)
            break;
    if (!rc && s != SQLITE_DONE)
        rc = gt__dx_sql_fail(c);
    sqlite3_reset(st);
    return rc;
}

/* The constructions seen so far: each DistributedDataParallel(...) call's
 * list; a new one starts at another stack or a tensor listed again. */
typedef struct ddps {
    plist *v;
    size_t n, cap;
    int64_t stack, last_seq; /* of the current one */
} ddps;

static int sync_row(gt__dctx *c, sqlite3_stmt *st, void *arg)
{
    ddps *d = arg;
    int64_t seq = sqlite3_column_int64(st, 0), stack = sqlite3_column_int64(st, 1);
    int64_t t = sqlite3_column_int64(st, 2);
    int again = 0;
    for (size_t i = 0; d->n && i < d->v[d->n - 1].n; i++)
        again |= d->v[d->n - 1].v[i] == t;
    if (!d->n || stack != d->stack || again) {
        if (GT_ALLOC_GROW(d->v, d->n + 1, d->cap, 4) != 0)
            return gt__dx_nomem(c);
        memset(&d->v[d->n++], 0, sizeof *d->v);
        d->v[d->n - 1].at = seq;
        d->stack = stack;
    }
    d->last_seq = seq;
    /* a frozen parameter is broadcast, but DDP's reducer leaves it out */
    if (sqlite3_column_int(st, 3) && plist_add(&d->v[d->n - 1], t) != 0)
        return gt__dx_nomem(c);
    return 0;
}

static int named_row(gt__dctx *c, sqlite3_stmt *st, void *arg)
{
    return plist_add(arg, sqlite3_column_int64(st, 0)) ? gt__dx_nomem(c) : 0;
}

static int reached_row(gt__dctx *c, sqlite3_stmt *st, void *arg)
{
    return gt__imap_put(arg, sqlite3_column_int64(st, 0), 1) ? gt__dx_nomem(c) : 0;
}

/* DDP's own name of parameter t ("aux.weight"): the part after ".module."
 * of a name the user's frame gives it (the DDP wrapper's attribute), else
 * after the first dot of a dotted one (the wrapped model's); NULL if it
 * has no name. Out of memory sets c->oom. */
static char *ddp_name(gt__dctx *c, int64_t t)
{
    const char *const *v = NULL;
    size_t n = 0;
    const char *pick = NULL;
    int rc = gt_trace_names(c->t, t, &v, &n);
    if (rc == GT_ENOMEM)
        c->oom = 1;
    for (size_t i = 0; rc == 1 && i < n && !pick; i++) {
        const char *m = strstr(v[i], ".module.");
        if (m)
            pick = m + 8;
    }
    for (size_t i = 0; rc == 1 && i < n && !pick; i++)
        if (strchr(v[i], '.') && !strchr(v[i], '['))
            pick = strchr(v[i], '.') + 1;
    char *out = pick ? strdup(pick) : NULL;
    if (pick && !out)
        c->oom = 1;
    return out;
}

/* ---- why backward did not reach one ------------------------------------ */

/* The window's op arguments. */
typedef struct warg {
    int64_t op, tensor;
    int role, grad_mode, detach;
} warg;

typedef struct window {
    warg *v;
    size_t n, cap;
} window;

static int window_row(gt__dctx *c, sqlite3_stmt *st, void *arg)
{
    window *w = arg;
    if (GT_ALLOC_GROW(w->v, w->n + 1, w->cap, 256) != 0)
        return gt__dx_nomem(c);
    const char *name = (const char *)sqlite3_column_text(st, 4);
    w->v[w->n++] = (warg){.op = sqlite3_column_int64(st, 0),
                          .role = sqlite3_column_int(st, 1),
                          .tensor = sqlite3_column_int64(st, 2),
                          .grad_mode = sqlite3_column_int(st, 3),
                          .detach = name && !strcmp(name, "aten::detach")};
    return 0;
}

/* Why parameter p got no gradient, from the ops of the window in order:
 * *reason (enum gt_cut_reason) and *op (the cutting op, or the first op
 * that read it; 0 when none did). Returns 0 or GT_ENOMEM. */
static int why(gt__dctx *c, const window *w, int64_t p, int *reason, int64_t *op)
{
    gt_imap from = {0}; /* tensors computed from p */
    int64_t v;
    int rc = 0;
    *reason = GT_CUT_UNUSED;
    *op = 0;
    if (gt__imap_put(&from, p, 1) != 0)
        return gt__dx_nomem(c);
    for (size_t i = 0; i < w->n && !rc;) {
        size_t j = i;
        int reads = 0, writes_p = 0, grad_mode = w->v[i].grad_mode,
            detach = w->v[i].detach;
        for (; j < w->n && w->v[j].op == w->v[i].op; j++) {
            reads |= w->v[j].role == 0 && gt__imap_get(&from, w->v[j].tensor, &v);
            writes_p |= w->v[j].role == 2 && w->v[j].tensor == p;
        }
        if (reads && !writes_p) { /* an update of p itself (an optimizer) is no use */
            if (!*op)
                *op = w->v[i].op;
            if (!grad_mode || detach) {
                /* the first cut on the way wins over "not on the path" */
                if (*reason != GT_CUT_DETACH && *reason != GT_CUT_NO_GRAD) {
                    *reason = !grad_mode ? GT_CUT_NO_GRAD : GT_CUT_DETACH;
                    *op = w->v[i].op;
                }
            } else {
                if (*reason == GT_CUT_UNUSED)
                    *reason = GT_CUT_OFF_PATH;
                for (size_t k = i; k < j && !rc; k++)
                    if (w->v[k].role == 1 && gt__imap_put(&from, w->v[k].tensor, 1) != 0)
                        rc = gt__dx_nomem(c);
            }
        }
        i = j;
    }
    gt__imap_clear(&from);
    return rc;
}

/* ---- the finding ------------------------------------------------------- */

/* What one error's diagnosis holds while it is built. */
typedef struct ctx1 {
    listed l;
    ddps d;
    plist named;
    gt_imap reached;
    window w;
    gt_ddp_param *ps;
    size_t nps, capps;
} ctx1;

static void ctx1_release(ctx1 *x)
{
    listed_release(&x->l);
    for (size_t i = 0; i < x->d.n; i++)
        free(x->d.v[i].v);
    free(x->d.v);
    free(x->named.v);
    gt__imap_clear(&x->reached);
    free(x->w.v);
    for (size_t i = 0; i < x->nps; i++)
        free(x->ps[i].name);
    free(x->ps);
}

/* 1 if every index the message lists is one of list's and unreached. */
static int fits(const ctx1 *x, const plist *list, int have_backward)
{
    int64_t v;
    for (size_t i = 0; i < x->l.nidx; i++)
        if (x->l.idx[i] < 0 || (size_t)x->l.idx[i] >= list->n ||
            (have_backward && gt__imap_get(&x->reached, list->v[x->l.idx[i]], &v)))
            return 0;
    return 1;
}

static int add_param(gt__dctx *c, ctx1 *x, int64_t t, int64_t index, char *name)
{
    if (GT_ALLOC_GROW(x->ps, x->nps + 1, x->capps, 8) != 0) {
        free(name);
        return gt__dx_nomem(c);
    }
    x->ps[x->nps++] = (gt_ddp_param){.tensor = t, .index = index, .name = name};
    return 0;
}

/* The backward that left the parameters without a gradient, the last
 * before the error at seq: its id in *bw (0 if none), its seq in *bseq
 * (seq when none), and where the backward calls before it ended in *prev.
 * Best-effort lookups (gt__dx_int): can't fail. */
static void backward_before(gt__dctx *c, int64_t seq, int64_t *bw, int64_t *bseq,
                            int64_t *prev)
{
    *bw = gt__dx_int(c,
                     "SELECT id FROM backward_calls WHERE seq < ?1 ORDER BY seq DESC "
                     "LIMIT 1",
                     seq, 0, NULL, 0);
    *bseq = *bw ? gt__dx_int(c, "SELECT seq FROM backward_calls WHERE id = ?1", *bw, 0,
                             NULL, 0)
                : seq;
    *prev = gt__dx_int(c,
                       "SELECT max(coalesce(end_seq, seq)) FROM backward_calls "
                       "WHERE seq < ?1",
                       *bseq, 0, NULL, 0);
}

/* DDP's parameter list of the module that raised at seq: of the
 * DistributedDataParallel(...) constructions before it, the latest whose
 * list the message's indices fit, else the latest; without any, the
 * parameters the user's frame names (x->named). Into *list. Returns 0, or
 * a negative GT_E* code. */
static int pick_list(gt__dctx *c, ctx1 *x, int64_t seq, int64_t bw, const plist **list)
{
    int rc;
    *list = NULL;
    if ((rc = each_row(c, sql_sync, seq, 0, sync_row, &x->d)) != 0)
        return rc;
    for (size_t i = x->d.n; i-- > 0 && !*list;)
        if (x->d.v[i].at < seq && fits(x, &x->d.v[i], bw != 0))
            *list = &x->d.v[i];
    if (!*list && x->d.n)
        *list = &x->d.v[x->d.n - 1];
    if (*list)
        return 0;
    if ((rc = each_row(c, sql_named, seq, 0, named_row, &x->named)) != 0)
        return rc;
    *list = &x->named;
    return 0;
}

/* The parameters the message lists by index, into x->ps; *matches 1 when
 * the list fits them (each one unreached, and named as the message's
 * debug line names them, if it has one), else 0. Returns 0, or GT_ENOMEM. */
static int params_by_index(gt__dctx *c, ctx1 *x, const plist *list, int64_t bw,
                           int *matches)
{
    int rc = 0;
    *matches = fits(x, list, bw != 0);
    for (size_t i = 0; i < x->l.nidx && !rc; i++) {
        int64_t k = x->l.idx[i];
        int64_t t = k >= 0 && (size_t)k < list->n ? list->v[k] : 0;
        char *nm = t ? ddp_name(c, t) : NULL;
        /* with TORCH_DISTRIBUTED_DEBUG set the message names them too */
        int named = !x->l.nnames;
        for (size_t n = 0; n < x->l.nnames && nm; n++)
            named |= !strcmp(nm, x->l.names[n]);
        if (!named)
            *matches = 0;
        rc = add_param(c, x, t, k, nm);
    }
    return rc;
}

/* Without indices: the parameters of the list the message names, else
 * every one backward call bw did not reach, into x->ps; *matches 1 when
 * every name was found, 0 when not, -1 when the message names none.
 * Returns 0, or GT_ENOMEM. */
static int params_by_name(gt__dctx *c, ctx1 *x, const plist *list, int64_t bw,
                          int *matches)
{
    int64_t v;
    int rc = 0;
    for (size_t i = 0; i < list->n && !rc; i++) {
        char *nm = ddp_name(c, list->v[i]);
        int want = 0;
        if (x->l.nnames) {
            for (size_t k = 0; k < x->l.nnames && nm; k++)
                want |= !strcmp(nm, x->l.names[k]);
        } else {
            want = bw && !gt__imap_get(&x->reached, list->v[i], &v);
        }
        if (want)
            rc = add_param(c, x, list->v[i], (int64_t)i, nm);
        else
            free(nm);
    }
    *matches = x->l.nnames ? x->nps == x->l.nnames : -1;
    return rc;
}

/* Why each parameter of x->ps got no gradient (why), from the forward
 * they were left out of: the ops from the first one inside a DDP module's
 * forward after the backward before (prev) and after the wrapping, up to
 * the backward call at bseq. Returns 0, or a negative GT_E* code. */
static int explain_params(gt__dctx *c, ctx1 *x, int64_t seq, int64_t bw, int64_t bseq,
                          int64_t prev)
{
    int64_t lo = prev > x->d.last_seq ? prev : x->d.last_seq, v;
    int64_t from = gt__dx_int(c, sql_ddp_forward, lo, bseq, NULL, 0);
    int rc;
    if (!from)
        from = lo + 1;
    if ((rc = each_row(c, sql_window, from, bseq, window_row, &x->w)) != 0)
        return rc;
    for (size_t i = 0; i < x->nps && !rc; i++) {
        gt_ddp_param *p = &x->ps[i];
        if (!p->tensor || (bw && gt__imap_get(&x->reached, p->tensor, &v))) {
            p->reason = GT_CUT_NONE; /* none of DDP's, or one the backward reached */
            continue;
        }
        rc = why(c, &x->w, p->tensor, &p->reason, &p->op);
        p->made = gt__dx_made_at(c, p->tensor, seq);
    }
    return rc;
}

/* Diagnose the error at seq (stack, message msg), x holding what it
 * reads: the parameters DDP says got no gradient and why, as one
 * ddp_unused_parameters finding, which takes x->ps. None when no DDP
 * module is in this process (a launcher relaying the error) or no
 * parameter is found. Returns 0, or a negative GT_E* code. */
static int one_in(gt__dctx *c, ctx1 *x, int64_t seq, int64_t stack, const char *msg)
{
    int64_t bw, bseq, prev;
    const plist *list;
    int rc, matches;
    if (parse_listed(msg, &x->l) != 0)
        return gt__dx_nomem(c);
    backward_before(c, seq, &bw, &bseq, &prev);
    if (bw && (rc = each_row(c, sql_reached, bw, 0, reached_row, &x->reached)) != 0)
        return rc;
    if ((rc = pick_list(c, x, seq, bw, &list)) != 0)
        return rc;
    if (!list->n)
        return 0;
    /* which: the indices, else the names, else every one not reached */
    rc = x->l.nidx ? params_by_index(c, x, list, bw, &matches)
                   : params_by_name(c, x, list, bw, &matches);
    if (rc || x->nps == 0)
        return rc;
    if ((rc = explain_params(c, x, seq, bw, bseq, prev)) != 0)
        return rc;

    gt_finding *f = gt__dx_add_finding(c, GT_FINDING_DDP_UNUSED_PARAMETERS, bw);
    if (!f)
        return gt__dx_nomem(c);
    f->first_to_fail = 1;
    f->error_seq = seq;
    f->stack = stack;
    f->matches_error = matches;
    f->op = list->at;
    f->other = x->l.rank;
    f->params = x->ps;
    f->n_params = x->nps;
    x->ps = NULL;
    x->nps = x->capps = 0;
    return 0;
}

static int one(gt__dctx *c, int64_t seq, int64_t stack, const char *msg)
{
    ctx1 x;
    memset(&x, 0, sizeof x);
    int rc = one_in(c, &x, seq, stack, msg);
    ctx1_release(&x);
    return rc;
}

int gt__dx_ddp_unused(gt__dctx *c)
{
    int rc = 0, s;
    if (c->only)
        return 0; /* raised at a forward, in no backward call */
    sqlite3_stmt *st = gt_trace_stmt(c->t, "SELECT seq, coalesce(stack, 0), message FROM"
                                           " errors WHERE message LIKE '%" REDUCTION_MSG
                                           "%' AND message NOT LIKE"
                                           " '%Traceback (most recent call last)%'"
                                           " ORDER BY seq");
    if (!st)
        return gt_trace_errcode(c->t);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *m = gt_column_text(st, 2, &c->oom);
        char *msg = m ? strdup(m) : NULL;
        if (m && !msg) {
            rc = gt__dx_nomem(c);
            break;
        }
        rc = one(c, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
                 msg ? msg : "");
        free(msg);
        if (rc)
            break;
    }
    if (!rc && s != SQLITE_DONE)
        rc = gt__dx_sql_fail(c);
    sqlite3_reset(st);
    return rc;
}
