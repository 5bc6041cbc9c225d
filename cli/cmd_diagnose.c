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

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include "cmd.h"
#include "multi.h"
#include "pymsg.h"
#include "diagnose.h"
#include "replay.h"
#include "strbuf.h"
#include "termtext.h"

/* ---- tiny query helpers ------------------------------------------------ */

/* The trace and its connection: the statements this command runs are
 * prepared once and kept on the trace (gt_trace_stmt), shared with the
 * diagnosis's own lookups. */
typedef struct qdb {
    gt_trace *t;
    sqlite3 *db;
} qdb;

/* The prepared statement for `sql` (a literal), reset and unbound; NULL on
 * error. */
static sqlite3_stmt *qprep(qdb *q, const char *sql)
{
    return gt_trace_stmt(q->t, sql);
}

/* Run `sql` with parameters described by `types` ('i': int64_t, 's': const
 * char * (NULL binds NULL), 'j': JSON text bound as text) and return the
 * first column of the first row, malloc'd; NULL for no row or SQL NULL.
 * On an SQLite error *rc is set to GT_ESQL, out of memory to GT_ENOMEM. */
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
        int oom = 0;
        const char *t = gt_column_text(st, 0, &oom);
        if (oom || (t && !(out = strdup(t))))
            *rc = GT_ENOMEM;
    } else if (s != SQLITE_DONE) {
        *rc = GT_ESQL;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return out;
}

/* ---- JSON, through SQLite's json functions ----------------------------- */

/* {"file", "line", "function", "code"} of a stack's innermost user frame
 * (trace.h's gt_trace_loc), malloc'd; NULL for none. */
static char *loc_json(qdb *db, int *rc, int64_t stack)
{
    gt_loc l;
    int r = gt_trace_loc(db->t, stack, &l);
    if (r < 0) {
        *rc = r == GT_ENOMEM ? GT_ENOMEM : GT_ESQL;
        return NULL;
    }
    char *out = l.json;
    l.json = NULL;
    gt_loc_release(&l);
    return out;
}

/* loc_json of the stack of op `seq` (ops.seq), NULL for none or 0. */
static char *op_loc_json(qdb *db, int *rc, int64_t seq)
{
    char *stack =
        seq ? qtext(db, rc, "SELECT stack FROM ops WHERE seq = ?1", "i", seq) : NULL;
    char *loc = stack ? loc_json(db, rc, strtoll(stack, NULL, 10)) : NULL;
    free(stack);
    return loc;
}

/* The backward calls (all, or only `bw`) that ran nodes whose forward ran
 * before recording started: nodes no recorded op made (not accumulators),
 * first seen once the call began; not a torch.func transform's own call
 * (its forward ran inside the same transform call, whose nodes the ops
 * under it do not make). A node no recorded op made, seen before any call
 * began (an op while recording took a tensor it made: a saved tensor made
 * before recording started, changed while recording), counts for the
 * first call after it was seen. What changed their saved tensors before
 * recording started cannot be in the trace, so a run diagnosed clean is
 * only clean for what the recording saw: a JSON array of {backward,
 * location, nodes, first}, for a note in the text. */
static char *outside_json(qdb *db, int *rc, int64_t bw)
{
    static const char sql[] =
        "SELECT id, stack, n, (SELECT t.text FROM nodes x JOIN strings t ON t.id = x.name"
        " WHERE x.id = m) FROM ("
        " SELECT b.id, b.stack, count(*) AS n, min(n.id) AS m"
        " FROM backward_calls b JOIN nodes n ON n.op IS NULL AND (n.seq > b.seq"
        "  AND n.seq <= coalesce(b.end_seq, n.seq) OR n.seq < b.seq AND b.id ="
        "  (SELECT min(c.id) FROM backward_calls c WHERE c.seq > n.seq))"
        "  AND n.variable IS NULL"
        "  AND n.name != (SELECT id FROM strings WHERE text = 'AccumulateGrad')"
        " WHERE (?1 = 0 OR b.id = ?1) AND NOT EXISTS (SELECT 1 FROM stacks k"
        "  JOIN frames f ON f.id = k.frame JOIN strings sf ON sf.id = f.file"
        "  WHERE k.id = b.stack AND (sf.text LIKE '%/_functorch/%'"
        "  OR sf.text LIKE '%/functorch/_src/%'))"
        " GROUP BY b.id ORDER BY b.id)";
    sqlite3_stmt *st = qprep(db, sql);
    gt_strbuf b = GT_STRBUF_INIT;
    int s = SQLITE_ERROR;
    if (!st) {
        *rc = GT_ESQL;
        return NULL;
    }
    sqlite3_bind_int64(st, 1, bw);
    gt_strbuf_add(&b, "[", 1);
    while (!*rc && (s = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t stack = sqlite3_column_int64(st, 1);
        int oom = 0;
        const char *first = gt_column_text(st, 3, &oom);
        if (oom)
            *rc = GT_ENOMEM;
        char *loc = stack && !*rc ? loc_json(db, rc, stack) : NULL;
        char *one = *rc ? NULL
                        : qtext(db, rc,
                                "SELECT json_object('backward', ?1, 'location', json(?2),"
                                " 'nodes', ?3, 'first', ?4)",
                                "isis", sqlite3_column_int64(st, 0), loc,
                                sqlite3_column_int64(st, 2), first);
        if (one) {
            if (b.len > 1)
                gt_strbuf_add(&b, ",", 1);
            gt_strbuf_adds(&b, one);
        }
        free(loc);
        free(one);
    }
    if (!*rc && s != SQLITE_DONE)
        *rc = s == SQLITE_NOMEM ? GT_ENOMEM : GT_ESQL;
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    gt_strbuf_add(&b, "]", 1);
    if (!*rc && b.oom)
        *rc = GT_ENOMEM;
    if (*rc) {
        gt_strbuf_release(&b);
        return NULL;
    }
    return gt_strbuf_detach(&b);
}

/* "true" if code compiled with torch.compile ran eagerly while recording
 * (the dispatch adapter's case: TorchDynamo does not compile under a
 * dispatch mode): a recorded op's user frame lies inside a frame of
 * TorchDynamo's eval_frame.py, i.e. the compiled function's own Python ran.
 * Ops of a compiled graph have no user frame inside it. The wrapper of
 * torch._disable_dynamo (DisableContext: torch.utils.checkpoint, optimizer
 * internals) is in that file too and compiles nothing. Never for the engine
 * adapter (run.options.adapter), which records below TorchDynamo: there
 * compiled code runs compiled, inside the same frames. */
static char *compiled_eager_json(qdb *db, int *rc)
{
    /* Without a file of that name among the trace's strings, or without a
     * stack whose own frame is such a frame (joined as the walk below joins
     * it) on a trace of the dispatch adapter, the walk, up every stack of
     * the trace, cannot find one and is skipped (NULL reads as false): it
     * costs SQLite a cursor opened per step, most of a diagnosis of a trace
     * where torch.compile ran. The check names every column the walk names,
     * so that a trace lacking one fails here as it would fail there. */
    char *any =
        qtext(db, rc,
              "SELECT 1 FROM strings WHERE text LIKE '%/torch/_dynamo/eval_frame.py'"
              " LIMIT 1",
              "");
    if (!any)
        return NULL;
    free(any);
    any = qtext(db, rc,
                "SELECT 1 FROM stacks s JOIN frames f ON f.id = s.frame"
                " JOIN strings sf ON sf.id = f.file JOIN strings fn ON fn.id = f.function"
                " WHERE sf.text LIKE '%/torch/_dynamo/eval_frame.py'"
                " AND fn.text NOT LIKE 'DisableContext.%'"
                " AND (SELECT json_extract(options, '$.adapter') FROM run"
                " WHERE json_valid(options)) IS NOT 'engine'"
                " AND (s.parent, s.user_frame) IS NOT (NULL, -1) LIMIT 1",
                "");
    if (!any)
        return NULL;
    free(any);
    /* Per stack, its user frame (the nearest occurrence) lies below the
     * outermost eval_frame.py frame: one grouping of the walk, not a join
     * of the walk with itself (quadratic in the stacks' frames). */
    return qtext(
        db, rc,
        "WITH RECURSIVE up(start, id, d) AS (SELECT id, id, 0 FROM stacks"
        " UNION ALL SELECT up.start, s.parent, up.d + 1 FROM stacks s"
        " JOIN up ON s.id = up.id WHERE s.parent IS NOT NULL AND up.d < 128),"
        " at(start, d, user, dyn) AS (SELECT up.start, up.d,"
        " s.frame = (SELECT user_frame FROM stacks WHERE id = up.start),"
        " sf.text LIKE '%/torch/_dynamo/eval_frame.py'"
        " AND fn.text NOT LIKE 'DisableContext.%' FROM up"
        " JOIN stacks s ON s.id = up.id JOIN frames f ON f.id = s.frame"
        " JOIN strings sf ON sf.id = f.file JOIN strings fn ON fn.id = f.function)"
        " SELECT CASE WHEN (SELECT json_extract(options, '$.adapter') FROM run"
        " WHERE json_valid(options)) IS NOT 'engine'"
        " AND EXISTS (SELECT 1 FROM at GROUP BY start HAVING"
        " min(CASE WHEN user THEN d END) < max(CASE WHEN dyn THEN d END))"
        " THEN 'true' ELSE 'false' END",
        "");
}

/* The tensor's names as a JSON array (gt_trace_names_json); NULL on error. */
static char *names_json(qdb *db, int *rc, int64_t tensor)
{
    char *out = NULL;
    int r = gt_trace_names_json(db->t, tensor, &out);
    if (r < 0)
        *rc = r == GT_ENOMEM ? GT_ENOMEM : GT_ESQL;
    return out;
}

static const char *tf(int b)
{
    return b ? "true" : "false";
}

/* The kinds of an in-place op PyTorch refused for what its tensor is
 * (refused.c): their "target" is the tensor written and where it was made. */
static int is_refused_kind(int kind)
{
    return kind >= GT_FINDING_INPLACE_OVERLAP && kind <= GT_FINDING_RESIZE_REQUIRES_GRAD;
}

/* is_refused_kind for a kind's JSON name. */
static int refused_name(const char *kind)
{
    for (int k = GT_FINDING_INPLACE_OVERLAP; k <= GT_FINDING_RESIZE_REQUIRES_GRAD; k++)
        if (!strcmp(kind, gt_finding_kind_name(k)))
            return 1;
    return 0;
}

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
        char *stack =
            m->seq ? qtext(db, rc, "SELECT stack FROM ops WHERE seq = ?1", "i", m->seq)
                   : NULL;
        int64_t sid = stack ? strtoll(stack, NULL, 10) : m->stack;
        char *loc = sid ? loc_json(db, rc, sid) : NULL;
        char *names = names_json(db, rc, m->tensor);
        /* written through a view: its base's names, apart from its own */
        char *base =
            qtext(db, rc, "SELECT alias_of FROM tensors WHERE id = ?1", "i", m->tensor);
        char *base_names = base ? names_json(db, rc, strtoll(base, NULL, 10)) : NULL;
        char *one = qtext(
            db, rc,
            "SELECT json_object('seq', CASE WHEN ?1 = 0 THEN NULL ELSE ?1 END, "
            "'op', (SELECT s.text FROM ops o JOIN strings s "
            "ON s.id = o.name WHERE o.seq = ?1), 'version_after', CASE WHEN ?2 < 0 "
            "THEN NULL "
            "ELSE ?2 END, 'location', json(?3), 'names', json(coalesce(?4, '[]')), "
            "'tensor', CASE WHEN ?5 = 0 THEN NULL ELSE ?5 END, 'bump_seq', CASE "
            "WHEN ?6 = 0 THEN NULL ELSE ?6 END, "
            "'phase', (SELECT p.name FROM ops o JOIN phases p ON p.id = o.phase "
            "WHERE o.seq = ?1), 'attempted', json(CASE WHEN ?9 = 1 OR (?1 = 0 AND ?7 = "
            "0) "
            "THEN 'true' ELSE 'false' END), 'view_of', json(?8))",
            "iissiiisi", m->seq, m->version_after, loc, names, m->tensor, m->bump_seq,
            /* a swap recorded at its `.data =` line: a write with no op */
            (int64_t)(f->kind == GT_FINDING_SILENT_STORAGE_SWAP), base_names,
            /* a refused op raised: its write never happened */
            (int64_t)is_refused_kind(f->kind));
        free(base);
        free(base_names);
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
/* The name of node `node` when it is a custom autograd Function's
 * ("MyExpBackward", no digit after "Backward"), malloc'd; else NULL. */
static char *custom_function_name(qdb *db, int *rc, int64_t node)
{
    char *name = qtext(db, rc,
                       "SELECT s.text FROM nodes n JOIN strings s ON s.id = n.name "
                       "WHERE n.id = ?1",
                       "i", node);
    size_t n = name ? strlen(name) : 0;
    if (n <= 8 || strcmp(name + n - 8, "Backward") != 0) {
        free(name);
        return NULL;
    }
    return name;
}

static int custom_function_node(qdb *db, int *rc, int64_t node)
{
    char *name = custom_function_name(db, rc, node);
    free(name);
    return name != NULL;
}

static int64_t custom_function_caller(qdb *db, int *rc, int64_t node, int64_t stack)
{
    char *name = custom_function_name(db, rc, node);
    size_t n = name ? strlen(name) : 0;
    int64_t out = 0;
    if (!name)
        return 0;
    /* "NameBackward" -> "Name.forward" in place (both suffixes are 8 bytes),
     * as long as the class name is */
    char *fwd = name;
    memcpy(fwd + n - 8, ".forward", 9);
    int inside = 0;
    for (int depth = 0; stack && depth < 256 && !*rc; depth++) {
        gt_loc l;
        int r = gt_trace_loc(db->t, stack, &l);
        if (r < 0)
            *rc = r == GT_ENOMEM ? GT_ENOMEM : GT_ESQL;
        if (r != 1)
            break;
        int here = !strcmp(l.function ? l.function : "", fwd);
        gt_loc_release(&l);
        if (inside && !here) {
            out = stack;
            break;
        }
        inside |= here;
        if (!inside)
            break; /* the op did not run inside forward */
        if ((r = gt_trace_stack_parent(db->t, stack, &stack)) < 0) {
            *rc = r == GT_ENOMEM ? GT_ENOMEM : GT_ESQL;
            break;
        }
    }
    free(fwd);
    return out;
}

/* When the innermost user frame of `stack` is a function torch.compile
 * runs (its caller a frame under torch/_dynamo/) and its recorded line is
 * the function's first (a decorator or the def: TorchDynamo's code reports
 * no line of the body, and the trace has none of the generated code's
 * source comments): {"function", "call_location"} (that of the line that
 * called it), malloc'd; else NULL. */
static char *compiled_json(qdb *db, int *rc, int64_t stack)
{
    char *hit = qtext(
        db, rc,
        "WITH RECURSIVE up(id, d) AS (SELECT ?1, 0 UNION ALL SELECT s.parent, up.d + 1"
        " FROM stacks s JOIN up ON s.id = up.id WHERE s.parent IS NOT NULL"
        " AND up.d < 256)"
        " SELECT s.parent || ' ' || fn.text FROM up JOIN stacks s ON s.id = up.id"
        " JOIN frames f ON f.id = s.frame JOIN strings fn ON fn.id = f.function"
        " JOIN strings sc ON sc.id = f.code JOIN stacks p ON p.id = s.parent"
        " JOIN frames pf ON pf.id = p.frame JOIN strings sp ON sp.id = pf.file"
        " WHERE s.frame = (SELECT user_frame FROM stacks WHERE id = ?1)"
        " AND sp.text LIKE '%/torch/_dynamo/%' AND (ltrim(sc.text) LIKE '@%'"
        " OR ltrim(sc.text) LIKE 'def %' OR ltrim(sc.text) LIKE 'async def %')"
        " ORDER BY up.d LIMIT 1",
        "i", stack);
    char *out = NULL, *name = hit ? strchr(hit, ' ') : NULL;
    if (name) {
        char *call = loc_json(db, rc, strtoll(hit, NULL, 10));
        out =
            qtext(db, rc, "SELECT json_object('function', ?1, 'call_location', json(?2))",
                  "ss", name + 1, call ? call : "null");
        free(call);
    }
    free(hit);
    return out;
}

/* For the node of a custom autograd Function whose forward ran an op at
 * `inner`: the location of the one `save_for_backward(` line of the
 * function `inner` is in, read from the source file while it still holds
 * the recorded line (trace.h's gt_loc_find_in_function): save_for_backward
 * is no op, so the trace does not have it. As loc_json gives one; NULL
 * when no such line is found. */
static char *save_call_json(qdb *db, int *rc, int64_t inner)
{
    gt_loc l;
    int r = gt_trace_loc(db->t, inner, &l);
    if (r < 0) {
        *rc = r == GT_ENOMEM ? GT_ENOMEM : GT_ESQL;
        return NULL;
    }
    char *code = NULL, *out = NULL;
    int64_t line =
        r == 1 ? gt_loc_find_in_function(db->t, &l, "save_for_backward(", &code) : 0;
    if (line < 0)
        *rc = GT_ENOMEM;
    else if (line > 0)
        out = qtext(db, rc, "SELECT json_set(?1, '$.line', ?2, '$.code', ?3)", "sis",
                    l.json, line, code);
    free(code);
    gt_loc_release(&l);
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
        "  AS u, (SELECT " GT_USER_FRAME(
            "k") " FROM stacks k WHERE k.id = o.stack)"
                 "  AS f FROM nodes n JOIN ops o ON o.seq = n.op JOIN strings sn ON "
                 "sn.id = o.name"
                 "  WHERE n.id = ?1 AND instr(sn.text, '::') = 0), "
                 /* the call's ops that ran inside it (not PyTorch's own at the call line)
                  */
                 "i AS (SELECT o.seq FROM ops o JOIN stacks k ON k.id = o.stack, c"
                 "  WHERE o.seq > c.s AND o.seq <= c.u"
                 "  AND " GT_USER_FRAME(
                     "k") " IS NOT c.f) "
                          "SELECT o.stack FROM ops o WHERE o.seq = coalesce("
                          " (SELECT min(a.op) FROM op_args a JOIN i ON i.seq = a.op "
                          "WHERE a.tensor = ?2"
                          "  AND a.role = 0 AND NOT EXISTS (SELECT 1 FROM op_args w"
                          "  WHERE w.op = a.op AND w.role = 2 AND w.tensor = ?2)),"
                          " (SELECT min(a.op) FROM op_args a JOIN i ON i.seq = a.op "
                          "WHERE a.tensor = ?2"
                          "  AND a.role = 0),"
                          " (SELECT t.created_by FROM node_outputs no JOIN tensors t ON "
                          "t.id = no.tensor"
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
           kind == GT_FINDING_VIEW_NO_GRAD_INPLACE ||
           kind == GT_FINDING_VIEW_INFERENCE_INPLACE ||
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
    char *view = NULL, *cands = NULL, *origin = NULL, *out = NULL, *target = NULL;
    int refused = is_refused_kind(f->kind);
    if (is_view_kind(f->kind) || refused ||
        (f->kind == GT_FINDING_LEAF_INPLACE && f->view_op)) {
        if (f->view_op) {
            char *loc = op_loc_json(db, rc, f->view_op);
            origin = qtext(db, rc,
                           "SELECT json_object('seq', o.seq, 'op', s.text, 'grad_mode', "
                           "json(CASE o.grad_mode WHEN 0 THEN 'false' ELSE 'true' END), "
                           "'location', json(?2)) FROM ops o LEFT JOIN strings s "
                           "ON s.id = o.name WHERE o.seq = ?1",
                           "is", f->view_op, loc);
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
        if (refused) {
            /* the tensor written, and the operand the error is about */
            char *other = f->other ? tensor_json(db, rc, f->other) : NULL;
            target = qtext(db, rc, "SELECT json_set(?1, '$.other', json(?2))", "ss", view,
                           other);
            free(other);
            free(view);
            view = NULL;
        }
    }
    if (f->kind == GT_FINDING_UNEXPLAINED || f->kind == GT_FINDING_ROOT_WITHOUT_GRAD) {
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
    if (!*rc && (f->kind == GT_FINDING_ROOT_WITHOUT_GRAD ||
                 f->kind == GT_FINDING_GRAD_INPUT_UNREACHABLE)) {
        /* where the graph stopped reaching the root, and what it comes from */
        char *loc = op_loc_json(db, rc, f->view_op);
        char *mloc = op_loc_json(db, rc, f->op);
        char *input = f->other ? tensor_json(db, rc, f->other) : NULL;
        char *root = f->tensor ? tensor_json(db, rc, f->tensor) : NULL;
        char *cut = qtext(
            db, rc,
            "SELECT json_object('reason', ?1, 'seq', CASE WHEN ?2 = 0 THEN NULL ELSE ?2 "
            "END, "
            "'op', (SELECT s.text FROM ops o JOIN strings s ON s.id = o.name WHERE o.seq "
            "= ?2), "
            "'grad_mode', (SELECT json(CASE o.grad_mode WHEN 0 THEN 'false' ELSE 'true' "
            "END) "
            "FROM ops o WHERE o.seq = ?2), 'location', json(?3), 'input', json(?4), "
            "'made_at', json(?5), 'sources', json(?6))",
            "sissss", gt_cut_reason_name(f->cut), f->view_op, loc, input, mloc, cands);
        target = qtext(db, rc,
                       "SELECT json_set(coalesce(?1, json_object()), '$.cut', json(?2))",
                       "ss", root, cut);
        free(cands);
        cands = NULL;
        free(loc);
        free(mloc);
        free(input);
        free(root);
        free(cut);
    }
    if (!*rc)
        out = qtext(
            db, rc,
            "SELECT json_set(?1, '$.view', json(?2), '$.candidates', json(?3), "
            "'$.mismatch', json(CASE ?4 WHEN 1 THEN 'true' WHEN 0 THEN 'false' END), "
            "'$.error_seq', CASE WHEN ?5 = 0 THEN NULL ELSE ?5 END, "
            "'$.outside_recording', json(CASE ?6 WHEN 1 THEN 'true' "
            "WHEN 0 THEN 'false' END), '$.target', json(?7))",
            "sssiiis", doc, view, cands,
            (int64_t)(f->kind == GT_FINDING_UNEXPLAINED ? f->mismatch : -1), f->error_seq,
            (int64_t)(f->kind == GT_FINDING_UNEXPLAINED ? f->outside_recording : -1),
            target);
out:
    free(view);
    free(target);
    free(cands);
    free(origin);
    return out;
}

static char *finding_json(qdb *db, int *rc, const gt_finding *f)
{
    char *bw_stack = NULL, *bw_loc = NULL, *node_stack = NULL, *node_loc = NULL;
    char *saved_names = NULL, *muts = NULL, *other_loc = NULL, *other_stack = NULL;
    char *where = NULL, *out = NULL, *inner_loc = NULL;
    int inner_saves = 0;
    char *compiled = NULL;

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
        compiled = ns ? compiled_json(db, rc, caller ? caller : ns) : NULL;
        int64_t in = caller ? ns : ns ? call_inner_stack(db, rc, f->node, f->tensor) : 0;
        if (in && custom_function_node(db, rc, f->node))
            inner_loc = save_call_json(db, rc, in);
        inner_saves = inner_loc != NULL;
        if (in && !inner_loc)
            inner_loc = loc_json(db, rc, in);
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
        "   'names', json(coalesce(?9, '[]')), 'saved_version', CASE WHEN ?10 < 0 THEN"
        "   NULL ELSE ?10 END,"
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
        /* a freed graph's buffers are gone: no version is read of them */
        f->kind == GT_FINDING_BACKWARD_TWICE ? (int64_t)-1 : f->saved_version,
        f->version_at_backward, muts, f->suggestion, (int64_t)f->matches_error,
        f->other_backward, other_loc,
        f->kind == GT_FINDING_LEAF_INPLACE ? f->tensor : (int64_t)0, where, f->name,
        f->written);
    if (out && f->error_seq && f->matches_error == 1 && f->tensor) {
        /* Under vmap PyTorch's message shows one sample's shape, the trace
         * the batched tensor: both are shown ('saved.error_shape'). */
        char *msg =
            qtext(db, rc, "SELECT message FROM errors WHERE seq = ?1", "i", f->error_seq);
        gt_pymsg m;
        if (msg && gt__pymsg_parse(msg, &m) != 0) {
            *rc = GT_ENOMEM;
        } else if (msg) {
            char *with =
                m.has_versions
                    ? qtext(db, rc,
                            "SELECT CASE WHEN (SELECT replace(replace(shape, '[', ''),"
                            " ']', '') FROM tensors WHERE id = ?2) != ?3 THEN"
                            " json_set(?1, '$.saved.error_shape', json('[' || ?3 ||"
                            " ']')) ELSE ?1 END",
                            "sis", out, f->tensor, m.shape)
                    : NULL;
            if (with) {
                free(out);
                out = with;
            }
            gt__pymsg_release(&m);
        }
        free(msg);
    }
    if (out && inner_loc) {
        char *with = qtext(db, rc,
                           "SELECT json_set(?1, '$.node.inner_location', json(?2),"
                           " '$.node.inner_role', ?3)",
                           "sss", out, inner_loc, inner_saves ? "saved" : "used");
        if (with) {
            free(out);
            out = with;
        }
    }
    if (out && compiled) {
        char *with = qtext(db, rc, "SELECT json_set(?1, '$.node.compiled', json(?2))",
                           "ss", out, compiled);
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
    free(compiled);
    free(where);
    free(saved_names);
    free(muts);
    return out;
}

/* The run's error: the last one recorded (the one that ended it). */
static char *error_json(qdb *db, int *rc)
{
    char *stack = qtext(db, rc,
                        "SELECT coalesce(stack, 0) FROM errors ORDER BY seq DESC "
                        "LIMIT 1",
                        "");
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

/* The source files the diagnosis found changed since the run (trace.h's
 * gt_trace_sources_changed), as a JSON array of their paths. */
static char *sources_changed_json(qdb *db, int *rc)
{
    const char *const *files;
    size_t n = gt_trace_sources_changed(db->t, &files);
    char *out = qtext(db, rc, "SELECT json_array()", "");
    for (size_t i = 0; i < n && out; i++) {
        char *more =
            qtext(db, rc, "SELECT json_insert(?1, '$[#]', ?2)", "ss", out, files[i]);
        free(out);
        out = more;
    }
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

/* A finding's identity and its place, for sorting. */
typedef struct keyed {
    const char *key;
    size_t at;
} keyed;

static int cmp_keyed(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->at > y->at) - (x->at < y->at);
}

/* The groups of docs[0..n) with one site (gt_finding_site_key_sql): each
 * one's key into keys (malloc'd), `by` sorted by key then place (each run of
 * one key a group), lead[i] the place of i's group's first. */
static void same_groups(qdb *db, int *rc, char **docs, size_t n, char **keys, keyed *by,
                        size_t *lead)
{
    for (size_t i = 0; i < n && !*rc; i++)
        if (!(keys[i] = qtext(db, rc, gt_finding_site_key_sql, "s", docs[i])) && !*rc)
            *rc = GT_ESQL;
    for (size_t i = 0; i < n && !*rc; i++)
        by[i] = (keyed){keys[i], i};
    if (!*rc)
        qsort(by, n, sizeof *by, cmp_keyed);
    for (size_t r = 0, e; r < n && !*rc; r = e)
        for (e = r; e < n && !strcmp(by[e].key, by[r].key); e++)
            lead[by[e].at] = by[r].at;
}

/* Findings at one site as one: findings that say the same thing but for
 * the versions (the same site, gt_finding_site_key_sql: an RNN's weight
 * saved by the node of every time step, all changed by the same write; the
 * node each round of a loop makes, saving the tensor the loop writes at its
 * version of it) are kept once, at the first's place, as the one marked
 * first to fail if one of them is, with "repeats" (how many), "nodes"
 * (their node ids) and "saved_versions" (the version each saved, in the
 * same order); a finding said once is left as it is. *n shrinks; the docs
 * dropped are freed. */
static void merge_same(qdb *db, int *rc, char **docs, size_t *n)
{
    size_t n0 = *n, kept = 0;
    char **keys = calloc(n0 ? n0 : 1, sizeof *keys);
    size_t *lead = calloc(n0 ? n0 : 1, sizeof *lead); /* its group's first */
    keyed *by = calloc(n0 ? n0 : 1, sizeof *by);
    if (!keys || !lead || !by) {
        *rc = GT_ENOMEM;
        goto out;
    }
    same_groups(db, rc, docs, n0, keys, by, lead);
    for (size_t r = 0, e; r < n0 && !*rc; r = e) {
        size_t i = by[r].at, count = 0, pick = i;
        for (e = r; e < n0 && lead[by[e].at] == i; e++)
            ;
        if (e - r == 1)
            continue;
        /* [nodes, saved_versions] */
        char *ids = qtext(db, rc, "SELECT json_array(json_array(), json_array())", "");
        for (size_t k = r; k < e && ids && !*rc; k++) {
            size_t j = by[k].at;
            char *ftf = qtext(db, rc, "SELECT ?1 ->> '$.first_to_fail'", "s", docs[j]);
            char *more = qtext(db, rc,
                               "SELECT json_insert(?1, '$[0][#]', ?2 -> '$.node.id',"
                               " '$[1][#]', ?2 -> '$.saved.saved_version')",
                               "ss", ids, docs[j]);
            if (ftf && !strcmp(ftf, "1"))
                pick = j;
            count++;
            free(ftf);
            free(ids);
            ids = more;
        }
        char *one = NULL;
        if (!ids && !*rc)
            *rc = GT_ESQL;
        else if (!*rc)
            one = qtext(db, rc,
                        "SELECT json_set(?1, '$.repeats', ?2, '$.nodes', ?3 -> '$[0]',"
                        " '$.saved_versions', ?3 -> '$[1]')",
                        "sis", docs[pick], (int64_t)count, ids);
        free(ids);
        if (one) {
            free(docs[i]);
            docs[i] = one;
        }
    }
    if (*rc)
        goto out;
    for (size_t i = 0; i < n0; i++) {
        if (lead[i] == i)
            docs[kept++] = docs[i];
        else
            free(docs[i]);
    }
    *n = kept;
out:
    for (size_t i = 0; keys && i < n0; i++)
        free(keys[i]);
    free(keys);
    free(lead);
    free(by);
}

int gt_findings_same(gt_trace *t, const gt_findings *fs, size_t *lead)
{
    qdb db = {.t = t, .db = gt_trace_db(t)};
    int rc = 0;
    size_t n = fs ? fs->n : 0;
    char **docs = n ? findings_docs(&db, &rc, fs) : NULL;
    char **keys = calloc(n ? n : 1, sizeof *keys);
    keyed *by = calloc(n ? n : 1, sizeof *by);
    if (!keys || !by)
        rc = GT_ENOMEM;
    if (!rc)
        same_groups(&db, &rc, docs, n, keys, by, lead);
    for (size_t i = 0; i < n; i++) {
        free(docs ? docs[i] : NULL);
        free(keys ? keys[i] : NULL);
    }
    free(docs);
    free(keys);
    free(by);
    return rc;
}

/* ---- text -------------------------------------------------------------- */

/* ---- notes ------------------------------------------------------------- */

void gt_diagnose_notes_free(char **lines, size_t n)
{
    for (size_t i = 0; lines && i < n; i++)
        free(lines[i]);
    free(lines);
}

/* Append a copy of b's text to *lines; -1 (b released) when out of memory. */
static int push_line(char ***lines, size_t *n, gt_strbuf *b)
{
    char **v = b->oom ? NULL : realloc(*lines, (*n + 1) * sizeof *v);
    if (!v) {
        gt_strbuf_release(b);
        return -1;
    }
    *lines = v;
    v[(*n)++] = gt_strbuf_detach(b);
    return 0;
}

/* Terminal-safe text of column i (termtext.h), appended to b; rel_to: a
 * directory the text (a path) is shown relative to, or NULL. */
static void add_term_col(gt_strbuf *b, sqlite3_stmt *st, int i, const char *rel_to)
{
    int oom = 0;
    const char *v = gt_column_text(st, i, &oom);
    char *t = oom ? NULL : gt_term_text(v ? v : "");
    if (!t) {
        b->oom = 1;
        return;
    }
    const char *shown = t;
    size_t n = rel_to ? strlen(rel_to) : 0;
    if (n && !strncmp(t, rel_to, n) && t[n] == '/')
        shown = t + n + 1;
    gt_strbuf_adds(b, shown);
    free(t);
}

int gt_diagnose_notes(sqlite3 *db, const char *doc, int which, char ***lines, size_t *n)
{
    static const char compiled_sql[] =
        "SELECT 1 WHERE json_extract(?1, '$.compiled_ran_eagerly')";
    static const char outside_sql[] =
        "SELECT o.value ->> '$.backward', o.value -> '$.location' ->> '$.file',"
        " o.value -> '$.location' ->> '$.line', o.value ->> '$.nodes',"
        " o.value ->> '$.first'"
        " FROM json_each(?1, '$.outside_recording') o ORDER BY o.key";
    sqlite3_stmt *st = NULL;
    char **v = NULL;
    size_t k = 0;
    int rc = -1, s;
    char *cwd = getcwd(NULL, 0); /* however long; NULL: paths shown whole */
    if (sqlite3_prepare_v2(db, which == GT_NOTE_COMPILED ? compiled_sql : outside_sql, -1,
                           &st, NULL) != SQLITE_OK)
        goto out;
    sqlite3_bind_text(st, 1, doc ? doc : "{}", -1, SQLITE_STATIC);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        gt_strbuf b = GT_STRBUF_INIT;
        if (which == GT_NOTE_COMPILED) {
            gt_strbuf_adds(&b, "torch.compile'd code ran eagerly while recording "
                               "(TorchDynamo does not compile under the dispatch mode "
                               "gradtrace records with): the findings are about the "
                               "eager run; a bug only the compiled code has is not in "
                               "the trace");
        } else {
            int oom = 0;
            const char *nodes = gt_column_text(st, 3, &oom);
            if (oom)
                b.oom = 1;
            gt_strbuf_addf(&b, "backward #%lld", (long long)sqlite3_column_int64(st, 0));
            if (sqlite3_column_type(st, 1) != SQLITE_NULL) {
                gt_strbuf_adds(&b, " at ");
                add_term_col(&b, st, 1, cwd);
                gt_strbuf_addf(&b, ":%lld", (long long)sqlite3_column_int64(st, 2));
            }
            gt_strbuf_addf(&b,
                           " ran %lld node%s whose forward ran before recording "
                           "started (the first: ",
                           (long long)sqlite3_column_int64(st, 3),
                           nodes && !strcmp(nodes, "1") ? "" : "s");
            add_term_col(&b, st, 4, NULL);
            gt_strbuf_adds(&b, "): a change to their saved tensors before recording "
                               "started is not in the trace; record from before the "
                               "forward to check them");
        }
        if (push_line(&v, &k, &b) < 0)
            goto out;
    }
    if (s == SQLITE_DONE)
        rc = 0;
out:
    sqlite3_finalize(st);
    free(cwd);
    if (rc) {
        gt_diagnose_notes_free(v, k);
        v = NULL;
        k = 0;
    }
    *lines = v;
    *n = k;
    return rc;
}

typedef struct style {
    const char *bold, *red, *yellow, *cyan, *dim, *green, *reset;
} style;

static const style plain = {"", "", "", "", "", "", ""};
static const style ansi = {"\033[1m", "\033[1;31m", "\033[33m", "\033[36m",
                           "\033[2m", "\033[32m",   "\033[0m"};

/* A JSON document read once (SQLite's json_tree): every value by its full
 * path, so the text output reads each field without another query. Values
 * as json_extract gives them (true as 1, an object as its JSON text); NULL
 * for JSON null. Text for the user goes through gt_term_text and is kept
 * until jdoc_free. oom sticks: the caller prints nothing when it is set. */
typedef struct jdoc {
    struct jent {
        char *key, *parent, *val;
    } * v;
    size_t n, cap;
    char **keep; /* gt_term_text copies handed out */
    size_t nkeep, capkeep;
    int oom;
} jdoc;

static void jdoc_free(jdoc *d)
{
    for (size_t i = 0; i < d->n; i++) {
        free(d->v[i].key);
        free(d->v[i].parent);
        free(d->v[i].val);
    }
    for (size_t i = 0; i < d->nkeep; i++)
        free(d->keep[i]);
    free(d->v);
    free(d->keep);
    memset(d, 0, sizeof *d);
}

static char *dup_col(sqlite3_stmt *st, int i, int *oom)
{
    const char *v = gt_column_text(st, i, oom);
    char *p = v ? strdup(v) : NULL;
    if (v && !p)
        *oom = 1;
    return p;
}

/* A json_tree path without the quotes SQLite puts around keys that are
 * not plain identifiers ($.saved."saved_version"): the document's keys are
 * this file's, none holds a quote. In place; accepts NULL. */
static char *unquote(char *p)
{
    char *w = p;
    for (const char *r = p; r && *r; r++)
        if (*r != '"')
            *w++ = *r;
    if (w)
        *w = 0;
    return p;
}

/* Read doc into d; on failure d->oom is set (a document SQLite built
 * always parses). */
static void jdoc_load(qdb *db, const char *doc, jdoc *d)
{
    static const char sql[] = "SELECT fullkey, path, value FROM json_tree(?1)";
    memset(d, 0, sizeof *d);
    sqlite3_stmt *st = qprep(db, sql);
    int s = SQLITE_ERROR;
    if (!st) {
        d->oom = 1;
        return;
    }
    sqlite3_bind_text(st, 1, doc ? doc : "null", -1, SQLITE_STATIC);
    while (!d->oom && (s = sqlite3_step(st)) == SQLITE_ROW) {
        if (d->n == d->cap) {
            size_t cap = d->cap ? d->cap * 2 : 64;
            struct jent *v = realloc(d->v, cap * sizeof *v);
            if (!v) {
                d->oom = 1;
                break;
            }
            d->v = v;
            d->cap = cap;
        }
        struct jent *e = &d->v[d->n++];
        e->key = unquote(dup_col(st, 0, &d->oom));
        e->parent = unquote(dup_col(st, 1, &d->oom));
        e->val = dup_col(st, 2, &d->oom);
        if (!e->key || !e->parent)
            d->oom = 1;
    }
    if (s != SQLITE_DONE)
        d->oom = 1;
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

/* The value at full path `key` as json_extract gives it, or "" (missing,
 * JSON null). */
static const char *jx(jdoc *d, const char *key)
{
    if (d->oom) /* entries may lack their key */
        return "";
    for (size_t i = 0; i < d->n; i++)
        if (!strcmp(d->v[i].key, key))
            return d->v[i].val ? d->v[i].val : "";
    return "";
}

/* Keep p (a gt_term_text result) until jdoc_free; "" and oom on NULL. */
static const char *jkeep(jdoc *d, char *p)
{
    if (p && d->nkeep == d->capkeep) {
        size_t cap = d->capkeep ? d->capkeep * 2 : 16;
        char **v = realloc(d->keep, cap * sizeof *v);
        if (!v) {
            free(p);
            p = NULL;
        } else {
            d->keep = v;
            d->capkeep = cap;
        }
    }
    if (!p) {
        d->oom = 1;
        return "";
    }
    d->keep[d->nkeep++] = p;
    return p;
}

/* Like jx, for text shown to the user: trace text may hold control
 * characters, shown as visible escapes (termtext.h). Never for a value
 * that is parsed again as JSON. */
static const char *jt(jdoc *d, const char *key)
{
    return jkeep(d, gt_term_text(jx(d, key)));
}

/* A path relative to the current directory when it lies below it. */
static const char *rel(const char *path, const char *cwd)
{
    size_t n = strlen(cwd);
    if (n && !strncmp(path, cwd, n) && path[n] == '/')
        return path + n + 1;
    return path;
}

/* The elements of the array at `key`, joined with ", ", for the user. */
static const char *names_text(jdoc *d, const char *key)
{
    gt_strbuf b = GT_STRBUF_INIT;
    int any = 0;
    if (d->oom)
        return "";
    for (size_t i = 0; i < d->n; i++) {
        if (strcmp(d->v[i].parent, key) != 0 || !strcmp(d->v[i].key, key))
            continue;
        if (any)
            gt_strbuf_adds(&b, ", ");
        if (d->v[i].val)
            gt_strbuf_adds(&b, d->v[i].val);
        any = 1;
    }
    if (b.oom) {
        gt_strbuf_release(&b);
        d->oom = 1;
        return "";
    }
    const char *out = jkeep(d, gt_term_text(gt_strbuf_str(&b)));
    gt_strbuf_release(&b);
    return out;
}

/* "own, a view of base", terminal-safe, malloc'd; NULL when out of memory. */
static char *view_label(const char *own, const char *base)
{
    gt_strbuf b = GT_STRBUF_INIT;
    gt_strbuf_addf(&b, "%s, a view of %s", own, base);
    char *out = b.oom ? NULL : gt_term_text(gt_strbuf_str(&b));
    gt_strbuf_release(&b);
    return out;
}

/* key + suffix into buf. */
static const char *sub(char *buf, size_t n, const char *key, const char *suffix)
{
    snprintf(buf, n, "%s%s", key, suffix);
    return buf;
}

/* "  label  file:line  (in function)" then the code line, for the location
 * object at `key`. */
static void print_loc(FILE *o, jdoc *d, const style *st, const char *cwd,
                      const char *label, const char *key)
{
    char k[256];
    if (!jx(d, key)[0]) {
        fprintf(o, "    %-11s %s(location unknown)%s\n", label, st->dim, st->reset);
        return;
    }
    const char *file = jt(d, sub(k, sizeof k, key, ".file"));
    const char *line = jt(d, sub(k, sizeof k, key, ".line"));
    const char *fn = jt(d, sub(k, sizeof k, key, ".function"));
    const char *code = jx(d, sub(k, sizeof k, key, ".code"));
    /* a notebook cell (named "In [3]" by the recorder) reads as Jupyter's */
    const char *sep = !strncmp(file, "In [", 4) ? ", line " : ":";
    fprintf(o, "    %-11s %s%s%s%s%s%s%s%s\n", label, st->cyan, rel(file, cwd), sep, line,
            st->reset, fn[0] ? "  in " : "", fn, "");
    const char *c = code;
    while (*c == ' ' || *c == '\t')
        c++;
    if (*c) {
        fprintf(o, "    %11s %s%5s |%s ", "", st->dim, line, st->reset);
        gt_term_puts(o, c);
        fputc('\n', o);
    }
}

/* The least and the greatest of the numbers in array `key` (its nulls
 * skipped) into *lo and *hi; 0 when it holds none. */
static int versions_range(const jdoc *d, const char *key, long long *lo, long long *hi)
{
    int any = 0;
    for (size_t i = 0; !d->oom && i < d->n; i++) {
        if (strcmp(d->v[i].parent, key) != 0 || !d->v[i].val)
            continue;
        long long v = strtoll(d->v[i].val, NULL, 10);
        *lo = any && *lo < v ? *lo : v;
        *hi = any && *hi > v ? *hi : v;
        any = 1;
    }
    return any;
}

/* Print finding `index` (its JSON document read into d). Returns 0, or -1
 * when out of memory (o then holds a part: the caller discards it). */
static int print_finding(FILE *o, jdoc *d, const style *st, const char *cwd, size_t index)
{
    const char *kind = jt(d, "$.kind"), *ftf = jx(d, "$.first_to_fail");
    const char *node = jt(d, "$.node.name"), *slot = jt(d, "$.saved.slot");
    const char *dtype = jt(d, "$.saved.dtype"), *shape = jt(d, "$.saved.shape");
    const char *sv = jt(d, "$.saved.saved_version");
    const char *va = jt(d, "$.saved.version_at_backward");
    const char *bi = jt(d, "$.backward.index"), *fb = jt(d, "$.freed_by.index");
    const char *names = names_text(d, "$.saved.names");
    const char *sugg = jt(d, "$.suggestion"), *match = jx(d, "$.matches_error");
    const char *nm = names[0] ? names : "a tensor";
    char k[256];
    if (d->oom)
        return -1;

    fprintf(o, "%s[%zu] %s%s", st->bold, index, st->reset, st->red);
    if (!strcmp(kind, "inplace_invalidated_saved"))
        fprintf(o, "%s modified in place after %s saved it as %s (version %s -> %s)", nm,
                node, slot, sv, va);
    else if (!strcmp(kind, "silent_storage_write")) {
        /* a c10d collective writes in place without bumping the version */
        const char *wop = jt(d, "$.mutations[0].op");
        if (!strncmp(wop, "c10d::", 6))
            fprintf(o,
                    "%s overwritten by the collective %s, which autograd cannot see, "
                    "after %s saved it as %s: gradients are silently wrong",
                    nm, wop, node, slot);
        else
            fprintf(o,
                    "%s overwritten through an alias autograd cannot see, after %s "
                    "saved it as %s: gradients are silently wrong",
                    nm, node, slot);
    } else if (!strcmp(kind, "silent_saved_write"))
        fprintf(o,
                "%s's bytes changed between %s saving it as %s and backward using it, "
                "with no write autograd saw: gradients are silently wrong",
                nm, node, slot);
    else if (!strcmp(kind, "silent_storage_swap"))
        fprintf(o,
                "%s swapped to other memory after %s saved it as %s: backward read the "
                "new data, gradients are silently wrong",
                nm, node, slot);
    else if (!strcmp(kind, "backward_twice"))
        fprintf(o,
                "backward #%s reached %s, whose saved tensors backward #%s already freed",
                bi, node, fb);
    else if (!strcmp(kind, "leaf_inplace")) {
        /* named as the raising line writes it ("v1[0]", "x[:, 1]"), with the
         * leaf's own names when they differ */
        const char *ln = names_text(d, "$.leaf.names");
        const char *ex = jt(d, "$.leaf.expression"), *vw = jx(d, "$.view.origin.seq");
        if (ex[0] && vw[0])
            fprintf(o, "in-place operation on %s, a view of %s%s", ex,
                    ln[0] ? ln : "a leaf",
                    ln[0] ? ", a leaf tensor that requires grad" : " that requires grad");
        else if (ex[0] && ln[0] && strcmp(ex, ln) != 0)
            fprintf(o, "in-place operation on %s (%s), a leaf tensor that requires grad",
                    ex, ln);
        else
            fprintf(o, "in-place operation on %s, a leaf tensor that requires grad",
                    ex[0]   ? ex
                    : ln[0] ? ln
                            : "a leaf");
    } else if (!strcmp(kind, "grad_input_unreachable")) {
        const char *rn = jt(d, "$.target.names[0]"), *why = jx(d, "$.target.cut.reason");
        fprintf(o, "autograd.grad input %s %s", rn[0] ? rn : "(unnamed)",
                !strcmp(why, "input_does_not_require_grad") ? "does not require grad"
                : !strcmp(why, "requires_grad_too_late")
                    ? "did not require grad yet when the outputs were computed"
                : !strcmp(why, "no_grad")
                    ? "reaches the outputs only where grad mode was off"
                : !strcmp(why, "detach") ? "reaches the outputs only through detach()"
                : !strcmp(why, "unused")
                    ? "was used by no op: the outputs do not depend on it"
                    : "is not on the outputs' graph");
    } else if (!strcmp(kind, "root_without_grad")) {
        const char *rn = jt(d, "$.target.names[0]"), *why = jx(d, "$.target.cut.reason");
        fprintf(o, "backward() of %s, which has no grad_fn: %s", rn[0] ? rn : "a tensor",
                !strcmp(why, "detach")    ? "the graph was cut by detach()"
                : !strcmp(why, "data")    ? "the graph was cut by .data"
                : !strcmp(why, "no_grad") ? "the graph was cut where grad mode was off"
                : !strcmp(why, "item")    ? "it was made from values taken out of a graph"
                : !strcmp(why, "not_differentiable")
                    ? "the graph was cut by an op with no gradient"
                    : "nothing it comes from requires grad");
    } else if (refused_name(kind)) {
        /* an in-place op refused for what its tensor is (refused.c) */
        const char *var = jt(d, "$.target.expression");
        const char *tn = names_text(d, "$.target.names");
        const char *vop = jt(d, "$.target.origin.op");
        const char *on = jt(d, "$.target.other.names[0]");
        if (!var[0])
            var = jt(d, "$.target.variable");
        if (!var[0])
            var = tn[0] ? tn : "a tensor";
        if (!strcmp(kind, "inplace_overlap"))
            fprintf(o, "in-place operation on %s, whose elements share memory%s%s%s", var,
                    vop[0] ? " (" : "", vop, vop[0] ? ")" : "");
        else if (!strcmp(kind, "inplace_input_overlap"))
            fprintf(o, "in-place operation on %s, reading %s%s that shares its memory",
                    var, on[0] ? on : "an input", on[0] ? ", an input" : "");
        else if (!strcmp(kind, "inplace_inference_tensor"))
            fprintf(o,
                    "in-place operation on %s, a tensor made in torch.inference_mode(), "
                    "outside it",
                    var);
        else if (!strcmp(kind, "inplace_dtype"))
            fprintf(o,
                    "in-place operation on %s (%s), whose dtype cannot hold the result",
                    var, jt(d, "$.target.dtype"));
        else if (!strcmp(kind, "inplace_shape"))
            fprintf(o,
                    "in-place operation on %s (shape %s), smaller than the broadcast "
                    "result",
                    var, jx(d, "$.target.shape"));
        else if (!strcmp(kind, "detach_view_inplace"))
            fprintf(o, "detach_() on %s, a view", var);
        else
            fprintf(o, "resize_() on %s, a tensor that requires grad", var);
    } else if (!strcmp(kind, "unexplained")) {
        if (!strcmp(jx(d, "$.outside_recording"), "1"))
            fprintf(o, "the run raised an in-place error about a graph whose forward ran "
                       "before recording started: outside the recording");
        else
            fprintf(o, "the run raised an in-place error that the replay cannot pin to a "
                       "write");
    } else {
        const char *var = jt(d, "$.view.expression"), *vop = jt(d, "$.view.origin.op");
        if (!var[0])
            var = jt(d, "$.view.variable");
        const char *what = !strcmp(kind, "view_multi_output_inplace")
                               ? "an output of a function that returns several views"
                           : !strcmp(kind, "view_no_grad_inplace")
                               ? "a view made under torch.no_grad()"
                           : !strcmp(kind, "view_inference_inplace")
                               ? "a view made in torch.inference_mode()"
                               : "a view returned by a custom autograd Function";
        fprintf(o, "in-place operation on %s, %s%s%s%s", var[0] ? var : "a view", what,
                vop[0] ? " (" : "", vop, vop[0] ? ")" : "");
    }
    fprintf(o, "%s  %s[%s%s]%s\n", st->reset, st->dim, kind,
            !strcmp(ftf, "1") ? ", first to fail" : "", st->reset);
    const char *rep = jx(d, "$.repeats");
    long long vmin = 0, vmax = 0;
    if (rep[0] && strcmp(rep, "1") != 0 && node[0] &&
        versions_range(d, "$.saved_versions", &vmin, &vmax) && vmin != vmax) {
        fprintf(o,
                "    %-11s %s times: %s %s nodes made at this line saved %s at versions "
                "%lld to %lld, changed later by the same lines (version %s shown)\n",
                "repeated", rep, rep, node, nm, vmin, vmax, sv);
    } else if (rep[0] && strcmp(rep, "1") != 0) {
        if (node[0])
            fprintf(o,
                    "    %-11s %s times: %s %s nodes made at this line, the same finding "
                    "for each (one shown)\n",
                    "repeated", rep, rep, node);
        else
            fprintf(o, "    %-11s %s times, the same each time (one shown)\n", "repeated",
                    rep);
    }

    int refused = refused_name(kind);
    int at_op = strncmp(kind, "view_", 5) == 0 || !strcmp(kind, "leaf_inplace") ||
                !strcmp(kind, "unexplained") || refused ||
                !strcmp(kind, "root_without_grad") ||
                !strcmp(kind, "grad_input_unreachable");
    if (!strcmp(kind, "unexplained")) {
        print_loc(o, d, st, cwd, "raised at", "$.location");
        int n = 0;
        for (size_t i = 0; i < d->n; i++) {
            if (strcmp(d->v[i].parent, "$.candidates") != 0 ||
                !strcmp(d->v[i].key, "$.candidates"))
                continue;
            char key[64];
            snprintf(key, sizeof key, "%s", d->v[i].key);
            const char *tn = names_text(d, sub(k, sizeof k, key, ".names"));
            const char *td = jt(d, sub(k, sizeof k, key, ".dtype"));
            const char *ts = jt(d, sub(k, sizeof k, key, ".shape"));
            fprintf(o, "    %-11s %s (%s %s)\n", n++ ? "" : "candidates",
                    tn[0] ? tn : "a tensor", td, ts);
        }
        if (!n)
            fprintf(o,
                    "    %-11s %sno recorded tensor matches the message's dtype, shape "
                    "and version%s\n",
                    "candidates", st->dim, st->reset);
    } else if (!strcmp(kind, "root_without_grad") ||
               !strcmp(kind, "grad_input_unreachable")) {
        const char *why = jx(d, "$.target.cut.reason");
        int input = !strcmp(kind, "grad_input_unreachable");
        print_loc(o, d, st, cwd, "raised at", "$.location");
        if (jx(d, "$.target.cut.location")[0]) {
            const char *in = jt(d, "$.target.cut.input.names[0]");
            int detached = !strncmp(jt(d, "$.target.cut.op"), "aten::detach", 12);
            print_loc(o, d, st, cwd,
                      input                 ? "first read"
                      : strcmp(why, "item") ? "cut at"
                      : detached            ? "left at"
                                            : "item() at",
                      "$.target.cut.location");
            fprintf(o, "    %11s %s%-20s%s %s%s%s\n", "", st->yellow,
                    jt(d, "$.target.cut.op"), st->reset, in[0] ? "took " : "", in,
                    !strcmp(why, "no_grad") ? " with grad mode off"
                    : in[0]                 ? ", which has a graph"
                                            : "");
        }
        if (jx(d, "$.target.cut.made_at")[0])
            print_loc(o, d, st, cwd, "made at", "$.target.cut.made_at");
        if (!strcmp(why, "no_input_requires_grad")) {
            int n = 0;
            for (size_t i = 0; i < d->n; i++) {
                if (strcmp(d->v[i].parent, "$.target.cut.sources") != 0)
                    continue;
                char key[96];
                snprintf(key, sizeof key, "%s", d->v[i].key);
                const char *tn = jt(d, sub(k, sizeof k, key, ".names[0]"));
                if (!tn[0]) /* a Python number, a temporary: in the JSON */
                    continue;
                fprintf(o, "    %-11s %s (%s %s)\n", n++ ? "" : "comes from", tn,
                        jt(d, sub(k, sizeof k, key, ".dtype")),
                        jx(d, sub(k, sizeof k, key, ".shape")));
            }
        }
    } else if (refused) {
        print_loc(o, d, st, cwd, "raised at", "$.location");
        /* where the tensor written (or the input overlapping it) was made */
        const char *other = jx(d, "$.target.other.tensor");
        const char *mn = names_text(d, other[0] && !strcmp(kind, "inplace_input_overlap")
                                           ? "$.target.other.names"
                                           : "$.target.names");
        if (jx(d, "$.target.origin.location")[0]) {
            const char *gm = jx(d, "$.target.origin.grad_mode");
            print_loc(o, d, st, cwd, "made at", "$.target.origin.location");
            fprintf(o, "    %11s %s%-20s%s made %s%s\n", "", st->yellow,
                    jt(d, "$.target.origin.op"), st->reset, mn[0] ? mn : "it",
                    !strcmp(gm, "0") ? " with grad mode off" : "");
        } else if (jx(d, "$.target.tensor")[0]) {
            fprintf(o, "    %-11s %s(the op that made it is not in the trace)%s\n",
                    "made at", st->dim, st->reset);
        }
    } else if (at_op) {
        print_loc(o, d, st, cwd, "raised at", "$.location");
        int show_view = strncmp(kind, "view_", 5) == 0 || jx(d, "$.view.origin.seq")[0];
        if (show_view) {
            const char *gm = jx(d, "$.view.origin.grad_mode");
            const char *vn = names_text(d, "$.view.names");
            if (jx(d, "$.view.origin.location")[0]) {
                const char *vop = jt(d, "$.view.origin.op");
                print_loc(o, d, st, cwd, "view from", "$.view.origin.location");
                fprintf(o, "    %11s %s%-20s%s made %s%s\n", "", st->yellow, vop,
                        st->reset, vn[0] ? vn : "the view",
                        !strcmp(gm, "0") ? " with grad mode off" : "");
            } else {
                fprintf(o, "    %-11s %s(the op that made it is not in the trace)%s\n",
                        "view from", st->dim, st->reset);
            }
        }
    }
    if (!at_op) {
        const char *cfn = jt(d, "$.node.compiled.function");
        if (cfn[0]) { /* not the decorator's line: one inside, not recorded */
            fprintf(o,
                    "    %-11s %s%s%s, compiled by torch.compile: %sits lines are not in "
                    "the trace%s\n",
                    "saved in", st->bold, cfn, st->reset, st->dim, st->reset);
            print_loc(o, d, st, cwd, "called at", "$.node.compiled.call_location");
        } else {
            print_loc(o, d, st, cwd, "saved at", "$.node.location");
        }
        fprintf(o, "    %11s %s saved %s%s%s%s%s (%s %s)%s%s\n", "", node, st->bold,
                slot[0] ? slot : "?", st->reset, names[0] ? " = " : "", names, dtype,
                shape,
                sv[0] ? " at version " : ", freed since: the graph holds it no more", sv);
        if (jx(d, "$.node.inner_location")[0])
            print_loc(o, d, st, cwd,
                      strcmp(jt(d, "$.node.inner_role"), "saved") ? "used inside"
                                                                  : "saved by",
                      "$.node.inner_location");
    }

    /* The writes, grouped by consecutive location (one pass over them). */
    const char *prev = NULL;
    for (size_t i = 0; i < d->n; i++) {
        if (strcmp(d->v[i].parent, "$.mutations") != 0 || !d->v[i].val)
            continue;
        char key[64], lk[96];
        snprintf(key, sizeof key, "%s", d->v[i].key);
        if (!strcmp(jx(d, sub(k, sizeof k, key, ".attempted")), "1"))
            continue; /* the raising line, shown above */
        const char *mloc = jx(d, sub(lk, sizeof lk, key, ".location"));
        const char *op = jt(d, sub(k, sizeof k, key, ".op"));
        const char *ver = jt(d, sub(k, sizeof k, key, ".version_after"));
        const char *mn = names_text(d, sub(k, sizeof k, key, ".names"));
        /* through a view with a name of its own: "v, a view of x" */
        const char *own = jt(d, sub(k, sizeof k, key, ".names[0]"));
        const char *vb = jt(d, sub(k, sizeof k, key, ".view_of[0]"));
        if (own[0] && vb[0] && strcmp(own, vb) != 0)
            mn = jkeep(d, view_label(own, vb));
        if (!prev || strcmp(prev, mloc) != 0)
            print_loc(o, d, st, cwd,
                      !strcmp(kind, "silent_storage_write") ? "written at"
                      : !strcmp(kind, "silent_storage_swap")
                          ? (op[0] ? "noticed at" : "swapped at")
                      : !strcmp(kind, "silent_saved_write") ? "touched at"
                      : !strcmp(kind, "unexplained")        ? "last written"
                                                            : "modified at",
                      lk);
        fprintf(o, "    %11s %s%-20s%s %s%s%s\n", "", st->yellow, op, st->reset,
                mn[0] ? mn : "", ver[0] ? " -> version " : "", ver);
        prev = mloc;
    }

    if (!strcmp(kind, "backward_twice")) {
        print_loc(o, d, st, cwd, "freed by", "$.freed_by.location");
        fprintf(o, "    %11s backward #%s ran without retain_graph=True\n", "", fb);
    }
    if (bi[0] && strcmp(kind, "root_without_grad") != 0 &&
        strcmp(kind, "grad_input_unreachable") != 0) { /* raised there */
        print_loc(o, d, st, cwd, "needed by", "$.backward.location");
        if (!strcmp(kind, "inplace_invalidated_saved"))
            fprintf(o, "    %11s backward #%s found version %s, expected %s\n", "", bi,
                    va, sv);
        else
            fprintf(o, "    %11s backward #%s\n", "", bi);
    }
    if (!strcmp(kind, "unexplained")) {
        if (!strcmp(jx(d, "$.mismatch"), "1"))
            fprintf(o,
                    "    %-11s %sthe finding marked first to fail for this backward "
                    "does not match PyTorch's message%s\n",
                    "error", st->yellow, st->reset);
        else
            fprintf(o, "    %-11s %sno finding matches the error PyTorch raised%s\n",
                    "error", st->yellow, st->reset);
    } else if (strcmp(ftf, "1") != 0 && match[0])
        fprintf(o,
                "    %-11s %snot the one PyTorch raised: it stops at the first stale "
                "tensor%s\n",
                "error", st->dim, st->reset);
    else if (!strcmp(match, "1")) {
        const char *es = jx(d, "$.saved.error_shape");
        if (es[0])
            fprintf(o,
                    "    %-11s %smatches the error PyTorch raised%s (its message shows "
                    "%s, one vmap sample; the trace holds the batched %s)\n",
                    "error", st->green, st->reset, es, shape);
        else
            fprintf(o, "    %-11s %smatches the error PyTorch raised%s\n", "error",
                    st->green, st->reset);
    } else if (!strcmp(match, "0"))
        fprintf(o, "    %-11s %sdoes not match the error PyTorch raised%s\n", "error",
                st->yellow, st->reset);
    if (sugg[0])
        fprintf(o, "    %s%-11s%s %s\n", st->green, "fix", st->reset, sugg);
    fputc('\n', o);
    return d->oom ? -1 : 0;
}

/* The text report into o (`doc`: the --json document, for its notes).
 * Returns 0, or -1 when out of memory (o then holds a part: the caller
 * discards it). */
static int print_text(FILE *o, qdb *db, const style *st, const char *path_arg,
                      gt_trace *t, const char *broken, const char *err, const char *doc,
                      char **docs, size_t n)
{
    int rc = 0;
    char *tr = gt_term_text(path_arg);
    if (!tr)
        return -1;
    const char *trace = tr;
    char *wd = getcwd(NULL, 0); /* however long; NULL: paths shown whole */
    const char *cwd = wd ? wd : "";
    if (gt_trace_stopped_seq(t)) {
        fprintf(o, "%snote:%s recording stopped early, after event %" PRId64 " (",
                st->yellow, st->reset, gt_trace_stopped_seq(t));
        gt_term_puts(o, gt_trace_stopped_reason(t));
        fprintf(o, "); what came after is not in the trace\n");
    } else if (gt_trace_partial(t)) {
        fprintf(
            o,
            "%snote:%s the trace is partial (the recording did not finish: the "
            "process was killed or is still running); diagnosing what was committed\n",
            st->yellow, st->reset);
    }
    if (broken[0]) {
        fprintf(o, "%snote:%s the trace's rows do not fit together (", st->yellow,
                st->reset);
        gt_term_puts(o, broken);
        fprintf(o, "): a damaged file; what they held is not diagnosed\n");
    }
    if (err && strcmp(err, "null") != 0) {
        jdoc e;
        jdoc_load(db, err, &e);
        const char *type = jt(&e, "$.type");
        char *first = strdup(jx(&e, "$.message"));
        if (!first || e.oom)
            rc = -1;
        else {
            char *nl = strchr(first, '\n');
            if (nl)
                *nl = 0;
            fprintf(o, "%s: the run raised %s%s%s: ", trace, st->bold, type, st->reset);
            gt_term_puts(o, first);
            fputc('\n', o);
        }
        free(first);
        jdoc_free(&e);
    }
    int any_outside = 0;
    if (rc == 0) {
        char **notes = NULL;
        size_t nn = 0;
        if (gt_diagnose_notes(db->db, doc, GT_NOTE_OUTSIDE, &notes, &nn) < 0)
            rc = -1;
        for (size_t i = 0; i < nn; i++)
            fprintf(o, "%snote:%s %s\n", st->yellow, st->reset, notes[i]);
        any_outside = nn > 0;
        gt_diagnose_notes_free(notes, nn);
    }
    int raised = err && strcmp(err, "null") != 0;
    const char *const *changed;
    size_t nchanged = gt_trace_sources_changed(t, &changed);
    for (size_t i = 0; i < nchanged && rc == 0; i++) {
        fprintf(o, "%snote:%s ", st->yellow, st->reset);
        gt_term_puts(o, rel(changed[i], cwd));
        fprintf(o, " changed since the run: no line is read from it (the lines shown are "
                   "the recorded ones)\n");
    }
    if (rc == 0 && n == 0)
        fprintf(o,
                "%s: no findings: no saved tensor %s modified before the backward that "
                "needed it%s\n",
                trace, any_outside ? "the recording saw was" : "was",
                /* every error of the family gets a finding, if only "unexplained" */
                raised ? ", and the run's error is not one of the in-place errors "
                         "diagnose explains"
                       : "");
    else if (rc == 0)
        fprintf(o, "%s: %zu finding%s\n\n", trace, n, n == 1 ? "" : "s");
    for (size_t i = 0; i < n && rc == 0; i++) {
        jdoc d;
        jdoc_load(db, docs[i], &d);
        rc = d.oom ? -1 : print_finding(o, &d, st, cwd, i + 1);
        jdoc_free(&d);
    }
    free(wd);
    free(tr);
    return rc;
}

/* ---- command ----------------------------------------------------------- */

static void usage(FILE *o)
{
    fprintf(o,
            "usage: gradtrace diagnose [options] TRACE... | DIR\n"
            "\n"
            "Replay each backward call of TRACE and report every saved tensor that was\n"
            "changed between its save and the backward that needed it, every in-place\n"
            "error PyTorch raised at the op (leaf, views, expanded or overlapping\n"
            "memory, inference tensors, dtype or shape that cannot hold the result,\n"
            "detach_ of a view, resize_), and any in-place error the replay cannot pin\n"
            "(kind unexplained): a run that raised one always gets a finding. Also why\n"
            "a backward() root has no grad_fn (detach, .data, no_grad, an op with no\n"
            "gradient, .item(), nothing requiring grad) and why an autograd.grad input\n"
            "is not on the outputs' graph. Several traces (the ranks of a distributed\n"
            "run) or a directory: each rank diagnosed, each distinct finding printed\n"
            "once with the ranks it was found on.\n"
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
    gt_strbuf broken = GT_STRBUF_INIT; /* what does not fit together, "" if nothing */
    qdb db = {0};
    char *fjson = NULL, *ejson = NULL, *ojson = NULL, *cjson = NULL, *sjson = NULL,
         *doc = NULL, **docs = NULL;
    size_t ndocs = 0; /* docs' count: the findings', less the merged ones */

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
                fprintf(stderr,
                        "gradtrace: diagnose: --backward wants a call number "
                        "(1, 2, ...), not '%s'\n",
                        optarg);
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
                fprintf(stderr,
                        "gradtrace: diagnose: --color wants auto, always or never\n");
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
                              optind >= argc ? "missing trace file"
                                             : "too many arguments");
    const char *path = argv[optind];
    if (gt_cmd_open("diagnose", path, &t) != 0)
        return 2;
    gt_diagnose_options opts = {.backward = backward};
    if (gt_diagnose(t, &opts, &fs) != 0) {
        fprintf(stderr, "gradtrace: diagnose %s: %s\n", path, gt_trace_errmsg(t));
        goto out;
    }
    db = (qdb){.t = t, .db = gt_trace_db(t)};
    int rc = 0;
    if (gt_trace_check_links(t, &broken) < 0) {
        fprintf(stderr, "gradtrace: diagnose %s: %s\n", path, gt_trace_errmsg(t));
        goto out;
    }
    docs = findings_docs(&db, &rc, fs);
    ndocs = fs->n;
    if (!rc)
        merge_same(&db, &rc, docs, &ndocs);
    if (!rc)
        fjson = join_array(&rc, docs, ndocs);
    ejson = error_json(&db, &rc);
    if (!rc)
        ojson = outside_json(&db, &rc, (int64_t)backward);
    if (!rc)
        cjson = compiled_eager_json(&db, &rc);
    if (!rc)
        sjson = sources_changed_json(&db, &rc);
    if (!rc && fjson)
        doc = qtext(
            &db, &rc,
            "SELECT json_object('trace', ?1, 'partial', json(?2), 'error', json(?3),"
            " 'findings', json(?4), 'stopped', CASE WHEN ?5 > 0 THEN"
            " json_object('seq', ?5, 'reason', ?6) END, 'inconsistent', ?7,"
            " 'outside_recording', json(coalesce(?8, '[]')),"
            " 'compiled_ran_eagerly', json(coalesce(?9, 'false')),"
            " 'sources_changed', json(?10))",
            "ssssisssss", path, tf(gt_trace_partial(t)), ejson, fjson,
            (int64_t)gt_trace_stopped_seq(t), gt_trace_stopped_reason(t),
            broken.len ? broken.p : NULL, ojson, cjson, sjson);
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
        const style *st = color ? &ansi : &plain;
        /* into memory first: out of memory midway prints nothing, not a
         * finding with blank fields */
        char *text = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&text, &len);
        char **cnote = NULL;
        size_t ncnote = 0;
        int prc =
            m ? gt_diagnose_notes(db.db, doc, GT_NOTE_COMPILED, &cnote, &ncnote) : -1;
        for (size_t i = 0; i < ncnote; i++)
            fprintf(m, "%snote:%s %s\n", st->yellow, st->reset, cnote[i]);
        gt_diagnose_notes_free(cnote, ncnote);
        if (prc == 0)
            prc = print_text(m, &db, st, path, t, gt_strbuf_str(&broken), ejson, doc,
                             docs, ndocs);
        if (m && fclose(m) != 0)
            prc = -1;
        if (prc != 0) {
            free(text);
            fprintf(stderr, "gradtrace: diagnose %s: out of memory\n", path);
            goto out;
        }
        fwrite(text, 1, len, stdout);
        free(text);
    }
    /* A damaged trace with only unexplained errors is still "none found in
     * a damaged trace" (2), with the errors shown. */
    size_t pinned = 0;
    for (size_t i = 0; i < fs->n; i++)
        pinned += fs->v[i].kind != GT_FINDING_UNEXPLAINED;
    status = pinned ? 1 : broken.len ? 2 : fs->n ? 1 : 0;
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
    free(sjson);
    free_items(docs, ndocs);
    gt_findings_free(fs);
    gt_strbuf_release(&broken);
    gt_trace_close(t);
    return status;
}
