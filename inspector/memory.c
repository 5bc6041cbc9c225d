/* The memory backward calls hold, by module, line and node type; see memory.h. */
#include <gradtrace/memory.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "grow.h"
#include "gtmap.h"
#include "trace_int.h"

/* ---- reading ------------------------------------------------------------ */

/* The failure of statement st's last step, on t. */
static int read_fail(gt_trace *t, int rc)
{
    if ((rc & 0xff) == SQLITE_NOMEM)
        return gt__trace_fail(t, GT_ENOMEM, "out of memory");
    return gt__trace_fail(t, GT_ECORRUPT, "cannot read trace: %s",
                          sqlite3_errmsg(gt_trace_db(t)));
}

static int oom(gt_trace *t)
{
    return gt__trace_fail(t, GT_ENOMEM, "out of memory");
}

static int64_t col_i64(sqlite3_stmt *st, int i, int64_t none)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? none : sqlite3_column_int64(st, i);
}

/* ---- module paths --------------------------------------------------------
 *
 * The forward ops are walked in order. Each op's stack gives its chain of
 * `X.forward` frames, outermost first; a frame is identified by its caller
 * (the stack under the module call: the same for every call from one line).
 * A chain's levels continue the previous op's calls while the caller is the
 * same and the line in that frame did not go back; otherwise a new call
 * (an invocation) starts there. An op reading a named parameter names its
 * innermost invocation and, one component less per level, the outer ones;
 * a name that disagrees with an invocation's starts new ones from there (two
 * Sequentials called from one line). */

typedef struct inv {
    int64_t parent;   /* index of the enclosing invocation, -1 none */
    int64_t slot;     /* the caller's stack id */
    int64_t line;     /* last line seen in its forward frame */
    const char *cls;  /* the frame's function, "BasicBlock.forward" */
    const char *call; /* the caller's source line */
    char *path;       /* named by a parameter, or derived, NULL before */
    int64_t last;     /* the number that ends its latest child's path, -1 */
} inv;

typedef struct frame {
    char *function, *code;
    int64_t line;
} frame;

typedef struct walker {
    gt_trace *t;
    gt_map stack_ix;               /* stacks.id -> index */
    int64_t *st_parent, *st_frame; /* parent index (-1), frames index (-1) */
    size_t nstacks;
    gt_map frame_ix; /* frames.id -> index */
    frame *frames;
    size_t nframes;
    int64_t *chain_at; /* per stack: offset into pool, -1 not yet */
    int64_t *chain_n;
    int64_t *pool; /* stack indexes of forward frames, outermost first */
    size_t npool, cappool;
    inv *invs;
    size_t ninvs, capinvs;
    gt_map op_inv; /* ops.seq -> invocation index + 1 */
} walker;

static void walker_release(walker *w)
{
    gt_map_clear(&w->stack_ix);
    gt_map_clear(&w->frame_ix);
    gt_map_clear(&w->op_inv);
    free(w->st_parent);
    free(w->st_frame);
    for (size_t i = 0; i < w->nframes; i++) {
        free(w->frames[i].function);
        free(w->frames[i].code);
    }
    free(w->frames);
    free(w->chain_at);
    free(w->chain_n);
    free(w->pool);
    for (size_t i = 0; i < w->ninvs; i++)
        free(w->invs[i].path);
    free(w->invs);
    memset(w, 0, sizeof *w);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* Is stack index i's frame a module's forward (a method named forward)? */
static const frame *frame_of(const walker *w, int64_t i)
{
    int64_t f = i >= 0 ? w->st_frame[i] : -1;
    return f >= 0 ? &w->frames[f] : NULL;
}

static int is_forward(const walker *w, int64_t i)
{
    const frame *f = frame_of(w, i);
    return f && f->function && ends_with(f->function, ".forward") &&
           strncmp(f->function, "Module.", 7) != 0;
}

/* Load stacks and frames. */
static int load_stacks(walker *w)
{
    static const char sql_frames[] =
        "SELECT fr.id, fn.text, fr.line, fc.text FROM frames fr"
        " LEFT JOIN strings fn ON fn.id = fr.function"
        " LEFT JOIN strings fc ON fc.id = fr.code";
    static const char sql_stacks[] = "SELECT id, parent, frame FROM stacks ORDER BY id";
    gt_trace *t = w->t;
    sqlite3_stmt *st = gt_trace_stmt(t, sql_frames);
    size_t cap = 0;
    int rc, bad = 0;
    if (!st)
        return gt_trace_errcode(t);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (GT_ALLOC_GROW(w->frames, w->nframes + 1, cap, 16) != 0)
            goto nomem;
        frame *f = &w->frames[w->nframes++];
        f->function = gt_column_dup(st, 1, &bad);
        f->line = col_i64(st, 2, 0);
        f->code = gt_column_dup(st, 3, &bad);
        if (bad || gt_map_put(&w->frame_ix, (uint64_t)sqlite3_column_int64(st, 0), 0, 0,
                              w->nframes - 1) < 0)
            goto nomem;
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return read_fail(t, rc);
    if (!(st = gt_trace_stmt(t, sql_stacks)))
        return gt_trace_errcode(t);
    size_t cap_parent = 0, cap_frame = 0, cap_id = 0;
    int64_t *parent_id = NULL;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (GT_ALLOC_GROW(w->st_parent, w->nstacks + 1, cap_parent, 16) != 0 ||
            GT_ALLOC_GROW(w->st_frame, w->nstacks + 1, cap_frame, 16) != 0 ||
            GT_ALLOC_GROW(parent_id, w->nstacks + 1, cap_id, 16) != 0)
            goto nomem_st;
        size_t i = w->nstacks++;
        parent_id[i] = col_i64(st, 1, 0);
        uint64_t *f = gt_map_get(&w->frame_ix, (uint64_t)col_i64(st, 2, 0), 0, 0);
        w->st_frame[i] = f ? (int64_t)*f : -1;
        if (gt_map_put(&w->stack_ix, (uint64_t)sqlite3_column_int64(st, 0), 0, 0, i) < 0)
            goto nomem_st;
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        free(parent_id);
        return read_fail(t, rc);
    }
    for (size_t i = 0; i < w->nstacks; i++) {
        uint64_t *p =
            parent_id[i] ? gt_map_get(&w->stack_ix, (uint64_t)parent_id[i], 0, 0) : NULL;
        w->st_parent[i] = p ? (int64_t)*p : -1;
    }
    free(parent_id);
    w->chain_at = malloc((w->nstacks + 1) * sizeof *w->chain_at);
    w->chain_n = malloc((w->nstacks + 1) * sizeof *w->chain_n);
    if (!w->chain_at || !w->chain_n)
        return oom(t);
    for (size_t i = 0; i < w->nstacks; i++)
        w->chain_at[i] = -1;
    return 0;
nomem_st:
    sqlite3_reset(st);
    free(parent_id);
    return oom(t);
nomem:
    sqlite3_reset(st);
    return oom(t);
}

/* The forward frames of stack index s, outermost first: *n entries at
 * w->pool + returned offset; -1 when out of memory. */
static int64_t chain(walker *w, int64_t s, int64_t *n)
{
    if (w->chain_at[s] >= 0) {
        *n = w->chain_n[s];
        return w->chain_at[s];
    }
    int64_t at = (int64_t)w->npool, k = 0;
    /* innermost first, then reversed; a damaged file's cycle ends after
     * nstacks steps */
    size_t steps = 0;
    for (int64_t i = s; i >= 0 && steps <= w->nstacks; i = w->st_parent[i], steps++) {
        if (!is_forward(w, i))
            continue;
        if (GT_ALLOC_GROW(w->pool, w->npool + 1, w->cappool, 16) != 0)
            return -1;
        w->pool[w->npool++] = i;
        k++;
    }
    for (int64_t a = at, b = at + k - 1; a < b; a++, b--) {
        int64_t x = w->pool[a];
        w->pool[a] = w->pool[b];
        w->pool[b] = x;
    }
    w->chain_at[s] = at;
    w->chain_n[s] = k;
    *n = k;
    return at;
}

/* The source line that called the module whose forward frame is stack
 * index i: the first frame under it that is not nn.Module's call
 * machinery. NULL if none. */
static const char *caller_code(const walker *w, int64_t i)
{
    size_t steps = 0;
    for (int64_t p = w->st_parent[i]; p >= 0 && steps <= w->nstacks;
         p = w->st_parent[p], steps++) {
        const frame *f = frame_of(w, p);
        if (f && f->function && !strncmp(f->function, "Module._", 8))
            continue;
        return f ? f->code : NULL;
    }
    return NULL;
}

static int64_t new_inv(walker *w, int64_t parent, int64_t s)
{
    if (GT_ALLOC_GROW(w->invs, w->ninvs + 1, w->capinvs, 16) != 0)
        return -1;
    inv *v = &w->invs[w->ninvs];
    const frame *f = frame_of(w, s);
    v->parent = parent;
    v->slot = w->st_parent[s];
    v->line = f ? f->line : 0;
    v->cls = f ? f->function : NULL;
    v->call = caller_code(w, s);
    v->path = NULL;
    v->last = -1;
    return (int64_t)w->ninvs++;
}

/* The first n dot-separated components of name, malloc'd; NULL when out of
 * memory. */
static char *prefix(const char *name, int64_t n)
{
    const char *e = name;
    for (int64_t k = 0; k < n; k++) {
        e = strchr(e, '.');
        if (!e) {
            e = name + strlen(name);
            break;
        }
        if (k + 1 < n)
            e++;
    }
    return strndup(name, (size_t)(e - name));
}

static int64_t components(const char *name)
{
    int64_t n = 1;
    for (; *name; name++)
        n += *name == '.';
    return n;
}

/* The attribute `self.<attr>(` of line `code` that calls a module of class
 * cls ("ReLU.forward"): the only one, else the one whose name is the
 * class's (case aside). Written into out (size bytes); 0 if none. */
static int call_attr(const char *code, const char *cls, char *out, size_t size)
{
    char cand[8][64];
    int n = 0;
    for (const char *p = code ? strstr(code, "self.") : NULL; p && n < 8;
         p = strstr(p + 5, "self.")) {
        const char *a = p + 5, *e = a;
        while ((*e >= 'a' && *e <= 'z') || (*e >= 'A' && *e <= 'Z') ||
               (*e >= '0' && *e <= '9') || *e == '_')
            e++;
        if (e > a && *e == '(' && (size_t)(e - a) < sizeof cand[0]) {
            memcpy(cand[n], a, (size_t)(e - a));
            cand[n++][e - a] = '\0';
        }
    }
    int pick = n == 1 ? 0 : -1;
    size_t cl = cls ? strcspn(cls, ".") : 0;
    for (int i = 0; pick < 0 && i < n; i++) {
        size_t al = strlen(cand[i]), m = al < cl ? al : cl;
        if (m >= 3 && !strncasecmp(cand[i], cls, m))
            pick = i;
    }
    if (pick < 0 || strlen(cand[pick]) >= size)
        return 0;
    strcpy(out, cand[pick]);
    return 1;
}

/* Give invocation v the path `p` (taken) where it has none. */
static void name_inv(walker *w, int64_t v, char *p)
{
    if (w->invs[v].path)
        free(p);
    else
        w->invs[v].path = p;
}

/* The walk of the forward ops in order: the invocations the last op ran
 * in, and the parameter names read along. */
typedef struct opwalk {
    int64_t *cur; /* invocation index per level, outermost first */
    size_t depth, cap;
    sqlite3_stmt *pst; /* the ops' parameter names, stepped along with the ops */
    int prc;           /* its last step */
    char *pname;       /* the current op's first parameter name, or NULL */
} opwalk;

/* Step o->pst to op seq's rows and take the first name it reads into
 * o->pname (NULL when none), past the rest. Returns 0, or -1 when out of
 * memory. */
static int read_param(opwalk *o, int64_t seq)
{
    int64_t pop = -1;
    free(o->pname);
    o->pname = NULL;
    while (o->prc == SQLITE_ROW && (pop = sqlite3_column_int64(o->pst, 0)) < seq)
        o->prc = sqlite3_step(o->pst);
    if (o->prc != SQLITE_ROW || pop != seq)
        return 0;
    int bad = 0;
    o->pname = gt_column_dup(o->pst, 1, &bad);
    if (bad)
        return -1;
    while (o->prc == SQLITE_ROW && sqlite3_column_int64(o->pst, 0) == seq)
        o->prc = sqlite3_step(o->pst);
    return 0;
}

/* How many levels of the op's chain (n forward frames at w->pool + at)
 * continue the current invocations: the same caller, the same forward,
 * and not back to an earlier line of it. Their lines move on. Can't
 * fail. */
static size_t continued_levels(walker *w, const opwalk *o, int64_t at, int64_t n)
{
    size_t keep = 0;
    while (keep < (size_t)n && keep < o->depth) {
        int64_t fs = w->pool[at + (int64_t)keep];
        inv *v = &w->invs[o->cur[keep]];
        const frame *f = frame_of(w, fs);
        int64_t line = f ? f->line : 0;
        if (v->slot != w->st_parent[fs] || line < v->line || !f || !v->cls ||
            !f->function || strcmp(v->cls, f->function) != 0)
            break;
        v->line = line;
        keep++;
    }
    return keep;
}

/* The components of the op's parameter name that name its modules (one
 * per level, the innermost last), 0 when it names none: without its last
 * component, or none when it is below the op's own module's path (a
 * module reading its child's parameter: MultiheadAttention's
 * out_proj.weight). Can't fail. */
static int64_t named_levels(const walker *w, const opwalk *o, size_t keep, int64_t n)
{
    int64_t m = o->pname ? components(o->pname) - 1 : 0;
    if (m > 0 && keep == (size_t)n && w->invs[o->cur[n - 1]].path) {
        const char *own = w->invs[o->cur[n - 1]].path;
        size_t ol = strlen(own);
        if (!strncmp(o->pname, own, ol) && o->pname[ol] == '.' &&
            strchr(o->pname + ol + 1, '.'))
            m = 0;
    }
    return m;
}

/* A parameter naming a continued level otherwise than its invocation: a
 * new call from there. *keep is cut to that level. Returns 0, or -1 when
 * out of memory. */
static int cut_renamed(const walker *w, const opwalk *o, int64_t m, int64_t n,
                       size_t *keep)
{
    for (size_t j = 0; j < *keep && m > 0; j++) {
        int64_t len = m - (n - 1 - (int64_t)j);
        if (len <= 0 || !w->invs[o->cur[j]].path)
            continue;
        char *p = prefix(o->pname, len);
        if (!p)
            return -1;
        int differs = strcmp(p, w->invs[o->cur[j]].path) != 0;
        free(p);
        if (differs) {
            *keep = j;
            break;
        }
    }
    return 0;
}

/* Place op seq, whose stack is index s: continue the current invocations
 * as far as they match, open new ones for the rest of its chain, name
 * them from its parameter, and map the op to its innermost. Returns 0, or
 * -1 when out of memory. */
static int place_op(walker *w, opwalk *o, int64_t seq, int64_t s)
{
    int64_t n, at = chain(w, s, &n);
    if (at < 0)
        return -1;
    if (n == 0)
        return 0;
    size_t keep = continued_levels(w, o, at, n);
    int64_t m = named_levels(w, o, keep, n);
    if (cut_renamed(w, o, m, n, &keep) != 0)
        return -1;
    o->depth = keep;
    for (int64_t j = (int64_t)keep; j < n; j++) {
        if (GT_ALLOC_GROW(o->cur, o->depth + 1, o->cap, 16) != 0)
            return -1;
        int64_t v = new_inv(w, o->depth ? o->cur[o->depth - 1] : -1, w->pool[at + j]);
        if (v < 0)
            return -1;
        o->cur[o->depth++] = v;
    }
    for (int64_t j = n - 1; j >= 0 && m > 0; j--) {
        int64_t len = m - (n - 1 - j);
        if (len <= 0)
            break;
        char *p = prefix(o->pname, len);
        if (!p)
            return -1;
        name_inv(w, o->cur[j], p);
    }
    return gt_map_put(&w->op_inv, (uint64_t)seq, 0, 0, (uint64_t)o->cur[n - 1] + 1) < 0
               ? -1
               : 0;
}

/* The paths no parameter gave: the parent's and the caller's attribute,
 * or in a container called by index (nn.Sequential) the number after the
 * previous child's. Returns 0, or -1 when out of memory. */
static int derive_paths(walker *w)
{
    for (size_t i = 0; i < w->ninvs; i++) {
        inv *v = &w->invs[i];
        inv *up = v->parent >= 0 ? &w->invs[v->parent] : NULL;
        const char *pp = up ? up->path : NULL;
        if (!v->path) {
            char part[72];
            if (pp && call_attr(v->call, v->cls, part, sizeof part))
                ;
            else if (pp && up->last >= 0)
                snprintf(part, sizeof part, "%" PRId64, up->last + 1);
            else
                snprintf(part, sizeof part, "<%.*s>",
                         (int)(v->cls ? strcspn(v->cls, ".") : 0) % 64,
                         v->cls ? v->cls : "");
            size_t len = (pp ? strlen(pp) + 1 : 0) + strlen(part) + 1;
            if (!(v->path = malloc(len)))
                return -1;
            snprintf(v->path, len, "%s%s%s", pp ? pp : "", pp ? "." : "", part);
        }
        /* a child numbered under its parent: the next may follow it */
        const char *dot = strrchr(v->path, '.'), *end = NULL;
        if (up && dot && dot[1] >= '0' && dot[1] <= '9') {
            long long k = strtoll(dot + 1, (char **)&end, 10);
            if (end && *end == '\0')
                up->last = k;
        }
    }
    return 0;
}

/* Walk the forward ops and give each op an invocation with a path.
 * Returns 0, or a negative GT_E* code with the message on the trace. */
static int walk_ops(walker *w)
{
    static const char sql_ops[] = "SELECT seq, stack FROM ops"
                                  " WHERE phase <> 1 AND stack IS NOT NULL ORDER BY seq";
    /* the parameters and buffers an op reads, as the recorder named them
     * (module walk names hold a dot; list items a bracket) */
    static const char sql_params[] =
        "SELECT a.op, sn.text FROM op_args a JOIN names n ON n.tensor = a.tensor"
        " JOIN strings sn ON sn.id = n.name JOIN ops o ON o.seq = a.op"
        " WHERE a.role = 0 AND o.phase <> 1 AND instr(sn.text, '.') > 0"
        " AND instr(sn.text, '[') = 0 ORDER BY a.op, a.pos, n.seq";
    gt_trace *t = w->t;
    sqlite3_stmt *ops = gt_trace_stmt(t, sql_ops);
    opwalk o = {0};
    int rc = 0, s;
    /* both statements are stepped together, in op order */
    if (!ops || !(o.pst = gt_trace_stmt(t, sql_params))) {
        if (ops)
            sqlite3_reset(ops);
        return gt_trace_errcode(t);
    }
    o.prc = sqlite3_step(o.pst);
    while ((s = sqlite3_step(ops)) == SQLITE_ROW) {
        int64_t seq = sqlite3_column_int64(ops, 0);
        uint64_t *si =
            gt_map_get(&w->stack_ix, (uint64_t)sqlite3_column_int64(ops, 1), 0, 0);
        if (read_param(&o, seq) != 0 || (si && place_op(w, &o, seq, (int64_t)*si) != 0))
            goto nomem;
    }
    if (s != SQLITE_DONE || (o.prc != SQLITE_ROW && o.prc != SQLITE_DONE)) {
        rc = read_fail(t, s != SQLITE_DONE ? s : o.prc);
        goto out;
    }
    if (derive_paths(w) == 0)
        goto out;
nomem:
    rc = oom(t);
out:
    free(o.pname);
    free(o.cur);
    sqlite3_reset(o.pst);
    sqlite3_reset(ops);
    return rc;
}

/* The module path of op `seq` ("" outside modules). */
static const char *op_module(const walker *w, int64_t seq)
{
    uint64_t *v = seq > 0 ? gt_map_get(&w->op_inv, (uint64_t)seq, 0, 0) : NULL;
    return v ? w->invs[*v - 1].path : "";
}

/* ---- one backward call ---------------------------------------------------- */

/* The saved tensors a backward call holds: ?1 the call, in save order. */
#define REACH_CTE                                                                        \
    "WITH RECURSIVE reach(node) AS ("                                                    \
    " SELECT node FROM backward_roots WHERE backward = ?1 AND node IS NOT NULL"          \
    " UNION SELECT e.next FROM edges e JOIN reach r ON e.node = r.node"                  \
    " WHERE e.next IS NOT NULL) "
#define FREED_BEFORE                                                                     \
    "(SELECT x.node FROM node_execs x JOIN backward_calls b ON b.id = x.backward"        \
    " WHERE x.backward < ?1 AND b.retain_graph = 0 AND b.create_graph = 0)"
#define FIRST_ON_STORAGE(col)                                                            \
    "(SELECT " col " FROM tensors t2 WHERE t2.storage = t.storage"                       \
    " ORDER BY t2.seq, t2.id LIMIT 1)"

static const char sql_rows[] = REACH_CTE
    "SELECT s.seq, coalesce(se.saved_seq, s.seq) AS at, s.node, nn.text,"
    " sl.text, s.tensor, t.storage, sg.nbytes, s.nbytes, sd.text, t.shape, nd.op,"
    " CASE WHEN t.storage IS NULL THEN t.created_by"
    " ELSE " FIRST_ON_STORAGE(
        "t2.created_by") " END,"
                         " CASE WHEN t.storage IS NULL THEN t.is_leaf AND t.requires_grad"
                         " ELSE (SELECT max(t2.is_leaf AND t2.requires_grad) FROM "
                         "tensors t2"
                         " WHERE t2.storage = t.storage) END,"
                         " ff.text, fr.line, fc.text"
                         " FROM reach r JOIN saved_tensors s ON s.node = r.node"
                         " JOIN nodes nd ON nd.id = s.node"
                         " LEFT JOIN strings nn ON nn.id = nd.name"
                         " LEFT JOIN strings sl ON sl.id = s.slot"
                         " LEFT JOIN saved_earlier se ON se.saved = s.seq"
                         " LEFT JOIN tensors t ON t.id = s.tensor"
                         " LEFT JOIN storages sg ON sg.id = t.storage"
                         " LEFT JOIN strings sd ON sd.id = t.dtype"
                         " LEFT JOIN ops o ON o.seq = nd.op"
                         " LEFT JOIN stacks st ON st.id = o.stack"
                         " LEFT JOIN frames fr ON fr.id = st.user_frame"
                         " LEFT JOIN strings ff ON ff.id = fr.file"
                         " LEFT JOIN strings fc ON fc.id = fr.code"
                         " WHERE s.node NOT IN " FREED_BEFORE " ORDER BY at, s.seq";

/* Every graph's saved tensors not yet freed when call ?1 starts (at ?2). */
static const char sql_live[] =
    "SELECT coalesce(sum(b), 0) FROM (SELECT max(coalesce(sg.nbytes, s.nbytes, 0)) AS b"
    " FROM saved_tensors s LEFT JOIN saved_earlier se ON se.saved = s.seq"
    " LEFT JOIN tensors t ON t.id = s.tensor LEFT JOIN storages sg ON sg.id = t.storage"
    " WHERE coalesce(se.saved_seq, s.seq) < ?2 AND s.node NOT IN " FREED_BEFORE
    " GROUP BY CASE WHEN t.storage IS NULL THEN -s.seq ELSE t.storage END)";

typedef struct row {
    int64_t seq, at, node, tensor, storage, nbytes, op, maker;
    int64_t key, bytes; /* the storage (or -seq), and its bytes */
    int param, first;   /* a parameter's storage; the storage's first holder */
    char *node_name, *slot, *dtype, *shape, *file, *code;
    int64_t line;
    const char *module;  /* the walker's */
    const char *made_in; /* the module of the storage's maker, NULL if unknown */
    size_t gi[3];        /* its group in each breakdown */
} row;

static void rows_free(row *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(r[i].node_name);
        free(r[i].slot);
        free(r[i].dtype);
        free(r[i].shape);
        free(r[i].file);
        free(r[i].code);
    }
    free(r);
}

/* file relative to cwd when under it, malloc'd into *out. */
static char *rel(const char *cwd, char *file)
{
    size_t n = cwd ? strlen(cwd) : 0;
    if (file && n && !strncmp(file, cwd, n) && file[n] == '/')
        memmove(file, file + n + 1, strlen(file + n + 1) + 1);
    return file;
}

static int load_rows(walker *w, const char *cwd, int64_t call, row **out, size_t *nout)
{
    gt_trace *t = w->t;
    sqlite3_stmt *st = gt_trace_stmt(t, sql_rows);
    row *r = NULL;
    size_t n = 0, cap = 0;
    int rc, bad = 0;
    if (!st)
        return gt_trace_errcode(t);
    sqlite3_bind_int64(st, 1, call);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (GT_ALLOC_GROW(r, n + 1, cap, 16) != 0) {
            bad = 1;
            break;
        }
        row *x = &r[n++];
        memset(x, 0, sizeof *x);
        x->seq = sqlite3_column_int64(st, 0);
        x->at = sqlite3_column_int64(st, 1);
        x->node = sqlite3_column_int64(st, 2);
        x->node_name = gt_column_dup(st, 3, &bad);
        x->slot = gt_column_dup(st, 4, &bad);
        x->tensor = col_i64(st, 5, 0);
        x->storage = col_i64(st, 6, 0);
        int64_t sbytes = col_i64(st, 7, -1);
        x->nbytes = col_i64(st, 8, -1);
        x->dtype = gt_column_dup(st, 9, &bad);
        x->shape = gt_column_dup(st, 10, &bad);
        x->op = col_i64(st, 11, 0);
        x->maker = col_i64(st, 12, 0);
        x->param = (int)col_i64(st, 13, 0);
        x->file = rel(cwd, gt_column_dup(st, 14, &bad));
        x->line = col_i64(st, 15, 0);
        x->code = gt_column_dup(st, 16, &bad);
        x->key = x->storage ? x->storage : -x->seq;
        x->bytes = x->storage && sbytes >= 0 ? sbytes : x->nbytes > 0 ? x->nbytes : 0;
        x->module = op_module(w, x->op);
        x->made_in = x->maker ? op_module(w, x->maker) : NULL;
        if (bad)
            break;
    }
    sqlite3_reset(st);
    if (bad) {
        rows_free(r, n);
        return oom(t);
    }
    if (rc != SQLITE_DONE) {
        rows_free(r, n);
        return read_fail(t, rc);
    }
    /* each storage's first holder (rows are in save order) */
    gt_map first = {0};
    for (size_t i = 0; i < n; i++) {
        int added = 0;
        uint64_t *v = gt_map_upsert(&first, (uint64_t)r[i].key, 0, 0, &added);
        if (!v) {
            gt_map_clear(&first);
            rows_free(r, n);
            return oom(t);
        }
        r[i].first = added;
    }
    gt_map_clear(&first);
    *out = r;
    *nout = n;
    return 0;
}

/* ---- breakdowns ---------------------------------------------------------- */

static const row *sort_rows; /* qsort has no context argument in C11 */

static int by_key_then_seq(const void *a, const void *b)
{
    const row *x = &sort_rows[*(const size_t *)a], *y = &sort_rows[*(const size_t *)b];
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

static int group_desc(const void *a, const void *b)
{
    const gt_mem_group *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return x->first_seq < y->first_seq ? -1 : x->first_seq > y->first_seq;
}

static int tensor_desc(const void *a, const void *b)
{
    const gt_mem_tensor *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int module_desc(const void *a, const void *b)
{
    const gt_mem_module *x = a, *y = b;
    if (x->frees != y->frees)
        return x->frees > y->frees ? -1 : 1;
    if (x->held != y->held)
        return x->held > y->held ? -1 : 1;
    return strcmp(x->path, y->path);
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The key of row r in breakdown k, into buf. */
static const char *group_key(const row *r, int k, char *buf, size_t size)
{
    if (k == 0)
        return r->module;
    if (k == 2)
        return r->node_name ? r->node_name : "?";
    if (!r->file)
        return "";
    snprintf(buf, size, "%s:%" PRId64, r->file, r->line);
    return buf;
}

static const gt_mem_group *sort_groups;

static int group_desc_ix(const void *a, const void *b)
{
    return group_desc(&sort_groups[*(const size_t *)a], &sort_groups[*(const size_t *)b]);
}

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void groups_free(gt_mem_group *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(g[i].key);
        free(g[i].code);
    }
    free(g);
}

/* Breakdown k of the rows into *g / *ng (sorted by bytes), each row's
 * group in r->gi[k]. 0, or -1 when out of memory. */
static int group(row *r, size_t n, int k, gt_mem_group **g, size_t *ng)
{
    gt_mem_group *out = NULL, *sorted = NULL;
    size_t m = 0, cap = 0, *order = NULL, *rank = NULL;
    gt_map ix = {0}; /* key hash -> the first group with that hash */
    char buf[4096];
    int rc = -1;
    for (size_t i = 0; i < n; i++) {
        const char *key = group_key(&r[i], k, buf, sizeof buf);
        uint64_t h = hash(key), *v = gt_map_get(&ix, h, 0, 0);
        size_t gi = m;
        if (v && !strcmp(out[*v].key, key))
            gi = (size_t)*v;
        else if (v) /* another key with that hash: look through them all */
            for (gi = 0; gi < m && strcmp(out[gi].key, key); gi++)
                ;
        if (gi == m) {
            if ((!v && gt_map_put(&ix, h, 0, 0, m) < 0) ||
                GT_ALLOC_GROW(out, m + 1, cap, 16) != 0)
                goto out;
            memset(&out[m], 0, sizeof out[m]);
            out[m].first_seq = r[i].at;
            m++;
            if (!(out[gi].key = strdup(key)) ||
                (k == 1 && r[i].code && !(out[gi].code = strdup(r[i].code))))
                goto out;
        }
        out[gi].saved++;
        if (r[i].first)
            out[gi].bytes += r[i].bytes;
        r[i].gi[k] = gi;
    }
    if (!(order = malloc((m + 1) * sizeof *order)) ||
        !(rank = malloc((m + 1) * sizeof *rank)) ||
        !(sorted = malloc((m + 1) * sizeof *sorted)))
        goto out;
    for (size_t i = 0; i < m; i++)
        order[i] = i;
    sort_groups = out;
    qsort(order, m, sizeof *order, group_desc_ix);
    for (size_t i = 0; i < m; i++) {
        sorted[i] = out[order[i]];
        rank[order[i]] = i;
    }
    for (size_t i = 0; i < n; i++)
        r[i].gi[k] = rank[r[i].gi[k]];
    free(out);
    out = sorted;
    sorted = NULL;
    rc = 0;
out:
    gt_map_clear(&ix);
    free(order);
    free(rank);
    free(sorted);
    if (rc < 0) {
        groups_free(out, m);
        return -1;
    }
    *g = out;
    *ng = m;
    return 0;
}

/* Is module path p at or under module m? */
static int under(const char *p, const char *m)
{
    size_t n = strlen(m);
    return p && !strncmp(p, m, n) && (p[n] == '\0' || p[n] == '.');
}

/* What checkpointing each module would free. */
static int modules(const row *r, size_t n, gt_mem_module **out, size_t *nout)
{
    char **paths = NULL;
    size_t np = 0, cap = 0;
    size_t *order = NULL;
    gt_mem_module *mods = NULL;
    size_t nm = 0;
    int rc = -1;
    for (size_t i = 0; i < n; i++) {
        const char *p = r[i].module;
        if (!*p)
            continue;
        for (const char *e = p;; e++) {
            if (*e != '.' && *e != '\0')
                continue;
            if (GT_ALLOC_GROW(paths, np + 1, cap, 16) != 0 ||
                !(paths[np] = strndup(p, (size_t)(e - p))))
                goto out;
            np++;
            if (!*e)
                break;
        }
    }
    if (np) /* paths is NULL when there are none */
        qsort(paths, np, sizeof *paths, str_cmp);
    if (!(mods = calloc(np + 1, sizeof *mods)) ||
        !(order = malloc((n + 1) * sizeof *order)))
        goto out;
    for (size_t i = 0; i < np; i++) {
        if (nm && !strcmp(mods[nm - 1].path, paths[i])) {
            free(paths[i]);
            continue;
        }
        mods[nm++].path = paths[i];
    }
    np = 0;
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    sort_rows = r;
    qsort(order, n, sizeof *order, by_key_then_seq);
    for (size_t k = 0; k < nm; k++) {
        gt_mem_module *m = &mods[k];
        for (size_t a = 0, b; a < n; a = b) {
            int any = 0, all = 1;
            for (b = a; b < n && r[order[b]].key == r[order[a]].key; b++) {
                int in = under(r[order[b]].module, m->path);
                any |= in;
                all &= in;
            }
            if (!any)
                continue;
            const row *f = &r[order[a]]; /* the first holder */
            m->held += f->bytes;
            if (!f->maker || !under(f->made_in, m->path))
                m->kept += f->bytes;
            else if (!all)
                m->shared += f->bytes;
            else
                m->frees += f->bytes;
        }
    }
    qsort(mods, nm, sizeof *mods, module_desc);
    rc = 0;
out:
    for (size_t i = 0; i < np; i++)
        free(paths[i]);
    free(paths);
    free(order);
    if (rc < 0) {
        for (size_t i = 0; i < nm; i++)
            free(mods[i].path);
        free(mods);
        return -1;
    }
    *out = mods;
    *nout = nm;
    return 0;
}

/* Fill call c's totals from its rows, and its breakdowns if detailed. */
static int measure(gt_mem_call *c, row *r, size_t n, int detailed)
{
    c->saved = (int64_t)n;
    for (size_t i = 0; i < n; i++) {
        if (!r[i].first)
            continue;
        c->storages++;
        c->bytes += r[i].bytes;
        if (r[i].param)
            c->param_bytes += r[i].bytes;
    }
    if (!detailed)
        return 0;
    c->detailed = 1;
    if (group(r, n, 0, &c->by_module, &c->n_module) < 0 ||
        group(r, n, 1, &c->by_line, &c->n_line) < 0 ||
        group(r, n, 2, &c->by_node, &c->n_node) < 0 ||
        modules(r, n, &c->modules, &c->n_modules) < 0)
        return -1;
    if (!(c->timeline = calloc(n + 1, sizeof *c->timeline)) ||
        !(c->tensors = calloc(c->storages + 1, sizeof *c->tensors)))
        return -1;
    gt_map holders = {0};
    for (size_t i = 0; i < n; i++) {
        int added;
        uint64_t *v = gt_map_upsert(&holders, (uint64_t)r[i].key, 0, 0, &added);
        if (!v) {
            gt_map_clear(&holders);
            return -1;
        }
        ++*v;
    }
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].first)
            sum += r[i].bytes;
        c->timeline[c->n_points++] = (gt_mem_point){r[i].at, sum, r[i].gi[0]};
        if (!r[i].first)
            continue;
        gt_mem_tensor *x = &c->tensors[c->n_tensors++];
        x->seq = r[i].seq;
        x->node = r[i].node;
        x->tensor = r[i].tensor;
        x->storage = r[i].storage;
        x->bytes = r[i].bytes;
        x->nbytes = r[i].nbytes;
        x->holders = (int64_t)*gt_map_get(&holders, (uint64_t)r[i].key, 0, 0);
        x->line = r[i].line;
        /* hand the strings over */
        x->node_name = r[i].node_name, r[i].node_name = NULL;
        x->slot = r[i].slot, r[i].slot = NULL;
        x->dtype = r[i].dtype, r[i].dtype = NULL;
        x->shape = r[i].shape, r[i].shape = NULL;
        x->file = r[i].file, r[i].file = NULL;
        x->code = r[i].code, r[i].code = NULL;
        if (!(x->module = strdup(r[i].module))) {
            gt_map_clear(&holders);
            return -1;
        }
    }
    gt_map_clear(&holders);
    if (c->n_tensors)
        qsort(c->tensors, c->n_tensors, sizeof *c->tensors, tensor_desc);
    return 0;
}

/* ---- the whole trace ------------------------------------------------------ */

static void call_release(gt_mem_call *c)
{
    free(c->api);
    free(c->status);
    free(c->file);
    free(c->code);
    gt_mem_group *gs[] = {c->by_module, c->by_line, c->by_node};
    size_t ns[] = {c->n_module, c->n_line, c->n_node};
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < ns[k]; i++) {
            free(gs[k][i].key);
            free(gs[k][i].code);
        }
        free(gs[k]);
    }
    for (size_t i = 0; i < c->n_tensors; i++) {
        gt_mem_tensor *x = &c->tensors[i];
        free(x->node_name);
        free(x->slot);
        free(x->dtype);
        free(x->shape);
        free(x->module);
        free(x->file);
        free(x->code);
    }
    free(c->tensors);
    for (size_t i = 0; i < c->n_modules; i++)
        free(c->modules[i].path);
    free(c->modules);
    free(c->timeline);
}

void gt_memory_free(gt_memory *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        call_release(&m->calls[i]);
    free(m->calls);
    free(m);
}

static int load_calls(gt_trace *t, const char *cwd, gt_memory *m)
{
    static const char sql[] =
        "SELECT b.id, b.seq, sa.text, b.status, ff.text, fr.line, fc.text"
        " FROM backward_calls b LEFT JOIN strings sa ON sa.id = b.api"
        " LEFT JOIN stacks st ON st.id = b.stack LEFT JOIN frames fr ON fr.id = "
        "st.user_frame"
        " LEFT JOIN strings ff ON ff.id = fr.file LEFT JOIN strings fc ON fc.id = fr.code"
        " ORDER BY b.id";
    sqlite3_stmt *st = gt_trace_stmt(t, sql);
    size_t cap = 0;
    int rc, bad = 0;
    if (!st)
        return gt_trace_errcode(t);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (GT_ALLOC_GROW(m->calls, m->n + 1, cap, 16) != 0) {
            bad = 1;
            break;
        }
        gt_mem_call *c = &m->calls[m->n++];
        memset(c, 0, sizeof *c);
        c->id = sqlite3_column_int64(st, 0);
        c->seq = sqlite3_column_int64(st, 1);
        c->api = gt_column_dup(st, 2, &bad);
        c->status = gt_column_dup(st, 3, &bad);
        c->file = rel(cwd, gt_column_dup(st, 4, &bad));
        c->line = col_i64(st, 5, 0);
        c->code = gt_column_dup(st, 6, &bad);
        if (bad)
            break;
    }
    sqlite3_reset(st);
    if (bad)
        return oom(t);
    return rc == SQLITE_DONE ? 0 : read_fail(t, rc);
}

static int live_bytes(gt_trace *t, gt_mem_call *c)
{
    sqlite3_stmt *st = gt_trace_stmt(t, sql_live);
    if (!st)
        return gt_trace_errcode(t);
    sqlite3_bind_int64(st, 1, c->id);
    sqlite3_bind_int64(st, 2, c->seq);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        c->live_bytes = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return rc == SQLITE_ROW ? 0 : read_fail(t, rc);
}

int gt_memory_measure(gt_trace *t, const gt_memory_options *options, gt_memory **out)
{
    gt_memory_options none = {0};
    const gt_memory_options *o = options ? options : &none;
    walker w = {.t = t};
    gt_memory *m = calloc(1, sizeof *m);
    char *cwd = NULL;
    int rc = 0;
    gt__trace_clear(t);
    if (!m)
        return oom(t);
    {
        sqlite3_stmt *st = gt_trace_stmt(t, "SELECT cwd FROM run WHERE id = 1");
        int bad = 0;
        if (!st) {
            rc = gt_trace_errcode(t);
            goto fail;
        }
        if (sqlite3_step(st) == SQLITE_ROW)
            cwd = gt_column_dup(st, 0, &bad);
        sqlite3_reset(st);
        if (bad) {
            rc = oom(t);
            goto fail;
        }
    }
    if ((rc = load_calls(t, cwd, m)) != 0)
        goto fail;
    if (o->backward) {
        size_t i = 0;
        while (i < m->n && m->calls[i].id != o->backward)
            i++;
        if (i == m->n) {
            rc = gt__trace_fail(t, GT_EINVAL,
                                "no backward call %" PRId64 " (%zu recorded)",
                                o->backward, m->n);
            goto fail;
        }
        m->chosen = i;
    }
    if (m->n == 0)
        goto done;
    if ((rc = load_stacks(&w)) != 0 || (rc = walk_ops(&w)) != 0)
        goto fail;
    /* totals first (the largest is chosen from them), then the details */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < m->n; i++) {
            gt_mem_call *c = &m->calls[i];
            int detail = o->all || i == m->chosen;
            if (pass == 1 && !detail)
                continue;
            row *r = NULL;
            size_t n = 0;
            if ((rc = load_rows(&w, cwd, c->id, &r, &n)) != 0)
                goto fail;
            if (pass == 1) { /* start over with the details */
                int64_t live = c->live_bytes;
                c->bytes = c->param_bytes = c->saved = c->storages = 0;
                c->live_bytes = live;
            }
            int bad = measure(c, r, n, pass == 1);
            rows_free(r, n);
            if (bad) {
                rc = oom(t);
                goto fail;
            }
            if (pass == 0 && (rc = live_bytes(t, c)) != 0)
                goto fail;
        }
        if (pass == 0 && !o->backward)
            for (size_t i = 1; i < m->n; i++)
                if (m->calls[i].bytes > m->calls[m->chosen].bytes)
                    m->chosen = i;
    }
done:
    walker_release(&w);
    free(cwd);
    *out = m;
    return 0;
fail:
    walker_release(&w);
    free(cwd);
    gt_memory_free(m);
    return rc;
}

const char *gt_mem_human(int64_t bytes, char *buf, size_t size)
{
    static const char *unit[] = {"KiB", "MiB", "GiB", "TiB"};
    if (bytes < 1024) {
        snprintf(buf, size, "%" PRId64 " B", bytes);
        return buf;
    }
    double v = (double)bytes / 1024;
    int u = 0;
    while (v >= 1024 && u < 3) {
        v /= 1024;
        u++;
    }
    snprintf(buf, size, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, unit[u]);
    return buf;
}

/* ---- the graph ------------------------------------------------------------ */

int gt_memory_paint(gt_trace *t, Agraph_t *g, int64_t backward)
{
    static const char sql[] = REACH_CTE
        "SELECT node, sum(b) FROM (SELECT s.node, max(coalesce(sg.nbytes,"
        " s.nbytes, 0)) AS b FROM reach r JOIN saved_tensors s ON s.node = r.node"
        " LEFT JOIN tensors t ON t.id = s.tensor"
        " LEFT JOIN storages sg ON sg.id = t.storage GROUP BY s.node,"
        " CASE WHEN t.storage IS NULL THEN -s.seq ELSE t.storage END)"
        " GROUP BY node ORDER BY node";
    sqlite3_stmt *st = gt_trace_stmt(t, sql);
    struct held {
        int64_t node, bytes;
    } *h = NULL;
    int64_t max = 0;
    size_t n = 0, cap = 0;
    int rc;
    gt_strbuf b = {0};
    if (!st)
        return gt_trace_errcode(t);
    sqlite3_bind_int64(st, 1, backward);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (GT_ALLOC_GROW(h, n + 1, cap, 16) != 0) {
            sqlite3_reset(st);
            rc = oom(t);
            goto out;
        }
        h[n].node = sqlite3_column_int64(st, 0);
        h[n].bytes = sqlite3_column_int64(st, 1);
        if (h[n].bytes > max)
            max = h[n].bytes;
        n++;
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        rc = read_fail(t, rc);
        goto out;
    }
    rc = 0;
    for (size_t i = 0; i < n; i++) {
        char name[32], hb[24], color[8], pen[16];
        snprintf(name, sizeof name, "n%" PRId64, h[i].node);
        Agnode_t *an = agnode(g, name, 0);
        if (!an || h[i].bytes <= 0)
            continue;
        double f = max ? (double)h[i].bytes / (double)max : 0;
        int gb = 255 - (int)(f * (255 - 77));
        snprintf(color, sizeof color, "#ff%02x%02x", gb, gb);
        snprintf(pen, sizeof pen, "%.1f", 1 + 4 * f);
        const char *label = agget(an, (char *)"label");
        const char *style = agget(an, (char *)"style");
        gt_strbuf_reset(&b);
        gt_strbuf_addf(&b, "%s\\nholds %s", label && *label ? label : "\\N",
                       gt_mem_human(h[i].bytes, hb, sizeof hb));
        if (b.oom) {
            rc = oom(t);
            goto out;
        }
        agsafeset(an, (char *)"label", (char *)gt_strbuf_str(&b), (char *)"");
        gt_strbuf_reset(&b);
        gt_strbuf_addf(&b, "%s%sfilled", style && *style ? style : "",
                       style && *style ? "," : "");
        if (b.oom) {
            rc = oom(t);
            goto out;
        }
        if (!style || !strstr(style, "filled"))
            agsafeset(an, (char *)"style", (char *)gt_strbuf_str(&b), (char *)"");
        agsafeset(an, (char *)"fillcolor", color, (char *)"");
        agsafeset(an, (char *)"penwidth", pen, (char *)"1");
    }
out:
    gt_strbuf_release(&b);
    free(h);
    return rc;
}
