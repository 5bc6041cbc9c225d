/* Diagnosis: replay every backward call and report what broke it (the
 * replay verdicts: stale versions, silent writes, backward twice), and the
 * trace readers the other parts share; see diagnose.h for the contract,
 * replay.h for the engine model, diagnose_int.h for the parts (raised.c:
 * errors raised at the op and unexplained ones; suggest.c: the fixes;
 * pymsg.c: PyTorch's messages; pysrc.c: Python source lines; extent.c:
 * which bytes a tensor covers). */
#include <gradtrace/diagnose.h>
#include "pymsg.h"
#include "diagnose_int.h"
#include "pysrc.h"

#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include "extent.h"
#include "grow.h"
#include "intlist.h"
#include "replay.h"
#include "trace_int.h"

/* ---- SQL --------------------------------------------------------------- */

static const char sql_calls[] = "SELECT id, seq FROM backward_calls ORDER BY id";
/* The saved tensors of the nodes in JSON array ?1. */
static const char sql_saved[] =
    "SELECT st.node, st.seq, coalesce(st.tensor, 0), st.version, t.version_counter, "
    "t.storage, st.is_output, st.seq, 0 "
    "FROM json_each(?1) j JOIN saved_tensors st ON st.node = j.value "
    "LEFT JOIN tensors t ON t.id = st.tensor";
/* The same from v3 on: a tensor saved before its row was written (a
 * checkpoint's input, saved by the call) counts writes from when it was
 * saved (saved_earlier.saved_seq); the region of a checkpoint input is the
 * call that saved it (nodes.op). */
static const char sql_saved_v3[] =
    "SELECT st.node, st.seq, coalesce(st.tensor, 0), st.version, t.version_counter, "
    "t.storage, st.is_output, coalesce(se.saved_seq, st.seq), "
    "CASE WHEN sl.text LIKE 'checkpoint\\_input[%' ESCAPE '\\' THEN coalesce(n.op, 0) "
    "ELSE 0 END "
    "FROM json_each(?1) j JOIN saved_tensors st ON st.node = j.value "
    "LEFT JOIN saved_earlier se ON se.saved = st.seq "
    "LEFT JOIN nodes n ON n.id = st.node LEFT JOIN strings sl ON sl.id = st.slot "
    "LEFT JOIN tensors t ON t.id = st.tensor";
/* Writes (mutated op arguments) within (?2, ?3) through any tensor on the
 * storages in JSON array ?1, by storage then op: through each tensor of
 * each storage, or through the window's op arguments (see
 * gt__pick_plan). */
/* Each with whether the write is a kernel write (v6: kernel_writes). */
#define SQL_SILENT(kernel)                                                               \
    "SELECT w.storage, a.op, a.tensor, w.version_counter, " kernel                       \
    " FROM json_each(?1) j "                                                             \
    "JOIN tensors w ON w.storage = j.value "                                             \
    "JOIN op_args a ON a.tensor = w.id AND a.role = 2 AND a.op > ?2 AND a.op < ?3 "      \
    "ORDER BY 1, 2, a.pos"
#define SQL_SILENT_WINDOW(kernel)                                                        \
    "SELECT w.storage, a.op, a.tensor, w.version_counter, " kernel " "                   \
    "FROM op_args a CROSS JOIN tensors w ON w.id = a.tensor "                            \
    "WHERE a.op > ?2 AND a.op < ?3 AND a.role = 2 "                                      \
    "AND +w.storage IN (SELECT value FROM json_each(?1)) ORDER BY 1, 2, a.pos"
#define SQL_KERNEL_WRITE                                                                 \
    "EXISTS (SELECT 1 FROM kernel_writes k WHERE k.op = a.op AND k.tensor = a.tensor)"
static const char sql_silent[] = SQL_SILENT("0");
static const char sql_silent_window[] = SQL_SILENT_WINDOW("0");
static const char sql_silent_v6[] = SQL_SILENT(SQL_KERNEL_WRITE);
static const char sql_silent_window_v6[] = SQL_SILENT_WINDOW(SQL_KERNEL_WRITE);
static const char sql_silent_size[] =
    "SELECT count(*) FROM (SELECT 1 FROM json_each(?1) j JOIN tensors w "
    "ON w.storage = j.value LIMIT ?2)";
static const char sql_bwerr[] =
    "SELECT seq, message FROM errors WHERE backward = ?1 ORDER BY seq LIMIT 1";
static const char sql_op[] =
    "SELECT coalesce(s.text, ''), o.phase, coalesce(o.stack, 0), o.grad_mode "
    "FROM ops o LEFT JOIN strings s ON s.id = o.name WHERE o.seq = ?1";

/* ---- context ----------------------------------------------------------- */

/* ---- small helpers ----------------------------------------------------- */

/* gt__dx_load_tensor through the per-backward cache: *out points into the cache,
 * valid until the next call. */
static int cached_tensor(gt__dctx *c, int64_t id, const gt__tinfo **out)
{
    int64_t at;
    if (id && gt__imap_get(&c->tcache, id, &at)) {
        *out = &c->tv[at];
        return 0;
    }
    if (GT_ALLOC_GROW(c->tv, c->tn + 1, c->tcap, 64) != 0)
        return gt__dx_nomem(c);
    int rc = gt__dx_load_tensor(c, id, &c->tv[c->tn]);
    if (rc)
        return rc;
    if (id && gt__imap_put(&c->tcache, id, (int64_t)c->tn) != 0) {
        gt__dx_tinfo_release(&c->tv[c->tn]);
        return gt__dx_nomem(c);
    }
    *out = &c->tv[c->tn++];
    return 0;
}

static void tcache_clear(gt__dctx *c)
{
    gt__imap_clear(&c->tcache);
    for (size_t i = 0; i < c->tn; i++)
        gt__dx_tinfo_release(&c->tv[i]);
    c->tn = 0;
}

/* The first error of a backward call, parsed. */
typedef struct bwerr {
    int64_t seq; /* errors.seq, 0 if the call raised nothing */
    gt_pymsg m;
} bwerr;

/* The first error recorded during backward `b` (e->seq = 0 if none); e->m
 * holds memory even on failure: gt__pymsg_release it. */
static int load_backward_error(gt__dctx *c, int64_t b, bwerr *e)
{
    e->seq = 0;
    gt__pymsg_parse(NULL, &e->m);
    sqlite3_stmt *st = c->bwerr;
    sqlite3_bind_int64(st, 1, b);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        e->seq = sqlite3_column_int64(st, 0);
        if (gt__pymsg_parse(gt_column_text(st, 1, &c->oom), &e->m) != 0)
            c->oom = 1;
    }
    sqlite3_reset(st);
    return s == SQLITE_ROW || s == SQLITE_DONE ? 0 : gt__dx_sql_fail(c);
}

/* ---- suggestions ------------------------------------------------------- */

/* ---- one backward call ------------------------------------------------- */

/* A saved tensor of a node of the graph being replayed. */
typedef struct srec {
    long order; /* index of its node in the replay order */
    int64_t seq, tensor, version, vc, storage;
    int64_t from;   /* seq writes count from: when it was saved */
    int64_t region; /* a checkpoint input: ops.seq of the call, else 0 */
    int has_vc, has_storage, is_output;
} srec;

/* A write through a tensor on one of the saved tensors' storages. */
typedef struct wrec {
    int64_t storage, op, tensor, vc;
    int kernel; /* a kernel write: the op moved no version (kernel_writes) */
} wrec;

/* Everything one replay's checks read, loaded in a few batched queries. */
typedef struct batch {
    srec *saved;
    size_t nsaved;
    wrec *writes;
    size_t nwrites;
    gt_counters *counters;
} batch;

static void batch_release(batch *bt)
{
    free(bt->saved);
    free(bt->writes);
    gt__counters_free(bt->counters);
}

static int cmp_srec(const void *a, const void *b)
{
    const srec *x = a, *y = b;
    if (x->order != y->order)
        return x->order < y->order ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sort and drop duplicates; returns the new length. */
static size_t uniq(int64_t *v, size_t n)
{
    size_t k = 0;
    qsort(v, n, sizeof *v, cmp_i64);
    for (size_t i = 0; i < n; i++)
        if (k == 0 || v[k - 1] != v[i])
            v[k++] = v[i];
    return k;
}

/* The event a node's saved tensors are checked at: when the engine ran it
 * (node_execs), else the start of the backward call. */
static int64_t check_point(const gt_replay *r, const gt_replay_node *nd)
{
    return nd->exec_seq ? nd->exec_seq : r->seq;
}

static int load_batch(gt__dctx *c, const gt_replay *r, batch *bt)
{
    int rc = 0, s;
    int64_t *ids = NULL, *vcs = NULL, *stor = NULL;
    char *list = NULL;
    size_t cap = 0, nv = 0, ns = 0;
    gt_imap pos;
    sqlite3_stmt *st = c->saved;
    memset(&pos, 0, sizeof pos);
    memset(bt, 0, sizeof *bt);
    if (r->n == 0)
        return 0;

    if (!(ids = malloc(r->n * sizeof *ids)))
        goto gt__dx_nomem;
    int64_t lo = INT64_MAX, hi = 0;
    for (size_t i = 0; i < r->n; i++) {
        ids[i] = r->order[i].id;
        if (gt__imap_put(&pos, ids[i], (int64_t)i) != 0)
            goto gt__dx_nomem;
        if (check_point(r, &r->order[i]) > hi)
            hi = check_point(r, &r->order[i]);
    }
    if (!(list = gt_ints_json(ids, r->n)))
        goto gt__dx_nomem;
    sqlite3_bind_text(st, 1, list, -1, SQLITE_STATIC);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (GT_ALLOC_GROW(bt->saved, bt->nsaved + 1, cap, 64) != 0) {
            sqlite3_reset(st);
            goto gt__dx_nomem;
        }
        srec *x = &bt->saved[bt->nsaved++];
        int64_t order = 0;
        gt__imap_get(&pos, sqlite3_column_int64(st, 0), &order);
        x->order = (long)order;
        x->seq = sqlite3_column_int64(st, 1);
        x->tensor = sqlite3_column_int64(st, 2);
        x->version = sqlite3_column_int64(st, 3);
        x->has_vc = sqlite3_column_type(st, 4) != SQLITE_NULL;
        x->vc = sqlite3_column_int64(st, 4);
        x->has_storage = sqlite3_column_type(st, 5) != SQLITE_NULL;
        x->storage = sqlite3_column_int64(st, 5);
        x->is_output = sqlite3_column_int(st, 6);
        x->from = sqlite3_column_int64(st, 7);
        x->region = sqlite3_column_int64(st, 8);
        if (x->from > x->seq || x->from <= 0)
            x->from = x->seq;
        if (x->from < lo)
            lo = x->from;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (s != SQLITE_DONE) {
        rc = gt__dx_sql_fail(c);
        goto out;
    }
    if (bt->nsaved == 0)
        goto out;
    qsort(bt->saved, bt->nsaved, sizeof *bt->saved, cmp_srec);

    /* The counters and storages of the saved tensors, over the window from
     * the earliest save to the last check point. */
    vcs = malloc(bt->nsaved * sizeof *vcs);
    stor = malloc(bt->nsaved * sizeof *stor);
    if (!vcs || !stor)
        goto gt__dx_nomem;
    for (size_t i = 0; i < bt->nsaved; i++) {
        if (bt->saved[i].tensor && bt->saved[i].has_vc)
            vcs[nv++] = bt->saved[i].vc;
        if (bt->saved[i].tensor && bt->saved[i].has_storage)
            stor[ns++] = bt->saved[i].storage;
    }
    nv = uniq(vcs, nv);
    ns = uniq(stor, ns);
    if ((rc = gt__counters_load(c->rp, vcs, nv, lo, hi, &bt->counters)))
        goto out;

    free(list);
    if (!(list = gt_ints_json(stor, ns)))
        goto gt__dx_nomem;
    st = c->silent;
    if ((rc = gt__pick_plan(c->t, c->silent_size, list, lo, hi)) < 0)
        goto out;
    if (rc == 1)
        st = c->silent_window;
    rc = 0;
    sqlite3_bind_text(st, 1, list, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, lo);
    sqlite3_bind_int64(st, 3, hi);
    cap = 0;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (GT_ALLOC_GROW(bt->writes, bt->nwrites + 1, cap, 16) != 0) {
            sqlite3_reset(st);
            goto gt__dx_nomem;
        }
        wrec *w = &bt->writes[bt->nwrites++];
        w->storage = sqlite3_column_int64(st, 0);
        w->op = sqlite3_column_int64(st, 1);
        w->tensor = sqlite3_column_int64(st, 2);
        w->vc = sqlite3_column_int64(st, 3);
        w->kernel = sqlite3_column_int(st, 4);
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (s != SQLITE_DONE)
        rc = gt__dx_sql_fail(c);
    goto out;
gt__dx_nomem:
    rc = gt__dx_nomem(c);
out:
    if (st)
        sqlite3_clear_bindings(st);
    free(list);
    free(ids);
    free(vcs);
    free(stor);
    gt__imap_clear(&pos);
    return rc;
}

/* 1 if node `name` is the one PyTorch's message calls `said`: the name
 * itself, or its start ("Relu" for ReluBackward0), or the name without
 * "Backward" ("LeakyRelu1" for LeakyReluBackward1, the node of the
 * in-place leaky_relu_), past a namespace. */
static int grad_fn_named(const char *name, const char *said)
{
    /* a C++ node is said with its namespace (torch::autograd::CopyBackwards
     * of copy_), the trace names it without */
    const char *ns = strstr(said, "::");
    while (ns) {
        said = ns + 2;
        ns = strstr(said, "::");
    }
    size_t n = strlen(said);
    if (!strncmp(name, said, n))
        return 1;
    const char *b = strstr(name, "Backward");
    return b && (size_t)(b - name) <= n && !strncmp(name, said, (size_t)(b - name)) &&
           !strcmp(b + 8, said + (b - name));
}

/* When PyTorch's message names the tensor's grad_fn (", which is output N
 * of NAME,"; PyTorch drops the "Backward0" suffix), 1 if it is the one the
 * engine sees at unpack, else 0; 1 as well when the trace cannot tell.
 * The engine reports, for a saved output, the node that saved it; for a
 * view whose base was changed in place, a regenerated view node (not in
 * the trace); for a tensor written through a view, CopySlices; otherwise
 * the tensor's current grad_fn: its latest node before `before` (an
 * in-place op gives it a new one). */
static int grad_fn_matches(gt__dctx *c, const srec *x, int64_t node, int64_t before,
                           int mutated, const gt__tinfo *ti, const bwerr *e)
{
    int ok = 1, s = SQLITE_OK;
    if (!e->m.grad_fn[0] || (!x->is_output && ti->alias_of && mutated))
        return 1;
    /* written through a view of it (`out[:, :2] = v`): its grad_fn is then
     * a CopySlices node, which the trace holds no output row of */
    if (mutated && strstr(e->m.grad_fn, "CopySlices"))
        return 1;
    /* prepared once per trace: asked for each saved tensor of an error */
    sqlite3_stmt *st =
        gt_trace_stmt(c->t, "SELECT s.text, no.output_nr FROM node_outputs no "
                            "JOIN nodes n ON n.id = no.node "
                            "JOIN strings s ON s.id = n.name "
                            "WHERE no.tensor = ?1 AND n.seq < ?2 "
                            "AND (?3 = 0 OR n.id = ?3) "
                            "ORDER BY n.seq DESC LIMIT 1");
    if (!st)
        s = sqlite3_errcode(c->db);
    if (st) {
        sqlite3_bind_int64(st, 1, x->tensor);
        sqlite3_bind_int64(st, 2, before);
        sqlite3_bind_int64(st, 3, x->is_output ? node : 0);
        if ((s = sqlite3_step(st)) == SQLITE_ROW) {
            const char *name = gt_column_text(st, 0, &c->oom);
            ok = name && grad_fn_named(name, e->m.grad_fn) &&
                 sqlite3_column_int64(st, 1) == e->m.output_nr;
        }
    }
    gt__dx_lookup_nomem(c, s);
    sqlite3_reset(st);
    return ok;
}

/* A finding about saved tensor `x` of node `nd`: saved at x->version, at
 * version `now` when the backward needed it, changed by the n writes in
 * `muts` (owned by the finding from here on; freed if there is no room). */
static gt_finding *add_saved_finding(gt__dctx *c, int kind, int64_t backward,
                                     const gt_replay_node *nd, const srec *x, int64_t now,
                                     gt_mutation *muts, size_t n)
{
    gt_finding *f = gt__dx_add_finding(c, kind, backward);
    if (!f) {
        free(muts);
        return NULL;
    }
    f->node = nd->id;
    f->saved_seq = x->seq;
    f->tensor = x->tensor;
    f->saved_version = x->version;
    f->version_at_backward = now;
    f->mutations = muts;
    f->n_mutations = n;
    return f;
}

/* Append write wr, with no bump, to v (n of cap). Returns 0, -1 when out of
 * memory (v unchanged). */
static int push_write(gt_mutation **v, size_t *n, size_t *cap, const wrec *wr)
{
    if (GT_ALLOC_GROW(*v, *n + 1, *cap, 4) != 0)
        return -1;
    (*v)[(*n)++] =
        (gt_mutation){.seq = wr->op, .tensor = wr->tensor, .version_after = -1};
    return 0;
}

/* The inplace_invalidated_saved finding for saved tensor `x` of node `nd`,
 * whose counter moved from x->version to `now` by the nb writes in `bumps`
 * (owned from here on), and whether it is the error e reported; *ti becomes
 * x's tensor facts. Returns 0 or a GT_E* code. */
static int stale_finding(gt__dctx *c, const gt_replay *r, const gt_replay_node *nd,
                         int64_t P, const srec *x, const bwerr *e, int64_t now,
                         gt_mutation *bumps, size_t nb, gt__tinfo *ti /* OUT */)
{
    gt_finding *f = add_saved_finding(c, GT_FINDING_INPLACE_INVALIDATED_SAVED,
                                      r->backward, nd, x, now, bumps, nb);
    if (!f)
        return gt__dx_nomem(c);
    f->error_seq = e->seq;
    const gt__tinfo *tp;
    int rc = cached_tensor(c, x->tensor, &tp);
    if (rc)
        return rc;
    *ti = *tp;
    if (e->seq && e->m.has_versions)
        f->matches_error = !strcmp(ti->dtype, e->m.dtype) &&
                           gt__pymsg_shape_fits(ti->shape, e->m.shape,
                                                strcmp(ti->shape, e->m.shape) != 0 &&
                                                    gt__dx_under_vmap(c, x->tensor)) &&
                           e->m.version == now && e->m.expected == x->version &&
                           grad_fn_matches(c, x, nd->id, P, nb > 0, ti, e);
    else if (e->seq)
        f->matches_error = 0;
    return 0;
}

/* Whether write wr changed saved tensor x's bytes with no version of x
 * moving: 0 no (an ordinary in-place write, whose bump is one of the nb
 * ops in bump_ops; an op without a bump that raised before writing), 1 yes
 * (through another counter, or a c10d collective), 2 yes, a kernel write
 * (kernel_writes). Can't fail. */
static int unseen_write(gt__dctx *c, const srec *x, const wrec *wr,
                        const int64_t *bump_ops, size_t nb)
{
    int same = wr->vc == x->vc;
    for (size_t b = 0; same && b < nb; b++)
        if (bump_ops[b] == wr->op)
            return 0; /* an ordinary in-place write: the version moved */
    if (!same && !wr->kernel)
        return 1;
    /* only collectives and kernel writes write without a bump by design;
     * any other op without one raised before writing */
    gt__opinfo wo = {0};
    gt__dx_load_op(c, wr->op, &wo);
    int collective = !strncmp(wo.name, "c10d::", 6);
    gt__dx_op_release(&wo);
    int kernel = wr->kernel && !collective;
    if (same && !collective && !kernel)
        return 0;
    return kernel ? 2 : 1;
}

/* The writes a saved tensor's version did not see: through another
 * counter or a collective (w), kernel writes (kw). */
typedef struct unseen {
    gt_mutation *w, *kw;
    size_t nw, wcap, nk, kcap;
} unseen;

/* The index of batch bt's first write on `storage` (writes are sorted by
 * storage), bt->nwrites if none. Can't fail. */
static size_t first_write_on(const batch *bt, int64_t storage)
{
    size_t lo = 0, hi = bt->nwrites;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (bt->writes[mid].storage < storage)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Collect into *u the writes to saved tensor x's own bytes between its save
 * and event P that moved no version of x (unseen_write). *ti is x's tensor
 * facts, read here first when *loaded is 0. Returns 0 or a GT_E* code (the
 * lists in *u are the caller's to free either way). */
static int unseen_writes(gt__dctx *c, const batch *bt, int64_t P, const srec *x,
                         const int64_t *bump_ops, size_t nb, gt__tinfo *ti, int *loaded,
                         unseen *u)
{
    for (size_t i = first_write_on(bt, x->storage);
         i < bt->nwrites && bt->writes[i].storage == x->storage; i++) {
        const wrec *wr = &bt->writes[i];
        const gt__tinfo *wi;
        int rc, how;
        if (wr->op <= x->from || wr->op >= P ||
            !(how = unseen_write(c, x, wr, bump_ops, nb)))
            continue;
        if (!*loaded) {
            if ((rc = cached_tensor(c, x->tensor, &wi)) != 0)
                return rc;
            *ti = *wi;
            *loaded = 1;
        }
        if ((rc = cached_tensor(c, wr->tensor, &wi)) != 0)
            return rc;
        /* Only a write to the saved tensor's own bytes reaches it: pieces
         * of one buffer (unsafe_split, as LSTM cells use) are independent. */
        if (!gt__extent_overlap(&wi->ext, &ti->ext))
            continue;
        if (how == 2 ? push_write(&u->kw, &u->nk, &u->kcap, wr)
                     : push_write(&u->w, &u->nw, &u->wcap, wr))
            return gt__dx_nomem(c);
    }
    return 0;
}

/* Check saved tensor `x` of node `nd`, at event P, for a stale version and
 * for silent writes. Returns 0 or a GT_E* code. */
static int check_saved(gt__dctx *c, const gt_replay *r, const batch *bt,
                       const gt_replay_node *nd, int64_t P, const srec *x, const bwerr *e)
{
    int64_t now;
    gt_mutation *bumps = NULL;
    size_t nb = 0;
    if (gt__counters_window(bt->counters, x->vc, x->from, x->version, P, &now, &bumps,
                            &nb))
        return gt__dx_nomem(c);
    /* the ops that bumped x's counter: a c10d collective writing through
     * the same counter without one left the version where it was */
    int64_t *bump_ops = nb ? malloc(nb * sizeof *bump_ops) : NULL;
    if (nb && !bump_ops) {
        free(bumps);
        return gt__dx_nomem(c);
    }
    for (size_t i = 0; i < nb; i++)
        bump_ops[i] = bumps[i].seq;
    gt__tinfo ti;
    int loaded = 0, rc = 0;
    if (now != x->version) {
        rc = stale_finding(c, r, nd, P, x, e, now, bumps, nb, &ti);
        loaded = 1;
    } else {
        free(bumps);
    }
    unseen u = {0};
    if (!rc && x->has_storage)
        rc = unseen_writes(c, bt, P, x, bump_ops, nb, &ti, &loaded, &u);
    free(bump_ops);
    if (rc || (u.nw == 0 && u.nk == 0) || gt__dx_slot_unread(c, x->seq)) {
        free(u.w);
        free(u.kw);
        return rc;
    }
    if (u.nw && !add_saved_finding(c, GT_FINDING_SILENT_STORAGE_WRITE, r->backward, nd, x,
                                   now, u.w, u.nw)) {
        free(u.kw);
        return gt__dx_nomem(c);
    }
    if (!u.nw)
        free(u.w);
    if (u.nk && !add_saved_finding(c, GT_FINDING_SILENT_KERNEL_WRITE, r->backward, nd, x,
                                   now, u.kw, u.nk))
        return gt__dx_nomem(c);
    if (!u.nk)
        free(u.kw);
    return 0;
}

/* Drop the silent_saved_write findings of f->v[from .. *to) (changed bytes,
 * --check-saved) that a silent_kernel_write of the same saved tensor and
 * backward call explains: the write is known, with its op and line. *to
 * becomes the new end of that range. Can't fail. */
static void drop_explained(gt_findings *f, size_t from, size_t *to)
{
    size_t k = from;
    for (size_t i = from; i < *to; i++) {
        gt_finding *x = &f->v[i];
        int known = 0;
        for (size_t j = 0; j < from && !known; j++)
            known = f->v[j].kind == GT_FINDING_SILENT_KERNEL_WRITE &&
                    f->v[j].saved_seq == x->saved_seq && f->v[j].backward == x->backward;
        if (known && x->kind == GT_FINDING_SILENT_SAVED_WRITE)
            gt_finding_release(x);
        else
            f->v[k++] = *x;
    }
    if (f->n > *to) /* f->v is NULL when there are no findings */
        memmove(&f->v[k], &f->v[*to], (f->n - *to) * sizeof *f->v);
    f->n -= *to - k;
    *to = k;
}

/* (tensor, checkpoint call) pairs already reported in one backward call. */
typedef struct regions {
    int64_t (*v)[2];
    size_t n, cap;
} regions;

static int region_seen(const regions *g, int64_t tensor, int64_t region)
{
    for (size_t i = 0; i < g->n; i++)
        if (g->v[i][0] == tensor && g->v[i][1] == region)
            return 1;
    return 0;
}

static int region_add(regions *g, int64_t tensor, int64_t region)
{
    if (GT_ALLOC_GROW(g->v, g->n + 1, g->cap, 8) != 0)
        return -1;
    g->v[g->n][0] = tensor;
    g->v[g->n][1] = region;
    g->n++;
    return 0;
}

static int raises(const gt_finding *f)
{
    return f->kind == GT_FINDING_INPLACE_INVALIDATED_SAVED ||
           f->kind == GT_FINDING_BACKWARD_TWICE;
}

/* One backward call's replay, as the checks of its nodes share it. */
typedef struct bwrun {
    gt__dctx *c;
    int64_t b; /* backward_calls.id */
    const gt_replay *r;
    const batch *bt;
    const bwerr *e;
    regions *regions;
    size_t k;     /* the next saved tensor of bt, in replay order */
    long fail_at; /* the node the engine raised at, -1 if none yet */
} bwrun;

/* A backward_twice finding for node nd (freed by call `freer`), saved
 * tensor x. Returns 0 or GT_ENOMEM. */
static int add_twice(bwrun *w, const gt_replay_node *nd, int64_t freer, const srec *x)
{
    gt_finding *f = gt__dx_add_finding(w->c, GT_FINDING_BACKWARD_TWICE, w->b);
    if (!f)
        return gt__dx_nomem(w->c);
    f->other_backward = freer;
    f->node = nd->id;
    f->saved_seq = x->seq;
    f->tensor = x->tensor;
    f->saved_version = x->version;
    f->error_seq = w->e->seq;
    f->matches_error = w->e->seq ? w->e->m.kind == GT_PYMSG_TWICE : -1;
    return 0;
}

/* Check the saved tensors of node `i` in replay order: freed by an earlier
 * call, or changed before it ran. Returns 0 or a negative GT_E* code. */
static int check_node(bwrun *w, size_t i)
{
    gt__dctx *c = w->c;
    const gt_replay_node *nd = &w->r->order[i];
    int64_t P = check_point(w->r, nd), freer = 0;
    int freed = gt__imap_get(&c->freed, nd->id, &freer);
    size_t before = c->f->n;
    int rc = 0;
    while (w->k < w->bt->nsaved && w->bt->saved[w->k].order < (long)i)
        w->k++;
    for (; w->k < w->bt->nsaved && w->bt->saved[w->k].order == (long)i && !rc; w->k++) {
        const srec *x = &w->bt->saved[w->k];
        if (freed) {
            if (c->f->n == before) /* one finding per freed node */
                rc = add_twice(w, nd, freer, x);
            continue;
        }
        if (!x->tensor || !x->has_vc || x->from >= P)
            continue;
        /* a checkpoint input sits on every node of its region: the
         * first node executed speaks for them all */
        if (x->region && region_seen(w->regions, x->tensor, x->region))
            continue;
        size_t had = c->f->n;
        rc = check_saved(c, w->r, w->bt, nd, P, x, w->e);
        if (!rc && x->region && c->f->n > had &&
            region_add(w->regions, x->tensor, x->region) != 0)
            rc = gt__dx_nomem(c);
    }
    for (size_t j = before; j < c->f->n && w->fail_at < 0; j++)
        if (raises(&c->f->v[j]))
            w->fail_at = (long)i;
    return rc;
}

/* Only the first freed node of a call is worth a finding: the engine stops
 * there, and the rest repeat it. Drops the others from findings `first`
 * on. */
static void keep_first_twice(gt__dctx *c, size_t first)
{
    int seen_twice = 0;
    size_t keep = first;
    for (size_t k = first; k < c->f->n; k++) {
        if (c->f->v[k].kind == GT_FINDING_BACKWARD_TWICE) {
            if (seen_twice) {
                gt_finding_release(&c->f->v[k]);
                continue;
            }
            seen_twice = 1;
        }
        c->f->v[keep++] = c->f->v[k];
    }
    c->f->n = keep;
}

/* Mark the one the engine raises on: the first in replay order; within its
 * node (or, failing that, the call), the one the error message names.
 * Returns the node it raised at (fail_at, or the marked one's). */
static long mark_first_to_fail(gt__dctx *c, const gt_replay *r, size_t first,
                               long fail_at)
{
    gt_finding *ftf = NULL;
    for (size_t k = first; k < c->f->n && !ftf; k++)
        if (raises(&c->f->v[k]))
            ftf = &c->f->v[k];
    if (ftf && ftf->matches_error == 0) {
        gt_finding *alt = NULL;
        for (size_t k = first; k < c->f->n && !alt; k++)
            if (raises(&c->f->v[k]) && c->f->v[k].matches_error == 1 &&
                c->f->v[k].node == ftf->node)
                alt = &c->f->v[k];
        for (size_t k = first; k < c->f->n && !alt; k++)
            if (raises(&c->f->v[k]) && c->f->v[k].matches_error == 1)
                alt = &c->f->v[k];
        if (alt) {
            ftf = alt;
            fail_at = gt__replay_find(r, alt->node);
        }
    }
    if (ftf)
        ftf->first_to_fail = 1;
    return fail_at;
}

/* Without retain_graph the engine frees the saved tensors of every node it
 * ran: those recorded in node_execs, else all the nodes before the one that
 * raised (all of them if the call returned). Noted in c->freed. Returns 0
 * or GT_ENOMEM. */
static int mark_freed(gt__dctx *c, const gt_replay *r, int64_t b, long fail_at)
{
    if (r->retain_graph || r->create_graph)
        return 0;
    for (size_t i = 0; i < r->n; i++) {
        const gt_replay_node *nd = &r->order[i];
        int ran;
        if (r->status != GT_BACKWARD_OK && fail_at >= 0 && (long)i >= fail_at)
            ran = (long)i != fail_at && r->has_execs && nd->exec_seq != 0;
        else
            ran = r->has_execs ? nd->exec_seq != 0 : 1;
        int64_t prev;
        if (ran && !gt__imap_get(&c->freed, nd->id, &prev) &&
            gt__imap_put(&c->freed, nd->id, b) != 0)
            return gt__dx_nomem(c);
    }
    return 0;
}

static int diagnose_backward(gt__dctx *c, int64_t b, int report)
{
    gt_replay *r = NULL;
    bwerr e = {0};
    batch bt;
    size_t first = c->f->n;
    regions regions = {0};
    memset(&bt, 0, sizeof bt);
    int rc = gt__replay_backward(c->rp, b, &r);
    if (rc)
        return rc;
    if ((rc = load_backward_error(c, b, &e)) != 0)
        goto out;
    if ((rc = load_batch(c, r, &bt)) != 0)
        goto out;
    bwrun w = {
        .c = c, .b = b, .r = r, .bt = &bt, .e = &e, .regions = &regions, .fail_at = -1};
    for (size_t i = 0; i < r->n && !rc; i++)
        rc = check_node(&w, i);
    if (rc)
        goto out;
    keep_first_twice(c, first);
    long fail_at = mark_first_to_fail(c, r, first, w.fail_at);
    if ((rc = mark_freed(c, r, b, fail_at)) != 0)
        goto out;
    if (!report) {
        for (size_t k = first; k < c->f->n; k++)
            gt_finding_release(&c->f->v[k]);
        c->f->n = first;
    }
out:
    gt__pymsg_release(&e.m);
    free(regions.v);
    tcache_clear(c);
    batch_release(&bt);
    gt__replay_free(r);
    return rc;
}

/* ---- entry point ------------------------------------------------------- */

int gt_diagnose(gt_trace *t, const gt_diagnose_options *opts, gt_findings **out)
{
    gt__dctx c;
    int rc = 0;
    int64_t only = opts ? opts->backward : 0;
    sqlite3_stmt *calls = NULL;
    memset(&c, 0, sizeof c);
    gt__trace_clear(t);
    c.db = gt_trace_db(t);
    c.t = t;
    c.only = only;
    if (!(c.f = calloc(1, sizeof *c.f))) {
        rc = gt__dx_nomem(&c);
        goto out;
    }
    if ((rc = gt__replayer_new(t, &c.rp)) != 0)
        goto out;
    struct {
        const char *sql;
        sqlite3_stmt **st;
    } stmts[] = {
        {sql_saved, &c.saved},
        {sql_silent, &c.silent}, /* [1], [2]: v6 below */
        {sql_silent_window, &c.silent_window},
        {sql_silent_size, &c.silent_size},
        {sql_bwerr, &c.bwerr},
        {sql_op, &c.op},
        {sql_calls, &calls},
    };
    if (gt__trace_has_table(t, "saved_earlier"))
        stmts[0].sql = sql_saved_v3;
    if (gt__trace_has_table(t, "kernel_writes")) {
        stmts[1].sql = sql_silent_v6;
        stmts[2].sql = sql_silent_window_v6;
    }
    for (size_t i = 0; i < sizeof stmts / sizeof stmts[0]; i++) {
        if (!(*stmts[i].st = gt_trace_stmt(t, stmts[i].sql))) {
            rc = gt_trace_errcode(t);
            goto out;
        }
    }
    if (only) {
        int64_t one;
        int r =
            gt_trace_int(t, "SELECT 1 FROM backward_calls WHERE id = ?1", only, 0, &one);
        int found = r == 1;
        if (r == GT_ENOMEM)
            c.oom = 1;
        if (c.oom) {
            rc = gt__dx_nomem(&c);
            goto out;
        }
        if (!found) {
            rc = gt__trace_fail(t, GT_EINVAL, "no backward call %lld in %s",
                                (long long)only, gt_trace_path(t));
            goto out;
        }
    }
    /* Calls before the one asked for are replayed too (unreported) when they
     * started after its oldest node was made: they may have run and freed
     * part of its graph. Older calls cannot have: their graphs were built
     * before any of its nodes existed (AccumulateGrad nodes live across
     * calls but save nothing, so they do not count). */
    int64_t oldest = 0;
    if (only) {
        gt_replay *r = NULL;
        if ((rc = gt__replay_backward(c.rp, only, &r)) != 0)
            goto out;
        oldest = INT64_MAX;
        for (size_t i = 0; i < r->n; i++)
            if (!r->order[i].accumulate_grad && r->order[i].seq &&
                r->order[i].seq < oldest)
                oldest = r->order[i].seq;
        gt__replay_free(r);
    }
    int s;
    while ((s = sqlite3_step(calls)) == SQLITE_ROW) {
        int64_t b = sqlite3_column_int64(calls, 0), bseq = sqlite3_column_int64(calls, 1);
        if (only && b > only)
            break;
        if (only && b < only && bseq < oldest)
            continue;
        if ((rc = diagnose_backward(&c, b, !only || b == only)) != 0)
            goto out;
    }
    if (s != SQLITE_DONE && s != SQLITE_ROW) {
        rc = gt__dx_sql_fail(&c);
        goto out;
    }
    if (!only && (rc = gt__dx_raised_at_op(&c)) != 0)
        goto out;
    if (!only && (rc = gt__dx_refused(&c)) != 0)
        goto out;
    if ((rc = gt__dx_cut(&c)) != 0)
        goto out;
    if ((rc = gt__dx_ddp_unused(&c)) != 0)
        goto out;
    size_t silent_from = c.f->n;
    if ((rc = gt__diagnose_silent(t, only, c.f)) != 0)
        goto out;
    size_t silent_to = c.f->n;
    drop_explained(c.f, silent_from, &silent_to);
    /* Never silent when PyTorch raised: an error of the family that no
     * finding explains is a finding of its own. */
    if ((rc = gt__dx_unexplained(&c, 0)) != 0)
        goto out;
    /* The finders have found; the suggester reads each finding (but the
     * writes PyTorch cannot see, whose fix is in their kind's text) and
     * writes its fix. */
    for (size_t k = 0; k < c.f->n && !rc; k++)
        if (k < silent_from || k >= silent_to)
            rc = gt__dx_suggest(&c, &c.f->v[k]);
    if (rc)
        goto out;
    /* A lookup that ran out of memory read as "not found": the findings
     * may name or suggest the wrong thing. */
    if (c.oom) {
        rc = gt__dx_nomem(&c);
        goto out;
    }
    gt__trace_clear(t); /* what a best-effort lookup met is no failure */
    *out = c.f;
    c.f = NULL;
out:
    /* the trace keeps them (gt_trace_stmt), none left on a row */
    sqlite3_reset(calls);
    sqlite3_reset(c.saved);
    sqlite3_reset(c.silent);
    sqlite3_reset(c.silent_window);
    sqlite3_reset(c.silent_size);
    gt_tensor_row_release(&c.trow);
    sqlite3_reset(c.bwerr);
    sqlite3_reset(c.op);
    gt__replayer_free(c.rp);
    gt__imap_clear(&c.freed);
    gt__imap_clear(&c.tcache);
    tcache_clear(&c);
    free(c.tv);
    free(c.cwd);
    gt_findings_free(c.f);
    return rc;
}
