/* gradtrace diagnose: replay backward from a trace and name which mutation
 * invalidated which saved tensor. Text for a person at a terminal, or
 * --json (built only with SQLite's JSON functions; the shape is the
 * contract of issue 4). Exit: 0 no findings, 1 findings, 2 usage/input. */
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gradtrace/recorder.h>

#include "cmd.h"
#include "multi.h"
#include "pymsg.h"
#include "diagnose.h"
#include "replay.h"
#include "strbuf.h"
#include "termtext.h"

/* ---- tiny query helpers ------------------------------------------------ */

/* The trace's connection with the statements this command prepared, kept
 * for reuse (keyed by the address of their SQL text, always a literal):
 * the output asks the same few queries for every finding. */
typedef struct qdb {
    sqlite3 *db;
    size_t n;
    struct {
        const char *sql;
        sqlite3_stmt *st;
    } c[48];
} qdb;

/* The prepared statement for `sql`, reset and unbound; NULL on error. */
static sqlite3_stmt *qprep(qdb *q, const char *sql)
{
    sqlite3_stmt *st = NULL;
    for (size_t i = 0; i < q->n; i++)
        if (q->c[i].sql == sql)
            return q->c[i].st;
    if (q->n == sizeof q->c / sizeof q->c[0] ||
        sqlite3_prepare_v3(q->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK)
        return NULL;
    q->c[q->n].sql = sql;
    q->c[q->n++].st = st;
    return st;
}

/* Finalize every kept statement; accepts an empty one. */
static void qdb_release(qdb *q)
{
    for (size_t i = 0; i < q->n; i++)
        sqlite3_finalize(q->c[i].st);
    q->n = 0;
}

/* Run `sql` with parameters described by `types` ('i': int64_t, 's': const
 * char * (NULL binds NULL), 'j': JSON text bound as text) and return the
 * first column of the first row, malloc'd; NULL for no row or SQL NULL.
 * On an SQLite error *rc is set to GT_ESQL. */
static char *qtext(qdb *db, int *rc, const char *sql, const char *types, ...)
{
    sqlite3_stmt *st = qprep(db, sql);
    char *out = NULL;
    va_list ap;
    if (!st) {
        *rc = GT_ESQL;
        return NULL;
    }
    va_start(ap, types);
    for (int i = 0; types[i]; i++) {
        if (types[i] == 'i') {
            sqlite3_bind_int64(st, i + 1, va_arg(ap, int64_t));
        } else {
            const char *s = va_arg(ap, const char *);
            if (s)
                sqlite3_bind_text(st, i + 1, s, -1, SQLITE_STATIC);
            else
                sqlite3_bind_null(st, i + 1);
        }
    }
    va_end(ap);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        if (t && !(out = strdup(t)))
            *rc = GT_ENOMEM;
    } else if (s != SQLITE_DONE) {
        *rc = GT_ESQL;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return out;
}

/* ---- JSON, through SQLite's json functions ----------------------------- */

/* LOC of a stack: {"file", "line", "function", "code"} of its innermost user
 * frame (its own frame if none is marked); SQL NULL for no stack. */
#define LOC_SQL(stack_expr)                                                               \
    "SELECT json_object('file', sf.text, 'line', f.line, 'function', sfn.text, "          \
    "'code', sc.text) FROM stacks s JOIN frames f ON f.id = coalesce(s.user_frame, "      \
    "s.frame) LEFT JOIN strings sf ON sf.id = f.file LEFT JOIN strings sfn ON "           \
    "sfn.id = f.function LEFT JOIN strings sc ON sc.id = f.code WHERE s.id = " stack_expr

static char *loc_json(qdb *db, int *rc, int64_t stack)
{
    return qtext(db, rc, LOC_SQL("?1"), "i", stack);
}

/* The backward calls (all, or only `bw`) that ran nodes whose forward ran
 * before recording started: nodes no recorded op made (not accumulators),
 * first seen once the call began; not a torch.func transform's own call
 * (its forward ran inside the same transform call, whose nodes the ops
 * under it do not make). What changed their saved tensors before
 * recording started cannot be in the trace, so a run diagnosed clean is
 * only clean for what the recording saw: a JSON array of {backward,
 * location, nodes, first}, for a note in the text. */
static char *outside_json(qdb *db, int *rc, int64_t bw)
{
    return qtext(db, rc,
                 "SELECT json_group_array(json_object('backward', id, 'location', json(("
                 LOC_SQL("stack") ")), 'nodes', n, 'first', (SELECT t.text FROM nodes x"
                 " JOIN strings t ON t.id = x.name WHERE x.id = m))) FROM ("
                 " SELECT b.id, b.stack, count(*) AS n, min(n.id) AS m"
                 " FROM backward_calls b JOIN nodes n ON n.op IS NULL AND n.seq > b.seq"
                 "  AND n.seq <= coalesce(b.end_seq, n.seq) AND n.variable IS NULL"
                 "  AND n.name != (SELECT id FROM strings WHERE text = 'AccumulateGrad')"
                 " WHERE (?1 = 0 OR b.id = ?1) AND NOT EXISTS (SELECT 1 FROM stacks k"
                 "  JOIN frames f ON f.id = k.frame JOIN strings sf ON sf.id = f.file"
                 "  WHERE k.id = b.stack AND (sf.text LIKE '%/_functorch/%'"
                 "  OR sf.text LIKE '%/functorch/_src/%'))"
                 " GROUP BY b.id ORDER BY b.id)",
                 "i", bw);
}

/* "true" if code compiled with torch.compile ran eagerly while recording
 * (the dispatch adapter's case: TorchDynamo does not compile under a
 * dispatch mode): a recorded op's user frame lies inside a frame of
 * TorchDynamo's eval_frame.py, i.e. the compiled function's own Python ran.
 * Ops of a compiled graph have no user frame inside it. */
static char *compiled_eager_json(qdb *db, int *rc)
{
    return qtext(db, rc,
                 "WITH RECURSIVE up(start, id, d) AS (SELECT id, id, 0 FROM stacks"
                 " UNION ALL SELECT up.start, s.parent, up.d + 1 FROM stacks s"
                 " JOIN up ON s.id = up.id WHERE s.parent IS NOT NULL AND up.d < 128),"
                 " at(start, d, user, dyn) AS (SELECT up.start, up.d,"
                 " s.frame = (SELECT user_frame FROM stacks WHERE id = up.start),"
                 " sf.text LIKE '%/torch/_dynamo/eval_frame.py' FROM up"
                 " JOIN stacks s ON s.id = up.id JOIN frames f ON f.id = s.frame"
                 " JOIN strings sf ON sf.id = f.file)"
                 " SELECT CASE WHEN EXISTS (SELECT 1 FROM at u JOIN at e ON e.start = u.start"
                 " AND e.dyn AND u.user AND u.d < e.d) THEN 'true' ELSE 'false' END",
                 "");
}

static char *names_json(qdb *db, int *rc, int64_t tensor)
{
    return qtext(db, rc, "SELECT json_group_array(text) FROM (" GT__NAMES_SQL ")", "i",
                 tensor);
}

static const char *tf(int b) { return b ? "true" : "false"; }

/* Join JSON values into one array in a single pass: each element was built
 * by SQLite's JSON functions, so the commas and brackets are all that is
 * added here. Returns a malloc'd string, NULL (with *rc = GT_ENOMEM) when out
 * of memory. */
static char *join_array(int *rc, char **items, size_t n)
{
    gt_strbuf b = {0};
    gt_strbuf_add(&b, "[", 1);
    for (size_t i = 0; i < n; i++) {
        if (i)
            gt_strbuf_add(&b, ",", 1);
        gt_strbuf_add(&b, items[i], strlen(items[i]));
    }
    gt_strbuf_add(&b, "]", 1);
    if (b.oom) {
        free(b.p);
        *rc = GT_ENOMEM;
        return NULL;
    }
    return b.p;
}

static void free_items(char **items, size_t n)
{
    for (size_t i = 0; items && i < n; i++)
        free(items[i]);
    free(items);
}

static char *mutations_json(qdb *db, int *rc, const gt_finding *f)
{
    char **items = calloc(f->n_mutations ? f->n_mutations : 1, sizeof *items);
    size_t n = 0;
    char *arr = NULL;
    if (!items) {
        *rc = GT_ENOMEM;
        return NULL;
    }
    for (size_t i = 0; i < f->n_mutations && !*rc; i++) {
        const gt_mutation *m = &f->mutations[i];
        char *stack = m->seq ? qtext(db, rc, "SELECT stack FROM ops WHERE seq = ?1", "i",
                                     m->seq)
                             : NULL;
        int64_t sid = stack ? strtoll(stack, NULL, 10) : m->stack;
        char *loc = sid ? loc_json(db, rc, sid) : NULL;
        char *names = names_json(db, rc, m->tensor);
        char *one = qtext(
            db, rc,
            "SELECT json_object('seq', CASE WHEN ?1 = 0 THEN NULL ELSE ?1 END, 'op', (SELECT s.text FROM ops o JOIN strings s "
            "ON s.id = o.name WHERE o.seq = ?1), 'version_after', CASE WHEN ?2 < 0 THEN NULL "
            "ELSE ?2 END, 'location', json(?3), 'names', json(coalesce(?4, '[]')), "
            "'tensor', CASE WHEN ?5 = 0 THEN NULL ELSE ?5 END, 'bump_seq', CASE WHEN ?6 = 0 THEN NULL ELSE ?6 END, "
            "'phase', (SELECT p.name FROM ops o JOIN phases p ON p.id = o.phase "
            "WHERE o.seq = ?1), 'attempted', json(CASE WHEN ?1 = 0 AND ?7 = 0 "
            "THEN 'true' "
            "ELSE 'false' END))",
            "iissiii", m->seq, m->version_after, loc, names, m->tensor, m->bump_seq,
            /* a swap recorded at its `.data =` line: a write with no op */
            (int64_t)(f->kind == GT_FINDING_SILENT_STORAGE_SWAP));
        free(stack);
        free(loc);
        free(names);
        if (one)
            items[n++] = one;
    }
    if (!*rc)
        arr = join_array(rc, items, n);
    free_items(items, n);
    return arr;
}

/* For the node of a custom autograd Function ("MyExpBackward", no digit
 * after "Backward"), the stack of the line that called it: the node's op
 * ran inside MyExp.forward, and the user wants the apply() line. 0 when
 * the node is not one, or no such frame is recorded. */
static int64_t custom_function_caller(qdb *db, int *rc, int64_t node, int64_t stack)
{
    char *name = qtext(db, rc, "SELECT s.text FROM nodes n JOIN strings s ON s.id = n.name "
                               "WHERE n.id = ?1", "i", node);
    char fwd[160];
    size_t n = name ? strlen(name) : 0;
    int64_t out = 0;
    if (n <= 8 || strcmp(name + n - 8, "Backward") != 0) {
        free(name);
        return 0;
    }
    snprintf(fwd, sizeof fwd, "%.*s.forward", (int)(n - 8), name);
    free(name);
    int inside = 0;
    for (int depth = 0; stack && depth < 256 && !*rc; depth++) {
        char *fn = qtext(db, rc,
                         "SELECT coalesce(sf.text, '') FROM stacks s JOIN frames f ON f.id = "
                         "coalesce(s.user_frame, s.frame) LEFT JOIN strings sf ON sf.id = "
                         "f.function WHERE s.id = ?1", "i", stack);
        if (!fn)
            break;
        int here = !strcmp(fn, fwd);
        free(fn);
        if (inside && !here) {
            out = stack;
            break;
        }
        inside |= here;
        if (!inside)
            break; /* the op did not run inside forward */
        char *parent = qtext(db, rc, "SELECT parent FROM stacks WHERE id = ?1", "i", stack);
        stack = parent ? strtoll(parent, NULL, 10) : 0;
        free(parent);
    }
    return out;
}

/* For a node made by a call into user code recorded as one op (a custom
 * Function's apply, a checkpointed call: nodes.op is that op, at the
 * calling line), the stack of the line inside the called function that
 * used `tensor`: the first op of the call that reads it without writing it
 * (else any op of the call reading it, else the op that made the node's
 * output). The call's ops lie between its op and the last node it made.
 * 0 when the node's op is an aten op or nothing is found. */
static int64_t call_inner_stack(qdb *db, int *rc, int64_t node, int64_t tensor)
{
    char *s = qtext(
        db, rc,
        "WITH c AS (SELECT n.op AS s, (SELECT max(m.seq) FROM nodes m WHERE m.op = n.op)"
        "  AS u, (SELECT coalesce(k.user_frame, k.frame) FROM stacks k WHERE k.id = o.stack)"
        "  AS f FROM nodes n JOIN ops o ON o.seq = n.op JOIN strings sn ON sn.id = o.name"
        "  WHERE n.id = ?1 AND instr(sn.text, '::') = 0), "
        /* the call's ops that ran inside it (not PyTorch's own at the call line) */
        "i AS (SELECT o.seq FROM ops o JOIN stacks k ON k.id = o.stack, c"
        "  WHERE o.seq > c.s AND o.seq <= c.u"
        "  AND coalesce(k.user_frame, k.frame) IS NOT c.f) "
        "SELECT o.stack FROM ops o WHERE o.seq = coalesce("
        " (SELECT min(a.op) FROM op_args a JOIN i ON i.seq = a.op WHERE a.tensor = ?2"
        "  AND a.role = 0 AND NOT EXISTS (SELECT 1 FROM op_args w"
        "  WHERE w.op = a.op AND w.role = 2 AND w.tensor = ?2)),"
        " (SELECT min(a.op) FROM op_args a JOIN i ON i.seq = a.op WHERE a.tensor = ?2"
        "  AND a.role = 0),"
        " (SELECT t.created_by FROM node_outputs no JOIN tensors t ON t.id = no.tensor"
        "  JOIN i ON i.seq = t.created_by WHERE no.node = ?1"
        "  ORDER BY no.output_nr LIMIT 1))",
        "ii", node, tensor);
    int64_t out = s ? strtoll(s, NULL, 10) : 0;
    free(s);
    return out;
}

static int is_view_kind(int kind)
{
    return kind == GT_FINDING_VIEW_MULTI_OUTPUT_INPLACE ||
           kind == GT_FINDING_VIEW_NO_GRAD_INPLACE || kind == GT_FINDING_VIEW_INFERENCE_INPLACE ||
           kind == GT_FINDING_VIEW_CUSTOM_FUNCTION_INPLACE;
}

/* A tensor as {"tensor", "dtype", "shape", "names"}. */
static char *tensor_json(qdb *db, int *rc, int64_t tensor)
{
    char *names = names_json(db, rc, tensor);
    char *out = qtext(db, rc,
                      "SELECT json_object('tensor', t.id, 'dtype', s.text, 'shape', "
                      "json(t.shape), 'names', json(coalesce(?2, '[]'))) FROM tensors t "
                      "LEFT JOIN strings s ON s.id = t.dtype WHERE t.id = ?1",
                      "is", tensor, names);
    free(names);
    return out;
}

/* The view kinds' "view": the view changed in place and where it was
 * made; unexplained's "candidates"; both added to the finding's doc. */
static char *finding_extra(qdb *db, int *rc, const gt_finding *f, char *doc)
{
    char *view = NULL, *cands = NULL, *origin = NULL, *out = NULL;
    if (is_view_kind(f->kind) || (f->kind == GT_FINDING_LEAF_INPLACE && f->view_op)) {
        if (f->view_op) {
            char *stack = qtext(db, rc, "SELECT stack FROM ops WHERE seq = ?1", "i",
                                f->view_op);
            char *loc = stack ? loc_json(db, rc, strtoll(stack, NULL, 10)) : NULL;
            origin = qtext(db, rc,
                           "SELECT json_object('seq', o.seq, 'op', s.text, 'grad_mode', "
                           "json(CASE o.grad_mode WHEN 0 THEN 'false' ELSE 'true' END), "
                           "'location', json(?2)) FROM ops o LEFT JOIN strings s "
                           "ON s.id = o.name WHERE o.seq = ?1",
                           "is", f->view_op, loc);
            free(stack);
            free(loc);
        }
        char *t = f->tensor && f->kind != GT_FINDING_LEAF_INPLACE
                      ? tensor_json(db, rc, f->tensor)
                      : NULL;
        view = qtext(db, rc,
                     "SELECT json_set(coalesce(?1, json_object('tensor', NULL)), "
                     "'$.variable', ?3, '$.expression', ?4, '$.origin', json(?2))",
                     "ssss", t, origin, f->name, f->written);
        free(t);
    }
    if (f->kind == GT_FINDING_UNEXPLAINED) {
        char **items = calloc(f->n_candidates ? f->n_candidates : 1, sizeof *items);
        size_t n = 0;
        if (!items) {
            *rc = GT_ENOMEM;
            goto out;
        }
        for (size_t i = 0; i < f->n_candidates && !*rc; i++)
            if ((items[n] = tensor_json(db, rc, f->candidates[i])) != NULL)
                n++;
        if (!*rc)
            cands = join_array(rc, items, n);
        free_items(items, n);
    }
    if (!*rc)
        out = qtext(db, rc,
                    "SELECT json_set(?1, '$.view', json(?2), '$.candidates', json(?3), "
                    "'$.mismatch', json(CASE ?4 WHEN 1 THEN 'true' WHEN 0 THEN 'false' END), "
                    "'$.error_seq', CASE WHEN ?5 = 0 THEN NULL ELSE ?5 END, "
                    "'$.outside_recording', json(CASE ?6 WHEN 1 THEN 'true' "
                    "WHEN 0 THEN 'false' END))",
                    "sssiii", doc, view, cands,
                    (int64_t)(f->kind == GT_FINDING_UNEXPLAINED ? f->mismatch : -1),
                    f->error_seq,
                    (int64_t)(f->kind == GT_FINDING_UNEXPLAINED ? f->outside_recording
                                                                : -1));
out:
    free(view);
    free(cands);
    free(origin);
    return out;
}

static char *finding_json(qdb *db, int *rc, const gt_finding *f)
{
    char *bw_stack = NULL, *bw_loc = NULL, *node_stack = NULL, *node_loc = NULL;
    char *saved_names = NULL, *muts = NULL, *other_loc = NULL, *other_stack = NULL;
    char *where = NULL, *out = NULL, *inner_loc = NULL;

    if (f->backward) {
        bw_stack = qtext(db, rc, "SELECT stack FROM backward_calls WHERE id = ?1", "i",
                         f->backward);
        bw_loc = bw_stack ? loc_json(db, rc, strtoll(bw_stack, NULL, 10)) : NULL;
    }
    if (f->other_backward) {
        other_stack = qtext(db, rc, "SELECT stack FROM backward_calls WHERE id = ?1", "i",
                            f->other_backward);
        other_loc = other_stack ? loc_json(db, rc, strtoll(other_stack, NULL, 10)) : NULL;
    }
    if (f->node) {
        node_stack = qtext(db, rc,
                           "SELECT o.stack FROM nodes n JOIN ops o ON o.seq = n.op "
                           "WHERE n.id = ?1",
                           "i", f->node);
        int64_t ns = node_stack ? strtoll(node_stack, NULL, 10) : 0;
        int64_t caller = custom_function_caller(db, rc, f->node, ns);
        node_loc = ns ? loc_json(db, rc, caller ? caller : ns) : NULL;
        if (caller) {
            inner_loc = loc_json(db, rc, ns);
        } else if (ns) {
            int64_t in = call_inner_stack(db, rc, f->node, f->tensor);
            if (in)
                inner_loc = loc_json(db, rc, in);
        }
    }
    if (f->stack)
        where = loc_json(db, rc, f->stack);
    if (f->tensor)
        saved_names = names_json(db, rc, f->tensor);
    muts = mutations_json(db, rc, f);
    if (*rc)
        goto out;

    out = qtext(
        db, rc,
        "SELECT json_object("
        " 'kind', ?1,"
        " 'first_to_fail', json(?2),"
        " 'backward', CASE WHEN ?3 = 0 THEN NULL ELSE json_object('index', ?3,"
        "   'location', json(?4), 'retain_graph', json(CASE (SELECT retain_graph FROM"
        "   backward_calls WHERE id = ?3) WHEN 0 THEN 'false' ELSE 'true' END)) END,"
        " 'node', CASE WHEN ?5 = 0 THEN NULL ELSE json_object('id', ?5,"
        "   'name', (SELECT s.text FROM nodes n JOIN strings s ON s.id = n.name"
        "   WHERE n.id = ?5), 'location', json(?6),"
        "   'sequence_nr', (SELECT sequence_nr FROM nodes WHERE id = ?5)) END,"
        " 'saved', CASE WHEN ?7 = 0 THEN NULL ELSE json_object("
        "   'slot', (SELECT s.text FROM saved_tensors st JOIN strings s ON s.id = st.slot"
        "   WHERE st.seq = ?7), 'tensor', ?8,"
        "   'dtype', (SELECT s.text FROM tensors t JOIN strings s ON s.id = t.dtype"
        "   WHERE t.id = ?8), 'shape', json((SELECT shape FROM tensors WHERE id = ?8)),"
        "   'names', json(coalesce(?9, '[]')), 'saved_version', ?10,"
        "   'version_at_backward', CASE WHEN ?11 < 0 THEN NULL ELSE ?11 END) END,"
        " 'mutations', json(?12),"
        " 'suggestion', ?13,"
        " 'matches_error', CASE ?14 WHEN 1 THEN json('true') WHEN 0 THEN json('false')"
        "   ELSE NULL END,"
        " 'freed_by', CASE WHEN ?15 = 0 THEN NULL ELSE json_object('index', ?15,"
        "   'location', json(?16)) END,"
        " 'leaf', CASE WHEN ?1 != 'leaf_inplace' THEN NULL ELSE json_object("
        "   'tensor', CASE WHEN ?17 = 0 THEN NULL ELSE ?17 END,"
        "   'dtype', (SELECT s.text FROM tensors t JOIN strings s ON s.id = t.dtype"
        "   WHERE t.id = ?17), 'shape', json((SELECT shape FROM tensors WHERE id = ?17)),"
        "   'names', CASE WHEN json_array_length(coalesce(?9, '[]')) = 0 AND ?19 IS NOT"
        "   NULL THEN json_array(?19) ELSE json(coalesce(?9, '[]')) END,"
        "   'expression', ?20) END,"
        " 'location', json(?18))",
        "ssisisiisiissiisisss", gt_finding_kind_name(f->kind), tf(f->first_to_fail),
        f->backward, bw_loc, f->node, node_loc, f->saved_seq, f->tensor, saved_names,
        f->saved_version, f->version_at_backward, muts, f->suggestion,
        (int64_t)f->matches_error, f->other_backward, other_loc,
        f->kind == GT_FINDING_LEAF_INPLACE ? f->tensor : (int64_t)0, where, f->name,
        f->written);
    if (out && f->error_seq && f->matches_error == 1 && f->tensor) {
        /* Under vmap PyTorch's message shows one sample's shape, the trace
         * the batched tensor: both are shown ('saved.error_shape'). */
        char *msg = qtext(db, rc, "SELECT message FROM errors WHERE seq = ?1", "i",
                          f->error_seq);
        gt_pymsg m;
        if (msg) {
            gt__pymsg_parse(msg, &m);
            static const char sql_es[] =
                "SELECT CASE WHEN (SELECT replace(replace(shape, '[', ''), ']', '')"
                " FROM tensors WHERE id = ?2) != ?3 THEN json_set(?1,"
                " '$.saved.error_shape', json('[' || ?3 || ']')) ELSE ?1 END";
            char *with = m.has_versions ? qtext(db, rc, sql_es, "sis", out, f->tensor, m.shape)
                                        : NULL;
            if (with) {
                free(out);
                out = with;
            }
        }
        free(msg);
    }
    if (out && inner_loc) {
        char *with = qtext(db, rc, "SELECT json_set(?1, '$.node.inner_location', json(?2))",
                           "ss", out, inner_loc);
        if (with) {
            free(out);
            out = with;
        }
    }
    if (out) {
        char *full = finding_extra(db, rc, f, out);
        free(out);
        out = full;
    }
out:
    free(bw_stack);
    free(bw_loc);
    free(other_stack);
    free(other_loc);
    free(node_stack);
    free(node_loc);
    free(inner_loc);
    free(where);
    free(saved_names);
    free(muts);
    return out;
}

/* The run's error: the last one recorded (the one that ended it). */
static char *error_json(qdb *db, int *rc)
{
    char *stack = qtext(db, rc, "SELECT coalesce(stack, 0) FROM errors ORDER BY seq DESC "
                                "LIMIT 1", "");
    if (!stack)
        return NULL;
    char *loc = loc_json(db, rc, strtoll(stack, NULL, 10));
    char *out = qtext(db, rc,
                      "SELECT json_object('type', s.text, 'message', e.message, "
                      "'location', json(?1), 'backward', e.backward, 'seq', e.seq) "
                      "FROM errors e LEFT JOIN strings s ON s.id = e.type "
                      "ORDER BY e.seq DESC LIMIT 1",
                      "s", loc);
    free(stack);
    free(loc);
    return out;
}

/* Every finding as one JSON document each, in the findings' order, into
 * *docs (malloc'd array of fs->n strings; free with free_items). */
static char **findings_docs(qdb *db, int *rc, const gt_findings *fs)
{
    char **docs = calloc(fs->n ? fs->n : 1, sizeof *docs);
    if (!docs) {
        *rc = GT_ENOMEM;
        return NULL;
    }
    for (size_t i = 0; i < fs->n && !*rc; i++) {
        docs[i] = finding_json(db, rc, &fs->v[i]);
        if (!docs[i] && !*rc)
            *rc = GT_ESQL;
    }
    return docs;
}

/* ---- text -------------------------------------------------------------- */

typedef struct style {
    const char *bold, *red, *yellow, *cyan, *dim, *green, *reset;
} style;

static const style plain = {"", "", "", "", "", "", ""};
static const style ansi = {"\033[1m", "\033[1;31m", "\033[33m", "\033[36m",
                           "\033[2m", "\033[32m",   "\033[0m"};

/* json_extract(doc, path) as text, or "" (static buffer reused per call
 * slot: callers copy what they keep). */
static char *jx(qdb *db, const char *doc, const char *path)
{
    int rc = 0;
    char *v = qtext(db, &rc, "SELECT json_extract(?1, ?2)", "ss", doc, path);
    return v ? v : strdup("");
}

/* Like jx, for text shown to the user: trace text may hold control
 * characters, shown as visible escapes (termtext.h). Never for a value
 * that is parsed again as JSON. */
static char *jt(qdb *db, const char *doc, const char *path)
{
    char *v = jx(db, doc, path);
    char *t = v ? gt_term_text(v) : NULL;
    free(v);
    return t ? t : strdup("");
}

/* A path relative to the current directory when it lies below it. */
static const char *rel(const char *path, const char *cwd)
{
    size_t n = strlen(cwd);
    if (n && !strncmp(path, cwd, n) && path[n] == '/')
        return path + n + 1;
    return path;
}

static char *names_text(qdb *db, const char *doc, const char *path)
{
    int rc = 0;
    char *v = qtext(db, &rc,
                    "SELECT group_concat(value, ', ') FROM json_each(?1, ?2)", "ss", doc,
                    path);
    char *t = v ? gt_term_text(v) : NULL;
    free(v);
    return t ? t : strdup("");
}

/* "  label  file:line  (in function)" then the code line. */
static void print_loc(FILE *o, qdb *db, const style *st, const char *cwd,
                      const char *label, const char *loc)
{
    if (!loc || !loc[0] || !strcmp(loc, "null")) {
        fprintf(o, "    %-11s %s(location unknown)%s\n", label, st->dim, st->reset);
        return;
    }
    char *file = jt(db, loc, "$.file"), *line = jt(db, loc, "$.line");
    char *fn = jt(db, loc, "$.function"), *code = jx(db, loc, "$.code");
    /* a notebook cell (named "In [3]" by the recorder) reads as Jupyter's */
    const char *sep = !strncmp(file, "In [", 4) ? ", line " : ":";
    fprintf(o, "    %-11s %s%s%s%s%s%s%s%s\n", label, st->cyan, rel(file, cwd), sep, line,
            st->reset,
            fn[0] ? "  in " : "", fn, "");
    const char *c = code;
    while (*c == ' ' || *c == '\t')
        c++;
    if (*c) {
        fprintf(o, "    %11s %s%5s |%s ", "", st->dim, line, st->reset);
        gt_term_puts(o, c);
        fputc('\n', o);
    }
    free(file);
    free(line);
    free(fn);
    free(code);
}

static void print_finding(FILE *o, qdb *db, const style *st, const char *cwd,
                          const char *doc, size_t index)
{
    char *kind = jt(db, doc, "$.kind"), *ftf = jx(db, doc, "$.first_to_fail");
    char *node = jt(db, doc, "$.node.name"), *slot = jt(db, doc, "$.saved.slot");
    char *dtype = jt(db, doc, "$.saved.dtype"), *shape = jt(db, doc, "$.saved.shape");
    char *sv = jt(db, doc, "$.saved.saved_version");
    char *va = jt(db, doc, "$.saved.version_at_backward");
    char *bi = jt(db, doc, "$.backward.index"), *fb = jt(db, doc, "$.freed_by.index");
    char *names = names_text(db, doc, "$.saved.names");
    char *sugg = jt(db, doc, "$.suggestion"), *match = jx(db, doc, "$.matches_error");
    char *bloc = jx(db, doc, "$.backward.location"), *nloc = jx(db, doc, "$.node.location");
    char *floc = jx(db, doc, "$.freed_by.location"), *loc = jx(db, doc, "$.location");
    const char *nm = names[0] ? names : "a tensor";

    fprintf(o, "%s[%zu] %s%s", st->bold, index, st->reset, st->red);
    if (!strcmp(kind, "inplace_invalidated_saved"))
        fprintf(o, "%s modified in place after %s saved it as %s (version %s -> %s)", nm,
                node, slot, sv, va);
    else if (!strcmp(kind, "silent_storage_write")) {
        /* a c10d collective writes in place without bumping the version */
        char *wop = jt(db, doc, "$.mutations[0].op");
        if (!strncmp(wop, "c10d::", 6))
            fprintf(o, "%s overwritten by the collective %s, which autograd cannot see, "
                       "after %s saved it as %s: gradients are silently wrong",
                    nm, wop, node, slot);
        else
            fprintf(o, "%s overwritten through an alias autograd cannot see, after %s "
                       "saved it as %s: gradients are silently wrong",
                    nm, node, slot);
        free(wop);
    }
    else if (!strcmp(kind, "silent_saved_write"))
        fprintf(o, "%s's bytes changed between %s saving it as %s and backward using it, "
                   "with no write autograd saw: gradients are silently wrong",
                nm, node, slot);
    else if (!strcmp(kind, "silent_storage_swap"))
        fprintf(o, "%s swapped to other memory after %s saved it as %s: backward read the "
                   "new data, gradients are silently wrong",
                nm, node, slot);
    else if (!strcmp(kind, "backward_twice"))
        fprintf(o, "backward #%s reached %s, whose saved tensors backward #%s already freed",
                bi, node, fb);
    else if (!strcmp(kind, "leaf_inplace")) {
        /* named as the raising line writes it ("v1[0]", "x[:, 1]"), with the
         * leaf's own names when they differ */
        char *ln = names_text(db, doc, "$.leaf.names");
        char *ex = jt(db, doc, "$.leaf.expression"), *vw = jx(db, doc, "$.view.origin.seq");
        const char *e = ex ? ex : "", *l = ln ? ln : ""; /* (out of memory: "") */
        if (e[0] && vw && vw[0])
            fprintf(o, "in-place operation on %s, a view of %s%s", e, l[0] ? l : "a leaf",
                    l[0] ? ", a leaf tensor that requires grad" : " that requires grad");
        else if (e[0] && l[0] && strcmp(e, l) != 0)
            fprintf(o, "in-place operation on %s (%s), a leaf tensor that requires grad", e,
                    l);
        else
            fprintf(o, "in-place operation on %s, a leaf tensor that requires grad",
                    e[0] ? e : l[0] ? l : "a leaf");
        free(ln);
        free(ex);
        free(vw);
    } else if (!strcmp(kind, "unexplained")) {
        char *out = jx(db, doc, "$.outside_recording");
        if (!strcmp(out, "1"))
            fprintf(o, "the run raised an in-place error about a graph whose forward ran "
                       "before recording started: outside the recording");
        else
            fprintf(o, "the run raised an in-place error that the replay cannot pin to a "
                       "write");
        free(out);
    } else {
        char *var = jt(db, doc, "$.view.expression"), *vop = jt(db, doc, "$.view.origin.op");
        if (!var || !var[0]) {
            free(var);
            var = jt(db, doc, "$.view.variable");
        }
        const char *what = !strcmp(kind, "view_multi_output_inplace")
                               ? "an output of a function that returns several views"
                           : !strcmp(kind, "view_no_grad_inplace")
                               ? "a view made under torch.no_grad()"
                           : !strcmp(kind, "view_inference_inplace")
                               ? "a view made in torch.inference_mode()"
                               : "a view returned by a custom autograd Function";
        fprintf(o, "in-place operation on %s, %s%s%s%s", var && var[0] ? var : "a view",
                what,
                vop[0] ? " (" : "", vop, vop[0] ? ")" : "");
        free(var);
        free(vop);
    }
    fprintf(o, "%s  %s[%s%s]%s\n", st->reset, st->dim, kind,
            !strcmp(ftf, "1") ? ", first to fail" : "", st->reset);

    int at_op = strncmp(kind, "view_", 5) == 0 || !strcmp(kind, "leaf_inplace") ||
                !strcmp(kind, "unexplained");
    if (!strcmp(kind, "unexplained")) {
        print_loc(o, db, st, cwd, "raised at", loc);
        char *c = NULL;
        int rc = 0;
        static const char sql_cands[] = "SELECT value FROM json_each(?1, '$.candidates')";
        sqlite3_stmt *cs = qprep(db, sql_cands);
        int n = 0;
        if (cs) {
            sqlite3_bind_text(cs, 1, doc, -1, SQLITE_STATIC);
            while (sqlite3_step(cs) == SQLITE_ROW) {
                const char *t = (const char *)sqlite3_column_text(cs, 0);
                char *tn = t ? names_text(db, t, "$.names") : NULL;
                char *td = t ? jt(db, t, "$.dtype") : NULL, *ts = t ? jt(db, t, "$.shape") : NULL;
                fprintf(o, "    %-11s %s (%s %s)\n", n++ ? "" : "candidates",
                        tn && tn[0] ? tn : "a tensor", td ? td : "", ts ? ts : "");
                free(tn);
                free(td);
                free(ts);
            }
            sqlite3_reset(cs);
            sqlite3_clear_bindings(cs);
        }
        if (!n)
            fprintf(o, "    %-11s %sno recorded tensor matches the message's dtype, shape "
                       "and version%s\n", "candidates", st->dim, st->reset);
        (void)c;
        (void)rc;
    } else if (at_op) {
        print_loc(o, db, st, cwd, "raised at", loc);
        char *has_view = jx(db, doc, "$.view.origin.seq");
        int show_view = strncmp(kind, "view_", 5) == 0 || has_view[0];
        free(has_view);
        if (show_view) {
            char *oloc = jx(db, doc, "$.view.origin.location");
            char *gm = jx(db, doc, "$.view.origin.grad_mode");
            char *vn = names_text(db, doc, "$.view.names");
            if (oloc[0]) {
                char *vop = jt(db, doc, "$.view.origin.op");
                print_loc(o, db, st, cwd, "view from", oloc);
                fprintf(o, "    %11s %s%-20s%s made %s%s\n", "", st->yellow, vop, st->reset,
                        vn[0] ? vn : "the view",
                        !strcmp(gm, "0") ? " with grad mode off" : "");
                free(vop);
            } else {
                fprintf(o, "    %-11s %s(the op that made it is not in the trace)%s\n",
                        "view from", st->dim, st->reset);
            }
            free(oloc);
            free(gm);
            free(vn);
        }
    }
    if (!at_op) {
        print_loc(o, db, st, cwd, "saved at", nloc);
        fprintf(o, "    %11s %s saved %s%s%s%s%s (%s %s) at version %s\n", "", node,
                st->bold, slot[0] ? slot : "?", st->reset, names[0] ? " = " : "", names,
                dtype, shape, sv);
        char *iloc = jx(db, doc, "$.node.inner_location");
        if (iloc && iloc[0])
            print_loc(o, db, st, cwd, "used inside", iloc);
        free(iloc);
    }

    /* The writes, grouped by consecutive location (one pass over them). */
    char *prev = NULL;
    sqlite3_stmt *ms = NULL;
    static const char sql_muts[] = "SELECT value FROM json_each(?1, '$.mutations')";
    if ((ms = qprep(db, sql_muts)) != NULL) {
        sqlite3_bind_text(ms, 1, doc, -1, SQLITE_STATIC);
        while (sqlite3_step(ms) == SQLITE_ROW) {
            const char *m = (const char *)sqlite3_column_text(ms, 0);
            if (!m)
                continue;
            char *mloc = jx(db, m, "$.location"), *op = jt(db, m, "$.op");
            char *ver = jt(db, m, "$.version_after"), *mn = names_text(db, m, "$.names");
            char *att = jx(db, m, "$.attempted");
            int skip = !strcmp(att, "1"); /* the raising line, shown above */
            free(att);
            if (skip) {
                free(mloc);
                free(op);
                free(ver);
                free(mn);
                continue;
            }
            if (!prev || strcmp(prev, mloc) != 0)
                print_loc(o, db, st, cwd,
                          !strcmp(kind, "silent_storage_write")  ? "written at"
                          : !strcmp(kind, "silent_storage_swap") ? (op && op[0] ? "noticed at"
                                                                          : "swapped at")
                          : !strcmp(kind, "silent_saved_write")  ? "touched at"
                          : !strcmp(kind, "unexplained")         ? "last written"
                                                                 : "modified at",
                          mloc);
            fprintf(o, "    %11s %s%-20s%s %s%s%s\n", "", st->yellow, op, st->reset,
                    mn[0] ? mn : "", ver[0] ? " -> version " : "", ver);
            free(prev);
            prev = mloc;
            free(op);
            free(ver);
            free(mn);
        }
    }
    if (ms) {
        sqlite3_reset(ms);
        sqlite3_clear_bindings(ms);
    }
    free(prev);

    if (!strcmp(kind, "backward_twice")) {
        print_loc(o, db, st, cwd, "freed by", floc);
        fprintf(o, "    %11s backward #%s ran without retain_graph=True\n", "", fb);
    }
    if (bi[0]) {
        print_loc(o, db, st, cwd, "needed by", bloc);
        if (!strcmp(kind, "inplace_invalidated_saved"))
            fprintf(o, "    %11s backward #%s found version %s, expected %s\n", "", bi, va, sv);
        else
            fprintf(o, "    %11s backward #%s\n", "", bi);
    }
    if (!strcmp(kind, "unexplained")) {
        char *mm = jx(db, doc, "$.mismatch");
        if (!strcmp(mm, "1"))
            fprintf(o, "    %-11s %sthe finding marked first to fail for this backward "
                       "does not match PyTorch's message%s\n", "error", st->yellow,
                    st->reset);
        else
            fprintf(o, "    %-11s %sno finding matches the error PyTorch raised%s\n",
                    "error", st->yellow, st->reset);
        free(mm);
    } else if (strcmp(ftf, "1") != 0 && match[0])
        fprintf(o, "    %-11s %snot the one PyTorch raised: it stops at the first stale "
                   "tensor%s\n", "error", st->dim, st->reset);
    else if (!strcmp(match, "1")) {
        char *es = jx(db, doc, "$.saved.error_shape");
        if (es && es[0])
            fprintf(o, "    %-11s %smatches the error PyTorch raised%s (its message shows "
                       "%s, one vmap sample; the trace holds the batched %s)\n", "error",
                    st->green, st->reset, es, shape);
        else
            fprintf(o, "    %-11s %smatches the error PyTorch raised%s\n", "error", st->green,
                    st->reset);
        free(es);
    } else if (!strcmp(match, "0"))
        fprintf(o, "    %-11s %sdoes not match the error PyTorch raised%s\n", "error",
                st->yellow, st->reset);
    if (sugg[0])
        fprintf(o, "    %s%-11s%s %s\n", st->green, "fix", st->reset, sugg);
    fputc('\n', o);

    free(kind);
    free(ftf);
    free(node);
    free(slot);
    free(dtype);
    free(shape);
    free(sv);
    free(va);
    free(bi);
    free(fb);
    free(names);
    free(sugg);
    free(match);
    free(bloc);
    free(nloc);
    free(floc);
    free(loc);
}

static void print_text(FILE *o, qdb *db, const style *st, const char *path_arg,
                       gt_trace *t, const char *broken, const char *err,
                       const char *outside, char **docs, size_t n)
{
    char cwd[4096];
    char *tr = gt_term_text(path_arg);
    const char *trace = tr ? tr : path_arg;
    if (!getcwd(cwd, sizeof cwd))
        cwd[0] = 0;
    if (gt_trace_stopped_seq(t)) {
        fprintf(o, "%snote:%s recording stopped early, after event %" PRId64 " (", st->yellow,
                st->reset, gt_trace_stopped_seq(t));
        gt_term_puts(o, gt_trace_stopped_reason(t));
        fprintf(o, "); what came after is not in the trace\n");
    } else if (gt_trace_partial(t)) {
        fprintf(o, "%snote:%s the trace is partial (the recording did not finish: the "
                   "process was killed or is still running); diagnosing what was committed\n",
                st->yellow, st->reset);
    }
    if (broken[0]) {
        fprintf(o, "%snote:%s the trace's rows do not fit together (", st->yellow, st->reset);
        gt_term_puts(o, broken);
        fprintf(o, "): a damaged file; what they held is not diagnosed\n");
    }
    if (err && strcmp(err, "null") != 0) {
        char *type = jt(db, err, "$.type"), *msg = jx(db, err, "$.message");
        char *first = msg;
        char *nl = strchr(first, '\n');
        if (nl)
            *nl = 0;
        fprintf(o, "%s: the run raised %s%s%s: ", trace, st->bold, type, st->reset);
        gt_term_puts(o, first);
        fputc('\n', o);
        free(type);
        free(msg);
    }
    sqlite3_stmt *os = outside ? qprep(db, "SELECT json_extract(value, '$.backward'),"
                                           " json_extract(value, '$.location.file') || ':' ||"
                                           " json_extract(value, '$.location.line'),"
                                           " json_extract(value, '$.nodes'),"
                                           " json_extract(value, '$.first')"
                                           " FROM json_each(?1)")
                               : NULL;
    if (os) {
        sqlite3_bind_text(os, 1, outside, -1, SQLITE_STATIC);
        while (sqlite3_step(os) == SQLITE_ROW) {
            const char *w = (const char *)sqlite3_column_text(os, 1);
            fprintf(o, "%snote:%s backward #%lld%s%s ran %lld node%s whose forward ran before "
                       "recording started (the first: %s): a change to their saved tensors before "
                       "recording started is not in the trace; record from before the "
                       "forward to check them\n",
                    st->yellow, st->reset, (long long)sqlite3_column_int64(os, 0),
                    w ? " at " : "", w ? rel(w, cwd) : "",
                    (long long)sqlite3_column_int64(os, 2),
                    sqlite3_column_int64(os, 2) == 1 ? "" : "s",
                    (const char *)sqlite3_column_text(os, 3));
        }
        sqlite3_reset(os);
        sqlite3_clear_bindings(os);
    }
    if (n == 0) {
        fprintf(o, "%s: no findings: no saved tensor %s modified before the backward that "
                   "needed it\n",
                trace, outside && strcmp(outside, "[]") ? "the recording saw was" : "was");
        free(tr);
        return;
    }
    fprintf(o, "%s: %zu finding%s\n\n", trace, n, n == 1 ? "" : "s");
    for (size_t i = 0; i < n; i++)
        print_finding(o, db, st, cwd, docs[i], i + 1);
    free(tr);
}

/* ---- command ----------------------------------------------------------- */

static void usage(FILE *o)
{
    fprintf(o,
            "usage: gradtrace diagnose [options] TRACE... | DIR\n"
            "\n"
            "Replay each backward call of TRACE and report every saved tensor that was\n"
            "changed between its save and the backward that needed it, every in-place\n"
            "error PyTorch raised at the op (leaf, views), and any in-place error the\n"
            "replay cannot pin (kind unexplained): a run that raised one always gets a\n"
            "finding. Several traces (the ranks of a distributed run) or a directory:\n"
            "each rank diagnosed, each distinct finding printed once with the ranks it\n"
            "was found on.\n"
            "\n"
            "options:\n"
            "  --json              print the findings as JSON\n"
            "  --backward N        only backward call N (1-based, in call order)\n"
            "  --color WHEN        colour the text: auto (default, on a terminal),\n"
            "                      always, never\n"
            "  -h, --help          show this help\n"
            "\n"
            "exit status: 0 no findings, 1 findings, 2 usage or input error, or no\n"
            "findings in a trace whose rows do not fit together (a damaged file)\n");
}

int gt_cmd_diagnose(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"backward", required_argument, NULL, 'b'},
        {"color", required_argument, NULL, 'c'},
        {"colour", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int json = 0, color = -1, ch, status = 2;
    long long backward = 0;
    gt_trace *t = NULL;
    gt_findings *fs = NULL;
    qdb db = {0};
    char err[1024];
    char *fjson = NULL, *ejson = NULL, *ojson = NULL, *cjson = NULL, *doc = NULL,
         **docs = NULL;

    optind = 0;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "hb:", longopts, NULL)) != -1) {
        switch (ch) {
        case 'j':
            json = 1;
            break;
        case 'b': {
            char *end;
            backward = strtoll(optarg, &end, 10);
            if (*optarg == 0 || *end != 0 || backward < 1) {
                fprintf(stderr, "gradtrace: diagnose: --backward wants a call number "
                                "(1, 2, ...), not '%s'\n", optarg);
                return 2;
            }
            break;
        }
        case 'c':
            if (!strcmp(optarg, "always"))
                color = 1;
            else if (!strcmp(optarg, "never"))
                color = 0;
            else if (!strcmp(optarg, "auto"))
                color = -1;
            else {
                fprintf(stderr, "gradtrace: diagnose: --color wants auto, always or never\n");
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return gt_usage_error("diagnose", usage, "%s '%s'",
                                  optopt && ch == ':' ? "missing value for option"
                                                      : "unknown option",
                                  argv[optind - 1]);
        }
    }
    if (gt_multi_wanted(argc - optind, argv + optind)) /* ranks: multi.h */
        return gt_multi_diagnose(argc - optind, argv + optind, json, backward);
    if (optind != argc - 1)
        return gt_usage_error("diagnose", usage, "%s",
                              optind >= argc ? "missing trace file" : "too many arguments");
    const char *path = argv[optind];
    if (gt_trace_open(path, &t, err, sizeof err) != 0) {
        fprintf(stderr, "gradtrace: %s\n", err);
        return 2;
    }
    if (gt_trace_note(t)) /* what opening did: a killed trace finished */
        fprintf(stderr, "gradtrace: note: %s\n", gt_trace_note(t));
    gt_diagnose_options opts = {.backward = backward};
    if (gt_diagnose(t, &opts, &fs, err, sizeof err) != 0) {
        fprintf(stderr, "gradtrace: diagnose %s: %s\n", path, err);
        goto out;
    }
    db = (qdb){.db = gt_trace_db(t)};
    int rc = 0;
    char broken[512];
    gt_trace_check_links(t, broken, sizeof broken);
    docs = findings_docs(&db, &rc, fs);
    if (!rc)
        fjson = join_array(&rc, docs, fs->n);
    ejson = error_json(&db, &rc);
    if (!rc)
        ojson = outside_json(&db, &rc, (int64_t)backward);
    if (!rc)
        cjson = compiled_eager_json(&db, &rc);
    if (!rc && fjson)
        doc = qtext(&db, &rc,
                    "SELECT json_object('trace', ?1, 'partial', json(?2), 'error', json(?3),"
                    " 'findings', json(?4), 'stopped', CASE WHEN ?5 > 0 THEN"
                    " json_object('seq', ?5, 'reason', ?6) END, 'inconsistent', ?7,"
                    " 'outside_recording', json(coalesce(?8, '[]')),"
                    " 'compiled_ran_eagerly', json(coalesce(?9, 'false')))",
                    "ssssissss", path, tf(gt_trace_partial(t)), ejson, fjson,
                    (int64_t)gt_trace_stopped_seq(t), gt_trace_stopped_reason(t),
                    broken[0] ? broken : NULL, ojson, cjson);
    if (rc || !doc) {
        fprintf(stderr, "gradtrace: diagnose %s: cannot read trace: %s\n", path,
                rc == GT_ENOMEM ? "out of memory" : sqlite3_errmsg(db.db));
        goto out;
    }
    if (json) {
        printf("%s\n", doc);
    } else {
        if (color < 0)
            color = isatty(STDOUT_FILENO) && !getenv("NO_COLOR");
        if (cjson && !strcmp(cjson, "true"))
            printf("%snote:%s torch.compile'd code ran eagerly while recording (TorchDynamo "
                   "does not compile under the dispatch mode gradtrace records with): the "
                   "findings are about the eager run; a bug only the compiled code has is "
                   "not in the trace\n",
                   color ? ansi.yellow : plain.yellow, color ? ansi.reset : plain.reset);
        print_text(stdout, &db, color ? &ansi : &plain, path, t, broken, ejson, ojson, docs,
                   fs->n);
    }
    /* A damaged trace with only unexplained errors is still "none found in
     * a damaged trace" (2), with the errors shown. */
    size_t pinned = 0;
    for (size_t i = 0; i < fs->n; i++)
        pinned += fs->v[i].kind != GT_FINDING_UNEXPLAINED;
    status = pinned ? 1 : broken[0] ? 2 : fs->n ? 1 : 0;
out:
    if (fflush(stdout) != 0 && status != 2) {
        fprintf(stderr, "gradtrace: diagnose: cannot write output\n");
        status = 2;
    }
    free(doc);
    free(fjson);
    free(ejson);
    free(ojson);
    free(cjson);
    free_items(docs, fs ? fs->n : 0);
    gt_findings_free(fs);
    qdb_release(&db);
    gt_trace_close(t);
    return status;
}
