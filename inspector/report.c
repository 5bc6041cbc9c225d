/* The diagnosis report as data (report.h): each finding's JSON document,
 * findings at one site merged, the whole `diagnose --json` document, the
 * notes it carries, and the identity that tells two findings apart. Built
 * only with SQLite's JSON functions. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include "modpath.h"
#include "pymsg.h"
#include "pysrc.h"
#include <gradtrace/report.h>
#include "strbuf.h"
#include <gradtrace/termtext.h>
#include "trace_int.h"

/* The identity of a finding: what it says, without the trace's own row ids
 * (node, tensor and event numbers differ between ranks, and between the
 * nodes of a loop unrolled in one forward). KEY_HEAD and KEY_TAIL are what
 * gt_finding_site_key_sql shares. */
#define KEY_HEAD                                                                         \
    "SELECT json_array(f ->> '$.kind', f -> '$.node.name', f -> '$.node.location',"      \
    " f -> '$.saved.slot', f -> '$.saved.names', f -> '$.saved.dtype',"                  \
    " f -> '$.saved.shape', f -> '$.saved.version_at_backward',"
#define KEY_TAIL                                                                         \
    " f -> '$.backward.index', f -> '$.backward.location', f -> '$.freed_by.index',"     \
    " f -> '$.leaf', f -> '$.location', f -> '$.view.expression',"                       \
    " f -> '$.view.origin.location'"
const char gt_finding_key_sql[] = KEY_HEAD
    " f -> '$.saved.saved_version',"
    " (SELECT json_group_array(json_array(m.value ->> '$.op', m.value -> '$.location',"
    "   m.value -> '$.names', m.value -> '$.version_after'))"
    "  FROM json_each(f, '$.mutations') m),"
    " f ->> '$.suggestion'," KEY_TAIL ") FROM (SELECT ?1 AS f)";

/* The site of a finding: its identity without the versions its tensor was
 * saved at and written to (the writes as the set of their ops, lines and
 * names) nor the fix worded for that version's writes: the nodes one line
 * makes in each round of a loop, each saving the tensor the loop writes at
 * its version of it (f[i] = f[i - 1] * x). */
const char gt_finding_site_key_sql[] = KEY_HEAD
    " (SELECT json_group_array(w) FROM (SELECT DISTINCT"
    "  json_array(m.value ->> '$.op', m.value -> '$.location', m.value -> '$.names')"
    "  AS w FROM json_each(f, '$.mutations') m ORDER BY w))," KEY_TAIL
    ") FROM (SELECT ?1 AS f)";

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
    /* "module": which nn.Module ran the line (modpath.h) */
    if ((r = gt_loc_json_add_module(db->t, stack, &out)) < 0)
        *rc = r == GT_ENOMEM ? GT_ENOMEM : GT_ESQL;
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
 * first seen once the call began (or before, below); not a torch.func transform's own
 * call (its forward ran inside the same transform call, whose nodes the ops under it do
 * not make). A node no recorded op made, seen before any call began (an op while
 * recording took a tensor it made: a saved tensor made before recording started, changed
 * while recording), counts for the first call after it was seen. What changed their saved
 * tensors before recording started cannot be in the trace, so a run diagnosed clean is
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
        "  (SELECT min(c.id) FROM backward_calls c WHERE c.seq > n.seq)"
        "  AND n.seq < (SELECT min(c.seq) FROM backward_calls c))"
        "  AND n.variable IS NULL"
        "  AND n.name != (SELECT id FROM strings WHERE text = 'AccumulateGrad')"
        " WHERE (?1 = 0 OR b.id = ?1) AND b.api NOT IN (SELECT id FROM strings"
        "  WHERE text LIKE '" GT_API_BY_COMPILER "%')"
        " AND NOT EXISTS (SELECT 1 FROM stacks k"
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
    return gt_finding_family(kind) == GT_FAMILY_REFUSED;
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
    return gt_finding_family(kind) == GT_FAMILY_VIEW;
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

/* ---- ddp_unused_parameters -------------------------------------------- */

/* The code of op `seq`'s line without its indentation and comment into out
 * ("" if none). */
static void op_code(qdb *db, int *rc, int64_t seq, gt_strbuf *out)
{
    gt_strbuf_reset(out);
    char *stack =
        seq ? qtext(db, rc, "SELECT stack FROM ops WHERE seq = ?1", "i", seq) : NULL;
    if (!stack)
        return;
    gt_loc l;
    int r = gt_trace_loc(db->t, strtoll(stack, NULL, 10), &l);
    free(stack);
    if (r < 0) {
        *rc = r == GT_ENOMEM ? GT_ENOMEM : GT_ESQL;
        return;
    }
    gt_strbuf_adds(out, l.code ? l.code : "");
    gt_loc_release(&l);
    gt__py_trim_code(out);
    if (out->oom)
        *rc = GT_ENOMEM;
}

/* One parameter DDP got no gradient for: {"index", "name", "module",
 * "tensor", "dtype", "shape", "names", "reason", "seq", "op", "location",
 * "made_at", "fixed_code"} (docs/diagnose.md). */
static char *ddp_param_json(qdb *db, int *rc, const gt_ddp_param *p)
{
    gt_strbuf mod = GT_STRBUF_INIT, code = GT_STRBUF_INIT, fixed = GT_STRBUF_INIT;
    char *names = p->tensor ? names_json(db, rc, p->tensor) : NULL;
    char *loc = op_loc_json(db, rc, p->op);
    char *made = op_loc_json(db, rc, p->made);
    char *out = NULL;
    if (p->reason == GT_CUT_DETACH) {
        op_code(db, rc, p->op, &code);
        gt__py_without_alias(gt_strbuf_str(&code), &fixed);
    }
    gt__py_module_of(p->name, &mod);
    if (mod.oom || fixed.oom)
        *rc = GT_ENOMEM;
    if (!*rc)
        out = qtext(
            db, rc,
            "SELECT json_object('index', ?1, 'name', ?2, 'module', ?3, 'tensor', "
            "CASE WHEN ?4 = 0 THEN NULL ELSE ?4 END, "
            "'dtype', (SELECT s.text FROM tensors x JOIN strings s ON s.id = x.dtype "
            "WHERE x.id = ?4), 'shape', json((SELECT shape FROM tensors WHERE id = ?4)),"
            " 'names', json(coalesce(?5, '[]')), 'reason', ?6, "
            "'seq', CASE WHEN ?7 = 0 THEN NULL ELSE ?7 END, "
            "'op', (SELECT s.text FROM ops o JOIN strings s ON s.id = o.name "
            "WHERE o.seq = ?7), 'location', json(?8), 'made_at', json(?9), "
            "'fixed_code', ?10)",
            "issississs", p->index, p->name, p->name ? gt_strbuf_str(&mod) : NULL,
            p->tensor, names, p->reason ? gt_cut_reason_name(p->reason) : NULL, p->op,
            loc, made, fixed.len ? gt_strbuf_str(&fixed) : NULL);
    free(names);
    free(loc);
    free(made);
    gt_strbuf_release(&mod);
    gt_strbuf_release(&code);
    gt_strbuf_release(&fixed);
    return out;
}

/* The target of a ddp_unused_parameters finding: {"rank", "ddp":
 * {"location", "fixed_code"}, "parameters": [ddp_param_json...]}. */
static char *ddp_target_json(qdb *db, int *rc, const gt_finding *f)
{
    gt_strbuf code = GT_STRBUF_INIT, fixed = GT_STRBUF_INIT;
    char **items = calloc(f->n_params ? f->n_params : 1, sizeof *items);
    char *arr = NULL, *loc = NULL, *out = NULL;
    size_t n = 0;
    if (!items) {
        *rc = GT_ENOMEM;
        return NULL;
    }
    for (size_t i = 0; i < f->n_params && !*rc; i++)
        if ((items[n] = ddp_param_json(db, rc, &f->params[i])) != NULL)
            n++;
    if (!*rc)
        arr = join_array(rc, items, n);
    free_items(items, n);
    loc = op_loc_json(db, rc, f->op);
    op_code(db, rc, f->op, &code);
    gt__py_ddp_fixed_line(gt_strbuf_str(&code), &fixed);
    if (fixed.oom)
        *rc = GT_ENOMEM;
    if (!*rc)
        out = qtext(db, rc,
                    "SELECT json_object('rank', CASE WHEN ?1 < 0 THEN NULL ELSE ?1 END, "
                    "'ddp', json_object('location', json(?2), 'fixed_code', ?3), "
                    "'parameters', json(?4))",
                    "isss", f->other, loc, fixed.len ? gt_strbuf_str(&fixed) : NULL, arr);
    free(arr);
    free(loc);
    gt_strbuf_release(&code);
    gt_strbuf_release(&fixed);
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
    if (!*rc && f->kind == GT_FINDING_DDP_UNUSED_PARAMETERS)
        target = ddp_target_json(db, rc, f);
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

/* A copy of finding doc without the "module" of its locations: the same
 * finding in each of six blocks is one site (said once, for blocks.0-5).
 * The doc is SQLite's compact JSON, in which `,"module":"` can only be a
 * key (a '"' inside a string is escaped). NULL with *rc set when out of
 * memory. */
static char *without_modules(int *rc, const char *doc)
{
    static const char key[] = ",\"module\":\"";
    char *d = doc ? strdup(doc) : NULL;
    if (doc && !d)
        *rc = GT_ENOMEM;
    for (char *at = d ? strstr(d, key) : NULL; at; at = strstr(at, key)) {
        char *p = at + sizeof key - 1;
        while (*p && *p != '"')
            p += p[0] == '\\' && p[1] ? 2 : 1;
        if (*p)
            p++;
        memmove(at, p, strlen(p) + 1);
    }
    return d;
}

/* The groups of docs[0..n) with one site (gt_finding_site_key_sql): each
 * one's key into keys (malloc'd), `by` sorted by key then place (each run of
 * one key a group), lead[i] the place of i's group's first. */
static void same_groups(qdb *db, int *rc, char **docs, size_t n, char **keys, keyed *by,
                        size_t *lead)
{
    for (size_t i = 0; i < n && !*rc; i++) {
        char *plain = without_modules(rc, docs[i]);
        if (!(keys[i] = qtext(db, rc, gt_finding_site_key_sql, "s", plain)) && !*rc)
            *rc = GT_ESQL;
        free(plain);
    }
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
 * (their node ids), "saved_versions" (the version each saved, in the
 * same order) and "modules" (the module path of each node's location, when
 * they have one); a finding said once is left as it is. *n shrinks; the docs
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
        /* [nodes, saved_versions, modules] */
        char *ids = qtext(
            db, rc, "SELECT json_array(json_array(), json_array(), json_array())", "");
        for (size_t k = r; k < e && ids && !*rc; k++) {
            size_t j = by[k].at;
            char *ftf = qtext(db, rc, "SELECT ?1 ->> '$.first_to_fail'", "s", docs[j]);
            char *more = qtext(db, rc,
                               "SELECT json_insert(?1, '$[0][#]', ?2 -> '$.node.id',"
                               " '$[1][#]', ?2 -> '$.saved.saved_version',"
                               " '$[2][#]', ?2 -> '$.node.location.module')",
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
            one = qtext(
                db, rc,
                "SELECT json_set(?1, '$.repeats', ?2, '$.nodes', ?3 -> '$[0]',"
                " '$.saved_versions', ?3 -> '$[1]', '$.modules',"
                " CASE WHEN json_array_length(?3 -> '$[2]') > 0 THEN ?3 -> '$[2]' END)",
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
    if (gt_db_prepare(db, which == GT_NOTE_COMPILED ? compiled_sql : outside_sql, &st) !=
        SQLITE_OK)
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

/* ---- the report ---------------------------------------------------------- */

void gt_report_release(gt_report *r)
{
    if (!r)
        return;
    free(r->doc);
    free(r->error);
    free_items(r->docs, r->ndocs);
    gt_findings_free(r->findings);
    gt_strbuf_release(&r->broken);
    memset(r, 0, sizeof *r);
}

/* The exit status of a report with findings fs in a trace whose rows do
 * (broken "") or do not fit together. A damaged trace with only
 * unexplained errors is still "none found in a damaged trace" (2), with
 * the errors shown. */
static int report_status(const gt_findings *fs, const gt_strbuf *broken)
{
    size_t pinned = 0;
    for (size_t i = 0; i < fs->n; i++)
        pinned += fs->v[i].kind != GT_FINDING_UNEXPLAINED;
    return pinned ? 1 : broken->len ? 2 : fs->n ? 1 : 0;
}

int gt_report_build(gt_trace *t, const char *name, const gt_diagnose_options *opts,
                    gt_report *out)
{
    gt_report r = {.broken = GT_STRBUF_INIT};
    qdb db = {.t = t, .db = gt_trace_db(t)};
    char *fjson = NULL, *ojson = NULL, *cjson = NULL, *sjson = NULL;
    int rc = gt_diagnose(t, opts, &r.findings);
    memset(out, 0, sizeof *out);
    if (rc != 0)
        goto fail;
    if ((rc = gt_trace_check_links(t, &r.broken)) < 0)
        goto fail;
    rc = 0;
    r.docs = findings_docs(&db, &rc, r.findings);
    r.ndocs = r.docs ? r.findings->n : 0;
    if (!rc)
        merge_same(&db, &rc, r.docs, &r.ndocs);
    if (!rc)
        fjson = join_array(&rc, r.docs, r.ndocs);
    r.error = error_json(&db, &rc);
    if (!rc)
        ojson = outside_json(&db, &rc, opts ? opts->backward : 0);
    if (!rc)
        cjson = compiled_eager_json(&db, &rc);
    if (!rc)
        sjson = sources_changed_json(&db, &rc);
    if (!rc && fjson)
        r.doc = qtext(
            &db, &rc,
            "SELECT json_object('trace', ?1, 'partial', json(?2), 'error', json(?3),"
            " 'findings', json(?4), 'stopped', CASE WHEN ?5 > 0 THEN"
            " json_object('seq', ?5, 'reason', ?6) END, 'inconsistent', ?7,"
            " 'outside_recording', json(coalesce(?8, '[]')),"
            " 'compiled_ran_eagerly', json(coalesce(?9, 'false')),"
            " 'sources_changed', json(?10))",
            "ssssisssss", name, tf(gt_trace_partial(t)), r.error, fjson,
            (int64_t)gt_trace_stopped_seq(t), gt_trace_stopped_reason(t),
            r.broken.len ? r.broken.p : NULL, ojson, cjson, sjson);
    if ((rc || !r.doc) && rc != GT_ENOMEM && gt_trace_errcode(t) != 0) {
        rc = gt_trace_errcode(t); /* the reading layer's message, on t */
        goto fail;
    }
    if (rc || !r.doc) {
        rc = gt__trace_fail(t, rc == GT_ENOMEM ? GT_ENOMEM : GT_ECORRUPT,
                            "cannot read trace: %s",
                            rc == GT_ENOMEM ? "out of memory" : sqlite3_errmsg(db.db));
        goto fail;
    }
    r.status = report_status(r.findings, &r.broken);
    free(fjson);
    free(ojson);
    free(cjson);
    free(sjson);
    *out = r;
    return 0;
fail:
    free(fjson);
    free(ojson);
    free(cjson);
    free(sjson);
    gt_report_release(&r);
    return rc;
}

int gt_diagnose_json(gt_trace *t, const char *name, const gt_diagnose_options *opts,
                     gt_strbuf *out, int *status)
{
    gt_report r;
    int rc = gt_report_build(t, name, opts, &r);
    if (rc == 0 && gt_strbuf_adds(out, r.doc) != 0)
        rc = gt__trace_fail(t, GT_ENOMEM, "out of memory");
    if (rc == 0)
        *status = r.status;
    gt_report_release(&r);
    return rc;
}

int gt_graph_build_focused(gt_trace *t, gt_graph_options *opts, gt_graph **out,
                           gt_strbuf *notes)
{
    gt_findings *findings = NULL;
    size_t *lead = NULL;
    /* The findings decide the default backward call and the focus. A trace
     * the diagnosis cannot read may still be drawn: say so and go on. */
    gt_diagnose_options dopts = {.backward = opts->backward};
    int rc = gt_diagnose(t, &dopts, &findings);
    if (rc == GT_EINVAL || rc == GT_ENOMEM)
        return rc;
    if (rc != 0)
        gt_strbuf_addf(notes, "cannot diagnose, drawing without findings: %s\n",
                       gt_trace_errmsg(t));
    /* findings diagnose prints as one ("repeated N times") count once */
    if (findings) {
        lead = calloc(findings->n ? findings->n : 1, sizeof *lead);
        if (!lead || gt_findings_same(t, findings, lead) != 0) {
            rc = gt__trace_fail(t, lead ? GT_ECORRUPT : GT_ENOMEM, "%s",
                                lead ? "cannot read the findings" : "out of memory");
            goto out;
        }
    }
    opts->findings = findings;
    opts->finding_lead = lead;
    rc = gt_graph_build(t, opts, out);
out:
    opts->findings = NULL;
    opts->finding_lead = NULL;
    free(lead);
    gt_findings_free(findings);
    return rc;
}
