/* The reading module under the finders (diagnose_int.h): typed reads of
 * tensors, ops, names, locations and errors from the trace, the integer
 * lookups the finders share, and the findings' own memory (append one,
 * release one, give it its attempted write or its fix). It calls nothing
 * above it: the finders (diagnose.c's replay, raised.c, refused.c, cut.c,
 * silent.c) and the suggester (suggest*.c) read through it. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gradtrace/error.h>
#include <gradtrace/format.h>

#include "diagnose_int.h"
#include "extent.h"
#include "grow.h"
#include "intlist.h"
#include "pysrc.h"
#include "trace_int.h"

/* ---- errors and findings ------------------------------------------------- */

int gt__dx_sql_fail(gt__dctx *c)
{
    return gt__trace_fail(c->t, GT_ECORRUPT, "cannot read trace: %s",
                          sqlite3_errmsg(c->db));
}

int gt__dx_nomem(gt__dctx *c)
{
    return gt__trace_fail(c->t, GT_ENOMEM, "out of memory");
}

void gt__dx_lookup_nomem(gt__dctx *c, int s)
{
    if ((s & 0xff) == SQLITE_NOMEM)
        c->oom = 1;
}

sqlite3_stmt *gt__dx_stmt(gt__dctx *c, const char *sql)
{
    sqlite3_stmt *st = gt_trace_stmt(c->t, sql);
    if (!st && gt_trace_errcode(c->t) == GT_ENOMEM)
        c->oom = 1;
    return st;
}

void gt__dx_done(gt__dctx *c, sqlite3_stmt *st, int s)
{
    gt__dx_lookup_nomem(c, s);
    sqlite3_reset(st);
}

int gt__dx_text(gt__dctx *c, const char *sql, int64_t a, gt_strbuf *out)
{
    int r = gt_trace_text(c->t, sql, a, 0, out);
    if (r == GT_ENOMEM)
        c->oom = 1;
    return r == 1;
}

/* Append a zeroed finding; NULL on ENOMEM. */
gt_finding *gt__dx_add_finding(gt__dctx *c, int kind, int64_t backward)
{
    if (GT_ALLOC_GROW(c->f->v, c->f->n + 1, c->cap, 8) != 0)
        return NULL;
    gt_finding *f = &c->f->v[c->f->n++];
    memset(f, 0, sizeof *f);
    f->kind = kind;
    f->backward = backward;
    f->saved_version = -1;
    f->version_at_backward = -1;
    f->matches_error = -1;
    return f;
}

static int64_t dtype_size(const char *d)
{
    static const struct {
        const char *name;
        int64_t size;
    } sizes[] = {
        {"float64", 8},   {"float32", 4}, {"float16", 2},   {"bfloat16", 2},
        {"int64", 8},     {"int32", 4},   {"int16", 2},     {"int8", 1},
        {"uint8", 1},     {"bool", 1},    {"complex64", 8}, {"complex128", 16},
        {"complex32", 4}, {"uint16", 2},  {"uint32", 4},    {"uint64", 8},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (!strcmp(d, sizes[i].name))
            return sizes[i].size;
    return 1;
}

/* The JSON integer list s ("[16,8]") into a malloc'd *v of *n values: 0;
 * 0 with *n = -1 when s is no such list; -1 when out of memory. */
static int parse_ints(const char *s, int64_t **v, int *n)
{
    size_t max = 1;
    *v = NULL;
    *n = -1;
    if (!s)
        return 0;
    for (const char *p = s; (p = strchr(p, ',')) != NULL; p++)
        max++;
    if (max > INT_MAX)
        return 0;
    if (!(*v = malloc(max * sizeof **v)))
        return -1;
    *n = gt_ints_parse(s, *v, (int)max);
    return 0;
}

void gt__dx_tinfo_release(gt__tinfo *t)
{
    gt__extent_release(&t->ext);
    free(t->text);
    memset(t, 0, sizeof *t);
    t->dtype = t->shape = "";
}

int gt__dx_load_tensor(gt__dctx *c, int64_t id, gt__tinfo *t)
{
    memset(t, 0, sizeof *t);
    t->dtype = t->shape = "";
    gt_tensor_row *x = &c->trow;
    int r = gt_trace_tensor(c->t, id, x), nomem = r == GT_ENOMEM;
    if (r == 1) {
        int64_t *shape = NULL, *strides = NULL;
        int nd, ns;
        nomem = parse_ints(x->shape, &shape, &nd) != 0 ||
                parse_ints(x->strides, &strides, &ns) != 0;
        /* "dtype\0" then the sizes, written as "[16,8]" and read as "16,8" */
        size_t dl = strlen(x->dtype) + 1;
        if (!nomem && (t->text = malloc(dl + GT_INTS_ROOM(nd > 0 ? nd : 0))) == NULL)
            nomem = 1;
        if (!nomem) {
            memcpy(t->text, x->dtype, dl);
            t->dtype = t->text;
            char *sh = t->text + dl;
            size_t n = nd > 0 ? gt_ints_format(sh, shape, (size_t)nd) : 0;
            if (n >= 2) {
                memmove(sh, sh + 1, n - 2);
                sh[n - 2] = 0;
            } else {
                sh[0] = 0;
            }
            t->shape = sh;
        }
        /* A damaged or hostile trace may hold any numbers here: an extent
         * that cannot be represented is unknown, and overlaps nothing. */
        if (!nomem && nd >= 0 && nd == ns &&
            gt__extent_init(&t->ext, x->storage_offset, shape, strides, nd,
                            dtype_size(t->dtype)) != 0)
            nomem = 1;
        free(shape);
        free(strides);
        t->requires_grad = x->requires_grad;
        t->is_leaf = x->is_leaf;
        t->alias_of = x->alias_of;
        t->created_by = x->created_by;
        t->found = 1;
    }
    if (nomem) {
        gt__dx_tinfo_release(t);
        c->oom = 1; /* a caller reading failure as "not found" still fails */
        return gt__dx_nomem(c);
    }
    return r < 0 ? r : 0;
}

/* See diagnose_int.h. A container's item (laterals[2], hidden[0]) is no
 * variable: the code a suggestion writes with the name would assign into
 * the container (a tuple's item cannot be) where the source line reads it
 * as written (laterals[i - 1]). */
void gt__dx_first_name(gt__dctx *c, int64_t tensor, gt_strbuf *out)
{
    const char *const *v = NULL;
    size_t n = 0;
    gt_strbuf_reset(out);
    int rc = gt_trace_names(c->t, tensor, &v, &n);
    if (rc == GT_ENOMEM)
        c->oom = 1;
    for (size_t i = 0; rc == 1 && i < n; i++)
        if (!strchr(v[i], '[')) {
            if (gt_strbuf_adds(out, v[i]) != 0)
                c->oom = 1;
            break;
        }
}

size_t gt__dx_source(gt__dctx *c, const char *file, const char *const **lines)
{
    size_t n = 0;
    int rc = gt_trace_source(c->t, file, lines, &n);
    if (rc == GT_ENOMEM)
        c->oom = 1;
    return rc == 1 ? n : 0;
}

/* "file:line" of a stack's user frame, and its code line; "" if unknown. */
void gt__dx_stack_loc(gt__dctx *c, int64_t stack, gt_strbuf *where, gt_strbuf *code,
                      int64_t *frame)
{
    gt_loc l;
    gt_strbuf_reset(where);
    if (code)
        gt_strbuf_reset(code);
    if (frame)
        *frame = 0;
    int rc = gt_trace_loc(c->t, stack, &l);
    if (rc == GT_ENOMEM)
        c->oom = 1;
    if (rc != 1)
        return;
    /* Shown like every other path of the output: relative to the working
     * directory when it lies below it. */
    if (l.file && !c->cwd_read) { /* the process's, not the trace's */
        c->cwd = getcwd(NULL, 0);
        c->cwd_read = 1;
    }
    const char *file = gt__path_below(l.file, c->cwd);
    if (gt_strbuf_addf(where, "%s:%d", file ? file : "", (int)l.line) != 0)
        c->oom = 1;
    if (code && gt_strbuf_adds(code, l.code ? l.code : "") != 0)
        c->oom = 1;
    if (frame)
        *frame = l.frame;
    gt_loc_release(&l);
}

void gt__dx_load_op(gt__dctx *c, int64_t seq, gt__opinfo *o)
{
    gt_strbuf buf = o->buf;
    memset(o, 0, sizeof *o);
    o->buf = buf;
    gt_strbuf_reset(&o->buf);
    sqlite3_stmt *st = c->op;
    sqlite3_bind_int64(st, 1, seq);
    int s = seq ? sqlite3_step(st) : SQLITE_DONE;
    gt__dx_lookup_nomem(c, s);
    if (s == SQLITE_ROW) {
        const char *name = gt_column_text(st, 0, &c->oom);
        if (name && gt_strbuf_adds(&o->buf, name) != 0)
            c->oom = 1;
        o->phase = sqlite3_column_int(st, 1);
        o->stack = sqlite3_column_int64(st, 2);
        o->grad_mode = sqlite3_column_int(st, 3);
    }
    o->name = gt_strbuf_str(&o->buf);
    sqlite3_reset(st);
}

void gt__dx_op_release(gt__opinfo *o)
{
    gt_strbuf_release(&o->buf);
    memset(o, 0, sizeof *o);
    o->name = "";
}

/* The leaf that requires grad behind tensor `t` (itself or a base it
 * views, at most 16 views deep), 0 if none or unreadable: for a tensor an
 * optimizer changed, the parameter. */
int64_t gt__dx_leaf_of(gt__dctx *c, int64_t t)
{
    for (int depth = 0; t && depth < 16; depth++) {
        gt__tinfo ti;
        if (gt__dx_load_tensor(c, t, &ti) != 0)
            return 0;
        int found = ti.found, leaf = ti.is_leaf && ti.requires_grad;
        int64_t base = ti.alias_of;
        gt__dx_tinfo_release(&ti);
        if (!found)
            return 0;
        if (leaf)
            return t;
        t = base;
    }
    return 0;
}

int64_t gt__dx_named_on_line(gt__dctx *c, int64_t seq, const char *code, const char *skip,
                             int64_t (*pick)(gt__dctx *c, int64_t tensor),
                             gt_strbuf *name)
{
    int64_t got = 0;
    if (name)
        gt_strbuf_reset(name);
    sqlite3_stmt *st = gt__dx_stmt(c, "SELECT n.tensor, s.text FROM names n "
                                      "JOIN strings s ON s.id = n.name WHERE n.seq <= ?1 "
                                      "ORDER BY n.seq DESC LIMIT 20000");
    int s = SQLITE_OK;
    if (st) {
        sqlite3_bind_int64(st, 1, seq);
        while (!got && (s = sqlite3_step(st)) == SQLITE_ROW) {
            const char *nm = gt_column_text(st, 1, &c->oom);
            if (!nm || !gt__py_mentions(code, nm) || (skip && gt__py_mentions(skip, nm)))
                continue;
            if ((got = pick(c, sqlite3_column_int64(st, 0))) != 0 && name &&
                gt_strbuf_adds(name, nm) != 0)
                c->oom = 1;
        }
        if (s == SQLITE_DONE || s == SQLITE_ROW)
            s = SQLITE_OK;
    }
    gt__dx_done(c, st, s);
    return got;
}

int64_t gt__dx_int(gt__dctx *c, const char *sql, int64_t a, int64_t b, const char *b_text,
                   int64_t dflt)
{
    int64_t out = dflt;
    if (!b_text) {
        int64_t v;
        int r = gt_trace_int(c->t, sql, a, b, &v);
        if (r == GT_ENOMEM)
            c->oom = 1;
        return r == 1 ? v : dflt;
    }
    sqlite3_stmt *st = gt__dx_stmt(c, sql);
    int s = SQLITE_OK;
    if (st) {
        sqlite3_bind_int64(st, 1, a);
        sqlite3_bind_text(st, 2, b_text, -1, SQLITE_STATIC);
        if ((s = sqlite3_step(st)) == SQLITE_ROW &&
            sqlite3_column_type(st, 0) != SQLITE_NULL)
            out = sqlite3_column_int64(st, 0);
    }
    gt__dx_done(c, st, s);
    return out;
}

/* The tensor a line writes that no recorded op shows: the variable it
 * names, whatever that tensor is. */
int64_t gt__dx_first_op(gt__dctx *c, int64_t t, int64_t before)
{
    return gt__dx_int(c, "SELECT min(op) FROM op_args WHERE tensor = ?1 AND op < ?2", t,
                      before, NULL, 0);
}

/* See diagnose_int.h. */
int gt__dx_op_is(gt__dctx *c, int64_t op, const char *want)
{
    gt__opinfo o = {0};
    gt__dx_load_op(c, op, &o);
    int is = !strncmp(o.name, want, strlen(want));
    gt__dx_op_release(&o);
    return is;
}

int64_t gt__dx_made_at(gt__dctx *c, int64_t t, int64_t before)
{
    int64_t by = gt__dx_view_origin(c, t);
    if (!by) /* torch.tensor(...): lift_fresh gives back its input */
        by = gt__dx_first_op(c, t, before);
    /* A dispatch mode sees the aten::detach it causes itself (a factory
     * with requires_grad=True): the op the user's line ran is the one that
     * made the detach's input, on the same line. */
    if (by && gt__dx_op_is(c, by, "aten::detach") &&
        !gt__dx_op_is(c, by, "aten::detach_"))
        by = gt__dx_int(
            c,
            "SELECT t.created_by FROM op_args a JOIN tensors t ON t.id = a.tensor "
            "JOIN ops d ON d.seq = a.op JOIN ops m ON m.seq = t.created_by "
            "WHERE a.op = ?1 AND a.role = 0 AND m.stack IS d.stack "
            "ORDER BY a.pos LIMIT 1",
            by, 0, NULL, by);
    return by;
}

int gt__dx_take_suggestion(gt__dctx *c, gt_finding *f, gt_strbuf *b)
{
    if (b->oom)
        return gt__dx_nomem(c);
    free(f->suggestion);
    f->suggestion = gt_strbuf_detach(b);
    return f->suggestion ? 0 : gt__dx_nomem(c);
}

const char gt__dx_sql_family[] =
    "SELECT seq, message, coalesce(stack, 0), coalesce(backward, 0) FROM errors "
    "WHERE " GT__PYMSG_FAMILY_SQL " ORDER BY seq";

int gt__dx_write_on_line(gt__dctx *c, int64_t err_seq, int64_t frame, int64_t *op,
                         int64_t *tensor)
{
    int rc = 0, s;
    *op = *tensor = 0;
    if (!frame)
        return 0;
    sqlite3_stmt *st =
        gt_trace_stmt(c->t, "SELECT o.seq, a.tensor FROM ops o "
                            "JOIN op_args a ON a.op = o.seq AND a.role = 2 "
                            "JOIN stacks s ON s.id = o.stack "
                            "WHERE o.seq < ?1 AND o.seq > ?1 - 10000 "
                            "AND " GT_USER_FRAME("s") " = ?2 "
                                                      "ORDER BY o.seq DESC LIMIT 1");
    if (!st)
        return gt_trace_errcode(c->t);
    sqlite3_bind_int64(st, 1, err_seq);
    sqlite3_bind_int64(st, 2, frame);
    if ((s = sqlite3_step(st)) == SQLITE_ROW) {
        *op = sqlite3_column_int64(st, 0);
        *tensor = sqlite3_column_int64(st, 1);
    } else if (s != SQLITE_DONE) {
        rc = gt__dx_sql_fail(c);
    }
    sqlite3_reset(st);
    return rc;
}

/* The tensor bound to variable `name` in the user's frame at or before
 * event `seq` (the recorder binds a frame's tensors when it records an
 * error), 0 if none. */
int gt__dx_named_tensor(gt__dctx *c, const char *name, int64_t seq, int64_t *out)
{
    int rc = 0, s;
    *out = 0;
    sqlite3_stmt *st = gt_trace_stmt(
        c->t, "SELECT n.tensor FROM names n JOIN strings s ON s.id = n.name "
              "WHERE s.text = ?1 AND n.seq <= ?2 ORDER BY n.seq DESC LIMIT 1");
    if (!st)
        return gt_trace_errcode(c->t);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, seq);
    if ((s = sqlite3_step(st)) == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    else if (s != SQLITE_DONE)
        rc = gt__dx_sql_fail(c);
    sqlite3_reset(st);
    return rc;
}

/* The op that made view `t`: its own creator, else that of the nearest base
 * made by a recorded op. */
int64_t gt__dx_view_origin(gt__dctx *c, int64_t t)
{
    for (int depth = 0; t && depth < 16; depth++) {
        gt__tinfo ti;
        if (gt__dx_load_tensor(c, t, &ti) != 0)
            return 0;
        int found = ti.found;
        int64_t by = ti.created_by, base = ti.alias_of;
        gt__dx_tinfo_release(&ti);
        if (!found)
            return 0;
        if (by)
            return by;
        t = base;
    }
    return 0;
}

/* Give f the write PyTorch refused, like every kind lists its writes: the
 * recorded op if there is one, else the raising line's stack. */
int gt__dx_add_attempt(gt__dctx *c, gt_finding *f, int64_t op, int64_t stack)
{
    if (!(f->mutations = calloc(1, sizeof *f->mutations)))
        return gt__dx_nomem(c);
    f->n_mutations = 1;
    f->mutations[0].seq = op;
    f->mutations[0].tensor = f->tensor;
    f->mutations[0].version_after = -1;
    f->mutations[0].stack = op ? 0 : stack;
    return 0;
}

int gt__dx_each_error(gt__dctx *c, int (*want)(int kind),
                      int (*one)(gt__dctx *c, int64_t seq, const gt_pymsg *m,
                                 int64_t stack, int64_t backward))
{
    /* its own statement: a finder run for one error may list them again */
    sqlite3_stmt *st = NULL;
    int rc = 0, s;
    if ((rc = gt_trace_prepare(c->t, gt__dx_sql_family, &st)) != 0)
        return rc;
    while (!rc && (s = sqlite3_step(st)) == SQLITE_ROW) {
        gt_pymsg m;
        if (gt__pymsg_parse(gt_column_text(st, 1, &c->oom), &m) != 0) {
            rc = gt__dx_nomem(c);
            break;
        }
        if (want(m.kind))
            rc = one(c, sqlite3_column_int64(st, 0), &m, sqlite3_column_int64(st, 2),
                     sqlite3_column_int64(st, 3));
        gt__pymsg_release(&m);
    }
    if (!rc && s != SQLITE_DONE && s != SQLITE_ROW)
        rc = gt__dx_sql_fail(c);
    sqlite3_finalize(st);
    return rc;
}

/* See diagnose_int.h. */
void gt__dx_raising_code(gt__dctx *c, int64_t stack, gt_strbuf *where, gt_strbuf *code)
{
    gt__dx_stack_loc(c, stack, where, code, NULL);
    gt__py_trim_code(code);
}
