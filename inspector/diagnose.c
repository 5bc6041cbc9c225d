/* Diagnosis: replay every backward call and report what broke it; see
 * diagnose.h for the contract and replay.h for the engine model. */
#include "diagnose.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gradtrace/recorder.h>

#include "replay.h"

const char *gt_finding_kind_name(int kind)
{
    switch (kind) {
    case GT_FINDING_INPLACE_INVALIDATED_SAVED:
        return "inplace_invalidated_saved";
    case GT_FINDING_SILENT_STORAGE_WRITE:
        return "silent_storage_write";
    case GT_FINDING_BACKWARD_TWICE:
        return "backward_twice";
    case GT_FINDING_LEAF_INPLACE:
        return "leaf_inplace";
    case GT_FINDING_SILENT_STORAGE_SWAP:
        return "silent_storage_swap";
    case GT_FINDING_SILENT_SAVED_WRITE:
        return "silent_saved_write";
    }
    return "unknown";
}

/* ---- SQL --------------------------------------------------------------- */

static const char sql_calls[] = "SELECT id, seq FROM backward_calls ORDER BY id";
/* The saved tensors of the nodes in JSON array ?1. */
static const char sql_saved[] =
    "SELECT st.node, st.seq, coalesce(st.tensor, 0), st.version, t.version_counter, "
    "t.storage, st.is_output FROM json_each(?1) j JOIN saved_tensors st ON st.node = j.value "
    "LEFT JOIN tensors t ON t.id = st.tensor";
/* Writes (mutated op arguments) within (?2, ?3) through any tensor on the
 * storages in JSON array ?1, by storage then op: through each tensor of
 * each storage, or through the window's op arguments (see
 * gt__pick_plan). */
static const char sql_silent[] =
    "SELECT w.storage, a.op, a.tensor, w.version_counter FROM json_each(?1) j "
    "JOIN tensors w ON w.storage = j.value "
    "JOIN op_args a ON a.tensor = w.id AND a.role = 2 AND a.op > ?2 AND a.op < ?3 "
    "ORDER BY 1, 2, a.pos";
static const char sql_silent_window[] =
    "SELECT w.storage, a.op, a.tensor, w.version_counter "
    "FROM op_args a CROSS JOIN tensors w ON w.id = a.tensor "
    "WHERE a.op > ?2 AND a.op < ?3 AND a.role = 2 "
    "AND +w.storage IN (SELECT value FROM json_each(?1)) ORDER BY 1, 2, a.pos";
static const char sql_silent_size[] =
    "SELECT count(*) FROM (SELECT 1 FROM json_each(?1) j JOIN tensors w "
    "ON w.storage = j.value LIMIT ?2)";
static const char sql_tensor[] =
    "SELECT t.storage_offset, t.shape, t.strides, coalesce(s.text, ''), t.requires_grad, "
    "t.is_leaf, coalesce(t.alias_of, 0) "
    "FROM tensors t LEFT JOIN strings s ON s.id = t.dtype WHERE t.id = ?1";
static const char sql_bwerr[] =
    "SELECT seq, message FROM errors WHERE backward = ?1 ORDER BY seq LIMIT 1";
static const char sql_op[] =
    "SELECT coalesce(s.text, ''), o.phase, coalesce(o.stack, 0) "
    "FROM ops o LEFT JOIN strings s ON s.id = o.name WHERE o.seq = ?1";
static const char sql_leaf_errors[] =
    "SELECT e.seq, e.message, coalesce(e.stack, 0), coalesce(e.backward, 0) FROM errors e "
    "WHERE e.message LIKE '%leaf Variable that requires grad is being used in an "
    "in-place operation%' ORDER BY e.seq";
/* The innermost user frame of a stack (its own frame if none is marked). */
static const char sql_loc[] =
    "SELECT coalesce(sf.text, ''), f.line, coalesce(sc.text, ''), f.id "
    "FROM stacks s JOIN frames f ON f.id = coalesce(s.user_frame, s.frame) "
    "LEFT JOIN strings sf ON sf.id = f.file LEFT JOIN strings sc ON sc.id = f.code "
    "WHERE s.id = ?1";
static const char sql_names[] = GT__NAMES_SQL;

/* ---- context ----------------------------------------------------------- */

typedef struct dctx {
    sqlite3 *db;
    gt_replayer *rp;
    sqlite3_stmt *saved, *silent, *silent_window, *silent_size, *tensor, *bwerr, *op, *loc,
        *names;
    gt_imap freed; /* node id -> backward call that freed its saved tensors */
    gt_findings *f;
    size_t cap;
    char *err;
    size_t errlen;
} dctx;

static int sql_fail(dctx *c)
{
    snprintf(c->err, c->errlen, "cannot read trace: %s", sqlite3_errmsg(c->db));
    return GT_ECORRUPT;
}

static int nomem(dctx *c)
{
    snprintf(c->err, c->errlen, "out of memory");
    return GT_ENOMEM;
}

static void finding_release(gt_finding *f)
{
    free(f->mutations);
    free(f->suggestion);
    free(f->name);
}

void gt_findings_free(gt_findings *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++)
        finding_release(&f->v[i]);
    free(f->v);
    free(f);
}

/* Append a zeroed finding; NULL on ENOMEM. */
static gt_finding *add_finding(dctx *c, int kind, int64_t backward)
{
    if (c->f->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        gt_finding *v = realloc(c->f->v, cap * sizeof *v);
        if (!v)
            return NULL;
        c->f->v = v;
        c->cap = cap;
    }
    gt_finding *f = &c->f->v[c->f->n++];
    memset(f, 0, sizeof *f);
    f->kind = kind;
    f->backward = backward;
    f->saved_version = -1;
    f->version_at_backward = -1;
    f->matches_error = -1;
    return f;
}

/* ---- small helpers ----------------------------------------------------- */

/* Parse a JSON array of integers ("[16, 8]") into v (at most max); returns
 * the count, or -1 if it is not one. */
static int parse_ints(const char *s, int64_t *v, int max)
{
    int n = 0;
    if (!s || *s != '[')
        return -1;
    s++;
    for (;;) {
        while (isspace((unsigned char)*s) || *s == ',')
            s++;
        if (*s == ']')
            return n;
        char *end;
        long long x = strtoll(s, &end, 10);
        if (end == s || n == max)
            return -1;
        v[n++] = x;
        s = end;
    }
}

static int64_t dtype_size(const char *d)
{
    static const struct {
        const char *name;
        int64_t size;
    } sizes[] = {
        {"float64", 8},  {"float32", 4},   {"float16", 2},   {"bfloat16", 2},
        {"int64", 8},    {"int32", 4},     {"int16", 2},     {"int8", 1},
        {"uint8", 1},    {"bool", 1},      {"complex64", 8}, {"complex128", 16},
        {"complex32", 4}, {"uint16", 2},   {"uint32", 4},    {"uint64", 8},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (!strcmp(d, sizes[i].name))
            return sizes[i].size;
    return 1;
}

typedef struct tinfo {
    int64_t lo, hi;       /* byte extent [lo, hi) in its storage; lo == hi: empty */
    char dtype[32];
    char shape[128];      /* "3" or "16,8": sizes without brackets or spaces */
    int requires_grad, is_leaf;
    int64_t alias_of;
    int found;
} tinfo;

static int load_tensor(dctx *c, int64_t id, tinfo *t)
{
    memset(t, 0, sizeof *t);
    sqlite3_stmt *st = c->tensor;
    sqlite3_bind_int64(st, 1, id);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        int64_t shape[64], strides[64];
        int64_t off = sqlite3_column_int64(st, 0);
        int nd = parse_ints((const char *)sqlite3_column_text(st, 1), shape, 64);
        int ns = parse_ints((const char *)sqlite3_column_text(st, 2), strides, 64);
        const char *dtype = (const char *)sqlite3_column_text(st, 3);
        snprintf(t->dtype, sizeof t->dtype, "%s", dtype ? dtype : "?");
        int64_t es = dtype_size(t->dtype);
        /* A damaged or hostile trace may hold any numbers here: an extent
         * that overflows is unknown, and an unknown extent overlaps nothing. */
        int bad = __builtin_mul_overflow(off, es, &t->lo);
        t->hi = t->lo;
        if (nd >= 0 && nd == ns) {
            int64_t last = off, empty = 0, span, stride, n1;
            size_t used = 0;
            for (int i = 0; i < nd; i++) {
                stride = strides[i];
                if (shape[i] == 0)
                    empty = 1;
                else if ((stride < 0 && __builtin_sub_overflow(0, stride, &stride)) ||
                         __builtin_sub_overflow(shape[i], 1, &n1) ||
                         __builtin_mul_overflow(n1, stride, &span) ||
                         __builtin_add_overflow(last, span, &last))
                    bad = 1;
                used += (size_t)snprintf(t->shape + used, sizeof t->shape - used, "%s%lld",
                                         i ? "," : "", (long long)shape[i]);
                if (used >= sizeof t->shape)
                    used = sizeof t->shape - 1;
            }
            if (!empty && (__builtin_add_overflow(last, 1, &last) ||
                           __builtin_mul_overflow(last, es, &t->hi)))
                bad = 1;
        }
        if (bad)
            t->lo = t->hi = 0;
        t->requires_grad = sqlite3_column_int(st, 4);
        t->is_leaf = sqlite3_column_int(st, 5);
        t->alias_of = sqlite3_column_int64(st, 6);
        t->found = 1;
    }
    sqlite3_reset(st);
    return s == SQLITE_ROW || s == SQLITE_DONE ? 0 : sql_fail(c);
}

/* PyTorch's version message, e.g. "[torch.FloatTensor [3]] is at version 6;
 * expected version 0 instead" (optionally ", which is output 0 of X,"). */
typedef struct errinfo {
    int64_t seq;
    int has_versions;  /* 1 if the message is a version mismatch */
    int twice;         /* 1 if it is "backward through the graph a second time" */
    char dtype[32];
    char shape[128];
    int64_t version, expected;
    char grad_fn[128]; /* ", which is output N of NAME,": NAME ("" if absent) */
    int64_t output_nr;
} errinfo;

static void parse_error(const char *msg, errinfo *e)
{
    static const struct {
        const char *type;
        const char *dtype;
    } types[] = {
        {"FloatTensor", "float32"},   {"DoubleTensor", "float64"},
        {"HalfTensor", "float16"},    {"BFloat16Tensor", "bfloat16"},
        {"LongTensor", "int64"},      {"IntTensor", "int32"},
        {"ShortTensor", "int16"},     {"CharTensor", "int8"},
        {"ByteTensor", "uint8"},      {"BoolTensor", "bool"},
        {"ComplexFloatTensor", "complex64"}, {"ComplexDoubleTensor", "complex128"},
    };
    const char *p, *q;
    e->has_versions = 0;
    e->twice = msg && strstr(msg, "backward through the graph a second time") != NULL;
    if (!msg || !(p = strstr(msg, "[torch.")))
        return;
    p += 7;
    if (!strncmp(p, "cuda.", 5))
        p += 5;
    q = strchr(p, ' ');
    if (!q || q[1] != '[')
        return;
    e->dtype[0] = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if ((size_t)(q - p) == strlen(types[i].type) && !strncmp(p, types[i].type, q - p))
            snprintf(e->dtype, sizeof e->dtype, "%s", types[i].dtype);
    p = q + 2;
    size_t n = 0;
    for (; *p && *p != ']'; p++)
        if (*p != ' ' && n + 1 < sizeof e->shape)
            e->shape[n++] = *p;
    e->shape[n] = 0;
    e->grad_fn[0] = 0;
    if ((q = strstr(p, "which is output ")) != NULL) {
        char *end;
        e->output_nr = strtoll(q + 16, &end, 10);
        if (!strncmp(end, " of ", 4)) {
            size_t k = strcspn(end + 4, ",");
            if (k >= sizeof e->grad_fn)
                k = sizeof e->grad_fn - 1;
            memcpy(e->grad_fn, end + 4, k);
            e->grad_fn[k] = 0;
        }
    }
    if (!(p = strstr(p, "is at version ")))
        return;
    e->version = strtoll(p + 14, NULL, 10);
    if (!(p = strstr(p, "expected version ")))
        return;
    e->expected = strtoll(p + 17, NULL, 10);
    e->has_versions = 1;
}

/* The first error recorded during backward `b` (e->seq = 0 if none). */
static int load_backward_error(dctx *c, int64_t b, errinfo *e)
{
    memset(e, 0, sizeof *e);
    sqlite3_stmt *st = c->bwerr;
    sqlite3_bind_int64(st, 1, b);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        e->seq = sqlite3_column_int64(st, 0);
        parse_error((const char *)sqlite3_column_text(st, 1), e);
    }
    sqlite3_reset(st);
    return s == SQLITE_ROW || s == SQLITE_DONE ? 0 : sql_fail(c);
}

/* ---- suggestions ------------------------------------------------------- */

/* Copy the first variable name of `tensor` (its own, its base's, or one
 * sharing its version counter) into buf; "" if it has none. */
static void first_name(dctx *c, int64_t tensor, char *buf, size_t len)
{
    buf[0] = 0;
    sqlite3_stmt *st = c->names;
    sqlite3_bind_int64(st, 1, tensor);
    if (sqlite3_step(st) == SQLITE_ROW)
        snprintf(buf, len, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_reset(st);
}

/* "file:line" of a stack's user frame, and its code line; "" if unknown. */
static void stack_loc(dctx *c, int64_t stack, char *where, size_t wlen, char *code,
                      size_t clen, int64_t *frame)
{
    where[0] = 0;
    if (code)
        code[0] = 0;
    if (frame)
        *frame = 0;
    sqlite3_stmt *st = c->loc;
    sqlite3_bind_int64(st, 1, stack);
    if (stack && sqlite3_step(st) == SQLITE_ROW) {
        snprintf(where, wlen, "%s:%d", (const char *)sqlite3_column_text(st, 0),
                 sqlite3_column_int(st, 1));
        if (code)
            snprintf(code, clen, "%s", (const char *)sqlite3_column_text(st, 2));
        if (frame)
            *frame = sqlite3_column_int64(st, 3);
    }
    sqlite3_reset(st);
}

typedef struct opinfo {
    char name[128];
    int phase;
    int64_t stack;
} opinfo;

static void load_op(dctx *c, int64_t seq, opinfo *o)
{
    memset(o, 0, sizeof *o);
    sqlite3_stmt *st = c->op;
    sqlite3_bind_int64(st, 1, seq);
    if (seq && sqlite3_step(st) == SQLITE_ROW) {
        snprintf(o->name, sizeof o->name, "%s", (const char *)sqlite3_column_text(st, 0));
        o->phase = sqlite3_column_int(st, 1);
        o->stack = sqlite3_column_int64(st, 2);
    }
    sqlite3_reset(st);
}

/* "aten::add_.Tensor" -> "add" (the out-of-place method name). */
static void out_of_place(const char *op, char *buf, size_t len)
{
    const char *p = strstr(op, "::");
    p = p ? p + 2 : op;
    size_t n = strcspn(p, ".");
    if (n >= len)
        n = len - 1;
    memcpy(buf, p, n);
    buf[n] = 0;
    while (n > 0 && buf[n - 1] == '_')
        buf[--n] = 0;
}

static int is_activation_inplace(const char *op)
{
    static const char *acts[] = {
        "aten::relu_",       "aten::threshold_", "aten::hardtanh_", "aten::leaky_relu_",
        "aten::elu_",        "aten::celu_",      "aten::selu_",     "aten::silu_",
        "aten::mish_",       "aten::hardswish_", "aten::hardsigmoid_", "aten::rrelu_",
        "aten::relu6_",      "aten::gelu_",      "aten::sigmoid_",  "aten::tanh_",
        "aten::rrelu_with_noise_",
    };
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        size_t n = strlen(acts[i]);
        if (!strncmp(op, acts[i], n) && (op[n] == 0 || op[n] == '.'))
            return 1;
    }
    return 0;
}

/* The leaf that requires grad behind tensor `t` (itself or a base it
 * views, at most 16 views deep), 0 if none or unreadable: for a tensor an
 * optimizer changed, the parameter. */
static int64_t leaf_of(dctx *c, int64_t t)
{
    for (int depth = 0; t && depth < 16; depth++) {
        tinfo ti;
        if (load_tensor(c, t, &ti) != 0 || !ti.found)
            return 0;
        if (ti.is_leaf && ti.requires_grad)
            return t;
        t = ti.alias_of;
    }
    return 0;
}

static int set_suggestion(dctx *c, gt_finding *f, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    free(f->suggestion);
    f->suggestion = strdup(buf);
    return f->suggestion ? 0 : nomem(c);
}

/* 1 if the tensor has (or had) a grad_fn or is a parameter: an output of
 * a node, a view of one, a tensor an AccumulateGrad node accumulates into,
 * or one recorded as requiring grad. Such tensors are not the "constant
 * updated in place" of the seed story. */
static int has_autograd(dctx *c, int64_t tensor)
{
    sqlite3_stmt *st = NULL;
    int yes = 0;
    for (int depth = 0; tensor && depth < 16 && !yes; depth++) {
        tinfo t;
        if (load_tensor(c, tensor, &t) != 0 || !t.found)
            break;
        if (t.requires_grad)
            return 1;
        if (sqlite3_prepare_v2(c->db,
                               "SELECT EXISTS (SELECT 1 FROM node_outputs WHERE tensor = ?1) "
                               "OR EXISTS (SELECT 1 FROM nodes WHERE variable = ?1)",
                               -1, &st, NULL) == SQLITE_OK) {
            sqlite3_bind_int64(st, 1, tensor);
            if (sqlite3_step(st) == SQLITE_ROW)
                yes = sqlite3_column_int(st, 0);
        }
        sqlite3_finalize(st);
        tensor = t.alias_of;
    }
    return yes;
}

static int suggest_inplace(dctx *c, gt_finding *f)
{
    char name[128], mname[128], where[512], code[512];
    int rc = 0;
    first_name(c, f->tensor, name, sizeof name);
    mname[0] = 0;
    if (f->n_mutations)
        first_name(c, f->mutations[0].tensor, mname, sizeof mname);
    const char *nm = name[0] ? name : "the tensor";
    const char *mn = mname[0] ? mname : nm;

    /* In-place activations first, then optimizer-like parameter updates. */
    for (size_t i = 0; i < f->n_mutations; i++) {
        opinfo o;
        load_op(c, f->mutations[i].seq, &o);
        stack_loc(c, o.stack, where, sizeof where, NULL, 0, NULL);
        if (is_activation_inplace(o.name)) {
            char act[64];
            out_of_place(o.name, act, sizeof act);
            return set_suggestion(c, f,
                                  "use inplace=False: the in-place %s%s%s overwrote %s, "
                                  "which the backward needs; build the layer with "
                                  "inplace=False (e.g. nn.ReLU(inplace=False)) or call the "
                                  "out-of-place torch.%s",
                                  o.name, where[0] ? " at " : "", where, nm, act);
        }
    }
    for (size_t i = 0; i < f->n_mutations; i++) {
        opinfo o;
        load_op(c, f->mutations[i].seq, &o);
        stack_loc(c, o.stack, where, sizeof where, code, sizeof code, NULL);
        int foreach = strstr(o.name, "::_foreach_") != NULL;
        if (foreach || strstr(code, ".step(") ||
            (o.phase == GT_PHASE_OTHER && leaf_of(c, f->mutations[i].tensor))) {
            return set_suggestion(c, f,
                                  "move optimizer.step() after the last backward() that uses "
                                  "this graph, or recompute the forward after the step: the "
                                  "step%s%s updated %s in place after the forward saved it",
                                  where[0] ? " at " : "", where,
                                  name[0] ? name : "a parameter");
        }
    }
    /* The seed story: a plain tensor (no grad_fn, not a parameter) that an
     * op saved, then updated in place. */
    if (name[0] && !has_autograd(c, f->tensor))
        return set_suggestion(c, f,
                              "update a copy: %s = %s.clone().detach() before changing it, "
                              "or move the update after backward()",
                              name, name);
    opinfo o;
    load_op(c, f->n_mutations ? f->mutations[0].seq : 0, &o);
    if (o.name[0]) {
        char meth[64];
        out_of_place(o.name, meth, sizeof meth);
        if (!strcmp(meth, "copy") || !strcmp(meth, "fill") || !strcmp(meth, "zero") ||
            !strcmp(meth, "index_put") || !strcmp(meth, "masked_fill"))
            return set_suggestion(c, f,
                                  "modify a copy: %s = %s.clone() before the assignment "
                                  "(%s), or build the new value out of place (e.g. "
                                  "torch.where)",
                                  mn, mn, o.name);
        return set_suggestion(c, f,
                              "replace the in-place %s with an out-of-place version "
                              "(%s = %s.%s(...)), or clone() %s before modifying it",
                              o.name, mn, mn, meth, mn);
    }
    return rc ? rc
              : set_suggestion(c, f,
                               "replace the in-place change of %s with an out-of-place "
                               "version (x = x.op(...)), or clone() it before modifying it",
                               nm);
}

static int suggest(dctx *c, gt_finding *f, const gt_replay *r)
{
    char where[512], name[128];
    switch (f->kind) {
    case GT_FINDING_INPLACE_INVALIDATED_SAVED:
        return suggest_inplace(c, f);
    case GT_FINDING_SILENT_STORAGE_WRITE:
        first_name(c, f->tensor, name, sizeof name);
        return set_suggestion(c, f,
                              "this write bypasses autograd (an alias with its own version "
                              "counter, such as .data), so the gradients are silently wrong: "
                              "modify %s only after backward(), under torch.no_grad() on the "
                              "tensor itself, or write to a clone()",
                              name[0] ? name : "the tensor");
    case GT_FINDING_BACKWARD_TWICE: {
        sqlite3_stmt *st = NULL;
        int64_t stack = 0;
        if (sqlite3_prepare_v2(c->db, "SELECT coalesce(stack, 0) FROM backward_calls "
                                      "WHERE id = ?1", -1, &st, NULL) == SQLITE_OK) {
            sqlite3_bind_int64(st, 1, f->other_backward);
            if (sqlite3_step(st) == SQLITE_ROW)
                stack = sqlite3_column_int64(st, 0);
        }
        sqlite3_finalize(st);
        stack_loc(c, stack, where, sizeof where, NULL, 0, NULL);
        (void)r;
        return set_suggestion(c, f,
                              "pass retain_graph=True to the earlier backward()%s%s if the "
                              "graph must be backpropagated twice, or recompute the forward "
                              "pass before the second backward()",
                              where[0] ? " at " : "", where);
    }
    case GT_FINDING_LEAF_INPLACE:
        first_name(c, f->tensor, name, sizeof name);
        if (!name[0] && f->name)
            snprintf(name, sizeof name, "%s", f->name);
        return set_suggestion(c, f,
                              "wrap the update in `with torch.no_grad():` (as optimizers do), "
                              "or change a copy instead: %s = %s.clone()",
                              name[0] ? name : "x", name[0] ? name : "x");
    }
    return 0;
}

/* ---- one backward call ------------------------------------------------- */

/* A saved tensor of a node of the graph being replayed. */
typedef struct srec {
    long order;            /* index of its node in the replay order */
    int64_t seq, tensor, version, vc, storage;
    int has_vc, has_storage, is_output;
} srec;

/* A write through a tensor on one of the saved tensors' storages. */
typedef struct wrec {
    int64_t storage, op, tensor, vc;
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

static int load_batch(dctx *c, const gt_replay *r, batch *bt)
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
        goto nomem;
    int64_t lo = INT64_MAX, hi = 0;
    for (size_t i = 0; i < r->n; i++) {
        ids[i] = r->order[i].id;
        if (gt__imap_put(&pos, ids[i], (int64_t)i) != 0)
            goto nomem;
        if (check_point(r, &r->order[i]) > hi)
            hi = check_point(r, &r->order[i]);
    }
    if (!(list = gt__json_ints(ids, r->n)))
        goto nomem;
    sqlite3_bind_text(st, 1, list, -1, SQLITE_STATIC);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (bt->nsaved == cap) {
            cap = cap ? cap * 2 : 64;
            srec *v = realloc(bt->saved, cap * sizeof *v);
            if (!v) {
                sqlite3_reset(st);
                goto nomem;
            }
            bt->saved = v;
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
        if (x->seq < lo)
            lo = x->seq;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (s != SQLITE_DONE) {
        rc = sql_fail(c);
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
        goto nomem;
    for (size_t i = 0; i < bt->nsaved; i++) {
        if (bt->saved[i].tensor && bt->saved[i].has_vc)
            vcs[nv++] = bt->saved[i].vc;
        if (bt->saved[i].tensor && bt->saved[i].has_storage)
            stor[ns++] = bt->saved[i].storage;
    }
    nv = uniq(vcs, nv);
    ns = uniq(stor, ns);
    if ((rc = gt__counters_load(c->rp, vcs, nv, lo, hi, &bt->counters, c->err, c->errlen)))
        goto out;

    free(list);
    if (!(list = gt__json_ints(stor, ns)))
        goto nomem;
    st = c->silent;
    if ((rc = gt__pick_plan(c->db, c->silent_size, list, lo, hi, c->err, c->errlen)) < 0)
        goto out;
    if (rc == 1)
        st = c->silent_window;
    rc = 0;
    sqlite3_bind_text(st, 1, list, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, lo);
    sqlite3_bind_int64(st, 3, hi);
    cap = 0;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (bt->nwrites == cap) {
            cap = cap ? cap * 2 : 16;
            wrec *v = realloc(bt->writes, cap * sizeof *v);
            if (!v) {
                sqlite3_reset(st);
                goto nomem;
            }
            bt->writes = v;
        }
        wrec *w = &bt->writes[bt->nwrites++];
        w->storage = sqlite3_column_int64(st, 0);
        w->op = sqlite3_column_int64(st, 1);
        w->tensor = sqlite3_column_int64(st, 2);
        w->vc = sqlite3_column_int64(st, 3);
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (s != SQLITE_DONE)
        rc = sql_fail(c);
    goto out;
nomem:
    rc = nomem(c);
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

/* When PyTorch's message names the tensor's grad_fn (", which is output N
 * of NAME,"; PyTorch drops the "Backward0" suffix), 1 if it is the one the
 * engine sees at unpack, else 0; 1 as well when the trace cannot tell.
 * The engine reports, for a saved output, the node that saved it; for a
 * view whose base was changed in place, a regenerated view node (not in
 * the trace); otherwise the tensor's current grad_fn: its latest node
 * before `before` (an in-place op gives it a new one). */
static int grad_fn_matches(dctx *c, const srec *x, int64_t node, int64_t before,
                           int mutated, const tinfo *ti, const errinfo *e)
{
    sqlite3_stmt *st = NULL;
    int ok = 1;
    if (!e->grad_fn[0] || (!x->is_output && ti->alias_of && mutated))
        return 1;
    if (sqlite3_prepare_v2(c->db,
                           "SELECT s.text, no.output_nr FROM node_outputs no "
                           "JOIN nodes n ON n.id = no.node JOIN strings s ON s.id = n.name "
                           "WHERE no.tensor = ?1 AND n.seq < ?2 AND (?3 = 0 OR n.id = ?3) "
                           "ORDER BY n.seq DESC LIMIT 1",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, x->tensor);
        sqlite3_bind_int64(st, 2, before);
        sqlite3_bind_int64(st, 3, x->is_output ? node : 0);
        if (sqlite3_step(st) == SQLITE_ROW) {
            const char *name = (const char *)sqlite3_column_text(st, 0);
            ok = name && !strncmp(name, e->grad_fn, strlen(e->grad_fn)) &&
                 sqlite3_column_int64(st, 1) == e->output_nr;
        }
    }
    sqlite3_finalize(st);
    return ok;
}

/* A finding about saved tensor `x` of node `nd`: saved at x->version, at
 * version `now` when the backward needed it, changed by the n writes in
 * `muts` (owned by the finding from here on; freed if there is no room). */
static gt_finding *add_saved_finding(dctx *c, int kind, int64_t backward,
                                     const gt_replay_node *nd, const srec *x, int64_t now,
                                     gt_mutation *muts, size_t n)
{
    gt_finding *f = add_finding(c, kind, backward);
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

/* Check saved tensor `x` of node `nd`, at event P, for a stale version and
 * for silent writes. */
static int check_saved(dctx *c, const gt_replay *r, const batch *bt,
                       const gt_replay_node *nd, int64_t P, const srec *x, const errinfo *e)
{
    int64_t now;
    gt_mutation *bumps = NULL;
    size_t nb = 0;
    int rc = gt__counters_window(bt->counters, x->vc, x->seq, x->version, P, &now, &bumps,
                                 &nb);
    if (rc)
        return nomem(c);
    tinfo ti;
    int loaded = 0;
    if (now != x->version) {
        gt_finding *f = add_saved_finding(c, GT_FINDING_INPLACE_INVALIDATED_SAVED,
                                          r->backward, nd, x, now, bumps, nb);
        if (!f)
            return nomem(c);
        f->error_seq = e->seq;
        if ((rc = load_tensor(c, x->tensor, &ti)) != 0)
            return rc;
        loaded = 1;
        if (e->seq && e->has_versions)
            f->matches_error = !strcmp(ti.dtype, e->dtype) && !strcmp(ti.shape, e->shape) &&
                               e->version == now && e->expected == x->version &&
                               grad_fn_matches(c, x, nd->id, P, nb > 0, &ti, e);
        else if (e->seq)
            f->matches_error = 0;
    } else {
        free(bumps);
    }
    if (!x->has_storage)
        return 0;

    /* Writes to the same bytes through a tensor with another counter. */
    size_t lo = 0, hi = bt->nwrites;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (bt->writes[mid].storage < x->storage)
            lo = mid + 1;
        else
            hi = mid;
    }
    gt_mutation *w = NULL;
    size_t nw = 0, wcap = 0;
    for (size_t i = lo; i < bt->nwrites && bt->writes[i].storage == x->storage; i++) {
        const wrec *wr = &bt->writes[i];
        tinfo wi;
        if (wr->vc == x->vc || wr->op <= x->seq || wr->op >= P)
            continue;
        if (!loaded) {
            if ((rc = load_tensor(c, x->tensor, &ti)) != 0)
                break;
            loaded = 1;
        }
        if ((rc = load_tensor(c, wr->tensor, &wi)) != 0)
            break;
        if (!(wi.lo < ti.hi && ti.lo < wi.hi))
            continue;
        if (nw == wcap) {
            wcap = wcap ? wcap * 2 : 4;
            gt_mutation *nv = realloc(w, wcap * sizeof *nv);
            if (!nv) {
                rc = nomem(c);
                break;
            }
            w = nv;
        }
        w[nw].seq = wr->op;
        w[nw].bump_seq = 0;
        w[nw].tensor = wr->tensor;
        w[nw].version_after = -1;
        nw++;
    }
    if (rc || nw == 0) {
        free(w);
        return rc;
    }
    if (!add_saved_finding(c, GT_FINDING_SILENT_STORAGE_WRITE, r->backward, nd, x, now, w, nw))
        return nomem(c);
    return 0;
}

static int raises(const gt_finding *f)
{
    return f->kind == GT_FINDING_INPLACE_INVALIDATED_SAVED ||
           f->kind == GT_FINDING_BACKWARD_TWICE;
}

static int diagnose_backward(dctx *c, int64_t b, int report)
{
    gt_replay *r = NULL;
    errinfo e;
    batch bt;
    size_t first = c->f->n, k = 0;
    long fail_at = -1;
    memset(&bt, 0, sizeof bt);
    int rc = gt__replay_backward(c->rp, b, &r, c->err, c->errlen);
    if (rc)
        return rc;
    if ((rc = load_backward_error(c, b, &e)) != 0)
        goto out;
    if ((rc = load_batch(c, r, &bt)) != 0)
        goto out;

    for (size_t i = 0; i < r->n && !rc; i++) {
        const gt_replay_node *nd = &r->order[i];
        int64_t P = check_point(r, nd), freer = 0;
        int freed = gt__imap_get(&c->freed, nd->id, &freer);
        size_t before = c->f->n;
        while (k < bt.nsaved && bt.saved[k].order < (long)i)
            k++;
        for (; k < bt.nsaved && bt.saved[k].order == (long)i && !rc; k++) {
            const srec *x = &bt.saved[k];
            if (freed) {
                if (c->f->n > before)
                    continue; /* one finding per freed node */
                gt_finding *f = add_finding(c, GT_FINDING_BACKWARD_TWICE, b);
                if (!f) {
                    rc = nomem(c);
                    break;
                }
                f->other_backward = freer;
                f->node = nd->id;
                f->saved_seq = x->seq;
                f->tensor = x->tensor;
                f->saved_version = x->version;
                f->error_seq = e.seq;
                f->matches_error = e.seq ? e.twice : -1;
                continue;
            }
            if (!x->tensor || !x->has_vc || x->seq >= P)
                continue;
            rc = check_saved(c, r, &bt, nd, P, x, &e);
        }
        for (size_t j = before; j < c->f->n && fail_at < 0; j++)
            if (raises(&c->f->v[j]))
                fail_at = (long)i;
    }
    if (rc)
        goto out;

    /* Only the first freed node of a call is worth a finding: the engine
     * stops there, and the rest repeat it. */
    int seen_twice = 0;
    size_t keep = first;
    for (size_t k = first; k < c->f->n; k++) {
        if (c->f->v[k].kind == GT_FINDING_BACKWARD_TWICE) {
            if (seen_twice) {
                finding_release(&c->f->v[k]);
                continue;
            }
            seen_twice = 1;
        }
        c->f->v[keep++] = c->f->v[k];
    }
    c->f->n = keep;

    /* The one the engine raises on: the first in replay order; within its
     * node (or, failing that, the call), the one the error message names. */
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

    for (size_t k = first; k < c->f->n && !rc; k++)
        rc = suggest(c, &c->f->v[k], r);
    if (rc)
        goto out;

    /* Without retain_graph the engine frees the saved tensors of every node
     * it ran: those recorded in node_execs, else all the nodes before the
     * one that raised (all of them if the call returned). */
    if (!r->retain_graph && !r->create_graph) {
        for (size_t i = 0; i < r->n; i++) {
            const gt_replay_node *nd = &r->order[i];
            int ran;
            if (r->status != GT_BACKWARD_OK && fail_at >= 0 && (long)i >= fail_at)
                ran = (long)i != fail_at && r->has_execs && nd->exec_seq != 0;
            else
                ran = r->has_execs ? nd->exec_seq != 0 : 1;
            int64_t prev;
            if (ran && !gt__imap_get(&c->freed, nd->id, &prev) &&
                gt__imap_put(&c->freed, nd->id, b) != 0) {
                rc = nomem(c);
                goto out;
            }
        }
    }
    if (!report) {
        for (size_t k = first; k < c->f->n; k++)
            finding_release(&c->f->v[k]);
        c->f->n = first;
    }
out:
    batch_release(&bt);
    gt__replay_free(r);
    return rc;
}

/* ---- leaf in-place errors ---------------------------------------------- */

/* 1 if `name` occurs in `code` as a whole identifier. */
static int mentions(const char *code, const char *name)
{
    size_t n = strlen(name);
    if (!n)
        return 0;
    for (const char *p = code; (p = strstr(p, name)) != NULL; p++) {
        int before = p > code && (isalnum((unsigned char)p[-1]) || p[-1] == '_' ||
                                  p[-1] == '.');
        int after = isalnum((unsigned char)p[n]) || p[n] == '_';
        if (!before && !after)
            return 1;
    }
    return 0;
}

static int find_leaf(dctx *c, int64_t err_seq, int64_t frame, const char *code,
                     int64_t *leaf, int64_t *op)
{
    sqlite3_stmt *st = NULL;
    int rc = 0, s;
    *leaf = 0;
    *op = 0;
    /* The op itself, if it was recorded: the last op of the same user line
     * before the error, with a mutated argument. */
    if (frame) {
        if (sqlite3_prepare_v2(c->db,
                               "SELECT o.seq, a.tensor FROM ops o "
                               "JOIN op_args a ON a.op = o.seq AND a.role = 2 "
                               "JOIN stacks s ON s.id = o.stack "
                               "WHERE o.seq < ?1 AND o.seq > ?1 - 10000 "
                               "AND coalesce(s.user_frame, s.frame) = ?2 "
                               "ORDER BY o.seq DESC LIMIT 1",
                               -1, &st, NULL) != SQLITE_OK)
            return sql_fail(c);
        sqlite3_bind_int64(st, 1, err_seq);
        sqlite3_bind_int64(st, 2, frame);
        if ((s = sqlite3_step(st)) == SQLITE_ROW) {
            int64_t l = leaf_of(c, sqlite3_column_int64(st, 1));
            if (l) {
                *leaf = l;
                *op = sqlite3_column_int64(st, 0);
            }
        } else if (s != SQLITE_DONE) {
            rc = sql_fail(c);
        }
        sqlite3_finalize(st);
        if (rc || *leaf)
            return rc;
    }
    /* Otherwise the latest variable named on the line that is (a view of)
     * a leaf requiring grad. */
    if (!code || !code[0])
        return 0;
    if (sqlite3_prepare_v2(c->db,
                           "SELECT n.tensor, s.text FROM names n "
                           "JOIN strings s ON s.id = n.name WHERE n.seq < ?1 "
                           "ORDER BY n.seq DESC LIMIT 20000",
                           -1, &st, NULL) != SQLITE_OK)
        return sql_fail(c);
    sqlite3_bind_int64(st, 1, err_seq);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (!mentions(code, (const char *)sqlite3_column_text(st, 1)))
            continue;
        int64_t l = leaf_of(c, sqlite3_column_int64(st, 0));
        if (l) {
            *leaf = l;
            break;
        }
    }
    if (s != SQLITE_DONE && s != SQLITE_ROW)
        rc = sql_fail(c);
    sqlite3_finalize(st);
    return rc;
}

/* The variable a line of code changes in place: "w -= ...", "w[0] = ...",
 * "w.add_(...)", "self.w *= ..." give "w" / "self.w". Writes it to buf
 * ("" if the line is not of that form). */
static void target_of(const char *code, char *buf, size_t len)
{
    const char *p = code, *start, *end, *last_dot = NULL;
    int ok = 0;
    buf[0] = 0;
    while (*p == ' ' || *p == '\t')
        p++;
    start = p;
    if (!isalpha((unsigned char)*p) && *p != '_')
        return;
    while (isalnum((unsigned char)*p) || *p == '_' || *p == '.') {
        if (*p == '.')
            last_dot = p;
        p++;
    }
    end = p;
    if (*p == '(' && last_dot && p[-1] == '_') {
        end = last_dot; /* w.add_(...) */
        ok = 1;
    } else {
        int subscript = *p == '[';
        for (int depth = 0; subscript && *p; p++) { /* w[...] */
            if (*p == '[')
                depth++;
            else if (*p == ']' && --depth == 0) {
                p++;
                break;
            }
        }
        while (*p == ' ')
            p++;
        if (strchr("+-*/%&|^@<>", *p) && *p) {
            const char *q = p + 1;
            if (*q == *p && (*p == '*' || *p == '/' || *p == '<' || *p == '>'))
                q++; /* **= //= <<= >>= */
            ok = *q == '=' && q[1] != '=';
        } else if (subscript && *p == '=' && p[1] != '=') {
            ok = 1; /* w[...] = ... */
        }
    }
    size_t n = (size_t)(end - start);
    if (!ok || n == 0 || n >= len)
        return;
    memcpy(buf, start, n);
    buf[n] = 0;
}

/* The tensor last assigned to `name` before event `before`: the output of
 * the latest op whose user line reads "name = ...". 0 if none. */
static int64_t assigned_tensor(dctx *c, const char *name, int64_t before)
{
    sqlite3_stmt *st = NULL;
    int64_t t = 0;
    size_t n = strlen(name);
    if (sqlite3_prepare_v2(c->db,
                           "SELECT o.seq, c.text, (SELECT tensor FROM op_args a WHERE "
                           "a.op = o.seq AND a.role = 1 ORDER BY pos LIMIT 1) "
                           "FROM ops o JOIN stacks s ON s.id = o.stack "
                           "JOIN frames f ON f.id = coalesce(s.user_frame, s.frame) "
                           "JOIN strings c ON c.id = f.code "
                           "WHERE o.seq < ?1 ORDER BY o.seq DESC LIMIT 200000",
                           -1, &st, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_int64(st, 1, before);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *code = (const char *)sqlite3_column_text(st, 1);
        while (code && (*code == ' ' || *code == '\t'))
            code++;
        if (!code || strncmp(code, name, n) != 0 || sqlite3_column_type(st, 2) == SQLITE_NULL)
            continue;
        const char *p = code + n;
        while (*p == ' ')
            p++;
        if (*p == '=' && p[1] != '=') {
            t = sqlite3_column_int64(st, 2);
            break;
        }
    }
    sqlite3_finalize(st);
    return t;
}

static int diagnose_leaf_errors(dctx *c)
{
    sqlite3_stmt *st = NULL;
    int rc = 0, s;
    if (sqlite3_prepare_v2(c->db, sql_leaf_errors, -1, &st, NULL) != SQLITE_OK)
        return sql_fail(c);
    while (!rc && (s = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t seq = sqlite3_column_int64(st, 0), stack = sqlite3_column_int64(st, 2);
        char where[512], code[512];
        int64_t frame, leaf, op;
        stack_loc(c, stack, where, sizeof where, code, sizeof code, &frame);
        if ((rc = find_leaf(c, seq, frame, code, &leaf, &op)) != 0)
            break;
        char target[128];
        target_of(code, target, sizeof target);
        if (!leaf && target[0])
            leaf = assigned_tensor(c, target, seq);
        gt_finding *f = add_finding(c, GT_FINDING_LEAF_INPLACE, sqlite3_column_int64(st, 3));
        if (!f) {
            rc = nomem(c);
            break;
        }
        if (target[0] && !(f->name = strdup(target))) {
            rc = nomem(c);
            break;
        }
        f->first_to_fail = 1;
        f->tensor = leaf;
        f->stack = stack;
        f->op = op;
        f->error_seq = seq;
        rc = suggest(c, f, NULL);
    }
    if (!rc && s != SQLITE_DONE && s != SQLITE_ROW)
        rc = sql_fail(c);
    sqlite3_finalize(st);
    return rc;
}

/* ---- entry point ------------------------------------------------------- */

int gt_diagnose(gt_trace *t, const gt_diagnose_options *opts, gt_findings **out, char *err,
                size_t errlen)
{
    dctx c;
    int rc = 0;
    int64_t only = opts ? opts->backward : 0;
    sqlite3_stmt *calls = NULL;
    memset(&c, 0, sizeof c);
    c.db = gt_trace_db(t);
    c.err = err;
    c.errlen = errlen;
    if (!(c.f = calloc(1, sizeof *c.f))) {
        rc = nomem(&c);
        goto out;
    }
    if ((rc = gt__replayer_new(c.db, &c.rp, err, errlen)) != 0)
        goto out;
    struct {
        const char *sql;
        sqlite3_stmt **st;
    } stmts[] = {
        {sql_saved, &c.saved}, {sql_silent, &c.silent}, {sql_tensor, &c.tensor},
        {sql_silent_window, &c.silent_window}, {sql_silent_size, &c.silent_size},
        {sql_bwerr, &c.bwerr}, {sql_op, &c.op},         {sql_loc, &c.loc},
        {sql_names, &c.names}, {sql_calls, &calls},
    };
    for (size_t i = 0; i < sizeof stmts / sizeof stmts[0]; i++) {
        if (sqlite3_prepare_v3(c.db, stmts[i].sql, -1, SQLITE_PREPARE_PERSISTENT,
                               stmts[i].st, NULL) != SQLITE_OK) {
            rc = sql_fail(&c);
            goto out;
        }
    }
    if (only) {
        sqlite3_stmt *chk = NULL;
        int found = 0;
        if (sqlite3_prepare_v2(c.db, "SELECT 1 FROM backward_calls WHERE id = ?1", -1, &chk,
                               NULL) == SQLITE_OK) {
            sqlite3_bind_int64(chk, 1, only);
            found = sqlite3_step(chk) == SQLITE_ROW;
        }
        sqlite3_finalize(chk);
        if (!found) {
            snprintf(err, errlen, "no backward call %lld in %s", (long long)only,
                     gt_trace_path(t));
            rc = GT_EINVAL;
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
        if ((rc = gt__replay_backward(c.rp, only, &r, err, errlen)) != 0)
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
        rc = sql_fail(&c);
        goto out;
    }
    if (!only && (rc = diagnose_leaf_errors(&c)) != 0)
        goto out;
    if ((rc = gt__diagnose_silent(c.db, only, c.f, err, errlen)) != 0)
        goto out;
    *out = c.f;
    c.f = NULL;
out:
    sqlite3_finalize(calls);
    sqlite3_finalize(c.saved);
    sqlite3_finalize(c.silent);
    sqlite3_finalize(c.silent_window);
    sqlite3_finalize(c.silent_size);
    sqlite3_finalize(c.tensor);
    sqlite3_finalize(c.bwerr);
    sqlite3_finalize(c.op);
    sqlite3_finalize(c.loc);
    sqlite3_finalize(c.names);
    gt__replayer_free(c.rp);
    gt__imap_clear(&c.freed);
    gt_findings_free(c.f);
    return rc;
}
