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
#include "diagnose.h"
#include "replay.h"
#include "termtext.h"

/* ---- tiny query helpers ------------------------------------------------ */

/* Run `sql` with parameters described by `types` ('i': int64_t, 's': const
 * char * (NULL binds NULL), 'j': JSON text bound as text) and return the
 * first column of the first row, malloc'd; NULL for no row or SQL NULL.
 * On an SQLite error *rc is set to GT_ESQL. */
static char *qtext(sqlite3 *db, int *rc, const char *sql, const char *types, ...)
{
    sqlite3_stmt *st = NULL;
    char *out = NULL;
    va_list ap;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
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
                sqlite3_bind_text(st, i + 1, s, -1, SQLITE_TRANSIENT);
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
    sqlite3_finalize(st);
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

static char *loc_json(sqlite3 *db, int *rc, int64_t stack)
{
    return qtext(db, rc, LOC_SQL("?1"), "i", stack);
}

static char *names_json(sqlite3 *db, int *rc, int64_t tensor)
{
    return qtext(db, rc, "SELECT json_group_array(text) FROM (" GT__NAMES_SQL ")", "i",
                 tensor);
}

static const char *tf(int b) { return b ? "true" : "false"; }

static char *mutations_json(sqlite3 *db, int *rc, const gt_finding *f)
{
    char *arr = strdup("[]");
    if (!arr) {
        *rc = GT_ENOMEM;
        return NULL;
    }
    for (size_t i = 0; i < f->n_mutations && !*rc; i++) {
        const gt_mutation *m = &f->mutations[i];
        char *stack = qtext(db, rc, "SELECT stack FROM ops WHERE seq = ?1", "i", m->seq);
        char *loc = stack ? loc_json(db, rc, strtoll(stack, NULL, 10)) : NULL;
        char *names = names_json(db, rc, m->tensor);
        char *one = qtext(
            db, rc,
            "SELECT json_object('seq', ?1, 'op', (SELECT s.text FROM ops o JOIN strings s "
            "ON s.id = o.name WHERE o.seq = ?1), 'version_after', CASE WHEN ?2 < 0 THEN NULL "
            "ELSE ?2 END, 'location', json(?3), 'names', json(coalesce(?4, '[]')), "
            "'tensor', ?5, 'bump_seq', CASE WHEN ?6 = 0 THEN NULL ELSE ?6 END, "
            "'phase', (SELECT p.name FROM ops o JOIN phases p ON p.id = o.phase "
            "WHERE o.seq = ?1))",
            "iissii", m->seq, m->version_after, loc, names, m->tensor, m->bump_seq);
        char *next = one ? qtext(db, rc, "SELECT json_insert(?1, '$[#]', json(?2))", "ss",
                                 arr, one)
                         : NULL;
        free(stack);
        free(loc);
        free(names);
        free(one);
        if (next) {
            free(arr);
            arr = next;
        }
    }
    return arr;
}

static char *finding_json(sqlite3 *db, int *rc, const gt_finding *f)
{
    char *bw_stack = NULL, *bw_loc = NULL, *node_stack = NULL, *node_loc = NULL;
    char *saved_names = NULL, *muts = NULL, *other_loc = NULL, *other_stack = NULL;
    char *where = NULL, *out = NULL;

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
        node_loc = node_stack ? loc_json(db, rc, strtoll(node_stack, NULL, 10)) : NULL;
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
        "   NULL THEN json_array(?19) ELSE json(coalesce(?9, '[]')) END) END,"
        " 'location', json(?18))",
        "ssisisiisiissiisiss", gt_finding_kind_name(f->kind), tf(f->first_to_fail),
        f->backward, bw_loc, f->node, node_loc, f->saved_seq, f->tensor, saved_names,
        f->saved_version, f->version_at_backward, muts, f->suggestion,
        (int64_t)f->matches_error, f->other_backward, other_loc,
        f->kind == GT_FINDING_LEAF_INPLACE ? f->tensor : (int64_t)0, where, f->name);
out:
    free(bw_stack);
    free(bw_loc);
    free(other_stack);
    free(other_loc);
    free(node_stack);
    free(node_loc);
    free(where);
    free(saved_names);
    free(muts);
    return out;
}

/* The run's error: the last one recorded (the one that ended it). */
static char *error_json(sqlite3 *db, int *rc)
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

/* Every finding as one JSON array, in the findings' order. */
static char *findings_json(sqlite3 *db, int *rc, const gt_findings *fs)
{
    char *arr = strdup("[]");
    if (!arr) {
        *rc = GT_ENOMEM;
        return NULL;
    }
    for (size_t i = 0; i < fs->n && !*rc; i++) {
        char *one = finding_json(db, rc, &fs->v[i]);
        char *next = one ? qtext(db, rc, "SELECT json_insert(?1, '$[#]', json(?2))", "ss",
                                 arr, one)
                         : NULL;
        free(one);
        if (next) {
            free(arr);
            arr = next;
        }
    }
    return arr;
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
static char *jx(sqlite3 *db, const char *doc, const char *path)
{
    int rc = 0;
    char *v = qtext(db, &rc, "SELECT json_extract(?1, ?2)", "ss", doc, path);
    return v ? v : strdup("");
}

/* Like jx, for text shown to the user: trace text may hold control
 * characters, shown as visible escapes (termtext.h). Never for a value
 * that is parsed again as JSON. */
static char *jt(sqlite3 *db, const char *doc, const char *path)
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

static char *names_text(sqlite3 *db, const char *doc, const char *path)
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
static void print_loc(FILE *o, sqlite3 *db, const style *st, const char *cwd,
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

static void print_finding(FILE *o, sqlite3 *db, const style *st, const char *cwd,
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
    int mcount = 0;
    {
        int rc = 0;
        char *n = qtext(db, &rc, "SELECT json_array_length(?1, '$.mutations')", "s", doc);
        mcount = n ? atoi(n) : 0;
        free(n);
    }

    fprintf(o, "%s[%zu] %s%s", st->bold, index, st->reset, st->red);
    if (!strcmp(kind, "inplace_invalidated_saved"))
        fprintf(o, "%s modified in place after %s saved it as %s (version %s -> %s)", nm,
                node, slot, sv, va);
    else if (!strcmp(kind, "silent_storage_write"))
        fprintf(o, "%s overwritten through an alias autograd cannot see, after %s saved "
                   "it as %s: gradients are silently wrong",
                nm, node, slot);
    else if (!strcmp(kind, "backward_twice"))
        fprintf(o, "backward #%s reached %s, whose saved tensors backward #%s already freed",
                bi, node, fb);
    else {
        char *ln = names_text(db, doc, "$.leaf.names");
        fprintf(o, "in-place operation on %s, a leaf tensor that requires grad",
                ln[0] ? ln : "a leaf");
        free(ln);
    }
    fprintf(o, "%s  %s[%s%s]%s\n", st->reset, st->dim, kind,
            !strcmp(ftf, "1") ? ", first to fail" : "", st->reset);

    if (strcmp(kind, "leaf_inplace") != 0) {
        print_loc(o, db, st, cwd, "saved at", nloc);
        fprintf(o, "    %11s %s saved %s%s%s%s%s (%s %s) at version %s\n", "", node,
                st->bold, slot[0] ? slot : "?", st->reset, names[0] ? " = " : "", names,
                dtype, shape, sv);
    } else {
        print_loc(o, db, st, cwd, "raised at", loc);
    }

    /* The writes, grouped by consecutive location. */
    char *prev = NULL;
    for (int i = 0; i < mcount; i++) {
        char path[64];
        snprintf(path, sizeof path, "$.mutations[%d]", i);
        int rc = 0;
        char *m = qtext(db, &rc, "SELECT json_extract(?1, ?2)", "ss", doc, path);
        if (!m)
            continue;
        char *mloc = jx(db, m, "$.location"), *op = jt(db, m, "$.op");
        char *ver = jt(db, m, "$.version_after"), *mn = names_text(db, m, "$.names");
        if (!prev || strcmp(prev, mloc) != 0)
            print_loc(o, db, st, cwd,
                      !strcmp(kind, "silent_storage_write") ? "written at" : "modified at",
                      mloc);
        fprintf(o, "    %11s %s%-20s%s %s%s%s\n", "", st->yellow, op, st->reset,
                mn[0] ? mn : "", ver[0] ? " -> version " : "", ver);
        free(prev);
        prev = mloc;
        free(m);
        free(op);
        free(ver);
        free(mn);
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
    if (strcmp(ftf, "1") != 0 && match[0])
        fprintf(o, "    %-11s %snot the one PyTorch raised: it stops at the first stale "
                   "tensor%s\n", "error", st->dim, st->reset);
    else if (!strcmp(match, "1"))
        fprintf(o, "    %-11s %smatches the error PyTorch raised%s\n", "error", st->green,
                st->reset);
    else if (!strcmp(match, "0"))
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

static void print_text(FILE *o, sqlite3 *db, const style *st, const char *path_arg,
                       gt_trace *t, const char *broken, const char *err,
                       const char *findings, size_t n)
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
    if (n == 0) {
        fprintf(o, "%s: no findings: no saved tensor was modified before the backward that "
                   "needed it\n",
                trace);
        free(tr);
        return;
    }
    fprintf(o, "%s: %zu finding%s\n\n", trace, n, n == 1 ? "" : "s");
    for (size_t i = 0; i < n; i++) {
        char path[64];
        snprintf(path, sizeof path, "$[%zu]", i);
        char *doc = jx(db, findings, path);
        print_finding(o, db, st, cwd, doc, i + 1);
        free(doc);
    }
    free(tr);
}

/* ---- command ----------------------------------------------------------- */

static void usage(FILE *o)
{
    fprintf(o,
            "usage: gradtrace diagnose [options] TRACE\n"
            "\n"
            "Replay each backward call of TRACE and report every saved tensor that was\n"
            "changed between its save and the backward that needed it.\n"
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
    char err[1024];
    char *fjson = NULL, *ejson = NULL, *doc = NULL;

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
    if (optind != argc - 1)
        return gt_usage_error("diagnose", usage, "%s",
                              optind >= argc ? "missing trace file" : "too many arguments");
    const char *path = argv[optind];
    if (gt_trace_open(path, &t, err, sizeof err) != 0) {
        fprintf(stderr, "gradtrace: %s\n", err);
        return 2;
    }
    gt_diagnose_options opts = {.backward = backward};
    if (gt_diagnose(t, &opts, &fs, err, sizeof err) != 0) {
        fprintf(stderr, "gradtrace: diagnose %s: %s\n", path, err);
        goto out;
    }
    sqlite3 *db = gt_trace_db(t);
    int rc = 0;
    char broken[512];
    gt_trace_check_links(t, broken, sizeof broken);
    fjson = findings_json(db, &rc, fs);
    ejson = error_json(db, &rc);
    if (!rc && fjson)
        doc = qtext(db, &rc,
                    "SELECT json_object('trace', ?1, 'partial', json(?2), 'error', json(?3),"
                    " 'findings', json(?4), 'stopped', CASE WHEN ?5 > 0 THEN"
                    " json_object('seq', ?5, 'reason', ?6) END, 'inconsistent', ?7)",
                    "ssssiss", path, tf(gt_trace_partial(t)), ejson, fjson,
                    (int64_t)gt_trace_stopped_seq(t), gt_trace_stopped_reason(t),
                    broken[0] ? broken : NULL);
    if (rc || !doc) {
        fprintf(stderr, "gradtrace: diagnose %s: cannot read trace: %s\n", path,
                rc == GT_ENOMEM ? "out of memory" : sqlite3_errmsg(db));
        goto out;
    }
    if (json) {
        printf("%s\n", doc);
    } else {
        if (color < 0)
            color = isatty(STDOUT_FILENO) && !getenv("NO_COLOR");
        print_text(stdout, db, color ? &ansi : &plain, path, t, broken, ejson, fjson, fs->n);
    }
    status = fs->n ? 1 : broken[0] ? 2 : 0;
out:
    if (fflush(stdout) != 0 && status != 2) {
        fprintf(stderr, "gradtrace: diagnose: cannot write output\n");
        status = 2;
    }
    free(doc);
    free(fjson);
    free(ejson);
    gt_findings_free(fs);
    gt_trace_close(t);
    return status;
}
