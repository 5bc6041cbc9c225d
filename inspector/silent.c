/* Writes PyTorch cannot see: findings from the facts the recorder keeps for
 * them (schema v3), apart from the replay of version counters.
 *
 * silent_storage_swap: a tensor a node saved was found on another storage
 * (storage_swaps: `t.data = other`, `set_` outside the dispatcher) before a
 * backward call that ran the node. The node saved the tensor object itself,
 * so backward reads the new memory: no version bump, no error, wrong
 * gradients. The line that swapped is not an op: the adapter records a
 * `.data =` assignment where it happens (op and backward NULL, its stack the
 * assigning line), and the finding's location is that line; a swap noticed
 * later gives the interval it happened in (the last op that saw the old
 * storage, and the op or backward call that noticed the new one).
 *
 * silent_saved_write: the fingerprint of a saved tensor's elements when its
 * node ran (saved_fingerprints, sampled by default, --check-saved=full for
 * every element) differs from the one at save, and no version bump
 * explains it: something autograd cannot see wrote the memory (a NumPy
 * view, DLPack, __array_interface__, a custom kernel). Its writes are the
 * recorded ops between save and use that wrote a tensor on the same
 * storage, if any; a write outside torch has no op, and the fix says after
 * which line it happened: the last recorded op that made a tensor on that
 * memory (`detach`, a view: what was handed out). A finding of the sampled
 * check says so. */
#include "diagnose_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include "strbuf.h"
#include "trace_int.h"

/* For each swap of a saved tensor, the saved rows saved before it and the
 * backward call that needed them (a node whose forward ran before recording
 * started is first read by the call that reaches it, after the swap: its
 * rows count as saved before any swap the recording saw): the call whose start noticed
 * the swap, else the first call after it; the node must have run in it (node_execs),
 * unless the call has no node_execs at all (PyTorch without them). */
static const char sql_swaps[] =
    "WITH sw AS ("
    "  SELECT w.seq, w.tensor, w.op, w.backward, w.last_seen, w.stack,"
    "    coalesce(w.backward, (SELECT b.id FROM backward_calls b WHERE b.seq > w.seq"
    "      ORDER BY b.seq LIMIT 1)) AS bw"
    "  FROM storage_swaps w)"
    " SELECT sw.seq, sw.tensor, sw.op, sw.bw, st.seq, st.node, st.version,"
    "  (SELECT o.stack FROM ops o WHERE o.seq = (SELECT max(o2.seq)"
    "    FROM ops o2 WHERE o2.seq <= sw.last_seen)),"
    "  sw.stack,"
    "  sw.stack, sw.op IS NULL AND sw.backward IS NULL"
    " FROM sw JOIN saved_tensors st ON st.tensor = sw.tensor"
    " WHERE sw.bw IS NOT NULL AND (?1 = 0 OR sw.bw = ?1)"
    "  AND (st.seq < sw.seq OR (st.seq > sw.seq AND EXISTS (SELECT 1 FROM nodes n"
    "   JOIN backward_calls b ON b.id = sw.bw WHERE n.id = st.node AND n.op IS NULL"
    "   AND n.seq > b.seq AND st.seq > b.seq)))"
    "  AND (EXISTS (SELECT 1 FROM node_execs x WHERE x.backward = sw.bw AND x.node = "
    "st.node)"
    "   OR NOT EXISTS (SELECT 1 FROM node_execs x WHERE x.backward = sw.bw))"
    " ORDER BY sw.bw, st.seq";

/* "file:line" of the innermost user frame of stack column `col` of st
 * (gt_trace_loc), malloc'd into *out; NULL when it has none or the trace
 * cannot say. Returns 0, or GT_ENOMEM with the message on t. */
static int where(gt_trace *t, sqlite3_stmt *st, int col, char **out)
{
    gt_loc l;
    int rc = gt_trace_loc(t, sqlite3_column_int64(st, col), &l);
    *out = NULL;
    if (rc == 1 && l.file) {
        /* relative to the working directory, as diagnose's other paths */
        char *cwd = getcwd(NULL, 0);
        const char *file = gt__path_below(l.file, cwd);
        size_t n = strlen(file) + 24;
        if (!(*out = malloc(n)))
            rc = gt__trace_fail(t, GT_ENOMEM, "out of memory");
        else
            snprintf(*out, n, "%s:%lld", file, (long long)l.line);
        free(cwd);
    }
    gt_loc_release(&l);
    return rc == GT_ENOMEM ? rc : 0; /* a stack it cannot read: no line */
}

/* Append one finding to f, growing f->v to exactly its new size. */
static gt_finding *append(gt_findings *f)
{
    gt_finding *v = realloc(f->v, (f->n + 1) * sizeof *v);
    if (!v)
        return NULL;
    f->v = v;
    gt_finding *x = &v[f->n++];
    memset(x, 0, sizeof *x);
    x->saved_version = -1;
    x->version_at_backward = -1;
    x->matches_error = -1;
    return x;
}

/* The condition that saved tensor `st` (an alias of saved_tensors) is a
 * slot its node's backward does not read (gt__dx_slot_unread). */
#define UNREAD_SLOT(st)                                                                  \
    "EXISTS (SELECT 1 FROM strings sl, nodes n, strings nn WHERE sl.id = " st ".slot"    \
    " AND n.id = " st ".node AND nn.id = n.name"                                         \
    " AND sl.text IN ('running_mean', 'running_var')"                                    \
    " AND nn.text LIKE '%BatchNorm%Backward%')"                                          \
    " AND EXISTS (SELECT 1 FROM saved_tensors r JOIN strings rs ON rs.id = r.slot"       \
    " JOIN tensors rt ON rt.id = r.tensor WHERE r.node = " st ".node"                    \
    " AND rs.text = 'result1' AND json_valid(rt.shape) AND json_array_length(rt.shape) " \
    "> 0"                                                                                \
    " AND NOT EXISTS (SELECT 1 FROM json_each(rt.shape) WHERE value = 0))"

/* Fingerprints at save and at use that differ, with nothing the version
 * counter saw (the saved version still current when the node ran), of a
 * slot the node's backward reads (a training-mode BatchNorm's running
 * statistics, updated by every forward, are not). */
static const char sql_prints[] =
    "SELECT u.backward, st.seq, st.node, st.tensor, st.version, u.seq, t.storage"
    " FROM saved_fingerprints s JOIN saved_fingerprints u ON u.saved = s.saved"
    "  AND u.at_use = 1 AND s.at_use = 0"
    " JOIN saved_tensors st ON st.seq = s.saved LEFT JOIN tensors t ON t.id = st.tensor"
    " WHERE (s.hash != u.hash OR s.nbytes != u.nbytes) AND (?1 = 0 OR u.backward = ?1)"
    "  AND NOT EXISTS (SELECT 1 FROM version_bumps b JOIN tensors bt ON bt.id = b.tensor"
    "   WHERE bt.version_counter = t.version_counter AND b.seq > st.seq AND b.seq < u.seq"
    "   AND b.version > st.version)"
    "  AND NOT (" UNREAD_SLOT("st") ")"
                                    " ORDER BY u.seq";

/* The recorded writes between a save and its use to a tensor on the same
 * storage (from the tensors on it: the storage and written-argument
 * indexes, never a scan of op_args). */
static const char sql_writes[] =
    "SELECT a.op, min(a.tensor) FROM tensors t JOIN op_args a ON a.tensor = t.id"
    " AND a.role = 2 WHERE t.storage = ?1 AND a.op > ?2 AND a.op < ?3"
    " GROUP BY a.op ORDER BY a.op LIMIT 32";

/* The last recorded op between a save and its use that made a tensor on
 * the same storage (`detach`, a view: memory handed out), with its name. */
static const char sql_handed[] =
    "SELECT o.stack, s.text FROM tensors t JOIN ops o ON o.seq = t.created_by"
    " JOIN strings s ON s.id = o.name WHERE t.storage = ?1 AND t.created_by > ?2"
    " AND t.created_by < ?3 ORDER BY t.created_by DESC LIMIT 1";

/* How the run fingerprinted saved tensors: run.options.check_saved, a mode
 * name, or true (a trace from before the modes: every byte). */
static const char sql_mode[] =
    "SELECT CASE json_type(options, '$.check_saved') WHEN 'true' THEN 'full'"
    " WHEN 'text' THEN json_extract(options, '$.check_saved') END FROM run"
    " WHERE json_valid(options)";

/* The fix of a saved write: what wrote it, after which line (handed: the
 * handing-out op's stack and name, else none), and whether the check that
 * found it was sampled. Returns the malloc'd text, NULL when out of memory
 * (with the message on t). */
static char *saved_write_fix(gt_trace *t, sqlite3_stmt *handed, int sampled)
{
    char *after = NULL;
    gt_strbuf buf = GT_STRBUF_INIT;
    gt_strbuf_adds(&buf, "the saved bytes changed with no version bump: a write autograd "
                         "cannot see (a NumPy view, DLPack, __array_interface__, a "
                         "custom kernel)");
    if (sqlite3_step(handed) == SQLITE_ROW) {
        if (where(t, handed, 0, &after) != 0) {
            gt_strbuf_release(&buf);
            return NULL;
        }
        if (after)
            gt_strbuf_addf(&buf,
                           ", after %s (%s, the last recorded op to hand this "
                           "memory out)",
                           after, (const char *)sqlite3_column_text(handed, 1));
    }
    gt_strbuf_adds(&buf, "; clone() the tensor before handing its memory out, or write "
                         "through a torch op");
    if (sampled)
        gt_strbuf_adds(&buf, " (found by the sampled check, which reads a few KB of each "
                             "saved tensor; --check-saved=full reads every element)");
    free(after);
    char *out = gt_strbuf_detach(&buf);
    if (!out)
        gt__trace_fail(t, GT_ENOMEM, "out of memory");
    return out;
}

/* 1 if one of f's first n findings already says how the tensor saved at
 * `saved_seq` changed before backward call `bw` (a recorded write through an
 * alias, silent_storage_write): its changed fingerprint says no more. */
static int explained(const gt_findings *f, size_t n, int64_t bw, int64_t saved_seq)
{
    for (size_t i = 0; i < n; i++)
        if (f->v[i].saved_seq == saved_seq && f->v[i].backward == bw)
            return 1;
    return 0;
}

static int saved_writes(gt_trace *t, int64_t only, gt_findings *f)
{
    sqlite3 *db = gt_trace_db(t);
    sqlite3_stmt *st = NULL, *writes = NULL, *handed = NULL, *mode = NULL;
    int rc = 0, s, sampled = 0;
    if (!(st = gt_trace_stmt(t, sql_prints)) ||
        !(writes = gt_trace_stmt(t, sql_writes)) ||
        !(handed = gt_trace_stmt(t, sql_handed)) ||
        !(mode = gt_trace_stmt(t, sql_mode))) {
        rc = gt_trace_errcode(t);
        goto out;
    }
    if (sqlite3_step(mode) == SQLITE_ROW && sqlite3_column_text(mode, 0))
        sampled = !strcmp((const char *)sqlite3_column_text(mode, 0), "sampled");
    sqlite3_bind_int64(st, 1, only);
    size_t before = f->n; /* the finders' before this one */
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (explained(f, before, sqlite3_column_int64(st, 0),
                      sqlite3_column_int64(st, 1)))
            continue;
        gt_finding *x = append(f);
        if (!x)
            goto nomem;
        x->kind = GT_FINDING_SILENT_SAVED_WRITE;
        x->backward = sqlite3_column_int64(st, 0);
        x->saved_seq = sqlite3_column_int64(st, 1);
        x->node = sqlite3_column_int64(st, 2);
        x->tensor = sqlite3_column_int64(st, 3);
        x->saved_version = sqlite3_column_int64(st, 4);
        sqlite3_stmt *q[] = {writes, handed};
        for (int i = 0; i < 2; i++) {
            sqlite3_reset(q[i]);
            sqlite3_bind_int64(q[i], 1, sqlite3_column_int64(st, 6));
            sqlite3_bind_int64(q[i], 2, x->saved_seq);
            sqlite3_bind_int64(q[i], 3, sqlite3_column_int64(st, 5));
        }
        while (sqlite3_step(writes) == SQLITE_ROW) {
            gt_mutation *m = realloc(x->mutations, (x->n_mutations + 1) * sizeof *m);
            if (!m)
                goto nomem;
            x->mutations = m;
            m[x->n_mutations++] = (gt_mutation){.seq = sqlite3_column_int64(writes, 0),
                                                .tensor = sqlite3_column_int64(writes, 1),
                                                .version_after = -1};
        }
        if (!(x->suggestion = saved_write_fix(t, handed, sampled))) {
            rc = GT_ENOMEM;
            goto out;
        }
    }
    if (s != SQLITE_DONE)
        goto fail_sql;
    goto out;
nomem:
    rc = gt__trace_fail(t, GT_ENOMEM, "out of memory");
    goto out;
fail_sql:
    rc = gt__trace_fail(t, GT_ECORRUPT, "cannot read trace: %s", sqlite3_errmsg(db));
out:
    sqlite3_reset(st);
    sqlite3_reset(writes);
    sqlite3_reset(handed);
    sqlite3_reset(mode);
    return rc;
}

/* The storage swaps of saved tensors (the calls' with `only`) into f.
 * Returns 0, or a negative GT_E* code with the message on t. */
static int swaps(gt_trace *t, int64_t only, gt_findings *f)
{
    sqlite3 *db = gt_trace_db(t);
    if (!gt__trace_has_table(t, "storage_swaps"))
        return 0; /* a v2 trace: no swap was looked for */
    sqlite3_stmt *st = NULL;
    int rc = 0;
    if (!(st = gt_trace_stmt(t, sql_swaps)))
        return gt_trace_errcode(t);
    sqlite3_bind_int64(st, 1, only);
    int s;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        gt_finding *x = append(f);
        gt_mutation *m = malloc(sizeof *m);
        if (!x || !m) {
            free(m);
            if (x)
                f->n--;
            rc = gt__trace_fail(t, GT_ENOMEM, "out of memory");
            goto out;
        }
        x->kind = GT_FINDING_SILENT_STORAGE_SWAP;
        x->backward = sqlite3_column_int64(st, 3);
        x->saved_seq = sqlite3_column_int64(st, 4);
        x->node = sqlite3_column_int64(st, 5);
        x->saved_version = sqlite3_column_int64(st, 6);
        x->tensor = sqlite3_column_int64(st, 1);
        x->stack = sqlite3_column_int64(st, 9);
        /* the op that noticed it (a write of no op: listed when an op saw
         * it, the interval is in the suggestion either way) */
        int at_assign = sqlite3_column_int(st, 10);
        m->seq = sqlite3_column_int64(st, 2);
        m->bump_seq = 0;
        m->tensor = x->tensor;
        m->version_after = -1;
        /* recorded at the assignment: the write itself, with no op row */
        m->stack = at_assign ? x->stack : 0;
        x->mutations = m;
        x->n_mutations = m->seq || m->stack ? 1 : 0;
        char *before = NULL, *after = NULL;
        if ((rc = where(t, st, 7, &before)) != 0 || (rc = where(t, st, 8, &after)) != 0) {
            free(before);
            goto out;
        }
        gt_strbuf buf = GT_STRBUF_INIT; /* paths as long as they are */
        const char *fix = "backward read the new memory with no version bump and no "
                          "error; change the values with `with torch.no_grad(): "
                          "x.copy_(new)` (a write autograd checks) or recompute the "
                          "forward after the change";
        if (at_assign && after) /* recorded at the assignment */
            gt_strbuf_addf(&buf,
                           "the tensor's storage was replaced by `.data =` at %s: %s",
                           after, fix);
        else
            gt_strbuf_addf(
                &buf,
                "the tensor's storage was replaced (`x.data = ...`, `set_`) %s%s%s%s: %s",
                before ? "after " : "", before ? before : "", after ? " and before " : "",
                after ? after : "", fix);
        free(before);
        free(after);
        if (!(x->suggestion = gt_strbuf_detach(&buf))) {
            rc = gt__trace_fail(t, GT_ENOMEM, "out of memory");
            goto out;
        }
    }
    if (s != SQLITE_DONE)
        goto fail_sql;
    goto out;
fail_sql:
    rc = gt__trace_fail(t, GT_ECORRUPT, "cannot read trace: %s", sqlite3_errmsg(db));
out:
    sqlite3_reset(st);
    return rc;
}

/* Swaps first: a saved tensor swapped to other memory also changed its
 * fingerprint, which then says no more (saved_writes skips it). */
int gt__diagnose_silent(gt_trace *t, int64_t only, gt_findings *f)
{
    int rc = swaps(t, only, f);
    if (rc == 0 && gt__trace_has_table(t, "saved_fingerprints"))
        rc = saved_writes(t, only, f);
    return rc;
}

/* Saved slots a node's backward does not read, by the node's name and a
 * condition on its other saved tensors. A write nobody reads is no silent
 * write: BatchNorm saves its running statistics, and in training mode (its
 * saved batch mean `result1` has elements) its backward uses the batch's
 * statistics instead (native_batch_norm_backward and the cuDNN, MIOpen and
 * with-update variants), so DDP's per-forward buffer broadcast into them
 * between two forwards and one backward changes nothing backward reads. */
static const char sql_unread[] =
    "SELECT 1 FROM saved_tensors st WHERE st.seq = ?1 AND " UNREAD_SLOT("st");

int gt__dx_slot_unread(gt__dctx *c, int64_t saved_seq)
{
    return gt__dx_int(c, sql_unread, saved_seq, 0, NULL, 0) != 0;
}

/* 1 if tensor `tensor` was made by an op run under torch.func's vmap (a
 * frame of its vmap implementation on the op's stack: torch/_functorch/ in
 * 2.x, the functorch package's _src in 1.13). */
int gt__dx_under_vmap(gt__dctx *c, int64_t tensor)
{
    static const char sql[] =
        "WITH RECURSIVE up(id, d) AS (SELECT o.stack, 0 FROM tensors t JOIN ops o"
        "  ON o.seq = t.created_by WHERE t.id = ?1"
        " UNION ALL SELECT s.parent, d + 1 FROM stacks s JOIN up ON s.id = up.id"
        "  WHERE s.parent IS NOT NULL AND d < 256)"
        " SELECT 1 FROM up JOIN stacks s ON s.id = up.id JOIN frames f ON f.id = s.frame"
        " JOIN strings sf ON sf.id = f.file WHERE sf.text LIKE '%functorch%vmap.py' "
        "LIMIT 1";
    return gt__dx_int(c, sql, tensor, 0, NULL, 0) != 0;
}
