/* The text report (report.h's gt_report_text): what `gradtrace diagnose`
 * prints for a person at a terminal, read from the findings' JSON
 * documents so the text says what the JSON says. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gradtrace/error.h>

#include "grow.h"
#include "modpath.h"
#include <gradtrace/report.h>
#include "strbuf.h"
#include <gradtrace/termtext.h>
#include "trace_int.h"

/* The trace and its connection (the statements are the trace's:
 * gt_trace_stmt). */
typedef struct qdb {
    gt_trace *t;
    sqlite3 *db;
} qdb;

static sqlite3_stmt *qprep(qdb *q, const char *sql)
{
    return gt_trace_stmt(q->t, sql);
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
        if (GT_ALLOC_GROW(d->v, d->n + 1, d->cap, 64) != 0) {
            d->oom = 1;
            break;
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
    if (p && GT_ALLOC_GROW(d->keep, d->nkeep + 1, d->capkeep, 16) != 0) {
        free(p);
        p = NULL;
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
    const char *mod = jt(d, sub(k, sizeof k, key, ".module"));
    /* a notebook cell (named "In [3]" by the recorder) reads as Jupyter's */
    const char *sep = !strncmp(file, "In [", 4) ? ", line " : ":";
    /* "in layer3.1 (BasicBlock.forward)" where a module ran it */
    fprintf(o, "    %-11s %s%s%s%s%s%s%s%s%s%s\n", label, st->cyan, rel(file, cwd), sep,
            line, st->reset, fn[0] || mod[0] ? "  in " : "", mod,
            mod[0] && fn[0] ? " (" : "", fn, mod[0] && fn[0] ? ")" : "");
    const char *c = code;
    while (*c == ' ' || *c == '\t')
        c++;
    if (*c) {
        fprintf(o, "    %11s %s%5s |%s ", "", st->dim, line, st->reset);
        gt_term_puts(o, c);
        fputc('\n', o);
    }
}

/* "in modules  blocks.0–5.mlp": the modules (gt_module_span) a repeated
 * finding's nodes were made in, when the finding has them. */
static void print_modules(FILE *o, jdoc *d)
{
    const char **paths = calloc(d->n ? d->n : 1, sizeof *paths);
    size_t n = 0;
    for (size_t i = 0; paths && !d->oom && i < d->n; i++)
        if (!strcmp(d->v[i].parent, "$.modules") && d->v[i].val)
            paths[n++] = d->v[i].val;
    gt_strbuf span = GT_STRBUF_INIT;
    if (n && gt_module_span(paths, n, &span) && !span.oom)
        fprintf(o, "    %-11s %s\n", "in modules", jkeep(d, gt_term_text(span.p)));
    gt_strbuf_release(&span);
    free(paths);
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

/* What every part of a finding's text reads: the fields of its document
 * shown in more than one place, and where to print. */
typedef struct ftext {
    FILE *o;
    jdoc *d;
    const style *st;
    const char *cwd;
    const char *kind, *ftf, *node, *slot, *dtype, *shape, *sv, *va, *bi, *fb;
    const char *names, *sugg, *match;
    const char *nm; /* the saved tensor's names, or "a tensor" */
} ftext;

/* ---- headlines: one printer per kind (diagnose.h's GT_FINDING_KINDS) ---- */

static void head_invalidated(const ftext *x)
{
    fprintf(x->o, "%s modified in place after %s saved it as %s (version %s -> %s)",
            x->nm, x->node, x->slot, x->sv, x->va);
}

/* a c10d collective writes in place without bumping the version */
static void head_silent_write(const ftext *x)
{
    const char *wop = jt(x->d, "$.mutations[0].op");
    if (!strncmp(wop, "c10d::", 6))
        fprintf(x->o,
                "%s overwritten by the collective %s, which autograd cannot see, "
                "after %s saved it as %s: gradients are silently wrong",
                x->nm, wop, x->node, x->slot);
    else
        fprintf(x->o,
                "%s overwritten through an alias autograd cannot see, after %s "
                "saved it as %s: gradients are silently wrong",
                x->nm, x->node, x->slot);
}

/* an op that writes without moving the version (kernel_writes) */
static void head_kernel_write(const ftext *x)
{
    fprintf(x->o,
            "%s overwritten by %s, which moves no version, after %s saved it as %s: "
            "gradients are silently wrong",
            x->nm, jt(x->d, "$.mutations[0].op"), x->node, x->slot);
}

static void head_saved_write(const ftext *x)
{
    fprintf(x->o,
            "%s's bytes changed between %s saving it as %s and backward using it, "
            "with no write autograd saw: gradients are silently wrong",
            x->nm, x->node, x->slot);
}

static void head_swap(const ftext *x)
{
    fprintf(x->o,
            "%s swapped to other memory after %s saved it as %s: backward read the "
            "new data, gradients are silently wrong",
            x->nm, x->node, x->slot);
}

static void head_twice(const ftext *x)
{
    fprintf(x->o,
            "backward #%s reached %s, whose saved tensors backward #%s already freed",
            x->bi, x->node, x->fb);
}

/* named as the raising line writes it ("v1[0]", "x[:, 1]"), with the leaf's
 * own names when they differ */
static void head_leaf(const ftext *x)
{
    const char *ln = names_text(x->d, "$.leaf.names");
    const char *ex = jt(x->d, "$.leaf.expression"), *vw = jx(x->d, "$.view.origin.seq");
    if (ex[0] && vw[0])
        fprintf(x->o, "in-place operation on %s, a view of %s%s", ex,
                ln[0] ? ln : "a leaf",
                ln[0] ? ", a leaf tensor that requires grad" : " that requires grad");
    else if (ex[0] && ln[0] && strcmp(ex, ln) != 0)
        fprintf(x->o, "in-place operation on %s (%s), a leaf tensor that requires grad",
                ex, ln);
    else
        fprintf(x->o, "in-place operation on %s, a leaf tensor that requires grad",
                ex[0]   ? ex
                : ln[0] ? ln
                        : "a leaf");
}

/* Why an autograd.grad input is not on the outputs' graph, by its reason. */
static const char *input_why(const char *why)
{
    static const struct {
        const char *reason, *text;
    } v[] = {
        {"input_does_not_require_grad", "does not require grad"},
        {"requires_grad_too_late",
         "did not require grad yet when the outputs were computed"},
        {"no_grad", "reaches the outputs only where grad mode was off"},
        {"detach", "reaches the outputs only through detach()"},
        {"unused", "was used by no op: the outputs do not depend on it"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (!strcmp(why, v[i].reason))
            return v[i].text;
    return "is not on the outputs' graph";
}

static void head_input(const ftext *x)
{
    const char *rn = jt(x->d, "$.target.names[0]");
    fprintf(x->o, "autograd.grad input %s %s", rn[0] ? rn : "(unnamed)",
            input_why(jx(x->d, "$.target.cut.reason")));
}

/* Where a root's graph was cut, by its reason. */
static const char *root_why(const char *why)
{
    static const struct {
        const char *reason, *text;
    } v[] = {
        {"detach", "the graph was cut by detach()"},
        {"data", "the graph was cut by .data"},
        {"no_grad", "the graph was cut where grad mode was off"},
        {"item", "it was made from values taken out of a graph"},
        {"not_differentiable", "the graph was cut by an op with no gradient"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (!strcmp(why, v[i].reason))
            return v[i].text;
    return "nothing it comes from requires grad";
}

static void head_root(const ftext *x)
{
    const char *rn = jt(x->d, "$.target.names[0]");
    fprintf(x->o, "backward() of %s, which has no grad_fn: %s", rn[0] ? rn : "a tensor",
            root_why(jx(x->d, "$.target.cut.reason")));
}

/* The tensor an op refused for what it is wrote, as the line names it. */
static const char *refused_var(const ftext *x)
{
    const char *var = jt(x->d, "$.target.expression");
    const char *tn = names_text(x->d, "$.target.names");
    if (!var[0])
        var = jt(x->d, "$.target.variable");
    if (!var[0])
        var = tn[0] ? tn : "a tensor";
    return var;
}

static void head_overlap(const ftext *x)
{
    const char *vop = jt(x->d, "$.target.origin.op");
    fprintf(x->o, "in-place operation on %s, whose elements share memory%s%s%s",
            refused_var(x), vop[0] ? " (" : "", vop, vop[0] ? ")" : "");
}

static void head_input_overlap(const ftext *x)
{
    const char *var = refused_var(x), *on = jt(x->d, "$.target.other.names[0]");
    fprintf(x->o, "in-place operation on %s, reading %s%s that shares its memory", var,
            on[0] ? on : "an input", on[0] ? ", an input" : "");
}

static void head_inference(const ftext *x)
{
    fprintf(x->o,
            "in-place operation on %s, a tensor made in torch.inference_mode(), "
            "outside it",
            refused_var(x));
}

static void head_dtype(const ftext *x)
{
    const char *var = refused_var(x);
    fprintf(x->o, "in-place operation on %s (%s), whose dtype cannot hold the result",
            var, jt(x->d, "$.target.dtype"));
}

static void head_shape(const ftext *x)
{
    const char *var = refused_var(x);
    fprintf(x->o,
            "in-place operation on %s (shape %s), smaller than the broadcast "
            "result",
            var, jx(x->d, "$.target.shape"));
}

static void head_detach_view(const ftext *x)
{
    fprintf(x->o, "detach_() on %s, a view", refused_var(x));
}

static void head_resize(const ftext *x)
{
    fprintf(x->o, "resize_() on %s, a tensor that requires grad", refused_var(x));
}

static void head_unexplained(const ftext *x)
{
    if (!strcmp(jx(x->d, "$.outside_recording"), "1"))
        fprintf(x->o, "the run raised an in-place error about a graph whose forward ran "
                      "before recording started: outside the recording");
    else
        fprintf(x->o, "the run raised an in-place error that the replay cannot pin to a "
                      "write");
}

static void head_view(const ftext *x)
{
    const char *var = jt(x->d, "$.view.expression"), *vop = jt(x->d, "$.view.origin.op");
    if (!var[0])
        var = jt(x->d, "$.view.variable");
    const char *what = !strcmp(x->kind, "view_multi_output_inplace")
                           ? "an output of a function that returns several views"
                       : !strcmp(x->kind, "view_no_grad_inplace")
                           ? "a view made under torch.no_grad()"
                       : !strcmp(x->kind, "view_inference_inplace")
                           ? "a view made in torch.inference_mode()"
                           : "a view returned by a custom autograd Function";
    fprintf(x->o, "in-place operation on %s, %s%s%s%s", var[0] ? var : "a view", what,
            vop[0] ? " (" : "", vop, vop[0] ? ")" : "");
}

/* DDP got no gradient for its parameters (all named: they are listed
 * below), so its next forward raised. */
static void head_ddp_unused(const ftext *x)
{
    char k[96];
    fprintf(x->o, "DistributedDataParallel got no gradient for ");
    for (size_t i = 0; i < 64; i++) {
        snprintf(k, sizeof k, "$.target.parameters[%zu].name", i);
        const char *pn = jt(x->d, k);
        if (!pn[0])
            break;
        fprintf(x->o, "%s%s", i ? ", " : "", pn);
    }
    if (x->bi[0])
        fprintf(x->o, " in backward #%s", x->bi);
    fprintf(x->o, ", so its next forward raised");
}

/* The headline printer of a kind named `kind`; a view's for a kind this
 * gradtrace does not know. */
static void (*headline(const char *kind))(const ftext *)
{
#define HEAD(name, value, json, family, printer) {json, head_##printer},
    static const struct {
        const char *kind;
        void (*print)(const ftext *);
    } heads[] = {GT_FINDING_KINDS(HEAD)};
#undef HEAD
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++)
        if (!strcmp(kind, heads[i].kind))
            return heads[i].print;
    return head_view;
}

/* ---- the parts under the headline ------------------------------------- */

/* "repeated N times", when the finding stands for several. */
static void print_repeats(const ftext *x)
{
    const char *rep = jx(x->d, "$.repeats");
    long long vmin = 0, vmax = 0;
    if (!rep[0] || !strcmp(rep, "1"))
        return;
    if (x->node[0] && versions_range(x->d, "$.saved_versions", &vmin, &vmax) &&
        vmin != vmax)
        fprintf(x->o,
                "    %-11s %s times: %s %s nodes made at this line saved %s at versions "
                "%lld to %lld, changed later by the same lines (version %s shown)\n",
                "repeated", rep, rep, x->node, x->nm, vmin, vmax, x->sv);
    else if (x->node[0])
        fprintf(x->o,
                "    %-11s %s times: %s %s nodes made at this line, the same finding "
                "for each (one shown)\n",
                "repeated", rep, rep, x->node);
    else
        fprintf(x->o, "    %-11s %s times, the same each time (one shown)\n", "repeated",
                rep);
    print_modules(x->o, x->d);
}

/* The tensors whose dtype, shape and versions match an unexplained
 * error's message. */
static void print_candidates(const ftext *x)
{
    jdoc *d = x->d;
    char k[256];
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
        fprintf(x->o, "    %-11s %s (%s %s)\n", n++ ? "" : "candidates",
                tn[0] ? tn : "a tensor", td, ts);
    }
    if (!n)
        fprintf(x->o,
                "    %-11s %sno recorded tensor matches the message's dtype, shape "
                "and version%s\n",
                "candidates", x->st->dim, x->st->reset);
}

/* The named tensors a root comes from, none of which requires grad. */
static void print_sources(const ftext *x)
{
    jdoc *d = x->d;
    char k[256];
    int n = 0;
    for (size_t i = 0; i < d->n; i++) {
        if (strcmp(d->v[i].parent, "$.target.cut.sources") != 0)
            continue;
        char key[96];
        snprintf(key, sizeof key, "%s", d->v[i].key);
        const char *tn = jt(d, sub(k, sizeof k, key, ".names[0]"));
        if (!tn[0]) /* a Python number, a temporary: in the JSON */
            continue;
        fprintf(x->o, "    %-11s %s (%s %s)\n", n++ ? "" : "comes from", tn,
                jt(d, sub(k, sizeof k, key, ".dtype")),
                jx(d, sub(k, sizeof k, key, ".shape")));
    }
}

/* A cut graph: where it was cut (or first read) and where the root was made. */
static void print_cut(const ftext *x)
{
    jdoc *d = x->d;
    const char *why = jx(d, "$.target.cut.reason");
    int input = !strcmp(x->kind, "grad_input_unreachable");
    if (jx(d, "$.target.cut.location")[0]) {
        const char *in = jt(d, "$.target.cut.input.names[0]");
        int detached = !strncmp(jt(d, "$.target.cut.op"), "aten::detach", 12);
        print_loc(x->o, d, x->st, x->cwd,
                  input                 ? "first read"
                  : strcmp(why, "item") ? "cut at"
                  : detached            ? "left at"
                                        : "item() at",
                  "$.target.cut.location");
        fprintf(x->o, "    %11s %s%-20s%s %s%s%s\n", "", x->st->yellow,
                jt(d, "$.target.cut.op"), x->st->reset, in[0] ? "took " : "", in,
                !strcmp(why, "no_grad") ? " with grad mode off"
                : in[0]                 ? ", which has a graph"
                                        : "");
    }
    if (jx(d, "$.target.cut.made_at")[0])
        print_loc(x->o, d, x->st, x->cwd, "made at", "$.target.cut.made_at");
    if (!strcmp(why, "no_input_requires_grad"))
        print_sources(x);
}

/* A refused op: where the tensor written (or the input overlapping it) was
 * made. */
static void print_refused(const ftext *x)
{
    jdoc *d = x->d;
    const char *other = jx(d, "$.target.other.tensor");
    const char *mn = names_text(d, other[0] && !strcmp(x->kind, "inplace_input_overlap")
                                       ? "$.target.other.names"
                                       : "$.target.names");
    if (jx(d, "$.target.origin.location")[0]) {
        const char *gm = jx(d, "$.target.origin.grad_mode");
        print_loc(x->o, d, x->st, x->cwd, "made at", "$.target.origin.location");
        fprintf(x->o, "    %11s %s%-20s%s made %s%s\n", "", x->st->yellow,
                jt(d, "$.target.origin.op"), x->st->reset, mn[0] ? mn : "it",
                !strcmp(gm, "0") ? " with grad mode off" : "");
    } else if (jx(d, "$.target.tensor")[0]) {
        fprintf(x->o, "    %-11s %s(the op that made it is not in the trace)%s\n",
                "made at", x->st->dim, x->st->reset);
    }
}

/* A view changed in place: where the view was made. */
static void print_view(const ftext *x)
{
    jdoc *d = x->d;
    if (strncmp(x->kind, "view_", 5) != 0 && !jx(d, "$.view.origin.seq")[0])
        return;
    const char *gm = jx(d, "$.view.origin.grad_mode");
    const char *vn = names_text(d, "$.view.names");
    if (jx(d, "$.view.origin.location")[0]) {
        const char *vop = jt(d, "$.view.origin.op");
        print_loc(x->o, d, x->st, x->cwd, "view from", "$.view.origin.location");
        fprintf(x->o, "    %11s %s%-20s%s made %s%s\n", "", x->st->yellow, vop,
                x->st->reset, vn[0] ? vn : "the view",
                !strcmp(gm, "0") ? " with grad mode off" : "");
    } else {
        fprintf(x->o, "    %-11s %s(the op that made it is not in the trace)%s\n",
                "view from", x->st->dim, x->st->reset);
    }
}

/* Why DDP got no gradient for a parameter, by its reason. */
static const char *ddp_why(const char *why)
{
    static const struct {
        const char *reason, *text;
    } v[] = {
        {"unused", "used by no op in the forward"},
        {"not_on_path", "used, but their output does not reach the loss"},
        {"detach", "cut from the loss by detach()"},
        {"no_grad", "cut from the loss where grad mode was off"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (!strcmp(why, v[i].reason))
            return v[i].text;
    return "not in the trace";
}

/* ddp_unused_parameters: the backward, then each run of parameters with one
 * module, reason and line: why, and the line; where DDP wrapped the model. */
static void print_ddp(const ftext *x)
{
    jdoc *d = x->d;
    char k[256], pk[96], qk[96];
    print_loc(x->o, d, x->st, x->cwd, "backward", "$.backward.location");
    for (size_t i = 0, j;; i = j) {
        snprintf(pk, sizeof pk, "$.target.parameters[%zu]", i);
        if (!jx(d, pk)[0])
            break;
        const char *why = jx(d, sub(k, sizeof k, pk, ".reason"));
        const char *mod = jt(d, sub(k, sizeof k, pk, ".module"));
        const char *at = jx(d, sub(k, sizeof k, pk, ".location"));
        fprintf(x->o, "    %-11s %s%s", "parameters", x->st->bold,
                jt(d, sub(k, sizeof k, pk, ".name")));
        for (j = i + 1;; j++) { /* the run with one module, reason and line */
            snprintf(qk, sizeof qk, "$.target.parameters[%zu]", j);
            if (!jx(d, qk)[0] || strcmp(jx(d, sub(k, sizeof k, qk, ".reason")), why) ||
                strcmp(jt(d, sub(k, sizeof k, qk, ".module")), mod) ||
                strcmp(jx(d, sub(k, sizeof k, qk, ".location")), at))
                break;
            fprintf(x->o, ", %s", jt(d, sub(k, sizeof k, qk, ".name")));
        }
        fprintf(x->o, "%s%s%s%s: %s\n", x->st->reset, mod[0] ? " (module " : "", mod,
                mod[0] ? ")" : "", ddp_why(why));
        if (!strcmp(why, "unused"))
            print_loc(x->o, d, x->st, x->cwd, "made at",
                      sub(k, sizeof k, pk, ".made_at"));
        else if (why[0])
            print_loc(x->o, d, x->st, x->cwd,
                      strcmp(why, "not_on_path") ? "cut at" : "used at",
                      sub(k, sizeof k, pk, ".location"));
    }
    if (jx(d, "$.target.ddp.location")[0])
        print_loc(x->o, d, x->st, x->cwd, "wrapped at", "$.target.ddp.location");
}

/* Where the error was raised at the op and what the kind's family adds;
 * 0 when the kind is about a saved tensor (nothing raised at an op). */
static int print_raised(const ftext *x)
{
    int family = gt_finding_family(gt_finding_kind_of(x->kind));
    if (family == GT_FAMILY_SAVED || (family < 0 && strncmp(x->kind, "view_", 5) != 0))
        return 0;
    print_loc(x->o, x->d, x->st, x->cwd, "raised at", "$.location");
    if (family == GT_FAMILY_UNEXPLAINED)
        print_candidates(x);
    else if (family == GT_FAMILY_CUT)
        print_cut(x);
    else if (family == GT_FAMILY_REFUSED)
        print_refused(x);
    else if (family == GT_FAMILY_DDP)
        print_ddp(x);
    else
        print_view(x);
    return 1;
}

/* Where the tensor was saved, by which node. */
static void print_saved(const ftext *x)
{
    jdoc *d = x->d;
    const style *st = x->st;
    const char *cfn = jt(d, "$.node.compiled.function");
    if (cfn[0]) { /* not the decorator's line: one inside, not recorded */
        fprintf(x->o,
                "    %-11s %s%s%s, compiled by torch.compile: %sits lines are not in "
                "the trace%s\n",
                "saved in", st->bold, cfn, st->reset, st->dim, st->reset);
        print_loc(x->o, d, st, x->cwd, "called at", "$.node.compiled.call_location");
    } else {
        print_loc(x->o, d, st, x->cwd, "saved at", "$.node.location");
    }
    fprintf(x->o, "    %11s %s saved %s%s%s%s%s (%s %s)%s%s\n", "", x->node, st->bold,
            x->slot[0] ? x->slot : "?", st->reset, x->names[0] ? " = " : "", x->names,
            x->dtype, x->shape,
            x->sv[0] ? " at version " : ", freed since: the graph holds it no more",
            x->sv);
    if (jx(d, "$.node.inner_location")[0])
        print_loc(x->o, d, st, x->cwd,
                  strcmp(jt(d, "$.node.inner_role"), "saved") ? "used inside"
                                                              : "saved by",
                  "$.node.inner_location");
}

/* The label of a group of writes of this kind. */
static const char *writes_label(const char *kind, const char *op)
{
    return !strcmp(kind, "silent_storage_write") || !strcmp(kind, "silent_kernel_write")
               ? "written at"
           : !strcmp(kind, "silent_storage_swap") ? (op[0] ? "noticed at" : "swapped at")
           : !strcmp(kind, "silent_saved_write")  ? "written at"
           : !strcmp(kind, "unexplained")         ? "last written"
                                                  : "modified at";
}

/* The writes, grouped by consecutive location (one pass over them). */
static void print_writes(const ftext *x)
{
    jdoc *d = x->d;
    const char *prev = NULL;
    char k[256];
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
            print_loc(x->o, d, x->st, x->cwd, writes_label(x->kind, op), lk);
        fprintf(x->o, "    %11s %s%-20s%s %s%s%s\n", "", x->st->yellow, op, x->st->reset,
                mn[0] ? mn : "", ver[0] ? " -> version " : "", ver);
        prev = mloc;
    }
}

/* The backward call that freed the graph, and the one that needed it. */
static void print_backward(const ftext *x)
{
    if (!strcmp(x->kind, "backward_twice")) {
        print_loc(x->o, x->d, x->st, x->cwd, "freed by", "$.freed_by.location");
        fprintf(x->o, "    %11s backward #%s ran without retain_graph=True\n", "", x->fb);
    }
    int family = gt_finding_family(gt_finding_kind_of(x->kind));
    if (x->bi[0] && family != GT_FAMILY_CUT &&
        family != GT_FAMILY_DDP) { /* raised there */
        print_loc(x->o, x->d, x->st, x->cwd, "needed by", "$.backward.location");
        if (!strcmp(x->kind, "inplace_invalidated_saved"))
            fprintf(x->o, "    %11s backward #%s found version %s, expected %s\n", "",
                    x->bi, x->va, x->sv);
        else
            fprintf(x->o, "    %11s backward #%s\n", "", x->bi);
    }
}

/* How the finding compares with the error PyTorch raised. */
static void print_error(const ftext *x)
{
    const style *st = x->st;
    if (!strcmp(x->kind, "unexplained")) {
        if (!strcmp(jx(x->d, "$.mismatch"), "1"))
            fprintf(x->o,
                    "    %-11s %sthe finding marked first to fail for this backward "
                    "does not match PyTorch's message%s\n",
                    "error", st->yellow, st->reset);
        else
            fprintf(x->o, "    %-11s %sno finding matches the error PyTorch raised%s\n",
                    "error", st->yellow, st->reset);
    } else if (strcmp(x->ftf, "1") != 0 && x->match[0]) {
        fprintf(x->o,
                "    %-11s %snot the one PyTorch raised: it stops at the first stale "
                "tensor%s\n",
                "error", st->dim, st->reset);
    } else if (!strcmp(x->match, "1")) {
        const char *es = jx(x->d, "$.saved.error_shape");
        if (es[0])
            fprintf(x->o,
                    "    %-11s %smatches the error PyTorch raised%s (its message shows "
                    "%s, one vmap sample; the trace holds the batched %s)\n",
                    "error", st->green, st->reset, es, x->shape);
        else
            fprintf(x->o, "    %-11s %smatches the error PyTorch raised%s\n", "error",
                    st->green, st->reset);
    } else if (!strcmp(x->match, "0")) {
        fprintf(x->o, "    %-11s %sdoes not match the error PyTorch raised%s\n", "error",
                st->yellow, st->reset);
    }
}

/* Print finding `index` (its JSON document read into d). Returns 0, or -1
 * when out of memory (o then holds a part: the caller discards it). */
static int print_finding(FILE *o, jdoc *d, const style *st, const char *cwd, size_t index)
{
    ftext x = {
        .o = o,
        .d = d,
        .st = st,
        .cwd = cwd,
        .kind = jt(d, "$.kind"),
        .ftf = jx(d, "$.first_to_fail"),
        .node = jt(d, "$.node.name"),
        .slot = jt(d, "$.saved.slot"),
        .dtype = jt(d, "$.saved.dtype"),
        .shape = jt(d, "$.saved.shape"),
        .sv = jt(d, "$.saved.saved_version"),
        .va = jt(d, "$.saved.version_at_backward"),
        .bi = jt(d, "$.backward.index"),
        .fb = jt(d, "$.freed_by.index"),
        .names = names_text(d, "$.saved.names"),
        .sugg = jt(d, "$.suggestion"),
        .match = jx(d, "$.matches_error"),
    };
    x.nm = x.names[0] ? x.names : "a tensor";
    if (d->oom)
        return -1;
    fprintf(o, "%s[%zu] %s%s", st->bold, index, st->reset, st->red);
    headline(x.kind)(&x);
    fprintf(o, "%s  %s[%s%s]%s\n", st->reset, st->dim, x.kind,
            !strcmp(x.ftf, "1") ? ", first to fail" : "", st->reset);
    print_repeats(&x);
    if (!print_raised(&x))
        print_saved(&x);
    print_writes(&x);
    print_backward(&x);
    print_error(&x);
    if (x.sugg[0])
        fprintf(o, "    %s%-11s%s %s\n", st->green, "fix", st->reset, x.sugg);
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

int gt_report_text(gt_trace *t, const gt_report *r, const char *name, int color,
                   gt_strbuf *out)
{
    qdb db = {.t = t, .db = gt_trace_db(t)};
    const style *st = color ? &ansi : &plain;
    /* into memory first: out of memory midway gives nothing, not a
     * finding with blank fields */
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    char **cnote = NULL;
    size_t ncnote = 0;
    int prc =
        m ? gt_diagnose_notes(db.db, r->doc, GT_NOTE_COMPILED, &cnote, &ncnote) : -1;
    for (size_t i = 0; i < ncnote; i++)
        fprintf(m, "%snote:%s %s\n", st->yellow, st->reset, cnote[i]);
    gt_diagnose_notes_free(cnote, ncnote);
    if (prc == 0)
        prc = print_text(m, &db, st, name, t, gt_strbuf_str(&r->broken), r->error, r->doc,
                         r->docs, r->ndocs);
    if (m && fclose(m) != 0)
        prc = -1;
    if (prc == 0 && gt_strbuf_add(out, text ? text : "", len) != 0)
        prc = -1;
    free(text);
    return prc ? gt__trace_fail(t, GT_ENOMEM, "out of memory") : 0;
}
